//! The answers the server puts together itself: health, readiness, status, the dataset
//! listing, a dataset with its supervisor's health, a deletion, the active policy. (Every
//! other answer is a result or report of the engine, typed in `mend`.) Each is a type, so
//! that the OpenAPI document describes exactly what the handler writes.

use mend::model::Dataset;
use mend::runtime::registry::ActiveRecord;
use serde::Serialize;
use utoipa::ToSchema;

use super::supervisor::{DatasetHealth, FleetStatus};
use crate::error::ErrorCode;

/// `GET /healthz`: the process answers.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Health {
    /// Always `ok`.
    pub(crate) status: &'static str,
}

/// `GET /readyz`: the server has listed the catalog's datasets and is not shutting down.
/// It says nothing else: the probes answer anyone, and a dataset's name or a storage path
/// is not anyone's to know. Why a server or a dataset is not served is in `GET /v1/status`,
/// for the principals allowed to see it, and in the logs.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Readiness {
    /// Always true: a server that is not ready answers 503.
    pub(crate) ready: bool,
}

/// `GET /v1/status`: what the caller's grants allow it to see. Every principal sees the
/// policy, the writes in flight and the datasets it may read; the server's own details (the
/// catalog's location, the fleet, each dataset's owning replica, why the server is not
/// ready) need what `GET /v1/fleet` needs, `operate` on every dataset, and are left out
/// otherwise.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ServerStatus {
    /// The catalog, as its backend describes itself (its location).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) catalog: Option<String>,
    pub(crate) policy_digest: String,
    /// The active policy's name and version.
    pub(crate) policy: String,
    /// Writes admitted and not yet finished.
    pub(crate) writes_in_flight: usize,
    /// Whether the server serves (what `/readyz` says).
    pub(crate) ready: bool,
    /// Why it does not, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) not_ready_because: Option<String>,
    /// This replica in its fleet: the members, its load, rebalances and takeovers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fleet: Option<FleetStatus>,
    pub(crate) datasets: Vec<DatasetStatus>,
}

/// One dataset of the status: its versions, or why its state cannot be read.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum DatasetStatus {
    Readable {
        dataset_id: String,
        manifest_version: u64,
        config_version: u64,
        fencing_epoch: u64,
        /// The replica whose supervision it is, by this replica's last heartbeat; shown only
        /// with the fleet.
        #[serde(skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
        /// Its supervisor's last findings on this replica; null unless it had pending work,
        /// was unavailable or was kicked here lately.
        health: Option<DatasetHealth>,
    },
    Unreadable {
        dataset_id: String,
        /// Why its state cannot be read.
        unreadable: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
        health: Option<DatasetHealth>,
    },
}

/// One dataset of `GET /v1/datasets`: the dataset, or why its state cannot be read (the
/// listing does not fail for it).
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum DatasetListing {
    Readable(Dataset),
    Unreadable {
        dataset_id: String,
        error: ErrorCode,
        reason: String,
    },
}

/// `GET /v1/datasets/{dataset}`: the dataset and its supervisor's health.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ShownDataset {
    #[serde(flatten)]
    pub(crate) dataset: Dataset,
    /// Null before its supervisor's first check.
    pub(crate) health: Option<DatasetHealth>,
}

/// `POST /v1/datasets/{dataset}/delete`: the ids asked for, now gone.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Deleted {
    pub(crate) deleted: Vec<String>,
}

/// `GET /v1/policy`: the policy this server decides with, and the registry record that made
/// it active (none while the deployment runs the built-in default).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ActivePolicy {
    pub(crate) digest: String,
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) record: Option<ActiveRecord>,
}

/// `GET /v1/datasets/{dataset}/audit`: a page of the audit trail.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AuditPage {
    /// The records, oldest first: the newest that pass the filters, older than `before`.
    pub(crate) records: Vec<mend::audit::AuditEntry>,
    /// The `before` of the next, older page; null when the trail (or `since`) ended within
    /// this one. A full page always gives it, so the page after may be empty.
    pub(crate) next: Option<String>,
}

//! Audit records: one per recovery decision a sweep acts on (and per gc plan and reconcile
//! decision), so that every decision can be traced to the policy that made it and replayed
//! from the inputs it saw.
//!
//! A record names the policy by digest and semantics revision, hashes the observation the
//! policy was given (sha256 of its canonical JSON), and keeps the decision and what the host
//! did with it. Probe and verify sweeps write no records: they write nothing at all.
//!
//! A decision the host executes is recorded twice: with the outcome `executing` before its
//! first effect, and with its settled outcome after. An `executing` record with no settled
//! record after it means the process stopped (or the second append failed) while executing:
//! any part of the decision may have landed. Whether it finished is told by the operation's
//! intent: gone means finished (deleting it is always the last step), still there means the
//! next sweep observes what landed and decides again (see `engine::recovery`).

use serde::{Deserialize, Serialize};

use crate::error::{MendError, Result};
use crate::model::TimestampMs;

/// The audit format this host writes and the newest it reads.
pub const AUDIT_FORMAT_VERSION: u32 = 1;

/// One decision, the policy that made it and what the host did with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// [`AUDIT_FORMAT_VERSION`] when written by this host.
    pub format_version: u32,
    /// The dataset the decision was about.
    pub dataset_id: String,
    /// The operation decided about (a sweep's intent, a gc run, a reconcile).
    pub operation_id: String,
    /// When the record was appended.
    pub recorded_at_ms: TimestampMs,
    /// `probe`, `roll-forward`, `exclusive` or `verify`.
    pub mode: String,
    /// `sha256:<hex>` of the policy component that decided.
    pub policy_digest: String,
    /// The policy's semantics revision (see the WIT contract).
    pub semantics_revision: u32,
    /// `sha256:<hex>` of the canonical JSON of the observation the policy decided on.
    pub inputs_hash: String,
    /// The decision, as JSON.
    pub decision: serde_json::Value,
    /// What the host did with it, as JSON.
    pub outcome: serde_json::Value,
    /// The policy's whole input for this decision, so that another policy can be asked the
    /// same question ([`crate::runtime::replay`]). Absent in records written before replay
    /// existed; readers of this format that predate it ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<DecisionInput>,
    /// Who acted: the principal of the request ([`crate::Engine::acting_as`]), a server's
    /// supervisor (`supervisor@REPLICA`), or `cli`. Absent in records written before
    /// principals existed, and by an engine no one named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

/// What `mend audit` and `GET /v1/datasets/{dataset}/audit` show of a record: who did what,
/// when, with which policy, and what came of it (the policy's whole input, which a record
/// keeps for replay, is left out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// When the record was appended.
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub recorded_at_ms: TimestampMs,
    /// Who acted, if the record names it (records written before principals existed do not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// `roll-forward`, `exclusive`, `gc` or `reconcile`: what was run.
    pub mode: String,
    /// The operation decided about.
    pub operation_id: String,
    /// The decision, as JSON.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub decision: serde_json::Value,
    /// What the host did with it, as JSON (`executing` until it settled).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub outcome: serde_json::Value,
    /// The policy that decided.
    pub policy_digest: String,
}

impl From<&AuditRecord> for AuditEntry {
    fn from(record: &AuditRecord) -> Self {
        Self {
            recorded_at_ms: record.recorded_at_ms,
            principal: record.principal.clone(),
            mode: record.mode.clone(),
            operation_id: record.operation_id.clone(),
            decision: record.decision.clone(),
            outcome: record.outcome.clone(),
            policy_digest: record.policy_digest.clone(),
        }
    }
}

/// What a policy was asked, as an audit record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "kebab-case")]
pub enum DecisionInput {
    /// One intent of a recovery sweep.
    DecideRecovery {
        /// The dataset.
        dataset_id: String,
        /// The sweep's mode.
        mode: mend_contract::RecoveryMode,
        /// The sweep's time.
        now_ms: TimestampMs,
        /// What the host observed of the intent.
        intent: mend_contract::IntentObservation,
    },
    /// One orphan of a reconcile.
    PlanReconcile {
        /// The dataset.
        dataset_id: String,
        /// The reconcile's time.
        now_ms: TimestampMs,
        /// What the host found of the orphan object.
        orphan: mend_contract::OrphanObject,
    },
    /// One gc run (ABI 1.3).
    PlanGc {
        /// The gc planning input.
        input: mend_contract::GcInput,
    },
}

/// The outcome of a record written before its decision is executed.
pub const OUTCOME_EXECUTING: &str = "executing";

impl AuditRecord {
    /// Whether this is the record written before executing (outcome `executing`).
    pub fn is_executing(&self) -> bool {
        self.outcome
            .get("outcome")
            .or(Some(&self.outcome))
            .and_then(serde_json::Value::as_str)
            == Some(OUTCOME_EXECUTING)
    }
}

/// Refuses a whole append, before anything is written, unless every record names
/// `dataset_id` and is in this host's format.
pub fn check_append(dataset_id: &str, records: &[AuditRecord]) -> Result<()> {
    for record in records {
        if record.dataset_id != dataset_id {
            return Err(MendError::invalid(format!(
                "audit record of operation {} names dataset {}, not {dataset_id}; append it with the records of its own dataset",
                record.operation_id, record.dataset_id
            )));
        }
        if record.format_version != AUDIT_FORMAT_VERSION {
            return Err(MendError::invalid(format!(
                "audit record of operation {} has format version {}; this mend writes only version {AUDIT_FORMAT_VERSION}",
                record.operation_id, record.format_version
            )));
        }
    }
    Ok(())
}

/// Parses a stored record, reading its version first so that a record from a newer mend is
/// refused as such rather than as whatever field it happens to have changed. `what` names
/// the record in errors.
pub fn parse_stored(body: &[u8], what: &str) -> Result<AuditRecord> {
    #[derive(Deserialize)]
    struct Version {
        format_version: u32,
    }
    let unreadable = |error: serde_json::Error| MendError::Corrupt {
        message: format!("{what} is unreadable: {error}"),
    };
    let Version { format_version } = serde_json::from_slice(body).map_err(unreadable)?;
    if format_version == 0 || format_version > AUDIT_FORMAT_VERSION {
        let origin = if format_version == 0 {
            "no mend writes it"
        } else {
            "a newer mend wrote it; upgrade before reading this dataset's audit trail"
        };
        return Err(MendError::Corrupt {
            message: format!(
                "{what} has format version {format_version}, but this mend reads only versions 1 to {AUDIT_FORMAT_VERSION}: {origin}"
            ),
        });
    }
    serde_json::from_slice(body).map_err(unreadable)
}

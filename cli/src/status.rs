//! `mend status`: the catalog, the policy, the fleet as its store shows it (read only: the
//! command never joins), and each dataset's versions, pending intents and owner.

use std::collections::BTreeMap;

use anyhow::Context;
use mend::Engine;

use super::output;
use crate::config::Settings;

/// What `mend status` reports.
#[derive(serde::Serialize)]
struct Status {
    catalog: String,
    policy_digest: String,
    policy: String,
    /// The component file the `policy` setting names, run instead of the deployment's active
    /// policy; absent when the deployment's active policy runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    policy_file: Option<std::path::PathBuf>,
    fleet: FleetSummary,
    datasets: Vec<DatasetStatus>,
}

/// The `mend serve` replicas sharing the catalog, as their membership leases say (a
/// rebalance or takeover count lives in each replica: its `/v1/status` and metrics).
#[derive(serde::Serialize)]
struct FleetSummary {
    members: Vec<MemberSummary>,
    /// Members whose lease ran out without their leaving (dead or stalled).
    expired: Vec<mend::fleet::Member>,
    /// Why the fleet could not be read, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    unreadable: Option<String>,
}

/// A live replica and its load: the datasets it owns, and those of them with pending intents.
#[derive(serde::Serialize)]
struct MemberSummary {
    #[serde(flatten)]
    member: mend::fleet::Member,
    owned_datasets: usize,
    owned_pending_datasets: usize,
}

#[derive(serde::Serialize)]
struct DatasetStatus {
    dataset_id: String,
    /// The live replica whose supervision it is; none while no replica runs.
    owner: Option<String>,
    #[serde(flatten)]
    state: DatasetState,
}

/// A dataset's versions and pending intents, or why they could not be read: one damaged
/// dataset does not hide the others.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum DatasetState {
    Read {
        manifest_version: u64,
        config_version: u64,
        fencing_epoch: u64,
        pending_intents: usize,
    },
    Unreadable {
        unreadable: String,
    },
}

pub(crate) async fn run(engine: &Engine, settings: &Settings, json: bool) -> anyhow::Result<()> {
    let policy = engine.policy();
    let (observed, fleet_unreadable) = observe_fleet(settings).await;
    let (datasets, load) = read_datasets(engine, &observed).await?;
    let fleet = FleetSummary {
        members: observed
            .members
            .iter()
            .map(|member| {
                let (owned, pending) = load[member.replica_id.as_str()];
                MemberSummary {
                    member: member.clone(),
                    owned_datasets: owned,
                    owned_pending_datasets: pending,
                }
            })
            .collect(),
        expired: observed.expired.clone(),
        unreadable: fleet_unreadable,
    };
    let status = Status {
        catalog: engine.catalog().describe(),
        policy_digest: policy.digest().to_string(),
        policy: format!(
            "{} {}",
            policy.description().name,
            policy.description().version
        ),
        policy_file: settings.policy.clone(),
        fleet,
        datasets,
    };
    output::json_or(&status, json, || text(&status))
}

/// The fleet's members as the catalog's store shows them, or why they could not be read.
async fn observe_fleet(settings: &Settings) -> (mend::fleet::Observed, Option<String>) {
    // `mend status` observes the fleet and never joins it (on object storage it puts and
    // deletes one probe object, to learn the store's time).
    let observed = match mend::fleet::replica_id(Some("mend-status")) {
        Ok(id) => match mend::fleet::open_membership(
            &settings.catalog,
            id,
            mend::fleet::DEFAULT_MEMBER_LEASE,
        )
        .await
        {
            Ok(membership) if !settings.catalog.starts_with("memory://") => {
                membership.observe().await
            }
            Ok(_) => Ok(mend::fleet::Observed::default()),
            Err(error) => Err(error),
        },
        Err(error) => Err(error),
    };
    match observed {
        Ok(observed) => (observed, None),
        Err(error) => (mend::fleet::Observed::default(), Some(error.to_string())),
    }
}

/// Each dataset's state and owner, and each live member's load: (datasets owned, those with
/// pending intents).
async fn read_datasets<'a>(
    engine: &Engine,
    observed: &'a mend::fleet::Observed,
) -> anyhow::Result<(Vec<DatasetStatus>, BTreeMap<&'a str, (usize, usize)>)> {
    let mut load: BTreeMap<&str, (usize, usize)> = observed
        .members
        .iter()
        .map(|member| (member.replica_id.as_str(), (0, 0)))
        .collect();
    let mut datasets = Vec::new();
    for (dataset_id, dataset) in engine.each_dataset().await.context("list datasets")? {
        let intents = match &dataset {
            Ok(_) => engine.catalog().list_intents(&dataset_id).await,
            Err(_) => Ok(Vec::new()),
        };
        let state = match (dataset, intents) {
            (Ok(dataset), Ok(intents)) => DatasetState::Read {
                manifest_version: dataset.manifest_version,
                config_version: dataset.config_version,
                fencing_epoch: dataset.fencing_epoch,
                pending_intents: intents.len(),
            },
            (Err(error), _) | (_, Err(error)) => DatasetState::Unreadable {
                unreadable: error.to_string(),
            },
        };
        let owner = mend::fleet::owner_of(&dataset_id, &observed.members)
            .map(|member| member.replica_id.clone());
        if let Some(owner) = &owner
            && let Some((owned, pending)) = load.get_mut(owner.as_str())
        {
            *owned += 1;
            if matches!(state, DatasetState::Read { pending_intents, .. } if pending_intents > 0) {
                *pending += 1;
            }
        }
        datasets.push(DatasetStatus {
            dataset_id,
            owner,
            state,
        });
    }
    Ok((datasets, load))
}

/// What `mend status` prints for people.
fn text(status: &Status) -> String {
    let mut lines = vec![
        format!("catalog: {}", status.catalog),
        match &status.policy_file {
            None => format!("policy: {} ({})", status.policy, status.policy_digest),
            Some(file) => format!(
                "policy: {} ({}) from {}, not the deployment's active policy",
                status.policy,
                status.policy_digest,
                file.display()
            ),
        },
    ];
    match &status.fleet.unreadable {
        Some(reason) => lines.push(format!("fleet: cannot be read: {reason}")),
        None if status.fleet.members.is_empty() => {
            lines.push("fleet: no replica running".to_string())
        }
        None => {
            for member in &status.fleet.members {
                lines.push(format!(
                    "replica {} (epoch {}): owns {} dataset(s), {} with pending intents",
                    member.member.replica_id,
                    member.member.epoch,
                    member.owned_datasets,
                    member.owned_pending_datasets
                ));
            }
        }
    }
    for member in &status.fleet.expired {
        lines.push(format!(
            "replica {} (epoch {}): lease ran out at {}; its datasets are taken over",
            member.replica_id,
            member.epoch,
            mend::clock::rfc3339(member.expires_at_ms)
        ));
    }
    for dataset in &status.datasets {
        let owner = dataset
            .owner
            .as_deref()
            .map(|owner| format!(", owned by {owner}"))
            .unwrap_or_default();
        lines.push(match &dataset.state {
            DatasetState::Read {
                manifest_version,
                config_version,
                fencing_epoch,
                pending_intents,
            } => format!(
                "dataset {}: manifest {manifest_version}, config {config_version}, fencing epoch {fencing_epoch}, {pending_intents} pending intent(s){owner}{}",
                dataset.dataset_id,
                if *pending_intents > 0 {
                    format!(" (see `mend recover {} --mode probe`)", dataset.dataset_id)
                } else {
                    String::new()
                }
            ),
            DatasetState::Unreadable { unreadable } => format!(
                "dataset {}: cannot be read: {unreadable}{owner}",
                dataset.dataset_id
            ),
        });
    }
    lines.join("\n")
}

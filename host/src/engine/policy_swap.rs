//! Policy upgrades on a running engine: prepare a swap to the side, then publish it in one
//! step; roll it back the same way.
//!
//! Preparation loads nothing new into the engine: the candidate is already compiled and
//! checked ([`PolicyRuntime::load_with`]); here the engine refuses a candidate it could not run
//! (a capability it lacks) and replays the audit log of every dataset against it, so the
//! operator sees which recorded decisions the swap would change, per kind of operation,
//! before anything changes. Operations in progress keep the policy they started with (they
//! run on a [pinned](Engine::pinned) engine); operations that start after the publish use the
//! candidate.

use serde::Serialize;

use super::Engine;
use crate::error::{MendError, Result};
use crate::runtime::replay::{ReplayReport, replay};
use crate::runtime::{PolicyRuntime, Swapped};
use crate::scenarios::{self, Suite, SuiteReport};

/// A swap ready to publish.
#[derive(Debug, Clone)]
pub struct PreparedSwap {
    pub candidate: PolicyRuntime,
    /// The generation of the active policy the swap was prepared against: publishing fails
    /// if another swap got there first.
    pub generation: u64,
    /// The active policy's digest when the swap was prepared.
    pub replacing: String,
    pub replay: ReplayReport,
    /// The candidate's golden scenarios, all passed.
    pub scenarios: Vec<SuiteReport>,
}

/// What an operator reads before publishing.
#[derive(Debug, Clone, Serialize)]
pub struct SwapPreview<'a> {
    pub replacing: &'a str,
    pub candidate: &'a str,
    pub candidate_name: &'a str,
    pub candidate_version: &'a str,
    pub replay: &'a ReplayReport,
    pub scenarios: &'a [SuiteReport],
}

impl PreparedSwap {
    pub fn preview(&self) -> SwapPreview<'_> {
        SwapPreview {
            replacing: &self.replacing,
            candidate: self.candidate.digest(),
            candidate_name: &self.candidate.description().name,
            candidate_version: &self.candidate.description().version,
            replay: &self.replay,
            scenarios: &self.scenarios,
        }
    }
}

impl Engine {
    /// Replays the newest `records_per_dataset` audit records of every dataset against
    /// `candidate`, changing nothing.
    pub async fn replay_policy(
        &self,
        candidate: &PolicyRuntime,
        records_per_dataset: usize,
    ) -> Result<ReplayReport> {
        let mut records = Vec::new();
        let mut unreadable = Vec::new();
        for dataset in self.catalog.list_datasets().await? {
            match self
                .catalog
                .list_audit(&dataset.dataset_id, Some(records_per_dataset))
                .await
            {
                Ok(found) => records.extend(found),
                // One dataset's damaged trail must not hide what the others say.
                Err(MendError::Corrupt { message }) => {
                    unreadable.push((dataset.dataset_id, message));
                }
                Err(error) => return Err(error),
            }
        }
        let mut report = replay(candidate, &records);
        report.unreadable = unreadable;
        Ok(report)
    }

    /// Checks that this engine can run `candidate`, runs the golden scenarios shipped with it
    /// (a candidate failing any is refused with `PolicyRejected`: it is not the policy its
    /// author meant) and replays the audit log against it; the active policy is untouched.
    pub async fn prepare_policy_swap(
        &self,
        candidate: PolicyRuntime,
        records_per_dataset: usize,
        golden: &[Suite],
    ) -> Result<PreparedSwap> {
        self.check_policy(&candidate)?;
        let scenarios: Vec<SuiteReport> = golden
            .iter()
            .map(|suite| scenarios::run(&candidate, suite))
            .collect();
        let failed: Vec<String> = scenarios
            .iter()
            .flat_map(|report| {
                report
                    .failed
                    .iter()
                    .map(move |failure| format!("{}: {}", report.file, failure.name))
            })
            .collect();
        if !failed.is_empty() {
            const NAMED: usize = 3;
            let more = match failed.len().saturating_sub(NAMED) {
                0 => String::new(),
                more => format!(" and {more} more"),
            };
            return Err(MendError::PolicyRejected {
                message: format!(
                    "policy {} fails {} of its golden scenarios ({}{more}; `mend policy test` shows each); nothing was swapped",
                    candidate.digest(),
                    failed.len(),
                    failed[..failed.len().min(NAMED)].join("; ")
                ),
            });
        }
        let generation = self.policies.generation();
        let replacing = self.policies.current().digest().to_string();
        let replay = self.replay_policy(&candidate, records_per_dataset).await?;
        Ok(PreparedSwap {
            candidate,
            generation,
            replacing,
            replay,
            scenarios,
        })
    }

    /// Makes the prepared candidate the active policy, in one step.
    pub fn publish_policy_swap(&self, prepared: PreparedSwap) -> Result<Swapped> {
        self.policies
            .publish(prepared.candidate, prepared.generation)
    }

    /// Restores the policy the last swap replaced.
    pub fn rollback_policy(&self) -> Result<Swapped> {
        self.policies.rollback()
    }
}

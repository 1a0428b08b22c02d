//! Policy upgrades on a running engine: prepare a swap to the side, then publish it in one
//! step; roll it back the same way.
//!
//! Preparation loads nothing new into the engine: the candidate is already compiled and
//! checked ([`PolicyRuntime::load_with`]); here the engine refuses a candidate it could not run
//! (a capability it lacks) and replays the newest records of the catalog's audit log against
//! it (every dataset's together), so the operator sees which recorded decisions the swap would
//! change, per kind of operation, before anything changes. Operations in progress keep the policy they started with (they
//! run on a [pinned](Engine::pinned) engine); operations that start after the publish use the
//! candidate.
//!
//! **Under an idempotency key** a deployment's swap or rollback is recorded in the registry
//! record that is its effect ([`ActiveRecord::recorded`], one put-if-absent): the key, a
//! digest of the request, and the answer but for the record itself. A keyed swap or rollback
//! first looks through the registry's records for its key (one record per change: a short
//! read) and answers what the first answered, before anything else is checked: not "already
//! the active policy", not "nothing to roll back to". A swap's digest covers the component's
//! digest, the scenario files as read (a directory given to `mend policy swap --scenarios` is
//! the files it held) and the records count; a rollback's, only that it is one. The answer's
//! record leaves out its own recorded request (which holds the answer), the first time as on
//! a retry. Registry records are history: never forgotten, unlike the catalog's records.

use serde::{Deserialize, Serialize};

use super::Engine;
use super::keyed::{Keyed, request_key};
use crate::bounds;
use crate::catalog::{RecordedRequest, RequestKey};
use crate::error::{MendError, Result};
use crate::runtime::registry::{ActiveRecord, PolicyRegistry};
use crate::runtime::replay::{ReplayReport, replay};
use crate::runtime::{DEFAULT_POLICY_WASM, LoadOptions, PolicyRuntime, Swapped};
use crate::scenarios::{self, Suite, SuiteReport};

/// A swap ready to publish.
#[derive(Debug, Clone)]
pub struct PreparedSwap {
    /// The policy to publish, loaded and checked against this host.
    pub candidate: PolicyRuntime,
    /// The generation of the active policy the swap was prepared against: publishing fails
    /// if another swap got there first.
    pub generation: u64,
    /// The active policy's digest when the swap was prepared.
    pub replacing: String,
    /// Which recorded decisions the candidate would make differently.
    pub replay: ReplayReport,
    /// The candidate's golden scenarios, all passed.
    pub scenarios: Vec<SuiteReport>,
}

/// What an operator reads before publishing.
#[derive(Debug, Clone, Serialize)]
pub struct SwapPreview<'a> {
    /// The active policy's digest.
    pub replacing: &'a str,
    /// The candidate's digest.
    pub candidate: &'a str,
    /// The candidate's name, as its `describe()` says.
    pub candidate_name: &'a str,
    /// The candidate's version, as its `describe()` says.
    pub candidate_version: &'a str,
    /// Which recorded decisions it would change.
    pub replay: &'a ReplayReport,
    /// Its golden scenarios' reports.
    pub scenarios: &'a [SuiteReport],
}

impl PreparedSwap {
    /// What the swap would do, for an operator to read before publishing.
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
    /// Replays the newest `records` audit records of the whole catalog (every dataset's
    /// together, [`list_recent_audit`](crate::Catalog::list_recent_audit)) against `candidate`, changing nothing. Its
    /// cost is the records', not the datasets': one indexed read on mend's backends.
    /// `records` is range-checked ([`bounds::REPLAY_RECORDS`]).
    pub async fn replay_policy(
        &self,
        candidate: &PolicyRuntime,
        records: usize,
    ) -> Result<ReplayReport> {
        let records = bounds::REPLAY_RECORDS.check_usize(records)?;
        let recent = self.catalog.list_recent_audit(records).await?;
        let mut report = replay(candidate, &recent.records);
        // One dataset's damaged trail must not hide what the others say.
        report.unreadable = recent.unreadable;
        Ok(report)
    }

    /// Checks that this engine can run `candidate`, runs the golden scenarios shipped with it
    /// (a candidate failing any is refused with `PolicyRejected`: it is not the policy its
    /// author meant) and replays the audit log against it; the active policy is untouched.
    pub async fn prepare_policy_swap(
        &self,
        candidate: PolicyRuntime,
        records: usize,
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
        let replay = self.replay_policy(&candidate, records).await?;
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

/// A swap made for a whole deployment: recorded in its policy registry, so every process
/// opening the catalog runs the candidate, and published in this engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeploymentSwap {
    /// Which recorded decisions the new policy would change.
    pub replay: ReplayReport,
    /// Its golden scenarios' reports, all passed.
    pub scenarios: Vec<SuiteReport>,
    /// The registry record that made it active.
    pub record: ActiveRecord,
}

/// What a keyed swap records as its answer: the swap but for the record that holds it.
#[derive(Serialize, Deserialize)]
struct SwapAnswer {
    replay: ReplayReport,
    scenarios: Vec<SuiteReport>,
}

impl Engine {
    /// Prepares the swap (capabilities, golden scenarios, replay), files the component in the
    /// registry, records it active there (put-if-absent: of two operators racing, one gets
    /// `Conflict` and nothing changes), then publishes it in this engine.
    ///
    /// Under an idempotency key (module doc) a retry of a swap that landed answers it again.
    pub fn swap_deployment_policy<'a>(
        &'a self,
        registry: &'a PolicyRegistry,
        bytes: &'a [u8],
        candidate: PolicyRuntime,
        records: usize,
        golden: &'a [Suite],
    ) -> Keyed<'a, DeploymentSwap> {
        Keyed::new(self.write_scope("policy-swap"), move |key| async move {
            let files: Vec<&str> = golden.iter().map(|suite| suite.file.as_str()).collect();
            let key = request_key(key, &("policy_swap", candidate.digest(), files, records))?;
            self.swap_deployment_keyed(registry, bytes, candidate, records, golden, key.as_ref())
                .await
        })
    }

    #[tracing::instrument(
        name = "policy_swap",
        skip_all,
        err(level = "debug"),
        fields(candidate = %candidate.digest())
    )]
    async fn swap_deployment_keyed(
        &self,
        registry: &PolicyRegistry,
        bytes: &[u8],
        candidate: PolicyRuntime,
        records: usize,
        golden: &[Suite],
        key: Option<&RequestKey>,
    ) -> Result<DeploymentSwap> {
        if let Some(key) = key
            && !crate::deliberate_bugs::active(
                crate::deliberate_bugs::Bug::PolicyRetryIgnoresRecord,
            )
            && let Some(found) = registry.recorded(&key.key).await?
        {
            return replayed_swap(found, key);
        }
        let before = registry.active().await?;
        let prepared = self.prepare_policy_swap(candidate, records, golden).await?;
        // The deployment's active policy is the registry's, not this process's: a process
        // that has not yet followed the registry's newest record must not record a swap to
        // the policy already active (simulator seed 188: a second record of the same policy,
        // and an answer "swapped" after another copy of the request had been told "already
        // active").
        let active = before
            .as_ref()
            .map_or(prepared.replacing.as_str(), |record| record.digest.as_str());
        if prepared.candidate.digest() == active {
            return Err(MendError::failed_precondition(
                format!("{active} is already the active policy; nothing was swapped"),
                vec![],
            ));
        }
        let digest = registry.put_component(bytes).await?;
        let now = self.options.clock.now_ms();
        let before = match before {
            Some(record) => record,
            // The first swap records the built-in policy as what it replaces, so that a
            // rollback has somewhere to go.
            None => {
                let builtin = registry.put_component(DEFAULT_POLICY_WASM).await?;
                registry
                    .set_active(None, &builtin, "initial", now, None)
                    .await?
            }
        };
        let answer = SwapAnswer {
            replay: prepared.replay.clone(),
            scenarios: prepared.scenarios.clone(),
        };
        let recorded = key.map(|key| RecordedRequest::new(key, &answer, now));
        let record = match registry
            .set_active(Some(&before), &digest, "swap", now, recorded)
            .await
        {
            Ok(record) => record,
            Err(error) => return lost_to_itself(registry, key, error, replayed_swap).await,
        };
        // A newer record already installed (another process changed the policy again, and
        // this one's watcher followed) keeps its policy: this swap is history already.
        self.policies
            .install_registry_record(prepared.candidate, record.version);
        tracing::info!(
            digest = %record.digest,
            registry_version = record.version,
            replaced = %prepared.replacing,
            "policy swapped for the deployment"
        );
        Ok(DeploymentSwap {
            replay: answer.replay,
            scenarios: answer.scenarios,
            record: ActiveRecord {
                recorded: None,
                ..record
            },
        })
    }

    /// Makes the policy the registry's last change replaced active again, in the registry
    /// and in this engine. A policy this deployment can no longer run is refused first.
    ///
    /// Under an idempotency key (module doc) a retry of a rollback that landed answers its
    /// record, instead of rolling back the rollback.
    pub fn rollback_deployment_policy<'a>(
        &'a self,
        registry: &'a PolicyRegistry,
        load: &'a LoadOptions,
    ) -> Keyed<'a, ActiveRecord> {
        Keyed::new(self.write_scope("policy-rollback"), move |key| async move {
            let key = request_key(key, &("policy_rollback",))?;
            self.rollback_deployment_keyed(registry, load, key.as_ref())
                .await
        })
    }

    #[tracing::instrument(name = "policy_rollback", skip_all, err(level = "debug"))]
    async fn rollback_deployment_keyed(
        &self,
        registry: &PolicyRegistry,
        load: &LoadOptions,
        key: Option<&RequestKey>,
    ) -> Result<ActiveRecord> {
        if let Some(key) = key
            && !crate::deliberate_bugs::active(
                crate::deliberate_bugs::Bug::PolicyRetryIgnoresRecord,
            )
            && let Some(found) = registry.recorded(&key.key).await?
        {
            return replayed_rollback(found, key);
        }
        let Some(current) = registry.active().await? else {
            return Err(MendError::failed_precondition(
                "no swap has happened: the built-in policy is active and there is nothing to roll back to",
                vec![],
            ));
        };
        let Some(previous) = current.previous.clone() else {
            return Err(MendError::failed_precondition(
                format!("{} has no previous policy to roll back to", current.digest),
                vec![],
            ));
        };
        let bytes = registry.component(&previous).await?;
        let policy = PolicyRuntime::load_with(&bytes, load)?;
        self.check_policy(&policy)?;
        let now = self.options.clock.now_ms();
        // A rollback's answer is its record, which is left out: the record holds no answer.
        let recorded = key.map(|key| RecordedRequest::new(key, &(), now));
        let record = match registry
            .set_active(Some(&current), &previous, "rollback", now, recorded)
            .await
        {
            Ok(record) => record,
            Err(error) => return lost_to_itself(registry, key, error, replayed_rollback).await,
        };
        self.policies
            .install_registry_record(policy, record.version);
        tracing::info!(
            digest = %record.digest,
            registry_version = record.version,
            replaced = %current.digest,
            "policy rolled back for the deployment"
        );
        Ok(ActiveRecord {
            recorded: None,
            ..record
        })
    }

    /// Installs `policy` as this engine's active policy, whatever the generation: for a
    /// change this process decides alone. A deployment's processes follow its registry with
    /// [`Engine::follow_policy_registry`].
    pub fn install_policy(&self, policy: PolicyRuntime) -> Swapped {
        self.policies.install(policy)
    }

    /// Runs the registry's active policy, if another process changed it since this engine
    /// last installed a record: what `mend serve` does every interval. `Some` with what
    /// changed when a newer record was installed (its policy may be the one already running);
    /// `None` when the registry is empty or holds nothing newer. A component this engine
    /// cannot run is refused (`PolicyRejected`), and the engine keeps its policy.
    pub async fn follow_policy_registry(
        &self,
        registry: &PolicyRegistry,
        load: &LoadOptions,
    ) -> Result<Option<Swapped>> {
        let Some(record) = registry.active().await? else {
            return Ok(None);
        };
        if self
            .policies
            .registry_version()
            .is_some_and(|installed| installed >= record.version)
        {
            return Ok(None);
        }
        let current = self.policies.current();
        let policy = if current.digest() == record.digest {
            current
        } else {
            let bytes = registry.component(&record.digest).await?;
            let policy = PolicyRuntime::load_with(&bytes, load)?;
            self.check_policy(&policy)?;
            policy
        };
        let installed = self
            .policies
            .install_registry_record(policy, record.version);
        if let Some(swapped) = &installed
            && swapped.from_digest != swapped.to_digest
        {
            tracing::info!(
                digest = %record.digest,
                registry_version = record.version,
                change = %record.change,
                "now running the registry's active policy"
            );
        }
        Ok(installed)
    }
}

/// The answer of a keyed swap recorded in `found`, for a retry under `key`.
fn replayed_swap(found: ActiveRecord, key: &RequestKey) -> Result<DeploymentSwap> {
    let answer: SwapAnswer = recorded_in(&found, key)?;
    Ok(DeploymentSwap {
        replay: answer.replay,
        scenarios: answer.scenarios,
        record: ActiveRecord {
            recorded: None,
            ..found
        },
    })
}

/// The answer of a keyed rollback recorded in `found`: the record itself.
fn replayed_rollback(found: ActiveRecord, key: &RequestKey) -> Result<ActiveRecord> {
    recorded_in::<()>(&found, key)?;
    Ok(ActiveRecord {
        recorded: None,
        ..found
    })
}

fn recorded_in<T: serde::de::DeserializeOwned>(
    found: &ActiveRecord,
    key: &RequestKey,
) -> Result<T> {
    match &found.recorded {
        Some(recorded) => recorded.replay(key),
        None => Err(MendError::Corrupt {
            message: format!(
                "policy registry record {} was found by idempotency key {} but holds no request",
                found.version, key.key
            ),
        }),
    }
}

/// A keyed change whose registry write failed: a copy of the same request may have written
/// the record first (a `Conflict` it lost, or an ambiguous write that landed), and then its
/// answer is this one's; otherwise the failure stands.
async fn lost_to_itself<T>(
    registry: &PolicyRegistry,
    key: Option<&RequestKey>,
    error: MendError,
    replayed: fn(ActiveRecord, &RequestKey) -> Result<T>,
) -> Result<T> {
    if let Some(key) = key
        && let Some(found) = registry.recorded(&key.key).await?
    {
        return replayed(found, key);
    }
    Err(error)
}

//! Policy changes while the writers work: the operator swaps the deployment between the
//! default policy and the cautious one (`policies/cautious/`, which discards every orphan the
//! default would adopt) and rolls changes back, under idempotency keys, through a replica
//! drawn each time; every replica's supervisor follows the deployment's policy registry before
//! it sweeps, as `mend serve`'s watcher does every interval ([`mend::Engine::follow_policy_registry`]).
//!
//! What each change was answered, and which registry record each replica ran after each
//! follow, go in the history; [`crate::check::policy_changes`] holds them to the registry.

use std::sync::{Mutex, OnceLock, PoisonError};

use mend::runtime::{CAUTIOUS_POLICY_WASM, DEFAULT_POLICY_WASM, LoadOptions, PolicyRuntime};

use crate::check::{History, PolicyChangeRecord, PolicyOutcome, PolicyRun};
use crate::client::with_retries;
use crate::replica::Replica;
use crate::rng::SimRng;
use crate::schedule::policy;
use crate::trace::Trace;

/// The catalog's newest audit records a swap replays against its candidate.
const REPLAYED_RECORDS: usize = 20;

/// The cautious policy, compiled once per process.
fn cautious() -> PolicyRuntime {
    static POLICY: OnceLock<PolicyRuntime> = OnceLock::new();
    POLICY
        .get_or_init(|| {
            PolicyRuntime::load_with(CAUTIOUS_POLICY_WASM, &LoadOptions::default())
                .expect("the cautious policy loads")
        })
        .clone()
}

/// A change the operator sent under an idempotency key.
pub(crate) struct PolicyChange {
    key: String,
    /// The digest a swap asks for; `None` for a rollback.
    swap_to: Option<String>,
}

/// A swap (two in three: to the default or the cautious policy, drawn, so that some ask for
/// the policy already active and are refused) or a rollback, sent with retries under one key.
/// Or, while the last one's answer is unknown, that one again, until it is known. Returns the
/// change still in doubt.
pub(crate) async fn change_policy(
    number: u64,
    in_doubt: Option<PolicyChange>,
    replicas: &[Replica],
    rng: &mut SimRng,
    history: &Mutex<History>,
    trace: &Trace,
) -> Option<PolicyChange> {
    let change = in_doubt.unwrap_or_else(|| PolicyChange {
        key: format!("policy-{number}"),
        swap_to: rng.chance(67).then(|| {
            if rng.chance(50) {
                cautious().digest().to_string()
            } else {
                policy().digest().to_string()
            }
        }),
    });
    let invoked_ms = trace.now_ms();
    let outcome = match send(&change, replicas, rng, trace).await {
        Some(outcome) => outcome,
        // An outcome unknown: sent again next time.
        None => return Some(change),
    };
    // Sometimes the operator's tool sends the change once more after its answer (a
    // duplicate: a retry of a request that had succeeded): under its key it must answer the
    // same, and change nothing.
    let duplicate = rng.chance(DUPLICATE_PCT);
    record_change(&change, outcome, invoked_ms, trace, history);
    if duplicate {
        let invoked_ms = trace.now_ms();
        trace.line(format!("operator: {} sent again", change.key));
        let outcome = send(&change, replicas, rng, trace)
            .await
            .unwrap_or(PolicyOutcome::Unknown);
        record_change(&change, outcome, invoked_ms, trace, history);
    }
    None
}

/// Percent of policy changes the operator's tool sends once more after their answer.
const DUPLICATE_PCT: u64 = 25;

/// Sends `change` with retries; its outcome, or `None` when it is unknown.
async fn send(
    change: &PolicyChange,
    replicas: &[Replica],
    rng: &mut SimRng,
    trace: &Trace,
) -> Option<PolicyOutcome> {
    let answer = with_retries(replicas, rng, trace, &change.key, |engine| {
        let (key, swap_to) = (change.key.clone(), change.swap_to.clone());
        let registry = replicas[0].registry.clone();
        async move {
            match swap_to {
                Some(digest) => {
                    let (bytes, candidate) = if digest == cautious().digest() {
                        (CAUTIOUS_POLICY_WASM, cautious())
                    } else {
                        (DEFAULT_POLICY_WASM, policy())
                    };
                    engine
                        .swap_deployment_policy(&registry, bytes, candidate, REPLAYED_RECORDS, &[])
                        .idempotency_key(key.as_str())
                        .await
                        .map(|swap| swap.record)
                }
                None => {
                    engine
                        .rollback_deployment_policy(&registry, &LoadOptions::default())
                        .idempotency_key(key.as_str())
                        .await
                }
            }
        }
    })
    .await;
    trace.line(format!(
        "operator: {} ({}): {:?}",
        change.key,
        change.swap_to.as_deref().unwrap_or("rollback"),
        answer
            .as_ref()
            .map(|record| (record.version, record.digest.clone()))
    ));
    match answer {
        Ok(record) => Some(PolicyOutcome::Changed {
            version: record.version,
            digest: record.digest,
        }),
        Err(error) if error.certainly_not_applied() => Some(PolicyOutcome::Refused {
            error: error.to_string(),
        }),
        Err(_) => None,
    }
}

/// Records what `change` was answered, or that its answer was never known.
pub(crate) fn record_change(
    change: &PolicyChange,
    outcome: PolicyOutcome,
    invoked_ms: u64,
    trace: &Trace,
    history: &Mutex<History>,
) {
    history
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .policy_changes
        .push(PolicyChangeRecord {
            key: change.key.clone(),
            swap_to: change.swap_to.clone(),
            outcome,
            invoked_ms,
            answered_ms: trace.now_ms(),
        });
}

/// Follows the registry on `replica`, as its server's watcher does, and records which record
/// the replica runs after.
pub(crate) async fn follow(
    index: usize,
    replica: &Replica,
    history: &Mutex<History>,
    trace: &Trace,
) {
    let process = replica.process();
    let followed = process
        .unless_crashed(
            process
                .engine
                .follow_policy_registry(&replica.registry, &LoadOptions::default()),
        )
        .await;
    match followed {
        Some(Ok(Some(swapped))) if swapped.from_digest != swapped.to_digest => trace.line(format!(
            "replica {index} follows the registry: now {}",
            swapped.to_digest
        )),
        Some(Ok(_)) => {}
        Some(Err(error)) => trace.line(format!(
            "replica {index} cannot follow the registry: {error}"
        )),
        None => {
            trace.line(format!(
                "replica {index} crashed while it followed the registry"
            ));
            return;
        }
    }
    let (registry_version, running) = process.engine.active_policy().installed();
    let run = PolicyRun {
        replica: index,
        incarnation: process.incarnation,
        registry_version,
        digest: running.digest().to_string(),
    };
    history
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .policy_runs
        .push(run);
}

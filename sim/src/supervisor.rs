//! Each replica's supervisor: it follows the policy registry and sweeps the dataset now and
//! then, as `mend serve` does (in a fleet, only while it owns the dataset); every sweep's
//! answer about an operation's end goes in the history.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use mend::Engine;
use mend::engine::{IntentReport, Outcome};
use mend::intent::IntentPhase;
use mend_contract::RecoveryDecision;

use crate::check::{Claim, History, SweepRecord, TakeoverRecord};
use crate::client::serve_aimed;
use crate::replica::Replica;
use crate::rng::SimRng;
use crate::schedule::{DATASET, pause};
use crate::trace::Trace;

/// What a sweep's report of one intent says of the operation's end: rolled forward is
/// published; abandoned or rolled back is ended; anything else says nothing.
pub(crate) fn sweep_claim(intent: &IntentReport) -> Claim {
    match (&intent.outcome, &intent.decision) {
        (Outcome::Executed, RecoveryDecision::RollForward) => Claim::Published,
        (Outcome::Executed, RecoveryDecision::RollBack | RecoveryDecision::Abandon(_)) => {
            Claim::Ended
        }
        _ => Claim::Nothing,
    }
}

/// A replica's supervisor: sweeps the dataset now and then, as `mend serve` does.
pub(crate) async fn supervise(
    index: usize,
    replica: Replica,
    mut rng: SimRng,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<History>>,
    trace: Trace,
) {
    while !stop.load(Ordering::SeqCst) {
        pause(&mut rng, 200, 2_000).await;
        crate::policy::follow(index, &replica, &history, &trace).await;
        if may_sweep(&replica) {
            sweep_once(index, &replica, Some(&mut rng), &history, &trace).await;
        } else {
            trace.line(format!(
                "replica {index} does not sweep: it does not own the dataset by its last view, or its membership ran out"
            ));
        }
    }
}

/// Whether `replica`'s supervisor may start a sweep: always without a fleet, and with one only
/// while it owns the dataset and its membership is live by its own monotonic clock.
pub(crate) fn may_sweep(replica: &Replica) -> bool {
    replica
        .process()
        .fleet
        .as_ref()
        .is_none_or(|fleet| fleet.may_sweep(DATASET))
}

/// One gated roll-forward sweep by `replica`'s supervisor; with `rng`, its process may crash
/// at a write aimed at ([`serve_aimed`]).
pub(crate) async fn sweep_once(
    index: usize,
    replica: &Replica,
    rng: Option<&mut SimRng>,
    history: &Mutex<History>,
    trace: &Trace,
) {
    let sweep = |engine: Engine| async move { engine.roll_forward_gated(DATASET).await };
    let swept = match rng {
        Some(rng) => {
            serve_aimed(
                replica,
                rng,
                trace,
                &format!("replica {index}'s sweep"),
                sweep,
            )
            .await
        }
        None => replica.serve(sweep).await,
    };
    let mut history = history.lock().unwrap_or_else(PoisonError::into_inner);
    match swept {
        Ok(sweep) => {
            let mut settled = BTreeMap::new();
            for intent in &sweep.report.intents {
                let claim = sweep_claim(intent);
                settled.insert(
                    intent.operation_id.clone(),
                    format!("{:?} {:?}", intent.decision, intent.outcome),
                );
                history.claim(
                    &intent.operation_id,
                    claim,
                    format!(
                        "replica {index}'s sweep: {:?} {:?}",
                        intent.decision, intent.outcome
                    ),
                    trace.now_ms(),
                );
                // Taken over here: observed armed and fenced by this sweep. An intent fenced
                // before (an abort, an exclusive roll-back) took over nobody here.
                if intent.phase == IntentPhase::Armed
                    && matches!(
                        (&intent.decision, &intent.outcome),
                        (RecoveryDecision::Abandon(_), Outcome::Executed)
                    )
                {
                    history.takeovers.push(TakeoverRecord {
                        operation_id: intent.operation_id.clone(),
                        replica: index,
                        at_ms: trace.now_ms(),
                    });
                }
            }
            trace.line(format!("replica {index} swept: {settled:?}"));
            history.sweeps.push(SweepRecord {
                replica: index,
                gate_epoch: sweep.gate_epoch,
                // Back to simulated time: the replica's clock is off by its skew.
                from_ms: sweep.held_from_ms - replica.skew_ms,
                until_ms: sweep.held_until_ms - replica.skew_ms,
            });
        }
        Err(error) => trace.line(format!("replica {index}'s sweep: {error}")),
    }
}

//! Recovery after a crash, shared by the crash-schedule tests.

use std::sync::Arc;

use mend::Engine;
use mend::engine::Outcome;
use mend::faults::CrashAt;
use mend::model::{ListQuery, SplitState};
use mend_policy::RecoveryMode;

use crate::{Backend, Harness};

/// Recovers `dataset_id`: first, when `crash_at` is given, with a crash at that durable write
/// of the sweeps (an odd step crashes before its write, an even one after it), one sweep per
/// mode of `modes`; then cleanly, one sweep per mode in turn until a sweep executes everything
/// it found. Returns how many durable writes the crashing sweeps reached, so that a caller
/// walking `crash_at` upwards knows when every step has had its crash.
pub async fn recover_after_crash(
    h: &Harness,
    dataset_id: &str,
    crash_at: Option<usize>,
    modes: &[RecoveryMode],
) -> usize {
    let mut reached = 0;
    if let Some(step) = crash_at {
        let crash = Arc::new(CrashAt::new(step, step % 2 == 0));
        let crashing = h.engine.with_faults(crash.clone());
        for mode in modes {
            let _ = crashing.recover(dataset_id, *mode).await;
        }
        reached = crash.steps().len();
    }
    for mode in modes {
        let report = h.engine.recover(dataset_id, *mode).await.unwrap();
        if report
            .intents
            .iter()
            .all(|i| i.outcome == Outcome::Executed)
        {
            break;
        }
    }
    reached
}

/// One operation kind's crash schedules: how to prepare a dataset, run the operation, and tell
/// after recovery whether it fully happened or never happened.
#[async_trait::async_trait]
pub trait CrashScenario: Sync {
    /// The operation kind, for the printout.
    fn kind(&self) -> &'static str;
    /// Prepares a dataset on a fresh harness and returns its id.
    async fn setup(&self, h: &Harness) -> String;
    /// Runs the operation with `engine`, which carries the fault seam.
    async fn run(&self, engine: &Engine, dataset_id: &str) -> mend::Result<()>;
    /// After recovery: `true` when the operation fully happened, `false` when it never did.
    /// Panics on anything in between.
    async fn outcome(&self, h: &Harness, dataset_id: &str, schedule: &str) -> bool;
}

/// What every schedule of every kind must leave: no intent, and every staged or published
/// row's object in place (invariants 1 and 2).
pub async fn check_invariants(h: &Harness, dataset_id: &str, schedule: &str) {
    let engine = &h.engine;
    let intents = engine.catalog().list_intents(dataset_id).await.unwrap();
    assert!(
        intents.is_empty(),
        "{schedule}: intents are left: {intents:?}"
    );
    let rows = engine
        .list_splits(dataset_id, &ListQuery::default())
        .await
        .unwrap()
        .splits;
    for row in rows
        .iter()
        .filter(|r| r.state != SplitState::MarkedForDeletion)
    {
        let object = engine
            .objects()
            .read_header(dataset_id, &row.split_id)
            .await
            .unwrap();
        assert!(
            object.is_some(),
            "{schedule}: {} is {} without its object",
            row.split_id,
            row.state
        );
    }
}

/// Crashes the scenario's operation at each of its durable writes, before the write and (an
/// ambiguous outcome) after it; recovers; and again with a second crash at each durable write
/// of the recovery. Prints how many schedules ran and how they converged.
pub async fn run_crash_schedules(
    backend: Backend,
    scenario: &dyn CrashScenario,
    modes: &[RecoveryMode],
) {
    let kind = scenario.kind();
    // Count the operation's durable writes on a clean run.
    let steps = {
        let h = Harness::new(backend).await;
        let dataset_id = scenario.setup(&h).await;
        let counting = Arc::new(CrashAt::new(usize::MAX, false));
        scenario
            .run(&h.engine.with_faults(counting.clone()), &dataset_id)
            .await
            .unwrap_or_else(|error| panic!("{kind} on {backend} without faults: {error}"));
        assert!(
            scenario.outcome(&h, &dataset_id, "clean run").await,
            "{kind} on {backend}: a clean run did not happen"
        );
        counting.steps().len()
    };

    let (mut single, mut happened, mut double) = (0, 0, 0);
    for ambiguous in [false, true] {
        for k in 1..=steps {
            for second in [None].into_iter().chain((1..).map(Some)) {
                let schedule = format!(
                    "{kind} on {backend}: crash {} step {k}{}",
                    if ambiguous { "after" } else { "before" },
                    second.map_or(String::new(), |j| format!(
                        ", then a recovery crash at its step {j}"
                    ))
                );
                let h = Harness::new(backend).await;
                let dataset_id = scenario.setup(&h).await;
                let crash = Arc::new(CrashAt::new(k, ambiguous));
                let result = scenario
                    .run(&h.engine.with_faults(crash.clone()), &dataset_id)
                    .await;
                assert!(result.is_err(), "{schedule}: the operation did not crash");
                // The writer is gone: its lease runs out, then recovery runs.
                h.clock.advance_ms(120_000);
                let reached = recover_after_crash(&h, &dataset_id, second, modes).await;
                check_invariants(&h, &dataset_id, &schedule).await;
                let outcome = scenario.outcome(&h, &dataset_id, &schedule).await;
                match second {
                    None => {
                        single += 1;
                        happened += usize::from(outcome);
                    }
                    Some(_) => double += 1,
                }
                // Once the crashing sweeps no longer reach step j, every step had its crash.
                if second.is_some_and(|j| reached < j) {
                    break;
                }
            }
        }
    }
    println!(
        "crash schedules [{kind}, {backend}]: {steps} durable steps; {single} single-crash schedules: {happened} converged to fully happened, {} to never happened, 0 in between; {double} with a second crash during recovery, all converged",
        single - happened
    );
}

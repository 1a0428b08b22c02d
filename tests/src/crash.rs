//! Recovery after a crash, shared by the crash-schedule tests.

use std::fmt;
use std::sync::Arc;

use mend::Engine;
use mend::engine::Outcome;
use mend::faults::CrashAt;
use mend::model::{ListQuery, SplitState};
use mend_contract::RecoveryMode;

use crate::{Backend, Harness};

/// A crash during recovery: at the `step`-th durable write (counting from 1) of the crashing
/// sweeps, before the write or, when `after`, once it landed (an ambiguous outcome).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryCrash {
    pub step: usize,
    pub after: bool,
}

impl RecoveryCrash {
    /// Every recovery crash, both kinds at every step: before step 1, after step 1, before
    /// step 2, and so on. A caller stops at the first whose step the crashing sweeps no
    /// longer reach (see [`recover_after_crash`]); its "after" twin would not fire either.
    pub fn all() -> impl Iterator<Item = RecoveryCrash> {
        (1..).flat_map(|step| [false, true].map(|after| RecoveryCrash { step, after }))
    }
}

impl fmt::Display for RecoveryCrash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = if self.after { "after" } else { "before" };
        write!(f, "a recovery crash {how} its step {}", self.step)
    }
}

/// How many schedules with a second crash during recovery ran, by kind of crash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SecondCrashes {
    pub before: usize,
    pub after: usize,
}

impl SecondCrashes {
    /// Counts `crash` if it fired, that is if the crashing sweeps `reached` its step.
    pub fn count(&mut self, crash: RecoveryCrash, reached: usize) {
        if reached >= crash.step {
            match crash.after {
                false => self.before += 1,
                true => self.after += 1,
            }
        }
    }

    pub fn total(&self) -> usize {
        self.before + self.after
    }
}

impl fmt::Display for SecondCrashes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} with a second crash during recovery ({} before a recovery step, {} after one)",
            self.total(),
            self.before,
            self.after
        )
    }
}

/// Recovers `dataset_id`: first, when `crash` is given, with that crash during the sweeps, one
/// sweep per mode of `modes`; then cleanly, one sweep per mode in turn until a sweep executes
/// everything it found. Returns how many durable writes the crashing sweeps reached, so that a
/// caller walking the crash's step upwards knows when every step has had its crashes.
pub async fn recover_after_crash(
    h: &Harness,
    dataset_id: &str,
    crash: Option<RecoveryCrash>,
    modes: &[RecoveryMode],
) -> usize {
    let mut reached = 0;
    if let Some(RecoveryCrash { step, after }) = crash {
        let crash = Arc::new(CrashAt::new(step, after));
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
/// of the recovery, before it and after it. Prints how many schedules ran and how they
/// converged.
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

    let (mut single, mut happened, mut double) = (0, 0, SecondCrashes::default());
    for ambiguous in [false, true] {
        for k in 1..=steps {
            for second in std::iter::once(None).chain(RecoveryCrash::all().map(Some)) {
                let schedule = format!(
                    "{kind} on {backend}: crash {} step {k}{}",
                    if ambiguous { "after" } else { "before" },
                    second.map_or(String::new(), |crash| format!(", then {crash}"))
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
                    Some(crash) => double.count(crash, reached),
                }
                // Once the crashing sweeps no longer reach the step, every step had its crashes.
                if second.is_some_and(|crash| reached < crash.step) {
                    break;
                }
            }
        }
    }
    println!(
        "crash schedules [{kind}, {backend}]: {steps} durable steps; {single} single-crash schedules: {happened} converged to fully happened, {} to never happened, 0 in between; {double}, all converged",
        single - happened
    );
}

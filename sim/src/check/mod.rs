//! What a run is held to, once its actors have stopped and its intents have settled: every
//! answer given during the run against what storage and the replicas say at the end ([`End`]).
//! Each check has a name ([`Check`]), and every violation names the check that found it, so a
//! test can say which check must catch a bug, and that no other does.
//!
//! - **`no-false-answer`.** An operation answered published (a publish, a 412 naming the
//!   publish, a roll-forward executed, an in-process commit acknowledged) is published; one
//!   answered ended (an abort, a 412 saying it ended, an abandonment executed) never became
//!   visible; a begin or commit refused with an error that certainly had no effect published
//!   nothing (`outcomes.rs`).
//! - **`ended-stays-ended`.** An operation answered ended is never begun again: a begin sent
//!   after that answer (a copy still on its way, a writer asking where it stands) finds the
//!   end and says so.
//! - **`all-or-nothing`.** An operation's splits are all published or none is.
//! - **`exactly-once`.** Each writer's partition of the checkpoint stands at the number of its
//!   operations that published, and those operations started from 0, 1, 2, ... once each:
//!   no delta applied twice, none lost.
//! - **`invariants`.** `Engine::verify` finds no violation, at the end and whenever the
//!   operator verifies during the run.
//! - **`linearizable`.** One order of every publish and every read fits the moments they were
//!   requested and answered ([`crate::linearize`]).
//! - **`one-sweep-at-a-time`.** No two replicas' gated sweeps of the dataset overlap in
//!   simulated time, while their clocks are within the gates' allowance (beyond it, the gates
//!   promise nothing and every other check must hold regardless: [`overlapping_sweeps`]).
//! - **`reader-generations`** and **`read-only-handles`.** Each reader's handle only moves
//!   forward, shows every operation whole or not at all, and never loses a split it showed
//!   unless an operation replaced it; a read-only handle never sweeps (`reads.rs`).
//! - **`config-applies`.** A config apply answered promoted is the config every reader and
//!   the end show at that version; one refused never shows.
//! - **`policy-registry`, `policy-answers`, `policy-runs`, `policy-liveness`.** The registry's
//!   records are a chain, every swap's and rollback's answer is its record, every replica runs
//!   only newer records, and all run the newest once faults stop (`policy.rs`).
//! - **`fleet-epochs`, `counted-gone-stays-gone`, `counted-gone-had-stopped`,
//!   `fleet-liveness`.** No epoch is held by two replicas, a replica's epoch only grows, a
//!   member counted gone had stopped acting and never comes back under its epoch, whatever the
//!   clocks, and once faults stop every replica sees every other and all agree on the
//!   dataset's owner (`fleet.rs`).
//! - **`leases-respected`.** A supervisor's sweep never takes over an operation while a lease
//!   its writer was granted still runs, allowing for how far apart the replicas' clocks read
//!   (`leases.rs`).
//! - **`grace-periods-kept`.** A reader still serving a generation that showed a split finds
//!   its object for the deletion grace period after the split's mark (`grace.rs`).
//! - **`settles-without-operator`.** Once the faults stop and every lease runs out, the
//!   supervisors alone settle every intent.
//! - **`end-readable`.** The end state can be read at all (with the faults stopped, it must).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use mend::model::{Dataset, SplitState};
use mend::runtime::registry::ActiveRecord;

use crate::schedule::SOURCE;

mod fleet;
mod grace;
mod history;
mod leases;
mod outcomes;
mod policy;
mod reads;

pub use fleet::overlapping_sweeps;
pub use history::{
    Claim, ClaimRecord, ConfigApplyRecord, ConfigOutcome, GenerationRead, HeartbeatRecord, History,
    LeaseGrant, ObjectRead, OperationRecord, PauseRecord, PolicyChangeRecord, PolicyOutcome,
    PolicyRun, PositionRead, RestartRecord, SweepRecord, TakeoverRecord,
};
pub(crate) use outcomes::with_replaced;

/// A check a run is held to, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Check {
    NoFalseAnswer,
    EndedStaysEnded,
    AllOrNothing,
    ExactlyOnce,
    Invariants,
    Linearizable,
    OneSweepAtATime,
    ReaderGenerations,
    ReadOnlyHandles,
    ConfigApplies,
    PolicyRegistry,
    PolicyAnswers,
    PolicyRuns,
    PolicyLiveness,
    FleetEpochs,
    CountedGoneStaysGone,
    CountedGoneHadStopped,
    FleetLiveness,
    SettlesWithoutOperator,
    LeasesRespected,
    GracePeriodsKept,
    EndReadable,
}

impl Check {
    /// Every check.
    pub const ALL: [Check; 22] = [
        Check::NoFalseAnswer,
        Check::EndedStaysEnded,
        Check::AllOrNothing,
        Check::ExactlyOnce,
        Check::Invariants,
        Check::Linearizable,
        Check::OneSweepAtATime,
        Check::ReaderGenerations,
        Check::ReadOnlyHandles,
        Check::ConfigApplies,
        Check::PolicyRegistry,
        Check::PolicyAnswers,
        Check::PolicyRuns,
        Check::PolicyLiveness,
        Check::FleetEpochs,
        Check::CountedGoneStaysGone,
        Check::CountedGoneHadStopped,
        Check::FleetLiveness,
        Check::SettlesWithoutOperator,
        Check::LeasesRespected,
        Check::GracePeriodsKept,
        Check::EndReadable,
    ];

    /// The check's name, as violations and the docs say it.
    pub fn name(self) -> &'static str {
        match self {
            Check::NoFalseAnswer => "no-false-answer",
            Check::EndedStaysEnded => "ended-stays-ended",
            Check::AllOrNothing => "all-or-nothing",
            Check::ExactlyOnce => "exactly-once",
            Check::Invariants => "invariants",
            Check::Linearizable => "linearizable",
            Check::OneSweepAtATime => "one-sweep-at-a-time",
            Check::ReaderGenerations => "reader-generations",
            Check::ReadOnlyHandles => "read-only-handles",
            Check::ConfigApplies => "config-applies",
            Check::PolicyRegistry => "policy-registry",
            Check::PolicyAnswers => "policy-answers",
            Check::PolicyRuns => "policy-runs",
            Check::PolicyLiveness => "policy-liveness",
            Check::FleetEpochs => "fleet-epochs",
            Check::CountedGoneStaysGone => "counted-gone-stays-gone",
            Check::CountedGoneHadStopped => "counted-gone-had-stopped",
            Check::FleetLiveness => "fleet-liveness",
            Check::SettlesWithoutOperator => "settles-without-operator",
            Check::LeasesRespected => "leases-respected",
            Check::GracePeriodsKept => "grace-periods-kept",
            Check::EndReadable => "end-readable",
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a check found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub check: Check,
    pub message: String,
}

impl Violation {
    pub fn new(check: Check, message: impl Into<String>) -> Self {
        Self {
            check,
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.check, self.message)
    }
}

/// What the checks found, and how much they held.
#[derive(Debug, Default)]
pub struct Found {
    pub published: usize,
    pub ended: usize,
    pub claims_checked: usize,
    pub generations_checked: usize,
    /// Publishes and reads placed in one order by the linearizability check.
    pub events_linearized: usize,
    /// Config applies whose answers were held against the readers and the end.
    pub config_applies_checked: usize,
    /// Policy changes whose answers were held against the registry, and replicas' runs of a
    /// policy held against its records.
    pub policy_changes_checked: usize,
    pub policy_runs_checked: usize,
    /// Heartbeats whose views were held to the membership's promises, and members that
    /// another replica saw expire (a takeover of what they owned).
    pub heartbeats_checked: usize,
    pub takeovers: usize,
    /// Leases held against the takeovers of their operations.
    pub leases_checked: usize,
    /// Readers' reads of objects held to the grace periods they were owed.
    pub object_reads_checked: usize,
    /// Pairs of sweeps that overlapped (counted, not violations, with a clock beyond the
    /// gates' allowance).
    pub sweeps_overlapped: usize,
    pub violations: Vec<Violation>,
}

impl Found {
    /// Records a violation of `check`.
    pub fn push(&mut self, check: Check, message: impl Into<String>) {
        self.violations.push(Violation::new(check, message));
    }

    /// The checks that fired, each once.
    pub fn fired(&self) -> BTreeSet<Check> {
        self.violations.iter().map(|v| v.check).collect()
    }
}

/// What storage and the replicas say once the run has settled: everything the history is held
/// to. Read by the schedule after its quiet phase; made by hand in the tests that show each
/// check fires.
#[derive(Debug, Clone)]
pub struct End {
    /// Every split row's state, by id.
    pub rows: BTreeMap<String, SplitState>,
    /// The splits whose rows a reconcile staged (adopted or discarded orphans), by the
    /// reconciling node recorded in each row.
    pub reconciled: BTreeSet<String>,
    /// The config the dataset was created with.
    pub initial_config: mend::model::DatasetConfig,
    /// The dataset as it ends (`None` when it cannot be read: then `unreadable` says so).
    pub dataset: Option<Dataset>,
    /// What `Engine::verify` found wrong at the end.
    pub invariant_violations: Vec<String>,
    /// The policy registry's records, oldest first; what each replica runs; the default
    /// policy's digest (what every replica runs with no record).
    pub registry: Vec<ActiveRecord>,
    pub running: Vec<String>,
    pub default_digest: String,
    /// Whether the replicas held fleet memberships, and each one's view from one more
    /// heartbeat once the faults stopped.
    pub fleet: bool,
    pub last_views: Vec<Option<HeartbeatRecord>>,
    /// A replica's clock was off by more than the gates' allowance.
    pub clocks_beyond_allowance: bool,
    /// How far apart two replicas' clocks may read, in ms: the spread of their skews.
    pub clock_spread_ms: u64,
    /// The intents left unsettled once the quiet phase gave up, and how long it had waited
    /// and swept.
    pub unsettled: Vec<String>,
    pub quiet_wait_ms: u64,
    pub quiet_rounds: usize,
    /// The operations of the history that held an intent (they staged, or an answer said
    /// they began or ended) and have none now, yet whose publish and end are both unrecorded:
    /// a begin of one still on its way would begin it again.
    pub ends_unrecorded: Vec<String>,
    /// What could not be read at the end: each is a violation of `end-readable`, and the
    /// checks that need it do not run.
    pub unreadable: Vec<String>,
}

/// The deltas of the plain operations in `outside` (some split adopted by reconcile), by
/// partition: whether each applied, as its publish was answered.
fn adopted_deltas<'a>(
    history: &'a History,
    outside: &BTreeSet<&str>,
) -> Vec<outcomes::AdoptedDelta<'a>> {
    history
        .operations
        .iter()
        .filter(|record| outside.contains(record.operation_id.as_str()))
        .filter(|record| record.moves_checkpoint())
        .map(|record| {
            let said = |claim: fn(&Claim) -> bool| record.claims.iter().any(|c| claim(&c.claim));
            let applied = if said(|claim| matches!(claim, Claim::Published)) {
                Some(true)
            } else if said(|claim| {
                matches!(claim, Claim::Ended | Claim::NotBegun | Claim::NotPublished)
            }) {
                Some(false)
            } else {
                None
            };
            outcomes::AdoptedDelta {
                partition: record.partition.as_str(),
                from: record.from,
                applied,
            }
        })
        .collect()
}

/// Holds `history` to `end`: every check.
pub fn run(history: &History, end: &End) -> Found {
    let mut found = Found::default();
    // A plain writer's split whose row reconcile staged was adopted from an orphan object
    // (a put that landed after gc collected its row): published outside its operation, or by
    // the operation's own publish landing after reconcile staged the rows (a plain publish
    // publishes staged rows by id, whoever staged them; found by seed 16346025194394401060).
    // Such operations are held to nothing the operation protocol promises, but their deltas
    // are counted once (`exactly-once`) by what their publishes were answered.
    let outside: BTreeSet<&str> = history
        .operations
        .iter()
        .filter(|record| {
            record.plain
                && record
                    .split_ids
                    .iter()
                    .any(|split_id| end.reconciled.contains(split_id))
        })
        .map(|record| record.operation_id.as_str())
        .collect();
    let adopted = adopted_deltas(history, &outside);
    let adopted_apart;
    let history = if outside.is_empty() {
        history
    } else {
        adopted_apart = history.without(&outside);
        &adopted_apart
    };
    found.violations.extend(history.violations.iter().cloned());
    for what in &end.unreadable {
        found.push(Check::EndReadable, what.clone());
    }
    if let (true, Some(dataset)) = (end.unreadable.is_empty(), &end.dataset) {
        reads::config_applies(history, dataset, &mut found);
        let outcomes = outcomes::of_operations(history, &end.rows, &mut found);
        outcomes::claims(history, &outcomes, &mut found);
        outcomes::ended_stays_ended(history, &end.ends_unrecorded, &mut found);
        reads::generations(history, &end.rows, &outcomes.published_ids, &mut found);
        let linearization = crate::linearize::check(history, &outcomes.published_ids);
        found.events_linearized = linearization.publishes + linearization.reads;
        for violation in linearization.violations {
            found.push(Check::Linearizable, violation);
        }
        let positions = dataset.checkpoint.get(SOURCE).cloned().unwrap_or_default();
        outcomes::exactly_once(
            history,
            &positions,
            outcomes.published_from,
            &adopted,
            &mut found,
        );
        for violation in &end.invariant_violations {
            found.push(Check::Invariants, format!("at the end: {violation}"));
        }
        policy::changes(
            history,
            &end.registry,
            &end.running,
            &end.default_digest,
            &mut found,
        );
    }
    leases::respected(history, end, &mut found);
    grace::kept(history, end, &mut found);
    if end.fleet {
        fleet::fleet(history, &end.last_views, &mut found);
    }
    let overlaps = overlapping_sweeps(history);
    found.sweeps_overlapped = overlaps.len();
    if !end.clocks_beyond_allowance {
        for overlap in overlaps {
            found.push(Check::OneSweepAtATime, overlap);
        }
    }
    if !end.unsettled.is_empty() {
        found.push(
            Check::SettlesWithoutOperator,
            format!(
                "{} intents still unsettled {} simulated s after the faults stopped, after {} \
                 sweeps by each replica: {}",
                end.unsettled.len(),
                end.quiet_wait_ms / 1000,
                end.quiet_rounds,
                end.unsettled.join(", ")
            ),
        );
    }
    found
}

//! What a run is held to, once its actors have stopped and its intents have settled: every
//! answer given during the run against what storage says at the end.
//!
//! - **No answer false.** An operation answered published (a publish, a 412 naming the
//!   publish, a roll-forward executed, an in-process commit acknowledged) is published; one
//!   answered ended (an abort, a 412 saying it ended, an abandonment executed) never became
//!   visible; a begin or commit refused with an error that certainly had no effect published
//!   nothing.
//! - **All or nothing.** An operation's splits are all published or none is.
//! - **Exactly once.** Each writer's partition of the checkpoint stands at the number of its
//!   operations that published, and those operations started from 0, 1, 2, ... once each:
//!   no delta applied twice, none lost.
//! - **The invariants.** `Engine::verify` finds no violation.
//! - **Linearizable.** One order of every publish and every read fits the moments they were
//!   requested and answered ([`crate::linearize`]).
//! - **One sweep at a time.** No two replicas' gated sweeps of the dataset overlap in
//!   simulated time, while their clocks are within the gates' allowance (beyond it, the gates
//!   promise nothing and every other check must hold regardless: [`overlapping_sweeps`]).
//! - **Policy changes.** Every swap's and rollback's answer is the registry's record, every
//!   replica runs only newer records, and all run the newest once faults stop
//!   ([`policy_changes`]).
//! - **The fleet.** No epoch is held by two replicas, a replica's epoch only grows (a rejoin
//!   to a higher one), a joining answered before another began has the lower epoch, a member
//!   counted gone had stopped acting and never comes back under its epoch, whatever the
//!   clocks, and once faults stop every replica sees every other and all agree on the
//!   dataset's owner ([`fleet`]).

use std::collections::{BTreeMap, BTreeSet};

use mend::Engine;
use mend::model::{DatasetConfig, ListQuery, SplitState};
use mend::runtime::registry::ActiveRecord;

use crate::schedule::{DATASET, SOURCE};

/// What one answer claims about how its operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Published, or certain to be.
    Published,
    /// Confirmed: publishes unless another operation publishes from the same checkpoint
    /// positions first (only a writer that begins again without resolving its operation
    /// races itself so).
    PublishesUnlessOvertaken,
    /// Ended without publishing, and never will.
    Ended,
    /// Refused with an error that certainly had no effect: nothing of it may ever publish.
    NotBegun,
    /// A publish refused for a reason other than the operation's end: it had not published
    /// (a publish that landed answers published, however it is sent again).
    NotPublished,
    /// Nothing about the end.
    Nothing,
}

/// One writer's operation, and every claim made about it.
#[derive(Debug, Clone)]
pub struct OperationRecord {
    pub operation_id: String,
    /// The writer's checkpoint partition, and the position its delta starts from.
    pub partition: String,
    pub from: u64,
    pub split_ids: Vec<String>,
    /// Simulated ms since the run started when its writer sent its begin or commit: it
    /// cannot take effect earlier.
    pub invoked_ms: u64,
    /// Every claim made about it.
    pub claims: Vec<ClaimRecord>,
}

/// One claim about an operation: what was said, by whom, and when it was said (simulated ms
/// since the run started): an operation claimed published took effect by then.
#[derive(Debug, Clone)]
pub struct ClaimRecord {
    pub claim: Claim,
    pub by: String,
    pub at_ms: u64,
}

/// A writer's read of where its checkpoint partition stands, between two moments (simulated
/// ms since the run started).
#[derive(Debug, Clone)]
pub struct PositionRead {
    pub partition: String,
    pub position: u64,
    pub from_ms: u64,
    pub until_ms: u64,
}

/// One gated sweep, in simulated time.
#[derive(Debug, Clone)]
pub struct SweepRecord {
    pub replica: usize,
    pub gate_epoch: u64,
    pub from_ms: i64,
    pub until_ms: i64,
}

/// One answered heartbeat of a replica's membership: what its view said, in simulated ms since
/// the run started.
#[derive(Debug, Clone)]
pub struct HeartbeatRecord {
    pub replica: usize,
    /// The member it heartbeats as: its process's replica id.
    pub replica_id: String,
    /// When the first heartbeat since this replica's last answered one started: an
    /// unanswered one may have claimed the epoch this one reports.
    pub started_ms: u64,
    pub answered_ms: u64,
    pub epoch: u64,
    pub rejoined: bool,
    /// The live members, by replica id, with their epochs.
    pub members: Vec<(String, u64)>,
    /// Members seen expired, by replica id, with the epochs they held.
    pub expired: Vec<(String, u64)>,
    /// The dataset's owner by this view.
    pub owner: Option<String>,
    /// Until when its own lease is live by this view (its monotonic clock, in simulated ms
    /// since the run started).
    pub lease_live_until_ms: u64,
}

/// A replica's process crashed and started again, in simulated ms since the run started.
#[derive(Debug, Clone)]
pub struct RestartRecord {
    pub replica: usize,
    pub at_ms: u64,
    /// The new process's incarnation.
    pub incarnation: u32,
}

/// A replica paused as a whole, in simulated ms since the run started.
#[derive(Debug, Clone)]
pub struct PauseRecord {
    pub replica: usize,
    pub from_ms: u64,
    pub until_ms: u64,
}

/// One generation a reader's live handle published, or served again after a refresh that
/// found nothing new, read between two moments (simulated ms since the run started).
#[derive(Debug, Clone)]
pub struct GenerationRead {
    pub reader: usize,
    pub manifest_version: u64,
    /// The dataset's config it was read with.
    pub config_version: u64,
    pub config: DatasetConfig,
    /// The published splits it shows.
    pub published: BTreeSet<String>,
    /// A refresh found nothing new: the handle serves the generation it served before.
    pub unchanged: bool,
    pub from_ms: u64,
    pub until_ms: u64,
}

/// A config apply under an idempotency key, and its answer.
#[derive(Debug, Clone)]
pub struct ConfigApplyRecord {
    pub key: String,
    /// The config it asked for (unique to the apply).
    pub config: DatasetConfig,
    pub outcome: ConfigOutcome,
}

/// What a config apply was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOutcome {
    /// Promoted, at this config version, to this config.
    Promoted { version: u64, config: DatasetConfig },
    /// Refused: the version it expected had moved on, and its config was never promoted.
    Refused,
    /// Not known.
    Unknown,
}

/// A policy swap or rollback the operator sent under an idempotency key.
#[derive(Debug, Clone)]
pub struct PolicyChangeRecord {
    pub key: String,
    /// The digest a swap asked for; `None` for a rollback.
    pub swap_to: Option<String>,
    pub outcome: PolicyOutcome,
    /// When it was first sent, and when its answer came, in simulated ms.
    pub invoked_ms: u64,
    pub answered_ms: u64,
}

/// What a policy change was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyOutcome {
    /// Made: the registry's record `version` names `digest`.
    Changed { version: u64, digest: String },
    /// Refused, and certainly not applied (already the active policy, nothing to roll back).
    Refused { error: String },
    /// Never known: the run ended while it was in doubt.
    Unknown,
}

/// Which policy a replica ran after following the registry: the registry record it installed
/// last (if any) and the running policy's digest.
#[derive(Debug, Clone)]
pub struct PolicyRun {
    pub replica: usize,
    /// Which of the replica's processes (0 at first, one more at each restart): a new process
    /// starts from the default policy and no record.
    pub incarnation: u32,
    pub registry_version: Option<u64>,
    pub digest: String,
}

/// Everything the actors were told and saw.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub operations: Vec<OperationRecord>,
    pub sweeps: Vec<SweepRecord>,
    /// Every generation the readers' handles published or served again, in the order they
    /// did.
    pub reads: Vec<GenerationRead>,
    /// Every checkpoint position a writer read before an operation.
    pub positions_read: Vec<PositionRead>,
    /// Every config apply the operator sent, and what it was answered.
    pub config_applies: Vec<ConfigApplyRecord>,
    /// Every policy change the operator sent, and what it was answered.
    pub policy_changes: Vec<PolicyChangeRecord>,
    /// Which policy each replica ran after each time it followed the registry.
    pub policy_runs: Vec<PolicyRun>,
    /// Every answered heartbeat of a replica's membership, in the order answered.
    pub heartbeats: Vec<HeartbeatRecord>,
    /// Every pause of a whole replica.
    pub pauses: Vec<PauseRecord>,
    /// Every crash and restart of a replica's process.
    pub restarts: Vec<RestartRecord>,
    /// What an actor found wrong while the run went on (a mid-run verify, a read-only handle
    /// that swept).
    pub violations: Vec<String>,
}

impl History {
    /// Records `claim` about `operation_id` (an operation no writer of the run began, such as
    /// an in-process commit's own id seen by a sweep, is not held to anything).
    pub fn claim(&mut self, operation_id: &str, claim: Claim, by: String, at_ms: u64) {
        if claim == Claim::Nothing {
            return;
        }
        if let Some(record) = self
            .operations
            .iter_mut()
            .find(|record| record.operation_id == operation_id)
        {
            record.claims.push(ClaimRecord { claim, by, at_ms });
        }
    }
}

/// What the checks found.
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
    pub violations: Vec<String>,
}

/// Holds the policy changes' answers and the replicas' runs against the registry's
/// `records` (oldest first), and, at the end, each replica's policy (`running`, by replica)
/// against the newest record:
///
/// - the records are a chain: record `n` is version `n`, names the digest of `n - 1` as the
///   one it replaced, and a rollback's record restores the digest `n - 1` replaced;
/// - a key is in at most one record (a retry never changes the policy twice);
/// - a change answered made at version `n` is record `n`, under its key, with the digest it
///   asked for; one refused is in no record; and one answered after another was sent is
///   recorded after it;
/// - each replica's runs only move to newer records, each running its record's digest;
/// - once the faults stopped and every replica followed, every one runs the newest record's
///   policy (the default, with no record).
pub fn policy_changes(
    history: &History,
    records: &[ActiveRecord],
    running: &[String],
    default_digest: &str,
    found: &mut Found,
) {
    registry_chain(records, found);
    let by_key = record_keys(records, found);
    change_answers(history, records, &by_key, found);
    policy_runs(history, records, found);
    let newest = records
        .last()
        .map_or(default_digest, |record| &record.digest);
    for (replica, digest) in running.iter().enumerate() {
        if digest != newest {
            found.violations.push(format!(
                "liveness: replica {replica} runs {digest} after the faults stopped, but the \
                 registry's active policy is {newest}"
            ));
        }
    }
}

/// The registry's records are a chain: record `n` is version `n`, names the digest of `n - 1`
/// as the one it replaced, and a rollback's record restores the digest `n - 1` replaced.
fn registry_chain(records: &[ActiveRecord], found: &mut Found) {
    for (index, record) in records.iter().enumerate() {
        if record.version != index as u64 {
            found.violations.push(format!(
                "policy registry: record {index} says it is version {}",
                record.version
            ));
        }
        if index > 0 {
            let before = &records[index - 1];
            if record.previous.as_deref() != Some(before.digest.as_str()) {
                found.violations.push(format!(
                    "policy registry: record {index} says it replaced {:?}, but record {} was {}",
                    record.previous,
                    index - 1,
                    before.digest
                ));
            }
            if record.change == "rollback" && before.previous.as_deref() != Some(&record.digest) {
                found.violations.push(format!(
                    "policy registry: rollback record {index} restored {}, but record {} had \
                     replaced {:?}",
                    record.digest,
                    index - 1,
                    before.previous
                ));
            }
        }
    }
}

/// A key is in at most one record (a retry never changes the policy twice). Answers the
/// version each key made.
fn record_keys<'a>(records: &'a [ActiveRecord], found: &mut Found) -> BTreeMap<&'a str, u64> {
    let mut by_key: BTreeMap<&str, u64> = BTreeMap::new();
    for record in records {
        if let Some(recorded) = &record.recorded
            && let Some(other) = by_key.insert(&recorded.key, record.version)
        {
            found.violations.push(format!(
                "policy registry: key {} made records {other} and {}: a retry changed the \
                 policy again",
                recorded.key, record.version
            ));
        }
    }
    by_key
}

/// A change answered made at version `n` is record `n`, under its key, with the digest it
/// asked for; one refused is in no record; one answered after another was sent is recorded
/// after it.
fn change_answers(
    history: &History,
    records: &[ActiveRecord],
    by_key: &BTreeMap<&str, u64>,
    found: &mut Found,
) {
    let mut answered: Vec<(&str, u64, u64, u64)> = Vec::new();
    let mut made: BTreeMap<&str, u64> = BTreeMap::new();
    for change in &history.policy_changes {
        found.policy_changes_checked += 1;
        let key = change.key.as_str();
        match &change.outcome {
            PolicyOutcome::Changed { version, digest } => {
                let record = records.get(*version as usize);
                let holds = record.is_some_and(|record| {
                    record.digest == *digest
                        && record.recorded.as_ref().is_some_and(|r| r.key == key)
                }) && change.swap_to.as_ref().is_none_or(|asked| asked == digest);
                if !holds {
                    found.violations.push(format!(
                        "false answer: policy change {key} (swap to {:?}) was answered made at \
                         registry version {version} with {digest}, but that record is {record:?}",
                        change.swap_to
                    ));
                }
                answered.push((key, change.invoked_ms, change.answered_ms, *version));
                if let Some(other) = made.insert(key, *version)
                    && other != *version
                {
                    found.violations.push(format!(
                        "false answer: policy change {key} was answered made at registry \
                         version {other}, and sent again, at version {version}"
                    ));
                }
            }
            PolicyOutcome::Refused { error } => {
                if let Some(version) = by_key.get(key) {
                    found.violations.push(format!(
                        "false answer: policy change {key} was refused ({error}), yet made \
                         registry record {version}"
                    ));
                }
            }
            PolicyOutcome::Unknown => {}
        }
    }
    // A copy of a change sent again answers the record of its first: it is the same change.
    for (key, invoked, _, version) in &answered {
        for (earlier_key, _, earlier_answered, earlier) in &answered {
            if earlier_key != key && earlier_answered < invoked && earlier >= version {
                found.violations.push(format!(
                    "policy registry: a change answered at {earlier_answered} ms made version \
                     {earlier}, and one sent after it, at {invoked} ms, made version {version}"
                ));
            }
        }
    }
}

/// Each replica's runs only move to newer records, each running its record's digest.
fn policy_runs(history: &History, records: &[ActiveRecord], found: &mut Found) {
    let mut last: BTreeMap<(usize, u32), u64> = BTreeMap::new();
    for run in &history.policy_runs {
        found.policy_runs_checked += 1;
        let process = (run.replica, run.incarnation);
        let Some(version) = run.registry_version else {
            if last.contains_key(&process) {
                found.violations.push(format!(
                    "replica {} forgot the registry record it runs",
                    run.replica
                ));
            }
            continue;
        };
        if let Some(before) = last.insert(process, version)
            && before > version
        {
            found.violations.push(format!(
                "replica {} went back from the policy of registry record {before} to record \
                 {version}'s",
                run.replica
            ));
        }
        match records.get(version as usize) {
            Some(record) if record.digest == run.digest => {}
            record => found.violations.push(format!(
                "replica {} runs {} as registry record {version}, which is {record:?}",
                run.replica, run.digest
            )),
        }
    }
}

/// Holds the replicas' heartbeats (in the order answered) to what the membership promises,
/// and `last` (each replica's view from one more heartbeat once the faults stopped and every
/// replica had joined again) to liveness:
///
/// - no epoch is held by two replicas;
/// - a replica's epoch never goes back, and a rejoin takes a higher one;
/// - a joining answered before another joining started has the lower epoch;
/// - each view lists its own replica among the live members;
/// - a member one replica counted gone (expired) never comes back under the epoch it held:
///   the others may have taken its datasets over, so it must join again;
/// - a member one replica counted gone had stopped acting by then: its own view of its lease
///   under that epoch had run out before the view that counted it gone was answered;
/// - at the end, every replica's view lists all of them, and all name the same owner.
///
/// The membership is timed by the store's stamps, so these hold whatever the replicas' clocks
/// say, beyond the gates' allowance too.
pub fn fleet(history: &History, last: &[Option<HeartbeatRecord>], found: &mut Found) {
    epochs(history, last, found);
    no_renewal_once_expired(history, last, found);
    stopped_before_counted_gone(history, last, found);
    // Takeovers: a member in a replica's view that its next view has expired.
    let mut before: BTreeMap<&str, &HeartbeatRecord> = BTreeMap::new();
    for beat in &history.heartbeats {
        if let Some(previous) = before.insert(&beat.replica_id, beat) {
            found.takeovers += previous
                .members
                .iter()
                .filter(|member| beat.expired.contains(member))
                .count();
        }
    }
    if !last.is_empty() {
        fleet_liveness(last, found);
    }
}

/// No epoch is held by two replicas; a replica's epoch never goes back and a rejoin takes a
/// higher one; a joining answered before another began has the lower epoch; each view lists
/// its own replica.
fn epochs(history: &History, last: &[Option<HeartbeatRecord>], found: &mut Found) {
    let mut holders: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
    let mut latest: BTreeMap<&str, u64> = BTreeMap::new();
    // (started, answered, epoch, member) of each joining: a member's first view, or one with
    // a new epoch.
    let mut joinings: Vec<(u64, u64, u64, &str)> = Vec::new();
    for beat in history.heartbeats.iter().chain(last.iter().flatten()) {
        found.heartbeats_checked += 1;
        for (id, epoch) in &beat.members {
            holders.entry(*epoch).or_default().insert(id);
        }
        let me = beat.replica_id.as_str();
        if !beat
            .members
            .iter()
            .any(|(id, epoch)| *id == me && *epoch == beat.epoch)
        {
            found.violations.push(format!(
                "fleet: {me}'s view at {} ms does not list itself at epoch {}: {:?}",
                beat.answered_ms, beat.epoch, beat.members
            ));
        }
        match latest.insert(me, beat.epoch) {
            Some(before) if beat.epoch < before || (beat.rejoined && beat.epoch == before) => {
                found.violations.push(format!(
                    "fleet: {me} went from epoch {before} to {}{} at {} ms",
                    beat.epoch,
                    if beat.rejoined { " (rejoined)" } else { "" },
                    beat.answered_ms
                ));
            }
            Some(before) if before == beat.epoch => {}
            _ => joinings.push((beat.started_ms, beat.answered_ms, beat.epoch, me)),
        }
    }
    for (epoch, ids) in &holders {
        if ids.len() > 1 {
            found
                .violations
                .push(format!("fleet: epoch {epoch} is held by {ids:?}"));
        }
    }
    for earlier in &joinings {
        for later in &joinings {
            if earlier.1 < later.0 && earlier.2 >= later.2 {
                found.violations.push(format!(
                    "fleet: {} joined with epoch {} at {} ms, before {} began \
                     the joining (at {} ms) that got epoch {}",
                    earlier.3, earlier.2, earlier.1, later.3, later.0, later.2
                ));
            }
        }
    }
}

/// A member one replica counted gone never renews under the epoch it held.
fn no_renewal_once_expired(history: &History, last: &[Option<HeartbeatRecord>], found: &mut Found) {
    let beats: Vec<&HeartbeatRecord> = history
        .heartbeats
        .iter()
        .chain(last.iter().flatten())
        .collect();
    for gone_in in &beats {
        for (id, epoch) in &gone_in.expired {
            // Its own view, from a heartbeat begun after it was counted gone: by its own
            // clock, too, its lease had run out then.
            let back = beats.iter().find(|later| {
                later.replica_id == *id
                    && later.started_ms > gone_in.answered_ms
                    && later.epoch == *epoch
            });
            if let Some(back) = back {
                found.violations.push(format!(
                    "fleet: replica {} counted {id} (epoch {epoch}) gone at {} ms, and \
                     {id} renewed its membership under the same epoch at {} ms",
                    gone_in.replica, gone_in.answered_ms, back.answered_ms
                ));
            }
        }
    }
}

/// A member counted gone had stopped acting: every view it had under the epoch it was counted
/// gone with says its lease ran out no later than the view that counted it gone was answered.
fn stopped_before_counted_gone(
    history: &History,
    last: &[Option<HeartbeatRecord>],
    found: &mut Found,
) {
    let beats: Vec<&HeartbeatRecord> = history
        .heartbeats
        .iter()
        .chain(last.iter().flatten())
        .collect();
    // The latest end of its lease each member's own views gave it, per epoch.
    let mut live_until: BTreeMap<(&str, u64), (u64, u64)> = BTreeMap::new();
    for beat in &beats {
        let latest = live_until
            .entry((beat.replica_id.as_str(), beat.epoch))
            .or_insert((0, 0));
        if beat.lease_live_until_ms > latest.0 {
            *latest = (beat.lease_live_until_ms, beat.answered_ms);
        }
    }
    for gone_in in &beats {
        for (id, epoch) in &gone_in.expired {
            if let Some((until_ms, answered_ms)) = live_until.get(&(id.as_str(), *epoch))
                && *until_ms > gone_in.answered_ms
            {
                found.violations.push(format!(
                    "fleet: replica {} counted {id} (epoch {epoch}) gone at {} ms, while \
                     {id}'s own view answered at {answered_ms} ms had its lease live until \
                     {until_ms} ms",
                    gone_in.replica, gone_in.answered_ms
                ));
            }
        }
    }
}

/// Once the faults stopped, every replica's view lists all of them, and all name one owner.
fn fleet_liveness(last: &[Option<HeartbeatRecord>], found: &mut Found) {
    // Each replica as its running process heartbeats (a crashed one's old id has expired).
    let everyone: BTreeSet<String> = last
        .iter()
        .flatten()
        .map(|view| view.replica_id.clone())
        .collect();
    let mut owners = BTreeSet::new();
    for (replica, view) in last.iter().enumerate() {
        let Some(view) = view else {
            found.violations.push(format!(
                "liveness: replica {replica}'s heartbeat failed after the faults stopped"
            ));
            continue;
        };
        let members: BTreeSet<String> = view.members.iter().map(|(id, _)| id.clone()).collect();
        if members != everyone {
            found.violations.push(format!(
                "liveness: once the faults stopped, replica {replica} sees the members \
                 {members:?}, not {everyone:?}"
            ));
        }
        owners.insert(view.owner.clone());
    }
    if owners.len() > 1 {
        found.violations.push(format!(
            "liveness: once the faults stopped, the replicas name different owners: {owners:?}"
        ));
    }
}

/// Every pair of gated sweeps of two replicas that overlapped in simulated time: none while
/// the replicas' clocks are within the gates' allowance.
pub fn overlapping_sweeps(history: &History) -> Vec<String> {
    let mut overlaps = Vec::new();
    // A sweep whose hold ran out before it began held nothing (it wrote nothing either: every
    // durable write checks the hold first).
    let mut sweeps: Vec<SweepRecord> = history
        .sweeps
        .iter()
        .filter(|sweep| sweep.until_ms > sweep.from_ms)
        .cloned()
        .collect();
    sweeps.sort_by_key(|sweep| (sweep.from_ms, sweep.until_ms));
    for (index, earlier) in sweeps.iter().enumerate() {
        for later in &sweeps[index + 1..] {
            if later.from_ms >= earlier.until_ms {
                break;
            }
            if later.replica != earlier.replica {
                overlaps.push(format!(
                    "two sweeps at once: replica {} ({}..{} ms, gate epoch {}) and replica {} \
                     ({}..{} ms, gate epoch {})",
                    earlier.replica,
                    earlier.from_ms,
                    earlier.until_ms,
                    earlier.gate_epoch,
                    later.replica,
                    later.from_ms,
                    later.until_ms,
                    later.gate_epoch
                ));
            }
        }
    }
    overlaps
}

/// Holds `history` against the dataset as `engine` reads it now.
pub async fn against_storage(engine: &Engine, history: &History) -> Found {
    let mut found = Found::default();
    let rows = match all_rows(engine).await {
        Ok(rows) => rows,
        Err(error) => {
            found
                .violations
                .push(format!("the rows cannot be read: {error}"));
            return found;
        }
    };
    let dataset = match engine.dataset(DATASET).await {
        Ok(dataset) => dataset,
        Err(error) => {
            found
                .violations
                .push(format!("the dataset cannot be read: {error}"));
            return found;
        }
    };
    let positions = dataset.checkpoint.get(SOURCE).cloned().unwrap_or_default();
    check_config_applies(history, &dataset, &mut found);

    // Which operations published, by their splits.
    let mut published_from: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut published_ids: BTreeSet<&str> = BTreeSet::new();
    for record in &history.operations {
        let states: Vec<Option<SplitState>> = record
            .split_ids
            .iter()
            .map(|split_id| rows.get(split_id).copied())
            .collect();
        let published = states.iter().all(|s| *s == Some(SplitState::Published));
        if !published && states.contains(&Some(SplitState::Published)) {
            found.violations.push(format!(
                "{}: some of its splits published and not others: {:?} are {states:?}",
                record.operation_id, record.split_ids
            ));
        }
        if published {
            found.published += 1;
            published_ids.insert(record.operation_id.as_str());
            published_from
                .entry(&record.partition)
                .or_default()
                .push(record.from);
        } else {
            found.ended += 1;
        }
    }
    check_claims(history, &published_ids, &published_from, &mut found);

    found.violations.extend(history.violations.iter().cloned());
    check_reads(history, &rows, &mut found);
    let linearization = crate::linearize::check(history, &published_ids);
    found.events_linearized = linearization.publishes + linearization.reads;
    found.violations.extend(linearization.violations);

    exactly_once(history, &positions, published_from, &mut found);

    match engine.verify(DATASET).await {
        Ok(report) => {
            for violation in report.violations {
                found
                    .violations
                    .push(format!("invariant violated: {violation:?}"));
            }
        }
        Err(error) => found
            .violations
            .push(format!("verify could not run: {error}")),
    }

    found
}

/// Every claim an answer made holds: told published, it published (or, told it publishes
/// unless overtaken, another operation published from the same position); told ended, not
/// begun or not published, it never published.
fn check_claims(
    history: &History,
    published_ids: &BTreeSet<&str>,
    published_from: &BTreeMap<&str, Vec<u64>>,
    found: &mut Found,
) {
    for record in &history.operations {
        let published = published_ids.contains(record.operation_id.as_str());
        for ClaimRecord { claim, by, .. } in &record.claims {
            found.claims_checked += 1;
            let holds = match claim {
                Claim::Published => published,
                Claim::PublishesUnlessOvertaken => {
                    published
                        || published_from
                            .get(record.partition.as_str())
                            .is_some_and(|froms| froms.contains(&record.from))
                }
                Claim::Ended | Claim::NotBegun | Claim::NotPublished => !published,
                Claim::Nothing => true,
            };
            if !holds {
                found.violations.push(format!(
                    "false answer: {} was told {claim:?} ({by}), yet it {}",
                    record.operation_id,
                    if published {
                        "published"
                    } else {
                        "never published"
                    }
                ));
            }
        }
    }
}

/// Exactly once: a partition at N was moved by N published deltas, from 0 to N - 1.
fn exactly_once(
    history: &History,
    positions: &BTreeMap<String, u64>,
    mut published_from: BTreeMap<&str, Vec<u64>>,
    found: &mut Found,
) {
    let partitions: BTreeSet<&str> = history
        .operations
        .iter()
        .map(|record| record.partition.as_str())
        .collect();
    for partition in partitions {
        let position = positions.get(partition).copied().unwrap_or(0);
        let mut froms = published_from.remove(partition).unwrap_or_default();
        froms.sort_unstable();
        let expected: Vec<u64> = (0..position).collect();
        if froms != expected {
            found.violations.push(format!(
                "checkpoint {SOURCE}/{partition} stands at {position}, yet its published \
                 operations started from {froms:?}: each delta must apply exactly once"
            ));
        }
    }
}

/// Config applies under idempotency keys: one promoted is the config it asked for, at a
/// version no other apply was answered with, and every generation read at that version shows
/// it (as the end does, if it is still the latest); one refused never shows anywhere. And the
/// readers agree: one config per config version, and each handle's version only moves forward.
fn check_config_applies(history: &History, dataset: &mend::model::Dataset, found: &mut Found) {
    let mut by_version: BTreeMap<u64, (&DatasetConfig, String)> = BTreeMap::new();
    let mut last: BTreeMap<usize, u64> = BTreeMap::new();
    for read in &history.reads {
        let seen = format!(
            "reader {} at manifest version {}",
            read.reader, read.manifest_version
        );
        match by_version.get(&read.config_version) {
            Some((config, by)) if **config != read.config => found.violations.push(format!(
                "config version {} is {:?} to {by} and {:?} to {seen}",
                read.config_version, config, read.config
            )),
            Some(_) => {}
            None => {
                by_version.insert(read.config_version, (&read.config, seen));
            }
        }
        if last
            .insert(read.reader, read.config_version)
            .is_some_and(|before| before > read.config_version)
        {
            found.violations.push(format!(
                "reader {}'s config version went back to {}",
                read.reader, read.config_version
            ));
        }
    }
    let mut answered: BTreeMap<u64, &str> = BTreeMap::new();
    for apply in &history.config_applies {
        found.config_applies_checked += 1;
        let key = apply.key.as_str();
        let shown_at: Vec<u64> = by_version
            .iter()
            .filter(|(_, (config, _))| **config == apply.config)
            .map(|(version, _)| *version)
            .chain((dataset.config == apply.config).then_some(dataset.config_version))
            .collect();
        match &apply.outcome {
            ConfigOutcome::Promoted { version, config } => {
                if *config != apply.config {
                    found.violations.push(format!(
                        "false answer: {key} asked for {:?} and was answered {config:?}",
                        apply.config
                    ));
                }
                if let Some(other) = answered.insert(*version, key) {
                    found.violations.push(format!(
                        "false answer: {other} and {key} were both answered config version \
                         {version}"
                    ));
                }
                if shown_at.iter().any(|shown| shown != version)
                    || dataset.config_version < *version
                    || dataset.config_version == *version && dataset.config != apply.config
                {
                    found.violations.push(format!(
                        "false answer: {key} was answered promoted at config version {version}, \
                         yet its config shows at {shown_at:?} and the dataset ends at config \
                         version {}",
                        dataset.config_version
                    ));
                }
            }
            ConfigOutcome::Refused => {
                if !shown_at.is_empty() {
                    found.violations.push(format!(
                        "false answer: {key} was refused, yet its config shows at config \
                         versions {shown_at:?}"
                    ));
                }
            }
            ConfigOutcome::Unknown => {}
        }
    }
}

/// What the readers saw: each handle's manifest versions only move forward; each generation
/// shows every operation whole or not at all; and a split a reader ever saw published is
/// published at the end (nothing in this run unpublishes a split, so a split seen and gone is
/// data lost, and a split of an operation answered ended that was ever seen is a false answer
/// the end state alone could miss).
fn check_reads(history: &History, rows: &BTreeMap<String, SplitState>, found: &mut Found) {
    let mut last: BTreeMap<usize, u64> = BTreeMap::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for read in &history.reads {
        // A new generation's version is later than the one before; one served again is the
        // same.
        if let Some(&before) = last.get(&read.reader)
            && (read.manifest_version < before
                || read.manifest_version == before && !read.unchanged
                || read.manifest_version != before && read.unchanged)
        {
            found.violations.push(format!(
                "reader {}'s handle went from manifest version {before} to {}",
                read.reader, read.manifest_version
            ));
        }
        last.insert(read.reader, read.manifest_version);
        if read.unchanged {
            // The generation served before: checked when it was new.
            continue;
        }
        found.generations_checked += 1;
        for record in &history.operations {
            let shown = record
                .split_ids
                .iter()
                .filter(|split_id| read.published.contains(*split_id))
                .count();
            if shown != 0 && shown != record.split_ids.len() {
                found.violations.push(format!(
                    "reader {} at manifest version {} shows {shown} of {}'s {} splits",
                    read.reader,
                    read.manifest_version,
                    record.operation_id,
                    record.split_ids.len()
                ));
            }
        }
        seen.extend(read.published.iter().map(String::as_str));
    }
    for split_id in seen {
        if rows.get(split_id) != Some(&SplitState::Published) {
            found.violations.push(format!(
                "a reader saw {split_id} published, yet at the end it is {:?}",
                rows.get(split_id)
            ));
        }
    }
}

async fn all_rows(engine: &Engine) -> mend::Result<BTreeMap<String, SplitState>> {
    let mut rows = BTreeMap::new();
    let mut query = ListQuery::default();
    loop {
        let page = engine.list_splits(DATASET, &query).await?;
        for row in page.splits {
            rows.insert(row.split_id, row.state);
        }
        match page.next_after_split_id {
            Some(after) => query.after_split_id = Some(after),
            None => return Ok(rows),
        }
    }
}

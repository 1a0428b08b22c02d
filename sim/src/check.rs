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
//!   simulated time.

use std::collections::{BTreeMap, BTreeSet};

use mend::Engine;
use mend::model::{DatasetConfig, ListQuery, SplitState};

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
    pub violations: Vec<String>,
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

    found.violations.extend(history.violations.iter().cloned());
    check_reads(history, &rows, &mut found);
    let linearization = crate::linearize::check(history, &published_ids);
    found.events_linearized = linearization.publishes + linearization.reads;
    found.violations.extend(linearization.violations);

    // Exactly once: a partition at N was moved by N published deltas, from 0 to N - 1.
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
                found.violations.push(format!(
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
    found
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

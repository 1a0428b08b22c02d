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
//! - **One sweep at a time.** No two replicas' gated sweeps of the dataset overlap in
//!   simulated time.

use std::collections::{BTreeMap, BTreeSet};

use mend::Engine;
use mend::model::{ListQuery, SplitState};

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
    /// Each claim with who made it.
    pub claims: Vec<(Claim, String)>,
}

/// One gated sweep, in simulated time.
#[derive(Debug, Clone)]
pub struct SweepRecord {
    pub replica: usize,
    pub gate_epoch: u64,
    pub from_ms: i64,
    pub until_ms: i64,
}

/// One generation a reader's live handle published.
#[derive(Debug, Clone)]
pub struct GenerationRead {
    pub reader: usize,
    pub manifest_version: u64,
    /// The published splits it shows.
    pub published: BTreeSet<String>,
}

/// Everything the actors were told and saw.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub operations: Vec<OperationRecord>,
    pub sweeps: Vec<SweepRecord>,
    /// Every generation the readers' handles published, in the order they did.
    pub reads: Vec<GenerationRead>,
    /// What an actor found wrong while the run went on (a mid-run verify, a read-only handle
    /// that swept).
    pub violations: Vec<String>,
}

impl History {
    /// Records `claim` about `operation_id` (an operation no writer of the run began, such as
    /// an in-process commit's own id seen by a sweep, is not held to anything).
    pub fn claim(&mut self, operation_id: &str, claim: Claim, by: String) {
        if claim == Claim::Nothing {
            return;
        }
        if let Some(record) = self
            .operations
            .iter_mut()
            .find(|record| record.operation_id == operation_id)
        {
            record.claims.push((claim, by));
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
    let positions = match engine.dataset(DATASET).await {
        Ok(dataset) => dataset.checkpoint.get(SOURCE).cloned().unwrap_or_default(),
        Err(error) => {
            found
                .violations
                .push(format!("the dataset cannot be read: {error}"));
            return found;
        }
    };

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
        for (claim, by) in &record.claims {
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

    let mut sweeps = history.sweeps.clone();
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

/// What the readers saw: each handle's manifest versions only move forward; each generation
/// shows every operation whole or not at all; and a split a reader ever saw published is
/// published at the end (nothing in this run unpublishes a split, so a split seen and gone is
/// data lost, and a split of an operation answered ended that was ever seen is a false answer
/// the end state alone could miss).
fn check_reads(history: &History, rows: &BTreeMap<String, SplitState>, found: &mut Found) {
    let mut last: BTreeMap<usize, u64> = BTreeMap::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for read in &history.reads {
        found.generations_checked += 1;
        if let Some(&before) = last.get(&read.reader)
            && read.manifest_version <= before
        {
            found.violations.push(format!(
                "reader {}'s handle went from manifest version {before} to {}",
                read.reader, read.manifest_version
            ));
        }
        last.insert(read.reader, read.manifest_version);
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

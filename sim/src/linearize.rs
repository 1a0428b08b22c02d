//! The acknowledged history held against a sequential model of the catalog, in the manner of
//! Wing and Gong: is there one order of every operation that took effect and every read made,
//! each placed at a moment between its request and its answer, in which each read saw exactly
//! what the sequential catalog held at its moment?
//!
//! The sequential catalog, as far as the run's workload can tell, is where each writer's
//! checkpoint partition stands: an operation that publishes moves its partition from its
//! `from` position to the next and makes its splits visible in the same step. So a state is a
//! position per partition, and every published operation is the step `from -> from + 1` of its
//! partition (the exactly-once check holds that each position was left once). The events:
//!
//! - **a publish** of each operation published at the end, placed no earlier than its
//!   writer's request (begin or commit) and no later than the first answer that said it was
//!   published (a publish, a 412 naming it, a sweep that rolled it forward, an acknowledged
//!   commit); with no such answer, any time after its request;
//! - **a writer's read** of its partition's position, which must be that partition's position
//!   at its moment;
//! - **a reader's generation** (a new one, or the one a refresh found unchanged): from the
//!   splits it shows, each partition's position (the operations it shows of a partition must
//!   be those from 0, 1, ..., k - 1: anything else is no state the catalog was ever in), every
//!   partition at once.
//!
//! The search is Wing and Gong's: take the events in order of their requests; the next event
//! placed is one whose request came no later than the earliest answer not yet placed; a read
//! that fits the state now is placed at once (reads change nothing, so placing one early never
//! costs an order); a publish is placed when it is its partition's next step; states already
//! found to lead nowhere are remembered. Moments are simulated ms, and two events in the same
//! ms are taken as concurrent: the check never asks more of the engine than the clock can tell.

use std::collections::{BTreeSet, HashSet};

use crate::check::{Claim, History, OperationRecord};

/// How many search steps the check takes before it calls a history undecided: far more than a
/// run's history needs (a few hundred events whose partitions' steps are forced by their
/// positions), and a bound on a pathological one.
const STEP_BUDGET: u64 = 2_000_000;

/// What the check found.
#[derive(Debug, Default)]
pub struct Linearization {
    /// Events ordered: publishes, writers' reads, readers' generations.
    pub publishes: usize,
    pub reads: usize,
    /// Search steps taken.
    pub steps: u64,
    /// Why no order exists (or why the search stopped), if it does not.
    pub violations: Vec<String>,
}

#[derive(Debug, Clone)]
enum Kind {
    Publish {
        partition: usize,
        from: u64,
    },
    /// The positions it saw, of some partitions.
    Read {
        saw: Vec<(usize, u64)>,
    },
}

#[derive(Debug, Clone)]
struct Event {
    /// What it is, for a failure's message.
    label: String,
    request_ms: u64,
    /// `u64::MAX`: never answered (any time after its request).
    answer_ms: u64,
    kind: Kind,
}

/// Holds `history` against the sequential catalog, given which of its operations published.
pub fn check(history: &History, published: &BTreeSet<&str>) -> Linearization {
    let mut found = Linearization::default();
    let partitions: Vec<&str> = history
        .operations
        .iter()
        .filter(|record| record.moves_checkpoint())
        .map(|record| record.partition.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let index_of = |partition: &str| partitions.iter().position(|p| *p == partition);
    let published: Vec<&OperationRecord> = history
        .operations
        .iter()
        .filter(|record| published.contains(record.operation_id.as_str()))
        .collect();

    let mut events = Vec::new();
    // A merge moves no position: as far as the sequential catalog tells, it is not a step.
    for record in published.iter().filter(|record| record.moves_checkpoint()) {
        let answer_ms = record
            .claims
            .iter()
            .filter(|claim| claim.claim == Claim::Published)
            .map(|claim| claim.at_ms)
            .min()
            .unwrap_or(u64::MAX);
        events.push(Event {
            label: format!("{}'s publish (from {})", record.operation_id, record.from),
            request_ms: record.invoked_ms,
            answer_ms,
            kind: Kind::Publish {
                partition: index_of(&record.partition).expect("a partition of the history"),
                from: record.from,
            },
        });
    }
    found.publishes = events.len();
    for read in &history.positions_read {
        let Some(partition) = index_of(&read.partition) else {
            continue;
        };
        events.push(Event {
            label: format!("a read of {} at {}", read.partition, read.position),
            request_ms: read.from_ms,
            answer_ms: read.until_ms,
            kind: Kind::Read {
                saw: vec![(partition, read.position)],
            },
        });
    }
    generation_events(history, &partitions, &published, &mut events, &mut found);
    found.reads = events.len() - found.publishes;
    if !found.violations.is_empty() {
        return found;
    }
    events.sort_by_key(|event| (event.request_ms, event.answer_ms));

    let mut search = Search {
        events: &events,
        placed: vec![false; events.len()],
        positions: vec![0; partitions.len()],
        dead: HashSet::new(),
        steps: 0,
        furthest: (0, None),
    };
    let outcome = search.place();
    found.steps = search.steps;
    match outcome {
        Some(true) => {}
        Some(false) => {
            let message = no_order(&found, search.furthest, &events);
            found.violations.push(message);
        }
        None => found.violations.push(format!(
            "linearizability undecided: the search took its budget of {STEP_BUDGET} steps"
        )),
    }
    found
}

/// Each reader generation as an event: the position of each partition it shows (how many
/// of that partition's published operations it shows whole). A generation whose shown
/// operations are not a prefix of their partition is a violation at once.
fn generation_events(
    history: &History,
    partitions: &[&str],
    published: &[&OperationRecord],
    events: &mut Vec<Event>,
    found: &mut Linearization,
) {
    for read in &history.reads {
        // What it shows whole, and what the merges among those replaced before them.
        let shown_whole: BTreeSet<&str> = published
            .iter()
            .filter(|record| {
                record
                    .split_ids
                    .iter()
                    .all(|split_id| read.published.contains(split_id))
            })
            .map(|record| record.operation_id.as_str())
            .collect();
        let in_effect = crate::check::with_replaced(history, shown_whole);
        let mut saw = Vec::new();
        for (partition, name) in partitions.iter().enumerate() {
            let shown: Vec<u64> = published
                .iter()
                .filter(|record| record.moves_checkpoint() && record.partition == *name)
                .filter(|record| in_effect.contains(record.operation_id.as_str()))
                .map(|record| record.from)
                .collect();
            let position = shown.len() as u64;
            if shown.iter().any(|from| *from >= position) {
                found.violations.push(format!(
                    "not linearizable: reader {} at manifest version {} shows {name}'s \
                     operations from {shown:?}, which no state of the catalog holds",
                    read.reader, read.manifest_version
                ));
            }
            saw.push((partition, position));
        }
        events.push(Event {
            label: format!(
                "reader {}'s generation at manifest version {} ({})",
                read.reader,
                read.manifest_version,
                if read.unchanged { "unchanged" } else { "new" }
            ),
            request_ms: read.from_ms,
            answer_ms: read.until_ms,
            kind: Kind::Read { saw },
        });
    }
}

/// Why no order fits: how far the furthest order got, and the event it could not place.
fn no_order(found: &Linearization, furthest: (usize, Option<usize>), events: &[Event]) -> String {
    let (placed, stuck) = furthest;
    format!(
        "not linearizable: no order of the {} publishes and {} reads fits their \
         moments; the furthest order placed {placed} events and then could not place \
         {} (every other event waits on it)",
        found.publishes,
        found.reads,
        stuck.map_or("anything".to_string(), |index| {
            let event = &events[index];
            format!(
                "{} (requested at {} ms, answered at {})",
                event.label,
                event.request_ms,
                if event.answer_ms == u64::MAX {
                    "never".to_string()
                } else {
                    format!("{} ms", event.answer_ms)
                }
            )
        })
    )
}

struct Search<'a> {
    events: &'a [Event],
    placed: Vec<bool>,
    /// The sequential catalog now: each partition's position.
    positions: Vec<u64>,
    /// States (events placed) already found to lead nowhere.
    dead: HashSet<Vec<bool>>,
    steps: u64,
    /// The most events placed on any path, and the earliest answer not placed there.
    furthest: (usize, Option<usize>),
}

impl Search<'_> {
    /// Places every event not yet placed: `Some(true)` if an order exists, `Some(false)` if
    /// none does, `None` if the budget ran out.
    fn place(&mut self) -> Option<bool> {
        self.steps += 1;
        if self.steps > STEP_BUDGET {
            return None;
        }
        // Reads that fit now are placed at once; each one placed may let a later one in.
        let mut placed_here = Vec::new();
        let horizon = loop {
            let horizon = self.horizon();
            let fitting = (0..self.events.len()).find(|&index| {
                !self.placed[index]
                    && self.events[index].request_ms <= horizon.0
                    && matches!(&self.events[index].kind, Kind::Read { saw } if self.fits(saw))
            });
            match fitting {
                Some(index) => {
                    self.placed[index] = true;
                    placed_here.push(index);
                }
                None => break horizon,
            }
        };
        let placed_count = self.placed.iter().filter(|placed| **placed).count();
        if placed_count == self.events.len() {
            return Some(true);
        }
        if placed_count > self.furthest.0 {
            self.furthest = (placed_count, horizon.1);
        }
        if !self.dead.contains(&self.placed) {
            for index in 0..self.events.len() {
                if self.placed[index] || self.events[index].request_ms > horizon.0 {
                    continue;
                }
                let Kind::Publish { partition, from } = self.events[index].kind else {
                    continue;
                };
                if self.positions[partition] != from {
                    continue;
                }
                self.placed[index] = true;
                self.positions[partition] += 1;
                let outcome = self.place();
                self.positions[partition] -= 1;
                self.placed[index] = false;
                if outcome != Some(false) {
                    return outcome;
                }
            }
            self.dead.insert(self.placed.clone());
        }
        for index in placed_here {
            self.placed[index] = false;
        }
        Some(false)
    }

    /// The earliest answer among the events not placed, and whose it is: no event requested
    /// after it can come before it.
    fn horizon(&self) -> (u64, Option<usize>) {
        (0..self.events.len())
            .filter(|&index| !self.placed[index])
            .map(|index| (self.events[index].answer_ms, Some(index)))
            .min()
            .unwrap_or((u64::MAX, None))
    }

    fn fits(&self, saw: &[(usize, u64)]) -> bool {
        saw.iter()
            .all(|&(partition, position)| self.positions[partition] == position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{ClaimRecord, GenerationRead, PositionRead};
    use mend::model::DatasetConfig;

    fn operation(
        id: &str,
        from: u64,
        invoked_ms: u64,
        published_at: Option<u64>,
    ) -> OperationRecord {
        OperationRecord {
            operation_id: id.into(),
            partition: "p".into(),
            from,
            split_ids: vec![format!("{id}-s0")],
            invoked_ms,
            claims: published_at
                .map(|at_ms| ClaimRecord {
                    claim: Claim::Published,
                    by: "a publish".into(),
                    at_ms,
                })
                .into_iter()
                .collect(),
            ..OperationRecord::default()
        }
    }

    fn read(from_ms: u64, until_ms: u64, position: u64) -> PositionRead {
        PositionRead {
            partition: "p".into(),
            position,
            from_ms,
            until_ms,
        }
    }

    fn published(history: &History) -> BTreeSet<&str> {
        history
            .operations
            .iter()
            .map(|record| record.operation_id.as_str())
            .collect()
    }

    #[test]
    fn a_read_after_an_acknowledged_publish_must_see_it() {
        // a publishes from 0, answered at 10; a read from 20 to 30 says 0: stale.
        let mut history = History {
            operations: vec![operation("a", 0, 0, Some(10))],
            positions_read: vec![read(20, 30, 0)],
            ..History::default()
        };
        let found = check(&history, &published(&history));
        assert_eq!(found.violations.len(), 1, "{:?}", found.violations);
        assert!(found.violations[0].contains("not linearizable"));
        // The same read overlapping the publish may see either state.
        history.positions_read = vec![read(5, 30, 0), read(5, 30, 1)];
        let found = check(&history, &published(&history));
        assert!(found.violations.is_empty(), "{:?}", found.violations);
        assert_eq!((found.publishes, found.reads), (1, 2));
    }

    #[test]
    fn a_publish_never_answered_may_land_any_time_after_its_request() {
        // b (from 1) was never answered; a read at 100 saw 1, one at 200 saw 2.
        let history = History {
            operations: vec![operation("a", 0, 0, Some(10)), operation("b", 1, 20, None)],
            positions_read: vec![read(100, 101, 1), read(200, 201, 2)],
            ..History::default()
        };
        let found = check(&history, &published(&history));
        assert!(found.violations.is_empty(), "{:?}", found.violations);
        // But not before its request: a read that saw 2 before b was requested.
        let history = History {
            positions_read: vec![read(5, 15, 2)],
            ..history
        };
        let found = check(&history, &published(&history));
        assert_eq!(found.violations.len(), 1, "{:?}", found.violations);
    }

    #[test]
    fn reads_that_go_back_in_time_are_not_linearizable() {
        // Two overlapping publishes; reader one sees 2 then a later read sees 1.
        let history = History {
            operations: vec![operation("a", 0, 0, None), operation("b", 1, 0, None)],
            positions_read: vec![read(10, 11, 2), read(20, 21, 1)],
            ..History::default()
        };
        let found = check(&history, &published(&history));
        assert_eq!(found.violations.len(), 1, "{:?}", found.violations);
    }

    #[test]
    fn a_generation_with_a_gap_in_a_partition_is_no_state() {
        let history = History {
            operations: vec![operation("a", 0, 0, None), operation("b", 1, 0, None)],
            reads: vec![GenerationRead {
                reader: 0,
                manifest_version: 3,
                config_version: 1,
                config: DatasetConfig::default(),
                published: BTreeSet::from(["b-s0".to_string()]),
                unchanged: false,
                from_ms: 5,
                until_ms: 6,
            }],
            ..History::default()
        };
        let found = check(&history, &published(&history));
        assert_eq!(found.violations.len(), 1, "{:?}", found.violations);
        assert!(found.violations[0].contains("which no state"));
    }

    #[test]
    fn generations_order_partitions_against_each_other() {
        // x on p and y on q are concurrent; reader 0 sees x without y, reader 1 (overlapping
        // in time) sees y without x: no one order shows both. Sequentially, either is fine.
        let mut y = operation("y", 0, 0, None);
        y.partition = "q".into();
        let generation = |reader, shown: &str, from_ms, until_ms| GenerationRead {
            reader,
            manifest_version: 2,
            config_version: 1,
            config: DatasetConfig::default(),
            published: BTreeSet::from([shown.to_string()]),
            unchanged: false,
            from_ms,
            until_ms,
        };
        let mut history = History {
            operations: vec![operation("x", 0, 0, None), y],
            reads: vec![generation(0, "x-s0", 10, 20), generation(1, "y-s0", 10, 20)],
            ..History::default()
        };
        let found = check(&history, &published(&history));
        assert_eq!(found.violations.len(), 1, "{:?}", found.violations);
        // One reader seeing x, then later both: fine.
        history.reads[1].published.insert("x-s0".into());
        let found = check(&history, &published(&history));
        assert!(found.violations.is_empty(), "{:?}", found.violations);
    }
}

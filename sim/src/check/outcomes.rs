//! How each operation ended, read from the rows, and the checks on it: `all-or-nothing`,
//! `no-false-answer`, `ended-stays-ended` and `exactly-once`.

use std::collections::{BTreeMap, BTreeSet};

use mend::model::SplitState;

use super::{Check, Claim, ClaimRecord, Found, History};
use crate::schedule::SOURCE;

/// Which of the history's operations published, by their splits' rows at the end.
pub(super) struct Outcomes<'a> {
    pub published_ids: BTreeSet<&'a str>,
    /// The positions the published operations started from, by partition.
    pub published_from: BTreeMap<&'a str, Vec<u64>>,
}

/// `shown` (operations whose splits are all visible somewhere) with every operation a merge
/// among them replaced, and so on down the chain: the operations that published, as far as
/// that view can tell. A merge replaces whole operations, so an operation whose splits are
/// all replaced by merges in the set published before them.
pub(crate) fn with_replaced<'a>(
    history: &'a History,
    mut shown: BTreeSet<&'a str>,
) -> BTreeSet<&'a str> {
    loop {
        let replaced: BTreeSet<&str> = history
            .operations
            .iter()
            .filter(|record| shown.contains(record.operation_id.as_str()))
            .flat_map(|record| record.replaced_split_ids.iter().map(String::as_str))
            .collect();
        let before = shown.len();
        for record in &history.operations {
            if !record.split_ids.is_empty()
                && record
                    .split_ids
                    .iter()
                    .all(|split_id| replaced.contains(split_id.as_str()))
            {
                shown.insert(record.operation_id.as_str());
            }
        }
        if shown.len() == before {
            return shown;
        }
    }
}

/// Reads each operation's end from `rows`: published when every split of it is (or a merge
/// that published replaced them), ended when none is; `all-or-nothing` when some are and
/// others not, or when a merge published and a split it replaced is still published.
pub(super) fn of_operations<'a>(
    history: &'a History,
    rows: &BTreeMap<String, SplitState>,
    found: &mut Found,
) -> Outcomes<'a> {
    let mut outcomes = Outcomes {
        published_ids: BTreeSet::new(),
        published_from: BTreeMap::new(),
    };
    let all_published: BTreeSet<&str> = history
        .operations
        .iter()
        .filter(|record| {
            record
                .split_ids
                .iter()
                .all(|split_id| rows.get(split_id) == Some(&SplitState::Published))
        })
        .map(|record| record.operation_id.as_str())
        .collect();
    let published_ids = with_replaced(history, all_published);
    for record in &history.operations {
        let states: Vec<Option<SplitState>> = record
            .split_ids
            .iter()
            .map(|split_id| rows.get(split_id).copied())
            .collect();
        let published = published_ids.contains(record.operation_id.as_str());
        if published {
            let still: Vec<&String> = record
                .replaced_split_ids
                .iter()
                .filter(|split_id| rows.get(*split_id) == Some(&SplitState::Published))
                .collect();
            if !still.is_empty() {
                found.push(
                    Check::AllOrNothing,
                    format!(
                        "{} published, yet the splits it replaced {still:?} are still published",
                        record.operation_id
                    ),
                );
            }
        }
        if !published && states.contains(&Some(SplitState::Published)) {
            found.push(
                Check::AllOrNothing,
                format!(
                    "{}: some of its splits published and not others: {:?} are {states:?}",
                    record.operation_id, record.split_ids
                ),
            );
        }
        if published {
            found.published += 1;
            outcomes.published_ids.insert(record.operation_id.as_str());
            if record.moves_checkpoint() {
                outcomes
                    .published_from
                    .entry(&record.partition)
                    .or_default()
                    .push(record.from);
            }
        } else {
            found.ended += 1;
        }
    }
    outcomes
}

/// Every claim an answer made holds: told published, it published (or, told it publishes
/// unless overtaken, another operation published from the same position); told ended, not
/// begun or not published, it never published.
pub(super) fn claims(history: &History, outcomes: &Outcomes<'_>, found: &mut Found) {
    for record in &history.operations {
        let published = outcomes
            .published_ids
            .contains(record.operation_id.as_str());
        for ClaimRecord { claim, by, .. } in &record.claims {
            found.claims_checked += 1;
            let holds = match claim {
                Claim::Published => published,
                Claim::PublishesUnlessOvertaken => {
                    published
                        || record.moves_checkpoint()
                            && outcomes
                                .published_from
                                .get(record.partition.as_str())
                                .is_some_and(|froms| froms.contains(&record.from))
                }
                Claim::Ended | Claim::NotBegun | Claim::NotPublished => !published,
                Claim::Begun { .. } | Claim::Nothing => true,
            };
            if !holds {
                found.push(
                    Check::NoFalseAnswer,
                    format!(
                        "{} was told {claim:?} ({by}), yet it {}",
                        record.operation_id,
                        if published {
                            "published"
                        } else {
                            "never published"
                        }
                    ),
                );
            }
        }
    }
}

/// An operation answered ended stays ended: no begin sent after that answer says it is
/// begun (a begin still on its way when its operation ended must find the end and say so).
pub(super) fn ended_stays_ended(history: &History, ends_unrecorded: &[String], found: &mut Found) {
    for operation_id in ends_unrecorded {
        found.push(
            Check::EndedStaysEnded,
            format!(
                "{operation_id} held an intent and has none now, yet neither its publish nor its \
                 end is recorded: a begin of it still on its way would begin it again"
            ),
        );
    }
    for record in &history.operations {
        let ended_at = record
            .claims
            .iter()
            .filter(|said| said.claim == Claim::Ended)
            .map(|said| (said.at_ms, &said.by))
            .min();
        let Some((ended_ms, ended_by)) = ended_at else {
            continue;
        };
        for said in &record.claims {
            if let Claim::Begun { sent_ms } = said.claim
                && sent_ms > ended_ms
            {
                found.push(
                    Check::EndedStaysEnded,
                    format!(
                        "{} was told it ended at {ended_ms} ms ({ended_by}), then a begin sent at \
                         {sent_ms} ms began it again ({})",
                        record.operation_id, said.by
                    ),
                );
            }
        }
    }
}

/// The delta of a plain operation some of whose splits reconcile adopted: whether it applied
/// (its publish answered published, or refused), `None` when no answer said.
pub(super) struct AdoptedDelta<'a> {
    pub partition: &'a str,
    pub from: u64,
    pub applied: Option<bool>,
}

/// Exactly once: a partition at N was moved by N published deltas, from 0 to N - 1. The
/// deltas of `adopted` operations count as their answers say; one no answer settled may fill
/// a position no other delta did.
pub(super) fn exactly_once(
    history: &History,
    positions: &BTreeMap<String, u64>,
    mut published_from: BTreeMap<&str, Vec<u64>>,
    adopted: &[AdoptedDelta<'_>],
    found: &mut Found,
) {
    let partitions: BTreeSet<&str> = history
        .operations
        .iter()
        .filter(|record| record.moves_checkpoint())
        .map(|record| record.partition.as_str())
        .chain(adopted.iter().map(|delta| delta.partition))
        .collect();
    for partition in partitions {
        let position = positions.get(partition).copied().unwrap_or(0);
        let mut froms = published_from.remove(partition).unwrap_or_default();
        let of_partition = adopted.iter().filter(|delta| delta.partition == partition);
        froms.extend(
            of_partition
                .clone()
                .filter(|delta| delta.applied == Some(true))
                .map(|delta| delta.from),
        );
        froms.sort_unstable();
        let undecided: BTreeSet<u64> = of_partition
            .filter(|delta| delta.applied.is_none())
            .map(|delta| delta.from)
            .collect();
        let filled: BTreeSet<u64> = froms.iter().copied().collect();
        let mut with_undecided = froms.clone();
        with_undecided.extend(
            (0..position).filter(|from| !filled.contains(from) && undecided.contains(from)),
        );
        with_undecided.sort_unstable();
        let expected: Vec<u64> = (0..position).collect();
        if with_undecided != expected {
            found.push(
                Check::ExactlyOnce,
                format!(
                    "checkpoint {SOURCE}/{partition} stands at {position}, yet its published \
                     operations started from {froms:?}: each delta must apply exactly once"
                ),
            );
        }
    }
}

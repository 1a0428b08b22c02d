//! How each operation ended, read from the rows, and the checks on it: `all-or-nothing`,
//! `no-false-answer` and `exactly-once`.

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

/// Reads each operation's end from `rows`: published when every split of it is, ended when
/// none is; `all-or-nothing` when some are and others not.
pub(super) fn of_operations<'a>(
    history: &'a History,
    rows: &BTreeMap<String, SplitState>,
    found: &mut Found,
) -> Outcomes<'a> {
    let mut outcomes = Outcomes {
        published_ids: BTreeSet::new(),
        published_from: BTreeMap::new(),
    };
    for record in &history.operations {
        let states: Vec<Option<SplitState>> = record
            .split_ids
            .iter()
            .map(|split_id| rows.get(split_id).copied())
            .collect();
        let published = states.iter().all(|s| *s == Some(SplitState::Published));
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
            outcomes
                .published_from
                .entry(&record.partition)
                .or_default()
                .push(record.from);
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
                        || outcomes
                            .published_from
                            .get(record.partition.as_str())
                            .is_some_and(|froms| froms.contains(&record.from))
                }
                Claim::Ended | Claim::NotBegun | Claim::NotPublished => !published,
                Claim::Nothing => true,
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

/// Exactly once: a partition at N was moved by N published deltas, from 0 to N - 1.
pub(super) fn exactly_once(
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

//! Publish validation: every reason a publish must not happen.
//!
//! A publish is one atomic step: staged ids become published, replaced ids become marked for
//! deletion, the checkpoint delta is applied and the publish token is checked. The host calls
//! this with what it observed under the dataset's lock and applies the publish only when the
//! answer is empty.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use mend_contract::{PublishInput, PublishViolation, SplitState, ViolationKind};

/// The violations of `input`, in a fixed order; empty when the publish may proceed.
pub fn validate_publish(input: &PublishInput) -> Vec<PublishViolation> {
    let rows: BTreeMap<&str, SplitState> = input
        .rows
        .iter()
        .map(|row| (row.split_id.as_str(), row.state))
        .collect();
    let mut violations = Vec::new();

    let staged: BTreeSet<&str> = input.staged_split_ids.iter().map(String::as_str).collect();
    let replaced: BTreeSet<&str> = input
        .replaced_split_ids
        .iter()
        .map(String::as_str)
        .collect();
    let in_both: Vec<String> = staged
        .intersection(&replaced)
        .map(|id| (*id).into())
        .collect();
    if !in_both.is_empty() {
        violations.push(PublishViolation {
            kind: ViolationKind::SplitInBoth,
            message: format!(
                "splits named both to publish and to replace: {}",
                in_both.join(", ")
            ),
            subjects: in_both,
        });
    }

    let missing: Vec<String> = staged
        .iter()
        .chain(&replaced)
        .filter(|id| !rows.contains_key(**id))
        .map(|id| (*id).into())
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect();
    if !missing.is_empty() {
        violations.push(PublishViolation {
            kind: ViolationKind::SplitMissing,
            message: format!("splits not found: {}", missing.join(", ")),
            subjects: missing,
        });
    }

    let not_staged = ids_not_in_state(&staged, &rows, SplitState::Staged);
    if !not_staged.is_empty() {
        violations.push(PublishViolation {
            kind: ViolationKind::NotStaged,
            message: format!(
                "splits to publish must be staged, these are not: {}",
                not_staged.join(", ")
            ),
            subjects: not_staged,
        });
    }

    let not_published = ids_not_in_state(&replaced, &rows, SplitState::Published);
    if !not_published.is_empty() {
        violations.push(PublishViolation {
            kind: ViolationKind::NotPublished,
            message: format!(
                "splits to replace must be published, these are not: {}",
                not_published.join(", ")
            ),
            subjects: not_published,
        });
    }

    if let Some(violation) = checkpoint_mismatch(input) {
        violations.push(violation);
    }

    if input.publish_token != input.current_publish_token {
        violations.push(PublishViolation {
            kind: ViolationKind::StalePublishToken,
            subjects: Vec::new(),
            message: match &input.current_publish_token {
                Some(_) => "the publish token is not the dataset's current one".into(),
                None => "the dataset has no publish token, but the request carries one".into(),
            },
        });
    }

    violations
}

/// A checkpoint delta that does not start at the current positions, or does not move a
/// partition forward: the partitions at fault.
fn checkpoint_mismatch(input: &PublishInput) -> Option<PublishViolation> {
    let delta = input.checkpoint_delta.as_ref()?;
    let current: BTreeMap<&str, u64> = input
        .checkpoint
        .iter()
        .map(|p| (p.partition.as_str(), p.position))
        .collect();
    let mut mismatched = Vec::new();
    for partition in &delta.partitions {
        let position = current.get(partition.partition.as_str()).copied();
        let moves_forward = partition
            .from_position
            .is_none_or(|from| partition.to_position > from);
        if position != partition.from_position || !moves_forward {
            mismatched.push(partition.partition.clone());
        }
    }
    if mismatched.is_empty() {
        return None;
    }
    mismatched.sort();
    Some(PublishViolation {
        kind: ViolationKind::CheckpointMismatch,
        message: format!(
            "checkpoint delta of source {} does not start at the current positions or does not move forward, partitions: {}",
            delta.source,
            mismatched.join(", ")
        ),
        subjects: mismatched,
    })
}

/// The ids of `ids` whose row exists but is not in `state`, sorted.
fn ids_not_in_state(
    ids: &BTreeSet<&str>,
    rows: &BTreeMap<&str, SplitState>,
    state: SplitState,
) -> Vec<String> {
    ids.iter()
        .filter(|id| rows.get(**id).is_some_and(|found| *found != state))
        .map(|id| (*id).into())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mend_contract::{CheckpointDelta, ExistingRow, PartitionDelta, PartitionPosition};

    fn row(id: &str, state: SplitState) -> ExistingRow {
        ExistingRow {
            split_id: id.into(),
            state,
        }
    }

    fn input() -> PublishInput {
        PublishInput {
            dataset_id: "ds".into(),
            staged_split_ids: vec!["s1".into()],
            replaced_split_ids: vec!["p1".into()],
            checkpoint_delta: Some(CheckpointDelta {
                source: "kafka".into(),
                partitions: vec![PartitionDelta {
                    partition: "0".into(),
                    from_position: Some(10),
                    to_position: 20,
                }],
            }),
            publish_token: Some("t1".into()),
            rows: vec![
                row("s1", SplitState::Staged),
                row("p1", SplitState::Published),
            ],
            checkpoint: vec![PartitionPosition {
                partition: "0".into(),
                position: 10,
            }],
            current_publish_token: Some("t1".into()),
        }
    }

    fn kinds(input: &PublishInput) -> Vec<ViolationKind> {
        validate_publish(input)
            .into_iter()
            .map(|v| v.kind)
            .collect()
    }

    #[test]
    fn a_consistent_publish_has_no_violation() {
        assert!(validate_publish(&input()).is_empty());
    }

    #[test]
    fn each_broken_precondition_is_named() {
        let mut missing = input();
        missing.rows.clear();
        assert_eq!(kinds(&missing), [ViolationKind::SplitMissing]);
        assert_eq!(validate_publish(&missing)[0].subjects, ["p1", "s1"]);

        let mut not_staged = input();
        not_staged.rows[0].state = SplitState::Published;
        assert_eq!(kinds(&not_staged), [ViolationKind::NotStaged]);

        let mut not_published = input();
        not_published.rows[1].state = SplitState::MarkedForDeletion;
        assert_eq!(kinds(&not_published), [ViolationKind::NotPublished]);

        let mut both = input();
        both.replaced_split_ids.push("s1".into());
        assert!(kinds(&both).contains(&ViolationKind::SplitInBoth));

        let mut moved = input();
        moved.checkpoint[0].position = 11;
        assert_eq!(kinds(&moved), [ViolationKind::CheckpointMismatch]);

        let mut backwards = input();
        backwards.checkpoint_delta.as_mut().unwrap().partitions[0].to_position = 5;
        assert_eq!(kinds(&backwards), [ViolationKind::CheckpointMismatch]);

        let mut fresh_partition = input();
        fresh_partition.checkpoint.clear();
        assert_eq!(kinds(&fresh_partition), [ViolationKind::CheckpointMismatch]);
        fresh_partition
            .checkpoint_delta
            .as_mut()
            .unwrap()
            .partitions[0]
            .from_position = None;
        assert!(kinds(&fresh_partition).is_empty());

        let mut stale = input();
        stale.publish_token = Some("t0".into());
        assert_eq!(kinds(&stale), [ViolationKind::StalePublishToken]);
        stale.publish_token = None;
        assert_eq!(kinds(&stale), [ViolationKind::StalePublishToken]);
    }
}

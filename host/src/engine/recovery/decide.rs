//! Checking the policy's decisions: one per intent, and none the mode or the invariants refuse.

use std::collections::HashSet;

use mend_contract::{IntentDecision, IntentObservation, RecoveryDecision, RecoveryMode};

use crate::error::{MendError, Result};
use crate::intent::{Intent, IntentPhase, OperationKind};
use crate::model::{Dataset, SplitState};

use super::{IntentStatus, kind_name};

/// What an intent needs, by the policy's decision on it.
pub(super) fn status_of(decision: &RecoveryDecision) -> IntentStatus {
    match decision {
        RecoveryDecision::Stale => IntentStatus::Clean,
        RecoveryDecision::RollForward => IntentStatus::RollForwardRequired,
        RecoveryDecision::RollBack => IntentStatus::NeedsCompensation,
        RecoveryDecision::Blocked(_) => IntentStatus::Blocked,
        RecoveryDecision::Defer(_) => IntentStatus::Deferred,
        RecoveryDecision::Abandon(_) => IntentStatus::Abandoned,
    }
}

pub(super) fn refusal(
    mode: RecoveryMode,
    intent: &Intent,
    observation: &IntentObservation,
    dataset: &Dataset,
    payloads_read: bool,
    decision: &RecoveryDecision,
    now_ms: i64,
) -> Option<String> {
    match decision {
        RecoveryDecision::RollForward
            if matches!(intent.kind, OperationKind::Commit | OperationKind::Merge)
                && intent.phase == IntentPhase::Armed
                && !payloads_read =>
        {
            Some(
                "its objects' payloads were not read back in this sweep (its owner's lease was live when the sweep looked): an unconfirmed commit is published only once every payload is hashed against its plan; the next sweep reads them".into(),
            )
        }
        RecoveryDecision::Abandon(_)
            if !matches!(intent.kind, OperationKind::Commit | OperationKind::Merge) =>
        {
            Some(format!(
                "only a commit or a merge can be abandoned, not a {}",
                kind_name(intent.kind)
            ))
        }
        RecoveryDecision::Abandon(_)
            if intent.phase == IntentPhase::EffectsConfirmed
                && !overtaken_unpublished(intent, observation, dataset) =>
        {
            Some(
                "an operation that confirmed its effects is rolled forward, never abandoned, unless its checkpoint delta was overtaken before its publish landed".into(),
            )
        }
        RecoveryDecision::Abandon(_)
            if intent.phase == IntentPhase::Armed && intent.lease_expires_at_ms > now_ms =>
        {
            Some(format!(
                "its owner's lease runs until {} ms, after this sweep's {now_ms} ms: it may still be working",
                intent.lease_expires_at_ms
            ))
        }
        RecoveryDecision::Abandon(_)
            if observation
                .objects
                .iter()
                .any(|object| object.present && !object.matches) =>
        {
            Some(
                "an object it planned is present but not as planned: damage an operator must look at, not an abandoned write".into(),
            )
        }
        RecoveryDecision::RollBack if mode == RecoveryMode::RollForward => Some(
            "a roll-back compensates another writer's effects, which only exclusive mode may do (invariant 6)".into(),
        ),
        RecoveryDecision::RollBack if intent.kind == OperationKind::Gc => Some(
            "a gc cannot be rolled back: a mark is final; it can only be rolled forward".into(),
        ),
        RecoveryDecision::RollForward
            if observation.objects.iter().any(|object| !object.matches) =>
        {
            Some(
                "rolling forward would publish splits whose objects are missing or different (invariant 1)".into(),
            )
        }
        _ => None,
    }
}

/// Whether a confirmed operation can never publish: another publish moved a partition of its
/// checkpoint delta past the position the delta starts from (positions only move forward),
/// while every split its publish makes published was still staged as the sweep observed (its
/// own publish, which moves them and the checkpoint in one step, had not landed, and now never
/// can). A delta-only publish is never taken for overtaken here: without splits, its own
/// landed publish and another's look alike.
pub(super) fn overtaken_unpublished(
    intent: &Intent,
    observation: &IntentObservation,
    dataset: &Dataset,
) -> bool {
    let Some(delta) = intent.planned_delta() else {
        return false;
    };
    let staged: HashSet<&str> = observation
        .rows
        .iter()
        .filter(|row| row.state == SplitState::Staged)
        .map(|row| row.split_id.as_str())
        .collect();
    !observation.publish_staged.is_empty()
        && observation
            .publish_staged
            .iter()
            .all(|split_id| staged.contains(split_id.as_str()))
        && crate::engine::steps::delta_overtaken(&dataset.checkpoint, delta)
}

pub(super) fn check_one_decision_each(
    intents: &[Intent],
    decisions: &[IntentDecision],
) -> Result<()> {
    let same = intents.len() == decisions.len()
        && intents
            .iter()
            .zip(decisions)
            .all(|(intent, decision)| intent.operation_id == decision.operation_id);
    if !same {
        return Err(MendError::PolicyRejected {
            message: format!(
                "the policy returned {} decisions for {} intents, or in another order; nothing was executed",
                decisions.len(),
                intents.len()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use mend_contract::{ExistingRow, ObjectObservation};

    use super::*;
    use crate::engine::recovery::observe::payloads_to_read;

    fn intent(kind: OperationKind, phase: IntentPhase, lease_expires_at_ms: i64) -> Intent {
        Intent {
            phase,
            lease_expires_at_ms,
            ..Intent::armed("op".into(), kind, "ds", "node", 0, 0)
        }
    }

    fn observation(damaged: bool) -> IntentObservation {
        IntentObservation {
            operation_id: "op".into(),
            kind: mend_contract::OperationKind::Commit,
            phase: mend_contract::IntentPhase::Armed,
            owner_lease_live: false,
            planned_rows: vec!["s".into()],
            rows: Vec::new(),
            objects: vec![ObjectObservation {
                split_id: "s".into(),
                present: damaged,
                matches: false,
            }],
            publish_staged: vec!["s".into()],
            publish_replaced: Vec::new(),
            has_checkpoint_delta: false,
            checkpoint_at_from: true,
            checkpoint_at_to: true,
            checkpoint_reached_to: true,
            gc_splits: Vec::new(),
            mark_splits: Vec::new(),
            config_at_expected: false,
            config_applied: false,
        }
    }

    /// A dataset whose checkpoint stands at `position` on `src/p`, if any.
    fn dataset_at(position: Option<u64>) -> Dataset {
        Dataset {
            dataset_id: "ds".into(),
            uid: "uid".into(),
            config: Default::default(),
            config_version: 1,
            checkpoint: position
                .map(|position| [("src".into(), [("p".into(), position)].into())].into())
                .unwrap_or_default(),
            manifest_version: 1,
            publish_token: None,
            fencing_epoch: 0,
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }

    /// A confirmed commit may be abandoned only when its publish can never land: its
    /// checkpoint delta (5 to 6) overtaken, and its splits still staged as observed (its own
    /// publish moves them and the checkpoint at once). Found by mend-sim (seeds 73 and 496):
    /// without it, every roll-forward sweep blocked on it until an operator came.
    #[test]
    fn a_confirmed_operation_is_abandoned_only_once_its_delta_was_overtaken() {
        let mut confirmed = intent(OperationKind::Commit, IntentPhase::EffectsConfirmed, 0);
        confirmed.effects.publish = Some(crate::intent::PlannedPublish {
            staged_split_ids: vec!["s".into()],
            replaced_split_ids: Vec::new(),
            checkpoint_delta: Some(mend_contract::CheckpointDelta {
                source: "src".into(),
                partitions: vec![mend_contract::PartitionDelta {
                    partition: "p".into(),
                    from_position: Some(5),
                    to_position: 6,
                }],
            }),
            publish_token: None,
        });
        let observed = |state: SplitState| IntentObservation {
            phase: mend_contract::IntentPhase::EffectsConfirmed,
            rows: vec![ExistingRow {
                split_id: "s".into(),
                state,
            }],
            objects: Vec::new(),
            has_checkpoint_delta: true,
            ..observation(false)
        };
        let abandon = RecoveryDecision::Abandon("overtaken".into());
        let check = |position: Option<u64>, state: SplitState| {
            refusal(
                RecoveryMode::RollForward,
                &confirmed,
                &observed(state),
                &dataset_at(position),
                true,
                &abandon,
                1_000,
            )
        };
        let cases = [
            // Another publish moved the partition on from 5: never publishable.
            (Some(7), SplitState::Staged, true),
            (Some(6), SplitState::Staged, true),
            // Still at its from-position: it can publish; roll it forward.
            (Some(5), SplitState::Staged, false),
            // Its own publish landed (splits published with the checkpoint at 6, then moved on).
            (Some(6), SplitState::Published, false),
            (Some(9), SplitState::Published, false),
        ];
        for (position, state, allowed) in cases {
            let refused = check(position, state);
            assert_eq!(
                refused.is_none(),
                allowed,
                "checkpoint {position:?}, split {state:?}: {refused:?}"
            );
        }
        let mut delta_only = confirmed.clone();
        delta_only
            .effects
            .publish
            .as_mut()
            .unwrap()
            .staged_split_ids
            .clear();
        let refused = refusal(
            RecoveryMode::RollForward,
            &delta_only,
            &IntentObservation {
                publish_staged: Vec::new(),
                ..observed(SplitState::Staged)
            },
            &dataset_at(Some(9)),
            true,
            &abandon,
            1_000,
        );
        assert!(
            refused.is_some(),
            "a delta-only publish is never taken for overtaken"
        );
    }

    /// The host allows an abandonment only of an unconfirmed commit or merge whose lease ran
    /// out by its own clock (or one fenced already), and never over damage.
    #[test]
    fn abandonments_are_checked_by_the_host() {
        let abandon = RecoveryDecision::Abandon("why".into());
        let now = 1_000;
        let check = |intent: &Intent, damaged: bool| {
            refusal(
                RecoveryMode::RollForward,
                intent,
                &observation(damaged),
                &dataset_at(None),
                true,
                &abandon,
                now,
            )
        };
        let cases = [
            (
                intent(OperationKind::Commit, IntentPhase::Armed, now),
                false,
                None,
            ),
            (
                intent(OperationKind::Merge, IntentPhase::Armed, 0),
                false,
                None,
            ),
            (
                intent(OperationKind::Commit, IntentPhase::Abandoned, i64::MAX),
                false,
                None,
            ),
            (
                intent(OperationKind::Gc, IntentPhase::Armed, 0),
                false,
                Some("only a commit or a merge"),
            ),
            (
                intent(OperationKind::Commit, IntentPhase::EffectsConfirmed, 0),
                false,
                Some("rolled forward, never abandoned"),
            ),
            (
                intent(OperationKind::Commit, IntentPhase::Armed, now + 1),
                false,
                Some("may still be working"),
            ),
            (
                intent(OperationKind::Commit, IntentPhase::Armed, 0),
                true,
                Some("damage"),
            ),
        ];
        for (intent, damaged, expected) in &cases {
            let refused = check(intent, *damaged);
            match expected {
                None => assert_eq!(refused, None, "{intent:?}"),
                Some(reason) => assert!(
                    refused.as_deref().is_some_and(|why| why.contains(reason)),
                    "{intent:?}: {refused:?}"
                ),
            }
        }
        assert_eq!(cases.len(), 7);
    }

    /// An unconfirmed commit or merge is rolled forward only by a sweep that read its payloads
    /// back; a confirmed one (read when it confirmed) and any other kind need no read.
    #[test]
    fn an_unconfirmed_commit_rolls_forward_only_on_payloads_read_back() {
        let forward = RecoveryDecision::RollForward;
        let mut intact = observation(true);
        intact.objects[0].matches = true;
        let check = |intent: &Intent, payloads_read: bool| {
            refusal(
                RecoveryMode::RollForward,
                intent,
                &intact,
                &dataset_at(None),
                payloads_read,
                &forward,
                1_000,
            )
        };
        for kind in [OperationKind::Commit, OperationKind::Merge] {
            let armed = intent(kind, IntentPhase::Armed, 0);
            assert_eq!(check(&armed, true), None);
            assert!(
                check(&armed, false).is_some_and(|why| why.contains("not read back")),
                "{kind:?}"
            );
            let confirmed = intent(kind, IntentPhase::EffectsConfirmed, 0);
            assert_eq!(check(&confirmed, false), None);
        }
        // Which intents a sweep reads: unconfirmed commits and merges whose lease ran out,
        // and every one of them in exclusive mode.
        let read = |kind, phase, lease: i64, mode| {
            payloads_to_read(&intent(kind, phase, lease), mode, 1_000)
        };
        assert!(read(
            OperationKind::Commit,
            IntentPhase::Armed,
            1_000,
            RecoveryMode::RollForward
        ));
        assert!(!read(
            OperationKind::Commit,
            IntentPhase::Armed,
            1_001,
            RecoveryMode::RollForward
        ));
        assert!(read(
            OperationKind::Merge,
            IntentPhase::Armed,
            5_000,
            RecoveryMode::Exclusive
        ));
        assert!(!read(
            OperationKind::Commit,
            IntentPhase::EffectsConfirmed,
            0,
            RecoveryMode::RollForward
        ));
        assert!(!read(
            OperationKind::Reconcile,
            IntentPhase::Armed,
            0,
            RecoveryMode::Exclusive
        ));
    }
}

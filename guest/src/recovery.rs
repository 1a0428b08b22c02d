//! Recovery decisions: what to do with each intent an interrupted operation left behind.
//!
//! For every intent the host observed, in order:
//!
//! 1. **Abandon** (finish abandoning) an intent already in phase `Abandoned`: recovery fenced
//!    it earlier and stopped before it was done; its owner can do nothing more with it.
//! 2. **Stale** when its effects are already visible: the publish happened (every split it
//!    publishes is published or since replaced, every split it replaces is marked or gone,
//!    and the checkpoint stands at or past the delta's end: positions never move backwards,
//!    so later commits moving the same partitions on do not make it unsettled), or every
//!    split a gc deletes is gone.
//! 3. **Defer** while the owner's lease is live, except in exclusive mode: it may still be
//!    working, and nothing may race it.
//! 4. A gc is always rolled **forward**: marking a marked split and deleting what is gone are
//!    no-ops, and the host only marks and deletes what is still eligible.
//! 5. A config apply is rolled **forward** (promoted) while the dataset is still at the config
//!    version it expects to replace. A reconcile is rolled **forward** while every object it
//!    planned is still there as it found it: staging its rows again is create-only, and the
//!    host then publishes or marks only rows still staged that no other intent names.
//!    A commit or merge whose effects are all in place (confirmed, or every planned row and
//!    object found as planned) and whose publish still applies is rolled **forward**.
//! 6. A commit or merge that confirmed, but whose checkpoint delta another publish overtook
//!    before its own landed (its splits still staged, the checkpoint moved on from the
//!    delta's start), can never publish: it is **abandoned** in every mode, as its writer's
//!    own publish or abort would end it.
//!
//!    A commit or merge that never confirmed (`Armed`) and whose owner's lease ran out is
//!    **abandoned** outside exclusive mode: it is fenced, its own staged rows are marked and
//!    its objects left to gc. Nothing of it was ever visible, so this compensates nothing.
//!    Not when one of its objects is present but not as planned: that is damage an operator
//!    must look at (blocked).
//! 7. Anything else needs its effects undone: **roll back** in exclusive mode (and in probe
//!    and verify, which report what exclusive recovery would do and execute nothing); in
//!    roll-forward mode **blocked**, saying why and that exclusive recovery resolves it.
//!    Roll-forward mode never compensates another writer's work.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use mend_contract::{
    BlockedReason, IntentDecision, IntentObservation, IntentPhase, OperationKind, RecoveryDecision,
    RecoveryInput, RecoveryMode, SplitState,
};

/// One decision per intent, in the input's order.
pub fn decide_recovery(input: &RecoveryInput) -> Vec<IntentDecision> {
    input
        .intents
        .iter()
        .map(|intent| IntentDecision {
            operation_id: intent.operation_id.clone(),
            decision: decide(input.mode, intent),
        })
        .collect()
}

fn decide(mode: RecoveryMode, intent: &IntentObservation) -> RecoveryDecision {
    let rows: BTreeMap<&str, SplitState> = intent
        .rows
        .iter()
        .map(|row| (row.split_id.as_str(), row.state))
        .collect();
    let state = |id: &String| rows.get(id.as_str()).copied();

    // Only a commit or a merge is ever fenced this way; any other kind in this phase is
    // decided as it would be otherwise (and the host would refuse to abandon it).
    if intent.phase == IntentPhase::Abandoned
        && matches!(intent.kind, OperationKind::Commit | OperationKind::Merge)
    {
        return RecoveryDecision::Abandon(String::from(
            "abandoned: it was fenced earlier; its staged rows are marked and the intent deleted",
        ));
    }
    if settled(intent, &state) {
        return RecoveryDecision::Stale;
    }
    if intent.owner_lease_live && mode != RecoveryMode::Exclusive {
        return RecoveryDecision::Defer(
            "the owner's lease is live: it may still be working".into(),
        );
    }
    if let Some(decision) = decide_by_kind(mode, intent) {
        return decision;
    }

    let missing_rows: Vec<&str> = intent
        .planned_rows
        .iter()
        .filter(|id| state(id).is_none())
        .map(String::as_str)
        .collect();
    let bad_objects = missing_objects(intent);
    // A confirmed intent's rows were all in place; its objects are checked whatever the
    // phase: one deleted or changed since must never be published (invariant 1).
    let effects_in_place = (intent.phase == IntentPhase::EffectsConfirmed
        || missing_rows.is_empty())
        && bad_objects.is_empty();
    let publish_applies = intent
        .publish_staged
        .iter()
        .all(|id| state(id) == Some(SplitState::Staged))
        && intent
            .publish_replaced
            .iter()
            .all(|id| state(id) == Some(SplitState::Published))
        && (!intent.has_checkpoint_delta || intent.checkpoint_at_from);

    if effects_in_place && publish_applies {
        return RecoveryDecision::RollForward;
    }
    if intent.phase == IntentPhase::EffectsConfirmed && overtaken(intent, &state) {
        return RecoveryDecision::Abandon(String::from(
            "abandoned: it confirmed, but another publish moved the checkpoint on from the positions its delta starts at before its own publish landed, so it can never publish; fenced, its staged rows marked for deletion, its objects left to gc",
        ));
    }
    let damaged: Vec<&str> = intent
        .objects
        .iter()
        .filter(|object| object.present && !object.matches)
        .map(|object| object.split_id.as_str())
        .collect();
    if intent.phase == IntentPhase::Armed && damaged.is_empty() && mode != RecoveryMode::Exclusive {
        let why = if effects_in_place {
            "its publish no longer applies"
        } else {
            "it never confirmed its effects"
        };
        return RecoveryDecision::Abandon(format!(
            "abandoned: its owner's lease ran out and {why}; fenced, its staged rows marked for deletion, its objects left to gc"
        ));
    }
    let why = if !effects_in_place {
        let mut missing: Vec<String> = missing_rows.iter().map(|id| format!("row {id}")).collect();
        missing.extend(bad_objects.iter().map(|id| format!("object {id}")));
        format!(
            "the operation stopped before its effects were in place (missing or different: {})",
            missing.join(", ")
        )
    } else {
        String::from(
            "its publish no longer applies: a split changed state or the checkpoint moved on",
        )
    };
    undo_or_block(mode, why)
}

/// The decision on an intent of a kind other than a commit or a merge, once it is neither
/// settled nor its owner's to finish: a gc rolls forward; a config apply rolls forward while
/// the version it expects stands, else is blocked (roll-forward) or dropped (exclusive); a
/// reconcile rolls forward while its objects are as it found them. `None` for a commit or a
/// merge.
fn decide_by_kind(mode: RecoveryMode, intent: &IntentObservation) -> Option<RecoveryDecision> {
    match intent.kind {
        OperationKind::Gc => Some(RecoveryDecision::RollForward),
        OperationKind::ConfigApply if intent.config_at_expected => {
            Some(RecoveryDecision::RollForward)
        }
        // Nothing of a config apply that lost is in place: dropping it undoes nothing.
        OperationKind::ConfigApply if mode == RecoveryMode::RollForward => {
            Some(RecoveryDecision::Blocked(BlockedReason {
                why: String::from(
                    "another config change was promoted first: its promotion no longer applies",
                ),
                operator_action: String::from(
                    "run `mend recover --mode exclusive` to drop it; the dataset keeps the config promoted first",
                ),
            }))
        }
        OperationKind::ConfigApply => Some(RecoveryDecision::RollBack),
        OperationKind::Reconcile => Some(match missing_objects(intent).as_slice() {
            [] => RecoveryDecision::RollForward,
            missing => undo_or_block(
                mode,
                format!(
                    "objects it planned to adopt or discard are gone or changed: {}",
                    missing.join(", ")
                ),
            ),
        }),
        OperationKind::Commit | OperationKind::Merge => None,
    }
}

/// An operation that cannot be completed: roll it back where compensation is allowed (and in
/// probe and verify, which execute nothing and report what exclusive recovery would do);
/// in roll-forward mode, blocked, saying why.
fn undo_or_block(mode: RecoveryMode, why: String) -> RecoveryDecision {
    if mode != RecoveryMode::RollForward {
        return RecoveryDecision::RollBack;
    }
    RecoveryDecision::Blocked(BlockedReason {
        why,
        operator_action: String::from(
            "run `mend recover --mode exclusive` to roll it back; until then its staged rows stay invisible",
        ),
    })
}

/// The planned objects not found as planned.
fn missing_objects(intent: &IntentObservation) -> Vec<&str> {
    intent
        .objects
        .iter()
        .filter(|object| !object.matches)
        .map(|object| object.split_id.as_str())
        .collect()
}

/// Whether a confirmed operation's publish can never land: its checkpoint no longer stands at
/// the delta's from-positions (positions only move forward, and its publish checked them
/// before it confirmed) while every split its publish makes published is still staged (its
/// own publish moves them and the checkpoint in one step, so it did not land). A delta-only
/// publish is never taken for overtaken: without splits, its own landed publish and
/// another's look alike.
fn overtaken(intent: &IntentObservation, state: &impl Fn(&String) -> Option<SplitState>) -> bool {
    intent.has_checkpoint_delta
        && !intent.checkpoint_at_from
        && !intent.publish_staged.is_empty()
        && intent
            .publish_staged
            .iter()
            .all(|id| state(id) == Some(SplitState::Staged))
}

/// Whether the operation's visible effects already happened.
fn settled(intent: &IntentObservation, state: &impl Fn(&String) -> Option<SplitState>) -> bool {
    match intent.kind {
        OperationKind::Gc => {
            return !intent.gc_splits.is_empty()
                && intent.gc_splits.iter().all(|id| state(id).is_none());
        }
        OperationKind::ConfigApply => return intent.config_applied,
        OperationKind::Reconcile => {
            // Every adopted split published (or since marked), every discarded one marked.
            return intent.publish_staged.iter().all(|id| {
                matches!(
                    state(id),
                    Some(SplitState::Published | SplitState::MarkedForDeletion)
                )
            }) && intent
                .mark_splits
                .iter()
                .all(|id| state(id) == Some(SplitState::MarkedForDeletion));
        }
        OperationKind::Commit | OperationKind::Merge => {}
    }
    if intent.publish_staged.is_empty() && intent.publish_replaced.is_empty() {
        return intent.has_checkpoint_delta && intent.checkpoint_at_to;
    }
    intent.publish_staged.iter().all(|id| {
        matches!(
            state(id),
            Some(SplitState::Published | SplitState::MarkedForDeletion)
        )
    }) && intent
        .publish_replaced
        .iter()
        .all(|id| matches!(state(id), None | Some(SplitState::MarkedForDeletion)))
        && (!intent.has_checkpoint_delta || intent.checkpoint_reached_to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mend_contract::{ExistingRow, ObjectObservation};

    fn commit(
        phase: IntentPhase,
        rows: &[(&str, SplitState)],
        objects: &[(&str, bool)],
    ) -> IntentObservation {
        IntentObservation {
            operation_id: "op".into(),
            kind: OperationKind::Commit,
            phase,
            owner_lease_live: false,
            planned_rows: vec!["s1".into(), "s2".into()],
            rows: rows
                .iter()
                .map(|(id, state)| ExistingRow {
                    split_id: (*id).into(),
                    state: *state,
                })
                .collect(),
            objects: objects
                .iter()
                .map(|(id, matches)| ObjectObservation {
                    split_id: (*id).into(),
                    present: *matches,
                    matches: *matches,
                })
                .collect(),
            publish_staged: vec!["s1".into(), "s2".into()],
            publish_replaced: vec![],
            has_checkpoint_delta: true,
            checkpoint_at_from: true,
            checkpoint_at_to: false,
            checkpoint_reached_to: false,
            gc_splits: vec![],
            mark_splits: vec![],
            config_at_expected: false,
            config_applied: false,
        }
    }

    fn decide_one(mode: RecoveryMode, intent: IntentObservation) -> RecoveryDecision {
        let input = RecoveryInput {
            dataset_id: "ds".into(),
            mode,
            now_ms: 0,
            intents: vec![intent],
        };
        decide_recovery(&input).remove(0).decision
    }

    const STAGED: SplitState = SplitState::Staged;
    const PUBLISHED: SplitState = SplitState::Published;

    #[test]
    fn a_commit_with_every_effect_in_place_rolls_forward() {
        let intent = commit(
            IntentPhase::Armed,
            &[("s1", STAGED), ("s2", STAGED)],
            &[("s1", true), ("s2", true)],
        );
        for mode in [
            RecoveryMode::RollForward,
            RecoveryMode::Exclusive,
            RecoveryMode::Probe,
        ] {
            assert_eq!(
                decide_one(mode, intent.clone()),
                RecoveryDecision::RollForward
            );
        }
    }

    #[test]
    fn a_published_commit_is_stale() {
        let mut intent = commit(
            IntentPhase::EffectsConfirmed,
            &[("s1", PUBLISHED), ("s2", PUBLISHED)],
            &[],
        );
        intent.checkpoint_at_from = false;
        intent.checkpoint_at_to = true;
        intent.checkpoint_reached_to = true;
        assert_eq!(
            decide_one(RecoveryMode::RollForward, intent),
            RecoveryDecision::Stale
        );
    }

    #[test]
    fn a_published_commit_is_stale_after_later_commits_moved_its_partitions_on() {
        let mut intent = commit(
            IntentPhase::EffectsConfirmed,
            &[("s1", PUBLISHED), ("s2", PUBLISHED)],
            &[("s1", true), ("s2", true)],
        );
        intent.checkpoint_at_from = false;
        intent.checkpoint_at_to = false;
        intent.checkpoint_reached_to = true;
        for mode in [
            RecoveryMode::RollForward,
            RecoveryMode::Exclusive,
            RecoveryMode::Probe,
        ] {
            assert_eq!(decide_one(mode, intent.clone()), RecoveryDecision::Stale);
        }
        // Not yet at its end: another commit moved the partition elsewhere first, and this
        // one's splits are published only if the rows say so.
        intent.checkpoint_reached_to = false;
        assert_ne!(
            decide_one(RecoveryMode::RollForward, intent),
            RecoveryDecision::Stale
        );
    }

    #[test]
    fn an_abandoned_intent_is_finished_in_every_mode_whatever_its_lease() {
        let mut intent = commit(IntentPhase::Abandoned, &[("s1", STAGED)], &[("s1", true)]);
        intent.owner_lease_live = true;
        for mode in [
            RecoveryMode::RollForward,
            RecoveryMode::Exclusive,
            RecoveryMode::Probe,
            RecoveryMode::Verify,
        ] {
            assert!(matches!(
                decide_one(mode, intent.clone()),
                RecoveryDecision::Abandon(_)
            ));
        }
    }

    #[test]
    fn a_live_owner_is_deferred_to_except_in_exclusive_mode() {
        let mut intent = commit(IntentPhase::Armed, &[("s1", STAGED)], &[("s1", true)]);
        intent.owner_lease_live = true;
        assert!(matches!(
            decide_one(RecoveryMode::RollForward, intent.clone()),
            RecoveryDecision::Defer(_)
        ));
        assert_eq!(
            decide_one(RecoveryMode::Exclusive, intent),
            RecoveryDecision::RollBack
        );
    }

    #[test]
    fn an_unconfirmed_commit_whose_owner_is_gone_is_abandoned_outside_exclusive_mode() {
        let intent = commit(
            IntentPhase::Armed,
            &[("s1", STAGED)],
            &[("s1", true), ("s2", false)],
        );
        for mode in [
            RecoveryMode::RollForward,
            RecoveryMode::Probe,
            RecoveryMode::Verify,
        ] {
            match decide_one(mode, intent.clone()) {
                RecoveryDecision::Abandon(why) => {
                    assert!(why.contains("never confirmed"), "{why}")
                }
                other => panic!("expected abandon in {mode:?}, got {other:?}"),
            }
        }
        // Exclusive recovery keeps its roll-back, which also deletes the objects at once.
        assert_eq!(
            decide_one(RecoveryMode::Exclusive, intent),
            RecoveryDecision::RollBack
        );
    }

    #[test]
    fn an_unconfirmed_commit_with_a_damaged_object_is_blocked_not_abandoned() {
        let mut intent = commit(
            IntentPhase::Armed,
            &[("s1", STAGED), ("s2", STAGED)],
            &[("s1", true), ("s2", false)],
        );
        intent.objects[1].present = true;
        match decide_one(RecoveryMode::RollForward, intent.clone()) {
            RecoveryDecision::Blocked(reason) => {
                assert!(reason.why.contains("object s2"), "{}", reason.why);
                assert!(reason.operator_action.contains("exclusive"));
            }
            other => panic!("expected blocked, got {other:?}"),
        }
        assert_eq!(
            decide_one(RecoveryMode::Exclusive, intent),
            RecoveryDecision::RollBack
        );
    }

    #[test]
    fn a_publish_that_no_longer_applies_is_never_rolled_forward() {
        // A split it replaces is no longer published (another merge replaced it first).
        let mut moved = commit(
            IntentPhase::EffectsConfirmed,
            &[
                ("s1", STAGED),
                ("s2", STAGED),
                ("old", SplitState::MarkedForDeletion),
            ],
            &[],
        );
        moved.publish_replaced = vec!["old".into()];
        assert!(matches!(
            decide_one(RecoveryMode::RollForward, moved.clone()),
            RecoveryDecision::Blocked(_)
        ));
        assert_eq!(
            decide_one(RecoveryMode::Exclusive, moved),
            RecoveryDecision::RollBack
        );
    }

    /// mend-sim seeds 73 and 496: a confirmed commit whose delta another publish overtook
    /// blocked every roll-forward sweep until an operator came; it can never publish, so it is
    /// abandoned, in every mode. Not when its own publish landed (its splits published), nor
    /// for a delta-only publish (its own publish and another's look alike).
    #[test]
    fn a_confirmed_commit_whose_delta_was_overtaken_is_abandoned() {
        let mut overtaken = commit(
            IntentPhase::EffectsConfirmed,
            &[("s1", STAGED), ("s2", STAGED)],
            &[],
        );
        overtaken.checkpoint_at_from = false;
        for mode in [
            RecoveryMode::RollForward,
            RecoveryMode::Exclusive,
            RecoveryMode::Probe,
        ] {
            assert!(
                matches!(
                    decide_one(mode, overtaken.clone()),
                    RecoveryDecision::Abandon(_)
                ),
                "{mode:?}"
            );
        }
        let mut live = overtaken.clone();
        live.owner_lease_live = true;
        assert!(matches!(
            decide_one(RecoveryMode::RollForward, live),
            RecoveryDecision::Defer(_)
        ));
        let mut own_published = overtaken.clone();
        own_published.rows = vec![
            ExistingRow {
                split_id: "s1".into(),
                state: PUBLISHED,
            },
            ExistingRow {
                split_id: "s2".into(),
                state: PUBLISHED,
            },
        ];
        own_published.checkpoint_reached_to = true;
        assert_eq!(
            decide_one(RecoveryMode::RollForward, own_published),
            RecoveryDecision::Stale
        );
        let mut delta_only = overtaken;
        delta_only.publish_staged.clear();
        assert!(matches!(
            decide_one(RecoveryMode::RollForward, delta_only),
            RecoveryDecision::Blocked(_)
        ));
    }

    #[test]
    fn gc_rolls_forward_until_its_splits_are_gone() {
        let mut gc = commit(
            IntentPhase::Armed,
            &[("g1", SplitState::MarkedForDeletion)],
            &[],
        );
        gc.kind = OperationKind::Gc;
        gc.publish_staged.clear();
        gc.gc_splits = vec!["g1".into(), "g2".into()];
        assert_eq!(
            decide_one(RecoveryMode::RollForward, gc.clone()),
            RecoveryDecision::RollForward
        );
        gc.rows.clear();
        assert_eq!(
            decide_one(RecoveryMode::RollForward, gc),
            RecoveryDecision::Stale
        );
    }

    #[test]
    fn a_config_apply_is_promoted_while_its_expected_version_stands() {
        let mut apply = commit(IntentPhase::Armed, &[], &[]);
        apply.kind = OperationKind::ConfigApply;
        apply.planned_rows.clear();
        apply.publish_staged.clear();
        apply.has_checkpoint_delta = false;
        apply.config_at_expected = true;
        assert_eq!(
            decide_one(RecoveryMode::RollForward, apply.clone()),
            RecoveryDecision::RollForward
        );
        apply.config_at_expected = false;
        assert!(matches!(
            decide_one(RecoveryMode::RollForward, apply.clone()),
            RecoveryDecision::Blocked(_)
        ));
        assert_eq!(
            decide_one(RecoveryMode::Exclusive, apply.clone()),
            RecoveryDecision::RollBack
        );
        apply.config_applied = true;
        assert_eq!(
            decide_one(RecoveryMode::RollForward, apply),
            RecoveryDecision::Stale
        );
    }

    #[test]
    fn a_reconcile_rolls_forward_while_its_objects_stand_and_is_stale_once_settled() {
        let mut reconcile = commit(IntentPhase::Armed, &[], &[("s1", true), ("s2", true)]);
        reconcile.kind = OperationKind::Reconcile;
        reconcile.publish_staged = vec!["s1".into()];
        reconcile.mark_splits = vec!["s2".into()];
        reconcile.has_checkpoint_delta = false;
        assert_eq!(
            decide_one(RecoveryMode::RollForward, reconcile.clone()),
            RecoveryDecision::RollForward
        );
        reconcile.objects[1].matches = false;
        assert!(matches!(
            decide_one(RecoveryMode::RollForward, reconcile.clone()),
            RecoveryDecision::Blocked(_)
        ));
        reconcile.rows = vec![
            ExistingRow {
                split_id: "s1".into(),
                state: PUBLISHED,
            },
            ExistingRow {
                split_id: "s2".into(),
                state: SplitState::MarkedForDeletion,
            },
        ];
        assert_eq!(
            decide_one(RecoveryMode::RollForward, reconcile),
            RecoveryDecision::Stale
        );
    }

    #[test]
    fn a_confirmed_commit_whose_object_vanished_is_never_rolled_forward() {
        let intent = commit(
            IntentPhase::EffectsConfirmed,
            &[("s1", STAGED), ("s2", STAGED)],
            &[("s1", true), ("s2", false)],
        );
        assert!(matches!(
            decide_one(RecoveryMode::RollForward, intent.clone()),
            RecoveryDecision::Blocked(_)
        ));
        assert_eq!(
            decide_one(RecoveryMode::Exclusive, intent),
            RecoveryDecision::RollBack
        );
    }
}

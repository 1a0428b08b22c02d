//! The WIT glue on the host side: wasmtime's generated bindings for the `policy` world and
//! conversions to and from the plain types of `mend_policy`. Only types are converted here;
//! nothing is decided.

use mend_policy as plain;

wasmtime::component::bindgen!({
    world: "policy",
    path: "../wit",
});

use mend::policy::types as wit;

pub(crate) fn stage_plan_input(
    dataset_id: &str,
    mode: plain::StageMode,
    split_ids: &[String],
    existing: &[plain::ExistingRow],
) -> wit::StagePlanInput {
    wit::StagePlanInput {
        dataset_id: dataset_id.to_string(),
        mode: match mode {
            plain::StageMode::Upsert => wit::StageMode::Upsert,
            plain::StageMode::CreateOnly => wit::StageMode::CreateOnly,
        },
        split_ids: split_ids.to_vec(),
        existing: existing.iter().map(existing_row).collect(),
    }
}

pub(crate) fn planned_split(planned: wit::PlannedSplit) -> plain::PlannedSplit {
    plain::PlannedSplit {
        split_id: planned.split_id,
        request_index: planned.request_index,
        action: match planned.action {
            wit::StageAction::Insert => plain::StageAction::Insert,
            wit::StageAction::Overwrite => plain::StageAction::Overwrite,
            wit::StageAction::Skip(state) => plain::StageAction::Skip(split_state(state)),
            wit::StageAction::Reject(reason) => plain::StageAction::Reject(reason),
        },
    }
}

pub(crate) fn publish_input(input: &plain::PublishInput) -> wit::PublishInput {
    wit::PublishInput {
        dataset_id: input.dataset_id.clone(),
        staged_split_ids: input.staged_split_ids.clone(),
        replaced_split_ids: input.replaced_split_ids.clone(),
        checkpoint_delta: input
            .checkpoint_delta
            .as_ref()
            .map(|delta| wit::CheckpointDelta {
                source: delta.source.clone(),
                partitions: delta
                    .partitions
                    .iter()
                    .map(|p| wit::PartitionDelta {
                        partition: p.partition.clone(),
                        from_position: p.from_position,
                        to_position: p.to_position,
                    })
                    .collect(),
            }),
        publish_token: input.publish_token.clone(),
        rows: input.rows.iter().map(existing_row).collect(),
        checkpoint: input
            .checkpoint
            .iter()
            .map(|p| wit::PartitionPosition {
                partition: p.partition.clone(),
                position: p.position,
            })
            .collect(),
        current_publish_token: input.current_publish_token.clone(),
    }
}

pub(crate) fn publish_violation(violation: wit::PublishViolation) -> plain::PublishViolation {
    plain::PublishViolation {
        kind: match violation.kind {
            wit::ViolationKind::SplitMissing => plain::ViolationKind::SplitMissing,
            wit::ViolationKind::NotStaged => plain::ViolationKind::NotStaged,
            wit::ViolationKind::NotPublished => plain::ViolationKind::NotPublished,
            wit::ViolationKind::SplitInBoth => plain::ViolationKind::SplitInBoth,
            wit::ViolationKind::CheckpointMismatch => plain::ViolationKind::CheckpointMismatch,
            wit::ViolationKind::StalePublishToken => plain::ViolationKind::StalePublishToken,
        },
        subjects: violation.subjects,
        message: violation.message,
    }
}

pub(crate) fn description(description: wit::PolicyDescription) -> plain::PolicyDescription {
    plain::PolicyDescription {
        name: description.name,
        version: description.version,
        abi_major: description.abi_major,
        abi_minor: description.abi_minor,
        semantics_revision: description.semantics_revision,
        required_capabilities: description.required_capabilities,
    }
}

fn existing_row(row: &plain::ExistingRow) -> wit::ExistingRow {
    wit::ExistingRow {
        split_id: row.split_id.clone(),
        state: wit_split_state(row.state),
    }
}

fn wit_split_state(state: plain::SplitState) -> wit::SplitState {
    match state {
        plain::SplitState::Staged => wit::SplitState::Staged,
        plain::SplitState::Published => wit::SplitState::Published,
        plain::SplitState::MarkedForDeletion => wit::SplitState::MarkedForDeletion,
    }
}

fn split_state(state: wit::SplitState) -> plain::SplitState {
    match state {
        wit::SplitState::Staged => plain::SplitState::Staged,
        wit::SplitState::Published => plain::SplitState::Published,
        wit::SplitState::MarkedForDeletion => plain::SplitState::MarkedForDeletion,
    }
}

pub(crate) fn recovery_input(input: &plain::RecoveryInput) -> wit::RecoveryInput {
    wit::RecoveryInput {
        dataset_id: input.dataset_id.clone(),
        mode: match input.mode {
            plain::RecoveryMode::Probe => wit::RecoveryMode::Probe,
            plain::RecoveryMode::RollForward => wit::RecoveryMode::RollForward,
            plain::RecoveryMode::Exclusive => wit::RecoveryMode::Exclusive,
            plain::RecoveryMode::Verify => wit::RecoveryMode::Verify,
        },
        now_ms: input.now_ms,
        intents: input
            .intents
            .iter()
            .map(|intent| wit::IntentObservation {
                operation_id: intent.operation_id.clone(),
                kind: match intent.kind {
                    plain::OperationKind::Commit => wit::OperationKind::Commit,
                    plain::OperationKind::Merge => wit::OperationKind::Merge,
                    plain::OperationKind::Gc => wit::OperationKind::Gc,
                    plain::OperationKind::ConfigApply => wit::OperationKind::ConfigApply,
                    plain::OperationKind::Reconcile => wit::OperationKind::Reconcile,
                },
                phase: match intent.phase {
                    plain::IntentPhase::Armed => wit::IntentPhase::Armed,
                    plain::IntentPhase::EffectsConfirmed => wit::IntentPhase::EffectsConfirmed,
                    plain::IntentPhase::Abandoned => wit::IntentPhase::Abandoned,
                },
                owner_lease_live: intent.owner_lease_live,
                planned_rows: intent.planned_rows.clone(),
                rows: intent.rows.iter().map(existing_row).collect(),
                objects: intent
                    .objects
                    .iter()
                    .map(|object| wit::ObjectObservation {
                        split_id: object.split_id.clone(),
                        present: object.present,
                        matches: object.matches,
                    })
                    .collect(),
                publish_staged: intent.publish_staged.clone(),
                publish_replaced: intent.publish_replaced.clone(),
                has_checkpoint_delta: intent.has_checkpoint_delta,
                checkpoint_at_from: intent.checkpoint_at_from,
                checkpoint_at_to: intent.checkpoint_at_to,
                checkpoint_reached_to: intent.checkpoint_reached_to,
                gc_splits: intent.gc_splits.clone(),
                mark_splits: intent.mark_splits.clone(),
                config_at_expected: intent.config_at_expected,
                config_applied: intent.config_applied,
            })
            .collect(),
    }
}

pub(crate) fn intent_decision(decision: wit::IntentDecision) -> plain::IntentDecision {
    plain::IntentDecision {
        operation_id: decision.operation_id,
        decision: match decision.decision {
            wit::RecoveryDecision::RollForward => plain::RecoveryDecision::RollForward,
            wit::RecoveryDecision::RollBack => plain::RecoveryDecision::RollBack,
            wit::RecoveryDecision::Defer(why) => plain::RecoveryDecision::Defer(why),
            wit::RecoveryDecision::Blocked(reason) => {
                plain::RecoveryDecision::Blocked(plain::BlockedReason {
                    why: reason.why,
                    operator_action: reason.operator_action,
                })
            }
            wit::RecoveryDecision::Stale => plain::RecoveryDecision::Stale,
            wit::RecoveryDecision::Abandon(why) => plain::RecoveryDecision::Abandon(why),
        },
    }
}

pub(crate) fn reconcile_input(input: &plain::ReconcileInput) -> wit::ReconcileInput {
    wit::ReconcileInput {
        dataset_id: input.dataset_id.clone(),
        now_ms: input.now_ms,
        orphans: input
            .orphans
            .iter()
            .map(|orphan| wit::OrphanObject {
                split_id: orphan.split_id.clone(),
                same_incarnation: orphan.same_incarnation,
                intact: orphan.intact,
                metadata_json: orphan.metadata_json.clone(),
                age_ms: orphan.age_ms,
            })
            .collect(),
    }
}

pub(crate) fn reconcile_decision(decision: wit::ReconcileDecision) -> plain::ReconcileDecision {
    plain::ReconcileDecision {
        split_id: decision.split_id,
        action: match decision.action {
            wit::ReconcileAction::Adopt => plain::ReconcileAction::Adopt,
            wit::ReconcileAction::Discard(why) => plain::ReconcileAction::Discard(why),
        },
    }
}

pub(crate) fn gc_input(input: &plain::GcInput) -> wit::GcInput {
    wit::GcInput {
        dataset_id: input.dataset_id.clone(),
        now_ms: input.now_ms,
        staged_grace_period_ms: input.staged_grace_period_ms,
        deletion_grace_period_ms: input.deletion_grace_period_ms,
        candidates: input
            .candidates
            .iter()
            .map(|candidate| wit::GcCandidate {
                split_id: candidate.split_id.clone(),
                state: wit_split_state(candidate.state),
                updated_at_ms: candidate.updated_at_ms,
            })
            .collect(),
    }
}

pub(crate) fn gc_plan(plan: wit::GcPlan) -> plain::GcPlan {
    plain::GcPlan {
        mark: plan.mark,
        delete: plan.delete,
    }
}

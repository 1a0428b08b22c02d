//! The WIT glue on the host side: wasmtime's generated bindings for the `policy` world and
//! conversions to and from the plain types of `mend_contract`. Only types are converted here;
//! nothing is decided.
//!
//! Inputs cross as borrowed views of the plain types (`ownership: Borrowing`): a decision over
//! 10,000 splits copies each id once, into the sandbox, instead of first into an owned WIT copy
//! that is dropped after the call. Each `with_*` builds the view's lists of references and
//! lends the view to `decide`.

use mend_contract as plain;

wasmtime::component::bindgen!({
    world: "policy",
    path: "../wit",
    ownership: Borrowing { duplicate_if_necessary: false },
});

pub(crate) use mend::policy::types as wit;

pub(crate) fn with_stage_plan_input<R>(
    dataset_id: &str,
    mode: plain::StageMode,
    split_ids: &[String],
    existing: &[plain::ExistingRow],
    decide: impl FnOnce(&wit::StagePlanInput<'_>) -> R,
) -> R {
    let split_ids = strs(split_ids);
    let existing: Vec<_> = existing.iter().map(existing_row).collect();
    decide(&wit::StagePlanInput {
        dataset_id,
        mode: match mode {
            plain::StageMode::Upsert => wit::StageMode::Upsert,
            plain::StageMode::CreateOnly => wit::StageMode::CreateOnly,
        },
        split_ids: &split_ids,
        existing: &existing,
    })
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

pub(crate) fn with_publish_input<R>(
    input: &plain::PublishInput,
    decide: impl FnOnce(&wit::PublishInput<'_>) -> R,
) -> R {
    let staged = strs(&input.staged_split_ids);
    let replaced = strs(&input.replaced_split_ids);
    let delta_partitions: Vec<_> = input
        .checkpoint_delta
        .iter()
        .flat_map(|delta| &delta.partitions)
        .map(|p| wit::PartitionDelta {
            partition: &p.partition,
            from_position: p.from_position,
            to_position: p.to_position,
        })
        .collect();
    let rows: Vec<_> = input.rows.iter().map(existing_row).collect();
    let checkpoint: Vec<_> = input
        .checkpoint
        .iter()
        .map(|p| wit::PartitionPosition {
            partition: &p.partition,
            position: p.position,
        })
        .collect();
    decide(&wit::PublishInput {
        dataset_id: &input.dataset_id,
        staged_split_ids: &staged,
        replaced_split_ids: &replaced,
        checkpoint_delta: input
            .checkpoint_delta
            .as_ref()
            .map(|delta| wit::CheckpointDelta {
                source: &delta.source,
                partitions: &delta_partitions,
            }),
        publish_token: input.publish_token.as_deref(),
        rows: &rows,
        checkpoint: &checkpoint,
        current_publish_token: input.current_publish_token.as_deref(),
    })
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

fn existing_row(row: &plain::ExistingRow) -> wit::ExistingRow<'_> {
    wit::ExistingRow {
        split_id: &row.split_id,
        state: wit_split_state(row.state),
    }
}

fn strs(strings: &[String]) -> Vec<&str> {
    strings.iter().map(String::as_str).collect()
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

pub(crate) fn with_recovery_input<R>(
    input: &plain::RecoveryInput,
    decide: impl FnOnce(&wit::RecoveryInput<'_>) -> R,
) -> R {
    /// The lists of one intent's observation, which its view borrows.
    struct Lists<'a> {
        planned_rows: Vec<&'a str>,
        rows: Vec<wit::ExistingRow<'a>>,
        objects: Vec<wit::ObjectObservation<'a>>,
        publish_staged: Vec<&'a str>,
        publish_replaced: Vec<&'a str>,
        gc_splits: Vec<&'a str>,
        mark_splits: Vec<&'a str>,
    }
    let lists: Vec<Lists<'_>> = input
        .intents
        .iter()
        .map(|intent| Lists {
            planned_rows: strs(&intent.planned_rows),
            rows: intent.rows.iter().map(existing_row).collect(),
            objects: intent
                .objects
                .iter()
                .map(|object| wit::ObjectObservation {
                    split_id: &object.split_id,
                    present: object.present,
                    matches: object.matches,
                })
                .collect(),
            publish_staged: strs(&intent.publish_staged),
            publish_replaced: strs(&intent.publish_replaced),
            gc_splits: strs(&intent.gc_splits),
            mark_splits: strs(&intent.mark_splits),
        })
        .collect();
    let intents: Vec<_> = input
        .intents
        .iter()
        .zip(&lists)
        .map(|(intent, lists)| wit::IntentObservation {
            operation_id: &intent.operation_id,
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
            planned_rows: &lists.planned_rows,
            rows: &lists.rows,
            objects: &lists.objects,
            publish_staged: &lists.publish_staged,
            publish_replaced: &lists.publish_replaced,
            has_checkpoint_delta: intent.has_checkpoint_delta,
            checkpoint_at_from: intent.checkpoint_at_from,
            checkpoint_at_to: intent.checkpoint_at_to,
            checkpoint_reached_to: intent.checkpoint_reached_to,
            gc_splits: &lists.gc_splits,
            mark_splits: &lists.mark_splits,
            config_at_expected: intent.config_at_expected,
            config_applied: intent.config_applied,
        })
        .collect();
    decide(&wit::RecoveryInput {
        dataset_id: &input.dataset_id,
        mode: match input.mode {
            plain::RecoveryMode::Probe => wit::RecoveryMode::Probe,
            plain::RecoveryMode::RollForward => wit::RecoveryMode::RollForward,
            plain::RecoveryMode::Exclusive => wit::RecoveryMode::Exclusive,
            plain::RecoveryMode::Verify => wit::RecoveryMode::Verify,
        },
        now_ms: input.now_ms,
        intents: &intents,
    })
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

pub(crate) fn with_reconcile_input<R>(
    input: &plain::ReconcileInput,
    decide: impl FnOnce(&wit::ReconcileInput<'_>) -> R,
) -> R {
    let orphans: Vec<_> = input
        .orphans
        .iter()
        .map(|orphan| wit::OrphanObject {
            split_id: &orphan.split_id,
            same_incarnation: orphan.same_incarnation,
            intact: orphan.intact,
            metadata_json: &orphan.metadata_json,
            age_ms: orphan.age_ms,
        })
        .collect();
    decide(&wit::ReconcileInput {
        dataset_id: &input.dataset_id,
        now_ms: input.now_ms,
        orphans: &orphans,
    })
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

pub(crate) fn with_gc_input<R>(
    input: &plain::GcInput,
    decide: impl FnOnce(&wit::GcInput<'_>) -> R,
) -> R {
    let candidates: Vec<_> = input
        .candidates
        .iter()
        .map(|candidate| wit::GcCandidate {
            split_id: &candidate.split_id,
            state: wit_split_state(candidate.state),
            updated_at_ms: candidate.updated_at_ms,
        })
        .collect();
    decide(&wit::GcInput {
        dataset_id: &input.dataset_id,
        now_ms: input.now_ms,
        staged_grace_period_ms: input.staged_grace_period_ms,
        deletion_grace_period_ms: input.deletion_grace_period_ms,
        candidates: &candidates,
    })
}

pub(crate) fn gc_plan(plan: wit::GcPlan) -> plain::GcPlan {
    plain::GcPlan {
        mark: plan.mark,
        delete: plan.delete,
    }
}

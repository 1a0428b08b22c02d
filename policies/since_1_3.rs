// What the contracts from 1.3 on say alike, for the fixtures `abi-1-3` and `abi-1-4`: recovery
// with the phase `abandoned` and the decision `abandon`, and `plan-gc`. `include!`d like
// `older_contracts.rs`.

/// The default recovery decisions, asked as 1.3 and 1.4 ask them.
fn recovery_by_default(input: wit::RecoveryInput) -> Vec<wit::IntentDecision> {
    let input = plain::RecoveryInput {
        dataset_id: input.dataset_id,
        mode: recovery_mode(input.mode),
        now_ms: input.now_ms,
        intents: input.intents.into_iter().map(intent_observation).collect(),
    };
    recovery_decisions(input, wit::RecoveryDecision::Abandon)
}

/// The default gc plan, asked as 1.3 and 1.4 ask it.
fn gc_by_default(input: wit::GcInput) -> wit::GcPlan {
    let input = plain::GcInput {
        dataset_id: input.dataset_id,
        now_ms: input.now_ms,
        staged_grace_period_ms: input.staged_grace_period_ms,
        deletion_grace_period_ms: input.deletion_grace_period_ms,
        candidates: input
            .candidates
            .into_iter()
            .map(|candidate| plain::GcCandidate {
                split_id: candidate.split_id,
                state: plain_state(candidate.state),
                updated_at_ms: candidate.updated_at_ms,
            })
            .collect(),
    };
    let plan = mend_default_policy::plan_gc(&input);
    wit::GcPlan {
        mark: plan.mark,
        delete: plan.delete,
    }
}

fn intent_observation(intent: wit::IntentObservation) -> plain::IntentObservation {
    plain::IntentObservation {
        operation_id: intent.operation_id,
        kind: operation_kind(intent.kind),
        phase: match intent.phase {
            wit::IntentPhase::Armed => plain::IntentPhase::Armed,
            wit::IntentPhase::EffectsConfirmed => plain::IntentPhase::EffectsConfirmed,
            wit::IntentPhase::Abandoned => plain::IntentPhase::Abandoned,
        },
        owner_lease_live: intent.owner_lease_live,
        planned_rows: intent.planned_rows,
        rows: intent.rows.into_iter().map(existing_row).collect(),
        objects: object_observations(intent.objects),
        publish_staged: intent.publish_staged,
        publish_replaced: intent.publish_replaced,
        has_checkpoint_delta: intent.has_checkpoint_delta,
        checkpoint_at_from: intent.checkpoint_at_from,
        checkpoint_at_to: intent.checkpoint_at_to,
        checkpoint_reached_to: intent.checkpoint_reached_to,
        gc_splits: intent.gc_splits,
        mark_splits: intent.mark_splits,
        config_at_expected: intent.config_at_expected,
        config_applied: intent.config_applied,
    }
}

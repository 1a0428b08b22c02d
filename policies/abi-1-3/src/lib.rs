//! The default policy as it was built against the contract before this one,
//! `mend:policy@1.3.0` (`wit/policy.wit` in this crate is that contract, frozen): every
//! decision is the default one, asked the 1.3 way (ids as a list of strings, one publish per
//! `validate-publish`). It shows that a 1.4 host still runs a 1.3 policy and that the policy
//! decides exactly as the native functions do, as the mixed-version matrix checks.
//!
//! It builds only for wasm32; natively it is empty.

#![cfg_attr(target_arch = "wasm32", no_std)]
#![cfg(target_arch = "wasm32")]
// The generated glue lifts and lowers through raw pointers.
#![allow(unsafe_code)]

extern crate alloc;

wit_bindgen::generate!({
    world: "policy",
    path: "wit",
});

use mend::policy::types as wit;
// The allocator, memcmp and the panic handler; rustc links the crate only if it is named.
use mend_policy_sdk as _;

use alloc::vec::Vec;

use mend_contract as plain;

/// The default policy's exports: each converts its input, calls the default decision and
/// converts the answer back.
struct AbiOneThree;

impl Guest for AbiOneThree {
    /// The default policy's, as ABI 1.3, without `stage.standard-plans`, which 1.3 has not.
    fn describe() -> wit::PolicyDescription {
        description_as("abi-1-3", 3)
    }

    fn plan_stage(input: wit::StagePlanInput) -> Vec<wit::PlannedSplit> {
        plan_stage_by_name(input)
    }

    fn validate_publish(input: wit::PublishInput) -> Vec<wit::PublishViolation> {
        validate_one_publish(input)
    }

    fn decide_recovery(input: wit::RecoveryInput) -> Vec<wit::IntentDecision> {
        let input = plain::RecoveryInput {
            dataset_id: input.dataset_id,
            mode: recovery_mode(input.mode),
            now_ms: input.now_ms,
            intents: input.intents.into_iter().map(intent_observation).collect(),
        };
        recovery_decisions(input, wit::RecoveryDecision::Abandon)
    }

    fn plan_reconcile(input: wit::ReconcileInput) -> Vec<wit::ReconcileDecision> {
        reconcile_by_default(input)
    }

    fn plan_gc(input: wit::GcInput) -> wit::GcPlan {
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

include!("../../older_contracts.rs");
include!("../../older_reconcile.rs");

export!(AbiOneThree);

//! The default policy as it would be built against the frozen contract `mend:policy@1.1.0`
//! (`wit/policy.wit` in this crate is that contract): every decision 1.1 can express is the
//! default one, asked the 1.1 way. It shows that a 1.4 host still runs a 1.1 policy and asks
//! it only what 1.1 can say, as the mixed-version matrix checks.
//!
//! What 1.1 cannot express, and what this policy does about it:
//! - it has no `plan-gc` (the host plans gc by the grace-period rule it always ran) and no
//!   `plan-reconcile` (the host refuses a reconcile: 1.1 had none);
//! - it never sees the phase `abandoned` or a config-apply or reconcile intent (the host
//!   defers those), nor `checkpoint-reached-to`, which it takes as `checkpoint-at-to`;
//! - it cannot answer `abandon`: where the default decision abandons, it defers with the same
//!   reason, so the intent waits for a policy that can abandon it.
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
struct AbiOneOne;

impl Guest for AbiOneOne {
    /// The default policy's, as ABI 1.1, without `stage.standard-plans`, which 1.1 has not.
    fn describe() -> wit::PolicyDescription {
        description_as("abi-1-1", 1)
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
        // 1.1 cannot abandon: the intent waits for a policy that can.
        recovery_decisions(input, wit::RecoveryDecision::Defer)
    }
}

fn intent_observation(intent: wit::IntentObservation) -> plain::IntentObservation {
    plain::IntentObservation {
        operation_id: intent.operation_id,
        kind: operation_kind(intent.kind),
        phase: match intent.phase {
            wit::IntentPhase::Armed => plain::IntentPhase::Armed,
            wit::IntentPhase::EffectsConfirmed => plain::IntentPhase::EffectsConfirmed,
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
        // 1.1 observes no more than whether the checkpoint is at the delta's end.
        checkpoint_reached_to: intent.checkpoint_at_to,
        gc_splits: intent.gc_splits,
        // Observed from 1.2 on; the host never asks 1.1 about an intent that needs them.
        mark_splits: Vec::new(),
        config_at_expected: false,
        config_applied: false,
    }
}

include!("../../older_contracts.rs");
include!("../../older_stage.rs");

export!(AbiOneOne);

//! The default policy as it was built against the contract before this one,
//! `mend:policy@1.4.0` (`wit/policy.wit` in this crate is that contract, frozen): every
//! decision is the default one, asked the 1.4 way (the request's ids and the rows' ids packed
//! in buffers, which the policy sorts and compares itself; publishes validated a batch at a
//! time). It shows that a 1.5 host still runs a 1.4 policy and that the policy decides exactly
//! as the native functions do, as the mixed-version matrix checks.
//!
//! It leaves out `stage.standard-plans`, which 1.4 has, so that the engine asks it to plan
//! every stage: each stage of a test against it crosses the 1.4 boundary.
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
struct AbiOneFour;

impl Guest for AbiOneFour {
    fn describe() -> wit::PolicyDescription {
        description_as("abi-1-4", 4)
    }

    /// The ids are read from the packed batches in place, and the decisions name them by
    /// index. A batch the host packed wrongly traps: the host reports it as a failed
    /// decision, never as a plan.
    fn plan_stage(input: wit::StagePlanInput) -> wit::StagePlan {
        let ids = plain::unpack(&input.split_ids.bytes, &input.split_ids.ends)
            .expect("the host packs the split ids whole");
        let rows = &input.existing;
        let row_ids = plain::unpack(&rows.split_ids.bytes, &rows.split_ids.ends)
            .expect("the host packs the rows' ids whole");
        assert_eq!(row_ids.len(), rows.states.len(), "one state per row");
        let existing = row_ids
            .into_iter()
            .zip(rows.states.iter().map(|state| plain_state(*state)))
            .collect();
        let mode = match input.mode {
            wit::StageMode::Upsert => plain::StageMode::Upsert,
            wit::StageMode::CreateOnly => plain::StageMode::CreateOnly,
        };
        let decided = mend_default_policy::stage::plan_ids(mode, &ids, existing);
        let mut plan = wit::StagePlan {
            request_indices: Vec::with_capacity(decided.len()),
            actions: Vec::with_capacity(decided.len()),
            reasons: Vec::new(),
        };
        for decision in decided {
            plan.request_indices.push(decision.request_index);
            plan.actions.push(match decision.action {
                plain::StageAction::Insert => wit::PlannedAction::Insert,
                plain::StageAction::Overwrite => wit::PlannedAction::Overwrite,
                plain::StageAction::Skip(plain::SplitState::Staged) => {
                    wit::PlannedAction::SkipStaged
                }
                plain::StageAction::Skip(plain::SplitState::Published) => {
                    wit::PlannedAction::SkipPublished
                }
                plain::StageAction::Skip(plain::SplitState::MarkedForDeletion) => {
                    wit::PlannedAction::SkipMarkedForDeletion
                }
                plain::StageAction::Reject(reason) => {
                    plan.reasons.push(reason);
                    wit::PlannedAction::Reject
                }
            });
        }
        plan
    }

    fn validate_publishes(inputs: Vec<wit::PublishInput>) -> Vec<Vec<wit::PublishViolation>> {
        inputs.into_iter().map(validate_one_publish).collect()
    }

    fn decide_recovery(input: wit::RecoveryInput) -> Vec<wit::IntentDecision> {
        recovery_by_default(input)
    }

    fn plan_reconcile(input: wit::ReconcileInput) -> Vec<wit::ReconcileDecision> {
        reconcile_by_default(input)
    }

    fn plan_gc(input: wit::GcInput) -> wit::GcPlan {
        gc_by_default(input)
    }
}

include!("../../older_contracts.rs");
include!("../../older_reconcile.rs");
include!("../../since_1_3.rs");

export!(AbiOneFour);

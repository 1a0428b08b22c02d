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
include!("../../older_stage.rs");
include!("../../older_reconcile.rs");
include!("../../since_1_3.rs");

export!(AbiOneThree);

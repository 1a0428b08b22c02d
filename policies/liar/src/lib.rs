//! A policy for tests that lies about its ABI: built against the `mend:policy@1.3.0` contract,
//! its `describe()` claims ABI 1.1. A 1.3 host would accept an honest 1.1 policy (the minor is
//! not newer than its own), so only comparing the claim with the contract the component
//! actually imports catches it. Its decisions are the default policy's.
//!
//! It builds only for wasm32; natively it is empty.

#![cfg_attr(target_arch = "wasm32", no_std)]
#![cfg(target_arch = "wasm32")]

extern crate alloc;

use alloc::vec::Vec;

use mend_default_policy::bindings::DefaultPolicy;
use mend_policy_sdk::{Guest, wit};

struct Liar;

impl Guest for Liar {
    fn describe() -> wit::PolicyDescription {
        wit::PolicyDescription {
            name: "liar".into(),
            abi_minor: 1,
            ..DefaultPolicy::describe()
        }
    }

    fn plan_stage(input: wit::StagePlanInput) -> wit::StagePlan {
        DefaultPolicy::plan_stage(input)
    }

    fn validate_publishes(inputs: Vec<wit::PublishInput>) -> Vec<Vec<wit::PublishViolation>> {
        DefaultPolicy::validate_publishes(inputs)
    }

    fn decide_recovery(input: wit::RecoveryInput) -> Vec<wit::IntentDecision> {
        DefaultPolicy::decide_recovery(input)
    }

    fn plan_reconcile(input: wit::ReconcileInput) -> Vec<wit::ReconcileDecision> {
        DefaultPolicy::plan_reconcile(input)
    }

    fn plan_gc(input: wit::GcInput) -> wit::GcPlan {
        DefaultPolicy::plan_gc(input)
    }
}

mend_policy_sdk::export!(Liar with_types_in mend_policy_sdk::bindings);

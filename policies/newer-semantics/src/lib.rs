//! A policy for tests: the default policy's decisions, described as semantics revision 2.
//! No host knows revision 2 yet, so each refuses it at load; a test that plays a newer host
//! knowing it loads it and gets the default decisions.
//!
//! It builds only for wasm32; natively it is empty.

#![cfg_attr(target_arch = "wasm32", no_std)]
#![cfg(target_arch = "wasm32")]

extern crate alloc;

use alloc::vec::Vec;

use mend_default_policy::bindings::DefaultPolicy;
use mend_policy_sdk::{Guest, wit};

struct NewerSemantics;

impl Guest for NewerSemantics {
    fn describe() -> wit::PolicyDescription {
        wit::PolicyDescription {
            name: "newer-semantics".into(),
            semantics_revision: 2,
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

mend_policy_sdk::export!(NewerSemantics with_types_in mend_policy_sdk::bindings);

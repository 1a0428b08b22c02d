//! A policy for tests: the default policy's decisions, requiring one more capability,
//! `stage.merge-on-write`, that no host provides. Its ABI and semantics are the host's, so it
//! loads; an engine refuses to start with it, naming the capability.
//!
//! It builds only for wasm32; natively it is empty.

#![cfg_attr(target_arch = "wasm32", no_std)]
#![cfg(target_arch = "wasm32")]

extern crate alloc;

use alloc::vec::Vec;

use mend_default_policy::bindings::DefaultPolicy;
use mend_policy_sdk::{Guest, wit};

/// A capability no host or backend provides.
const MERGE_ON_WRITE: &str = "stage.merge-on-write";

struct ExtraCapability;

impl Guest for ExtraCapability {
    fn describe() -> wit::PolicyDescription {
        let mut description = DefaultPolicy::describe();
        description.name = "extra-capability".into();
        description
            .required_capabilities
            .push(MERGE_ON_WRITE.into());
        description
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

mend_policy_sdk::export!(ExtraCapability with_types_in mend_policy_sdk::bindings);

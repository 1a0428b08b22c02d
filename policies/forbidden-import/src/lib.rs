//! A policy for tests that asks for authority a policy must not have: `describe()` reads an
//! environment variable. Built with std for `wasm32-wasip2`, the component then imports
//! `wasi:cli/environment` (and the rest of std's WASI layer), and the host must refuse it at
//! load, before anything runs, naming the import. Its decisions are empty.
//!
//! It builds only for wasm32; natively it is empty.

#![cfg(target_arch = "wasm32")]
// The generated glue lifts and lowers through raw pointers.
#![allow(unsafe_code)]

wit_bindgen::generate!({
    world: "policy",
    path: "../../wit",
});

use mend::policy::types as wit;

struct ForbiddenImport;

impl Guest for ForbiddenImport {
    /// Lets the environment pick the semantics revision: exactly the ambient input a decision
    /// must never depend on.
    fn describe() -> wit::PolicyDescription {
        let semantics_revision = std::env::var("MEND_POLICY_SEMANTICS")
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(1);
        wit::PolicyDescription {
            name: "forbidden-import".into(),
            version: "0.0.0".into(),
            abi_major: mend_contract::ABI_MAJOR,
            abi_minor: mend_contract::ABI_MINOR,
            semantics_revision,
            required_capabilities: Vec::new(),
        }
    }

    fn plan_stage(_input: wit::StagePlanInput) -> wit::StagePlan {
        wit::StagePlan {
            request_indices: Vec::new(),
            actions: Vec::new(),
            reasons: Vec::new(),
        }
    }

    fn validate_publishes(_inputs: Vec<wit::PublishInput>) -> Vec<Vec<wit::PublishViolation>> {
        Vec::new()
    }

    fn decide_recovery(_input: wit::RecoveryInput) -> Vec<wit::IntentDecision> {
        Vec::new()
    }

    fn plan_reconcile(_input: wit::ReconcileInput) -> Vec<wit::ReconcileDecision> {
        Vec::new()
    }

    fn plan_gc(_input: wit::GcInput) -> wit::GcPlan {
        wit::GcPlan {
            mark: Vec::new(),
            delete: Vec::new(),
        }
    }
}

export!(ForbiddenImport);

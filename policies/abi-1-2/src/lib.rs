//! A policy for tests built against the contract before this one, `mend:policy@1.2.0`
//! (`wit/policy.wit` in this crate is that contract, frozen): what a policy built before the
//! 1.3 upgrade (which added `plan-gc`) looks like. A current host must refuse it at load,
//! naming both versions and saying to rebuild it, before wasmtime meets its older types. It
//! describes itself honestly as ABI 1.2; its decisions are empty, since no host should ever
//! ask it for one.
//!
//! It builds only for wasm32; natively it is empty.

#![cfg_attr(target_arch = "wasm32", no_std)]
#![cfg(target_arch = "wasm32")]
// The generated glue lifts and lowers through raw pointers.
#![allow(unsafe_code)]

extern crate alloc;

use alloc::vec::Vec;

wit_bindgen::generate!({
    world: "policy",
    path: "wit",
});

use mend::policy::types as wit;
// The allocator, memcmp and the panic handler; rustc links the crate only if it is named.
use mend_policy_sdk as _;

struct AbiOneTwo;

impl Guest for AbiOneTwo {
    fn describe() -> wit::PolicyDescription {
        wit::PolicyDescription {
            name: "abi-1-2".into(),
            version: "0.0.0".into(),
            abi_major: 1,
            abi_minor: 2,
            semantics_revision: 1,
            required_capabilities: [
                "stage.upsert",
                "stage.create-only",
                "publish.checkpoint",
                "publish.token",
            ]
            .iter()
            .map(|name| (*name).into())
            .collect(),
        }
    }

    fn plan_stage(_input: wit::StagePlanInput) -> Vec<wit::PlannedSplit> {
        Vec::new()
    }

    fn validate_publish(_input: wit::PublishInput) -> Vec<wit::PublishViolation> {
        Vec::new()
    }

    fn decide_recovery(_input: wit::RecoveryInput) -> Vec<wit::IntentDecision> {
        Vec::new()
    }

    fn plan_reconcile(_input: wit::ReconcileInput) -> Vec<wit::ReconcileDecision> {
        Vec::new()
    }
}

export!(AbiOneTwo);

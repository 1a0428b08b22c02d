//! A policy for tests built against the previous contract, `mend:policy@1.1.0`
//! (`wit/policy.wit` in this crate is that contract, frozen): what a policy built before the
//! upgrade looks like. A current host must refuse it at load, naming both versions, before
//! wasmtime meets its older types. It describes itself honestly as ABI 1.1; its decisions are
//! empty, since no host should ever ask it for one.
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

struct AbiOneOne;

impl Guest for AbiOneOne {
    fn describe() -> wit::PolicyDescription {
        wit::PolicyDescription {
            name: "abi-1-1".into(),
            version: "0.0.0".into(),
            abi_major: 1,
            abi_minor: 1,
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
}

export!(AbiOneOne);

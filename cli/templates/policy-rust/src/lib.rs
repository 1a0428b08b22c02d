//! The {{name}} policy. It starts as mend's default policy: every call delegates to
//! `DefaultPolicy`. Change the calls you want to decide differently; keep the others.
//!
//! A policy decides from its inputs alone: the same inputs give the same decisions. There is
//! no clock (time comes in as `now_ms`), no randomness, no environment, no files or network; the
//! component imports nothing, and mend refuses one that does.

#![cfg_attr(target_arch = "wasm32", no_std)]
#![cfg(target_arch = "wasm32")]

extern crate alloc;

use alloc::vec::Vec;

use mend_default_policy::bindings::DefaultPolicy;
use mend_policy_sdk::{Guest, wit};

struct Policy;

impl Guest for Policy {
    /// Who this policy is. The ABI is that of the contract it is built against, and the
    /// semantics revision that of the decisions it makes: both are the default policy's while
    /// its decisions are. Give the name and version your own.
    fn describe() -> wit::PolicyDescription {
        wit::PolicyDescription {
            name: "{{name}}".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            ..DefaultPolicy::describe()
        }
    }

    /// Which split ids of a stage request to insert, overwrite, skip or reject. The request
    /// comes grouped by id (the host sorts it): each group's request indices and the state of
    /// its row, no id to compare, and the plan names each group's decision by the index of the
    /// request entry it takes. While `describe()` keeps the default's `stage.standard-plans`,
    /// the host stages without asking: drop that capability if you plan otherwise.
    fn plan_stage(input: wit::StagePlanInput) -> wit::StagePlan {
        DefaultPolicy::plan_stage(input)
    }

    /// For each publish of a batch, what is wrong with it, if anything: an empty list
    /// accepts it.
    fn validate_publishes(inputs: Vec<wit::PublishInput>) -> Vec<Vec<wit::PublishViolation>> {
        DefaultPolicy::validate_publishes(inputs)
    }

    /// For each in-doubt operation: roll it forward, roll it back, defer, block or abandon it.
    fn decide_recovery(input: wit::RecoveryInput) -> Vec<wit::IntentDecision> {
        DefaultPolicy::decide_recovery(input)
    }

    /// For each object no row describes: adopt it or discard it.
    fn plan_reconcile(input: wit::ReconcileInput) -> Vec<wit::ReconcileDecision> {
        DefaultPolicy::plan_reconcile(input)
    }

    /// Which splits gc marks for deletion and which it deletes.
    fn plan_gc(input: wit::GcInput) -> wit::GcPlan {
        DefaultPolicy::plan_gc(input)
    }
}

mend_policy_sdk::export!(Policy with_types_in mend_policy_sdk::bindings);

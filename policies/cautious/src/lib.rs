//! A cautious operator's policy, the second policy `mend demo` swaps to: every decision is the
//! default policy's, except that `plan-reconcile` discards every orphan instead of adopting
//! it. An object no row describes is then never published on the strength of its header
//! alone; it is marked for deletion, and an operator has the deletion grace period to look at
//! it before gc removes it. The host allows a discard always, so this policy needs nothing the
//! default does not.
//!
//! Its golden scenarios are in `scenarios/`. It builds only for wasm32; natively it is empty.

#![cfg_attr(target_arch = "wasm32", no_std)]
#![cfg(target_arch = "wasm32")]

extern crate alloc;

use alloc::string::String;
use alloc::vec::Vec;

use mend_default_policy::bindings::DefaultPolicy;
use mend_policy_sdk::{Guest, wit};

/// Why an orphan the default policy would adopt is discarded.
const CAUTIOUS_DISCARD: &str =
    "the cautious policy adopts no orphan: review it before gc deletes it";

struct CautiousPolicy;

impl Guest for CautiousPolicy {
    fn describe() -> wit::PolicyDescription {
        wit::PolicyDescription {
            name: "mend-cautious".into(),
            version: env!("CARGO_PKG_VERSION").into(),
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

    /// The default's decisions, with every adopt turned into a discard; the default's own
    /// discards (a damaged object, one of an earlier incarnation) keep their reasons.
    fn plan_reconcile(input: wit::ReconcileInput) -> Vec<wit::ReconcileDecision> {
        DefaultPolicy::plan_reconcile(input)
            .into_iter()
            .map(|decision| wit::ReconcileDecision {
                action: match decision.action {
                    wit::ReconcileAction::Adopt => {
                        wit::ReconcileAction::Discard(String::from(CAUTIOUS_DISCARD))
                    }
                    discard @ wit::ReconcileAction::Discard(_) => discard,
                },
                split_id: decision.split_id,
            })
            .collect()
    }

    fn plan_gc(input: wit::GcInput) -> wit::GcPlan {
        DefaultPolicy::plan_gc(input)
    }
}

mend_policy_sdk::export!(CautiousPolicy with_types_in mend_policy_sdk::bindings);

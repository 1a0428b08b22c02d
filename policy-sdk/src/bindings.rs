//! The wit-bindgen bindings of this mend's contract, `wit/policy.wit` (`mend:policy@1.5.0`):
//! the `Guest` trait a policy implements, the contract's types under `mend::policy::types`
//! (the crate root re-exports them as `wit`), and `export!`, which a policy invokes once to
//! export its type as the component's world:
//!
//! ```ignore
//! mend_policy_sdk::export!(MyPolicy with_types_in mend_policy_sdk::bindings);
//! ```
//!
//! The export macro is public (`pub_export_macro`) so that it runs in the policy's crate, not
//! this one: the component's exports are the policy's functions.

// The generated glue lifts and lowers through raw pointers; that is its job.
#![allow(unsafe_code)]

wit_bindgen::generate!({
    world: "policy",
    path: "../wit",
    pub_export_macro: true,
    default_bindings_module: "mend_policy_sdk::bindings",
});

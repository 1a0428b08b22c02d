//! What every mend policy written in Rust needs besides its decisions, so that a policy crate
//! holds only those.
//!
//! A policy is a `wasm32-wasip2` component that imports nothing (docs/src/policies.md): it is
//! `no_std`, so the standard library's WASI layer is never linked, and this crate brings what
//! the standard library would have:
//!
//! - the allocator (`allocator.rs`): a bump allocator as the `#[global_allocator]`, since a
//!   policy's instance lives for one decision, and `cabi_realloc`, the canonical ABI's entry
//!   point to it;
//! - `memcmp` and `bcmp` (`memcmp.rs`), which every comparison of strings and slices ends in;
//! - the panic handler: a panic is a wasm trap, which the host reports as a typed error for
//!   that one decision;
//! - with the `bindings` feature (the default), the wit-bindgen bindings of the contract of
//!   this mend (`wit/policy.wit`), in `bindings`: the `Guest` trait a policy implements, the
//!   contract's types (also as `wit`), and `export!`, which exports a type as the component's
//!   world (these are wasm32 only, so this documentation, built natively, does not show
//!   them);
//! - [`memory_layout`], the stack and initial memory every policy is linked with, applied by
//!   the policy's own build script (a dependency's build script cannot set a component's link
//!   arguments; `memory_layout.rs` says why).
//!
//! Natively the crate holds only [`memory_layout`], for build scripts. It makes no decision.
//!
//! # Writing a policy
//!
//! `Cargo.toml`: the policy is a `cdylib`; this crate is a dependency on wasm32 and a
//! build-dependency everywhere. `mend-default-policy` (the default policy without its
//! `component` feature, so that it exports nothing, and with its `adapter`, the default
//! decisions behind the current contract's bindings) is only needed to delegate to the
//! default decisions.
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [target.'cfg(target_arch = "wasm32")'.dependencies]
//! mend-policy-sdk = { path = "../mend/policy-sdk" }
//! mend-default-policy = { path = "../mend/guest", default-features = false, features = ["adapter"] }
//!
//! [build-dependencies]
//! mend-policy-sdk = { path = "../mend/policy-sdk" }
//! ```
//!
//! `build.rs`:
//!
//! ```ignore
//! fn main() {
//!     mend_policy_sdk::memory_layout::emit_link_args();
//! }
//! ```
//!
//! `src/lib.rs`, a policy that takes every decision of the default policy except that it
//! discards every orphan object instead of adopting it (`policies/cautious` is this policy,
//! keeping the default's own reasons where the default discards too):
//!
//! ```ignore
//! #![cfg_attr(target_arch = "wasm32", no_std)]
//! #![cfg(target_arch = "wasm32")]
//!
//! extern crate alloc;
//!
//! use alloc::vec::Vec;
//!
//! use mend_default_policy::bindings::DefaultPolicy;
//! use mend_policy_sdk::{Guest, wit};
//!
//! struct Cautious;
//!
//! impl Guest for Cautious {
//!     fn describe() -> wit::PolicyDescription {
//!         wit::PolicyDescription {
//!             name: "cautious".into(),
//!             version: env!("CARGO_PKG_VERSION").into(),
//!             ..DefaultPolicy::describe()
//!         }
//!     }
//!
//!     fn plan_reconcile(input: wit::ReconcileInput) -> Vec<wit::ReconcileDecision> {
//!         DefaultPolicy::plan_reconcile(input)
//!             .into_iter()
//!             .map(|decision| wit::ReconcileDecision {
//!                 action: wit::ReconcileAction::Discard("review it first".into()),
//!                 split_id: decision.split_id,
//!             })
//!             .collect()
//!     }
//!
//!     // plan_stage, validate_publishes, decide_recovery and plan_gc the same way: each takes
//!     // the whole batch of one call and returns all its decisions.
//! }
//!
//! mend_policy_sdk::export!(Cautious with_types_in mend_policy_sdk::bindings);
//! ```
//!
//! A policy written from scratch implements the six functions of `Guest` with the types of
//! `wit`; `describe()` reports the ABI of the contract it is built against (`mend:policy@1.5.0`
//! is ABI 1.5) and the semantics revision its decisions follow.
//!
//! Build it with `cargo build --target wasm32-wasip2 --release` (mend's own components use the
//! workspace's `guest` profile: optimised, `panic = "abort"`, stripped), and check it against
//! golden scenarios with `mend policy test target/wasm32-wasip2/release/<name>.wasm
//! SCENARIOS...` before swapping to it.
//!
//! The policy crate must name this crate somewhere (a `use` does), or rustc does not link it
//! and the allocator and the panic handler are missing; a policy that generates its own
//! bindings writes `use mend_policy_sdk as _;`.
//!
//! # Older contracts
//!
//! A policy built against an older `mend:policy` (mend's own `policies/abi-1-1` to
//! `abi-1-4`, which prove that a host still runs them) depends on this crate with
//! `default-features = false`, for the allocator, `memcmp` and the panic handler only, and runs
//! `wit_bindgen::generate!` on that contract's WIT itself. It must be built by a cargo run of
//! its own: built in one run with a policy that has the `bindings` feature, cargo unifies the
//! feature, and the current contract's bindings, linked in with the rest of this crate, make
//! the component claim the current `mend:policy` version beside its own
//! (`policies/build_components.rs` builds every component by a cargo run of its own for this
//! reason).

#![cfg_attr(target_arch = "wasm32", no_std)]

#[cfg(target_arch = "wasm32")]
extern crate alloc;

pub mod memory_layout;

#[cfg(target_arch = "wasm32")]
mod allocator;
#[cfg(all(target_arch = "wasm32", feature = "bindings"))]
pub mod bindings;
#[cfg(target_arch = "wasm32")]
mod memcmp;

#[cfg(all(target_arch = "wasm32", feature = "bindings"))]
pub use bindings::mend::policy::types as wit;
#[cfg(all(target_arch = "wasm32", feature = "bindings"))]
pub use bindings::{Guest, export};
/// The `mend:policy` version these bindings are generated from, for a policy's `describe()`
/// to report (`abi_major`, `abi_minor`) without writing the numbers by hand.
#[cfg(feature = "bindings")]
pub use mend_contract::{ABI_MAJOR, ABI_MINOR};

/// A panic stops the decision with a trap. There is nothing to unwind to and nowhere to print
/// the message: the host reports the trap as a typed error for that one decision and keeps
/// serving with the same policy.
#[cfg(target_arch = "wasm32")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

//! mend's default policy: the pure decisions behind staging and publishing.
//!
//! This crate is the sans-IO core of mend. It is handed observations (the rows the host read,
//! the checkpoint, the current publish token) and returns decisions as plain data; it performs
//! no IO and reads no clock. The host (`host/`) owns storage, time and concurrency, checks every
//! decision against invariants no policy may break, and executes it.
//!
//! The same code builds two ways:
//! - natively, as an ordinary Rust library, so the decisions are unit-tested without wasm and
//!   the host can compare the component against them (differential tests, benchmarks);
//! - for `wasm32-wasip2`, as the policy component. There it is `no_std`: nothing from the
//!   standard library's WASI layer is linked, so the component imports nothing at all.
//!   `bindings` (the `adapter` feature), which only converts types, is the only wasm-specific
//!   file; the contract's generated bindings, the allocator and the panic handler are
//!   mend-policy-sdk's, as in every Rust policy. With `adapter` but without `component` the
//!   adapter is built but nothing is exported, so that another component can wrap the default
//!   policy's decisions and export its own `describe()`; without either, the crate is the
//!   decisions alone.
//!
//! The data it decides on and the decisions it returns are the contract's (`mend-contract`,
//! the types of `wit/policy.wit`), which the host and every other policy share.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

pub mod gc;
pub mod publish;
pub mod reconcile;
pub mod recovery;
pub mod stage;

#[cfg(all(target_arch = "wasm32", feature = "adapter"))]
pub mod bindings;

pub use gc::plan_gc;
pub use publish::validate_publish;
pub use reconcile::plan_reconcile;
pub use recovery::decide_recovery;
pub use stage::plan_stage;

use mend_contract::{ABI_MAJOR, ABI_MINOR, PolicyDescription, capability};

/// The revision of the decision semantics. Bump it whenever the same inputs could produce
/// different decisions, so that a host never runs new semantics believing they are old ones.
pub const SEMANTICS_REVISION: u32 = 1;

/// The default policy's description, as `describe()` reports it.
pub fn describe() -> PolicyDescription {
    PolicyDescription {
        name: "mend-default".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        abi_major: ABI_MAJOR,
        abi_minor: ABI_MINOR,
        semantics_revision: SEMANTICS_REVISION,
        required_capabilities: [
            capability::STAGE_UPSERT,
            capability::STAGE_CREATE_ONLY,
            capability::PUBLISH_CHECKPOINT,
            capability::PUBLISH_TOKEN,
            capability::STAGE_STANDARD_PLANS,
        ]
        .iter()
        .map(|name| (*name).into())
        .collect(),
    }
}

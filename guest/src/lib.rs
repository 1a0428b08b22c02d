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
//!   `bindings`, which only converts types, is the only wasm-specific file; the contract's
//!   generated bindings, the allocator and the panic handler are mend-policy-sdk's, as in every
//!   Rust policy. Without the `component` feature the adapter is still built but nothing is
//!   exported, so that another component can wrap the default policy's decisions and export its
//!   own `describe()`.
//!
//! Natively, the `serde` feature makes the boundary types (de)serialisable for the host's
//! records and answers, and `openapi` derives their `utoipa::ToSchema` for the HTTP server's
//! OpenAPI document. Neither is for the component.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

pub mod gc;
pub mod publish;
pub mod reconcile;
pub mod recovery;
pub mod stage;
pub mod types;

#[cfg(target_arch = "wasm32")]
pub mod bindings;

pub use gc::plan_gc;
pub use publish::validate_publish;
pub use reconcile::plan_reconcile;
pub use recovery::decide_recovery;
pub use stage::plan_stage;
pub use types::*;

/// The ABI this crate implements: the major and minor of the `mend:policy` WIT package.
/// 1.1 added `decide-recovery`; 1.2 added `plan-reconcile` and the mark and config
/// observations of an intent; 1.3 added `plan-gc`, the `abandoned` phase, the `abandon`
/// decision and the `checkpoint-reached-to` observation.
pub const ABI_MAJOR: u32 = 1;
pub const ABI_MINOR: u32 = 3;

/// The revision of the decision semantics. Bump it whenever the same inputs could produce
/// different decisions, so that a host never runs new semantics believing they are old ones.
pub const SEMANTICS_REVISION: u32 = 1;

/// Capability names shared by the host and policies.
pub mod capability {
    pub const STAGE_UPSERT: &str = "stage.upsert";
    pub const STAGE_CREATE_ONLY: &str = "stage.create-only";
    pub const PUBLISH_CHECKPOINT: &str = "publish.checkpoint";
    pub const PUBLISH_TOKEN: &str = "publish.token";
    /// Publishes refuse a writer whose fencing epoch exclusive recovery has moved past.
    pub const PUBLISH_FENCING_EPOCH: &str = "publish.fencing-epoch";
}

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
        ]
        .iter()
        .map(|name| (*name).into())
        .collect(),
    }
}

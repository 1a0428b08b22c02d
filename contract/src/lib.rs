//! The contract between mend's host and its policies: the plain data that crosses the policy
//! boundary, mirroring `wit/policy.wit`, and the contract's version.
//!
//! One place differs on purpose: a stage plan's input and answers are here in the form its
//! decisions are written, tested and stored in golden scenarios (ids as strings, rows and
//! decisions naming their ids), while the WIT carries them as integers (ABI 1.5: the request's
//! entries grouped by id and each group's row, the decisions by index; 1.4 packed the ids in
//! one buffer, [`PackedSplitIds`], which a host still does for a 1.4 policy). The bindings on
//! each side convert.
//!
//! The host (`host/`) and every Rust policy (the default one in `guest/`, the test policies in
//! `policies/`) use these same types on their side of the boundary, so a decision made natively
//! and one made by a component compare with `==`. Inside a component the types are converted
//! from and to the WIT bindings (`mend-policy-sdk`); nothing here knows about wasm.
//!
//! The crate is `no_std` on `wasm32`, so a component links nothing of the standard library's
//! WASI layer. Natively, the `serde` feature makes the types (de)serialisable for the host's
//! records and answers, and `openapi` derives their `utoipa::ToSchema` for the HTTP server's
//! OpenAPI document. Neither is for a component.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

mod grouped;
mod packed;
mod types;

pub use grouped::{GroupedRequest, row_code, row_code_of, row_of_code};
pub use packed::{BatchTooLarge, MalformedBatch, PackedSplitIds, unpack};
pub use types::*;

/// The version of the contract: the major and minor of the `mend:policy` WIT package these
/// types mirror. 1.1 added `decide-recovery`; 1.2 added `plan-reconcile` and the mark and
/// config observations of an intent; 1.3 added `plan-gc`, the `abandoned` phase, the
/// `abandon` decision and the `checkpoint-reached-to` observation; 1.4 made the stage plan's
/// ids one packed buffer and its answers indices, `validate-publishes` one call for a batch,
/// and added the `stage.standard-plans` capability; 1.5 asks a stage plan on the request's
/// entries grouped by id, with no id (the host sorts them).
pub const ABI_MAJOR: u32 = 1;
pub const ABI_MINOR: u32 = 5;

/// Capability names shared by the host and policies.
pub mod capability {
    pub const STAGE_UPSERT: &str = "stage.upsert";
    pub const STAGE_CREATE_ONLY: &str = "stage.create-only";
    pub const PUBLISH_CHECKPOINT: &str = "publish.checkpoint";
    pub const PUBLISH_TOKEN: &str = "publish.token";
    /// Publishes refuse a writer whose fencing epoch exclusive recovery has moved past.
    pub const PUBLISH_FENCING_EPOCH: &str = "publish.fencing-epoch";
    /// Declared by a policy whose stage plans are each mode's standard plan (ABI 1.4): the
    /// host stages without asking it, and a host that does not know it refuses the policy.
    pub const STAGE_STANDARD_PLANS: &str = "stage.standard-plans";
}

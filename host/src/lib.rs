//! mend: the recovery engine that keeps a catalog of immutable data objects ("splits")
//! consistent with the object storage that holds them.
//!
//! The host observes and executes; the policy component decides:
//!
//! - [`runtime`] loads the policy component (wasmtime) and calls it, one fresh sandbox per
//!   decision, with memory, fuel and output limits;
//! - [`catalog`] is the storage trait and its backends (Postgres, object storage);
//! - [`engine`] is the one driver: it validates requests, observes the catalog, asks the
//!   policy, checks the answer against [`invariants`] and has the backend execute it;
//! - [`model`] and [`error`] are the data and the typed errors everything shares.
//!
//! Features: `postgres` (the Postgres catalog), `s3` (`s3://` catalogs and objects), and
//! `openapi`, which derives `utoipa::ToSchema` for the requests, results and reports the HTTP
//! server (`mend-server`) answers, so that its OpenAPI document is generated from these very
//! types; an embedder without the server leaves it off and compiles no utoipa.

#![warn(missing_docs)]

pub mod ambient;
pub mod audit;
mod background;
pub mod bounds;
pub mod catalog;
pub mod clock;
pub mod compact;
pub mod deliberate_bugs;
pub mod engine;
pub mod error;
pub mod faults;
pub mod fleet;
#[doc(hidden)]
pub mod fuzzing;
pub mod gates;
#[cfg(test)]
mod hooked_store;
pub mod intent;
pub mod invariants;
pub mod live;
pub mod model;
pub mod objects;
pub mod progress;
pub mod runtime;
pub mod scenarios;
pub mod validate;

pub use catalog::{Capabilities, Catalog};
pub use engine::{Engine, EngineOptions};
pub use error::{EntityKind, MendError, OperationFound, PolicyError, Result};
/// How a recovery sweep may act: `Probe` and `Verify` read only, `RollForward` finishes what
/// can be finished, `Exclusive` may undo (see [`Engine::recover`]).
pub use mend_contract::RecoveryMode;

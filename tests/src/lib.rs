//! Shared pieces of mend's integration tests: a harness that builds an engine on each backend,
//! a counting object store (the conformance kit's) and a counting Postgres proxy, a store that
//! makes two processes meet at a chosen request, and mend's backends under the conformance kit
//! (`mend-testkit`, whose cases `tests/conformance.rs` runs on each).
//!
//! Postgres is always a real server. Tests read `MEND_TEST_DATABASE_URL`; the README's test
//! command (`scripts/test`) starts a throwaway server and sets it. A test that needs Postgres
//! and does not find it fails with instructions; it never skips.

pub mod conformance;
pub mod crash;
pub mod draw;
pub mod harness;
pub mod js_policies;
pub mod latency_store;
pub mod rendezvous;
pub mod sql_counter;

pub use harness::{Backend, Harness};
pub use mend_testkit::{CountingStore, RequestCounts};

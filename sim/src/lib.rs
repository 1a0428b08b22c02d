//! mend's deterministic simulator: the whole engine (the object-store catalog over a simulated
//! in-memory store, the real default and cautious policy components in wasmtime, object-store
//! gates, the operation protocol, in-process commits, replicas' fleet memberships and
//! supervisors following the policy registry) on one thread, where one
//! `u64` seed decides every interleaving, clock read, id, latency and fault.
//!
//! - [`schedule`] builds a run and its actors, and runs it;
//! - [`store`] is the simulated object store: faults before and after a request's effect,
//!   latency, simulated timestamps, a whole replica paused;
//! - [`time`] is simulated time: the paused clock of a current-thread tokio runtime, and the
//!   engine's ambient inputs ([`mend::ambient`]) drawn from the seed;
//! - `operator` holds the actors beside the writers and supervisors: the operator (gc,
//!   reconcile, verify, config applies, exclusive recovery) and the readers (read-only live
//!   handles); `policy` the operator's policy swaps and rollbacks, and the replicas following
//!   the registry; `fleet` the replicas' membership leases, the owner-only sweeping rule of
//!   `mend serve`, and the pauser;
//! - [`check`] holds every answer of a run against what storage says at its end, and
//!   [`linearize`] the acknowledged history against a sequential model of the catalog;
//! - [`shrink`] finds a smaller schedule that still fails;
//! - [`stress`] runs the same workloads and checks against a real Postgres catalog, in real
//!   time and without determinism: a stress mode, not a simulation.
//!
//! docs/src/testing.md says why tokio's paused clock rather than madsim or
//! turmoil, and what is not simulated.

pub mod check;
mod client;
mod committer;
pub mod faults;
mod fleet;
pub mod linearize;
mod operator;
mod policy;
mod reader;
mod replica;
pub mod rng;
pub mod schedule;
pub mod shrink;
mod stager;
pub mod store;
pub mod stress;
mod supervisor;
pub mod time;
pub mod trace;
mod writer;

pub use schedule::{Config, RunReport, run};

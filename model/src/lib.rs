//! mend's operation protocol as a model, checked exhaustively with [stateright].
//!
//! Two writers drive one operation each (begin, upload, heartbeat, publish, abort, as
//! `mend::engine::operations` does for writers in other processes); two fleet replicas hold
//! membership leases, and the one that owns the dataset runs roll-forward sweeps under the
//! dataset gate (abandoning unconfirmed operations whose lease ran out, rolling confirmed or
//! complete ones forward, the outcome `Overtaken` when a writer got there first); an operator
//! runs exclusive recovery once (every gate, the fencing epoch bumped, roll-backs, each fenced
//! first on the phase the sweep observed, and overtaken when the operation moved since). The
//! gate has a lease: a holder that stalls past it is taken over, and its next write is
//! refused.
//!
//! **Granularity.** One model action is one atomic catalog step (one conditional write, with
//! the reads of the same engine step just before it), or one client step between two of them,
//! so the interleavings are those the engine allows at catalog-write granularity. `begin`,
//! `upload` and `heartbeat` are one action each; a publish is three (its reads, the confirm,
//! the publish, which deletes the intent in the same step); an abort three (its reads, the
//! fence, the unstaging); a sweep one per batch it settles or operation it rolls back (the
//! roll-back's fence, with the unconditional writes that follow it), after the one that takes
//! the gate, observes and decides. [`table`] names the engine function of each action.
//!
//! **State space.** Time is a small integer clock (writers act up to [`Config::clock_max`];
//! afterwards the clock runs on only as far as the longest lease); every action moves a
//! measure that only grows, so the whole reachable state space is finite and acyclic, and the
//! checker explores all of it: every path ends.
//!
//! **What is not modelled**: merges, gc, config applies and reconciles (other intent kinds);
//! crashes inside `begin` between its intent and its rows; replica views of the fleet older
//! than the catalog's (each replica sees the current members); two operations whose
//! checkpoint deltas start at the same positions (each writer moves its own partition), so a
//! confirmed operation overtaken by another's publish, which the engine then ends, never
//! arises.
//!
//! [stateright]: https://docs.rs/stateright

pub mod paths;
pub mod properties;
pub mod protocol;
pub mod state;
pub mod table;

pub use protocol::{Action, Bug, Config, Protocol};
pub use state::State;

/// One model time unit in the engine's clock, for the replay.
pub const TIME_UNIT_MS: i64 = 1_000;

//! Simulated time. The run's tokio runtime has its clock paused: it moves only when every task
//! waits on a timer, straight to the next one, so a run of simulated minutes takes
//! milliseconds and the moment each task wakes is decided by the schedule alone.
//!
//! Every clock the engine reads is this one: each replica's [`Clock`] (shifted by that
//! replica's skew), and, through the [`Ambient`] the run installs, the wall clock of code that
//! has no `Clock` (the object-store catalog's ages) and every id the engine draws.

use std::sync::{Arc, Mutex, PoisonError};

use mend::ambient::Ambient;
use mend::clock::Clock;
use tokio::time::Instant;

use crate::rng::SimRng;

/// Where simulated time starts, in ms since the Unix epoch (2026-12-01T00:00:00Z): a fixed
/// moment, so that a run's ids and timestamps replay bit for bit.
pub const EPOCH_MS: i64 = 1_796_083_200_000;

/// The simulation's time: where it starts ([`EPOCH_MS`] in a simulation) plus what the tokio
/// clock has advanced since the run started.
#[derive(Debug, Clone, Copy)]
pub struct SimTime {
    started: Instant,
    epoch_ms: i64,
}

impl SimTime {
    /// Starts counting now (on the run's runtime), from [`EPOCH_MS`].
    pub fn start() -> Self {
        Self::start_at(EPOCH_MS)
    }

    /// Starts counting now, from `epoch_ms`: a stress run, in real time, starts at the wall
    /// clock, so that the store's stamps and the engine's clock agree.
    pub fn start_at(epoch_ms: i64) -> Self {
        Self {
            epoch_ms,
            started: Instant::now(),
        }
    }

    /// Simulated ms since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        self.epoch_ms + i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// Simulated ms since the run started.
    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// A replica's clock: simulated time, off by its skew.
#[derive(Debug)]
pub struct SkewedClock {
    pub time: SimTime,
    pub skew_ms: i64,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> i64 {
        self.time.now_ms() + self.skew_ms
    }
}

/// The run's ambient inputs: ids and jitter from the seed, the wall clock from simulated time.
#[derive(Debug)]
pub struct SimAmbient {
    pub time: SimTime,
    pub rng: Mutex<SimRng>,
}

impl SimAmbient {
    /// The ambient source of a run of `seed`.
    pub fn new(seed: u64, time: SimTime) -> Arc<Self> {
        Arc::new(Self {
            time,
            rng: Mutex::new(SimRng::fork(seed, "ambient")),
        })
    }
}

impl Ambient for SimAmbient {
    fn next_u64(&self) -> u64 {
        self.rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next_u64()
    }

    fn wall_clock_ms(&self) -> i64 {
        self.time.now_ms()
    }
}

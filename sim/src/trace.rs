//! A run's trace: one line per step of an actor and per store request, stamped with simulated
//! time. Its digest is what "the same seed replays bit for bit" is checked against; its lines
//! are what a failure prints.

use std::sync::{Arc, Mutex, PoisonError};

use crate::time::SimTime;

/// The shared trace of one run.
#[derive(Debug, Clone)]
pub struct Trace {
    inner: Arc<Mutex<Lines>>,
    time: SimTime,
}

#[derive(Debug)]
struct Lines {
    /// FNV-1a over every line so far.
    digest: u64,
    count: u64,
    /// The lines themselves, when kept (a replay, a failure); a fast run keeps only the digest.
    kept: Option<Vec<String>>,
}

impl Trace {
    /// An empty trace; `keep` keeps its lines.
    pub fn new(time: SimTime, keep: bool) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Lines {
                digest: 0xcbf2_9ce4_8422_2325,
                count: 0,
                kept: keep.then(Vec::new),
            })),
            time,
        }
    }

    /// Records `line` at the current simulated time.
    pub fn line(&self, line: String) {
        let stamped = format!("{:>8} ms  {line}", self.time.elapsed_ms());
        let mut lines = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        for byte in stamped.bytes().chain(std::iter::once(b'\n')) {
            lines.digest = (lines.digest ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        lines.count += 1;
        if let Some(kept) = lines.kept.as_mut() {
            kept.push(stamped);
        }
    }

    /// Simulated ms since the run started: when an answer was given or a request sent, for
    /// the linearizability check.
    pub fn now_ms(&self) -> u64 {
        self.time.elapsed_ms()
    }

    /// The digest of every line so far, and how many there were.
    pub fn digest(&self) -> (u64, u64) {
        let lines = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        (lines.digest, lines.count)
    }

    /// The kept lines (empty when they were not kept).
    pub fn lines(&self) -> Vec<String> {
        let lines = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        lines.kept.clone().unwrap_or_default()
    }
}

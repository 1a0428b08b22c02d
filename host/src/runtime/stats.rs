//! What the policy's calls cost this process: how many ran, how long each took in its
//! sandbox, and how many failed (a trap, the deadline, a sandbox limit, an answer that broke
//! the contract, or no sandbox free in time). Counted for every call of every policy the
//! process runs, from the moment it starts; a server exports them as
//! `mend_policy_decision_seconds` and `mend_policy_failures_total`.
//!
//! Kept in atomics, not in a metrics crate: the library pulls no exporter, and a call costs
//! two or three relaxed adds (the calls are counted by their buckets).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the decision-time buckets: from well under a millisecond (a
/// small decision in a pooled sandbox) to the longest deadline a call may have.
pub const DECISION_SECONDS_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// The policy calls of this process so far.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionStats {
    /// Calls made, failed ones included.
    pub calls: u64,
    /// Calls that failed.
    pub failures: u64,
    /// Their time together, in seconds.
    pub seconds: f64,
    /// Per bucket of [`DECISION_SECONDS_BUCKETS`] (then `+Inf`), the calls that took at most
    /// its bound: cumulative, as Prometheus reads a histogram.
    pub buckets: Vec<(f64, u64)>,
}

struct Counters {
    failures: AtomicU64,
    nanos: AtomicU64,
    /// Calls per bucket (not cumulative); the last one is `+Inf`.
    buckets: [AtomicU64; DECISION_SECONDS_BUCKETS.len() + 1],
}

static COUNTERS: Counters = Counters {
    failures: AtomicU64::new(0),
    nanos: AtomicU64::new(0),
    buckets: [const { AtomicU64::new(0) }; DECISION_SECONDS_BUCKETS.len() + 1],
};

/// Counts one call that took `took` and failed or not.
pub(crate) fn record(took: Duration, failed: bool) {
    let seconds = took.as_secs_f64();
    let bucket = DECISION_SECONDS_BUCKETS
        .iter()
        .position(|bound| seconds <= *bound)
        .unwrap_or(DECISION_SECONDS_BUCKETS.len());
    COUNTERS.buckets[bucket].fetch_add(1, Ordering::Relaxed);
    let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
    COUNTERS.nanos.fetch_add(nanos, Ordering::Relaxed);
    if failed {
        COUNTERS.failures.fetch_add(1, Ordering::Relaxed);
    }
}

/// The policy calls of this process so far. Read while calls run, the numbers may be a call
/// apart from one another; each only grows.
pub fn decision_stats() -> DecisionStats {
    let mut cumulative = 0;
    let mut buckets = Vec::with_capacity(DECISION_SECONDS_BUCKETS.len() + 1);
    for (index, count) in COUNTERS.buckets.iter().enumerate() {
        cumulative += count.load(Ordering::Relaxed);
        let bound = DECISION_SECONDS_BUCKETS
            .get(index)
            .copied()
            .unwrap_or(f64::INFINITY);
        buckets.push((bound, cumulative));
    }
    DecisionStats {
        // The `+Inf` bucket is the count the buckets saw, so the histogram stays whole.
        calls: cumulative,
        failures: COUNTERS.failures.load(Ordering::Relaxed),
        seconds: COUNTERS.nanos.load(Ordering::Relaxed) as f64 / 1e9,
        buckets,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_land_in_their_buckets_and_failures_are_counted() {
        let before = decision_stats();
        record(Duration::from_micros(200), false);
        record(Duration::from_millis(30), true);
        record(Duration::from_secs(9), false);
        let after = decision_stats();
        // Other tests of this process call policies too: compare at least what was added.
        assert!(after.calls >= before.calls + 3);
        assert!(after.failures > before.failures);
        assert!(after.seconds >= before.seconds + 9.03);
        let grew = |bound: f64| {
            let at = |stats: &DecisionStats| {
                stats
                    .buckets
                    .iter()
                    .find(|(b, _)| *b == bound)
                    .map(|(_, count)| *count)
                    .unwrap()
            };
            at(&after) - at(&before)
        };
        assert!(grew(0.0005) >= 1, "200 µs is in the first bucket");
        assert!(
            grew(0.05) >= 2,
            "30 ms is at most 50 ms, cumulatively with the first"
        );
        assert!(grew(f64::INFINITY) >= 3, "9 s is only in +Inf");
        let counts: Vec<u64> = after.buckets.iter().map(|(_, count)| *count).collect();
        assert!(
            counts.windows(2).all(|pair| pair[0] <= pair[1]),
            "cumulative"
        );
        assert_eq!(after.buckets.last().unwrap().1, after.calls);
        println!("stats: 3 calls counted in {} buckets", after.buckets.len());
    }
}

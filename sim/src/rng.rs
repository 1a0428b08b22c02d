//! The simulation's one source of choices: splitmix64, seeded from the run's seed. Each part
//! of a run (the store's faults, the engine's ambient ids, each actor) draws from a stream of
//! its own, forked from the seed by a label, so that changing what one actor draws does not
//! shift every other choice of the run.

/// A seeded splitmix64 stream.
#[derive(Debug, Clone)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A stream of its own for the part of the run named `label`.
    pub fn fork(seed: u64, label: &str) -> Self {
        // FNV-1a of the label, mixed with the seed: distinct labels, distinct streams.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in label.bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        let mut stream = Self::new(seed ^ hash);
        stream.next_u64();
        stream
    }

    /// 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (0 when `bound` is 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64().checked_rem(bound).unwrap_or(0)
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high.saturating_sub(low) + 1)
    }

    /// True `percent` times in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_stream_and_labels_give_distinct_ones() {
        let (mut a, mut b) = (SimRng::fork(7, "store"), SimRng::fork(7, "store"));
        let drawn: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        assert_eq!(drawn, (0..4).map(|_| b.next_u64()).collect::<Vec<_>>());
        let mut other = SimRng::fork(7, "writer-0");
        assert_ne!(drawn[0], other.next_u64());
        let mut bounded = SimRng::new(1);
        assert!(
            (0..1_000)
                .map(|_| bounded.between(3, 5))
                .all(|n| (3..=5).contains(&n))
        );
    }
}

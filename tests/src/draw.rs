//! A small deterministic generator for workloads that must be the same in every run.

/// xorshift64*, seeded by its one field (any value but 0).
#[derive(Debug)]
pub struct Draw(pub u64);

impl Draw {
    /// The next number below `bound` (which must not be 0).
    pub fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % bound
    }
}

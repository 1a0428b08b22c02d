//! `cargo bench -p mend-sim --bench throughput`: how many seeded schedules of the standard
//! config one core runs per second, with the operations in each, against the floor of
//! 1,000,000 schedules of at least 50 operations per hour on this 2-core machine (139 per
//! second per core). Under `cargo test --benches` it runs a handful of schedules once.

use std::time::Instant;

use mend_sim::{Config, run};

fn main() {
    let quick = std::env::args()
        .any(|arg| arg == "--bench")
        .then_some(())
        .is_none();
    let config = Config::standard();
    let schedules: u64 = if quick { 3 } else { 300 };
    // The policy component is compiled once per process: not part of a schedule's cost.
    let warm = run(u64::MAX, &config);
    assert!(
        warm.passed(),
        "the warm-up schedule failed: {:?}",
        warm.violations
    );
    let started = Instant::now();
    let (mut operations, mut requests, mut simulated_ms) = (0u64, 0u64, 0u64);
    for seed in 0..schedules {
        let report = run(seed, &config);
        assert!(
            report.passed(),
            "seed {seed} failed: {:?}",
            report.violations
        );
        operations += report.operations as u64 + report.sweeps as u64;
        requests += report.requests;
        simulated_ms += report.simulated_ms;
    }
    let seconds = started.elapsed().as_secs_f64();
    let per_second = schedules as f64 / seconds;
    println!(
        "throughput: {schedules} schedules in {seconds:.2} s on one core: {per_second:.1} schedules/s, \
         {:.1} operations per schedule (writers' and sweeps), {:.0} store requests per schedule, \
         {:.0} simulated s per schedule",
        operations as f64 / schedules as f64,
        requests as f64 / schedules as f64,
        simulated_ms as f64 / schedules as f64 / 1000.0
    );
    println!(
        "throughput: on 2 cores (one process each) {:.0} schedules/hour; the floor is 1,000,000: ratio {:.2}",
        per_second * 2.0 * 3600.0,
        per_second * 2.0 * 3600.0 / 1_000_000.0
    );
}

//! `cargo bench -p mend-sim --bench throughput`: how many seeded schedules of the standard
//! config this machine runs per second, on one thread and on one thread per core (as
//! `mend-sim` runs them), with the operations in each, against the floor of 1,000,000
//! schedules of at least 50 operations per hour on this 2-core machine (278 per second).
//! Under `cargo test --benches` it runs a handful of schedules once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use mend_sim::{Config, run};

// The allocator `mend-sim` runs with (see sim/Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The floor: schedules per hour.
const FLOOR_PER_HOUR: f64 = 1_000_000.0;

/// What a batch of schedules took.
struct Measured {
    schedules: u64,
    seconds: f64,
    operations: u64,
    requests: u64,
    simulated_ms: u64,
}

impl Measured {
    fn per_second(&self) -> f64 {
        self.schedules as f64 / self.seconds
    }
}

/// Runs seeds `first..first + schedules` on `threads` threads, each taking the next seed.
fn measure(config: &Config, first: u64, schedules: u64, threads: usize) -> Measured {
    let next = AtomicU64::new(first);
    let (operations, requests, simulated_ms) =
        (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::SeqCst);
                    if seed >= first + schedules {
                        return;
                    }
                    let report = run(seed, config);
                    assert!(
                        report.passed(),
                        "seed {seed} failed: {:?}",
                        report.violations
                    );
                    operations.fetch_add(
                        report.operations as u64 + report.sweeps as u64,
                        Ordering::SeqCst,
                    );
                    requests.fetch_add(report.requests, Ordering::SeqCst);
                    simulated_ms.fetch_add(report.simulated_ms, Ordering::SeqCst);
                }
            });
        }
    });
    Measured {
        schedules,
        seconds: started.elapsed().as_secs_f64(),
        operations: operations.into_inner(),
        requests: requests.into_inner(),
        simulated_ms: simulated_ms.into_inner(),
    }
}

fn main() {
    let quick = std::env::args()
        .any(|arg| arg == "--bench")
        .then_some(())
        .is_none();
    let config = Config::standard();
    let schedules: u64 = if quick { 3 } else { 400 };
    let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
    // The policy components are compiled once per process: not part of a schedule's cost.
    let warm = run(u64::MAX, &config);
    assert!(
        warm.passed(),
        "the warm-up schedule failed: {:?}",
        warm.violations
    );
    // The same seeds both ways: the baseline is one thread, in the same run.
    let one = measure(&config, 0, schedules, 1);
    let all = measure(&config, 0, schedules, cores);
    println!(
        "throughput: {} schedules, {:.1} operations per schedule (writers' and sweeps), {:.0} \
         store requests and {:.0} simulated s per schedule",
        one.schedules,
        one.operations as f64 / one.schedules as f64,
        one.requests as f64 / one.schedules as f64,
        one.simulated_ms as f64 / one.schedules as f64 / 1000.0
    );
    println!(
        "throughput: one thread {:.1} schedules/s ({:.2} s); {cores} threads {:.1} schedules/s \
         ({:.2} s), {:.2}x one thread",
        one.per_second(),
        one.seconds,
        all.per_second(),
        all.seconds,
        all.per_second() / one.per_second()
    );
    println!(
        "throughput: {:.0} schedules/hour on {cores} threads; the floor is 1,000,000: ratio {:.2}",
        all.per_second() * 3600.0,
        all.per_second() * 3600.0 / FLOOR_PER_HOUR
    );
}

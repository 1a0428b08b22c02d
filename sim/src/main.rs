//! `mend-sim`: runs seeded schedules of the whole engine and stops at the first that fails,
//! printing its seed, the command that replays it bit for bit, and a shrunk schedule's trace.
//!
//! ```text
//! cargo run --release -p mend-sim -- --seed 42 --trace     # one schedule, its trace printed
//! cargo run --release -p mend-sim -- --seed 42 --trace --payloads   # and each log version's text
//! cargo run --release -p mend-sim -- --first 0 --count 1000
//! cargo run --release -p mend-sim -- --soak-seconds 3600   # fresh seeds for an hour
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use mend_sim::rng::SimRng;
use mend_sim::shrink::shrink;
use mend_sim::{Config, RunReport, run};

#[derive(Debug, Parser)]
#[command(about = "Runs seeded simulations of the mend engine")]
struct Args {
    /// Runs this one seed (with --trace, prints its whole trace).
    #[arg(long, conflicts_with_all = ["first", "soak_seconds"])]
    seed: Option<u64>,
    /// The first of a range of seeds.
    #[arg(long)]
    first: Option<u64>,
    /// How many seeds to run from --first (or fresh ones, without it).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    count: u64,
    /// Runs fresh seeds for this long instead of a count.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    soak_seconds: Option<u64>,
    /// Prints the trace of the run (with --seed).
    #[arg(long)]
    trace: bool,
    /// With --trace, also the text of every catalog log version the run puts.
    #[arg(long, requires = "trace")]
    payloads: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = Config::standard();
    if let Some(seed) = args.seed {
        let report = run(
            seed,
            &Config {
                keep_trace: args.trace,
                trace_log_payloads: args.payloads,
                ..config.clone()
            },
        );
        for line in &report.trace {
            println!("{line}");
        }
        println!("{report}");
        return if report.passed() {
            ExitCode::SUCCESS
        } else {
            fail(&report, &config)
        };
    }
    let fresh_base = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64);
    let mut fresh = SimRng::new(fresh_base);
    if args.first.is_none() {
        println!("mend-sim: fresh seeds drawn from base {fresh_base}");
    }
    let deadline = args
        .soak_seconds
        .map(|seconds| Instant::now() + Duration::from_secs(seconds));
    let started = Instant::now();
    let (mut runs, mut operations, mut claims) = (0u64, 0u64, 0u64);
    loop {
        let done = match deadline {
            Some(deadline) => Instant::now() >= deadline,
            None => runs >= args.count,
        };
        if done {
            break;
        }
        let seed = match args.first {
            Some(first) => first + runs,
            None => fresh.next_u64(),
        };
        let report = run(seed, &config);
        runs += 1;
        operations += report.operations as u64;
        claims += report.claims_checked as u64;
        if !report.passed() {
            println!("{report}");
            return fail(&report, &config);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "mend-sim: {runs} schedules passed ({operations} operations, {claims} answers checked) in {seconds:.1} s: {:.0} schedules/s",
        runs as f64 / seconds.max(1e-9)
    );
    ExitCode::SUCCESS
}

fn fail(report: &RunReport, config: &Config) -> ExitCode {
    for violation in &report.violations {
        println!("  violation: {violation}");
    }
    println!("replay: {}", report.replay_command());
    let (smallest, shrunk) = shrink(report.seed, config);
    println!("shrunk to {smallest:?}; its trace:");
    for line in &shrunk.trace {
        println!("  {line}");
    }
    ExitCode::FAILURE
}

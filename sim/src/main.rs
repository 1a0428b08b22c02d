//! `mend-sim`: runs seeded schedules of the whole engine and stops at the first that fails,
//! printing its seed, the command that replays it bit for bit, and a shrunk schedule's trace.
//! With `--postgres URL`, runs the same schedules as a stress test against a real Postgres
//! catalog ([`mend_sim::stress`]): in real time, not replayable, stopping at the first that
//! fails with its seed, its violations and the database it kept.
//!
//! ```text
//! cargo run --release -p mend-sim -- --seed 42 --trace     # one schedule, its trace printed
//! cargo run --release -p mend-sim -- --seed 42 --trace --payloads   # and each log version's text
//! cargo run --release -p mend-sim -- --first 0 --count 1000            # on every core
//! cargo run --release -p mend-sim -- --first 0 --count 1000 --jobs 1   # on one
//! cargo run --release -p mend-sim -- --soak-seconds 3600   # fresh seeds for an hour
//! cargo run --release -p mend-sim -- --postgres postgres://postgres@127.0.0.1:5432/postgres --first 0 --count 3
//! ```

use std::process::ExitCode;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use mend::catalog::PostgresOptions;
use mend_sim::rng::SimRng;
use mend_sim::shrink::shrink;
use mend_sim::{Config, RunReport, run, stress};

#[derive(Debug, Parser)]
#[command(about = "Runs seeded simulations of the mend engine")]
struct Args {
    /// Runs this one seed (with --trace, prints its whole trace).
    #[arg(long, conflicts_with_all = ["first", "soak_seconds"])]
    seed: Option<u64>,
    /// The first of a range of seeds.
    #[arg(long)]
    first: Option<u64>,
    /// How many seeds to run from --first (or fresh ones, without it): 100 by default, 1 with
    /// --postgres.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    count: Option<u64>,
    /// Runs fresh seeds for this long instead of a count.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    soak_seconds: Option<u64>,
    /// Threads running schedules at once (each schedule stays on one thread and is as
    /// deterministic as alone): the machine's cores by default.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256), conflicts_with_all = ["seed", "postgres"])]
    jobs: Option<u64>,
    /// Prints the trace of the run (with --seed).
    #[arg(long)]
    trace: bool,
    /// Protocol writers that begin without an operation id (1 in the standard schedule).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=3))]
    unkeyed_writers: u64,
    /// With --trace, also the text of every catalog log version the run puts.
    #[arg(long, requires = "trace")]
    payloads: bool,
    /// Runs stress schedules against the Postgres server at this URL instead of simulations:
    /// real time, a database of its own per schedule (the user must be allowed to create
    /// databases), no faults injected into the catalog, no bit-for-bit replay. A throwaway
    /// server without fsync needs MEND_POSTGRES_ACCEPT_UNSAFE_DURABILITY=true.
    #[arg(long, value_name = "URL", conflicts_with_all = ["payloads"])]
    postgres: Option<String>,
    /// Enables one of the engine's deliberate bugs (by its name, as `Bug`'s Debug prints it)
    /// in every schedule: the simulator should find it. Needs a build with the
    /// `deliberate-bugs` feature.
    #[cfg(feature = "deliberate-bugs")]
    #[arg(long, value_name = "NAME")]
    bug: Option<String>,
}

/// The deliberate bug `--bug` names, if any.
#[cfg(feature = "deliberate-bugs")]
fn chosen_bug(args: &Args) -> Option<mend::deliberate_bugs::Bug> {
    let name = args.bug.as_deref()?;
    let bug = mend::deliberate_bugs::Bug::ALL
        .into_iter()
        .find(|bug| format!("{bug:?}") == name);
    if bug.is_none() {
        eprintln!(
            "mend-sim: no deliberate bug is named {name}; the bugs are {:?}",
            mend::deliberate_bugs::Bug::ALL
        );
        std::process::exit(2);
    }
    bug
}

/// Runs one schedule, with `--bug`'s bug enabled on this thread when it names one.
fn run_one(seed: u64, config: &Config, args: &Args) -> RunReport {
    #[cfg(feature = "deliberate-bugs")]
    let _enabled = chosen_bug(args).map(mend::deliberate_bugs::enable);
    #[cfg(not(feature = "deliberate-bugs"))]
    let _ = args;
    run(seed, config)
}

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    let config = Config {
        unkeyed_writers: args.unkeyed_writers as usize,
        ..Config::standard()
    };
    if let Some(url) = &args.postgres {
        return stress_schedules(url, &args, &config);
    }
    if let Some(seed) = args.seed {
        let report = run_one(
            seed,
            &Config {
                keep_trace: args.trace,
                trace_log_payloads: args.payloads,
                ..config.clone()
            },
            &args,
        );
        for line in &report.trace {
            println!("{line}");
        }
        println!("{report}");
        return if report.passed() {
            ExitCode::SUCCESS
        } else {
            fail(&report, &config, &args)
        };
    }
    let jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, |cores| cores.get()),
        |jobs| jobs as usize,
    );
    let seeds = Mutex::new(Seeds::new(&args, 100));
    let totals = Mutex::new(Totals::default());
    let failed: Mutex<Option<RunReport>> = Mutex::new(None);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    if failed
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .is_some()
                    {
                        return;
                    }
                    let Some(seed) = seeds
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .next_seed()
                    else {
                        return;
                    };
                    let report = run_one(seed, &config, &args);
                    totals
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .add(&report);
                    if !report.passed() {
                        failed
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .get_or_insert(report);
                        return;
                    }
                }
            });
        }
    });
    if let Some(report) = failed.into_inner().unwrap_or_else(PoisonError::into_inner) {
        println!("{report}");
        return fail(&report, &config, &args);
    }
    let seconds = started.elapsed().as_secs_f64();
    let Totals {
        runs,
        operations,
        claims,
        beyond,
        overlapped,
        fleet_runs,
        takeovers,
        pauses,
        restarts,
    } = totals.into_inner().unwrap_or_else(PoisonError::into_inner);
    println!(
        "mend-sim: {runs} schedules passed ({operations} operations, {claims} answers checked; \
         {beyond} with a clock beyond the gates' allowance, {overlapped} overlapping sweeps in \
         them; {fleet_runs} with fleet memberships, {takeovers} takeovers; {pauses} whole \
         replicas paused, {restarts} crashed and started again) in {seconds:.1} s on {jobs} threads: {:.0} schedules/s, {:.0} an hour",
        runs as f64 / seconds.max(1e-9),
        runs as f64 / seconds.max(1e-9) * 3600.0
    );
    ExitCode::SUCCESS
}

/// What the schedules run so far did.
#[derive(Default)]
struct Totals {
    runs: u64,
    operations: u64,
    claims: u64,
    beyond: u64,
    overlapped: u64,
    fleet_runs: u64,
    takeovers: u64,
    pauses: u64,
    restarts: u64,
}

impl Totals {
    fn add(&mut self, report: &RunReport) {
        self.runs += 1;
        self.operations += report.operations as u64;
        self.claims += report.claims_checked as u64;
        if report.clocks_beyond_allowance {
            self.beyond += 1;
            self.overlapped += report.sweeps_overlapped as u64;
        }
        self.fleet_runs += u64::from(report.fleet);
        self.takeovers += report.takeovers as u64;
        self.pauses += report.pauses as u64;
        self.restarts += report.restarts as u64;
    }
}

/// The seeds to run: `--seed`, or `--first` on (fresh ones without it), `--count` of them or
/// for `--soak-seconds`.
struct Seeds {
    one: Option<u64>,
    first: Option<u64>,
    fresh: SimRng,
    count: u64,
    deadline: Option<Instant>,
    drawn: u64,
}

impl Seeds {
    fn new(args: &Args, default_count: u64) -> Self {
        let fresh_base = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64);
        if args.seed.is_none() && args.first.is_none() {
            println!("mend-sim: fresh seeds drawn from base {fresh_base}");
        }
        Self {
            one: args.seed,
            first: args.first,
            fresh: SimRng::new(fresh_base),
            count: args.count.unwrap_or(default_count),
            deadline: args
                .soak_seconds
                .map(|seconds| Instant::now() + Duration::from_secs(seconds)),
            drawn: 0,
        }
    }

    fn next_seed(&mut self) -> Option<u64> {
        let done = match (self.one, self.deadline) {
            (Some(_), _) => self.drawn >= 1,
            (None, Some(deadline)) => Instant::now() >= deadline,
            (None, None) => self.drawn >= self.count,
        };
        if done {
            return None;
        }
        let seed = match (self.one, self.first) {
            (Some(seed), _) => seed,
            (None, Some(first)) => first + self.drawn,
            (None, None) => self.fresh.next_u64(),
        };
        self.drawn += 1;
        Some(seed)
    }
}

/// Runs stress schedules against the Postgres server at `url` (see `mend_sim::stress`), one
/// line each, and stops at the first that fails or cannot start.
fn stress_schedules(url: &str, args: &Args, config: &Config) -> ExitCode {
    let options = PostgresOptions {
        accept_unsafe_durability: std::env::var("MEND_POSTGRES_ACCEPT_UNSAFE_DURABILITY")
            .is_ok_and(|value| value == "true"),
    };
    let config = Config {
        keep_trace: args.trace,
        ..config.clone()
    };
    let server = without_password(url);
    let mut seeds = Seeds::new(args, 1);
    let started = Instant::now();
    let (mut runs, mut operations, mut claims, mut sweeps) = (0u64, 0u64, 0u64, 0u64);
    while let Some(seed) = seeds.next_seed() {
        let stressed = match stress::run(url, options, seed, &config) {
            Ok(stressed) => stressed,
            Err(error) => {
                println!("mend-sim: stress seed {seed} could not start against {server}: {error}");
                return ExitCode::FAILURE;
            }
        };
        for line in &stressed.report.trace {
            println!("{line}");
        }
        println!("{stressed}");
        runs += 1;
        operations += stressed.report.operations as u64;
        claims += stressed.report.claims_checked as u64;
        sweeps += stressed.report.sweeps as u64;
        if let Some(database) = &stressed.database_left {
            println!("  database left on the server: {database}");
        }
        if !stressed.passed() {
            for violation in &stressed.report.violations {
                println!("  violation: {violation}");
            }
            println!(
                "stress runs do not replay bit for bit: `mend-sim --postgres URL --seed {seed}` \
                 makes the same choices again, in whatever interleaving the machine gives"
            );
            return ExitCode::FAILURE;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "mend-sim: {runs} stress schedules passed ({operations} operations, {claims} answers \
         checked, {sweeps} sweeps) against Postgres at {server} in {seconds:.1} s: {:.1} s per \
         schedule; not deterministic, no replay",
        seconds / runs.max(1) as f64
    );
    ExitCode::SUCCESS
}

/// `url` without its password, to print.
fn without_password(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_password(None);
            parsed.into()
        }
        Err(_) => "the given URL".into(),
    }
}

fn fail(report: &RunReport, config: &Config, args: &Args) -> ExitCode {
    for violation in &report.violations {
        println!("  violation: {violation}");
    }
    println!("replay: {}", report.replay_command());
    #[cfg(feature = "deliberate-bugs")]
    let _enabled = chosen_bug(args).map(mend::deliberate_bugs::enable);
    #[cfg(not(feature = "deliberate-bugs"))]
    let _ = args;
    let shrunk = shrink(report.seed, config);
    println!(
        "shrunk in {} runs to {:?}; its trace:",
        shrunk.runs, shrunk.config
    );
    for line in &shrunk.report.trace {
        println!("  {line}");
    }
    println!("{}", shrunk.report);
    for violation in &shrunk.report.violations {
        println!("  violation: {violation}");
    }
    println!(
        "the shortest trace found: {} lines (the failing run's: {}); replay it with the config \
         above",
        shrunk.trace_lines(),
        report.trace_lines
    );
    ExitCode::FAILURE
}

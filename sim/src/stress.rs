//! The stress mode: the simulator's workloads and checks against a real PostgreSQL catalog, in
//! real time. Postgres cannot run inside a simulation (its semantics are the conformance
//! suite's to prove); what the simulator can still do is drive the same writers, committers,
//! supervisors, operator and readers at a real server, then hold every answer against storage
//! with the same checks.
//!
//! What differs from a simulated run:
//!
//! - **Not deterministic.** No [`mend::ambient`] source is installed and the clock is not
//!   paused: ids are random, time is the wall clock, and tasks run on a multi-threaded runtime.
//!   The seed still decides every actor's choices and the faults of the object store, but the
//!   interleavings are the machine's, so a failing seed does not replay bit for bit; run it
//!   again to try, and read the kept database.
//! - **The catalog is [`PostgresCatalog`] and the gates are [`PostgresGates`]**, each replica
//!   with its own pools, as separate processes would have. No fault is injected into the
//!   catalog: its requests reach the server as they are (a writer's request cut off part way
//!   still drops its future mid-transaction). The quiet phase cannot turn a server's faults
//!   off anyway.
//! - **Split objects stay on the [`SimStore`](crate::store::SimStore)** (over object_store's in-memory store), so the
//!   seed's object faults and latencies still apply, now in real ms. The store stamps objects
//!   with the run's time, which here starts at the wall clock (not at
//!   [`crate::time::EPOCH_MS`]), so that the operator's reconcile, reading the wall clock,
//!   judges an object's age right.
//! - **A database of its own per run**, `mend_stress_<uuid>`, created on the server of the URL
//!   (whose user needs `CREATEDB`) and dropped when the run passes; a failed run's database is
//!   kept for inspection. Runs against one server are thus independent of each other.
//! - **A shorter quiet phase** ([`quiet_wait_ms`]): advisory-lock gates have no lease, so
//!   once the actors stop only the operation and in-process leases must run out, not the
//!   simulation's 30 s.
//!
//! Every connection is bounded: the catalog's pools are [`PostgresCatalog`]'s own (16
//! connections, 10 s to acquire one), the gates' pools hold [`GATE_CONNECTIONS`] each with
//! [`CONNECT_TIMEOUT`], and the connection that creates and drops the run's database is one,
//! with a statement timeout.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mend::catalog::{PostgresCatalog, PostgresOptions};
use mend::clock::{Clock, SystemClock};
use mend::gates::PostgresGates;
use mend::objects::SplitObjects;
use mend::runtime::registry::PolicyRegistry;
use mend::{Engine, EngineOptions, MendError};
use object_store::ObjectStore;
use object_store::path::Path;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};

use crate::replica::{Process, Replica, Start};
use crate::rng::SimRng;
use crate::schedule::{self, Cluster, Config, IN_PROCESS_LEASE_MS, OPERATION_LEASE_MS, RunReport};
use crate::time::SimTime;
use crate::trace::Trace;

/// Connections of each replica's gates: more than the gates one replica holds at once (its
/// supervisor's dataset gate, the operator's, an exclusive recovery's).
pub const GATE_CONNECTIONS: u32 = 8;
/// How long opening a connection (and acquiring one from a gates' pool) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long creating or dropping a run's database may take before the server cancels it.
const DATABASE_STATEMENT_TIMEOUT: &str = "60s";
/// Beyond the longest lease and the replicas' skews, how long the quiet phase waits: the last
/// heartbeat or commit may have landed a little after its writer stopped counting.
const QUIET_MARGIN_MS: u64 = 1_000;

/// One stress run: what it did and found, how long it took, and the database it left behind.
#[derive(Debug, Clone)]
pub struct StressReport {
    pub report: RunReport,
    /// Wall time, from creating the run's database to dropping it.
    pub wall_time: Duration,
    /// The run's database when it is still on the server, and why: kept because the run
    /// failed, or dropping it failed.
    pub database_left: Option<String>,
}

impl StressReport {
    /// Whether every check held.
    pub fn passed(&self) -> bool {
        self.report.passed()
    }
}

impl fmt::Display for StressReport {
    /// One line, as a simulated run's, without what only a simulation has (a trace digest
    /// that replays, simulated seconds).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let report = &self.report;
        write!(
            f,
            "stress seed {}: {} operations ({} published, {} ended), {} sweeps, {} object-store \
             requests ({} failed by the plan), {} answers and {} generations checked, {} events \
             linearized, {:.1} s: {}",
            report.seed,
            report.operations,
            report.published,
            report.ended,
            report.sweeps,
            report.requests,
            report.injected_failures,
            report.claims_checked,
            report.generations_checked,
            report.events_linearized,
            self.wall_time.as_secs_f64(),
            if report.passed() { "passed" } else { "FAILED" }
        )
    }
}

/// Runs the schedule of `seed` under `config` against the Postgres server at `url`
/// (`postgres://user:password@host:port/database`), in a database of its own; see the module
/// doc. Fails only when the run cannot start (the server is unreachable, refuses to create a
/// database, or is refused by `options`' durability check); what the checks find is in the
/// report.
pub fn run(
    url: &str,
    options: PostgresOptions,
    seed: u64,
    config: &Config,
) -> Result<StressReport, MendError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| MendError::unavailable("start the stress run's runtime", error))?;
    runtime.block_on(run_on_runtime(url, options, seed, config))
}

/// How long the quiet phase waits in real time for every lease to run out: the longest lease
/// (an operation's, renewed by a heartbeat, or an in-process commit's), plus the widest gap
/// between two replicas' clocks (one writes a deadline, another judges it), plus a margin.
/// Postgres gates are advisory locks, which have no lease: a lock is held until released or
/// until its connection closes. 6.8 s for [`Config::standard`].
pub fn quiet_wait_ms(config: &Config) -> u64 {
    let longest_lease_ms = OPERATION_LEASE_MS.max(IN_PROCESS_LEASE_MS.unsigned_abs());
    longest_lease_ms + 2 * config.max_skew_ms.unsigned_abs() + QUIET_MARGIN_MS
}

async fn run_on_runtime(
    url: &str,
    options: PostgresOptions,
    seed: u64,
    config: &Config,
) -> Result<StressReport, MendError> {
    let started = Instant::now();
    let database = RunDatabase::create(url).await?;
    let report = match postgres_cluster(&database.url, options, seed, config).await {
        Ok(cluster) => schedule::run_on_runtime(seed, config, cluster).await,
        Err(error) => {
            // The run cannot start; leave nothing behind. A failure to drop is secondary to
            // the error the caller needs.
            let _ = database.drop().await;
            return Err(error);
        }
    };
    let database_left = if report.passed() {
        database
            .drop()
            .await
            .err()
            .map(|error| format!("{} (dropping it failed: {error})", database.name))
    } else {
        Some(format!("{} (kept: the run failed)", database.name))
    };
    Ok(StressReport {
        report,
        wall_time: started.elapsed(),
        database_left,
    })
}

/// The replicas of a stress run: each an engine with a Postgres catalog and Postgres gates of
/// its own, its split objects on one shared [`SimStore`](crate::store::SimStore), its clock the wall clock off by a
/// skew drawn from the seed (as in a simulation).
async fn postgres_cluster(
    url: &str,
    options: PostgresOptions,
    seed: u64,
    config: &Config,
) -> Result<Cluster, MendError> {
    // On an unpaused runtime, simulated time is real time since the run started.
    let time = SimTime::start_at(SystemClock.now_ms());
    let trace = Trace::new(time, config.keep_trace);
    let store = schedule::seeded_store(seed, config, time, &trace);
    let objects: Arc<dyn ObjectStore> = Arc::new(store.clone());
    let mut setup = SimRng::fork(seed, "setup");
    let mut replicas = Vec::new();
    for index in 0..config.replicas.max(1) {
        let skew_ms =
            setup.below(2 * config.max_skew_ms.max(0) as u64 + 1) as i64 - config.max_skew_ms;
        let catalog = PostgresCatalog::connect_with(url, options).await?;
        let gates = PostgresGates::new(gates_pool(url, index).await?);
        let engine = Engine::new(
            Arc::new(catalog),
            SplitObjects::new(objects.clone(), Path::default()),
            schedule::policy(),
            EngineOptions {
                clock: Arc::new(SkewedWallClock { skew_ms }),
                intent_lease_ms: IN_PROCESS_LEASE_MS,
                ..EngineOptions::default()
            },
        )?
        .with_gates(Arc::new(gates));
        // Every replica sweeps (no fleet memberships): the advisory locks alone keep sweeps
        // apart. Its process is never restarted: `start` runs once.
        let process = Process::new(engine, None, 0);
        let start: Start = Arc::new(move |_| process.clone());
        replicas.push(Replica::new(
            index,
            skew_ms,
            PolicyRegistry::new(objects.clone(), Path::default()),
            start,
        ));
    }
    Ok(Cluster {
        time,
        trace,
        store,
        replicas,
        quiet_wait_ms: quiet_wait_ms(config),
        // Advisory locks hold for their session, whatever the clocks say.
        clocks_beyond_allowance: false,
        // Real time: a pause would be a sleep of the whole process, and a crash here would
        // leave the real connections of the old process open.
        replica_faults: false,
    })
}

/// A pool of its own for one replica's gates: each held gate keeps a connection, so sharing
/// the catalog's pool could starve the catalog work done under a gate.
async fn gates_pool(url: &str, replica: usize) -> Result<PgPool, MendError> {
    let options = PgConnectOptions::from_str(url)
        .map_err(|error| MendError::invalid(format!("invalid postgres url: {error}")))?
        .application_name(&format!("mend-sim stress replica-{replica}"));
    PgPoolOptions::new()
        .max_connections(GATE_CONNECTIONS)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect_with(options)
        .await
        .map_err(|error| MendError::unavailable("connect the stress run's gates' pool", error))
}

/// A replica's clock in a stress run: the wall clock, off by the replica's skew.
#[derive(Debug)]
struct SkewedWallClock {
    skew_ms: i64,
}

impl Clock for SkewedWallClock {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms() + self.skew_ms
    }
}

/// The database of one stress run, on the server of the URL it was created from.
struct RunDatabase {
    /// The server's URL as given: where the database is created and dropped from.
    server_url: String,
    name: String,
    /// The server's URL naming this database.
    url: String,
}

impl RunDatabase {
    /// Creates `mend_stress_<uuid>` on the server of `server_url`.
    async fn create(server_url: &str) -> Result<Self, MendError> {
        let name = format!("mend_stress_{}", mend::ambient::uuid_v4().simple());
        // The name is ours: lowercase hex after a fixed prefix, a plain identifier.
        run_statement(server_url, &format!("CREATE DATABASE {name}")).await?;
        let mut url = url::Url::parse(server_url)
            .map_err(|error| MendError::invalid(format!("invalid postgres url: {error}")))?;
        url.set_path(&format!("/{name}"));
        Ok(Self {
            server_url: server_url.to_string(),
            name,
            url: url.into(),
        })
    }

    /// Drops the database, closing whatever connections still use it (the engines' pools may
    /// still hold some, and a dropped gate's unlock may still be under way).
    async fn drop(&self) -> Result<(), MendError> {
        run_statement(
            &self.server_url,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        )
        .await
    }
}

/// Runs `statement` on a connection of its own to the database of `url`, bounded by
/// [`CONNECT_TIMEOUT`] to connect and [`DATABASE_STATEMENT_TIMEOUT`] to run.
async fn run_statement(url: &str, statement: &str) -> Result<(), MendError> {
    let options = PgConnectOptions::from_str(url)
        .map_err(|error| MendError::invalid(format!("invalid postgres url: {error}")))?
        .application_name("mend-sim stress")
        .options([("statement_timeout", DATABASE_STATEMENT_TIMEOUT)]);
    let target = format!(
        "postgres://{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or_default()
    );
    let mut connection = tokio::time::timeout(CONNECT_TIMEOUT, options.connect())
        .await
        .map_err(|elapsed| {
            MendError::unavailable(
                format!("connect to {target} within {CONNECT_TIMEOUT:?}: is the server up?"),
                elapsed,
            )
        })?
        .map_err(|error| {
            MendError::unavailable(
                format!("connect to {target}: {error}; is the server up, the URL right?"),
                error,
            )
        })?;
    let ran = sqlx::query(statement).execute(&mut connection).await;
    let _ = sqlx::Connection::close(connection).await;
    ran.map(|_| ()).map_err(|error| {
        MendError::unavailable(
            format!(
                "run `{statement}` on {target}: {error} (the stress mode needs a user that \
                 may create databases)"
            ),
            error,
        )
    })
}

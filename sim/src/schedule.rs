//! One simulated run: a dataset on the object-store catalog over the simulated store, served
//! by a few replicas (engines of their own over the same store, each with its clock's skew, its
//! object-store gates, in most runs a fleet membership (`fleet.rs`), and a supervisor
//! sweeping the dataset, when it owns it in a fleet), written to by writers through
//! the operation protocol and by in-process committers, all on one thread whose every choice
//! is drawn from the seed. After the actors stop, the faults stop, and the run checks that
//! every intent settles with no operator (liveness), then holds every answer given to what
//! storage ends up saying ([`crate::check`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use mend::catalog::ObjectStoreCatalog;
use mend::catalog::object_store::ObjectStoreCatalogOptions;
use mend::gates::ObjectStoreGates;
use mend::model::DatasetConfig;
use mend::objects::SplitObjects;
use mend::runtime::PolicyRuntime;
use mend::runtime::registry::PolicyRegistry;
use mend::{Engine, EngineOptions, MendError};
use object_store::ObjectStore;
use object_store::path::Path;

use crate::check::{self, History, PositionRead};
use crate::fleet::Fleet;
use crate::replica::{Process, Replica, Start};
use crate::rng::SimRng;
use crate::store::{FaultRates, SimStore};
use crate::time::{SimAmbient, SimTime, SkewedClock};
use crate::trace::Trace;

/// The dataset every run writes to.
pub const DATASET: &str = "sim";
/// The checkpoint source of every writer's deltas; each writer owns one partition of it.
pub const SOURCE: &str = "sim";

/// The shape of a run: how many of each actor, how much each does, how unkind the store is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Writers through the operation protocol (begin, upload, heartbeat, publish, abort).
    pub protocol_writers: usize,
    /// Writers committing in process (`Engine::commit`).
    pub committers: usize,
    /// Writers of the plain protocol, with no intent (stage, put, publish); some die between
    /// their stage and their publish, and gc collects what they left.
    pub stagers: usize,
    /// Operations each writer and committer runs.
    pub operations_each: usize,
    /// Engines over the same store, each with a supervisor.
    pub replicas: usize,
    /// The store's faults while the actors run.
    pub faults: FaultRates,
    /// The last this many protocol writers forget an operation whose end they do not know
    /// (their process restarted without its state) and begin the next from the positions
    /// they read: recovery must end the forgotten one, which the next may overtake.
    pub forgetful_writers: usize,
    /// The first this many protocol writers begin without an operation id (no idempotency
    /// key): the engine names each operation, and a begin sent again after an answer it did
    /// not get begins another, which recovery must end.
    pub unkeyed_writers: usize,
    /// An operator runs gc, reconcile, verify and exclusive recovery while the writers work.
    pub operator: bool,
    /// Readers serving the dataset through read-only live handles.
    pub readers: usize,
    /// Percent of protocol operations whose writer stops ("crashes") part way through.
    pub crash_pct: u64,
    /// Replicas' clocks are off by up to this much, either way (within the gates' allowance
    /// of 1 s unless a run asks for more).
    pub max_skew_ms: i64,
    /// Percent of runs in which the first replica's clock is off by 1.5 to 4 s instead, beyond
    /// the gates' allowance: two replicas may then sweep at once (the gates promise nothing
    /// there, and the run counts the overlaps), and every other check must hold regardless.
    pub beyond_allowance_pct: u64,
    /// Percent of runs in which the replicas hold fleet memberships and each sweeps only the
    /// datasets it owns, as `mend serve` does; in the others every replica sweeps whenever it
    /// likes, and the gates alone keep sweeps apart (`fleet.rs`).
    pub fleet_pct: u64,
    /// Percent of runs in which a whole replica is paused (for up to 14 s) or crashed and
    /// started again, once or twice (`fleet.rs`).
    pub replica_fault_pct: u64,
    /// Keep the trace's lines (a replay, a failure) rather than only its digest.
    pub keep_trace: bool,
    /// Trace the text of every catalog log version put (with `keep_trace`).
    pub trace_log_payloads: bool,
    /// The faults, by number in the order the run draws them, that are not injected
    /// ([`crate::faults`]): how a shrinker takes faults away one at a time.
    pub suppressed_faults: Vec<u64>,
}

impl Config {
    /// The schedule `scripts/test` and the bench run: 3 protocol writers (one forgetful, one
    /// that begins without operation ids), 2 committers and a stager, of 10 operations each
    /// (60 operations, plus the supervisors' sweeps), 2 replicas, an operator, a reader, a
    /// store that fails 3% of requests before and 3% of writes after their effect, and stalls
    /// 2 in 1000 past every lease; one run in ten with a replica's clock beyond the gates'
    /// allowance.
    pub fn standard() -> Self {
        Self {
            protocol_writers: 3,
            committers: 2,
            stagers: 1,
            operations_each: 10,
            replicas: 2,
            faults: FaultRates {
                fail_before_pct: 3,
                fail_after_pct: 3,
                max_latency_ms: 40,
                stall_per_mille: 2,
                stall_ms: STALL_MS,
            },
            forgetful_writers: 1,
            unkeyed_writers: 1,
            operator: true,
            readers: 1,
            crash_pct: 10,
            max_skew_ms: 400,
            beyond_allowance_pct: 10,
            fleet_pct: 50,
            replica_fault_pct: 50,
            keep_trace: false,
            trace_log_payloads: false,
            suppressed_faults: Vec::new(),
        }
    }

    /// Operations the writers run (sweeps not counted).
    pub fn operations(&self) -> usize {
        (self.protocol_writers + self.committers + self.stagers) * self.operations_each
    }
}

/// What a run did and found.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The run's seed.
    pub seed: u64,
    /// Writers' operations run, and sweeps run.
    pub operations: usize,
    pub sweeps: usize,
    /// Store requests answered, and how many with an injected failure.
    pub requests: u64,
    pub injected_failures: u64,
    /// Operations published, and operations ended without publishing.
    pub published: usize,
    pub ended: usize,
    /// Answers held against storage, and readers' generations checked.
    pub claims_checked: usize,
    pub generations_checked: usize,
    /// Publishes and reads the linearizability check placed in one order.
    pub events_linearized: usize,
    /// Config applies whose answers were held against the readers and the end.
    pub config_applies_checked: usize,
    /// Policy changes whose answers, and replicas' runs of a policy, were held against the
    /// registry.
    pub policy_changes_checked: usize,
    pub policy_runs_checked: usize,
    /// Protocol requests that reached a replica a second time, later (one in twenty).
    pub late_copies: usize,
    /// Whether a replica's clock was off by more than the gates' allowance, and how many
    /// pairs of sweeps overlapped then (a violation otherwise).
    pub clocks_beyond_allowance: bool,
    pub sweeps_overlapped: usize,
    /// Whether the replicas held fleet memberships; their heartbeats checked, members another
    /// saw expire (takeovers), and whole replicas paused.
    pub fleet: bool,
    pub heartbeats_checked: usize,
    pub takeovers: usize,
    pub pauses: usize,
    /// Replicas' processes crashed and started again.
    pub restarts: usize,
    /// Splits the operator's gc marked, saw marked first and deleted; readers' object reads
    /// held to their grace periods; leases held against takeovers.
    pub gc_marked: usize,
    pub gc_seen: usize,
    pub gc_deleted: usize,
    pub object_reads_checked: usize,
    pub leases_checked: usize,
    /// Every check that failed; empty when the run held.
    pub violations: Vec<check::Violation>,
    /// The digest of the trace, and its line count: equal for equal seeds and configs.
    pub trace_digest: u64,
    pub trace_lines: u64,
    /// The trace's lines, when the config kept them.
    pub trace: Vec<String>,
    /// Simulated time the run took, in ms.
    pub simulated_ms: u64,
    /// Faults the run drew, suppressed ones included ([`crate::faults`]).
    pub faults_drawn: u64,
}

impl RunReport {
    /// Whether every check held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// The command that replays this run bit for bit, its trace printed.
    pub fn replay_command(&self) -> String {
        format!(
            "cargo run --release -p mend-sim -- --seed {} --trace",
            self.seed
        )
    }
}

impl std::fmt::Display for RunReport {
    /// One line: what the run did, its trace's digest, and whether it held.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {}: {} operations ({} published, {} ended), {} sweeps, {} store requests \
             ({} failed by the plan), {} answers and {} generations checked, {} events \
             linearized, {} policy changes checked, gc marked {}, saw {} marks first and \
             deleted {}, {} object reads and {} leases checked, {}{}{}{} simulated s, trace {:016x} ({} lines): {}",
            self.seed,
            self.operations,
            self.published,
            self.ended,
            self.sweeps,
            self.requests,
            self.injected_failures,
            self.claims_checked,
            self.generations_checked,
            self.events_linearized,
            self.policy_changes_checked,
            self.gc_marked,
            self.gc_seen,
            self.gc_deleted,
            self.object_reads_checked,
            self.leases_checked,
            if self.fleet {
                format!(
                    "{} heartbeats checked ({} takeovers), ",
                    self.heartbeats_checked, self.takeovers
                )
            } else {
                String::new()
            },
            if self.pauses + self.restarts > 0 {
                format!(
                    "{} replica pauses and {} restarts, ",
                    self.pauses, self.restarts
                )
            } else {
                String::new()
            },
            if self.clocks_beyond_allowance {
                format!(
                    "a clock beyond the gates' allowance ({} pairs of sweeps overlapped), ",
                    self.sweeps_overlapped
                )
            } else {
                String::new()
            },
            self.simulated_ms / 1000,
            self.trace_digest,
            self.trace_lines,
            if self.passed() { "passed" } else { "FAILED" }
        )
    }
}

/// The lease of a protocol operation, in simulated ms.
pub(crate) const OPERATION_LEASE_MS: u64 = 3_000;
/// The lease of an in-process commit's intent (the engine's option; 60 s by default).
pub(crate) const IN_PROCESS_LEASE_MS: i64 = 5_000;
/// The lease of the replicas' object-store gates.
const GATE_LEASE: Duration = Duration::from_secs(10);
/// How long the quiet phase waits, once the faults stop, before it sweeps: every lease runs out
/// (the gates' 10 s among them), with room to spare, since simulated time costs nothing. The
/// stress mode, in real time, waits only as long as its leases need
/// ([`crate::stress`]).
const QUIET_WAIT_MS: u64 = 30_000;
/// Sweeps per replica in the quiet phase before an unsettled intent is a liveness failure.
const QUIET_ROUNDS: usize = 6;
/// The shortest stall of a request (see [`FaultRates`]): past the gates' lease of 10 s and
/// their clock allowance of 1 s, and past every operation's lease, so that a replica paused in
/// its sweep resumes after another has taken the dataset over, and a writer paused in a step
/// resumes after recovery may have ended its operation.
const STALL_MS: u64 = 11_500;

/// The default policy, compiled once per process: the same component every run loads.
pub(crate) fn policy() -> PolicyRuntime {
    static POLICY: OnceLock<PolicyRuntime> = OnceLock::new();
    POLICY
        .get_or_init(|| PolicyRuntime::default_policy().expect("the default policy loads"))
        .clone()
}

/// Runs the schedule of `seed` under `config`.
pub fn run(seed: u64, config: &Config) -> RunReport {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let faults = crate::faults::install(&config.suppressed_faults);
    let mut report = runtime.block_on(async {
        let time = SimTime::start();
        // Installed before any engine is built, and held until the run ends: every id and
        // wall-clock read of the engine comes from the seed and simulated time.
        let _ambient = mend::ambient::install(SimAmbient::new(seed, time));
        let cluster = simulated_cluster(seed, config, time);
        run_on_runtime(seed, config, cluster).await
    });
    report.faults_drawn = faults.drawn();
    report
}

/// What a run's actors work against: the replicas, the store their split objects (and, in a
/// simulation, their catalog and gates) live in, the run's time and trace, and how long the
/// quiet phase waits for every lease to run out.
pub(crate) struct Cluster {
    pub time: SimTime,
    pub trace: Trace,
    /// Its faults stop when the quiet phase starts; its counts go in the report.
    pub store: SimStore,
    pub replicas: Vec<Replica>,
    pub quiet_wait_ms: u64,
    /// A replica's clock is off by more than the gates' allowance: sweeps may overlap.
    pub clocks_beyond_allowance: bool,
    /// Whether whole replicas may be paused or crashed (each reaches `store` through a view of
    /// its own, and has a process to start again).
    pub replica_faults: bool,
}

/// The run's object store: its faults drawn from `seed` as `config` says.
pub(crate) fn seeded_store(seed: u64, config: &Config, time: SimTime, trace: &Trace) -> SimStore {
    SimStore::new(
        SimRng::fork(seed, "store"),
        config.faults,
        time,
        trace.clone(),
        config.keep_trace && config.trace_log_payloads,
    )
}

/// The simulation's cluster: replicas on the object-store catalog and object-store gates, all
/// over one simulated store, each clock off by a skew drawn from the seed.
fn simulated_cluster(seed: u64, config: &Config, time: SimTime) -> Cluster {
    let trace = Trace::new(time, config.keep_trace);
    let store = seeded_store(seed, config, time, &trace);
    let mut setup = SimRng::fork(seed, "setup");
    let beyond_allowance = setup.chance(config.beyond_allowance_pct);
    // Drawn apart from the setup, so that the setup's draws do not depend on it.
    let fleet = SimRng::fork(seed, "fleet").chance(config.fleet_pct);
    let replicas: Vec<Replica> = (0..config.replicas.max(1))
        .map(|index| {
            let mut skew_ms =
                setup.below(2 * config.max_skew_ms.max(0) as u64 + 1) as i64 - config.max_skew_ms;
            if beyond_allowance && index == 0 {
                let beyond = setup.between(1_500, 4_000) as i64;
                skew_ms = if setup.chance(50) { beyond } else { -beyond };
            }
            let clock = Arc::new(SkewedClock { time, skew_ms });
            // The replica's own view of the store: paused when the replica is.
            let shared: Arc<dyn ObjectStore> = Arc::new(store.for_replica(index));
            let registry = PolicyRegistry::new(shared.clone(), Path::default());
            let start: Start = Arc::new(move |incarnation| {
                let catalog = ObjectStoreCatalog::new(
                    shared.clone(),
                    Path::default(),
                    ObjectStoreCatalogOptions {
                        // Checkpoints and retention every few commits, so that runs meet them.
                        checkpoint_interval: 8,
                        ..ObjectStoreCatalogOptions::default()
                    },
                );
                let gates = ObjectStoreGates::new(
                    shared.clone(),
                    Path::from("gates"),
                    GATE_LEASE,
                    clock.clone(),
                )
                .with_holder(&crate::fleet::replica_id(index, incarnation));
                let engine = Engine::new(
                    Arc::new(catalog),
                    SplitObjects::new(shared.clone(), Path::default()),
                    policy(),
                    EngineOptions {
                        clock: clock.clone(),
                        intent_lease_ms: IN_PROCESS_LEASE_MS,
                        ..EngineOptions::default()
                    },
                )
                .expect("the engine starts")
                .with_gates(Arc::new(gates));
                let fleet =
                    fleet.then(|| Fleet::new(index, incarnation, shared.clone(), clock.clone()));
                Process::new(engine, fleet, incarnation)
            });
            Replica::new(index, skew_ms, registry, start)
        })
        .collect();
    Cluster {
        time,
        trace,
        store,
        replicas,
        quiet_wait_ms: QUIET_WAIT_MS,
        clocks_beyond_allowance: beyond_allowance,
        replica_faults: true,
    }
}

/// Runs the actors of `seed`'s schedule against `cluster`, then the quiet phase, then the
/// checks.
pub(crate) async fn run_on_runtime(seed: u64, config: &Config, cluster: Cluster) -> RunReport {
    let Cluster {
        time,
        trace,
        store,
        replicas,
        quiet_wait_ms,
        clocks_beyond_allowance,
        replica_faults,
    } = cluster;
    // Decided for the run: every process of every replica is started with a membership or
    // none is.
    let fleet = replicas
        .iter()
        .any(|replica| replica.process().fleet.is_some());
    trace.line(format!(
        "seed {seed}: {} replicas (skews {:?} ms, {}), {} protocol writers, {} committers, {} operations each",
        replicas.len(),
        replicas.iter().map(|r| r.skew_ms).collect::<Vec<_>>(),
        if fleet {
            "fleet memberships"
        } else {
            "every replica sweeps"
        },
        config.protocol_writers,
        config.committers,
        config.operations_each
    ));

    let history = Arc::new(Mutex::new(History::default()));
    create_dataset(&replicas[0].engine(), &trace).await;

    let stop = Arc::new(AtomicBool::new(false));
    let echoes = crate::writer::Echoes::default();
    let (supervisors, writers) = spawn_actors(
        seed,
        config,
        &replicas,
        &store,
        fleet,
        replica_faults,
        &stop,
        &history,
        &trace,
        &echoes,
    );
    for writer in writers {
        writer.await.expect("a writer task panicked");
    }
    let late_copies = echoes.landed().await;
    stop.store(true, Ordering::SeqCst);
    for supervisor in supervisors {
        supervisor
            .await
            .expect("a supervisor, the operator or a reader panicked");
    }

    let (unsettled, last_views) =
        quiet_phase(&replicas, &store, quiet_wait_ms, &history, &trace).await;

    let history = into_history(history);
    let end = read_end(
        &replicas,
        &history,
        last_views,
        fleet,
        clocks_beyond_allowance,
        unsettled,
        quiet_wait_ms,
    )
    .await;
    let found = check::run(&history, &end);
    if clocks_beyond_allowance {
        for overlap in check::overlapping_sweeps(&history) {
            trace.line(format!("beyond the clock allowance: {overlap}"));
        }
    }
    for violation in &found.violations {
        trace.line(format!("VIOLATION {violation}"));
    }
    let (requests, injected_failures) = store.counts();
    let (trace_digest, trace_lines) = trace.digest();
    RunReport {
        seed,
        operations: config.operations(),
        sweeps: history.sweeps.len(),
        requests,
        injected_failures,
        published: found.published,
        ended: found.ended,
        claims_checked: found.claims_checked,
        generations_checked: found.generations_checked,
        events_linearized: found.events_linearized,
        config_applies_checked: found.config_applies_checked,
        policy_changes_checked: found.policy_changes_checked,
        policy_runs_checked: found.policy_runs_checked,
        late_copies,
        clocks_beyond_allowance,
        sweeps_overlapped: found.sweeps_overlapped,
        fleet,
        heartbeats_checked: found.heartbeats_checked,
        takeovers: found.takeovers,
        pauses: history.pauses.len(),
        restarts: history.restarts.len(),
        gc_marked: history.gc_marked,
        gc_seen: history.gc_seen,
        gc_deleted: history.gc_deleted,
        object_reads_checked: found.object_reads_checked,
        leases_checked: found.leases_checked,
        violations: found.violations,
        trace_digest,
        trace_lines,
        trace: trace.lines(),
        simulated_ms: time.elapsed_ms(),
        faults_drawn: 0,
    }
}

/// The history, once every actor has stopped and nothing else holds it.
fn into_history(history: Arc<Mutex<History>>) -> History {
    Arc::try_unwrap(history)
        .map(|history| history.into_inner().unwrap_or_else(PoisonError::into_inner))
        .unwrap_or_else(|shared| {
            shared
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
}

/// What storage and the replicas say once the quiet phase is over ([`check::End`]).
async fn read_end(
    replicas: &[Replica],
    history: &History,
    last_views: Vec<Option<check::HeartbeatRecord>>,
    fleet: bool,
    clocks_beyond_allowance: bool,
    unsettled: Vec<String>,
    quiet_wait_ms: u64,
) -> check::End {
    let engine = replicas[0].engine();
    let mut unreadable = Vec::new();
    let rows = all_rows(&engine).await.unwrap_or_else(|error| {
        unreadable.push(format!("the rows cannot be read: {error}"));
        BTreeMap::new()
    });
    let dataset = match engine.dataset(DATASET).await {
        Ok(dataset) => Some(dataset),
        Err(error) => {
            unreadable.push(format!("the dataset cannot be read: {error}"));
            None
        }
    };
    let invariant_violations = match engine.verify(DATASET).await {
        Ok(report) => report
            .violations
            .iter()
            .map(|violation| format!("{violation:?}"))
            .collect(),
        Err(error) => {
            unreadable.push(format!("verify could not run: {error}"));
            Vec::new()
        }
    };
    let ends_unrecorded = ends_unrecorded(&engine, history)
        .await
        .unwrap_or_else(|error| {
            unreadable.push(format!("an operation's records cannot be read: {error}"));
            Vec::new()
        });
    let registry = replicas[0]
        .registry
        .records()
        .await
        .unwrap_or_else(|error| {
            unreadable.push(format!("the policy registry cannot be read: {error}"));
            Vec::new()
        });
    check::End {
        initial_config: DATASET_CONFIG,
        rows: rows
            .iter()
            .map(|(split_id, (state, _))| (split_id.clone(), *state))
            .collect(),
        reconciled: rows
            .iter()
            .filter(|(_, (_, node))| node == crate::operator::NODE)
            .map(|(split_id, _)| split_id.clone())
            .collect(),
        dataset,
        invariant_violations,
        registry,
        running: replicas
            .iter()
            .map(|replica| replica.engine().policy().digest().to_string())
            .collect(),
        default_digest: policy().digest().to_string(),
        fleet,
        last_views,
        clocks_beyond_allowance,
        clock_spread_ms: replicas
            .iter()
            .map(|r| r.skew_ms)
            .max()
            .unwrap_or(0)
            .abs_diff(replicas.iter().map(|r| r.skew_ms).min().unwrap_or(0)),
        unsettled,
        quiet_wait_ms,
        quiet_rounds: QUIET_ROUNDS,
        ends_unrecorded,
        unreadable,
    }
}

/// The operations of `history` that held an intent (they staged, or an answer said they began
/// or ended), have none now, and have neither their publish nor their end recorded
/// ([`check::End::ends_unrecorded`]).
async fn ends_unrecorded(engine: &Engine, history: &History) -> mend::Result<Vec<String>> {
    let mut unrecorded = Vec::new();
    for record in history.operations.iter().filter(|record| !record.plain) {
        let said = record
            .claims
            .iter()
            .any(|said| matches!(said.claim, check::Claim::Begun { .. } | check::Claim::Ended));
        let ledger = match engine.operation_ledger(DATASET, &record.operation_id).await {
            Ok(ledger) => ledger,
            // An in-process commit's label is no operation id the engine knows.
            Err(MendError::InvalidArgument { .. }) => continue,
            Err(error) => return Err(error),
        };
        if (ledger.begun || said) && ledger.intent.is_none() && !ledger.published && !ledger.ended {
            unrecorded.push(record.operation_id.clone());
        }
    }
    Ok(unrecorded)
}

/// Every row of the dataset, by id, with its state and the node that staged it.
async fn all_rows(
    engine: &Engine,
) -> mend::Result<BTreeMap<String, (mend::model::SplitState, String)>> {
    let mut rows = BTreeMap::new();
    let mut query = mend::model::ListQuery::default();
    loop {
        let page = engine.list_splits(DATASET, &query).await?;
        for row in page.splits {
            rows.insert(row.split_id, (row.state, row.node));
        }
        match page.next_after_split_id {
            Some(after) => query.after_split_id = Some(after),
            None => return Ok(rows),
        }
    }
}

/// Every actor of the run started, in the order the schedule's seed expects: per replica its
/// heartbeats (in a fleet) and its supervisor; the protocol writers; the committers; the
/// replicas' faults; the operator; the readers. Answers the tasks that run until `stop` and
/// the writers', which end on their own.
#[allow(clippy::too_many_arguments)]
fn spawn_actors(
    seed: u64,
    config: &Config,
    replicas: &[Replica],
    store: &SimStore,
    fleet: bool,
    replica_faults: bool,
    stop: &Arc<AtomicBool>,
    history: &Arc<Mutex<History>>,
    trace: &Trace,
    echoes: &crate::writer::Echoes,
) -> (
    Vec<tokio::task::JoinHandle<()>>,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let mut supervisors = Vec::new();
    for (index, replica) in replicas.iter().enumerate() {
        if fleet {
            supervisors.push(tokio::spawn(crate::fleet::heartbeats(
                index,
                replica.clone(),
                SimRng::fork(seed, &format!("heartbeats-{index}")),
                stop.clone(),
                history.clone(),
                trace.clone(),
            )));
        }
        supervisors.push(tokio::spawn(crate::supervisor::supervise(
            index,
            replica.clone(),
            SimRng::fork(seed, &format!("supervisor-{index}")),
            stop.clone(),
            history.clone(),
            trace.clone(),
        )));
    }
    let mut writers = Vec::new();
    for index in 0..config.protocol_writers {
        writers.push(tokio::spawn(crate::writer::protocol_writer(
            index,
            replicas.to_vec(),
            SimRng::fork(seed, &format!("writer-{index}")),
            config.clone(),
            history.clone(),
            trace.clone(),
            echoes.clone(),
        )));
    }
    for index in 0..config.committers {
        writers.push(tokio::spawn(crate::committer::committer(
            index,
            replicas.to_vec(),
            SimRng::fork(seed, &format!("committer-{index}")),
            config.clone(),
            history.clone(),
            trace.clone(),
        )));
    }
    for index in 0..config.stagers {
        writers.push(tokio::spawn(crate::stager::stager(
            index,
            replicas.to_vec(),
            SimRng::fork(seed, &format!("stager-{index}")),
            config.clone(),
            history.clone(),
            trace.clone(),
        )));
    }
    if replica_faults {
        supervisors.push(tokio::spawn(crate::fleet::replica_faults(
            store.clone(),
            replicas.to_vec(),
            config.replica_fault_pct,
            SimRng::fork(seed, "pauses"),
            stop.clone(),
            history.clone(),
            trace.clone(),
        )));
    }
    if config.operator {
        supervisors.push(tokio::spawn(crate::operator::operator(
            replicas.to_vec(),
            SimRng::fork(seed, "operator"),
            stop.clone(),
            history.clone(),
            trace.clone(),
        )));
        supervisors.push(tokio::spawn(crate::operator::collector(
            replicas.to_vec(),
            SimRng::fork(seed, "collector"),
            stop.clone(),
            history.clone(),
            trace.clone(),
        )));
    }
    for index in 0..config.readers {
        supervisors.push(tokio::spawn(crate::reader::reader(
            index,
            replicas.to_vec(),
            SimRng::fork(seed, &format!("reader-{index}")),
            stop.clone(),
            history.clone(),
            trace.clone(),
        )));
    }
    (supervisors, writers)
}

/// The quiet phase: no more faults, every lease runs out, and the supervisors alone must
/// settle every intent. Answers the intents still unsettled, and every replica's view once
/// more, for the fleet's liveness (held apart from the history).
async fn quiet_phase(
    replicas: &[Replica],
    store: &SimStore,
    quiet_wait_ms: u64,
    history: &Arc<Mutex<History>>,
    trace: &Trace,
) -> (Vec<String>, Vec<Option<check::HeartbeatRecord>>) {
    store.stop_faults();
    trace.line("quiet: faults stopped; waiting for every lease to run out".into());
    tokio::time::sleep(Duration::from_millis(quiet_wait_ms)).await;
    let mut unsettled = Vec::new();
    for round in 0..QUIET_ROUNDS {
        for (index, replica) in replicas.iter().enumerate() {
            if let Some(fleet) = &replica.process().fleet {
                crate::fleet::heartbeat_recorded(index, fleet, trace.now_ms(), history, trace)
                    .await;
            }
            crate::policy::follow(index, replica, history, trace).await;
            if crate::supervisor::may_sweep(replica) {
                crate::supervisor::sweep_once(index, replica, None, history, trace).await;
            }
        }
        unsettled = match replicas[0].engine().catalog().list_intents(DATASET).await {
            Ok(intents) => intents
                .iter()
                .map(|intent| format!("{} ({:?})", intent.operation_id, intent.phase))
                .collect(),
            Err(error) => vec![format!("listing intents failed: {error}")],
        };
        if unsettled.is_empty() {
            trace.line(format!(
                "quiet: every intent settled after {} rounds",
                round + 1
            ));
            break;
        }
    }

    let mut last_views = Vec::new();
    for (index, replica) in replicas.iter().enumerate() {
        if let Some(fleet) = &replica.process().fleet {
            last_views.push(crate::fleet::heartbeat(index, fleet, trace.now_ms(), trace).await);
        }
    }
    (unsettled, last_views)
}

async fn create_dataset(engine: &Engine, trace: &Trace) {
    for attempt in 0.. {
        match engine.create_dataset(DATASET, &DATASET_CONFIG).await {
            Ok(_) | Err(MendError::AlreadyExists { .. }) => return,
            Err(error) if attempt < 100 => {
                trace.line(format!("create dataset: {error}"));
            }
            Err(error) => panic!("the dataset cannot be created in 100 attempts: {error}"),
        }
    }
}

/// The dataset's grace periods are short, so that the operator's gc and reconcile act within
/// a run: a staged split untouched for 4 simulated s that no intent claims is abandoned, a
/// marked one is deleted 5 s after its mark (readers' long queries run about that long), and
/// an object without a row is an orphan after 4 s.
const DATASET_CONFIG: DatasetConfig = DatasetConfig {
    staged_grace_period_ms: 4_000,
    deletion_grace_period_ms: 5_000,
    policy_params: BTreeMap::new(),
};

/// Sleeps a drawn number of simulated ms in `low..=high`.
pub(crate) async fn pause(rng: &mut SimRng, low: u64, high: u64) {
    tokio::time::sleep(Duration::from_millis(rng.between(low, high))).await;
}

fn partition_position(dataset: &mend::model::Dataset, partition: &str) -> Option<u64> {
    dataset
        .checkpoint
        .get(SOURCE)
        .and_then(|positions| positions.get(partition))
        .copied()
}

/// Reads where `partition` stands, as a writer resuming its exactly-once loop does, and
/// records what it read for the linearizability check.
pub(crate) async fn read_position(
    engine: &Engine,
    partition: &str,
    rng: &mut SimRng,
    history: &Mutex<History>,
    trace: &Trace,
) -> Result<Option<u64>, MendError> {
    let mut last = None;
    for _ in 0..=crate::client::RETRIES {
        let from_ms = trace.now_ms();
        match engine.dataset(DATASET).await {
            Ok(dataset) => {
                let position = partition_position(&dataset, partition);
                history
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .positions_read
                    .push(PositionRead {
                        partition: partition.to_string(),
                        position: position.unwrap_or(0),
                        from_ms,
                        until_ms: trace.now_ms(),
                    });
                return Ok(position);
            }
            Err(error) => last = Some(error),
        }
        pause(rng, 10, 200).await;
    }
    Err(last.expect("at least one attempt"))
}

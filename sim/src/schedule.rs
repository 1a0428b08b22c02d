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

use bytes::Bytes;
use futures::stream;
use mend::catalog::ObjectStoreCatalog;
use mend::catalog::object_store::ObjectStoreCatalogOptions;
use mend::engine::{
    BeginOperation, CommitRequest, CommitSplit, ExternalKind, IntentReport, OperationPhase,
    OperationView, Outcome, PlannedSplit,
};
use mend::gates::ObjectStoreGates;
use mend::model::{CheckpointDelta, DatasetConfig, PartitionDelta};
use mend::objects::SplitObjects;
use mend::objects::format::sha256;
use mend::runtime::PolicyRuntime;
use mend::runtime::registry::PolicyRegistry;
use mend::{Engine, EngineOptions, MendError};
use mend_contract::RecoveryDecision;
use object_store::ObjectStore;
use object_store::path::Path;

use crate::check::{self, Claim, History, OperationRecord, PositionRead, SweepRecord};
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
}

impl Config {
    /// The schedule `scripts/test` and the bench run: 3 protocol writers (one forgetful, one
    /// that begins without operation ids) and 2
    /// committers of 10 operations each (50 operations, plus the supervisors' sweeps), 2
    /// replicas, an operator, a reader, a store that fails 3% of requests before and 3% of
    /// writes after their effect, and stalls 2 in 1000 past every lease; one run in ten with a
    /// replica's clock beyond the gates' allowance.
    pub fn standard() -> Self {
        Self {
            protocol_writers: 3,
            committers: 2,
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
        }
    }

    /// Operations the writers run (sweeps not counted).
    pub fn operations(&self) -> usize {
        (self.protocol_writers + self.committers) * self.operations_each
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
    /// Every check that failed; empty when the run held.
    pub violations: Vec<check::Violation>,
    /// The digest of the trace, and its line count: equal for equal seeds and configs.
    pub trace_digest: u64,
    pub trace_lines: u64,
    /// The trace's lines, when the config kept them.
    pub trace: Vec<String>,
    /// Simulated time the run took, in ms.
    pub simulated_ms: u64,
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
             linearized, {} policy changes checked, {}{}{}{} simulated s, \
             trace {:016x} ({} lines): {}",
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

/// Percent of requests cut off part way (see [`with_retries`]).
const CUT_PCT: u64 = 4;
/// How many times a writer sends a step again after an answer whose outcome is unknown.
const RETRIES: usize = 4;
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
    runtime.block_on(async {
        let time = SimTime::start();
        // Installed before any engine is built, and held until the run ends: every id and
        // wall-clock read of the engine comes from the seed and simulated time.
        let _ambient = mend::ambient::install(SimAmbient::new(seed, time));
        let cluster = simulated_cluster(seed, config, time);
        run_on_runtime(seed, config, cluster).await
    })
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
    let echoes = Echoes::default();
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
        violations: found.violations,
        trace_digest,
        trace_lines,
        trace: trace.lines(),
        simulated_ms: time.elapsed_ms(),
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
    let registry = replicas[0]
        .registry
        .records()
        .await
        .unwrap_or_else(|error| {
            unreadable.push(format!("the policy registry cannot be read: {error}"));
            Vec::new()
        });
    check::End {
        rows,
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
        unsettled,
        quiet_wait_ms,
        quiet_rounds: QUIET_ROUNDS,
        unreadable,
    }
}

/// Every row of the dataset, by id, with its state.
async fn all_rows(engine: &Engine) -> mend::Result<BTreeMap<String, mend::model::SplitState>> {
    let mut rows = BTreeMap::new();
    let mut query = mend::model::ListQuery::default();
    loop {
        let page = engine.list_splits(DATASET, &query).await?;
        for row in page.splits {
            rows.insert(row.split_id, row.state);
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
    echoes: &Echoes,
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
        supervisors.push(tokio::spawn(supervise(
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
        writers.push(tokio::spawn(protocol_writer(
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
        writers.push(tokio::spawn(committer(
            index,
            replicas.to_vec(),
            SimRng::fork(seed, &format!("committer-{index}")),
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
    }
    for index in 0..config.readers {
        supervisors.push(tokio::spawn(crate::operator::reader(
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
            if may_sweep(replica) {
                sweep_once(index, replica, history, trace).await;
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
/// a run: a staged split untouched for 4 simulated s that no intent names is abandoned, a
/// marked one is deleted 2 s after its mark, and an object without a row is an orphan after 4 s.
const DATASET_CONFIG: DatasetConfig = DatasetConfig {
    staged_grace_period_ms: 4_000,
    deletion_grace_period_ms: 2_000,
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
async fn read_position(
    engine: &Engine,
    partition: &str,
    rng: &mut SimRng,
    history: &Mutex<History>,
    trace: &Trace,
) -> Result<Option<u64>, MendError> {
    let mut last = None;
    for _ in 0..=RETRIES {
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

fn payload_of(split_id: &str) -> Vec<u8> {
    split_id.bytes().cycle().take(64).collect()
}

fn body(bytes: &[u8]) -> impl futures::Stream<Item = Result<Bytes, MendError>> + Send + Unpin {
    stream::iter(vec![Ok(Bytes::copy_from_slice(bytes))])
}

/// What an answer to a step that ends an operation claims about it.
fn claim_of(answer: &Result<OperationView, MendError>) -> Claim {
    match answer {
        Ok(view) => match view.phase {
            OperationPhase::Published => Claim::Published,
            OperationPhase::Ended => Claim::Ended,
            OperationPhase::Armed | OperationPhase::EffectsConfirmed => Claim::Nothing,
        },
        Err(error) => refusal_claim(error),
    }
}

/// A 412 names what the step found: the publish, a confirmation (which publishes unless
/// another operation publishes from the same positions first), or the end, in the engine's
/// own words; any other answer claims nothing about the end.
fn refusal_claim(error: &MendError) -> Claim {
    const PUBLISHED: [&str; 2] = [
        "already published, at manifest version",
        "published at manifest version",
    ];
    const CONFIRMED: &str = "confirmed its effects (phase effects_confirmed)";
    const ENDED: &str = "has ended without publishing";
    let MendError::FailedPrecondition { .. } = error else {
        return Claim::Nothing;
    };
    let message = error.to_string();
    if message.contains(CONFIRMED) {
        Claim::PublishesUnlessOvertaken
    } else if PUBLISHED.iter().any(|words| message.contains(words)) {
        Claim::Published
    } else if message.contains(ENDED) {
        Claim::Ended
    } else {
        Claim::Nothing
    }
}

/// A publish's answer: its view, or a refusal. A refusal that names neither the publish nor
/// the end says the operation has not published, and, in this run's writers (which give an
/// operation up once its publish is refused), never will.
fn publish_claim(answer: &Result<OperationView, MendError>) -> Claim {
    match answer {
        Err(error @ (MendError::FailedPrecondition { .. } | MendError::NotFound { .. })) => {
            match refusal_claim(error) {
                Claim::Nothing => Claim::NotPublished,
                claim => claim,
            }
        }
        answer => claim_of(answer),
    }
}

/// Sends `step` until its answer's outcome is known, at most [`RETRIES`] times more, each time
/// to a replica drawn anew (a client retrying through a load balancer).
pub(crate) async fn with_retries<T, F, Fut>(
    replicas: &[Replica],
    rng: &mut SimRng,
    trace: &Trace,
    what: &str,
    mut step: F,
) -> Result<T, MendError>
where
    F: FnMut(Engine) -> Fut,
    Fut: std::future::Future<Output = Result<T, MendError>>,
{
    let mut attempt = 0;
    loop {
        let replica = &replicas[rng.below(replicas.len() as u64) as usize];
        // Sometimes the request is cut off part way (the client's connection drops, and the
        // server drops the request's future at whatever await point it had reached): the
        // client sees an unknown outcome.
        let cut_after_ms = rng.chance(CUT_PCT).then(|| rng.between(1, 120));
        let answer = match cut_after_ms {
            None => replica.serve(&mut step).await,
            Some(ms) => {
                match tokio::time::timeout(Duration::from_millis(ms), replica.serve(&mut step))
                    .await
                {
                    Ok(answer) => answer,
                    Err(_) => {
                        trace.line(format!("{what}: cut off after {ms} ms"));
                        Err(MendError::Unavailable {
                            message: format!("{what}: the request was cut off after {ms} ms"),
                            source: None,
                        })
                    }
                }
            }
        };
        match &answer {
            Err(error) if error.is_retryable() && attempt < RETRIES => {
                trace.line(format!("{what}: {error}; sending it again"));
                attempt += 1;
                pause(rng, 5, 300).await;
            }
            _ => return answer,
        }
    }
}

/// Percent of a protocol writer's requests that reach a replica a second time, later: a copy
/// the network duplicated, or a client's retry layer sent again after the writer had moved
/// on. The copy lands 0 to [`ECHO_DELAY_MS`] after the request, so it is reordered with the
/// writer's next steps (a begin landing after its publish, an upload or a publish after the
/// abort, an abort after the publish).
const ECHO_PCT: u64 = 5;
/// How late an echo lands at most, in simulated ms.
const ECHO_DELAY_MS: u64 = 4_000;

/// The copies of requests in flight (see [`ECHO_PCT`]): each answers as the request would, and
/// what it claims about its operation's end is held to storage as any answer is. The run waits
/// for every copy before its quiet phase.
#[derive(Clone, Default)]
pub(crate) struct Echoes {
    in_flight: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    sent: Arc<std::sync::atomic::AtomicUsize>,
}

impl Echoes {
    /// Waits for every copy sent to be answered; returns how many were.
    pub(crate) async fn landed(&self) -> usize {
        let handles = std::mem::take(
            &mut *self
                .in_flight
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for handle in handles {
            handle.await.expect("a request's copy panicked");
        }
        self.sent.load(Ordering::SeqCst)
    }
}

/// What an upload's answer claims: only what a refusal names.
fn upload_claim(answer: &Result<(), MendError>) -> Claim {
    match answer {
        Ok(()) => Claim::Nothing,
        Err(error) => refusal_claim(error),
    }
}

/// A writer through the operation protocol: begin, upload, perhaps heartbeat or stop, then
/// publish, abort, or both at once from two replicas.
async fn protocol_writer(
    index: usize,
    replicas: Vec<Replica>,
    mut rng: SimRng,
    config: Config,
    history: Arc<Mutex<History>>,
    trace: Trace,
    echoes: Echoes,
) {
    let client = Client {
        replicas: &replicas,
        trace: &trace,
        history: &history,
        echoes: &echoes,
    };
    let partition = format!("w{index}");
    let forgetful = index + config.forgetful_writers >= config.protocol_writers;
    let unkeyed = index < config.unkeyed_writers;
    // The operation whose end this writer does not know (it crashed, or its last answer was
    // unknown): as the exactly-once loop of docs/src/writers.md says, the writer sends it again until it
    // knows, and only then reads the position it continues from.
    let mut in_doubt: Option<String> = None;
    for number in 0..config.operations_each {
        pause(&mut rng, 0, 400).await;
        if let Some(operation_id) = in_doubt.take() {
            if forgetful {
                trace.line(format!("{operation_id}: forgotten by its writer"));
            } else {
                resolve(&client, &mut rng, &operation_id).await;
            }
        }
        let operation_id = format!("w{index}-{number}");
        let reader = replicas[rng.below(replicas.len() as u64) as usize].engine();
        let from = match read_position(&reader, &partition, &mut rng, &history, &trace).await {
            Ok(from) => from,
            Err(error) => {
                trace.line(format!(
                    "{operation_id}: cannot read the checkpoint: {error}"
                ));
                continue;
            }
        };
        let splits: Vec<String> = (0..rng.between(1, 2))
            .map(|split| format!("{operation_id}-s{split}"))
            .collect();
        let request = begin_request(index, &partition, &operation_id, unkeyed, &splits, from);
        let operation_id = match begin(
            &client,
            &mut rng,
            operation_id,
            &partition,
            from,
            &splits,
            &request,
            unkeyed,
        )
        .await
        {
            Ok(operation_id) => operation_id,
            Err(unknown) => {
                in_doubt = unknown;
                continue;
            }
        };
        let claim = |claim: Claim, by: String| {
            history
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .claim(&operation_id, claim, by, trace.now_ms());
        };
        let uploaded_all =
            upload_all(&client, &mut rng, &config, &operation_id, &splits, &claim).await;
        if rng.chance(config.crash_pct) {
            trace.line(format!("{operation_id}: the writer crashes"));
            in_doubt = Some(operation_id.clone());
            continue;
        }
        maybe_slow(&client, &mut rng, &operation_id, &claim).await;
        let known = end_operation(&client, &mut rng, &operation_id, uploaded_all, &claim).await;
        if !known {
            in_doubt = Some(operation_id.clone());
        }
    }
}

/// A protocol writer's begin, recorded in the history and sent until it is answered. Answers
/// the operation's id to go on with (an unkeyed writer's is the one the engine gave), or,
/// when it cannot go on, the id of an operation whose end it does not know (`None`: it was
/// not begun, or it is left to recovery unnamed).
#[allow(clippy::too_many_arguments)]
async fn begin(
    client: &Client<'_>,
    rng: &mut SimRng,
    mut operation_id: String,
    partition: &str,
    from: Option<u64>,
    splits: &[String],
    request: &BeginOperation,
    unkeyed: bool,
) -> Result<String, Option<String>> {
    let (replicas, history, trace) = (client.replicas, client.history, client.trace);
    history
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .operations
        .push(OperationRecord {
            operation_id: operation_id.clone(),
            partition: partition.to_string(),
            from: from.unwrap_or(0),
            split_ids: splits.to_vec(),
            invoked_ms: trace.now_ms(),
            claims: Vec::new(),
        });
    trace.line(format!(
        "{operation_id}: begin from {from:?} with {splits:?}"
    ));
    let begin = |engine: Engine| {
        let request = request.clone();
        async move { engine.begin_operation(&request).await }
    };
    let begun = with_retries(replicas, rng, trace, &operation_id, begin).await;
    // An unkeyed begin sent again is another operation, not a copy (see `unkeyed_writers`).
    if !unkeyed {
        client.maybe_echo(rng, &operation_id, "begin", begin, claim_of);
    }
    match begun {
        Err(error) => {
            trace.line(format!("{operation_id}: begin answered {error}"));
            if error.certainly_not_applied() {
                history
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .claim(
                        &operation_id,
                        Claim::NotBegun,
                        format!("begin answered {error}"),
                        trace.now_ms(),
                    );
                return Err(None);
            }
            if unkeyed {
                // Its name unknown, nobody can end it but recovery.
                trace.line(format!("{operation_id}: left to recovery, unnamed"));
                return Err(None);
            }
            return Err(Some(operation_id));
        }
        Ok(view) if unkeyed => {
            // From here on the operation is known by the name the engine gave it.
            trace.line(format!("{operation_id}: named {}", view.operation_id));
            let mut history = history.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(record) = history
                .operations
                .iter_mut()
                .find(|record| record.operation_id == operation_id)
            {
                record.operation_id = view.operation_id.clone();
            }
            operation_id = view.operation_id;
        }
        Ok(_) => {}
    }
    Ok(operation_id)
}

/// A protocol writer's uploads, in order; a crash may come between any two (then it stops
/// uploading). Answers whether every object was uploaded.
async fn upload_all(
    client: &Client<'_>,
    rng: &mut SimRng,
    config: &Config,
    operation_id: &str,
    splits: &[String],
    claim: &impl Fn(Claim, String),
) -> bool {
    let mut uploaded_all = true;
    for split_id in splits {
        if rng.chance(config.crash_pct / 2) {
            break;
        }
        let payload = payload_of(split_id);
        let upload = |engine: Engine| {
            let (operation_id, split_id, payload) =
                (operation_id.to_string(), split_id.clone(), payload.clone());
            async move {
                engine
                    .upload_object(DATASET, &operation_id, &split_id, body(&payload))
                    .await
                    .map(|_| ())
            }
        };
        let uploaded = with_retries(client.replicas, rng, client.trace, operation_id, upload).await;
        client.maybe_echo(rng, operation_id, "upload", upload, upload_claim);
        client
            .trace
            .line(format!("{operation_id}: upload {split_id}: {uploaded:?}"));
        if let Err(error) = uploaded {
            uploaded_all = false;
            claim(refusal_claim(&error), format!("upload answered {error}"));
            break;
        }
    }
    uploaded_all
}

/// Sometimes a writer is slow: past the lease (the supervisor may settle its operation
/// first), with or without a heartbeat before.
async fn maybe_slow(
    client: &Client<'_>,
    rng: &mut SimRng,
    operation_id: &str,
    claim: &impl Fn(Claim, String),
) {
    if rng.chance(25) {
        if rng.chance(50) {
            let heartbeat = |engine: Engine| {
                let operation_id = operation_id.to_string();
                async move {
                    engine
                        .heartbeat_operation(DATASET, &operation_id, Some(OPERATION_LEASE_MS))
                        .await
                }
            };
            let beat =
                with_retries(client.replicas, rng, client.trace, operation_id, heartbeat).await;
            client.maybe_echo(rng, operation_id, "heartbeat", heartbeat, claim_of);
            client.trace.line(format!(
                "{operation_id}: heartbeat: {:?}",
                beat.as_ref().map(|v| v.phase)
            ));
            if let Err(error) = &beat {
                claim(refusal_claim(error), format!("heartbeat answered {error}"));
            }
        }
        pause(rng, OPERATION_LEASE_MS / 2, OPERATION_LEASE_MS * 2).await;
    }
}

/// The begin a protocol writer sends: its splits, each a payload derived from its id, and a
/// checkpoint delta moving its partition on by one from `from`.
fn begin_request(
    index: usize,
    partition: &str,
    operation_id: &str,
    unkeyed: bool,
    splits: &[String],
    from: Option<u64>,
) -> BeginOperation {
    BeginOperation {
        dataset_id: DATASET.into(),
        // An unkeyed writer lets the engine name the operation: a begin sent again after
        // an unknown answer is another operation.
        operation_id: (!unkeyed).then(|| operation_id.to_string()),
        kind: ExternalKind::Commit,
        node: format!("writer-{index}"),
        lease_ms: Some(OPERATION_LEASE_MS),
        splits: splits
            .iter()
            .map(|split_id| {
                let payload = payload_of(split_id);
                PlannedSplit {
                    split_id: split_id.clone(),
                    metadata_json: "{}".into(),
                    size: payload.len() as u64,
                    sha256: sha256(&payload),
                }
            })
            .collect(),
        checkpoint_delta: Some(CheckpointDelta {
            source: SOURCE.into(),
            partitions: vec![PartitionDelta {
                partition: partition.to_string(),
                from_position: from,
                to_position: from.unwrap_or(0) + 1,
            }],
        }),
        replaced_split_ids: Vec::new(),
        publish_token: None,
    }
}

/// How a protocol writer ends its operation, drawn: an abort (more often when an upload
/// failed), a publish and an abort at once from two replicas, or a publish (given up with an
/// abort when refused without a word on its end). Answers whether the writer knows the end.
async fn end_operation(
    client: &Client<'_>,
    rng: &mut SimRng,
    operation_id: &str,
    uploaded_all: bool,
    claim: &impl Fn(Claim, String),
) -> bool {
    let (replicas, trace) = (client.replicas, client.trace);
    let ending = rng.below(100);
    if ending < 10 || !uploaded_all && ending < 50 {
        let aborted = send_end(End::Abort, client, rng, operation_id).await;
        claim(claim_of(&aborted), format!("abort answered {aborted:?}"));
        knows_end(&aborted)
    } else if ending < 18 {
        // A publish and an abort sent at once, from two replicas.
        let (first, second) = (
            &replicas[rng.below(replicas.len() as u64) as usize],
            &replicas[rng.below(replicas.len() as u64) as usize],
        );
        let id = operation_id;
        let (published, aborted) = futures::join!(
            first.serve(|engine| async move { engine.publish_operation(DATASET, id).await }),
            second.serve(|engine| async move { engine.abort_operation(DATASET, id).await })
        );
        trace.line(format!(
            "{operation_id}: publish and abort at once: {:?} / {:?}",
            published.as_ref().map(|v| v.phase),
            aborted.as_ref().map(|v| v.phase)
        ));
        claim(
            publish_claim(&published),
            "a publish racing an abort".into(),
        );
        claim(claim_of(&aborted), "an abort racing a publish".into());
        knows_end(&published) || knows_end(&aborted)
    } else {
        let published = send_end(End::Publish, client, rng, operation_id).await;
        claim(
            publish_claim(&published),
            format!("publish answered {published:?}"),
        );
        // Refused without a word on its end (objects missing, the checkpoint moved): the
        // writer gives it up, as a client is told to.
        match &published {
            Err(error) if refusal_claim(error) == Claim::Nothing && !error.is_retryable() => {
                let aborted = send_end(End::Abort, client, rng, operation_id).await;
                claim(claim_of(&aborted), format!("abort answered {aborted:?}"));
                knows_end(&aborted)
            }
            answer => knows_end(answer),
        }
    }
}

/// The step that ends an operation.
#[derive(Debug, Clone, Copy)]
enum End {
    Publish,
    Abort,
}

/// What a protocol writer sends its requests through: the replicas, and where their answers
/// and late copies go.
#[derive(Clone, Copy)]
struct Client<'a> {
    replicas: &'a [Replica],
    trace: &'a Trace,
    history: &'a Arc<Mutex<History>>,
    echoes: &'a Echoes,
}

impl Client<'_> {
    /// Sometimes sends `step` again later, to a replica drawn anew, and records what its
    /// answer claims about `operation_id` (judged by `claim`).
    fn maybe_echo<T, F, Fut>(
        &self,
        rng: &mut SimRng,
        operation_id: &str,
        what: &'static str,
        step: F,
        claim: fn(&Result<T, MendError>) -> Claim,
    ) where
        F: FnOnce(Engine) -> Fut,
        Fut: std::future::Future<Output = Result<T, MendError>> + Send + 'static,
        T: std::fmt::Debug + Send + 'static,
    {
        if !rng.chance(ECHO_PCT) {
            return;
        }
        let delay_ms = rng.between(0, ECHO_DELAY_MS);
        // Served by the process running when it was sent: cut off if that one crashes first.
        let replica = &self.replicas[rng.below(self.replicas.len() as u64) as usize];
        let (process, index) = (replica.process(), replica.index);
        let copy = step(process.engine.clone());
        let (trace, history, operation_id) = (
            self.trace.clone(),
            self.history.clone(),
            operation_id.to_string(),
        );
        trace.line(format!(
            "{operation_id}: a copy of its {what} lands in {delay_ms} ms"
        ));
        let handle = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            let answer = process
                .unless_crashed(copy)
                .await
                .unwrap_or_else(|| Err(crate::replica::crash_error(index)));
            trace.line(format!(
                "{operation_id}: the late copy of its {what} answered {answer:?}"
            ));
            history
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .claim(
                    &operation_id,
                    claim(&answer),
                    format!("a late copy of its {what} answered {answer:?}"),
                    trace.now_ms(),
                );
        });
        self.echoes.sent.fetch_add(1, Ordering::SeqCst);
        self.echoes
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(handle);
    }
}

/// Sends `step` of `operation_id` (with retries) and traces its answer; sometimes a copy of it
/// lands later ([`Echoes`]).
async fn send_end(
    step: End,
    client: &Client<'_>,
    rng: &mut SimRng,
    operation_id: &str,
) -> Result<OperationView, MendError> {
    let Client {
        replicas, trace, ..
    } = *client;
    let end = |engine: Engine| {
        let operation_id = operation_id.to_string();
        async move {
            match step {
                End::Publish => engine.publish_operation(DATASET, &operation_id).await,
                End::Abort => engine.abort_operation(DATASET, &operation_id).await,
            }
        }
    };
    let answer = with_retries(replicas, rng, trace, operation_id, end).await;
    let what = match step {
        End::Publish => "publish",
        End::Abort => "abort",
    };
    // A late copy claims only what it names: a publish refused for another reason than the
    // end says nothing, since its writer may publish after it.
    client.maybe_echo(rng, operation_id, what, end, claim_of);
    trace.line(format!(
        "{operation_id}: {step:?}: {:?}",
        answer.as_ref().map(|v| v.phase)
    ));
    answer
}

/// Whether `answer` tells its writer how the operation ended: published, or ended without
/// publishing. "Confirmed" does not (another operation may overtake it); a writer sends the
/// publish again until it is told.
fn knows_end(answer: &Result<OperationView, MendError>) -> bool {
    const KNOWN: [&str; 3] = [
        "already published, at manifest version",
        "published at manifest version",
        "has ended without publishing",
    ];
    match answer {
        Ok(view) => matches!(
            view.phase,
            OperationPhase::Published | OperationPhase::Ended
        ),
        Err(error @ MendError::FailedPrecondition { .. }) => {
            let message = error.to_string();
            KNOWN.iter().any(|words| message.contains(words))
        }
        Err(_) => false,
    }
}

/// Sends an operation whose end its writer does not know again until it does: its publish
/// (which answers published, or why not), then, refused for another reason than its end, its
/// abort. Faults are drawn per request, so this ends; a bound keeps a broken run finite.
async fn resolve(client: &Client<'_>, rng: &mut SimRng, operation_id: &str) {
    let Client { trace, history, .. } = *client;
    let claim = |claim: Claim, by: String| {
        history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .claim(operation_id, claim, by, trace.now_ms());
    };
    for _ in 0..20 {
        let published = send_end(End::Publish, client, rng, operation_id).await;
        claim(
            publish_claim(&published),
            format!("a resolving publish answered {published:?}"),
        );
        if knows_end(&published) {
            return;
        }
        if matches!(&published, Err(error) if refusal_claim(error) == Claim::Nothing && !error.is_retryable())
        {
            let aborted = send_end(End::Abort, client, rng, operation_id).await;
            claim(
                claim_of(&aborted),
                format!("a resolving abort answered {aborted:?}"),
            );
            if knows_end(&aborted) {
                return;
            }
        }
        pause(rng, 50, 500).await;
    }
    trace.line(format!("{operation_id}: still unresolved after 20 rounds"));
}

/// A writer committing in process: one `Engine::commit` per operation, its answer final.
async fn committer(
    index: usize,
    replicas: Vec<Replica>,
    mut rng: SimRng,
    config: Config,
    history: Arc<Mutex<History>>,
    trace: Trace,
) {
    let partition = format!("c{index}");
    for number in 0..config.operations_each {
        pause(&mut rng, 0, 400).await;
        let engine = replicas[rng.below(replicas.len() as u64) as usize].engine();
        let label = format!("c{index}-{number}");
        let from = match read_position(&engine, &partition, &mut rng, &history, &trace).await {
            Ok(from) => from,
            Err(error) => {
                trace.line(format!("{label}: cannot read the checkpoint: {error}"));
                continue;
            }
        };
        let split_ids: Vec<String> = (0..rng.between(1, 3))
            .map(|split| format!("{label}-s{split}"))
            .collect();
        let request = CommitRequest {
            dataset_id: DATASET.into(),
            node: format!("committer-{index}"),
            splits: split_ids
                .iter()
                .map(|split_id| CommitSplit {
                    split_id: split_id.clone(),
                    metadata_json: "{}".into(),
                    payload: Bytes::from(payload_of(split_id)),
                })
                .collect(),
            checkpoint_delta: Some(CheckpointDelta {
                source: SOURCE.into(),
                partitions: vec![PartitionDelta {
                    partition: partition.clone(),
                    from_position: from,
                    to_position: from.unwrap_or(0) + 1,
                }],
            }),
            publish_token: None,
        };
        let invoked_ms = trace.now_ms();
        // Sometimes the process dies part way through the commit: its future is dropped at
        // whatever await point it reached, and recovery finds what it left.
        let answer = match rng.chance(CUT_PCT).then(|| rng.between(1, 120)) {
            None => engine.commit(&request).await,
            Some(ms) => tokio::time::timeout(Duration::from_millis(ms), engine.commit(&request))
                .await
                .unwrap_or_else(|_| {
                    Err(MendError::Unavailable {
                        message: format!("{label}: the committing process died after {ms} ms"),
                        source: None,
                    })
                }),
        };
        trace.line(format!(
            "{label}: commit from {from:?}: {:?}",
            answer.as_ref().map(|result| &result.operation_id)
        ));
        let claim = match &answer {
            Ok(_) => Claim::Published,
            Err(error) if error.certainly_not_applied() => Claim::NotBegun,
            Err(_) => Claim::Nothing,
        };
        let mut history = history.lock().unwrap_or_else(PoisonError::into_inner);
        history.operations.push(OperationRecord {
            operation_id: label.clone(),
            partition: partition.clone(),
            from: from.unwrap_or(0),
            split_ids,
            invoked_ms,
            claims: Vec::new(),
        });
        history.claim(
            &label,
            claim,
            format!("commit answered {answer:?}"),
            trace.now_ms(),
        );
    }
}

/// What a sweep's report of one intent says of the operation's end: rolled forward is
/// published; abandoned or rolled back is ended; anything else says nothing.
pub(crate) fn sweep_claim(intent: &IntentReport) -> Claim {
    match (&intent.outcome, &intent.decision) {
        (Outcome::Executed, RecoveryDecision::RollForward) => Claim::Published,
        (Outcome::Executed, RecoveryDecision::RollBack | RecoveryDecision::Abandon(_)) => {
            Claim::Ended
        }
        _ => Claim::Nothing,
    }
}

/// A replica's supervisor: sweeps the dataset now and then, as `mend serve` does.
async fn supervise(
    index: usize,
    replica: Replica,
    mut rng: SimRng,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<History>>,
    trace: Trace,
) {
    while !stop.load(Ordering::SeqCst) {
        pause(&mut rng, 200, 2_000).await;
        crate::policy::follow(index, &replica, &history, &trace).await;
        if may_sweep(&replica) {
            sweep_once(index, &replica, &history, &trace).await;
        } else {
            trace.line(format!(
                "replica {index} does not sweep: it does not own the dataset by its last view, or its membership ran out"
            ));
        }
    }
}

/// Whether `replica`'s supervisor may start a sweep: always without a fleet, and with one only
/// while it owns the dataset and its membership is live by its own monotonic clock.
fn may_sweep(replica: &Replica) -> bool {
    replica
        .process()
        .fleet
        .as_ref()
        .is_none_or(|fleet| fleet.may_sweep(DATASET))
}

async fn sweep_once(index: usize, replica: &Replica, history: &Mutex<History>, trace: &Trace) {
    let swept = replica
        .serve(|engine| async move { engine.roll_forward_gated(DATASET).await })
        .await;
    let mut history = history.lock().unwrap_or_else(PoisonError::into_inner);
    match swept {
        Ok(sweep) => {
            let mut settled = BTreeMap::new();
            for intent in &sweep.report.intents {
                let claim = sweep_claim(intent);
                settled.insert(
                    intent.operation_id.clone(),
                    format!("{:?} {:?}", intent.decision, intent.outcome),
                );
                history.claim(
                    &intent.operation_id,
                    claim,
                    format!(
                        "replica {index}'s sweep: {:?} {:?}",
                        intent.decision, intent.outcome
                    ),
                    trace.now_ms(),
                );
            }
            trace.line(format!("replica {index} swept: {settled:?}"));
            history.sweeps.push(SweepRecord {
                replica: index,
                gate_epoch: sweep.gate_epoch,
                // Back to simulated time: the replica's clock is off by its skew.
                from_ms: sweep.held_from_ms - replica.skew_ms,
                until_ms: sweep.held_until_ms - replica.skew_ms,
            });
        }
        Err(error) => trace.line(format!("replica {index}'s sweep: {error}")),
    }
}

//! Replays the model's paths against the real engine on the memory catalog, and compares the
//! states after every action.
//!
//! Every path of the model (deployed as [`Config::REPLAYED`]: gates shared in one process) to
//! [`DEPTH`] actions is driven through the engine: two writers' calls on one engine, two
//! replicas' roll-forward sweeps and the operator's exclusive recovery on engines of their
//! own, over one memory catalog, one object store and one set of gates, with a manual clock.
//! The catalog is stepped ([`stepped`]): each engine call waits, in its own task, before each
//! of the protocol's conditional writes until the action that makes that write is replayed.
//! After each action the model's state is compared with what the catalog holds (each intent's
//! phase, lease and age, each split's row and object, the checkpoint, the fencing epoch, the
//! recorded publishes), where each call stands (parked at which write, or answered), and what
//! each answer claimed. Each action dispatches through [`mend_model::table`]'s entry for it.

mod stepped;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use mend::catalog::{Catalog, ObjectStoreCatalog};
use mend::clock::ManualClock;
use mend::engine::{BeginOperation, ExternalKind, OperationPhase, OperationView, PlannedSplit};
use mend::gates::InProcessGates;
use mend::intent::IntentPhase;
use mend::model::{CheckpointDelta, PartitionDelta, SplitState};
use mend::objects::SplitObjects;
use mend::objects::format::sha256;
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions, MendError, OperationFound, RecoveryMode};
use mend_model::paths::{Path, for_each_path};
use mend_model::state::{AbortCall, Operator, Phase, PublishCall, SplitRow, State, WRITERS};
use mend_model::table::{ACTION_TABLE, ActionKind, entry_of};
use mend_model::{Action, Config, Protocol, TIME_UNIT_MS};
use object_store::memory::InMemory;
use object_store::path::Path as StorePath;
use tokio::task::JoinHandle;

use stepped::{ACTOR, SteppedCatalog, Stepper};

/// How deep the replayed paths go, in actions, unless `MEND_MODEL_REPLAY_DEPTH` says otherwise.
const DEPTH: usize = 5;

fn depth() -> usize {
    match std::env::var("MEND_MODEL_REPLAY_DEPTH") {
        // A depth of 0 would replay nothing and pass.
        Ok(depth) => depth
            .parse()
            .ok()
            .filter(|depth| (1..=12).contains(depth))
            .unwrap_or_else(|| {
                panic!("MEND_MODEL_REPLAY_DEPTH is {depth:?}: a depth of 1 to 12 actions")
            }),
        Err(_) => DEPTH,
    }
}
/// The clock's start.
const EPOCH_MS: i64 = 1_700_000_000_000;
const DATASET: &str = "replayed";

/// The actor of each call that steps: a writer's publish and abort, each replica, the
/// operator; and the free actor, for calls that run whole (one action each).
fn publish_actor(w: usize) -> u8 {
    w as u8
}
fn abort_actor(w: usize) -> u8 {
    10 + w as u8
}
fn replica_actor(r: usize) -> u8 {
    20 + r as u8
}
const OPERATOR_ACTOR: u8 = 30;
const FREE_ACTOR: u8 = 40;

fn operation_id(w: usize) -> String {
    format!("w{w}")
}
fn split_id(w: usize) -> String {
    format!("s{w}")
}
fn payload(w: usize) -> Vec<u8> {
    format!("payload of split s{w}").into_bytes()
}

/// What an answer claimed about the operation's end (the model's `Answer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    Nothing,
    Published,
    /// Confirmed: no step of the protocol confirms, so the model never answers it; an engine
    /// that did would differ from the model here.
    WillPublish,
    Ended,
}

fn claim_of_view(view: &mend::Result<OperationView>) -> Claim {
    match view {
        Ok(view) => match view.phase {
            OperationPhase::Published => Claim::Published,
            OperationPhase::Ended => Claim::Ended,
            // "The publish is under way (recovery finishes it)".
            OperationPhase::EffectsConfirmed => Claim::WillPublish,
            OperationPhase::Armed => Claim::Nothing,
        },
        // A refusal says in structure how it found the operation: fenced or ended (it never
        // publishes), published, or confirmed (it publishes: each writer moves a partition of
        // its own, so no other operation overtakes it).
        Err(error) => match error.operation_found() {
            Some(OperationFound::Ended) => Claim::Ended,
            Some(OperationFound::Published) => Claim::Published,
            Some(OperationFound::Confirmed) => Claim::WillPublish,
            Some(_) | None => Claim::Nothing,
        },
    }
}

/// A call in flight, parked at a conditional write or answered.
type Call = JoinHandle<Claim>;

/// The engines, the catalog they share, and the calls in flight.
struct Replay {
    clock: Arc<ManualClock>,
    catalog: Arc<SteppedCatalog>,
    objects: SplitObjects,
    writers: Engine,
    replicas: [Engine; 2],
    operator: Engine,
    publishes: [Option<Call>; WRITERS],
    aborts: [Option<Call>; WRITERS],
    sweeps: [Option<JoinHandle<()>>; 2],
    exclusive: Option<JoinHandle<()>>,
    /// Claims answered so far, per writer.
    claims: [Vec<Claim>; WRITERS],
}

impl Replay {
    async fn new(policy: &PolicyRuntime) -> Self {
        let clock = Arc::new(ManualClock::new(EPOCH_MS));
        let store = Arc::new(InMemory::new());
        let stepper = Arc::new(Stepper::default());
        let inner: Arc<dyn Catalog> = Arc::new(ObjectStoreCatalog::new(
            store.clone(),
            StorePath::from("catalog"),
            Default::default(),
        ));
        let catalog = Arc::new(SteppedCatalog { inner, stepper });
        let objects = SplitObjects::new(store, StorePath::from("objects"));
        let options = EngineOptions {
            clock: clock.clone(),
            intent_lease_ms: Config::REPLAYED.intent_lease as i64 * TIME_UNIT_MS,
            ..EngineOptions::default()
        };
        let engine = |gates: Arc<InProcessGates>| {
            Engine::new(
                catalog.clone(),
                objects.clone(),
                policy.clone(),
                options.clone(),
            )
            .expect("the engine starts")
            .with_gates(gates)
        };
        // One set of gates for the replicas and the operator: one process's gates, which are
        // never taken over (the model's `gate_lease: None`).
        let gates = Arc::new(InProcessGates::new());
        let writers = engine(Arc::new(InProcessGates::new()));
        writers
            .create_dataset(DATASET, &Default::default())
            .await
            .expect("create the dataset");
        Self {
            replicas: [engine(gates.clone()), engine(gates.clone())],
            operator: engine(gates),
            writers,
            clock,
            catalog,
            objects,
            publishes: [None, None],
            aborts: [None, None],
            sweeps: [None, None],
            exclusive: None,
            claims: [Vec::new(), Vec::new()],
        }
    }

    fn stepper(&self) -> &Stepper {
        &self.catalog.stepper
    }

    /// Runs `call` whole as the free actor.
    async fn run_whole<T: Send + 'static>(
        &self,
        call: impl Future<Output = T> + Send + 'static,
    ) -> T {
        self.stepper().set_unlimited(FREE_ACTOR, true);
        tokio::spawn(ACTOR.scope(FREE_ACTOR, call))
            .await
            .expect("the call does not panic")
    }

    /// Lets `actor` run until it waits at its next conditional write or its call ended:
    /// which write, or `None`.
    async fn settle_down<T>(&self, actor: u8, call: &JoinHandle<T>) -> Option<&'static str> {
        for _ in 0..100_000 {
            if call.is_finished() {
                return None;
            }
            if let Some(at) = self.stepper().parked_at(actor) {
                return Some(at);
            }
            tokio::task::yield_now().await;
        }
        panic!("actor {actor} neither ended nor reached a conditional write");
    }

    /// Starts `call` as `actor`, parked at its first conditional write (or ended).
    async fn start<T: Send + 'static>(
        &self,
        actor: u8,
        call: impl Future<Output = T> + Send + 'static,
    ) -> (JoinHandle<T>, Option<&'static str>) {
        self.stepper().set_unlimited(actor, false);
        let handle = tokio::spawn(ACTOR.scope(actor, call));
        let at = self.settle_down(actor, &handle).await;
        (handle, at)
    }

    /// Grants `actor` its next conditional write and lets it run to the one after (or end).
    async fn step<T>(&self, actor: u8, call: &JoinHandle<T>) -> Option<&'static str> {
        self.stepper().grant(actor);
        self.settle_down(actor, call).await
    }

    /// Takes a call's claim once it ended.
    async fn answered(&mut self, w: usize, call: Call) {
        let claim = call.await.expect("the call does not panic");
        self.claims[w].push(claim);
    }

    fn begin_request(w: usize) -> BeginOperation {
        let bytes = payload(w);
        BeginOperation {
            dataset_id: DATASET.into(),
            operation_id: Some(operation_id(w)),
            kind: ExternalKind::Commit,
            node: format!("writer-{w}"),
            lease_ms: Some(Config::REPLAYED.intent_lease as u64 * TIME_UNIT_MS as u64),
            splits: vec![PlannedSplit {
                split_id: split_id(w),
                metadata_json: "{}".into(),
                size: bytes.len() as u64,
                sha256: sha256(&bytes),
            }],
            checkpoint_delta: Some(CheckpointDelta {
                source: "source".into(),
                partitions: vec![PartitionDelta {
                    partition: format!("p{w}"),
                    from_position: None,
                    to_position: 1,
                }],
            }),
            replaced_split_ids: Vec::new(),
            publish_token: None,
        }
    }
}

/// What one replayed action did in the engine: the engine function it called (the table's
/// entry) and where the calls it drove stand.
type Dispatch = &'static str;

/// Replays one action: one dispatch per action kind, each naming the engine function it
/// calls, which must be the table's.
async fn replay_action(replay: &mut Replay, action: Action) -> Dispatch {
    match action {
        Action::Tick => {
            replay.clock.advance_ms(TIME_UNIT_MS);
            "ManualClock::advance_ms"
        }
        Action::Begin(w) => {
            let (engine, request) = (replay.writers.clone(), Replay::begin_request(w as usize));
            let begun = replay
                .run_whole(async move { engine.begin_operation(&request).await })
                .await;
            begun.unwrap_or_else(|error| panic!("begin w{w}: {error}"));
            "Engine::begin_operation"
        }
        Action::Upload(w) => {
            let engine = replay.writers.clone();
            let w = w as usize;
            let claim = replay
                .run_whole(async move {
                    let body = futures::stream::iter([Ok::<_, MendError>(Bytes::from(payload(w)))]);
                    match engine
                        .upload_object(DATASET, &operation_id(w), &split_id(w), body)
                        .await
                    {
                        Ok(_) => Claim::Nothing,
                        Err(error) => claim_of_view(&Err(error)),
                    }
                })
                .await;
            replay.claims[w].push(claim);
            "Engine::upload_object"
        }
        Action::Heartbeat(w) => {
            let engine = replay.writers.clone();
            let w = w as usize;
            let lease = Config::REPLAYED.intent_lease as u64 * TIME_UNIT_MS as u64;
            let claim = replay
                .run_whole(async move {
                    let view = engine
                        .heartbeat_operation(DATASET, &operation_id(w), Some(lease))
                        .await;
                    claim_of_view(&view)
                })
                .await;
            replay.claims[w].push(claim);
            "Engine::heartbeat_operation"
        }
        Action::PublishStart(w) => {
            let (engine, w) = (replay.writers.clone(), w as usize);
            let (call, _) = replay
                .start(publish_actor(w), async move {
                    claim_of_view(&engine.publish_operation(DATASET, &operation_id(w)).await)
                })
                .await;
            finish_or_keep(replay, w, call, true).await;
            "Engine::publish_operation (reads up to its step)"
        }
        Action::PublishLand(w) => {
            let w = w as usize;
            let call = replay.publishes[w].take().expect("a publish in flight");
            replay.step(publish_actor(w), &call).await;
            finish_or_keep(replay, w, call, true).await;
            "Engine::publish_operation (its step, or the end of a publish refused for good)"
        }
        Action::AbortStart(w) => {
            let (engine, w) = (replay.writers.clone(), w as usize);
            let (call, _) = replay
                .start(abort_actor(w), async move {
                    claim_of_view(&engine.abort_operation(DATASET, &operation_id(w)).await)
                })
                .await;
            finish_or_keep(replay, w, call, false).await;
            "Engine::abort_operation (up to its end, on the plan its process began)"
        }
        Action::AbortEnd(w) => {
            let w = w as usize;
            let call = replay.aborts[w].take().expect("an abort in flight");
            replay.step(abort_actor(w), &call).await;
            finish_or_keep(replay, w, call, false).await;
            "Engine::abort_operation (end_operation)"
        }
        Action::WritersStop => "- (every writer process stops)",
        // Ownership decides which replica's engine sweeps (the model's owner); the fleet's
        // membership leases are not the engine's, and write nothing the comparison reads.
        Action::MemberHeartbeat(_) => "Membership::heartbeat",
        Action::SweepStart(r) => {
            let (engine, r) = (replay.replicas[r as usize].clone(), r as usize);
            let (call, _) = replay
                .start(replica_actor(r), async move {
                    engine
                        .recover(DATASET, RecoveryMode::RollForward)
                        .await
                        .expect("a roll-forward sweep runs");
                })
                .await;
            keep_sweep(&mut replay.sweeps[r], call);
            "Engine::recover(RollForward) (gate, observe, decide)"
        }
        Action::SweepSettle(r) => {
            let r = r as usize;
            let call = replay.sweeps[r].take().expect("a sweep in flight");
            replay.step(replica_actor(r), &call).await;
            keep_sweep(&mut replay.sweeps[r], call);
            "Engine::recover(RollForward) (settle)"
        }
        Action::ExclusiveStart => {
            let engine = replay.operator.clone();
            replay.stepper().set_unlimited(OPERATOR_ACTOR, false);
            let call = tokio::spawn(ACTOR.scope(OPERATOR_ACTOR, async move {
                engine
                    .recover(DATASET, RecoveryMode::Exclusive)
                    .await
                    .expect("exclusive recovery runs");
            }));
            // Parked first at the fencing epoch's bump, which this action makes.
            replay.settle_down(OPERATOR_ACTOR, &call).await;
            replay.step(OPERATOR_ACTOR, &call).await;
            keep_sweep(&mut replay.exclusive, call);
            "Engine::recover(Exclusive) (permit, fencing epoch, observe, decide)"
        }
        Action::ExclusiveSettle => {
            let call = replay
                .exclusive
                .take()
                .expect("exclusive recovery in flight");
            replay.step(OPERATOR_ACTOR, &call).await;
            keep_sweep(&mut replay.exclusive, call);
            "Engine::recover(Exclusive) (settle, or one write of a roll-back)"
        }
    }
}

/// Keeps a writer's call in flight, or takes its answer once it ended.
async fn finish_or_keep(replay: &mut Replay, w: usize, call: Call, publish: bool) {
    if call.is_finished() {
        replay.answered(w, call).await;
    } else if publish {
        replay.publishes[w] = Some(call);
    } else {
        replay.aborts[w] = Some(call);
    }
}

fn keep_sweep(slot: &mut Option<JoinHandle<()>>, call: JoinHandle<()>) {
    if !call.is_finished() {
        *slot = Some(call);
    }
}

/// What the engine and its catalog hold, in the model's terms.
#[derive(Debug, PartialEq, Eq)]
struct Observed {
    now: u8,
    epoch: u8,
    /// Phase, lease end and creation time of each intent.
    intents: [Option<(Phase, i64, i64)>; WRITERS],
    splits: [SplitRow; WRITERS],
    objects: [bool; WRITERS],
    checkpoints: [u8; WRITERS],
    recorded_publish: [bool; WRITERS],
    /// Whether each writer's publish and abort are in flight.
    publishes_in_flight: [bool; WRITERS],
    aborts_in_flight: [bool; WRITERS],
    sweeps_in_flight: [bool; 2],
    exclusive_in_flight: bool,
    claims: [Vec<Claim>; WRITERS],
}

fn units(ms: i64) -> i64 {
    (ms - EPOCH_MS) / TIME_UNIT_MS
}

async fn observe(replay: &Replay) -> Observed {
    let catalog = &replay.catalog.inner;
    let dataset = catalog.dataset(DATASET).await.expect("read the dataset");
    let intents = catalog.list_intents(DATASET).await.expect("list intents");
    let rows = catalog
        .list_splits(DATASET, &Default::default())
        .await
        .expect("list splits")
        .splits;
    let mut observed = Observed {
        now: units(mend::clock::Clock::now_ms(replay.clock.as_ref())) as u8,
        epoch: dataset.fencing_epoch as u8,
        intents: [None; WRITERS],
        splits: [SplitRow::Absent; WRITERS],
        objects: [false; WRITERS],
        checkpoints: [0; WRITERS],
        recorded_publish: [false; WRITERS],
        publishes_in_flight: [0, 1].map(|w| replay.publishes[w].is_some()),
        aborts_in_flight: [0, 1].map(|w| replay.aborts[w].is_some()),
        sweeps_in_flight: [0, 1].map(|r| replay.sweeps[r].is_some()),
        exclusive_in_flight: replay.exclusive.is_some(),
        claims: replay.claims.clone(),
    };
    for w in 0..WRITERS {
        observed.intents[w] = intents
            .iter()
            .find(|intent| intent.operation_id == operation_id(w))
            .map(|intent| {
                let phase = match intent.phase {
                    IntentPhase::Armed => Phase::Armed,
                    IntentPhase::EffectsConfirmed => {
                        panic!("w{w}'s intent is confirmed: no step of the protocol confirms")
                    }
                    IntentPhase::Abandoned => Phase::Abandoned,
                };
                (
                    phase,
                    units(intent.lease_expires_at_ms),
                    units(intent.created_at_ms),
                )
            });
        observed.splits[w] = match rows.iter().find(|row| row.split_id == split_id(w)) {
            None => SplitRow::Absent,
            Some(row) => match row.state {
                SplitState::Staged => SplitRow::Staged,
                SplitState::Published => SplitRow::Published,
                SplitState::MarkedForDeletion => SplitRow::MarkedForDeletion,
            },
        };
        observed.objects[w] = replay
            .objects
            .inspect(DATASET, &split_id(w))
            .await
            .expect("look for the object")
            .split()
            .is_some();
        observed.checkpoints[w] = dataset
            .checkpoint
            .get("source")
            .and_then(|partitions| partitions.get(&format!("p{w}")))
            .copied()
            .unwrap_or(0) as u8;
        observed.recorded_publish[w] = catalog
            .recorded_request(DATASET, &format!("op:{}:publish", operation_id(w)))
            .await
            .expect("read the record")
            .is_some();
    }
    observed
}

/// The model's state in the same terms, with the claims the path made so far.
fn expected(state: &State, claims: &[Vec<Claim>; WRITERS]) -> Observed {
    Observed {
        now: state.now,
        epoch: state.epoch,
        intents: state.intents.map(|intent| {
            intent.map(|intent| {
                (
                    intent.phase,
                    intent.lease_until as i64,
                    intent.created_at as i64,
                )
            })
        }),
        splits: state.splits,
        objects: state.objects,
        checkpoints: state.checkpoints,
        recorded_publish: state.recorded_publish,
        publishes_in_flight: state
            .writers
            .map(|writer| writer.publish != PublishCall::Idle),
        aborts_in_flight: state.writers.map(|writer| writer.abort != AbortCall::Idle),
        sweeps_in_flight: state.replicas.map(|replica| replica.sweep.is_some()),
        exclusive_in_flight: matches!(state.operator, Operator::Sweeping(_)),
        claims: claims.clone(),
    }
}

/// The claims the model's path made, per writer, up to and including `upto` actions: read
/// from the history's changes and the calls that answered.
fn model_claims(path: &Path, upto: usize, initial: &State) -> [Vec<Claim>; WRITERS] {
    let mut claims: [Vec<Claim>; WRITERS] = [Vec::new(), Vec::new()];
    let mut before = *initial;
    for (action, after) in &path.steps[..upto] {
        if let Some((w, claim)) = answered(&before, *action, after) {
            claims[w].push(claim);
        }
        before = *after;
    }
    claims
}

/// The claim a writer's call answered in `action`, if one answered.
fn answered(before: &State, action: Action, after: &State) -> Option<(usize, Claim)> {
    let (w, ended_call) = match action {
        Action::Upload(w) | Action::Heartbeat(w) => (w as usize, true),
        Action::PublishStart(w) | Action::PublishLand(w) => (
            w as usize,
            after.writers[w as usize].publish == PublishCall::Idle,
        ),
        Action::AbortStart(w) | Action::AbortEnd(w) => (
            w as usize,
            after.writers[w as usize].abort == AbortCall::Idle,
        ),
        _ => return None,
    };
    if !ended_call {
        return None;
    }
    // The history keeps every claim ever made: the same step from a state with none says
    // which claim this call made.
    let fresh = State {
        history: Default::default(),
        ..*before
    };
    let a = Protocol::new(Config::REPLAYED)
        .step(&fresh, action)
        .expect("the step the path took")
        .history;
    let claim = if a.claimed_published[w] {
        Claim::Published
    } else if a.claimed_ended[w] {
        Claim::Ended
    } else {
        Claim::Nothing
    };
    Some((w, claim))
}

/// Replays one path on a fresh engine; a divergence panics with the path.
async fn replay_path(policy: &PolicyRuntime, initial: &State, path: &Path) -> usize {
    let mut replay = Replay::new(policy).await;
    replay_steps(&mut replay, initial, path).await
}

/// Replays `path` on `replay`, comparing the states after every action; answers how many
/// states it compared (one per action).
async fn replay_steps(replay: &mut Replay, initial: &State, path: &Path) -> usize {
    let mut compared = 0;
    for (index, (action, state)) in path.steps.iter().enumerate() {
        let called = replay_action(replay, *action).await;
        let entry = entry_of(ActionKind::of(*action));
        assert_eq!(
            called, entry.engine_function,
            "the replay of {action:?} calls another function than the table names"
        );
        let observed = observe(replay).await;
        let expected = expected(state, &model_claims(path, index + 1, initial));
        if observed != expected {
            let actions: Vec<Action> = path.steps[..=index].iter().map(|(a, _)| *a).collect();
            panic!(
                "the engine diverged from the model after {action:?}\npath: {actions:?}\n\
                 model:  {expected:?}\nengine: {observed:?}"
            );
        }
        compared += 1;
    }
    // Calls still parked are dropped with the runtime: a process that stopped there.
    compared
}

#[test]
fn the_table_names_every_action_once() {
    let mut kinds: Vec<ActionKind> = Vec::new();
    for kind in Protocol::all_actions().into_iter().map(ActionKind::of) {
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    for kind in &kinds {
        let rows = ACTION_TABLE
            .iter()
            .filter(|entry| entry.kind == *kind)
            .count();
        assert_eq!(rows, 1, "{kind:?} has {rows} rows in the table");
    }
    assert_eq!(
        kinds.len(),
        ACTION_TABLE.len(),
        "the table has rows for no action"
    );
}

#[test]
fn every_path_to_the_depth_replays_against_the_engine() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let policy = PolicyRuntime::default_policy().expect("the default policy loads");
    let protocol = Protocol::new(Config::REPLAYED);
    let started = Instant::now();
    let mut paths = Vec::new();
    let depth = depth();
    for_each_path(&protocol, depth, |_, path| {
        paths.push(path.clone());
        true
    });
    let initial = protocol.initial();
    let mut compared = 0;
    runtime.block_on(async {
        for path in &paths {
            compared += replay_path(&policy, &initial, path).await;
        }
    });
    // Every action of every path compared: a replay that compared nothing proves nothing.
    let actions: usize = paths.iter().map(|path| path.steps.len()).sum();
    assert!(!paths.is_empty() && actions > 0, "no path to depth {depth}");
    assert_eq!(
        compared, actions,
        "states compared, of the actions replayed"
    );
    assert!(
        paths.iter().any(|path| path.steps.len() == depth),
        "no path reached depth {depth}"
    );
    println!(
        "replay: {} paths to depth {depth} ({actions} actions) replayed against the engine, \
         {compared} states compared, every one equal, {:.1} s",
        paths.len(),
        started.elapsed().as_secs_f64()
    );
}

/// The path `trace` takes through the model (deployed as [`Config::REPLAYED`]), from its
/// initial state.
fn path_of(trace: &[Action]) -> (State, Path) {
    let protocol = Protocol::new(Config::REPLAYED);
    let initial = protocol.initial();
    let mut path = Path::default();
    let mut state = initial;
    for &action in trace {
        state = protocol
            .step(&state, action)
            .unwrap_or_else(|| panic!("{action:?} is enabled on the trace"));
        path.steps.push((action, state));
    }
    (initial, path)
}

/// Replays `path` against a fresh engine (every state compared), then hands the replay to
/// `inspect`.
fn replay_then<F>(initial: &State, path: &Path, inspect: impl FnOnce(Replay) -> F)
where
    F: Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let policy = PolicyRuntime::default_policy().expect("the default policy loads");
    runtime.block_on(async {
        let mut replay = Replay::new(&policy).await;
        replay_steps(&mut replay, initial, path).await;
        inspect(replay).await;
    });
}

/// Exclusive recovery observes writer 1's operation `Armed` without its object and decides to
/// roll it back, but first settles writer 0's roll-forward; meanwhile writer 1 uploads and its
/// publish lands. The roll-back's fence, one conditional write on the intent, then finds it
/// gone: the sweep reports the operation overtaken and touches nothing (the model found the
/// engine rolling back on what it had observed). Every state equal to the model's.
#[test]
fn an_exclusive_roll_back_overtaken_by_the_writers_publish_touches_nothing() {
    let (initial, path) = path_of(&[
        Action::Begin(0),
        Action::Upload(0),
        Action::Begin(1),
        Action::ExclusiveStart,
        Action::Upload(1),
        Action::PublishStart(1),
        Action::PublishLand(1),
        // Writer 0's roll-forward, then writer 1's roll-back, whose fence finds it published.
        Action::ExclusiveSettle,
        Action::ExclusiveSettle,
    ]);
    let (_, state) = path.steps.last().expect("a path of the trace");
    let history = &state.history;
    assert!(history.claimed_published[1]);
    assert!(history.publishes[1] == 1 && !history.abandoned[1]);
    assert!(state.intents[1].is_none() && state.splits[1] == SplitRow::Published);
    assert_eq!(state.operator, Operator::Done);
    replay_then(&initial, &path, |replay| async move {
        // The sweep decided the roll-back, and reports it overtaken, not executed.
        let audit = replay
            .catalog
            .inner
            .list_audit(DATASET, None)
            .await
            .expect("read the audit trail");
        let outcomes: Vec<&str> = audit
            .iter()
            .filter(|record| record.operation_id == operation_id(1))
            .filter_map(|record| record.outcome["outcome"].as_str())
            .collect();
        assert_eq!(outcomes, ["executing", "overtaken"], "{audit:#?}");
    });
}

/// An abort and a publish of one operation in flight at once, each parked at its one
/// conditional step: the publish lands first, and the abort's end, finding the intent gone,
/// answers that the operation published. The loser says what the winner did.
#[test]
fn an_abort_that_loses_to_its_publish_answers_published() {
    let (initial, path) = path_of(&[
        Action::Begin(0),
        Action::Upload(0),
        Action::PublishStart(0),
        Action::AbortStart(0),
        Action::PublishLand(0),
        Action::AbortEnd(0),
    ]);
    let (_, state) = path.steps.last().expect("a path of the trace");
    assert!(state.history.claimed_published[0] && !state.history.claimed_ended[0]);
    assert_eq!(state.splits[0], SplitRow::Published);
    replay_then(&initial, &path, |_| async {});
}

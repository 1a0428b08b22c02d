//! The engine under gates: an operation waits for the gates it needs and, when another holder
//! keeps them past the engine's gate timeout, fails with `Conflict` having done nothing.
//! Probe and verify take no gate. The holder is another engine's gates (another "process":
//! separate lease writers on one object store, separate pools on one Postgres database).
//! Exclusive recovery bumps the fencing epoch, and a writer that began before it cannot
//! publish after it (invariant 7). A gc longer than its object-store lease keeps its gate
//! (renewed in the background), and one that loses it stops before its next write.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mend::MendError;
use mend::clock::{ManualClock, SystemClock};
use mend::engine::{CommitRequest, CommitSplit, IntentStatus};
use mend::faults::{CrashAt, DurableStep, Faults};
use mend::gates::{GateName, GateSession, Gates, ObjectStoreGates, PostgresGates};
use mend::model::{CheckpointDelta, DatasetConfig, PartitionDelta, SplitState};
use mend_contract::RecoveryMode;
use mend_tests::harness::commit_request;
use mend_tests::{Backend, Harness};

const WAIT: Duration = Duration::from_millis(300);

/// Two gate instances over what `h`'s catalog lives on, as two processes would have.
async fn two_processes(h: &Harness) -> (Arc<dyn Gates>, Arc<dyn Gates>) {
    match h.backend {
        Backend::Postgres => {
            let url = mend_tests::harness::postgres_url();
            let pool = || async { sqlx::PgPool::connect(&url).await.expect("gates pool") };
            (
                Arc::new(PostgresGates::new(pool().await)),
                Arc::new(PostgresGates::new(pool().await)),
            )
        }
        _ => {
            let store = h.store.clone().expect("object-store backends have a store");
            let gates = || {
                Arc::new(ObjectStoreGates::new(
                    store.clone(),
                    Default::default(),
                    Duration::from_secs(30),
                    Arc::new(SystemClock),
                )) as Arc<dyn Gates>
            };
            (gates(), gates())
        }
    }
}

/// A commit of one split `s` by `node`.
fn one_split_commit(dataset_id: &str, node: &str) -> CommitRequest {
    CommitRequest {
        dataset_id: dataset_id.into(),
        node: node.into(),
        splits: vec![CommitSplit {
            split_id: "s".into(),
            metadata_json: "{}".into(),
            payload: Bytes::from_static(b"bytes"),
        }],
        checkpoint_delta: None,
        publish_token: None,
    }
}

/// Leaves a crashed commit's intent in the dataset.
async fn crashed_commit(h: &Harness, dataset_id: &str) {
    let request = one_split_commit(dataset_id, "writer");
    // Before its object (its steps: begin, the object, publish).
    let crashing = h.engine.with_faults(Arc::new(CrashAt::new(2, false)));
    assert!(crashing.commit(&request).await.is_err());
    h.clock.advance_ms(120_000);
}

fn is_conflict(result: &mend::Result<impl std::fmt::Debug>) -> bool {
    matches!(result, Err(MendError::Conflict { .. }))
}

async fn operations_wait_for_the_gates_they_need(backend: Backend) {
    let h = Harness::new(backend).await;
    let dataset_id = h.create_dataset("gated").await;
    crashed_commit(&h, &dataset_id).await;
    let (ours, theirs) = two_processes(&h).await;
    let engine = h.engine.with_gates(ours).with_gate_timeout(WAIT);
    let intents = || async { h.engine.catalog().list_intents(&dataset_id).await.unwrap() };
    let mut checked = 0;

    let session = GateSession::new();
    let held = theirs
        .acquire_one(
            &session,
            GateName::dataset(&dataset_id),
            Duration::from_secs(5),
        )
        .await
        .expect("the other process takes the dataset gate");
    let started = Instant::now();
    for mode in [RecoveryMode::RollForward, RecoveryMode::Exclusive] {
        let result = engine.recover(&dataset_id, mode).await;
        assert!(is_conflict(&result), "{backend} {mode:?}: {result:?}");
        checked += 1;
    }
    assert!(is_conflict(&engine.gc(&dataset_id, "n").await));
    assert!(is_conflict(&engine.reconcile(&dataset_id, "n").await));
    checked += 2;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "each wait is bounded by the gate timeout"
    );
    assert_eq!(intents().await.len(), 1, "nothing was resolved while gated");

    // Probe and verify write nothing, not even a lease: they need no gate. The fingerprint
    // covers every catalog table and every object write (a lease of the object-store gates
    // is one: `ours` writes through the harness's counting store).
    let before = h.write_fingerprint(&dataset_id).await;
    let probe = engine
        .recover(&dataset_id, RecoveryMode::Probe)
        .await
        .unwrap();
    assert_eq!(probe.intents.len(), 1);
    assert_eq!(
        h.write_fingerprint(&dataset_id).await,
        before,
        "{backend}: probe wrote"
    );
    engine.verify(&dataset_id).await.unwrap();
    assert_eq!(
        h.write_fingerprint(&dataset_id).await,
        before,
        "{backend}: verify wrote"
    );
    checked += 2;
    held.release().await.unwrap();

    // The config gate alone blocks config apply and exclusive recovery, not roll-forward.
    let held = theirs
        .acquire_one(
            &session,
            GateName::config(&dataset_id),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let config = DatasetConfig {
        staged_grace_period_ms: 1_000,
        ..DatasetConfig::default()
    };
    assert!(is_conflict(
        &engine.apply_config(&dataset_id, 1, &config, "n").await
    ));
    assert!(is_conflict(
        &engine.recover(&dataset_id, RecoveryMode::Exclusive).await
    ));
    assert_eq!(engine.dataset(&dataset_id).await.unwrap().config_version, 1);
    checked += 2;
    held.release().await.unwrap();

    // Released: everything goes through.
    let report = engine
        .recover(&dataset_id, RecoveryMode::Exclusive)
        .await
        .unwrap();
    assert_eq!(report.intents.len(), 1);
    assert!(intents().await.is_empty());
    engine
        .apply_config(&dataset_id, 1, &config, "n")
        .await
        .unwrap();
    checked += 2;
    println!(
        "engine gates [{backend}]: {checked} checks: gated operations failed with Conflict within the timeout and changed nothing; probe and verify ran ungated and wrote nothing; released, all succeeded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_wait_for_their_gates_on_a_local_directory() {
    operations_wait_for_the_gates_they_need(Backend::LocalDirectory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_wait_for_their_gates_on_postgres() {
    operations_wait_for_the_gates_they_need(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_wait_for_their_gates_on_s3() {
    operations_wait_for_the_gates_they_need(Backend::S3).await;
}

/// Pauses the operation before one durable step until the test lets it go: a writer that
/// stalls (a long GC pause, a partition) while exclusive recovery takes over.
#[derive(Debug)]
struct PauseBefore {
    step: DurableStep,
    reached: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>,
    resume: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Faults for PauseBefore {
    fn before(&self, step: &DurableStep) -> mend::Result<()> {
        if *step == self.step
            && let Some(reached) = self.reached.lock().unwrap().take()
        {
            reached.send(()).unwrap();
            // Blocks this worker thread only, having handed its other tasks to another worker;
            // the test drives recovery meanwhile.
            tokio::task::block_in_place(|| self.resume.lock().unwrap().recv().unwrap());
        }
        Ok(())
    }

    fn after(&self, _step: &DurableStep) -> mend::Result<()> {
        Ok(())
    }
}

/// An engine whose operations stall before `step` until the test sends on the returned
/// sender; the receiver hears when one has stalled.
fn paused_before(
    h: &Harness,
    step: DurableStep,
) -> (
    mend::Engine,
    std::sync::mpsc::Receiver<()>,
    std::sync::mpsc::Sender<()>,
) {
    let (reached_tx, reached_rx) = std::sync::mpsc::channel();
    let (resume_tx, resume_rx) = std::sync::mpsc::channel();
    let pause = Arc::new(PauseBefore {
        step,
        reached: std::sync::Mutex::new(Some(reached_tx)),
        resume: std::sync::Mutex::new(resume_rx),
    });
    (h.engine.with_faults(pause), reached_rx, resume_tx)
}

/// A writer stalls before its publish; exclusive recovery takes the permit, bumps the fencing
/// epoch and completes the commit itself, recording the publish under the operation's key.
/// When the writer wakes, its publish writes nothing: it is answered the result recovery
/// recorded (the commit did land), or, had recovery not published it, refused for its stale
/// epoch. The splits are published once and the checkpoint moves once.
async fn a_stale_writer_cannot_publish(backend: Backend) {
    let h = Harness::new(backend).await;
    let dataset_id = h.create_dataset("fenced").await;
    let (writer, reached_rx, resume_tx) = paused_before(&h, DurableStep::PublishCommit);
    let request = CommitRequest {
        checkpoint_delta: Some(CheckpointDelta {
            source: "events".into(),
            partitions: vec![PartitionDelta {
                partition: "0".into(),
                from_position: None,
                to_position: 10,
            }],
        }),
        ..one_split_commit(&dataset_id, "stalled-writer")
    };
    let stalled = tokio::spawn(async move { writer.commit(&request).await });
    tokio::task::spawn_blocking(move || reached_rx.recv().unwrap())
        .await
        .unwrap();

    let before = h.engine.dataset(&dataset_id).await.unwrap().fencing_epoch;
    let report = h
        .engine
        .recover(&dataset_id, RecoveryMode::Exclusive)
        .await
        .unwrap();
    assert_eq!(report.intents.len(), 1, "{report:?}");
    let after = h.engine.dataset(&dataset_id).await.unwrap();
    assert_eq!(
        after.fencing_epoch,
        before + 1,
        "exclusive recovery bumps the epoch"
    );

    resume_tx.send(()).unwrap();
    let result = stalled.await.unwrap();
    match &result {
        Ok(answered) => assert_eq!(
            answered.publish.manifest_version, after.manifest_version,
            "{backend}: the stale writer is answered recovery's publish, not a publish of its own"
        ),
        Err(MendError::FailedPrecondition { message, .. }) if message.contains("fencing epoch") => {
        }
        other => panic!("{backend}: the stale writer's publish was not fenced: {other:?}"),
    }
    let rows = h.rows(&dataset_id).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].state,
        SplitState::Published,
        "recovery completed the commit"
    );
    let dataset = h.engine.dataset(&dataset_id).await.unwrap();
    assert_eq!(dataset.checkpoint["events"]["0"], 10);
    assert_eq!(
        dataset.manifest_version, after.manifest_version,
        "the refused publish changed nothing"
    );
    println!(
        "fencing [{backend}]: a writer stalled before its publish was refused after exclusive recovery bumped the epoch {before} -> {}; split published once, checkpoint moved once",
        after.fencing_epoch
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_writer_cannot_publish_on_memory() {
    a_stale_writer_cannot_publish(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_writer_cannot_publish_on_a_local_directory() {
    a_stale_writer_cannot_publish(Backend::LocalDirectory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_writer_cannot_publish_on_postgres() {
    a_stale_writer_cannot_publish(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_writer_cannot_publish_on_s3() {
    a_stale_writer_cannot_publish(Backend::S3).await;
}

/// A writer stalls before its publish, its lease runs out, and a roll-forward sweep finds
/// every effect of its commit in place: it publishes the commit under the operation's key and
/// deletes the intent. The writer then finishes successfully: its publish finds the key
/// recorded and answers recovery's result, writing nothing; the split is published once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_whose_intent_a_sweep_settled_still_succeeds() {
    for backend in [Backend::Memory, Backend::Postgres] {
        let h = Harness::new(backend).await;
        let dataset_id = h.create_dataset("settled").await;
        let (writer, reached_rx, resume_tx) = paused_before(&h, DurableStep::PublishCommit);
        let request = one_split_commit(&dataset_id, "slow-writer");
        let stalled = tokio::spawn(async move { writer.commit(&request).await });
        tokio::task::spawn_blocking(move || reached_rx.recv().unwrap())
            .await
            .unwrap();
        h.clock.advance_ms(120_000);
        let report = h
            .engine
            .recover(&dataset_id, RecoveryMode::RollForward)
            .await
            .unwrap();
        assert_eq!(
            report.count(IntentStatus::RollForwardRequired),
            1,
            "{report:?}"
        );
        assert!(
            h.engine
                .catalog()
                .list_intents(&dataset_id)
                .await
                .unwrap()
                .is_empty()
        );
        let published = h.engine.dataset(&dataset_id).await.unwrap();
        resume_tx.send(()).unwrap();
        let result = stalled.await.unwrap();
        let answered = result.unwrap_or_else(|error| panic!("{backend}: {error}"));
        assert_eq!(
            answered.publish.manifest_version, published.manifest_version,
            "{backend}: the writer is answered recovery's publish"
        );
        assert_eq!(
            h.engine
                .dataset(&dataset_id)
                .await
                .unwrap()
                .manifest_version,
            published.manifest_version,
            "{backend}: the writer's publish wrote nothing"
        );
        println!(
            "settled [{backend}]: the sweep rolled a stalled writer's commit forward; the writer still succeeded, answered the recorded publish"
        );
    }
}

/// A dataset whose gc has four expired marked splits to delete (objects, then rows), and one
/// published split it must leave.
async fn four_to_collect(h: &Harness) -> String {
    let dataset_id = h.create_dataset("lease").await;
    let ids = ["live", "expired-1", "expired-2", "expired-3", "expired-4"];
    let request = commit_request(&dataset_id, &ids);
    h.engine.commit(&request).await.unwrap();
    let expired: Vec<String> = ids[1..].iter().map(|id| id.to_string()).collect();
    h.mark_seen_now(&dataset_id, &expired).await;
    h.clock.advance_ms(2 * 60 * 60 * 1000);
    dataset_id
}

/// The split ids whose objects are in `dataset_id`'s folder.
async fn objects_left(h: &Harness, dataset_id: &str) -> Vec<String> {
    let mut ids: Vec<String> = h
        .engine
        .objects()
        .list(dataset_id)
        .await
        .unwrap()
        .into_iter()
        .map(|object| object.split_id)
        .collect();
    ids.sort();
    ids
}

/// Before every object delete: a pause, as a slow store (or a long gc) would take.
#[derive(Debug)]
struct SlowDeletes(Duration);

impl Faults for SlowDeletes {
    fn before(&self, step: &DurableStep) -> mend::Result<()> {
        if matches!(step, DurableStep::DeleteObject { .. }) {
            // A blocking pause on purpose: the lease's keeper must renew from another thread
            // while the operation's own thread is stuck.
            std::thread::sleep(self.0);
        }
        Ok(())
    }

    fn after(&self, _step: &DurableStep) -> mend::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gc_longer_than_its_lease_keeps_its_gate() {
    let h = Harness::new(Backend::LocalDirectory).await;
    let dataset_id = four_to_collect(&h).await;
    let store = h.store.clone().expect("object-store backends have a store");
    let lease = Duration::from_millis(300);
    let gates = || {
        Arc::new(
            ObjectStoreGates::new(
                store.clone(),
                Default::default(),
                lease,
                Arc::new(SystemClock),
            )
            .with_max_clock_skew(Duration::from_millis(50)),
        )
    };
    let (ours, theirs) = (gates(), gates());
    // Four deletes of 250 ms each: the run lasts over three leases.
    let engine = h
        .engine
        .with_gates(ours)
        .with_faults(Arc::new(SlowDeletes(Duration::from_millis(250))));
    let gc = {
        let (engine, dataset_id) = (engine.clone(), dataset_id.clone());
        tokio::spawn(async move { engine.gc(&dataset_id, "n").await })
    };
    let gate = GateName::dataset(&dataset_id);
    let mut checks = 0;
    tokio::time::sleep(Duration::from_millis(100)).await;
    while !gc.is_finished() {
        let taken = theirs
            .acquire_one(&GateSession::new(), gate.clone(), Duration::ZERO)
            .await;
        assert!(
            is_conflict(&taken) || gc.is_finished(),
            "another process took the gate of a running gc: {taken:?}"
        );
        checks += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let result = gc.await.unwrap().unwrap();
    assert_eq!(result.deleted.len(), 4);
    assert_eq!(objects_left(&h, &dataset_id).await, ["live"]);
    assert_eq!(theirs.current_epoch(&gate).await.unwrap(), 1);
    checks += 3;
    assert!(checks > 10, "the gc ran for {checks} looks only");
    println!(
        "a gc longer than its lease: {checks} checks: the other process was refused the gate at every look while the gc ran, the gc deleted all four, the gate stayed at epoch 1"
    );
}

/// Moves the gates' clock past the lease (and the skew allowance) at the first object delete,
/// as a process stalled past its lease would find, and records every step after that.
#[derive(Debug)]
struct LoseLeaseAtFirstDelete {
    gate_clock: Arc<ManualClock>,
    by_ms: i64,
    fired: std::sync::atomic::AtomicBool,
    steps_after: std::sync::Mutex<Vec<String>>,
}

impl Faults for LoseLeaseAtFirstDelete {
    fn before(&self, step: &DurableStep) -> mend::Result<()> {
        use std::sync::atomic::Ordering;
        if self.fired.load(Ordering::SeqCst) {
            self.steps_after.lock().unwrap().push(step.to_string());
        } else if matches!(step, DurableStep::DeleteObject { .. }) {
            // This delete was checked already and goes ahead; the next write must not.
            self.gate_clock.advance_ms(self.by_ms);
            self.fired.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    fn after(&self, _step: &DurableStep) -> mend::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gc_that_loses_its_lease_stops_before_its_next_write() {
    let h = Harness::new(Backend::LocalDirectory).await;
    let dataset_id = four_to_collect(&h).await;
    let store = h.store.clone().expect("object-store backends have a store");
    // The gates' own clock, so that moving it leaves the engine's alone.
    let gate_clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let lease = Duration::from_secs(10);
    let gates = || {
        Arc::new(ObjectStoreGates::new(
            store.clone(),
            Default::default(),
            lease,
            gate_clock.clone(),
        ))
    };
    let (ours, theirs) = (gates(), gates());
    let faults = Arc::new(LoseLeaseAtFirstDelete {
        gate_clock: gate_clock.clone(),
        by_ms: 10_000 + 1_000,
        fired: Default::default(),
        steps_after: Default::default(),
    });
    let engine = h.engine.with_gates(ours).with_faults(faults.clone());
    let error = engine.gc(&dataset_id, "n").await.unwrap_err();
    let gate = GateName::dataset(&dataset_id);
    let mut checks = 0;
    match &error {
        MendError::Conflict { message } => {
            assert!(message.contains("no longer held"), "{message}");
            assert!(message.contains(&gate.to_string()), "{message}");
            assert!(message.contains("fencing epoch 1"), "{message}");
        }
        other => panic!("expected Conflict for the lost lease, got {other:?}"),
    }
    checks += 1;
    // Nothing was written after the loss: one object went, three stay, and so do the four
    // marked rows and the gc's intent.
    assert!(
        faults.steps_after.lock().unwrap().is_empty(),
        "steps after the loss: {:?}",
        faults.steps_after.lock().unwrap()
    );
    let left = objects_left(&h, &dataset_id).await;
    assert_eq!(left.len(), 4, "{left:?}");
    assert!(left.contains(&"live".to_string()));
    let marked = h
        .rows(&dataset_id)
        .await
        .into_iter()
        .filter(|row| row.state == SplitState::MarkedForDeletion)
        .count();
    assert_eq!(marked, 4);
    let intents = engine.catalog().list_intents(&dataset_id).await.unwrap();
    assert_eq!(intents.len(), 1);
    checks += 4;

    // The other process takes the gate, at a higher epoch.
    let next = theirs
        .acquire_one(&GateSession::new(), gate.clone(), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(next.fencing_epoch(), 2);
    checks += 1;
    next.release().await.unwrap();

    // Recovery, once the gc's intent lease ran out, finishes the collection.
    h.clock.advance_ms(120_000);
    let recovering = h.engine.with_gates(gates());
    recovering
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await
        .unwrap();
    assert_eq!(objects_left(&h, &dataset_id).await, ["live"]);
    assert!(
        recovering
            .catalog()
            .list_intents(&dataset_id)
            .await
            .unwrap()
            .is_empty()
    );
    checks += 2;
    println!(
        "a gc that loses its lease: {checks} checks: refused with Conflict at its next write, one of four objects deleted and no write after, the other process took the gate at epoch 2, recovery finished the gc"
    );
}

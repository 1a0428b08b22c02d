//! Crash schedules for the commit operation: crash it at its k-th durable write, for every k,
//! cleanly (the write never happens) and ambiguously (the write lands but the writer is told
//! it failed); then run recovery. Every schedule must converge to the commit having fully
//! happened or never happened, with invariants 1 to 7 intact, and no intent left.

use std::sync::Arc;

use bytes::Bytes;
use mend::engine::{
    BeginOperation, CommitRequest, CommitSplit, ExternalKind, IntentStatus, Outcome, PlannedSplit,
};
use mend::faults::{CrashAt, DurableStep};
use mend::model::{CheckpointDelta, ListQuery, PartitionDelta, SplitState};
use mend::objects::format::sha256;
use mend_contract::{RecoveryDecision, RecoveryMode};
use mend_tests::crash::{RecoveryCrash, SecondCrashes, recover_after_crash};
use mend_tests::{Backend, Harness};

const SPLITS: [&str; 2] = ["c-1", "c-2"];
/// Begin (intent and stage, one atomic step), two objects (put at once), publish (with the
/// intent's deletion, one atomic step): checked against a clean run, so that a step added to
/// the commit cannot go uncrashed.
const DURABLE_STEPS: usize = 4;
/// Roll-forward first (it finishes or abandons what it can); what it cannot, exclusive rolls
/// back.
const MODES: &[RecoveryMode] = &[RecoveryMode::RollForward, RecoveryMode::Exclusive];

fn request(dataset_id: &str) -> CommitRequest {
    CommitRequest {
        dataset_id: dataset_id.into(),
        node: "writer".into(),
        splits: SPLITS
            .iter()
            .map(|id| CommitSplit {
                split_id: (*id).into(),
                metadata_json: r#"{"num_docs": 10}"#.into(),
                payload: Bytes::from(format!("payload of {id}")),
            })
            .collect(),
        checkpoint_delta: Some(CheckpointDelta {
            source: "events".into(),
            partitions: vec![PartitionDelta {
                partition: "0".into(),
                from_position: None,
                to_position: 100,
            }],
        }),
        publish_token: None,
    }
}

/// Whether the commit fully happened (true) or never happened (false); panics on anything in
/// between or on a broken invariant.
async fn settled_outcome(h: &Harness, dataset_id: &str, schedule: &str) -> bool {
    let engine = &h.engine;
    assert!(
        engine
            .catalog()
            .list_intents(dataset_id)
            .await
            .unwrap()
            .is_empty(),
        "{schedule}: an intent is left"
    );
    let rows = engine
        .list_splits(dataset_id, &ListQuery::default())
        .await
        .unwrap()
        .splits;
    let checkpoint = engine.dataset(dataset_id).await.unwrap().checkpoint;
    let position = checkpoint.get("events").and_then(|p| p.get("0")).copied();
    // Invariant 1 and 2: every staged or published row's object is there.
    for row in &rows {
        if row.state != SplitState::MarkedForDeletion {
            let header = engine
                .objects()
                .read_header(dataset_id, &row.split_id)
                .await
                .unwrap();
            assert!(
                header.is_some(),
                "{schedule}: {} is {} without its object",
                row.split_id,
                row.state
            );
        }
    }
    let published = rows
        .iter()
        .filter(|r| r.state == SplitState::Published)
        .count();
    if published == SPLITS.len() {
        assert_eq!(
            position,
            Some(100),
            "{schedule}: published without its checkpoint delta"
        );
        true
    } else {
        assert_eq!(published, 0, "{schedule}: half published: {rows:?}");
        assert_eq!(
            position, None,
            "{schedule}: the checkpoint moved without the publish"
        );
        assert!(
            rows.iter().all(|r| r.state != SplitState::Staged),
            "{schedule}: a staged row of the abandoned commit is left: {rows:?}"
        );
        false
    }
}

/// Counts the commit's durable steps on a clean run and checks them against
/// [`DURABLE_STEPS`] and its comment.
async fn clean_run_steps(backend: Backend) -> Vec<DurableStep> {
    let h = Harness::new(backend).await;
    let dataset_id = h.create_dataset("clean").await;
    let counting = Arc::new(CrashAt::new(usize::MAX, false));
    h.engine
        .with_faults(counting.clone())
        .commit(&request(&dataset_id))
        .await
        .expect("a commit without faults");
    assert!(settled_outcome(&h, &dataset_id, "clean run").await);
    let steps = counting.steps();
    let put = |id: &str| DurableStep::PutObject {
        split_id: id.into(),
    };
    assert_eq!(
        steps,
        [
            DurableStep::BeginCommit,
            put(SPLITS[0]),
            put(SPLITS[1]),
            DurableStep::PublishCommit,
        ],
        "{backend}: the commit's durable steps changed; update DURABLE_STEPS and its comment"
    );
    assert_eq!(steps.len(), DURABLE_STEPS);
    steps
}

async fn run_schedules(backend: Backend) {
    let steps = clean_run_steps(backend).await;
    let mut schedules = 0;
    let mut happened = 0;
    for ambiguous in [false, true] {
        for k in 1..=DURABLE_STEPS {
            let schedule = format!(
                "{backend} crash {} step {k}",
                if ambiguous { "after" } else { "before" }
            );
            let h = Harness::new(backend).await;
            let dataset_id = h.create_dataset("crash").await;
            let crash = Arc::new(CrashAt::new(k, ambiguous));
            let crashing = h.engine.with_faults(crash.clone());
            let result = crashing.commit(&request(&dataset_id)).await;
            assert!(result.is_err(), "{schedule}: the commit did not crash");
            let taken = crash.steps();
            assert_eq!(
                taken[..k],
                steps[..k],
                "{schedule}: the crashed run did not take the clean run's steps"
            );
            // The objects are put at once: those in flight when the k-th step crashed run on,
            // as they would when a process dies (the commit waits for them before it fails).
            assert!(
                taken[k..]
                    .iter()
                    .all(|step| matches!(step, DurableStep::PutObject { .. })),
                "{schedule}: steps after the crash: {:?}",
                &taken[k..]
            );

            // The writer is gone: its lease runs out, then recovery runs.
            h.clock.advance_ms(120_000);
            recover_after_crash(&h, &dataset_id, None, MODES).await;
            if settled_outcome(&h, &dataset_id, &schedule).await {
                happened += 1;
            }
            schedules += 1;
        }
    }
    println!(
        "crash schedules [commit, {backend}]: {DURABLE_STEPS} durable steps (counted on a clean run); {schedules} run, {happened} converged to fully happened, {} to never happened, 0 in between",
        schedules - happened
    );

    // Again, with a second crash during recovery, before and after each of its durable
    // writes in turn.
    let mut double = SecondCrashes::default();
    for ambiguous in [false, true] {
        for k in 1..=DURABLE_STEPS {
            for second in RecoveryCrash::all() {
                let schedule = format!(
                    "{backend} crash {} step {k}, then {second}",
                    if ambiguous { "after" } else { "before" }
                );
                let h = Harness::new(backend).await;
                let dataset_id = h.create_dataset("crash2").await;
                let crashing = h.engine.with_faults(Arc::new(CrashAt::new(k, ambiguous)));
                assert!(crashing.commit(&request(&dataset_id)).await.is_err());
                h.clock.advance_ms(120_000);
                let reached = recover_after_crash(&h, &dataset_id, Some(second), MODES).await;
                settled_outcome(&h, &dataset_id, &schedule).await;
                double.count(second, reached);
                // Once the crashing sweeps no longer reach the step, every step has had its
                // crashes.
                if reached < second.step {
                    break;
                }
            }
        }
    }
    println!("crash schedules [commit, {backend}]: {double}, all converged");
}

/// A commit that published and crashed at its intent delete, followed by another commit that
/// moves the same partition on: the first one's delta applied (its splits are published, and
/// the checkpoint is past its end, which it never moves back from), so it is settled. Every
/// mode says so; roll-forward discards its intent as stale and audits it; nothing is blocked
/// and nothing is undone. Every publish deletes its intent in its own atomic step now, so the
/// first commit's intent is left as an older mend (or a backend running the catalog's default,
/// separate steps) left it ([`Harness::publish_leaving_intent`]).
async fn a_completed_commit_is_never_blocked(backend: Backend) {
    let h = Harness::new(backend).await;
    let dataset_id = h.create_dataset("settled").await;
    let payloads: Vec<Vec<u8>> = SPLITS
        .iter()
        .map(|id| format!("payload of {id}").into_bytes())
        .collect();
    let begin = BeginOperation {
        dataset_id: dataset_id.clone(),
        operation_id: Some("first".into()),
        kind: ExternalKind::Commit,
        node: "writer".into(),
        lease_ms: None,
        splits: SPLITS
            .iter()
            .zip(&payloads)
            .map(|(id, payload)| PlannedSplit {
                split_id: (*id).into(),
                metadata_json: r#"{"num_docs": 10}"#.into(),
                size: payload.len() as u64,
                sha256: sha256(payload),
            })
            .collect(),
        checkpoint_delta: request(&dataset_id).checkpoint_delta,
        replaced_split_ids: Vec::new(),
        publish_token: None,
    };
    h.engine.begin_operation(&begin).await.unwrap();
    for (id, payload) in SPLITS.iter().zip(&payloads) {
        let body = futures::stream::iter([Ok(Bytes::from(payload.clone()))]);
        h.engine
            .upload_object(&dataset_id, "first", id, body)
            .await
            .unwrap();
    }
    h.publish_leaving_intent(&dataset_id, "first").await;
    let first = h.engine.catalog().list_intents(&dataset_id).await.unwrap();
    assert_eq!(first.len(), 1, "its intent is left");

    // A later commit moves partition 0 on, from 100 to 250.
    let later = CommitRequest {
        splits: vec![CommitSplit {
            split_id: "later-1".into(),
            metadata_json: "{}".into(),
            payload: Bytes::from_static(b"later"),
        }],
        checkpoint_delta: Some(CheckpointDelta {
            source: "events".into(),
            partitions: vec![PartitionDelta {
                partition: "0".into(),
                from_position: Some(100),
                to_position: 250,
            }],
        }),
        ..request(&dataset_id)
    };
    h.engine.commit(&later).await.expect("the later commit");
    h.clock.advance_ms(120_000);
    let mut checks = 0;

    for mode in [RecoveryMode::Probe, RecoveryMode::Verify] {
        let report = h.engine.recover(&dataset_id, mode).await.unwrap();
        assert_eq!(report.count(IntentStatus::Clean), 1, "{mode:?}: {report:?}");
        checks += 1;
    }
    let report = h
        .engine
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await
        .unwrap();
    let intent = &report.intents[0];
    assert_eq!(intent.operation_id, first[0].operation_id);
    assert_eq!(intent.status, IntentStatus::Clean, "{report:?}");
    assert_eq!(intent.decision, RecoveryDecision::Stale);
    assert_eq!(intent.outcome, Outcome::Executed);
    checks += 3;
    assert!(
        h.engine
            .catalog()
            .list_intents(&dataset_id)
            .await
            .unwrap()
            .is_empty()
    );
    let rows = h
        .engine
        .list_splits(&dataset_id, &ListQuery::default())
        .await
        .unwrap()
        .splits;
    assert_eq!(rows.len(), SPLITS.len() + 1);
    assert!(
        rows.iter().all(|row| row.state == SplitState::Published),
        "nothing undone: {rows:?}"
    );
    let checkpoint = h.engine.dataset(&dataset_id).await.unwrap().checkpoint;
    assert_eq!(
        checkpoint.get("events").and_then(|p| p.get("0")).copied(),
        Some(250)
    );
    checks += 4;
    let audit = h
        .engine
        .catalog()
        .list_audit(&dataset_id, None)
        .await
        .unwrap();
    let settled = audit.last().expect("the stale decision is audited");
    assert_eq!(settled.operation_id, first[0].operation_id);
    assert_eq!(settled.decision, serde_json::json!("stale"));
    assert_eq!(settled.outcome, serde_json::json!({"outcome": "executed"}));
    checks += 3;
    println!(
        "crash schedules [commit, {backend}]: crashed at its intent delete, then a later commit on the same partition: {checks} checks, settled (stale) in every mode, nothing blocked or undone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_commit_is_never_blocked_on_memory() {
    a_completed_commit_is_never_blocked(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_commit_is_never_blocked_on_a_local_directory() {
    a_completed_commit_is_never_blocked(Backend::LocalDirectory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_commit_is_never_blocked_on_postgres() {
    a_completed_commit_is_never_blocked(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_commit_is_never_blocked_on_s3() {
    a_completed_commit_is_never_blocked(Backend::S3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_crash_schedules_converge_on_memory() {
    run_schedules(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_crash_schedules_converge_on_a_local_directory() {
    run_schedules(Backend::LocalDirectory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_crash_schedules_converge_on_postgres() {
    run_schedules(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_crash_schedules_converge_on_s3() {
    run_schedules(Backend::S3).await;
}

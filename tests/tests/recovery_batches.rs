//! A roll-forward sweep executes its decisions in batches, on every backend: the settlements
//! of many intents (publishes, stale intents' deletes, abandonments) in one catalog step,
//! after one append of their `executing` records; their settled records go with the next
//! append. A batch the catalog refuses because of one settlement is settled again one intent
//! at a time, so that the refusal fails only its own decision; a batch holds at most 1,000
//! intents.

use std::sync::Arc;

use bytes::Bytes;
use mend::catalog::settle::MAX_SETTLEMENTS;
use mend::engine::{CommitRequest, CommitSplit, IntentStatus, Outcome};
use mend::faults::{CrashAt, DurableStep};
use mend::model::{CheckpointDelta, PartitionDelta, SplitState};
use mend_contract::RecoveryMode;
use mend_tests::{Backend, Harness};

/// Past the writers' lease (60 s by default).
const LEASE_RUN_OUT_MS: i64 = 120_000;
/// A commit's durable steps with one split: begin (intent and stage), object, publish (and the
/// intent's delete); crashed before the publish, its effects are in place, unpublished.
const BEFORE_PUBLISH: usize = 3;

fn commit(dataset_id: &str, split_id: &str, delta: Option<(&str, u64)>) -> CommitRequest {
    CommitRequest {
        dataset_id: dataset_id.into(),
        node: "writer".into(),
        splits: vec![CommitSplit {
            split_id: split_id.into(),
            metadata_json: "{}".into(),
            payload: Bytes::from(format!("payload of {split_id}")),
        }],
        checkpoint_delta: delta.map(|(partition, to)| CheckpointDelta {
            source: "events".into(),
            partitions: vec![PartitionDelta {
                partition: partition.into(),
                from_position: None,
                to_position: to,
            }],
        }),
        publish_token: None,
    }
}

/// Runs `request`, crashing before its `step`-th durable write.
async fn crash_commit(h: &Harness, request: &CommitRequest, step: usize) {
    let crashing = h.engine.with_faults(Arc::new(CrashAt::new(step, false)));
    assert!(
        crashing.commit(request).await.is_err(),
        "the commit crashes"
    );
}

async fn state(h: &Harness, dataset_id: &str, split_id: &str) -> Option<SplitState> {
    h.rows(dataset_id)
        .await
        .into_iter()
        .find(|row| row.split_id == split_id)
        .map(|row| row.state)
}

/// Two crashed commits moving the same partition from nothing: the policy, deciding on what it
/// observed before either publish, rolls both forward; in the batch the second no longer
/// applies, so the catalog refuses the batch and the sweep settles them one at a time.
async fn a_refused_batch_settles_one_at_a_time(backend: Backend) {
    let h = Harness::new(backend).await;
    let dataset_id = h.create_dataset("refused-batch").await;
    crash_commit(
        &h,
        &commit(&dataset_id, "x-1", Some(("0", 10))),
        BEFORE_PUBLISH,
    )
    .await;
    h.clock.advance_ms(1);
    crash_commit(
        &h,
        &commit(&dataset_id, "x-2", Some(("0", 20))),
        BEFORE_PUBLISH,
    )
    .await;
    h.clock.advance_ms(LEASE_RUN_OUT_MS);

    let steps = Arc::new(CrashAt::new(usize::MAX, false));
    let report = h
        .engine
        .with_faults(steps.clone())
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await
        .unwrap();
    assert_eq!(
        report.count(IntentStatus::RollForwardRequired),
        2,
        "{report:?}"
    );
    assert_eq!(
        steps.steps(),
        [
            DurableStep::AppendAudit,
            DurableStep::SettleIntents,
            DurableStep::SettleIntents,
            DurableStep::SettleIntents,
            DurableStep::AppendAudit,
        ],
        "the batch, refused, then each alone"
    );
    assert_eq!(report.intents[0].outcome, Outcome::Executed);
    assert!(
        matches!(&report.intents[1].outcome, Outcome::Failed(why) if why.contains("checkpoint delta")),
        "{report:?}"
    );
    assert_eq!(
        state(&h, &dataset_id, "x-1").await,
        Some(SplitState::Published)
    );
    assert_eq!(
        state(&h, &dataset_id, "x-2").await,
        Some(SplitState::Staged)
    );
    let checkpoint = h.engine.dataset(&dataset_id).await.unwrap().checkpoint;
    assert_eq!(checkpoint["events"]["0"], 10);
    let mut checks = 7;

    // The next sweep decides again on what landed: the second commit's publish no longer
    // applies, so it is abandoned.
    let next = h
        .engine
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await
        .unwrap();
    assert_eq!(next.count(IntentStatus::Abandoned), 1, "{next:?}");
    assert_eq!(next.intents[0].outcome, Outcome::Executed);
    assert_eq!(
        state(&h, &dataset_id, "x-2").await,
        Some(SplitState::MarkedForDeletion)
    );
    assert!(
        h.engine
            .catalog()
            .list_intents(&dataset_id)
            .await
            .unwrap()
            .is_empty()
    );
    // Each decision audited before and after: executing and executed for the first;
    // executing and failed, then executing and executed (the abandonment) for the second.
    let audit = h
        .engine
        .catalog()
        .list_audit(&dataset_id, None)
        .await
        .unwrap();
    let outcomes: Vec<(String, serde_json::Value)> = audit
        .iter()
        .map(|record| {
            (
                record.operation_id.clone(),
                record.outcome["outcome"].clone(),
            )
        })
        .collect();
    let of = |operation_id: &str| -> Vec<&str> {
        outcomes
            .iter()
            .filter(|(id, _)| id == operation_id)
            .map(|(_, outcome)| outcome.as_str().unwrap_or_default())
            .collect()
    };
    assert_eq!(
        of(&report.intents[0].operation_id),
        ["executing", "executed"]
    );
    assert_eq!(
        of(&report.intents[1].operation_id),
        ["executing", "failed", "executing", "executed"]
    );
    checks += 6;
    println!(
        "recovery batches [{backend}]: a batch refused for one of its 2 publishes settled one at a time: {checks} checks, the other published, the refused one failed alone and was abandoned by the next sweep"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_batch_settles_one_at_a_time_on_memory() {
    a_refused_batch_settles_one_at_a_time(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_batch_settles_one_at_a_time_on_a_local_directory() {
    a_refused_batch_settles_one_at_a_time(Backend::LocalDirectory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_batch_settles_one_at_a_time_on_postgres() {
    a_refused_batch_settles_one_at_a_time(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_batch_settles_one_at_a_time_on_s3() {
    a_refused_batch_settles_one_at_a_time(Backend::S3).await;
}

/// One more stale intent than a batch holds: two batches, five durable steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_holds_at_most_a_thousand_intents() {
    let h = Harness::new(Backend::Memory).await;
    let dataset_id = h.create_dataset("large-sweep").await;
    let count = MAX_SETTLEMENTS + 1;
    for i in 0..count {
        let request = commit(&dataset_id, &format!("s-{i:05}"), None);
        h.leave_stale_intent(&request).await;
    }
    h.clock.advance_ms(LEASE_RUN_OUT_MS);
    let steps = Arc::new(CrashAt::new(usize::MAX, false));
    let report = h
        .engine
        .with_faults(steps.clone())
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await
        .unwrap();
    assert_eq!(report.count(IntentStatus::Clean), count);
    assert!(
        report
            .intents
            .iter()
            .all(|i| i.outcome == Outcome::Executed)
    );
    // Each batch's executing records, then its step; the first batch's settled records go
    // with the second's executing ones, the second's with the sweep's last append.
    let batch = [DurableStep::AppendAudit, DurableStep::SettleIntents];
    assert_eq!(
        steps.steps(),
        [&batch[..], &batch[..], &[DurableStep::AppendAudit]].concat()
    );
    assert!(
        h.engine
            .catalog()
            .list_intents(&dataset_id)
            .await
            .unwrap()
            .is_empty()
    );
    let audit = h
        .engine
        .catalog()
        .list_audit(&dataset_id, None)
        .await
        .unwrap();
    assert_eq!(audit.len(), 2 * count);
    println!(
        "recovery batches [memory]: {count} stale intents settled in 2 batches of at most {MAX_SETTLEMENTS}: 5 durable steps, {} audit records",
        audit.len()
    );
}

//! The trail of writes through the engine, on every backend: a writer's stage, publish, mark,
//! delete, token, begin, upload, publish and abort of operations, and an operator's gc, each
//! appear in `Engine::audit_page` under their principal and kind, with what they named and
//! what they answered; the filters select them, and the policy's decisions stay out of a
//! replay's reading (`list_recent_audit` holds none of them).

use bytes::Bytes;
use futures::stream;
use mend::MendError;
use mend::audit::AuditEntry;
use mend::clock::Clock;
use mend::engine::{AuditQuery, BeginOperation, ExternalKind, PlannedSplit};
use mend::model::TimestampMs;
use mend::model::{PublishRequest, StageMode, StageRequest, StageSplit};
use mend::objects::format::sha256;
use mend::{Engine, EngineOptions};
use mend_tests::{Backend, Harness};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

fn stage_request(dataset_id: &str, split_ids: &[&str]) -> StageRequest {
    StageRequest {
        dataset_id: dataset_id.into(),
        mode: StageMode::CreateOnly,
        node: "writer".into(),
        splits: split_ids
            .iter()
            .map(|id| StageSplit {
                split_id: id.to_string(),
                metadata_json: "{}".into(),
            })
            .collect(),
    }
}

fn begin(dataset_id: &str, operation_id: &str, split_id: &str, bytes: &[u8]) -> BeginOperation {
    BeginOperation {
        dataset_id: dataset_id.into(),
        operation_id: Some(operation_id.into()),
        kind: ExternalKind::Commit,
        node: "indexer-7".into(),
        // Longer than the ticks of this test's clock add up to (below).
        lease_ms: Some(3_600_000),
        splits: vec![PlannedSplit {
            split_id: split_id.into(),
            metadata_json: "{}".into(),
            size: bytes.len() as u64,
            sha256: sha256(bytes),
        }],
        checkpoint_delta: None,
        replaced_split_ids: Vec::new(),
        publish_token: None,
    }
}

async fn page(
    h: &Harness,
    dataset_id: &str,
    principal: Option<&str>,
    kind: Option<&str>,
) -> Vec<AuditEntry> {
    let query = AuditQuery {
        principal: principal.map(str::to_owned),
        kind: kind.map(str::to_owned),
        limit: 1_000,
        ..AuditQuery::default()
    };
    let page = h.engine.audit_page(dataset_id, &query).await.unwrap();
    assert_eq!(page.next, None, "one page holds them all");
    page.entries
}

fn steps(entries: &[AuditEntry]) -> Vec<String> {
    entries
        .iter()
        .map(|entry| {
            format!(
                "{} {}",
                entry.mode,
                entry.decision["step"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

/// A clock a second later at each reading. The trail lists writes by their times, and the
/// object-store catalog stamps a write with its call's time plus the time the mutation waited
/// (so that a mark sent again after a stall does not predate its own write): with the
/// harness's manual clock standing still, an early step that waited a few ms under load was
/// stamped after every later one, which waited less, and listed last (seen in 1 of 300 runs
/// beside three busy loops). A real clock moves on between steps; so does this one, by more
/// than any wait.
#[derive(Debug)]
struct TickingClock(AtomicI64);

impl Clock for TickingClock {
    fn now_ms(&self) -> TimestampMs {
        self.0.fetch_add(1_000, Ordering::SeqCst)
    }
}

async fn check(backend: Backend) {
    let h = Harness::new(backend).await;
    let ds = h.create_dataset("trail").await;
    let engine = Engine::new(
        h.engine.catalog().clone(),
        h.engine.objects().clone(),
        h.engine.policy(),
        EngineOptions {
            clock: Arc::new(TickingClock(AtomicI64::new(h.clock.now_ms()))),
            ..EngineOptions::default()
        },
    )
    .expect("engine starts");
    let writer = engine.acting_as("writer");
    let operator = engine.acting_as("operator");
    let mut checks = 0;

    writer
        .stage(&stage_request(&ds, &["a", "b", "c"]))
        .await
        .unwrap();
    h.put_objects(&ds, &["a", "b", "c"]).await;
    let publish = PublishRequest {
        dataset_id: ds.clone(),
        staged_split_ids: vec!["a".into(), "b".into()],
        replaced_split_ids: Vec::new(),
        checkpoint_delta: None,
        publish_token: None,
        fencing_epoch: None,
    };
    writer.publish(&publish).await.unwrap();
    writer.mark_for_deletion(&ds, &["a".into()]).await.unwrap();
    let bytes = b"payload of op-1".to_vec();
    writer
        .begin_operation(&begin(&ds, "op-1", "o1", &bytes))
        .await
        .unwrap();
    let chunks: Vec<Result<Bytes, MendError>> = vec![Ok(Bytes::from(bytes.clone()))];
    writer
        .upload_object(&ds, "op-1", "o1", stream::iter(chunks))
        .await
        .unwrap();
    writer.publish_operation(&ds, "op-1").await.unwrap();
    writer
        .begin_operation(&begin(&ds, "op-2", "o2", b"never sent"))
        .await
        .unwrap();
    writer.abort_operation(&ds, "op-2").await.unwrap();
    // Its clean-up (the delete of its marked row) runs after the answer, in its scope.
    writer.wait_for_cleanups().await;
    // A refused write records nothing: c is staged, not published, so it cannot be deleted.
    let refused = writer.delete_splits(&ds, &["c".into()]).await;
    assert!(refused.is_err(), "{refused:?}");
    operator.advance_fencing_epoch(&ds).await.unwrap();

    let mine = page(&h, &ds, Some("writer"), None).await;
    assert_eq!(
        steps(&mine),
        [
            "stage stage",
            "publish publish",
            "mark mark",
            "begin begin-commit",
            "upload upload",
            "publish-operation publish-commit",
            "begin begin-commit",
            "abort-operation settle",
            "abort-operation delete-splits",
        ],
        "every write of the writer, in order (each protocol step one atomic write, an abort's \
         clean-up after it), the refused delete not among them"
    );
    checks += 1;
    assert!(
        mine.iter()
            .all(|entry| entry.principal.as_deref() == Some("writer"))
    );
    assert!(mine.iter().all(|entry| entry.policy_digest.is_empty()));
    checks += 2;
    let staged = &mine[0];
    assert_eq!(
        staged.decision["what"]["ids"],
        serde_json::json!(["a", "b", "c"])
    );
    assert_eq!(
        staged.outcome,
        serde_json::json!({"inserted": 3, "overwritten": 0, "skipped": 0})
    );
    let uploaded = &mine[5];
    assert_eq!(uploaded.operation_id, "op-1");
    assert_eq!(uploaded.decision["what"]["ids"], serde_json::json!(["o1"]));
    checks += 3;

    let marks = page(&h, &ds, Some("writer"), Some("mark")).await;
    assert_eq!(marks.len(), 1);
    assert_eq!(marks[0].decision["what"]["ids"], serde_json::json!(["a"]));
    assert_eq!(marks[0].outcome["marked"], serde_json::json!(["a"]));
    checks += 3;
    let fenced = page(&h, &ds, Some("operator"), None).await;
    assert_eq!(steps(&fenced), ["fence update-dataset"]);
    checks += 1;

    // A policy swap replays decisions only: none of the writes is among them.
    let recent = h.engine.catalog().list_recent_audit(10_000).await.unwrap();
    assert!(
        recent
            .records
            .iter()
            .all(|record| record.dataset_id != ds || !record.policy_digest.is_empty()),
        "a write record among the decisions"
    );
    checks += 1;
    println!(
        "write audit [{backend}]: {} writes of the writer and 1 of the operator listed by principal and kind, a refused delete absent, {checks} checks",
        mine.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_is_in_the_trail_with_who_what_and_the_answer_on_memory() {
    check(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_is_in_the_trail_with_who_what_and_the_answer_on_a_local_directory() {
    check(Backend::LocalDirectory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_is_in_the_trail_with_who_what_and_the_answer_on_postgres() {
    check(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_is_in_the_trail_with_who_what_and_the_answer_on_s3() {
    check(Backend::S3).await;
}

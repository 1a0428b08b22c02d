//! Crash schedules for garbage collection: crash it at its k-th durable write, for every k,
//! cleanly and ambiguously, then recover (and again with a second crash during recovery). Every
//! schedule must converge to the gc fully done: abandoned staged splits marked, expired marked
//! splits gone (objects, then rows), the published split and its object untouched.

use std::sync::Arc;

use bytes::Bytes;
use mend::engine::{CommitRequest, CommitSplit};
use mend::faults::CrashAt;
use mend::model::{ListQuery, SplitState, StageMode, StageRequest, StageSplit};
use mend_policy::RecoveryMode;
use mend_tests::crash::recover_after_crash;
use mend_tests::{Backend, Harness};

/// Intent, mark, two object deletes, the row delete, the intent delete.
const DURABLE_STEPS: usize = 6;
const HOUR_MS: i64 = 60 * 60 * 1000;

async fn commit(h: &Harness, dataset_id: &str, ids: &[&str]) {
    let request = CommitRequest {
        dataset_id: dataset_id.into(),
        node: "writer".into(),
        splits: ids
            .iter()
            .map(|id| CommitSplit {
                split_id: (*id).into(),
                metadata_json: "{}".into(),
                payload: Bytes::from(format!("payload of {id}")),
            })
            .collect(),
        checkpoint_delta: None,
        publish_token: None,
    };
    h.engine.commit(&request).await.expect("commit");
}

/// A dataset with two abandoned staged splits, two expired marked ones and a published one,
/// all past their grace periods.
async fn littered(h: &Harness) -> String {
    let dataset_id = h.create_dataset("gc").await;
    commit(h, &dataset_id, &["live", "expired-1", "expired-2"]).await;
    h.engine
        .mark_for_deletion(&dataset_id, &["expired-1".into(), "expired-2".into()])
        .await
        .unwrap();
    let abandoned = StageRequest {
        dataset_id: dataset_id.clone(),
        mode: StageMode::CreateOnly,
        node: "gone".into(),
        splits: ["abandoned-1", "abandoned-2"]
            .iter()
            .map(|id| StageSplit {
                split_id: (*id).into(),
                metadata_json: "{}".into(),
            })
            .collect(),
    };
    h.engine.stage(&abandoned).await.unwrap();
    h.clock.advance_ms(2 * HOUR_MS);
    dataset_id
}

async fn check_collected(h: &Harness, dataset_id: &str, schedule: &str) {
    assert!(
        h.engine
            .catalog()
            .list_intents(dataset_id)
            .await
            .unwrap()
            .is_empty(),
        "{schedule}: an intent is left"
    );
    let rows = h
        .engine
        .list_splits(dataset_id, &ListQuery::default())
        .await
        .unwrap()
        .splits;
    let state = |id: &str| rows.iter().find(|r| r.split_id == id).map(|r| r.state);
    assert_eq!(state("live"), Some(SplitState::Published), "{schedule}");
    assert_eq!(
        state("abandoned-1"),
        Some(SplitState::MarkedForDeletion),
        "{schedule}"
    );
    assert_eq!(
        state("abandoned-2"),
        Some(SplitState::MarkedForDeletion),
        "{schedule}"
    );
    for gone in ["expired-1", "expired-2"] {
        assert_eq!(state(gone), None, "{schedule}: row {gone} survived");
        let object = h
            .engine
            .objects()
            .read_header(dataset_id, gone)
            .await
            .unwrap();
        assert!(object.is_none(), "{schedule}: object {gone} survived");
    }
    let live = h
        .engine
        .objects()
        .read_header(dataset_id, "live")
        .await
        .unwrap();
    assert!(
        live.is_some(),
        "{schedule}: the published split lost its object"
    );
}

async fn run_schedules(backend: Backend) {
    let (mut single, mut double) = (0, 0);
    for ambiguous in [false, true] {
        for k in 1..=DURABLE_STEPS {
            let how = if ambiguous { "after" } else { "before" };
            for j in 0.. {
                let schedule = format!("{backend} gc crash {how} step {k}, recovery crash {j}");
                let h = Harness::new(backend).await;
                let dataset_id = littered(&h).await;
                let crash = Arc::new(CrashAt::new(k, ambiguous));
                let result = h
                    .engine
                    .with_faults(crash.clone())
                    .gc(&dataset_id, "gc")
                    .await;
                assert!(result.is_err(), "{schedule}: gc did not crash");
                assert_eq!(crash.steps().len(), k, "{schedule}: {:?}", crash.steps());
                h.clock.advance_ms(120_000);
                let rows_after_crash = h
                    .engine
                    .list_splits(&dataset_id, &ListQuery::default())
                    .await
                    .unwrap();
                let reached = recover_after_crash(
                    &h,
                    &dataset_id,
                    (j > 0).then_some(j),
                    &[RecoveryMode::RollForward],
                )
                .await;
                if k == 1 && !ambiguous {
                    // The intent was never written: the gc never happened, and recovery has
                    // nothing to do. The next gc run collects.
                    let rows = h
                        .engine
                        .list_splits(&dataset_id, &ListQuery::default())
                        .await
                        .unwrap();
                    assert_eq!(
                        rows, rows_after_crash,
                        "{schedule}: a gc that never started changed rows"
                    );
                    assert!(
                        h.engine
                            .catalog()
                            .list_intents(&dataset_id)
                            .await
                            .unwrap()
                            .is_empty()
                    );
                    h.engine.gc(&dataset_id, "gc").await.unwrap();
                }
                check_collected(&h, &dataset_id, &schedule).await;
                if j == 0 {
                    single += 1;
                    continue;
                }
                double += 1;
                if reached < j {
                    break;
                }
            }
        }
    }
    // And a gc that is not interrupted, then one with nothing left to do.
    let h = Harness::new(backend).await;
    let dataset_id = littered(&h).await;
    let done = h.engine.gc(&dataset_id, "gc").await.unwrap();
    assert_eq!(done.marked, ["abandoned-1", "abandoned-2"]);
    assert_eq!(done.deleted, ["expired-1", "expired-2"]);
    check_collected(&h, &dataset_id, "uninterrupted").await;
    let before = h.write_fingerprint(&dataset_id).await;
    let idle = h.engine.gc(&dataset_id, "gc").await.unwrap();
    assert!(idle.marked.is_empty() && idle.deleted.is_empty());
    assert_eq!(
        h.write_fingerprint(&dataset_id).await,
        before,
        "an idle gc wrote"
    );
    println!(
        "crash schedules [gc, {backend}]: {single} run, {double} more with a second crash during recovery, all converged to collected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_crash_schedules_converge_on_memory() {
    run_schedules(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_crash_schedules_converge_on_a_local_directory() {
    run_schedules(Backend::LocalDirectory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_crash_schedules_converge_on_postgres() {
    run_schedules(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_crash_schedules_converge_on_s3() {
    run_schedules(Backend::S3).await;
}

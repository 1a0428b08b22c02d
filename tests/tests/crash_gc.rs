//! Crash schedules for garbage collection: crash it at its k-th durable write, for every k,
//! cleanly and ambiguously, then recover (and again with a second crash during recovery). Every
//! schedule must converge to the gc fully done: abandoned staged splits marked, expired marked
//! splits gone (objects, then rows), the published split and its object untouched.

use std::sync::Arc;

use mend::faults::{CrashAt, DurableStep};
use mend::model::{ListQuery, SplitState, StageMode, StageRequest, StageSplit};
use mend_contract::RecoveryMode;
use mend_tests::crash::{RecoveryCrash, SecondCrashes, recover_after_crash};
use mend_tests::harness::commit_request;
use mend_tests::{Backend, Harness};

/// Intent, the plan's `executing` audit record, mark, two object deletes, the row delete, the
/// intent delete, the plan's settled record: checked against a clean run, so that a step
/// added to gc cannot go uncrashed.
const DURABLE_STEPS: usize = 8;
const HOUR_MS: i64 = 60 * 60 * 1000;

async fn commit(h: &Harness, dataset_id: &str, ids: &[&str]) {
    let request = commit_request(dataset_id, ids);
    h.engine.commit(&request).await.expect("commit");
}

/// A dataset with two abandoned staged splits, two expired marked ones and a published one,
/// all past their grace periods (the marked ones' counted from when their marks were seen).
async fn littered(h: &Harness) -> String {
    let dataset_id = h.create_dataset("gc").await;
    commit(h, &dataset_id, &["live", "expired-1", "expired-2"]).await;
    h.mark_seen_now(&dataset_id, &["expired-1".into(), "expired-2".into()])
        .await;
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

/// Counts gc's durable steps on a clean run and checks them against [`DURABLE_STEPS`] and
/// its comment.
async fn clean_run_steps(backend: Backend) -> Vec<DurableStep> {
    let h = Harness::new(backend).await;
    let dataset_id = littered(&h).await;
    let counting = Arc::new(CrashAt::new(usize::MAX, false));
    h.engine
        .with_faults(counting.clone())
        .gc(&dataset_id, "gc")
        .await
        .expect("a gc without faults");
    check_collected(&h, &dataset_id, "clean run").await;
    let steps = counting.steps();
    let delete = |id: &str| DurableStep::DeleteObject {
        split_id: id.into(),
    };
    assert_eq!(
        steps,
        [
            DurableStep::WriteIntent,
            DurableStep::AppendAudit,
            DurableStep::MarkRows,
            delete("expired-1"),
            delete("expired-2"),
            DurableStep::DeleteRows,
            DurableStep::DeleteIntent,
            DurableStep::AppendAudit,
        ],
        "{backend}: gc's durable steps changed; update DURABLE_STEPS and its comment"
    );
    assert_eq!(steps.len(), DURABLE_STEPS);
    steps
}

async fn run_schedules(backend: Backend) {
    let steps = clean_run_steps(backend).await;
    let (mut single, mut double) = (0, SecondCrashes::default());
    for ambiguous in [false, true] {
        for k in 1..=DURABLE_STEPS {
            let how = if ambiguous { "after" } else { "before" };
            for second in std::iter::once(None).chain(RecoveryCrash::all().map(Some)) {
                let schedule = format!(
                    "{backend} gc crash {how} step {k}{}",
                    second.map_or(String::new(), |crash| format!(", then {crash}"))
                );
                let h = Harness::new(backend).await;
                let dataset_id = littered(&h).await;
                let crash = Arc::new(CrashAt::new(k, ambiguous));
                let result = h
                    .engine
                    .with_faults(crash.clone())
                    .gc(&dataset_id, "gc")
                    .await;
                assert!(result.is_err(), "{schedule}: gc did not crash");
                assert_eq!(
                    crash.steps(),
                    steps[..k],
                    "{schedule}: the crashed run did not take the clean run's steps"
                );
                h.clock.advance_ms(120_000);
                let rows_after_crash = h
                    .engine
                    .list_splits(&dataset_id, &ListQuery::default())
                    .await
                    .unwrap();
                let reached =
                    recover_after_crash(&h, &dataset_id, second, &[RecoveryMode::RollForward])
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
                let Some(second) = second else {
                    single += 1;
                    continue;
                };
                double.count(second, reached);
                if reached < second.step {
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
        "crash schedules [gc, {backend}]: {DURABLE_STEPS} durable steps (counted on a clean run); {single} run, {double}, all converged to collected"
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

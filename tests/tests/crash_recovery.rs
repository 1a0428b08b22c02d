//! Crash schedules inside a batched roll-forward: a sweep settles several crashed operations in
//! one batch (two commits to roll forward, one to abandon, one stale), and crashes at each of
//! its durable writes, before the write and after it (an ambiguous outcome): before the batch's
//! `executing` records, after them, after the catalog step, after the settled records. A clean
//! sweep follows. Every schedule must converge to the same end, with no intent left,
//! invariants 1 and 2 intact, and an audit trail in which no decision's effects precede its
//! `executing` record.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use mend::engine::{CommitRequest, CommitSplit, IntentStatus, Outcome};
use mend::faults::{CrashAt, DurableStep};
use mend::model::{CheckpointDelta, PartitionDelta, SplitState};
use mend_contract::RecoveryMode;
use mend_tests::crash::{RecoveryCrash, check_invariants, recover_after_crash};
use mend_tests::{Backend, Harness};

/// Past the writers' lease (60 s by default).
const LEASE_RUN_OUT_MS: i64 = 120_000;
/// The batch's three durable steps: its `executing` records, the catalog step, its settled
/// records; checked against a clean sweep.
const SWEEP_STEPS: usize = 3;

/// How a crashed operation was left.
#[derive(Debug, Clone, Copy)]
enum Left {
    /// A commit crashed before its `k`-th durable step (of begin, object, publish).
    CrashedBefore(usize),
    /// Published, its intent left ([`Harness::leave_stale_intent`]).
    StaleIntent,
}

/// The crashed operations, by split, with how each was left and how recovery settles it.
const COMMITS: [(&str, Option<&str>, Left, SplitState); 4] = [
    // Effects in place, never published: rolled forward, each moving its own partition.
    (
        "roll-1",
        Some("0"),
        Left::CrashedBefore(3),
        SplitState::Published,
    ),
    (
        "roll-2",
        Some("1"),
        Left::CrashedBefore(3),
        SplitState::Published,
    ),
    // Its object never written: abandoned, its row marked.
    (
        "lost-1",
        None,
        Left::CrashedBefore(2),
        SplitState::MarkedForDeletion,
    ),
    // Published, its intent left: stale.
    ("done-1", None, Left::StaleIntent, SplitState::Published),
];

fn commit(dataset_id: &str, split_id: &str, partition: Option<&str>) -> CommitRequest {
    CommitRequest {
        dataset_id: dataset_id.into(),
        node: "writer".into(),
        splits: vec![CommitSplit {
            split_id: split_id.into(),
            metadata_json: "{}".into(),
            payload: Bytes::from(format!("payload of {split_id}")),
        }],
        checkpoint_delta: partition.map(|partition| CheckpointDelta {
            source: "events".into(),
            partitions: vec![PartitionDelta {
                partition: partition.into(),
                from_position: None,
                to_position: 100,
            }],
        }),
        publish_token: None,
    }
}

/// A dataset with the four crashed commits, their writers' leases run out.
async fn setup(h: &Harness) -> String {
    let dataset_id = h.create_dataset("crash-batch").await;
    for (split_id, partition, left, _) in COMMITS {
        let request = commit(&dataset_id, split_id, partition);
        match left {
            Left::CrashedBefore(step) => {
                let crashing = h.engine.with_faults(Arc::new(CrashAt::new(step, false)));
                assert!(crashing.commit(&request).await.is_err());
            }
            Left::StaleIntent => h.leave_stale_intent(&request).await,
        }
        h.clock.advance_ms(1);
    }
    h.clock.advance_ms(LEASE_RUN_OUT_MS);
    dataset_id
}

/// The end every schedule converges to; panics on anything else.
async fn check_converged(h: &Harness, dataset_id: &str, schedule: &str) -> usize {
    check_invariants(h, dataset_id, schedule).await;
    let rows = h.rows(dataset_id).await;
    for (split_id, _, _, settled) in COMMITS {
        let row = rows.iter().find(|row| row.split_id == split_id);
        assert_eq!(
            row.map(|row| row.state),
            Some(settled),
            "{schedule}: {split_id}: {rows:?}"
        );
    }
    let checkpoint = h.engine.dataset(dataset_id).await.unwrap().checkpoint;
    assert_eq!(checkpoint["events"]["0"], 100, "{schedule}");
    assert_eq!(checkpoint["events"]["1"], 100, "{schedule}");

    // Per operation, every settled record follows an `executing` one: no effect ever lands
    // before its record. An `executing` record may stand alone (a sweep that stopped after
    // appending it, or before its settled append): the next sweep decided again, or the
    // intent was gone, so the decision had finished.
    let audit = h
        .engine
        .catalog()
        .list_audit(dataset_id, None)
        .await
        .unwrap();
    let mut by_operation: BTreeMap<&str, Vec<bool>> = BTreeMap::new();
    for record in &audit {
        by_operation
            .entry(record.operation_id.as_str())
            .or_default()
            .push(record.is_executing());
    }
    assert_eq!(by_operation.len(), COMMITS.len(), "{schedule}: {audit:?}");
    for (operation_id, executing) in &by_operation {
        let settled_first = executing.first() != Some(&true);
        let settled_twice = executing.windows(2).any(|pair| !pair[0] && !pair[1]);
        assert!(
            !settled_first && !settled_twice,
            "{schedule}: a settled record of {operation_id} follows no executing one: {executing:?}"
        );
    }
    4 + COMMITS.len() + 2 + 1 + by_operation.len()
}

async fn run_schedules(backend: Backend) {
    // The sweep's durable steps on a clean run: one batch.
    {
        let h = Harness::new(backend).await;
        let dataset_id = setup(&h).await;
        let counting = Arc::new(CrashAt::new(usize::MAX, false));
        let report = h
            .engine
            .with_faults(counting.clone())
            .recover(&dataset_id, RecoveryMode::RollForward)
            .await
            .unwrap();
        assert_eq!(
            report.count(IntentStatus::RollForwardRequired),
            2,
            "{report:?}"
        );
        assert_eq!(report.count(IntentStatus::Abandoned), 1, "{report:?}");
        assert_eq!(report.count(IntentStatus::Clean), 1, "{report:?}");
        assert!(
            report
                .intents
                .iter()
                .all(|i| i.outcome == Outcome::Executed)
        );
        assert_eq!(
            counting.steps(),
            [
                DurableStep::AppendAudit,
                DurableStep::SettleIntents,
                DurableStep::AppendAudit
            ],
            "{backend}: one batch"
        );
        assert_eq!(counting.steps().len(), SWEEP_STEPS);
        check_converged(&h, &dataset_id, "clean sweep").await;
    }

    let (mut schedules, mut checks) = (0, 0);
    let mut left_alone = 0;
    for step in 1..=SWEEP_STEPS {
        for after in [false, true] {
            let crash = RecoveryCrash { step, after };
            let schedule = format!("batched roll-forward on {backend}: {crash}");
            let h = Harness::new(backend).await;
            let dataset_id = setup(&h).await;
            let reached =
                recover_after_crash(&h, &dataset_id, Some(crash), &[RecoveryMode::RollForward])
                    .await;
            assert!(reached >= step, "{schedule}: the crash did not fire");
            checks += check_converged(&h, &dataset_id, &schedule).await;
            let audit = h
                .engine
                .catalog()
                .list_audit(&dataset_id, None)
                .await
                .unwrap();
            left_alone += audit
                .iter()
                .filter(|record| record.is_executing())
                .count()
                .saturating_sub(audit.iter().filter(|record| !record.is_executing()).count());
            schedules += 1;
        }
    }
    println!(
        "crash schedules [batched roll-forward, {backend}]: {} operations in one batch of {SWEEP_STEPS} durable steps; {schedules} schedules (a crash before and after each step), all converged: {checks} checks, {left_alone} executing records left without a settled one (a sweep stopped after its executing append: the next one decided again, or found the intents gone)",
        COMMITS.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_roll_forward_crash_schedules_converge_on_memory() {
    run_schedules(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_roll_forward_crash_schedules_converge_on_a_local_directory() {
    run_schedules(Backend::LocalDirectory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_roll_forward_crash_schedules_converge_on_postgres() {
    run_schedules(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_roll_forward_crash_schedules_converge_on_s3() {
    run_schedules(Backend::S3).await;
}

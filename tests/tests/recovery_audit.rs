//! The audit never lags the effects, on every backend: a sweep records each decision it is
//! about to execute (outcome `executing`) before its first effect, and the settled outcome
//! after. A failure of the second append leaves the first record describing the decision
//! whose effects landed; a failure of the first means nothing was executed.

use std::sync::Arc;

use bytes::Bytes;
use mend::engine::{CommitRequest, CommitSplit};
use mend::faults::{CrashAt, DurableStep};
use mend::intent::IntentPhase;
use mend::model::SplitState;
use mend_contract::RecoveryMode;
use mend_tests::{Backend, Harness};

const SPLITS: [&str; 2] = ["r-1", "r-2"];

/// A dataset with a commit that crashed before confirming, its lease run out: roll-forward
/// abandons it. Returns the dataset and the operation id.
async fn unconfirmed_commit(h: &Harness) -> (String, String) {
    let dataset_id = h.create_dataset("audit").await;
    let request = CommitRequest {
        dataset_id: dataset_id.clone(),
        node: "writer".into(),
        splits: SPLITS
            .iter()
            .map(|id| CommitSplit {
                split_id: (*id).into(),
                metadata_json: "{}".into(),
                payload: Bytes::from_static(b"bytes"),
            })
            .collect(),
        checkpoint_delta: None,
        publish_token: None,
    };
    // Before its second object (its steps: begin, the two objects, publish).
    let crashing = h.engine.with_faults(Arc::new(CrashAt::new(3, false)));
    assert!(crashing.commit(&request).await.is_err());
    h.clock.advance_ms(120_000);
    let intents = h.engine.catalog().list_intents(&dataset_id).await.unwrap();
    (dataset_id, intents[0].operation_id.clone())
}

async fn check(backend: Backend) {
    let mut checks = 0;

    // The sweep's durable steps on a clean run: the record first, the effects, the record.
    let steps = {
        let h = Harness::new(backend).await;
        let (dataset_id, _) = unconfirmed_commit(&h).await;
        let counting = Arc::new(CrashAt::new(usize::MAX, false));
        h.engine
            .with_faults(counting.clone())
            .recover(&dataset_id, RecoveryMode::RollForward)
            .await
            .unwrap();
        counting.steps()
    };
    assert_eq!(
        steps,
        [
            DurableStep::AppendAudit,
            DurableStep::SettleIntents,
            DurableStep::AppendAudit,
        ],
        "{backend}: the sweep's steps changed"
    );
    checks += 1;

    // The settled record's append fails: the effects landed, and the record written before
    // them says which decision made them.
    {
        let h = Harness::new(backend).await;
        let (dataset_id, operation_id) = unconfirmed_commit(&h).await;
        let crash = Arc::new(CrashAt::new(steps.len(), false));
        let failed = h
            .engine
            .with_faults(crash)
            .recover(&dataset_id, RecoveryMode::RollForward)
            .await;
        assert!(failed.is_err(), "{failed:?}");
        assert!(
            h.engine
                .catalog()
                .list_intents(&dataset_id)
                .await
                .unwrap()
                .is_empty(),
            "the decision was executed to its end"
        );
        for row in h.rows(&dataset_id).await {
            assert_eq!(row.state, SplitState::MarkedForDeletion, "{row:?}");
        }
        let audit = h
            .engine
            .catalog()
            .list_audit(&dataset_id, None)
            .await
            .unwrap();
        assert_eq!(audit.len(), 1, "{audit:?}");
        let record = &audit[0];
        assert!(record.is_executing(), "{record:?}");
        assert_eq!(record.outcome, serde_json::json!({"outcome": "executing"}));
        assert_eq!(record.operation_id, operation_id);
        assert_eq!(record.mode, "roll-forward");
        assert!(record.decision.get("abandon").is_some(), "{record:?}");
        assert_eq!(record.policy_digest, h.engine.policy().digest());
        assert!(record.inputs.is_some(), "replayable: {record:?}");
        checks += 9;

        // A replay asks the decision once, and the policy that made it agrees.
        let replay = mend::runtime::replay::replay(&h.engine.policy(), &audit);
        assert_eq!((replay.replayed, replay.unchanged), (1, 1), "{replay:?}");
        checks += 1;
    }

    // The first record's append fails: nothing was executed.
    {
        let h = Harness::new(backend).await;
        let (dataset_id, _) = unconfirmed_commit(&h).await;
        let fingerprint = h.write_fingerprint(&dataset_id).await;
        let failed = h
            .engine
            .with_faults(Arc::new(CrashAt::new(1, false)))
            .recover(&dataset_id, RecoveryMode::RollForward)
            .await;
        assert!(failed.is_err(), "{failed:?}");
        assert_eq!(h.write_fingerprint(&dataset_id).await, fingerprint);
        let intents = h.engine.catalog().list_intents(&dataset_id).await.unwrap();
        assert_eq!(intents[0].phase, IntentPhase::Armed);
        checks += 3;
    }

    // Without faults: both records, and replay counts the decision once.
    {
        let h = Harness::new(backend).await;
        let (dataset_id, _) = unconfirmed_commit(&h).await;
        h.engine
            .recover(&dataset_id, RecoveryMode::RollForward)
            .await
            .unwrap();
        let audit = h
            .engine
            .catalog()
            .list_audit(&dataset_id, None)
            .await
            .unwrap();
        assert_eq!(audit.len(), 2);
        assert!(audit[0].is_executing() && !audit[1].is_executing());
        assert_eq!(audit[0].inputs_hash, audit[1].inputs_hash);
        let replay = mend::runtime::replay::replay(&h.engine.policy(), &audit);
        assert_eq!((replay.replayed, replay.unchanged), (1, 1), "{replay:?}");
        checks += 4;
    }
    println!(
        "recovery audit [{backend}]: {checks} checks: recorded before the effects, settled after; a failed settle leaves the executing record naming the decision; a failed first append executes nothing"
    );
}

#[tokio::test]
async fn the_audit_never_lags_the_effects_on_memory() {
    check(Backend::Memory).await;
}

#[tokio::test]
async fn the_audit_never_lags_the_effects_on_a_local_directory() {
    check(Backend::LocalDirectory).await;
}

#[tokio::test]
async fn the_audit_never_lags_the_effects_on_postgres() {
    check(Backend::Postgres).await;
}

#[tokio::test]
async fn the_audit_never_lags_the_effects_on_s3() {
    check(Backend::S3).await;
}

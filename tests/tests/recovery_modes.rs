//! What each recovery mode may do: probe and verify write nothing at all; roll-forward never
//! compensates (it abandons an unconfirmed commit whose owner is gone, see
//! `tests/abandonment.rs`); exclusive may roll back; a live owner is deferred to.

use std::sync::Arc;

use bytes::Bytes;
use mend::engine::{CommitRequest, CommitSplit, IntentStatus, Outcome};
use mend::faults::CrashAt;
use mend::model::{ListQuery, SplitState};
use mend_contract::RecoveryMode;
use mend_tests::{Backend, Harness};

fn request(dataset_id: &str) -> CommitRequest {
    CommitRequest {
        dataset_id: dataset_id.into(),
        node: "writer".into(),
        splits: ["m-1", "m-2"]
            .iter()
            .map(|id| CommitSplit {
                split_id: (*id).into(),
                metadata_json: "{}".into(),
                payload: Bytes::from_static(b"bytes"),
            })
            .collect(),
        checkpoint_delta: None,
        publish_token: None,
    }
}

/// A commit crashed after its first object (its steps: begin, the two objects, publish): rows
/// staged, one object missing.
async fn half_done(h: &Harness) -> String {
    let dataset_id = h.create_dataset("modes").await;
    let crashing = h.engine.with_faults(Arc::new(CrashAt::new(3, false)));
    assert!(crashing.commit(&request(&dataset_id)).await.is_err());
    dataset_id
}

async fn check_modes(backend: Backend) {
    let h = Harness::new(backend).await;
    let dataset_id = half_done(&h).await;
    let intents = h.engine.catalog().list_intents(&dataset_id).await.unwrap();
    let rows = h
        .engine
        .list_splits(&dataset_id, &ListQuery::default())
        .await
        .unwrap();
    let fingerprint = h.write_fingerprint(&dataset_id).await;

    // The owner's lease is live: everything defers, nothing is written.
    let live = h
        .engine
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await
        .unwrap();
    assert_eq!(live.count(IntentStatus::Deferred), 1, "{live:?}");

    h.clock.advance_ms(120_000);
    let mut checks = 0;
    // Probe and verify say what roll-forward would do (abandon the unconfirmed commit whose
    // owner is gone) and write nothing.
    for mode in [RecoveryMode::Probe, RecoveryMode::Verify] {
        let report = h.engine.recover(&dataset_id, mode).await.unwrap();
        assert_eq!(
            report.count(IntentStatus::Abandoned),
            1,
            "{mode:?}: {report:?}"
        );
        assert!(
            report
                .intents
                .iter()
                .all(|i| matches!(i.outcome, Outcome::Reported))
        );
        assert_eq!(
            h.write_fingerprint(&dataset_id).await,
            fingerprint,
            "{mode:?} wrote to storage"
        );
        assert_eq!(
            h.engine.catalog().list_intents(&dataset_id).await.unwrap(),
            intents
        );
        assert_eq!(
            h.engine
                .list_splits(&dataset_id, &ListQuery::default())
                .await
                .unwrap(),
            rows
        );
        checks += 1;
    }

    // Exclusive recovery keeps its roll-back (it also deletes the objects at once).
    let exclusive = h
        .engine
        .recover(&dataset_id, RecoveryMode::Exclusive)
        .await
        .unwrap();
    let audit = h
        .engine
        .catalog()
        .list_audit(&dataset_id, None)
        .await
        .unwrap();
    assert_eq!(
        audit.len(),
        2,
        "only the executed decision is audited, before and after: {audit:?}"
    );
    for record in &audit {
        assert_eq!(record.operation_id, intents[0].operation_id);
        assert_eq!(record.mode, "exclusive");
        assert_eq!(record.policy_digest, h.engine.policy().digest());
        assert_eq!(
            record.semantics_revision,
            h.engine.policy().description().semantics_revision
        );
        assert!(record.inputs_hash.starts_with("sha256:"));
        assert_eq!(record.decision, serde_json::json!("roll_back"));
    }
    assert_eq!(
        audit[0].outcome,
        serde_json::json!({"outcome": "executing"})
    );
    assert_eq!(audit[1].outcome, serde_json::json!({"outcome": "executed"}));
    assert_eq!(exclusive.count(IntentStatus::NeedsCompensation), 1);
    assert!(
        exclusive
            .intents
            .iter()
            .all(|i| i.outcome == Outcome::Executed)
    );
    assert!(
        h.engine
            .catalog()
            .list_intents(&dataset_id)
            .await
            .unwrap()
            .is_empty()
    );
    let left = h
        .engine
        .list_splits(&dataset_id, &ListQuery::default())
        .await
        .unwrap()
        .splits;
    assert!(
        left.iter().all(|row| row.state != SplitState::Staged),
        "{left:?}"
    );
    println!(
        "recovery modes [{backend}]: deferred while the owner lives; {checks} read-only sweeps wrote nothing; exclusive rolled back"
    );
}

#[tokio::test]
async fn recovery_modes_on_memory() {
    check_modes(Backend::Memory).await;
}

#[tokio::test]
async fn recovery_modes_on_postgres() {
    check_modes(Backend::Postgres).await;
}

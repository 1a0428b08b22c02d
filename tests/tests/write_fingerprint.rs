//! The write fingerprint that every "writes nothing" check relies on
//! ([`Harness::write_fingerprint`]) changes on a write to any part of the catalog, each made
//! alone: the dataset row, a split row, an intent (written, then deleted) and an audit record.
//! On Postgres those are four tables, each of which a fingerprint of fewer would miss.

use std::sync::Arc;

use bytes::Bytes;
use mend::audit::{AUDIT_FORMAT_VERSION, AuditRecord};
use mend::engine::{CommitRequest, CommitSplit};
use mend::faults::CrashAt;
use mend::model::{StageMode, StageRequest, StageSplit};
use mend_tests::{Backend, Harness};

async fn every_write_changes_the_fingerprint(backend: Backend) {
    let h = Harness::new(backend).await;
    let dataset_id = h.create_dataset("fingerprint").await;
    let mut seen = Vec::new();
    let mut changed = |what: &'static str, before, after| {
        assert_ne!(before, after, "{backend}: the fingerprint missed {what}");
        seen.push(what);
    };

    let before = h.write_fingerprint(&dataset_id).await;
    h.engine
        .set_publish_token(&dataset_id, Some("token"))
        .await
        .unwrap();
    changed(
        "a dataset row update",
        before,
        h.write_fingerprint(&dataset_id).await,
    );

    let before = h.write_fingerprint(&dataset_id).await;
    h.engine
        .stage(&StageRequest {
            dataset_id: dataset_id.clone(),
            mode: StageMode::CreateOnly,
            node: "n".into(),
            splits: vec![StageSplit {
                split_id: "s".into(),
                metadata_json: "{}".into(),
            }],
        })
        .await
        .unwrap();
    changed(
        "a split row insert",
        before,
        h.write_fingerprint(&dataset_id).await,
    );

    // A commit crashed once its intent landed: the intent is its only write.
    let before = h.write_fingerprint(&dataset_id).await;
    let commit = CommitRequest {
        dataset_id: dataset_id.clone(),
        node: "writer".into(),
        splits: vec![CommitSplit {
            split_id: "c".into(),
            metadata_json: "{}".into(),
            payload: Bytes::from_static(b"bytes"),
        }],
        checkpoint_delta: None,
        publish_token: None,
    };
    let crashing = h.engine.with_faults(Arc::new(CrashAt::new(1, true)));
    assert!(crashing.commit(&commit).await.is_err());
    let intents = h.engine.catalog().list_intents(&dataset_id).await.unwrap();
    assert_eq!(intents.len(), 1);
    changed(
        "an intent insert",
        before,
        h.write_fingerprint(&dataset_id).await,
    );

    let before = h.write_fingerprint(&dataset_id).await;
    h.engine
        .catalog()
        .delete_intent(&dataset_id, &intents[0].operation_id, h.clock_now())
        .await
        .unwrap();
    changed(
        "an intent delete",
        before,
        h.write_fingerprint(&dataset_id).await,
    );

    let before = h.write_fingerprint(&dataset_id).await;
    let record = AuditRecord {
        format_version: AUDIT_FORMAT_VERSION,
        dataset_id: dataset_id.clone(),
        operation_id: "audited".into(),
        recorded_at_ms: h.clock_now(),
        mode: "verify".into(),
        policy_digest: h.engine.policy().digest().into(),
        semantics_revision: 1,
        inputs_hash: "sha256:00".into(),
        decision: serde_json::json!("stale"),
        outcome: serde_json::json!("recorded by the fingerprint test"),
        inputs: None,
        principal: None,
    };
    h.engine
        .catalog()
        .append_audit(&dataset_id, &[record])
        .await
        .unwrap();
    changed(
        "an audit record",
        before,
        h.write_fingerprint(&dataset_id).await,
    );

    // And a read changes nothing.
    let before = h.write_fingerprint(&dataset_id).await;
    h.rows(&dataset_id).await;
    h.engine
        .catalog()
        .list_audit(&dataset_id, None)
        .await
        .unwrap();
    assert_eq!(before, h.write_fingerprint(&dataset_id).await);
    println!(
        "write fingerprint [{backend}]: changed on each of {} writes made alone ({}); unchanged by reads",
        seen.len(),
        seen.join(", ")
    );
}

#[tokio::test]
async fn every_write_changes_the_fingerprint_on_postgres() {
    every_write_changes_the_fingerprint(Backend::Postgres).await;
}

#[tokio::test]
async fn every_write_changes_the_fingerprint_on_memory() {
    every_write_changes_the_fingerprint(Backend::Memory).await;
}

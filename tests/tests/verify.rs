//! Verify reports broken invariants over the whole dataset, bucket included, and writes
//! nothing.

use bytes::Bytes;
use mend::engine::{CommitRequest, CommitSplit};
use mend::objects::format::{HEADER_FORMAT_VERSION, SplitObjectHeader, sha256};
use mend_tests::{Backend, Harness};
use object_store::{ObjectStore, PutPayload};

async fn check_verify(backend: Backend) {
    let h = Harness::new(backend).await;
    let dataset_id = h.create_dataset("verify").await;
    let commit = CommitRequest {
        dataset_id: dataset_id.clone(),
        node: "writer".into(),
        splits: ["v-1", "v-2"]
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
    h.engine.commit(&commit).await.expect("commit");

    let before = h.write_fingerprint(&dataset_id).await;
    let clean = h.engine.verify(&dataset_id).await.unwrap();
    assert!(clean.violations.is_empty(), "{clean:?}");
    assert_eq!((clean.rows_checked, clean.objects_checked), (2, 2));
    assert_eq!(
        h.write_fingerprint(&dataset_id).await,
        before,
        "verify wrote to storage"
    );

    // Damage the bucket behind mend's back.
    let store = h.store.as_ref().expect("a counting store").clone();
    store
        .delete(&h.engine.objects().path(&dataset_id, "v-1"))
        .await
        .unwrap();
    store
        .put(
            &h.engine.objects().path(&dataset_id, "garbage"),
            PutPayload::from_static(b"not a split object"),
        )
        .await
        .unwrap();
    let dataset = h.engine.dataset(&dataset_id).await.unwrap();
    let orphan = SplitObjectHeader {
        format_version: HEADER_FORMAT_VERSION,
        dataset_id: dataset_id.clone(),
        dataset_uid: dataset.uid,
        split_id: "orphan".into(),
        node: "ghost".into(),
        metadata_json: "{}".into(),
        operation_id: None,
        payload_size: 1,
        payload_sha256: sha256(b"x"),
    };
    h.engine.objects().put_split(&orphan, b"x").await.unwrap();

    let before = h.write_fingerprint(&dataset_id).await;
    let report = h.engine.verify(&dataset_id).await.unwrap();
    let found: Vec<(u8, &str)> = report
        .violations
        .iter()
        .map(|v| (v.invariant, v.split_id.as_str()))
        .collect();
    assert_eq!(found, [(1, "v-1"), (0, "garbage")], "{report:?}");
    assert_eq!(report.orphan_objects, ["garbage", "orphan"]);
    // Recovery in verify mode sweeps the intents and checks the same invariants, writing
    // nothing either.
    let swept = h
        .engine
        .recover(&dataset_id, mend_contract::RecoveryMode::Verify)
        .await
        .unwrap();
    assert_eq!(swept.verify.as_ref(), Some(&report));
    assert_eq!(
        h.write_fingerprint(&dataset_id).await,
        before,
        "verify wrote to storage"
    );
    println!(
        "verify [{backend}]: {} rows and {} objects checked, {} violations found as planted, 0 writes",
        report.rows_checked,
        report.objects_checked,
        report.violations.len()
    );
}

#[tokio::test]
async fn verify_on_memory() {
    check_verify(Backend::Memory).await;
}

#[tokio::test]
async fn verify_on_a_local_directory() {
    check_verify(Backend::LocalDirectory).await;
}

#[tokio::test]
async fn verify_on_postgres() {
    check_verify(Backend::Postgres).await;
}

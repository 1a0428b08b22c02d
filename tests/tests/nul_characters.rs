//! A NUL character (U+0000) in anything a request carries into the catalog is refused in
//! validation, as `InvalidArgument` naming the field, before anything is written, the same on
//! every backend. PostgreSQL cannot store one in `text` or `jsonb` (`\u0000` fails as
//! "unsupported Unicode escape sequence"), so without the check a Postgres catalog answered
//! "outcome unknown, safe to retry" (a begin had written its intent first) while the
//! object-storage catalogs stored it.
//!
//! Each input is sent alone, on a dataset the harness fingerprints before and after: the
//! fingerprint (row versions on Postgres, the store's write count elsewhere) must not move.

use std::collections::BTreeMap;

use bytes::Bytes;
use mend::MendError;
use mend::engine::{BeginOperation, CommitRequest, CommitSplit, ExternalKind, PlannedSplit};
use mend::model::{
    CheckpointDelta, DatasetConfig, PartitionDelta, PublishRequest, StageMode, StageRequest,
    StageSplit,
};
use mend::objects::format::sha256;
use mend_tests::{Backend, Harness};

fn stage(dataset_id: &str, node: &str, metadata_json: &str) -> StageRequest {
    StageRequest {
        dataset_id: dataset_id.into(),
        mode: StageMode::CreateOnly,
        node: node.into(),
        splits: vec![StageSplit {
            split_id: "s1".into(),
            metadata_json: metadata_json.into(),
        }],
    }
}

fn delta(source: &str, partition: &str) -> CheckpointDelta {
    CheckpointDelta {
        source: source.into(),
        partitions: vec![PartitionDelta {
            partition: partition.into(),
            from_position: None,
            to_position: 5,
        }],
    }
}

fn publish_delta(dataset_id: &str, delta: CheckpointDelta) -> PublishRequest {
    PublishRequest {
        checkpoint_delta: Some(delta),
        ..PublishRequest::staged(dataset_id, Vec::new())
    }
}

fn begin(dataset_id: &str, metadata_json: &str, delta: Option<CheckpointDelta>) -> BeginOperation {
    BeginOperation {
        dataset_id: dataset_id.into(),
        operation_id: Some("op-nul".into()),
        kind: ExternalKind::Commit,
        node: "writer".into(),
        lease_ms: None,
        splits: vec![PlannedSplit {
            split_id: "s1".into(),
            metadata_json: metadata_json.into(),
            size: 5,
            sha256: sha256(b"bytes"),
        }],
        checkpoint_delta: delta,
        replaced_split_ids: Vec::new(),
        publish_token: None,
    }
}

fn config(key: &str, value: &str) -> DatasetConfig {
    DatasetConfig {
        policy_params: BTreeMap::from([(key.to_owned(), value.to_owned())]),
        ..DatasetConfig::default()
    }
}

/// `result` is InvalidArgument and its message names every one of `names`.
fn refused<T: std::fmt::Debug>(
    backend: Backend,
    what: &str,
    result: mend::error::Result<T>,
    names: &[&str],
) {
    match result {
        Err(MendError::InvalidArgument { message }) => {
            for name in names {
                assert!(
                    message.contains(name),
                    "{backend}: {what}: {message:?} should name {name:?}"
                );
            }
            assert!(
                !message.contains('\0'),
                "{backend}: {what}: the message quotes the NUL raw: {message:?}"
            );
        }
        other => panic!("{backend}: {what}: expected InvalidArgument, got {other:?}"),
    }
}

async fn nul_is_refused_before_anything_is_written(backend: Backend) -> usize {
    let h = Harness::new(backend).await;
    let engine = &h.engine;
    let ds = h.create_dataset("nul").await;
    let mut checked = 0;

    // Split metadata, as text with the JSON escape (the only way a NUL can be in JSON text):
    // in a key, in a value, nested in objects and arrays; through stage, begin and commit.
    let metadata = [
        (r#"{"k\u0000": 1}"#, "key"),
        (r#"{"k": "a\u0000b"}"#, "value"),
        (r#"{"a": {"b": ["x", {"c": "y\u0000"}]}}"#, "a.b[1].c"),
        (
            r#"{"time_range": {"start": 1, "end": 2}, "t\u0000": {}}"#,
            "key",
        ),
    ];
    for (text, place) in metadata {
        let before = h.write_fingerprint(&ds).await;
        refused(
            backend,
            text,
            engine.stage(&stage(&ds, "writer", text)).await,
            &["metadata of split \"s1\"", "NUL", place],
        );
        refused(
            backend,
            text,
            engine
                .stage(&stage(&ds, "writer", text))
                .idempotency_key("key-1")
                .await,
            &["metadata of split \"s1\"", "NUL"],
        );
        refused(
            backend,
            text,
            engine.begin_operation(&begin(&ds, text, None)).await,
            &["metadata of split \"s1\"", "NUL"],
        );
        let commit = CommitRequest {
            dataset_id: ds.clone(),
            node: "writer".into(),
            splits: vec![CommitSplit {
                split_id: "s1".into(),
                metadata_json: text.into(),
                payload: Bytes::from_static(b"bytes"),
            }],
            checkpoint_delta: None,
            publish_token: None,
        };
        refused(
            backend,
            text,
            engine.commit(&commit).await,
            &["metadata of split \"s1\"", "NUL"],
        );
        assert_eq!(
            before,
            h.write_fingerprint(&ds).await,
            "{backend}: {text} wrote something"
        );
        checked += 4;
    }

    // Names: a node, a checkpoint source and partition (published alone, or planned at
    // begin), a publish token, a policy parameter's key and value.
    let before = h.write_fingerprint(&ds).await;
    refused(
        backend,
        "node",
        engine.stage(&stage(&ds, "wri\0ter", "{}")).await,
        &["node"],
    );
    refused(backend, "gc node", engine.gc(&ds, "gc\0").await, &["node"]);
    refused(
        backend,
        "reconcile node",
        engine.reconcile(&ds, "rec\0").await,
        &["node"],
    );
    refused(
        backend,
        "source",
        engine
            .publish(&publish_delta(&ds, delta("kaf\0ka", "p0")))
            .await,
        &["checkpoint source"],
    );
    refused(
        backend,
        "partition",
        engine
            .publish(&publish_delta(&ds, delta("kafka", "p\0")))
            .await,
        &["partition"],
    );
    refused(
        backend,
        "begin source",
        engine
            .begin_operation(&begin(&ds, "{}", Some(delta("kaf\0ka", "p0"))))
            .await,
        &["checkpoint source"],
    );
    refused(
        backend,
        "begin partition",
        engine
            .begin_operation(&begin(&ds, "{}", Some(delta("kafka", "p\0"))))
            .await,
        &["partition"],
    );
    refused(
        backend,
        "publish token",
        engine.set_publish_token(&ds, Some("tok\0en")).await,
        &["publish token"],
    );
    refused(
        backend,
        "idempotency key",
        engine
            .stage(&stage(&ds, "writer", "{}"))
            .idempotency_key("key\0")
            .await,
        &["idempotency key"],
    );
    refused(
        backend,
        "policy parameter key",
        engine
            .apply_config(&ds, 1, &config("ke\0y", "v"), "writer")
            .await,
        &["policy parameter"],
    );
    refused(
        backend,
        "policy parameter value",
        engine
            .apply_config(&ds, 1, &config("key", "va\0lue"), "writer")
            .await,
        &["policy parameter \"key\"", "NUL"],
    );
    assert_eq!(
        before,
        h.write_fingerprint(&ds).await,
        "{backend}: a refused name wrote something"
    );
    checked += 11;

    // A dataset created with one in its config is not created.
    let new_id = h.unique_dataset_id("nul-new");
    refused(
        backend,
        "create with a parameter",
        engine
            .create_dataset(&new_id, &config("key", "va\0lue"))
            .await,
        &["policy parameter \"key\"", "NUL"],
    );
    assert!(
        matches!(
            engine.dataset(&new_id).await,
            Err(MendError::NotFound { .. })
        ),
        "{backend}: the dataset was created"
    );
    checked += 2;

    // Not a NUL: an escaped backslash followed by `u0000` is six ordinary characters, and
    // every backend stores it and reads it back as written.
    let text = r#"{"k": "\\u0000"}"#;
    engine.stage(&stage(&ds, "writer", text)).await.unwrap();
    let rows = h.rows(&ds).await;
    assert_eq!(
        rows[0].metadata,
        serde_json::json!({"k": "\\u0000"}),
        "{backend}"
    );
    checked += 1;
    println!("nul characters [{backend}]: {checked} inputs refused or stored as they should be");
    checked
}

#[tokio::test]
async fn a_nul_character_is_refused_naming_its_field_on_every_backend() {
    let mut checked = 0;
    for backend in Backend::ALL {
        checked += nul_is_refused_before_anything_is_written(backend).await;
    }
    assert_eq!(checked, 30 * Backend::ALL.len());
}

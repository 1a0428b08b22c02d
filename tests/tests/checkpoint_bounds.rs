//! A checkpoint's names and numbers are bounded where they enter, on every backend: a source
//! or partition name follows the rules of node names (1 to 128 printable bytes, no control,
//! invisible or bidi characters, no surrounding whitespace), a delta moves at most
//! `bounds::CHECKPOINT_DELTA_PARTITIONS` partitions, a position is at most `i64::MAX` (a
//! partition moved to `u64::MAX` could never move again), and a dataset's checkpoint holds at
//! most `bounds::CHECKPOINT_PARTITIONS` partitions: the publish that would add one more is
//! refused where the delta meets the current checkpoint, and nothing is written.

use mend::MendError;
use mend::bounds;
use mend::engine::{BeginOperation, ExternalKind, PlannedSplit};
use mend::model::{CheckpointDelta, PartitionDelta, PublishRequest};
use mend::objects::format::sha256;
use mend_tests::{Backend, Harness};

fn moves(
    source: &str,
    partitions: impl IntoIterator<Item = (String, Option<u64>, u64)>,
) -> CheckpointDelta {
    CheckpointDelta {
        source: source.into(),
        partitions: partitions
            .into_iter()
            .map(|(partition, from_position, to_position)| PartitionDelta {
                partition,
                from_position,
                to_position,
            })
            .collect(),
    }
}

fn one(source: &str, partition: &str, from: Option<u64>, to: u64) -> CheckpointDelta {
    moves(source, [(partition.to_owned(), from, to)])
}

fn publish(dataset_id: &str, delta: CheckpointDelta) -> PublishRequest {
    PublishRequest {
        checkpoint_delta: Some(delta),
        ..PublishRequest::staged(dataset_id, Vec::new())
    }
}

fn begin(dataset_id: &str, delta: CheckpointDelta) -> BeginOperation {
    BeginOperation {
        dataset_id: dataset_id.into(),
        operation_id: Some("op-bounds".into()),
        kind: ExternalKind::Commit,
        node: "writer".into(),
        lease_ms: None,
        splits: vec![PlannedSplit {
            split_id: "s1".into(),
            metadata_json: "{}".into(),
            size: 5,
            sha256: sha256(b"bytes"),
        }],
        checkpoint_delta: Some(delta),
        replaced_split_ids: Vec::new(),
        publish_token: None,
    }
}

fn invalid<T: std::fmt::Debug>(
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
            assert!(message.len() < 400, "{backend}: {what}: {message:?}");
        }
        other => panic!("{backend}: {what}: expected InvalidArgument, got {other:?}"),
    }
}

async fn checkpoints_are_bounded(backend: Backend) -> usize {
    let h = Harness::new(backend).await;
    let engine = &h.engine;
    let ds = h.create_dataset("bounds").await;
    let mut checked = 0;
    let max_position = i64::MAX as u64;

    // Names, as a source and as a partition, published alone or planned at begin.
    let long = "s".repeat(129);
    let huge = "x".repeat(100_000);
    let bad_names: [(&str, &str); 8] = [
        ("", "empty"),
        (&long, "longer than 128 bytes"),
        (&huge, "longer than 128 bytes"),
        ("a\tb", "control character"),
        ("a\u{7}", "control character"),
        ("ab\u{202E}c", "bidi"),
        ("\u{200B}p", "invisible"),
        (" p", "whitespace"),
    ];
    let before = h.write_fingerprint(&ds).await;
    for (name, problem) in bad_names {
        invalid(
            backend,
            problem,
            engine
                .publish(&publish(&ds, one(name, "p0", None, 1)))
                .await,
            &["checkpoint source", problem],
        );
        invalid(
            backend,
            problem,
            engine
                .publish(&publish(&ds, one("kafka", name, None, 1)))
                .await,
            &["checkpoint partition", problem],
        );
        invalid(
            backend,
            problem,
            engine
                .begin_operation(&begin(&ds, one("kafka", name, None, 1)))
                .await,
            &["checkpoint partition", problem],
        );
        checked += 3;
    }
    // A long name is quoted by its first 64 characters only.
    let error = engine
        .publish(&publish(&ds, one(&huge, "p0", None, 1)))
        .await
        .unwrap_err()
        .to_string();
    assert!(!error.contains(&"x".repeat(65)), "{backend}: {error}");

    // Positions: up to i64::MAX, as Postgres stores them; past it, refused naming the field.
    for (from, to, field) in [
        (None, u64::MAX, "to_position"),
        (None, max_position + 1, "to_position"),
        (Some(max_position + 1), u64::MAX, "from_position"),
    ] {
        invalid(
            backend,
            field,
            engine
                .publish(&publish(&ds, one("kafka", "p0", from, to)))
                .await,
            &[field, "p0", &max_position.to_string()],
        );
        invalid(
            backend,
            field,
            engine
                .begin_operation(&begin(&ds, one("kafka", "p0", from, to)))
                .await,
            &[field, &max_position.to_string()],
        );
        checked += 2;
    }

    // Partitions per delta.
    let per_delta = bounds::CHECKPOINT_DELTA_PARTITIONS.max as usize;
    let too_many = moves("kafka", (0..=per_delta).map(|n| (format!("p{n}"), None, 1)));
    invalid(
        backend,
        "partitions per delta",
        engine.publish(&publish(&ds, too_many.clone())).await,
        &[&(per_delta + 1).to_string(), &per_delta.to_string()],
    );
    invalid(
        backend,
        "partitions per delta at begin",
        engine.begin_operation(&begin(&ds, too_many)).await,
        &[&per_delta.to_string()],
    );
    assert_eq!(
        before,
        h.write_fingerprint(&ds).await,
        "{backend}: a refused delta wrote something"
    );
    checked += 3;

    // The largest position is accepted (and is where the partition stays).
    engine
        .publish(&publish(&ds, one("edge", "p0", None, max_position)))
        .await
        .unwrap();
    assert_eq!(
        engine.dataset(&ds).await.unwrap().checkpoint["edge"]["p0"],
        max_position
    );
    checked += 1;

    // Partitions per dataset: fill the checkpoint to the cap (one partition is already there),
    // a delta at a time; one more new partition is refused, and writes nothing; moving the
    // partitions already there still works.
    let per_dataset = bounds::CHECKPOINT_PARTITIONS.max as usize;
    let mut held = 1;
    let mut batch = 0;
    while held < per_dataset {
        let count = (per_dataset - held).min(per_delta);
        let delta = moves(
            &format!("source-{batch}"),
            (0..count).map(|n| (format!("partition-{n}"), None, 7)),
        );
        engine.publish(&publish(&ds, delta)).await.unwrap();
        held += count;
        batch += 1;
    }
    let checkpoint = engine.dataset(&ds).await.unwrap().checkpoint;
    assert_eq!(
        checkpoint
            .values()
            .map(|partitions| partitions.len())
            .sum::<usize>(),
        per_dataset,
        "{backend}"
    );
    let before = h.write_fingerprint(&ds).await;
    let error = engine
        .publish(&publish(&ds, one("source-0", "one-more", None, 1)))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, MendError::FailedPrecondition { .. }),
        "{backend}: {error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&per_dataset.to_string()) && message.contains("nothing"),
        "{backend}: {message}"
    );
    assert!(error.certainly_not_applied(), "{backend}");
    assert_eq!(
        before,
        h.write_fingerprint(&ds).await,
        "{backend}: the refused publish wrote something"
    );
    engine
        .publish(&publish(&ds, one("source-0", "partition-0", Some(7), 8)))
        .await
        .unwrap();
    checked += 4;
    println!(
        "checkpoint bounds [{backend}]: {checked} checks; {per_dataset} partitions held in {batch} deltas, one more refused"
    );
    checked
}

#[tokio::test]
async fn checkpoint_names_positions_and_partition_counts_are_bounded_on_every_backend() {
    let mut checked = 0;
    for backend in Backend::ALL {
        checked += checkpoints_are_bounded(backend).await;
    }
    assert_eq!(checked, 38 * Backend::ALL.len());
}

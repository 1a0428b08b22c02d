//! Settling a recovery sweep's batch of intents at the catalog trait itself
//! ([`Catalog::settle_intents`](mend::Catalog::settle_intents)): publishes recorded under their
//! keys with their intents deleted, stale intents deleted, abandonments' rows marked, in
//! order; a retried batch answered from the records, writing nothing; a batch that would
//! break the protocol refused before anything is read; and, on a backend that claims
//! `settle.atomic`, a batch with one refused settlement refused whole with nothing written.

use mend::catalog::settle::{MAX_SETTLEMENTS, check_batch};
use mend::catalog::{PublishObservation, RecordedRequest, RequestKey, Settled, Settlement};
use mend::intent::{
    ExpectedState, INTENT_FORMAT_VERSION, Intent, IntentPhase, OperationKind, PlannedEffects,
    PlannedRow,
};
use mend::model::{CheckpointDelta, PartitionDelta, PublishRequest, SplitState, StageMode};
use mend::{EntityKind, MendError};

use super::{publish_request, row, stage};
use crate::harness::Harness;

fn accept(_: &PublishRequest, _: &PublishObservation) -> mend::Result<()> {
    Ok(())
}

/// An unconfirmed commit's intent planning to stage `splits`, its lease running out at
/// `lease_expires_at_ms`.
fn intent(
    dataset_id: &str,
    operation_id: &str,
    splits: &[&str],
    lease_expires_at_ms: i64,
) -> Intent {
    Intent {
        format_version: INTENT_FORMAT_VERSION,
        operation_id: operation_id.into(),
        dataset_id: dataset_id.into(),
        kind: OperationKind::Commit,
        phase: IntentPhase::Armed,
        owner: "node-a".into(),
        lease_expires_at_ms,
        created_at_ms: 1,
        updated_at_ms: 1,
        effects: PlannedEffects {
            stage: splits
                .iter()
                .map(|id| PlannedRow {
                    split_id: (*id).into(),
                    metadata_json: "{}".into(),
                })
                .collect(),
            ..Default::default()
        },
        expected: ExpectedState::default(),
    }
}

fn key(operation_id: &str) -> RequestKey {
    RequestKey::new(format!("op:{operation_id}:publish"), &operation_id)
}

/// A publish of `staged` moving partition `0` of source `events` from `from` to `to`.
fn publish(
    dataset_id: &str,
    operation_id: &str,
    staged: &[&str],
    from: Option<u64>,
    to: u64,
) -> Settlement {
    Settlement::Publish {
        operation_id: operation_id.into(),
        request: PublishRequest {
            checkpoint_delta: Some(CheckpointDelta {
                source: "events".into(),
                partitions: vec![PartitionDelta {
                    partition: "0".into(),
                    from_position: from,
                    to_position: to,
                }],
            }),
            ..publish_request(dataset_id, staged, &[])
        },
        key: key(operation_id),
    }
}

fn abandon(operation_id: &str, by: i64, mark: &[&str]) -> Settlement {
    Settlement::Abandon {
        operation_id: operation_id.into(),
        observed: IntentPhase::Armed,
        lease_expired_by: by,
        mark: mark.iter().map(|id| id.to_string()).collect(),
        end: RecordedRequest::new(&end_key(operation_id), &"ended", by),
    }
}

/// The key an abandonment of `operation_id` records its end under.
fn end_key(operation_id: &str) -> RequestKey {
    RequestKey::new(format!("op:{operation_id}:abort"), &operation_id)
}

async fn state(h: &Harness<'_>, dataset_id: &str, split_id: &str) -> Option<SplitState> {
    row(h, dataset_id, split_id).await.map(|row| row.state)
}

async fn operations(h: &Harness<'_>, dataset_id: &str) -> Vec<String> {
    let mut operations: Vec<String> = h
        .engine
        .catalog()
        .list_intents(dataset_id)
        .await
        .unwrap()
        .into_iter()
        .map(|intent| intent.operation_id)
        .collect();
    operations.sort();
    operations
}

/// A dataset with the rows `a-1`, `a-2`, `b-1`, `d-1` staged (and their objects), and the
/// intents of `op-a` and `op-b` (publishing them), `op-c` (stale) and `op-d` (unconfirmed,
/// its lease run out at 10).
async fn four_intents(h: &Harness<'_>, label: &str) -> String {
    let ds = h.create_dataset(label).await;
    stage(h, &ds, StageMode::CreateOnly, &["a-1", "a-2", "b-1", "d-1"]).await;
    let catalog = h.engine.catalog();
    for (operation_id, splits) in [
        ("op-a", &["a-1", "a-2"][..]),
        ("op-b", &["b-1"]),
        ("op-c", &[]),
        ("op-d", &["d-1"]),
    ] {
        catalog
            .put_intent(&intent(&ds, operation_id, splits, 10))
            .await
            .expect("put intent");
    }
    ds
}

pub(super) async fn settle_intents_publishes_marks_and_deletes_in_order(h: &Harness<'_>) {
    let ds = four_intents(h, "settle").await;
    let catalog = h.engine.catalog();
    let manifest = h.engine.dataset(&ds).await.unwrap().manifest_version;
    let batch = [
        publish(&ds, "op-a", &["a-1", "a-2"], None, 10),
        // Its delta starts where the one before it in the batch ends.
        publish(&ds, "op-b", &["b-1"], Some(10), 20),
        Settlement::Discard {
            operation_id: "op-c".into(),
        },
        abandon("op-d", 10, &["d-1"]),
    ];
    let now = h.clock_now();
    let settled = catalog
        .settle_intents(&ds, &batch, &accept, now)
        .await
        .expect("settle the batch");
    let Settled::Published(first) = &settled[0] else {
        panic!("{settled:?}")
    };
    let Settled::Published(second) = &settled[1] else {
        panic!("{settled:?}")
    };
    assert_eq!(first.published, ["a-1", "a-2"]);
    assert_eq!(first.manifest_version, manifest + 1);
    assert_eq!(second.published, ["b-1"]);
    assert_eq!(second.manifest_version, manifest + 2);
    assert_eq!(settled[2], Settled::Discarded);
    assert_eq!(
        settled[3],
        Settled::Abandoned {
            marked: vec!["d-1".into()]
        }
    );
    let mut checks = 7;

    for split_id in ["a-1", "a-2", "b-1"] {
        assert_eq!(state(h, &ds, split_id).await, Some(SplitState::Published));
    }
    assert_eq!(
        state(h, &ds, "d-1").await,
        Some(SplitState::MarkedForDeletion)
    );
    let dataset = h.engine.dataset(&ds).await.unwrap();
    assert_eq!(dataset.checkpoint["events"]["0"], 20);
    assert_eq!(
        dataset.manifest_version,
        manifest + 3,
        "one move per change"
    );
    assert!(operations(h, &ds).await.is_empty(), "every intent deleted");
    for (operation_id, result) in [("op-a", first), ("op-b", second)] {
        let record = catalog
            .recorded_request(&ds, &key(operation_id).key)
            .await
            .unwrap()
            .expect("the publish is recorded under its key");
        assert_eq!(
            &record
                .replay::<mend::model::PublishResult>(&key(operation_id))
                .unwrap(),
            result
        );
    }
    checks += 9;

    // The same batch again, as a sweep that crashed after the batch landed would send it: the
    // publishes are answered from their records, the intents are gone, nothing is written.
    let before = h.write_fingerprint(&ds).await;
    let again = catalog
        .settle_intents(&ds, &batch, &accept, now + 1)
        .await
        .expect("settle the batch again");
    assert_eq!(again[..3], settled[..3]);
    assert_eq!(
        again[3],
        Settled::Gone,
        "an abandonment whose intent is gone says so, not that it abandoned"
    );
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "a settled batch wrote again"
    );
    checks += 3;
    println!(
        "conformance[{}]: a batch of 4 settlements (2 chained publishes, a stale intent, an abandonment): {checks} checks, applied in order, recorded, answered again without a write",
        h.name()
    );
}

pub(super) async fn settle_intents_checks_the_batch_before_reading(h: &Harness<'_>) {
    let ds = four_intents(h, "settle-checks").await;
    let catalog = h.engine.catalog();
    let before = h.write_fingerprint(&ds).await;
    let discard = |operation_id: &str| Settlement::Discard {
        operation_id: operation_id.into(),
    };
    let too_many: Vec<Settlement> = (0..=MAX_SETTLEMENTS)
        .map(|i| discard(&format!("op-{i}")))
        .collect();
    let refused: [(&str, Vec<Settlement>); 4] = [
        ("an operation twice", vec![discard("op-c"), discard("op-c")]),
        (
            "a split in two settlements",
            vec![
                publish(&ds, "op-a", &["a-1"], None, 10),
                abandon("op-d", 10, &["a-1"]),
            ],
        ),
        ("too many settlements", too_many),
        (
            "a publish of another dataset",
            vec![publish("another", "op-a", &["a-1"], None, 10)],
        ),
    ];
    for (what, batch) in &refused {
        assert!(check_batch(&ds, batch).is_err(), "{what}");
        let error = catalog
            .settle_intents(&ds, batch, &accept, h.clock_now())
            .await
            .unwrap_err();
        assert!(
            matches!(error, MendError::InvalidArgument { .. }),
            "{what}: {error:?}"
        );
    }
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "a refused batch wrote"
    );
    assert_eq!(operations(h, &ds).await.len(), 4);

    let empty = catalog
        .settle_intents(&ds, &[], &accept, h.clock_now())
        .await
        .expect("an empty batch");
    assert!(empty.is_empty());
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "an empty batch wrote"
    );
    let missing = catalog
        .settle_intents("no-such-dataset", &[discard("op")], &accept, h.clock_now())
        .await
        .unwrap_err();
    assert!(
        matches!(
            missing,
            MendError::NotFound {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{missing:?}"
    );
    println!(
        "conformance[{}]: {} malformed batches refused with InvalidArgument, nothing written; an empty batch writes nothing; an unknown dataset is NotFound",
        h.name(),
        refused.len()
    );
}

/// Needs `settle.atomic`: a batch is all or nothing.
///
/// Over 100 lines: a case is one script against one dataset, each check under the step it
/// checks; split, it would only hand its state from piece to piece.
pub(super) async fn settle_intents_refuses_a_batch_whole(h: &Harness<'_>) {
    let ds = four_intents(h, "settle-whole").await;
    let catalog = h.engine.catalog();
    let before = h.write_fingerprint(&ds).await;
    let now = h.clock_now();
    let good = publish(&ds, "op-a", &["a-1", "a-2"], None, 10);
    let refusals: Vec<(&str, Vec<Settlement>, Vec<String>)> = vec![
        (
            "a publish whose delta no longer applies",
            vec![good.clone(), publish(&ds, "op-b", &["b-1"], Some(5), 20)],
            vec!["0".into()],
        ),
        (
            "a publish of a split that is not staged",
            vec![good.clone(), publish(&ds, "op-b", &["x-1"], Some(10), 20)],
            vec!["x-1".into()],
        ),
        (
            "an abandonment whose lease is still live",
            vec![good.clone(), abandon("op-d", 9, &["d-1"])],
            vec!["op-d".into()],
        ),
    ];
    for (what, batch, ids) in &refusals {
        let error = catalog
            .settle_intents(&ds, batch, &accept, now)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, MendError::FailedPrecondition { ids: named, .. } if named == ids),
            "{what}: {error:?}"
        );
        assert_eq!(
            h.write_fingerprint(&ds).await,
            before,
            "{what}: the batch wrote"
        );
    }
    // The validator's refusal of one publish refuses them all.
    let picky = |request: &PublishRequest, _: &PublishObservation| -> mend::Result<()> {
        if request.staged_split_ids == ["b-1"] {
            return Err(MendError::PolicyRejected {
                message: "not b-1".into(),
            });
        }
        Ok(())
    };
    let batch = [good.clone(), publish(&ds, "op-b", &["b-1"], Some(10), 20)];
    let error = catalog
        .settle_intents(&ds, &batch, &picky, now)
        .await
        .unwrap_err();
    assert!(
        matches!(error, MendError::PolicyRejected { .. }),
        "{error:?}"
    );
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "a refused batch wrote"
    );
    assert!(
        catalog
            .recorded_request(&ds, &key("op-a").key)
            .await
            .unwrap()
            .is_none(),
        "a refused batch recorded a key"
    );
    assert_eq!(operations(h, &ds).await.len(), 4);

    // A fenced operation is never published, even alone.
    catalog
        .abandon_intent(&ds, "op-b", Some(10), now)
        .await
        .expect("fence op-b");
    let fenced = catalog
        .settle_intents(
            &ds,
            &[publish(&ds, "op-b", &["b-1"], None, 20)],
            &accept,
            now,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&fenced, MendError::FailedPrecondition { ids, .. } if ids == &["op-b"]),
        "{fenced:?}"
    );
    // The good settlement alone goes through.
    let alone = catalog
        .settle_intents(&ds, std::slice::from_ref(&good), &accept, now)
        .await
        .expect("the good settlement alone");
    assert!(matches!(&alone[0], Settled::Published(result) if result.published == ["a-1", "a-2"]));
    assert_eq!(operations(h, &ds).await, ["op-b", "op-c", "op-d"]);
    println!(
        "conformance[{}]: {} batches with one refused settlement (a stale delta, a split not staged, a live lease, the validator's no) refused whole, nothing written or recorded; a fenced operation never published",
        h.name(),
        refusals.len() + 1
    );
}

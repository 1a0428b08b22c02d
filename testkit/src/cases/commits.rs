//! One commit's two catalog steps at the catalog trait itself ([`Catalog::begin_commit`],
//! [`Catalog::publish_commit`]): the intent and the create-only stage written at once, from the
//! dataset as read in that step; the publish settling its intent at once, under its key,
//! refused once recovery abandoned the operation or settled it; and a publish racing an
//! abandonment, of which exactly one lands. A backend that leaves these to the trait's
//! defaults (the separate steps) passes them too.

use std::sync::Arc;

use mend::catalog::{
    Catalog, ExistingRow, OperationRecords, PlannedAction, PlannedStage, PublishObservation,
    RecordedRequest, RequestKey, StagePlan,
};
use mend::intent::{
    ExpectedState, INTENT_FORMAT_VERSION, Intent, IntentPhase, OperationKind, PlannedEffects,
    PlannedRow,
};
use mend::model::{
    CheckpointDelta, Dataset, NewSplit, PartitionDelta, PublishRequest, SplitState, StageMode,
    StageOutcome,
};
use mend::{EntityKind, MendError, OperationFound};

use super::{publish_request, row, stage};
use crate::harness::Harness;

/// The intent a commit of `ids` writes, built from `dataset` as the engine builds it: it
/// records the manifest version it read.
fn intent(dataset: &Dataset, operation_id: &str, ids: &[&str], now_ms: i64) -> Intent {
    Intent {
        format_version: INTENT_FORMAT_VERSION,
        operation_id: operation_id.into(),
        dataset_id: dataset.dataset_id.clone(),
        kind: OperationKind::Commit,
        phase: IntentPhase::Armed,
        owner: "node-a".into(),
        lease_expires_at_ms: now_ms + 30_000,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
        effects: PlannedEffects {
            stage: ids
                .iter()
                .map(|id| PlannedRow {
                    split_id: id.to_string(),
                    metadata_json: "{}".into(),
                })
                .collect(),
            ..Default::default()
        },
        expected: ExpectedState {
            manifest_version: dataset.manifest_version,
            ..Default::default()
        },
    }
}

/// The splits of `ids` as a commit stages them.
fn new_splits(ids: &[&str]) -> Vec<Arc<NewSplit>> {
    ids.iter()
        .map(|id| {
            Arc::new(NewSplit {
                split_id: id.to_string(),
                node: "node-a".into(),
                metadata_json: "{}".into(),
                time_range: None,
            })
        })
        .collect()
}

/// The create-only plan a policy makes: insert what is missing, skip what exists.
fn create_only(ids: &[&str], existing: &[ExistingRow]) -> mend::Result<StagePlan> {
    let mut entries: Vec<PlannedStage> = new_splits(ids)
        .into_iter()
        .map(|split| PlannedStage {
            action: match existing.iter().find(|row| row.split_id == split.split_id) {
                Some(row) => PlannedAction::Skip(row.state),
                None => PlannedAction::Insert,
            },
            split,
        })
        .collect();
    entries.sort_by(|a, b| a.split.split_id.cmp(&b.split.split_id));
    Ok(StagePlan { entries })
}

/// Begins a commit of `ids` (sorted, distinct) as operation `operation_id`.
pub(super) async fn begin(
    catalog: &dyn Catalog,
    dataset_id: &str,
    operation_id: &str,
    ids: &[&str],
    now_ms: i64,
) -> mend::Result<mend::catalog::BegunCommit> {
    begin_unless_ended(catalog, dataset_id, operation_id, ids, &[], now_ms).await
}

/// [`begin`], refused if a record is kept under one of `ended_keys`.
async fn begin_unless_ended(
    catalog: &dyn Catalog,
    dataset_id: &str,
    operation_id: &str,
    ids: &[&str],
    ended_keys: &[&str],
    now_ms: i64,
) -> mend::Result<mend::catalog::BegunCommit> {
    let build = |dataset: &Dataset| Ok(intent(dataset, operation_id, ids, now_ms));
    let planner = |existing: &[ExistingRow]| create_only(ids, existing);
    catalog
        .begin_commit(
            dataset_id,
            &build,
            &new_splits(ids),
            &planner,
            OperationRecords {
                refused_by: ended_keys,
                begun: None,
            },
            now_ms,
        )
        .await
}

/// The key a commit's publish is recorded under (the engine's is `op:<id>:publish`).
fn publish_key(operation_id: &str) -> RequestKey {
    RequestKey::new(format!("op:{operation_id}:publish"), &operation_id)
}

fn accept(_: &PublishObservation) -> mend::Result<()> {
    Ok(())
}

async fn intents(h: &Harness<'_>, dataset_id: &str) -> Vec<Intent> {
    h.engine.catalog().list_intents(dataset_id).await.unwrap()
}

fn is_intent_not_found(error: &MendError, operation_id: &str) -> bool {
    matches!(error, MendError::NotFound { kind: EntityKind::Intent, ids } if ids == &[operation_id.to_string()])
}

/// Over 100 lines: a case is one script against one dataset, each check under the step it
/// checks; split, it would only hand its state from piece to piece.
pub(super) async fn begin_commit_writes_the_intent_and_stages_at_once(h: &Harness<'_>) {
    let catalog = h.engine.catalog();
    let ds = h.create_dataset("begin-commit").await;
    let now = h.clock_now();
    let mut checks = 0;

    // One split is another writer's already: the begin is refused whole, naming it, and
    // leaves nothing of itself (the trait's default writes and undoes, not atomically: what
    // is checked is what is left, not that nothing was ever written).
    stage(h, &ds, StageMode::CreateOnly, &["c"]).await;
    let taken = begin(catalog.as_ref(), &ds, "op-1", &["a", "b", "c"], now)
        .await
        .unwrap_err();
    assert!(
        matches!(&taken, MendError::FailedPrecondition { ids, operation: None, .. } if ids == &["c".to_string()]),
        "{taken:?}"
    );
    for id in ["a", "b"] {
        assert!(
            row(h, &ds, id).await.is_none(),
            "a begin that could not own every row left {id}"
        );
    }
    assert_eq!(
        row(h, &ds, "c").await.map(|row| row.state),
        Some(SplitState::Staged),
        "the other writer's row is as it was"
    );
    assert!(intents(h, &ds).await.is_empty());
    checks += 4;

    let dataset = catalog.dataset(&ds).await.unwrap();
    let begun = begin(catalog.as_ref(), &ds, "op-1", &["a", "b"], now)
        .await
        .expect("begin a commit");
    assert_eq!(begun.dataset.uid, dataset.uid);
    assert_eq!(begun.dataset.fencing_epoch, dataset.fencing_epoch);
    assert_eq!(
        begun.intent,
        intent(&dataset, "op-1", &["a", "b"], now),
        "the intent is built from the dataset as read in the step"
    );
    assert_eq!(
        begun
            .splits
            .iter()
            .map(|s| (s.split_id.as_str(), s.outcome))
            .collect::<Vec<_>>(),
        [("a", StageOutcome::Inserted), ("b", StageOutcome::Inserted)]
    );
    assert_eq!(
        intents(h, &ds).await,
        std::slice::from_ref(&begun.intent),
        "written, armed"
    );
    for id in ["a", "b"] {
        let staged = row(h, &ds, id).await.expect("staged");
        assert_eq!(staged.state, SplitState::Staged);
    }
    assert_eq!(
        catalog.dataset(&ds).await.unwrap().manifest_version,
        dataset.manifest_version,
        "staging and an intent are not part of the published view"
    );
    checks += 7;

    // An operation whose end is recorded is never begun again: nothing is written.
    let ended = RecordedRequest::new(&RequestKey::new("op:op-9:abort", &"op-9"), &"ended", now);
    catalog.record_request(&ds, &ended).await.unwrap();
    let before = h.write_fingerprint(&ds).await;
    let refused = begin_unless_ended(
        catalog.as_ref(),
        &ds,
        "op-9",
        &["g"],
        &["op:op-9:publish", "op:op-9:abort"],
        now,
    )
    .await
    .unwrap_err();
    assert_eq!(
        refused.operation_found(),
        Some(OperationFound::Ended),
        "{refused:?}"
    );
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "an ended begin wrote"
    );
    let begun_record =
        RecordedRequest::new(&RequestKey::new("op:op-10:begin", &"op-10"), &"begun", now);
    let build = |dataset: &Dataset| Ok(intent(dataset, "op-10", &["g"], now));
    let planner = |existing: &[ExistingRow]| create_only(&["g"], existing);
    let other = catalog
        .begin_commit(
            &ds,
            &build,
            &new_splits(&["g"]),
            &planner,
            OperationRecords {
                refused_by: &["op:op-10:publish", "op:op-10:abort", "op:op-10:begin"],
                begun: Some(&begun_record),
            },
            now,
        )
        .await
        .expect("the records of another operation refuse nothing");
    assert_eq!(
        catalog
            .recorded_request(&ds, "op:op-10:begin")
            .await
            .unwrap(),
        Some(begun_record),
        "the begin is recorded in its step"
    );
    assert_eq!(other.intent.operation_id, "op-10");
    checks += 4;

    // The operation id is taken: nothing is written, not even the rows.
    let before = h.write_fingerprint(&ds).await;
    let taken = begin(catalog.as_ref(), &ds, "op-1", &["d"], now + 1)
        .await
        .unwrap_err();
    assert!(
        matches!(&taken, MendError::AlreadyExists { kind: EntityKind::Intent, id } if id == "op-1"),
        "{taken:?}"
    );
    assert!(row(h, &ds, "d").await.is_none());
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "a refused begin wrote"
    );
    checks += 3;

    // An intent that is not this host's armed intent of this dataset is refused whole.
    let build = |dataset: &Dataset| {
        Ok(Intent {
            phase: IntentPhase::EffectsConfirmed,
            ..intent(dataset, "op-2", &["e"], now)
        })
    };
    let planner = |existing: &[ExistingRow]| create_only(&["e"], existing);
    let refused = catalog
        .begin_commit(
            &ds,
            &build,
            &new_splits(&["e"]),
            &planner,
            OperationRecords::default(),
            now,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, MendError::InvalidArgument { .. }),
        "{refused:?}"
    );
    assert!(row(h, &ds, "e").await.is_none());
    assert_eq!(intents(h, &ds).await.len(), 2);
    checks += 3;

    let nowhere = begin(catalog.as_ref(), "no-such-dataset", "op-3", &["f"], now)
        .await
        .unwrap_err();
    assert!(
        matches!(
            nowhere,
            MendError::NotFound {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{nowhere:?}"
    );
    checks += 1;
    println!(
        "conformance[{}] begin_commit: {checks} checks: intent and create-only stage at once and whole, from the dataset read in the step; a row taken, an ended operation, a taken id, a foreign intent and a missing dataset write nothing",
        h.name()
    );
}

/// Over 100 lines: a case is one script against one dataset, each check under the step it
/// checks; split, it would only hand its state from piece to piece.
pub(super) async fn publish_commit_settles_its_intent_at_once(h: &Harness<'_>) {
    let catalog = h.engine.catalog();
    let ds = h.create_dataset("publish-commit").await;
    let now = h.clock_now();
    let mut checks = 0;

    let begun = begin(catalog.as_ref(), &ds, "op-1", &["a", "b"], now)
        .await
        .unwrap();
    h.put_objects(&ds, ["a", "b"]).await;
    let request = PublishRequest {
        checkpoint_delta: Some(CheckpointDelta {
            source: "events".into(),
            partitions: vec![PartitionDelta {
                partition: "0".into(),
                from_position: None,
                to_position: 10,
            }],
        }),
        ..publish_request(&ds, &["a", "b"], &[])
    };
    let key = publish_key("op-1");

    // A validator's refusal publishes nothing, and the intent stays (the defaults, which
    // confirm it before they publish, leave it confirmed).
    let refuse = |_: &PublishObservation| -> mend::Result<()> {
        Err(MendError::failed_precondition(
            "refused by the test",
            Vec::new(),
        ))
    };
    let refused = catalog
        .publish_commit(&begun.intent, &request, &refuse, now + 1, &key)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, MendError::FailedPrecondition { .. }),
        "{refused:?}"
    );
    assert_eq!(row(h, &ds, "a").await.unwrap().state, SplitState::Staged);
    assert_eq!(intents(h, &ds).await.len(), 1, "the intent stays");
    assert!(
        catalog
            .recorded_request(&ds, &key.key)
            .await
            .unwrap()
            .is_none()
    );
    checks += 4;

    let manifest = catalog.dataset(&ds).await.unwrap().manifest_version;
    let published = catalog
        .publish_commit(&begun.intent, &request, &accept, now + 2, &key)
        .await
        .expect("publish the commit");
    assert_eq!(published.published, ["a", "b"]);
    assert_eq!(published.manifest_version, manifest + 1);
    let dataset = catalog.dataset(&ds).await.unwrap();
    assert_eq!(dataset.checkpoint["events"]["0"], 10);
    for id in ["a", "b"] {
        assert_eq!(row(h, &ds, id).await.unwrap().state, SplitState::Published);
    }
    assert!(intents(h, &ds).await.is_empty(), "the intent is settled");
    assert!(
        catalog
            .recorded_request(&ds, &key.key)
            .await
            .unwrap()
            .is_some(),
        "recorded under its key"
    );
    checks += 7;

    // Sent again: the record answers, nothing is written.
    let before = h.write_fingerprint(&ds).await;
    let again = catalog
        .publish_commit(&begun.intent, &request, &accept, now + 3, &key)
        .await
        .expect("a retry answers");
    assert_eq!(again, published);
    assert_eq!(h.write_fingerprint(&ds).await, before, "a retry wrote");
    checks += 2;

    // Recovery published it under the same key and stopped before deleting the intent: the
    // record answers, and the intent goes.
    let second = begin(catalog.as_ref(), &ds, "op-2", &["c"], now + 4)
        .await
        .unwrap();
    h.put_objects(&ds, ["c"]).await;
    let request = publish_request(&ds, &["c"], &[]);
    let key = publish_key("op-2");
    let by_recovery = catalog
        .publish(&request, &accept, now + 5, Some(&key))
        .await
        .unwrap();
    let answered = catalog
        .publish_commit(&second.intent, &request, &accept, now + 6, &key)
        .await
        .expect("the record answers");
    assert_eq!(answered, by_recovery);
    assert!(
        intents(h, &ds).await.is_empty(),
        "the intent it settles goes"
    );
    checks += 2;

    // Abandoned by recovery: never published, whatever the validator says.
    let third = begin(catalog.as_ref(), &ds, "op-3", &["d"], now + 7)
        .await
        .unwrap();
    h.put_objects(&ds, ["d"]).await;
    catalog
        .abandon_intent(&ds, "op-3", None, now + 8)
        .await
        .unwrap();
    let before = h.write_fingerprint(&ds).await;
    let request = publish_request(&ds, &["d"], &[]);
    let fenced = catalog
        .publish_commit(
            &third.intent,
            &request,
            &accept,
            now + 9,
            &publish_key("op-3"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&fenced, MendError::FailedPrecondition { ids, .. } if ids == &["op-3".to_string()]),
        "{fenced:?}"
    );
    assert_eq!(row(h, &ds, "d").await.unwrap().state, SplitState::Staged);
    assert_eq!(h.write_fingerprint(&ds).await.catalog, before.catalog);
    checks += 3;

    // Settled by recovery (its intent gone, nothing recorded): not published.
    catalog.delete_intent(&ds, "op-3", now + 10).await.unwrap();
    let gone = catalog
        .publish_commit(
            &third.intent,
            &request,
            &accept,
            now + 11,
            &publish_key("op-3"),
        )
        .await
        .unwrap_err();
    assert!(is_intent_not_found(&gone, "op-3"), "{gone:?}");
    assert_eq!(row(h, &ds, "d").await.unwrap().state, SplitState::Staged);
    checks += 2;

    // An intent of another dataset cannot settle this one's publish.
    let elsewhere = Intent {
        dataset_id: "another-dataset".into(),
        ..third.intent.clone()
    };
    let wrong = catalog
        .publish_commit(
            &elsewhere,
            &request,
            &accept,
            now + 12,
            &publish_key("op-3"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(wrong, MendError::InvalidArgument { .. }),
        "{wrong:?}"
    );
    checks += 1;
    println!(
        "conformance[{}] publish_commit: {checks} checks: publish, record and intent deletion at once; a retry and recovery's record answer; abandoned or settled operations never publish",
        h.name()
    );
}

pub(super) async fn publish_commit_and_an_abandonment_race_and_exactly_one_wins(h: &Harness<'_>) {
    const ROUNDS: usize = 8;
    let catalog = h.engine.catalog();
    let ds = h.create_dataset("publish-abandon-race").await;
    let now = h.clock_now();
    let (mut published, mut abandoned) = (0, 0);
    for round in 0..ROUNDS {
        let operation_id = format!("op-{round}");
        let split_id = format!("s-{round}");
        let begun = begin(catalog.as_ref(), &ds, &operation_id, &[&split_id], now)
            .await
            .unwrap();
        h.put_objects(&ds, [&split_id]).await;
        let request = publish_request(&ds, &[&split_id], &[]);
        let key = publish_key(&operation_id);
        // The lease ran out at now + 30,000.
        let (publish, abandon) = tokio::join!(
            catalog.publish_commit(&begun.intent, &request, &accept, now + 40_000, &key),
            catalog.abandon_intent(&ds, &operation_id, Some(now + 40_000), now + 40_000),
        );
        let left: Vec<Intent> = intents(h, &ds)
            .await
            .into_iter()
            .filter(|intent| intent.operation_id == operation_id)
            .collect();
        let state = row(h, &ds, &split_id).await.unwrap().state;
        match (publish, abandon) {
            (Ok(result), Err(late)) => {
                assert_eq!(result.published, std::slice::from_ref(&split_id));
                // Gone; or, on a backend running the separate steps, confirmed and not yet
                // deleted when the abandonment looked.
                let confirmed = matches!(&late, MendError::FailedPrecondition { ids, .. } if ids.as_slice() == std::slice::from_ref(&operation_id));
                assert!(
                    is_intent_not_found(&late, &operation_id) || confirmed,
                    "{late:?}"
                );
                assert!(left.is_empty());
                assert_eq!(state, SplitState::Published);
                published += 1;
            }
            (Err(fenced), Ok(intent)) => {
                assert!(
                    matches!(&fenced, MendError::FailedPrecondition { ids, .. } if ids.as_slice() == std::slice::from_ref(&operation_id)),
                    "{fenced:?}"
                );
                assert_eq!(intent.phase, IntentPhase::Abandoned);
                assert_eq!(left, [intent]);
                assert_eq!(state, SplitState::Staged, "never published");
                // Recovery finishes what it began.
                catalog
                    .delete_intent(&ds, &operation_id, now + 40_001)
                    .await
                    .unwrap();
                abandoned += 1;
            }
            (publish, abandon) => {
                panic!("round {round}: both or neither landed: {publish:?}, {abandon:?}")
            }
        }
    }
    assert_eq!(published + abandoned, ROUNDS);
    println!(
        "conformance[{}] publish_commit racing abandon_intent: {ROUNDS} rounds, exactly one landed in each ({published} publishes, {abandoned} abandonments)",
        h.name()
    );
}

//! The backend conformance suite: plain async functions, each one behaviour of the catalog
//! protocol, run against every backend by `tests/conformance.rs` through [`run_all`].
//!
//! Each case starts from a fresh [`Harness`] and unique dataset ids, so cases never see each
//! other's rows even on a shared Postgres server.

use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use futures::future::BoxFuture;
use mend::audit::{AUDIT_FORMAT_VERSION, AuditRecord};
use mend::intent::{
    ExpectedState, INTENT_FORMAT_VERSION, Intent, IntentPhase, OperationKind, PlannedEffects,
    PlannedRow,
};
use mend::model::{
    CheckpointDelta, DatasetConfig, ListQuery, PartitionDelta, PublishRequest, SplitRow,
    SplitState, StageMode, StageOutcome, StageRequest, StageResult, StageSplit, TimeRange,
};
use mend::{EntityKind, MendError};

use crate::harness::{Backend, Harness, TEST_MAX_STAGE_BATCH};

mod recorded;

pub type Case = for<'a> fn(&'a Harness) -> BoxFuture<'a, ()>;

/// Every case of the suite, by name.
pub fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("datasets_create_list_show_and_configure", |h| {
            Box::pin(datasets_create_list_show_and_configure(h))
        }),
        (
            "create_only_leaves_existing_rows_exactly_as_they_were",
            |h| Box::pin(create_only_leaves_existing_rows_exactly_as_they_were(h)),
        ),
        ("duplicate_ids_fold_in_both_modes", |h| {
            Box::pin(duplicate_ids_fold_in_both_modes(h))
        }),
        ("create_only_batch_of_existing_rows_writes_nothing", |h| {
            Box::pin(create_only_batch_of_existing_rows_writes_nothing(h))
        }),
        (
            "upsert_overwrites_staged_and_rejects_whole_batch_otherwise",
            |h| {
                Box::pin(upsert_overwrites_staged_and_rejects_whole_batch_otherwise(
                    h,
                ))
            },
        ),
        ("bad_stage_input_is_refused_and_writes_nothing", |h| {
            Box::pin(bad_stage_input_is_refused_and_writes_nothing(h))
        }),
        ("publish_moves_states_and_checkpoint_at_once", |h| {
            Box::pin(publish_moves_states_and_checkpoint_at_once(h))
        }),
        ("publish_errors_name_ids_and_write_nothing", |h| {
            Box::pin(publish_errors_name_ids_and_write_nothing(h))
        }),
        ("publish_token_fences_stale_publishers", |h| {
            Box::pin(publish_token_fences_stale_publishers(h))
        }),
        ("fencing_epoch", |h| Box::pin(fencing_epoch(h))),
        ("mark_is_idempotent_and_names_unknown_ids", |h| {
            Box::pin(mark_is_idempotent_and_names_unknown_ids(h))
        }),
        (
            "delete_removes_objects_then_rows_of_marked_splits_only",
            |h| Box::pin(delete_removes_objects_then_rows_of_marked_splits_only(h)),
        ),
        ("list_filters_and_pages", |h| {
            Box::pin(list_filters_and_pages(h))
        }),
        ("concurrent_create_only_batches_claim_each_id_once", |h| {
            Box::pin(concurrent_create_only_batches_claim_each_id_once(h))
        }),
        (
            "intents_are_created_once_advanced_conditionally_and_deleted",
            |h| {
                Box::pin(intents_are_created_once_advanced_conditionally_and_deleted(
                    h,
                ))
            },
        ),
        ("abandon_fences_an_expired_armed_intent_only", |h| {
            Box::pin(abandon_fences_an_expired_armed_intent_only(h))
        }),
        ("abandon_and_a_heartbeat_race_and_exactly_one_wins", |h| {
            Box::pin(abandon_and_a_heartbeat_race_and_exactly_one_wins(h))
        }),
        ("audit_records_append_in_order_and_list_the_newest", |h| {
            Box::pin(audit_records_append_in_order_and_list_the_newest(h))
        }),
        (
            "keyed_creation_answers_a_retry_with_the_dataset_it_created",
            |h| Box::pin(recorded::keyed_creation_answers_a_retry_with_the_dataset_it_created(h)),
        ),
        ("keyed_config_and_token_changes_answer_a_retry", |h| {
            Box::pin(recorded::keyed_config_and_token_changes_answer_a_retry(h))
        }),
        ("keyed_stage_and_publish_answer_a_retry", |h| {
            Box::pin(recorded::keyed_stage_and_publish_answer_a_retry(h))
        }),
        (
            "keyed_mark_and_delete_answer_a_retry_after_their_rows_moved",
            |h| Box::pin(recorded::keyed_mark_and_delete_answer_a_retry_after_their_rows_moved(h)),
        ),
        (
            "record_request_keeps_the_first_record_of_racing_runs",
            |h| Box::pin(recorded::record_request_keeps_the_first_record_of_racing_runs(h)),
        ),
        ("keyed_records_survive_concurrent_writes", |h| {
            Box::pin(recorded::keyed_records_survive_concurrent_writes(h))
        }),
    ]
}

/// Runs every case against `backend`, each on a fresh harness, and panics listing the ones
/// that failed.
pub async fn run_all(backend: Backend) {
    let mut failed = Vec::new();
    let cases = cases();
    for (name, case) in &cases {
        let harness = Harness::new(backend).await;
        match AssertUnwindSafe(case(&harness)).catch_unwind().await {
            Ok(()) => println!("conformance[{backend}] {name} ... ok"),
            Err(_) => {
                println!("conformance[{backend}] {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    println!(
        "conformance[{backend}]: {} passed, {} failed",
        cases.len() - failed.len(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "conformance[{backend}] failed: {failed:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn metadata(docs: u64) -> String {
    serde_json::json!({ "num_docs": docs, "tags": ["t"] }).to_string()
}

fn request(
    dataset_id: &str,
    mode: StageMode,
    node: &str,
    splits: &[(&str, String)],
) -> StageRequest {
    StageRequest {
        dataset_id: dataset_id.into(),
        mode,
        node: node.into(),
        splits: splits
            .iter()
            .map(|(id, metadata_json)| StageSplit {
                split_id: (*id).into(),
                metadata_json: metadata_json.clone(),
            })
            .collect(),
    }
}

/// Stages `ids` and, as a writer does, uploads the object of each split it inserted.
async fn stage(h: &Harness, dataset_id: &str, mode: StageMode, ids: &[&str]) -> StageResult {
    let splits: Vec<(&str, String)> = ids.iter().map(|id| (*id, metadata(1))).collect();
    let staged = h
        .engine
        .stage(&request(dataset_id, mode, "node-a", &splits))
        .await
        .unwrap_or_else(|error| panic!("stage {ids:?}: {error}"));
    h.put_objects(dataset_id, staged.inserted()).await;
    staged
}

/// Uploads the object of each split to publish (a no-op for one already there), then
/// publishes.
async fn publish(h: &Harness, dataset_id: &str, staged: &[&str], replaced: &[&str]) {
    h.put_objects(dataset_id, staged).await;
    h.engine
        .publish(&publish_request(dataset_id, staged, replaced))
        .await
        .unwrap_or_else(|error| panic!("publish {staged:?}: {error}"));
}

fn publish_request(dataset_id: &str, staged: &[&str], replaced: &[&str]) -> PublishRequest {
    PublishRequest {
        dataset_id: dataset_id.into(),
        staged_split_ids: staged.iter().map(|id| id.to_string()).collect(),
        replaced_split_ids: replaced.iter().map(|id| id.to_string()).collect(),
        checkpoint_delta: None,
        publish_token: None,
        fencing_epoch: None,
    }
}

/// Every row of the dataset (the catalog's own listing: the engine's pages hold at most
/// `max_list_page` rows).
async fn rows(h: &Harness, dataset_id: &str) -> Vec<SplitRow> {
    h.engine
        .catalog()
        .list_splits(dataset_id, &ListQuery::default())
        .await
        .expect("list splits")
        .splits
}

async fn row(h: &Harness, dataset_id: &str, split_id: &str) -> Option<SplitRow> {
    rows(h, dataset_id)
        .await
        .into_iter()
        .find(|row| row.split_id == split_id)
}

fn outcomes(result: &StageResult) -> Vec<(String, StageOutcome)> {
    result
        .splits
        .iter()
        .map(|s| (s.split_id.clone(), s.outcome))
        .collect()
}

fn ids_of(error: &MendError) -> Vec<String> {
    match error {
        MendError::NotFound { ids, .. } | MendError::FailedPrecondition { ids, .. } => ids.clone(),
        other => panic!("expected an error naming ids, got {other:?}"),
    }
}

fn strings(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|id| id.to_string()).collect()
}

// ---------------------------------------------------------------------------------------------
// Cases

pub async fn datasets_create_list_show_and_configure(h: &Harness) {
    let dataset_id = h.unique_dataset_id("ds");
    let created = h
        .engine
        .create_dataset(&dataset_id, &DatasetConfig::default())
        .await
        .expect("create");
    assert_eq!(created.dataset_id, dataset_id);
    assert!(!created.uid.is_empty());
    assert_eq!(created.config, DatasetConfig::default());

    let again = h
        .engine
        .create_dataset(&dataset_id, &DatasetConfig::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&again, MendError::AlreadyExists { kind: EntityKind::Dataset, id } if id == &dataset_id),
        "{again:?}"
    );

    let other = h.create_dataset("other").await;
    let listed: Vec<String> = h
        .engine
        .datasets()
        .await
        .expect("list")
        .into_iter()
        .map(|d| d.dataset_id)
        .collect();
    assert!(listed.contains(&dataset_id) && listed.contains(&other));
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted, "datasets are listed sorted by id");

    assert_eq!(h.engine.dataset(&dataset_id).await.expect("show"), created);
    let missing = h.engine.dataset("no-such-dataset").await.unwrap_err();
    assert!(matches!(
        missing,
        MendError::NotFound {
            kind: EntityKind::Dataset,
            ..
        }
    ));

    let mut config = created.config.clone();
    config.staged_grace_period_ms = 5_000;
    let stale = h
        .engine
        .update_config(&dataset_id, created.config_version + 7, &config)
        .await
        .unwrap_err();
    assert!(
        matches!(stale, MendError::FailedPrecondition { .. }),
        "{stale:?}"
    );
    let updated = h
        .engine
        .update_config(&dataset_id, created.config_version, &config)
        .await
        .expect("update config");
    assert_eq!(updated.config, config);
    assert_eq!(updated.config_version, created.config_version + 1);
    assert!(updated.manifest_version > created.manifest_version);
    let unchanged = h
        .engine
        .update_config(&dataset_id, updated.config_version, &config)
        .await
        .expect("same config again");
    assert_eq!(
        unchanged.config_version, updated.config_version,
        "no change, no new version"
    );

    let zero_grace = DatasetConfig {
        staged_grace_period_ms: 0,
        ..config
    };
    let invalid = h
        .engine
        .update_config(&dataset_id, updated.config_version, &zero_grace)
        .await
        .unwrap_err();
    assert!(matches!(invalid, MendError::InvalidArgument { .. }));
    let bad_name = h
        .engine
        .create_dataset("bad/name", &DatasetConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(bad_name, MendError::InvalidArgument { .. }));
}

pub async fn create_only_leaves_existing_rows_exactly_as_they_were(h: &Harness) {
    let ds = h.create_dataset("create-only").await;
    stage(
        h,
        &ds,
        StageMode::CreateOnly,
        &["staged", "published", "marked"],
    )
    .await;
    publish(h, &ds, &["published", "marked"], &[]).await;
    h.engine
        .mark_for_deletion(&ds, &strings(&["marked"]))
        .await
        .expect("mark");
    let before = rows(h, &ds).await;

    h.clock.advance_ms(60_000);
    let splits: Vec<(&str, String)> = ["staged", "published", "marked", "fresh"]
        .iter()
        .map(|id| (*id, metadata(999)))
        .collect();
    let result = h
        .engine
        .stage(&request(&ds, StageMode::CreateOnly, "node-b", &splits))
        .await
        .expect("create-only stage");
    assert_eq!(
        outcomes(&result),
        [
            ("fresh".into(), StageOutcome::Inserted),
            (
                "marked".into(),
                StageOutcome::Skipped(SplitState::MarkedForDeletion)
            ),
            (
                "published".into(),
                StageOutcome::Skipped(SplitState::Published)
            ),
            ("staged".into(), StageOutcome::Skipped(SplitState::Staged)),
        ]
    );
    assert_eq!(result.inserted().collect::<Vec<_>>(), ["fresh"]);

    let after = rows(h, &ds).await;
    for old in &before {
        let new = after
            .iter()
            .find(|r| r.split_id == old.split_id)
            .expect("row kept");
        assert_eq!(
            new, old,
            "create-only modified existing row {}",
            old.split_id
        );
    }
    let fresh = after
        .iter()
        .find(|r| r.split_id == "fresh")
        .expect("fresh row");
    assert_eq!(fresh.node, "node-b");
    assert_eq!(fresh.state, SplitState::Staged);
    assert_eq!(fresh.created_at_ms, h.clock_now());
}

pub async fn duplicate_ids_fold_in_both_modes(h: &Harness) {
    let ds = h.create_dataset("duplicates").await;
    let result = h
        .engine
        .stage(&request(
            &ds,
            StageMode::CreateOnly,
            "node-a",
            &[("x", metadata(1)), ("y", metadata(5)), ("x", metadata(2))],
        ))
        .await
        .expect("create-only with duplicates");
    assert_eq!(
        outcomes(&result),
        [
            ("x".into(), StageOutcome::Inserted),
            ("y".into(), StageOutcome::Inserted)
        ]
    );
    let x = row(h, &ds, "x").await.expect("x");
    assert_eq!(
        x.metadata["num_docs"], 1,
        "create-only keeps the first of duplicates"
    );

    let result = h
        .engine
        .stage(&request(
            &ds,
            StageMode::Upsert,
            "node-a",
            &[
                ("z", metadata(1)),
                ("z", metadata(2)),
                ("x", metadata(3)),
                ("x", metadata(4)),
            ],
        ))
        .await
        .expect("upsert with duplicates");
    assert_eq!(
        outcomes(&result),
        [
            ("x".into(), StageOutcome::Overwritten),
            ("z".into(), StageOutcome::Inserted)
        ]
    );
    assert_eq!(
        row(h, &ds, "z").await.unwrap().metadata["num_docs"],
        2,
        "upsert keeps the last"
    );
    assert_eq!(
        row(h, &ds, "x").await.unwrap().metadata["num_docs"],
        4,
        "upsert keeps the last"
    );
    assert_eq!(rows(h, &ds).await.len(), 3);
}

pub async fn create_only_batch_of_existing_rows_writes_nothing(h: &Harness) {
    let ds = h.create_dataset("no-writes").await;
    stage(h, &ds, StageMode::CreateOnly, &["a", "b", "c"]).await;
    publish(h, &ds, &["b"], &[]).await;
    let before = h.write_fingerprint(&ds).await;
    let rows_before = rows(h, &ds).await;
    h.clock.advance_ms(1_000);
    let result = stage(h, &ds, StageMode::CreateOnly, &["c", "a", "b", "a"]).await;
    assert_eq!(result.inserted().count(), 0);
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "a create-only batch of existing rows wrote to storage"
    );
    assert_eq!(rows(h, &ds).await, rows_before);
}

pub async fn upsert_overwrites_staged_and_rejects_whole_batch_otherwise(h: &Harness) {
    let ds = h.create_dataset("upsert").await;
    stage(
        h,
        &ds,
        StageMode::Upsert,
        &["staged", "published", "marked"],
    )
    .await;
    publish(h, &ds, &["published", "marked"], &[]).await;
    h.engine
        .mark_for_deletion(&ds, &strings(&["marked"]))
        .await
        .expect("mark");
    let staged_before = row(h, &ds, "staged").await.unwrap();

    h.clock.advance_ms(5_000);
    let result = h
        .engine
        .stage(&request(
            &ds,
            StageMode::Upsert,
            "node-b",
            &[("staged", metadata(42)), ("new-1", metadata(1))],
        ))
        .await
        .expect("upsert");
    assert_eq!(
        outcomes(&result),
        [
            ("new-1".into(), StageOutcome::Inserted),
            ("staged".into(), StageOutcome::Overwritten)
        ]
    );
    let staged_after = row(h, &ds, "staged").await.unwrap();
    assert_eq!(staged_after.metadata["num_docs"], 42);
    assert_eq!(staged_after.node, "node-b");
    assert_eq!(staged_after.created_at_ms, staged_before.created_at_ms);
    assert_eq!(staged_after.updated_at_ms, h.clock_now());
    assert_eq!(staged_after.state, SplitState::Staged);

    let before = h.write_fingerprint(&ds).await;
    for blocker in ["published", "marked"] {
        let error = h
            .engine
            .stage(&request(
                &ds,
                StageMode::Upsert,
                "node-c",
                &[
                    ("new-2", metadata(1)),
                    (blocker, metadata(1)),
                    ("staged", metadata(7)),
                ],
            ))
            .await
            .unwrap_err();
        assert!(
            matches!(error, MendError::FailedPrecondition { .. }),
            "{error:?}"
        );
        assert_eq!(ids_of(&error), [blocker]);
        assert!(error.certainly_not_applied());
    }
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "a rejected upsert wrote something"
    );
    assert!(row(h, &ds, "new-2").await.is_none());
    assert_eq!(
        row(h, &ds, "staged").await.unwrap().metadata["num_docs"],
        42
    );
}

pub async fn bad_stage_input_is_refused_and_writes_nothing(h: &Harness) {
    let ds = h.create_dataset("bad-input").await;
    stage(h, &ds, StageMode::CreateOnly, &["existing"]).await;
    let before = h.write_fingerprint(&ds).await;
    let long_id = "x".repeat(129);
    let good = metadata(1);
    let too_many: Vec<(String, String)> = (0..=TEST_MAX_STAGE_BATCH)
        .map(|i| (format!("s{i}"), good.clone()))
        .collect();
    let too_many: Vec<(&str, String)> = too_many
        .iter()
        .map(|(id, m)| (id.as_str(), m.clone()))
        .collect();
    let invalid_cases: Vec<(&str, StageRequest)> = vec![
        ("empty batch", request(&ds, StageMode::CreateOnly, "n", &[])),
        (
            "empty id",
            request(&ds, StageMode::CreateOnly, "n", &[("", good.clone())]),
        ),
        (
            "path separator",
            request(&ds, StageMode::Upsert, "n", &[("a/b", good.clone())]),
        ),
        (
            "backslash",
            request(&ds, StageMode::Upsert, "n", &[("a\\b", good.clone())]),
        ),
        (
            "control character",
            request(
                &ds,
                StageMode::CreateOnly,
                "n",
                &[("a\u{1}b", good.clone())],
            ),
        ),
        (
            "id over 128 bytes",
            request(
                &ds,
                StageMode::CreateOnly,
                "n",
                &[(long_id.as_str(), good.clone())],
            ),
        ),
        (
            "metadata not JSON",
            request(
                &ds,
                StageMode::CreateOnly,
                "n",
                &[("ok", "{not json".into())],
            ),
        ),
        (
            "metadata not an object",
            request(&ds, StageMode::CreateOnly, "n", &[("ok", "[1,2]".into())]),
        ),
        (
            "batch over the limit",
            request(&ds, StageMode::CreateOnly, "n", &too_many),
        ),
        (
            "one bad id among good ones",
            request(
                &ds,
                StageMode::CreateOnly,
                "n",
                &[("fine", good.clone()), ("../up", good.clone())],
            ),
        ),
        (
            "empty node",
            request(&ds, StageMode::CreateOnly, "", &[("ok", good.clone())]),
        ),
    ];
    for (label, bad) in &invalid_cases {
        let error = h.engine.stage(bad).await.unwrap_err();
        assert!(
            matches!(error, MendError::InvalidArgument { .. }),
            "{label}: {error:?}"
        );
    }
    let unknown = h
        .engine
        .stage(&request(
            "no-such-dataset",
            StageMode::CreateOnly,
            "n",
            &[("a", good.clone())],
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(
            unknown,
            MendError::NotFound {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{unknown:?}"
    );

    let both = PublishRequest {
        replaced_split_ids: strings(&["existing"]),
        ..publish_request(&ds, &["existing"], &[])
    };
    let error = h.engine.publish(&both).await.unwrap_err();
    assert!(
        matches!(error, MendError::InvalidArgument { .. }),
        "{error:?}"
    );
    let empty = publish_request(&ds, &[], &[]);
    assert!(matches!(
        h.engine.publish(&empty).await.unwrap_err(),
        MendError::InvalidArgument { .. }
    ));
    for ids in [vec![], vec!["".to_string()], vec!["a/b".to_string()]] {
        let mark = h.engine.mark_for_deletion(&ds, &ids).await.unwrap_err();
        assert!(
            matches!(mark, MendError::InvalidArgument { .. }),
            "mark {ids:?}: {mark:?}"
        );
        let delete = h.engine.delete_splits(&ds, &ids).await.unwrap_err();
        assert!(
            matches!(delete, MendError::InvalidArgument { .. }),
            "delete {ids:?}: {delete:?}"
        );
    }

    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "bad input wrote something"
    );
    assert_eq!(rows(h, &ds).await.len(), 1);
    println!(
        "conformance[{}]: {} invalid stage requests refused",
        h.backend,
        invalid_cases.len()
    );
}

pub async fn publish_moves_states_and_checkpoint_at_once(h: &Harness) {
    let ds = h.create_dataset("publish").await;
    let created = h.engine.dataset(&ds).await.unwrap();
    stage(h, &ds, StageMode::CreateOnly, &["s1", "s2"]).await;
    h.clock.advance_ms(10);
    let first = h
        .engine
        .publish(&PublishRequest {
            checkpoint_delta: Some(delta("events", "0", None, 10)),
            ..publish_request(&ds, &["s1"], &[])
        })
        .await
        .expect("publish s1");
    assert_eq!(first.published, ["s1"]);
    assert!(first.manifest_version > created.manifest_version);
    let s1 = row(h, &ds, "s1").await.unwrap();
    assert_eq!(s1.state, SplitState::Published);
    assert_eq!(s1.published_at_ms, Some(h.clock_now()));
    let dataset = h.engine.dataset(&ds).await.unwrap();
    assert_eq!(dataset.checkpoint["events"]["0"], 10);
    assert_eq!(dataset.manifest_version, first.manifest_version);

    h.clock.advance_ms(10);
    let second = h
        .engine
        .publish(&PublishRequest {
            checkpoint_delta: Some(delta("events", "0", Some(10), 20)),
            ..publish_request(&ds, &["s2"], &["s1"])
        })
        .await
        .expect("publish s2 replacing s1");
    assert_eq!(second.published, ["s2"]);
    assert_eq!(second.marked, ["s1"]);
    assert!(second.manifest_version > first.manifest_version);
    assert_eq!(
        row(h, &ds, "s1").await.unwrap().state,
        SplitState::MarkedForDeletion
    );
    assert_eq!(
        row(h, &ds, "s2").await.unwrap().state,
        SplitState::Published
    );
    assert_eq!(
        h.engine.dataset(&ds).await.unwrap().checkpoint["events"]["0"],
        20
    );

    // The same delta again is refused: a delta applies exactly once.
    stage(h, &ds, StageMode::CreateOnly, &["s3"]).await;
    let replay = h
        .engine
        .publish(&PublishRequest {
            checkpoint_delta: Some(delta("events", "0", Some(10), 20)),
            ..publish_request(&ds, &["s3"], &[])
        })
        .await
        .unwrap_err();
    assert!(
        matches!(replay, MendError::FailedPrecondition { .. }),
        "{replay:?}"
    );
    assert_eq!(row(h, &ds, "s3").await.unwrap().state, SplitState::Staged);
}

fn delta(source: &str, partition: &str, from: Option<u64>, to: u64) -> CheckpointDelta {
    CheckpointDelta {
        source: source.into(),
        partitions: vec![PartitionDelta {
            partition: partition.into(),
            from_position: from,
            to_position: to,
        }],
    }
}

pub async fn publish_errors_name_ids_and_write_nothing(h: &Harness) {
    let ds = h.create_dataset("publish-errors").await;
    stage(
        h,
        &ds,
        StageMode::CreateOnly,
        &["staged", "published", "marked"],
    )
    .await;
    h.engine
        .publish(&PublishRequest {
            checkpoint_delta: Some(delta("events", "0", None, 5)),
            ..publish_request(&ds, &["published", "marked"], &[])
        })
        .await
        .expect("publish");
    h.engine
        .mark_for_deletion(&ds, &strings(&["marked"]))
        .await
        .expect("mark");
    let before = h.write_fingerprint(&ds).await;
    let rows_before = rows(h, &ds).await;

    let unknown_dataset = h
        .engine
        .publish(&publish_request("no-such-dataset", &["staged"], &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            unknown_dataset,
            MendError::NotFound {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{unknown_dataset:?}"
    );

    let missing = h
        .engine
        .publish(&publish_request(&ds, &["staged", "ghost"], &["phantom"]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            missing,
            MendError::NotFound {
                kind: EntityKind::Split,
                ..
            }
        ),
        "{missing:?}"
    );
    assert_eq!(ids_of(&missing), ["ghost", "phantom"]);

    let not_staged = h
        .engine
        .publish(&publish_request(
            &ds,
            &["staged", "published", "marked"],
            &[],
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(not_staged, MendError::FailedPrecondition { .. }),
        "{not_staged:?}"
    );
    assert_eq!(ids_of(&not_staged), ["marked", "published"]);

    let not_published = h
        .engine
        .publish(&publish_request(&ds, &["staged"], &["marked"]))
        .await
        .unwrap_err();
    assert!(matches!(
        not_published,
        MendError::FailedPrecondition { .. }
    ));
    assert_eq!(ids_of(&not_published), ["marked"]);

    for (label, bad_delta) in [
        ("from-position behind", delta("events", "0", Some(4), 9)),
        ("from-position missing", delta("events", "0", None, 9)),
        (
            "unknown partition with a from-position",
            delta("events", "7", Some(1), 9),
        ),
    ] {
        let error = h
            .engine
            .publish(&PublishRequest {
                checkpoint_delta: Some(bad_delta),
                ..publish_request(&ds, &["staged"], &[])
            })
            .await
            .unwrap_err();
        assert!(
            matches!(error, MendError::FailedPrecondition { .. }),
            "{label}: {error:?}"
        );
    }
    let backwards = h
        .engine
        .publish(&PublishRequest {
            checkpoint_delta: Some(delta("events", "0", Some(5), 3)),
            ..publish_request(&ds, &["staged"], &[])
        })
        .await
        .unwrap_err();
    assert!(
        matches!(backwards, MendError::InvalidArgument { .. }),
        "{backwards:?}"
    );

    let stale_token = h
        .engine
        .publish(&PublishRequest {
            publish_token: Some("not-the-token".into()),
            ..publish_request(&ds, &["staged"], &[])
        })
        .await
        .unwrap_err();
    assert!(
        matches!(stale_token, MendError::FailedPrecondition { .. }),
        "{stale_token:?}"
    );

    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "a refused publish wrote something"
    );
    assert_eq!(rows(h, &ds).await, rows_before);
    assert_eq!(
        h.engine.dataset(&ds).await.unwrap().checkpoint["events"]["0"],
        5
    );
}

pub async fn publish_token_fences_stale_publishers(h: &Harness) {
    let ds = h.create_dataset("fencing").await;
    stage(h, &ds, StageMode::CreateOnly, &["a", "b", "c"]).await;
    h.engine
        .set_publish_token(&ds, Some("epoch-1"))
        .await
        .expect("set token");
    let without = h
        .engine
        .publish(&publish_request(&ds, &["a"], &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(without, MendError::FailedPrecondition { .. }),
        "{without:?}"
    );
    h.engine
        .publish(&PublishRequest {
            publish_token: Some("epoch-1".into()),
            ..publish_request(&ds, &["a"], &[])
        })
        .await
        .expect("publish with the current token");
    h.engine
        .set_publish_token(&ds, Some("epoch-2"))
        .await
        .expect("rotate token");
    let stale = h
        .engine
        .publish(&PublishRequest {
            publish_token: Some("epoch-1".into()),
            ..publish_request(&ds, &["b"], &[])
        })
        .await
        .unwrap_err();
    assert!(
        matches!(stale, MendError::FailedPrecondition { .. }),
        "{stale:?}"
    );
    assert_eq!(row(h, &ds, "b").await.unwrap().state, SplitState::Staged);
    h.engine
        .set_publish_token(&ds, None)
        .await
        .expect("clear token");
    h.engine
        .publish(&publish_request(&ds, &["b"], &[]))
        .await
        .expect("publish without token");
}

/// Exclusive recovery's fence: advancing the epoch refuses every publish carrying an older
/// one (invariant 7), whatever else is wrong with it, and writes nothing; publishes carrying
/// the current epoch, or none, go through.
pub async fn fencing_epoch(h: &Harness) {
    let ds = h.create_dataset("fencing-epoch").await;
    let created = h.engine.dataset(&ds).await.unwrap();
    assert_eq!(created.fencing_epoch, 0, "a new dataset is at epoch 0");
    stage(h, &ds, StageMode::CreateOnly, &["a", "b", "c"]).await;
    h.engine
        .publish(&PublishRequest {
            checkpoint_delta: Some(delta("events", "0", None, 5)),
            fencing_epoch: Some(0),
            ..publish_request(&ds, &["a"], &[])
        })
        .await
        .expect("publish at the current epoch 0");

    let before = h.engine.dataset(&ds).await.unwrap();
    h.clock.advance_ms(10);
    let advanced = h.engine.advance_fencing_epoch(&ds).await.expect("advance");
    assert_eq!(advanced.fencing_epoch, 1);
    assert!(advanced.manifest_version > before.manifest_version);
    assert_eq!(advanced.updated_at_ms, h.clock_now());
    assert_eq!(
        (advanced.checkpoint.clone(), advanced.config_version),
        (before.checkpoint.clone(), before.config_version),
        "advancing the epoch changes nothing else"
    );
    assert_eq!(h.engine.dataset(&ds).await.unwrap(), advanced);

    let fingerprint = h.write_fingerprint(&ds).await;
    let stale_publishes = [
        (
            "stale epoch",
            PublishRequest {
                checkpoint_delta: Some(delta("events", "0", Some(5), 10)),
                fencing_epoch: Some(0),
                ..publish_request(&ds, &["b"], &[])
            },
        ),
        (
            "stale epoch and a missing split",
            PublishRequest {
                fencing_epoch: Some(0),
                ..publish_request(&ds, &["b", "ghost"], &[])
            },
        ),
        (
            "an epoch from the future",
            PublishRequest {
                fencing_epoch: Some(2),
                ..publish_request(&ds, &["b"], &[])
            },
        ),
    ];
    for (label, stale) in &stale_publishes {
        let error = h.engine.publish(stale).await.unwrap_err();
        assert!(
            matches!(&error, MendError::FailedPrecondition { message, .. } if message.contains("fencing epoch")),
            "{label}: {error:?}"
        );
        assert!(error.certainly_not_applied(), "{label}: {error:?}");
    }
    assert_eq!(
        h.write_fingerprint(&ds).await,
        fingerprint,
        "a fenced publish wrote something"
    );
    assert_eq!(row(h, &ds, "b").await.unwrap().state, SplitState::Staged);
    let after_refusals = h.engine.dataset(&ds).await.unwrap();
    assert_eq!(after_refusals.checkpoint["events"]["0"], 5);
    assert_eq!(after_refusals.manifest_version, advanced.manifest_version);

    let current = h
        .engine
        .publish(&PublishRequest {
            checkpoint_delta: Some(delta("events", "0", Some(5), 10)),
            fencing_epoch: Some(1),
            ..publish_request(&ds, &["b"], &[])
        })
        .await
        .expect("publish at the current epoch 1");
    assert_eq!(current.published, ["b"]);
    assert!(current.manifest_version > advanced.manifest_version);
    h.engine
        .publish(&publish_request(&ds, &["c"], &[]))
        .await
        .expect("publish without an epoch");
    assert_eq!(row(h, &ds, "c").await.unwrap().state, SplitState::Published);
    let dataset = h.engine.dataset(&ds).await.unwrap();
    assert_eq!(dataset.checkpoint["events"]["0"], 10);
    assert_eq!(dataset.fencing_epoch, 1, "publishes leave the epoch alone");

    let missing = h
        .engine
        .advance_fencing_epoch("no-such-dataset")
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
        "conformance[{}]: {} fenced publishes refused with nothing written, 2 let through",
        h.backend,
        stale_publishes.len()
    );
}

pub async fn mark_is_idempotent_and_names_unknown_ids(h: &Harness) {
    let ds = h.create_dataset("mark").await;
    stage(h, &ds, StageMode::CreateOnly, &["staged", "published"]).await;
    publish(h, &ds, &["published"], &[]).await;
    let manifest = h.engine.dataset(&ds).await.unwrap().manifest_version;

    h.clock.advance_ms(100);
    let first = h
        .engine
        .mark_for_deletion(&ds, &strings(&["published", "staged"]))
        .await
        .expect("mark");
    assert_eq!(first.marked, ["published", "staged"]);
    assert!(first.already_marked.is_empty());
    let marked = rows(h, &ds).await;
    assert!(
        marked
            .iter()
            .all(|r| r.state == SplitState::MarkedForDeletion && r.updated_at_ms == h.clock_now())
    );
    let manifest_after = h.engine.dataset(&ds).await.unwrap().manifest_version;
    assert!(manifest_after > manifest);

    let before = h.write_fingerprint(&ds).await;
    h.clock.advance_ms(100);
    let again = h
        .engine
        .mark_for_deletion(&ds, &strings(&["staged", "published"]))
        .await
        .expect("mark again");
    assert!(again.marked.is_empty());
    assert_eq!(again.already_marked, ["published", "staged"]);
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "marking marked splits wrote something"
    );
    assert_eq!(rows(h, &ds).await, marked);

    stage(h, &ds, StageMode::CreateOnly, &["live"]).await;
    let before = h.write_fingerprint(&ds).await;
    let unknown = h
        .engine
        .mark_for_deletion(&ds, &strings(&["live", "ghost", "phantom"]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            unknown,
            MendError::NotFound {
                kind: EntityKind::Split,
                ..
            }
        ),
        "{unknown:?}"
    );
    assert_eq!(ids_of(&unknown), ["ghost", "phantom"]);
    assert_eq!(row(h, &ds, "live").await.unwrap().state, SplitState::Staged);
    assert_eq!(h.write_fingerprint(&ds).await, before);
    let no_dataset = h
        .engine
        .mark_for_deletion("no-such-dataset", &strings(&["a"]))
        .await
        .unwrap_err();
    assert!(matches!(
        no_dataset,
        MendError::NotFound {
            kind: EntityKind::Dataset,
            ..
        }
    ));
}

pub async fn delete_removes_objects_then_rows_of_marked_splits_only(h: &Harness) {
    let ds = h.create_dataset("delete").await;
    stage(
        h,
        &ds,
        StageMode::CreateOnly,
        &["doomed", "staged", "published"],
    )
    .await;
    // The stage helper uploaded an object for each split.
    publish(h, &ds, &["published"], &[]).await;
    h.engine
        .mark_for_deletion(&ds, &strings(&["doomed"]))
        .await
        .expect("mark");
    let store = h.store.as_ref().expect("counting store").clone();
    let before = h.write_fingerprint(&ds).await;

    let live = h
        .engine
        .delete_splits(&ds, &strings(&["doomed", "staged", "published"]))
        .await
        .unwrap_err();
    assert!(
        matches!(live, MendError::FailedPrecondition { .. }),
        "{live:?}"
    );
    assert_eq!(ids_of(&live), ["published", "staged"]);
    let unknown = h
        .engine
        .delete_splits(&ds, &strings(&["doomed", "ghost"]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            unknown,
            MendError::NotFound {
                kind: EntityKind::Split,
                ..
            }
        ),
        "{unknown:?}"
    );
    assert_eq!(ids_of(&unknown), ["ghost"]);
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "a refused delete wrote something"
    );

    h.engine
        .delete_splits(&ds, &strings(&["doomed"]))
        .await
        .expect("delete");
    assert!(row(h, &ds, "doomed").await.is_none());
    use object_store::ObjectStore;
    let gone = store.head(&h.engine.objects().path(&ds, "doomed")).await;
    assert!(
        matches!(gone, Err(object_store::Error::NotFound { .. })),
        "object survived: {gone:?}"
    );
    for kept in ["staged", "published"] {
        store
            .head(&h.engine.objects().path(&ds, kept))
            .await
            .unwrap_or_else(|e| panic!("object of live split {kept} was deleted: {e}"));
    }
    let again = h
        .engine
        .delete_splits(&ds, &strings(&["doomed"]))
        .await
        .unwrap_err();
    assert!(matches!(again, MendError::NotFound { .. }), "{again:?}");
}

pub async fn list_filters_and_pages(h: &Harness) {
    let ds = h.create_dataset("list").await;
    let mut all_ids = Vec::new();
    for i in 0..10 {
        let id = format!("split-{i:02}");
        let metadata =
            serde_json::json!({ "time_range": { "start": i * 100, "end": i * 100 + 99 } });
        h.engine
            .stage(&request(
                &ds,
                StageMode::CreateOnly,
                "node",
                &[(&id, metadata.to_string())],
            ))
            .await
            .expect("stage");
        h.clock.advance_ms(1_000);
        all_ids.push(id);
    }
    h.engine
        .stage(&request(
            &ds,
            StageMode::CreateOnly,
            "node",
            &[("no-range", metadata(1))],
        ))
        .await
        .expect("stage");
    publish(h, &ds, &["split-00", "split-01", "split-02"], &[]).await;
    h.engine
        .mark_for_deletion(&ds, &strings(&["split-02"]))
        .await
        .unwrap();

    let ids = |page: &mend::model::SplitPage| -> Vec<String> {
        page.splits.iter().map(|s| s.split_id.clone()).collect()
    };
    let list = |query: ListQuery| {
        let ds = ds.clone();
        async move { h.engine.list_splits(&ds, &query).await.expect("list") }
    };

    let published = list(ListQuery {
        states: vec![SplitState::Published],
        ..Default::default()
    })
    .await;
    assert_eq!(ids(&published), ["split-00", "split-01"]);
    let live = list(ListQuery {
        states: vec![SplitState::Published, SplitState::MarkedForDeletion],
        ..Default::default()
    })
    .await;
    assert_eq!(ids(&live), ["split-00", "split-01", "split-02"]);

    let by_id = list(ListQuery {
        split_ids: Some(strings(&["split-05", "split-03", "nope"])),
        ..Default::default()
    })
    .await;
    assert_eq!(ids(&by_id), ["split-03", "split-05"]);

    let by_time = list(ListQuery {
        time_range: Some(TimeRange {
            start: 250,
            end: 420,
        }),
        ..Default::default()
    })
    .await;
    assert_eq!(ids(&by_time), ["split-02", "split-03", "split-04"]);

    let recent = list(ListQuery {
        updated_since_ms: Some(crate::harness::TEST_EPOCH_MS + 7_000),
        states: vec![SplitState::Staged],
        ..Default::default()
    })
    .await;
    assert_eq!(
        ids(&recent),
        ["no-range", "split-07", "split-08", "split-09"]
    );

    let mut paged = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let page = list(ListQuery {
            limit: Some(3),
            after_split_id: after.clone(),
            ..Default::default()
        })
        .await;
        assert!(page.splits.len() <= 3);
        pages += 1;
        paged.extend(ids(&page));
        match page.next_after_split_id {
            Some(next) => after = Some(next),
            None => break,
        }
        assert!(pages < 10, "paging does not end");
    }
    let mut expected = all_ids.clone();
    expected.push("no-range".into());
    expected.sort();
    assert_eq!(paged, expected);
    assert_eq!(pages, 4);

    let missing = h
        .engine
        .list_splits("no-such-dataset", &ListQuery::default())
        .await
        .unwrap_err();
    assert!(matches!(
        missing,
        MendError::NotFound {
            kind: EntityKind::Dataset,
            ..
        }
    ));
}

/// Workers stage the same ids in different orders, create-only, round after round. Each id
/// must be inserted by exactly one worker, with no error and no deadlock.
pub async fn concurrent_create_only_batches_claim_each_id_once(h: &Harness) {
    let (workers, rounds, ids_per_round) = match h.backend {
        Backend::Postgres => (8, 200, 24),
        Backend::LocalDirectory | Backend::Memory => (4, 15, 12),
        // Every commit is a request to a server written in Python: fewer rounds.
        Backend::S3 => (4, 6, 8),
    };
    let ds = h.create_dataset("race").await;
    let mut total_inserted = 0;
    for round in 0..rounds {
        let ids: Vec<String> = (0..ids_per_round)
            .map(|i| format!("r{round:03}-s{i:02}"))
            .collect();
        let mut tasks = Vec::new();
        for worker in 0..workers {
            let engine = h.engine.clone();
            let ds = ds.clone();
            let mut order = ids.clone();
            // Opposite orders for neighbouring workers, rotated so batches overlap unevenly.
            if worker % 2 == 1 {
                order.reverse();
            }
            order.rotate_left(worker * 3 % ids_per_round);
            order.truncate(ids_per_round - worker % 3);
            tasks.push(tokio::spawn(async move {
                let splits = order
                    .iter()
                    .map(|id| StageSplit {
                        split_id: id.clone(),
                        metadata_json: "{}".into(),
                    })
                    .collect();
                let request = StageRequest {
                    dataset_id: ds,
                    mode: StageMode::CreateOnly,
                    node: format!("worker-{worker}"),
                    splits,
                };
                engine.stage(&request).await
            }));
        }
        let mut claimed: BTreeSet<String> = BTreeSet::new();
        for task in tasks {
            let result = task.await.expect("worker task").unwrap_or_else(|error| {
                panic!("round {round}: a create-only batch failed: {error}")
            });
            for id in result.inserted() {
                assert!(
                    claimed.insert(id.to_string()),
                    "round {round}: {id} inserted twice"
                );
                total_inserted += 1;
            }
        }
        let expected: BTreeSet<String> = ids.into_iter().collect();
        assert_eq!(
            claimed, expected,
            "round {round}: the inserted sets do not cover every id"
        );
    }
    assert_eq!(rows(h, &ds).await.len(), total_inserted);
    // A listing that names no limit gets one page of `max_list_page` rows and the cursor on.
    let max_page = mend::EngineOptions::default().max_list_page;
    let page = h
        .engine
        .list_splits(&ds, &ListQuery::default())
        .await
        .expect("list");
    assert_eq!(page.splits.len(), total_inserted.min(max_page));
    if total_inserted > max_page {
        assert_eq!(
            page.next_after_split_id.as_deref(),
            page.splits.last().map(|row| row.split_id.as_str())
        );
    }
    println!(
        "conformance[{}]: {workers} workers x {rounds} rounds: {total_inserted} ids each inserted exactly once, 0 errors",
        h.backend
    );
}

fn intent(dataset_id: &str, operation_id: &str, created_at_ms: i64) -> Intent {
    Intent {
        format_version: INTENT_FORMAT_VERSION,
        operation_id: operation_id.into(),
        dataset_id: dataset_id.into(),
        kind: OperationKind::Commit,
        phase: IntentPhase::Armed,
        owner: "node-a".into(),
        lease_expires_at_ms: created_at_ms + 30_000,
        created_at_ms,
        updated_at_ms: created_at_ms,
        effects: PlannedEffects {
            stage: vec![PlannedRow {
                split_id: format!("{operation_id}-split"),
                metadata_json: "{}".into(),
            }],
            ..Default::default()
        },
        expected: ExpectedState::default(),
    }
}

pub async fn intents_are_created_once_advanced_conditionally_and_deleted(h: &Harness) {
    let ds = h.create_dataset("intents").await;
    let catalog = h.engine.catalog();
    let manifest = h.engine.dataset(&ds).await.unwrap().manifest_version;
    let first = intent(&ds, "op-b", 1_000);
    let second = intent(&ds, "op-a", 2_000);
    catalog.put_intent(&first).await.expect("put");
    catalog.put_intent(&second).await.expect("put");
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        [first.clone(), second.clone()],
        "oldest first"
    );
    assert_eq!(
        h.engine.dataset(&ds).await.unwrap().manifest_version,
        manifest,
        "an intent is not part of the published view"
    );

    let again = catalog.put_intent(&first).await.unwrap_err();
    assert!(
        matches!(&again, MendError::AlreadyExists { kind: EntityKind::Intent, id } if id == "op-b"),
        "{again:?}"
    );
    let nowhere = catalog
        .put_intent(&intent("no-such-dataset", "op-x", 1))
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

    let confirmed = Intent {
        phase: IntentPhase::EffectsConfirmed,
        updated_at_ms: 1_500,
        ..first.clone()
    };
    catalog
        .update_intent(&confirmed, IntentPhase::Armed)
        .await
        .expect("confirm");
    let stale = catalog
        .update_intent(&confirmed, IntentPhase::Armed)
        .await
        .unwrap_err();
    assert!(
        matches!(stale, MendError::FailedPrecondition { .. }),
        "{stale:?}"
    );
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        [confirmed.clone(), second.clone()]
    );

    catalog.delete_intent(&ds, "op-b", 0).await.expect("delete");
    let gone = catalog.delete_intent(&ds, "op-b", 0).await.unwrap_err();
    assert!(
        matches!(
            gone,
            MendError::NotFound {
                kind: EntityKind::Intent,
                ..
            }
        ),
        "{gone:?}"
    );
    let gone = catalog
        .update_intent(&confirmed, IntentPhase::EffectsConfirmed)
        .await
        .unwrap_err();
    assert!(
        matches!(
            gone,
            MendError::NotFound {
                kind: EntityKind::Intent,
                ..
            }
        ),
        "{gone:?}"
    );
    assert_eq!(catalog.list_intents(&ds).await.unwrap(), [second]);
    let missing = catalog.list_intents("no-such-dataset").await.unwrap_err();
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
}

fn failed_precondition_naming(error: &MendError, operation_id: &str) -> bool {
    matches!(error, MendError::FailedPrecondition { ids, .. } if ids == &[operation_id.to_string()])
}

pub async fn abandon_fences_an_expired_armed_intent_only(h: &Harness) {
    let ds = h.create_dataset("abandon").await;
    let catalog = h.engine.catalog();
    let manifest = h.engine.dataset(&ds).await.unwrap().manifest_version;
    let mut checks = 0;

    // Armed, leased until 31,000.
    let armed = intent(&ds, "op-a", 1_000);
    catalog.put_intent(&armed).await.expect("put");
    let live = catalog
        .abandon_intent(&ds, "op-a", Some(30_999), 30_999)
        .await
        .unwrap_err();
    assert!(failed_precondition_naming(&live, "op-a"), "{live:?}");
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        std::slice::from_ref(&armed)
    );
    checks += 2;

    // A heartbeat that lands first wins: the lease now runs until 61,000.
    let renewed = Intent {
        lease_expires_at_ms: 61_000,
        updated_at_ms: 30_000,
        ..armed.clone()
    };
    catalog
        .update_intent(&renewed, IntentPhase::Armed)
        .await
        .expect("renew");
    let live = catalog
        .abandon_intent(&ds, "op-a", Some(31_000), 31_000)
        .await
        .unwrap_err();
    assert!(failed_precondition_naming(&live, "op-a"), "{live:?}");
    checks += 1;

    // Expired at exactly the cutoff: fenced.
    let abandoned = catalog
        .abandon_intent(&ds, "op-a", Some(61_000), 61_500)
        .await
        .expect("abandon");
    assert_eq!(
        abandoned,
        Intent {
            format_version: INTENT_FORMAT_VERSION,
            phase: IntentPhase::Abandoned,
            updated_at_ms: 61_500,
            ..renewed.clone()
        }
    );
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        std::slice::from_ref(&abandoned)
    );
    checks += 2;

    // Idempotent: the same intent, nothing written.
    let again = catalog
        .abandon_intent(&ds, "op-a", Some(99_000), 99_000)
        .await
        .expect("abandon again");
    assert_eq!(again, abandoned);
    checks += 1;

    // Fenced at the write: its owner can neither confirm nor renew it.
    for attempt in [
        Intent {
            phase: IntentPhase::EffectsConfirmed,
            ..renewed.clone()
        },
        Intent {
            lease_expires_at_ms: 200_000,
            ..renewed.clone()
        },
    ] {
        let fenced = catalog
            .update_intent(&attempt, IntentPhase::Armed)
            .await
            .unwrap_err();
        assert!(failed_precondition_naming(&fenced, "op-a"), "{fenced:?}");
        checks += 1;
    }
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        std::slice::from_ref(&abandoned)
    );
    checks += 1;

    // A confirmed intent is rolled forward, never abandoned, whatever its lease.
    let confirmed = Intent {
        phase: IntentPhase::EffectsConfirmed,
        ..intent(&ds, "op-b", 2_000)
    };
    catalog.put_intent(&confirmed).await.expect("put");
    for lease_expired_by in [None, Some(i64::MAX)] {
        let refused = catalog
            .abandon_intent(&ds, "op-b", lease_expired_by, 100_000)
            .await
            .unwrap_err();
        assert!(failed_precondition_naming(&refused, "op-b"), "{refused:?}");
        checks += 1;
    }

    // `None`: its owner aborting, whatever the lease.
    let aborting = intent(&ds, "op-c", 3_000);
    catalog.put_intent(&aborting).await.expect("put");
    let aborted = catalog
        .abandon_intent(&ds, "op-c", None, 3_500)
        .await
        .expect("abort");
    assert_eq!(aborted.phase, IntentPhase::Abandoned);
    assert_eq!(aborted.lease_expires_at_ms, aborting.lease_expires_at_ms);
    checks += 2;

    let gone = catalog
        .abandon_intent(&ds, "op-zzz", None, 0)
        .await
        .unwrap_err();
    assert!(
        matches!(&gone, MendError::NotFound { kind: EntityKind::Intent, ids } if ids == &["op-zzz".to_string()]),
        "{gone:?}"
    );
    let nowhere = catalog
        .abandon_intent("no-such-dataset", "op-a", None, 0)
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
    assert_eq!(
        h.engine.dataset(&ds).await.unwrap().manifest_version,
        manifest,
        "abandoning an intent changes nothing of the published view"
    );
    checks += 3;
    println!(
        "conformance[{}] abandon: {checks} checks: live leases and heartbeats win, expired intents fenced once, confirmed ones refused",
        h.backend
    );
}

pub async fn abandon_and_a_heartbeat_race_and_exactly_one_wins(h: &Harness) {
    const ROUNDS: usize = 8;
    let ds = h.create_dataset("abandon-race").await;
    let catalog = h.engine.catalog();
    let (mut abandons, mut heartbeats) = (0, 0);
    for round in 0..ROUNDS {
        let operation_id = format!("op-{round}");
        let armed = intent(&ds, &operation_id, 1_000);
        catalog.put_intent(&armed).await.expect("put");
        // The lease ran out at 31,000; the heartbeat moves it to 100,000.
        let renewed = Intent {
            lease_expires_at_ms: 100_000,
            updated_at_ms: 40_000,
            ..armed
        };
        let (abandon, heartbeat) = tokio::join!(
            catalog.abandon_intent(&ds, &operation_id, Some(40_000), 40_000),
            catalog.update_intent(&renewed, IntentPhase::Armed),
        );
        let stored = catalog
            .list_intents(&ds)
            .await
            .unwrap()
            .into_iter()
            .find(|intent| intent.operation_id == operation_id)
            .expect("the intent is still there");
        match (abandon, heartbeat) {
            (Ok(abandoned), Err(fenced)) => {
                assert!(
                    failed_precondition_naming(&fenced, &operation_id),
                    "{fenced:?}"
                );
                assert_eq!(stored, abandoned);
                assert_eq!(stored.lease_expires_at_ms, 31_000);
                abandons += 1;
            }
            (Err(live), Ok(())) => {
                assert!(failed_precondition_naming(&live, &operation_id), "{live:?}");
                assert_eq!(stored, renewed);
                heartbeats += 1;
            }
            other => panic!("round {round}: not exactly one winner: {other:?}"),
        }
    }
    assert_eq!(abandons + heartbeats, ROUNDS);
    println!(
        "conformance[{}] abandon race: {ROUNDS} rounds, exactly one winner each ({abandons} abandons, {heartbeats} heartbeats)",
        h.backend
    );
}

fn audit(dataset_id: &str, operation_id: &str, recorded_at_ms: i64) -> AuditRecord {
    AuditRecord {
        format_version: AUDIT_FORMAT_VERSION,
        dataset_id: dataset_id.into(),
        operation_id: operation_id.into(),
        recorded_at_ms,
        mode: "roll-forward".into(),
        policy_digest: "sha256:00".into(),
        semantics_revision: 1,
        inputs_hash: "sha256:11".into(),
        decision: serde_json::json!("roll_forward"),
        outcome: serde_json::json!({"outcome": "executed"}),
        inputs: None,
    }
}

pub async fn audit_records_append_in_order_and_list_the_newest(h: &Harness) {
    let ds = h.create_dataset("audit").await;
    let catalog = h.engine.catalog();
    let first = vec![audit(&ds, "op-1", 100), audit(&ds, "op-2", 100)];
    let second = vec![audit(&ds, "op-3", 200)];
    catalog.append_audit(&ds, &first).await.expect("append");
    catalog.append_audit(&ds, &second).await.expect("append");
    catalog
        .append_audit(&ds, &[])
        .await
        .expect("an empty append");
    let all = catalog.list_audit(&ds, None).await.unwrap();
    assert_eq!(all, [first.clone(), second.clone()].concat());
    assert_eq!(
        catalog.list_audit(&ds, Some(2)).await.unwrap(),
        [first[1].clone(), second[0].clone()]
    );

    let foreign = catalog
        .append_audit(&ds, &[audit("other", "op-9", 300)])
        .await
        .unwrap_err();
    assert!(
        matches!(foreign, MendError::InvalidArgument { .. }),
        "{foreign:?}"
    );
    let mut future = audit(&ds, "op-9", 300);
    future.format_version = AUDIT_FORMAT_VERSION + 1;
    let newer = catalog.append_audit(&ds, &[future]).await.unwrap_err();
    assert!(
        matches!(newer, MendError::InvalidArgument { .. }),
        "{newer:?}"
    );
    assert_eq!(
        catalog.list_audit(&ds, None).await.unwrap().len(),
        3,
        "a refused append wrote"
    );

    let missing = catalog
        .list_audit("no-such-dataset", None)
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
    let missing = catalog
        .append_audit("no-such-dataset", &[audit("no-such-dataset", "op", 1)])
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
}

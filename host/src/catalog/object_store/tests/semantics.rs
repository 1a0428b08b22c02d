//! The `Catalog` trait's semantics as this backend provides them, one behaviour per test,
//! including which calls write nothing at all.

use super::*;
use crate::catalog::CatalogExt;
use crate::error::EntityKind;
use crate::model::{CheckpointDelta, ListQuery, PartitionDelta, StageOutcome};

#[tokio::test]
async fn datasets_are_created_listed_and_shown() {
    let (catalog, _) = counted_catalog(ObjectStoreCatalogOptions::default());
    let config = DatasetConfig::default();
    for (dataset_id, now) in [("traces", T0), ("logs", T0 + 1)] {
        catalog
            .create_dataset(dataset_id, &format!("uid-{dataset_id}"), &config, now, None)
            .await
            .unwrap();
    }
    let logs = catalog.dataset("logs").await.unwrap();
    assert_eq!(logs.uid, "uid-logs");
    assert_eq!((logs.config_version, logs.manifest_version), (1, 1));
    assert_eq!((logs.created_at_ms, logs.updated_at_ms), (T0 + 1, T0 + 1));
    assert!(logs.checkpoint.is_empty() && logs.publish_token.is_none());

    let listed: Vec<String> = sibling(&catalog)
        .list_datasets()
        .await
        .unwrap()
        .into_iter()
        .map(|dataset| dataset.dataset_id)
        .collect();
    assert_eq!(listed, ["logs", "traces"]);

    let err = catalog
        .create_dataset("logs", "uid-2", &config, T0 + 2, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, MendError::AlreadyExists { kind: EntityKind::Dataset, ref id } if id == "logs")
    );
    assert_eq!(
        sibling(&catalog).dataset("logs").await.unwrap().uid,
        "uid-logs"
    );

    let err = catalog.dataset("metrics").await.unwrap_err();
    assert!(matches!(
        err,
        MendError::NotFound {
            kind: EntityKind::Dataset,
            ..
        }
    ));
    assert!(matches!(
        catalog.dataset("").await,
        Err(MendError::NotFound { .. })
    ));
    let planner = |_: &[ExistingRow]| Ok(StagePlan::default());
    let err = catalog
        .stage(
            "metrics",
            StageMode::CreateOnly,
            &splits(StageMode::CreateOnly, "n", &ids(&["a"])),
            &planner,
            T0,
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        MendError::NotFound {
            kind: EntityKind::Dataset,
            ..
        }
    ));
}

#[tokio::test]
async fn create_only_inserts_missing_rows_and_leaves_existing_ones_exactly() {
    let (catalog, store) = catalog_with_dataset("logs").await;
    stage(
        &catalog,
        StageMode::CreateOnly,
        "node-1",
        &ids(&["a", "b"]),
        T0,
    )
    .await
    .unwrap();
    publish_unchecked(&catalog, &["a"], T0 + 1).await;
    let before = catalog
        .list_splits("logs", &ListQuery::default())
        .await
        .unwrap();

    let puts = store.puts();
    let result = stage(
        &catalog,
        StageMode::CreateOnly,
        "node-2",
        &ids(&["c", "a", "b", "c"]),
        T0 + 2,
    )
    .await
    .unwrap();
    assert_eq!(
        store.puts(),
        puts + 1,
        "one commit for the one inserted row"
    );
    let outcomes: Vec<(&str, StageOutcome)> = result
        .iter()
        .map(|split| (split.split_id.as_str(), split.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("a", StageOutcome::Skipped(SplitState::Published)),
            ("b", StageOutcome::Skipped(SplitState::Staged)),
            ("c", StageOutcome::Inserted),
        ]
    );
    let after = catalog
        .list_splits("logs", &ListQuery::default())
        .await
        .unwrap();
    assert_eq!(
        after.splits[..2],
        before.splits[..],
        "existing rows untouched"
    );
    let inserted = &after.splits[2];
    assert_eq!(
        (inserted.node.as_str(), inserted.state),
        ("node-2", SplitState::Staged)
    );
    assert_eq!(
        (
            inserted.created_at_ms,
            inserted.updated_at_ms,
            inserted.published_at_ms
        ),
        (T0 + 2, T0 + 2, None)
    );
}

#[tokio::test]
async fn a_batch_that_changes_nothing_writes_nothing() {
    let (catalog, store) = catalog_with_dataset("logs").await;
    stage(
        &catalog,
        StageMode::CreateOnly,
        "node-1",
        &ids(&["a", "b"]),
        T0,
    )
    .await
    .unwrap();
    let (puts, commits, version) = (
        store.puts(),
        catalog.stats().commits,
        catalog.probe_version("logs").await.unwrap(),
    );

    let result = stage(
        &catalog,
        StageMode::CreateOnly,
        "node-2",
        &ids(&["b", "a"]),
        T0 + 1,
    )
    .await
    .unwrap();
    assert!(
        result
            .iter()
            .all(|split| split.outcome == StageOutcome::Skipped(SplitState::Staged))
    );
    catalog
        .mark_for_deletion("logs", &ids(&["a"]), T0 + 2, None)
        .await
        .unwrap();
    let (puts, commits) = (puts + 1, commits + 1);
    catalog
        .mark_for_deletion("logs", &ids(&["a"]), T0 + 3, None)
        .await
        .unwrap();
    catalog
        .set_publish_token("logs", None, T0 + 4, None)
        .await
        .unwrap();
    catalog
        .update_config("logs", 1, &DatasetConfig::default(), T0 + 5, None)
        .await
        .unwrap();
    stage(&catalog, StageMode::CreateOnly, "node-2", &[], T0 + 6)
        .await
        .unwrap();

    assert_eq!(store.puts(), puts);
    assert_eq!(catalog.stats().commits, commits);
    assert_eq!(catalog.probe_version("logs").await.unwrap(), version + 1);
}

#[tokio::test]
async fn upsert_overwrites_staged_rows_and_a_planner_error_writes_nothing() {
    let (catalog, store) = catalog_with_dataset("logs").await;
    stage(&catalog, StageMode::Upsert, "node-1", &ids(&["a", "b"]), T0)
        .await
        .unwrap();
    publish_unchecked(&catalog, &["b"], T0 + 1).await;

    let result = stage(&catalog, StageMode::Upsert, "node-2", &ids(&["a"]), T0 + 2)
        .await
        .unwrap();
    assert_eq!(result[0].outcome, StageOutcome::Overwritten);
    let row = &catalog
        .list_splits("logs", &ListQuery::default())
        .await
        .unwrap()
        .splits[0];
    assert_eq!(
        (row.node.as_str(), row.created_at_ms, row.updated_at_ms),
        ("node-2", T0, T0 + 2)
    );

    let puts = store.puts();
    let err = stage(
        &catalog,
        StageMode::Upsert,
        "node-3",
        &ids(&["a", "b", "c"]),
        T0 + 3,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, MendError::FailedPrecondition { ref ids, .. } if ids == &["b"]));
    assert_eq!(store.puts(), puts);
    assert_eq!(
        catalog
            .list_splits("logs", &ListQuery::default())
            .await
            .unwrap()
            .splits
            .len(),
        2
    );
}

#[tokio::test]
async fn a_plan_that_does_not_fit_the_rows_it_was_given_is_refused() {
    let (catalog, store) = catalog_with_dataset("logs").await;
    stage(&catalog, StageMode::Upsert, "node-1", &ids(&["a", "b"]), T0)
        .await
        .unwrap();
    publish_unchecked(&catalog, &["b"], T0 + 1).await;
    let puts = store.puts();
    let entry = |split_id: &str, action: PlannedAction| PlannedStage {
        split: new_split(split_id, "node-2").into(),
        action,
    };
    let refused = [
        (
            StageMode::CreateOnly,
            vec![entry("a", PlannedAction::Overwrite)],
        ),
        (StageMode::Upsert, vec![entry("a", PlannedAction::Insert)]),
        (
            StageMode::Upsert,
            vec![entry("b", PlannedAction::Overwrite)],
        ),
        (
            StageMode::Upsert,
            vec![entry("c", PlannedAction::Overwrite)],
        ),
        (
            StageMode::Upsert,
            vec![entry("c", PlannedAction::Insert); 2],
        ),
        (
            StageMode::CreateOnly,
            vec![entry("zz", PlannedAction::Insert)],
        ),
    ];
    for (mode, entries) in refused {
        let planner = |_: &[ExistingRow]| {
            Ok(StagePlan {
                entries: entries.clone(),
            })
        };
        let err = catalog
            .stage(
                "logs",
                mode,
                &splits(mode, "n", &ids(&["a", "b", "c"])),
                &planner,
                T0 + 2,
                None,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, MendError::PolicyRejected { .. }), "{err}");
    }
    assert_eq!(store.puts(), puts);
}

/// A publish of nothing but partition p0 of source kafka moving `from` to `to`.
fn kafka_delta(from: Option<u64>, to: u64) -> PublishRequest {
    PublishRequest {
        checkpoint_delta: Some(CheckpointDelta {
            source: "kafka".to_string(),
            partitions: vec![PartitionDelta {
                partition: "p0".to_string(),
                from_position: from,
                to_position: to,
            }],
        }),
        ..publish_request(&[], &[])
    }
}

#[tokio::test]
async fn publish_moves_splits_applies_the_checkpoint_and_checks_in_its_step() {
    let (catalog, store) = catalog_with_dataset("logs").await;
    catalog
        .set_publish_token("logs", Some("epoch-1"), T0, None)
        .await
        .unwrap();
    stage(
        &catalog,
        StageMode::CreateOnly,
        "node-1",
        &ids(&["a", "b", "old"]),
        T0,
    )
    .await
    .unwrap();
    publish_unchecked(&catalog, &["old"], T0 + 1).await;
    let manifest_version = catalog.dataset("logs").await.unwrap().manifest_version;

    let mut request = kafka_delta(None, 42);
    request.staged_split_ids = ids(&["b", "a"]);
    request.replaced_split_ids = ids(&["old"]);
    request.publish_token = Some("epoch-1".to_string());
    // The engine's validator compares the observation with the request; this one records it.
    let seen = Mutex::new(None);
    let validator = |observation: &crate::catalog::PublishObservation| {
        *seen.lock().unwrap() = Some(observation.clone());
        Ok(())
    };
    let result = catalog
        .publish(&request, &validator, T0 + 2, None)
        .await
        .unwrap();
    assert_eq!(
        (result.published, result.marked),
        (ids(&["a", "b"]), ids(&["old"]))
    );
    assert_eq!(result.manifest_version, manifest_version + 1);
    let observation = seen.lock().unwrap().take().unwrap();
    assert_eq!(observation.publish_token.as_deref(), Some("epoch-1"));
    assert_eq!(
        observation
            .rows
            .iter()
            .map(|row| row.state)
            .collect::<Vec<_>>(),
        [
            SplitState::Staged,
            SplitState::Staged,
            SplitState::Published
        ]
    );

    let dataset = sibling(&catalog).dataset("logs").await.unwrap();
    assert_eq!(dataset.checkpoint["kafka"]["p0"], 42);
    assert_eq!(dataset.manifest_version, manifest_version + 1);
    let rows = catalog
        .list_splits("logs", &ListQuery::default())
        .await
        .unwrap()
        .splits;
    assert_eq!(rows[0].published_at_ms, Some(T0 + 2));
    assert_eq!(rows[2].state, SplitState::MarkedForDeletion);

    // A refusing validator, and a request that breaks the lifecycle, write nothing.
    let puts = store.puts();
    let refuse = |_: &crate::catalog::PublishObservation| {
        Err(MendError::PolicyRejected {
            message: "stale token".into(),
        })
    };
    catalog
        .stage(
            "logs",
            StageMode::CreateOnly,
            &splits(StageMode::CreateOnly, "n", &ids(&["c"])),
            &|e: &[ExistingRow]| plan(StageMode::CreateOnly, "n", &ids(&["c"]), e),
            T0 + 3,
            None,
        )
        .await
        .unwrap();
    let puts = puts + 1;
    assert!(
        catalog
            .publish(&publish_request(&["c"], &[]), &refuse, T0 + 4, None)
            .await
            .is_err()
    );
    let refused = [
        (
            publish_request(&["a", "c", "nope"], &["b"]),
            vec!["a", "nope"],
        ),
        (publish_request(&["c"], &["b", "old"]), vec!["old"]),
        (publish_request(&["c"], &["c"]), vec!["c"]),
        (kafka_delta(Some(41), 50), vec!["p0"]),
        (kafka_delta(Some(42), 40), vec!["p0"]),
    ];
    for (request, expected) in refused {
        let err = catalog
            .publish(&request, &|_| Ok(()), T0 + 4, None)
            .await
            .unwrap_err();
        assert!(
            matches!(err, MendError::FailedPrecondition { ref ids, .. } if *ids == expected),
            "{err}"
        );
    }
    let manifest_version = catalog.dataset("logs").await.unwrap().manifest_version;
    let empty = catalog
        .publish(&publish_request(&[], &[]), &|_| Ok(()), T0 + 5, None)
        .await
        .unwrap();
    assert_eq!(
        empty.manifest_version, manifest_version,
        "nothing to publish, nothing written"
    );
    assert_eq!(store.puts(), puts);
    catalog
        .publish(&kafka_delta(Some(42), 50), &|_| Ok(()), T0 + 6, None)
        .await
        .unwrap();
    assert_eq!(
        catalog.dataset("logs").await.unwrap().checkpoint["kafka"]["p0"],
        50
    );
}

#[tokio::test]
async fn marking_is_idempotent_and_unknown_ids_write_nothing() {
    let (catalog, store) = catalog_with_dataset("logs").await;
    stage(
        &catalog,
        StageMode::CreateOnly,
        "node-1",
        &ids(&["a", "b"]),
        T0,
    )
    .await
    .unwrap();

    let first = catalog
        .mark_for_deletion("logs", &ids(&["a"]), T0 + 1, None)
        .await
        .unwrap();
    assert_eq!((first.marked, first.already_marked), (ids(&["a"]), vec![]));
    let manifest_version = catalog.dataset("logs").await.unwrap().manifest_version;
    assert_eq!(manifest_version, 2);

    let puts = store.puts();
    let second = catalog
        .mark_for_deletion("logs", &ids(&["b", "a", "b"]), T0 + 2, None)
        .await
        .unwrap();
    assert_eq!(
        (second.marked, second.already_marked),
        (ids(&["b"]), ids(&["a"]))
    );
    let err = catalog
        .mark_for_deletion("logs", &ids(&["zz", "a", "yy"]), T0 + 3, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, MendError::NotFound { kind: EntityKind::Split, ref ids } if ids == &["yy", "zz"])
    );
    assert_eq!(store.puts(), puts + 1);
    let rows = catalog
        .list_splits("logs", &ListQuery::default())
        .await
        .unwrap()
        .splits;
    assert_eq!(
        (rows[0].updated_at_ms, rows[1].updated_at_ms),
        (T0 + 1, T0 + 2)
    );
    assert_eq!(
        catalog.dataset("logs").await.unwrap().manifest_version,
        manifest_version + 1
    );
}

#[tokio::test]
async fn delete_removes_only_marked_rows() {
    let (catalog, store) = catalog_with_dataset("logs").await;
    stage(
        &catalog,
        StageMode::CreateOnly,
        "node-1",
        &ids(&["a", "b", "c"]),
        T0,
    )
    .await
    .unwrap();
    catalog
        .mark_for_deletion("logs", &ids(&["a", "b"]), T0 + 1, None)
        .await
        .unwrap();

    let puts = store.puts();
    let err = catalog
        .delete_splits("logs", &ids(&["a", "c"]), T0 + 2, None)
        .await
        .unwrap_err();
    assert!(matches!(err, MendError::FailedPrecondition { ref ids, .. } if ids == &["c"]));
    let err = catalog
        .delete_splits("logs", &ids(&["a", "x"]), T0 + 2, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, MendError::NotFound { kind: EntityKind::Split, ref ids } if ids == &["x"])
    );
    assert_eq!(store.puts(), puts);

    catalog
        .delete_splits("logs", &ids(&["b", "a"]), T0 + 3, None)
        .await
        .unwrap();
    let remaining = sibling(&catalog)
        .list_splits("logs", &ListQuery::default())
        .await
        .unwrap()
        .splits;
    assert_eq!(
        remaining
            .iter()
            .map(|row| row.split_id.as_str())
            .collect::<Vec<_>>(),
        ["c"]
    );
    assert_eq!(catalog.dataset("logs").await.unwrap().manifest_version, 3);
}

#[tokio::test]
async fn config_and_token_changes_are_conditional_and_bump_versions() {
    let (catalog, store) = catalog_with_dataset("logs").await;
    let config = DatasetConfig {
        staged_grace_period_ms: 5,
        ..Default::default()
    };

    let err = catalog
        .update_config("logs", 7, &config, T0 + 1, None)
        .await
        .unwrap_err();
    assert!(matches!(err, MendError::FailedPrecondition { .. }), "{err}");
    let updated = catalog
        .update_config("logs", 1, &config, T0 + 1, None)
        .await
        .unwrap();
    assert_eq!(
        (
            updated.config_version,
            updated.manifest_version,
            updated.updated_at_ms
        ),
        (2, 2, T0 + 1)
    );
    assert_eq!(
        sibling(&catalog).dataset("logs").await.unwrap().config,
        config
    );

    let fenced = catalog
        .set_publish_token("logs", Some("epoch-2"), T0 + 2, None)
        .await
        .unwrap();
    assert_eq!(
        (fenced.publish_token.as_deref(), fenced.manifest_version),
        (Some("epoch-2"), 3)
    );
    let puts = store.puts();
    catalog
        .set_publish_token("logs", Some("epoch-2"), T0 + 3, None)
        .await
        .unwrap();
    assert_eq!(
        catalog
            .update_config("logs", 2, &config, T0 + 3, None)
            .await
            .unwrap()
            .config_version,
        2
    );
    assert_eq!(store.puts(), puts);
}

#[tokio::test]
async fn listing_filters_and_pages_by_id() {
    let (catalog, _) = catalog_with_dataset("logs").await;
    for (index, split_id) in ["a", "b", "c", "d", "e"].into_iter().enumerate() {
        stage(
            &catalog,
            StageMode::CreateOnly,
            "n",
            &ids(&[split_id]),
            T0 + index as i64,
        )
        .await
        .unwrap();
    }
    publish_unchecked(&catalog, &["b", "d"], T0 + 10).await;
    let listed = |query: ListQuery| {
        let catalog = &catalog;
        async move {
            let page = catalog.list_splits("logs", &query).await.unwrap();
            let split_ids: Vec<String> = page.splits.into_iter().map(|row| row.split_id).collect();
            (split_ids, page.next_after_split_id)
        }
    };
    let states = ListQuery {
        states: vec![SplitState::Published],
        ..Default::default()
    };
    assert_eq!(listed(states).await, (ids(&["b", "d"]), None));
    let recent = ListQuery {
        updated_since_ms: Some(T0 + 2),
        updated_before_ms: Some(T0 + 10),
        ..Default::default()
    };
    assert_eq!(listed(recent).await, (ids(&["c", "e"]), None));
    let named = ListQuery {
        split_ids: Some(ids(&["e", "a", "zz"])),
        ..Default::default()
    };
    assert_eq!(listed(named).await, (ids(&["a", "e"]), None));
    let outside = ListQuery {
        time_range: Some(TimeRange {
            start: 201,
            end: 300,
        }),
        ..Default::default()
    };
    assert_eq!(listed(outside).await, (vec![], None));

    let mut query = ListQuery {
        limit: Some(2),
        ..Default::default()
    };
    assert_eq!(
        listed(query.clone()).await,
        (ids(&["a", "b"]), Some("b".to_string()))
    );
    query.after_split_id = Some("b".to_string());
    assert_eq!(
        listed(query.clone()).await,
        (ids(&["c", "d"]), Some("d".to_string()))
    );
    query.after_split_id = Some("d".to_string());
    assert_eq!(listed(query).await, (ids(&["e"]), None));
}

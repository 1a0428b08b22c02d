//! Datasets and staging: creating, listing and configuring datasets; create-only and upsert
//! stages, duplicates, refused input; create-only batches racing for the same ids.

use std::collections::BTreeSet;

use mend::model::{
    DatasetConfig, ListQuery, PublishRequest, SplitState, StageMode, StageOutcome, StageRequest,
    StageSplit,
};
use mend::{EntityKind, MendError};

use super::{
    ids_of, metadata, outcomes, publish, publish_request, request, row, rows, stage, strings,
};
use crate::harness::{Harness, MAX_STAGE_BATCH};

pub(super) async fn datasets_create_list_show_and_configure(h: &Harness<'_>) {
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

pub(super) async fn create_only_leaves_existing_rows_exactly_as_they_were(h: &Harness<'_>) {
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

pub(super) async fn duplicate_ids_fold_in_both_modes(h: &Harness<'_>) {
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

pub(super) async fn create_only_batch_of_existing_rows_writes_nothing(h: &Harness<'_>) {
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

pub(super) async fn upsert_overwrites_staged_and_rejects_whole_batch_otherwise(h: &Harness<'_>) {
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
    let began = std::time::Instant::now();
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
    super::assert_stamped_now(h, staged_after.updated_at_ms, began, "the overwrite");
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

/// Over 100 lines: a case is one script against one dataset, each check under the step it
/// checks; split, it would only hand its state from piece to piece.
pub(super) async fn bad_stage_input_is_refused_and_writes_nothing(h: &Harness<'_>) {
    let ds = h.create_dataset("bad-input").await;
    stage(h, &ds, StageMode::CreateOnly, &["existing"]).await;
    let before = h.write_fingerprint(&ds).await;
    let long_id = "x".repeat(129);
    let good = metadata(1);
    let too_many: Vec<(String, String)> = (0..=MAX_STAGE_BATCH)
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
        h.name(),
        invalid_cases.len()
    );
}

/// Workers stage the same ids in different orders, create-only, round after round. Each id
/// must be inserted by exactly one worker, with no error and no deadlock.
pub(super) async fn concurrent_create_only_batches_claim_each_id_once(h: &Harness<'_>) {
    let scale = h.scale();
    let (workers, rounds, ids_per_round) = (
        scale.stage_race_workers,
        scale.stage_race_rounds,
        scale.stage_race_ids,
    );
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
        h.name()
    );
}

/// A stage that refuses unresolved operations in its way ([`mend::Engine::stage_unless_in_the_way`],
/// what `mend serve` stages with): refused, naming the operation and writing nothing, in both
/// modes, for a split an intent names to stage, publish, replace, mark or delete; staged as
/// usual when no intent names its splits (with an intent in the dataset); and under a key,
/// answered by its record before anything is checked, through the engine and at the catalog
/// trait itself ([`mend::catalog::Catalog::stage_unless_in_the_way`]).
/// [`mend::Engine::stage`] itself stages whatever intents say.
pub(super) async fn a_stage_unless_in_the_way_refuses_only_the_splits_an_intent_names(
    h: &Harness<'_>,
) {
    use mend::intent::PlannedPublish;

    let ds = h.create_dataset("in-the-way").await;
    let catalog = h.engine.catalog();
    let mut in_doubt = super::intents::intent(&ds, "op-x", 1_000);
    in_doubt.effects.publish = Some(PlannedPublish {
        staged_split_ids: vec!["op-x-split".into()],
        replaced_split_ids: vec!["replaced".into()],
        checkpoint_delta: None,
        publish_token: None,
    });
    in_doubt.effects.mark = vec!["marked".into()];
    in_doubt.effects.delete = vec!["deleted".into()];
    catalog.put_intent(&in_doubt).await.expect("put intent");
    let before = h.write_fingerprint(&ds).await;

    let mut refused = 0;
    for mode in [StageMode::CreateOnly, StageMode::Upsert] {
        for named in ["op-x-split", "replaced", "marked", "deleted"] {
            let splits = [("fresh-1", metadata(1)), (named, metadata(1))];
            let error = h
                .engine
                .stage_unless_in_the_way(&request(&ds, mode, "node-b", &splits))
                .await
                .unwrap_err();
            assert!(
                matches!(&error, MendError::RecoveryRequired { operation_id } if operation_id == "op-x"),
                "[{}] {mode:?} of {named}: {error:?}",
                h.name()
            );
            refused += 1;
        }
    }
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "[{}] a refused stage writes nothing",
        h.name()
    );

    // Splits no intent names stage as usual, the intent there or not.
    let free = [("fresh-1", metadata(1)), ("fresh-2", metadata(1))];
    let inserted = h
        .engine
        .stage_unless_in_the_way(&request(&ds, StageMode::CreateOnly, "node-b", &free))
        .await
        .expect("create-only stage of free splits");
    assert_eq!(
        outcomes(&inserted),
        [
            ("fresh-1".into(), StageOutcome::Inserted),
            ("fresh-2".into(), StageOutcome::Inserted)
        ]
    );
    let overwritten = h
        .engine
        .stage_unless_in_the_way(&request(
            &ds,
            StageMode::Upsert,
            "node-c",
            &[("fresh-1", metadata(2))],
        ))
        .await
        .expect("upsert of a free split");
    assert_eq!(
        outcomes(&overwritten),
        [("fresh-1".into(), StageOutcome::Overwritten)]
    );

    // Under a key, a request that landed answers its record even once an operation names its
    // splits; the same splits unkeyed are refused.
    let keyed = request(
        &ds,
        StageMode::CreateOnly,
        "node-b",
        &[("fresh-3", metadata(3))],
    );
    let first = h
        .engine
        .stage_unless_in_the_way(&keyed)
        .idempotency_key("stage-3")
        .await
        .expect("keyed stage");
    let mut later = super::intents::intent(&ds, "op-y", 2_000);
    later.effects.stage[0].split_id = "fresh-3".into();
    catalog.put_intent(&later).await.expect("put intent");
    let replayed = h
        .engine
        .stage_unless_in_the_way(&keyed)
        .idempotency_key("stage-3")
        .await
        .expect("a retry under its key");
    assert_eq!(
        replayed,
        first,
        "[{}] the retry answers the record",
        h.name()
    );
    let unkeyed = h.engine.stage_unless_in_the_way(&keyed).await.unwrap_err();
    assert!(
        matches!(&unkeyed, MendError::RecoveryRequired { operation_id } if operation_id == "op-y"),
        "{unkeyed:?}"
    );
    refused += 1;

    // The same at the catalog trait itself (the engine reads a key's record first; a backend
    // must not need it to).
    let split = std::sync::Arc::new(mend::model::NewSplit {
        split_id: "fresh-4".into(),
        node: "node-b".into(),
        metadata_json: "{}".into(),
        time_range: None,
    });
    let splits = [split];
    let key = mend::catalog::RequestKey::new("catalog-stage-4", &"fresh-4");
    let stage_at_catalog = |key| {
        catalog.stage_unless_in_the_way(&ds, StageMode::CreateOnly, &splits, None, 5_000, key)
    };
    let first = stage_at_catalog(Some(&key)).await.expect("keyed stage");
    let mut latest = super::intents::intent(&ds, "op-z", 3_000);
    latest.effects.stage[0].split_id = "fresh-4".into();
    catalog.put_intent(&latest).await.expect("put intent");
    assert_eq!(
        stage_at_catalog(Some(&key))
            .await
            .expect("a retry under its key"),
        first,
        "[{}] the catalog answers a recorded key before it looks at intents",
        h.name()
    );
    let unkeyed = stage_at_catalog(None).await.unwrap_err();
    assert!(
        matches!(&unkeyed, MendError::RecoveryRequired { operation_id } if operation_id == "op-z"),
        "{unkeyed:?}"
    );
    refused += 1;

    // The embedder's own stage does not look at intents.
    let staged = h
        .engine
        .stage(&request(
            &ds,
            StageMode::CreateOnly,
            "node-b",
            &[("op-x-split", metadata(4))],
        ))
        .await
        .expect("an embedder's stage");
    assert_eq!(
        outcomes(&staged),
        [("op-x-split".into(), StageOutcome::Inserted)]
    );
    println!(
        "stage unless in the way [{}]: {refused} stages refused (the first 8 checked to write nothing), 4 staged beside an intent, 2 answered by their records",
        h.name()
    );
}

//! Staging in both modes: inserts, skips, overwrites, lost races and refused plans.

use super::*;

#[tokio::test]
async fn create_only_inserts_missing_rows_and_leaves_existing_rows_untouched() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;

    let first = [
        new_split("a", "node-1", None),
        new_split("b", "node-1", Some((1, 2))),
    ];
    let staged = stage(&catalog, &dataset_id, StageMode::CreateOnly, &first, 10)
        .await
        .unwrap();
    assert_eq!(
        outcomes(&staged),
        [("a", StageOutcome::Inserted), ("b", StageOutcome::Inserted)]
    );
    let before = row(&catalog, &dataset_id, "b").await;
    assert_eq!(before.state, SplitState::Staged);
    assert_eq!(before.time_range, Some(TimeRange { start: 1, end: 2 }));
    assert_eq!((before.created_at_ms, before.updated_at_ms), (10, 10));

    let second = [
        new_split("c", "node-2", None),
        new_split("b", "node-2", None),
    ];
    let staged = stage(&catalog, &dataset_id, StageMode::CreateOnly, &second, 20)
        .await
        .unwrap();
    assert_eq!(
        outcomes(&staged),
        [
            ("b", StageOutcome::Skipped(SplitState::Staged)),
            ("c", StageOutcome::Inserted)
        ]
    );
    assert_eq!(row(&catalog, &dataset_id, "b").await, before);
    assert_eq!(row(&catalog, &dataset_id, "c").await.node, "node-2");

    // A batch that inserts nothing writes nothing, whatever state the rows are in.
    catalog
        .publish(
            &publish_request(&dataset_id, &["b"], &[]),
            &accept_all,
            30,
            None,
        )
        .await
        .unwrap();
    let rows_before = all_rows(&catalog, &dataset_id).await;
    let version_before = manifest_version(&catalog, &dataset_id).await;
    let staged = stage(&catalog, &dataset_id, StageMode::CreateOnly, &second, 40)
        .await
        .unwrap();
    assert_eq!(
        outcomes(&staged),
        [
            ("b", StageOutcome::Skipped(SplitState::Published)),
            ("c", StageOutcome::Skipped(SplitState::Staged))
        ]
    );
    assert_eq!(all_rows(&catalog, &dataset_id).await, rows_before);
    assert_eq!(
        manifest_version(&catalog, &dataset_id).await,
        version_before
    );

    let missing = stage(
        &catalog,
        "no-such-dataset",
        StageMode::CreateOnly,
        &first,
        50,
    )
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

#[tokio::test]
async fn create_only_reports_a_lost_insert_as_skipped_with_the_winners_state() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    stage(
        &catalog,
        &dataset_id,
        StageMode::CreateOnly,
        &[new_split("a", "winner", None)],
        10,
    )
    .await
    .unwrap();
    catalog
        .publish(
            &publish_request(&dataset_id, &["a"], &[]),
            &accept_all,
            20,
            None,
        )
        .await
        .unwrap();
    let winner = row(&catalog, &dataset_id, "a").await;

    // The planner plans as if it had read before the winner inserted "a".
    let splits = [new_split("a", "loser", None), new_split("b", "loser", None)];
    let stale_planner = |_: &[ExistingRow]| plan(StageMode::CreateOnly, &splits, &[]);
    let staged = catalog
        .stage(
            &dataset_id,
            StageMode::CreateOnly,
            &distinct(StageMode::CreateOnly, &splits),
            &stale_planner,
            30,
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        outcomes(&staged),
        [
            ("a", StageOutcome::Skipped(SplitState::Published)),
            ("b", StageOutcome::Inserted)
        ]
    );
    assert_eq!(row(&catalog, &dataset_id, "a").await, winner);
}

/// The standard create-only stage is one statement, which probes the rows first, or inserts
/// first when the dataset's last such stage inserted every id. Either way, a row another writer commits
/// while that statement waits for it is in neither answer (the snapshot predates it, the insert
/// left it): it is read again and reported skipped with the winner's state, never as a row in
/// another state, and never lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standard_create_only_stage_reads_again_a_row_committed_while_it_ran() {
    for probe_first in [false, true] {
        a_row_committed_while_the_stage_ran_is_read_again(probe_first).await;
    }
}

async fn a_row_committed_while_the_stage_ran_is_read_again(probe_first: bool) {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let standard = |splits: &[NewSplit], now_ms| {
        let (catalog, dataset_id) = (catalog.clone(), dataset_id.clone());
        let requested = distinct(StageMode::CreateOnly, splits);
        async move {
            catalog
                .stage_standard(&dataset_id, StageMode::CreateOnly, &requested, now_ms, None)
                .await
        }
    };
    standard(&[new_split("old", "earlier", None)], 10)
        .await
        .unwrap();
    if probe_first {
        // A stage that met only rows that exist: the next one probes first.
        standard(&[new_split("old", "again", None)], 11)
            .await
            .unwrap();
    }
    assert_eq!(catalog.probe_first.get(&dataset_id), probe_first);
    // Another writer inserts "x" and holds its transaction open.
    let mut winner = catalog.pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO splits (dataset_id, split_id, state, node, metadata, created_at_ms, \
         updated_at_ms) VALUES ($1, 'x', 'staged', 'winner', '{}'::jsonb, 15, 15)",
    )
    .bind(&dataset_id)
    .execute(&mut *winner)
    .await
    .unwrap();
    let staging = tokio::spawn(standard(
        &[
            new_split("new", "loser", None),
            new_split("old", "loser", None),
            new_split("x", "loser", None),
        ],
        20,
    ));
    // The stage's insert waits on "x" until the winner ends.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !staging.is_finished(),
        "the stage waits for the winner's row"
    );
    winner.commit().await.unwrap();
    let staged = staging.await.unwrap().unwrap();
    assert_eq!(
        outcomes(&staged),
        [
            ("new", StageOutcome::Inserted),
            ("old", StageOutcome::Skipped(SplitState::Staged)),
            ("x", StageOutcome::Skipped(SplitState::Staged)),
        ],
        "probe first: {probe_first}"
    );
    assert_eq!(row(&catalog, &dataset_id, "x").await.node, "winner");
    assert_eq!(row(&catalog, &dataset_id, "old").await.node, "earlier");
    assert_eq!(row(&catalog, &dataset_id, "new").await.node, "loser");
    // It met rows that exist: the next stage probes first.
    assert!(catalog.probe_first.get(&dataset_id));
}

#[test]
fn a_dataset_inserts_first_only_after_a_stage_that_inserted_every_id() {
    use crate::model::StagedSplit;
    let staged = |skipped: usize, inserted: usize| -> Vec<StagedSplit> {
        (0..skipped)
            .map(|i| StagedSplit {
                split_id: format!("s{i}"),
                outcome: StageOutcome::Skipped(SplitState::Published),
            })
            .chain((0..inserted).map(|i| StagedSplit {
                split_id: format!("i{i}"),
                outcome: StageOutcome::Inserted,
            }))
            .collect()
    };
    let memory = super::super::ProbeFirst::default();
    assert!(!memory.get("d"));
    memory.remember("d", &staged(1, 99));
    assert!(memory.get("d"));
    memory.remember("d", &staged(0, 100));
    assert!(!memory.get("d"));
    // Full, it forgets every dataset rather than grow.
    for n in 0..super::super::ProbeFirst::MAX_DATASETS {
        memory.remember(&format!("d{n}"), &staged(1, 0));
    }
    assert!(memory.get("d0"));
    memory.remember("one more", &staged(1, 0));
    assert!(memory.get("one more") && !memory.get("d0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_create_only_batches_claim_each_split_exactly_once() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let batches: Vec<Vec<NewSplit>> = (0..8)
        .map(|writer| {
            // Overlapping ranges of ids, so every id is contended by several writers.
            (writer..writer + 16)
                .map(|index| {
                    new_split(
                        &format!("split-{index:03}"),
                        &format!("node-{writer}"),
                        None,
                    )
                })
                .collect()
        })
        .collect();
    let results = futures::future::join_all(
        batches
            .iter()
            .map(|batch| stage(&catalog, &dataset_id, StageMode::CreateOnly, batch, 10)),
    )
    .await;

    let mut owners: BTreeMap<String, usize> = BTreeMap::new();
    for (writer, result) in results.into_iter().enumerate() {
        for split in result.unwrap() {
            if split.outcome == StageOutcome::Inserted {
                assert!(
                    owners.insert(split.split_id.clone(), writer).is_none(),
                    "{} inserted twice",
                    split.split_id
                );
            } else {
                assert_eq!(split.outcome, StageOutcome::Skipped(SplitState::Staged));
            }
        }
    }
    let rows = all_rows(&catalog, &dataset_id).await;
    assert_eq!(rows.len(), owners.len());
    for row in rows {
        // The row holds the content of the writer that was told it inserted it.
        assert_eq!(row.node, format!("node-{}", owners[&row.split_id]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_upserts_insert_each_id_once_and_all_succeed() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let batches: Vec<Vec<NewSplit>> = (0..6)
        .map(|writer| {
            (0..10)
                .map(|index| {
                    new_split(
                        &format!("split-{index:03}"),
                        &format!("node-{writer}"),
                        None,
                    )
                })
                .collect()
        })
        .collect();
    let results = futures::future::join_all(
        batches
            .iter()
            .map(|batch| stage(&catalog, &dataset_id, StageMode::Upsert, batch, 10)),
    )
    .await;

    let mut inserted: BTreeMap<String, usize> = BTreeMap::new();
    for result in results {
        for split in result.unwrap() {
            match split.outcome {
                StageOutcome::Inserted => *inserted.entry(split.split_id).or_default() += 1,
                StageOutcome::Overwritten => {}
                other => panic!("unexpected outcome {other:?}"),
            }
        }
    }
    // Every id was inserted by exactly one writer and overwritten by the others.
    assert_eq!(inserted.len(), 10);
    assert!(inserted.values().all(|count| *count == 1), "{inserted:?}");
    assert_eq!(all_rows(&catalog, &dataset_id).await.len(), 10);
}

#[tokio::test]
async fn upsert_overwrites_staged_rows_and_a_rejected_plan_writes_nothing() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;

    let staged = stage(
        &catalog,
        &dataset_id,
        StageMode::Upsert,
        &[new_split("a", "node-1", None)],
        10,
    )
    .await
    .unwrap();
    assert_eq!(outcomes(&staged), [("a", StageOutcome::Inserted)]);

    let staged = stage(
        &catalog,
        &dataset_id,
        StageMode::Upsert,
        &[new_split("a", "node-2", Some((5, 6)))],
        20,
    )
    .await
    .unwrap();
    assert_eq!(outcomes(&staged), [("a", StageOutcome::Overwritten)]);
    let overwritten = row(&catalog, &dataset_id, "a").await;
    assert_eq!(overwritten.node, "node-2");
    assert_eq!(overwritten.metadata["written_by"], "node-2");
    assert_eq!(overwritten.time_range, Some(TimeRange { start: 5, end: 6 }));
    assert_eq!(
        (overwritten.created_at_ms, overwritten.updated_at_ms),
        (10, 20)
    );

    catalog
        .publish(
            &publish_request(&dataset_id, &["a"], &[]),
            &accept_all,
            30,
            None,
        )
        .await
        .unwrap();
    let rows_before = all_rows(&catalog, &dataset_id).await;
    let version_before = manifest_version(&catalog, &dataset_id).await;
    let rejected = stage(
        &catalog,
        &dataset_id,
        StageMode::Upsert,
        &[
            new_split("a", "node-3", None),
            new_split("b", "node-3", None),
        ],
        40,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&rejected, MendError::FailedPrecondition { ids, .. } if *ids == ["a"]),
        "{rejected:?}"
    );
    assert_eq!(all_rows(&catalog, &dataset_id).await, rows_before);
    assert_eq!(
        manifest_version(&catalog, &dataset_id).await,
        version_before
    );
}

#[tokio::test]
async fn a_plan_the_backend_cannot_apply_as_written_is_refused() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    stage(
        &catalog,
        &dataset_id,
        StageMode::CreateOnly,
        &[new_split("a", "node-1", None)],
        10,
    )
    .await
    .unwrap();
    let before = all_rows(&catalog, &dataset_id).await;

    let overwrite = |_: &[ExistingRow]| {
        Ok(StagePlan {
            entries: vec![PlannedStage {
                split: new_split("a", "node-2", None).into(),
                action: PlannedAction::Overwrite,
            }],
        })
    };
    let refused = catalog
        .stage(
            &dataset_id,
            StageMode::CreateOnly,
            &distinct(StageMode::CreateOnly, &[new_split("a", "node-2", None)]),
            &overwrite,
            20,
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, MendError::PolicyRejected { .. }),
        "{refused:?}"
    );

    let unrequested = |_: &[ExistingRow]| {
        Ok(StagePlan {
            entries: vec![PlannedStage {
                split: new_split("z", "node-2", None).into(),
                action: PlannedAction::Insert,
            }],
        })
    };
    let refused = catalog
        .stage(
            &dataset_id,
            StageMode::Upsert,
            &distinct(StageMode::Upsert, &[new_split("b", "node-2", None)]),
            &unrequested,
            20,
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, MendError::PolicyRejected { .. }),
        "{refused:?}"
    );
    assert_eq!(all_rows(&catalog, &dataset_id).await, before);
}

#[tokio::test]
async fn upsert_applies_a_plan_other_than_the_presumed_one_by_reading_first() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    stage(
        &catalog,
        &dataset_id,
        StageMode::Upsert,
        &[new_split("a", "node-1", None)],
        10,
    )
    .await
    .unwrap();
    let a_before = row(&catalog, &dataset_id, "a").await;

    // The request presumes an overwrite of "a" and an insert of "b" with its own content; the
    // planner skips "a" and inserts "b" with other content.
    let requested = [
        new_split("a", "node-2", None),
        new_split("b", "node-2", None),
    ];
    let calls = AtomicUsize::new(0);
    let planner = |existing: &[ExistingRow]| {
        calls.fetch_add(1, Ordering::Relaxed);
        assert_eq!(
            existing,
            [ExistingRow {
                split_id: "a".into(),
                state: SplitState::Staged
            }],
            "the planner sees what was there before the write, whichever way it was observed"
        );
        Ok(StagePlan {
            entries: vec![
                PlannedStage {
                    split: new_split("a", "node-2", None).into(),
                    action: PlannedAction::Skip(SplitState::Staged),
                },
                PlannedStage {
                    split: new_split("b", "chosen", Some((1, 2))).into(),
                    action: PlannedAction::Insert,
                },
            ],
        })
    };
    let staged = catalog
        .stage(
            &dataset_id,
            StageMode::Upsert,
            &distinct(StageMode::Upsert, &requested),
            &planner,
            20,
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        outcomes(&staged),
        [
            ("a", StageOutcome::Skipped(SplitState::Staged)),
            ("b", StageOutcome::Inserted)
        ]
    );
    // Asked on the presumed write, then again reading first.
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    assert_eq!(row(&catalog, &dataset_id, "a").await, a_before);
    let b = row(&catalog, &dataset_id, "b").await;
    assert_eq!(b.node, "chosen");
    assert_eq!(b.time_range, Some(TimeRange { start: 1, end: 2 }));
}

#[tokio::test]
async fn upsert_tells_each_insert_from_each_overwrite_in_one_statement() {
    // The presumed statement reports, per row it wrote, whether it inserted or updated it
    // (`xmax = 0`); the outcome and the time stamps follow from that.
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let first = [new_split("a", "first", None), new_split("c", "first", None)];
    stage(&catalog, &dataset_id, StageMode::Upsert, &first, 10)
        .await
        .unwrap();
    let second = [
        new_split("c", "second", None),
        new_split("b", "second", None),
        new_split("a", "second", None),
    ];
    let staged = stage(&catalog, &dataset_id, StageMode::Upsert, &second, 20)
        .await
        .unwrap();
    assert_eq!(
        outcomes(&staged),
        [
            ("a", StageOutcome::Overwritten),
            ("b", StageOutcome::Inserted),
            ("c", StageOutcome::Overwritten)
        ]
    );
    for (split_id, created_at_ms) in [("a", 10), ("b", 20), ("c", 10)] {
        let row = row(&catalog, &dataset_id, split_id).await;
        assert_eq!(
            (row.node.as_str(), row.created_at_ms, row.updated_at_ms),
            ("second", created_at_ms, 20),
            "{split_id}"
        );
    }
}

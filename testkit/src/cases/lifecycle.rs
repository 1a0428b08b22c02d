//! After staging: publish (states, checkpoint deltas, refusals that write nothing), fencing by
//! publish token and by epoch, mark for deletion, delete, listing with filters and pages, and
//! the states of splits by id.

use mend::model::{
    CheckpointDelta, ListQuery, PartitionDelta, PublishRequest, SplitState, StageMode, TimeRange,
};
use mend::{EntityKind, MendError};

use super::{ids_of, metadata, publish, publish_request, request, row, rows, stage, strings};
use crate::harness::{EPOCH_MS, Harness};

pub(super) async fn publish_moves_states_and_checkpoint_at_once(h: &Harness<'_>) {
    let ds = h.create_dataset("publish").await;
    let created = h.engine.dataset(&ds).await.unwrap();
    stage(h, &ds, StageMode::CreateOnly, &["s1", "s2"]).await;
    h.clock.advance_ms(10);
    let began = std::time::Instant::now();
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
    super::assert_stamped_now(h, s1.published_at_ms.unwrap(), began, "s1's publication");
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

/// Over 100 lines: a case is one script against one dataset, each check under the step it
/// checks; split, it would only hand its state from piece to piece.
pub(super) async fn publish_errors_name_ids_and_write_nothing(h: &Harness<'_>) {
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

pub(super) async fn publish_token_fences_stale_publishers(h: &Harness<'_>) {
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
///
/// Over 100 lines: a case is one script against one dataset, each check under the step it
/// checks; split, it would only hand its state from piece to piece.
pub(super) async fn fencing_epoch(h: &Harness<'_>) {
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
    let began = std::time::Instant::now();
    let advanced = h.engine.advance_fencing_epoch(&ds).await.expect("advance");
    assert_eq!(advanced.fencing_epoch, 1);
    assert!(advanced.manifest_version > before.manifest_version);
    super::assert_stamped_now(h, advanced.updated_at_ms, began, "the epoch's advance");
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
        h.name(),
        stale_publishes.len()
    );
}

pub(super) async fn mark_is_idempotent_and_names_unknown_ids(h: &Harness<'_>) {
    let ds = h.create_dataset("mark").await;
    stage(h, &ds, StageMode::CreateOnly, &["staged", "published"]).await;
    publish(h, &ds, &["published"], &[]).await;
    let manifest = h.engine.dataset(&ds).await.unwrap().manifest_version;

    h.clock.advance_ms(100);
    let began = std::time::Instant::now();
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
            .all(|r| r.state == SplitState::MarkedForDeletion)
    );
    for split in &marked {
        super::assert_stamped_now(h, split.updated_at_ms, began, "a mark");
    }
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

/// A mark of a split never published is seen as it is made; a published split's is seen only
/// when `see_marks` records it, once, and a row in another state or an unknown id is skipped.
/// Neither moves the manifest version.
pub(super) async fn a_published_splits_mark_is_seen_once_and_a_staged_ones_at_once(
    h: &Harness<'_>,
) {
    let ds = h.create_dataset("see-marks").await;
    stage(
        h,
        &ds,
        StageMode::CreateOnly,
        &["staged", "published", "live"],
    )
    .await;
    publish(h, &ds, &["published", "live"], &[]).await;
    h.clock.advance_ms(100);
    let marked_at = h.clock_now();
    h.engine
        .mark_for_deletion(&ds, &strings(&["published", "staged"]))
        .await
        .expect("mark");
    let seen_when_marked = |rows: &[mend::model::SplitRow]| -> Vec<(String, Option<i64>)> {
        rows.iter()
            .map(|r| (r.split_id.clone(), r.mark_seen_at_ms))
            .collect()
    };
    assert_eq!(
        seen_when_marked(&rows(h, &ds).await),
        [
            ("live".to_string(), None),
            ("published".to_string(), None),
            ("staged".to_string(), Some(marked_at)),
        ]
    );
    let manifest = h.engine.dataset(&ds).await.unwrap().manifest_version;

    h.clock.advance_ms(100);
    let seen_at = h.clock_now();
    let all = strings(&["ghost", "live", "published", "staged"]);
    let seen = h
        .engine
        .catalog()
        .see_marks(&ds, &all, seen_at)
        .await
        .expect("see marks");
    assert_eq!(seen, ["published"], "only the unseen mark");
    let after = rows(h, &ds).await;
    assert_eq!(
        seen_when_marked(&after),
        [
            ("live".to_string(), None),
            ("published".to_string(), Some(seen_at)),
            ("staged".to_string(), Some(marked_at)),
        ]
    );
    assert!(
        after
            .iter()
            .filter(|r| r.split_id != "live")
            .all(|r| r.updated_at_ms == marked_at && r.state == SplitState::MarkedForDeletion),
        "seeing a mark changes nothing else: {after:?}"
    );
    assert_eq!(
        h.engine.dataset(&ds).await.unwrap().manifest_version,
        manifest
    );

    // Seen again later: nothing recorded, nothing written.
    let before = h.write_fingerprint(&ds).await;
    h.clock.advance_ms(100);
    let again = h
        .engine
        .catalog()
        .see_marks(&ds, &all, h.clock_now())
        .await
        .expect("see marks again");
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(h.write_fingerprint(&ds).await, before);
    assert_eq!(rows(h, &ds).await, after);

    let no_dataset = h
        .engine
        .catalog()
        .see_marks("no-such-dataset", &strings(&["a"]), seen_at)
        .await
        .unwrap_err();
    assert!(
        matches!(
            no_dataset,
            MendError::NotFound {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{no_dataset:?}"
    );
}

pub(super) async fn delete_removes_objects_then_rows_of_marked_splits_only(h: &Harness<'_>) {
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
    let store = h.objects_store().clone();
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

/// Over 100 lines: a case is one script against one dataset, each check under the step it
/// checks; split, it would only hand its state from piece to piece.
pub(super) async fn list_filters_and_pages(h: &Harness<'_>) {
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
        updated_since_ms: Some(EPOCH_MS + 7_000),
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

pub(super) async fn split_states_name_each_row_by_id(h: &Harness<'_>) {
    let ds = h.create_dataset("states").await;
    stage(h, &ds, StageMode::CreateOnly, &["s1", "s2", "s3"]).await;
    publish(h, &ds, &["s2"], &[]).await;
    h.engine
        .mark_for_deletion(&ds, &strings(&["s3"]))
        .await
        .expect("mark s3");
    let catalog = h.engine.catalog();
    let before = h.write_fingerprint(&ds).await;
    let states = catalog
        .split_states(&ds, &strings(&["s3", "unknown", "s1", "s2", "s1"]))
        .await
        .expect("split states");
    let states: Vec<(String, SplitState)> = states
        .into_iter()
        .map(|row| (row.split_id, row.state))
        .collect();
    assert_eq!(
        states,
        [
            ("s1".to_string(), SplitState::Staged),
            ("s2".to_string(), SplitState::Published),
            ("s3".to_string(), SplitState::MarkedForDeletion),
        ],
        "sorted by id, once each, unknown ids left out"
    );
    assert!(catalog.split_states(&ds, &[]).await.unwrap().is_empty());
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "reading states wrote"
    );
    let missing = catalog
        .split_states("no-such-dataset", &strings(&["s1"]))
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

/// A publish and a mark that refuse unresolved operations in their way
/// ([`mend::Engine::publish_unless_in_the_way`], [`mend::Engine::mark_unless_in_the_way`]:
/// what `mend serve` publishes and marks with): refused, naming the operation and writing
/// nothing, for a split an intent names to stage or to replace, whether the request names it
/// to publish, to replace or to mark; written as usual when no intent names its splits; and
/// under a key, answered by the record of a request that landed before an operation began on
/// its splits. [`mend::Engine::publish`] and [`mend::Engine::mark_for_deletion`] write whatever
/// intents say.
pub(super) async fn a_publish_or_mark_unless_in_the_way_refuses_only_the_splits_an_intent_names(
    h: &Harness<'_>,
) {
    use mend::intent::PlannedPublish;

    let ds = h.create_dataset("publish-in-the-way").await;
    stage(
        h,
        &ds,
        StageMode::CreateOnly,
        &["op-x-split", "free", "free-2"],
    )
    .await;
    stage(h, &ds, StageMode::CreateOnly, &["replaced", "keyed"]).await;
    publish(h, &ds, &["replaced"], &[]).await;
    let catalog = h.engine.catalog();
    let mut in_doubt = super::intents::intent(&ds, "op-x", 1_000);
    in_doubt.effects.publish = Some(PlannedPublish {
        staged_split_ids: vec!["op-x-split".into()],
        replaced_split_ids: vec!["replaced".into()],
        checkpoint_delta: None,
        publish_token: None,
    });
    catalog.put_intent(&in_doubt).await.expect("put intent");
    let before = h.write_fingerprint(&ds).await;

    let is_op_x = |error: &MendError| matches!(error, MendError::RecoveryRequired { operation_id } if operation_id == "op-x");
    let mut refused = 0;
    let publishes = [
        publish_request(&ds, &["free", "op-x-split"], &[]),
        publish_request(&ds, &["free"], &["replaced"]),
    ];
    for request in &publishes {
        let error = h
            .engine
            .publish_unless_in_the_way(request)
            .await
            .unwrap_err();
        assert!(is_op_x(&error), "[{}] {request:?}: {error:?}", h.name());
        refused += 1;
    }
    for named in ["op-x-split", "replaced"] {
        let error = h
            .engine
            .mark_unless_in_the_way(&ds, &strings(&["free", named]))
            .await
            .unwrap_err();
        assert!(is_op_x(&error), "[{}] mark of {named}: {error:?}", h.name());
        refused += 1;
    }
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "[{}] a refused publish or mark writes nothing",
        h.name()
    );

    // Splits no intent names are written as usual, the intent there or not.
    let published = h
        .engine
        .publish_unless_in_the_way(&publish_request(&ds, &["free"], &[]))
        .await
        .expect("publish of a free split");
    assert_eq!(published.published, ["free"]);
    let marked = h
        .engine
        .mark_unless_in_the_way(&ds, &strings(&["free-2"]))
        .await
        .expect("mark of a free split");
    assert_eq!(marked.marked, ["free-2"]);

    // Under a key, a request that landed answers its record even once an operation names its
    // splits; the same request unkeyed is refused.
    let keyed = publish_request(&ds, &["keyed"], &[]);
    let first = h
        .engine
        .publish_unless_in_the_way(&keyed)
        .idempotency_key("publish-keyed")
        .await
        .expect("keyed publish");
    let first_mark = h
        .engine
        .mark_unless_in_the_way(&ds, &strings(&["keyed"]))
        .idempotency_key("mark-keyed")
        .await
        .expect("keyed mark");
    let mut later = super::intents::intent(&ds, "op-y", 2_000);
    later.effects.stage[0].split_id = "keyed".into();
    catalog.put_intent(&later).await.expect("put intent");
    let replayed = h
        .engine
        .publish_unless_in_the_way(&keyed)
        .idempotency_key("publish-keyed")
        .await
        .expect("a retry of the publish under its key");
    assert_eq!(
        replayed,
        first,
        "[{}] the retry answers the record",
        h.name()
    );
    let replayed_mark = h
        .engine
        .mark_unless_in_the_way(&ds, &strings(&["keyed"]))
        .idempotency_key("mark-keyed")
        .await
        .expect("a retry of the mark under its key");
    assert_eq!(
        replayed_mark,
        first_mark,
        "[{}] the retry answers the record",
        h.name()
    );
    let unkeyed = h
        .engine
        .mark_unless_in_the_way(&ds, &strings(&["keyed"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&unkeyed, MendError::RecoveryRequired { operation_id } if operation_id == "op-y"),
        "[{}] {unkeyed:?}",
        h.name()
    );
    refused += 1;

    // The engine's own publish and mark write whatever intents say.
    h.engine
        .mark_for_deletion(&ds, &strings(&["replaced"]))
        .await
        .expect("a mark that does not look at intents");
    assert_eq!(refused, 5, "[{}] every refusal was checked", h.name());
}

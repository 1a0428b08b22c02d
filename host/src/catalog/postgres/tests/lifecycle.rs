//! Publish, mark for deletion and delete: state moves, checkpoint, fencing, and refusals
//! that write nothing.

use super::*;
use crate::catalog::CatalogExt;

#[tokio::test]
async fn publish_moves_states_applies_the_checkpoint_and_sees_the_token() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    catalog
        .set_publish_token(&dataset_id, Some("epoch-1"), 2_000, None)
        .await
        .unwrap();
    let splits = [
        new_split("a", "node-1", None),
        new_split("b", "node-1", None),
        new_split("c", "node-1", None),
    ];
    stage(&catalog, &dataset_id, StageMode::Upsert, &splits, 10)
        .await
        .unwrap();
    let version_before = manifest_version(&catalog, &dataset_id).await;

    let observed = std::sync::Mutex::new(Vec::new());
    let fenced = |observation: &PublishObservation| {
        observed.lock().unwrap().push(observation.clone());
        if observation.publish_token.as_deref() == Some("epoch-1") {
            Ok(())
        } else {
            Err(MendError::failed_precondition(
                "stale publish token",
                Vec::new(),
            ))
        }
    };
    let request = PublishRequest {
        checkpoint_delta: Some(delta("p0", None, 10)),
        publish_token: Some("epoch-1".to_string()),
        ..publish_request(&dataset_id, &["b", "a", "b"], &[])
    };
    let published = catalog.publish(&request, &fenced, 50, None).await.unwrap();
    assert_eq!(published.published, ids(&["a", "b"]));
    assert!(published.marked.is_empty());
    assert_eq!(published.manifest_version, version_before + 1);
    assert_eq!(
        observed.lock().unwrap()[0],
        PublishObservation {
            rows: vec![
                ExistingRow {
                    split_id: "a".to_string(),
                    state: SplitState::Staged
                },
                ExistingRow {
                    split_id: "b".to_string(),
                    state: SplitState::Staged
                },
            ],
            checkpoint: Checkpoint::new(),
            publish_token: Some("epoch-1".to_string()),
            fencing_epoch: 0,
        }
    );
    let dataset = catalog.dataset(&dataset_id).await.unwrap();
    assert_eq!(dataset.checkpoint["kafka"]["p0"], 10);
    assert_eq!(dataset.manifest_version, published.manifest_version);
    let a = row(&catalog, &dataset_id, "a").await;
    assert_eq!(
        (a.state, a.published_at_ms, a.updated_at_ms, a.created_at_ms),
        (SplitState::Published, Some(50), 50, 10)
    );

    let request = PublishRequest {
        checkpoint_delta: Some(delta("p0", Some(10), 20)),
        ..publish_request(&dataset_id, &["c"], &["a"])
    };
    let replaced = catalog.publish(&request, &fenced, 60, None).await.unwrap();
    assert_eq!(
        (replaced.published, replaced.marked),
        (ids(&["c"]), ids(&["a"]))
    );
    assert_eq!(
        row(&catalog, &dataset_id, "a").await.state,
        SplitState::MarkedForDeletion
    );
    assert_eq!(
        row(&catalog, &dataset_id, "c").await.state,
        SplitState::Published
    );
    assert_eq!(
        catalog.dataset(&dataset_id).await.unwrap().checkpoint["kafka"]["p0"],
        20
    );

    // Refused publishes write nothing: a fenced writer, a stale checkpoint delta, a split in
    // the wrong state (the last two caught by the backend itself, whatever the validator says).
    stage(
        &catalog,
        &dataset_id,
        StageMode::Upsert,
        &[new_split("d", "node-1", None)],
        70,
    )
    .await
    .unwrap();
    let rows_before = all_rows(&catalog, &dataset_id).await;
    let dataset_before = catalog.dataset(&dataset_id).await.unwrap();
    catalog
        .set_publish_token(&dataset_id, Some("epoch-2"), 80, None)
        .await
        .unwrap();
    let fenced_out = catalog
        .publish(
            &publish_request(&dataset_id, &["d"], &[]),
            &fenced,
            90,
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(fenced_out, MendError::FailedPrecondition { .. }),
        "{fenced_out:?}"
    );
    let stale_delta = PublishRequest {
        checkpoint_delta: Some(delta("p0", Some(10), 30)),
        ..publish_request(&dataset_id, &["d"], &[])
    };
    let backwards = PublishRequest {
        checkpoint_delta: Some(delta("p0", Some(20), 15)),
        ..publish_request(&dataset_id, &["d"], &[])
    };
    for request in [stale_delta, backwards] {
        let refused = catalog
            .publish(&request, &accept_all, 90, None)
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, MendError::FailedPrecondition { ids, .. } if *ids == ["p0"]),
            "{refused:?}"
        );
    }
    let not_staged = catalog
        .publish(
            &publish_request(&dataset_id, &["d", "b"], &["c", "a"]),
            &accept_all,
            90,
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&not_staged, MendError::FailedPrecondition { ids, .. } if *ids == ["b"]),
        "{not_staged:?}"
    );
    assert_eq!(all_rows(&catalog, &dataset_id).await, rows_before);
    let dataset_after = catalog.dataset(&dataset_id).await.unwrap();
    assert_eq!(dataset_after.checkpoint, dataset_before.checkpoint);
    assert_eq!(
        dataset_after.manifest_version,
        dataset_before.manifest_version + 1
    );

    let missing = catalog
        .publish(
            &publish_request("no-such-dataset", &["a"], &[]),
            &accept_all,
            90,
            None,
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
async fn mark_for_deletion_is_idempotent_and_all_or_nothing() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    stage(
        &catalog,
        &dataset_id,
        StageMode::Upsert,
        &[
            new_split("a", "node-1", None),
            new_split("b", "node-1", None),
        ],
        10,
    )
    .await
    .unwrap();
    catalog
        .publish(
            &publish_request(&dataset_id, &["b"], &[]),
            &accept_all,
            20,
            None,
        )
        .await
        .unwrap();
    let version = manifest_version(&catalog, &dataset_id).await;

    let marked = catalog
        .mark_for_deletion(&dataset_id, &ids(&["b", "a"]), 30, None)
        .await
        .unwrap();
    assert_eq!(
        (marked.marked, marked.already_marked),
        (ids(&["a", "b"]), vec![])
    );
    assert_eq!(manifest_version(&catalog, &dataset_id).await, version + 1);
    let rows = all_rows(&catalog, &dataset_id).await;
    assert!(
        rows.iter()
            .all(|row| row.state == SplitState::MarkedForDeletion && row.updated_at_ms == 30)
    );

    let again = catalog
        .mark_for_deletion(&dataset_id, &ids(&["a", "b"]), 40, None)
        .await
        .unwrap();
    assert_eq!(
        (again.marked, again.already_marked),
        (vec![], ids(&["a", "b"]))
    );
    assert_eq!(manifest_version(&catalog, &dataset_id).await, version + 1);
    assert_eq!(all_rows(&catalog, &dataset_id).await, rows);

    stage(
        &catalog,
        &dataset_id,
        StageMode::Upsert,
        &[new_split("c", "node-1", None)],
        50,
    )
    .await
    .unwrap();
    let unknown = catalog
        .mark_for_deletion(&dataset_id, &ids(&["c", "zz", "yy"]), 60, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&unknown, MendError::NotFound { kind: EntityKind::Split, ids } if *ids == ["yy", "zz"]),
        "{unknown:?}"
    );
    assert_eq!(
        row(&catalog, &dataset_id, "c").await.state,
        SplitState::Staged
    );
    assert_eq!(manifest_version(&catalog, &dataset_id).await, version + 1);
}

#[tokio::test]
async fn delete_removes_only_marked_splits_and_refuses_the_batch_otherwise() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    stage(
        &catalog,
        &dataset_id,
        StageMode::Upsert,
        &[
            new_split("a", "node-1", None),
            new_split("b", "node-1", None),
        ],
        10,
    )
    .await
    .unwrap();

    let unknown = catalog
        .delete_splits(&dataset_id, &ids(&["a", "zz"]), 20, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&unknown, MendError::NotFound { kind: EntityKind::Split, ids } if *ids == ["zz"]),
        "{unknown:?}"
    );
    let staged = catalog
        .delete_splits(&dataset_id, &ids(&["a"]), 20, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&staged, MendError::FailedPrecondition { ids, .. } if *ids == ["a"]),
        "{staged:?}"
    );

    catalog
        .mark_for_deletion(&dataset_id, &ids(&["a"]), 30, None)
        .await
        .unwrap();
    let version = manifest_version(&catalog, &dataset_id).await;
    let mixed = catalog
        .delete_splits(&dataset_id, &ids(&["a", "b"]), 40, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&mixed, MendError::FailedPrecondition { ids, .. } if *ids == ["b"]),
        "{mixed:?}"
    );
    assert_eq!(all_rows(&catalog, &dataset_id).await.len(), 2);

    catalog
        .delete_splits(&dataset_id, &ids(&["a"]), 50, None)
        .await
        .unwrap();
    let left: Vec<String> = all_rows(&catalog, &dataset_id)
        .await
        .into_iter()
        .map(|row| row.split_id)
        .collect();
    assert_eq!(left, ["b"]);
    assert_eq!(manifest_version(&catalog, &dataset_id).await, version + 1);

    let gone = catalog
        .delete_splits(&dataset_id, &ids(&["a"]), 60, None)
        .await
        .unwrap_err();
    assert!(matches!(gone, MendError::NotFound { .. }), "{gone:?}");
}

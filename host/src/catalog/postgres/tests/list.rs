//! Listing splits: every filter, alone and combined, and paging.

use super::*;
use crate::catalog::CatalogExt;

#[tokio::test]
async fn list_filters_and_pages() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let layout = [
        ("s1", Some((0, 99)), 10),
        ("s2", Some((100, 199)), 20),
        ("s3", None, 30),
        ("s4", Some((150, 250)), 40),
        ("s5", Some((300, 399)), 50),
    ];
    for (split_id, time_range, now_ms) in layout {
        stage(
            &catalog,
            &dataset_id,
            StageMode::CreateOnly,
            &[new_split(split_id, "node-1", time_range)],
            now_ms,
        )
        .await
        .unwrap();
    }
    catalog
        .publish(
            &publish_request(&dataset_id, &["s2", "s4"], &[]),
            &accept_all,
            60,
            None,
        )
        .await
        .unwrap();
    catalog
        .mark_for_deletion(&dataset_id, &ids(&["s5"]), 70, None)
        .await
        .unwrap();
    // Updated at: s1 10, s2 60, s3 30, s4 60, s5 70.

    let list = |query: ListQuery| {
        let catalog = &catalog;
        let dataset_id = &dataset_id;
        async move {
            let page = catalog.list_splits(dataset_id, &query).await.unwrap();
            let ids: Vec<String> = page.splits.into_iter().map(|row| row.split_id).collect();
            (ids, page.next_after_split_id)
        }
    };
    let all = |names: &[&str]| (ids(names), None);

    assert_eq!(
        list(ListQuery::default()).await,
        all(&["s1", "s2", "s3", "s4", "s5"])
    );
    let by_state = |states: Vec<SplitState>| ListQuery {
        states,
        ..ListQuery::default()
    };
    assert_eq!(
        list(by_state(vec![SplitState::Published])).await,
        all(&["s2", "s4"])
    );
    assert_eq!(
        list(by_state(vec![
            SplitState::Staged,
            SplitState::MarkedForDeletion
        ]))
        .await,
        all(&["s1", "s3", "s5"])
    );
    let by_ids = ListQuery {
        split_ids: Some(ids(&["s3", "s1", "nope"])),
        ..ListQuery::default()
    };
    assert_eq!(list(by_ids).await, all(&["s1", "s3"]));
    let by_time = |start, end| ListQuery {
        time_range: Some(TimeRange { start, end }),
        ..ListQuery::default()
    };
    assert_eq!(list(by_time(120, 160)).await, all(&["s2", "s4"]));
    // Bounds are inclusive on both sides.
    assert_eq!(list(by_time(199, 199)).await, all(&["s2", "s4"]));
    assert_eq!(list(by_time(251, 299)).await, all(&[]));
    let by_update = |since, before| ListQuery {
        updated_since_ms: since,
        updated_before_ms: before,
        ..ListQuery::default()
    };
    assert_eq!(
        list(by_update(Some(30), None)).await,
        all(&["s2", "s3", "s4", "s5"])
    );
    assert_eq!(list(by_update(None, Some(30))).await, all(&["s1"]));
    assert_eq!(
        list(by_update(Some(30), Some(70))).await,
        all(&["s2", "s3", "s4"])
    );
    let combined = ListQuery {
        states: vec![SplitState::Published],
        time_range: Some(TimeRange { start: 0, end: 120 }),
        ..ListQuery::default()
    };
    assert_eq!(list(combined).await, all(&["s2"]));
    let after = ListQuery {
        after_split_id: Some("s2".to_string()),
        ..ListQuery::default()
    };
    assert_eq!(list(after).await, all(&["s3", "s4", "s5"]));

    let page = |after: Option<&str>, limit| ListQuery {
        after_split_id: after.map(str::to_string),
        limit: Some(limit),
        ..ListQuery::default()
    };
    assert_eq!(
        list(page(None, 2)).await,
        (ids(&["s1", "s2"]), Some("s2".to_string()))
    );
    assert_eq!(
        list(page(Some("s2"), 2)).await,
        (ids(&["s3", "s4"]), Some("s4".to_string()))
    );
    assert_eq!(list(page(Some("s4"), 2)).await, all(&["s5"]));
    assert_eq!(
        list(page(None, 5)).await,
        all(&["s1", "s2", "s3", "s4", "s5"])
    );

    let zero = catalog
        .list_splits(&dataset_id, &page(None, 0))
        .await
        .unwrap_err();
    assert!(
        matches!(zero, MendError::InvalidArgument { .. }),
        "{zero:?}"
    );
    let missing = catalog
        .list_splits("no-such-dataset", &ListQuery::default())
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

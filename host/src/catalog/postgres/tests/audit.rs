//! Audit records: append and list in order, the newest n, the refusals that write nothing, an
//! unknown dataset, a body in a newer format, and that the dataset's row is left alone.

use super::*;
use crate::audit::{AUDIT_FORMAT_VERSION, AuditRecord};

fn record(dataset_id: &str, operation_id: &str, recorded_at_ms: TimestampMs) -> AuditRecord {
    AuditRecord {
        format_version: AUDIT_FORMAT_VERSION,
        dataset_id: dataset_id.to_string(),
        operation_id: operation_id.to_string(),
        recorded_at_ms,
        mode: "roll-forward".to_string(),
        policy_digest: "sha256:policy".to_string(),
        semantics_revision: 1,
        inputs_hash: "sha256:inputs".to_string(),
        decision: json!({ "action": "publish", "splits": ["a"] }),
        outcome: json!({ "published": 1 }),
        inputs: None,
        principal: None,
    }
}

async fn audit(catalog: &PostgresCatalog, dataset_id: &str) -> Vec<AuditRecord> {
    catalog
        .list_audit(dataset_id, None)
        .await
        .expect("list audit records")
}

fn operation_ids(records: &[AuditRecord]) -> Vec<String> {
    records
        .iter()
        .map(|record| record.operation_id.clone())
        .collect()
}

fn is_dataset_not_found(error: &MendError, dataset_id: &str) -> bool {
    matches!(
        error,
        MendError::NotFound { kind: EntityKind::Dataset, ids } if *ids == [dataset_id]
    )
}

/// How many audit rows the dataset has, counted behind the backend's back.
async fn row_count(catalog: &PostgresCatalog, dataset_id: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM audit WHERE dataset_id = $1")
        .bind(dataset_id)
        .fetch_one(&catalog.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn appended_records_are_listed_by_time_then_in_append_order() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    assert!(audit(&catalog, &dataset_id).await.is_empty());

    // Within a batch and across batches, records of the same millisecond keep the order in
    // which they were given, whatever their operation ids; an earlier time lists first.
    let first = [
        record(&dataset_id, "op-c", 2_000),
        record(&dataset_id, "op-a", 2_000),
        record(&dataset_id, "op-late", 5_000),
    ];
    catalog.append_audit(&dataset_id, &first).await.unwrap();
    let second = [
        record(&dataset_id, "op-b", 2_000),
        record(&dataset_id, "op-early", 1_000),
    ];
    catalog.append_audit(&dataset_id, &second).await.unwrap();

    let listed = audit(&catalog, &dataset_id).await;
    assert_eq!(
        operation_ids(&listed),
        ids(&["op-early", "op-c", "op-a", "op-b", "op-late"])
    );
    // Each record comes back whole.
    assert_eq!(listed[1], first[0]);
    assert_eq!(listed[0], second[1]);

    // Another dataset's trail is its own.
    let other_dataset_id = new_dataset(&catalog).await;
    assert!(audit(&catalog, &other_dataset_id).await.is_empty());
}

#[tokio::test]
async fn a_limit_lists_the_newest_records_oldest_first() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let records: Vec<AuditRecord> = [("op-1", 1_000), ("op-2", 3_000), ("op-3", 3_000)]
        .into_iter()
        .chain([("op-4", 2_000), ("op-5", 4_000)])
        .map(|(operation_id, at)| record(&dataset_id, operation_id, at))
        .collect();
    catalog.append_audit(&dataset_id, &records).await.unwrap();

    let newest = |limit| {
        let catalog = &catalog;
        let dataset_id = &dataset_id;
        async move { operation_ids(&catalog.list_audit(dataset_id, Some(limit)).await.unwrap()) }
    };
    assert_eq!(newest(3).await, ids(&["op-2", "op-3", "op-5"]));
    assert_eq!(newest(1).await, ids(&["op-5"]));
    assert!(newest(0).await.is_empty());
    let all = ids(&["op-1", "op-4", "op-2", "op-3", "op-5"]);
    assert_eq!(newest(5).await, all);
    assert_eq!(newest(usize::MAX).await, all);
    assert_eq!(operation_ids(&audit(&catalog, &dataset_id).await), all);
}

#[tokio::test]
async fn a_batch_with_a_foreign_or_unknown_record_is_refused_whole() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let other_dataset_id = new_dataset(&catalog).await;
    let stored = record(&dataset_id, "op-1", 1_000);
    catalog
        .append_audit(&dataset_id, std::slice::from_ref(&stored))
        .await
        .unwrap();

    let foreign = [
        record(&dataset_id, "op-2", 2_000),
        record(&other_dataset_id, "op-3", 2_000),
    ];
    let refused = catalog
        .append_audit(&dataset_id, &foreign)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, MendError::InvalidArgument { message } if message.contains(&other_dataset_id)),
        "{refused:?}"
    );

    for format_version in [0, AUDIT_FORMAT_VERSION + 1] {
        let batch = [
            record(&dataset_id, "op-2", 2_000),
            AuditRecord {
                format_version,
                ..record(&dataset_id, "op-3", 2_000)
            },
        ];
        let refused = catalog.append_audit(&dataset_id, &batch).await.unwrap_err();
        assert!(
            matches!(refused, MendError::InvalidArgument { .. }),
            "{refused:?}"
        );
    }
    assert_eq!(audit(&catalog, &dataset_id).await, [stored]);
    assert_eq!(row_count(&catalog, &other_dataset_id).await, 0);
}

#[tokio::test]
async fn audit_of_an_unknown_dataset_is_not_found() {
    let catalog = catalog().await;
    let dataset_id = unique_id("no-such-dataset");
    let appended = catalog
        .append_audit(&dataset_id, &[record(&dataset_id, "op-1", 1_000)])
        .await
        .unwrap_err();
    assert!(is_dataset_not_found(&appended, &dataset_id), "{appended:?}");
    for limit in [None, Some(10)] {
        let listed = catalog.list_audit(&dataset_id, limit).await.unwrap_err();
        assert!(is_dataset_not_found(&listed, &dataset_id), "{listed:?}");
    }
}

#[tokio::test]
async fn an_empty_append_writes_nothing() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    catalog.append_audit(&dataset_id, &[]).await.unwrap();
    assert_eq!(row_count(&catalog, &dataset_id).await, 0);
    assert!(audit(&catalog, &dataset_id).await.is_empty());
}

#[tokio::test]
async fn a_record_in_a_newer_format_is_refused_when_listed() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    catalog
        .append_audit(&dataset_id, &[record(&dataset_id, "op-1", 1_000)])
        .await
        .unwrap();

    // As a newer mend would write it: a higher version and a field this host does not know.
    let mut body = serde_json::to_value(record(&dataset_id, "op-2", 2_000)).unwrap();
    body["format_version"] = json!(AUDIT_FORMAT_VERSION + 1);
    body["some_future_field"] = json!({ "meaning": "unknown" });
    sqlx::query(
        "INSERT INTO audit (dataset_id, operation_id, recorded_at_ms, format_version, body) \
         VALUES ($1, 'op-2', 2000, $2, $3)",
    )
    .bind(&dataset_id)
    .bind(i32::try_from(AUDIT_FORMAT_VERSION + 1).unwrap())
    .bind(sqlx::types::Json(&body))
    .execute(&catalog.pool)
    .await
    .unwrap();

    let error = catalog.list_audit(&dataset_id, None).await.unwrap_err();
    assert!(
        matches!(&error, MendError::Corrupt { message } if message.contains("newer mend")),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_unreadable_record_is_corrupt() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    sqlx::query(
        "INSERT INTO audit (dataset_id, operation_id, recorded_at_ms, format_version, body) \
         VALUES ($1, 'op-1', 1000, 1, '{\"format_version\": 1, \"mode\": 7}')",
    )
    .bind(&dataset_id)
    .execute(&catalog.pool)
    .await
    .unwrap();
    let error = catalog.list_audit(&dataset_id, None).await.unwrap_err();
    assert!(matches!(error, MendError::Corrupt { .. }), "{error:?}");
}

#[tokio::test]
async fn audit_leaves_the_dataset_alone() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let before = catalog.dataset(&dataset_id).await.unwrap();
    catalog
        .append_audit(&dataset_id, &[record(&dataset_id, "op-1", 2_000)])
        .await
        .unwrap();
    audit(&catalog, &dataset_id).await;
    assert_eq!(catalog.dataset(&dataset_id).await.unwrap(), before);
}

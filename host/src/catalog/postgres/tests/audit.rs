//! Audit records: append and list in order, the newest n, the refusals that write nothing, an
//! unknown dataset, a body in a newer format, and that the dataset's row is left alone; an
//! append as one row per batch of 1,000, rows of one record (from before batches) read in order
//! with batches, a batch row that disagrees with its columns; and the newest records of the
//! whole catalog from one query that reads at most as many rows as it is asked for records, on
//! a database of its own (a shared one holds every other test's rows).

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

/// A database of its own on the test server, for a test of the whole catalog's audit trail:
/// in the shared database every other test's rows are among the newest. Dropped by
/// [`OwnDatabase::drop`] at the test's end.
struct OwnDatabase {
    admin: sqlx::PgPool,
    name: String,
}

async fn own_catalog() -> (PostgresCatalog, OwnDatabase) {
    let server = std::env::var("MEND_TEST_DATABASE_URL")
        .expect("MEND_TEST_DATABASE_URL is not set: run under scripts/with-postgres");
    let admin = sqlx::PgPool::connect(&server).await.unwrap();
    let name = format!("mend_audit_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .unwrap();
    let mut url = url::Url::parse(&server).unwrap();
    url.set_path(&format!("/{name}"));
    let catalog = PostgresCatalog::connect_with(url.as_str(), test_options())
        .await
        .unwrap();
    (catalog, OwnDatabase { admin, name })
}

impl OwnDatabase {
    async fn drop(self, catalog: PostgresCatalog) {
        catalog.pool.close().await;
        sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .execute(&self.admin)
            .await
            .unwrap();
    }
}

/// A row of one record as mends before batches wrote it (migration 0003).
async fn insert_single_row(catalog: &PostgresCatalog, record: &AuditRecord) {
    sqlx::query(
        "INSERT INTO audit (dataset_id, operation_id, recorded_at_ms, format_version, body) \
         VALUES ($1, $2, $3, 1, $4)",
    )
    .bind(&record.dataset_id)
    .bind(&record.operation_id)
    .bind(record.recorded_at_ms)
    .bind(sqlx::types::Json(record))
    .execute(&catalog.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn an_append_is_one_row_per_batch_of_1000_records() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    // Oldest last in each batch: a row's times are its records' newest and oldest, whatever
    // their order.
    let records: Vec<AuditRecord> = (0..2_500)
        .map(|i| record(&dataset_id, &format!("op-{i}"), 10_000 - i))
        .collect();
    catalog.append_audit(&dataset_id, &records).await.unwrap();

    let rows: Vec<(i64, Option<i64>, i32, i32)> = sqlx::query_as(
        "SELECT recorded_at_ms, oldest_recorded_at_ms, record_count, format_version \
         FROM audit WHERE dataset_id = $1 ORDER BY seq",
    )
    .bind(&dataset_id)
    .fetch_all(&catalog.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            (10_000, Some(9_001), 1_000, 2),
            (9_000, Some(8_001), 1_000, 2),
            (8_000, Some(7_501), 500, 2)
        ]
    );
    let mut oldest_first = records.clone();
    oldest_first.reverse();
    assert_eq!(audit(&catalog, &dataset_id).await, oldest_first);
    assert_eq!(
        catalog.list_audit(&dataset_id, Some(1_200)).await.unwrap(),
        oldest_first[1_300..]
    );
}

#[tokio::test]
async fn rows_of_one_record_from_before_batches_are_read_in_order_with_batches() {
    let (catalog, database) = own_catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let other_dataset_id = new_dataset(&catalog).await;
    // In order of writing: an old row, a batch, two old rows, one of them in the same
    // millisecond as the batch's newest record and so after it, and another dataset's batch.
    insert_single_row(&catalog, &record(&dataset_id, "old-1", 1_000)).await;
    let batch = [
        record(&dataset_id, "batch-1", 1_500),
        record(&dataset_id, "batch-2", 3_000),
    ];
    catalog.append_audit(&dataset_id, &batch).await.unwrap();
    insert_single_row(&catalog, &record(&dataset_id, "old-2", 2_000)).await;
    insert_single_row(&catalog, &record(&dataset_id, "old-3", 3_000)).await;
    catalog
        .append_audit(
            &other_dataset_id,
            &[record(&other_dataset_id, "other", 2_500)],
        )
        .await
        .unwrap();

    let in_order = ["old-1", "batch-1", "old-2", "batch-2", "old-3"];
    assert_eq!(
        operation_ids(&audit(&catalog, &dataset_id).await),
        ids(&in_order)
    );
    for limit in 1..=6 {
        let newest = catalog.list_audit(&dataset_id, Some(limit)).await.unwrap();
        let expected = &in_order[in_order.len().saturating_sub(limit)..];
        assert_eq!(operation_ids(&newest), ids(expected), "limit {limit}");
    }
    // The whole catalog: the other dataset's record among them.
    let everything = ["old-1", "batch-1", "old-2", "other", "batch-2", "old-3"];
    for limit in [1, 2, 3, 4, 6, 100] {
        let recent = catalog.list_recent_audit(limit).await.unwrap();
        assert!(recent.unreadable.is_empty());
        let expected = &everything[everything.len().saturating_sub(limit)..];
        assert_eq!(
            operation_ids(&recent.records),
            ids(expected),
            "limit {limit}"
        );
    }
    assert!(
        catalog
            .list_recent_audit(0)
            .await
            .unwrap()
            .records
            .is_empty()
    );
    database.drop(catalog).await;
}

#[tokio::test]
async fn a_batch_row_that_disagrees_with_its_columns_is_corrupt() {
    let catalog = catalog().await;
    let batch = |dataset_id: &str| {
        crate::audit::encode_batch(&[
            record(dataset_id, "op-1", 1_000),
            record(dataset_id, "op-2", 2_000),
        ])
    };
    let newer = {
        let mut body: serde_json::Value = serde_json::from_slice(&batch("x")).unwrap();
        body["format_version"] = json!(3);
        serde_json::to_vec(&body).unwrap()
    };
    /// A batch row as written behind the backend's back, and what listing it must say.
    struct Disagreeing {
        record_count: i32,
        newest_ms: i64,
        oldest_ms: i64,
        /// `None`: the two records of the row's own dataset, well formed.
        body: Option<Vec<u8>>,
        says: &'static str,
    }
    let row = |record_count, newest_ms, body, says| Disagreeing {
        record_count,
        newest_ms,
        oldest_ms: 1_000,
        body,
        says,
    };
    let cases = [
        row(3, 2_000, None, "holds 2"),
        row(2, 1_500, None, "recorded from 1000 to 1500"),
        row(2, 2_000, Some(newer), "newer mend"),
        row(2, 2_000, Some(b"[1, 2".to_vec()), "unreadable"),
    ];
    for case in cases {
        let dataset_id = new_dataset(&catalog).await;
        sqlx::query(
            "INSERT INTO audit (dataset_id, format_version, recorded_at_ms, \
             oldest_recorded_at_ms, record_count, records) VALUES ($1, 2, $2, $3, $4, $5)",
        )
        .bind(&dataset_id)
        .bind(case.newest_ms)
        .bind(case.oldest_ms)
        .bind(case.record_count)
        .bind(case.body.unwrap_or_else(|| batch(&dataset_id)))
        .execute(&catalog.pool)
        .await
        .unwrap();
        let error = catalog.list_audit(&dataset_id, None).await.unwrap_err();
        assert!(
            matches!(&error, MendError::Corrupt { message } if message.contains(case.says)),
            "{}: {error:?}",
            case.says
        );
    }
    // A row holds exactly one body.
    let dataset_id = new_dataset(&catalog).await;
    let neither = sqlx::query(
        "INSERT INTO audit (dataset_id, format_version, recorded_at_ms) VALUES ($1, 2, 1000)",
    )
    .bind(&dataset_id)
    .execute(&catalog.pool)
    .await
    .unwrap_err();
    assert!(
        neither.to_string().contains("audit_holds_one_body"),
        "{neither}"
    );
}

/// Where the plan of `audit_list_recent.sql` reads the `audit` table, and the rows it read
/// there: (index or table, rows), from `EXPLAIN ANALYZE`.
async fn audit_scans(catalog: &PostgresCatalog, limit: i64) -> Vec<(String, i64)> {
    let explain = format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {}",
        super::super::sql::AUDIT_LIST_RECENT
    );
    let (plan,): (serde_json::Value,) = sqlx::query_as(&explain)
        .bind(limit)
        .fetch_one(&catalog.pool)
        .await
        .unwrap();
    fn walk(node: &serde_json::Value, scans: &mut Vec<(String, i64)>) {
        if node["Relation Name"] == "audit" {
            let by = node["Index Name"].as_str().unwrap_or("the table");
            let rows =
                node["Actual Rows"].as_i64().unwrap() * node["Actual Loops"].as_i64().unwrap();
            scans.push((
                format!("{} by {by}", node["Node Type"].as_str().unwrap()),
                rows,
            ));
        }
        for child in node["Plans"].as_array().into_iter().flatten() {
            walk(child, scans);
        }
    }
    let mut scans = Vec::new();
    walk(&plan[0]["Plan"], &mut scans);
    scans
}

#[tokio::test]
async fn the_newest_records_of_the_catalog_are_one_query_over_as_many_rows_as_records() {
    let (catalog, database) = own_catalog().await;
    // 200 datasets of 10 rows of one record each (the `k`th of them, `op-{d}-{i}` with
    // `k = 200 i + d`, at 1,000,000 + 10 k), and one batch of 50 newer than all of them.
    let mut datasets = Vec::new();
    for _ in 0..200 {
        datasets.push(new_dataset(&catalog).await);
    }
    for i in 0..10 {
        for (d, dataset_id) in datasets.iter().enumerate() {
            let at = 1_000_000 + (i * 200 + d as i64) * 10;
            let appended = record(dataset_id, &format!("op-{d}-{i}"), at);
            catalog.append_audit(dataset_id, &[appended]).await.unwrap();
        }
    }
    let batch: Vec<AuditRecord> = (0..50)
        .map(|i| record(&datasets[7], &format!("batch-{i}"), 2_000_000 + i))
        .collect();
    catalog.append_audit(&datasets[7], &batch).await.unwrap();
    sqlx::query("ANALYZE audit")
        .execute(&catalog.pool)
        .await
        .unwrap();
    // The newest `n` rows of one record, oldest first.
    let singles = |n: usize| -> Vec<String> {
        (2_000 - n..2_000)
            .map(|k| format!("op-{}-{}", k % 200, k / 200))
            .collect()
    };

    // Inside the batch: its row alone is read whole; the walk reads the index only.
    let recent = catalog.list_recent_audit(10).await.unwrap();
    assert_eq!(recent.records, batch[40..]);
    let scans = audit_scans(&catalog, 10).await;
    println!("list_recent_audit(10) reads {scans:?}");
    assert_scans_within(&scans, 10, 1);
    // Past the batch, into rows of one record: the batch's 50 and the newest 10 others.
    let recent = catalog.list_recent_audit(60).await.unwrap();
    assert_eq!(operation_ids(&recent.records[..10]), singles(10));
    assert_eq!(recent.records[10..], batch);
    let scans = audit_scans(&catalog, 60).await;
    println!("list_recent_audit(60) reads {scans:?}");
    assert_scans_within(&scans, 60, 11);
    // Half the table: the planner may read it whole, and the answer is the same.
    let recent = catalog.list_recent_audit(1_025).await.unwrap();
    assert_eq!(operation_ids(&recent.records[..975]), singles(975));
    assert_eq!(recent.records[975..], batch);
    database.drop(catalog).await;
}

/// The query walked the index by time, reading at most `limit` entries and the one after them
/// (the window reads a row ahead, to see where its frame ends), and read `bodies` rows by their
/// primary key: no scan of the table.
fn assert_scans_within(scans: &[(String, i64)], limit: i64, bodies: i64) {
    assert_eq!(scans.len(), 2, "{scans:?}");
    assert!(
        scans[0].0.ends_with("by audit_by_time") && scans[0].1 <= limit + 1,
        "{scans:?}"
    );
    assert_eq!(
        (scans[1].0.as_str(), scans[1].1),
        ("Index Scan by audit_pkey", bodies),
        "{scans:?}"
    );
}

/// Migration 0010: on a server with lz4, audit batches are compressed with it (and a large
/// batch stored so is read back whole); on one without, the column keeps the default.
#[tokio::test]
async fn audit_batches_are_compressed_with_lz4_where_the_server_has_it() {
    let catalog = catalog().await;
    let mut connection = catalog.pool.acquire().await.unwrap();
    let has_lz4 = sqlx::query("SET default_toast_compression = lz4")
        .execute(&mut *connection)
        .await
        .is_ok();
    drop(connection);
    let method: String = sqlx::query_scalar(
        "SELECT attcompression::text FROM pg_attribute \
         WHERE attrelid = 'audit'::regclass AND attname = 'records'",
    )
    .fetch_one(&catalog.pool)
    .await
    .unwrap();
    assert_eq!(
        method,
        if has_lz4 { "l" } else { "" },
        "lz4 here: {has_lz4}"
    );

    // A batch large enough to be compressed out of line comes back whole.
    let dataset_id = new_dataset(&catalog).await;
    let records: Vec<AuditRecord> = (0..1_000)
        .map(|i| record(&dataset_id, &format!("op-{i:04}"), 1_000 + i))
        .collect();
    catalog.append_audit(&dataset_id, &records).await.unwrap();
    assert_eq!(audit(&catalog, &dataset_id).await, records);
    if has_lz4 {
        let stored: String = sqlx::query_scalar(
            "SELECT pg_column_compression(records) FROM audit WHERE dataset_id = $1",
        )
        .bind(&dataset_id)
        .fetch_one(&catalog.pool)
        .await
        .unwrap();
        assert_eq!(stored, "lz4");
    }
    println!("audit batches: lz4 on this server {has_lz4}; 1,000 records read back whole");
}

//! Audit records: an append is one row per batch of up to [`RECORDS_PER_BATCH`] records (one
//! row for a recovery sweep's batch), appended and never rewritten (migration 0008 says why,
//! and why the batch is `bytea`). Rows of one record each, as mends before batches wrote them
//! (migration 0003), are read with the batches, in order.
//!
//! An append is one statement on the pool, atomic by itself, so it runs in no transaction and
//! is not retried here: a statement that may have landed fails as `Unavailable`, and the caller
//! decides. Nothing here locks the dataset's row or moves its manifest version; the audit trail
//! is not part of the published view.
//!
//! A listing of the newest records, of one dataset or of the whole catalog
//! ([`recent`]), is one query that chooses the rows that can hold them by their times and
//! counts ([`crate::catalog::recent_audit`]); the host decodes those rows' records, sorts them
//! by recorded time, then `seq`, then place in the row, and keeps the newest.
//!
//! Which decisions get recorded, and what a record says, is the engine's business; this module
//! stores what it is given in this host's format and refuses to read a newer one.

use sqlx::PgPool;
use sqlx::postgres::PgRow;

use crate::audit::{
    AuditRecord, BATCH_FORMAT, RECORDS_PER_BATCH, check_append, decode_batch, encode_batch,
    parse_stored,
};
use crate::catalog::recent_audit::{RecentAudit, newest};
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

use super::errors::database_error;
use super::rows::column;
use super::sql;

/// Where a record sorts: recorded time, then its row's `seq`, then its place in the row.
type Order = (TimestampMs, i64, usize);

pub(super) async fn append(pool: &PgPool, dataset_id: &str, records: &[AuditRecord]) -> Result<()> {
    check_append(dataset_id, records)?;
    if records.is_empty() {
        return Ok(());
    }
    let batches: Vec<&[AuditRecord]> = records.chunks(RECORDS_PER_BATCH).collect();
    let (newest, oldest): (Vec<TimestampMs>, Vec<TimestampMs>) =
        batches.iter().map(|batch| newest_and_oldest(batch)).unzip();
    let counts: Vec<i32> = batches
        .iter()
        .map(|batch| i32::try_from(batch.len()).expect("a batch holds at most 1,000 records"))
        .collect();
    let bodies: Vec<Vec<u8>> = batches.iter().map(|batch| encode_batch(batch)).collect();
    sqlx::query(sql::AUDIT_INSERT)
        .bind(dataset_id)
        .bind(i32::try_from(BATCH_FORMAT).expect("format versions are small numbers"))
        .bind(&newest)
        .bind(&oldest)
        .bind(&counts)
        .bind(&bodies)
        .execute(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    Ok(())
}

pub(super) async fn list(
    pool: &PgPool,
    dataset_id: &str,
    limit: Option<usize>,
) -> Result<Vec<AuditRecord>> {
    let exists: bool = sqlx::query_scalar(sql::DATASET_EXISTS)
        .bind(dataset_id)
        .fetch_one(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    if !exists {
        return Err(MendError::dataset_not_found(dataset_id));
    }
    let rows = sqlx::query(sql::AUDIT_LIST)
        .bind(dataset_id)
        .bind(limit.map(row_limit))
        .fetch_all(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    let mut found = Vec::new();
    for row in &rows {
        found.extend(records_of(row)?);
    }
    Ok(newest(found, limit.unwrap_or(usize::MAX)))
}

/// The newest `limit` records of every dataset, in one query (`audit_list_recent.sql`). A row
/// that cannot be read is left out and its dataset named, once, in `unreadable`.
pub(super) async fn recent(pool: &PgPool, limit: usize) -> Result<RecentAudit> {
    if limit == 0 {
        return Ok(RecentAudit::default());
    }
    let rows = sqlx::query(sql::AUDIT_LIST_RECENT)
        .bind(row_limit(limit))
        .fetch_all(pool)
        .await
        .map_err(|error| database_error(error, "*"))?;
    let mut found = Vec::new();
    let mut unreadable: Vec<(String, String)> = Vec::new();
    for row in &rows {
        match records_of(row) {
            Ok(records) => found.extend(records),
            Err(MendError::Corrupt { message }) => {
                let dataset_id: String = column(row, "dataset_id")?;
                if !unreadable.iter().any(|(named, _)| *named == dataset_id) {
                    unreadable.push((dataset_id, message));
                }
            }
            Err(error) => return Err(error),
        }
    }
    unreadable.sort();
    Ok(RecentAudit {
        records: newest(found, limit),
        unreadable,
    })
}

/// The newest and the oldest recorded time of `batch` (not empty).
fn newest_and_oldest(batch: &[AuditRecord]) -> (TimestampMs, TimestampMs) {
    let times = batch.iter().map(|record| record.recorded_at_ms);
    let newest = times.clone().max().unwrap_or_default();
    (newest, times.min().unwrap_or(newest))
}

/// A limit as the query's `LIMIT` takes it: no catalog holds more than `i64::MAX` rows, so a
/// larger limit means all of them.
fn row_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The records of a row of `audit_list.sql` or `audit_list_recent.sql`, each with where it
/// sorts. The query chose the row by its columns, so a body that disagrees with them (another
/// dataset, a record outside the row's times, another count) is `Corrupt`: its records would
/// have been listed in the wrong place.
fn records_of(row: &PgRow) -> Result<Vec<(Order, AuditRecord)>> {
    let seq: i64 = column(row, "seq")?;
    let dataset_id: String = column(row, "dataset_id")?;
    let newest_ms: TimestampMs = column(row, "recorded_at_ms")?;
    let oldest_ms: Option<TimestampMs> = column(row, "oldest_recorded_at_ms")?;
    let record_count: i32 = column(row, "record_count")?;
    let batch: Option<Vec<u8>> = column(row, "records")?;
    let records = match batch {
        Some(batch) => decode_batch(
            &batch,
            &format!("audit batch {seq} of dataset {dataset_id}"),
        )?,
        None => vec![single_record(row, seq, &dataset_id)?],
    };
    let oldest_ms = oldest_ms.unwrap_or(newest_ms);
    let misplaced = records.iter().find(|record| {
        record.dataset_id != dataset_id
            || record.recorded_at_ms > newest_ms
            || record.recorded_at_ms < oldest_ms
    });
    if let Some(record) = misplaced {
        return Err(MendError::Corrupt {
            message: format!(
                "audit row {seq} of dataset {dataset_id}, of records recorded from {oldest_ms} to {newest_ms}, holds a record of operation {} of dataset {} recorded at {}",
                record.operation_id, record.dataset_id, record.recorded_at_ms
            ),
        });
    }
    if usize::try_from(record_count).ok() != Some(records.len()) {
        return Err(MendError::Corrupt {
            message: format!(
                "audit row {seq} of dataset {dataset_id} says it holds {record_count} records, but holds {}",
                records.len()
            ),
        });
    }
    Ok(records
        .into_iter()
        .enumerate()
        .map(|(index, record)| ((record.recorded_at_ms, seq, index), record))
        .collect())
}

/// The record of a row of one record, as mends before batches wrote them (format 1).
fn single_record(row: &PgRow, seq: i64, dataset_id: &str) -> Result<AuditRecord> {
    let operation_id: Option<String> = column(row, "operation_id")?;
    let body: Option<String> = column(row, "body")?;
    let operation_id = operation_id.unwrap_or_default();
    let what = format!("audit record of operation {operation_id} of dataset {dataset_id}");
    // The schema holds exactly one of `body` and `records` (`audit_holds_one_body`).
    let body = body.ok_or_else(|| MendError::Corrupt {
        message: format!("audit row {seq} of dataset {dataset_id} holds no record"),
    })?;
    let record = parse_stored(body.as_bytes(), &what)?;
    if record.operation_id != operation_id {
        return Err(MendError::Corrupt {
            message: format!("{what} holds a body of operation {}", record.operation_id),
        });
    }
    Ok(record)
}

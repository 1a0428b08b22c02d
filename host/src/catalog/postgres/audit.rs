//! Audit records: one row per record, appended in batches and never rewritten, holding the
//! whole record as JSON.
//!
//! An append is one statement on the pool, atomic by itself, so it runs in no transaction and
//! is not retried here: a statement that may have landed fails as `Unavailable`, and the caller
//! decides. Nothing here locks the dataset's row or moves its manifest version; the audit trail
//! is not part of the published view.
//!
//! Which decisions get recorded, and what a record says, is the engine's business; this module
//! stores what it is given in this host's format and refuses to read a newer one.

use sqlx::PgPool;
use sqlx::postgres::PgRow;

use crate::audit::{AUDIT_FORMAT_VERSION, AuditRecord, check_append, parse_stored};
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

use super::errors::database_error;
use super::rows::column;
use super::sql;

pub(super) async fn append(pool: &PgPool, dataset_id: &str, records: &[AuditRecord]) -> Result<()> {
    let format_version = own_format(dataset_id, records)?;
    if records.is_empty() {
        return Ok(());
    }
    let operation_ids: Vec<&str> = records.iter().map(|r| r.operation_id.as_str()).collect();
    let recorded_at: Vec<TimestampMs> = records.iter().map(|r| r.recorded_at_ms).collect();
    let bodies: Vec<String> = records
        .iter()
        .map(|record| {
            serde_json::to_string(record).expect("an audit record is plain data and serialises")
        })
        .collect();
    sqlx::query(sql::AUDIT_INSERT)
        .bind(dataset_id)
        .bind(format_version)
        .bind(&operation_ids)
        .bind(&recorded_at)
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
    // No dataset holds more than i64::MAX records, so a larger limit means all of them.
    let limit: Option<i64> = limit.map(|limit| i64::try_from(limit).unwrap_or(i64::MAX));
    let found = sqlx::query(sql::AUDIT_LIST)
        .bind(dataset_id)
        .bind(limit)
        .fetch_all(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    found.iter().map(|row| record(row, dataset_id)).collect()
}

/// The format version as the `INT` column stores it, once the batch is checked.
fn own_format(dataset_id: &str, records: &[AuditRecord]) -> Result<i32> {
    check_append(dataset_id, records)?;
    Ok(i32::try_from(AUDIT_FORMAT_VERSION).expect("format versions are small numbers"))
}

/// Decodes a row of `audit_list.sql`.
fn record(row: &PgRow, dataset_id: &str) -> Result<AuditRecord> {
    let operation_id: String = column(row, "operation_id")?;
    let recorded_at_ms: TimestampMs = column(row, "recorded_at_ms")?;
    let body: String = column(row, "body")?;
    let record = parse_stored(
        body.as_bytes(),
        &format!("audit record of operation {operation_id} of dataset {dataset_id}"),
    )?;
    // The listing selects and orders by the columns; a body that disagrees with them would be
    // listed under the wrong dataset or in the wrong place.
    if record.dataset_id != dataset_id
        || record.operation_id != operation_id
        || record.recorded_at_ms != recorded_at_ms
    {
        return Err(MendError::Corrupt {
            message: format!(
                "audit record of operation {operation_id} of dataset {dataset_id} recorded at \
                 {recorded_at_ms} holds a body of operation {} of dataset {} recorded at {}",
                record.operation_id, record.dataset_id, record.recorded_at_ms
            ),
        });
    }
    Ok(record)
}

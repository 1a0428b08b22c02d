//! Recorded requests ([`crate::catalog::recorded`]): one row per idempotency key, written in
//! the transaction of the request's effect.
//!
//! A keyed request first takes a transaction-scoped advisory lock on its key, so that two
//! copies sent at once run one after the other: the second finds the first's record and
//! answers it. Requests with other keys, or none, are not held up.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgPool};

use crate::catalog::RecordedRequest;
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

use super::errors::{StepError, database_error};
use super::rows::column;
use super::sql;

/// Locks every key of `keys` for the rest of the transaction, in key order (so that two
/// transactions locking overlapping keys queue instead of deadlocking), then reads their
/// records: two statements whatever the number of keys (the read is a statement of its own,
/// so its snapshot sees every record committed before the locks were granted). Empty `keys`
/// cost nothing.
pub(super) async fn lock_and_find_all(
    conn: &mut PgConnection,
    dataset_id: &str,
    keys: &[&str],
) -> Result<BTreeMap<String, RecordedRequest>, StepError> {
    let keys: BTreeSet<&str> = keys.iter().copied().collect();
    let keys: Vec<&str> = keys.into_iter().collect();
    let mut found = BTreeMap::new();
    if keys.is_empty() {
        return Ok(found);
    }
    sqlx::query(sql::RECORDED_LOCK_KEYS)
        .bind(dataset_id)
        .bind(&keys)
        .execute(&mut *conn)
        .await?;
    let rows = sqlx::query(sql::RECORDED_SELECT_KEYS)
        .bind(dataset_id)
        .bind(&keys)
        .fetch_all(&mut *conn)
        .await?;
    for row in &rows {
        let record = record(row).map_err(StepError::Failed)?;
        found.insert(record.key.clone(), record);
    }
    Ok(found)
}

/// Locks `key` for the rest of the transaction, then reads its record.
pub(super) async fn lock_and_find(
    conn: &mut PgConnection,
    dataset_id: &str,
    key: &str,
) -> Result<Option<RecordedRequest>, StepError> {
    sqlx::query(sql::RECORDED_LOCK_KEY)
        .bind(dataset_id)
        .bind(key)
        .execute(&mut *conn)
        .await?;
    let found = sqlx::query(sql::RECORDED_SELECT)
        .bind(dataset_id)
        .bind(key)
        .fetch_optional(&mut *conn)
        .await?;
    found
        .as_ref()
        .map(record)
        .transpose()
        .map_err(StepError::Failed)
}

pub(super) async fn insert(
    conn: &mut PgConnection,
    dataset_id: &str,
    record: &RecordedRequest,
) -> Result<(), StepError> {
    sqlx::query(sql::RECORDED_INSERT)
        .bind(dataset_id)
        .bind(&record.key)
        .bind(&record.request_digest)
        .bind(record.result.to_string())
        .bind(record.recorded_at_ms)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Inserts `record` unless its key is recorded: put-if-absent, under the key's lock like
/// every keyed step. Returns the record kept.
pub(super) async fn keep(
    conn: &mut PgConnection,
    dataset_id: &str,
    record: &RecordedRequest,
) -> Result<RecordedRequest, StepError> {
    if let Some(found) = lock_and_find(conn, dataset_id, &record.key).await? {
        return Ok(found);
    }
    insert(conn, dataset_id, record).await?;
    Ok(record.clone())
}

/// The record of `key`, outside any transaction; `NotFound` for an unknown dataset.
pub(super) async fn get(
    pool: &PgPool,
    dataset_id: &str,
    key: &str,
) -> Result<Option<RecordedRequest>> {
    let found = sqlx::query(sql::RECORDED_SELECT)
        .bind(dataset_id)
        .bind(key)
        .fetch_optional(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    match found {
        Some(row) => record(&row).map(Some),
        None => {
            require_dataset(pool, dataset_id).await?;
            Ok(None)
        }
    }
}

pub(super) async fn forget(
    pool: &PgPool,
    dataset_id: &str,
    recorded_before_ms: TimestampMs,
) -> Result<usize> {
    require_dataset(pool, dataset_id).await?;
    let done = sqlx::query(sql::RECORDED_FORGET)
        .bind(dataset_id)
        .bind(recorded_before_ms)
        .execute(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    Ok(done.rows_affected() as usize)
}

pub(super) fn record(row: &PgRow) -> Result<RecordedRequest> {
    let result: String = column(row, "result")?;
    Ok(RecordedRequest {
        key: column(row, "key")?,
        request_digest: column(row, "request_digest")?,
        result: serde_json::from_str(&result).map_err(|error| MendError::Corrupt {
            message: format!("a recorded request's result is not JSON: {error}"),
        })?,
        recorded_at_ms: column(row, "recorded_at_ms")?,
    })
}

pub(super) async fn require_dataset(pool: &PgPool, dataset_id: &str) -> Result<()> {
    let exists: bool = sqlx::query_scalar(sql::DATASET_EXISTS)
        .bind(dataset_id)
        .fetch_one(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    if exists {
        Ok(())
    } else {
        Err(MendError::dataset_not_found(dataset_id))
    }
}

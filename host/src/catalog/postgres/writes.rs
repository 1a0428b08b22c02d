//! The audit trail of writes ([`crate::catalog::write_audit`]): a row of `write_audit` per
//! write, inserted in the transaction of the write (migration 0012).

use sqlx::{PgConnection, PgPool};

use crate::catalog::write_audit::{self, PendingWrite, WriteRecord};
use crate::error::Result;
use crate::model::TimestampMs;

use super::errors::{StepError, database_error};
use super::recorded::require_dataset;
use super::sql;

/// Records that the step `write` stands for answered `answer` at `at_ms`, in the transaction
/// of `conn`; nothing without a `write` (a step outside any scope).
pub(super) async fn insert(
    conn: &mut PgConnection,
    write: Option<&PendingWrite>,
    answer: &impl serde::Serialize,
    at_ms: TimestampMs,
) -> Result<(), StepError> {
    let Some(write) = write else {
        return Ok(());
    };
    let record = write.answered(answer, at_ms);
    sqlx::query(sql::WRITE_AUDIT_INSERT)
        .bind(&record.dataset_id)
        .bind(record.recorded_at_ms)
        .bind(write_audit::encode(&record))
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Inserts `record` on its own ([`Catalog::record_write`](crate::catalog::Catalog::record_write)).
pub(super) async fn insert_alone(pool: &PgPool, record: &WriteRecord) -> Result<()> {
    write_audit::check_format(record.format_version, "a write record")?;
    sqlx::query(sql::WRITE_AUDIT_INSERT)
        .bind(&record.dataset_id)
        .bind(record.recorded_at_ms)
        .bind(write_audit::encode(record))
        .execute(pool)
        .await
        .map_err(|error| database_error(error, &record.dataset_id))?;
    Ok(())
}

/// The dataset's newest `limit` write records (all without one), oldest first.
pub(super) async fn list(
    pool: &PgPool,
    dataset_id: &str,
    limit: Option<usize>,
) -> Result<Vec<WriteRecord>> {
    require_dataset(pool, dataset_id).await?;
    let limit = limit.map(|limit| i64::try_from(limit).unwrap_or(i64::MAX));
    let bodies: Vec<Vec<u8>> = sqlx::query_scalar(sql::WRITE_AUDIT_LIST)
        .bind(dataset_id)
        .bind(limit)
        .fetch_all(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    let mut records = bodies
        .iter()
        .map(|body| write_audit::decode(body, &format!("a write record of dataset {dataset_id}")))
        .collect::<Result<Vec<_>>>()?;
    records.reverse();
    Ok(records)
}

//! A recovery sweep's batch of settlements ([`Catalog::settle_intents`]) as one transaction
//! of a fixed number of statements, whatever the batch's size: the keys' advisory locks and
//! their records, the dataset's lock, the rows and the intents the batch names (locked), then
//! one statement per kind of write (publish, mark replaced, mark abandoned, record the keys,
//! delete the intents, move the dataset on). What each settlement does is decided in memory
//! on what was read ([`crate::catalog::settle::plan`]), the same code as the object-store
//! backend's.
//!
//! Locks are taken in the order every other step takes them: keys (sorted), the dataset row,
//! split rows by id; then the intents, which no other step locks together with anything.
//!
//! [`Catalog::settle_intents`]: crate::catalog::Catalog::settle_intents

use std::collections::{BTreeSet, HashMap};

use sqlx::PgConnection;
use sqlx::types::Json;

use crate::catalog::SettleValidator;
use crate::catalog::settle::{self, SeenIntent, SettleView, Settled, Settlement};
use crate::error::MendError;
use crate::model::{SplitState, TimestampMs};

use super::errors::StepError;
use super::queries::{self, RowLock};
use super::rows::column;
use super::{intents, recorded, sql};

pub(super) async fn settle(
    conn: &mut PgConnection,
    dataset_id: &str,
    settlements: &[Settlement],
    validate: &SettleValidator<'_>,
    now_ms: TimestampMs,
) -> Result<Vec<Settled>, StepError> {
    let view = read(conn, dataset_id, settlements).await?;
    let planned = settle::plan(&view, settlements, validate, now_ms)?;
    let changed = |wanted: &[String], got: &BTreeSet<String>| -> Result<(), StepError> {
        let unchanged = queries::missing(wanted, got);
        if unchanged.is_empty() {
            return Ok(());
        }
        // The rows were locked when they were read: only a bug gets here.
        Err(
            MendError::failed_precondition("splits changed state while being settled", unchanged)
                .into(),
        )
    };
    if !planned.published.is_empty() {
        let published =
            queries::publish_staged(conn, dataset_id, &planned.published, now_ms).await?;
        changed(&planned.published, &published)?;
    }
    let marks = [
        (&planned.replaced, SplitState::Published),
        (&planned.abandoned_rows, SplitState::Staged),
    ];
    for (ids, from) in marks {
        if !ids.is_empty() {
            let marked = queries::mark(conn, dataset_id, ids, &[from], now_ms).await?;
            changed(ids, &marked)?;
        }
    }
    if !planned.records.is_empty() {
        let keys: Vec<&str> = planned.records.iter().map(|r| r.key.as_str()).collect();
        let digests: Vec<&str> = planned
            .records
            .iter()
            .map(|r| r.request_digest.as_str())
            .collect();
        let results: Vec<String> = planned
            .records
            .iter()
            .map(|r| r.result.to_string())
            .collect();
        let times: Vec<TimestampMs> = planned.records.iter().map(|r| r.recorded_at_ms).collect();
        sqlx::query(sql::RECORDED_INSERT_BATCH)
            .bind(dataset_id)
            .bind(&keys)
            .bind(&digests)
            .bind(&results)
            .bind(&times)
            .execute(&mut *conn)
            .await?;
    }
    if !planned.deleted_intents.is_empty() {
        let deleted: Vec<String> = sqlx::query_scalar(sql::INTENT_DELETE_BATCH)
            .bind(dataset_id)
            .bind(&planned.deleted_intents)
            .fetch_all(&mut *conn)
            .await?;
        if deleted.len() != planned.deleted_intents.len() {
            // Locked when read: only a bug gets here.
            return Err(StepError::corrupt(format!(
                "{} of {} intents of dataset {dataset_id} vanished while being settled",
                planned.deleted_intents.len() - deleted.len(),
                planned.deleted_intents.len()
            )));
        }
    }
    if let Some(dataset) = &planned.dataset {
        let manifest_version = i64::try_from(dataset.manifest_version).map_err(|_| {
            StepError::corrupt("the manifest version left the range a catalog holds")
        })?;
        sqlx::query(sql::DATASET_SETTLE)
            .bind(dataset_id)
            .bind(Json(&dataset.checkpoint))
            .bind(manifest_version)
            .bind(dataset.updated_at_ms)
            .execute(&mut *conn)
            .await?;
    }
    Ok(planned.outputs)
}

/// Everything the batch decides on, locked: the keys' records, the dataset, the rows and the
/// intents it names.
async fn read(
    conn: &mut PgConnection,
    dataset_id: &str,
    settlements: &[Settlement],
) -> Result<SettleView, StepError> {
    let keys: Vec<&str> = settlements
        .iter()
        .filter_map(Settlement::record_key)
        .collect();
    let mut view = SettleView::default();
    view.recorded
        .extend(recorded::lock_and_find_all(conn, dataset_id, &keys).await?);
    view.dataset = Some(queries::lock_dataset(conn, dataset_id).await?);

    let split_ids: BTreeSet<&String> = settlements.iter().flat_map(Settlement::split_ids).collect();
    let split_ids: Vec<String> = split_ids.into_iter().cloned().collect();
    if !split_ids.is_empty() {
        let rows = queries::split_states(conn, dataset_id, &split_ids, RowLock::ForUpdate).await?;
        view.rows = rows
            .into_iter()
            .map(|row| (row.split_id, row.state))
            .collect();
    }

    let mut operations: Vec<&str> = settlements.iter().map(Settlement::operation_id).collect();
    operations.sort_unstable();
    let abandoning: Vec<&str> = settlements
        .iter()
        .filter(|settlement| matches!(settlement, Settlement::Abandon { .. }))
        .map(Settlement::operation_id)
        .collect();
    if !operations.is_empty() {
        let found = sqlx::query(sql::INTENT_SELECT_FOR_SETTLE)
            .bind(dataset_id)
            .bind(&operations)
            .bind(&abandoning)
            .fetch_all(&mut *conn)
            .await?;
        let mut seen = HashMap::with_capacity(found.len());
        for row in &found {
            let operation_id: String = column(row, "operation_id")?;
            let phase = intents::stored_phase(row, &operation_id)?;
            let wanted: bool = column(row, "wanted")?;
            let intent = if wanted {
                Some(intents::intent(row, dataset_id)?)
            } else {
                None
            };
            seen.insert(operation_id, SeenIntent { phase, intent });
        }
        view.intents = seen;
    }
    Ok(view)
}

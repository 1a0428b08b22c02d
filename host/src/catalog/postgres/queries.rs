//! The statements that the stage and lifecycle steps compose, each as a typed function:
//! locking a dataset, reading split states, the conditional split writes (each returning the
//! ids it changed, so the caller can check it changed all it meant to), bumping the manifest.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::types::Json;
use sqlx::{PgConnection, Postgres};

use mend_contract::ExistingRow;

use crate::error::MendError;
use crate::model::{Checkpoint, Dataset, NewSplit, SplitState, TimestampMs};

use super::errors::StepError;
use super::rows::{self, SplitColumns};
use super::sql;

/// Whether reading split rows also locks them until the transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RowLock {
    None,
    ForUpdate,
}

/// Locks the dataset's row for the rest of the transaction; `NotFound` if there is none.
pub(super) async fn lock_dataset(
    conn: &mut PgConnection,
    dataset_id: &str,
) -> Result<Dataset, StepError> {
    let row = sqlx::query(sql::DATASET_LOCK)
        .bind(dataset_id)
        .fetch_optional(conn)
        .await?
        .ok_or_else(|| MendError::dataset_not_found(dataset_id))?;
    Ok(rows::dataset(&row)?)
}

/// `NotFound` unless the dataset exists.
pub(super) async fn require_dataset(
    conn: &mut PgConnection,
    dataset_id: &str,
) -> Result<(), StepError> {
    let exists: bool = sqlx::query_scalar(sql::DATASET_EXISTS)
        .bind(dataset_id)
        .fetch_one(conn)
        .await?;
    if exists {
        Ok(())
    } else {
        Err(MendError::dataset_not_found(dataset_id).into())
    }
}

/// The rows that exist among `split_ids`, sorted by id.
pub(super) async fn split_states(
    conn: &mut PgConnection,
    dataset_id: &str,
    split_ids: &[String],
    lock: RowLock,
) -> Result<Vec<ExistingRow>, StepError> {
    let statement = match lock {
        RowLock::None => sql::SPLIT_STATES,
        RowLock::ForUpdate => sql::SPLIT_STATES_FOR_UPDATE,
    };
    let found = sqlx::query(statement)
        .bind(dataset_id)
        .bind(split_ids)
        .fetch_all(conn)
        .await?;
    Ok(found.iter().map(rows::existing).collect::<Result<_, _>>()?)
}

/// What the upsert stage statement did with one requested id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StageEffect {
    Inserted,
    Overwritten,
    /// A row was there and is left as it was: in this state, once it is known.
    Untouched(Option<SplitState>),
}

/// Inserts those of `splits` (sorted by id, distinct) that have no row and overwrites those
/// whose row is still staged; returns what it did with each, in the order of `splits`. A row
/// in another state is left as it was, but locked until the transaction ends, and is
/// `Untouched(None)`: the statement does not say its state. With `record` (the write's record
/// without its answer), the same statement records the write if it writes anything.
///
/// `whole`: the statement writes every id or fails with [`is_whole_upsert_refusal`] (or,
/// meeting no staged row and no missing one, writes nothing), so that it can run with no
/// transaction around it (`sql/split_stage_upsert.sql`).
pub(super) async fn stage_upsert(
    conn: &mut PgConnection,
    dataset_id: &str,
    splits: &[Arc<NewSplit>],
    now_ms: TimestampMs,
    record: Option<&str>,
    whole: bool,
) -> Result<Vec<StageEffect>, StepError> {
    debug_assert!(splits.is_sorted_by(|a, b| a.split_id < b.split_id));
    let columns = SplitColumns::new(splits.iter().map(AsRef::as_ref));
    let asked = i64::try_from(splits.len()).unwrap_or(i64::MAX);
    let written = split_rows_query(sql::SPLIT_STAGE_UPSERT, dataset_id, &columns, now_ms)
        .bind(record)
        .bind(asked)
        .bind(whole)
        .fetch_all(conn)
        .await?;
    let mut effects = vec![StageEffect::Untouched(None); splits.len()];
    for row in &written {
        let split_id = rows::split_id(row)?;
        let inserted: bool = rows::column(row, "inserted")?;
        let position = splits
            .binary_search_by(|split| split.split_id.as_str().cmp(&split_id))
            .map_err(|_| {
                StepError::corrupt(format!(
                    "the upsert stage statement wrote split {split_id}, which was not requested"
                ))
            })?;
        effects[position] = if inserted {
            StageEffect::Inserted
        } else {
            StageEffect::Overwritten
        };
    }
    Ok(effects)
}

/// Whether `error` is a whole upsert's refusal ([`stage_upsert`] with `whole`): it met a row
/// that is not staged after writing others, and wrote nothing. The statement's own text is in
/// the error's message whatever language the server's messages are in.
pub(super) fn is_whole_upsert_refusal(error: &StepError) -> bool {
    match error {
        StepError::Database(sqlx::Error::Database(database)) => {
            database.message().contains("mend: whole upsert refused")
        }
        _ => false,
    }
}

/// Inserts `splits` as staged rows where no row exists yet; returns the ids it inserted.
/// `splits` must be sorted by id: that order is what keeps concurrent batches from deadlocking.
/// With `record` (the write's record without its answer, and how many splits the stage was
/// asked for), the same statement records the write if it inserts anything.
pub(super) async fn insert_staged(
    conn: &mut PgConnection,
    dataset_id: &str,
    splits: &[&NewSplit],
    now_ms: TimestampMs,
    record: Option<(&str, usize)>,
) -> Result<BTreeSet<String>, StepError> {
    debug_assert!(splits.is_sorted_by(|a, b| a.split_id < b.split_id));
    let columns = SplitColumns::new(splits.iter().copied());
    let Some((record, asked)) = record else {
        let query = split_rows_query(sql::SPLIT_INSERT_STAGED, dataset_id, &columns, now_ms);
        return returned_ids(conn, query).await;
    };
    let asked = i64::try_from(asked).unwrap_or(i64::MAX);
    let query = split_rows_query(
        sql::SPLIT_INSERT_STAGED_RECORDED,
        dataset_id,
        &columns,
        now_ms,
    )
    .bind(record)
    .bind(asked);
    returned_ids(conn, query).await
}

/// A create-only stage with the standard plan in one statement, [`insert_staged`] and the state
/// of every other id among `splits` that had a row when the statement began: the ids it
/// inserted, and the states it saw. An id in neither has a row a concurrent writer committed
/// while the statement ran, which its snapshot cannot show. `probe_first` reads the rows
/// before inserting the ids that had none (`sql/split_create_only_probe_first.sql`); otherwise
/// it inserts every id and reads the rows it did not insert
/// (`sql/split_create_only_insert_first.sql`). `record`, the record of the write without its
/// answer, is inserted by the same statement if it inserts anything.
pub(super) async fn create_only_observed(
    conn: &mut PgConnection,
    dataset_id: &str,
    splits: &[&NewSplit],
    now_ms: TimestampMs,
    probe_first: bool,
    record: Option<&str>,
) -> Result<(BTreeSet<String>, BTreeMap<String, SplitState>), StepError> {
    debug_assert!(splits.is_sorted_by(|a, b| a.split_id < b.split_id));
    let columns = SplitColumns::new(splits.iter().copied());
    let statement = if probe_first {
        sql::SPLIT_CREATE_ONLY_PROBE_FIRST
    } else {
        sql::SPLIT_CREATE_ONLY_INSERT_FIRST
    };
    let rows = split_rows_query(statement, dataset_id, &columns, now_ms)
        .bind(record)
        .fetch_all(conn)
        .await?;
    let mut inserted = BTreeSet::new();
    let mut seen = BTreeMap::new();
    for row in &rows {
        match rows::split_id_and_state(row)? {
            (split_id, None) => {
                inserted.insert(split_id);
            }
            (split_id, Some(state)) => {
                seen.insert(split_id, state);
            }
        }
    }
    Ok((inserted, seen))
}

/// Replaces the content of the rows of `splits` that are still staged; returns their ids.
pub(super) async fn overwrite_staged(
    conn: &mut PgConnection,
    dataset_id: &str,
    splits: &[&NewSplit],
    now_ms: TimestampMs,
) -> Result<BTreeSet<String>, StepError> {
    let columns = SplitColumns::new(splits.iter().copied());
    let query = split_rows_query(sql::SPLIT_OVERWRITE_STAGED, dataset_id, &columns, now_ms);
    returned_ids(conn, query).await
}

/// Moves the staged rows among `split_ids` to published; returns the ids it moved.
pub(super) async fn publish_staged(
    conn: &mut PgConnection,
    dataset_id: &str,
    split_ids: &[String],
    now_ms: TimestampMs,
) -> Result<BTreeSet<String>, StepError> {
    let query = sqlx::query(sql::SPLIT_PUBLISH)
        .bind(dataset_id)
        .bind(split_ids)
        .bind(now_ms);
    returned_ids(conn, query).await
}

/// Marks the rows among `split_ids` that are in one of `from_states`; returns the ids it
/// marked.
pub(super) async fn mark(
    conn: &mut PgConnection,
    dataset_id: &str,
    split_ids: &[String],
    from_states: &[SplitState],
    now_ms: TimestampMs,
) -> Result<BTreeSet<String>, StepError> {
    let from_states: Vec<&str> = from_states.iter().map(|state| state.as_str()).collect();
    let query = sqlx::query(sql::SPLIT_MARK)
        .bind(dataset_id)
        .bind(split_ids)
        .bind(now_ms)
        .bind(from_states);
    returned_ids(conn, query).await
}

/// Deletes the rows among `split_ids` that are marked for deletion; returns their ids.
pub(super) async fn delete_marked(
    conn: &mut PgConnection,
    dataset_id: &str,
    split_ids: &[String],
) -> Result<BTreeSet<String>, StepError> {
    let query = sqlx::query(sql::SPLIT_DELETE)
        .bind(dataset_id)
        .bind(split_ids);
    returned_ids(conn, query).await
}

/// Runs a statement that returns the `split_id` of every row it changed.
/// `statement` with the arguments every statement that writes split rows takes, in its
/// order: `$1` the dataset, `$2` to `$6` the rows' columns, `$7` the time of the write.
fn split_rows_query<'q>(
    statement: &'q str,
    dataset_id: &'q str,
    columns: &'q SplitColumns<'q>,
    now_ms: TimestampMs,
) -> Query<'q, Postgres, PgArguments> {
    sqlx::query(statement)
        .bind(dataset_id)
        .bind(&columns.split_ids)
        .bind(&columns.nodes)
        .bind(&columns.metadata)
        .bind(&columns.time_range_starts)
        .bind(&columns.time_range_ends)
        .bind(now_ms)
}

async fn returned_ids(
    conn: &mut PgConnection,
    query: Query<'_, Postgres, PgArguments>,
) -> Result<BTreeSet<String>, StepError> {
    let changed = query.fetch_all(conn).await?;
    Ok(changed
        .iter()
        .map(rows::split_id)
        .collect::<Result<_, _>>()?)
}

/// Bumps the manifest version, replacing the checkpoint if one is given; returns the new
/// version.
pub(super) async fn bump_manifest(
    conn: &mut PgConnection,
    dataset_id: &str,
    checkpoint: Option<&Checkpoint>,
    now_ms: TimestampMs,
) -> Result<u64, StepError> {
    let version: i64 = sqlx::query_scalar(sql::DATASET_BUMP_MANIFEST)
        .bind(dataset_id)
        .bind(checkpoint.map(Json))
        .bind(now_ms)
        .fetch_optional(conn)
        .await?
        // The caller holds the dataset's lock, so the row is there.
        .ok_or_else(|| MendError::dataset_not_found(dataset_id))?;
    u64::try_from(version)
        .map_err(|_| StepError::corrupt(format!("manifest_version is negative: {version}")))
}

/// The ids of `wanted` that are not in `got`, in the order of `wanted`.
pub(super) fn missing(wanted: &[String], got: &BTreeSet<String>) -> Vec<String> {
    wanted
        .iter()
        .filter(|id| !got.contains(*id))
        .cloned()
        .collect()
}

//! Converting between Postgres rows and the catalog's model types.
//!
//! A row that does not decode (a state name the model does not know, a negative version, half
//! a time range, JSON that no longer fits its type) is `Corrupt`: it says an operator must look,
//! never that the write may be retried.

use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{Decode, Postgres, Row, Type};

use mend_contract::ExistingRow;

use crate::error::{MendError, Result};
use crate::model::{Checkpoint, Dataset, DatasetConfig, NewSplit, SplitRow, SplitState, TimeRange};

pub(super) fn dataset(row: &PgRow) -> Result<Dataset> {
    let dataset_id: String = column(row, "dataset_id")?;
    let Json(config) = column::<Json<DatasetConfig>>(row, "config")?;
    let Json(checkpoint) = column::<Json<Checkpoint>>(row, "checkpoint")?;
    Ok(Dataset {
        uid: column(row, "uid")?,
        config,
        config_version: version(row, "config_version")?,
        checkpoint,
        manifest_version: version(row, "manifest_version")?,
        publish_token: column(row, "publish_token")?,
        fencing_epoch: version(row, "fencing_epoch")?,
        created_at_ms: column(row, "created_at_ms")?,
        updated_at_ms: column(row, "updated_at_ms")?,
        dataset_id,
    })
}

pub(super) fn split(row: &PgRow) -> Result<SplitRow> {
    let split_id: String = column(row, "split_id")?;
    let start: Option<i64> = column(row, "time_range_start_ms")?;
    let end: Option<i64> = column(row, "time_range_end_ms")?;
    let time_range = match (start, end) {
        (Some(start), Some(end)) => Some(TimeRange { start, end }),
        (None, None) => None,
        _ => {
            return Err(corrupt(format!(
                "split {split_id} has only one bound of its time range"
            )));
        }
    };
    let Json(metadata) = column::<Json<Value>>(row, "metadata")?;
    Ok(SplitRow {
        state: state(row, &split_id)?,
        node: column(row, "node")?,
        metadata,
        time_range,
        created_at_ms: column(row, "created_at_ms")?,
        updated_at_ms: column(row, "updated_at_ms")?,
        published_at_ms: column(row, "published_at_ms")?,
        mark_seen_at_ms: column(row, "mark_seen_at_ms")?,
        split_id,
    })
}

/// A row of `split_states.sql`: an id and its state. A stage reads hundreds per batch, so the
/// columns are taken by position (the statement selects `split_id, state`) and the state's
/// name is matched where it lies, not copied.
pub(super) fn existing(row: &PgRow) -> Result<ExistingRow> {
    let split_id: String = column_at(row, 0, "split_id")?;
    let name: &str = column_at(row, 1, "state")?;
    let state = SplitState::parse(name)
        .ok_or_else(|| corrupt(format!("split {split_id} has unknown state {name:?}")))?;
    Ok(ExistingRow { split_id, state })
}

/// A `(split_id, state)` row whose state may be NULL (an id the statement inserted), by
/// position as in [`existing`].
pub(super) fn split_id_and_state(row: &PgRow) -> Result<(String, Option<SplitState>)> {
    let split_id: String = column_at(row, 0, "split_id")?;
    let name: Option<&str> = column_at(row, 1, "state")?;
    let state = name
        .map(|name| {
            SplitState::parse(name)
                .ok_or_else(|| corrupt(format!("split {split_id} has unknown state {name:?}")))
        })
        .transpose()?;
    Ok((split_id, state))
}

/// The `split_id` of a row of a statement that returns it first (the split writes' `RETURNING
/// split_id`), taken by position as in [`existing`].
pub(super) fn split_id(row: &PgRow) -> Result<String> {
    column_at(row, 0, "split_id")
}

fn state(row: &PgRow, split_id: &str) -> Result<SplitState> {
    let name: String = column(row, "state")?;
    SplitState::parse(&name)
        .ok_or_else(|| corrupt(format!("split {split_id} has unknown state {name:?}")))
}

/// Versions and epochs are `u64` in the model and `BIGINT` in the schema, which keeps them
/// non-negative.
fn version(row: &PgRow, name: &str) -> Result<u64> {
    let value: i64 = column(row, name)?;
    u64::try_from(value).map_err(|_| corrupt(format!("{name} is negative: {value}")))
}

pub(super) fn column<'r, T>(row: &'r PgRow, name: &str) -> Result<T>
where
    T: Decode<'r, Postgres> + Type<Postgres>,
{
    row.try_get(name)
        .map_err(|error| corrupt(format!("cannot decode column {name}: {error}")))
}

/// Column `index` of `row`, which the statement names `name` (for the error).
fn column_at<'r, T>(row: &'r PgRow, index: usize, name: &str) -> Result<T>
where
    T: Decode<'r, Postgres> + Type<Postgres>,
{
    row.try_get(index)
        .map_err(|error| corrupt(format!("cannot decode column {name}: {error}")))
}

fn corrupt(message: String) -> MendError {
    MendError::Corrupt { message }
}

/// New splits as one array per column, for the `UNNEST` of the insert and overwrite statements.
/// The arrays keep the order of the splits they are built from.
#[derive(Debug, Default)]
pub(super) struct SplitColumns<'a> {
    pub(super) split_ids: Vec<&'a str>,
    pub(super) nodes: Vec<&'a str>,
    /// JSON text; the statements cast it to `jsonb`, so Postgres parses it once.
    pub(super) metadata: Vec<&'a str>,
    pub(super) time_range_starts: Vec<Option<i64>>,
    pub(super) time_range_ends: Vec<Option<i64>>,
}

impl<'a> SplitColumns<'a> {
    pub(super) fn new(splits: impl IntoIterator<Item = &'a NewSplit>) -> Self {
        let mut columns = Self::default();
        for split in splits {
            columns.split_ids.push(&split.split_id);
            columns.nodes.push(&split.node);
            columns.metadata.push(&split.metadata_json);
            columns
                .time_range_starts
                .push(split.time_range.map(|range| range.start));
            columns
                .time_range_ends
                .push(split.time_range.map(|range| range.end));
        }
        columns
    }
}

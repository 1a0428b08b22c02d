//! Listing splits: every filter of a [`ListQuery`] in one static statement whose unused
//! parameters are NULL, sorted by id, one page at a time; and the states of splits by id,
//! one primary-key probe each.

use sqlx::PgPool;

use crate::catalog::ExistingRow;
use crate::error::{MendError, Result};
use crate::model::{ListQuery, SplitPage, SplitRow};

use super::errors::database_error;
use super::rows;
use super::sql;

pub(super) async fn list_splits(
    pool: &PgPool,
    dataset_id: &str,
    query: &ListQuery,
) -> Result<SplitPage> {
    if query.limit == Some(0) {
        // An empty page could not say where the next one starts.
        return Err(MendError::invalid(
            "a split listing's limit must be at least 1",
        ));
    }
    let exists: bool = sqlx::query_scalar(sql::DATASET_EXISTS)
        .bind(dataset_id)
        .fetch_one(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    if !exists {
        return Err(MendError::dataset_not_found(dataset_id));
    }

    let states: Option<Vec<&str>> = (!query.states.is_empty())
        .then(|| query.states.iter().map(|state| state.as_str()).collect());
    // One row past the page tells whether there is a next one.
    let fetch_limit: Option<i64> = query
        .limit
        .map(|limit| i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX));
    let found = sqlx::query(sql::SPLIT_LIST)
        .bind(dataset_id)
        .bind(states)
        .bind(query.split_ids.as_deref())
        .bind(query.time_range.map(|range| range.start))
        .bind(query.time_range.map(|range| range.end))
        .bind(query.updated_since_ms)
        .bind(query.updated_before_ms)
        .bind(query.after_split_id.as_deref())
        .bind(fetch_limit)
        .fetch_all(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    let mut splits: Vec<SplitRow> = found.iter().map(rows::split).collect::<Result<_>>()?;

    let next_after_split_id = match query.limit {
        Some(limit) if splits.len() > limit => {
            splits.truncate(limit);
            splits.last().map(|split| split.split_id.clone())
        }
        _ => None,
    };
    Ok(SplitPage {
        splits,
        next_after_split_id,
    })
}

/// The states of the rows among `split_ids`, sorted by id. The generic listing's plan for a
/// long list of ids can be a scan of the whole dataset in id order; this statement probes the
/// primary key once per id, whatever the dataset's size.
pub(super) async fn split_states(
    pool: &PgPool,
    dataset_id: &str,
    split_ids: &[String],
) -> Result<Vec<ExistingRow>> {
    let exists: bool = sqlx::query_scalar(sql::DATASET_EXISTS)
        .bind(dataset_id)
        .fetch_one(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    if !exists {
        return Err(MendError::dataset_not_found(dataset_id));
    }
    let mut ids = split_ids.to_vec();
    ids.sort();
    ids.dedup();
    let found = sqlx::query(sql::SPLIT_STATES)
        .bind(dataset_id)
        .bind(&ids)
        .fetch_all(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    found.iter().map(rows::existing).collect()
}

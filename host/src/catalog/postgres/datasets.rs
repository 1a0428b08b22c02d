//! Dataset rows: create, read, and the changes that are not publishes (config, publish token,
//! fencing epoch). Each change bumps the manifest version; one that would change nothing
//! writes nothing.

use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use crate::catalog::ManifestProbe;
use crate::error::{MendError, Result};
use crate::model::{Dataset, DatasetConfig, TimestampMs};

use super::errors::{StepError, database_error};
use super::queries;
use super::rows;
use super::sql;

/// Inserts the dataset row; a taken id fails the statement (`AlreadyExists` once resolved).
pub(super) async fn create(
    conn: &mut PgConnection,
    dataset_id: &str,
    uid: &str,
    config: &DatasetConfig,
    now_ms: TimestampMs,
) -> Result<Dataset, StepError> {
    let row = sqlx::query(sql::DATASET_INSERT)
        .bind(dataset_id)
        .bind(uid)
        .bind(Json(config))
        .bind(now_ms)
        .fetch_one(conn)
        .await?;
    Ok(rows::dataset(&row)?)
}

pub(super) async fn list(pool: &PgPool) -> Result<Vec<Dataset>> {
    sqlx::query(sql::DATASET_LIST)
        .fetch_all(pool)
        .await
        .map_err(|error| database_error(error, "*"))?
        .iter()
        .map(rows::dataset)
        .collect()
}

pub(super) async fn show(pool: &PgPool, dataset_id: &str) -> Result<Dataset> {
    let row = sqlx::query(sql::DATASET_SELECT)
        .bind(dataset_id)
        .fetch_optional(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?
        .ok_or_else(|| MendError::dataset_not_found(dataset_id))?;
    rows::dataset(&row)
}

/// The manifest version and whether intents are pending, in one small read.
pub(super) async fn probe_manifest(pool: &PgPool, dataset_id: &str) -> Result<ManifestProbe> {
    let (version, pending_intents): (i64, bool) = sqlx::query_as(sql::DATASET_PROBE)
        .bind(dataset_id)
        .fetch_optional(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?
        .ok_or_else(|| MendError::dataset_not_found(dataset_id))?;
    let manifest_version = u64::try_from(version).map_err(|_| MendError::Corrupt {
        message: format!("dataset {dataset_id} has a negative manifest version {version}"),
    })?;
    Ok(ManifestProbe {
        manifest_version,
        pending_intents,
    })
}

pub(super) async fn update_config(
    conn: &mut PgConnection,
    dataset_id: &str,
    expected_config_version: u64,
    config: &DatasetConfig,
    now_ms: TimestampMs,
) -> Result<Dataset, StepError> {
    let current = queries::lock_dataset(conn, dataset_id).await?;
    if current.config_version != expected_config_version {
        return Err(MendError::failed_precondition(
            format!(
                "the config of dataset {dataset_id} is at version {}, not {expected_config_version}; \
                 read it again and retry",
                current.config_version
            ),
            Vec::new(),
        )
        .into());
    }
    if current.config == *config {
        return Ok(current);
    }
    let row = sqlx::query(sql::DATASET_UPDATE_CONFIG)
        .bind(dataset_id)
        .bind(Json(config))
        .bind(now_ms)
        .fetch_one(conn)
        .await?;
    Ok(rows::dataset(&row)?)
}

/// The dataset after, and whether the token changed (setting the one in force writes
/// nothing).
pub(super) async fn set_publish_token(
    conn: &mut PgConnection,
    dataset_id: &str,
    publish_token: Option<&str>,
    now_ms: TimestampMs,
) -> Result<(Dataset, bool), StepError> {
    let current = queries::lock_dataset(conn, dataset_id).await?;
    if current.publish_token.as_deref() == publish_token {
        return Ok((current, false));
    }
    let row = sqlx::query(sql::DATASET_UPDATE_PUBLISH_TOKEN)
        .bind(dataset_id)
        .bind(publish_token)
        .bind(now_ms)
        .fetch_one(conn)
        .await?;
    Ok((rows::dataset(&row)?, true))
}

/// One statement, atomic by itself, so it runs on the pool without a transaction around it.
pub(super) async fn advance_fencing_epoch(
    pool: &PgPool,
    dataset_id: &str,
    now_ms: TimestampMs,
) -> Result<Dataset> {
    let row = sqlx::query(sql::DATASET_ADVANCE_FENCING_EPOCH)
        .bind(dataset_id)
        .bind(now_ms)
        .fetch_optional(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?
        .ok_or_else(|| MendError::dataset_not_found(dataset_id))?;
    rows::dataset(&row)
}

/// The same inside a transaction, the one that records it under an idempotency key.
pub(super) async fn advance_fencing_epoch_locked(
    conn: &mut PgConnection,
    dataset_id: &str,
    now_ms: TimestampMs,
) -> Result<Dataset, StepError> {
    queries::lock_dataset(conn, dataset_id).await?;
    let row = sqlx::query(sql::DATASET_ADVANCE_FENCING_EPOCH)
        .bind(dataset_id)
        .bind(now_ms)
        .fetch_one(conn)
        .await?;
    Ok(rows::dataset(&row)?)
}

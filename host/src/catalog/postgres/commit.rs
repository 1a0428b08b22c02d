//! One commit's two catalog steps ([`crate::catalog::Catalog::begin_commit`] and
//! [`crate::catalog::Catalog::publish_commit`]), each one transaction.
//!
//! - **Begin** reads the dataset row without a lock (the intent insert's foreign key takes
//!   only the `KEY SHARE` lock a publish leaves free), builds the intent from it, looks for
//!   the records of the operation's end under their keys' locks, inserts the intent, and
//!   stages the rows create-only as `stage.rs` does, rolled back whole if a row is taken.
//!   Unlike a plain create-only stage it runs in a transaction, so an attempt that a deadlock
//!   aborted wrote nothing and is run again from its first read.
//! - **Publish** takes the key's lock and reads its record (`recorded.rs`); recorded, it
//!   answers the record and deletes the intent if it is left. Otherwise it locks the dataset's
//!   row, deletes the intent unless recovery abandoned it (the row lock of that `DELETE`
//!   orders it with recovery's abandon, so exactly one lands), publishes as `lifecycle.rs`
//!   does and records the result. Locks in the order every writer takes them: the dataset,
//!   then the intent, then split rows by id.

use std::sync::Arc;

use sqlx::PgConnection;

use crate::catalog::commit::{refuse_ended, refuse_taken, taken_splits};
use crate::catalog::{
    BegunCommit, IntentBuilder, OperationRecords, PublishValidator, RecordedRequest, RequestKey,
    StagePlanner, built_intent, refuse_abandoned,
};
use crate::error::{EntityKind, MendError};
use crate::intent::Intent;
use crate::model::{NewSplit, PublishRequest, PublishResult, StageMode, TimestampMs};

use super::errors::{StepError, intent_error, is_intent_taken};
use super::{intents, lifecycle, queries, recorded, rows, sql, stage};

pub(super) async fn begin(
    conn: &mut PgConnection,
    dataset_id: &str,
    build: &IntentBuilder<'_>,
    requested: &[Arc<NewSplit>],
    planner: &StagePlanner<'_>,
    records: OperationRecords<'_>,
    now_ms: TimestampMs,
) -> Result<BegunCommit, StepError> {
    let row = sqlx::query(sql::DATASET_SELECT)
        .bind(dataset_id)
        .fetch_optional(&mut *conn)
        .await?
        .ok_or_else(|| MendError::dataset_not_found(dataset_id))?;
    let dataset = rows::dataset(&row)?;
    let intent = built_intent(dataset_id, &dataset, build)?;
    let inserted = intents::Columns::of(&intent)?
        .insert()
        .execute(&mut *conn)
        .await;
    match inserted {
        Ok(_) => {}
        Err(error) if is_intent_taken(&error) => {
            return Err(intent_error(error, dataset_id, &intent.operation_id).into());
        }
        Err(error) => return Err(error.into()),
    }
    // Under each key's lock, as the step recording it takes it: that step lands either
    // before this one (and refuses it here) or after it (and sees its intent). The begin's
    // own record's key is locked with them, all in two statements.
    let mut keys: Vec<&str> = records.refused_by.to_vec();
    keys.extend(records.begun.map(|begun| begun.key.as_str()));
    let found = recorded::lock_and_find_all(conn, dataset_id, &keys).await?;
    if let Some(key) = records
        .refused_by
        .iter()
        .find(|key| found.contains_key(**key))
    {
        return Err(refuse_ended(&intent.operation_id, key).into());
    }
    let splits = stage::stage(
        conn,
        dataset_id,
        StageMode::CreateOnly,
        requested,
        planner,
        now_ms,
        stage::Observation::ReadFirst,
        None,
    )
    .await?;
    let taken = taken_splits(&splits);
    if !taken.is_empty() {
        // Rolled back whole: the intent and the rows inserted with it.
        return Err(refuse_taken(taken).into());
    }
    // Its key is locked and had no record above.
    if let Some(begun) = records.begun
        && !found.contains_key(&begun.key)
    {
        recorded::insert(conn, dataset_id, begun).await?;
    }
    Ok(BegunCommit {
        dataset,
        intent,
        splits,
    })
}

pub(super) async fn publish(
    conn: &mut PgConnection,
    intent: &Intent,
    request: &PublishRequest,
    validate: &PublishValidator<'_>,
    now_ms: TimestampMs,
    key: &RequestKey,
) -> Result<PublishResult, StepError> {
    let (dataset_id, operation_id) = (intent.dataset_id.as_str(), &intent.operation_id);
    if let Some(found) = recorded::lock_and_find(conn, dataset_id, &key.key).await? {
        let published = found.replay(key)?;
        sqlx::query(sql::INTENT_DELETE)
            .bind(dataset_id)
            .bind(operation_id)
            .execute(&mut *conn)
            .await?;
        return Ok(published);
    }
    queries::lock_dataset(conn, dataset_id).await?;
    let deleted = sqlx::query(sql::INTENT_DELETE_UNABANDONED)
        .bind(dataset_id)
        .bind(operation_id)
        .fetch_optional(&mut *conn)
        .await?;
    if deleted.is_none() {
        let stored = sqlx::query(sql::INTENT_SELECT)
            .bind(dataset_id)
            .bind(operation_id)
            .fetch_optional(&mut *conn)
            .await?;
        return Err(match stored {
            Some(row) => match refuse_abandoned(&intents::intent(&row, dataset_id)?) {
                Err(refused) => refused.into(),
                // Not abandoned, yet not deleted: it changed between the two statements.
                Ok(()) => StepError::Raced(format!("intent {operation_id} changed meanwhile")),
            },
            None => MendError::NotFound {
                kind: EntityKind::Intent,
                ids: vec![operation_id.clone()],
            }
            .into(),
        });
    }
    let published = lifecycle::publish(conn, request, validate, now_ms).await?;
    let record = RecordedRequest::new(key, &published, now_ms);
    recorded::insert(conn, dataset_id, &record).await?;
    Ok(published)
}

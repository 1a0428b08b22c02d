//! The transitions after staging: publish, mark for deletion, delete.
//!
//! Each runs inside one transaction that locks the dataset's row first and the split rows next,
//! in id order: every writer takes locks in that order, so they queue instead of deadlocking.
//! Every conditional write checks how many rows it changed; a mismatch (which the locks should
//! make impossible) rolls the whole step back.

use std::collections::BTreeSet;

use sqlx::PgConnection;

use crate::catalog::{PublishObservation, PublishValidator};
use crate::error::MendError;
use crate::model::{MarkResult, PublishRequest, PublishResult, SplitState, TimestampMs};

use super::errors::StepError;
use super::queries::{self, RowLock};
use super::sql;

pub(super) async fn publish(
    conn: &mut PgConnection,
    request: &PublishRequest,
    validate: &PublishValidator<'_>,
    now_ms: TimestampMs,
) -> Result<PublishResult, StepError> {
    let dataset_id = request.dataset_id.as_str();
    let dataset = queries::lock_dataset(conn, dataset_id).await?;
    let staged = sorted_distinct(&request.staged_split_ids);
    let replaced = sorted_distinct(&request.replaced_split_ids);
    let all_ids = sorted_distinct(staged.iter().chain(&replaced));
    let rows = queries::split_states(conn, dataset_id, &all_ids, RowLock::ForUpdate).await?;

    // The fencing epoch comes from the row locked above: exclusive recovery's advance waits
    // for this transaction, so the epoch checked is the one in force when the publish commits.
    validate(&PublishObservation {
        rows,
        checkpoint: dataset.checkpoint.clone(),
        publish_token: dataset.publish_token.clone(),
        fencing_epoch: dataset.fencing_epoch,
    })?;

    // Defense in depth: the validator checks all of this; a publish must not break the
    // lifecycle or move a checkpoint even if it has a bug.
    let in_both: Vec<String> = staged
        .iter()
        .filter(|id| replaced.binary_search(id).is_ok())
        .cloned()
        .collect();
    if !in_both.is_empty() {
        return Err(MendError::failed_precondition(
            "splits cannot be both published and replaced",
            in_both,
        )
        .into());
    }
    let checkpoint = match &request.checkpoint_delta {
        Some(delta) => Some(crate::catalog::checkpoint_after(
            &dataset.checkpoint,
            delta,
        )?),
        None => None,
    };
    if staged.is_empty()
        && replaced.is_empty()
        && checkpoint
            .as_ref()
            .is_none_or(|new| *new == dataset.checkpoint)
    {
        // Nothing would change: write nothing, not even a new manifest version.
        return Ok(PublishResult {
            dataset_id: dataset.dataset_id,
            manifest_version: dataset.manifest_version,
            published: Vec::new(),
            marked: Vec::new(),
        });
    }

    if !staged.is_empty() {
        let published = queries::publish_staged(conn, dataset_id, &staged, now_ms).await?;
        let not_staged = queries::missing(&staged, &published);
        if !not_staged.is_empty() {
            return Err(MendError::failed_precondition(
                "splits to publish are not staged",
                not_staged,
            )
            .into());
        }
    }
    if !replaced.is_empty() {
        let marked = queries::mark(
            conn,
            dataset_id,
            &replaced,
            &[SplitState::Published],
            now_ms,
        )
        .await?;
        let not_published = queries::missing(&replaced, &marked);
        if !not_published.is_empty() {
            return Err(MendError::failed_precondition(
                "splits to replace are not published",
                not_published,
            )
            .into());
        }
    }
    let manifest_version =
        queries::bump_manifest(conn, dataset_id, checkpoint.as_ref(), now_ms).await?;
    Ok(PublishResult {
        dataset_id: dataset.dataset_id,
        manifest_version,
        published: staged,
        marked: replaced,
    })
}

pub(super) async fn mark_for_deletion(
    conn: &mut PgConnection,
    dataset_id: &str,
    split_ids: &[String],
    now_ms: TimestampMs,
) -> Result<MarkResult, StepError> {
    queries::lock_dataset(conn, dataset_id).await?;
    let ids = sorted_distinct(split_ids);
    let rows = queries::split_states(conn, dataset_id, &ids, RowLock::ForUpdate).await?;
    let found: BTreeSet<String> = rows.iter().map(|row| row.split_id.clone()).collect();
    let unknown = queries::missing(&ids, &found);
    if !unknown.is_empty() {
        return Err(MendError::splits_not_found(unknown).into());
    }

    let (already_marked, to_mark): (Vec<_>, Vec<_>) = rows
        .into_iter()
        .partition(|row| row.state == SplitState::MarkedForDeletion);
    let already_marked: Vec<String> = already_marked.into_iter().map(|row| row.split_id).collect();
    let to_mark: Vec<String> = to_mark.into_iter().map(|row| row.split_id).collect();
    if !to_mark.is_empty() {
        let from = [SplitState::Staged, SplitState::Published];
        let marked = queries::mark(conn, dataset_id, &to_mark, &from, now_ms).await?;
        let unchanged = queries::missing(&to_mark, &marked);
        if !unchanged.is_empty() {
            return Err(MendError::failed_precondition(
                "splits changed state while being marked",
                unchanged,
            )
            .into());
        }
        queries::bump_manifest(conn, dataset_id, None, now_ms).await?;
    }
    Ok(MarkResult {
        marked: to_mark,
        already_marked,
    })
}

/// Records that the marks of the rows among `split_ids` still marked and not yet seen were
/// seen at `seen_at_ms`; returns the ids it recorded, sorted.
pub(super) async fn see_marks(
    conn: &mut PgConnection,
    dataset_id: &str,
    split_ids: &[String],
    seen_at_ms: TimestampMs,
) -> Result<Vec<String>, StepError> {
    queries::lock_dataset(conn, dataset_id).await?;
    let ids = sorted_distinct(split_ids);
    let mut seen: Vec<String> = sqlx::query_scalar(sql::SPLIT_SEE_MARKS)
        .bind(dataset_id)
        .bind(&ids)
        .bind(seen_at_ms)
        .fetch_all(&mut *conn)
        .await?;
    seen.sort();
    Ok(seen)
}

/// Marks the rows among `split_ids` still staged and untouched since the cutoff.
pub(super) async fn mark_stale_staged(
    conn: &mut PgConnection,
    dataset_id: &str,
    split_ids: &[String],
    untouched_before_ms: TimestampMs,
    now_ms: TimestampMs,
) -> Result<Vec<String>, StepError> {
    queries::lock_dataset(conn, dataset_id).await?;
    mark_stale_staged_holding_lock(conn, dataset_id, split_ids, untouched_before_ms, now_ms).await
}

/// [`mark_stale_staged`] once the dataset's row is locked.
async fn mark_stale_staged_holding_lock(
    conn: &mut PgConnection,
    dataset_id: &str,
    split_ids: &[String],
    untouched_before_ms: TimestampMs,
    now_ms: TimestampMs,
) -> Result<Vec<String>, StepError> {
    let ids = sorted_distinct(split_ids);
    let mut marked: Vec<String> = sqlx::query_scalar(sql::SPLIT_MARK_STALE_STAGED)
        .bind(dataset_id)
        .bind(&ids)
        .bind(now_ms)
        .bind(untouched_before_ms)
        .fetch_all(&mut *conn)
        .await?;
    if !marked.is_empty() {
        queries::bump_manifest(conn, dataset_id, None, now_ms).await?;
    }
    marked.sort();
    Ok(marked)
}

/// Marks the rows among `split_ids` still staged, untouched since the cutoff, and claimed by
/// no intent ([`crate::intent::claimed_split_ids`]). The rows are locked before the intents are
/// read: an operation writes its intent before its rows, so any row this step sees has its
/// intent committed by then, and a locked row cannot change before the mark commits.
pub(super) async fn mark_unclaimed_stale(
    conn: &mut PgConnection,
    dataset_id: &str,
    split_ids: &[String],
    untouched_before_ms: TimestampMs,
    now_ms: TimestampMs,
) -> Result<Vec<String>, StepError> {
    queries::lock_dataset(conn, dataset_id).await?;
    let ids = sorted_distinct(split_ids);
    let rows = queries::split_states(conn, dataset_id, &ids, RowLock::ForUpdate).await?;
    let intents = super::intents::list_on(conn, dataset_id).await?;
    let claimed: BTreeSet<&str> = intents
        .iter()
        .flat_map(crate::intent::claimed_split_ids)
        .collect();
    let unclaimed: Vec<String> = rows
        .into_iter()
        .filter(|row| row.state == SplitState::Staged && !claimed.contains(row.split_id.as_str()))
        .map(|row| row.split_id)
        .collect();
    if unclaimed.is_empty() {
        return Ok(Vec::new());
    }
    mark_stale_staged_holding_lock(conn, dataset_id, &unclaimed, untouched_before_ms, now_ms).await
}

pub(super) async fn delete_splits(
    conn: &mut PgConnection,
    dataset_id: &str,
    split_ids: &[String],
    now_ms: TimestampMs,
) -> Result<(), StepError> {
    queries::lock_dataset(conn, dataset_id).await?;
    let ids = sorted_distinct(split_ids);
    let rows = queries::split_states(conn, dataset_id, &ids, RowLock::ForUpdate).await?;
    let found: BTreeSet<String> = rows.iter().map(|row| row.split_id.clone()).collect();
    let unknown = queries::missing(&ids, &found);
    if !unknown.is_empty() {
        return Err(MendError::splits_not_found(unknown).into());
    }
    let not_marked: Vec<String> = rows
        .into_iter()
        .filter(|row| row.state != SplitState::MarkedForDeletion)
        .map(|row| row.split_id)
        .collect();
    if !not_marked.is_empty() {
        return Err(MendError::failed_precondition(
            "only splits marked for deletion can be deleted",
            not_marked,
        )
        .into());
    }
    if ids.is_empty() {
        return Ok(());
    }

    let deleted = queries::delete_marked(conn, dataset_id, &ids).await?;
    let kept = queries::missing(&ids, &deleted);
    if !kept.is_empty() {
        return Err(MendError::failed_precondition(
            "splits changed state while being deleted",
            kept,
        )
        .into());
    }
    queries::bump_manifest(conn, dataset_id, None, now_ms).await?;
    Ok(())
}

fn sorted_distinct<'a>(ids: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    let distinct: BTreeSet<&String> = ids.into_iter().collect();
    distinct.into_iter().cloned().collect()
}

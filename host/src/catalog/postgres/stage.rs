//! Staging splits, in both modes.
//!
//! - **Create-only** reads without locks, asks the planner, then runs one
//!   `INSERT ... ON CONFLICT DO NOTHING RETURNING` with the ids sorted. `DO NOTHING` takes no
//!   lock on a row that exists, so no statement here can modify, or even lock, an existing
//!   row; a planned insert that a concurrent writer won is reported as skipped, with the state
//!   that writer left.
//! - **Upsert** locks the rows that exist (`FOR UPDATE`, in id order), asks the planner,
//!   overwrites the planned rows that are still staged and inserts the missing ones. A planned
//!   insert that a concurrent writer won means the planner saw a stale view: the attempt rolls
//!   back and the caller's retry loop runs it again from the read.
//!
//! Whether a plan is right for the policy is the engine's business; this module only refuses a
//! plan it could not apply as written (an overwrite in create-only mode, an id twice, an id the
//! request did not name), with nothing written.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::PgConnection;

use crate::catalog::{PlannedAction, PlannedStage, StagePlanner};
use crate::error::MendError;
use crate::model::{NewSplit, SplitState, StageMode, StageOutcome, StagedSplit, TimestampMs};

use super::errors::StepError;
use super::queries::{self, RowLock};

pub(super) async fn stage(
    conn: &mut PgConnection,
    dataset_id: &str,
    mode: StageMode,
    split_ids: &[String],
    planner: &StagePlanner<'_>,
    now_ms: TimestampMs,
) -> Result<Vec<StagedSplit>, StepError> {
    // No separate existence check up front: it would cost a round trip per batch. Rows found
    // for the ids prove the dataset exists, and an insert into a missing dataset fails on the
    // foreign key (mapped to NotFound). Only a refused plan asks, so that NotFound wins.
    let staged = match mode {
        StageMode::CreateOnly => create_only(conn, dataset_id, split_ids, planner, now_ms).await,
        StageMode::Upsert => upsert(conn, dataset_id, split_ids, planner, now_ms).await,
    };
    if let Err(StepError::Failed(_)) = &staged {
        queries::require_dataset(conn, dataset_id).await?;
    }
    staged
}

async fn create_only(
    conn: &mut PgConnection,
    dataset_id: &str,
    split_ids: &[String],
    planner: &StagePlanner<'_>,
    now_ms: TimestampMs,
) -> Result<Vec<StagedSplit>, StepError> {
    let existing = queries::split_states(conn, dataset_id, split_ids, RowLock::None).await?;
    let plan = planner(&existing)?.into_applicable(StageMode::CreateOnly, split_ids, &existing)?;
    let inserts = splits_with(&plan, PlannedAction::Insert);
    if inserts.is_empty() {
        return Ok(outcomes(&plan, &BTreeSet::new(), &BTreeMap::new()));
    }

    let inserted = queries::insert_staged(conn, dataset_id, &inserts, now_ms).await?;
    let lost: Vec<String> = inserts
        .iter()
        .filter(|split| !inserted.contains(&split.split_id))
        .map(|split| split.split_id.clone())
        .collect();
    // A fresh statement sees the rows the winners committed, which the insert's snapshot did
    // not; this read takes no lock either.
    let actual: BTreeMap<String, SplitState> = if lost.is_empty() {
        BTreeMap::new()
    } else {
        queries::split_states(conn, dataset_id, &lost, RowLock::None)
            .await?
            .into_iter()
            .map(|row| (row.split_id, row.state))
            .collect()
    };
    Ok(outcomes(&plan, &inserted, &actual))
}

async fn upsert(
    conn: &mut PgConnection,
    dataset_id: &str,
    split_ids: &[String],
    planner: &StagePlanner<'_>,
    now_ms: TimestampMs,
) -> Result<Vec<StagedSplit>, StepError> {
    let existing = queries::split_states(conn, dataset_id, split_ids, RowLock::ForUpdate).await?;
    let plan = planner(&existing)?.into_applicable(StageMode::Upsert, split_ids, &existing)?;

    let overwrites = splits_with(&plan, PlannedAction::Overwrite);
    if !overwrites.is_empty() {
        let overwritten = queries::overwrite_staged(conn, dataset_id, &overwrites, now_ms).await?;
        // The rows are locked and were staged when read, so this only fires if that promise
        // is broken; the whole batch is refused rather than half applied.
        let not_staged = ids_not_in(&overwrites, &overwritten);
        if !not_staged.is_empty() {
            return Err(MendError::failed_precondition(
                "splits are no longer staged and cannot be overwritten",
                not_staged,
            )
            .into());
        }
    }

    let inserts = splits_with(&plan, PlannedAction::Insert);
    if !inserts.is_empty() {
        let inserted = queries::insert_staged(conn, dataset_id, &inserts, now_ms).await?;
        let raced = ids_not_in(&inserts, &inserted);
        if !raced.is_empty() {
            return Err(StepError::Raced(format!(
                "splits {} were inserted by a concurrent writer after they were read",
                raced.join(", ")
            )));
        }
    }

    let applied: BTreeSet<String> = plan
        .iter()
        .filter(|entry| entry.action == PlannedAction::Insert)
        .map(|entry| entry.split.split_id.clone())
        .collect();
    Ok(outcomes(&plan, &applied, &BTreeMap::new()))
}

fn splits_with(plan: &[PlannedStage], action: PlannedAction) -> Vec<&NewSplit> {
    plan.iter()
        .filter(|entry| entry.action == action)
        .map(|entry| entry.split.as_ref())
        .collect()
}

fn ids_not_in(splits: &[&NewSplit], got: &BTreeSet<String>) -> Vec<String> {
    splits
        .iter()
        .filter(|split| !got.contains(&split.split_id))
        .map(|split| split.split_id.clone())
        .collect()
}

/// One outcome per plan entry, in the plan's (sorted) order. `inserted` holds the planned
/// inserts that happened; `actual` the states of the rows that won the others.
fn outcomes(
    plan: &[PlannedStage],
    inserted: &BTreeSet<String>,
    actual: &BTreeMap<String, SplitState>,
) -> Vec<StagedSplit> {
    plan.iter()
        .map(|entry| {
            let split_id = entry.split.split_id.clone();
            let outcome = match &entry.action {
                PlannedAction::Insert if inserted.contains(&split_id) => StageOutcome::Inserted,
                // The winner's row was gone again by the time it was read back. Only a deleted
                // row disappears, and only marked rows are deleted: that was its last state.
                PlannedAction::Insert => StageOutcome::Skipped(
                    actual
                        .get(&split_id)
                        .copied()
                        .unwrap_or(SplitState::MarkedForDeletion),
                ),
                PlannedAction::Overwrite => StageOutcome::Overwritten,
                PlannedAction::Skip(state) => StageOutcome::Skipped(*state),
            };
            StagedSplit { split_id, outcome }
        })
        .collect()
}

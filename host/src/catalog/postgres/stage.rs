//! Staging splits, in both modes.
//!
//! - **Create-only** reads without locks, asks the planner, then runs one
//!   `INSERT ... ON CONFLICT DO NOTHING RETURNING` of the planned inserts, sorted by id. With
//!   the mode's standard plan (`Observation::Standard`) it asks no planner: one statement
//!   inserts the ids that have no row and reads the states of the rows that exist, probing
//!   them first (`sql/split_create_only_probe_first.sql`) unless the dataset's last such stage
//!   inserted every id, then inserting first (`sql/split_create_only_insert_first.sql`): a
//!   probe of ids that have no row costs about what their insert does, and an insert of ids
//!   that exist may wait on every writer inserting them at the same moment. Only an id whose row a concurrent writer committed while the
//!   statement ran is read again, in a statement of its own. `DO
//!   NOTHING` takes no lock on a row that exists, so no statement here can modify, or even
//!   lock, an existing row, and the insert holds its new rows only while it runs: it needs no
//!   transaction (`mod.rs` runs it on a plain connection unless it is keyed). A planned insert
//!   that a concurrent writer won is reported as skipped, with the state that writer left,
//!   which is the mode's answer for a row that exists.
//! - **Upsert** first **presumes** the plan that its semantics give and observes by writing
//!   it: one `INSERT ... ON CONFLICT DO UPDATE ... WHERE state = 'staged'` inserts the missing
//!   rows, overwrites the staged ones and says which it did. It resolves each conflict on the
//!   newest version of the row and locks it, so a row a concurrent writer inserted meanwhile is
//!   overwritten, never lost, and nothing has to be retried for it; a row in another state is
//!   left as it was (locked) and read for its state. The planner is asked on what the
//!   statement met, and the transaction commits only if the plan is exactly what it did
//!   (`executed_as_planned`); a plan that rejects the batch rolls it all back, nothing written.
//!   Overlapping batches wait for each other only from that statement to the commit. The
//!   record of the write (`write_audit`) is inserted by the same statement
//!   (`sql/split_stage_upsert.sql`), so the batch is `BEGIN`, one statement, `COMMIT`.
//!
//!   With the standard plan and no idempotency key, the same statement runs first on its own,
//!   with no transaction, **whole or nothing**: the standard plan is to insert every missing
//!   id and overwrite every staged row, or to refuse the batch if any row is in another state,
//!   so a statement that wrote every id is the stage and its answer, and one that did not
//!   fails (or wrote nothing) and the stage runs again as above, which answers the refusal.
//!   Its rows are locked only while the statement runs: no host work and no round trip to
//!   `COMMIT` while overlapping writers wait. A refused batch costs that one statement more.
//!
//!   When the plan is anything else (another action for an id, another entry's content for a
//!   repeated id), the attempt fails with [`StepError::PlanDiffers`], its transaction rolls
//!   back (none of it was ever visible), and the next attempt **reads first**: it locks the
//!   rows that exist (`FOR UPDATE`, in id order), asks the planner, overwrites the planned
//!   rows that are still staged and inserts the missing ones. A planned insert that a
//!   concurrent writer won there means the planner saw a stale view: the attempt rolls back
//!   and the caller's retry loop runs it again from the read.
//!
//! Every statement takes its row locks in id order, so overlapping batches wait for each other
//! in one order and never deadlock. Whether a plan is right for the policy is the engine's
//! business; this module only refuses a plan it could not apply as written (an overwrite in
//! create-only mode, an id twice, an id the request did not name), with nothing written.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::PgConnection;

use mend_contract::ExistingRow;

use crate::catalog::write_audit::{self, PendingWrite};
use crate::catalog::{InTheWay, PlannedAction, PlannedStage, RequestKey, StagePlanner};
use crate::error::MendError;
use crate::model::{NewSplit, SplitState, StageMode, StageOutcome, StagedSplit, TimestampMs};

use super::PostgresCatalog;
use super::errors::{self, Resolution, StepError};
use super::queries::{self, RowLock, StageEffect};

/// How an attempt observes the rows it stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Observation {
    /// By writing what the mode presumes, kept only if the planner agrees (upsert).
    Presumed,
    /// By reading before writing: create-only with a policy's own plan, or an upsert after an
    /// attempt whose plan differed from the presumption.
    ReadFirst,
    /// By writing, with the mode's standard plan (`stage.standard-plans`), which asks for no
    /// planner: create-only inserts the ids that have no row and skips the rows that exist, in
    /// one statement that reads those rows first when `probe_first`, after its insert
    /// otherwise; upsert is presumed.
    Standard { probe_first: bool },
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn stage(
    conn: &mut PgConnection,
    dataset_id: &str,
    mode: StageMode,
    splits: &[Arc<NewSplit>],
    planner: &StagePlanner<'_>,
    now_ms: TimestampMs,
    observation: Observation,
    write: Option<&PendingWrite>,
) -> Result<Vec<StagedSplit>, StepError> {
    // No separate existence check up front: it would cost a round trip per batch. An insert
    // into a missing dataset fails on the foreign key (mapped to NotFound), and rows found for
    // the ids prove that it exists. So the presumed upsert, which got past its insert, never
    // asks; a read-first stage asks only when its plan was refused, so that NotFound wins.
    let staged = match (mode, observation) {
        (StageMode::Upsert, Observation::Presumed | Observation::Standard { .. }) => {
            return upsert_presumed(conn, dataset_id, splits, planner, now_ms, write).await;
        }
        (StageMode::CreateOnly, observation) => {
            let in_statement = match observation {
                Observation::Standard { probe_first } => Some(probe_first),
                Observation::Presumed | Observation::ReadFirst => None,
            };
            create_only(
                conn,
                dataset_id,
                splits,
                planner,
                now_ms,
                in_statement,
                write,
            )
            .await
        }
        (StageMode::Upsert, Observation::ReadFirst) => {
            upsert_read_first(conn, dataset_id, splits, planner, now_ms).await
        }
    };
    if let Err(StepError::Failed(_)) = &staged {
        queries::require_dataset(conn, dataset_id).await?;
    }
    staged
}

/// Writes what upsert presumes, asks the planner on what the write met, and keeps the write
/// only if the plan is exactly what it did.
async fn upsert_presumed(
    conn: &mut PgConnection,
    dataset_id: &str,
    splits: &[Arc<NewSplit>],
    planner: &StagePlanner<'_>,
    now_ms: TimestampMs,
    write: Option<&PendingWrite>,
) -> Result<Vec<StagedSplit>, StepError> {
    let record = unanswered_record(write, now_ms);
    let mut effects =
        queries::stage_upsert(conn, dataset_id, splits, now_ms, record.as_deref(), false).await?;
    // The rows in another state than staged, which the statement locked but does not describe:
    // a fresh statement reads them as they stay until the commit.
    let unseen: Vec<String> = splits
        .iter()
        .zip(&effects)
        .filter(|(_, effect)| **effect == StageEffect::Untouched(None))
        .map(|(split, _)| split.split_id.clone())
        .collect();
    if !unseen.is_empty() {
        let states: BTreeMap<String, SplitState> =
            queries::split_states(conn, dataset_id, &unseen, RowLock::None)
                .await?
                .into_iter()
                .map(|row| (row.split_id, row.state))
                .collect();
        for (split, effect) in splits.iter().zip(effects.iter_mut()) {
            if *effect == StageEffect::Untouched(None) {
                // A locked row cannot go; were it gone all the same, `None` stays, which no
                // plan matches, and the read-first attempt settles it.
                *effect = StageEffect::Untouched(states.get(&split.split_id).copied());
            }
        }
    }

    let existing: Vec<ExistingRow> = splits
        .iter()
        .zip(&effects)
        .filter_map(|(split, effect)| {
            let state = match effect {
                StageEffect::Inserted | StageEffect::Untouched(None) => return None,
                StageEffect::Overwritten => SplitState::Staged,
                StageEffect::Untouched(Some(state)) => *state,
            };
            Some(ExistingRow {
                split_id: split.split_id.clone(),
                state,
            })
        })
        .collect();
    let plan = planner(&existing)?.into_applicable(StageMode::Upsert, splits, &existing)?;
    if !executed_as_planned(&plan, splits, &effects) {
        return Err(StepError::PlanDiffers);
    }
    Ok(plan
        .iter()
        .zip(&effects)
        .map(|(entry, effect)| StagedSplit {
            split_id: entry.split.split_id.clone(),
            outcome: match effect {
                StageEffect::Inserted => StageOutcome::Inserted,
                StageEffect::Overwritten => StageOutcome::Overwritten,
                // `executed_as_planned` matched every untouched row to a skip of its state.
                StageEffect::Untouched(state) => StageOutcome::Skipped(
                    state.expect("an untouched row in an applied plan has a known state"),
                ),
            },
        })
        .collect())
}

/// The record of the write without its answer, as the upsert statement takes it: the
/// statement answers it with what it did (`sql/split_stage_upsert.sql`).
fn unanswered_record(write: Option<&PendingWrite>, now_ms: TimestampMs) -> Option<String> {
    write.map(|write| write_audit::encode_text(&write.answered(&serde_json::Value::Null, now_ms)))
}

/// Whether the statement did exactly what `plan` says, entry by entry (both sorted by id, one
/// per requested id: `into_applicable` checked): an insert where it inserted, an overwrite
/// where it overwrote, each with the very content it wrote, and a skip of a row in the state it
/// found where it wrote nothing.
fn executed_as_planned(
    plan: &[PlannedStage],
    splits: &[Arc<NewSplit>],
    effects: &[StageEffect],
) -> bool {
    plan.len() == effects.len()
        && plan
            .iter()
            .zip(splits)
            .zip(effects)
            .all(|((entry, written), effect)| {
                let same_content =
                    || Arc::ptr_eq(&entry.split, written) || *entry.split == **written;
                match (&entry.action, effect) {
                    (PlannedAction::Insert, StageEffect::Inserted)
                    | (PlannedAction::Overwrite, StageEffect::Overwritten) => same_content(),
                    (PlannedAction::Skip(planned), StageEffect::Untouched(Some(found))) => {
                        planned == found
                    }
                    _ => false,
                }
            })
}

fn ids_of(splits: &[Arc<NewSplit>]) -> Vec<String> {
    splits.iter().map(|split| split.split_id.clone()).collect()
}

#[allow(clippy::too_many_arguments)]
async fn create_only(
    conn: &mut PgConnection,
    dataset_id: &str,
    splits: &[Arc<NewSplit>],
    planner: &StagePlanner<'_>,
    now_ms: TimestampMs,
    in_statement: Option<bool>,
    write: Option<&PendingWrite>,
) -> Result<Vec<StagedSplit>, StepError> {
    // The standard plan inserts every id it is not shown a row for, so with it the separate
    // read is skipped: the stage's one statement reads the rows (`in_statement`: before its
    // insert or after), and an id it cannot see is read below for the state it is in, as any
    // planned insert that a concurrent writer won is.
    let read_first = in_statement.is_none();
    let existing = if read_first {
        queries::split_states(conn, dataset_id, &ids_of(splits), RowLock::None).await?
    } else {
        Vec::new()
    };
    let plan = planner(&existing)?.into_applicable(StageMode::CreateOnly, splits, &existing)?;
    let inserts = splits_with(&plan, PlannedAction::Insert);
    if inserts.is_empty() {
        return Ok(outcomes(&plan, &BTreeSet::new(), &BTreeMap::new()));
    }

    // The record of the write, without its answer: the insert's statement answers it.
    let record = write
        .map(|write| write_audit::encode_text(&write.answered(&serde_json::Value::Null, now_ms)));
    // With the standard plan the read and the insert are one statement: the whole stage is one
    // round trip, whether the ids are new or (as when writers draw from one pool of ids) nearly
    // all exist.
    let (inserted, mut actual) = match in_statement {
        None => {
            let record = record.as_deref().map(|record| (record, splits.len()));
            let inserted =
                queries::insert_staged(conn, dataset_id, &inserts, now_ms, record).await?;
            (inserted, BTreeMap::new())
        }
        Some(probe_first) => {
            let record = record.as_deref();
            queries::create_only_observed(conn, dataset_id, &inserts, now_ms, probe_first, record)
                .await?
        }
    };
    let lost: Vec<String> = inserts
        .iter()
        .filter(|split| {
            !inserted.contains(&split.split_id) && !actual.contains_key(&split.split_id)
        })
        .map(|split| split.split_id.clone())
        .collect();
    // A fresh statement sees the rows the winners committed, which the insert's snapshot did
    // not; this read takes no lock either.
    if !lost.is_empty() {
        actual.extend(
            queries::split_states(conn, dataset_id, &lost, RowLock::None)
                .await?
                .into_iter()
                .map(|row| (row.split_id, row.state)),
        );
    }
    Ok(outcomes(&plan, &inserted, &actual))
}

async fn upsert_read_first(
    conn: &mut PgConnection,
    dataset_id: &str,
    splits: &[Arc<NewSplit>],
    planner: &StagePlanner<'_>,
    now_ms: TimestampMs,
) -> Result<Vec<StagedSplit>, StepError> {
    let existing =
        queries::split_states(conn, dataset_id, &ids_of(splits), RowLock::ForUpdate).await?;
    let plan = planner(&existing)?.into_applicable(StageMode::Upsert, splits, &existing)?;

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
        let inserted = queries::insert_staged(conn, dataset_id, &inserts, now_ms, None).await?;
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

impl PostgresCatalog {
    /// Stages with `planner`; `standard` says that it is the mode's standard plan, so that a
    /// create-only stage is one statement (the standard plan inserts every id that has no row
    /// and skips every row met: the statement's own report is the plan's input), which probes
    /// first unless the dataset's last such stage inserted every id.
    ///
    /// With [`InTheWay::Refuse`], the stage runs in a transaction whatever its mode and key,
    /// and its intents are read after its statement, in it: an intent naming one of `splits`
    /// rolls the stage back and refuses it with `RecoveryRequired`. Read after the statement,
    /// under read committed, the intents include those of every begin whose rows the
    /// statement met (it waited for that begin to commit), and a begin whose rows come later
    /// meets this stage's rows and is refused: the stage and a begin of the same split are
    /// ordered by their rows, and each answers what the other did.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn stage_planned(
        &self,
        dataset_id: &str,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        planner: &StagePlanner<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
        standard: bool,
        in_the_way: InTheWay,
    ) -> crate::error::Result<Vec<StagedSplit>> {
        let refuse = in_the_way == InTheWay::Refuse;
        let write = write_audit::pending(dataset_id, "stage", || {
            splits.iter().map(|split| split.split_id.as_str())
        });
        // A keyed create-only stage runs in a transaction, for its record. Without a key its
        // insert is one statement, which inserts the record of the write too
        // (`sql/split_create_only_*.sql`, `sql/split_insert_staged_recorded.sql`).
        if mode == StageMode::CreateOnly && key.is_none() && !refuse {
            return self
                .create_only_unkeyed(
                    dataset_id,
                    splits,
                    planner,
                    now_ms,
                    standard,
                    write.as_ref(),
                )
                .await;
        }
        // An unkeyed upsert with the standard plan is one statement with no transaction
        // around it when it writes every id, which is the plan's whole answer; otherwise it
        // wrote nothing, and the stage runs again below, in a transaction that answers it.
        if mode == StageMode::Upsert
            && key.is_none()
            && standard
            && !refuse
            && let Some(staged) = self
                .upsert_whole(dataset_id, splits, now_ms, write.as_ref())
                .await?
        {
            return Ok(staged);
        }
        // An upsert presumes the plan until an attempt finds that the policy plans otherwise;
        // from then on this request reads first (`stage.rs`).
        let read_first = AtomicBool::new(false);
        let read_first = &read_first;
        // Whether the attempt's own statement recorded the write (a presumed upsert's does),
        // so that the transaction does not record it again.
        let recorded_in_statement = AtomicBool::new(false);
        let recorded_in_statement = &recorded_in_statement;
        let write = write.as_ref();
        let changed = |staged: &Vec<StagedSplit>| {
            let wrote = staged
                .iter()
                .any(|split| !matches!(split.outcome, StageOutcome::Skipped(_)));
            (wrote && !recorded_in_statement.load(Ordering::Relaxed))
                .then(|| write_audit::stage_answer(staged))
        };
        self.keyed_transaction(
            dataset_id,
            key,
            write,
            &changed,
            now_ms,
            |mut transaction| async move {
                let observation = self.attempt_observation(
                    dataset_id,
                    read_first.load(Ordering::Relaxed),
                    standard,
                );
                let presumed_upsert = mode == StageMode::Upsert
                    && matches!(
                        observation,
                        Observation::Presumed | Observation::Standard { .. }
                    );
                let in_statement = write.filter(|_| presumed_upsert);
                recorded_in_statement.store(in_statement.is_some(), Ordering::Relaxed);
                let result = stage(
                    &mut transaction,
                    dataset_id,
                    mode,
                    splits,
                    planner,
                    now_ms,
                    observation,
                    in_statement,
                )
                .await;
                if let Err(StepError::PlanDiffers) = &result {
                    read_first.store(true, Ordering::Relaxed);
                }
                let result = match result {
                    Ok(staged) if refuse => {
                        match super::intents::list_on(&mut transaction, dataset_id).await {
                            Ok(intents) => crate::catalog::refuse_in_the_way(&intents, splits)
                                .map(|()| staged)
                                .map_err(StepError::from),
                            Err(error) => Err(error.into()),
                        }
                    }
                    other => other,
                };
                (transaction, result)
            },
        )
        .await
        .inspect(|staged| {
            if standard && mode == StageMode::CreateOnly {
                self.probe_first.remember(dataset_id, staged);
            }
        })
    }

    /// How an attempt of a stage in a transaction observes the rows: reading them first once
    /// an attempt has found that the policy plans otherwise, as the standard plan observes
    /// them for a policy that declares it, or presuming the plan.
    fn attempt_observation(
        &self,
        dataset_id: &str,
        read_first: bool,
        standard: bool,
    ) -> Observation {
        if read_first {
            Observation::ReadFirst
        } else if standard {
            self.standard_observation(dataset_id)
        } else {
            Observation::Presumed
        }
    }

    /// An unkeyed create-only stage: one statement on a connection of its own, with no
    /// transaction around it, which records the write itself. With the standard plan it
    /// probes first unless the dataset's last such stage inserted every id, and remembers
    /// what this one met.
    async fn create_only_unkeyed(
        &self,
        dataset_id: &str,
        splits: &[Arc<NewSplit>],
        planner: &StagePlanner<'_>,
        now_ms: TimestampMs,
        standard: bool,
        write: Option<&PendingWrite>,
    ) -> crate::error::Result<Vec<StagedSplit>> {
        let mut connection = self
            .pool
            .acquire()
            .await
            .map_err(|error| errors::database_error(error, dataset_id))?;
        let observation = if standard {
            self.standard_observation(dataset_id)
        } else {
            Observation::ReadFirst
        };
        stage(
            &mut connection,
            dataset_id,
            StageMode::CreateOnly,
            splits,
            planner,
            now_ms,
            observation,
            write,
        )
        .await
        .inspect(|staged| {
            if standard {
                self.probe_first.remember(dataset_id, staged);
            }
        })
        .map_err(|error| match error.resolve(dataset_id) {
            Resolution::Fail(error) => error,
            Resolution::Retry(reason) => MendError::Transient { message: reason },
        })
    }

    /// The standard upsert as one statement on a connection of its own, whole or nothing
    /// (`sql/split_stage_upsert.sql`): every id inserted or overwritten, its record in the
    /// same statement; `None` when it wrote nothing because a row it met is not staged, or
    /// failed in a way a transaction's attempts may get past (the caller stages again in one).
    /// Its row locks last only while the statement runs: no round trip to `COMMIT`, no host
    /// work between the write and its commit, which is what overlapping writers wait for.
    async fn upsert_whole(
        &self,
        dataset_id: &str,
        splits: &[Arc<NewSplit>],
        now_ms: TimestampMs,
        write: Option<&PendingWrite>,
    ) -> crate::error::Result<Option<Vec<StagedSplit>>> {
        let record = unanswered_record(write, now_ms);
        let mut connection = self
            .pool
            .acquire()
            .await
            .map_err(|error| errors::database_error(error, dataset_id))?;
        let effects = match queries::stage_upsert(
            &mut connection,
            dataset_id,
            splits,
            now_ms,
            record.as_deref(),
            true,
        )
        .await
        {
            Ok(effects) => effects,
            Err(error) if queries::is_whole_upsert_refusal(&error) => return Ok(None),
            Err(error) => {
                return match error.resolve(dataset_id) {
                    Resolution::Fail(error) => Err(error),
                    // Nothing of the statement happened: its transaction's attempts decide.
                    Resolution::Retry(_) => Ok(None),
                };
            }
        };
        let staged = splits
            .iter()
            .zip(&effects)
            .map(|(split, effect)| {
                let outcome = match effect {
                    StageEffect::Inserted => StageOutcome::Inserted,
                    StageEffect::Overwritten => StageOutcome::Overwritten,
                    // The statement wrote nothing (a whole one writes every id or fails).
                    StageEffect::Untouched(_) => return None,
                };
                Some(StagedSplit {
                    split_id: split.split_id.clone(),
                    outcome,
                })
            })
            .collect::<Option<Vec<_>>>();
        Ok(staged)
    }

    /// How a stage with the standard plan observes on `dataset_id`.
    pub(super) fn standard_observation(&self, dataset_id: &str) -> Observation {
        Observation::Standard {
            probe_first: self.probe_first.get(dataset_id),
        }
    }
}

//! What each catalog mutation commits, decided against one [`DatasetState`]: pure functions
//! with no IO and no clock (time comes in as `now_ms`).
//!
//! Each returns a [`Change`]: nothing to write, or the actions to commit as the next version.
//! The commit loop in `mod.rs` calls them once per attempt, always on the exact
//! state the commit will sit on top of, so a planner or validator never answers for a stale
//! read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::catalog::{
    BegunCommit, IntentBuilder, PlannedAction, PublishEffects, PublishObservation,
    PublishValidator, StagePlanner, sorted_distinct,
};
use crate::deliberate_bugs::{self, Bug};
use crate::error::{EntityKind, MendError, Result};
use crate::intent::{INTENT_FORMAT_VERSION, Intent, IntentPhase};
use crate::model::{
    Dataset, DatasetConfig, MarkResult, NewSplit, PublishRequest, PublishResult, SplitState,
    StageMode, StageOutcome, StagedSplit, TimestampMs,
};

use super::log_format::{Action, LogRow, RawJson};
use super::state::DatasetState;
use crate::catalog::{OperationRecords, RecordedRequest, RequestKey};

pub(super) enum Change<T> {
    /// Nothing to write; the answer stands on the state as read.
    Unchanged(T),
    /// Commit these actions as the next version; the answer holds once they persist.
    Commit { actions: Vec<Action>, output: T },
}

impl<T> Change<T> {
    /// The same change, answering `f` of its output.
    pub(super) fn map<U>(self, f: impl FnOnce(T) -> U) -> Change<U> {
        match self {
            Change::Unchanged(output) => Change::Unchanged(f(output)),
            Change::Commit { actions, output } => Change::Commit {
                actions,
                output: f(output),
            },
        }
    }
}

/// `change`, recorded under `key` when there is one ([`recorded`]).
pub(super) fn keyed<T: serde::Serialize + serde::de::DeserializeOwned>(
    state: &DatasetState,
    key: Option<&RequestKey>,
    now_ms: TimestampMs,
    change: impl FnOnce(&DatasetState) -> Result<Change<T>>,
) -> Result<Change<T>> {
    match key {
        None => change(state),
        Some(key) => recorded(state, key, now_ms, change),
    }
}

/// `change` with its output recorded under `key` in the same commit; a key already recorded
/// answers its recorded result and writes nothing ([`crate::catalog::recorded`]).
pub(super) fn recorded<T: serde::Serialize + serde::de::DeserializeOwned>(
    state: &DatasetState,
    key: &RequestKey,
    now_ms: TimestampMs,
    change: impl FnOnce(&DatasetState) -> Result<Change<T>>,
) -> Result<Change<T>> {
    if let Some(found) = state.recorded.get(key.key.as_str()) {
        return found.replay(key).map(Change::Unchanged);
    }
    let (mut actions, output) = match change(state)? {
        Change::Unchanged(output) => (Vec::new(), output),
        Change::Commit { actions, output } => (actions, output),
    };
    actions.push(Action::RecordRequest {
        record: Box::new(RecordedRequest::new(key, &output, now_ms)),
    });
    Ok(Change::Commit { actions, output })
}

/// Keeps `record` unless its key is recorded already; answers the record kept.
pub(super) fn record_request(
    state: &DatasetState,
    record: &RecordedRequest,
) -> Result<Change<RecordedRequest>> {
    if let Some(found) = state.recorded.get(record.key.as_str()) {
        return Ok(Change::Unchanged(RecordedRequest::clone(found)));
    }
    Ok(Change::Commit {
        actions: vec![Action::RecordRequest {
            record: Box::new(record.clone()),
        }],
        output: record.clone(),
    })
}

/// Forgets the records made before `recorded_before_ms`; returns how many.
pub(super) fn forget_recorded(
    state: &DatasetState,
    recorded_before_ms: TimestampMs,
) -> Result<Change<usize>> {
    let keys: Vec<String> = state
        .recorded
        .values()
        .filter(|record| record.recorded_at_ms < recorded_before_ms)
        .map(|record| record.key.clone())
        .collect();
    if keys.is_empty() {
        return Ok(Change::Unchanged(0));
    }
    let forgotten = keys.len();
    Ok(Change::Commit {
        actions: vec![Action::ForgetRequests { keys }],
        output: forgotten,
    })
}

/// The dataset as created: config and manifest both start at version 1, as in Postgres.
pub(super) fn new_dataset(
    dataset_id: &str,
    uid: &str,
    config: &DatasetConfig,
    now_ms: TimestampMs,
) -> Dataset {
    Dataset {
        dataset_id: dataset_id.to_string(),
        uid: uid.to_string(),
        config: config.clone(),
        config_version: 1,
        checkpoint: Default::default(),
        manifest_version: 1,
        publish_token: None,
        fencing_epoch: 0,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
    }
}

/// Applies the planner's plan to the exact state the commit follows. A plan that cannot be
/// applied as written (an id twice or unrequested, an overwrite in create-only mode, an insert
/// over a row or an overwrite of a row that is not staged in upsert mode) is refused with
/// `PolicyRejected` and nothing written: the planner saw these very rows, so re-planning would
/// give the same answer.
pub(super) fn stage(
    state: &DatasetState,
    mode: StageMode,
    splits: &[Arc<NewSplit>],
    planner: &StagePlanner<'_>,
    now_ms: TimestampMs,
) -> Result<Change<Vec<StagedSplit>>> {
    let requested: Vec<String> = splits.iter().map(|split| split.split_id.clone()).collect();
    let existing = state.existing_rows(&requested)?;
    let entries = planner(&existing)?.into_applicable(mode, splits, &existing)?;

    let mut rows = Vec::new();
    let mut results = Vec::with_capacity(entries.len());
    for entry in &entries {
        let split_id = &entry.split.split_id;
        let current = state.splits.get(split_id)?;
        let outcome = match (mode, &entry.action, current) {
            (_, PlannedAction::Insert, None) => {
                rows.push(LogRow {
                    split_id: split_id.clone(),
                    state: SplitState::Staged,
                    node: entry.split.node.clone(),
                    metadata: metadata(&entry.split)?,
                    time_range: entry.split.time_range,
                    created_at_ms: now_ms,
                    updated_at_ms: now_ms,
                    published_at_ms: None,
                    mark_seen_at_ms: None,
                });
                StageOutcome::Inserted
            }
            // Create-only leaves every existing row exactly as it is, whatever was planned.
            (StageMode::CreateOnly, PlannedAction::Insert, Some(row)) => {
                StageOutcome::Skipped(row.state)
            }
            (StageMode::Upsert, PlannedAction::Overwrite, Some(row))
                if row.state == SplitState::Staged =>
            {
                rows.push(LogRow {
                    split_id: split_id.clone(),
                    state: row.state,
                    node: entry.split.node.clone(),
                    metadata: metadata(&entry.split)?,
                    time_range: entry.split.time_range,
                    created_at_ms: row.created_at_ms,
                    updated_at_ms: now_ms,
                    published_at_ms: row.published_at_ms,
                    mark_seen_at_ms: None,
                });
                StageOutcome::Overwritten
            }
            (_, PlannedAction::Overwrite, _)
            | (StageMode::Upsert, PlannedAction::Insert, Some(_)) => {
                return Err(MendError::PolicyRejected {
                    message: format!("the stage plan for split {split_id} cannot be applied"),
                });
            }
            (_, PlannedAction::Skip(planned_state), _) => StageOutcome::Skipped(*planned_state),
        };
        results.push(StagedSplit {
            split_id: split_id.clone(),
            outcome,
        });
    }
    if rows.is_empty() {
        return Ok(Change::Unchanged(results));
    }
    Ok(Change::Commit {
        actions: vec![Action::PutSplits { rows }],
        output: results,
    })
}

pub(super) fn publish(
    state: &DatasetState,
    request: &PublishRequest,
    validate: &PublishValidator<'_>,
    now_ms: TimestampMs,
) -> Result<Change<PublishResult>> {
    let observed = sorted_distinct(
        request
            .staged_split_ids
            .iter()
            .chain(&request.replaced_split_ids),
    );
    validate(&PublishObservation {
        rows: state.existing_rows(&observed)?,
        checkpoint: state.dataset.checkpoint.clone(),
        publish_token: state.dataset.publish_token.clone(),
        fencing_epoch: state.dataset.fencing_epoch,
    })?;

    let Some(PublishEffects {
        staged,
        replaced,
        checkpoint,
    }) = crate::catalog::publish_effects(&state.dataset, request, |id| state.split_state(id))?
    else {
        return Ok(Change::Unchanged(PublishResult {
            dataset_id: state.dataset.dataset_id.clone(),
            manifest_version: state.dataset.manifest_version,
            published: Vec::new(),
            marked: Vec::new(),
        }));
    };

    let mut rows = Vec::with_capacity(staged.len() + replaced.len());
    for split_id in &staged {
        rows.push(LogRow {
            state: SplitState::Published,
            published_at_ms: Some(now_ms),
            updated_at_ms: now_ms,
            ..state.log_row(split_id)?
        });
    }
    for split_id in &replaced {
        rows.push(state.marked_row(split_id, now_ms)?);
    }
    let mut dataset = bumped(&state.dataset, now_ms);
    dataset.checkpoint = checkpoint;
    let output = PublishResult {
        dataset_id: dataset.dataset_id.clone(),
        manifest_version: dataset.manifest_version,
        published: staged,
        marked: replaced,
    };
    let mut actions = vec![Action::SetDataset { dataset }];
    if !rows.is_empty() {
        actions.insert(0, Action::PutSplits { rows });
    }
    Ok(Change::Commit { actions, output })
}

pub(super) fn mark_for_deletion(
    state: &DatasetState,
    split_ids: &[String],
    now_ms: TimestampMs,
) -> Result<Change<MarkResult>> {
    let split_ids = sorted_distinct(split_ids);
    require_known(state, &split_ids)?;
    let mut result = MarkResult {
        marked: Vec::new(),
        already_marked: Vec::new(),
    };
    let mut rows = Vec::new();
    for split_id in split_ids {
        if state.split_state(&split_id)? == Some(SplitState::MarkedForDeletion) {
            result.already_marked.push(split_id);
        } else {
            rows.push(state.marked_row(&split_id, now_ms)?);
            result.marked.push(split_id);
        }
    }
    if rows.is_empty() {
        return Ok(Change::Unchanged(result));
    }
    Ok(Change::Commit {
        actions: vec![
            Action::PutSplits { rows },
            Action::SetDataset {
                dataset: bumped(&state.dataset, now_ms),
            },
        ],
        output: result,
    })
}

/// Records that the marks of the rows among `split_ids` still marked and not yet seen were
/// seen at `seen_at_ms` ([`crate::model::SplitRow::mark_seen_at_ms`]): the ids it recorded.
/// Not a change to the published view: the manifest version stays.
pub(super) fn see_marks(
    state: &DatasetState,
    split_ids: &[String],
    seen_at_ms: TimestampMs,
) -> Result<Change<Vec<String>>> {
    let mut rows = Vec::new();
    for split_id in sorted_distinct(split_ids) {
        if let Some(stored) = state.splits.get(&split_id)?
            && stored.state == SplitState::MarkedForDeletion
            && stored.mark_seen_at_ms.is_none()
        {
            rows.push(LogRow {
                mark_seen_at_ms: Some(seen_at_ms),
                ..stored.to_log_row(&split_id)
            });
        }
    }
    let seen: Vec<String> = rows.iter().map(|row| row.split_id.clone()).collect();
    if rows.is_empty() {
        return Ok(Change::Unchanged(seen));
    }
    Ok(Change::Commit {
        actions: vec![Action::PutSplits { rows }],
        output: seen,
    })
}

/// Marks the still-staged, untouched-since-the-cutoff rows among `split_ids`.
pub(super) fn mark_stale_staged(
    state: &DatasetState,
    split_ids: &[String],
    untouched_before_ms: TimestampMs,
    now_ms: TimestampMs,
) -> Result<Change<Vec<String>>> {
    let mut rows = Vec::new();
    for split_id in sorted_distinct(split_ids) {
        if let Some(row) = state.splits.get(&split_id)?
            && row.state == SplitState::Staged
            && row.updated_at_ms < untouched_before_ms
        {
            rows.push(state.marked_row(&split_id, now_ms)?);
        }
    }
    let marked: Vec<String> = rows.iter().map(|row| row.split_id.clone()).collect();
    if rows.is_empty() {
        return Ok(Change::Unchanged(marked));
    }
    Ok(Change::Commit {
        actions: vec![
            Action::PutSplits { rows },
            Action::SetDataset {
                dataset: bumped(&state.dataset, now_ms),
            },
        ],
        output: marked,
    })
}

/// [`mark_stale_staged`], leaving out every split an intent claims
/// ([`crate::intent::claimed_split_ids`]), decided on the same state the commit follows.
pub(super) fn mark_unclaimed_stale(
    state: &DatasetState,
    split_ids: &[String],
    untouched_before_ms: TimestampMs,
    now_ms: TimestampMs,
) -> Result<Change<Vec<String>>> {
    let claimed: BTreeSet<&str> = state
        .intents
        .values()
        .flat_map(|intent| crate::intent::claimed_split_ids(intent))
        .collect();
    let unclaimed: Vec<String> = split_ids
        .iter()
        .filter(|id| !claimed.contains(id.as_str()))
        .cloned()
        .collect();
    mark_stale_staged(state, &unclaimed, untouched_before_ms, now_ms)
}

pub(super) fn delete_splits(
    state: &DatasetState,
    split_ids: &[String],
    now_ms: TimestampMs,
) -> Result<Change<()>> {
    let split_ids = sorted_distinct(split_ids);
    require_known(state, &split_ids)?;
    let mut not_marked = Vec::new();
    for id in &split_ids {
        if state.split_state(id)? != Some(SplitState::MarkedForDeletion) {
            not_marked.push(id.clone());
        }
    }
    if !not_marked.is_empty() {
        return Err(MendError::failed_precondition(
            "only splits marked for deletion can be deleted; mark them first",
            not_marked,
        ));
    }
    if split_ids.is_empty() {
        return Ok(Change::Unchanged(()));
    }
    Ok(Change::Commit {
        actions: vec![
            Action::DeleteSplits { split_ids },
            Action::SetDataset {
                dataset: bumped(&state.dataset, now_ms),
            },
        ],
        output: (),
    })
}

pub(super) fn update_config(
    state: &DatasetState,
    expected_config_version: u64,
    config: &DatasetConfig,
    now_ms: TimestampMs,
) -> Result<Change<Dataset>> {
    let current = &state.dataset;
    if current.config_version != expected_config_version {
        return Err(MendError::failed_precondition(
            format!(
                "config of dataset {} is at version {}, not {expected_config_version}; read it \
                 again and retry",
                current.dataset_id, current.config_version
            ),
            Vec::new(),
        ));
    }
    if current.config == *config {
        return Ok(Change::Unchanged(current.clone()));
    }
    let mut dataset = bumped(current, now_ms);
    dataset.config = config.clone();
    dataset.config_version += 1;
    Ok(set_dataset(dataset))
}

pub(super) fn set_publish_token(
    state: &DatasetState,
    publish_token: Option<&str>,
    now_ms: TimestampMs,
) -> Result<Change<Dataset>> {
    let current = &state.dataset;
    if current.publish_token.as_deref() == publish_token {
        return Ok(Change::Unchanged(current.clone()));
    }
    let mut dataset = bumped(current, now_ms);
    dataset.publish_token = publish_token.map(str::to_string);
    Ok(set_dataset(dataset))
}

/// Moves the fencing epoch on by one. Always a commit: each call fences out every writer
/// that read the epoch before it, even when called twice in a row.
pub(super) fn advance_fencing_epoch(
    state: &DatasetState,
    now_ms: TimestampMs,
) -> Result<Change<Dataset>> {
    let current = &state.dataset;
    let dataset = Dataset {
        fencing_epoch: current.fencing_epoch + 1,
        ..bumped(current, now_ms)
    };
    Ok(Change::Commit {
        actions: vec![Action::AdvanceFencingEpoch {
            fencing_epoch: dataset.fencing_epoch,
            manifest_version: dataset.manifest_version,
            updated_at_ms: dataset.updated_at_ms,
        }],
        output: dataset,
    })
}

/// Records a new intent, in this host's format ([`crate::intent::check_written_format`]);
/// intents are not part of the published view, so the dataset record does not change.
pub(super) fn put_intent(state: &DatasetState, intent: &Intent) -> Result<Change<()>> {
    if state.intents.contains_key(intent.operation_id.as_str()) {
        return Err(MendError::AlreadyExists {
            kind: EntityKind::Intent,
            id: intent.operation_id.clone(),
        });
    }
    Ok(Change::Commit {
        actions: vec![Action::PutIntent {
            intent: Box::new(Intent {
                format_version: INTENT_FORMAT_VERSION,
                ..intent.clone()
            }),
        }],
        output: (),
    })
}

/// Replaces an intent that is still in `expected_phase`, in this host's format.
pub(super) fn update_intent(
    state: &DatasetState,
    intent: &Intent,
    expected_phase: IntentPhase,
) -> Result<Change<()>> {
    let stored = stored_intent(state, &intent.operation_id)?;
    if stored.phase != expected_phase {
        return Err(MendError::failed_precondition(
            format!(
                "intent {} is {:?}, not {expected_phase:?}",
                intent.operation_id, stored.phase
            ),
            vec![intent.operation_id.clone()],
        ));
    }
    if expected_phase == IntentPhase::Armed && intent.phase == IntentPhase::EffectsConfirmed {
        confirmable(state, intent)?;
    }
    // A lease never moves back: a confirmation written from an intent read before a
    // heartbeat landed keeps the heartbeat's renewal (found by mend-model).
    let intent = Intent {
        format_version: INTENT_FORMAT_VERSION,
        lease_expires_at_ms: intent.lease_expires_at_ms.max(stored.lease_expires_at_ms),
        ..intent.clone()
    };
    if *stored == intent {
        return Ok(Change::Unchanged(()));
    }
    Ok(Change::Commit {
        actions: vec![Action::PutIntent {
            intent: Box::new(intent),
        }],
        output: (),
    })
}

/// Whether the publish `intent` plans can still land on the rows of `state`
/// ([`crate::intent::check_confirmable`]).
fn confirmable(state: &DatasetState, intent: &Intent) -> Result<()> {
    let Some(publish) = &intent.effects.publish else {
        return Ok(());
    };
    let mut states = BTreeMap::new();
    for split_id in publish
        .staged_split_ids
        .iter()
        .chain(&publish.replaced_split_ids)
    {
        if let Some(row) = state.splits.get(split_id)? {
            states.insert(split_id.as_str(), row.state);
        }
    }
    crate::intent::check_confirmable(intent, &states)
}

/// Moves an `Armed` intent whose lease ran out by `lease_expired_by` to `Abandoned`, in this
/// host's format; an intent already `Abandoned` is returned as it is, with nothing written.
/// Decided on the exact state the commit follows, so a renewal or a confirmation committed
/// first wins, and one committed after finds the phase moved and fails.
pub(super) fn abandon_intent(
    state: &DatasetState,
    operation_id: &str,
    lease_expired_by: Option<TimestampMs>,
    now_ms: TimestampMs,
) -> Result<Change<Intent>> {
    let stored = stored_intent(state, operation_id)?;
    if !crate::intent::abandonable(stored, lease_expired_by)? {
        return Ok(Change::Unchanged(stored.clone()));
    }
    let abandoned = Intent {
        format_version: INTENT_FORMAT_VERSION,
        phase: IntentPhase::Abandoned,
        updated_at_ms: now_ms,
        ..stored.clone()
    };
    Ok(Change::Commit {
        actions: vec![Action::PutIntent {
            intent: Box::new(abandoned.clone()),
        }],
        output: abandoned,
    })
}

pub(super) fn delete_intent(state: &DatasetState, operation_id: &str) -> Result<Change<()>> {
    stored_intent(state, operation_id)?;
    Ok(Change::Commit {
        actions: vec![Action::DeleteIntent {
            operation_id: operation_id.to_string(),
        }],
        output: (),
    })
}

/// A commit's first step ([`crate::catalog::Catalog::begin_commit`]): its intent, built from
/// the dataset as this state holds it, and its rows staged create-only, in one commit, and
/// only whole: a row taken, or a record under one of `records.refused_by`, refuses it with
/// nothing written.
pub(super) fn begin_commit(
    state: &DatasetState,
    build: &IntentBuilder<'_>,
    requested: &[Arc<NewSplit>],
    planner: &StagePlanner<'_>,
    records: OperationRecords<'_>,
    now_ms: TimestampMs,
) -> Result<Change<BegunCommit>> {
    let intent = crate::catalog::built_intent(&state.dataset.dataset_id, &state.dataset, build)?;
    // The id taken first (a begin sent again), then the records of an end.
    let mut actions = match put_intent(state, &intent)? {
        Change::Commit { actions, .. } => actions,
        Change::Unchanged(()) => unreachable!("a new intent is always written"),
    };
    let planted = deliberate_bugs::active(Bug::BeginIgnoresEndRecord);
    if let Some(key) = records
        .refused_by
        .iter()
        .find(|key| state.recorded.contains_key(**key) && !planted)
    {
        return Err(crate::catalog::commit::refuse_ended(
            &intent.operation_id,
            key,
        ));
    }
    let splits = match stage(state, StageMode::CreateOnly, requested, planner, now_ms)? {
        Change::Commit {
            actions: staged,
            output,
        } => {
            actions.extend(staged);
            output
        }
        Change::Unchanged(output) => output,
    };
    let taken = crate::catalog::commit::taken_splits(&splits);
    if !taken.is_empty() {
        return Err(crate::catalog::commit::refuse_taken(taken));
    }
    if let Some(begun) = records.begun
        && !state.recorded.contains_key(begun.key.as_str())
    {
        actions.push(Action::RecordRequest {
            record: Box::new(begun.clone()),
        });
    }
    Ok(Change::Commit {
        actions,
        output: BegunCommit {
            dataset: state.dataset.clone(),
            intent,
            splits,
        },
    })
}

/// A commit's last step ([`crate::catalog::Catalog::publish_commit`]): its publish, the
/// deletion of its intent and the record of `key`, in one commit, while the intent is there
/// and not abandoned. With `key` recorded, its result, and the intent deleted if it is left.
pub(super) fn publish_commit(
    state: &DatasetState,
    operation_id: &str,
    request: &PublishRequest,
    validate: &PublishValidator<'_>,
    now_ms: TimestampMs,
    key: &RequestKey,
) -> Result<Change<PublishResult>> {
    let delete_intent = Action::DeleteIntent {
        operation_id: operation_id.to_string(),
    };
    if let Some(found) = state.recorded.get(key.key.as_str()) {
        let output = found.replay(key)?;
        if !state.intents.contains_key(operation_id) {
            return Ok(Change::Unchanged(output));
        }
        return Ok(Change::Commit {
            actions: vec![delete_intent],
            output,
        });
    }
    crate::catalog::refuse_abandoned(stored_intent(state, operation_id)?)?;
    let (mut actions, output) = match publish(state, request, validate, now_ms)? {
        Change::Commit { actions, output } => (actions, output),
        Change::Unchanged(output) => (Vec::new(), output),
    };
    actions.push(delete_intent);
    actions.push(Action::RecordRequest {
        record: Box::new(RecordedRequest::new(key, &output, now_ms)),
    });
    Ok(Change::Commit { actions, output })
}

fn stored_intent<'a>(state: &'a DatasetState, operation_id: &str) -> Result<&'a Intent> {
    state
        .intents
        .get(operation_id)
        .map(Arc::as_ref)
        .ok_or_else(|| MendError::NotFound {
            kind: EntityKind::Intent,
            ids: vec![operation_id.to_string()],
        })
}

/// The dataset after a change to its published view.
fn bumped(dataset: &Dataset, now_ms: TimestampMs) -> Dataset {
    Dataset {
        manifest_version: dataset.manifest_version + 1,
        updated_at_ms: now_ms,
        ..dataset.clone()
    }
}

fn set_dataset(dataset: Dataset) -> Change<Dataset> {
    Change::Commit {
        actions: vec![Action::SetDataset {
            dataset: dataset.clone(),
        }],
        output: dataset,
    }
}

fn require_known(state: &DatasetState, split_ids: &[String]) -> Result<()> {
    let unknown: Vec<String> = split_ids
        .iter()
        .filter(|id| !state.splits.contains(id))
        .cloned()
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(MendError::splits_not_found(unknown))
    }
}

/// A staged split's metadata as the log keeps it: the caller's text, which validation found
/// to be a JSON object.
fn metadata(split: &NewSplit) -> Result<RawJson> {
    RawJson::parse(split.metadata_json.clone()).map_err(|err| {
        MendError::invalid(format!(
            "the metadata of split {} is not JSON: {err}",
            split.split_id
        ))
    })
}

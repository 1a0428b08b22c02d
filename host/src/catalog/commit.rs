//! The two catalog steps of one commit ([`Catalog::begin_commit`], [`Catalog::publish_commit`]):
//! what they take and return, and their default implementations, which run the separate
//! steps they fold so that a backend of an embedder's own keeps working without them.
//!
//! A commit ([`crate::engine`]'s `commit.rs`) writes two catalog steps where it wrote five:
//!
//! | step | folds | leaves, if it is the last to land |
//! |---|---|---|
//! | `begin_commit` | read the dataset, write the intent (`Armed`), stage its rows create-only (all of them, or nothing) | an `Armed` intent and its staged rows |
//! | `publish_commit` | confirm, publish (recorded under the operation's key), delete the intent | the published splits, no intent |
//!
//! On an object store each is one log version (one put-if-absent); in Postgres one
//! transaction. The defaults here run the folded steps one after another, so a crash between
//! them leaves the states the commit left before it folded them, which recovery resolves as it
//! always did: an intent without rows or with some (abandoned once its lease runs out), a
//! confirmed intent (rolled forward), a published commit whose intent is left (stale).

use crate::catalog::CatalogExt;
use crate::error::{EntityKind, MendError, Result};
use crate::intent::{Intent, IntentPhase, check_written_format};
use std::sync::Arc;

use crate::model::{
    Dataset, NewSplit, PublishRequest, PublishResult, StageMode, StageOutcome, StagedSplit,
    TimestampMs,
};

use super::{Catalog, PublishValidator, RecordedRequest, RequestKey, StagePlanner};

/// Builds a commit's intent from its dataset as the backend reads it in the step that writes
/// the intent: the intent plans each object's size, which depends on the dataset's uid (the
/// objects' headers carry it), and records the manifest version it expects.
pub type IntentBuilder<'a> = dyn Fn(&Dataset) -> Result<Intent> + Send + Sync + 'a;

/// What [`Catalog::begin_commit`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct BegunCommit {
    /// The dataset as read in the step that wrote the intent, the one the intent was built
    /// from: its uid goes into the objects' headers, and its fencing epoch is the one the
    /// commit's publish must still find (invariant 7).
    pub dataset: Dataset,
    /// The intent as written, `Armed`.
    pub intent: Intent,
    /// The create-only stage's outcome per split, sorted by id, as [`Catalog::stage`] returns
    /// it: `Inserted` for every one (a begin that could not insert them all wrote nothing).
    pub splits: Vec<StagedSplit>,
}

/// The intent `build` makes of `dataset`, if a backend may write it for `dataset_id`.
pub fn built_intent(
    dataset_id: &str,
    dataset: &Dataset,
    build: &IntentBuilder<'_>,
) -> Result<Intent> {
    let intent = build(dataset)?;
    check_written_format(&intent)?;
    if intent.dataset_id != dataset_id || intent.phase != IntentPhase::Armed {
        return Err(MendError::invalid(format!(
            "a commit begins with an armed intent of its own dataset {dataset_id}, not a {:?} \
             intent of dataset {}",
            intent.phase, intent.dataset_id
        )));
    }
    Ok(intent)
}

/// Refuses to publish for an intent recovery abandoned: its owner's lease ran out before it
/// published, and recovery is marking its rows (the fence that confirming the intent was).
pub fn refuse_abandoned(stored: &Intent) -> Result<()> {
    use crate::deliberate_bugs::{self, Bug};
    if stored.phase == IntentPhase::Abandoned && !deliberate_bugs::active(Bug::PublishIgnoresFence)
    {
        return Err(MendError::operation_refused(
            format!(
                "operation {} has ended without publishing: it was fenced (aborted, abandoned by \
                 recovery once its lease ran out, or rolled back by exclusive recovery), so it \
                 never publishes; commit again",
                stored.operation_id
            ),
            &stored.operation_id,
            crate::error::OperationFound::Ended,
        ));
    }
    Ok(())
}

/// Refuses a publish of `request` to settle `intent` of another dataset.
pub(super) fn same_dataset(intent: &Intent, request: &PublishRequest) -> Result<()> {
    if request.dataset_id != intent.dataset_id {
        return Err(MendError::invalid(format!(
            "operation {} of dataset {} cannot publish to dataset {}",
            intent.operation_id, intent.dataset_id, request.dataset_id
        )));
    }
    Ok(())
}

/// What a begin looks for and records of its operation, by key (the engine's
/// `op:<id>:<step>` records, [`crate::catalog::recorded`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct OperationRecords<'a> {
    /// Keys whose record says the operation began or ended before: with any of them recorded,
    /// the begin is refused ([`OperationFound::Ended`](crate::error::OperationFound::Ended))
    /// and writes nothing. A begin sent again while its intent is there is `AlreadyExists`
    /// first.
    pub refused_by: &'a [&'a str],
    /// Recorded in the begin's own step (unless its key is recorded already): that the
    /// operation began, on record once its intent is gone.
    pub begun: Option<&'a RecordedRequest>,
}

/// The splits of a create-only stage's outcome that it did not insert: another writer's.
pub fn taken_splits(splits: &[StagedSplit]) -> Vec<String> {
    splits
        .iter()
        .filter(|split| split.outcome != StageOutcome::Inserted)
        .map(|split| split.split_id.clone())
        .collect()
}

/// The refusal of a begin that could not own every row it plans: nothing was written.
pub fn refuse_taken(taken: Vec<String>) -> MendError {
    MendError::failed_precondition(
        format!(
            "splits another writer staged or published first: {}; nothing was written",
            taken.join(", ")
        ),
        taken,
    )
}

/// The refusal of a begin of an operation that ended already (its record kept under `key`).
pub fn refuse_ended(operation_id: &str, key: &str) -> MendError {
    MendError::operation_refused(
        format!(
            "operation {operation_id} has ended already (recorded under {key}): it is never begun again; begin a new operation with a new id"
        ),
        operation_id,
        crate::error::OperationFound::Ended,
    )
}

/// [`Catalog::begin_commit`] as separate steps: read the dataset, look for the records of
/// an end, write the intent, stage; a row taken undoes the rows it inserted and the intent.
pub(super) async fn begin_in_steps<C: Catalog + ?Sized>(
    catalog: &C,
    dataset_id: &str,
    build: &IntentBuilder<'_>,
    requested: &[Arc<NewSplit>],
    planner: &StagePlanner<'_>,
    records: OperationRecords<'_>,
    now_ms: TimestampMs,
) -> Result<BegunCommit> {
    let dataset = catalog.dataset(dataset_id).await?;
    let intent = built_intent(dataset_id, &dataset, build)?;
    let taken = catalog.list_intents(dataset_id).await?;
    if taken
        .iter()
        .any(|stored| stored.operation_id == intent.operation_id)
    {
        return Err(MendError::AlreadyExists {
            kind: EntityKind::Intent,
            id: intent.operation_id.clone(),
        });
    }
    for key in records.refused_by {
        if catalog.recorded_request(dataset_id, key).await?.is_some() {
            return Err(refuse_ended(&intent.operation_id, key));
        }
    }
    catalog.put_intent(&intent).await?;
    let splits = catalog
        .stage(
            dataset_id,
            StageMode::CreateOnly,
            requested,
            planner,
            now_ms,
            None,
        )
        .await?;
    let taken = taken_splits(&splits);
    if !taken.is_empty() {
        let own: Vec<String> = splits
            .iter()
            .filter(|split| split.outcome == StageOutcome::Inserted)
            .map(|split| split.split_id.clone())
            .collect();
        // Its own rows while still staged: none has an object yet.
        let marked = catalog
            .mark_stale_staged(dataset_id, &own, TimestampMs::MAX, now_ms)
            .await?;
        if !marked.is_empty() {
            catalog
                .delete_splits(dataset_id, &marked, now_ms, None)
                .await?;
        }
        catalog
            .delete_intent(dataset_id, &intent.operation_id, now_ms)
            .await?;
        return Err(refuse_taken(taken));
    }
    if let Some(begun) = records.begun {
        catalog.record_request(dataset_id, begun).await?;
    }
    Ok(BegunCommit {
        dataset,
        intent,
        splits,
    })
}

/// [`Catalog::publish_commit`] as separate steps: the record of `key` if the publish landed
/// already; otherwise confirm the intent (which fails once recovery abandoned it), publish
/// under `key`, delete the intent.
pub(super) async fn publish_in_steps<C: Catalog + ?Sized>(
    catalog: &C,
    intent: &Intent,
    request: &PublishRequest,
    validate: &PublishValidator<'_>,
    now_ms: TimestampMs,
    key: &RequestKey,
) -> Result<PublishResult> {
    same_dataset(intent, request)?;
    let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
    let published = match catalog.recorded_request(dataset_id, &key.key).await? {
        Some(found) => found.replay(key)?,
        None => {
            let confirmed = Intent {
                phase: IntentPhase::EffectsConfirmed,
                updated_at_ms: now_ms,
                ..intent.clone()
            };
            match catalog.update_intent(&confirmed, IntentPhase::Armed).await {
                Ok(()) => {}
                // Confirmed already (a step retried after its confirmation landed): publish.
                Err(MendError::FailedPrecondition { .. })
                    if stored_phase(catalog, dataset_id, operation_id).await?
                        == Some(IntentPhase::EffectsConfirmed) => {}
                Err(error) => return Err(error),
            }
            catalog
                .publish(request, validate, now_ms, Some(key))
                .await?
        }
    };
    match catalog
        .delete_intent(dataset_id, operation_id, now_ms)
        .await
    {
        Ok(())
        | Err(MendError::NotFound {
            kind: EntityKind::Intent,
            ..
        }) => Ok(published),
        Err(error) => Err(error),
    }
}

async fn stored_phase<C: Catalog + ?Sized>(
    catalog: &C,
    dataset_id: &str,
    operation_id: &str,
) -> Result<Option<IntentPhase>> {
    Ok(catalog
        .list_intents(dataset_id)
        .await?
        .into_iter()
        .find(|intent| intent.operation_id == operation_id)
        .map(|intent| intent.phase))
}

//! Settling intents in batches: what a recovery sweep hands its catalog when it executes many
//! decisions at once ([`Catalog::settle_intents`]).
//!
//! A [`Settlement`] is what one decision writes to the catalog: a roll-forward's publish
//! (recorded under the operation's publish key) and the delete of its intent; a stale
//! intent's delete; an abandonment's marks and the delete of its intent. A batch holds
//! settlements of distinct operations touching disjoint splits, at most [`MAX_SETTLEMENTS`].
//!
//! The batch's meaning is the one of its settlements applied one after another, in order, each
//! on the state the ones before it left (only the checkpoint and the manifest version carry
//! from one to the next: the splits are disjoint). `plan` computes it once for every backend,
//! on what the backend read inside its atomic step (a `SettleView`); the backend writes the
//! result (a `SettlePlan`) in the same step. `one_at_a_time` is the trait's default for a
//! backend that has no atomic step for a batch: the old steps, one after another.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::catalog::CatalogExt;
use crate::catalog::{Catalog, PublishObservation, RecordedRequest, RequestKey, sorted_distinct};
use crate::error::{EntityKind, MendError, Result};
use crate::intent::{Intent, IntentPhase};
use crate::model::{Dataset, PublishRequest, PublishResult, SplitState, TimestampMs};

/// The most settlements one [`Catalog::settle_intents`] call may carry: a batch is one
/// transaction or one log commit, and its size bounds the statement, the commit file and the
/// time the dataset's lock is held.
pub const MAX_SETTLEMENTS: usize = 1_000;

/// The capability of a backend that applies a whole batch of
/// [`Catalog::settle_intents`] in one atomic step (one transaction, one commit), all of it or
/// nothing. A backend that keeps the trait's default, which applies the settlements one at a
/// time, must not claim it; the conformance suite holds a backend that claims it to it.
pub const SETTLE_ATOMIC: &str = "settle.atomic";

/// What settling one operation's intent writes to the catalog.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// A roll-forward: `request` published as [`Catalog::publish`] would publish it, its
    /// result recorded under `key`, and the intent deleted. A `key` recorded already answers
    /// its recorded result and publishes nothing (the operation's writer published it); the
    /// intent, if it is still there, is deleted. Otherwise the intent must still be there and
    /// not `Abandoned`: an operation that ended another way (aborted, abandoned) never
    /// publishes, and the batch is refused with `FailedPrecondition` naming it.
    Publish {
        /// The operation whose intent it settles.
        operation_id: String,
        /// The publish the intent plans, with the fencing epoch the sweep read.
        request: PublishRequest,
        /// The operation's own publish key, so that its writer asking again is answered.
        key: RequestKey,
    },
    /// A stale intent (its effects are all visible, or there were none to make): deleted.
    /// An intent already gone is fine.
    Discard {
        /// The operation whose intent it deletes.
        operation_id: String,
    },
    /// An abandonment: the intent, still `Armed` with its lease run out at or before
    /// `lease_expired_by` (or `Abandoned` already, if the sweep observed it so), is deleted,
    /// and the rows of `mark` that
    /// are still staged are marked for deletion (checked at the write: a row published or
    /// marked meanwhile is left alone). A live lease, a confirmed intent, or one the sweep
    /// observed `Armed` and another step abandoned since (its writer's abort, another sweep)
    /// refuses the batch with `FailedPrecondition` naming the operation. An intent already
    /// gone is fine: it marks nothing and settles as [`Settled::Gone`].
    Abandon {
        /// The operation whose intent it settles.
        operation_id: String,
        /// The phase the sweep observed it in: `Armed`, or `Abandoned` (fenced earlier).
        observed: crate::intent::IntentPhase,
        /// The sweep's time: the lease must have run out by then.
        lease_expired_by: TimestampMs,
        /// The operation's own rows, which no other intent names.
        mark: Vec<String>,
        /// The record that the operation ended, written in the same step unless its key is
        /// recorded already (an abort recorded it first): a begin of the operation still on
        /// its way looks for it, and is refused as ended rather than begin it again.
        end: RecordedRequest,
    },
}

impl Settlement {
    /// The idempotency key it records: a publish's, an abandonment's end record.
    pub fn record_key(&self) -> Option<&str> {
        match self {
            Self::Publish { key, .. } => Some(&key.key),
            Self::Discard { .. } => None,
            Self::Abandon { end, .. } => Some(&end.key),
        }
    }

    /// The operation whose intent it settles.
    pub fn operation_id(&self) -> &str {
        match self {
            Self::Publish { operation_id, .. }
            | Self::Discard { operation_id }
            | Self::Abandon { operation_id, .. } => operation_id,
        }
    }

    /// Every split it may write: the publish's staged and replaced splits, the abandonment's
    /// marks.
    pub fn split_ids(&self) -> Vec<&String> {
        match self {
            Self::Publish { request, .. } => request
                .staged_split_ids
                .iter()
                .chain(&request.replaced_split_ids)
                .collect(),
            Self::Discard { .. } => Vec::new(),
            Self::Abandon { mark, .. } => mark.iter().collect(),
        }
    }
}

/// What settling one intent did, in the order of the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The publish's result: the one it made, or the one recorded under its key before.
    Published(PublishResult),
    /// The intent was deleted (or was gone already).
    Discarded,
    /// The abandonment's rows that this step marked.
    Abandoned {
        /// The rows it marked, sorted.
        marked: Vec<String>,
    },
    /// An abandonment whose intent was gone: the operation was settled another way first (its
    /// writer published or aborted it, another sweep settled it), and nothing was written for
    /// it. Not "abandoned": the operation may well have published.
    Gone,
}

/// Called by a backend inside its atomic step for each publish of a batch, with the request
/// and what the backend observed for it (on the state the settlements before it left); an
/// error refuses the whole batch, with nothing written.
pub type SettleValidator<'a> = dyn ValidatePublishes + 'a;

/// What a [`SettleValidator`] does: validates one publish, or several at once. Every closure
/// `Fn(&PublishRequest, &PublishObservation) -> Result<()>` is one, validating a batch one
/// publish at a time; the engine's asks its policy once for a whole batch (ABI 1.4).
pub trait ValidatePublishes: Send + Sync {
    /// The verdict on one publish.
    fn validate(&self, request: &PublishRequest, observation: &PublishObservation) -> Result<()>;

    /// The verdicts on several publishes, which do not depend on one another: one per
    /// publish, in order.
    fn validate_all(
        &self,
        publishes: &[(&PublishRequest, &PublishObservation)],
    ) -> Vec<Result<()>> {
        publishes
            .iter()
            .map(|(request, observation)| self.validate(request, observation))
            .collect()
    }
}

impl<F> ValidatePublishes for F
where
    F: Fn(&PublishRequest, &PublishObservation) -> Result<()> + Send + Sync,
{
    fn validate(&self, request: &PublishRequest, observation: &PublishObservation) -> Result<()> {
        self(request, observation)
    }
}

/// Refuses a batch, before anything is read, that is too large, names another dataset, names
/// an operation twice or names a split in two settlements (`InvalidArgument`).
pub fn check_batch(dataset_id: &str, settlements: &[Settlement]) -> Result<()> {
    if settlements.len() > MAX_SETTLEMENTS {
        return Err(MendError::invalid(format!(
            "a batch settles at most {MAX_SETTLEMENTS} intents, not {}; split it",
            settlements.len()
        )));
    }
    let mut operations = BTreeSet::new();
    let mut splits: HashMap<&str, &str> = HashMap::new();
    for settlement in settlements {
        let operation_id = settlement.operation_id();
        if !operations.insert(operation_id) {
            return Err(MendError::invalid(format!(
                "operation {operation_id} is settled twice in one batch"
            )));
        }
        if let Settlement::Publish { request, .. } = settlement
            && request.dataset_id != dataset_id
        {
            return Err(MendError::invalid(format!(
                "the publish of operation {operation_id} names dataset {}, not {dataset_id}",
                request.dataset_id
            )));
        }
        // A split may appear twice within one publish (ids are folded there), not across two.
        let own: BTreeSet<&String> = settlement.split_ids().into_iter().collect();
        for split_id in own {
            if let Some(other) = splits.insert(split_id, operation_id) {
                return Err(MendError::invalid(format!(
                    "split {split_id} is named by the settlements of operations {other} and {operation_id}; a batch settles operations on disjoint splits"
                )));
            }
        }
    }
    Ok(())
}

/// An intent as a backend read it for a batch, inside its atomic step.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SeenIntent {
    pub phase: IntentPhase,
    /// The whole intent: read for abandonments (the lease is checked), `None` otherwise.
    pub intent: Option<Intent>,
}

/// What a backend read inside its atomic step for a batch.
#[derive(Debug, Clone, Default)]
pub(crate) struct SettleView {
    /// The dataset, locked.
    pub dataset: Option<Dataset>,
    /// The state of every split a settlement names that exists.
    pub rows: HashMap<String, SplitState>,
    /// The intents of the settled operations that exist.
    pub intents: HashMap<String, SeenIntent>,
    /// The records of the settlements' keys that are recorded (publishes', abandonments' ends).
    pub recorded: HashMap<String, RecordedRequest>,
}

/// What a batch writes, for a backend to apply in its atomic step.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SettlePlan {
    /// One per settlement, in order.
    pub outputs: Vec<Settled>,
    /// Staged rows to publish, sorted.
    pub published: Vec<String>,
    /// Published rows the publishes replace, to mark, sorted.
    pub replaced: Vec<String>,
    /// Staged rows of abandoned operations, to mark, sorted.
    pub abandoned_rows: Vec<String>,
    /// Records of the publish keys and the abandonments' ends, in order.
    pub records: Vec<RecordedRequest>,
    /// Intents to delete, sorted.
    pub deleted_intents: Vec<String>,
    /// The dataset after (checkpoint, manifest version, update time), if it changed.
    pub dataset: Option<Dataset>,
}

impl SettlePlan {
    /// Whether applying it writes nothing at all.
    pub fn writes_nothing(&self) -> bool {
        self.published.is_empty()
            && self.replaced.is_empty()
            && self.abandoned_rows.is_empty()
            && self.records.is_empty()
            && self.deleted_intents.is_empty()
            && self.dataset.is_none()
    }
}

/// The batch's effects on `view`, each settlement decided as if it ran alone after the ones
/// before it; the first refusal refuses the whole batch, with nothing to write. `view` must
/// hold the dataset and what it read of every split, intent and key the settlements name
/// ([`check_batch`] passed).
///
/// Over 100 lines: one arm per kind of settlement, in the order the batch applies them;
/// split, each arm would need the whole plan and view handed to it.
pub(crate) fn plan(
    view: &SettleView,
    settlements: &[Settlement],
    validate: &SettleValidator<'_>,
    now_ms: TimestampMs,
) -> Result<SettlePlan> {
    let original = view.dataset.as_ref().ok_or_else(|| MendError::Corrupt {
        message: "a batch was planned without its dataset".into(),
    })?;
    let mut dataset = original.clone();
    let mut plan = SettlePlan {
        outputs: Vec::with_capacity(settlements.len()),
        published: Vec::new(),
        replaced: Vec::new(),
        abandoned_rows: Vec::new(),
        records: Vec::new(),
        deleted_intents: Vec::new(),
        dataset: None,
    };
    let state = |split_id: &String| view.rows.get(split_id).copied();
    let mut validated = validate_ahead(view, original, settlements, validate).into_iter();
    for settlement in settlements {
        let ahead = validated.next().flatten();
        let operation_id = settlement.operation_id();
        let intent = view.intents.get(operation_id);
        let output = match settlement {
            Settlement::Publish { request, key, .. } => {
                if let Some(found) = view.recorded.get(&key.key) {
                    found.replay(key).map(Settled::Published)?
                } else {
                    match intent.map(|seen| seen.phase) {
                        None => {
                            return Err(MendError::failed_precondition(
                                format!(
                                    "operation {operation_id} has no intent and did not publish: it ended another way, and is not published"
                                ),
                                vec![operation_id.to_string()],
                            ));
                        }
                        Some(IntentPhase::Abandoned) => {
                            return Err(MendError::failed_precondition(
                                format!(
                                    "operation {operation_id} was abandoned: a fenced operation is never published"
                                ),
                                vec![operation_id.to_string()],
                            ));
                        }
                        Some(_) => {}
                    }
                    let result = publish(&mut dataset, &state, request, validate, ahead, now_ms)?;
                    plan.published.extend(result.published.iter().cloned());
                    plan.replaced.extend(result.marked.iter().cloned());
                    plan.records
                        .push(RecordedRequest::new(key, &result, now_ms));
                    Settled::Published(result)
                }
            }
            Settlement::Discard { .. } => Settled::Discarded,
            Settlement::Abandon {
                observed,
                lease_expired_by,
                mark,
                end,
                ..
            } => match intent {
                None => Settled::Gone,
                Some(seen) => {
                    let stored = seen.intent.as_ref().ok_or_else(|| MendError::Corrupt {
                        message: format!(
                            "the intent of operation {operation_id} was not read for its abandonment"
                        ),
                    })?;
                    let fenced_earlier = *observed == crate::intent::IntentPhase::Abandoned
                        && stored.phase == crate::intent::IntentPhase::Abandoned;
                    if !fenced_earlier {
                        crate::intent::abandonable(stored, Some(*lease_expired_by))?;
                    }
                    let marked: Vec<String> = sorted_distinct(mark)
                        .into_iter()
                        .filter(|id| state(id) == Some(SplitState::Staged))
                        .collect();
                    if !marked.is_empty() {
                        bump(&mut dataset, now_ms);
                    }
                    plan.abandoned_rows.extend(marked.iter().cloned());
                    let recorded = view.recorded.contains_key(&end.key)
                        || plan.records.iter().any(|record| record.key == end.key);
                    if !recorded {
                        plan.records.push(end.clone());
                    }
                    Settled::Abandoned { marked }
                }
            },
        };
        if intent.is_some() {
            plan.deleted_intents.push(operation_id.to_string());
        }
        plan.outputs.push(output);
    }
    plan.published.sort();
    plan.replaced.sort();
    plan.abandoned_rows.sort();
    plan.deleted_intents.sort();
    if dataset != *original {
        plan.dataset = Some(dataset);
    }
    Ok(plan)
}

/// What validating a publish ahead of the batch's pass found: the observation it was shown
/// and the validator's answer.
type ValidatedAhead = (PublishObservation, Result<()>);

/// The observation a publish of a batch is validated on: its rows as read (the batch's splits
/// are disjoint, so no settlement before it changed them) and the dataset as the settlements
/// before it left it.
fn observation(
    dataset: &Dataset,
    state: &impl Fn(&String) -> Option<SplitState>,
    request: &PublishRequest,
) -> PublishObservation {
    let observed = sorted_distinct(
        request
            .staged_split_ids
            .iter()
            .chain(&request.replaced_split_ids),
    );
    PublishObservation {
        rows: observed
            .iter()
            .filter_map(|id| {
                state(id).map(|state| crate::catalog::ExistingRow {
                    split_id: id.clone(),
                    state,
                })
            })
            .collect(),
        checkpoint: dataset.checkpoint.clone(),
        publish_token: dataset.publish_token.clone(),
        fencing_epoch: dataset.fencing_epoch,
    }
}

/// Batches with fewer publishes than this validate them on the calling thread.
const MIN_PUBLISHES_PER_THREAD: usize = 64;
/// The most threads a batch's validation takes.
const MAX_VALIDATION_THREADS: usize = 4;

/// Runs the validator of every publish [`plan`] will reach, on the observation it will show
/// it, all at once ([`ValidatePublishes::validate_all`]: the engine's asks its policy once for
/// them, where a question each cost a fresh sandbox each), split over a few threads when there
/// are many: the answers do not depend on one another. The checkpoint is the only state
/// one publish of a batch passes to the next (the splits are disjoint), so each observation is
/// known ahead, as long as every publish before it succeeds; past a publish that would fail
/// there is nothing to validate, since the batch fails there. One entry per settlement;
/// [`plan`] still checks that each observation is the one it builds, and asks again if not.
fn validate_ahead(
    view: &SettleView,
    original: &Dataset,
    settlements: &[Settlement],
    validate: &SettleValidator<'_>,
) -> Vec<Option<ValidatedAhead>> {
    let state = |split_id: &String| view.rows.get(split_id).copied();
    let mut dataset = original.clone();
    let mut jobs: Vec<(usize, &PublishRequest, PublishObservation)> = Vec::new();
    for (index, settlement) in settlements.iter().enumerate() {
        let Settlement::Publish {
            operation_id,
            request,
            key,
        } = settlement
        else {
            continue;
        };
        if view.recorded.contains_key(&key.key) {
            continue;
        }
        let publishable = view
            .intents
            .get(operation_id)
            .is_some_and(|seen| seen.phase != IntentPhase::Abandoned);
        if !publishable {
            break;
        }
        jobs.push((index, request, observation(&dataset, &state, request)));
        if let Some(delta) = &request.checkpoint_delta {
            match crate::catalog::checkpoint_after(&dataset.checkpoint, delta) {
                Ok(checkpoint) => dataset.checkpoint = checkpoint,
                Err(_) => break,
            }
        }
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(MAX_VALIDATION_THREADS)
        .min(jobs.len() / MIN_PUBLISHES_PER_THREAD)
        .max(1);
    let validate_part = |part: &[(usize, &PublishRequest, PublishObservation)]| {
        let publishes: Vec<(&PublishRequest, &PublishObservation)> = part
            .iter()
            .map(|(_, request, observation)| (*request, observation))
            .collect();
        validate.validate_all(&publishes)
    };
    let answers: Vec<Result<()>> = if threads == 1 {
        validate_part(&jobs)
    } else {
        let per_thread = jobs.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let running: Vec<_> = jobs
                .chunks(per_thread)
                .map(|part| scope.spawn(move || validate_part(part)))
                .collect();
            running
                .into_iter()
                .flat_map(|thread| {
                    thread
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    };
    let mut ahead: Vec<Option<ValidatedAhead>> = settlements.iter().map(|_| None).collect();
    for ((index, _, observation), answer) in jobs.into_iter().zip(answers) {
        ahead[index] = Some((observation, answer));
    }
    ahead
}

/// One publish of a batch on `dataset` as the ones before it left it, in the order of checks
/// of both backends' `publish`; moves `dataset` on when it changes anything. `ahead` is its
/// validation made ahead ([`validate_ahead`]), used if it saw the very observation this pass
/// builds.
fn publish(
    dataset: &mut Dataset,
    state: &impl Fn(&String) -> Option<SplitState>,
    request: &PublishRequest,
    validate: &SettleValidator<'_>,
    ahead: Option<ValidatedAhead>,
    now_ms: TimestampMs,
) -> Result<PublishResult> {
    let observed = observation(dataset, state, request);
    match ahead {
        Some((seen, answer)) if seen == observed => answer?,
        _ => validate.validate(request, &observed)?,
    }
    let Some(effects) = crate::catalog::publish_effects(dataset, request, |id| Ok(state(id)))?
    else {
        return Ok(PublishResult {
            dataset_id: dataset.dataset_id.clone(),
            manifest_version: dataset.manifest_version,
            published: Vec::new(),
            marked: Vec::new(),
        });
    };
    dataset.checkpoint = effects.checkpoint;
    bump(dataset, now_ms);
    Ok(PublishResult {
        dataset_id: dataset.dataset_id.clone(),
        manifest_version: dataset.manifest_version,
        published: effects.staged,
        marked: effects.replaced,
    })
}

/// A change to the published view: the manifest version moves on, as each step of the batch
/// would have moved it alone.
fn bump(dataset: &mut Dataset, now_ms: TimestampMs) {
    dataset.manifest_version += 1;
    dataset.updated_at_ms = now_ms;
}

/// The trait's default [`Catalog::settle_intents`]: each settlement as the catalog's own
/// single steps, one after another (publish under its key, abandon, mark, delete the intent),
/// stopping at the first failure. Each step is atomic; the batch is not: settlements before a
/// failure stay done. The engine copes (every step is safe to repeat, and it settles one at a
/// time after a batch fails), but such a backend must not claim [`SETTLE_ATOMIC`].
///
/// Over 100 lines: one arm per kind of settlement, each the catalog's steps for it in order.
pub async fn one_at_a_time<C: Catalog + ?Sized>(
    catalog: &C,
    dataset_id: &str,
    settlements: &[Settlement],
    validate: &SettleValidator<'_>,
    now_ms: TimestampMs,
) -> Result<Vec<Settled>> {
    check_batch(dataset_id, settlements)?;
    if settlements.is_empty() {
        catalog.dataset(dataset_id).await?;
        return Ok(Vec::new());
    }
    let intents: BTreeMap<String, Intent> = catalog
        .list_intents(dataset_id)
        .await?
        .into_iter()
        .map(|intent| (intent.operation_id.clone(), intent))
        .collect();
    let mut outputs = Vec::with_capacity(settlements.len());
    for settlement in settlements {
        let operation_id = settlement.operation_id();
        let output = match settlement {
            Settlement::Publish { request, key, .. } => {
                let phase = intents.get(operation_id).map(|intent| intent.phase);
                let recorded = catalog.recorded_request(dataset_id, &key.key).await?;
                let result = match (recorded, phase) {
                    (Some(found), _) => found.replay(key)?,
                    (None, None | Some(IntentPhase::Abandoned)) => {
                        return Err(MendError::operation_refused(
                            format!(
                                "operation {operation_id} has ended without publishing (its intent is gone or abandoned); it is not published"
                            ),
                            operation_id,
                            crate::error::OperationFound::Ended,
                        ));
                    }
                    (None, Some(_)) => {
                        let validator = |observation: &PublishObservation| {
                            validate.validate(request, observation)
                        };
                        catalog
                            .publish(request, &validator, now_ms, Some(key))
                            .await?
                    }
                };
                Settled::Published(result)
            }
            Settlement::Discard { .. } => Settled::Discarded,
            Settlement::Abandon {
                observed,
                lease_expired_by,
                mark,
                end,
                ..
            } => {
                // Observed fenced earlier, it is abandoned whatever its lease (it stays so).
                let lease_expired_by = (*observed != crate::intent::IntentPhase::Abandoned)
                    .then_some(*lease_expired_by);
                let abandoned = catalog
                    .abandon_intent(dataset_id, operation_id, lease_expired_by, now_ms)
                    .await;
                match abandoned {
                    Err(MendError::NotFound {
                        kind: EntityKind::Intent,
                        ..
                    }) => Settled::Gone,
                    Err(error) => return Err(error),
                    Ok(_) => {
                        let marked = if mark.is_empty() {
                            Vec::new()
                        } else {
                            catalog
                                .mark_stale_staged(dataset_id, mark, TimestampMs::MAX, now_ms)
                                .await?
                        };
                        // Before the intent goes (an abort may have recorded it already).
                        if catalog
                            .recorded_request(dataset_id, &end.key)
                            .await?
                            .is_none()
                        {
                            catalog.record_request(dataset_id, end).await?;
                        }
                        Settled::Abandoned { marked }
                    }
                }
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
            }) => {}
            Err(error) => return Err(error),
        }
        outputs.push(output);
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CheckpointDelta, PartitionDelta};

    fn dataset() -> Dataset {
        Dataset {
            dataset_id: "ds".into(),
            uid: "uid".into(),
            config: Default::default(),
            config_version: 1,
            checkpoint: Default::default(),
            manifest_version: 1,
            publish_token: None,
            fencing_epoch: 0,
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }

    fn key(operation_id: &str) -> RequestKey {
        RequestKey::new(format!("op:{operation_id}:publish"), &operation_id)
    }

    /// A publish of `staged`, moving partition `p` from `delta.0` (none when `None`) to `delta.1`.
    fn publish_of(
        operation_id: &str,
        staged: &[&str],
        delta: Option<(Option<u64>, u64)>,
    ) -> Settlement {
        Settlement::Publish {
            operation_id: operation_id.into(),
            request: PublishRequest {
                dataset_id: "ds".into(),
                staged_split_ids: staged.iter().map(|id| id.to_string()).collect(),
                replaced_split_ids: Vec::new(),
                checkpoint_delta: delta.map(|(from, to)| CheckpointDelta {
                    source: "src".into(),
                    partitions: vec![PartitionDelta {
                        partition: "p".into(),
                        from_position: from,
                        to_position: to,
                    }],
                }),
                publish_token: None,
                fencing_epoch: None,
            },
            key: key(operation_id),
        }
    }

    fn view(staged: &[&str], operations: &[&str]) -> SettleView {
        SettleView {
            dataset: Some(dataset()),
            rows: staged
                .iter()
                .map(|id| (id.to_string(), SplitState::Staged))
                .collect(),
            intents: operations
                .iter()
                .map(|id| {
                    let seen = SeenIntent {
                        phase: IntentPhase::Armed,
                        intent: None,
                    };
                    (id.to_string(), seen)
                })
                .collect(),
            recorded: HashMap::new(),
        }
    }

    fn accept(_: &PublishRequest, _: &PublishObservation) -> Result<()> {
        Ok(())
    }

    /// Checkpoint deltas chain through the batch as they would one publish after another, and
    /// each publish reports the manifest version it made.
    #[test]
    fn publishes_chain_checkpoints_and_manifest_versions() {
        let batch = [
            publish_of("a", &["s1"], Some((None, 10))),
            publish_of("b", &["s2"], Some((Some(10), 20))),
        ];
        let planned = plan(&view(&["s1", "s2"], &["a", "b"]), &batch, &accept, 7).unwrap();
        let versions: Vec<u64> = planned
            .outputs
            .iter()
            .map(|output| match output {
                Settled::Published(result) => result.manifest_version,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(versions, [2, 3]);
        let after = planned.dataset.unwrap();
        assert_eq!(after.manifest_version, 3);
        assert_eq!(after.checkpoint["src"]["p"], 20);
        assert_eq!(planned.published, ["s1", "s2"]);
        assert_eq!(planned.deleted_intents, ["a", "b"]);
        assert_eq!(planned.records.len(), 2);

        // The second delta out of order refuses the whole batch.
        let batch = [
            publish_of("a", &["s1"], Some((Some(10), 20))),
            publish_of("b", &["s2"], Some((None, 10))),
        ];
        let refused = plan(&view(&["s1", "s2"], &["a", "b"]), &batch, &accept, 7).unwrap_err();
        assert!(
            matches!(refused, MendError::FailedPrecondition { .. }),
            "{refused:?}"
        );
    }

    /// Validated several at a time, each publish is still shown the checkpoint the ones
    /// before it left, and the first refusal in the batch's order is the batch's error.
    #[test]
    fn publishes_validated_ahead_see_the_checkpoint_of_their_place() {
        let count = 4 * MIN_PUBLISHES_PER_THREAD;
        let ids: Vec<String> = (0..count).map(|i| format!("s{i:04}")).collect();
        let operations: Vec<String> = (0..count).map(|i| format!("op{i:04}")).collect();
        let batch: Vec<Settlement> = (0..count)
            .map(|i| {
                let from = (i > 0).then_some(i as u64);
                publish_of(
                    &operations[i],
                    &[ids[i].as_str()],
                    Some((from, i as u64 + 1)),
                )
            })
            .collect();
        let staged: Vec<&str> = ids.iter().map(String::as_str).collect();
        let ops: Vec<&str> = operations.iter().map(String::as_str).collect();
        let seen = std::sync::Mutex::new(Vec::new());
        let seen = &seen;
        let refuse_from = |refused: Option<usize>| {
            move |request: &PublishRequest, observation: &PublishObservation| {
                let index: usize = request.staged_split_ids[0][1..].parse().unwrap();
                let position = observation
                    .checkpoint
                    .get("src")
                    .and_then(|positions| positions.get("p"))
                    .copied();
                seen.lock().unwrap().push((index, position));
                match refused {
                    Some(refused) if index >= refused => Err(MendError::PolicyRejected {
                        message: format!("no {index}"),
                    }),
                    _ => Ok(()),
                }
            }
        };
        let planned = plan(&view(&staged, &ops), &batch, &refuse_from(None), 7).unwrap();
        assert_eq!(
            planned.dataset.unwrap().checkpoint["src"]["p"],
            count as u64
        );
        let mut shown = std::mem::take(&mut *seen.lock().unwrap());
        shown.sort();
        let expected: Vec<(usize, Option<u64>)> = (0..count)
            .map(|i| (i, (i > 0).then_some(i as u64)))
            .collect();
        assert_eq!(
            shown, expected,
            "each asked once, on the checkpoint of its place"
        );

        let refused = plan(&view(&staged, &ops), &batch, &refuse_from(Some(100)), 7).unwrap_err();
        assert!(
            matches!(&refused, MendError::PolicyRejected { message } if message == "no 100"),
            "{refused:?}"
        );
    }

    /// A publish whose intent is gone or abandoned is refused, unless its key answers.
    #[test]
    fn a_publish_needs_its_live_intent_or_its_record() {
        let batch = [publish_of("a", &["s1"], None)];
        let gone = plan(&view(&["s1"], &[]), &batch, &accept, 7).unwrap_err();
        assert!(
            matches!(&gone, MendError::FailedPrecondition { ids, .. } if ids == &["a"]),
            "{gone:?}"
        );
        let mut fenced = view(&["s1"], &["a"]);
        fenced.intents.get_mut("a").unwrap().phase = IntentPhase::Abandoned;
        assert!(plan(&fenced, &batch, &accept, 7).is_err());

        let mut answered = view(&["s1"], &[]);
        let earlier = PublishResult {
            dataset_id: "ds".into(),
            manifest_version: 5,
            published: vec!["s1".into()],
            marked: Vec::new(),
        };
        answered
            .recorded
            .insert(key("a").key, RecordedRequest::new(&key("a"), &earlier, 1));
        let planned = plan(&answered, &batch, &accept, 7).unwrap();
        assert_eq!(planned.outputs, [Settled::Published(earlier)]);
        assert!(planned.writes_nothing(), "{planned:?}");
    }

    #[test]
    fn batches_are_checked_before_anything_is_read() {
        let twice = [
            publish_of("a", &["s1"], None),
            Settlement::Discard {
                operation_id: "a".into(),
            },
        ];
        assert!(check_batch("ds", &twice).is_err());
        let overlapping = [
            publish_of("a", &["s1", "s1"], None),
            Settlement::Abandon {
                operation_id: "b".into(),
                observed: crate::intent::IntentPhase::Armed,
                lease_expired_by: 0,
                mark: vec!["s1".into()],
                end: RecordedRequest::new(&key("b-end"), &"ended", 0),
            },
        ];
        assert!(check_batch("ds", &overlapping).is_err());
        assert!(check_batch("ds", &overlapping[..1]).is_ok());
        assert!(check_batch("other", &overlapping[..1]).is_err());
        let too_many: Vec<Settlement> = (0..=MAX_SETTLEMENTS)
            .map(|i| Settlement::Discard {
                operation_id: format!("op-{i}"),
            })
            .collect();
        assert!(check_batch("ds", &too_many).is_err());
    }
}

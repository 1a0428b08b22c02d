//! The commit operation: stage rows, upload their objects, publish them with a checkpoint
//! delta, with an intent written before the first effect. A merge is the same operation
//! publishing its new splits in place of the splits it replaces (which become marked), with
//! no checkpoint delta.
//!
//! Steps, each a durable write passing through the fault seam:
//!
//! 1. **begin** ([`Catalog::begin_commit`](crate::catalog::Catalog::begin_commit)): one
//!    atomic step that reads the dataset, writes the intent (`Armed`: every row, object (size
//!    and payload checksum) and the publish it plans, and the state it expects) and stages the
//!    rows create-only; a row someone else holds fails the commit, after undoing only this
//!    commit's own rows;
//! 2. **upload** each object put-if-absent, with its recovery metadata embedded,
//!    [`UPLOADS_IN_FLIGHT`] at a time;
//! 3. **publish** ([`Catalog::publish_commit`](crate::catalog::Catalog::publish_commit)): one
//!    atomic step that publishes, records the result under the operation's key and deletes
//!    the intent, only while the intent is there and not abandoned.
//!
//! On an object store that is two log versions and, with the uploads in between, three
//! rounds of requests one after another (each log version is one put-if-absent on the state
//! the catalog last read or wrote, with no look first); in Postgres two transactions.
//!
//! **Why there is no confirmation step.** A commit used to move its intent to
//! `EffectsConfirmed` between its uploads and its publish: five catalog writes in all
//! (intent, stage, confirm, publish, delete intent). The confirmation did two things, and
//! both are done without it:
//!
//! - *It told recovery that every effect was in place.* Recovery never took its word for
//!   that: it reads every planned object's header (size, payload checksum, and the operation
//!   id, so an object of another operation never counts), because an object deleted or
//!   replaced since must never be published (invariant 1); and it rolls an `Armed` commit
//!   forward already when every planned row and object is found as planned and the publish
//!   still applies. Object puts land whole or not at all, so there is no half-uploaded object
//!   to tell from a landed one. What recovery can observe of a commit is exactly what the
//!   confirmation said, and more reliably.
//! - *It fenced the owner against abandonment.* Recovery abandons only an `Armed` intent whose
//!   lease ran out, moving it to `Abandoned` in one atomic step; a confirmation had to find the
//!   intent `Armed`, so once abandoned, the owner could never publish, and once confirmed, it
//!   could no longer be abandoned. The publish step now makes the same check in the same atomic
//!   step as its effect: it publishes only while the intent is there and not `Abandoned`, and
//!   deletes it. Of a publish and an abandonment racing, exactly one lands, as of a
//!   confirmation and an abandonment: an abandonment that lands first makes the publish fail
//!   (`FailedPrecondition`), a publish that lands first leaves nothing to abandon
//!   (`NotFound`). Recovery rolling the commit forward while its owner publishes is settled
//!   by the operation's key: both publish under it, and the second answers the first's
//!   record.
//!
//! So a crash leaves one of four states, each one recovery resolved before the steps were
//! folded: nothing; an `Armed` intent with its rows and some or none of its objects (abandoned
//! once its lease runs out: fenced, its rows marked, its objects left to gc); an `Armed`
//! intent with every object in place (rolled forward: published under the operation's key, and
//! abandoned instead if its publish no longer applies, since nothing of it is visible); or the
//! commit published with its intent gone. A published commit whose intent is left, and a
//! confirmed intent, are no longer left by a commit, but still by an operation of a writer
//! in another process (`operation/`) and by a backend that runs the folded steps one after
//! another (the trait's defaults); recovery resolves them as before.
//!
//! A crash anywhere leaves an intent that [`recovery`](super::recovery) resolves: rolled
//! forward when every effect is in place, otherwise abandoned, or rolled back in exclusive
//! mode.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::Engine;
use super::steps::{expected_state, publish_key};
use crate::catalog::OperationRecords;
use crate::error::{EntityKind, MendError, Result};
use crate::faults::DurableStep;
use crate::intent::{
    Intent, OperationKind, PlannedEffects, PlannedObject, PlannedPublish, PlannedRow,
};
use crate::model::{
    CheckpointDelta, Dataset, PublishRequest, PublishResult, StageMode, StageRequest, StageSplit,
    TimestampMs,
};
use crate::objects::format::{HEADER_FORMAT_VERSION, SplitObjectHeader, sha256};

/// How many of a commit's objects are put at once: enough that a commit of a typical batch
/// (up to 16 splits) waits for one round of puts, however far the store is (each put waits
/// tens of milliseconds on S3), few enough that a commit of large objects holds a bounded
/// share of the store's connections.
const UPLOADS_IN_FLIGHT: usize = 16;

/// One split of a commit: its row and the bytes of its object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitSplit {
    /// The split's id: the commit stages it create-only, so it must be new.
    pub split_id: String,
    /// Its metadata, a JSON object as text.
    pub metadata_json: String,
    /// The object's payload; the header is mend's.
    pub payload: Bytes,
}

/// A commit: new splits, their objects, and a checkpoint delta, published in one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitRequest {
    /// The dataset to commit to.
    pub dataset_id: String,
    /// The node committing, recorded as the intent's owner and in each object.
    pub node: String,
    /// The splits and their payloads.
    pub splits: Vec<CommitSplit>,
    /// The checkpoint delta published with the splits.
    pub checkpoint_delta: Option<CheckpointDelta>,
    /// The token the dataset requires, if it is fenced.
    pub publish_token: Option<String>,
}

/// A merge: new splits, built from `replaced_split_ids`, published in their place in one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeRequest {
    /// The dataset to merge in.
    pub dataset_id: String,
    /// The node merging.
    pub node: String,
    /// The new splits and their payloads.
    pub splits: Vec<CommitSplit>,
    /// Published splits the new ones replace; they become marked for deletion.
    pub replaced_split_ids: Vec<String>,
    /// The token the dataset requires, if it is fenced.
    pub publish_token: Option<String>,
}

/// What a commit or merge did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitResult {
    /// The operation's id (its intent's).
    pub operation_id: String,
    /// The publish that made its splits visible.
    pub publish: PublishResult,
}

impl Engine {
    /// Runs a commit to the end, or fails leaving an intent for recovery (or, when the commit
    /// certainly did nothing, no trace at all).
    #[tracing::instrument(
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %request.dataset_id, operation_id = tracing::field::Empty)
    )]
    pub async fn commit(&self, request: &CommitRequest) -> Result<CommitResult> {
        // Its stage and its publish are decided by the same policy.
        let pinned = self.pinned();
        let committing = pinned.run_commit(OperationKind::Commit, request, &[]);
        self.writing("commit", None, committing).await
    }

    /// Runs a merge to the end, like a commit: the replaced splits must be published, and
    /// become marked for deletion in the same step that publishes the new ones.
    #[tracing::instrument(
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %request.dataset_id, operation_id = tracing::field::Empty)
    )]
    pub async fn merge(&self, request: &MergeRequest) -> Result<CommitResult> {
        if request.replaced_split_ids.is_empty() {
            return Err(MendError::invalid(
                "a merge replaces at least one split; publish new splits with a commit",
            ));
        }
        let commit = CommitRequest {
            dataset_id: request.dataset_id.clone(),
            node: request.node.clone(),
            splits: request.splits.clone(),
            checkpoint_delta: None,
            publish_token: request.publish_token.clone(),
        };
        let pinned = self.pinned();
        let merging = pinned.run_commit(OperationKind::Merge, &commit, &request.replaced_split_ids);
        self.writing("merge", None, merging).await
    }

    async fn run_commit(
        &self,
        kind: OperationKind,
        request: &CommitRequest,
        replaced_split_ids: &[String],
    ) -> Result<CommitResult> {
        let super::staging::StagePlanning {
            splits, planner, ..
        } = self.commit_stage(request)?;
        let planned = PlannedPublish {
            staged_split_ids: request.splits.iter().map(|s| s.split_id.clone()).collect(),
            replaced_split_ids: replaced_split_ids.to_vec(),
            checkpoint_delta: request.checkpoint_delta.clone(),
            publish_token: request.publish_token.clone(),
        };
        let publish =
            |fencing_epoch: Option<u64>| planned.request(&request.dataset_id, fencing_epoch);
        // Checked whole before the first write; with the epoch the dataset is at when the
        // intent is written, once it is known.
        self.check_publish(&publish(Some(0)))?;

        let operation_id = crate::ambient::uuid_v4().to_string();
        tracing::Span::current().record("operation_id", tracing::field::display(&operation_id));
        let now = self.now_ms();
        let lease_ms = self.options.intent_lease_ms;
        let build = |dataset: &Dataset| -> Result<Intent> {
            Ok(commit_intent(
                kind,
                request,
                &planned,
                &operation_id,
                dataset,
                now,
                lease_ms,
            ))
        };
        let begun = self
            .durably(
                DurableStep::BeginCommit,
                self.catalog.begin_commit(
                    &request.dataset_id,
                    &build,
                    &splits,
                    &*planner,
                    OperationRecords::default(),
                    now,
                ),
            )
            .await
            .map_err(|error| match error {
                MendError::FailedPrecondition {
                    ids,
                    operation: None,
                    ..
                } => cannot_own(ids),
                error => error,
            })?;

        // The objects the intent planned, from the very dataset it was built from.
        let headers = object_headers(request, &begun.dataset.uid, &operation_id);
        self.upload_objects(&headers, request).await?;

        // The epoch the commit began under: if exclusive recovery moves it on meanwhile, this
        // writer's publish is refused (invariant 7).
        let publish = publish(Some(begun.dataset.fencing_epoch));
        let published = match self
            .durably(
                DurableStep::PublishCommit,
                self.publish_commit(&begun.intent, &publish),
            )
            .await
        {
            Ok(published) => published,
            Err(refused) if refused.certainly_not_applied() && !refused.is_retryable() => {
                self.end_refused_commit(&begun.intent, refused).await?
            }
            Err(error) => return Err(error),
        };
        tracing::debug!(
            kind = ?kind,
            splits = publish.staged_split_ids.len(),
            replaced = publish.replaced_split_ids.len(),
            manifest_version = published.manifest_version,
            "published"
        );
        Ok(CommitResult {
            operation_id,
            publish: published,
        })
    }

    /// The create-only stage a commit begins with, checked as a stage is (and refused if a
    /// split appears twice), as the splits a backend stages and the planner it calls.
    fn commit_stage(&self, request: &CommitRequest) -> Result<super::staging::StagePlanning> {
        let stage = StageRequest {
            dataset_id: request.dataset_id.clone(),
            mode: StageMode::CreateOnly,
            node: request.node.clone(),
            splits: request
                .splits
                .iter()
                .map(|split| StageSplit {
                    split_id: split.split_id.clone(),
                    metadata_json: split.metadata_json.clone(),
                })
                .collect(),
        };
        let planning = self.stage_planner(&stage)?;
        let mut ids: Vec<&str> = request.splits.iter().map(|s| s.split_id.as_str()).collect();
        ids.sort_unstable();
        if let Some(pair) = ids.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(MendError::invalid(format!(
                "split {} appears twice in one commit",
                pair[0]
            )));
        }
        Ok(planning)
    }

    /// Puts the commit's objects, [`UPLOADS_IN_FLIGHT`] at a time, each put-if-absent and
    /// through the fault seam. Once one fails, those not begun are not begun (as a process
    /// that died would not begin them), and the commit answers once those in flight have
    /// ended, so that nothing of it is still landing when its caller hears of the failure.
    async fn upload_objects(
        &self,
        headers: &[SplitObjectHeader],
        request: &CommitRequest,
    ) -> Result<()> {
        let failed = AtomicBool::new(false);
        // The futures are made up front (they start when first polled): a stream that maps
        // borrowed items lazily would make the commit's future not `Send` for every lifetime,
        // and so not spawnable.
        let uploads: Vec<_> = headers
            .iter()
            .zip(&request.splits)
            .map(|(header, split)| {
                let failed = &failed;
                async move {
                    if failed.load(Ordering::SeqCst) {
                        return Ok(());
                    }
                    let step = DurableStep::PutObject {
                        split_id: header.split_id.clone(),
                    };
                    let put = self
                        .durably(step, self.objects.put_split(header, &split.payload))
                        .await;
                    if put.is_err() {
                        failed.store(true, Ordering::SeqCst);
                    }
                    put.map(|_| ())
                }
            })
            .collect();
        let ended: Vec<Result<()>> = futures::stream::iter(uploads)
            .buffer_unordered(UPLOADS_IN_FLIGHT)
            .collect()
            .await;
        ended.into_iter().collect()
    }

    /// The commit's publish, with the deletion of its intent, in one atomic step. The commit
    /// put every object itself, put-if-absent (the same bytes found in place count as put),
    /// and nothing deletes an object of a live intent's staged row outside exclusive recovery,
    /// which fences this publish first: so the publish looks for none of them again
    /// (invariant 1 holds by the puts).
    async fn publish_commit(
        &self,
        intent: &Intent,
        publish: &PublishRequest,
    ) -> Result<PublishResult> {
        let key = publish_key(&intent.operation_id);
        let validator = self.publish_validator(publish);
        self.catalog
            .publish_commit(intent, publish, &validator, self.now_ms(), &key)
            .await
    }

    /// A commit whose publish was refused (its fencing epoch is stale, its checkpoint delta no
    /// longer applies, a publish token moved on): before it answers that nothing was
    /// published, it fences its intent (`Armed` to `Abandoned`), so that recovery can never
    /// roll it forward afterwards (found by mend-sim, seed 74: a commit refused for a stale
    /// epoch answered "nothing was published", and the exclusive recovery that moved the epoch
    /// on then found its intent, its effects in place, and published it). Recovery finishes
    /// an abandonment this leaves part way. If recovery settled the operation first, the
    /// answer is what it did: its publish, recorded under the commit's key, or the refusal.
    async fn end_refused_commit(
        &self,
        intent: &Intent,
        refused: MendError,
    ) -> Result<PublishResult> {
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        let fencing = self.durably(
            DurableStep::AbandonIntent,
            self.catalog
                .abandon_intent(dataset_id, operation_id, None, self.now_ms()),
        );
        match fencing.await {
            Ok(fenced) => {
                if let Err(error) = self.finish_abandoned(&fenced).await {
                    tracing::debug!(%error, "finishing a refused commit's abandonment failed; recovery finishes it");
                }
                Err(refused)
            }
            Err(MendError::NotFound { .. }) => {
                match self.recorded_publish(dataset_id, operation_id).await? {
                    Some(published) => Ok(published),
                    None => Err(refused),
                }
            }
            Err(error) => Err(MendError::Unavailable {
                message: format!(
                    "{refused}; but fencing the commit's intent failed ({error}), so recovery may still publish operation {operation_id}: read the dataset before retrying"
                ),
                source: None,
            }),
        }
    }

    /// An operation's last step: delete its intent. An intent already gone was settled by a
    /// recovery sweep, which discards the intent of an operation whose effects it finds in
    /// place (stale); that is the very outcome this step wants, so it is not an error.
    pub(super) async fn finish_intent(&self, dataset_id: &str, operation_id: &str) -> Result<()> {
        let deleted = self.durably(
            DurableStep::DeleteIntent,
            self.catalog
                .delete_intent(dataset_id, operation_id, self.now_ms()),
        );
        match deleted.await {
            Err(MendError::NotFound {
                kind: EntityKind::Intent,
                ..
            }) => Ok(()),
            other => other,
        }
    }

    /// Runs one durable step through the fault seam, after checking that the gates this
    /// engine works under are still held ([`Engine::check_held`]): work whose lease was lost
    /// stops before its next write.
    pub(super) async fn durably<T>(
        &self,
        step: DurableStep,
        write: impl std::future::IntoFuture<Output = Result<T>>,
    ) -> Result<T> {
        self.check_held()?;
        self.options.faults.before(&step)?;
        let value = write.await?;
        self.options.faults.after(&step)?;
        Ok(value)
    }
}

/// A commit that could not own every split it stages: another writer staged or published
/// `taken` first, and the begin wrote nothing.
pub(super) fn cannot_own(taken: Vec<String>) -> MendError {
    MendError::failed_precondition(
        format!(
            "the commit cannot own splits another writer staged first: {}; nothing was written",
            taken.join(", ")
        ),
        taken,
    )
}

/// The header of each split's object: a function of the request, the dataset's uid and the
/// operation, so that the intent (built inside the catalog's step) and the uploads (after it)
/// agree on every object's size.
fn object_headers(
    request: &CommitRequest,
    dataset_uid: &str,
    operation_id: &str,
) -> Vec<SplitObjectHeader> {
    request
        .splits
        .iter()
        .map(|split| SplitObjectHeader {
            format_version: HEADER_FORMAT_VERSION,
            dataset_id: request.dataset_id.clone(),
            dataset_uid: dataset_uid.to_string(),
            split_id: split.split_id.clone(),
            node: request.node.clone(),
            metadata_json: split.metadata_json.clone(),
            operation_id: Some(operation_id.to_string()),
            payload_size: split.payload.len() as u64,
            payload_sha256: sha256(&split.payload),
        })
        .collect()
}

/// The commit's intent, `Armed`, as built from `dataset` inside the step that writes it:
/// every row, object (size and payload checksum) and the publish it plans, and the state it
/// expects.
fn commit_intent(
    kind: OperationKind,
    request: &CommitRequest,
    planned: &PlannedPublish,
    operation_id: &str,
    dataset: &Dataset,
    now_ms: TimestampMs,
    lease_ms: i64,
) -> Intent {
    let headers = object_headers(request, &dataset.uid, operation_id);
    Intent {
        effects: PlannedEffects {
            stage: request
                .splits
                .iter()
                .map(|split| PlannedRow {
                    split_id: split.split_id.clone(),
                    metadata_json: split.metadata_json.clone(),
                })
                .collect(),
            objects: headers
                .iter()
                .zip(&request.splits)
                .map(|(header, split)| PlannedObject {
                    split_id: header.split_id.clone(),
                    size: crate::objects::format::encoded_len(header, split.payload.len()),
                    checksum: header.payload_sha256.clone(),
                })
                .collect(),
            publish: Some(planned.clone()),
            ..PlannedEffects::default()
        },
        expected: expected_state(dataset, planned),
        ..Intent::armed(
            operation_id.to_string(),
            kind,
            &request.dataset_id,
            &request.node,
            now_ms,
            lease_ms,
        )
    }
}

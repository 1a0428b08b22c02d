//! The commit operation: stage rows, upload their objects, publish them with a checkpoint
//! delta, with an intent written before the first effect. A merge is the same operation
//! publishing its new splits in place of the splits it replaces (which become marked), with
//! no checkpoint delta.
//!
//! Steps, each a durable write passing through the fault seam:
//!
//! 1. write the intent (`Armed`): every row, object (size and payload checksum) and the
//!    publish it plans, and the state it expects;
//! 2. stage the rows, create-only: a row someone else holds fails the commit, after undoing
//!    only this commit's own rows;
//! 3. upload each object put-if-absent, with its recovery metadata embedded;
//! 4. confirm the intent (`EffectsConfirmed`);
//! 5. publish;
//! 6. delete the intent.
//!
//! A crash anywhere leaves an intent that [`recovery`](super::recovery) resolves: rolled
//! forward when every effect is in place, otherwise rolled back in exclusive mode.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::Engine;
use crate::error::{EntityKind, MendError, Result};
use crate::faults::DurableStep;
use crate::intent::{
    ExpectedState, Intent, IntentPhase, OperationKind, PlannedEffects, PlannedObject,
    PlannedPublish, PlannedRow,
};
use crate::model::{
    CheckpointDelta, PublishRequest, PublishResult, SplitState, StageMode, StageOutcome,
    StageRequest, StageSplit,
};
use crate::objects::format::{HEADER_FORMAT_VERSION, SplitObjectHeader, sha256};
use crate::validate;

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
        self.pinned()
            .run_commit(OperationKind::Commit, request, &[])
            .await
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
        self.pinned()
            .run_commit(OperationKind::Merge, &commit, &request.replaced_split_ids)
            .await
    }

    async fn run_commit(
        &self,
        kind: OperationKind,
        request: &CommitRequest,
        replaced_split_ids: &[String],
    ) -> Result<CommitResult> {
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
        validate::stage_request(&stage, self.stage_limits())?;
        let mut ids: Vec<&str> = request.splits.iter().map(|s| s.split_id.as_str()).collect();
        ids.sort_unstable();
        if let Some(pair) = ids.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(MendError::invalid(format!(
                "split {} appears twice in one commit",
                pair[0]
            )));
        }
        let publish = PublishRequest {
            dataset_id: request.dataset_id.clone(),
            staged_split_ids: request.splits.iter().map(|s| s.split_id.clone()).collect(),
            replaced_split_ids: replaced_split_ids.to_vec(),
            checkpoint_delta: request.checkpoint_delta.clone(),
            publish_token: request.publish_token.clone(),
            fencing_epoch: None,
        };
        validate::publish_request(&publish, self.options.max_stage_batch)?;
        let dataset = self.catalog.dataset(&request.dataset_id).await?;
        // The epoch the commit began under: if exclusive recovery moves it on meanwhile, this
        // writer's publish is refused (invariant 7).
        let publish = PublishRequest {
            fencing_epoch: Some(dataset.fencing_epoch),
            ..publish
        };

        let operation_id = uuid::Uuid::new_v4().to_string();
        tracing::Span::current().record("operation_id", tracing::field::display(&operation_id));
        let objects: Vec<(SplitObjectHeader, &Bytes)> = request
            .splits
            .iter()
            .map(|split| {
                let header = SplitObjectHeader {
                    format_version: HEADER_FORMAT_VERSION,
                    dataset_id: request.dataset_id.clone(),
                    dataset_uid: dataset.uid.clone(),
                    split_id: split.split_id.clone(),
                    node: request.node.clone(),
                    metadata_json: split.metadata_json.clone(),
                    operation_id: Some(operation_id.clone()),
                    payload_size: split.payload.len() as u64,
                    payload_sha256: sha256(&split.payload),
                };
                (header, &split.payload)
            })
            .collect();
        let now = self.now_ms();
        let mut intent = Intent {
            effects: PlannedEffects {
                stage: request
                    .splits
                    .iter()
                    .map(|split| PlannedRow {
                        split_id: split.split_id.clone(),
                        metadata_json: split.metadata_json.clone(),
                    })
                    .collect(),
                objects: objects
                    .iter()
                    .map(|(header, payload)| PlannedObject {
                        split_id: header.split_id.clone(),
                        size: crate::objects::format::encoded_len(header, payload.len()),
                        checksum: header.payload_sha256.clone(),
                    })
                    .collect(),
                publish: Some(PlannedPublish {
                    staged_split_ids: publish.staged_split_ids.clone(),
                    replaced_split_ids: publish.replaced_split_ids.clone(),
                    checkpoint_delta: publish.checkpoint_delta.clone(),
                    publish_token: publish.publish_token.clone(),
                }),
                ..PlannedEffects::default()
            },
            expected: ExpectedState {
                manifest_version: dataset.manifest_version,
                split_states: request
                    .splits
                    .iter()
                    .map(|split| (split.split_id.clone(), None))
                    .chain(
                        replaced_split_ids
                            .iter()
                            .map(|id| (id.clone(), Some(SplitState::Published))),
                    )
                    .collect(),
                config_version: None,
            },
            ..Intent::armed(
                operation_id.clone(),
                kind,
                &request.dataset_id,
                &request.node,
                now,
                self.options.intent_lease_ms,
            )
        };

        self.durably(DurableStep::WriteIntent, self.catalog.put_intent(&intent))
            .await?;

        let staged = self
            .durably(DurableStep::StageRows, self.stage(&stage))
            .await?;
        let taken: Vec<String> = staged
            .splits
            .iter()
            .filter(|split| split.outcome != StageOutcome::Inserted)
            .map(|split| split.split_id.clone())
            .collect();
        if !taken.is_empty() {
            return Err(self
                .abandon_commit(
                    &intent,
                    staged.inserted().map(str::to_string).collect(),
                    taken,
                )
                .await);
        }

        for (header, payload) in &objects {
            let step = DurableStep::PutObject {
                split_id: header.split_id.clone(),
            };
            self.durably(step, self.objects.put_split(header, payload))
                .await?;
        }

        intent.phase = IntentPhase::EffectsConfirmed;
        intent.updated_at_ms = self.now_ms();
        self.durably(
            DurableStep::ConfirmIntent,
            self.catalog.update_intent(&intent, IntentPhase::Armed),
        )
        .await?;

        let key = super::operations::publish_key(&operation_id);
        let published = self
            .durably(
                DurableStep::Publish,
                self.publish_keyed(&publish, Some(&key)),
            )
            .await?;

        self.finish_intent(&request.dataset_id, &operation_id)
            .await?;
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

    /// Another writer holds some of the commit's splits: undo this commit's own rows (they
    /// have no objects yet) and its intent, and report the splits it could not take.
    async fn abandon_commit(
        &self,
        intent: &Intent,
        own: Vec<String>,
        taken: Vec<String>,
    ) -> MendError {
        let refused = MendError::failed_precondition(
            format!(
                "the commit cannot own splits another writer staged first: {}",
                taken.join(", ")
            ),
            taken,
        );
        let undo = async {
            if !own.is_empty() {
                self.mark_for_deletion(&intent.dataset_id, &own).await?;
                self.delete_splits(&intent.dataset_id, &own).await?;
            }
            self.catalog
                .delete_intent(&intent.dataset_id, &intent.operation_id, self.now_ms())
                .await
        };
        match undo.await {
            Ok(()) => refused,
            // The intent is still there; recovery finishes the undo.
            Err(error) => MendError::Unavailable {
                message: format!(
                    "{refused}; undoing the commit's own rows failed ({error}): operation {} is left for recovery",
                    intent.operation_id
                ),
                source: None,
            },
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

    /// Runs one durable step through the fault seam.
    pub(super) async fn durably<T>(
        &self,
        step: DurableStep,
        write: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        self.options.faults.before(&step)?;
        let value = write.await?;
        self.options.faults.after(&step)?;
        Ok(value)
    }
}

//! Operations driven step by step from outside the process: the crash-safe commit protocol for
//! writers in other processes and languages (over HTTP, or the CLI's `mend operation`).
//!
//! [`Engine::commit`](super::Engine::commit) runs every step of a commit in one call. A writer
//! elsewhere runs the same steps, one request each, and any of them may be the last it sends:
//!
//! | step        | what mend does | its writes |
//! |-------------|----------------|------------|
//! | `begin`     | writes the intent (`Armed`) and stages every row create-only, or nothing if another writer holds a row; records the begin | one atomic step ([`Catalog::begin_commit`](crate::catalog::Catalog::begin_commit)) |
//! | `upload`    | streams one object into the store with its recovery header, checked against the planned size and sha256, then records the write | the object, then its record |
//! | `heartbeat` | extends the lease, so recovery never takes a live slow writer's work away | one conditional write ([`Catalog::update_intent`](crate::catalog::Catalog::update_intent)) |
//! | `publish`   | checks every object (size, checksum, operation), then publishes with the delta, records the answer and deletes the intent, while the intent is there and not fenced | one atomic step ([`Catalog::publish_commit`](crate::catalog::Catalog::publish_commit)); refused for good, the end below |
//! | `abort`     | ends the operation: the intent fenced and deleted, its staged rows marked, its end recorded; then its objects and rows go | one atomic step (`Settlement::Abandon`), then the clean-up |
//! | `show`      | the phase, each split's object, and what recovery would decide now | none |
//!
//! Two steps that race are decided by one conditional write each on the same intent: a
//! publish and an abort, a publish and recovery's abandonment, an abort and a begin still on
//! its way (the abort records the end, the begin looks for that record in its own step).
//! The upload keeps two writes, because the object storage of splits joins no catalog step: a
//! crash between them leaves an object without its record of the write, which the object's
//! header names the operation of (recovery and reconcile read it). The abort's clean-up after
//! its step leaves, if it is cut off, marked rows and their objects, which garbage collection
//! deletes.
//!
//! The operation id is the idempotency key of every step: a step sent again answers what it
//! answered the first time. `begin` resumes an operation whose intent is there with the same
//! plan, and refuses one that began or ended before (its begin, publish or end recorded
//! under `op:<id>:begin`, `op:<id>:publish`, `op:<id>:abort`), answering how it ended.
//! `publish` is recorded under `op:<id>:publish` in the publish's own atomic step
//! ([`crate::catalog::recorded`]), so a publish that landed answers its result again, never
//! "not staged". A publish refused in its step for good (its checkpoint delta overtaken, its
//! publish token moved on) ends the operation before it answers, so that neither a retry nor
//! recovery ever lands it afterwards. An upload of an object already in place as planned
//! writes nothing. A writer that dies at any step leaves an intent that recovery settles like
//! an in-process commit's.
//!
//! Objects uploaded through mend are written whole or not at all: one put-if-absent up to
//! [`SINGLE_PUT_BYTES`], a multipart upload beyond it that is completed only once the bytes
//! streamed have the planned size and sha256, and aborted otherwise. The header is a function
//! of the intent alone, so two uploads of the same split (a retry racing the first) write the
//! same bytes. A writer may also write the object itself, straight to the store: `begin`
//! answers the exact header to put before the payload ([`OperationSplit::header_json`]).
//!
//! A file per step: `begin`, `upload` (with `uploaded`, what this process remembers of its
//! uploads), `heartbeat`, `publish`, `abort`, `show`; `ending` is the ending that abort, a
//! publish refused for good and recovery's roll-back share. The types a writer sees and the
//! reads every step starts with (the live intent, what an ended one answers) are here; the
//! durable-step keys and checks that the in-process commit and recovery share too are in
//! [`super::steps`].

mod abort;
mod begin;
mod ending;
mod heartbeat;
mod publish;
mod show;
mod upload;
pub(super) mod uploaded;

pub use upload::SINGLE_PUT_BYTES;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Engine;
use super::recovery::IntentReport;
use super::steps::publish_key;
use crate::error::{EntityKind, MendError, OperationFound, Result};
use crate::intent::{Intent, IntentPhase, OperationKind};
use crate::model::{CheckpointDelta, PublishResult, StageMode, StageRequest, StageSplit};
use crate::objects::format::{self, SplitObjectHeader};

/// What kind of operation a writer begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ExternalKind {
    /// New splits published with an optional checkpoint delta.
    Commit,
    /// New splits published in place of published ones, which become marked.
    Merge,
}

/// One split an operation plans: its row and the payload its object will carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PlannedSplit {
    /// The split's id; the begin stages it create-only.
    pub split_id: String,
    /// The split's metadata, a JSON object, as text.
    pub metadata_json: String,
    /// The payload's size in bytes (the object's bytes after its header).
    pub size: u64,
    /// The payload's sha256: `sha256:<hex>` or 64 hex digits.
    pub sha256: String,
}

/// A writer's `begin`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BeginOperation {
    /// The dataset to commit to.
    pub dataset_id: String,
    /// Chosen by the writer so that a retried begin finds its own operation; mend picks one
    /// when it is absent (a begin without it is then not safe to retry).
    #[serde(default)]
    pub operation_id: Option<String>,
    /// Commit or merge.
    pub kind: ExternalKind,
    /// The node the writer runs on, recorded as the intent's owner and in each object.
    pub node: String,
    /// How long the writer may go without a heartbeat; the engine's intent lease when absent.
    #[serde(default)]
    pub lease_ms: Option<u64>,
    /// The splits and their objects' payloads, as planned.
    pub splits: Vec<PlannedSplit>,
    /// The checkpoint delta the publish applies.
    #[serde(default)]
    pub checkpoint_delta: Option<CheckpointDelta>,
    /// For a merge: the published splits the new ones replace.
    #[serde(default)]
    pub replaced_split_ids: Vec<String>,
    /// The token the dataset requires, if it is fenced.
    #[serde(default)]
    pub publish_token: Option<String>,
}

impl BeginOperation {
    /// The create-only stage of the operation's rows.
    fn stage_request(&self) -> StageRequest {
        StageRequest {
            dataset_id: self.dataset_id.clone(),
            mode: StageMode::CreateOnly,
            node: self.node.clone(),
            splits: self
                .splits
                .iter()
                .map(|split| StageSplit {
                    split_id: split.split_id.clone(),
                    metadata_json: split.metadata_json.clone(),
                })
                .collect(),
        }
    }
}

/// Where an operation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OperationPhase {
    /// Begun: its rows are staged; objects may be uploaded.
    Armed,
    /// Every object was found as planned; the publish is under way (recovery finishes it),
    /// unless another operation publishes from the same checkpoint positions first: then it
    /// can never publish and ends (its publish, its abort or recovery ends it).
    EffectsConfirmed,
    /// Published; the result is `publish`.
    Published,
    /// Rolled back (aborted by its writer, abandoned by recovery after its lease ran out,
    /// or refused at begin): nothing of it is visible, and it can never publish.
    Ended,
}

/// What became of one planned split's object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ObjectStatus {
    /// No object is at the split's path.
    Missing,
    /// In the store as planned: size, checksum and operation match.
    Present,
    /// Something else is in its place: another size, checksum or operation.
    Different,
}

/// One split of an operation, with what its writer needs to upload the object itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OperationSplit {
    /// The split's id.
    pub split_id: String,
    /// The payload's size and `sha256:<hex>`, as planned.
    pub size: u64,
    /// The payload's planned sha256.
    pub sha256: String,
    /// The whole object's size: prefix, header and payload.
    pub object_size: u64,
    /// Where the object goes, relative to the objects store's root.
    pub object_path: String,
    /// The header to write after the magic and length, exactly these bytes (UTF-8): see the
    /// object format in [`crate::objects::format`].
    pub header_json: String,
    /// Whether the object is in place; absent where not looked at (begin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<ObjectStatus>,
}

/// An object a writer will put straight into the store, through a presigned URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ObjectToPut {
    /// The planned split whose object it is.
    pub split_id: String,
    /// The sha256 of the whole object the writer will put (prefix, header, payload), 64 hex
    /// digits (or `sha256:<hex>`): the store refuses any other bytes through the URL.
    pub object_sha256: String,
}

/// A presigned URL for one object of an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ObjectUploadUrl {
    /// The split whose object it puts.
    pub split_id: String,
    /// The URL to `PUT` the whole object to (prefix, header, payload), with no credentials.
    pub url: String,
    /// The headers the `PUT` must carry, exactly these (they are signed): `If-None-Match: *`
    /// (the store refuses the `PUT` once an object is at the path) and
    /// `x-amz-checksum-sha256` (the store refuses bytes that do not hash to it).
    pub headers: BTreeMap<String, String>,
    /// When the URL stops working: at the operation's lease end, at most an hour on (a
    /// heartbeat does not extend it; ask again for a fresh one).
    pub expires_at_ms: i64,
}

/// An operation as its writer sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OperationView {
    /// The dataset.
    pub dataset_id: String,
    /// The operation's id: the idempotency key of every step.
    pub operation_id: String,
    /// Commit or merge.
    pub kind: ExternalKind,
    /// Where it stands.
    pub phase: OperationPhase,
    /// The intent's owner and lease, while there is an intent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Until then recovery leaves it to its writer; a heartbeat moves it on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expires_at_ms: Option<i64>,
    /// The planned splits (begin and show list them; the other steps do not).
    pub splits: Vec<OperationSplit>,
    /// The publish's result, once published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish: Option<PublishResult>,
    /// What a recovery sweep would decide about the operation now (`show` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<IntentReport>,
}

/// What the catalog holds of one operation ([`Engine::operation_ledger`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperationLedger {
    /// Its intent's phase, while it has an intent.
    pub intent: Option<IntentPhase>,
    /// Its begin is recorded (or, begun by an older mend, its stage): it began.
    pub begun: bool,
    /// Its publish is recorded: it published.
    pub published: bool,
    /// Its end without publishing is recorded.
    pub ended: bool,
}

/// What an upload did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UploadResult {
    /// The split's id.
    pub split_id: String,
    /// The whole object's size.
    pub object_size: u64,
    /// The payload's sha256, as planned.
    pub sha256: String,
    /// False when the object was already in place as planned and nothing was written.
    pub written: bool,
}

impl Engine {
    /// The intent of an operation still in flight; the reason it is not, otherwise.
    async fn live_intent(&self, dataset_id: &str, operation_id: &str) -> Result<Intent> {
        match self.find_intent(dataset_id, operation_id).await? {
            Some(intent) if intent.phase == IntentPhase::Abandoned => {
                Err(ended(dataset_id, operation_id))
            }
            Some(intent) if matches!(intent.kind, OperationKind::Commit | OperationKind::Merge) => {
                Ok(intent)
            }
            Some(intent) => Err(MendError::invalid(format!(
                "operation {operation_id} is a {:?}, not a writer's commit or merge",
                intent.kind
            ))),
            None => self.after_the_end(dataset_id, operation_id).await,
        }
    }

    /// Why an operation with no intent cannot take another step.
    async fn after_the_end<T>(&self, dataset_id: &str, operation_id: &str) -> Result<T> {
        if let Some(published) = self.recorded_publish(dataset_id, operation_id).await? {
            return Err(MendError::operation_refused(
                format!(
                    "operation {operation_id} already published, at manifest version {}",
                    published.manifest_version
                ),
                operation_id,
                OperationFound::Published,
            ));
        }
        // An operation begun by an older mend whose begin died after its intent, before it
        // staged, has no record of its begin; whatever ended it recorded that it ended.
        if self.began(dataset_id, operation_id).await?
            || self
                .ended_without_publishing(dataset_id, operation_id)
                .await?
        {
            return Err(ended(dataset_id, operation_id));
        }
        Err(MendError::NotFound {
            kind: EntityKind::Intent,
            ids: vec![operation_id.to_string()],
        })
    }

    pub(super) async fn recorded_publish(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<Option<PublishResult>> {
        let key = publish_key(operation_id);
        self.catalog
            .recorded_request(dataset_id, &key.key)
            .await?
            .map(|found| found.replay(&key))
            .transpose()
    }

    async fn find_intent(&self, dataset_id: &str, operation_id: &str) -> Result<Option<Intent>> {
        self.catalog.intent(dataset_id, operation_id).await
    }

    /// The writer's view of an intent, with a split for each of `headers` (begin and show
    /// list the splits; heartbeat and publish answers do not).
    fn view(
        &self,
        intent: &Intent,
        publish: Option<PublishResult>,
        headers: &[SplitObjectHeader],
    ) -> OperationView {
        let splits = headers
            .iter()
            .map(|header| OperationSplit {
                split_id: header.split_id.clone(),
                size: header.payload_size,
                sha256: header.payload_sha256.clone(),
                object_size: format::encoded_len(header, header.payload_size as usize),
                object_path: self
                    .objects
                    .path(&intent.dataset_id, &header.split_id)
                    .to_string(),
                header_json: serde_json::to_string(header).expect("headers serialise"),
                object: None,
            })
            .collect();
        OperationView {
            dataset_id: intent.dataset_id.clone(),
            operation_id: intent.operation_id.clone(),
            kind: match intent.kind {
                OperationKind::Merge => ExternalKind::Merge,
                _ => ExternalKind::Commit,
            },
            phase: match (&publish, intent.phase) {
                (Some(_), _) => OperationPhase::Published,
                (None, IntentPhase::Armed) => OperationPhase::Armed,
                (None, IntentPhase::EffectsConfirmed) => OperationPhase::EffectsConfirmed,
                (None, IntentPhase::Abandoned) => OperationPhase::Ended,
            },
            owner: Some(intent.owner.clone()),
            lease_expires_at_ms: Some(intent.lease_expires_at_ms),
            splits,
            publish,
            recovery: None,
        }
    }
}

fn internal_kind(kind: ExternalKind) -> OperationKind {
    match kind {
        ExternalKind::Commit => OperationKind::Commit,
        ExternalKind::Merge => OperationKind::Merge,
    }
}

fn ended(dataset_id: &str, operation_id: &str) -> MendError {
    MendError::operation_refused(
        format!(
            "operation {operation_id} of dataset {dataset_id} has ended without publishing: it was aborted, abandoned by recovery after its lease ran out, or could not take its rows; nothing of it is visible. Begin a new operation with a new id"
        ),
        operation_id,
        OperationFound::Ended,
    )
}

fn ended_view(dataset_id: &str, operation_id: &str) -> OperationView {
    OperationView {
        dataset_id: dataset_id.to_string(),
        operation_id: operation_id.to_string(),
        kind: ExternalKind::Commit,
        phase: OperationPhase::Ended,
        owner: None,
        lease_expires_at_ms: None,
        splits: Vec::new(),
        publish: None,
        recovery: None,
    }
}

fn published_view(dataset_id: &str, operation_id: &str, published: PublishResult) -> OperationView {
    OperationView {
        phase: OperationPhase::Published,
        publish: Some(published),
        ..ended_view(dataset_id, operation_id)
    }
}

fn status_name(status: ObjectStatus) -> &'static str {
    match status {
        ObjectStatus::Missing => "missing",
        ObjectStatus::Present => "present",
        ObjectStatus::Different => {
            "different: another size, checksum or operation, or a payload that does not hash to the planned sha256"
        }
    }
}

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

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use object_store::WriteMultipart;
use serde::{Deserialize, Serialize};

use super::Engine;
use super::recovery::IntentReport;
use super::steps::{delta_overtaken, expected_state, publish_key, step_key};
use crate::bounds;
use crate::catalog::{
    OperationRecords, PublishObservation, RecordedRequest, RequestKey, Settled, Settlement,
};
use crate::deliberate_bugs::{self, Bug};
use crate::error::{EntityKind, MendError, OperationFound, Result};
use crate::intent::{
    Intent, IntentPhase, OperationKind, PlannedEffects, PlannedObject, PlannedPublish, PlannedRow,
};
use crate::model::{
    CheckpointDelta, ListQuery, PublishRequest, PublishResult, SplitState, StageMode, StageOutcome,
    StageRequest, StageSplit, TimestampMs,
};
use crate::objects::format::{self, HEADER_FORMAT_VERSION, SplitObjectHeader};
use crate::objects::{PutOutcome, ReadBack};
use crate::validate;

/// Objects up to this size are uploaded in one put-if-absent, buffered; larger ones stream
/// through a multipart upload, one part of this size in memory at a time.
pub const SINGLE_PUT_BYTES: u64 = 8 << 20;
/// Parts of a multipart upload written at once.
const PARTS_IN_FLIGHT: usize = 2;
/// How many times a heartbeat renews a lease whose intent changed phase between its read and
/// its write (each change is one step of the operation, and there are two).
const HEARTBEAT_ATTEMPTS: usize = 3;

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
    /// Begins an operation: validates the plan, writes the intent, stages its rows
    /// create-only. A row another writer holds ends the operation at once (its own rows and
    /// intent are undone) with `FailedPrecondition` naming the rows it could not take.
    #[tracing::instrument(
        name = "operation_begin",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %request.dataset_id, operation_id = tracing::field::Empty)
    )]
    pub async fn begin_operation(&self, request: &BeginOperation) -> Result<OperationView> {
        let operation_id = request.operation_id.as_deref();
        self.writing("begin", operation_id, self.pinned().begin_pinned(request))
            .await
    }

    /// Whether [`Engine::begin_operation`] would accept `request` as it is (its ids, sizes,
    /// checksums, metadata, delta and limits), reading and writing nothing: for a caller
    /// that must not record anything of a begin that would be refused (the server claims
    /// an operation id for its principal only for a begin that passes this).
    pub fn check_begin_operation(&self, request: &BeginOperation) -> Result<()> {
        self.check_begin(request).map(|_| ())
    }

    /// The intent a begin writes and the objects' headers: its plan as the writer sent it
    /// (the operation's identity, compared when a begin is sent again), with the objects as
    /// they are written, carrying the dataset's incarnation and the operation id.
    fn begin_intent(
        &self,
        request: &BeginOperation,
        checked: &CheckedBegin,
        dataset: &crate::model::Dataset,
        operation_id: &str,
        now: TimestampMs,
    ) -> (Intent, Vec<SplitObjectHeader>) {
        let lease_ms = request
            .lease_ms
            .map_or(self.options.intent_lease_ms, |ms| ms as i64);
        let publish = PlannedPublish {
            staged_split_ids: request.splits.iter().map(|s| s.split_id.clone()).collect(),
            replaced_split_ids: request.replaced_split_ids.clone(),
            checkpoint_delta: request.checkpoint_delta.clone(),
            publish_token: request.publish_token.clone(),
        };
        let expected = expected_state(dataset, &publish);
        // Objects carry the dataset's incarnation and the operation; the intent plans them as
        // they will be written (their size counts the header).
        let headers: Vec<SplitObjectHeader> = checked
            .headers
            .iter()
            .map(|header| SplitObjectHeader {
                dataset_uid: dataset.uid.clone(),
                operation_id: Some(operation_id.to_string()),
                ..header.clone()
            })
            .collect();
        let intent = Intent {
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
                    .map(|header| PlannedObject {
                        split_id: header.split_id.clone(),
                        size: format::encoded_len(header, header.payload_size as usize),
                        checksum: header.payload_sha256.clone(),
                    })
                    .collect(),
                publish: Some(publish),
                ..PlannedEffects::default()
            },
            expected,
            ..Intent::armed(
                operation_id.to_string(),
                internal_kind(request.kind),
                &request.dataset_id,
                &request.node,
                now,
                lease_ms,
            )
        };
        (intent, headers)
    }

    /// The begin: one atomic step ([`Catalog::begin_commit`](crate::catalog::Catalog::begin_commit))
    /// writes the intent and stages every row create-only, or writes nothing; it records that
    /// the operation began, and is refused if the operation began or ended before (its
    /// records are looked for in the same step, so an abort recording the end of an operation
    /// it found no trace of either refuses this begin or sees its intent). A begin sent again
    /// while the intent is there resumes it.
    async fn begin_pinned(&self, request: &BeginOperation) -> Result<OperationView> {
        let checked = self.check_begin(request)?;
        let operation_id = match &request.operation_id {
            Some(id) => id.clone(),
            None => crate::ambient::uuid_v4().to_string(),
        };
        tracing::Span::current().record("operation_id", tracing::field::display(&operation_id));
        let dataset_id = request.dataset_id.as_str();
        let super::staging::StagePlanning {
            splits, planner, ..
        } = self.stage_planner(&request.stage_request())?;
        let now = self.now_ms();
        let build = |dataset: &crate::model::Dataset| {
            Ok(self
                .begin_intent(request, &checked, dataset, &operation_id, now)
                .0)
        };
        let keys = [
            step_key(&operation_id, "begin"),
            step_key(&operation_id, "publish"),
            step_key(&operation_id, "abort"),
        ];
        let refused_by = [keys[0].as_str(), keys[1].as_str(), keys[2].as_str()];
        let begin_key = RequestKey::new(keys[0].clone(), &operation_id);
        let begun_record = RecordedRequest::new(&begin_key, &operation_id, now);
        let records = OperationRecords {
            refused_by: &refused_by,
            begun: Some(&begun_record),
        };
        let begun = self.durably(
            crate::faults::DurableStep::BeginCommit,
            self.catalog
                .begin_commit(dataset_id, &build, &splits, &*planner, records, now),
        );
        match begun.await {
            Ok(begun) => {
                let (_, headers) =
                    self.begin_intent(request, &checked, &begun.dataset, &operation_id, now);
                self.uploaded
                    .remember_intent(&begun.intent, &begun.dataset.uid);
                Ok(self.view(&begun.intent, None, &headers))
            }
            // A begin sent again while its operation is in flight.
            Err(MendError::AlreadyExists {
                kind: EntityKind::Intent,
                ..
            }) => {
                self.resume_begin(request, &checked, &operation_id, now)
                    .await
            }
            Err(error) if error.operation_found() == Some(OperationFound::Ended) => {
                self.begun_before(request, &checked, &operation_id, now)
                    .await
            }
            Err(MendError::FailedPrecondition {
                ids,
                operation: None,
                ..
            }) => Err(MendError::failed_precondition(
                format!(
                    "operation {operation_id} cannot own splits another writer staged first: {}; nothing was written",
                    ids.join(", ")
                ),
                ids,
            )),
            Err(error) => Err(error),
        }
    }

    /// A begin sent again while the operation's intent is there: the operation as it stands,
    /// if it is the same plan.
    async fn resume_begin(
        &self,
        request: &BeginOperation,
        checked: &CheckedBegin,
        operation_id: &str,
        now: TimestampMs,
    ) -> Result<OperationView> {
        let dataset_id = request.dataset_id.as_str();
        let Some(stored) = self.find_intent(dataset_id, operation_id).await? else {
            // Settled since its begin's step found it.
            return self.begun_before(request, checked, operation_id, now).await;
        };
        let dataset = self.catalog.dataset(dataset_id).await?;
        let (requested, headers) = self.begin_intent(request, checked, &dataset, operation_id, now);
        if !same_plan(&stored, &requested) {
            return Err(MendError::invalid(format!(
                "operation {operation_id} of dataset {dataset_id} was begun with another plan; an operation id names one operation: begin a new one with a new id"
            )));
        }
        if stored.phase == IntentPhase::Abandoned {
            return Err(ended(dataset_id, operation_id));
        }
        self.uploaded.remember_intent(&stored, &dataset.uid);
        Ok(self.view(&stored, None, &headers))
    }

    /// A begin of an operation that began before and has no intent now: its publish's answer
    /// if it published, otherwise that it ended.
    async fn begun_before(
        &self,
        request: &BeginOperation,
        checked: &CheckedBegin,
        operation_id: &str,
        now: TimestampMs,
    ) -> Result<OperationView> {
        let dataset_id = request.dataset_id.as_str();
        let Some(published) = self.recorded_publish(dataset_id, operation_id).await? else {
            return Err(ended(dataset_id, operation_id));
        };
        let dataset = self.catalog.dataset(dataset_id).await?;
        let (intent, _) = self.begin_intent(request, checked, &dataset, operation_id, now);
        let mut view = self.view(&intent, Some(published), &[]);
        view.owner = None;
        view.lease_expires_at_ms = None;
        Ok(view)
    }

    /// Presigned `PUT` URLs for objects of an operation that a writer puts straight into the
    /// store (S3 and S3-compatible stores; a local directory or memory cannot presign, and
    /// answers `CapabilityMissing`: upload through mend there). Each URL is signed over
    /// `If-None-Match: *` and the whole object's sha256 as the writer computed it, so the store
    /// takes that one object once and nothing else ([`crate::objects::UploadSigner`]). The
    /// operation must still take objects (armed, its lease not run out); the URLs work until
    /// its lease ends, at most an hour. Publish still reads every such object back and hashes
    /// its payload against the plan.
    #[tracing::instrument(
        name = "operation_upload_urls",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = %operation_id)
    )]
    pub async fn upload_urls(
        &self,
        dataset_id: &str,
        operation_id: &str,
        objects: &[ObjectToPut],
    ) -> Result<Vec<ObjectUploadUrl>> {
        validate::dataset_id(dataset_id)?;
        validate::split_id(operation_id)?;
        // An operation plans at most a stage batch of objects, each once.
        if objects.len() > self.options.max_stage_batch {
            return Err(MendError::invalid(format!(
                "{} objects asked for; an operation plans at most {} (limits.max_stage_batch)",
                objects.len(),
                self.options.max_stage_batch
            )));
        }
        let mut digests = Vec::with_capacity(objects.len());
        let mut seen = BTreeSet::new();
        for (index, object) in objects.iter().enumerate() {
            validate::split_id(&object.split_id)?;
            if !seen.insert(object.split_id.as_str()) {
                return Err(MendError::invalid(format!(
                    "objects[{index}]: split {} is asked for twice",
                    object.split_id
                )));
            }
            digests.push(object_digest(index, &object.object_sha256)?);
        }
        if !self.objects.presigns() {
            return Err(MendError::CapabilityMissing {
                capability: "objects.presigned-upload".into(),
                detail: format!(
                    "the objects store of dataset {dataset_id} cannot presign uploads (a local directory or memory): upload each object through mend instead"
                ),
            });
        }
        let intent = self.live_intent(dataset_id, operation_id).await?;
        if intent.phase != IntentPhase::Armed {
            return Err(MendError::failed_precondition(
                format!("operation {operation_id} confirmed its effects: it takes no new object"),
                vec![operation_id.to_string()],
            ));
        }
        let now = self.now_ms();
        let lease_left = intent.lease_expires_at_ms.saturating_sub(now);
        if lease_left <= 0 {
            return Err(MendError::failed_precondition(
                format!(
                    "operation {operation_id}'s lease ran out: send a heartbeat first, then ask again"
                ),
                vec![operation_id.to_string()],
            ));
        }
        let valid_for = std::time::Duration::from_millis(lease_left as u64);
        let mut urls = Vec::with_capacity(objects.len());
        for (object, digest) in objects.iter().zip(&digests) {
            if !intent
                .effects
                .objects
                .iter()
                .any(|planned| planned.split_id == object.split_id)
            {
                return Err(MendError::invalid(format!(
                    "operation {operation_id} plans no split {}",
                    object.split_id
                )));
            }
            let signed = self
                .objects
                .upload_url(dataset_id, &object.split_id, valid_for, digest)
                .await?
                .expect("the store presigns: checked above");
            urls.push(ObjectUploadUrl {
                split_id: object.split_id.clone(),
                url: signed.signed.url,
                headers: signed.signed.headers.into_iter().collect(),
                expires_at_ms: now.saturating_add(signed.valid_for.as_millis() as i64),
            });
        }
        Ok(urls)
    }

    /// Streams one planned object into the store with its recovery header. The bytes must be
    /// exactly the planned payload (size and sha256), or nothing is written. An object already
    /// in place as planned is not written again (`written: false`).
    #[tracing::instrument(
        name = "operation_upload",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = %operation_id, split_id = %split_id)
    )]
    pub async fn upload_object<S>(
        &self,
        dataset_id: &str,
        operation_id: &str,
        split_id: &str,
        payload: S,
    ) -> Result<UploadResult>
    where
        S: Stream<Item = std::result::Result<Bytes, MendError>> + Send + Unpin,
    {
        let uploading = async {
            let uploaded = self
                .put_planned_object(dataset_id, operation_id, split_id, payload)
                .await?;
            // The object is in the split storage, which no catalog step can join: its record
            // follows it, beside the look at whether the operation is still live. It is not
            // visible until the operation's publish, which is recorded in its own step.
            let recording = self.record_object_write(dataset_id, "upload", [split_id], &uploaded);
            let (live, recorded) = futures::join!(
                self.ended_while_uploading(dataset_id, operation_id),
                recording
            );
            recorded?;
            live?;
            Ok(uploaded)
        };
        self.writing("upload", Some(operation_id), uploading).await
    }

    /// The operation may have ended while the bytes streamed: its writer is told so. The
    /// object stays: reconcile discards an object of an operation whose end is recorded (and
    /// never adopts it). Deleting it here would race a reconcile that staged a row for it
    /// meanwhile, taking the object of a staged row (invariant 2; mend-sim seed
    /// 1083818128378677243, an upload stalled 12 s between its put and this look).
    async fn ended_while_uploading(&self, dataset_id: &str, operation_id: &str) -> Result<()> {
        let still_live = self
            .find_intent(dataset_id, operation_id)
            .await?
            .is_some_and(|intent| intent.phase != IntentPhase::Abandoned);
        if !still_live
            && self
                .recorded_publish(dataset_id, operation_id)
                .await?
                .is_none()
        {
            return Err(ended(dataset_id, operation_id));
        }
        Ok(())
    }

    /// Puts one planned object, checked against its plan. The plan is the one this process
    /// began, if it did (a plan never changes under its operation id), or read: an
    /// operation that ended meanwhile is found by [`Engine::ended_while_uploading`] after
    /// the put.
    async fn put_planned_object<S>(
        &self,
        dataset_id: &str,
        operation_id: &str,
        split_id: &str,
        payload: S,
    ) -> Result<UploadResult>
    where
        S: Stream<Item = std::result::Result<Bytes, MendError>> + Send + Unpin,
    {
        validate::dataset_id(dataset_id)?;
        validate::split_id(operation_id)?;
        validate::split_id(split_id)?;
        let (intent, uid) = match self.uploaded.begun(dataset_id, operation_id) {
            Some(begun) => begun,
            None => {
                let intent = self.live_intent(dataset_id, operation_id).await?;
                let uid = self.catalog.dataset(dataset_id).await?.uid;
                (intent, uid)
            }
        };
        let planned = intent
            .effects
            .objects
            .iter()
            .find(|object| object.split_id == split_id)
            .ok_or_else(|| {
                MendError::invalid(format!(
                    "operation {operation_id} plans no split {split_id}; it plans: {}",
                    intent
                        .effects
                        .objects
                        .iter()
                        .map(|object| object.split_id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?
            .clone();
        let header = planned_header(&intent, &planned, &uid)?;
        let result = UploadResult {
            split_id: split_id.to_string(),
            object_size: planned.size,
            sha256: planned.checksum.clone(),
            written: true,
        };
        // A small object's put-if-absent tells whether it is in place already, so it is not
        // looked for first (one request less per upload on a remote store). A multipart upload
        // would overwrite, and a confirmed operation takes no new object: both look first.
        let look_first =
            intent.phase != IntentPhase::Armed || header.payload_size > SINGLE_PUT_BYTES;
        if look_first {
            match self.object_status(&intent, &planned).await? {
                ObjectStatus::Present => {
                    return Ok(UploadResult {
                        written: false,
                        ..result
                    });
                }
                ObjectStatus::Different => return Err(another_object_in_place(split_id)),
                ObjectStatus::Missing => {}
            }
        }
        if intent.phase != IntentPhase::Armed {
            return Err(MendError::failed_precondition(
                format!(
                    "operation {operation_id} was confirmed without the object of split {split_id}"
                ),
                vec![split_id.to_string()],
            ));
        }
        let step = crate::faults::DurableStep::PutObject {
            split_id: split_id.to_string(),
        };
        let outcome = self
            .durably(step, self.write_object(&header, payload))
            .await?;
        // Checked byte for byte as planned, whether written now or found: the publish that
        // follows need not read it back.
        self.uploaded.remember(
            dataset_id,
            operation_id,
            split_id,
            planned.size,
            &planned.checksum,
        );
        Ok(UploadResult {
            written: outcome == PutOutcome::Written,
            ..result
        })
    }

    /// Writes an object whose payload streams in, checking it against `header`.
    async fn write_object<S>(
        &self,
        header: &SplitObjectHeader,
        mut payload: S,
    ) -> Result<PutOutcome>
    where
        S: Stream<Item = std::result::Result<Bytes, MendError>> + Send + Unpin,
    {
        let mut check = PayloadCheck::new(header);
        if header.payload_size <= SINGLE_PUT_BYTES {
            // The chunks as they arrived, behind the header: held until checked, never copied.
            let mut object = vec![format::encode_prefix(header)];
            while let Some(chunk) = payload.next().await {
                let chunk = chunk?;
                check.feed(&chunk)?;
                object.push(chunk);
            }
            check.finish()?;
            let put = self.objects.put(
                &header.dataset_id,
                &header.split_id,
                object.into_iter().collect(),
            );
            return match put.await {
                Err(MendError::AlreadyExists { .. }) => {
                    Err(another_object_in_place(&header.split_id))
                }
                outcome => outcome,
            };
        }
        let path = self.objects.path(&header.dataset_id, &header.split_id);
        let (store, _) = self.objects.store();
        let unavailable = |error| MendError::unavailable(format!("write {path}"), error);
        let upload = store.put_multipart(&path).await.map_err(unavailable)?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, SINGLE_PUT_BYTES as usize);
        let prefix = format::encode(header, &[]);
        writer.write(&prefix);
        let streamed = async {
            while let Some(chunk) = payload.next().await {
                let chunk = chunk?;
                check.feed(&chunk)?;
                writer
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(unavailable)?;
                writer.write(&chunk);
            }
            check.finish()
        }
        .await;
        match streamed {
            Ok(()) => {
                writer.finish().await.map_err(unavailable)?;
                Ok(PutOutcome::Written)
            }
            Err(error) => {
                // Never completed, the upload leaves nothing visible; aborting frees its parts.
                let _ = writer.abort().await;
                Err(error)
            }
        }
    }

    /// Extends the lease of an operation that has not published, by `lease_ms` from now (the
    /// engine's intent lease when `None`). Refused once the operation ended: an abandoned
    /// operation's owner can never renew it.
    #[tracing::instrument(
        name = "operation_heartbeat",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = %operation_id)
    )]
    pub async fn heartbeat_operation(
        &self,
        dataset_id: &str,
        operation_id: &str,
        lease_ms: Option<u64>,
    ) -> Result<OperationView> {
        validate::dataset_id(dataset_id)?;
        validate::split_id(operation_id)?;
        let lease_ms = match lease_ms {
            Some(ms) => bounds::OPERATION_LEASE_MS.check(ms)? as i64,
            None => self.options.intent_lease_ms,
        };
        // The renewal is conditional on the phase read. A phase that moved since (a publish
        // confirmed it, recovery or an abort fenced it) refuses it; the heartbeat then reads
        // the intent again and renews the phase it finds, or answers why it cannot.
        let mut intent = self.live_intent(dataset_id, operation_id).await?;
        for _ in 0..HEARTBEAT_ATTEMPTS {
            let now = self.now_ms();
            let from = if deliberate_bugs::active(Bug::HeartbeatLeaseFromLastUpdate) {
                intent.updated_at_ms
            } else {
                now
            };
            let renewed = Intent {
                lease_expires_at_ms: from.saturating_add(lease_ms),
                updated_at_ms: now,
                ..intent.clone()
            };
            match self.catalog.update_intent(&renewed, intent.phase).await {
                Ok(()) => return Ok(self.view(&renewed, None, &[])),
                Err(MendError::NotFound { .. }) => {
                    return self.after_the_end(dataset_id, operation_id).await;
                }
                Err(MendError::FailedPrecondition { .. }) => {
                    intent = self.live_intent(dataset_id, operation_id).await?;
                }
                Err(error) => return Err(error),
            }
        }
        Err(MendError::Conflict {
            message: format!(
                "operation {operation_id}'s intent changed under {HEARTBEAT_ATTEMPTS} heartbeats in a row; nothing was renewed"
            ),
        })
    }

    /// Confirms and publishes an operation: every planned object must be in place as planned;
    /// then the intent is confirmed, the splits published with the checkpoint delta, and the
    /// intent deleted. Sent again after it landed, it answers the same result.
    #[tracing::instrument(
        name = "operation_publish",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = %operation_id)
    )]
    pub async fn publish_operation(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationView> {
        validate::dataset_id(dataset_id)?;
        validate::split_id(operation_id)?;
        let pinned = self.pinned();
        let publishing = pinned.publish_operation_pinned(dataset_id, operation_id);
        self.writing("publish-operation", Some(operation_id), publishing)
            .await
    }

    async fn publish_operation_pinned(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationView> {
        // Planted: a retry whose intent is gone is answered "not found", not its record.
        if deliberate_bugs::active(Bug::PublishRetryIgnoresRecord)
            && self.uploaded.begun(dataset_id, operation_id).is_none()
            && self.find_intent(dataset_id, operation_id).await?.is_none()
        {
            return Err(MendError::NotFound {
                kind: EntityKind::Intent,
                ids: vec![operation_id.to_string()],
            });
        }
        match self.publish_unrecorded(dataset_id, operation_id).await {
            // Refused on what it read or met: recovery (or another replica) may have published
            // the operation meanwhile, after which its intent is gone. A publish that landed
            // answers published, whatever else moved since. One that lost to an abort or an
            // abandonment (its objects gone with the roll-back, say) answers that the
            // operation ended: that is what became of it, and no upload can help it now (found
            // by reading the losing 412's body in the server's race test).
            Err(error @ (MendError::FailedPrecondition { .. } | MendError::NotFound { .. }))
                if error.operation_found() != Some(OperationFound::Ended) =>
            {
                if let Some(published) = self.recorded_publish(dataset_id, operation_id).await? {
                    return Ok(published_view(dataset_id, operation_id, published));
                }
                if error.operation_found().is_none()
                    && self.ended_meanwhile(dataset_id, operation_id).await?
                {
                    return Err(ended(dataset_id, operation_id));
                }
                Err(error)
            }
            answer => answer,
        }
    }

    /// The publish: every planned object must be in place as planned (read back, unless this
    /// process put every one of them itself); then one atomic step
    /// ([`Catalog::publish_commit`](crate::catalog::Catalog::publish_commit)) publishes the
    /// intent's plan with its checkpoint delta, records the answer under the operation's
    /// publish key and deletes the intent, only while the intent is there and not fenced. A
    /// publish sent again after it landed is answered its record by that same step (or, once
    /// the intent is gone, by [`Engine::publish_operation_pinned`]). The plan is the one this
    /// process began, if it did (it never changes under its operation id), so a publish after
    /// this process's own uploads makes one request: its step.
    async fn publish_unrecorded(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationView> {
        // The plan this process began with, if it did: the step checks the intent's phase.
        let intent = match self.uploaded.begun(dataset_id, operation_id) {
            Some((intent, _)) => intent,
            None => self.live_intent(dataset_id, operation_id).await?,
        };
        self.require_objects_in_place(&intent).await?;
        let publish = planned_publish(&intent)?;
        self.check_publish(&publish)?;
        let key = publish_key(operation_id);
        let validator = self.publish_validator(&publish);
        let publishing =
            self.catalog
                .publish_commit(&intent, &publish, &validator, self.now_ms(), &key);
        let published = match self
            .durably(crate::faults::DurableStep::PublishCommit, publishing)
            .await
        {
            Ok(published) => published,
            // Settled meanwhile: published (by recovery, under the same key) or ended.
            Err(MendError::NotFound {
                kind: EntityKind::Intent,
                ..
            }) => return self.after_the_end(dataset_id, operation_id).await,
            // Fenced first: aborted, or abandoned by recovery once its lease ran out.
            Err(error) if error.operation_found() == Some(OperationFound::Ended) => {
                return Err(ended(dataset_id, operation_id));
            }
            // Refused on the dataset it met (its checkpoint delta overtaken by another
            // operation's publish, the publish token moved on, a row no longer staged): it
            // can never publish, so it ends here, before the answer says so.
            Err(error @ MendError::FailedPrecondition { .. }) => {
                return self.end_refused_publish(&intent, error).await;
            }
            Err(error) => return Err(error),
        };
        self.uploaded.forget(dataset_id, operation_id);
        tracing::debug!(
            splits = published.published.len(),
            manifest_version = published.manifest_version,
            "operation published"
        );
        Ok(self.view(&intent, Some(published), &[]))
    }

    /// Ends an operation whose publish its atomic step refused for good (nothing was
    /// published), in one conditional step ([`Engine::end_operation`]), so that neither a
    /// retry nor recovery ever lands it after this answer. If the operation was settled
    /// first, the answer is what settled it.
    async fn end_refused_publish(
        &self,
        intent: &Intent,
        refused: MendError,
    ) -> Result<OperationView> {
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        match self.end_operation(intent).await {
            Ok(Some(_)) => {
                let (message, mut ids) = match refused {
                    MendError::FailedPrecondition { message, ids, .. } => (message, ids),
                    other => (other.to_string(), Vec::new()),
                };
                if ids.is_empty() {
                    ids = self.partitions_overtaken(intent).await;
                }
                Err(MendError::FailedPrecondition {
                    message: format!(
                        "operation {operation_id} cannot publish: {message}; it was rolled back and never publishes: read the dataset and begin a new operation"
                    ),
                    ids,
                    operation: Some(OperationFound::Ended),
                })
            }
            Ok(None) => self.after_the_end(dataset_id, operation_id).await,
            // Confirmed by an older mend's publish (which confirmed in a write of its own): it
            // is rolled forward, unless its delta was overtaken, which ends it.
            Err(MendError::FailedPrecondition { .. }) => {
                match self.find_intent(dataset_id, operation_id).await? {
                    Some(now) if now.phase == IntentPhase::EffectsConfirmed => {
                        Err(self.end_overtaken(&now).await?.unwrap_or(refused))
                    }
                    _ => Err(refused),
                }
            }
            Err(error) => Err(error),
        }
    }

    /// The partitions whose positions no longer let `intent`'s checkpoint delta apply, as the
    /// catalog reads now (none if it cannot be read): what a refusal the policy worded names.
    async fn partitions_overtaken(&self, intent: &Intent) -> Vec<String> {
        let Some(delta) = intent.planned_delta() else {
            return Vec::new();
        };
        let Ok(dataset) = self.catalog.dataset(&intent.dataset_id).await else {
            return Vec::new();
        };
        match crate::catalog::checkpoint_after(&dataset.checkpoint, delta) {
            Err(MendError::FailedPrecondition { ids, .. }) => ids,
            _ => Vec::new(),
        }
    }

    /// Refuses a publish while an object of the operation is not in place as planned (read
    /// back, unless this process put every one of them itself).
    async fn require_objects_in_place(&self, intent: &Intent) -> Result<()> {
        let not_in_place = if self.uploaded.all_in_place(intent) {
            Vec::new()
        } else {
            self.objects_not_in_place(intent).await?
        };
        if !not_in_place.is_empty() {
            let listed: Vec<String> = not_in_place
                .iter()
                .map(|(id, status)| format!("{id} ({})", status_name(*status)))
                .collect();
            return Err(MendError::failed_precondition(
                format!(
                    "operation {} cannot publish: objects not in place as planned: {}; upload them first",
                    intent.operation_id,
                    listed.join(", ")
                ),
                not_in_place.into_iter().map(|(id, _)| id).collect(),
            ));
        }
        Ok(())
    }

    /// Ends a confirmed operation whose checkpoint delta was overtaken: another operation
    /// published from the same positions between this one's check of its delta and its
    /// confirmation (found by mend-sim, seed 33). Positions only move forward, so its publish
    /// can never apply; left confirmed, its writer would be told it publishes and
    /// recovery would block on it until an operator came. It is fenced by one conditional write
    /// (`EffectsConfirmed` to `Abandoned`, which no publish of it can follow), then rolled
    /// back; a roll-back that fails is left to recovery, which settles an abandoned intent.
    /// `None` when its delta still applies, or the intent moved meanwhile.
    async fn end_overtaken(&self, intent: &Intent) -> Result<Option<MendError>> {
        let Some(delta) = intent.planned_delta() else {
            return Ok(None);
        };
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        let dataset = self.catalog.dataset(dataset_id).await?;
        if !delta_overtaken(&dataset.checkpoint, delta) {
            return Ok(None);
        }
        // Overtaken, perhaps by its own publish (landed, its intent not yet deleted: mend-sim
        // seed 215 found an abort ending a published operation so). Looked for after the
        // checkpoint was read: a publish of it can land only while its delta applies, so one
        // that is not recorded now never will be.
        if self
            .recorded_publish(dataset_id, operation_id)
            .await?
            .is_some()
        {
            return Ok(None);
        }
        let fenced = Intent {
            phase: IntentPhase::Abandoned,
            updated_at_ms: self.now_ms(),
            ..intent.clone()
        };
        let fencing = self.durably(
            crate::faults::DurableStep::AbandonIntent,
            self.catalog
                .update_intent(&fenced, IntentPhase::EffectsConfirmed),
        );
        match fencing.await {
            Ok(()) => {}
            Err(MendError::NotFound { .. } | MendError::FailedPrecondition { .. }) => {
                return Ok(None);
            }
            Err(error) => return Err(error),
        }
        self.uploaded.forget(dataset_id, operation_id);
        if let Err(error) = self.roll_back_own(&fenced).await {
            tracing::debug!(%error, "rolling back an overtaken operation failed; recovery settles it");
        }
        Ok(Some(MendError::operation_refused(
            format!(
                "{}; its checkpoint delta was overtaken after it confirmed (another operation published from the same positions), so it could never publish",
                ended(dataset_id, operation_id)
            ),
            operation_id,
            OperationFound::Ended,
        )))
    }

    /// Rolls an operation back at once: its staged rows are marked, its objects deleted, its
    /// rows deleted, its intent deleted. An operation that confirmed is past aborting (it
    /// publishes), unless its checkpoint delta was overtaken (`Engine::end_overtaken`); one
    /// that already ended answers as ended.
    #[tracing::instrument(
        name = "operation_abort",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = %operation_id)
    )]
    pub async fn abort_operation(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationView> {
        let aborting = self.abort_operation_scoped(dataset_id, operation_id);
        self.writing("abort-operation", Some(operation_id), aborting)
            .await
    }

    async fn abort_operation_scoped(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationView> {
        validate::dataset_id(dataset_id)?;
        validate::split_id(operation_id)?;
        let intent = match self.find_intent(dataset_id, operation_id).await? {
            Some(intent) => intent,
            None => match self.end_without_intent(dataset_id, operation_id).await? {
                Some(answer) => return answer,
                // No trace of it: the abort is recorded first, so that a begin still on its
                // way can never start it; a begin that wrote its intent meanwhile is aborted.
                None => match self.abort_before_begin(dataset_id, operation_id).await? {
                    Some(intent) => intent,
                    None => return Ok(ended_view(dataset_id, operation_id)),
                },
            },
        };
        if intent.phase == IntentPhase::EffectsConfirmed {
            // Its publish landed, its intent not yet deleted: it published.
            if let Some(published) = self.recorded_publish(dataset_id, operation_id).await? {
                return Err(published_cannot_abort(operation_id, &published));
            }
            return match self.end_overtaken(&intent).await? {
                Some(_) => Ok(ended_view(dataset_id, operation_id)),
                None => Err(confirmed_cannot_abort(operation_id)),
            };
        }
        if deliberate_bugs::active(Bug::AbortWithoutConditionalWrite) {
            // Planted: rolled back on what it read, with no conditional write a publish races.
            self.uploaded.forget(dataset_id, operation_id);
            self.roll_back_own(&intent).await?;
            return Ok(ended_view(dataset_id, operation_id));
        }
        // One conditional step ends it: fenced, its own rows marked, its end recorded and its
        // intent deleted, only while the intent is there and not confirmed. The publish it races
        // is one conditional step on the same intent, so exactly one of them lands; the loser
        // answers what the winner did.
        match self.end_operation(&intent).await? {
            Some(_) => Ok(ended_view(dataset_id, operation_id)),
            // Settled meanwhile: published (by its writer, or rolled forward by recovery), or
            // ended another way.
            None => match self.end_without_intent(dataset_id, operation_id).await? {
                Some(answer) => answer,
                None => Ok(ended_view(dataset_id, operation_id)),
            },
        }
    }

    /// Ends an operation that has not published, in one atomic step
    /// ([`Settlement::Abandon`] through [`Catalog::settle_intents`](crate::catalog::Catalog::settle_intents)):
    /// its intent, `Armed` (whatever its lease: its owner ends it) or fenced already, is
    /// deleted, the rows it owns that are still staged are marked, and the record of its end
    /// is written, so that a begin of it still on its way is refused. Then its marked rows'
    /// objects (those it wrote) and the rows go. The step decides; what follows it only
    /// cleans up, and a crash in between leaves marked rows, which garbage collection deletes
    /// with their objects. `Some(marked rows)` once it ended; `None` if its intent was gone
    /// (something else settled it first); `FailedPrecondition` (`Confirmed`) if an older
    /// mend's publish confirmed it meanwhile: it publishes.
    pub(super) async fn end_operation(&self, intent: &Intent) -> Result<Option<Vec<String>>> {
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        // All or nothing, a begin owns every row it plans; this process remembers the intents
        // it began, and reads the record of any other's begin.
        let own = match self.uploaded.begun(dataset_id, operation_id) {
            Some(_) => intent
                .effects
                .stage
                .iter()
                .map(|row| row.split_id.clone())
                .collect(),
            None => self.own_rows(intent).await?,
        };
        let mut observed = intent.phase;
        for _ in 0..2 {
            let settlement = Settlement::Abandon {
                operation_id: operation_id.clone(),
                observed,
                lease_expired_by: TimestampMs::MAX,
                mark: own.clone(),
                end: self.end_record(dataset_id, operation_id),
            };
            let no_publishes = |_: &PublishRequest, _: &PublishObservation| Ok(());
            let ending = self.catalog.settle_intents(
                dataset_id,
                std::slice::from_ref(&settlement),
                &no_publishes,
                self.now_ms(),
            );
            let settled = self
                .durably(crate::faults::DurableStep::EndOperation, ending)
                .await;
            match settled.as_deref() {
                Ok([Settled::Abandoned { marked }]) => {
                    self.uploaded.forget(dataset_id, operation_id);
                    let marked = marked.clone();
                    if let Err(error) = self.remove_marked_own(intent, &marked).await {
                        tracing::debug!(%error, "removing an ended operation's rows failed; garbage collection removes them");
                    }
                    return Ok(Some(marked));
                }
                Ok(_) => return Ok(None),
                Err(MendError::FailedPrecondition { .. }) => {
                    // Its phase moved since it was read: fenced by another step (then the end
                    // is taken again from there), or confirmed (it publishes).
                    match self.find_intent(dataset_id, operation_id).await? {
                        None => return Ok(None),
                        Some(now) if now.phase == IntentPhase::EffectsConfirmed => {
                            return Err(confirmed_cannot_abort(operation_id));
                        }
                        Some(now) => observed = now.phase,
                    }
                }
                Err(_) => return settled.map(|_| None),
            }
        }
        Err(MendError::Conflict {
            message: format!(
                "operation {operation_id}'s intent changed under two attempts to end it; nothing was written: end it again"
            ),
        })
    }

    /// Deletes the objects of `marked` rows that `intent`'s operation wrote, then the rows.
    async fn remove_marked_own(&self, intent: &Intent, marked: &[String]) -> Result<()> {
        if marked.is_empty() {
            return Ok(());
        }
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        for split_id in marked {
            let ours = self
                .objects
                .inspect(dataset_id, split_id)
                .await?
                .split()
                .is_some_and(|(header, _)| {
                    header.operation_id.as_deref() == Some(operation_id.as_str())
                });
            if ours {
                self.objects.delete(dataset_id, split_id).await?;
            }
        }
        self.catalog
            .delete_splits(dataset_id, marked, self.now_ms(), None)
            .await
    }

    /// What an abort of an operation whose intent is gone answers, from what it left: a 412
    /// naming its publish if it published, `ended` if it began and ended another way (or an
    /// abort of it was recorded); `None` if mend has no trace of it.
    async fn end_without_intent(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<Option<Result<OperationView>>> {
        if let Some(published) = self.recorded_publish(dataset_id, operation_id).await? {
            return Ok(Some(Err(published_cannot_abort(operation_id, &published))));
        }
        if self.began(dataset_id, operation_id).await?
            || self
                .ended_without_publishing(dataset_id, operation_id)
                .await?
        {
            return Ok(Some(Ok(ended_view(dataset_id, operation_id))));
        }
        Ok(None)
    }

    /// Records the abort of an operation mend has no trace of, so that a begin of it that
    /// arrives later is refused as ended, then looks for its intent once more: a begin that
    /// wrote it in between (it looks for this record after writing its intent, so one of the
    /// two sees the other) is returned, for the abort to fence.
    async fn abort_before_begin(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<Option<Intent>> {
        self.record_end(dataset_id, operation_id).await?;
        self.find_intent(dataset_id, operation_id).await
    }

    /// Records that an operation ended without publishing (its abort's record), before
    /// whatever ends it deletes its intent: its abort, recovery's abandonment or roll-back.
    /// A begin of it still on its way (a retry of one whose answer was lost) writes its intent
    /// only where there is none, and looks for this record after writing it: without the
    /// record, that begin would find no trace of the end and begin the operation again under
    /// the same id, after its writer or an operator was told it ended (found by mend-sim,
    /// seed 35: exclusive recovery rolled back an operation whose begin was being retried;
    /// the retry began it again and it published). Written only once the operation is fenced
    /// (a batch of abandonments writes it in the step that fences them).
    pub(super) async fn record_end(&self, dataset_id: &str, operation_id: &str) -> Result<()> {
        let record = self.end_record(dataset_id, operation_id);
        self.durably(
            crate::faults::DurableStep::RecordEnd,
            self.catalog.record_request(dataset_id, &record),
        )
        .await
        .map(|_| ())
    }

    /// Whether `operation_id` has ended without publishing, as far as the catalog says now:
    /// its intent fenced (it can never publish), or gone with its end recorded (or, for one
    /// that staged, with its stage recorded and no publish).
    async fn ended_meanwhile(&self, dataset_id: &str, operation_id: &str) -> Result<bool> {
        match self.find_intent(dataset_id, operation_id).await? {
            Some(intent) => Ok(intent.phase == IntentPhase::Abandoned),
            None => Ok(self
                .after_the_end::<()>(dataset_id, operation_id)
                .await
                .is_err_and(|error| error.operation_found() == Some(OperationFound::Ended))),
        }
    }

    /// Whether the end of `operation_id` without publishing is recorded ([`Engine::record_end`]):
    /// it was answered ended, and nothing of it may ever become visible.
    pub(super) async fn ended_without_publishing(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<bool> {
        Ok(self
            .catalog
            .recorded_request(dataset_id, &step_key(operation_id, "abort"))
            .await?
            .is_some())
    }

    /// The record [`Engine::record_end`] writes; a batch of abandonments writes it in its own
    /// atomic step (`Settlement::Abandon`).
    pub(super) fn end_record(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> crate::catalog::RecordedRequest {
        let key = RequestKey::new(step_key(operation_id, "abort"), &operation_id);
        crate::catalog::RecordedRequest::new(
            &key,
            &ended_view(dataset_id, operation_id),
            self.now_ms(),
        )
    }

    /// Undoes what an operation itself did: the rows its begin inserted, while still staged, and their objects where it wrote them; then its intent. A row published
    /// meanwhile (recovery rolled the operation forward) keeps its row and object.
    async fn roll_back_own(&self, intent: &Intent) -> Result<()> {
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        let own = self.own_rows(intent).await?;
        if !own.is_empty() {
            let now = self.now_ms();
            self.catalog
                .mark_stale_staged(dataset_id, &own, i64::MAX, now)
                .await?;
            let query = ListQuery {
                split_ids: Some(own.clone()),
                ..ListQuery::default()
            };
            let rows = self.catalog.list_splits(dataset_id, &query).await?.splits;
            let marked: Vec<String> = rows
                .iter()
                .filter(|row| row.state == SplitState::MarkedForDeletion)
                .map(|row| row.split_id.clone())
                .collect();
            let live = |id: &String| {
                rows.iter()
                    .any(|row| &row.split_id == id && row.state != SplitState::MarkedForDeletion)
            };
            for split_id in own.iter().filter(|id| !live(id)) {
                let ours = self
                    .objects
                    .inspect(dataset_id, split_id)
                    .await?
                    .split()
                    .is_some_and(|(header, _)| {
                        header.operation_id.as_deref() == Some(operation_id.as_str())
                    });
                if ours {
                    self.objects.delete(dataset_id, split_id).await?;
                }
            }
            if !marked.is_empty() {
                self.catalog
                    .delete_splits(dataset_id, &marked, self.now_ms(), None)
                    .await?;
            }
        }
        self.end_and_finish(dataset_id, operation_id).await
    }

    /// Whether an operation's begin is on record: recorded in its own step, or, begun by an
    /// older mend, its stage recorded.
    pub(super) async fn began(&self, dataset_id: &str, operation_id: &str) -> Result<bool> {
        for step in ["begin", "stage"] {
            let key = step_key(operation_id, step);
            if self
                .catalog
                .recorded_request(dataset_id, &key)
                .await?
                .is_some()
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The rows an operation's begin inserted. Begun in one step, all or nothing (its begin
    /// recorded in that step), every row it plans is its own. Begun by an older mend, which
    /// staged after writing its intent, the ones its recorded stage inserted; none if its
    /// begin died before it staged.
    async fn own_rows(&self, intent: &Intent) -> Result<Vec<String>> {
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        let begun = step_key(operation_id, "begin");
        if self
            .catalog
            .recorded_request(dataset_id, &begun)
            .await?
            .is_some()
        {
            return Ok(intent
                .effects
                .stage
                .iter()
                .map(|row| row.split_id.clone())
                .collect());
        }
        let stage = step_key(operation_id, "stage");
        let Some(found) = self.catalog.recorded_request(dataset_id, &stage).await? else {
            return Ok(Vec::new());
        };
        let key = RequestKey {
            key: stage,
            request_digest: found.request_digest.clone(),
        };
        let staged: Vec<crate::model::StagedSplit> = found.replay(&key)?;
        Ok(staged
            .into_iter()
            .filter(|split| split.outcome == StageOutcome::Inserted)
            .map(|split| split.split_id)
            .collect())
    }

    /// Records that an operation ended without publishing, then deletes its intent: in that
    /// order, so that a crash between the two leaves the intent (and whoever finds it finishes
    /// the end), never an operation with neither its intent nor the record of its end.
    pub(super) async fn end_and_finish(&self, dataset_id: &str, operation_id: &str) -> Result<()> {
        self.record_end(dataset_id, operation_id).await?;
        self.finish_intent(dataset_id, operation_id).await
    }

    /// What the catalog holds of one operation, read without judging it: its intent's phase
    /// (while it has one) and whether its stage, its publish and its end are recorded. Once
    /// an operation that staged has no intent, its publish or its end is recorded: whatever
    /// ends an operation records that before it deletes the intent, so that a begin still on
    /// its way finds the end and never begins it again.
    pub async fn operation_ledger(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationLedger> {
        validate::dataset_id(dataset_id)?;
        validate::split_id(operation_id)?;
        let intent = self
            .find_intent(dataset_id, operation_id)
            .await?
            .map(|intent| intent.phase);
        let recorded = |step: &'static str| async move {
            self.catalog
                .recorded_request(dataset_id, &step_key(operation_id, step))
                .await
                .map(|found| found.is_some())
        };
        Ok(OperationLedger {
            intent,
            begun: self.began(dataset_id, operation_id).await?,
            published: recorded("publish").await?,
            ended: recorded("abort").await?,
        })
    }

    /// An operation's phase, each split's object, and what recovery would decide now.
    #[tracing::instrument(
        name = "operation_show",
        level = "debug",
        skip_all,
        fields(dataset_id = %dataset_id, operation_id = %operation_id)
    )]
    pub async fn show_operation(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationView> {
        validate::dataset_id(dataset_id)?;
        validate::split_id(operation_id)?;
        let Some(intent) = self.find_intent(dataset_id, operation_id).await? else {
            if let Some(published) = self.recorded_publish(dataset_id, operation_id).await? {
                return Ok(published_view(dataset_id, operation_id, published));
            }
            if self.began(dataset_id, operation_id).await? {
                return Ok(ended_view(dataset_id, operation_id));
            }
            return Err(MendError::NotFound {
                kind: EntityKind::Intent,
                ids: vec![operation_id.to_string()],
            });
        };
        let mut headers = Vec::with_capacity(intent.effects.objects.len());
        for planned in &intent.effects.objects {
            headers.push(self.planned_header(&intent, planned).await?);
        }
        let mut view = self.view(&intent, None, &headers);
        for (split, planned) in view.splits.iter_mut().zip(&intent.effects.objects) {
            split.object = Some(self.object_status(&intent, planned).await?);
        }
        let probe = self
            .recover(dataset_id, mend_contract::RecoveryMode::Probe)
            .await?;
        view.recovery = probe
            .intents
            .into_iter()
            .find(|report| report.operation_id == operation_id);
        Ok(view)
    }

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
        Ok(self
            .catalog
            .list_intents(dataset_id)
            .await?
            .into_iter()
            .find(|intent| intent.operation_id == operation_id))
    }

    /// The header an operation's object carries: a function of the intent and the dataset.
    async fn planned_header(
        &self,
        intent: &Intent,
        planned: &PlannedObject,
    ) -> Result<SplitObjectHeader> {
        let dataset = self.catalog.dataset(&intent.dataset_id).await?;
        planned_header(intent, planned, &dataset.uid)
    }

    /// Whether a planned object is in place as planned: its header (size, checksum, operation)
    /// and its payload's bytes, hashed against the planned sha256 as they are read back (the
    /// header is the writer's claim; a payload of the right size with one byte flipped must
    /// never be published). An object this process received and hashed itself, or read back
    /// before, is not read again ([`super::uploaded`]).
    async fn object_status(
        &self,
        intent: &Intent,
        planned: &PlannedObject,
    ) -> Result<ObjectStatus> {
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        if self.uploaded.holds(
            dataset_id,
            operation_id,
            &planned.split_id,
            planned.size,
            &planned.checksum,
        ) {
            return Ok(ObjectStatus::Present);
        }
        let expected = |header: &SplitObjectHeader, size: u64| {
            size == planned.size
                && header.payload_sha256 == planned.checksum
                && header.operation_id.as_deref() == Some(operation_id.as_str())
        };
        let found = self
            .objects
            .read_back(dataset_id, &planned.split_id, &expected)
            .await?;
        Ok(match found {
            ReadBack::Missing => ObjectStatus::Missing,
            ReadBack::Intact { .. } => {
                // Objects are never overwritten (put-if-absent, and presigned URLs carry
                // `If-None-Match: *`), so hashed once is hashed for good.
                self.uploaded.remember(
                    dataset_id,
                    operation_id,
                    &planned.split_id,
                    planned.size,
                    &planned.checksum,
                );
                ObjectStatus::Present
            }
            ReadBack::Damaged { .. } | ReadBack::Other { .. } => ObjectStatus::Different,
        })
    }

    /// The planned objects not in place, with what was found; several looked at at once.
    async fn objects_not_in_place(&self, intent: &Intent) -> Result<Vec<(String, ObjectStatus)>> {
        // The futures are made up front: a stream mapping borrowed objects lazily would make
        // this future not `Send` for every lifetime, and so not spawnable by the server.
        let looking: Vec<_> = intent
            .effects
            .objects
            .iter()
            .map(|planned| async move {
                let status = self.object_status(intent, planned).await?;
                Ok::<_, MendError>((planned.split_id.clone(), status))
            })
            .collect();
        let looked: Vec<Result<(String, ObjectStatus)>> = futures::stream::iter(looking)
            .buffer_unordered(crate::objects::EXISTENCE_CHECKS_IN_FLIGHT)
            .collect()
            .await;
        let mut not_in_place = Vec::new();
        for entry in looked {
            let (id, status) = entry?;
            if status != ObjectStatus::Present {
                not_in_place.push((id, status));
            }
        }
        not_in_place.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(not_in_place)
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

    /// Checks a begin before anything is read: ids, sizes, checksums, metadata, the delta and
    /// the merge's replaced splits, and the limits.
    fn check_begin(&self, request: &BeginOperation) -> Result<CheckedBegin> {
        validate::dataset_id(&request.dataset_id)?;
        validate::node(&request.node)?;
        if let Some(id) = &request.operation_id {
            validate::split_id(id).map_err(|_| {
                MendError::invalid(format!(
                    "operation id {:?} is invalid: use 1 to 128 of A-Z a-z 0-9 . _ -, starting with a letter or digit",
                    validate::truncated(id, 64)
                ))
            })?;
        }
        if let Some(ms) = request.lease_ms {
            bounds::OPERATION_LEASE_MS.check(ms)?;
        }
        if request.splits.is_empty() {
            return Err(MendError::invalid("an operation plans at least one split"));
        }
        match request.kind {
            ExternalKind::Commit if !request.replaced_split_ids.is_empty() => {
                return Err(MendError::invalid(
                    "a commit replaces nothing: begin a merge to replace splits",
                ));
            }
            ExternalKind::Merge if request.replaced_split_ids.is_empty() => {
                return Err(MendError::invalid(
                    "a merge replaces at least one split; publish new splits with a commit",
                ));
            }
            ExternalKind::Merge if request.checkpoint_delta.is_some() => {
                return Err(MendError::invalid(
                    "a merge carries no checkpoint delta: it moves no data in",
                ));
            }
            _ => {}
        }
        let stage = request.stage_request();
        validate::stage_request(&stage, self.stage_limits())?;
        let mut seen = BTreeSet::new();
        if let Some(twice) = request
            .splits
            .iter()
            .find(|split| !seen.insert(split.split_id.as_str()))
        {
            return Err(MendError::invalid(format!(
                "split {} appears twice in one operation",
                twice.split_id
            )));
        }
        let publish = PublishRequest {
            dataset_id: request.dataset_id.clone(),
            staged_split_ids: request.splits.iter().map(|s| s.split_id.clone()).collect(),
            replaced_split_ids: request.replaced_split_ids.clone(),
            checkpoint_delta: request.checkpoint_delta.clone(),
            publish_token: request.publish_token.clone(),
            fencing_epoch: None,
        };
        validate::publish_request(&publish, self.options.max_stage_batch)?;
        let headers = request
            .splits
            .iter()
            .map(|split| {
                bounds::OBJECT_PAYLOAD_BYTES.check(split.size)?;
                Ok(SplitObjectHeader {
                    format_version: HEADER_FORMAT_VERSION,
                    dataset_id: request.dataset_id.clone(),
                    dataset_uid: String::new(),
                    split_id: split.split_id.clone(),
                    node: request.node.clone(),
                    metadata_json: split.metadata_json.clone(),
                    operation_id: None,
                    payload_size: split.size,
                    payload_sha256: checksum(&split.split_id, &split.sha256)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(CheckedBegin { headers })
    }
}

struct CheckedBegin {
    /// Each split's object header, but for the dataset uid and the operation id.
    headers: Vec<SplitObjectHeader>,
}

/// The header an operation's object carries: a function of the intent and the dataset's
/// incarnation (`dataset_uid`).
fn planned_header(
    intent: &Intent,
    planned: &PlannedObject,
    dataset_uid: &str,
) -> Result<SplitObjectHeader> {
    let metadata_json = intent
        .effects
        .stage
        .iter()
        .find(|row| row.split_id == planned.split_id)
        .map(|row| row.metadata_json.clone())
        .unwrap_or_default();
    let mut header = SplitObjectHeader {
        format_version: HEADER_FORMAT_VERSION,
        dataset_id: intent.dataset_id.clone(),
        dataset_uid: dataset_uid.to_string(),
        split_id: planned.split_id.clone(),
        node: intent.owner.clone(),
        metadata_json,
        operation_id: Some(intent.operation_id.clone()),
        payload_size: 0,
        payload_sha256: planned.checksum.clone(),
    };
    let bare = format::encoded_len(&header, 0);
    header.payload_size = payload_size_for(planned.size, bare);
    if format::encoded_len(&header, header.payload_size as usize) != planned.size {
        return Err(MendError::Corrupt {
            message: format!(
                "operation {}: the planned object of split {} does not match its header",
                intent.operation_id, planned.split_id
            ),
        });
    }
    Ok(header)
}

/// Whether two intents plan the same operation (a begin sent again), whatever their times.
fn same_plan(stored: &Intent, requested: &Intent) -> bool {
    stored.kind == requested.kind
        && stored.owner == requested.owner
        && stored.effects.stage == requested.effects.stage
        && stored.effects.publish == requested.effects.publish
        && stored
            .effects
            .objects
            .iter()
            .map(|o| (&o.split_id, &o.checksum, o.size))
            .eq(requested
                .effects
                .objects
                .iter()
                .map(|o| (&o.split_id, &o.checksum, o.size)))
}

/// The publish an operation's intent plans.
fn planned_publish(intent: &Intent) -> Result<PublishRequest> {
    let planned = intent
        .effects
        .publish
        .clone()
        .ok_or_else(|| MendError::Corrupt {
            message: format!(
                "operation {}'s intent plans no publish",
                intent.operation_id
            ),
        })?;
    Ok(PublishRequest {
        dataset_id: intent.dataset_id.clone(),
        staged_split_ids: planned.staged_split_ids,
        replaced_split_ids: planned.replaced_split_ids,
        checkpoint_delta: planned.checkpoint_delta,
        publish_token: planned.publish_token,
        fencing_epoch: None,
    })
}

fn another_object_in_place(split_id: &str) -> MendError {
    MendError::AlreadyExists {
        kind: EntityKind::Split,
        id: format!(
            "{split_id} (another object is in its place: not the size, checksum or operation planned)"
        ),
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

fn confirmed_cannot_abort(operation_id: &str) -> MendError {
    MendError::operation_refused(
        format!(
            "operation {operation_id} confirmed its effects (phase effects_confirmed): it can no longer be aborted, and publishes unless another operation publishes from the same checkpoint positions first (then it ends); send its publish to learn which"
        ),
        operation_id,
        OperationFound::Confirmed,
    )
}

fn published_cannot_abort(operation_id: &str, published: &PublishResult) -> MendError {
    MendError::operation_refused(
        format!(
            "operation {operation_id} published at manifest version {}: it cannot be aborted",
            published.manifest_version
        ),
        operation_id,
        OperationFound::Published,
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

/// The payload size of an object of `object_size` bytes whose header, with a payload size of
/// 0, encodes to `bare` bytes: the header's own length grows with the digits of the size.
fn payload_size_for(object_size: u64, bare: u64) -> u64 {
    // "payload_size":0 is one digit; each further digit of the real size adds a byte.
    let mut payload = object_size.saturating_sub(bare);
    for _ in 0..20 {
        let digits = payload.max(1).ilog10() as u64 + 1;
        let candidate = object_size.saturating_sub(bare + digits - 1);
        if candidate == payload {
            break;
        }
        payload = candidate;
    }
    payload
}

/// The 32 bytes of a whole object's sha256, given as 64 hex digits (or `sha256:<hex>`).
fn object_digest(index: usize, given: &str) -> Result<[u8; 32]> {
    let hex = given.strip_prefix("sha256:").unwrap_or(given);
    let invalid = || {
        MendError::invalid(format!(
            "objects[{index}].object_sha256 {:?} is invalid: give the whole object's sha256 as 64 hex digits",
            validate::truncated(given, 80)
        ))
    };
    if hex.len() != 64 || !hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(invalid());
    }
    let mut digest = [0u8; 32];
    for (byte, pair) in digest.iter_mut().zip(hex.as_bytes().chunks(2)) {
        let pair = std::str::from_utf8(pair).map_err(|_| invalid())?;
        *byte = u8::from_str_radix(pair, 16).map_err(|_| invalid())?;
    }
    Ok(digest)
}

/// `sha256:<hex>` from `sha256:<hex>` or bare hex, lower-cased; refused otherwise.
fn checksum(split_id: &str, given: &str) -> Result<String> {
    let hex = given.strip_prefix("sha256:").unwrap_or(given);
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(MendError::invalid(format!(
            "split {split_id}: sha256 {:?} is invalid: give 64 hex digits, optionally prefixed `sha256:`",
            validate::truncated(given, 80)
        )));
    }
    Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
}

/// Counts and hashes a payload as it streams, against the size and checksum planned.
struct PayloadCheck {
    split_id: String,
    expected_size: u64,
    expected_sha256: String,
    seen: u64,
    hasher: sha2::Sha256,
}

impl PayloadCheck {
    fn new(header: &SplitObjectHeader) -> Self {
        use sha2::Digest;
        Self {
            split_id: header.split_id.clone(),
            expected_size: header.payload_size,
            expected_sha256: header.payload_sha256.clone(),
            seen: 0,
            hasher: sha2::Sha256::new(),
        }
    }

    fn feed(&mut self, chunk: &[u8]) -> Result<()> {
        use sha2::Digest;
        self.seen = self.seen.saturating_add(chunk.len() as u64);
        if self.seen > self.expected_size {
            return Err(MendError::invalid(format!(
                "split {}: the upload is longer than the {} bytes planned; nothing was written",
                self.split_id, self.expected_size
            )));
        }
        self.hasher.update(chunk);
        Ok(())
    }

    fn finish(self) -> Result<()> {
        use sha2::Digest;
        if self.seen != self.expected_size {
            return Err(MendError::invalid(format!(
                "split {}: the upload has {} bytes, {} were planned; nothing was written",
                self.split_id, self.seen, self.expected_size
            )));
        }
        let hex: String = self
            .hasher
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let actual = format!("sha256:{hex}");
        if actual != self.expected_sha256 {
            return Err(MendError::invalid(format!(
                "split {}: the upload's sha256 is {actual}, {} was planned; nothing was written",
                self.split_id, self.expected_sha256
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole object's sha256, as a writer that puts its objects itself gives it: exactly 64
    /// hex digits (after an optional `sha256:`); fewer or more, even all hex, are refused,
    /// naming the object by its place in the request.
    #[test]
    fn an_object_digest_is_64_hex_digits_and_nothing_else() {
        let good = "aB".repeat(32);
        assert_eq!(object_digest(0, &good).unwrap(), [0xab; 32]);
        assert_eq!(
            object_digest(0, &format!("sha256:{good}")).unwrap(),
            [0xab; 32]
        );
        let mut refused = 0;
        for bad in [
            "ab".repeat(31),
            "ab".repeat(33),
            format!("{}zz", "ab".repeat(31)),
            format!("sha256:{}", "ab".repeat(31)),
            String::new(),
        ] {
            match object_digest(3, &bad) {
                Err(MendError::InvalidArgument { message }) => {
                    assert!(message.contains("objects[3].object_sha256"), "{message}")
                }
                other => panic!("{bad:?}: {other:?}"),
            }
            refused += 1;
        }
        assert_eq!(refused, 5);
    }

    #[test]
    fn the_payload_size_is_recovered_from_the_object_size_whatever_its_digits() {
        let header = |size: u64| SplitObjectHeader {
            format_version: HEADER_FORMAT_VERSION,
            dataset_id: "ds".into(),
            dataset_uid: "uid".into(),
            split_id: "s1".into(),
            node: "n".into(),
            metadata_json: "{}".into(),
            operation_id: Some("op".into()),
            payload_size: size,
            payload_sha256: "sha256:00".into(),
        };
        let bare = format::encoded_len(&header(0), 0);
        for size in [
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            1 << 20,
            999_999_999_999,
            5 << 40,
        ] {
            let object = format::encoded_len(&header(size), size as usize);
            assert_eq!(
                payload_size_for(object, bare),
                size,
                "payload of {size} bytes"
            );
        }
    }

    #[test]
    fn checksums_are_normalised_and_bad_ones_refused() {
        let hex = "AB".repeat(32);
        assert_eq!(
            checksum("s", &hex).unwrap(),
            format!("sha256:{}", "ab".repeat(32))
        );
        assert!(checksum("s", &format!("sha256:{hex}")).is_ok());
        for bad in ["", "sha256:", "xyz", &"a".repeat(63), &"g".repeat(64)] {
            assert!(checksum("s", bad).is_err(), "{bad:?}");
        }
    }

    /// A publish that reads the objects back while an abort rolls the operation back (the
    /// abort lands between the publish's read of the intent and its read of the object, and
    /// deletes the object) answers that the operation ended, what became of it, not "upload
    /// them first", which no upload could help (found by the server's race test).
    #[tokio::test]
    async fn a_publish_whose_objects_an_abort_took_meanwhile_answers_ended() {
        use std::sync::atomic::{AtomicBool, Ordering};

        use futures::FutureExt;

        use crate::engine::{ExternalKind, PlannedSplit};
        use crate::hooked_store::HookedStore;
        use crate::model::DatasetConfig;

        const PAYLOAD: &[u8] = b"the payload of split s1";
        let store = std::sync::Arc::new(HookedStore::default());
        // Two processes over one store: the writer uploads and aborts; the other publishes,
        // so it reads the object back.
        let process = || store.engine();
        let (writer, publisher) = (process(), process());
        writer
            .create_dataset("ds", &DatasetConfig::default())
            .await
            .unwrap();
        writer
            .begin_operation(&BeginOperation {
                dataset_id: "ds".into(),
                operation_id: Some("op-1".into()),
                kind: ExternalKind::Commit,
                node: "writer".into(),
                lease_ms: Some(60_000),
                splits: vec![PlannedSplit {
                    split_id: "s1".into(),
                    metadata_json: "{}".into(),
                    size: PAYLOAD.len() as u64,
                    sha256: format::sha256(PAYLOAD),
                }],
                checkpoint_delta: None,
                replaced_split_ids: Vec::new(),
                publish_token: None,
            })
            .await
            .unwrap();
        let chunks = futures::stream::iter([Ok(Bytes::from_static(PAYLOAD))]);
        writer
            .upload_object("ds", "op-1", "s1", chunks)
            .await
            .unwrap();

        let fired = std::sync::Arc::new(AtomicBool::new(false));
        let (aborting, hook_fired) = (writer.clone(), fired.clone());
        store.set_before_get(move |path| {
            let (writer, fired) = (aborting.clone(), hook_fired.clone());
            let object = path.as_ref().contains("/splits/");
            async move {
                if object && !fired.swap(true, Ordering::SeqCst) {
                    writer.abort_operation("ds", "op-1").await.unwrap();
                }
            }
            .boxed()
        });
        let error = publisher.publish_operation("ds", "op-1").await.unwrap_err();
        assert!(fired.load(Ordering::SeqCst), "the abort ran mid-publish");
        assert_eq!(
            error.operation_found(),
            Some(OperationFound::Ended),
            "{error:?}"
        );
    }
}

//! The operation routes: the crash-safe commit protocol for writers in other processes
//! ([`mend::engine::Engine::begin_operation`] and the steps after it).
//!
//! | method and path                                              | step      |
//! |--------------------------------------------------------------|-----------|
//! | `POST /v1/datasets/{d}/operations`                           | begin     |
//! | `PUT  /v1/datasets/{d}/operations/{op}/splits/{split}`       | upload one object, the body streamed |
//! | `POST /v1/datasets/{d}/operations/{op}/heartbeat`            | heartbeat |
//! | `POST /v1/datasets/{d}/operations/{op}/publish`              | confirm and publish |
//! | `POST /v1/datasets/{d}/operations/{op}/abort`                | abort     |
//! | `GET  /v1/datasets/{d}/operations/{op}`                      | show      |
//! | `POST /v1/datasets/{d}/operations/{op}/upload-urls`          | presigned URLs for objects the writer puts itself (S3) |
//!
//! The operation id is every step's idempotency key: each is safe to send again.
//!
//! An upload's body is never held whole: it streams into the store (one part of at most
//! [`SINGLE_PUT_BYTES`](mend::engine::SINGLE_PUT_BYTES) at a time), capped by the size
//! the operation planned, and each chunk must arrive within `serve.body_read_timeout_ms` of
//! the one before (a slow but steady upload of a large object is not cut off; a stalled one
//! is).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, State};
use axum::http::HeaderMap;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::write::write;
use crate::Shared;
use crate::access::{Caller, claim_operation};
use crate::body::{CompactBody, JsonBody, parse, parse_json_or_compact};
use crate::error::{ApiResult, engine_error, ok};
use crate::openapi::{
    BadRequest, Conflict, DatasetPath, InternalError, NotFound, OperationPath, PayloadTooLarge,
    PreconditionFailed, RequestTimeout, Unavailable, Unprocessable, UploadPath,
};
use mend::compact::{Decoded, Reader};
use mend::engine::{BeginOperation, ExternalKind, ObjectToPut, ObjectUploadUrl, PlannedSplit};
use mend::error::MendError;
use mend::model::CheckpointDelta;

use super::AppState;

/// A begin's body: [`BeginOperation`] without the dataset, which the path names.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = BeginRequest)]
pub(crate) struct Begin {
    #[serde(default)]
    operation_id: Option<String>,
    kind: ExternalKind,
    node: String,
    #[serde(default)]
    lease_ms: Option<u64>,
    splits: Vec<PlannedSplit>,
    #[serde(default)]
    checkpoint_delta: Option<CheckpointDelta>,
    #[serde(default)]
    replaced_split_ids: Vec<String>,
    #[serde(default)]
    publish_token: Option<String>,
}

impl JsonBody for Begin {
    const SHAPE: &'static str = r#"{"operation_id"?: ID, "kind": "commit"|"merge", "node": STRING, "lease_ms"?: MS, "splits": [{"split_id": ID, "metadata_json": STRING, "size": BYTES, "sha256": HEX}], "checkpoint_delta"?: {...}, "replaced_split_ids"?: [ID], "publish_token"?: STRING}"#;
    const FIELDS: &'static [(&'static str, &'static str)] = &[
        (
            "operation_id",
            "an id of your choosing (1 to 128 of A-Z a-z 0-9 . _ -): it makes the begin safe to retry",
        ),
        ("kind", r#""commit" or "merge""#),
        ("node", "a string naming the writer"),
        ("lease_ms", "milliseconds, 1000 to 604800000"),
        (
            "splits",
            r#"an array of {"split_id": ID, "metadata_json": STRING (a JSON object as text), "size": BYTES, "sha256": HEX}"#,
        ),
        (
            "checkpoint_delta",
            r#"an object {"source": STRING, "partitions": [{"partition": STRING, "from_position": POSITION|null, "to_position": POSITION}]}"#,
        ),
        ("replaced_split_ids", "an array of split ids (a merge's)"),
        ("publish_token", "a string"),
    ];
}

impl CompactBody for Begin {
    const COMPACT_LAYOUT: &'static str = "operation_id option of string, kind byte (0 commit, 1 merge), node string, lease_ms option of number, splits list of (split_id string, metadata_json string, size number, sha256 string), checkpoint_delta option of (source string, partitions list of (partition string, from_position option of number, to_position number)), replaced_split_ids list of string, publish_token option of string";

    fn read_compact(input: &mut Reader<'_>) -> Decoded<Self> {
        let operation_id = input.option(Reader::string)?;
        let started = input.at();
        let kind = match input.byte()? {
            0 => ExternalKind::Commit,
            1 => ExternalKind::Merge,
            tag => {
                return Err(format!(
                    "the kind at byte {started} is {tag}, neither 0 (commit) nor 1 (merge)"
                ));
            }
        };
        Ok(Begin {
            operation_id,
            kind,
            node: input.string()?,
            lease_ms: input.option(Reader::number)?,
            splits: input.list(|input| {
                Ok(PlannedSplit {
                    split_id: input.string()?,
                    metadata_json: input.string()?,
                    size: input.number()?,
                    sha256: input.string()?,
                })
            })?,
            checkpoint_delta: input.option(Reader::checkpoint_delta)?,
            replaced_split_ids: input.strings()?,
            publish_token: input.option(Reader::string)?,
        })
    }
}

impl Begin {
    pub(crate) fn into_request(self, dataset_id: String) -> BeginOperation {
        BeginOperation {
            dataset_id,
            operation_id: self.operation_id,
            kind: self.kind,
            node: self.node,
            lease_ms: self.lease_ms,
            splits: self.splits,
            checkpoint_delta: self.checkpoint_delta,
            replaced_split_ids: self.replaced_split_ids,
            publish_token: self.publish_token,
        }
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = HeartbeatRequest)]
struct Heartbeat {
    #[serde(default)]
    lease_ms: Option<u64>,
}

impl JsonBody for Heartbeat {
    const SHAPE: &'static str = r#"{"lease_ms"?: MS}"#;
    const FIELDS: &'static [(&'static str, &'static str)] =
        &[("lease_ms", "milliseconds, 1000 to 604800000")];
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = UploadUrlsRequest)]
struct UploadUrlsBody {
    objects: Vec<ObjectToPut>,
}

impl JsonBody for UploadUrlsBody {
    const SHAPE: &'static str = r#"{"objects": [{"split_id": ID, "object_sha256": HEX}]}"#;
    const FIELDS: &'static [(&'static str, &'static str)] = &[(
        "objects",
        r#"an array of {"split_id": ID, "object_sha256": HEX (the sha256 of the whole object: prefix, header, payload)}"#,
    )];
}

/// The presigned URLs, one per object asked for, in order.
#[derive(Serialize, ToSchema)]
#[schema(as = UploadUrls)]
struct UploadUrls {
    objects: Vec<ObjectUploadUrl>,
}

/// Begins an operation: writes its intent and stages its rows create-only.
///
/// Choose `operation_id` yourself: it is every step's idempotency key, and a begin sent again
/// resumes the operation. A row another writer holds ends the operation at once (412 naming it).
#[utoipa::path(
    post,
    operation_id = "begin_operation",
    path = "/v1/datasets/{dataset}/operations",
    tag = "operations",
    params(DatasetPath),
    request_body(description = "JSON, or the same request as a compact body (`Content-Type: application/vnd.mend.compact.v1`; its layout is in the book's HTTP API page)", content((Begin = "application/json"), ("application/vnd.mend.compact.v1"))),
    responses(
        (status = 200, description = "the operation: each split's object path, size and header", body = mend::engine::OperationView),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 409, response = Conflict),
        (status = 412, response = PreconditionFailed),
        (status = 413, response = PayloadTooLarge),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn begin(
    State(shared): AppState,
    Extension(caller): Extension<Caller>,
    Path(dataset_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let mut request =
        parse_json_or_compact::<Begin>(&headers, &body)?.into_request(dataset_id.clone());
    // The operation is its principal's from the start: its id is claimed before anything of
    // it is written (so the server picks the id a writer leaves out).
    let operation_id = request
        .operation_id
        .get_or_insert_with(|| mend::ambient::uuid_v4().to_string())
        .clone();
    // Only a begin the engine would accept claims the id: a refused one leaves no claim
    // that would turn the rightful writer's begin of that id away.
    shared
        .engine
        .check_begin_operation(&request)
        .map_err(|error| crate::error::engine_error(&shared, &dataset_id, error))?;
    claim_operation(&shared, &caller, &dataset_id, &operation_id).await?;
    let engine = shared.acting_engine();
    ok(&write(&shared, &dataset_id, None, async move {
        engine.begin_operation(&request).await
    })
    .await?)
}

/// Uploads one planned object, the body streamed into the store.
///
/// Nothing is written unless the bytes have the planned size and sha256 (400 otherwise); an object
/// already in place as planned is answered `"written": false`.
#[utoipa::path(
    put,
    operation_id = "upload_object",
    path = "/v1/datasets/{dataset}/operations/{operation}/splits/{split}",
    tag = "operations",
    params(UploadPath),
    request_body(description = "the payload bytes, streamed", content(("application/octet-stream"))),
    responses(
        (status = 200, description = "the object, in place", body = mend::engine::UploadResult),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 412, response = PreconditionFailed),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn upload(
    State(shared): AppState,
    Path((dataset_id, operation_id, split_id)): Path<(String, String, String)>,
    body: Body,
) -> ApiResult {
    let engine = shared.acting_engine();
    let idle = shared.options.limits.body_read_timeout;
    let payload = chunks_within(body, idle);
    let dataset = dataset_id.clone();
    ok(&write(&shared, &dataset_id, None, async move {
        engine
            .upload_object(&dataset, &operation_id, &split_id, payload)
            .await
    })
    .await?)
}

/// Extends the operation's lease, so recovery never abandons a live slow writer.
///
/// 412 once the operation ended.
#[utoipa::path(
    post,
    operation_id = "heartbeat_operation",
    path = "/v1/datasets/{dataset}/operations/{operation}/heartbeat",
    tag = "operations",
    params(OperationPath),
    request_body = Heartbeat,
    responses(
        (status = 200, description = "the operation with its new lease", body = mend::engine::OperationView),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 409, response = Conflict),
        (status = 412, response = PreconditionFailed),
        (status = 413, response = PayloadTooLarge),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn heartbeat(
    State(shared): AppState,
    Path((dataset_id, operation_id)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    let request: Heartbeat = parse(&body)?;
    let engine = shared.acting_engine();
    let dataset = dataset_id.clone();
    ok(&write(&shared, &dataset_id, None, async move {
        engine
            .heartbeat_operation(&dataset, &operation_id, request.lease_ms)
            .await
    })
    .await?)
}

/// Checks every object, confirms and publishes the operation with its delta.
///
/// 412 naming objects not in place, or for a delta that no longer applies (nothing confirmed then).
/// A publish that landed (by its writer or by recovery) answers its result again.
#[utoipa::path(
    post,
    operation_id = "publish_operation",
    path = "/v1/datasets/{dataset}/operations/{operation}/publish",
    tag = "operations",
    params(OperationPath),
    responses(
        (status = 200, description = "the operation, published, with `publish`", body = mend::engine::OperationView),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 409, response = Conflict),
        (status = 412, response = PreconditionFailed),
        (status = 413, response = PayloadTooLarge),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn publish(
    State(shared): AppState,
    Path((dataset_id, operation_id)): Path<(String, String)>,
) -> ApiResult {
    let engine = shared.acting_engine();
    let dataset = dataset_id.clone();
    let result = write(&shared, &dataset_id, None, async move {
        engine.publish_operation(&dataset, &operation_id).await
    })
    .await;
    if result.is_ok() {
        shared.metrics.decision("publish", "accepted", 1);
    }
    ok(&result?)
}

/// Aborts the operation in one step (fenced, its rows marked, its end recorded); its rows
/// and objects are removed after the answer.
///
/// 412 once it confirmed; an ended operation answers `ended` again.
#[utoipa::path(
    post,
    operation_id = "abort_operation",
    path = "/v1/datasets/{dataset}/operations/{operation}/abort",
    tag = "operations",
    params(OperationPath),
    responses(
        (status = 200, description = "the operation, ended", body = mend::engine::OperationView),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 409, response = Conflict),
        (status = 412, response = PreconditionFailed),
        (status = 413, response = PayloadTooLarge),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn abort(
    State(shared): AppState,
    Path((dataset_id, operation_id)): Path<(String, String)>,
) -> ApiResult {
    let engine = shared.acting_engine();
    let dataset = dataset_id.clone();
    ok(&write(&shared, &dataset_id, None, async move {
        engine.abort_operation(&dataset, &operation_id).await
    })
    .await?)
}

/// Presigned URLs to put objects of the operation straight into the store (S3 and
/// S3-compatible stores).
///
/// Give each object's whole sha256 (prefix, header, payload): each URL is signed over
/// `If-None-Match: *` and that checksum, so the store takes exactly that object, once. Send the
/// answered `headers` with the `PUT`. 422 `capability_missing` where the store cannot presign
/// (upload through mend there); 412 once the operation confirmed, ended or its lease ran out.
/// Publish still reads each object back and hashes its payload against the plan.
#[utoipa::path(
    post,
    operation_id = "operation_upload_urls",
    path = "/v1/datasets/{dataset}/operations/{operation}/upload-urls",
    tag = "operations",
    params(OperationPath),
    request_body = UploadUrlsBody,
    responses(
        (status = 200, description = "one URL per object, with the headers its `PUT` must carry", body = UploadUrls),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 412, response = PreconditionFailed),
        (status = 413, response = PayloadTooLarge),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn upload_urls(
    State(shared): AppState,
    Path((dataset_id, operation_id)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    let request: UploadUrlsBody = parse(&body)?;
    let objects = shared
        .engine
        .upload_urls(&dataset_id, &operation_id, &request.objects)
        .await
        .map_err(|error| engine_error(&shared, &dataset_id, error))?;
    ok(&UploadUrls { objects })
}

/// An operation: its phase, each object's status and what recovery would decide now.
#[utoipa::path(
    get,
    operation_id = "show_operation",
    path = "/v1/datasets/{dataset}/operations/{operation}",
    tag = "operations",
    params(OperationPath),
    responses(
        (status = 200, description = "the operation", body = mend::engine::OperationView),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn show(
    State(shared): AppState,
    Path((dataset_id, operation_id)): Path<(String, String)>,
) -> ApiResult {
    let view = shared
        .engine
        .show_operation(&dataset_id, &operation_id)
        .await
        .map_err(|error| engine_error(&shared, &dataset_id, error))?;
    ok(&view)
}

/// The body's chunks, each of which must arrive within `idle` of the one before.
fn chunks_within(
    body: Body,
    idle: Duration,
) -> impl Stream<Item = Result<Bytes, MendError>> + Send + Unpin + 'static {
    let chunks = body.into_data_stream();
    Box::pin(futures::stream::unfold(
        Some(chunks),
        move |state| async move {
            let mut chunks = state?;
            match tokio::time::timeout(idle, chunks.next()).await {
                Ok(None) => None,
                Ok(Some(Ok(bytes))) => Some((Ok(bytes), Some(chunks))),
                Ok(Some(Err(error))) => Some((
                    Err(MendError::invalid(format!(
                        "the upload broke off: {error}; nothing was written"
                    ))),
                    None,
                )),
                Err(_elapsed) => Some((
                    Err(MendError::invalid(format!(
                        "the upload stalled: no bytes for {} ms (serve.body_read_timeout_ms); nothing was written",
                        idle.as_millis()
                    ))),
                    None,
                )),
            }
        },
    ))
}

pub(super) fn routes() -> OpenApiRouter<Arc<Shared>> {
    OpenApiRouter::new()
        .routes(routes!(begin))
        .routes(routes!(show))
        .routes(routes!(heartbeat))
        .routes(routes!(publish))
        .routes(routes!(abort))
        .routes(routes!(upload_urls))
}

/// The object upload, which streams: its cap is the size its operation planned.
pub(super) fn upload_routes() -> OpenApiRouter<Arc<Shared>> {
    OpenApiRouter::new().routes(routes!(upload))
}

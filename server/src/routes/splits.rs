//! The protocol's single steps on splits: stage, publish, mark, delete, list.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use mend::compact::{Decoded, Reader, Writer};
use mend::model::{
    CheckpointDelta, ListQuery, PublishRequest, SplitState, StageMode, StageOutcome, StageRequest,
    StageResult, StageSplit, TimeRange,
};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Shared;
use crate::answers::Deleted;
use crate::body::{
    COMPACT_BODY, CompactBody, JsonBody, accepts_compact, parse, parse_json_or_compact,
};
use crate::error::{ApiError, ApiResult, ErrorCode, engine_error, ok};
use crate::openapi::{
    BadRequest, DatasetPath, IdempotencyKey, InternalError, ListSplitsQuery, NotFound,
    PayloadTooLarge, PreconditionFailed, RequestTimeout, Unavailable, Unprocessable,
};

use super::write::{ClientKey, keyed_write, served};
use super::{AppState, server_node};

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = StageRequest)]
pub(crate) struct Stage {
    /// Required: there is no default mode.
    mode: StageMode,
    #[serde(default = "server_node")]
    node: String,
    splits: Vec<SplitEntry>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = StageSplitEntry)]
struct SplitEntry {
    split_id: String,
    /// A JSON object: docs, bytes, time range, tags, whatever the writer adds.
    #[serde(default = "empty_object")]
    #[schema(value_type = Object)]
    metadata: Metadata,
}

/// A split's metadata as it came: a JSON value, which the server writes out compact (the form
/// the metadata limit counts), or the text of a compact body, passed on as it is.
enum Metadata {
    Json(Value),
    Text(String),
}

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Metadata::Json)
    }
}

impl Metadata {
    fn into_text(self) -> String {
        match self {
            Metadata::Json(value) => value.to_string(),
            Metadata::Text(text) => text,
        }
    }
}

impl JsonBody for Stage {
    const SHAPE: &'static str = r#"{"mode": "upsert"|"create-only", "node"?: STRING, "splits": [{"split_id": STRING, "metadata"?: OBJECT}]}"#;
    const FIELDS: &'static [(&'static str, &'static str)] = &[
        ("mode", r#""upsert" or "create-only" (there is no default)"#),
        ("node", "a string naming the writer"),
        (
            "splits",
            r#"an array of {"split_id": STRING, "metadata"?: OBJECT}"#,
        ),
    ];
}

fn empty_object() -> Metadata {
    Metadata::Json(json!({}))
}

impl CompactBody for Stage {
    const COMPACT_LAYOUT: &'static str = "mode byte (0 upsert, 1 create-only), node option of string, splits list of (split_id string, metadata string)";

    fn read_compact(input: &mut Reader<'_>) -> Decoded<Self> {
        let started = input.at();
        let mode = match input.byte()? {
            0 => StageMode::Upsert,
            1 => StageMode::CreateOnly,
            tag => {
                return Err(format!(
                    "the mode at byte {started} is {tag}, neither 0 (upsert) nor 1 (create-only)"
                ));
            }
        };
        let node = input.option(Reader::string)?.unwrap_or_else(server_node);
        let splits = input.list(|input| {
            Ok(SplitEntry {
                split_id: input.string()?,
                metadata: Metadata::Text(input.string()?),
            })
        })?;
        Ok(Stage { mode, node, splits })
    }
}

impl Stage {
    /// The engine's request for dataset `dataset_id`; each split's metadata as JSON text.
    pub(crate) fn into_request(self, dataset_id: String) -> StageRequest {
        StageRequest {
            dataset_id,
            mode: self.mode,
            node: self.node,
            splits: self
                .splits
                .into_iter()
                .map(|entry| StageSplit {
                    split_id: entry.split_id,
                    metadata_json: entry.metadata.into_text(),
                })
                .collect(),
        }
    }
}

/// Stages splits, in upsert or create-only mode (no default).
///
/// Each split is answered `inserted`, `overwritten` or `skipped` (with the existing state), in
/// JSON or, asked for with `Accept`, by index in the compact encoding; an upsert that would
/// touch a row not staged is 412 naming the ids, and writes nothing.
#[utoipa::path(
    post,
    path = "/v1/datasets/{dataset}/stage",
    tag = "splits",
    params(DatasetPath, IdempotencyKey),
    request_body(description = "JSON, or the same request as a compact body (`Content-Type: application/vnd.mend.compact.v1`; its layout is in the book's HTTP API page)", content((Stage = "application/json"), ("application/vnd.mend.compact.v1"))),
    responses(
        (status = 200, description = "what became of each split: JSON, or with `Accept: application/vnd.mend.compact.v1` an answer by index (the mode, then one outcome byte per request entry; its layout is in the book's HTTP API page)", content((mend::model::StageResult = "application/json"), ("application/vnd.mend.compact.v1"))),
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
async fn stage(
    State(shared): AppState,
    ClientKey(key): ClientKey,
    Path(dataset_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let request = parse_json_or_compact::<Stage>(&headers, &body)?.into_request(dataset_id.clone());
    // The answer by index names no id: it follows the request's own order.
    let ids: Option<Vec<String>> = accepts_compact(&headers)
        .then(|| request.splits.iter().map(|s| s.split_id.clone()).collect());
    let engine = shared.acting_engine();
    // An unresolved operation naming one of the splits is checked by the stage itself, on the
    // state it writes on (one read, not one before the write and another in it).
    let result = keyed_write(
        &shared,
        &dataset_id,
        key.clone().as_deref(),
        None,
        async move {
            engine
                .stage_unless_in_the_way(&request)
                .idempotency_key(key.as_deref())
                .await
        },
    )
    .await;
    match &result {
        Ok((_, true)) => {}
        Ok((staged, false)) => shared.metrics.stage(staged),
        Err(error) if error.refused_by_the_rules() => {
            shared.metrics.decision("stage", "refused", 1)
        }
        Err(_) => {}
    }
    let staged = result?.0;
    match ids {
        Some(ids) => answer_by_index(&ids, &staged),
        None => ok(&staged),
    }
}

/// A stage's answer by index, in the compact encoding ([`COMPACT_BODY`]): the mode, then one
/// outcome byte for each entry of the request, in the request's order (an id sent twice is
/// answered twice, alike). Neither side writes or reads a split id the client already has
/// (worth 1.08x to 1.11x of the JSON answer in the serve bench: the book's Benchmarks page).
fn answer_by_index(ids: &[String], staged: &StageResult) -> ApiResult {
    let mut out = Writer::with_capacity(ids.len() + 8);
    out.byte(match staged.mode {
        StageMode::Upsert => 0,
        StageMode::CreateOnly => 1,
    });
    out.number(ids.len() as u64);
    for id in ids {
        // The engine answers one entry per distinct id, sorted by id.
        let found = staged
            .splits
            .binary_search_by(|split| split.split_id.as_str().cmp(id))
            .map_err(|_| {
                // The stage took effect: only its answer could not be written.
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ErrorCode::Internal,
                    format!("the stage answered no outcome for split {id:?}, which it was sent"),
                )
                .certainly_not_applied(false)
            })?;
        out.byte(outcome_byte(staged.splits[found].outcome));
    }
    Ok(([(header::CONTENT_TYPE, COMPACT_BODY)], out.into_bytes()).into_response())
}

/// One outcome's byte in a stage's answer by index (the book's HTTP API page).
fn outcome_byte(outcome: StageOutcome) -> u8 {
    match outcome {
        StageOutcome::Inserted => 0,
        StageOutcome::Overwritten => 1,
        StageOutcome::Skipped(SplitState::Staged) => 2,
        StageOutcome::Skipped(SplitState::Published) => 3,
        StageOutcome::Skipped(SplitState::MarkedForDeletion) => 4,
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = PublishRequest)]
pub(crate) struct Publish {
    #[serde(default)]
    staged_split_ids: Vec<String>,
    #[serde(default)]
    replaced_split_ids: Vec<String>,
    #[serde(default)]
    checkpoint_delta: Option<CheckpointDelta>,
    #[serde(default)]
    publish_token: Option<String>,
}

impl JsonBody for Publish {
    const SHAPE: &'static str = r#"{"staged_split_ids": [ID], "replaced_split_ids"?: [ID], "checkpoint_delta"?: {"source": STRING, "partitions": [...]}, "publish_token"?: STRING}"#;
    const FIELDS: &'static [(&'static str, &'static str)] = &[
        ("staged_split_ids", "an array of split ids"),
        ("replaced_split_ids", "an array of split ids"),
        (
            "checkpoint_delta",
            r#"an object {"source": STRING, "partitions": [{"partition": STRING, "from": POSITION?, "to": POSITION}]}"#,
        ),
        ("publish_token", "a string"),
    ];
}

impl Publish {
    /// The engine's request for dataset `dataset_id`. Over HTTP a publish carries no fencing
    /// epoch: the publish token fences.
    pub(crate) fn into_request(self, dataset_id: String) -> PublishRequest {
        PublishRequest {
            dataset_id,
            staged_split_ids: self.staged_split_ids,
            replaced_split_ids: self.replaced_split_ids,
            checkpoint_delta: self.checkpoint_delta,
            publish_token: self.publish_token,
            fencing_epoch: None,
        }
    }
}

/// Publishes staged splits, marks replaced ones and applies a checkpoint delta, all at once.
///
/// 412 naming the ids at fault (not staged, not published, no object), or for a checkpoint or
/// publish token that does not match; nothing happens then.
#[utoipa::path(
    post,
    path = "/v1/datasets/{dataset}/publish",
    tag = "splits",
    params(DatasetPath, IdempotencyKey),
    request_body = Publish,
    responses(
        (status = 200, description = "the manifest version, published and marked ids", body = mend::model::PublishResult),
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
async fn publish(
    State(shared): AppState,
    ClientKey(key): ClientKey,
    Path(dataset_id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let request = parse::<Publish>(&body)?.into_request(dataset_id.clone());
    let engine = shared.acting_engine();
    // An operation in the way is refused in the publish's own atomic step.
    let result = keyed_write(
        &shared,
        &dataset_id,
        key.clone().as_deref(),
        None,
        async move {
            engine
                .publish_unless_in_the_way(&request)
                .idempotency_key(key.as_deref())
                .await
        },
    )
    .await;
    match &result {
        Ok((_, true)) => {}
        Ok((_, false)) => shared.metrics.decision("publish", "accepted", 1),
        Err(error) if error.refused_by_the_rules() => {
            shared.metrics.decision("publish", "refused", 1)
        }
        Err(_) => {}
    }
    ok(&result?.0)
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SplitIdsRequest)]
pub(crate) struct SplitIds {
    pub(crate) split_ids: Vec<String>,
}

impl JsonBody for SplitIds {
    const SHAPE: &'static str = r#"{"split_ids": [ID]}"#;
    const FIELDS: &'static [(&'static str, &'static str)] =
        &[("split_ids", "an array of split ids")];
}

/// Marks splits for deletion; marking is idempotent.
#[utoipa::path(
    post,
    operation_id = "mark_for_deletion",
    path = "/v1/datasets/{dataset}/mark",
    tag = "splits",
    params(DatasetPath, IdempotencyKey),
    request_body = SplitIds,
    responses(
        (status = 200, description = "marked and already marked ids", body = mend::model::MarkResult),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 412, response = PreconditionFailed),
        (status = 413, response = PayloadTooLarge),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn mark(
    State(shared): AppState,
    ClientKey(key): ClientKey,
    Path(dataset_id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let request: SplitIds = parse(&body)?;
    let engine = shared.acting_engine();
    let id = dataset_id.clone();
    let recorded_key = key.clone();
    // An operation in the way is refused in the mark's own atomic step.
    ok(&keyed_write(
        &shared,
        &dataset_id,
        recorded_key.as_deref(),
        None,
        async move {
            engine
                .mark_unless_in_the_way(&id, &request.split_ids)
                .idempotency_key(key.as_deref())
                .await
        },
    )
    .await?
    .0)
}

/// Deletes splits marked for deletion: their objects, then their rows.
///
/// 404 for an unknown split, 412 for one not marked. Under the same `Idempotency-Key` a retry
/// answers the ids again once the rows are gone.
#[utoipa::path(
    post,
    operation_id = "delete_splits",
    path = "/v1/datasets/{dataset}/delete",
    tag = "splits",
    params(DatasetPath, IdempotencyKey),
    request_body = SplitIds,
    responses(
        (status = 200, description = "the ids, deleted", body = Deleted),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 412, response = PreconditionFailed),
        (status = 413, response = PayloadTooLarge),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn delete(
    State(shared): AppState,
    ClientKey(key): ClientKey,
    Path(dataset_id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let request: SplitIds = parse(&body)?;
    let engine = shared.acting_engine();
    let id = dataset_id.clone();
    let ids = request.split_ids.clone();
    let recorded_key = key.clone();
    // The check for an operation in the way comes before the delete, in a step of its own:
    // unlike a stage, a publish or a mark, a delete meets only rows marked for deletion,
    // and no begin stages such a row; one naming a marked row as replaced changes nothing
    // the delete reads, so a begin landing between the check and the delete answers as if
    // it had come after the delete.
    keyed_write(
        &shared,
        &dataset_id,
        recorded_key.as_deref(),
        Some(&request.split_ids),
        async move {
            engine
                .delete_splits(&id, &ids)
                .idempotency_key(key.as_deref())
                .await
        },
    )
    .await?;
    ok(&Deleted {
        deleted: request.split_ids,
    })
}

/// A page of a dataset's splits, sorted by id.
///
/// 400 for an unknown parameter or a number outside 0 to 9223372036854775807.
#[utoipa::path(
    get,
    path = "/v1/datasets/{dataset}/splits",
    tag = "splits",
    params(DatasetPath, ListSplitsQuery),
    responses(
        (status = 200, description = "a page, and the cursor to the next", body = mend::model::SplitPage),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn list_splits(
    State(shared): AppState,
    Path(dataset_id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult {
    served(&shared, &dataset_id)?;
    let query = list_query(&params)?;
    let page = shared
        .engine
        .list_splits(&dataset_id, &query)
        .await
        .map_err(|error| engine_error(&shared, &dataset_id, error))?;
    ok(&page)
}

/// `state=a,b`, `split=x,y`, `time_range=START..END`, `updated_since=MS`, `limit=N`, `after=ID`.
pub(crate) fn list_query(params: &HashMap<String, String>) -> Result<ListQuery, ApiError> {
    const KNOWN: [&str; 6] = [
        "state",
        "split",
        "time_range",
        "updated_since",
        "limit",
        "after",
    ];
    if let Some(unknown) = params.keys().find(|key| !KNOWN.contains(&key.as_str())) {
        return Err(ApiError::bad_request(format!(
            "unknown query parameter {unknown:?}; use {}",
            KNOWN.join(", ")
        )));
    }
    let list = |key: &str| -> Vec<String> {
        params
            .get(key)
            .map(|value| {
                value
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    // Both are stored as 64-bit signed numbers (milliseconds since the epoch, a row count).
    let number = |key: &str| -> Result<Option<i64>, ApiError> {
        params
            .get(key)
            .map(|value| {
                value
                    .parse::<i64>()
                    .ok()
                    .filter(|number| *number >= 0)
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "{key}: {value:?} is not a whole number from 0 to {}",
                            i64::MAX
                        ))
                    })
            })
            .transpose()
    };
    let states = list("state")
        .iter()
        .map(|name| {
            SplitState::parse(name).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "unknown state {name:?}; use staged, published or marked_for_deletion"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let time_range = params
        .get("time_range")
        .map(|text| {
            let parsed = text.split_once("..").and_then(|(start, end)| {
                Some(TimeRange {
                    start: start.trim().parse().ok()?,
                    end: end.trim().parse().ok()?,
                })
            });
            parsed.ok_or_else(|| {
                ApiError::bad_request("time_range: expected START..END in milliseconds")
            })
        })
        .transpose()?;
    let splits = list("split");
    Ok(ListQuery {
        states,
        split_ids: (!splits.is_empty()).then_some(splits),
        time_range,
        updated_since_ms: number("updated_since")?,
        updated_before_ms: None,
        after_split_id: params.get("after").cloned(),
        limit: number("limit")?.map(|limit| usize::try_from(limit).unwrap_or(usize::MAX)),
    })
}

pub(super) fn routes() -> OpenApiRouter<Arc<Shared>> {
    OpenApiRouter::new()
        .routes(routes!(stage))
        .routes(routes!(publish))
        .routes(routes!(mark))
        .routes(routes!(delete))
        .routes(routes!(list_splits))
}

//! The routes of `mend serve` and how results and errors become HTTP answers.
//!
//! Bodies are JSON in and out. An error answers with its status and
//! `{"error": CODE, "message": ..., "certainly_not_applied": BOOL}` (plus `ids` for a failed
//! precondition, `operation_id` for `recovery_required`, `hint` where there is one).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mend_policy::RecoveryMode;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::Shared;
use super::writes::Writes;
use crate::error::MendError;
use crate::model::{
    CheckpointDelta, DatasetConfig, ListQuery, PublishRequest, SplitState, StageMode, StageRequest,
    StageSplit, TimeRange,
};

type AppState = State<Arc<Shared>>;

/// The largest request body; larger ones are refused with 413 before they are read.
const MAX_BODY_BYTES: usize = 64 << 20;

pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/status", get(status))
        .route("/v1/datasets", get(list_datasets).post(create_dataset))
        .route("/v1/datasets/{dataset}", get(show_dataset))
        .route("/v1/datasets/{dataset}/config", post(apply_config))
        .route("/v1/datasets/{dataset}/fence", post(fence))
        .route("/v1/datasets/{dataset}/stage", post(stage))
        .route("/v1/datasets/{dataset}/publish", post(publish))
        .route("/v1/datasets/{dataset}/mark", post(mark))
        .route("/v1/datasets/{dataset}/delete", post(delete))
        .route("/v1/datasets/{dataset}/splits", get(list_splits))
        .route("/v1/datasets/{dataset}/gc", post(gc))
        .route("/v1/datasets/{dataset}/reconcile", post(reconcile))
        .route("/v1/datasets/{dataset}/recover", post(recover))
        .route("/v1/datasets/{dataset}/verify", get(verify))
        .route("/v1/policy", get(active_policy))
        .route("/v1/policy/replay", post(replay_policy))
        .route("/v1/policy/swap", post(swap_policy))
        .route("/v1/policy/rollback", post(rollback_policy))
        .fallback(not_found)
        // A stage of the largest batch (10,000 splits by default) with metadata is a few MiB.
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            count_requests,
        ))
        .with_state(shared)
}

/// An answer that is not a success.
#[derive(Debug)]
pub(super) struct ApiError {
    status: StatusCode,
    body: Value,
    retry_after_secs: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            body: json!({"error": code, "message": message.into(), "certainly_not_applied": true}),
            retry_after_secs: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_argument", message)
    }

    fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// Whether the request was decided against: refused by the policy or an invariant (412,
    /// 422), not malformed, missing or failed. What `refused` counts in the metrics.
    fn refused_by_the_rules(&self) -> bool {
        matches!(
            self.status,
            StatusCode::PRECONDITION_FAILED | StatusCode::UNPROCESSABLE_ENTITY
        )
    }

    /// The dataset cannot be served now; others can.
    fn dataset_unavailable(dataset_id: &str, reason: &str) -> Self {
        let mut error = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "dataset_unavailable",
            format!("dataset {dataset_id} cannot be served: {reason}"),
        );
        error.body["dataset_id"] = json!(dataset_id);
        error.body["reason"] = json!(reason);
        error.body["hint"] = json!(
            "its supervisor retries with backoff; `mend recover DATASET --mode probe` shows the in-doubt work"
        );
        error.retry_after_secs = Some(1);
        error
    }
}

impl From<MendError> for ApiError {
    fn from(error: MendError) -> Self {
        let status = match &error {
            MendError::InvalidArgument { .. } => StatusCode::BAD_REQUEST,
            MendError::NotFound { .. } => StatusCode::NOT_FOUND,
            MendError::AlreadyExists { .. } | MendError::Conflict { .. } => StatusCode::CONFLICT,
            MendError::FailedPrecondition { .. } => StatusCode::PRECONDITION_FAILED,
            MendError::PolicyRejected { .. } | MendError::CapabilityMissing { .. } => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            MendError::RecoveryRequired { .. }
            | MendError::Unavailable { .. }
            | MendError::Transient { .. }
            | MendError::Corrupt { .. } => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut body = json!({
            "error": error.code(),
            "message": error.to_string(),
            "certainly_not_applied": error.certainly_not_applied(),
        });
        match &error {
            MendError::FailedPrecondition { ids, .. } => body["ids"] = json!(ids),
            MendError::RecoveryRequired { operation_id } => {
                body["operation_id"] = json!(operation_id);
                body["hint"] = json!(
                    "an unresolved operation touches these splits; the dataset's supervisor is resolving it: retry shortly"
                );
            }
            MendError::Unavailable { .. } | MendError::Transient { .. } => {
                body["hint"] = json!("the outcome is unknown; the request is safe to retry");
            }
            _ => {}
        }
        let retry_after_secs = matches!(
            error,
            MendError::RecoveryRequired { .. }
                | MendError::Unavailable { .. }
                | MendError::Transient { .. }
        )
        .then_some(1);
        Self {
            status,
            body,
            retry_after_secs,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, json_body(&self.body)).into_response();
        if let Some(seconds) = self.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

type ApiResult = Result<Response, ApiError>;

fn json_body(value: &impl serde::Serialize) -> Response {
    let text = serde_json::to_string(value).unwrap_or_else(|error| {
        json!({"error": "internal", "message": format!("encode the answer: {error}")}).to_string()
    });
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}

fn ok(value: &impl serde::Serialize) -> ApiResult {
    Ok((StatusCode::OK, json_body(value)).into_response())
}

/// Parses a JSON body; an empty body is `{}`.
fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    let text: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    serde_json::from_slice(text)
        .map_err(|error| ApiError::bad_request(format!("request body: {error}")))
}

/// Refuses requests for a dataset its supervisor found it cannot serve.
fn served(shared: &Shared, dataset_id: &str) -> Result<(), ApiError> {
    match shared.supervisors.health(dataset_id) {
        Some(health) => match health.unavailable {
            Some(reason) => Err(ApiError::dataset_unavailable(dataset_id, &reason)),
            None => Ok(()),
        },
        None => Ok(()),
    }
}

/// Maps an engine error, waking the dataset's supervisor when the error is its business.
fn engine_error(shared: &Shared, dataset_id: &str, error: MendError) -> ApiError {
    if matches!(
        error,
        MendError::RecoveryRequired { .. } | MendError::Corrupt { .. }
    ) {
        shared.supervisors.kick(dataset_id);
    }
    ApiError::from(error)
}

/// A ticket for one write, or 503 once the server is shutting down.
fn admit(shared: &Shared) -> Result<super::writes::WriteTicket, ApiError> {
    shared.writes.admit().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the server is shutting down and admits no new writes",
        )
    })
}

/// Runs an admitted write to its end, whatever becomes of the request.
async fn write<T, F>(shared: &Arc<Shared>, dataset_id: &str, write: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: Future<Output = crate::Result<T>> + Send + 'static,
{
    served(shared, dataset_id)?;
    let ticket = admit(shared)?;
    Writes::run(ticket, write)
        .await
        .map_err(|error| engine_error(shared, dataset_id, error))
}

/// Fails with `RecoveryRequired` when an unresolved operation names one of `ids`: the write
/// waits for the supervisor instead of resolving it inline.
async fn not_in_doubt(
    shared: &Arc<Shared>,
    dataset_id: &str,
    ids: &[String],
) -> Result<(), ApiError> {
    match crate::live::operation_in_the_way(&shared.engine, dataset_id, ids).await {
        Ok(None) => Ok(()),
        Ok(Some(operation_id)) => Err(engine_error(
            shared,
            dataset_id,
            MendError::RecoveryRequired { operation_id },
        )),
        Err(error) => Err(engine_error(shared, dataset_id, error)),
    }
}

fn authorize(shared: &Shared, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = shared.options.admin_token.as_deref() else {
        return Err(ApiError::unauthorized(
            "this server has no admin token: start it with serve.admin_token (MEND_SERVE_ADMIN_TOKEN) to allow admin requests",
        ));
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    match presented {
        Some(token) if constant_time_eq(token.as_bytes(), expected.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::unauthorized(
            "the admin token is wrong; nothing happened",
        )),
        None => Err(ApiError::unauthorized(
            "this request needs the admin token (Authorization: Bearer TOKEN); nothing happened",
        )),
    }
}

/// Compares without stopping at the first difference, so timing does not reveal the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn count_requests(State(shared): AppState, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let response = next.run(request).await;
    shared.metrics.request(&route, response.status().as_u16());
    response
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        "no such route; see the HTTP API in README.md",
    )
}

async fn healthz() -> ApiResult {
    ok(&json!({"status": "ok"}))
}

async fn readyz(State(shared): AppState) -> ApiResult {
    let unavailable: Vec<Value> = shared
        .supervisors
        .all()
        .into_iter()
        .filter_map(|(dataset_id, health)| {
            health
                .unavailable
                .map(|reason| json!({"dataset_id": dataset_id, "reason": reason}))
        })
        .collect();
    if shared.shutting_down.load(Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the server is shutting down",
        ));
    }
    if !shared.ready.load(Ordering::SeqCst) {
        let message = match shared.discovery_error().as_deref() {
            Some(error) => format!("the server cannot list the catalog's datasets: {error}"),
            None => "the server has not listed the catalog's datasets yet".to_string(),
        };
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "starting",
            message,
        ));
    } // One dataset that cannot be served does not make the server unready: the others serve.
    ok(&json!({"ready": true, "unavailable_datasets": unavailable}))
}

async fn metrics(State(shared): AppState) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        shared.metrics.render(&shared.engine.policy()),
    )
        .into_response()
}

async fn status(State(shared): AppState) -> ApiResult {
    let policy = shared.engine.policy();
    let health = shared.supervisors.all();
    let datasets: Vec<Value> = shared
        .engine
        .each_dataset()
        .await?
        .into_iter()
        .map(|(id, dataset)| match dataset {
            Ok(dataset) => json!({
                "dataset_id": id,
                "manifest_version": dataset.manifest_version,
                "config_version": dataset.config_version,
                "fencing_epoch": dataset.fencing_epoch,
                "health": health.get(&id),
            }),
            Err(error) => json!({
                "dataset_id": id,
                "unreadable": error.to_string(),
                "health": health.get(&id),
            }),
        })
        .collect();
    ok(&json!({
        "catalog": shared.engine.catalog().describe(),
        "policy_digest": policy.digest(),
        "policy": format!("{} {}", policy.description().name, policy.description().version),
        "writes_in_flight": shared.writes.in_flight(),
        "datasets": datasets,
    }))
}

/// Every dataset; one that cannot be read is listed as `{"dataset_id", "error", "reason"}`
/// rather than failing the listing.
async fn list_datasets(State(shared): AppState) -> ApiResult {
    let datasets: Vec<Value> = shared
        .engine
        .each_dataset()
        .await?
        .into_iter()
        .map(|(id, dataset)| match dataset {
            Ok(dataset) => serde_json::to_value(dataset).unwrap_or(Value::Null),
            Err(error) => {
                json!({"dataset_id": id, "error": error.code(), "reason": error.to_string()})
            }
        })
        .collect();
    ok(&datasets)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateDataset {
    dataset_id: String,
    staged_grace_period_ms: Option<u64>,
    deletion_grace_period_ms: Option<u64>,
}

async fn create_dataset(State(shared): AppState, body: Bytes) -> ApiResult {
    let request: CreateDataset = parse(&body)?;
    let mut config = shared.options.dataset_defaults.clone();
    if let Some(ms) = request.staged_grace_period_ms {
        config.staged_grace_period_ms = ms;
    }
    if let Some(ms) = request.deletion_grace_period_ms {
        config.deletion_grace_period_ms = ms;
    }
    let engine = shared.engine.clone();
    let dataset_id = request.dataset_id.clone();
    let created = write(&shared, &request.dataset_id, async move {
        engine.create_dataset(&dataset_id, &config).await
    })
    .await?;
    shared.supervisors.supervise(&created.dataset_id);
    Ok((StatusCode::CREATED, json_body(&created)).into_response())
}

async fn show_dataset(State(shared): AppState, Path(dataset_id): Path<String>) -> ApiResult {
    served(&shared, &dataset_id)?;
    let dataset = shared
        .engine
        .dataset(&dataset_id)
        .await
        .map_err(|error| engine_error(&shared, &dataset_id, error))?;
    let mut value =
        serde_json::to_value(&dataset).map_err(|e| ApiError::bad_request(e.to_string()))?;
    value["health"] = json!(shared.supervisors.health(&dataset_id));
    ok(&value)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApplyConfig {
    expected_config_version: u64,
    config: DatasetConfig,
    #[serde(default = "server_node")]
    node: String,
}

fn server_node() -> String {
    "mend-serve".into()
}

async fn apply_config(
    State(shared): AppState,
    Path(dataset_id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let request: ApplyConfig = parse(&body)?;
    let engine = shared.engine.clone();
    let id = dataset_id.clone();
    ok(&write(&shared, &dataset_id, async move {
        engine
            .apply_config(
                &id,
                request.expected_config_version,
                &request.config,
                &request.node,
            )
            .await
    })
    .await?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fence {
    /// The token every publish must present; `null` removes it.
    token: Option<String>,
}

async fn fence(State(shared): AppState, Path(dataset_id): Path<String>, body: Bytes) -> ApiResult {
    let request: Fence = parse(&body)?;
    let engine = shared.engine.clone();
    let id = dataset_id.clone();
    ok(&write(&shared, &dataset_id, async move {
        engine
            .set_publish_token(&id, request.token.as_deref())
            .await
    })
    .await?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Stage {
    /// Required: there is no default mode.
    mode: StageMode,
    #[serde(default = "server_node")]
    node: String,
    splits: Vec<SplitEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SplitEntry {
    split_id: String,
    #[serde(default = "empty_object")]
    metadata: Value,
}

fn empty_object() -> Value {
    json!({})
}

async fn stage(State(shared): AppState, Path(dataset_id): Path<String>, body: Bytes) -> ApiResult {
    let request: Stage = parse(&body)?;
    let request = StageRequest {
        dataset_id: dataset_id.clone(),
        mode: request.mode,
        node: request.node,
        splits: request
            .splits
            .into_iter()
            .map(|entry| StageSplit {
                split_id: entry.split_id,
                metadata_json: entry.metadata.to_string(),
            })
            .collect(),
    };
    served(&shared, &dataset_id)?;
    let ids: Vec<String> = request.splits.iter().map(|s| s.split_id.clone()).collect();
    not_in_doubt(&shared, &dataset_id, &ids).await?;
    let engine = shared.engine.clone();
    let result = write(
        &shared,
        &dataset_id,
        async move { engine.stage(&request).await },
    )
    .await;
    match &result {
        Ok(staged) => shared.metrics.stage(staged),
        Err(error) if error.refused_by_the_rules() => {
            shared.metrics.decision("stage", "refused", 1)
        }
        Err(_) => {}
    }
    ok(&result?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Publish {
    #[serde(default)]
    staged_split_ids: Vec<String>,
    #[serde(default)]
    replaced_split_ids: Vec<String>,
    #[serde(default)]
    checkpoint_delta: Option<CheckpointDelta>,
    #[serde(default)]
    publish_token: Option<String>,
}

async fn publish(
    State(shared): AppState,
    Path(dataset_id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let request: Publish = parse(&body)?;
    served(&shared, &dataset_id)?;
    let ids: Vec<String> = request
        .staged_split_ids
        .iter()
        .chain(&request.replaced_split_ids)
        .cloned()
        .collect();
    not_in_doubt(&shared, &dataset_id, &ids).await?;
    let request = PublishRequest {
        dataset_id: dataset_id.clone(),
        staged_split_ids: request.staged_split_ids,
        replaced_split_ids: request.replaced_split_ids,
        checkpoint_delta: request.checkpoint_delta,
        publish_token: request.publish_token,
        fencing_epoch: None,
    };
    let engine = shared.engine.clone();
    let result = write(&shared, &dataset_id, async move {
        engine.publish(&request).await
    })
    .await;
    match &result {
        Ok(_) => shared.metrics.decision("publish", "accepted", 1),
        Err(error) if error.refused_by_the_rules() => {
            shared.metrics.decision("publish", "refused", 1)
        }
        Err(_) => {}
    }
    ok(&result?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SplitIds {
    split_ids: Vec<String>,
}

async fn mark(State(shared): AppState, Path(dataset_id): Path<String>, body: Bytes) -> ApiResult {
    let request: SplitIds = parse(&body)?;
    served(&shared, &dataset_id)?;
    not_in_doubt(&shared, &dataset_id, &request.split_ids).await?;
    let engine = shared.engine.clone();
    let id = dataset_id.clone();
    ok(&write(&shared, &dataset_id, async move {
        engine.mark_for_deletion(&id, &request.split_ids).await
    })
    .await?)
}

async fn delete(State(shared): AppState, Path(dataset_id): Path<String>, body: Bytes) -> ApiResult {
    let request: SplitIds = parse(&body)?;
    served(&shared, &dataset_id)?;
    not_in_doubt(&shared, &dataset_id, &request.split_ids).await?;
    let engine = shared.engine.clone();
    let id = dataset_id.clone();
    let ids = request.split_ids.clone();
    write(&shared, &dataset_id, async move {
        engine.delete_splits(&id, &ids).await
    })
    .await?;
    ok(&json!({"deleted": request.split_ids}))
}

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
fn list_query(params: &HashMap<String, String>) -> Result<ListQuery, ApiError> {
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
    let number = |key: &str| -> Result<Option<i64>, ApiError> {
        params
            .get(key)
            .map(|value| {
                value.parse().map_err(|_| {
                    ApiError::bad_request(format!("{key}: {value:?} is not a whole number"))
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
        limit: number("limit")?
            .map(|limit| {
                usize::try_from(limit)
                    .map_err(|_| ApiError::bad_request("limit must not be negative"))
            })
            .transpose()?,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Node {
    #[serde(default = "server_node")]
    node: String,
}

async fn gc(State(shared): AppState, Path(dataset_id): Path<String>, body: Bytes) -> ApiResult {
    let request: Node = parse(&body)?;
    let engine = shared.engine.clone();
    let id = dataset_id.clone();
    ok(&write(&shared, &dataset_id, async move {
        engine.gc(&id, &request.node).await
    })
    .await?)
}

async fn reconcile(
    State(shared): AppState,
    Path(dataset_id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let request: Node = parse(&body)?;
    let engine = shared.engine.clone();
    let id = dataset_id.clone();
    let report = write(&shared, &dataset_id, async move {
        engine.reconcile(&id, &request.node).await
    })
    .await?;
    shared.metrics.reconcile(&report);
    ok(&report)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Recover {
    mode: RecoveryMode,
}

async fn recover(
    State(shared): AppState,
    Path(dataset_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let request: Recover = parse(&body)?;
    // Exclusive recovery may undo a live writer's work and fences every writer out.
    if request.mode == RecoveryMode::Exclusive {
        authorize(&shared, &headers)?;
    }
    let engine = shared.engine.clone();
    let id = dataset_id.clone();
    let mode = request.mode;
    // Probe and verify write nothing, but run like writes so that a shutdown waits for them
    // too; a dataset its supervisor cannot serve is still open to an operator's recovery.
    let ticket = admit(&shared)?;
    let report = Writes::run(ticket, async move { engine.recover(&id, mode).await })
        .await
        .map_err(|error| engine_error(&shared, &dataset_id, error))?;
    shared.metrics.recovery(&report);
    shared.supervisors.kick(&dataset_id);
    ok(&report)
}

async fn verify(State(shared): AppState, Path(dataset_id): Path<String>) -> ApiResult {
    served(&shared, &dataset_id)?;
    let report = shared
        .engine
        .verify(&dataset_id)
        .await
        .map_err(|error| engine_error(&shared, &dataset_id, error))?;
    ok(&report)
}

async fn active_policy(State(shared): AppState) -> ApiResult {
    let policy = shared.engine.policy();
    let record = shared.registry.active().await?;
    ok(&json!({
        "digest": policy.digest(),
        "name": policy.description().name,
        "version": policy.description().version,
        "record": record,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    /// A component file on the server's machine.
    component: std::path::PathBuf,
    #[serde(default)]
    scenarios: Vec<std::path::PathBuf>,
    #[serde(default = "default_records")]
    records: usize,
}

fn default_records() -> usize {
    10_000
}

fn load_component(
    shared: &Shared,
    path: &std::path::Path,
) -> Result<(Vec<u8>, crate::runtime::PolicyRuntime), ApiError> {
    let bytes = std::fs::read(path).map_err(|error| {
        ApiError::bad_request(format!("read policy component {}: {error}", path.display()))
    })?;
    let policy = crate::runtime::PolicyRuntime::load_with(&bytes, &shared.options.load)
        .map_err(MendError::from)?;
    Ok((bytes, policy))
}

async fn replay_policy(State(shared): AppState, headers: HeaderMap, body: Bytes) -> ApiResult {
    authorize(&shared, &headers)?;
    let request: PolicyFile = parse(&body)?;
    let (_, candidate) = load_component(&shared, &request.component)?;
    ok(&shared
        .engine
        .replay_policy(&candidate, request.records)
        .await?)
}

async fn swap_policy(State(shared): AppState, headers: HeaderMap, body: Bytes) -> ApiResult {
    authorize(&shared, &headers)?;
    let request: PolicyFile = parse(&body)?;
    let (bytes, candidate) = load_component(&shared, &request.component)?;
    let golden = request
        .scenarios
        .iter()
        .map(|path| {
            crate::scenarios::load_suite(path).map_err(|error| {
                ApiError::bad_request(format!("scenarios {}: {error}", path.display()))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let engine = shared.engine.clone();
    let registry = shared.registry.clone();
    let ticket = admit(&shared)?;
    let swap = Writes::run(ticket, async move {
        engine
            .swap_deployment_policy(&registry, &bytes, candidate, request.records, &golden)
            .await
    })
    .await?;
    eprintln!(
        "mend serve: policy swapped to {} (registry change {})",
        swap.record.digest, swap.record.version
    );
    ok(&swap)
}

async fn rollback_policy(State(shared): AppState, headers: HeaderMap) -> ApiResult {
    authorize(&shared, &headers)?;
    let engine = shared.engine.clone();
    let registry = shared.registry.clone();
    let load = shared.options.load.clone();
    let ticket = admit(&shared)?;
    let record = Writes::run(ticket, async move {
        engine.rollback_deployment_policy(&registry, &load).await
    })
    .await?;
    eprintln!(
        "mend serve: policy rolled back to {} (registry change {})",
        record.digest, record.version
    );
    ok(&record)
}

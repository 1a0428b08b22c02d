//! The routes of `mend serve` and how results and errors become HTTP answers.
//!
//! Bodies are JSON in and out. Every answer that is not a success, whoever produced it (a
//! handler, a limit, the router itself for an unknown route or method), has its status and
//! an [`ErrorBody`]: `{"error": CODE, "message": ..., "certainly_not_applied": BOOL}` (plus
//! `ids` for a failed precondition, `operation_id` for `recovery_required`, `dataset_id` and
//! `reason` for `dataset_unavailable`, `hint` where there is one).
//!
//! Each handler's `#[utoipa::path]` declares its route and documents it; the router is built
//! from those declarations ([`documented_routes`]), so that it serves exactly what the OpenAPI
//! document ([`openapi`]) lists.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::auth::Action;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, FromRequestParts, MatchedPath, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use mend_policy::RecoveryMode;
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::OpenApi;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::access::Caller;
use super::admin;
use super::answers::{
    ActivePolicy, DatasetListing, DatasetStatus, Deleted, Health, Readiness, ServerStatus,
    ShownDataset, UnavailableDataset,
};
use super::body::JsonBody;
pub(super) use super::body::parse;
use super::errors::{ErrorBody, ErrorCode};
use super::limits::{BodyLimit, read_body};
use super::openapi::{
    self, AuditQuery, BadRequest, Conflict, DatasetPath, IdempotencyKey, InternalError,
    ListSplitsQuery, NotFound, PayloadTooLarge, PreconditionFailed, RequestTimeout, Unavailable,
    Unprocessable, VerifyQuery,
};
use super::operations;
use super::writes::{Refused, WriteTicket, Writes};
use super::{ServeLimits, Shared};
use mend::error::MendError;
use mend::model::{
    CheckpointDelta, DatasetConfig, ListQuery, PublishRequest, SplitState, StageMode, StageRequest,
    StageSplit, TimeRange,
};

type AppState = State<Arc<Shared>>;

/// How long a client is told to wait before it retries a refusal for load.
const RETRY_AFTER_SECS: u64 = 1;

pub(super) fn router(shared: Arc<Shared>) -> Router {
    let (routes, _document) = documented_routes(&shared.options.limits).split_for_parts();
    routes
        .fallback(not_found)
        // Inside the counting, so that refusals are counted; outside each route's body
        // limit, so that no body is read for a caller the route refuses.
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            super::access::check,
        ))
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            count_requests,
        ))
        .layer(middleware::from_fn(json_errors))
        .with_state(shared)
}

/// The probes alone, `/healthz` and `/readyz`, for `serve.probe_listen`.
pub(super) fn probe_router(shared: Arc<Shared>) -> Router {
    let (routes, _document) = OpenApiRouter::<Arc<Shared>>::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .split_for_parts();
    routes
        .fallback(not_found)
        .layer(middleware::from_fn(json_errors))
        .with_state(shared)
}

/// Every route, each registered from its handler's `#[utoipa::path]`: the router and the
/// OpenAPI document are built from that one declaration (see [`openapi`]). Register a route
/// with `.routes(routes!(handler))`, never with `.route(...)`, which the document would miss
/// (and the OpenAPI tests would catch).
pub(super) fn documented_routes(limits: &ServeLimits) -> OpenApiRouter<Arc<Shared>> {
    let body = BodyLimit {
        max_bytes: limits.max_json_body_bytes,
        setting: "serve.max_json_body_bytes",
        timeout: limits.body_read_timeout,
    };
    let admin_body = BodyLimit {
        max_bytes: limits.max_admin_component_bytes,
        setting: "serve.max_admin_component_bytes",
        timeout: limits.body_read_timeout,
    };
    let routes = OpenApiRouter::with_openapi(openapi::Frame::openapi())
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .routes(routes!(openapi::serve_document))
        .routes(routes!(status))
        .routes(routes!(fleet))
        .routes(routes!(list_datasets, create_dataset))
        .routes(routes!(show_dataset))
        .routes(routes!(apply_config))
        .routes(routes!(fence))
        .routes(routes!(stage))
        .routes(routes!(publish))
        .routes(routes!(mark))
        .routes(routes!(delete))
        .routes(routes!(list_splits))
        .routes(routes!(gc))
        .routes(routes!(reconcile))
        .routes(routes!(recover))
        .routes(routes!(verify))
        .routes(routes!(audit))
        .routes(routes!(active_policy))
        .routes(routes!(admin::rollback_policy))
        .routes(routes!(operations::begin))
        .routes(routes!(operations::show))
        .routes(routes!(operations::heartbeat))
        .routes(routes!(operations::publish))
        .routes(routes!(operations::abort))
        .routes(routes!(operations::upload_urls))
        .layer(middleware::from_fn_with_state(body, read_body));
    // An object upload streams: its cap is the size its operation planned, its deadline one
    // per chunk (see `operations`).
    let upload_routes = OpenApiRouter::default().routes(routes!(operations::upload));
    // A component upload has a cap of its own.
    let admin_routes = OpenApiRouter::default()
        .routes(routes!(admin::replay_policy))
        .routes(routes!(admin::swap_policy))
        .layer(middleware::from_fn_with_state(admin_body, read_body));
    routes.merge(admin_routes).merge(upload_routes)
}

/// An answer that is not a success: its status, its [`ErrorBody`] and, for a refusal a
/// client should retry after a pause, `Retry-After`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    /// Boxed: an `ApiError` is every handler's error, and most results are small.
    body: Box<ErrorBody>,
    retry_after_secs: Option<u64>,
    /// One more header the answer carries (`WWW-Authenticate` on a 401).
    header: Option<(header::HeaderName, HeaderValue)>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            body: Box::new(ErrorBody::new(code, message)),
            retry_after_secs: None,
            header: None,
        }
    }

    /// The answer with `Retry-After: seconds`.
    pub(crate) fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after_secs = Some(seconds);
        self
    }

    /// The answer with `name: value` among its headers.
    pub(crate) fn with_header(mut self, name: header::HeaderName, value: HeaderValue) -> Self {
        self.header = Some((name, value));
        self
    }

    pub(super) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidArgument, message)
    }

    /// What the answer says happened, in words.
    pub(crate) fn message(&self) -> &str {
        &self.body.message
    }

    /// The answer's status and its `error` code.
    pub(crate) fn status(&self) -> (StatusCode, &str) {
        (self.status, self.body.error.as_str())
    }

    /// A write refused before it did anything.
    fn refused(refused: Refused) -> Self {
        let (code, message) = match refused {
            Refused::ShuttingDown => (
                ErrorCode::ShuttingDown,
                "the server is shutting down and admits no new writes".to_owned(),
            ),
            Refused::DatasetFull { limit } => (
                ErrorCode::Overloaded,
                format!(
                    "{limit} writes are already queued on this dataset (serve.max_queued_writes_per_dataset); nothing happened: retry after a pause"
                ),
            ),
            Refused::ServerFull { limit } => (
                ErrorCode::Overloaded,
                format!(
                    "{limit} writes are already queued on this server (serve.max_queued_writes); nothing happened: retry after a pause"
                ),
            ),
        };
        let mut error = Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message);
        error.retry_after_secs = Some(RETRY_AFTER_SECS);
        error
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
            ErrorCode::DatasetUnavailable,
            format!("dataset {dataset_id} cannot be served: {reason}"),
        );
        error.body.dataset_id = Some(dataset_id.to_owned());
        error.body.reason = Some(reason.to_owned());
        error.body.hint = Some(
            "its supervisor retries with backoff; `mend recover DATASET --mode probe` shows the in-doubt work".to_owned(),
        );
        error.retry_after_secs = Some(RETRY_AFTER_SECS);
        error
    }
}

/// The status and code of an engine error. A variant this server does not know yet is a 500
/// `internal`, never a code outside [`ErrorCode`].
fn status_and_code(error: &MendError) -> (StatusCode, ErrorCode) {
    match error {
        MendError::InvalidArgument { .. } => (StatusCode::BAD_REQUEST, ErrorCode::InvalidArgument),
        MendError::NotFound { .. } => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
        MendError::AlreadyExists { .. } => (StatusCode::CONFLICT, ErrorCode::AlreadyExists),
        MendError::Conflict { .. } => (StatusCode::CONFLICT, ErrorCode::Conflict),
        MendError::FailedPrecondition { .. } => (
            StatusCode::PRECONDITION_FAILED,
            ErrorCode::FailedPrecondition,
        ),
        MendError::PolicyRejected { .. } => {
            (StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::PolicyRejected)
        }
        MendError::CapabilityMissing { .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::CapabilityMissing,
        ),
        MendError::RecoveryRequired { .. } => {
            (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::RecoveryRequired)
        }
        MendError::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable),
        MendError::Transient { .. } => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Transient),
        MendError::Corrupt { .. } => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Corrupt),
        MendError::Policy(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::PolicyFailed),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
    }
}

impl From<MendError> for ApiError {
    fn from(error: MendError) -> Self {
        let (status, code) = status_and_code(&error);
        let mut body = ErrorBody::new(code, error.to_string());
        body.certainly_not_applied = error.certainly_not_applied();
        match &error {
            // Only a precondition about splits names ids; a stale checkpoint or config
            // version says what it is about in its message instead of an empty list.
            MendError::FailedPrecondition { ids, .. } if !ids.is_empty() => {
                body.ids = Some(ids.clone())
            }
            MendError::RecoveryRequired { operation_id } => {
                body.operation_id = Some(operation_id.clone());
                body.hint = Some(
                    "an unresolved operation touches these splits; the dataset's supervisor is resolving it: retry shortly".to_owned(),
                );
            }
            MendError::Unavailable { .. } | MendError::Transient { .. } => {
                body.hint = Some("the outcome is unknown; the request is safe to retry".to_owned());
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
            body: Box::new(body),
            retry_after_secs,
            header: None,
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
        if let Some((name, value)) = self.header {
            response.headers_mut().insert(name, value);
        }
        response
    }
}

pub(super) type ApiResult = Result<Response, ApiError>;

fn json_body(value: &impl serde::Serialize) -> Response {
    let text = serde_json::to_string(value).unwrap_or_else(|error| {
        // The request may have taken effect: only its answer could not be written.
        let mut body = ErrorBody::new(ErrorCode::Internal, format!("encode the answer: {error}"));
        body.certainly_not_applied = false;
        serde_json::to_string(&body).unwrap_or_default()
    });
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}

pub(super) fn ok(value: &impl serde::Serialize) -> ApiResult {
    Ok((StatusCode::OK, json_body(value)).into_response())
}

/// Refuses requests for a dataset its supervisor found it cannot serve.
pub(super) fn served(shared: &Shared, dataset_id: &str) -> Result<(), ApiError> {
    match shared.supervisors.health(dataset_id) {
        Some(health) => match health.unavailable {
            Some(reason) => Err(ApiError::dataset_unavailable(dataset_id, &reason)),
            None => Ok(()),
        },
        None => Ok(()),
    }
}

/// Maps an engine error, waking the dataset's supervisor when the error is its business.
pub(super) fn engine_error(shared: &Shared, dataset_id: &str, error: MendError) -> ApiError {
    if matches!(
        error,
        MendError::RecoveryRequired { .. } | MendError::Corrupt { .. }
    ) {
        shared.supervisors.kick(dataset_id);
    }
    ApiError::from(error)
}

/// A ticket for one write on `dataset_id` (`None`: on the whole deployment), or 503 when
/// the server is shutting down or has as many writes queued as it takes.
pub(super) fn admit(shared: &Shared, dataset_id: Option<&str>) -> Result<WriteTicket, ApiError> {
    let ticket = shared.writes.admit(dataset_id).map_err(ApiError::refused)?;
    // The write holds its request's slot among the principal's writes until it ends.
    Ok(ticket.holding(super::access::answering().and_then(|answering| answering.slot)))
}

/// Admits a write on `dataset_id` and runs it to its end, whatever becomes of the request.
/// With `in_the_way`, the write first waits for no unresolved operation naming those splits.
pub(super) async fn write<T, F>(
    shared: &Arc<Shared>,
    dataset_id: &str,
    in_the_way: Option<&[String]>,
    write: F,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: Future<Output = mend::Result<T>> + Send + 'static,
{
    keyed_write(shared, dataset_id, None, in_the_way, write)
        .await
        .map(|(answer, _)| answer)
}

/// [`write`] of a request under idempotency key `key`, answering also whether the key was
/// recorded when the write was admitted: the answer is then a replay, which the metrics do
/// not count as a new decision. A recorded key is answered by the engine before anything
/// else, so the check for an unresolved operation in the way is skipped for it (a retry of a
/// request that landed answers what it answered, even if an operation began on the same
/// splits since).
async fn keyed_write<T, F>(
    shared: &Arc<Shared>,
    dataset_id: &str,
    key: Option<&str>,
    in_the_way: Option<&[String]>,
    write: F,
) -> Result<(T, bool), ApiError>
where
    T: Send + 'static,
    F: Future<Output = mend::Result<T>> + Send + 'static,
{
    served(shared, dataset_id)?;
    // Admitted before anything is read, so that a flood costs no more than its refusals.
    let ticket = admit(shared, Some(dataset_id))?;
    let replayed = recorded_before(shared, dataset_id, key).await?;
    if let Some(ids) = in_the_way
        && !replayed
    {
        not_in_doubt(shared, dataset_id, ids).await?;
    }
    Writes::run(ticket, write)
        .await
        .map(|answer| (answer, replayed))
        .map_err(|error| engine_error(shared, dataset_id, error))
}

/// Whether `key` is recorded in the dataset: a request under it is answered by its record.
/// (A copy of the request running at the same time may still record it after this look;
/// its metrics then count twice, which is all that this look is for.)
async fn recorded_before(
    shared: &Arc<Shared>,
    dataset_id: &str,
    key: Option<&str>,
) -> Result<bool, ApiError> {
    let Some(key) = key else {
        return Ok(false);
    };
    match shared
        .engine
        .catalog()
        .recorded_request(dataset_id, key)
        .await
    {
        Ok(found) => Ok(found.is_some()),
        // The engine answers for a dataset that does not exist (yet, for a create).
        Err(MendError::NotFound { .. }) => Ok(false),
        Err(error) => Err(engine_error(shared, dataset_id, error)),
    }
}

/// Fails with `RecoveryRequired` when an unresolved operation names one of `ids`: the write
/// waits for the supervisor instead of resolving it inline.
async fn not_in_doubt(
    shared: &Arc<Shared>,
    dataset_id: &str,
    ids: &[String],
) -> Result<(), ApiError> {
    match mend::live::operation_in_the_way(&shared.engine, dataset_id, ids).await {
        Ok(None) => Ok(()),
        Ok(Some(operation_id)) => Err(engine_error(
            shared,
            dataset_id,
            MendError::RecoveryRequired { operation_id },
        )),
        Err(error) => Err(engine_error(shared, dataset_id, error)),
    }
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

/// Gives every error answer the JSON body, whoever produced it: the router's 405 for a method
/// a route does not answer, an extractor's rejection (a bad path or query string), anything a
/// layer answers in text. Handlers and limits answer JSON themselves; those pass unchanged.
async fn json_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let message = if status == StatusCode::METHOD_NOT_ALLOWED {
        let allowed = parts
            .headers
            .get(header::ALLOW)
            .and_then(|value| value.to_str().ok())
            .filter(|allowed| !allowed.is_empty())
            .unwrap_or("other methods");
        format!("{method} is not allowed on this route; it answers {allowed}")
    } else {
        // What the producer said, on one line; a few KiB are plenty for a rejection.
        let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
        let text = String::from_utf8_lossy(&text)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if text.is_empty() {
            status.canonical_reason().unwrap_or("error").to_lowercase()
        } else {
            text
        }
    };
    let mut error = ApiError::new(status, ErrorCode::for_status(status), message);
    // Refused before a handler ran, or failed in a way no one described: only a 4xx
    // certainly did nothing.
    error.body.certainly_not_applied = status.is_client_error();
    let mut answer = error.into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            answer.headers_mut().insert(name.clone(), value.clone());
        }
    }
    answer
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::NoRoute,
        "no such route; see the HTTP API in README.md",
    )
}

/// Liveness: 200 while the process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    responses(
        (status = 200, description = "the process answers", body = Health),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn healthz() -> ApiResult {
    ok(&Health { status: "ok" })
}

/// Readiness: 200 once the catalog is listed, 503 while starting or shutting down.
///
/// One dataset that cannot be served does not make the server unready: it is listed, and the others
/// serve.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    responses(
        (status = 200, description = "the server serves", body = Readiness),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn readyz(State(shared): AppState) -> ApiResult {
    let unavailable: Vec<UnavailableDataset> = shared
        .supervisors
        .all()
        .into_iter()
        .filter_map(|(dataset_id, health)| {
            health
                .unavailable
                .map(|reason| UnavailableDataset { dataset_id, reason })
        })
        .collect();
    if shared.shutting_down.load(Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ShuttingDown,
            "the server is shutting down",
        ));
    }
    if !shared.ready.load(Ordering::SeqCst) {
        let message = match shared.discovery_error().as_deref() {
            Some(error) => format!(
                "the server cannot take part in the fleet or find its pending work: {error}"
            ),
            None => "the server has not run its first supervision round yet".to_string(),
        };
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Starting,
            message,
        ));
    } // One dataset that cannot be served does not make the server unready: the others serve.
    ok(&Readiness {
        ready: true,
        unavailable_datasets: unavailable,
    })
}

/// Prometheus metrics (text exposition format 0.0.4).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    responses(
        (status = 200, description = "the metrics, README.md \"Metrics\"", body = String, content_type = "text/plain; version=0.0.4"),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn metrics(State(shared): AppState) -> Response {
    (
        [(header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)],
        shared.metrics.render(&shared.engine.policy()),
    )
        .into_response()
}

/// This replica in its fleet: its id and fencing epoch, the live and expired members, its
/// load, and its rebalances and takeovers. Cheap (no catalog read), unlike `/v1/status`.
#[utoipa::path(
    get,
    path = "/v1/fleet",
    tag = "health",
    responses(
        (status = 200, description = "this replica in its fleet", body = crate::supervisor::FleetStatus),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn fleet(State(shared): AppState) -> ApiResult {
    ok(&shared.supervisors.fleet())
}

/// The catalog, the active policy, writes in flight and every dataset's versions and health.
#[utoipa::path(
    get,
    path = "/v1/status",
    tag = "health",
    responses(
        (status = 200, description = "the server's status", body = ServerStatus),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn status(State(shared): AppState, Extension(caller): Extension<Caller>) -> ApiResult {
    let policy = shared.engine.policy();
    let health = shared.supervisors.all();
    let datasets: Vec<DatasetStatus> = shared
        .engine
        .each_dataset()
        .await?
        .into_iter()
        .filter(|(id, _)| caller.may(Action::Read, id))
        .map(|(id, dataset)| {
            let health = health.get(&id).cloned();
            let owner = shared.supervisors.owner_of(&id);
            match dataset {
                Ok(dataset) => DatasetStatus::Readable {
                    dataset_id: id,
                    manifest_version: dataset.manifest_version,
                    config_version: dataset.config_version,
                    fencing_epoch: dataset.fencing_epoch,
                    owner,
                    health,
                },
                Err(error) => DatasetStatus::Unreadable {
                    owner,
                    dataset_id: id,
                    unreadable: error.to_string(),
                    health,
                },
            }
        })
        .collect();
    ok(&ServerStatus {
        catalog: shared.engine.catalog().describe(),
        policy_digest: policy.digest().to_owned(),
        policy: format!(
            "{} {}",
            policy.description().name,
            policy.description().version
        ),
        writes_in_flight: shared.writes.in_flight(),
        fleet: shared.supervisors.fleet(),
        datasets,
    })
}

/// Every dataset.
///
/// One whose state cannot be read is listed as `{"dataset_id", "error", "reason"}` rather than
/// failing the listing.
#[utoipa::path(
    get,
    path = "/v1/datasets",
    tag = "datasets",
    responses(
        (status = 200, description = "every dataset", body = Vec<DatasetListing>),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn list_datasets(State(shared): AppState, Extension(caller): Extension<Caller>) -> ApiResult {
    let datasets: Vec<DatasetListing> = shared
        .engine
        .each_dataset()
        .await?
        .into_iter()
        .filter(|(id, _)| caller.may(Action::Read, id))
        .map(|(id, dataset)| match dataset {
            Ok(dataset) => DatasetListing::Readable(dataset),
            Err(error) => DatasetListing::Unreadable {
                dataset_id: id,
                error: status_and_code(&error).1,
                reason: error.to_string(),
            },
        })
        .collect();
    ok(&datasets)
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateDatasetRequest)]
pub(crate) struct CreateDataset {
    pub(crate) dataset_id: String,
    staged_grace_period_ms: Option<u64>,
    deletion_grace_period_ms: Option<u64>,
}

impl CreateDataset {
    /// The new dataset's config: `defaults` with the grace periods the request gives.
    pub(crate) fn config(&self, defaults: &DatasetConfig) -> DatasetConfig {
        let mut config = defaults.clone();
        if let Some(ms) = self.staged_grace_period_ms {
            config.staged_grace_period_ms = ms;
        }
        if let Some(ms) = self.deletion_grace_period_ms {
            config.deletion_grace_period_ms = ms;
        }
        config
    }
}

impl JsonBody for CreateDataset {
    const SHAPE: &'static str =
        r#"{"dataset_id": STRING, "staged_grace_period_ms"?: MS, "deletion_grace_period_ms"?: MS}"#;
    const FIELDS: &'static [(&'static str, &'static str)] = &[
        ("dataset_id", "a string"),
        ("staged_grace_period_ms", "a whole number of milliseconds"),
        ("deletion_grace_period_ms", "a whole number of milliseconds"),
    ];
}

/// Creates a dataset.
///
/// Sent again under the `Idempotency-Key` that created it, answers 201 and the same dataset (the
/// same uid); otherwise an existing id is 409.
#[utoipa::path(
    post,
    path = "/v1/datasets",
    tag = "datasets",
    params(IdempotencyKey),
    request_body = CreateDataset,
    responses(
        (status = 201, description = "the new dataset", body = mend::model::Dataset),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn create_dataset(
    State(shared): AppState,
    ClientKey(key): ClientKey,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> ApiResult {
    let request: CreateDataset = parse(&body)?;
    caller.require(Action::Write, &request.dataset_id)?;
    let config = request.config(&shared.options.dataset_defaults);
    let engine = shared.acting_engine();
    let dataset_id = request.dataset_id.clone();
    let created = write(&shared, &request.dataset_id, None, async move {
        match key {
            Some(key) => {
                engine
                    .create_dataset_recorded(&dataset_id, &config, &key)
                    .await
            }
            None => engine.create_dataset(&dataset_id, &config).await,
        }
    })
    .await?;
    Ok((StatusCode::CREATED, json_body(&created)).into_response())
}

/// A dataset and its supervisor's health.
#[utoipa::path(
    get,
    path = "/v1/datasets/{dataset}",
    tag = "datasets",
    params(DatasetPath),
    responses(
        (status = 200, description = "the dataset", body = ShownDataset),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn show_dataset(State(shared): AppState, Path(dataset_id): Path<String>) -> ApiResult {
    served(&shared, &dataset_id)?;
    let dataset = shared
        .engine
        .dataset(&dataset_id)
        .await
        .map_err(|error| engine_error(&shared, &dataset_id, error))?;
    ok(&ShownDataset {
        dataset,
        health: shared.supervisors.health(&dataset_id),
    })
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ApplyConfigRequest)]
pub(crate) struct ApplyConfig {
    pub(crate) expected_config_version: u64,
    pub(crate) config: DatasetConfig,
    #[serde(default = "server_node")]
    pub(crate) node: String,
}

impl JsonBody for ApplyConfig {
    const SHAPE: &'static str = r#"{"expected_config_version": N, "config": {"staged_grace_period_ms": MS, "deletion_grace_period_ms": MS, "policy_params"?: {KEY: STRING}}, "node"?: STRING}"#;
    const FIELDS: &'static [(&'static str, &'static str)] = &[
        (
            "expected_config_version",
            "a whole number: the config version the change applies to",
        ),
        (
            "config",
            r#"an object {"staged_grace_period_ms": MS, "deletion_grace_period_ms": MS, "policy_params"?: {KEY: STRING}}"#,
        ),
        ("node", "a string naming the writer"),
    ];
}

fn server_node() -> String {
    "mend-serve".into()
}

/// Applies a new config to a dataset (staged, then promoted).
///
/// 412 if the config version moved. Under an `Idempotency-Key`, a retry answers the promotion;
/// while the keyed apply it retries is unsettled, 503 `recovery_required`.
#[utoipa::path(
    post,
    path = "/v1/datasets/{dataset}/config",
    tag = "datasets",
    params(DatasetPath, IdempotencyKey),
    request_body = ApplyConfig,
    responses(
        (status = 200, description = "the dataset with its new config", body = mend::model::Dataset),
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
async fn apply_config(
    State(shared): AppState,
    ClientKey(key): ClientKey,
    Path(dataset_id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let request: ApplyConfig = parse(&body)?;
    let engine = shared.acting_engine();
    let id = dataset_id.clone();
    ok(&write(&shared, &dataset_id, None, async move {
        let (version, config, node) = (
            request.expected_config_version,
            &request.config,
            &request.node,
        );
        match key {
            Some(key) => {
                engine
                    .apply_config_recorded(&id, version, config, node, &key)
                    .await
            }
            None => engine.apply_config(&id, version, config, node).await,
        }
    })
    .await?)
}

/// Sets or removes the fence. Removing it must be said: a body that says nothing (`{}`) is
/// refused, never read as "no token".
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = FenceRequest)]
struct Fence {
    /// Absent: not given; `null`: remove the token; a string: the token every publish must
    /// present.
    #[serde(default, deserialize_with = "given")]
    #[schema(value_type = Option<String>)]
    token: Option<Option<String>>,
    #[serde(default)]
    clear: bool,
}

impl JsonBody for Fence {
    const SHAPE: &'static str =
        r#"{"token": "T"} to set the fence, or {"clear": true} to remove it"#;
    const FIELDS: &'static [(&'static str, &'static str)] = &[
        ("token", "a non-empty string, or null to remove the fence"),
        ("clear", "true to remove the fence"),
    ];
}

/// A field that is present, even as `null`: `Some(None)`; `#[serde(default)]` makes an
/// absent one `None`.
fn given<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// Sets or removes the dataset's publish token (the fence).
///
/// `{"token": "T"}` sets it; `{"clear": true}` or `{"token": null}` removes it; a body that says
/// neither is 400.
#[utoipa::path(
    post,
    path = "/v1/datasets/{dataset}/fence",
    tag = "datasets",
    params(DatasetPath, IdempotencyKey),
    request_body = Fence,
    responses(
        (status = 200, description = "the dataset", body = mend::model::Dataset),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn fence(
    State(shared): AppState,
    ClientKey(key): ClientKey,
    Path(dataset_id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let request: Fence = parse(&body)?;
    let token = match (request.token, request.clear) {
        (Some(Some(token)), false) => Some(token),
        (Some(None), false) | (None, true) => None,
        (None, false) => {
            return Err(ApiError::bad_request(format!(
                "say what to do with the fence: {}; nothing happened",
                Fence::SHAPE
            )));
        }
        (Some(_), true) => {
            return Err(ApiError::bad_request(
                "give either a token or \"clear\": true, not both; nothing happened",
            ));
        }
    };
    let engine = shared.acting_engine();
    let id = dataset_id.clone();
    ok(&write(&shared, &dataset_id, None, async move {
        match key {
            Some(key) => {
                engine
                    .set_publish_token_recorded(&id, token.as_deref(), &key)
                    .await
            }
            None => engine.set_publish_token(&id, token.as_deref()).await,
        }
    })
    .await?)
}

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
    metadata: Value,
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

fn empty_object() -> Value {
    json!({})
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
                    metadata_json: entry.metadata.to_string(),
                })
                .collect(),
        }
    }
}

/// A request's `Idempotency-Key` (absent: `None`), as its record is kept: under the name of
/// the principal that sent it ([`Caller::recorded_key`]), so that one principal's key never
/// answers another's request. A key that is not visible ASCII, or not a valid key, is 400.
pub(crate) struct ClientKey(pub(crate) Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for ClientKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let Some(value) = parts.headers.get("idempotency-key") else {
            return Ok(Self(None));
        };
        let key = value.to_str().map_err(|_| {
            ApiError::bad_request("the Idempotency-Key header is not visible ASCII")
        })?;
        // The client's key alone: recorded under a principal's name, a key starting `op:`
        // would no longer look like one of mend's own.
        mend::validate::name("idempotency key", key)
            .and_then(|()| mend::validate::idempotency_key(key))
            .map_err(|error| ApiError::bad_request(error.to_string()))?;
        let caller = parts.extensions.get::<Caller>().ok_or_else(|| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::Internal,
                "the request has no principal: its route skipped the access check",
            )
        })?;
        Ok(Self(Some(caller.recorded_key(key.to_owned()))))
    }
}

/// Stages splits, in upsert or create-only mode (no default).
///
/// Each split is answered `inserted`, `overwritten` or `skipped` (with the existing state); an
/// upsert that would touch a row not staged is 412 naming the ids, and writes nothing.
#[utoipa::path(
    post,
    path = "/v1/datasets/{dataset}/stage",
    tag = "splits",
    params(DatasetPath, IdempotencyKey),
    request_body = Stage,
    responses(
        (status = 200, description = "what became of each split", body = mend::model::StageResult),
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
    body: Bytes,
) -> ApiResult {
    let request = parse::<Stage>(&body)?.into_request(dataset_id.clone());
    let ids: Vec<String> = request.splits.iter().map(|s| s.split_id.clone()).collect();
    let engine = shared.acting_engine();
    let result = keyed_write(
        &shared,
        &dataset_id,
        key.clone().as_deref(),
        Some(&ids),
        async move {
            match key {
                Some(key) => engine.stage_recorded(&request, &key).await,
                None => engine.stage(&request).await,
            }
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
    ok(&result?.0)
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
    let ids: Vec<String> = request
        .staged_split_ids
        .iter()
        .chain(&request.replaced_split_ids)
        .cloned()
        .collect();
    let engine = shared.acting_engine();
    let result = keyed_write(
        &shared,
        &dataset_id,
        key.clone().as_deref(),
        Some(&ids),
        async move {
            match key {
                Some(key) => engine.publish_recorded(&request, &key).await,
                None => engine.publish(&request).await,
            }
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
    let ids = request.split_ids.clone();
    let in_the_way = key.clone();
    ok(&keyed_write(
        &shared,
        &dataset_id,
        in_the_way.as_deref(),
        Some(&ids),
        async move {
            match key {
                Some(key) => {
                    engine
                        .mark_for_deletion_recorded(&id, &request.split_ids, &key)
                        .await
                }
                None => engine.mark_for_deletion(&id, &request.split_ids).await,
            }
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
    let in_the_way = key.clone();
    keyed_write(
        &shared,
        &dataset_id,
        in_the_way.as_deref(),
        Some(&request.split_ids),
        async move {
            match key {
                Some(key) => engine.delete_splits_recorded(&id, &ids, &key).await,
                None => engine.delete_splits(&id, &ids).await,
            }
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

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = NodeRequest)]
struct Node {
    #[serde(default = "server_node")]
    node: String,
}

impl JsonBody for Node {
    const SHAPE: &'static str = r#"{"node"?: STRING}"#;
    const FIELDS: &'static [(&'static str, &'static str)] =
        &[("node", "a string naming the writer")];
}

/// Collects the dataset's abandoned staged splits and expired marked ones, as the policy plans.
#[utoipa::path(
    post,
    path = "/v1/datasets/{dataset}/gc",
    tag = "recovery",
    params(DatasetPath, IdempotencyKey),
    request_body = Node,
    responses(
        (status = 200, description = "marked and deleted ids", body = mend::engine::GcResult),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn gc(
    State(shared): AppState,
    ClientKey(key): ClientKey,
    Path(dataset_id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let request: Node = parse(&body)?;
    let engine = shared.acting_engine();
    let id = dataset_id.clone();
    ok(&write(&shared, &dataset_id, None, async move {
        match key {
            Some(key) => engine.gc_recorded(&id, &request.node, &key).await,
            None => engine.gc(&id, &request.node).await,
        }
    })
    .await?)
}

/// Adopts or discards the dataset's orphan objects (objects with no row), as the policy decides.
#[utoipa::path(
    post,
    path = "/v1/datasets/{dataset}/reconcile",
    tag = "recovery",
    params(DatasetPath, IdempotencyKey),
    request_body = Node,
    responses(
        (status = 200, description = "the reconcile report", body = mend::engine::ReconcileReport),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn reconcile(
    State(shared): AppState,
    ClientKey(key): ClientKey,
    Path(dataset_id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let request: Node = parse(&body)?;
    let engine = shared.acting_engine();
    let id = dataset_id.clone();
    let counted = key.clone();
    let (report, replayed) =
        keyed_write(&shared, &dataset_id, counted.as_deref(), None, async move {
            match key {
                Some(key) => engine.reconcile_recorded(&id, &request.node, &key).await,
                None => engine.reconcile(&id, &request.node).await,
            }
        })
        .await?;
    if !replayed {
        shared.metrics.reconcile(&report);
    }
    ok(&report)
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RecoverRequest)]
struct Recover {
    mode: RecoveryMode,
}

impl JsonBody for Recover {
    const SHAPE: &'static str = r#"{"mode": "probe"|"roll-forward"|"verify"|"exclusive"}"#;
    const FIELDS: &'static [(&'static str, &'static str)] = &[(
        "mode",
        r#""probe", "roll-forward", "verify" or "exclusive""#,
    )];
}

/// Runs a recovery sweep of the dataset's in-doubt operations.
///
/// `exclusive` may undo a live writer's work and fences every writer out: it needs the admin token.
/// `probe` and `verify` write nothing.
#[utoipa::path(
    post,
    path = "/v1/datasets/{dataset}/recover",
    tag = "recovery",
    params(DatasetPath, IdempotencyKey),
    request_body = Recover,
    responses(
        (status = 200, description = "the recovery report", body = mend::engine::RecoveryReport),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn recover(
    State(shared): AppState,
    ClientKey(key): ClientKey,
    Extension(caller): Extension<Caller>,
    Path(dataset_id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let request: Recover = parse(&body)?;
    // Exclusive recovery may undo a live writer's work and fences every writer out.
    if request.mode == RecoveryMode::Exclusive {
        caller.require_admin("exclusive recovery")?;
    }
    let engine = shared.acting_engine();
    let id = dataset_id.clone();
    let mode = request.mode;
    // Probe and verify write nothing, but run like writes so that a shutdown waits for them
    // too; a dataset its supervisor cannot serve is still open to an operator's recovery.
    let ticket = admit(&shared, Some(&dataset_id))?;
    let replayed = recorded_before(&shared, &dataset_id, key.as_deref()).await?;
    let report = Writes::run(ticket, async move {
        match key {
            Some(key) => engine.recover_recorded(&id, mode, &key).await,
            None => engine.recover(&id, mode).await,
        }
    })
    .await
    .map_err(|error| engine_error(&shared, &dataset_id, error))?;
    if !replayed {
        shared.metrics.recovery(&report);
    }
    shared.supervisors.kick(&dataset_id);
    ok(&report)
}

/// The dataset's audit trail: who decided what and when (each recovery, gc and reconcile
/// decision, with the principal that ran it), newest `limit` records, oldest first.
#[utoipa::path(
    get,
    path = "/v1/datasets/{dataset}/audit",
    tag = "recovery",
    params(DatasetPath, AuditQuery),
    responses(
        (status = 200, description = "the audit records, oldest first", body = Vec<mend::audit::AuditEntry>),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn audit(
    State(shared): AppState,
    Path(dataset_id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult {
    if let Some(unknown) = params
        .keys()
        .find(|key| !["principal", "limit"].contains(&key.as_str()))
    {
        return Err(ApiError::bad_request(format!(
            "unknown query parameter {unknown:?}; the audit takes principal=NAME and limit=N"
        )));
    }
    let limit = match params.get("limit") {
        None => DEFAULT_AUDIT_LIMIT,
        Some(text) => text.parse::<usize>().map_err(|_| {
            ApiError::bad_request(format!(
                "limit: {:?} is not a whole number",
                mend::validate::truncated(text, 64)
            ))
        })?,
    };
    let principal = params.get("principal").map(String::as_str);
    let entries = shared
        .engine
        .audit_trail(&dataset_id, principal, limit)
        .await
        .map_err(|error| engine_error(&shared, &dataset_id, error))?;
    ok(&entries)
}

/// The audit records read when a request does not say how many.
pub const DEFAULT_AUDIT_LIMIT: usize = 100;

/// Checks the dataset's invariants, bucket included; writes nothing.
///
/// Violations are listed in the report, answered 200. `?deep=true` also hashes every payload.
#[utoipa::path(
    get,
    path = "/v1/datasets/{dataset}/verify",
    tag = "recovery",
    params(DatasetPath, VerifyQuery),
    responses(
        (status = 200, description = "the verify report", body = mend::engine::VerifyReport),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn verify(
    State(shared): AppState,
    Path(dataset_id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult {
    served(&shared, &dataset_id)?;
    if let Some(unknown) = params.keys().find(|key| *key != "deep") {
        return Err(ApiError::bad_request(format!(
            "unknown query parameter {unknown:?}; verify takes only deep=true|false"
        )));
    }
    let deep = match params.get("deep").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "deep: {:?} is neither true nor false",
                mend::validate::truncated(other, 64)
            )));
        }
    };
    let verified = if deep {
        shared.acting_engine().verify_deep(&dataset_id).await
    } else {
        shared.acting_engine().verify(&dataset_id).await
    };
    let report = verified.map_err(|error| engine_error(&shared, &dataset_id, error))?;
    ok(&report)
}

/// The active policy and its registry record.
#[utoipa::path(
    get,
    path = "/v1/policy",
    tag = "policy",
    responses(
        (status = 200, description = "the active policy", body = ActivePolicy),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn active_policy(State(shared): AppState) -> ApiResult {
    let policy = shared.engine.policy();
    let record = shared.registry.active().await?;
    ok(&ActivePolicy {
        digest: policy.digest().to_owned(),
        name: policy.description().name.clone(),
        version: policy.description().version.clone(),
        record,
    })
}

#[cfg(test)]
mod tests {
    use mend::error::{EntityKind, PolicyError};

    use super::*;

    #[test]
    fn every_engine_error_answers_its_own_code() {
        let message = || "m".to_owned();
        let errors = [
            MendError::NotFound {
                kind: EntityKind::Dataset,
                ids: vec!["d".into()],
            },
            MendError::AlreadyExists {
                kind: EntityKind::Dataset,
                id: "d".into(),
            },
            MendError::FailedPrecondition {
                message: message(),
                ids: vec!["s".into()],
            },
            MendError::InvalidArgument { message: message() },
            MendError::RecoveryRequired {
                operation_id: "op".into(),
            },
            MendError::PolicyRejected { message: message() },
            MendError::CapabilityMissing {
                capability: "c".into(),
                detail: message(),
            },
            MendError::Policy(PolicyError::Compile { message: message() }),
            MendError::Conflict { message: message() },
            MendError::Unavailable {
                message: message(),
                source: None,
            },
            MendError::Transient { message: message() },
            MendError::Corrupt { message: message() },
        ];
        for error in errors {
            let code = error.code();
            let answer = ApiError::from(error);
            let (status, answered) = answer.status();
            assert_eq!(answered, code, "the engine's code is the answer's");
            assert!(
                answer.body.error.statuses().contains(&status),
                "{code}: {status}"
            );
            // The body, as sent, is the documented one.
            let sent = serde_json::to_value(&answer.body).unwrap();
            let read: ErrorBody = serde_json::from_value(sent).unwrap();
            assert_eq!(read, *answer.body);
        }
        println!("api: 12 engine errors answered with their own codes");
    }
}

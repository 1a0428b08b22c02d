//! What the server says of itself: liveness (`/healthz`), readiness (`/readyz`), its
//! metrics, its status and its OpenAPI document.

use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use axum::extract::{Extension, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Shared;
use crate::access::Caller;
use crate::answers::{DatasetStatus, Health, Readiness, ServerStatus};
use crate::auth::Action;
use crate::error::{ApiError, ApiResult, ErrorCode, ok};
use crate::openapi::{InternalError, Unavailable};

use super::AppState;

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
    if shared.shutting_down.load(Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ShuttingDown,
            "the server is shutting down",
        ));
    }
    if !shared.ready.load(Ordering::SeqCst) {
        // Why goes to the logs and to GET /v1/status, not to whoever probes: the reason can
        // hold a storage path, and a path a dataset's name.
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Starting,
            "the server is not ready yet (GET /v1/status says why, to a principal with \
             operate on every dataset; so does its log)",
        ));
    }
    // One dataset that cannot be served does not make the server unready: the others serve.
    ok(&Readiness { ready: true })
}

/// Why the server is not ready, or `None` when it is.
fn not_ready_because(shared: &Shared) -> Option<String> {
    if shared.shutting_down.load(Ordering::SeqCst) {
        return Some("the server is shutting down".into());
    }
    if shared.ready.load(Ordering::SeqCst) {
        return None;
    }
    Some(match shared.discovery_error().as_deref() {
        Some(error) => {
            format!("the server cannot take part in the fleet or find its pending work: {error}")
        }
        None => "the server has not run its first supervision round yet".to_string(),
    })
}

/// Prometheus metrics (text exposition format 0.0.4).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    responses(
        (status = 200, description = "the metrics, docs/src/http-api.md \"Metrics\"", body = String, content_type = "text/plain; version=0.0.4"),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn metrics(State(shared): AppState) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        shared.metrics.render(&shared.engine.policy()),
    )
        .into_response()
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
    // The server's own details need what GET /v1/fleet needs.
    let sees_server = caller.may_every_dataset(Action::Operate);
    let health = shared.supervisors.all();
    let datasets: Vec<DatasetStatus> = shared
        .engine
        .each_dataset()
        .await?
        .into_iter()
        .filter(|(id, _)| caller.may(Action::Read, id))
        .map(|(id, dataset)| {
            let health = health.get(&id).cloned();
            let owner = sees_server
                .then(|| shared.supervisors.owner_of(&id))
                .flatten();
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
    let not_ready_because = not_ready_because(&shared);
    ok(&ServerStatus {
        catalog: sees_server.then(|| shared.engine.catalog().describe()),
        policy_digest: policy.digest().to_owned(),
        policy: format!(
            "{} {}",
            policy.description().name,
            policy.description().version
        ),
        writes_in_flight: shared.writes.in_flight(),
        ready: not_ready_because.is_none(),
        not_ready_because: not_ready_because.filter(|_| sees_server),
        fleet: sees_server.then(|| shared.supervisors.fleet()),
        datasets,
    })
}

/// `GET /v1/openapi.json`.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    tag = "health",
    responses(
        (status = 200, description = "this document", body = Object, content_type = "application/json"),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn serve_document() -> Response {
    // Generated once: it depends on nothing but the code.
    static TEXT: LazyLock<String> = LazyLock::new(super::document_json);
    ([(header::CONTENT_TYPE, "application/json")], TEXT.as_str()).into_response()
}

/// The probes, also served alone on `serve.probe_listen`.
pub(super) fn probe_routes() -> OpenApiRouter<Arc<Shared>> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
}

pub(super) fn routes() -> OpenApiRouter<Arc<Shared>> {
    probe_routes()
        .routes(routes!(metrics))
        .routes(routes!(serve_document))
        .routes(routes!(status))
}

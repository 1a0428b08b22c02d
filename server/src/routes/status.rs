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
use crate::answers::{DatasetStatus, Health, Readiness, ServerStatus, UnavailableDataset};
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

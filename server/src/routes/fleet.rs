//! The fleet as this replica sees it (`/v1/fleet`).

use std::sync::Arc;

use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Shared;
use crate::error::{ApiResult, ok};
use crate::openapi::{InternalError, Unavailable};

use super::AppState;

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

pub(super) fn routes() -> OpenApiRouter<Arc<Shared>> {
    OpenApiRouter::new().routes(routes!(fleet))
}

//! The routes of `mend serve`, one module per resource, and the router built from them.
//!
//! Bodies are JSON in and out. Every answer that is not a success, whoever produced it (a
//! handler, a limit, the router itself for an unknown route or method), has its status and
//! an [`ErrorBody`](crate::error::ErrorBody): `{"error": CODE, "message": ...,
//! "certainly_not_applied": BOOL}` (plus `ids` for a failed precondition, `operation_id` for
//! `recovery_required`, `dataset_id` and `reason` for `dataset_unavailable`, `hint` where
//! there is one); [`crate::error`] holds every error type.
//!
//! Each handler's `#[utoipa::path]` declares its route and documents it; each module
//! registers its own handlers (`routes()`), and [`documented_routes`] builds the router from
//! those registrations, so that it serves exactly what the OpenAPI document
//! ([`document`]) lists.

#[cfg(test)]
mod compact_body_tests;
mod datasets;
mod fleet;
mod operate;
mod operations;
mod policy;
mod splits;
mod status;
mod write;

pub(crate) use splits::list_query;
pub(crate) use {
    datasets::{ApplyConfig, CreateDataset},
    operations::Begin,
    splits::{Publish, SplitIds, Stage},
};

use std::sync::Arc;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use utoipa::OpenApi;
use utoipa::openapi::OpenApi as Document;
use utoipa_axum::router::OpenApiRouter;

use crate::error::{ApiError, ErrorCode};
use crate::limits::{BodyLimit, read_body};
use crate::openapi;
use crate::{ServeLimits, Shared};

pub(crate) type AppState = State<Arc<Shared>>;

pub(super) fn server_node() -> String {
    "mend-serve".into()
}

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let (routes, _document) = documented_routes(&shared.options.limits).split_for_parts();
    routes
        .fallback(not_found)
        // Inside the counting, so that refusals are counted; outside each route's body
        // limit, so that no body is read for a caller the route refuses.
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            crate::access::check,
        ))
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            count_requests,
        ))
        .layer(middleware::from_fn(json_errors))
        .with_state(shared)
}

/// The probes alone, `/healthz` and `/readyz`, for `serve.probe_listen`.
pub(crate) fn probe_router(shared: Arc<Shared>) -> Router {
    let (routes, _document) = OpenApiRouter::<Arc<Shared>>::new()
        .merge(status::probe_routes())
        .split_for_parts();
    routes
        .fallback(not_found)
        .layer(middleware::from_fn(json_errors))
        .with_state(shared)
}

/// Every route, each registered by its module from its handler's `#[utoipa::path]`: the
/// router and the OpenAPI document are built from that one declaration. A module registers
/// a route with `.routes(routes!(handler))`, never with `.route(...)`, which the document
/// would miss (and the OpenAPI tests would catch).
pub(crate) fn documented_routes(limits: &ServeLimits) -> OpenApiRouter<Arc<Shared>> {
    let body = BodyLimit {
        max_bytes: limits.max_json_body_bytes,
        setting: "serve.max_json_body_bytes",
        timeout: limits.body_read_timeout,
    };
    let component_body = BodyLimit {
        max_bytes: limits.max_admin_component_bytes,
        setting: "serve.max_admin_component_bytes",
        timeout: limits.body_read_timeout,
    };
    let create_body = BodyLimit {
        max_bytes: datasets::MAX_CREATE_BODY_BYTES,
        setting: "a dataset's creation takes at most 64 KiB",
        timeout: limits.body_read_timeout,
    };
    let json_routes = OpenApiRouter::with_openapi(openapi::Frame::openapi())
        .merge(status::routes())
        .merge(fleet::routes())
        .merge(datasets::routes())
        .merge(splits::routes())
        .merge(operate::routes())
        .merge(operations::routes())
        .merge(policy::routes())
        .layer(middleware::from_fn_with_state(body, read_body));
    // An object upload streams: its cap is the size its operation planned, its deadline one
    // per chunk (see `operations`).
    let upload_routes = operations::upload_routes();
    // A component upload has a cap of its own.
    let component_routes =
        policy::component_routes().layer(middleware::from_fn_with_state(component_body, read_body));
    // A create names its dataset in its body: a cap of its own, small (see
    // `datasets::MAX_CREATE_BODY_BYTES`).
    let create_routes =
        datasets::create_routes().layer(middleware::from_fn_with_state(create_body, read_body));
    json_routes
        .merge(create_routes)
        .merge(component_routes)
        .merge(upload_routes)
}

/// The OpenAPI document as the code declares it: the routes' own, and what
/// [`access::ROUTES`](crate::access::ROUTES) says of each.
pub(crate) fn document() -> Document {
    let (_router, mut document) = documented_routes(&ServeLimits::default()).split_for_parts();
    openapi::declare_access(&mut document);
    document
}

/// The document as it is served and committed: pretty-printed JSON (paths, schemas and
/// properties in sorted order), with a final newline.
pub(crate) fn document_json() -> String {
    let mut text = document()
        .to_pretty_json()
        .expect("the document is plain data");
    text.push('\n');
    text
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
    // Refused before a handler ran, or failed in a way no one described: only a 4xx
    // certainly did nothing.
    let error = ApiError::new(status, ErrorCode::for_status(status), message)
        .certainly_not_applied(status.is_client_error());
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
        "no such route; see the HTTP API in docs/src/http-api.md",
    )
}

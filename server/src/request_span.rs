//! A `tracing` span per HTTP request, as a layer around the whole router: `method`, `route`
//! (the matched route template, `unmatched` for none, as `mend_http_requests_total` counts
//! it), `dataset_id` and `operation_id` when the path names them, `principal` once the
//! request is authenticated (`access`), and `status` once the answer is made. Everything a handler, an admitted write (which keeps
//! the span on its own task, [`super::writes`]) or the engine logs while answering is inside
//! it.
//!
//! A small `axum::middleware` rather than tower-http's `TraceLayer`: the span needs the
//! route's path parameters, which only axum's `RawPathParams` extractor gives, so a
//! `TraceLayer` would still need this code in its `make_span_with`, and one more dependency
//! for the rest. Like every limit of the server, it is a layer, never code in a handler.
//!
//! The answer to a write (any method but GET and HEAD) is logged at info, so that the log
//! names who changed what (the principal, the route, the dataset, the status) at the default
//! level; the answer to a read at debug (a full access log is `mend=debug`, or
//! `mend_server::request_span=debug`); a 5xx other than 503 at warn: a 503 is load or an
//! unavailable dataset, which the supervisor logs once, not once per request.

use std::time::Instant;

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{MatchedPath, RawPathParams, Request};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;
use tracing::field::Empty;

pub(super) async fn request_span(
    params: Result<RawPathParams, RawPathParamsRejection>,
    request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |path| path.as_str());
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        route = %route,
        dataset_id = Empty,
        operation_id = Empty,
        principal = Empty,
        status = Empty,
    );
    for (name, value) in params.iter().flat_map(RawPathParams::iter) {
        let field = match name {
            "dataset" => "dataset_id",
            "operation" => "operation_id",
            _ => continue,
        };
        // A client chose it: an id as it is, anything else quoted and cut short, so that no
        // path can break a log line or fill it.
        if mend::validate::split_id(value).is_ok() {
            span.record(field, tracing::field::display(value));
        } else {
            let quoted = format!(
                "{:?}",
                mend::validate::truncated(value, mend::validate::QUOTED_CHARS)
            );
            span.record(field, tracing::field::display(quoted));
        }
    }
    let write = !matches!(*request.method(), Method::GET | Method::HEAD);
    let started = Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("status", status.as_u16());
    // To the microsecond: more digits are noise.
    let elapsed_ms = started.elapsed().as_micros() as f64 / 1000.0;
    // Inside the span, not merely its child: a subscriber then lists it among the event's
    // spans, as it does for every event of the request.
    span.in_scope(|| {
        if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(elapsed_ms, "answered with a server error");
        } else if write {
            tracing::info!(elapsed_ms, "answered");
        } else {
            tracing::debug!(elapsed_ms, "answered");
        }
    });
    response
}

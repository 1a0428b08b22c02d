//! What a client can make the server hold, and for how long: the [`ServeLimits`], and the
//! layer that reads a request's body within its size cap and its deadline before any handler
//! sees it.
//!
//! The connection limits (how many, how long a head or an idle connection may take, how
//! long a shutdown waits) are enforced by the accept loop in [`super::connections`]; the
//! bounds on queued writes by [`super::writes`].

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::api::ApiError;
use super::errors::ErrorCode;

/// The limits of one server. Every one is a `serve.*` setting; the defaults are safe for a
/// server on loopback or behind a proxy.
#[derive(Debug, Clone)]
pub struct ServeLimits {
    /// Connections open at once; one more is answered 503 and closed at once.
    pub max_connections: usize,
    /// From a request head's first byte to its last.
    pub header_read_timeout: Duration,
    /// From the end of a request's head to the end of its body.
    pub body_read_timeout: Duration,
    /// How long a connection may wait without a byte of a next request.
    pub idle_timeout: Duration,
    /// How long a shutdown waits for requests being answered before it drops them; admitted
    /// writes finish regardless.
    pub shutdown_deadline: Duration,
    /// Writes admitted at once on the whole server.
    pub max_queued_writes: usize,
    /// Writes admitted at once on one dataset.
    pub max_queued_writes_per_dataset: usize,
    /// The largest policy component an admin request may upload or name.
    pub max_admin_component_bytes: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            max_connections: 512,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            shutdown_deadline: Duration::from_secs(30),
            max_queued_writes: 1024,
            max_queued_writes_per_dataset: 64,
            max_admin_component_bytes: 16 << 20,
        }
    }
}

/// How much body a group of routes takes, and how long it may take to arrive.
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyLimit {
    pub max_bytes: usize,
    pub timeout: Duration,
}

/// Reads the whole body, then hands the request on with it. A body over the cap is refused
/// with 413 (at once when its `Content-Length` says so); one that has not arrived within the
/// deadline with 408. Either way the connection is closed: what is left of the body is never
/// read.
pub(super) async fn read_body(
    State(limit): State<BodyLimit>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit.max_bytes as u64) {
        return closing(too_large(limit.max_bytes));
    }
    let read = tokio::time::timeout(limit.timeout, axum::body::to_bytes(body, limit.max_bytes));
    let bytes = match read.await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(error)) => {
            let too_long = std::error::Error::source(&error)
                .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            return closing(if too_long {
                too_large(limit.max_bytes)
            } else {
                // The client closed or broke the connection mid-body; it reads no answer.
                ApiError::bad_request(format!("read the request body: {error}")).into_response()
            });
        }
        Err(_elapsed) => {
            return closing(
                ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    ErrorCode::RequestTimeout,
                    format!(
                        "the request body did not arrive within {} ms (serve.body_read_timeout_ms); nothing happened",
                        limit.timeout.as_millis()
                    ),
                )
                .into_response(),
            );
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn too_large(max_bytes: usize) -> Response {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::PayloadTooLarge,
        format!(
            "the request body is over this route's limit of {max_bytes} bytes; nothing happened"
        ),
    )
    .into_response()
}

/// The rest of the body is not read: the connection cannot carry another request.
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

//! What a client can make the server hold, and for how long: the [`ServeLimits`], the layer
//! that reads a request's body within its size cap and its deadline before any handler sees
//! it, and the size of the largest legal JSON request ([`largest_json_body`]), which the JSON
//! body cap must hold.
//!
//! The connection limits (how many, how long a head or an idle connection may take, how
//! long a shutdown waits) are enforced by the accept loop in [`super::connections`]; the
//! bounds on queued writes by [`super::writes`].

use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower::{Layer, ServiceExt};

use super::ServeError;
use crate::error::ApiError;
use crate::error::ErrorCode;
use mend::bounds;
use mend::validate::{MAX_ID_BYTES, MAX_NAME_BYTES};

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
    /// The largest JSON request body (every route but the uploads of objects and policy
    /// components). It must hold the largest legal request of the engine's limits: see
    /// [`ServeLimits::check_json_body`].
    pub max_json_body_bytes: usize,
    /// What each principal may make the server hold ([`crate::quotas`]).
    pub principal: crate::quotas::PrincipalLimits,
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
            // The largest legal request of `mend`'s default limits (1,000 splits of 8 KiB of
            // metadata) is about 52 MB.
            max_json_body_bytes: 64 << 20,
            principal: crate::quotas::PrincipalLimits::default(),
        }
    }
}

impl ServeLimits {
    /// Whether the JSON body cap holds the largest legal request of an engine whose requests
    /// name at most `max_stage_batch` splits of at most `max_metadata_bytes` of metadata each
    /// ([`largest_json_body`]); otherwise the error that names the three settings and the
    /// bytes needed. `mend serve` refuses to start without it: a request within every limit
    /// would be refused as too large.
    pub fn check_json_body(
        &self,
        max_stage_batch: usize,
        max_metadata_bytes: usize,
    ) -> Result<(), ServeError> {
        let needed = largest_json_body(max_stage_batch, max_metadata_bytes);
        if needed <= self.max_json_body_bytes {
            return Ok(());
        }
        Err(ServeError::JsonBodyCap {
            cap: self.max_json_body_bytes,
            needed,
            max_stage_batch,
            max_metadata_bytes,
        })
    }
}

/// The most bytes a JSON string takes for one byte of its text: `\u0061` for `a`, the longest
/// escape there is.
const ESCAPED_BYTES_PER_BYTE: usize = 6;

/// The most digits of any number a request carries (`u64::MAX` has 20).
const NUMBER_DIGITS: usize = 20;

/// `sha256:` and 64 hex digits.
const CHECKSUM_BYTES: usize = 71;

/// The largest body a legal JSON request can have when a request names at most
/// `max_stage_batch` splits of at most `max_metadata_bytes` of metadata each: the largest of
/// every JSON route's largest request, with every id and name at its longest, every list at
/// its cap, every number with 20 digits, every string (keys included) written with a `\uXXXX`
/// escape for each of its bytes, and no whitespace between tokens. That is a begin: a commit
/// of `max_stage_batch` splits, each with its metadata as JSON text in a string, and a
/// checkpoint delta of [`bounds::CHECKPOINT_DELTA_PARTITIONS`] partitions.
///
/// Metadata is counted as mend writes it back (compact JSON): a client that pads it with
/// whitespace, repeats a key or writes a number with more digits than it reads back with
/// sends more than this, and a body over the cap is refused whatever it holds.
///
/// Over 100 lines: one size per kind of body, each written as the body's shape with the
/// helpers above; split, the shapes would only lose the helpers they share.
pub fn largest_json_body(max_stage_batch: usize, max_metadata_bytes: usize) -> usize {
    let text = |bytes: usize| 2 + ESCAPED_BYTES_PER_BYTE * bytes;
    let id = text(MAX_ID_BYTES);
    let name = text(MAX_NAME_BYTES);
    let number = NUMBER_DIGITS;
    // `"key":value` and the comma after it.
    let field = |key: &str, value: usize| text(key.len()) + 1 + value + 1;
    let object = |fields: &[usize]| 2 + fields.iter().sum::<usize>();
    // Items and their commas.
    let array = |count: usize, item: usize| 2 + count * (item + 1);
    let fixed = |count: u64| usize::try_from(count).unwrap_or(usize::MAX);

    let delta = object(&[
        field("source", name),
        field(
            "partitions",
            array(
                fixed(bounds::CHECKPOINT_DELTA_PARTITIONS.max),
                object(&[
                    field("partition", name),
                    field("from_position", number),
                    field("to_position", number),
                ]),
            ),
        ),
    ]);
    // A commit's splits and delta outweigh a merge's replaced ids: a split holds an id and
    // more, and a merge carries no delta.
    let begin = object(&[
        field("operation_id", id),
        field("kind", text("commit".len())),
        field("node", name),
        field("lease_ms", number),
        field(
            "splits",
            array(
                max_stage_batch,
                object(&[
                    field("split_id", id),
                    field("metadata_json", text(max_metadata_bytes)),
                    field("size", number),
                    field("sha256", text(CHECKSUM_BYTES)),
                ]),
            ),
        ),
        field("checkpoint_delta", delta),
        field("replaced_split_ids", array(0, id)),
        field("publish_token", name),
    ]);
    // Metadata as an object: at most one escape for each of its bytes.
    let stage = object(&[
        field("mode", text("create-only".len())),
        field("node", name),
        field(
            "splits",
            array(
                max_stage_batch,
                object(&[
                    field("split_id", id),
                    field("metadata", ESCAPED_BYTES_PER_BYTE * max_metadata_bytes),
                ]),
            ),
        ),
    ]);
    let publish = object(&[
        field("staged_split_ids", array(max_stage_batch, id)),
        field("replaced_split_ids", array(max_stage_batch, id)),
        field("checkpoint_delta", delta),
        field("publish_token", name),
    ]);
    let config = object(&[
        field("expected_config_version", number),
        field(
            "config",
            object(&[
                field("staged_grace_period_ms", number),
                field("deletion_grace_period_ms", number),
                field(
                    "policy_params",
                    object(&vec![
                        text(MAX_NAME_BYTES)
                            + 1
                            + text(fixed(bounds::POLICY_PARAM_VALUE_BYTES.max))
                            + 1;
                        fixed(bounds::POLICY_PARAMS.max)
                    ]),
                ),
            ]),
        ),
        field("node", name),
    ]);
    // Create, fence, gc, reconcile, recover and heartbeat bodies hold a few names at most.
    let small = object(&[
        field("dataset_id", id),
        field("staged_grace_period_ms", number),
        field("deletion_grace_period_ms", number),
        field("token", name),
        field("clear", "false".len()),
        field("node", name),
        field("mode", text("roll-forward".len())),
        field("lease_ms", number),
    ]);
    [begin, stage, publish, config, small]
        .into_iter()
        .max()
        .unwrap_or(0)
}

/// How much body a group of routes takes, the setting that says so, and how long it may take
/// to arrive.
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyLimit {
    pub max_bytes: usize,
    pub setting: &'static str,
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
        return closing(too_large(limit));
    }
    let read = tokio::time::timeout(limit.timeout, axum::body::to_bytes(body, limit.max_bytes));
    let bytes = match read.await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(error)) => {
            let too_long = std::error::Error::source(&error)
                .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            return closing(if too_long {
                too_large(limit)
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
    // The body is read, within this route's cap: axum's own cap on the handlers' extractors
    // (2 MiB by default) must not cut it off a second time, smaller, with the framework's
    // message ("Failed to buffer the request body"), whatever the route's cap says.
    let request = Request::from_parts(parts, Body::from(bytes));
    match DefaultBodyLimit::disable()
        .layer(next)
        .oneshot(request)
        .await
    {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

fn too_large(limit: BodyLimit) -> Response {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::PayloadTooLarge,
        format!(
            "the request body is over this route's limit of {} bytes ({}); nothing was applied",
            limit.max_bytes, limit.setting
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

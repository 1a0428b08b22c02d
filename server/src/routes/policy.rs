//! The policy: the active one (`/v1/policy`), and the administration routes
//! (`/v1/policy/replay`, `/swap`, `/rollback`) and how they get a component's bytes.
//!
//! A component arrives one of two ways, both capped at `serve.max_admin_component_bytes`:
//!
//! - **uploaded**: the body is the component, `Content-Type: application/wasm`, and `records`
//!   is a query parameter. The server reads nothing a client names; prefer this.
//! - **named**: `{"component": PATH, "scenarios"?: [PATH], "records"?}`, files on the server's
//!   machine. Only regular files are read (not `/dev/zero`, not a FIFO, not a directory), each
//!   at most the cap, on a blocking thread within [`FILE_READ_TIMEOUT`], so no path can grow
//!   the process or hold a request thread.
//!
//! Compiling runs on a blocking thread too. A body that is not a component is a 400 that
//! quotes none of it.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use serde::Deserialize;
use utoipa::ToSchema;

use super::AppState;
use super::write::{ClientKey, admit};
use crate::Shared;
use crate::answers::ActivePolicy;
use crate::body::{JsonBody, parse};
use crate::error::ErrorCode;
use crate::error::{ApiError, ApiResult, ok};
use crate::openapi::{
    BadRequest, Conflict, IdempotencyKey, InternalError, NotFound, PayloadTooLarge,
    PreconditionFailed, RecordsQuery, RequestTimeout, Unavailable, Unprocessable,
};
use crate::writes::Writes;
use mend::error::PolicyError;
use mend::runtime::PolicyRuntime;
use mend::scenarios::Suite;

/// Longest an admin request waits for a file it names to be read.
pub(super) const FILE_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The records replayed (the catalog's newest, every dataset's together) when a request does
/// not say.
const DEFAULT_RECORDS: usize = 10_000;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = PolicyFileRequest)]
struct PolicyFile {
    /// A component file on the server's machine.
    #[schema(value_type = String)]
    component: PathBuf,
    /// Golden scenario files the component must pass (swap only).
    #[serde(default)]
    #[schema(value_type = Vec<String>)]
    scenarios: Vec<PathBuf>,
    #[serde(default = "default_records")]
    records: usize,
}

impl JsonBody for PolicyFile {
    const SHAPE: &'static str = r#"{"component": PATH, "scenarios"?: [PATH], "records"?: N}, or the component itself with Content-Type: application/wasm"#;
    const FIELDS: &'static [(&'static str, &'static str)] = &[
        (
            "component",
            "a path to a component file on the server's machine",
        ),
        ("scenarios", "an array of paths to scenario files"),
        (
            "records",
            "how many of the catalog's newest audit records to replay, 1 to 100000",
        ),
    ];
}

fn default_records() -> usize {
    DEFAULT_RECORDS
}

/// A component to try, from either form of request.
struct Candidate {
    bytes: Vec<u8>,
    policy: PolicyRuntime,
    scenarios: Vec<Suite>,
    records: usize,
}

/// Replays recorded decisions with a component: which it would change.
#[utoipa::path(
    post,
    path = "/v1/policy/replay",
    tag = "policy",
    params(RecordsQuery),
    request_body(description = "the component itself (`Content-Type: application/wasm`, with `?records=N`), or a JSON request naming files on the server's machine", content((PolicyFile = "application/json"), ("application/wasm"))),
    responses(
        (status = 200, description = "the replay report", body = mend::runtime::replay::ReplayReport),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 413, response = PayloadTooLarge),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn replay_policy(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
    body: Bytes,
) -> ApiResult {
    let candidate = candidate(&shared, &headers, &params, body).await?;
    ok(&shared
        .engine
        .replay_policy(&candidate.policy, candidate.records)
        .await?)
}

/// Swaps the deployment's policy: replay, golden scenarios, then the new registry record.
///
/// 422 if a golden scenario fails or the component cannot run here; 412 if it is the active policy
/// already; 409 if another swap won.
#[utoipa::path(
    post,
    path = "/v1/policy/swap",
    tag = "policy",
    params(IdempotencyKey, RecordsQuery),
    request_body(description = "the component itself (`Content-Type: application/wasm`, with `?records=N`), or a JSON request naming files on the server's machine", content((PolicyFile = "application/json"), ("application/wasm"))),
    responses(
        (status = 200, description = "the replay, the scenario reports and the new registry record", body = mend::engine::DeploymentSwap),
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
async fn swap_policy(
    State(shared): State<Arc<Shared>>,
    ClientKey(key): ClientKey,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
    body: Bytes,
) -> ApiResult {
    let candidate = candidate(&shared, &headers, &params, body).await?;
    let engine = shared.acting_engine();
    let registry = shared.registry.clone();
    let ticket = admit(&shared, None)?;
    let swap = Writes::run(ticket, async move {
        let Candidate {
            bytes,
            policy,
            scenarios,
            records,
        } = candidate;
        engine
            .swap_deployment_policy(&registry, &bytes, policy, records, &scenarios)
            .idempotency_key(key.as_deref())
            .await
    })
    .await?;
    ok(&swap)
}

/// Rolls the deployment's policy back to the one the last swap replaced.
#[utoipa::path(
    post,
    path = "/v1/policy/rollback",
    tag = "policy",
    params(IdempotencyKey),
    responses(
        (status = 200, description = "the new registry record", body = mend::runtime::registry::ActiveRecord),
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
async fn rollback_policy(
    State(shared): State<Arc<Shared>>,
    ClientKey(key): ClientKey,
) -> ApiResult {
    let engine = shared.acting_engine();
    let registry = shared.registry.clone();
    let load = shared.options.load.clone();
    let ticket = admit(&shared, None)?;
    let record = Writes::run(ticket, async move {
        engine
            .rollback_deployment_policy(&registry, &load)
            .idempotency_key(key.as_deref())
            .await
    })
    .await?;
    ok(&record)
}

/// The component of an upload or of a named file, compiled and checked, and the scenarios
/// and record count that go with it.
async fn candidate(
    shared: &Shared,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
    body: Bytes,
) -> Result<Candidate, ApiError> {
    let max_bytes = shared.options.limits.max_admin_component_bytes;
    let uploaded = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim().eq_ignore_ascii_case("application/wasm"));
    let (bytes, scenarios, records) = if uploaded {
        if let Some(unknown) = params.keys().find(|key| key.as_str() != "records") {
            return Err(ApiError::bad_request(format!(
                "unknown query parameter {unknown:?}; an uploaded component takes only records=N"
            )));
        }
        let records = match params.get("records") {
            Some(text) => text.parse().map_err(|_| {
                let bound = mend::bounds::REPLAY_RECORDS;
                ApiError::bad_request(format!(
                    "records: {text:?} is not a whole number between {} and {}",
                    bound.min, bound.max
                ))
            })?,
            None => DEFAULT_RECORDS,
        };
        // The body layer capped the upload already.
        (body.to_vec(), Vec::new(), records)
    } else {
        if !params.is_empty() {
            return Err(ApiError::bad_request(
                "query parameters go with an uploaded component (Content-Type: application/wasm); a JSON request says everything in its body",
            ));
        }
        let request: PolicyFile = parse(&body)?;
        let bytes = read_named_file(&request.component, "policy component", max_bytes).await?;
        let mut scenarios = Vec::with_capacity(request.scenarios.len());
        for path in &request.scenarios {
            let text = read_named_file(path, "scenarios", max_bytes).await?;
            let text = String::from_utf8(text).map_err(|_| {
                ApiError::bad_request(format!("scenarios {} are not UTF-8 text", path.display()))
            })?;
            let file = path.display().to_string();
            scenarios
                .push(mend::scenarios::parse_suite(&file, &text).map_err(|error| {
                    ApiError::bad_request(format!("scenarios {file}: {error}"))
                })?);
        }
        (bytes, scenarios, request.records)
    };
    let load = shared.options.load.clone();
    let (bytes, policy) = tokio::task::spawn_blocking(move || {
        let policy = PolicyRuntime::load_with(&bytes, &load);
        (bytes, policy)
    })
    .await
    .map_err(|error| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            format!("compiling the component failed: {error}"),
        )
    })?;
    Ok(Candidate {
        policy: policy.map_err(load_refused)?,
        bytes,
        scenarios,
        records,
    })
}

/// A component that cannot run here. The compiler's message quotes the input, so a body
/// that is not a component is answered without it.
fn load_refused(error: PolicyError) -> ApiError {
    match error {
        PolicyError::Compile { .. } => ApiError::bad_request(
            "the component is not a WebAssembly component this host can compile; nothing happened",
        ),
        other => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::PolicyFailed,
            other
                .to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        ),
    }
}

/// Reads a file an admin request names, within the cap and [`FILE_READ_TIMEOUT`], on a
/// blocking thread.
async fn read_named_file(path: &Path, what: &str, max_bytes: usize) -> Result<Vec<u8>, ApiError> {
    let owned = path.to_owned();
    let read = tokio::task::spawn_blocking(move || read_regular_file(&owned, max_bytes));
    let refused = |status, message: String| {
        ApiError::new(
            status,
            ErrorCode::for_status(status),
            format!("{what} {}: {message}; nothing happened", path.display()),
        )
    };
    match tokio::time::timeout(FILE_READ_TIMEOUT, read).await {
        Ok(Ok(Ok(bytes))) => Ok(bytes),
        Ok(Ok(Err(FileRefused::TooLarge))) => Err(refused(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("is over the limit of {max_bytes} bytes (serve.max_admin_component_bytes)"),
        )),
        Ok(Ok(Err(FileRefused::NotRegular))) => Err(refused(
            StatusCode::BAD_REQUEST,
            "is not a regular file; name a file, or upload the component with Content-Type: application/wasm".into(),
        )),
        Ok(Ok(Err(FileRefused::Io(error)))) => {
            Err(refused(StatusCode::BAD_REQUEST, format!("cannot be read: {error}")))
        }
        Ok(Err(error)) => Err(refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reading it failed: {error}"),
        )),
        // The blocking thread is left to finish or fail on its own; the request is answered.
        Err(_elapsed) => Err(refused(
            StatusCode::BAD_REQUEST,
            format!("could not be read within {} s", FILE_READ_TIMEOUT.as_secs()),
        )),
    }
}

#[derive(Debug)]
enum FileRefused {
    NotRegular,
    TooLarge,
    Io(std::io::Error),
}

/// A regular file of at most `max_bytes`. The type is checked before opening (opening a
/// FIFO blocks until a writer comes) and again on what was opened (the path may have
/// changed in between); reading stops one byte past the cap whatever the size said.
fn read_regular_file(path: &Path, max_bytes: usize) -> Result<Vec<u8>, FileRefused> {
    let check = |metadata: &std::fs::Metadata| {
        if !metadata.is_file() {
            Err(FileRefused::NotRegular)
        } else if metadata.len() > max_bytes as u64 {
            Err(FileRefused::TooLarge)
        } else {
            Ok(())
        }
    };
    check(&std::fs::metadata(path).map_err(FileRefused::Io)?)?;
    let file = std::fs::File::open(path).map_err(FileRefused::Io)?;
    let metadata = file.metadata().map_err(FileRefused::Io)?;
    check(&metadata)?;
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.take(max_bytes as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(FileRefused::Io)?;
    if bytes.len() > max_bytes {
        return Err(FileRefused::TooLarge);
    }
    Ok(bytes)
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

pub(super) fn routes() -> OpenApiRouter<Arc<Shared>> {
    OpenApiRouter::new()
        .routes(routes!(active_policy))
        .routes(routes!(rollback_policy))
}

/// The routes that take a component: their body has a cap of its own.
pub(super) fn component_routes() -> OpenApiRouter<Arc<Shared>> {
    OpenApiRouter::new()
        .routes(routes!(replay_policy))
        .routes(routes!(swap_policy))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_the_cap_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small");
        std::fs::write(&small, b"12345").unwrap();
        assert_eq!(read_regular_file(&small, 5).unwrap(), b"12345");
        assert!(matches!(
            read_regular_file(&small, 4),
            Err(FileRefused::TooLarge)
        ));
        assert!(matches!(
            read_regular_file(dir.path(), 5),
            Err(FileRefused::NotRegular)
        ));
        assert!(matches!(
            read_regular_file(Path::new("/dev/zero"), 5),
            Err(FileRefused::NotRegular)
        ));
        assert!(matches!(
            read_regular_file(&dir.path().join("missing"), 5),
            Err(FileRefused::Io(_))
        ));
    }
}

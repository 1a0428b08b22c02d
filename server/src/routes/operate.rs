//! The operator's runs on a dataset (the `operate` grant): gc, reconcile, recover, verify,
//! and its audit trail.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use mend_contract::RecoveryMode;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Shared;
use crate::access::Caller;
use crate::answers::AuditPage;
use crate::body::{JsonBody, parse};
use crate::error::{ApiError, ApiResult, engine_error, ok};
use crate::openapi::{
    AuditQuery, BadRequest, Conflict, DatasetPath, IdempotencyKey, InternalError, NotFound,
    PayloadTooLarge, RequestTimeout, Unavailable, Unprocessable, VerifyQuery,
};
use crate::writes::Writes;

use super::write::{ClientKey, admit, keyed_write, recorded_before, served, write};
use super::{AppState, server_node};

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
        engine
            .gc(&id, &request.node)
            .idempotency_key(key.as_deref())
            .await
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
            engine
                .reconcile(&id, &request.node)
                .idempotency_key(key.as_deref())
                .await
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
        engine
            .recover(&id, mode)
            .idempotency_key(key.as_deref())
            .await
    })
    .await
    .map_err(|error| engine_error(&shared, &dataset_id, error))?;
    if !replayed {
        shared.metrics.recovery(&report);
    }
    shared.supervisors.kick(&dataset_id);
    ok(&report)
}

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

/// The dataset's audit trail: who decided what and when (each recovery, gc and reconcile
/// decision, with the principal that ran it), a page at a time: the newest `limit` records
/// that pass the filters, oldest first, and where the next (older) page starts.
#[utoipa::path(
    get,
    path = "/v1/datasets/{dataset}/audit",
    tag = "recovery",
    params(DatasetPath, AuditQuery),
    responses(
        (status = 200, description = "a page of the audit records, oldest first", body = AuditPage),
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
    const KNOWN: [&str; 5] = ["principal", "kind", "since", "before", "limit"];
    if let Some(unknown) = params.keys().find(|key| !KNOWN.contains(&key.as_str())) {
        return Err(ApiError::bad_request(format!(
            "unknown query parameter {:?}; the audit takes principal=NAME, kind=K, since=MS, \
             before=CURSOR and limit=N",
            mend::validate::truncated(unknown, 64)
        )));
    }
    let whole_number = |name: &str, text: &str| {
        text.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!(
                "{name}: {:?} is not a whole number",
                mend::validate::truncated(text, 64)
            ))
        })
    };
    let limit = match params.get("limit") {
        None => DEFAULT_AUDIT_LIMIT,
        Some(text) => usize::try_from(whole_number("limit", text)?).unwrap_or(usize::MAX),
    };
    let since_ms =
        match params.get("since") {
            None => None,
            Some(text) => Some(i64::try_from(whole_number("since", text)?).map_err(|_| {
                ApiError::bad_request("since: past the largest time in milliseconds")
            })?),
        };
    let before = match params.get("before") {
        None => None,
        Some(text) => Some(
            text.parse::<mend::engine::AuditCursor>()
                .map_err(|error| engine_error(&shared, &dataset_id, error))?,
        ),
    };
    let query = mend::engine::AuditQuery {
        principal: params.get("principal").cloned(),
        kind: params.get("kind").cloned(),
        since_ms,
        before,
        limit,
    };
    let page = shared
        .engine
        .audit_page(&dataset_id, &query)
        .await
        .map_err(|error| engine_error(&shared, &dataset_id, error))?;
    ok(&AuditPage {
        records: page.entries,
        next: page.next.map(|next| next.to_string()),
    })
}

/// The audit records read when a request does not say how many.
pub const DEFAULT_AUDIT_LIMIT: usize = 100;

pub(super) fn routes() -> OpenApiRouter<Arc<Shared>> {
    OpenApiRouter::new()
        .routes(routes!(gc))
        .routes(routes!(reconcile))
        .routes(routes!(recover))
        .routes(routes!(verify))
        .routes(routes!(audit))
}

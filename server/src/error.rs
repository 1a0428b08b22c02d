//! Every error the server answers: the body of every answer that is not a success, the
//! closed set of its codes, and how a failure becomes an answer ([`ApiError`]).
//!
//! Whoever answers the failure (a handler, a limit, the router for an unknown route or
//! method, the accept loop for a connection over the cap) answers an [`ErrorBody`] whose
//! `error` is an [`ErrorCode`]: there is no other way to spell a code, so the OpenAPI
//! document's list of codes (derived from this enum) is every code the server can answer.
//! How a failure becomes an answer (its status, its `Retry-After`, one more header) is
//! [`ApiError`]'s; an engine error becomes the code the engine gives it.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mend::error::{MendError, OperationFound};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::Shared;
use crate::writes::Refused;

/// What went wrong, as a stable code a client can match on. The answer's status and
/// `certainly_not_applied` say the rest: a 4xx certainly did nothing; a 503 with
/// `certainly_not_applied: false` (`unavailable`, `transient`) may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ErrorCode {
    /// 400: a malformed body, query or id, a bad `Idempotency-Key`, a key first used for
    /// another request, a component that is not one.
    InvalidArgument,
    /// 401: no credential, or one the server does not know (a wrong or removed token).
    Unauthorized,
    /// 403: the principal is known, and its grants do not allow this request.
    Forbidden,
    /// 404: the dataset, split or operation does not exist.
    NotFound,
    /// 404: no route has this path.
    NoRoute,
    /// 405: the route does not answer this method (the `Allow` header says which it does).
    MethodNotAllowed,
    /// 408: the request body did not arrive within `serve.body_read_timeout_ms`.
    RequestTimeout,
    /// 409: the dataset exists already.
    AlreadyExists,
    /// 409: another writer won, too often; nothing happened, retry.
    Conflict,
    /// 412: the state is not what the request needs (with `ids` when splits are at fault).
    FailedPrecondition,
    /// 413: the body is over the route's cap.
    PayloadTooLarge,
    /// 422: a policy decision would break an invariant; nothing was executed.
    PolicyRejected,
    /// 422: the policy needs a capability the host or the catalog lacks.
    CapabilityMissing,
    /// 422: a swapped or replayed component cannot run here; 500: the policy trapped or hit
    /// a limit.
    PolicyFailed,
    /// 503: the dataset's supervisor found it cannot be served (with `dataset_id`, `reason`).
    DatasetUnavailable,
    /// 503: an unresolved operation is in the way (with `operation_id`); retry shortly.
    RecoveryRequired,
    /// 503: the catalog or store could not be reached; the outcome is unknown, retry.
    Unavailable,
    /// 503: a transient failure; the outcome is unknown, retry.
    Transient,
    /// 503: stored state cannot be read as mend wrote it.
    Corrupt,
    /// 503: the server is shutting down and admits no new writes.
    ShuttingDown,
    /// 503: as many writes are queued as the server or the dataset takes; retry after
    /// `Retry-After`.
    Overloaded,
    /// 503: the server has `serve.max_connections` connections open; retry.
    TooManyConnections,
    /// 429: the principal is over its request rate or its writes in flight
    /// (`serve.principal_*`); retry after `Retry-After`.
    TooManyRequests,
    /// 503 (`/readyz`): the server has not listed the catalog's datasets yet.
    Starting,
    /// 500: a failure no other code describes.
    Internal,
}

impl ErrorCode {
    /// Every code. (The OpenAPI test checks this list against the enum's variants.)
    pub(crate) const ALL: [ErrorCode; 25] = [
        Self::InvalidArgument,
        Self::Unauthorized,
        Self::Forbidden,
        Self::NotFound,
        Self::NoRoute,
        Self::MethodNotAllowed,
        Self::RequestTimeout,
        Self::AlreadyExists,
        Self::Conflict,
        Self::FailedPrecondition,
        Self::PayloadTooLarge,
        Self::PolicyRejected,
        Self::CapabilityMissing,
        Self::PolicyFailed,
        Self::DatasetUnavailable,
        Self::RecoveryRequired,
        Self::Unavailable,
        Self::Transient,
        Self::Corrupt,
        Self::ShuttingDown,
        Self::Overloaded,
        Self::TooManyConnections,
        Self::TooManyRequests,
        Self::Starting,
        Self::Internal,
    ];

    /// The code as it is written in an answer.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArgument => "invalid_argument",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not_found",
            Self::NoRoute => "no_route",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::RequestTimeout => "request_timeout",
            Self::AlreadyExists => "already_exists",
            Self::Conflict => "conflict",
            Self::FailedPrecondition => "failed_precondition",
            Self::PayloadTooLarge => "payload_too_large",
            Self::PolicyRejected => "policy_rejected",
            Self::CapabilityMissing => "capability_missing",
            Self::PolicyFailed => "policy_failed",
            Self::DatasetUnavailable => "dataset_unavailable",
            Self::RecoveryRequired => "recovery_required",
            Self::Unavailable => "unavailable",
            Self::Transient => "transient",
            Self::Corrupt => "corrupt",
            Self::ShuttingDown => "shutting_down",
            Self::Overloaded => "overloaded",
            Self::TooManyConnections => "too_many_connections",
            Self::TooManyRequests => "too_many_requests",
            Self::Starting => "starting",
            Self::Internal => "internal",
        }
    }

    /// The statuses an answer with this code has.
    pub(crate) fn statuses(self) -> &'static [StatusCode] {
        match self {
            Self::InvalidArgument => &[StatusCode::BAD_REQUEST],
            Self::Unauthorized => &[StatusCode::UNAUTHORIZED],
            Self::Forbidden => &[StatusCode::FORBIDDEN],
            Self::TooManyRequests => &[StatusCode::TOO_MANY_REQUESTS],
            Self::NotFound | Self::NoRoute => &[StatusCode::NOT_FOUND],
            Self::MethodNotAllowed => &[StatusCode::METHOD_NOT_ALLOWED],
            Self::RequestTimeout => &[StatusCode::REQUEST_TIMEOUT],
            Self::AlreadyExists | Self::Conflict => &[StatusCode::CONFLICT],
            Self::FailedPrecondition => &[StatusCode::PRECONDITION_FAILED],
            Self::PayloadTooLarge => &[StatusCode::PAYLOAD_TOO_LARGE],
            Self::PolicyRejected | Self::CapabilityMissing => &[StatusCode::UNPROCESSABLE_ENTITY],
            Self::PolicyFailed => &[
                StatusCode::UNPROCESSABLE_ENTITY,
                StatusCode::INTERNAL_SERVER_ERROR,
            ],
            Self::DatasetUnavailable
            | Self::RecoveryRequired
            | Self::Unavailable
            | Self::Transient
            | Self::Corrupt
            | Self::ShuttingDown
            | Self::Overloaded
            | Self::TooManyConnections
            | Self::Starting => &[StatusCode::SERVICE_UNAVAILABLE],
            Self::Internal => &[StatusCode::INTERNAL_SERVER_ERROR],
        }
    }

    /// The code of a failure that came with only a status (the router's 405, an extractor's
    /// rejection, a layer's text answer).
    pub(crate) fn for_status(status: StatusCode) -> Self {
        match status {
            StatusCode::NOT_FOUND => Self::NotFound,
            StatusCode::UNAUTHORIZED => Self::Unauthorized,
            StatusCode::FORBIDDEN => Self::Forbidden,
            StatusCode::TOO_MANY_REQUESTS => Self::TooManyRequests,
            StatusCode::METHOD_NOT_ALLOWED => Self::MethodNotAllowed,
            StatusCode::REQUEST_TIMEOUT => Self::RequestTimeout,
            StatusCode::PAYLOAD_TOO_LARGE => Self::PayloadTooLarge,
            status if status.is_client_error() => Self::InvalidArgument,
            _ => Self::Internal,
        }
    }
}

/// An answer that is not a success. Only `error`, `message` and `certainly_not_applied` are
/// always there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ErrorBody {
    pub(crate) error: ErrorCode,
    /// What happened, on one line, and what to do next when there is something to do.
    pub(crate) message: String,
    /// True when the request certainly took no effect; false when it may have (the outcome
    /// is unknown: retrying is safe).
    pub(crate) certainly_not_applied: bool,
    /// `failed_precondition`: the splits at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ids: Option<Vec<String>>,
    /// `failed_precondition` of a step of an operation (publish, abort, upload, heartbeat,
    /// begin) refused because of how the operation stands: `published`, `confirmed` (it
    /// publishes unless another operation publishes from the same checkpoint positions first;
    /// its publish answers which) or `ended` (it never publishes). A step that lost a race
    /// answers here what the winner made of the operation; a client reads this, not the
    /// message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "published")]
    pub(crate) operation: Option<OperationFound>,
    /// `recovery_required`: the unresolved operation in the way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) operation_id: Option<String>,
    /// `dataset_unavailable`: the dataset that cannot be served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) dataset_id: Option<String>,
    /// `dataset_unavailable`: why its supervisor cannot serve it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// What to do about it, where there is something to say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) hint: Option<String>,
}

impl ErrorBody {
    /// `code` and `message`, certainly not applied, nothing else said.
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            error: code,
            message: message.into(),
            certainly_not_applied: true,
            ids: None,
            operation: None,
            operation_id: None,
            dataset_id: None,
            reason: None,
            hint: None,
        }
    }
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
    /// The answer saying whether the request certainly did nothing.
    pub(crate) fn certainly_not_applied(mut self, certainly: bool) -> Self {
        self.body.certainly_not_applied = certainly;
        self
    }

    pub(crate) fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
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

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
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
    pub(crate) fn refused(refused: Refused) -> Self {
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
    pub(crate) fn refused_by_the_rules(&self) -> bool {
        matches!(
            self.status,
            StatusCode::PRECONDITION_FAILED | StatusCode::UNPROCESSABLE_ENTITY
        )
    }

    /// The dataset cannot be served now; others can.
    pub(crate) fn dataset_unavailable(dataset_id: &str, reason: &str) -> Self {
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
pub(crate) fn status_and_code(error: &MendError) -> (StatusCode, ErrorCode) {
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
            MendError::FailedPrecondition { ids, operation, .. } => {
                if !ids.is_empty() {
                    body.ids = Some(ids.clone());
                }
                body.operation = *operation;
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

pub(crate) type ApiResult = Result<Response, ApiError>;

pub(crate) fn json_body(value: &impl serde::Serialize) -> Response {
    let text = serde_json::to_string(value).unwrap_or_else(|error| {
        // The request may have taken effect: only its answer could not be written.
        let mut body = ErrorBody::new(ErrorCode::Internal, format!("encode the answer: {error}"));
        body.certainly_not_applied = false;
        serde_json::to_string(&body).unwrap_or_default()
    });
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}

pub(crate) fn ok(value: &impl serde::Serialize) -> ApiResult {
    Ok((StatusCode::OK, json_body(value)).into_response())
}

/// Maps an engine error, waking the dataset's supervisor when the error is its business.
pub(crate) fn engine_error(shared: &Shared, dataset_id: &str, error: MendError) -> ApiError {
    if matches!(
        error,
        MendError::RecoveryRequired { .. } | MendError::Corrupt { .. }
    ) {
        shared.supervisors.kick(dataset_id);
    }
    ApiError::from(error)
}

/// How long a client is told to wait before it retries a refusal for load.
const RETRY_AFTER_SECS: u64 = 1;

#[cfg(test)]
mod tests {
    use mend::error::{EntityKind, PolicyError};

    use super::*;

    #[test]
    fn each_code_is_written_as_its_name() {
        for code in ErrorCode::ALL {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
            let parsed: ErrorCode = serde_json::from_value(code.as_str().into()).unwrap();
            assert_eq!(parsed, code);
            assert!(!code.statuses().is_empty(), "{code:?}");
        }
        println!("errors: {} codes", ErrorCode::ALL.len());
    }

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
                operation: None,
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

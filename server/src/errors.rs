//! The body of every answer that is not a success, and the closed set of its codes.
//!
//! Whoever answers the failure (a handler, a limit, the router for an unknown route or
//! method, the accept loop for a connection over the cap) answers an [`ErrorBody`] whose
//! `error` is an [`ErrorCode`]: there is no other way to spell a code, so the OpenAPI
//! document's list of codes (derived from this enum) is every code the server can answer.
//! How a failure becomes an answer (its status, its `Retry-After`) is `api::ApiError`'s.

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
            operation_id: None,
            dataset_id: None,
            reason: None,
            hint: None,
        }
    }
}

#[cfg(test)]
mod tests {
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
}

//! Who a request is from, and whether it may do what it asks: one layer (`check`) between
//! the router and every handler, deciding from one table (`ROUTES`) before a handler runs
//! or a body is read.
//!
//! - **Who.** `Authorization: Bearer SECRET` names a principal of the tokens file
//!   (`serve.tokens_file`, [`crate::auth`]) or, with `serve.admin_token`'s secret, the
//!   principal [`ADMIN_TOKEN_PRINCIPAL`], which holds `admin`. A server with no tokens file
//!   also lets a request without a credential in, as [`ANONYMOUS`] (every dataset, no
//!   admin), which only a loopback listen address (or `serve.insecure`) allows: see
//!   [`crate::ServeError::Unprotected`].
//! - **401 or 403.** No credential where one is needed, a malformed one, or a secret the
//!   server does not know is 401 (with `WWW-Authenticate: Bearer`); a known principal whose
//!   grants do not allow the route on the dataset its path names is 403. Both are decided
//!   from the path alone, before any catalog read, so neither says whether the dataset
//!   exists.
//! - **What.** Each route needs one `Need`: nothing (probes, the API's description), any
//!   principal (answers filtered to what it may read), an action on the path's dataset, an
//!   action on every dataset, the operation's own principal, or `admin`. A route the table
//!   does not list is refused (500) rather than served open; the access matrix test fails
//!   when one is added without its entry.
//! - **Operations belong to their principal.** A begin claims its operation id for the
//!   principal (`claim_operation`, a put-if-absent record `op:ID:owner` beside the
//!   operation's own step records); every later step, by anyone but that principal or an
//!   admin, answers 404 as if there were no such operation.
//!
//! The caller is put in the request's extensions as a `Caller` for handlers that decide
//! more (list filtering, a body's dataset, exclusive recovery, idempotency keys), and its
//! name in the request's log span.

use std::sync::Arc;

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{MatchedPath, RawPathParams, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Shared;
use super::connections::ClientCertificate;
use super::guessing::ClientAddress;
use super::metrics::Shed;
use super::quotas::{OverLimit, WriteSlot};
use crate::auth::{Action, Grant, Pattern, Principal, TokensFile, constant_time_eq};
use crate::error::ApiError;
use crate::error::ErrorCode;
use mend::catalog::RecordedRequest;
use mend::error::MendError;

/// The principal of a request without a credential, on a server without a tokens file.
pub const ANONYMOUS: &str = crate::auth::RESERVED_PRINCIPALS[0];
/// The principal of `serve.admin_token`'s secret.
pub const ADMIN_TOKEN_PRINCIPAL: &str = crate::auth::RESERVED_PRINCIPALS[1];

/// What a route needs of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Nothing: the probes and the API's description.
    Public,
    /// Any principal; the answer lists only the datasets it may read.
    AnyPrincipal,
    /// The action on the dataset the path names.
    Dataset(Action),
    /// The action on every dataset (a grant on `*`): answers about the whole server.
    EveryDataset(Action),
    /// The action on some dataset (a grant of it on any pattern), where the dataset is named
    /// in the body: decided before the body is read, so that a principal that holds no such
    /// grant is refused before it sends a byte; the handler then asks for the action on the
    /// dataset the body names.
    SomeDataset(Action),
    /// `write` on the path's dataset, and to be the principal that began the path's
    /// operation (or an admin).
    OwnOperation,
    /// `admin`.
    Admin,
}

impl Need {
    /// What the need is, in the words of docs/src/server.md (Security) and the OpenAPI document.
    pub(crate) fn describe(self) -> String {
        match self {
            Need::Public => "none".into(),
            Need::AnyPrincipal => {
                "any principal (answers list only the datasets it may read)".into()
            }
            Need::Dataset(action) => format!("{action} on the dataset"),
            Need::EveryDataset(action) => format!("{action} on every dataset ({action}:*)"),
            Need::SomeDataset(action) => {
                format!("{action} on some dataset, then on the dataset the body names")
            }
            Need::OwnOperation => {
                "write on the dataset, and to be the principal that began the operation (or admin)"
                    .into()
            }
            Need::Admin => "admin".into(),
        }
    }
}

/// Every route's need: method, path (as the router and the OpenAPI document write it) and
/// need. HEAD is GET's. Kept in the order of the OpenAPI document's tags.
#[rustfmt::skip]
pub(crate) const ROUTES: &[(&str, &str, Need)] = &[
    ("GET", "/healthz", Need::Public),
    ("GET", "/readyz", Need::Public),
    ("GET", "/v1/openapi.json", Need::Public),
    ("GET", "/metrics", Need::EveryDataset(Action::Read)),
    ("GET", "/v1/fleet", Need::EveryDataset(Action::Operate)),
    ("GET", "/v1/status", Need::AnyPrincipal),
    ("GET", "/v1/datasets", Need::AnyPrincipal),
    // The dataset is in the body: a principal without write on any dataset is refused before
    // the body is read, and the handler asks for write on the dataset it names.
    ("POST", "/v1/datasets", Need::SomeDataset(Action::Write)),
    ("GET", "/v1/datasets/{dataset}", Need::Dataset(Action::Read)),
    ("POST", "/v1/datasets/{dataset}/config", Need::Dataset(Action::Operate)),
    ("POST", "/v1/datasets/{dataset}/fence", Need::Dataset(Action::Operate)),
    ("POST", "/v1/datasets/{dataset}/stage", Need::Dataset(Action::Write)),
    ("POST", "/v1/datasets/{dataset}/publish", Need::Dataset(Action::Write)),
    ("POST", "/v1/datasets/{dataset}/mark", Need::Dataset(Action::Write)),
    ("POST", "/v1/datasets/{dataset}/delete", Need::Dataset(Action::Write)),
    ("GET", "/v1/datasets/{dataset}/splits", Need::Dataset(Action::Read)),
    ("POST", "/v1/datasets/{dataset}/gc", Need::Dataset(Action::Operate)),
    ("POST", "/v1/datasets/{dataset}/reconcile", Need::Dataset(Action::Operate)),
    // Exclusive recovery also needs admin: the handler asks, having read the mode.
    ("POST", "/v1/datasets/{dataset}/recover", Need::Dataset(Action::Operate)),
    ("GET", "/v1/datasets/{dataset}/verify", Need::Dataset(Action::Read)),
    // Who did what: for those who operate the dataset.
    ("GET", "/v1/datasets/{dataset}/audit", Need::Dataset(Action::Operate)),
    ("POST", "/v1/datasets/{dataset}/operations", Need::Dataset(Action::Write)),
    ("GET", "/v1/datasets/{dataset}/operations/{operation}", Need::OwnOperation),
    ("PUT", "/v1/datasets/{dataset}/operations/{operation}/splits/{split}", Need::OwnOperation),
    ("POST", "/v1/datasets/{dataset}/operations/{operation}/upload-urls", Need::OwnOperation),
    ("POST", "/v1/datasets/{dataset}/operations/{operation}/heartbeat", Need::OwnOperation),
    ("POST", "/v1/datasets/{dataset}/operations/{operation}/publish", Need::OwnOperation),
    ("POST", "/v1/datasets/{dataset}/operations/{operation}/abort", Need::OwnOperation),
    ("GET", "/v1/policy", Need::AnyPrincipal),
    ("POST", "/v1/policy/swap", Need::Admin),
    ("POST", "/v1/policy/replay", Need::Admin),
    ("POST", "/v1/policy/rollback", Need::Admin),
];

/// The need of `method` on the route `path`; `None` when the table has no entry.
pub(crate) fn need_of(method: &Method, path: &str) -> Option<Need> {
    route_of(method, path).map(|(_, _, need)| *need)
}

/// The table's entry of `method` on the route `path`.
fn route_of(method: &Method, path: &str) -> Option<&'static (&'static str, &'static str, Need)> {
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    ROUTES.iter().find(|(m, p, _)| *m == method && *p == path)
}

/// Whether the table lists `path` for some method: a method it does not list is then the
/// router's 405, not a refusal here.
fn listed_path(path: &str) -> bool {
    ROUTES.iter().any(|(_, p, _)| *p == path)
}

/// What the server knows of the request being answered, for the code that answers it: set
/// by [`check`] around the handler, read where a handler's shared helpers need it (the
/// engine acting for the caller, the write slot a write holds).
#[derive(Debug, Clone)]
pub(crate) struct Answering {
    pub(crate) caller: Caller,
    /// Its place among its principal's writes in flight (`quotas`), if it is a write.
    pub(crate) slot: Option<Arc<WriteSlot>>,
}

tokio::task_local! {
    static ANSWERING: Answering;
}

/// The request being answered on this task, if any (none on a supervisor's task, nor on an
/// admitted write's own task, which takes what it needs when it is admitted).
pub(crate) fn answering() -> Option<Answering> {
    ANSWERING.try_with(Clone::clone).ok()
}

/// Who may make requests: the credentials a server knows, read once at start (the tokens
/// file is read again when it changes).
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// `serve.tokens_file`; `None` lets a request without a credential in, as [`ANONYMOUS`].
    pub tokens_file: Option<Arc<TokensFile>>,
    /// `serve.admin_token`: the secret of [`ADMIN_TOKEN_PRINCIPAL`].
    pub admin_token: Option<String>,
}

impl Credentials {
    /// Whether a request without a credential is let in.
    pub fn anonymous_allowed(&self) -> bool {
        self.tokens_file.is_none()
    }

    /// The principal a request's headers name, or its client certificate when they name
    /// none; or why it is refused (401).
    pub(crate) fn authenticate(
        &self,
        headers: &HeaderMap,
        certificate: Option<&ClientCertificate>,
    ) -> Result<Caller, ApiError> {
        // Two headers would be read one way here and perhaps another by a proxy in front:
        // who is asking must not depend on which one a reader takes.
        if headers
            .get_all(header::AUTHORIZATION)
            .iter()
            .nth(1)
            .is_some()
        {
            return Err(ApiError::bad_request(
                "a request carries one Authorization header, not several; nothing happened",
            ));
        }
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            // Without a tokens file no certificate names a principal: the request is
            // anonymous, as one without a certificate.
            if let (Some(ClientCertificate(certificate)), Some(file)) =
                (certificate, &self.tokens_file)
            {
                let tokens = file.current();
                return match tokens.authenticate_certificate(certificate) {
                    Some(principal) => Ok(Caller(Arc::new(principal.clone()))),
                    None => Err(unauthenticated(
                        "the client certificate names no principal of the tokens file (a \
                         cert:NAME line with a DNS name the certificate holds); send \
                         Authorization: Bearer TOKEN instead. Nothing happened",
                    )),
                };
            }
            if self.anonymous_allowed() {
                return Ok(Caller::anonymous());
            }
            return Err(unauthenticated(
                "this request needs a token: send Authorization: Bearer TOKEN (mend token new \
                 makes one); nothing happened",
            ));
        };
        let secret = value
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|secret| !secret.is_empty());
        let Some(secret) = secret else {
            return Err(unauthenticated(
                "the Authorization header must be Bearer TOKEN; nothing happened",
            ));
        };
        // Both are compared, whatever the first found: the time taken does not say which
        // kind of secret was sent.
        let admin = self
            .admin_token
            .as_deref()
            .is_some_and(|admin| constant_time_eq(secret.as_bytes(), admin.as_bytes()));
        let tokens = self.tokens_file.as_ref().map(|file| file.current());
        let principal = tokens
            .as_ref()
            .and_then(|tokens| tokens.authenticate(secret));
        if admin {
            return Ok(Caller::admin_token());
        }
        match principal {
            Some(principal) => Ok(Caller(Arc::new(principal.clone()))),
            None if self.tokens_file.is_none() && self.admin_token.is_none() => {
                Err(unauthenticated(
                    "this server has no tokens file and no admin token, so it knows no token: \
                     start it with serve.tokens_file or serve.admin_token \
                     (MEND_SERVE_ADMIN_TOKEN); nothing happened",
                ))
            }
            None => Err(unauthenticated(
                "the token is not one this server knows (wrong, or removed from the tokens \
                 file); nothing happened",
            )),
        }
    }
}

/// The principal a request is from.
#[derive(Debug, Clone)]
pub(crate) struct Caller(Arc<Principal>);

impl Caller {
    fn anonymous() -> Self {
        let every = |action| Grant::On(action, Pattern::Prefix(String::new()));
        Self(Arc::new(Principal {
            name: ANONYMOUS.into(),
            grants: vec![
                every(Action::Read),
                every(Action::Write),
                every(Action::Operate),
            ],
        }))
    }

    fn admin_token() -> Self {
        Self(Arc::new(Principal {
            name: ADMIN_TOKEN_PRINCIPAL.into(),
            grants: vec![Grant::Admin],
        }))
    }

    /// The principal's name, as logs and audit records give it.
    pub(crate) fn name(&self) -> &str {
        &self.0.name
    }

    /// Whether it may do `action` on `dataset_id`.
    pub(crate) fn may(&self, action: Action, dataset_id: &str) -> bool {
        self.0.may(action, Some(dataset_id))
    }

    pub(crate) fn is_admin(&self) -> bool {
        self.0.is_admin()
    }

    /// Whether it may do `action` on every dataset, present and future (`action:*`, or
    /// admin): what a route over all datasets needs.
    pub(crate) fn may_every_dataset(&self, action: Action) -> bool {
        self.0.grants.iter().any(|grant| match grant {
            Grant::Admin => true,
            Grant::On(granted, Pattern::Prefix(prefix)) => *granted == action && prefix.is_empty(),
            Grant::On(_, Pattern::Exact(_)) => false,
        })
    }

    /// Refuses (403) unless it may do `action` on `dataset_id`.
    pub(crate) fn require(&self, action: Action, dataset_id: &str) -> Result<(), ApiError> {
        if self.may(action, dataset_id) {
            return Ok(());
        }
        Err(self.refusal(format!(
            "principal {} may not {action} dataset {}: it holds no grant of {action} on a \
             pattern the id matches",
            self.name(),
            quoted(dataset_id)
        )))
    }

    /// Refuses (403) unless it holds `admin`.
    pub(crate) fn require_admin(&self, what: &str) -> Result<(), ApiError> {
        if self.is_admin() {
            return Ok(());
        }
        Err(self.refusal(format!(
            "{what} needs admin, which principal {} does not hold",
            self.name()
        )))
    }

    /// 403 for a principal whose grants do not allow a request; 401 for [`ANONYMOUS`],
    /// which a credential would get further.
    fn refusal(&self, message: String) -> ApiError {
        if self.name() == ANONYMOUS {
            return unauthenticated(&format!(
                "{message}: send Authorization: Bearer TOKEN of a principal that may. Nothing \
                 happened"
            ));
        }
        forbidden(format!("{message}; nothing happened"))
    }

    /// The key a client's `Idempotency-Key` is recorded under: its principal's name and the
    /// key, so that one principal's key never answers another's request. The anonymous
    /// principal's keys are recorded as they are (as before principals existed).
    pub(crate) fn recorded_key(&self, client_key: String) -> String {
        if self.name() == ANONYMOUS {
            client_key
        } else {
            format!("{}/{client_key}", self.name())
        }
    }
}

/// The record that names an operation's principal.
fn owner_key(operation_id: &str) -> String {
    format!("op:{operation_id}:owner")
}

/// Claims `operation_id` in `dataset_id` for `caller` (put-if-absent, so of two racing begins
/// one principal wins): `Ok` if it is the caller's now, 409 if another principal's.
pub(crate) async fn claim_operation(
    shared: &Shared,
    caller: &Caller,
    dataset_id: &str,
    operation_id: &str,
) -> Result<(), ApiError> {
    let key = mend::catalog::RequestKey::new(owner_key(operation_id), &operation_id);
    let record = RecordedRequest::new(
        &key,
        &serde_json::json!({ "principal": caller.name() }),
        shared.engine.now_ms(),
    );
    let kept = shared
        .engine
        .catalog()
        .record_request(dataset_id, &record)
        .await
        .map_err(|error| crate::error::engine_error(shared, dataset_id, error))?;
    if owner_named(&kept) == Some(caller.name()) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        ErrorCode::Conflict,
        format!(
            "operation id {operation_id} in dataset {dataset_id} was begun by another \
             principal; choose another operation id. Nothing happened"
        ),
    ))
}

fn owner_named(record: &RecordedRequest) -> Option<&str> {
    record
        .result
        .get("principal")
        .and_then(|name| name.as_str())
}

/// Refuses (404) a step of an operation `caller` did not begin, unless it is an admin.
async fn own_operation(
    shared: &Shared,
    caller: &Caller,
    dataset_id: &str,
    operation_id: &str,
) -> Result<(), ApiError> {
    if caller.is_admin() {
        return Ok(());
    }
    let owner = match shared
        .engine
        .catalog()
        .recorded_request(dataset_id, &owner_key(operation_id))
        .await
    {
        Ok(record) => record,
        Err(MendError::NotFound { .. }) => None,
        Err(error) => return Err(crate::error::engine_error(shared, dataset_id, error)),
    };
    if owner.as_ref().and_then(owner_named) == Some(caller.name()) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        format!(
            "dataset {} has no operation {} begun by principal {}",
            quoted(dataset_id),
            quoted(operation_id),
            caller.name()
        ),
    ))
}

/// The layer: authenticates, decides from [`ROUTES`], and passes the [`Caller`] on.
pub(crate) async fn check(
    State(shared): State<Arc<Shared>>,
    params: Result<RawPathParams, RawPathParamsRejection>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(route) = request.extensions().get::<MatchedPath>().cloned() else {
        // No route: the router's 404, which says nothing of any dataset.
        return next.run(request).await;
    };
    let Some(&(_, _, need)) = route_of(request.method(), route.as_str()) else {
        if listed_path(route.as_str()) {
            // A method the route does not answer: the router's 405.
            return next.run(request).await;
        }
        tracing::error!(route = route.as_str(), "a route without an access rule");
        return ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            format!(
                "route {} has no access rule, so it is served to nobody",
                route.as_str()
            ),
        )
        .into_response();
    };
    if need == Need::Public {
        return next.run(request).await;
    }
    let address = request
        .extensions()
        .get::<ClientAddress>()
        .map(|ClientAddress(address)| *address);
    let now = std::time::Instant::now();
    if let Some(wait) = address.and_then(|address| shared.guessing.limited(address, now)) {
        shared.metrics.shed(Shed::FailedAuthentications);
        return too_many_failures(wait).into_response();
    }
    let caller = match authenticated_caller(&shared, &request, address, now) {
        Ok(caller) => caller,
        Err(refusal) => return refusal.into_response(),
    };
    tracing::Span::current().record("principal", tracing::field::display(caller.name()));
    let slot = if caller.name() == ANONYMOUS {
        None
    } else {
        let write = !matches!(*request.method(), Method::GET | Method::HEAD);
        match shared
            .quotas
            .admit(caller.name(), write, std::time::Instant::now())
        {
            Ok(slot) => slot,
            Err(over) => {
                shared.metrics.shed(match over {
                    OverLimit::Rate { .. } => Shed::PrincipalRate,
                    OverLimit::Writes { .. } => Shed::PrincipalWrites,
                });
                return over_limit(&caller, over).into_response();
            }
        }
    };
    let param = |name: &str| {
        params
            .as_ref()
            .ok()
            .and_then(|params| params.iter().find(|(key, _)| *key == name))
            .map(|(_, value)| value.to_owned())
    };
    let dataset_id = param("dataset").unwrap_or_default();
    let operation_id = param("operation").unwrap_or_default();
    let decided = decide(
        &shared,
        &caller,
        need,
        &format!("{} {}", request.method(), route.as_str()),
        &dataset_id,
        &operation_id,
    )
    .await;
    if let Err(refusal) = decided {
        return refusal.into_response();
    }
    let answering = Answering {
        caller: caller.clone(),
        slot,
    };
    request.extensions_mut().insert(caller);
    ANSWERING.scope(answering, next.run(request)).await
}

/// Whether `caller` may make the request `what` (method and route), which needs `need`, on
/// `dataset_id` (and, for a writer's own operation, `operation_id`).
async fn decide(
    shared: &Shared,
    caller: &Caller,
    need: Need,
    what: &str,
    dataset_id: &str,
    operation_id: &str,
) -> Result<(), ApiError> {
    match need {
        Need::Public | Need::AnyPrincipal => Ok(()),
        Need::SomeDataset(action) => {
            if caller.0.may(action, None) {
                Ok(())
            } else {
                Err(caller.refusal(format!(
                    "{what} needs {action} on some dataset, and principal {} holds no {action} \
                     grant",
                    caller.name()
                )))
            }
        }
        Need::Dataset(action) => caller.require(action, dataset_id),
        Need::EveryDataset(action) => require_every_dataset(caller, action, what),
        Need::Admin => caller.require_admin(what),
        Need::OwnOperation => match caller.require(Action::Write, dataset_id) {
            Ok(()) => own_operation(shared, caller, dataset_id, operation_id).await,
            Err(refusal) => Err(refusal),
        },
    }
}

/// The caller a request's credentials name; a refusal otherwise, counted as a failed
/// authentication of `address` when a credential was presented (no credential guesses
/// nothing).
fn authenticated_caller(
    shared: &Shared,
    request: &Request,
    address: Option<std::net::IpAddr>,
    now: std::time::Instant,
) -> Result<Caller, ApiError> {
    shared
        .credentials
        .authenticate(request.headers(), request.extensions().get())
        .inspect_err(|_| {
            let guessed = request.headers().contains_key(header::AUTHORIZATION)
                || request.extensions().get::<ClientCertificate>().is_some();
            if guessed {
                shared.metrics.authentication_failed();
                if let Some(address) = address
                    && let Some(warning) = shared.guessing.failed(address, now)
                {
                    tracing::warn!(
                        failures = warning.failures,
                        latest_from = %warning.latest_from,
                        "failed authentications: credentials that name no principal \
                         (counted in mend_authentication_failures_total; an address is \
                         answered 429 past {} at once)",
                        crate::guessing::BURST
                    );
                }
            }
        })
}

/// Refuses a caller without `action` on every dataset (`action:*`, or admin): what a route
/// over all datasets (`what`) needs.
fn require_every_dataset(caller: &Caller, action: Action, what: &str) -> Result<(), ApiError> {
    if caller.may_every_dataset(action) {
        return Ok(());
    }
    Err(caller.refusal(format!(
        "{what} needs {action} on every dataset ({action}:*), which principal {} does not hold",
        caller.name()
    )))
}

/// 429, with how long to wait.
fn over_limit(caller: &Caller, over: OverLimit) -> ApiError {
    let (message, retry_after) = match over {
        OverLimit::Rate { limit, retry_after } => (
            format!(
                "principal {} is over its {limit} requests per second \
                 (serve.principal_requests_per_second); nothing happened: retry after a pause",
                caller.name()
            ),
            retry_after,
        ),
        OverLimit::Writes { limit } => (
            format!(
                "principal {} has {limit} writes in flight already (serve.principal_max_writes); \
                 nothing happened: retry when one ends",
                caller.name()
            ),
            std::time::Duration::from_secs(1),
        ),
    };
    // Whole seconds, rounded up: a client that waits that long passes.
    let seconds = retry_after.as_millis().div_ceil(1000).max(1) as u64;
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::TooManyRequests,
        message,
    )
    .with_retry_after(seconds)
}

/// 429 for an address past its failed authentications, with how long to wait.
fn too_many_failures(wait: std::time::Duration) -> ApiError {
    let seconds = wait.as_millis().div_ceil(1000).max(1) as u64;
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::TooManyRequests,
        format!(
            "too many failed authentications from this address ({} at once, then {} a \
             second); nothing happened, and no credential was checked: retry after {seconds} s",
            crate::guessing::BURST,
            crate::guessing::REFILL_PER_SECOND
        ),
    )
    .with_retry_after(seconds)
}

/// 401, with the challenge RFC 6750 asks for.
fn unauthenticated(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message)
        .with_header(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))
}

fn forbidden(message: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, ErrorCode::Forbidden, message)
}

/// An id from a path, as it is if it is one, else quoted and cut short.
fn quoted(id: &str) -> String {
    if mend::validate::split_id(id).is_ok() {
        id.to_owned()
    } else {
        format!(
            "{:?}",
            mend::validate::truncated(id, mend::validate::QUOTED_CHARS)
        )
    }
}

#[cfg(test)]
mod tests;

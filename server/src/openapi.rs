//! The server's OpenAPI 3.1 document, generated from the code: served at
//! `GET /v1/openapi.json` and committed as `server/openapi.json`.
//!
//! **How it stays true.** Every route is declared once, by a handler's `#[utoipa::path]`
//! (method, path, parameters, body, every answer), and registered on the router from that
//! declaration with utoipa-axum's `routes!` (each `routes()` of [`crate::routes`]): the router serves a route at the
//! path and method its documentation names, and a route registered that way cannot be left
//! out of the document. Request bodies are the server's own `JsonBody` types and answers the
//! engine's results and reports, each deriving `utoipa::ToSchema` from the same serde
//! attributes that read and write it (`rename_all`, `tag`/`content`, `flatten`, `default`,
//! `deny_unknown_fields`); the library's types derive it behind the `openapi` feature of `mend`
//! and `mend-contract`, off by default, so that an embedder without this server compiles no
//! utoipa. Every failure answers [`ErrorBody`] with an [`ErrorCode`], the closed set of codes.
//! The tests below hold the rest: the router's own route list (paths and methods, read from
//! the router, not from a list kept by hand) is the document's; every answer a route gives to
//! a request of each kind is documented for it; every code is in the document; every `$ref`
//! resolves; the committed file is what the code generates.
//!
//! **Why utoipa and utoipa-axum.** utoipa (6) is the OpenAPI generator the axum ecosystem
//! uses: compile-time derives, no runtime reflection, OpenAPI 3.1 out. utoipa-axum (0.3) adds
//! the one thing that keeps routes and documents from drifting, `OpenApiRouter`. The
//! alternatives: aide infers bodies from extractor types, but these handlers take raw bytes
//! and parse them with [`JsonBody`](super::body::JsonBody) for messages that name the field at
//! fault, so it would infer nothing; okapi and paperclip serve other frameworks; a hand-kept
//! JSON file drifts on the first change.
//!
//! **Refreshing the committed file.** `MEND_UPDATE_OPENAPI=1 cargo test -p mend-server
//! openapi` rewrites `server/openapi.json`; without the variable, the test fails when the file
//! differs from what the code generates and says so.

use axum::http::StatusCode;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, HeaderBuilder, ObjectBuilder, OpenApi as Document, Ref, RefOr, Required,
    Response, ResponseBuilder, Type,
};
use utoipa::{IntoParams, Modify, OpenApi, ToResponse};

use super::access;
use crate::error::{ErrorBody, ErrorCode};

/// Gives each operation what [`access::ROUTES`] says of it: its `security` (the bearer
/// token, or none), its required grant as `x-mend-grant`, and the 401 and 403 answers of a
/// route that needs a principal. A route the table does not list gets nothing, and the access
/// matrix test fails on it.
pub(crate) fn declare_access(document: &mut Document) {
    for (path, item) in document.paths.paths.iter_mut() {
        let operations = [
            ("GET", &mut item.get),
            ("PUT", &mut item.put),
            ("POST", &mut item.post),
            ("DELETE", &mut item.delete),
        ];
        for (method, operation) in operations {
            let Some(operation) = operation.as_mut() else {
                continue;
            };
            let method = axum::http::Method::from_bytes(method.as_bytes()).expect("a method");
            let Some(need) = access::need_of(&method, path) else {
                continue;
            };
            operation
                .extensions
                .get_or_insert_with(Default::default)
                .insert(
                    "x-mend-grant".to_owned(),
                    serde_json::Value::String(need.describe()),
                );
            if need == access::Need::Public {
                operation.security = Some(vec![SecurityRequirement::default()]);
                continue;
            }
            operation.security = Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]);
            for (status, name) in [
                ("401", "Unauthorized"),
                ("403", "Forbidden"),
                ("429", "TooManyRequests"),
            ] {
                operation
                    .responses
                    .responses
                    .insert(status.to_owned(), Ref::from_response_name(name).into());
            }
        }
    }
}

/// The document's frame: what the routes do not say themselves.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "mend serve",
        description = "mend's catalog operations and policy administration over HTTP. Bodies \
            are JSON objects (an empty body is `{}`). Every failure, whoever answers it, has an \
            `ErrorBody`; a route answers 404 `no_route` for a path no route has, 405 \
            `method_not_allowed` (with `Allow`) for a method it does not answer, and HEAD \
            wherever it answers GET. A request sent again under the same `Idempotency-Key` \
            answers what it answered the first time. See docs/src/http-api.md.",
    ),
    components(
        schemas(ErrorBody, ErrorCode),
        responses(
            BadRequest,
            Unauthorized,
            Forbidden,
            TooManyRequests,
            NotFound,
            MethodNotAllowed,
            RequestTimeout,
            Conflict,
            PreconditionFailed,
            PayloadTooLarge,
            Unprocessable,
            InternalError,
            Unavailable
        ),
    ),
    modifiers(&BearerToken),
    tags(
        (name = "health", description = "liveness, readiness, status, metrics, this document"),
        (name = "datasets", description = "datasets: create, show, configure, fence"),
        (name = "splits", description = "stage, publish, mark, delete, list"),
        (name = "operations", description = "the crash-safe commit protocol for writers in other processes"),
        (name = "recovery", description = "gc, reconcile, recovery sweeps, verify"),
        (name = "policy", description = "the active policy and its administration"),
    ),
)]
pub(crate) struct Frame;

/// A principal's secret, `Authorization: Bearer SECRET` (see `access`).
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, document: &mut Document) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "a principal's secret: one whose SHA-256 the tokens file lists (serve.tokens_file; \
                 `mend token new` makes one), or the admin token (serve.admin_token), whose \
                 principal `admin-token` holds admin. A server without a tokens file also \
                 serves a request without a credential, as the principal `anonymous` (read, \
                 write and operate on every dataset; not admin). Each operation's \
                 `x-mend-grant` says the grant it needs",
            ))
            .build();
        document
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(BEARER, SecurityScheme::Http(scheme));
    }
}

/// The security scheme's name.
const BEARER: &str = "bearer";

/// An error answer of `status`: the [`ErrorBody`], described with the codes it can carry.
fn error_response(status: StatusCode, what: &str) -> Response {
    let codes: Vec<String> = ErrorCode::ALL
        .iter()
        .filter(|code| code.statuses().contains(&status))
        .map(|code| format!("`{}`", code.as_str()))
        .collect();
    let mut response = ResponseBuilder::new()
        .description(format!("{what}: {}", codes.join(", ")))
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        );
    if status == StatusCode::METHOD_NOT_ALLOWED {
        response = response.header(
            "Allow",
            HeaderBuilder::new()
                .schema(Some(string()))
                .description(Some("the methods the route answers"))
                .build(),
        );
    }
    if status == StatusCode::UNAUTHORIZED {
        response = response.header(
            "WWW-Authenticate",
            HeaderBuilder::new()
                .schema(Some(string()))
                .description(Some("`Bearer`: send Authorization: Bearer SECRET"))
                .build(),
        );
    }
    if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS {
        response = response.header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(Some(ObjectBuilder::new().schema_type(Type::Integer)))
                .description(Some(
                    "seconds to wait before retrying, on a refusal for load or for work in the way",
                ))
                .build(),
        );
    }
    response.build()
}

/// One reusable error answer per status, named in `responses(...)` as
/// `(status = 400, response = BadRequest)`.
macro_rules! error_responses {
    ($($name:ident = $status:ident, $what:literal;)*) => {$(
        #[doc = concat!("The ", $what, " answer.")]
        pub(crate) enum $name {}

        impl<'r> ToResponse<'r> for $name {
            fn response() -> (&'r str, RefOr<Response>) {
                (stringify!($name), error_response(StatusCode::$status, $what).into())
            }
        }
    )*};
}

error_responses! {
    BadRequest = BAD_REQUEST, "malformed request";
    Unauthorized = UNAUTHORIZED, "no credential, or one the server does not know; nothing happened";
    Forbidden = FORBIDDEN, "the principal's grants do not allow this request; nothing happened";
    TooManyRequests = TOO_MANY_REQUESTS, "the principal is over its request rate or its writes in flight; nothing happened";
    NotFound = NOT_FOUND, "not found";
    MethodNotAllowed = METHOD_NOT_ALLOWED, "method not answered by this route; nothing happened";
    RequestTimeout = REQUEST_TIMEOUT, "request body too slow; nothing happened";
    Conflict = CONFLICT, "conflict";
    PreconditionFailed = PRECONDITION_FAILED, "precondition failed; nothing happened";
    PayloadTooLarge = PAYLOAD_TOO_LARGE, "request body too large; nothing happened";
    Unprocessable = UNPROCESSABLE_ENTITY, "refused by the policy or the host";
    InternalError = INTERNAL_SERVER_ERROR, "internal failure";
    Unavailable = SERVICE_UNAVAILABLE, "cannot be served now";
}

fn parameter(
    name: &str,
    location: ParameterIn,
    required: bool,
    schema: ObjectBuilder,
    description: &str,
) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(location)
        .required(if required {
            Required::True
        } else {
            Required::False
        })
        .schema(Some(schema))
        .description(Some(description))
        .build()
}

fn string() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

/// An id in mend's one alphabet (docs/src/errors.md).
fn id() -> ObjectBuilder {
    string()
        .min_length(Some(1))
        .max_length(Some(128))
        .pattern(Some("^[A-Za-z0-9][A-Za-z0-9._-]*$"))
}

fn whole_number() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(0))
        .maximum(Some(i64::MAX))
}

/// `{dataset}`.
pub(crate) enum DatasetPath {}

impl IntoParams for DatasetPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![dataset()]
    }
}

fn dataset() -> Parameter {
    parameter("dataset", ParameterIn::Path, true, id(), "the dataset's id")
}

fn operation() -> Parameter {
    parameter(
        "operation",
        ParameterIn::Path,
        true,
        id(),
        "the operation's id, as its begin chose it or was answered",
    )
}

/// `{dataset}` and `{operation}`.
pub(crate) enum OperationPath {}

impl IntoParams for OperationPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![dataset(), operation()]
    }
}

/// `{dataset}`, `{operation}` and `{split}`.
pub(crate) enum UploadPath {}

impl IntoParams for UploadPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            dataset(),
            operation(),
            parameter(
                "split",
                ParameterIn::Path,
                true,
                id(),
                "a split the operation planned",
            ),
        ]
    }
}

/// The `Idempotency-Key` header of every mutating route that takes one.
pub(crate) enum IdempotencyKey {}

impl IntoParams for IdempotencyKey {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![parameter(
            "Idempotency-Key",
            ParameterIn::Header,
            false,
            string().min_length(Some(1)).max_length(Some(128)),
            "sent again under the same key, a request that took effect answers what it answered \
             the first time; the same key with another request is 400. 1 to 128 bytes, no \
             control or invisible characters, no leading or trailing whitespace, not starting \
             with `op:`",
        )]
    }
}

/// The listing's query: `GET /v1/datasets/{dataset}/splits`. Any other parameter is 400.
pub(crate) enum ListSplitsQuery {}

impl IntoParams for ListSplitsQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let query = |name, schema, description| {
            parameter(name, ParameterIn::Query, false, schema, description)
        };
        vec![
            query(
                "state",
                string(),
                "only these states, comma-separated: staged, published, marked_for_deletion",
            ),
            query("split", string(), "only these split ids, comma-separated"),
            query(
                "time_range",
                string().pattern(Some("^-?[0-9]+\\.\\.-?[0-9]+$")),
                "START..END in milliseconds: only splits whose time range overlaps it",
            ),
            query(
                "updated_since",
                whole_number(),
                "only splits updated at or after this time, in milliseconds since the epoch",
            ),
            query(
                "limit",
                whole_number(),
                "the page size (limits.max_list_page at most, and when absent)",
            ),
            query(
                "after",
                string(),
                "the cursor: the previous page's next_after_split_id",
            ),
        ]
    }
}

/// `?deep=true` of a verify. Any other parameter is 400.
pub(crate) enum VerifyQuery {}

impl IntoParams for VerifyQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![parameter(
            "deep",
            ParameterIn::Query,
            false,
            ObjectBuilder::new().schema_type(Type::Boolean),
            "true: read every object back whole and hash its payload against the sha256 its \
             header records (every byte of the dataset is read); false or absent: only each \
             object's header",
        )]
    }
}

/// `?principal=NAME&kind=K&since=MS&before=CURSOR&limit=N` of the audit trail.
pub(crate) enum AuditQuery {}

impl IntoParams for AuditQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            parameter(
                "principal",
                ParameterIn::Query,
                false,
                string(),
                "only the records naming this principal (a tokens file's name, `anonymous`, \
                 `admin-token`, `supervisor@REPLICA` or `cli`)",
            ),
            parameter(
                "kind",
                ParameterIn::Query,
                false,
                string(),
                "only the records of this kind (their `mode`: `roll-forward`, `exclusive`, \
                 `gc`, `reconcile`, ...)",
            ),
            parameter(
                "since",
                ParameterIn::Query,
                false,
                whole_number(),
                "only the records recorded at or after this time, in milliseconds since the \
                 Unix epoch",
            ),
            parameter(
                "before",
                ParameterIn::Query,
                false,
                string(),
                "only the records older than this place: the `next` of the page before",
            ),
            parameter(
                "limit",
                ParameterIn::Query,
                false,
                whole_number(),
                "the most records of the page, 1 to 100000 (100 when absent): the newest that \
                 pass the filters (the filters apply before the limit)",
            ),
        ]
    }
}

/// `?records=N` of an uploaded component (`Content-Type: application/wasm`).
pub(crate) enum RecordsQuery {}

impl IntoParams for RecordsQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![parameter(
            "records",
            ParameterIn::Query,
            false,
            whole_number(),
            "with an uploaded component only: how many of the catalog's newest audit records to \
             replay, every dataset's together, 1 to 100000 (10000 when absent); a JSON request \
             says it in its body",
        )]
    }
}

#[cfg(test)]
mod tests;

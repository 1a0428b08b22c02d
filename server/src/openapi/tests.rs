//! The document against the code: the committed file, the router's own routes and answers, the
//! error codes, and OpenAPI 3.1 itself.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, header};
use serde_json::{Value, json};

use super::*;
use crate::routes::document_json;
use crate::testing::{send, shared_with_admin_token as shared};
use crate::{ServeLimits, Shared};

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");

fn parsed_document() -> Value {
    serde_json::from_str(&document_json()).unwrap()
}

/// Each operation of the document: path, then method, then the operation.
fn operations(document: &Value) -> BTreeMap<String, BTreeMap<String, Value>> {
    document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(path, item)| {
            let methods = item
                .as_object()
                .unwrap()
                .iter()
                .filter(|(method, _)| {
                    [
                        "get", "put", "post", "delete", "patch", "head", "options", "trace",
                    ]
                    .contains(&method.as_str())
                })
                .map(|(method, operation)| (method.to_uppercase(), operation.clone()))
                .collect();
            (path.clone(), methods)
        })
        .collect()
}

#[test]
fn openapi_the_committed_document_is_what_the_code_generates() {
    let generated = document_json();
    if std::env::var_os("MEND_UPDATE_OPENAPI").is_some() {
        std::fs::write(COMMITTED, &generated).unwrap();
        println!("openapi: wrote {COMMITTED}");
        return;
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    let first_difference = committed
        .lines()
        .zip(generated.lines())
        .position(|(a, b)| a != b)
        .unwrap_or(committed.lines().count().min(generated.lines().count()))
        + 1;
    assert!(
        committed == generated,
        "server/openapi.json is not what the code generates (they differ from line \
         {first_difference}): refresh it with `MEND_UPDATE_OPENAPI=1 cargo test -p \
         mend-server openapi`, look at the diff and commit it"
    );
    println!(
        "openapi: server/openapi.json is the generated document, {} lines",
        generated.lines().count()
    );
}

#[test]
fn openapi_every_error_code_is_in_the_document() {
    let document = parsed_document();
    let listed: BTreeSet<String> = document["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .expect("ErrorCode is an enum of strings")
        .iter()
        .map(|code| code.as_str().unwrap().to_owned())
        .collect();
    // `ErrorCode::ALL` is every variant (the schema is derived from the variants).
    let all: BTreeSet<String> = ErrorCode::ALL
        .iter()
        .map(|code| code.as_str().to_owned())
        .collect();
    assert_eq!(listed, all, "ErrorCode::ALL and the enum's variants differ");
    // The codes docs/src/http-api.md's status table promises.
    for code in [
        "invalid_argument",
        "unauthorized",
        "forbidden",
        "too_many_requests",
        "not_found",
        "no_route",
        "method_not_allowed",
        "request_timeout",
        "already_exists",
        "conflict",
        "failed_precondition",
        "payload_too_large",
        "policy_rejected",
        "capability_missing",
        "policy_failed",
        "dataset_unavailable",
        "recovery_required",
        "unavailable",
        "transient",
        "corrupt",
        "shutting_down",
        "overloaded",
        "too_many_connections",
        "starting",
        "internal",
    ] {
        assert!(listed.contains(code), "{code} is not in the document");
    }
    // Each code is described by the response of each status it is answered with.
    let responses = &document["components"]["responses"];
    let mut described = 0;
    for code in ErrorCode::ALL {
        for status in code.statuses() {
            let (name, _) = error_response_named(*status);
            let description = responses[name]["description"].as_str().unwrap_or_default();
            assert!(
                description.contains(&format!("`{}`", code.as_str())),
                "the {status} response does not name {code:?}: {description}"
            );
            described += 1;
        }
    }
    // The error body's fields, as docs/src/http-api.md promises them.
    let properties = document["components"]["schemas"]["ErrorBody"]["properties"]
        .as_object()
        .unwrap();
    for field in [
        "error",
        "message",
        "certainly_not_applied",
        "ids",
        "operation_id",
        "dataset_id",
        "reason",
        "hint",
    ] {
        assert!(properties.contains_key(field), "ErrorBody has no {field}");
    }
    println!(
        "openapi: {} error codes in the document, {described} (code, status) pairs described",
        listed.len()
    );
}

/// The reusable response of `status`, by name.
fn error_response_named(status: StatusCode) -> (&'static str, RefOr<Response>) {
    match status {
        StatusCode::BAD_REQUEST => BadRequest::response(),
        StatusCode::UNAUTHORIZED => Unauthorized::response(),
        StatusCode::FORBIDDEN => Forbidden::response(),
        StatusCode::TOO_MANY_REQUESTS => TooManyRequests::response(),
        StatusCode::NOT_FOUND => NotFound::response(),
        StatusCode::REQUEST_TIMEOUT => RequestTimeout::response(),
        StatusCode::CONFLICT => Conflict::response(),
        StatusCode::PRECONDITION_FAILED => PreconditionFailed::response(),
        StatusCode::PAYLOAD_TOO_LARGE => PayloadTooLarge::response(),
        StatusCode::UNPROCESSABLE_ENTITY => Unprocessable::response(),
        StatusCode::INTERNAL_SERVER_ERROR => InternalError::response(),
        StatusCode::SERVICE_UNAVAILABLE => Unavailable::response(),
        StatusCode::METHOD_NOT_ALLOWED => MethodNotAllowed::response(),
        other => panic!("no error response for {other}"),
    }
}

#[test]
fn openapi_the_document_is_valid_openapi_3_1() {
    let text = document_json();
    let document: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(document["openapi"], "3.1.0");
    // Another implementation of OpenAPI 3.1 reads it (utoipa's own model cannot: it
    // writes a schema that allows any value as `{}` and reads no such schema back).
    let spec = oas3::from_json(&text).expect("oas3 reads the document as OpenAPI 3.1");
    spec.validate_version()
        .expect("an OpenAPI version oas3 supports");
    assert_eq!(
        spec.operations().count(),
        operations(&document)
            .values()
            .map(|methods| methods.len())
            .sum::<usize>()
    );

    // Every reference resolves.
    let mut references = Vec::new();
    collect_references(&document, &mut references);
    for reference in &references {
        let pointer = reference
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("{reference} is not a local reference"));
        assert!(
            document.pointer(pointer).is_some(),
            "{reference} does not resolve"
        );
    }

    let schemes = document["components"]["securitySchemes"]
        .as_object()
        .unwrap();
    let tags: BTreeSet<&str> = document["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tag| tag["name"].as_str().unwrap())
        .collect();
    let mut operation_ids = BTreeSet::new();
    let mut count = 0;
    for (path, methods) in operations(&document) {
        let template: BTreeSet<String> = path
            .split('/')
            .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
            .map(str::to_owned)
            .collect();
        for (method, operation) in methods {
            let at = format!("{method} {path}");
            count += 1;
            assert!(
                operation_ids.insert(operation["operationId"].as_str().unwrap().to_owned()),
                "{at}: operationId used twice"
            );
            assert!(
                operation["summary"].as_str().is_some_and(|s| !s.is_empty()),
                "{at}: no summary (the handler's doc comment)"
            );
            for tag in operation["tags"].as_array().unwrap() {
                assert!(
                    tags.contains(tag.as_str().unwrap()),
                    "{at}: unknown tag {tag}"
                );
            }
            let parameters = operation["parameters"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let in_path: BTreeSet<String> = parameters
                .iter()
                .filter(|p| p["in"] == "path")
                .map(|p| p["name"].as_str().unwrap().to_owned())
                .collect();
            assert_eq!(in_path, template, "{at}: path parameters");
            for parameter in parameters.iter().filter(|p| p["in"] == "path") {
                assert_eq!(
                    parameter["required"], true,
                    "{at}: path parameters are required"
                );
            }
            for requirement in operation["security"].as_array().into_iter().flatten() {
                for name in requirement.as_object().unwrap().keys() {
                    assert!(schemes.contains_key(name), "{at}: unknown scheme {name}");
                }
            }
            let responses = operation["responses"].as_object().unwrap();
            assert!(
                responses.keys().any(|status| status.starts_with('2')),
                "{at}: no success answer"
            );
            for (status, response) in responses {
                if !status.starts_with('2') {
                    assert!(
                        response["$ref"]
                            .as_str()
                            .is_some_and(|r| r.starts_with("#/components/responses/")),
                        "{at}: {status} is not one of the error responses"
                    );
                }
            }
            // A connection over the cap is refused whatever it asked, and anything can fail.
            for status in ["500", "503"] {
                assert!(responses.contains_key(status), "{at}: no {status}");
            }
        }
    }
    println!(
        "openapi: the document is OpenAPI 3.1: {count} operations, {} references resolved",
        references.len()
    );
}

fn collect_references(value: &Value, references: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("$ref", Value::String(reference)) => references.push(reference.clone()),
                    _ => collect_references(value, references),
                }
            }
        }
        Value::Array(values) => values
            .iter()
            .for_each(|value| collect_references(value, references)),
        _ => {}
    }
}

/// The paths the router holds. axum has no API that lists its routes; its `Debug` output
/// names each one as `RouteId(N): "PATH"`, which is what this reads. If a new axum writes
/// it otherwise, this finds no path and the test says so rather than passing.
fn served_paths(router: &Router<Arc<Shared>>) -> BTreeSet<String> {
    let debug = format!("{router:?}");
    // The routes, not the fallback router's own.
    let debug = debug
        .split_once("fallback_router")
        .map_or(debug.as_str(), |(routes, _)| routes);
    let mut paths = BTreeSet::new();
    for (at, _) in debug.match_indices("RouteId(") {
        let rest = &debug[at + "RouteId(".len()..];
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if let Some(quoted) = rest[digits..].strip_prefix("): \"") {
            let end = quoted.find('"').expect("a closing quote");
            paths.insert(quoted[..end].to_owned());
        }
    }
    // axum's own catch-all routes for nesting and fallbacks.
    paths.retain(|path| !path.contains("__private__axum"));
    assert!(
        !paths.is_empty(),
        "no path found in the router's Debug output; has axum changed its format?"
    );
    paths
}

/// `path` with each parameter filled in.
fn concrete(path: &str, dataset: &str) -> String {
    path.replace("{dataset}", dataset)
        .replace("{operation}", "no-such-operation")
        .replace("{split}", "no-such-split")
}

/// Checks an answer against the operation's documented responses.
fn documented(at: &str, operation: &Value, status: StatusCode, body: &Value) {
    let responses = operation["responses"].as_object().unwrap();
    assert!(
        responses.contains_key(status.as_str()),
        "{at} answered {status}, which its documentation does not list ({:?}): {body}",
        responses.keys().collect::<Vec<_>>()
    );
    if status.is_success()
        && let Some(schema) = answer_schema(operation, status)
    {
        let document = parsed_document();
        conforms(&document, schema, body)
            .unwrap_or_err_panic(&format!("{at} answered {status} {body}"));
    }
    if status.is_client_error() || status.is_server_error() {
        let error: ErrorBody = serde_json::from_value(body.clone())
            .unwrap_or_else(|e| panic!("{at}: {status} {body} is not an ErrorBody: {e}"));
        assert!(
            error.error.statuses().contains(&status),
            "{at}: {:?} answered with {status}",
            error.error
        );
    }
}

#[tokio::test]
async fn openapi_every_route_the_router_serves_is_documented() {
    let document = parsed_document();
    let documented_operations = operations(&document);
    let (served, _) = crate::routes::documented_routes(&ServeLimits::default()).split_for_parts();
    let paths: BTreeSet<String> = documented_operations.keys().cloned().collect();
    assert_eq!(
        served_paths(&served),
        paths,
        "the router serves other paths than the document lists: register every route \
         with `.routes(routes!(handler))`"
    );

    let shared = shared(None).await;
    let router = crate::routes::router(shared);
    // Each path answers the methods its documentation lists, and no other: a method it
    // does not answer is 405, with the ones it does in `Allow` (HEAD with every GET).
    for (path, methods) in &documented_operations {
        let request = Request::builder()
            .method(Method::TRACE)
            .uri(concrete(path, "no-such-dataset"))
            .body(Body::empty())
            .unwrap();
        let (status, allow, body) = send(&router, request).await;
        assert_eq!(
            status,
            StatusCode::METHOD_NOT_ALLOWED,
            "TRACE {path}: {body}"
        );
        assert_eq!(body["error"], "method_not_allowed", "TRACE {path}");
        let allowed: BTreeSet<String> = allow
            .split(',')
            .map(|method| method.trim().to_owned())
            .filter(|method| method != "HEAD")
            .collect();
        let listed: BTreeSet<String> = methods.keys().cloned().collect();
        assert_eq!(allowed, listed, "{path}: the methods served and documented");
    }

    // Each operation, asked about a dataset that does not exist and then about one that
    // does, with an empty JSON object and with a body over every cap, answers only what
    // its documentation lists; every failure is an ErrorBody with a code of its status.
    let (status, _, body) = send(
        &router,
        Request::post("/v1/datasets")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(r#"{"dataset_id": "d1"}"#))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let mut answered = BTreeMap::<String, BTreeSet<u16>>::new();
    for dataset in ["no-such-dataset", "d1"] {
        for (path, methods) in &documented_operations {
            for (method, operation) in methods {
                let at = format!("{method} {path}");
                let uri = concrete(path, dataset);
                let method = Method::from_bytes(method.as_bytes()).unwrap();
                let with_body = method == Method::POST || method == Method::PUT;
                let mut requests = vec![if with_body {
                    Request::builder()
                        .method(method.clone())
                        .uri(&uri)
                        .header(header::CONTENT_TYPE, "application/json")
                        .body(Body::from("{}"))
                        .unwrap()
                } else {
                    Request::builder()
                        .method(method.clone())
                        .uri(&uri)
                        .body(Body::empty())
                        .unwrap()
                }];
                if with_body {
                    requests.push(
                        Request::builder()
                            .method(method.clone())
                            .uri(&uri)
                            .header(header::CONTENT_LENGTH, (1u64 << 40).to_string())
                            .body(Body::empty())
                            .unwrap(),
                    );
                }
                for request in requests {
                    let (status, _, body) = send(&router, request).await;
                    documented(&at, operation, status, &body);
                    answered
                        .entry(at.clone())
                        .or_default()
                        .insert(status.as_u16());
                }
            }
        }
    }
    let (status, _, body) = send(
        &router,
        Request::get("/v1/no-such-route")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("no_route"))
    );
    for (at, statuses) in &answered {
        println!("openapi: {at} answered {statuses:?}");
    }
    println!(
        "openapi: {} paths and {} operations served as documented",
        paths.len(),
        answered.len()
    );
}

/// Checks `value` against `schema`, in the part of JSON Schema this document uses (`$ref`,
/// `type`, `enum`, `properties`, `required`, `additionalProperties`, `items`, `prefixItems`,
/// `allOf`, `oneOf`, `anyOf`, `minimum`, `minLength`, `maxLength`). Objects are closed: an
/// answer's key that its schema does not name is a failure, so that a handler cannot answer
/// a field the document does not describe.
fn conforms(document: &Value, schema: &Value, value: &Value) -> Result<(), String> {
    check(document, schema, value, true, "").map(|_| ())
}

/// The keys of `value` (an object) that `schema` accounts for; with `closed`, every key must be.
fn check(
    document: &Value,
    schema: &Value,
    value: &Value,
    closed: bool,
    at: &str,
) -> Result<BTreeSet<String>, String> {
    let keys = || -> BTreeSet<String> {
        value
            .as_object()
            .map(|map| map.keys().cloned().collect())
            .unwrap_or_default()
    };
    let Some(schema) = schema.as_object() else {
        // `true` or `{}`-like: anything.
        return Ok(keys());
    };
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let target = document
            .pointer(reference.trim_start_matches('#'))
            .ok_or_else(|| format!("{at}: {reference} does not resolve"))?;
        return check(document, target, value, closed, at);
    }
    let mut consumed = BTreeSet::new();
    if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
        for part in parts {
            consumed.extend(check(document, part, value, false, at)?);
        }
    }
    for (keyword, exactly_one) in [("oneOf", true), ("anyOf", false)] {
        if let Some(branches) = schema.get(keyword).and_then(Value::as_array) {
            let matching: Vec<BTreeSet<String>> = branches
                .iter()
                .filter_map(|branch| check(document, branch, value, closed, at).ok())
                .collect();
            match matching.as_slice() {
                [] => return Err(format!("{at}: {value} matches no branch of its {keyword}")),
                [one] => consumed.extend(one.iter().cloned()),
                [first, ..] if !exactly_one => consumed.extend(first.iter().cloned()),
                _ => {
                    return Err(format!(
                        "{at}: {value} matches several branches of its oneOf"
                    ));
                }
            }
        }
    }
    if let Some(types) = schema.get("type") {
        let types: Vec<&str> = match types {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let is = |kind: &str| match kind {
            "null" => value.is_null(),
            "boolean" => value.is_boolean(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "string" => value.is_string(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => false,
        };
        if !types.iter().any(|kind| is(kind)) {
            return Err(format!("{at}: {value} is not of type {types:?}"));
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        return Err(format!("{at}: {value} is not one of {allowed:?}"));
    }
    if let (Some(minimum), Some(number)) = (
        schema.get("minimum").and_then(Value::as_f64),
        value.as_f64(),
    ) && number < minimum
    {
        return Err(format!("{at}: {value} is under its minimum {minimum}"));
    }
    if let Some(text) = value.as_str() {
        let length = text.chars().count() as u64;
        if schema
            .get("minLength")
            .and_then(Value::as_u64)
            .is_some_and(|min| length < min)
            || schema
                .get("maxLength")
                .and_then(Value::as_u64)
                .is_some_and(|max| length > max)
        {
            return Err(format!(
                "{at}: {value} is not of the length its schema allows"
            ));
        }
    }
    if let Some(items) = value.as_array() {
        let prefix = schema
            .get("prefixItems")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (index, item) in items.iter().enumerate() {
            let item_schema = match prefix.get(index) {
                Some(schema) => schema,
                None => match schema.get("items") {
                    Some(Value::Bool(false)) => {
                        return Err(format!(
                            "{at}: {value} has more than {} items",
                            prefix.len()
                        ));
                    }
                    Some(schema) => schema,
                    None => &Value::Bool(true),
                },
            };
            check(document, item_schema, item, true, &format!("{at}[{index}]"))?;
        }
    }
    if let Some(map) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        for required in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = required.as_str().unwrap_or_default();
            if !map.contains_key(name) {
                return Err(format!("{at}: {value} lacks the required {name}"));
            }
        }
        for (name, property) in properties.into_iter().flatten() {
            if let Some(field) = map.get(name) {
                check(document, property, field, true, &format!("{at}.{name}"))?;
            }
            consumed.insert(name.clone());
        }
        match schema.get("additionalProperties") {
            None | Some(Value::Bool(false)) => {}
            Some(additional) => {
                for (name, field) in map {
                    if !consumed.contains(name) {
                        check(document, additional, field, true, &format!("{at}.{name}"))?;
                    }
                }
                consumed.extend(map.keys().cloned());
            }
        }
        // A schema that says nothing of objects (a plain `{}`) accounts for everything.
        let describes_objects = [
            "properties",
            "additionalProperties",
            "allOf",
            "oneOf",
            "anyOf",
        ]
        .iter()
        .any(|keyword| schema.contains_key(*keyword));
        if !describes_objects {
            consumed.extend(map.keys().cloned());
        }
        if closed && let Some(extra) = map.keys().find(|key| !consumed.contains(*key)) {
            return Err(format!("{at}: {extra} is not in the schema of {value}"));
        }
    }
    Ok(consumed)
}

/// The schema of `operation`'s answer with `status` as JSON, if it documents one.
fn answer_schema(operation: &Value, status: StatusCode) -> Option<&Value> {
    operation["responses"][status.as_str()]["content"]["application/json"].get("schema")
}

#[test]
fn openapi_the_schema_check_refuses_what_the_document_does_not_describe() {
    let document = parsed_document();
    let dataset = json!({"$ref": "#/components/schemas/Dataset"});
    let good = json!({
        "dataset_id": "d1", "uid": "u", "config": {"staged_grace_period_ms": 1,
        "deletion_grace_period_ms": 0, "policy_params": {}}, "config_version": 0,
        "checkpoint": {"kafka": {"0": 4}}, "manifest_version": 1, "publish_token": null,
        "fencing_epoch": 0, "created_at_ms": 1, "updated_at_ms": 1
    });
    conforms(&document, &dataset, &good).unwrap();
    let mut extra = good.clone();
    extra["colour"] = json!("red");
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("uid");
    let mut mistyped = good.clone();
    mistyped["checkpoint"]["kafka"]["0"] = json!("four");
    for (what, bad) in [
        ("extra", extra),
        ("missing", missing),
        ("mistyped", mistyped),
    ] {
        assert!(
            conforms(&document, &dataset, &bad).is_err(),
            "{what} passed"
        );
    }
    // A flattened enum (allOf of a oneOf and an object) and an untagged one (oneOf).
    let staged = json!({"$ref": "#/components/schemas/StagedSplit"});
    conforms(
        &document,
        &staged,
        &json!({"split_id": "s", "outcome": "inserted"}),
    )
    .unwrap();
    conforms(
        &document,
        &staged,
        &json!({"split_id": "s", "outcome": "skipped", "existing_state": "published"}),
    )
    .unwrap();
    assert!(
        conforms(
            &document,
            &staged,
            &json!({"split_id": "s", "outcome": "kept"})
        )
        .is_err()
    );
    let listing = json!({"$ref": "#/components/schemas/DatasetListing"});
    conforms(&document, &listing, &good).unwrap();
    conforms(
        &document,
        &listing,
        &json!({"dataset_id": "d", "error": "corrupt", "reason": "r"}),
    )
    .unwrap();
    assert!(
        conforms(
            &document,
            &listing,
            &json!({"dataset_id": "d", "error": "bent", "reason": "r"})
        )
        .is_err()
    );
    println!("openapi: the schema check refused 4 answers the document does not describe");
}

trait OrPanic {
    fn unwrap_or_err_panic(self, what: &str);
}

impl OrPanic for Result<(), String> {
    fn unwrap_or_err_panic(self, what: &str) {
        if let Err(error) = self {
            panic!("{what}, which is not what its documentation says: {error}");
        }
    }
}

/// The admin token of the session's server.
const ADMIN: &str = "secret";

/// One request of a session, the route it documents, and the status it must answer.
struct Step {
    method: Method,
    template: &'static str,
    uri: String,
    body: Vec<u8>,
    content_type: &'static str,
    admin: bool,
    expected: StatusCode,
}

impl Step {
    /// On dataset `d1`, operation `op1`, split `s2`, without a body.
    fn new(method: Method, template: &'static str, expected: u16) -> Self {
        Self {
            method,
            template,
            uri: template
                .replace("{dataset}", "d1")
                .replace("{operation}", "op1")
                .replace("{split}", "s2"),
            body: Vec::new(),
            content_type: "application/json",
            admin: false,
            expected: StatusCode::from_u16(expected).unwrap(),
        }
    }

    fn json(mut self, body: Value) -> Self {
        self.body = body.to_string().into_bytes();
        self
    }

    fn bytes(mut self, body: &[u8], content_type: &'static str) -> Self {
        self.body = body.to_vec();
        self.content_type = content_type;
        self
    }

    fn uri(mut self, uri: &str) -> Self {
        self.uri = uri.to_owned();
        self
    }

    fn admin(mut self) -> Self {
        self.admin = true;
        self
    }

    fn request(&self, idempotency_key: Option<&[u8]>) -> Request<Body> {
        let mut request = Request::builder()
            .method(self.method.clone())
            .uri(&self.uri)
            .header(header::CONTENT_TYPE, self.content_type);
        if self.admin {
            request = request.header(header::AUTHORIZATION, format!("Bearer {ADMIN}"));
        }
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        request.body(Body::from(self.body.clone())).unwrap()
    }
}

/// A session on one dataset that calls every route, each answer checked against what its
/// route documents: its status, and its body against its schema (closed objects: no field
/// the document does not name). A route documented with `Idempotency-Key` refuses a bad key
/// (it reads it); one documented without ignores it.
#[tokio::test]
async fn openapi_every_answer_of_a_session_is_what_its_route_documents() {
    use Method as M;
    let document = parsed_document();
    let documented_operations = operations(&document);
    let router = crate::routes::router(shared(Some(ADMIN)).await);
    // sha256("payload")
    let sha256 = "239f59ed55e737c77147cf55ad0c1b030b6d7ee748a7426952f9b852d5a935e5";
    let planned = |operation: &str, split: &str| {
        json!({"operation_id": operation, "kind": "commit", "node": "writer-1",
            "splits": [{"split_id": split, "metadata_json": "{\"num_docs\": 1}", "size": 7,
            "sha256": sha256}]})
    };
    let component = mend::runtime::DEFAULT_POLICY_WASM;
    let steps = [
        Step::new(M::GET, "/healthz", 200),
        // The server under test never listed its datasets: it is not ready.
        Step::new(M::GET, "/readyz", 503),
        Step::new(M::GET, "/metrics", 200),
        Step::new(M::GET, "/v1/openapi.json", 200),
        Step::new(M::POST, "/v1/datasets", 201).json(json!({"dataset_id": "d1"})),
        Step::new(M::POST, "/v1/datasets", 409).json(json!({"dataset_id": "d1"})),
        Step::new(M::GET, "/v1/datasets", 200),
        Step::new(M::GET, "/v1/datasets/{dataset}", 200),
        Step::new(M::POST, "/v1/datasets/{dataset}/config", 200).json(json!({
            "expected_config_version": 1,
            "config": {"staged_grace_period_ms": 60000, "deletion_grace_period_ms": 0,
                "policy_params": {"tier": "hot"}}})),
        Step::new(M::POST, "/v1/datasets/{dataset}/fence", 200).json(json!({"token": "t1"})),
        Step::new(M::POST, "/v1/datasets/{dataset}/fence", 200).json(json!({"clear": true})),
        Step::new(M::POST, "/v1/datasets/{dataset}/stage", 200).json(json!({
            "mode": "create-only",
            "splits": [{"split_id": "s1", "metadata": {"time_range": {"start": 0, "end": 9}}}]})),
        Step::new(M::POST, "/v1/datasets/{dataset}/stage", 200)
            .json(json!({"mode": "create-only", "splits": [{"split_id": "s1"}]})),
        // Nothing of s1 was uploaded: invariant 1 refuses its publish.
        Step::new(M::POST, "/v1/datasets/{dataset}/publish", 412)
            .json(json!({"staged_split_ids": ["s1"]})),
        Step::new(M::GET, "/v1/datasets/{dataset}/splits", 200)
            .uri("/v1/datasets/d1/splits?state=staged&time_range=0..100&limit=10"),
        Step::new(M::POST, "/v1/datasets/{dataset}/mark", 200).json(json!({"split_ids": ["s1"]})),
        Step::new(M::POST, "/v1/datasets/{dataset}/delete", 200).json(json!({"split_ids": ["s1"]})),
        Step::new(M::POST, "/v1/datasets/{dataset}/operations", 200).json(planned("op1", "s2")),
        Step::new(
            M::PUT,
            "/v1/datasets/{dataset}/operations/{operation}/splits/{split}",
            200,
        )
        .bytes(b"payload", "application/octet-stream"),
        Step::new(
            M::POST,
            "/v1/datasets/{dataset}/operations/{operation}/heartbeat",
            200,
        )
        .json(json!({"lease_ms": 60000})),
        Step::new(M::GET, "/v1/datasets/{dataset}/operations/{operation}", 200),
        Step::new(
            M::POST,
            "/v1/datasets/{dataset}/operations/{operation}/publish",
            200,
        ),
        Step::new(M::POST, "/v1/datasets/{dataset}/operations", 200).json(planned("op2", "s3")),
        // The session's store is in memory, which presigns nothing.
        Step::new(
            M::POST,
            "/v1/datasets/{dataset}/operations/{operation}/upload-urls",
            422,
        )
        .uri("/v1/datasets/d1/operations/op2/upload-urls")
        .json(json!({"objects": [{"split_id": "s3", "object_sha256": "ab".repeat(32)}]})),
        Step::new(
            M::POST,
            "/v1/datasets/{dataset}/operations/{operation}/abort",
            200,
        )
        .uri("/v1/datasets/d1/operations/op2/abort"),
        Step::new(M::GET, "/v1/datasets/{dataset}/operations/{operation}", 200)
            .uri("/v1/datasets/d1/operations/op2"),
        Step::new(M::POST, "/v1/datasets/{dataset}/gc", 200).json(json!({})),
        Step::new(M::POST, "/v1/datasets/{dataset}/reconcile", 200).json(json!({})),
        Step::new(M::POST, "/v1/datasets/{dataset}/recover", 200).json(json!({"mode": "probe"})),
        Step::new(M::POST, "/v1/datasets/{dataset}/recover", 200).json(json!({"mode": "verify"})),
        Step::new(M::POST, "/v1/datasets/{dataset}/recover", 401)
            .json(json!({"mode": "exclusive"})),
        Step::new(M::POST, "/v1/datasets/{dataset}/recover", 200)
            .json(json!({"mode": "exclusive"}))
            .admin(),
        Step::new(M::GET, "/v1/datasets/{dataset}/audit", 200)
            .uri("/v1/datasets/d1/audit?principal=admin-token&limit=10"),
        Step::new(M::GET, "/v1/datasets/{dataset}/audit", 400).uri("/v1/datasets/d1/audit?limit=0"),
        Step::new(M::GET, "/v1/datasets/{dataset}/audit", 200)
            .uri("/v1/datasets/d1/audit?kind=exclusive&since=0&limit=1"),
        Step::new(M::GET, "/v1/datasets/{dataset}/audit", 200)
            .uri("/v1/datasets/d1/audit?before=1.0"),
        Step::new(M::GET, "/v1/datasets/{dataset}/audit", 400)
            .uri("/v1/datasets/d1/audit?before=not-a-cursor"),
        Step::new(M::GET, "/v1/datasets/{dataset}/audit", 400)
            .uri("/v1/datasets/d1/audit?since=-1"),
        Step::new(M::GET, "/v1/datasets/{dataset}/audit", 400)
            .uri("/v1/datasets/d1/audit?order=oldest"),
        Step::new(M::GET, "/v1/datasets/{dataset}/verify", 200),
        Step::new(M::GET, "/v1/datasets/{dataset}/verify", 200)
            .uri("/v1/datasets/d1/verify?deep=true"),
        Step::new(M::GET, "/v1/status", 200),
        Step::new(M::GET, "/v1/fleet", 200),
        Step::new(M::GET, "/v1/policy", 200),
        Step::new(M::POST, "/v1/policy/replay", 200)
            .uri("/v1/policy/replay?records=10")
            .bytes(component, "application/wasm")
            .admin(),
        Step::new(M::POST, "/v1/policy/replay", 401).bytes(component, "application/wasm"),
        // The component is the active policy already.
        Step::new(M::POST, "/v1/policy/swap", 412)
            .bytes(component, "application/wasm")
            .admin(),
        Step::new(M::POST, "/v1/policy/rollback", 412).admin(),
    ];
    let bad_key: &[u8] = b"caf\xc3\xa9";
    let mut keyed = 0;
    for step in &steps {
        let at = format!("{} {}", step.method, step.uri);
        let operation = &documented_operations[step.template][step.method.as_str()];
        let takes_key = operation["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|parameter| parameter["name"] == "Idempotency-Key");
        let request = if takes_key && step.expected == StatusCode::UNAUTHORIZED {
            // The key is read before the admin token: a bad one would answer 400 first.
            step.request(None)
        } else if takes_key {
            let (status, _, body) = send(&router, step.request(Some(bad_key))).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{at} with a bad key: {body}"
            );
            assert!(
                body["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("Idempotency-Key")),
                "{at} with a bad key: {body}"
            );
            documented(&at, operation, status, &body);
            keyed += 1;
            step.request(None)
        } else {
            // A route that takes no key ignores one.
            step.request(Some(bad_key))
        };
        let (status, _, body) = send(&router, request).await;
        assert_eq!(status, step.expected, "{at}: {body}");
        documented(&at, operation, status, &body);
    }
    let routes: BTreeSet<(&str, &str)> = steps
        .iter()
        .map(|step| (step.method.as_str(), step.template))
        .collect();
    let all: usize = documented_operations.values().map(BTreeMap::len).sum();
    assert_eq!(routes.len(), all, "the session calls every route");
    println!(
        "openapi: {} answers of a session on all {all} routes, each as its route documents it; \
         {keyed} bad Idempotency-Keys refused where documented, ignored elsewhere",
        steps.len()
    );
}

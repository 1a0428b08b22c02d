//! The access matrix: every route, from the OpenAPI document, asked by every kind of caller,
//! with the answer each must get written out here by hand (not derived from [`ROUTES`], which
//! is what is under test).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;
use crate::auth::{Grant, TokensFile, tokens_file_line};
use crate::testing::{send, shared_with_limits};

/// The callers, one per column of [`MATRIX`].
const COLUMNS: [&str; 9] = [
    "none",
    "wrong",
    "reader",
    "other",
    "writer",
    "writer2",
    "operator",
    "root",
    "admin-token",
];

/// Each caller's grants, and its secret (`None`: sends no credential).
fn principals() -> Vec<(&'static str, Option<String>, Vec<&'static str>)> {
    let secret = |n: u8| Some(format!("mend_{}", format!("{n:02x}").repeat(32)));
    vec![
        ("none", None, vec![]),
        ("wrong", secret(0), vec![]),
        ("reader", secret(1), vec!["read:logs-*"]),
        // Write, on another pattern.
        ("other", secret(2), vec!["write:metrics-*"]),
        ("writer", secret(3), vec!["write:logs-*"]),
        // Write on the same datasets, but not the principal that began the operations.
        ("writer2", secret(4), vec!["write:logs-*"]),
        ("operator", secret(5), vec!["operate:logs-*"]),
        ("root", secret(6), vec!["admin"]),
        ("admin-token", secret(7), vec![]),
        // Not columns of the matrix: grants on every dataset, for the routes over all of them.
        ("reader-all", secret(8), vec!["read:*"]),
        ("operator-all", secret(9), vec!["operate:*"]),
    ]
}

/// What a cell's request needs in place before it is sent: always a dataset of its own.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    Dataset,
    /// A staged split `s`.
    Staged,
    /// A staged split `s`, marked for deletion.
    Marked,
    /// An operation `op` begun by `writer`, planning split `s` with the payload `payload`.
    Begun,
    /// And its payload uploaded.
    Uploaded,
}

/// One row: a route, the request sent to it, what must be in place, and the status each
/// column gets (`COLUMNS` order). `{d}` in a URI or body is the cell's dataset, `{n}` the
/// cell's number.
struct Row {
    method: Method,
    route: &'static str,
    uri: &'static str,
    body: Value,
    bytes: Option<(&'static [u8], &'static str)>,
    setup: Setup,
    expected: [u16; 9],
}

const P: u16 = 401;
const F: u16 = 403;

fn rows() -> Vec<Row> {
    use Method as M;
    use Setup::*;
    let component: &'static [u8] = mend::runtime::DEFAULT_POLICY_WASM;
    let row = |method: Method, route: &'static str, setup: Setup, expected: [u16; 9]| Row {
        method,
        route,
        uri: route,
        body: json!({}),
        bytes: None,
        setup,
        expected,
    };
    let with = |mut row: Row, body: Value| {
        row.body = body;
        row
    };
    let wasm = |mut row: Row, uri: &'static str| {
        row.bytes = Some((component, "application/wasm"));
        row.uri = uri;
        row
    };
    let ok_all = [200; 9];
    // none wrong reader other writer writer2 operator root admin-token
    vec![
        row(M::GET, "/healthz", Dataset, ok_all),
        row(M::GET, "/readyz", Dataset, ok_all),
        row(M::GET, "/v1/openapi.json", Dataset, ok_all),
        row(M::GET, "/metrics", Dataset, [P, P, F, F, F, F, F, 200, 200]),
        row(
            M::GET,
            "/v1/fleet",
            Dataset,
            [P, P, F, F, F, F, F, 200, 200],
        ),
        row(
            M::GET,
            "/v1/status",
            Dataset,
            [P, P, 200, 200, 200, 200, 200, 200, 200],
        ),
        row(
            M::GET,
            "/v1/policy",
            Dataset,
            [P, P, 200, 200, 200, 200, 200, 200, 200],
        ),
        row(
            M::GET,
            "/v1/datasets",
            Dataset,
            [P, P, 200, 200, 200, 200, 200, 200, 200],
        ),
        with(
            row(
                M::POST,
                "/v1/datasets",
                Dataset,
                [P, P, F, F, 201, 201, F, 201, 201],
            ),
            json!({"dataset_id": "logs-new-{n}"}),
        ),
        row(
            M::GET,
            "/v1/datasets/{dataset}",
            Dataset,
            [P, P, 200, F, F, F, F, 200, 200],
        ),
        with(
            row(
                M::POST,
                "/v1/datasets/{dataset}/config",
                Dataset,
                [P, P, F, F, F, F, 200, 200, 200],
            ),
            json!({"expected_config_version": 1, "config": {"staged_grace_period_ms": 60000,
                "deletion_grace_period_ms": 0, "policy_params": {}}}),
        ),
        with(
            row(
                M::POST,
                "/v1/datasets/{dataset}/fence",
                Dataset,
                [P, P, F, F, F, F, 200, 200, 200],
            ),
            json!({"token": "t1"}),
        ),
        with(
            row(
                M::POST,
                "/v1/datasets/{dataset}/stage",
                Dataset,
                [P, P, F, F, 200, 200, F, 200, 200],
            ),
            json!({"mode": "create-only", "splits": [{"split_id": "s"}]}),
        ),
        // Nothing of `s` was uploaded: invariant 1 refuses its publish, past the access check.
        with(
            row(
                M::POST,
                "/v1/datasets/{dataset}/publish",
                Staged,
                [P, P, F, F, 412, 412, F, 412, 412],
            ),
            json!({"staged_split_ids": ["s"]}),
        ),
        with(
            row(
                M::POST,
                "/v1/datasets/{dataset}/mark",
                Staged,
                [P, P, F, F, 200, 200, F, 200, 200],
            ),
            json!({"split_ids": ["s"]}),
        ),
        with(
            row(
                M::POST,
                "/v1/datasets/{dataset}/delete",
                Marked,
                [P, P, F, F, 200, 200, F, 200, 200],
            ),
            json!({"split_ids": ["s"]}),
        ),
        row(
            M::GET,
            "/v1/datasets/{dataset}/splits",
            Staged,
            [P, P, 200, F, F, F, F, 200, 200],
        ),
        row(
            M::POST,
            "/v1/datasets/{dataset}/gc",
            Dataset,
            [P, P, F, F, F, F, 200, 200, 200],
        ),
        row(
            M::POST,
            "/v1/datasets/{dataset}/reconcile",
            Dataset,
            [P, P, F, F, F, F, 200, 200, 200],
        ),
        with(
            row(
                M::POST,
                "/v1/datasets/{dataset}/recover",
                Dataset,
                [P, P, F, F, F, F, 200, 200, 200],
            ),
            json!({"mode": "probe"}),
        ),
        // Exclusive recovery needs admin beside operate.
        with(
            row(
                M::POST,
                "/v1/datasets/{dataset}/recover",
                Dataset,
                [P, P, F, F, F, F, F, 200, 200],
            ),
            json!({"mode": "exclusive"}),
        ),
        row(
            M::GET,
            "/v1/datasets/{dataset}/verify",
            Dataset,
            [P, P, 200, F, F, F, F, 200, 200],
        ),
        row(
            M::GET,
            "/v1/datasets/{dataset}/audit",
            Dataset,
            [P, P, F, F, F, F, 200, 200, 200],
        ),
        with(
            row(
                M::POST,
                "/v1/datasets/{dataset}/operations",
                Dataset,
                [P, P, F, F, 200, 200, F, 200, 200],
            ),
            planned("op", "s"),
        ),
        // An operation's steps: its own principal or an admin; another writer of the same
        // datasets is told there is no such operation of its own.
        row(
            M::GET,
            "/v1/datasets/{dataset}/operations/{operation}",
            Begun,
            [P, P, F, F, 200, 404, F, 200, 200],
        ),
        Row {
            bytes: Some((b"payload", "application/octet-stream")),
            ..row(
                M::PUT,
                "/v1/datasets/{dataset}/operations/{operation}/splits/{split}",
                Begun,
                [P, P, F, F, 200, 404, F, 200, 200],
            )
        },
        // The store is in memory, which presigns nothing: 422, past the access check.
        with(
            row(
                M::POST,
                "/v1/datasets/{dataset}/operations/{operation}/upload-urls",
                Begun,
                [P, P, F, F, 422, 404, F, 422, 422],
            ),
            json!({"objects": [{"split_id": "s", "object_sha256": "ab".repeat(32)}]}),
        ),
        row(
            M::POST,
            "/v1/datasets/{dataset}/operations/{operation}/heartbeat",
            Begun,
            [P, P, F, F, 200, 404, F, 200, 200],
        ),
        row(
            M::POST,
            "/v1/datasets/{dataset}/operations/{operation}/publish",
            Uploaded,
            [P, P, F, F, 200, 404, F, 200, 200],
        ),
        row(
            M::POST,
            "/v1/datasets/{dataset}/operations/{operation}/abort",
            Begun,
            [P, P, F, F, 200, 404, F, 200, 200],
        ),
        wasm(
            row(
                M::POST,
                "/v1/policy/replay",
                Dataset,
                [P, P, F, F, F, F, F, 200, 200],
            ),
            "/v1/policy/replay?records=10",
        ),
        // The component is the active policy already: 412, past the access check.
        wasm(
            row(
                M::POST,
                "/v1/policy/swap",
                Dataset,
                [P, P, F, F, F, F, F, 412, 412],
            ),
            "/v1/policy/swap",
        ),
        // No swap to roll back: 412, past the access check.
        row(
            M::POST,
            "/v1/policy/rollback",
            Dataset,
            [P, P, F, F, F, F, F, 412, 412],
        ),
    ]
}

/// sha256("payload")
const PAYLOAD_SHA256: &str = "239f59ed55e737c77147cf55ad0c1b030b6d7ee748a7426952f9b852d5a935e5";

fn planned(operation: &str, split: &str) -> Value {
    json!({"operation_id": operation, "kind": "commit", "node": "writer-1",
        "splits": [{"split_id": split, "metadata_json": "{}", "size": 7,
        "sha256": PAYLOAD_SHA256}]})
}

/// A server whose tokens file names [`principals`], and each caller's secret.
struct Server {
    router: Router,
    shared: Arc<crate::Shared>,
    secrets: BTreeMap<&'static str, Option<String>>,
    _dir: tempfile::TempDir,
}

async fn server() -> Server {
    server_with_limits(crate::ServeLimits::default()).await
}

async fn server_with_limits(limits: crate::ServeLimits) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = String::from("# the access matrix's principals\n");
    let mut secrets = BTreeMap::new();
    let mut admin_token = None;
    for (name, secret, grants) in principals() {
        secrets.insert(name, secret.clone());
        match name {
            "admin-token" => admin_token = secret,
            _ if grants.is_empty() => {}
            _ => {
                let grants: Vec<Grant> = grants.iter().map(|g| Grant::parse(g).unwrap()).collect();
                lines.push_str(&tokens_file_line(name, secret.as_deref().unwrap(), &grants));
                lines.push('\n');
            }
        }
    }
    let path = dir.path().join("tokens");
    std::fs::write(&path, lines).unwrap();
    let shared = shared_with_limits(
        Credentials {
            tokens_file: Some(Arc::new(TokensFile::open(&path).unwrap())),
            admin_token,
        },
        limits,
    )
    .await;
    shared.ready.store(true, Ordering::SeqCst);
    Server {
        router: crate::routes::router(shared.clone()),
        shared,
        secrets,
        _dir: dir,
    }
}

impl Server {
    fn request(
        &self,
        caller: &str,
        method: Method,
        uri: &str,
        body: Option<(Vec<u8>, &str)>,
    ) -> Request<Body> {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(secret) = &self.secrets[caller] {
            request = request.header(header::AUTHORIZATION, format!("Bearer {secret}"));
        }
        match body {
            Some((bytes, content_type)) => request
                .header(header::CONTENT_TYPE, content_type)
                .body(Body::from(bytes))
                .unwrap(),
            None => request.body(Body::empty()).unwrap(),
        }
    }

    /// Sends as `root`, and insists on success.
    async fn prepare(&self, method: Method, uri: &str, body: Option<(Vec<u8>, &str)>, as_: &str) {
        let request = self.request(as_, method.clone(), uri, body);
        let (status, _, answer) = send(&self.router, request).await;
        assert!(
            status.is_success(),
            "setup {method} {uri}: {status} {answer}"
        );
    }

    /// Puts in place what `setup` says, on dataset `d`.
    async fn set_up(&self, setup: Setup, d: &str) {
        let json = |value: Value| Some((value.to_string().into_bytes(), "application/json"));
        self.prepare(
            Method::POST,
            "/v1/datasets",
            json(json!({"dataset_id": d})),
            "root",
        )
        .await;
        match setup {
            Setup::Dataset => {}
            Setup::Staged | Setup::Marked => {
                self.prepare(
                    Method::POST,
                    &format!("/v1/datasets/{d}/stage"),
                    json(json!({"mode": "create-only", "splits": [{"split_id": "s"}]})),
                    "root",
                )
                .await;
                if setup == Setup::Marked {
                    self.prepare(
                        Method::POST,
                        &format!("/v1/datasets/{d}/mark"),
                        json(json!({"split_ids": ["s"]})),
                        "root",
                    )
                    .await;
                }
            }
            Setup::Begun | Setup::Uploaded => {
                self.prepare(
                    Method::POST,
                    &format!("/v1/datasets/{d}/operations"),
                    json(planned("op", "s")),
                    "writer",
                )
                .await;
                if setup == Setup::Uploaded {
                    self.prepare(
                        Method::PUT,
                        &format!("/v1/datasets/{d}/operations/op/splits/s"),
                        Some((b"payload".to_vec(), "application/octet-stream")),
                        "writer",
                    )
                    .await;
                }
            }
        }
    }
}

/// Every route (the OpenAPI document's, all of them) by every caller: none, a wrong token,
/// read, write on another pattern, write, another writer, operate, admin, and the admin token.
/// Each cell runs on a dataset of its own, set up as its row needs. A refusal is the
/// documented JSON, with `WWW-Authenticate` on a 401; the same refusal for a dataset that does
/// not exist says the same thing (no answer tells whether a dataset exists).
#[tokio::test]
async fn access_every_route_by_every_caller_answers_as_the_matrix_says() {
    let server = server().await;
    let rows = rows();
    let document: Value = serde_json::from_str(&crate::routes::document_json()).unwrap();
    let documented: BTreeSet<(String, String)> = document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, methods)| {
            methods
                .as_object()
                .unwrap()
                .keys()
                .map(|method| (method.to_uppercase(), path.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    let in_matrix: BTreeSet<(String, String)> = rows
        .iter()
        .map(|row| (row.method.to_string(), row.route.to_owned()))
        .collect();
    assert_eq!(
        documented, in_matrix,
        "every route the document lists has a row in the access matrix, and no other: add one \
         for a new route (and its need to access::ROUTES)"
    );

    // A dataset no column but the admins may know of: no answer to anyone else names it.
    server
        .prepare(
            Method::POST,
            "/v1/datasets",
            json_body(json!({"dataset_id": SECRET_DATASET})),
            "root",
        )
        .await;
    let mut cells = 0;
    let mut refusals = BTreeMap::<u16, usize>::new();
    let mut successes = 0;
    let (mut refused_writes, mut writes_seen) = (0, 0);
    let mut bodies_checked = 0;
    for (r, row) in rows.iter().enumerate() {
        for (c, caller) in COLUMNS.iter().enumerate() {
            let n = r * COLUMNS.len() + c;
            let d = format!("logs-{n}");
            server.set_up(row.setup, &d).await;
            let fill = |text: &str| {
                text.replace("{dataset}", &d)
                    .replace("{operation}", "op")
                    .replace("{split}", "s")
                    .replace("{n}", &n.to_string())
            };
            let uri = fill(row.uri);
            let body = match row.bytes {
                Some((bytes, content_type)) => Some((bytes.to_vec(), content_type)),
                None if row.method == Method::GET => None,
                None => Some((fill(&row.body.to_string()).into_bytes(), "application/json")),
            };
            let at = format!("{} {uri} as {caller}", row.method);
            let before = fingerprint(&server).await;
            let response = server
                .router
                .clone()
                .oneshot(server.request(caller, row.method.clone(), &uri, body.clone()))
                .await
                .unwrap();
            let status = response.status();
            let challenge = response.headers().get(header::WWW_AUTHENTICATE).cloned();
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            assert_eq!(status.as_u16(), row.expected[c], "{at}: {answer}");
            cells += 1;
            // What the answer reveals: no dataset outside the caller's grants, in any body
            // (listings, status, errors, readiness). The cell's own dataset is the caller's
            // own input, so it is left out of the check.
            let text = String::from_utf8_lossy(&bytes)
                .replace(&fill("logs-new-{n}"), "{d}")
                .replace(&d, "{d}");
            if !["root", "admin-token"].contains(caller) {
                assert!(
                    !text.contains(SECRET_DATASET),
                    "{at} reveals a dataset: {text}"
                );
            }
            if ["none", "wrong", "other"].contains(caller) {
                assert!(!text.contains("logs-"), "{at} reveals a dataset: {text}");
            }
            bodies_checked += 1;
            // What a refusal changed: nothing.
            let after = fingerprint(&server).await;
            if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
                assert_eq!(before, after, "{at}: a refused request changed the catalog");
                refused_writes += usize::from(row.method != Method::GET);
            } else if before != after {
                writes_seen += 1;
            }
            match status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                    *refusals.entry(status.as_u16()).or_default() += 1;
                    let code = if status == StatusCode::UNAUTHORIZED {
                        "unauthorized"
                    } else {
                        "forbidden"
                    };
                    assert_eq!(answer["error"], code, "{at}: {answer}");
                    assert_eq!(answer["certainly_not_applied"], true, "{at}: {answer}");
                    assert_eq!(
                        challenge.is_some(),
                        status == StatusCode::UNAUTHORIZED,
                        "{at}: WWW-Authenticate on a 401 only"
                    );
                    if row.route.contains("{dataset}") {
                        let missing = uri.replace(&d, "logs-missing");
                        let (again, _, answer_missing) = send(
                            &server.router,
                            server.request(caller, row.method.clone(), &missing, body.clone()),
                        )
                        .await;
                        assert_eq!(again, status, "{at}, on a dataset that does not exist");
                        assert_eq!(
                            answer_missing.to_string().replace("logs-missing", &d),
                            answer.to_string(),
                            "{at}: a refusal must not say whether the dataset exists"
                        );
                    }
                }
                status if status.is_success() => successes += 1,
                _ => {}
            }
        }
    }
    println!(
        "access: {} routes × {} callers = {cells} cells as the matrix says: {successes} \
         successes, {} answered 401 and {} answered 403 (each the same for a dataset that does \
         not exist), the rest past the access check; {bodies_checked} bodies name no dataset \
         outside the caller's grants; {refused_writes} refused writes changed nothing, while \
         {writes_seen} cells' requests changed the store",
        documented.len(),
        COLUMNS.len(),
        refusals.get(&401).copied().unwrap_or(0),
        refusals.get(&403).copied().unwrap_or(0),
    );
    assert!(successes > 100 && refusals.len() == 2);
    // The fingerprint sees writes (else "changed nothing" would hold of anything).
    assert!(
        refused_writes > 100 && writes_seen > 30,
        "{refused_writes} {writes_seen}"
    );
}

/// The dataset of the matrix that only the admins may know of.
const SECRET_DATASET: &str = "payroll-secret";

/// Every object of the in-memory store the server's catalog and objects live in, with its
/// size and version: changes with any write.
async fn fingerprint(server: &Server) -> Vec<(String, u64, Option<String>)> {
    use futures::TryStreamExt;
    let (store, _) = server.shared.engine.objects().store();
    let mut objects: Vec<(String, u64, Option<String>)> = store
        .list(None)
        .map_ok(|meta| (meta.location.to_string(), meta.size, meta.e_tag))
        .try_collect()
        .await
        .unwrap();
    objects.sort();
    objects
}

fn json_body(value: Value) -> Option<(Vec<u8>, &'static str)> {
    Some((value.to_string().into_bytes(), "application/json"))
}

/// The splits of dataset `d`, as `root` lists them.
async fn split_ids(server: &Server, d: &str) -> Vec<String> {
    let request = server.request(
        "root",
        Method::GET,
        &format!("/v1/datasets/{d}/splits"),
        None,
    );
    let (status, _, answer) = send(&server.router, request).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer["splits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|split| split["split_id"].as_str().unwrap().to_owned())
        .collect()
}

/// A principal over its request rate is answered 429 with `Retry-After`, and its request is
/// not applied; another principal is not held back by it.
#[tokio::test]
async fn access_a_principal_over_its_rate_is_refused_and_nothing_is_applied() {
    let limits = crate::ServeLimits {
        principal: crate::quotas::PrincipalLimits {
            requests_per_second: 3,
            max_writes: 100,
        },
        ..crate::ServeLimits::default()
    };
    let server = server_with_limits(limits).await;
    server.set_up(Setup::Dataset, "logs-rate").await;
    let stage = |split: &str| {
        server.request(
            "writer",
            Method::POST,
            "/v1/datasets/logs-rate/stage",
            json_body(json!({"mode": "create-only", "splits": [{"split_id": split}]})),
        )
    };
    let mut answered = Vec::new();
    for n in 0..6 {
        let response = server
            .router
            .clone()
            .oneshot(stage(&format!("s{n}")))
            .await
            .unwrap();
        let retry_after = response.headers().get(header::RETRY_AFTER).cloned();
        answered.push((response.status(), retry_after));
    }
    // A bucket of 3 and 3 per second: the first three pass, and (unless a third of a second
    // passed in between) the next are refused.
    let passed = answered
        .iter()
        .filter(|(status, _)| status.is_success())
        .count();
    let refused: Vec<_> = answered
        .iter()
        .filter(|(status, _)| *status == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!(passed + refused.len(), 6, "{answered:?}");
    assert!((3..6).contains(&passed), "{answered:?}");
    assert!(
        refused
            .iter()
            .all(|(_, retry)| retry.as_ref().is_some_and(|v| v == "1")),
        "{answered:?}"
    );
    // Exactly the splits of the answers that passed were staged.
    let staged = split_ids(&server, "logs-rate").await;
    assert_eq!(staged.len(), passed, "{staged:?}");
    // Another principal has a bucket of its own: root's list above passed, and so does this.
    let (status, _, answer) = send(
        &server.router,
        server.request("root", Method::GET, "/v1/datasets/logs-rate", None),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    println!(
        "access: 6 stages at once by one principal at 3 per second: {passed} applied, {} \
         refused with 429 and Retry-After, {} splits staged; another principal served",
        refused.len(),
        staged.len()
    );
}

/// A principal with as many writes in flight as it may have is refused another (429), while
/// its reads and other principals' writes pass; once its write ends, it may write again.
#[tokio::test]
async fn access_a_principal_at_its_writes_in_flight_is_refused_another() {
    let limits = crate::ServeLimits {
        principal: crate::quotas::PrincipalLimits {
            requests_per_second: 1_000,
            max_writes: 1,
        },
        ..crate::ServeLimits::default()
    };
    let server = server_with_limits(limits).await;
    server.set_up(Setup::Begun, "logs-w").await;
    // The writer's upload, whose body does not arrive until the test says: a write in flight.
    let (feed, chunks) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(1);
    let body = Body::from_stream(futures::stream::unfold(chunks, |mut chunks| async move {
        chunks.recv().await.map(|chunk| (chunk, chunks))
    }));
    let mut upload = Request::builder()
        .method(Method::PUT)
        .uri("/v1/datasets/logs-w/operations/op/splits/s")
        .header(header::CONTENT_TYPE, "application/octet-stream");
    if let Some(secret) = &server.secrets["writer"] {
        upload = upload.header(header::AUTHORIZATION, format!("Bearer {secret}"));
    }
    let upload = upload.body(body).unwrap();
    let router = server.router.clone();
    let uploading = tokio::spawn(async move { router.oneshot(upload).await.unwrap() });
    let stage = |caller: &str, split: &str| {
        server.request(
            caller,
            Method::POST,
            "/v1/datasets/logs-w/stage",
            json_body(json!({"mode": "create-only", "splits": [{"split_id": split}]})),
        )
    };
    // The test's runtime has one thread: while the test sleeps, the upload's task runs until
    // it waits for its body, holding its slot.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(
        !uploading.is_finished(),
        "the upload ended before its body arrived"
    );
    let (status, _, refusal) = send(&server.router, stage("writer", "extra")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refusal}");
    assert_eq!(refusal["error"], "too_many_requests", "{refusal}");
    assert!(
        refusal["message"]
            .as_str()
            .unwrap()
            .contains("serve.principal_max_writes"),
        "{refusal}"
    );
    // Its reads pass, and so do another principal's writes.
    let (status, _, _) = send(
        &server.router,
        server.request(
            "writer",
            Method::GET,
            "/v1/datasets/logs-w/operations/op",
            None,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, answer) = send(&server.router, stage("writer2", "by-writer2")).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    // The upload ends (its whole payload sent): the slot is free again.
    feed.send(Ok(axum::body::Bytes::from_static(b"payload")))
        .await
        .unwrap();
    drop(feed);
    let uploaded = uploading.await.unwrap();
    assert_eq!(uploaded.status(), StatusCode::OK);
    let (status, _, answer) = send(&server.router, stage("writer", "after")).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let staged = split_ids(&server, "logs-w").await;
    assert!(staged.contains(&"after".to_owned()) && staged.contains(&"by-writer2".to_owned()));
    assert!(
        !staged.contains(&"extra".to_owned()),
        "the refused stage was applied"
    );
    println!(
        "access: a principal at 1 write in flight refused another (429), served its read and \
         another principal's write, and wrote again once its upload ended"
    );
}

/// The OpenAPI document gives each route's grant as `x-mend-grant`, in the words of the
/// Security section of docs/src/server.md: written out here by hand, route by route (not
/// derived from [`ROUTES`], which is what is under test).
#[test]
fn access_the_document_names_each_routes_grant() {
    const NONE: &str = "none";
    const ANY: &str = "any principal (answers list only the datasets it may read)";
    const READ: &str = "read on the dataset";
    const WRITE: &str = "write on the dataset";
    const OPERATE: &str = "operate on the dataset";
    const OWN: &str =
        "write on the dataset, and to be the principal that began the operation (or admin)";
    const ADMIN: &str = "admin";
    let operation = "/v1/datasets/{dataset}/operations/{operation}";
    let expected: BTreeMap<(String, String), String> = [
        ("GET", "/healthz".to_owned(), NONE),
        ("GET", "/readyz".to_owned(), NONE),
        ("GET", "/v1/openapi.json".to_owned(), NONE),
        (
            "GET",
            "/metrics".to_owned(),
            "read on every dataset (read:*)",
        ),
        (
            "GET",
            "/v1/fleet".to_owned(),
            "operate on every dataset (operate:*)",
        ),
        ("GET", "/v1/status".to_owned(), ANY),
        ("GET", "/v1/datasets".to_owned(), ANY),
        (
            "POST",
            "/v1/datasets".to_owned(),
            "write on some dataset, then on the dataset the body names",
        ),
        ("GET", "/v1/datasets/{dataset}".to_owned(), READ),
        ("POST", "/v1/datasets/{dataset}/config".to_owned(), OPERATE),
        ("POST", "/v1/datasets/{dataset}/fence".to_owned(), OPERATE),
        ("POST", "/v1/datasets/{dataset}/stage".to_owned(), WRITE),
        ("POST", "/v1/datasets/{dataset}/publish".to_owned(), WRITE),
        ("POST", "/v1/datasets/{dataset}/mark".to_owned(), WRITE),
        ("POST", "/v1/datasets/{dataset}/delete".to_owned(), WRITE),
        ("GET", "/v1/datasets/{dataset}/splits".to_owned(), READ),
        ("POST", "/v1/datasets/{dataset}/gc".to_owned(), OPERATE),
        (
            "POST",
            "/v1/datasets/{dataset}/reconcile".to_owned(),
            OPERATE,
        ),
        ("POST", "/v1/datasets/{dataset}/recover".to_owned(), OPERATE),
        ("GET", "/v1/datasets/{dataset}/verify".to_owned(), READ),
        ("GET", "/v1/datasets/{dataset}/audit".to_owned(), OPERATE),
        (
            "POST",
            "/v1/datasets/{dataset}/operations".to_owned(),
            WRITE,
        ),
        ("GET", operation.to_owned(), OWN),
        ("PUT", format!("{operation}/splits/{{split}}"), OWN),
        ("POST", format!("{operation}/upload-urls"), OWN),
        ("POST", format!("{operation}/heartbeat"), OWN),
        ("POST", format!("{operation}/publish"), OWN),
        ("POST", format!("{operation}/abort"), OWN),
        ("GET", "/v1/policy".to_owned(), ANY),
        ("POST", "/v1/policy/swap".to_owned(), ADMIN),
        ("POST", "/v1/policy/replay".to_owned(), ADMIN),
        ("POST", "/v1/policy/rollback".to_owned(), ADMIN),
    ]
    .into_iter()
    .map(|(method, path, grant)| ((method.to_owned(), path), grant.to_owned()))
    .collect();
    let document: Value = serde_json::from_str(&crate::routes::document_json()).unwrap();
    let mut documented = BTreeMap::new();
    for (path, methods) in document["paths"].as_object().unwrap() {
        for (method, operation) in methods.as_object().unwrap() {
            let grant = operation["x-mend-grant"].as_str().unwrap_or("(none given)");
            documented.insert((method.to_uppercase(), path.clone()), grant.to_owned());
        }
    }
    assert_eq!(documented, expected);
    println!(
        "access: the document names the grant of each of its {} routes as written here",
        documented.len()
    );
}

/// A method a listed route does not answer is the router's 405 (with `Allow`), for every
/// caller, credential or not: not a refusal, nor a route without a rule.
#[tokio::test]
async fn access_a_method_a_route_does_not_answer_is_405_for_every_caller() {
    let server = server().await;
    let mut answered = 0;
    for (method, uri) in [
        (Method::DELETE, "/v1/datasets/logs-x"),
        (Method::POST, "/healthz"),
        (Method::PUT, "/v1/policy/swap"),
    ] {
        for caller in COLUMNS {
            let (status, allow, answer) = send(
                &server.router,
                server.request(caller, method.clone(), uri, None),
            )
            .await;
            assert_eq!(
                status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {uri} as {caller}: {answer}"
            );
            assert!(!allow.is_empty(), "{method} {uri} as {caller}: no Allow");
            answered += 1;
        }
    }
    println!("access: {answered} requests with a method their route does not answer, each 405");
    assert_eq!(answered, 3 * COLUMNS.len());
}

/// A route the router has and the table does not list is served to nobody: 500 saying so,
/// for every caller, and its handler never runs. (Every route of mend's router is listed, as
/// the matrix shows; this router adds one that is not.)
#[tokio::test]
async fn access_a_route_without_a_rule_is_served_to_nobody() {
    let server = server().await;
    let shared = shared_with_limits(Credentials::default(), crate::ServeLimits::default()).await;
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let handler_ran = ran.clone();
    let router = Router::new()
        .route(
            "/v1/unlisted",
            axum::routing::get(move || {
                handler_ran.fetch_add(1, Ordering::SeqCst);
                async { "served" }
            }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .layer(axum::middleware::from_fn_with_state(shared.clone(), check))
        .with_state(shared);
    let mut refused = 0;
    for caller in COLUMNS {
        let request = server.request(caller, Method::GET, "/v1/unlisted", None);
        let (status, _, answer) = send(&router, request).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "as {caller}");
        assert!(
            answer["message"]
                .as_str()
                .is_some_and(|message| message.contains("has no access rule")),
            "as {caller}: {answer}"
        );
        refused += 1;
    }
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "the unlisted route's handler ran"
    );
    // The listed route beside it is served as its rule says.
    let (status, _, _) = send(
        &router,
        server.request("none", Method::GET, "/healthz", None),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    println!("access: a route without a rule refused to {refused} callers, its handler never run");
    assert_eq!(refused, COLUMNS.len());
}

/// A bearer secret the server does not know is 401 in words that say why: not one of the
/// tokens file's or the admin token's, or, on a server with neither, that it knows no token
/// at all (and how to give it one).
#[test]
fn access_an_unknown_token_is_refused_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    let known = format!("mend_{}", "11".repeat(32));
    let line = tokens_file_line("known", &known, &[Grant::parse("read:*").unwrap()]);
    std::fs::write(&path, format!("{line}\n")).unwrap();
    let file = Arc::new(TokensFile::open(&path).unwrap());
    let admin = format!("mend_{}", "22".repeat(32));
    let unknown = format!("mend_{}", "33".repeat(32));
    let not_known = "the token is not one this server knows";
    let knows_none = "this server has no tokens file and no admin token, so it knows no token";
    let servers = [
        (
            "a tokens file and an admin token",
            Some(file.clone()),
            Some(admin.clone()),
            not_known,
        ),
        ("a tokens file alone", Some(file), None, not_known),
        ("an admin token alone", None, Some(admin), not_known),
        ("neither", None, None, knows_none),
    ];
    let mut refused = 0;
    for (server, tokens_file, admin_token, words) in servers {
        let credentials = Credentials {
            tokens_file,
            admin_token,
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {unknown}")).unwrap(),
        );
        let refusal = credentials.authenticate(&headers, None).unwrap_err();
        assert_eq!(refusal.status().0, StatusCode::UNAUTHORIZED, "{server}");
        assert!(
            refusal.message().contains(words),
            "{server}: {}",
            refusal.message()
        );
        refused += 1;
    }
    println!("access: an unknown token refused by {refused} kinds of server, each saying why");
    assert_eq!(refused, 4);
}

/// Operations belong to the principal that began them, each by its own id: two writers each
/// begin an operation in one dataset, each drives its own, and neither sees the other's
/// (404, as if there were none). Idempotency keys are each principal's own: the same key
/// sent by both, with other requests, answers each its own.
#[tokio::test]
async fn access_each_principal_owns_its_operations_and_its_keys() {
    let server = server().await;
    let d = "logs-owners";
    server.set_up(Setup::Dataset, d).await;
    let mut checked = 0;
    for (caller, operation, split) in [("writer", "op-a", "s-a"), ("writer2", "op-b", "s-b")] {
        let request = server.request(
            caller,
            Method::POST,
            &format!("/v1/datasets/{d}/operations"),
            json_body(planned(operation, split)),
        );
        let (status, _, answer) = send(&server.router, request).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{caller} begins {operation}: {answer}"
        );
        checked += 1;
    }
    for (caller, operation, expected) in [
        ("writer", "op-a", StatusCode::OK),
        ("writer", "op-b", StatusCode::NOT_FOUND),
        ("writer2", "op-a", StatusCode::NOT_FOUND),
        ("writer2", "op-b", StatusCode::OK),
    ] {
        let uri = format!("/v1/datasets/{d}/operations/{operation}");
        let (status, _, answer) = send(
            &server.router,
            server.request(caller, Method::GET, &uri, None),
        )
        .await;
        assert_eq!(status, expected, "{caller} shows {operation}: {answer}");
        checked += 1;
    }
    // One key, two principals, two different stages: each is applied and answered as its own.
    for (caller, split) in [("writer", "k-a"), ("writer2", "k-b")] {
        let mut request = server.request(
            caller,
            Method::POST,
            &format!("/v1/datasets/{d}/stage"),
            json_body(json!({"mode": "create-only", "splits": [{"split_id": split}]})),
        );
        request
            .headers_mut()
            .insert("idempotency-key", HeaderValue::from_static("stage-1"));
        let (status, _, answer) = send(&server.router, request).await;
        assert_eq!(status, StatusCode::OK, "{caller} stages {split}: {answer}");
        assert_eq!(answer["splits"][0]["split_id"], split, "{caller}: {answer}");
        checked += 1;
    }
    let mut staged = split_ids(&server, d).await;
    staged.sort();
    assert_eq!(staged, ["k-a", "k-b", "s-a", "s-b"]);
    println!("access: two principals' operations and keys kept apart: {checked} answers checked");
    assert_eq!(checked, 8);
}

/// The routes over every dataset need their action on every dataset: `read:*` reads the
/// metrics and not the fleet, `operate:*` the fleet and not the metrics (the matrix's
/// principals hold patterns narrower than `*`, or admin). A 403 names the dataset the path
/// gives as it is when it is an id, and quoted when it is not.
#[tokio::test]
async fn access_routes_over_every_dataset_need_the_action_on_every_dataset() {
    let server = server().await;
    let mut checked = 0;
    for (caller, uri, expected) in [
        ("reader-all", "/metrics", StatusCode::OK),
        ("reader-all", "/v1/fleet", StatusCode::FORBIDDEN),
        ("operator-all", "/v1/fleet", StatusCode::OK),
        ("operator-all", "/metrics", StatusCode::FORBIDDEN),
    ] {
        let request = server.request(caller, Method::GET, uri, None);
        let (status, _, answer) = send(&server.router, request).await;
        assert_eq!(status, expected, "GET {uri} as {caller}");
        if expected == StatusCode::FORBIDDEN {
            let message = answer["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("on every dataset") && message.contains(caller),
                "GET {uri} as {caller}: {answer}"
            );
        }
        checked += 1;
    }
    for (uri, named) in [
        ("/v1/datasets/metrics-1", "dataset metrics-1:"),
        ("/v1/datasets/bad%20id", "dataset \"bad id\":"),
    ] {
        let (status, _, answer) = send(
            &server.router,
            server.request("reader", Method::GET, uri, None),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{uri}: {answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains(named), "{uri}: {named} in {message}");
        checked += 1;
    }
    println!("access: routes over every dataset and 403s naming ids: {checked} answers checked");
    assert_eq!(checked, 6);
}

/// Two `Authorization` headers are a 400 before anything else, whoever they name (a proxy in
/// front may read the other one): nothing is answered for either principal.
#[tokio::test]
async fn access_two_authorization_headers_are_refused() {
    let server = server().await;
    server.set_up(Setup::Dataset, "logs-two").await;
    let mut refused = 0;
    for (first, second) in [("reader", "root"), ("root", "reader"), ("root", "root")] {
        let mut request = server.request(first, Method::GET, "/v1/datasets/logs-two", None);
        let secret = server.secrets[second].clone().unwrap();
        request.headers_mut().append(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {secret}")).unwrap(),
        );
        let (status, _, answer) = send(&server.router, request).await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{first} then {second}: {answer}"
        );
        assert_eq!(answer["error"], "invalid_argument", "{answer}");
        assert!(
            answer["message"]
                .as_str()
                .is_some_and(|message| message.contains("one Authorization header")),
            "{answer}"
        );
        refused += 1;
    }
    // One header, as before, is served.
    let (status, _, answer) = send(
        &server.router,
        server.request("root", Method::GET, "/v1/datasets/logs-two", None),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    println!("access: {refused} requests with two Authorization headers refused with 400");
    assert_eq!(refused, 3);
}

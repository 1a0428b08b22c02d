//! The real `mend serve` over loopback HTTP, on the embedded default catalog (a local
//! directory): every route's happy path and its main failure, the admin token, a dataset
//! that cannot be served answering 503 while another serves, `RecoveryRequired` resolved by
//! the dataset's supervisor, a client disconnecting during an admitted write, and a graceful
//! shutdown waiting for one.

use crate::common;

use common::server::{ADMIN_TOKEN, ServerOptions, TestServer, parse_answer, request_bytes};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use mend::gates::{GateGuard, GateName, GateSession};
use serde_json::{Value, json};

/// A running `mend serve` (see `common::server`), answering as `(status, body)`.
struct Server(TestServer);

impl std::ops::Deref for Server {
    type Target = TestServer;

    fn deref(&self) -> &TestServer {
        &self.0
    }
}

impl Server {
    /// On the embedded default: `./mend-data` in `dir`.
    fn start(dir: &Path, admin_token: Option<&str>) -> Server {
        Server(TestServer::start(
            dir,
            ServerOptions {
                admin_token: admin_token.map(String::from),
                ..ServerOptions::default()
            },
        ))
    }

    /// On the Postgres of `MEND_TEST_DATABASE_URL` (scripts/with-postgres), objects in `dir`.
    fn start_on_postgres(dir: &Path) -> Server {
        let url = std::env::var("MEND_TEST_DATABASE_URL").expect(
            "MEND_TEST_DATABASE_URL is not set: run the Postgres tests under scripts/with-postgres",
        );
        std::fs::create_dir_all(dir.join("objects")).unwrap();
        Server(TestServer::start(
            dir,
            ServerOptions {
                catalog: Some(url),
                objects: Some(format!("file://{}", dir.join("objects").display())),
                ..ServerOptions::default()
            },
        ))
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let answer = self.0.request(method, path, token, body);
        (answer.status, answer.body)
    }

    fn get(&self, path: &str) -> (u16, Value) {
        self.request("GET", path, None, None)
    }

    fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.request("POST", path, None, Some(&body))
    }

    fn metrics(&self) -> String {
        match self.0.get("/metrics").body {
            Value::String(text) => text,
            other => panic!("metrics are text, got {other}"),
        }
    }

    /// Polls `done` for up to 30 s (`TestServer::wait_for`, with this wrapper's answers).
    fn wait_for(&self, what: &str, done: impl Fn(&Server) -> bool) {
        self.0.wait_for(what, |_| done(self));
    }
}

/// The value of the sample named exactly `series` (name and labels) in a metrics text.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

fn splits(ids: &[&str]) -> Value {
    Value::Array(
        ids.iter()
            .map(|id| json!({"split_id": id, "metadata": {"num_docs": 1, "time_range": {"start": 0, "end": 10}}}))
            .collect(),
    )
}

/// The supervisor's copy of the policy: a rebadged default policy (a custom section appended),
/// so a different digest with the same decisions.
pub(crate) fn second_policy(dir: &Path) -> PathBuf {
    let mut bytes = mend::runtime::DEFAULT_POLICY_WASM.to_vec();
    let name = b"mend-test-rebadge";
    let payload = b"second build";
    bytes.push(0); // custom section
    bytes.push((1 + name.len() + payload.len()) as u8);
    bytes.push(name.len() as u8);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(payload);
    let path = dir.join("second.wasm");
    std::fs::write(&path, bytes).unwrap();
    path
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Takes `dataset_id`'s gate as another process would, through the catalog's own gates.
fn hold_dataset_gate(
    runtime: &tokio::runtime::Runtime,
    catalog_url: &str,
    dataset_id: &str,
) -> GateGuard {
    runtime.block_on(async {
        let gates = mend::gates::open_gates(catalog_url).await.unwrap();
        gates
            .acquire_one(
                &GateSession::new(),
                GateName::dataset(dataset_id),
                Duration::from_secs(10),
            )
            .await
            .expect("take the dataset gate")
    })
}

#[test]
fn every_route_answers_its_happy_path_and_its_main_failure() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), None);
    let mut checked = 0;
    let mut expect = |what: &str, (status, body): (u16, Value), want: u16| -> Value {
        assert_eq!(status, want, "{what}: {body}");
        checked += 1;
        body
    };

    expect("healthz", server.get("/healthz"), 200);
    expect("readyz", server.get("/readyz"), 200);
    let created = expect(
        "create",
        server.post(
            "/v1/datasets",
            json!({"dataset_id": "d1", "staged_grace_period_ms": 1}),
        ),
        201,
    );
    assert_eq!(created["dataset_id"], "d1");
    let again = expect(
        "create twice",
        server.post("/v1/datasets", json!({"dataset_id": "d1"})),
        409,
    );
    assert_eq!(again["error"], "already_exists");
    assert_eq!(again["certainly_not_applied"], true);
    expect(
        "bad create",
        server.post("/v1/datasets", json!({"dataset": "x"})),
        400,
    );
    let listed = expect("list datasets", server.get("/v1/datasets"), 200);
    assert_eq!(listed.as_array().unwrap().len(), 1);
    expect("show", server.get("/v1/datasets/d1"), 200);
    let missing = expect("show missing", server.get("/v1/datasets/nope"), 404);
    assert_eq!(missing["error"], "not_found");

    let staged = expect(
        "stage",
        server.post(
            "/v1/datasets/d1/stage",
            json!({"mode": "create-only", "splits": splits(&["s1", "s2", "s3"])}),
        ),
        200,
    );
    assert_eq!(staged["splits"].as_array().unwrap().len(), 3);
    let no_mode = expect(
        "stage without mode",
        server.post("/v1/datasets/d1/stage", json!({"splits": splits(&["s9"])})),
        400,
    );
    assert!(
        no_mode["message"].as_str().unwrap().contains("mode"),
        "{no_mode}"
    );

    // Invariant 1 at every publish: splits whose objects were never written are refused,
    // named, and nothing is published.
    let without_objects = expect(
        "publish without the objects",
        server.post(
            "/v1/datasets/d1/publish",
            json!({"staged_split_ids": ["s1", "s2"]}),
        ),
        412,
    );
    assert_eq!(
        without_objects["ids"],
        json!(["s1", "s2"]),
        "{without_objects}"
    );
    assert!(
        server.get("/v1/datasets/d1/splits?state=published").1["splits"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // The storage system uploads them, straight to the store.
    let catalog_dir = dir.path().join("mend-data");
    let uid = server.get("/v1/datasets/d1").1["uid"]
        .as_str()
        .unwrap()
        .to_string();
    for id in ["s1", "s2"] {
        common::write_object(&catalog_dir, "d1", &uid, id);
    }
    let published = expect(
        "publish",
        server.post(
            "/v1/datasets/d1/publish",
            json!({"staged_split_ids": ["s1", "s2"]}),
        ),
        200,
    );
    assert_eq!(published["published"], json!(["s1", "s2"]));
    let unstaged = expect(
        "publish unknown",
        server.post(
            "/v1/datasets/d1/publish",
            json!({"staged_split_ids": ["zz"]}),
        ),
        404,
    );
    assert_eq!(unstaged["error"], "not_found");
    let upsert = expect(
        "upsert over published",
        server.post(
            "/v1/datasets/d1/stage",
            json!({"mode": "upsert", "splits": splits(&["s1"])}),
        ),
        412,
    );
    assert_eq!(upsert["ids"], json!(["s1"]));

    let page = expect(
        "list splits",
        server.get("/v1/datasets/d1/splits?state=published"),
        200,
    );
    assert_eq!(page["splits"].as_array().unwrap().len(), 2);
    expect(
        "list bad state",
        server.get("/v1/datasets/d1/splits?state=gone"),
        400,
    );
    expect(
        "list bad param",
        server.get("/v1/datasets/d1/splits?colour=red"),
        400,
    );

    let marked = expect(
        "mark",
        server.post("/v1/datasets/d1/mark", json!({"split_ids": ["s2"]})),
        200,
    );
    assert_eq!(marked["marked"], json!(["s2"]));
    expect(
        "delete",
        server.post("/v1/datasets/d1/delete", json!({"split_ids": ["s2"]})),
        200,
    );
    expect(
        "delete published",
        server.post("/v1/datasets/d1/delete", json!({"split_ids": ["s1"]})),
        412,
    );

    // s3 stays staged past its (1 ms) grace period: gc marks it.
    let gc = expect("gc", server.post("/v1/datasets/d1/gc", json!({})), 200);
    assert_eq!(gc["marked"], json!(["s3"]));
    expect(
        "gc missing",
        server.post("/v1/datasets/nope/gc", json!({})),
        404,
    );
    let reconcile = expect(
        "reconcile",
        server.post("/v1/datasets/d1/reconcile", json!({})),
        200,
    );
    assert_eq!(reconcile["adopted"], json!([]));
    let probe = expect(
        "probe",
        server.post("/v1/datasets/d1/recover", json!({"mode": "probe"})),
        200,
    );
    assert_eq!(probe["intents"], json!([]));
    expect(
        "recover bad mode",
        server.post("/v1/datasets/d1/recover", json!({"mode": "sideways"})),
        400,
    );
    let verify = expect("verify", server.get("/v1/datasets/d1/verify"), 200);
    // Every published split has its object.
    assert_eq!(verify["violations"], json!([]), "{verify}");

    let shown = server.get("/v1/datasets/d1").1;
    let config = expect(
        "apply config",
        server.post(
            "/v1/datasets/d1/config",
            json!({
                "expected_config_version": shown["config_version"],
                "config": {"staged_grace_period_ms": 5000, "deletion_grace_period_ms": 1, "policy_params": {}}
            }),
        ),
        200,
    );
    assert_eq!(config["config"]["staged_grace_period_ms"], 5000);
    expect(
        "apply config at a stale version",
        server.post(
            "/v1/datasets/d1/config",
            json!({
                "expected_config_version": shown["config_version"],
                "config": {"staged_grace_period_ms": 1, "deletion_grace_period_ms": 1, "policy_params": {}}
            }),
        ),
        412,
    );
    expect(
        "fence",
        server.post("/v1/datasets/d1/fence", json!({"token": "t1"})),
        200,
    );
    expect(
        "stage, publish without the token",
        server.post(
            "/v1/datasets/d1/stage",
            json!({"mode": "upsert", "splits": splits(&["s4"])}),
        ),
        200,
    );
    common::write_object(&catalog_dir, "d1", &uid, "s4");
    expect(
        "publish without the token",
        server.post(
            "/v1/datasets/d1/publish",
            json!({"staged_split_ids": ["s4"]}),
        ),
        412,
    );
    expect(
        "publish with the token",
        server.post(
            "/v1/datasets/d1/publish",
            json!({"staged_split_ids": ["s4"], "publish_token": "t1"}),
        ),
        200,
    );

    let status = expect("status", server.get("/v1/status"), 200);
    assert_eq!(status["datasets"][0]["dataset_id"], "d1");
    // A server alone is a fleet of one: it owns every dataset.
    let fleet = expect("fleet", server.get("/v1/fleet"), 200);
    assert_eq!(fleet["members"].as_array().map(Vec::len), Some(1));
    assert_eq!(status["datasets"][0]["owner"], fleet["replica_id"]);
    let policy = expect("policy", server.get("/v1/policy"), 200);
    assert_eq!(policy["digest"], status["policy_digest"]);
    expect("no route", server.get("/v2/anything"), 404);

    let metrics = server.metrics();
    for line in [
        "mend_decisions_total{kind=\"stage\",outcome=\"inserted\"} 4",
        "mend_decisions_total{kind=\"publish\",outcome=\"accepted\"} 2",
        // Refused by the rules (412): the upsert over s1, the publish without the objects and
        // the publish without the token; the publish of an unknown split (404) is not a
        // decision.
        "mend_decisions_total{kind=\"stage\",outcome=\"refused\"} 1",
        "mend_decisions_total{kind=\"publish\",outcome=\"refused\"} 2",
        "mend_active_policy_info{digest=\"sha256:",
        "mend_pending_intents{dataset=\"d1\"} 0",
        "mend_dataset_up{dataset=\"d1\"} 1",
        "mend_sweep_duration_seconds_count",
        "mend_http_requests_total{route=\"/v1/datasets/{dataset}/stage\",status=\"200\"}",
    ] {
        assert!(metrics.contains(line), "metrics lack {line:?}:\n{metrics}");
        checked += 1;
    }
    println!("server: {checked} answers checked over loopback HTTP");
}

/// `GET /v1/openapi.json` answers, without a token, the document committed as
/// `server/openapi.json`, and it documents the routes this file drives.
#[test]
fn the_openapi_document_is_served_as_committed() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), Some(ADMIN_TOKEN));
    let answer = server.0.get("/v1/openapi.json");
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let committed = concat!(env!("CARGO_MANIFEST_DIR"), "/../server/openapi.json");
    let committed: Value =
        serde_json::from_str(&std::fs::read_to_string(committed).unwrap()).unwrap();
    assert!(
        answer.body == committed,
        "the served document is not server/openapi.json: refresh it with \
         `MEND_UPDATE_OPENAPI=1 cargo test -p mend-server openapi`"
    );
    assert_eq!(answer.body["openapi"], "3.1.0");
    let paths = answer.body["paths"].as_object().unwrap();
    for (method, path) in [
        ("get", "/healthz"),
        ("get", "/v1/openapi.json"),
        ("post", "/v1/datasets"),
        ("post", "/v1/datasets/{dataset}/stage"),
        ("get", "/v1/datasets/{dataset}/splits"),
        (
            "put",
            "/v1/datasets/{dataset}/operations/{operation}/splits/{split}",
        ),
        ("post", "/v1/policy/swap"),
    ] {
        assert!(
            paths[path][method]["responses"].is_object(),
            "{method} {path} is not documented"
        );
    }
    // The document is a route like the others: another method is 405.
    let (status, body) = server.post("/v1/openapi.json", json!({}));
    assert_eq!(
        (status, body["error"].as_str()),
        (405, Some("method_not_allowed"))
    );
    println!(
        "server: /v1/openapi.json answered the committed document, {} paths",
        paths.len()
    );
}

#[test]
fn admin_requests_need_the_token_and_do_nothing_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let component = second_policy(dir.path());
    let mut checked = 0;
    {
        // A server without a token refuses every admin request.
        let server = Server::start(dir.path(), None);
        let (status, body) = server.request("POST", "/v1/policy/rollback", Some("anything"), None);
        assert_eq!(status, 401, "{body}");
        assert!(
            body["message"].as_str().unwrap().contains("no admin token"),
            "{body}"
        );
        checked += 1;
    }
    let server = Server::start(dir.path(), Some(ADMIN_TOKEN));
    server.post("/v1/datasets", json!({"dataset_id": "d1"}));
    let before = server.get("/v1/policy").1;
    let swap = json!({"component": component});
    for token in [None, Some("wrong")] {
        let (status, body) = server.request("POST", "/v1/policy/swap", token, Some(&swap));
        assert_eq!(status, 401, "{token:?}: {body}");
        let (status, _) = server.request("POST", "/v1/policy/rollback", token, None);
        assert_eq!(status, 401);
        let (status, _) = server.request(
            "POST",
            "/v1/datasets/d1/recover",
            token,
            Some(&json!({"mode": "exclusive"})),
        );
        assert_eq!(status, 401);
        let (status, _) = server.request("POST", "/v1/policy/replay", token, Some(&swap));
        assert_eq!(status, 401);
        checked += 4;
    }
    // Nothing happened: the same policy, no registry record, the fencing epoch unmoved.
    assert_eq!(server.get("/v1/policy").1, before);
    assert_eq!(server.get("/v1/datasets/d1").1["fencing_epoch"], 0);
    checked += 2;

    let (status, swapped) =
        server.request("POST", "/v1/policy/swap", Some(ADMIN_TOKEN), Some(&swap));
    assert_eq!(status, 200, "{swapped}");
    let after = server.get("/v1/policy").1;
    assert_ne!(after["digest"], before["digest"]);
    assert_eq!(after["digest"], swapped["record"]["digest"]);
    let (status, _) = server.request(
        "POST",
        "/v1/datasets/d1/recover",
        Some(ADMIN_TOKEN),
        Some(&json!({"mode": "exclusive"})),
    );
    assert_eq!(status, 200);
    assert_eq!(server.get("/v1/datasets/d1").1["fencing_epoch"], 1);
    let (status, rolled) = server.request("POST", "/v1/policy/rollback", Some(ADMIN_TOKEN), None);
    assert_eq!(status, 200, "{rolled}");
    assert_eq!(server.get("/v1/policy").1["digest"], before["digest"]);
    checked += 4;

    // A swap made by another process (the CLI, on the same deployment) reaches the running
    // server through the policy registry within an interval.
    let swapped_by_cli = common::mend(
        dir.path(),
        &["policy", "swap", component.to_str().unwrap(), "--json"],
    );
    assert!(swapped_by_cli.status.success(), "{swapped_by_cli:?}");
    server.wait_for("the server to follow the registry", |s| {
        s.get("/v1/policy").1["digest"] == after["digest"]
    });
    checked += 1;
    println!("server admin: {checked} checks");
}

#[test]
fn a_dataset_that_cannot_be_served_answers_503_while_another_serves() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), None);
    let mut checked = 0;
    for dataset in ["good", "broken"] {
        assert_eq!(
            server
                .post("/v1/datasets", json!({"dataset_id": dataset}))
                .0,
            201
        );
    }
    // A catalog file that cannot be read: the dataset's history is damaged.
    let damaged = common::next_log_file(&dir.path().join("mend-data"), "broken");
    std::fs::write(&damaged, b"{ not json").unwrap();

    // A request may meet the damage itself first (503 `corrupt`, and it wakes the
    // supervisor); then the supervisor's verdict holds for every request.
    server.wait_for("the supervisor to find the dataset unavailable", |s| {
        s.get("/v1/datasets/broken/splits").1["error"] == "dataset_unavailable"
    });
    let (status, body) = server.get("/v1/datasets/broken/splits");
    assert_eq!(status, 503);
    assert_eq!(body["error"], "dataset_unavailable");
    assert!(!body["reason"].as_str().unwrap().is_empty(), "{body}");
    let (status, _) = server.post(
        "/v1/datasets/broken/stage",
        json!({"mode": "upsert", "splits": splits(&["x"])}),
    );
    assert_eq!(status, 503, "never 404");
    checked += 3;

    for round in 0..5 {
        let id = format!("s{round}");
        let (status, body) = server.post(
            "/v1/datasets/good/stage",
            json!({"mode": "create-only", "splits": splits(&[&id])}),
        );
        assert_eq!(status, 200, "{body}");
        let uid = server.get("/v1/datasets/good").1["uid"]
            .as_str()
            .unwrap()
            .to_string();
        common::write_object(&dir.path().join("mend-data"), "good", &uid, &id);
        let (status, _) = server.post(
            "/v1/datasets/good/publish",
            json!({"staged_split_ids": [id]}),
        );
        assert_eq!(status, 200);
        checked += 2;
    }
    // The listings name the broken dataset with its reason and still list the good one.
    let listed = server.get("/v1/datasets");
    assert_eq!(listed.0, 200, "{}", listed.1);
    assert_eq!(listed.1[0]["dataset_id"], "broken");
    assert_eq!(listed.1[0]["error"], "corrupt");
    assert_eq!(listed.1[1]["dataset_id"], "good");
    let status = server.get("/v1/status");
    assert_eq!(status.0, 200);
    assert!(
        status.1["datasets"][0]["unreadable"].is_string(),
        "{}",
        status.1
    );
    checked += 2;
    // Ready, and nothing more: the probe answers anyone, so it names no dataset; the
    // status names the broken one, to a caller that may read it.
    let ready = server.get("/readyz");
    assert_eq!(ready.0, 200);
    assert_eq!(ready.1, serde_json::json!({"ready": true}));
    assert!(
        status.1["datasets"][0]["health"]["unavailable"].is_string(),
        "{}",
        status.1
    );
    assert!(
        server
            .metrics()
            .contains("mend_dataset_up{dataset=\"broken\"} 0")
    );
    checked += 2;

    // Repaired, it is served again without a restart.
    std::fs::remove_file(&damaged).unwrap();
    server.wait_for("the repaired dataset to serve", |s| {
        s.get("/v1/datasets/broken/splits").0 == 200
    });
    checked += 1;
    println!("server 503: {checked} checks");
}

#[test]
fn a_write_in_the_way_of_a_crashed_operation_gets_503_until_the_supervisor_rolls_it_forward() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), None);
    crashed_commit_waits_for_the_supervisor(&server, "d1");
    println!("server recovery_required [local directory]: 6 checks");
}

#[test]
fn the_server_and_its_supervisor_work_the_same_on_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_on_postgres(dir.path());
    // The database is shared with other tests: a dataset of our own.
    let dataset = format!("serve-{}", uuid::Uuid::new_v4().simple());
    crashed_commit_waits_for_the_supervisor(&server, &dataset);
    let path = format!("/v1/datasets/{dataset}/stage");
    let (status, _) = server.post(
        &path,
        json!({"mode": "create-only", "splits": splits(&["s2"])}),
    );
    assert_eq!(status, 200);
    let (status, _) = server.post(&path, json!({"splits": splits(&["s3"])}));
    assert_eq!(status, 400);
    println!("server recovery_required [postgres]: 8 checks");
}

/// A writer in another process crashes after staging s1, before publishing it, with a lease
/// of 3 s: a publish of s1 gets 503 `recovery_required` naming its operation, and once the
/// lease runs out the dataset's supervisor rolls the commit forward.
fn crashed_commit_waits_for_the_supervisor(server: &Server, dataset_id: &str) {
    let (status, body) = server.post("/v1/datasets", json!({"dataset_id": dataset_id}));
    assert_eq!(status, 201, "{body}");
    let runtime = runtime();
    runtime.block_on(async {
        let (catalog, objects) = mend::catalog::open_with(
            &server.catalog,
            server.objects.as_deref(),
            common::postgres_options(),
        )
        .await
        .unwrap();
        let engine = mend::Engine::new(
            catalog,
            objects,
            mend::runtime::PolicyRuntime::default_policy().unwrap(),
            mend::EngineOptions {
                intent_lease_ms: 3_000,
                ..mend::EngineOptions::default()
            },
        )
        .unwrap()
        // Before its publish: its steps are begin, the object, publish.
        .with_faults(Arc::new(mend::faults::CrashAt::new(3, false)));
        let crashed = engine
            .commit(&mend::engine::CommitRequest {
                dataset_id: dataset_id.into(),
                node: "crasher".into(),
                splits: vec![mend::engine::CommitSplit {
                    split_id: "s1".into(),
                    metadata_json: "{}".into(),
                    payload: bytes::Bytes::from_static(b"payload"),
                }],
                checkpoint_delta: None,
                publish_token: None,
            })
            .await;
        assert!(crashed.is_err(), "the writer crashed");
    });

    let (status, body) = server.post(
        &format!("/v1/datasets/{dataset_id}/publish"),
        json!({"staged_split_ids": ["s1"]}),
    );
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "recovery_required");
    assert!(body["operation_id"].as_str().is_some());
    // A stage of s1 is refused the same way, in both modes, by the stage's own check.
    let operation_id = body["operation_id"].clone();
    for mode in ["upsert", "create-only"] {
        let (status, body) = server.post(
            &format!("/v1/datasets/{dataset_id}/stage"),
            json!({"mode": mode, "splits": splits(&["s1", "s9"])}),
        );
        assert_eq!(status, 503, "{mode}: {body}");
        assert_eq!(body["error"], "recovery_required", "{mode}: {body}");
        assert_eq!(body["operation_id"], operation_id, "{mode}: {body}");
    }

    let published = format!("/v1/datasets/{dataset_id}/splits?state=published");
    server.wait_for("the supervisor to roll the commit forward", |s| {
        s.get(&published).1["splits"]
            .as_array()
            .is_some_and(|splits| splits.len() == 1)
    });
    // The sweep is counted when it ends, after the publish became visible. (On a shared
    // Postgres other datasets' supervisors count their sweeps too: at least one.)
    let series = "mend_decisions_total{kind=\"recovery\",outcome=\"roll_forward_executed\"}";
    server.wait_for("the sweep to be counted", |s| {
        metric(&s.metrics(), series).is_some_and(|count| count >= 1.0)
    });
}

/// A dataset with one abandoned staged split, and a gc of it the server has admitted and that
/// waits for the dataset's gate, which another process (this test) holds: the write is in
/// flight until the gate is released. Returns the runtime the gate lives on, the gate and
/// the client's connection.
fn gc_waiting_for_the_dataset_gate(
    server: &Server,
) -> (tokio::runtime::Runtime, GateGuard, TcpStream) {
    server.post(
        "/v1/datasets",
        json!({"dataset_id": "d1", "staged_grace_period_ms": 1}),
    );
    server.post(
        "/v1/datasets/d1/stage",
        json!({"mode": "create-only", "splits": splits(&["abandoned"])}),
    );
    let runtime = runtime();
    let held = hold_dataset_gate(&runtime, &server.catalog.clone(), "d1");
    let mut client = TcpStream::connect(server.address).unwrap();
    client
        .write_all(&request_bytes(
            "POST",
            "/v1/datasets/d1/gc",
            "application/json",
            None,
            b"{}",
        ))
        .unwrap();
    server.wait_for("the gc to be admitted", |s| {
        s.get("/v1/status").1["writes_in_flight"] == 1
    });
    (runtime, held, client)
}

#[test]
fn a_client_that_disconnects_never_cancels_an_admitted_write() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), None);
    let (runtime, held, client) = gc_waiting_for_the_dataset_gate(&server);
    drop(client); // the client goes away
    std::thread::sleep(Duration::from_millis(300));
    runtime.block_on(held.release()).unwrap();

    server.wait_for("the admitted gc to finish", |s| {
        s.get("/v1/datasets/d1/splits?state=marked_for_deletion").1["splits"]
            .as_array()
            .is_some_and(|splits| splits.len() == 1)
    });
    // The gc's effect shows before the gc has finished (its intent is deleted last).
    server.wait_for("the admitted gc to end", |s| {
        s.get("/v1/status").1["writes_in_flight"] == 0
    });
    println!("server disconnect: 2 checks");
}

#[test]
fn a_graceful_shutdown_lets_an_admitted_write_finish() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), None);
    let (runtime, held, mut client) = gc_waiting_for_the_dataset_gate(&server);
    let killed = Command::new("kill")
        .args(["-TERM", &server.0.child().id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        server.0.child().try_wait().unwrap().is_none(),
        "the server waits for the admitted write"
    );
    runtime.block_on(held.release()).unwrap();

    let mut answer = Vec::new();
    client.read_to_end(&mut answer).unwrap();
    let answer = parse_answer(&answer);
    let (status, body) = (answer.status, answer.body);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["marked"], json!(["abandoned"]));
    let exit = server.0.child().wait().unwrap();
    assert!(exit.success(), "{exit:?}: {}", server.log());
    println!("server shutdown: 3 checks");
}

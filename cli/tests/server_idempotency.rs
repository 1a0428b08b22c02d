//! The real `mend serve` over loopback, every mutating route under an `Idempotency-Key`: sent
//! twice with one key, each answers the same status and the same body both times (a create
//! answers 201 again, a delete whose rows went answers what it answered, a config apply whose
//! version moved answers its promotion, a swap answers its swap); the same key with another
//! body is 400 `invalid_argument` naming the key; a bad key is 400.

use crate::common;

use std::path::{Path, PathBuf};

use common::server::{ADMIN_TOKEN, Answer, ServerOptions, TestServer};
use serde_json::{Value, json};

/// The default policy with a custom section appended: another digest, the same decisions.
fn second_policy(dir: &Path) -> PathBuf {
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

/// One keyed request: its route, the token it needs, its body.
struct Keyed<'a> {
    path: &'a str,
    token: Option<&'a str>,
    body: Value,
}

impl Keyed<'_> {
    fn send(&self, server: &TestServer, key: &str) -> Answer {
        server.keyed_request("POST", self.path, self.token, key, Some(&self.body))
    }

    fn send_other(&self, server: &TestServer, key: &str, body: &Value) -> Answer {
        server.keyed_request("POST", self.path, self.token, key, Some(body))
    }
}

/// Sends `request` twice under `key`: both answers must be `status`, with the same body.
fn twice(server: &TestServer, request: &Keyed, key: &str, status: u16) -> Value {
    let first = request.send(server, key);
    assert_eq!(
        first.status, status,
        "{} under {key}: {}",
        request.path, first.body
    );
    let again = request.send(server, key);
    assert_eq!(
        (again.status, &again.body),
        (first.status, &first.body),
        "{} under {key}: the retry answered otherwise",
        request.path
    );
    first.body
}

fn refused(answer: &Answer, mentions: &str) {
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(answer.body["error"], "invalid_argument", "{}", answer.body);
    let message = answer.body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(mentions),
        "{message} should name {mentions}"
    );
}

fn split_ids(body: &Value) -> Vec<String> {
    body["splits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["split_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_mutating_route_answers_a_keyed_retry_as_it_answered_first() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let server = TestServer::start(dir, ServerOptions::admin());
    let catalog_dir = dir.join("mend-data");
    let admin = Some(ADMIN_TOKEN);
    let mut requests = 0;
    let mut refusals = 0;

    // A staged split untouched for 1 ms is abandoned: gc has something to collect.
    let create = Keyed {
        path: "/v1/datasets",
        token: None,
        body: json!({"dataset_id": "d1", "staged_grace_period_ms": 1}),
    };
    let created = twice(&server, &create, "create-1", 201);
    let uid = created["uid"].as_str().unwrap().to_string();
    let other = json!({"dataset_id": "d1", "staged_grace_period_ms": 2});
    refused(&create.send_other(&server, "create-1", &other), "create-1");
    let plain = server.post("/v1/datasets", create.body.clone());
    assert_eq!(plain.status, 409, "without a key a second create is 409");
    requests += 1;
    refusals += 1;

    let config = Keyed {
        path: "/v1/datasets/d1/config",
        token: None,
        body: json!({"expected_config_version": 1, "config": {
            "staged_grace_period_ms": 1, "deletion_grace_period_ms": 500000}}),
    };
    let applied = twice(&server, &config, "config-1", 200);
    assert_eq!(applied["config_version"], 2);
    let plain = server.post(config.path, config.body.clone());
    assert_eq!(plain.status, 412, "without a key the stale version is 412");
    let other = json!({"expected_config_version": 1, "config": {
        "staged_grace_period_ms": 5, "deletion_grace_period_ms": 500000}});
    refused(&config.send_other(&server, "config-1", &other), "config-1");
    requests += 1;
    refusals += 1;

    let fence = Keyed {
        path: "/v1/datasets/d1/fence",
        token: None,
        body: json!({"token": "t1"}),
    };
    assert_eq!(
        twice(&server, &fence, "fence-1", 200)["publish_token"],
        "t1"
    );
    refused(
        &fence.send_other(&server, "fence-1", &json!({"token": "t2"})),
        "fence-1",
    );
    let unfence = Keyed {
        body: json!({"clear": true}),
        ..fence
    };
    assert_eq!(
        twice(&server, &unfence, "fence-2", 200)["publish_token"],
        Value::Null
    );
    requests += 2;
    refusals += 1;

    let stage = Keyed {
        path: "/v1/datasets/d1/stage",
        token: None,
        body: json!({"mode": "create-only", "splits": [
            {"split_id": "s1"}, {"split_id": "s2"}, {"split_id": "s3"}]}),
    };
    let staged = twice(&server, &stage, "stage-1", 200);
    assert!(staged.to_string().contains("inserted"), "{staged}");
    refused(
        &stage.send_other(
            &server,
            "stage-1",
            &json!({"mode": "create-only", "splits": [{"split_id": "s4"}]}),
        ),
        "stage-1",
    );
    for id in ["s1", "s2", "s3", "orphan"] {
        common::write_object(&catalog_dir, "d1", &uid, id);
    }
    requests += 1;
    refusals += 1;

    let publish = Keyed {
        path: "/v1/datasets/d1/publish",
        token: None,
        body: json!({"staged_split_ids": ["s1", "s2"]}),
    };
    let published = twice(&server, &publish, "publish-1", 200);
    let plain = server.post(publish.path, publish.body.clone());
    assert_eq!(
        plain.status, 412,
        "without a key the splits are no longer staged"
    );
    refused(
        &publish.send_other(&server, "publish-1", &json!({"staged_split_ids": ["s1"]})),
        "publish-1",
    );
    requests += 1;
    refusals += 1;

    let mark = Keyed {
        path: "/v1/datasets/d1/mark",
        token: None,
        body: json!({"split_ids": ["s2"]}),
    };
    assert_eq!(
        twice(&server, &mark, "mark-1", 200)["marked"],
        json!(["s2"])
    );
    refused(
        &mark.send_other(&server, "mark-1", &json!({"split_ids": ["s1"]})),
        "mark-1",
    );
    let delete = Keyed {
        path: "/v1/datasets/d1/delete",
        token: None,
        body: json!({"split_ids": ["s2"]}),
    };
    assert_eq!(
        twice(&server, &delete, "delete-1", 200)["deleted"],
        json!(["s2"])
    );
    let plain = server.post(delete.path, delete.body.clone());
    assert_eq!(plain.status, 404, "without a key the rows are gone");
    refused(
        &delete.send_other(&server, "delete-1", &json!({"split_ids": ["s1"]})),
        "delete-1",
    );
    requests += 2;
    refusals += 2;

    std::thread::sleep(std::time::Duration::from_millis(20));
    let gc = Keyed {
        path: "/v1/datasets/d1/gc",
        token: None,
        body: json!({}),
    };
    let collected = twice(&server, &gc, "gc-1", 200);
    assert_eq!(collected["marked"], json!(["s3"]), "{collected}");
    let plain = server.post(gc.path, json!({}));
    assert_eq!(plain.body["marked"], json!([]), "a new gc finds nothing");
    refused(
        &gc.send_other(&server, "gc-1", &json!({"node": "other"})),
        "gc-1",
    );
    let reconcile = Keyed {
        path: "/v1/datasets/d1/reconcile",
        token: None,
        body: json!({}),
    };
    let reconciled = twice(&server, &reconcile, "reconcile-1", 200);
    assert_eq!(reconciled["adopted"], json!(["orphan"]), "{reconciled}");
    refused(
        &reconcile.send_other(&server, "reconcile-1", &json!({"node": "other"})),
        "reconcile-1",
    );
    let recover = Keyed {
        path: "/v1/datasets/d1/recover",
        token: None,
        body: json!({"mode": "roll-forward"}),
    };
    twice(&server, &recover, "recover-1", 200);
    let exclusive = Keyed {
        token: admin,
        body: json!({"mode": "exclusive"}),
        ..recover
    };
    refused(&exclusive.send(&server, "recover-1"), "recover-1");
    // A probe is a read: under any key it answers, and records nothing.
    let probe = Keyed {
        body: json!({"mode": "probe"}),
        ..recover
    };
    twice(&server, &probe, "probe-1", 200);
    requests += 4;
    refusals += 3;

    let component = second_policy(dir);
    let swap = Keyed {
        path: "/v1/policy/swap",
        token: admin,
        body: json!({"component": component, "records": 100}),
    };
    let swapped = twice(&server, &swap, "swap-1", 200);
    assert_eq!(swapped["record"]["change"], "swap");
    let plain = server.request("POST", swap.path, admin, Some(&swap.body));
    assert_eq!(
        plain.status, 412,
        "without a key: already the active policy"
    );
    refused(
        &swap.send_other(
            &server,
            "swap-1",
            &json!({"component": component, "records": 5}),
        ),
        "swap-1",
    );
    let rollback = Keyed {
        path: "/v1/policy/rollback",
        token: admin,
        body: json!({}),
    };
    let rolled_back = twice(&server, &rollback, "rollback-1", 200);
    assert_eq!(rolled_back["change"], "rollback");
    assert_eq!(
        server.get("/v1/policy").body["record"]["version"],
        rolled_back["version"],
        "a retried rollback rolled back again"
    );
    refused(&rollback.send(&server, "swap-1"), "swap-1");
    requests += 2;
    refusals += 2;

    // What the retries left: the rows as the first requests made them.
    let listed = server.get("/v1/datasets/d1/splits");
    assert_eq!(split_ids(&listed.body), ["orphan", "s1", "s3"]);
    assert_eq!(published["published"], json!(["s1", "s2"]));
    println!(
        "server idempotency: {requests} keyed requests on 12 routes each answered their retry as they answered first; {refusals} reuses of a key for another body refused"
    );
}

#[test]
fn a_bad_idempotency_key_is_refused_on_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let server = TestServer::start(dir, ServerOptions::admin());
    assert_eq!(
        server
            .post("/v1/datasets", json!({"dataset_id": "d1"}))
            .status,
        201
    );
    let admin = Some(ADMIN_TOKEN);
    let routes: [(&str, Option<&str>, Value); 12] = [
        ("/v1/datasets", None, json!({"dataset_id": "d2"})),
        (
            "/v1/datasets/d1/config",
            None,
            json!({"expected_config_version": 1, "config": {
                "staged_grace_period_ms": 5, "deletion_grace_period_ms": 5}}),
        ),
        ("/v1/datasets/d1/fence", None, json!({"token": "t"})),
        (
            "/v1/datasets/d1/stage",
            None,
            json!({"mode": "upsert", "splits": [{"split_id": "s1"}]}),
        ),
        (
            "/v1/datasets/d1/publish",
            None,
            json!({"staged_split_ids": ["s1"]}),
        ),
        ("/v1/datasets/d1/mark", None, json!({"split_ids": ["s1"]})),
        ("/v1/datasets/d1/delete", None, json!({"split_ids": ["s1"]})),
        ("/v1/datasets/d1/gc", None, json!({})),
        ("/v1/datasets/d1/reconcile", None, json!({})),
        ("/v1/datasets/d1/recover", None, json!({"mode": "probe"})),
        (
            "/v1/policy/swap",
            admin,
            json!({"component": second_policy(dir)}),
        ),
        ("/v1/policy/rollback", admin, json!({})),
    ];
    let long = "k".repeat(200);
    let mut refusals = 0;
    for (path, token, body) in &routes {
        for (key, mentions) in [("op:mine", "op:"), (long.as_str(), "idempotency key")] {
            let answer = server.keyed_request("POST", path, *token, key, Some(body));
            assert_eq!(
                answer.status, 400,
                "{path} under {key:.20}: {}",
                answer.body
            );
            assert_eq!(answer.body["error"], "invalid_argument", "{path}");
            let message = answer.body["message"].as_str().unwrap_or_default();
            assert!(message.contains(mentions), "{path}: {message}");
            refusals += 1;
        }
    }
    // Nothing happened: no dataset d2, no rows, no token, no swap.
    assert_eq!(server.get("/v1/datasets/d2").status, 404);
    let d1 = server.get("/v1/datasets/d1").body;
    assert_eq!(
        (d1["config_version"].as_u64(), &d1["publish_token"]),
        (Some(1), &Value::Null)
    );
    assert_eq!(
        split_ids(&server.get("/v1/datasets/d1/splits").body).len(),
        0
    );
    assert_eq!(server.get("/v1/policy").body["record"], Value::Null);
    println!(
        "server idempotency: {refusals} bad keys refused with 400 on {} routes, nothing changed",
        routes.len()
    );
}

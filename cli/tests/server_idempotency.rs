//! The real `mend serve` over loopback, every mutating route under an `Idempotency-Key`: sent
//! twice with one key, each answers the same status and the same body both times (a create
//! answers 201 again, a delete whose rows went answers what it answered, a config apply whose
//! version moved answers its promotion, a swap answers its swap); the same key with another
//! body is 400 `invalid_argument` naming the key; a bad key is 400.
//!
//! Each keyed retry is held against the same request without a key, sent when the two must
//! answer differently, so that a server that ignored keys would fail: a fence is retried after
//! the token moved on (the keyed retry answers its first answer and fences nothing; without a
//! key the fence is set again), a roll-forward after it settled an operation whose writer went
//! away (the keyed retry answers what it settled; without a key there is nothing left). A
//! probe is a read, so it is the other way round: its retry under the same key answers what is
//! pending now, as a probe without a key does, and the key stays free for another request.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// The operation ids of a recovery report's intents.
fn intent_ids(report: &Value) -> Vec<&str> {
    report["intents"]
        .as_array()
        .unwrap_or_else(|| panic!("a recovery report: {report}"))
        .iter()
        .map(|intent| intent["operation_id"].as_str().unwrap())
        .collect()
}

/// Creates `dataset` and begins operation `operation_id` on it (one planned split, no
/// upload) with a lease of `lease_ms`: an intent for recovery to find.
fn begin_operation(server: &TestServer, dataset: &str, operation_id: &str, lease_ms: u64) {
    let created = server.post("/v1/datasets", json!({"dataset_id": dataset}));
    assert_eq!(created.status, 201, "{}", created.body);
    let payload = b"payload of a writer that went away";
    let begun = server.post(
        &format!("/v1/datasets/{dataset}/operations"),
        json!({
            "operation_id": operation_id,
            "kind": "commit",
            "node": "lost-writer",
            "lease_ms": lease_ms,
            "splits": [{
                "split_id": format!("{operation_id}.s0"),
                "metadata_json": "{}",
                "size": payload.len(),
                "sha256": mend::objects::format::sha256(payload),
            }],
        }),
    );
    assert!(
        matches!(begun.status, 200 | 201),
        "begin {operation_id}: {}",
        begun.body
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
    // No supervisor round during the test (an hour apart; the first one, at the start, finds
    // nothing): the operation left to recovery below is the keyed roll-forward's to settle.
    let options = ServerOptions::admin().with_settings(&["serve.supervisor_interval_ms=3600000"]);
    let server = TestServer::start(dir, options);
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

    // A fence to the token the dataset already has changes nothing, so its retry answers the
    // same with the key ignored: the token moves on before the retry.
    let fence = Keyed {
        path: "/v1/datasets/d1/fence",
        token: None,
        body: json!({"token": "t1"}),
    };
    let fenced = twice(&server, &fence, "fence-1", 200);
    assert_eq!(fenced["publish_token"], "t1");
    refused(
        &fence.send_other(&server, "fence-1", &json!({"token": "t2"})),
        "fence-1",
    );
    retried_after_the_token_moved(&server, &fence, "fence-1", &fenced, "t2");
    let unfence = Keyed {
        body: json!({"clear": true}),
        ..fence
    };
    let unfenced = twice(&server, &unfence, "fence-2", 200);
    assert_eq!(unfenced["publish_token"], Value::Null);
    retried_after_the_token_moved(&server, &unfence, "fence-2", &unfenced, "t3");
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
    // Recovery with nothing pending answers the same with the key ignored: on a dataset of its
    // own, an operation whose writer went away, its lease of a second run out.
    begin_operation(&server, "d2", "lost-1", 1_000);
    std::thread::sleep(Duration::from_millis(1_200));
    let recover = Keyed {
        path: "/v1/datasets/d2/recover",
        token: None,
        body: json!({"mode": "roll-forward"}),
    };
    let recovered = twice(&server, &recover, "recover-1", 200);
    assert_eq!(intent_ids(&recovered), ["lost-1"], "{recovered}");
    let plain = server.post(recover.path, recover.body.clone());
    assert_eq!(plain.status, 200, "{}", plain.body);
    assert_eq!(
        intent_ids(&plain.body),
        Vec::<&str>::new(),
        "without a key the roll-forward finds the operation settled"
    );
    let again = recover.send(&server, "recover-1");
    assert_eq!(
        (again.status, &again.body),
        (200, &recovered),
        "the keyed retry answers what it settled, after the request without a key"
    );
    let exclusive = Keyed {
        token: admin,
        body: json!({"mode": "exclusive"}),
        ..recover
    };
    // Keys are per principal: the admin token's `recover-1` is its own, not the anonymous
    // request's above, so it runs (and answers its retry as it answered first); the admin's
    // own key reused for another request is refused.
    twice(&server, &exclusive, "recover-1", 200);
    let roll_forward_as_admin = Keyed {
        token: admin,
        body: json!({"mode": "roll-forward"}),
        ..recover
    };
    refused(
        &roll_forward_as_admin.send(&server, "recover-1"),
        "recover-1",
    );
    // A probe is a read: under any key it answers what is pending now, and records nothing.
    // On a dataset of its own, an operation whose writer is alive (a long lease, which no
    // supervisor settles), then aborted by it.
    begin_operation(&server, "d3", "live-1", 600_000);
    let probe = Keyed {
        path: "/v1/datasets/d3/recover",
        token: None,
        body: json!({"mode": "probe"}),
    };
    let probed = probe.send(&server, "probe-1");
    assert_eq!(probed.status, 200, "{}", probed.body);
    assert_eq!(intent_ids(&probed.body), ["live-1"], "{}", probed.body);
    let aborted = server.post("/v1/datasets/d3/operations/live-1/abort", json!({}));
    assert_eq!(aborted.status, 200, "{}", aborted.body);
    let reprobed = probe.send(&server, "probe-1");
    assert_eq!(reprobed.status, 200, "{}", reprobed.body);
    assert_eq!(
        intent_ids(&reprobed.body),
        Vec::<&str>::new(),
        "a probe retried under its key answers what is pending now, not its first answer"
    );
    let plain = server.post(probe.path, probe.body.clone());
    assert_eq!(
        (plain.status, &plain.body),
        (200, &reprobed.body),
        "a probe answers alike with and without a key"
    );
    let under_probe_key = Keyed {
        body: json!({"mode": "roll-forward"}),
        ..probe
    }
    .send(&server, "probe-1");
    assert_eq!(
        under_probe_key.status, 200,
        "a probe's key holds no record: another request may use it: {}",
        under_probe_key.body
    );
    requests += 4;
    refusals += 1;

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
        "server idempotency: {requests} keyed requests on 12 routes each answered their retry as they answered first (a fence and a roll-forward also after the state moved on, unlike the same request without a key); a probe's retry under its key answered what was pending at the retry, its key left free; {refusals} reuses of a key for another body refused"
    );
}

/// `keyed` was sent under `key` and answered `first`; the fence then moved to `other`
/// without a key. The keyed retry answers `first` and leaves `other` in place; the same
/// request without a key fences again, as a new change of the dataset.
fn retried_after_the_token_moved(
    server: &TestServer,
    keyed: &Keyed,
    key: &str,
    first: &Value,
    other: &str,
) {
    let moved = server.post(keyed.path, json!({"token": other}));
    assert_eq!(moved.status, 200, "{}", moved.body);
    let retried = keyed.send(server, key);
    assert_eq!(
        (retried.status, &retried.body),
        (200, first),
        "{} under {key}, retried after the token moved to {other}",
        keyed.path
    );
    let dataset = keyed.path.trim_end_matches("/fence");
    assert_eq!(
        server.get(dataset).body["publish_token"],
        other,
        "the keyed retry fenced again"
    );
    let plain = server.post(keyed.path, keyed.body.clone());
    assert_eq!(plain.status, 200, "{}", plain.body);
    assert_eq!(plain.body["publish_token"], first["publish_token"]);
    assert!(
        plain.body["manifest_version"].as_u64() > first["manifest_version"].as_u64(),
        "without a key the fence is set again, a new version of the dataset: {} after {first}",
        plain.body
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

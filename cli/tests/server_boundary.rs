//! The edges of the HTTP API, through the real server: numbers out of range, ids outside the
//! alphabet, caps on sizes and pages, names that look like other names, and the messages that
//! used to mislead. Each is a 400 (or the 412 a precondition is) with the documented JSON,
//! naming the field, cap or range, and changes nothing.

use crate::common;

use common::server::{Answer, ServerOptions, TestServer};
use serde_json::{Value, json};

fn start(dir: &std::path::Path) -> TestServer {
    TestServer::start(
        dir,
        ServerOptions::default().with_settings(&["limits.max_stage_batch=10"]),
    )
}

/// A refusal with `status` whose message holds every one of `mentions`.
fn refused(what: &str, answer: &Answer, status: u16, mentions: &[&str]) -> usize {
    assert_eq!(answer.status, status, "{what}: {answer:?}");
    let message = answer.body["message"].as_str().unwrap_or_default();
    assert!(!message.contains('\n'), "{what}: one line: {message:?}");
    for mention in mentions {
        assert!(
            message.contains(mention),
            "{what}: {message:?} should name {mention:?}"
        );
    }
    assert_eq!(answer.body["certainly_not_applied"], true, "{what}");
    1
}

fn splits(ids: &[&str]) -> Value {
    Value::Array(
        ids.iter()
            .map(|id| json!({"split_id": id, "metadata": {"num_docs": 1}}))
            .collect(),
    )
}

fn listed(server: &TestServer, dataset: &str) -> Vec<Value> {
    server.get(&format!("/v1/datasets/{dataset}/splits")).body["splits"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn numbers_ids_caps_and_names_are_refused_at_the_edge() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut checks = 0;

    // Item 1: a grace period out of range, at create and at config apply.
    for (field, value) in [
        ("staged_grace_period_ms", json!(18446744073709551615u64)),
        ("deletion_grace_period_ms", json!(18446744073709551615u64)),
        ("staged_grace_period_ms", json!(0)),
    ] {
        let answer = server.post("/v1/datasets", json!({"dataset_id": "d", field: value}));
        checks += refused("create out of range", &answer, 400, &[field, "..="]);
    }
    assert_eq!(server.get("/v1/datasets/d").status, 404);
    assert_eq!(
        server
            .post("/v1/datasets", json!({"dataset_id": "d"}))
            .status,
        201
    );
    let shown = server.get("/v1/datasets/d").body;
    let answer = server.post(
        "/v1/datasets/d/config",
        json!({
            "expected_config_version": shown["config_version"],
            "config": {"staged_grace_period_ms": 18446744073709551615u64, "deletion_grace_period_ms": 1, "policy_params": {}}
        }),
    );
    checks += refused(
        "config out of range",
        &answer,
        400,
        &["staged_grace_period_ms", "1..=3155760000000"],
    );
    assert_eq!(server.get("/v1/datasets/d").body["config"], shown["config"]);
    checks += 2;

    // Item 3: ids outside the one alphabet.
    for id in ["a#12", "a%20b", "日本", "a?b", "a b"] {
        let answer = server.post(
            "/v1/datasets/d/stage",
            json!({"mode": "create-only", "splits": splits(&[id])}),
        );
        checks += refused("split id", &answer, 400, &["split id", "ASCII letters"]);
    }
    // Item 11: leading or trailing spaces, a byte order mark, a bidi control; the message
    // quotes at most 64 characters of the id.
    for id in [" a", "a ", "\u{FEFF}a", "a\u{202E}b"] {
        let answer = server.post(
            "/v1/datasets/d/stage",
            json!({"mode": "create-only", "splits": splits(&[id])}),
        );
        checks += refused("split id", &answer, 400, &["split id"]);
    }
    let long = format!("{}#", "y".repeat(1000));
    let answer = server.post(
        "/v1/datasets/d/stage",
        json!({"mode": "create-only", "splits": splits(&[&long])}),
    );
    checks += refused("long id", &answer, 400, &[&format!("{}…", "y".repeat(64))]);
    assert!(
        !answer.body["message"]
            .as_str()
            .unwrap()
            .contains(&"y".repeat(65))
    );
    assert!(
        listed(&server, "d").is_empty(),
        "a refused stage wrote a row"
    );
    checks += 1;

    // Item 9: caps on metadata bytes, splits per request and page size.
    let big = json!([{"split_id": "big", "metadata": {"blob": "x".repeat(9_000)}}]);
    let answer = server.post(
        "/v1/datasets/d/stage",
        json!({"mode": "create-only", "splits": big}),
    );
    checks += refused(
        "metadata cap",
        &answer,
        400,
        &["limits.max_metadata_bytes", "8192"],
    );
    let eleven: Vec<String> = (0..11).map(|i| format!("s{i}")).collect();
    let eleven: Vec<&str> = eleven.iter().map(String::as_str).collect();
    let answer = server.post(
        "/v1/datasets/d/stage",
        json!({"mode": "create-only", "splits": splits(&eleven)}),
    );
    checks += refused("batch cap", &answer, 400, &["limits.max_stage_batch", "10"]);
    let answer = server.post(
        "/v1/datasets/d/publish",
        json!({"staged_split_ids": eleven}),
    );
    checks += refused("publish cap", &answer, 400, &["limits.max_stage_batch"]);
    let answer = server.post("/v1/datasets/d/mark", json!({"split_ids": eleven}));
    checks += refused("mark cap", &answer, 400, &["limits.max_stage_batch"]);
    for limit in ["4294967296", "1001", "0"] {
        let answer = server.get(&format!("/v1/datasets/d/splits?limit={limit}"));
        checks += refused("page cap", &answer, 400, &["limit", "1..=1000"]);
    }
    let answer = server.get("/v1/datasets/d/splits?limit=18446744073709551616");
    checks += refused("limit past u64", &answer, 400, &["limit"]);
    assert!(listed(&server, "d").is_empty());
    checks += 1;

    // Item 11: one rule for node names on every route; an empty time range is a 400.
    for (route, node) in [
        ("gc", String::new()),
        ("reconcile", "n".repeat(200)),
        ("gc", " padded".to_string()),
        ("reconcile", "a\u{2066}b".to_string()),
    ] {
        let answer = server.post(&format!("/v1/datasets/d/{route}"), json!({"node": node}));
        checks += refused("node", &answer, 400, &["node", "1 to 128"]);
    }
    let answer = server.get("/v1/datasets/d/splits?time_range=5..1");
    checks += refused("time range", &answer, 400, &["5..1", "start"]);

    // Item 12: a checkpoint that moves back says so in numbers; a wrong from_position names
    // the partition and where it stands, with no empty list of ids.
    assert_eq!(
        server
            .post(
                "/v1/datasets/d/stage",
                json!({"mode": "create-only", "splits": splits(&["c1"])}),
            )
            .status,
        200
    );
    let uid = server.get("/v1/datasets/d").body["uid"]
        .as_str()
        .unwrap()
        .to_string();
    common::write_object(&dir.path().join("mend-data"), "d", &uid, "c1");
    let backwards = server.post(
        "/v1/datasets/d/publish",
        json!({"staged_split_ids": ["c1"], "checkpoint_delta": {"source": "kafka", "partitions": [{"partition": "p0", "from_position": 10, "to_position": 5}]}}),
    );
    checks += refused("backwards", &backwards, 400, &["moves from 10 to 5"]);
    assert!(
        !backwards.body["message"]
            .as_str()
            .unwrap()
            .contains("Some(")
    );
    let stale = server.post(
        "/v1/datasets/d/publish",
        json!({"staged_split_ids": ["c1"], "checkpoint_delta": {"source": "kafka", "partitions": [{"partition": "p0", "from_position": 3, "to_position": 5}]}}),
    );
    checks += refused(
        "wrong from_position",
        &stale,
        412,
        &[
            "partition p0 of source kafka has no position yet",
            "from 3 to 5",
        ],
    );
    assert!(stale.body.get("ids").is_none(), "{stale:?}");
    checks += 1;

    println!(
        "HTTP edges: {checks} checks, every refusal a one-line JSON error naming its field, cap or range"
    );
}

//! Stage and begin with compact bodies (`application/vnd.mend.compact.v1`): each is the same
//! request as its JSON, answered alike and writing the same rows; a body that is not one (cut
//! short, with bytes after its end, a bad tag, bad UTF-8) or of another version is refused
//! 400 `invalid_argument`, saying where, and writes nothing.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use mend::compact::Writer;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::body::COMPACT_BODY;
use crate::testing::{send, shared_with_admin_token};

const ADMIN: &str = "mend_compact_body_tests_admin_token";
// sha256("payload")
const SHA256: &str = "239f59ed55e737c77147cf55ad0c1b030b6d7ee748a7426952f9b852d5a935e5";

async fn router() -> Router {
    crate::routes::router(shared_with_admin_token(Some(ADMIN)).await)
}

async fn call(
    router: &Router,
    uri: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (StatusCode, Value) {
    let request = Request::builder()
        .method("POST")
        .uri(uri)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
        .body(Body::from(body))
        .unwrap();
    let (status, _, answer) = send(router, request).await;
    (status, answer)
}

async fn create(router: &Router, dataset: &str) {
    let body = json!({"dataset_id": dataset}).to_string().into_bytes();
    let (status, answer) = call(router, "/v1/datasets", "application/json", body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
}

/// Every split of `dataset`, id, state and metadata, in id order.
async fn rows(router: &Router, dataset: &str) -> Vec<(String, String, String)> {
    let request = Request::builder()
        .uri(format!("/v1/datasets/{dataset}/splits?limit=1000"))
        .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
        .body(Body::empty())
        .unwrap();
    let (status, _, page) = send(router, request).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["splits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|split| {
            (
                split["split_id"].as_str().unwrap().to_owned(),
                split["state"].as_str().unwrap().to_owned(),
                split["metadata"].to_string(),
            )
        })
        .collect()
}

/// A stage request both ways: `(split_id, metadata)` pairs.
fn stage_json(mode: &str, node: Option<&str>, splits: &[(&str, Value)]) -> Vec<u8> {
    let mut body = json!({
        "mode": mode,
        "splits": splits.iter().map(|(id, metadata)| json!({"split_id": id, "metadata": metadata})).collect::<Vec<_>>(),
    });
    if let Some(node) = node {
        body["node"] = json!(node);
    }
    body.to_string().into_bytes()
}

fn stage_compact(mode: &str, node: Option<&str>, splits: &[(&str, Value)]) -> Vec<u8> {
    let mut out = Writer::default();
    out.byte(match mode {
        "upsert" => 0,
        "create-only" => 1,
        other => panic!("{other}"),
    });
    out.option(node.as_ref(), |out, node| out.string(node));
    out.list(splits, |out, (id, metadata)| {
        out.string(id);
        out.string(&metadata.to_string());
    });
    out.into_bytes()
}

/// The answer less the dataset's name, which differs between the two datasets.
fn without_dataset(mut answer: Value) -> Value {
    answer.as_object_mut().unwrap().remove("dataset_id");
    answer
}

#[tokio::test]
async fn a_compact_stage_is_answered_and_written_as_its_json() {
    let router = router().await;
    create(&router, "by-json").await;
    create(&router, "by-compact").await;
    let first = [
        ("a", json!({"num_docs": 1})),
        (
            "b",
            json!({"num_docs": 2, "time_range": {"start": 0, "end": 10}}),
        ),
        ("c", json!({})),
    ];
    // Overlapping the first: b and c are staged (overwritten by upsert, skipped create-only).
    let second = [
        ("b", json!({"num_docs": 20})),
        ("c", json!({"x": "é"})),
        ("d", json!({})),
    ];
    let requests = [
        ("upsert", Some("writer-1"), &first[..]),
        ("upsert", None, &second[..]),
        ("create-only", Some("writer-2"), &second[..]),
        ("create-only", None, &[("e", json!({"num_docs": 5}))][..]),
    ];
    let mut outcomes = 0;
    for (mode, node, splits) in requests {
        let (json_status, json_answer) = call(
            &router,
            "/v1/datasets/by-json/stage",
            "application/json",
            stage_json(mode, node, splits),
        )
        .await;
        let (compact_status, compact_answer) = call(
            &router,
            "/v1/datasets/by-compact/stage",
            COMPACT_BODY,
            stage_compact(mode, node, splits),
        )
        .await;
        assert_eq!(json_status, StatusCode::OK, "{json_answer}");
        assert_eq!(compact_status, StatusCode::OK, "{compact_answer}");
        assert_eq!(compact_answer["dataset_id"], "by-compact");
        outcomes += compact_answer["splits"].as_array().unwrap().len();
        assert_eq!(
            without_dataset(compact_answer),
            without_dataset(json_answer),
            "{mode}"
        );
    }
    // 3 inserted, then 2 overwritten and 1 inserted, then 3 skipped, then 1 inserted.
    assert_eq!(outcomes, 10);
    let written = rows(&router, "by-compact").await;
    assert_eq!(written.len(), 5);
    assert_eq!(written, rows(&router, "by-json").await);
    assert_eq!(
        written[2],
        ("c".into(), "staged".into(), r#"{"x":"é"}"#.into())
    );
    println!(
        "compact stage: 4 requests, {outcomes} outcomes and {} rows each as their JSON's",
        written.len()
    );
}

/// A stage request under `accept`, answered: its status, content type and body's bytes.
async fn stage_accepting(
    router: &Router,
    dataset: &str,
    accept: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (StatusCode, String, Vec<u8>) {
    let request = Request::builder()
        .method("POST")
        .uri(format!("/v1/datasets/{dataset}/stage"))
        .header(header::CONTENT_TYPE, content_type)
        .header(header::ACCEPT, accept)
        .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
        .body(Body::from(body))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let content_type = response.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, content_type, bytes.to_vec())
}

/// An answer by index: the mode's byte, the count of entries, one outcome byte each.
fn by_index(mode: u8, outcomes: &[u8]) -> Vec<u8> {
    let mut out = Writer::default();
    out.byte(mode);
    out.list(outcomes, |out, outcome| out.byte(*outcome));
    out.into_bytes()
}

#[tokio::test]
async fn a_stage_asked_for_a_compact_answer_answers_each_entry_by_index() {
    let shared = shared_with_admin_token(Some(ADMIN)).await;
    let router = crate::routes::router(shared.clone());
    create(&router, "indexed").await;
    // p published and m marked for deletion, through the routes (each with its object, as a
    // publish requires), s staged.
    let (store, _) = shared.engine.objects().store();
    for id in ["p", "m", "m2"] {
        store
            .put(
                &object_store::path::Path::from(format!("datasets/indexed/splits/{id}")),
                b"object".to_vec().into(),
            )
            .await
            .unwrap();
    }
    let setup = [
        (
            "stage",
            json!({"mode": "create-only", "splits": [{"split_id": "p"}, {"split_id": "m"}, {"split_id": "m2"}, {"split_id": "s"}]}),
        ),
        ("publish", json!({"staged_split_ids": ["p", "m"]})),
        (
            "publish",
            json!({"staged_split_ids": ["m2"], "replaced_split_ids": ["m"]}),
        ),
    ];
    for (route, body) in setup {
        let (status, answer) = call(
            &router,
            &format!("/v1/datasets/indexed/{route}"),
            "application/json",
            body.to_string().into_bytes(),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{route}: {answer}");
    }
    let mut checked = 0;
    // Create-only, in the request's order, the duplicate answered twice: a new id inserted,
    // s skipped (staged), p skipped (published), m skipped (marked), the new id again. The
    // request's own encoding does not matter.
    for (pass, content_type) in [COMPACT_BODY, "application/json"].into_iter().enumerate() {
        let fresh = format!("new-{pass}");
        let entries: Vec<(&str, Value)> = [fresh.as_str(), "s", "p", "m", fresh.as_str()]
            .into_iter()
            .map(|id| (id, json!({})))
            .collect();
        let body = if content_type == COMPACT_BODY {
            stage_compact("create-only", None, &entries)
        } else {
            stage_json("create-only", None, &entries)
        };
        let (status, answered_type, answer) =
            stage_accepting(&router, "indexed", COMPACT_BODY, content_type, body).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&answer)
        );
        assert_eq!(answered_type, COMPACT_BODY);
        assert_eq!(answer, by_index(1, &[0, 2, 3, 4, 0]), "{content_type}");
        checked += 1;
    }
    // An upsert: s overwritten, n inserted.
    let upsert = stage_compact(
        "upsert",
        None,
        &[("s", json!({"num_docs": 2})), ("n", json!({}))],
    );
    let (status, answered_type, answer) = stage_accepting(
        &router,
        "indexed",
        "text/plain, application/vnd.mend.compact.v1;q=0.9",
        COMPACT_BODY,
        upsert,
    )
    .await;
    assert_eq!(
        (status, answered_type.as_str()),
        (StatusCode::OK, COMPACT_BODY)
    );
    assert_eq!(answer, by_index(0, &[1, 0]));
    checked += 1;
    // Any other Accept is answered JSON, under its own content type: another version of the
    // compact type, or the compact type refused with q=0.
    for accept in [
        "application/vnd.mend.compact.v2",
        "application/vnd.mend.compact.v1; q=0",
        "application/json",
    ] {
        let body = stage_compact("create-only", None, &[("n", json!({}))]);
        let (status, answered_type, answer) =
            stage_accepting(&router, "indexed", accept, COMPACT_BODY, body).await;
        assert_eq!(status, StatusCode::OK, "{accept}");
        assert_eq!(answered_type, "application/json", "{accept}");
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(
            answer["splits"],
            json!([{"split_id": "n", "outcome": "skipped", "existing_state": "staged"}]),
            "{accept}"
        );
        checked += 1;
    }
    // A refusal is JSON whatever was asked: an upsert may not touch a published row.
    let body = stage_compact("upsert", None, &[("p", json!({}))]);
    let (status, answered_type, answer) =
        stage_accepting(&router, "indexed", COMPACT_BODY, COMPACT_BODY, body).await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(answered_type, "application/json");
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["ids"], json!(["p"]), "{answer}");
    checked += 1;
    println!("stage answered by index: {checked} requests checked, byte for byte");
    assert_eq!(checked, 7);
}

/// A begin both ways: a commit of two splits with a checkpoint delta and a publish token.
fn begin_json(operation: &str) -> Vec<u8> {
    json!({
        "operation_id": operation,
        "kind": "commit",
        "node": "writer-1",
        "lease_ms": 60000,
        "splits": [
            {"split_id": "s1", "metadata_json": "{\"num_docs\":1}", "size": 7, "sha256": SHA256},
            {"split_id": "s2", "metadata_json": "{}", "size": 7, "sha256": format!("sha256:{SHA256}")},
        ],
        "checkpoint_delta": {"source": "kafka", "partitions": [
            {"partition": "p0", "from_position": null, "to_position": 10},
        ]},
        "publish_token": "token-1",
    })
    .to_string()
    .into_bytes()
}

fn begin_compact(operation: &str) -> Vec<u8> {
    let mut out = Writer::default();
    out.option(Some(&operation), |out, id| out.string(id));
    out.byte(0);
    out.string("writer-1");
    out.option(Some(&60000u64), |out, ms| out.number(*ms));
    let splits = [
        ("s1", "{\"num_docs\":1}", SHA256.to_owned()),
        ("s2", "{}", format!("sha256:{SHA256}")),
    ];
    out.list(&splits, |out, (id, metadata, sha256)| {
        out.string(id);
        out.string(metadata);
        out.number(7);
        out.string(sha256);
    });
    let delta = mend::model::CheckpointDelta {
        source: "kafka".into(),
        partitions: vec![mend::model::PartitionDelta {
            partition: "p0".into(),
            from_position: None,
            to_position: 10,
        }],
    };
    out.option(Some(&delta), Writer::checkpoint_delta);
    out.strings(&[]);
    out.option(Some(&"token-1"), |out, token| out.string(token));
    out.into_bytes()
}

/// The parts of an operation's view that do not name its dataset.
fn plan_of(view: &Value) -> Value {
    json!({
        "operation_id": view["operation_id"],
        "kind": view["kind"],
        "phase": view["phase"],
        "splits": view["splits"].as_array().unwrap().iter().map(|split| {
            json!([split["split_id"], split["size"], split["sha256"]])
        }).collect::<Vec<_>>(),
    })
}

#[tokio::test]
async fn a_compact_begin_is_answered_and_written_as_its_json() {
    let router = router().await;
    create(&router, "begin-json").await;
    create(&router, "begin-compact").await;
    let (status, by_json) = call(
        &router,
        "/v1/datasets/begin-json/operations",
        "application/json",
        begin_json("op-1"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{by_json}");
    let (status, by_compact) = call(
        &router,
        "/v1/datasets/begin-compact/operations",
        COMPACT_BODY,
        begin_compact("op-1"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{by_compact}");
    assert_eq!(plan_of(&by_compact), plan_of(&by_json));
    assert_eq!(by_compact["splits"].as_array().unwrap().len(), 2);
    // Sent again, a begin resumes its operation: the same answer.
    let (status, again) = call(
        &router,
        "/v1/datasets/begin-compact/operations",
        COMPACT_BODY,
        begin_compact("op-1"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(plan_of(&again), plan_of(&by_compact));
    let written = rows(&router, "begin-compact").await;
    assert_eq!(written, rows(&router, "begin-json").await);
    assert_eq!(written.len(), 2);
    println!(
        "compact begin: the operation and its {} staged rows as its JSON's, and resumed when sent again",
        written.len()
    );
}

#[tokio::test]
async fn a_bad_compact_body_is_refused_by_where_and_writes_nothing() {
    let router = router().await;
    create(&router, "bad").await;
    let valid_stage = stage_compact(
        "create-only",
        Some("w"),
        &[("a", json!({})), ("b", json!({}))],
    );
    let valid_begin = begin_compact("op-bad");
    let mut cases: Vec<(&str, &str, Vec<u8>, String)> = Vec::new();
    for (route, valid) in [("stage", &valid_stage), ("operations", &valid_begin)] {
        // Every truncation but the whole body.
        for length in 0..valid.len() {
            cases.push((
                route,
                COMPACT_BODY,
                valid[..length].to_vec(),
                "is unreadable".into(),
            ));
        }
        let mut trailing = valid.clone();
        trailing.push(0);
        cases.push((
            route,
            COMPACT_BODY,
            trailing,
            "bytes after its end: 1".into(),
        ));
        // Another version of the encoding, even with a body this version would read.
        cases.push((
            route,
            "application/vnd.mend.compact.v2",
            valid.clone(),
            "reads compact bodies of type application/vnd.mend.compact.v1 only".into(),
        ));
    }
    let mut bad_mode = valid_stage.clone();
    bad_mode[0] = 7;
    cases.push((
        "stage",
        COMPACT_BODY,
        bad_mode,
        "the mode at byte 0 is 7".into(),
    ));
    // The first split id's bytes: mode, node tag, its length and "w", count, the id's length.
    let mut bad_utf8 = valid_stage.clone();
    bad_utf8[6] = 0xff;
    cases.push((
        "stage",
        COMPACT_BODY,
        bad_utf8,
        "the string at byte 6 is not UTF-8".into(),
    ));
    // The kind follows the operation id's tag, length and 6 bytes.
    let mut bad_kind = valid_begin.clone();
    bad_kind[8] = 2;
    cases.push((
        "operations",
        COMPACT_BODY,
        bad_kind,
        "the kind at byte 8 is 2".into(),
    ));
    let mut refused = 0;
    for (route, content_type, body, expected) in &cases {
        let (status, answer) = call(
            &router,
            &format!("/v1/datasets/bad/{route}"),
            content_type,
            body.clone(),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{route} {body:?}: {answer}"
        );
        assert_eq!(answer["error"], "invalid_argument", "{answer}");
        assert_eq!(answer["certainly_not_applied"], true, "{answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(
            message.contains(expected.as_str()),
            "{route} {body:?}: {message}"
        );
        refused += 1;
    }
    assert!(rows(&router, "bad").await.is_empty());
    // Then the valid bodies are read: the refusals were of the bytes, not of the route.
    let (status, answer) = call(&router, "/v1/datasets/bad/stage", COMPACT_BODY, valid_stage).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(rows(&router, "bad").await.len(), 2);
    println!(
        "compact bodies: {refused} bad bodies refused 400, nothing written; the valid one then staged 2 rows"
    );
}

/// The example in the book's HTTP API page, byte for byte.
#[tokio::test]
async fn the_books_example_body_stages_one_split() {
    let router = router().await;
    create(&router, "book").await;
    let body = vec![0x01, 0x00, 0x01, 0x01, b'a', 0x02, b'{', b'}'];
    let (status, answer) = call(&router, "/v1/datasets/book/stage", COMPACT_BODY, body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["mode"], "create-only");
    assert_eq!(
        answer["splits"],
        json!([{"split_id": "a", "outcome": "inserted"}])
    );
    assert_eq!(
        rows(&router, "book").await,
        [("a".into(), "staged".into(), "{}".into())]
    );
}

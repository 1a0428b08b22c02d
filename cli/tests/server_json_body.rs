//! The JSON body cap of the real `mend serve` (`serve.max_json_body_bytes`) against the
//! request caps (`limits.max_stage_batch`, `limits.max_metadata_bytes`): the largest legal
//! request of every JSON route is read and answered (never 413), a body one byte over the cap
//! is 413 `payload_too_large` naming the setting and its bytes with nothing applied, and a
//! server whose cap cannot hold its largest legal request does not start.
//!
//! "Largest" is the worst case a client can send without whitespace between tokens: every id
//! and name at its longest, every list at its cap, every number at its most digits, and every
//! character of every string written as a `\uXXXX` escape (6 bytes for each ASCII byte, the
//! longest form JSON has). Before this cap existed, axum's own default of 2 MiB answered a
//! stage of 10,000 splits with 400 bytes of metadata (4.4 MB) with 413 "Failed to buffer the
//! request body".

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::server::{Answer, ServerOptions, TestServer, parse_answer, request_bytes};
use mend::bounds;
use mend::validate::{MAX_ID_BYTES, MAX_NAME_BYTES};

/// `text` as a JSON string with every character escaped: `a` as `\u0061`.
fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(2 + 6 * text.len());
    out.push('"');
    for unit in text.encode_utf16() {
        out.push_str(&format!("\\u{unit:04x}"));
    }
    out.push('"');
    out
}

/// An id of the one alphabet, exactly 128 bytes, distinct for each `n`.
fn long_id(prefix: &str, n: usize) -> String {
    let tag = format!("{prefix}{n}-");
    format!("{tag}{}", "x".repeat(MAX_ID_BYTES - tag.len()))
}

/// A name of exactly 128 printable bytes.
fn long_name(prefix: &str, n: usize) -> String {
    let tag = format!("{prefix} {n} ");
    format!("{tag}{}", "n".repeat(MAX_NAME_BYTES - tag.len()))
}

/// A metadata object of exactly `bytes` bytes as mend writes it back (compact JSON).
fn metadata_text(bytes: usize) -> String {
    format!(r#"{{"k":"{}"}}"#, "m".repeat(bytes - 8))
}

fn list(items: impl IntoIterator<Item = String>) -> String {
    format!("[{}]", items.into_iter().collect::<Vec<_>>().join(","))
}

fn max_position() -> u64 {
    i64::MAX as u64
}

/// A checkpoint delta moving every partition a delta may name, with the longest names.
fn largest_delta(source: &str, from: Option<u64>, to: u64) -> String {
    let partitions = (0..bounds::CHECKPOINT_DELTA_PARTITIONS.max as usize).map(|n| {
        let from = from.map_or("null".to_owned(), |from| from.to_string());
        format!(
            r#"{{"partition":{},"from_position":{from},"to_position":{to}}}"#,
            escaped(&long_name("partition", n))
        )
    });
    format!(
        r#"{{"source":{},"partitions":{}}}"#,
        escaped(source),
        list(partitions)
    )
}

/// What the server was started with and what a test sends it.
struct Caps {
    batch: usize,
    metadata_bytes: usize,
    json_body_bytes: usize,
}

/// Sends the largest legal request of every JSON route to `server`, each in an order that
/// lets it succeed (the fence before the publish that presents its token, the publish before
/// the mark, the mark before the delete), and checks each is answered as a request that
/// fits: 200 or 201, never 413. Returns the largest body sent.
fn every_largest_request_is_answered(server: &TestServer, dir: &Path, caps: &Caps) -> usize {
    let dataset = long_id("d", 0);
    let node = long_name("node", 0);
    let token = long_name("token", 0);
    let mut largest = 0;
    let mut send = |what: &str, path: String, body: String, status: u16| -> Answer {
        assert!(
            body.len() <= caps.json_body_bytes,
            "{what}: {} bytes, over the cap of {}",
            body.len(),
            caps.json_body_bytes
        );
        largest = largest.max(body.len());
        let started = Instant::now();
        let answer = server.send(&request_bytes(
            "POST",
            &path,
            "application/json",
            None,
            body.as_bytes(),
        ));
        assert_eq!(
            answer.status,
            status,
            "{what} ({} bytes): {:?}",
            body.len(),
            answer.body
        );
        println!(
            "server_json_body: {what}: {} bytes answered {} in {} ms",
            body.len(),
            answer.status,
            started.elapsed().as_millis()
        );
        answer
    };

    let grace = bounds::MAX_GRACE_PERIOD_MS;
    send(
        "create dataset",
        "/v1/datasets".into(),
        format!(
            r#"{{"dataset_id":{},"staged_grace_period_ms":{grace},"deletion_grace_period_ms":{grace}}}"#,
            escaped(&dataset)
        ),
        201,
    );
    let base = format!("/v1/datasets/{dataset}");
    send(
        "fence",
        format!("{base}/fence"),
        format!(r#"{{"token":{}}}"#, escaped(&token)),
        200,
    );
    let params = (0..bounds::POLICY_PARAMS.max as usize).map(|n| {
        format!(
            "{}:{}",
            escaped(&long_name("key", n)),
            escaped(&"v".repeat(bounds::POLICY_PARAM_VALUE_BYTES.max as usize))
        )
    });
    let shown = server.get(&base);
    let version = shown.body["config_version"].as_u64().unwrap();
    send(
        "config",
        format!("{base}/config"),
        format!(
            r#"{{"expected_config_version":{version},"config":{{"staged_grace_period_ms":{grace},"deletion_grace_period_ms":{grace},"policy_params":{{{}}}}},"node":{}}}"#,
            params.collect::<Vec<_>>().join(","),
            escaped(&node)
        ),
        200,
    );

    // A stage of the largest batch, each split with the largest metadata.
    let staged: Vec<String> = (0..caps.batch).map(|n| long_id("s", n)).collect();
    let fill = "m".repeat(caps.metadata_bytes - 8);
    let splits = staged.iter().map(|id| {
        format!(
            r#"{{"split_id":{},"metadata":{{"k":{}}}}}"#,
            escaped(id),
            escaped(&fill)
        )
    });
    send(
        "stage",
        format!("{base}/stage"),
        format!(
            r#"{{"mode":{},"node":{},"splits":{}}}"#,
            escaped("create-only"),
            escaped(&node),
            list(splits)
        ),
        200,
    );

    // Their publish, with the largest delta (new partitions: no from-position yet).
    let uid = server.get(&base).body["uid"].as_str().unwrap().to_owned();
    for id in &staged {
        common::write_object(&dir.join("mend-data"), &dataset, &uid, id);
    }
    let source = long_name("source", 0);
    send(
        "publish",
        format!("{base}/publish"),
        format!(
            r#"{{"staged_split_ids":{},"replaced_split_ids":[],"checkpoint_delta":{},"publish_token":{}}}"#,
            list(staged.iter().map(|id| escaped(id))),
            largest_delta(&source, None, max_position() - 1),
            escaped(&token)
        ),
        200,
    );

    // The largest begin: a commit of the largest batch with the largest metadata (as JSON
    // text in a string), the longest sizes and checksums, the largest delta with 19-digit
    // positions.
    let operation = long_id("op", 0);
    let planned = (0..caps.batch).map(|n| {
        format!(
            r#"{{"split_id":{},"metadata_json":{},"size":{},"sha256":{}}}"#,
            escaped(&long_id("b", n)),
            escaped(&metadata_text(caps.metadata_bytes)),
            bounds::OBJECT_PAYLOAD_BYTES.max,
            escaped(&format!("sha256:{}", "ab".repeat(32)))
        )
    });
    send(
        "begin",
        format!("{base}/operations"),
        format!(
            r#"{{"operation_id":{},"kind":{},"node":{},"lease_ms":{},"splits":{},"checkpoint_delta":{},"replaced_split_ids":[],"publish_token":{}}}"#,
            escaped(&operation),
            escaped("commit"),
            escaped(&node),
            bounds::OPERATION_LEASE_MS.max,
            list(planned),
            largest_delta(&source, Some(max_position() - 1), max_position()),
            escaped(&token)
        ),
        200,
    );
    send(
        "heartbeat",
        format!("{base}/operations/{operation}/heartbeat"),
        format!(r#"{{"lease_ms":{}}}"#, bounds::OPERATION_LEASE_MS.max),
        200,
    );

    let ids = || {
        format!(
            r#"{{"split_ids":{}}}"#,
            list(staged.iter().map(|id| escaped(id)))
        )
    };
    send("mark", format!("{base}/mark"), ids(), 200);
    send("delete", format!("{base}/delete"), ids(), 200);
    for route in ["gc", "reconcile"] {
        send(
            route,
            format!("{base}/{route}"),
            format!(r#"{{"node":{}}}"#, escaped(&node)),
            200,
        );
    }
    send(
        "recover",
        format!("{base}/recover"),
        format!(r#"{{"mode":{}}}"#, escaped("roll-forward")),
        200,
    );
    largest
}

/// The caps `mend config` reports for a server started with `settings`.
fn configured(dir: &Path, settings: &[&str]) -> Caps {
    let mut args = Vec::new();
    for setting in settings {
        args.extend(["--set", setting]);
    }
    args.push("config");
    let config = common::ok_json(dir, &args);
    let value = |key: &str| config["settings"][key]["value"].as_u64().unwrap() as usize;
    Caps {
        batch: value("limits.max_stage_batch"),
        metadata_bytes: value("limits.max_metadata_bytes"),
        json_body_bytes: value("serve.max_json_body_bytes"),
    }
}

#[test]
fn the_largest_legal_request_of_every_route_fits_the_default_cap() {
    let dir = tempfile::tempdir().unwrap();
    let caps = configured(dir.path(), &[]);
    let needed = mend_server::largest_json_body(caps.batch, caps.metadata_bytes);
    assert!(
        needed <= caps.json_body_bytes,
        "the defaults' largest legal request is {needed} bytes, over their cap of {}",
        caps.json_body_bytes
    );
    let server = TestServer::start(dir.path(), ServerOptions::default());
    let largest = every_largest_request_is_answered(&server, dir.path(), &caps);
    // The bound is close to what a client can really send, not a guess far above it.
    assert!(
        largest * 100 >= needed * 95,
        "the largest request sent is {largest} bytes, the bound {needed}"
    );
    println!(
        "server_json_body defaults: a batch of {} splits of {} bytes of metadata; the largest request is {largest} bytes, within the bound of {needed} and the cap of {}",
        caps.batch, caps.metadata_bytes, caps.json_body_bytes
    );
}

/// Sends `head` and then `body` on one connection, and reads the answer to the end: a server
/// that refuses at the head closes the connection, so a write that fails after it is not an
/// error here.
fn send_in_two(server: &TestServer, head: &[u8], body: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(server.address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    stream.write_all(head).unwrap();
    let _ = stream.write_all(body);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    parse_answer(&answer)
}

fn over_the_cap(what: &str, answer: &Answer, cap: usize) {
    assert_eq!(answer.status, 413, "{what}: {answer:?}");
    assert_eq!(
        answer.body["error"], "payload_too_large",
        "{what}: {answer:?}"
    );
    assert_eq!(
        answer.body["certainly_not_applied"], true,
        "{what}: {answer:?}"
    );
    let message = answer.body["message"].as_str().unwrap();
    for says in [
        "serve.max_json_body_bytes",
        &cap.to_string(),
        "nothing was applied",
    ] {
        assert!(
            message.contains(says),
            "{what}: {message:?} should say {says:?}"
        );
    }
    assert!(!message.contains("Failed to buffer"), "{what}: {message}");
}

#[test]
fn a_body_one_byte_over_the_cap_is_refused_naming_it_and_nothing_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let (batch, metadata_bytes) = (20, 1024);
    let cap = mend_server::largest_json_body(batch, metadata_bytes);
    let settings = [
        format!("limits.max_stage_batch={batch}"),
        format!("limits.max_metadata_bytes={metadata_bytes}"),
        format!("serve.max_json_body_bytes={cap}"),
    ];
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let caps = configured(dir.path(), &settings);
    assert_eq!(caps.json_body_bytes, cap);
    let server = TestServer::start(
        dir.path(),
        ServerOptions::default().with_settings(&settings),
    );
    // At exactly the cap, every route's largest request is answered.
    every_largest_request_is_answered(&server, dir.path(), &caps);
    let dataset = long_id("d", 0);
    let path = format!("/v1/datasets/{dataset}/stage");
    let listed = |server: &TestServer| server.get(&format!("/v1/datasets/{dataset}/splits")).body;
    let before = listed(&server);

    // A valid stage, padded with whitespace to one byte over the cap: declared in its
    // Content-Length (refused before a byte of it is read), and sent chunked (refused when the
    // byte past the cap arrives).
    let mut body =
        r#"{"mode":"create-only","splits":[{"split_id":"over","metadata":{}}]}"#.to_owned();
    body.push_str(&" ".repeat(cap + 1 - body.len()));
    assert_eq!(body.len(), cap + 1);
    let declared = request_bytes("POST", &path, "application/json", None, body.as_bytes());
    let head_end = declared.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let answer = send_in_two(&server, &declared[..head_end], &declared[head_end..]);
    over_the_cap("declared", &answer, cap);
    let chunked_head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
        body.len()
    );
    // No chunk terminator: everything sent is read before the refusal, so the connection
    // closes cleanly rather than with unread bytes.
    let answer = send_in_two(&server, chunked_head.as_bytes(), body.as_bytes());
    over_the_cap("chunked", &answer, cap);
    assert_eq!(listed(&server), before, "a refused body was applied");

    // Every JSON route has the one cap.
    for route in [
        "publish",
        "mark",
        "delete",
        "config",
        "fence",
        "gc",
        "recover",
        "operations",
    ] {
        let head = format!(
            "POST /v1/datasets/{dataset}/{route} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            cap + 1
        );
        over_the_cap(route, &send_in_two(&server, head.as_bytes(), b""), cap);
    }
    assert_eq!(listed(&server), before);
    println!(
        "server_json_body over the cap: a cap of {cap} bytes (the largest legal request of a batch of {batch} with {metadata_bytes} bytes of metadata) answered each route's largest request; {cap}+1 bytes refused 413 naming the setting, declared and chunked, on 9 routes; nothing applied"
    );
}

#[test]
fn a_server_whose_cap_cannot_hold_its_largest_request_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let (batch, metadata_bytes) = (1000, 16_384);
    let needed = mend_server::largest_json_body(batch, metadata_bytes);
    let cap = 64 << 20;
    assert!(needed > cap);
    let output = common::mend_command(dir.path())
        .args([
            "--set",
            &format!("limits.max_stage_batch={batch}"),
            "--set",
            &format!("limits.max_metadata_bytes={metadata_bytes}"),
            "--set",
            &format!("serve.max_json_body_bytes={cap}"),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    let line = common::failed_with(
        &output,
        2,
        &[
            "serve.max_json_body_bytes",
            &cap.to_string(),
            &needed.to_string(),
            "limits.max_stage_batch",
            "limits.max_metadata_bytes",
        ],
    );
    assert!(
        !String::from_utf8_lossy(&output.stderr).contains("listening"),
        "{line}"
    );
    println!("server_json_body startup: refused, exit 2: {line}");
}

//! The real `mend serve` under hostile clients, over loopback: a fence cleared only when a
//! client says so, admin requests naming files that never end or never open, slow and
//! half-open connections, a flood of writes, and error answers that are always the
//! documented JSON. Every wait is bounded; nothing asserts how fast anything is beyond that.

use crate::common;

use std::collections::BTreeSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::server::{ADMIN_TOKEN, Answer, ServerOptions, TestServer, parse_answer, request_bytes};
use serde_json::{Value, json};

/// A server on the embedded default catalog, with the admin token, and `settings`.
fn start(dir: &Path, settings: &[&str]) -> TestServer {
    TestServer::start(dir, ServerOptions::admin().with_settings(settings))
}

/// An admin request with a body of `content_type`.
fn admin(server: &TestServer, path: &str, content_type: &str, body: &[u8]) -> Answer {
    server.send(&request_bytes(
        "POST",
        path,
        content_type,
        Some(ADMIN_TOKEN),
        body,
    ))
}

/// The documented error form: a code, a one-line message and whether it certainly did not
/// happen, as JSON.
fn assert_json_error(what: &str, answer: &Answer, status: u16, code: &str) {
    assert_eq!(answer.status, status, "{what}: {answer:?}");
    assert_eq!(
        answer.header("content-type"),
        Some("application/json"),
        "{what}: {answer:?}"
    );
    assert_eq!(answer.body["error"], code, "{what}: {answer:?}");
    let message = answer.body["message"].as_str().unwrap_or_else(|| {
        panic!("{what}: no message: {answer:?}");
    });
    assert!(
        !message.is_empty() && !message.contains('\n'),
        "{what}: {message:?}"
    );
    assert!(
        answer.body["certainly_not_applied"].is_boolean(),
        "{what}: {answer:?}"
    );
}

fn stage_body(ids: &[&str]) -> Value {
    json!({
        "mode": "create-only",
        "splits": ids.iter().map(|id| json!({"split_id": id, "metadata": {}})).collect::<Vec<_>>(),
    })
}

/// Connects and sends `bytes`, then leaves the connection open.
fn half_open(address: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream.write_all(bytes).unwrap();
    stream
}

/// Waits up to `bound` for the server to end `stream`: what it read (maybe nothing) once
/// the server closed it, or `None` if it was still open at the bound.
fn closed_within(stream: &mut TcpStream, bound: Duration) -> Option<Vec<u8>> {
    let deadline = Instant::now() + bound;
    let mut read = Vec::new();
    let mut buffer = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buffer) {
            Ok(0) => return Some(read),
            Ok(n) => read.extend_from_slice(&buffer[..n]),
            Err(error) if error.kind() == ErrorKind::ConnectionReset => return Some(read),
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None;
            }
            Err(error) => panic!("read: {error}"),
        }
    }
}

#[test]
fn the_fence_is_removed_only_by_an_explicit_clear() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    let mut checked = 0;
    assert_eq!(
        server
            .post("/v1/datasets", json!({"dataset_id": "d1"}))
            .status,
        201
    );
    let token = |server: &TestServer| server.get("/v1/datasets/d1").body["publish_token"].clone();

    assert_eq!(
        server
            .post("/v1/datasets/d1/fence", json!({"token": "t1"}))
            .status,
        200
    );
    assert_eq!(token(&server), "t1");
    checked += 2;
    for (what, body) in [
        ("an empty object", json!({})),
        ("clear false", json!({"clear": false})),
        ("a token and clear", json!({"token": "t2", "clear": true})),
    ] {
        let answer = server.post("/v1/datasets/d1/fence", body);
        assert_json_error(what, &answer, 400, "invalid_argument");
        assert_eq!(token(&server), "t1", "{what} changed nothing");
        checked += 2;
    }
    let empty = server.post("/v1/datasets/d1/fence", json!({}));
    let message = empty.body["message"].as_str().unwrap();
    assert!(
        message.contains(r#"{"token": "T"}"#) && message.contains(r#"{"clear": true}"#),
        "{message}"
    );
    // An empty body is `{}`: refused too.
    let answer = server.send(&request_bytes(
        "POST",
        "/v1/datasets/d1/fence",
        "application/json",
        None,
        b"",
    ));
    assert_json_error("an empty body", &answer, 400, "invalid_argument");
    assert_eq!(token(&server), "t1");
    checked += 3;

    let cleared = server.post("/v1/datasets/d1/fence", json!({"clear": true}));
    assert_eq!(cleared.status, 200, "{:?}", cleared.body);
    assert_eq!(token(&server), Value::Null);
    assert_eq!(
        server
            .post("/v1/datasets/d1/fence", json!({"token": "t3"}))
            .status,
        200
    );
    // The documented `null` is an explicit clear too.
    assert_eq!(
        server
            .post("/v1/datasets/d1/fence", json!({"token": null}))
            .status,
        200
    );
    assert_eq!(token(&server), Value::Null);
    checked += 4;
    println!("server_limits fence: {checked} checks");
}

#[test]
fn admin_components_come_from_uploads_or_regular_files_within_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let component = mend::runtime::DEFAULT_POLICY_WASM;
    let cap = component.len() + 4096;
    let server = start(
        dir.path(),
        &[&format!("serve.max_admin_component_bytes={cap}")],
    );
    let mut checked = 0;
    let named = |path: &Path| json!({"component": path}).to_string().as_bytes().to_vec();

    // A path that never ends: refused before a byte is read, and the server is unharmed.
    let started = Instant::now();
    let zero = admin(
        &server,
        "/v1/policy/swap",
        "application/json",
        &named(Path::new("/dev/zero")),
    );
    assert_json_error("/dev/zero", &zero, 400, "invalid_argument");
    assert!(
        zero.body["message"]
            .as_str()
            .unwrap()
            .contains("not a regular file"),
        "{zero:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(server.get("/healthz").status, 200);
    checked += 3;

    // A FIFO no one writes: four requests at once are each refused without blocking, and
    // every route keeps answering meanwhile.
    let fifo = dir.path().join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let fifo_requests: Vec<_> = (0..4)
        .map(|round| {
            let address = server.address;
            let body = named(&fifo);
            let path = if round % 2 == 0 {
                "/v1/policy/replay"
            } else {
                "/v1/policy/swap"
            };
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(address).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(20)))
                    .unwrap();
                stream
                    .write_all(&request_bytes(
                        "POST",
                        path,
                        "application/json",
                        Some(ADMIN_TOKEN),
                        &body,
                    ))
                    .unwrap();
                let mut answer = Vec::new();
                stream.read_to_end(&mut answer).expect("an answer in time");
                parse_answer(&answer)
            })
        })
        .collect();
    assert_eq!(server.get("/healthz").status, 200);
    for request in fifo_requests {
        let answer = request.join().unwrap();
        assert_json_error("a FIFO", &answer, 400, "invalid_argument");
        checked += 1;
    }
    assert_eq!(server.get("/healthz").status, 200);
    checked += 2;

    // Too large, uploaded or named.
    let mut oversized = component.to_vec();
    oversized.resize(cap + 1, 0);
    let upload = admin(&server, "/v1/policy/swap", "application/wasm", &oversized);
    assert_json_error("an oversized upload", &upload, 413, "payload_too_large");
    let big_file = dir.path().join("big.wasm");
    std::fs::write(&big_file, &oversized).unwrap();
    let file = admin(
        &server,
        "/v1/policy/replay",
        "application/json",
        &named(&big_file),
    );
    assert_json_error("an oversized file", &file, 413, "payload_too_large");
    checked += 2;

    // Not a component: one line that quotes nothing of it.
    let junk = b"#!/bin/sh\necho SECRET-PAYLOAD-LINE\n".repeat(20);
    let answer = admin(&server, "/v1/policy/replay", "application/wasm", &junk);
    assert_json_error("not a component", &answer, 400, "invalid_argument");
    let message = answer.body["message"].as_str().unwrap();
    assert!(
        !message.contains("SECRET") && !message.contains("echo"),
        "{message}"
    );
    checked += 2;

    // A real component, uploaded: replayed, then swapped in.
    let replay = admin(
        &server,
        "/v1/policy/replay?records=10",
        "application/wasm",
        component,
    );
    assert_eq!(replay.status, 200, "{:?}", replay.body);
    let mut rebadged = component.to_vec();
    let (name, payload) = (b"mend-test-rebadge", b"uploaded");
    rebadged.push(0);
    rebadged.push((1 + name.len() + payload.len()) as u8);
    rebadged.push(name.len() as u8);
    rebadged.extend_from_slice(name);
    rebadged.extend_from_slice(payload);
    let before = server.get("/v1/policy").body["digest"].clone();
    let swap = admin(&server, "/v1/policy/swap", "application/wasm", &rebadged);
    assert_eq!(swap.status, 200, "{:?}", swap.body);
    let after = server.get("/v1/policy").body["digest"].clone();
    assert_ne!(after, before);
    assert_eq!(after, swap.body["record"]["digest"]);
    checked += 3;
    println!("server_limits admin files: {checked} checks");
}

#[test]
fn half_open_connections_are_capped_and_timed_out_while_healthz_answers() {
    const CAP: usize = 64;
    const HELD: usize = 40;
    const PAST_CAP: usize = 200;
    const IDLE: usize = 5;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        &[
            &format!("serve.max_connections={CAP}"),
            "serve.header_read_timeout_ms=1500",
            "serve.idle_timeout_ms=2500",
        ],
    );
    let partial_head = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n";

    // Below the cap, half-open connections leave room: /healthz answers at once.
    let mut held: Vec<TcpStream> = (0..HELD)
        .map(|_| half_open(server.address, partial_head))
        .collect();
    let mut idle: Vec<TcpStream> = (0..IDLE).map(|_| half_open(server.address, b"")).collect();
    assert_eq!(server.get("/healthz").status, 200);

    // Past the cap, each further connection is refused at once with a 503, never queued;
    // the few that still fit under it are held like the others.
    let past: Vec<TcpStream> = (0..PAST_CAP)
        .map(|_| half_open(server.address, b""))
        .collect();
    let mut refused = 0;
    for mut stream in past {
        let read = closed_within(&mut stream, Duration::from_secs(10))
            .expect("refused at once, or closed when idle");
        if read.starts_with(b"HTTP/1.1 503") {
            let answer = parse_answer(&read);
            assert_json_error("past the cap", &answer, 503, "too_many_connections");
            assert_eq!(answer.header("retry-after"), Some("1"));
            refused += 1;
        } else {
            assert!(read.is_empty(), "{}", String::from_utf8_lossy(&read));
            idle.push(stream);
        }
    }
    let fit = CAP - HELD - IDLE;
    assert!(
        refused >= PAST_CAP - fit,
        "{refused} of {PAST_CAP} refused; at most {fit} fit under the cap"
    );

    // The server closes the connections whose heads never end, and the idle ones.
    let mut closed = 0;
    for stream in held.iter_mut().chain(idle.iter_mut()) {
        if closed_within(stream, Duration::from_secs(15)).is_some() {
            closed += 1;
        }
    }
    assert_eq!(closed, HELD + PAST_CAP - refused + IDLE, "{}", server.log());
    let started = Instant::now();
    assert_eq!(server.get("/healthz").status, 200);
    assert!(started.elapsed() < Duration::from_secs(5));
    println!(
        "server_limits connections: {HELD} half-open and {IDLE} idle under a cap of {CAP}: /healthz answered; {refused} of {PAST_CAP} more refused at once with 503; {closed} closed by the header or idle timeout; /healthz answered again"
    );
}

#[test]
fn a_client_sending_half_a_body_is_answered_408_and_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &["serve.body_read_timeout_ms=1000"]);
    assert_eq!(
        server
            .post("/v1/datasets", json!({"dataset_id": "d1"}))
            .status,
        201
    );
    let body = stage_body(&["s1"]).to_string();
    let mut checked = 0;
    let mut streams: Vec<TcpStream> = (0..5)
        .map(|_| {
            let mut request = format!(
                "POST /v1/datasets/d1/stage HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            request.extend_from_slice(&body.as_bytes()[..body.len() / 2]);
            half_open(server.address, &request)
        })
        .collect();
    for stream in streams.iter_mut() {
        let read =
            closed_within(stream, Duration::from_secs(10)).expect("dropped within the bound");
        let answer = parse_answer(&read);
        assert_json_error("half a body", &answer, 408, "request_timeout");
        checked += 1;
    }
    // Nothing was staged.
    let listed = server.get("/v1/datasets/d1/splits");
    assert_eq!(listed.body["splits"], json!([]), "{listed:?}");
    checked += 1;
    println!("server_limits body timeout: {checked} checks");
}

#[test]
fn sigterm_with_a_half_sent_body_exits_within_the_shutdown_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(
        dir.path(),
        &[
            "serve.body_read_timeout_ms=600000",
            "serve.shutdown_deadline_ms=1000",
        ],
    );
    assert_eq!(
        server
            .post("/v1/datasets", json!({"dataset_id": "d1"}))
            .status,
        201
    );
    let mut stream = half_open(
        server.address,
        b"POST /v1/datasets/d1/stage HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n{\"mode\"",
    );
    // The request is being read: the server is in the middle of answering it.
    std::thread::sleep(Duration::from_millis(300));
    let killed = Command::new("kill")
        .args(["-TERM", &server.child().id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let started = Instant::now();
    let exit = loop {
        if let Some(exit) = server.child().try_wait().unwrap() {
            break exit;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "still running 15 s after SIGTERM: {}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "{exit:?}: {}", server.log());
    assert!(closed_within(&mut stream, Duration::from_secs(5)).is_some());
    // The log is read on another thread; give it the last lines.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        server.log().contains("dropping 1 connection(s)"),
        "{}",
        server.log()
    );
    println!(
        "server_limits shutdown: exited {exit:?} {} ms after SIGTERM with a half-sent body; 3 checks",
        started.elapsed().as_millis()
    );
}

#[test]
fn a_flood_of_stages_is_shed_with_503_and_nothing_refused_is_applied() {
    const CLIENTS: usize = 500;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        &[
            "serve.max_connections=2000",
            "serve.max_queued_writes=16",
            "serve.max_queued_writes_per_dataset=4",
        ],
    );
    assert_eq!(
        server
            .post("/v1/datasets", json!({"dataset_id": "d1"}))
            .status,
        201
    );
    let start = Arc::new(Barrier::new(CLIENTS));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|index| {
            let start = start.clone();
            let address = server.address;
            std::thread::spawn(move || {
                let id = format!("s{index:04}");
                let body = stage_body(&[&id]).to_string();
                let request = request_bytes(
                    "POST",
                    "/v1/datasets/d1/stage",
                    "application/json",
                    None,
                    body.as_bytes(),
                );
                start.wait();
                let mut stream = TcpStream::connect(address).expect("connect");
                stream
                    .set_read_timeout(Some(Duration::from_secs(60)))
                    .unwrap();
                stream.write_all(&request).unwrap();
                let mut answer = Vec::new();
                stream
                    .read_to_end(&mut answer)
                    .unwrap_or_else(|error| panic!("{id}: no answer within 60 s: {error}"));
                (id, parse_answer(&answer))
            })
        })
        .collect();
    let started = Instant::now();
    let mut accepted = BTreeSet::new();
    let mut shed = 0;
    for client in clients {
        let (id, answer) = client.join().expect("every client got an answer");
        match answer.status {
            200 => {
                assert_eq!(
                    answer.body["splits"][0]["outcome"], "inserted",
                    "{answer:?}"
                );
                accepted.insert(id);
            }
            503 => {
                assert_json_error("shed", &answer, 503, "overloaded");
                assert_eq!(answer.body["certainly_not_applied"], true);
                assert_eq!(answer.header("retry-after"), Some("1"), "{answer:?}");
                shed += 1;
            }
            other => panic!("{id}: {other}: {:?}", answer.body),
        }
    }
    let answered_in = started.elapsed();
    assert_eq!(accepted.len() + shed, CLIENTS);
    assert!(
        shed > 0,
        "a flood of {CLIENTS} with a queue of 4 sheds some"
    );
    assert!(!accepted.is_empty());

    // Exactly the accepted splits exist: nothing shed was applied.
    let listed = server.get("/v1/datasets/d1/splits");
    assert_eq!(listed.status, 200);
    let existing: BTreeSet<String> = listed.body["splits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|split| split["split_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(existing, accepted);
    println!(
        "server_limits flood: {CLIENTS} clients answered within {} ms: {} staged (200), {shed} shed (503 with Retry-After); {} splits exist, exactly the staged ones",
        answered_in.as_millis(),
        accepted.len(),
        existing.len()
    );
}

#[test]
fn every_error_answer_is_the_documented_json() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    assert_eq!(
        server
            .post("/v1/datasets", json!({"dataset_id": "d1"}))
            .status,
        201
    );
    let mut checked = 0;
    let mut check = |what: &str, answer: Answer, status: u16, code: &str, says: &str| {
        assert_json_error(what, &answer, status, code);
        let message = answer.body["message"].as_str().unwrap();
        assert!(message.contains(says), "{what}: {message}");
        checked += 1;
        answer
    };

    let wrong_method = check(
        "a method the route does not answer",
        server.request("DELETE", "/v1/datasets", None, None),
        405,
        "method_not_allowed",
        "DELETE is not allowed",
    );
    assert!(wrong_method.header("allow").is_some(), "{wrong_method:?}");
    check(
        "no route",
        server.get("/v2/anything"),
        404,
        "no_route",
        "no such route",
    );
    check(
        "a body declared over the limit",
        server.send(
            b"POST /v1/datasets/d1/stage HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n",
        ),
        413,
        "payload_too_large",
        "over this route's limit",
    );
    check(
        "a component that is not one",
        admin(
            &server,
            "/v1/policy/replay",
            "application/wasm",
            b"not\na\ncomponent",
        ),
        400,
        "invalid_argument",
        "not a WebAssembly component",
    );
    check(
        "mode null",
        server.post("/v1/datasets/d1/stage", json!({"mode": null, "splits": []})),
        400,
        "invalid_argument",
        r#"mode must be "upsert" or "create-only""#,
    );
    check(
        "an array body",
        server.request("POST", "/v1/datasets/d1/stage", None, Some(&json!([1, 2]))),
        400,
        "invalid_argument",
        "the body must be a JSON object {\"mode\"",
    );
    check(
        "a body that is not JSON",
        server.send(&request_bytes(
            "POST",
            "/v1/datasets/d1/stage",
            "application/json",
            None,
            b"{mode",
        )),
        400,
        "invalid_argument",
        "the body is not valid JSON",
    );
    check(
        "a limit past the range",
        server.get("/v1/datasets/d1/splits?limit=18446744073709551615"),
        400,
        "invalid_argument",
        "from 0 to 9223372036854775807",
    );
    check(
        "a query string that does not decode",
        server.get("/v1/datasets/d1/splits?limit=%FF%FE"),
        400,
        "invalid_argument",
        "",
    );
    check(
        "a recovery mode that does not exist",
        server.post("/v1/datasets/d1/recover", json!({"mode": "sideways"})),
        400,
        "invalid_argument",
        r#"mode must be "probe", "roll-forward", "verify" or "exclusive""#,
    );

    // A second server on the same address: a startup error naming the address, exit 2.
    let address = server.address.to_string();
    let second = common::mend_command(dir.path())
        .args(["serve", "--listen", &address])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("address {address} is already in use"))
            && !stderr.contains("outcome unknown"),
        "{stderr}"
    );
    checked += 1;
    println!("server_limits errors: {checked} error answers checked");
}

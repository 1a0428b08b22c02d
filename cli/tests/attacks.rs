//! Issue 42: the defects an outside attacker found, each tried from outside the way they
//! were found: a real `mend serve` with TLS and a tokens file, curl as the client, real
//! certificates (rcgen) and real file modes. Each test failed on the code before its fix.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rcgen::ExtendedKeyUsagePurpose;
use serde_json::Value;

use crate::common::{mend_command, next_log_file, ok_json};
use crate::security::{Curled, SecureServer, ca, curl, leaf, pki, secret_of};

/// A principal made by `mend token new`: its secret and its tokens file line.
struct Made {
    secret: String,
    line: String,
}

fn token(dir: &Path, name: &str, grants: &[&str]) -> Made {
    let mut args = vec!["token", "new", name];
    for grant in grants {
        args.extend(["--grant", grant]);
    }
    let made = ok_json(dir, &args);
    Made {
        secret: secret_of(&made),
        line: made["tokens_file_line"].as_str().unwrap().to_owned(),
    }
}

/// Writes the tokens file with `lines`, mode 0600, and returns its path.
fn tokens_file(dir: &Path, lines: &[&str]) -> String {
    let path = dir.join("tokens");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.display().to_string()
}

/// The settings of a server with TLS (and client certificates from `client_ca`) and the
/// tokens file.
fn secured(dir: &Path, tokens: &str, client_ca: &str) -> Vec<(&'static str, String)> {
    let path = |name: &str| dir.join("pki").join(name).display().to_string();
    vec![
        ("MEND_SERVE_TOKENS_FILE", tokens.to_owned()),
        ("MEND_SERVE_TLS_CERT_FILE", path("server.pem")),
        ("MEND_SERVE_TLS_KEY_FILE", path("server.key")),
        ("MEND_SERVE_TLS_CLIENT_CA_FILE", path(client_ca)),
    ]
}

/// `mend serve` that must refuse to start: its exit code and stderr (killed, and the test
/// failed, if it is still running after 60 s).
fn refused_start(dir: &Path, listen: &str, env: &[(&str, String)]) -> (Option<i32>, String) {
    let mut command = mend_command(dir);
    command
        .args(["serve", "--listen", listen])
        .env(
            "MEND_CATALOG",
            format!("file://{}", dir.join("data").display()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mend serve started, or hung, where it must refuse to start");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.code(), stderr)
}

/// curl to the server with the CA, and `args`.
fn call(server: &SecureServer, dir: &Path, path: &str, args: &[&str]) -> Curled {
    let ca = dir.join("pki/ca.pem").display().to_string();
    let url = server.url(path);
    let mut all = vec!["-sS", "--cacert", &ca];
    all.extend(args);
    all.push(&url);
    curl(&all)
}

/// Waits until `done` holds: the server takes a file change within about a second. Fails
/// the test, saying `what`, after 10 s.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn bearer(secret: &str) -> String {
    format!("Authorization: Bearer {secret}")
}

/// Defect 1: a client certificate for `*.example.internal` from the client CA was the
/// principal of `cert:ops.example.internal admin`. Now only an exact DNS name counts.
#[test]
fn a_wildcard_client_certificate_is_no_principal() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    pki(dir);
    let issuer = ca(&dir.join("pki"), "clients");
    let client = ExtendedKeyUsagePurpose::ClientAuth;
    let pki_dir = dir.join("pki");
    leaf(
        &pki_dir,
        "wildcard",
        &["*.example.internal"],
        client.clone(),
        false,
        &issuer,
    );
    leaf(
        &pki_dir,
        "exact",
        &["ops.example.internal"],
        client,
        false,
        &issuer,
    );
    let root = token(dir, "root", &["admin"]);
    let tokens = tokens_file(dir, &[&root.line, "ops cert:ops.example.internal admin"]);
    let server = SecureServer::start(dir, &secured(dir, &tokens, "clients.pem"));
    let with_cert = |name: &str| {
        let (cert, key) = (
            pki_dir.join(format!("{name}.pem")),
            pki_dir.join(format!("{name}.key")),
        );
        call(
            &server,
            dir,
            "/v1/fleet",
            &[
                "--cert",
                cert.to_str().unwrap(),
                "--key",
                key.to_str().unwrap(),
            ],
        )
    };
    let wildcard = with_cert("wildcard");
    assert_eq!(wildcard.status, 401, "{wildcard:?}");
    assert_eq!(wildcard.body["error"], "unauthorized", "{wildcard:?}");
    // The exact name is the principal: the refusal above is the wildcard's, not the setup's.
    let exact = with_cert("exact");
    assert_eq!(exact.status, 200, "{exact:?}");
    println!("attacks: a wildcard client certificate is refused (401), the exact one admitted");
}

/// Defect 2, the start: `serve.admin_token=qz` started on 0.0.0.0 with TLS and tokens. Now a
/// secret under 128 bits is refused off loopback (and allowed, with a warning, on it).
#[test]
fn a_weak_admin_token_is_refused_off_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    pki(dir);
    let root = token(dir, "root", &["admin"]);
    let tokens = tokens_file(dir, &[&root.line]);
    let mut env = secured(dir, &tokens, "ca.pem");
    env.push(("MEND_SERVE_ADMIN_TOKEN", "qz".to_owned()));
    let (code, stderr) = refused_start(dir, "0.0.0.0:0", &env);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("serve.admin_token is too weak") && stderr.contains("128 bits"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("qz"),
        "the secret is not repeated: {stderr}"
    );
    // A strong one starts there; a weak one starts on loopback, warned about.
    let server = SecureServer::start(dir, &env);
    assert!(
        server
            .log()
            .contains("serve.admin_token is weaker than 128 bits"),
        "{}",
        server.log()
    );
    drop(server);
    // The admin token from a settings file others may write: refused; the server could not
    // tell its token from one they set.
    let settings = dir.join("mend.toml");
    let strong = token(dir, "unused", &["admin"]).secret;
    std::fs::write(&settings, format!("[serve]\nadmin_token = \"{strong}\"\n")).unwrap();
    std::fs::set_permissions(&settings, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut env = secured(dir, &tokens, "ca.pem");
    env.push(("MEND_CONFIG", settings.display().to_string()));
    let (code, stderr) = refused_start(dir, "127.0.0.1:0", &env);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("holding serve.admin_token") && stderr.contains("0666"),
        "{stderr}"
    );
    assert!(!stderr.contains(&strong), "{stderr}");
    std::fs::set_permissions(&settings, std::fs::Permissions::from_mode(0o600)).unwrap();
    drop(SecureServer::start(dir, &env));
    println!(
        "attacks: a two-letter admin token is refused off loopback, warned about on it; a \
         settings file holding the admin token that others may write is refused"
    );
}

/// Defect 3: `/readyz` told anyone, on the API port and the probe port, the unavailable
/// dataset's name and a reason holding its storage path. Now it says ready or not.
#[test]
fn the_probes_say_ready_or_not_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    pki(dir);
    let root = token(dir, "root", &["admin"]);
    let reader = token(dir, "reader", &["read:d1"]);
    let tokens = tokens_file(dir, &[&root.line, &reader.line]);
    let server = SecureServer::start(dir, &secured(dir, &tokens, "ca.pem"));
    let root_auth = bearer(&root.secret);
    for dataset in ["d1", "secret-payroll"] {
        let created = call(
            &server,
            dir,
            "/v1/datasets",
            &[
                "-H",
                &root_auth,
                "-H",
                "Content-Type: application/json",
                "-d",
                &format!(r#"{{"dataset_id": "{dataset}"}}"#),
            ],
        );
        assert_eq!(created.status, 201, "{created:?}");
    }
    let damaged = next_log_file(&dir.join("data"), "secret-payroll");
    std::fs::write(&damaged, b"{ not json").unwrap();
    let started = Instant::now();
    loop {
        let status = call(&server, dir, "/v1/status", &["-H", &root_auth]);
        let unavailable =
            status.body["datasets"].as_array().unwrap().iter().any(|d| {
                d["dataset_id"] == "secret-payroll" && d["health"]["unavailable"].is_string()
            });
        if unavailable {
            break;
        }
        // A request meets the damage and wakes the supervisor.
        call(
            &server,
            dir,
            "/v1/datasets/secret-payroll/splits",
            &["-H", &root_auth],
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never unavailable: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut checks = 0;
    for (port, ready) in [
        (
            "probe",
            curl(&["-sS", &format!("http://{}/readyz", server.probes)]),
        ),
        ("api", call(&server, dir, "/readyz", &[])),
        (
            "api, as the reader",
            call(&server, dir, "/readyz", &["-H", &bearer(&reader.secret)]),
        ),
        (
            "probe /healthz",
            curl(&["-sS", &format!("http://{}/healthz", server.probes)]),
        ),
    ] {
        assert_eq!(ready.status, 200, "{port}: {ready:?}");
        let text = ready.body.to_string();
        assert!(
            ready.body == serde_json::json!({"ready": true})
                || ready.body == serde_json::json!({"status": "ok"}),
            "{port}: {text}"
        );
        assert!(
            !text.contains("payroll") && !text.contains("datasets/"),
            "{port}: {text}"
        );
        checks += 1;
    }
    // The reader's status names neither the other dataset nor the server's own details.
    let status = call(&server, dir, "/v1/status", &["-H", &bearer(&reader.secret)]);
    assert_eq!(status.status, 200, "{status:?}");
    let text = status.body.to_string();
    assert!(!text.contains("payroll"), "{text}");
    for hidden in ["fleet", "catalog", "not_ready_because"] {
        assert!(status.body.get(hidden).is_none(), "{hidden}: {text}");
    }
    assert_eq!(status.body["datasets"][0]["dataset_id"], "d1", "{text}");
    assert!(status.body["datasets"][0].get("owner").is_none(), "{text}");
    assert_eq!(status.body["ready"], true);
    // The fleet's need: the root sees it all.
    let status = call(&server, dir, "/v1/status", &["-H", &root_auth]);
    assert!(
        status.body["fleet"].is_object() && status.body["catalog"].is_string(),
        "{status:?}"
    );
    checks += 3;
    println!("attacks: {checks} probe and status answers name no dataset the caller may not read");
}

/// Defect 4: a line appended to a tokens file of mode 0666 was in force 0.21 s later, in
/// silence. Now a file others may write is refused at start and at reload, and one they may
/// read is warned about.
#[test]
fn a_tokens_file_others_may_write_is_refused_and_one_they_may_read_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    pki(dir);
    let root = token(dir, "root", &["admin"]);
    let eve = token(dir, "eve", &["admin"]);
    let tokens = tokens_file(dir, &[&root.line]);
    let set_mode =
        |mode| std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(mode)).unwrap();
    let env = secured(dir, &tokens, "ca.pem");
    set_mode(0o666);
    let (code, stderr) = refused_start(dir, "127.0.0.1:0", &env);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("mode 0666") && stderr.contains("serve.tokens_file"),
        "{stderr}"
    );

    set_mode(0o644);
    let server = SecureServer::start(dir, &env);
    let warned = |log: &str| {
        log.matches("may be read by users other than its owner")
            .count()
    };
    assert!(warned(&server.log()) >= 1, "{}", server.log());
    // Made writable by others while running, then a line appended: refused, eve stays out.
    set_mode(0o666);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&tokens)
        .unwrap();
    std::io::Write::write_all(&mut file, format!("{}\n", eve.line).as_bytes()).unwrap();
    drop(file);
    std::thread::sleep(Duration::from_millis(2_500));
    let as_eve = call(&server, dir, "/v1/fleet", &["-H", &bearer(&eve.secret)]);
    assert_eq!(as_eve.status, 401, "{as_eve:?}");
    assert!(server.log().contains("mode 0666"), "{}", server.log());
    // Its mode put right, the change is taken (and warned about again, as readable).
    set_mode(0o644);
    eventually("never reloaded", || {
        call(&server, dir, "/v1/fleet", &["-H", &bearer(&eve.secret)]).status == 200
    });
    assert!(warned(&server.log()) >= 2, "{}", server.log());
    println!("attacks: a tokens file of mode 0666 refused at start and at reload; 0644 warned");
}

/// Defect 6: a secret pasted into a grant, before the name or after `cert:` was printed by
/// the start error and the reload warning. Now they say the line's number and the rule.
#[test]
fn a_pasted_secret_is_never_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    pki(dir);
    let root = token(dir, "root", &["admin"]);
    let pasted = token(dir, "pasted", &["read:*"]).secret;
    let mut checks = 0;
    for line in [
        format!("{pasted} sha256:{} read:*", "ab".repeat(32)),
        format!("reader cert:{pasted} read:*"),
        format!("reader sha256:{} {pasted}", "ab".repeat(32)),
        format!("reader sha256:{} read:{pasted}*x", "ab".repeat(32)),
    ] {
        let tokens = tokens_file(dir, &[&root.line, &line]);
        let (code, stderr) = refused_start(dir, "127.0.0.1:0", &secured(dir, &tokens, "ca.pem"));
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains("line 2"), "{stderr}");
        assert!(
            !stderr.contains(&pasted) && !stderr.contains(&pasted[..16]),
            "{stderr}"
        );
        checks += 1;
    }
    // At reload: the warning says the line and the rule only.
    let tokens = tokens_file(dir, &[&root.line]);
    let server = SecureServer::start(dir, &secured(dir, &tokens, "ca.pem"));
    tokens_file(dir, &[&root.line, &format!("reader cert:{pasted} read:*")]);
    eventually("no warning of the refusal", || {
        server.log().contains("tokens file refused")
    });
    let log = server.log();
    assert!(log.contains("line 2"), "{log}");
    assert!(
        !log.contains(&pasted) && !log.contains(&pasted[..16]),
        "{log}"
    );
    checks += 1;
    println!("attacks: {checks} refusals of a pasted secret, none repeating it");
}

/// Defect 9: a read-only principal's `POST /v1/datasets` got its 403 only after sending 32
/// MiB. Now the access decision comes before the body: curl sends `Expect: 100-continue` and
/// gets the 403 before it sends the body.
#[test]
fn a_refused_principal_is_answered_before_its_body_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    pki(dir);
    let reader = token(dir, "reader", &["read:*"]);
    let other = token(dir, "other", &["write:metrics-*"]);
    let tokens = tokens_file(dir, &[&reader.line, &other.line]);
    let server = SecureServer::start(dir, &secured(dir, &tokens, "ca.pem"));
    let body = dir.join("large.json");
    let size = 32 << 20;
    std::fs::write(&body, vec![b' '; size]).unwrap();
    let data = format!("@{}", body.display());
    let ca = dir.join("pki/ca.pem").display().to_string();
    let send = |secret: &str| {
        let output = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "30", "-o", "/dev/null"])
            .args(["-w", "%{http_code} %{size_upload}"])
            .args(["--cacert", &ca, "-H", &bearer(secret)])
            .args([
                "-H",
                "Content-Type: application/json",
                "-H",
                "Expect: 100-continue",
            ])
            .args(["--expect100-timeout", "10", "--data-binary", &data])
            .arg(server.url("/v1/datasets"))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&output.stdout).into_owned();
        let (status, uploaded) = said.split_once(' ').unwrap();
        let uploaded: f64 = uploaded.trim().parse().unwrap();
        (status.to_owned(), uploaded)
    };
    // No write grant at all: refused before the body.
    let (status, uploaded) = send(&reader.secret);
    assert_eq!(status, "403");
    assert!(
        uploaded < 1_048_576.0,
        "{uploaded} bytes sent before the refusal"
    );
    // Write on other datasets: the body names the dataset, so it must be read, but a
    // create's cap is 64 KiB: 413 as soon as its length is declared.
    let (status, uploaded_other) = send(&other.secret);
    assert_eq!(status, "413");
    assert!(
        uploaded_other < 1_048_576.0,
        "{uploaded_other} bytes sent before the refusal"
    );
    println!(
        "attacks: a 32 MiB create refused after {uploaded} bytes (no write grant, 403) and \
         {uploaded_other} bytes (write on other datasets, 413)"
    );
}

/// Defect 10: a begin that failed validation kept its claim on the operation id: the
/// rightful writer's begin of that id got 409. Now only an accepted begin claims.
#[test]
fn a_refused_begin_claims_no_operation_id() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    pki(dir);
    let root = token(dir, "root", &["admin"]);
    let writer = token(dir, "writer", &["write:d1", "read:d1"]);
    let squatter = token(dir, "squatter", &["write:d1"]);
    let tokens = tokens_file(dir, &[&root.line, &writer.line, &squatter.line]);
    let server = SecureServer::start(dir, &secured(dir, &tokens, "ca.pem"));
    let post = |secret: &str, path: &str, body: Value| {
        call(
            &server,
            dir,
            path,
            &[
                "-H",
                &bearer(secret),
                "-H",
                "Content-Type: application/json",
                "-d",
                &body.to_string(),
            ],
        )
    };
    let created = post(
        &root.secret,
        "/v1/datasets",
        serde_json::json!({"dataset_id": "d1"}),
    );
    assert_eq!(created.status, 201, "{created:?}");
    let begin = |sha256: &str| {
        serde_json::json!({
            "operation_id": "op-1",
            "kind": "commit",
            "node": "w",
            "splits": [{"split_id": "s1", "metadata_json": "{}", "size": 10, "sha256": sha256}],
        })
    };
    // The squatter's begin of op-1 breaks a rule (its checksum is not hex): refused.
    let refused = post(
        &squatter.secret,
        "/v1/datasets/d1/operations",
        begin("not hex"),
    );
    assert_eq!(refused.status, 400, "{refused:?}");
    let begun = post(
        &writer.secret,
        "/v1/datasets/d1/operations",
        begin(&"ab".repeat(32)),
    );
    assert_eq!(
        begun.status, 200,
        "the rightful writer begins op-1: {begun:?}"
    );
    println!("attacks: a refused begin left no claim; the writer's begin of the id passed");
}

/// Defect 11: rotation could not keep a principal's name (two lines with one name were
/// refused whole), and a renamed principal lost its operations in flight. Now a principal
/// may hold two secrets at once: the documented recipe, followed from outside.
#[test]
fn a_secret_is_rotated_without_losing_the_operations_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    pki(dir);
    let root = token(dir, "root", &["admin"]);
    let old = token(dir, "writer", &["write:d1", "read:d1"]);
    let new = token(dir, "writer", &["write:d1", "read:d1"]);
    let tokens = tokens_file(dir, &[&root.line, &old.line]);
    let server = SecureServer::start(dir, &secured(dir, &tokens, "ca.pem"));
    let post = |secret: &str, path: &str, body: Value| {
        call(
            &server,
            dir,
            path,
            &[
                "-H",
                &bearer(secret),
                "-H",
                "Content-Type: application/json",
                "-d",
                &body.to_string(),
            ],
        )
    };
    assert_eq!(
        post(
            &root.secret,
            "/v1/datasets",
            serde_json::json!({"dataset_id": "d1"})
        )
        .status,
        201
    );
    let begun = post(
        &old.secret,
        "/v1/datasets/d1/operations",
        serde_json::json!({
            "operation_id": "op-1",
            "kind": "commit",
            "node": "w",
            "splits": [{"split_id": "s1", "metadata_json": "{}", "size": 10, "sha256": "ab".repeat(32)}],
        }),
    );
    assert_eq!(begun.status, 200, "{begun:?}");
    // Step 1: add the new secret's line under the same name.
    tokens_file(dir, &[&root.line, &old.line, &new.line]);
    let operation = |secret: &str| {
        call(
            &server,
            dir,
            "/v1/datasets/d1/operations/op-1",
            &["-H", &bearer(secret)],
        )
        .status
    };
    eventually("the new secret never admitted", || {
        operation(&new.secret) == 200
    });
    // Step 2: both work meanwhile; step 3: the old line removed, the new one goes on.
    assert_eq!(operation(&old.secret), 200);
    tokens_file(dir, &[&root.line, &new.line]);
    eventually("the old secret never refused", || {
        operation(&old.secret) == 401
    });
    let beat = post(
        &new.secret,
        "/v1/datasets/d1/operations/op-1/heartbeat",
        serde_json::json!({}),
    );
    assert_eq!(beat.status, 200, "{beat:?}");
    let aborted = post(
        &new.secret,
        "/v1/datasets/d1/operations/op-1/abort",
        serde_json::json!({}),
    );
    assert_eq!(aborted.status, 200, "{aborted:?}");
    println!("attacks: writer rotated its secret with an operation in flight and kept it");
}

/// Defects 13 and 14, from outside: a tokens file naming a principal `cli` is refused; two
/// `Authorization` headers are a 400.
#[test]
fn reserved_names_are_refused_and_two_authorization_headers_are_a_400() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    pki(dir);
    let root = token(dir, "root", &["admin"]);
    let reader = token(dir, "reader", &["read:*"]);
    let cli_line = reader.line.replacen("reader", "cli", 1);
    let tokens = tokens_file(dir, &[&root.line, &cli_line]);
    let (code, stderr) = refused_start(dir, "127.0.0.1:0", &secured(dir, &tokens, "ca.pem"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("line 2") && stderr.contains("server's own"),
        "{stderr}"
    );

    let tokens = tokens_file(dir, &[&root.line, &reader.line]);
    let server = SecureServer::start(dir, &secured(dir, &tokens, "ca.pem"));
    let two = call(
        &server,
        dir,
        "/v1/fleet",
        &["-H", &bearer(&reader.secret), "-H", &bearer(&root.secret)],
    );
    assert_eq!(two.status, 400, "{two:?}");
    println!("attacks: a principal named cli refused at start; two Authorization headers 400");
}

/// Defect 2, the guessing: wrong guesses ran at about 9,000 a second with no 429, and a
/// two-letter token fell in 442. Now an address is answered 429 with `Retry-After` after 10
/// failures at once, before its credential is looked at; each failure is counted in a
/// metric and said at warn.
#[test]
fn failed_authentications_are_limited_per_address_counted_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    pki(dir);
    let root = token(dir, "root", &["admin"]);
    let tokens = tokens_file(dir, &[&root.line]);
    let server = SecureServer::start(dir, &secured(dir, &tokens, "ca.pem"));
    let mut statuses = Vec::new();
    for guess in 0..12 {
        let guessed = call(
            &server,
            dir,
            "/v1/fleet",
            &["-H", &bearer(&format!("mend_guess{guess}"))],
        );
        statuses.push(guessed.status);
        if guessed.status == 429 {
            assert!(guessed.headers.contains("retry-after: "), "{guessed:?}");
            assert_eq!(guessed.body["error"], "too_many_requests", "{guessed:?}");
        }
    }
    let mut expected = vec![401; 10];
    expected.extend([429, 429]);
    assert_eq!(statuses, expected);
    // The right secret, while the address is limited: not looked at, so not confirmed.
    let right = call(&server, dir, "/v1/fleet", &["-H", &bearer(&root.secret)]);
    assert_eq!(right.status, 429, "{right:?}");
    // A request with no credential guesses nothing: /healthz needs none, and answers.
    assert_eq!(call(&server, dir, "/healthz", &[]).status, 200);
    // After its Retry-After, the address may try again: the right secret passes.
    let started = Instant::now();
    let metrics = loop {
        let answer = call(&server, dir, "/metrics", &["-H", &bearer(&root.secret)]);
        if answer.status == 200 {
            break answer;
        }
        assert_eq!(answer.status, 429, "{answer:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never let in again"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let text = metrics.body.as_str().unwrap_or_default().to_owned();
    assert!(
        text.contains("mend_authentication_failures_total 10"),
        "{text}"
    );
    assert!(
        text.contains("mend_shed_requests_total{reason=\"failed_authentications\"}"),
        "{text}"
    );
    let log = server.log();
    assert_eq!(
        log.matches("failed authentications: credentials that name no principal")
            .count(),
        1,
        "{log}"
    );
    println!(
        "attacks: 10 wrong guesses answered 401, then 429 with Retry-After; counted and logged once"
    );
}

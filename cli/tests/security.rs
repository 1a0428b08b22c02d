//! `mend serve` secured, driven from outside with a real TLS client (curl) against
//! certificates the test makes (rcgen): principals from a tokens file, TLS with reload, mutual
//! TLS, a plain probe address, the refusal to start unprotected off loopback, and no secret in
//! anything the server or the CLI writes.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use serde_json::Value;

use crate::common::{failed_with, mend, mend_command, ok_json};

/// A CA and what it signs, written as PEM files into a directory.
pub(crate) struct Pki {
    dir: PathBuf,
}

impl Pki {
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// A CA named `name`: its certificate written to `{name}.pem`.
pub(crate) fn ca(dir: &Path, name: &str) -> Issuer<'static, KeyPair> {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let certificate = params.self_signed(&key).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), certificate.pem()).unwrap();
    Issuer::new(params, key)
}

/// A certificate for `names`, signed by `issuer`, written to `{file}.pem` and `{file}.key`.
pub(crate) fn leaf(
    dir: &Path,
    file: &str,
    names: &[&str],
    purpose: ExtendedKeyUsagePurpose,
    expired: bool,
    issuer: &Issuer<'static, KeyPair>,
) {
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(ToString::to_string).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params.extended_key_usages = vec![purpose];
    if expired {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    let certificate = params.signed_by(&key, issuer).unwrap();
    std::fs::write(dir.join(format!("{file}.pem")), certificate.pem()).unwrap();
    let key_file = dir.join(format!("{file}.key"));
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    // As a key should be kept: the server warns about one others may read.
    let private = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600);
    std::fs::set_permissions(&key_file, private).unwrap();
}

pub(crate) fn pki(dir: &Path) -> Pki {
    let dir = dir.join("pki");
    std::fs::create_dir_all(&dir).unwrap();
    let ca = ca(&dir, "ca");
    let other = ca_other(&dir);
    let server = ExtendedKeyUsagePurpose::ServerAuth;
    let client = ExtendedKeyUsagePurpose::ClientAuth;
    leaf(
        &dir,
        "server",
        &["localhost", "127.0.0.1"],
        server.clone(),
        false,
        &ca,
    );
    leaf(
        &dir,
        "renewed",
        &["localhost", "127.0.0.1"],
        server.clone(),
        false,
        &ca,
    );
    leaf(
        &dir,
        "expired",
        &["localhost", "127.0.0.1"],
        server,
        true,
        &ca,
    );
    leaf(
        &dir,
        "ingest",
        &["ingest-1.example.internal"],
        client.clone(),
        false,
        &ca,
    );
    leaf(
        &dir,
        "stranger",
        &["ingest-1.example.internal"],
        client,
        false,
        &other,
    );
    Pki { dir }
}

fn ca_other(dir: &Path) -> Issuer<'static, KeyPair> {
    ca(dir, "other-ca")
}

/// A `mend serve` over TLS; killed when dropped.
pub(crate) struct SecureServer {
    child: Child,
    pub(crate) address: SocketAddr,
    pub(crate) probes: SocketAddr,
    log: Arc<Mutex<String>>,
}

impl Drop for SecureServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl SecureServer {
    pub(crate) fn start(dir: &Path, env: &[(&str, String)]) -> SecureServer {
        let mut command = mend_command(dir);
        command
            .args([
                "--set",
                "log.level=debug",
                "serve",
                "--listen",
                "127.0.0.1:0",
            ])
            .env(
                "MEND_CATALOG",
                format!("file://{}", dir.join("data").display()),
            )
            .env("MEND_SERVE_PROBE_LISTEN", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("start mend serve");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on https://").nth(1) {
                    let address = rest.split_whitespace().next().unwrap().to_owned();
                    let probes = rest
                        .split("probes on http://")
                        .nth(1)
                        .map(|p| p.trim_end_matches(')').to_owned());
                    let _ = tx.send((address, probes));
                }
                let mut log = lines.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let (address, probes) = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("mend serve did not start: {}", log.lock().unwrap()));
        let server = SecureServer {
            child,
            address: address.parse().unwrap(),
            probes: probes.expect("a probe address").parse().unwrap(),
            log,
        };
        let started = Instant::now();
        while curl(&["-sS", &format!("http://{}/readyz", server.probes)]).status != 200 {
            assert!(started.elapsed() < Duration::from_secs(30), "never ready");
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.address)
    }

    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

/// What curl did: its exit code, the answer's status (0 for none) and body, and its stderr.
#[derive(Debug)]
pub(crate) struct Curled {
    pub(crate) exit: i32,
    pub(crate) status: u16,
    pub(crate) body: Value,
    pub(crate) headers: String,
    pub(crate) stderr: String,
}

pub(crate) fn curl(args: &[&str]) -> Curled {
    let output = std::process::Command::new("curl")
        .args(["--max-time", "20", "-D", "-", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("run curl");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let (rest, status) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    let (headers, body) = rest.split_once("\r\n\r\n").unwrap_or(("", rest));
    Curled {
        exit: output.status.code().unwrap_or(-1),
        status: status.trim().parse().unwrap_or(0),
        body: serde_json::from_str(body).unwrap_or(Value::String(body.to_owned())),
        headers: headers.to_ascii_lowercase(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Everything every curl run printed, for the secrets check.
#[derive(Default)]
struct Transcript(String);

impl Transcript {
    fn curl(&mut self, args: &[&str]) -> Curled {
        let curled = curl(args);
        self.0.push_str(&format!("{curled:?}\n"));
        curled
    }
}

pub(crate) fn secret_of(made: &Value) -> String {
    made["secret"].as_str().unwrap().to_owned()
}

/// The whole secured server, from outside: tokens (401, 403, success), TLS (a trusted
/// certificate, a wrong CA, an expired certificate refused at reload and a renewed one taken,
/// plain HTTP to the TLS port), mutual TLS (a mapped client certificate, one from another CA),
/// the plain probe address, the tokens file reloaded, and no secret anywhere in what was
/// written.
#[test]
fn a_secured_server_answers_tokens_certificates_and_probes_as_configured() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let pki = pki(dir);
    let writer = ok_json(
        dir,
        &[
            "token",
            "new",
            "writer",
            "--grant",
            "write:logs-*",
            "--grant",
            "read:logs-*",
        ],
    );
    let root = ok_json(dir, &["token", "new", "root", "--grant", "admin"]);
    let admin_token = "mend_admin_token_of_the_security_test_0123456789";
    let tokens_file = dir.join("tokens");
    let ingest = "ingest cert:ingest-1.example.internal write:logs-*";
    let write_tokens =
        |lines: &[&str]| std::fs::write(&tokens_file, lines.join("\n") + "\n").unwrap();
    let writer_line = writer["tokens_file_line"].as_str().unwrap().to_owned();
    let root_line = root["tokens_file_line"].as_str().unwrap().to_owned();
    write_tokens(&[&writer_line, &root_line, ingest]);
    let secrets = [secret_of(&writer), secret_of(&root), admin_token.to_owned()];
    let path = |name: &str| pki.path(name).display().to_string();
    let env = [
        ("MEND_SERVE_TOKENS_FILE", tokens_file.display().to_string()),
        ("MEND_SERVE_ADMIN_TOKEN", admin_token.to_owned()),
        ("MEND_SERVE_TLS_CERT_FILE", path("server.pem")),
        ("MEND_SERVE_TLS_KEY_FILE", path("server.key")),
        ("MEND_SERVE_TLS_CLIENT_CA_FILE", path("ca.pem")),
    ];
    let server = SecureServer::start(dir, &env);
    let mut out = Transcript::default();
    let mut checks = 0;
    let ca = path("ca.pem");
    let bearer = |secret: &str| format!("Authorization: Bearer {secret}");
    let writer_auth = bearer(&secrets[0]);

    // The probes: plain HTTP, no token, nothing else there.
    let probe = out.curl(&["-sS", &format!("http://{}/healthz", server.probes)]);
    assert_eq!(probe.status, 200, "{probe:?}");
    let probe = out.curl(&["-sS", &format!("http://{}/v1/datasets", server.probes)]);
    assert_eq!(
        (probe.status, probe.body["error"].as_str()),
        (404, Some("no_route"))
    );
    checks += 2;

    // No token: 401, the challenge, the documented JSON.
    let none = out.curl(&["-sS", "--cacert", &ca, &server.url("/v1/datasets")]);
    assert_eq!((none.exit, none.status), (0, 401), "{none:?}");
    assert_eq!(none.body["error"], "unauthorized");
    assert!(
        none.headers.contains("www-authenticate: bearer"),
        "{none:?}"
    );
    checks += 1;

    // The writer: creates and stages in its pattern, is refused outside it.
    let create = |name: &str, auth: &str, out: &mut Transcript| {
        out.curl(&[
            "-sS",
            "--cacert",
            &ca,
            "-H",
            auth,
            "-H",
            "Content-Type: application/json",
            "-d",
            &format!(r#"{{"dataset_id": "{name}"}}"#),
            &server.url("/v1/datasets"),
        ])
    };
    let created = create("logs-a", &writer_auth, &mut out);
    assert_eq!(created.status, 201, "{created:?}");
    let refused = create("metrics-a", &writer_auth, &mut out);
    assert_eq!(
        (refused.status, refused.body["error"].as_str()),
        (403, Some("forbidden"))
    );
    let stage = |auth: Option<&str>, split: &str, extra: &[&str], out: &mut Transcript| {
        let body = format!(r#"{{"mode": "create-only", "splits": [{{"split_id": "{split}"}}]}}"#);
        let url = server.url("/v1/datasets/logs-a/stage");
        let mut args = vec![
            "-sS",
            "--cacert",
            &ca,
            "-H",
            "Content-Type: application/json",
        ];
        if let Some(auth) = auth {
            args.extend(["-H", auth]);
        }
        args.extend(extra);
        args.extend(["-d", &body, &url]);
        out.curl(&args)
    };
    let staged = stage(Some(&writer_auth), "by-token", &[], &mut out);
    assert_eq!(staged.status, 200, "{staged:?}");
    checks += 3;

    // The Python writer over TLS, its secret from MEND_TOKEN: one whole operation committed.
    // Without the secret, or trusting another CA, it stops at once (exit 1) and says why.
    std::fs::write(dir.join("payload.bin"), b"a payload from python").unwrap();
    let python = |token: Option<&str>, cacert: &str, split: &str| {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python/mend_writer.py");
        let mut command = std::process::Command::new("python3");
        command
            .arg(script)
            .arg(format!("https://{}", server.address))
            .arg("logs-a")
            .arg(format!("{split}=payload.bin"))
            .args(["--cacert", cacert, "--retry-for-s", "5"])
            .current_dir(dir)
            .env_remove("MEND_TOKEN");
        if let Some(token) = token {
            command.env("MEND_TOKEN", token);
        }
        command.output().unwrap()
    };
    let committed = python(Some(&secrets[0]), &ca, "by-python");
    let said = String::from_utf8_lossy(&committed.stdout).into_owned()
        + &String::from_utf8_lossy(&committed.stderr);
    out.0.push_str(&said);
    assert!(committed.status.success(), "{said}");
    let result: Value = serde_json::from_slice(&committed.stdout).unwrap();
    assert_eq!(
        result["publish"]["published"],
        serde_json::json!(["by-python"]),
        "{result}"
    );
    let anonymous = python(None, &ca, "by-nobody");
    let said = String::from_utf8_lossy(&anonymous.stderr).into_owned();
    out.0.push_str(&said);
    assert_eq!(anonymous.status.code(), Some(1), "{said}");
    assert!(said.contains("401 unauthorized"), "{said}");
    let distrustful = python(Some(&secrets[0]), &path("other-ca.pem"), "by-python-2");
    let said = String::from_utf8_lossy(&distrustful.stderr).into_owned();
    out.0.push_str(&said);
    assert_eq!(distrustful.status.code(), Some(1), "{said}");
    assert!(said.contains("CERTIFICATE_VERIFY_FAILED"), "{said}");
    checks += 3;

    // A client that trusts another CA refuses the server's certificate; the server goes on.
    let wrong_ca = out.curl(&[
        "-sS",
        "--cacert",
        &path("other-ca.pem"),
        &server.url("/healthz"),
    ]);
    assert_eq!(
        wrong_ca.exit, 60,
        "curl: the peer's certificate is not trusted: {wrong_ca:?}"
    );
    // Plain HTTP to the TLS port: one JSON answer saying so, then the connection closes.
    let plain = out.curl(&["-sS", &format!("http://{}/healthz", server.address)]);
    assert_eq!(plain.status, 400, "{plain:?}");
    assert!(
        plain.body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("https://"),
        "{plain:?}"
    );
    let still = out.curl(&["-sS", "--cacert", &ca, &server.url("/healthz")]);
    assert_eq!(still.status, 200, "{still:?}");
    checks += 3;

    // Mutual TLS: the client certificate is the principal its name maps to (ingest may
    // write, not read); one from another CA fails the handshake.
    let cert_args = ["--cert", &path("ingest.pem"), "--key", &path("ingest.key")];
    let by_cert = stage(None, "by-certificate", &cert_args, &mut out);
    assert_eq!(by_cert.status, 200, "{by_cert:?}");
    let mut read = vec!["-sS", "--cacert", &ca];
    read.extend(cert_args);
    let read_url = server.url("/v1/datasets/logs-a");
    read.push(&read_url);
    let read = out.curl(&read);
    assert_eq!(read.status, 403, "{read:?}");
    assert!(
        read.body["message"]
            .as_str()
            .unwrap()
            .contains("principal ingest"),
        "{read:?}"
    );
    let stranger = [
        "--cert",
        &path("stranger.pem"),
        "--key",
        &path("stranger.key"),
    ];
    let stranger = stage(None, "by-stranger", &stranger, &mut out);
    assert_ne!(
        stranger.exit, 0,
        "a certificate of another CA was accepted: {stranger:?}"
    );
    checks += 3;

    // The certificate and key replaced by an expired pair: refused within seconds (logged),
    // while the valid pair keeps serving; replaced by a renewed pair, taken.
    let reload = |cert: &str, key: &str| {
        std::fs::copy(pki.path(key), pki.path("server.key")).unwrap();
        std::fs::copy(pki.path(cert), pki.path("server.pem")).unwrap();
    };
    reload("expired.pem", "expired.key");
    let started = Instant::now();
    while !server.log().contains("expired at 2021-01-01") {
        let tried = out.curl(&["-sS", "--cacert", &ca, &server.url("/healthz")]);
        assert_eq!(tried.status, 200, "the expired pair was served: {tried:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never refused: {}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let kept = out.curl(&["-sS", "--cacert", &ca, &server.url("/healthz")]);
    assert_eq!(kept.status, 200, "{kept:?}");
    reload("renewed.pem", "renewed.key");
    let started = Instant::now();
    while !server.log().contains("TLS certificate and key reloaded") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never reloaded: {}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let renewed = out.curl(&["-sS", "--cacert", &ca, &server.url("/healthz")]);
    assert_eq!(renewed.status, 200, "{renewed:?}");
    checks += 2;

    // The writer's line removed from the tokens file: within seconds its token is refused.
    write_tokens(&[&root_line, ingest]);
    let started = Instant::now();
    loop {
        let tried = stage(Some(&writer_auth), "after-removal", &[], &mut out);
        if tried.status == 401 {
            break;
        }
        assert_eq!(tried.status, 200, "{tried:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "tokens file never reloaded"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        server.log().contains("tokens file reloaded"),
        "{}",
        server.log()
    );
    // The admin token is a principal of its own, beside the file's.
    let admin = out.curl(&[
        "-sS",
        "--cacert",
        &ca,
        "-H",
        &bearer(admin_token),
        &server.url("/metrics"),
    ]);
    assert_eq!(admin.status, 200, "{admin:?}");
    checks += 2;

    // Every request's log span names its principal.
    let log = server.log();
    for principal in ["writer", "ingest", "admin-token"] {
        assert!(
            log.contains(&format!("principal={principal}")),
            "no span names {principal}: {log}"
        );
    }
    checks += 1;

    // No secret in what the server logged, what curl printed, or what `mend config` shows.
    let config = mend_command(dir)
        .args(["config", "--json"])
        .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
        .output()
        .unwrap();
    assert!(config.status.success());
    let config = String::from_utf8_lossy(&config.stdout).into_owned();
    for secret in &secrets {
        for (what, text) in [
            ("the server log", &log),
            ("curl", &out.0),
            ("mend config", &config),
        ] {
            assert!(!text.contains(secret.as_str()), "a secret in {what}");
        }
    }
    checks += 1;
    println!(
        "security: {checks} checks of a TLS server with 3 principals, mutual TLS and a probe \
         address: {} curl runs; no secret in {} bytes of server log, curl output and config",
        out.0.matches("Curled {").count(),
        log.len() + out.0.len() + config.len()
    );
}

/// A server that other machines can reach does not start without a tokens file and TLS
/// (exit 2, naming the settings), and starts with `serve.insecure`, saying so.
#[test]
fn an_unprotected_server_off_loopback_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let refused = mend(dir, &["serve", "--listen", "0.0.0.0:0"]);
    failed_with(
        &refused,
        2,
        &["serve.tokens_file", "serve.tls_cert_file", "serve.insecure"],
    );
    let made = ok_json(dir, &["token", "new", "root", "--grant", "admin"]);
    std::fs::write(
        dir.join("tokens"),
        made["tokens_file_line"].as_str().unwrap(),
    )
    .unwrap();
    let without_tls = mend_command(dir)
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env("MEND_SERVE_TOKENS_FILE", dir.join("tokens"))
        .output()
        .unwrap();
    let message = failed_with(&without_tls, 2, &["in the clear"]);
    assert!(!message.contains("without a token"), "{message}");

    // serve.insecure: it starts, and says what it risks.
    let mut child = mend_command(dir)
        .args([
            "--set",
            "serve.insecure=true",
            "serve",
            "--listen",
            "0.0.0.0:0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = String::new();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    while !seen.contains("listening on") {
        match lines.next() {
            Some(Ok(line)) => seen.push_str(&(line + "\n")),
            _ => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.contains("listening on http://0.0.0.0:"), "{seen}");
    assert!(
        seen.contains("serve.insecure"),
        "the start does not say it is insecure: {seen}"
    );
    println!(
        "security: refused off loopback without tokens, without TLS; started insecure, logged"
    );
}

/// Every audit record names who acted: `cli` for the command line, the principal of an HTTP
/// request; `mend audit` and its route list them, filtered by principal, and only a principal
/// that operates the dataset may read them over HTTP. A writer's stage and begin are in it
/// (before the trail of writes, `--principal writer` listed nothing).
#[test]
fn the_audit_names_who_decided_and_filters_by_principal() {
    use crate::common::server::{ServerOptions, TestServer};
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    ok_json(
        dir,
        &["dataset", "create", "d1", "--staged-grace-period-ms", "1"],
    );
    let splits = crate::common::splits_file(dir, "s1.json", &["s1"]);
    ok_json(
        dir,
        &[
            "stage",
            "d1",
            "--mode",
            "create-only",
            "--splits",
            splits.to_str().unwrap(),
        ],
    );
    std::thread::sleep(Duration::from_millis(20));
    // The command line's gc marks the abandoned split: its records name `cli`.
    ok_json(dir, &["gc", "d1"]);

    let operator = ok_json(dir, &["token", "new", "operator", "--grant", "operate:d*"]);
    let writer = ok_json(dir, &["token", "new", "writer", "--grant", "write:d*"]);
    let lines = [&operator, &writer]
        .map(|made| made["tokens_file_line"].as_str().unwrap().to_owned())
        .join("\n");
    std::fs::write(dir.join("tokens"), lines).unwrap();
    let server = TestServer::start(
        dir,
        ServerOptions::default().with_settings(&[&format!(
            "serve.tokens_file={}",
            dir.join("tokens").display()
        )]),
    );
    let (operator, writer) = (secret_of(&operator), secret_of(&writer));
    let staged = server.request(
        "POST",
        "/v1/datasets/d1/stage",
        Some(&writer),
        Some(&serde_json::json!({"mode": "create-only", "splits": [{"split_id": "s2"}]})),
    );
    assert_eq!(staged.status, 200, "{}", staged.body);
    let begun = server.request(
        "POST",
        "/v1/datasets/d1/operations",
        Some(&writer),
        Some(&serde_json::json!({
            "operation_id": "op-w",
            "kind": "commit",
            "node": "writer-node",
            "splits": [{"split_id": "s3", "metadata_json": "{}", "size": 3,
                        "sha256": "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}]
        })),
    );
    assert_eq!(begun.status, 200, "{}", begun.body);
    std::thread::sleep(Duration::from_millis(20));
    let collected = server.request(
        "POST",
        "/v1/datasets/d1/gc",
        Some(&operator),
        Some(&serde_json::json!({})),
    );
    assert_eq!(collected.status, 200, "{}", collected.body);
    assert_eq!(
        collected.body["marked"],
        serde_json::json!(["s2"]),
        "{}",
        collected.body
    );

    let by_operator = server.request(
        "GET",
        "/v1/datasets/d1/audit?principal=operator",
        Some(&operator),
        None,
    );
    assert_eq!(by_operator.status, 200, "{}", by_operator.body);
    let entries = by_operator.body["records"].as_array().unwrap();
    assert!(!entries.is_empty(), "{}", by_operator.body);
    assert!(
        entries
            .iter()
            .all(|entry| entry["principal"] == "operator" && entry["mode"] == "gc")
    );
    // gc's decision, and its write: the mark of s2.
    let marked: Vec<&Value> = entries
        .iter()
        .filter(|entry| entry["decision"]["step"] == "mark")
        .collect();
    assert_eq!(marked.len(), 1, "{}", by_operator.body);
    assert_eq!(
        marked[0]["decision"]["what"]["ids"],
        serde_json::json!(["s2"])
    );
    let as_writer = server.request("GET", "/v1/datasets/d1/audit", Some(&writer), None);
    assert_eq!(as_writer.status, 403, "{}", as_writer.body);
    drop(server);

    let all = ok_json(dir, &["audit", "d1"]);
    assert_eq!(all["next"], Value::Null, "{all}");
    let all = &all["records"];
    let principals: std::collections::BTreeSet<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["principal"].as_str().unwrap())
        .collect();
    assert_eq!(principals, ["cli", "operator", "writer"].into(), "{all}");
    let by_writer = ok_json(dir, &["audit", "d1", "--principal", "writer"]);
    let by_writer = by_writer["records"].as_array().unwrap();
    let kinds: Vec<(&str, &str)> = by_writer
        .iter()
        .map(|entry| {
            (
                entry["mode"].as_str().unwrap(),
                entry["decision"]["step"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [("stage", "stage"), ("begin", "begin-commit")],
        "the writer's stage and begin (one atomic step), each step in the order it landed"
    );
    let staged_by_writer = ok_json(
        dir,
        &["audit", "d1", "--principal", "writer", "--kind", "stage"],
    );
    let staged_by_writer = staged_by_writer["records"].as_array().unwrap();
    assert_eq!(staged_by_writer.len(), 1);
    assert_eq!(
        staged_by_writer[0]["decision"]["what"]["ids"],
        serde_json::json!(["s2"])
    );
    let by_cli = ok_json(dir, &["audit", "d1", "--principal", "cli"]);
    let by_cli = by_cli["records"].as_array().unwrap();
    assert!(!by_cli.is_empty() && by_cli.iter().all(|entry| entry["principal"] == "cli"));
    assert_eq!(
        by_cli.len() + entries.len() + by_writer.len(),
        all.as_array().unwrap().len(),
        "every record is the command line's, the operator's or the writer's"
    );
    let text = mend(dir, &["audit", "d1", "--principal", "operator"]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("operator") && text.contains("gc"), "{text}");
    failed_with(&mend(dir, &["audit", "d1", "--limit", "0"]), 2, &["limit"]);
    println!(
        "security: the audit of d1 holds {} records, {} by cli, {} by operator and {} by writer, \
         each filtered by principal (and kind) on the command line and over HTTP; a writer may \
         not read it",
        all.as_array().unwrap().len(),
        by_cli.len(),
        entries.len(),
        by_writer.len()
    );
}

/// The secure three-replica fleet of docs/src/fleet.md, run step by step by `scripts/secure-fleet-example`
/// with this build's `mend`: certificates from openssl, principals from `mend token new`, three
/// replicas with TLS and a tokens file, then curl, the Python writer and `mend request`.
#[test]
fn the_readmes_secure_fleet_runs_as_shown() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/secure-fleet-example");
    let output = std::process::Command::new("bash")
        .arg(script)
        .env("MEND", env!("CARGO_BIN_EXE_mend"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let passed = stdout
        .lines()
        .filter(|line| line.starts_with("ok "))
        .count();
    assert!(
        stdout.contains("secure-fleet-example: 9 checks passed") && passed == 9,
        "{stdout}"
    );
    println!("security: the book's secure fleet ran as shown, {passed} checks");
}

//! Issue 42: the TLS defects an outside attacker found (an expired server certificate,
//! a client CA rotated under open connections), tried from outside with real certificates.
//!
//! Each test runs a real `mend serve` child process on certificate files rcgen makes, and
//! speaks to it as a client would: curl for single requests, and for a connection that must
//! stay open across a change of the server's files, a rustls client on one TCP socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};

use crate::common::{mend_command, ok_json};
use crate::security::{Curled, SecureServer, ca, curl, leaf, secret_of};

const DAY: Duration = Duration::from_secs(86_400);

/// When a certificate may be used: rcgen's default (1975 to 4096) or from one instant to
/// another, as durations since the Unix epoch.
#[derive(Clone, Copy)]
enum Validity {
    Default,
    Between(Duration, Duration),
}

/// Since the Unix epoch, now.
fn now() -> Duration {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
}

/// The Unix time of midnight UTC starting `year`-01-01.
fn new_year(year: i32) -> Duration {
    let start = rcgen::date_time_ymd(year, 1, 1);
    Duration::from_secs(u64::try_from(start.unix_timestamp()).unwrap())
}

/// A server certificate for localhost and 127.0.0.1 whose subject is `CN=common_name`,
/// signed by `issuer`: written to `{file}.pem` and `{file}.key`, the key readable by its
/// owner alone (as a key file should be, so that only the test that wants a warning gets one).
fn server_pair(
    dir: &Path,
    file: &str,
    common_name: &str,
    validity: Validity,
    issuer: &Issuer<'static, KeyPair>,
) {
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    if let Validity::Between(not_before, not_after) = validity {
        let epoch = rcgen::date_time_ymd(1970, 1, 1);
        params.not_before = epoch + not_before;
        params.not_after = epoch + not_after;
    }
    let certificate = params.signed_by(&key, issuer).unwrap();
    std::fs::write(dir.join(format!("{file}.pem")), certificate.pem()).unwrap();
    let key_file = dir.join(format!("{file}.key"));
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    set_mode(&key_file, 0o600);
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Puts the pair `{from}.pem`, `{from}.key` in place of `served.pem`, `served.key`, keeping
/// the served files' modes (`std::fs::copy` would copy the source's), the key first: the
/// server may read between the two writes and refuse a pair that does not match, once.
fn serve_pair(pki: &Path, from: &str) {
    let key = std::fs::read(pki.join(format!("{from}.key"))).unwrap();
    std::fs::write(pki.join("served.key"), key).unwrap();
    let cert = std::fs::read(pki.join(format!("{from}.pem"))).unwrap();
    std::fs::write(pki.join("served.pem"), cert).unwrap();
}

/// The environment of a server on `served.pem` and `served.key` in `pki`, and no tokens file
/// (it listens on loopback).
fn served_env(pki: &Path) -> Vec<(&'static str, String)> {
    vec![
        (
            "MEND_SERVE_TLS_CERT_FILE",
            pki.join("served.pem").display().to_string(),
        ),
        (
            "MEND_SERVE_TLS_KEY_FILE",
            pki.join("served.key").display().to_string(),
        ),
    ]
}

/// `mend serve` started as [`SecureServer::start`] starts it, which must refuse to start:
/// its exit code and the `error:` line it printed. Panics if it starts listening instead.
fn refused_start(dir: &Path, env: &[(&str, String)]) -> (i32, String) {
    let mut command = mend_command(dir);
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env(
            "MEND_CATALOG",
            format!("file://{}", dir.join("data").display()),
        )
        .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("start mend serve");
    let mut stderr = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        let listening = line.contains("listening on");
        stderr.push_str(&line);
        stderr.push('\n');
        if listening {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mend serve started instead of refusing to:\n{stderr}");
        }
    }
    let status = child.wait().unwrap();
    let error = stderr
        .lines()
        .find(|line| line.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line: {stderr}"))
        .to_owned();
    (status.code().unwrap_or(-1), error)
}

/// The server's log lines at `level` (`WARN`, `INFO`) that contain every one of `words`.
fn log_lines(server: &SecureServer, level: &str, words: &[&str]) -> Vec<String> {
    server
        .log()
        .lines()
        .filter(|line| line.contains(level) && words.iter().all(|word| line.contains(word)))
        .map(ToOwned::to_owned)
        .collect()
}

/// Waits (at most 10 s) until the server has logged a line at `level` with every one of
/// `words`, checking `meanwhile` at every look; the line.
fn await_log(
    server: &SecureServer,
    level: &str,
    words: &[&str],
    mut meanwhile: impl FnMut(),
) -> String {
    let started = Instant::now();
    loop {
        meanwhile();
        if let Some(line) = log_lines(server, level, words).pop() {
            return line;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no {level} line with {words:?}: {}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `GET /healthz` over TLS trusting `ca`, with curl's account of the handshake (`-v`): the
/// served certificate's subject is in its stderr.
fn health(server: &SecureServer, ca: &Path) -> Curled {
    curl(&[
        "-sS",
        "-v",
        "--cacert",
        &ca.display().to_string(),
        &server.url("/healthz"),
    ])
}

/// The value of the gauge `name` in the server's `/metrics`.
fn gauge(server: &SecureServer, ca: &Path, name: &str) -> Option<f64> {
    let scraped = curl(&[
        "-sS",
        "--cacert",
        &ca.display().to_string(),
        &server.url("/metrics"),
    ]);
    assert_eq!(scraped.status, 200, "{scraped:?}");
    let text = scraped.body.as_str().unwrap_or_default().to_owned();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .map(|value| value.trim().parse().unwrap())
}

/// A server certificate outside its validity is never served: at start `mend serve` exits 2
/// naming serve.tls_cert_file and the dates; at reload it is refused, the pair loaded before
/// keeps serving and the refusal is logged once. One within 14 days of its end is served,
/// warned about at start and at each reload, and its remaining time is on `/metrics`.
#[test]
fn a_server_certificate_outside_its_validity_is_refused_and_one_near_its_end_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    let issuer = ca(&pki, "ca");
    let ca_file = pki.join("ca.pem");
    let between = |from: Duration, to: Duration| Validity::Between(from, to);
    let (expired, future) = (
        between(new_year(2020), new_year(2021)),
        between(new_year(2090), new_year(2091)),
    );
    server_pair(&pki, "expired", "expired", expired, &issuer);
    server_pair(&pki, "future", "future", future, &issuer);
    server_pair(
        &pki,
        "soon",
        "soon",
        between(now() - DAY, now() + 7 * DAY),
        &issuer,
    );
    server_pair(&pki, "fresh", "fresh", Validity::Default, &issuer);

    // At start: refused, naming the setting and the dates.
    for (pair, words) in [
        ("expired", ["expired", "2021-01-01"]),
        ("future", ["not valid before", "2090-01-01"]),
    ] {
        serve_pair(&pki, pair);
        set_mode(&pki.join("served.key"), 0o600);
        let (code, error) = refused_start(dir, &served_env(&pki));
        assert_eq!(code, 2, "{error}");
        for word in ["serve.tls_cert_file", words[0], words[1]] {
            assert!(error.contains(word), "{error:?} should mention {word:?}");
        }
    }

    // Within 14 days of its end: served, warned about, and its remaining time a gauge.
    serve_pair(&pki, "soon");
    let server = SecureServer::start(dir, &served_env(&pki));
    let expiring = ["serve.tls_cert_file", "expires at", "within 14 days"];
    assert_eq!(
        log_lines(&server, "WARN", &expiring).len(),
        1,
        "{}",
        server.log()
    );
    let remaining =
        gauge(&server, &ca_file, "mend_tls_certificate_expiry_seconds").expect("the expiry gauge");
    let week = (7 * DAY).as_secs_f64();
    assert!(
        (week - 120.0..=week).contains(&remaining),
        "{remaining} s left"
    );

    // Replaced by an expired pair, then one not valid yet: each refused once, while the
    // certificate loaded before keeps answering.
    let served = |server: &SecureServer| {
        let answered = health(server, &ca_file);
        assert_eq!(
            (answered.exit, answered.status),
            (0, 200),
            "the pair loaded before no longer answers: {answered:?}"
        );
        assert!(answered.stderr.contains("CN=soon"), "{}", answered.stderr);
    };
    for (pair, date) in [("expired", "2021-01-01"), ("future", "2090-01-01")] {
        serve_pair(&pki, pair);
        await_log(&server, "WARN", &["TLS files refused", date], || {
            served(&server)
        });
        std::thread::sleep(Duration::from_secs(2));
        served(&server);
        assert_eq!(
            log_lines(&server, "WARN", &["TLS files refused", date]).len(),
            1,
            "{}",
            server.log()
        );
    }
    let still = gauge(&server, &ca_file, "mend_tls_certificate_expiry_seconds").unwrap();
    assert!(still <= remaining && still > week - 300.0, "{still}");

    // A fresh pair is taken, without a warning; the one near its end again, warned again.
    serve_pair(&pki, "fresh");
    let started = Instant::now();
    while !health(&server, &ca_file).stderr.contains("CN=fresh") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let years = gauge(&server, &ca_file, "mend_tls_certificate_expiry_seconds").unwrap();
    assert!(years > (1000 * 365 * DAY).as_secs_f64(), "{years}");
    serve_pair(&pki, "soon");
    let started = Instant::now();
    while log_lines(&server, "WARN", &expiring).len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    served(&server);
    println!(
        "attacks_tls: expired and not-yet-valid certificates refused at start (exit 2) and at \
         reload (logged once each, the loaded pair kept); one with {remaining} s left served, \
         warned about at start and at reload, on /metrics"
    );
}

/// One TLS connection a client keeps open (HTTP/1.1 keep-alive), speaking through rustls on
/// a plain socket: every request on it certainly goes over the same connection.
struct KeptConnection {
    tls: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    local: SocketAddr,
    /// Bytes read past the last answer.
    unread: Vec<u8>,
}

/// An answer read off a [`KeptConnection`]: status, head (lower case), body.
#[derive(Debug)]
struct KeptAnswer {
    status: u16,
    head: String,
    body: serde_json::Value,
}

impl KeptConnection {
    /// Connects to `address` trusting `ca`, presenting `cert` with `key`.
    fn open(address: SocketAddr, ca: &Path, cert: &Path, key: &Path) -> Self {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
        let mut roots = rustls::RootCertStore::empty();
        for certificate in CertificateDer::pem_file_iter(ca).unwrap() {
            roots.add(certificate.unwrap()).unwrap();
        }
        let chain = CertificateDer::pem_file_iter(cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let socket = TcpStream::connect(address).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let local = socket.local_addr().unwrap();
        Self {
            tls: rustls::StreamOwned::new(connection, socket),
            local,
            unread: Vec::new(),
        }
    }

    /// Sends `GET path` with `headers` and reads its answer; an error once the connection is
    /// closed or broken.
    fn get(&mut self, path: &str, headers: &[String]) -> std::io::Result<KeptAnswer> {
        let mut request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n");
        for header in headers {
            request.push_str(&format!("{header}\r\n"));
        }
        request.push_str("\r\n");
        self.tls.write_all(request.as_bytes())?;
        self.tls.flush()?;
        let head_end = loop {
            if let Some(end) = self.unread.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            self.read_more()?;
        };
        let head = String::from_utf8_lossy(&self.unread[..head_end]).to_ascii_lowercase();
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .expect("a content-length")
            .trim()
            .parse()
            .unwrap();
        while self.unread.len() < head_end + length {
            self.read_more()?;
        }
        let body: Vec<u8> = self
            .unread
            .drain(..head_end + length)
            .skip(head_end)
            .collect();
        Ok(KeptAnswer {
            status,
            head,
            body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        })
    }

    fn read_more(&mut self) -> std::io::Result<()> {
        let mut buffer = [0u8; 16 * 1024];
        match self.tls.read(&mut buffer)? {
            0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
            read => {
                self.unread.extend_from_slice(&buffer[..read]);
                Ok(())
            }
        }
    }
}

/// A keep-alive connection opened with a client certificate of CA 1 is refused once the
/// client CA file says CA 2: its next request is answered 401 (the JSON error form) and the
/// connection closed, where before it went on being served. Other connections (CA 2's
/// certificates, tokens) are served.
#[test]
fn a_kept_connection_is_refused_once_the_client_ca_no_longer_admits_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    let first = ca(&pki, "first-ca");
    let second = ca(&pki, "second-ca");
    server_pair(&pki, "served", "server", Validity::Default, &first);
    let client = ExtendedKeyUsagePurpose::ClientAuth;
    let name = ["ingest-1.example.internal"];
    leaf(&pki, "by-first", &name, client.clone(), false, &first);
    leaf(&pki, "by-second", &name, client, false, &second);
    let client_ca = pki.join("client-ca.pem");
    std::fs::copy(pki.join("first-ca.pem"), &client_ca).unwrap();
    let reader = ok_json(dir, &["token", "new", "reader", "--grant", "read:*"]);
    let tokens = dir.join("tokens");
    std::fs::write(
        &tokens,
        format!(
            "{}\ningest cert:ingest-1.example.internal read:*\n",
            reader["tokens_file_line"].as_str().unwrap()
        ),
    )
    .unwrap();
    set_mode(&tokens, 0o600);
    let mut env = served_env(&pki);
    env.push((
        "MEND_SERVE_TLS_CLIENT_CA_FILE",
        client_ca.display().to_string(),
    ));
    env.push(("MEND_SERVE_TOKENS_FILE", tokens.display().to_string()));
    let server = SecureServer::start(dir, &env);
    let trusted = pki.join("first-ca.pem");
    let path = |name: &str| pki.join(name).display().to_string();
    let with_certificate = |file: &str| {
        curl(&[
            "-sS",
            "--cacert",
            &path("first-ca.pem"),
            "--cert",
            &path(&format!("{file}.pem")),
            "--key",
            &path(&format!("{file}.key")),
            &server.url("/v1/datasets"),
        ])
    };

    let mut kept = KeptConnection::open(
        server.address,
        &trusted,
        &pki.join("by-first.pem"),
        &pki.join("by-first.key"),
    );
    let before = kept.get("/v1/datasets", &[]).unwrap();
    assert_eq!(before.status, 200, "{before:?}");
    assert!(!before.head.contains("connection: close"), "{before:?}");

    // The client CA rotated: new handshakes with CA 1's certificate fail, CA 2's succeed.
    std::fs::copy(pki.join("second-ca.pem"), &client_ca).unwrap();
    let started = Instant::now();
    while with_certificate("by-first").exit == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let by_second = with_certificate("by-second");
    assert_eq!(by_second.status, 200, "{by_second:?}");

    // The connection opened under CA 1: its next request is refused, then it is closed.
    let after = kept.get("/v1/datasets", &[]);
    let after = after
        .unwrap_or_else(|error| panic!("the kept connection broke without an answer: {error}"));
    assert_eq!(
        (after.status, after.body["error"].as_str()),
        (401, Some("unauthorized")),
        "the connection of a certificate CA 2 does not admit was served: {after:?}"
    );
    assert!(after.head.contains("connection: close"), "{after:?}");
    let bearer = format!("authorization: Bearer {}", secret_of(&reader));
    let closed = kept.get("/v1/datasets", std::slice::from_ref(&bearer));
    assert!(closed.is_err(), "still open: {closed:?}");
    assert_eq!(
        log_lines(&server, "INFO", &["no longer admitted"]).len(),
        1,
        "{}",
        server.log()
    );

    // A token on a connection without a certificate is not affected.
    let token = curl(&[
        "-sS",
        "--cacert",
        &path("first-ca.pem"),
        "-H",
        &bearer,
        &server.url("/v1/datasets"),
    ]);
    assert_eq!(token.status, 200, "{token:?}");
    println!(
        "attacks_tls: the connection from {} answered 200 under CA 1, then 401 and closed once \
         the client CA file said CA 2",
        kept.local
    );
}

/// A TLS key file users other than its owner may write is refused: at start (exit 2, naming
/// serve.tls_key_file and the mode) and at reload (the pair loaded before keeps serving,
/// logged once). One they may read is served, warned about at start and at each reload.
#[test]
fn a_tls_key_others_may_write_is_refused_and_one_they_may_read_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    let issuer = ca(&pki, "ca");
    let ca_file = pki.join("ca.pem");
    for name in ["first", "second", "third"] {
        server_pair(&pki, name, name, Validity::Default, &issuer);
    }
    serve_pair(&pki, "first");
    let key: PathBuf = pki.join("served.key");
    set_mode(&key, 0o600);
    let env = served_env(&pki);

    set_mode(&key, 0o666);
    let (code, error) = refused_start(dir, &env);
    assert_eq!(code, 2, "{error}");
    for word in [
        "serve.tls_key_file",
        "0666",
        "written by users other than its owner",
    ] {
        assert!(error.contains(word), "{error:?} should mention {word:?}");
    }

    set_mode(&key, 0o644);
    let server = SecureServer::start(dir, &env);
    let readable = [
        "serve.tls_key_file",
        "read by users other than its owner",
        "0644",
    ];
    assert_eq!(
        log_lines(&server, "WARN", &readable).len(),
        1,
        "{}",
        server.log()
    );
    let serves = |common_name: &str| {
        let answered = health(&server, &ca_file);
        assert_eq!(answered.status, 200, "{answered:?}");
        answered.stderr.contains(&format!("CN={common_name}"))
    };
    assert!(serves("first"));

    // Made writable by others, then given a new pair: refused, logged once; the first pair
    // keeps serving.
    set_mode(&key, 0o666);
    let writable = ["TLS files refused", "serve.tls_key_file", "0666"];
    await_log(&server, "WARN", &writable, || assert!(serves("first")));
    serve_pair(&pki, "second");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        serves("first"),
        "a pair in a key file others may write was taken"
    );
    assert_eq!(
        log_lines(&server, "WARN", &writable).len(),
        1,
        "{}",
        server.log()
    );

    // Its owner's alone: the second pair is taken, without a warning. Readable by others
    // again, with the third pair: taken, warned about again.
    set_mode(&key, 0o600);
    let started = Instant::now();
    while !serves("second") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        log_lines(&server, "WARN", &readable).len(),
        1,
        "{}",
        server.log()
    );
    set_mode(&key, 0o644);
    serve_pair(&pki, "third");
    let started = Instant::now();
    while !serves("third") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    await_log(
        &server,
        "WARN",
        &["0644", "read by users other than its owner"],
        || {},
    );
    assert!(
        log_lines(&server, "WARN", &readable).len() >= 2,
        "{}",
        server.log()
    );
    println!(
        "attacks_tls: a key file of mode 0666 refused at start (exit 2) and at reload (logged \
         once, the loaded pair kept); of mode 0644 served and warned about at start and reload"
    );
}

//! `mend request` against a real `mend serve` with a tokens file, TLS and a client CA: the
//! secret from each of its sources, a client certificate instead of a secret, the exit code of
//! each kind of answer, TLS refusals either way, no connection or no answer, bad input that
//! sends nothing, and no secret in anything it printed. Then where a secret may go over plain
//! http://, heard by a proxy the environment names.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{mend_command, ok_json};
use crate::security::{SecureServer, pki, secret_of};

/// What one `mend request` printed, and how it exited.
#[derive(Debug)]
struct Requested {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Requested {
    /// The JSON it printed on stdout.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|error| panic!("no JSON on stdout ({error}): {self:?}"))
    }
}

/// The variables that name a proxy for reqwest (CGI's `REQUEST_METHOD` turns `HTTP_PROXY`
/// off): each run's are the test's to give, never the environment's it runs in.
const PROXY_VARIABLES: [&str; 9] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "REQUEST_METHOD",
];

/// Every run's output, for the secrets check at the end.
#[derive(Default)]
struct Transcript {
    text: String,
    runs: usize,
}

impl Transcript {
    /// `mend request ARGS` run in `dir` with `env` (and no other `MEND_*` or proxy variable),
    /// `stdin` written to its standard input.
    fn run(&mut self, dir: &Path, args: &[&str], env: &[(&str, &str)], stdin: &str) -> Requested {
        let mut command = mend_command(dir);
        for name in PROXY_VARIABLES {
            command.env_remove(name);
        }
        command
            .arg("request")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("run mend request");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        let requested = Requested {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        };
        // What it printed, never its arguments, which hold secrets.
        self.text
            .push_str(&format!("{}\n{}\n", requested.stdout, requested.stderr));
        self.runs += 1;
        requested
    }
}

/// Checks that `requested` exited with `code` and said every one of `mentions` on stderr.
fn exited(requested: &Requested, code: i32, mentions: &[&str]) {
    assert_eq!(requested.code, code, "{requested:?}");
    for mention in mentions {
        assert!(
            requested.stderr.contains(mention),
            "stderr should mention {mention:?}: {requested:?}"
        );
    }
}

/// What each client `listener` holds sent before it went: one text per connection, in the
/// order they came. Called once the clients have exited, so it never waits for one.
fn heard(listener: &TcpListener) -> Vec<String> {
    listener.set_nonblocking(true).unwrap();
    let mut heard = Vec::new();
    loop {
        match listener.accept() {
            Ok((mut connection, _)) => {
                connection.set_nonblocking(false).unwrap();
                // The client has exited: its end is closed, and the read ends where its
                // bytes do. The timeout only guards against a client still running.
                connection
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                let mut bytes = Vec::new();
                connection.read_to_end(&mut bytes).unwrap();
                heard.push(String::from_utf8_lossy(&bytes).into_owned());
            }
            Err(error) if error.kind() == ErrorKind::WouldBlock => return heard,
            Err(error) => panic!("accept: {error}"),
        }
    }
}

/// The whole command against a secured server, from outside.
#[test]
fn mend_request_talks_to_a_secured_server_as_a_principal() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // The command runs in a folder of its own, which must stay empty: it opens no catalog.
    let client_dir = dir.join("client");
    std::fs::create_dir(&client_dir).unwrap();
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
    let reader = ok_json(dir, &["token", "new", "reader", "--grant", "read:logs-*"]);
    let tokens_file = dir.join("tokens");
    std::fs::write(
        &tokens_file,
        [
            writer["tokens_file_line"].as_str().unwrap(),
            reader["tokens_file_line"].as_str().unwrap(),
            "ingest cert:ingest-1.example.internal read:logs-*",
        ]
        .join("\n"),
    )
    .unwrap();
    let (writer_secret, reader_secret) = (secret_of(&writer), secret_of(&reader));
    // A secret the server does not know, which must not be printed either.
    let unknown_secret = format!("mend_{}", "0f".repeat(32));
    // The writer's secret in a file, with the line break an editor leaves.
    let writer_file = dir.join("writer.token");
    std::fs::write(&writer_file, format!("{writer_secret}\n")).unwrap();
    let writer_file = writer_file.display().to_string();
    let path = |name: &str| pki.path(name).display().to_string();
    let server = SecureServer::start(
        dir,
        &[
            ("MEND_SERVE_TOKENS_FILE", tokens_file.display().to_string()),
            ("MEND_SERVE_TLS_CERT_FILE", path("server.pem")),
            ("MEND_SERVE_TLS_KEY_FILE", path("server.key")),
            ("MEND_SERVE_TLS_CLIENT_CA_FILE", path("ca.pem")),
        ],
    );
    let https = format!("https://{}", server.address);
    let ca = path("ca.pem");
    let mut out = Transcript::default();
    let mut checks = 0;
    // `mend request` to the server, trusting its CA, with `args` and `env` added.
    let mut to_server = |args: &[&str], env: &[(&str, &str)], stdin: &str| {
        let mut all = vec!["--server", &https, "--cacert", &ca];
        all.extend(args);
        out.run(&client_dir, &all, env, stdin)
    };

    // A create with the secret from --token-file: 201 and the dataset on stdout, exit 0.
    let create = r#"{"dataset_id": "logs-a"}"#;
    let created = to_server(
        &[
            "POST",
            "/v1/datasets",
            "--body",
            create,
            "--token-file",
            &writer_file,
        ],
        &[],
        "",
    );
    exited(&created, 0, &[]);
    assert_eq!(created.json()["dataset_id"], "logs-a", "{created:?}");
    assert!(created.stdout.ends_with('\n'), "{created:?}");
    // The same create again: 409 already_exists, exit 4 as `mend dataset create` exits, the
    // server's error on stdout and its code and message on stderr.
    let again = to_server(
        &[
            "post",
            "/v1/datasets",
            "--body",
            create,
            "--token-file",
            &writer_file,
        ],
        &[],
        "",
    );
    exited(
        &again,
        4,
        &["mend request: HTTP 409 already_exists: ", "logs-a"],
    );
    assert_eq!(again.json()["error"], "already_exists", "{again:?}");
    checks += 2;

    // A read with the secret from MEND_TOKEN.
    let listed = to_server(
        &["GET", "/v1/datasets"],
        &[("MEND_TOKEN", &writer_secret)],
        "",
    );
    exited(&listed, 0, &[]);
    assert!(listed.stdout.contains("logs-a"), "{listed:?}");
    // Which secret wins: --token over --token-file (a flag each, refused together) and over
    // MEND_TOKEN; --token-file over MEND_TOKEN.
    let by_flag = to_server(
        &["GET", "/v1/datasets/logs-a", "--token", &reader_secret],
        &[("MEND_TOKEN", &unknown_secret)],
        "",
    );
    exited(&by_flag, 0, &[]);
    let by_file = to_server(
        &["GET", "/v1/datasets/logs-a", "--token-file", &writer_file],
        &[("MEND_TOKEN", &unknown_secret)],
        "",
    );
    exited(&by_file, 0, &[]);
    let unknown = to_server(
        &["GET", "/v1/datasets/logs-a", "--token", &unknown_secret],
        &[("MEND_TOKEN", &writer_secret)],
        "",
    );
    exited(&unknown, 1, &["HTTP 401 unauthorized"]);
    checks += 4;

    // No secret at all: 401, exit 1, and a hint naming where a secret goes.
    let anonymous = to_server(&["GET", "/v1/datasets"], &[], "");
    exited(
        &anonymous,
        1,
        &[
            "mend request: HTTP 401 unauthorized: ",
            "hint: ",
            "--token-file",
        ],
    );
    // The other answers, each with the exit code the other commands give its error.
    let reader_env = [("MEND_TOKEN", reader_secret.as_str())];
    let forbidden = to_server(
        &[
            "POST",
            "/v1/datasets",
            "--body",
            r#"{"dataset_id": "logs-b"}"#,
        ],
        &reader_env,
        "",
    );
    exited(&forbidden, 1, &["HTTP 403 forbidden", "principal reader"]);
    let missing = to_server(&["GET", "/v1/datasets/logs-nothing"], &reader_env, "");
    exited(&missing, 3, &["HTTP 404 not_found"]);
    let malformed = to_server(
        &[
            "POST",
            "/v1/datasets",
            "--body",
            "{not json",
            "--token-file",
            &writer_file,
        ],
        &[],
        "",
    );
    exited(&malformed, 2, &["HTTP 400 invalid_argument"]);
    checks += 4;

    // A body from stdin, and an idempotency key: the same create sent twice under it
    // answers the first answer, not "already exists".
    let staged = to_server(
        &[
            "POST",
            "/v1/datasets/logs-a/stage",
            "--body-file",
            "-",
            "--token-file",
            &writer_file,
        ],
        &[],
        r#"{"mode": "create-only", "splits": [{"split_id": "from-stdin"}]}"#,
    );
    exited(&staged, 0, &[]);
    assert!(staged.stdout.contains("from-stdin"), "{staged:?}");
    let body_file = dir.join("stage.json");
    std::fs::write(
        &body_file,
        r#"{"mode": "create-only", "splits": [{"split_id": "from-file"}]}"#,
    )
    .unwrap();
    let staged = to_server(
        &[
            "POST",
            "/v1/datasets/logs-a/stage",
            "--body-file",
            &body_file.display().to_string(),
            "--content-type",
            "application/json; charset=utf-8",
            "--token-file",
            &writer_file,
        ],
        &[],
        "",
    );
    exited(&staged, 0, &[]);
    assert!(staged.stdout.contains("from-file"), "{staged:?}");
    for _ in 0..2 {
        let keyed = to_server(
            &[
                "POST",
                "/v1/datasets",
                "--body",
                r#"{"dataset_id": "logs-keyed"}"#,
                "--idempotency-key",
                "create-logs-keyed",
                "--token-file",
                &writer_file,
            ],
            &[],
            "",
        );
        exited(&keyed, 0, &[]);
        assert_eq!(keyed.json()["dataset_id"], "logs-keyed", "{keyed:?}");
    }
    checks += 3;

    // A client certificate the tokens file maps to `ingest`: that principal, no secret.
    let cert_args = ["--cert", &path("ingest.pem"), "--key", &path("ingest.key")];
    let mut by_cert = vec!["GET", "/v1/datasets/logs-a"];
    by_cert.extend(cert_args);
    let by_cert = to_server(&by_cert, &[], "");
    exited(&by_cert, 0, &[]);
    assert_eq!(by_cert.json()["dataset_id"], "logs-a", "{by_cert:?}");
    // Mapped to a principal that may read, not write.
    let mut write_by_cert = vec!["POST", "/v1/datasets", "--body", create];
    write_by_cert.extend(cert_args);
    let write_by_cert = to_server(&write_by_cert, &[], "");
    exited(
        &write_by_cert,
        1,
        &["HTTP 403 forbidden", "principal ingest"],
    );
    // A certificate of another CA: the server refuses the handshake; exit 1, TLS named.
    let (stranger_cert, stranger_key) = (path("stranger.pem"), path("stranger.key"));
    let stranger = [
        "GET",
        "/v1/datasets/logs-a",
        "--cert",
        &stranger_cert,
        "--key",
        &stranger_key,
    ];
    let stranger = to_server(&stranger, &[], "");
    exited(
        &stranger,
        1,
        &["TLS with https://127.0.0.1:", "the server refused"],
    );
    checks += 3;

    // Trusting another CA, or the system's roots: the client refuses the server's
    // certificate, exit 1 (retrying cannot help), and says so.
    let distrustful = out.run(
        &client_dir,
        &[
            "GET",
            "/v1/datasets",
            "--server",
            &https,
            "--cacert",
            &path("other-ca.pem"),
            "--token-file",
            &writer_file,
        ],
        &[],
        "",
    );
    exited(
        &distrustful,
        1,
        &[
            "does not trust the server's certificate",
            "nothing was sent",
            "--cacert",
        ],
    );
    let system_roots = out.run(
        &client_dir,
        &["GET", "/healthz"],
        &[("MEND_SERVER", &https)],
        "",
    );
    exited(
        &system_roots,
        1,
        &["does not trust the server's certificate"],
    );
    // Plain HTTP to the TLS port: the server's own 400 says to use https://.
    let plain = out.run(
        &client_dir,
        &[
            "GET",
            "/healthz",
            "--server",
            &format!("http://{}", server.address),
        ],
        &[],
        "",
    );
    exited(&plain, 2, &["HTTP 400 invalid_argument", "https://"]);
    // And https:// to the plain probe address: no TLS there, exit 1.
    let no_tls = out.run(
        &client_dir,
        &[
            "GET",
            "/healthz",
            "--server",
            &format!("https://{}", server.probes),
        ],
        &[],
        "",
    );
    exited(
        &no_tls,
        1,
        &[
            "mend request: TLS with https://",
            "hint: is the server's address https://",
        ],
    );
    checks += 4;

    // No connection (a port nobody listens on): exit 5, nothing sent. A server that never
    // answers: exit 5 once --timeout-ms passes, the outcome unknown.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let refused = out.run(
        &client_dir,
        &["GET", "/healthz", "--server", &closed_url],
        &[],
        "",
    );
    exited(&refused, 5, &["cannot connect", "nothing was sent"]);
    // The kernel completes its connections; nobody reads or answers them.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let timed_out = out.run(
        &client_dir,
        &[
            "GET",
            "/healthz",
            "--server",
            &silent_url,
            "--timeout-ms",
            "300",
        ],
        &[("MEND_TOKEN", &writer_secret)],
        "",
    );
    exited(
        &timed_out,
        5,
        &["no whole answer", "the outcome is unknown"],
    );
    drop(silent);
    checks += 2;

    // Bad input: exit 2 before anything is sent, to a listener that counts connections.
    let watcher = TcpListener::bind("127.0.0.1:0").unwrap();
    let watched = format!("https://{}", watcher.local_addr().unwrap());
    let key = path("ingest.key");
    let cert = path("ingest.pem");
    let bad_inputs: [(&[&str], &[&str]); 11] = [
        (
            &["GET", "/healthz", "--server", "ftp://x"],
            &["ftp://", "http:// or https://"],
        ),
        (&["GET", "/healthz", "--server", "not a url"], &["--server"]),
        (
            &["GET", "v1/datasets", "--server", &watched],
            &["does not start with /"],
        ),
        (
            &["PATCH", "/v1/datasets", "--server", &watched],
            &["GET, HEAD, POST, PUT or DELETE"],
        ),
        (
            &["GET", "/healthz", "--server", &watched, "--cert", &cert],
            &["--cert and --key"],
        ),
        (
            &["GET", "/healthz", "--server", &watched, "--key", &key],
            &["--cert and --key"],
        ),
        (
            &["GET", "/healthz", "--server", &watched, "--timeout-ms", "0"],
            &["--timeout-ms is 0", "1..=3600000"],
        ),
        (
            &[
                "GET",
                "/healthz",
                "--server",
                &watched,
                "--timeout-ms",
                "3600001",
            ],
            &["3600001"],
        ),
        (
            &[
                "GET",
                "/healthz",
                "--server",
                &watched,
                "--cacert",
                "/no/such/ca.pem",
            ],
            &["--cacert /no/such/ca.pem"],
        ),
        (
            &[
                "GET",
                "/healthz",
                "--server",
                "http://127.0.0.1:7600",
                "--cacert",
                &ca,
            ],
            &["for https://"],
        ),
        (
            &[
                "GET",
                "/healthz",
                "--server",
                &watched,
                "--content-type",
                "text/plain",
            ],
            &["--body"],
        ),
    ];
    for (args, mentions) in bad_inputs {
        let refused = out.run(&client_dir, args, &[("MEND_TOKEN", &writer_secret)], "");
        exited(&refused, 2, mentions);
        checks += 1;
    }
    // Refused by clap before the command runs: two sources of the secret at once. Its
    // message names the flags, never their values.
    let both = out.run(
        &client_dir,
        &[
            "GET",
            "/healthz",
            "--server",
            &watched,
            "--token",
            &writer_secret,
            "--token-file",
            &writer_file,
        ],
        &[],
        "",
    );
    exited(&both, 2, &["--token", "--token-file"]);
    // A token file that is not there, or empty.
    let empty_file = dir.join("empty.token");
    std::fs::write(&empty_file, "\n").unwrap();
    for file in [dir.join("absent.token"), empty_file] {
        let file = file.display().to_string();
        let refused = out.run(
            &client_dir,
            &[
                "GET",
                "/healthz",
                "--server",
                &watched,
                "--token-file",
                &file,
            ],
            &[],
            "",
        );
        exited(&refused, 2, &["--token-file"]);
    }
    watcher.set_nonblocking(true).unwrap();
    assert_eq!(
        watcher.accept().map_err(|error| error.kind()).err(),
        Some(std::io::ErrorKind::WouldBlock),
        "a refused request connected"
    );
    checks += 3;

    // With every log line on (trace, every crate's), one authenticated request: its log
    // must not hold the secret either.
    let mut traced = mend_command(&client_dir);
    let traced = traced
        .args(["--set", "log.level=trace", "request", "GET", "/v1/datasets"])
        .args([
            "--server",
            &https,
            "--cacert",
            &ca,
            "--token-file",
            &writer_file,
        ])
        .output()
        .unwrap();
    assert!(traced.status.success(), "{traced:?}");
    let traced_log = String::from_utf8_lossy(&traced.stderr).into_owned();
    assert!(traced_log.contains("TRACE"), "no trace lines: {traced_log}");
    out.text.push_str(&traced_log);
    checks += 1;

    // The help shows MEND_SERVER and MEND_TOKEN by name, never their values.
    let help = out.run(
        &client_dir,
        &["--help"],
        &[("MEND_TOKEN", &writer_secret), ("MEND_SERVER", &https)],
        "",
    );
    exited(&help, 0, &[]);
    assert!(help.stdout.contains("MEND_TOKEN") && help.stdout.contains("MEND_SERVER"));
    assert!(!help.stdout.contains(&https), "{help:?}");
    checks += 1;

    // No secret in anything printed, nor in the server's log; nothing written where it ran.
    let log = server.log();
    for secret in [&writer_secret, &reader_secret, &unknown_secret] {
        assert!(
            !out.text.contains(secret.as_str()),
            "a secret in mend request's output"
        );
        assert!(
            !log.contains(secret.as_str()),
            "a secret in the server's log"
        );
    }
    let left: Vec<_> = std::fs::read_dir(&client_dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "mend request wrote {left:?}");
    checks += 2;
    println!(
        "request: {checks} checks in {} runs of mend request against a TLS server with 2 secrets \
         and a client certificate; no secret in {} bytes of their output and {} of server log",
        out.runs + 1,
        out.text.len(),
        log.len()
    );
}

/// A secret goes over plain http:// only to loopback, unless `--insecure` says to send it
/// anyway, with a warning; a request without one goes anywhere. A proxy the environment names
/// stands in for the network: it hears every request meant for another machine, which shows
/// whether one was sent without a route to that machine or a server on it. A loopback server
/// is reached directly, past the proxy, which would otherwise read the secret in the clear.
#[test]
fn a_secret_goes_over_plain_http_only_to_loopback_unless_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let secret = format!("mend_{}", "5a".repeat(32));
    let secret_file = dir.join("secret.token");
    std::fs::write(&secret_file, format!("{secret}\n")).unwrap();
    let secret_file = secret_file.display().to_string();
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let proxied = ("HTTP_PROXY", proxy_url.as_str());
    let from_env = ("MEND_TOKEN", secret.as_str());
    let mut out = Transcript::default();
    // Another machine's address (private, and no server of this test's), which only the
    // proxy hears.
    let remote = "http://10.0.0.1:7600";

    // A secret from each of its sources, to another machine over plain http://: exit 2 at
    // once, saying why and what to do, and nothing sent, not even to the proxy.
    let flags_and_env = [
        (remote, vec!["--token", &secret], vec![proxied]),
        (remote, vec!["--token-file", &secret_file], vec![proxied]),
        (remote, vec![], vec![proxied, from_env]),
        // A name other than localhost is another machine, whatever it resolves to.
        ("http://mend.internal:7600", vec![], vec![proxied, from_env]),
    ];
    for (server, more, env) in flags_and_env {
        let mut args = vec![
            "GET",
            "/healthz",
            "--server",
            server,
            "--timeout-ms",
            "5000",
        ];
        args.extend(more);
        let started = Instant::now();
        let refused = out.run(dir, &args, &env, "");
        exited(
            &refused,
            2,
            &[
                "plain http://",
                "other than loopback",
                "https://",
                "--cacert",
                "--insecure",
            ],
        );
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "the refusal took {:?}: it waited for the network",
            started.elapsed()
        );
    }
    assert_eq!(
        heard(&proxy),
        Vec::<String>::new(),
        "a refused request was sent"
    );

    // The timeout ends a run whose request the proxy never answers.
    let mut to_remote = |more: &[&str]| {
        let mut args = vec![
            "GET",
            "/healthz",
            "--server",
            remote,
            "--timeout-ms",
            "1000",
        ];
        args.extend(more);
        out.run(dir, &args, &[proxied], "")
    };

    // With --insecure: sent, and said in one warning line. The proxy never answers, so the
    // run ends at its timeout with the outcome unknown (exit 5), once the proxy heard it all.
    let sent = to_remote(&["--token", &secret, "--insecure"]);
    exited(&sent, 5, &["no whole answer"]);
    let warnings: Vec<&str> = sent
        .stderr
        .lines()
        .filter(|line| line.starts_with("warning: "))
        .collect();
    assert_eq!(warnings.len(), 1, "{sent:?}");
    assert!(warnings[0].contains("--insecure"), "{sent:?}");
    assert!(warnings[0].contains(remote), "{sent:?}");
    let requests = heard(&proxy);
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0].starts_with(&format!("GET {remote}/healthz HTTP/1.1\r\n")));
    assert!(
        requests[0].contains(&format!("authorization: Bearer {secret}\r\n")),
        "the secret was not sent"
    );

    // No secret: plain http:// to another machine goes as before, with no warning.
    let anonymous = to_remote(&[]);
    exited(&anonymous, 5, &["no whole answer"]);
    assert!(!anonymous.stderr.contains("warning"), "{anonymous:?}");
    let requests = heard(&proxy);
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0].starts_with(&format!("GET {remote}/healthz HTTP/1.1\r\n")));
    assert!(!requests[0].contains("authorization"), "{requests:?}");

    // A secret to a loopback server over plain http://: sent straight to it, with no
    // warning; the proxy hears nothing.
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let local = format!("http://{}", server.local_addr().unwrap());
    let direct = out.run(
        dir,
        &[
            "GET",
            "/healthz",
            "--server",
            &local,
            "--timeout-ms",
            "1000",
        ],
        &[proxied, from_env],
        "",
    );
    exited(&direct, 5, &["no whole answer"]);
    assert!(!direct.stderr.contains("warning"), "{direct:?}");
    assert_eq!(
        heard(&proxy),
        Vec::<String>::new(),
        "the proxy heard a loopback request"
    );
    let requests = heard(&server);
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(
        requests[0].starts_with("GET /healthz HTTP/1.1\r\n"),
        "{requests:?}"
    );
    assert!(requests[0].contains(&format!("authorization: Bearer {secret}\r\n")));

    assert!(
        !out.text.contains(&secret),
        "a secret in mend request's output"
    );
}

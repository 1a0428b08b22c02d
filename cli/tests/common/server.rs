//! A real `mend serve` for tests: started on `127.0.0.1:0` in a directory of its own, spoken to
//! over plain HTTP/1.1 (one connection per request, `Connection: close`), killed when dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The admin token servers started with [`ServerOptions::admin`] accept.
pub const ADMIN_TOKEN: &str = "s3cret-admin-token";

/// What a test server runs on and with.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// The catalog URL; `None` is `mend-data` in the server's directory.
    pub catalog: Option<String>,
    /// The objects URL; `None` keeps them in the catalog's own store.
    pub objects: Option<String>,
    /// The admin token, if admin requests are to be accepted.
    pub admin_token: Option<String>,
    /// `KEY=VALUE` settings passed with `--set`, after the test defaults (a supervisor
    /// interval of 100 ms and a backoff of at most 400 ms).
    pub settings: Vec<String>,
}

impl ServerOptions {
    /// The embedded default catalog, with the admin token [`ADMIN_TOKEN`].
    pub fn admin() -> Self {
        Self {
            admin_token: Some(ADMIN_TOKEN.into()),
            ..Self::default()
        }
    }

    pub fn with_settings(mut self, settings: &[&str]) -> Self {
        self.settings
            .extend(settings.iter().map(ToString::to_string));
        self
    }
}

/// A running `mend serve`; killed when dropped.
#[derive(Debug)]
pub struct TestServer {
    child: Child,
    pub address: SocketAddr,
    /// The catalog URL and the objects URL (`None`: the catalog's own store) it serves.
    pub catalog: String,
    pub objects: Option<String>,
    log: Arc<Mutex<String>>,
}

/// An answer: status, headers (names in lower case) and body (JSON, or the text as a string).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

impl TestServer {
    /// Starts a server in `dir` and waits until it is ready (at most 60 s to listen, 30 s more
    /// to be ready).
    pub fn start(dir: &Path, options: ServerOptions) -> TestServer {
        let catalog = options
            .catalog
            .clone()
            .unwrap_or_else(|| format!("file://{}", dir.join("mend-data").display()));
        let mut command = super::mend_command(dir);
        command.args([
            "--set",
            "serve.supervisor_interval_ms=100",
            "--set",
            "serve.supervisor_max_backoff_ms=400",
        ]);
        for setting in &options.settings {
            command.args(["--set", setting]);
        }
        command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("MEND_CATALOG", &catalog)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(objects) = &options.objects {
            command.env("MEND_OBJECTS", objects);
        }
        if let Some(token) = &options.admin_token {
            command.env("MEND_SERVE_ADMIN_TOKEN", token);
        }
        let mut child = command.spawn().expect("start mend serve");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(address) = line.split("listening on http://").nth(1) {
                    let address = address.split_whitespace().next().unwrap_or_default();
                    let _ = tx.send(address.parse::<SocketAddr>().unwrap());
                }
                let mut log = lines.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let address = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("mend serve did not start: {}", log.lock().unwrap()));
        let server = TestServer {
            child,
            address,
            catalog,
            objects: options.objects,
            log,
        };
        server.wait_for("ready", |s| s.get("/readyz").status == 200);
        server
    }

    /// Sends `raw` on a new connection and reads the answer to the end, within 60 s.
    pub fn send(&self, raw: &[u8]) -> Answer {
        let mut stream = TcpStream::connect(self.address).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        stream.write_all(raw).unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("read the answer");
        parse_answer(&answer)
    }

    /// A request with a JSON body (or none), and the admin token if one is given.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        self.send(&request_bytes(
            method,
            path,
            "application/json",
            token,
            body.as_bytes(),
        ))
    }

    /// A request with a JSON body (or none), the admin token if one is given, and
    /// `Idempotency-Key: key`.
    pub fn keyed_request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        key: &str,
        body: Option<&Value>,
    ) -> Answer {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let raw = request_bytes(method, path, "application/json", token, body.as_bytes());
        // The head ends with the blank line; the key goes just before it.
        let head_end = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a request head")
            + 2;
        let mut keyed = raw[..head_end].to_vec();
        keyed.extend_from_slice(format!("Idempotency-Key: {key}\r\n").as_bytes());
        keyed.extend_from_slice(&raw[head_end..]);
        self.send(&keyed)
    }

    pub fn get(&self, path: &str) -> Answer {
        self.request("GET", path, None, None)
    }

    pub fn post(&self, path: &str, body: Value) -> Answer {
        self.request("POST", path, None, Some(&body))
    }

    /// Everything the server has written to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Polls `done` for up to 30 s.
    pub fn wait_for(&self, what: &str, done: impl Fn(&TestServer) -> bool) {
        let started = Instant::now();
        while !done(self) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "timed out waiting for {what}; server log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The process, for tests that signal it.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP/1.1 request on a connection of its own.
pub fn request_bytes(
    method: &str,
    path: &str,
    content_type: &str,
    token: Option<&str>,
    body: &[u8],
) -> Vec<u8> {
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

pub fn parse_answer(answer: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("an HTTP answer, got {text:?}"));
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_lowercase(), value.trim().to_owned()))
        .collect();
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_string()))
    };
    Answer {
        status,
        headers,
        body,
    }
}

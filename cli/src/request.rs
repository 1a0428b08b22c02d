//! `mend request METHOD PATH`: one HTTP request to a `mend serve`, made as one of its
//! principals.
//!
//! Every other command works on the catalog directly, with the storage's credentials: whoever
//! can run it can do anything. A server is guarded instead by its principals (the secrets and
//! client certificates of its tokens file) and by its TLS, and this command is how a person or
//! a script goes through those guards. It takes the same flags as the Python writer
//! (`examples/python/mend_writer.py`): the secret from `--token`, else the file `--token-file`
//! names, else `MEND_TOKEN`; `--cacert` for the one CA to trust; `--cert` and `--key` for
//! mutual TLS.
//!
//! It opens no catalog. Everything it is given is checked, and every file it names read,
//! before anything is sent: bad input is exit 2 and nothing reaches the server. The answer's
//! body is printed on stdout as it came, whatever its status. A failure status is also said
//! on stderr, and exits with the code the other commands give the same error
//! ([`RequestError::exit_code`]), so a script handles `mend request` and, say, `mend dataset
//! create` alike. No connection, or no whole answer, is exit 5 (retry); a certificate one
//! side does not trust is exit 1, as retrying cannot help.
//!
//! The secret is sent only as the `Authorization` header, only to the server named (redirects
//! are not followed), and shown nowhere: not in an error, the help, a log line or a `Debug`.
//! Over plain http:// it goes only to loopback (`localhost`, 127.0.0.0/8, ::1), where it never
//! leaves the machine. To any other address it would cross the network for anyone on the way
//! to read, and is refused as bad input unless `--insecure` says to send it anyway, which a
//! warning on stderr then repeats. A proxy the environment names (`HTTP_PROXY`, `HTTPS_PROXY`,
//! `ALL_PROXY` and `NO_PROXY`, upper or lower case) carries the request to every server but a
//! loopback one, which is reached directly; it sees the secret only over http://, so only
//! with `--insecure`: over https:// it relays the TLS connection unread.

use std::fmt;
use std::io::{Read, Write};
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use reqwest::{Certificate, Identity, Method, StatusCode};
use url::{Host, Url};

use super::{BadInput, RequestArgs};

/// The server when neither `--server` nor `MEND_SERVER` names one: `mend serve`'s default
/// address.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7600";
/// Where the secret comes from when neither `--token` nor `--token-file` is given.
pub const TOKEN_ENV: &str = "MEND_TOKEN";
/// The largest request body sent: the most any route of the server takes.
const MAX_BODY_BYTES: u64 = 1 << 30;
/// The largest answer read. The server's largest answers (a page of splits, an audit) are far
/// smaller; past this, something other than mend is answering.
const MAX_ANSWER_BYTES: u64 = 256 << 20;
/// The largest token, CA or certificate file read: each is a few kilobytes.
const MAX_CREDENTIAL_FILE_BYTES: u64 = 1 << 20;
/// How long opening the connection (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The hint for a request whose outcome is unknown.
const UNKNOWN_OUTCOME: &str = "the outcome is unknown: send it again (a write with the same --idempotency-key answers its first result)";
/// The header under which the server records a write's result for retries.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// A principal's secret, as `--token` gives it: its `Debug` shows only that it is one, so that
/// no `{:?}` of the arguments prints it.
#[derive(Clone)]
pub struct Secret(String);

/// How `mend request` failed once its input was checked.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The server answered with a status that is not a success.
    #[error("mend request: HTTP {} {label}: {message}", .status.as_u16())]
    Answered {
        status: StatusCode,
        /// The answer's `error`, when its body is mend's JSON error.
        code: Option<String>,
        /// The code, or the status's name when the body is not mend's.
        label: String,
        /// The answer's `message`, or the start of a body that is not mend's.
        message: String,
    },
    /// No connection was opened (refused, no such host, timed out connecting): nothing was
    /// sent.
    #[error("mend request: cannot connect to {origin}: nothing was sent")]
    NotConnected {
        origin: String,
        #[source]
        source: reqwest::Error,
    },
    /// The server closed each of two fresh connections before the request went out on it:
    /// nothing was sent. Over TLS 1.3 this is also how a server refuses a client certificate
    /// (its alert comes after the client's side of the handshake is done).
    #[error(
        "mend request: {origin} closed the connection before the request went out, twice: nothing was sent"
    )]
    NotSent {
        origin: String,
        #[source]
        source: reqwest::Error,
    },
    /// The request went, at least in part, and no whole answer came back (reset, timed out):
    /// the outcome is unknown.
    #[error("mend request: no whole answer from {origin}: the outcome is unknown")]
    NoAnswer {
        origin: String,
        #[source]
        source: reqwest::Error,
    },
    /// This client does not trust the server's certificate (signed by a CA it was not told to
    /// trust, expired, for another name): nothing was sent, and retrying cannot help.
    #[error(
        "mend request: TLS with {origin} failed: this client does not trust the server's certificate ({why}); nothing was sent"
    )]
    ServerNotTrusted { origin: String, why: String },
    /// The server ended the handshake with an alert, as it does for a client certificate it
    /// does not trust: the request was not processed, and retrying cannot help.
    #[error(
        "mend request: TLS with {origin} failed: the server refused the handshake ({alert}); the request was not processed"
    )]
    HandshakeRefused { origin: String, alert: String },
    /// Any other TLS failure, such as https:// to a port that does not speak TLS.
    #[error("mend request: TLS with {origin} failed: {problem}")]
    Tls { origin: String, problem: String },
    /// The answer is larger than this command reads; nothing of it was printed.
    #[error(
        "mend request: the answer (HTTP {}) is over {MAX_ANSWER_BYTES} bytes; nothing of it was printed",
        .status.as_u16()
    )]
    AnswerTooLarge { status: StatusCode },
}

/// A request whose every part was checked, and every file read, before anything is sent.
#[derive(Debug)]
struct CheckedRequest {
    method: Method,
    url: Url,
    /// `Bearer SECRET`, marked sensitive.
    authorization: Option<HeaderValue>,
    /// The secret goes over plain http:// to an address other than loopback, as `--insecure`
    /// allowed: said on stderr as it is sent.
    secret_in_the_clear: bool,
    idempotency_key: Option<HeaderValue>,
    /// The body and its content type.
    body: Option<(Vec<u8>, HeaderValue)>,
    /// The CAs to trust instead of the system's roots (`--cacert`).
    trusted_cas: Option<Vec<Certificate>>,
    /// The client certificate and key (`--cert`, `--key`).
    identity: Option<Identity>,
    timeout: Duration,
}

/// Checks `args`, sends the request, prints the answer's body; an error if the answer is not a
/// success or none came.
pub async fn run(args: RequestArgs) -> anyhow::Result<()> {
    let request = CheckedRequest::from_args(args)?;
    let client = request.client()?;
    let (status, body) = request.send(&client).await?;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(&body)
        .and_then(|()| match body.last() {
            Some(b'\n') | None => Ok(()),
            Some(_) => stdout.write_all(b"\n"),
        })
        .and_then(|()| stdout.flush())
        .context("write the answer to stdout")?;
    if status.is_success() {
        Ok(())
    } else {
        Err(RequestError::answered(status, &body).into())
    }
}

impl Secret {
    /// The secret itself, for the one header that carries it.
    fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(secret: String) -> Self {
        Self(secret)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl RequestError {
    /// The exit code: the one the other commands give the same error (lib.rs's table), so a
    /// script tells "fix the request" (2), "not there" (3), "lost a race or a precondition"
    /// (4), "retry" (5) and "the policy said no" (6) apart as it does for them.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Answered { status, code, .. } => match code.as_deref() {
                Some("invalid_argument") => 2,
                Some("not_found") => 3,
                // A 503, but an unresolved operation in the way: what the engine's
                // RecoveryRequired is to every other command.
                Some(
                    "already_exists" | "failed_precondition" | "conflict" | "recovery_required",
                ) => 4,
                Some("policy_rejected" | "policy_failed" | "capability_missing") => 6,
                // A 503, but stored state mend cannot read: retrying will not fix it.
                Some("corrupt") => 1,
                // Every other 503 (unavailable, transient, overloaded, shutting down, ...) is
                // "retry"; so are a gateway's 502 and 504 in front of a server, which leave the
                // outcome unknown too.
                _ if matches!(
                    *status,
                    StatusCode::SERVICE_UNAVAILABLE
                        | StatusCode::BAD_GATEWAY
                        | StatusCode::GATEWAY_TIMEOUT
                ) =>
                {
                    5
                }
                _ => 1,
            },
            Self::NotConnected { .. } | Self::NotSent { .. } | Self::NoAnswer { .. } => 5,
            Self::ServerNotTrusted { .. }
            | Self::HandshakeRefused { .. }
            | Self::Tls { .. }
            | Self::AnswerTooLarge { .. } => 1,
        }
    }

    /// What to do next, where this command knows better than the server's message.
    pub fn hint(&self) -> Option<&'static str> {
        Some(match self {
            Self::Answered { code, .. } => match code.as_deref()? {
                "unauthorized" => {
                    "give a principal's secret with --token-file, --token or MEND_TOKEN (`mend token new` makes one), or a client certificate with --cert and --key"
                }
                "forbidden" => {
                    "the principal's grants in the server's tokens file do not allow this request"
                }
                "unavailable" | "transient" => UNKNOWN_OUTCOME,
                _ => return None,
            },
            Self::NotConnected { .. } => {
                "is `mend serve` listening at --server (or MEND_SERVER)? nothing was sent: retry once it is"
            }
            Self::NotSent { .. } => {
                "nothing was sent: retry; with --cert, check that the server's client CA signed it (over TLS 1.3 a refused certificate closes the connection this way)"
            }
            Self::NoAnswer { .. } => UNKNOWN_OUTCOME,
            Self::ServerNotTrusted { .. } => {
                "give --cacert the CA that signed the server's certificate (without --cacert, the system's CAs are trusted)"
            }
            Self::HandshakeRefused { .. } => {
                "with mutual TLS, --cert must be a client certificate the server's client CA signed, valid now"
            }
            Self::Tls { .. } => "is the server's address https://? does it speak TLS there?",
            Self::AnswerTooLarge { .. } => return None,
        })
    }

    /// The error of an answer that is not a success: its code and message from mend's JSON
    /// error body, or its status and the start of whatever else it is.
    fn answered(status: StatusCode, body: &[u8]) -> Self {
        #[derive(serde::Deserialize)]
        struct MendErrorBody {
            error: String,
            message: String,
        }
        let status_name = status
            .canonical_reason()
            .unwrap_or("unknown status")
            .to_owned();
        match serde_json::from_slice::<MendErrorBody>(body) {
            Ok(mend) => Self::Answered {
                status,
                label: mend.error.clone(),
                code: Some(mend.error),
                message: mend.message,
            },
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                let first_line = text.lines().next().unwrap_or_default().trim();
                Self::Answered {
                    status,
                    code: None,
                    label: status_name,
                    message: if first_line.is_empty() {
                        "no mend error in the answer".to_owned()
                    } else {
                        mend::validate::truncated(first_line, 200)
                    },
                }
            }
        }
    }

    /// What a failed exchange with `origin` means: a TLS refusal, no connection, or no whole
    /// answer.
    fn failed(origin: &str, error: reqwest::Error) -> Self {
        let origin = origin.to_owned();
        match rustls_error(&error) {
            Some(rustls::Error::InvalidCertificate(why)) => Self::ServerNotTrusted {
                origin,
                why: format!("{why:?}"),
            },
            Some(rustls::Error::AlertReceived(alert)) => Self::HandshakeRefused {
                origin,
                alert: format!("{alert:?}"),
            },
            Some(other) => Self::Tls {
                origin,
                problem: other.to_string(),
            },
            None if error.is_connect() => Self::NotConnected {
                origin,
                source: error,
            },
            None => Self::NoAnswer {
                origin,
                source: error,
            },
        }
    }
}

impl CheckedRequest {
    /// Everything `args` says, checked, with the files it names read.
    fn from_args(args: RequestArgs) -> anyhow::Result<Self> {
        // What the arguments alone say first; then the files, the body (perhaps all of stdin)
        // last.
        let method = method(&args.method)?;
        let url = target(&args.server, &args.path)?;
        let timeout_ms = mend::bounds::REQUEST_TIMEOUT_MS
            .within(args.timeout_ms)
            .map_err(|problem| BadInput(problem.to_string()))?;
        let idempotency_key = args
            .idempotency_key
            .as_deref()
            .map(|key| -> anyhow::Result<HeaderValue> {
                mend::validate::idempotency_key(key).context("--idempotency-key")?;
                Ok(HeaderValue::from_str(key)
                    .map_err(|_| BadInput("--idempotency-key is not visible ASCII".to_owned()))?)
            })
            .transpose()?;
        let content_type = match (&args.content_type, &args.body, &args.body_file) {
            (Some(_), None, None) => {
                return Err(BadInput(
                    "--content-type describes a body: give --body or --body-file".to_owned(),
                )
                .into());
            }
            (content_type, _, _) => {
                HeaderValue::from_str(content_type.as_deref().unwrap_or("application/json"))
                    .map_err(|_| {
                        BadInput("--content-type is not a valid header value".to_owned())
                    })?
            }
        };
        if url.scheme() == "http"
            && [&args.cacert, &args.cert, &args.key]
                .iter()
                .any(|file| file.is_some())
        {
            return Err(BadInput(
                "--cacert, --cert and --key are for https://, and --server is http://".to_owned(),
            )
            .into());
        }
        let client_certificate = match (&args.cert, &args.key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(BadInput(
                    "--cert and --key go together: a client certificate and its key, or neither"
                        .to_owned(),
                )
                .into());
            }
        };
        let (authorization, secret_in_the_clear) =
            match authorization(args.token, args.token_file.as_deref())? {
                Some((header, from)) => (Some(header), in_the_clear(&url, &from, args.insecure)?),
                None => (None, false),
            };
        let trusted_cas = args.cacert.as_deref().map(trusted_cas).transpose()?;
        let identity = client_certificate
            .map(|(cert, key)| identity(cert, key))
            .transpose()?;
        let body = body(args.body, args.body_file.as_deref())?.map(|bytes| (bytes, content_type));
        Ok(Self {
            method,
            url,
            authorization,
            secret_in_the_clear,
            idempotency_key,
            body,
            trusted_cas,
            identity,
            timeout: Duration::from_millis(timeout_ms),
        })
    }

    /// The client this request is sent with: TLS 1.2 at least, the CAs to trust, the client
    /// certificate, the timeouts, no redirects.
    fn client(&self) -> anyhow::Result<reqwest::Client> {
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .min_tls_version(reqwest::tls::Version::TLS_1_2)
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(self.timeout)
            // The answer is printed as it came; a redirect followed would send the body (and,
            // to the same host, the secret) somewhere the caller did not name.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("mend/", env!("CARGO_PKG_VERSION")));
        if is_loopback(&self.url) {
            // A loopback address names this machine, which a proxy would take for its own;
            // and over http:// it would read the secret that goes in the clear only because
            // it does not leave this machine.
            builder = builder.no_proxy();
        }
        if let Some(cas) = &self.trusted_cas {
            builder = builder.tls_built_in_root_certs(false);
            for ca in cas {
                builder = builder.add_root_certificate(ca.clone());
            }
        }
        if let Some(identity) = &self.identity {
            builder = builder.identity(identity.clone());
        }
        let tls_files_given = self.trusted_cas.is_some() || self.identity.is_some();
        builder.build().map_err(|error| {
            // With the certificates parsed already, what is left to fail is putting them
            // together (a key that is not the certificate's): the files are at fault.
            if tls_files_given {
                BadInput(format!(
                    "set up TLS with --cacert, --cert and --key: {}",
                    super::one_line(&anyhow::Error::from(error))
                ))
                .into()
            } else {
                anyhow::Error::new(error).context("set up the HTTP client")
            }
        })
    }

    /// Sends the request and reads the whole answer: its status and body.
    async fn send(self, client: &reqwest::Client) -> Result<(StatusCode, Vec<u8>), RequestError> {
        let origin = self.url.origin().ascii_serialization();
        if self.secret_in_the_clear {
            // For the person who said --insecure, not a log line: written whatever the log
            // settings say, once, as the secret goes.
            eprintln!(
                "warning: --insecure: the secret goes to {origin} over plain http://, for anyone on the way to read"
            );
        }
        let mut request = client.request(self.method, self.url);
        if let Some(authorization) = self.authorization {
            request = request.header(AUTHORIZATION, authorization);
        }
        if let Some(key) = self.idempotency_key {
            request = request.header(IDEMPOTENCY_KEY, key);
        }
        if let Some((bytes, content_type)) = self.body {
            request = request.header(CONTENT_TYPE, content_type).body(bytes);
        }
        let request = request
            .build()
            .map_err(|error| RequestError::failed(&origin, error))?;
        // The body is bytes in memory, so the request can be sent again.
        let again = request.try_clone().expect("a body of bytes clones");
        let mut sent = client.execute(request).await;
        // A fresh connection the server closed before the request went out on it, for no
        // reason the connection kept (over TLS 1.3, the alert refusing a client certificate
        // comes after the client's side of the handshake, and can close the connection before
        // the request is sent, its cause dropped): nothing was sent, so sending once more, on
        // a new connection, is safe for any method.
        if matches!(&sent, Err(error) if never_sent(error)) {
            sent = client.execute(again).await;
            if let Err(error) = &sent
                && never_sent(error)
            {
                let source = sent.expect_err("matched just above");
                return Err(RequestError::NotSent { origin, source });
            }
        }
        let mut answer = sent.map_err(|error| RequestError::failed(&origin, error))?;
        let status = answer.status();
        let too_large = RequestError::AnswerTooLarge { status };
        if answer
            .content_length()
            .is_some_and(|length| length > MAX_ANSWER_BYTES)
        {
            return Err(too_large);
        }
        let mut body = Vec::new();
        while let Some(chunk) = answer
            .chunk()
            .await
            .map_err(|error| RequestError::failed(&origin, error))?
        {
            if (body.len() + chunk.len()) as u64 > MAX_ANSWER_BYTES {
                return Err(too_large);
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status, body))
    }
}

/// The methods the server's routes answer, in any case.
fn method(text: &str) -> Result<Method, BadInput> {
    match text.to_ascii_uppercase().as_str() {
        "GET" => Ok(Method::GET),
        "HEAD" => Ok(Method::HEAD),
        "POST" => Ok(Method::POST),
        "PUT" => Ok(Method::PUT),
        "DELETE" => Ok(Method::DELETE),
        _ => Err(BadInput(format!(
            "method {:?} is not one mend serve answers: use GET, HEAD, POST, PUT or DELETE",
            mend::validate::truncated(text, 32)
        ))),
    }
}

/// The URL of `path` (and its query) on `server`, which may carry a path prefix (a server
/// behind a proxy) but nothing else: no user name or password (the secret has flags of its
/// own), no query, no fragment.
fn target(server: &str, path: &str) -> Result<Url, BadInput> {
    let expected = "expected http://HOST:PORT or https://HOST:PORT";
    // The parser's message never quotes the URL, which could hold a password.
    let base =
        Url::parse(server).map_err(|error| BadInput(format!("--server: {error}; {expected}")))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(BadInput(format!(
            "--server {}://...: mend serve speaks http:// or https://; {expected}",
            mend::validate::truncated(base.scheme(), 16)
        )));
    }
    if !base.username().is_empty() || base.password().is_some() {
        return Err(BadInput(
            "--server carries a user name or password: give the principal's secret with --token-file, --token or MEND_TOKEN".to_owned(),
        ));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(BadInput(format!(
            "--server has a query or fragment; {expected}"
        )));
    }
    if !path.starts_with('/') {
        return Err(BadInput(format!(
            "path {:?} does not start with /: give the route's path, such as /v1/datasets",
            mend::validate::truncated(path, 64)
        )));
    }
    if path.contains('#') {
        return Err(BadInput(
            "the path has a fragment (#), which is never sent".to_owned(),
        ));
    }
    let joined = format!("{}{path}", base.as_str().trim_end_matches('/'));
    let url = Url::parse(&joined).map_err(|error| BadInput(format!("path: {error}")))?;
    // PATH follows the authority, so it cannot name another host; checked all the same, as
    // the secret goes wherever this URL points.
    if url.origin() != base.origin() {
        return Err(BadInput(
            "the path leads to another server than --server".to_owned(),
        ));
    }
    Ok(url)
}

/// Whether the secret from `from` would go over plain http:// to `url` off this machine
/// ([`is_loopback`]): refused unless `insecure`, which makes it `true`.
fn in_the_clear(url: &Url, from: &str, insecure: bool) -> Result<bool, BadInput> {
    if url.scheme() != "http" || is_loopback(url) {
        return Ok(false);
    }
    if insecure {
        return Ok(true);
    }
    Err(BadInput(format!(
        "--server {} is plain http:// to an address other than loopback: the secret from {from} would cross the network for anyone on the way to read, so nothing was sent; use https:// (with --cacert for the CA that signed the server's certificate), or --insecure to send it anyway",
        url.origin().ascii_serialization()
    )))
}

/// Whether `url` names this machine by loopback: the host `localhost`, or an IP address in
/// 127.0.0.0/8 (also written as IPv6, `::ffff:127.0.0.1`) or ::1. Any other name counts as
/// another machine, whatever it resolves to: it is not resolved here, as the answer could
/// differ when the request connects, and DNS can be made to answer 127.0.0.1 for any name.
fn is_loopback(url: &Url) -> bool {
    match url.host() {
        // The URL parser lowercases an http(s) host already; `LOCALHOST` is `localhost`.
        Some(Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(Host::Ipv4(address)) => address.is_loopback(),
        // `::ffff:127.0.0.1` reaches 127.0.0.1.
        Some(Host::Ipv6(address)) => IpAddr::V6(address).to_canonical().is_loopback(),
        None => false,
    }
}

/// The request body: `--body` as given, or the file `--body-file` names (`-`: stdin), at most
/// [`MAX_BODY_BYTES`].
fn body(text: Option<String>, file: Option<&Path>) -> Result<Option<Vec<u8>>, BadInput> {
    let bytes = match (text, file) {
        (Some(text), _) => text.into_bytes(),
        (None, Some(path)) if path.as_os_str() == "-" => read_bounded(
            std::io::stdin().lock(),
            MAX_BODY_BYTES,
            "the body from stdin",
        )?,
        (None, Some(path)) => read_file(path, MAX_BODY_BYTES, "--body-file")?,
        (None, None) => return Ok(None),
    };
    if bytes.len() as u64 > MAX_BODY_BYTES {
        return Err(BadInput(format!(
            "--body is over {MAX_BODY_BYTES} bytes, the most mend request sends"
        )));
    }
    Ok(Some(bytes))
}

/// `Authorization: Bearer SECRET` from `--token`, else the file `--token-file` names (its
/// content trimmed), else `MEND_TOKEN`, and which of them it came from; `None` when none gives
/// a secret. No message quotes the secret.
fn authorization(
    token: Option<Secret>,
    token_file: Option<&Path>,
) -> Result<Option<(HeaderValue, String)>, BadInput> {
    let (secret, from) = if let Some(token) = token {
        (token.0, "--token".to_owned())
    } else if let Some(path) = token_file {
        let bytes = read_file(path, MAX_CREDENTIAL_FILE_BYTES, "--token-file")?;
        let text = String::from_utf8(bytes)
            .map_err(|_| BadInput(format!("--token-file {}: not UTF-8 text", path.display())))?;
        (
            text.trim().to_owned(),
            format!("--token-file {}", path.display()),
        )
    } else {
        match std::env::var(TOKEN_ENV) {
            // Set but empty, as unset: how shells clear a variable.
            Ok(secret) if !secret.is_empty() => (secret, TOKEN_ENV.to_owned()),
            Ok(_) | Err(std::env::VarError::NotPresent) => return Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(BadInput(format!("{TOKEN_ENV} is not UTF-8 text")));
            }
        }
    };
    let secret = Secret(secret);
    if secret.expose().is_empty() {
        return Err(BadInput(format!("the secret from {from} is empty")));
    }
    let mut header = HeaderValue::from_str(&format!("Bearer {}", secret.expose())).map_err(|_| {
        BadInput(format!(
            "the secret from {from} holds characters a header cannot (a line break, a control character)"
        ))
    })?;
    // Shown as "Sensitive" by its Debug, and kept out of HTTP/2 header compression tables.
    header.set_sensitive(true);
    Ok(Some((header, from)))
}

/// The CAs of the PEM file `--cacert` names.
fn trusted_cas(path: &Path) -> Result<Vec<Certificate>, BadInput> {
    let pem = read_file(path, MAX_CREDENTIAL_FILE_BYTES, "--cacert")?;
    let cas = Certificate::from_pem_bundle(&pem)
        .map_err(|error| BadInput(format!("--cacert {}: {error}", path.display())))?;
    if cas.is_empty() {
        return Err(BadInput(format!(
            "--cacert {}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(cas)
}

/// The client certificate (`--cert`, PEM, with its chain) and its private key (`--key`, PEM:
/// PKCS#8, PKCS#1 or SEC1), as rustls takes them: one PEM holding both.
fn identity(cert: &Path, key: &Path) -> Result<Identity, BadInput> {
    let mut pem = read_file(cert, MAX_CREDENTIAL_FILE_BYTES, "--cert")?;
    pem.push(b'\n');
    pem.extend(read_file(key, MAX_CREDENTIAL_FILE_BYTES, "--key")?);
    Identity::from_pem(&pem).map_err(|error| {
        BadInput(format!(
            "--cert {} and --key {}: {}; expected a PEM certificate and a PEM private key",
            cert.display(),
            key.display(),
            super::one_line(&anyhow::Error::from(error))
        ))
    })
}

/// The whole file at `path`, refused past `limit` bytes; `flag` names it in errors.
fn read_file(path: &Path, limit: u64, flag: &str) -> Result<Vec<u8>, BadInput> {
    let file = std::fs::File::open(path)
        .map_err(|error| BadInput(format!("{flag} {}: {error}", path.display())))?;
    read_bounded(file, limit, &format!("{flag} {}", path.display()))
}

/// All of `reader`, refused past `limit` bytes (one byte more is read to tell).
fn read_bounded(reader: impl Read, limit: u64, what: &str) -> Result<Vec<u8>, BadInput> {
    let mut bytes = Vec::new();
    reader
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| BadInput(format!("read {what}: {error}")))?;
    if bytes.len() as u64 > limit {
        return Err(BadInput(format!("{what} is over {limit} bytes")));
    }
    Ok(bytes)
}

/// Whether `error` says the request was never written to the connection, for no reason TLS
/// gave: hyper cancels a request it has not begun to send when the connection closes first
/// (with the connection's error as the cause when it kept one: a TLS alert is a refusal).
fn never_sent(error: &reqwest::Error) -> bool {
    rustls_error(error).is_none()
        && causes(error)
            .find_map(|cause| cause.downcast_ref::<hyper::Error>())
            .is_some_and(hyper::Error::is_canceled)
}

/// The rustls error behind a failed exchange, if TLS is what failed.
fn rustls_error(error: &reqwest::Error) -> Option<&rustls::Error> {
    causes(error).find_map(|cause| cause.downcast_ref::<rustls::Error>())
}

/// `error` and its causes, outermost first, looking inside each `io::Error`: one does not
/// name the error it wraps as its source (it names that error's source), and the TLS
/// connector wraps rustls's in two of them.
fn causes(error: &reqwest::Error) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    let first: &(dyn std::error::Error + 'static) = error;
    std::iter::successors(Some(first), |error| {
        match error
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(wrapped) => Some(wrapped as &(dyn std::error::Error + 'static)),
            None => error.source(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_the_server_and_a_path_on_it() {
        let url = target("https://mend.internal:7600", "/v1/datasets?limit=2").unwrap();
        assert_eq!(
            url.as_str(),
            "https://mend.internal:7600/v1/datasets?limit=2"
        );
        let behind_a_proxy = target("https://gateway/mend/", "/v1/datasets").unwrap();
        assert_eq!(behind_a_proxy.as_str(), "https://gateway/mend/v1/datasets");
        for (server, path, said) in [
            ("ftp://x", "/v1", "ftp://"),
            ("not a url", "/v1", "--server"),
            ("https://user:pw@host", "/v1", "user name or password"),
            ("https://host?x=1", "/v1", "query"),
            ("https://host", "v1/datasets", "does not start with /"),
            ("https://host", "/v1#top", "fragment"),
        ] {
            let error = target(server, path).unwrap_err().to_string();
            assert!(error.contains(said), "{server} {path}: {error}");
            assert!(!error.contains("pw"), "{error}");
        }
    }

    #[test]
    fn methods_are_the_servers_in_any_case() {
        assert_eq!(method("get").unwrap(), Method::GET);
        assert_eq!(method("Delete").unwrap(), Method::DELETE);
        assert!(
            method("PATCH")
                .unwrap_err()
                .to_string()
                .contains("GET, HEAD")
        );
    }

    #[test]
    fn an_answer_exits_as_the_other_commands_do_for_its_error() {
        let exit = |status: u16, body: &str| {
            RequestError::answered(StatusCode::from_u16(status).unwrap(), body.as_bytes())
                .exit_code()
        };
        let mend = |code: &str| {
            format!(r#"{{"error":"{code}","message":"m","certainly_not_applied":true}}"#)
        };
        for (status, code, expected) in [
            (400, "invalid_argument", 2),
            (404, "not_found", 3),
            (409, "already_exists", 4),
            (409, "conflict", 4),
            (412, "failed_precondition", 4),
            (503, "recovery_required", 4),
            (503, "unavailable", 5),
            (503, "transient", 5),
            (503, "overloaded", 5),
            (503, "corrupt", 1),
            (422, "policy_rejected", 6),
            (500, "policy_failed", 6),
            (422, "capability_missing", 6),
            (401, "unauthorized", 1),
            (403, "forbidden", 1),
            (429, "too_many_requests", 1),
            (500, "internal", 1),
        ] {
            assert_eq!(exit(status, &mend(code)), expected, "{status} {code}");
        }
        assert_eq!(exit(502, "<html>bad gateway</html>"), 5);
        assert_eq!(exit(500, ""), 1);
        let said =
            RequestError::answered(StatusCode::UNAUTHORIZED, mend("unauthorized").as_bytes())
                .to_string();
        assert_eq!(said, "mend request: HTTP 401 unauthorized: m");
        let said =
            RequestError::answered(StatusCode::BAD_GATEWAY, b"upstream gone\nmore").to_string();
        assert_eq!(said, "mend request: HTTP 502 Bad Gateway: upstream gone");
    }

    #[test]
    fn the_arguments_debug_shows_no_secret() {
        use clap::Parser;
        let args = crate::Args::try_parse_from([
            "mend",
            "request",
            "GET",
            "/v1/datasets",
            "--token",
            "mend_0123456789abcdef",
        ])
        .unwrap();
        let shown = format!("{args:?}");
        assert!(shown.contains("Secret(..)"), "{shown}");
        assert!(!shown.contains("0123456789"), "{shown}");
    }

    #[test]
    fn a_secret_is_shown_nowhere() {
        let secret = Secret::from("mend_0123456789abcdef".to_owned());
        assert_eq!(format!("{secret:?}"), "Secret(..)");
        let (header, from) = authorization(Some(secret), None).unwrap().unwrap();
        assert_eq!(from, "--token");
        assert!(!format!("{header:?}").contains("0123456789"), "{header:?}");
        let refused = authorization(Some(Secret::from("mend_bad\nsecret".to_owned())), None)
            .unwrap_err()
            .to_string();
        assert!(!refused.contains("mend_bad"), "{refused}");
    }

    #[test]
    fn loopback_is_localhost_or_a_loopback_address_never_a_resolved_name() {
        for (server, loopback) in [
            ("http://localhost:7600", true),
            ("http://LOCALHOST:7600", true),
            ("http://127.0.0.1:7600", true),
            ("http://127.9.9.9:7600", true),
            ("http://[::1]:7600", true),
            ("http://[::ffff:127.0.0.1]:7600", true),
            ("http://10.0.0.1:7600", false),
            ("http://example.com:7600", false),
            // Names are not resolved, even those that resolve to loopback.
            ("http://localhost.localdomain:7600", false),
            ("http://0.0.0.0:7600", false),
            ("http://[::]:7600", false),
        ] {
            let url = target(server, "/healthz").unwrap();
            assert_eq!(is_loopback(&url), loopback, "{server}");
        }
    }

    #[test]
    fn a_secret_goes_in_the_clear_only_to_loopback_or_with_insecure() {
        let url = |server: &str| target(server, "/healthz").unwrap();
        assert!(!in_the_clear(&url("http://127.0.0.1:7600"), "--token", false).unwrap());
        assert!(!in_the_clear(&url("https://10.0.0.1:7600"), "--token", false).unwrap());
        assert!(in_the_clear(&url("http://10.0.0.1:7600"), "--token", true).unwrap());
        let refused = in_the_clear(&url("http://10.0.0.1:7600"), "MEND_TOKEN", false)
            .unwrap_err()
            .to_string();
        for said in [
            "http://10.0.0.1:7600",
            "MEND_TOKEN",
            "https://",
            "--cacert",
            "--insecure",
        ] {
            assert!(refused.contains(said), "{said}: {refused}");
        }
    }
}

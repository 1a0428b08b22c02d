//! The settings of a mend process: resolved once from the built-in defaults, a TOML file, the
//! environment and flags, each overriding the one before, and remembering where each value
//! came from.
//!
//! [`SETTINGS`] is the one table of every setting: its key in the file and for `--set`, its
//! environment variable, its flag, its default and what it means. `mend config` prints from
//! it, and a test holds README.md's configuration table to it. This module reads the file it is
//! pointed at and the environment it is handed; it prints nothing and opens nothing else. The
//! CLI (and the server) take the resolved [`Settings`] and build what they need from it:
//! [`Settings::engine_options`], [`Settings::load_options`],
//! [`Settings::dataset_config_defaults`].
//!
//! # Why not a layered-configuration crate
//!
//! `figment` (0.10) was weighed for this module and left out. It would give the layering
//! (defaults, a TOML file, the environment, flags) and a source per value, which is about 150
//! of these lines (`Inputs`, `settings_file`, `read_file`, `env_text`); everything else stays
//! and some would grow:
//! - its `Env` provider maps `MEND_LIMITS_MAX_STAGE_BATCH` by splitting on `_`, which cannot
//!   tell the section separator from the underscores inside keys (`max_stage_batch`); each
//!   variable would still be mapped through [`SETTINGS`] by hand;
//! - an empty variable is a value to it (`""`), not "unset" as documented here, so every
//!   variable would need a filter;
//! - its errors are serde's (`invalid type: found string "x", expected u64 for key ...`),
//!   while mend's name the setting, its source and its range in one line that says what to
//!   write ("bad value for limits.max_stage_batch from environment variable ...: "abc" is
//!   not a whole number; its range is 1..=100000"): the messages the README and the CLI tests
//!   promise would need a translation layer over its `Error`;
//! - ranges ([`mend::bounds`]), URL schemes and the README table check are mend's either way.
//!
//! A second model of the same table to keep in step is a worse trade than these lines, so the
//! table below is the one model: it parses, shows, documents and is checked against the README.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use mend::bounds;
use mend::engine::EngineOptions;
use mend::model::DatasetConfig;
use mend::runtime::{LoadOptions, PolicyLimits};
use mend_server::ServeLimits;

/// The file read when neither `--config` nor `MEND_CONFIG` names one, if it exists.
pub const DEFAULT_FILE: &str = "./mend.toml";
/// The flag naming the settings file.
pub const CONFIG_FLAG: &str = "--config";
/// The environment variable naming the settings file.
pub const CONFIG_ENV: &str = "MEND_CONFIG";
/// The flag that sets any setting by its key: `--set limits.max_stage_batch=500`.
pub const SET_FLAG: &str = "--set";

/// The catalog used when none is given: a local directory, no server needed.
pub const DEFAULT_CATALOG: &str = "./mend-data";
/// Where the server listens when nothing says otherwise: this machine only.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    7600,
));
pub const DEFAULT_SUPERVISOR_INTERVAL: Duration = Duration::from_secs(1);
pub const DEFAULT_SUPERVISOR_MAX_BACKOFF: Duration = Duration::from_secs(60);
pub const DEFAULT_SUPERVISOR_FULL_SCAN_EVERY: usize = 300;
/// The default of `limits.max_stage_batch`. With [`DEFAULT_MAX_METADATA_BYTES`] it is sized
/// with `serve.max_json_body_bytes`'s default, so that the server reads the largest request
/// they allow (about 52 MB under 64 MiB; [`mend_server::largest_json_body`]). They were
/// 10,000 and 64 KiB, a largest request of about 4 GB of JSON. The library's
/// [`EngineOptions`] default keeps those for writers in process, which send no JSON.
pub const DEFAULT_MAX_STAGE_BATCH: usize = 1_000;
/// The default of `limits.max_metadata_bytes` (see [`DEFAULT_MAX_STAGE_BATCH`]).
pub const DEFAULT_MAX_METADATA_BYTES: usize = 8 << 10;

const CATALOG_SCHEMES: &[&str] = &["file", "memory", "s3", "postgres", "postgresql"];
const OBJECT_STORE_SCHEMES: &[&str] = &["file", "memory", "s3"];

/// Every setting, resolved, and where each value came from. What each field means is its
/// setting's line in [`SETTINGS`].
///
/// `Debug` shows every setting as `mend config` does, so the admin token never appears.
#[derive(Clone)]
pub struct Settings {
    /// The catalog: a directory path, or a `file://`, `memory://`, `s3://` or `postgres://` URL.
    pub catalog: String,
    /// Where split objects live; `None` keeps them in the catalog's own store.
    pub objects: Option<String>,
    /// Where compiled policy components are kept across processes; `None` keeps them in this
    /// process only.
    pub cache_dir: Option<PathBuf>,
    /// A policy component file to run instead of the deployment's active policy.
    pub policy: Option<PathBuf>,
    /// Open a Postgres server that may lose acknowledged commits (throwaway clusters only).
    pub accept_unsafe_durability: bool,
    pub max_stage_batch: NonZeroUsize,
    pub max_metadata_bytes: usize,
    pub max_list_page: usize,
    pub policy_memory_bytes: usize,
    pub policy_core_instances: u32,
    pub policy_memories: u32,
    pub policy_tables: u32,
    pub policy_cpu_time: Duration,
    pub policy_output_bytes: usize,
    pub gate_timeout: Duration,
    pub intent_lease: Duration,
    /// The default of a new dataset's `staged_grace_period_ms`.
    pub staged_grace_period: Duration,
    /// The default of a new dataset's `deletion_grace_period_ms`.
    pub deletion_grace_period: Duration,
    /// Where the server listens.
    pub listen: SocketAddr,
    /// The token the server's admin requests must carry; `None` refuses them all. Never print it.
    pub admin_token: Option<String>,
    /// The server's principals and their grants (hashes of their secrets, never a secret).
    pub tokens_file: Option<PathBuf>,
    /// Serve an address other machines can reach without a tokens file and TLS.
    pub insecure: bool,
    /// The server's certificate chain and key (PEM): TLS on the listen address.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    /// CA certificates (PEM) whose client certificates the server accepts.
    pub tls_client_ca_file: Option<PathBuf>,
    /// A plain-HTTP address serving `/healthz` and `/readyz` alone.
    pub probe_listen: Option<SocketAddr>,
    pub supervisor_interval: Duration,
    pub supervisor_max_backoff: Duration,
    /// A full scan of every dataset every this many supervisor rounds.
    pub supervisor_full_scan_every: usize,
    /// This replica's name in its fleet (a random suffix is added); the host and pid if unset.
    pub replica_name: Option<String>,
    /// How long this replica's fleet membership lasts unless renewed.
    pub member_lease: Duration,
    /// The server's limits; each is its `serve.*` setting, range-checked.
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub shutdown_deadline: Duration,
    pub max_queued_writes: usize,
    pub max_queued_writes_per_dataset: usize,
    pub principal_requests_per_second: usize,
    pub principal_max_writes: usize,
    pub max_admin_component_bytes: usize,
    pub max_json_body_bytes: usize,
    /// Which log lines are written: an `EnvFilter` directive string. `RUST_LOG`, when set,
    /// replaces whatever else gave it.
    pub log_level: LogLevel,
    pub log_format: LogFormat,
    /// The settings file that was read, if any.
    pub file: Option<PathBuf>,
    /// Where each setting's value came from, in the order of [`SETTINGS`].
    sources: Vec<Source>,
}

/// The variable that, when set, gives `log.level` over every other source (flags included),
/// as in every program that logs with `tracing`: the one knob a person debugging reaches for.
pub const RUST_LOG_ENV: &str = "RUST_LOG";

/// The levels a `log.level` directive may name.
const LOG_LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// The `log.level` setting: a level, or comma-separated `TARGET=LEVEL` directives after an
/// optional level (`info,mend=debug`), as `tracing_subscriber::EnvFilter` reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLevel(String);

/// How log lines are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One line for people per event: time, level, spans with their fields, target, message.
    Human,
    /// One JSON object per line, with the current span and the list of spans and their fields.
    Json,
}

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "name", rename_all = "lowercase")]
pub enum Source {
    /// The built-in default.
    Default,
    /// The settings file at this path.
    File(PathBuf),
    /// This environment variable.
    Env(&'static str),
    /// This flag, as typed (`--catalog`, `--set limits.max_stage_batch`).
    Flag(String),
}

/// One setting: its names in each place and what it means.
#[derive(Debug)]
pub struct Setting {
    /// Its key for `--set` and in the file, where `limits.max_stage_batch` is `max_stage_batch`
    /// in the `[limits]` table.
    pub key: &'static str,
    /// `MEND_`, then the key in capitals with dots as underscores.
    pub env: &'static str,
    /// Its own flag, if it has one; `--set KEY=VALUE` works for every setting.
    pub flag: Option<&'static str>,
    /// The default in words, where it is not one fixed value.
    pub default_doc: Option<&'static str>,
    /// What it means, in one line.
    pub doc: &'static str,
    /// Shown as `<set>` or `<unset>`, never as its value.
    pub secret: bool,
    /// The range of a numeric setting (durations in ms); a value outside it is refused.
    pub range: Option<bounds::Bound>,
    field: Field,
}

/// How a setting reaches its field of [`Settings`]; see `field!`.
#[derive(Debug, Clone, Copy)]
struct Field {
    assign: fn(&mut Settings, Raw<'_>) -> Result<(), String>,
    show: fn(&Settings) -> Shown,
}

/// A setting's value as people and programs see it (a secret only as set or unset).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Shown {
    Text(String),
    Number(u64),
    Unset,
}

/// What settings are resolved from, besides the built-in defaults. `Inputs::default()` is no
/// file, no environment and no flags: the built-in defaults alone.
///
/// `Debug` names the environment variables and flags without their values, which may hold
/// the admin token.
#[derive(Clone, Default)]
pub struct Inputs {
    /// `--config PATH`: the settings file, which must then exist.
    pub config_file: Option<PathBuf>,
    /// Read when neither `--config` nor `MEND_CONFIG` names a file, if it exists (an empty
    /// path never does).
    pub default_file: PathBuf,
    /// The environment. `MEND_*` variables are read, and `XDG_CACHE_HOME` and `HOME` for the
    /// default cache directory; an empty variable counts as unset.
    pub env: BTreeMap<String, OsString>,
    /// Flags in the order they apply, a later one winning: each the flag as typed and its
    /// value, `("--catalog", "memory://")` or `("--set", "limits.max_stage_batch=500")`.
    pub flags: Vec<(String, String)>,
}

/// Why settings could not be resolved. Nothing was opened or written: settings are resolved
/// before anything else happens.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("config file {path} (named by {named_by}) does not exist")]
    MissingFile { path: PathBuf, named_by: Source },
    #[error("read config file {path}: {error}")]
    UnreadableFile {
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error("config file {path} is not valid TOML: line {line}, column {column}: {message}")]
    InvalidToml {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("unknown setting `{key}` in {from}; {known}")]
    UnknownKey {
        key: String,
        from: Source,
        /// The keys that would have been accepted there.
        known: String,
    },
    #[error("bad value for `{key}` from {from}: {reason}")]
    InvalidValue {
        key: String,
        from: Source,
        reason: String,
    },
    #[error("{flag} {text:?}: expected KEY=VALUE, for example {flag} limits.max_stage_batch=500")]
    MalformedAssignment { flag: String, text: String },
}

/// The reader and the shower of one field of [`Settings`], and its check if it has one. A
/// value that fails its check fails the whole resolution, so no one sees it set.
macro_rules! field {
    ($field:ident) => {
        Field {
            assign: |settings, raw| {
                settings.$field = raw.read()?;
                Ok(())
            },
            show: |settings| settings.$field.show(),
        }
    };
    ($field:ident, $check:path) => {
        Field {
            assign: |settings, raw| {
                settings.$field = raw.read()?;
                $check(&settings.$field)
            },
            show: |settings| settings.$field.show(),
        }
    };
}

/// Every setting mend reads, in the order `mend config` and the README list them.
pub static SETTINGS: &[Setting] = &[
    Setting::new(
        "catalog",
        "MEND_CATALOG",
        field!(catalog, check_catalog),
        "The catalog: a directory path or file:///DIR, memory://, s3://BUCKET/PREFIX or postgres://USER@HOST/DB.",
    )
    .flag("--catalog"),
    Setting::new(
        "objects",
        "MEND_OBJECTS",
        field!(objects, check_objects),
        "Where split objects live: a directory path or file:///DIR, memory:// or s3://BUCKET/PREFIX; required with Postgres.",
    )
    .flag("--objects")
    .default_doc("the catalog's own store"),
    Setting::new(
        "cache_dir",
        "MEND_CACHE_DIR",
        field!(cache_dir),
        "Where compiled policy components are kept; only files mend wrote there are ever loaded.",
    )
    .flag("--cache-dir")
    .default_doc("`$XDG_CACHE_HOME/mend/components`, else `~/.cache/mend/components`"),
    Setting::new(
        "policy",
        "MEND_POLICY",
        field!(policy),
        "A policy component file to run instead of the deployment's active policy.",
    )
    .flag("--policy")
    .default_doc("the deployment's active policy"),
    Setting::new(
        "postgres.accept_unsafe_durability",
        "MEND_POSTGRES_ACCEPT_UNSAFE_DURABILITY",
        field!(accept_unsafe_durability),
        "Open a Postgres catalog whose server may lose acknowledged commits in a crash (fsync, synchronous_commit or full_page_writes off); for throwaway clusters only.",
    ),
    Setting::new(
        "limits.max_stage_batch",
        "MEND_LIMITS_MAX_STAGE_BATCH",
        field!(max_stage_batch),
        "Most splits one stage, publish, mark or delete request may name.",
    )
    .within(bounds::STAGE_BATCH),
    Setting::new(
        "limits.max_metadata_bytes",
        "MEND_LIMITS_MAX_METADATA_BYTES",
        field!(max_metadata_bytes),
        "Most bytes of one split's metadata (JSON text).",
    )
    .within(bounds::METADATA_BYTES),
    Setting::new(
        "limits.max_list_page",
        "MEND_LIMITS_MAX_LIST_PAGE",
        field!(max_list_page),
        "Most splits one page of a listing holds; a listing without a limit gets this many.",
    )
    .within(bounds::LIST_PAGE),
    Setting::new(
        "limits.policy_memory_bytes",
        "MEND_LIMITS_POLICY_MEMORY_BYTES",
        field!(policy_memory_bytes),
        "Most memory one policy decision may use, all its memories together, in bytes.",
    )
    .within(bounds::POLICY_MEMORY_BYTES),
    Setting::new(
        "limits.policy_core_instances",
        "MEND_LIMITS_POLICY_CORE_INSTANCES",
        field!(policy_core_instances),
        "Most core instances a policy component may create (1 for a Rust policy; a composed or JavaScript one has several). Checked when it is loaded.",
    )
    .within(bounds::POLICY_CORE_INSTANCES),
    Setting::new(
        "limits.policy_memories",
        "MEND_LIMITS_POLICY_MEMORIES",
        field!(policy_memories),
        "Most linear memories a policy component may define. Checked when it is loaded.",
    )
    .within(bounds::POLICY_MEMORIES),
    Setting::new(
        "limits.policy_tables",
        "MEND_LIMITS_POLICY_TABLES",
        field!(policy_tables),
        "Most tables a policy component may define. Checked when it is loaded.",
    )
    .within(bounds::POLICY_TABLES),
    Setting::new(
        "limits.policy_cpu_time_ms",
        "MEND_LIMITS_POLICY_CPU_TIME_MS",
        field!(policy_cpu_time),
        "Longest one policy decision may run, in ms (rounded up to the 10 ms epoch tick).",
    )
    .within(bounds::POLICY_CPU_TIME_MS),
    Setting::new(
        "limits.policy_output_bytes",
        "MEND_LIMITS_POLICY_OUTPUT_BYTES",
        field!(policy_output_bytes),
        "Largest answer one policy decision may return, in bytes.",
    )
    .within(bounds::POLICY_OUTPUT_BYTES),
    Setting::new(
        "limits.gate_timeout_ms",
        "MEND_LIMITS_GATE_TIMEOUT_MS",
        field!(gate_timeout),
        "How long an operation waits for the gates it needs before failing with Conflict, in ms.",
    )
    .within(bounds::GATE_TIMEOUT_MS),
    Setting::new(
        "limits.intent_lease_ms",
        "MEND_LIMITS_INTENT_LEASE_MS",
        field!(intent_lease),
        "How long an operation's intent says its owner may still be working; recovery short of exclusive waits that long, in ms.",
    )
    .within(bounds::INTENT_LEASE_MS),
    Setting::new(
        "grace.staged_grace_period_ms",
        "MEND_GRACE_STAGED_GRACE_PERIOD_MS",
        field!(staged_grace_period),
        "For new datasets: a staged split untouched this long (ms) is abandoned and gc marks it.",
    )
    .within(bounds::DEFAULT_STAGED_GRACE_PERIOD_MS),
    Setting::new(
        "grace.deletion_grace_period_ms",
        "MEND_GRACE_DELETION_GRACE_PERIOD_MS",
        field!(deletion_grace_period),
        "For new datasets: a marked split's object and row are removed this long (ms) after the mark.",
    )
    .within(bounds::DEFAULT_DELETION_GRACE_PERIOD_MS),
    Setting::new(
        "serve.listen",
        "MEND_SERVE_LISTEN",
        field!(listen),
        "The address and port the server listens on (port 0 picks a free one).",
    )
    .flag("--listen"),
    Setting::new(
        "serve.admin_token",
        "MEND_SERVE_ADMIN_TOKEN",
        field!(admin_token),
        "The token the server's admin requests must carry; shown only as `<set>` or `<unset>`.",
    )
    .default_doc("none")
    .secret(),
    Setting::new(
        "serve.tokens_file",
        "MEND_SERVE_TOKENS_FILE",
        field!(tokens_file),
        "The server's principals, one per line: name, sha256: of its secret, grants (admin, read:P, write:P, operate:P); `mend token new` prints a line. Read again within a second of a change. Without it, requests need no token, which only a loopback address allows.",
    )
    .default_doc("none: requests without a token are let in (loopback only)"),
    Setting::new(
        "serve.tls_cert_file",
        "MEND_SERVE_TLS_CERT_FILE",
        field!(tls_cert_file),
        "The server's certificate chain (PEM, its own first): TLS 1.2 and 1.3 on the listen address, with serve.tls_key_file. Read again within a second of a change.",
    )
    .default_doc("none: plain HTTP (loopback only)"),
    Setting::new(
        "serve.tls_key_file",
        "MEND_SERVE_TLS_KEY_FILE",
        field!(tls_key_file),
        "The private key of serve.tls_cert_file (PEM). Read again within a second of a change.",
    )
    .default_doc("none"),
    Setting::new(
        "serve.tls_client_ca_file",
        "MEND_SERVE_TLS_CLIENT_CA_FILE",
        field!(tls_client_ca_file),
        "CA certificates (PEM) whose client certificates the server accepts (mutual TLS, optional for clients): a certificate valid for a name the tokens file lists as cert:NAME is that principal.",
    )
    .default_doc("none: clients present no certificate"),
    Setting::new(
        "serve.probe_listen",
        "MEND_SERVE_PROBE_LISTEN",
        field!(probe_listen),
        "A second address serving /healthz and /readyz alone, in plain HTTP without a token, for probes.",
    )
    .default_doc("none"),
    Setting::new(
        "serve.insecure",
        "MEND_SERVE_INSECURE",
        field!(insecure),
        "Serve an address other machines can reach without a tokens file or TLS: anyone who reaches it may read, write and delete every dataset, or read the tokens sent. Logged at every start.",
    ),
    Setting::new(
        "serve.supervisor_interval_ms",
        "MEND_SERVE_SUPERVISOR_INTERVAL_MS",
        field!(supervisor_interval),
        "How often the server's supervisors run, in ms.",
    )
    .within(bounds::SUPERVISOR_INTERVAL_MS),
    Setting::new(
        "serve.supervisor_max_backoff_ms",
        "MEND_SERVE_SUPERVISOR_MAX_BACKOFF_MS",
        field!(supervisor_max_backoff),
        "Longest a failing supervisor waits before it tries again, in ms.",
    )
    .within(bounds::SUPERVISOR_MAX_BACKOFF_MS),
    Setting::new(
        "serve.supervisor_full_scan_every",
        "MEND_SERVE_SUPERVISOR_FULL_SCAN_EVERY",
        field!(supervisor_full_scan_every),
        "Every this many supervisor rounds, list every dataset: the backstop for pending work the index missed.",
    )
    .within(bounds::SUPERVISOR_FULL_SCAN_EVERY),
    Setting::new(
        "serve.replica_name",
        "MEND_SERVE_REPLICA_NAME",
        field!(replica_name),
        "This replica's name in its fleet (a random suffix is added at each start).",
    )
    .default_doc("host and pid"),
    Setting::new(
        "serve.member_lease_ms",
        "MEND_SERVE_MEMBER_LEASE_MS",
        field!(member_lease),
        "How long a replica's fleet membership lasts unless renewed, in ms: its datasets are taken over this long (plus an interval) after it dies.",
    )
    .within(bounds::MEMBER_LEASE_MS),
    Setting::new(
        "serve.max_connections",
        "MEND_SERVE_MAX_CONNECTIONS",
        field!(max_connections),
        "Most connections the server keeps open; one more is answered 503 and closed at once.",
    )
    .within(bounds::SERVE_MAX_CONNECTIONS),
    Setting::new(
        "serve.header_read_timeout_ms",
        "MEND_SERVE_HEADER_READ_TIMEOUT_MS",
        field!(header_read_timeout),
        "Longest from a request head's first byte to its last before the connection is closed, in ms.",
    )
    .within(bounds::SERVE_HEADER_READ_TIMEOUT_MS),
    Setting::new(
        "serve.body_read_timeout_ms",
        "MEND_SERVE_BODY_READ_TIMEOUT_MS",
        field!(body_read_timeout),
        "Longest from a request head's end to its body's end; past it the answer is 408, in ms.",
    )
    .within(bounds::SERVE_BODY_READ_TIMEOUT_MS),
    Setting::new(
        "serve.idle_timeout_ms",
        "MEND_SERVE_IDLE_TIMEOUT_MS",
        field!(idle_timeout),
        "Longest a connection may wait without a byte of a next request before it is closed, in ms.",
    )
    .within(bounds::SERVE_IDLE_TIMEOUT_MS),
    Setting::new(
        "serve.shutdown_deadline_ms",
        "MEND_SERVE_SHUTDOWN_DEADLINE_MS",
        field!(shutdown_deadline),
        "How long a shutdown lets requests being answered finish before it drops them (admitted writes always finish), in ms.",
    )
    .within(bounds::SERVE_SHUTDOWN_DEADLINE_MS),
    Setting::new(
        "serve.max_queued_writes",
        "MEND_SERVE_MAX_QUEUED_WRITES",
        field!(max_queued_writes),
        "Most writes the server admits at once; one more is answered 503 with Retry-After.",
    )
    .within(bounds::SERVE_MAX_QUEUED_WRITES),
    Setting::new(
        "serve.max_queued_writes_per_dataset",
        "MEND_SERVE_MAX_QUEUED_WRITES_PER_DATASET",
        field!(max_queued_writes_per_dataset),
        "Most writes the server admits at once on one dataset; one more is answered 503 with Retry-After.",
    )
    .within(bounds::SERVE_MAX_QUEUED_WRITES_PER_DATASET),
    Setting::new(
        "serve.principal_requests_per_second",
        "MEND_SERVE_PRINCIPAL_REQUESTS_PER_SECOND",
        field!(principal_requests_per_second),
        "Requests one principal of the tokens file may make per second (as many at once); one more is answered 429 with Retry-After. Requests without a token are held only by the server-wide limits.",
    )
    .within(bounds::SERVE_PRINCIPAL_REQUESTS_PER_SECOND),
    Setting::new(
        "serve.principal_max_writes",
        "MEND_SERVE_PRINCIPAL_MAX_WRITES",
        field!(principal_max_writes),
        "Writes (requests other than GET) one principal may have in flight at once, so that one client cannot take every slot of serve.max_queued_writes; one more is answered 429 with Retry-After.",
    )
    .within(bounds::SERVE_PRINCIPAL_MAX_WRITES),
    Setting::new(
        "serve.max_json_body_bytes",
        "MEND_SERVE_MAX_JSON_BODY_BYTES",
        field!(max_json_body_bytes),
        "Largest JSON request body the server reads, in bytes (uploads of objects and policy components have caps of their own); the server does not start unless the largest request the `limits.*` settings allow fits.",
    )
    .within(bounds::SERVE_MAX_JSON_BODY_BYTES),
    Setting::new(
        "serve.max_admin_component_bytes",
        "MEND_SERVE_MAX_ADMIN_COMPONENT_BYTES",
        field!(max_admin_component_bytes),
        "Largest policy component (or scenarios file) an admin request may upload or name, in bytes.",
    )
    .within(bounds::SERVE_MAX_ADMIN_COMPONENT_BYTES),
    Setting::new(
        "log.level",
        "MEND_LOG_LEVEL",
        field!(log_level),
        "Which log lines are written on stderr: a level (trace, debug, info, warn, error, off), or directives such as `info,mend=debug`; `RUST_LOG`, when set, wins over every other source.",
    ),
    Setting::new(
        "log.format",
        "MEND_LOG_FORMAT",
        field!(log_format),
        "How log lines are written on stderr: `human` (one line for people) or `json` (one JSON object per line, with the spans and their fields).",
    ),
];

impl Settings {
    /// Resolves every setting: built-in defaults, then the file, then the environment, then
    /// the flags. Any bad input fails the whole resolution, naming where it came from.
    pub fn resolve(inputs: &Inputs) -> Result<Settings, ConfigError> {
        let mut settings = Settings::built_in(&inputs.env);
        if let Some(path) = settings_file(inputs)? {
            let table = read_file(&path)?;
            settings.apply_file(&table, &path)?;
            settings.file = Some(path);
        }
        for setting in SETTINGS {
            if let Some(value) = env_text(&inputs.env, setting.env)? {
                settings.assign(setting, Raw::Text(value), Source::Env(setting.env))?;
            }
        }
        for (flag, value) in &inputs.flags {
            settings.apply_flag(flag, value)?;
        }
        if let Some(value) = env_text(&inputs.env, RUST_LOG_ENV)? {
            settings.apply_rust_log(value)?;
        }
        Ok(settings)
    }

    /// `RUST_LOG` as `log.level`, over any other source. It is read as every `tracing`
    /// program reads it (a bare target such as `mend` is accepted: it means `mend=trace`),
    /// since a shell may set it for other programs too; only what `EnvFilter` itself
    /// refuses is refused.
    fn apply_rust_log(&mut self, value: &str) -> Result<(), ConfigError> {
        let from = Source::Env(RUST_LOG_ENV);
        check_env_filter(value).map_err(|reason| ConfigError::InvalidValue {
            key: "log.level".to_owned(),
            from: from.clone(),
            reason,
        })?;
        self.log_level = LogLevel(value.trim().to_owned());
        let index = SETTINGS
            .iter()
            .position(|setting| setting.key == "log.level")
            .expect("log.level is a setting");
        self.sources[index] = from;
        Ok(())
    }

    /// The built-in defaults with the settings file `text` applied, as [`Settings::resolve`]
    /// applies a file named `path`, but without reading it or looking at the environment:
    /// what `crate::fuzzing` feeds arbitrary bytes.
    pub(crate) fn from_file_text(path: &Path, text: &str) -> Result<Settings, ConfigError> {
        let mut settings = Settings::built_in(&BTreeMap::new());
        settings.apply_file(&parse_file(path, text)?, path)?;
        settings.file = Some(path.to_owned());
        Ok(settings)
    }

    /// The engine's options: the stage batch limit, the gate timeout and the intent lease.
    pub fn engine_options(&self) -> EngineOptions {
        EngineOptions {
            max_stage_batch: self.max_stage_batch.get(),
            max_metadata_bytes: self.max_metadata_bytes,
            max_list_page: self.max_list_page,
            intent_lease_ms: i64::try_from(self.intent_lease.as_millis()).unwrap_or(i64::MAX),
            gate_timeout: self.gate_timeout,
            ..EngineOptions::default()
        }
    }

    /// How a Postgres catalog is opened.
    pub fn postgres_options(&self) -> mend::catalog::PostgresOptions {
        mend::catalog::PostgresOptions {
            accept_unsafe_durability: self.accept_unsafe_durability,
        }
    }

    /// The limits of each policy decision.
    pub fn policy_limits(&self) -> PolicyLimits {
        PolicyLimits {
            max_memory_bytes: self.policy_memory_bytes,
            max_core_instances: self.policy_core_instances,
            max_memories: self.policy_memories,
            max_tables: self.policy_tables,
            cpu_time_per_call: self.policy_cpu_time,
            max_output_bytes: self.policy_output_bytes,
        }
    }

    /// How policy components are loaded: the policy limits and the compiled-component cache.
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            limits: self.policy_limits(),
            cache_dir: self.cache_dir.clone(),
            ..LoadOptions::default()
        }
    }

    /// The config a new dataset gets where its creator says nothing: the grace periods.
    pub fn dataset_config_defaults(&self) -> DatasetConfig {
        DatasetConfig {
            staged_grace_period_ms: millis(self.staged_grace_period),
            deletion_grace_period_ms: millis(self.deletion_grace_period),
            ..DatasetConfig::default()
        }
    }

    /// Where the setting `key` got its value; `None` for a key that is not a setting.
    pub fn source(&self, key: &str) -> Option<&Source> {
        let index = SETTINGS.iter().position(|setting| setting.key == key)?;
        self.sources.get(index)
    }

    /// Every setting with its value as shown (secrets redacted) and its source, in table order.
    pub fn entries(&self) -> impl Iterator<Item = (&'static Setting, Shown, &Source)> + '_ {
        SETTINGS
            .iter()
            .zip(&self.sources)
            .map(|(setting, source)| (setting, setting.value(self), source))
    }

    /// The built-in defaults; the environment only says where the cache directory is.
    fn built_in(env: &BTreeMap<String, OsString>) -> Settings {
        let engine = EngineOptions::default();
        let limits = PolicyLimits::default();
        let dataset = DatasetConfig::default();
        let serve = ServeLimits::default();
        let nonempty = |name: &str| env.get(name).filter(|value| !value.is_empty());
        let cache_base = nonempty("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| nonempty("HOME").map(|home| PathBuf::from(home).join(".cache")));
        Settings {
            catalog: DEFAULT_CATALOG.to_owned(),
            objects: None,
            cache_dir: cache_base.map(|base| base.join("mend").join("components")),
            policy: None,
            accept_unsafe_durability: false,
            // A zero limit would refuse every stage; the default is never zero.
            max_stage_batch: NonZeroUsize::new(DEFAULT_MAX_STAGE_BATCH)
                .unwrap_or(NonZeroUsize::MIN),
            max_metadata_bytes: DEFAULT_MAX_METADATA_BYTES,
            max_list_page: engine.max_list_page,
            policy_memory_bytes: limits.max_memory_bytes,
            policy_core_instances: limits.max_core_instances,
            policy_memories: limits.max_memories,
            policy_tables: limits.max_tables,
            policy_cpu_time: limits.cpu_time_per_call,
            policy_output_bytes: limits.max_output_bytes,
            gate_timeout: engine.gate_timeout,
            intent_lease: Duration::from_millis(u64::try_from(engine.intent_lease_ms).unwrap_or(0)),
            staged_grace_period: Duration::from_millis(dataset.staged_grace_period_ms),
            deletion_grace_period: Duration::from_millis(dataset.deletion_grace_period_ms),
            listen: DEFAULT_LISTEN,
            admin_token: None,
            tokens_file: None,
            insecure: false,
            tls_cert_file: None,
            tls_key_file: None,
            tls_client_ca_file: None,
            probe_listen: None,
            supervisor_interval: DEFAULT_SUPERVISOR_INTERVAL,
            supervisor_max_backoff: DEFAULT_SUPERVISOR_MAX_BACKOFF,
            supervisor_full_scan_every: DEFAULT_SUPERVISOR_FULL_SCAN_EVERY,
            replica_name: None,
            member_lease: mend::fleet::DEFAULT_MEMBER_LEASE,
            max_connections: serve.max_connections,
            header_read_timeout: serve.header_read_timeout,
            body_read_timeout: serve.body_read_timeout,
            idle_timeout: serve.idle_timeout,
            shutdown_deadline: serve.shutdown_deadline,
            max_queued_writes: serve.max_queued_writes,
            max_queued_writes_per_dataset: serve.max_queued_writes_per_dataset,
            principal_requests_per_second: serve.principal.requests_per_second as usize,
            principal_max_writes: serve.principal.max_writes,
            max_admin_component_bytes: serve.max_admin_component_bytes,
            max_json_body_bytes: serve.max_json_body_bytes,
            log_level: LogLevel("info".to_owned()),
            log_format: LogFormat::Human,
            file: None,
            sources: vec![Source::Default; SETTINGS.len()],
        }
    }

    fn assign(
        &mut self,
        setting: &'static Setting,
        raw: Raw<'_>,
        from: Source,
    ) -> Result<(), ConfigError> {
        let invalid = |reason: String| ConfigError::InvalidValue {
            key: setting.key.to_owned(),
            from: from.clone(),
            reason: match setting.range {
                Some(range) => format!("{reason}; its range is {range}"),
                None => reason,
            },
        };
        (setting.field.assign)(self, raw).map_err(invalid)?;
        if let (Some(range), Shown::Number(number)) = (setting.range, setting.value(self)) {
            range
                .within(number)
                .map_err(|problem| invalid(format!("{} is out of range", problem.value)))?;
        }
        let index = SETTINGS
            .iter()
            .position(|candidate| std::ptr::eq(candidate, setting))
            .expect("every setting assigned comes from SETTINGS");
        self.sources[index] = from;
        Ok(())
    }

    /// The file's top level holds the settings without a dot in their key, and one table per
    /// section (`[limits]`) holding that section's settings.
    fn apply_file(&mut self, table: &toml::Table, path: &Path) -> Result<(), ConfigError> {
        let from = Source::File(path.to_owned());
        for (name, value) in table {
            if sections().any(|section| section == name) {
                let toml::Value::Table(fields) = value else {
                    return Err(ConfigError::InvalidValue {
                        key: name.clone(),
                        from,
                        reason: format!(
                            "expected a table [{name}] of settings, found a TOML {}",
                            value.type_str()
                        ),
                    });
                };
                for (field, value) in fields {
                    let key = format!("{name}.{field}");
                    let setting = lookup(&key).ok_or_else(|| ConfigError::UnknownKey {
                        key: key.clone(),
                        from: from.clone(),
                        known: known_keys(Some(name), false),
                    })?;
                    self.assign(setting, Raw::Toml(value), from.clone())?;
                }
            } else {
                let setting = lookup(name)
                    .filter(|setting| !setting.key.contains('.'))
                    .ok_or_else(|| ConfigError::UnknownKey {
                        key: name.clone(),
                        from: from.clone(),
                        known: known_keys(None, false),
                    })?;
                self.assign(setting, Raw::Toml(value), from.clone())?;
            }
        }
        Ok(())
    }

    fn apply_flag(&mut self, flag: &str, value: &str) -> Result<(), ConfigError> {
        if flag == SET_FLAG {
            let (key, value) =
                value
                    .split_once('=')
                    .ok_or_else(|| ConfigError::MalformedAssignment {
                        flag: flag.to_owned(),
                        text: value.to_owned(),
                    })?;
            let key = key.trim();
            let setting = lookup(key).ok_or_else(|| ConfigError::UnknownKey {
                key: key.to_owned(),
                from: Source::Flag(flag.to_owned()),
                known: known_keys(key.split_once('.').map(|(section, _)| section), true),
            })?;
            return self.assign(
                setting,
                Raw::Text(value),
                Source::Flag(format!("{flag} {key}")),
            );
        }
        let setting = SETTINGS
            .iter()
            .find(|setting| setting.flag == Some(flag))
            .ok_or_else(|| ConfigError::UnknownKey {
                key: flag.to_owned(),
                from: Source::Flag(flag.to_owned()),
                known: "flags that set a setting: ".to_owned() + &own_flags().join(", "),
            })?;
        self.assign(setting, Raw::Text(value), Source::Flag(flag.to_owned()))
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Settings");
        for (setting, value, source) in self.entries() {
            debug.field(setting.key, &format_args!("{value} ({source})"));
        }
        debug.field("file", &self.file).finish()
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("the default"),
            Source::File(path) => write!(f, "config file {}", path.display()),
            Source::Env(name) => write!(f, "environment variable {name}"),
            Source::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

impl Setting {
    const fn new(key: &'static str, env: &'static str, field: Field, doc: &'static str) -> Self {
        Setting {
            key,
            env,
            flag: None,
            default_doc: None,
            doc,
            secret: false,
            range: None,
            field,
        }
    }

    const fn flag(self, flag: &'static str) -> Self {
        Setting {
            flag: Some(flag),
            ..self
        }
    }

    const fn default_doc(self, words: &'static str) -> Self {
        Setting {
            default_doc: Some(words),
            ..self
        }
    }

    const fn within(self, range: bounds::Bound) -> Self {
        Setting {
            range: Some(range),
            ..self
        }
    }

    /// Its range as the README shows it.
    pub fn range_text(&self) -> String {
        self.range
            .map_or_else(String::new, |range| format!("`{range}`"))
    }

    const fn secret(self) -> Self {
        Setting {
            secret: true,
            ..self
        }
    }

    /// Its value in `settings` as shown to people and programs: a secret only as set or unset.
    pub fn value(&self, settings: &Settings) -> Shown {
        let shown = (self.field.show)(settings);
        if !self.secret {
            return shown;
        }
        Shown::Text(match shown {
            Shown::Unset => "<unset>".into(),
            _ => "<set>".into(),
        })
    }

    /// Its default, in words where it is not one fixed value.
    pub fn default_text(&self) -> String {
        match self.default_doc {
            Some(words) => words.to_owned(),
            None => self
                .value(&Settings::built_in(&BTreeMap::new()))
                .to_string(),
        }
    }

    /// The flag that sets it: its own, or `--set KEY=VALUE`.
    pub fn flag_text(&self) -> String {
        match self.flag {
            Some(flag) => flag.to_owned(),
            None => format!("{SET_FLAG} {}=VALUE", self.key),
        }
    }
}

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shown::Text(text) => f.write_str(text),
            Shown::Number(number) => write!(f, "{number}"),
            Shown::Unset => f.write_str("-"),
        }
    }
}

impl Inputs {
    /// This process's environment (the variables settings are read from) and `./mend.toml`,
    /// before any flag.
    pub fn from_process() -> Inputs {
        Inputs {
            config_file: None,
            default_file: PathBuf::from(DEFAULT_FILE),
            env: std::env::vars_os()
                .filter_map(|(name, value)| Some((name.into_string().ok()?, value)))
                .filter(|(name, _)| {
                    name.starts_with("MEND_")
                        || name == RUST_LOG_ENV
                        || name == "XDG_CACHE_HOME"
                        || name == "HOME"
                })
                .collect(),
            flags: Vec::new(),
        }
    }
}

impl fmt::Debug for Inputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inputs")
            .field("config_file", &self.config_file)
            .field("default_file", &self.default_file)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field(
                "flags",
                &self.flags.iter().map(|(flag, _)| flag).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// A value as it arrives: text from the environment or a flag, or a typed TOML value.
#[derive(Debug, Clone, Copy)]
enum Raw<'a> {
    Text(&'a str),
    Toml(&'a toml::Value),
}

impl Raw<'_> {
    fn read<T: SettingValue>(self) -> Result<T, String> {
        match self {
            Raw::Text(text) => T::parse(text),
            Raw::Toml(value) => T::from_toml(value),
        }
    }
}

/// A type a setting can hold: how it is read from text and from TOML, and how it is shown.
trait SettingValue: Sized {
    /// What a value must look like, for the message that says it did not.
    const EXPECTED: &'static str;

    fn parse(text: &str) -> Result<Self, String>;

    /// In the file a value must have the right TOML type: text settings take strings.
    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::String(text) => Self::parse(text),
            other => Err(wrong_type(Self::EXPECTED, other)),
        }
    }

    fn show(&self) -> Shown;
}

impl SettingValue for String {
    const EXPECTED: &'static str = "a string";

    fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("must not be empty".into());
        }
        Ok(text.to_owned())
    }

    fn show(&self) -> Shown {
        Shown::Text(self.clone())
    }
}

impl SettingValue for Option<String> {
    const EXPECTED: &'static str = "a string";

    fn parse(text: &str) -> Result<Self, String> {
        String::parse(text).map(Some)
    }

    fn show(&self) -> Shown {
        self.as_ref().map_or(Shown::Unset, String::show)
    }
}

impl SettingValue for Option<PathBuf> {
    const EXPECTED: &'static str = "a path";

    fn parse(text: &str) -> Result<Self, String> {
        String::parse(text).map(|text| Some(PathBuf::from(text)))
    }

    fn show(&self) -> Shown {
        self.as_ref()
            .map_or(Shown::Unset, |path| Shown::Text(path.display().to_string()))
    }
}

impl SettingValue for bool {
    const EXPECTED: &'static str = "true or false";

    fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(format!(
                "{:?} is not true or false",
                mend::validate::truncated(other, mend::validate::QUOTED_CHARS)
            )),
        }
    }

    /// Booleans are TOML booleans in the file, not strings.
    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::Boolean(flag) => Ok(*flag),
            other => Err(wrong_type(Self::EXPECTED, other)),
        }
    }

    fn show(&self) -> Shown {
        Shown::Text(self.to_string())
    }
}

impl SettingValue for u64 {
    const EXPECTED: &'static str = "a whole number";

    fn parse(text: &str) -> Result<Self, String> {
        let digits = text.trim();
        digits.parse().map_err(|_| {
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                format!("{digits} is too large")
            } else {
                format!(
                    "{:?} is not a whole number",
                    mend::validate::truncated(text, mend::validate::QUOTED_CHARS)
                )
            }
        })
    }

    /// Numbers are TOML integers in the file, not strings.
    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::Integer(number) => u64::try_from(*number)
                .map_err(|_| format!("expected a whole number, found {number}")),
            other => Err(wrong_type(Self::EXPECTED, other)),
        }
    }

    fn show(&self) -> Shown {
        Shown::Number(*self)
    }
}

impl SettingValue for usize {
    const EXPECTED: &'static str = u64::EXPECTED;

    fn parse(text: &str) -> Result<Self, String> {
        usize::try_from(u64::parse(text)?).map_err(|_| format!("{text} is too large"))
    }

    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        let number = u64::from_toml(value)?;
        usize::try_from(number).map_err(|_| format!("{number} is too large"))
    }

    fn show(&self) -> Shown {
        Shown::Number(u64::try_from(*self).unwrap_or(u64::MAX))
    }
}

impl SettingValue for u32 {
    const EXPECTED: &'static str = u64::EXPECTED;

    fn parse(text: &str) -> Result<Self, String> {
        u32::try_from(u64::parse(text)?).map_err(|_| format!("{text} is too large"))
    }

    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        let number = u64::from_toml(value)?;
        u32::try_from(number).map_err(|_| format!("{number} is too large"))
    }

    fn show(&self) -> Shown {
        Shown::Number(u64::from(*self))
    }
}

impl SettingValue for NonZeroUsize {
    const EXPECTED: &'static str = u64::EXPECTED;

    fn parse(text: &str) -> Result<Self, String> {
        NonZeroUsize::new(usize::parse(text)?).ok_or_else(|| "must be at least 1".into())
    }

    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        NonZeroUsize::new(usize::from_toml(value)?).ok_or_else(|| "must be at least 1".into())
    }

    fn show(&self) -> Shown {
        self.get().show()
    }
}

/// Durations are whole milliseconds, as the keys' `_ms` says.
impl SettingValue for Duration {
    const EXPECTED: &'static str = "a whole number of milliseconds";

    fn parse(text: &str) -> Result<Self, String> {
        u64::parse(text).map(Duration::from_millis)
    }

    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::Integer(_) => u64::from_toml(value).map(Duration::from_millis),
            other => Err(wrong_type(Self::EXPECTED, other)),
        }
    }

    fn show(&self) -> Shown {
        Shown::Number(millis(*self))
    }
}

impl SettingValue for SocketAddr {
    const EXPECTED: &'static str = "an address and port such as 127.0.0.1:7600";

    fn parse(text: &str) -> Result<Self, String> {
        text.trim()
            .parse()
            .map_err(|_| format!("{text:?} is not {}", Self::EXPECTED))
    }

    fn show(&self) -> Shown {
        Shown::Text(self.to_string())
    }
}

impl SettingValue for Option<SocketAddr> {
    const EXPECTED: &'static str = SocketAddr::EXPECTED;

    fn parse(text: &str) -> Result<Self, String> {
        SocketAddr::parse(text).map(Some)
    }

    fn show(&self) -> Shown {
        self.as_ref().map_or(Shown::Unset, SocketAddr::show)
    }
}

impl LogLevel {
    /// The directives, as `EnvFilter` parses them.
    pub fn directives(&self) -> &str {
        &self.0
    }
}

impl SettingValue for LogLevel {
    const EXPECTED: &'static str = "a level or directives such as info,mend=debug";

    /// Stricter than `EnvFilter`, which takes a word that is not a level (`verbose`, `infoo`)
    /// for a target to log everything of: every directive must name its level.
    fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let levels = LOG_LEVELS.join(", ");
        if text.is_empty() {
            return Err(format!("must not be empty; give a level ({levels})"));
        }
        for directive in text.split(',').map(str::trim) {
            let level = match directive.rsplit_once('=') {
                Some((target, level)) if !target.trim().is_empty() => level.trim(),
                Some(_) => "",
                None => directive,
            };
            if !LOG_LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
                return Err(format!(
                    "{:?} is not a level ({levels}) or TARGET=LEVEL",
                    mend::validate::truncated(directive, mend::validate::QUOTED_CHARS)
                ));
            }
        }
        check_env_filter(text)?;
        Ok(LogLevel(text.to_owned()))
    }

    fn show(&self) -> Shown {
        Shown::Text(self.0.clone())
    }
}

impl SettingValue for LogFormat {
    const EXPECTED: &'static str = "human or json";

    fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "human" => Ok(LogFormat::Human),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "{:?} is not human or json",
                mend::validate::truncated(other, mend::validate::QUOTED_CHARS)
            )),
        }
    }

    fn show(&self) -> Shown {
        Shown::Text(
            match self {
                LogFormat::Human => "human",
                LogFormat::Json => "json",
            }
            .to_owned(),
        )
    }
}

/// What `EnvFilter` itself refuses in a directive string, in one line.
fn check_env_filter(text: &str) -> Result<(), String> {
    tracing_subscriber::EnvFilter::builder()
        .parse(text)
        .map(|_| ())
        .map_err(|error| {
            format!(
                "{:?} is not a log filter: {error}",
                mend::validate::truncated(text, mend::validate::QUOTED_CHARS)
            )
        })
}

fn wrong_type(expected: &str, found: &toml::Value) -> String {
    format!("expected {expected}, found a TOML {}", found.type_str())
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn check_catalog(url: &str) -> Result<(), String> {
    check_scheme(url, CATALOG_SCHEMES)
}

fn check_objects(url: &Option<String>) -> Result<(), String> {
    url.as_deref()
        .map_or(Ok(()), |url| check_scheme(url, OBJECT_STORE_SCHEMES))
}

/// A URL must name a scheme mend can open there; a plain path is a local directory.
fn check_scheme(url: &str, schemes: &[&str]) -> Result<(), String> {
    match url.split_once("://") {
        Some((scheme, _)) if !schemes.contains(&scheme) => Err(format!(
            "{scheme}:// is not supported here; use a directory path or {}",
            schemes
                .iter()
                .map(|scheme| format!("{scheme}://"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => Ok(()),
    }
}

fn lookup(key: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|setting| setting.key == key)
}

/// The sections of the file (`limits`, `grace`, `serve`), in table order.
fn sections() -> impl Iterator<Item = &'static str> {
    let mut seen: Vec<&'static str> = Vec::new();
    SETTINGS.iter().filter_map(move |setting| {
        let (section, _) = setting.key.split_once('.')?;
        (!seen.contains(&section)).then(|| {
            seen.push(section);
            section
        })
    })
}

fn own_flags() -> Vec<&'static str> {
    SETTINGS.iter().filter_map(|setting| setting.flag).collect()
}

/// What to suggest in place of an unknown key: the keys of its section when it names a known
/// one, else every key. `full` gives whole keys (for `--set`), not the names inside a table.
fn known_keys(section: Option<&str>, full: bool) -> String {
    let in_section = |wanted: Option<&str>| {
        SETTINGS
            .iter()
            .filter(move |setting| setting.key.split_once('.').map(|(s, _)| s) == wanted)
            .map(move |setting| match setting.key.split_once('.') {
                Some((_, field)) if !full => field,
                _ => setting.key,
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match section.filter(|section| sections().any(|known| known == *section)) {
        Some(section) => format!("known keys of [{section}]: {}", in_section(Some(section))),
        None if full => format!(
            "known keys: {}",
            SETTINGS
                .iter()
                .map(|setting| setting.key)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => format!(
            "known keys: {}, and the tables {}",
            in_section(None),
            sections()
                .map(|section| format!("[{section}]"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The file `--config` or `MEND_CONFIG` names (which must exist), else the default file if it
/// exists, else none.
fn settings_file(inputs: &Inputs) -> Result<Option<PathBuf>, ConfigError> {
    let named = match &inputs.config_file {
        Some(path) => Some((path.clone(), Source::Flag(CONFIG_FLAG.to_owned()))),
        None => env_text(&inputs.env, CONFIG_ENV)?
            .map(|path| (PathBuf::from(path), Source::Env(CONFIG_ENV))),
    };
    match named {
        Some((path, _)) if path.exists() => Ok(Some(path)),
        Some((path, named_by)) => Err(ConfigError::MissingFile { path, named_by }),
        None => Ok(inputs
            .default_file
            .exists()
            .then(|| inputs.default_file.clone())),
    }
}

fn read_file(path: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::UnreadableFile {
        path: path.to_owned(),
        error,
    })?;
    parse_file(path, &text)
}

/// The settings file `text` as TOML; `path` names it in errors.
fn parse_file(path: &Path, text: &str) -> Result<toml::Table, ConfigError> {
    toml::from_str(text).map_err(|error| {
        let offset = error.span().map_or(0, |span| span.start).min(text.len());
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let column = before
            .rsplit_once('\n')
            .map_or(before, |(_, last)| last)
            .chars()
            .count()
            + 1;
        ConfigError::InvalidToml {
            path: path.to_owned(),
            line,
            column,
            // One line: the parser's message may run over several.
            message: error
                .message()
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .collect::<Vec<_>>()
                .join("; "),
        }
    })
}

/// An environment variable's text; unset and empty are the same, so `MEND_X=` clears nothing
/// but also sets nothing.
fn env_text<'a>(
    env: &'a BTreeMap<String, OsString>,
    name: &'static str,
) -> Result<Option<&'a str>, ConfigError> {
    match env.get(name).filter(|value| !value.is_empty()) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(Some)
            .ok_or_else(|| ConfigError::InvalidValue {
                key: lookup_by_env(name).unwrap_or(name).to_owned(),
                from: Source::Env(name),
                reason: "is not valid UTF-8".into(),
            }),
    }
}

fn lookup_by_env(name: &str) -> Option<&'static str> {
    SETTINGS
        .iter()
        .find(|setting| setting.env == name)
        .map(|setting| setting.key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(dir: &Path) -> Inputs {
        Inputs {
            config_file: None,
            default_file: dir.join("mend.toml"),
            env: BTreeMap::new(),
            flags: Vec::new(),
        }
    }

    fn with_env(mut inputs: Inputs, vars: &[(&str, &str)]) -> Inputs {
        for (name, value) in vars {
            inputs.env.insert((*name).into(), (*value).into());
        }
        inputs
    }

    fn flag(mut inputs: Inputs, flag: &str, value: &str) -> Inputs {
        inputs.flags.push((flag.into(), value.into()));
        inputs
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn with_nothing_given_every_setting_is_its_default() {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings::resolve(&inputs(dir.path())).unwrap();
        assert!(
            settings
                .entries()
                .all(|(_, _, source)| *source == Source::Default)
        );
        assert_eq!(settings.catalog, "./mend-data");
        assert_eq!(settings.file, None);
        assert_eq!(
            settings.engine_options().max_stage_batch,
            DEFAULT_MAX_STAGE_BATCH
        );
        assert_eq!(settings.engine_options().intent_lease_ms, 60_000);
        assert_eq!(
            settings.engine_options().gate_timeout,
            Duration::from_secs(30)
        );
        let limits = settings.load_options().limits;
        assert_eq!(
            limits.max_memory_bytes,
            PolicyLimits::default().max_memory_bytes
        );
        assert_eq!(limits.cpu_time_per_call, Duration::from_secs(1));
        assert_eq!(settings.dataset_config_defaults(), DatasetConfig::default());
        assert_eq!(settings.listen.to_string(), "127.0.0.1:7600");
        assert_eq!(settings.admin_token, None);
        assert_eq!(settings.cache_dir, None, "no HOME, no XDG_CACHE_HOME");
    }

    #[test]
    fn default_inputs_give_the_built_in_defaults() {
        let settings = Settings::resolve(&Inputs::default()).unwrap();
        assert_eq!(settings.file, None);
        assert_eq!(settings.listen, DEFAULT_LISTEN);
        assert_eq!(settings.supervisor_interval, Duration::from_secs(1));
        assert_eq!(settings.supervisor_max_backoff, Duration::from_secs(60));
    }

    #[test]
    fn the_cache_directory_defaults_to_xdg_then_home() {
        let dir = tempfile::tempdir().unwrap();
        let home = with_env(inputs(dir.path()), &[("HOME", "/home/u")]);
        assert_eq!(
            Settings::resolve(&home).unwrap().cache_dir,
            Some(PathBuf::from("/home/u/.cache/mend/components"))
        );
        let xdg = with_env(home, &[("XDG_CACHE_HOME", "/xdg")]);
        assert_eq!(
            Settings::resolve(&xdg).unwrap().cache_dir,
            Some(PathBuf::from("/xdg/mend/components"))
        );
        let explicit = with_env(xdg, &[("MEND_CACHE_DIR", "/c")]);
        let settings = Settings::resolve(&explicit).unwrap();
        assert_eq!(settings.cache_dir, Some(PathBuf::from("/c")));
        assert_eq!(settings.load_options().cache_dir, Some(PathBuf::from("/c")));
    }

    #[test]
    fn flags_override_the_environment_which_overrides_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(
            dir.path(),
            "custom.toml",
            "catalog = \"memory://file\"\npolicy = \"p.wasm\"\n\n[limits]\nmax_stage_batch = 7\ngate_timeout_ms = 5\n\n[grace]\nstaged_grace_period_ms = 11\n\n[serve]\nlisten = \"0.0.0.0:9000\"\nadmin_token = \"hunter2\"\n",
        );
        let mut from_file = inputs(dir.path());
        from_file.config_file = Some(file.clone());
        let settings = Settings::resolve(&from_file).unwrap();
        assert_eq!(settings.catalog, "memory://file");
        assert_eq!(
            settings.source("catalog"),
            Some(&Source::File(file.clone()))
        );
        assert_eq!(settings.policy, Some(PathBuf::from("p.wasm")));
        assert_eq!(settings.engine_options().max_stage_batch, 7);
        assert_eq!(settings.gate_timeout, Duration::from_millis(5));
        assert_eq!(
            settings.dataset_config_defaults().staged_grace_period_ms,
            11
        );
        assert_eq!(
            settings.dataset_config_defaults().deletion_grace_period_ms,
            DatasetConfig::default().deletion_grace_period_ms
        );
        assert_eq!(settings.listen.port(), 9000);
        assert_eq!(settings.admin_token.as_deref(), Some("hunter2"));
        assert_eq!(settings.source("objects"), Some(&Source::Default));
        assert_eq!(settings.file, Some(file));

        let from_env = with_env(
            from_file,
            &[
                ("MEND_CATALOG", "memory://env"),
                ("MEND_LIMITS_MAX_STAGE_BATCH", "8"),
            ],
        );
        let settings = Settings::resolve(&from_env).unwrap();
        assert_eq!(settings.catalog, "memory://env");
        assert_eq!(
            settings.source("catalog"),
            Some(&Source::Env("MEND_CATALOG"))
        );
        assert_eq!(settings.max_stage_batch.get(), 8);

        let from_flags = flag(
            flag(from_env, "--set", "limits.max_stage_batch=9"),
            "--catalog",
            "memory://flag",
        );
        let settings = Settings::resolve(&from_flags).unwrap();
        assert_eq!(settings.catalog, "memory://flag");
        assert_eq!(
            settings.source("catalog"),
            Some(&Source::Flag("--catalog".into()))
        );
        assert_eq!(settings.max_stage_batch.get(), 9);
        assert_eq!(
            settings.source("limits.max_stage_batch"),
            Some(&Source::Flag("--set limits.max_stage_batch".into()))
        );
        // Untouched by env and flags, still from the file.
        assert_eq!(settings.gate_timeout, Duration::from_millis(5));
    }

    #[test]
    fn the_file_is_named_by_flag_then_env_else_the_default_file_if_it_exists() {
        let dir = tempfile::tempdir().unwrap();
        let default = write(dir.path(), "mend.toml", "catalog = \"memory://default\"\n");
        let by_env = write(dir.path(), "env.toml", "catalog = \"memory://env\"\n");
        let by_flag = write(dir.path(), "flag.toml", "catalog = \"memory://flag\"\n");

        let mut named = inputs(dir.path());
        assert_eq!(Settings::resolve(&named).unwrap().file, Some(default));
        named = with_env(named, &[("MEND_CONFIG", by_env.to_str().unwrap())]);
        assert_eq!(Settings::resolve(&named).unwrap().catalog, "memory://env");
        named.config_file = Some(by_flag);
        assert_eq!(Settings::resolve(&named).unwrap().catalog, "memory://flag");

        let mut missing = inputs(dir.path());
        missing.config_file = Some(dir.path().join("nope.toml"));
        let error = Settings::resolve(&missing).unwrap_err();
        assert!(matches!(error, ConfigError::MissingFile { .. }), "{error}");
        assert!(error.to_string().contains("flag --config"), "{error}");
        let missing = with_env(inputs(dir.path()), &[("MEND_CONFIG", "/nope/mend.toml")]);
        let error = Settings::resolve(&missing).unwrap_err();
        assert!(error.to_string().contains("MEND_CONFIG"), "{error}");

        // No file named and none at the default place: defaults only.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(Settings::resolve(&inputs(empty.path())).unwrap().file, None);
    }

    #[test]
    fn an_unknown_key_is_refused_with_the_keys_of_its_section() {
        let dir = tempfile::tempdir().unwrap();
        for (text, key, suggests) in [
            (
                "[limits]\nmax_batch = 5\n",
                "limits.max_batch",
                "max_stage_batch",
            ),
            ("catalogue = \"x\"\n", "catalogue", "[limits]"),
            ("[limitz]\nmax_stage_batch = 5\n", "limitz", "catalog"),
        ] {
            let mut given = inputs(dir.path());
            given.config_file = Some(write(dir.path(), "bad.toml", text));
            let error = Settings::resolve(&given).unwrap_err();
            assert!(
                matches!(&error, ConfigError::UnknownKey { key: found, .. } if found == key),
                "{error}"
            );
            let message = error.to_string();
            assert!(
                message.contains("bad.toml") && message.contains(suggests),
                "{message}"
            );
        }
        let unknown = flag(inputs(dir.path()), "--set", "limits.nope=1");
        let message = Settings::resolve(&unknown).unwrap_err().to_string();
        assert!(message.contains("limits.max_stage_batch"), "{message}");
        let malformed = flag(inputs(dir.path()), "--set", "limits.max_stage_batch");
        assert!(matches!(
            Settings::resolve(&malformed).unwrap_err(),
            ConfigError::MalformedAssignment { .. }
        ));
    }

    #[test]
    fn a_bad_value_is_refused_naming_where_it_came_from() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = inputs(dir.path());
        file.config_file = Some(write(
            dir.path(),
            "bad.toml",
            "[limits]\nmax_stage_batch = \"many\"\n",
        ));
        let message = Settings::resolve(&file).unwrap_err().to_string();
        assert!(
            message.contains("limits.max_stage_batch")
                && message.contains("bad.toml")
                && message.contains("found a TOML string"),
            "{message}"
        );

        for (name, value, reason) in [
            ("MEND_LIMITS_MAX_STAGE_BATCH", "lots", "not a whole number"),
            ("MEND_LIMITS_MAX_STAGE_BATCH", "0", "at least 1"),
            ("MEND_SERVE_LISTEN", "localhost", "address and port"),
            ("MEND_CATALOG", "http://x", "http:// is not supported"),
            (
                "MEND_OBJECTS",
                "postgres://x",
                "postgres:// is not supported",
            ),
        ] {
            let given = with_env(inputs(dir.path()), &[(name, value)]);
            let message = Settings::resolve(&given).unwrap_err().to_string();
            assert!(
                message.contains(&format!("environment variable {name}"))
                    && message.contains(reason),
                "{message}"
            );
        }

        let given = flag(
            inputs(dir.path()),
            "--set",
            "grace.staged_grace_period_ms=-1",
        );
        let message = Settings::resolve(&given).unwrap_err().to_string();
        assert!(
            message.contains("flag --set grace.staged_grace_period_ms"),
            "{message}"
        );

        let mut section = inputs(dir.path());
        section.config_file = Some(write(dir.path(), "section.toml", "limits = 5\n"));
        let message = Settings::resolve(&section).unwrap_err().to_string();
        assert!(message.contains("expected a table [limits]"), "{message}");
    }

    #[test]
    fn a_server_limit_out_of_its_range_is_refused_naming_the_setting_and_the_range() {
        let dir = tempfile::tempdir().unwrap();
        let mut refused = 0;
        for (assignment, range) in [
            ("serve.max_connections=0", "1..=100000"),
            ("serve.max_connections=100001", "1..=100000"),
            ("serve.header_read_timeout_ms=99", "100..=600000"),
            ("serve.body_read_timeout_ms=3600001", "100..=3600000"),
            ("serve.idle_timeout_ms=0", "100..=3600000"),
            ("serve.shutdown_deadline_ms=3600001", "0..=3600000"),
            ("serve.max_queued_writes=0", "1..=100000"),
            ("serve.max_queued_writes_per_dataset=0", "1..=100000"),
            ("serve.max_admin_component_bytes=1023", "1024..=1073741824"),
        ] {
            let key = assignment.split_once('=').unwrap().0;
            let given = flag(inputs(dir.path()), "--set", assignment);
            let message = Settings::resolve(&given).unwrap_err().to_string();
            assert!(
                message.contains(&format!("`{key}`")) && message.contains(range),
                "{assignment}: {message}"
            );
            refused += 1;
        }
        let given = flag(inputs(dir.path()), "--set", "serve.shutdown_deadline_ms=0");
        assert_eq!(
            Settings::resolve(&given).unwrap().shutdown_deadline,
            Duration::ZERO
        );
        println!("config: {refused} out-of-range server limits refused");
    }

    #[test]
    fn invalid_toml_is_refused_with_its_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let mut given = inputs(dir.path());
        given.config_file = Some(write(
            dir.path(),
            "broken.toml",
            "catalog = \"./x\"\n[limits\nmax_stage_batch = 1\n",
        ));
        let error = Settings::resolve(&given).unwrap_err();
        let ConfigError::InvalidToml { line, message, .. } = &error else {
            panic!("{error}");
        };
        assert_eq!(*line, 2, "{error}");
        assert!(!message.contains('\n'));
        assert!(error.to_string().contains("broken.toml"), "{error}");
    }

    #[test]
    fn the_admin_token_is_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let unset = Settings::resolve(&inputs(dir.path())).unwrap();
        let given = with_env(inputs(dir.path()), &[("MEND_SERVE_ADMIN_TOKEN", "hunter2")]);
        let set = Settings::resolve(&given).unwrap();
        assert_eq!(set.admin_token.as_deref(), Some("hunter2"));
        let shown = |settings: &Settings| {
            settings
                .entries()
                .find(|(setting, _, _)| setting.key == "serve.admin_token")
                .map(|(_, value, _)| value)
                .unwrap()
        };
        assert_eq!(shown(&unset), Shown::Text("<unset>".into()));
        assert_eq!(shown(&set), Shown::Text("<set>".into()));
        assert!(!format!("{set:?}").contains("hunter2"));
    }

    #[test]
    fn the_log_level_and_format_come_from_the_settings_and_rust_log_wins() {
        let dir = tempfile::tempdir().unwrap();
        let defaults = Settings::resolve(&inputs(dir.path())).unwrap();
        assert_eq!(defaults.log_level.directives(), "info");
        assert_eq!(defaults.log_format, LogFormat::Human);

        let file = write(
            dir.path(),
            "mend.toml",
            "[log]\nlevel = \"warn,mend=debug\"\nformat = \"json\"\n",
        );
        let mut given = inputs(dir.path());
        given.config_file = Some(file);
        let settings = Settings::resolve(&given).unwrap();
        assert_eq!(settings.log_level.directives(), "warn,mend=debug");
        assert_eq!(settings.log_format, LogFormat::Json);

        let flagged = flag(given.clone(), "--set", "log.level=error");
        let settings = Settings::resolve(&flagged).unwrap();
        assert_eq!(settings.log_level.directives(), "error");
        assert_eq!(
            settings.source("log.level"),
            Some(&Source::Flag("--set log.level".into()))
        );

        // RUST_LOG wins over every other source, the flag included, and is read as any
        // tracing program reads it: a bare target is a directive.
        let overridden = with_env(flagged, &[("RUST_LOG", "mend_server")]);
        let settings = Settings::resolve(&overridden).unwrap();
        assert_eq!(settings.log_level.directives(), "mend_server");
        assert_eq!(settings.source("log.level"), Some(&Source::Env("RUST_LOG")));
        assert_eq!(settings.log_format, LogFormat::Json);
        // An empty RUST_LOG is unset, as every variable is.
        let empty = with_env(given, &[("RUST_LOG", "")]);
        let settings = Settings::resolve(&empty).unwrap();
        assert_eq!(settings.log_level.directives(), "warn,mend=debug");
    }

    #[test]
    fn a_bad_log_setting_is_refused_naming_its_key() {
        let dir = tempfile::tempdir().unwrap();
        for (name, value, reason) in [
            ("MEND_LOG_LEVEL", "verbose", "is not a level"),
            ("MEND_LOG_LEVEL", "info,mend=loud", "is not a level"),
            ("MEND_LOG_LEVEL", "=debug", "is not a level"),
            ("MEND_LOG_LEVEL", " ", "must not be empty"),
            ("MEND_LOG_FORMAT", "xml", "is not human or json"),
            ("RUST_LOG", "mend=loud", "is not a log filter"),
        ] {
            let given = with_env(inputs(dir.path()), &[(name, value)]);
            let message = Settings::resolve(&given).unwrap_err().to_string();
            let key = if name == "MEND_LOG_FORMAT" {
                "`log.format`"
            } else {
                "`log.level`"
            };
            assert!(
                message.contains(key)
                    && message.contains(&format!("environment variable {name}"))
                    && message.contains(reason),
                "{name}={value:?}: {message}"
            );
        }
        for text in [
            "info",
            "DEBUG",
            "off",
            "info,mend=debug",
            "mend[request]=debug",
        ] {
            assert!(LogLevel::parse(text).is_ok(), "{text}");
        }
    }

    #[test]
    fn the_table_is_consistent() {
        let mut keys = std::collections::BTreeSet::new();
        for setting in SETTINGS {
            assert!(keys.insert(setting.key), "{} twice", setting.key);
            assert_eq!(
                setting.env,
                format!("MEND_{}", setting.key.to_uppercase().replace('.', "_")),
                "the env var of {} follows the rule",
                setting.key
            );
            assert!(!setting.doc.contains('|') && !setting.default_text().contains('|'));
            assert!(setting.key.matches('.').count() <= 1);
        }
        assert_eq!(
            sections().collect::<Vec<_>>(),
            ["postgres", "limits", "grace", "serve", "log"]
        );
    }

    /// README.md's configuration table, as this table says it must read.
    fn markdown_table() -> String {
        let mut lines = vec![
            "| key | environment | flag | default | range | meaning |".to_owned(),
            "|---|---|---|---|---|---|".to_owned(),
        ];
        for setting in SETTINGS {
            let default = match setting.default_doc {
                Some(words) => words.to_owned(),
                None => format!("`{}`", setting.default_text()),
            };
            let flag = match setting.flag {
                Some(flag) => format!("`{flag}`"),
                None => format!("`{SET_FLAG}`"),
            };
            lines.push(format!(
                "| `{}` | `{}` | {flag} | {default} | {} | {} |",
                setting.key,
                setting.env,
                setting.range_text(),
                setting.doc
            ));
        }
        lines.join("\n")
    }

    #[test]
    fn the_default_json_body_cap_holds_the_largest_request_of_the_default_limits() {
        let settings = Settings::built_in(&BTreeMap::new());
        let needed = mend_server::largest_json_body(
            settings.max_stage_batch.get(),
            settings.max_metadata_bytes,
        );
        assert!(
            needed <= settings.max_json_body_bytes,
            "{needed} > {}",
            settings.max_json_body_bytes
        );
        // Not by a wide margin either: the cap is sized for the limits.
        assert!(needed * 4 > settings.max_json_body_bytes * 3, "{needed}");
        let serve = ServeLimits::default();
        assert!(
            serve
                .check_json_body(DEFAULT_MAX_STAGE_BATCH, DEFAULT_MAX_METADATA_BYTES)
                .is_ok()
        );
        assert!(
            serve
                .check_json_body(DEFAULT_MAX_STAGE_BATCH * 10, DEFAULT_MAX_METADATA_BYTES)
                .is_err()
        );
    }

    #[test]
    fn the_readme_lists_every_fixed_limit() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
        for bound in bounds::FIXED {
            let row = format!("| `{}` | `{bound}` |", bound.name);
            assert!(
                readme.contains(&row),
                "README.md's table of fixed limits has no row {row}"
            );
        }
    }

    #[test]
    fn the_readme_documents_every_setting_as_the_table_says() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
        let section = readme
            .split_once("\n## Configuration\n")
            .map(|(_, rest)| rest.split("\n## ").next().unwrap_or(rest))
            .expect("README.md has a Configuration section");
        let expected = markdown_table();
        assert!(
            section.contains(&expected),
            "README.md's configuration table has drifted from config::SETTINGS; it must read:\n\n{expected}\n"
        );
    }
}

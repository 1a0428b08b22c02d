//! The settings of a mend process: resolved once from the built-in defaults, a TOML file, the
//! environment and flags, each overriding the one before, and remembering where each value
//! came from.
//!
//! [`SETTINGS`] is the one table of every setting: its key in the file and for `--set`, its
//! environment variable, its flag, its default and what it means. `mend config` prints from
//! it, and a test holds the book's configuration table
//! (docs/src/configuration.md) to it. This module reads the file it is
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
//!   not a whole number; its range is 1..=100000"): the messages the docs and the CLI tests
//!   promise would need a translation layer over its `Error`;
//! - ranges ([`mend::bounds`]), URL schemes and the docs' table check are mend's either way.
//!
//! A second model of the same table to keep in step is a worse trade than these lines, so the
//! table below is the one model: it parses, shows, documents and is checked against the docs.

mod render;
mod sources;
mod table;
#[cfg(test)]
mod tests;
mod values;

pub use render::print;
use sources::{env_text, parse_file, read_file, settings_file};
pub use table::{SETTINGS, Setting};
use table::{known_keys, lookup, own_flags, sections};
use values::{Raw, SettingValue, check_catalog, check_env_filter, check_objects, millis};

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
    /// How long an object-store gate's lease lasts unless renewed.
    pub gate_lease: Duration,
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
            gate_lease: mend::gates::DEFAULT_LEASE_DURATION,
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

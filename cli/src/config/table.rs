//! The table of every setting: its key, environment variable, flag, default, range and
//! meaning; how each reaches its field of [`Settings`]; the sections and keys it knows.

use super::*;

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
    pub(super) field: Field,
}

/// How a setting reaches its field of [`Settings`]; see `field!`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Field {
    pub(super) assign: fn(&mut Settings, Raw<'_>) -> Result<(), String>,
    pub(super) show: fn(&Settings) -> Shown,
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

    const fn secret(self) -> Self {
        Setting {
            secret: true,
            ..self
        }
    }
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

/// Every setting mend reads, in the order `mend config` and docs/src/configuration.md list them.
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
        "limits.gate_lease_ms",
        "MEND_LIMITS_GATE_LEASE_MS",
        field!(gate_lease),
        "How long an object-store gate's lease lasts unless renewed, in ms: a process that dies holding a gate keeps it from the others this long.",
    )
    .within(bounds::GATE_LEASE_MS),
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
        "For new datasets: a marked split's object and row are removed this long (ms) after the mark was seen (a published split's by gc, the first gc after it landed).",
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
        "How long a replica's fleet membership lasts unless renewed, in ms: its datasets are taken over this long (plus an interval, and on object storage a 2 s allowance for the store's clock) after it dies.",
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

pub(super) fn lookup(key: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|setting| setting.key == key)
}

/// The sections of the file (`limits`, `grace`, `serve`), in table order.
pub(super) fn sections() -> impl Iterator<Item = &'static str> {
    let mut seen: Vec<&'static str> = Vec::new();
    SETTINGS.iter().filter_map(move |setting| {
        let (section, _) = setting.key.split_once('.')?;
        (!seen.contains(&section)).then(|| {
            seen.push(section);
            section
        })
    })
}

pub(super) fn own_flags() -> Vec<&'static str> {
    SETTINGS.iter().filter_map(|setting| setting.flag).collect()
}

/// What to suggest in place of an unknown key: the keys of its section when it names a known
/// one, else every key. `full` gives whole keys (for `--set`), not the names inside a table.
pub(super) fn known_keys(section: Option<&str>, full: bool) -> String {
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

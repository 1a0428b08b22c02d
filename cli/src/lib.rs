//! The command line: flags, the commands behind them and how results and errors are shown.
//!
//! Every command prints a readable table by default and JSON with `--json`. Tables fit the
//! terminal (see `output.rs`) unless `--wide`. Exit codes say what kind of failure
//! happened, so scripts can tell "fix the request" from "retry":
//!
//! | code | meaning                                                       |
//! |------|---------------------------------------------------------------|
//! | 0    | success                                                       |
//! | 1    | any other failure                                             |
//! | 2    | invalid argument, input or configuration (nothing happened)    |
//! | 3    | not found (nothing happened)                                  |
//! | 4    | already exists, failed precondition or conflict (nothing happened) |
//! | 5    | unavailable or transient: the outcome is unknown, retry        |
//! | 6    | the policy failed, was rejected or lacks a capability          |
//! | 101  | mend panicked (a bug); its gates were released                 |
//! | 130, 143 | stopped by SIGINT or SIGTERM; its gates were released      |
//!
//! A command stopped by a signal or a panic is cancelled where it is and released its gates
//! before the process exits (`interrupt.rs`): work it had begun is left as an intent, which
//! the next recovery finishes, exactly as after a crash.
//!
//! This crate is the `mend` binary's (`src/main.rs` only parses flags and hands over to
//! [`run`]); its library form exists for the settings ([`config`]) and the fuzz driver.

mod commands;
mod commit;
pub mod config;
mod demo;
#[doc(hidden)]
pub mod fuzzing;
mod interrupt;
mod logging;
mod operate;
mod operation;
mod output;
mod policy;
mod progress;
mod request;
pub mod scaffold;
mod serve;
mod splits;
mod status;
mod token;

use std::path::PathBuf;

use crate::config::{ConfigError, Inputs};
use clap::{Parser, Subcommand, ValueEnum};
use mend::MendError;

pub use commands::run;

#[derive(Debug, Parser)]
#[command(
    name = "mend",
    version,
    about = "Keeps a catalog of immutable splits consistent with the object storage under it",
    after_help = "Settings come from defaults, then a TOML file, then MEND_* environment variables, then flags; `mend config` shows each one's value and source."
)]
pub struct Args {
    /// The settings file; it must exist. Without it, ./mend.toml if there is one. [env: MEND_CONFIG]
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Catalog URL: a directory (default ./mend-data), file://DIR, memory://, s3://BUCKET/PREFIX
    /// or postgres://... [env: MEND_CATALOG]
    #[arg(long, global = true, value_name = "URL")]
    pub catalog: Option<String>,

    /// Where split objects live. Defaults to the catalog's own store; required with Postgres.
    /// [env: MEND_OBJECTS]
    #[arg(long, global = true, value_name = "URL")]
    pub objects: Option<String>,

    /// Where compiled policy components are kept. [env: MEND_CACHE_DIR]
    #[arg(long, global = true, value_name = "DIR")]
    pub cache_dir: Option<String>,

    /// Run this policy component instead of the deployment's active policy. [env: MEND_POLICY]
    #[arg(long, global = true, value_name = "COMPONENT")]
    pub policy: Option<String>,

    /// Any setting by its key, as in the file (repeatable): --set limits.max_stage_batch=500.
    /// Give it before the command: `dataset config` has a --set of its own.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,

    /// Print JSON instead of a table (times in milliseconds since the epoch).
    #[arg(long, global = true)]
    pub json: bool,

    /// Show every table cell whole, however wide the table gets. Without it, tables fit the
    /// terminal: its width when printing to one, else $COLUMNS, else 80 columns.
    #[arg(long, global = true)]
    pub wide: bool,

    #[command(subcommand)]
    pub command: Command,
}

impl Args {
    /// What the settings are resolved from: this process's environment and `./mend.toml`,
    /// `--config`, and the flags that set a setting. `--set` goes first so that a setting's
    /// own flag wins over it.
    pub fn settings_inputs(&self) -> Inputs {
        let mut inputs = Inputs::from_process();
        inputs.config_file = self.config.clone();
        for assignment in &self.set {
            inputs
                .flags
                .push((crate::config::SET_FLAG.to_owned(), assignment.clone()));
        }
        for (flag, value) in [
            ("--catalog", &self.catalog),
            ("--objects", &self.objects),
            ("--cache-dir", &self.cache_dir),
            ("--policy", &self.policy),
        ] {
            if let Some(value) = value {
                inputs.flags.push((flag.to_owned(), value.clone()));
            }
        }
        if let Command::Serve {
            listen: Some(listen),
        } = &self.command
        {
            inputs.flags.push(("--listen".to_owned(), listen.clone()));
        }
        inputs
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, list, show and configure datasets.
    Dataset {
        #[command(subcommand)]
        command: DatasetCommand,
    },
    /// Stage splits from a JSON file (or - for stdin): [{"split_id": "...", "metadata": {...}}].
    Stage(StageArgs),
    /// Publish staged splits, replace published ones, apply a checkpoint delta.
    Publish(PublishArgs),
    /// Upload files as new splits and publish them, crash-safely: hash each file, begin an
    /// operation, upload each file streaming, publish. Re-run with the same --operation-id to
    /// resume it; `mend operation abort` rolls it back.
    Commit(CommitArgs),
    /// The steps of an operation one at a time, for scripted writers: begin, upload each
    /// object, heartbeat, publish or abort; show where it stands.
    Operation {
        #[command(subcommand)]
        command: OperationCommand,
    },
    /// Mark splits for deletion (idempotent).
    Mark(MarkArgs),
    /// Delete splits marked for deletion: their objects, then their rows.
    Delete(DeleteArgs),
    /// List splits, filtered and paged.
    List(ListArgs),
    /// Resolve the in-doubt work crashed operations left in a dataset.
    Recover(RecoverArgs),
    /// Collect a dataset's garbage: mark staged splits abandoned past the staged grace period,
    /// delete the objects, then the rows, of splits marked past the deletion grace period.
    Gc(GcArgs),
    /// Rebuild rows for objects no row describes (older than the staged grace period): the
    /// policy adopts (publishes) whole ones and discards (marks) the rest.
    Reconcile(ReconcileArgs),
    /// Check a dataset's invariants, bucket included; writes nothing. Exits 1 on a violation.
    Verify(VerifyArgs),
    /// Who decided what and when on a dataset: its audit records (each recovery, gc and
    /// reconcile decision, with the principal that ran it), newest last.
    Audit(AuditArgs),
    /// Look at a policy component, replay recorded decisions against it, swap the active
    /// policy, roll it back.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Serve the HTTP JSON API (loopback by default) until SIGINT or SIGTERM, with a
    /// supervisor per dataset resolving crashed operations. With --json, the lines it prints
    /// when it starts listening and when it stops are JSON objects on stdout.
    Serve {
        /// The address to listen on (the serve.listen setting); port 0 picks a free port.
        #[arg(long)]
        listen: Option<String>,
    },
    /// Principals' secrets, and the lines of a tokens file that name them by the secrets'
    /// hashes.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Send one HTTP request to a `mend serve` as one of its principals (a secret, a client
    /// certificate), over TLS if https://, and print the answer's body. Exits as the other
    /// commands do for the answer's error (401, 403 and 429: 1); 5 when no connection or no
    /// whole answer (the outcome is unknown). Opens no catalog.
    Request(RequestArgs),
    /// Every setting, its value and where it came from (flag, environment, file or default).
    Config,
    /// Print the shell completion script for SHELL: `mend completions bash >
    /// /etc/bash_completion.d/mend`, `mend completions zsh > "${fpath[1]}/_mend"`, `mend
    /// completions fish > ~/.config/fish/completions/mend.fish`. Opens nothing.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print mend's manual page (roff): `mend man > /usr/local/share/man/man1/mend.1`, then
    /// `man mend`. Opens nothing.
    Man,
    /// The catalog, the active policy, and each dataset's versions and pending intents.
    Status,
    /// See mend's main job in a few seconds, on a fresh dataset of the catalog: concurrent
    /// writers crash part-way through their commits, a probe shows the in-doubt state,
    /// roll-forward recovery finishes their work and reconcile adopts an orphan object; then a
    /// swap to a second policy (which discards orphans) replays the recorded decisions and
    /// discards the next orphan, verify checks the invariants, and the swap is rolled back.
    Demo,
}

/// The arguments of `mend stage`.
#[derive(Debug, clap::Args)]
pub struct StageArgs {
    /// The dataset to stage in.
    pub dataset: String,
    /// upsert overwrites rows that are still staged; create-only never touches an existing row.
    #[arg(long, value_enum)]
    pub mode: ModeArg,
    /// The JSON file of splits; - reads stdin.
    #[arg(long, default_value = "-")]
    pub splits: PathBuf,
    /// The node staging the splits.
    #[arg(long, default_value = "cli")]
    pub node: String,
    /// Record the result under this key: the same stage sent again with it answers the
    /// first answer; another stage with it is refused. Keys starting with `op:` are mend's.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

/// The arguments of `mend publish`.
#[derive(Debug, clap::Args)]
pub struct PublishArgs {
    /// The dataset to publish in.
    pub dataset: String,
    /// Split ids to publish (comma-separated or repeated).
    #[arg(long = "split", value_delimiter = ',')]
    pub splits: Vec<String>,
    /// Published split ids this publish replaces (they become marked for deletion).
    #[arg(long = "replace", value_delimiter = ',')]
    pub replaced: Vec<String>,
    /// A checkpoint delta as JSON: {"source": "...", "partitions": [{"partition": "0", "from_position": null, "to_position": 10}]}
    #[arg(long)]
    pub checkpoint_delta: Option<String>,
    /// The publish token (fencing) the dataset expects.
    #[arg(long)]
    pub publish_token: Option<String>,
    /// Record the result under this key, in the publish's own atomic step: the same
    /// publish sent again with it answers the first answer (even once its splits are
    /// published); another publish with it is refused. Keys starting with `op:` are mend's.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

/// The arguments of `mend mark`.
#[derive(Debug, clap::Args)]
pub struct MarkArgs {
    /// The dataset the splits belong to.
    pub dataset: String,
    /// The split ids to mark (comma-separated or several arguments).
    #[arg(required = true, value_delimiter = ',')]
    pub split_ids: Vec<String>,
    /// Record the result under this key, with the marks: the same mark sent again with
    /// it answers the first answer; another request with it is refused. Keys starting
    /// with `op:` are mend's.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

/// The arguments of `mend delete`.
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// The dataset the splits belong to.
    pub dataset: String,
    /// The split ids to delete, each marked for deletion (comma-separated or several
    /// arguments).
    #[arg(required = true, value_delimiter = ',')]
    pub split_ids: Vec<String>,
    /// Record the result under this key, with the rows' delete: the same delete sent
    /// again with it answers the first answer, even once the rows are gone; another
    /// request with it is refused. Keys starting with `op:` are mend's.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

/// The arguments of `mend list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// The dataset to list the splits of.
    pub dataset: String,
    /// Only these states (comma-separated): staged, published, marked_for_deletion.
    #[arg(long, value_delimiter = ',')]
    pub state: Vec<String>,
    /// Only these split ids.
    #[arg(long = "split", value_delimiter = ',')]
    pub splits: Vec<String>,
    /// Only splits whose time range overlaps START..END (ms, both inclusive).
    #[arg(long)]
    pub time_range: Option<String>,
    /// Only splits updated at or after this time (ms since the epoch).
    #[arg(long)]
    pub updated_since: Option<i64>,
    /// Page size.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Start after this split id (from the previous page).
    #[arg(long)]
    pub after: Option<String>,
}

/// The arguments of `mend recover`.
#[derive(Debug, clap::Args)]
pub struct RecoverArgs {
    /// The dataset to recover.
    pub dataset: String,
    /// probe and verify only report; roll-forward completes what it can; exclusive may
    /// also roll back other writers' unfinished work.
    #[arg(long, value_enum)]
    pub mode: RecoverModeArg,
    /// Record the report under this key when the sweep ends: the same recovery sent again
    /// with it answers the first report. Probe and verify write nothing, so they record
    /// nothing either. Keys starting with `op:` are mend's.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

/// The arguments of `mend gc`.
#[derive(Debug, clap::Args)]
pub struct GcArgs {
    /// The dataset to collect.
    pub dataset: String,
    /// The node running the collection, recorded in its intent.
    #[arg(long, default_value = "cli")]
    pub node: String,
    /// Record the result under this key when the run ends: the same gc sent again with it
    /// answers the first result. Keys starting with `op:` are mend's.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

/// The arguments of `mend reconcile`.
#[derive(Debug, clap::Args)]
pub struct ReconcileArgs {
    /// The dataset whose objects to reconcile with its rows.
    pub dataset: String,
    /// The node running the reconcile: it stages the rebuilt rows and owns its intent.
    #[arg(long, default_value = "cli")]
    pub node: String,
    /// Record the report under this key when the run ends: the same reconcile sent again
    /// with it answers the first report. Keys starting with `op:` are mend's.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

/// The arguments of `mend verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The dataset to check.
    pub dataset: String,
    /// Read every object back whole and hash its payload against the sha256 its header
    /// records (every byte of the dataset is read; without it, only each object's header).
    #[arg(long)]
    pub deep: bool,
}

/// The arguments of `mend audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// The dataset.
    pub dataset: String,
    /// Only the records naming this principal (a tokens file's name, `anonymous`,
    /// `admin-token`, `supervisor@REPLICA` or `cli`).
    #[arg(long, value_name = "NAME")]
    pub principal: Option<String>,
    /// Only the records of this kind (their mode: roll-forward, exclusive, gc, reconcile,
    /// ...).
    #[arg(long, value_name = "K")]
    pub kind: Option<String>,
    /// Only the records recorded at or after this time, in milliseconds since the Unix epoch.
    #[arg(long, value_name = "MS")]
    pub since: Option<u64>,
    /// Only the records older than this place: the `next` an earlier page printed.
    #[arg(long, value_name = "CURSOR")]
    pub before: Option<String>,
    /// The most records to show, 1 to 100000: the newest that pass the filters (the filters
    /// apply before the limit).
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub limit: usize,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a principal's secret: printed this once, with the line to add to the tokens file,
    /// which holds only the secret's SHA-256. Writes nothing.
    New {
        /// The principal: 1 to 64 ASCII letters, digits, '.', '_' or '-'.
        principal: String,
        /// A grant (repeatable, at least one): admin; or read:P, write:P or operate:P, where
        /// the pattern P is a dataset id, a prefix followed by *, or * for every dataset.
        #[arg(long = "grant", value_name = "GRANT", required = true)]
        grants: Vec<String>,
    },
}

/// `mend request`'s arguments.
#[derive(Debug, clap::Args)]
pub struct RequestArgs {
    /// GET, HEAD, POST, PUT or DELETE, in any case.
    pub method: String,
    /// The route's path, with its query if any, starting with /: /v1/datasets,
    /// '/v1/datasets/logs/audit?limit=10'.
    pub path: String,
    /// The server: http://HOST:PORT or https://HOST:PORT, perhaps with a path prefix.
    #[arg(
        long,
        value_name = "URL",
        env = "MEND_SERVER",
        hide_env_values = true,
        default_value = request::DEFAULT_SERVER
    )]
    pub server: String,
    /// The request body, sent as given.
    #[arg(long, value_name = "JSON", conflicts_with = "body_file")]
    pub body: Option<String>,
    /// The file of the request body (at most 1 GiB); - reads stdin.
    #[arg(long, value_name = "PATH")]
    pub body_file: Option<PathBuf>,
    /// The body's media type: application/json unless given.
    #[arg(long, value_name = "TYPE")]
    pub content_type: Option<String>,
    /// Sent as the Idempotency-Key header: the server records a write's result under it, and
    /// the same request sent again with it answers that result.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// The principal's secret (`mend token new`). Other users of the machine may see a
    /// command's arguments: prefer --token-file or MEND_TOKEN. Without it, --token-file, else
    /// MEND_TOKEN; with none, no Authorization header. [env: MEND_TOKEN]
    #[arg(long, value_name = "SECRET", conflicts_with = "token_file")]
    pub token: Option<request::Secret>,
    /// A file holding the principal's secret (surrounding whitespace ignored).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// Trust only the CA certificates of this PEM file for https://, not the system's.
    #[arg(long, value_name = "PATH")]
    pub cacert: Option<PathBuf>,
    /// A client certificate (PEM) for mutual TLS, with --key.
    #[arg(long, value_name = "PATH")]
    pub cert: Option<PathBuf>,
    /// The private key (PEM) of --cert.
    #[arg(long, value_name = "PATH")]
    pub key: Option<PathBuf>,
    /// Send the secret over plain http:// to an address other than loopback all the same,
    /// for anyone on the way to read, with a warning. Without it, such a request is refused:
    /// use https:// instead.
    #[arg(long)]
    pub insecure: bool,
    /// How long the request may take, from connecting to the answer's last byte (ms, 1 to
    /// 3600000); connecting alone, at most 10 s.
    #[arg(long, value_name = "N", default_value_t = 60_000)]
    pub timeout_ms: u64,
}

/// `mend commit`'s arguments.
#[derive(Debug, clap::Args)]
pub struct CommitArgs {
    /// The dataset to commit to.
    pub dataset: String,
    /// A new split and the file of its payload, as ID=FILE (repeatable, at least one).
    #[arg(long = "split", value_name = "ID=FILE", required = true)]
    pub splits: Vec<String>,
    /// A split's metadata, as ID=JSON with a JSON object (repeatable); {} where not given.
    #[arg(long = "metadata", value_name = "ID=JSON")]
    pub metadata: Vec<String>,
    /// A checkpoint delta to apply with the publish, as JSON: {"source": "...", "partitions":
    /// [{"partition": "0", "from_position": null, "to_position": 10}]}. Not with --replace.
    #[arg(long, value_name = "JSON", conflicts_with = "replaced")]
    pub checkpoint_delta: Option<String>,
    /// Published split ids the new splits replace (comma-separated or repeated): the commit
    /// is then a merge, and they become marked for deletion.
    #[arg(long = "replace", value_name = "ID", value_delimiter = ',')]
    pub replaced: Vec<String>,
    /// The node committing: the operation's owner, recorded in each object.
    #[arg(long, default_value = "cli")]
    pub node: String,
    /// The operation's id: give the id of an earlier run to resume it. Without it, a new id is
    /// printed on stderr before anything is written.
    #[arg(long, value_name = "ID")]
    pub operation_id: Option<String>,
    /// The publish token (fencing) the dataset expects.
    #[arg(long, value_name = "T")]
    pub publish_token: Option<String>,
    /// How long (ms) the operation's lease lasts without a heartbeat; the limits.intent_lease_ms
    /// setting when not given. Uploads longer than a third of it renew it as they go.
    #[arg(long, value_name = "MS")]
    pub lease_ms: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum OperationCommand {
    /// Begin an operation from its plan: write its intent, stage its rows create-only. Prints
    /// each split's object path, object size and the header to write before its payload.
    Begin {
        /// The dataset to begin the operation in.
        dataset: String,
        /// The plan, a JSON file (or - for stdin): {"operation_id": "...", "kind": "commit" |
        /// "merge", "node": "...", "splits": [{"split_id": "...", "metadata_json": "{}",
        /// "size": N, "sha256": "..."}], "checkpoint_delta": ..., "replaced_split_ids": [...],
        /// "publish_token": ..., "lease_ms": N}; "dataset_id", if given, must be DATASET.
        #[arg(long, value_name = "FILE")]
        plan: PathBuf,
    },
    /// Upload one planned split's payload, streamed and checked against the planned size and
    /// sha256; nothing is written unless it matches. An object already in place writes nothing.
    Upload {
        /// The dataset of the operation.
        dataset: String,
        /// The operation's id.
        operation: String,
        /// The planned split whose payload this is.
        split: String,
        /// The payload file; - reads stdin.
        file: PathBuf,
    },
    /// Extend the operation's lease, so that recovery leaves a slow writer's work alone.
    Heartbeat {
        /// The dataset of the operation.
        dataset: String,
        /// The operation's id.
        operation: String,
        /// The new lease from now (ms); the limits.intent_lease_ms setting when not given.
        #[arg(long, value_name = "MS")]
        lease_ms: Option<u64>,
    },
    /// Check every planned object and publish the operation's splits with its checkpoint
    /// delta; sent again after it landed, answers the same result.
    Publish {
        /// The dataset of the operation.
        dataset: String,
        /// The operation's id.
        operation: String,
    },
    /// Roll the operation back at once: its rows and objects go, then its intent.
    Abort {
        /// The dataset of the operation.
        dataset: String,
        /// The operation's id.
        operation: String,
    },
    /// The operation's phase, each planned object's status and what recovery would decide.
    Show {
        /// The dataset of the operation.
        dataset: String,
        /// The operation's id.
        operation: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Write a new policy project: a Rust crate on mend's policy SDK or a JavaScript module
    /// with its pinned builders. It starts as the default policy's decisions and passes its
    /// golden scenarios (copied into scenarios/); its README says how to build, test and swap
    /// it. Opens no catalog.
    New {
        /// The project's name: its folder, package and crate name, and the name its
        /// `describe()` reports.
        name: String,
        /// The language to write it in.
        #[arg(long, value_enum)]
        lang: scaffold::Language,
        /// The folder to write the project's folder in.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// The mend checkout a Rust project builds against (its policy-sdk/ and guest/). By
        /// default the one this binary was built from.
        #[arg(long)]
        mend_dir: Option<PathBuf>,
    },
    /// Load a component, check it (imports, ABI, semantics, capabilities) and describe it.
    /// Opens no catalog.
    Inspect {
        /// The policy component file (.wasm).
        component: PathBuf,
    },
    /// Run scenario files (or every .json file of a directory) against a component: PASS or
    /// FAIL per scenario, a diff for each failure; exits 1 if any fails. Opens no catalog.
    Test {
        /// The policy component file (.wasm).
        component: PathBuf,
        /// Scenario files, or directories of them.
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
    },
    /// The active policy and when it became active.
    Active,
    /// Ask a component every recorded decision of the audit log and show which would change.
    Replay {
        /// The candidate policy component file (.wasm).
        component: PathBuf,
        /// How many of the catalog's newest audit records to replay (every dataset's
        /// together), 1 to 100000.
        #[arg(long, default_value_t = policy::DEFAULT_REPLAY_RECORDS)]
        records: usize,
    },
    /// Make a component the active policy: checked and replayed first, then published at once.
    Swap {
        /// The policy component file (.wasm) to make active.
        component: PathBuf,
        /// How many of the catalog's newest audit records to replay first (every dataset's
        /// together), 1 to 100000.
        #[arg(long, default_value_t = policy::DEFAULT_REPLAY_RECORDS)]
        records: usize,
        /// The golden scenarios shipped with the component (files or directories); the swap
        /// is refused if any fails.
        #[arg(long = "scenarios")]
        scenarios: Vec<PathBuf>,
        /// Record the swap under this key, in the registry record that makes it: the same
        /// swap sent again with it answers the first answer; another request with it is
        /// refused. Keys starting with `op:` are mend's.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
    /// Restore the policy the last swap replaced.
    Rollback {
        /// Record the rollback under this key, in the registry record that makes it: a
        /// rollback sent again with it answers the first answer instead of undoing it. Keys
        /// starting with `op:` are mend's.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum DatasetCommand {
    /// Create a dataset.
    Create {
        /// The new dataset's id.
        dataset: String,
        /// Staged splits untouched this long (ms) are abandoned.
        #[arg(long)]
        staged_grace_period_ms: Option<u64>,
        /// Marked splits are removed this long (ms) after the mark was seen.
        #[arg(long)]
        deletion_grace_period_ms: Option<u64>,
        /// Record the creation under this key, in the new dataset: the same create sent again
        /// with it answers the first answer instead of "already exists"; another request with
        /// it is refused. Keys starting with `op:` are mend's.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
    /// List datasets.
    List,
    /// Show one dataset.
    Show {
        /// The dataset to show.
        dataset: String,
    },
    /// Show a dataset's config, or change it with --set KEY=VALUE.
    Config {
        /// The dataset whose config to show or change.
        dataset: String,
        /// staged_grace_period_ms=N, deletion_grace_period_ms=N or policy.NAME=VALUE.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Record the change under this key, with its promotion: the same --set sent again
        /// with it answers the first answer (while the first is unfinished: recovery
        /// required, exit 4, retry); other settings with it are refused. Keys starting with
        /// `op:` are mend's.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
    /// Set (or with --clear, remove) the token every publish must present.
    Fence {
        /// The dataset to fence.
        dataset: String,
        /// The publish token every publish must present from now on.
        #[arg(long, conflicts_with = "clear")]
        token: Option<String>,
        /// Remove the publish token: publishes need none.
        #[arg(long)]
        clear: bool,
        /// Record the change under this key: the same fence sent again with it answers the
        /// first answer; another request with it is refused. Keys starting with `op:` are
        /// mend's.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
}

impl Command {
    /// The command as a gate's holder is named to other processes: `mend gc`,
    /// `mend recover`. Never the arguments, which could carry a catalog URL's password.
    pub fn program(&self) -> &'static str {
        match self {
            Self::Dataset { command } => match command {
                DatasetCommand::Create { .. } => "mend dataset create",
                DatasetCommand::List => "mend dataset list",
                DatasetCommand::Show { .. } => "mend dataset show",
                DatasetCommand::Config { .. } => "mend dataset config",
                DatasetCommand::Fence { .. } => "mend dataset fence",
            },
            Self::Stage { .. } => "mend stage",
            Self::Publish { .. } => "mend publish",
            Self::Commit(_) => "mend commit",
            Self::Operation { command } => match command {
                OperationCommand::Begin { .. } => "mend operation begin",
                OperationCommand::Upload { .. } => "mend operation upload",
                OperationCommand::Heartbeat { .. } => "mend operation heartbeat",
                OperationCommand::Publish { .. } => "mend operation publish",
                OperationCommand::Abort { .. } => "mend operation abort",
                OperationCommand::Show { .. } => "mend operation show",
            },
            Self::Mark { .. } => "mend mark",
            Self::Delete { .. } => "mend delete",
            Self::List { .. } => "mend list",
            Self::Recover { .. } => "mend recover",
            Self::Gc { .. } => "mend gc",
            Self::Reconcile { .. } => "mend reconcile",
            Self::Verify { .. } => "mend verify",
            Self::Audit { .. } => "mend audit",
            Self::Policy { command } => match command {
                PolicyCommand::New { .. } => "mend policy new",
                PolicyCommand::Inspect { .. } => "mend policy inspect",
                PolicyCommand::Test { .. } => "mend policy test",
                PolicyCommand::Active => "mend policy active",
                PolicyCommand::Replay { .. } => "mend policy replay",
                PolicyCommand::Swap { .. } => "mend policy swap",
                PolicyCommand::Rollback { .. } => "mend policy rollback",
            },
            Self::Serve { .. } => "mend serve",
            Self::Token { command } => match command {
                TokenCommand::New { .. } => "mend token new",
            },
            Self::Request(_) => "mend request",
            Self::Config => "mend config",
            Self::Completions { .. } => "mend completions",
            Self::Man => "mend man",
            Self::Status => "mend status",
            Self::Demo => "mend demo",
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RecoverModeArg {
    Probe,
    RollForward,
    Exclusive,
    Verify,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    Upsert,
    CreateOnly,
}

fn mend_error(error: &anyhow::Error) -> Option<&MendError> {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<MendError>())
}

/// The error and its causes on one line, each cause once: many messages already quote their
/// source, and repeating it would bury the point.
pub fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        // Some causes (a parser's diagnostics) span lines; the error stays on one.
        let text = cause
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line
}

fn config_error(error: &anyhow::Error) -> Option<&ConfigError> {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<ConfigError>())
}

fn request_error(error: &anyhow::Error) -> Option<&request::RequestError> {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<request::RequestError>())
}

pub fn hint(error: &anyhow::Error) -> Option<&'static str> {
    if error.chain().any(|cause| cause.is::<interrupt::Stopped>()) {
        return Some(
            "an operation it had begun is left as an intent: `mend recover DATASET --mode roll-forward` finishes it (a server's supervisor does so by itself)",
        );
    }
    if let Some(failure) = request_error(error) {
        return failure.hint();
    }
    if let Some(error) = config_error(error) {
        return Some(match error {
            ConfigError::MissingFile { .. } => {
                "give an existing file to --config or MEND_CONFIG, or neither to read ./mend.toml if it exists"
            }
            ConfigError::UnknownKey { .. } | ConfigError::MalformedAssignment { .. } => {
                "docs/src/configuration.md lists every setting"
            }
            _ => "fix it where it came from; nothing was opened or written",
        });
    }
    Some(match mend_error(error)? {
        MendError::NotFound {
            kind: mend::EntityKind::Dataset,
            ..
        } => "list datasets with `mend dataset list`, create one with `mend dataset create NAME`",
        // An operation is not a split: its hint names the command that lists a dataset's
        // operations in flight (the intents recovery would look at), not the split listing.
        MendError::NotFound {
            kind: mend::EntityKind::Intent,
            ..
        } => {
            "list the dataset's operations in flight with `mend recover DATASET --mode probe` (it writes nothing)"
        }
        MendError::NotFound { .. } => "list splits with `mend list DATASET`",
        MendError::Unavailable { .. } | MendError::Transient { .. } => {
            "the outcome is unknown; the request is safe to retry"
        }
        // A conflict is a lost race or a gate another holder kept past the timeout (the
        // message names the holder); either way nothing happened.
        MendError::Conflict { .. } => {
            "another writer or operation got there first and nothing happened; retry (if a gate holder is named, once its work or lease ends)"
        }
        MendError::CapabilityMissing { .. } => {
            "use a backend that provides it, or a policy that does not require it"
        }
        _ => return None,
    })
}

/// Input the command line refuses before anything happens (a flag's value, a file it
/// names): exit code 2, like a bad setting or a request the engine finds invalid.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

pub fn exit_code(error: &anyhow::Error) -> u8 {
    if let Some(stopped) = error
        .chain()
        .find_map(|cause| cause.downcast_ref::<interrupt::Stopped>())
    {
        return stopped.exit_code();
    }
    if config_error(error).is_some() || error.chain().any(|cause| cause.is::<BadInput>()) {
        return 2;
    }
    if let Some(failure) = request_error(error) {
        return failure.exit_code();
    }
    // A component that failed to load or check, outside any engine call.
    if error.chain().any(|cause| cause.is::<mend::PolicyError>()) {
        return 6;
    }
    match mend_error(error) {
        None => {
            if error.chain().any(|cause| cause.is::<serde_json::Error>()) {
                2
            } else {
                1
            }
        }
        Some(error) => match error {
            MendError::InvalidArgument { .. } => 2,
            MendError::NotFound { .. } => 3,
            MendError::AlreadyExists { .. }
            | MendError::FailedPrecondition { .. }
            | MendError::Conflict { .. }
            | MendError::RecoveryRequired { .. } => 4,
            MendError::Unavailable { .. } | MendError::Transient { .. } => 5,
            MendError::Policy(_)
            | MendError::PolicyRejected { .. }
            | MendError::CapabilityMissing { .. } => 6,
            _ => 1,
        },
    }
}

/// `mend completions SHELL`: the completion script of every command and flag, on stdout.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    use clap::CommandFactory;
    use std::io::Write;
    // Made whole first: clap_complete panics on a write that fails (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Args::command(), "mend", &mut script);
    std::io::stdout().write_all(&script)?;
    Ok(())
}

/// `mend man`: the manual page, in roff, on stdout: the synopsis, the global flags, and every
/// command with its help (each command's own flags: `mend help COMMAND`).
fn man_page() -> anyhow::Result<()> {
    use clap::CommandFactory;
    use std::io::Write;
    let mut page = Vec::new();
    clap_mangen::Man::new(Args::command()).render(&mut page)?;
    std::io::stdout().write_all(&page)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Args;

    /// Every subcommand, positional argument and flag of the tree, with whether it has help.
    fn walk(command: &clap::Command, path: &str, seen: &mut Vec<(String, bool)>) {
        for arg in command.get_arguments() {
            let has_help = arg.get_help().is_some() || arg.get_long_help().is_some();
            seen.push((format!("{path} {}", arg.get_id()), has_help));
        }
        for subcommand in command.get_subcommands() {
            let path = format!("{path} {}", subcommand.get_name());
            let has_help = subcommand.get_about().is_some();
            seen.push((path.clone(), has_help));
            walk(subcommand, &path, seen);
        }
    }

    #[test]
    fn every_command_argument_and_flag_has_help() {
        let mut command = Args::command();
        // Adds what clap adds at parse time: --help, --version, the help subcommand, and the
        // global flags on every subcommand.
        command.build();
        let mut seen = Vec::new();
        walk(&command, "mend", &mut seen);
        let missing: Vec<&str> = seen
            .iter()
            .filter(|(_, has_help)| !has_help)
            .map(|(path, _)| path.as_str())
            .collect();
        assert!(missing.is_empty(), "no help for: {missing:#?}");
        assert!(seen.len() > 100, "the walk found {} entries", seen.len());
        println!(
            "cli help: {} commands, arguments and flags, each with help",
            seen.len()
        );
    }
}

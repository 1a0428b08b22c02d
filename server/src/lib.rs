//! `mend serve`: the catalog operations and policy administration over an HTTP JSON API.
//!
//! - Every dataset has a [`supervisor`] that resolves crashed operations with
//!   roll-forward sweeps off the request path. A dataset it cannot serve answers 503 with
//!   the reason, while every other dataset keeps serving.
//! - Writes are [admitted](writes) and then run on their own tasks: a client that
//!   disconnects never cancels one, and a graceful shutdown waits for all of them.
//! - Every request is from a principal, and a route serves only the principals whose grants
//!   allow it ([`access`]; the tokens file and its grants are [`auth`]'s): 401 without a
//!   known credential, 403 outside the grants, decided before a body is read or a dataset
//!   looked up. Policy swap and rollback, exclusive recovery and anything that names a file on
//!   the server need `admin`. A server that other machines can reach refuses to start without
//!   a tokens file ([`ServeError::Unprotected`]).
//! - `/healthz` (the process answers), `/readyz` (it serves: started, not shutting down) and
//!   `/metrics` (Prometheus text) sit outside `/v1`; `/v1/openapi.json` is the OpenAPI
//!   document of every route, generated from the code (`openapi.rs`, built from the routes of `routes/`).
//! - Everything a client can make the server hold is bounded ([`ServeLimits`]): connections
//!   and the time their heads, bodies and idle waits take (`connections.rs`, `limits.rs`),
//!   queued writes ([`writes`]), and the files and uploads of admin requests (`routes/policy.rs`). Past
//!   a bound the answer is an immediate refusal in the JSON error form, never a hang.
//!
//! The server follows the deployment's policy registry: a swap or rollback made by another
//! process (`mend policy swap`) is loaded and installed within one supervisor interval.
//!
//! It logs with `tracing` and installs no subscriber: the binary does (`request_span.rs` is
//! the span each request's logs are in). What the binary prints for people when it starts
//! and stops is its own output, not logs.

pub mod access;
mod answers;
pub mod auth;
// Crate-visible for `fuzzing`, which feeds the body parsers arbitrary bytes.
pub(crate) mod body;
mod connections;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod guessing;
mod limits;
pub mod metrics;
mod openapi;
pub mod quotas;
mod request_span;
mod routes;
pub mod secret_files;
pub mod supervisor;
#[cfg(test)]
mod testing;
pub mod tls;
pub mod writes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::TcpListener;
use tokio::sync::watch;

use connections::ConnectionLimits;
pub use limits::{ServeLimits, largest_json_body};
use mend::Engine;
use mend::error::Result;
use mend::model::DatasetConfig;
use mend::runtime::LoadOptions;
use mend::runtime::registry::PolicyRegistry;
use metrics::Metrics;
use supervisor::{SupervisorOptions, Supervisors};
use writes::Writes;

/// How a server runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Who may make requests: the tokens file and the admin token ([`access`]).
    pub credentials: access::Credentials,
    /// Serve a listen address other machines can reach without a tokens file and TLS
    /// (`serve.insecure`): logged at every start.
    pub insecure: bool,
    /// TLS on the listen address ([`tls`]); `None` serves plain HTTP.
    pub tls: Option<Arc<tls::Tls>>,
    /// A second listen address serving `/healthz` and `/readyz` alone, in plain HTTP, for
    /// probes that do not speak TLS or hold a token (`serve.probe_listen`).
    pub probe_listen: Option<SocketAddr>,
    pub supervisor: SupervisorOptions,
    /// How policies named in swap requests are loaded (limits, compiled-component cache).
    pub load: LoadOptions,
    /// The config of a dataset created without one.
    pub dataset_defaults: DatasetConfig,
    pub limits: ServeLimits,
    /// This replica's membership of its fleet; `None` runs it alone (a
    /// [`SoloMembership`](mend::fleet::SoloMembership)), owning every dataset.
    pub membership: Option<Arc<dyn mend::fleet::Membership>>,
}

/// Why the server could not start. Nothing was served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    #[error(
        "address {address} is already in use: another process listens there; stop it or choose another address (serve.listen, --listen)"
    )]
    AddressInUse { address: SocketAddr },
    #[error(
        "mend serve would listen on {address}, which other machines can reach, {missing}: set serve.tokens_file (principals and their grants; `mend token new` makes one) and serve.tls_cert_file with serve.tls_key_file, listen on a loopback address (serve.listen = 127.0.0.1:PORT), or set serve.insecure = true to accept that risk"
    )]
    Unprotected {
        address: SocketAddr,
        /// What is missing, in words.
        missing: &'static str,
    },
    #[error(
        "{setting} is too weak to serve on an address other machines can reach: it counts {bits} bits and {distinct_characters} distinct characters, and needs at least {min_bits} bits and {min_distinct} distinct characters; make one with `mend token new` (its secret counts 420 bits)",
        min_bits = auth::MIN_SECRET_BITS,
        min_distinct = auth::MIN_SECRET_DISTINCT_CHARACTERS
    )]
    WeakSecret {
        setting: &'static str,
        bits: u32,
        distinct_characters: usize,
    },
    #[error("cannot take part in the fleet: {message}")]
    Fleet { message: String },
    #[error(
        "serve.max_json_body_bytes is {cap} bytes, but the largest request that limits.max_stage_batch ({max_stage_batch}) and limits.max_metadata_bytes ({max_metadata_bytes}) allow is {needed} bytes: raise serve.max_json_body_bytes to {needed} or more, or lower those limits"
    )]
    JsonBodyCap {
        cap: usize,
        needed: usize,
        max_stage_batch: usize,
        max_metadata_bytes: usize,
    },
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// What every request handler shares.
#[derive(Debug)]
struct Shared {
    engine: Engine,
    credentials: access::Credentials,
    quotas: quotas::Quotas,
    /// Failed authentications by client address ([`guessing`]).
    guessing: guessing::Guessing,
    registry: PolicyRegistry,
    options: ServeOptions,
    metrics: Arc<Metrics>,
    supervisors: Arc<Supervisors>,
    writes: Arc<Writes>,
    /// False until the first discovery, and again from the start of a shutdown.
    ready: AtomicBool,
    shutting_down: AtomicBool,
    /// Why the last listing of the catalog's datasets failed, if it did.
    discovery_error: std::sync::Mutex<Option<String>>,
}

impl Shared {
    /// The engine, acting for the principal of the request being answered (its audit
    /// records name it); the server's own engine outside a request.
    fn acting_engine(&self) -> Engine {
        match access::answering() {
            Some(answering) => self.engine.acting_as(answering.caller.name()),
            None => self.engine.clone(),
        }
    }

    fn discovery_error(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.discovery_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Where a server listens, once it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listening {
    /// The API's address (the port picked, for a port 0).
    pub address: SocketAddr,
    /// Whether it speaks TLS there (`https://`).
    pub tls: bool,
    /// The probes' plain-HTTP address, if there is one.
    pub probe_address: Option<SocketAddr>,
}

impl Listening {
    /// The API's base URL: `http://ADDRESS` or `https://ADDRESS`.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.address)
    }
}

/// Binds `listen` and serves until `shutdown` completes; then stops accepting, gives the
/// requests being answered until the shutdown deadline, lets every admitted write finish and
/// returns. Fails only to start. Over 100 lines: the server's life in order (bind, start,
/// serve, drain, stop), each step a call; split, the order would be spread over functions.
pub async fn serve(
    engine: Engine,
    options: ServeOptions,
    listen: SocketAddr,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_listening: impl FnOnce(Listening),
) -> Result<(), ServeError> {
    check_protected(
        listen,
        &options.credentials,
        options.tls.is_some(),
        options.insecure,
    )?;
    let (listener, address) = bind(listen).await?;
    // Bound before anything starts, so that a probe address in use fails the start cleanly.
    let probes = match options.probe_listen {
        Some(probe_listen) => Some(bind(probe_listen).await?),
        None => None,
    };
    let connection_limits = ConnectionLimits {
        max_connections: options.limits.max_connections,
        header_read_timeout: options.limits.header_read_timeout,
        idle_timeout: options.limits.idle_timeout,
        shutdown_deadline: options.limits.shutdown_deadline,
    };
    let shutdown_deadline = options.limits.shutdown_deadline;
    let (stop_supervisors, supervisors_stopped) = watch::channel(false);
    let shared = shared_state(engine, options, supervisors_stopped)?;

    let followers = follow(&shared, stop_supervisors.subscribe());
    let rounds = {
        let shared = shared.clone();
        tokio::spawn(shared.supervisors.clone().run(move |round| {
            if round.is_ok() {
                shared.ready.store(
                    !shared.shutting_down.load(Ordering::SeqCst),
                    Ordering::SeqCst,
                );
            }
            let error = round.err();
            if error.is_some() && *shared.discovery_error() != error {
                tracing::warn!(
                    error = %error.as_deref().unwrap_or_default(),
                    "cannot take part in the fleet or find its pending work; the server is not ready until it can"
                );
            }
            *shared.discovery_error() = error;
        }))
    };
    // Outermost, so that the status it records is the one the client gets.
    let router =
        routes::router(shared.clone()).layer(axum::middleware::from_fn(request_span::request_span));
    let probe_address = probes.as_ref().map(|(_, bound)| *bound);
    on_listening(Listening {
        address,
        tls: shared.options.tls.is_some(),
        probe_address,
    });

    let (stop_probes, probes_stopped) = watch::channel(false);
    let probes = probes.map(|(listener, _)| {
        tokio::spawn(serve_probes(
            listener,
            shared.clone(),
            connection_limits,
            probes_stopped,
        ))
    });
    let draining = shared.clone();
    let graceful = async move {
        shutdown.await;
        let _ = stop_probes.send(true);
        tracing::info!(
            admitted_writes = draining.writes.in_flight(),
            "shutting down; the admitted writes finish first"
        );
        draining.shutting_down.store(true, Ordering::SeqCst);
        draining.ready.store(false, Ordering::SeqCst);
    };
    connections::serve_connections(
        listener,
        router,
        connection_limits,
        shared.options.tls.clone(),
        graceful,
    )
    .await;
    if let Some(probes) = probes {
        let _ = probes.await;
    }
    // Requests being answered have finished or were dropped at the deadline; admitted
    // writes, whether or not their clients are still there, run to their end.
    shared.writes.close();
    let _ = stop_supervisors.send(true);
    shared.writes.drained().await;
    // An abort answers before the clean-up of what its operation left (objects, marked rows)
    // is done: given until the shutdown deadline, then left to garbage collection.
    let cleanups = shared.engine.wait_for_cleanups();
    if tokio::time::timeout(shutdown_deadline, cleanups)
        .await
        .is_err()
    {
        tracing::info!(
            "the clean-ups of ended operations did not finish by the shutdown deadline; garbage collection deletes what they leave"
        );
    }
    // The last round ends and the replica leaves the fleet.
    let _ = rounds.await;
    for follower in followers {
        follower.abort();
    }
    Ok(())
}

/// Starts what follows the deployment while the server runs: the policy registry (until
/// `stopped`), and the tokens file and the TLS files when there are some.
fn follow(
    shared: &Arc<Shared>,
    stopped: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut followers = vec![tokio::spawn(watch_deployment(shared.clone(), stopped))];
    if let Some(file) = shared.credentials.tokens_file.clone() {
        followers.push(tokio::spawn(watch_tokens_file(file)));
    }
    if let Some(tls) = shared.options.tls.clone() {
        followers.push(tokio::spawn(watch_tls_files(tls, shared.metrics.clone())));
    }
    followers
}

/// Serves `/healthz` and `/readyz` alone, in plain HTTP, on `listener` until `stopped` says
/// so (`serve.probe_listen`).
async fn serve_probes(
    listener: TcpListener,
    shared: Arc<Shared>,
    limits: ConnectionLimits,
    mut stopped: watch::Receiver<bool>,
) {
    let router =
        routes::probe_router(shared).layer(axum::middleware::from_fn(request_span::request_span));
    let stop = async move {
        let _ = stopped.wait_for(|stopped| *stopped).await;
    };
    connections::serve_connections(listener, router, limits, None, stop).await;
}

/// What every handler shares, with the server's supervisors (stopped when `stopped` says so)
/// and, without a membership in `options`, this replica alone in its fleet.
fn shared_state(
    engine: Engine,
    options: ServeOptions,
    stopped: watch::Receiver<bool>,
) -> Result<Arc<Shared>, ServeError> {
    let (store, prefix) = engine.objects().store();
    let registry = PolicyRegistry::new(store.clone(), prefix.clone());
    let metrics = Arc::new(Metrics::default());
    let writes = Arc::new(Writes::new(
        options.limits.max_queued_writes,
        options.limits.max_queued_writes_per_dataset,
    ));
    let membership = match &options.membership {
        Some(membership) => membership.clone(),
        None => {
            let replica_id = mend::fleet::replica_id(None).map_err(|error| ServeError::Fleet {
                message: error.to_string(),
            })?;
            Arc::new(mend::fleet::SoloMembership::new(
                replica_id,
                mend::fleet::DEFAULT_MEMBER_LEASE,
            ))
        }
    };
    let supervisors = Supervisors::new(
        engine.clone(),
        options.supervisor,
        metrics.clone(),
        writes.clone(),
        membership,
        stopped,
    );
    Ok(Arc::new(Shared {
        engine,
        credentials: options.credentials.clone(),
        quotas: quotas::Quotas::new(options.limits.principal),
        guessing: guessing::Guessing::default(),
        registry,
        options,
        metrics,
        supervisors,
        writes,
        ready: AtomicBool::new(false),
        shutting_down: AtomicBool::new(false),
        discovery_error: std::sync::Mutex::new(None),
    }))
}

/// Listens on `address`; the listener and the address it is bound to (the port picked, for
/// a port 0).
async fn bind(address: SocketAddr) -> Result<(TcpListener, SocketAddr), ServeError> {
    let failed = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::AddrInUse => ServeError::AddressInUse { address },
        _ => ServeError::Listen { address, source },
    };
    let listener = TcpListener::bind(address).await.map_err(failed)?;
    let bound = listener.local_addr().map_err(failed)?;
    Ok((listener, bound))
}

/// Refuses to serve, without a tokens file, an address other machines can reach, unless
/// `insecure` (`serve.insecure`) says to; logs that it does when it does. [`serve`] checks;
/// a binary may check first, before it does anything else (joins a fleet).
pub fn check_protected(
    listen: SocketAddr,
    credentials: &access::Credentials,
    tls: bool,
    insecure: bool,
) -> Result<(), ServeError> {
    if let Some(admin_token) = &credentials.admin_token {
        let strength = auth::SecretStrength::of(admin_token);
        if !strength.is_enough() {
            // A weak secret is refused even with serve.insecure: that setting accepts a
            // server without TLS or tokens, not a guessable admin.
            if !listen.ip().is_loopback() {
                return Err(ServeError::WeakSecret {
                    setting: "serve.admin_token",
                    bits: strength.bits,
                    distinct_characters: strength.distinct_characters,
                });
            }
            tracing::warn!(
                bits = strength.bits,
                "serve.admin_token is weaker than {} bits (or holds fewer than {} distinct \
                 characters): allowed only because the server listens on loopback; make one \
                 with `mend token new`",
                auth::MIN_SECRET_BITS,
                auth::MIN_SECRET_DISTINCT_CHARACTERS
            );
        }
    }
    let missing = match (credentials.anonymous_allowed(), tls) {
        (false, true) => return Ok(()),
        (true, true) => "letting in any client without a token",
        (false, false) => "sending every token in the clear (no TLS)",
        (true, false) => "letting in any client without a token, in the clear (no TLS)",
    };
    if listen.ip().is_loopback() {
        return Ok(());
    }
    if insecure {
        tracing::warn!(
            %listen,
            "serve.insecure: this server is reachable from other machines {missing}"
        );
        return Ok(());
    }
    Err(ServeError::Unprotected {
        address: listen,
        missing,
    })
}

/// Reads the TLS files again every [`TOKENS_FILE_RELOAD_INTERVAL`]; logs each change taken
/// and each one refused (once, until the files change again), and each warning about the
/// files in force ([`tls::TlsWarning`]: a certificate near its end, a key file others may
/// read) at start, at each change taken and when it first applies. Keeps the gauge
/// `mend_tls_certificate_expiry_seconds` on the certificate served.
async fn watch_tls_files(tls: Arc<tls::Tls>, metrics: Arc<Metrics>) {
    let mut last_refusal = None;
    let mut last_warnings = Vec::new();
    // At start, as after a change taken: every warning is logged.
    let mut taken = true;
    loop {
        if taken {
            metrics.tls_certificate_served(tls.validity().not_after);
        }
        let warnings = tls.warnings(rustls_pki_types::UnixTime::now());
        for warning in &warnings {
            if taken || !last_warnings.contains(warning) {
                tracing::warn!("{warning}");
            }
        }
        last_warnings = warnings;
        tokio::time::sleep(TOKENS_FILE_RELOAD_INTERVAL).await;
        let reading = tls.clone();
        let reload =
            tokio::task::spawn_blocking(move || reading.reload(rustls_pki_types::UnixTime::now()));
        let Ok(reload) = reload.await else {
            taken = false;
            continue;
        };
        taken = matches!(reload, tls::TlsReload::Reloaded);
        match reload {
            // The files are those in force again: a refusal after this is a new one.
            tls::TlsReload::Unchanged => last_refusal = None,
            tls::TlsReload::Reloaded => {
                last_refusal = None;
                tracing::info!(
                    cert = %tls.files().cert.display(),
                    "TLS certificate and key reloaded; new connections use them, and open \
                     connections' client certificates are verified again"
                );
            }
            tls::TlsReload::Refused(error) => {
                let message = error.to_string();
                if last_refusal.as_ref() != Some(&message) {
                    tracing::warn!(
                        error = %message,
                        "TLS files refused; the certificate loaded before keeps serving"
                    );
                }
                last_refusal = Some(message);
            }
        }
    }
}

/// How often the tokens file is read again: a principal added or removed takes effect
/// within this long.
pub const TOKENS_FILE_RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Reads the tokens file again every [`TOKENS_FILE_RELOAD_INTERVAL`]; logs each change taken
/// and each one refused (once, until the file changes again).
async fn watch_tokens_file(file: Arc<auth::TokensFile>) {
    let mut last_refusal = None;
    // A file others may read is warned about at start, at each reload, and when its mode
    // changes to allow it.
    let mut last_warning = file.readable_warning();
    if let Some(warning) = &last_warning {
        tracing::warn!("{warning}");
    }
    loop {
        tokio::time::sleep(TOKENS_FILE_RELOAD_INTERVAL).await;
        let reading = file.clone();
        let Ok(reload) = tokio::task::spawn_blocking(move || reading.reload()).await else {
            continue;
        };
        let warning = file.readable_warning();
        if let Some(warning) = &warning
            && (last_warning.as_ref() != Some(warning)
                || matches!(reload, auth::Reload::Reloaded { .. }))
        {
            tracing::warn!("{warning}");
        }
        last_warning = warning;
        match reload {
            auth::Reload::Unchanged => {}
            auth::Reload::Reloaded { principals } => {
                last_refusal = None;
                tracing::info!(
                    path = %file.path().display(),
                    principals,
                    "tokens file reloaded"
                );
            }
            auth::Reload::Refused { error } => {
                let message = error.to_string();
                if last_refusal.as_ref() != Some(&message) {
                    tracing::warn!(
                        path = %file.path().display(),
                        error = %message,
                        "tokens file refused; the principals read before stay in force"
                    );
                }
                last_refusal = Some(message);
            }
        }
    }
}

/// Keeps the active policy current, every interval.
async fn watch_deployment(shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) {
    // Each problem is logged when it starts, not again every interval while it lasts.
    let mut last_registry_error = None;
    loop {
        let followed_now = shared
            .engine
            .follow_policy_registry(&shared.registry, &shared.options.load)
            .await
            .err()
            .map(|error| error.to_string());
        if followed_now.is_some() && followed_now != last_registry_error {
            tracing::warn!(
                error = %followed_now.as_deref().unwrap_or_default(),
                "cannot follow the policy registry; the server keeps its current policy"
            );
        }
        last_registry_error = followed_now;
        tokio::select! {
            _ = tokio::time::sleep(shared.options.supervisor.interval) => {}
            _ = stopped.changed() => return,
        }
    }
}

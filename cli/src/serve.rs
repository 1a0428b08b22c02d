//! `mend serve`: runs the HTTP server until SIGINT or SIGTERM, then shuts down gracefully
//! (no new requests; requests being answered get until the shutdown deadline; admitted writes
//! finish). A server that cannot start (its address in use, or a JSON body cap that cannot
//! hold the largest request its limits allow) exits 2: nothing happened, and
//! retrying the same command will not help. It says when it listens and when it stopped: a
//! line for people on stderr, or with `--json` a JSON object per line on stdout, for a
//! supervisor that needs the address (`--listen 127.0.0.1:0` picks the port).
//!
//! Those two lines are the command's output, not logs: they are written directly, whatever
//! `log.level` and `log.format` say, and exactly as before (tests, benches and scripts find
//! the address in `listening on http://ADDR`). Everything else the server says is a log
//! event (`tracing`).

use anyhow::Context;

use crate::config::Settings;
use mend::Engine;
use mend_server::supervisor::SupervisorOptions;
use mend_server::{ServeLimits, ServeOptions};

use super::BadInput;

pub async fn run(engine: Engine, settings: &Settings, json: bool) -> anyhow::Result<()> {
    let limits = serve_limits(settings);
    // Before the fleet is joined: a server that would refuse requests within every limit as
    // too large does not start.
    limits
        .check_json_body(settings.max_stage_batch.get(), settings.max_metadata_bytes)
        .map_err(|error| BadInput(error.to_string()))?;
    let (credentials, principals) = credentials(settings)?;
    let tls = tls(settings)?;
    // Before the fleet is joined (`serve` checks again, and logs an insecure start).
    if !settings.insecure {
        mend_server::check_protected(settings.listen, &credentials, tls.is_some(), false)
            .map_err(|error| BadInput(error.to_string()))?;
    }
    let replica_id = mend::fleet::replica_id(settings.replica_name.as_deref())
        .map_err(|error| BadInput(error.to_string()))?;
    let membership =
        mend::fleet::open_membership(&settings.catalog, replica_id, settings.member_lease)
            .await
            .with_context(|| format!("join the fleet of catalog {}", settings.catalog))?;
    let options = ServeOptions {
        credentials,
        insecure: settings.insecure,
        tls,
        probe_listen: settings.probe_listen,
        supervisor: SupervisorOptions {
            interval: settings.supervisor_interval,
            max_backoff: settings.supervisor_max_backoff,
            full_scan_every: u32::try_from(settings.supervisor_full_scan_every).unwrap_or(u32::MAX),
        },
        load: settings.load_options(),
        dataset_defaults: settings.dataset_config_defaults(),
        limits,
        membership: Some(membership),
    };
    let listen = settings.listen;
    let catalog = engine.catalog().describe();
    let policy = engine.policy().digest().to_string();
    let admin_token = options.credentials.admin_token.is_some();
    let access = match (principals, admin_token) {
        (Some(principals), true) => {
            format!("{principals} principals from the tokens file, and the admin token")
        }
        (Some(principals), false) => format!("{principals} principals from the tokens file"),
        (None, true) => "requests without a token let in; admin with the admin token".into(),
        (None, false) => "requests without a token let in; no admin token".into(),
    };
    mend_server::serve(engine, options, listen, shutdown_signal(), |listening| {
        let address = listening.address;
        let url = listening.url();
        let probes = listening
            .probe_address
            .map(|probe| format!("; probes on http://{probe}"))
            .unwrap_or_default();
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "event": "listening",
                    "url": url,
                    "address": address.to_string(),
                    "probe_address": listening.probe_address.map(|probe| probe.to_string()),
                    "catalog": catalog,
                    "policy_digest": policy,
                    "admin_token": admin_token,
                    "principals": principals,
                })
            );
        } else {
            eprintln!(
                "mend serve: listening on {url} (catalog {catalog}, policy {policy}; {access}{probes})"
            );
        }
    })
    .await
    .map_err(|error| BadInput(error.to_string()))?;
    if json {
        println!("{}", serde_json::json!({"event": "stopped"}));
    } else {
        eprintln!("mend serve: stopped; every admitted write finished");
    }
    Ok(())
}

/// The server's limits, from the settings (each range-checked when it was read).
fn serve_limits(settings: &Settings) -> ServeLimits {
    ServeLimits {
        max_connections: settings.max_connections,
        header_read_timeout: settings.header_read_timeout,
        body_read_timeout: settings.body_read_timeout,
        idle_timeout: settings.idle_timeout,
        shutdown_deadline: settings.shutdown_deadline,
        max_queued_writes: settings.max_queued_writes,
        max_queued_writes_per_dataset: settings.max_queued_writes_per_dataset,
        max_admin_component_bytes: settings.max_admin_component_bytes,
        max_json_body_bytes: settings.max_json_body_bytes,
        principal: mend_server::quotas::PrincipalLimits {
            // Range-checked to at most 1,000,000 when read.
            requests_per_second: u32::try_from(settings.principal_requests_per_second)
                .unwrap_or(u32::MAX),
            max_writes: settings.principal_max_writes,
        },
    }
}

/// Who may call the server: the principals of the tokens file (read now: a broken file stops
/// the start) and the admin token; and how many principals the file names.
fn credentials(
    settings: &Settings,
) -> anyhow::Result<(mend_server::access::Credentials, Option<usize>)> {
    let tokens_file = match &settings.tokens_file {
        Some(path) => Some(std::sync::Arc::new(
            mend_server::auth::TokensFile::open(path)
                .map_err(|error| BadInput(format!("serve.tokens_file: {error}")))?,
        )),
        None => None,
    };
    let principals = tokens_file.as_ref().map(|file| file.current().len());
    // A settings file holding the admin token is a secret file too: refused if others may
    // write it (they could set their own admin token), warned about if they may read it.
    if settings.admin_token.is_some()
        && let Some(crate::config::Source::File(path)) = settings.source("serve.admin_token")
    {
        const WHAT: &str = "the settings file holding serve.admin_token";
        let exposure = mend_server::secret_files::check(path, WHAT).map_err(BadInput)?;
        if let Some(warning) = mend_server::secret_files::readable_warning(path, WHAT, exposure) {
            tracing::warn!("{warning}");
        }
    }
    Ok((
        mend_server::access::Credentials {
            tokens_file,
            admin_token: settings.admin_token.clone(),
        },
        principals,
    ))
}

/// TLS from the certificate and key files, with the client CA for client certificates; none
/// without them. One of the two files alone is refused, and so are files the server would
/// refuse at reload (a certificate outside its validity, a key file others may write); the
/// warnings about the files taken are the server's to log, at start and at each reload.
fn tls(settings: &Settings) -> anyhow::Result<Option<std::sync::Arc<mend_server::tls::Tls>>> {
    Ok(match (&settings.tls_cert_file, &settings.tls_key_file) {
        (Some(cert), Some(key)) => Some(std::sync::Arc::new(
            mend_server::tls::Tls::open(
                mend_server::tls::TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                    client_ca: settings.tls_client_ca_file.clone(),
                },
                rustls::pki_types::UnixTime::now(),
            )
            .map_err(|error| BadInput(error.to_string()))?,
        )),
        (None, None) if settings.tls_client_ca_file.is_none() => None,
        _ => {
            return Err(BadInput(
                "TLS needs both serve.tls_cert_file and serve.tls_key_file (and \
                 serve.tls_client_ca_file only with them)"
                    .into(),
            )
            .into());
        }
    })
}

/// Completes on the first SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(error) => {
                    tracing::warn!(%error, "cannot watch SIGTERM; stop with Ctrl-C");
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

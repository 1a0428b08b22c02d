//! Connecting: the pool, the durability check that refuses a server which may lose
//! acknowledged commits, and the migrations.

use std::str::FromStr;
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

use crate::error::{MendError, Result};

use super::errors::{connect_error, migrate_error};

use super::{
    ACQUIRE_TIMEOUT, DURABILITY_SETTINGS, MAX_CONNECTIONS, MIGRATOR, PING_IDLE_AFTER,
    PostgresCatalog, PostgresOptions,
};

impl PostgresCatalog {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`) and
    /// brings its schema up to date. Several processes may do this at once: the migrations
    /// run under an advisory lock.
    ///
    /// A server that may lose acknowledged commits is refused: see [`Self::connect_with`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// [`Self::connect`], refusing with `FailedPrecondition` (before any write, migrations
    /// included) a server with `fsync`, `synchronous_commit` or `full_page_writes` off, as
    /// its connections see them, unless `options` accepts the risk.
    pub async fn connect_with(url: &str, catalog_options: PostgresOptions) -> Result<Self> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|error| MendError::invalid(format!("invalid postgres url: {error}")))?
            .application_name("mend");
        let target = format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or_default()
        );
        let pool = match PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .test_before_acquire(false)
            .before_acquire(|connection, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_IDLE_AFTER {
                        connection.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(options.clone())
            .await
        {
            Ok(pool) => pool,
            // The pool retries refused connections until its timeout and then reports only the
            // timeout; one direct attempt tells the operator why.
            Err(sqlx::Error::PoolTimedOut) => {
                let reason = match options.connect().await {
                    Err(reason) => reason,
                    Ok(connection) => {
                        let _ = connection.close().await;
                        sqlx::Error::PoolTimedOut
                    }
                };
                return Err(connect_error(reason, &target));
            }
            Err(error) => return Err(connect_error(error, &target)),
        };
        if !catalog_options.accept_unsafe_durability {
            check_durability(&pool, &target).await?;
        }
        // The migrations run on a connection of their own that asks the server for warnings
        // and errors only (`client_min_messages`). sqlx's `CREATE TABLE IF NOT EXISTS
        // _sqlx_migrations` draws a NOTICE at every start ("relation ... already exists,
        // skipping"), which sqlx logs at INFO, so it reached stderr at every `mend` command,
        // whose output is its own. Only this connection is quieted, and only below WARNING:
        // the pool's connections keep every notice of the catalog's own statements (a filter
        // on sqlx's notice target would have hidden those too), and a migration's WARNING
        // is still logged.
        // (A pool of that one connection: the migrator's future is `Send` only over a pool.)
        let migrating = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(
                options
                    .clone()
                    .options([("client_min_messages", "warning")]),
            )
            .await
            .map_err(|error| connect_error(error, &target))?;
        let migrated = MIGRATOR
            .run(&migrating)
            .await
            .map_err(|error| migrate_error(error, &target));
        migrating.close().await;
        migrated?;
        Ok(Self {
            pool,
            description: format!("postgres://{target}"),
            probe_first: Arc::default(),
        })
    }
}

/// Refuses a server that acknowledges commits it can lose in a crash, naming each setting.
pub(super) async fn check_durability(pool: &PgPool, target: &str) -> Result<()> {
    let mut unsafe_settings = Vec::new();
    for (setting, unsafe_value) in DURABILITY_SETTINGS {
        // SHOW takes no parameters; the names are this module's own constants.
        let value: String = sqlx::query_scalar(&format!("SHOW {setting}"))
            .fetch_one(pool)
            .await
            .map_err(|error| connect_error(error, target))?;
        if value.eq_ignore_ascii_case(unsafe_value) {
            unsafe_settings.push(format!("{setting}={value}"));
        }
    }
    if unsafe_settings.is_empty() {
        return Ok(());
    }
    Err(MendError::failed_precondition(
        format!(
            "postgres://{target} may lose acknowledged commits in a crash ({}), and mend would then lose acknowledged publishes; turn {} on (ALTER SYSTEM SET ... = on, then reload), or, for a throwaway cluster only, accept the risk with postgres.accept_unsafe_durability = true (MEND_POSTGRES_ACCEPT_UNSAFE_DURABILITY=true)",
            unsafe_settings.join(", "),
            if unsafe_settings.len() == 1 {
                "it"
            } else {
                "them"
            }
        ),
        Vec::new(),
    ))
}

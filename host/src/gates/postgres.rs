//! Gates across processes that share a Postgres database: session-level advisory locks, each
//! held on a pooled connection that the guard keeps until it releases.
//!
//! - **Lock key.** A gate's key is [`PostgresGates::lock_key`]: the first 8 bytes (big-endian,
//!   as an `i64`) of the SHA-256 of `mend.gate.v1`, a kind byte and the length-prefixed dataset
//!   id and key. The encoding is injective and the hash fixed, so every process and every
//!   version of mend computes the same key. Two names whose keys collide (odds 2^-64 per pair)
//!   share one lock: that over-serializes and never under-serializes; only a session that held
//!   both at once would wait for itself, until its timeout.
//! - **Waiting.** The lock is taken with `pg_advisory_lock` under `lock_timeout` set to the
//!   time left (`SET LOCAL`, in a transaction, so the pooled connection goes back with the
//!   server's default). Postgres then queues the waiters in FIFO order and wakes the next one
//!   the moment the holder unlocks, with no polling round trips and no starvation. A zero
//!   time left is a `pg_try_advisory_lock`. The timeout bounds the wait for other holders;
//!   the connection needed first comes within the pool's own `acquire_timeout`, even for a
//!   try, which cannot answer without one.
//! - **Reentrancy.** Advisory locks stack within one connection (a second `pg_advisory_lock`
//!   succeeds at once), so they cannot refuse a re-acquisition; the session's bookkeeping in
//!   [`Gates::acquire`] does, before any SQL runs. Each gate also has its own connection.
//! - **Release.** `pg_advisory_unlock`, and the connection goes back to the pool; if the
//!   unlock fails, or an acquisition was cancelled mid-statement, the connection is closed
//!   instead, which ends every lock it held. (A backend blocked in `pg_advisory_lock` whose
//!   client went away stays in the lock's queue until its turn or its `lock_timeout`; given
//!   the lock, it reads the client's goodbye and exits, releasing it at once.)
//! - **Holders.** A wait that runs out names the holder from `pg_locks` joined with
//!   `pg_stat_activity`: the backend pid, its `application_name` (which
//!   [`open_gates_as`](super::open_gates_as) sets to the holding program, pid and host), its
//!   client address and since when it is connected. An advisory lock has no lease: it is held
//!   until released or until its connection closes, which a dying process's does.
//! - **Fencing.** Guards carry epoch 0: counting acquisitions would need a table. Fencing on
//!   Postgres comes from the catalog's publish token.
//! - **Pool.** Every held gate occupies a connection, so a process holds at most
//!   [`PostgresGates::max_held`] gates at once: the pool's `max_connections`,
//!   [`POSTGRES_GATE_CONNECTIONS`](super::POSTGRES_GATE_CONNECTIONS) for
//!   [`open_gates`](super::open_gates). Give the gates their own pool, sized for the gates held
//!   at once: on a pool shared with the catalog, holders could use up the connections the
//!   catalog work under their gates needs. When every connection holds a gate, a further
//!   acquisition waits for one to be released only until its gate timeout (a try not at all),
//!   then fails with `Conflict` saying the pool is exhausted, its size and what to do; it never
//!   waits past its timeout for a connection. When the pool has room, opening a connection
//!   gets the pool's own acquire timeout, even for a try; a database that does not answer
//!   within it is `Unavailable`.

use std::time::Duration;

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres};
use tokio::time::Instant;

use super::{GateLock, GateName, Gates, LockRequest};
use crate::background::BackgroundTasks;
use crate::clock::rfc3339;
use crate::error::{MendError, Result};

/// SQLSTATE of a lock wait that ran past `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";
/// SQLSTATE of a wait that Postgres' deadlock detector aborted.
const DEADLOCK_DETECTED: &str = "40P01";
/// The longest `lock_timeout` Postgres accepts (an `int` of milliseconds).
const MAX_LOCK_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// Gates held as Postgres advisory locks; see the module doc.
#[derive(Debug, Clone)]
pub struct PostgresGates {
    pool: PgPool,
    /// Unlocks of dropped locks still running.
    background: BackgroundTasks,
}

impl PostgresGates {
    /// Gates on the database of `pool`. Its `max_connections` bounds how many gates this
    /// process can hold at once ([`PostgresGates::max_held`]), and its `acquire_timeout` how
    /// long opening a connection may take.
    pub fn new(pool: PgPool) -> Self {
        Self {
            pool,
            background: BackgroundTasks::default(),
        }
    }

    /// How many gates this process can hold at once: one per connection of the pool.
    pub fn max_held(&self) -> u32 {
        self.pool.options().get_max_connections()
    }

    /// A connection to take `request`'s gate on; see Pool in the module doc. While every
    /// connection of the pool holds a gate, waits for one to come free only until the gate's
    /// deadline, and then fails with `Conflict` saying the pool is exhausted; otherwise an idle
    /// or newly opened connection comes within the pool's acquire timeout (even for a try:
    /// opening a connection is not waiting for a holder), or the database is `Unavailable`.
    async fn connection_for(&self, request: &LockRequest<'_>) -> Result<PoolConnection<Postgres>> {
        let name = request.name();
        if let Some(connection) = self.pool.try_acquire() {
            return Ok(connection);
        }
        let exhausted = || self.pool.size() >= self.max_held() && self.pool.num_idle() == 0;
        let connect_allowance = Instant::now() + self.pool.options().get_acquire_timeout();
        let until = if exhausted() {
            request.deadline()
        } else {
            request.deadline().max(connect_allowance)
        };
        match tokio::time::timeout_at(until, self.pool.acquire()).await {
            Ok(Ok(connection)) => Ok(connection),
            Ok(Err(sqlx::Error::PoolTimedOut)) | Err(_) if exhausted() => {
                Err(self.pool_exhausted(request))
            }
            Ok(Err(sqlx::Error::PoolTimedOut)) | Err(_) => Err(MendError::Unavailable {
                message: format!(
                    "no database connection came to take the {name} within {:?}: the \
                     database is unreachable or slow to accept connections",
                    self.pool.options().get_acquire_timeout()
                ),
                source: Some(Box::new(sqlx::Error::PoolTimedOut)),
            }),
            Ok(Err(error)) => Err(database_error(name, "connecting to take", error)),
        }
    }

    /// The error of a wait for a connection that ran out while every connection of the pool
    /// held a gate of this process: certain that nothing was taken, and a retry may succeed
    /// once one of them is released, so `Conflict` (not `Unavailable`, whose outcome is
    /// unknown).
    fn pool_exhausted(&self, request: &LockRequest<'_>) -> MendError {
        MendError::Conflict {
            message: format!(
                "the {} was not taken: the gates' connection pool is exhausted, all {} \
                 connections holding gates of this process (each held gate keeps one), and none \
                 came free within the gate timeout of {:?}; release gates sooner or hold fewer \
                 at once, or give the gates a larger pool (PostgresGates::new)",
                request.name(),
                self.max_held(),
                request.timeout()
            ),
        }
    }

    /// The advisory lock key of a gate; stable across processes, platforms and versions.
    pub fn lock_key(name: &GateName) -> i64 {
        let (kind, dataset_id, key) = match name {
            GateName::Config { dataset_id } => (b'c', dataset_id, None),
            GateName::Dataset { dataset_id } => (b'd', dataset_id, None),
            GateName::Key { dataset_id, key } => (b'k', dataset_id, Some(key)),
        };
        let mut hasher = Sha256::new();
        hasher.update(b"mend.gate.v1");
        hasher.update([kind]);
        for part in [Some(dataset_id), key].into_iter().flatten() {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
        let digest = hasher.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        i64::from_be_bytes(first)
    }
}

#[async_trait]
impl Gates for PostgresGates {
    fn has_fencing_epochs(&self) -> bool {
        false
    }

    async fn wait_for_releases(&self) {
        self.background.idle().await;
    }

    async fn lock(&self, request: &LockRequest<'_>) -> Result<Box<dyn GateLock>> {
        let name = request.name();
        let connection = self.connection_for(request).await?;
        let key = Self::lock_key(name);
        let mut unsettled = Unsettled(Some(connection));
        let locked = loop {
            let wait = request.deadline().saturating_duration_since(Instant::now());
            let attempt = if wait < Duration::from_millis(1) {
                try_lock(unsettled.connection(), key).await
            } else {
                wait_for_lock(unsettled.connection(), key, wait.min(MAX_LOCK_TIMEOUT)).await
            };
            match attempt {
                // `lock_timeout` tops out below the deadline of a very long wait: wait on.
                Ok(false) if wait > MAX_LOCK_TIMEOUT => continue,
                attempt => break attempt,
            }
        };
        match locked {
            Ok(true) => Ok(Box::new(PostgresLock {
                name: name.clone(),
                key,
                connection: Some(unsettled.settle()),
                background: self.background.clone(),
            })),
            Ok(false) => {
                // The statement finished and nothing is held: the connection is clean.
                let mut connection = unsettled.settle();
                Err(match holder(&mut connection, key).await {
                    Some(holder) => request.timed_out_held_by(&holder),
                    None => request.timed_out(),
                })
            }
            Err(error) if has_code(&error, DEADLOCK_DETECTED) => Err(MendError::Conflict {
                message: format!(
                    "postgres aborted the wait for the {name} to break a deadlock (two gate \
                     names share a lock key, or a caller bypassed the lock order)"
                ),
            }),
            // `unsettled` closes the connection: whatever it holds is released with it.
            Err(error) => Err(database_error(name, "taking", error)),
        }
    }
}

/// The session holding an advisory lock, as `pg_stat_activity` shows it.
#[derive(sqlx::FromRow)]
struct LockHolder {
    pid: i32,
    application_name: Option<String>,
    client: Option<String>,
    connected_at_ms: Option<i64>,
}

/// Who holds the advisory lock `key`, as far as `pg_stat_activity` lets this role see; `None`
/// if nobody does any more or the question fails (the error then says less, nothing else).
async fn holder(connection: &mut PgConnection, key: i64) -> Option<String> {
    // A bigint advisory key shows in pg_locks as its high half (classid) and low half
    // (objid), with objsubid 1.
    let holder: LockHolder = sqlx::query_as(
        "SELECT activity.pid, activity.application_name, host(activity.client_addr) AS client, \
                (extract(epoch FROM activity.backend_start) * 1000)::bigint AS connected_at_ms \
         FROM pg_locks AS locks JOIN pg_stat_activity AS activity ON activity.pid = locks.pid \
         WHERE locks.locktype = 'advisory' AND locks.objsubid = 1 AND locks.granted \
           AND ((locks.classid::bigint << 32) | locks.objid::bigint) = $1 \
         LIMIT 1",
    )
    .bind(key)
    .fetch_optional(connection)
    .await
    .ok()??;
    let application = holder
        .application_name
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "no application_name".to_string());
    let client = holder
        .client
        .map_or_else(String::new, |client| format!(", from {client}"));
    let since = holder.connected_at_ms.map_or_else(String::new, |ms| {
        format!(", connected since {}", rfc3339(ms))
    });
    Some(format!(
        "postgres backend pid {} ({application}{client}{since}); an advisory lock has no \
         lease: it is held until its holder releases it or its connection closes",
        holder.pid
    ))
}

/// `pg_try_advisory_lock`: takes the lock if it is free, at once.
async fn try_lock(connection: &mut PgConnection, key: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(key)
        .fetch_one(connection)
        .await
}

/// `pg_advisory_lock` under a `lock_timeout` of `wait`: true when taken, false when the wait
/// ran out.
async fn wait_for_lock(
    connection: &mut PgConnection,
    key: i64,
    wait: Duration,
) -> sqlx::Result<bool> {
    let mut transaction = connection.begin().await?;
    // `is_local = true` is `SET LOCAL`: the timeout ends with the transaction.
    sqlx::query("SELECT set_config('lock_timeout', $1, true)")
        .bind(format!("{}ms", wait.as_millis().max(1)))
        .execute(&mut *transaction)
        .await?;
    match sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(key)
        .execute(&mut *transaction)
        .await
    {
        Ok(_) => {
            // A session-level lock outlives the transaction it was taken in.
            transaction.commit().await?;
            Ok(true)
        }
        Err(error) if has_code(&error, LOCK_NOT_AVAILABLE) => {
            transaction.rollback().await?;
            Ok(false)
        }
        Err(error) => Err(error),
    }
}

fn has_code(error: &sqlx::Error, code: &str) -> bool {
    match error {
        sqlx::Error::Database(database) => database.code().is_some_and(|found| found == code),
        _ => false,
    }
}

fn database_error(name: &GateName, doing: &str, error: sqlx::Error) -> MendError {
    MendError::unavailable(
        format!("{doing} the {name} on postgres failed: {error}"),
        error,
    )
}

/// A connection whose state is unknown while a lock statement runs: if it is dropped there
/// (the statement failed, or the acquisition was cancelled), it is closed, which releases any
/// lock it may have taken, rather than going back to the pool holding one.
struct Unsettled(Option<PoolConnection<Postgres>>);

impl Unsettled {
    fn connection(&mut self) -> &mut PgConnection {
        self.0.as_mut().expect("a connection until settled")
    }

    fn settle(mut self) -> PoolConnection<Postgres> {
        self.0.take().expect("a connection until settled")
    }
}

impl Drop for Unsettled {
    fn drop(&mut self) {
        if let Some(connection) = self.0.take() {
            close_now(connection);
        }
    }
}

/// Closes a connection without waiting: gracefully in the background when a runtime is there,
/// else by dropping its socket. Either way the server ends its session and its locks.
fn close_now(mut connection: PoolConnection<Postgres>) {
    if tokio::runtime::Handle::try_current().is_ok() {
        connection.close_on_drop();
        drop(connection);
    } else {
        drop(connection.detach());
    }
}

/// A held advisory lock and the connection that holds it.
#[derive(Debug)]
struct PostgresLock {
    name: GateName,
    key: i64,
    /// `None` once released.
    connection: Option<PoolConnection<Postgres>>,
    background: BackgroundTasks,
}

/// Unlocks and returns the connection to the pool, or closes it if the unlock did not work or
/// did not finish (this future was dropped).
async fn unlock(name: &GateName, key: i64, connection: PoolConnection<Postgres>) -> Result<()> {
    let mut unsettled = Unsettled(Some(connection));
    let unlocked: sqlx::Result<bool> = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
        .bind(key)
        .fetch_one(unsettled.connection())
        .await;
    match unlocked {
        // Back to the pool, holding nothing.
        Ok(true) => {
            drop(unsettled.settle());
            Ok(())
        }
        // Not held by this connection, which should not happen; `unsettled` closes it, which
        // is safe either way.
        Ok(false) => Ok(()),
        Err(error) => Err(MendError::unavailable(
            format!(
                "releasing the {name} on postgres failed ({error}); its connection is closed, \
                 and the server drops the lock when it notices"
            ),
            error,
        )),
    }
}

#[async_trait]
impl GateLock for PostgresLock {
    fn fencing_epoch(&self) -> u64 {
        0
    }

    async fn release(mut self: Box<Self>) -> Result<()> {
        let connection = self
            .connection
            .take()
            .expect("a lock holds its connection until released");
        unlock(&self.name, self.key, connection).await
    }
}

impl Drop for PostgresLock {
    fn drop(&mut self) {
        let Some(connection) = self.connection.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let (name, key) = (self.name.clone(), self.key);
                self.background.spawn(&runtime, async move {
                    let _ = unlock(&name, key, connection).await;
                });
            }
            // No runtime to unlock on: closing the socket ends the session and its locks.
            Err(_) => drop(connection.detach()),
        }
    }
}

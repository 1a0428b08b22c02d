//! Gates: named, non-reentrant locks that serialize the writers and recoverers of a dataset,
//! within one process and across processes.
//!
//! - **Names and order.** A [`GateName`] is the config gate of a dataset, its dataset gate, or
//!   one of its keyed gates (one per split, per source, ...). There is one global acquisition
//!   order, by kind first: every config gate, then every dataset gate, then every keyed gate;
//!   within a kind by dataset id, then by key. (A snapshot lock comes last of all; it is
//!   in-memory only and lives with the live handles, not here.)
//! - **Sessions.** A caller is a [`GateSession`], one per task or operation. A session takes
//!   gates only in that order: asking for a gate it holds, or for one that sorts before a gate
//!   it holds, fails at once with `FailedPrecondition` instead of deadlocking. Several gates
//!   are asked for together as a [`GateSet`], which [`Gates::acquire`] takes in order.
//! - **Waiting.** Every acquisition has a timeout; when it runs out the call fails with
//!   `Conflict` and the session holds none of the set (a zero timeout is a try).
//! - **Release.** A [`GateGuard`] (or a [`HeldGates`] of several) releases its gate when
//!   dropped, best-effort and in the background; `release().await` does it now and says how
//!   it went. A process about to exit (cancelled by a signal, or after a panic unwound through
//!   its guards) awaits [`Gates::wait_for_releases`] first, so that those background releases
//!   land instead of leaving leases to run out. A process that dies without that still leaves
//!   no gate held for ever: a lease expires, a Postgres session ends with its connection.
//! - **Renewal.** A lease (object-store gates) is renewed in the background, every third of
//!   its duration, by a task the lock owns for as long as the guard lives; the release (or
//!   the drop) stops it before writing the release marker. Nobody has to call
//!   [`GateGuard::renew`]; it renews at once. A renewal the store does not answer is tried
//!   again sooner, until the lease runs out.
//! - **Lost holds.** A hold is lost when a renewal finds a newer epoch of the gate (it names
//!   its holder) or lands only after the lease ran out, and when the lease has run out by this
//!   process's clock with no renewal landed. [`GateGuard::check_held`] (and
//!   [`HeldGates::check_held`], [`ExclusivePermit::check_held`], or a [`Hold`] cloned off the
//!   guard) says so with no IO: `Conflict` naming the gate, its epoch and, where a renewal
//!   found out, who took it over. Work under a gate calls it before each write; the engine
//!   does before every durable write of gated work (gc, reconcile, recovery, config apply).
//!   That is a check just before the write, not a fence at it: a process that stalls between
//!   the check and the write (longer than the lease and the skew allowance) can still make
//!   that one write. What refuses a stale write at the write itself is the catalog: a publish
//!   carries the dataset's publish token and its fencing epoch as read when the work began,
//!   which exclusive recovery bumps (see [`ExclusivePermit`]); gc's marks and row deletes are
//!   conditional on the rows' states. No catalog write carries a gate's own epoch, so two
//!   holders of one dataset gate (one of them stale) are kept apart by the check alone.
//!   Holds that do not expire (in-process, Postgres) never report lost.
//! - **Holders.** A gate held by someone else at the deadline is a `Conflict` that names the
//!   holder where the implementation can tell: the process (command, pid, host) and when its
//!   lease ends for object-store leases, the backend's pid and application name for Postgres.
//! - **Fencing.** A guard carries the gate's fencing epoch, which grows with every acquisition
//!   of that gate where the implementation can count ([`Gates::has_fencing_epochs`]). An
//!   expired lease can make two holders believe they hold one gate; the epoch is what tells
//!   the stale one, at its next renewal, that it was superseded.
//!
//! | implementation       | across                       | waiting                       | fencing epoch         | held until                                  |
//! |----------------------|------------------------------|-------------------------------|-----------------------|---------------------------------------------|
//! | [`InProcessGates`]   | the tasks of one process     | tokio mutex, FIFO             | yes                   | released                                    |
//! | [`PostgresGates`]    | processes sharing a database | advisory lock, `lock_timeout` | no: the publish token | released, or its connection closes; one connection each, so at most the pool's size held at once ([`POSTGRES_GATE_CONNECTIONS`] for [`open_gates`]) |
//! | [`ObjectStoreGates`] | processes sharing a store    | leases, polled                | yes                   | released, or its lease runs out: renewed in the background while the guard lives, lost if a renewal cannot land in time |
//!
//! Errors: re-acquiring or acquiring out of order is a bug in the caller, not a state that
//! retrying fixes, so it is `FailedPrecondition` (not retryable, nothing happened) naming the
//! gate. A timeout is `Conflict`: another session holds the gate, nothing was taken, and a
//! retry may succeed; so is a Postgres gates' pool with every connection holding a gate
//! past the timeout, and a lost hold (the refused write did not happen, and running the work
//! again waits for the gate). A store or database that does not answer is `Unavailable`.

mod hold;
mod in_process;
mod object_store;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::error::{MendError, Result};
use crate::model::TimestampMs;

pub use self::hold::{Hold, Holds};
pub use self::in_process::InProcessGates;
pub use self::object_store::{DEFAULT_MAX_CLOCK_SKEW, DEFAULT_POLL_INTERVAL, ObjectStoreGates};
#[cfg(feature = "postgres")]
pub use self::postgres::PostgresGates;

/// How many gates one process can hold at once on [`open_gates`]'s Postgres gates: the size of
/// their pool, since each held gate keeps a connection. One more waits for one of them to be
/// released until its gate timeout, then fails with `Conflict` (see [`PostgresGates`]).
pub const POSTGRES_GATE_CONNECTIONS: u32 = 8;

/// How long [`open_gates`]'s Postgres gates may take to open a connection.
#[cfg(feature = "postgres")]
const POSTGRES_GATE_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Advisory-lock gates on a pool of their own, its connections named `holder`.
#[cfg(feature = "postgres")]
async fn postgres_gates(catalog_url: &str, holder: &str) -> Result<Arc<dyn Gates>> {
    let options: sqlx::postgres::PgConnectOptions = catalog_url
        .parse()
        .map_err(|error| MendError::unavailable("parse the gates' database URL", error))?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(POSTGRES_GATE_CONNECTIONS)
        .acquire_timeout(POSTGRES_GATE_CONNECT_TIMEOUT)
        .connect_with(options.application_name(holder))
        .await
        .map_err(|error| MendError::unavailable("connect the gates' pool", error))?;
    Ok(Arc::new(PostgresGates::new(pool)))
}

#[cfg(not(feature = "postgres"))]
async fn postgres_gates(_catalog_url: &str, _holder: &str) -> Result<Arc<dyn Gates>> {
    Err(crate::catalog::no_postgres_backend())
}

/// How long a lease of [`open_gates`]'s object-store gates lasts.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(60);

/// Gates for every process sharing the catalog at `catalog_url`: Postgres advisory locks on a
/// pool of their own for a Postgres catalog (each held gate pins a connection, which must not
/// starve the catalog), leases beside the catalog's datasets for an object-store one, and in-process
/// gates for `memory://`, which no other process can see anyway.
pub async fn open_gates(catalog_url: &str) -> Result<Arc<dyn Gates>> {
    open_gates_as(catalog_url, "mend", DEFAULT_LEASE_DURATION).await
}

/// [`open_gates`], naming the holder `program` (such as `mend gc`) to whoever finds a gate
/// of this process held: in object-store leases, and as the Postgres `application_name` of
/// the gates' connections. [`holder_description`] adds the pid and the host. An object-store
/// gate's lease lasts `lease_duration` unless renewed: a process that dies holding a gate keeps
/// it from the others that long (Postgres and in-process gates end with their holder).
pub async fn open_gates_as(
    catalog_url: &str,
    program: &str,
    lease_duration: Duration,
) -> Result<Arc<dyn Gates>> {
    let holder = holder_description(program);
    if crate::catalog::is_postgres_url(catalog_url) {
        return postgres_gates(catalog_url, &holder).await;
    }
    if catalog_url.starts_with("memory://") {
        return Ok(Arc::new(InProcessGates::new()));
    }
    let (store, prefix) = crate::catalog::object_store::open_store(catalog_url)?;
    Ok(Arc::new(
        ObjectStoreGates::new(
            store,
            prefix,
            lease_duration,
            Arc::new(crate::clock::SystemClock),
        )
        .with_holder(&holder),
    ))
}

/// `program (pid N on HOST)`: this process, as a gate's holder is named to the others. The
/// host comes from the kernel on Linux, else from `HOSTNAME` or `COMPUTERNAME`, and is left
/// out when none says.
pub fn holder_description(program: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|host| host.trim().to_string())
        .filter(|host| !host.is_empty());
    let pid = std::process::id();
    match host {
        Some(host) => format!("{program} (pid {pid} on {host})"),
        None => format!("{program} (pid {pid})"),
    }
}

/// The name of one gate. The derived order *is* the global lock order: variants first, in
/// declaration order, then fields in declaration order. Do not reorder them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GateName {
    /// The config gate of a dataset: staging and promoting a config.
    Config {
        /// The dataset.
        dataset_id: String,
    },
    /// The dataset gate: the writers and recoverers of a dataset's catalog state.
    Dataset {
        /// The dataset.
        dataset_id: String,
    },
    /// A keyed gate of a dataset, such as one per split or per source.
    Key {
        /// The dataset.
        dataset_id: String,
        /// What the gate guards within it.
        key: String,
    },
}

impl GateName {
    /// The config gate of `dataset_id`.
    pub fn config(dataset_id: impl Into<String>) -> Self {
        Self::Config {
            dataset_id: dataset_id.into(),
        }
    }

    /// The dataset gate of `dataset_id`.
    pub fn dataset(dataset_id: impl Into<String>) -> Self {
        Self::Dataset {
            dataset_id: dataset_id.into(),
        }
    }

    /// The gate of `key` within `dataset_id`.
    pub fn key(dataset_id: impl Into<String>, key: impl Into<String>) -> Self {
        Self::Key {
            dataset_id: dataset_id.into(),
            key: key.into(),
        }
    }

    /// The dataset the gate belongs to.
    pub fn dataset_id(&self) -> &str {
        match self {
            Self::Config { dataset_id }
            | Self::Dataset { dataset_id }
            | Self::Key { dataset_id, .. } => dataset_id,
        }
    }

    fn check(&self) -> Result<()> {
        if self.dataset_id().is_empty() {
            return Err(MendError::invalid(format!(
                "{self} names no dataset; a gate belongs to a dataset"
            )));
        }
        if let Self::Key { key, .. } = self
            && key.is_empty()
        {
            return Err(MendError::invalid(format!("{self} has an empty key")));
        }
        Ok(())
    }
}

impl fmt::Display for GateName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config { dataset_id } => write!(f, "config gate of dataset {dataset_id:?}"),
            Self::Dataset { dataset_id } => write!(f, "dataset gate of dataset {dataset_id:?}"),
            Self::Key { dataset_id, key } => {
                write!(f, "gate {key:?} of dataset {dataset_id:?}")
            }
        }
    }
}

/// Gates asked for together: sorted in the lock order, without duplicates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateSet(BTreeSet<GateName>);

impl GateSet {
    /// The gates `names`, in lock order, each once.
    pub fn new(names: impl IntoIterator<Item = GateName>) -> Self {
        Self(names.into_iter().collect())
    }

    /// The set with `name` added.
    pub fn with(mut self, name: GateName) -> Self {
        self.0.insert(name);
        self
    }

    /// The names in acquisition order.
    pub fn iter(&self) -> impl Iterator<Item = &GateName> {
        self.0.iter()
    }

    /// How many gates the set holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set holds no gate.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<GateName> for GateSet {
    fn from_iter<I: IntoIterator<Item = GateName>>(names: I) -> Self {
        Self::new(names)
    }
}

impl From<GateName> for GateSet {
    fn from(name: GateName) -> Self {
        Self::new([name])
    }
}

/// One caller of the gates: a task or an operation. It knows which gates it holds (or is
/// taking), which is what makes re-acquisition and out-of-order acquisition fail at once.
/// Implementations cannot tell this themselves: Postgres advisory locks, for one, are
/// reentrant within a connection.
///
/// Not `Clone`: a session is one line of work. Two tasks sharing one would still be refused
/// rather than deadlock, because a gate counts as held from the moment it is asked for.
#[derive(Debug)]
pub struct GateSession {
    state: Arc<SessionState>,
}

#[derive(Debug)]
struct SessionState {
    id: String,
    /// Gates held, or being taken, by this session. A std mutex: only held to check and
    /// update the set, never across an await.
    held: Mutex<BTreeSet<GateName>>,
}

impl GateSession {
    /// A session with a fresh random id.
    pub fn new() -> Self {
        Self::with_id(crate::ambient::uuid_v4().to_string())
    }

    /// A session named after the operation it serves, for leases and error messages. Ids need
    /// not be unique; nothing but diagnostics reads them.
    pub fn with_id(id: impl Into<String>) -> Self {
        Self {
            state: Arc::new(SessionState {
                id: id.into(),
                held: Mutex::new(BTreeSet::new()),
            }),
        }
    }

    /// The session's id, unique per process and session; holders are named by it.
    pub fn id(&self) -> &str {
        &self.state.id
    }

    /// The gates this session holds or is taking, in lock order.
    pub fn held(&self) -> Vec<GateName> {
        self.state.held().iter().cloned().collect()
    }

    /// Marks every gate of `gates` as held by this session, or fails without marking any if
    /// one is held already or sorts before one that is.
    fn reserve(&self, gates: &GateSet) -> Result<Reservation> {
        let mut held = self.state.held();
        if let Some(name) = gates.iter().find(|name| held.contains(*name)) {
            return Err(MendError::failed_precondition(
                format!(
                    "session {} already holds the {name}; gates are not reentrant, so use the \
                     guard it holds",
                    self.state.id
                ),
                vec![name.to_string()],
            ));
        }
        if let (Some(last_held), Some(first_asked)) = (held.last(), gates.iter().next())
            && first_asked < last_held
        {
            return Err(MendError::failed_precondition(
                format!(
                    "session {} holds the {last_held} and asks for the {first_asked}, which \
                     comes before it in the lock order (config gates, dataset gates, keyed \
                     gates, each by dataset and key); waiting there could deadlock: take both \
                     in one set, or release the later one first",
                    self.state.id
                ),
                vec![first_asked.to_string()],
            ));
        }
        held.extend(gates.iter().cloned());
        Ok(Reservation {
            session: Arc::clone(&self.state),
            pending: gates.0.clone(),
        })
    }
}

impl Default for GateSession {
    fn default() -> Self {
        Self::new()
    }
}

impl SessionState {
    fn held(&self) -> MutexGuard<'_, BTreeSet<GateName>> {
        // The set is updated in single calls that cannot panic half-way, so a poisoned lock
        // still guards a consistent set.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn forget(&self, name: &GateName) {
        self.held().remove(name);
    }
}

/// Gates a session has asked for and not yet been handed a guard for; dropping it (the
/// acquisition failed or was cancelled) takes them off the session.
struct Reservation {
    session: Arc<SessionState>,
    pending: BTreeSet<GateName>,
}

impl Reservation {
    fn hand_over(&mut self, name: &GateName) -> Arc<SessionState> {
        self.pending.remove(name);
        Arc::clone(&self.session)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut held = self.session.held();
        for name in &self.pending {
            held.remove(name);
        }
    }
}

/// One gate being taken, as an implementation sees it. Only [`Gates::acquire`] makes one, after
/// the session's bookkeeping has passed.
#[derive(Debug)]
pub struct LockRequest<'a> {
    name: &'a GateName,
    session_id: &'a str,
    timeout: Duration,
    deadline: Instant,
}

impl LockRequest<'_> {
    /// The gate asked for.
    pub fn name(&self) -> &GateName {
        self.name
    }

    /// The session asking.
    pub fn session_id(&self) -> &str {
        self.session_id
    }

    /// When to give up waiting: the timeout of the whole set, counted from its start.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The timeout of the whole set, for error messages.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The error for a gate still held by someone else at the deadline, when the
    /// implementation cannot tell who.
    pub fn timed_out(&self) -> MendError {
        MendError::Conflict {
            message: format!(
                "the {} is held by another session; gave up after waiting {:?}",
                self.name, self.timeout
            ),
        }
    }

    /// The error for a gate still held at the deadline by `holder`, a description of who
    /// holds it and until when.
    pub fn timed_out_held_by(&self, holder: &str) -> MendError {
        MendError::Conflict {
            message: format!(
                "the {} is held by {holder}; gave up after waiting {:?}",
                self.name, self.timeout
            ),
        }
    }
}

/// One gate as an implementation holds it. Dropping it releases the gate best-effort (in a
/// background task where that takes IO); [`GateLock::release`] releases it now.
#[async_trait]
pub trait GateLock: Send + Sync + fmt::Debug {
    /// The gate's fencing epoch at this acquisition; 0 where the implementation has none.
    fn fencing_epoch(&self) -> u64;

    /// When the hold ends unless renewed (lease-based implementations only).
    fn expires_at_ms(&self) -> Option<TimestampMs> {
        None
    }

    /// Whether the hold still stands, shared with whatever renews it (lease-based
    /// implementations); `None` for holds that last until released, which
    /// [`Gates::acquire`] then gives a [`Hold`] that never runs out.
    fn hold(&self) -> Option<Hold> {
        None
    }

    /// Extends a lease; holds that never expire have nothing to do.
    async fn renew(&mut self) -> Result<()> {
        Ok(())
    }

    /// Gives the gate up. A gate whose holder died is released by its lease or connection instead.
    async fn release(self: Box<Self>) -> Result<()>;
}

/// An implementation of the gates. Callers use [`Gates::acquire`] and
/// [`Gates::acquire_one`]; implementations provide [`Gates::lock`].
#[async_trait]
pub trait Gates: Send + Sync + fmt::Debug {
    /// Whether guards carry fencing epochs that grow with every acquisition of a gate.
    fn has_fencing_epochs(&self) -> bool;

    /// Takes one gate, waiting until the request's deadline, then failing with
    /// [`LockRequest::timed_out`]. The session's bookkeeping is done already: this is never
    /// asked for a gate the session holds. Must be cancel-safe: dropping the future leaves
    /// the gate free (at the latest once a lease expires).
    async fn lock(&self, request: &LockRequest<'_>) -> Result<Box<dyn GateLock>>;

    /// Waits until every release that a dropped guard started in the background has landed
    /// or failed. A process calls it before exiting, since a background task does not outlive
    /// the runtime it runs on. Implementations that release synchronously have nothing to wait
    /// for.
    async fn wait_for_releases(&self) {}

    /// Takes every gate of `gates` for `session`, in lock order, waiting at most `timeout` in
    /// all. On any error the session holds none of them: those already taken are released
    /// before this returns. Not meant to be overridden.
    async fn acquire(
        &self,
        session: &GateSession,
        gates: &GateSet,
        timeout: Duration,
    ) -> Result<HeldGates> {
        for name in gates.iter() {
            name.check()?;
        }
        let deadline = deadline_after(timeout);
        let mut reservation = session.reserve(gates)?;
        let mut held = HeldGates::default();
        for name in gates.iter() {
            let request = LockRequest {
                name,
                session_id: session.id(),
                timeout,
                deadline,
            };
            match self.lock(&request).await {
                Ok(lock) => held.guards.push(GateGuard {
                    name: name.clone(),
                    hold: lock
                        .hold()
                        .unwrap_or_else(|| Hold::lasting(name.clone(), lock.fencing_epoch())),
                    lock: Some(lock),
                    session: reservation.hand_over(name),
                }),
                Err(error) => {
                    // A failed release still ends the hold: the connection is closed or the
                    // lease expires. The error that stopped the acquisition is the one to
                    // report.
                    let _ = held.release().await;
                    return Err(error);
                }
            }
        }
        Ok(held)
    }

    /// Takes one gate; see [`Gates::acquire`].
    async fn acquire_one(
        &self,
        session: &GateSession,
        name: GateName,
        timeout: Duration,
    ) -> Result<GateGuard> {
        let held = self.acquire(session, &GateSet::from(name), timeout).await?;
        let mut guards = held.into_guards();
        Ok(guards.pop().expect("a set of one gate yields one guard"))
    }
}

/// `now + timeout`, or a century away for timeouts too long to add (`Duration::MAX`).
fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// One held gate. Dropping it releases the gate (in the background where that takes IO);
/// [`GateGuard::release`] releases it now.
#[derive(Debug)]
pub struct GateGuard {
    name: GateName,
    /// Whether the hold still stands; clones of it outlive the guard.
    hold: Hold,
    /// `None` only once released.
    lock: Option<Box<dyn GateLock>>,
    session: Arc<SessionState>,
}

impl GateGuard {
    /// The gate this guard holds.
    pub fn name(&self) -> &GateName {
        &self.name
    }

    /// The gate's fencing epoch at this acquisition: higher than that of every earlier holder
    /// of the gate, where [`Gates::has_fencing_epochs`]; 0 otherwise.
    pub fn fencing_epoch(&self) -> u64 {
        self.lock().fencing_epoch()
    }

    /// When the hold ends unless renewed, for lease-based gates; `None` when it lasts until
    /// released.
    pub fn expires_at_ms(&self) -> Option<TimestampMs> {
        self.lock().expires_at_ms()
    }

    /// Whether this guard still holds its gate: `Conflict` naming the gate, its epoch and,
    /// where known, who took it over, once a renewal found the lease lost or the lease ran
    /// out by this process's clock. Cheap (no IO): call it before each write made under the
    /// gate. Holds that never expire (in-process, Postgres) always pass.
    pub fn check_held(&self) -> Result<()> {
        self.hold.check()
    }

    /// The guard's [`Hold`], to check from code that does not own the guard.
    pub fn hold(&self) -> Hold {
        self.hold.clone()
    }

    /// Extends a lease before it expires; a no-op for gates that do not expire. Object-store
    /// leases are renewed in the background while the guard lives, so nobody needs to call
    /// this; it renews now. An error means the hold may be lost: stop working under the gate.
    pub async fn renew(&mut self) -> Result<()> {
        self.lock
            .as_mut()
            .expect("a guard holds its lock until released")
            .renew()
            .await
    }

    /// Releases the gate now. An error says the release could not be confirmed; the hold
    /// still ends, when the connection closes or the lease expires.
    pub async fn release(mut self) -> Result<()> {
        let lock = self
            .lock
            .take()
            .expect("a guard holds its lock until released");
        lock.release().await
        // Dropping `self` now takes the gate off the session, after the release.
    }

    fn lock(&self) -> &dyn GateLock {
        self.lock
            .as_deref()
            .expect("a guard holds its lock until released")
    }
}

impl Drop for GateGuard {
    fn drop(&mut self) {
        // The lock first: it releases (or starts releasing) the gate before the session may
        // ask for it again.
        drop(self.lock.take());
        self.session.forget(&self.name);
    }
}

/// Gates held together, in lock order. Dropping it releases them in reverse order.
#[derive(Debug, Default)]
pub struct HeldGates {
    guards: Vec<GateGuard>,
}

impl HeldGates {
    /// The guards in lock order.
    pub fn guards(&self) -> &[GateGuard] {
        &self.guards
    }

    /// The guard of `name`, if it is held here.
    pub fn guard(&self, name: &GateName) -> Option<&GateGuard> {
        self.guards
            .binary_search_by(|guard| guard.name.cmp(name))
            .ok()
            .map(|index| &self.guards[index])
    }

    /// The fencing epoch `name` was acquired at, if it is held here.
    pub fn fencing_epoch(&self, name: &GateName) -> Option<u64> {
        self.guard(name).map(GateGuard::fencing_epoch)
    }

    /// Whether every gate here is still held; the first that is not, as
    /// [`GateGuard::check_held`] says it.
    pub fn check_held(&self) -> Result<()> {
        self.guards.iter().try_for_each(GateGuard::check_held)
    }

    /// The [`Hold`]s of every gate here, to check from code that does not own the guards.
    pub fn holds(&self) -> Holds {
        Holds(self.guards.iter().map(GateGuard::hold).collect())
    }

    /// The guards, to release them one by one.
    pub fn into_guards(mut self) -> Vec<GateGuard> {
        std::mem::take(&mut self.guards)
    }

    /// Renews every lease; stops at the first error.
    pub async fn renew(&mut self) -> Result<()> {
        for guard in &mut self.guards {
            guard.renew().await?;
        }
        Ok(())
    }

    /// Releases every gate now, in reverse order; the first error, if any, after trying all.
    pub async fn release(mut self) -> Result<()> {
        let mut outcome = Ok(());
        while let Some(guard) = self.guards.pop() {
            let released = guard.release().await;
            if outcome.is_ok() {
                outcome = released;
            }
        }
        outcome
    }
}

impl Drop for HeldGates {
    fn drop(&mut self) {
        while let Some(guard) = self.guards.pop() {
            drop(guard);
        }
    }
}

/// The permit of exclusive recovery: the config gate and the dataset gate of one dataset,
/// taken in order, and so a fencing epoch of the dataset gate newer than any earlier holder's.
///
/// "Every gate of the dataset" means these two. Config changes hold the config gate, and every
/// writer and recoverer of the dataset's catalog state (commit, merge, GC, reconcile, and
/// recovery in any mode) holds the dataset gate, so the permit waits for all of them and keeps
/// them out. Keyed gates are not taken: the set of keys in use cannot be listed on every
/// implementation (a Postgres advisory lock key is a hash), and work under a keyed gate alone
/// does not reach the dataset's published state without publishing. Such work is fenced
/// instead of waited for: exclusive recovery bumps the dataset's fencing token (the publish
/// token, or this permit's epoch), so a keyed writer that started before the permit cannot
/// publish after it.
#[derive(Debug)]
pub struct ExclusivePermit {
    dataset_id: String,
    gates: HeldGates,
}

impl ExclusivePermit {
    /// Takes the config and dataset gates of `dataset_id`, in lock order, within `timeout`.
    pub async fn acquire(
        gates: &(impl Gates + ?Sized),
        session: &GateSession,
        dataset_id: &str,
        timeout: Duration,
    ) -> Result<Self> {
        let set = GateSet::new([GateName::config(dataset_id), GateName::dataset(dataset_id)]);
        Ok(Self {
            dataset_id: dataset_id.to_string(),
            gates: gates.acquire(session, &set, timeout).await?,
        })
    }

    /// The dataset the permit covers.
    pub fn dataset_id(&self) -> &str {
        &self.dataset_id
    }

    /// The dataset gate's fencing epoch (0 where the implementation has none).
    pub fn fencing_epoch(&self) -> u64 {
        self.gates
            .fencing_epoch(&GateName::dataset(&self.dataset_id))
            .expect("a permit holds the dataset gate")
    }

    /// The gates the permit holds.
    pub fn gates(&self) -> &HeldGates {
        &self.gates
    }

    /// Whether both gates are still held; see [`GateGuard::check_held`].
    pub fn check_held(&self) -> Result<()> {
        self.gates.check_held()
    }

    /// The [`Hold`]s of both gates.
    pub fn holds(&self) -> Holds {
        self.gates.holds()
    }

    /// Extends the leases of the permit's gates now (object-store leases, which are renewed
    /// in the background anyway); a no-op for the others.
    pub async fn renew(&mut self) -> Result<()> {
        self.gates.renew().await
    }

    /// Releases both gates.
    pub async fn release(self) -> Result<()> {
        self.gates.release().await
    }
}

//! Gates across processes that share an object store: leases with fencing epochs, written only
//! with put-if-absent. No file is ever overwritten, so this works on any store that supports
//! `PutMode::Create` (a local directory, memory, S3-compatible).
//!
//! Layout under the prefix, one directory per gate:
//!
//! ```text
//! datasets/{dataset_id}/gates/config/                     the config gate
//! datasets/{dataset_id}/gates/dataset/                    the dataset gate
//! datasets/{dataset_id}/gates/keys/{key}/                 a keyed gate
//!     {epoch:020}.json                                    the lease of one acquisition
//!     {epoch:020}.renewal-{expires_at_ms:020}.json        a renewal of that lease
//!     {epoch:020}.released.json                           its holder let it go
//! ```
//!
//! - **Acquire.** List the gate's directory and find the newest epoch. The gate is free if
//!   there is none, if it is released, or if its lease (with its latest renewal) has expired
//!   by this process's clock, plus the clock-skew allowance. Then write the next epoch's
//!   lease with put-if-absent: winning the put (and a listing after it that shows no newer
//!   epoch, see Epochs) is taking the gate; losing it means another session did, and the
//!   wait goes on. A held gate is polled with a growing, jittered pause
//!   (up to the poll interval); a release by this same instance wakes its waiters at once.
//! - **Renew.** A task the lease owns renews it every third of the lease (or as
//!   [`ObjectStoreGates::with_renewal_interval`] says) for as long as the guard lives. A
//!   renewal is a renewal file, put-if-absent as well, whose name carries the new expiry, so
//!   that a contender learns it from the listing alone (rather than from numbered renewals it
//!   would have to read), then the deletion of the renewal before it. A renewal counts only if
//!   it landed before the lease expired, by the holder's clock; afterwards a contender may
//!   already have looked and taken the next epoch. Then, or when the listing after it shows a
//!   newer epoch, the hold is marked lost (naming the newer epoch's holder) and the task ends.
//!   A put the store does not answer is tried again after a quarter of the interval; if none
//!   lands before the expiry, the hold is lost by the local clock and the next try marks it.
//! - **Release.** The renewing task is stopped and awaited, then put-if-absent of the release
//!   marker, by `release().await` or in the background when a guard is dropped ([`Gates::wait_for_releases`] waits for those). When
//!   that fails, or the process dies first, the lease simply expires. Once the marker is in
//!   place, the releaser deletes the earlier epochs' files and its own renewals in the
//!   background (also waited for by `wait_for_releases`), so that a gate at rest holds two
//!   files: the newest lease and its marker.
//! - **Holders.** A lease names its holder (the program, pid and host given to
//!   [`ObjectStoreGates::with_holder`], and an instance id) and its session, so that a waiter
//!   that gives up says who holds the gate and when the lease ends.
//! - **Epochs.** Epochs grow by one per acquisition and start at 1, so a guard's
//!   [`fencing_epoch`](super::GateGuard::fencing_epoch) is higher than every earlier holder's,
//!   and [`ObjectStoreGates::current_epoch`] tells a stale holder that it has been superseded.
//!   The winner of an epoch deletes the files of epochs older than the one before it, so the
//!   newest two are never deleted and the newest epoch never goes back. A deleted name can
//!   be written again, though, by a contender whose look predates the deletion: so a won put
//!   counts only if a listing after it shows no newer epoch (the newest never goes back, so
//!   a newer one cannot hide), and otherwise the contender holds nothing and looks again.
//! - **Clocks.** Time comes from the [`Clock`] (expiries) and the runtime's timer (when to
//!   renew). Processes sharing a store must keep their clocks within `max_clock_skew` of each
//!   other; a holder stops working under the gate once its hold is lost
//!   ([`GateGuard::check_held`](super::GateGuard::check_held) before each write). A holder
//!   that stalls past its expiry between that check and its write (a long pause), or whose
//!   clock is further off than the allowance (caught only at its next renewal), can overlap
//!   with the next holder for that write: the catalog's fencing where it publishes is what
//!   stops a stale publish (see the gates' module doc for what is fenced where).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ::object_store::path::Path;
use ::object_store::{ObjectStore, PutMode, PutPayload};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{GateLock, GateName, Gates, Hold, LockRequest};
use crate::background::BackgroundTasks;
use crate::clock::{Clock, rfc3339};
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

/// The clock-skew allowance unless [`ObjectStoreGates::with_max_clock_skew`] says otherwise.
pub const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_secs(1);
/// The longest pause between two looks at a held gate, unless
/// [`ObjectStoreGates::with_poll_interval`] says otherwise.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// The first pause; pauses double up to the poll interval.
const FIRST_PAUSE: Duration = Duration::from_millis(2);
/// How many renewals a lease gets in its duration: two may fail (or be late) before it runs
/// out.
const RENEWALS_PER_LEASE: u32 = 3;
/// The newest lease format this code reads, and the one it writes.
const FORMAT_VERSION: u32 = 1;

/// Gates kept as leases on an object store; see the module doc.
#[derive(Clone)]
pub struct ObjectStoreGates {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    lease_duration: Duration,
    /// How often a held lease is renewed in the background; `None`: only when asked.
    renew_every: Option<Duration>,
    max_clock_skew: Duration,
    poll_interval: Duration,
    clock: Arc<dyn Clock>,
    /// Names this instance in the leases it writes, for whoever reads them.
    holder: String,
    /// Notified when a lease of this instance is released, so that a hand-over between two of
    /// its own sessions does not wait for the next poll.
    released: Arc<Notify>,
    /// Releases of dropped leases still being written.
    background: BackgroundTasks,
}

impl ObjectStoreGates {
    /// Gates under `prefix` of `store`, which must support `PutMode::Create`. A lease lasts
    /// `lease_duration` from its acquisition or latest renewal, and is renewed in the
    /// background every third of that while its guard lives.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: Path,
        lease_duration: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            prefix,
            lease_duration,
            renew_every: Some((lease_duration / RENEWALS_PER_LEASE).max(FIRST_PAUSE)),
            max_clock_skew: DEFAULT_MAX_CLOCK_SKEW,
            poll_interval: DEFAULT_POLL_INTERVAL,
            clock,
            holder: instance_of(&super::holder_description("mend")),
            released: Arc::new(Notify::new()),
            background: BackgroundTasks::default(),
        }
    }

    /// Names the holder in the leases this instance writes: `holder` (such as
    /// [`holder_description`](super::holder_description)'s `mend gc (pid 4242 on db-7)`) and
    /// an instance id of its own.
    pub fn with_holder(mut self, holder: &str) -> Self {
        self.holder = instance_of(holder);
        self
    }

    /// How far apart the clocks of the processes sharing the store may be: an expired lease is
    /// taken over only this much after its expiry.
    pub fn with_max_clock_skew(mut self, max_clock_skew: Duration) -> Self {
        self.max_clock_skew = max_clock_skew;
        self
    }

    /// The longest pause between two looks at a held gate.
    pub fn with_poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval.max(FIRST_PAUSE);
        self
    }

    /// How often a held lease is renewed in the background (every third of the lease
    /// unless told otherwise); `None` renews only when the guard's `renew` is called, for tests
    /// that drive renewals by hand.
    pub fn with_renewal_interval(mut self, every: Option<Duration>) -> Self {
        self.renew_every = every.map(|every| every.max(FIRST_PAUSE));
        self
    }

    /// How long a lease lasts unless renewed.
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    /// The newest epoch of a gate: that of its current or latest holder, 0 if it was never
    /// taken. A holder whose guard's epoch is lower has been superseded.
    pub async fn current_epoch(&self, name: &GateName) -> Result<u64> {
        let view = view(&self.store, &self.gate_dir(name)).await?;
        Ok(view.newest.map_or(0, |newest| newest.epoch))
    }

    fn gate_dir(&self, name: &GateName) -> Path {
        let gates = self
            .prefix
            .child("datasets")
            .child(name.dataset_id())
            .child("gates");
        match name {
            GateName::Config { .. } => gates.child("config"),
            GateName::Dataset { .. } => gates.child("dataset"),
            GateName::Key { key, .. } => gates.child("keys").child(key.as_str()),
        }
    }

    /// The lease of `epoch`, or `None` if it is gone (the gate moved on and a newer holder
    /// cleaned it up).
    async fn read_lease(&self, dir: &Path, epoch: u64) -> Result<Option<LeaseRecord>> {
        read_lease_at(&self.store, dir, epoch).await
    }

    /// Writes the lease of `epoch` if nobody has: `Some` if this session won it.
    async fn claim(
        &self,
        dir: &Path,
        request: &LockRequest<'_>,
        epoch: u64,
    ) -> Result<Option<ObjectStoreLease>> {
        let name = request.name();
        let now = self.clock.now_ms();
        let record = LeaseRecord {
            format_version: FORMAT_VERSION,
            epoch,
            gate: name.to_string(),
            holder: self.holder.clone(),
            session: request.session_id().to_string(),
            lease_id: crate::ambient::uuid_v4().to_string(),
            acquired_at_ms: now,
            expires_at_ms: now.saturating_add(duration_ms(self.lease_duration)),
        };
        let path = dir.child(GateFile::Lease { epoch }.file_name());
        let won = match self
            .store
            .put_opts(&path, encode(&record)?, PutMode::Create.into())
            .await
        {
            Ok(_) => true,
            Err(::object_store::Error::AlreadyExists { .. }) => false,
            Err(
                error @ (::object_store::Error::NotImplemented
                | ::object_store::Error::NotSupported { .. }),
            ) => {
                return Err(MendError::CapabilityMissing {
                    capability: "put-if-absent".to_string(),
                    detail: format!(
                        "store {} cannot write {path} only if absent ({error}); gates on object \
                         storage need conditional puts",
                        self.store
                    ),
                });
            }
            // The answer was lost (a timeout, a retried request): whose lease holds the
            // epoch says whether the put landed.
            Err(error) => match self.read_lease(dir, epoch).await {
                Ok(Some(found)) => found.lease_id == record.lease_id,
                Ok(None) | Err(_) => {
                    return Err(MendError::unavailable(
                        format!(
                            "taking the {name}: writing {path} failed ({error}) and reading it \
                             back did not settle whether it landed; if it did, the lease \
                             expires at {} ms",
                            record.expires_at_ms
                        ),
                        error,
                    ));
                }
            },
        };
        Ok(won.then(|| ObjectStoreLease {
            state: Arc::new(LeaseState {
                store: Arc::clone(&self.store),
                clock: Arc::clone(&self.clock),
                dir: dir.clone(),
                name: name.clone(),
                session_id: record.session,
                epoch,
                lease_duration: self.lease_duration,
                hold: Hold::leased(
                    name.clone(),
                    epoch,
                    record.expires_at_ms,
                    Arc::clone(&self.clock),
                ),
                last_renewal: tokio::sync::Mutex::new(None),
            }),
            keeper: None,
            renew_every: self.renew_every,
            released_notice: Arc::clone(&self.released),
            background: self.background.clone(),
            released: false,
        }))
    }

    /// Deletes, best-effort, the files of epochs before the one preceding `epoch`. Only the
    /// winner of `epoch` calls this, so the two newest epochs always survive.
    async fn clean_up(&self, files: &[(GateFile, Path)], epoch: u64) {
        let stale = files
            .iter()
            .filter(|(file, _)| file.epoch().saturating_add(1) < epoch)
            .map(|(_, path)| self.store.delete(path));
        // A file left behind costs a line in later listings, nothing more.
        let _ = futures::future::join_all(stale).await;
    }
}

impl fmt::Debug for ObjectStoreGates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreGates")
            .field("store", &self.store.to_string())
            .field("prefix", &self.prefix.as_ref())
            .field("lease_duration", &self.lease_duration)
            .field("renew_every", &self.renew_every)
            .field("max_clock_skew", &self.max_clock_skew)
            .field("poll_interval", &self.poll_interval)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Gates for ObjectStoreGates {
    fn has_fencing_epochs(&self) -> bool {
        true
    }

    async fn lock(&self, request: &LockRequest<'_>) -> Result<Box<dyn GateLock>> {
        let dir = self.gate_dir(request.name());
        let skew_ms = duration_ms(self.max_clock_skew);
        let mut pause = FIRST_PAUSE;
        // Who held the gate at the latest look, for the error if the wait runs out.
        let mut held_by = None;
        loop {
            // Registered before looking, so that a release by this instance after the look
            // still ends the pause below.
            let released_here = self.released.notified();
            // The lease is judged by the time the look began, not the time it ended: a
            // renewal that landed before the lease ran out is in every listing that begins
            // after it (plus the allowance), and only those. A look that paused past the
            // expiry (a stalled read, a paused process) has not seen the renewals made
            // meanwhile (mend-sim: such a contender took over a gate whose holder had renewed,
            // and two replicas swept at once).
            let looked_at = self.clock.now_ms();
            let look = view(&self.store, &dir).await?;
            let free_epoch = match look.newest {
                None => Some(1),
                Some(newest) if newest.released => Some(newest.epoch + 1),
                Some(newest) => {
                    let Some(lease) = self.read_lease(&dir, newest.epoch).await? else {
                        continue;
                    };
                    let expires_at_ms = lease
                        .expires_at_ms
                        .max(newest.renewed_until.unwrap_or(TimestampMs::MIN));
                    let now = self.clock.now_ms();
                    let free = looked_at >= expires_at_ms.saturating_add(skew_ms)
                        || crate::deliberate_bugs::active(
                            crate::deliberate_bugs::Bug::GateTakeoverBeforeExpiry,
                        );
                    held_by = (!free).then(|| describe_holder(&lease, expires_at_ms, now));
                    free.then_some(newest.epoch + 1)
                }
            };
            if let Some(epoch) = free_epoch {
                let Some(mut lease) = self.claim(&dir, request, epoch).await? else {
                    // Another session won this epoch: look again, it holds the gate now.
                    continue;
                };
                // Winning the put is not yet proof: if this look was old enough, the epoch's
                // earlier file may have been cleaned up since, and the put re-created it
                // behind a newer holder. Then a newer epoch shows, and this one holds nothing.
                let after = view(&self.store, &dir).await?;
                if after.newest.map(|newest| newest.epoch) == Some(epoch) {
                    self.clean_up(&after.files, epoch).await;
                    lease.keep();
                    return Ok(Box::new(lease));
                }
                // Nobody reads an epoch below the newest: no release marker is needed.
                lease.released = true;
                continue;
            }
            let now = Instant::now();
            if now >= request.deadline() {
                return Err(match &held_by {
                    Some(holder) => request.timed_out_held_by(holder),
                    None => request.timed_out(),
                });
            }
            let _ =
                tokio::time::timeout(jittered(pause).min(request.deadline() - now), released_here)
                    .await;
            pause = (pause * 2).min(self.poll_interval);
        }
    }

    async fn wait_for_releases(&self) {
        self.background.idle().await;
    }
}

/// The lease of `epoch` in `dir`, or `None` if it is gone (the gate moved on and a newer
/// holder cleaned it up).
async fn read_lease_at(
    store: &Arc<dyn ObjectStore>,
    dir: &Path,
    epoch: u64,
) -> Result<Option<LeaseRecord>> {
    let path = dir.child(GateFile::Lease { epoch }.file_name());
    let bytes = match store.get(&path).await {
        Ok(result) => result.bytes().await,
        Err(::object_store::Error::NotFound { .. }) => return Ok(None),
        Err(error) => Err(error),
    }
    .map_err(|error| store_error(format!("reading {path}"), error))?;
    let lease: LeaseRecord = decode(&path, &bytes)?;
    if lease.epoch != epoch {
        return Err(corrupt(&path, format!("holds epoch {}", lease.epoch)));
    }
    Ok(Some(lease))
}

/// `holder, instance UUID`: one [`ObjectStoreGates`] among those of a process.
fn instance_of(holder: &str) -> String {
    format!("{holder}, instance {}", crate::ambient::uuid_v4())
}

/// Who holds a gate, since when, and when the lease ends, as of `now_ms`: for the error of a
/// waiter that gives up.
fn describe_holder(lease: &LeaseRecord, expires_at_ms: TimestampMs, now_ms: TimestampMs) -> String {
    let seconds = |ms: i64| format!("{:.1} s", ms as f64 / 1000.0);
    let ends = if expires_at_ms > now_ms {
        format!(
            "its lease ends at {} (in {}) unless renewed",
            rfc3339(expires_at_ms),
            seconds(expires_at_ms - now_ms)
        )
    } else {
        format!(
            "its lease ended at {} ({} ago) and is taken over once the clock-skew allowance has \
             passed",
            rfc3339(expires_at_ms),
            seconds(now_ms - expires_at_ms)
        )
    };
    format!(
        "{} (session {}, fencing epoch {}) since {}; {ends}",
        lease.holder,
        lease.session,
        lease.epoch,
        rfc3339(lease.acquired_at_ms)
    )
}

/// The files of a gate's directory, and what they say about its newest epoch.
async fn view(store: &Arc<dyn ObjectStore>, dir: &Path) -> Result<GateView> {
    let listing = store
        .list_with_delimiter(Some(dir))
        .await
        .map_err(|error| store_error(format!("listing {dir}"), error))?;
    let files: Vec<(GateFile, Path)> = listing
        .objects
        .into_iter()
        .filter_map(|object| {
            let file = object.location.filename().and_then(GateFile::parse)?;
            Some((file, object.location))
        })
        .collect();
    let newest = files
        .iter()
        .filter_map(|(file, _)| match file {
            GateFile::Lease { epoch } => Some(*epoch),
            _ => None,
        })
        .max()
        .map(|epoch| Newest {
            epoch,
            released: files
                .iter()
                .any(|(file, _)| *file == GateFile::Released { epoch }),
            renewed_until: files
                .iter()
                .filter_map(|(file, _)| match file {
                    GateFile::Renewal {
                        epoch: renewed,
                        expires_at_ms,
                    } if *renewed == epoch => Some(*expires_at_ms),
                    _ => None,
                })
                .max(),
        });
    Ok(GateView { newest, files })
}

/// What a gate's directory holds.
struct GateView {
    newest: Option<Newest>,
    files: Vec<(GateFile, Path)>,
}

#[derive(Debug, Clone, Copy)]
struct Newest {
    epoch: u64,
    released: bool,
    /// The latest expiry among the renewals of this epoch.
    renewed_until: Option<TimestampMs>,
}

/// The files of a gate's directory, by name; anything else there is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GateFile {
    Lease {
        epoch: u64,
    },
    Renewal {
        epoch: u64,
        expires_at_ms: TimestampMs,
    },
    Released {
        epoch: u64,
    },
}

impl GateFile {
    fn epoch(&self) -> u64 {
        match *self {
            Self::Lease { epoch } | Self::Renewal { epoch, .. } | Self::Released { epoch } => epoch,
        }
    }

    fn file_name(&self) -> String {
        match *self {
            Self::Lease { epoch } => format!("{epoch:020}.json"),
            // Clocks before 1970 are not supported; clamping keeps the name parseable.
            Self::Renewal {
                epoch,
                expires_at_ms,
            } => format!("{epoch:020}.renewal-{:020}.json", expires_at_ms.max(0)),
            Self::Released { epoch } => format!("{epoch:020}.released.json"),
        }
    }

    fn parse(file_name: &str) -> Option<Self> {
        let (epoch, rest) = file_name.split_at_checked(20)?;
        let epoch = parse_digits(epoch)?;
        match rest {
            ".json" => Some(Self::Lease { epoch }),
            ".released.json" => Some(Self::Released { epoch }),
            _ => {
                let expires = rest.strip_prefix(".renewal-")?.strip_suffix(".json")?;
                let expires_at_ms = TimestampMs::try_from(parse_digits(expires)?).ok()?;
                Some(Self::Renewal {
                    epoch,
                    expires_at_ms,
                })
            }
        }
    }
}

fn parse_digits(digits: &str) -> Option<u64> {
    if digits.len() != 20 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A lease file: who took which epoch of which gate, and until when.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LeaseRecord {
    format_version: u32,
    epoch: u64,
    /// The gate's name, for people reading the store.
    gate: String,
    holder: String,
    session: String,
    /// Tells this acquisition apart from any other when a put's outcome is unclear.
    lease_id: String,
    acquired_at_ms: TimestampMs,
    expires_at_ms: TimestampMs,
}

/// A renewal or release file; its name says what it is, the body who wrote it and when.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct MarkRecord {
    format_version: u32,
    epoch: u64,
    session: String,
    written_at_ms: TimestampMs,
}

/// A held lease: the shared state that renews it, the keeper task that does so in the
/// background while the lease is held, and the release.
struct ObjectStoreLease {
    state: Arc<LeaseState>,
    /// Renews the lease every `renew_every` until aborted (by the release, or the drop).
    keeper: Option<tokio::task::JoinHandle<()>>,
    renew_every: Option<Duration>,
    released_notice: Arc<Notify>,
    background: BackgroundTasks,
    released: bool,
}

/// What renewing a lease needs, shared by the lease and its keeper.
struct LeaseState {
    store: Arc<dyn ObjectStore>,
    clock: Arc<dyn Clock>,
    dir: Path,
    name: GateName,
    session_id: String,
    epoch: u64,
    lease_duration: Duration,
    /// The expiry (by this process's clock) and whether the hold was lost.
    hold: Hold,
    /// The file of the latest renewal, which the next one replaces. An async mutex: it also
    /// keeps a renewal by the keeper and one asked for by the caller from interleaving.
    last_renewal: tokio::sync::Mutex<Option<Path>>,
}

impl ObjectStoreLease {
    /// Starts the keeper, once the lease is known to be held.
    fn keep(&mut self) {
        let Some(every) = self.renew_every else {
            return;
        };
        let state = Arc::clone(&self.state);
        self.keeper = Some(tokio::spawn(keep_renewed(state, every)));
    }

    /// Stops the keeper and waits until it has, so that no renewal lands after the release
    /// marker is written. (One that was in flight may still land; the marker frees the gate
    /// whatever renewals say.)
    async fn stop_keeper(&mut self) {
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
            let _ = keeper.await;
        }
    }
}

/// Renews the lease every `every` until it is lost (then it stops: a lost lease never comes
/// back) or the task is aborted. A renewal that fails without an answer (the store did not
/// answer) is tried again sooner, until the lease runs out: then the next try finds it run
/// out and marks the hold lost. Work under the gate learns all this from [`Hold::check`].
async fn keep_renewed(state: Arc<LeaseState>, every: Duration) {
    let retry = (every / 4).max(FIRST_PAUSE);
    let mut pause = every;
    loop {
        tokio::time::sleep(pause).await;
        pause = match state.renew().await {
            Ok(()) => every,
            Err(_) if state.hold.is_marked_lost() => return,
            Err(error) => {
                tracing::warn!(gate = %state.name, epoch = state.epoch, %error, "renewing a gate lease failed; trying again");
                retry
            }
        };
    }
}

impl LeaseState {
    fn expires_at_ms(&self) -> TimestampMs {
        self.hold
            .expires_at_ms()
            .expect("a lease's hold has an expiry")
    }

    /// Marks the hold lost and says so as the error of a renewal.
    fn lost(&self, why: String) -> MendError {
        self.hold.mark_lost(why);
        self.hold
            .check()
            .expect_err("a hold marked lost fails its check")
    }

    fn mark(&self, file: GateFile) -> (Path, MarkRecord) {
        let record = MarkRecord {
            format_version: FORMAT_VERSION,
            epoch: self.epoch,
            session: self.session_id.clone(),
            written_at_ms: self.clock.now_ms(),
        };
        (self.dir.child(file.file_name()), record)
    }

    /// Writes a renewal; see the module doc. Marks the hold lost when the lease ran out before
    /// the renewal landed or a newer epoch exists.
    async fn renew(&self) -> Result<()> {
        let mut last_renewal = self.last_renewal.lock().await;
        let now = self.clock.now_ms();
        let expires_at = self.expires_at_ms();
        if self.hold.is_marked_lost() || now >= expires_at {
            return Err(self.lost(format!(
                "its lease ran out at {} (now {}) or was taken over before it was renewed",
                rfc3339(expires_at),
                rfc3339(now)
            )));
        }
        let expires_at_ms = now.saturating_add(duration_ms(self.lease_duration));
        let (path, record) = self.mark(GateFile::Renewal {
            epoch: self.epoch,
            expires_at_ms,
        });
        put_if_absent(&self.store, &path, &record)
            .await
            .map_err(|error| {
                MendError::unavailable(
                    format!(
                        "renewing the lease on the {} failed; it still runs out at {}: {error}",
                        self.name,
                        rfc3339(expires_at)
                    ),
                    error,
                )
            })?;
        // A contender looks only after the expiry (plus the skew allowance), so a renewal
        // that landed before it is in every listing from then on; one that landed later may
        // have been missed.
        let landed = self.clock.now_ms();
        if landed >= expires_at {
            return Err(self.lost(format!(
                "its renewal landed at {}, after the lease ran out at {}, so a contender may \
                 have taken the gate",
                rfc3339(landed),
                rfc3339(expires_at)
            )));
        }
        // Clocks further apart than the allowance could still let a contender in: a newer
        // epoch settles it. (A listing, not a look at the next epoch's name: that one may be
        // cleaned up already.)
        let newest = view(&self.store, &self.dir)
            .await?
            .newest
            .map(|newest| newest.epoch);
        if let Some(newer) = newest.filter(|newest| *newest != self.epoch) {
            let by = match read_lease_at(&self.store, &self.dir, newer).await {
                Ok(Some(lease)) => format!("{} (session {})", lease.holder, lease.session),
                _ => "another session".to_string(),
            };
            return Err(self.lost(format!(
                "it was taken over: fencing epoch {newer} is held by {by}"
            )));
        }
        self.hold.extend(expires_at_ms);
        // The older renewal says less than this one, which is in place: deleting it keeps a
        // long-held lease from growing its directory with every renewal.
        if let Some(older) = last_renewal.replace(path.clone())
            && older != path
        {
            let _ = self.store.delete(&older).await;
        }
        Ok(())
    }
}

impl fmt::Debug for ObjectStoreLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreLease")
            .field("store", &self.state.store.to_string())
            .field("dir", &self.state.dir.as_ref())
            .field("session_id", &self.state.session_id)
            .field("hold", &self.state.hold)
            .field("renew_every", &self.renew_every)
            .field("released", &self.released)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl GateLock for ObjectStoreLease {
    fn fencing_epoch(&self) -> u64 {
        self.state.epoch
    }

    fn expires_at_ms(&self) -> Option<TimestampMs> {
        self.state.hold.expires_at_ms()
    }

    fn hold(&self) -> Option<Hold> {
        Some(self.state.hold.clone())
    }

    async fn renew(&mut self) -> Result<()> {
        self.state.renew().await
    }

    async fn release(mut self: Box<Self>) -> Result<()> {
        self.stop_keeper().await;
        let state = Arc::clone(&self.state);
        let (path, record) = state.mark(GateFile::Released { epoch: state.epoch });
        let written = put_if_absent(&state.store, &path, &record).await;
        self.released_notice.notify_waiters();
        match written {
            Ok(()) => {
                self.released = true;
                // In the background, so that a release costs its one put: the files only
                // clutter listings until then.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let (store, dir, epoch) =
                        (Arc::clone(&state.store), state.dir.clone(), state.epoch);
                    self.background.spawn(&runtime, async move {
                        clean_up_released(&store, &dir, epoch).await;
                    });
                }
                Ok(())
            }
            // `released` stays false: dropping `self` tries once more in the background.
            Err(error) => Err(MendError::unavailable(
                format!(
                    "releasing the {} failed; the lease runs out at {} anyway: {error}",
                    state.name,
                    rfc3339(state.expires_at_ms())
                ),
                error,
            )),
        }
    }
}

impl Drop for ObjectStoreLease {
    fn drop(&mut self) {
        let keeper = self.keeper.take();
        if let Some(keeper) = &keeper {
            keeper.abort();
        }
        if self.released {
            return;
        }
        // Without a runtime there is nothing to write with: the lease runs out.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (path, record) = self.state.mark(GateFile::Released {
            epoch: self.state.epoch,
        });
        let store = Arc::clone(&self.state.store);
        let notice = Arc::clone(&self.released_notice);
        let (dir, epoch) = (self.state.dir.clone(), self.state.epoch);
        self.background.spawn(&runtime, async move {
            // The keeper ends first, so that no renewal of its lands after the marker.
            if let Some(keeper) = keeper {
                let _ = keeper.await;
            }
            let written = put_if_absent(&store, &path, &record).await;
            notice.notify_waiters();
            if written.is_ok() {
                clean_up_released(&store, &dir, epoch).await;
            }
        });
    }
}

/// Deletes, best-effort, what a released `epoch` leaves that nobody reads any more: the
/// files of every earlier epoch, and this epoch's renewals (its release marker frees the gate
/// whatever they say). Its lease and marker stay, so the newest epoch never goes back; a
/// contender whose look predates this and re-creates a deleted older epoch finds a newer one
/// in the listing after its put, and holds nothing (see the module doc). A gate at rest keeps
/// two files.
async fn clean_up_released(store: &Arc<dyn ObjectStore>, dir: &Path, epoch: u64) {
    let Ok(look) = view(store, dir).await else {
        return;
    };
    let stale = look
        .files
        .iter()
        .filter(|(file, _)| {
            file.epoch() < epoch
                || matches!(file, GateFile::Renewal { epoch: renewed, .. } if *renewed == epoch)
        })
        .map(|(_, path)| store.delete(path));
    // A file left behind costs a line in later listings, nothing more.
    let _ = futures::future::join_all(stale).await;
}

/// Writes `record` at `path` unless something is there already, which counts as done: the
/// same holder wrote the same mark before.
async fn put_if_absent(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    record: &MarkRecord,
) -> Result<(), ::object_store::Error> {
    let payload = match serde_json::to_vec(record) {
        Ok(bytes) => PutPayload::from(bytes),
        Err(error) => {
            return Err(::object_store::Error::Generic {
                store: "gates",
                source: Box::new(error),
            });
        }
    };
    match store.put_opts(path, payload, PutMode::Create.into()).await {
        Ok(_) | Err(::object_store::Error::AlreadyExists { .. }) => Ok(()),
        Err(error) => Err(error),
    }
}

fn encode(record: &LeaseRecord) -> Result<PutPayload> {
    serde_json::to_vec(record)
        .map(PutPayload::from)
        .map_err(|error| MendError::invalid(format!("a lease cannot be encoded: {error}")))
}

/// Parses a lease, refusing one that a newer mend wrote rather than guessing at its fields.
fn decode(path: &Path, bytes: &[u8]) -> Result<LeaseRecord> {
    #[derive(Deserialize)]
    struct Header {
        format_version: u32,
    }
    let header: Header = serde_json::from_slice(bytes)
        .map_err(|error| corrupt(path, format!("is not a lease: {error}")))?;
    if header.format_version > FORMAT_VERSION {
        return Err(corrupt(
            path,
            format!(
                "was written by a newer mend (lease format {}, this mend reads up to {}); \
                 upgrade mend",
                header.format_version, FORMAT_VERSION
            ),
        ));
    }
    serde_json::from_slice(bytes)
        .map_err(|error| corrupt(path, format!("cannot be parsed: {error}")))
}

fn corrupt(path: &Path, what: String) -> MendError {
    MendError::Corrupt {
        message: format!("gate lease {path} {what}"),
    }
}

fn store_error(context: String, error: ::object_store::Error) -> MendError {
    MendError::unavailable(format!("{context}: {error}"), error)
}

fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// `pause` scaled by a random factor in [0.5, 1), so that waiters of several processes do not
/// look in lockstep.
fn jittered(pause: Duration) -> Duration {
    let fraction = crate::ambient::below(1024) as u32;
    pause / 2 + pause * fraction / 2048
}

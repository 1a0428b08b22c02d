//! Membership leases on an object store, timed by the store's own clock and written only with
//! put-if-absent (no file is ever overwritten).
//!
//! ```text
//! fleet/epochs/{epoch:020}                                     claimed once per joining
//! fleet/members/{replica_id}/epoch-{epoch:020}-beat-{beat:020}-lease-{lease_ms}ms
//!                                                              one heartbeat
//! fleet/probes/{replica_id}-{beat:020}                         an observer's probe, deleted at once
//! ```
//!
//! - **The store's clock.** The store stamps every object it writes with its own time (its
//!   last-modified time, which a listing shows). A heartbeat's stamp says when it was written;
//!   the stamp of the heartbeat a replica has just put says what time it is now, by the same
//!   clock. So every comparison of times is between two stamps of the store, and the replicas'
//!   clocks may be off by any amount, either way.
//! - **Join.** List `fleet/epochs/`, put-if-absent the next number; a lost put means another
//!   replica took it, and the next is tried. The winner deletes epoch files more than 16
//!   below its own (the newest never goes back, since the newest survive). Then it puts its
//!   first heartbeat.
//! - **Heartbeat.** Put-if-absent a new heartbeat (its name is never put twice by a process:
//!   its beat number counts every put tried), list `fleet/members/`, which shows every member
//!   without reading a file, then delete this replica's older heartbeats that the listing
//!   shows. *Now* is the stamp of the heartbeat just put. A member is live while its newest
//!   heartbeat's stamp plus its lease (which the name carries) plus [`STORE_CLOCK_ALLOWANCE`]
//!   is after now.
//! - **A replica's own lease** runs on its own monotonic clock: it is live until the lease has
//!   passed since just before the put of its newest heartbeat was sent. That put's stamp is
//!   no earlier, so the replica's lease runs out before any other replica's own stamp (no
//!   earlier than the time it takes over) can pass that stamp plus the lease, whatever the
//!   wall clocks say. A renewal whose put is answered after the lease it renews ran out is not
//!   a renewal: the others may have counted the replica gone before its new heartbeat was
//!   there to see, so it joins again with a new epoch.
//! - **Leave.** Delete the replica's heartbeats; the others see it gone, not expired.
//! - **Observers** (`mend status`, which is not a member) learn the store's time the same way:
//!   they put a probe under `fleet/probes/`, list `fleet/`, and delete the probe.
//! - Heartbeats of members expired for more than ten of their leases, and probes older than
//!   ten leases, are deleted by whoever sees them.
//! - **Heartbeats of the first format** (`{expires_at_ms:020}-{epoch:020}`, written by mend
//!   before the fleet was timed by the store) carry their expiry by the writer's own clock:
//!   during a rolling upgrade they are judged as their writers judge each other, by this
//!   replica's clock within [`OLD_FORMAT_CLOCK_SKEW`], and forgotten ten leases after they
//!   expire. Replicas of that version cannot read the new names and do not see the new
//!   members until they are replaced; the dataset gates keep sweeps apart meanwhile.
//!
//! An interval costs three requests (put, list, delete), and the listing holds one or two
//! names per member.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ::object_store::path::Path;
use ::object_store::{ObjectMeta, ObjectStore, PutMode, PutPayload};
use async_trait::async_trait;
use futures::TryStreamExt;
use tokio::time::Instant;

use super::{FleetView, Member, Membership, Observed};
use crate::bounds::{MEMBER_LEASE_MS, ms_after};
use crate::clock::Clock;
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

/// What a member's lease is given beyond its length before the others count it gone: two
/// stamps of the store compared may each be truncated to its granularity (whole seconds on
/// S3), which makes their difference up to 1 s short; the second second is for the store's own
/// servers, which stamp different objects, disagreeing a little.
pub const STORE_CLOCK_ALLOWANCE: Duration = Duration::from_secs(2);
/// How far apart replicas of the first format assumed their clocks to be: a heartbeat of that
/// format counts as gone this long after its expiry by the observer's clock.
pub const OLD_FORMAT_CLOCK_SKEW: Duration = Duration::from_secs(1);
/// Epoch files kept below the newest.
const EPOCHS_KEPT: u64 = 16;
/// How many times a joining replica tries the next epoch before giving up.
const MAX_EPOCH_TRIES: u32 = 64;
/// How many of its leases a member's heartbeats, or a probe, are kept after they expire.
const LEASES_KEPT: u64 = 10;

/// A replica's membership kept as heartbeat objects; see the module doc.
pub struct ObjectStoreMembership {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    replica_id: String,
    lease: Duration,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// This replica's membership, once joined.
    joined: Option<Joined>,
    /// Heartbeats and probes this process has tried to put: the next one's number.
    beats_tried: u64,
}

/// This replica's membership: its epoch, its newest heartbeat, and until when its lease is
/// live by this process's monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Joined {
    heartbeat: Heartbeat,
    live_until: Instant,
}

/// A heartbeat's name: `epoch-{epoch:020}-beat-{beat:020}-lease-{lease_ms}ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Heartbeat {
    epoch: u64,
    /// Counts the process's puts: a later heartbeat has a higher number.
    beat: u64,
    /// The writer's lease.
    lease_ms: u64,
}

impl Heartbeat {
    fn file_name(&self) -> String {
        format!(
            "epoch-{:020}-beat-{:020}-lease-{}ms",
            self.epoch, self.beat, self.lease_ms
        )
    }

    fn parse(name: &str) -> Option<Self> {
        let rest = name.strip_prefix("epoch-")?;
        let (epoch, rest) = rest.split_once("-beat-")?;
        let (beat, rest) = rest.split_once("-lease-")?;
        let lease_ms = rest.strip_suffix("ms")?;
        Some(Self {
            epoch: fixed_width_number(epoch)?,
            beat: fixed_width_number(beat)?,
            lease_ms: digits(lease_ms)?,
        })
    }

    /// The lease the observers grant it: what its name says, within the range a lease may
    /// have, so that a name claiming a lease of years does not keep a dead member live.
    fn granted_lease_ms(&self) -> u64 {
        self.lease_ms
            .clamp(MEMBER_LEASE_MS.min, MEMBER_LEASE_MS.max)
    }
}

/// A heartbeat's name in the first format, `{expires_at_ms:020}-{epoch:020}`: its expiry by
/// its writer's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OldHeartbeat {
    expires_at_ms: TimestampMs,
    epoch: u64,
}

impl OldHeartbeat {
    fn parse(name: &str) -> Option<Self> {
        let (expires, epoch) = name.split_once('-')?;
        Some(Self {
            expires_at_ms: i64::try_from(fixed_width_number(expires)?).ok()?,
            epoch: fixed_width_number(epoch)?,
        })
    }
}

/// A 20-digit number, as names carry them.
fn fixed_width_number(text: &str) -> Option<u64> {
    (text.len() == 20).then(|| digits(text))?
}

fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

impl std::fmt::Debug for ObjectStoreMembership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStoreMembership")
            .field("store", &self.store.to_string())
            .field("prefix", &self.prefix.as_ref())
            .field("replica_id", &self.replica_id)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl ObjectStoreMembership {
    /// The membership of `replica_id` under `prefix` of `store` (which must support
    /// `PutMode::Create`), each lease lasting `lease` by the store's clock. `clock` judges
    /// only heartbeats of the first format (see the module doc).
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: Path,
        replica_id: String,
        lease: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            prefix,
            replica_id,
            lease,
            clock,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fleet_dir(&self) -> Path {
        self.prefix.child("fleet")
    }

    fn epochs_dir(&self) -> Path {
        self.fleet_dir().child("epochs")
    }

    fn members_dir(&self) -> Path {
        self.fleet_dir().child("members")
    }

    fn probes_dir(&self) -> Path {
        self.fleet_dir().child("probes")
    }

    fn heartbeat_path(&self, heartbeat: &Heartbeat) -> Path {
        self.members_dir()
            .child(self.replica_id.as_str())
            .child(heartbeat.file_name())
    }

    fn lease_ms(&self) -> u64 {
        as_ms(self.lease)
    }

    /// The number of the next put: never the same twice in this process, so that a put
    /// answered "already exists" can only be a retry of the same request that landed.
    fn next_beat(&self) -> u64 {
        let mut state = self.state();
        state.beats_tried += 1;
        state.beats_tried
    }

    async fn list(&self, dir: &Path) -> Result<Vec<ObjectMeta>> {
        self.store
            .list(Some(dir))
            .try_collect()
            .await
            .map_err(|error| store_error(format!("listing {dir}"), error))
    }

    /// Claims the next fleet-wide epoch; returns it and the requests it took.
    async fn claim_epoch(&self) -> Result<(u64, u32)> {
        let dir = self.epochs_dir();
        let mut requests = 0;
        for _ in 0..MAX_EPOCH_TRIES {
            let listed = self.list(&dir).await?;
            requests += 1;
            let epochs: Vec<u64> = listed
                .iter()
                .filter_map(|object| object.location.filename()?.parse().ok())
                .collect();
            let next = epochs.iter().max().map_or(1, |newest| newest + 1);
            let path = dir.child(format!("{next:020}"));
            requests += 1;
            match self
                .store
                .put_opts(
                    &path,
                    PutPayload::from(self.replica_id.clone().into_bytes()),
                    PutMode::Create.into(),
                )
                .await
            {
                Ok(_) => {
                    let stale_paths: Vec<Path> = epochs
                        .iter()
                        .filter(|epoch| epoch.saturating_add(EPOCHS_KEPT) < next)
                        .map(|epoch| dir.child(format!("{epoch:020}")))
                        .collect();
                    let stale = stale_paths.iter().map(|path| self.store.delete(path));
                    // A file left behind costs a line in the next joining's listing.
                    let _ = futures::future::join_all(stale).await;
                    return Ok((next, requests));
                }
                Err(::object_store::Error::AlreadyExists { .. }) => continue,
                Err(error) => return Err(store_error(format!("claiming {path}"), error)),
            }
        }
        Err(MendError::Conflict {
            message: format!(
                "replica {} could not claim a fleet epoch in {MAX_EPOCH_TRIES} tries: other \
                 replicas kept taking them; it tries again at its next heartbeat",
                self.replica_id
            ),
        })
    }

    /// Puts an empty object at `path`, put-if-absent, under a name this process never put
    /// before.
    async fn put_new(&self, path: &Path) -> Result<()> {
        match self
            .store
            .put_opts(path, PutPayload::default(), PutMode::Create.into())
            .await
        {
            // Already there: a retry of this very request found its first attempt landed (no
            // other request names it), so the stamp is no earlier than the call.
            Ok(_) | Err(::object_store::Error::AlreadyExists { .. }) => Ok(()),
            Err(error) => Err(store_error(format!("writing {path}"), error)),
        }
    }

    /// Puts a heartbeat of `epoch`; answers it and until when it keeps the lease live (by the
    /// monotonic clock, from just before the put was sent).
    async fn put_heartbeat(&self, epoch: u64) -> Result<Joined> {
        let heartbeat = Heartbeat {
            epoch,
            beat: self.next_beat(),
            lease_ms: self.lease_ms(),
        };
        let sent = Instant::now();
        self.put_new(&self.heartbeat_path(&heartbeat)).await?;
        Ok(Joined {
            heartbeat,
            live_until: sent + self.lease,
        })
    }

    /// Joins with a new epoch; `rejoined` says whether this replica had joined before.
    async fn join(&self, requests: &mut u32, rejoined: bool) -> Result<(Joined, bool)> {
        let (epoch, claimed) = self.claim_epoch().await?;
        *requests += claimed;
        let joined = self.put_heartbeat(epoch).await?;
        *requests += 1;
        Ok((joined, rejoined))
    }

    /// Deletes `paths`, best-effort (what is left is deleted by whoever lists it next);
    /// answers the requests it took.
    async fn delete_all(&self, paths: &[Path]) -> u32 {
        let deletes = paths.iter().map(|path| self.store.delete(path));
        let _ = futures::future::join_all(deletes).await;
        u32::try_from(paths.len()).unwrap_or(u32::MAX)
    }
}

#[async_trait]
impl Membership for ObjectStoreMembership {
    fn replica_id(&self) -> &str {
        &self.replica_id
    }

    fn lease_duration(&self) -> Duration {
        self.lease
    }

    async fn heartbeat(&self) -> Result<FleetView> {
        let previous = self.state().joined;
        let mut requests = 0;
        let renews_lapsed = crate::deliberate_bugs::active(
            crate::deliberate_bugs::Bug::MembershipRenewsLapsedLease,
        );
        let (current, rejoined) = match previous {
            // Still ours by this process's monotonic clock: renew.
            Some(previous) if Instant::now() < previous.live_until || renews_lapsed => {
                let renewed = self.put_heartbeat(previous.heartbeat.epoch).await?;
                requests += 1;
                if Instant::now() < previous.live_until || renews_lapsed {
                    (renewed, false)
                } else {
                    // Answered after the lease ran out: another replica may have counted this
                    // one gone before the new heartbeat was there to see. Join again; the
                    // late heartbeat is deleted with the older ones below.
                    self.join(&mut requests, true).await?
                }
            }
            Some(_) => self.join(&mut requests, true).await?,
            None => self.join(&mut requests, false).await?,
        };
        self.state().joined = Some(current);

        let listed = self.list(&self.members_dir()).await?;
        requests += 1;
        let my_path = self.heartbeat_path(&current.heartbeat);
        let store_now_ms = stamp_of(&listed, &my_path).ok_or_else(|| MendError::Unavailable {
            message: format!(
                "fleet membership: the listing of {} does not show {my_path}, put just \
                 before it: this store's listings lag its writes, which the fleet's \
                 membership needs them not to; the next heartbeat tries again",
                self.members_dir()
            ),
            source: None,
        })?;
        let judged = judge(
            &listed,
            &self.members_dir(),
            &Judge {
                store_now_ms,
                wall_now_ms: self.clock.now_ms(),
                me: Some((&self.replica_id, current.heartbeat)),
                lease_ms: self.lease_ms(),
            },
        );
        requests += self.delete_all(&judged.stale).await;
        Ok(FleetView {
            me: Member {
                replica_id: self.replica_id.clone(),
                epoch: current.heartbeat.epoch,
                expires_at_ms: ms_after(store_now_ms, self.lease_ms()),
            },
            lease_live_until: current.live_until,
            rejoined,
            members: judged.members,
            expired: judged.expired,
            requests,
        })
    }

    async fn observe(&self) -> Result<Observed> {
        let probe =
            self.probes_dir()
                .child(format!("{}-{:020}", self.replica_id, self.next_beat()));
        self.put_new(&probe).await?;
        let listed = match self.list(&self.fleet_dir()).await {
            Ok(listed) => listed,
            Err(error) => {
                let _ = self.store.delete(&probe).await;
                return Err(error);
            }
        };
        let Some(store_now_ms) = stamp_of(&listed, &probe) else {
            let _ = self.store.delete(&probe).await;
            return Err(MendError::Unavailable {
                message: format!(
                    "fleet membership: the listing of {} does not show the probe {probe} put \
                     just before it: this store's listings lag its writes",
                    self.fleet_dir()
                ),
                source: None,
            });
        };
        let judged = judge(
            &listed,
            &self.members_dir(),
            &Judge {
                store_now_ms,
                wall_now_ms: self.clock.now_ms(),
                me: None,
                lease_ms: self.lease_ms(),
            },
        );
        let kept_ms = self.lease_ms().saturating_mul(LEASES_KEPT);
        let probes_dir = self.probes_dir();
        let mut stale = judged.stale;
        stale.push(probe.clone());
        stale.extend(
            listed
                .iter()
                .filter(|object| {
                    object.location.prefix_matches(&probes_dir)
                        && object.location != probe
                        && ms_after(object.last_modified.timestamp_millis(), kept_ms) < store_now_ms
                })
                .map(|object| object.location.clone()),
        );
        self.delete_all(&stale).await;
        Ok(Observed {
            members: judged.members,
            expired: judged.expired,
        })
    }

    async fn leave(&self) -> Result<()> {
        if self.state().joined.take().is_none() {
            return Ok(());
        }
        // Every heartbeat of this replica, not only the newest: one whose put failed after it
        // landed would otherwise show this replica expired rather than gone.
        let dir = self.members_dir().child(self.replica_id.as_str());
        let mine: Vec<Path> = self
            .list(&dir)
            .await?
            .into_iter()
            .map(|object| object.location)
            .collect();
        for path in &mine {
            self.store.delete(path).await.map_err(|error| {
                store_error(format!("deleting this replica's heartbeat {path}"), error)
            })?;
        }
        Ok(())
    }
}

/// The store's stamp of the object at `path`, in ms since the Unix epoch, if `listed` shows it.
fn stamp_of(listed: &[ObjectMeta], path: &Path) -> Option<TimestampMs> {
    listed
        .iter()
        .find(|object| object.location == *path)
        .map(|object| object.last_modified.timestamp_millis())
}

/// What [`judge`] judges a listing of `fleet/members/` by.
#[derive(Debug)]
struct Judge<'a> {
    /// Now by the store's clock: the stamp of an object put just before the listing.
    store_now_ms: TimestampMs,
    /// Now by this process's wall clock, for heartbeats of the first format only.
    wall_now_ms: TimestampMs,
    /// This replica and its newest heartbeat, when it is a member: live whatever the listing
    /// says, and its older heartbeats are stale.
    me: Option<(&'a str, Heartbeat)>,
    /// This replica's lease: how long heartbeats of the first format are kept once expired
    /// (ten of them; those names do not say their writer's lease).
    lease_ms: u64,
}

/// One heartbeat as a listing shows it.
#[derive(Debug, Clone, Copy)]
enum Listed {
    Stamped {
        heartbeat: Heartbeat,
        stamp_ms: TimestampMs,
    },
    Old(OldHeartbeat),
}

impl Listed {
    /// Whether this heartbeat is newer than `other` of the same replica.
    fn is_newer_than(&self, other: &Listed) -> bool {
        match (self, other) {
            (Listed::Stamped { heartbeat: a, .. }, Listed::Stamped { heartbeat: b, .. }) => {
                (a.epoch, a.beat) > (b.epoch, b.beat)
            }
            // The first format gave way to this one: a replica never goes back.
            (Listed::Stamped { .. }, Listed::Old(_)) => true,
            (Listed::Old(_), Listed::Stamped { .. }) => false,
            (Listed::Old(a), Listed::Old(b)) => a.expires_at_ms > b.expires_at_ms,
        }
    }
}

/// The fleet one listing of `fleet/members/` shows.
#[derive(Debug, Default)]
struct Judged {
    /// The live members, by replica id.
    members: Vec<Member>,
    /// Members whose lease ran out without their leaving.
    expired: Vec<Member>,
    /// Heartbeats to delete: this replica's older ones, and every one of members expired for
    /// more than ten leases.
    stale: Vec<Path>,
}

/// Judges each member by its newest heartbeat in `listed` (objects under `members_dir`;
/// others are left alone), as `judge` says. Over 100 lines: two passes (group the heartbeats
/// by replica, then judge each replica's newest), the second one case per member state.
fn judge(listed: &[ObjectMeta], members_dir: &Path, judge: &Judge<'_>) -> Judged {
    let mut by_replica: BTreeMap<String, Vec<(&Path, Listed)>> = BTreeMap::new();
    for object in listed {
        let Some(parts) = object.location.prefix_match(members_dir) else {
            continue;
        };
        let parts: Vec<_> = parts.collect();
        let [replica, file] = parts.as_slice() else {
            continue;
        };
        let beat = if let Some(heartbeat) = Heartbeat::parse(file.as_ref()) {
            Listed::Stamped {
                heartbeat,
                stamp_ms: object.last_modified.timestamp_millis(),
            }
        } else if let Some(old) = OldHeartbeat::parse(file.as_ref()) {
            Listed::Old(old)
        } else {
            continue;
        };
        by_replica
            .entry(replica.as_ref().to_string())
            .or_default()
            .push((&object.location, beat));
    }

    let mut judged = Judged::default();
    for (replica_id, beats) in by_replica {
        if let Some((my_id, my_heartbeat)) = judge.me
            && replica_id == my_id
        {
            let my_name = my_heartbeat.file_name();
            judged.stale.extend(
                beats
                    .iter()
                    .filter(|(path, _)| path.filename() != Some(my_name.as_str()))
                    .map(|(path, _)| (*path).clone()),
            );
            judged.members.push(Member {
                replica_id,
                epoch: my_heartbeat.epoch,
                expires_at_ms: ms_after(judge.store_now_ms, my_heartbeat.lease_ms),
            });
            continue;
        }
        let newest = beats
            .iter()
            .map(|(_, beat)| *beat)
            .reduce(|newest, beat| {
                if beat.is_newer_than(&newest) {
                    beat
                } else {
                    newest
                }
            })
            .expect("a replica is listed for a heartbeat of its own");
        let (member, live, forgotten) = match newest {
            Listed::Stamped {
                heartbeat,
                stamp_ms,
            } => {
                let lease_ms = heartbeat.granted_lease_ms();
                let allowance_ms = as_ms(STORE_CLOCK_ALLOWANCE);
                let gone_at_ms = ms_after(ms_after(stamp_ms, lease_ms), allowance_ms);
                let member = Member {
                    replica_id,
                    epoch: heartbeat.epoch,
                    expires_at_ms: ms_after(stamp_ms, lease_ms),
                };
                let forgotten_at_ms = ms_after(gone_at_ms, lease_ms.saturating_mul(LEASES_KEPT));
                (
                    member,
                    judge.store_now_ms < gone_at_ms,
                    judge.store_now_ms >= forgotten_at_ms,
                )
            }
            Listed::Old(old) => {
                let gone_at_ms = ms_after(old.expires_at_ms, as_ms(OLD_FORMAT_CLOCK_SKEW));
                let forgotten_at_ms = ms_after(
                    old.expires_at_ms,
                    judge.lease_ms.saturating_mul(LEASES_KEPT),
                );
                let member = Member {
                    replica_id,
                    epoch: old.epoch,
                    expires_at_ms: old.expires_at_ms,
                };
                (
                    member,
                    judge.wall_now_ms < gone_at_ms,
                    judge.wall_now_ms > forgotten_at_ms,
                )
            }
        };
        if live {
            judged.members.push(member);
        } else if forgotten {
            judged
                .stale
                .extend(beats.iter().map(|(path, _)| (*path).clone()));
        } else {
            judged.expired.push(member);
        }
    }
    judged
}

fn as_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn store_error(context: String, error: ::object_store::Error) -> MendError {
    MendError::unavailable(format!("fleet membership: {context}: {error}"), error)
}

#[cfg(test)]
mod tests;

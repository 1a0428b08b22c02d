//! Membership leases on an object store, written only with put-if-absent (no file is ever
//! overwritten), like the gates' leases.
//!
//! ```text
//! fleet/epochs/{epoch:020}                                       claimed once per joining
//! fleet/members/{replica_id}/{expires_at_ms:020}-{epoch:020}     one heartbeat
//! ```
//!
//! - **Join.** List `fleet/epochs/`, put-if-absent the next number; a lost put means another
//!   replica took it, and the next is tried. The winner deletes epoch files more than 16
//!   below its own (the newest never goes back, since the newest survive).
//! - **Heartbeat.** Put-if-absent a new heartbeat whose name carries its expiry and epoch,
//!   then delete the one before; then one listing of `fleet/members/` shows every member
//!   without reading a file. A member is live while its newest heartbeat's expiry, plus the
//!   clock-skew allowance, is ahead of this replica's clock. A heartbeat that would land after
//!   this replica's own expiry (by its own clock) is not a renewal: it joins again.
//! - **Leave.** Delete the replica's heartbeats; the others see it gone, not expired.
//! - Heartbeats of members expired for more than ten leases are deleted by whoever sees them.
//!
//! An interval costs three requests (put, delete, list), and the listing holds one or two
//! names per member.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ::object_store::path::Path;
use ::object_store::{ObjectStore, PutMode, PutPayload};
use async_trait::async_trait;
use futures::TryStreamExt;

use super::{FleetView, Member, Membership, Observed, duration_ms};
use crate::clock::Clock;
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

/// How far apart the replicas' clocks may be: a member counts as gone only this long after
/// its lease's expiry by the observer's clock.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(1);
/// Epoch files kept below the newest.
const EPOCHS_KEPT: u64 = 16;
/// How many times a joining replica tries the next epoch before giving up.
const MAX_EPOCH_TRIES: u32 = 64;

/// A replica's membership kept as heartbeat objects; see the module doc.
pub struct ObjectStoreMembership {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    replica_id: String,
    lease: Duration,
    clock: Arc<dyn Clock>,
    /// This replica's newest heartbeat, once joined.
    joined: Mutex<Option<Heartbeat>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Heartbeat {
    epoch: u64,
    expires_at_ms: TimestampMs,
}

impl Heartbeat {
    fn file_name(&self) -> String {
        format!("{:020}-{:020}", self.expires_at_ms, self.epoch)
    }

    fn parse(name: &str) -> Option<Self> {
        let (expires, epoch) = name.split_once('-')?;
        if expires.len() != 20 || epoch.len() != 20 {
            return None;
        }
        Some(Self {
            expires_at_ms: expires.parse().ok()?,
            epoch: epoch.parse().ok()?,
        })
    }
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
    /// `PutMode::Create`), each lease lasting `lease` by `clock`.
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
            joined: Mutex::new(None),
        }
    }

    fn joined(&self) -> std::sync::MutexGuard<'_, Option<Heartbeat>> {
        self.joined.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn epochs_dir(&self) -> Path {
        self.prefix.child("fleet").child("epochs")
    }

    fn members_dir(&self) -> Path {
        self.prefix.child("fleet").child("members")
    }

    fn heartbeat_path(&self, replica_id: &str, heartbeat: &Heartbeat) -> Path {
        self.members_dir()
            .child(replica_id)
            .child(heartbeat.file_name())
    }

    /// Claims the next fleet-wide epoch; returns it and the requests it took.
    async fn claim_epoch(&self) -> Result<(u64, u32)> {
        let dir = self.epochs_dir();
        let mut requests = 0;
        for _ in 0..MAX_EPOCH_TRIES {
            let listed: Vec<_> = self
                .store
                .list(Some(&dir))
                .try_collect()
                .await
                .map_err(|error| store_error(format!("listing {dir}"), error))?;
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

    async fn put_heartbeat(&self, heartbeat: &Heartbeat) -> Result<()> {
        let path = self.heartbeat_path(&self.replica_id, heartbeat);
        match self
            .store
            .put_opts(&path, PutPayload::default(), PutMode::Create.into())
            .await
        {
            // Already there: a retried request of ours landed (the name is ours alone).
            Ok(_) | Err(::object_store::Error::AlreadyExists { .. }) => Ok(()),
            Err(error) => Err(store_error(format!("writing {path}"), error)),
        }
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
        let previous = *self.joined();
        let mut requests = 0;
        let now = self.clock.now_ms();
        let lease_ms = duration_ms(self.lease);
        let renews_lapsed = crate::deliberate_bugs::active(
            crate::deliberate_bugs::Bug::MembershipRenewsLapsedLease,
        );
        let (current, rejoined) = match previous {
            // Still ours by our own clock: renew.
            Some(previous) if now < previous.expires_at_ms || renews_lapsed => {
                let next = Heartbeat {
                    epoch: previous.epoch,
                    expires_at_ms: now.saturating_add(lease_ms).max(previous.expires_at_ms + 1),
                };
                self.put_heartbeat(&next).await?;
                requests += 1;
                if self.clock.now_ms() < previous.expires_at_ms || renews_lapsed {
                    (next, false)
                } else {
                    // It landed after the lease ran out: others may have counted this
                    // replica gone. Join again below, from scratch.
                    let _ = self
                        .store
                        .delete(&self.heartbeat_path(&self.replica_id, &next))
                        .await;
                    requests += 1;
                    self.join(&mut requests, true).await?
                }
            }
            Some(_) => self.join(&mut requests, true).await?,
            None => self.join(&mut requests, false).await?,
        };
        if let Some(previous) = previous
            && previous != current
        {
            // The newer heartbeat decides; one left behind is deleted at the next joining
            // or by an observer once it is long expired.
            let _ = self
                .store
                .delete(&self.heartbeat_path(&self.replica_id, &previous))
                .await;
            requests += 1;
        }
        *self.joined() = Some(current);

        // By replica id: they come out of a map keyed by it.
        let (members, expired, read) = self.read_members(Some(current)).await?;
        requests += read;
        Ok(FleetView {
            me: Member {
                replica_id: self.replica_id.clone(),
                epoch: current.epoch,
                expires_at_ms: current.expires_at_ms,
            },
            rejoined,
            members,
            expired,
            requests,
        })
    }

    async fn observe(&self) -> Result<Observed> {
        let (members, expired, _) = self.read_members(None).await?;
        Ok(Observed { members, expired })
    }

    async fn leave(&self) -> Result<()> {
        let Some(current) = self.joined().take() else {
            return Ok(());
        };
        self.store
            .delete(&self.heartbeat_path(&self.replica_id, &current))
            .await
            .map_err(|error| store_error("deleting this replica's heartbeat".into(), error))
    }
}

impl ObjectStoreMembership {
    /// One listing of every member's heartbeats: the live members (this one, as `me` says,
    /// always), the expired ones, and the requests it took. Heartbeats expired for more than
    /// ten leases are deleted on the way.
    async fn read_members(&self, me: Option<Heartbeat>) -> Result<(Vec<Member>, Vec<Member>, u32)> {
        let mut requests = 0;
        let listed: Vec<_> = self
            .store
            .list(Some(&self.members_dir()))
            .try_collect()
            .await
            .map_err(|error| store_error(format!("listing {}", self.members_dir()), error))?;
        requests += 1;
        let mut newest: std::collections::BTreeMap<String, Heartbeat> = Default::default();
        for object in &listed {
            let mut parts = object
                .location
                .parts()
                .collect::<Vec<_>>()
                .into_iter()
                .rev();
            let (Some(file), Some(replica)) = (parts.next(), parts.next()) else {
                continue;
            };
            let Some(heartbeat) = Heartbeat::parse(file.as_ref()) else {
                continue;
            };
            let entry = newest
                .entry(replica.as_ref().to_string())
                .or_insert(heartbeat);
            if heartbeat.expires_at_ms > entry.expires_at_ms {
                *entry = heartbeat;
            }
        }
        if let Some(me) = me {
            newest.insert(self.replica_id.clone(), me);
        }
        let now = self.clock.now_ms();
        let lease_ms = duration_ms(self.lease);
        let skew_ms = duration_ms(MAX_CLOCK_SKEW);
        let forgotten_before = now.saturating_sub(lease_ms.saturating_mul(10));
        let mut members = Vec::new();
        let mut expired = Vec::new();
        for (replica_id, heartbeat) in newest {
            let member = Member {
                replica_id,
                epoch: heartbeat.epoch,
                expires_at_ms: heartbeat.expires_at_ms,
            };
            let is_me = me.is_some() && member.replica_id == self.replica_id;
            if is_me || now < heartbeat.expires_at_ms.saturating_add(skew_ms) {
                members.push(member);
            } else if heartbeat.expires_at_ms < forgotten_before {
                let path = self.heartbeat_path(&member.replica_id, &heartbeat);
                let _ = self.store.delete(&path).await;
                requests += 1;
            } else {
                expired.push(member);
            }
        }
        Ok((members, expired, requests))
    }

    /// Joins with a new epoch; `rejoined` says whether this replica had joined before.
    async fn join(&self, requests: &mut u32, rejoined: bool) -> Result<(Heartbeat, bool)> {
        let (epoch, claimed) = self.claim_epoch().await?;
        *requests += claimed;
        let heartbeat = Heartbeat {
            epoch,
            expires_at_ms: self.clock.now_ms().saturating_add(duration_ms(self.lease)),
        };
        self.put_heartbeat(&heartbeat).await?;
        *requests += 1;
        Ok((heartbeat, rejoined))
    }
}

fn store_error(context: String, error: ::object_store::Error) -> MendError {
    MendError::unavailable(format!("fleet membership: {context}: {error}"), error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use ::object_store::memory::InMemory;

    fn replica(
        store: &Arc<dyn ObjectStore>,
        clock: &Arc<ManualClock>,
        id: &str,
    ) -> ObjectStoreMembership {
        ObjectStoreMembership::new(
            store.clone(),
            Path::from("catalog"),
            id.to_string(),
            Duration::from_secs(10),
            clock.clone(),
        )
    }

    #[tokio::test]
    async fn members_join_renew_expire_rejoin_and_leave() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let clock = Arc::new(ManualClock::new(1_000_000));
        let a = replica(&store, &clock, "a");
        let b = replica(&store, &clock, "b");
        let mut checked = 0;

        let first = a.heartbeat().await.unwrap();
        assert_eq!((first.me.epoch, first.rejoined), (1, false));
        let seen = b.heartbeat().await.unwrap();
        assert_eq!(seen.me.epoch, 2);
        let ids: Vec<_> = seen.members.iter().map(|m| m.replica_id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        checked += 3;

        // Renewing keeps the epoch and leaves one heartbeat per member.
        clock.advance_ms(5_000);
        let renewed = a.heartbeat().await.unwrap();
        assert_eq!((renewed.me.epoch, renewed.rejoined), (1, false));
        assert_eq!(renewed.me.expires_at_ms, 1_015_000);
        let files: Vec<_> = store.list(None).try_collect().await.unwrap();
        let heartbeats = files
            .iter()
            .filter(|o| o.location.as_ref().contains("/members/"))
            .count();
        assert_eq!(heartbeats, 2);
        checked += 3;

        // b stops; past its lease and the skew allowance, a sees it expired, not live.
        clock.advance_ms(6_500);
        let view = a.heartbeat().await.unwrap();
        assert_eq!(view.members.len(), 1);
        assert_eq!(view.expired[0].replica_id, "b");
        assert!(view.owns("anything"));
        checked += 3;

        // b comes back after its lease ran out: it joins again with a newer epoch.
        let back = b.heartbeat().await.unwrap();
        assert!(back.rejoined);
        assert_eq!(back.me.epoch, 3);
        checked += 2;

        // a leaves: b sees it gone, neither live nor expired.
        a.leave().await.unwrap();
        let view = b.heartbeat().await.unwrap();
        assert_eq!(view.members.len(), 1);
        assert!(view.expired.is_empty());
        assert!(view.requests <= 3, "{} requests", view.requests);
        checked += 3;
        println!("object-store membership: {checked} checks");
    }
}

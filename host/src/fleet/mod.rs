//! A fleet: several `mend serve` replicas on one catalog, sharing the supervision of its
//! datasets.
//!
//! - **Membership leases.** Each replica holds one lease in the catalog's own storage and
//!   renews it every supervisor interval ([`Membership::heartbeat`]): a row of `fleet_members`
//!   on Postgres, timed by the database's clock; a heartbeat object under `fleet/members/` on
//!   object storage, timed by the store's clock (the time it stamps each object with, within
//!   [`STORE_CLOCK_ALLOWANCE`]). Either way the replicas' own clocks may be off by any amount.
//!   A heartbeat also reads every member, so a replica sees the fleet in the same request. The
//!   cost of an interval is one statement, or three requests, whatever the number of datasets.
//! - **Epochs.** Joining takes a fencing epoch from a fleet-wide counter (a sequence on
//!   Postgres, put-if-absent claims under `fleet/epochs/` on object storage): every joining,
//!   including a replica's rejoining after its lease lapsed, gets a higher epoch than any
//!   before it. A replica that finds its own lease lapsed never renews it: it joins again as
//!   a new member, since the others may have taken its datasets over meanwhile.
//! - **Ownership.** A dataset's supervision belongs to one live member, chosen by rendezvous
//!   hashing of the dataset id over the live members ([`owner_of`]). Every replica computes
//!   the same owner from the same members, the datasets spread evenly, and a member joining or
//!   leaving moves only the datasets it gains or had. Nothing per dataset is written to own
//!   it, so owning 10,000 idle datasets costs nothing per interval.
//! - **What fences a sweep.** Ownership decides *who* sweeps; it is not what keeps two sweeps
//!   apart. A sweep holds the dataset gate ([`crate::gates`]), which no two processes hold at
//!   once: an advisory lock held by a live connection on Postgres, a lease with a fencing epoch
//!   on object storage whose stale holder is refused at its next write. So a replica that
//!   lost its membership (stalled past its lease) and still believes it owns a dataset can at
//!   worst wait for the gate the new owner holds, or find the gate taken from it; it never
//!   sweeps alongside the new owner. It also stops starting sweeps as soon as its lease ran
//!   out by its own monotonic clock ([`FleetView::lease_is_live`]), counted from just before
//!   the renewal the database or the store timed, so before any other replica may count it
//!   gone, whatever the wall clocks say.

mod object_store;
#[cfg(feature = "postgres")]
mod postgres;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::error::{MendError, Result};
use crate::model::TimestampMs;

pub use self::object_store::{ObjectStoreMembership, STORE_CLOCK_ALLOWANCE};
#[cfg(feature = "postgres")]
pub use self::postgres::PostgresMembership;

/// How long a membership lease lasts unless renewed, by default.
pub const DEFAULT_MEMBER_LEASE: Duration = Duration::from_secs(10);
/// The longest replica name accepted (a replica id adds a dash and 8 characters).
pub const MAX_REPLICA_NAME: usize = 48;

/// One member of the fleet, as a heartbeat found it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Member {
    /// The replica, unique per process start.
    pub replica_id: String,
    /// The fencing epoch it joined with: higher than that of every member that joined before.
    pub epoch: u64,
    /// When its lease ends unless renewed, by the clock of the catalog's storage: the
    /// database's on Postgres; on object storage the store's stamp of its newest heartbeat
    /// plus its lease (by its own clock, for a heartbeat of the first format).
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub expires_at_ms: TimestampMs,
}

/// What one heartbeat found.
#[derive(Debug, Clone)]
pub struct FleetView {
    /// This replica, with the epoch it holds now (a new one after a rejoin).
    pub me: Member,
    /// Until when this replica's lease is live by its own monotonic clock: the lease's length
    /// from just before it sent the renewal (or joining) that the database or the store
    /// timed, so that it ends before any other replica may count this one gone, however far
    /// the wall clocks are apart. See [`FleetView::lease_is_live`].
    pub lease_live_until: Instant,
    /// Whether this heartbeat found this replica's own lease lapsed, so that it joined again
    /// with a new epoch: the others may have taken its datasets over meanwhile.
    pub rejoined: bool,
    /// The live members, this one included, by replica id.
    pub members: Vec<Member>,
    /// Members whose lease ran out without their leaving (they died or stalled), while they
    /// are still on record.
    pub expired: Vec<Member>,
    /// The statements or requests the heartbeat took.
    pub requests: u32,
}

impl FleetView {
    /// Whether this replica's lease is still live: the condition for starting a sweep.
    pub fn lease_is_live(&self) -> bool {
        Instant::now() < self.lease_live_until
    }

    /// The live member that owns `dataset_id`'s supervision.
    pub fn owner_of(&self, dataset_id: &str) -> Option<&Member> {
        owner_of(dataset_id, &self.members)
    }

    /// Whether this replica owns `dataset_id`.
    pub fn owns(&self, dataset_id: &str) -> bool {
        self.owner_of(dataset_id)
            .is_some_and(|owner| owner.replica_id == self.me.replica_id)
    }
}

/// The fleet as read by [`Membership::observe`].
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The live members, by replica id.
    pub members: Vec<Member>,
    /// Members whose lease ran out without their leaving.
    pub expired: Vec<Member>,
}

/// A replica's membership of the fleet.
#[async_trait]
pub trait Membership: Send + Sync + fmt::Debug {
    /// This replica's id: its name, or its host and pid, and a random suffix.
    fn replica_id(&self) -> &str;

    /// How long a lease lasts unless renewed.
    fn lease_duration(&self) -> Duration;

    /// Joins the fleet, or renews this replica's lease; then reads every member. A lease found
    /// lapsed is not renewed: the replica joins again with a new epoch (`rejoined`).
    async fn heartbeat(&self) -> Result<FleetView>;

    /// Reads the fleet without joining it or renewing anything: the live members and those
    /// expired but still on record (for `mend status`, which is not a replica).
    async fn observe(&self) -> Result<Observed>;

    /// Leaves the fleet: the others take this replica's datasets over at their next
    /// heartbeat, as a rebalance rather than a takeover. Best-effort; if it fails, the lease
    /// runs out instead.
    async fn leave(&self) -> Result<()>;
}

/// The live member that owns `dataset_id`: the one with the highest rendezvous score.
/// `members` may be in any order; a tie (of 64-bit scores) goes to the lower replica id.
pub fn owner_of<'a>(dataset_id: &str, members: &'a [Member]) -> Option<&'a Member> {
    members.iter().max_by(|a, b| {
        score(&a.replica_id, dataset_id)
            .cmp(&score(&b.replica_id, dataset_id))
            .then_with(|| b.replica_id.cmp(&a.replica_id))
    })
}

/// The rendezvous score of `replica_id` for `dataset_id`: the first 8 bytes of
/// SHA-256(`replica_id` NUL `dataset_id`). A digest rather than a fast hash so that every
/// replica, of any build, scores alike.
fn score(replica_id: &str, dataset_id: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(replica_id.as_bytes());
    hasher.update([0]);
    hasher.update(dataset_id.as_bytes());
    let digest = hasher.finalize();
    u64::from_be_bytes(
        digest[..8]
            .try_into()
            .expect("a SHA-256 digest has 32 bytes"),
    )
}

/// A replica id: `name` (or this host and pid) and 8 random hex characters, so that a
/// restarted replica is a new member.
pub fn replica_id(name: Option<&str>) -> Result<String> {
    let suffix = &crate::ambient::uuid_v4().simple().to_string()[..8];
    let name = match name {
        Some(name) => {
            check_replica_name(name)?;
            name.to_string()
        }
        None => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .or_else(|| std::env::var("HOSTNAME").ok())
                .unwrap_or_else(|| "replica".to_string());
            let host: String = host
                .trim()
                .chars()
                .map(|c| if is_name_char(c) { c } else { '-' })
                .take(MAX_REPLICA_NAME - 12)
                .collect();
            format!("{host}-{}", std::process::id())
        }
    };
    Ok(format!("{name}-{suffix}"))
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'
}

/// A replica name: 1 to [`MAX_REPLICA_NAME`] characters of `[A-Za-z0-9._-]`, so that it is a
/// path segment and a label value as it is.
pub fn check_replica_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_REPLICA_NAME || !name.chars().all(is_name_char) {
        return Err(MendError::invalid(format!(
            "replica name {name:?} must be 1 to {MAX_REPLICA_NAME} characters of letters, digits, \
             '.', '_' and '-'"
        )));
    }
    if name.starts_with('.') {
        return Err(MendError::invalid(format!(
            "replica name {name:?} must not start with '.'"
        )));
    }
    Ok(())
}

/// Checks a membership lease against [`crate::bounds::MEMBER_LEASE_MS`].
pub fn check_member_lease(lease: Duration) -> Result<()> {
    let ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
    crate::bounds::MEMBER_LEASE_MS.check(ms).map(|_| ())
}

/// The membership of a process alone on its catalog (`memory://`, which no other process can
/// see): always the one member, epoch 1, costing nothing.
#[derive(Debug)]
pub struct SoloMembership {
    replica_id: String,
    lease: Duration,
}

impl SoloMembership {
    /// The only member, `replica_id`.
    pub fn new(replica_id: String, lease: Duration) -> Self {
        Self { replica_id, lease }
    }
}

#[async_trait]
impl Membership for SoloMembership {
    fn replica_id(&self) -> &str {
        &self.replica_id
    }

    fn lease_duration(&self) -> Duration {
        self.lease
    }

    async fn heartbeat(&self) -> Result<FleetView> {
        let me = Member {
            replica_id: self.replica_id.clone(),
            epoch: 1,
            expires_at_ms: TimestampMs::MAX,
        };
        Ok(FleetView {
            me: me.clone(),
            lease_live_until: far_future(),
            rejoined: false,
            members: vec![me],
            expired: Vec::new(),
            requests: 0,
        })
    }

    async fn observe(&self) -> Result<Observed> {
        Ok(Observed {
            members: self.heartbeat().await?.members,
            expired: Vec::new(),
        })
    }

    async fn leave(&self) -> Result<()> {
        Ok(())
    }
}

/// The membership of a replica named `replica_id` in the fleet of the catalog at
/// `catalog_url`: a `fleet_members` row for a Postgres catalog (on a pool of one connection of
/// its own), heartbeat objects beside the datasets for an object-store one, and the process
/// alone for `memory://`.
pub async fn open_membership(
    catalog_url: &str,
    replica_id: String,
    lease: Duration,
) -> Result<Arc<dyn Membership>> {
    check_member_lease(lease)?;
    if crate::catalog::is_postgres_url(catalog_url) {
        return open_postgres(catalog_url, replica_id, lease).await;
    }
    if catalog_url.starts_with("memory://") {
        return Ok(Arc::new(SoloMembership::new(replica_id, lease)));
    }
    let (store, prefix) = crate::catalog::object_store::open_store(catalog_url)?;
    Ok(Arc::new(ObjectStoreMembership::new(
        store,
        prefix,
        replica_id,
        lease,
        Arc::new(crate::clock::SystemClock),
    )))
}

#[cfg(feature = "postgres")]
async fn open_postgres(
    catalog_url: &str,
    replica_id: String,
    lease: Duration,
) -> Result<Arc<dyn Membership>> {
    let options: sqlx::postgres::PgConnectOptions = catalog_url
        .parse()
        .map_err(|error| MendError::unavailable("parse the fleet's database URL", error))?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        // One heartbeat at a time: one connection is all a replica's membership needs.
        .max_connections(1)
        .acquire_timeout(lease)
        .connect_lazy_with(options.application_name(&format!("mend fleet {replica_id}")));
    Ok(Arc::new(PostgresMembership::new(pool, replica_id, lease)))
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(
    _catalog_url: &str,
    _replica_id: String,
    _lease: Duration,
) -> Result<Arc<dyn Membership>> {
    Err(crate::catalog::no_postgres_backend())
}

/// An instant no lease reaches: 30 years from now, as tokio's own "never" is.
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(30 * 365 * 24 * 60 * 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str) -> Member {
        Member {
            replica_id: id.to_string(),
            epoch: 1,
            expires_at_ms: 0,
        }
    }

    #[test]
    fn datasets_spread_evenly_and_a_leaving_member_moves_only_its_own() {
        let three = [member("a-1"), member("b-2"), member("c-3")];
        let datasets: Vec<String> = (0..3000).map(|i| format!("dataset-{i}")).collect();
        let owners: Vec<&str> = datasets
            .iter()
            .map(|d| owner_of(d, &three).unwrap().replica_id.as_str())
            .collect();
        let mut checked = 0;
        for id in ["a-1", "b-2", "c-3"] {
            let owned = owners.iter().filter(|o| **o == id).count();
            assert!((850..=1150).contains(&owned), "{id} owns {owned} of 3000");
            checked += 1;
        }
        // The order of the members does not matter.
        let reversed = [member("c-3"), member("b-2"), member("a-1")];
        for (d, owner) in datasets.iter().zip(&owners) {
            assert_eq!(owner_of(d, &reversed).unwrap().replica_id, *owner);
            checked += 1;
        }
        // b leaves: only b's datasets move.
        let two = [member("a-1"), member("c-3")];
        for (d, owner) in datasets.iter().zip(&owners) {
            let now = owner_of(d, &two).unwrap().replica_id.as_str();
            if *owner != "b-2" {
                assert_eq!(now, *owner);
            }
            checked += 1;
        }
        assert!(owner_of("x", &[]).is_none());
        println!("rendezvous ownership: {checked} checks");
    }

    #[test]
    fn replica_names_are_checked() {
        assert!(
            replica_id(Some("replica-1"))
                .unwrap()
                .starts_with("replica-1-")
        );
        assert!(replica_id(None).is_ok());
        for bad in ["", "a/b", ".hidden", &"x".repeat(49), "sp ace"] {
            assert!(check_replica_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_member_lease(Duration::from_millis(10)).is_err());
        assert!(check_member_lease(DEFAULT_MEMBER_LEASE).is_ok());
    }
}

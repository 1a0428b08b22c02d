//! The object-store fleet membership with replicas whose clocks are far off, in real time, on
//! memory, a local directory and the S3-compatible test server (`scripts/with-s3`), whose
//! stamps are whole seconds as S3's are. Three replicas share a store: one with the right
//! time, one 30 s ahead, one five minutes behind.
//!
//! 1. While all three heartbeat, every view shows all three live at the epochs they joined
//!    with, none expired and none rejoined, and each dataset owned by the replica rendezvous
//!    hashing over all three picks.
//! 2. The one ahead stops heartbeating, then comes back; then the one behind does. The other
//!    two count it gone within its lease plus the allowance (plus the stamps' second and a
//!    heartbeat's interval), never sooner than its lease and the allowance less a second, and
//!    only once its own view says its lease ran out (by its own monotonic clock); back, it
//!    joins again with a new epoch.
//!
//! The same behaviours under tokio's paused clock, to the millisecond, with stamps of either
//! granularity and slow puts, are the library's own tests (`fleet::object_store::tests`).

use std::sync::Arc;
use std::time::Duration;

use mend::clock::{Clock, SystemClock};
use mend::fleet::{FleetView, Member, Membership, ObjectStoreMembership, STORE_CLOCK_ALLOWANCE};
use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(3);
const INTERVAL: Duration = Duration::from_millis(250);
/// The replicas' clocks: right, 30 s ahead, five minutes behind.
const SKEWS_MS: [i64; 3] = [0, 30_000, -300_000];
/// The coarsest stamps a store gives (S3's whole seconds).
const STAMP_GRANULARITY: Duration = Duration::from_secs(1);
/// What a heartbeat on a loaded machine may take beyond its interval, for the liveness bound.
const SLACK: Duration = Duration::from_millis(1_500);
/// Datasets whose owners are compared.
const DATASETS: usize = 100;

/// A replica's wall clock: the system's, off by `skew_ms`.
#[derive(Debug)]
struct SkewedClock {
    skew_ms: i64,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms() + self.skew_ms
    }
}

fn ids(members: &[Member]) -> Vec<&str> {
    members.iter().map(|m| m.replica_id.as_str()).collect()
}

async fn skewed_replicas_on(label: &str, store: Arc<dyn ObjectStore>, prefix: Path) {
    let replicas: Vec<ObjectStoreMembership> = SKEWS_MS
        .iter()
        .enumerate()
        .map(|(i, skew_ms)| {
            ObjectStoreMembership::new(
                store.clone(),
                prefix.clone(),
                format!("r{i}"),
                LEASE,
                Arc::new(SkewedClock { skew_ms: *skew_ms }),
            )
        })
        .collect();
    let datasets: Vec<String> = (0..DATASETS).map(|i| format!("dataset-{i}")).collect();
    let mut checked = 0;

    let mut epochs = Vec::new();
    let mut everyone = Vec::new();
    for replica in &replicas {
        let view = replica.heartbeat().await.unwrap();
        epochs.push(view.me.epoch);
        everyone = view.members;
    }
    assert_eq!(ids(&everyone), ["r0", "r1", "r2"], "{label}");
    let owners: Vec<String> = datasets
        .iter()
        .map(|d| {
            mend::fleet::owner_of(d, &everyone)
                .unwrap()
                .replica_id
                .clone()
        })
        .collect();

    // 1. All three heartbeat for longer than a lease, the allowance and a stamp's second.
    let until = Instant::now() + LEASE + STORE_CLOCK_ALLOWANCE + STAMP_GRANULARITY * 2;
    let mut views = 0;
    while Instant::now() < until {
        tokio::time::sleep(INTERVAL).await;
        for (index, replica) in replicas.iter().enumerate() {
            let view = replica.heartbeat().await.unwrap();
            assert_eq!(
                ids(&view.members),
                ["r0", "r1", "r2"],
                "{label}: r{index}'s view"
            );
            assert!(view.expired.is_empty(), "{label}: {:?}", view.expired);
            assert!(!view.rejoined, "{label}: r{index} rejoined");
            assert_eq!(view.me.epoch, epochs[index], "{label}");
            assert!(view.lease_is_live(), "{label}");
            checked += 5;
            for (dataset, owner) in datasets.iter().zip(&owners) {
                assert_eq!(
                    view.owner_of(dataset).map(|m| m.replica_id.as_str()),
                    Some(owner.as_str()),
                    "{label}"
                );
                checked += 1;
            }
            views += 1;
        }
    }

    // 2. The one ahead, then the one behind, stops and comes back.
    let mut gone_after_ms = Vec::new();
    for stopped in [1, 2] {
        let last_sent = Instant::now();
        let stopped_view: FleetView = replicas[stopped].heartbeat().await.unwrap();
        let stopped_id = format!("r{stopped}");
        let others: Vec<usize> = (0..3).filter(|i| *i != stopped).collect();
        let mut counted_gone = [false; 3];
        let deadline = last_sent + LEASE + STORE_CLOCK_ALLOWANCE + Duration::from_secs(20);
        while others.iter().any(|i| !counted_gone[*i]) {
            assert!(
                Instant::now() < deadline,
                "{label}: r{stopped} never counted gone"
            );
            tokio::time::sleep(INTERVAL).await;
            for &index in &others {
                let view = replicas[index].heartbeat().await.unwrap();
                let answered = Instant::now();
                assert!(!view.rejoined, "{label}: r{index} rejoined");
                let live = view.members.iter().any(|m| m.replica_id == stopped_id);
                let expired = view.expired.iter().any(|m| m.replica_id == stopped_id);
                assert!(live != expired, "{label}: {view:?}");
                checked += 2;
                if live || counted_gone[index] {
                    continue;
                }
                let since = answered - last_sent;
                // Only once the stopped replica's own view says its lease ran out, and not
                // before its lease and the allowance, less a stamp's second.
                assert!(answered >= stopped_view.lease_live_until, "{label}");
                assert!(!stopped_view.lease_is_live(), "{label}");
                assert!(
                    since + STAMP_GRANULARITY >= LEASE + STORE_CLOCK_ALLOWANCE,
                    "{label}: r{index} counted r{stopped} gone {since:?} after its last heartbeat"
                );
                // Within its lease and the allowance, a stamp's second, an interval and slack.
                assert!(
                    since <= LEASE + STORE_CLOCK_ALLOWANCE + STAMP_GRANULARITY + INTERVAL + SLACK,
                    "{label}: r{index} counted r{stopped} gone only {since:?} after its last \
                     heartbeat"
                );
                checked += 4;
                counted_gone[index] = true;
                gone_after_ms.push(since.as_millis());
            }
        }
        // Back: its lease ran out, so it joins again with a new epoch, and the others see it.
        let back = replicas[stopped].heartbeat().await.unwrap();
        assert!(
            back.rejoined && back.me.epoch > epochs[stopped],
            "{label}: {back:?}"
        );
        epochs[stopped] = back.me.epoch;
        for &index in &others {
            let view = replicas[index].heartbeat().await.unwrap();
            assert_eq!(ids(&view.members), ["r0", "r1", "r2"], "{label}");
            checked += 1;
        }
        checked += 1;
    }
    for replica in &replicas {
        replica.leave().await.unwrap();
    }
    println!(
        "fleet clocks [{label}]: clocks {SKEWS_MS:?} ms, lease {} ms, allowance {} ms: {views} \
         views with all three live; stopped replicas counted gone after {gone_after_ms:?} ms; \
         {checked} checks",
        LEASE.as_millis(),
        STORE_CLOCK_ALLOWANCE.as_millis()
    );
}

#[tokio::test]
async fn skewed_clocks_on_memory() {
    skewed_replicas_on("memory", Arc::new(InMemory::new()), Path::from("catalog")).await;
}

#[tokio::test]
async fn skewed_clocks_on_a_local_directory() {
    let directory = tempfile::tempdir().unwrap();
    let url = format!("file://{}", directory.path().display());
    let (store, prefix) = mend::catalog::object_store::open_store(&url).unwrap();
    skewed_replicas_on("local", store, prefix).await;
}

#[tokio::test]
async fn skewed_clocks_on_s3() {
    let url = format!(
        "{}/fleet-clocks-{}",
        mend_tests::harness::s3_url(),
        uuid::Uuid::new_v4().simple()
    );
    let (store, prefix) = mend::catalog::object_store::open_store(&url).unwrap();
    skewed_replicas_on("s3", store, prefix).await;
}

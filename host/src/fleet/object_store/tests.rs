//! The object-store membership under tokio's paused clock, over an in-memory store that stamps
//! objects with a clock of its own ([`StampingStore`]: to the millisecond, or truncated to
//! whole seconds as S3 does), with replicas whose wall clocks are off by 30 s ahead or five
//! minutes behind. The same behaviours on real stores (memory, a local directory, S3) in real
//! time are `tests/tests/fleet_clocks.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use ::object_store::memory::InMemory;
use ::object_store::path::Path;
use ::object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use async_trait::async_trait;
use futures::TryStreamExt;
use futures::stream::{BoxStream, StreamExt};
use tokio::time::Instant;

use super::{Heartbeat, ObjectStoreMembership, OldHeartbeat, STORE_CLOCK_ALLOWANCE};
use crate::clock::Clock;
use crate::fleet::{FleetView, Membership, owner_of};

const LEASE: Duration = Duration::from_secs(10);
const LEASE_MS: i64 = 10_000;
const ALLOWANCE_MS: i64 = 2_000;
/// Where the store's clock stands when a test starts (2026-12-01T00:00:00Z).
const STORE_EPOCH_MS: i64 = 1_796_083_200_000;
/// The replicas' clocks: right, 30 s ahead, five minutes behind.
const SKEWS_MS: [i64; 3] = [0, 30_000, -300_000];
/// The stores' stamps: to the millisecond (memory, a local directory), whole seconds (S3).
const GRANULARITIES_MS: [i64; 2] = [1, 1_000];

/// An in-memory store whose objects are stamped by the store's own clock: tokio's time since
/// the store was made, from [`STORE_EPOCH_MS`], truncated to `granularity_ms`. One put whose
/// path contains a given text can be made slow, before it lands and before it is answered.
#[derive(Debug)]
struct StampingStore {
    inner: InMemory,
    started: Instant,
    granularity_ms: i64,
    stamps: Mutex<HashMap<Path, i64>>,
    slow_put: Mutex<Option<SlowPut>>,
}

#[derive(Debug, Clone)]
struct SlowPut {
    fragment: String,
    before_landing: Duration,
    before_answer: Duration,
}

impl StampingStore {
    fn new(granularity_ms: i64) -> Arc<Self> {
        Arc::new(Self {
            inner: InMemory::new(),
            started: Instant::now(),
            granularity_ms,
            stamps: Mutex::default(),
            slow_put: Mutex::default(),
        })
    }

    /// The store's clock, to the millisecond.
    fn now_ms(&self) -> i64 {
        STORE_EPOCH_MS + self.started.elapsed().as_millis() as i64
    }

    /// Makes the next put whose path contains `fragment` wait `before_landing`, land, then
    /// wait `before_answer`.
    fn slow_down_next_put(
        &self,
        fragment: &str,
        before_landing: Duration,
        before_answer: Duration,
    ) {
        *self.slow_put.lock().unwrap() = Some(SlowPut {
            fragment: fragment.to_string(),
            before_landing,
            before_answer,
        });
    }

    fn restamp(&self, mut meta: ObjectMeta) -> ObjectMeta {
        if let Some(ms) = self.stamps.lock().unwrap().get(&meta.location) {
            meta.last_modified = (UNIX_EPOCH + Duration::from_millis(*ms as u64)).into();
        }
        meta
    }

    async fn paths(&self, under: &str) -> Vec<String> {
        let listed: Vec<ObjectMeta> = self.inner.list(None).try_collect().await.unwrap();
        listed
            .into_iter()
            .map(|meta| meta.location.to_string())
            .filter(|path| path.contains(under))
            .collect()
    }
}

impl std::fmt::Display for StampingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StampingStore({} ms)", self.granularity_ms)
    }
}

#[async_trait]
impl ObjectStore for StampingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> ::object_store::Result<PutResult> {
        let slow = {
            let mut slow_put = self.slow_put.lock().unwrap();
            match &*slow_put {
                Some(slow) if location.as_ref().contains(&slow.fragment) => slow_put.take(),
                _ => None,
            }
        };
        if let Some(slow) = &slow {
            tokio::time::sleep(slow.before_landing).await;
        }
        let put = self.inner.put_opts(location, payload, opts).await;
        if put.is_ok() {
            let now = self.now_ms();
            let stamp = now - now.rem_euclid(self.granularity_ms);
            self.stamps.lock().unwrap().insert(location.clone(), stamp);
        }
        if let Some(slow) = &slow {
            tokio::time::sleep(slow.before_answer).await;
        }
        put
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> ::object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> ::object_store::Result<GetResult> {
        let mut got = self.inner.get_opts(location, options).await?;
        got.meta = self.restamp(got.meta);
        Ok(got)
    }

    async fn delete(&self, location: &Path) -> ::object_store::Result<()> {
        self.stamps.lock().unwrap().remove(location);
        self.inner.delete(location).await
    }

    fn list(
        &self,
        prefix: Option<&Path>,
    ) -> BoxStream<'static, ::object_store::Result<ObjectMeta>> {
        // The in-memory store's listing is ready at once: read here, where the stamps are.
        let listed: Vec<_> = futures::executor::block_on(self.inner.list(prefix).collect());
        let listed: Vec<_> = listed
            .into_iter()
            .map(|meta| meta.map(|meta| self.restamp(meta)))
            .collect();
        futures::stream::iter(listed).boxed()
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&Path>,
    ) -> ::object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> ::object_store::Result<()> {
        self.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> ::object_store::Result<()> {
        self.inner.copy_if_not_exists(from, to).await
    }
}

/// A replica's wall clock: the store's, off by `skew_ms`.
#[derive(Debug)]
struct SkewedClock {
    started: Instant,
    skew_ms: i64,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> i64 {
        STORE_EPOCH_MS + self.started.elapsed().as_millis() as i64 + self.skew_ms
    }
}

fn replica(store: &Arc<StampingStore>, id: &str, skew_ms: i64) -> ObjectStoreMembership {
    let shared: Arc<dyn ObjectStore> = store.clone();
    ObjectStoreMembership::new(
        shared,
        Path::from("catalog"),
        id.to_string(),
        LEASE,
        Arc::new(SkewedClock {
            started: store.started,
            skew_ms,
        }),
    )
}

fn ids(members: &[crate::fleet::Member]) -> Vec<&str> {
    members.iter().map(|m| m.replica_id.as_str()).collect()
}

/// Moves tokio's paused clock to `ms` after the store started.
async fn at(store: &StampingStore, ms: u64) {
    tokio::time::sleep_until(store.started + Duration::from_millis(ms)).await;
}

#[test]
fn the_allowance_is_what_the_tests_assume() {
    assert_eq!(
        STORE_CLOCK_ALLOWANCE,
        Duration::from_millis(ALLOWANCE_MS as u64)
    );
}

#[tokio::test(start_paused = true)]
async fn members_join_renew_expire_rejoin_and_leave() {
    let store = StampingStore::new(1);
    let a = replica(&store, "a", 0);
    let b = replica(&store, "b", 0);
    let mut checked = 0;

    let first = a.heartbeat().await.unwrap();
    assert_eq!((first.me.epoch, first.rejoined), (1, false));
    let seen = b.heartbeat().await.unwrap();
    assert_eq!(seen.me.epoch, 2);
    assert_eq!(ids(&seen.members), ["a", "b"]);
    checked += 3;

    // Renewing keeps the epoch, leaves one heartbeat per member and costs three requests; the
    // expiry shown is the store's stamp plus the lease.
    at(&store, 5_000).await;
    let renewed = a.heartbeat().await.unwrap();
    assert_eq!((renewed.me.epoch, renewed.rejoined), (1, false));
    assert_eq!(renewed.me.expires_at_ms, STORE_EPOCH_MS + 15_000);
    assert_eq!(renewed.requests, 3);
    assert_eq!(store.paths("/members/").await.len(), 2);
    checked += 4;

    // b stops at 0 s. Until its stamp plus the lease and the allowance (12 s) it is live;
    // from then on a sees it expired.
    at(&store, 11_999).await;
    assert_eq!(ids(&a.heartbeat().await.unwrap().members), ["a", "b"]);
    at(&store, 12_000).await;
    let view = a.heartbeat().await.unwrap();
    assert_eq!(ids(&view.members), ["a"]);
    assert_eq!(ids(&view.expired), ["b"]);
    assert!(view.owns("anything"));
    checked += 4;

    // b comes back after its lease ran out (by its own monotonic clock): it joins again with
    // a newer epoch, and its old heartbeat is gone.
    let back = b.heartbeat().await.unwrap();
    assert!(back.rejoined);
    assert_eq!(back.me.epoch, 3);
    let b_beats = store.paths("/members/b/").await;
    assert_eq!(b_beats.len(), 1, "{b_beats:?}");
    checked += 3;

    // a leaves: b sees it gone, neither live nor expired.
    a.leave().await.unwrap();
    let view = b.heartbeat().await.unwrap();
    assert_eq!(ids(&view.members), ["b"]);
    assert!(view.expired.is_empty());
    assert_eq!(view.requests, 3);
    assert!(store.paths("/members/a/").await.is_empty());
    checked += 4;
    println!("object-store membership: {checked} checks");
}

/// Three replicas whose clocks are right, 30 s ahead and five minutes behind heartbeat every
/// second for two minutes: each view shows all three live at the epoch they joined with, none
/// expired, no rejoin, and datasets owned as rendezvous hashing over all three says.
#[tokio::test(start_paused = true)]
async fn replicas_with_skewed_clocks_never_take_each_other_over() {
    let datasets: Vec<String> = (0..200).map(|i| format!("dataset-{i}")).collect();
    let mut checked = 0;
    for granularity_ms in GRANULARITIES_MS {
        let store = StampingStore::new(granularity_ms);
        let replicas: Vec<ObjectStoreMembership> = SKEWS_MS
            .iter()
            .enumerate()
            .map(|(i, skew)| replica(&store, &format!("r{i}"), *skew))
            .collect();
        let mut epochs = Vec::new();
        let mut everyone = Vec::new();
        for replica in &replicas {
            let view = replica.heartbeat().await.unwrap();
            epochs.push(view.me.epoch);
            everyone = view.members;
        }
        assert_eq!(ids(&everyone), ["r0", "r1", "r2"]);
        let expected_owners: Vec<String> = datasets
            .iter()
            .map(|d| owner_of(d, &everyone).unwrap().replica_id.clone())
            .collect();
        let mut owned = [0usize; 3];
        for step in 0..360u64 {
            // Each replica on its own beat of 1 s, a third of a second apart.
            at(&store, 1_000 + step * 333).await;
            let index = (step % 3) as usize;
            let view = replicas[index].heartbeat().await.unwrap();
            assert_eq!(
                ids(&view.members),
                ["r0", "r1", "r2"],
                "{granularity_ms} ms at step {step}"
            );
            assert!(view.expired.is_empty(), "{:?}", view.expired);
            assert!(!view.rejoined);
            assert_eq!(view.me.epoch, epochs[index]);
            assert!(view.lease_is_live());
            checked += 5;
            for (dataset, expected) in datasets.iter().zip(&expected_owners) {
                let owner = view.owner_of(dataset).map(|m| m.replica_id.as_str());
                assert_eq!(owner, Some(expected.as_str()));
                owned[index] += usize::from(view.owns(dataset));
                checked += 1;
            }
        }
        // The split is rendezvous hashing's over all three: each replica owns about a third.
        for (index, count) in owned.iter().enumerate() {
            let per_view = *count / 120;
            assert!(
                (40..=95).contains(&per_view),
                "r{index} owns {per_view} of 200"
            );
            checked += 1;
        }
    }
    println!("skewed clocks, no takeover: {checked} checks");
}

/// One replica of three stops heartbeating, for each of the three clocks and both stamp
/// granularities. The others count it gone by their first heartbeat the store stamps its
/// lease and the allowance after its last one (within the stamps' granularity), never before
/// its own lease ran out by its own monotonic clock.
#[tokio::test(start_paused = true)]
async fn a_stopped_replica_is_counted_gone_after_its_lease_whatever_the_clocks() {
    const STEP_MS: u64 = 100;
    let mut checked = 0;
    for granularity_ms in GRANULARITIES_MS {
        for stopped in 0..3 {
            let store = StampingStore::new(granularity_ms);
            let replicas: Vec<ObjectStoreMembership> = SKEWS_MS
                .iter()
                .enumerate()
                .map(|(i, skew)| replica(&store, &format!("r{i}"), *skew))
                .collect();
            let mut last: Vec<Option<FleetView>> = vec![None, None, None];
            // Three seconds of heartbeats, then the last one of the stopped replica at 3.05 s.
            for step in 0..30u64 {
                at(&store, step * STEP_MS).await;
                let index = (step % 3) as usize;
                last[index] = Some(replicas[index].heartbeat().await.unwrap());
            }
            at(&store, 3_050).await;
            let last_sent = Instant::now();
            let stopped_view = replicas[stopped].heartbeat().await.unwrap();
            let stopped_id = format!("r{stopped}");
            let others: Vec<usize> = (0..3).filter(|i| *i != stopped).collect();
            let mut counted_gone = [false; 3];
            let mut step = 31u64;
            while others.iter().any(|i| !counted_gone[*i]) {
                at(&store, step * STEP_MS).await;
                let index = others[(step % 2) as usize];
                step += 1;
                let started = Instant::now();
                let view = replicas[index].heartbeat().await.unwrap();
                let since_ms = (started - last_sent).as_millis() as i64;
                let live = view.members.iter().any(|m| m.replica_id == stopped_id);
                let expired = view.expired.iter().any(|m| m.replica_id == stopped_id);
                assert!(live != expired, "r{stopped} is live or expired: {view:?}");
                if live {
                    // Never counted gone early, not even by a stamp truncated to the second.
                    assert!(since_ms < LEASE_MS + ALLOWANCE_MS + granularity_ms + STEP_MS as i64);
                } else {
                    // The stopped replica stopped acting before anyone counted it gone: by
                    // its own monotonic clock its lease had run out.
                    assert!(started >= stopped_view.lease_live_until);
                    assert!(!stopped_view.lease_is_live());
                    // And it was counted gone no earlier than its lease, and within its lease
                    // plus the allowance (and the stamps' granularity).
                    assert!(
                        since_ms >= LEASE_MS + ALLOWANCE_MS - granularity_ms,
                        "{since_ms}"
                    );
                    if !counted_gone[index] {
                        assert!(
                            since_ms
                                <= LEASE_MS + ALLOWANCE_MS + granularity_ms + 2 * STEP_MS as i64,
                            "r{index} counted r{stopped} gone {since_ms} ms after its last heartbeat"
                        );
                        counted_gone[index] = true;
                    }
                    checked += 2;
                }
                checked += 2;
            }
            // It comes back: its lease ran out, so it joins again with a new epoch.
            let back = replicas[stopped].heartbeat().await.unwrap();
            assert!(back.rejoined && back.me.epoch > stopped_view.me.epoch);
            checked += 1;
        }
    }
    println!("a stopped replica counted gone, every clock and granularity: {checked} checks");
}

/// A renewal whose put is answered after the lease it renews ran out is not a renewal: the
/// replica joins again with a new epoch, whether its heartbeat landed in time (and was only
/// answered late) or landed after another replica counted it gone.
#[tokio::test(start_paused = true)]
async fn a_renewal_answered_after_the_lease_ran_out_joins_again() {
    let mut checked = 0;
    for granularity_ms in GRANULARITIES_MS {
        // Lands at 5 s, in time, and is answered at 11 s, after the lease (10 s).
        let store = StampingStore::new(granularity_ms);
        let (a, b) = (replica(&store, "a", 30_000), replica(&store, "b", -300_000));
        let joined = a.heartbeat().await.unwrap();
        b.heartbeat().await.unwrap();
        at(&store, 5_000).await;
        b.heartbeat().await.unwrap();
        store.slow_down_next_put("/members/a/", Duration::ZERO, Duration::from_secs(6));
        let view = a.heartbeat().await.unwrap();
        assert!(view.rejoined);
        assert!(view.me.epoch > joined.me.epoch);
        assert!(view.lease_is_live());
        let b_view = b.heartbeat().await.unwrap();
        let a_seen = b_view.members.iter().find(|m| m.replica_id == "a").unwrap();
        assert_eq!(a_seen.epoch, view.me.epoch);
        assert_eq!(store.paths("/members/a/").await.len(), 1);
        checked += 6;

        // Sent at 5 s, lands at 13 s, after b counted a gone at 12.5 s (a's stamp of 0 s,
        // plus the lease and the allowance), by which time a's own lease had run out (10 s).
        let store = StampingStore::new(granularity_ms);
        let (a, b) = (replica(&store, "a", -300_000), replica(&store, "b", 30_000));
        let joined = a.heartbeat().await.unwrap();
        b.heartbeat().await.unwrap();
        at(&store, 5_000).await;
        b.heartbeat().await.unwrap();
        store.slow_down_next_put("/members/a/", Duration::from_secs(8), Duration::ZERO);
        let (a_view, b_view) = tokio::join!(a.heartbeat(), async {
            at(&store, 12_500).await;
            let started = Instant::now();
            (started, b.heartbeat().await.unwrap())
        });
        let (a_view, (b_started, b_view)) = (a_view.unwrap(), b_view);
        assert_eq!(ids(&b_view.expired), ["a"]);
        assert!(b_started >= joined.lease_live_until);
        assert!(a_view.rejoined);
        assert!(a_view.me.epoch > joined.me.epoch);
        // Back under the new epoch only.
        at(&store, 14_000).await;
        let b_view = b.heartbeat().await.unwrap();
        let a_seen = b_view.members.iter().find(|m| m.replica_id == "a").unwrap();
        assert_eq!(a_seen.epoch, a_view.me.epoch);
        checked += 5;
    }
    println!("late renewals join again: {checked} checks");
}

/// During a rolling upgrade, heartbeats of the first format (`{expires_at_ms}-{epoch}`, by the
/// writer's clock) are judged as their writers judge each other: live until their expiry plus
/// 1 s by this replica's clock, then expired, then deleted ten leases after they expired.
/// Replicas of that format ignore the new names rather than misread them.
#[tokio::test(start_paused = true)]
async fn heartbeats_of_the_first_format_are_judged_as_before() {
    let store = StampingStore::new(1);
    let new = replica(&store, "new", 0);
    let old_path = Path::from(format!(
        "catalog/fleet/members/old/{:020}-{:020}",
        STORE_EPOCH_MS + LEASE_MS,
        7
    ));
    store.put(&old_path, PutPayload::default()).await.unwrap();
    let mut checked = 0;

    let view = new.heartbeat().await.unwrap();
    assert_eq!(ids(&view.members), ["new", "old"]);
    let old = view.members.iter().find(|m| m.replica_id == "old").unwrap();
    assert_eq!(
        (old.epoch, old.expires_at_ms),
        (7, STORE_EPOCH_MS + LEASE_MS)
    );
    checked += 2;

    at(&store, (LEASE_MS + 999) as u64).await;
    assert_eq!(ids(&new.heartbeat().await.unwrap().members), ["new", "old"]);
    at(&store, (LEASE_MS + 1_000) as u64).await;
    let view = new.heartbeat().await.unwrap();
    assert_eq!(
        (ids(&view.members), ids(&view.expired)),
        (vec!["new"], vec!["old"])
    );
    checked += 2;

    // Ten leases after it expired (by this replica's clock), it is deleted.
    at(&store, (11 * LEASE_MS + 1) as u64).await;
    let view = new.heartbeat().await.unwrap();
    assert!(view.expired.is_empty());
    assert!(store.paths("/members/old/").await.is_empty());
    checked += 2;

    // The first format's reading of a new name: none.
    let name = Heartbeat {
        epoch: 3,
        beat: 9,
        lease_ms: 10_000,
    }
    .file_name();
    assert_eq!(OldHeartbeat::parse(&name), None);
    checked += 1;
    println!("first-format heartbeats: {checked} checks");
}

/// An observer (`mend status`) learns the store's time from a probe it puts, whatever its own
/// clock says, and leaves no probe behind; probes older than ten leases are deleted.
#[tokio::test(start_paused = true)]
async fn an_observer_judges_by_the_store_clock_and_cleans_up_its_probe() {
    let store = StampingStore::new(1_000);
    let (a, b) = (replica(&store, "a", 0), replica(&store, "b", 0));
    a.heartbeat().await.unwrap();
    b.heartbeat().await.unwrap();
    let stale_probe = Path::from("catalog/fleet/probes/mend-status-gone-00000000000000000001");
    store
        .put(&stale_probe, PutPayload::default())
        .await
        .unwrap();
    let mut checked = 0;
    for skew_ms in SKEWS_MS {
        let observer = replica(&store, &format!("mend-status-{}", skew_ms.abs()), skew_ms);
        let seen = observer.observe().await.unwrap();
        assert_eq!(ids(&seen.members), ["a", "b"]);
        checked += 1;
    }
    // b stops; past its stamp, the lease and the allowance, observers see it expired.
    at(&store, 6_000).await;
    a.heartbeat().await.unwrap();
    at(&store, 12_000).await;
    a.heartbeat().await.unwrap();
    for skew_ms in SKEWS_MS {
        let observer = replica(
            &store,
            &format!("mend-status-late-{}", skew_ms.abs()),
            skew_ms,
        );
        let seen = observer.observe().await.unwrap();
        assert_eq!(
            (ids(&seen.members), ids(&seen.expired)),
            (vec!["a"], vec!["b"])
        );
        checked += 1;
    }
    // The stale probe was stamped at 0 s: at 101 s it is older than ten leases.
    assert_eq!(store.paths("/probes/").await, [stale_probe.to_string()]);
    at(&store, 101_000).await;
    replica(&store, "mend-status-y", 0).observe().await.unwrap();
    assert!(store.paths("/probes/").await.is_empty());
    checked += 2;
    println!("observers: {checked} checks");
}

#[tokio::test(start_paused = true)]
async fn heartbeat_names_parse_and_a_claimed_lease_is_bounded() {
    let heartbeat = Heartbeat {
        epoch: 12,
        beat: 345,
        lease_ms: 10_000,
    };
    let name = heartbeat.file_name();
    assert_eq!(
        name,
        "epoch-00000000000000000012-beat-00000000000000000345-lease-10000ms"
    );
    assert_eq!(Heartbeat::parse(&name), Some(heartbeat));
    let mut checked = 2;
    for bad in [
        "epoch-12-beat-00000000000000000345-lease-10000ms",
        "epoch-00000000000000000012-beat-00000000000000000345-lease-ms",
        "epoch-00000000000000000012-beat-00000000000000000345-lease-+1ms",
        "epoch-00000000000000000012-beat-00000000000000000345-lease-10000",
        "epoch-0000000000000000001x-beat-00000000000000000345-lease-10000ms",
        "00000000000000000012-00000000000000000345",
    ] {
        assert_eq!(Heartbeat::parse(bad), None, "{bad}");
        checked += 1;
    }

    // A member whose name claims a lease of 30 years is granted the longest lease allowed
    // (600 s): it counts as gone once that and the allowance have passed.
    let store = StampingStore::new(1);
    let watcher = replica(&store, "watcher", 0);
    let claimed = Heartbeat {
        epoch: 99,
        beat: 1,
        lease_ms: 30 * 365 * 24 * 3_600_000,
    };
    let path = Path::from(format!(
        "catalog/fleet/members/greedy/{}",
        claimed.file_name()
    ));
    store.put(&path, PutPayload::default()).await.unwrap();
    at(&store, 601_999).await;
    assert_eq!(
        ids(&watcher.heartbeat().await.unwrap().members),
        ["greedy", "watcher"]
    );
    at(&store, 602_000).await;
    assert_eq!(ids(&watcher.heartbeat().await.unwrap().expired), ["greedy"]);
    checked += 2;
    println!("heartbeat names: {checked} checks");
}

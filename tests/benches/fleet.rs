//! What one supervisor interval of a fleet replica costs against the number of datasets, with
//! a fixed number of them pending (issue 14):
//!
//!     cargo bench -p mend-tests --bench fleet
//!     scripts/with-postgres cargo bench -p mend-tests --bench fleet
//!
//! For each catalog (a local directory and the in-memory store, each the object-store catalog;
//! Postgres, in a database of its own, when `MEND_TEST_DATABASE_URL` is set) the bench creates
//! 100, then 1,000, then 10,000 datasets, of which the same [`PENDING`] hold an intent a
//! crashed commit left behind (crashed after its objects, before its publish). A replica of
//! its own, the fleet's only member, then runs what `Supervisors::round` reads every interval:
//!
//! 1. its heartbeat ([`Membership::heartbeat`]);
//! 2. discovery ([`Catalog::pending_datasets`], the trait method, so whatever the backend does);
//! 3. the check's read of each pending dataset it owns: its intents listed, 4 at once.
//!
//! Against it, in the same run: the old way (before the fleet, the server listed every dataset
//! and each one's intents every interval), and the full-scan round that runs every
//! `full_scan_every` rounds (300 by default) as the backstop: heartbeat, discovery, every
//! dataset listed and the intents of each one it owns (here, as the only member, all).
//!
//! The replica's catalog is its own instance, as another `mend serve` process would be, warmed
//! by one round and one old-way pass that are not counted; then each measurement is the median
//! of several runs (10 rounds; 3 of the old way and of the backstop). What it counts is what
//! reaches storage: object-store requests and bytes received (a [`CountingStore`] under the
//! replica's catalog and membership; bytes are GET bodies and listed keys) or, on Postgres,
//! statements, round trips and bytes the server sent (a [`SqlCounter`] proxy under the
//! replica's catalog pool and membership pool).
//!
//! The backends' own discovery (one query on Postgres, a listing of the pending index on object
//! storage) makes the round follow the pending datasets, not the total; the ratios printed at
//! the end (10,000 datasets against 100) say whether it does.
//!
//! It takes a few minutes on the 2-core development machine, most of it creating the datasets
//! and the old way's passes at 10,000. In test
//! mode (`cargo test --benches`) it runs at 20 and 100 datasets, 2 rounds each, in about a
//! second.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use mend::catalog::{Catalog, ObjectStoreCatalog, PostgresCatalog};
use mend::clock::SystemClock;
use mend::engine::{CommitRequest, CommitSplit};
use mend::faults::CrashAt;
use mend::fleet::{DEFAULT_MEMBER_LEASE, FleetView, Membership, ObjectStoreMembership};
use mend::model::DatasetConfig;
use mend::objects::SplitObjects;
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions};
use mend_tests::CountingStore;
use mend_tests::sql_counter::SqlCounter;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;

mod common;
use common::{Bench, millis};

/// Datasets with a pending intent, whatever the number of datasets.
const PENDING: usize = 10;
/// Datasets checked at once, as `Supervisors::round` does; the old way and the backstop read
/// as many at once.
const CHECKS_AT_ONCE: usize = 4;
/// Datasets created at once while setting up.
const CREATES_AT_ONCE: usize = 16;
/// A commit of one split's durable steps: begin (its intent and its staged row), its object,
/// then (crashed before) the publish: an intent left pending.
const CRASH_BEFORE_PUBLISH: usize = 3;

fn sizes() -> &'static [usize] {
    if common::test_mode() {
        &[20, 100]
    } else {
        &[100, 1_000, 10_000]
    }
}

/// Rounds measured per size, and passes of the old way and of the backstop.
fn repetitions() -> (usize, usize) {
    if common::test_mode() { (2, 1) } else { (10, 3) }
}

fn dataset_id(index: usize) -> String {
    format!("fleet-{index:05}")
}

/// Where the replica's requests are counted.
enum Meter {
    Store(Arc<CountingStore>),
    Sql(SqlCounter),
}

/// What reached storage so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Counts {
    /// Object-store requests, or statements.
    requests: u64,
    /// Round trips (Postgres only: on object storage every request is one).
    round_trips: u64,
    bytes: u64,
}

impl Meter {
    fn counts(&self) -> Counts {
        match self {
            Meter::Store(store) => {
                let requests = store.requests().total();
                Counts {
                    requests,
                    round_trips: requests,
                    bytes: store.bytes_received(),
                }
            }
            Meter::Sql(proxy) => {
                let counts = proxy.counts();
                Counts {
                    requests: counts.statements,
                    round_trips: counts.round_trips,
                    bytes: counts.bytes_received,
                }
            }
        }
    }
}

impl Counts {
    fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            requests: self.requests - earlier.requests,
            round_trips: self.round_trips - earlier.round_trips,
            bytes: self.bytes - earlier.bytes,
        }
    }
}

/// One measured run: how long it took and what it cost.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    time: Duration,
    counts: Counts,
}

/// The median of each field of `costs` on its own.
fn median(costs: &[Cost]) -> Cost {
    let middle = |mut values: Vec<u64>| {
        values.sort();
        values[values.len() / 2]
    };
    let mut times: Vec<Duration> = costs.iter().map(|c| c.time).collect();
    times.sort();
    Cost {
        time: times[times.len() / 2],
        counts: Counts {
            requests: middle(costs.iter().map(|c| c.counts.requests).collect()),
            round_trips: middle(costs.iter().map(|c| c.counts.round_trips).collect()),
            bytes: middle(costs.iter().map(|c| c.counts.bytes).collect()),
        },
    }
}

/// A catalog with a writer that fills it and a replica that supervises it.
struct Setup {
    name: &'static str,
    /// Creates the datasets and leaves the crashed commits; not counted.
    writer: Engine,
    /// The replica's own catalog instance, counted.
    catalog: Arc<dyn Catalog>,
    membership: Arc<dyn Membership>,
    meter: Meter,
    /// The Postgres database of this run, dropped at the end.
    database: Option<String>,
    _directory: tempfile::TempDir,
}

fn engine(catalog: Arc<dyn Catalog>, objects: Arc<dyn ObjectStore>) -> Engine {
    Engine::new(
        catalog,
        SplitObjects::new(objects, Path::default()),
        PolicyRuntime::default_policy().expect("default policy"),
        EngineOptions::default(),
    )
    .expect("engine")
}

/// The object-store catalog on `store` (a local directory or memory): the writer's instance
/// on the bare store, the replica's on a counting one.
fn object_store_setup(
    name: &'static str,
    store: Arc<dyn ObjectStore>,
    directory: tempfile::TempDir,
) -> Setup {
    let counting = Arc::new(CountingStore::new(store.clone()));
    let writer_catalog =
        ObjectStoreCatalog::new(store.clone(), Path::default(), Default::default());
    let catalog = ObjectStoreCatalog::new(counting.clone(), Path::default(), Default::default());
    let membership = ObjectStoreMembership::new(
        counting.clone(),
        Path::default(),
        mend::fleet::replica_id(Some("bench")).expect("replica id"),
        DEFAULT_MEMBER_LEASE,
        Arc::new(SystemClock),
    );
    Setup {
        name,
        writer: engine(Arc::new(writer_catalog), store),
        catalog: Arc::new(catalog),
        membership: Arc::new(membership),
        meter: Meter::Store(counting),
        database: None,
        _directory: directory,
    }
}

/// A Postgres catalog in a database of its own, split objects in a local directory; the
/// replica's catalog and membership (as `mend serve` opens it) go through a counting proxy.
async fn postgres_setup() -> Setup {
    let (url, database) = mend_tests::harness::own_database("mend_fleet_bench").await;
    let directory = tempfile::tempdir().expect("temporary directory");
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(directory.path()).expect("local store"));
    let options = mend_tests::harness::postgres_options;
    let writer_catalog = PostgresCatalog::connect_with(&url, options())
        .await
        .expect("connect to Postgres");
    let proxy = SqlCounter::start(&url).await;
    let catalog = PostgresCatalog::connect_with(proxy.url(), options())
        .await
        .expect("connect to Postgres through the counting proxy");
    let membership = mend::fleet::open_membership(
        proxy.url(),
        mend::fleet::replica_id(Some("bench")).expect("replica id"),
        DEFAULT_MEMBER_LEASE,
    )
    .await
    .expect("open the fleet membership");
    Setup {
        name: "postgres",
        writer: engine(Arc::new(writer_catalog), store),
        catalog: Arc::new(catalog),
        membership,
        meter: Meter::Sql(proxy),
        database: Some(database),
        _directory: directory,
    }
}

/// Creates datasets `from..to`; those below [`PENDING`] get a crashed commit.
async fn grow(writer: &Engine, from: usize, to: usize) {
    futures::stream::iter(from..to)
        .map(|index| async move {
            let id = dataset_id(index);
            writer
                .create_dataset(&id, &DatasetConfig::default())
                .await
                .expect("create dataset");
            if index < PENDING {
                let request = CommitRequest {
                    dataset_id: id,
                    node: "bench-writer".into(),
                    splits: vec![CommitSplit {
                        split_id: "split-0".into(),
                        metadata_json: r#"{"num_docs": 1}"#.into(),
                        payload: Bytes::from_static(b"payload"),
                    }],
                    checkpoint_delta: None,
                    publish_token: None,
                };
                let crashing =
                    writer.with_faults(Arc::new(CrashAt::new(CRASH_BEFORE_PUBLISH, false)));
                assert!(
                    crashing.commit(&request).await.is_err(),
                    "the commit crashes"
                );
            }
        })
        .buffer_unordered(CREATES_AT_ONCE)
        .collect::<Vec<()>>()
        .await;
}

/// The intents of each of `datasets`, [`CHECKS_AT_ONCE`] at a time: the ids that have any.
async fn with_intents(catalog: &dyn Catalog, datasets: Vec<String>) -> BTreeSet<String> {
    futures::stream::iter(datasets)
        .map(|id| async move {
            let intents = catalog.list_intents(&id).await.expect("list intents");
            Ok::<_, mend::MendError>((!intents.is_empty()).then_some(id))
        })
        .buffer_unordered(CHECKS_AT_ONCE)
        .try_filter_map(|id| async move { Ok(id) })
        .try_collect()
        .await
        .expect("list intents")
}

fn expected_pending() -> BTreeSet<String> {
    (0..PENDING).map(dataset_id).collect()
}

fn check_view(setup: &Setup, view: &FleetView) {
    assert_eq!(
        view.members.len(),
        1,
        "the replica is the fleet's only member"
    );
    assert_eq!(view.me.replica_id, setup.membership.replica_id());
    assert!(
        expected_pending().iter().all(|id| view.owns(id)),
        "the only member owns every dataset"
    );
}

/// What one round's parts cost: heartbeat, discovery, checks.
struct Round {
    heartbeat: Cost,
    discovery: Cost,
    checks: Cost,
}

impl Round {
    fn total(&self) -> Cost {
        let parts = [&self.heartbeat, &self.discovery, &self.checks];
        Cost {
            time: parts.iter().map(|p| p.time).sum(),
            counts: Counts {
                requests: parts.iter().map(|p| p.counts.requests).sum(),
                round_trips: parts.iter().map(|p| p.counts.round_trips).sum(),
                bytes: parts.iter().map(|p| p.counts.bytes).sum(),
            },
        }
    }
}

/// Times and counts `work`.
async fn measured<T>(meter: &Meter, work: impl Future<Output = T>) -> (T, Cost) {
    let before = meter.counts();
    let started = Instant::now();
    let output = work.await;
    let time = started.elapsed();
    let counts = meter.counts().since(&before);
    (output, Cost { time, counts })
}

/// One supervisor round's reads: heartbeat, discovery, the check of each pending dataset it
/// owns. Asserts that it finds exactly the pending datasets, each with its intent.
async fn round(setup: &Setup) -> Round {
    let meter = &setup.meter;
    let (view, heartbeat) = measured(meter, setup.membership.heartbeat()).await;
    let view = view.expect("heartbeat");
    check_view(setup, &view);
    let (pending, discovery) = measured(meter, setup.catalog.pending_datasets()).await;
    let pending: Vec<String> = pending
        .expect("pending datasets")
        .into_iter()
        .map(|p| p.dataset_id)
        .filter(|id| view.owns(id))
        .collect();
    let listed: BTreeSet<String> = pending.iter().cloned().collect();
    assert_eq!(
        listed,
        expected_pending(),
        "discovery finds exactly the pending"
    );
    let (checked, checks) = measured(meter, with_intents(&*setup.catalog, pending)).await;
    assert_eq!(
        checked,
        expected_pending(),
        "each pending one has its intent"
    );
    Round {
        heartbeat,
        discovery,
        checks,
    }
}

/// The old way: every dataset listed, and each one's intents.
async fn old_way(setup: &Setup) -> Cost {
    let (found, cost) = measured(&setup.meter, async {
        let ids = setup.catalog.list_dataset_ids().await.expect("dataset ids");
        with_intents(&*setup.catalog, ids).await
    })
    .await;
    assert_eq!(found, expected_pending(), "the old way finds the pending");
    cost
}

/// The full-scan round: heartbeat, discovery, every dataset listed and the intents of each
/// one this replica owns.
async fn backstop(setup: &Setup) -> Cost {
    let (found, cost) = measured(&setup.meter, async {
        let view = setup.membership.heartbeat().await.expect("heartbeat");
        check_view(setup, &view);
        let pending = setup.catalog.pending_datasets().await.expect("pending");
        let mut candidates: BTreeSet<String> = pending.into_iter().map(|p| p.dataset_id).collect();
        let ids = setup.catalog.list_dataset_ids().await.expect("dataset ids");
        candidates.extend(ids.into_iter().filter(|id| view.owns(id)));
        with_intents(&*setup.catalog, candidates.into_iter().collect()).await
    })
    .await;
    assert_eq!(found, expected_pending(), "the full scan finds the pending");
    cost
}

/// One size's measurements.
struct Measured {
    datasets: usize,
    round: Cost,
    parts: [Cost; 3],
    old_way: Cost,
    backstop: Cost,
}

async fn measure(setup: &Setup, datasets: usize) -> Measured {
    let (rounds, passes) = repetitions();
    // Warm-up, not counted: the first heartbeat joins the fleet, and the replica's catalog
    // reads each dataset once before it has it cached.
    round(setup).await;
    old_way(setup).await;
    let mut runs = Vec::new();
    for _ in 0..rounds {
        runs.push(round(setup).await);
    }
    let part = |pick: fn(&Round) -> Cost| median(&runs.iter().map(pick).collect::<Vec<_>>());
    let mut old = Vec::new();
    let mut full = Vec::new();
    for _ in 0..passes {
        old.push(old_way(setup).await);
        full.push(backstop(setup).await);
    }
    Measured {
        datasets,
        round: part(Round::total),
        parts: [
            part(|r| r.heartbeat),
            part(|r| r.discovery),
            part(|r| r.checks),
        ],
        old_way: median(&old),
        backstop: median(&full),
    }
}

fn requests(setup: &Setup, counts: &Counts) -> String {
    match setup.meter {
        Meter::Store(_) => counts.requests.to_string(),
        Meter::Sql(_) => format!("{}/{}", counts.requests, counts.round_trips),
    }
}

fn ratio(later: f64, earlier: f64) -> String {
    if earlier == 0.0 {
        "n/a".into()
    } else {
        format!("{:.1}x", later / earlier)
    }
}

fn report(bench: &mut Bench, setup: &Setup, measured: &[Measured], setup_time: Duration) {
    let (rounds, passes) = repetitions();
    let unit = match setup.meter {
        Meter::Store(_) => "requests",
        Meter::Sql(_) => "stmts/trips",
    };
    bench.report(format!(
        "fleet supervision [{}]: one replica, {PENDING} datasets pending; medians of {rounds} \
         rounds, of {passes} old-way and full-scan passes (the bench's own timing); creating \
         the datasets took {:.1} s",
        setup.name,
        setup_time.as_secs_f64()
    ));
    bench.report(format!(
        "  {:>8} | {:>10} | {:>11} | {:>9} | {:>12} | {:>15} | {:>10} | {:>13} | {:>20}",
        "datasets",
        "round time",
        unit,
        "bytes",
        "old-way time",
        format!("old {unit}"),
        "old bytes",
        "backstop time",
        format!("backstop {unit}"),
    ));
    for m in measured {
        bench.report(format!(
            "  {:>8} | {:>7.2} ms | {:>11} | {:>9} | {:>9.2} ms | {:>15} | {:>10} | {:>10.2} ms | {:>20}",
            m.datasets,
            millis(m.round.time),
            requests(setup, &m.round.counts),
            m.round.counts.bytes,
            millis(m.old_way.time),
            requests(setup, &m.old_way.counts),
            m.old_way.counts.bytes,
            millis(m.backstop.time),
            requests(setup, &m.backstop.counts),
        ));
    }
    let (first, last) = (&measured[0], &measured[measured.len() - 1]);
    let [heartbeat, discovery, checks] = &last.parts;
    let part = |name: &str, cost: &Cost| {
        format!(
            "{name}: {} {unit}, {} bytes, {:.2} ms",
            requests(setup, &cost.counts),
            cost.counts.bytes,
            millis(cost.time)
        )
    };
    bench.report(format!(
        "  one round at {} datasets: {}; {}; {}",
        last.datasets,
        part("heartbeat", heartbeat),
        part("discovery", discovery),
        part(&format!("checks ({PENDING} datasets)"), checks),
    ));
    let of = |pick: fn(&Cost) -> f64| ratio(pick(&last.round), pick(&first.round));
    bench.report(format!(
        "  round at {} against at {}: time {}, {unit} {}, bytes {} (old way: time {}, {unit} {}; \
         datasets {:.0}x)",
        last.datasets,
        first.datasets,
        of(|c| c.time.as_secs_f64()),
        of(|c| c.counts.requests as f64),
        of(|c| c.counts.bytes as f64),
        ratio(
            last.old_way.time.as_secs_f64(),
            first.old_way.time.as_secs_f64()
        ),
        ratio(
            last.old_way.counts.requests as f64,
            first.old_way.counts.requests as f64
        ),
        last.datasets as f64 / first.datasets as f64,
    ));
}

async fn run(setup: Setup, bench: &mut Bench) {
    let mut measured = Vec::new();
    let mut created = 0;
    let mut setup_time = Duration::ZERO;
    for &datasets in sizes() {
        let started = Instant::now();
        grow(&setup.writer, created, datasets).await;
        setup_time += started.elapsed();
        created = datasets;
        measured.push(measure(&setup, datasets).await);
    }
    report(bench, &setup, &measured, setup_time);
    let database = setup.database.clone();
    drop(setup);
    if let Some(name) = database {
        mend_tests::harness::drop_database(&name).await;
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut bench = Bench::from_args();
    runtime.block_on(async {
        let directory = tempfile::tempdir().expect("temporary directory");
        let store = LocalFileSystem::new_with_prefix(directory.path()).expect("local store");
        run(
            object_store_setup("local-directory", Arc::new(store), directory),
            &mut bench,
        )
        .await;
        let unused = tempfile::tempdir().expect("temporary directory");
        run(
            object_store_setup("memory", Arc::new(InMemory::new()), unused),
            &mut bench,
        )
        .await;
        if std::env::var_os("MEND_TEST_DATABASE_URL").is_some() {
            run(postgres_setup().await, &mut bench).await;
        } else {
            bench.report(
                "fleet supervision [postgres]: not run, MEND_TEST_DATABASE_URL is not set \
                 (`scripts/with-postgres cargo bench -p mend-tests --bench fleet`)",
            );
        }
    });
    bench.finish();
}

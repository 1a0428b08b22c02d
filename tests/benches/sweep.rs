//! Recovery sweep throughput against the floor of merely listing and heading the same objects,
//! and the cost of an unchanged live-handle refresh as history grows.
//!
//!     scripts/with-postgres cargo bench -p mend-tests --bench sweep
//!
//! For each catalog (a local directory, the embedded default; Postgres with the objects in a
//! local directory) the bench leaves `MEND_BENCH_INTENTS` (default 10,000) crashed commits
//! behind, each an `Armed` intent with its staged row and its uploaded object, then measures
//! in the same run:
//!
//! - the floor: list the dataset's objects and HEAD each one (16 in flight, as many as a
//!   sweep observes at once), the least any sweep must read;
//! - a probe sweep (reads only);
//! - a roll-forward sweep, which publishes each commit and deletes its intent.
//!
//! It prints intents per second and mend/floor. Then it measures 100 unchanged refreshes of a
//! read-write live handle at 1, 1,000 and 10,000 commits of history, per catalog, and prints
//! each against the 1-commit case: it must stay flat (about 1.0).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use mend::catalog::{Catalog, ObjectStoreCatalog, PostgresCatalog};
use mend::clock::{Clock, ManualClock, SystemClock};
use mend::engine::{CommitRequest, CommitSplit};
use mend::faults::CrashAt;
use mend::live::{HandleMode, LiveHandle, Refresh};
use mend::model::DatasetConfig;
use mend::objects::SplitObjects;
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions};
use mend_policy::RecoveryMode;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;

/// Commit steps: intent, stage, object, then (crashed before) confirm.
const CRASH_BEFORE_CONFIRM: usize = 4;
const REFRESHES: u32 = 100;

fn intents() -> usize {
    std::env::var("MEND_BENCH_INTENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

struct Setup {
    name: &'static str,
    engine: Engine,
    clock: Arc<ManualClock>,
    store: Arc<dyn ObjectStore>,
    _directory: tempfile::TempDir,
}

async fn setup(postgres: bool) -> Setup {
    let directory = tempfile::tempdir().expect("temporary directory");
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(directory.path()).expect("local store"));
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let catalog: Arc<dyn Catalog> = if postgres {
        Arc::new(
            PostgresCatalog::connect_with(
                &mend_tests::harness::postgres_url(),
                mend_tests::harness::postgres_options(),
            )
            .await
            .expect("connect to Postgres"),
        )
    } else {
        Arc::new(ObjectStoreCatalog::new(
            store.clone(),
            Path::default(),
            Default::default(),
        ))
    };
    let objects = SplitObjects::new(store.clone(), Path::default());
    let options = EngineOptions {
        clock: clock.clone(),
        ..EngineOptions::default()
    };
    let engine = Engine::new(
        catalog,
        objects,
        PolicyRuntime::default_policy().expect("default policy"),
        options,
    )
    .expect("engine");
    Setup {
        name: if postgres {
            "postgres"
        } else {
            "local-directory"
        },
        engine,
        clock,
        store,
        _directory: directory,
    }
}

/// Records when each phase of a sweep began and ended, for the breakdown.
#[derive(Debug, Default)]
struct PhaseClock {
    marks: std::sync::Mutex<Vec<(String, Instant, Option<Instant>)>>,
}

impl mend::progress::Progress for PhaseClock {
    fn begin(&self, phase: &str, _total: usize) {
        self.marks
            .lock()
            .unwrap()
            .push((phase.to_string(), Instant::now(), None));
    }
    fn advance(&self, _done: usize) {}
    fn end(&self) {
        if let Some(last) = self.marks.lock().unwrap().last_mut() {
            last.2 = Some(Instant::now());
        }
    }
}

impl PhaseClock {
    /// "observe intents 1.20 s, (list intents, decide) 0.30 s, resolve intents 0.80 s".
    fn breakdown(&self, started: Instant, ended: Instant) -> String {
        let marks = self.marks.lock().unwrap();
        let mut parts = Vec::new();
        let mut cursor = started;
        for (phase, begun, finished) in marks.iter() {
            let finished = finished.unwrap_or(ended);
            let gap = begun.duration_since(cursor).as_secs_f64();
            if gap > 0.0005 {
                parts.push(format!("other {gap:.2} s"));
            }
            parts.push(format!(
                "{phase} {:.2} s",
                finished.duration_since(*begun).as_secs_f64()
            ));
            cursor = finished;
        }
        let tail = ended.duration_since(cursor).as_secs_f64();
        if tail > 0.0005 {
            parts.push(format!("other {tail:.2} s"));
        }
        parts.join(", ")
    }
}

/// Leaves `count` crashed commits, each an armed intent with its row and object.
async fn crashed_commits(engine: &Engine, dataset_id: &str, count: usize) {
    futures::stream::iter(0..count)
        .map(|i| async move {
            let request = CommitRequest {
                dataset_id: dataset_id.into(),
                node: "bench-writer".into(),
                splits: vec![CommitSplit {
                    split_id: format!("split-{i:06}"),
                    metadata_json: format!(r#"{{"num_docs": {i}}}"#),
                    payload: Bytes::from(vec![b'x'; 4096]),
                }],
                checkpoint_delta: None,
                publish_token: None,
            };
            let crashing = engine.with_faults(Arc::new(CrashAt::new(CRASH_BEFORE_CONFIRM, false)));
            assert!(
                crashing.commit(&request).await.is_err(),
                "the commit crashes"
            );
        })
        .buffer_unordered(8)
        .collect::<Vec<()>>()
        .await;
}

/// How many HEADs the floor has in flight: as many as the sweep observes intents at once.
const FLOOR_CONCURRENCY: usize = 16;

/// List the dataset's objects and HEAD each, 16 at a time: the least a sweep must read.
async fn floor(setup: &Setup, dataset_id: &str) -> (Duration, usize) {
    let started = Instant::now();
    let listed = setup.engine.objects().list(dataset_id).await.expect("list");
    futures::stream::iter(&listed)
        .map(|object| {
            let path = setup.engine.objects().path(dataset_id, &object.split_id);
            async move { setup.store.head(&path).await.expect("head") }
        })
        .buffer_unordered(FLOOR_CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    (started.elapsed(), listed.len())
}

fn per_second(items: usize, took: Duration) -> f64 {
    items as f64 / took.as_secs_f64()
}

async fn sweep_bench(postgres: bool) {
    let setup = setup(postgres).await;
    let count = intents();
    let dataset_id = format!("sweep-{}", uuid::Uuid::new_v4().simple());
    setup
        .engine
        .create_dataset(&dataset_id, &DatasetConfig::default())
        .await
        .expect("create dataset");
    let started = Instant::now();
    crashed_commits(&setup.engine, &dataset_id, count).await;
    eprintln!(
        "[{}] left {count} crashed commits in {:.1} s",
        setup.name,
        started.elapsed().as_secs_f64()
    );
    // The writers are gone: their leases run out.
    setup.clock.advance_ms(120_000);

    let (floor_took, listed) = floor(&setup, &dataset_id).await;
    assert_eq!(listed, count);

    let probe_clock = Arc::new(PhaseClock::default());
    let started = Instant::now();
    let probe = setup
        .engine
        .with_progress(probe_clock.clone())
        .recover(&dataset_id, RecoveryMode::Probe)
        .await
        .expect("probe");
    let probe_took = started.elapsed();
    let probe_breakdown = probe_clock.breakdown(started, Instant::now());
    assert_eq!(probe.intents.len(), count);

    let roll_clock = Arc::new(PhaseClock::default());
    let started = Instant::now();
    let rolled = setup
        .engine
        .with_progress(roll_clock.clone())
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await
        .expect("roll forward");
    let roll_took = started.elapsed();
    let roll_breakdown = roll_clock.breakdown(started, Instant::now());
    assert_eq!(rolled.intents.len(), count);
    assert!(
        setup
            .engine
            .catalog()
            .list_intents(&dataset_id)
            .await
            .unwrap()
            .is_empty(),
        "every intent resolved"
    );

    let floor_rate = per_second(count, floor_took);
    let probe_rate = per_second(count, probe_took);
    let roll_rate = per_second(count, roll_took);
    println!(
        "sweep [{}] over {count} intents:\n  floor (list + head each object): {floor_rate:>9.0} objects/s ({:.2} s)\n  probe                          : {probe_rate:>9.0} intents/s ({:.2} s), mend/floor = {:.2}\n  roll-forward                   : {roll_rate:>9.0} intents/s ({:.2} s), mend/floor = {:.2}",
        setup.name,
        floor_took.as_secs_f64(),
        probe_took.as_secs_f64(),
        probe_rate / floor_rate,
        roll_took.as_secs_f64(),
        roll_rate / floor_rate,
    );
    println!("  probe breakdown       : {probe_breakdown}");
    println!("  roll-forward breakdown: {roll_breakdown}");
}

/// 100 unchanged refreshes of a read-write handle on a dataset with `commits` of history.
async fn refresh_cost(setup: &Setup, commits: usize) -> Duration {
    let dataset_id = format!("refresh-{}", uuid::Uuid::new_v4().simple());
    setup
        .engine
        .create_dataset(&dataset_id, &DatasetConfig::default())
        .await
        .expect("create dataset");
    for i in 1..commits {
        let token = if i % 2 == 0 { "a" } else { "b" };
        setup
            .engine
            .set_publish_token(&dataset_id, Some(token))
            .await
            .expect("history");
    }
    let handle = LiveHandle::open(setup.engine.clone(), &dataset_id, HandleMode::ReadWrite)
        .await
        .expect("open handle");
    let started = Instant::now();
    for _ in 0..REFRESHES {
        assert_eq!(handle.refresh().await.expect("refresh"), Refresh::Unchanged);
    }
    started.elapsed() / REFRESHES
}

async fn refresh_bench(postgres: bool) {
    let setup = setup(postgres).await;
    let mut baseline = None;
    for commits in [1, 1_000, 10_000] {
        let per_refresh = refresh_cost(&setup, commits).await;
        let base = *baseline.get_or_insert(per_refresh);
        println!(
            "refresh [{}] at {commits:>6} commits of history: {:>8.1} us per unchanged refresh, {:.2}x the 1-commit case",
            setup.name,
            per_refresh.as_secs_f64() * 1e6,
            per_refresh.as_secs_f64() / base.as_secs_f64()
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    for postgres in [false, true] {
        sweep_bench(postgres).await;
    }
    for postgres in [false, true] {
        refresh_bench(postgres).await;
    }
}

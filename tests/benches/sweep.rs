//! Recovery sweep throughput against the floor of merely listing and heading the same objects,
//! and the cost of an unchanged live-handle refresh as history grows, measured by criterion
//! (`common`).
//!
//!     scripts/with-postgres cargo bench -p mend-tests --bench sweep
//!
//! For each catalog (a local directory, the embedded default; Postgres with the objects in a
//! local directory) the bench leaves `MEND_BENCH_INTENTS` (default 10,000) crashed commits
//! behind, each an `Armed` intent with its staged row and its uploaded object (about 10 s),
//! then measures:
//!
//! - in the criterion group `sweep [<catalog>]`, on those intents, which neither changes:
//!   - the floor: list the dataset's objects and HEAD each one (16 in flight, as many as a
//!     sweep observes at once), the least any sweep must read;
//!   - a probe sweep (reads only);
//! - a roll-forward sweep of all of them, which publishes each commit and deletes its intent,
//!   then two more, each of as many crashed commits left behind for it and probed, timed here
//!   and the median printed beside criterion's groups: a run consumes its crashed commits, and
//!   criterion's ten samples of a roll-forward of 10,000 after a setup of 2 to 10 s each would
//!   take minutes (one run alone moved by a quarter from one bench to the next);
//! - in the criterion group `roll-forward [<catalog>]`, roll-forward sweeps of
//!   `MEND_BENCH_ROLL_FORWARD_INTENTS` (default 1,000) crashed commits, each left behind
//!   outside the timed part: the same work per intent (one intent after another), sampled.
//!
//! It prints intents per second and mend/floor (the floor measured on the 10,000). Then, in
//! the group `refresh [<catalog>]`, unchanged refreshes of a read-write live handle at 1,
//! 1,000 and 10,000 commits of history, each against the 1-commit case: it must stay flat
//! (about 1.0).
//!
//! It takes about four minutes on the 2-core development machine: per catalog about 10 s to
//! leave the crashed commits, 15 s for floor and probe (`Sampling::Expensive`, 20 to 30
//! iterations each), 10 to 40 s for the three roll-forwards, 30 s for ten roll-forwards of 1,000
//! (one per sample, so criterion warns that it cannot complete 10 samples in the measurement
//! time: that is the intended one iteration per sample), and the histories' setup. Smaller:
//! `MEND_BENCH_INTENTS=2000 MEND_BENCH_ROLL_FORWARD_INTENTS=200`; larger, the same variables,
//! or `-- --measurement-time 30` for more iterations per sample (every group).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::Throughput;
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
use mend_contract::RecoveryMode;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;

mod common;
use common::{Bench, Sampling, micros, per_second};

/// A commit of one split's durable steps: begin (its intent and its staged row), its object,
/// then (crashed before) the publish: an armed intent whose object is in place.
const CRASH_BEFORE_PUBLISH: usize = 3;

/// How many roll-forwards of all the crashed commits the bench times, reporting the median.
const ROLL_FORWARD_RUNS: usize = 3;

fn intents() -> usize {
    std::env::var("MEND_BENCH_INTENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if common::test_mode() { 100 } else { 10_000 })
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
            let crashing = engine.with_faults(Arc::new(CrashAt::new(CRASH_BEFORE_PUBLISH, false)));
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

fn roll_forward_intents() -> usize {
    std::env::var("MEND_BENCH_ROLL_FORWARD_INTENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if common::test_mode() { 10 } else { 1_000 })
}

/// A new dataset with `count` crashed commits whose writers' leases have run out.
async fn dataset_with_crashed_commits(setup: &Setup, count: usize) -> String {
    let dataset_id = format!("sweep-{}", uuid::Uuid::new_v4().simple());
    setup
        .engine
        .create_dataset(&dataset_id, &DatasetConfig::default())
        .await
        .expect("create dataset");
    crashed_commits(&setup.engine, &dataset_id, count).await;
    // The writers are gone: their leases run out.
    setup.clock.advance_ms(120_000);
    dataset_id
}

/// One sweep of `dataset_id` in `mode`, with its phases clocked; how long it took and the
/// breakdown.
async fn sweep(
    setup: &Setup,
    dataset_id: &str,
    mode: RecoveryMode,
    count: usize,
) -> (Duration, String) {
    let phases = Arc::new(PhaseClock::default());
    let started = Instant::now();
    let report = setup
        .engine
        .with_progress(phases.clone())
        .recover(dataset_id, mode)
        .await
        .expect("sweep");
    let took = started.elapsed();
    assert_eq!(report.intents.len(), count);
    (took, phases.breakdown(started, started + took))
}

fn sweep_bench(bench: &mut Bench, runtime: &tokio::runtime::Runtime, postgres: bool) {
    let setup = runtime.block_on(setup(postgres));
    let name = setup.name;
    let count = intents();
    let started = Instant::now();
    let dataset_id = runtime.block_on(dataset_with_crashed_commits(&setup, count));
    eprintln!(
        "[{name}] left {count} crashed commits in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let mut probe_breakdown = String::new();
    let mut group = bench.group(
        &format!("sweep [{name}]"),
        Sampling::Expensive {
            measurement: Duration::from_millis(4_500),
        },
    );
    group.throughput(Throughput::Elements(count as u64));
    group.bench("floor", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let (time, listed) = floor(&setup, &dataset_id).await;
                    assert_eq!(listed, count);
                    took += time;
                }
                took
            })
        })
    });
    group.bench("probe", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let (time, breakdown) =
                        sweep(&setup, &dataset_id, RecoveryMode::Probe, count).await;
                    took += time;
                    probe_breakdown = breakdown;
                }
                took
            })
        })
    });
    let estimates = group.finish();
    let floor_time = estimates.time("floor");
    estimates.report(|times| {
        let floor_rate = per_second(count, times["floor"]);
        let probe_rate = per_second(count, times["probe"]);
        vec![
            format!("sweep [{name}] over {count} intents:"),
            format!(
                "  floor (list + head each object)  : {floor_rate:>9.0} objects/s ({:.2} s)",
                times["floor"].as_secs_f64()
            ),
            format!(
                "  probe                            : {probe_rate:>9.0} intents/s ({:.2} s), mend/floor = {:.2}",
                times["probe"].as_secs_f64(),
                probe_rate / floor_rate
            ),
        ]
    });
    let floor_rate = floor_time.map(|time| per_second(count, time));
    let against_floor = |rate: f64| {
        floor_rate.map_or(String::new(), |floor| {
            format!(", mend/floor = {:.2}", rate / floor)
        })
    };

    // Three runs, timed here (see the module's doc for why they are not criterion's): the
    // first on the intents floor and probe read, each other one on as many crashed commits
    // left behind for it and probed once first, as the first were (and as a supervisor
    // probes before it acts). The median: one run moved by a quarter from one bench to the
    // next.
    let mut runs = Vec::with_capacity(ROLL_FORWARD_RUNS);
    for run in 0..ROLL_FORWARD_RUNS {
        let dataset_id = if run == 0 {
            dataset_id.clone()
        } else {
            let fresh = runtime.block_on(dataset_with_crashed_commits(&setup, count));
            runtime.block_on(sweep(&setup, &fresh, RecoveryMode::Probe, count));
            fresh
        };
        let (took, breakdown) =
            runtime.block_on(sweep(&setup, &dataset_id, RecoveryMode::RollForward, count));
        assert!(
            runtime
                .block_on(setup.engine.catalog().list_intents(&dataset_id))
                .unwrap()
                .is_empty(),
            "every intent resolved"
        );
        runs.push((took, breakdown));
    }
    runs.sort_by_key(|(took, _)| *took);
    let each: Vec<String> = runs
        .iter()
        .map(|(took, _)| format!("{:.2}", took.as_secs_f64()))
        .collect();
    let (roll_took, roll_breakdown) = runs.swap_remove(runs.len() / 2);
    let roll_rate = per_second(count, roll_took);
    bench.report(format!(
        "  roll-forward, median of {ROLL_FORWARD_RUNS} runs of {count}: {roll_rate:>9.0} intents/s ({:.2} s of {} s){} (timed runs, not criterion)",
        roll_took.as_secs_f64(),
        each.join(", "),
        against_floor(roll_rate)
    ));

    let smaller = roll_forward_intents();
    let mut group = bench.group(
        &format!("roll-forward [{name}]"),
        Sampling::Expensive {
            measurement: Duration::from_secs(5),
        },
    );
    group.throughput(Throughput::Elements(smaller as u64));
    group.bench(&format!("intents/{smaller}"), |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let dataset_id = dataset_with_crashed_commits(&setup, smaller).await;
                    took += sweep(&setup, &dataset_id, RecoveryMode::RollForward, smaller)
                        .await
                        .0;
                }
                took
            })
        })
    });
    group.finish().report(|times| {
        let time = times[format!("intents/{smaller}").as_str()];
        let rate = per_second(smaller, time);
        vec![format!(
            "  roll-forward, {smaller} intents a run: {rate:>9.0} intents/s ({:.2} s){}",
            time.as_secs_f64(),
            against_floor(rate)
        )]
    });
    if !probe_breakdown.is_empty() {
        bench.report(format!(
            "  probe breakdown (its last run)             : {probe_breakdown}"
        ));
    }
    bench.report(format!(
        "  roll-forward breakdown (the median run of {count}): {roll_breakdown}"
    ));
}

/// A read-write handle on a new dataset with `commits` of history.
async fn handle_with_history(setup: &Setup, commits: usize) -> LiveHandle {
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
    LiveHandle::open(setup.engine.clone(), &dataset_id, HandleMode::ReadWrite)
        .await
        .expect("open handle")
}

fn refresh_bench(bench: &mut Bench, runtime: &tokio::runtime::Runtime, postgres: bool) {
    let setup = runtime.block_on(setup(postgres));
    let name = setup.name;
    let histories: &[usize] = if common::test_mode() {
        &[1, 10, 100]
    } else {
        &[1, 1_000, 10_000]
    };
    let handles: Vec<LiveHandle> = histories
        .iter()
        .map(|&commits| runtime.block_on(handle_with_history(&setup, commits)))
        .collect();
    let mut group = bench.group(
        &format!("refresh [{name}]"),
        Sampling::Quick {
            measurement: Duration::from_secs(2),
        },
    );
    for (commits, handle) in histories.iter().zip(&handles) {
        group.bench(&format!("history/{commits}"), |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let started = Instant::now();
                    for _ in 0..iters {
                        assert_eq!(handle.refresh().await.expect("refresh"), Refresh::Unchanged);
                    }
                    started.elapsed()
                })
            })
        });
    }
    group.finish().report(|times| {
        let base = times[format!("history/{}", histories[0]).as_str()];
        histories
            .iter()
            .map(|commits| {
                let per_refresh = times[format!("history/{commits}").as_str()];
                format!(
                    "refresh [{name}] at {commits:>6} commits of history: {:>8.1} us per unchanged refresh, {:.2}x the 1-commit case",
                    micros(per_refresh),
                    per_refresh.as_secs_f64() / base.as_secs_f64()
                )
            })
            .collect()
    });
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut bench = Bench::from_args();
    for postgres in [false, true] {
        sweep_bench(&mut bench, &runtime, postgres);
    }
    for postgres in [false, true] {
        refresh_bench(&mut bench, &runtime, postgres);
    }
    bench.finish();
}

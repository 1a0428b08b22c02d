//! What a policy swap's replay costs against the number of datasets (issue 29, item 5):
//!
//!     cargo bench -p mend-tests --bench replay
//!     scripts/with-postgres cargo bench -p mend-tests --bench replay
//!
//! For each catalog (the object-store catalog on a local directory and in memory; Postgres, in a
//! database of its own, when `MEND_TEST_DATABASE_URL` is set) the bench grows the catalog to
//! 100, then 1,000, then 10,000 datasets, each holding what a sweep of 10 decisions leaves in
//! its audit trail: two appends of 10 records (`executing`, then settled), copies of the records
//! of one real recovery, so that the candidate is asked real questions. At each size it
//! replays the newest [`RECORDS`] records of the catalog (500 decisions) against a rebadged
//! default policy:
//!
//! - `Engine::replay_policy`, which reads them with `Catalog::list_recent_audit` (an index on
//!   each of mend's backends);
//! - against it, the trait's default, which reads every dataset's newest records, 8 datasets at
//!   a time (`recent_audit::every_dataset`), then replays the same records. main before this
//!   change did that, and read every dataset's state besides.
//!
//! Each is the median of a few runs (5, and 3 of the default), timed by the bench, with what
//! reached storage counted: object-store requests and the index entries listings answered
//! with (a `CountingStore` under a catalog instance of its own, warmed by one run), or
//! statements on Postgres (a `SqlCounter` proxy). The ratios at the end (10,000 datasets
//! against 100) say whether a replay costs what its records cost.
//!
//! It takes a few minutes on the 2-core development machine, most of it growing the catalogs to
//! 10,000 datasets (200,000 records). In test mode (`cargo test --benches`) it runs at 20 and
//! 60 datasets, one run each, in a few seconds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use mend::audit::{AuditRecord, DecisionInput};
use mend::catalog::object_store::ObjectStoreCatalogOptions;
use mend::catalog::recent_audit::every_dataset;
use mend::catalog::{Catalog, ObjectStoreCatalog, PostgresCatalog};
use mend::clock::ManualClock;
use mend::engine::{CommitRequest, CommitSplit};
use mend::faults::CrashAt;
use mend::model::DatasetConfig;
use mend::objects::SplitObjects;
use mend::runtime::replay::{ReplayReport, replay};
use mend::runtime::{DEFAULT_POLICY_WASM, PolicyLimits, PolicyRuntime};
use mend::{Engine, EngineOptions};
use mend_contract::RecoveryMode;
use mend_tests::CountingStore;
use mend_tests::sql_counter::SqlCounter;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;

mod common;
use common::{Bench, millis};

/// Records replayed at every size: the newest of the catalog.
const RECORDS: usize = 1_000;
/// Decisions per dataset's sweep, each recorded twice.
const DECISIONS_PER_DATASET: usize = 10;
/// Datasets filled at once while growing.
const FILLS_AT_ONCE: usize = 16;
/// A commit of one split's durable steps: begin, its object, then (crashed before) the
/// publish, which recovery rolls forward.
const CRASH_BEFORE_PUBLISH: usize = 3;

fn sizes() -> &'static [usize] {
    if common::test_mode() {
        &[20, 60]
    } else {
        &[100, 1_000, 10_000]
    }
}

/// Runs measured per size: the index's, the default's.
fn repetitions() -> (usize, usize) {
    if common::test_mode() { (1, 1) } else { (5, 3) }
}

/// Records replayed when the catalog holds fewer than [`RECORDS`] (test mode's small sizes).
fn records_at(datasets: usize) -> usize {
    RECORDS.min(datasets * DECISIONS_PER_DATASET * 2)
}

/// Where the counted catalog's requests are counted.
enum Meter {
    Store(Arc<CountingStore>),
    Sql(SqlCounter),
}

/// What reached storage: requests (statements on Postgres) and listed entries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Counts {
    requests: u64,
    listed: u64,
}

impl Meter {
    fn counts(&self) -> Counts {
        match self {
            Meter::Store(store) => Counts {
                requests: store.requests().total(),
                listed: store.entries_listed(),
            },
            Meter::Sql(proxy) => Counts {
                requests: proxy.counts().statements,
                listed: 0,
            },
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    time: Duration,
    counts: Counts,
}

fn median(mut costs: Vec<Cost>) -> Cost {
    costs.sort_by_key(|cost| cost.time);
    costs[costs.len() / 2]
}

/// A catalog: a writer's instance that fills it, and a counted instance the replays read.
struct Setup {
    name: &'static str,
    writer: Arc<dyn Catalog>,
    /// An engine on the counted instance.
    engine: Engine,
    meter: Meter,
    database: Option<String>,
    _directory: tempfile::TempDir,
}

fn engine(catalog: Arc<dyn Catalog>, objects: Arc<dyn ObjectStore>) -> Engine {
    Engine::new(
        catalog,
        SplitObjects::new(objects, Path::default()),
        PolicyRuntime::default_policy().expect("default policy"),
        EngineOptions {
            clock: Arc::new(ManualClock::new(1_700_000_000_000)),
            ..EngineOptions::default()
        },
    )
    .expect("engine")
}

fn object_store_setup(
    name: &'static str,
    store: Arc<dyn ObjectStore>,
    lists_in_order: bool,
    directory: tempfile::TempDir,
) -> Setup {
    let options = ObjectStoreCatalogOptions {
        store_lists_in_order: lists_in_order,
        ..Default::default()
    };
    let counting = Arc::new(CountingStore::new(store.clone()));
    let writer = ObjectStoreCatalog::new(store.clone(), Path::default(), options.clone());
    let counted = ObjectStoreCatalog::new(counting.clone(), Path::default(), options);
    Setup {
        name,
        writer: Arc::new(writer),
        engine: engine(Arc::new(counted), store),
        meter: Meter::Store(counting),
        database: None,
        _directory: directory,
    }
}

async fn postgres_setup() -> Setup {
    let (url, database) = mend_tests::harness::own_database("mend_replay_bench").await;
    let directory = tempfile::tempdir().expect("temporary directory");
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(directory.path()).expect("local store"));
    let options = mend_tests::harness::postgres_options;
    let writer = PostgresCatalog::connect_with(&url, options())
        .await
        .expect("connect to Postgres");
    let proxy = SqlCounter::start(&url).await;
    let counted = PostgresCatalog::connect_with(proxy.url(), options())
        .await
        .expect("connect to Postgres through the counting proxy");
    Setup {
        name: "postgres",
        writer: Arc::new(writer),
        engine: engine(Arc::new(counted), store),
        meter: Meter::Sql(proxy),
        database: Some(database),
        _directory: directory,
    }
}

/// The two audit records of one real decision: a commit crashed before its publish, rolled
/// forward by recovery (on a catalog of its own, in memory).
async fn one_decision() -> Vec<AuditRecord> {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let catalog = ObjectStoreCatalog::new(store.clone(), Path::default(), Default::default());
    let engine = engine(Arc::new(catalog), store);
    engine
        .create_dataset("model", &DatasetConfig::default())
        .await
        .expect("create dataset");
    let request = CommitRequest {
        dataset_id: "model".into(),
        node: "bench-writer".into(),
        splits: vec![CommitSplit {
            split_id: "split-0".into(),
            metadata_json: "{}".into(),
            payload: bytes::Bytes::from_static(b"payload"),
        }],
        checkpoint_delta: None,
        publish_token: None,
    };
    let crashing = engine.with_faults(Arc::new(CrashAt::new(CRASH_BEFORE_PUBLISH, false)));
    assert!(
        crashing.commit(&request).await.is_err(),
        "the commit crashes"
    );
    let later = EngineOptions {
        clock: Arc::new(ManualClock::new(1_700_000_000_000 + 120_000)),
        ..EngineOptions::default()
    };
    let recovering = Engine::new(
        engine.catalog().clone(),
        engine.objects().clone(),
        engine.policy(),
        later,
    )
    .expect("engine");
    recovering
        .recover("model", RecoveryMode::RollForward)
        .await
        .expect("recover");
    let records = recovering
        .catalog()
        .list_audit("model", None)
        .await
        .expect("list audit");
    assert_eq!(records.len(), 2, "executing, then settled");
    records
}

/// `record` as the same decision recorded for `operation_id` of `dataset_id`, `later_by_ms`
/// after it.
fn recorded_in(
    record: &AuditRecord,
    dataset_id: &str,
    operation_id: &str,
    later_by_ms: i64,
) -> AuditRecord {
    let mut copy = record.clone();
    copy.dataset_id = dataset_id.to_string();
    copy.operation_id = operation_id.to_string();
    copy.recorded_at_ms += later_by_ms;
    if let Some(DecisionInput::DecideRecovery {
        dataset_id: decided_in,
        intent,
        ..
    }) = &mut copy.inputs
    {
        *decided_in = dataset_id.to_string();
        intent.operation_id = operation_id.to_string();
    }
    copy
}

/// Creates datasets `from..to`, each with a sweep's two appends of [`DECISIONS_PER_DATASET`]
/// records; dataset `i`'s a millisecond after dataset `i - 1`'s.
async fn grow(writer: &dyn Catalog, decision: &[AuditRecord], from: usize, to: usize) {
    futures::stream::iter(from..to)
        .map(|index| async move {
            let dataset_id = format!("replay-{index:05}");
            writer
                .create_dataset(&dataset_id, "uid", &DatasetConfig::default(), 0, None)
                .await
                .expect("create dataset");
            for record in decision {
                let appended: Vec<AuditRecord> = (0..DECISIONS_PER_DATASET)
                    .map(|d| {
                        let operation = format!("op-{index}-{d}");
                        recorded_in(record, &dataset_id, &operation, index as i64)
                    })
                    .collect();
                writer
                    .append_audit(&dataset_id, &appended)
                    .await
                    .expect("append");
            }
        })
        .buffer_unordered(FILLS_AT_ONCE)
        .collect::<Vec<()>>()
        .await;
}

async fn measured<T>(meter: &Meter, work: impl Future<Output = T>) -> (T, Cost) {
    let before = meter.counts();
    let started = Instant::now();
    let output = work.await;
    let time = started.elapsed();
    let after = meter.counts();
    let counts = Counts {
        requests: after.requests - before.requests,
        listed: after.listed - before.listed,
    };
    (output, Cost { time, counts })
}

fn check(report: &ReplayReport, records: usize) {
    assert_eq!(
        (report.replayed, report.unchanged, report.not_replayable),
        (records / 2, records / 2, 0),
        "{report:?}"
    );
    assert!(report.unreadable.is_empty(), "{report:?}");
}

struct Measured {
    datasets: usize,
    index: Cost,
    default: Cost,
}

async fn measure(setup: &Setup, candidate: &PolicyRuntime, datasets: usize) -> Measured {
    let (runs, passes) = repetitions();
    let records = records_at(datasets);
    let catalog = setup.engine.catalog();
    // Warm-up, not counted: the index's start is read once per catalog instance.
    setup
        .engine
        .replay_policy(candidate, records)
        .await
        .expect("replay");
    let mut index = Vec::new();
    for _ in 0..runs {
        let (report, cost) =
            measured(&setup.meter, setup.engine.replay_policy(candidate, records)).await;
        check(&report.expect("replay"), records);
        index.push(cost);
    }
    let mut default = Vec::new();
    for _ in 0..passes {
        let (report, cost) = measured(&setup.meter, async {
            let recent = every_dataset(catalog.as_ref(), records)
                .await
                .expect("every dataset");
            replay(candidate, &recent.records)
        })
        .await;
        check(&report, records);
        default.push(cost);
    }
    Measured {
        datasets,
        index: median(index),
        default: median(default),
    }
}

fn ratio(later: f64, earlier: f64) -> String {
    if earlier == 0.0 {
        "n/a".into()
    } else {
        format!("{:.1}x", later / earlier)
    }
}

fn report(bench: &mut Bench, setup: &Setup, measured: &[Measured], growing: Duration) {
    let (runs, passes) = repetitions();
    let unit = match setup.meter {
        Meter::Store(_) => "requests",
        Meter::Sql(_) => "statements",
    };
    bench.report(format!(
        "replay [{}]: the newest {RECORDS} records ({} decisions; all of them where the \
         catalog holds fewer); medians of {runs} runs and {passes} of every dataset's trail (the \
         bench's own timing); growing the catalog took {:.1} s",
        setup.name,
        RECORDS / 2,
        growing.as_secs_f64()
    ));
    bench.report(format!(
        "  {:>8} | {:>11} | {:>10} | {:>7} | {:>13} | {:>14} | {:>10}",
        "datasets",
        "replay time",
        unit,
        "listed",
        "default time",
        format!("default {unit}"),
        "listed"
    ));
    for m in measured {
        bench.report(format!(
            "  {:>8} | {:>8.1} ms | {:>10} | {:>7} | {:>10.1} ms | {:>14} | {:>10}",
            m.datasets,
            millis(m.index.time),
            m.index.counts.requests,
            m.index.counts.listed,
            millis(m.default.time),
            m.default.counts.requests,
            m.default.counts.listed,
        ));
    }
    let (first, last) = (&measured[0], &measured[measured.len() - 1]);
    bench.report(format!(
        "  at {} datasets against {}: replay time {}, {unit} {} (every dataset's trail: time {}, \
         {unit} {}; datasets {:.0}x)",
        last.datasets,
        first.datasets,
        ratio(
            last.index.time.as_secs_f64(),
            first.index.time.as_secs_f64()
        ),
        ratio(
            last.index.counts.requests as f64,
            first.index.counts.requests as f64
        ),
        ratio(
            last.default.time.as_secs_f64(),
            first.default.time.as_secs_f64()
        ),
        ratio(
            last.default.counts.requests as f64,
            first.default.counts.requests as f64
        ),
        last.datasets as f64 / first.datasets as f64,
    ));
}

async fn run(setup: Setup, decision: &[AuditRecord], candidate: &PolicyRuntime, bench: &mut Bench) {
    let mut measured = Vec::new();
    let mut created = 0;
    let mut growing = Duration::ZERO;
    for &datasets in sizes() {
        let started = Instant::now();
        grow(setup.writer.as_ref(), decision, created, datasets).await;
        growing += started.elapsed();
        created = datasets;
        measured.push(measure(&setup, candidate, datasets).await);
    }
    report(bench, &setup, &measured, growing);
    let database = setup.database.clone();
    drop(setup);
    if let Some(name) = database {
        mend_tests::harness::drop_database(&name).await;
    }
}

/// The default policy under another digest, as a rebuilt release of it would be: it decides as
/// the recorded decisions did, so every replayed one is unchanged.
fn rebadged() -> PolicyRuntime {
    let mut bytes = DEFAULT_POLICY_WASM.to_vec();
    let name = b"mend-bench-label";
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(b"replay");
    bytes.push(0);
    bytes.push(section.len() as u8);
    bytes.extend_from_slice(&section);
    PolicyRuntime::load(&bytes, PolicyLimits::default()).expect("the rebadged policy loads")
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut bench = Bench::from_args();
    runtime.block_on(async {
        let decision = one_decision().await;
        let candidate = rebadged();
        let directory = tempfile::tempdir().expect("temporary directory");
        let local = LocalFileSystem::new_with_prefix(directory.path()).expect("local store");
        let local = object_store_setup("local-directory", Arc::new(local), false, directory);
        run(local, &decision, &candidate, &mut bench).await;
        let unused = tempfile::tempdir().expect("temporary directory");
        let memory = object_store_setup("memory", Arc::new(InMemory::new()), true, unused);
        run(memory, &decision, &candidate, &mut bench).await;
        if std::env::var_os("MEND_TEST_DATABASE_URL").is_some() {
            run(postgres_setup().await, &decision, &candidate, &mut bench).await;
        } else {
            bench.report(
                "replay [postgres]: not run, MEND_TEST_DATABASE_URL is not set \
                 (`scripts/with-postgres cargo bench -p mend-tests --bench replay`)",
            );
        }
    });
    bench.finish();
}

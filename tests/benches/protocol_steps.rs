//! The operation protocol step by step: what each step of a writer's one-split commit costs
//! in requests on every backend, beside the model's actions for it, and each step's time
//! against its own floor on a store that answers every request 25 ms late.
//!
//!     cargo bench -p mend-tests --bench protocol_steps
//!     scripts/with-postgres scripts/with-s3 cargo bench -p mend-tests --bench protocol_steps
//!
//! **Counts.** On each backend (memory and a local directory always; Postgres when
//! `MEND_TEST_DATABASE_URL` is set, S3 when `MEND_TEST_S3_URL` is), a writer that has
//! committed before (its catalog's cache is warm) runs `begin`, `upload` (one split, 1 KiB)
//! and `publish` through the engine, as `mend serve`'s handlers do, and then `begin` and
//! `abort` of a second operation. The catalog and the split objects reach their store through
//! two [`LatencyStore`]s without latency, so that each step's requests are counted apart:
//! the catalog's (on object storage: its requests, the log versions it appended, the longest
//! chain of them made one after another; on Postgres: the statements and round trips, through
//! a [`SqlCounter`]) and the split objects'. Beside them, the model's actions for the step
//! (`mend-model`'s `protocol.rs`).
//!
//! **Times.** On a local directory behind 25 ms a request, [`TIMED`] operations, each step's
//! median wall time against the median of its floor in the same run: the step's writes as the
//! model counts them, made one after another: one put-if-absent of a log version for `begin`,
//! `publish` and `abort`, the object's put and then its record's for `upload` (the goal for
//! each step: within 1.5x). An abort's clean-up (its objects and marked rows deleted) runs
//! after its answer: counted with the abort, not timed.
//!
//! In test mode (`cargo test --benches`) the counts are taken and one operation timed, without
//! the ratios.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mend::catalog::object_store::ObjectStoreCatalogOptions;
use mend::catalog::{Catalog, ObjectStoreCatalog, PostgresCatalog};
use mend::engine::{BeginOperation, ExternalKind, PlannedSplit};
use mend::model::DatasetConfig;
use mend::objects::SplitObjects;
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions};
use mend_tests::latency_store::{LatencyStore, RoundTrips};
use mend_tests::sql_counter::{SqlCounter, SqlCounts};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutPayload};
use sha2::{Digest, Sha256};

mod common;
use common::{Bench, millis, test_mode};

const LATENCY: Duration = Duration::from_millis(25);
const PAYLOAD_BYTES: usize = 1024;
const DATASET: &str = "events";
/// Operations timed step by step at [`LATENCY`].
const TIMED: usize = 15;

/// The steps of the protocol this bench counts, in the order a writer sends them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Begin,
    Upload,
    Publish,
    Abort,
}

impl Step {
    const ALL: [Step; 4] = [Step::Begin, Step::Upload, Step::Publish, Step::Abort];

    fn name(self) -> &'static str {
        match self {
            Step::Begin => "begin",
            Step::Upload => "upload",
            Step::Publish => "publish",
            Step::Abort => "abort",
        }
    }

    /// The model's actions for the step (`model/src/protocol.rs`), and the writes among them.
    fn model(self) -> &'static str {
        match self {
            Step::Begin => "Begin (1 catalog write)",
            Step::Upload => "Upload (the object, then its record)",
            Step::Publish => "PublishStart, PublishLand (1 catalog write)",
            Step::Abort => "AbortStart, AbortEnd (1 catalog write, then the clean-up)",
        }
    }

    /// The step's writes, one after another: its floor.
    fn floor_writes(self) -> usize {
        match self {
            Step::Upload => 2,
            _ => 1,
        }
    }
}

/// What a step cost on one backend.
enum CatalogCount {
    ObjectStore(RoundTrips),
    Postgres(SqlCounts),
}

/// One backend under count: an engine whose catalog and split objects are counted apart.
struct Counted {
    name: &'static str,
    engine: Engine,
    catalog_store: Option<Arc<LatencyStore>>,
    sql: Option<SqlCounter>,
    objects_store: Arc<LatencyStore>,
    _directory: Option<tempfile::TempDir>,
}

impl Counted {
    /// The catalog's count since the last take.
    fn take_catalog(&self, sql_before: &mut SqlCounts) -> CatalogCount {
        match (&self.catalog_store, &self.sql) {
            (Some(store), _) => CatalogCount::ObjectStore(store.take()),
            (None, Some(sql)) => {
                let now = sql.counts();
                let since = now.since(sql_before);
                *sql_before = now;
                CatalogCount::Postgres(since)
            }
            (None, None) => unreachable!("a counted backend has a catalog to count"),
        }
    }
}

fn engine(catalog: Arc<dyn Catalog>, objects: SplitObjects) -> Engine {
    Engine::new(
        catalog,
        objects,
        PolicyRuntime::default_policy().expect("the default policy loads"),
        EngineOptions::default(),
    )
    .expect("engine starts")
}

/// An object-storage catalog and its split objects on `inner`, each through its own counter.
fn on_object_storage(
    name: &'static str,
    inner: Arc<dyn ObjectStore>,
    prefix: Path,
    latency: Duration,
    lists_in_order: bool,
    directory: Option<tempfile::TempDir>,
) -> Counted {
    let catalog_store = Arc::new(LatencyStore::new(inner.clone(), latency));
    let objects_store = Arc::new(LatencyStore::new(inner, latency));
    let options = ObjectStoreCatalogOptions {
        // Only the steps' own requests: no checkpoint falls due during the run.
        checkpoint_interval: 1_000_000,
        store_lists_in_order: lists_in_order,
        ..ObjectStoreCatalogOptions::default()
    };
    let catalog = ObjectStoreCatalog::new(catalog_store.clone(), prefix.clone(), options);
    let objects = SplitObjects::new(objects_store.clone(), prefix);
    Counted {
        name,
        engine: engine(Arc::new(catalog), objects),
        catalog_store: Some(catalog_store),
        sql: None,
        objects_store,
        _directory: directory,
    }
}

fn local_directory(latency: Duration) -> Counted {
    let directory = tempfile::tempdir().expect("temporary directory");
    let store = LocalFileSystem::new_with_prefix(directory.path()).expect("local store");
    on_object_storage(
        "local directory",
        Arc::new(store),
        Path::default(),
        latency,
        false,
        Some(directory),
    )
}

async fn postgres(url: &str) -> Counted {
    let sql = SqlCounter::start(url).await;
    let catalog = PostgresCatalog::connect_with(sql.url(), mend_tests::harness::postgres_options())
        .await
        .expect("connect to Postgres");
    let directory = tempfile::tempdir().expect("temporary directory");
    let store = LocalFileSystem::new_with_prefix(directory.path()).expect("local store");
    let objects_store = Arc::new(LatencyStore::new(Arc::new(store), Duration::ZERO));
    let objects = SplitObjects::new(objects_store.clone(), Path::default());
    Counted {
        name: "postgres (objects in a local directory)",
        engine: engine(Arc::new(catalog), objects),
        catalog_store: None,
        sql: Some(sql),
        objects_store,
        _directory: Some(directory),
    }
}

fn s3(url: &str) -> Counted {
    let url = format!(
        "{}/steps-{}",
        url.trim_end_matches('/'),
        uuid::Uuid::new_v4().simple()
    );
    let (store, prefix) =
        mend::catalog::object_store::open_store(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
    on_object_storage("s3", store, prefix, Duration::ZERO, true, None)
}

fn payload(split_id: &str) -> Bytes {
    let mut bytes = vec![b'x'; PAYLOAD_BYTES];
    bytes[..split_id.len()].copy_from_slice(split_id.as_bytes());
    Bytes::from(bytes)
}

fn begin_request(dataset_id: &str, operation_id: &str, split_id: &str) -> BeginOperation {
    let payload = payload(split_id);
    BeginOperation {
        dataset_id: dataset_id.to_string(),
        operation_id: Some(operation_id.to_string()),
        kind: ExternalKind::Commit,
        node: "writer".into(),
        lease_ms: None,
        splits: vec![PlannedSplit {
            split_id: split_id.to_string(),
            metadata_json: r#"{"num_docs": 1000}"#.into(),
            size: payload.len() as u64,
            sha256: format!("{:x}", Sha256::digest(&payload)),
        }],
        checkpoint_delta: None,
        replaced_split_ids: Vec::new(),
        publish_token: None,
    }
}

/// Runs `step` of operation number `round` (its split is `s<round>`).
async fn run_step(engine: &Engine, step: Step, dataset_id: &str, round: usize) {
    let operation_id = format!("op{round:04}");
    let split_id = format!("s{round:04}");
    match step {
        Step::Begin => {
            let begin = begin_request(dataset_id, &operation_id, &split_id);
            engine.begin_operation(&begin).await.expect("begin");
        }
        Step::Upload => {
            let body = futures::stream::iter([Ok(payload(&split_id))]);
            engine
                .upload_object(dataset_id, &operation_id, &split_id, body)
                .await
                .expect("upload");
        }
        Step::Publish => {
            engine
                .publish_operation(dataset_id, &operation_id)
                .await
                .expect("publish");
        }
        Step::Abort => {
            engine
                .abort_operation(dataset_id, &operation_id)
                .await
                .expect("abort");
        }
    }
}

/// The steps of operation `round`: begin, upload, publish; or begin, abort.
fn steps_of(round: usize) -> &'static [Step] {
    if round.is_multiple_of(2) {
        &[Step::Begin, Step::Upload, Step::Publish]
    } else {
        &[Step::Begin, Step::Abort]
    }
}

async fn create_and_warm(engine: &Engine, dataset_id: &str) {
    engine
        .create_dataset(dataset_id, &DatasetConfig::default())
        .await
        .expect("create the dataset");
    // A writer that has committed before: its catalog holds the dataset's state.
    for round in [1_000, 1_001] {
        for step in steps_of(round) {
            run_step(engine, *step, dataset_id, round).await;
        }
    }
    engine.wait_for_cleanups().await;
}

/// Counts each step of one operation that publishes and one that aborts.
async fn count(counted: &Counted, dataset_id: &str) -> Vec<(Step, CatalogCount, RoundTrips)> {
    create_and_warm(&counted.engine, dataset_id).await;
    let mut sql_before = counted
        .sql
        .as_ref()
        .map(|sql| sql.counts())
        .unwrap_or_default();
    counted.take_catalog(&mut sql_before);
    counted.objects_store.take();
    let mut rows = Vec::new();
    for round in [0, 1] {
        for step in steps_of(round) {
            run_step(&counted.engine, *step, dataset_id, round).await;
            // An abort's clean-up runs after its answer: counted with it.
            counted.engine.wait_for_cleanups().await;
            let catalog = counted.take_catalog(&mut sql_before);
            // Aborts of an operation that wrote no object delete none: the object side of a
            // begin-then-abort is the abort's own.
            rows.push((*step, catalog, counted.objects_store.take()));
        }
    }
    // The begin of the aborted operation is counted like the first one's; keep one of each.
    let mut seen = Vec::new();
    rows.retain(|(step, _, _)| {
        let first = !seen.contains(step);
        seen.push(*step);
        first
    });
    rows
}

fn count_lines(name: &str, rows: &[(Step, CatalogCount, RoundTrips)]) -> Vec<String> {
    let mut lines = vec![format!("{name}:")];
    let (mut requests, mut sequential, mut versions) = (0, 0, 0);
    for (step, catalog, objects) in rows {
        let catalog = match catalog {
            CatalogCount::ObjectStore(trips) => {
                if *step != Step::Abort {
                    requests += trips.requests() + objects.requests();
                    sequential += trips.sequential + objects.sequential;
                    versions += trips.log_puts;
                }
                format!(
                    "catalog {} requests ({} GET, {} HEAD, {} LIST, {} put, {} delete; {} in sequence), {} log versions",
                    trips.requests(),
                    trips.gets,
                    trips.heads,
                    trips.lists,
                    trips.log_puts + trips.other_puts,
                    trips.deletes,
                    trips.sequential,
                    trips.log_puts
                )
            }
            CatalogCount::Postgres(sql) => {
                if *step != Step::Abort {
                    requests += sql.round_trips + objects.requests();
                    sequential += sql.round_trips + objects.sequential;
                }
                format!(
                    "catalog {} statements in {} round trips",
                    sql.statements, sql.round_trips
                )
            }
        };
        lines.push(format!(
            "  {:<8} {catalog}; objects {} requests ({} put, {} GET, {} HEAD, {} delete); model: {}",
            step.name(),
            objects.requests(),
            objects.object_puts + objects.other_puts,
            objects.gets,
            objects.heads,
            objects.deletes,
            step.model()
        ));
    }
    lines.push(format!(
        "  a commit (begin, upload, publish): {requests} requests, {sequential} of them in sequence{}",
        if versions > 0 {
            format!(", {versions} log versions (goal: at most 5 in sequence, 2 log versions)")
        } else {
            String::new()
        }
    ));
    lines
}

/// The floor of `step` at the injected latency: its writes as the model counts them, one
/// after another (an upload: the object, then its record; every other step: one put-if-absent
/// of a log version).
async fn floor(store: &dyn ObjectStore, step: Step, round: usize) {
    for write in 0..step.floor_writes() {
        let (path, bytes) = match (step, write) {
            (Step::Upload, 0) => (format!("floor/splits/s{round:04}"), PAYLOAD_BYTES + 300),
            _ => (
                format!("floor/log/{round:020}-{}-{write}.json", step.name()),
                600,
            ),
        };
        store
            .put_opts(
                &Path::from(path),
                PutPayload::from(vec![b'x'; bytes]),
                PutMode::Create.into(),
            )
            .await
            .expect("floor put");
    }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut bench = Bench::from_args();

    bench.report(format!(
        "the operation protocol, step by step (a one-split commit of {PAYLOAD_BYTES} bytes, a writer whose cache is warm):"
    ));
    let mut backends = vec![
        on_object_storage(
            "memory",
            Arc::new(InMemory::new()),
            Path::default(),
            Duration::ZERO,
            true,
            None,
        ),
        local_directory(Duration::ZERO),
    ];
    match std::env::var("MEND_TEST_DATABASE_URL") {
        Ok(url) => backends.push(runtime.block_on(postgres(&url))),
        Err(_) => bench.report("(set MEND_TEST_DATABASE_URL, or run under scripts/with-postgres, to count on Postgres too)"),
    }
    match std::env::var("MEND_TEST_S3_URL") {
        Ok(url) => backends.push(s3(&url)),
        Err(_) => {
            bench.report("(set MEND_TEST_S3_URL, or run under scripts/with-s3, to count on S3 too)")
        }
    }
    for counted in &backends {
        // A dataset of its own: the Postgres server is shared.
        let dataset_id = format!("steps-{}", uuid::Uuid::new_v4().simple());
        let rows = runtime.block_on(count(counted, &dataset_id));
        for line in count_lines(counted.name, &rows) {
            bench.report(line);
        }
    }
    drop(backends);

    // Each step's time against its floor, on a local directory 25 ms a request away.
    let timed = local_directory(LATENCY);
    let floor_store = timed.objects_store.clone();
    let operations = if test_mode() { 2 } else { TIMED * 2 };
    let (steps, floors) = runtime.block_on(async {
        create_and_warm(&timed.engine, DATASET).await;
        let mut steps: Vec<(Step, Duration)> = Vec::new();
        let mut floors: Vec<(Step, Duration)> = Vec::new();
        for round in 0..operations {
            for step in steps_of(round) {
                let started = Instant::now();
                run_step(&timed.engine, *step, DATASET, round).await;
                steps.push((*step, started.elapsed()));
                // Not timed (the answer was given), and not left to overlap what follows.
                timed.engine.wait_for_cleanups().await;
                let started = Instant::now();
                floor(&*floor_store, *step, round).await;
                floors.push((*step, started.elapsed()));
            }
        }
        (steps, floors)
    });
    bench.report(format!(
        "each step against its floor, a local directory {} ms a request away ({} operations of each kind; the floor: the step's fewest writes, one after another):",
        LATENCY.as_millis(),
        operations / 2
    ));
    for step in Step::ALL {
        let of = |times: &[(Step, Duration)]| -> Vec<Duration> {
            times
                .iter()
                .filter(|(s, _)| *s == step)
                .map(|(_, t)| *t)
                .collect()
        };
        let (mend, bare) = (median(of(&steps)), median(of(&floors)));
        let ratio = if test_mode() {
            "(test mode: no ratio)".to_string()
        } else {
            format!(
                "step/floor {:.2}x (goal <= 1.5x)",
                mend.as_secs_f64() / bare.as_secs_f64()
            )
        };
        bench.report(format!(
            "  {:<8} {:7.1} ms against the floor's {:6.1} ms (medians): {ratio}",
            step.name(),
            millis(mend),
            millis(bare)
        ));
    }
    bench.finish();
}

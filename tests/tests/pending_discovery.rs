//! What one discovery of pending work costs (`Catalog::pending_datasets`) with 10,000 datasets
//! of which 10 have pending intents: on object storage (memory, a local directory) one LIST of
//! the pending markers, counted in requests and in what the listing returned; on Postgres one
//! statement, counted on the wire, and the rows it returned. For comparison, the trait's
//! default discovery (every dataset's intents) on the same memory catalog.

use std::sync::Arc;

use futures::StreamExt;
use mend::Catalog;
use mend::catalog::ObjectStoreCatalog;
use mend::catalog::PostgresCatalog;
use mend::intent::{Intent, OperationKind};
use mend::model::DatasetConfig;
use mend_tests::CountingStore;
use mend_tests::harness::{TEST_EPOCH_MS, drop_database, own_database, postgres_options};
use mend_tests::sql_counter::SqlCounter;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;

const DATASETS: usize = 10_000;
const PENDING: usize = 10;

fn dataset_id(index: usize) -> String {
    format!("ds-{index:05}")
}

/// Every 1,000th dataset has an intent: 10 of 10,000.
fn has_intent(index: usize) -> bool {
    index.is_multiple_of(DATASETS / PENDING)
}

fn intent(dataset_id: &str) -> Intent {
    Intent::armed(
        "op-crashed".into(),
        OperationKind::Commit,
        dataset_id,
        "writer",
        TEST_EPOCH_MS,
        60_000,
    )
}

/// Creates the datasets and the intents, 32 at a time.
async fn populate(catalog: &dyn Catalog) {
    futures::stream::iter(0..DATASETS)
        .for_each_concurrent(32, |index| async move {
            let id = dataset_id(index);
            catalog
                .create_dataset(&id, "uid", &DatasetConfig::default(), TEST_EPOCH_MS, None)
                .await
                .unwrap_or_else(|error| panic!("create {id}: {error}"));
            if has_intent(index) {
                catalog.put_intent(&intent(&id)).await.unwrap();
            }
        })
        .await;
}

fn expected() -> Vec<String> {
    (0..DATASETS)
        .filter(|&index| has_intent(index))
        .map(dataset_id)
        .collect()
}

/// Discovery on an object-storage catalog over `inner`, by a process other than the writers
/// (a fresh instance, nothing cached), counted.
async fn object_store_discovery(name: &str, inner: Arc<dyn ObjectStore>) {
    let counted = Arc::new(CountingStore::new(inner));
    let writer = ObjectStoreCatalog::new(counted.clone(), Path::default(), Default::default());
    populate(&writer).await;

    let supervisor = ObjectStoreCatalog::new(counted.clone(), Path::default(), Default::default());
    let before = (
        counted.requests(),
        counted.entries_listed(),
        counted.bytes_received(),
    );
    let found = supervisor.pending_datasets().await.unwrap();
    let cost = counted.requests().since(&before.0);
    let entries = counted.entries_listed() - before.1;
    // Listed keys only: the one request is a LIST (asserted below).
    let key_bytes = counted.bytes_received() - before.2;
    let ids: Vec<String> = found.into_iter().map(|p| p.dataset_id).collect();
    assert_eq!(ids, expected());
    assert_eq!(
        (cost.lists, cost.total()),
        (1, 1),
        "{name}: one LIST: {cost}"
    );
    assert_eq!(
        entries, PENDING as u64,
        "{name}: the listing returned the markers only"
    );
    println!(
        "pending discovery [{name}]: {DATASETS} datasets, {PENDING} with intents: 1 pending_datasets() = {cost} ({} requests); the listing returned {entries} entries, {key_bytes} bytes of keys",
        cost.total()
    );

    if name == "memory" {
        // The trait's default, for comparison: every dataset's intents.
        let cold = ObjectStoreCatalog::new(counted.clone(), Path::default(), Default::default());
        let before = (counted.requests(), counted.entries_listed());
        let scanned = mend::catalog::pending::scan_every_dataset(&cold)
            .await
            .unwrap();
        let cost = counted.requests().since(&before.0);
        let entries = counted.entries_listed() - before.1;
        let scanned: Vec<String> = scanned.into_iter().map(|p| p.dataset_id).collect();
        assert_eq!(scanned, expected());
        println!(
            "pending discovery [{name}, the trait's default for comparison]: every dataset's intents = {cost} ({} requests); listings returned {entries} entries",
            cost.total()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_discovery_on_memory_is_one_list_of_the_pending_markers() {
    object_store_discovery("memory", Arc::new(InMemory::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_discovery_on_a_local_directory_is_one_list_of_the_pending_markers() {
    let directory = tempfile::tempdir().unwrap();
    let store = LocalFileSystem::new_with_prefix(directory.path()).unwrap();
    object_store_discovery("local-directory", Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_discovery_on_postgres_is_one_statement() {
    // A database of its own: 10,000 datasets left in the shared one would slow every test
    // that goes through all datasets (a policy swap's replay reads each one's audit).
    let (url, database) = own_database("mend_pending_discovery").await;
    let counter = SqlCounter::start(&url).await;
    let catalog = PostgresCatalog::connect_with(counter.url(), postgres_options())
        .await
        .expect("connect to Postgres through the counting proxy");
    let catalog = &catalog;
    let ids: Vec<String> = (0..DATASETS).map(dataset_id).collect();
    futures::stream::iter(ids.iter().enumerate())
        .for_each_concurrent(16, |(index, id)| async move {
            catalog
                .create_dataset(id, "uid", &DatasetConfig::default(), TEST_EPOCH_MS, None)
                .await
                .unwrap_or_else(|error| panic!("create {id}: {error}"));
            if has_intent(index) {
                catalog.put_intent(&intent(id)).await.unwrap();
            }
        })
        .await;
    let before = counter.counts();
    let found = catalog.pending_datasets().await.unwrap();
    let cost = counter.counts().since(&before);
    let ids: Vec<&str> = found.iter().map(|p| p.dataset_id.as_str()).collect();
    assert_eq!(ids, expected());
    for pending in &found {
        assert_eq!(pending.intents, Some(1));
        assert_eq!(
            pending.earliest_lease_expiry_ms,
            Some(TEST_EPOCH_MS + 60_000)
        );
    }
    assert_eq!(cost.statements, 1, "{cost:?}");
    // Again, on a connection that has the statement prepared already.
    let before = counter.counts();
    catalog.pending_datasets().await.unwrap();
    let again = counter.counts().since(&before);
    assert_eq!(again.statements, 1, "{again:?}");
    println!(
        "pending discovery [postgres]: {DATASETS} datasets, {PENDING} with intents: 1 pending_datasets() = {} statement, {} round trips on the wire ({} the next time), {} bytes received; {} rows returned",
        cost.statements,
        cost.round_trips,
        again.round_trips,
        cost.bytes_received,
        found.len()
    );
    drop_database(&database).await;
}

//! What one discovery of pending work costs (`Catalog::pending_datasets`) with 10,000 datasets
//! of which 10 have pending intents: on object storage (memory, a local directory) one LIST of
//! the pending markers, counted in requests and in what the listing returned; on Postgres one
//! statement, counted on the wire, and the rows it returned. For comparison, the trait's
//! default discovery (every dataset's intents) on the same memory catalog.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use mend::Catalog;
use mend::catalog::ObjectStoreCatalog;
use mend::intent::{Intent, OperationKind};
use mend::model::DatasetConfig;
use mend_tests::harness::TEST_EPOCH_MS;
use mend_tests::{Backend, CountingStore, Harness};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

const DATASETS: usize = 10_000;
const PENDING: usize = 10;

/// Counts what listings return: entries, and the bytes of their keys (an S3 LIST answers
/// each key in about 300 bytes of XML, its key included, up to 1,000 keys a page).
#[derive(Debug)]
struct ListMeter {
    inner: Arc<dyn ObjectStore>,
    entries: Arc<AtomicU64>,
    key_bytes: Arc<AtomicU64>,
}

impl ListMeter {
    fn take(&self) -> (u64, u64) {
        (
            self.entries.swap(0, Ordering::SeqCst),
            self.key_bytes.swap(0, Ordering::SeqCst),
        )
    }
}

impl std::fmt::Display for ListMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ListMeter({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for ListMeter {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn delete(&self, location: &Path) -> object_store::Result<()> {
        self.inner.delete(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let (entries, key_bytes) = (self.entries.clone(), self.key_bytes.clone());
        self.inner
            .list(prefix)
            .inspect(move |item| {
                if let Ok(meta) = item {
                    entries.fetch_add(1, Ordering::SeqCst);
                    key_bytes.fetch_add(meta.location.as_ref().len() as u64, Ordering::SeqCst);
                }
            })
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let listed = self.inner.list_with_delimiter(prefix).await?;
        let keys = listed
            .objects
            .iter()
            .map(|meta| meta.location.as_ref().len())
            .chain(listed.common_prefixes.iter().map(|dir| dir.as_ref().len()));
        for key in keys {
            self.entries.fetch_add(1, Ordering::SeqCst);
            self.key_bytes.fetch_add(key as u64, Ordering::SeqCst);
        }
        Ok(listed)
    }

    async fn copy(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        self.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        self.inner.copy_if_not_exists(from, to).await
    }
}

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
    let meter = Arc::new(ListMeter {
        inner,
        entries: Arc::default(),
        key_bytes: Arc::default(),
    });
    let counted = Arc::new(CountingStore::new(meter.clone()));
    let writer = ObjectStoreCatalog::new(counted.clone(), Path::default(), Default::default());
    populate(&writer).await;

    let supervisor = ObjectStoreCatalog::new(counted.clone(), Path::default(), Default::default());
    let before = counted.requests();
    meter.take();
    let found = supervisor.pending_datasets().await.unwrap();
    let cost = counted.requests().since(&before);
    let (entries, key_bytes) = meter.take();
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
        let before = counted.requests();
        meter.take();
        let scanned = mend::catalog::pending::scan_every_dataset(&cold)
            .await
            .unwrap();
        let cost = counted.requests().since(&before);
        let (entries, key_bytes) = meter.take();
        let scanned: Vec<String> = scanned.into_iter().map(|p| p.dataset_id).collect();
        assert_eq!(scanned, expected());
        println!(
            "pending discovery [{name}, the trait's default for comparison]: every dataset's intents = {cost} ({} requests); listings returned {entries} entries, {key_bytes} bytes of keys",
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
    let harness = Harness::counting_sql(Backend::Postgres).await;
    let catalog = harness.engine.catalog();
    // The database is shared with other tests: ids of this run's own.
    let run = uuid::Uuid::new_v4().simple().to_string();
    let ids: Vec<String> = (0..DATASETS)
        .map(|index| format!("{run}-{}", dataset_id(index)))
        .collect();
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
    let counter = harness.sql.as_ref().expect("counting sql");
    let before = counter.counts();
    let found = catalog.pending_datasets().await.unwrap();
    let cost = counter.counts().since(&before);
    let ours: Vec<_> = found
        .iter()
        .filter(|pending| pending.dataset_id.starts_with(&run))
        .collect();
    assert_eq!(ours.len(), PENDING);
    for pending in &ours {
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
        "pending discovery [postgres]: {DATASETS} datasets of this run, {PENDING} with intents: 1 pending_datasets() = {} statement, {} round trips on the wire ({} the next time); {} rows returned ({} of this run's, the rest other tests' leftovers in the shared database)",
        cost.statements,
        cost.round_trips,
        again.round_trips,
        found.len(),
        ours.len()
    );
}

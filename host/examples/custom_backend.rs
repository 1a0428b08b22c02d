//! A catalog backend of your own, held to the conformance suite mend's backends pass.
//!
//! ```sh
//! cargo run -p mend --example custom_backend
//! ```
//!
//! `MeteredCatalog` is the backend: it wraps mend's object-storage catalog (here in memory) and
//! counts, per dataset, the mutations it served, as an embedder would to export a metric or
//! enforce a quota. It implements the required methods of [`mend::Catalog`] (the atomic steps)
//! and nothing else, so mend's engine runs on it with every provided method at its default:
//! the capabilities of a backend without an atomic batch settlement or a pending index, the
//! cheap reads built from the required ones (`probe_manifest`, `split_states`, dataset ids,
//! the pending datasets), a recovery batch settled one intent at a time, and a commit's two
//! steps (`begin_commit`, `publish_commit`) run as the separate steps they fold, each counted.
//! A backend overrides a provided method only to be faster. `main` runs every case of the kit
//! (`mend-testkit`) against it, prints a line per case and a summary, and exits with 1 if a
//! case failed.
//!
//! # Plugging in a real backend
//!
//! Replace `MeteredCatalog` with your catalog, and change the [`BackendUnderTest`] impl of
//! `Metered`:
//!
//! - `open`: a fresh catalog of yours for one case (a new schema or database, or one shared
//!   by all cases: the cases use dataset ids of their own), and the store the split objects
//!   go to (any `object_store`: a temporary directory, a prefix of a bucket);
//! - `catalog_fingerprint`: a value that changes whenever your catalog writes anything for a
//!   dataset. Count the writes of your storage client, or read row versions (mend's Postgres
//!   backend reads every row's `ctid` and `xmin`) or a log sequence number. The meter here is
//!   no fingerprint: a retry answered from its recorded request is a request served that
//!   writes nothing, which is what the cases check;
//! - `scale`: [`Scale::THOROUGH`] for a transactional database, [`Scale::LIGHT`] for a slow
//!   remote store, or your own numbers.
//!
//! Then, in your crate, add `mend-testkit` as a dev-dependency and call the kit from a test:
//! `mend_testkit::run_all(&YourBackend).await.assert_passed()` in a
//! `#[tokio::test(flavor = "multi_thread")]`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mend::Catalog;
use mend::Result;
use mend::audit::AuditRecord;
use mend::catalog::{
    DatasetChange, MarkRule, ObjectStoreCatalog, PublishValidator, RecordedRequest, RequestKey,
    StagePlanner,
};
use mend::intent::{Intent, IntentPhase};
use mend::model::{
    Dataset, DatasetConfig, ListQuery, MarkResult, NewSplit, PublishRequest, PublishResult,
    SplitPage, StageMode, StagedSplit, TimestampMs,
};
use mend::objects::SplitObjects;
use mend_testkit::{BackendUnderTest, CountingStore, Fingerprint, FreshCatalog, Scale};
use object_store::memory::InMemory;
use object_store::path::Path;

/// Mutations served, per dataset.
#[derive(Debug, Default)]
struct Meter {
    // A std mutex: it is held for one map update, never across an await.
    served: Mutex<BTreeMap<String, u64>>,
}

impl Meter {
    /// Counts `result` as a mutation served for `dataset_id` if it succeeded, and returns it.
    fn count<T>(&self, dataset_id: &str, result: Result<T>) -> Result<T> {
        if result.is_ok() {
            let mut served = self
                .served
                .lock()
                .expect("no thread panics holding the meter");
            *served.entry(dataset_id.to_string()).or_default() += 1;
        }
        result
    }

    /// How many datasets were served, and how many mutations in all.
    fn totals(&self) -> (usize, u64) {
        let served = self
            .served
            .lock()
            .expect("no thread panics holding the meter");
        (served.len(), served.values().sum())
    }
}

/// The backend: another catalog, with every mutation it serves counted per dataset.
#[derive(Debug)]
struct MeteredCatalog {
    inner: Arc<dyn Catalog>,
    meter: Arc<Meter>,
}

#[async_trait]
impl Catalog for MeteredCatalog {
    async fn create_dataset(
        &self,
        dataset_id: &str,
        uid: &str,
        config: &DatasetConfig,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        let result = self
            .inner
            .create_dataset(dataset_id, uid, config, now_ms, key)
            .await;
        self.meter.count(dataset_id, result)
    }

    async fn list_datasets(&self) -> Result<Vec<Dataset>> {
        self.inner.list_datasets().await
    }

    async fn dataset(&self, dataset_id: &str) -> Result<Dataset> {
        self.inner.dataset(dataset_id).await
    }

    async fn update_dataset(
        &self,
        dataset_id: &str,
        change: DatasetChange<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        let result = self
            .inner
            .update_dataset(dataset_id, change, now_ms, key)
            .await;
        self.meter.count(dataset_id, result)
    }

    async fn stage(
        &self,
        dataset_id: &str,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        planner: &StagePlanner<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Vec<StagedSplit>> {
        let result = self
            .inner
            .stage(dataset_id, mode, splits, planner, now_ms, key)
            .await;
        self.meter.count(dataset_id, result)
    }

    async fn publish(
        &self,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<PublishResult> {
        let result = self.inner.publish(request, validate, now_ms, key).await;
        self.meter.count(&request.dataset_id, result)
    }

    async fn record_request(
        &self,
        dataset_id: &str,
        record: &RecordedRequest,
    ) -> Result<RecordedRequest> {
        let result = self.inner.record_request(dataset_id, record).await;
        self.meter.count(dataset_id, result)
    }

    async fn recorded_request(
        &self,
        dataset_id: &str,
        key: &str,
    ) -> Result<Option<RecordedRequest>> {
        self.inner.recorded_request(dataset_id, key).await
    }

    async fn forget_recorded_requests(
        &self,
        dataset_id: &str,
        recorded_before_ms: TimestampMs,
        now_ms: TimestampMs,
    ) -> Result<usize> {
        let result = self
            .inner
            .forget_recorded_requests(dataset_id, recorded_before_ms, now_ms)
            .await;
        self.meter.count(dataset_id, result)
    }

    async fn mark(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        rule: MarkRule,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<MarkResult> {
        let result = self
            .inner
            .mark(dataset_id, split_ids, rule, now_ms, key)
            .await;
        self.meter.count(dataset_id, result)
    }

    async fn delete_splits(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<()> {
        let result = self
            .inner
            .delete_splits(dataset_id, split_ids, now_ms, key)
            .await;
        self.meter.count(dataset_id, result)
    }

    async fn list_splits(&self, dataset_id: &str, query: &ListQuery) -> Result<SplitPage> {
        self.inner.list_splits(dataset_id, query).await
    }

    async fn put_intent(&self, intent: &Intent) -> Result<()> {
        let result = self.inner.put_intent(intent).await;
        self.meter.count(&intent.dataset_id, result)
    }

    async fn update_intent(&self, intent: &Intent, expected_phase: IntentPhase) -> Result<()> {
        let result = self.inner.update_intent(intent, expected_phase).await;
        self.meter.count(&intent.dataset_id, result)
    }

    async fn abandon_intent(
        &self,
        dataset_id: &str,
        operation_id: &str,
        lease_expired_by: Option<TimestampMs>,
        now_ms: TimestampMs,
    ) -> Result<Intent> {
        let result = self
            .inner
            .abandon_intent(dataset_id, operation_id, lease_expired_by, now_ms)
            .await;
        self.meter.count(dataset_id, result)
    }

    async fn delete_intent(
        &self,
        dataset_id: &str,
        operation_id: &str,
        now_ms: TimestampMs,
    ) -> Result<()> {
        let result = self
            .inner
            .delete_intent(dataset_id, operation_id, now_ms)
            .await;
        self.meter.count(dataset_id, result)
    }

    async fn list_intents(&self, dataset_id: &str) -> Result<Vec<Intent>> {
        self.inner.list_intents(dataset_id).await
    }

    async fn append_audit(&self, dataset_id: &str, records: &[AuditRecord]) -> Result<()> {
        let result = self.inner.append_audit(dataset_id, records).await;
        self.meter.count(dataset_id, result)
    }

    async fn list_audit(&self, dataset_id: &str, limit: Option<usize>) -> Result<Vec<AuditRecord>> {
        self.inner.list_audit(dataset_id, limit).await
    }
}

/// How the kit opens `MeteredCatalog`s: each case gets a new one on a new in-memory store, and
/// all of them share one meter.
#[derive(Debug, Default)]
struct Metered {
    meter: Arc<Meter>,
}

#[async_trait]
impl BackendUnderTest for Metered {
    /// The store under the inner catalog, counting its writes.
    type State = Arc<CountingStore>;

    fn name(&self) -> String {
        "metered".into()
    }

    async fn open(&self) -> FreshCatalog<Self::State> {
        let store = Arc::new(InMemory::new());
        // The catalog writes through the counter; the split objects go to the same store
        // beside it, where the kit counts them itself.
        let catalog_store = Arc::new(CountingStore::new(store.clone()));
        let inner =
            ObjectStoreCatalog::new(catalog_store.clone(), Path::default(), Default::default());
        let catalog = MeteredCatalog {
            inner: Arc::new(inner),
            meter: self.meter.clone(),
        };
        FreshCatalog {
            catalog: Arc::new(catalog),
            objects: SplitObjects::new(store, Path::default()),
            state: catalog_store,
        }
    }

    async fn catalog_fingerprint(
        &self,
        catalog_store: &Self::State,
        _dataset_id: &str,
    ) -> Fingerprint {
        // Every write of the catalog goes through this store; a count over all datasets is
        // coarser than one per dataset, and as good for "this step wrote nothing".
        Fingerprint::writes(catalog_store.writes())
    }

    fn scale(&self) -> Scale {
        // A catalog in memory: the default numbers.
        Scale::STANDARD
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let backend = Metered::default();
    let summary = mend_testkit::run_all(&backend).await;
    let (datasets, served) = backend.meter.totals();
    println!("the meter counted {served} mutations served over {datasets} datasets");
    if !summary.is_success() {
        eprintln!("conformance failed: {:?}", summary.failed());
        std::process::exit(1);
    }
}

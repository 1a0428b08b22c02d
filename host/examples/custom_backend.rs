//! A catalog backend of your own, held to the conformance suite mend's backends pass.
//!
//! ```sh
//! cargo run -p mend --example custom_backend
//! ```
//!
//! `MeteredCatalog` wraps mend's object-storage catalog (here in memory) and counts, per
//! dataset, the mutations it served, as an embedder would to export a metric or enforce a
//! quota. It implements the required methods of [`mend::Catalog`] (the atomic steps and the
//! reads) and takes every provided one at its default but `stage_unless_in_the_way` and
//! `publish_unless_in_the_way`, whose check a wrapper leaves to the catalog it wraps (the
//! defaults' are not atomic); what [`mend::catalog::CatalogExt`] builds
//! from them (a config change, a named mark) comes with every catalog (docs/src/embedding.md, "Your own catalog backend", says
//! which and what they cost). `main` runs every case of the kit (`mend-testkit`) against it,
//! prints a line per case and a summary, and exits with 1 if a case failed. To hold a real
//! backend to the kit, replace `MeteredCatalog` with it and change `open` and
//! `catalog_fingerprint` of the `BackendUnderTest` impl, as that page says.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
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
use mend::{Catalog, Result};
use mend_testkit::{BackendUnderTest, CountingStore, Fingerprint, FreshCatalog};
use object_store::{memory::InMemory, path::Path};

/// Mutations served, per dataset. A std mutex: held for one map update, never across an await.
type Meter = Arc<Mutex<BTreeMap<String, u64>>>;

/// The backend: another catalog, with every mutation it serves counted per dataset.
#[derive(Debug)]
struct MeteredCatalog {
    inner: ObjectStoreCatalog,
    meter: Meter,
}

impl MeteredCatalog {
    /// Counts `result` as a mutation served for dataset `id` if it succeeded, and returns it.
    fn count<T>(&self, id: &str, result: Result<T>) -> Result<T> {
        if result.is_ok() {
            let mut served = self
                .meter
                .lock()
                .expect("no thread panics holding the meter");
            *served.entry(id.to_string()).or_default() += 1;
        }
        result
    }
}

// Each method forwards to the inner catalog; the ones that write count what they served.
#[async_trait]
impl Catalog for MeteredCatalog {
    async fn create_dataset(
        &self,
        id: &str,
        uid: &str,
        config: &DatasetConfig,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        self.count(
            id,
            self.inner.create_dataset(id, uid, config, now, key).await,
        )
    }

    async fn list_datasets(&self) -> Result<Vec<Dataset>> {
        self.inner.list_datasets().await
    }

    async fn dataset(&self, id: &str) -> Result<Dataset> {
        self.inner.dataset(id).await
    }

    async fn update_dataset(
        &self,
        id: &str,
        change: DatasetChange<'_>,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        self.count(id, self.inner.update_dataset(id, change, now, key).await)
    }

    async fn stage(
        &self,
        id: &str,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        plan: &StagePlanner<'_>,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Vec<StagedSplit>> {
        self.count(id, self.inner.stage(id, mode, splits, plan, now, key).await)
    }

    // The two provided methods taken from the inner catalog instead of their defaults: the
    // default reads the intents and then stages (or publishes), two steps a concurrent begin
    // can land between, where the inner catalog checks them in its write's own atomic step.
    async fn stage_unless_in_the_way(
        &self,
        id: &str,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        plan: Option<&StagePlanner<'_>>,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Vec<StagedSplit>> {
        let staged = self
            .inner
            .stage_unless_in_the_way(id, mode, splits, plan, now, key)
            .await;
        self.count(id, staged)
    }

    async fn publish(
        &self,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<PublishResult> {
        let result = self.inner.publish(request, validate, now, key).await;
        self.count(&request.dataset_id, result)
    }

    async fn publish_unless_in_the_way(
        &self,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<PublishResult> {
        let result = self
            .inner
            .publish_unless_in_the_way(request, validate, now, key)
            .await;
        self.count(&request.dataset_id, result)
    }

    async fn record_request(&self, id: &str, record: &RecordedRequest) -> Result<RecordedRequest> {
        self.count(id, self.inner.record_request(id, record).await)
    }

    async fn recorded_request(&self, id: &str, key: &str) -> Result<Option<RecordedRequest>> {
        self.inner.recorded_request(id, key).await
    }

    async fn forget_recorded_requests(
        &self,
        id: &str,
        before: TimestampMs,
        now: TimestampMs,
    ) -> Result<usize> {
        self.count(
            id,
            self.inner.forget_recorded_requests(id, before, now).await,
        )
    }

    async fn mark(
        &self,
        id: &str,
        split_ids: &[String],
        rule: MarkRule,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<MarkResult> {
        self.count(id, self.inner.mark(id, split_ids, rule, now, key).await)
    }

    async fn see_marks(
        &self,
        id: &str,
        split_ids: &[String],
        seen_at: TimestampMs,
    ) -> Result<Vec<String>> {
        self.count(id, self.inner.see_marks(id, split_ids, seen_at).await)
    }

    async fn delete_splits(
        &self,
        id: &str,
        split_ids: &[String],
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<()> {
        self.count(id, self.inner.delete_splits(id, split_ids, now, key).await)
    }

    async fn list_splits(&self, id: &str, query: &ListQuery) -> Result<SplitPage> {
        self.inner.list_splits(id, query).await
    }

    async fn put_intent(&self, intent: &Intent) -> Result<()> {
        self.count(&intent.dataset_id, self.inner.put_intent(intent).await)
    }

    async fn update_intent(&self, intent: &Intent, expected: IntentPhase) -> Result<()> {
        let result = self.inner.update_intent(intent, expected).await;
        self.count(&intent.dataset_id, result)
    }

    async fn abandon_intent(
        &self,
        id: &str,
        operation_id: &str,
        lease_expired_by: Option<TimestampMs>,
        now: TimestampMs,
    ) -> Result<Intent> {
        let result = self
            .inner
            .abandon_intent(id, operation_id, lease_expired_by, now);
        self.count(id, result.await)
    }

    async fn delete_intent(&self, id: &str, operation_id: &str, now: TimestampMs) -> Result<()> {
        self.count(id, self.inner.delete_intent(id, operation_id, now).await)
    }

    async fn list_intents(&self, id: &str) -> Result<Vec<Intent>> {
        self.inner.list_intents(id).await
    }

    async fn intent(&self, id: &str, operation_id: &str) -> Result<Option<Intent>> {
        self.inner.intent(id, operation_id).await
    }

    async fn append_audit(&self, id: &str, records: &[AuditRecord]) -> Result<()> {
        self.count(id, self.inner.append_audit(id, records).await)
    }

    async fn list_audit(&self, id: &str, limit: Option<usize>) -> Result<Vec<AuditRecord>> {
        self.inner.list_audit(id, limit).await
    }
}

/// How the kit opens `MeteredCatalog`s: each case gets a new one on a new in-memory store, and
/// all of them share one meter.
#[derive(Debug, Default)]
struct Metered {
    meter: Meter,
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
        let counted = Arc::new(CountingStore::new(store.clone()));
        let inner = ObjectStoreCatalog::new(counted.clone(), Path::default(), Default::default());
        let meter = self.meter.clone();
        FreshCatalog {
            catalog: Arc::new(MeteredCatalog { inner, meter }),
            objects: SplitObjects::new(store, Path::default()),
            state: counted,
        }
    }

    async fn catalog_fingerprint(&self, counted: &Self::State, _id: &str) -> Fingerprint {
        // Every write of the catalog goes through this store; a count over all datasets is
        // coarser than one per dataset, and as good for "this step wrote nothing".
        Fingerprint::writes(counted.writes())
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let backend = Metered::default();
    let summary = mend_testkit::run_all(&backend).await;
    let meter = backend.meter.lock().expect("the kit is done");
    let served: u64 = meter.values().sum();
    println!(
        "the meter counted {served} mutations served over {} datasets",
        meter.len()
    );
    if !summary.is_success() {
        eprintln!("conformance failed: {:?}", summary.failed());
        std::process::exit(1);
    }
}

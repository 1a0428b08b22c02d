//! The kit's own behaviour, on backends that are wrong on purpose: a fingerprint that always
//! moves fails the cases that assert "writes nothing", naming them; a backend without a
//! capability a case needs has that case skipped; a scale below what a case needs fails,
//! naming the field. mend's real backends run the whole kit in `tests/tests/conformance.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use mend::Catalog;
use mend::Result;
use mend::audit::AuditRecord;
use mend::catalog::{
    Capabilities, ManifestProbe, ObjectStoreCatalog, PublishValidator, RecordedRequest, RequestKey,
    StagePlanner,
};
use mend::intent::{Intent, IntentPhase};
use mend::model::{
    Dataset, DatasetConfig, ListQuery, MarkResult, PublishRequest, PublishResult, SplitPage,
    StageMode, StagedSplit, TimestampMs,
};
use mend::objects::SplitObjects;
use mend_testkit::{
    BackendUnderTest, CountingStore, Fingerprint, FreshCatalog, Outcome, Scale, case, run_cases,
};
use object_store::memory::InMemory;
use object_store::path::Path;

/// The object-storage catalog in memory, told apart by what is wrong with it.
#[derive(Debug, Default)]
struct InMemoryBackend {
    /// Every fingerprint differs from the one before, as if every read wrote.
    restless_fingerprint: bool,
    /// A capability its catalog claims not to have.
    lacks: Option<&'static str>,
    scale: Option<Scale>,
    /// Fingerprints handed out, for the restless one.
    fingerprints: AtomicU64,
}

#[async_trait]
impl BackendUnderTest for InMemoryBackend {
    type State = Arc<CountingStore>;

    fn name(&self) -> String {
        "in-memory-test".into()
    }

    async fn open(&self) -> FreshCatalog<Arc<CountingStore>> {
        let store = Arc::new(InMemory::new());
        let counted = Arc::new(CountingStore::new(store.clone()));
        let inner = ObjectStoreCatalog::new(counted.clone(), Path::default(), Default::default());
        let catalog: Arc<dyn Catalog> = match self.lacks {
            Some(lacks) => Arc::new(Lacking { inner, lacks }),
            None => Arc::new(inner),
        };
        FreshCatalog {
            catalog,
            objects: SplitObjects::new(store, Path::default()),
            state: counted,
        }
    }

    async fn catalog_fingerprint(&self, counted: &Arc<CountingStore>, _: &str) -> Fingerprint {
        match self.restless_fingerprint {
            true => Fingerprint::writes(self.fingerprints.fetch_add(1, Ordering::SeqCst)),
            false => Fingerprint::writes(counted.writes()),
        }
    }

    fn scale(&self) -> Scale {
        self.scale.unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fingerprint_that_always_moves_fails_the_cases_that_assert_no_writes_by_name() {
    let backend = InMemoryBackend {
        restless_fingerprint: true,
        ..Default::default()
    };
    let chosen = [
        "datasets_create_list_show_and_configure",
        "create_only_batch_of_existing_rows_writes_nothing",
    ];
    let summary = run_cases(&backend, chosen.map(|name| case(name).expect("a case"))).await;
    assert_eq!(summary.passed(), 1);
    assert_eq!(
        summary.failed(),
        ["create_only_batch_of_existing_rows_writes_nothing"]
    );
    let Outcome::Failed(message) = &summary.reports()[1].outcome else {
        panic!("{summary:?}");
    };
    assert!(
        message.contains("a create-only batch of existing rows wrote to storage"),
        "{message}"
    );
    let refused = std::panic::catch_unwind(|| summary.assert_passed())
        .expect_err("a summary with a failure does not pass");
    let refused = refused.downcast_ref::<String>().expect("a message");
    assert!(
        refused.contains("in-memory-test")
            && refused.contains("create_only_batch_of_existing_rows_writes_nothing"),
        "{refused}"
    );
    assert!(!summary.is_success());
    assert_eq!(
        summary.to_string(),
        "conformance[in-memory-test]: 1 passed, 1 failed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_case_needing_a_capability_the_backend_lacks_is_skipped() {
    let backend = InMemoryBackend {
        lacks: Some("publish.fencing-epoch"),
        ..Default::default()
    };
    let fencing = case("fencing_epoch").expect("a case");
    assert!(fencing.needs().contains(&"publish.fencing-epoch"));
    let chosen = [fencing, case("list_filters_and_pages").expect("a case")];
    let summary = run_cases(&backend, chosen).await;
    assert_eq!(summary.skipped(), ["fencing_epoch"]);
    assert_eq!(
        summary.reports()[0].outcome,
        Outcome::Skipped(vec!["publish.fencing-epoch".into()])
    );
    assert_eq!(summary.passed(), 1);
    assert!(summary.is_success(), "a skipped case is no failure");
    summary.assert_passed();
    assert_eq!(
        summary.to_string(),
        "conformance[in-memory-test]: 1 passed, 0 failed, 1 skipped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_without_a_capability_the_policy_requires_fails_every_case_saying_so() {
    let backend = InMemoryBackend {
        lacks: Some("stage.create-only"),
        ..Default::default()
    };
    let summary = run_cases(&backend, [case("list_filters_and_pages").expect("a case")]).await;
    let Outcome::Failed(message) = &summary.reports()[0].outcome else {
        panic!("{summary:?}");
    };
    assert!(
        message.contains("the engine does not start") && message.contains("stage.create-only"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_below_what_a_case_needs_fails_naming_the_field() {
    let backend = InMemoryBackend {
        scale: Some(Scale {
            stage_race_ids: 2,
            ..Scale::LIGHT
        }),
        ..Default::default()
    };
    let summary = run_cases(&backend, [case("fencing_epoch").expect("a case")]).await;
    let Outcome::Failed(message) = &summary.reports()[0].outcome else {
        panic!("{summary:?}");
    };
    assert!(message.contains("Scale::stage_race_ids is 2"), "{message}");
    assert_eq!(mend_testkit::cases().len(), 24, "every case is listed");
    println!("4 ways of being wrong, each reported by the case it concerns");
}

/// The object-storage catalog, claiming not to have one capability: an older backend.
#[derive(Debug)]
struct Lacking {
    inner: ObjectStoreCatalog,
    lacks: &'static str,
}

#[async_trait]
impl Catalog for Lacking {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().without(self.lacks)
    }
    fn describe(&self) -> String {
        format!("{} without {}", self.inner.describe(), self.lacks)
    }
    async fn create_dataset(
        &self,
        id: &str,
        uid: &str,
        config: &DatasetConfig,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        self.inner.create_dataset(id, uid, config, now, key).await
    }
    async fn list_datasets(&self) -> Result<Vec<Dataset>> {
        self.inner.list_datasets().await
    }
    async fn dataset(&self, id: &str) -> Result<Dataset> {
        self.inner.dataset(id).await
    }
    async fn probe_manifest(&self, id: &str) -> Result<ManifestProbe> {
        self.inner.probe_manifest(id).await
    }
    async fn update_config(
        &self,
        id: &str,
        expected: u64,
        config: &DatasetConfig,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        self.inner
            .update_config(id, expected, config, now, key)
            .await
    }
    async fn set_publish_token(
        &self,
        id: &str,
        token: Option<&str>,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        self.inner.set_publish_token(id, token, now, key).await
    }
    async fn advance_fencing_epoch(&self, id: &str, now: TimestampMs) -> Result<Dataset> {
        self.inner.advance_fencing_epoch(id, now).await
    }
    async fn stage(
        &self,
        id: &str,
        mode: StageMode,
        ids: &[String],
        planner: &StagePlanner<'_>,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Vec<StagedSplit>> {
        self.inner.stage(id, mode, ids, planner, now, key).await
    }
    async fn publish(
        &self,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<PublishResult> {
        self.inner.publish(request, validate, now, key).await
    }
    async fn record_request(&self, id: &str, record: &RecordedRequest) -> Result<RecordedRequest> {
        self.inner.record_request(id, record).await
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
        self.inner.forget_recorded_requests(id, before, now).await
    }
    async fn mark_for_deletion(
        &self,
        id: &str,
        ids: &[String],
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<MarkResult> {
        self.inner.mark_for_deletion(id, ids, now, key).await
    }
    async fn mark_stale_staged(
        &self,
        id: &str,
        ids: &[String],
        before: TimestampMs,
        now: TimestampMs,
    ) -> Result<Vec<String>> {
        self.inner.mark_stale_staged(id, ids, before, now).await
    }
    async fn delete_splits(
        &self,
        id: &str,
        ids: &[String],
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<()> {
        self.inner.delete_splits(id, ids, now, key).await
    }
    async fn list_splits(&self, id: &str, query: &ListQuery) -> Result<SplitPage> {
        self.inner.list_splits(id, query).await
    }
    async fn put_intent(&self, intent: &Intent) -> Result<()> {
        self.inner.put_intent(intent).await
    }
    async fn update_intent(&self, intent: &Intent, expected: IntentPhase) -> Result<()> {
        self.inner.update_intent(intent, expected).await
    }
    async fn abandon_intent(
        &self,
        id: &str,
        operation_id: &str,
        lease_expired_by: Option<TimestampMs>,
        now: TimestampMs,
    ) -> Result<Intent> {
        self.inner
            .abandon_intent(id, operation_id, lease_expired_by, now)
            .await
    }
    async fn delete_intent(&self, id: &str, operation_id: &str, now: TimestampMs) -> Result<()> {
        self.inner.delete_intent(id, operation_id, now).await
    }
    async fn list_intents(&self, id: &str) -> Result<Vec<Intent>> {
        self.inner.list_intents(id).await
    }
    async fn append_audit(&self, id: &str, records: &[AuditRecord]) -> Result<()> {
        self.inner.append_audit(id, records).await
    }
    async fn list_audit(&self, id: &str, limit: Option<usize>) -> Result<Vec<AuditRecord>> {
        self.inner.list_audit(id, limit).await
    }
}

//! Capabilities: a policy that requires what the backend lacks is refused when the engine
//! starts, with a message naming the capability; a request that needs what the backend lacks
//! is refused with nothing written. Nothing falls back to older semantics.

use std::sync::Arc;

use async_trait::async_trait;
use mend::audit::AuditRecord;
use mend::catalog::{
    Capabilities, Catalog, ManifestProbe, ObjectStoreCatalog, PublishValidator, RecordedRequest,
    RequestKey, StagePlanner,
};
use mend::intent::{Intent, IntentPhase};
use mend::model::{
    Dataset, DatasetConfig, ListQuery, MarkResult, PublishRequest, PublishResult, SplitPage,
    SplitState, StageMode, StageRequest, StageSplit, StagedSplit, TimestampMs,
};
use mend::objects::SplitObjects;
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions, MendError, Result};
use mend_policy::capability::PUBLISH_FENCING_EPOCH;

/// A backend that delegates everything but claims fewer capabilities: an older backend.
#[derive(Debug)]
struct OlderBackend {
    inner: ObjectStoreCatalog,
    lacks: &'static str,
}

#[async_trait]
impl Catalog for OlderBackend {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().without(self.lacks)
    }
    fn describe(&self) -> String {
        format!("older backend without {}", self.lacks)
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

#[test]
fn a_policy_requiring_a_missing_capability_is_refused_naming_it() {
    let policy = PolicyRuntime::default_policy().expect("default policy");
    let mut refused = 0;
    for lacks in policy.description().required_capabilities.clone() {
        let lacks: &'static str = Box::leak(lacks.into_boxed_str());
        let inner = ObjectStoreCatalog::open_url("memory://").expect("memory catalog");
        let objects = SplitObjects::new(inner.store().clone(), inner.prefix().clone());
        let backend = Arc::new(OlderBackend { inner, lacks });
        let error = Engine::new(backend, objects, policy.clone(), EngineOptions::default())
            .expect_err("an engine without a required capability must not start");
        match &error {
            MendError::CapabilityMissing { capability, detail } => {
                assert_eq!(capability, lacks);
                assert!(
                    detail.contains("mend-default") && detail.contains(lacks),
                    "{detail}"
                );
            }
            other => panic!("expected CapabilityMissing, got {other:?}"),
        }
        assert!(error.to_string().contains(lacks));
        refused += 1;
    }
    println!("{refused} backends, each lacking one required capability, refused at start");
    assert!(refused >= 2);
}

/// A publish carrying a fencing epoch on a backend that cannot check one would let a fenced
/// writer through: it is refused, and nothing is written. Publishes without one still work.
#[tokio::test]
async fn a_backend_without_fencing_epochs_refuses_a_publish_that_carries_one() {
    let inner = ObjectStoreCatalog::open_url("memory://").expect("memory catalog");
    let objects = SplitObjects::new(inner.store().clone(), inner.prefix().clone());
    let backend = Arc::new(OlderBackend {
        inner,
        lacks: PUBLISH_FENCING_EPOCH,
    });
    let policy = PolicyRuntime::default_policy().expect("default policy");
    let engine = Engine::new(backend, objects, policy, EngineOptions::default())
        .expect("the default policy does not require fencing epochs");
    assert!(!engine.capabilities().contains(PUBLISH_FENCING_EPOCH));
    engine
        .create_dataset("ds", &DatasetConfig::default())
        .await
        .expect("create");
    engine
        .stage(&StageRequest {
            dataset_id: "ds".into(),
            mode: StageMode::CreateOnly,
            node: "n".into(),
            splits: vec![StageSplit {
                split_id: "a".into(),
                metadata_json: "{}".into(),
            }],
        })
        .await
        .expect("stage");
    engine
        .objects()
        .put("ds", "a", bytes::Bytes::from_static(b"object").into())
        .await
        .expect("upload");
    let before = engine.dataset("ds").await.expect("show");

    let fenced = PublishRequest {
        dataset_id: "ds".into(),
        staged_split_ids: vec!["a".into()],
        replaced_split_ids: Vec::new(),
        checkpoint_delta: None,
        publish_token: None,
        fencing_epoch: Some(0),
    };
    let error = engine.publish(&fenced).await.unwrap_err();
    match &error {
        MendError::CapabilityMissing { capability, detail } => {
            assert_eq!(capability, PUBLISH_FENCING_EPOCH);
            assert!(detail.contains("fencing epoch"), "{detail}");
        }
        other => panic!("expected CapabilityMissing, got {other:?}"),
    }
    assert_eq!(
        engine.dataset("ds").await.expect("show"),
        before,
        "a refused publish changed the dataset"
    );
    let rows = engine
        .list_splits("ds", &ListQuery::default())
        .await
        .expect("list");
    assert_eq!(rows.splits.len(), 1);
    assert_eq!(rows.splits[0].state, SplitState::Staged);

    let published = engine
        .publish(&PublishRequest {
            fencing_epoch: None,
            ..fenced
        })
        .await
        .expect("a publish without a fencing epoch still works");
    assert_eq!(published.published, ["a"]);
    assert!(published.manifest_version > before.manifest_version);
}

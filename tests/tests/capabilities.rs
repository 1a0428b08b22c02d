//! Capabilities: a policy that requires what the backend lacks is refused when the engine
//! starts, with a message naming the capability. Nothing falls back to older semantics.

use std::sync::Arc;

use async_trait::async_trait;
use mend::audit::AuditRecord;
use mend::catalog::{
    Capabilities, Catalog, ManifestProbe, ObjectStoreCatalog, PublishValidator, StagePlanner,
};
use mend::intent::{Intent, IntentPhase};
use mend::model::{
    Dataset, DatasetConfig, ListQuery, MarkResult, PublishRequest, PublishResult, SplitPage,
    StageMode, StagedSplit, TimestampMs,
};
use mend::objects::SplitObjects;
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions, MendError, Result};

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
    ) -> Result<Dataset> {
        self.inner.create_dataset(id, uid, config, now).await
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
    ) -> Result<Dataset> {
        self.inner.update_config(id, expected, config, now).await
    }
    async fn set_publish_token(
        &self,
        id: &str,
        token: Option<&str>,
        now: TimestampMs,
    ) -> Result<Dataset> {
        self.inner.set_publish_token(id, token, now).await
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
    ) -> Result<Vec<StagedSplit>> {
        self.inner.stage(id, mode, ids, planner, now).await
    }
    async fn publish(
        &self,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now: TimestampMs,
    ) -> Result<PublishResult> {
        self.inner.publish(request, validate, now).await
    }
    async fn mark_for_deletion(
        &self,
        id: &str,
        ids: &[String],
        now: TimestampMs,
    ) -> Result<MarkResult> {
        self.inner.mark_for_deletion(id, ids, now).await
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
    async fn delete_splits(&self, id: &str, ids: &[String], now: TimestampMs) -> Result<()> {
        self.inner.delete_splits(id, ids, now).await
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

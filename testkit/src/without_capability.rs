//! A catalog that hides one capability of another: an older backend, for the cases (and an
//! embedder's tests) that check what mend does on a backend without it.

use std::sync::Arc;

use async_trait::async_trait;
use mend::Result;
use mend::audit::AuditRecord;
use mend::catalog::{
    BegunCommit, Capabilities, Catalog, DatasetChange, ExistingRow, IntentBuilder, ManifestProbe,
    MarkRule, OperationRecords, PendingDataset, PublishValidator, RecentAudit, RecordedRequest,
    RequestKey, SettleValidator, Settled, Settlement, StagePlanner,
};
use mend::intent::{Intent, IntentPhase};
use mend::model::{
    Dataset, DatasetConfig, ListQuery, MarkResult, NewSplit, PublishRequest, PublishResult,
    SplitPage, StageMode, StagedSplit, TimestampMs,
};

/// `inner` in every respect, except that its [`capabilities`](Catalog::capabilities) lack
/// `lacks`: what an older build of a backend would claim. mend's checks go by the claim, so an
/// engine on it refuses what needs the capability as it would on that older backend. Without
/// `settle.atomic` it also settles batches as such a backend does, one step at a time (the
/// trait's default, [`one_at_a_time`](mend::catalog::settle::one_at_a_time)); without
/// `pending.index` it discovers pending work by reading every dataset's intents (the trait's
/// default, [`scan_every_dataset`](mend::catalog::pending::scan_every_dataset)).
#[derive(Debug)]
pub struct WithoutCapability<C> {
    /// The catalog that serves every call.
    pub inner: C,
    /// The capability it claims not to have (`mend_contract::capability::*`).
    pub lacks: &'static str,
}

#[async_trait]
impl<C: Catalog> Catalog for WithoutCapability<C> {
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
    async fn update_dataset(
        &self,
        id: &str,
        change: DatasetChange<'_>,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        self.inner.update_dataset(id, change, now, key).await
    }
    async fn stage(
        &self,
        id: &str,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        planner: &StagePlanner<'_>,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Vec<StagedSplit>> {
        self.inner.stage(id, mode, splits, planner, now, key).await
    }
    // The inner catalog's check is atomic with its stage; the default's is not.
    async fn stage_unless_in_the_way(
        &self,
        id: &str,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        planner: Option<&StagePlanner<'_>>,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Vec<StagedSplit>> {
        self.inner
            .stage_unless_in_the_way(id, mode, splits, planner, now, key)
            .await
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
    async fn publish_unless_in_the_way(
        &self,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<PublishResult> {
        self.inner
            .publish_unless_in_the_way(request, validate, now, key)
            .await
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
    async fn mark(
        &self,
        id: &str,
        ids: &[String],
        rule: MarkRule,
        now: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<MarkResult> {
        self.inner.mark(id, ids, rule, now, key).await
    }
    async fn see_marks(
        &self,
        id: &str,
        ids: &[String],
        seen_at: TimestampMs,
    ) -> Result<Vec<String>> {
        self.inner.see_marks(id, ids, seen_at).await
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
    async fn split_states(&self, id: &str, split_ids: &[String]) -> Result<Vec<ExistingRow>> {
        self.inner.split_states(id, split_ids).await
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

    async fn intent(&self, id: &str, operation_id: &str) -> Result<Option<Intent>> {
        self.inner.intent(id, operation_id).await
    }
    async fn pending_datasets(&self) -> Result<Vec<PendingDataset>> {
        // Without an index, a backend reads every dataset's intents: the trait's default.
        if self.lacks == mend::catalog::PENDING_INDEX {
            return mend::catalog::pending::scan_every_dataset(self).await;
        }
        self.inner.pending_datasets().await
    }
    async fn clear_pending(&self, id: &str) -> Result<()> {
        if self.lacks == mend::catalog::PENDING_INDEX {
            return Ok(());
        }
        self.inner.clear_pending(id).await
    }
    async fn settle_intents(
        &self,
        id: &str,
        settlements: &[Settlement],
        validate: &SettleValidator<'_>,
        now: TimestampMs,
    ) -> Result<Vec<Settled>> {
        // Without atomic batches, a backend settles one step at a time: the trait's default.
        if self.lacks == mend::catalog::SETTLE_ATOMIC {
            return mend::catalog::settle::one_at_a_time(self, id, settlements, validate, now)
                .await;
        }
        self.inner
            .settle_intents(id, settlements, validate, now)
            .await
    }
    async fn append_audit(&self, id: &str, records: &[AuditRecord]) -> Result<()> {
        self.inner.append_audit(id, records).await
    }
    async fn list_audit(&self, id: &str, limit: Option<usize>) -> Result<Vec<AuditRecord>> {
        self.inner.list_audit(id, limit).await
    }
    async fn list_recent_audit(&self, limit: usize) -> Result<RecentAudit> {
        self.inner.list_recent_audit(limit).await
    }
    async fn record_write(&self, record: &mend::catalog::write_audit::WriteRecord) -> Result<()> {
        self.inner.record_write(record).await
    }
    async fn list_write_audit(
        &self,
        id: &str,
        limit: Option<usize>,
    ) -> Result<Vec<mend::catalog::write_audit::WriteRecord>> {
        self.inner.list_write_audit(id, limit).await
    }
    async fn begin_commit(
        &self,
        id: &str,
        intent: &IntentBuilder<'_>,
        splits: &[Arc<NewSplit>],
        planner: &StagePlanner<'_>,
        records: OperationRecords<'_>,
        now: TimestampMs,
    ) -> Result<BegunCommit> {
        self.inner
            .begin_commit(id, intent, splits, planner, records, now)
            .await
    }
    async fn publish_commit(
        &self,
        intent: &Intent,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now: TimestampMs,
        key: &RequestKey,
    ) -> Result<PublishResult> {
        self.inner
            .publish_commit(intent, request, validate, now, key)
            .await
    }
}

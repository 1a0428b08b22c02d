//! A catalog that lets a test step the engine one conditional write at a time: it wraps the
//! memory catalog, and each call that makes one of the protocol's conditional writes waits,
//! in the task that makes it, for the test to grant that task a permit. Tasks are told apart
//! by a task-local actor id; a call from a task with no actor (the test reading state) never
//! waits. Everything else passes straight through.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mend::Catalog;
use mend::Result;
use mend::audit::AuditRecord;
use mend::catalog::{
    BegunCommit, Capabilities, DatasetChange, ExistingRow, IntentBuilder, ManifestProbe, MarkRule,
    OperationRecords, PendingDataset, PublishValidator, RecordedRequest, RequestKey,
    SettleValidator, Settled, Settlement, StagePlanner,
};
use mend::intent::{Intent, IntentPhase};
use mend::model::{
    Dataset, DatasetConfig, ListQuery, MarkResult, NewSplit, PublishRequest, PublishResult,
    SplitPage, StageMode, StagedSplit, TimestampMs,
};
use tokio::sync::Notify;

tokio::task_local! {
    /// The actor whose task this is.
    pub static ACTOR: u8;
}

/// One actor's permits.
#[derive(Debug, Default)]
struct Slot {
    /// Runs every write without waiting (a step the model takes as one action).
    unlimited: bool,
    permits: usize,
    /// Waiting at a conditional write.
    parked: bool,
    /// The write it waits at.
    at: &'static str,
    wake: Arc<Notify>,
}

/// The permits of every actor.
#[derive(Debug, Default)]
pub struct Stepper {
    // A std mutex: held for a field update, never across an await.
    slots: Mutex<HashMap<u8, Slot>>,
}

impl Stepper {
    /// Actor `actor` runs freely (`unlimited`) or waits at each conditional write.
    pub fn set_unlimited(&self, actor: u8, unlimited: bool) {
        let mut slots = self.slots.lock().expect("no panic holding the slots");
        let slot = slots.entry(actor).or_default();
        slot.unlimited = unlimited;
        slot.permits = 0;
        slot.parked = false;
    }

    /// Lets `actor` make one conditional write.
    pub fn grant(&self, actor: u8) {
        let mut slots = self.slots.lock().expect("no panic holding the slots");
        let slot = slots.entry(actor).or_default();
        slot.permits += 1;
        slot.wake.notify_one();
    }

    /// The write `actor` waits at, once it used every permit it was granted.
    pub fn parked_at(&self, actor: u8) -> Option<&'static str> {
        let slots = self.slots.lock().expect("no panic holding the slots");
        slots
            .get(&actor)
            .filter(|slot| slot.parked && slot.permits == 0)
            .map(|slot| slot.at)
    }

    /// Waits, in the calling task's actor, for a permit to make `write`.
    async fn gate(&self, write: &'static str) {
        let Ok(actor) = ACTOR.try_with(|actor| *actor) else {
            return;
        };
        loop {
            let wake = {
                let mut slots = self.slots.lock().expect("no panic holding the slots");
                let slot = slots.entry(actor).or_default();
                if slot.unlimited {
                    return;
                }
                if slot.permits > 0 {
                    slot.permits -= 1;
                    slot.parked = false;
                    return;
                }
                slot.parked = true;
                slot.at = write;
                slot.wake.clone()
            };
            wake.notified().await;
        }
    }
}

/// The catalog the engines under replay share.
#[derive(Debug)]
pub struct SteppedCatalog {
    pub inner: Arc<dyn Catalog>,
    pub stepper: Arc<Stepper>,
}

#[async_trait]
impl Catalog for SteppedCatalog {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn describe(&self) -> String {
        format!("stepped {}", self.inner.describe())
    }

    async fn create_dataset(
        &self,
        dataset_id: &str,
        uid: &str,
        config: &DatasetConfig,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        self.inner
            .create_dataset(dataset_id, uid, config, now_ms, key)
            .await
    }

    async fn list_datasets(&self) -> Result<Vec<Dataset>> {
        self.inner.list_datasets().await
    }

    async fn list_dataset_ids(&self) -> Result<Vec<String>> {
        self.inner.list_dataset_ids().await
    }

    async fn dataset(&self, dataset_id: &str) -> Result<Dataset> {
        self.inner.dataset(dataset_id).await
    }

    async fn probe_manifest(&self, dataset_id: &str) -> Result<ManifestProbe> {
        self.inner.probe_manifest(dataset_id).await
    }

    async fn update_dataset(
        &self,
        dataset_id: &str,
        change: DatasetChange<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        if change == DatasetChange::AdvanceFencingEpoch {
            self.stepper.gate("advance_fencing_epoch").await;
        }
        self.inner
            .update_dataset(dataset_id, change, now_ms, key)
            .await
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
        self.inner
            .stage(dataset_id, mode, splits, planner, now_ms, key)
            .await
    }

    async fn publish(
        &self,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<PublishResult> {
        self.stepper.gate("publish").await;
        self.inner.publish(request, validate, now_ms, key).await
    }

    async fn record_request(
        &self,
        dataset_id: &str,
        record: &RecordedRequest,
    ) -> Result<RecordedRequest> {
        self.inner.record_request(dataset_id, record).await
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
        self.inner
            .forget_recorded_requests(dataset_id, recorded_before_ms, now_ms)
            .await
    }

    async fn mark(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        rule: MarkRule,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<MarkResult> {
        match rule {
            MarkRule::StaleStaged { .. } => self.stepper.gate("mark_stale_staged").await,
            // An exclusive roll-back's second write, after its fence.
            MarkRule::Named => self.stepper.gate("mark_for_deletion").await,
            MarkRule::Unclaimed { .. } | MarkRule::NamedUnlessInTheWay => {}
        }
        self.inner
            .mark(dataset_id, split_ids, rule, now_ms, key)
            .await
    }

    async fn see_marks(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        seen_at_ms: TimestampMs,
    ) -> Result<Vec<String>> {
        self.inner
            .see_marks(dataset_id, split_ids, seen_at_ms)
            .await
    }

    async fn delete_splits(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<()> {
        self.inner
            .delete_splits(dataset_id, split_ids, now_ms, key)
            .await
    }

    async fn list_splits(&self, dataset_id: &str, query: &ListQuery) -> Result<SplitPage> {
        self.inner.list_splits(dataset_id, query).await
    }

    async fn split_states(
        &self,
        dataset_id: &str,
        split_ids: &[String],
    ) -> Result<Vec<ExistingRow>> {
        self.inner.split_states(dataset_id, split_ids).await
    }

    async fn put_intent(&self, intent: &Intent) -> Result<()> {
        self.inner.put_intent(intent).await
    }

    async fn update_intent(&self, intent: &Intent, expected_phase: IntentPhase) -> Result<()> {
        self.stepper.gate("update_intent").await;
        self.inner.update_intent(intent, expected_phase).await
    }

    async fn abandon_intent(
        &self,
        dataset_id: &str,
        operation_id: &str,
        lease_expired_by: Option<TimestampMs>,
        now_ms: TimestampMs,
    ) -> Result<Intent> {
        self.stepper.gate("abandon_intent").await;
        self.inner
            .abandon_intent(dataset_id, operation_id, lease_expired_by, now_ms)
            .await
    }

    async fn delete_intent(
        &self,
        dataset_id: &str,
        operation_id: &str,
        now_ms: TimestampMs,
    ) -> Result<()> {
        self.inner
            .delete_intent(dataset_id, operation_id, now_ms)
            .await
    }

    async fn list_intents(&self, dataset_id: &str) -> Result<Vec<Intent>> {
        self.inner.list_intents(dataset_id).await
    }

    async fn intent(&self, dataset_id: &str, operation_id: &str) -> Result<Option<Intent>> {
        self.inner.intent(dataset_id, operation_id).await
    }

    async fn pending_datasets(&self) -> Result<Vec<PendingDataset>> {
        self.inner.pending_datasets().await
    }

    async fn clear_pending(&self, dataset_id: &str) -> Result<()> {
        self.inner.clear_pending(dataset_id).await
    }

    async fn settle_intents(
        &self,
        dataset_id: &str,
        settlements: &[Settlement],
        validate: &SettleValidator<'_>,
        now_ms: TimestampMs,
    ) -> Result<Vec<Settled>> {
        self.stepper.gate("settle_intents").await;
        self.inner
            .settle_intents(dataset_id, settlements, validate, now_ms)
            .await
    }

    async fn append_audit(&self, dataset_id: &str, records: &[AuditRecord]) -> Result<()> {
        self.inner.append_audit(dataset_id, records).await
    }

    async fn list_audit(&self, dataset_id: &str, limit: Option<usize>) -> Result<Vec<AuditRecord>> {
        self.inner.list_audit(dataset_id, limit).await
    }

    async fn list_recent_audit(&self, limit: usize) -> Result<mend::catalog::RecentAudit> {
        self.inner.list_recent_audit(limit).await
    }

    async fn begin_commit(
        &self,
        dataset_id: &str,
        intent: &IntentBuilder<'_>,
        splits: &[Arc<NewSplit>],
        planner: &StagePlanner<'_>,
        records: OperationRecords<'_>,
        now_ms: TimestampMs,
    ) -> Result<BegunCommit> {
        self.inner
            .begin_commit(dataset_id, intent, splits, planner, records, now_ms)
            .await
    }

    async fn publish_commit(
        &self,
        intent: &Intent,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now_ms: TimestampMs,
        key: &RequestKey,
    ) -> Result<PublishResult> {
        // A writer's publish (and a roll-forward a sweep executes alone): one conditional
        // write, on its intent.
        self.stepper.gate("publish_commit").await;
        self.inner
            .publish_commit(intent, request, validate, now_ms, key)
            .await
    }
}

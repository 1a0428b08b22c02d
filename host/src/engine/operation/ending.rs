//! The ending that abort, a publish overtaken and a roll-back share: the intent fenced and deleted
//! with its end recorded in one conditional step, then the operation's own rows and objects removed.

use crate::catalog::CatalogExt;
use crate::catalog::write_audit;
use crate::catalog::{PublishObservation, RequestKey, Settled, Settlement};
use crate::engine::Engine;
use crate::engine::steps::{delta_overtaken, step_key};
use crate::error::{MendError, OperationFound, Result};
use crate::intent::{Intent, IntentPhase};
use crate::model::{ListQuery, PublishRequest, SplitState, StageOutcome, TimestampMs};

use super::abort::confirmed_cannot_abort;
use super::{ended, ended_view};

impl Engine {
    /// Ends a confirmed operation whose checkpoint delta was overtaken: another operation
    /// published from the same positions between this one's check of its delta and its
    /// confirmation (found by mend-sim, seed 33). Positions only move forward, so its publish
    /// can never apply; left confirmed, its writer would be told it publishes and
    /// recovery would block on it until an operator came. It is fenced by one conditional write
    /// (`EffectsConfirmed` to `Abandoned`, which no publish of it can follow), then rolled
    /// back; a roll-back that fails is left to recovery, which settles an abandoned intent.
    /// `None` when its delta still applies, or the intent moved meanwhile.
    pub(super) async fn end_overtaken(&self, intent: &Intent) -> Result<Option<MendError>> {
        let Some(delta) = intent.planned_delta() else {
            return Ok(None);
        };
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        let dataset = self.catalog.dataset(dataset_id).await?;
        if !delta_overtaken(&dataset.checkpoint, delta) {
            return Ok(None);
        }
        // Overtaken, perhaps by its own publish (landed, its intent not yet deleted: mend-sim
        // seed 215 found an abort ending a published operation so). Looked for after the
        // checkpoint was read: a publish of it can land only while its delta applies, so one
        // that is not recorded now never will be.
        if self
            .recorded_publish(dataset_id, operation_id)
            .await?
            .is_some()
        {
            return Ok(None);
        }
        let fenced = Intent {
            phase: IntentPhase::Abandoned,
            updated_at_ms: self.now_ms(),
            ..intent.clone()
        };
        let fencing = self.durably(
            crate::faults::DurableStep::AbandonIntent,
            self.catalog
                .update_intent(&fenced, IntentPhase::EffectsConfirmed),
        );
        match fencing.await {
            Ok(()) => {}
            Err(MendError::NotFound { .. } | MendError::FailedPrecondition { .. }) => {
                return Ok(None);
            }
            Err(error) => return Err(error),
        }
        self.uploaded.forget(dataset_id, operation_id);
        if let Err(error) = self.roll_back_own(&fenced).await {
            tracing::debug!(%error, "rolling back an overtaken operation failed; recovery settles it");
        }
        Ok(Some(MendError::operation_refused(
            format!(
                "{}; its checkpoint delta was overtaken after it confirmed (another operation published from the same positions), so it could never publish",
                ended(dataset_id, operation_id)
            ),
            operation_id,
            OperationFound::Ended,
        )))
    }

    /// Ends an operation that has not published, in one atomic step
    /// ([`Settlement::Abandon`] through [`Catalog::settle_intents`](crate::catalog::Catalog::settle_intents)):
    /// its intent, `Armed` (whatever its lease: its owner ends it) or fenced already, is
    /// deleted, the rows it owns that are still staged are marked, and the record of its end
    /// is written, so that a begin of it still on its way is refused. Then its marked rows'
    /// objects (those it wrote) and the rows go, in the background
    /// ([`Engine::wait_for_cleanups`]). The step decides; what follows it only cleans up, and
    /// a crash in between leaves marked rows, which garbage collection deletes with their
    /// objects. `Some(marked rows)` once it ended; `None` if its intent was gone
    /// (something else settled it first); `FailedPrecondition` (`Confirmed`) if an older
    /// mend's publish confirmed it meanwhile: it publishes.
    pub(in crate::engine) async fn end_operation(
        &self,
        intent: &Intent,
    ) -> Result<Option<Vec<String>>> {
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        // All or nothing, a begin owns every row it plans; this process remembers the intents
        // it began, and reads the record of any other's begin.
        let own = match self.uploaded.begun(dataset_id, operation_id) {
            Some(_) => intent
                .effects
                .stage
                .iter()
                .map(|row| row.split_id.clone())
                .collect(),
            None => self.own_rows(intent).await?,
        };
        let mut observed = intent.phase;
        for _ in 0..2 {
            let settlement = Settlement::Abandon {
                operation_id: operation_id.clone(),
                observed,
                lease_expired_by: TimestampMs::MAX,
                mark: own.clone(),
                end: self.end_record(dataset_id, operation_id),
            };
            let no_publishes = |_: &PublishRequest, _: &PublishObservation| Ok(());
            let ending = self.catalog.settle_intents(
                dataset_id,
                std::slice::from_ref(&settlement),
                &no_publishes,
                self.now_ms(),
            );
            let settled = self
                .durably(crate::faults::DurableStep::EndOperation, ending)
                .await;
            match settled.as_deref() {
                Ok([Settled::Abandoned { marked }]) => {
                    self.uploaded.forget(dataset_id, operation_id);
                    self.clean_up_after(intent, marked.clone());
                    return Ok(Some(marked.clone()));
                }
                Ok(_) => return Ok(None),
                Err(MendError::FailedPrecondition { .. }) => {
                    // Its phase moved since it was read: fenced by another step (then the end
                    // is taken again from there), or confirmed (it publishes).
                    match self.find_intent(dataset_id, operation_id).await? {
                        None => return Ok(None),
                        Some(now) if now.phase == IntentPhase::EffectsConfirmed => {
                            return Err(confirmed_cannot_abort(operation_id));
                        }
                        Some(now) => observed = now.phase,
                    }
                }
                Err(_) => return settled.map(|_| None),
            }
        }
        Err(MendError::Conflict {
            message: format!(
                "operation {operation_id}'s intent changed under two attempts to end it; nothing was written: end it again"
            ),
        })
    }

    /// Deletes the object of `split_id` if its header says `operation_id` wrote it; an object
    /// another operation wrote (or none) is left alone.
    async fn delete_object_if_written_by(
        &self,
        dataset_id: &str,
        split_id: &str,
        operation_id: &str,
    ) -> Result<()> {
        let ours = self
            .objects
            .inspect(dataset_id, split_id)
            .await?
            .split()
            .is_some_and(|(header, _)| header.operation_id.as_deref() == Some(operation_id));
        if ours {
            self.objects.delete(dataset_id, split_id).await?;
        }
        Ok(())
    }

    /// Starts, in the background, the removal of what an ended operation leaves: the objects
    /// of its `marked` rows that it wrote, then the rows. The step that ended it decided
    /// everything; its answer does not wait for this clean-up, which is best effort (what it
    /// leaves, garbage collection deletes) and counted for [`Engine::wait_for_cleanups`]. It
    /// writes as the request that ended the operation (its audit records name that request),
    /// holding no gate: it deletes only rows already marked, which nothing but a deletion
    /// changes, and objects whose header names the operation.
    fn clean_up_after(&self, intent: &Intent, marked: Vec<String>) {
        if marked.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let engine = self.holding(Default::default());
        let intent = intent.clone();
        let scope = write_audit::current();
        let cleanup = async move {
            let removing = engine.remove_marked_own(&intent, &marked);
            let removed = match scope {
                Some(scope) => write_audit::within((*scope).clone(), removing).await,
                None => removing.await,
            };
            if let Err(error) = removed {
                tracing::debug!(%error, "removing an ended operation's rows failed; garbage collection removes them");
            }
        };
        self.cleanups.spawn(&runtime, cleanup);
    }

    /// Deletes the objects of `marked` rows that `intent`'s operation wrote, then the rows.
    pub(super) async fn remove_marked_own(&self, intent: &Intent, marked: &[String]) -> Result<()> {
        if marked.is_empty() {
            return Ok(());
        }
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        for split_id in marked {
            self.delete_object_if_written_by(dataset_id, split_id, operation_id)
                .await?;
        }
        self.catalog
            .delete_splits(dataset_id, marked, self.now_ms(), None)
            .await
    }

    /// Records that an operation ended without publishing (its abort's record), before
    /// whatever ends it deletes its intent: its abort, recovery's abandonment or roll-back.
    /// A begin of it still on its way (a retry of one whose answer was lost) writes its intent
    /// only where there is none, and looks for this record after writing it: without the
    /// record, that begin would find no trace of the end and begin the operation again under
    /// the same id, after its writer or an operator was told it ended (found by mend-sim,
    /// seed 35: exclusive recovery rolled back an operation whose begin was being retried;
    /// the retry began it again and it published). Written only once the operation is fenced
    /// (a batch of abandonments writes it in the step that fences them).
    pub(in crate::engine) async fn record_end(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<()> {
        let record = self.end_record(dataset_id, operation_id);
        self.durably(
            crate::faults::DurableStep::RecordEnd,
            self.catalog.record_request(dataset_id, &record),
        )
        .await
        .map(|_| ())
    }

    /// Whether `operation_id` has ended without publishing, as far as the catalog says now:
    /// its intent fenced (it can never publish), or gone with its end recorded (or, for one
    /// that staged, with its stage recorded and no publish).
    pub(super) async fn ended_meanwhile(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<bool> {
        match self.find_intent(dataset_id, operation_id).await? {
            Some(intent) => Ok(intent.phase == IntentPhase::Abandoned),
            None => Ok(self
                .after_the_end::<()>(dataset_id, operation_id)
                .await
                .is_err_and(|error| error.operation_found() == Some(OperationFound::Ended))),
        }
    }

    /// Whether the end of `operation_id` without publishing is recorded ([`Engine::record_end`]):
    /// it was answered ended, and nothing of it may ever become visible.
    pub(in crate::engine) async fn ended_without_publishing(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<bool> {
        Ok(self
            .catalog
            .recorded_request(dataset_id, &step_key(operation_id, "abort"))
            .await?
            .is_some())
    }

    /// The record [`Engine::record_end`] writes; a batch of abandonments writes it in its own
    /// atomic step (`Settlement::Abandon`).
    pub(in crate::engine) fn end_record(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> crate::catalog::RecordedRequest {
        let key = RequestKey::new(step_key(operation_id, "abort"), &operation_id);
        crate::catalog::RecordedRequest::new(
            &key,
            &ended_view(dataset_id, operation_id),
            self.now_ms(),
        )
    }

    /// Undoes what an operation itself did: the rows its begin inserted, while still staged, and their objects where it wrote them; then its intent. A row published
    /// meanwhile (recovery rolled the operation forward) keeps its row and object.
    pub(super) async fn roll_back_own(&self, intent: &Intent) -> Result<()> {
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        let own = self.own_rows(intent).await?;
        if !own.is_empty() {
            let now = self.now_ms();
            self.catalog
                .mark_stale_staged(dataset_id, &own, i64::MAX, now)
                .await?;
            let query = ListQuery {
                split_ids: Some(own.clone()),
                ..ListQuery::default()
            };
            let rows = self.catalog.list_splits(dataset_id, &query).await?.splits;
            let marked: Vec<String> = rows
                .iter()
                .filter(|row| row.state == SplitState::MarkedForDeletion)
                .map(|row| row.split_id.clone())
                .collect();
            let live = |id: &String| {
                rows.iter()
                    .any(|row| &row.split_id == id && row.state != SplitState::MarkedForDeletion)
            };
            for split_id in own.iter().filter(|id| !live(id)) {
                self.delete_object_if_written_by(dataset_id, split_id, operation_id)
                    .await?;
            }
            if !marked.is_empty() {
                self.catalog
                    .delete_splits(dataset_id, &marked, self.now_ms(), None)
                    .await?;
            }
        }
        self.end_and_finish(dataset_id, operation_id).await
    }

    /// Whether an operation's begin is on record: recorded in its own step, or, begun by an
    /// older mend, its stage recorded.
    pub(in crate::engine) async fn began(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<bool> {
        for step in ["begin", "stage"] {
            let key = step_key(operation_id, step);
            if self
                .catalog
                .recorded_request(dataset_id, &key)
                .await?
                .is_some()
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The rows an operation's begin inserted. Begun in one step, all or nothing (its begin
    /// recorded in that step), every row it plans is its own. Begun by an older mend, which
    /// staged after writing its intent, the ones its recorded stage inserted; none if its
    /// begin died before it staged.
    pub(super) async fn own_rows(&self, intent: &Intent) -> Result<Vec<String>> {
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        let begun = step_key(operation_id, "begin");
        if self
            .catalog
            .recorded_request(dataset_id, &begun)
            .await?
            .is_some()
        {
            return Ok(intent
                .effects
                .stage
                .iter()
                .map(|row| row.split_id.clone())
                .collect());
        }
        let stage = step_key(operation_id, "stage");
        let Some(found) = self.catalog.recorded_request(dataset_id, &stage).await? else {
            return Ok(Vec::new());
        };
        let key = RequestKey {
            key: stage,
            request_digest: found.request_digest.clone(),
        };
        let staged: Vec<crate::model::StagedSplit> = found.replay(&key)?;
        Ok(staged
            .into_iter()
            .filter(|split| split.outcome == StageOutcome::Inserted)
            .map(|split| split.split_id)
            .collect())
    }

    /// Records that an operation ended without publishing, then deletes its intent: in that
    /// order, so that a crash between the two leaves the intent (and whoever finds it finishes
    /// the end), never an operation with neither its intent nor the record of its end.
    pub(in crate::engine) async fn end_and_finish(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<()> {
        self.record_end(dataset_id, operation_id).await?;
        self.finish_intent(dataset_id, operation_id).await
    }
}

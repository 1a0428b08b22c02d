//! Executing a decision that runs alone, per operation kind (the table in the module above): a
//! roll-back, a gc, a config apply, a reconcile, and fencing an intent before it.

use mend_contract::RecoveryDecision;

use crate::catalog::CatalogExt;
use crate::engine::Engine;
use crate::error::Result;
use crate::faults::DurableStep;
use crate::intent::{Intent, IntentPhase, OperationKind};
use crate::model::{Dataset, ListQuery, SplitState, TimestampMs};

impl Engine {
    /// Carries out a checked decision that executes something (not a defer or a blocked).
    /// Publishes carry the fencing epoch the sweep read (after exclusive recovery's bump), so a
    /// sweep fenced out by a later exclusive one cannot publish either. `now_ms` is the time
    /// the sweep observed at: an abandonment fences only an intent whose lease ran out by then.
    pub(super) async fn execute(
        &self,
        intent: &Intent,
        decision: &RecoveryDecision,
        dataset: &Dataset,
        now_ms: i64,
    ) -> Result<()> {
        match (decision, intent.kind) {
            (RecoveryDecision::Defer(_) | RecoveryDecision::Blocked(_), _) => return Ok(()),
            (RecoveryDecision::Abandon(_), _) => {
                let fenced = self.fence(intent, Some(now_ms)).await?;
                return self.finish_abandoned(&fenced).await;
            }
            (RecoveryDecision::Stale, _) => {}
            (RecoveryDecision::RollForward, OperationKind::Commit | OperationKind::Merge) => {
                if let Some(planned) = &intent.effects.publish {
                    let publish = planned.request(&intent.dataset_id, Some(dataset.fencing_epoch));
                    // Recorded as the operation's own publish would be, so that its writer,
                    // asking again, is answered the result rather than "ended"; and only while
                    // its intent is there and not fenced, checked in the publish's own atomic
                    // step: an abort or an abandonment that landed first wins, and this
                    // roll-forward then publishes nothing.
                    let key = crate::engine::steps::publish_key(&intent.operation_id);
                    self.durably(
                        DurableStep::Publish,
                        self.publish_settling(intent, &publish, &key),
                    )
                    .await?;
                    return Ok(());
                }
            }
            // Its splits to mark were read when the intent was created: one touched since is
            // left alone. (A format 1 intent planned them by the staged grace period, so they
            // were untouched for longer still; the same cutoff holds for it.)
            (RecoveryDecision::RollForward, OperationKind::Gc) => {
                self.run_gc(intent, intent.created_at_ms).await?;
            }
            (RecoveryDecision::RollForward, OperationKind::ConfigApply) => {
                self.promote_config(intent).await?;
            }
            (RecoveryDecision::RollForward, OperationKind::Reconcile) => {
                self.finish_reconcile(intent, dataset.fencing_epoch).await?;
            }
            // A config apply that lost to another change never changed anything.
            (RecoveryDecision::RollBack, OperationKind::ConfigApply) => {}
            (RecoveryDecision::RollBack, OperationKind::Commit | OperationKind::Merge) => {
                self.fence(intent, None).await?;
                self.record_end(&intent.dataset_id, &intent.operation_id)
                    .await?;
                self.roll_back_staging(intent).await?;
            }
            (RecoveryDecision::RollBack, _) => self.roll_back_staging(intent).await?,
        }
        self.finish_intent(&intent.dataset_id, &intent.operation_id)
            .await
    }

    /// The rows `intent` plans to stage that no other intent of its dataset names: the ones
    /// undoing it may touch.
    async fn rows_only_it_stages(&self, intent: &Intent) -> Result<Vec<String>> {
        let others = self
            .splits_named_by_intents(&intent.dataset_id, Some(&intent.operation_id))
            .await?;
        Ok(intent
            .effects
            .stage
            .iter()
            .map(|row| row.split_id.clone())
            .filter(|id| !others.contains(id))
            .collect())
    }

    /// What abandoning an operation does once it is fenced (phase `Abandoned`): marks its own
    /// rows that are still staged, then deletes the intent. Its objects are left for gc, which
    /// removes them with their marked rows after the deletion grace period. A row another
    /// intent names is skipped, as [`Engine::roll_back_staging`] skips it; a row published
    /// meanwhile is never touched, since the mark is conditional at the write
    /// (`mark_stale_staged` with an unbounded cutoff). Safe to repeat from any point: a sweep
    /// that stopped after fencing finishes it the next time.
    pub(in crate::engine) async fn finish_abandoned(&self, intent: &Intent) -> Result<()> {
        let own = self.rows_only_it_stages(intent).await?;
        if !own.is_empty() {
            self.durably(
                DurableStep::MarkRows,
                self.catalog.mark_stale_staged(
                    &intent.dataset_id,
                    &own,
                    TimestampMs::MAX,
                    self.now_ms(),
                ),
            )
            .await?;
        }
        self.end_and_finish(&intent.dataset_id, &intent.operation_id)
            .await
    }

    /// Fences a commit or merge recovery abandons or rolls back, by one conditional write on
    /// the phase the sweep observed, before any of its rows is touched; returns the intent as
    /// fenced. `Armed` to `Abandoned` only if its lease ran out by `lease_expired_by` (`None`:
    /// whatever its lease, exclusive recovery's roll-back); `EffectsConfirmed` to `Abandoned`
    /// for an operation whose publish can never apply (its checkpoint delta was overtaken, or
    /// exclusive recovery rolls it back). Every publish of an operation (its writer's, a
    /// roll-forward, an in-process commit's) is conditional on its intent not being fenced,
    /// so none lands after this; and an operation that moved after the sweep observed it
    /// wins: the write fails, the sweep reports it overtaken and the next one decides again
    /// (found by mend-model: an exclusive roll-back marked rows that its writer, confirmed
    /// after the sweep observed it, was publishing).
    pub(super) async fn fence(
        &self,
        intent: &Intent,
        lease_expired_by: Option<TimestampMs>,
    ) -> Result<Intent> {
        match intent.phase {
            IntentPhase::Abandoned => Ok(intent.clone()),
            IntentPhase::Armed => {
                self.durably(
                    DurableStep::AbandonIntent,
                    self.catalog.abandon_intent(
                        &intent.dataset_id,
                        &intent.operation_id,
                        lease_expired_by,
                        self.now_ms(),
                    ),
                )
                .await
            }
            IntentPhase::EffectsConfirmed => {
                let fenced = Intent {
                    phase: IntentPhase::Abandoned,
                    updated_at_ms: self.now_ms(),
                    ..intent.clone()
                };
                self.durably(
                    DurableStep::AbandonIntent,
                    self.catalog
                        .update_intent(&fenced, IntentPhase::EffectsConfirmed),
                )
                .await?;
                Ok(fenced)
            }
        }
    }

    /// Undoes an operation's staging when it never published (a commit, merge or reconcile):
    /// its staged rows are marked, the objects it wrote deleted, then the rows. A published
    /// row is never touched, nor a row another intent names, nor an object another operation
    /// wrote (a reconcile's orphans go back to being orphans).
    pub(in crate::engine) async fn roll_back_staging(&self, intent: &Intent) -> Result<()> {
        let planned = self.rows_only_it_stages(intent).await?;
        let query = ListQuery {
            split_ids: Some(planned.clone()),
            ..ListQuery::default()
        };
        let rows = self
            .catalog
            .list_splits(&intent.dataset_id, &query)
            .await?
            .splits;
        let staged: Vec<String> = rows
            .iter()
            .filter(|row| row.state == SplitState::Staged)
            .map(|row| row.split_id.clone())
            .collect();
        if !staged.is_empty() {
            self.durably(
                DurableStep::MarkRows,
                self.mark_for_deletion(&intent.dataset_id, &staged),
            )
            .await?;
        }
        // A row that was ever published is not this operation's to delete: an operation rolled
        // back never published, so such a row (marked since, as a merge's replaced split is)
        // belongs to the operation that published it and goes with gc after its deletion
        // grace period. Deleting it here left its object without a row, which reconcile then
        // adopted and published again beside the merge that replaced it (found by `mend-sim`,
        // seed 1971851877719533564, rolling back a second begin of the same split ids).
        let marked: Vec<String> = rows
            .iter()
            .filter(|row| row.state != SplitState::Published && row.published_at_ms.is_none())
            .map(|row| row.split_id.clone())
            .collect();
        // Objects without a row are this commit's own leftovers; objects of marked rows may go
        // now that no live row references them (invariant 2).
        for split_id in planned
            .iter()
            .filter(|id| marked.contains(id) || !rows.iter().any(|row| &row.split_id == *id))
        {
            let object_is_ours = self
                .objects
                .inspect(&intent.dataset_id, split_id)
                .await?
                .split()
                .is_some_and(|(header, _)| {
                    header.operation_id.as_deref() == Some(intent.operation_id.as_str())
                });
            if object_is_ours {
                self.durably(
                    DurableStep::DeleteObject {
                        split_id: split_id.clone(),
                    },
                    self.objects.delete(&intent.dataset_id, split_id),
                )
                .await?;
            }
        }
        if !marked.is_empty() {
            self.durably(
                DurableStep::DeleteRows,
                self.catalog
                    .delete_splits(&intent.dataset_id, &marked, self.now_ms(), None),
            )
            .await?;
        }
        Ok(())
    }
}

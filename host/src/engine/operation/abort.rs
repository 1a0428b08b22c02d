//! `abort`: the writer ends its operation ([`super::ending`]), or answers how it ended.

use crate::deliberate_bugs::{self, Bug};
use crate::engine::Engine;
use crate::error::{MendError, OperationFound, Result};
use crate::intent::{Intent, IntentPhase};
use crate::model::PublishResult;
use crate::validate;

use super::{OperationView, ended_view};

impl Engine {
    /// Rolls an operation back in one conditional step: its intent deleted, its staged rows
    /// marked (never visible again) and its end recorded. Its objects and marked rows are
    /// deleted after the answer, in the background ([`Engine::wait_for_cleanups`]; garbage
    /// collection deletes what that leaves). An operation that confirmed is past aborting (it
    /// publishes), unless its checkpoint delta was overtaken (`Engine::end_overtaken`); one
    /// that already ended answers as ended.
    #[tracing::instrument(
        name = "operation_abort",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = %operation_id)
    )]
    pub async fn abort_operation(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationView> {
        let aborting = self.abort_operation_scoped(dataset_id, operation_id);
        self.writing("abort-operation", Some(operation_id), aborting)
            .await
    }

    pub(super) async fn abort_operation_scoped(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationView> {
        validate::dataset_id(dataset_id)?;
        validate::split_id(operation_id)?;
        if let Some((begun, _)) = self.uploaded.begun(dataset_id, operation_id)
            && !deliberate_bugs::active(Bug::AbortWithoutConditionalWrite)
        {
            // Begun by this process: its plan never changes under its id, and the step checks
            // the phase it observes, so the abort is that one step, with no read before it.
            // Only an intent an older mend confirmed meanwhile takes the reading path below.
            match self.end_operation(&begun).await {
                Ok(Some(_)) => return Ok(ended_view(dataset_id, operation_id)),
                Ok(None) => return self.answer_after_settled(dataset_id, operation_id).await,
                Err(error) if error.operation_found() == Some(OperationFound::Confirmed) => {}
                Err(error) => return Err(error),
            }
        }
        let intent = match self.find_intent(dataset_id, operation_id).await? {
            Some(intent) => intent,
            None => match self.end_without_intent(dataset_id, operation_id).await? {
                Some(answer) => return answer,
                // No trace of it: the abort is recorded first, so that a begin still on its
                // way can never start it; a begin that wrote its intent meanwhile is aborted.
                None => match self.abort_before_begin(dataset_id, operation_id).await? {
                    Some(intent) => intent,
                    None => return Ok(ended_view(dataset_id, operation_id)),
                },
            },
        };
        if intent.phase == IntentPhase::EffectsConfirmed {
            // Its publish landed, its intent not yet deleted: it published.
            if let Some(published) = self.recorded_publish(dataset_id, operation_id).await? {
                return Err(published_cannot_abort(operation_id, &published));
            }
            return match self.end_overtaken(&intent).await? {
                Some(_) => Ok(ended_view(dataset_id, operation_id)),
                None => Err(confirmed_cannot_abort(operation_id)),
            };
        }
        if deliberate_bugs::active(Bug::AbortWithoutConditionalWrite) {
            // Planted: rolled back on what it read, with no conditional write a publish races.
            self.uploaded.forget(dataset_id, operation_id);
            self.roll_back_own(&intent).await?;
            return Ok(ended_view(dataset_id, operation_id));
        }
        // One conditional step ends it: fenced, its own rows marked, its end recorded and its
        // intent deleted, only while the intent is there and not confirmed. The publish it races
        // is one conditional step on the same intent, so exactly one of them lands; the loser
        // answers what the winner did.
        match self.end_operation(&intent).await? {
            Some(_) => Ok(ended_view(dataset_id, operation_id)),
            None => self.answer_after_settled(dataset_id, operation_id).await,
        }
    }

    /// What an abort answers when its step found the intent gone: settled meanwhile,
    /// published (by its writer, or rolled forward by recovery), or ended another way.
    async fn answer_after_settled(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationView> {
        match self.end_without_intent(dataset_id, operation_id).await? {
            Some(answer) => answer,
            None => Ok(ended_view(dataset_id, operation_id)),
        }
    }

    /// What an abort of an operation whose intent is gone answers, from what it left: a 412
    /// naming its publish if it published, `ended` if it began and ended another way (or an
    /// abort of it was recorded); `None` if mend has no trace of it.
    pub(super) async fn end_without_intent(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<Option<Result<OperationView>>> {
        if let Some(published) = self.recorded_publish(dataset_id, operation_id).await? {
            return Ok(Some(Err(published_cannot_abort(operation_id, &published))));
        }
        if self.began(dataset_id, operation_id).await?
            || self
                .ended_without_publishing(dataset_id, operation_id)
                .await?
        {
            return Ok(Some(Ok(ended_view(dataset_id, operation_id))));
        }
        Ok(None)
    }

    /// Records the abort of an operation mend has no trace of, so that a begin of it that
    /// arrives later is refused as ended, then looks for its intent once more: a begin that
    /// wrote it in between (it looks for this record after writing its intent, so one of the
    /// two sees the other) is returned, for the abort to fence.
    pub(super) async fn abort_before_begin(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<Option<Intent>> {
        self.record_end(dataset_id, operation_id).await?;
        self.find_intent(dataset_id, operation_id).await
    }
}

pub(super) fn confirmed_cannot_abort(operation_id: &str) -> MendError {
    MendError::operation_refused(
        format!(
            "operation {operation_id} confirmed its effects (phase effects_confirmed): it can no longer be aborted, and publishes unless another operation publishes from the same checkpoint positions first (then it ends); send its publish to learn which"
        ),
        operation_id,
        OperationFound::Confirmed,
    )
}

pub(super) fn published_cannot_abort(operation_id: &str, published: &PublishResult) -> MendError {
    MendError::operation_refused(
        format!(
            "operation {operation_id} published at manifest version {}: it cannot be aborted",
            published.manifest_version
        ),
        operation_id,
        OperationFound::Published,
    )
}

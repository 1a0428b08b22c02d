//! `publish`: the objects checked, then one conditional step that publishes, records the answer
//! and ends the operation; a publish refused for good ends it ([`super::ending`]).

use crate::deliberate_bugs::{self, Bug};
use crate::engine::Engine;
use crate::engine::steps::publish_key;
use crate::error::{EntityKind, MendError, OperationFound, Result};
use crate::intent::{Intent, IntentPhase};
use crate::model::PublishRequest;
use crate::validate;

use super::{OperationView, ended, published_view, status_name};

impl Engine {
    /// Confirms and publishes an operation: every planned object must be in place as planned;
    /// then the intent is confirmed, the splits published with the checkpoint delta, and the
    /// intent deleted. Sent again after it landed, it answers the same result.
    #[tracing::instrument(
        name = "operation_publish",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = %operation_id)
    )]
    pub async fn publish_operation(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationView> {
        validate::dataset_id(dataset_id)?;
        validate::split_id(operation_id)?;
        let pinned = self.pinned();
        let publishing = pinned.publish_operation_pinned(dataset_id, operation_id);
        self.writing("publish-operation", Some(operation_id), publishing)
            .await
    }

    pub(super) async fn publish_operation_pinned(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationView> {
        // Planted: a retry whose intent is gone is answered "not found", not its record.
        if deliberate_bugs::active(Bug::PublishRetryIgnoresRecord)
            && self.uploaded.begun(dataset_id, operation_id).is_none()
            && self.find_intent(dataset_id, operation_id).await?.is_none()
        {
            return Err(MendError::NotFound {
                kind: EntityKind::Intent,
                ids: vec![operation_id.to_string()],
            });
        }
        match self.publish_unrecorded(dataset_id, operation_id).await {
            // Refused on what it read or met: recovery (or another replica) may have published
            // the operation meanwhile, after which its intent is gone. A publish that landed
            // answers published, whatever else moved since. One that lost to an abort or an
            // abandonment (its objects gone with the roll-back, say) answers that the
            // operation ended: that is what became of it, and no upload can help it now (found
            // by reading the losing 412's body in the server's race test).
            Err(error @ (MendError::FailedPrecondition { .. } | MendError::NotFound { .. }))
                if error.operation_found() != Some(OperationFound::Ended) =>
            {
                if let Some(published) = self.recorded_publish(dataset_id, operation_id).await? {
                    return Ok(published_view(dataset_id, operation_id, published));
                }
                if error.operation_found().is_none()
                    && self.ended_meanwhile(dataset_id, operation_id).await?
                {
                    return Err(ended(dataset_id, operation_id));
                }
                Err(error)
            }
            answer => answer,
        }
    }

    /// The publish: every planned object must be in place as planned (read back, unless this
    /// process put every one of them itself); then one atomic step
    /// ([`Catalog::publish_commit`](crate::catalog::Catalog::publish_commit)) publishes the
    /// intent's plan with its checkpoint delta, records the answer under the operation's
    /// publish key and deletes the intent, only while the intent is there and not fenced. A
    /// publish sent again after it landed is answered its record by that same step (or, once
    /// the intent is gone, by [`Engine::publish_operation_pinned`]). The plan is the one this
    /// process began, if it did (it never changes under its operation id), so a publish after
    /// this process's own uploads makes one request: its step.
    pub(super) async fn publish_unrecorded(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationView> {
        // The plan this process began with, if it did: the step checks the intent's phase.
        let intent = match self.uploaded.begun(dataset_id, operation_id) {
            Some((intent, _)) => intent,
            None => self.live_intent(dataset_id, operation_id).await?,
        };
        self.require_objects_in_place(&intent).await?;
        let publish = planned_publish(&intent)?;
        self.check_publish(&publish)?;
        let key = publish_key(operation_id);
        let validator = self.publish_validator(&publish);
        let publishing =
            self.catalog
                .publish_commit(&intent, &publish, &validator, self.now_ms(), &key);
        let published = match self
            .durably(crate::faults::DurableStep::PublishCommit, publishing)
            .await
        {
            Ok(published) => published,
            // Settled meanwhile: published (by recovery, under the same key) or ended.
            Err(MendError::NotFound {
                kind: EntityKind::Intent,
                ..
            }) => return self.after_the_end(dataset_id, operation_id).await,
            // Fenced first: aborted, or abandoned by recovery once its lease ran out.
            Err(error) if error.operation_found() == Some(OperationFound::Ended) => {
                return Err(ended(dataset_id, operation_id));
            }
            // Refused on the dataset it met (its checkpoint delta overtaken by another
            // operation's publish, the publish token moved on, a row no longer staged): it
            // can never publish, so it ends here, before the answer says so.
            Err(error @ MendError::FailedPrecondition { .. }) => {
                return self.end_refused_publish(&intent, error).await;
            }
            Err(error) => return Err(error),
        };
        self.uploaded.forget(dataset_id, operation_id);
        tracing::debug!(
            splits = published.published.len(),
            manifest_version = published.manifest_version,
            "operation published"
        );
        Ok(self.view(&intent, Some(published), &[]))
    }

    /// Ends an operation whose publish its atomic step refused for good (nothing was
    /// published), in one conditional step ([`Engine::end_operation`]), so that neither a
    /// retry nor recovery ever lands it after this answer. If the operation was settled
    /// first, the answer is what settled it.
    pub(super) async fn end_refused_publish(
        &self,
        intent: &Intent,
        refused: MendError,
    ) -> Result<OperationView> {
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        match self.end_operation(intent).await {
            Ok(Some(_)) => {
                let (message, mut ids) = match refused {
                    MendError::FailedPrecondition { message, ids, .. } => (message, ids),
                    other => (other.to_string(), Vec::new()),
                };
                if ids.is_empty() {
                    ids = self.partitions_overtaken(intent).await;
                }
                Err(MendError::FailedPrecondition {
                    message: format!(
                        "operation {operation_id} cannot publish: {message}; it was rolled back and never publishes: read the dataset and begin a new operation"
                    ),
                    ids,
                    operation: Some(OperationFound::Ended),
                })
            }
            Ok(None) => self.after_the_end(dataset_id, operation_id).await,
            // Confirmed by an older mend's publish (which confirmed in a write of its own): it
            // is rolled forward, unless its delta was overtaken, which ends it.
            Err(MendError::FailedPrecondition { .. }) => {
                match self.find_intent(dataset_id, operation_id).await? {
                    Some(now) if now.phase == IntentPhase::EffectsConfirmed => {
                        Err(self.end_overtaken(&now).await?.unwrap_or(refused))
                    }
                    _ => Err(refused),
                }
            }
            Err(error) => Err(error),
        }
    }

    /// The partitions whose positions no longer let `intent`'s checkpoint delta apply, as the
    /// catalog reads now (none if it cannot be read): what a refusal the policy worded names.
    pub(super) async fn partitions_overtaken(&self, intent: &Intent) -> Vec<String> {
        let Some(delta) = intent.planned_delta() else {
            return Vec::new();
        };
        let Ok(dataset) = self.catalog.dataset(&intent.dataset_id).await else {
            return Vec::new();
        };
        match crate::catalog::checkpoint_after(&dataset.checkpoint, delta) {
            Err(MendError::FailedPrecondition { ids, .. }) => ids,
            _ => Vec::new(),
        }
    }

    /// Refuses a publish while an object of the operation is not in place as planned (read
    /// back, unless this process put every one of them itself).
    pub(super) async fn require_objects_in_place(&self, intent: &Intent) -> Result<()> {
        let not_in_place = if self.uploaded.all_in_place(intent) {
            Vec::new()
        } else {
            self.objects_not_in_place(intent).await?
        };
        if !not_in_place.is_empty() {
            let listed: Vec<String> = not_in_place
                .iter()
                .map(|(id, status)| format!("{id} ({})", status_name(*status)))
                .collect();
            return Err(MendError::failed_precondition(
                format!(
                    "operation {} cannot publish: objects not in place as planned: {}; upload them first",
                    intent.operation_id,
                    listed.join(", ")
                ),
                not_in_place.into_iter().map(|(id, _)| id).collect(),
            ));
        }
        Ok(())
    }
}

/// The publish an operation's intent plans.
pub(super) fn planned_publish(intent: &Intent) -> Result<PublishRequest> {
    let planned = intent
        .effects
        .publish
        .clone()
        .ok_or_else(|| MendError::Corrupt {
            message: format!(
                "operation {}'s intent plans no publish",
                intent.operation_id
            ),
        })?;
    Ok(PublishRequest {
        dataset_id: intent.dataset_id.clone(),
        staged_split_ids: planned.staged_split_ids,
        replaced_split_ids: planned.replaced_split_ids,
        checkpoint_delta: planned.checkpoint_delta,
        publish_token: planned.publish_token,
        fencing_epoch: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A publish that reads the objects back while an abort rolls the operation back (the
    /// abort lands between the publish's read of the intent and its read of the object, and
    /// deletes the object) answers that the operation ended, what became of it, not "upload
    /// them first", which no upload could help (found by the server's race test).
    #[tokio::test]
    async fn a_publish_whose_objects_an_abort_took_meanwhile_answers_ended() {
        use std::sync::atomic::{AtomicBool, Ordering};

        use futures::FutureExt;

        use bytes::Bytes;

        use crate::engine::{BeginOperation, ExternalKind, PlannedSplit};
        use crate::hooked_store::HookedStore;
        use crate::model::DatasetConfig;
        use crate::objects::format;

        const PAYLOAD: &[u8] = b"the payload of split s1";
        let store = std::sync::Arc::new(HookedStore::default());
        // Two processes over one store: the writer uploads and aborts; the other publishes,
        // so it reads the object back.
        let process = || store.engine();
        let (writer, publisher) = (process(), process());
        writer
            .create_dataset("ds", &DatasetConfig::default())
            .await
            .unwrap();
        writer
            .begin_operation(&BeginOperation {
                dataset_id: "ds".into(),
                operation_id: Some("op-1".into()),
                kind: ExternalKind::Commit,
                node: "writer".into(),
                lease_ms: Some(60_000),
                splits: vec![PlannedSplit {
                    split_id: "s1".into(),
                    metadata_json: "{}".into(),
                    size: PAYLOAD.len() as u64,
                    sha256: format::sha256(PAYLOAD),
                }],
                checkpoint_delta: None,
                replaced_split_ids: Vec::new(),
                publish_token: None,
            })
            .await
            .unwrap();
        let chunks = futures::stream::iter([Ok(Bytes::from_static(PAYLOAD))]);
        writer
            .upload_object("ds", "op-1", "s1", chunks)
            .await
            .unwrap();

        let fired = std::sync::Arc::new(AtomicBool::new(false));
        let (aborting, hook_fired) = (writer.clone(), fired.clone());
        store.set_before_get(move |path| {
            let (writer, fired) = (aborting.clone(), hook_fired.clone());
            let object = path.as_ref().contains("/splits/");
            async move {
                if object && !fired.swap(true, Ordering::SeqCst) {
                    writer.abort_operation("ds", "op-1").await.unwrap();
                }
            }
            .boxed()
        });
        let error = publisher.publish_operation("ds", "op-1").await.unwrap_err();
        assert!(fired.load(Ordering::SeqCst), "the abort ran mid-publish");
        assert_eq!(
            error.operation_found(),
            Some(OperationFound::Ended),
            "{error:?}"
        );
    }
}

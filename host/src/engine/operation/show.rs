//! `show` and the ledger: where an operation stands, each object, what recovery would decide.

use futures::StreamExt;

use crate::engine::Engine;
use crate::engine::steps::step_key;
use crate::error::{EntityKind, MendError, Result};
use crate::intent::{Intent, PlannedObject};
use crate::objects::ReadBack;
use crate::objects::format::SplitObjectHeader;
use crate::validate;

use super::{ObjectStatus, OperationLedger, OperationView, ended_view, published_view};

impl Engine {
    /// What the catalog holds of one operation, read without judging it: its intent's phase
    /// (while it has one) and whether its stage, its publish and its end are recorded. Once
    /// an operation that staged has no intent, its publish or its end is recorded: whatever
    /// ends an operation records that before it deletes the intent, so that a begin still on
    /// its way finds the end and never begins it again.
    pub async fn operation_ledger(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationLedger> {
        validate::dataset_id(dataset_id)?;
        validate::split_id(operation_id)?;
        let intent = self
            .find_intent(dataset_id, operation_id)
            .await?
            .map(|intent| intent.phase);
        let recorded = |step: &'static str| async move {
            self.catalog
                .recorded_request(dataset_id, &step_key(operation_id, step))
                .await
                .map(|found| found.is_some())
        };
        Ok(OperationLedger {
            intent,
            begun: self.began(dataset_id, operation_id).await?,
            published: recorded("publish").await?,
            ended: recorded("abort").await?,
        })
    }

    /// An operation's phase, each split's object, and what recovery would decide now.
    #[tracing::instrument(
        name = "operation_show",
        level = "debug",
        skip_all,
        fields(dataset_id = %dataset_id, operation_id = %operation_id)
    )]
    pub async fn show_operation(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<OperationView> {
        validate::dataset_id(dataset_id)?;
        validate::split_id(operation_id)?;
        let Some(intent) = self.find_intent(dataset_id, operation_id).await? else {
            if let Some(published) = self.recorded_publish(dataset_id, operation_id).await? {
                return Ok(published_view(dataset_id, operation_id, published));
            }
            if self.began(dataset_id, operation_id).await? {
                return Ok(ended_view(dataset_id, operation_id));
            }
            return Err(MendError::NotFound {
                kind: EntityKind::Intent,
                ids: vec![operation_id.to_string()],
            });
        };
        let mut headers = Vec::with_capacity(intent.effects.objects.len());
        for planned in &intent.effects.objects {
            headers.push(self.planned_header(&intent, planned).await?);
        }
        let mut view = self.view(&intent, None, &headers);
        for (split, planned) in view.splits.iter_mut().zip(&intent.effects.objects) {
            split.object = Some(self.object_status(&intent, planned).await?);
        }
        let probe = self
            .recover(dataset_id, mend_contract::RecoveryMode::Probe)
            .await?;
        view.recovery = probe
            .intents
            .into_iter()
            .find(|report| report.operation_id == operation_id);
        Ok(view)
    }

    /// Whether a planned object is in place as planned: its header (size, checksum, operation)
    /// and its payload's bytes, hashed against the planned sha256 as they are read back (the
    /// header is the writer's claim; a payload of the right size with one byte flipped must
    /// never be published). An object this process received and hashed itself, or read back
    /// before, is not read again ([`super::uploaded`]).
    pub(super) async fn object_status(
        &self,
        intent: &Intent,
        planned: &PlannedObject,
    ) -> Result<ObjectStatus> {
        let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
        if self.uploaded.holds(
            dataset_id,
            operation_id,
            &planned.split_id,
            planned.size,
            &planned.checksum,
        ) {
            return Ok(ObjectStatus::Present);
        }
        let expected = |header: &SplitObjectHeader, size: u64| {
            size == planned.size
                && header.payload_sha256 == planned.checksum
                && header.operation_id.as_deref() == Some(operation_id.as_str())
        };
        let found = self
            .objects
            .read_back(dataset_id, &planned.split_id, &expected)
            .await?;
        Ok(match found {
            ReadBack::Missing => ObjectStatus::Missing,
            ReadBack::Intact { .. } => {
                // Objects are never overwritten (put-if-absent, and presigned URLs carry
                // `If-None-Match: *`), so hashed once is hashed for good.
                self.uploaded.remember(
                    dataset_id,
                    operation_id,
                    &planned.split_id,
                    planned.size,
                    &planned.checksum,
                );
                ObjectStatus::Present
            }
            ReadBack::Damaged { .. } | ReadBack::Other { .. } => ObjectStatus::Different,
        })
    }

    /// The planned objects not in place, with what was found; several looked at at once.
    pub(super) async fn objects_not_in_place(
        &self,
        intent: &Intent,
    ) -> Result<Vec<(String, ObjectStatus)>> {
        // The futures are made up front: a stream mapping borrowed objects lazily would make
        // this future not `Send` for every lifetime, and so not spawnable by the server.
        let looking: Vec<_> = intent
            .effects
            .objects
            .iter()
            .map(|planned| async move {
                let status = self.object_status(intent, planned).await?;
                Ok::<_, MendError>((planned.split_id.clone(), status))
            })
            .collect();
        let looked: Vec<Result<(String, ObjectStatus)>> = futures::stream::iter(looking)
            .buffer_unordered(crate::objects::EXISTENCE_CHECKS_IN_FLIGHT)
            .collect()
            .await;
        let mut not_in_place = Vec::new();
        for entry in looked {
            let (id, status) = entry?;
            if status != ObjectStatus::Present {
                not_in_place.push((id, status));
            }
        }
        not_in_place.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(not_in_place)
    }
}

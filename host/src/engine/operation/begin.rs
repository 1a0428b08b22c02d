//! `begin`: the intent and every row in one step, or nothing; a begin sent again resumes it.

use std::collections::BTreeSet;

use crate::bounds;
use crate::catalog::{OperationRecords, RecordedRequest, RequestKey};
use crate::engine::Engine;
use crate::engine::steps::{expected_state, step_key};
use crate::error::{EntityKind, MendError, OperationFound, Result};
use crate::intent::{
    Intent, IntentPhase, PlannedEffects, PlannedObject, PlannedPublish, PlannedRow,
};
use crate::model::{PublishRequest, TimestampMs};
use crate::objects::format::{self, HEADER_FORMAT_VERSION, SplitObjectHeader};
use crate::validate;

use super::{BeginOperation, ExternalKind, OperationView, ended, internal_kind};

impl Engine {
    /// Begins an operation: validates the plan, writes the intent, stages its rows
    /// create-only. A row another writer holds ends the operation at once (its own rows and
    /// intent are undone) with `FailedPrecondition` naming the rows it could not take.
    #[tracing::instrument(
        name = "operation_begin",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %request.dataset_id, operation_id = tracing::field::Empty)
    )]
    pub async fn begin_operation(&self, request: &BeginOperation) -> Result<OperationView> {
        let operation_id = request.operation_id.as_deref();
        self.writing("begin", operation_id, self.pinned().begin_pinned(request))
            .await
    }

    /// Whether [`Engine::begin_operation`] would accept `request` as it is (its ids, sizes,
    /// checksums, metadata, delta and limits), reading and writing nothing: for a caller
    /// that must not record anything of a begin that would be refused (the server claims
    /// an operation id for its principal only for a begin that passes this).
    pub fn check_begin_operation(&self, request: &BeginOperation) -> Result<()> {
        self.check_begin(request).map(|_| ())
    }

    /// The intent a begin writes and the objects' headers: its plan as the writer sent it
    /// (the operation's identity, compared when a begin is sent again), with the objects as
    /// they are written, carrying the dataset's incarnation and the operation id.
    pub(super) fn begin_intent(
        &self,
        request: &BeginOperation,
        checked: &CheckedBegin,
        dataset: &crate::model::Dataset,
        operation_id: &str,
        now: TimestampMs,
    ) -> (Intent, Vec<SplitObjectHeader>) {
        let lease_ms = request
            .lease_ms
            .map_or(self.options.intent_lease_ms, |ms| ms as i64);
        let publish = PlannedPublish {
            staged_split_ids: request.splits.iter().map(|s| s.split_id.clone()).collect(),
            replaced_split_ids: request.replaced_split_ids.clone(),
            checkpoint_delta: request.checkpoint_delta.clone(),
            publish_token: request.publish_token.clone(),
        };
        let expected = expected_state(dataset, &publish);
        // Objects carry the dataset's incarnation and the operation; the intent plans them as
        // they will be written (their size counts the header).
        let headers: Vec<SplitObjectHeader> = checked
            .headers
            .iter()
            .map(|header| SplitObjectHeader {
                dataset_uid: dataset.uid.clone(),
                operation_id: Some(operation_id.to_string()),
                ..header.clone()
            })
            .collect();
        let intent = Intent {
            effects: PlannedEffects {
                stage: request
                    .splits
                    .iter()
                    .map(|split| PlannedRow {
                        split_id: split.split_id.clone(),
                        metadata_json: split.metadata_json.clone(),
                    })
                    .collect(),
                objects: headers
                    .iter()
                    .map(|header| PlannedObject {
                        split_id: header.split_id.clone(),
                        size: format::encoded_len(header, header.payload_size as usize),
                        checksum: header.payload_sha256.clone(),
                    })
                    .collect(),
                publish: Some(publish),
                ..PlannedEffects::default()
            },
            expected,
            ..Intent::armed(
                operation_id.to_string(),
                internal_kind(request.kind),
                &request.dataset_id,
                &request.node,
                now,
                lease_ms,
            )
        };
        (intent, headers)
    }

    /// The begin: one atomic step ([`Catalog::begin_commit`](crate::catalog::Catalog::begin_commit))
    /// writes the intent and stages every row create-only, or writes nothing; it records that
    /// the operation began, and is refused if the operation began or ended before (its
    /// records are looked for in the same step, so an abort recording the end of an operation
    /// it found no trace of either refuses this begin or sees its intent). A begin sent again
    /// while the intent is there resumes it.
    pub(super) async fn begin_pinned(&self, request: &BeginOperation) -> Result<OperationView> {
        let checked = self.check_begin(request)?;
        let operation_id = match &request.operation_id {
            Some(id) => id.clone(),
            None => crate::ambient::uuid_v4().to_string(),
        };
        tracing::Span::current().record("operation_id", tracing::field::display(&operation_id));
        let dataset_id = request.dataset_id.as_str();
        let crate::engine::staging::StagePlanning {
            splits, planner, ..
        } = self.stage_planner(&request.stage_request())?;
        let now = self.now_ms();
        let build = |dataset: &crate::model::Dataset| {
            Ok(self
                .begin_intent(request, &checked, dataset, &operation_id, now)
                .0)
        };
        let keys = [
            step_key(&operation_id, "begin"),
            step_key(&operation_id, "publish"),
            step_key(&operation_id, "abort"),
        ];
        let refused_by = [keys[0].as_str(), keys[1].as_str(), keys[2].as_str()];
        let begin_key = RequestKey::new(keys[0].clone(), &operation_id);
        let begun_record = RecordedRequest::new(&begin_key, &operation_id, now);
        let records = OperationRecords {
            refused_by: &refused_by,
            begun: Some(&begun_record),
        };
        let begun = self.durably(
            crate::faults::DurableStep::BeginCommit,
            self.catalog
                .begin_commit(dataset_id, &build, &splits, &*planner, records, now),
        );
        match begun.await {
            Ok(begun) => {
                let (_, headers) =
                    self.begin_intent(request, &checked, &begun.dataset, &operation_id, now);
                self.uploaded
                    .remember_intent(&begun.intent, &begun.dataset.uid);
                Ok(self.view(&begun.intent, None, &headers))
            }
            // A begin sent again while its operation is in flight.
            Err(MendError::AlreadyExists {
                kind: EntityKind::Intent,
                ..
            }) => {
                self.resume_begin(request, &checked, &operation_id, now)
                    .await
            }
            Err(error) if error.operation_found() == Some(OperationFound::Ended) => {
                self.begun_before(request, &checked, &operation_id, now)
                    .await
            }
            Err(MendError::FailedPrecondition {
                ids,
                operation: None,
                ..
            }) => Err(MendError::failed_precondition(
                format!(
                    "operation {operation_id} cannot own splits another writer staged first: {}; nothing was written",
                    ids.join(", ")
                ),
                ids,
            )),
            Err(error) => Err(error),
        }
    }

    /// A begin sent again while the operation's intent is there: the operation as it stands,
    /// if it is the same plan.
    pub(super) async fn resume_begin(
        &self,
        request: &BeginOperation,
        checked: &CheckedBegin,
        operation_id: &str,
        now: TimestampMs,
    ) -> Result<OperationView> {
        let dataset_id = request.dataset_id.as_str();
        let Some(stored) = self.find_intent(dataset_id, operation_id).await? else {
            // Settled since its begin's step found it.
            return self.begun_before(request, checked, operation_id, now).await;
        };
        let dataset = self.catalog.dataset(dataset_id).await?;
        let (requested, headers) = self.begin_intent(request, checked, &dataset, operation_id, now);
        if !same_plan(&stored, &requested) {
            return Err(MendError::invalid(format!(
                "operation {operation_id} of dataset {dataset_id} was begun with another plan; an operation id names one operation: begin a new one with a new id"
            )));
        }
        if stored.phase == IntentPhase::Abandoned {
            return Err(ended(dataset_id, operation_id));
        }
        self.uploaded.remember_intent(&stored, &dataset.uid);
        Ok(self.view(&stored, None, &headers))
    }

    /// A begin of an operation that began before and has no intent now: its publish's answer
    /// if it published, otherwise that it ended.
    pub(super) async fn begun_before(
        &self,
        request: &BeginOperation,
        checked: &CheckedBegin,
        operation_id: &str,
        now: TimestampMs,
    ) -> Result<OperationView> {
        let dataset_id = request.dataset_id.as_str();
        let Some(published) = self.recorded_publish(dataset_id, operation_id).await? else {
            return Err(ended(dataset_id, operation_id));
        };
        let dataset = self.catalog.dataset(dataset_id).await?;
        let (intent, _) = self.begin_intent(request, checked, &dataset, operation_id, now);
        let mut view = self.view(&intent, Some(published), &[]);
        view.owner = None;
        view.lease_expires_at_ms = None;
        Ok(view)
    }

    /// Checks a begin before anything is read: ids, sizes, checksums, metadata, the delta and
    /// the merge's replaced splits, and the limits.
    pub(super) fn check_begin(&self, request: &BeginOperation) -> Result<CheckedBegin> {
        validate::dataset_id(&request.dataset_id)?;
        validate::node(&request.node)?;
        if let Some(id) = &request.operation_id {
            validate::split_id(id).map_err(|_| {
                MendError::invalid(format!(
                    "operation id {:?} is invalid: use 1 to 128 of A-Z a-z 0-9 . _ -, starting with a letter or digit",
                    validate::truncated(id, 64)
                ))
            })?;
        }
        if let Some(ms) = request.lease_ms {
            bounds::OPERATION_LEASE_MS.check(ms)?;
        }
        if request.splits.is_empty() {
            return Err(MendError::invalid("an operation plans at least one split"));
        }
        match request.kind {
            ExternalKind::Commit if !request.replaced_split_ids.is_empty() => {
                return Err(MendError::invalid(
                    "a commit replaces nothing: begin a merge to replace splits",
                ));
            }
            ExternalKind::Merge if request.replaced_split_ids.is_empty() => {
                return Err(MendError::invalid(
                    "a merge replaces at least one split; publish new splits with a commit",
                ));
            }
            ExternalKind::Merge if request.checkpoint_delta.is_some() => {
                return Err(MendError::invalid(
                    "a merge carries no checkpoint delta: it moves no data in",
                ));
            }
            _ => {}
        }
        let stage = request.stage_request();
        validate::stage_request(&stage, self.stage_limits())?;
        let mut seen = BTreeSet::new();
        if let Some(twice) = request
            .splits
            .iter()
            .find(|split| !seen.insert(split.split_id.as_str()))
        {
            return Err(MendError::invalid(format!(
                "split {} appears twice in one operation",
                twice.split_id
            )));
        }
        let publish = PublishRequest {
            dataset_id: request.dataset_id.clone(),
            staged_split_ids: request.splits.iter().map(|s| s.split_id.clone()).collect(),
            replaced_split_ids: request.replaced_split_ids.clone(),
            checkpoint_delta: request.checkpoint_delta.clone(),
            publish_token: request.publish_token.clone(),
            fencing_epoch: None,
        };
        validate::publish_request(&publish, self.options.max_stage_batch)?;
        let headers = request
            .splits
            .iter()
            .map(|split| {
                bounds::OBJECT_PAYLOAD_BYTES.check(split.size)?;
                Ok(SplitObjectHeader {
                    format_version: HEADER_FORMAT_VERSION,
                    dataset_id: request.dataset_id.clone(),
                    dataset_uid: String::new(),
                    split_id: split.split_id.clone(),
                    node: request.node.clone(),
                    metadata_json: split.metadata_json.clone(),
                    operation_id: None,
                    payload_size: split.size,
                    payload_sha256: checksum(&split.split_id, &split.sha256)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(CheckedBegin { headers })
    }
}

pub(super) struct CheckedBegin {
    /// Each split's object header, but for the dataset uid and the operation id.
    headers: Vec<SplitObjectHeader>,
}

/// Whether two intents plan the same operation (a begin sent again), whatever their times.
pub(super) fn same_plan(stored: &Intent, requested: &Intent) -> bool {
    stored.kind == requested.kind
        && stored.owner == requested.owner
        && stored.effects.stage == requested.effects.stage
        && stored.effects.publish == requested.effects.publish
        && stored
            .effects
            .objects
            .iter()
            .map(|o| (&o.split_id, &o.checksum, o.size))
            .eq(requested
                .effects
                .objects
                .iter()
                .map(|o| (&o.split_id, &o.checksum, o.size)))
}

/// `sha256:<hex>` from `sha256:<hex>` or bare hex, lower-cased; refused otherwise.
pub(super) fn checksum(split_id: &str, given: &str) -> Result<String> {
    let hex = given.strip_prefix("sha256:").unwrap_or(given);
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(MendError::invalid(format!(
            "split {split_id}: sha256 {:?} is invalid: give 64 hex digits, optionally prefixed `sha256:`",
            validate::truncated(given, 80)
        )));
    }
    Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_are_normalised_and_bad_ones_refused() {
        let hex = "AB".repeat(32);
        assert_eq!(
            checksum("s", &hex).unwrap(),
            format!("sha256:{}", "ab".repeat(32))
        );
        assert!(checksum("s", &format!("sha256:{hex}")).is_ok());
        for bad in ["", "sha256:", "xyz", &"a".repeat(63), &"g".repeat(64)] {
            assert!(checksum("s", bad).is_err(), "{bad:?}");
        }
    }
}

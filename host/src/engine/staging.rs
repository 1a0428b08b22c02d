//! Staging and publishing: the splits' own requests (stage, publish, mark, delete, list).
//!
//! A stage claims rows in the request's mode (upsert or create-only) as the policy plans and
//! the invariants allow; a publish makes staged splits visible, marks the ones they replace
//! and applies the checkpoint delta, all in one atomic step of the backend.

use std::sync::Arc;

use mend_contract::capability::{
    PUBLISH_CHECKPOINT, PUBLISH_FENCING_EPOCH, PUBLISH_TOKEN, STAGE_CREATE_ONLY,
    STAGE_STANDARD_PLANS, STAGE_UPSERT,
};
use mend_contract::{ExistingRow, PartitionPosition, PublishInput};

use super::Engine;
use super::keyed::{Keyed, request_key};
use crate::catalog::InTheWay;
use crate::catalog::{self, MarkRule, PublishObservation, RequestKey, StagePlan};
use crate::error::{MendError, Result};
use crate::invariants;
use crate::model::{
    ListQuery, MarkResult, NewSplit, PublishRequest, PublishResult, SplitPage, SplitState,
    StageMode, StageRequest, StageResult, StagedSplit,
};
use crate::validate;

impl Engine {
    /// Stages splits in the request's mode. The result names, per distinct id, what actually
    /// happened at write time: in create-only mode `Inserted` is the claim on the row.
    ///
    /// Under an idempotency key the result is recorded with the effect, and a retry with the
    /// same key answers it again without staging anything ([`crate::catalog::recorded`]).
    pub fn stage<'a>(&'a self, request: &'a StageRequest) -> Keyed<'a, StageResult> {
        Keyed::new(self.write_scope("stage"), move |key| async move {
            let key = request_key(key, &("stage", request))?;
            self.stage_keyed(request, key.as_ref(), InTheWay::Write)
                .await
        })
    }

    /// [`Engine::stage`], refused with [`MendError::RecoveryRequired`] (naming the operation,
    /// writing nothing) when an unresolved operation's intent names one of the request's
    /// splits ([`catalog::Catalog::stage_unless_in_the_way`]): the request waits for recovery
    /// to settle the operation instead of landing on its splits, which is what `mend serve`
    /// answers a stage with. A request recorded under its key is answered first, as by
    /// [`Engine::stage`].
    pub fn stage_unless_in_the_way<'a>(
        &'a self,
        request: &'a StageRequest,
    ) -> Keyed<'a, StageResult> {
        Keyed::new(self.write_scope("stage"), move |key| async move {
            let key = request_key(key, &("stage", request))?;
            self.stage_keyed(request, key.as_ref(), InTheWay::Refuse)
                .await
        })
    }

    #[tracing::instrument(
        name = "stage",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %request.dataset_id, mode = ?request.mode)
    )]
    pub(super) async fn stage_keyed(
        &self,
        request: &StageRequest,
        key: Option<&RequestKey>,
        in_the_way: InTheWay,
    ) -> Result<StageResult> {
        let StagePlanning {
            splits: distinct,
            planner,
            standard,
        } = self.stage_planner(request)?;
        let now_ms = self.now_ms();
        let (dataset_id, mode) = (&request.dataset_id, request.mode);
        let splits: Vec<StagedSplit> = match self.recorded_answer(dataset_id, key).await? {
            Some(answer) => answer,
            None if in_the_way == InTheWay::Refuse => {
                let planner: Option<&catalog::StagePlanner<'_>> =
                    if standard { None } else { Some(&*planner) };
                self.catalog
                    .stage_unless_in_the_way(dataset_id, mode, &distinct, planner, now_ms, key)
                    .await?
            }
            None if standard => {
                self.catalog
                    .stage_standard(dataset_id, mode, &distinct, now_ms, key)
                    .await?
            }
            None => {
                self.catalog
                    .stage(dataset_id, mode, &distinct, &*planner, now_ms, key)
                    .await?
            }
        };
        Ok(StageResult {
            dataset_id: request.dataset_id.clone(),
            mode: request.mode,
            splits,
        })
    }

    /// A stage request checked (its input, and the capability its mode needs), as the splits a
    /// backend stages (one per id, sorted, [`catalog::distinct_splits`]), the planner it calls
    /// with the rows it finds (the policy plans and the invariants check the plan, or the
    /// mode's standard plan for a policy that declares it) and whether it is the standard one.
    pub(super) fn stage_planner(&self, request: &StageRequest) -> Result<StagePlanning> {
        let requested = validate::stage_request(request, self.stage_limits())?;
        match request.mode {
            StageMode::CreateOnly => self.require(
                STAGE_CREATE_ONLY,
                "a create-only stage must never run as an upsert",
            )?,
            StageMode::Upsert => self.require(STAGE_UPSERT, "an upsert stage needs upsert")?,
        }
        let distinct = catalog::distinct_splits(request.mode, &requested);
        let mode = request.mode;
        // One policy for the whole stage, even if it is swapped meanwhile.
        let policy = self.policy();
        let standard = plans_standard(&policy);
        let planner: Box<dyn Planner> = if standard {
            let splits = distinct.clone();
            Box::new(move |existing: &[ExistingRow]| {
                catalog::standard_stage_plan(mode, &splits, existing)
            })
        } else {
            let split_ids: Vec<String> = distinct.iter().map(|s| s.split_id.clone()).collect();
            let request_ids: Vec<String> = requested.iter().map(|s| s.split_id.clone()).collect();
            let dataset_id = request.dataset_id.clone();
            Box::new(move |existing: &[ExistingRow]| -> Result<StagePlan> {
                let planned =
                    policy.plan_stage_by_index(&dataset_id, mode, &request_ids, existing)?;
                invariants::checked_stage_plan_by_index(
                    mode, &requested, &split_ids, existing, planned,
                )
            })
        };
        Ok(StagePlanning {
            splits: distinct,
            planner,
            standard,
        })
    }

    /// Publishes staged splits, marks replaced ones and applies the checkpoint delta, all at
    /// once or not at all.
    ///
    /// Under an idempotency key the result is recorded in the publish's own atomic step, and
    /// a retry with the same key answers it again (the same manifest version, the same ids)
    /// instead of being refused because its splits are no longer staged.
    pub fn publish<'a>(&'a self, request: &'a PublishRequest) -> Keyed<'a, PublishResult> {
        Keyed::new(self.write_scope("publish"), move |key| async move {
            let key = request_key(key, &("publish", request))?;
            self.publish_keyed(request, key.as_ref(), InTheWay::Write)
                .await
        })
    }

    /// [`Engine::publish`], refused with [`MendError::RecoveryRequired`] (naming the
    /// operation, writing nothing) when an unresolved operation's intent names one of the
    /// request's staged or replaced splits, checked in the publish's own atomic step
    /// ([`catalog::Catalog::publish_unless_in_the_way`]): what `mend serve` answers a publish
    /// with. A request recorded under its key is answered first, as by [`Engine::publish`].
    pub fn publish_unless_in_the_way<'a>(
        &'a self,
        request: &'a PublishRequest,
    ) -> Keyed<'a, PublishResult> {
        Keyed::new(self.write_scope("publish"), move |key| async move {
            let key = request_key(key, &("publish", request))?;
            self.publish_keyed(request, key.as_ref(), InTheWay::Refuse)
                .await
        })
    }

    /// Publishes with the result recorded under `key` when there is one; a recorded key is
    /// answered before anything else is read.
    #[tracing::instrument(
        name = "publish",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %request.dataset_id)
    )]
    pub(crate) async fn publish_keyed(
        &self,
        request: &PublishRequest,
        key: Option<&RequestKey>,
        in_the_way: InTheWay,
    ) -> Result<PublishResult> {
        self.check_publish(request)?;
        if let Some(answer) = self.recorded_answer(&request.dataset_id, key).await? {
            return Ok(answer);
        }
        self.check_objects_exist(request).await?;
        let validator = self.publish_validator(request);
        let now_ms = self.now_ms();
        match in_the_way {
            InTheWay::Write => self.catalog.publish(request, &validator, now_ms, key).await,
            InTheWay::Refuse => {
                self.catalog
                    .publish_unless_in_the_way(request, &validator, now_ms, key)
                    .await
            }
        }
    }

    /// Publishes the publish an operation's intent plans, recorded under the operation's
    /// `key`, and deletes the intent, in one atomic step that holds only while the intent is
    /// there and not fenced ([`Catalog::publish_commit`]): an abort, an abandonment or an
    /// exclusive roll-back that fenced it first wins. Every object is looked for first
    /// (invariant 1).
    pub(super) async fn publish_settling(
        &self,
        intent: &crate::intent::Intent,
        request: &PublishRequest,
        key: &RequestKey,
    ) -> Result<PublishResult> {
        self.check_publish(request)?;
        if let Some(answer) = self.recorded_answer(&request.dataset_id, Some(key)).await? {
            self.finish_intent(&intent.dataset_id, &intent.operation_id)
                .await?;
            return Ok(answer);
        }
        self.check_objects_exist(request).await?;
        let validator = self.publish_validator(request);
        self.catalog
            .publish_commit(intent, request, &validator, self.now_ms(), key)
            .await
    }

    /// Refuses a publish request that is malformed, or that needs a capability this engine
    /// lacks.
    pub(super) fn check_publish(&self, request: &PublishRequest) -> Result<()> {
        validate::publish_request(request, self.options.max_stage_batch)?;
        if request.checkpoint_delta.is_some() {
            self.require(PUBLISH_CHECKPOINT, "the publish carries a checkpoint delta")?;
        }
        if request.publish_token.is_some() {
            self.require(PUBLISH_TOKEN, "the publish carries a publish token")?;
        }
        if request.fencing_epoch.is_some() {
            self.require(PUBLISH_FENCING_EPOCH, "the publish carries a fencing epoch")?;
        }
        Ok(())
    }

    /// The validator a publish hands its backend: the policy's verdict on what the backend
    /// observed, checked against the invariants.
    pub(super) fn publish_validator<'a>(
        &self,
        request: &'a PublishRequest,
    ) -> impl Fn(&PublishObservation) -> Result<()> + Send + Sync + use<'a> {
        let policy = self.policy();
        move |observation: &PublishObservation| -> Result<()> {
            let input = publish_input(request, observation);
            let violations = policy.validate_publish(&input)?;
            invariants::checked_publish(request, observation, violations)
        }
    }

    /// Refuses a publish naming a split whose object is not in the store (invariant 1: every
    /// published split's object exists), before anything is written. Objects are immutable
    /// and only a marked split's object is ever deleted, so one that is there now is still
    /// there when the publish lands. When a split without an object has no row either, the
    /// publish goes on to its atomic step, which refuses it in the order a writer needs: a
    /// stale fencing epoch first, then `NotFound` naming every missing split, published or
    /// replaced.
    async fn check_objects_exist(&self, request: &PublishRequest) -> Result<()> {
        let missing = self
            .objects
            .missing(&request.dataset_id, &request.staged_split_ids)
            .await?;
        if missing.is_empty() {
            return Ok(());
        }
        let query = ListQuery {
            split_ids: Some(missing.clone()),
            ..ListQuery::default()
        };
        let rows = self
            .catalog
            .list_splits(&request.dataset_id, &query)
            .await?
            .splits;
        if rows.len() < missing.len() {
            return Ok(());
        }
        Err(MendError::failed_precondition(
            format!(
                "publish refused, nothing was written: {} split(s) have no object in the store: {}; upload each object before publishing it (invariant 1)",
                missing.len(),
                missing.join(", ")
            ),
            missing,
        ))
    }

    /// Marks splits for deletion; marking a marked split again is a no-op.
    ///
    /// Under an idempotency key a retry answers the first result (the ids it marked), not
    /// "already marked".
    pub fn mark_for_deletion<'a>(
        &'a self,
        dataset_id: &'a str,
        split_ids: &'a [String],
    ) -> Keyed<'a, MarkResult> {
        Keyed::new(self.write_scope("mark"), move |key| async move {
            let key = request_key(key, &("mark", dataset_id, split_ids))?;
            self.mark_keyed(dataset_id, split_ids, MarkRule::Named, key.as_ref())
                .await
        })
    }

    /// [`Engine::mark_for_deletion`], refused with [`MendError::RecoveryRequired`] (naming
    /// the operation, writing nothing) when an unresolved operation's intent names one of
    /// `split_ids`, checked in the mark's own atomic step
    /// ([`MarkRule::NamedUnlessInTheWay`]): what `mend serve` answers a mark with.
    pub fn mark_unless_in_the_way<'a>(
        &'a self,
        dataset_id: &'a str,
        split_ids: &'a [String],
    ) -> Keyed<'a, MarkResult> {
        Keyed::new(self.write_scope("mark"), move |key| async move {
            let key = request_key(key, &("mark", dataset_id, split_ids))?;
            let rule = MarkRule::NamedUnlessInTheWay;
            self.mark_keyed(dataset_id, split_ids, rule, key.as_ref())
                .await
        })
    }

    #[tracing::instrument(
        name = "mark",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id)
    )]
    async fn mark_keyed(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        rule: MarkRule,
        key: Option<&RequestKey>,
    ) -> Result<MarkResult> {
        validate::split_id_list(dataset_id, split_ids, self.options.max_stage_batch)?;
        self.catalog
            .mark(dataset_id, split_ids, rule, self.now_ms(), key)
            .await
    }

    /// Deletes splits marked for deletion: their objects first, then their rows, so that a
    /// crash in between leaves a marked row whose delete can simply be repeated.
    ///
    /// Under an idempotency key the rows' delete records the result, so a retry after the
    /// rows went answers success instead of `NotFound`. A crash between the objects and the
    /// rows leaves no record: the retry deletes again (the objects are gone already, the rows
    /// go).
    pub fn delete_splits<'a>(
        &'a self,
        dataset_id: &'a str,
        split_ids: &'a [String],
    ) -> Keyed<'a, ()> {
        Keyed::new(self.write_scope("delete"), move |key| async move {
            let key = request_key(key, &("delete", dataset_id, split_ids))?;
            self.delete_splits_keyed(dataset_id, split_ids, key.as_ref())
                .await
        })
    }

    /// The delete, its result recorded under `key` with the rows' delete; a recorded key
    /// answers before anything is read.
    #[tracing::instrument(
        name = "delete",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id)
    )]
    async fn delete_splits_keyed(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        key: Option<&RequestKey>,
    ) -> Result<()> {
        validate::split_id_list(dataset_id, split_ids, self.options.max_stage_batch)?;
        if let Some(answer) = self.recorded_answer(dataset_id, key).await? {
            return Ok(answer);
        }
        let query = ListQuery {
            split_ids: Some(split_ids.to_vec()),
            ..ListQuery::default()
        };
        let rows = self.catalog.list_splits(dataset_id, &query).await?.splits;
        let missing: Vec<String> = split_ids
            .iter()
            .filter(|id| !rows.iter().any(|row| &row.split_id == *id))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(MendError::splits_not_found(missing));
        }
        let not_marked: Vec<String> = rows
            .iter()
            .filter(|row| row.state != SplitState::MarkedForDeletion)
            .map(|row| row.split_id.clone())
            .collect();
        if !not_marked.is_empty() {
            return Err(MendError::failed_precondition(
                format!(
                    "only splits marked for deletion can be deleted; mark these first: {}",
                    not_marked.join(", ")
                ),
                not_marked,
            ));
        }
        // A marked split never returns to a live state, so its object can go before the row.
        for row in &rows {
            self.objects.delete(dataset_id, &row.split_id).await?;
        }
        self.catalog
            .delete_splits(dataset_id, split_ids, self.now_ms(), key)
            .await
    }

    /// One page of the splits that match `query`: at most `query.limit` splits, or
    /// [`EngineOptions::max_list_page`](crate::EngineOptions::max_list_page) when it names none; `next_after_split_id` continues.
    pub async fn list_splits(&self, dataset_id: &str, query: &ListQuery) -> Result<SplitPage> {
        validate::dataset_id(dataset_id)?;
        validate::list_query(query, self.options.max_list_page)?;
        let query = ListQuery {
            limit: Some(query.limit.unwrap_or(self.options.max_list_page)),
            ..query.clone()
        };
        self.catalog.list_splits(dataset_id, &query).await
    }

    /// The limits every stage request is held to.
    pub(crate) fn stage_limits(&self) -> validate::StageLimits {
        validate::StageLimits {
            max_batch: self.options.max_stage_batch,
            max_metadata_bytes: self.options.max_metadata_bytes,
        }
    }
}

/// A checked stage request, as a backend stages it.
pub(super) struct StagePlanning {
    /// One per distinct id, sorted ([`catalog::distinct_splits`]).
    pub(super) splits: Vec<Arc<NewSplit>>,
    /// What the backend plans with, on the rows it finds.
    pub(super) planner: Box<dyn Planner>,
    /// Whether `planner` is the mode's standard plan, which a backend may apply without
    /// reading first.
    pub(super) standard: bool,
}

/// Whether `policy`'s stage plans are each mode's standard plan (it declares
/// `stage.standard-plans`, ABI 1.4): the host then stages without asking it, and a backend may
/// write without reading first ([`crate::catalog::Catalog::stage_standard`]).
fn plans_standard(policy: &crate::runtime::PolicyRuntime) -> bool {
    policy
        .description()
        .required_capabilities
        .iter()
        .any(|name| name == STAGE_STANDARD_PLANS)
}

/// What a stage hands its backend to plan with ([`crate::catalog::StagePlanner`]).
pub(super) trait Planner: Fn(&[ExistingRow]) -> Result<StagePlan> + Send + Sync {}

impl<F: Fn(&[ExistingRow]) -> Result<StagePlan> + Send + Sync> Planner for F {}

/// What the policy sees of a publish: the request and the observation, in WIT's shapes.
pub(super) fn publish_input(
    request: &PublishRequest,
    observation: &PublishObservation,
) -> PublishInput {
    let checkpoint = request
        .checkpoint_delta
        .as_ref()
        .and_then(|delta| observation.checkpoint.get(&delta.source))
        .map(|positions| {
            positions
                .iter()
                .map(|(partition, position)| PartitionPosition {
                    partition: partition.clone(),
                    position: *position,
                })
                .collect()
        })
        .unwrap_or_default();
    PublishInput {
        dataset_id: request.dataset_id.clone(),
        staged_split_ids: request.staged_split_ids.clone(),
        replaced_split_ids: request.replaced_split_ids.clone(),
        checkpoint_delta: request.checkpoint_delta.clone(),
        publish_token: request.publish_token.clone(),
        rows: observation.rows.clone(),
        checkpoint,
        current_publish_token: observation.publish_token.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EngineOptions;
    use crate::catalog::ObjectStoreCatalog;
    use crate::model::{DatasetConfig, StageSplit};
    use crate::objects::SplitObjects;
    use crate::runtime::PolicyRuntime;

    async fn engine() -> Engine {
        let catalog = ObjectStoreCatalog::open_url("memory://").unwrap();
        let objects = SplitObjects::new(catalog.store().clone(), catalog.prefix().clone());
        Engine::new(
            Arc::new(catalog),
            objects,
            PolicyRuntime::default_policy().unwrap(),
            EngineOptions::default(),
        )
        .unwrap()
    }

    /// A backend without create-only must refuse a create-only request loudly and write
    /// nothing; running it as an upsert is exactly the failure mend exists to rule out.
    #[tokio::test]
    async fn create_only_without_the_capability_fails_loudly_and_writes_nothing() {
        let mut engine = engine().await;
        engine
            .create_dataset("ds", &DatasetConfig::default())
            .await
            .unwrap();
        engine.capabilities = engine.capabilities.without(STAGE_CREATE_ONLY);
        let request = StageRequest {
            dataset_id: "ds".into(),
            mode: StageMode::CreateOnly,
            node: "n".into(),
            splits: vec![StageSplit {
                split_id: "a".into(),
                metadata_json: "{}".into(),
            }],
        };
        let error = engine.stage(&request).await.unwrap_err();
        assert!(
            matches!(&error, MendError::CapabilityMissing { capability, .. } if capability == STAGE_CREATE_ONLY),
            "{error:?}"
        );
        let rows = engine
            .list_splits("ds", &ListQuery::default())
            .await
            .unwrap();
        assert!(rows.splits.is_empty());

        let upsert = StageRequest {
            mode: StageMode::Upsert,
            ..request
        };
        assert!(
            engine.stage(&upsert).await.is_ok(),
            "other modes still work"
        );
    }
}

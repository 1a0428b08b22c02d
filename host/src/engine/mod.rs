//! The engine: the one place that talks both to the policy and to the storage.
//!
//! Each request goes through the same steps: validate the input (`InvalidArgument`, nothing
//! read), check that the backend provides what the request needs (`CapabilityMissing`, never
//! a fallback), let the backend observe inside its atomic step, ask the policy, check its
//! answer against the [`invariants`], and have the backend execute it.
//!
//! Operations with several durable effects (a commit) write an intent first and go through
//! the fault seam at every durable step (`commit.rs`); `recovery.rs` resolves what crashed
//! operations leave behind.

mod audit_trail;
mod commit;
mod config_apply;
mod gc;
mod idempotency;
mod operations;
mod policy_swap;
mod reconcile;
mod recovery;
mod settle;
mod uploaded;
mod verify;

pub use commit::{CommitRequest, CommitResult, CommitSplit, MergeRequest};
pub use config_apply::ConfigEdit;
pub use gc::{GcResult, RECORDED_REQUEST_RETENTION_MS};
pub use operations::{
    BeginOperation, ExternalKind, ObjectStatus, ObjectToPut, ObjectUploadUrl, OperationPhase,
    OperationSplit, OperationView, PlannedSplit, SINGLE_PUT_BYTES, UploadResult,
};
pub use policy_swap::{DeploymentSwap, PreparedSwap, SwapPreview};
pub use reconcile::ReconcileReport;
pub use recovery::{GatedSweep, IntentReport, IntentStatus, Outcome, RecoveryReport};
pub use verify::{VerifyReport, Violation};

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use mend_policy::capability::{
    PUBLISH_CHECKPOINT, PUBLISH_FENCING_EPOCH, PUBLISH_TOKEN, STAGE_CREATE_ONLY, STAGE_UPSERT,
};
use mend_policy::{ExistingRow, PartitionPosition, PublishInput};

use crate::catalog::{self, Capabilities, Catalog, PublishObservation, RequestKey, StagePlan};
use crate::clock::{Clock, SystemClock};
use crate::error::{MendError, Result};
use crate::faults::{Faults, NoFaults};
use crate::gates::{GateName, GateSession, GateSet, Gates, HeldGates, Holds, InProcessGates};
use crate::invariants;
use crate::model::{
    Dataset, DatasetConfig, ListQuery, MarkResult, NewSplit, PublishRequest, PublishResult,
    SplitPage, SplitState, StageMode, StageRequest, StageResult, StagedSplit,
};
use crate::objects::SplitObjects;
use crate::progress::{NoProgress, Progress};
use crate::runtime::{ActivePolicy, PolicyRuntime};
use crate::validate;

/// Host-side settings of an engine.
/// Whether a publish looks for each split's object before its atomic step (invariant 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ObjectCheck {
    LookForEach,
    /// The caller made sure of every object just before (read its header, or put it itself:
    /// see `uploaded`) and refused any not in place.
    AlreadyRead,
}

/// How an engine runs: its limits, clock, lease, fault seam, progress and gate timeout.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Most splits one stage request may carry.
    pub max_stage_batch: usize,
    /// Most bytes of one split's metadata.
    pub max_metadata_bytes: usize,
    /// Most splits one page of a listing holds; a listing that names no limit gets this many.
    pub max_list_page: usize,
    /// Where the engine reads time: the system clock, or a test's manual clock.
    pub clock: Arc<dyn Clock>,
    /// How long an operation's intent says its owner may still be working; recovery outside
    /// exclusive mode leaves the intent alone until then.
    pub intent_lease_ms: i64,
    /// The seam every durable step passes through; tests crash operations with it.
    pub faults: Arc<dyn Faults>,
    /// Told how long runs (sweeps, reconciles) advance.
    pub progress: Arc<dyn Progress>,
    /// How long an operation waits for the gates it needs before failing with `Conflict`.
    pub gate_timeout: Duration,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            max_stage_batch: 10_000,
            max_metadata_bytes: 64 * 1024,
            max_list_page: 1_000,
            clock: Arc::new(SystemClock),
            intent_lease_ms: 60_000,
            faults: Arc::new(NoFaults),
            progress: Arc::new(NoProgress),
            gate_timeout: Duration::from_secs(30),
        }
    }
}

/// What this host implements, before intersecting with a backend.
pub fn host_capabilities() -> Capabilities {
    Capabilities::new([
        STAGE_UPSERT,
        STAGE_CREATE_ONLY,
        PUBLISH_CHECKPOINT,
        PUBLISH_TOKEN,
        PUBLISH_FENCING_EPOCH,
        crate::catalog::SETTLE_ATOMIC,
    ])
}

/// A catalog, its split objects and the policy that decides for them.
#[derive(Debug, Clone)]
pub struct Engine {
    catalog: Arc<dyn Catalog>,
    objects: SplitObjects,
    /// Serialise the writers and recoverers of a dataset's catalog state; see [`Engine::with_gates`].
    gates: Arc<dyn Gates>,
    /// The active policy, shared by every clone of this engine and swapped at runtime.
    policies: Arc<ActivePolicy>,
    /// The policy an operation in progress decides with: set by [`Engine::pinned`], so that
    /// an operation keeps the policy it started with across a swap.
    pinned: Option<PolicyRuntime>,
    capabilities: Capabilities,
    options: EngineOptions,
    /// What this process uploaded for operations in flight, shared by every clone.
    uploaded: Arc<uploaded::UploadedObjects>,
    /// The gates the operation running on this clone holds ([`Engine::under_gates`]), checked
    /// before each of its durable writes; empty outside gated work.
    holds: Holds,
    /// Who this clone acts for ([`Engine::acting_as`]), named in the audit records it writes.
    actor: Option<Arc<str>>,
}

impl Engine {
    /// Refuses a policy that requires a capability the host and backend do not both provide.
    pub fn new(
        catalog: Arc<dyn Catalog>,
        objects: SplitObjects,
        policy: PolicyRuntime,
        options: EngineOptions,
    ) -> Result<Self> {
        let capabilities = host_capabilities().intersection(&catalog.capabilities());
        check_capabilities(&policy, &capabilities, catalog.as_ref())?;
        Ok(Self {
            catalog,
            objects,
            gates: Arc::new(InProcessGates::new()),
            policies: Arc::new(ActivePolicy::new(policy)),
            pinned: None,
            capabilities,
            options,
            uploaded: Arc::default(),
            holds: Holds::default(),
            actor: None,
        })
    }

    /// A clone of this engine acting for `principal`: every audit record it writes names it.
    /// A server makes one per request (the request's principal) and per supervisor
    /// (`supervisor@REPLICA`); the CLI acts as `cli`.
    pub fn acting_as(&self, principal: &str) -> Engine {
        let mut engine = self.clone();
        engine.actor = Some(Arc::from(principal));
        engine
    }

    /// Who this engine acts for, if anyone named it.
    pub fn actor(&self) -> Option<&str> {
        self.actor.as_deref()
    }

    /// The same engine deciding with the policy active now until it is dropped, whatever is
    /// swapped meanwhile. Every operation that asks the policy more than once, or audits what
    /// it asked, runs on a pinned engine.
    pub fn pinned(&self) -> Engine {
        let mut engine = self.clone();
        engine.pinned = Some(self.policy());
        engine
    }

    /// Refuses a candidate policy this engine could not run: one requiring a capability the
    /// host and backend do not both provide.
    pub fn check_policy(&self, candidate: &PolicyRuntime) -> Result<()> {
        check_capabilities(candidate, &self.capabilities, self.catalog.as_ref())
    }

    /// The active policy and the one before it, swapped by [`Engine::publish_policy_swap`] and
    /// [`Engine::rollback_policy`].
    pub fn active_policy(&self) -> &Arc<ActivePolicy> {
        &self.policies
    }

    /// The same engine with another fault seam: tests crash operations with it.
    pub fn with_faults(&self, faults: Arc<dyn Faults>) -> Engine {
        let mut engine = self.clone();
        engine.options.faults = faults;
        engine
    }

    /// The same engine leasing the intents it writes for `lease_ms`: until an intent's lease
    /// runs out, recovery outside exclusive mode defers to its owner. A lease of 0 lets the
    /// next roll-forward sweep finish an operation at once, as for a writer known to be dead
    /// (`mend demo`'s crashed writers).
    pub fn with_intent_lease(&self, lease_ms: i64) -> Engine {
        let mut engine = self.clone();
        engine.options.intent_lease_ms = lease_ms;
        engine
    }

    /// The same engine taking its gates from `gates`. An engine starts with gates of its own
    /// process ([`InProcessGates`]); engines in several processes sharing a catalog need gates
    /// that reach across them ([`crate::gates::open_gates`]).
    ///
    /// Which operation takes which gate:
    ///
    /// | operation                       | gates                                              |
    /// |---------------------------------|----------------------------------------------------|
    /// | commit, merge, stage, publish   | none: fenced instead (publish token, fencing epoch) |
    /// | gc, reconcile                   | the dataset gate                                   |
    /// | config apply                    | the config gate                                    |
    /// | recovery, roll-forward          | the dataset gate                                   |
    /// | recovery, exclusive             | the exclusive permit: config and dataset gates, then the fencing epoch bumped |
    /// | recovery, probe and verify      | none: they write nothing, not even a lease          |
    ///
    /// Gated work checks that its gates are still held before each of its durable writes: one
    /// whose object-store lease was lost (its renewals could not land, or another process took
    /// the gate over) stops there with `Conflict`, leaving its intent to recovery.
    pub fn with_gates(&self, gates: Arc<dyn Gates>) -> Engine {
        let mut engine = self.clone();
        engine.gates = gates;
        engine
    }

    /// The same engine waiting at most `timeout` for its gates.
    pub fn with_gate_timeout(&self, timeout: Duration) -> Engine {
        let mut engine = self.clone();
        engine.options.gate_timeout = timeout;
        engine
    }

    /// The gates operations take (in-process unless [`with_gates`](Self::with_gates) set others).
    pub fn gates(&self) -> &Arc<dyn Gates> {
        &self.gates
    }

    /// Takes `names` for one operation, waiting at most the engine's gate timeout.
    async fn take_gates(&self, names: impl IntoIterator<Item = GateName>) -> Result<HeldGates> {
        self.gates
            .acquire(
                &GateSession::new(),
                &GateSet::new(names),
                self.options.gate_timeout,
            )
            .await
    }

    /// Runs `operation` holding `names`, and releases them after. The operation runs on a
    /// clone of this engine that checks the gates are still held before each durable write
    /// (`durably`), so that work whose lease was lost (object-store gates: renewals failed, or
    /// another process took the gate over) stops with `Conflict` before its next write.
    async fn under_gates<T, Operation, Running>(
        &self,
        names: impl IntoIterator<Item = GateName>,
        operation: Operation,
    ) -> Result<T>
    where
        Operation: FnOnce(Engine) -> Running,
        Running: std::future::Future<Output = Result<T>>,
    {
        let held = self.take_gates(names).await?;
        let result = operation(self.holding(held.holds())).await;
        // A release that fails still ends the hold (the connection closes or the lease runs
        // out); the operation's own result is what the caller needs.
        let _ = held.release().await;
        result
    }

    /// The same engine checking `holds` before each durable write.
    fn holding(&self, holds: Holds) -> Engine {
        let mut engine = self.clone();
        engine.holds = holds;
        engine
    }

    /// `Ok` while every gate the running operation holds is still held; `Conflict` naming
    /// the gate and its epoch once one is lost. A check, not a fence: a write that starts
    /// right after it can still land after the lease ran out, and the catalog's fencing (the
    /// publish token, the dataset's fencing epoch) is what refuses a stale publish there.
    fn check_held(&self) -> Result<()> {
        self.holds.check()
    }

    /// The same engine reporting the progress of long runs to `progress`.
    pub fn with_progress(&self, progress: Arc<dyn Progress>) -> Engine {
        let mut engine = self.clone();
        engine.options.progress = progress;
        engine
    }

    /// The catalog backend.
    pub fn catalog(&self) -> &Arc<dyn Catalog> {
        &self.catalog
    }

    /// The split objects.
    pub fn objects(&self) -> &SplitObjects {
        &self.objects
    }

    /// The policy this engine decides with: the pinned one, or else the active one.
    pub fn policy(&self) -> PolicyRuntime {
        match &self.pinned {
            Some(policy) => policy.clone(),
            None => self.policies.current(),
        }
    }

    /// What the host and backend both provide; requests needing anything else are refused.
    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// Now, by the engine's clock (its options' clock): what records it writes are dated by.
    pub fn now_ms(&self) -> i64 {
        self.options.clock.now_ms()
    }

    fn require(&self, capability: &str, why: &str) -> Result<()> {
        if self.capabilities.contains(capability) {
            return Ok(());
        }
        Err(MendError::CapabilityMissing {
            capability: capability.to_string(),
            detail: format!(
                "{why}, but {} provides only [{}]; the request was not executed",
                self.catalog.describe(),
                self.capabilities
            ),
        })
    }

    /// Creates a dataset with `config`, under a new incarnation uid; `AlreadyExists` if the id is taken.
    pub async fn create_dataset(
        &self,
        dataset_id: &str,
        config: &DatasetConfig,
    ) -> Result<Dataset> {
        self.create_dataset_keyed(dataset_id, config, None).await
    }

    /// Creates the dataset under a fresh uid; with `key`, its record lives in the new dataset
    /// and a retry of a creation that landed answers it ([`Catalog::create_dataset`]).
    #[tracing::instrument(
        name = "create_dataset",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id)
    )]
    async fn create_dataset_keyed(
        &self,
        dataset_id: &str,
        config: &DatasetConfig,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        validate::dataset_id(dataset_id)?;
        validate::config(config)?;
        let uid = crate::ambient::uuid_v4().to_string();
        self.catalog
            .create_dataset(dataset_id, &uid, config, self.now_ms(), key)
            .await
    }

    /// Every dataset, sorted by id; fails whole if one cannot be read (see [`each_dataset`](Self::each_dataset)).
    pub async fn datasets(&self) -> Result<Vec<Dataset>> {
        self.catalog.list_datasets().await
    }

    /// Every dataset, each read on its own: one whose state cannot be read is listed with
    /// its error instead of failing the whole listing, so one damaged dataset does not hide
    /// the others.
    pub async fn each_dataset(&self) -> Result<Vec<(String, Result<Dataset>)>> {
        let ids = self.catalog.list_dataset_ids().await?;
        let read: Vec<(String, Result<Dataset>)> = futures::stream::iter(ids)
            .map(|id| async move {
                let dataset = self.catalog.dataset(&id).await;
                (id, dataset)
            })
            .buffered(8)
            .collect()
            .await;
        Ok(read
            .into_iter()
            .filter(|(_, dataset)| !matches!(dataset, Err(MendError::NotFound { .. })))
            .collect())
    }

    /// One dataset; `NotFound` if it does not exist.
    pub async fn dataset(&self, dataset_id: &str) -> Result<Dataset> {
        validate::dataset_id(dataset_id)?;
        self.catalog.dataset(dataset_id).await
    }

    /// Replaces the config in one conditional write if it is still at `expected_config_version`; no intent (see [`apply_config`](Self::apply_config), which writes one).
    pub async fn update_config(
        &self,
        dataset_id: &str,
        expected_config_version: u64,
        config: &DatasetConfig,
    ) -> Result<Dataset> {
        validate::dataset_id(dataset_id)?;
        validate::config(config)?;
        self.catalog
            .update_config(
                dataset_id,
                expected_config_version,
                config,
                self.now_ms(),
                None,
            )
            .await
    }

    /// Sets the token every later publish must present (`None` removes it): fencing a dataset's writers.
    pub async fn set_publish_token(
        &self,
        dataset_id: &str,
        publish_token: Option<&str>,
    ) -> Result<Dataset> {
        self.set_publish_token_keyed(dataset_id, publish_token, None)
            .await
    }

    #[tracing::instrument(
        name = "set_publish_token",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id)
    )]
    async fn set_publish_token_keyed(
        &self,
        dataset_id: &str,
        publish_token: Option<&str>,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        validate::dataset_id(dataset_id)?;
        self.require(PUBLISH_TOKEN, "setting a publish token needs fencing")?;
        if let Some(token) = publish_token {
            validate::name("publish token", token)?;
        }
        self.catalog
            .set_publish_token(dataset_id, publish_token, self.now_ms(), key)
            .await
    }

    /// Moves the dataset's fencing epoch on by one: from now on a publish carrying an older
    /// epoch is refused. Returns the dataset after.
    #[tracing::instrument(skip_all, err(level = "debug"), fields(dataset_id = %dataset_id))]
    pub async fn advance_fencing_epoch(&self, dataset_id: &str) -> Result<Dataset> {
        validate::dataset_id(dataset_id)?;
        self.catalog
            .advance_fencing_epoch(dataset_id, self.now_ms())
            .await
    }

    /// Stages splits in the request's mode. The result names, per distinct id, what actually
    /// happened at write time: in create-only mode `Inserted` is the claim on the row.
    pub async fn stage(&self, request: &StageRequest) -> Result<StageResult> {
        self.stage_keyed(request, None).await
    }

    #[tracing::instrument(
        name = "stage",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %request.dataset_id, mode = ?request.mode)
    )]
    async fn stage_keyed(
        &self,
        request: &StageRequest,
        key: Option<&RequestKey>,
    ) -> Result<StageResult> {
        let (distinct, planner) = self.stage_planner(request)?;
        let now_ms = self.now_ms();
        let splits: Vec<StagedSplit> = match self.recorded_answer(&request.dataset_id, key).await? {
            Some(answer) => answer,
            None => {
                self.catalog
                    .stage(
                        &request.dataset_id,
                        request.mode,
                        &distinct,
                        &planner,
                        now_ms,
                        key,
                    )
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
    /// backend stages (one per id, sorted, [`catalog::distinct_splits`]) and the planner it calls with the rows it finds: the
    /// policy plans, the invariants check the plan.
    fn stage_planner(
        &self,
        request: &StageRequest,
    ) -> Result<(Vec<Arc<NewSplit>>, impl Planner + use<>)> {
        let requested = validate::stage_request(request, self.stage_limits())?;
        match request.mode {
            StageMode::CreateOnly => self.require(
                STAGE_CREATE_ONLY,
                "a create-only stage must never run as an upsert",
            )?,
            StageMode::Upsert => self.require(STAGE_UPSERT, "an upsert stage needs upsert")?,
        }
        let distinct = catalog::distinct_splits(request.mode, &requested);
        let split_ids: Vec<String> = distinct.iter().map(|s| s.split_id.clone()).collect();
        let request_ids: Vec<String> = requested.iter().map(|s| s.split_id.clone()).collect();
        let policy = self.policy();
        let (dataset_id, mode) = (request.dataset_id.clone(), request.mode);
        let planner = move |existing: &[ExistingRow]| -> Result<StagePlan> {
            let planned = policy.plan_stage_of(&dataset_id, mode, &request_ids, existing)?;
            invariants::checked_stage_plan(mode, &requested, &split_ids, existing, planned)
        };
        Ok((distinct, planner))
    }

    /// Publishes staged splits, marks replaced ones and applies the checkpoint delta, all at
    /// once or not at all.
    pub async fn publish(&self, request: &PublishRequest) -> Result<PublishResult> {
        self.publish_keyed(request, None).await
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
    ) -> Result<PublishResult> {
        self.check_publish(request)?;
        if let Some(answer) = self.recorded_answer(&request.dataset_id, key).await? {
            return Ok(answer);
        }
        self.check_objects_exist(request).await?;
        let validator = self.publish_validator(request);
        self.catalog
            .publish(request, &validator, self.now_ms(), key)
            .await
    }

    /// Publishes the publish an operation's intent plans, recorded under the operation's
    /// `key`, and deletes the intent, in one atomic step that holds only while the intent is
    /// there and not fenced ([`Catalog::publish_commit`]): an abort, an abandonment or an
    /// exclusive roll-back that fenced it first wins. Every object is looked for first
    /// (invariant 1), unless the caller has just read every one of them.
    async fn publish_settling(
        &self,
        intent: &crate::intent::Intent,
        request: &PublishRequest,
        key: &RequestKey,
        objects: ObjectCheck,
    ) -> Result<PublishResult> {
        self.check_publish(request)?;
        if let Some(answer) = self.recorded_answer(&request.dataset_id, Some(key)).await? {
            self.finish_intent(&intent.dataset_id, &intent.operation_id)
                .await?;
            return Ok(answer);
        }
        if objects == ObjectCheck::LookForEach {
            self.check_objects_exist(request).await?;
        }
        let validator = self.publish_validator(request);
        self.catalog
            .publish_commit(intent, request, &validator, self.now_ms(), key)
            .await
    }

    /// Refuses a publish request that is malformed, or that needs a capability this engine
    /// lacks.
    fn check_publish(&self, request: &PublishRequest) -> Result<()> {
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
    fn publish_validator<'a>(
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
    pub async fn mark_for_deletion(
        &self,
        dataset_id: &str,
        split_ids: &[String],
    ) -> Result<MarkResult> {
        self.mark_for_deletion_keyed(dataset_id, split_ids, None)
            .await
    }

    #[tracing::instrument(
        name = "mark",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id)
    )]
    async fn mark_for_deletion_keyed(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        key: Option<&RequestKey>,
    ) -> Result<MarkResult> {
        validate::split_id_list(dataset_id, split_ids, self.options.max_stage_batch)?;
        self.catalog
            .mark_for_deletion(dataset_id, split_ids, self.now_ms(), key)
            .await
    }

    /// Deletes splits marked for deletion: their objects first, then their rows, so that a
    /// crash in between leaves a marked row whose delete can simply be repeated.
    pub async fn delete_splits(&self, dataset_id: &str, split_ids: &[String]) -> Result<()> {
        self.delete_splits_keyed(dataset_id, split_ids, None).await
    }

    /// [`delete_splits`](Self::delete_splits), its result recorded under `key` with the rows'
    /// delete; a recorded key answers before anything is read.
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
    /// [`EngineOptions::max_list_page`] when it names none; `next_after_split_id` continues.
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

/// What a stage hands its backend to plan with ([`crate::catalog::StagePlanner`]).
trait Planner: Fn(&[ExistingRow]) -> Result<StagePlan> + Send + Sync {}

impl<F: Fn(&[ExistingRow]) -> Result<StagePlan> + Send + Sync> Planner for F {}

/// Refuses `policy` if it requires a capability not in `capabilities`.
fn check_capabilities(
    policy: &PolicyRuntime,
    capabilities: &Capabilities,
    catalog: &dyn Catalog,
) -> Result<()> {
    for required in &policy.description().required_capabilities {
        if !capabilities.contains(required) {
            return Err(MendError::CapabilityMissing {
                capability: required.clone(),
                detail: format!(
                    "policy {} {} ({}) requires it, but {} provides only [{capabilities}]",
                    policy.description().name,
                    policy.description().version,
                    policy.digest(),
                    catalog.describe()
                ),
            });
        }
    }
    Ok(())
}

/// What the policy sees of a publish: the request and the observation, in WIT's shapes.
fn publish_input(request: &PublishRequest, observation: &PublishObservation) -> PublishInput {
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
    use crate::catalog::ObjectStoreCatalog;
    use crate::model::StageSplit;

    /// Engine operations must be spawnable: a server runs them on tasks.
    #[allow(dead_code)]
    fn operations_are_send(engine: Engine) {
        fn spawnable<T: Send>(_: T) {}
        spawnable(async move {
            let _ = engine
                .recover("ds", mend_policy::RecoveryMode::RollForward)
                .await;
            let _ = engine.reconcile("ds", "n").await;
            let _ = engine.gc("ds", "n").await;
            let _ = engine
                .apply_config("ds", 1, &DatasetConfig::default(), "n")
                .await;
        });
    }

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

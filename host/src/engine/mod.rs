//! The engine: the one place that talks both to the policy and to the storage.
//!
//! Each request goes through the same steps: validate the input (`InvalidArgument`, nothing
//! read), check that the backend provides what the request needs (`CapabilityMissing`, never
//! a fallback), let the backend observe inside its atomic step, ask the policy, check its
//! answer against the [`invariants`](crate::invariants), and have the backend execute it.
//!
//! One module per operation, each owning its whole entry point: `datasets.rs`, `staging.rs`
//! (stage, publish, mark, delete, list), `commit.rs` (the in-process commit and merge),
//! `operation/` (the same commit a step at a time, for a writer in another process),
//! `recovery/` (the sweep and its settling), `reconcile.rs`, `gc.rs`, `config_apply.rs`,
//! `policy_swap.rs`, `verify.rs`. A mutating call answers a [`Keyed`] request, which carries
//! the idempotency key (`keyed.rs`); what the operations that write intents share (their
//! steps' keys, what a commit expects) is `steps.rs`.
//!
//! Operations with several durable effects (a commit) write an intent first and go through
//! the fault seam at every durable step (`commit.rs`); `recovery/` resolves what crashed
//! operations leave behind.

mod audit_trail;
mod commit;
mod config_apply;
mod datasets;
mod gc;
mod keyed;
mod operation;
mod policy_swap;
mod reconcile;
mod recovery;
mod staging;
mod steps;
mod verify;

pub use audit_trail::{AuditCursor, AuditPage, AuditQuery, MAX_AUDIT_SCAN};
pub use commit::{CommitRequest, CommitResult, CommitSplit, MergeRequest};
pub use config_apply::ConfigEdit;
pub use gc::{GcResult, RECORDED_REQUEST_RETENTION_MS};
pub use keyed::Keyed;
pub use operation::{
    BeginOperation, ExternalKind, ObjectStatus, ObjectToPut, ObjectUploadUrl, OperationLedger,
    OperationPhase, OperationSplit, OperationView, PlannedSplit, SINGLE_PUT_BYTES, UploadResult,
};
pub use policy_swap::{DeploymentSwap, PreparedSwap, SwapPreview};
pub use reconcile::ReconcileReport;
pub use recovery::{GatedSweep, IntentReport, IntentStatus, Outcome, RecoveryReport};
pub use verify::{VerifyReport, Violation};

use std::sync::Arc;
use std::time::Duration;

use mend_contract::capability::{
    PUBLISH_CHECKPOINT, PUBLISH_FENCING_EPOCH, PUBLISH_TOKEN, STAGE_CREATE_ONLY,
    STAGE_STANDARD_PLANS, STAGE_UPSERT,
};

use crate::background::BackgroundTasks;
use crate::catalog::{Capabilities, Catalog};
use crate::clock::{Clock, SystemClock};
use crate::error::{MendError, Result};
use crate::faults::{Faults, NoFaults};
use crate::gates::{GateName, GateSession, GateSet, Gates, HeldGates, Holds, InProcessGates};
use crate::objects::SplitObjects;
use crate::progress::{NoProgress, Progress};
use crate::runtime::{ActivePolicy, PolicyRuntime};

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
        crate::catalog::write_audit::WRITE_AUDIT,
    ])
}

/// What this host provides over any backend, needing nothing of it: the standard stage plans
/// (ABI 1.4) are staged with every backend's `stage`, through `Catalog::stage_standard`.
pub const HOST_ONLY_CAPABILITIES: &[&str] = &[STAGE_STANDARD_PLANS];

/// What an engine over a backend providing `backend` provides: what both the host and the
/// backend provide, and what the host provides alone.
pub fn engine_capabilities(backend: &Capabilities) -> Capabilities {
    HOST_ONLY_CAPABILITIES.iter().fold(
        host_capabilities().intersection(backend),
        |capabilities, name| capabilities.with(name),
    )
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
    uploaded: Arc<operation::uploaded::UploadedObjects>,
    /// The clean-ups of ended operations still running after their answer, shared by every
    /// clone ([`Engine::wait_for_cleanups`]).
    cleanups: BackgroundTasks,
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
        let capabilities = engine_capabilities(&catalog.capabilities());
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
            cleanups: BackgroundTasks::default(),
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

    /// Waits until the clean-ups that ended operations left running after their answer are
    /// done: deleting the objects an aborted operation wrote, then its marked rows. Each is
    /// best effort (garbage collection deletes what one leaves); a test that checks the
    /// store after an abort, a bench that counts its requests, or a server shutting down
    /// waits here first.
    pub async fn wait_for_cleanups(&self) {
        self.cleanups.idle().await;
    }

    /// Stops the clean-ups still running where they are, and starts no more: what they
    /// leave, garbage collection deletes. A simulation crashes a process's engine so.
    pub fn stop_cleanups(&self) {
        self.cleanups.stop();
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
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DatasetConfig;

    /// Engine operations must be spawnable: a server runs them on tasks.
    #[allow(dead_code)]
    fn operations_are_send(engine: Engine) {
        fn spawnable<T: Send>(_: T) {}
        spawnable(async move {
            let _ = engine
                .recover("ds", mend_contract::RecoveryMode::RollForward)
                .idempotency_key("k")
                .await;
            let _ = engine.reconcile("ds", "n").await;
            let _ = engine.gc("ds", "n").await;
            let _ = engine
                .apply_config("ds", 1, &DatasetConfig::default(), "n")
                .await;
        });
    }
}

//! The policy runtime: loads a policy component once and calls it, one sandbox per decision.
//!
//! Loading checks, in order, that the bytes compile as a component, that the component is
//! built against a contract this host runs (1.5, or an older 1.x, which it asks that
//! contract's way: `compat::Calls`) and
//! imports nothing outside [`ALLOWED_IMPORTS`] (the contract's types: a policy gets no WASI at
//! all), that every export it must have has the type of that contract, and that `describe()`
//! agrees with that contract and reports an ABI and semantics revision this host implements
//! (`compat`). A call
//! instantiates the pre-linked component in a fresh store with a memory limit and an epoch
//! deadline; a trap, an exhausted limit or an oversized answer becomes a [`PolicyError`] for
//! that call alone, and the runtime keeps serving.
//!
//! CPU is bounded by epochs rather than fuel: an epoch check costs a load and a compare where
//! fuel accounting costs arithmetic on every block (measured: fuel made a 1,000-split plan 70%
//! slower). The price is that the bound is in wall-clock ticks, not instructions; decisions
//! stay deterministic, only the point at which a runaway policy is stopped varies.
//!
//! The capabilities a policy requires are checked by the engine, which knows what its
//! backend provides.

mod active;
mod bindings;
pub mod cache;
mod compat;
mod older_recovery;
pub mod registry;
pub mod replay;
mod sandbox;
pub(crate) mod shape;
pub mod stats;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use mend_contract::{
    ExistingRow, GcInput, GcPlan, IntentDecision, PlannedSplit, PolicyDescription, PublishInput,
    PublishViolation, ReconcileDecision, ReconcileInput, RecoveryInput, StageMode, StagePlanInput,
};
use sha2::{Digest, Sha256};
use wasmtime::component::{
    Component, ComponentExportIndex, ComponentNamedList, ComponentType, Instance, InstancePre,
    Lift, Linker, Lower,
};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};

use crate::error::PolicyError;
use crate::invariants::IndexedDecision;

pub use active::{ActivePolicy, Swapped};
pub use compat::{
    ALLOWED_IMPORTS, CONTRACT_1_1_TYPES_IMPORT, CONTRACT_1_2_TYPES_IMPORT,
    CONTRACT_1_3_TYPES_IMPORT, CONTRACT_TYPES_IMPORT, HOST_ABI_MAJOR, HOST_ABI_MINOR, HostAbi,
    KNOWN_SEMANTICS_REVISIONS, RUNNABLE_CONTRACT_IMPORTS,
};
pub use sandbox::{CONCURRENT_DECISIONS, PolicyLimits};
pub use shape::ComponentShape;

use self::bindings::{v1_3, v1_4, wit};
use self::compat::Calls;
use self::sandbox::{SandboxState, Sandboxes};

/// The default policy component, built from `guest/` by the build script.
pub const DEFAULT_POLICY_WASM: &[u8] = include_bytes!(env!("MEND_DEFAULT_POLICY_WASM"));

/// The example second policy `mend demo` swaps to, built from `policies/cautious/` by the
/// build script: the default policy's decisions, except that reconcile discards every orphan
/// instead of adopting it.
pub const CAUTIOUS_POLICY_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_CAUTIOUS_WASM"));

/// How often the engine's epoch advances; the unit of [`PolicyLimits::cpu_time_per_call`].
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// How a policy is loaded.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// The limits of each of its decisions.
    pub limits: PolicyLimits,
    /// Where compiled components are kept across processes, by digest and engine
    /// compatibility; `None` keeps them in this process only.
    pub cache_dir: Option<std::path::PathBuf>,
    /// What the policy is checked against: the default is this host; tests play others.
    pub host: HostAbi,
}

/// A loaded, checked policy, ready to decide. Cheap to clone and share between tasks.
#[derive(Clone)]
pub struct PolicyRuntime {
    inner: Arc<Loaded>,
}

struct Loaded {
    engine: Engine,
    pre: InstancePre<SandboxState>,
    /// How it is asked: the calls of the contract it is built against.
    calls: Calls,
    exports: Exports,
    digest: String,
    description: PolicyDescription,
    shape: ComponentShape,
    limits: PolicyLimits,
    /// Calls made into this loaded policy, `describe` at load included.
    calls_made: AtomicU64,
}

impl fmt::Debug for PolicyRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyRuntime")
            .field("digest", &self.inner.digest)
            .field("name", &self.inner.description.name)
            .field("version", &self.inner.description.version)
            .finish_non_exhaustive()
    }
}

impl PolicyRuntime {
    /// Loads the policy that ships with this host.
    pub fn default_policy() -> Result<Self, PolicyError> {
        Self::load(DEFAULT_POLICY_WASM, PolicyLimits::default())
    }

    /// Checks what one instantiation of `bytes` needs against `limits`, compiles (or reuses
    /// the compiled form of) it, checks its imports and its `describe()`, and returns it ready
    /// to call.
    pub fn load(bytes: &[u8], limits: PolicyLimits) -> Result<Self, PolicyError> {
        Self::load_with(
            bytes,
            &LoadOptions {
                limits,
                ..LoadOptions::default()
            },
        )
    }

    /// [`PolicyRuntime::load`] with every option.
    pub fn load_with(bytes: &[u8], options: &LoadOptions) -> Result<Self, PolicyError> {
        let limits = options.limits;
        // The shape is read from the bytes before compiling: a component over the sandbox is
        // refused without paying for its compilation, and always by this check, naming the
        // setting, never by the pool's own check at compile time (the pool is sized for the
        // settings' largest values, so nothing this check lets through exceeds it).
        let shape = ComponentShape::of(bytes).map_err(|error| PolicyError::Compile {
            message: error.to_string(),
        })?;
        check_shape(&shape, &limits)?;
        let engine = shared_engine()?;
        let digest = digest_of(bytes);
        let component = compiled(engine, &digest, bytes, options.cache_dir.as_deref())?;

        let (built_against, calls) = compat::check_imports(engine, &component, &options.host)?;

        let linker = Linker::<SandboxState>::new(engine);
        let pre =
            linker
                .instantiate_pre(&component)
                .map_err(|error| PolicyError::Incompatible {
                    reason: format!("{error:#}"),
                })?;

        let exports = Exports::of(&component, calls)?;
        let mut runtime = Loaded {
            engine: engine.clone(),
            pre,
            calls,
            exports,
            digest,
            description: PolicyDescription {
                name: String::new(),
                version: String::new(),
                abi_major: 0,
                abi_minor: 0,
                semantics_revision: 0,
                required_capabilities: Vec::new(),
            },
            shape,
            limits,
            calls_made: AtomicU64::new(0),
        };
        let description = runtime.describe_checking_exports()?;
        compat::check_description(&description, &built_against, &options.host)?;
        runtime.description = description;
        Ok(Self {
            inner: Arc::new(runtime),
        })
    }

    /// `sha256:<hex>` of the component's bytes: the name audit rows and operators use.
    pub fn digest(&self) -> &str {
        &self.inner.digest
    }

    /// What the policy's `describe()` said: name, version, ABI, semantics revision, capabilities.
    pub fn description(&self) -> &PolicyDescription {
        &self.inner.description
    }

    /// What one instantiation of the component creates: core instances, memories, tables.
    pub fn shape(&self) -> &ComponentShape {
        &self.inner.shape
    }

    /// The limits each decision runs under.
    pub fn limits(&self) -> &PolicyLimits {
        &self.inner.limits
    }

    /// How many calls this loaded policy has been asked, `describe()` at load included:
    /// shows, for one, that a policy declaring `stage.standard-plans` is not asked to plan.
    pub fn calls_made(&self) -> u64 {
        self.inner.calls_made.load(Ordering::Relaxed)
    }

    /// One decision per distinct split id of the request.
    pub fn plan_stage(&self, input: &StagePlanInput) -> Result<Vec<PlannedSplit>, PolicyError> {
        self.plan_stage_of(
            &input.dataset_id,
            input.mode,
            &input.split_ids,
            &input.existing,
        )
    }

    /// [`Self::plan_stage`] on the input's parts, borrowed: the engine asks on every stage
    /// batch, and this spares it a copy of every id before the one into the sandbox.
    pub fn plan_stage_of(
        &self,
        dataset_id: &str,
        mode: StageMode,
        split_ids: &[String],
        existing: &[ExistingRow],
    ) -> Result<Vec<PlannedSplit>, PolicyError> {
        Ok(self
            .plan_stage_by_index(dataset_id, mode, split_ids, existing)?
            .into_iter()
            .map(|decision| PlannedSplit {
                split_id: split_ids[decision.request_index as usize].clone(),
                request_index: decision.request_index,
                action: decision.action,
            })
            .collect())
    }

    /// One decision per distinct split id of the request, each naming its id by the request
    /// entry it takes (every index is one of `split_ids`'): as a 1.4 or 1.5 policy answers,
    /// with no id copied, for the engine's checks
    /// ([`crate::invariants::checked_stage_plan_by_index`]). A 1.5 policy is asked on the
    /// request's entries grouped by id, which the host sorts natively; a 1.4 one on the ids
    /// packed. A 1.3 policy's decisions name their ids; each must be the id at its index.
    pub fn plan_stage_by_index(
        &self,
        dataset_id: &str,
        mode: StageMode,
        split_ids: &[String],
        existing: &[ExistingRow],
    ) -> Result<Vec<IndexedDecision>, PolicyError> {
        let export = &self.inner.exports.plan_stage;
        match self.inner.calls {
            Calls::V1_5 => {
                let plan: wit::StagePlan = bindings::with_stage_plan_input(
                    dataset_id,
                    mode,
                    split_ids,
                    existing,
                    |input| self.inner.call_export("plan-stage", export, (input,)),
                )??;
                self.indexed_plan(plan, split_ids.len())
            }
            Calls::V1_4 => {
                let plan: v1_4::StagePlan =
                    v1_4::with_stage_plan_input(dataset_id, mode, split_ids, existing, |input| {
                        self.inner.call_export("plan-stage", export, (input,))
                    })??;
                self.indexed_plan(plan.into_codes(), split_ids.len())
            }
            // 1.1 to 1.3 ask a stage plan alike.
            Calls::V1_3 | Calls::V1_2 | Calls::V1_1 => {
                let planned: Vec<v1_3::PlannedSplit> = v1_3::with_stage_plan_input(
                    dataset_id,
                    mode,
                    split_ids,
                    existing,
                    |wit_input| self.inner.call_export("plan-stage", export, (wit_input,)),
                )?;
                let size = planned
                    .iter()
                    .map(|p| {
                        16 + p.split_id.len()
                            + match &p.action {
                                v1_3::StageAction::Reject(why) => why.len(),
                                _ => 0,
                            }
                    })
                    .sum();
                sandbox::check_output_size("plan-stage", size, &self.inner.limits)?;
                planned
                    .into_iter()
                    .map(|planned| v1_3::indexed_decision(planned, split_ids))
                    .collect()
            }
        }
    }

    /// A 1.4 or 1.5 stage plan, within the output limit, as decisions by index into a request
    /// of `entries` ([`bindings::stage_plan`] refuses a malformed one).
    fn indexed_plan(
        &self,
        plan: wit::StagePlan,
        entries: usize,
    ) -> Result<Vec<IndexedDecision>, PolicyError> {
        let size =
            5 * plan.actions.len() + plan.reasons.iter().map(|why| 8 + why.len()).sum::<usize>();
        sandbox::check_output_size("plan-stage", size, &self.inner.limits)?;
        bindings::stage_plan(plan, entries)
    }

    /// Every reason the publish must not happen; empty allows it.
    pub fn validate_publish(
        &self,
        input: &PublishInput,
    ) -> Result<Vec<PublishViolation>, PolicyError> {
        let mut answers = self.validate_publishes(std::slice::from_ref(input))?;
        Ok(answers.pop().unwrap_or_default())
    }

    /// For each publish of `inputs`, in order, every reason it must not happen: one call into
    /// the policy for the whole batch (ABI 1.4), or one per publish for an older policy. A policy
    /// answering another number of verdicts than it was asked for is refused as a whole.
    pub fn validate_publishes(
        &self,
        inputs: &[PublishInput],
    ) -> Result<Vec<Vec<PublishViolation>>, PolicyError> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        const FUNCTION: &str = "validate-publishes";
        let export = &self.inner.exports.validate;
        let answers: Vec<Vec<wit::PublishViolation>> = match self.inner.calls {
            Calls::V1_5 | Calls::V1_4 => bindings::with_publish_inputs(inputs, |wit_inputs| {
                self.inner.call_export(FUNCTION, export, (wit_inputs,))
            })?,
            Calls::V1_3 | Calls::V1_2 | Calls::V1_1 => inputs
                .iter()
                .map(|input| {
                    bindings::with_publish_input(input, |wit_input| {
                        self.inner
                            .call_export("validate-publish", export, (wit_input,))
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        let size = answers
            .iter()
            .flatten()
            .map(|v| 16 + v.message.len() + v.subjects.iter().map(String::len).sum::<usize>())
            .sum::<usize>()
            + 8 * answers.len();
        sandbox::check_output_size(FUNCTION, size, &self.inner.limits)?;
        if answers.len() != inputs.len() {
            return Err(PolicyError::Incompatible {
                reason: format!(
                    "{FUNCTION} answered {} verdicts for {} publishes",
                    answers.len(),
                    inputs.len()
                ),
            });
        }
        Ok(answers
            .into_iter()
            .map(|violations| {
                violations
                    .into_iter()
                    .map(bindings::publish_violation)
                    .collect()
            })
            .collect())
    }
}

impl PolicyRuntime {
    /// One decision per intent of a recovery sweep, in the input's order. A policy of an
    /// older contract is asked about the intents that contract can express; each other one
    /// is deferred, saying why (`older_recovery`).
    pub fn decide_recovery(
        &self,
        input: &RecoveryInput,
    ) -> Result<Vec<IntentDecision>, PolicyError> {
        const FUNCTION: &str = "decide-recovery";
        let export = &self.inner.exports.decide_recovery;
        let calls = self.inner.calls;
        if matches!(calls, Calls::V1_2 | Calls::V1_1) {
            let withheld: Vec<Option<String>> = input
                .intents
                .iter()
                .map(|intent| older_recovery::withheld(calls, intent))
                .collect();
            let asked: Vec<&mend_contract::IntentObservation> = input
                .intents
                .iter()
                .zip(&withheld)
                .filter(|(_, why)| why.is_none())
                .map(|(intent, _)| intent)
                .collect();
            let answered: Vec<older_recovery::IntentDecision> = if asked.is_empty() {
                Vec::new()
            } else if calls == Calls::V1_2 {
                older_recovery::with_input_1_2(input, &asked, |view| {
                    self.inner.call_export(FUNCTION, export, (view,))
                })?
            } else {
                older_recovery::with_input_1_1(input, &asked, |view| {
                    self.inner.call_export(FUNCTION, export, (view,))
                })?
            };
            let size = older_recovery::answer_size(&answered);
            sandbox::check_output_size(FUNCTION, size, &self.inner.limits)?;
            return older_recovery::merge(input, withheld, answered);
        }
        let decisions: Vec<wit::IntentDecision> =
            bindings::with_recovery_input(input, |wit_input| {
                self.inner.call_export(FUNCTION, export, (wit_input,))
            })?;
        let size = decisions
            .iter()
            .map(|d| {
                16 + d.operation_id.len()
                    + match &d.decision {
                        wit::RecoveryDecision::Defer(why) | wit::RecoveryDecision::Abandon(why) => {
                            why.len()
                        }
                        wit::RecoveryDecision::Blocked(reason) => {
                            reason.why.len() + reason.operator_action.len()
                        }
                        _ => 0,
                    }
            })
            .sum();
        sandbox::check_output_size(FUNCTION, size, &self.inner.limits)?;
        Ok(decisions
            .into_iter()
            .map(bindings::intent_decision)
            .collect())
    }
}

impl PolicyRuntime {
    /// One action per orphan object, in the input's order. A policy of contract 1.1 has no
    /// `plan-reconcile` (reconcile came with 1.2) and is refused, never decided for.
    pub fn plan_reconcile(
        &self,
        input: &ReconcileInput,
    ) -> Result<Vec<ReconcileDecision>, PolicyError> {
        let Some(export) = &self.inner.exports.plan_reconcile else {
            let description = self.description();
            return Err(PolicyError::Incompatible {
                reason: format!(
                    "policy {} {} is built against {}, which has no plan-reconcile: \
                     reconciling orphan objects needs a policy of contract 1.2 or newer",
                    description.name,
                    description.version,
                    self.inner.calls.contract()
                ),
            });
        };
        let decisions: Vec<wit::ReconcileDecision> =
            bindings::with_reconcile_input(input, |wit_input| {
                self.inner
                    .call_export("plan-reconcile", export, (wit_input,))
            })?;
        let size = decisions
            .iter()
            .map(|d| {
                16 + d.split_id.len()
                    + match &d.action {
                        wit::ReconcileAction::Discard(why) => why.len(),
                        wit::ReconcileAction::Adopt => 0,
                    }
            })
            .sum();
        sandbox::check_output_size("plan-reconcile", size, &self.inner.limits)?;
        Ok(decisions
            .into_iter()
            .map(bindings::reconcile_decision)
            .collect())
    }
}

impl PolicyRuntime {
    /// Which gc candidates to mark and which to delete. A policy of contract 1.1 or 1.2 has
    /// no `plan-gc` (it came with 1.3): its gc is planned by the grace-period rule the host of
    /// its contract ran, which 1.3 moved unchanged into the default policy.
    pub fn plan_gc(&self, input: &GcInput) -> Result<GcPlan, PolicyError> {
        let Some(export) = &self.inner.exports.plan_gc else {
            return Ok(mend_default_policy::plan_gc(input));
        };
        let plan: wit::GcPlan = bindings::with_gc_input(input, |wit_input| {
            self.inner.call_export("plan-gc", export, (wit_input,))
        })?;
        let size = plan
            .mark
            .iter()
            .chain(&plan.delete)
            .map(|id| 8 + id.len())
            .sum();
        sandbox::check_output_size("plan-gc", size, &self.inner.limits)?;
        Ok(bindings::gc_plan(plan))
    }
}

/// Where each decision function is among the component's exports, found once at load.
struct Exports {
    describe: ComponentExportIndex,
    plan_stage: ComponentExportIndex,
    /// `validate-publishes` (ABI 1.4) or `validate-publish` (older).
    validate: ComponentExportIndex,
    decide_recovery: ComponentExportIndex,
    /// From ABI 1.2 on.
    plan_reconcile: Option<ComponentExportIndex>,
    /// From ABI 1.3 on.
    plan_gc: Option<ComponentExportIndex>,
}

impl Exports {
    fn of(component: &Component, calls: Calls) -> Result<Self, PolicyError> {
        let index = |name: &str| {
            component
                .get_export_index(None, name)
                .ok_or_else(|| PolicyError::Incompatible {
                    reason: format!("the component does not export `{name}`"),
                })
        };
        Ok(Self {
            describe: index("describe")?,
            plan_stage: index("plan-stage")?,
            validate: index(if calls.validates_publish_batches() {
                "validate-publishes"
            } else {
                "validate-publish"
            })?,
            decide_recovery: index("decide-recovery")?,
            plan_reconcile: calls
                .has_plan_reconcile()
                .then(|| index("plan-reconcile"))
                .transpose()?,
            plan_gc: calls.has_plan_gc().then(|| index("plan-gc")).transpose()?,
        })
    }

    /// Whether every export has the type the calls of `calls` give it: the type of each is
    /// checked here, once, so that a call checks only its own function.
    fn check_types(
        &self,
        instance: &Instance,
        store: &mut Store<SandboxState>,
        calls: Calls,
    ) -> wasmtime::Result<()> {
        instance.get_typed_func::<(), (wit::PolicyDescription,)>(&mut *store, &self.describe)?;
        match calls {
            Calls::V1_5 => {
                instance.get_typed_func::<(&wit::StagePlanInput<'static>,), (wit::StagePlan,)>(
                    &mut *store,
                    &self.plan_stage,
                )?;
            }
            Calls::V1_4 => {
                instance.get_typed_func::<(&v1_4::StagePlanInput<'static>,), (v1_4::StagePlan,)>(
                    &mut *store,
                    &self.plan_stage,
                )?;
            }
            Calls::V1_3 | Calls::V1_2 | Calls::V1_1 => {
                instance.get_typed_func::<
                    (&v1_3::StagePlanInput<'static>,),
                    (Vec<v1_3::PlannedSplit>,),
                >(&mut *store, &self.plan_stage)?;
            }
        }
        if calls.validates_publish_batches() {
            instance.get_typed_func::<
                (&[wit::PublishInput<'static>],),
                (Vec<Vec<wit::PublishViolation>>,),
            >(&mut *store, &self.validate)?;
        } else {
            instance
                .get_typed_func::<(&wit::PublishInput<'static>,), (Vec<wit::PublishViolation>,)>(
                    &mut *store,
                    &self.validate,
                )?;
        }
        match calls {
            Calls::V1_5 | Calls::V1_4 | Calls::V1_3 => {
                instance
                    .get_typed_func::<(&wit::RecoveryInput<'static>,), (Vec<wit::IntentDecision>,)>(
                        &mut *store,
                        &self.decide_recovery,
                    )?;
            }
            Calls::V1_2 => {
                instance.get_typed_func::<
                    (&older_recovery::RecoveryInput1_2<'static>,),
                    (Vec<older_recovery::IntentDecision>,),
                >(&mut *store, &self.decide_recovery)?;
            }
            Calls::V1_1 => {
                instance.get_typed_func::<
                    (&older_recovery::RecoveryInput1_1<'static>,),
                    (Vec<older_recovery::IntentDecision>,),
                >(&mut *store, &self.decide_recovery)?;
            }
        }
        if let Some(plan_reconcile) = &self.plan_reconcile {
            instance
                .get_typed_func::<(&wit::ReconcileInput<'static>,), (Vec<wit::ReconcileDecision>,)>(
                    &mut *store,
                    plan_reconcile,
                )?;
        }
        if let Some(plan_gc) = &self.plan_gc {
            instance.get_typed_func::<(&wit::GcInput<'static>,), (wit::GcPlan,)>(
                &mut *store,
                plan_gc,
            )?;
        }
        Ok(())
    }
}

impl Loaded {
    /// Instantiates the component in a fresh sandbox and calls the one function at `export`
    /// with `params`. Only that function's type is checked against the contract here: every
    /// export's type was checked once, when the policy was loaded
    /// ([`Loaded::describe_checking_exports`]).
    fn call_export<P, O>(
        &self,
        function: &'static str,
        export: &ComponentExportIndex,
        params: P,
    ) -> Result<O, PolicyError>
    where
        P: ComponentNamedList + Lower + Send + Sync,
        O: ComponentType + Lift + Send + Sync + 'static,
    {
        self.in_sandbox(function, |store| {
            let instance = self.pre.instantiate(&mut *store)?;
            let decide = instance.get_typed_func::<P, (O,)>(&mut *store, export)?;
            // No `post_return`: it would only free the answer inside an instance that is
            // thrown away with its store right after.
            let (output,) = decide.call(&mut *store, params)?;
            Ok(output)
        })
    }

    /// The first call of a policy, at load: checks the type of every export it must have
    /// (`Incompatible`, naming the mismatch, if one differs from the contract it imports),
    /// then asks `describe()`.
    fn describe_checking_exports(&self) -> Result<PolicyDescription, PolicyError> {
        self.in_sandbox("describe", |store| {
            let instance = self.pre.instantiate(&mut *store)?;
            if let Err(error) = self.exports.check_types(&instance, store, self.calls) {
                return Ok(Err(PolicyError::Incompatible {
                    reason: format!(
                        "the component does not export the mend:policy world: {error:#}"
                    ),
                }));
            }
            let describe = instance.get_typed_func::<(), (wit::PolicyDescription,)>(
                &mut *store,
                &self.exports.describe,
            )?;
            let (description,) = describe.call(&mut *store, ())?;
            Ok(Ok(bindings::description(description)))
        })?
    }

    /// Runs `body` in a fresh store taken from the pool, with the limits of a decision.
    fn in_sandbox<T>(
        &self,
        function: &'static str,
        body: impl FnOnce(&mut Store<SandboxState>) -> wasmtime::Result<T>,
    ) -> Result<T, PolicyError> {
        static SANDBOXES: Sandboxes = Sandboxes::new();
        self.calls_made.fetch_add(1, Ordering::Relaxed);
        // Timed from the wait for a sandbox: what a caller waits is what the metric says.
        let started = std::time::Instant::now();
        let result = SANDBOXES
            .take(function, sandbox::SANDBOX_WAIT)
            .and_then(|_sandbox| {
                let mut store = Store::new(&self.engine, SandboxState::new(&self.limits));
                store.limiter(|state| state);
                store.set_epoch_deadline(deadline_ticks(self.limits.cpu_time_per_call));
                let result = body(&mut store);
                result.map_err(|error| {
                    sandbox::call_error(function, error, store.data(), &self.limits)
                })
            });
        stats::record(started.elapsed(), result.is_err());
        result
    }
}

/// Refuses a component one instantiation of which needs more than `limits` allow (or more
/// than the pool was sized for, for a library caller whose limits are out of the settings'
/// ranges), naming each limit it is over.
fn check_shape(needs: &ComponentShape, limits: &PolicyLimits) -> Result<(), PolicyError> {
    use crate::bounds;
    let counts = [
        (
            needs.core_instances,
            "core instances",
            bounds::POLICY_CORE_INSTANCES,
            limits.max_core_instances,
        ),
        (
            needs.memories,
            "memories",
            bounds::POLICY_MEMORIES,
            limits.max_memories,
        ),
        (
            needs.tables,
            "tables",
            bounds::POLICY_TABLES,
            limits.max_tables,
        ),
    ];
    let mut over = Vec::new();
    for (needed, what, bound, limit) in counts {
        let allowed = u64::from(limit).min(bound.max);
        if needed > allowed {
            over.push(format!("{needed} {what} where {} is {allowed}", bound.name));
        }
    }
    let memory_allowed = (limits.max_memory_bytes as u64).min(bounds::POLICY_MEMORY_BYTES.max);
    if needs.initial_memory_bytes > memory_allowed {
        over.push(format!(
            "{} bytes of memory to start with where {} is {memory_allowed}",
            needs.initial_memory_bytes,
            bounds::POLICY_MEMORY_BYTES.name
        ));
    }
    if over.is_empty() {
        Ok(())
    } else {
        Err(PolicyError::ExceedsSandbox {
            needs: *needs,
            over,
        })
    }
}

/// A count bound's largest value, which the pool's sizes take.
fn bound_u32(bound: crate::bounds::Bound) -> u32 {
    u32::try_from(bound.max).expect("count bounds are small")
}

/// The names of the interfaces and functions a component imports.
pub fn imports_of(bytes: &[u8]) -> Result<Vec<String>, PolicyError> {
    let engine = shared_engine()?;
    let component = compiled(engine, &digest_of(bytes), bytes, None)?;
    let component_type = component.component_type();
    Ok(component_type
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect())
}

/// `sha256:<hex>` of `bytes`: how components are named.
pub fn digest_of(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("sha256:{hex}")
}

/// Whole epoch ticks covering `limit`, rounded up.
fn deadline_ticks(limit: Duration) -> u64 {
    limit.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64
}

/// One engine per process: compiled components are tied to the engine that compiled them.
fn shared_engine() -> Result<&'static Engine, PolicyError> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut config = Config::new();
            config.epoch_interruption(true);
            config.wasm_component_model(true);
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool()));
            let engine = Engine::new(&config).map_err(|error| format!("{error:#}"))?;
            start_epoch_ticker(&engine);
            Ok(engine)
        })
        .as_ref()
        .map_err(|message| PolicyError::Compile {
            message: message.clone(),
        })
}

/// The pool decisions' instances are allocated from: [`CONCURRENT_DECISIONS`] sandboxes, with
/// room in each for the most core instances, memories and tables the settings allow. Its
/// per-component limits are those same maxima; wasmtime checks them when a component is
/// compiled, after the load's shape check has already refused anything over them.
fn pool() -> PoolingAllocationConfig {
    use crate::bounds::{
        POLICY_CORE_INSTANCES, POLICY_MEMORIES, POLICY_MEMORY_BYTES, POLICY_TABLES,
    };
    // One engine serves every policy of the process, whatever limits each was loaded with, so
    // the pool is sized for the largest limits the settings allow; each decision's limiter
    // holds it to its own.
    let slots = CONCURRENT_DECISIONS;
    let instances = bound_u32(POLICY_CORE_INSTANCES);
    let memories = bound_u32(POLICY_MEMORIES);
    let tables = bound_u32(POLICY_TABLES);
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(slots)
        .total_core_instances(slots * instances)
        .max_core_instances_per_component(instances)
        .total_memories(slots * memories)
        .max_memories_per_component(memories)
        .max_memories_per_module(memories)
        .total_tables(slots * tables)
        .max_tables_per_component(tables)
        .max_tables_per_module(tables)
        .table_elements(sandbox::TABLE_ELEMENTS)
        .max_memory_size(POLICY_MEMORY_BYTES.max as usize);
    // Where the kernel reports which pages a decision dirtied (`PAGEMAP_SCAN`, Linux 6.7), the
    // sandbox is reset by rewriting just those, and its pages stay mapped: the next decision
    // takes no page faults. Without it, a resident region would be rewritten whole on every
    // reset, costlier than giving the pages back, so the pages are given back.
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        pool.pagemap_scan(wasmtime::Enabled::Yes)
            .linear_memory_keep_resident(MEMORY_KEPT_RESIDENT)
            .table_keep_resident(TABLE_KEPT_RESIDENT);
    }
    pool
}

/// How much of a sandbox's memory and tables stays mapped between decisions, where the kernel
/// can tell which pages were dirtied: the default policy's initial memory (1 MiB) and a few
/// of its growths. Only pages a
/// decision touched are resident, and only in the sandboxes that have been used at once (one
/// per thread deciding at the same time), so this bounds what the pool keeps, per sandbox.
const MEMORY_KEPT_RESIDENT: usize = 4 << 20;
const TABLE_KEPT_RESIDENT: usize = 64 << 10;

/// Advances the engine's epoch every tick. The thread holds only a weak reference, so it ends
/// when the engine is dropped rather than keeping it alive.
fn start_epoch_ticker(engine: &Engine) {
    let engine = engine.weak();
    std::thread::Builder::new()
        .name("mend-epoch-ticker".into())
        .spawn(move || {
            while let Some(engine) = engine.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .expect("spawn the epoch ticker thread");
}

/// Compiles a component once per process, keyed by digest.
fn compiled(
    engine: &Engine,
    digest: &str,
    bytes: &[u8],
    cache_dir: Option<&std::path::Path>,
) -> Result<Component, PolicyError> {
    // A std mutex: the critical section never awaits, and compiling under it keeps two
    // threads from compiling the same component at once.
    static COMPILED: OnceLock<Mutex<HashMap<String, Component>>> = OnceLock::new();
    let mut compiled = COMPILED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(component) = compiled.get(digest) {
        return Ok(component.clone());
    }
    let component = match cache_dir {
        Some(dir) => cache::load_or_compile(engine, digest, bytes, dir)?,
        None => Component::new(engine, bytes).map_err(|error| PolicyError::Compile {
            message: format!("{error:#}"),
        })?,
    };
    compiled.insert(digest.to_string(), component.clone());
    Ok(component)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mend_contract::StageAction;

    #[test]
    fn default_policy_loads_describes_itself_and_decides() {
        let policy = PolicyRuntime::default_policy().expect("the default policy loads");
        assert_eq!(policy.description(), &mend_default_policy::describe());
        assert!(policy.digest().starts_with("sha256:"));
        let input = StagePlanInput {
            dataset_id: "ds".into(),
            mode: StageMode::CreateOnly,
            split_ids: vec!["b".into(), "a".into(), "b".into()],
            existing: vec![],
        };
        let plan = policy.plan_stage(&input).unwrap();
        assert_eq!(plan, mend_default_policy::plan_stage(&input));
        assert_eq!(plan[0].action, StageAction::Insert);
    }

    #[test]
    fn the_default_policy_imports_only_its_own_types() {
        assert_eq!(
            imports_of(DEFAULT_POLICY_WASM).unwrap(),
            [format!(
                "mend:policy/types@{HOST_ABI_MAJOR}.{HOST_ABI_MINOR}.0"
            )]
        );
    }

    #[test]
    fn bytes_that_are_not_a_component_are_a_compile_error() {
        let error = PolicyRuntime::load(b"not wasm", PolicyLimits::default()).unwrap_err();
        assert!(matches!(error, PolicyError::Compile { .. }), "{error}");
    }

    #[test]
    fn a_zero_deadline_interrupts_the_first_call() {
        let limits = PolicyLimits {
            cpu_time_per_call: Duration::ZERO,
            ..PolicyLimits::default()
        };
        let error = PolicyRuntime::load(DEFAULT_POLICY_WASM, limits).unwrap_err();
        assert!(
            matches!(error, PolicyError::DeadlineExceeded { .. }),
            "{error}"
        );
    }

    #[test]
    fn deadlines_round_up_to_whole_ticks() {
        assert_eq!(deadline_ticks(Duration::ZERO), 0);
        assert_eq!(deadline_ticks(Duration::from_millis(1)), 1);
        assert_eq!(deadline_ticks(EPOCH_TICK), 1);
        assert_eq!(deadline_ticks(Duration::from_secs(1)), 100);
    }
}

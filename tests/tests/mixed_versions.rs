//! Hosts and policies of different versions, every pairing: each either loads and decides
//! exactly like the native `mend_default_policy` functions (as far as its contract can say),
//! or is refused, at load or when the engine starts, with its specific reason. No pairing ever
//! runs a create-only stage as an upsert.
//!
//! The hosts are [`HostAbi`]s that the same binary plays:
//!
//! - **older 1.2**: ABI 1.2, knowing semantics revision 1, running `mend:policy@1.2.0`
//!   components only, as a 1.2 host did: anything newer is refused, told to upgrade mend.
//! - **older 1.3**: ABI 1.3, running `mend:policy@1.3.0` components only: a 1.4 or 1.5
//!   policy is refused at load, told to upgrade mend, never asked the 1.3 way, and a 1.1 or
//!   1.2 one is told to rebuild.
//! - **older 1.4**: ABI 1.4, running 1.4 components and every older 1.x one, as the host
//!   before this one did: a 1.5 policy is refused at load, told to upgrade mend, never asked
//!   the 1.4 way.
//! - **current 1.5**: [`HostAbi::current`], running 1.5 components and every older 1.x one,
//!   each asked its own contract's way.
//! - **newer 1.6**: ABI 1.6, knowing semantics revisions 1 and 2. A real 1.6 host would also
//!   import a 1.6 contract; it is played with the contracts this binary can run, 1.5 to 1.1.
//!   Its ABI minor only matters to `describe()`.
//!
//! The policies are the default one (ABI 1.5, semantics 1, with `stage.standard-plans`: the
//! engine stages without asking it), `policies/abi-1-4`, `abi-1-3`, `abi-1-2` and `abi-1-1`
//! (the default decisions built against each frozen contract, without that capability: the
//! engine asks each its own way; what an older contract cannot say is decided as its host did or deferred,
//! see [`as_contract`]), `policies/newer-semantics` (the default decisions as semantics
//! revision 2) and `policies/extra-capability` (the default decisions, requiring
//! `stage.merge-on-write`, which no backend provides).

use std::fmt;
use std::sync::Arc;

use mend::catalog::ObjectStoreCatalog;
use mend::model::{
    DatasetConfig, ListQuery, SplitState, StageMode, StageOutcome, StageRequest, StageSplit,
};
use mend::objects::SplitObjects;
use mend::runtime::{DEFAULT_POLICY_WASM, HostAbi, LoadOptions, PolicyRuntime};
use mend::{Engine, EngineOptions, MendError, PolicyError};
use mend_contract::{
    CheckpointDelta, ExistingRow, GcCandidate, GcInput, IntentDecision, IntentObservation,
    IntentPhase, ObjectObservation, OperationKind, OrphanObject, PartitionDelta, PartitionPosition,
    PublishInput, ReconcileInput, RecoveryDecision, RecoveryInput, RecoveryMode, StagePlanInput,
};

const ABI_1_1_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_ABI_1_1_WASM"));
const ABI_1_2_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_ABI_1_2_WASM"));
const ABI_1_3_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_ABI_1_3_WASM"));
const ABI_1_4_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_ABI_1_4_WASM"));
const NEWER_SEMANTICS_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_NEWER_SEMANTICS_WASM"));
const EXTRA_CAPABILITY_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_EXTRA_CAPABILITY_WASM"));

struct Host {
    name: &'static str,
    abi: HostAbi,
}

fn hosts() -> [Host; 5] {
    let running = |versions: &[&str]| -> Vec<String> {
        versions
            .iter()
            .map(|version| format!("mend:policy/types@{version}"))
            .collect()
    };
    [
        Host {
            name: "older 1.2",
            abi: HostAbi {
                abi_major: 1,
                abi_minor: 2,
                known_semantics_revisions: vec![1],
                contract_imports: running(&["1.2.0"]),
            },
        },
        Host {
            name: "older 1.3",
            abi: HostAbi {
                abi_major: 1,
                abi_minor: 3,
                known_semantics_revisions: vec![1],
                contract_imports: running(&["1.3.0"]),
            },
        },
        Host {
            name: "older 1.4",
            abi: HostAbi {
                abi_major: 1,
                abi_minor: 4,
                known_semantics_revisions: vec![1],
                contract_imports: running(&["1.4.0", "1.3.0", "1.2.0", "1.1.0"]),
            },
        },
        Host {
            name: "current 1.5",
            abi: HostAbi::current(),
        },
        Host {
            name: "newer 1.6",
            abi: HostAbi {
                abi_major: 1,
                abi_minor: 6,
                known_semantics_revisions: vec![1, 2],
                contract_imports: running(&["1.5.0", "1.4.0", "1.3.0", "1.2.0", "1.1.0"]),
            },
        },
    ]
}

const POLICIES: [(&str, &[u8]); 7] = [
    ("default", DEFAULT_POLICY_WASM),
    ("abi-1-4", ABI_1_4_WASM),
    ("abi-1-3", ABI_1_3_WASM),
    ("abi-1-1", ABI_1_1_WASM),
    ("abi-1-2", ABI_1_2_WASM),
    ("newer-semantics", NEWER_SEMANTICS_WASM),
    ("extra-capability", EXTRA_CAPABILITY_WASM),
];

/// What a pairing must come to.
#[derive(Debug, Clone, Copy)]
enum Expected {
    /// Loads, decides like the native build and stages create-only without overwriting.
    Decides,
    /// Refused at load with `Incompatible`, for a reason containing this.
    RefusedAtLoad(&'static str),
    /// Loads; `Engine::new` refuses it with `CapabilityMissing` for this capability.
    RefusedAtEngineStart(&'static str),
}

const BUILT_AGAINST_1_5_ON_1_2: &str = "built against mend:policy@1.5.0; this host runs 1.2 \
     components: upgrade mend to run it, or rebuild the policy against wit/ of this mend";
const BUILT_AGAINST_1_4_ON_1_2: &str = "built against mend:policy@1.4.0; this host runs 1.2 \
     components: upgrade mend to run it, or rebuild the policy against wit/ of this mend";
const BUILT_AGAINST_1_3_ON_1_2: &str = "built against mend:policy@1.3.0; this host runs 1.2 \
     components: upgrade mend to run it, or rebuild the policy against wit/ of this mend";
const BUILT_AGAINST_1_1_ON_1_2: &str = "built against mend:policy@1.1.0; this host runs 1.2 \
     components: rebuild the policy against wit/ of this mend";
const BUILT_AGAINST_1_5_ON_1_3: &str = "built against mend:policy@1.5.0; this host runs 1.3 \
     components: upgrade mend to run it, or rebuild the policy against wit/ of this mend";
const BUILT_AGAINST_1_4_ON_1_3: &str = "built against mend:policy@1.4.0; this host runs 1.3 \
     components: upgrade mend to run it, or rebuild the policy against wit/ of this mend";
const BUILT_AGAINST_1_1_ON_1_3: &str = "built against mend:policy@1.1.0; this host runs 1.3 \
     components: rebuild the policy against wit/ of this mend";
const BUILT_AGAINST_1_2_ON_1_3: &str = "built against mend:policy@1.2.0; this host runs 1.3 \
     components: rebuild the policy against wit/ of this mend";
/// The pairing the 1.5 upgrade must refuse: a 1.5 policy on a 1.4 host, told to upgrade mend,
/// never asked the 1.4 way.
const BUILT_AGAINST_1_5_ON_1_4: &str = "built against mend:policy@1.5.0; this host runs 1.4, \
     1.3, 1.2 and 1.1 components: upgrade mend to run it, or rebuild the policy against wit/ of \
     this mend";
const SEMANTICS_2: &str =
    "semantics revision 2, which this host does not know (it knows [1]): upgrade mend first";

/// Rows: the hosts; columns: [`POLICIES`].
const EXPECTED: [[Expected; 7]; 5] = [
    [
        Expected::RefusedAtLoad(BUILT_AGAINST_1_5_ON_1_2),
        Expected::RefusedAtLoad(BUILT_AGAINST_1_4_ON_1_2),
        Expected::RefusedAtLoad(BUILT_AGAINST_1_3_ON_1_2),
        Expected::RefusedAtLoad(BUILT_AGAINST_1_1_ON_1_2),
        Expected::Decides,
        Expected::RefusedAtLoad(BUILT_AGAINST_1_5_ON_1_2),
        Expected::RefusedAtLoad(BUILT_AGAINST_1_5_ON_1_2),
    ],
    [
        Expected::RefusedAtLoad(BUILT_AGAINST_1_5_ON_1_3),
        Expected::RefusedAtLoad(BUILT_AGAINST_1_4_ON_1_3),
        Expected::Decides,
        Expected::RefusedAtLoad(BUILT_AGAINST_1_1_ON_1_3),
        Expected::RefusedAtLoad(BUILT_AGAINST_1_2_ON_1_3),
        Expected::RefusedAtLoad(BUILT_AGAINST_1_5_ON_1_3),
        Expected::RefusedAtLoad(BUILT_AGAINST_1_5_ON_1_3),
    ],
    [
        Expected::RefusedAtLoad(BUILT_AGAINST_1_5_ON_1_4),
        Expected::Decides,
        Expected::Decides,
        Expected::Decides,
        Expected::Decides,
        Expected::RefusedAtLoad(BUILT_AGAINST_1_5_ON_1_4),
        Expected::RefusedAtLoad(BUILT_AGAINST_1_5_ON_1_4),
    ],
    [
        Expected::Decides,
        Expected::Decides,
        Expected::Decides,
        Expected::Decides,
        Expected::Decides,
        Expected::RefusedAtLoad(SEMANTICS_2),
        Expected::RefusedAtEngineStart("stage.merge-on-write"),
    ],
    [
        Expected::Decides,
        Expected::Decides,
        Expected::Decides,
        Expected::Decides,
        Expected::Decides,
        Expected::Decides,
        Expected::RefusedAtEngineStart("stage.merge-on-write"),
    ],
];

/// What a pairing came to.
enum Outcome {
    Decided {
        vectors: usize,
        /// How many times the engine asked the policy to plan the two stages.
        asked: u64,
    },
    RefusedAtLoad(PolicyError),
    RefusedAtEngineStart(MendError),
    /// Anything else, described: always a failure.
    Wrong(String),
}

impl Outcome {
    fn short(&self) -> &'static str {
        match self {
            Self::Decided { .. } => "decides",
            Self::RefusedAtLoad(_) => "refused at load",
            Self::RefusedAtEngineStart(_) => "refused at engine start",
            Self::Wrong(_) => "WRONG",
        }
    }

    fn matches(&self, expected: Expected) -> bool {
        match (self, expected) {
            (Self::Decided { .. }, Expected::Decides) => true,
            (
                Self::RefusedAtLoad(PolicyError::Incompatible { reason }),
                Expected::RefusedAtLoad(why),
            ) => reason.contains(why),
            (
                Self::RefusedAtEngineStart(MendError::CapabilityMissing { capability, .. }),
                Expected::RefusedAtEngineStart(missing),
            ) => capability == missing,
            _ => false,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Decided { vectors, asked } => write!(
                f,
                "{vectors} vectors decided as natively; create-only skipped the existing row; \
                 asked to plan {asked} of 2 stages"
            ),
            Self::RefusedAtLoad(error) => write!(f, "{error}"),
            Self::RefusedAtEngineStart(error) => write!(f, "{error}"),
            Self::Wrong(what) => f.write_str(what),
        }
    }
}

#[tokio::test]
async fn every_host_and_policy_pairing_decides_natively_or_is_refused_for_its_reason() {
    let hosts = hosts();
    let mut outcomes = Vec::new();
    for (row, host) in hosts.iter().enumerate() {
        for (column, (policy, bytes)) in POLICIES.iter().enumerate() {
            let outcome = pair(host, bytes).await;
            let expected = EXPECTED[row][column];
            outcomes.push((host.name, *policy, expected, outcome));
        }
    }

    let width = POLICIES
        .iter()
        .map(|(name, _)| name.len())
        .max()
        .unwrap_or(0)
        + 2;
    let mut grid = format!("{:<12}", "host");
    for (policy, _) in POLICIES {
        grid += &format!("{policy:<width$}");
    }
    for (row, host) in hosts.iter().enumerate() {
        grid += &format!("\n{:<12}", host.name);
        for column in 0..POLICIES.len() {
            let (_, _, _, outcome) = &outcomes[row * POLICIES.len() + column];
            grid += &format!("{:<width$}", outcome.short());
        }
    }
    println!("{grid}\n");
    for (host, policy, _, outcome) in &outcomes {
        println!("{host:<12} x {policy:<17} {outcome}");
    }

    let wrong: Vec<String> = outcomes
        .iter()
        .filter(|(_, _, expected, outcome)| !outcome.matches(*expected))
        .map(|(host, policy, expected, outcome)| {
            format!("{host} x {policy}: expected {expected:?}, got {outcome}")
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "pairings that went wrong:\n{}",
        wrong.join("\n")
    );
    let decided = outcomes
        .iter()
        .filter(|(_, _, _, outcome)| matches!(outcome, Outcome::Decided { .. }))
        .count();
    println!(
        "{} pairings: {decided} decide as the native build and skip create-only over an existing \
         row, {} refused with their reason",
        outcomes.len(),
        outcomes.len() - decided
    );
}

async fn pair(host: &Host, bytes: &[u8]) -> Outcome {
    let options = LoadOptions {
        host: host.abi.clone(),
        ..LoadOptions::default()
    };
    let policy = match PolicyRuntime::load_with(bytes, &options) {
        Ok(policy) => policy,
        Err(error) => return Outcome::RefusedAtLoad(error),
    };
    let engine = match memory_engine(policy.clone()) {
        Ok(engine) => engine,
        Err(error) => return Outcome::RefusedAtEngineStart(error),
    };
    let vectors = match decides_natively(&policy) {
        Ok(vectors) => vectors,
        Err(difference) => return Outcome::Wrong(difference),
    };
    let before = policy.calls_made();
    if let Err(what) = create_only_skips_an_existing_row(&engine).await {
        return Outcome::Wrong(what);
    }
    // A policy declaring the standard plans is never asked to plan a stage; any other is
    // asked once for each of the two.
    let asked = policy.calls_made() - before;
    let standard = policy
        .description()
        .required_capabilities
        .iter()
        .any(|name| name == mend_contract::capability::STAGE_STANDARD_PLANS);
    let expected = if standard { 0 } else { 2 };
    if asked != expected {
        return Outcome::Wrong(format!(
            "the engine asked the policy {asked} times to plan two stages, not {expected} \
             (standard plans: {standard})"
        ));
    }
    Outcome::Decided { vectors, asked }
}

fn memory_engine(policy: PolicyRuntime) -> mend::Result<Engine> {
    let catalog = ObjectStoreCatalog::open_url("memory://").expect("memory catalog");
    let objects = SplitObjects::new(catalog.store().clone(), catalog.prefix().clone());
    Engine::new(Arc::new(catalog), objects, policy, EngineOptions::default())
}

/// Stages a row, then the same id again create-only with other content: the row must be
/// skipped and keep its first content, whatever the policy.
async fn create_only_skips_an_existing_row(engine: &Engine) -> Result<(), String> {
    let stage = |mode, metadata: &str| StageRequest {
        dataset_id: "ds".into(),
        mode,
        node: "n".into(),
        splits: ["existing", "new"]
            .iter()
            .map(|id| StageSplit {
                split_id: (*id).into(),
                metadata_json: metadata.into(),
            })
            .collect(),
    };
    engine
        .create_dataset("ds", &DatasetConfig::default())
        .await
        .map_err(|error| format!("create the dataset: {error}"))?;
    let mut first = stage(StageMode::Upsert, r#"{"writer":1}"#);
    first.splits.truncate(1);
    engine
        .stage(&first)
        .await
        .map_err(|error| format!("stage the existing row: {error}"))?;
    let result = engine
        .stage(&stage(StageMode::CreateOnly, r#"{"writer":2}"#))
        .await
        .map_err(|error| format!("stage create-only: {error}"))?;
    let outcomes: Vec<(&str, &StageOutcome)> = result
        .splits
        .iter()
        .map(|split| (split.split_id.as_str(), &split.outcome))
        .collect();
    if outcomes
        != [
            ("existing", &StageOutcome::Skipped(SplitState::Staged)),
            ("new", &StageOutcome::Inserted),
        ]
    {
        return Err(format!("create-only staged {outcomes:?}"));
    }
    let rows = engine
        .list_splits("ds", &ListQuery::default())
        .await
        .map_err(|error| format!("list: {error}"))?;
    let existing = rows
        .splits
        .iter()
        .find(|row| row.split_id == "existing")
        .ok_or("the existing row is gone")?;
    if existing.metadata != serde_json::json!({"writer": 1}) {
        return Err(format!(
            "create-only overwrote the existing row: {}",
            existing.metadata
        ));
    }
    Ok(())
}

/// Runs a few vectors of every decision through the component and natively; the first
/// difference, if any.
fn decides_natively(policy: &PolicyRuntime) -> Result<usize, String> {
    fn same<T: PartialEq + fmt::Debug>(
        what: &str,
        component: Result<T, PolicyError>,
        native: T,
    ) -> Result<(), String> {
        match component {
            Ok(decided) if decided == native => Ok(()),
            Ok(decided) => Err(format!(
                "{what}: the component decided {decided:?}, natively {native:?}"
            )),
            Err(error) => Err(format!("{what}: {error}")),
        }
    }
    let mut vectors = 0;
    for input in stage_vectors() {
        same(
            "plan-stage",
            policy.plan_stage(&input),
            mend_default_policy::plan_stage(&input),
        )?;
        vectors += 1;
    }
    let publishes = publish_vectors();
    for input in &publishes {
        same(
            "validate-publish",
            policy.validate_publish(input),
            mend_default_policy::validate_publish(input),
        )?;
        vectors += 1;
    }
    // The whole batch at once: one call for a 1.4 or 1.5 policy, one per publish for a 1.3 one.
    same(
        "validate-publishes",
        policy.validate_publishes(&publishes),
        publishes
            .iter()
            .map(mend_default_policy::validate_publish)
            .collect(),
    )?;
    vectors += 1;
    let minor = policy.description().abi_minor;
    for input in recovery_vectors() {
        same(
            "decide-recovery",
            policy.decide_recovery(&input),
            as_contract(minor, &input),
        )?;
        vectors += 1;
    }
    let reconcile = reconcile_vector();
    if minor >= 2 {
        same(
            "plan-reconcile",
            policy.plan_reconcile(&reconcile),
            mend_default_policy::plan_reconcile(&reconcile),
        )?;
    } else {
        match policy.plan_reconcile(&reconcile) {
            Err(PolicyError::Incompatible { reason })
                if reason.contains("which has no plan-reconcile") => {}
            other => return Err(format!("plan-reconcile on ABI 1.{minor}: {other:?}")),
        }
    }
    let gc = gc_vector();
    same(
        "plan-gc",
        policy.plan_gc(&gc),
        mend_default_policy::plan_gc(&gc),
    )?;
    Ok(vectors + 2)
}

/// The native default's recovery decisions as a policy of ABI minor `minor` gives them, for
/// intents the host asks it about (none withheld): before 1.3 the policy observes no
/// `checkpoint-reached-to` (it takes `checkpoint-at-to`) and cannot abandon (it defers with
/// the same reason); before 1.2 it observes no marks or config (`policies/abi-1-2` and
/// `abi-1-1` say so).
fn as_contract(minor: u32, input: &RecoveryInput) -> Vec<IntentDecision> {
    if minor >= 3 {
        return mend_default_policy::decide_recovery(input);
    }
    let mut seen = input.clone();
    for intent in &mut seen.intents {
        intent.checkpoint_reached_to = intent.checkpoint_at_to;
        if minor < 2 {
            intent.mark_splits.clear();
            intent.config_at_expected = false;
            intent.config_applied = false;
        }
    }
    mend_default_policy::decide_recovery(&seen)
        .into_iter()
        .map(|decision| IntentDecision {
            decision: match decision.decision {
                RecoveryDecision::Abandon(why) => RecoveryDecision::Defer(why),
                other => other,
            },
            ..decision
        })
        .collect()
}

fn row(split_id: &str, state: SplitState) -> ExistingRow {
    ExistingRow {
        split_id: split_id.into(),
        state,
    }
}

fn ids(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|id| (*id).to_string()).collect()
}

fn stage_vectors() -> Vec<StagePlanInput> {
    let existing = [
        row("a", SplitState::Staged),
        row("c", SplitState::Published),
        row("d", SplitState::MarkedForDeletion),
    ];
    [StageMode::CreateOnly, StageMode::Upsert]
        .into_iter()
        .flat_map(|mode| {
            [
                StagePlanInput {
                    dataset_id: "ds".into(),
                    mode,
                    split_ids: ids(&["b", "a", "c", "a"]),
                    existing: existing[..2].to_vec(),
                },
                StagePlanInput {
                    dataset_id: "ds".into(),
                    mode,
                    split_ids: ids(&["d", "e"]),
                    existing: existing[2..].to_vec(),
                },
            ]
        })
        .collect()
}

fn publish_vectors() -> Vec<PublishInput> {
    let allowed = PublishInput {
        dataset_id: "ds".into(),
        staged_split_ids: ids(&["a"]),
        replaced_split_ids: ids(&["old"]),
        checkpoint_delta: Some(CheckpointDelta {
            source: "source".into(),
            partitions: vec![PartitionDelta {
                partition: "0".into(),
                from_position: Some(5),
                to_position: 9,
            }],
        }),
        publish_token: Some("t".into()),
        rows: vec![
            row("a", SplitState::Staged),
            row("old", SplitState::Published),
        ],
        checkpoint: vec![PartitionPosition {
            partition: "0".into(),
            position: 5,
        }],
        current_publish_token: Some("t".into()),
    };
    let refused = PublishInput {
        staged_split_ids: ids(&["a", "missing", "old"]),
        publish_token: Some("stale".into()),
        checkpoint: vec![PartitionPosition {
            partition: "0".into(),
            position: 7,
        }],
        ..allowed.clone()
    };
    vec![allowed, refused]
}

fn intent(operation_id: &str, owner_lease_live: bool, objects_match: bool) -> IntentObservation {
    IntentObservation {
        operation_id: operation_id.into(),
        kind: OperationKind::Commit,
        phase: IntentPhase::Armed,
        owner_lease_live,
        planned_rows: ids(&["s1", "s2"]),
        rows: vec![row("s1", SplitState::Staged)],
        objects: vec![
            ObjectObservation {
                split_id: "s1".into(),
                present: true,
                matches: true,
            },
            ObjectObservation {
                split_id: "s2".into(),
                present: objects_match,
                matches: objects_match,
            },
        ],
        publish_staged: ids(&["s1", "s2"]),
        publish_replaced: Vec::new(),
        has_checkpoint_delta: false,
        checkpoint_at_from: false,
        checkpoint_at_to: false,
        checkpoint_reached_to: false,
        gc_splits: Vec::new(),
        mark_splits: Vec::new(),
        config_at_expected: false,
        config_applied: false,
    }
}

fn recovery_vectors() -> Vec<RecoveryInput> {
    [
        RecoveryMode::Probe,
        RecoveryMode::RollForward,
        RecoveryMode::Exclusive,
    ]
    .into_iter()
    .map(|mode| RecoveryInput {
        dataset_id: "ds".into(),
        mode,
        now_ms: 1_700_000_000_000,
        intents: vec![
            intent("complete", false, true),
            intent("missing-object", false, false),
            intent("owner-alive", true, true),
        ],
    })
    .collect()
}

fn gc_vector() -> GcInput {
    let candidate = |split_id: &str, state, updated_at_ms| GcCandidate {
        split_id: split_id.into(),
        state,
        updated_at_ms,
    };
    GcInput {
        dataset_id: "ds".into(),
        now_ms: 1_700_000_000_000,
        staged_grace_period_ms: 3_600_000,
        deletion_grace_period_ms: 600_000,
        candidates: vec![
            candidate("abandoned", SplitState::Staged, 0),
            candidate("expired", SplitState::MarkedForDeletion, 0),
            candidate("fresh", SplitState::Staged, 1_700_000_000_000),
        ],
    }
}

fn reconcile_vector() -> ReconcileInput {
    let orphan = |split_id: &str, same_incarnation, intact| OrphanObject {
        split_id: split_id.into(),
        same_incarnation,
        intact,
        metadata_json: "{}".into(),
        age_ms: 3_600_000,
    };
    ReconcileInput {
        dataset_id: "ds".into(),
        now_ms: 1_700_000_000_000,
        orphans: vec![
            orphan("whole", true, true),
            orphan("damaged", true, false),
            orphan("earlier-incarnation", false, true),
        ],
    }
}

/// An older policy is asked only what its contract can say: an intent it cannot observe is
/// deferred by the host with its reason (never shown as something else), the rest get the
/// policy's own decisions in the input's order, gc is planned by the host's grace-period rule
/// without a call, and a policy with nothing it can be asked about is not called at all.
#[test]
fn an_older_policy_is_asked_only_what_its_contract_can_say() {
    let mut abandoned = intent("abandoned", false, true);
    abandoned.phase = IntentPhase::Abandoned;
    let mut config = intent("config", false, true);
    config.kind = OperationKind::ConfigApply;
    config.planned_rows.clear();
    config.rows.clear();
    config.objects.clear();
    config.publish_staged.clear();
    config.config_at_expected = true;
    let mut complete = intent("complete", false, true);
    complete.rows.push(row("s2", SplitState::Staged));
    let input = RecoveryInput {
        dataset_id: "ds".into(),
        mode: RecoveryMode::RollForward,
        now_ms: 1_700_000_000_000,
        intents: vec![abandoned, config, complete],
    };
    let native = mend_default_policy::decide_recovery(&input);
    assert!(
        matches!(native[0].decision, RecoveryDecision::Abandon(_))
            && native[1].decision == RecoveryDecision::RollForward
            && native[2].decision == RecoveryDecision::RollForward,
        "the vectors mean what they say natively: {native:?}"
    );

    let deferred_as = |decision: &RecoveryDecision, needles: &[&str]| match decision {
        RecoveryDecision::Defer(why) => needles.iter().all(|needle| why.contains(needle)),
        _ => false,
    };
    let mut checked = 0;
    for (name, bytes, minor) in [("abi-1-2", ABI_1_2_WASM, 2), ("abi-1-1", ABI_1_1_WASM, 1)] {
        let policy = PolicyRuntime::load(bytes, Default::default()).expect("loads");
        let contract = format!("mend:policy@1.{minor}.0");
        let before = policy.calls_made();
        let decided = policy.decide_recovery(&input).expect("decides");
        assert_eq!(
            policy.calls_made() - before,
            1,
            "{name}: one call for the batch"
        );
        let ids: Vec<&str> = decided.iter().map(|d| d.operation_id.as_str()).collect();
        assert_eq!(ids, ["abandoned", "config", "complete"], "{name}: in order");
        assert!(
            deferred_as(
                &decided[0].decision,
                &["phase abandoned, which contract 1.3 added", &contract]
            ),
            "{name}: {:?}",
            decided[0].decision
        );
        if minor == 1 {
            assert!(
                deferred_as(
                    &decided[1].decision,
                    &[
                        "config-apply intent are observed from contract 1.2",
                        &contract
                    ]
                ),
                "{name}: {:?}",
                decided[1].decision
            );
        } else {
            assert_eq!(decided[1].decision, RecoveryDecision::RollForward, "{name}");
        }
        assert_eq!(decided[2].decision, RecoveryDecision::RollForward, "{name}");
        checked += 3;

        // Nothing it can be asked about: no call, every intent deferred.
        let only_abandoned = RecoveryInput {
            intents: input.intents[..1].to_vec(),
            ..input.clone()
        };
        let before = policy.calls_made();
        let decided = policy.decide_recovery(&only_abandoned).expect("decides");
        assert_eq!(policy.calls_made(), before, "{name}: not called");
        assert!(deferred_as(&decided[0].decision, &[&contract]), "{name}");
        checked += 1;

        // gc by the rule the host of its contract ran, without a call.
        let gc = gc_vector();
        let before = policy.calls_made();
        assert_eq!(
            policy.plan_gc(&gc).expect("plans"),
            mend_default_policy::plan_gc(&gc)
        );
        assert_eq!(policy.calls_made(), before, "{name}: gc is the host's");
        checked += 1;
    }

    // A 1.3 or 1.4 policy sees the phase and abandons, as natively.
    for bytes in [ABI_1_3_WASM, ABI_1_4_WASM] {
        let policy = PolicyRuntime::load(bytes, Default::default()).expect("loads");
        assert_eq!(policy.decide_recovery(&input).expect("decides"), native);
        checked += 3;
    }
    println!("{checked} decisions of older policies checked against what their contract can say");
}

/// Older components still pass their scenarios: every suite of `guest/scenarios` against
/// `abi-1-4` and `abi-1-3` as written, and against `abi-1-2` and `abi-1-1` as far as each contract can say:
/// the intents the host withholds from them (covered above) are left out of their recovery
/// scenarios, a recovery decision is the native one on what the contract observes
/// ([`as_contract`]), and a reconcile scenario is left out of 1.1's (which has none, refused
/// above). Every other scenario (stage plans, publish validations, gc, 1.2's reconcile) must
/// give exactly its expected answer.
#[test]
fn older_components_pass_the_default_scenarios_their_contract_can_say() {
    use mend::scenarios::{Call, run};

    let older = [
        ("abi-1-4", ABI_1_4_WASM, 4),
        ("abi-1-3", ABI_1_3_WASM, 3),
        ("abi-1-2", ABI_1_2_WASM, 2),
        ("abi-1-1", ABI_1_1_WASM, 1),
    ];
    for (name, bytes, minor) in older {
        let policy = PolicyRuntime::load(bytes, Default::default()).expect("loads");
        let (mut as_written, mut projected, mut left_out) = (0, 0, 0);
        for mut suite in crate::scenarios::default_suites() {
            suite
                .scenarios
                .retain_mut(|scenario| match &mut scenario.call {
                    Call::DecideRecovery { input, expect } if minor < 3 => {
                        let sees = |intent: &IntentObservation| {
                            intent.phase != IntentPhase::Abandoned
                                && (minor >= 2
                                    || !matches!(
                                        intent.kind,
                                        OperationKind::ConfigApply | OperationKind::Reconcile
                                    ))
                        };
                        input.intents.retain(sees);
                        if input.intents.is_empty() {
                            left_out += 1;
                            return false;
                        }
                        *expect = as_contract(minor, input);
                        projected += 1;
                        true
                    }
                    Call::PlanReconcile { .. } if minor < 2 => {
                        left_out += 1;
                        false
                    }
                    _ => {
                        as_written += 1;
                        true
                    }
                });
            let report = run(&policy, &suite);
            assert!(
                report.all_passed(),
                "{name}: {}",
                mend::scenarios::render(&report)
            );
        }
        assert!(as_written > 0 && (minor >= 3 || projected > 0));
        println!(
            "{name}: {as_written} scenarios passed as written, {projected} recovery scenarios as \
             ABI 1.{minor} says them, {left_out} left out (nothing its contract can say)"
        );
    }
}

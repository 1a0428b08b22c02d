//! The policy component as the host runs it: the import allowlist, containment of traps and
//! limits, and a differential test against the same decisions built natively, on generated
//! vectors that reach every outcome of every decision function (counted and printed).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::Duration;

use mend::PolicyError;
use mend::runtime::{
    ALLOWED_IMPORTS, DEFAULT_POLICY_WASM, PolicyLimits, PolicyRuntime, imports_of,
};
use mend_contract::{
    CheckpointDelta, ExistingRow, GcCandidate, GcInput, IntentObservation, IntentPhase,
    ObjectObservation, OperationKind, OrphanObject, PartitionDelta, PartitionPosition,
    PlannedSplit, PublishInput, ReconcileAction, ReconcileInput, RecoveryDecision, RecoveryInput,
    RecoveryMode, SplitState, StageAction, StageMode, StagePlanInput, ViolationKind,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

#[test]
fn the_default_component_imports_only_what_the_allowlist_grants() {
    let imports = imports_of(DEFAULT_POLICY_WASM).expect("list imports");
    let outside: Vec<&String> = imports
        .iter()
        .filter(|import| !ALLOWED_IMPORTS.contains(&import.as_str()))
        .collect();
    println!("default policy imports: {imports:?}; allowlist: {ALLOWED_IMPORTS:?}");
    assert!(
        outside.is_empty(),
        "imports outside the allowlist: {outside:?}"
    );
}

fn request_of(ids: usize, id_len: usize) -> StagePlanInput {
    StagePlanInput {
        dataset_id: "ds".into(),
        mode: StageMode::CreateOnly,
        split_ids: (0..ids).map(|i| format!("{i:0id_len$}")).collect(),
        existing: Vec::new(),
    }
}

#[test]
fn traps_and_limits_are_typed_errors_and_the_runtime_keeps_serving() {
    let interrupted = PolicyRuntime::load(
        DEFAULT_POLICY_WASM,
        PolicyLimits {
            cpu_time_per_call: Duration::ZERO,
            ..PolicyLimits::default()
        },
    );
    assert!(
        matches!(interrupted, Err(PolicyError::DeadlineExceeded { .. })),
        "{interrupted:?}"
    );

    let small_memory = PolicyRuntime::load(
        DEFAULT_POLICY_WASM,
        PolicyLimits {
            max_memory_bytes: 2 << 20,
            ..PolicyLimits::default()
        },
    )
    .expect("describe fits in 2 MiB");
    // Since ABI 1.5 no id enters the sandbox, about 13 bytes an entry in and 5 out: 300,000
    // entries need more than 2 MiB.
    let error = small_memory
        .plan_stage(&request_of(300_000, 8))
        .unwrap_err();
    assert!(
        matches!(error, PolicyError::MemoryExhausted { .. }),
        "{error:?}"
    );
    let small = request_of(10, 8);
    assert_eq!(
        small_memory.plan_stage(&small).unwrap(),
        mend_default_policy::plan_stage(&small),
        "the runtime serves after a limit"
    );

    let small_output = PolicyRuntime::load(
        DEFAULT_POLICY_WASM,
        PolicyLimits {
            max_output_bytes: 4_096,
            ..PolicyLimits::default()
        },
    )
    .expect("load");
    let error = small_output.plan_stage(&request_of(1_000, 16)).unwrap_err();
    assert!(
        matches!(error, PolicyError::OutputTooLarge { .. }),
        "{error:?}"
    );
    assert!(
        small_output.plan_stage(&small).is_ok(),
        "the runtime serves after an oversized answer"
    );
}

fn split_id() -> impl Strategy<Value = String> {
    prop_oneof!["[a-f]{1,2}", "[a-zA-Z0-9_.-]{1,24}", "\\PC{1,8}",]
}

fn state() -> impl Strategy<Value = SplitState> {
    prop_oneof![
        Just(SplitState::Staged),
        Just(SplitState::Published),
        Just(SplitState::MarkedForDeletion)
    ]
}

fn stage_input() -> impl Strategy<Value = StagePlanInput> {
    (
        proptest::collection::vec(split_id(), 0..40),
        proptest::collection::vec((split_id(), state()), 0..20),
        any::<bool>(),
    )
        .prop_map(|(split_ids, existing, create_only)| {
            // Existing rows for some requested ids and some others, each id at most once.
            let mut seen = std::collections::BTreeSet::new();
            let existing = existing
                .into_iter()
                .enumerate()
                .map(|(i, (id, state))| {
                    let id = if i % 2 == 0 && !split_ids.is_empty() {
                        split_ids[i % split_ids.len()].clone()
                    } else {
                        id
                    };
                    ExistingRow {
                        split_id: id,
                        state,
                    }
                })
                .filter(|row| seen.insert(row.split_id.clone()))
                .collect();
            StagePlanInput {
                dataset_id: "dataset".into(),
                mode: if create_only {
                    StageMode::CreateOnly
                } else {
                    StageMode::Upsert
                },
                split_ids,
                existing,
            }
        })
}

/// Publish inputs of both kinds: arbitrary ones, which nearly always fail on missing splits
/// or a token, and consistent ones with chosen preconditions broken, which reach every
/// answer, acceptance included.
fn publish_input() -> impl Strategy<Value = PublishInput> {
    prop_oneof![
        arbitrary_publish_input(),
        publish_with_broken_preconditions()
    ]
}

/// The preconditions [`publish_with_broken_preconditions`] can break, one per violation kind.
const PRECONDITIONS: usize = 6;

/// A publish that applies (staged ids staged, replaced ids published, the delta starting at
/// the current positions and moving forward, the current token), with each precondition
/// broken with probability 1/5: so about a quarter of them apply, and each violation kind
/// comes up alone or with others.
fn publish_with_broken_preconditions() -> impl Strategy<Value = PublishInput> {
    (
        1usize..4,
        1usize..3,
        proptest::collection::vec((0u64..20, 1u64..10), 1..3),
        proptest::option::of("[ab]"),
        proptest::collection::vec(proptest::bool::weighted(0.2), PRECONDITIONS),
    )
        .prop_map(|(staged, replaced, partitions, token, broken)| {
            let staged: Vec<String> = (0..staged).map(|i| format!("s{i}")).collect();
            let replaced: Vec<String> = (0..replaced).map(|i| format!("r{i}")).collect();
            let row = |split_id: &String, state| ExistingRow {
                split_id: split_id.clone(),
                state,
            };
            let mut input = PublishInput {
                dataset_id: "dataset".into(),
                rows: staged
                    .iter()
                    .map(|id| row(id, SplitState::Staged))
                    .chain(replaced.iter().map(|id| row(id, SplitState::Published)))
                    .collect(),
                checkpoint: partitions
                    .iter()
                    .enumerate()
                    .map(|(i, (from, _))| PartitionPosition {
                        partition: format!("p{i}"),
                        position: *from,
                    })
                    .collect(),
                checkpoint_delta: Some(CheckpointDelta {
                    source: "source".into(),
                    partitions: partitions
                        .iter()
                        .enumerate()
                        .map(|(i, (from, step))| PartitionDelta {
                            partition: format!("p{i}"),
                            from_position: Some(*from),
                            to_position: from + step,
                        })
                        .collect(),
                }),
                publish_token: token.clone(),
                current_publish_token: token,
                staged_split_ids: staged,
                replaced_split_ids: replaced,
            };
            if broken[0] {
                // SplitMissing: the first staged split has no row.
                input.rows.remove(0);
            }
            if broken[1] {
                // NotStaged: the last staged split is already published.
                let last = input.staged_split_ids.len() - 1;
                let id = input.staged_split_ids[last].clone();
                if let Some(r) = input.rows.iter_mut().find(|r| r.split_id == id) {
                    r.state = SplitState::Published;
                }
            }
            if broken[2] {
                // NotPublished: the first replaced split is marked already.
                input
                    .rows
                    .iter_mut()
                    .find(|r| r.split_id == "r0")
                    .expect("r0 has a row")
                    .state = SplitState::MarkedForDeletion;
            }
            if broken[3] {
                // SplitInBoth.
                let id = input.staged_split_ids[0].clone();
                input.replaced_split_ids.push(id);
            }
            if broken[4] {
                // CheckpointMismatch: another publish moved the first partition on.
                input.checkpoint[0].position += 1;
            }
            if broken[5] {
                // StalePublishToken.
                input.publish_token = match input.current_publish_token {
                    Some(_) => Some("stale".into()),
                    None => Some("unexpected".into()),
                };
            }
            input
        })
}

fn arbitrary_publish_input() -> impl Strategy<Value = PublishInput> {
    (
        proptest::collection::vec(split_id(), 0..8),
        proptest::collection::vec(split_id(), 0..8),
        proptest::collection::vec((split_id(), state()), 0..12),
        proptest::option::of(proptest::collection::vec(
            ("[0-3]", proptest::option::of(0u64..20), 0u64..30),
            1..4,
        )),
        proptest::collection::vec(("[0-3]", 0u64..20), 0..4),
        proptest::option::of("[ab]"),
        proptest::option::of("[ab]"),
    )
        .prop_map(
            |(staged, replaced, rows, delta, checkpoint, token, current)| PublishInput {
                dataset_id: "dataset".into(),
                staged_split_ids: staged,
                replaced_split_ids: replaced,
                checkpoint_delta: delta.map(|partitions| CheckpointDelta {
                    source: "source".into(),
                    partitions: partitions
                        .into_iter()
                        .map(|(partition, from_position, to_position)| PartitionDelta {
                            partition,
                            from_position,
                            to_position,
                        })
                        .collect(),
                }),
                publish_token: token,
                rows: rows
                    .into_iter()
                    .map(|(split_id, state)| ExistingRow { split_id, state })
                    .collect(),
                checkpoint: checkpoint
                    .into_iter()
                    .map(|(partition, position)| PartitionPosition {
                        partition,
                        position,
                    })
                    .collect(),
                current_publish_token: current,
            },
        )
}

fn operation_kind() -> impl Strategy<Value = OperationKind> {
    prop_oneof![
        Just(OperationKind::Commit),
        Just(OperationKind::Merge),
        Just(OperationKind::Gc),
        Just(OperationKind::ConfigApply),
        Just(OperationKind::Reconcile),
    ]
}

fn intent_phase() -> impl Strategy<Value = IntentPhase> {
    prop_oneof![
        Just(IntentPhase::Armed),
        Just(IntentPhase::EffectsConfirmed),
        Just(IntentPhase::Abandoned)
    ]
}

/// What the host observes of an operation that stopped just before its publish, with all its
/// effects in place (rows staged, objects whole, the checkpoint at the delta's start, the
/// config at the version it expects), and then, each with probability 1/5 (2/5 for the
/// config), one departure: a row gone, an object gone, a split to publish already published,
/// the checkpoint moved on, another config promoted first, or every effect visible already. Arbitrary observations
/// almost never have everything in place, so without these the roll-forward of a commit or
/// a merge would hardly ever be compared.
fn coherent_intent_observation() -> impl Strategy<Value = IntentObservation> {
    (
        ("op-[0-9]{1,3}", operation_kind(), intent_phase()),
        proptest::bool::weighted(0.25),
        (1usize..4, 0usize..3, any::<bool>()),
        // Another config promoted first is the likeliest departure: it is the only way a
        // config apply blocks, and only in roll-forward mode.
        proptest::array::uniform5(proptest::bool::weighted(0.2)),
        proptest::bool::weighted(0.4),
    )
        .prop_map(
            |((operation_id, kind, phase), live, (planned, replaced, delta), departs, lost)| {
                let departs = [
                    departs[0], departs[1], departs[2], departs[3], lost, departs[4],
                ];
                let planned: Vec<String> = (0..planned).map(|i| format!("s{i}")).collect();
                let replaced: Vec<String> = (0..replaced).map(|i| format!("r{i}")).collect();
                let row = |split_id: &String, state| ExistingRow {
                    split_id: split_id.clone(),
                    state,
                };
                let mut intent = IntentObservation {
                    operation_id,
                    kind,
                    phase,
                    owner_lease_live: live,
                    rows: planned
                        .iter()
                        .map(|id| row(id, SplitState::Staged))
                        .chain(replaced.iter().map(|id| row(id, SplitState::Published)))
                        .collect(),
                    objects: planned
                        .iter()
                        .map(|id| ObjectObservation {
                            split_id: id.clone(),
                            present: true,
                            matches: true,
                        })
                        .collect(),
                    publish_staged: planned.clone(),
                    publish_replaced: replaced.clone(),
                    has_checkpoint_delta: delta,
                    checkpoint_at_from: true,
                    checkpoint_at_to: false,
                    checkpoint_reached_to: false,
                    gc_splits: planned.clone(),
                    mark_splits: Vec::new(),
                    config_at_expected: true,
                    config_applied: false,
                    planned_rows: planned,
                };
                if departs[0] {
                    // The first planned row is gone.
                    intent.rows.remove(0);
                }
                if departs[1] {
                    // The last planned object is gone.
                    let object = intent.objects.last_mut().expect("one object at least");
                    object.present = false;
                    object.matches = false;
                }
                if departs[2]
                    && let Some(first) = intent.rows.first_mut()
                {
                    // A split to publish was published by someone else.
                    first.state = SplitState::Published;
                }
                if departs[3] {
                    // The checkpoint moved on.
                    intent.checkpoint_at_from = false;
                }
                if departs[4] {
                    // Another config change was promoted first.
                    intent.config_at_expected = false;
                }
                if departs[5] {
                    // Everything is visible already: published, replaced, collected, promoted.
                    for row in &mut intent.rows {
                        row.state = if replaced.contains(&row.split_id) {
                            SplitState::MarkedForDeletion
                        } else {
                            SplitState::Published
                        };
                    }
                    intent.checkpoint_at_from = false;
                    // At its end, or moved past it by later commits (ABI 1.3).
                    intent.checkpoint_at_to = !departs[3];
                    intent.checkpoint_reached_to = true;
                    intent.config_applied = true;
                    if intent.kind == OperationKind::Gc {
                        intent.rows.clear();
                    }
                }
                intent
            },
        )
}

fn arbitrary_intent_observation() -> impl Strategy<Value = IntentObservation> {
    (
        // A live lease defers whatever else is observed: keep it to a minority.
        (
            "op-[0-9]{1,3}",
            operation_kind(),
            intent_phase(),
            proptest::bool::weighted(0.3),
        ),
        proptest::collection::vec("s[0-5]", 0..5),
        proptest::collection::vec(("s[0-5]", state()), 0..6),
        proptest::collection::vec(("s[0-5]", any::<bool>(), any::<bool>()), 0..4),
        (
            proptest::collection::vec("s[0-5]", 0..4),
            proptest::collection::vec("s[0-5]", 0..3),
            any::<(bool, bool, bool, bool)>(),
            proptest::collection::vec("s[0-5]", 0..3),
        ),
        (
            proptest::collection::vec("s[0-5]", 0..3),
            any::<(bool, bool)>(),
        ),
    )
        .prop_map(
            |((operation_id, kind, phase, live), planned_rows, rows, objects, publish, other)| {
                let (publish_staged, publish_replaced, (delta, at_from, at_to, past), gc_splits) =
                    publish;
                let (mark_splits, (config_at_expected, config_applied)) = other;
                IntentObservation {
                    operation_id,
                    kind,
                    phase,
                    owner_lease_live: live,
                    planned_rows,
                    rows: rows
                        .into_iter()
                        .map(|(split_id, state)| ExistingRow { split_id, state })
                        .collect(),
                    objects: objects
                        .into_iter()
                        .map(|(split_id, present, matches)| ObjectObservation {
                            split_id,
                            present,
                            matches: present && matches,
                        })
                        .collect(),
                    publish_staged,
                    publish_replaced,
                    has_checkpoint_delta: delta,
                    checkpoint_at_from: at_from,
                    checkpoint_at_to: at_to,
                    checkpoint_reached_to: at_to || past,
                    gc_splits,
                    mark_splits,
                    config_at_expected,
                    config_applied,
                }
            },
        )
}

/// A gc run near the cutoffs: rows last changed around `now - grace` for each grace period,
/// so that both sides of each cutoff are reached.
fn gc_input() -> impl Strategy<Value = GcInput> {
    (
        0u64..5,
        0u64..5,
        proptest::collection::vec(("s[0-9]{1,2}", state(), 0i64..12), 0..8),
    )
        .prop_map(|(staged_grace, deletion_grace, rows)| GcInput {
            dataset_id: "ds".into(),
            now_ms: 10,
            staged_grace_period_ms: staged_grace,
            deletion_grace_period_ms: deletion_grace,
            // The host hands over staged and marked rows only, each id once.
            candidates: rows
                .into_iter()
                .filter(|(_, state, _)| *state != SplitState::Published)
                .map(|(split_id, state, updated_at_ms)| (split_id, (state, updated_at_ms)))
                .collect::<BTreeMap<_, _>>()
                .into_iter()
                .map(|(split_id, (state, updated_at_ms))| GcCandidate {
                    split_id,
                    state,
                    updated_at_ms,
                })
                .collect(),
        })
}

fn reconcile_input() -> impl Strategy<Value = ReconcileInput> {
    (
        any::<i64>(),
        proptest::collection::vec(
            (
                split_id(),
                any::<bool>(),
                any::<bool>(),
                "[{}a-z\":0-9]{0,12}",
                any::<i64>(),
            ),
            0..8,
        ),
    )
        .prop_map(|(now_ms, orphans)| ReconcileInput {
            dataset_id: "dataset".into(),
            now_ms,
            orphans: orphans
                .into_iter()
                .map(
                    |(split_id, same_incarnation, intact, metadata_json, age_ms)| OrphanObject {
                        split_id,
                        same_incarnation,
                        intact,
                        metadata_json,
                        age_ms,
                    },
                )
                .collect(),
        })
}

fn recovery_input() -> impl Strategy<Value = RecoveryInput> {
    (
        // Roll-forward the most: it is the only mode that blocks.
        prop_oneof![
            1 => Just(RecoveryMode::Probe),
            3 => Just(RecoveryMode::RollForward),
            2 => Just(RecoveryMode::Exclusive),
            1 => Just(RecoveryMode::Verify),
        ],
        any::<i64>(),
        proptest::collection::vec(
            prop_oneof![
                arbitrary_intent_observation(),
                coherent_intent_observation()
            ],
            0..10,
        ),
    )
        .prop_map(|(mode, now_ms, intents)| RecoveryInput {
            dataset_id: "dataset".into(),
            mode,
            now_ms,
            intents,
        })
}

/// How many vectors one decision function was given, and how often each outcome came up.
#[derive(Debug, Default)]
struct Spread {
    vectors: Cell<u32>,
    outcomes: RefCell<BTreeMap<String, usize>>,
}

impl Spread {
    fn vector(&self) {
        self.vectors.set(self.vectors.get() + 1);
    }

    fn saw(&self, outcome: impl Into<String>) {
        *self
            .outcomes
            .borrow_mut()
            .entry(outcome.into())
            .or_default() += 1;
    }

    /// Fails unless `vectors` vectors were compared and every outcome of `expected` came up
    /// at least once; returns the spread as text.
    fn check(&self, function: &str, vectors: u32, expected: &[String]) -> String {
        assert_eq!(
            self.vectors.get(),
            vectors,
            "{function}: not every vector was compared"
        );
        let seen = self.outcomes.borrow();
        let missing: Vec<&String> = expected
            .iter()
            .filter(|outcome| !seen.contains_key(*outcome))
            .collect();
        assert!(
            missing.is_empty(),
            "{function}: the vectors never reached {missing:?}; seen: {seen:?}"
        );
        let unexpected: Vec<&String> = seen.keys().filter(|o| !expected.contains(o)).collect();
        assert!(
            unexpected.is_empty(),
            "{function}: outcomes no test expects: {unexpected:?}"
        );
        seen.iter()
            .map(|(outcome, count)| format!("{outcome} {count}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn stage_outcomes() -> Vec<String> {
    let mut outcomes = vec!["insert".to_string(), "overwrite".to_string()];
    for state in SplitState::ALL {
        outcomes.push(format!("skip {state}"));
        if state != SplitState::Staged {
            outcomes.push(format!("reject {state}"));
        }
    }
    outcomes
}

fn stage_outcome(input: &StagePlanInput, planned: &PlannedSplit) -> String {
    let existing = || {
        input
            .existing
            .iter()
            .find(|row| row.split_id == planned.split_id)
            .map_or("no row".to_string(), |row| row.state.to_string())
    };
    match &planned.action {
        StageAction::Insert => "insert".into(),
        StageAction::Overwrite => "overwrite".into(),
        StageAction::Skip(state) => format!("skip {state}"),
        StageAction::Reject(_) => format!("reject {}", existing()),
    }
}

const VIOLATIONS: [ViolationKind; PRECONDITIONS] = [
    ViolationKind::SplitMissing,
    ViolationKind::NotStaged,
    ViolationKind::NotPublished,
    ViolationKind::SplitInBoth,
    ViolationKind::CheckpointMismatch,
    ViolationKind::StalePublishToken,
];

fn publish_outcomes() -> Vec<String> {
    std::iter::once("accepted".to_string())
        .chain(VIOLATIONS.iter().map(|kind| format!("{kind:?}")))
        .collect()
}

/// What one recovery decision is, with the kind of operation it is about.
fn recovery_outcome(kind: OperationKind, decision: &RecoveryDecision) -> String {
    let decision = match decision {
        RecoveryDecision::RollForward => "roll forward",
        RecoveryDecision::RollBack => "roll back",
        RecoveryDecision::Defer(_) => "defer",
        RecoveryDecision::Blocked(_) => "blocked",
        RecoveryDecision::Stale => "stale",
        RecoveryDecision::Abandon(_) => "abandon",
    };
    format!("{kind:?} {decision}")
}

/// Every decision for every kind of operation, except what the policy never decides for a
/// gc: a gc only marks and deletes what is still eligible, so it is always rolled forward.
fn recovery_outcomes() -> Vec<String> {
    let kinds = [
        OperationKind::Commit,
        OperationKind::Merge,
        OperationKind::Gc,
        OperationKind::ConfigApply,
        OperationKind::Reconcile,
    ];
    let decisions = [
        RecoveryDecision::RollForward,
        RecoveryDecision::RollBack,
        RecoveryDecision::Defer(String::new()),
        RecoveryDecision::Blocked(mend_contract::BlockedReason {
            why: String::new(),
            operator_action: String::new(),
        }),
        RecoveryDecision::Stale,
        RecoveryDecision::Abandon(String::new()),
    ];
    kinds
        .iter()
        .flat_map(|kind| {
            decisions
                .iter()
                .filter(move |decision| {
                    let gc_decides = *kind != OperationKind::Gc
                        || matches!(
                            decision,
                            RecoveryDecision::RollForward
                                | RecoveryDecision::Defer(_)
                                | RecoveryDecision::Stale
                        );
                    // Only a commit or a merge is ever abandoned.
                    let abandons = !matches!(decision, RecoveryDecision::Abandon(_))
                        || matches!(kind, OperationKind::Commit | OperationKind::Merge);
                    gc_decides && abandons
                })
                .map(move |decision| recovery_outcome(*kind, decision))
        })
        .collect()
}

/// What one reconcile decision is, with the kind of orphan it is about.
fn reconcile_outcome(orphan: &OrphanObject, action: &ReconcileAction) -> String {
    let orphan = match (orphan.intact, orphan.same_incarnation) {
        (false, _) => "damaged",
        (true, false) => "of an earlier incarnation",
        (true, true) => "whole",
    };
    let action = match action {
        ReconcileAction::Adopt => "adopted",
        ReconcileAction::Discard(_) => "discarded",
    };
    format!("{orphan} {action}")
}

fn reconcile_outcomes() -> Vec<String> {
    [
        "damaged discarded",
        "of an earlier incarnation discarded",
        "whole adopted",
    ]
    .map(String::from)
    .to_vec()
}

/// The same vectors through the wasm component and through the native build must give the
/// same decisions; and the vectors reach every outcome of every decision function, so that
/// the comparison covers each of them.
#[test]
fn component_and_native_build_decide_identically() {
    let policy = PolicyRuntime::default_policy().expect("default policy");
    decides_like_native(&policy, "wasm", 500);
}

/// The same for the default decisions built against the frozen 1.4 contract, which this host
/// still asks its own way (the ids packed, the policy sorting them): a 1.4 component decides
/// on a 1.5 host exactly what it decided on a 1.4 one.
#[test]
fn a_frozen_1_4_component_and_the_native_build_decide_identically() {
    const ABI_1_4_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_ABI_1_4_WASM"));
    let policy = PolicyRuntime::load(ABI_1_4_WASM, PolicyLimits::default()).expect("loads");
    assert_eq!(policy.description().abi_minor, 4);
    decides_like_native(&policy, "wasm 1.4", 300);
}

/// Asks `policy` and the native build of the default policy `vectors` random inputs of each
/// call, fails on the first difference, checks that the inputs reached every outcome of each
/// call, and prints the spread. Any component that claims to decide like `mend-default` (the
/// default component, the JavaScript policy) is held to it.
pub(crate) fn decides_like_native(policy: &PolicyRuntime, label: &str, vectors: u32) {
    // One runner per function: a runner counts its passing cases across runs, so a second
    // run on the same runner would stop at once, having tried nothing.
    let runner = || {
        TestRunner::new(Config {
            cases: vectors,
            ..Config::default()
        })
    };
    let (stage, publish, recovery, reconcile, gc) = (
        Spread::default(),
        Spread::default(),
        Spread::default(),
        Spread::default(),
        Spread::default(),
    );
    runner()
        .run(&stage_input(), |input| {
            let wasm = policy.plan_stage(&input).expect("component decides");
            prop_assert_eq!(&wasm, &mend_default_policy::plan_stage(&input));
            stage.vector();
            for planned in &wasm {
                stage.saw(stage_outcome(&input, planned));
            }
            Ok(())
        })
        .unwrap();
    runner()
        .run(&publish_input(), |input| {
            let wasm = policy.validate_publish(&input).expect("component decides");
            prop_assert_eq!(&wasm, &mend_default_policy::validate_publish(&input));
            publish.vector();
            if wasm.is_empty() {
                publish.saw("accepted");
            }
            for violation in &wasm {
                publish.saw(format!("{:?}", violation.kind));
            }
            Ok(())
        })
        .unwrap();
    runner()
        .run(&recovery_input(), |input| {
            let wasm = policy.decide_recovery(&input).expect("component decides");
            prop_assert_eq!(&wasm, &mend_default_policy::decide_recovery(&input));
            recovery.vector();
            for (intent, decided) in input.intents.iter().zip(&wasm) {
                recovery.saw(recovery_outcome(intent.kind, &decided.decision));
            }
            Ok(())
        })
        .unwrap();
    runner()
        .run(&reconcile_input(), |input| {
            let wasm = policy.plan_reconcile(&input).expect("component decides");
            prop_assert_eq!(&wasm, &mend_default_policy::plan_reconcile(&input));
            reconcile.vector();
            for (orphan, decided) in input.orphans.iter().zip(&wasm) {
                reconcile.saw(reconcile_outcome(orphan, &decided.action));
            }
            Ok(())
        })
        .unwrap();
    runner()
        .run(&gc_input(), |input| {
            let wasm = policy.plan_gc(&input).expect("component decides");
            prop_assert_eq!(&wasm, &mend_default_policy::plan_gc(&input));
            gc.vector();
            for candidate in &input.candidates {
                let planned = wasm.mark.contains(&candidate.split_id)
                    || wasm.delete.contains(&candidate.split_id);
                gc.saw(format!(
                    "{} {}",
                    candidate.state,
                    if planned { "collected" } else { "kept" }
                ));
            }
            Ok(())
        })
        .unwrap();
    println!(
        "differential: {vectors} stage, {vectors} publish, {vectors} recovery, {vectors} reconcile and {vectors} gc vectors identical in {label} and native"
    );
    let stage = stage.check("plan_stage", vectors, &stage_outcomes());
    let publish = publish.check("validate_publish", vectors, &publish_outcomes());
    let recovery = recovery.check("decide_recovery", vectors, &recovery_outcomes());
    let reconcile = reconcile.check("plan_reconcile", vectors, &reconcile_outcomes());
    let gc_outcomes = [
        "staged collected",
        "staged kept",
        "marked_for_deletion collected",
        "marked_for_deletion kept",
    ]
    .map(String::from);
    let gc = gc.check("plan_gc", vectors, &gc_outcomes);
    println!("differential outcomes ({label}), plan_stage (per split): {stage}");
    println!(
        "differential outcomes ({label}), validate_publish (per vector; accepted or each violation): {publish}"
    );
    println!("differential outcomes ({label}), decide_recovery (per intent): {recovery}");
    println!("differential outcomes ({label}), plan_reconcile (per orphan): {reconcile}");
    println!("differential outcomes ({label}), plan_gc (per candidate): {gc}");
}

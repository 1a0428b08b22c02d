//! The policy component as the host runs it: the import allowlist, containment of traps and
//! limits, and a differential test against the same decisions built natively.

use std::time::Duration;

use mend::PolicyError;
use mend::runtime::{
    ALLOWED_IMPORTS, DEFAULT_POLICY_WASM, PolicyLimits, PolicyRuntime, imports_of,
};
use mend_policy::{
    CheckpointDelta, ExistingRow, IntentObservation, IntentPhase, ObjectObservation, OperationKind,
    OrphanObject, PartitionDelta, PartitionPosition, PublishInput, ReconcileInput, RecoveryInput,
    RecoveryMode, SplitState, StageMode, StagePlanInput,
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
    let error = small_memory
        .plan_stage(&request_of(40_000, 64))
        .unwrap_err();
    assert!(
        matches!(error, PolicyError::MemoryExhausted { .. }),
        "{error:?}"
    );
    let small = request_of(10, 8);
    assert_eq!(
        small_memory.plan_stage(&small).unwrap(),
        mend_policy::plan_stage(&small),
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

fn publish_input() -> impl Strategy<Value = PublishInput> {
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

fn intent_observation() -> impl Strategy<Value = IntentObservation> {
    (
        (
            "op-[0-9]{1,3}",
            prop_oneof![
                Just(OperationKind::Commit),
                Just(OperationKind::Merge),
                Just(OperationKind::Gc),
                Just(OperationKind::ConfigApply),
                Just(OperationKind::Reconcile),
            ],
            prop_oneof![
                Just(IntentPhase::Armed),
                Just(IntentPhase::EffectsConfirmed)
            ],
            any::<bool>(),
        ),
        proptest::collection::vec("s[0-5]", 0..5),
        proptest::collection::vec(("s[0-5]", state()), 0..6),
        proptest::collection::vec(("s[0-5]", any::<bool>(), any::<bool>()), 0..4),
        (
            proptest::collection::vec("s[0-5]", 0..4),
            proptest::collection::vec("s[0-5]", 0..3),
            any::<(bool, bool, bool)>(),
            proptest::collection::vec("s[0-5]", 0..3),
        ),
        (
            proptest::collection::vec("s[0-5]", 0..3),
            any::<(bool, bool)>(),
        ),
    )
        .prop_map(
            |((operation_id, kind, phase, live), planned_rows, rows, objects, publish, other)| {
                let (publish_staged, publish_replaced, (delta, at_from, at_to), gc_splits) =
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
                    gc_splits,
                    mark_splits,
                    config_at_expected,
                    config_applied,
                }
            },
        )
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
        prop_oneof![
            Just(RecoveryMode::Probe),
            Just(RecoveryMode::RollForward),
            Just(RecoveryMode::Exclusive),
            Just(RecoveryMode::Verify),
        ],
        any::<i64>(),
        proptest::collection::vec(intent_observation(), 0..6),
    )
        .prop_map(|(mode, now_ms, intents)| RecoveryInput {
            dataset_id: "dataset".into(),
            mode,
            now_ms,
            intents,
        })
}

/// The same vectors through the wasm component and through the native build must give the
/// same decisions.
#[test]
fn component_and_native_build_decide_identically() {
    const VECTORS: u32 = 300;
    let policy = PolicyRuntime::default_policy().expect("default policy");
    let mut runner = TestRunner::new(Config {
        cases: VECTORS,
        ..Config::default()
    });
    runner
        .run(&stage_input(), |input| {
            let wasm = policy.plan_stage(&input).expect("component decides");
            prop_assert_eq!(wasm, mend_policy::plan_stage(&input));
            Ok(())
        })
        .unwrap();
    runner
        .run(&publish_input(), |input| {
            let wasm = policy.validate_publish(&input).expect("component decides");
            prop_assert_eq!(wasm, mend_policy::validate_publish(&input));
            Ok(())
        })
        .unwrap();
    runner
        .run(&recovery_input(), |input| {
            let wasm = policy.decide_recovery(&input).expect("component decides");
            prop_assert_eq!(wasm, mend_policy::decide_recovery(&input));
            Ok(())
        })
        .unwrap();
    runner
        .run(&reconcile_input(), |input| {
            let wasm = policy.plan_reconcile(&input).expect("component decides");
            prop_assert_eq!(wasm, mend_policy::plan_reconcile(&input));
            Ok(())
        })
        .unwrap();
    println!(
        "differential: {VECTORS} stage, {VECTORS} publish, {VECTORS} recovery and {VECTORS} reconcile vectors identical in wasm and native"
    );
}

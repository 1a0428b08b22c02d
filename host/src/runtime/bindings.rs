//! The WIT glue on the host side: wasmtime's generated bindings for the `policy` world and
//! conversions to and from the plain types of `mend_contract`. Only types are converted here;
//! nothing is decided.
//!
//! Inputs cross as borrowed views of the plain types (`ownership: Borrowing`): a decision over
//! 10,000 splits copies each id once, into the sandbox, instead of first into an owned WIT copy
//! that is dropped after the call. Each `with_*` builds the view's lists of references and
//! lends the view to `decide`.

use mend_contract as plain;

use crate::error::PolicyError;
use crate::invariants::IndexedDecision;

wasmtime::component::bindgen!({
    world: "policy",
    path: "../wit",
    ownership: Borrowing { duplicate_if_necessary: false },
});

pub(crate) use mend::policy::types as wit;

/// A stage plan's input as ABI 1.5 carries it: the request's entries grouped by id, with each
/// group's row ([`plain::GroupedRequest`]). The host sorts the request natively, so that the
/// policy decides on integers and compares no id: in wasm, the sorting and comparing of ids
/// was most of a decision's time.
pub(crate) fn with_stage_plan_input<R>(
    dataset_id: &str,
    mode: plain::StageMode,
    split_ids: &[String],
    existing: &[plain::ExistingRow],
    decide: impl FnOnce(&wit::StagePlanInput<'_>) -> R,
) -> Result<R, PolicyError> {
    let grouped = plain::GroupedRequest::of(
        split_ids.iter().map(String::as_str),
        existing
            .iter()
            .map(|row| (row.split_id.as_str(), row.state)),
    )
    .map_err(|plain::BatchTooLarge| PolicyError::Incompatible {
        reason: "a stage request has more entries than a u32 indexes".into(),
    })?;
    Ok(decide(&wit::StagePlanInput {
        dataset_id,
        mode: wit_stage_mode(mode),
        entries: &grouped.entries,
        ends: &grouped.ends,
        rows: &grouped.rows,
    }))
}

/// A stage plan of ABI 1.5 (1.4's converted, [`v1_4::StagePlan::into_codes`]) as decisions by
/// index: the lists must be of one length, each index must be one of the request's
/// `entries`, each action a case of `planned-action`, and there must be one reason per
/// rejection. Anything else is the policy's error, never a plan.
pub(crate) fn stage_plan(
    plan: wit::StagePlan,
    entries: usize,
) -> Result<Vec<IndexedDecision>, PolicyError> {
    let broken = |what: String| PolicyError::Incompatible {
        reason: format!("plan-stage answered a malformed plan: {what}"),
    };
    if plan.request_indices.len() != plan.actions.len() {
        return Err(broken(format!(
            "{} request indices for {} actions",
            plan.request_indices.len(),
            plan.actions.len()
        )));
    }
    let mut rejections = 0;
    for &code in &plan.actions {
        match planned_action(code) {
            Some(wit::PlannedAction::Reject) => rejections += 1,
            Some(_) => {}
            None => {
                return Err(broken(format!(
                    "action {code}, which is no case of planned-action"
                )));
            }
        }
    }
    if rejections != plan.reasons.len() {
        return Err(broken(format!(
            "{} reasons for {rejections} rejections",
            plan.reasons.len()
        )));
    }
    if let Some(index) = plan
        .request_indices
        .iter()
        .find(|&&index| index as usize >= entries)
    {
        return Err(broken(format!(
            "request index {index}, but the request has {entries} entries"
        )));
    }
    let mut reasons = plan.reasons.into_iter();
    Ok(plan
        .request_indices
        .iter()
        .zip(plan.actions)
        .map(|(&request_index, code)| IndexedDecision {
            request_index,
            action: match planned_action(code).expect("every action checked above") {
                wit::PlannedAction::Insert => plain::StageAction::Insert,
                wit::PlannedAction::Overwrite => plain::StageAction::Overwrite,
                wit::PlannedAction::SkipStaged => {
                    plain::StageAction::Skip(plain::SplitState::Staged)
                }
                wit::PlannedAction::SkipPublished => {
                    plain::StageAction::Skip(plain::SplitState::Published)
                }
                wit::PlannedAction::SkipMarkedForDeletion => {
                    plain::StageAction::Skip(plain::SplitState::MarkedForDeletion)
                }
                wit::PlannedAction::Reject => plain::StageAction::Reject(
                    reasons
                        .next()
                        .expect("one reason per rejection, counted above"),
                ),
            },
        })
        .collect())
}

/// The `planned-action` case of index `code` (ABI 1.5 carries actions as bytes), if any.
fn planned_action(code: u8) -> Option<wit::PlannedAction> {
    const CASES: [wit::PlannedAction; 6] = [
        wit::PlannedAction::Insert,
        wit::PlannedAction::Overwrite,
        wit::PlannedAction::SkipStaged,
        wit::PlannedAction::SkipPublished,
        wit::PlannedAction::SkipMarkedForDeletion,
        wit::PlannedAction::Reject,
    ];
    CASES.get(usize::from(code)).copied()
}

/// The index of a `planned-action` case, as ABI 1.5 carries it.
fn planned_action_code(action: wit::PlannedAction) -> u8 {
    match action {
        wit::PlannedAction::Insert => 0,
        wit::PlannedAction::Overwrite => 1,
        wit::PlannedAction::SkipStaged => 2,
        wit::PlannedAction::SkipPublished => 3,
        wit::PlannedAction::SkipMarkedForDeletion => 4,
        wit::PlannedAction::Reject => 5,
    }
}

fn wit_stage_mode(mode: plain::StageMode) -> wit::StageMode {
    match mode {
        plain::StageMode::Upsert => wit::StageMode::Upsert,
        plain::StageMode::CreateOnly => wit::StageMode::CreateOnly,
    }
}

/// The stage plan of ABI 1.4, which a 1.5 host still asks a 1.4 policy in: the request's ids
/// and the rows' ids packed in buffers, the policy sorting and comparing them itself, and the
/// actions answered as a list of enums. Every other function of 1.4 has the types it has in
/// 1.5, so only the stage plan's types are declared here, by hand, as 1.4 declared them.
pub(crate) mod v1_4 {
    use wasmtime::component::{ComponentType, Lift, Lower};

    use super::{PolicyError, plain, planned_action_code, wit, wit_split_state, wit_stage_mode};

    #[derive(ComponentType, Lower)]
    #[component(record)]
    pub(crate) struct SplitIdBatch<'a> {
        bytes: &'a [u8],
        ends: &'a [u32],
    }

    #[derive(ComponentType, Lower)]
    #[component(record)]
    pub(crate) struct ExistingRows<'a> {
        #[component(name = "split-ids")]
        split_ids: SplitIdBatch<'a>,
        states: &'a [wit::SplitState],
    }

    #[derive(ComponentType, Lower)]
    #[component(record)]
    pub(crate) struct StagePlanInput<'a> {
        #[component(name = "dataset-id")]
        dataset_id: &'a str,
        mode: wit::StageMode,
        #[component(name = "split-ids")]
        split_ids: SplitIdBatch<'a>,
        existing: ExistingRows<'a>,
    }

    #[derive(ComponentType, Lift)]
    #[component(record)]
    pub(crate) struct StagePlan {
        #[component(name = "request-indices")]
        request_indices: Vec<u32>,
        actions: Vec<wit::PlannedAction>,
        reasons: Vec<String>,
    }

    impl StagePlan {
        /// The plan as 1.5 answers it, each action its case's index, for the checks both
        /// contracts share ([`super::stage_plan`]).
        pub(crate) fn into_codes(self) -> wit::StagePlan {
            wit::StagePlan {
                request_indices: self.request_indices,
                actions: self.actions.into_iter().map(planned_action_code).collect(),
                reasons: self.reasons,
            }
        }
    }

    /// The request's ids packed in one buffer, and the rows' ids in another, with their
    /// states in the same order.
    pub(crate) fn with_stage_plan_input<R>(
        dataset_id: &str,
        mode: plain::StageMode,
        split_ids: &[String],
        existing: &[plain::ExistingRow],
        decide: impl FnOnce(&StagePlanInput<'_>) -> R,
    ) -> Result<R, PolicyError> {
        let too_large = |plain::BatchTooLarge| PolicyError::Incompatible {
            reason: "a stage request's ids exceed the 4 GiB a packed batch holds".into(),
        };
        let packed =
            plain::PackedSplitIds::pack(split_ids.iter().map(String::as_str)).map_err(too_large)?;
        let row_ids = plain::PackedSplitIds::pack(existing.iter().map(|row| row.split_id.as_str()))
            .map_err(too_large)?;
        let states: Vec<wit::SplitState> = existing
            .iter()
            .map(|row| wit_split_state(row.state))
            .collect();
        Ok(decide(&StagePlanInput {
            dataset_id,
            mode: wit_stage_mode(mode),
            split_ids: SplitIdBatch {
                bytes: &packed.bytes,
                ends: &packed.ends,
            },
            existing: ExistingRows {
                split_ids: SplitIdBatch {
                    bytes: &row_ids.bytes,
                    ends: &row_ids.ends,
                },
                states: &states,
            },
        }))
    }
}

/// The stage plan of ABI 1.3, which a 1.5 host still asks a 1.3 policy in: the ids as a list
/// of strings, the rows and decisions naming theirs. Every other function of 1.3 has the
/// types it has in 1.4 and 1.5, so only the stage plan's types are declared here, by hand, as
/// 1.3 declared them.
pub(crate) mod v1_3 {
    use wasmtime::component::{ComponentType, Lift, Lower};

    use super::{IndexedDecision, PolicyError, plain, split_state, strs, wit, wit_stage_mode};

    #[derive(ComponentType, Lower)]
    #[component(record)]
    pub(crate) struct StagePlanInput<'a> {
        #[component(name = "dataset-id")]
        dataset_id: &'a str,
        mode: wit::StageMode,
        #[component(name = "split-ids")]
        split_ids: &'a [&'a str],
        existing: &'a [wit::ExistingRow<'a>],
    }

    #[derive(ComponentType, Lift)]
    #[component(variant)]
    pub(crate) enum StageAction {
        #[component(name = "insert")]
        Insert,
        #[component(name = "overwrite")]
        Overwrite,
        #[component(name = "skip")]
        Skip(wit::SplitState),
        #[component(name = "reject")]
        Reject(String),
    }

    #[derive(ComponentType, Lift)]
    #[component(record)]
    pub(crate) struct PlannedSplit {
        #[component(name = "split-id")]
        pub(crate) split_id: String,
        #[component(name = "request-index")]
        request_index: u32,
        pub(crate) action: StageAction,
    }

    pub(crate) fn with_stage_plan_input<R>(
        dataset_id: &str,
        mode: plain::StageMode,
        split_ids: &[String],
        existing: &[plain::ExistingRow],
        decide: impl FnOnce(&StagePlanInput<'_>) -> R,
    ) -> R {
        let split_ids = strs(split_ids);
        let existing: Vec<_> = existing.iter().map(super::existing_row).collect();
        decide(&StagePlanInput {
            dataset_id,
            mode: wit_stage_mode(mode),
            split_ids: &split_ids,
            existing: &existing,
        })
    }

    /// A 1.3 decision by index, once its name is the one at its index: a decision naming
    /// one split and taking another's entry is the policy's error, never a plan.
    pub(crate) fn indexed_decision(
        planned: PlannedSplit,
        split_ids: &[String],
    ) -> Result<IndexedDecision, PolicyError> {
        let entry = split_ids.get(planned.request_index as usize);
        if entry != Some(&planned.split_id) {
            return Err(PolicyError::Incompatible {
                reason: format!(
                    "plan-stage took split {:?} from request entry {}, which is {}",
                    planned.split_id,
                    planned.request_index,
                    entry.map_or("past the request's end".to_string(), |id| format!("{id:?}"))
                ),
            });
        }
        Ok(IndexedDecision {
            request_index: planned.request_index,
            action: match planned.action {
                StageAction::Insert => plain::StageAction::Insert,
                StageAction::Overwrite => plain::StageAction::Overwrite,
                StageAction::Skip(state) => plain::StageAction::Skip(split_state(state)),
                StageAction::Reject(reason) => plain::StageAction::Reject(reason),
            },
        })
    }
}

/// The owned parts of one publish input that its borrowed view points into.
struct PublishParts<'a> {
    staged: Vec<&'a str>,
    replaced: Vec<&'a str>,
    delta_partitions: Vec<wit::PartitionDelta<'a>>,
    rows: Vec<wit::ExistingRow<'a>>,
    checkpoint: Vec<wit::PartitionPosition<'a>>,
}

fn publish_parts(input: &plain::PublishInput) -> PublishParts<'_> {
    PublishParts {
        staged: strs(&input.staged_split_ids),
        replaced: strs(&input.replaced_split_ids),
        delta_partitions: input
            .checkpoint_delta
            .iter()
            .flat_map(|delta| &delta.partitions)
            .map(|p| wit::PartitionDelta {
                partition: &p.partition,
                from_position: p.from_position,
                to_position: p.to_position,
            })
            .collect(),
        rows: input.rows.iter().map(existing_row).collect(),
        checkpoint: input
            .checkpoint
            .iter()
            .map(|p| wit::PartitionPosition {
                partition: &p.partition,
                position: p.position,
            })
            .collect(),
    }
}

fn publish_view<'a>(
    input: &'a plain::PublishInput,
    parts: &'a PublishParts<'a>,
) -> wit::PublishInput<'a> {
    wit::PublishInput {
        dataset_id: &input.dataset_id,
        staged_split_ids: &parts.staged,
        replaced_split_ids: &parts.replaced,
        checkpoint_delta: input
            .checkpoint_delta
            .as_ref()
            .map(|delta| wit::CheckpointDelta {
                source: &delta.source,
                partitions: &parts.delta_partitions,
            }),
        publish_token: input.publish_token.as_deref(),
        rows: &parts.rows,
        checkpoint: &parts.checkpoint,
        current_publish_token: input.current_publish_token.as_deref(),
    }
}

/// One publish input, for `validate-publish` (ABI 1.3).
pub(crate) fn with_publish_input<R>(
    input: &plain::PublishInput,
    decide: impl FnOnce(&wit::PublishInput<'_>) -> R,
) -> R {
    let parts = publish_parts(input);
    decide(&publish_view(input, &parts))
}

/// A batch of publish inputs, for `validate-publishes` (ABI 1.4).
pub(crate) fn with_publish_inputs<R>(
    inputs: &[plain::PublishInput],
    decide: impl FnOnce(&[wit::PublishInput<'_>]) -> R,
) -> R {
    let parts: Vec<PublishParts<'_>> = inputs.iter().map(publish_parts).collect();
    let views: Vec<wit::PublishInput<'_>> = inputs
        .iter()
        .zip(&parts)
        .map(|(input, parts)| publish_view(input, parts))
        .collect();
    decide(&views)
}

pub(crate) fn publish_violation(violation: wit::PublishViolation) -> plain::PublishViolation {
    plain::PublishViolation {
        kind: match violation.kind {
            wit::ViolationKind::SplitMissing => plain::ViolationKind::SplitMissing,
            wit::ViolationKind::NotStaged => plain::ViolationKind::NotStaged,
            wit::ViolationKind::NotPublished => plain::ViolationKind::NotPublished,
            wit::ViolationKind::SplitInBoth => plain::ViolationKind::SplitInBoth,
            wit::ViolationKind::CheckpointMismatch => plain::ViolationKind::CheckpointMismatch,
            wit::ViolationKind::StalePublishToken => plain::ViolationKind::StalePublishToken,
        },
        subjects: violation.subjects,
        message: violation.message,
    }
}

pub(crate) fn description(description: wit::PolicyDescription) -> plain::PolicyDescription {
    plain::PolicyDescription {
        name: description.name,
        version: description.version,
        abi_major: description.abi_major,
        abi_minor: description.abi_minor,
        semantics_revision: description.semantics_revision,
        required_capabilities: description.required_capabilities,
    }
}

fn existing_row(row: &plain::ExistingRow) -> wit::ExistingRow<'_> {
    wit::ExistingRow {
        split_id: &row.split_id,
        state: wit_split_state(row.state),
    }
}

fn strs(strings: &[String]) -> Vec<&str> {
    strings.iter().map(String::as_str).collect()
}

fn wit_split_state(state: plain::SplitState) -> wit::SplitState {
    match state {
        plain::SplitState::Staged => wit::SplitState::Staged,
        plain::SplitState::Published => wit::SplitState::Published,
        plain::SplitState::MarkedForDeletion => wit::SplitState::MarkedForDeletion,
    }
}

fn split_state(state: wit::SplitState) -> plain::SplitState {
    match state {
        wit::SplitState::Staged => plain::SplitState::Staged,
        wit::SplitState::Published => plain::SplitState::Published,
        wit::SplitState::MarkedForDeletion => plain::SplitState::MarkedForDeletion,
    }
}

/// The lists of one intent's observation, which its view borrows: the same in every
/// contract's view of an intent (`older_recovery` builds 1.1's and 1.2's from them).
pub(crate) struct IntentLists<'a> {
    pub(crate) planned_rows: Vec<&'a str>,
    pub(crate) rows: Vec<wit::ExistingRow<'a>>,
    pub(crate) objects: Vec<wit::ObjectObservation<'a>>,
    pub(crate) publish_staged: Vec<&'a str>,
    pub(crate) publish_replaced: Vec<&'a str>,
    pub(crate) gc_splits: Vec<&'a str>,
    pub(crate) mark_splits: Vec<&'a str>,
}

pub(crate) fn intent_lists(intent: &plain::IntentObservation) -> IntentLists<'_> {
    IntentLists {
        planned_rows: strs(&intent.planned_rows),
        rows: intent.rows.iter().map(existing_row).collect(),
        objects: intent
            .objects
            .iter()
            .map(|object| wit::ObjectObservation {
                split_id: &object.split_id,
                present: object.present,
                matches: object.matches,
            })
            .collect(),
        publish_staged: strs(&intent.publish_staged),
        publish_replaced: strs(&intent.publish_replaced),
        gc_splits: strs(&intent.gc_splits),
        mark_splits: strs(&intent.mark_splits),
    }
}

pub(crate) fn wit_operation_kind(kind: plain::OperationKind) -> wit::OperationKind {
    match kind {
        plain::OperationKind::Commit => wit::OperationKind::Commit,
        plain::OperationKind::Merge => wit::OperationKind::Merge,
        plain::OperationKind::Gc => wit::OperationKind::Gc,
        plain::OperationKind::ConfigApply => wit::OperationKind::ConfigApply,
        plain::OperationKind::Reconcile => wit::OperationKind::Reconcile,
    }
}

pub(crate) fn wit_recovery_mode(mode: plain::RecoveryMode) -> wit::RecoveryMode {
    match mode {
        plain::RecoveryMode::Probe => wit::RecoveryMode::Probe,
        plain::RecoveryMode::RollForward => wit::RecoveryMode::RollForward,
        plain::RecoveryMode::Exclusive => wit::RecoveryMode::Exclusive,
        plain::RecoveryMode::Verify => wit::RecoveryMode::Verify,
    }
}

pub(crate) fn with_recovery_input<R>(
    input: &plain::RecoveryInput,
    decide: impl FnOnce(&wit::RecoveryInput<'_>) -> R,
) -> R {
    let lists: Vec<IntentLists<'_>> = input.intents.iter().map(intent_lists).collect();
    let intents: Vec<_> = input
        .intents
        .iter()
        .zip(&lists)
        .map(|(intent, lists)| wit::IntentObservation {
            operation_id: &intent.operation_id,
            kind: wit_operation_kind(intent.kind),
            phase: match intent.phase {
                plain::IntentPhase::Armed => wit::IntentPhase::Armed,
                plain::IntentPhase::EffectsConfirmed => wit::IntentPhase::EffectsConfirmed,
                plain::IntentPhase::Abandoned => wit::IntentPhase::Abandoned,
            },
            owner_lease_live: intent.owner_lease_live,
            planned_rows: &lists.planned_rows,
            rows: &lists.rows,
            objects: &lists.objects,
            publish_staged: &lists.publish_staged,
            publish_replaced: &lists.publish_replaced,
            has_checkpoint_delta: intent.has_checkpoint_delta,
            checkpoint_at_from: intent.checkpoint_at_from,
            checkpoint_at_to: intent.checkpoint_at_to,
            checkpoint_reached_to: intent.checkpoint_reached_to,
            gc_splits: &lists.gc_splits,
            mark_splits: &lists.mark_splits,
            config_at_expected: intent.config_at_expected,
            config_applied: intent.config_applied,
        })
        .collect();
    decide(&wit::RecoveryInput {
        dataset_id: &input.dataset_id,
        mode: wit_recovery_mode(input.mode),
        now_ms: input.now_ms,
        intents: &intents,
    })
}

pub(crate) fn intent_decision(decision: wit::IntentDecision) -> plain::IntentDecision {
    plain::IntentDecision {
        operation_id: decision.operation_id,
        decision: match decision.decision {
            wit::RecoveryDecision::RollForward => plain::RecoveryDecision::RollForward,
            wit::RecoveryDecision::RollBack => plain::RecoveryDecision::RollBack,
            wit::RecoveryDecision::Defer(why) => plain::RecoveryDecision::Defer(why),
            wit::RecoveryDecision::Blocked(reason) => {
                plain::RecoveryDecision::Blocked(plain::BlockedReason {
                    why: reason.why,
                    operator_action: reason.operator_action,
                })
            }
            wit::RecoveryDecision::Stale => plain::RecoveryDecision::Stale,
            wit::RecoveryDecision::Abandon(why) => plain::RecoveryDecision::Abandon(why),
        },
    }
}

pub(crate) fn with_reconcile_input<R>(
    input: &plain::ReconcileInput,
    decide: impl FnOnce(&wit::ReconcileInput<'_>) -> R,
) -> R {
    let orphans: Vec<_> = input
        .orphans
        .iter()
        .map(|orphan| wit::OrphanObject {
            split_id: &orphan.split_id,
            same_incarnation: orphan.same_incarnation,
            intact: orphan.intact,
            metadata_json: &orphan.metadata_json,
            age_ms: orphan.age_ms,
        })
        .collect();
    decide(&wit::ReconcileInput {
        dataset_id: &input.dataset_id,
        now_ms: input.now_ms,
        orphans: &orphans,
    })
}

pub(crate) fn reconcile_decision(decision: wit::ReconcileDecision) -> plain::ReconcileDecision {
    plain::ReconcileDecision {
        split_id: decision.split_id,
        action: match decision.action {
            wit::ReconcileAction::Adopt => plain::ReconcileAction::Adopt,
            wit::ReconcileAction::Discard(why) => plain::ReconcileAction::Discard(why),
        },
    }
}

pub(crate) fn with_gc_input<R>(
    input: &plain::GcInput,
    decide: impl FnOnce(&wit::GcInput<'_>) -> R,
) -> R {
    let candidates: Vec<_> = input
        .candidates
        .iter()
        .map(|candidate| wit::GcCandidate {
            split_id: &candidate.split_id,
            state: wit_split_state(candidate.state),
            updated_at_ms: candidate.updated_at_ms,
        })
        .collect();
    decide(&wit::GcInput {
        dataset_id: &input.dataset_id,
        now_ms: input.now_ms,
        staged_grace_period_ms: input.staged_grace_period_ms,
        deletion_grace_period_ms: input.deletion_grace_period_ms,
        candidates: &candidates,
    })
}

pub(crate) fn gc_plan(plan: wit::GcPlan) -> plain::GcPlan {
    plain::GcPlan {
        mark: plan.mark,
        delete: plan.delete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(indices: &[u32], actions: &[wit::PlannedAction], reasons: &[&str]) -> wit::StagePlan {
        wit::StagePlan {
            request_indices: indices.to_vec(),
            actions: actions.iter().copied().map(planned_action_code).collect(),
            reasons: reasons.iter().map(|why| why.to_string()).collect(),
        }
    }

    /// A malformed plan is the policy's error, never a plan: each way of breaking it is
    /// refused, and a well-formed one reads back decision by decision.
    #[test]
    fn a_malformed_stage_plan_is_refused_and_a_sound_one_read() {
        use wit::PlannedAction::{Insert, Reject, SkipPublished};
        let mut unknown_action = plan(&[0], &[Insert], &[]);
        unknown_action.actions[0] = 6;
        let refused = [
            plan(&[0, 1], &[Insert], &[]),
            plan(&[0], &[Reject], &[]),
            plan(&[0], &[Insert], &["no rejection to explain"]),
            plan(&[2], &[Insert], &[]),
            unknown_action,
        ];
        for (case, broken) in refused.into_iter().enumerate() {
            let error = stage_plan(broken, 2).expect_err("a malformed plan is refused");
            assert!(
                matches!(&error, PolicyError::Incompatible { reason } if reason.contains("malformed plan")),
                "case {case}: {error}"
            );
        }
        for code in 0..=u8::MAX {
            match planned_action(code) {
                Some(action) => assert_eq!(planned_action_code(action), code),
                None => assert!(code >= 6, "{code} is a case"),
            }
        }
        let read = stage_plan(plan(&[1, 0], &[Reject, SkipPublished], &["why"]), 2)
            .expect("a sound plan reads");
        assert_eq!(
            read,
            [
                IndexedDecision {
                    request_index: 1,
                    action: plain::StageAction::Reject("why".into()),
                },
                IndexedDecision {
                    request_index: 0,
                    action: plain::StageAction::Skip(plain::SplitState::Published),
                },
            ]
        );
    }
}

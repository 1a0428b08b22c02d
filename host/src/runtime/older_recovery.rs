//! How this host asks a policy built against contract 1.1 or 1.2 to decide recovery: in the
//! types of that contract, declared here by hand as it declared them, about the intents it can
//! see.
//!
//! What an older contract cannot express is never shown to its policy as something else:
//!
//! - an intent in phase `abandoned` (1.3 added it) is not asked about: an older policy would
//!   take it for an armed or a confirmed intent and might roll it forward. It is deferred,
//!   saying that a policy of contract 1.3 or newer finishes abandoning it.
//! - on 1.1, a config-apply or reconcile intent is not asked about either: 1.1 has no
//!   observation of their effects (`mark-splits`, `config-at-expected`, `config-applied`,
//!   added in 1.2). Deferred the same way, naming 1.2.
//!
//! A deferred intent executes nothing and stays for the next sweep, so nothing an older
//! policy could not judge is ever done in its name. Every other intent gets the policy's own
//! answer, in the input's order. An older decision has no `abandon`, so it never answers one.

use mend_contract as plain;
use wasmtime::component::{ComponentType, Lift, Lower};

use super::bindings::{IntentLists, intent_lists, wit, wit_operation_kind, wit_recovery_mode};
use super::compat::Calls;
use crate::error::PolicyError;

/// 1.1's and 1.2's `intent-phase`: no `abandoned`.
#[derive(ComponentType, Lower, Clone, Copy)]
#[component(enum)]
#[repr(u8)]
pub(crate) enum IntentPhase {
    #[component(name = "armed")]
    Armed,
    #[component(name = "effects-confirmed")]
    EffectsConfirmed,
}

/// 1.2's `intent-observation`: 1.3's without `checkpoint-reached-to`.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(crate) struct IntentObservation1_2<'a> {
    #[component(name = "operation-id")]
    operation_id: &'a str,
    kind: wit::OperationKind,
    phase: IntentPhase,
    #[component(name = "owner-lease-live")]
    owner_lease_live: bool,
    #[component(name = "planned-rows")]
    planned_rows: &'a [&'a str],
    rows: &'a [wit::ExistingRow<'a>],
    objects: &'a [wit::ObjectObservation<'a>],
    #[component(name = "publish-staged")]
    publish_staged: &'a [&'a str],
    #[component(name = "publish-replaced")]
    publish_replaced: &'a [&'a str],
    #[component(name = "has-checkpoint-delta")]
    has_checkpoint_delta: bool,
    #[component(name = "checkpoint-at-from")]
    checkpoint_at_from: bool,
    #[component(name = "checkpoint-at-to")]
    checkpoint_at_to: bool,
    #[component(name = "gc-splits")]
    gc_splits: &'a [&'a str],
    #[component(name = "mark-splits")]
    mark_splits: &'a [&'a str],
    #[component(name = "config-at-expected")]
    config_at_expected: bool,
    #[component(name = "config-applied")]
    config_applied: bool,
}

/// 1.1's `intent-observation`: 1.2's without the observations of config-apply and reconcile
/// intents.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(crate) struct IntentObservation1_1<'a> {
    #[component(name = "operation-id")]
    operation_id: &'a str,
    kind: wit::OperationKind,
    phase: IntentPhase,
    #[component(name = "owner-lease-live")]
    owner_lease_live: bool,
    #[component(name = "planned-rows")]
    planned_rows: &'a [&'a str],
    rows: &'a [wit::ExistingRow<'a>],
    objects: &'a [wit::ObjectObservation<'a>],
    #[component(name = "publish-staged")]
    publish_staged: &'a [&'a str],
    #[component(name = "publish-replaced")]
    publish_replaced: &'a [&'a str],
    #[component(name = "has-checkpoint-delta")]
    has_checkpoint_delta: bool,
    #[component(name = "checkpoint-at-from")]
    checkpoint_at_from: bool,
    #[component(name = "checkpoint-at-to")]
    checkpoint_at_to: bool,
    #[component(name = "gc-splits")]
    gc_splits: &'a [&'a str],
}

/// 1.2's `recovery-input`.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(crate) struct RecoveryInput1_2<'a> {
    #[component(name = "dataset-id")]
    dataset_id: &'a str,
    mode: wit::RecoveryMode,
    #[component(name = "now-ms")]
    now_ms: i64,
    intents: &'a [IntentObservation1_2<'a>],
}

/// 1.1's `recovery-input`.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(crate) struct RecoveryInput1_1<'a> {
    #[component(name = "dataset-id")]
    dataset_id: &'a str,
    mode: wit::RecoveryMode,
    #[component(name = "now-ms")]
    now_ms: i64,
    intents: &'a [IntentObservation1_1<'a>],
}

/// 1.1's and 1.2's `recovery-decision`: no `abandon`.
#[derive(ComponentType, Lift)]
#[component(variant)]
pub(crate) enum RecoveryDecision {
    #[component(name = "roll-forward")]
    RollForward,
    #[component(name = "roll-back")]
    RollBack,
    #[component(name = "defer")]
    Defer(String),
    #[component(name = "blocked")]
    Blocked(wit::BlockedReason),
    #[component(name = "stale")]
    Stale,
}

/// 1.1's and 1.2's `intent-decision`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(crate) struct IntentDecision {
    #[component(name = "operation-id")]
    operation_id: String,
    decision: RecoveryDecision,
}

/// Why a policy asked the way of `calls` cannot be shown `intent`, if it cannot.
pub(crate) fn withheld(calls: Calls, intent: &plain::IntentObservation) -> Option<String> {
    let contract = calls.contract();
    if matches!(calls, Calls::V1_5 | Calls::V1_4 | Calls::V1_3) {
        return None;
    }
    if intent.phase == plain::IntentPhase::Abandoned {
        return Some(format!(
            "deferred by the host: the intent is in phase abandoned, which contract 1.3 added, \
             and the policy is built against {contract}; load a policy of contract 1.3 or newer \
             to finish abandoning it"
        ));
    }
    if calls == Calls::V1_1
        && matches!(
            intent.kind,
            plain::OperationKind::ConfigApply | plain::OperationKind::Reconcile
        )
    {
        return Some(format!(
            "deferred by the host: the effects of a {} intent are observed from contract 1.2 \
             on, and the policy is built against {contract}; load a policy of contract 1.2 or \
             newer to recover it",
            kind_name(intent.kind)
        ));
    }
    None
}

fn kind_name(kind: plain::OperationKind) -> &'static str {
    match kind {
        plain::OperationKind::Commit => "commit",
        plain::OperationKind::Merge => "merge",
        plain::OperationKind::Gc => "gc",
        plain::OperationKind::ConfigApply => "config-apply",
        plain::OperationKind::Reconcile => "reconcile",
    }
}

fn phase(phase: plain::IntentPhase) -> IntentPhase {
    match phase {
        plain::IntentPhase::Armed => IntentPhase::Armed,
        plain::IntentPhase::EffectsConfirmed => IntentPhase::EffectsConfirmed,
        plain::IntentPhase::Abandoned => unreachable!("an abandoned intent is withheld"),
    }
}

/// `intents` (none of them withheld) as 1.2's recovery input.
pub(crate) fn with_input_1_2<R>(
    input: &plain::RecoveryInput,
    intents: &[&plain::IntentObservation],
    decide: impl FnOnce(&RecoveryInput1_2<'_>) -> R,
) -> R {
    let lists: Vec<IntentLists<'_>> = intents.iter().map(|intent| intent_lists(intent)).collect();
    let observations: Vec<_> = intents
        .iter()
        .zip(&lists)
        .map(|(intent, lists)| IntentObservation1_2 {
            operation_id: &intent.operation_id,
            kind: wit_operation_kind(intent.kind),
            phase: phase(intent.phase),
            owner_lease_live: intent.owner_lease_live,
            planned_rows: &lists.planned_rows,
            rows: &lists.rows,
            objects: &lists.objects,
            publish_staged: &lists.publish_staged,
            publish_replaced: &lists.publish_replaced,
            has_checkpoint_delta: intent.has_checkpoint_delta,
            checkpoint_at_from: intent.checkpoint_at_from,
            checkpoint_at_to: intent.checkpoint_at_to,
            gc_splits: &lists.gc_splits,
            mark_splits: &lists.mark_splits,
            config_at_expected: intent.config_at_expected,
            config_applied: intent.config_applied,
        })
        .collect();
    decide(&RecoveryInput1_2 {
        dataset_id: &input.dataset_id,
        mode: wit_recovery_mode(input.mode),
        now_ms: input.now_ms,
        intents: &observations,
    })
}

/// `intents` (none of them withheld) as 1.1's recovery input.
pub(crate) fn with_input_1_1<R>(
    input: &plain::RecoveryInput,
    intents: &[&plain::IntentObservation],
    decide: impl FnOnce(&RecoveryInput1_1<'_>) -> R,
) -> R {
    let lists: Vec<IntentLists<'_>> = intents.iter().map(|intent| intent_lists(intent)).collect();
    let observations: Vec<_> = intents
        .iter()
        .zip(&lists)
        .map(|(intent, lists)| IntentObservation1_1 {
            operation_id: &intent.operation_id,
            kind: wit_operation_kind(intent.kind),
            phase: phase(intent.phase),
            owner_lease_live: intent.owner_lease_live,
            planned_rows: &lists.planned_rows,
            rows: &lists.rows,
            objects: &lists.objects,
            publish_staged: &lists.publish_staged,
            publish_replaced: &lists.publish_replaced,
            has_checkpoint_delta: intent.has_checkpoint_delta,
            checkpoint_at_from: intent.checkpoint_at_from,
            checkpoint_at_to: intent.checkpoint_at_to,
            gc_splits: &lists.gc_splits,
        })
        .collect();
    decide(&RecoveryInput1_1 {
        dataset_id: &input.dataset_id,
        mode: wit_recovery_mode(input.mode),
        now_ms: input.now_ms,
        intents: &observations,
    })
}

/// The bytes an older answer holds, for the sandbox's output limit.
pub(crate) fn answer_size(decisions: &[IntentDecision]) -> usize {
    decisions
        .iter()
        .map(|d| {
            16 + d.operation_id.len()
                + match &d.decision {
                    RecoveryDecision::Defer(why) => why.len(),
                    RecoveryDecision::Blocked(reason) => {
                        reason.why.len() + reason.operator_action.len()
                    }
                    _ => 0,
                }
        })
        .sum()
}

/// One decision per intent of `input`, in its order: the policy's `answered` for the intents
/// it was asked about, and a deferral with its reason for each one `withheld`.
pub(crate) fn merge(
    input: &plain::RecoveryInput,
    withheld: Vec<Option<String>>,
    answered: Vec<IntentDecision>,
) -> Result<Vec<plain::IntentDecision>, PolicyError> {
    let asked = withheld.iter().filter(|why| why.is_none()).count();
    if answered.len() != asked {
        return Err(PolicyError::Incompatible {
            reason: format!(
                "decide-recovery answered {} decisions for {asked} intents",
                answered.len()
            ),
        });
    }
    let mut answered = answered.into_iter();
    Ok(input
        .intents
        .iter()
        .zip(withheld)
        .map(|(intent, withheld)| match withheld {
            Some(why) => plain::IntentDecision {
                operation_id: intent.operation_id.clone(),
                decision: plain::RecoveryDecision::Defer(why),
            },
            None => {
                let decision = answered
                    .next()
                    .expect("one answer per asked intent, counted");
                plain::IntentDecision {
                    operation_id: decision.operation_id,
                    decision: match decision.decision {
                        RecoveryDecision::RollForward => plain::RecoveryDecision::RollForward,
                        RecoveryDecision::RollBack => plain::RecoveryDecision::RollBack,
                        RecoveryDecision::Defer(why) => plain::RecoveryDecision::Defer(why),
                        RecoveryDecision::Blocked(reason) => {
                            plain::RecoveryDecision::Blocked(plain::BlockedReason {
                                why: reason.why,
                                operator_action: reason.operator_action,
                            })
                        }
                        RecoveryDecision::Stale => plain::RecoveryDecision::Stale,
                    },
                }
            }
        })
        .collect())
}

//! The wasm32 adapter: the component's exports, converting between the WIT types that
//! wit-bindgen generates and this crate's plain types. No decision is made here.
//!
//! The crate is `no_std` on wasm32, so it brings its own allocator and panic handler; a panic
//! becomes a wasm trap, which the host reports as a typed error for that one decision.
//!
//! With the `component` feature (the default) the crate exports [`DefaultPolicy`] as the
//! world. Without it, a component that depends on this crate gets the allocator, the panic
//! handler and [`DefaultPolicy`] to delegate to, and exports its own type with
//! `mend_policy::bindings::export!(Wrapper with_types_in mend_policy::bindings)`.

// The generated glue lifts and lowers through raw pointers; that is its job, and with the
// allocator the only unsafe code in the guest.
#![allow(unsafe_code)]

use alloc::vec::Vec;

use crate::types as plain;

wit_bindgen::generate!({
    world: "policy",
    path: "../wit",
    pub_export_macro: true,
    default_bindings_module: "mend_policy::bindings",
});

use mend::policy::types as wit;

#[global_allocator]
static ALLOCATOR: crate::allocator::BumpAllocator = crate::allocator::BumpAllocator::new();

/// The canonical ABI's allocator entry point. On wasm32-wasip2 the standard library would
/// export it; this crate is `no_std` there, so it exports its own, backed by the allocator above.
#[unsafe(no_mangle)]
unsafe extern "C" fn cabi_realloc(
    old_ptr: *mut u8,
    old_len: usize,
    align: usize,
    new_len: usize,
) -> *mut u8 {
    use alloc::alloc::{Layout, alloc, realloc};
    if new_len == 0 {
        return align as *mut u8;
    }
    // SAFETY: the canonical ABI passes a power-of-two alignment and, for a reallocation, the
    // pointer and size of an allocation it made through this same function.
    let ptr = unsafe {
        if old_len == 0 {
            alloc(Layout::from_size_align_unchecked(new_len, align))
        } else {
            realloc(
                old_ptr,
                Layout::from_size_align_unchecked(old_len, align),
                new_len,
            )
        }
    };
    if ptr.is_null() {
        // Out of memory: trap, and let the host report it for this one decision.
        core::arch::wasm32::unreachable()
    }
    ptr
}

/// `memcmp` for the whole guest: every `str` and slice comparison (the sorted maps of split ids
/// compare ids sharing long prefixes) ends here. wasi-libc's version walks byte by byte, which
/// made it the hottest loop of a 1,000-split plan; this one compares eight bytes at a time and
/// leaves the guest needing nothing from the C library.
#[unsafe(no_mangle)]
unsafe extern "C" fn memcmp(left: *const u8, right: *const u8, len: usize) -> i32 {
    // SAFETY: the caller passes two readable regions of `len` bytes, per memcmp's contract.
    let (left, right) = unsafe {
        (
            core::slice::from_raw_parts(left, len),
            core::slice::from_raw_parts(right, len),
        )
    };
    let mut start = 0;
    while start + 8 <= len {
        let a = u64::from_be_bytes(left[start..start + 8].try_into().unwrap_or([0; 8]));
        let b = u64::from_be_bytes(right[start..start + 8].try_into().unwrap_or([0; 8]));
        if a != b {
            return if a < b { -1 } else { 1 };
        }
        start += 8;
    }
    for (a, b) in left[start..].iter().zip(&right[start..]) {
        if a != b {
            return i32::from(*a) - i32::from(*b);
        }
    }
    0
}

/// Equality-only comparison; LLVM emits it for `==` on slices.
#[unsafe(no_mangle)]
unsafe extern "C" fn bcmp(left: *const u8, right: *const u8, len: usize) -> i32 {
    // SAFETY: as for memcmp.
    unsafe { memcmp(left, right, len) }
}

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

/// The default policy's exports: each converts its input, calls the decision of this crate
/// and converts the answer back.
#[derive(Debug)]
pub struct DefaultPolicy;

impl Guest for DefaultPolicy {
    fn describe() -> wit::PolicyDescription {
        let description = crate::describe();
        wit::PolicyDescription {
            name: description.name,
            version: description.version,
            abi_major: description.abi_major,
            abi_minor: description.abi_minor,
            semantics_revision: description.semantics_revision,
            required_capabilities: description.required_capabilities,
        }
    }

    fn plan_stage(input: wit::StagePlanInput) -> Vec<wit::PlannedSplit> {
        let input = plain::StagePlanInput {
            dataset_id: input.dataset_id,
            mode: match input.mode {
                wit::StageMode::Upsert => plain::StageMode::Upsert,
                wit::StageMode::CreateOnly => plain::StageMode::CreateOnly,
            },
            split_ids: input.split_ids,
            existing: input.existing.into_iter().map(existing_row).collect(),
        };
        crate::plan_stage(&input)
            .into_iter()
            .map(|planned| wit::PlannedSplit {
                split_id: planned.split_id,
                request_index: planned.request_index,
                action: match planned.action {
                    plain::StageAction::Insert => wit::StageAction::Insert,
                    plain::StageAction::Overwrite => wit::StageAction::Overwrite,
                    plain::StageAction::Skip(state) => wit::StageAction::Skip(wit_state(state)),
                    plain::StageAction::Reject(reason) => wit::StageAction::Reject(reason),
                },
            })
            .collect()
    }

    fn validate_publish(input: wit::PublishInput) -> Vec<wit::PublishViolation> {
        let input = plain::PublishInput {
            dataset_id: input.dataset_id,
            staged_split_ids: input.staged_split_ids,
            replaced_split_ids: input.replaced_split_ids,
            checkpoint_delta: input.checkpoint_delta.map(|delta| plain::CheckpointDelta {
                source: delta.source,
                partitions: delta
                    .partitions
                    .into_iter()
                    .map(|p| plain::PartitionDelta {
                        partition: p.partition,
                        from_position: p.from_position,
                        to_position: p.to_position,
                    })
                    .collect(),
            }),
            publish_token: input.publish_token,
            rows: input.rows.into_iter().map(existing_row).collect(),
            checkpoint: input
                .checkpoint
                .into_iter()
                .map(|p| plain::PartitionPosition {
                    partition: p.partition,
                    position: p.position,
                })
                .collect(),
            current_publish_token: input.current_publish_token,
        };
        crate::validate_publish(&input)
            .into_iter()
            .map(|violation| wit::PublishViolation {
                kind: match violation.kind {
                    plain::ViolationKind::SplitMissing => wit::ViolationKind::SplitMissing,
                    plain::ViolationKind::NotStaged => wit::ViolationKind::NotStaged,
                    plain::ViolationKind::NotPublished => wit::ViolationKind::NotPublished,
                    plain::ViolationKind::SplitInBoth => wit::ViolationKind::SplitInBoth,
                    plain::ViolationKind::CheckpointMismatch => {
                        wit::ViolationKind::CheckpointMismatch
                    }
                    plain::ViolationKind::StalePublishToken => {
                        wit::ViolationKind::StalePublishToken
                    }
                },
                subjects: violation.subjects,
                message: violation.message,
            })
            .collect()
    }

    fn decide_recovery(input: wit::RecoveryInput) -> Vec<wit::IntentDecision> {
        let input = plain::RecoveryInput {
            dataset_id: input.dataset_id,
            mode: match input.mode {
                wit::RecoveryMode::Probe => plain::RecoveryMode::Probe,
                wit::RecoveryMode::RollForward => plain::RecoveryMode::RollForward,
                wit::RecoveryMode::Exclusive => plain::RecoveryMode::Exclusive,
                wit::RecoveryMode::Verify => plain::RecoveryMode::Verify,
            },
            now_ms: input.now_ms,
            intents: input.intents.into_iter().map(intent_observation).collect(),
        };
        crate::decide_recovery(&input)
            .into_iter()
            .map(|decision| wit::IntentDecision {
                operation_id: decision.operation_id,
                decision: match decision.decision {
                    plain::RecoveryDecision::RollForward => wit::RecoveryDecision::RollForward,
                    plain::RecoveryDecision::RollBack => wit::RecoveryDecision::RollBack,
                    plain::RecoveryDecision::Defer(why) => wit::RecoveryDecision::Defer(why),
                    plain::RecoveryDecision::Blocked(reason) => {
                        wit::RecoveryDecision::Blocked(wit::BlockedReason {
                            why: reason.why,
                            operator_action: reason.operator_action,
                        })
                    }
                    plain::RecoveryDecision::Stale => wit::RecoveryDecision::Stale,
                    plain::RecoveryDecision::Abandon(why) => wit::RecoveryDecision::Abandon(why),
                },
            })
            .collect()
    }

    fn plan_reconcile(input: wit::ReconcileInput) -> Vec<wit::ReconcileDecision> {
        let input = plain::ReconcileInput {
            dataset_id: input.dataset_id,
            now_ms: input.now_ms,
            orphans: input
                .orphans
                .into_iter()
                .map(|orphan| plain::OrphanObject {
                    split_id: orphan.split_id,
                    same_incarnation: orphan.same_incarnation,
                    intact: orphan.intact,
                    metadata_json: orphan.metadata_json,
                    age_ms: orphan.age_ms,
                })
                .collect(),
        };
        crate::plan_reconcile(&input)
            .into_iter()
            .map(|decision| wit::ReconcileDecision {
                split_id: decision.split_id,
                action: match decision.action {
                    plain::ReconcileAction::Adopt => wit::ReconcileAction::Adopt,
                    plain::ReconcileAction::Discard(why) => wit::ReconcileAction::Discard(why),
                },
            })
            .collect()
    }

    fn plan_gc(input: wit::GcInput) -> wit::GcPlan {
        let input = plain::GcInput {
            dataset_id: input.dataset_id,
            now_ms: input.now_ms,
            staged_grace_period_ms: input.staged_grace_period_ms,
            deletion_grace_period_ms: input.deletion_grace_period_ms,
            candidates: input
                .candidates
                .into_iter()
                .map(|candidate| plain::GcCandidate {
                    split_id: candidate.split_id,
                    state: plain_state(candidate.state),
                    updated_at_ms: candidate.updated_at_ms,
                })
                .collect(),
        };
        let plan = crate::plan_gc(&input);
        wit::GcPlan {
            mark: plan.mark,
            delete: plan.delete,
        }
    }
}

fn intent_observation(intent: wit::IntentObservation) -> plain::IntentObservation {
    plain::IntentObservation {
        operation_id: intent.operation_id,
        kind: match intent.kind {
            wit::OperationKind::Commit => plain::OperationKind::Commit,
            wit::OperationKind::Merge => plain::OperationKind::Merge,
            wit::OperationKind::Gc => plain::OperationKind::Gc,
            wit::OperationKind::ConfigApply => plain::OperationKind::ConfigApply,
            wit::OperationKind::Reconcile => plain::OperationKind::Reconcile,
        },
        phase: match intent.phase {
            wit::IntentPhase::Armed => plain::IntentPhase::Armed,
            wit::IntentPhase::EffectsConfirmed => plain::IntentPhase::EffectsConfirmed,
            wit::IntentPhase::Abandoned => plain::IntentPhase::Abandoned,
        },
        owner_lease_live: intent.owner_lease_live,
        planned_rows: intent.planned_rows,
        rows: intent.rows.into_iter().map(existing_row).collect(),
        objects: intent
            .objects
            .into_iter()
            .map(|object| plain::ObjectObservation {
                split_id: object.split_id,
                present: object.present,
                matches: object.matches,
            })
            .collect(),
        publish_staged: intent.publish_staged,
        publish_replaced: intent.publish_replaced,
        has_checkpoint_delta: intent.has_checkpoint_delta,
        checkpoint_at_from: intent.checkpoint_at_from,
        checkpoint_at_to: intent.checkpoint_at_to,
        checkpoint_reached_to: intent.checkpoint_reached_to,
        gc_splits: intent.gc_splits,
        mark_splits: intent.mark_splits,
        config_at_expected: intent.config_at_expected,
        config_applied: intent.config_applied,
    }
}

fn existing_row(row: wit::ExistingRow) -> plain::ExistingRow {
    plain::ExistingRow {
        split_id: row.split_id,
        state: plain_state(row.state),
    }
}

fn plain_state(state: wit::SplitState) -> plain::SplitState {
    match state {
        wit::SplitState::Staged => plain::SplitState::Staged,
        wit::SplitState::Published => plain::SplitState::Published,
        wit::SplitState::MarkedForDeletion => plain::SplitState::MarkedForDeletion,
    }
}

fn wit_state(state: plain::SplitState) -> wit::SplitState {
    match state {
        plain::SplitState::Staged => wit::SplitState::Staged,
        plain::SplitState::Published => wit::SplitState::Published,
        plain::SplitState::MarkedForDeletion => wit::SplitState::MarkedForDeletion,
    }
}

#[cfg(feature = "component")]
export!(DefaultPolicy with_types_in self);

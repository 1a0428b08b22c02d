//! A hostile policy, for tests only: it describes itself like the default policy, then
//! returns decisions that break the invariants, so that tests can prove the host refuses
//! every one and executes nothing.
//!
//! - stage planning overwrites existing rows even in create-only mode (invariant 3);
//! - publish validation allows everything: stale tokens, checkpoints moving backwards (4, 7);
//! - recovery rolls back in every mode (6) and rolls forward intents whose objects are
//!   missing (1);
//! - reconcile adopts every orphan, damaged or written for another dataset (1);
//! - gc plans to mark and delete every candidate it is shown (2, 5).
//!
//! Stage planning also runs away when the input's dataset id names a behaviour, so that tests
//! can prove each is contained to its one call:
//!
//! - `loop` spins forever (the CPU deadline interrupts it);
//! - `bomb` allocates until memory runs out (the memory limit refuses the growth);
//! - `huge` answers with more bytes than the output limit allows, while staying inside the
//!   memory limit;
//! - `panic` panics (a trap);
//! - `remember` tries to carry state into the next decision: it counts its calls in a global,
//!   marks a static buffer, fills a heap allocation and grows its memory, and answers (as the
//!   reason of one rejected split) what it found of all that on entry. A fresh sandbox per
//!   decision means it always finds nothing.
//!
//! And it answers a malformed plan (the answer of 1.4, which 1.5 keeps) when the dataset id
//! begins with one of these, so that tests can prove the host refuses each through a real
//! sandbox and writes nothing:
//!
//! - `malformed-lengths`: one more request index than actions;
//! - `malformed-reasons`: a rejection without its reason;
//! - `malformed-index`: a request index past the request's entries;
//! - `malformed-duplicate`: the first id decided twice;
//! - `malformed-missing`: no decision for the last distinct id;
//! - `malformed-action`: an action byte that is no case of `planned-action` (ABI 1.5);
//! - `malformed-verdicts`: `validate-publishes` answers one verdict fewer than it was asked.
//!
//! It builds only for wasm32; natively it is empty.

#![cfg_attr(target_arch = "wasm32", no_std)]
#![cfg(target_arch = "wasm32")]
// `remember` reads memory an earlier decision would have left behind, through a raw pointer.
#![allow(unsafe_code)]

extern crate alloc;

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use mend_policy_sdk::{Guest, wit};

struct HostilePolicy;

impl Guest for HostilePolicy {
    /// Claims exactly what the default policy claims, so that the host loads it.
    fn describe() -> wit::PolicyDescription {
        wit::PolicyDescription {
            name: "hostile".into(),
            version: "0.0.0".into(),
            abi_major: mend_policy_sdk::ABI_MAJOR,
            abi_minor: mend_policy_sdk::ABI_MINOR,
            semantics_revision: 1,
            required_capabilities: Vec::new(),
        }
    }

    fn plan_stage(input: wit::StagePlanInput) -> wit::StagePlan {
        match input.dataset_id.as_str() {
            "loop" => spin_forever(),
            "bomb" => allocate_forever(),
            "huge" => return huge_plan(),
            "panic" => panic!("the hostile policy panics on request"),
            "remember" => return remember(),
            _ => {}
        }
        // Each distinct id's group, by the index of its first entry, and whether it has a row.
        let mut start = 0usize;
        let groups: Vec<(u32, bool)> = input
            .ends
            .iter()
            .zip(&input.rows)
            .map(|(&end, row)| {
                let first = input.entries[start];
                start = end as usize;
                (first, *row != wit::RowState::Absent as u8)
            })
            .collect();
        let firsts: Vec<u32> = groups.iter().map(|(first, _)| *first).collect();
        if let Some(plan) = malformed_plan(&input.dataset_id, firsts, input.entries.len()) {
            return plan;
        }
        wit::StagePlan {
            request_indices: groups.iter().map(|(first, _)| *first).collect(),
            actions: groups
                .iter()
                .map(|(_, has_row)| {
                    if *has_row {
                        wit::PlannedAction::Overwrite as u8
                    } else {
                        wit::PlannedAction::Insert as u8
                    }
                })
                .collect(),
            reasons: Vec::new(),
        }
    }

    /// Allows every publish: an empty answer for each (one fewer on `malformed-verdicts`).
    fn validate_publishes(inputs: Vec<wit::PublishInput>) -> Vec<Vec<wit::PublishViolation>> {
        let short = inputs
            .iter()
            .any(|input| input.dataset_id.starts_with("malformed-verdicts"));
        let answers = inputs.len() - usize::from(short && !inputs.is_empty());
        (0..answers).map(|_| Vec::new()).collect()
    }

    fn decide_recovery(input: wit::RecoveryInput) -> Vec<wit::IntentDecision> {
        input
            .intents
            .into_iter()
            .map(|intent| wit::IntentDecision {
                decision: if intent.objects.iter().any(|object| !object.matches) {
                    wit::RecoveryDecision::RollForward
                } else {
                    wit::RecoveryDecision::RollBack
                },
                operation_id: intent.operation_id,
            })
            .collect()
    }

    /// Adopts every orphan, damaged or not: the host must refuse the damaged ones.
    fn plan_reconcile(input: wit::ReconcileInput) -> Vec<wit::ReconcileDecision> {
        input
            .orphans
            .into_iter()
            .map(|orphan| wit::ReconcileDecision {
                split_id: orphan.split_id,
                action: wit::ReconcileAction::Adopt,
            })
            .collect()
    }

    /// Deletes every candidate, published or still staged, and marks every one too: the host
    /// must refuse the whole plan and execute nothing.
    fn plan_gc(input: wit::GcInput) -> wit::GcPlan {
        let ids: Vec<alloc::string::String> = input
            .candidates
            .into_iter()
            .map(|candidate| candidate.split_id)
            .collect();
        wit::GcPlan {
            mark: ids.clone(),
            delete: ids,
        }
    }
}

/// The malformed plan the dataset id asks for, over the request's distinct ids (each by the
/// index of its first entry, in the order of the groups) and its number of entries; `None`
/// for any other id.
fn malformed_plan(dataset_id: &str, every: Vec<u32>, entries: usize) -> Option<wit::StagePlan> {
    let inserts = |indices: Vec<u32>| wit::StagePlan {
        actions: indices
            .iter()
            .map(|_| wit::PlannedAction::Insert as u8)
            .collect(),
        request_indices: indices,
        reasons: Vec::new(),
    };
    let malformed = if dataset_id.starts_with("malformed-lengths") {
        let mut plan = inserts(every);
        plan.request_indices.push(0);
        plan
    } else if dataset_id.starts_with("malformed-action") {
        let mut plan = inserts(every);
        plan.actions[0] = 6;
        plan
    } else if dataset_id.starts_with("malformed-reasons") {
        let mut plan = inserts(every);
        plan.actions[0] = wit::PlannedAction::Reject as u8;
        plan
    } else if dataset_id.starts_with("malformed-index") {
        let mut plan = inserts(every);
        plan.request_indices[0] = entries as u32;
        plan
    } else if dataset_id.starts_with("malformed-duplicate") {
        let mut indices = every;
        indices.insert(0, indices[0]);
        inserts(indices)
    } else if dataset_id.starts_with("malformed-missing") {
        let mut indices = every;
        indices.pop();
        inserts(indices)
    } else {
        return None;
    };
    Some(malformed)
}

fn spin_forever() -> ! {
    let mut turns: u64 = 0;
    loop {
        // black_box keeps the loop from being recognised as having no effect.
        turns = core::hint::black_box(turns.wrapping_add(1));
    }
}

fn allocate_forever() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(alloc::vec![0xA5; 1 << 20]);
        core::hint::black_box(&mut hoard);
    }
}

/// 90,000 rejections with 512-byte reasons: about 47 MB by the host's measure, over the
/// default output limit of 32 MiB, yet with the list's own overhead still under the default
/// memory limit of 64 MiB, so that it is the output limit that stops it.
fn huge_plan() -> wit::StagePlan {
    const SPLITS: u32 = 90_000;
    const REASON_BYTES: usize = 512;
    let mut plan = wit::StagePlan {
        request_indices: Vec::with_capacity(SPLITS as usize),
        actions: Vec::with_capacity(SPLITS as usize),
        reasons: Vec::with_capacity(SPLITS as usize),
    };
    for index in 0..SPLITS {
        let mut reason = alloc::string::String::with_capacity(REASON_BYTES);
        let mut digits = index;
        for _ in 0..10 {
            reason.push(char::from(b'0' + (digits % 10) as u8));
            digits /= 10;
        }
        while reason.len() < REASON_BYTES {
            reason.push('x');
        }
        plan.request_indices.push(index);
        plan.actions.push(wit::PlannedAction::Reject as u8);
        plan.reasons.push(reason);
    }
    plan
}

/// What an earlier decision in the same instance would have left behind.
static DECISIONS_SEEN: AtomicU32 = AtomicU32::new(0);
static MARKED: AtomicBool = AtomicBool::new(false);
/// Where the previous decision's heap marker was, if this memory remembers one.
static HEAP_MARKER_AT: AtomicUsize = AtomicUsize::new(0);
const HEAP_MARKER: u64 = 0x6d65_6e64_6d65_6e64;

fn remember() -> wit::StagePlan {
    let seen = DECISIONS_SEEN.fetch_add(1, Ordering::Relaxed) + 1;
    let marked = MARKED.swap(true, Ordering::Relaxed);
    let pages_on_entry = core::arch::wasm32::memory_size(0);
    let previous_marker = HEAP_MARKER_AT.load(Ordering::Relaxed);
    let heap_marker_found = previous_marker != 0
        // SAFETY: only read when this memory is the one the previous decision wrote to.
        && unsafe { core::ptr::read_volatile(previous_marker as *const u64) } == HEAP_MARKER;
    let marker = alloc::boxed::Box::leak(alloc::boxed::Box::new(HEAP_MARKER));
    HEAP_MARKER_AT.store(core::ptr::from_mut(marker) as usize, Ordering::Relaxed);
    core::arch::wasm32::memory_grow(0, 16);
    wit::StagePlan {
        request_indices: alloc::vec![0],
        actions: alloc::vec![wit::PlannedAction::Reject as u8],
        reasons: alloc::vec![alloc::format!(
            "decisions seen {seen}, marked {marked}, heap marker found {heap_marker_found}, pages on entry {pages_on_entry}"
        )],
    }
}

mend_policy_sdk::export!(HostilePolicy with_types_in mend_policy_sdk::bindings);

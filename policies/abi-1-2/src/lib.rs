//! A policy for tests built against the contract before this one, `mend:policy@1.2.0`
//! (`wit/policy.wit` in this crate is that contract, frozen): what a policy built before the
//! 1.3 upgrade (which added `plan-gc`) looks like. A current host must refuse it at load,
//! naming both versions and saying to rebuild it, before wasmtime meets its older types. It
//! describes itself honestly as ABI 1.2; its decisions are empty, since no host should ever
//! ask it for one.
//!
//! It builds only for wasm32; natively it is empty.

#![cfg_attr(target_arch = "wasm32", no_std)]
#![cfg(target_arch = "wasm32")]
// The generated glue lifts and lowers through raw pointers.
#![allow(unsafe_code)]

extern crate alloc;

use alloc::vec::Vec;

wit_bindgen::generate!({
    world: "policy",
    path: "wit",
});

use mend::policy::types as wit;

#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

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
    // SAFETY: the canonical ABI passes a power-of-two alignment and, for a reallocation, an
    // allocation it made through this function.
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
        core::arch::wasm32::unreachable()
    }
    ptr
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memcmp(left: *const u8, right: *const u8, len: usize) -> i32 {
    // SAFETY: memcmp's contract: two readable regions of `len` bytes.
    let (left, right) = unsafe {
        (
            core::slice::from_raw_parts(left, len),
            core::slice::from_raw_parts(right, len),
        )
    };
    for (a, b) in left.iter().zip(right) {
        if a != b {
            return i32::from(*a) - i32::from(*b);
        }
    }
    0
}

#[unsafe(no_mangle)]
unsafe extern "C" fn bcmp(left: *const u8, right: *const u8, len: usize) -> i32 {
    // SAFETY: as for memcmp.
    unsafe { memcmp(left, right, len) }
}

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

struct AbiOneTwo;

impl Guest for AbiOneTwo {
    fn describe() -> wit::PolicyDescription {
        wit::PolicyDescription {
            name: "abi-1-2".into(),
            version: "0.0.0".into(),
            abi_major: 1,
            abi_minor: 2,
            semantics_revision: 1,
            required_capabilities: [
                "stage.upsert",
                "stage.create-only",
                "publish.checkpoint",
                "publish.token",
            ]
            .iter()
            .map(|name| (*name).into())
            .collect(),
        }
    }

    fn plan_stage(_input: wit::StagePlanInput) -> Vec<wit::PlannedSplit> {
        Vec::new()
    }

    fn validate_publish(_input: wit::PublishInput) -> Vec<wit::PublishViolation> {
        Vec::new()
    }

    fn decide_recovery(_input: wit::RecoveryInput) -> Vec<wit::IntentDecision> {
        Vec::new()
    }

    fn plan_reconcile(_input: wit::ReconcileInput) -> Vec<wit::ReconcileDecision> {
        Vec::new()
    }
}

export!(AbiOneTwo);

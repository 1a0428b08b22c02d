//! The component's memory layout: a 256 KiB stack (the decisions recurse only as deep as a
//! sorted map or a sort of their input, a few dozen frames) and 1 MiB of initial memory, so
//! that a decision of ordinary size finds room for its heap above the stack and the data
//! without growing the memory (see `src/allocator.rs`). 1 MiB is also the smallest memory
//! limit an operator may set (`limits.policy_memory_bytes`), so the component starts within
//! every limit. Pages a decision does not touch cost nothing: the host maps memory lazily.

/// Bytes of stack; a multiple of 16.
const STACK_BYTES: u32 = 256 << 10;
/// Bytes of linear memory the component starts with; a multiple of the 64 KiB page.
const INITIAL_MEMORY_BYTES: u32 = 1 << 20;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-link-arg-cdylib=-zstack-size={STACK_BYTES}");
        println!("cargo:rustc-link-arg-cdylib=--initial-memory={INITIAL_MEMORY_BYTES}");
    }
}

//! The component's memory layout: a 256 KiB stack (the default policy's decisions recurse only
//! as deep as a sorted map or a sort of their input, a few dozen frames) and 1 MiB of initial
//! memory, so that a decision of ordinary size finds room for its heap above the stack and the
//! data without growing the memory (see `allocator.rs`). 1 MiB is also the smallest memory
//! limit an operator may set (`limits.policy_memory_bytes`), so the component starts within
//! every limit. Pages a decision does not touch cost nothing: the host maps memory lazily.
//!
//! Only linker arguments set a layout, and only the policy's own build script can give them:
//! cargo passes `cargo:rustc-link-arg` only to the targets of the package whose build script
//! printed it, never to a package depending on it. (`cargo:rustc-link-arg-cdylib` from a
//! dependency does reach its dependents' cdylibs today, but cargo calls that an unintended
//! change of its 1.50 release that may become an error, rust-lang/cargo#9562, and recommends a
//! build-dependency that prints the arguments instead.) So every policy has a `build.rs` of one
//! line, with this crate as a build-dependency:
//!
//! ```ignore
//! fn main() {
//!     mend_policy_sdk::memory_layout::emit_link_args();
//! }
//! ```

/// Bytes of stack; a multiple of 16.
pub const STACK_BYTES: u32 = 256 << 10;

/// Bytes of linear memory the component starts with; a multiple of the 64 KiB page.
pub const INITIAL_MEMORY_BYTES: u32 = 1 << 20;

// wasm-ld refuses a layout that breaks these, but only when a policy links.
const _: () = assert!(STACK_BYTES.is_multiple_of(16));
const _: () = assert!(INITIAL_MEMORY_BYTES.is_multiple_of(64 << 10));
const _: () = assert!(STACK_BYTES < INITIAL_MEMORY_BYTES);

/// Tells cargo, from a policy's build script, to link the policy with this layout when it is
/// built for wasm32; a native build (unit tests of the decisions) keeps the platform's own.
///
/// The arguments are `rustc-link-arg`, which apply to the package's own targets only: a crate
/// that both is a policy and is a dependency of other policies (`mend-default-policy`) gives its
/// layout to none of them, and each links its own.
///
/// Build scripts run on the machine building the policy, so this exists natively only.
#[cfg(not(target_arch = "wasm32"))]
pub fn emit_link_args() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-link-arg=-zstack-size={STACK_BYTES}");
        println!("cargo:rustc-link-arg=--initial-memory={INITIAL_MEMORY_BYTES}");
    }
}

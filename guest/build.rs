//! Links the component with the memory layout every mend policy has (a 256 KiB stack, 1 MiB of
//! initial memory: `mend_policy_sdk::memory_layout` says why); a native build is untouched.

fn main() {
    mend_policy_sdk::memory_layout::emit_link_args();
}

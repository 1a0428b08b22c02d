//! Links the component with the memory layout every mend policy has (the stack, the initial
//! memory: `mend_policy_sdk::memory_layout` says why).

fn main() {
    mend_policy_sdk::memory_layout::emit_link_args();
}

//! Links the component with the memory layout every mend policy has
//! (`mend_policy_sdk::memory_layout`).

fn main() {
    mend_policy_sdk::memory_layout::emit_link_args();
}

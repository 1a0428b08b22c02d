//! Builds the policy components the tests load besides the default one: `policies/hostile`,
//! available as `MEND_POLICY_HOSTILE_WASM`.

include!("../policies/build_components.rs");

fn main() {
    build_components(&["mend-policy-hostile"]);
}

//! Builds the policy components the host embeds before it compiles: the default policy
//! (`guest/`, from `MEND_DEFAULT_POLICY_WASM`) and the example second policy `mend demo` swaps to
//! (`policies/cautious/`, from `MEND_POLICY_CAUTIOUS_WASM`). Where the `wasm32-wasip2` target
//! cannot be installed, it uses the copies shipped in `host/components/` (see
//! `policies/build_components.rs`).

include!("../policies/build_components.rs");

fn main() {
    // `sqlx::migrate!` embeds this folder; a new migration must rebuild the host.
    println!("cargo:rerun-if-changed=migrations");
    build_components(
        &["mend-default-policy", "mend-policy-cautious"],
        Some("host/components"),
    );
}

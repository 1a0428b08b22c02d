//! Builds the default policy component (`guest/`) before the host compiles; the host embeds
//! it from `MEND_POLICY_WASM`.

include!("../policies/build_components.rs");

fn main() {
    // `sqlx::migrate!` embeds this folder; a new migration must rebuild the host.
    println!("cargo:rerun-if-changed=migrations");
    build_components("guest", &["mend-policy"]);
}

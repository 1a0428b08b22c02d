//! The policy components shipped in `host/components/` (which a build uses only where the
//! `wasm32-wasip2` target cannot be installed; see `policies/build_components.rs`) are byte for
//! byte what the source builds, so a machine without the target runs exactly the policies a
//! machine with it does.

/// Each component: its file name, what this build embedded, where that came from, and the
/// shipped copy.
const COMPONENTS: [(&str, &[u8], &str, &[u8]); 2] = [
    (
        "mend_default_policy.wasm",
        include_bytes!(env!("MEND_DEFAULT_POLICY_WASM")),
        env!("MEND_DEFAULT_POLICY_WASM_ORIGIN"),
        include_bytes!("../components/mend_default_policy.wasm"),
    ),
    (
        "mend_policy_cautious.wasm",
        include_bytes!(env!("MEND_POLICY_CAUTIOUS_WASM")),
        env!("MEND_POLICY_CAUTIOUS_WASM_ORIGIN"),
        include_bytes!("../components/mend_policy_cautious.wasm"),
    ),
];

#[test]
fn shipped_components_are_what_the_source_builds() {
    for (file, embedded, origin, shipped) in COMPONENTS {
        // A build that fell back to the shipped copies compared them with themselves: that
        // proves nothing, so it fails instead of passing.
        assert_eq!(
            origin, "built",
            "this build could not compile {file} from source (no wasm32-wasip2 target), so it \
             cannot check the shipped copy: run `rustup target add wasm32-wasip2` and test again"
        );
        assert!(
            embedded == shipped,
            "host/components/{file} ({} bytes) is not what the source builds ({} bytes): run \
             scripts/update-components and commit the result",
            shipped.len(),
            embedded.len()
        );
        println!(
            "{file}: {} bytes, the shipped copy matches the source build",
            embedded.len()
        );
    }
}

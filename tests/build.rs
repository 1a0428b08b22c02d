//! Builds the policy components the tests load besides the default one, each available as
//! `MEND_POLICY_<NAME>_WASM`:
//!
//! - `policies/hostile`: unsafe decisions, and runaway ones on request (loop, bomb, huge, panic);
//! - `policies/newer-semantics`: the default decisions under a semantics revision no host knows;
//! - `policies/extra-capability`: the default decisions, requiring a capability no host has;
//! - `policies/abi-1-1` to `abi-1-4`: the default decisions, each built against the frozen
//!   `mend:policy@1.1.0`, `1.2.0`, `1.3.0` or `1.4.0` contract, which this host still runs;
//! - `policies/forbidden-import`: reads the environment, so it imports WASI;
//! - `policies/liar`: built against the current contract, claiming ABI 1.1 in `describe()`.

include!("../policies/build_components.rs");

fn main() {
    build_components(
        &[
            "mend-policy-hostile",
            "mend-policy-newer-semantics",
            "mend-policy-extra-capability",
            "mend-policy-forbidden-import",
            "mend-policy-liar",
            "mend-policy-abi-1-1",
            "mend-policy-abi-1-2",
            "mend-policy-abi-1-3",
            "mend-policy-abi-1-4",
        ],
        None,
    );
}

//! On wasm32 the policy is `no_std`, so nothing links the C library that provides `memcmp`,
//! `memcpy` and friends. Link wasi-libc's static archive for those pure routines; the linker
//! keeps only what is referenced, so no WASI import comes with them.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-link-arg=-lc");
    }
}

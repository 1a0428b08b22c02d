//! Builds the default policy component before the host compiles, so a fresh clone needs
//! nothing beyond cargo: the guest crate is compiled for `wasm32-wasip2` by a nested cargo in
//! its own target directory (`target/guest`), and the host embeds the resulting component.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest_dir
        .parent()
        .expect("host/ sits in the workspace")
        .to_path_buf();
    for watched in [
        "guest/src",
        "guest/Cargo.toml",
        "guest/build.rs",
        "wit",
        "Cargo.lock",
    ] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    // `sqlx::migrate!` embeds this folder; a new migration must rebuild the host.
    println!(
        "cargo:rerun-if-changed={}",
        manifest_dir.join("migrations").display()
    );

    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"))
        .join("guest");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&workspace)
        .args(["build", "--package", "mend-policy", "--lib"])
        .args(["--target", "wasm32-wasip2", "--profile", "guest"])
        .arg("--target-dir")
        .arg(&target_dir);
    // The host's flags and wrappers (clippy, coverage, target-cpu) are for native code; the
    // component is built the same way whatever builds the host.
    for inherited in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
    ] {
        command.env_remove(inherited);
    }
    let output = command
        .output()
        .expect("run cargo to build the policy component");
    if !output.status.success() {
        panic!(
            "building the policy component failed (is the wasm32-wasip2 target installed? \
             rust-toolchain.toml lists it):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    let component = target_dir.join("wasm32-wasip2/guest/mend_policy.wasm");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo")).join("mend_policy.wasm");
    std::fs::copy(&component, &out).expect("copy the policy component into OUT_DIR");
    println!("cargo:rustc-env=MEND_DEFAULT_POLICY_WASM={}", out.display());
}

// Shared by the build scripts of `host/` and `tests/` (each `include!`s it): builds policy
// components for `wasm32-wasip2` with a nested cargo in its own target directory
// (`target/<target_name>`), so that a fresh clone needs nothing beyond cargo, and tells the
// crate being built where each component is through `MEND_<NAME>_WASM` environment variables.
//
// Each builder has its own target directory because the same crate may be built with other
// features in each: the test components depend on `mend-policy` without its `component`
// feature, the host builds it with. A cdylib from a path crate carries no hash in its file
// name, so two such builds in one directory would overwrite each other's output, and cargo
// could then hand the host an export-less default policy.

fn build_components(target_name: &str, packages: &[&str]) {
    use std::env;
    use std::path::PathBuf;
    use std::process::Command;

    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest_dir.parent().expect("crates sit in the workspace").to_path_buf();
    for watched in ["guest/src", "guest/Cargo.toml", "guest/build.rs", "policies", "wit", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", workspace.join(watched).display());
    }
    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"))
        .join(target_name);
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&workspace)
        .args(["build", "--lib", "--target", "wasm32-wasip2", "--profile", "guest"])
        .arg("--target-dir")
        .arg(&target_dir);
    for package in packages {
        command.args(["--package", package]);
    }
    // The host's flags and wrappers (clippy, coverage, target-cpu) are for native code; the
    // components are built the same way whatever builds the crate.
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
    let output = command.output().expect("run cargo to build the policy components");
    if !output.status.success() {
        panic!(
            "building the policy components {packages:?} failed (is the wasm32-wasip2 target \
             installed? rust-toolchain.toml lists it):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    for package in packages {
        let file = format!("{}.wasm", package.replace('-', "_"));
        let built = target_dir.join("wasm32-wasip2/guest").join(&file);
        let copied = out_dir.join(&file);
        std::fs::copy(&built, &copied).expect("copy a policy component into OUT_DIR");
        let variable = format!("{}_WASM", package.replace('-', "_").to_uppercase());
        println!("cargo:rustc-env={variable}={}", copied.display());
    }
}

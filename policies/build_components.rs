// Shared by the build scripts of `host/` and `tests/` (each `include!`s it): builds policy
// components for `wasm32-wasip2` with a nested cargo in a target directory of their own
// (`target/policy-components`), so that a fresh clone needs nothing beyond cargo, and tells the
// crate being built where each component is through `MEND_<NAME>_WASM` environment variables.
//
// The target comes first. rustup installs the targets `rust-toolchain.toml` lists only when it
// installs the toolchain itself, so a machine whose 1.95.0 was preinstalled (or linked to
// another toolchain) has no `wasm32-wasip2`, and the nested build used to fail minutes in with
// "can't find crate for `core`". Before building, this script looks for the target's standard
// library; when it is missing it runs `rustup target add wasm32-wasip2 --toolchain <the
// toolchain in use>`. If that cannot be done (no rustup, no network), a builder with shipped
// components (the host: `host/components/`) uses them and says so in a warning; one without
// (the test policies) stops at once with the command to run. `host/tests/shipped_components.rs`
// rebuilds the shipped components from source and compares them byte for byte, so the
// shipped files never drift from the source.
//
// Each component is built by a cargo run of its own, so that no two unify their features: the
// cautious and the test policies depend on `mend-default-policy` without its `component`
// feature, which the host's build of it turns on, and the policies built against older
// contracts use `mend-policy-sdk` without its `bindings` feature. The runs share one target
// directory: a dependency built with other features is another file there (its rlib's name
// carries a hash of them), and the only files without a hash, the components themselves, are
// each built by one run. So the compiler plugins every component needs (wit-bindgen's macros,
// wasmparser, syn) are compiled once instead of once per builder, about half of each run's CPU
// time. (The host's and the tests' build scripts may run at once; cargo's lock on the directory
// makes the second wait.)
//
// Builds are reproducible: paths of the checkout and of cargo's registry are remapped, so the
// same source gives the same bytes in any clone on any machine with the pinned toolchain.

/// The one target the policy components are built for.
const WASM_TARGET: &str = "wasm32-wasip2";

/// How long `rustup target add` may take before the shipped components are used instead.
const RUSTUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Builds `packages` into `target/policy-components`. `shipped` names the folder (relative to
/// the workspace) holding prebuilt copies of exactly these components, used only when the wasm
/// target cannot be had; `None` makes a missing target a build error.
fn build_components(packages: &[&str], shipped: Option<&str>) {
    use std::env;
    use std::path::PathBuf;

    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest_dir.parent().expect("crates sit in the workspace").to_path_buf();
    // Only paths that exist: cargo counts a missing one as changed on every build, and a
    // watched `guest/build.rs` that no longer existed rebuilt the host at every cargo command.
    // `policies/js` is not Rust, and an `npm ci` there writes thousands of files: each policy
    // crate of `policies/` is watched instead of the folder.
    let policy_crates = std::fs::read_dir(workspace.join("policies"))
        .expect("read policies/")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.join("Cargo.toml").is_file());
    let watched = ["policy-sdk", "guest/src", "guest/Cargo.toml", "guest/build.rs", "wit", "Cargo.lock"]
        .iter()
        .map(|path| workspace.join(path))
        .chain(policy_crates)
        .chain([workspace.join("policies/build_components.rs")]);
    for path in watched {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    if let Some(shipped) = shipped {
        println!("cargo:rerun-if-changed={}", workspace.join(shipped).display());
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));

    // One build script may build several component sets: the target is looked for (and
    // added) once.
    static TARGET_READY: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    if let Err(problem) = TARGET_READY.get_or_init(ensure_wasm_target) {
        let Some(shipped) = shipped else {
            panic!(
                "the {WASM_TARGET} target is not installed for this toolchain, and the test \
                 policies can only be built from source: {problem}"
            );
        };
        println!(
            "cargo:warning=using the policy components shipped in {shipped}/ instead of building \
             them: {problem}"
        );
        for package in packages {
            let file = component_file(package);
            let copied = out_dir.join(&file);
            std::fs::copy(workspace.join(shipped).join(&file), &copied)
                .expect("copy a shipped policy component into OUT_DIR");
            announce(package, &copied, "shipped");
        }
        return;
    }

    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"))
        .join("policy-components");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    for package in packages {
        build_component(&cargo, &workspace, &target_dir, package);
    }
    for package in packages {
        let file = component_file(package);
        let built = target_dir.join(WASM_TARGET).join("guest").join(&file);
        let copied = out_dir.join(&file);
        std::fs::copy(&built, &copied).expect("copy a policy component into OUT_DIR");
        announce(package, &copied, "built");
    }
}

/// Builds one package's component. `cargo rustc --crate-type cdylib` rather than `cargo
/// build`: a crate that is also an rlib (the default policy is, for the host and the tests)
/// gets no LTO from `cargo build`, and without it the SDK's `memcmp` is a call in every
/// comparison rather than inlined (stage decisions were 5 to 7% slower).
fn build_component(
    cargo: &std::ffi::OsStr,
    workspace: &std::path::Path,
    target_dir: &std::path::Path,
    package: &str,
) {
    use std::process::Command;

    let mut command = Command::new(cargo);
    command
        .current_dir(workspace)
        .args(["rustc", "--lib", "--crate-type", "cdylib", "--target", WASM_TARGET])
        .args(["--profile", "guest", "--package", package])
        .arg("--target-dir")
        .arg(target_dir);
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
    command.env("CARGO_ENCODED_RUSTFLAGS", reproducible_rustflags(workspace));
    let output = command.output().expect("run cargo to build a policy component");
    if !output.status.success() {
        panic!(
            "building the policy component {package} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// `mend-policy-cautious` is built to `mend_policy_cautious.wasm`.
fn component_file(package: &str) -> String {
    format!("{}.wasm", package.replace('-', "_"))
}

/// Tells the crate being built where `package`'s component is (`MEND_POLICY_CAUTIOUS_WASM`)
/// and whether it was built from source or taken from the shipped copies
/// (`MEND_POLICY_CAUTIOUS_WASM_ORIGIN`: `built` or `shipped`).
fn announce(package: &str, path: &std::path::Path, origin: &str) {
    let variable = format!("{}_WASM", package.replace('-', "_").to_uppercase());
    println!("cargo:rustc-env={variable}={}", path.display());
    println!("cargo:rustc-env={variable}_ORIGIN={origin}");
}

/// Makes sure the toolchain building this crate has the wasm target's standard library,
/// adding it with rustup when it is missing. The error says why it could not, with the exact
/// command an operator can run.
fn ensure_wasm_target() -> Result<(), String> {
    use std::env;
    use std::process::{Command, Stdio};

    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let installed = || -> bool {
        Command::new(&rustc)
            .args(["--print", "target-libdir", "--target", WASM_TARGET])
            .output()
            .ok()
            .filter(|output| output.status.success())
            .map(|output| std::path::PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()))
            .and_then(|libdir| std::fs::read_dir(libdir).ok())
            .is_some_and(|mut entries| {
                entries.any(|entry| {
                    entry.is_ok_and(|entry| {
                        let name = entry.file_name();
                        let name = name.to_string_lossy();
                        name.starts_with("libcore-") && name.ends_with(".rlib")
                    })
                })
            })
    };
    if installed() {
        return Ok(());
    }
    // rustup's proxies name the toolchain they run; without one, rustup picks it from
    // rust-toolchain.toml in the working directory, which is the workspace's.
    let toolchain = env::var("RUSTUP_TOOLCHAIN").ok();
    let mut add = vec!["target".to_string(), "add".to_string(), WASM_TARGET.to_string()];
    if let Some(toolchain) = &toolchain {
        add.extend(["--toolchain".to_string(), toolchain.clone()]);
    }
    let command_text = format!("rustup {}", add.join(" "));
    println!("cargo:warning=the {WASM_TARGET} target is missing; running `{command_text}`");
    let mut child = match Command::new("rustup")
        .args(&add)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(error) => {
            return Err(format!(
                "rustup cannot be run ({error}); install the target with `{command_text}`"
            ));
        }
    };
    // Read rustup's messages as they come, so a full pipe never stalls it.
    let stderr = child.stderr.take().map(|mut pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut pipe, &mut text);
            text
        })
    });
    let deadline = std::time::Instant::now() + RUSTUP_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{command_text}` did not finish within {} s; run it yourself",
                    RUSTUP_TIMEOUT.as_secs()
                ));
            }
        }
    };
    let stderr = stderr
        .and_then(|reader| reader.join().ok())
        .unwrap_or_default();
    if status.success() && installed() {
        return Ok(());
    }
    // rustup's own error line says why (no network, no such toolchain); its last lines are
    // often only a trace.
    let reason = stderr
        .lines()
        .find(|line| line.trim_start().starts_with("error"))
        .or_else(|| stderr.lines().find(|line| !line.trim().is_empty()))
        .unwrap_or("no output");
    Err(format!(
        "`{command_text}` failed ({}): run it where the network reaches rustup's server",
        reason.trim()
    ))
}

/// Flags that take every machine-specific path out of the components: the checkout's and
/// cargo's registry. (The standard library's paths are `/rustc/<commit>` already.)
fn reproducible_rustflags(workspace: &std::path::Path) -> String {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| std::path::PathBuf::from(home).join(".cargo")));
    let mut flags = vec![format!("--remap-path-prefix={}=/mend", workspace.display())];
    if let Some(cargo_home) = cargo_home {
        flags.push(format!("--remap-path-prefix={}=/cargo", cargo_home.display()));
    }
    flags.join("\x1f")
}

//! `mend policy new`: a project in either language, written by the real binary, builds with
//! the commands its README gives into a component mend accepts, passes the golden scenarios
//! copied into it, and reports its own name; a decision changed in it fails the scenarios that
//! show the old one. Bad names and existing folders are refused and write nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{failed_with, json, mend};

/// The workspace's root, where the tests keep their build folders.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `program args` in `dir`, without the variables of the cargo running the tests (its flags,
/// wrappers and target folder are for mend's own build); fails the test unless it succeeds.
fn run(dir: &Path, program: &str, args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(program);
    for inherited in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "RUSTUP_TOOLCHAIN",
    ] {
        command.env_remove(inherited);
    }
    command.current_dir(dir).args(args);
    for (name, value) in envs {
        command.env(name, value);
    }
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("run {program}: {error}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Writes a project with `mend policy new` in `dir`; its folder.
fn new_project(dir: &Path, name: &str, lang: &str) -> PathBuf {
    let written = json(&mend(
        dir,
        &["policy", "new", name, "--lang", lang, "--json"],
    ));
    let project = PathBuf::from(written["project"].as_str().unwrap());
    assert!(project.join("README.md").is_file());
    assert!(project.join("scenarios/stage.json").is_file());
    project
}

/// `mend policy test COMPONENT scenarios/` in the project: the output, and how many passed.
fn test_scenarios(project: &Path, component: &Path) -> (Output, usize) {
    let output = mend(
        project,
        &["policy", "test", component.to_str().unwrap(), "scenarios"],
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let passed = text
        .lines()
        .filter(|line| line.starts_with("PASS "))
        .count();
    (output, passed)
}

/// The scenarios the project was given: those of the default policy.
fn default_scenario_count() -> usize {
    std::fs::read_dir(workspace().join("guest/scenarios"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .map(|path| {
            let suite: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            suite["scenarios"].as_array().unwrap().len()
        })
        .sum()
}

#[test]
fn a_rust_project_builds_passes_its_scenarios_and_fails_them_when_a_decision_changes() {
    let dir = tempfile::tempdir().unwrap();
    let project = new_project(dir.path(), "my-policy", "rust");
    // One folder for every run of this test, so that the dependencies are built once.
    let target = workspace().join("target/policy-new-rust");
    let build = || {
        run(
            &project,
            "cargo",
            &["build", "--release", "--target", "wasm32-wasip2"],
            &[("CARGO_TARGET_DIR", &target)],
        )
    };
    build();
    let component = target.join("wasm32-wasip2/release/my_policy.wasm");

    let inspected = json(&mend(
        &project,
        &["policy", "inspect", component.to_str().unwrap(), "--json"],
    ));
    assert_eq!(inspected["name"], "my-policy");
    assert_eq!(
        inspected["imports"],
        serde_json::json!(["mend:policy/types@1.5.0"])
    );
    let (output, passed) = test_scenarios(&project, &component);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert_eq!(passed, default_scenario_count());

    // The author changes gc to collect nothing: the project's own scenarios catch it.
    let lib = project.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib).unwrap();
    let changed = source.replace(
        "        DefaultPolicy::plan_gc(input)\n",
        "        let _ = input;\n        wit::GcPlan { mark: Vec::new(), delete: Vec::new() }\n",
    );
    assert_ne!(
        source, changed,
        "the scaffold's plan_gc delegates to the default"
    );
    std::fs::write(&lib, changed).unwrap();
    build();
    let (output, passed) = test_scenarios(&project, &component);
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let failed = stdout
        .lines()
        .filter(|line| line.starts_with("FAIL "))
        .count();
    assert!(
        failed > 0 && passed + failed == default_scenario_count(),
        "{stdout}"
    );
    println!(
        "rust project: {} scenarios passed as written; with gc changed, {failed} failed and {passed} passed",
        default_scenario_count()
    );
}

#[test]
fn a_javascript_project_builds_with_both_engines_and_passes_its_scenarios() {
    let dir = tempfile::tempdir().unwrap();
    let project = new_project(dir.path(), "js-policy", "js");
    run(&project, "npm", &["ci", "--no-audit", "--no-fund"], &[]);
    // componentize-js works in one fixed folder: builds on one machine take turns
    // (scripts/build-js-policies takes the same lock).
    run(
        &project,
        "flock",
        &[
            "/tmp/mend-policy-js-build.lock",
            "sh",
            "-c",
            "rm -rf /tmp/mend-policy-js-build && exec node build.mjs dist",
        ],
        &[],
    );
    for file in ["mend_policy_js.wasm", "mend_policy_js_qjs.wasm"] {
        let component = project.join("dist").join(file);
        let inspected = json(&mend(
            &project,
            &["policy", "inspect", component.to_str().unwrap(), "--json"],
        ));
        assert_eq!(inspected["name"], "js-policy", "{file}");
        let (output, passed) = test_scenarios(&project, &component);
        assert!(
            output.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        assert_eq!(passed, default_scenario_count(), "{file}");
        println!(
            "javascript project, {file}: {passed} scenarios passed; needs {}",
            inspected["needs"]
        );
    }
}

#[test]
fn bad_names_and_existing_folders_are_refused_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["My-Policy", "x_y", "a/b", "x-"] {
        let output = mend(dir.path(), &["policy", "new", bad, "--lang", "rust"]);
        failed_with(&output, 2, &["lowercase letters, digits and dashes"]);
    }
    std::fs::create_dir(dir.path().join("taken")).unwrap();
    let output = mend(dir.path(), &["policy", "new", "taken", "--lang", "js"]);
    failed_with(&output, 2, &["already exists"]);
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(left, ["taken"], "nothing else was written");
    assert_eq!(
        std::fs::read_dir(dir.path().join("taken")).unwrap().count(),
        0
    );
}

//! No crate of the workspace that another crate depends on declares a `cdylib` (or `dylib`)
//! crate type. Cargo writes such a crate's rlib without the hash in its file name, so two
//! builds of it with different features in one target directory overwrite each other's copy
//! (a crate depending on `mend` and `mend-default-policy` with features of its own then broke the
//! next build of the server with 122 errors). The policy components are built with `cargo
//! rustc --crate-type cdylib` (`policies/build_components.rs`): no manifest needs the type.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

#[test]
fn no_library_another_crate_depends_on_is_a_cdylib() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();
    let packages = metadata["packages"].as_array().unwrap();
    let members: BTreeSet<&str> = packages
        .iter()
        .map(|package| package["name"].as_str().unwrap())
        .collect();
    // Every workspace crate another workspace crate depends on, in any kind of dependency.
    let depended_on: BTreeSet<&str> = packages
        .iter()
        .flat_map(|package| package["dependencies"].as_array().unwrap())
        .map(|dependency| dependency["name"].as_str().unwrap())
        .filter(|name| members.contains(name))
        .collect();
    assert!(
        depended_on.contains("mend-default-policy") && depended_on.contains("mend"),
        "{depended_on:?}"
    );
    let mut checked = Vec::new();
    for package in packages {
        let name = package["name"].as_str().unwrap();
        if !depended_on.contains(name) {
            continue;
        }
        for target in package["targets"].as_array().unwrap() {
            let types: Vec<&str> = target["crate_types"]
                .as_array()
                .unwrap()
                .iter()
                .map(|kind| kind.as_str().unwrap())
                .collect();
            assert!(
                !types.iter().any(|kind| matches!(*kind, "cdylib" | "dylib")),
                "{name}'s {} target declares crate types {types:?}: its rlib would be written without a hash in its file name; build its component with `cargo rustc --crate-type cdylib` instead",
                target["name"]
            );
        }
        checked.push(name);
    }
    println!(
        "manifests: {} crates other crates depend on, none a cdylib: {}",
        checked.len(),
        checked.join(", ")
    );
}

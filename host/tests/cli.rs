//! The real `mend` binary on the embedded default catalog (a local directory): each command's
//! happy path and its main failure, with the exit codes the README documents.

use std::path::Path;
use std::process::{Command, Output};

fn mend(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mend"))
        .args(args)
        .current_dir(dir)
        .env("MEND_CACHE_DIR", dir.join("cache"))
        .env_remove("MEND_CATALOG")
        .env_remove("MEND_OBJECTS")
        .output()
        .expect("run mend")
}

fn json(output: &Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "mend failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("--json prints JSON")
}

#[test]
fn status_recover_reconcile_and_policy_commands_run_on_the_embedded_default() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checked = 0;

    assert!(mend(dir, &["dataset", "create", "d1"]).status.success());
    let status = json(&mend(dir, &["status", "--json"]));
    assert_eq!(status["datasets"][0]["dataset_id"], "d1");
    assert_eq!(status["datasets"][0]["pending_intents"], 0);
    assert!(
        status["policy_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    checked += 1;

    let probe = json(&mend(dir, &["recover", "d1", "--mode", "probe", "--json"]));
    assert_eq!(probe["intents"].as_array().unwrap().len(), 0);
    let reconcile = json(&mend(dir, &["reconcile", "d1", "--json"]));
    assert_eq!(reconcile["objects_listed"], 0);
    let active = json(&mend(dir, &["policy", "active", "--json"]));
    assert_eq!(active["digest"], status["policy_digest"]);
    checked += 3;

    // The main failures: a dataset that does not exist (3), a stage without its mode (2).
    let missing = mend(dir, &["recover", "nope", "--mode", "probe"]);
    assert_eq!(missing.status.code(), Some(3), "{missing:?}");
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("nope"), "{stderr}");
    let no_mode = mend(dir, &["stage", "d1"]);
    assert_eq!(no_mode.status.code(), Some(2), "{no_mode:?}");
    checked += 2;
    println!("cli: {checked} commands checked against the real binary");
}

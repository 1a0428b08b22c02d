//! Every `mend` subcommand through the real binary, on the embedded default catalog (a local
//! directory): its happy path, then its main failure with the exit code docs/src/operations.md documents
//! (2 invalid input, 3 not found, 4 precondition or conflict, 6 policy), and nothing changed
//! by a failure. `serve` has its own file (server.rs), `demo` too (demo.rs).

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use common::{mend, mend_command};

fn mend_with_stdin(dir: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = mend_command(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mend");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn ok(dir: &Path, args: &[&str]) -> serde_json::Value {
    common::ok_json(dir, args)
}

/// Runs a command that must fail with `code`, printing one error line naming `mentions`.
fn fails(dir: &Path, args: &[&str], code: i32, mentions: &str) {
    common::failed_with(&mend(dir, args), code, &[mentions]);
}

fn write_splits(dir: &Path, name: &str, ids: &[&str]) -> PathBuf {
    common::splits_file(dir, name, ids)
}

fn states(dir: &Path, dataset: &str) -> Vec<(String, String)> {
    common::split_states(dir, dataset)
}

#[test]
fn dataset_stage_publish_mark_delete_list_gc_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checked = 0;

    let created = ok(
        dir,
        &["dataset", "create", "d1", "--staged-grace-period-ms", "1"],
    );
    assert_eq!(created[0]["dataset_id"], "d1");
    fails(dir, &["dataset", "create", "d1"], 4, "d1");
    fails(dir, &["dataset", "create", "bad/name"], 2, "bad/name");
    assert_eq!(ok(dir, &["dataset", "list"]).as_array().unwrap().len(), 1);
    assert_eq!(ok(dir, &["dataset", "show", "d1"])["dataset_id"], "d1");
    fails(dir, &["dataset", "show", "nope"], 3, "nope");
    checked += 6;

    let config = ok(
        dir,
        &[
            "dataset",
            "config",
            "d1",
            "--set",
            "deletion_grace_period_ms=1",
        ],
    );
    assert_eq!(config["deletion_grace_period_ms"], 1);
    fails(
        dir,
        &["dataset", "config", "d1", "--set", "colour=red"],
        2,
        "colour",
    );
    assert_eq!(
        ok(dir, &["dataset", "config", "d1"])["deletion_grace_period_ms"],
        1
    );
    checked += 3;

    let splits = write_splits(dir, "splits.json", &["s1", "s2", "s3"]);
    let staged = ok(
        dir,
        &[
            "stage",
            "d1",
            "--mode",
            "create-only",
            "--splits",
            splits.to_str().unwrap(),
        ],
    );
    assert_eq!(staged["splits"].as_array().unwrap().len(), 3);
    // From stdin: create-only again inserts only the new id.
    let output = mend_with_stdin(
        dir,
        &["stage", "d1", "--mode", "create-only", "--json"],
        r#"[{"split_id": "s3"}, {"split_id": "s4"}]"#,
    );
    assert!(output.status.success(), "{output:?}");
    let again: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let outcomes: Vec<&str> = again["splits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|split| split["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["skipped", "inserted"], "{again}");
    fails(
        dir,
        &[
            "stage",
            "d1",
            "--mode",
            "upsert",
            "--splits",
            "missing.json",
        ],
        2,
        "missing.json",
    );
    let garbage = dir.join("garbage.json");
    std::fs::write(&garbage, "{not json").unwrap();
    fails(
        dir,
        &[
            "stage",
            "d1",
            "--mode",
            "upsert",
            "--splits",
            garbage.to_str().unwrap(),
        ],
        2,
        "parse splits",
    );
    checked += 4;

    let uid = ok(dir, &["dataset", "show", "d1"])["uid"]
        .as_str()
        .unwrap()
        .to_string();
    for id in ["s1", "s2"] {
        common::write_object(&dir.join("mend-data"), "d1", &uid, id);
    }
    let published = ok(dir, &["publish", "d1", "--split", "s1,s2"]);
    assert_eq!(published["published"], serde_json::json!(["s1", "s2"]));
    fails(dir, &["publish", "d1", "--split", "zz"], 3, "zz");
    let upsert = write_splits(dir, "upsert.json", &["s1"]);
    fails(
        dir,
        &[
            "stage",
            "d1",
            "--mode",
            "upsert",
            "--splits",
            upsert.to_str().unwrap(),
        ],
        4,
        "s1",
    );
    checked += 3;

    let marked = ok(dir, &["mark", "d1", "s2"]);
    assert_eq!(marked["marked"], serde_json::json!(["s2"]));
    fails(dir, &["delete", "d1", "s1"], 4, "s1");
    ok(dir, &["delete", "d1", "s2"]);
    fails(dir, &["mark", "nope", "s1"], 3, "nope");
    checked += 4;

    let listed = ok(dir, &["list", "d1", "--state", "published"]);
    assert_eq!(listed["splits"].as_array().unwrap().len(), 1);
    let paged = ok(dir, &["list", "d1", "--limit", "1"]);
    assert_eq!(paged["next_after_split_id"], "s1");
    fails(dir, &["list", "d1", "--state", "gone"], 2, "gone");
    fails(dir, &["list", "d1", "--time-range", "10"], 2, "START..END");
    checked += 4;

    // s3 and s4 are staged past their (1 ms) grace period: gc marks them, and once the
    // (1 ms) deletion grace period is over, a second run deletes them.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let gc = ok(dir, &["gc", "d1"]);
    assert_eq!(gc["marked"], serde_json::json!(["s3", "s4"]));
    std::thread::sleep(std::time::Duration::from_millis(5));
    let gc = ok(dir, &["gc", "d1"]);
    assert_eq!(gc["deleted"], serde_json::json!(["s3", "s4"]));
    fails(dir, &["gc", "nope"], 3, "nope");
    assert_eq!(
        states(dir, "d1"),
        [("s1".to_string(), "published".to_string())]
    );
    checked += 4;

    // Verify: a dataset whose published splits all have their objects passes; once s1's
    // object is lost behind mend's back, verify names it and exits 1.
    ok(dir, &["dataset", "create", "d2"]);
    let verified = ok(dir, &["verify", "d2"]);
    assert_eq!(verified["violations"], serde_json::json!([]));
    assert_eq!(
        ok(dir, &["verify", "d1"])["violations"],
        serde_json::json!([])
    );
    std::fs::remove_file(dir.join("mend-data/datasets/d1/splits/s1")).unwrap();
    fails(dir, &["verify", "d1"], 1, "violation");
    for mode in ["probe", "roll-forward", "verify", "exclusive"] {
        ok(dir, &["recover", "d2", "--mode", mode]);
    }
    fails(dir, &["recover", "d2", "--mode", "sideways"], 2, "sideways");
    fails(dir, &["recover", "nope", "--mode", "probe"], 3, "nope");
    checked += 8;

    ok(dir, &["dataset", "fence", "d1", "--token", "t1"]);
    fails(dir, &["dataset", "fence", "d1"], 2, "--token");
    checked += 2;
    println!("cli commands: {checked} checks against the real binary");
}

#[test]
fn policy_inspect_test_replay_swap_active_and_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checked = 0;
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest/scenarios");
    let scenarios = scenarios.to_str().unwrap();

    // The built-in policy, as a file, and a rebadged build of it (same decisions, another
    // digest: a custom section appended).
    let builtin = dir.join("builtin.wasm");
    std::fs::write(&builtin, mend::runtime::DEFAULT_POLICY_WASM).unwrap();
    let mut rebadged = mend::runtime::DEFAULT_POLICY_WASM.to_vec();
    rebadged.extend_from_slice(&[0, 8, 7]);
    rebadged.extend_from_slice(b"rebadge");
    let second = dir.join("second.wasm");
    std::fs::write(&second, &rebadged).unwrap();
    let not_wasm = dir.join("not.wasm");
    std::fs::write(&not_wasm, b"hello").unwrap();
    let (builtin, second, not_wasm) = (
        builtin.to_str().unwrap(),
        second.to_str().unwrap(),
        not_wasm.to_str().unwrap(),
    );

    ok(dir, &["dataset", "create", "d1"]);
    let inspected = ok(dir, &["policy", "inspect", builtin]);
    assert!(inspected["digest"].as_str().unwrap().starts_with("sha256:"));
    fails(dir, &["policy", "inspect", not_wasm], 6, "not.wasm");
    checked += 2;

    let tested = ok(dir, &["policy", "test", builtin, scenarios]);
    assert!(tested.as_array().unwrap().len() >= 4);
    let broken_scenarios = dir.join("broken.json");
    std::fs::write(&broken_scenarios, "[]").unwrap();
    let output = mend(
        dir,
        &[
            "policy",
            "test",
            builtin,
            broken_scenarios.to_str().unwrap(),
        ],
    );
    assert_ne!(output.status.code(), Some(0), "{output:?}");
    checked += 2;

    let replay = ok(dir, &["policy", "replay", second]);
    assert!(replay.is_object(), "{replay}");
    fails(
        dir,
        &["policy", "replay", "missing.wasm"],
        2,
        "missing.wasm",
    );
    checked += 2;

    let before = ok(dir, &["policy", "active"]);
    assert!(before["record"].is_null());
    fails(dir, &["policy", "rollback"], 4, "nothing to roll back");
    let swapped = ok(dir, &["policy", "swap", second, "--scenarios", scenarios]);
    let after = ok(dir, &["policy", "active"]);
    assert_eq!(after["digest"], swapped["record"]["digest"]);
    assert_ne!(after["digest"], before["digest"]);
    fails(
        dir,
        &["policy", "swap", second],
        4,
        "already the active policy",
    );
    // The next process runs the swapped policy.
    assert_eq!(ok(dir, &["status"])["policy_digest"], after["digest"]);
    checked += 5;

    let rolled = ok(dir, &["policy", "rollback"]);
    assert_eq!(rolled["digest"], before["digest"]);
    assert_eq!(ok(dir, &["policy", "active"])["digest"], before["digest"]);
    let again = ok(dir, &["policy", "rollback"]);
    assert_eq!(again["digest"], after["digest"]);
    checked += 3;
    println!("cli policy commands: {checked} checks against the real binary");
}

#[test]
fn status_names_a_damaged_dataset_and_still_shows_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    ok(dir, &["dataset", "create", "good"]);
    ok(dir, &["dataset", "create", "broken"]);
    // The next version of broken's commit log holds garbage.
    let damaged = common::next_log_file(&dir.join("mend-data"), "broken");
    std::fs::write(damaged, "{ not json").unwrap();

    let status = ok(dir, &["status"]);
    assert_eq!(status["datasets"][0]["dataset_id"], "broken");
    assert!(status["datasets"][0]["unreadable"].is_string(), "{status}");
    assert_eq!(status["datasets"][1]["dataset_id"], "good");
    assert_eq!(status["datasets"][1]["pending_intents"], 0);
    fails(dir, &["dataset", "show", "broken"], 1, "broken");
    println!("cli status with a damaged dataset: 5 checks");
}

/// Runs `args` twice: both runs succeed and print the same JSON, which is returned.
fn twice(dir: &Path, args: &[&str]) -> serde_json::Value {
    let first = ok(dir, args);
    let again = ok(dir, args);
    assert_eq!(again, first, "mend {args:?} answered its retry otherwise");
    first
}

#[test]
fn every_mutating_command_answers_a_keyed_retry_as_it_answered_first() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut commands = 0;
    let mut refused = 0;

    // A staged split untouched for 1 ms is abandoned: gc has something to collect.
    let create = [
        "dataset",
        "create",
        "d1",
        "--staged-grace-period-ms",
        "1",
        "--idempotency-key",
        "create-1",
    ];
    let created = twice(dir, &create);
    assert_eq!(created[0]["dataset_id"], "d1");
    let uid = created[0]["uid"].as_str().unwrap().to_string();
    fails(dir, &["dataset", "create", "d1"], 4, "d1");
    fails(
        dir,
        &[
            "dataset",
            "create",
            "d1",
            "--staged-grace-period-ms",
            "2",
            "--idempotency-key",
            "create-1",
        ],
        2,
        "create-1",
    );
    commands += 1;
    refused += 1;

    // The config is read, edited and applied: the retry reads the promoted config, and is
    // answered the first answer.
    let config = [
        "dataset",
        "config",
        "d1",
        "--set",
        "deletion_grace_period_ms=700000",
        "--idempotency-key",
        "config-1",
    ];
    let applied = twice(dir, &config);
    assert_eq!(applied["deletion_grace_period_ms"], 700000);
    assert_eq!(ok(dir, &["dataset", "show", "d1"])["config_version"], 2);
    fails(
        dir,
        &[
            "dataset",
            "config",
            "d1",
            "--set",
            "deletion_grace_period_ms=800000",
            "--idempotency-key",
            "config-1",
        ],
        2,
        "config-1",
    );
    assert_eq!(ok(dir, &["dataset", "show", "d1"])["config_version"], 2);
    commands += 1;
    refused += 1;

    let fenced = twice(
        dir,
        &[
            "dataset",
            "fence",
            "d1",
            "--token",
            "t1",
            "--idempotency-key",
            "fence-1",
        ],
    );
    assert_eq!(fenced["publish_token"], "t1");
    twice(
        dir,
        &[
            "dataset",
            "fence",
            "d1",
            "--clear",
            "--idempotency-key",
            "fence-2",
        ],
    );
    commands += 2;

    let splits = write_splits(dir, "splits.json", &["s1", "s2", "s3"]);
    ok(
        dir,
        &[
            "stage",
            "d1",
            "--mode",
            "create-only",
            "--splits",
            splits.to_str().unwrap(),
        ],
    );
    for id in ["s1", "s2", "s3", "orphan"] {
        common::write_object(&dir.join("mend-data"), "d1", &uid, id);
    }
    let marked = twice(dir, &["mark", "d1", "s1", "--idempotency-key", "mark-1"]);
    assert_eq!(marked["marked"], serde_json::json!(["s1"]));
    let deleted = twice(
        dir,
        &["delete", "d1", "s1", "--idempotency-key", "delete-1"],
    );
    assert_eq!(deleted["deleted"], serde_json::json!(["s1"]));
    fails(dir, &["delete", "d1", "s1"], 3, "s1");
    fails(
        dir,
        &["delete", "d1", "s2", "--idempotency-key", "delete-1"],
        2,
        "delete-1",
    );
    commands += 2;
    refused += 1;

    std::thread::sleep(std::time::Duration::from_millis(20));
    let collected = twice(dir, &["gc", "d1", "--idempotency-key", "gc-1"]);
    assert_eq!(
        collected["marked"],
        serde_json::json!(["s2", "s3"]),
        "{collected}"
    );
    assert_eq!(ok(dir, &["gc", "d1"])["marked"], serde_json::json!([]));
    let reconciled = twice(
        dir,
        &["reconcile", "d1", "--idempotency-key", "reconcile-1"],
    );
    assert_eq!(
        reconciled["adopted"],
        serde_json::json!(["orphan"]),
        "{reconciled}"
    );
    twice(
        dir,
        &[
            "recover",
            "d1",
            "--mode",
            "roll-forward",
            "--idempotency-key",
            "recover-1",
        ],
    );
    fails(
        dir,
        &[
            "recover",
            "d1",
            "--mode",
            "exclusive",
            "--idempotency-key",
            "recover-1",
        ],
        2,
        "recover-1",
    );
    commands += 3;
    refused += 1;

    let mut rebadged = mend::runtime::DEFAULT_POLICY_WASM.to_vec();
    rebadged.extend_from_slice(&[0, 8, 7]);
    rebadged.extend_from_slice(b"rebadge");
    let second = dir.join("second.wasm");
    std::fs::write(&second, &rebadged).unwrap();
    let second = second.to_str().unwrap();
    let swapped = twice(
        dir,
        &[
            "policy",
            "swap",
            second,
            "--records",
            "10",
            "--idempotency-key",
            "swap-1",
        ],
    );
    fails(
        dir,
        &["policy", "swap", second],
        4,
        "already the active policy",
    );
    let rolled = twice(
        dir,
        &["policy", "rollback", "--idempotency-key", "rollback-1"],
    );
    assert_eq!(rolled["previous"], swapped["record"]["digest"]);
    assert_eq!(
        ok(dir, &["policy", "active"])["record"]["version"],
        rolled["version"],
        "a retried rollback rolled back again"
    );
    fails(
        dir,
        &["policy", "rollback", "--idempotency-key", "swap-1"],
        2,
        "swap-1",
    );
    commands += 2;
    refused += 1;

    fails(
        dir,
        &["mark", "d1", "s2", "--idempotency-key", "op:mine"],
        2,
        "op:",
    );
    assert_eq!(
        states(dir, "d1"),
        [
            ("orphan".to_string(), "published".to_string()),
            ("s2".to_string(), "marked_for_deletion".to_string()),
            ("s3".to_string(), "marked_for_deletion".to_string()),
        ]
    );
    println!(
        "cli idempotency: {commands} commands each answered a keyed retry as they answered first; {refused} reuses of a key refused, 1 bad key refused"
    );
}

//! The edges of the command line, through the real binary: numbers out of range, a publish of
//! a split without its object, and a Postgres that may lose acknowledged commits. Each is
//! refused with its exit code and one error line naming the field, the ids or the settings, and
//! changes nothing.

use crate::common;

use std::path::Path;

use common::{failed_with, mend, mend_command, ok_json, split_states, splits_file, write_object};

const MAX_GRACE: &str = "3155760000000";

/// Stages `ids` create-only through `mend stage`.
fn stage(dir: &Path, dataset: &str, ids: &[&str]) {
    let splits = splits_file(dir, "splits.json", ids);
    ok_json(
        dir,
        &[
            "stage",
            dataset,
            "--mode",
            "create-only",
            "--splits",
            splits.to_str().unwrap(),
        ],
    );
}

/// The reproduction: grace periods of u64::MAX used to wrap in gc, so a fresh split
/// was marked by the first gc and deleted by the second.
#[test]
fn grace_periods_out_of_range_are_refused_and_the_longest_keeps_fresh_splits() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checks = 0;
    for (flag, value) in [
        ("--staged-grace-period-ms", "18446744073709551615"),
        ("--deletion-grace-period-ms", "18446744073709551615"),
        ("--staged-grace-period-ms", "0"),
        ("--staged-grace-period-ms", "3155760000001"),
    ] {
        let field = flag.trim_start_matches("--").replace('-', "_");
        let output = mend(dir, &["dataset", "create", "d", flag, value]);
        failed_with(&output, 2, &[&field, value, "..="]);
        checks += 1;
    }
    assert_eq!(
        ok_json(dir, &["dataset", "list"]).as_array().unwrap().len(),
        0,
        "a refused create left a dataset behind"
    );
    checks += 1;

    ok_json(
        dir,
        &[
            "dataset",
            "create",
            "d",
            "--staged-grace-period-ms",
            MAX_GRACE,
            "--deletion-grace-period-ms",
            MAX_GRACE,
        ],
    );
    stage(dir, "d", &["fresh"]);
    for _ in 0..2 {
        ok_json(dir, &["gc", "d"]);
    }
    assert_eq!(
        split_states(dir, "d"),
        [("fresh".to_string(), "staged".to_string())]
    );
    checks += 1;

    // A config change out of range, and a number past u64, are refused the same way.
    for value in ["18446744073709551615", "99999999999999999999999"] {
        let output = mend(
            dir,
            &[
                "dataset",
                "config",
                "d",
                "--set",
                &format!("staged_grace_period_ms={value}"),
            ],
        );
        failed_with(&output, 2, &["staged_grace_period_ms", "1..=3155760000000"]);
        checks += 1;
    }
    // Settings: every numeric setting names its key and range.
    for (key, value) in [
        ("grace.staged_grace_period_ms", "0"),
        ("limits.max_stage_batch", "18446744073709551616"),
        ("limits.intent_lease_ms", "5"),
        ("limits.max_list_page", "4294967296"),
        ("serve.supervisor_interval_ms", "-1"),
    ] {
        let output = mend(dir, &["--set", &format!("{key}={value}"), "config"]);
        failed_with(&output, 2, &[key, "range"]);
        checks += 1;
    }
    println!("numbers at the edges through the CLI: {checks} checks");
}

/// Invariant 1 at every publish: a split whose object was never written is not published.
#[test]
fn publish_refuses_a_split_without_its_object() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    ok_json(dir, &["dataset", "create", "d"]);
    stage(dir, "d", &["with-object", "without-object"]);
    let uid = ok_json(dir, &["dataset", "show", "d"])["uid"]
        .as_str()
        .unwrap()
        .to_string();
    write_object(&dir.join("mend-data"), "d", &uid, "with-object");
    let output = mend(
        dir,
        &["publish", "d", "--split", "with-object,without-object"],
    );
    let line = failed_with(&output, 4, &["without-object", "no object"]);
    assert!(!line.contains("with-object,"), "{line}");
    assert_eq!(
        split_states(dir, "d"),
        [
            ("with-object".to_string(), "staged".to_string()),
            ("without-object".to_string(), "staged".to_string())
        ],
        "a refused publish published nothing"
    );
    write_object(&dir.join("mend-data"), "d", &uid, "without-object");
    ok_json(
        dir,
        &["publish", "d", "--split", "with-object,without-object"],
    );
    assert!(
        split_states(dir, "d")
            .iter()
            .all(|(_, state)| state == "published")
    );
    println!(
        "publish without an object: refused (exit 4, id named), nothing published; then published"
    );
}

/// A Postgres that may lose acknowledged commits is refused unless the risk is accepted.
#[test]
fn a_postgres_that_may_lose_commits_is_refused_unless_accepted() {
    let url = std::env::var("MEND_TEST_DATABASE_URL")
        .expect("MEND_TEST_DATABASE_URL is not set: run this test under scripts/with-postgres");
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let objects = format!("file://{}", dir.join("objects").display());
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    let output = mend_command(dir)
        .env_remove(common::ACCEPT_UNSAFE_DURABILITY)
        .args(["--catalog", &url, "--objects", &objects, "dataset", "list"])
        .output()
        .unwrap();
    failed_with(
        &output,
        4,
        &[
            "fsync=off",
            "synchronous_commit=off",
            "postgres.accept_unsafe_durability",
        ],
    );
    let output = mend_command(dir)
        .env_remove(common::ACCEPT_UNSAFE_DURABILITY)
        .args([
            "--set",
            "postgres.accept_unsafe_durability=true",
            "--catalog",
            &url,
            "--objects",
            &objects,
            "dataset",
            "list",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    println!(
        "unsafe Postgres: refused without the setting (exit 4, settings named), opened with it"
    );
}

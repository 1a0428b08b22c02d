//! `mend demo`, the README's first command, run by the real binary on the embedded default
//! catalog: what its summary says happened, that it runs again in the same directory, and that
//! it leaves the deployment's policy as it found it.

use crate::common;

use std::path::Path;

use common::{json, mend};

use mend::runtime::{DEFAULT_POLICY_WASM, digest_of};
use serde_json::Value;

const CAUTIOUS_SCENARIOS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../policies/cautious/scenarios"
);

fn count(value: &Value) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("{value} is not a count"))
}

/// Checks what every demo run must show, whatever ran before it in the directory; returns
/// how many behaviours it checked.
fn check_summary(summary: &Value, dir: &Path) -> usize {
    let mut checked = 0;
    let writers = summary["writers"].as_array().expect("writers");
    let crashed = writers.iter().filter(|w| w["outcome"] == "crashed").count();
    assert!(crashed > 0, "some writers crash: {summary:#}");
    assert_eq!(count(&summary["crashed"]), crashed as u64);
    assert!(
        writers.iter().any(|w| w["outcome"] == "completed"),
        "some writers complete: {summary:#}"
    );
    checked += 1;

    let in_doubt = count(&summary["in_doubt"]);
    assert!(
        in_doubt > 0,
        "the probe finds in-doubt intents: {summary:#}"
    );
    assert!(count(&summary["probe"]["roll_forward_required"]) > 0);
    let by_status: u64 = summary["probe"]
        .as_object()
        .unwrap()
        .values()
        .map(count)
        .sum();
    assert_eq!(by_status, in_doubt, "the probe's counts add up");
    checked += 1;
    assert_eq!(
        count(&summary["recovered"]),
        in_doubt,
        "recovery resolves every one"
    );
    assert_eq!(count(&summary["intents_left"]), 0);
    checked += 1;

    assert_eq!(count(&summary["reconcile_before_swap"]["adopted"]), 1);
    assert_eq!(count(&summary["reconcile_before_swap"]["discarded"]), 0);
    checked += 1;
    assert_eq!(count(&summary["reconcile_after_swap"]["adopted"]), 0);
    assert_eq!(count(&summary["reconcile_after_swap"]["discarded"]), 1);
    checked += 1;

    let policy = &summary["policy"];
    assert!(
        count(&policy["replay_changed_in_dataset"]) >= 1,
        "the replay shows the adopt that would now be a discard: {summary:#}"
    );
    assert!(count(&policy["replay_changed"]) >= count(&policy["replay_changed_in_dataset"]));
    assert_ne!(policy["swapped_to"], policy["before"]);
    checked += 1;

    assert_eq!(count(&summary["verify_violations"]), 0);
    checked += 1;
    let directory = summary["data"]["directory"]
        .as_str()
        .expect("a local directory");
    assert_eq!(
        Path::new(directory),
        dir.canonicalize().unwrap().join("mend-data"),
        "the summary says where the data is"
    );
    assert!(
        summary["data"]["catalog"]
            .as_str()
            .unwrap()
            .contains("mend-data")
    );
    checked + 1
}

#[test]
fn the_demo_runs_again_and_again_in_one_directory_and_restores_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let builtin = digest_of(DEFAULT_POLICY_WASM);
    let mut checked = 0;

    let first = json(&mend(dir, &["demo", "--json"]));
    checked += check_summary(&first, dir);
    let second = json(&mend(dir, &["demo", "--json"]));
    checked += check_summary(&second, dir);
    assert_ne!(
        first["dataset"], second["dataset"],
        "each run its own dataset"
    );
    assert!(
        count(&second["policy"]["replay_changed"]) >= 2,
        "the second swap's replay also sees the first run's adopt: {second:#}"
    );
    for summary in [&first, &second] {
        assert_eq!(summary["policy"]["before"], builtin.as_str());
        assert_eq!(summary["policy"]["restored"], builtin.as_str());
        assert_eq!(summary["policy"]["recorded_in_registry"], true);
    }
    checked += 2;

    let active = json(&mend(dir, &["policy", "active", "--json"]));
    assert_eq!(active["digest"], builtin.as_str(), "{active:#}");
    assert_eq!(active["record"]["change"], "rollback");
    checked += 1;

    let status = json(&mend(dir, &["status", "--json"]));
    let datasets = status["datasets"].as_array().unwrap();
    for summary in [&first, &second] {
        let found = datasets
            .iter()
            .find(|d| d["dataset_id"] == summary["dataset"])
            .unwrap_or_else(|| panic!("status lists {}: {status:#}", summary["dataset"]));
        assert_eq!(found["pending_intents"], 0);
    }
    checked += 1;

    // Readable, a third time: the steps, the tables, where the data is and what to try next.
    let readable = mend(dir, &["demo"]);
    assert!(readable.status.success(), "{readable:?}");
    let text = String::from_utf8_lossy(&readable.stdout);
    for expected in [
        "== the in-doubt state",
        "RollForwardRequired",
        "adopted (published)",
        "discarded (marked)",
        "0 violation(s)",
        "rolled back: mend-default",
        "mend-data",
        "mend recover demo-",
        "mend policy active",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
    checked += 1;
    println!("demo: {checked} checks against the real binary");
}

/// A deployment that already runs the cautious policy keeps it: the demo swaps in its own
/// process only and records nothing.
#[test]
fn the_demo_leaves_an_active_cautious_policy_active() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checked = 0;

    // The example second policy's component, as the library embeds it.
    let cautious_wasm =
        common::write_component(dir, "cautious.wasm", mend::runtime::CAUTIOUS_POLICY_WASM);
    let tested = mend(dir, &["policy", "test", &cautious_wasm, CAUTIOUS_SCENARIOS]);
    assert!(tested.status.success(), "{tested:?}");
    let swap = json(&mend(
        dir,
        &[
            "policy",
            "swap",
            &cautious_wasm,
            "--scenarios",
            CAUTIOUS_SCENARIOS,
            "--json",
        ],
    ));
    let cautious = swap["record"]["digest"].as_str().unwrap().to_string();
    checked += 2;

    let summary = json(&mend(dir, &["demo", "--json"]));
    checked += check_summary(&summary, dir);
    assert_eq!(summary["policy"]["recorded_in_registry"], false);
    assert_eq!(summary["policy"]["restored"], cautious.as_str());
    let active = json(&mend(dir, &["policy", "active", "--json"]));
    assert_eq!(active["digest"], cautious.as_str(), "{active:#}");
    assert_eq!(active["record"], swap["record"], "nothing recorded since");
    checked += 2;
    println!("demo with the cautious policy active: {checked} checks against the real binary");
}

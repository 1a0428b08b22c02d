//! The scenario harness against real components: the default policy's suites
//! (`guest/scenarios/*.json`) hold of the default component and of the native code they are
//! built from, and cover every outcome; a wrong expectation shows as a diff of the changed
//! field; the hostile component fails them; malformed files are refused naming the scenario.

use std::collections::BTreeSet;
use std::path::PathBuf;

use mend::runtime::{PolicyLimits, PolicyRuntime};
use mend::scenarios::{
    Call, CallKind, ScenarioError, Suite, SuiteReport, load_suite, parse_suite, render, run,
    run_native,
};
use mend_contract::{IntentPhase, ReconcileAction, RecoveryDecision, RecoveryMode, StageAction};

const SCENARIOS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../guest/scenarios");
const HOSTILE_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_HOSTILE_WASM"));

/// Every `*.json` of `guest/scenarios`, by file name.
pub(crate) fn default_suites() -> Vec<Suite> {
    let dir = std::fs::canonicalize(SCENARIOS_DIR).expect("guest/scenarios exists");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("guest/scenarios is readable")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no suites in {SCENARIOS_DIR}");
    paths
        .iter()
        .map(|path| load_suite(path).unwrap_or_else(|error| panic!("{error}")))
        .collect()
}

fn file_name(report: &SuiteReport) -> &str {
    report.file.rsplit('/').next().unwrap_or(&report.file)
}

#[test]
fn every_default_suite_passes_against_the_default_component() {
    let policy = PolicyRuntime::default_policy().expect("the default policy loads");
    let mut per_call = [0usize; CallKind::ALL.len()];
    for suite in default_suites() {
        let report = run(&policy, &suite);
        let counts: Vec<String> = suite
            .count_by_call()
            .into_iter()
            .filter(|(_, count)| *count > 0)
            .map(|(call, count)| format!("{call} {count}"))
            .collect();
        println!(
            "{}: {} passed, {} failed ({})",
            file_name(&report),
            report.passed,
            report.failed.len(),
            counts.join(", ")
        );
        assert!(report.all_passed(), "{}", render(&report));
        for (slot, (_, count)) in per_call.iter_mut().zip(suite.count_by_call()) {
            *slot += count;
        }
    }
    let totals: Vec<String> = CallKind::ALL
        .iter()
        .zip(per_call)
        .map(|(call, count)| format!("{call} {count}"))
        .collect();
    println!(
        "scenarios per call: {}; {} in all",
        totals.join(", "),
        per_call.iter().sum::<usize>()
    );
    assert!(
        per_call.iter().all(|count| *count > 0),
        "every call has scenarios: {totals:?}"
    );
}

#[test]
fn the_default_suites_are_true_of_the_native_code() {
    for suite in default_suites() {
        let report = run_native(&suite);
        println!(
            "{} (native): {} passed, {} failed",
            file_name(&report),
            report.passed,
            report.failed.len()
        );
        assert!(report.all_passed(), "{}", render(&report));
    }
}

/// The outcome a scenario's expectation shows, for each decision it contains.
fn outcomes(call: &Call) -> Vec<String> {
    match call {
        Call::PlanStage { input, expect } => {
            if expect.is_empty() {
                return vec![format!("{} empty request", input.mode)];
            }
            let folds = input.split_ids.len() > expect.len();
            let mut found: Vec<String> = expect
                .iter()
                .map(|planned| {
                    let state = input
                        .existing
                        .iter()
                        .find(|row| row.split_id == planned.split_id)
                        .map(|row| row.state.as_str());
                    match (&planned.action, state) {
                        (StageAction::Insert, _) => format!("{} insert", input.mode),
                        (StageAction::Overwrite, _) => format!("{} overwrite", input.mode),
                        (StageAction::Skip(state), _) => format!("{} skip {state}", input.mode),
                        (StageAction::Reject(_), state) => {
                            format!("{} reject {}", input.mode, state.unwrap_or("missing"))
                        }
                    }
                })
                .collect();
            if folds {
                found.push(format!("{} duplicates", input.mode));
            }
            found
        }
        Call::ValidatePublish { expect, .. } if expect.is_empty() => vec!["clean".into()],
        Call::ValidatePublish { expect, .. } => expect
            .iter()
            .map(|violation| format!("{:?}", violation.kind))
            .collect(),
        Call::DecideRecovery { input, expect } => expect
            .iter()
            .zip(&input.intents)
            .map(|(decision, intent)| match &decision.decision {
                RecoveryDecision::Stale => "stale".into(),
                RecoveryDecision::Defer(_) => "defer".into(),
                RecoveryDecision::RollForward => format!("roll forward {:?}", intent.kind),
                RecoveryDecision::RollBack => format!("roll back {:?}", input.mode),
                RecoveryDecision::Blocked(_) => format!("blocked {:?}", input.mode),
                RecoveryDecision::Abandon(_) if intent.phase == IntentPhase::Abandoned => {
                    "abandon, fenced earlier".into()
                }
                RecoveryDecision::Abandon(_) => {
                    format!("abandon {:?} {:?}", intent.kind, input.mode)
                }
            })
            .collect(),
        Call::PlanReconcile { input, expect } => expect
            .iter()
            .zip(&input.orphans)
            .map(|(decision, orphan)| match decision.action {
                ReconcileAction::Adopt => "adopt".into(),
                ReconcileAction::Discard(_) if !orphan.intact => "discard damaged".into(),
                ReconcileAction::Discard(_) => "discard earlier incarnation".into(),
            })
            .collect(),
        Call::PlanGc { input, expect } => {
            let mut found: Vec<String> = input
                .candidates
                .iter()
                .map(|candidate| {
                    let planned = expect.mark.contains(&candidate.split_id)
                        || expect.delete.contains(&candidate.split_id);
                    format!(
                        "gc {} {}",
                        candidate.state,
                        if planned { "collected" } else { "kept" }
                    )
                })
                .collect();
            if input.candidates.is_empty() {
                found.push("gc no candidates".into());
            }
            found
        }
    }
}

#[test]
fn the_default_suites_cover_every_outcome() {
    let covered: BTreeSet<String> = default_suites()
        .iter()
        .flat_map(|suite| &suite.scenarios)
        .flat_map(|scenario| outcomes(&scenario.call))
        .collect();
    let required = [
        "create-only insert",
        "create-only skip staged",
        "create-only skip published",
        "create-only skip marked_for_deletion",
        "create-only duplicates",
        "create-only empty request",
        "upsert insert",
        "upsert overwrite",
        "upsert reject published",
        "upsert reject marked_for_deletion",
        "upsert duplicates",
        "upsert empty request",
        "clean",
        "SplitMissing",
        "NotStaged",
        "NotPublished",
        "SplitInBoth",
        "CheckpointMismatch",
        "StalePublishToken",
        "stale",
        "defer",
        "roll forward Commit",
        "roll forward Merge",
        "roll forward Gc",
        "roll forward ConfigApply",
        "roll forward Reconcile",
        "roll back Exclusive",
        "roll back Probe",
        "blocked RollForward",
        "abandon Commit RollForward",
        "abandon Merge RollForward",
        "abandon Commit Probe",
        "abandon Commit Verify",
        "abandon, fenced earlier",
        "gc staged collected",
        "gc staged kept",
        "gc marked_for_deletion collected",
        "gc marked_for_deletion kept",
        "gc no candidates",
        "adopt",
        "discard damaged",
        "discard earlier incarnation",
    ];
    let missing: Vec<&str> = required
        .into_iter()
        .filter(|outcome| !covered.contains(*outcome))
        .collect();
    println!("outcomes covered: {}", covered.len());
    assert!(
        missing.is_empty(),
        "outcomes no scenario shows: {missing:?}"
    );
    // Blocked is only ever decided in roll-forward mode.
    assert!(
        !covered.contains(&format!("blocked {:?}", RecoveryMode::Exclusive)),
        "{covered:?}"
    );
}

#[test]
fn a_wrong_expectation_fails_with_a_diff_of_the_changed_field() {
    let path = format!("{SCENARIOS_DIR}/stage.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut file: serde_json::Value = serde_json::from_str(&text).unwrap();
    let original = file["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|scenario| {
            scenario["name"] == "upsert folds duplicate ids into one decision, the last entry wins"
        })
        .expect("the duplicate-folding scenario is in stage.json")
        .clone();
    assert_eq!(original["expect"][0]["request_index"], 3);
    let mut mutated = original.clone();
    mutated["name"] = "upsert folds duplicates, mutated to expect the first entry".into();
    mutated["expect"][0]["request_index"] = 0.into();
    file["scenarios"] = serde_json::json!([original, mutated]);
    let suite = parse_suite("mutated-stage.json", &file.to_string()).unwrap();

    let policy = PolicyRuntime::default_policy().unwrap();
    let report = run(&policy, &suite);
    let rendered = render(&report);
    println!("{rendered}");
    assert_eq!(report.passed, 1, "{rendered}");
    assert_eq!(report.failed.len(), 1, "{rendered}");
    let failure = &report.failed[0];
    assert_eq!(
        failure.name,
        "upsert folds duplicates, mutated to expect the first entry"
    );
    let changed: Vec<&str> = failure
        .diff
        .lines()
        .filter(|line| line.starts_with('-') || line.starts_with('+'))
        .collect();
    assert_eq!(
        changed,
        ["-    \"request_index\": 0,", "+    \"request_index\": 3,"],
        "{}",
        failure.diff
    );
    assert!(
        rendered.contains("FAIL upsert folds duplicates, mutated to expect the first entry\n"),
        "{rendered}"
    );
    assert!(rendered.ends_with("1 passed, 1 failed\n"), "{rendered}");
}

#[test]
fn the_hostile_component_fails_the_default_suites() {
    let hostile = PolicyRuntime::load(HOSTILE_WASM, PolicyLimits::default())
        .expect("the hostile policy loads");
    for suite in default_suites() {
        let report = run(&hostile, &suite);
        println!(
            "{} (hostile): {} passed, {} failed",
            file_name(&report),
            report.passed,
            report.failed.len()
        );
        assert!(!report.failed.is_empty(), "{}", render(&report));
        if file_name(&report) == "stage.json" {
            println!("{}", render(&report));
        }

        // Create-only never touches an existing row; the hostile policy overwrites it.
        let failed: BTreeSet<&str> = report.failed.iter().map(|f| f.name.as_str()).collect();
        let create_only_skips: Vec<&str> = suite
            .scenarios
            .iter()
            .filter(|scenario| match &scenario.call {
                Call::PlanStage { expect, .. } => expect
                    .iter()
                    .any(|planned| matches!(planned.action, StageAction::Skip(_))),
                _ => false,
            })
            .map(|scenario| scenario.name.as_str())
            .collect();
        for name in &create_only_skips {
            assert!(failed.contains(name), "the hostile policy passed {name:?}");
        }
        if file_name(&report) == "stage.json" {
            assert!(create_only_skips.len() >= 4, "{create_only_skips:?}");
        }
    }
}

fn malformed(file: &str, text: &str) -> ScenarioError {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    std::fs::write(&path, text).unwrap();
    let error = load_suite(&path).expect_err("a malformed suite is refused");
    let message = error.to_string();
    println!("{message}");
    assert!(
        message.starts_with(&path.display().to_string()),
        "the error names the file: {message}"
    );
    error
}

#[test]
fn malformed_files_are_refused_naming_the_scenario() {
    let scenario = |name: &str, call: &str, input: serde_json::Value| serde_json::json!({ "name": name, "call": call, "input": input, "expect": [] });
    let good_input = serde_json::json!({
        "dataset_id": "ds", "mode": "upsert", "split_ids": [], "existing": [],
    });
    let suite = |scenarios: Vec<serde_json::Value>| {
        serde_json::json!({ "format_version": 1, "scenarios": scenarios }).to_string()
    };

    let error = malformed(
        "unknown-call.json",
        &suite(vec![
            scenario("fine", "plan-stage", good_input.clone()),
            scenario(
                "asks for a call that does not exist",
                "plan-merge",
                good_input.clone(),
            ),
        ]),
    );
    match error {
        ScenarioError::UnknownCall { at, call } => {
            assert_eq!(at.index, 1);
            assert_eq!(
                at.name.as_deref(),
                Some("asks for a call that does not exist")
            );
            assert_eq!(call, "plan-merge");
        }
        other => panic!("expected UnknownCall, got {other:?}"),
    }

    let mut bad_shape = good_input.clone();
    bad_shape["mode"] = "sometimes".into();
    let error = malformed(
        "bad-input.json",
        &suite(vec![scenario(
            "stages in a mode that does not exist",
            "plan-stage",
            bad_shape,
        )]),
    );
    match &error {
        ScenarioError::InvalidInput { at, call, problem } => {
            assert_eq!(at.index, 0);
            assert_eq!(
                at.name.as_deref(),
                Some("stages in a mode that does not exist")
            );
            assert_eq!(*call, CallKind::PlanStage);
            assert!(problem.contains("sometimes"), "{problem}");
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    assert!(
        error
            .to_string()
            .contains("scenarios[0] \"stages in a mode that does not exist\""),
        "{error}"
    );

    // An input for another call does not parse as this one's.
    let error = malformed(
        "wrong-call-input.json",
        &suite(vec![scenario(
            "a stage input sent to validate-publish",
            "validate-publish",
            good_input,
        )]),
    );
    assert!(
        matches!(error, ScenarioError::InvalidInput { call: CallKind::ValidatePublish, ref at, .. } if at.index == 0),
        "{error:?}"
    );

    let error = malformed(
        "future.json",
        r#"{"format_version": 2, "scenarios": [{"name": "n", "call": "plan-stage"}]}"#,
    );
    assert!(
        matches!(error, ScenarioError::UnsupportedFormatVersion { ref found, .. } if found == "2"),
        "{error:?}"
    );

    let missing = load_suite(format!("{SCENARIOS_DIR}/no-such-suite.json")).unwrap_err();
    assert!(matches!(missing, ScenarioError::Read { .. }), "{missing:?}");
}

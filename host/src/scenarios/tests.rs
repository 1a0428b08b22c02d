use serde_json::{Value, json};

use super::*;
use crate::runtime::{DEFAULT_POLICY_WASM, PolicyLimits};

fn stage_scenario(name: &str, ids: &[&str], expect: Value) -> Value {
    json!({
        "name": name,
        "call": "plan-stage",
        "input": {
            "dataset_id": "ds",
            "mode": "create-only",
            "split_ids": ids,
            "existing": [{ "split_id": "a", "state": "published" }],
        },
        "expect": expect,
    })
}

fn suite_text(scenarios: Vec<Value>) -> String {
    json!({ "format_version": 1, "scenarios": scenarios }).to_string()
}

fn skip_a() -> Value {
    stage_scenario(
        "create-only skips a published split",
        &["a"],
        json!([{ "split_id": "a", "request_index": 0, "action": { "skip": "published" } }]),
    )
}

fn parse_error(text: &str) -> ScenarioError {
    parse_suite("t.json", text).expect_err("the suite is refused")
}

#[test]
fn a_suite_parses_and_writes_back_the_same() {
    let suite = parse_suite("t.json", &suite_text(vec![skip_a()])).unwrap();
    assert_eq!(suite.file, "t.json");
    assert_eq!(
        suite.scenarios[0].name,
        "create-only skips a published split"
    );
    assert_eq!(suite.scenarios[0].call.kind(), CallKind::PlanStage);
    assert_eq!(parse_suite("t.json", &suite.to_json()).unwrap(), suite);
    assert_eq!(
        suite.count_by_call(),
        [
            (CallKind::PlanStage, 1),
            (CallKind::ValidatePublish, 0),
            (CallKind::DecideRecovery, 0),
            (CallKind::PlanReconcile, 0),
            (CallKind::PlanGc, 0),
        ]
    );
}

#[test]
fn suite_level_problems_name_the_file() {
    let error = parse_error("{ not json");
    assert!(matches!(error, ScenarioError::NotJson { ref file, .. } if file == "t.json"));

    let error = parse_error(r#"{"format_version": 2, "scenarios": []}"#);
    assert!(
        matches!(error, ScenarioError::UnsupportedFormatVersion { ref found, .. } if found == "2"),
        "{error}"
    );
    let error = parse_error(r#"{"format_version": "1", "scenarios": []}"#);
    assert!(matches!(
        error,
        ScenarioError::UnsupportedFormatVersion { .. }
    ));

    let error = parse_error(r#"{"format_version": 1, "scenarios": [], "extra": 1}"#);
    assert!(
        matches!(error, ScenarioError::InvalidSuite { ref problem, .. } if problem.contains("extra")),
        "{error}"
    );
    let error = parse_error(r#"{"scenarios": []}"#);
    assert!(
        matches!(error, ScenarioError::InvalidSuite { ref problem, .. } if problem.contains("format_version")),
        "{error}"
    );
    let error = parse_error(r#"{"format_version": 1, "scenarios": []}"#);
    assert!(error.to_string().contains("tests nothing"), "{error}");
}

#[test]
fn scenario_problems_name_the_scenario() {
    let mut unknown_call = skip_a();
    unknown_call["call"] = json!("plan-stages");
    let error = parse_error(&suite_text(vec![skip_a(), unknown_call]));
    match &error {
        ScenarioError::UnknownCall { at, call } => {
            assert_eq!(at.index, 1);
            assert_eq!(
                at.name.as_deref(),
                Some("create-only skips a published split")
            );
            assert_eq!(call, "plan-stages");
        }
        other => panic!("expected an unknown call, got {other:?}"),
    }
    assert!(
        error
            .to_string()
            .starts_with("t.json: scenarios[1] \"create-only skips a published split\": unknown call \"plan-stages\""),
        "{error}"
    );

    let mut extra = skip_a();
    extra["expected"] = json!([]);
    let error = parse_error(&suite_text(vec![extra]));
    assert!(
        matches!(error, ScenarioError::InvalidScenario { ref problem, .. } if problem.contains("expected")),
        "{error}"
    );

    let mut unnamed = skip_a();
    unnamed.as_object_mut().unwrap().remove("name");
    let error = parse_error(&suite_text(vec![unnamed]));
    assert!(
        matches!(error, ScenarioError::InvalidScenario { ref at, ref problem } if at.name.is_none() && problem.contains("name")),
        "{error}"
    );

    let error = parse_error(&suite_text(vec![skip_a(), skip_a()]));
    assert!(
        matches!(error, ScenarioError::InvalidScenario { ref at, ref problem } if at.index == 1 && problem.contains("same name")),
        "{error}"
    );
}

#[test]
fn inputs_and_expectations_must_have_exactly_their_types_fields() {
    let mut wrong_type = skip_a();
    wrong_type["input"]["split_ids"] = json!("a");
    let error = parse_error(&suite_text(vec![wrong_type]));
    assert!(
        matches!(
            error,
            ScenarioError::InvalidInput {
                call: CallKind::PlanStage,
                ..
            }
        ),
        "{error}"
    );

    let mut misspelt = skip_a();
    misspelt["input"]["existing"][0]["sate"] = json!("staged");
    let error = parse_error(&suite_text(vec![misspelt]));
    assert!(
        error
            .to_string()
            .contains("unknown field `input.existing[0].sate`"),
        "{error}"
    );

    let mut bad_variant = skip_a();
    bad_variant["expect"][0]["action"] = json!({ "skip": "deleted" });
    let error = parse_error(&suite_text(vec![bad_variant]));
    assert!(
        matches!(error, ScenarioError::InvalidExpect { ref problem, .. } if problem.contains("deleted")),
        "{error}"
    );

    // Serde would read an omitted option as `None`; a reference file must say so.
    let publish = json!({
        "name": "a clean publish",
        "call": "validate-publish",
        "input": {
            "dataset_id": "ds", "staged_split_ids": [], "replaced_split_ids": [],
            "checkpoint_delta": null, "rows": [], "checkpoint": [],
            "current_publish_token": null,
        },
        "expect": [],
    });
    let error = parse_error(&suite_text(vec![publish]));
    assert!(
        error
            .to_string()
            .contains("missing field `input.publish_token`"),
        "{error}"
    );
}

#[test]
fn a_run_reports_each_scenario_and_diffs_the_wrong_ones() {
    let wrong = stage_scenario(
        "create-only inserts b (wrong: says overwrite)",
        &["b"],
        json!([{ "split_id": "b", "request_index": 0, "action": "overwrite" }]),
    );
    let suite = parse_suite("t.json", &suite_text(vec![skip_a(), wrong])).unwrap();
    let policy = PolicyRuntime::default_policy().unwrap();
    let report = run(&policy, &suite);
    assert_eq!(report, run_native(&suite));
    assert_eq!(report.passed, 1);
    assert!(!report.all_passed());
    let failure = &report.failed[0];
    assert_eq!(failure.error, None);
    assert_eq!(failure.actual.as_ref().unwrap()[0]["action"], "insert");
    let rendered = [
        "t.json",
        "PASS create-only skips a published split",
        "FAIL create-only inserts b (wrong: says overwrite)",
        "    @@ -2,6 +2,6 @@",
        "       {",
        "         \"split_id\": \"b\",",
        "         \"request_index\": 0,",
        "    -    \"action\": \"overwrite\"",
        "    +    \"action\": \"insert\"",
        "       }",
        "     ]",
        "1 passed, 1 failed",
    ];
    assert_eq!(render(&report).lines().collect::<Vec<_>>(), rendered);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["failed"][0]["call"], "plan-stage");
    assert_eq!(json["results"][0]["passed"], true);
}

#[test]
fn a_policy_error_fails_its_scenario_and_the_rest_still_run() {
    // Any answer with an entry is over this limit; an empty one is not.
    let policy = PolicyRuntime::load(
        DEFAULT_POLICY_WASM,
        PolicyLimits {
            max_output_bytes: 1,
            ..PolicyLimits::default()
        },
    )
    .unwrap();
    let empty = stage_scenario("an empty request plans nothing", &[], json!([]));
    let suite = parse_suite("t.json", &suite_text(vec![skip_a(), empty])).unwrap();
    let report = run(&policy, &suite);
    assert_eq!(report.passed, 1);
    let failure = &report.failed[0];
    assert_eq!(failure.name, "create-only skips a published split");
    assert_eq!(failure.actual, None);
    assert!(
        failure.error.as_deref().unwrap().contains("over the limit"),
        "{failure:?}"
    );
    assert!(render(&report).contains("FAIL create-only skips a published split\n    the policy failed instead of deciding: policy call plan-stage returned"));
}

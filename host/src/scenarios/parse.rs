//! Reading a suite file strictly: every problem is a [`ScenarioError`] naming the file and the
//! scenario, and nothing a reader might believe is checked is silently ignored.
//!
//! `mend_contract`'s serde derives accept fields they do not know and fill an omitted `Option`
//! with `None`. A scenario file is a reference, so a misspelt field must not pass as an
//! omitted one: each input and expectation is parsed into its type, serialised back, and any
//! key present on one side only is an error with its path.

use std::collections::HashSet;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{Call, CallKind, FORMAT_VERSION, Scenario, ScenarioAt, ScenarioError, Suite};

const SUITE_FIELDS: [&str; 2] = ["format_version", "scenarios"];
const SCENARIO_FIELDS: [&str; 4] = ["name", "call", "input", "expect"];

pub(super) fn suite(file: &str, text: &str) -> Result<Suite, ScenarioError> {
    let invalid = |problem: String| ScenarioError::InvalidSuite {
        file: file.to_string(),
        problem,
    };
    let value: Value = serde_json::from_str(text).map_err(|error| ScenarioError::NotJson {
        file: file.to_string(),
        message: error.to_string(),
    })?;
    let Value::Object(fields) = value else {
        return Err(invalid(format!(
            "a suite is a JSON object with the fields {SUITE_FIELDS:?}, not {}",
            crate::validate::json_kind(&value)
        )));
    };
    check_fields(&fields, &SUITE_FIELDS).map_err(invalid)?;

    // The version first: a newer format may shape everything after it differently.
    let version = &fields["format_version"];
    if version.as_u64() != Some(u64::from(FORMAT_VERSION)) {
        return Err(ScenarioError::UnsupportedFormatVersion {
            file: file.to_string(),
            found: version.to_string(),
        });
    }
    let Value::Array(entries) = &fields["scenarios"] else {
        return Err(invalid(format!(
            "`scenarios` is an array, not {}",
            crate::validate::json_kind(&fields["scenarios"])
        )));
    };
    if entries.is_empty() {
        return Err(invalid(
            "`scenarios` is empty: a suite without scenarios tests nothing".into(),
        ));
    }

    let mut names = HashSet::new();
    let mut scenarios = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let scenario = self::scenario(file, index, entry)?;
        if !names.insert(scenario.name.clone()) {
            return Err(ScenarioError::InvalidScenario {
                at: ScenarioAt::new(file, index, Some(&scenario.name)),
                problem: "another scenario of this file has the same name; names are unique so \
                          that a failure names one scenario"
                    .into(),
            });
        }
        scenarios.push(scenario);
    }
    Ok(Suite {
        file: file.to_string(),
        scenarios,
    })
}

fn scenario(file: &str, index: usize, entry: &Value) -> Result<Scenario, ScenarioError> {
    let name = entry.get("name").and_then(Value::as_str);
    let at = ScenarioAt::new(file, index, name);
    let invalid = |problem: String| ScenarioError::InvalidScenario {
        at: at.clone(),
        problem,
    };
    let Value::Object(fields) = entry else {
        return Err(invalid(format!(
            "a scenario is a JSON object with the fields {SCENARIO_FIELDS:?}, not {}",
            crate::validate::json_kind(entry)
        )));
    };
    check_fields(fields, &SCENARIO_FIELDS).map_err(invalid)?;
    let name = match name {
        Some(name) if !name.trim().is_empty() => name.to_string(),
        Some(_) => return Err(invalid("`name` is empty".into())),
        None => {
            return Err(invalid(format!(
                "`name` is a string, not {}",
                crate::validate::json_kind(&fields["name"])
            )));
        }
    };
    let Some(call_name) = fields["call"].as_str() else {
        return Err(invalid(format!(
            "`call` is a string, not {}",
            crate::validate::json_kind(&fields["call"])
        )));
    };
    let Some(kind) = CallKind::parse(call_name) else {
        return Err(ScenarioError::UnknownCall {
            at,
            call: call_name.to_string(),
        });
    };

    let (input, expect) = (&fields["input"], &fields["expect"]);
    let input_error = |problem| ScenarioError::InvalidInput {
        at: at.clone(),
        call: kind,
        problem,
    };
    let expect_error = |problem| ScenarioError::InvalidExpect {
        at: at.clone(),
        call: kind,
        problem,
    };
    let call = match kind {
        CallKind::PlanStage => Call::PlanStage {
            input: typed(input, "input", &input_error)?,
            expect: typed(expect, "expect", &expect_error)?,
        },
        CallKind::ValidatePublish => Call::ValidatePublish {
            input: typed(input, "input", &input_error)?,
            expect: typed(expect, "expect", &expect_error)?,
        },
        CallKind::DecideRecovery => Call::DecideRecovery {
            input: typed(input, "input", &input_error)?,
            expect: typed(expect, "expect", &expect_error)?,
        },
        CallKind::PlanReconcile => Call::PlanReconcile {
            input: typed(input, "input", &input_error)?,
            expect: typed(expect, "expect", &expect_error)?,
        },
        CallKind::PlanGc => Call::PlanGc {
            input: typed(input, "input", &input_error)?,
            expect: typed(expect, "expect", &expect_error)?,
        },
    };
    Ok(Scenario { name, call })
}

/// `value` as a `T`, with exactly the fields `T` has; `path` names it in problems.
fn typed<T: DeserializeOwned + Serialize>(
    value: &Value,
    path: &str,
    error: &impl Fn(String) -> ScenarioError,
) -> Result<T, ScenarioError> {
    let parsed: T = serde_json::from_value(value.clone()).map_err(|e| error(e.to_string()))?;
    let canonical = serde_json::to_value(&parsed).map_err(|e| error(e.to_string()))?;
    let mut problems = Vec::new();
    same_fields(value, &canonical, path, &mut problems);
    if problems.is_empty() {
        Ok(parsed)
    } else {
        Err(error(problems.join("; ")))
    }
}

/// Records every object key found in only one of `given` and `canonical`, by path.
fn same_fields(given: &Value, canonical: &Value, path: &str, problems: &mut Vec<String>) {
    match (given, canonical) {
        (Value::Object(given), Value::Object(canonical)) => {
            for (key, value) in given {
                match canonical.get(key) {
                    Some(expected) => {
                        same_fields(value, expected, &format!("{path}.{key}"), problems);
                    }
                    None => problems.push(format!("unknown field `{path}.{key}`")),
                }
            }
            for key in canonical.keys().filter(|key| !given.contains_key(*key)) {
                problems.push(format!(
                    "missing field `{path}.{key}` (write null for none)"
                ));
            }
        }
        (Value::Array(given), Value::Array(canonical)) => {
            for (index, (given, canonical)) in given.iter().zip(canonical).enumerate() {
                same_fields(given, canonical, &format!("{path}[{index}]"), problems);
            }
        }
        _ => {}
    }
}

/// Unknown fields are errors; so are missing ones.
fn check_fields(fields: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    let unknown: Vec<&str> = fields
        .keys()
        .map(String::as_str)
        .filter(|key| !allowed.contains(key))
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "unknown field(s) {unknown:?}; the fields are {allowed:?}"
        ));
    }
    let missing: Vec<&str> = allowed
        .iter()
        .copied()
        .filter(|key| !fields.contains_key(*key))
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing field(s) {missing:?}"));
    }
    Ok(())
}

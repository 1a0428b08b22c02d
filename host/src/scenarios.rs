//! Scenario suites: decisions written down as JSON, which any policy component must reproduce.
//!
//! A policy author records inputs and the decisions expected of them; [`load_suite`] reads a
//! file, [`run`] asks a loaded component each question in a fresh sandbox, and [`render`]
//! says what passed and shows a line diff of what did not. The default policy's own suites
//! are `guest/scenarios/*.json`: they are its reference, and `tests/tests/scenarios.rs` holds
//! them true of the component and of the native code alike.
//!
//! This module reads, runs and reports; it never decides whether a failing policy may be
//! loaded elsewhere, and it has no command line (the CLI wraps these three calls).
//!
//! # Format, version 1
//!
//! One file is one suite: a JSON object with exactly the fields `format_version` (the
//! integer `1`) and `scenarios` (a non-empty array). Each scenario is an object with exactly
//! these fields:
//!
//! | field    | value                                                                      |
//! |----------|----------------------------------------------------------------------------|
//! | `name`   | non-empty string, unique in the file; say what is being shown              |
//! | `call`   | `"plan-stage"`, `"validate-publish"`, `"decide-recovery"` or `"plan-reconcile"` |
//! | `input`  | the call's input, in `mend_contract`'s serde shape (below)                   |
//! | `expect` | the call's whole output, in the same shape                                 |
//!
//! ```json
//! {
//!   "format_version": 1,
//!   "scenarios": [
//!     {
//!       "name": "create-only skips a split that is already published",
//!       "call": "plan-stage",
//!       "input": {
//!         "dataset_id": "ds",
//!         "mode": "create-only",
//!         "split_ids": ["a"],
//!         "existing": [{ "split_id": "a", "state": "published" }]
//!       },
//!       "expect": [{ "split_id": "a", "request_index": 0, "action": { "skip": "published" } }]
//!     }
//!   ]
//! }
//! ```
//!
//! A scenario passes when the output equals `expect` exactly: the same entries in the same
//! order, every string (reasons, messages) included. Each call's output order is part of its
//! contract: plan-stage answers sorted by split id, validate-publish in its fixed order of
//! kinds, decide-recovery and plan-reconcile in the input's order, plan-gc's lists in the
//! candidates' order.
//!
//! ## Shapes
//!
//! Records are objects whose fields are the WIT record's, in snake_case; every field is
//! required (write `null` for an absent option) and no other field is allowed. Enums are
//! strings. A variant without payload is its name as a string; one with a payload is an object
//! with that one key.
//!
//! | call               | `input`            | `expect`                       |
//! |--------------------|--------------------|--------------------------------|
//! | `plan-stage`       | `StagePlanInput`   | array of `PlannedSplit`        |
//! | `validate-publish` | `PublishInput`     | array of `PublishViolation`    |
//! | `decide-recovery`  | `RecoveryInput`    | array of `IntentDecision`      |
//! | `plan-reconcile`   | `ReconcileInput`   | array of `ReconcileDecision`   |
//! | `plan-gc`          | `GcInput`          | `GcPlan`                       |
//!
//! ```text
//! SplitState        "staged" | "published" | "marked_for_deletion"
//! ExistingRow       { split_id: string, state: SplitState }
//! StagePlanInput    { dataset_id: string, mode: "upsert" | "create-only",
//!                     split_ids: [string], existing: [ExistingRow] }
//! PlannedSplit      { split_id: string, request_index: u32,
//!                     action: "insert" | "overwrite" | { skip: SplitState } | { reject: string } }
//! PublishInput      { dataset_id: string, staged_split_ids: [string],
//!                     replaced_split_ids: [string],
//!                     checkpoint_delta: null | { source: string, partitions: [
//!                         { partition: string, from_position: u64 | null, to_position: u64 } ] },
//!                     publish_token: string | null, rows: [ExistingRow],
//!                     checkpoint: [{ partition: string, position: u64 }],
//!                     current_publish_token: string | null }
//! PublishViolation  { kind: "split_missing" | "not_staged" | "not_published" | "split_in_both"
//!                           | "checkpoint_mismatch" | "stale_publish_token",
//!                     subjects: [string], message: string }
//! RecoveryInput     { dataset_id: string, mode: "probe" | "roll-forward" | "exclusive" | "verify",
//!                     now_ms: i64, intents: [IntentObservation] }
//! IntentObservation { operation_id: string,
//!                     kind: "commit" | "merge" | "gc" | "config_apply" | "reconcile",
//!                     phase: "armed" | "effects_confirmed" | "abandoned", owner_lease_live: bool,
//!                     planned_rows: [string], rows: [ExistingRow],
//!                     objects: [{ split_id: string, present: bool, matches: bool }],
//!                     publish_staged: [string], publish_replaced: [string],
//!                     has_checkpoint_delta: bool, checkpoint_at_from: bool,
//!                     checkpoint_at_to: bool, checkpoint_reached_to: bool,
//!                     gc_splits: [string], mark_splits: [string],
//!                     config_at_expected: bool, config_applied: bool }
//! IntentDecision    { operation_id: string,
//!                     decision: "roll_forward" | "roll_back" | "stale" | { defer: string }
//!                             | { blocked: { why: string, operator_action: string } }
//!                             | { abandon: string } }
//! ReconcileInput    { dataset_id: string, now_ms: i64, orphans: [{ split_id: string,
//!                     same_incarnation: bool, intact: bool, metadata_json: string,
//!                     age_ms: i64 }] }
//! ReconcileDecision { split_id: string, action: "adopt" | { discard: string } }
//! GcInput           { dataset_id: string, now_ms: i64, staged_grace_period_ms: u64,
//!                     deletion_grace_period_ms: u64, candidates: [{ split_id: string,
//!                     state: SplitState, updated_at_ms: i64 }] }
//! GcPlan            { mark: [string], delete: [string] }
//! ```
//!
//! ## Errors
//!
//! A file that is not JSON, has an unknown or missing field at any depth, an unknown
//! `format_version` or `call`, a duplicate or empty name, or an input or expectation that
//! does not parse as its call's type is refused whole with a [`ScenarioError`] naming the
//! file and the scenario (`scenarios[index]` and its name). A policy that traps or exceeds a
//! limit on one scenario fails that scenario; the others still run.

mod diff;
mod parse;
mod write;

use std::fmt;
use std::fmt::Write as _;
use std::path::Path;

use mend_contract::{
    GcInput, GcPlan, IntentDecision, PlannedSplit, PublishInput, PublishViolation,
    ReconcileDecision, ReconcileInput, RecoveryInput, StagePlanInput,
};
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};

use crate::error::PolicyError;
use crate::runtime::PolicyRuntime;

pub use diff::line_diff;

/// The format this module reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// The scenarios of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suite {
    /// Where it was read from, as given; reports and errors name it.
    pub file: String,
    /// The scenarios, in the file's order.
    pub scenarios: Vec<Scenario>,
}

/// One question to a policy and the answer it must give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// What the scenario shows, unique in its file.
    pub name: String,
    /// The call, its input and the output it must give.
    pub call: Call,
}

/// A policy call with its input and the whole expected output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `plan-stage`: the input and the planned splits it must give.
    PlanStage {
        /// The call's input.
        input: StagePlanInput,
        /// Its whole expected output.
        expect: Vec<PlannedSplit>,
    },
    /// `validate-publish`: the input and the violations it must report.
    ValidatePublish {
        /// The call's input.
        input: PublishInput,
        /// Its whole expected output.
        expect: Vec<PublishViolation>,
    },
    /// `decide-recovery`: the observations and the decisions it must take.
    DecideRecovery {
        /// The call's input.
        input: RecoveryInput,
        /// Its whole expected output.
        expect: Vec<IntentDecision>,
    },
    /// `plan-reconcile`: the orphans and what it must do with each.
    PlanReconcile {
        /// The call's input.
        input: ReconcileInput,
        /// Its whole expected output.
        expect: Vec<ReconcileDecision>,
    },
    /// `plan-gc`: the candidates and the plan it must make.
    PlanGc {
        /// The call's input.
        input: GcInput,
        /// Its whole expected output.
        expect: GcPlan,
    },
}

/// Which policy function a scenario calls, named as in the WIT contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum CallKind {
    /// `plan-stage`.
    PlanStage,
    /// `validate-publish`.
    ValidatePublish,
    /// `decide-recovery`.
    DecideRecovery,
    /// `plan-reconcile`.
    PlanReconcile,
    /// `plan-gc`.
    PlanGc,
}

/// What running a suite found, scenario by scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SuiteReport {
    /// The suite's file, as given.
    pub file: String,
    /// How many scenarios passed.
    pub passed: usize,
    /// The scenarios that failed, in the file's order.
    pub failed: Vec<Failure>,
    /// Every scenario in the file's order, passed or not.
    pub results: Vec<ScenarioResult>,
}

/// One scenario's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScenarioResult {
    /// The scenario's name.
    pub name: String,
    /// Its call.
    pub call: CallKind,
    /// Whether the policy answered exactly what was expected.
    pub passed: bool,
}

/// A scenario whose output differed from its expectation, or whose call failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = ScenarioFailure))]
pub struct Failure {
    /// The scenario's name.
    pub name: String,
    /// Its call.
    pub call: CallKind,
    /// The pretty-printed expected and actual JSON, line by line in unified style: `-`
    /// expected only, `+` actual only. When the call failed, that error instead.
    pub diff: String,
    /// What the scenario expects, as JSON.
    pub expected: serde_json::Value,
    /// What the policy answered; `None` when the call failed.
    pub actual: Option<serde_json::Value>,
    /// The policy error (trap, limit) that failed the call.
    pub error: Option<String>,
}

/// Where in a suite file a problem is: `FILE: scenarios[INDEX] "NAME"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioAt {
    /// The suite's file, as given.
    pub file: String,
    /// 0-based position in the file's `scenarios` array.
    pub index: usize,
    /// `None` when the scenario has no readable name.
    pub name: Option<String>,
}

/// A suite file that cannot be used. Nothing of it runs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario file {file}: {source}")]
    Read {
        /// The file, as given.
        file: String,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },

    /// The file is not JSON.
    #[error("{file}: not JSON: {message}")]
    NotJson {
        /// The file, as given.
        file: String,
        /// The JSON parser's message, with the line and column.
        message: String,
    },

    /// The file is in a format version this mend does not read.
    #[error(
        "{file}: format_version {found} is not one this mend reads (it reads {FORMAT_VERSION}); use a mend that knows it"
    )]
    UnsupportedFormatVersion {
        /// The file, as given.
        file: String,
        /// The version it says, as written.
        found: String,
    },

    /// The file's top level is not a suite: a field missing or unknown, no scenarios.
    #[error("{file}: {problem}")]
    InvalidSuite {
        /// The file, as given.
        file: String,
        /// What is wrong.
        problem: String,
    },

    /// A scenario names a call the contract does not have.
    #[error(
        "{at}: unknown call {call:?}; the calls are \"plan-stage\", \"validate-publish\", \"decide-recovery\" and \"plan-reconcile\""
    )]
    UnknownCall {
        /// The scenario.
        at: ScenarioAt,
        /// The call it names.
        call: String,
    },

    /// A scenario is not an object of exactly the four fields, or its name is empty or
    /// taken.
    #[error("{at}: {problem}")]
    InvalidScenario {
        /// The scenario.
        at: ScenarioAt,
        /// What is wrong.
        problem: String,
    },

    /// A scenario's `input` does not parse as its call's input.
    #[error("{at}: `input` is not a {call} input: {problem}")]
    InvalidInput {
        /// The scenario.
        at: ScenarioAt,
        /// Its call.
        call: CallKind,
        /// The first field that does not parse, and why.
        problem: String,
    },

    /// A scenario's `expect` does not parse as its call's output.
    #[error("{at}: `expect` is not a {call} output: {problem}")]
    InvalidExpect {
        /// The scenario.
        at: ScenarioAt,
        /// Its call.
        call: CallKind,
        /// The first field that does not parse, and why.
        problem: String,
    },
}

/// Reads and checks the suite at `path`.
pub fn load_suite(path: impl AsRef<Path>) -> Result<Suite, ScenarioError> {
    let path = path.as_ref();
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
        file: file.clone(),
        source,
    })?;
    parse_suite(&file, &text)
}

/// Checks the suite in `text`; `file` names it in errors and reports.
pub fn parse_suite(file: &str, text: &str) -> Result<Suite, ScenarioError> {
    parse::suite(file, text)
}

/// Asks `policy` every question of `suite`, each in its own sandbox: a scenario whose call
/// traps or exceeds a limit fails alone.
pub fn run(policy: &PolicyRuntime, suite: &Suite) -> SuiteReport {
    run_each(suite, |scenario| scenario.ask(policy))
}

/// Asks the default policy's native build (`mend_default_policy`, which the default component is
/// compiled from). A suite that passes here and fails against the component has found a
/// difference between the two builds.
pub fn run_native(suite: &Suite) -> SuiteReport {
    run_each(suite, Scenario::ask_native)
}

fn run_each(suite: &Suite, ask: impl Fn(&Scenario) -> Option<Failure>) -> SuiteReport {
    let mut report = SuiteReport {
        file: suite.file.clone(),
        passed: 0,
        failed: Vec::new(),
        results: Vec::with_capacity(suite.scenarios.len()),
    };
    for scenario in &suite.scenarios {
        let failure = ask(scenario);
        report.results.push(ScenarioResult {
            name: scenario.name.clone(),
            call: scenario.call.kind(),
            passed: failure.is_none(),
        });
        match failure {
            None => report.passed += 1,
            Some(failure) => report.failed.push(failure),
        }
    }
    report
}

/// The report for a person: `PASS name` or `FAIL name` per scenario in the file's order, each
/// failure's diff indented under it, then `N passed, M failed`.
pub fn render(report: &SuiteReport) -> String {
    let mut out = format!("{}\n", report.file);
    for result in &report.results {
        if result.passed {
            let _ = writeln!(out, "PASS {}", result.name);
            continue;
        }
        let _ = writeln!(out, "FAIL {}", result.name);
        // Names are unique within a suite.
        let failure = report.failed.iter().find(|f| f.name == result.name);
        for line in failure.iter().flat_map(|failure| failure.diff.lines()) {
            let _ = writeln!(out, "    {line}");
        }
    }
    let _ = writeln!(
        out,
        "{} passed, {} failed",
        report.passed,
        report.failed.len()
    );
    out
}

/// Pretty JSON in the types' field order, which is the contract's.
fn pretty(value: &impl Serialize) -> String {
    // The policy types are plain records, lists and enums with string keys: nothing in them
    // can fail to serialise.
    serde_json::to_string_pretty(value).expect("policy types serialise to JSON")
}

fn json(value: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(value).expect("policy types serialise to JSON")
}

impl Suite {
    /// How many scenarios call each function, in [`CallKind::ALL`] order, zeros included.
    pub fn count_by_call(&self) -> Vec<(CallKind, usize)> {
        CallKind::ALL
            .into_iter()
            .map(|kind| {
                let count = self
                    .scenarios
                    .iter()
                    .filter(|scenario| scenario.call.kind() == kind)
                    .count();
                (kind, count)
            })
            .collect()
    }

    /// The suite in the file format, laid out for reading; [`parse_suite`] reads it back.
    pub fn to_json(&self) -> String {
        write::to_json(self)
    }
}

impl Scenario {
    /// Asks `policy` this scenario's question; `None` when it answers as expected.
    fn ask(&self, policy: &PolicyRuntime) -> Option<Failure> {
        match &self.call {
            Call::PlanStage { input, expect } => self.check(expect, policy.plan_stage(input)),
            Call::ValidatePublish { input, expect } => {
                self.check(expect, policy.validate_publish(input))
            }
            Call::DecideRecovery { input, expect } => {
                self.check(expect, policy.decide_recovery(input))
            }
            Call::PlanReconcile { input, expect } => {
                self.check(expect, policy.plan_reconcile(input))
            }
            Call::PlanGc { input, expect } => self.check(expect, policy.plan_gc(input)),
        }
    }

    fn ask_native(&self) -> Option<Failure> {
        match &self.call {
            Call::PlanStage { input, expect } => {
                self.check(expect, Ok(mend_default_policy::plan_stage(input)))
            }
            Call::ValidatePublish { input, expect } => {
                self.check(expect, Ok(mend_default_policy::validate_publish(input)))
            }
            Call::DecideRecovery { input, expect } => {
                self.check(expect, Ok(mend_default_policy::decide_recovery(input)))
            }
            Call::PlanReconcile { input, expect } => {
                self.check(expect, Ok(mend_default_policy::plan_reconcile(input)))
            }
            Call::PlanGc { input, expect } => {
                self.check(expect, Ok(mend_default_policy::plan_gc(input)))
            }
        }
    }

    fn check<T: PartialEq + Serialize>(
        &self,
        expect: &T,
        actual: Result<T, PolicyError>,
    ) -> Option<Failure> {
        let (diff, actual, error) = match actual {
            Ok(actual) if actual == *expect => return None,
            Ok(actual) => (
                line_diff(&pretty(expect), &pretty(&actual)),
                Some(json(&actual)),
                None,
            ),
            Err(error) => (
                format!("the policy failed instead of deciding: {error}"),
                None,
                Some(error.to_string()),
            ),
        };
        Some(Failure {
            name: self.name.clone(),
            call: self.call.kind(),
            diff,
            expected: json(expect),
            actual,
            error,
        })
    }
}

impl Call {
    /// Which function the call asks.
    pub fn kind(&self) -> CallKind {
        match self {
            Self::PlanStage { .. } => CallKind::PlanStage,
            Self::ValidatePublish { .. } => CallKind::ValidatePublish,
            Self::DecideRecovery { .. } => CallKind::DecideRecovery,
            Self::PlanReconcile { .. } => CallKind::PlanReconcile,
            Self::PlanGc { .. } => CallKind::PlanGc,
        }
    }
}

impl CallKind {
    /// Every call, in the contract's order.
    pub const ALL: [CallKind; 5] = [
        Self::PlanStage,
        Self::ValidatePublish,
        Self::DecideRecovery,
        Self::PlanReconcile,
        Self::PlanGc,
    ];

    /// The name used in scenario files and the WIT contract.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PlanStage => "plan-stage",
            Self::ValidatePublish => "validate-publish",
            Self::DecideRecovery => "decide-recovery",
            Self::PlanReconcile => "plan-reconcile",
            Self::PlanGc => "plan-gc",
        }
    }

    /// The call named `name` as in the WIT contract (`plan-stage`, ...), if there is one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }
}

impl SuiteReport {
    /// True when every scenario passed.
    pub fn all_passed(&self) -> bool {
        self.failed.is_empty()
    }
}

impl ScenarioAt {
    fn new(file: &str, index: usize, name: Option<&str>) -> Self {
        Self {
            file: file.to_string(),
            index,
            name: name.map(str::to_string),
        }
    }
}

impl fmt::Display for CallKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for ScenarioAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: scenarios[{}]", self.file, self.index)?;
        match &self.name {
            Some(name) => write!(f, " {name:?}"),
            None => Ok(()),
        }
    }
}

impl Serialize for Suite {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut suite = serializer.serialize_struct("Suite", 2)?;
        suite.serialize_field("format_version", &FORMAT_VERSION)?;
        suite.serialize_field("scenarios", &self.scenarios)?;
        suite.end()
    }
}

impl Serialize for Scenario {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut scenario = serializer.serialize_struct("Scenario", 4)?;
        scenario.serialize_field("name", &self.name)?;
        scenario.serialize_field("call", &self.call.kind())?;
        match &self.call {
            Call::PlanStage { input, expect } => {
                scenario.serialize_field("input", input)?;
                scenario.serialize_field("expect", expect)?;
            }
            Call::ValidatePublish { input, expect } => {
                scenario.serialize_field("input", input)?;
                scenario.serialize_field("expect", expect)?;
            }
            Call::DecideRecovery { input, expect } => {
                scenario.serialize_field("input", input)?;
                scenario.serialize_field("expect", expect)?;
            }
            Call::PlanReconcile { input, expect } => {
                scenario.serialize_field("input", input)?;
                scenario.serialize_field("expect", expect)?;
            }
            Call::PlanGc { input, expect } => {
                scenario.serialize_field("input", input)?;
                scenario.serialize_field("expect", expect)?;
            }
        }
        scenario.end()
    }
}

#[cfg(test)]
mod tests;

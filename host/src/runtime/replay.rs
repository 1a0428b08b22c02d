//! Replay: ask a policy the questions recorded in the audit log and compare its answers with
//! the decisions recorded there.
//!
//! Every audit record written since replay exists keeps the policy's whole input for its
//! decision ([`DecisionInput`]). A policy is deterministic (no clock, no randomness, no IO),
//! so the policy that made a decision gives it again; a candidate policy that answers
//! differently shows exactly which decisions a swap would change, per kind of operation.
//! Records without inputs (written before) are counted as not replayable, never guessed at.

use std::collections::BTreeMap;

use mend_contract::{ReconcileInput, RecoveryInput};
use serde::{Deserialize, Serialize};

use super::PolicyRuntime;
use crate::audit::{AuditRecord, DecisionInput};
use crate::error::PolicyError;

/// What replaying a batch of audit records found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplayReport {
    /// The policy asked.
    pub digest: String,
    /// Records whose decision the policy was asked again.
    pub replayed: usize,
    /// Of those, the ones it decided the same.
    pub unchanged: usize,
    /// Records with no inputs: written before replay existed.
    pub not_replayable: usize,
    /// Replayed and unchanged decisions per kind (`commit`, `gc`, ..., `reconcile`).
    pub by_kind: BTreeMap<String, KindCounts>,
    /// Every decision it would change.
    pub changed: Vec<ChangedDecision>,
    /// Datasets whose audit trail could not be read (a record from a newer mend, a damaged
    /// record), with the reason: left out of the replay, and said so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<(String, String)>,
}

/// How many decisions of one kind were replayed, and changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KindCounts {
    /// Replayed.
    pub replayed: usize,
    /// Of those, changed.
    pub changed: usize,
}

/// One decision the policy would make differently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChangedDecision {
    /// The dataset of the decision.
    pub dataset_id: String,
    /// The operation decided about.
    pub operation_id: String,
    /// `commit`, `gc`, ..., `reconcile`.
    pub kind: String,
    /// The policy that recorded the decision.
    pub recorded_by: String,
    /// The decision as recorded.
    pub recorded: serde_json::Value,
    /// What the replayed policy decides, or the error it fails with.
    pub replayed: serde_json::Value,
}

impl ReplayReport {
    /// How many decisions would change.
    pub fn changed_count(&self) -> usize {
        self.changed.len()
    }
}

/// Asks `policy` every recorded question of `records` and compares. A decision recorded twice,
/// as `executing` and then with its settled outcome, is asked once.
pub fn replay(policy: &PolicyRuntime, records: &[AuditRecord]) -> ReplayReport {
    let mut report = ReplayReport {
        digest: policy.digest().to_string(),
        ..ReplayReport::default()
    };
    let settled: std::collections::HashSet<(&str, &str, &str)> = records
        .iter()
        .filter(|record| !record.is_executing())
        .map(|record| {
            (
                record.dataset_id.as_str(),
                record.operation_id.as_str(),
                record.inputs_hash.as_str(),
            )
        })
        .collect();
    for record in records {
        if record.is_executing()
            && settled.contains(&(
                record.dataset_id.as_str(),
                record.operation_id.as_str(),
                record.inputs_hash.as_str(),
            ))
        {
            continue;
        }
        let Some(inputs) = &record.inputs else {
            report.not_replayable += 1;
            continue;
        };
        let (kind, answer) = ask(policy, inputs);
        let replayed = match answer {
            Ok(decision) => decision,
            Err(error) => serde_json::json!({ "error": error.to_string() }),
        };
        report.replayed += 1;
        let counts = report.by_kind.entry(kind.clone()).or_default();
        counts.replayed += 1;
        if replayed == record.decision {
            report.unchanged += 1;
        } else {
            counts.changed += 1;
            report.changed.push(ChangedDecision {
                dataset_id: record.dataset_id.clone(),
                operation_id: record.operation_id.clone(),
                kind,
                recorded_by: record.policy_digest.clone(),
                recorded: record.decision.clone(),
                replayed,
            });
        }
    }
    report
}

/// The kind of operation the question is about, and the policy's answer in the shape the
/// audit record keeps.
fn ask(
    policy: &PolicyRuntime,
    inputs: &DecisionInput,
) -> (String, Result<serde_json::Value, PolicyError>) {
    match inputs {
        DecisionInput::DecideRecovery {
            dataset_id,
            mode,
            now_ms,
            intent,
        } => {
            let kind = serde_json::to_value(intent.kind)
                .ok()
                .and_then(|value| value.as_str().map(str::to_string))
                .unwrap_or_else(|| format!("{:?}", intent.kind));
            let input = RecoveryInput {
                dataset_id: dataset_id.clone(),
                mode: *mode,
                now_ms: *now_ms,
                intents: vec![intent.clone()],
            };
            let answer = policy.decide_recovery(&input).and_then(|mut decisions| {
                match (decisions.len(), decisions.pop()) {
                    (1, Some(decision)) => Ok(serde_json::to_value(&decision.decision)
                        .expect("decisions always serialise")),
                    (count, _) => Err(PolicyError::Trap {
                        function: "decide-recovery",
                        message: format!("returned {count} decisions for one intent"),
                    }),
                }
            });
            (kind, answer)
        }
        DecisionInput::PlanReconcile {
            dataset_id,
            now_ms,
            orphan,
        } => {
            let input = ReconcileInput {
                dataset_id: dataset_id.clone(),
                now_ms: *now_ms,
                orphans: vec![orphan.clone()],
            };
            let answer = policy.plan_reconcile(&input).and_then(|mut decisions| {
                match (decisions.len(), decisions.pop()) {
                    (1, Some(decision)) => {
                        Ok(serde_json::to_value(&decision).expect("decisions always serialise"))
                    }
                    (count, _) => Err(PolicyError::Trap {
                        function: "plan-reconcile",
                        message: format!("returned {count} decisions for one orphan"),
                    }),
                }
            });
            ("reconcile".to_string(), answer)
        }
        DecisionInput::PlanGc { input } => {
            let answer = policy
                .plan_gc(input)
                .map(|plan| serde_json::to_value(&plan).expect("plans always serialise"));
            ("gc".to_string(), answer)
        }
    }
}

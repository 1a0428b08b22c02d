//! Garbage collection, as an operation with its own intent. What to collect is the policy's
//! decision (`plan-gc`, ABI 1.3); what may be collected is the host's:
//!
//! 1. read the dataset's rows; the candidates are the staged ones and the marked ones whose
//!    marks were seen, no intent naming them (those are left to recovery), handed to the
//!    policy with the dataset's grace periods and the time; a marked row's time is when its
//!    mark was seen ([`SplitRow::mark_seen_at_ms`]), and marks not yet seen are recorded as
//!    seen now, their grace period beginning (a conditional write of its own, before any
//!    plan: it only ever delays a deletion);
//! 2. check the plan: it may mark only candidates that are staged and delete only candidates
//!    that are marked; a plan naming anything else (a published row, a row an intent names,
//!    an unknown id) is refused whole with `PolicyRejected`, recorded, and nothing executed;
//! 3. write the intent (`Armed`) naming the splits to mark and to delete, then record the
//!    plan in the audit as `executing`;
//! 4. mark the planned staged splits, each only if still staged, untouched since the read, and
//!    claimed by no intent (`MarkRule::Unclaimed`, conditional at the write: a writer that
//!    began since step 1 keeps its rows);
//! 5. delete the objects of the planned marked splits still marked, then their rows;
//! 6. delete the intent, and record the plan's settled outcome (`executed`). A run that fails
//!    part way leaves its `executing` record unsettled and its intent for recovery.
//!
//! A crash anywhere leaves the intent; recovery rolls it forward (every step is safe to
//! repeat), so a crash between an object and its row converges. A published row is never
//! touched: it is no candidate, a plan naming it is refused, and both writes are conditional.

use std::collections::{BTreeMap, BTreeSet};

use mend_contract::{GcCandidate, GcInput, GcPlan};
use serde::{Deserialize, Serialize};

use super::Engine;
use super::keyed::{Keyed, request_key};
use crate::audit::{AUDIT_FORMAT_VERSION, AuditRecord, DecisionInput, OUTCOME_EXECUTING};
use crate::catalog::MarkRule;
use crate::error::{MendError, Result};
use crate::faults::DurableStep;
use crate::gates::GateName;
use crate::intent::{ExpectedState, Intent, OperationKind, PlannedEffects};
use crate::model::{Dataset, ListQuery, SplitRow, SplitState, TimestampMs};
use crate::objects::format::sha256;
use crate::{bounds, validate};

/// How long a request's recorded result answers its retries: a week, far longer than any
/// writer retries, and short enough that the records of a busy dataset stay few.
pub const RECORDED_REQUEST_RETENTION_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// What one gc run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GcResult {
    /// Staged splits abandoned and marked for deletion by this run.
    pub marked: Vec<String>,
    /// Splits whose objects and rows this run deleted.
    pub deleted: Vec<String>,
    /// Published splits marked since, whose marks this run was the first to see: their
    /// deletion grace period begins now, and a later run deletes them.
    #[serde(default)]
    pub seen: Vec<String>,
}

impl Engine {
    /// Collects a dataset's abandoned and expired splits, as the policy plans. A run with
    /// nothing to collect writes nothing.
    ///
    /// Under an idempotency key a retry of a run that ended answers its report; see
    /// [`Keyed`]'s module for the gap between a run's effects and its record.
    pub fn gc<'a>(&'a self, dataset_id: &'a str, node: &'a str) -> Keyed<'a, GcResult> {
        Keyed::new(self.write_scope("gc"), move |key| async move {
            let key = request_key(key, &("gc", dataset_id, node))?;
            validate::dataset_id(dataset_id)?;
            validate::node(node)?;
            self.run_recorded(dataset_id, key.as_ref(), self.collect(dataset_id, node))
                .await
        })
    }

    #[tracing::instrument(
        name = "gc",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = tracing::field::Empty)
    )]
    async fn collect(&self, dataset_id: &str, node: &str) -> Result<GcResult> {
        validate::dataset_id(dataset_id)?;
        validate::node(node)?;
        // The plan and its audit records name one policy.
        let pinned = self.pinned();
        pinned
            .under_gates([GateName::dataset(dataset_id)], |engine| async move {
                engine.gc_holding_gate(dataset_id, node).await
            })
            .await
    }

    async fn gc_holding_gate(&self, dataset_id: &str, node: &str) -> Result<GcResult> {
        let dataset = self.catalog.dataset(dataset_id).await?;
        let now = self.now_ms();
        // Results recorded for idempotent retries are kept this long, then forgotten: a retry
        // after that runs as a new request. (Writes nothing when there is nothing to forget.)
        self.check_held()?;
        self.catalog
            .forget_recorded_requests(
                dataset_id,
                bounds::ms_before(now, RECORDED_REQUEST_RETENTION_MS),
                now,
            )
            .await?;
        let (candidates, unseen) = self.gc_candidates(dataset_id).await?;
        let seen = self.see_marks(dataset_id, &unseen).await?;
        if candidates.is_empty() {
            return Ok(GcResult {
                seen,
                ..GcResult::default()
            });
        }
        let input = GcInput {
            dataset_id: dataset_id.to_string(),
            now_ms: now,
            staged_grace_period_ms: dataset.config.staged_grace_period_ms,
            deletion_grace_period_ms: if crate::deliberate_bugs::active(
                crate::deliberate_bugs::Bug::GcIgnoresDeletionGrace,
            ) {
                0
            } else {
                dataset.config.deletion_grace_period_ms
            },
            candidates,
        };
        let plan = self.policy().plan_gc(&input)?;
        let operation_id = crate::ambient::uuid_v4().to_string();
        tracing::Span::current().record("operation_id", tracing::field::display(&operation_id));
        let plan = match checked_plan(&input, &plan) {
            Ok(plan) => plan,
            Err(reason) => {
                let refused = serde_json::json!({ "outcome": "refused", "detail": reason });
                let record = self.gc_audit(&operation_id, &input, &plan, refused);
                self.durably(
                    DurableStep::AppendAudit,
                    self.catalog.append_audit(dataset_id, &[record]),
                )
                .await?;
                tracing::warn!(%reason, "gc refused the policy's plan; nothing was executed");
                return Err(MendError::PolicyRejected {
                    message: format!("{reason}; nothing was executed"),
                });
            }
        };
        if plan.mark.is_empty() && plan.delete.is_empty() {
            return Ok(GcResult {
                seen,
                ..GcResult::default()
            });
        }
        let intent = self.gc_intent(&dataset, node, &operation_id, now, &plan);
        // The intent, then the record, then the effects: the plan is never executed without
        // its record, and an `executing` record always has an intent behind it, gone only
        // once its effects are done (by this run or by recovery, which records its own).
        self.durably(DurableStep::WriteIntent, self.catalog.put_intent(&intent))
            .await?;
        let executing = serde_json::json!({ "outcome": OUTCOME_EXECUTING });
        let record = self.gc_audit(&operation_id, &input, &plan, executing);
        self.durably(
            DurableStep::AppendAudit,
            self.catalog.append_audit(dataset_id, &[record]),
        )
        .await?;
        // A failure leaves the `executing` record unsettled and the intent in place: the
        // next recovery sweep rolls the gc forward and records what it does.
        let result = GcResult {
            seen,
            ..self.run_gc(&intent, intent.created_at_ms).await?
        };
        self.finish_intent(dataset_id, &operation_id).await?;
        let settled = serde_json::json!({ "outcome": "executed" });
        let record = self.gc_audit(&operation_id, &input, &plan, settled);
        self.durably(
            DurableStep::AppendAudit,
            self.catalog.append_audit(dataset_id, &[record]),
        )
        .await?;
        tracing::info!(
            marked = result.marked.len(),
            deleted = result.deleted.len(),
            "gc collected"
        );
        Ok(result)
    }

    /// The rows gc may consider: staged ones, and marked ones whose marks were seen (timed
    /// from then), that no intent names (those are left to recovery); and apart, the ids of
    /// the marked rows whose marks no one has seen yet, whatever names them.
    async fn gc_candidates(&self, dataset_id: &str) -> Result<(Vec<GcCandidate>, Vec<String>)> {
        let claimed = self.splits_named_by_intents(dataset_id, None).await?;
        let rows = self
            .catalog
            .list_splits(dataset_id, &ListQuery::default())
            .await?
            .splits;
        let mut candidates = Vec::new();
        let mut unseen = Vec::new();
        for row in rows {
            let since = match (row.state, row.mark_seen_at_ms) {
                (SplitState::Published, _) => continue,
                (SplitState::Staged, _) => row.updated_at_ms,
                (SplitState::MarkedForDeletion, Some(seen_at_ms)) => seen_at_ms,
                (SplitState::MarkedForDeletion, None) => {
                    unseen.push(row.split_id);
                    continue;
                }
            };
            if !claimed.contains(&row.split_id) {
                candidates.push(GcCandidate {
                    split_id: row.split_id,
                    state: row.state,
                    updated_at_ms: since,
                });
            }
        }
        Ok((candidates, unseen))
    }

    /// Records the marks of `unseen` as seen now: the ids recorded. The time is read after
    /// the rows were: each of these marks had landed by then, however early its own stamp.
    async fn see_marks(&self, dataset_id: &str, unseen: &[String]) -> Result<Vec<String>> {
        if unseen.is_empty() {
            return Ok(Vec::new());
        }
        self.check_held()?;
        self.durably(
            DurableStep::SeeMarks,
            self.catalog.see_marks(dataset_id, unseen, self.now_ms()),
        )
        .await
    }

    /// A gc's intent: mark and delete what the checked plan says, expecting the manifest
    /// version read.
    fn gc_intent(
        &self,
        dataset: &Dataset,
        node: &str,
        operation_id: &str,
        now: TimestampMs,
        plan: &GcPlan,
    ) -> Intent {
        let dataset_id = dataset.dataset_id.as_str();
        Intent {
            effects: PlannedEffects {
                mark: plan.mark.clone(),
                delete: plan.delete.clone(),
                ..PlannedEffects::default()
            },
            expected: ExpectedState {
                manifest_version: dataset.manifest_version,
                ..ExpectedState::default()
            },
            ..Intent::armed(
                operation_id.to_string(),
                OperationKind::Gc,
                dataset_id,
                node,
                now,
                self.options.intent_lease_ms,
            )
        }
    }

    fn gc_audit(
        &self,
        operation_id: &str,
        input: &GcInput,
        plan: &GcPlan,
        outcome: serde_json::Value,
    ) -> AuditRecord {
        let canonical = serde_json::to_vec(input).expect("inputs always serialise");
        AuditRecord {
            format_version: AUDIT_FORMAT_VERSION,
            principal: self.actor().map(str::to_owned),
            dataset_id: input.dataset_id.clone(),
            operation_id: operation_id.to_string(),
            recorded_at_ms: self.now_ms(),
            mode: "gc".into(),
            policy_digest: self.policy().digest().to_string(),
            semantics_revision: self.policy().description().semantics_revision,
            inputs_hash: sha256(&canonical),
            decision: serde_json::to_value(plan).expect("plans always serialise"),
            outcome,
            inputs: Some(DecisionInput::PlanGc {
                input: input.clone(),
            }),
        }
    }

    /// Steps 4 and 5 of a gc, safe to repeat from any point: recovery runs them again. A
    /// planned staged split is marked only if untouched since before `staged_cutoff`, the time
    /// gc read it (its intent's creation): one restaged since is left alone.
    pub(super) async fn run_gc(&self, intent: &Intent, staged_cutoff: i64) -> Result<GcResult> {
        let dataset_id = intent.dataset_id.as_str();
        let mut result = GcResult::default();
        if !intent.effects.mark.is_empty() {
            // Unclaimed: a split some operation began to stage or publish since this gc read
            // the intents is left alone, decided in the mark's own atomic step.
            let rule = MarkRule::Unclaimed {
                untouched_before_ms: staged_cutoff,
            };
            result.marked = self
                .durably(
                    DurableStep::MarkRows,
                    self.catalog
                        .mark(dataset_id, &intent.effects.mark, rule, self.now_ms(), None),
                )
                .await?
                .marked;
        }
        if intent.effects.delete.is_empty() {
            return Ok(result);
        }
        // Only splits still marked by the mark this gc planned on (or already gone) lose their
        // objects: never one that a row in another state references (invariant 2), and never
        // one whose mark was seen after this gc read it. A split id whose row was deleted, staged again by
        // a new operation, published and marked by a merge after this intent was created is a
        // new row whose grace period has just begun: a roll-forward of this intent, long
        // after, must leave it (found by `mend-sim`, seed 9956702636221711115, where
        // recovery's roll-forward of a crashed gc deleted such a split's object 1.6 s after
        // the merge that replaced it published).
        let planned_on = |row: &SplitRow| {
            row.state == SplitState::MarkedForDeletion
                && row
                    .mark_seen_at_ms
                    .is_some_and(|seen_at_ms| seen_at_ms <= intent.created_at_ms)
        };
        let query = ListQuery {
            split_ids: Some(intent.effects.delete.clone()),
            ..ListQuery::default()
        };
        let rows = self.catalog.list_splits(dataset_id, &query).await?.splits;
        let live: BTreeSet<&str> = rows
            .iter()
            .filter(|row| !planned_on(row))
            .map(|row| row.split_id.as_str())
            .collect();
        for split_id in intent
            .effects
            .delete
            .iter()
            .filter(|id| !live.contains(id.as_str()))
        {
            self.durably(
                DurableStep::DeleteObject {
                    split_id: split_id.clone(),
                },
                self.objects.delete(dataset_id, split_id),
            )
            .await?;
        }
        let marked: Vec<String> = rows
            .iter()
            .filter(|row| planned_on(row))
            .map(|row| row.split_id.clone())
            .collect();
        if !marked.is_empty() {
            self.durably(
                DurableStep::DeleteRows,
                self.catalog
                    .delete_splits(dataset_id, &marked, self.now_ms(), None),
            )
            .await?;
        }
        result.deleted = marked;
        Ok(result)
    }

    /// Every split some intent of the dataset (but `except`) names: recovery's, not gc's or
    /// reconcile's.
    pub(super) async fn splits_named_by_intents(
        &self,
        dataset_id: &str,
        except: Option<&str>,
    ) -> Result<BTreeSet<String>> {
        let mut named = BTreeSet::new();
        for intent in self.catalog.list_intents(dataset_id).await? {
            if Some(intent.operation_id.as_str()) == except {
                continue;
            }
            let effects = intent.effects;
            named.extend(effects.stage.into_iter().map(|row| row.split_id));
            named.extend(effects.mark);
            named.extend(effects.delete);
            if let Some(publish) = effects.publish {
                named.extend(publish.staged_split_ids);
                named.extend(publish.replaced_split_ids);
            }
        }
        Ok(named)
    }
}

/// The plan with its ids deduplicated, if every split it names may be collected: marks only of
/// staged candidates, deletes only of marked ones. Otherwise why not, naming each split.
fn checked_plan(input: &GcInput, plan: &GcPlan) -> std::result::Result<GcPlan, String> {
    let candidates: BTreeMap<&str, SplitState> = input
        .candidates
        .iter()
        .map(|candidate| (candidate.split_id.as_str(), candidate.state))
        .collect();
    let mut problems = Vec::new();
    let mut check = |ids: &[String], wanted: SplitState, verb: &str| -> Vec<String> {
        let mut seen = BTreeSet::new();
        for id in ids {
            match candidates.get(id.as_str()) {
                Some(state) if *state == wanted => {}
                Some(state) => problems.push(format!("{verb} {id}, which is {state}")),
                None => problems.push(format!(
                    "{verb} {id}, which is no candidate (published, named by an intent, or unknown)"
                )),
            }
            seen.insert(id.clone());
        }
        ids.iter().filter(|id| seen.remove(*id)).cloned().collect()
    };
    let mark = check(&plan.mark, SplitState::Staged, "it marks");
    let delete = check(&plan.delete, SplitState::MarkedForDeletion, "it deletes");
    if !problems.is_empty() {
        return Err(format!(
            "the gc plan names splits gc may not touch: {}",
            problems.join("; ")
        ));
    }
    Ok(GcPlan { mark, delete })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> GcInput {
        let candidate = |id: &str, state| GcCandidate {
            split_id: id.into(),
            state,
            updated_at_ms: 0,
        };
        GcInput {
            dataset_id: "ds".into(),
            now_ms: 1_000,
            staged_grace_period_ms: 0,
            deletion_grace_period_ms: 0,
            candidates: vec![
                candidate("s", SplitState::Staged),
                candidate("m", SplitState::MarkedForDeletion),
            ],
        }
    }

    fn plan(mark: &[&str], delete: &[&str]) -> GcPlan {
        let ids = |ids: &[&str]| ids.iter().map(|id| id.to_string()).collect();
        GcPlan {
            mark: ids(mark),
            delete: ids(delete),
        }
    }

    #[test]
    fn a_plan_within_the_candidates_passes_with_its_ids_deduplicated() {
        assert_eq!(
            checked_plan(&input(), &plan(&["s", "s"], &["m"])),
            Ok(plan(&["s"], &["m"]))
        );
    }

    #[test]
    fn a_plan_naming_anything_else_is_refused_naming_each_split() {
        let cases = [
            (
                plan(&["m"], &[]),
                "it marks m, which is marked_for_deletion",
            ),
            (plan(&[], &["s"]), "it deletes s, which is staged"),
            (plan(&["p"], &[]), "it marks p, which is no candidate"),
            (plan(&[], &["p"]), "it deletes p, which is no candidate"),
        ];
        for (plan, expected) in &cases {
            let reason = checked_plan(&input(), plan).unwrap_err();
            assert!(reason.contains(expected), "{reason}");
        }
        assert_eq!(cases.len(), 4);
    }
}

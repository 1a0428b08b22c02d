//! The checks no policy may get past. The engine runs every policy answer through these
//! before a backend executes it; a decision that fails one is refused with
//! `PolicyRejected` and nothing is written.
//!
//! The numbers refer to the invariants in DESIGN.md: (3) create-only staging never modifies
//! an existing row, (4) checkpoints never move backwards and a delta applies exactly once,
//! (5) transitions follow the lifecycle, (7) a stale publish token cannot publish, nor can a
//! writer holding a stale fencing epoch (refused with `FailedPrecondition`: the writer was
//! fenced, the policy did nothing wrong).

use std::collections::BTreeMap;
use std::sync::Arc;

use mend_contract::{ExistingRow, PlannedSplit, PublishViolation, StageAction, ViolationKind};

use crate::catalog::{PlannedAction, PlannedStage, PublishObservation, StagePlan};
use crate::error::{MendError, Result};
use crate::model::{NewSplit, PublishRequest, SplitState, StageMode};

/// Turns the policy's stage plan into the plan a backend applies.
///
/// `requested` is the request's splits in request order; `existing` the rows the backend read.
/// The plan must cover each distinct requested id exactly once, point at a request entry with
/// that id, and match what was observed: insert only where no row exists, overwrite only a
/// staged row and only in upsert mode, skip only with the state actually observed. If the
/// plan is sound but rejects some splits, the whole batch fails with `FailedPrecondition`
/// naming them.
pub fn checked_stage_plan(
    mode: StageMode,
    requested: &[Arc<NewSplit>],
    distinct_ids: &[String],
    existing: &[ExistingRow],
    planned: Vec<PlannedSplit>,
) -> Result<StagePlan> {
    let planned = planned
        .into_iter()
        .map(|decision| PlanEntry {
            split_id: decision.split_id,
            request_index: decision.request_index,
            action: decision.action,
        })
        .collect();
    check_stage_plan(mode, requested, distinct_ids, existing, planned)
}

/// [`checked_stage_plan`] for a plan that names each id by its request entry (ABI 1.4): the
/// id is read where the index points, never copied, so a plan of 10,000 decisions costs no
/// string. An index past the request's entries refuses the plan.
pub fn checked_stage_plan_by_index(
    mode: StageMode,
    requested: &[Arc<NewSplit>],
    distinct_ids: &[String],
    existing: &[ExistingRow],
    planned: Vec<IndexedDecision>,
) -> Result<StagePlan> {
    let planned = planned
        .into_iter()
        .map(|decision| {
            let source = requested
                .get(decision.request_index as usize)
                .ok_or_else(|| {
                    rejected_plan(format!(
                        "the plan names request entry {}, but the request has {}",
                        decision.request_index,
                        requested.len()
                    ))
                })?;
            Ok(PlanEntry {
                split_id: source.split_id.as_str(),
                request_index: decision.request_index,
                action: decision.action,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    check_stage_plan(mode, requested, distinct_ids, existing, planned)
}

/// A decision of a stage plan that names its id by the request entry it takes (ABI 1.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedDecision {
    /// The request entry whose id and content the decision takes.
    pub request_index: u32,
    /// What to do with that split.
    pub action: StageAction,
}

/// One decision as the checks read it, its id owned or borrowed.
struct PlanEntry<S> {
    split_id: S,
    request_index: u32,
    action: StageAction,
}

fn check_stage_plan<S: AsRef<str>>(
    mode: StageMode,
    requested: &[Arc<NewSplit>],
    distinct_ids: &[String],
    existing: &[ExistingRow],
    mut planned: Vec<PlanEntry<S>>,
) -> Result<StagePlan> {
    // Sorted, the plan must list exactly the sorted distinct requested ids, and each decision
    // meets its observed row in one merge pass: a map of thousands of ids would cost more than
    // the policy's decision. Backends observe in id order; a sort is only a fallback.
    if !planned.is_sorted_by(|a, b| a.split_id.as_ref() <= b.split_id.as_ref()) {
        planned.sort_by(|a, b| a.split_id.as_ref().cmp(b.split_id.as_ref()));
    }
    if let Some(problem) = coverage_problem(&planned, distinct_ids) {
        return Err(rejected_plan(problem));
    }
    let mut observed: Vec<&ExistingRow> = existing.iter().collect();
    if !observed.is_sorted_by(|a, b| a.split_id <= b.split_id) {
        observed.sort_by(|a, b| a.split_id.cmp(&b.split_id));
    }
    let mut observed = observed.into_iter().peekable();
    let mut entries = Vec::with_capacity(planned.len());
    let mut rejected: Vec<(String, String)> = Vec::new();

    for decision in planned {
        let id = decision.split_id.as_ref();
        while observed.next_if(|row| row.split_id.as_str() < id).is_some() {}
        let state = observed
            .next_if(|row| row.split_id == id)
            .map(|row| row.state);
        let source = requested
            .get(decision.request_index as usize)
            .filter(|source| source.split_id == id)
            .ok_or_else(|| {
                rejected_plan(format!(
                    "the plan takes split {id:?} from request entry {}, which is another split",
                    decision.request_index
                ))
            })?;
        let action = match (decision.action, state) {
            (StageAction::Insert, None) => PlannedAction::Insert,
            (StageAction::Insert, Some(state)) => {
                return Err(rejected_plan(format!(
                    "the plan inserts split {id:?} over an existing {state} row"
                )));
            }
            (StageAction::Overwrite, Some(SplitState::Staged)) if mode == StageMode::Upsert => {
                PlannedAction::Overwrite
            }
            (StageAction::Overwrite, state) => {
                return Err(rejected_plan(format!(
                    "the plan overwrites split {id:?} (row {}) in {mode} mode; only a staged row may be overwritten, and only in upsert mode (invariant 3)",
                    state.map_or("missing", SplitState::as_str)
                )));
            }
            (StageAction::Skip(claimed), Some(state)) if claimed == state => {
                PlannedAction::Skip(state)
            }
            (StageAction::Skip(claimed), state) => {
                return Err(rejected_plan(format!(
                    "the plan skips split {id:?} as {claimed}, but its row is {}",
                    state.map_or("missing", SplitState::as_str)
                )));
            }
            (StageAction::Reject(reason), _) => {
                rejected.push((id.to_string(), reason));
                continue;
            }
        };
        entries.push(PlannedStage {
            split: source.clone(),
            action,
        });
    }
    if !rejected.is_empty() {
        return Err(rejected_batch(rejected));
    }
    Ok(StagePlan { entries })
}

/// The refusal of a stage batch in which a plan rejects these splits, each for its reason.
pub(crate) fn rejected_batch(rejected: Vec<(String, String)>) -> MendError {
    let message = rejected
        .iter()
        .map(|(id, reason)| format!("{id}: {reason}"))
        .collect::<Vec<_>>()
        .join("; ");
    MendError::failed_precondition(
        format!("the stage batch is rejected, nothing was written: {message}"),
        rejected.into_iter().map(|(id, _)| id).collect(),
    )
}

/// Why a sorted plan does not hold exactly one decision per requested id, if it does not.
fn coverage_problem<S: AsRef<str>>(
    planned: &[PlanEntry<S>],
    distinct_ids: &[String],
) -> Option<String> {
    for (index, decision) in planned.iter().enumerate() {
        let planned_id = decision.split_id.as_ref();
        match distinct_ids.get(index) {
            Some(id) if id == planned_id => continue,
            Some(id) if id.as_str() < planned_id => {
                return Some(format!("the plan has no decision for split {id:?}"));
            }
            _ => {
                return Some(format!(
                    "the plan names split {planned_id:?} that the request does not, or names it twice"
                ));
            }
        }
    }
    distinct_ids
        .get(planned.len())
        .map(|missing| format!("the plan has no decision for split {missing:?}"))
}

/// Maps the policy's publish verdict to an error, and refuses a verdict of "allowed" when
/// the observation breaks an invariant.
///
/// A writer whose fencing epoch is stale is refused first, whatever the policy said, so that
/// it always learns it was fenced rather than whichever other problem its publish has.
pub fn checked_publish(
    request: &PublishRequest,
    observation: &PublishObservation,
    violations: Vec<PublishViolation>,
) -> Result<()> {
    if let Some(fenced) = stale_fencing_epoch(request, observation) {
        return Err(fenced);
    }
    if !violations.is_empty() {
        return Err(violation_error(request, observation, violations));
    }
    match broken_invariant(request, observation) {
        Some(broken) => Err(rejected_plan(format!(
            "the policy allowed a publish that breaks an invariant: {broken}"
        ))),
        None => Ok(()),
    }
}

/// `FailedPrecondition` if the publish carries a fencing epoch that is not the dataset's
/// current one: exclusive recovery ran after the writer began (invariant 7). The policy is not
/// asked; being fenced is not a matter of policy.
fn stale_fencing_epoch(
    request: &PublishRequest,
    observation: &PublishObservation,
) -> Option<MendError> {
    let epoch = request.fencing_epoch?;
    (epoch != observation.fencing_epoch).then(|| {
        MendError::failed_precondition(
            format!(
                "the writer's fencing epoch {epoch} is stale: the dataset is at epoch {} \
                 (exclusive recovery ran since the writer began); nothing was published \
                 (invariant 7)",
                observation.fencing_epoch
            ),
            Vec::new(),
        )
    })
}

/// The host's own reading of the publish preconditions, independent of the policy.
fn broken_invariant(request: &PublishRequest, observation: &PublishObservation) -> Option<String> {
    let rows: BTreeMap<&str, SplitState> = observation
        .rows
        .iter()
        .map(|row| (row.split_id.as_str(), row.state))
        .collect();
    for id in &request.staged_split_ids {
        if rows.get(id.as_str()) != Some(&SplitState::Staged) {
            return Some(format!("split {id} is not staged (invariant 5)"));
        }
    }
    for id in &request.replaced_split_ids {
        if rows.get(id.as_str()) != Some(&SplitState::Published) {
            return Some(format!("split {id} is not published (invariant 5)"));
        }
    }
    if let Some(mismatch) = checkpoint_mismatch(request, observation) {
        return Some(format!("{mismatch} (invariant 4)"));
    }
    if request.publish_token != observation.publish_token {
        return Some("the publish token is not the dataset's current one (invariant 7)".into());
    }
    None
}

/// Where the publish's checkpoint delta does not start at the dataset's positions, or does not
/// move forward from them: the first such partition, in words a writer can act on.
fn checkpoint_mismatch(
    request: &PublishRequest,
    observation: &PublishObservation,
) -> Option<String> {
    let delta = request.checkpoint_delta.as_ref()?;
    let positions = observation.checkpoint.get(&delta.source);
    delta.partitions.iter().find_map(|partition| {
        let current = positions.and_then(|p| p.get(&partition.partition)).copied();
        if current == partition.from_position && current.is_none_or(|at| partition.to_position > at)
        {
            return None;
        }
        let at = current.map_or("has no position yet".to_string(), |at| {
            format!("is at {at}")
        });
        let from = partition
            .from_position
            .map_or("from no position".to_string(), |from| {
                format!("from {from}")
            });
        Some(format!(
            "partition {} of source {} {at}, but the checkpoint delta moves it {from} to {}",
            partition.partition, delta.source, partition.to_position
        ))
    })
}

fn violation_error(
    request: &PublishRequest,
    observation: &PublishObservation,
    violations: Vec<PublishViolation>,
) -> MendError {
    // A checkpoint that moved on is the common race between two writers of one source; say
    // where it stands, so the writer can read it again, rather than the policy's summary.
    if violations
        .iter()
        .all(|v| v.kind == ViolationKind::CheckpointMismatch)
        && let Some(mismatch) = checkpoint_mismatch(request, observation)
    {
        return MendError::failed_precondition(
            format!("publish refused: {mismatch}; read the checkpoint again"),
            Vec::new(),
        );
    }
    let missing: Vec<String> = violations
        .iter()
        .filter(|v| v.kind == ViolationKind::SplitMissing)
        .flat_map(|v| v.subjects.iter().cloned())
        .collect();
    if !missing.is_empty() {
        return MendError::splits_not_found(missing);
    }
    let message = violations
        .iter()
        .map(|v| v.message.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    let ids = violations
        .into_iter()
        .filter(|v| {
            matches!(
                v.kind,
                ViolationKind::NotStaged | ViolationKind::NotPublished | ViolationKind::SplitInBoth
            )
        })
        .flat_map(|v| v.subjects)
        .collect();
    MendError::failed_precondition(format!("publish refused: {message}"), ids)
}

fn rejected_plan(message: String) -> MendError {
    MendError::PolicyRejected { message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn split(id: &str) -> Arc<NewSplit> {
        Arc::new(NewSplit {
            split_id: id.into(),
            node: "n".into(),
            metadata_json: "{}".into(),
            time_range: None,
        })
    }

    fn distinct(requested: &[Arc<NewSplit>]) -> Vec<String> {
        let ids: BTreeSet<String> = requested.iter().map(|s| s.split_id.clone()).collect();
        ids.into_iter().collect()
    }

    fn planned(id: &str, index: u32, action: StageAction) -> PlannedSplit {
        PlannedSplit {
            split_id: id.into(),
            request_index: index,
            action,
        }
    }

    fn row(id: &str, state: SplitState) -> ExistingRow {
        ExistingRow {
            split_id: id.into(),
            state,
        }
    }

    #[test]
    fn create_only_plan_may_not_overwrite_or_insert_over_a_row() {
        let requested = [split("a")];
        let existing = [row("a", SplitState::Staged)];
        for action in [StageAction::Overwrite, StageAction::Insert] {
            let result = checked_stage_plan(
                StageMode::CreateOnly,
                &requested,
                &distinct(&requested),
                &existing,
                vec![planned("a", 0, action)],
            );
            assert!(matches!(result, Err(MendError::PolicyRejected { .. })));
        }
    }

    #[test]
    fn plan_must_cover_each_id_once_and_report_true_states() {
        let requested = [split("a"), split("b")];
        let existing = [row("a", SplitState::Published)];
        let cases = [
            vec![planned("a", 0, StageAction::Skip(SplitState::Published))],
            vec![
                planned("a", 0, StageAction::Skip(SplitState::Published)),
                planned("b", 1, StageAction::Insert),
                planned("b", 1, StageAction::Insert),
            ],
            vec![
                planned("a", 0, StageAction::Skip(SplitState::Staged)),
                planned("b", 1, StageAction::Insert),
            ],
            vec![
                planned("a", 0, StageAction::Skip(SplitState::Published)),
                planned("b", 0, StageAction::Insert),
            ],
        ];
        for plan in cases {
            let result = checked_stage_plan(
                StageMode::CreateOnly,
                &requested,
                &distinct(&requested),
                &existing,
                plan,
            );
            assert!(matches!(result, Err(MendError::PolicyRejected { .. })));
        }
    }

    #[test]
    fn a_stale_fencing_epoch_is_refused_before_the_policys_violations() {
        let request = PublishRequest {
            dataset_id: "ds".into(),
            staged_split_ids: vec!["a".into()],
            replaced_split_ids: Vec::new(),
            checkpoint_delta: None,
            publish_token: None,
            fencing_epoch: Some(2),
        };
        let observation = PublishObservation {
            rows: vec![row("a", SplitState::Staged)],
            checkpoint: Default::default(),
            publish_token: None,
            fencing_epoch: 3,
        };
        let missing = PublishViolation {
            kind: ViolationKind::SplitMissing,
            subjects: vec!["b".into()],
            message: "split b is missing".into(),
        };
        for violations in [Vec::new(), vec![missing]] {
            match checked_publish(&request, &observation, violations) {
                Err(MendError::FailedPrecondition { message, ids, .. }) => {
                    assert!(ids.is_empty());
                    assert!(
                        message.contains("fencing epoch 2 is stale")
                            && message.contains("at epoch 3"),
                        "{message}"
                    );
                }
                other => panic!("expected FailedPrecondition, got {other:?}"),
            }
        }

        let current = PublishRequest {
            fencing_epoch: Some(3),
            ..request.clone()
        };
        assert!(checked_publish(&current, &observation, Vec::new()).is_ok());
        let without = PublishRequest {
            fencing_epoch: None,
            ..request
        };
        assert!(checked_publish(&without, &observation, Vec::new()).is_ok());
    }

    #[test]
    fn rejections_fail_the_batch_naming_the_ids() {
        let requested = [split("a"), split("b")];
        let existing = [row("a", SplitState::Published)];
        let plan = vec![
            planned("a", 0, StageAction::Reject("published".into())),
            planned("b", 1, StageAction::Insert),
        ];
        match checked_stage_plan(
            StageMode::Upsert,
            &requested,
            &distinct(&requested),
            &existing,
            plan,
        ) {
            Err(MendError::FailedPrecondition { ids, .. }) => assert_eq!(ids, ["a"]),
            other => panic!("expected FailedPrecondition, got {other:?}"),
        }
    }

    /// Neither the plan nor the observed rows need come in id order: both are sorted before
    /// the one pass that meets each decision with its row (a policy may answer in any order,
    /// and a backend's id order is only the fast path). Descending input is the case a check
    /// of "already sorted" that tested the wrong way would let through unsorted.
    #[test]
    fn a_plan_and_rows_out_of_order_are_checked_as_if_sorted() {
        let requested = [split("a"), split("b"), split("c")];
        let existing = [
            row("c", SplitState::Staged),
            row("a", SplitState::Published),
        ];
        let plan = checked_stage_plan(
            StageMode::Upsert,
            &requested,
            &distinct(&requested),
            &existing,
            vec![
                planned("c", 2, StageAction::Overwrite),
                planned("b", 1, StageAction::Insert),
                planned("a", 0, StageAction::Skip(SplitState::Published)),
            ],
        )
        .expect("a valid plan, in descending order");
        let decided: Vec<(&str, PlannedAction)> = plan
            .entries
            .iter()
            .map(|entry| (entry.split.split_id.as_str(), entry.action.clone()))
            .collect();
        assert_eq!(
            decided,
            [
                ("a", PlannedAction::Skip(SplitState::Published)),
                ("b", PlannedAction::Insert),
                ("c", PlannedAction::Overwrite),
            ]
        );
    }

    /// A plan that does not cover the request is refused saying what is wrong with it: the
    /// first requested id it has no decision for, or the id it names that was not requested.
    #[test]
    fn a_plan_not_covering_the_request_says_which_id_and_how() {
        let message =
            |requested: &[Arc<NewSplit>], plan: Vec<PlannedSplit>| match checked_stage_plan(
                StageMode::CreateOnly,
                requested,
                &distinct(requested),
                &[],
                plan,
            ) {
                Err(MendError::PolicyRejected { message }) => message,
                other => panic!("expected PolicyRejected, got {other:?}"),
            };
        let missing = message(
            &[split("a"), split("b")],
            vec![planned("b", 1, StageAction::Insert)],
        );
        assert!(
            missing.contains(r#"no decision for split "a""#),
            "{missing}"
        );
        let unrequested = message(&[split("c")], vec![planned("b", 0, StageAction::Insert)]);
        assert!(
            unrequested.contains(r#"names split "b" that the request does not"#),
            "{unrequested}"
        );
        let extra = message(
            &[split("a")],
            vec![
                planned("a", 0, StageAction::Insert),
                planned("c", 0, StageAction::Insert),
            ],
        );
        assert!(extra.contains(r#"names split "c""#), "{extra}");
    }

    /// A checkpoint delta that does not start where the dataset stands is refused by the
    /// host's own reading whatever the policy says: allowed, it breaks invariant 4; refused
    /// for that alone, the writer is told where the partition stands, to read it again.
    #[test]
    fn a_checkpoint_delta_from_elsewhere_is_refused_saying_where_the_partition_is() {
        let request = PublishRequest {
            dataset_id: "ds".into(),
            staged_split_ids: vec!["a".into()],
            replaced_split_ids: Vec::new(),
            checkpoint_delta: Some(mend_contract::CheckpointDelta {
                source: "src".into(),
                partitions: vec![mend_contract::PartitionDelta {
                    partition: "p0".into(),
                    from_position: Some(5),
                    to_position: 9,
                }],
            }),
            publish_token: None,
            fencing_epoch: None,
        };
        let observation = PublishObservation {
            rows: vec![row("a", SplitState::Staged)],
            checkpoint: [("src".to_string(), [("p0".to_string(), 7)].into())].into(),
            publish_token: None,
            fencing_epoch: 0,
        };
        let at =
            "partition p0 of source src is at 7, but the checkpoint delta moves it from 5 to 9";
        match checked_publish(&request, &observation, Vec::new()) {
            Err(MendError::PolicyRejected { message }) => {
                assert!(
                    message.contains(at) && message.contains("invariant 4"),
                    "{message}"
                );
            }
            other => panic!("expected PolicyRejected, got {other:?}"),
        }
        let mismatch = PublishViolation {
            kind: ViolationKind::CheckpointMismatch,
            subjects: vec!["p0".into()],
            message: "the checkpoint moved".into(),
        };
        match checked_publish(&request, &observation, vec![mismatch]) {
            Err(MendError::FailedPrecondition { message, .. }) => {
                assert!(
                    message.contains(at) && message.contains("read the checkpoint again"),
                    "{message}"
                );
            }
            other => panic!("expected FailedPrecondition, got {other:?}"),
        }
        let from_here = PublishObservation {
            checkpoint: [("src".to_string(), [("p0".to_string(), 5)].into())].into(),
            ..observation
        };
        assert!(checked_publish(&request, &from_here, Vec::new()).is_ok());
        // From where the partition stands, but not forward: refused as well.
        let standing_still = PublishRequest {
            checkpoint_delta: Some(mend_contract::CheckpointDelta {
                source: "src".into(),
                partitions: vec![mend_contract::PartitionDelta {
                    partition: "p0".into(),
                    from_position: Some(5),
                    to_position: 5,
                }],
            }),
            ..request
        };
        match checked_publish(&standing_still, &from_here, Vec::new()) {
            Err(MendError::PolicyRejected { message }) => {
                assert!(message.contains("moves it from 5 to 5"), "{message}");
            }
            other => panic!("expected PolicyRejected, got {other:?}"),
        }
    }
}

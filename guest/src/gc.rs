//! Garbage collection planning: which staged splits a gc run abandons and which marked splits
//! it deletes.
//!
//! The default rule, the one mend applied before gc was a policy decision:
//!
//! - a **staged** split untouched for longer than the staged grace period (its last change
//!   strictly before `now - staged grace`) was abandoned by its writer: **mark** it;
//! - a **marked** split untouched for longer than the deletion grace period: **delete** its
//!   object, then its row.
//!
//! Both lists keep the input's order. The host hands over only rows no intent names, marks
//! only rows still staged and untouched since it read them, deletes only rows still marked,
//! and refuses a whole plan that names anything else.

use mend_contract::{GcInput, GcPlan, SplitState};

/// The default plan for one gc run.
pub fn plan_gc(input: &GcInput) -> GcPlan {
    let staged_cutoff = ms_before(input.now_ms, input.staged_grace_period_ms);
    let deletion_cutoff = ms_before(input.now_ms, input.deletion_grace_period_ms);
    let mut plan = GcPlan::default();
    for candidate in &input.candidates {
        match candidate.state {
            SplitState::Staged if candidate.updated_at_ms < staged_cutoff => {
                plan.mark.push(candidate.split_id.clone())
            }
            SplitState::MarkedForDeletion if candidate.updated_at_ms < deletion_cutoff => {
                plan.delete.push(candidate.split_id.clone())
            }
            _ => {}
        }
    }
    plan
}

/// `at` moved back by `ms`, stopping at the start of time rather than wrapping.
fn ms_before(at: i64, ms: u64) -> i64 {
    at.saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;
    use alloc::vec::Vec;
    use mend_contract::GcCandidate;

    fn candidate(split_id: &str, state: SplitState, updated_at_ms: i64) -> GcCandidate {
        GcCandidate {
            split_id: split_id.into(),
            state,
            updated_at_ms,
        }
    }

    fn input(candidates: Vec<GcCandidate>) -> GcInput {
        GcInput {
            dataset_id: "ds".into(),
            now_ms: 10_000,
            staged_grace_period_ms: 1_000,
            deletion_grace_period_ms: 2_000,
            candidates,
        }
    }

    #[test]
    fn only_rows_past_their_grace_period_are_planned() {
        let plan = plan_gc(&input(vec![
            candidate("old-staged", SplitState::Staged, 8_999),
            candidate("edge-staged", SplitState::Staged, 9_000),
            candidate("old-marked", SplitState::MarkedForDeletion, 7_999),
            candidate("edge-marked", SplitState::MarkedForDeletion, 8_000),
            candidate("published", SplitState::Published, 0),
        ]));
        assert_eq!(plan.mark, [String::from("old-staged")]);
        assert_eq!(plan.delete, [String::from("old-marked")]);
    }

    #[test]
    fn grace_periods_past_the_start_of_time_saturate() {
        let mut far = input(vec![candidate("a", SplitState::Staged, i64::MIN)]);
        far.staged_grace_period_ms = u64::MAX;
        far.now_ms = i64::MIN + 5;
        assert_eq!(plan_gc(&far), GcPlan::default());
    }
}

//! Each stage mode's standard plan, which the host applies without asking a policy that
//! declares `stage.standard-plans` (ABI 1.4; the table is `plan-stage`'s in `wit/policy.wit`):
//!
//! | mode        | no row  | staged row    | published / marked row   |
//! |-------------|---------|---------------|--------------------------|
//! | upsert      | insert  | overwrite     | reject (the whole batch) |
//! | create-only | insert  | skip (staged) | skip (its state)         |
//!
//! The content of a repeated id is already folded by [`super::distinct_splits`]. A rejected
//! batch is refused with the words the default policy's plan gets from the invariants, so an
//! answer does not depend on which of the two planned it.

use std::sync::Arc;

use mend_contract::ExistingRow;

use super::{PlannedAction, PlannedStage, StagePlan};
use crate::error::Result;
use crate::invariants;
use crate::model::{NewSplit, SplitState, StageMode};

/// The standard plan of `mode` for `splits` (one per distinct id, sorted by id) and the rows
/// that exist for them, in any order.
pub fn standard_stage_plan(
    mode: StageMode,
    splits: &[Arc<NewSplit>],
    existing: &[ExistingRow],
) -> Result<StagePlan> {
    let mut observed: Vec<&ExistingRow> = existing.iter().collect();
    if !observed.is_sorted_by(|a, b| a.split_id <= b.split_id) {
        observed.sort_by(|a, b| a.split_id.cmp(&b.split_id));
    }
    let mut observed = observed.into_iter().peekable();
    let mut entries = Vec::with_capacity(splits.len());
    let mut rejected = Vec::new();
    for split in splits {
        let id = split.split_id.as_str();
        while observed.next_if(|row| row.split_id.as_str() < id).is_some() {}
        // A row listed twice counts as its last listing, as in the default policy.
        let mut state = None;
        while let Some(row) = observed.next_if(|row| row.split_id == id) {
            state = Some(row.state);
        }
        let action = match (mode, state) {
            (_, None) => PlannedAction::Insert,
            (StageMode::CreateOnly, Some(state)) => PlannedAction::Skip(state),
            (StageMode::Upsert, Some(SplitState::Staged)) => PlannedAction::Overwrite,
            (StageMode::Upsert, Some(state)) => {
                rejected.push((
                    split.split_id.clone(),
                    format!("split is {state}; upsert overwrites only staged splits"),
                ));
                continue;
            }
        };
        entries.push(PlannedStage {
            split: Arc::clone(split),
            action,
        });
    }
    if !rejected.is_empty() {
        return Err(invariants::rejected_batch(rejected));
    }
    Ok(StagePlan { entries })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::distinct_splits;
    use mend_contract::StagePlanInput;

    fn split(id: &str, index: usize) -> Arc<NewSplit> {
        Arc::new(NewSplit {
            split_id: id.into(),
            node: "n".into(),
            // The entry's index, so that a plan taking another entry's content shows.
            metadata_json: format!(r#"{{"entry":{index}}}"#),
            time_range: None,
        })
    }

    proptest::proptest! {
        /// The host's standard plan is what the default policy plans, as the invariants check
        /// it: the same entries with the same content, or the same refusal in the same words.
        #[test]
        fn the_standard_plan_is_the_default_policys_checked_plan(
            ids in proptest::collection::vec("[a-f]", 0..14),
            states in proptest::collection::vec(0u8..4, 6),
            create_only: bool,
        ) {
            let mode = if create_only { StageMode::CreateOnly } else { StageMode::Upsert };
            let requested: Vec<Arc<NewSplit>> =
                ids.iter().enumerate().map(|(index, id)| split(id, index)).collect();
            let distinct = distinct_splits(mode, &requested);
            let existing: Vec<ExistingRow> = ["a", "b", "c", "d", "e", "f"]
                .iter()
                .zip(&states)
                .filter_map(|(id, state)| {
                    SplitState::ALL.get(*state as usize).map(|state| ExistingRow {
                        split_id: (*id).into(),
                        state: *state,
                    })
                })
                .collect();

            let standard = standard_stage_plan(mode, &distinct, &existing);
            let planned = mend_default_policy::plan_stage(&StagePlanInput {
                dataset_id: "ds".into(),
                mode,
                split_ids: ids.clone(),
                existing: existing.clone(),
            });
            let distinct_ids: Vec<String> =
                distinct.iter().map(|split| split.split_id.clone()).collect();
            let checked = invariants::checked_stage_plan(
                mode, &requested, &distinct_ids, &existing, planned,
            );
            match (standard, checked) {
                (Ok(standard), Ok(checked)) => proptest::prop_assert_eq!(standard, checked),
                (Err(standard), Err(checked)) => {
                    proptest::prop_assert_eq!(standard.to_string(), checked.to_string())
                }
                (standard, checked) => proptest::prop_assert!(
                    false,
                    "standard {standard:?}, the default policy's {checked:?}"
                ),
            }
        }
    }
}

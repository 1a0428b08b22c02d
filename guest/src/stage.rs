//! Stage planning: what happens to each split of a stage request.
//!
//! | mode        | no row  | staged row         | published / marked row        |
//! |-------------|---------|--------------------|-------------------------------|
//! | upsert      | insert  | overwrite          | reject (the whole batch)      |
//! | create-only | insert  | skip (staged)      | skip (published / marked)     |
//!
//! Duplicate ids in one request are folded into one decision, with the outcome the entries
//! would have had one after another: in create-only mode the first entry wins (the later ones
//! would find it and skip), in upsert mode the last one does (each overwrites the one before).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use mend_contract::{
    GroupedRequest, PlannedSplit, SplitState, StageAction, StageMode, StagePlanInput, row_of_code,
};

/// One decision per distinct split id, sorted by id.
pub fn plan_stage(input: &StagePlanInput) -> Vec<PlannedSplit> {
    let ids: Vec<&str> = input.split_ids.iter().map(String::as_str).collect();
    let existing = input
        .existing
        .iter()
        .map(|row| (row.split_id.as_str(), row.state))
        .collect();
    plan_ids(input.mode, &ids, existing)
        .into_iter()
        .map(|decided| PlannedSplit {
            split_id: decided.split_id.into(),
            request_index: decided.request_index,
            action: decided.action,
        })
        .collect()
}

/// One decision of [`plan_ids`], naming its id by reference: the component answers by
/// index (ABI 1.4), so it never copies an id, and [`plan_stage`] copies each once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided<'a> {
    pub split_id: &'a str,
    pub request_index: u32,
    pub action: StageAction,
}

/// [`plan_stage`] on borrowed ids: `ids` as the caller sent them, `existing` the rows read for
/// them as (id, state), in any order.
///
/// Two sorted lists walked side by side rather than maps: the request's entries ordered by
/// id, and the existing rows ordered by id. Both sorts are stable (equal ids keep their order,
/// which the folding of duplicates relies on) and take one pass over a list that is sorted
/// already, as the rows a backend reads and most requests are; sorted maps took a dozen
/// comparisons per id and an allocation per node whatever the input.
///
/// A 1.5 host groups a request the same way for a component (the contract's
/// [`GroupedRequest`]), which then decides each group with [`plan_groups`]; natively the
/// grouping and the decisions are one walk, with no lists in between (the shared grouping
/// followed by [`plan_groups`] measured 1.3x this walk), and the two are held to the same
/// plans by a property test.
pub fn plan_ids<'a>(
    mode: StageMode,
    ids: &[&'a str],
    mut existing: Vec<(&'a str, SplitState)>,
) -> Vec<Decided<'a>> {
    let mut entries: Vec<(&'a str, u32)> = ids
        .iter()
        .enumerate()
        .map(|(index, id)| (*id, index as u32))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    existing.sort_by(|a, b| a.0.cmp(b.0));

    let mut rows = existing.iter().peekable();
    let mut plan = Vec::with_capacity(entries.len());
    let mut first = 0;
    while first < entries.len() {
        let split_id = entries[first].0;
        let mut end = first + 1;
        while end < entries.len() && entries[end].0 == split_id {
            end += 1;
        }
        let request_index = source_entry(mode, entries[first].1, entries[end - 1].1);
        while rows.next_if(|row| row.0 < split_id).is_some() {}
        // A row listed twice counts as its last listing.
        let mut state = None;
        while let Some(row) = rows.next_if(|row| row.0 == split_id) {
            state = Some(row.1);
        }
        plan.push(Decided {
            split_id,
            request_index,
            action: decide(mode, state),
        });
        first = end;
    }
    plan
}

/// One decision per group of `grouped` (ABI 1.5: the host has sorted the request, so each
/// distinct id comes as its group of request indices, in request order, with its row), in the
/// groups' order: the entry whose content it takes, and what it does. No id is compared. A
/// group that is empty or a row byte that is no `row-state` case panics (in a component, a
/// trap): the grouping is the host's, never a caller's.
pub fn plan_groups(
    mode: StageMode,
    grouped: &GroupedRequest,
) -> impl Iterator<Item = (u32, StageAction)> + '_ {
    grouped.groups().map(move |(entries, row)| {
        let (first, last) = match entries {
            [first, .., last] => (*first, *last),
            [only] => (*only, *only),
            [] => panic!("the host groups every distinct id with at least one entry"),
        };
        let row = row_of_code(row).expect("the host sends a row-state case");
        (source_entry(mode, first, last), decide(mode, row))
    })
}

/// Which entry of a repeated id supplies its content: in create-only mode the first (the
/// later ones would find it and skip), in upsert mode the last (each overwrites the one
/// before).
fn source_entry(mode: StageMode, first: u32, last: u32) -> u32 {
    match mode {
        StageMode::CreateOnly => first,
        StageMode::Upsert => last,
    }
}

/// The standard plan's action for one distinct id whose row is `existing`.
fn decide(mode: StageMode, existing: Option<SplitState>) -> StageAction {
    match (mode, existing) {
        (_, None) => StageAction::Insert,
        (StageMode::CreateOnly, Some(state)) => StageAction::Skip(state),
        (StageMode::Upsert, Some(SplitState::Staged)) => StageAction::Overwrite,
        (StageMode::Upsert, Some(state)) => StageAction::Reject(format!(
            "split is {state}; upsert overwrites only staged splits"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mend_contract::ExistingRow;

    fn input(mode: StageMode, ids: &[&str], existing: &[(&str, SplitState)]) -> StagePlanInput {
        StagePlanInput {
            dataset_id: "ds".into(),
            mode,
            split_ids: ids.iter().map(|id| String::from(*id)).collect(),
            existing: existing
                .iter()
                .map(|(id, state)| ExistingRow {
                    split_id: (*id).into(),
                    state: *state,
                })
                .collect(),
        }
    }

    fn actions(plan: &[PlannedSplit]) -> Vec<(&str, u32, StageAction)> {
        plan.iter()
            .map(|p| (p.split_id.as_str(), p.request_index, p.action.clone()))
            .collect()
    }

    #[test]
    fn create_only_inserts_missing_and_skips_every_existing_state() {
        let plan = plan_stage(&input(
            StageMode::CreateOnly,
            &["new", "s", "p", "m"],
            &[
                ("s", SplitState::Staged),
                ("p", SplitState::Published),
                ("m", SplitState::MarkedForDeletion),
            ],
        ));
        assert_eq!(
            actions(&plan),
            [
                ("m", 3, StageAction::Skip(SplitState::MarkedForDeletion)),
                ("new", 0, StageAction::Insert),
                ("p", 2, StageAction::Skip(SplitState::Published)),
                ("s", 1, StageAction::Skip(SplitState::Staged)),
            ]
        );
    }

    #[test]
    fn upsert_overwrites_staged_and_rejects_published_and_marked() {
        let plan = plan_stage(&input(
            StageMode::Upsert,
            &["new", "s", "p", "m"],
            &[
                ("s", SplitState::Staged),
                ("p", SplitState::Published),
                ("m", SplitState::MarkedForDeletion),
            ],
        ));
        let got = actions(&plan);
        assert_eq!(got[1], ("new", 0, StageAction::Insert));
        assert_eq!(got[3], ("s", 1, StageAction::Overwrite));
        assert!(
            matches!(got[0].2, StageAction::Reject(ref why) if why.contains("marked_for_deletion"))
        );
        assert!(matches!(got[2].2, StageAction::Reject(ref why) if why.contains("published")));
    }

    #[test]
    fn duplicates_fold_first_wins_in_create_only_last_wins_in_upsert() {
        let ids = ["a", "b", "a", "a"];
        let create_only = plan_stage(&input(StageMode::CreateOnly, &ids, &[]));
        assert_eq!(
            actions(&create_only),
            [("a", 0, StageAction::Insert), ("b", 1, StageAction::Insert)]
        );
        let upsert = plan_stage(&input(StageMode::Upsert, &ids, &[]));
        assert_eq!(
            actions(&upsert),
            [("a", 3, StageAction::Insert), ("b", 1, StageAction::Insert)]
        );
    }

    #[test]
    fn empty_request_plans_nothing() {
        assert!(plan_stage(&input(StageMode::Upsert, &[], &[])).is_empty());
    }

    /// The plan as the definition in the module doc reads: each distinct id with the entry
    /// that supplies it and the state of its row, looked up in maps.
    fn plan_by_maps(input: &StagePlanInput) -> Vec<PlannedSplit> {
        use alloc::collections::BTreeMap;
        let existing: BTreeMap<&str, SplitState> = input
            .existing
            .iter()
            .map(|row| (row.split_id.as_str(), row.state))
            .collect();
        let mut source: BTreeMap<&str, u32> = BTreeMap::new();
        for (index, id) in input.split_ids.iter().enumerate() {
            match input.mode {
                StageMode::CreateOnly => {
                    source.entry(id.as_str()).or_insert(index as u32);
                }
                StageMode::Upsert => {
                    source.insert(id.as_str(), index as u32);
                }
            }
        }
        source
            .into_iter()
            .map(|(id, request_index)| PlannedSplit {
                split_id: id.into(),
                request_index,
                action: decide(input.mode, existing.get(id).copied()),
            })
            .collect()
    }

    /// `plan_groups` on groups built as the definition reads (each distinct id's entries in
    /// request order, its row looked up in a map), not by the contract's sorting walk: the
    /// decisions of `plan_stage`, without ids.
    fn plan_by_groups(input: &StagePlanInput) -> Vec<(u32, StageAction)> {
        use alloc::collections::BTreeMap;
        let rows: BTreeMap<&str, SplitState> = input
            .existing
            .iter()
            .map(|row| (row.split_id.as_str(), row.state))
            .collect();
        let mut groups: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for (index, id) in input.split_ids.iter().enumerate() {
            groups.entry(id.as_str()).or_default().push(index as u32);
        }
        let mut grouped = GroupedRequest::default();
        for (id, entries) in &groups {
            grouped.entries.extend(entries);
            grouped.ends.push(grouped.entries.len() as u32);
            grouped
                .rows
                .push(mend_contract::row_code_of(rows.get(id).copied()));
        }
        plan_groups(input.mode, &grouped).collect()
    }

    /// A generated request: its ids, its rows as (id, index into `SplitState::ALL`) in any
    /// order and possibly listing an id twice, and its mode.
    fn generated_input(
        ids: Vec<String>,
        rows: Vec<(String, u8)>,
        create_only: bool,
    ) -> StagePlanInput {
        StagePlanInput {
            dataset_id: "ds".into(),
            mode: if create_only {
                StageMode::CreateOnly
            } else {
                StageMode::Upsert
            },
            split_ids: ids,
            existing: rows
                .into_iter()
                .map(|(id, state)| ExistingRow {
                    split_id: id,
                    state: SplitState::ALL[state as usize],
                })
                .collect(),
        }
    }

    proptest::proptest! {
        /// Deciding by groups of indices decides what the plan on ids decides, decision by
        /// decision, in the same order.
        #[test]
        fn the_groups_plan_what_the_ids_plan(
            ids in proptest::collection::vec("[a-f]{1,2}", 0..24),
            rows in proptest::collection::vec(("[a-f]{1,2}", 0u8..3), 0..16),
            create_only: bool,
        ) {
            let input = generated_input(ids, rows, create_only);
            let mode = input.mode;
            let by_ids: Vec<(u32, StageAction)> = plan_stage(&input)
                .into_iter()
                .map(|planned| (planned.request_index, planned.action))
                .collect();
            // Groups built by the definition (rows listed twice count as their last listing,
            // as a map collected from them holds), and as a 1.5 host builds them.
            proptest::prop_assert_eq!(plan_by_groups(&input), by_ids.clone());
            let grouped = GroupedRequest::of(
                input.split_ids.iter().map(String::as_str),
                input.existing.iter().map(|row| (row.split_id.as_str(), row.state)),
            )
            .unwrap();
            let by_contract: Vec<(u32, StageAction)> = plan_groups(mode, &grouped).collect();
            proptest::prop_assert_eq!(by_contract, by_ids);
        }

        /// The sorted walk decides exactly what the maps decide, rows listed twice or not
        /// requested included, in any order.
        #[test]
        fn the_sorted_walk_plans_what_the_maps_plan(
            ids in proptest::collection::vec("[a-f]{1,2}", 0..24),
            rows in proptest::collection::vec(("[a-f]{1,2}", 0u8..3), 0..16),
            create_only: bool,
        ) {
            let input = generated_input(ids, rows, create_only);
            proptest::prop_assert_eq!(plan_stage(&input), plan_by_maps(&input));
        }

        /// Whatever the input, the plan has one entry per distinct id, points at an entry
        /// with that id, and never overwrites or rejects in create-only mode.
        #[test]
        fn plan_covers_each_distinct_id_once(
            ids in proptest::collection::vec("[a-e]", 0..12),
            states in proptest::collection::vec(0u8..4, 5),
            create_only: bool,
        ) {
            let names = ["a", "b", "c", "d", "e"];
            let existing: Vec<(&str, SplitState)> = names.iter().zip(&states)
                .filter_map(|(id, s)| SplitState::ALL.get(*s as usize).map(|st| (*id, *st)))
                .collect();
            let mode = if create_only { StageMode::CreateOnly } else { StageMode::Upsert };
            let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            let plan = plan_stage(&input(mode, &id_refs, &existing));
            let mut distinct = ids.clone();
            distinct.sort();
            distinct.dedup();
            let planned: Vec<String> = plan.iter().map(|p| p.split_id.clone()).collect();
            proptest::prop_assert_eq!(planned, distinct);
            for p in &plan {
                proptest::prop_assert_eq!(&ids[p.request_index as usize], &p.split_id);
                if create_only {
                    proptest::prop_assert!(matches!(p.action, StageAction::Insert | StageAction::Skip(_)));
                }
            }
        }
    }
}

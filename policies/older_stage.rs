// The default stage plan as every contract before 1.4 asks it, for the fixtures `abi-1-1` to
// `abi-1-3`: `include!`d like `older_contracts.rs`.

/// The default stage plan, asked as every contract before 1.4 asks it: the ids as strings,
/// each decision naming its own.
fn plan_stage_by_name(input: wit::StagePlanInput) -> Vec<wit::PlannedSplit> {
    let input = plain::StagePlanInput {
        dataset_id: input.dataset_id,
        mode: match input.mode {
            wit::StageMode::Upsert => plain::StageMode::Upsert,
            wit::StageMode::CreateOnly => plain::StageMode::CreateOnly,
        },
        split_ids: input.split_ids,
        existing: input.existing.into_iter().map(existing_row).collect(),
    };
    mend_default_policy::plan_stage(&input)
        .into_iter()
        .map(|planned| wit::PlannedSplit {
            split_id: planned.split_id,
            request_index: planned.request_index,
            action: match planned.action {
                plain::StageAction::Insert => wit::StageAction::Insert,
                plain::StageAction::Overwrite => wit::StageAction::Overwrite,
                plain::StageAction::Skip(state) => wit::StageAction::Skip(wit_state(state)),
                plain::StageAction::Reject(reason) => wit::StageAction::Reject(reason),
            },
        })
        .collect()
}

fn wit_state(state: plain::SplitState) -> wit::SplitState {
    match state {
        plain::SplitState::Staged => wit::SplitState::Staged,
        plain::SplitState::Published => wit::SplitState::Published,
        plain::SplitState::MarkedForDeletion => wit::SplitState::MarkedForDeletion,
    }
}

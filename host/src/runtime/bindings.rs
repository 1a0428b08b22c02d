//! The WIT glue on the host side: wasmtime's generated bindings for the `policy` world and
//! conversions to and from the plain types of `mend_policy`. Only types are converted here;
//! nothing is decided.

use mend_policy as plain;

wasmtime::component::bindgen!({
    world: "policy",
    path: "../wit",
});

use mend::policy::types as wit;

pub(crate) fn stage_plan_input(input: &plain::StagePlanInput) -> wit::StagePlanInput {
    wit::StagePlanInput {
        dataset_id: input.dataset_id.clone(),
        mode: match input.mode {
            plain::StageMode::Upsert => wit::StageMode::Upsert,
            plain::StageMode::CreateOnly => wit::StageMode::CreateOnly,
        },
        split_ids: input.split_ids.clone(),
        existing: input.existing.iter().map(existing_row).collect(),
    }
}

pub(crate) fn planned_split(planned: wit::PlannedSplit) -> plain::PlannedSplit {
    plain::PlannedSplit {
        split_id: planned.split_id,
        request_index: planned.request_index,
        action: match planned.action {
            wit::StageAction::Insert => plain::StageAction::Insert,
            wit::StageAction::Overwrite => plain::StageAction::Overwrite,
            wit::StageAction::Skip(state) => plain::StageAction::Skip(split_state(state)),
            wit::StageAction::Reject(reason) => plain::StageAction::Reject(reason),
        },
    }
}

pub(crate) fn publish_input(input: &plain::PublishInput) -> wit::PublishInput {
    wit::PublishInput {
        dataset_id: input.dataset_id.clone(),
        staged_split_ids: input.staged_split_ids.clone(),
        replaced_split_ids: input.replaced_split_ids.clone(),
        checkpoint_delta: input
            .checkpoint_delta
            .as_ref()
            .map(|delta| wit::CheckpointDelta {
                source: delta.source.clone(),
                partitions: delta
                    .partitions
                    .iter()
                    .map(|p| wit::PartitionDelta {
                        partition: p.partition.clone(),
                        from_position: p.from_position,
                        to_position: p.to_position,
                    })
                    .collect(),
            }),
        publish_token: input.publish_token.clone(),
        rows: input.rows.iter().map(existing_row).collect(),
        checkpoint: input
            .checkpoint
            .iter()
            .map(|p| wit::PartitionPosition {
                partition: p.partition.clone(),
                position: p.position,
            })
            .collect(),
        current_publish_token: input.current_publish_token.clone(),
    }
}

pub(crate) fn publish_violation(violation: wit::PublishViolation) -> plain::PublishViolation {
    plain::PublishViolation {
        kind: match violation.kind {
            wit::ViolationKind::SplitMissing => plain::ViolationKind::SplitMissing,
            wit::ViolationKind::NotStaged => plain::ViolationKind::NotStaged,
            wit::ViolationKind::NotPublished => plain::ViolationKind::NotPublished,
            wit::ViolationKind::SplitInBoth => plain::ViolationKind::SplitInBoth,
            wit::ViolationKind::CheckpointMismatch => plain::ViolationKind::CheckpointMismatch,
            wit::ViolationKind::StalePublishToken => plain::ViolationKind::StalePublishToken,
        },
        subjects: violation.subjects,
        message: violation.message,
    }
}

pub(crate) fn description(description: wit::PolicyDescription) -> plain::PolicyDescription {
    plain::PolicyDescription {
        name: description.name,
        version: description.version,
        abi_major: description.abi_major,
        abi_minor: description.abi_minor,
        semantics_revision: description.semantics_revision,
        required_capabilities: description.required_capabilities,
    }
}

fn existing_row(row: &plain::ExistingRow) -> wit::ExistingRow {
    wit::ExistingRow {
        split_id: row.split_id.clone(),
        state: match row.state {
            plain::SplitState::Staged => wit::SplitState::Staged,
            plain::SplitState::Published => wit::SplitState::Published,
            plain::SplitState::MarkedForDeletion => wit::SplitState::MarkedForDeletion,
        },
    }
}

fn split_state(state: wit::SplitState) -> plain::SplitState {
    match state {
        wit::SplitState::Staged => plain::SplitState::Staged,
        wit::SplitState::Published => plain::SplitState::Published,
        wit::SplitState::MarkedForDeletion => plain::SplitState::MarkedForDeletion,
    }
}

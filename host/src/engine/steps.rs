//! What the operations that write intents share: the keys their steps are recorded under,
//! what a commit expects of its dataset, and when a checkpoint delta can never apply. The
//! writer's own steps (`operation/`), the in-process commit (`commit.rs`) and recovery
//! rolling either forward (`recovery/`) all publish an operation under the same key, so a
//! retry by any of them answers what another did.

use crate::catalog::RequestKey;
use crate::intent::{ExpectedState, PlannedPublish};
use crate::model::{CheckpointDelta, Dataset, SplitState};

/// The recorded-request key of an operation's step.
pub(super) fn step_key(operation_id: &str, step: &str) -> String {
    format!("op:{operation_id}:{step}")
}

/// The key an operation's publish is recorded under, whoever publishes it: its writer, the
/// in-process commit, or recovery rolling it forward.
pub(super) fn publish_key(operation_id: &str) -> RequestKey {
    RequestKey::new(step_key(operation_id, "publish"), &operation_id)
}

/// What a commit or merge expects of its dataset when its intent is written: the manifest
/// version it read, no row yet for each split it stages, each split it replaces published.
pub(super) fn expected_state(dataset: &Dataset, publish: &PlannedPublish) -> ExpectedState {
    ExpectedState {
        manifest_version: dataset.manifest_version,
        split_states: publish
            .staged_split_ids
            .iter()
            .map(|id| (id.clone(), None))
            .chain(
                publish
                    .replaced_split_ids
                    .iter()
                    .map(|id| (id.clone(), Some(SplitState::Published))),
            )
            .collect(),
        config_version: None,
    }
}

/// Whether `delta` can never apply again: a partition it moves stands past the position the
/// delta starts from, or exists where the delta expects none (positions only move forward).
pub(super) fn delta_overtaken(
    checkpoint: &crate::model::Checkpoint,
    delta: &CheckpointDelta,
) -> bool {
    let positions = checkpoint.get(&delta.source);
    delta.partitions.iter().any(|partition| {
        let now = positions.and_then(|positions| positions.get(&partition.partition));
        match (partition.from_position, now) {
            (None, Some(_)) => true,
            (Some(from), Some(now)) => *now > from,
            (_, None) => false,
        }
    })
}

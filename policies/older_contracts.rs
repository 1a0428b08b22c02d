// The converters every frozen-contract fixture (`abi-1-1` to `abi-1-4`) shares, to and from
// the default policy's plain types: `include!`d by each, so that each resolves `wit` to the
// types of its own frozen contract, whose names are the same in 1.1 to 1.4. What only some
// contracts share is in `older_stage.rs` (the stage plan by name, 1.1 to 1.3),
// `older_reconcile.rs` (1.2 on) and `since_1_3.rs` (the phase `abandoned` and gc, 1.3 on); what
// one contract alone says stays in its crate.

/// The default policy's description, as the fixture `name` of ABI 1.`minor`, without
/// `stage.standard-plans`, which no contract before 1.4 has (and which a 1.4 fixture leaves
/// out so that the engine asks it to plan every stage, the 1.4 way).
fn description_as(name: &str, minor: u32) -> wit::PolicyDescription {
    let description = mend_default_policy::describe();
    wit::PolicyDescription {
        name: name.into(),
        version: description.version,
        abi_major: 1,
        abi_minor: minor,
        semantics_revision: description.semantics_revision,
        required_capabilities: description
            .required_capabilities
            .into_iter()
            .filter(|name| name != plain::capability::STAGE_STANDARD_PLANS)
            .collect(),
    }
}

/// The default validation of one publish: how every contract before 1.4 asks it, and what 1.4
/// asks of each publish of a batch.
fn validate_one_publish(input: wit::PublishInput) -> Vec<wit::PublishViolation> {
    let input = plain::PublishInput {
        dataset_id: input.dataset_id,
        staged_split_ids: input.staged_split_ids,
        replaced_split_ids: input.replaced_split_ids,
        checkpoint_delta: input.checkpoint_delta.map(|delta| plain::CheckpointDelta {
            source: delta.source,
            partitions: delta
                .partitions
                .into_iter()
                .map(|p| plain::PartitionDelta {
                    partition: p.partition,
                    from_position: p.from_position,
                    to_position: p.to_position,
                })
                .collect(),
        }),
        publish_token: input.publish_token,
        rows: input.rows.into_iter().map(existing_row).collect(),
        checkpoint: input
            .checkpoint
            .into_iter()
            .map(|p| plain::PartitionPosition {
                partition: p.partition,
                position: p.position,
            })
            .collect(),
        current_publish_token: input.current_publish_token,
    };
    mend_default_policy::validate_publish(&input)
        .into_iter()
        .map(|violation| wit::PublishViolation {
            kind: match violation.kind {
                plain::ViolationKind::SplitMissing => wit::ViolationKind::SplitMissing,
                plain::ViolationKind::NotStaged => wit::ViolationKind::NotStaged,
                plain::ViolationKind::NotPublished => wit::ViolationKind::NotPublished,
                plain::ViolationKind::SplitInBoth => wit::ViolationKind::SplitInBoth,
                plain::ViolationKind::CheckpointMismatch => wit::ViolationKind::CheckpointMismatch,
                plain::ViolationKind::StalePublishToken => wit::ViolationKind::StalePublishToken,
            },
            subjects: violation.subjects,
            message: violation.message,
        })
        .collect()
}

/// The default recovery decisions on `intents` (already in the plain types), as the
/// contract answers them: `abandon` is how it says an abandonment (1.3 has the decision; 1.1
/// and 1.2 defer, with its reason, so the intent waits for a policy that can abandon it).
fn recovery_decisions(
    input: plain::RecoveryInput,
    abandon: fn(alloc::string::String) -> wit::RecoveryDecision,
) -> Vec<wit::IntentDecision> {
    mend_default_policy::decide_recovery(&input)
        .into_iter()
        .map(|decision| wit::IntentDecision {
            operation_id: decision.operation_id,
            decision: match decision.decision {
                plain::RecoveryDecision::RollForward => wit::RecoveryDecision::RollForward,
                plain::RecoveryDecision::RollBack => wit::RecoveryDecision::RollBack,
                plain::RecoveryDecision::Defer(why) => wit::RecoveryDecision::Defer(why),
                plain::RecoveryDecision::Blocked(reason) => {
                    wit::RecoveryDecision::Blocked(blocked(reason))
                }
                plain::RecoveryDecision::Stale => wit::RecoveryDecision::Stale,
                plain::RecoveryDecision::Abandon(why) => abandon(why),
            },
        })
        .collect()
}

fn recovery_mode(mode: wit::RecoveryMode) -> plain::RecoveryMode {
    match mode {
        wit::RecoveryMode::Probe => plain::RecoveryMode::Probe,
        wit::RecoveryMode::RollForward => plain::RecoveryMode::RollForward,
        wit::RecoveryMode::Exclusive => plain::RecoveryMode::Exclusive,
        wit::RecoveryMode::Verify => plain::RecoveryMode::Verify,
    }
}

fn operation_kind(kind: wit::OperationKind) -> plain::OperationKind {
    match kind {
        wit::OperationKind::Commit => plain::OperationKind::Commit,
        wit::OperationKind::Merge => plain::OperationKind::Merge,
        wit::OperationKind::Gc => plain::OperationKind::Gc,
        wit::OperationKind::ConfigApply => plain::OperationKind::ConfigApply,
        wit::OperationKind::Reconcile => plain::OperationKind::Reconcile,
    }
}

fn object_observations(objects: Vec<wit::ObjectObservation>) -> Vec<plain::ObjectObservation> {
    objects
        .into_iter()
        .map(|object| plain::ObjectObservation {
            split_id: object.split_id,
            present: object.present,
            matches: object.matches,
        })
        .collect()
}

fn blocked(reason: plain::BlockedReason) -> wit::BlockedReason {
    wit::BlockedReason {
        why: reason.why,
        operator_action: reason.operator_action,
    }
}

fn existing_row(row: wit::ExistingRow) -> plain::ExistingRow {
    plain::ExistingRow {
        split_id: row.split_id,
        state: plain_state(row.state),
    }
}

fn plain_state(state: wit::SplitState) -> plain::SplitState {
    match state {
        wit::SplitState::Staged => plain::SplitState::Staged,
        wit::SplitState::Published => plain::SplitState::Published,
        wit::SplitState::MarkedForDeletion => plain::SplitState::MarkedForDeletion,
    }
}

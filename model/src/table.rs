//! Which engine function implements each model action, and which atomic catalog step it
//! takes. The replay test (`tests/replay/`) dispatches every action through this table, and
//! checks that it names every action exactly once, so the model and the code cannot drift
//! apart silently: an action added to the model without an entry here fails the replay.

use crate::protocol::Action;

/// An action without its writer or replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActionKind {
    Tick,
    Begin,
    Upload,
    Heartbeat,
    PublishStart,
    PublishLand,
    AbortStart,
    AbortEnd,
    WritersStop,
    MemberHeartbeat,
    SweepStart,
    SweepSettle,
    ExclusiveStart,
    ExclusiveSettle,
}

impl ActionKind {
    pub fn of(action: Action) -> Self {
        match action {
            Action::Tick => Self::Tick,
            Action::Begin(_) => Self::Begin,
            Action::Upload(_) => Self::Upload,
            Action::Heartbeat(_) => Self::Heartbeat,
            Action::PublishStart(_) => Self::PublishStart,
            Action::PublishLand(_) => Self::PublishLand,
            Action::AbortStart(_) => Self::AbortStart,
            Action::AbortEnd(_) => Self::AbortEnd,
            Action::WritersStop => Self::WritersStop,
            Action::MemberHeartbeat(_) => Self::MemberHeartbeat,
            Action::SweepStart(_) => Self::SweepStart,
            Action::SweepSettle(_) => Self::SweepSettle,
            Action::ExclusiveStart => Self::ExclusiveStart,
            Action::ExclusiveSettle => Self::ExclusiveSettle,
        }
    }
}

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActionEntry {
    pub kind: ActionKind,
    /// The engine (or library) function whose step it is.
    pub engine_function: &'static str,
    /// The one conditional catalog write the step ends with (`-` for a client step that
    /// writes no catalog state).
    pub catalog_step: &'static str,
}

const fn entry(
    kind: ActionKind,
    engine_function: &'static str,
    catalog_step: &'static str,
) -> ActionEntry {
    ActionEntry {
        kind,
        engine_function,
        catalog_step,
    }
}

/// Every model action, the function implementing it, and its atomic catalog step.
pub const ACTION_TABLE: [ActionEntry; 14] = [
    entry(ActionKind::Tick, "ManualClock::advance_ms", "-"),
    entry(
        ActionKind::Begin,
        "Engine::begin_operation",
        "Catalog::begin_commit (the intent and every row create-only, or nothing; its begin recorded)",
    ),
    entry(
        ActionKind::Upload,
        "Engine::upload_object",
        "- (object put-if-absent)",
    ),
    entry(
        ActionKind::Heartbeat,
        "Engine::heartbeat_operation",
        "Catalog::update_intent (expecting the phase read)",
    ),
    entry(
        ActionKind::PublishStart,
        "Engine::publish_operation (reads up to its step)",
        "-",
    ),
    entry(
        ActionKind::PublishLand,
        "Engine::publish_operation (its step, or the end of a publish refused for good)",
        "Catalog::publish_commit (publish under op:<id>:publish and delete the intent, only while it is there and not Abandoned); refused for good: Catalog::settle_intents (one abandonment, on the phase read)",
    ),
    entry(
        ActionKind::AbortStart,
        "Engine::abort_operation (up to its end, on the plan its process began)",
        "-",
    ),
    entry(
        ActionKind::AbortEnd,
        "Engine::abort_operation (end_operation)",
        "Catalog::settle_intents (one abandonment, on the phase read: the intent deleted, its staged rows marked, its end recorded), then its objects and rows deleted",
    ),
    entry(
        ActionKind::WritersStop,
        "- (every writer process stops)",
        "-",
    ),
    entry(
        ActionKind::MemberHeartbeat,
        "Membership::heartbeat",
        "- (the fleet's member lease)",
    ),
    entry(
        ActionKind::SweepStart,
        "Engine::recover(RollForward) (gate, observe, decide)",
        "Gates::acquire (the dataset gate)",
    ),
    entry(
        ActionKind::SweepSettle,
        "Engine::recover(RollForward) (settle)",
        "Catalog::settle_intents",
    ),
    entry(
        ActionKind::ExclusiveStart,
        "Engine::recover(Exclusive) (permit, fencing epoch, observe, decide)",
        "Catalog::advance_fencing_epoch",
    ),
    entry(
        ActionKind::ExclusiveSettle,
        "Engine::recover(Exclusive) (settle, or one write of a roll-back)",
        "Catalog::settle_intents; or a roll-back's fence (Catalog::abandon_intent \
         (lease_expired_by: None)), then, once fenced, its second write: mark_for_deletion of \
         the rows it read staged, then delete_splits, delete_intent",
    ),
];

/// The row of `kind`.
pub fn entry_of(kind: ActionKind) -> &'static ActionEntry {
    ACTION_TABLE
        .iter()
        .find(|entry| entry.kind == kind)
        .expect("the table names every action kind")
}

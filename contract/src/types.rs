//! The plain data that crosses the policy boundary, mirroring `wit/policy.wit` one to one.
//!
//! The host uses these same types on its side of the boundary, so a decision made natively
//! and one made by the component compare with `==`.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// The lifecycle state of a split row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum SplitState {
    Staged,
    Published,
    MarkedForDeletion,
}

impl SplitState {
    pub const ALL: [SplitState; 3] = [Self::Staged, Self::Published, Self::MarkedForDeletion];

    /// The stable name used in storage, JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Staged => "staged",
            Self::Published => "published",
            Self::MarkedForDeletion => "marked_for_deletion",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == name)
    }
}

impl fmt::Display for SplitState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a stage request treats rows that already exist. There is deliberately no `Default`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum StageMode {
    /// Insert missing rows; overwrite rows that are still staged; any other state rejects the batch.
    Upsert,
    /// Insert missing rows only; every existing row stays exactly as it was.
    CreateOnly,
}

impl StageMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Upsert => "upsert",
            Self::CreateOnly => "create-only",
        }
    }
}

impl fmt::Display for StageMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PolicyDescription {
    pub name: String,
    pub version: String,
    pub abi_major: u32,
    pub abi_minor: u32,
    pub semantics_revision: u32,
    pub required_capabilities: Vec<String>,
}

/// A catalog row the host read before asking for a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ExistingRow {
    pub split_id: String,
    pub state: SplitState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct StagePlanInput {
    pub dataset_id: String,
    pub mode: StageMode,
    /// As the caller sent them, in order; may hold duplicates.
    pub split_ids: Vec<String>,
    pub existing: Vec<ExistingRow>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum StageAction {
    /// Insert if no row exists at write time.
    Insert,
    /// Replace if the row is still staged at write time.
    Overwrite,
    /// Leave the existing row, in this state, untouched.
    Skip(SplitState),
    /// Refuse the whole batch, for this reason.
    Reject(String),
}

/// The decision for one distinct split id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PlannedSplit {
    pub split_id: String,
    /// The entry of `StagePlanInput::split_ids` whose content the row gets.
    pub request_index: u32,
    pub action: StageAction,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PartitionDelta {
    pub partition: String,
    /// The position the publisher read; `None` when the partition had none.
    pub from_position: Option<u64>,
    pub to_position: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CheckpointDelta {
    pub source: String,
    pub partitions: Vec<PartitionDelta>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PartitionPosition {
    pub partition: String,
    pub position: u64,
}

/// A publish request with what the host observed under the dataset's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PublishInput {
    pub dataset_id: String,
    pub staged_split_ids: Vec<String>,
    pub replaced_split_ids: Vec<String>,
    pub checkpoint_delta: Option<CheckpointDelta>,
    pub publish_token: Option<String>,
    /// Rows of the staged and replaced ids that exist.
    pub rows: Vec<ExistingRow>,
    /// Current positions of the delta's source.
    pub checkpoint: Vec<PartitionPosition>,
    pub current_publish_token: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum ViolationKind {
    SplitMissing,
    NotStaged,
    NotPublished,
    SplitInBoth,
    CheckpointMismatch,
    StalePublishToken,
}

/// One reason a publish must not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PublishViolation {
    pub kind: ViolationKind,
    /// The split ids or partitions concerned, sorted.
    pub subjects: Vec<String>,
    pub message: String,
}

/// How much a recovery sweep may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum RecoveryMode {
    Probe,
    RollForward,
    Exclusive,
    Verify,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum OperationKind {
    Commit,
    Merge,
    Gc,
    ConfigApply,
    Reconcile,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum IntentPhase {
    Armed,
    EffectsConfirmed,
    /// Fenced after its owner's lease ran out before it confirmed (ABI 1.3).
    Abandoned,
}

/// What the host found of one object an intent planned.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ObjectObservation {
    pub split_id: String,
    pub present: bool,
    /// Present with the size and payload checksum the intent recorded.
    pub matches: bool,
}

/// Everything the host observed about one intent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct IntentObservation {
    pub operation_id: String,
    pub kind: OperationKind,
    pub phase: IntentPhase,
    pub owner_lease_live: bool,
    pub planned_rows: Vec<String>,
    pub rows: Vec<ExistingRow>,
    pub objects: Vec<ObjectObservation>,
    pub publish_staged: Vec<String>,
    pub publish_replaced: Vec<String>,
    pub has_checkpoint_delta: bool,
    pub checkpoint_at_from: bool,
    pub checkpoint_at_to: bool,
    /// Every partition of the delta at or past its to-position (ABI 1.3). Absent in
    /// observations recorded before, which are read as `false`.
    #[cfg_attr(feature = "serde", serde(default))]
    pub checkpoint_reached_to: bool,
    pub gc_splits: Vec<String>,
    pub mark_splits: Vec<String>,
    pub config_at_expected: bool,
    pub config_applied: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RecoveryInput {
    pub dataset_id: String,
    pub mode: RecoveryMode,
    pub now_ms: i64,
    pub intents: Vec<IntentObservation>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BlockedReason {
    pub why: String,
    pub operator_action: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum RecoveryDecision {
    RollForward,
    RollBack,
    Defer(String),
    Blocked(BlockedReason),
    Stale,
    /// Fence an unconfirmed commit or merge whose owner's lease ran out, mark its own staged
    /// rows and leave its objects to gc, for this reason (ABI 1.3).
    Abandon(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct IntentDecision {
    pub operation_id: String,
    pub decision: RecoveryDecision,
}

/// An object with no row, named by no intent, older than the staged grace period.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct OrphanObject {
    pub split_id: String,
    pub same_incarnation: bool,
    pub intact: bool,
    pub metadata_json: String,
    pub age_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReconcileInput {
    pub dataset_id: String,
    pub now_ms: i64,
    pub orphans: Vec<OrphanObject>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum ReconcileAction {
    Adopt,
    Discard(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReconcileDecision {
    pub split_id: String,
    pub action: ReconcileAction,
}

/// A row gc may act on: staged or marked for deletion, named by no intent (ABI 1.3).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GcCandidate {
    pub split_id: String,
    pub state: SplitState,
    pub updated_at_ms: i64,
}

/// One gc run of a dataset: its grace periods and the rows it may act on (ABI 1.3).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GcInput {
    pub dataset_id: String,
    pub now_ms: i64,
    pub staged_grace_period_ms: u64,
    pub deletion_grace_period_ms: u64,
    pub candidates: Vec<GcCandidate>,
}

/// What a gc run marks and what it deletes (ABI 1.3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GcPlan {
    /// Staged splits to abandon: marked for deletion.
    pub mark: Vec<String>,
    /// Marked splits whose objects, then rows, are deleted.
    pub delete: Vec<String>,
}

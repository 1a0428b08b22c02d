//! What the actors were told and saw during a run: the history the checks hold to the end.

use std::collections::BTreeSet;

use mend::model::DatasetConfig;

use super::Violation;

/// What one answer claims about how its operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Published, or certain to be.
    Published,
    /// Confirmed: publishes unless another operation publishes from the same checkpoint
    /// positions first (only a writer that begins again without resolving its operation
    /// races itself so).
    PublishesUnlessOvertaken,
    /// Ended without publishing, and never will.
    Ended,
    /// Refused with an error that certainly had no effect: nothing of it may ever publish.
    NotBegun,
    /// A publish refused for a reason other than the operation's end: it had not published
    /// (a publish that landed answers published, however it is sent again).
    NotPublished,
    /// Begun, and live: its writer may upload and publish it. Said by a begin sent at
    /// `sent_ms` (simulated ms since the run started); an operation answered ended before then
    /// can never be begun again (`ended-stays-ended`).
    Begun { sent_ms: u64 },
    /// Nothing about the end.
    Nothing,
}

/// One writer's operation, and every claim made about it.
#[derive(Debug, Clone, Default)]
pub struct OperationRecord {
    pub operation_id: String,
    /// The writer's checkpoint partition, and the position its delta starts from (a merge
    /// carries no delta: its `from` is the position its writer read, and means nothing).
    pub partition: String,
    pub from: u64,
    /// A merge: it replaces `replaced_split_ids` and moves no checkpoint.
    pub merge: bool,
    pub split_ids: Vec<String>,
    /// The published splits it replaces (a merge): every split of one or more earlier
    /// operations, never part of one.
    pub replaced_split_ids: Vec<String>,
    /// Simulated ms since the run started when its writer sent its begin or commit: it
    /// cannot take effect earlier.
    pub invoked_ms: u64,
    /// Every claim made about it.
    pub claims: Vec<ClaimRecord>,
    /// Every lease its writer was granted (a begin or a heartbeat answered), each from when
    /// the request was sent: recovery may take it over only once all have run out.
    pub leases: Vec<LeaseGrant>,
    /// Written with the plain protocol, no intent (stage, put, publish): an object of it
    /// that outlives its collected row (a put that stalled past gc) is an orphan that
    /// reconcile may adopt, publishing the split without the operation's delta.
    pub plain: bool,
}

/// A lease granted to a writer: asked for in a request sent at `sent_ms` (simulated ms since
/// the run started), for `lease_ms`, and answered granted. The engine counts it from when the
/// request landed, no earlier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseGrant {
    pub sent_ms: u64,
    pub lease_ms: u64,
}

/// A supervisor's sweep took an operation over: it abandoned it, its lease having run out by
/// the sweeping replica's clock; answered at `at_ms` (simulated ms since the run started).
#[derive(Debug, Clone)]
pub struct TakeoverRecord {
    pub operation_id: String,
    pub replica: usize,
    pub at_ms: u64,
}

/// One claim about an operation: what was said, by whom, and when it was said (simulated ms
/// since the run started): an operation claimed published took effect by then.
#[derive(Debug, Clone)]
pub struct ClaimRecord {
    pub claim: Claim,
    pub by: String,
    pub at_ms: u64,
}

/// A writer's read of where its checkpoint partition stands, between two moments (simulated
/// ms since the run started).
#[derive(Debug, Clone)]
pub struct PositionRead {
    pub partition: String,
    pub position: u64,
    pub from_ms: u64,
    pub until_ms: u64,
}

/// One gated sweep, in simulated time.
#[derive(Debug, Clone)]
pub struct SweepRecord {
    pub replica: usize,
    pub gate_epoch: u64,
    pub from_ms: i64,
    pub until_ms: i64,
}

/// One answered heartbeat of a replica's membership: what its view said, in simulated ms since
/// the run started.
#[derive(Debug, Clone)]
pub struct HeartbeatRecord {
    pub replica: usize,
    /// The member it heartbeats as: its process's replica id.
    pub replica_id: String,
    /// When the first heartbeat since this replica's last answered one started: an
    /// unanswered one may have claimed the epoch this one reports.
    pub started_ms: u64,
    pub answered_ms: u64,
    pub epoch: u64,
    pub rejoined: bool,
    /// The live members, by replica id, with their epochs.
    pub members: Vec<(String, u64)>,
    /// Members seen expired, by replica id, with the epochs they held.
    pub expired: Vec<(String, u64)>,
    /// The dataset's owner by this view.
    pub owner: Option<String>,
    /// Until when its own lease is live by this view (its monotonic clock, in simulated ms
    /// since the run started).
    pub lease_live_until_ms: u64,
}

/// A replica's process crashed and started again, in simulated ms since the run started.
#[derive(Debug, Clone)]
pub struct RestartRecord {
    pub replica: usize,
    pub at_ms: u64,
    /// The new process's incarnation.
    pub incarnation: u32,
}

/// A replica paused as a whole, in simulated ms since the run started.
#[derive(Debug, Clone)]
pub struct PauseRecord {
    pub replica: usize,
    pub from_ms: u64,
    pub until_ms: u64,
}

/// One generation a reader's live handle published, or served again after a refresh that
/// found nothing new, read between two moments (simulated ms since the run started).
#[derive(Debug, Clone)]
pub struct GenerationRead {
    pub reader: usize,
    pub manifest_version: u64,
    /// The dataset's config it was read with.
    pub config_version: u64,
    pub config: DatasetConfig,
    /// The published splits it shows.
    pub published: BTreeSet<String>,
    /// A refresh found nothing new: the handle serves the generation it served before.
    pub unchanged: bool,
    pub from_ms: u64,
    pub until_ms: u64,
}

/// A reader's read of a split's object, for a generation that showed the split published and
/// was known current at `shown_current_at_ms`; sent at `at_ms`, answered at `answered_ms`
/// (simulated ms since the run started).
#[derive(Debug, Clone)]
pub struct ObjectRead {
    pub reader: usize,
    pub split_id: String,
    pub shown_current_at_ms: u64,
    pub at_ms: u64,
    pub answered_ms: u64,
    /// Whether the object was there.
    pub found: bool,
}

/// A config apply under an idempotency key, and its answer.
#[derive(Debug, Clone)]
pub struct ConfigApplyRecord {
    pub key: String,
    /// The config it asked for (unique to the apply).
    pub config: DatasetConfig,
    pub outcome: ConfigOutcome,
}

/// What a config apply was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOutcome {
    /// Promoted, at this config version, to this config.
    Promoted { version: u64, config: DatasetConfig },
    /// Refused: the version it expected had moved on, and its config was never promoted.
    Refused,
    /// Not known.
    Unknown,
}

/// A policy swap or rollback the operator sent under an idempotency key.
#[derive(Debug, Clone)]
pub struct PolicyChangeRecord {
    pub key: String,
    /// The digest a swap asked for; `None` for a rollback.
    pub swap_to: Option<String>,
    pub outcome: PolicyOutcome,
    /// When it was first sent, and when its answer came, in simulated ms.
    pub invoked_ms: u64,
    pub answered_ms: u64,
}

/// What a policy change was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyOutcome {
    /// Made: the registry's record `version` names `digest`.
    Changed { version: u64, digest: String },
    /// Refused, and certainly not applied (already the active policy, nothing to roll back).
    Refused { error: String },
    /// Never known: the run ended while it was in doubt.
    Unknown,
}

/// Which policy a replica ran after following the registry: the registry record it installed
/// last (if any) and the running policy's digest.
#[derive(Debug, Clone)]
pub struct PolicyRun {
    pub replica: usize,
    /// Which of the replica's processes (0 at first, one more at each restart): a new process
    /// starts from the default policy and no record.
    pub incarnation: u32,
    pub registry_version: Option<u64>,
    pub digest: String,
}

/// Everything the actors were told and saw.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub operations: Vec<OperationRecord>,
    pub sweeps: Vec<SweepRecord>,
    /// Every generation the readers' handles published or served again, in the order they
    /// did.
    pub reads: Vec<GenerationRead>,
    /// Every checkpoint position a writer read before an operation.
    pub positions_read: Vec<PositionRead>,
    /// Every config apply the operator sent, and what it was answered.
    pub config_applies: Vec<ConfigApplyRecord>,
    /// Every policy change the operator sent, and what it was answered.
    pub policy_changes: Vec<PolicyChangeRecord>,
    /// Which policy each replica ran after each time it followed the registry.
    pub policy_runs: Vec<PolicyRun>,
    /// Every answered heartbeat of a replica's membership, in the order answered.
    pub heartbeats: Vec<HeartbeatRecord>,
    /// Every pause of a whole replica.
    pub pauses: Vec<PauseRecord>,
    /// Every crash and restart of a replica's process.
    pub restarts: Vec<RestartRecord>,
    /// Every operation a supervisor's sweep abandoned.
    pub takeovers: Vec<TakeoverRecord>,
    /// Every object a reader read, found or not.
    pub object_reads: Vec<ObjectRead>,
    /// Splits the operator's gc runs marked, published splits' marks they were the first to
    /// see, and splits they deleted (objects, then rows).
    pub gc_marked: usize,
    pub gc_seen: usize,
    pub gc_deleted: usize,
    /// What an actor found wrong while the run went on (a mid-run verify, a read-only handle
    /// that swept).
    pub violations: Vec<Violation>,
}

impl OperationRecord {
    /// Whether its publish moves its partition on by one (every operation but a merge).
    pub fn moves_checkpoint(&self) -> bool {
        !self.merge
    }
}

impl History {
    /// This history without the operations named in `left_out`.
    pub fn without(&self, left_out: &BTreeSet<&str>) -> History {
        History {
            operations: self
                .operations
                .iter()
                .filter(|record| !left_out.contains(record.operation_id.as_str()))
                .cloned()
                .collect(),
            ..self.clone()
        }
    }

    /// Records `claim` about `operation_id` (an operation no writer of the run began, such as
    /// an in-process commit's own id seen by a sweep, is not held to anything).
    pub fn claim(&mut self, operation_id: &str, claim: Claim, by: String, at_ms: u64) {
        if claim == Claim::Nothing {
            return;
        }
        if let Some(record) = self
            .operations
            .iter_mut()
            .find(|record| record.operation_id == operation_id)
        {
            record.claims.push(ClaimRecord { claim, by, at_ms });
        }
    }

    /// Records a lease granted to `operation_id`'s writer ([`LeaseGrant`]).
    pub fn grant(&mut self, operation_id: &str, sent_ms: u64, lease_ms: u64) {
        if let Some(record) = self
            .operations
            .iter_mut()
            .find(|record| record.operation_id == operation_id)
        {
            record.leases.push(LeaseGrant { sent_ms, lease_ms });
        }
    }
}

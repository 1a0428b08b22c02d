//! The fault seam: every durable step of an operation passes through it, so that tests can
//! crash an operation at any step, cleanly or ambiguously, and prove that recovery converges.
//!
//! Production engines use [`NoFaults`]. A crash is an `Unavailable` error returned from the
//! seam: the operation stops where it is, as a process would, with no cleanup.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{MendError, Result};

/// One durable write of an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurableStep {
    /// An operation's intent, written before its first effect.
    WriteIntent,
    /// Its rows, staged create-only.
    StageRows,
    /// One object put.
    PutObject {
        /// The split whose object it is.
        split_id: String,
    },
    /// The intent moved to `EffectsConfirmed`.
    ConfirmIntent,
    /// The publish.
    Publish,
    /// The intent deleted: the operation's last step.
    DeleteIntent,
    /// A commit's first step: its intent written and its rows staged create-only, in one
    /// atomic step ([`Catalog::begin_commit`](crate::catalog::Catalog::begin_commit)).
    BeginCommit,
    /// A commit's last step: its publish and the deletion of the intent it settles, in one
    /// atomic step ([`Catalog::publish_commit`](crate::catalog::Catalog::publish_commit)).
    PublishCommit,
    /// An operation's end in one atomic step (its abort, or a publish refused for good): its
    /// intent fenced and deleted, its own staged rows marked, its end recorded.
    EndOperation,
    /// Rows marked for deletion (gc, reconcile's discards, an abandonment).
    MarkRows,
    /// Marks gc saw for the first time, recorded as seen
    /// ([`Catalog::see_marks`](crate::catalog::Catalog::see_marks)).
    SeeMarks,
    /// One object deleted.
    DeleteObject {
        /// The split whose object it is.
        split_id: String,
    },
    /// Rows deleted.
    DeleteRows,
    /// A config apply's promotion of its staged config.
    PromoteConfig,
    /// Exclusive recovery's bump of the dataset's fencing epoch.
    FenceWriters,
    /// Recovery's fencing of one unconfirmed operation whose lease ran out (`Armed` to
    /// `Abandoned`).
    AbandonIntent,
    /// The record that an operation ended without publishing, written before its intent is
    /// deleted (its abort, recovery's abandonment or roll-back).
    RecordEnd,
    /// An append of audit records: a sweep's "executing" records before it executes
    /// decisions (one batch's, or one decision's), and the settled records after.
    AppendAudit,
    /// Recovery's settlement of a batch of intents (publishes, marks and intent deletes of
    /// many roll-forwards, stale intents and abandonments) in one atomic catalog step; also
    /// each batch of one a sweep settles one at a time after a batch was refused.
    SettleIntents,
}

impl fmt::Display for DurableStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PutObject { split_id } => write!(f, "put object {split_id}"),
            Self::DeleteObject { split_id } => write!(f, "delete object {split_id}"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// Consulted around every durable step.
pub trait Faults: Send + Sync + fmt::Debug {
    /// Before the write: an error means the write never happens.
    fn before(&self, step: &DurableStep) -> Result<()>;
    /// After the write landed: an error means it happened but the caller is told otherwise
    /// (an ambiguous outcome).
    fn after(&self, step: &DurableStep) -> Result<()>;
}

/// No faults: what every production engine uses.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoFaults;

impl Faults for NoFaults {
    fn before(&self, _step: &DurableStep) -> Result<()> {
        Ok(())
    }

    fn after(&self, _step: &DurableStep) -> Result<()> {
        Ok(())
    }
}

/// Crashes at the `k`-th durable step (counting from 1): before its write, or, when
/// `ambiguous`, after the write landed. Every step seen is recorded.
///
/// Steps may run concurrently (a commit uploads its objects several at a time): the `k`-th
/// step is the `k`-th to begin, and an ambiguous crash fires when that very step ends, however
/// many others began meanwhile. Those others run on, as uploads in flight when a process dies
/// may still land.
#[derive(Debug)]
pub struct CrashAt {
    k: usize,
    ambiguous: bool,
    seen: AtomicUsize,
    // std mutexes: only held for a push or a swap, never across an await.
    steps: Mutex<Vec<DurableStep>>,
    /// The `k`-th step while its write is in flight, for an ambiguous crash when it ends.
    pending: Mutex<Option<DurableStep>>,
}

impl CrashAt {
    /// Crashes at the `k`-th durable step; after its write when `ambiguous`.
    pub fn new(k: usize, ambiguous: bool) -> Self {
        Self {
            k,
            ambiguous,
            seen: AtomicUsize::new(0),
            steps: Mutex::new(Vec::new()),
            pending: Mutex::new(None),
        }
    }

    /// The steps reached so far, the crashing one included.
    pub fn steps(&self) -> Vec<DurableStep> {
        self.steps.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn crash(step: &DurableStep, how: &str) -> MendError {
        MendError::Unavailable {
            message: format!("injected crash {how} {step}"),
            source: None,
        }
    }
}

impl Faults for CrashAt {
    fn before(&self, step: &DurableStep) -> Result<()> {
        self.steps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(step.clone());
        let count = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if count == self.k {
            if !self.ambiguous {
                return Err(Self::crash(step, "before"));
            }
            *self.pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(step.clone());
        }
        Ok(())
    }

    fn after(&self, step: &DurableStep) -> Result<()> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        // Steps that run at once are told apart by what they write (an object's split id);
        // steps that repeat (audit appends) run one after another, so the first to end after
        // the `k`-th began is the `k`-th.
        if pending.as_ref() == Some(step) {
            *pending = None;
            return Err(Self::crash(step, "after"));
        }
        Ok(())
    }
}

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
    /// Rows marked for deletion (gc, reconcile's discards, an abandonment).
    MarkRows,
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
#[derive(Debug)]
pub struct CrashAt {
    k: usize,
    ambiguous: bool,
    seen: AtomicUsize,
    // A std mutex: only pushed to, never held across an await.
    steps: Mutex<Vec<DurableStep>>,
}

impl CrashAt {
    /// Crashes at the `k`-th durable step; after its write when `ambiguous`.
    pub fn new(k: usize, ambiguous: bool) -> Self {
        Self {
            k,
            ambiguous,
            seen: AtomicUsize::new(0),
            steps: Mutex::new(Vec::new()),
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
        if count == self.k && !self.ambiguous {
            return Err(Self::crash(step, "before"));
        }
        Ok(())
    }

    fn after(&self, step: &DurableStep) -> Result<()> {
        if self.seen.load(Ordering::SeqCst) == self.k && self.ambiguous {
            return Err(Self::crash(step, "after"));
        }
        Ok(())
    }
}

//! Deliberate bugs, each a known way to break mend's protocol, for showing that the simulator
//! (`mend-sim`) finds what it is meant to find. A bug acts only where a test enabled it, on its
//! own thread, and only in a build with the `deliberate-bugs` feature (mend-sim's tests turn it
//! on); without the feature `enable` does not exist and every check below is `false`.

/// One deliberate bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bug {
    /// An abort rolls its operation back on what it read, without its one conditional step on
    /// the intent: a publish racing it can land, and the abort still answers "ended".
    AbortWithoutConditionalWrite,
    /// The object-store catalog's publish step lands on an intent that was fenced (by
    /// exclusive recovery's roll-back, say): the operation publishes while its rows go.
    PublishIgnoresFence,
    /// The object-store gates take a gate over while its holder's lease still runs: two
    /// replicas sweep a dataset at once.
    GateTakeoverBeforeExpiry,
    /// A publish that finds its operation's intent gone answers "not found" rather than
    /// reading what ended it: a retried publish of an operation that published says it did not.
    PublishRetryIgnoresRecord,
    /// A live handle's refresh coalesces with the one before it: every other refresh answers
    /// "unchanged" without probing, so a handle says it is current while it serves a
    /// generation that publishes have already replaced (only an order of reads against the
    /// answers' moments shows it: every generation it serves is still a state the catalog
    /// was in).
    RefreshAnswersUnchangedWithoutProbing,
    /// A policy swap or rollback sent again under its idempotency key does not look for the
    /// record its first copy wrote: a rollback whose answer was lost rolls back twice, a swap
    /// is refused as "already the active policy" although it was made.
    PolicyRetryIgnoresRecord,
    /// A replica whose fleet membership lease ran out renews it under its old epoch rather
    /// than joining again: a member the others counted gone, and whose datasets they took
    /// over, comes back as if it had never left.
    MembershipRenewsLapsedLease,
    /// Garbage collection plans with a deletion grace period of 0: a marked split loses its
    /// object at the next gc, while readers that still serve a generation showing it are owed
    /// the grace period to read it.
    GcIgnoresDeletionGrace,
    /// The object-store catalog's begin step does not look for the records of its operation's
    /// end: a begin still on its way after its operation was aborted (its answer lost, then
    /// the abort sent) begins it again after it was answered ended.
    BeginIgnoresEndRecord,
    /// A read-only live handle runs recovery sweeps as a read-write one does: a serving process
    /// meant only to read writes to the catalog, and rolls other writers' work forward.
    ReadOnlyHandleSweeps,
    /// A heartbeat computes the renewed lease from the intent's last update instead of now: a
    /// writer that heartbeats less often than its lease is taken over by recovery while the
    /// lease it asked for still runs.
    HeartbeatLeaseFromLastUpdate,
}

impl Bug {
    /// Every deliberate bug.
    pub const ALL: [Bug; 11] = [
        Bug::AbortWithoutConditionalWrite,
        Bug::PublishIgnoresFence,
        Bug::GateTakeoverBeforeExpiry,
        Bug::PublishRetryIgnoresRecord,
        Bug::RefreshAnswersUnchangedWithoutProbing,
        Bug::PolicyRetryIgnoresRecord,
        Bug::MembershipRenewsLapsedLease,
        Bug::GcIgnoresDeletionGrace,
        Bug::BeginIgnoresEndRecord,
        Bug::HeartbeatLeaseFromLastUpdate,
        Bug::ReadOnlyHandleSweeps,
    ];
}

#[cfg(feature = "deliberate-bugs")]
thread_local! {
    static ENABLED: std::cell::Cell<Option<Bug>> = const { std::cell::Cell::new(None) };
}

/// Enables `bug` on this thread until the guard is dropped.
#[cfg(feature = "deliberate-bugs")]
pub fn enable(bug: Bug) -> Enabled {
    let previous = ENABLED.with(|enabled| enabled.replace(Some(bug)));
    Enabled { previous }
}

/// While alive, a deliberate bug acts on its thread.
#[cfg(feature = "deliberate-bugs")]
#[derive(Debug)]
#[must_use = "the bug is disabled when the guard is dropped"]
pub struct Enabled {
    previous: Option<Bug>,
}

#[cfg(feature = "deliberate-bugs")]
impl Drop for Enabled {
    fn drop(&mut self) {
        ENABLED.with(|enabled| enabled.set(self.previous));
    }
}

/// Whether `bug` acts here.
#[cfg(feature = "deliberate-bugs")]
pub(crate) fn active(bug: Bug) -> bool {
    ENABLED.with(|enabled| enabled.get() == Some(bug))
}

/// Whether `bug` acts here: never, in a build without the feature.
#[cfg(not(feature = "deliberate-bugs"))]
pub(crate) fn active(_bug: Bug) -> bool {
    false
}

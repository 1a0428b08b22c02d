//! Whether a gate is still held: [`Hold`] for one gate, [`Holds`] for several held together.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::GateName;
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

/// Whether one hold of a gate still stands: a cheap, cloneable view shared with the lock that
/// holds it (and, for a lease, with the task that renews it in the background), so that work
/// under the gate can ask before each write without owning the guard.
///
/// A hold is lost when a renewal finds its lease taken over or landed too late (the lock marks
/// it), or when its lease has run out by this process's clock because no renewal landed in
/// time. Once lost it stays lost. A hold that never expires (in-process, Postgres) never
/// reports lost: a Postgres advisory lock is lost only with its connection, which this does not
/// see; fencing there is the catalog's publish token.
#[derive(Clone)]
pub struct Hold(Arc<HoldState>);

struct HoldState {
    name: GateName,
    epoch: u64,
    /// The lease's expiry and the clock that reads it, for leases.
    lease: Option<(std::sync::atomic::AtomicI64, Arc<dyn crate::clock::Clock>)>,
    /// Why the hold was lost, once it was. A std mutex: set or read in one step, never held
    /// across an await.
    lost: Mutex<Option<String>>,
}

impl Hold {
    /// A hold that lasts until released.
    pub(crate) fn lasting(name: GateName, epoch: u64) -> Self {
        Self::new(name, epoch, None)
    }

    /// A lease's hold, running out at `expires_at_ms` by `clock` unless extended.
    pub(crate) fn leased(
        name: GateName,
        epoch: u64,
        expires_at_ms: TimestampMs,
        clock: Arc<dyn crate::clock::Clock>,
    ) -> Self {
        let expiry = std::sync::atomic::AtomicI64::new(expires_at_ms);
        Self::new(name, epoch, Some((expiry, clock)))
    }

    fn new(
        name: GateName,
        epoch: u64,
        lease: Option<(std::sync::atomic::AtomicI64, Arc<dyn crate::clock::Clock>)>,
    ) -> Self {
        Self(Arc::new(HoldState {
            name,
            epoch,
            lease,
            lost: Mutex::new(None),
        }))
    }

    /// The gate held.
    pub fn name(&self) -> &GateName {
        &self.0.name
    }

    /// The fencing epoch of this hold (0 where the implementation has none).
    pub fn fencing_epoch(&self) -> u64 {
        self.0.epoch
    }

    /// When the lease runs out unless renewed; `None` for holds that never expire.
    pub fn expires_at_ms(&self) -> Option<TimestampMs> {
        self.0
            .lease
            .as_ref()
            .map(|(expiry, _)| expiry.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// `Ok` while the hold stands; `Conflict` once it is lost or its lease has run out by this
    /// process's clock. No IO.
    pub fn check(&self) -> Result<()> {
        let state = &self.0;
        if let Some(why) = state.lost().as_deref() {
            return Err(self.lost_error(why));
        }
        if let Some((expiry, clock)) = &state.lease {
            let expires_at_ms = expiry.load(std::sync::atomic::Ordering::SeqCst);
            let now_ms = clock.now_ms();
            if now_ms >= expires_at_ms {
                return Err(self.lost_error(&format!(
                    "its lease ran out at {} by this process's clock (now {}) before a renewal \
                     landed, so another process may take the gate at a higher epoch",
                    crate::clock::rfc3339(expires_at_ms),
                    crate::clock::rfc3339(now_ms)
                )));
            }
        }
        Ok(())
    }

    /// Whether [`Hold::check`] passes.
    pub fn is_held(&self) -> bool {
        self.check().is_ok()
    }

    /// Moves the lease's expiry to `expires_at_ms` (a renewal landed in time).
    pub(crate) fn extend(&self, expires_at_ms: TimestampMs) {
        if let Some((expiry, _)) = &self.0.lease {
            expiry.fetch_max(expires_at_ms, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Marks the hold lost for good, `why` saying how it was found; the first reason stays.
    pub(crate) fn mark_lost(&self, why: String) {
        self.0.lost().get_or_insert(why);
    }

    /// Whether the hold was marked lost (not counting a lease that merely ran out).
    pub(crate) fn is_marked_lost(&self) -> bool {
        self.0.lost().is_some()
    }

    fn lost_error(&self, why: &str) -> MendError {
        MendError::Conflict {
            message: format!(
                "the {} is no longer held by this process at fencing epoch {}: {why}; the work \
                 under it stopped before its next write (what it wrote before stays, and its \
                 intent, if any, is left for recovery): run it again, which waits for the gate",
                self.0.name, self.0.epoch
            ),
        }
    }
}

impl HoldState {
    fn lost(&self) -> MutexGuard<'_, Option<String>> {
        // Set once, in one call that cannot panic half-way.
        self.lost.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hold")
            .field("name", &self.0.name)
            .field("epoch", &self.0.epoch)
            .field("expires_at_ms", &self.expires_at_ms())
            .field("lost", &*self.0.lost())
            .finish()
    }
}

/// The [`Hold`]s of several gates held together (of a [`HeldGates`](super::HeldGates) or an
/// [`ExclusivePermit`](super::ExclusivePermit)); empty for work that holds no gate, whose check always passes.
#[derive(Debug, Clone, Default)]
pub struct Holds(pub(super) Vec<Hold>);

impl Holds {
    /// `Ok` while every hold stands; else the first one's error, see [`Hold::check`].
    pub fn check(&self) -> Result<()> {
        self.0.iter().try_for_each(Hold::check)
    }

    /// The holds, in lock order.
    pub fn iter(&self) -> impl Iterator<Item = &Hold> {
        self.0.iter()
    }
}

//! Gates within one process: one tokio mutex per gate name, created on first use and dropped
//! when nobody holds or waits for it any more, so a long-lived process does not accumulate an
//! entry for every split it ever touched. Other processes are not excluded; for them use
//! [`PostgresGates`](super::PostgresGates) or [`ObjectStoreGates`](super::ObjectStoreGates).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use tokio::sync::OwnedMutexGuard;

use super::{GateLock, GateName, Gates, LockRequest};
use crate::error::Result;

/// Gates for the tasks of one process. Clones share their gates.
#[derive(Debug, Clone, Default)]
pub struct InProcessGates {
    table: Arc<Table>,
}

impl InProcessGates {
    /// Gates shared by every clone of this value, seen by this process only.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many gates are held or waited for right now.
    pub fn gates_in_use(&self) -> usize {
        self.table.entries().len()
    }
}

#[derive(Debug, Default)]
struct Table {
    /// A std mutex: it is held only to look up, insert or remove an entry, never across an
    /// await (waiting happens on the entry's tokio mutex, outside it), so it never blocks a
    /// runtime thread for long and cannot take part in a deadlock.
    entries: Mutex<HashMap<GateName, Entry>>,
    /// One counter for every name: an entry is dropped when unused, and a per-entry counter
    /// would start again at 1, but a shared counter grows for every name all the same.
    last_epoch: AtomicU64,
}

#[derive(Debug)]
struct Entry {
    mutex: Arc<tokio::sync::Mutex<()>>,
    /// Tasks holding or waiting for the gate; the entry goes when this reaches 0.
    interested: usize,
}

impl Table {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<GateName, Entry>> {
        // Every update is a single insert, counter change or remove, so a panic elsewhere
        // cannot leave the map half-changed.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A task's interest in one gate, as a waiter or a holder. Dropping it (the task got bored,
/// was cancelled, or released) removes the entry if it was the last one.
#[derive(Debug)]
struct Interest {
    table: Arc<Table>,
    name: GateName,
}

impl Interest {
    fn register(table: &Arc<Table>, name: &GateName) -> (Self, Arc<tokio::sync::Mutex<()>>) {
        let mutex = {
            let mut entries = table.entries();
            let entry = entries.entry(name.clone()).or_insert_with(|| Entry {
                mutex: Arc::new(tokio::sync::Mutex::new(())),
                interested: 0,
            });
            entry.interested += 1;
            Arc::clone(&entry.mutex)
        };
        let interest = Self {
            table: Arc::clone(table),
            name: name.clone(),
        };
        (interest, mutex)
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        let mut entries = self.table.entries();
        if let Some(entry) = entries.get_mut(&self.name) {
            entry.interested -= 1;
            if entry.interested == 0 {
                entries.remove(&self.name);
            }
        }
    }
}

/// A held in-process gate.
#[derive(Debug)]
struct InProcessLock {
    /// Declared before `_interest` so that it drops first: the mutex is unlocked before its
    /// entry can be removed and replaced by a fresh, unlocked one.
    _held: OwnedMutexGuard<()>,
    _interest: Interest,
    fencing_epoch: u64,
}

#[async_trait]
impl GateLock for InProcessLock {
    fn fencing_epoch(&self) -> u64 {
        self.fencing_epoch
    }

    async fn release(self: Box<Self>) -> Result<()> {
        drop(self);
        Ok(())
    }
}

#[async_trait]
impl Gates for InProcessGates {
    fn has_fencing_epochs(&self) -> bool {
        true
    }

    async fn lock(&self, request: &LockRequest<'_>) -> Result<Box<dyn GateLock>> {
        let (interest, mutex) = Interest::register(&self.table, request.name());
        // `timeout_at` polls the lock before the deadline, so a free gate is taken even when
        // the deadline has passed: a zero timeout is a try. Waiters are served in FIFO order.
        let held = tokio::time::timeout_at(request.deadline(), mutex.lock_owned())
            .await
            .map_err(|_elapsed| request.timed_out())?;
        // Bumped while holding the gate, so the epochs of one gate grow in the order of its
        // holders.
        let fencing_epoch = self.table.last_epoch.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(Box::new(InProcessLock {
            _held: held,
            _interest: interest,
            fencing_epoch,
        }))
    }
}

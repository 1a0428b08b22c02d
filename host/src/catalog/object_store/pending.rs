//! The index of datasets with pending intents, kept by writers: one empty marker object per
//! dataset, so that a supervisor finds the datasets with crashed writers' work with one LIST,
//! however many datasets the catalog holds ([`Catalog::pending_datasets`]).
//!
//! ```text
//! index/pending/{dataset_id}     a marker: its name and its last_modified are all it says
//! ```
//!
//! The catalog's other top-level folders are `datasets/` (logs, checkpoints, audit, gates and,
//! when they share the store, split objects) and `policies/` (the policy registry), so
//! `index/` meets nothing else; the id is one path part, percent-encoded as under
//! `datasets/`.
//!
//! # The rules
//!
//! 1. **Before a log version that adds an intent** (a new operation id; `put_intent` and
//!    `begin_commit` today, and any mutation the commit loop sees adding one), the writer puts
//!    the marker, put-if-absent, and an "already exists" counts as success. The commit loop
//!    (`mutate` in `mod.rs`) does it, so no path can forget. A writer that crashes after its
//!    intent landed has therefore always left the marker. To keep a steady stream of commits
//!    at their cost, a process skips the put while the marker is one it *created* itself less
//!    than `C` ago ([`ObjectStoreCatalogOptions::pending_marker_reuse`], 30 s by default); it
//!    never skips after an "already exists", which says nothing of the marker's age.
//! 2. **Discovery** is one LIST of `index/pending/`, paged as the store pages, and nothing
//!    else: each marker names a dataset, with nothing known of its intents.
//! 3. **Clearing** (`clear_pending`, after a supervisor found no intents): if the dataset has
//!    intents, nothing. Otherwise one HEAD of the marker; only if it is older than `G = 2 x C`
//!    (its `last_modified` by the store's clock against this process's wall clock) it is
//!    deleted, then the dataset's log is read again, and if an intent appeared meanwhile the
//!    marker is put back.
//! 4. **Deleting a dataset** would delete its marker too; the catalog has no dataset deletion
//!    yet.
//!
//! # What it promises, and the one window it leaves
//!
//! A marker that a process still relies on (created less than `C` ago by its own clock) is
//! younger than `G` by any other's unless their clocks are `C` apart or the writer's log put
//! takes `C` to land; and an intent that lands between the delete and the re-read is seen by
//! the re-read, which puts the marker back. What is left: a writer whose put of the marker
//! answered "already exists" just before a clearer deleted it, and whose intent lands after
//! the clearer's re-read, has an intent and no marker. While that writer lives this is
//! harmless: it settles its own intent. If it then crashes, the index does not name the
//! dataset until another intent is added there; the supervisor's periodic full scan (the
//! trait's default discovery) finds it. Nothing here claims more.
//!
//! [`Catalog::pending_datasets`]: crate::catalog::Catalog::pending_datasets
//! [`ObjectStoreCatalogOptions::pending_marker_reuse`]: super::ObjectStoreCatalogOptions::pending_marker_reuse

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::TryStreamExt;
use object_store::path::{Path, PathPart};
use object_store::{ObjectMeta, ObjectStore, PutMode, PutPayload};
use tokio::time::Instant;

use super::log::decode_path_part;
use crate::catalog::PendingDataset;
use crate::error::{MendError, Result};

/// `C`: how long a process skips the marker put after it created the marker itself, unless
/// the options say otherwise.
pub const PENDING_MARKER_REUSE: Duration = Duration::from_secs(30);

/// How a marker's put-if-absent came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MarkerPut {
    /// This process created it, or created it less than `C` ago and skipped the put.
    Created,
    /// It was there already: its age is unknown.
    Existed,
}

/// The markers under one catalog's prefix, and the ones this process created lately.
#[derive(Debug)]
pub(super) struct PendingIndex {
    store: Arc<dyn ObjectStore>,
    dir: Path,
    /// `C`.
    reuse: Duration,
    /// When this process issued the put that created each marker (an instant before the marker
    /// was written, so its age here is never less than by the store). A std mutex: held to
    /// read or write one entry, never across an await.
    created: Mutex<HashMap<String, Instant>>,
}

impl PendingIndex {
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &Path, reuse: Duration) -> Self {
        Self {
            store,
            dir: prefix.child("index").child("pending"),
            reuse,
            created: Mutex::new(HashMap::new()),
        }
    }

    /// `G`: a marker younger than this is never deleted.
    pub fn grace(&self) -> Duration {
        self.reuse.saturating_mul(2)
    }

    pub fn marker_path(&self, dataset_id: &str) -> Path {
        self.dir.child(PathPart::from(dataset_id))
    }

    /// Rule 1: the marker is there once this returns Ok, or was created by this process less
    /// than `C` ago (no request then).
    pub async fn ensure(&self, dataset_id: &str) -> Result<MarkerPut> {
        if self
            .created_at(dataset_id)
            .is_some_and(|at| at.elapsed() < self.reuse)
        {
            return Ok(MarkerPut::Created);
        }
        self.put(dataset_id).await
    }

    /// Puts the marker, put-if-absent, whatever this process remembers.
    pub async fn put(&self, dataset_id: &str) -> Result<MarkerPut> {
        let path = self.marker_path(dataset_id);
        let issued = Instant::now();
        match self
            .store
            .put_opts(&path, PutPayload::new(), PutMode::Create.into())
            .await
        {
            Ok(_) => {
                let mut created = self.created.lock().unwrap_or_else(PoisonError::into_inner);
                created.insert(dataset_id.to_string(), issued);
                Ok(MarkerPut::Created)
            }
            Err(object_store::Error::AlreadyExists { .. }) => Ok(MarkerPut::Existed),
            Err(
                err @ (object_store::Error::NotImplemented
                | object_store::Error::NotSupported { .. }),
            ) => Err(MendError::CapabilityMissing {
                capability: "put-if-absent".to_string(),
                detail: format!(
                    "store {} cannot write {path} only if absent ({err}); the object-storage \
                     catalog needs conditional puts",
                    self.store
                ),
            }),
            Err(err) => Err(MendError::unavailable(
                format!(
                    "writing the pending-work marker {path} failed ({err}); the change that \
                     needed it was not written: retry"
                ),
                err,
            )),
        }
    }

    /// Rule 2: one listing of the markers, sorted by dataset id. A name that does not decode
    /// to an id is not a marker this catalog wrote, and is skipped.
    pub async fn list(&self) -> Result<Vec<(PendingDataset, ObjectMeta)>> {
        let objects: Vec<ObjectMeta> = self
            .store
            .list(Some(&self.dir))
            .try_collect()
            .await
            .map_err(|err| {
                MendError::unavailable(format!("listing the pending markers {}", self.dir), err)
            })?;
        let depth = self.dir.parts().count() + 1;
        let mut markers: Vec<(PendingDataset, ObjectMeta)> = objects
            .into_iter()
            .filter(|object| object.location.parts().count() == depth)
            .filter_map(|object| {
                let id = object.location.filename().and_then(decode_path_part)?;
                Some((PendingDataset::named(id), object))
            })
            .collect();
        markers.sort_by(|a, b| a.0.dataset_id.cmp(&b.0.dataset_id));
        Ok(markers)
    }

    /// The marker's metadata, if it is there (one HEAD).
    pub async fn head(&self, dataset_id: &str) -> Result<Option<ObjectMeta>> {
        let path = self.marker_path(dataset_id);
        match self.store.head(&path).await {
            Ok(meta) => Ok(Some(meta)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(MendError::unavailable(format!("reading {path}"), err)),
        }
    }

    /// Deletes the marker (one that is gone counts as deleted) and forgets that this process
    /// created it, so that its next intent puts it again.
    pub async fn delete(&self, dataset_id: &str) -> Result<()> {
        self.forget(dataset_id);
        let path = self.marker_path(dataset_id);
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(MendError::unavailable(format!("deleting {path}"), err)),
        }
    }

    fn forget(&self, dataset_id: &str) {
        let mut created = self.created.lock().unwrap_or_else(PoisonError::into_inner);
        created.remove(dataset_id);
    }

    fn created_at(&self, dataset_id: &str) -> Option<Instant> {
        let created = self.created.lock().unwrap_or_else(PoisonError::into_inner);
        created.get(dataset_id).copied()
    }
}

/// Whether a marker last written at `written_at_ms` (the store's clock) is past `grace` at
/// `now_ms` (this process's clock), and may be deleted. At exactly `grace` it is.
pub(super) fn past_grace(written_at_ms: i64, now_ms: i64, grace: Duration) -> bool {
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    now_ms.saturating_sub(written_at_ms) >= grace_ms
}

/// This process's wall clock, in ms since the epoch: what a marker's age is measured against,
/// as retention measures a log file's.
pub(super) fn wall_clock_ms() -> i64 {
    crate::ambient::wall_clock_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_goes_only_once_past_the_grace() {
        let grace = Duration::from_secs(60);
        assert!(!past_grace(1_000_000, 1_000_000 + 59_999, grace));
        assert!(past_grace(1_000_000, 1_000_000 + 60_000, grace));
        // A marker stamped in this process's future (clocks apart) is young.
        assert!(!past_grace(2_000_000, 1_000_000, grace));
        assert!(past_grace(i64::MIN, i64::MAX, grace), "saturates");
        assert!(past_grace(5, 5, Duration::ZERO), "no grace: at once");
    }
}

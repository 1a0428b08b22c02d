//! Reading a dataset's state: from the cache while it may be trusted, else the newest
//! checkpoint and the log versions after it.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::log::Counters;
use super::state::DatasetState;
use crate::error::{MendError, Result};

use super::{Cached, MAX_LOAD_ROUNDS, MAX_READS_AHEAD, ObjectStoreCatalog};

impl ObjectStoreCatalog {
    /// How long a cached state is committed on and probed without a listing after it was
    /// confirmed ([`super::retention`]).
    pub(super) fn trust_window(&self) -> Duration {
        self.options.log_retention / 2
    }

    pub(super) fn trusted(&self, cached: &Cached) -> bool {
        cached.confirmed_at.elapsed() < self.trust_window()
    }

    /// The newest state of a dataset: the cached one rolled forward, or the newest checkpoint
    /// (else version 0) rolled forward.
    pub(super) async fn load(&self, dataset_id: &str) -> Result<Arc<DatasetState>> {
        Ok(self.load_confirmed(dataset_id).await?.state)
    }

    /// [`Self::load`], with when the state was confirmed the newest.
    pub(super) async fn load_confirmed(&self, dataset_id: &str) -> Result<Cached> {
        if dataset_id.is_empty() {
            return Err(MendError::dataset_not_found(dataset_id));
        }
        let Some(cached) = self.cached(dataset_id) else {
            return self.load_validated(dataset_id, None).await;
        };
        if !self.trusted(&cached) {
            return self.load_validated(dataset_id, Some(cached.state)).await;
        }
        let started = Instant::now();
        let state = self
            .roll_forward(dataset_id, Arc::clone(&cached.state))
            .await?;
        // The probe that found the end must itself have been within the window.
        if !self.trusted(&cached) {
            return self.load_validated(dataset_id, Some(state)).await;
        }
        self.remember(dataset_id, &state, started);
        Ok(Cached {
            state,
            confirmed_at: started,
        })
    }

    /// Loads without trusting that a missing version is the end of the log: after reaching
    /// it, a listing must show no checkpoint past it (see [`super::retention`]). A checkpoint past
    /// it means that writers moved on meanwhile, or that retention cut the log there: a
    /// second look at the next version tells which (a version below a checkpoint was
    /// written, so missing it is deleted), and the load follows the writers, or starts again
    /// from the newest checkpoint.
    pub(super) async fn load_validated(
        &self,
        dataset_id: &str,
        mut base: Option<Arc<DatasetState>>,
    ) -> Result<Cached> {
        for _ in 0..MAX_LOAD_ROUNDS {
            let started = Instant::now();
            let state = match base.take() {
                Some(state) => state,
                None => match self.load_base(dataset_id).await? {
                    Some(state) => Arc::new(state),
                    None => {
                        Counters::bump(&self.log.counters.reloads);
                        continue;
                    }
                },
            };
            let state = self.roll_forward(dataset_id, state).await?;
            let newest = self.log.newest_checkpoint_version(dataset_id).await?;
            if newest.is_none_or(|newest| newest <= state.version) {
                self.remember(dataset_id, &state, started);
                return Ok(Cached {
                    state,
                    confirmed_at: started,
                });
            }
            let followed = self.roll_forward(dataset_id, Arc::clone(&state)).await?;
            if followed.version > state.version {
                base = Some(followed);
            } else {
                Counters::bump(&self.log.counters.reloads);
            }
        }
        Err(MendError::Unavailable {
            message: format!(
                "dataset {dataset_id}: the log kept moving past new checkpoints while it was \
                 read ({MAX_LOAD_ROUNDS} rounds); read it again"
            ),
            source: None,
        })
    }

    /// The state of the newest checkpoint, else of version 0; `None` if the newest listed
    /// checkpoint was deleted before it could be read.
    pub(super) async fn load_base(&self, dataset_id: &str) -> Result<Option<DatasetState>> {
        let newest = self.log.newest_checkpoint_version(dataset_id).await?;
        if let Some(version) = newest {
            return self.log.read_checkpoint(dataset_id, version).await;
        }
        match self.log.read_commit(dataset_id, 0).await? {
            Some(creation) => Ok(Some(DatasetState::from_creation(dataset_id, &creation)?)),
            None => Err(MendError::dataset_not_found(dataset_id)),
        }
    }

    /// `base` with every version after it applied, up to the first missing one. The first
    /// version after `base` is read alone (a probe that finds nothing costs one GET); while
    /// versions keep coming, the next ones are read several at a time (2, 4, ... up to 16),
    /// so that a replay of a hundred versions waits for a few rounds of reads, not a hundred.
    pub(super) async fn roll_forward(
        &self,
        dataset_id: &str,
        base: Arc<DatasetState>,
    ) -> Result<Arc<DatasetState>> {
        let mut newer: Option<DatasetState> = None;
        let mut window = 1;
        'reading: loop {
            let next_version = newer.as_ref().unwrap_or(&base).version + 1;
            let reads = (next_version..next_version + window)
                .map(|version| self.log.read_commit(dataset_id, version));
            for read in futures::future::join_all(reads).await {
                let Some(commit) = read? else {
                    break 'reading;
                };
                newer
                    .get_or_insert_with(|| DatasetState::clone(&base))
                    .apply(&commit)?;
            }
            window = (window * 2).min(MAX_READS_AHEAD);
        }
        Ok(newer.map(Arc::new).unwrap_or(base))
    }

    /// The newest log version of `dataset_id` this instance knows of, if it holds its state.
    pub(super) fn known_version(&self, dataset_id: &str) -> Option<u64> {
        self.cached(dataset_id).map(|cached| cached.state.version)
    }

    pub(super) fn cached(&self, dataset_id: &str) -> Option<Cached> {
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.get(dataset_id).cloned()
    }

    /// Caches `state`, confirmed newest at `confirmed_at`, unless a concurrent task already
    /// cached a newer one.
    pub(super) fn remember(
        &self,
        dataset_id: &str,
        state: &Arc<DatasetState>,
        confirmed_at: Instant,
    ) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let fresh = Cached {
            state: Arc::clone(state),
            confirmed_at,
        };
        match cache.get_mut(dataset_id) {
            None => {
                cache.insert(dataset_id.to_string(), fresh);
            }
            Some(entry) if entry.state.version < state.version => *entry = fresh,
            Some(entry) if entry.state.version == state.version => {
                entry.confirmed_at = entry.confirmed_at.max(confirmed_at);
            }
            Some(_) => {}
        }
    }

    pub(super) fn forget(&self, dataset_id: &str) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.remove(dataset_id);
    }
}

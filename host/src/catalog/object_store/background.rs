//! The work a commit leaves for later: writing a checkpoint when one is due, then deleting
//! what retention lets go ([`super::retention`]).
//!
//! It runs in a task of its own, so that a commit is acknowledged without waiting for a
//! checkpoint of the whole dataset. At most one such task runs per dataset and instance; a
//! checkpoint that falls due while it runs is written right after, from the newest state
//! then. A failure is counted and otherwise ignored: the commit it follows has landed, and the
//! next checkpoint makes up for a missing one. Encoding runs on tokio's blocking pool: it
//! takes tens of milliseconds for 100,000 splits, which would stall every request queued on
//! the same async worker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use tokio::sync::Notify;

use super::checkpoint;
use super::log::{Counters, Log};
use super::retention::{self, ListedFile};
use super::state::DatasetState;
use crate::error::Result;

/// When checkpoints fall due and what retention keeps.
#[derive(Debug, Clone, Copy)]
pub(super) struct Schedule {
    pub checkpoint_interval: u64,
    pub checkpoints_kept: usize,
    pub log_retention: Duration,
}

/// The checkpoint tasks of one catalog instance.
#[derive(Debug)]
pub(super) struct Checkpointer {
    log: Arc<Log>,
    schedule: Schedule,
    /// The datasets with a task running, each with the newest state that fell due since the
    /// task took its own. A std mutex: held only to look up or swap an entry.
    running: Arc<Mutex<HashMap<String, Option<Arc<DatasetState>>>>>,
    /// Notified whenever a task ends, for [`Checkpointer::idle`].
    ended: Arc<Notify>,
}

impl Checkpointer {
    pub fn new(log: Arc<Log>, schedule: Schedule) -> Self {
        Self {
            log,
            schedule,
            running: Arc::new(Mutex::new(HashMap::new())),
            ended: Arc::new(Notify::new()),
        }
    }

    /// Hands over the state a commit of this instance produced: checkpointed in the
    /// background if its version is due.
    pub fn committed(&self, dataset_id: &str, state: &Arc<DatasetState>) {
        let interval = self.schedule.checkpoint_interval.max(1);
        if state.version == 0 || !state.version.is_multiple_of(interval) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Nothing to run a task on; the next reader replays a little further.
            Counters::bump(&self.log.counters.checkpoint_failures);
            return;
        };
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pending) = running.get_mut(dataset_id) {
            if pending
                .as_ref()
                .is_none_or(|older| older.version < state.version)
            {
                *pending = Some(Arc::clone(state));
            }
            return;
        }
        running.insert(dataset_id.to_string(), None);
        let task = Task {
            log: Arc::clone(&self.log),
            schedule: self.schedule,
            dataset_id: dataset_id.to_string(),
            running: Arc::clone(&self.running),
            ended: Arc::clone(&self.ended),
            finished: false,
        };
        runtime.spawn(task.run(Arc::clone(state)));
    }

    /// Waits until no checkpoint task of this instance is running.
    pub async fn idle(&self) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self
                .running
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty()
            {
                return;
            }
            ended.await;
        }
    }
}

/// One dataset's checkpoint task. Dropped unfinished (a panic, a runtime shutting down), it
/// still leaves the dataset free for the next task.
struct Task {
    log: Arc<Log>,
    schedule: Schedule,
    dataset_id: String,
    running: Arc<Mutex<HashMap<String, Option<Arc<DatasetState>>>>>,
    ended: Arc<Notify>,
    finished: bool,
}

impl Task {
    async fn run(mut self, mut state: Arc<DatasetState>) {
        loop {
            if self.checkpoint(&state).await {
                self.prune().await;
            }
            let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            match running.get_mut(&self.dataset_id).and_then(Option::take) {
                Some(newer) => state = newer,
                None => {
                    running.remove(&self.dataset_id);
                    self.finished = true;
                    drop(running);
                    self.ended.notify_waiters();
                    return;
                }
            }
        }
    }

    /// Writes the checkpoint of `state`; whether one is in place now (ours or another
    /// writer's).
    async fn checkpoint(&self, state: &Arc<DatasetState>) -> bool {
        let counters = &self.log.counters;
        let encoding = Arc::clone(state);
        let encoded = tokio::task::spawn_blocking(move || checkpoint::encode(&encoding)).await;
        let Ok(Ok(bytes)) = encoded else {
            Counters::bump(&counters.checkpoint_failures);
            return false;
        };
        match self
            .log
            .put_checkpoint(&self.dataset_id, state.version, bytes)
            .await
        {
            Ok(written) => {
                if written {
                    Counters::bump(&counters.checkpoints_written);
                }
                true
            }
            Err(_) => {
                Counters::bump(&counters.checkpoint_failures);
                false
            }
        }
    }

    /// Deletes what retention lets go; a file it fails to delete goes with the next prune.
    async fn prune(&self) {
        if self.schedule.checkpoints_kept == 0 {
            return;
        }
        let counters = &self.log.counters;
        let Ok(paths) = self.files_to_delete().await else {
            Counters::bump(&counters.prune_failures);
            return;
        };
        let deletions = futures::stream::iter(paths)
            .map(|path| async move { self.log.delete(&path).await })
            .buffer_unordered(8);
        deletions
            .for_each(|deleted| async move {
                match deleted {
                    Ok(()) => Counters::bump(&counters.files_pruned),
                    Err(_) => Counters::bump(&counters.prune_failures),
                }
            })
            .await;
    }

    async fn files_to_delete(&self) -> Result<Vec<object_store::path::Path>> {
        let listed = |files: Vec<(u64, object_store::ObjectMeta)>| -> Vec<ListedFile> {
            files
                .into_iter()
                .map(|(version, meta)| ListedFile {
                    version,
                    path: meta.location,
                    written_at_ms: meta.last_modified.timestamp_millis(),
                })
                .collect()
        };
        let checkpoints = listed(self.log.checkpoint_files(&self.dataset_id).await?);
        let log = listed(self.log.log_files(&self.dataset_id).await?);
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
            });
        let retention_ms =
            i64::try_from(self.schedule.log_retention.as_millis()).unwrap_or(i64::MAX);
        Ok(retention::files_to_delete(
            &checkpoints,
            &log,
            self.schedule.checkpoints_kept,
            retention_ms,
            now_ms,
        ))
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.dataset_id);
        self.ended.notify_waiters();
    }
}

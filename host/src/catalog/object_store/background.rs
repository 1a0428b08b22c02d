//! The work a commit leaves for later: writing a checkpoint when one is due, then deleting
//! what retention lets go ([`super::retention`]).
//!
//! It runs in a task of its own, so that a commit is acknowledged without waiting for a
//! checkpoint of the whole dataset. At most one such task runs per dataset and instance; a
//! checkpoint that falls due while it runs is written right after, from the newest state
//! then. A failure is counted and otherwise ignored: the commit it follows has landed, and the
//! next checkpoint makes up for a missing one.
//!
//! Encoding takes tens of milliseconds and tens of megabytes for 100,000 splits, so it runs
//! neither on an async worker (it would stall every request queued there) nor on tokio's
//! blocking pool, but on one thread of the process's own ([`encode_off_thread`]): glibc keeps
//! the memory a thread's arena once held, and encodes spread over the blocking pool's threads
//! left a checkpoint's worth of resident memory behind in each of them.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;

use super::checkpoint;
use super::log::{Counters, Log};
use super::retention::{self, ListedFile};
use super::state::DatasetState;
use super::writes;
use crate::error::{MendError, Result};

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
        let Ok(bytes) = encode_off_thread(Arc::clone(state)).await else {
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
        let Ok((mut paths, log_versions)) = self.files_to_delete().await else {
            Counters::bump(&counters.prune_failures);
            return;
        };
        // The records of the writes in the commits about to go are archived first; if that
        // fails, no commit goes (`writes.rs`).
        if writes::archive(&self.log, &self.dataset_id, &log_versions)
            .await
            .is_err()
        {
            Counters::bump(&counters.prune_failures);
            let commits: std::collections::HashSet<_> = log_versions
                .iter()
                .map(|&version| self.log.commit_path(&self.dataset_id, version))
                .collect();
            paths.retain(|path| !commits.contains(path));
        }
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

    /// The files retention lets go, and the versions of the commits among them, sorted.
    async fn files_to_delete(&self) -> Result<(Vec<object_store::path::Path>, Vec<u64>)> {
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
        let now_ms = crate::ambient::wall_clock_ms();
        let retention_ms =
            i64::try_from(self.schedule.log_retention.as_millis()).unwrap_or(i64::MAX);
        let paths = retention::files_to_delete(
            &checkpoints,
            &log,
            self.schedule.checkpoints_kept,
            retention_ms,
            now_ms,
        );
        let going: std::collections::HashSet<_> = paths.iter().collect();
        let log_versions = log
            .iter()
            .filter(|file| going.contains(&file.path))
            .map(|file| file.version)
            .collect();
        Ok((paths, log_versions))
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

/// A checkpoint to encode, and where to send the bytes.
type EncodeJob = (
    Arc<DatasetState>,
    tokio::sync::oneshot::Sender<Result<Vec<u8>>>,
);

/// `state`'s checkpoint, encoded on the process's checkpoint thread (see the module doc),
/// which is started on first use and lives as long as the process.
async fn encode_off_thread(state: Arc<DatasetState>) -> Result<Vec<u8>> {
    if crate::ambient::is_deterministic() {
        return checkpoint::encode(&state);
    }
    static JOBS: OnceLock<Mutex<mpsc::Sender<EncodeJob>>> = OnceLock::new();
    let jobs = JOBS.get_or_init(|| {
        let (sender, receiver) = mpsc::channel::<EncodeJob>();
        let spawned = std::thread::Builder::new()
            .name("mend-checkpoints".to_string())
            .spawn(move || {
                for (state, reply) in receiver {
                    let _ = reply.send(checkpoint::encode(&state));
                }
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "the checkpoint thread cannot start; checkpoints are not written");
        }
        Mutex::new(sender)
    });
    let (reply, answer) = tokio::sync::oneshot::channel();
    let sent = jobs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send((state, reply));
    let gone = || MendError::Unavailable {
        message: "the checkpoint thread is gone".to_string(),
        source: None,
    };
    sent.map_err(|_| gone())?;
    answer.await.map_err(|_| gone())?
}

//! Appending a log version: decide on the newest state, put the next version if absent, and
//! decide again on what a lost race left.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::log::PutOutcome;
use super::log_format::{Action, Commit};
use super::mutations::Change;
use super::state::DatasetState;
use crate::catalog::write_audit::PendingWrite;
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

use super::{Cached, ObjectStoreCatalog, pending};

impl ObjectStoreCatalog {
    /// Runs one optimistic mutation: decide on the newest state this instance knows, commit
    /// the next version, and on a lost race read what won and do all of it again. `decide`
    /// runs once per attempt, each time on the exact state its commit would follow. A cached
    /// state is not probed before the put: the put finds out. What `decide` answers without
    /// a commit (nothing to change, or a refusal) on a cached state stands only if a read
    /// then finds no newer version; otherwise it decides again on the newer state.
    ///
    /// `decide` is given the time of its attempt: `now_ms` plus the time spent since the call,
    /// read just before the attempt. What a commit records as its moment (a mark, a
    /// publication, an answer) must not predate its own write by the waits and lost races
    /// before it: a mark that landed after a stalled put and a retry, stamped with the moment
    /// the mutation began, would start a deletion grace period that readers never saw begin
    /// (found by `mend-sim`, seed 8877293620571511055). The time is still read before the put,
    /// so a deletion decided on it is never decided on a moment later than its write.
    pub(super) fn mutate<'a, T: 'a>(
        &'a self,
        dataset_id: &'a str,
        now_ms: TimestampMs,
        decide: impl FnMut(&DatasetState, TimestampMs) -> Result<Change<T>> + Send + 'a,
    ) -> impl Future<Output = Result<T>> + 'a {
        // Not an async fn of its own: its future is the recorded one's, not one around it.
        let answer = |_: &T| serde_json::Value::Null;
        self.mutate_recorded(dataset_id, now_ms, None, answer, decide)
    }

    /// [`Self::mutate`], with the record of the write (`write`, answered by `answer` of the
    /// output) as one more action of the commit: in the same atomic step as the change
    /// ([`crate::catalog::write_audit`]). A change that writes nothing records nothing.
    pub(super) async fn mutate_recorded<T>(
        &self,
        dataset_id: &str,
        now_ms: TimestampMs,
        write: Option<&PendingWrite>,
        answer: impl Fn(&T) -> serde_json::Value + Send,
        mut decide: impl FnMut(&DatasetState, TimestampMs) -> Result<Change<T>> + Send,
    ) -> Result<T> {
        let called_at = Instant::now();
        let attempt_time = || {
            let waited = i64::try_from(called_at.elapsed().as_millis()).unwrap_or(i64::MAX);
            now_ms.saturating_add(waited)
        };
        // A state read just now, to decide on next.
        let mut fresh: Option<Cached> = None;
        // The pending marker was found there during this mutation (see `pending.rs`).
        let mut marker_existed = false;
        let mut attempt = 0;
        while attempt < self.options.max_commit_attempts {
            let (base, just_read) = match fresh.take() {
                Some(read) => (read, true),
                None => match self.cached(dataset_id) {
                    Some(cached) if self.trusted(&cached) => (cached, false),
                    _ => (self.load_confirmed(dataset_id).await?, true),
                },
            };
            let state = &base.state;
            let attempt_ms = attempt_time();
            let (mut actions, output) = match decide(state, attempt_ms) {
                Ok(Change::Commit { actions, output }) => (actions, output),
                answer if !just_read => {
                    // Nothing to write, or a refusal: it stands if the log has not moved.
                    let read = self.load_confirmed(dataset_id).await?;
                    if read.state.version == state.version {
                        return answer.map(|change| match change {
                            Change::Unchanged(output) => output,
                            Change::Commit { .. } => unreachable!("matched above"),
                        });
                    }
                    fresh = Some(read);
                    continue;
                }
                Ok(Change::Unchanged(output)) => return Ok(output),
                Err(error) => return Err(error),
            };
            if let Some(write) = write {
                let record = write.answered(&answer(&output), attempt_ms);
                actions.push(Action::RecordWrite {
                    record: Box::new(record),
                });
            }
            // Rule 1 of the pending index: the marker before any version that adds an intent.
            if !marker_existed && adds_intent(state, &actions) {
                marker_existed =
                    self.pending.ensure(dataset_id).await? == pending::MarkerPut::Existed;
            }
            let commit = Commit::new(state.version + 1, attempt_ms, actions);
            let mut next = DatasetState::clone(state);
            next.apply(&commit)?;
            let put_at = Instant::now();
            match self.log.put_commit(dataset_id, &commit).await? {
                PutOutcome::Committed => {
                    self.committed(dataset_id, next, base.confirmed_at, put_at)
                        .await?;
                    return Ok(output);
                }
                PutOutcome::Lost => {
                    backoff(attempt).await;
                    fresh = Some(self.load_confirmed(dataset_id).await?);
                }
            }
            attempt += 1;
        }
        Err(MendError::Conflict {
            message: format!(
                "dataset {dataset_id} changed under {} consecutive commit attempts",
                self.options.max_commit_attempts
            ),
        })
    }

    /// Caches the state a commit produced and hands it to the checkpointer. A put that
    /// landed later than the state it follows may be trusted (`base_confirmed_at`, see
    /// [`Cached`]) is confirmed by a listing first: a checkpoint at or past its version means
    /// the version may have been written and pruned before, and the put re-created it behind
    /// that checkpoint, where no reader looks.
    pub(super) async fn committed(
        &self,
        dataset_id: &str,
        state: DatasetState,
        base_confirmed_at: Instant,
        put_at: Instant,
    ) -> Result<()> {
        if base_confirmed_at.elapsed() >= self.trust_window() {
            let newest = self.log.newest_checkpoint_version(dataset_id).await?;
            if newest.is_some_and(|newest| newest >= state.version) {
                self.forget(dataset_id);
                return Err(MendError::Unavailable {
                    message: format!(
                        "dataset {dataset_id}: the commit of version {} took longer than the \
                         log retention allows for, and a checkpoint at or past it exists; \
                         whether it counts is unknown: read the dataset again before retrying",
                        state.version
                    ),
                    source: None,
                });
            }
        }
        let state = Arc::new(state);
        self.remember(dataset_id, &state, put_at);
        self.checkpointer.committed(dataset_id, &state);
        Ok(())
    }
}

/// Whether committing `actions` on `state` adds an intent: writes one under an operation id
/// that `state` does not hold.
pub(super) fn adds_intent(state: &DatasetState, actions: &[Action]) -> bool {
    actions.iter().any(|action| match action {
        Action::PutIntent { intent } => !state.intents.contains_key(intent.operation_id.as_str()),
        _ => false,
    })
}

/// Spreads out writers that keep colliding: up to 1, 2, 4 ... 64 ms, with random jitter so
/// that two writers do not retry in lockstep.
pub(super) async fn backoff(attempt: u32) {
    let ceiling_us = 1_000u64 << attempt.min(6);
    let jitter_us = crate::ambient::below(ceiling_us);
    tokio::time::sleep(Duration::from_micros(jitter_us)).await;
}

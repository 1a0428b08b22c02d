//! A dataset's catalog as the log describes it at one version, and how a commit moves it on.
//!
//! Readers and writers share [`DatasetState::apply`], so the state a writer caches after its
//! own commit is exactly what any other process replays from the same file. Deciding what to
//! commit is [`super::mutations`]' job; reading and writing files is [`super::log`]'s and
//! [`super::checkpoint`]'s.
//!
//! A state keeps each split as a [`StoredSplit`]: its metadata stays the JSON text the log and
//! the checkpoints hold, and becomes a `serde_json::Value` only in a [`SplitRow`] handed out
//! (a listing, a commit's post-image). A parsed metadata object costs about ten times its
//! text; a process that only writes to a dataset of 100,000 splits held them all.

use std::borrow::Cow;
use std::ops::Bound;
use std::sync::Arc;

use imbl::OrdMap;

use mend_contract::ExistingRow;

use super::log_format::{Action, Commit, LogRow, Snapshot};
use super::splits::{Splits, StoredSplit};
use crate::catalog::RecordedRequest;
use crate::error::{MendError, Result};
use crate::intent::{Intent, check_format};
use crate::model::{
    Dataset, ListQuery, SplitPage, SplitRow, SplitState, TimestampMs, mark_seen_when_marked,
};

/// The largest log version, manifest version, config version or fencing epoch a state holds:
/// the range Postgres stores them in (`BIGINT`), so both backends read the same numbers, and
/// far enough from `u64::MAX` that the `+ 1` of the next commit cannot overflow. Only a
/// corrupt or hand-made file holds more; a state at `u64::MAX` once made the next read panic
/// (debug) or wrap to version 0 and a fencing epoch back to 0 (release).
const MAX_COUNTER: u64 = i64::MAX as u64;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DatasetState {
    /// The last log version applied.
    pub version: u64,
    pub dataset: Dataset,
    /// Persistent maps: a writer clones the state for every commit it attempts, and a clone
    /// shares everything it does not change, so a commit costs what it touches, not the size
    /// of the dataset. The splits of a state loaded from a checkpoint stay the checkpoint's
    /// bytes until a row is read ([`Splits`]).
    pub splits: Splits,
    /// Unresolved operations, by operation id. Keys and values behind an `Arc`, as in every
    /// map of a state: a commit that changes one entry copies the entries that share its node,
    /// and a copy of an `Arc` is a count, where a copy of an intent is every string it holds
    /// (a sweep's batch of 1,000 settlements copied most of 10,000 intents, rows and records
    /// that way, then freed the old ones).
    pub intents: OrdMap<Arc<str>, Arc<Intent>>,
    /// Results of keyed requests, by key.
    pub recorded: OrdMap<Arc<str>, Arc<RecordedRequest>>,
}

impl DatasetState {
    /// The state at version 0, from the commit that created dataset `dataset_id`: its
    /// `create_dataset` action, followed by the record of the creating request when that
    /// request carried an idempotency key (the record lives in the dataset it created).
    pub fn from_creation(dataset_id: &str, commit: &Commit) -> Result<Self> {
        let invalid = || {
            contradiction(
                dataset_id,
                commit.version,
                "must hold one create_dataset action for this dataset, then at most the record \
                 of the request that created it and the record of the write",
            )
        };
        let dataset = match commit.actions.as_slice() {
            [Action::CreateDataset { dataset }, ..]
                if commit.version == 0 && dataset.dataset_id == dataset_id =>
            {
                dataset
            }
            _ => return Err(invalid()),
        };
        let mut recorded = OrdMap::new();
        // The creation's write record, if any, comes last; it is not part of the state.
        let rest = match &commit.actions[1..] {
            [rest @ .., Action::RecordWrite { .. }] => rest,
            rest => rest,
        };
        match rest {
            [] => {}
            [Action::RecordRequest { record }] => {
                recorded.insert(
                    Arc::from(record.key.as_str()),
                    Arc::new(record.as_ref().clone()),
                );
            }
            _ => return Err(invalid()),
        }
        let state = Self {
            version: 0,
            dataset: dataset.clone(),
            splits: Splits::new(),
            intents: OrdMap::new(),
            recorded,
        };
        state.check_counters()?;
        Ok(state)
    }

    /// The state a format 1 checkpoint holds ([`super::checkpoint`]).
    pub fn from_snapshot(snapshot: Snapshot) -> Result<Self> {
        let splits = snapshot
            .splits
            .into_iter()
            .map(|row| (row.split_id.clone(), StoredSplit::from_row(&row)))
            .collect();
        Self::from_parts(
            snapshot.version,
            snapshot.dataset,
            splits,
            snapshot.intents,
            snapshot.recorded,
        )
    }

    /// The state a checkpoint holds; an intent in a format newer than this host's is refused,
    /// and so are counters that leave no room for the next commit.
    pub fn from_parts(
        version: u64,
        dataset: Dataset,
        splits: Splits,
        intents: Vec<Intent>,
        recorded: Vec<RecordedRequest>,
    ) -> Result<Self> {
        for intent in &intents {
            check_format(intent.format_version)?;
        }
        let state = Self {
            version,
            dataset,
            splits,
            intents: intents
                .into_iter()
                .map(|intent| (Arc::from(intent.operation_id.as_str()), Arc::new(intent)))
                .collect(),
            recorded: recorded
                .into_iter()
                .map(|record| (Arc::from(record.key.as_str()), Arc::new(record)))
                .collect(),
        };
        state.check_counters()?;
        Ok(state)
    }

    /// The row of `split_id` as a commit's post-image would carry it, unchanged.
    pub fn log_row(&self, split_id: &str) -> Result<LogRow> {
        match self.splits.get(split_id)? {
            Some(stored) => Ok(stored.to_log_row(split_id)),
            None => Err(MendError::splits_not_found(vec![split_id.to_string()])),
        }
    }

    /// The row of `split_id` marked for deletion at `now_ms`, as a commit's post-image.
    pub fn marked_row(&self, split_id: &str, now_ms: TimestampMs) -> Result<LogRow> {
        let row = self.log_row(split_id)?;
        Ok(LogRow {
            state: SplitState::MarkedForDeletion,
            updated_at_ms: now_ms,
            mark_seen_at_ms: mark_seen_when_marked(row.published_at_ms, now_ms),
            ..row
        })
    }

    /// Applies the next commit. A commit that contradicts the state is corruption, never
    /// something to paper over: an operator must look.
    pub fn apply(&mut self, commit: &Commit) -> Result<()> {
        if commit.version != self.version + 1 {
            return Err(contradiction(
                &self.dataset.dataset_id,
                commit.version,
                &format!("follows version {}", self.version),
            ));
        }
        for action in &commit.actions {
            self.apply_action(commit.version, action)?;
        }
        self.version = commit.version;
        self.check_counters()
    }

    /// Applies one action of the commit at `version`. Over 100 lines: one arm per kind of
    /// log action, each a few lines; split, the match would only move.
    fn apply_action(&mut self, version: u64, action: &Action) -> Result<()> {
        match action {
            Action::CreateDataset { .. } => {
                return Err(contradiction(
                    &self.dataset.dataset_id,
                    version,
                    "creates the dataset again",
                ));
            }
            Action::SetDataset { dataset } => {
                if dataset.dataset_id != self.dataset.dataset_id {
                    return Err(contradiction(
                        &self.dataset.dataset_id,
                        version,
                        &format!("sets dataset {}", dataset.dataset_id),
                    ));
                }
                if dataset.fencing_epoch != self.dataset.fencing_epoch {
                    // A writer that does not know epochs would write 0 here; replaying it
                    // would quietly let fenced writers publish again.
                    return Err(contradiction(
                        &self.dataset.dataset_id,
                        version,
                        &format!(
                            "sets fencing epoch {} over {} outside an advance",
                            dataset.fencing_epoch, self.dataset.fencing_epoch
                        ),
                    ));
                }
                self.dataset = dataset.clone();
            }
            Action::AdvanceFencingEpoch {
                fencing_epoch,
                manifest_version,
                updated_at_ms,
            } => {
                if *fencing_epoch != self.dataset.fencing_epoch + 1 {
                    return Err(contradiction(
                        &self.dataset.dataset_id,
                        version,
                        &format!(
                            "advances the fencing epoch from {} to {fencing_epoch}",
                            self.dataset.fencing_epoch
                        ),
                    ));
                }
                self.dataset.fencing_epoch = *fencing_epoch;
                self.dataset.manifest_version = *manifest_version;
                self.dataset.updated_at_ms = *updated_at_ms;
            }
            Action::PutSplits { rows } => {
                for row in rows {
                    self.splits
                        .insert(row.split_id.clone(), StoredSplit::from_log_row(row));
                }
            }
            Action::PutIntent { intent } => {
                check_format(intent.format_version)?;
                self.intents.insert(
                    Arc::from(intent.operation_id.as_str()),
                    Arc::new(intent.as_ref().clone()),
                );
            }
            Action::DeleteIntent { operation_id } => {
                if self.intents.remove(operation_id.as_str()).is_none() {
                    return Err(contradiction(
                        &self.dataset.dataset_id,
                        version,
                        &format!("deletes intent {operation_id}, which does not exist"),
                    ));
                }
            }
            Action::RecordRequest { record } => {
                if self.recorded.contains_key(record.key.as_str()) {
                    return Err(contradiction(
                        &self.dataset.dataset_id,
                        version,
                        &format!("records request {} a second time", record.key),
                    ));
                }
                self.recorded.insert(
                    Arc::from(record.key.as_str()),
                    Arc::new(record.as_ref().clone()),
                );
            }
            // The record of the write is the trail's, not the state's.
            Action::RecordWrite { .. } => {}
            Action::ForgetRequests { keys } => {
                for key in keys {
                    self.recorded.remove(key.as_str());
                }
            }
            Action::DeleteSplits { split_ids } => {
                for split_id in split_ids {
                    if !self.splits.remove(split_id) {
                        return Err(contradiction(
                            &self.dataset.dataset_id,
                            version,
                            &format!("deletes split {split_id}, which does not exist"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Refuses a state whose counters leave no room for the next commit (see [`MAX_COUNTER`]).
    fn check_counters(&self) -> Result<()> {
        let counters = [
            ("log version", self.version),
            ("manifest version", self.dataset.manifest_version),
            ("config version", self.dataset.config_version),
            ("fencing epoch", self.dataset.fencing_epoch),
        ];
        match counters.iter().find(|(_, value)| *value > MAX_COUNTER) {
            Some((name, value)) => Err(contradiction(
                &self.dataset.dataset_id,
                self.version,
                &format!("holds {name} {value}, past the largest a catalog holds ({MAX_COUNTER})"),
            )),
            None => Ok(()),
        }
    }

    /// The rows among `split_ids` that exist, in the order of `split_ids`.
    pub fn existing_rows(&self, split_ids: &[String]) -> Result<Vec<ExistingRow>> {
        let mut rows = Vec::new();
        for split_id in split_ids {
            if let Some(stored) = self.splits.get(split_id)? {
                rows.push(ExistingRow {
                    split_id: split_id.clone(),
                    state: stored.state,
                });
            }
        }
        Ok(rows)
    }

    /// The state of the row of `split_id`, if there is one.
    pub fn split_state(&self, split_id: &str) -> Result<Option<SplitState>> {
        Ok(self.splits.get(split_id)?.map(|stored| stored.state))
    }

    pub fn list_splits(&self, query: &ListQuery) -> Result<SplitPage> {
        // Asked for by id (as recovery asks, once per intent), a listing looks the ids up
        // rather than scanning the dataset, so its cost follows the ids, not the dataset; a
        // page after a cursor starts at the cursor.
        type Candidate<'a> = Result<(Cow<'a, str>, Cow<'a, StoredSplit>)>;
        let candidates: Box<dyn Iterator<Item = Candidate<'_>>> =
            match (&query.split_ids, &query.after_split_id) {
                (Some(ids), _) => {
                    let ids: std::collections::BTreeSet<&String> = ids.iter().collect();
                    let found = ids.into_iter().filter_map(|id| match self.splits.get(id) {
                        Ok(Some(stored)) => Some(Ok((Cow::Borrowed(id.as_str()), stored))),
                        Ok(None) => None,
                        Err(error) => Some(Err(error)),
                    });
                    Box::new(found)
                }
                (None, Some(after)) => Box::new(self.splits.range(Bound::Excluded(after.as_str()))),
                (None, None) => Box::new(self.splits.range(Bound::Unbounded)),
            };
        let limit = query.limit.unwrap_or(usize::MAX);
        let mut splits = Vec::new();
        let mut next_after_split_id = None;
        for candidate in candidates {
            let (split_id, stored) = candidate?;
            if !query.matches_fields(
                &split_id,
                stored.state,
                stored.time_range,
                stored.updated_at_ms,
            ) {
                continue;
            }
            if splits.len() == limit {
                next_after_split_id = splits.last().map(|row: &SplitRow| row.split_id.clone());
                break;
            }
            splits.push(stored.to_row(&self.dataset.dataset_id, &split_id)?);
        }
        Ok(SplitPage {
            splits,
            next_after_split_id,
        })
    }
}

fn contradiction(dataset_id: &str, version: u64, what: &str) -> MendError {
    MendError::Corrupt {
        message: format!("dataset {dataset_id}: catalog log version {version} {what}"),
    }
}

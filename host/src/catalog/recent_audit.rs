//! The newest audit records of a whole catalog ([`Catalog::list_recent_audit`]): what a policy
//! swap replays, so that a swap's replay costs in proportion to the records it replays, not to
//! the datasets the catalog holds.
//!
//! What each backend reads for one `list_recent_audit(n)`:
//!
//! | backend | index | one call |
//! |---|---|---|
//! | Postgres | the `audit` table's index on `(recorded_at_ms, seq)` | one query: the newest rows' times and counts (at most n of them), and the bodies of those that can hold the newest n records |
//! | object storage | one empty entry per append under `index/audit/`, named newest first (`object_store/audit_index.rs`) | a GET of the index's start, one listing read only as far as needed (on a store that lists in order), a GET per audit object that can hold the newest n; the default for a catalog whose index cannot answer (written before it existed) |
//! | the trait's default | none | a listing of the datasets, then each one's newest n records, 8 datasets at a time |
//!
//! # Which appends can hold the newest n records
//!
//! An append (a Postgres row, an audit object) holds one or more records, and its index entry
//! says its newest record's time, its oldest one's and how many it holds. Walked newest first
//! (by newest record, then the latest append first), the appends that can hold the newest n
//! records are a prefix of the walk (`NewestFirst`):
//!
//! - at most the first n appends: each of them holds a record at least as new as any record of
//!   a later append (at its own newest time, or the same time in a later append), so a record
//!   of the (n+1)th append or later is beaten by n records;
//! - and once the appends walked hold n records, say from the one where the count reached n
//!   back to the newest, none older than the oldest record among them (`bound`): the newest n
//!   are all at least that new, so an append whose newest record is older holds none of them.
//!
//! The second rule stops a walk of appends of 1,000 records after a few; the first bounds a
//! walk through appends whose times overlap. The appends chosen are then read and their
//! records sorted, and the newest n kept.

use futures::StreamExt;

use super::Catalog;
use crate::audit::AuditRecord;
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

/// The newest records of a catalog, with the datasets whose records could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecentAudit {
    /// The newest records, oldest first.
    pub records: Vec<AuditRecord>,
    /// Datasets with records that could not be read (a newer mend's format, a damaged body),
    /// with the reason, sorted by dataset id: what could not be read is left out, so fewer
    /// records than asked for may come back.
    pub unreadable: Vec<(String, String)>,
}

/// How many datasets' trails the default reads at once: with thousands of datasets, one after
/// another would take thousands of round trips.
const READS_AT_ONCE: usize = 8;

/// The trait's default, O(datasets): each dataset's newest `limit` records, 8 datasets at a
/// time, merged. Records of one millisecond in two datasets list in the datasets' id order. A
/// dataset that is gone by the time it is read is left out; one whose trail cannot be read
/// (`Corrupt`) is named in [`RecentAudit::unreadable`] and its whole trail left out. Keeps at
/// most three times `limit` records at a time, however many datasets there are.
pub async fn every_dataset<C: Catalog + ?Sized>(catalog: &C, limit: usize) -> Result<RecentAudit> {
    let mut recent = RecentAudit::default();
    if limit == 0 {
        return Ok(recent);
    }
    let dataset_ids = catalog.list_dataset_ids().await?;
    let mut trails = futures::stream::iter(dataset_ids)
        .map(|dataset_id| async move {
            let found = catalog.list_audit(&dataset_id, Some(limit)).await;
            (dataset_id, found)
        })
        .buffered(READS_AT_ONCE);
    while let Some((dataset_id, found)) = trails.next().await {
        match found {
            Ok(records) => recent.records.extend(records),
            Err(MendError::NotFound { .. }) => {}
            Err(MendError::Corrupt { message }) => recent.unreadable.push((dataset_id, message)),
            Err(error) => return Err(error),
        }
        if recent.records.len() > limit.saturating_mul(2) {
            keep_newest_by_time(&mut recent.records, limit);
        }
    }
    keep_newest_by_time(&mut recent.records, limit);
    Ok(recent)
}

/// Sorts `records` by recorded time, keeping the order they are in among records of one
/// millisecond (a stable sort), and drops all but the newest `limit`.
fn keep_newest_by_time(records: &mut Vec<AuditRecord>, limit: usize) {
    records.sort_by_key(|record| record.recorded_at_ms);
    records.drain(..records.len().saturating_sub(limit));
}

/// `found` sorted by where each record sorts (recorded time, then the backend's append order
/// and place in its append), all but the newest `limit` dropped, oldest first.
pub(crate) fn newest<K: Ord>(mut found: Vec<(K, AuditRecord)>, limit: usize) -> Vec<AuditRecord> {
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found.drain(..found.len().saturating_sub(limit));
    found.into_iter().map(|(_, record)| record).collect()
}

/// What an index says of one append, without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AppendSpan {
    /// Its newest record's time.
    pub newest_ms: TimestampMs,
    /// Its oldest record's time.
    pub oldest_ms: TimestampMs,
    /// How many records it holds (at least 1).
    pub records: usize,
}

/// The walk of the module doc: offered the appends newest first, it takes those that can hold
/// the newest `limit` records and refuses the first that cannot, after which it refuses every
/// later one (unless one it took turns out [`missing`](Self::missing)).
#[derive(Debug)]
pub(crate) struct NewestFirst {
    limit: usize,
    /// Appends taken and not missing.
    taken: usize,
    /// Records they hold, by their index entries.
    records: usize,
    /// The oldest record time among every append taken.
    oldest_ms: TimestampMs,
    /// Once the appends taken hold `limit` records: no append whose newest record is older
    /// than this holds any of the newest `limit`.
    bound: Option<TimestampMs>,
}

impl NewestFirst {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            taken: 0,
            records: 0,
            oldest_ms: TimestampMs::MAX,
            bound: None,
        }
    }

    /// Whether `append`, the next one newest first, can hold one of the newest `limit`
    /// records; if so it is taken.
    pub fn takes(&mut self, append: &AppendSpan) -> bool {
        if self.taken >= self.limit || self.bound.is_some_and(|bound| append.newest_ms < bound) {
            return false;
        }
        self.taken += 1;
        self.records = self.records.saturating_add(append.records);
        self.oldest_ms = self.oldest_ms.min(append.oldest_ms);
        if self.bound.is_none() && self.records >= self.limit {
            self.bound = Some(self.oldest_ms);
        }
        true
    }

    /// An append taken holds nothing after all (its index entry was written, its object never
    /// was): the walk goes on as if it had not been taken, so that the records it was counted
    /// for are looked for further back. The bound, when it is set again, stays as old as any
    /// append taken: a looser bound takes more appends, never misses one.
    pub fn missing(&mut self, append: &AppendSpan) {
        self.taken -= 1;
        self.records -= append.records;
        if self.records < self.limit {
            self.bound = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(newest_ms: TimestampMs, oldest_ms: TimestampMs, records: usize) -> AppendSpan {
        AppendSpan {
            newest_ms,
            oldest_ms,
            records,
        }
    }

    /// The appends `walk` takes of `appends`, offered newest first until the first refusal.
    fn taken(walk: &mut NewestFirst, appends: &[AppendSpan]) -> usize {
        appends
            .iter()
            .take_while(|append| walk.takes(append))
            .count()
    }

    #[test]
    fn a_walk_stops_once_older_appends_cannot_hold_the_newest() {
        // Batches of 1,000 records a second apart: 3 hold the newest 2,500.
        let batches: Vec<AppendSpan> = (0..10)
            .map(|i| span(10_000 - i * 1_000, 10_000 - i * 1_000 - 10, 1_000))
            .collect();
        assert_eq!(taken(&mut NewestFirst::new(2_500), &batches), 3);
        assert_eq!(taken(&mut NewestFirst::new(1_000), &batches), 1);
        // Once the first append's 5 records reach the bound (90): an append overlapping it in
        // time is taken, one whose newest record is at it too (a record of that millisecond
        // may be among the newest), and the first entirely older one is not.
        let overlapping = [
            span(100, 90, 5),
            span(95, 95, 1),
            span(90, 85, 1),
            span(89, 80, 1),
            span(70, 70, 1),
        ];
        assert_eq!(taken(&mut NewestFirst::new(5), &overlapping), 3);
        assert_eq!(taken(&mut NewestFirst::new(0), &overlapping), 0);
        assert_eq!(taken(&mut NewestFirst::new(100), &overlapping), 5);
    }

    #[test]
    fn a_walk_takes_at_most_limit_appends_whatever_their_times() {
        // One append spanning all of time makes the bound useless: the first `limit` appends
        // still hold the newest `limit` records.
        let mut appends = vec![span(1_000, 0, 5)];
        appends.extend((0..10).map(|i| span(999 - i, 999 - i, 1)));
        assert_eq!(taken(&mut NewestFirst::new(3), &appends), 3);
    }

    #[test]
    fn a_missing_append_makes_the_walk_look_further_back() {
        let appends = [span(30, 30, 2), span(20, 20, 2), span(10, 10, 2)];
        let mut walk = NewestFirst::new(2);
        assert!(walk.takes(&appends[0]));
        assert!(!walk.takes(&appends[1]));
        walk.missing(&appends[0]);
        assert!(walk.takes(&appends[1]));
        assert!(!walk.takes(&appends[2]));
    }
}

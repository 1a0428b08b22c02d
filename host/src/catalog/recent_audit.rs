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
//! records are a prefix of the walk:
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

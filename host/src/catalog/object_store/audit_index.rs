//! The catalog-wide index of audit objects: one empty entry per object, named so that a
//! listing gives the newest first, so that the newest records of the whole catalog
//! ([`Catalog::list_recent_audit`], what a policy swap replays) are found without listing every
//! dataset.
//!
//! ```text
//! index/audit/{inverted newest:020}-{inverted append id}-{oldest:020}-{records}-{dataset_id}
//!     empty: the name says which audit object it stands for,
//!     datasets/{dataset_id}/audit/{newest:020}-{append id}.json, and what that holds
//! index/audit-start
//!     {"format_version": 1, "indexed_after_ms": T}: every record recorded after T has an
//!     entry; T is null when every record of the catalog has one
//! ```
//!
//! `inverted newest` is `i64::MAX` minus the object's newest record time, and `inverted append
//! id` the append id with each hex digit `d` written `f - d`, so that names sort newest first,
//! the later of two appends of one millisecond first. `oldest` and `records` (its oldest record
//! time and how many it holds) let a reader choose the objects that can hold the newest `n`
//! records from the names alone ([`NewestFirst`]). Times before 1970 are written as 1970, as
//! the objects' own names write them. The dataset id is the rest of the name, percent-encoded
//! as under `datasets/`.
//!
//! # Writing
//!
//! 1. **The start**, once per catalog instance, before its first entry: put-if-absent, so the
//!    first writer's stays. A catalog created by this mend gets it with its first dataset, with
//!    T null: nothing was appended before. A catalog created by an older mend gets it with the
//!    first append of this one (or the first dataset creation this one attempts there), T the
//!    newest time that append names (or the creation's time): everything older may have no
//!    entry.
//! 2. **Each audit object's entry, before the object** (put-if-absent; the object's append id
//!    makes the name unique, so "already exists" is this put's own retry). A crash between the
//!    two leaves an entry for an object never written: a reader finds nothing there and looks
//!    further back, one GET wasted. The other order would leave, after the same crash, an
//!    object no entry names: a record the catalog-wide listing never sees. The entry first means
//!    every audit object written has an entry.
//!
//! # Reading the newest `n`
//!
//! One GET of the start (once per instance: it never changes), then one listing of
//! `index/audit/`. On a store that lists in order (S3 and the stores compatible with it, GCS,
//! Azure, memory: [`ObjectStoreCatalogOptions::store_lists_in_order`]), the listing is read only
//! as far as the walk takes entries, a page of 1,000 names at a time on S3; on one that does not
//! (a local directory), it is read whole and sorted. The objects the walk takes are read 8 at a
//! time, their records sorted by recorded time, then append id, then place in the object, and
//! the newest `n` kept. An object that cannot be read (damaged, a newer mend's) is left out and
//! its dataset named in [`RecentAudit::unreadable`]; the walk then looks further back, as for an
//! object never written.
//!
//! The index can answer only when no record it lacks can be among the newest `n`: when T is
//! null, or the `n`th newest record found is newer than T. Otherwise (and without a start: a
//! catalog no mend with the index has written to), the answer is the trait's default, every
//! dataset's trail read ([`recent_audit::every_dataset`]): a catalog created by an older mend
//! is read so until `n` records have been appended since the upgrade.
//!
//! # What it leaves out
//!
//! A mend from before the index appends audit objects without entries. While such a process
//! still runs beside newer ones (a rolling upgrade), its records after T are in its datasets'
//! trails ([`Catalog::list_audit`]) but not in the index, and a swap's replay does not see
//! them. Entries are never deleted: the index grows by one empty object per append, as the
//! trails themselves grow; a store that does not list in order reads all of them once per call.
//!
//! [`Catalog::list_recent_audit`]: crate::catalog::Catalog::list_recent_audit
//! [`Catalog::list_audit`]: crate::catalog::Catalog::list_audit
//! [`ObjectStoreCatalogOptions::store_lists_in_order`]: super::ObjectStoreCatalogOptions::store_lists_in_order
//! [`recent_audit::every_dataset`]: crate::catalog::recent_audit::every_dataset

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::stream::{self, BoxStream, Peekable};
use futures::{StreamExt, TryStreamExt};
use object_store::path::{Path, PathPart};
use object_store::{ObjectMeta, ObjectStore, PutMode, PutPayload};
use serde::{Deserialize, Serialize};

use super::ObjectStoreCatalog;
use super::log::decode_path_part;
use crate::audit::{AuditRecord, decode_batch};
use crate::catalog::recent_audit::{AppendSpan, NewestFirst, RecentAudit, newest};
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

/// The format of the start object.
const START_FORMAT: u32 = 1;

/// Audit objects read at once while walking the index.
const READS_AT_ONCE: usize = 8;

/// What the start object says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct IndexStart {
    format_version: u32,
    /// Every record recorded after this has an entry; `None`: every record has one.
    indexed_after_ms: Option<TimestampMs>,
}

/// One entry: which audit object, and what its name says that object holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct IndexEntry {
    pub dataset_id: String,
    pub append_id: String,
    pub span: AppendSpan,
}

impl IndexEntry {
    /// The entry of an object holding `records` (at least one), written by append `append_id`.
    pub fn of(dataset_id: &str, append_id: &str, records: &[AuditRecord]) -> Self {
        let times = || {
            records
                .iter()
                .map(|record| written_time(record.recorded_at_ms))
        };
        Self {
            dataset_id: dataset_id.to_string(),
            append_id: append_id.to_string(),
            span: AppendSpan {
                newest_ms: times().max().unwrap_or_default(),
                oldest_ms: times().min().unwrap_or_default(),
                records: records.len(),
            },
        }
    }

    /// The entry's name under `index/audit/`.
    fn name(&self) -> String {
        format!(
            "{:020}-{}-{:020}-{}-{}",
            TimestampMs::MAX - self.span.newest_ms,
            invert_hex(&self.append_id),
            self.span.oldest_ms,
            self.span.records,
            self.dataset_id
        )
    }

    /// The entry a name under `index/audit/` stands for; `None` for a name this catalog does
    /// not write.
    pub(super) fn parse(name: &str) -> Option<Self> {
        let mut parts = decode_path_part(name)?
            .splitn(5, '-')
            .map(str::to_string)
            .collect::<Vec<_>>()
            .into_iter();
        let inverted_newest: TimestampMs = parts.next()?.parse().ok()?;
        let append_id = invert_hex(&parts.next()?);
        let oldest_ms: TimestampMs = parts.next()?.parse().ok()?;
        let records: usize = parts.next()?.parse().ok()?;
        let dataset_id = parts.next()?;
        let newest_ms = TimestampMs::MAX.checked_sub(inverted_newest)?;
        let well_formed = inverted_newest >= 0
            && append_id.len() == 32
            && append_id.bytes().all(|byte| byte.is_ascii_hexdigit())
            && (0..=newest_ms).contains(&oldest_ms)
            && records >= 1
            && !dataset_id.is_empty();
        well_formed.then_some(Self {
            dataset_id,
            append_id,
            span: AppendSpan {
                newest_ms,
                oldest_ms,
                records,
            },
        })
    }
}

/// A record time as names write it: times before 1970 as 1970.
pub(super) fn written_time(recorded_at_ms: TimestampMs) -> TimestampMs {
    recorded_at_ms.max(0)
}

/// `hex` with each digit `d` written `f - d`: undoes itself, and sorts the other way round.
fn invert_hex(hex: &str) -> String {
    hex.chars()
        .map(|digit| match digit.to_digit(16) {
            Some(value) => char::from_digit(15 - value, 16).unwrap_or(digit),
            None => digit,
        })
        .collect()
}

/// The index under one catalog's prefix, and what this instance knows of its start.
#[derive(Debug)]
pub(super) struct AuditIndex {
    store: Arc<dyn ObjectStore>,
    datasets_dir: Path,
    dir: Path,
    start_path: Path,
    /// The start is known to be written: entries may be put.
    started: AtomicBool,
    /// The start as read: it never changes once written. A std mutex: held to copy it, never
    /// across an await.
    start: Mutex<Option<IndexStart>>,
}

impl AuditIndex {
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &Path) -> Self {
        let index = prefix.child("index");
        Self {
            store,
            datasets_dir: prefix.child("datasets"),
            dir: index.child("audit"),
            start_path: index.child("audit-start"),
            started: AtomicBool::new(false),
            start: Mutex::new(None),
        }
    }

    /// Rule 1 before a dataset is created at `now_ms`: T null if the catalog has no dataset
    /// yet, else `now_ms`.
    pub async fn start_before_creating(&self, now_ms: TimestampMs) -> Result<()> {
        if self.started.load(Ordering::Acquire) || self.read_start().await?.is_some() {
            return self.mark_started();
        }
        let mut datasets = self.store.list(Some(&self.datasets_dir));
        let empty = match datasets.next().await {
            None => true,
            Some(Ok(_)) => false,
            Some(Err(error)) => {
                return Err(MendError::unavailable(
                    format!(
                        "listing {} failed; nothing was written: retry",
                        self.datasets_dir
                    ),
                    error,
                ));
            }
        };
        self.put_start((!empty).then_some(now_ms)).await
    }

    /// Rule 1 before an append whose records' newest time is `newest_ms`.
    pub async fn start_before_appending(&self, newest_ms: TimestampMs) -> Result<()> {
        if self.started.load(Ordering::Acquire) || self.read_start().await?.is_some() {
            return self.mark_started();
        }
        self.put_start(Some(newest_ms)).await
    }

    fn mark_started(&self) -> Result<()> {
        self.started.store(true, Ordering::Release);
        Ok(())
    }

    async fn put_start(&self, indexed_after_ms: Option<TimestampMs>) -> Result<()> {
        let start = IndexStart {
            format_version: START_FORMAT,
            indexed_after_ms,
        };
        let body = serde_json::to_vec(&start).expect("the start is plain data and serialises");
        self.put_if_absent(&self.start_path, body).await?;
        self.mark_started()
    }

    /// Rule 2: the entry of an object about to be written.
    pub async fn put_entry(&self, entry: &IndexEntry) -> Result<()> {
        let path = self.dir.child(PathPart::from(entry.name().as_str()));
        self.put_if_absent(&path, Vec::new()).await
    }

    /// Puts `body` at `path` unless something is there; something there counts as written
    /// (a start another writer put, or this put's own retry).
    async fn put_if_absent(&self, path: &Path, body: Vec<u8>) -> Result<()> {
        match self
            .store
            .put_opts(path, PutPayload::from(body), PutMode::Create.into())
            .await
        {
            Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
            Err(error) => Err(MendError::unavailable(
                format!("writing {path} failed; the audit records were not appended: retry"),
                error,
            )),
        }
    }

    /// The start, if one was written (one GET until it is found; none after).
    pub async fn read_start(&self) -> Result<Option<IndexStart>> {
        if let Some(start) = *self.start.lock().unwrap_or_else(PoisonError::into_inner) {
            return Ok(Some(start));
        }
        let path = &self.start_path;
        let found = match self.store.get(path).await {
            Ok(found) => found,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(MendError::unavailable(format!("reading {path}"), error)),
        };
        let bytes = found
            .bytes()
            .await
            .map_err(|error| MendError::unavailable(format!("reading {path}"), error))?;
        let start: IndexStart =
            serde_json::from_slice(&bytes).map_err(|error| MendError::Corrupt {
                message: format!("the audit index's start {path} is unreadable: {error}"),
            })?;
        if start.format_version != START_FORMAT {
            return Err(MendError::Corrupt {
                message: format!(
                    "the audit index's start {path} has format version {}, but this mend reads only version {START_FORMAT}: a newer mend wrote it; upgrade",
                    start.format_version
                ),
            });
        }
        *self.start.lock().unwrap_or_else(PoisonError::into_inner) = Some(start);
        Ok(Some(start))
    }

    /// The index's entries, newest first: as the store lists them if it lists in order,
    /// otherwise the whole listing, sorted.
    async fn entries(&self, in_order: bool) -> Result<BoxStream<'static, Result<ObjectMeta>>> {
        let unavailable =
            |dir: &Path, error| MendError::unavailable(format!("listing {dir}"), error);
        if in_order {
            let dir = self.dir.clone();
            return Ok(self
                .store
                .list(Some(&self.dir))
                .map_err(move |error| unavailable(&dir, error))
                .boxed());
        }
        let mut all: Vec<ObjectMeta> = self
            .store
            .list(Some(&self.dir))
            .try_collect()
            .await
            .map_err(|error| unavailable(&self.dir, error))?;
        all.sort_by(|a, b| a.location.cmp(&b.location));
        Ok(stream::iter(all.into_iter().map(Ok)).boxed())
    }
}

/// Where a record sorts: recorded time, then append id, then place in its object.
type Order = (TimestampMs, String, usize);

/// The records of the object an entry stands for, each with where it sorts; `None` if the
/// object was never written.
type Indexed = Option<Vec<(Order, AuditRecord)>>;

impl ObjectStoreCatalog {
    /// The newest `limit` records from the index (module doc), or `None` where the index
    /// cannot answer: no start, or records it may lack among the newest.
    pub(super) async fn recent_from_index(&self, limit: usize) -> Result<Option<RecentAudit>> {
        let index = &self.audit_index;
        let Some(start) = index.read_start().await? else {
            return Ok(None);
        };
        let mut entries = Box::pin(
            index
                .entries(self.options.store_lists_in_order)
                .await?
                .peekable(),
        );
        let mut walk = NewestFirst::new(limit);
        let mut found: Vec<(Order, AuditRecord)> = Vec::new();
        let mut unreadable: Vec<(String, String)> = Vec::new();
        loop {
            let chunk = next_taken(&mut entries, &mut walk).await?;
            if chunk.is_empty() {
                break;
            }
            let read: Vec<(IndexEntry, Result<Indexed>)> = stream::iter(chunk)
                .map(|entry| async move {
                    let records = self.read_indexed(&entry).await;
                    (entry, records)
                })
                .buffered(READS_AT_ONCE)
                .collect()
                .await;
            for (entry, records) in read {
                match records {
                    Ok(Some(records)) => found.extend(records),
                    Ok(None) => walk.missing(&entry.span),
                    Err(MendError::Corrupt { message }) => {
                        walk.missing(&entry.span);
                        if !unreadable
                            .iter()
                            .any(|(named, _)| *named == entry.dataset_id)
                        {
                            unreadable.push((entry.dataset_id, message));
                        }
                    }
                    Err(error) => return Err(error),
                }
            }
        }
        let records = newest(found, limit);
        let complete = match start.indexed_after_ms {
            None => true,
            Some(after_ms) => {
                records.len() >= limit
                    && records.first().is_some_and(|r| r.recorded_at_ms > after_ms)
            }
        };
        unreadable.sort();
        Ok(complete.then_some(RecentAudit {
            records,
            unreadable,
        }))
    }

    /// The records of the object `entry` stands for, each with where it sorts; `None` if the
    /// object was never written. `Corrupt` if it cannot be read or holds other than its entry
    /// says.
    async fn read_indexed(&self, entry: &IndexEntry) -> Result<Indexed> {
        let path =
            self.audit_object_path(&entry.dataset_id, entry.span.newest_ms, &entry.append_id);
        let unavailable = |error| MendError::unavailable(format!("read {path}"), error);
        let bytes = match self.store().get(&path).await {
            Ok(found) => found.bytes().await.map_err(unavailable)?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(unavailable(error)),
        };
        let records = decode_batch(&bytes, &format!("audit object {path}"))?;
        let span = &entry.span;
        let misplaced = records.iter().any(|record| {
            let time = written_time(record.recorded_at_ms);
            record.dataset_id != entry.dataset_id || time > span.newest_ms || time < span.oldest_ms
        });
        if misplaced || records.len() != span.records {
            return Err(MendError::Corrupt {
                message: format!(
                    "audit object {path} does not hold what its index entry says: {} records of dataset {} recorded from {} to {}",
                    span.records, entry.dataset_id, span.oldest_ms, span.newest_ms
                ),
            });
        }
        Ok(Some(
            records
                .into_iter()
                .enumerate()
                .map(|(index, record)| {
                    (
                        (record.recorded_at_ms, entry.append_id.clone(), index),
                        record,
                    )
                })
                .collect(),
        ))
    }
}

/// The next entries `walk` takes, up to [`READS_AT_ONCE`]; none once it refuses one or the
/// listing ends. A refused entry stays first in `entries`, to be offered again if a taken one
/// turns out missing. Names this catalog does not write are skipped.
async fn next_taken(
    entries: &mut Pin<Box<Peekable<BoxStream<'static, Result<ObjectMeta>>>>>,
    walk: &mut NewestFirst,
) -> Result<Vec<IndexEntry>> {
    let mut taken = Vec::new();
    while taken.len() < READS_AT_ONCE {
        let entry = match entries.as_mut().peek().await {
            None => break,
            Some(Err(_)) => {
                let Some(Err(error)) = entries.next().await else {
                    unreachable!("peeked an error")
                };
                return Err(error);
            }
            Some(Ok(meta)) => meta.location.filename().and_then(IndexEntry::parse),
        };
        if let Some(entry) = entry {
            if !walk.takes(&entry.span) {
                break;
            }
            taken.push(entry);
        }
        entries.next().await;
    }
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_round_trip_and_sort_newest_first() {
        let entry = |newest_ms, append_id: &str, dataset_id: &str| IndexEntry {
            dataset_id: dataset_id.to_string(),
            append_id: append_id.to_string(),
            span: AppendSpan {
                newest_ms,
                oldest_ms: newest_ms - 5,
                records: 3,
            },
        };
        let earlier_append = "0190a1b2c3d4e5f60718293a4b5c6d7e";
        let later_append = "0190a1b2c3d4e5f60718293a4b5c6d7f";
        let older = entry(1_000, later_append, "logs-2024");
        let newer = entry(2_000, earlier_append, "a/b%c-d");
        let same_ms_later = entry(2_000, later_append, "logs-2024");
        for entry in [&older, &newer, &same_ms_later] {
            let name = entry.name();
            let part = PathPart::from(name.as_str());
            assert_eq!(IndexEntry::parse(part.as_ref()).as_ref(), Some(entry));
        }
        let mut names: Vec<(String, &str)> = [
            (&older, "older"),
            (&newer, "newer"),
            (&same_ms_later, "later"),
        ]
        .into_iter()
        .map(|(entry, label)| {
            (
                PathPart::from(entry.name().as_str()).as_ref().to_string(),
                label,
            )
        })
        .collect();
        names.sort();
        let order: Vec<&str> = names.iter().map(|(_, label)| *label).collect();
        assert_eq!(order, ["later", "newer", "older"]);
    }

    #[test]
    fn names_this_catalog_does_not_write_are_not_entries() {
        for name in [
            "",
            "notes.txt",
            "00000000000000000001-xyz-00000000000000000000-1-logs",
            "09223372036854774807-fe6f5e4d3c2b1a09f8e7d6c5b4a39281-00000000000000001001-1-logs",
            "09223372036854774807-fe6f5e4d3c2b1a09f8e7d6c5b4a39281-00000000000000001000-0-logs",
            "09223372036854774807-fe6f5e4d3c2b1a09f8e7d6c5b4a39281-00000000000000001000-1-",
        ] {
            assert_eq!(IndexEntry::parse(name), None, "{name:?}");
        }
        assert!(
            IndexEntry::parse(
                "09223372036854774807-fe6f5e4d3c2b1a09f8e7d6c5b4a39281-00000000000000001000-1-logs"
            )
            .is_some()
        );
    }
}

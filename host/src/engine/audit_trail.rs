//! Reading a dataset's audit trail: who did what, and when ([`Engine::audit_page`]).
//!
//! The trail is two kinds of record, merged by time: the policy's decisions
//! ([`crate::audit`]) and the writes requests made ([`crate::catalog::write_audit`]), kept
//! apart in the catalog so that a policy swap's replay reads decisions only. In one
//! millisecond, decisions list before writes.
//!
//! A page is the newest `limit` records that pass the filters (principal, kind, since), older
//! than a cursor when one is given: the filters apply before the limit, so a principal with
//! 8 records among 10,000 of another's gets its 8. The records are read newest first, in
//! growing reads, until the page is full, the trail (or the `since` time) ends, or
//! [`MAX_AUDIT_SCAN`] records were read for this page; in that last case the page may hold
//! fewer than `limit` records, and its cursor says where to go on.
//!
//! A cursor names a place in the trail: a recorded time, and how many records of that very
//! millisecond (counted from the newest) lie at or after it. The records older than it never
//! move, so paging back is stable; a record appended later in the cursor's own millisecond
//! can make the next page repeat one record, never skip one.

use std::fmt;
use std::str::FromStr;

use super::Engine;
use crate::audit::AuditEntry;
use crate::bounds;
use crate::error::{MendError, Result};
use crate::model::TimestampMs;
use crate::validate;

/// The most records one page's request reads from the catalog.
pub const MAX_AUDIT_SCAN: usize = 100_000;
/// The longest principal or kind a filter names (a principal name is at most 64 bytes, a
/// replica's `supervisor@REPLICA` longer).
const MAX_FILTER_BYTES: usize = 256;

/// What a page of the audit trail holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only the records naming this principal.
    pub principal: Option<String>,
    /// Only the records of this kind (what was run: `roll-forward`, `exclusive`, `gc`,
    /// `reconcile`, ...).
    pub kind: Option<String>,
    /// Only the records at or after this time.
    pub since_ms: Option<TimestampMs>,
    /// Only the records older than this place (the `next` of the page before).
    pub before: Option<AuditCursor>,
    /// The most records of the page, range-checked ([`bounds::AUDIT_LIMIT`]).
    pub limit: usize,
}

/// A place in a dataset's audit trail (see the module doc); written `MS.SKIP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditCursor {
    /// The recorded time of the place.
    pub recorded_at_ms: TimestampMs,
    /// Records of that millisecond, counted from the newest, at or after the place.
    pub skip: usize,
}

impl fmt::Display for AuditCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.recorded_at_ms, self.skip)
    }
}

impl FromStr for AuditCursor {
    type Err = MendError;

    fn from_str(text: &str) -> Result<Self> {
        let refused = || {
            MendError::invalid(format!(
                "audit cursor {:?} is not one a page gave (MS.SKIP: two whole numbers)",
                validate::truncated(text, 64)
            ))
        };
        let (ms, skip) = text.split_once('.').ok_or_else(refused)?;
        let recorded_at_ms = ms.parse::<TimestampMs>().map_err(|_| refused())?;
        let skip = skip.parse::<usize>().map_err(|_| refused())?;
        if recorded_at_ms < 0 || skip > MAX_AUDIT_SCAN {
            return Err(refused());
        }
        Ok(Self {
            recorded_at_ms,
            skip,
        })
    }
}

/// A page of the audit trail: its records oldest first, and where the next (older) page
/// starts: `None` when the trail (or `since`) ended within this page. A full page always
/// gives its place, so the page after it may be empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPage {
    /// The records, oldest first.
    pub entries: Vec<AuditEntry>,
    /// Where the next, older page starts; `None` when no older record passes the filters
    /// (a full page gives its place even then).
    pub next: Option<AuditCursor>,
}

impl AuditQuery {
    fn passes(&self, entry: &AuditEntry) -> bool {
        self.principal
            .as_deref()
            .is_none_or(|name| entry.principal.as_deref() == Some(name))
            && self.kind.as_deref().is_none_or(|kind| entry.mode == kind)
    }
}

/// The newest `read` records of the dataset's decisions and writes, each kind read up to
/// `read`, merged oldest first by time (decisions first within a millisecond), and whether
/// that is the whole of both.
async fn newest_entries(
    engine: &Engine,
    dataset_id: &str,
    read: usize,
) -> Result<(Vec<AuditEntry>, bool)> {
    let decisions = engine.catalog.list_audit(dataset_id, Some(read)).await?;
    let writes = engine
        .catalog
        .list_write_audit(dataset_id, Some(read))
        .await?;
    // Where a kind read in part was cut: older records of it were not read, so nothing older
    // is kept of either kind (it could be out of order with what was not read). Within the
    // millisecond of a cut, the records not read are the kind's oldest of it: a cut of the
    // writes also drops that millisecond's decisions, which list before them.
    let cut = |records: usize, oldest: Option<TimestampMs>| oldest.filter(|_| records >= read);
    let decisions_cut = cut(
        decisions.len(),
        decisions.iter().map(|record| record.recorded_at_ms).min(),
    );
    let writes_cut = cut(
        writes.len(),
        writes.iter().map(|record| record.recorded_at_ms).min(),
    );
    let whole = decisions_cut.is_none() && writes_cut.is_none();
    let kept_decision = |at: TimestampMs| {
        decisions_cut.is_none_or(|cut| at >= cut) && writes_cut.is_none_or(|cut| at > cut)
    };
    let kept_write = |at: TimestampMs| {
        decisions_cut.is_none_or(|cut| at >= cut) && writes_cut.is_none_or(|cut| at >= cut)
    };
    let mut entries: Vec<AuditEntry> = decisions
        .iter()
        .filter(|record| kept_decision(record.recorded_at_ms))
        .map(AuditEntry::from)
        .chain(
            writes
                .iter()
                .filter(|record| kept_write(record.recorded_at_ms))
                .map(AuditEntry::from),
        )
        .collect();
    // A stable sort: each kind keeps its catalog's order within a millisecond.
    entries.sort_by_key(|entry| entry.recorded_at_ms);
    Ok((entries, whole))
}

impl Engine {
    /// A page of the dataset's audit trail (see the module doc).
    pub async fn audit_page(&self, dataset_id: &str, query: &AuditQuery) -> Result<AuditPage> {
        validate::dataset_id(dataset_id)?;
        let limit = bounds::AUDIT_LIMIT.check_usize(query.limit)?;
        for (what, text) in [("principal", &query.principal), ("kind", &query.kind)] {
            if let Some(text) = text
                && (text.is_empty() || text.len() > MAX_FILTER_BYTES)
            {
                return Err(MendError::invalid(format!(
                    "the audit's {what} filter is 1 to {MAX_FILTER_BYTES} bytes, not {}",
                    text.len()
                )));
            }
        }
        let mut read = limit.saturating_mul(2).clamp(64, MAX_AUDIT_SCAN);
        loop {
            // The newest `read` records of each kind, oldest first.
            let (records, whole_trail) = newest_entries(self, dataset_id, read).await?;
            let mut page: Vec<&AuditEntry> = Vec::new();
            let mut oldest_place = None;
            let mut reached_since = false;
            // Newest first, each with its place: its time, and how many records of that
            // millisecond are newer.
            let mut same_ms: (TimestampMs, usize) = (TimestampMs::MAX, 0);
            for record in records.iter().rev() {
                let newer_in_ms = if record.recorded_at_ms == same_ms.0 {
                    same_ms.1
                } else {
                    0
                };
                same_ms = (record.recorded_at_ms, newer_in_ms + 1);
                let place = AuditCursor {
                    recorded_at_ms: record.recorded_at_ms,
                    skip: newer_in_ms + 1,
                };
                oldest_place = Some(place);
                if let Some(before) = query.before {
                    let at_or_after = record.recorded_at_ms > before.recorded_at_ms
                        || (record.recorded_at_ms == before.recorded_at_ms
                            && newer_in_ms < before.skip);
                    if at_or_after {
                        continue;
                    }
                }
                if query
                    .since_ms
                    .is_some_and(|since| record.recorded_at_ms < since)
                {
                    reached_since = true;
                    break;
                }
                if query.passes(record) {
                    page.push(record);
                    if page.len() == limit {
                        return Ok(finish(page, Some(place)));
                    }
                }
            }
            if whole_trail || reached_since {
                return Ok(finish(page, None));
            }
            if read == MAX_AUDIT_SCAN {
                // Read as much as one page may: the caller goes on from the oldest read.
                return Ok(finish(page, oldest_place));
            }
            read = read.saturating_mul(4).min(MAX_AUDIT_SCAN);
        }
    }

    /// The newest `limit` records of the dataset's audit that name `principal` (all when
    /// none is given), oldest first: the first page of [`Engine::audit_page`].
    pub async fn audit_trail(
        &self,
        dataset_id: &str,
        principal: Option<&str>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>> {
        let query = AuditQuery {
            principal: principal.map(str::to_owned),
            limit,
            ..AuditQuery::default()
        };
        Ok(self.audit_page(dataset_id, &query).await?.entries)
    }
}

/// The page of `newest_first` records, oldest first, with where the next page starts.
fn finish(newest_first: Vec<&AuditEntry>, next: Option<AuditCursor>) -> AuditPage {
    AuditPage {
        entries: newest_first.into_iter().rev().cloned().collect(),
        next,
    }
}

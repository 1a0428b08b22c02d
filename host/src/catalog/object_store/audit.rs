//! Audit records of the object-storage catalog: one small object per append (a larger append
//! than [`RECORDS_PER_BATCH`] records is several), written put-if-absent next to the commit
//! log, never rewritten:
//!
//! ```text
//! datasets/{dataset_id}/audit/{newest recorded_at_ms:020}-{append id}.json
//!     {"format_version": 2, "records": [<record>, ...]}
//! ```
//!
//! A recovery sweep appends the records of a batch of up to 1,000 decisions at once, twice per
//! batch; as one object per record that was 2,000 puts per batch (and as many GETs to list
//! them), which cost more than the batch's catalog step. Earlier mends wrote exactly that, one
//! object per record holding the record itself (its own `format_version`, 1), which this one
//! still reads:
//!
//! ```text
//! datasets/{dataset_id}/audit/{recorded_at_ms:020}-{append id}-{index:06}.json
//! ```
//!
//! An older mend meets an object of format 2 as a record "a newer mend wrote", and refuses to
//! read the trail rather than skip it.
//!
//! Each object also gets an entry in the catalog-wide index of audit objects, put before the
//! object (`audit_index.rs`), from which the newest records of every dataset together are read.
//!
//! They stay out of the commit log on purpose: the log's state is rewritten whole into every
//! checkpoint, and an ever-growing audit trail must not make every checkpoint grow with it.
//!
//! Records list by recorded time, then in append order: the append id is a version 7 uuid,
//! which this process generates in increasing order (a sweep appends a decision's `executing`
//! record and its settled one a moment apart, often in the same millisecond), and within an
//! object the records keep their order. An object's name leads with its newest record's time,
//! so a listing of the newest few reads objects from the newest name back and stops at the
//! first one whose every record is older than what it has.

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{PutMode, PutOptions, PutPayload};
use serde::Deserialize;

use super::ObjectStoreCatalog;
use super::audit_index::{IndexEntry, written_time};
use crate::audit::{
    AuditRecord, BATCH_FORMAT, RECORDS_PER_BATCH, check_append, decode_batch, encode_batch,
    parse_stored,
};
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

/// Where a record sorts: recorded time, then append, then place in the append.
type Order = (TimestampMs, String, usize);

/// What an audit object's name says.
struct Named {
    path: Path,
    /// The newest record's time (of the only record, in format 1).
    newest_ms: TimestampMs,
    append_id: String,
    /// In format 1, the record's place in its append.
    index: Option<usize>,
}

impl Named {
    fn parse(path: Path) -> Result<Self> {
        let unnamed = || MendError::Corrupt {
            message: format!("audit object {path} is not named as mend names audit objects"),
        };
        let name = path.filename().ok_or_else(unnamed)?;
        let stem = name.strip_suffix(".json").ok_or_else(unnamed)?;
        let mut parts = stem.split('-');
        let newest_ms = parts.next().and_then(|time| time.parse().ok());
        let append_id = parts.next().map(str::to_string);
        let index = parts.next().map(|index| index.parse::<usize>());
        match (newest_ms, append_id, index, parts.next()) {
            (Some(newest_ms), Some(append_id), None, None) => Ok(Self {
                newest_ms,
                append_id,
                index: None,
                path,
            }),
            (Some(newest_ms), Some(append_id), Some(Ok(index)), None) => Ok(Self {
                newest_ms,
                append_id,
                index: Some(index),
                path,
            }),
            _ => Err(unnamed()),
        }
    }
}

impl ObjectStoreCatalog {
    fn audit_prefix(&self, dataset_id: &str) -> Path {
        self.prefix()
            .child("datasets")
            .child(dataset_id)
            .child("audit")
    }

    /// Where the audit object of append `append_id`, whose newest record is `newest_ms`, lives.
    pub(super) fn audit_object_path(
        &self,
        dataset_id: &str,
        newest_ms: TimestampMs,
        append_id: &str,
    ) -> Path {
        let newest_ms = written_time(newest_ms);
        self.audit_prefix(dataset_id)
            .child(format!("{newest_ms:020}-{append_id}.json"))
    }

    pub(super) async fn append_audit_records(
        &self,
        dataset_id: &str,
        records: &[AuditRecord],
    ) -> Result<()> {
        check_append(dataset_id, records)?;
        let Some(newest_ms) = records.iter().map(|record| record.recorded_at_ms).max() else {
            return Ok(());
        };
        self.load(dataset_id).await?;
        self.audit_index.start_before_appending(newest_ms).await?;
        for chunk in records.chunks(RECORDS_PER_BATCH) {
            let append_id = crate::ambient::uuid_v7().simple().to_string();
            let entry = IndexEntry::of(dataset_id, &append_id, chunk);
            // The entry first: every object written has one (`audit_index.rs`).
            self.audit_index.put_entry(&entry).await?;
            let path = self.audit_object_path(dataset_id, entry.span.newest_ms, &append_id);
            let options = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            self.store()
                .put_opts(&path, PutPayload::from(encode_batch(chunk)), options)
                .await
                .map_err(|error| MendError::unavailable(format!("write {path}"), error))?;
        }
        Ok(())
    }

    pub(super) async fn list_audit_records(
        &self,
        dataset_id: &str,
        limit: Option<usize>,
    ) -> Result<Vec<AuditRecord>> {
        self.load(dataset_id).await?;
        let prefix = self.audit_prefix(dataset_id);
        let paths: Vec<Path> = self
            .store()
            .list(Some(&prefix))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|error| MendError::unavailable(format!("list {prefix}"), error))?;
        let mut objects = paths
            .into_iter()
            .map(Named::parse)
            .collect::<Result<Vec<_>>>()?;
        objects.sort_by(|a, b| {
            (a.newest_ms, &a.append_id, a.index).cmp(&(b.newest_ms, &b.append_id, b.index))
        });
        let mut found: Vec<(Order, AuditRecord)> = Vec::new();
        // Newest name first; with a limit, stop once no object left can hold a record as new
        // as the oldest of the newest `limit` found.
        while let Some(object) = objects.pop() {
            if let Some(limit) = limit
                && found.len() >= limit
            {
                let mut times: Vec<TimestampMs> = found.iter().map(|(order, _)| order.0).collect();
                let (_, kth_newest, _) = times.select_nth_unstable_by(limit - 1, |a, b| b.cmp(a));
                if object.newest_ms < *kth_newest {
                    break;
                }
            }
            found.extend(self.read_audit_object(&object).await?);
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(limit) = limit {
            found.drain(..found.len().saturating_sub(limit));
        }
        Ok(found.into_iter().map(|(_, record)| record).collect())
    }

    /// The records of one audit object, each with where it sorts.
    async fn read_audit_object(&self, object: &Named) -> Result<Vec<(Order, AuditRecord)>> {
        #[derive(Deserialize)]
        struct Version {
            format_version: u32,
        }
        let path = &object.path;
        let unavailable = |error| MendError::unavailable(format!("read {path}"), error);
        let found = self.store().get(path).await.map_err(unavailable)?;
        let bytes = found.bytes().await.map_err(unavailable)?;
        let what = format!("audit object {path}");
        let order = |record: &AuditRecord, index: usize| -> Order {
            (record.recorded_at_ms, object.append_id.clone(), index)
        };
        let version = serde_json::from_slice::<Version>(&bytes).map(|v| v.format_version);
        match (version, object.index) {
            (Ok(BATCH_FORMAT), None) => Ok(decode_batch(&bytes, &what)?
                .into_iter()
                .enumerate()
                .map(|(index, record)| (order(&record, index), record))
                .collect()),
            (Ok(version), None) if version > BATCH_FORMAT => Err(MendError::Corrupt {
                message: format!(
                    "{what} has format version {version}, but this mend reads only versions 1 and {BATCH_FORMAT}: a newer mend wrote it; upgrade before reading this dataset's audit trail"
                ),
            }),
            // One record per object, as earlier mends wrote them: the record itself, whose
            // own checks say what is wrong with it.
            (_, index) => {
                let record = parse_stored(&bytes, &what)?;
                Ok(vec![(order(&record, index.unwrap_or(0)), record)])
            }
        }
    }
}

//! The object-store catalog's trail of writes ([`crate::catalog::write_audit`]).
//!
//! A write's record is one more action of the very commit that makes the write
//! ([`Action::RecordWrite`]), so it lands with the change or not at all. Commits do not live
//! forever: retention deletes the ones a kept checkpoint covers (`retention.rs`). Before it
//! deletes any, it copies their records into an archive object,
//! `catalog/writes/FIRST-LAST.json` (the first and last log versions it read), and it deletes
//! none of them if that put fails ([`archive`], called by `background.rs`). So every record is
//! at every moment in its commit, in an archive, or in both.
//!
//! Reading the newest records ([`ObjectStoreCatalog::list_writes`]) gathers them by log
//! version, each version once (an archive and a commit not yet deleted, or two archives of
//! overlapping runs, may hold the same version's records): the log from its newest version
//! down to the first gap, the archives newest first, then what the log holds below the gap.
//! The archives are listed after the log is read: a commit missing from the log by then was
//! archived before it was deleted.
//!
//! A write no catalog step makes (an object put into the object storage of splits, which no
//! log version can join) is recorded in an object of its own beside the log,
//! `catalog/writes/objects/object-VERSION-TIME-ID.json` ([`ObjectStoreCatalog::put_object_write`]),
//! not in a log version: the upload's record costs one put, which the writer waits for beside
//! the upload's look at its intent, and the operation's log versions stay the begin and the
//! publish. `VERSION` is the newest log version the writing process knew of: reading the trail
//! places the record after that version's records and before the next one's, so a writer's
//! own steps read in the order it took them (its begin, its upload, its publish) whatever the
//! clocks say.

use futures::StreamExt;
use object_store::path::Path;
use serde::{Deserialize, Serialize};

use super::ObjectStoreCatalog;
use super::log::Log;
use super::log_format::Action;
use crate::catalog::write_audit::{WriteRecord, check_format};
use crate::error::{MendError, Result};

/// The archive format this host writes and the newest it reads.
const ARCHIVE_FORMAT_VERSION: u32 = 1;
/// Commits read at once.
const READS_AT_ONCE: usize = 16;

#[derive(Debug, Serialize, Deserialize)]
struct Archive {
    format_version: u32,
    first_version: u64,
    last_version: u64,
    records: Vec<Archived>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Archived {
    version: u64,
    record: WriteRecord,
}

/// The records of `version`'s commit, in order; `None` if the commit is gone (retention
/// deleted it since it was listed, after archiving its records).
async fn commit_records(
    log: &Log,
    dataset_id: &str,
    version: u64,
) -> Result<Option<Vec<WriteRecord>>> {
    let Some(commit) = log.read_commit(dataset_id, version).await? else {
        return Ok(None);
    };
    let records = commit
        .actions
        .into_iter()
        .filter_map(|action| match action {
            Action::RecordWrite { record } => Some(*record),
            _ => None,
        })
        .collect();
    Ok(Some(records))
}

/// Copies the write records of the commits at `versions` (sorted) into one archive object, so
/// that retention may delete them. Nothing to archive writes nothing.
pub(super) async fn archive(log: &Log, dataset_id: &str, versions: &[u64]) -> Result<()> {
    let (Some(&first_version), Some(&last_version)) = (versions.first(), versions.last()) else {
        return Ok(());
    };
    let mut reads = futures::stream::iter(versions.iter().copied())
        .map(|version| async move { (version, commit_records(log, dataset_id, version).await) })
        .buffered(READS_AT_ONCE);
    let mut records = Vec::new();
    while let Some((version, read)) = reads.next().await {
        let read = read?.unwrap_or_default();
        records.extend(read.into_iter().map(|record| Archived { version, record }));
    }
    if records.is_empty() {
        return Ok(());
    }
    let archive = Archive {
        format_version: ARCHIVE_FORMAT_VERSION,
        first_version,
        last_version,
        records,
    };
    let body = serde_json::to_vec(&archive).expect("write records are plain data");
    log.overwrite(
        &archive_path(log, dataset_id, first_version, last_version),
        body,
    )
    .await
}

fn archive_path(log: &Log, dataset_id: &str, first: u64, last: u64) -> Path {
    log.writes_dir(dataset_id)
        .child(format!("{first:020}-{last:020}.json"))
}

/// The first and last versions an archive's name says it holds.
fn archive_range(path: &Path) -> Option<(u64, u64)> {
    let name = path.filename()?.strip_suffix(".json")?;
    let (first, last) = name.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

/// The folder of the records of writes no catalog step makes.
fn object_writes_dir(log: &Log, dataset_id: &str) -> Path {
    log.writes_dir(dataset_id).child("objects")
}

impl ObjectStoreCatalog {
    /// Records `record` (a write in the object storage of splits) in an object of its own,
    /// named by its time and a random id, so that no two writers' records meet.
    pub(super) async fn put_object_write(&self, record: &WriteRecord) -> Result<()> {
        let after_version = self.known_version(&record.dataset_id).unwrap_or_default();
        let name = format!(
            "object-{after_version:020}-{:020}-{}.json",
            record.recorded_at_ms.max(0),
            crate::ambient::uuid_v4().simple()
        );
        let path = object_writes_dir(&self.log, &record.dataset_id).child(name);
        self.log
            .overwrite(&path, crate::catalog::write_audit::encode(record))
            .await
    }

    /// Every record of a write in the object storage of splits, with the log version it
    /// follows, oldest first.
    async fn object_writes(&self, dataset_id: &str) -> Result<Vec<(u64, WriteRecord)>> {
        use futures::TryStreamExt;
        let dir = object_writes_dir(&self.log, dataset_id);
        let mut listed: Vec<Path> = self
            .log
            .store
            .list(Some(&dir))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|error| MendError::Unavailable {
                message: format!("listing {dir}: {error}"),
                source: None,
            })?;
        // Named by time first: the names sort oldest first.
        listed.sort();
        let log = &self.log;
        let reads = futures::stream::iter(listed)
            .map(|path| async move { (log.read_file(&path).await, path) })
            .buffered(READS_AT_ONCE);
        futures::pin_mut!(reads);
        let mut records = Vec::new();
        while let Some((read, path)) = reads.next().await {
            let after_version = path
                .filename()
                .and_then(|name| {
                    name.strip_prefix("object-")?
                        .split('-')
                        .next()?
                        .parse()
                        .ok()
                })
                .unwrap_or_default();
            if let Some(bytes) = read? {
                let record = crate::catalog::write_audit::decode(&bytes, path.as_ref())?;
                records.push((after_version, record));
            }
        }
        Ok(records)
    }

    /// The dataset's newest `limit` write records (all without one), oldest first.
    ///
    /// Versions are gathered newest first, each version's records whole: the run of log
    /// versions from the newest down to the first gap (what retention deleted), then the
    /// archives, newest first, then the log versions below the gap (version 0, which is never
    /// deleted, and any whose delete failed). Each source is read only while fewer than
    /// `limit` records are gathered, or while it may hold newer versions than those gathered.
    pub(super) async fn list_writes(
        &self,
        dataset_id: &str,
        limit: Option<usize>,
    ) -> Result<Vec<WriteRecord>> {
        // `NotFound` for a dataset that does not exist.
        self.load(dataset_id).await?;
        let limit = limit.unwrap_or(usize::MAX);
        let log = &self.log;
        let mut gathered = Gathered::default();
        let versions: Vec<u64> = log
            .log_files(dataset_id)
            .await?
            .into_iter()
            .rev()
            .map(|(version, _)| version)
            .collect();
        // The newest run without a gap.
        let run = versions
            .iter()
            .zip(versions.iter().skip(1))
            .position(|(newer, older)| *newer != older + 1)
            .map_or(versions.len(), |gap| gap + 1);
        let (newest_run, below_gap) = versions.split_at(run);
        let went_meanwhile = gathered
            .read_log(log, dataset_id, newest_run, limit)
            .await?;
        if gathered.records < limit || went_meanwhile {
            self.read_archives(dataset_id, limit, &mut gathered).await?;
        }
        if gathered.records < limit {
            gathered.read_log(log, dataset_id, below_gap, limit).await?;
        }
        // Each record of an object write after the records of the version it follows.
        let mut placed: Vec<((u64, bool), WriteRecord)> = gathered
            .by_version
            .into_iter()
            .flat_map(|(version, records)| {
                records
                    .into_iter()
                    .map(move |record| ((version, false), record))
            })
            .collect();
        placed.extend(
            self.object_writes(dataset_id)
                .await?
                .into_iter()
                .map(|(after, record)| ((after, true), record)),
        );
        // Stable: each source keeps its own order.
        placed.sort_by_key(|(place, _)| *place);
        let skip = placed.len().saturating_sub(limit);
        Ok(placed
            .into_iter()
            .skip(skip)
            .map(|(_, record)| record)
            .collect())
    }

    /// Gathers the archived records of versions not gathered yet, archives newest first,
    /// until `limit` records are gathered and no archive left can hold a newer version.
    async fn read_archives(
        &self,
        dataset_id: &str,
        limit: usize,
        gathered: &mut Gathered,
    ) -> Result<()> {
        use futures::TryStreamExt;
        let dir = self.log.writes_dir(dataset_id);
        let listed: Vec<object_store::ObjectMeta> = self
            .log
            .store
            .list(Some(&dir))
            .try_collect()
            .await
            .map_err(|error| MendError::Unavailable {
                message: format!("listing {dir}: {error}"),
                source: None,
            })?;
        let mut archives: Vec<((u64, u64), Path)> = listed
            .into_iter()
            .filter_map(|meta| Some((archive_range(&meta.location)?, meta.location)))
            .collect();
        archives.sort_by(|a, b| b.0.1.cmp(&a.0.1).then(b.0.0.cmp(&a.0.0)));
        for ((_, last_version), path) in archives {
            let older_than_gathered = gathered
                .by_version
                .keys()
                .next()
                .is_some_and(|&oldest| last_version < oldest);
            if gathered.records >= limit && older_than_gathered && !gathered.gaps {
                break;
            }
            let Some(bytes) = self.log.read_file(&path).await? else {
                continue;
            };
            let mut by_version = std::collections::BTreeMap::<u64, Vec<WriteRecord>>::new();
            for archived in decode_archive(&path, &bytes)?.records {
                by_version
                    .entry(archived.version)
                    .or_default()
                    .push(archived.record);
            }
            for (version, records) in by_version {
                gathered.add(version, records);
            }
        }
        Ok(())
    }
}

/// Records gathered by log version, each version once.
#[derive(Debug, Default)]
struct Gathered {
    by_version: std::collections::BTreeMap<u64, Vec<WriteRecord>>,
    records: usize,
    /// A commit read from the log was gone: its records are in an archive, which must be
    /// read whatever was gathered.
    gaps: bool,
}

impl Gathered {
    fn add(&mut self, version: u64, records: Vec<WriteRecord>) {
        if let std::collections::btree_map::Entry::Vacant(entry) = self.by_version.entry(version) {
            self.records += records.len();
            entry.insert(records);
        }
    }

    /// Reads the commits of `versions` (newest first) until `limit` records are gathered; a
    /// commit gone since the listing was archived before it went. Says whether one was gone.
    async fn read_log(
        &mut self,
        log: &Log,
        dataset_id: &str,
        versions: &[u64],
        limit: usize,
    ) -> Result<bool> {
        let mut reads = futures::stream::iter(versions.iter().copied())
            .map(|version| async move { (version, commit_records(log, dataset_id, version).await) })
            .buffered(READS_AT_ONCE);
        while self.records < limit
            && let Some((version, read)) = reads.next().await
        {
            match read? {
                Some(records) => self.add(version, records),
                None => self.gaps = true,
            }
        }
        Ok(self.gaps)
    }
}

fn decode_archive(path: &Path, bytes: &[u8]) -> Result<Archive> {
    #[derive(Deserialize)]
    struct Version {
        format_version: u32,
    }
    let corrupt = |what: String| MendError::Corrupt {
        message: format!("{path} {what}"),
    };
    let Version { format_version } = serde_json::from_slice(bytes)
        .map_err(|error| corrupt(format!("is not a write archive: {error}")))?;
    if format_version == 0 || format_version > ARCHIVE_FORMAT_VERSION {
        return Err(corrupt(format!(
            "has archive format {format_version}, but this mend reads only 1 to \
             {ARCHIVE_FORMAT_VERSION}: upgrade before reading this dataset's audit trail"
        )));
    }
    let archive: Archive = serde_json::from_slice(bytes)
        .map_err(|error| corrupt(format!("cannot be parsed: {error}")))?;
    for archived in &archive.records {
        check_format(archived.record.format_version, path.as_ref())?;
    }
    Ok(archive)
}

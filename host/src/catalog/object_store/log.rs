//! The commit log on the store: where its files live, what they hold, and the reads and
//! put-if-absent writes that move it forward.
//!
//! Layout under the catalog's prefix, per dataset:
//!
//! ```text
//! datasets/{dataset_id}/catalog/log/{version:020}.json          one commit per version
//! datasets/{dataset_id}/catalog/checkpoints/{version:020}.json  the whole state at a version
//! ```
//!
//! Beside the datasets, `index/pending/{dataset_id}` marks the datasets that may have pending
//! intents ([`super::pending`]).
//!
//! A commit file is `{"format_version", "version", "commit_id", "committed_at_ms",
//! "actions"}`; actions carry post-images (see [`Action`]), so applying a commit never
//! depends on a clock or on anything outside the file. This module knows nothing about what
//! the actions mean; [`super::state`] applies them, and [`super::checkpoint`] says what a
//! checkpoint file holds. Deleting old files is [`super::retention`]'s decision; this module
//! only lists and deletes what it is told.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::{Path, PathPart};
use object_store::{ObjectStore, PutMode, PutPayload};

use super::checkpoint;
use super::log_format::{Commit, corrupt, decode, encode};
use super::state::DatasetState;

use crate::error::{MendError, Result};

/// What a put-if-absent of the next version came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PutOutcome {
    Committed,
    /// Another writer holds this version; refresh and try again.
    Lost,
}

/// Counts of store calls, for tests and for the live-handle work that wants refreshes cheap.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub log_reads: AtomicU64,
    pub checkpoint_reads: AtomicU64,
    pub commits: AtomicU64,
    pub lost_races: AtomicU64,
    pub checkpoints_written: AtomicU64,
    pub checkpoint_failures: AtomicU64,
    pub files_pruned: AtomicU64,
    pub prune_failures: AtomicU64,
    pub reloads: AtomicU64,
}

impl Counters {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The store, the prefix and the file layout.
#[derive(Debug)]
pub(super) struct Log {
    pub store: Arc<dyn ObjectStore>,
    pub prefix: Path,
    pub counters: Counters,
}

impl Log {
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path) -> Self {
        Self {
            store,
            prefix,
            counters: Counters::default(),
        }
    }

    fn datasets_dir(&self) -> Path {
        self.prefix.child("datasets")
    }

    fn catalog_dir(&self, dataset_id: &str) -> Path {
        self.datasets_dir().child(dataset_id).child("catalog")
    }

    pub fn commit_path(&self, dataset_id: &str, version: u64) -> Path {
        self.catalog_dir(dataset_id)
            .child("log")
            .child(version_file_name(version))
    }

    fn checkpoints_dir(&self, dataset_id: &str) -> Path {
        self.catalog_dir(dataset_id).child("checkpoints")
    }

    pub fn checkpoint_path(&self, dataset_id: &str, version: u64) -> Path {
        self.checkpoints_dir(dataset_id)
            .child(version_file_name(version))
    }

    /// Where the dataset's archive of write records lives (`writes.rs`).
    pub fn writes_dir(&self, dataset_id: &str) -> Path {
        self.catalog_dir(dataset_id).child("writes")
    }

    /// The ids of every dataset directory under the prefix, unsorted.
    pub async fn dataset_ids(&self) -> Result<Vec<String>> {
        let listing = self
            .store
            .list_with_delimiter(Some(&self.datasets_dir()))
            .await
            .map_err(|err| store_error("listing datasets", err))?;
        Ok(listing
            .common_prefixes
            .iter()
            .filter_map(|dir| dir.filename().and_then(decode_path_part))
            .collect())
    }

    /// The commit at `version`, or `None` if no writer has committed it yet.
    pub async fn read_commit(&self, dataset_id: &str, version: u64) -> Result<Option<Commit>> {
        Counters::bump(&self.counters.log_reads);
        let path = self.commit_path(dataset_id, version);
        let Some(bytes) = self.read(&path).await? else {
            return Ok(None);
        };
        let commit: Commit = decode(&path, &bytes)?;
        if commit.version != version {
            return Err(corrupt(&path, format!("holds version {}", commit.version)));
        }
        Ok(Some(commit))
    }

    /// Writes `commit` as the next version if nobody has. When the store's answer is
    /// ambiguous (a timeout, a retried request answered "exists"), reads the version back:
    /// our commit id there means it landed.
    pub async fn put_commit(&self, dataset_id: &str, commit: &Commit) -> Result<PutOutcome> {
        let path = self.commit_path(dataset_id, commit.version);
        let payload = encode(commit)?;
        let put_error = match self
            .store
            .put_opts(&path, payload, PutMode::Create.into())
            .await
        {
            Ok(_) => {
                Counters::bump(&self.counters.commits);
                return Ok(PutOutcome::Committed);
            }
            Err(
                err @ (object_store::Error::NotImplemented
                | object_store::Error::NotSupported { .. }),
            ) => {
                return Err(MendError::CapabilityMissing {
                    capability: "put-if-absent".to_string(),
                    detail: format!(
                        "store {} cannot write {path} only if absent ({err}); the object-storage \
                         catalog needs conditional puts",
                        self.store
                    ),
                });
            }
            Err(err) => err,
        };
        let lost_race = matches!(put_error, object_store::Error::AlreadyExists { .. });
        match self.read_commit(dataset_id, commit.version).await {
            Ok(Some(found)) if found.commit_id == commit.commit_id => {
                Counters::bump(&self.counters.commits);
                Ok(PutOutcome::Committed)
            }
            Ok(Some(_)) => {
                Counters::bump(&self.counters.lost_races);
                Ok(PutOutcome::Lost)
            }
            // The store said the version exists but it reads as absent: our commit is not
            // there, so a retry on a fresh read is safe.
            Ok(None) if lost_race => {
                Counters::bump(&self.counters.lost_races);
                Ok(PutOutcome::Lost)
            }
            // Something unreadable holds the version, so ours never will: it did not land.
            Err(err @ MendError::Corrupt { .. }) => Err(err),
            Ok(None) | Err(_) => Err(MendError::unavailable(
                format!(
                    "writing {path} failed ({put_error}) and reading it back did not settle \
                     whether it landed; read the dataset again before retrying"
                ),
                put_error,
            )),
        }
    }

    /// The versions of the dataset's checkpoints, in increasing order.
    pub async fn checkpoint_versions(&self, dataset_id: &str) -> Result<Vec<u64>> {
        let files = self
            .list_versions(&self.checkpoints_dir(dataset_id))
            .await?;
        Ok(files.into_iter().map(|(version, _)| version).collect())
    }

    /// The version of the dataset's newest checkpoint, if it has one.
    pub async fn newest_checkpoint_version(&self, dataset_id: &str) -> Result<Option<u64>> {
        Ok(self.checkpoint_versions(dataset_id).await?.last().copied())
    }

    /// The log files of the dataset, by version in increasing order, with their paths.
    pub async fn log_files(
        &self,
        dataset_id: &str,
    ) -> Result<Vec<(u64, object_store::ObjectMeta)>> {
        self.list_versions(&self.catalog_dir(dataset_id).child("log"))
            .await
    }

    /// The checkpoint files of the dataset, by version in increasing order.
    pub async fn checkpoint_files(
        &self,
        dataset_id: &str,
    ) -> Result<Vec<(u64, object_store::ObjectMeta)>> {
        self.list_versions(&self.checkpoints_dir(dataset_id)).await
    }

    async fn list_versions(&self, dir: &Path) -> Result<Vec<(u64, object_store::ObjectMeta)>> {
        let objects: Vec<object_store::ObjectMeta> = self
            .store
            .list(Some(dir))
            .try_collect()
            .await
            .map_err(|err| store_error(&format!("listing {dir}"), err))?;
        let mut files: Vec<(u64, object_store::ObjectMeta)> = objects
            .into_iter()
            .filter_map(|object| {
                let version = object
                    .location
                    .filename()
                    .and_then(parse_version_file_name)?;
                Some((version, object))
            })
            .collect();
        files.sort_by_key(|(version, _)| *version);
        Ok(files)
    }

    /// The checkpoint at `version`, or `None` if it is not there (never written, or deleted
    /// by retention since it was listed).
    pub async fn read_checkpoint(
        &self,
        dataset_id: &str,
        version: u64,
    ) -> Result<Option<DatasetState>> {
        Counters::bump(&self.counters.checkpoint_reads);
        let path = self.checkpoint_path(dataset_id, version);
        let Some(bytes) = self.read(&path).await? else {
            return Ok(None);
        };
        // Parsing a checkpoint of 100,000 splits takes tens of milliseconds: off the async
        // workers, so that other datasets' requests keep moving meanwhile.
        let parse_path = path.clone();

        let off_thread = tokio::runtime::Handle::try_current()
            .ok()
            .filter(|_| !crate::ambient::is_deterministic());
        let state = match off_thread {
            Some(runtime) => runtime
                .spawn_blocking(move || checkpoint::decode(&parse_path, bytes))
                .await
                .map_err(|err| MendError::unavailable(format!("reading {path}: {err}"), err))??,
            None => checkpoint::decode(&path, bytes)?,
        };

        if state.version != version {
            return Err(corrupt(&path, format!("holds version {}", state.version)));
        }
        if state.dataset.dataset_id != dataset_id {
            return Err(corrupt(
                &path,
                format!("holds dataset {}", state.dataset.dataset_id),
            ));
        }
        Ok(Some(state))
    }

    /// Writes an encoded checkpoint unless one is there: `false` if another writer wrote the
    /// same version first.
    pub async fn put_checkpoint(
        &self,
        dataset_id: &str,
        version: u64,
        bytes: Vec<u8>,
    ) -> Result<bool> {
        let path = self.checkpoint_path(dataset_id, version);
        match self
            .store
            .put_opts(&path, PutPayload::from(bytes), PutMode::Create.into())
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(err) => Err(store_error(&format!("writing {path}"), err)),
        }
    }

    /// The bytes at `path`, or `None` if nothing is there.
    pub async fn read_file(&self, path: &Path) -> Result<Option<Bytes>> {
        self.read(path).await
    }

    /// Puts `bytes` at `path`, over whatever is there.
    pub async fn overwrite(&self, path: &Path, bytes: Vec<u8>) -> Result<()> {
        self.store
            .put(path, PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|err| store_error(&format!("writing {path}"), err))
    }

    /// Deletes a file; one that is gone already counts as deleted.
    pub async fn delete(&self, path: &Path) -> Result<()> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(store_error(&format!("deleting {path}"), err)),
        }
    }

    async fn read(&self, path: &Path) -> Result<Option<Bytes>> {
        let result = match self.store.get(path).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(err) => return Err(store_error(&format!("reading {path}"), err)),
        };
        result
            .bytes()
            .await
            .map(Some)
            .map_err(|err| store_error(&format!("reading {path}"), err))
    }
}

fn version_file_name(version: u64) -> String {
    format!("{version:020}.json")
}

fn parse_version_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".json")?;
    if digits.len() != 20 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Undoes the percent-encoding `PathPart` applies to a dataset id. A name that does not
/// round-trip is not a directory this catalog made, and is skipped.
pub(super) fn decode_path_part(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = std::str::from_utf8(bytes.get(index + 1..index + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    let id = String::from_utf8(decoded).ok()?;
    (PathPart::from(id.as_str()).as_ref() == raw).then_some(id)
}

fn store_error(context: &str, err: object_store::Error) -> MendError {
    MendError::unavailable(format!("{context}: {err}"), err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_file_names_sort_and_parse() {
        assert_eq!(version_file_name(42), "00000000000000000042.json");
        assert_eq!(parse_version_file_name(&version_file_name(42)), Some(42));
        assert_eq!(parse_version_file_name("42.json"), None);
        assert_eq!(parse_version_file_name("0000000000000000004x.json"), None);
    }

    #[test]
    fn dataset_directory_names_round_trip() {
        for id in ["logs", "a b", "100%", "x#y", "..", "é"] {
            let part = PathPart::from(id);
            assert_eq!(decode_path_part(part.as_ref()).as_deref(), Some(id));
        }
        assert_eq!(decode_path_part("%zz"), None);
    }
}

//! Split objects: the immutable data files at `datasets/{dataset}/splits/{split_id}`.
//!
//! Objects are written put-if-absent and never overwritten. Deleting an object that is already
//! gone succeeds, so a delete interrupted between its object and its row can be repeated. Each
//! object written by [`SplitObjects::put_split`] embeds its recovery metadata ([`format`](mod@format)).

pub mod format;
#[cfg(feature = "s3")]
pub mod presign;

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, GetResult, GetResultPayload, ObjectStore, PutMode, PutOptions, PutPayload,
};

use crate::error::{MendError, Result};

/// What an intent records of an object it plans: recovery finds the object by them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectSummary {
    /// The whole object's size.
    pub size: u64,
    /// `sha256:<hex>` of the payload, as the object's header records it: recovery compares it
    /// by reading the header only.
    pub checksum: String,
}

/// One object as a listing reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    /// The split the object belongs to (its file name).
    pub split_id: String,
    /// The object's size in bytes.
    pub size: u64,
    /// When the store says it was last written, in ms since the epoch (the store's clock).
    pub last_modified_ms: i64,
}

/// How many existence checks one publish runs at a time: enough to hide a store's latency
/// for a batch, few enough not to flood it.
pub const EXISTENCE_CHECKS_IN_FLIGHT: usize = 32;

/// What [`SplitObjects::inspect`] found at a split's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FoundObject {
    /// No object is at the path.
    Missing,
    /// A split object: its header and whole size.
    Split {
        /// The recovery header it carries.
        header: format::SplitObjectHeader,
        /// The object's size, header included.
        size: u64,
    },
    /// Bytes that are not a split object: why.
    NotASplitObject {
        /// Why it is not (too short, another magic, a header that does not parse).
        message: String,
    },
}

impl FoundObject {
    /// The header and size, if a split object is there.
    pub fn split(&self) -> Option<(&format::SplitObjectHeader, u64)> {
        match self {
            FoundObject::Split { header, size } => Some((header, *size)),
            _ => None,
        }
    }
}

/// What [`SplitObjects::read_back`] found at a split's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadBack {
    /// No object is at the path.
    Missing,
    /// Not the object expected: bytes that are not a split object, or a split object whose
    /// header or size is not the one expected. Its payload was not read.
    Other {
        /// What is there.
        found: FoundObject,
    },
    /// The header and size expected, but the payload's bytes are not what the header says:
    /// another size, or bytes that do not hash to its sha256.
    Damaged {
        /// The header it carries.
        header: format::SplitObjectHeader,
        /// The object's size, header included.
        size: u64,
        /// How many payload bytes were read.
        payload_bytes: u64,
    },
    /// The object expected, every payload byte hashed to the sha256 its header records.
    Intact {
        /// The header it carries.
        header: format::SplitObjectHeader,
        /// The object's size, header included.
        size: u64,
    },
}

impl ReadBack {
    /// Whether the object is there, whatever it is.
    pub fn present(&self) -> bool {
        !matches!(self, ReadBack::Missing)
    }

    /// Whether it is the object expected, its payload hashed as its header says.
    pub fn intact(&self) -> bool {
        matches!(self, ReadBack::Intact { .. })
    }
}

/// What a put-if-absent of an object did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// This put wrote the object.
    Written,
    /// The very same bytes were there already (a retry, or a racing upload of the same split).
    AlreadyInPlace,
}

/// The longest a presigned upload URL is valid, whatever the operation's lease.
pub const MAX_UPLOAD_URL_VALIDITY: Duration = Duration::from_secs(60 * 60);

/// What presigns uploads for a store that can (S3's client, with the `s3` feature:
/// `presign::S3UploadSigner`): a URL that lets whoever holds it `PUT` one object to one path
/// without credentials until it expires, and nothing else.
#[async_trait::async_trait]
pub trait UploadSigner: Send + Sync + std::fmt::Debug {
    /// A presigned `PUT` URL for `path`, valid for `valid_for`, that the store honours only for
    /// a body whose sha256 is `object_sha256` and only while nothing is at `path`; with the
    /// headers the writer must send.
    async fn upload_url(
        &self,
        path: &Path,
        valid_for: Duration,
        object_sha256: &[u8; 32],
    ) -> Result<SignedUpload>;
}

/// A presigned `PUT`: the URL, and the headers the request must carry, exactly (they are
/// signed: a request without them, or with other values, is refused by the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedUpload {
    /// The URL to `PUT` the whole object to.
    pub url: String,
    /// The headers to send with it, names as the store spells them.
    pub headers: Vec<(String, String)>,
}

/// A URL a writer can `PUT` one split object to, straight into the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadUrl {
    /// The URL and the headers the `PUT` must carry.
    pub signed: SignedUpload,
    /// How long it works, from when it was made.
    pub valid_for: Duration,
}

/// The split objects of a deployment: where they live, and the reads and writes mend makes of them.
#[derive(Debug, Clone)]
pub struct SplitObjects {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    /// Where the store can presign requests (S3): hands writers upload URLs.
    signer: Option<Arc<dyn UploadSigner>>,
}

impl SplitObjects {
    /// The objects under `prefix` of `store`; no upload URLs (see [`with_signer`](Self::with_signer)).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path) -> Self {
        Self {
            store,
            prefix,
            signer: None,
        }
    }

    /// The same objects, with a signer for the same store, so that writers can be handed
    /// presigned upload URLs ([`upload_url`](Self::upload_url)).
    pub fn with_signer(self, signer: Arc<dyn UploadSigner>) -> Self {
        Self {
            signer: Some(signer),
            ..self
        }
    }

    /// A presigned `PUT` URL for a split's object whose whole bytes (prefix, header, payload)
    /// hash to `object_sha256`, valid for `valid_for` (at most [`MAX_UPLOAD_URL_VALIDITY`]);
    /// `None` where the store cannot presign (a local directory, memory).
    ///
    /// The store honours it once, for that object only: its signature covers
    /// `If-None-Match: *` and the object's `x-amz-checksum-sha256` (module `presign`), so nothing
    /// can replace the object once it is there, and no other bytes can be put through it.
    pub async fn upload_url(
        &self,
        dataset_id: &str,
        split_id: &str,
        valid_for: Duration,
        object_sha256: &[u8; 32],
    ) -> Result<Option<UploadUrl>> {
        let Some(signer) = &self.signer else {
            return Ok(None);
        };
        let valid_for = valid_for.clamp(Duration::from_secs(1), MAX_UPLOAD_URL_VALIDITY);
        let path = self.path(dataset_id, split_id);
        let signed = signer.upload_url(&path, valid_for, object_sha256).await?;
        Ok(Some(UploadUrl { signed, valid_for }))
    }

    /// Whether the store presigns upload URLs.
    pub fn presigns(&self) -> bool {
        self.signer.is_some()
    }

    /// The store the objects live in, and the prefix under it.
    pub fn store(&self) -> (&Arc<dyn ObjectStore>, &Path) {
        (&self.store, &self.prefix)
    }

    /// Where a split's object lives: `{prefix}/datasets/{dataset_id}/splits/{split_id}`.
    pub fn path(&self, dataset_id: &str, split_id: &str) -> Path {
        self.prefix
            .child("datasets")
            .child(dataset_id)
            .child("splits")
            .child(split_id)
    }

    /// Writes a split's object if no object is there yet. An identical object already in place
    /// is left as it is ([`PutOutcome::AlreadyInPlace`]); a different one is `AlreadyExists`.
    /// The payload may be the chunks a client streamed: they are written as they are, never
    /// copied into one buffer.
    pub async fn put(
        &self,
        dataset_id: &str,
        split_id: &str,
        object: PutPayload,
    ) -> Result<PutOutcome> {
        let path = self.path(dataset_id, split_id);
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self.store.put_opts(&path, object.clone(), options).await {
            Ok(_) => Ok(PutOutcome::Written),
            Err(object_store::Error::AlreadyExists { .. }) => {
                let existing = self
                    .store
                    .get(&path)
                    .await
                    .map_err(|e| MendError::unavailable(format!("read {path}"), e))?
                    .bytes()
                    .await
                    .map_err(|e| MendError::unavailable(format!("read {path}"), e))?;
                if same_bytes(&existing, &object) {
                    Ok(PutOutcome::AlreadyInPlace)
                } else {
                    Err(MendError::AlreadyExists {
                        kind: crate::EntityKind::Split,
                        id: split_id.to_string(),
                    })
                }
            }
            Err(error) => Err(MendError::unavailable(format!("write {path}"), error)),
        }
    }

    /// Writes a split's object with its recovery metadata embedded, put-if-absent; returns the
    /// object's size and checksum as an intent records them.
    pub async fn put_split(
        &self,
        header: &format::SplitObjectHeader,
        payload: &[u8],
    ) -> Result<ObjectSummary> {
        let bytes = format::encode(header, payload);
        let summary = ObjectSummary {
            size: bytes.len() as u64,
            checksum: header.payload_sha256.clone(),
        };
        self.put(&header.dataset_id, &header.split_id, bytes.into())
            .await?;
        Ok(summary)
    }

    /// The recovery metadata embedded in a split's object and the object's size, reading only
    /// its first bytes, in one request when the header is short (as it nearly always is);
    /// `None` if there is no object.
    pub async fn read_header(
        &self,
        dataset_id: &str,
        split_id: &str,
    ) -> Result<Option<(format::SplitObjectHeader, u64)>> {
        /// Enough for the prefix and a typical header.
        const FIRST_READ: u64 = 4096;
        let path = self.path(dataset_id, split_id);
        let unavailable = |error| MendError::unavailable(format!("read {path}"), error);
        let options = GetOptions {
            range: Some(GetRange::Bounded(0..FIRST_READ)),
            ..GetOptions::default()
        };
        let found = match self.store.get_opts(&path, options).await {
            Ok(found) => found,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            // An empty object has no first byte to read, and stores answer that range with an
            // error of their own (S3's 416, the local directory's invalid range): tell it from
            // a store that cannot be reached by what a HEAD says.
            Err(error) => {
                return match self.store.head(&path).await {
                    Ok(meta) if meta.size < format::PREFIX_LEN as u64 => Err(MendError::Corrupt {
                        message: format!(
                            "{path} is {} bytes, too short to be a split object",
                            meta.size
                        ),
                    }),
                    Err(object_store::Error::NotFound { .. }) => Ok(None),
                    _ => Err(unavailable(error)),
                };
            }
        };
        let size = found.meta.size;
        let first = ranged_bytes(found).await.map_err(unavailable)?;
        if size < format::PREFIX_LEN as u64 || first.len() < format::PREFIX_LEN {
            return Err(MendError::Corrupt {
                message: format!("{path} is {size} bytes, too short to be a split object"),
            });
        }
        let header_end = format::PREFIX_LEN as u64 + u64::from(format::header_len(&first)?);
        if header_end > size {
            return Err(MendError::Corrupt {
                message: format!("{path} is shorter than its header"),
            });
        }
        let json = if header_end <= first.len() as u64 {
            first.slice(format::PREFIX_LEN..header_end as usize)
        } else {
            self.store
                .get_range(&path, format::PREFIX_LEN as u64..header_end)
                .await
                .map_err(unavailable)?
        };
        Ok(Some((format::decode_header(&json)?, size)))
    }

    /// What is at a split's path: nothing, a split object (its header and size), or bytes
    /// that are not a split object of this format (too short, another magic, a header that
    /// does not parse). Anyone with access to the store can put such bytes there (a writer's
    /// own upload gone wrong), so callers that decide about an operation treat them as "an
    /// object, not the one planned" rather than failing the whole dataset's work.
    pub async fn inspect(&self, dataset_id: &str, split_id: &str) -> Result<FoundObject> {
        match self.read_header(dataset_id, split_id).await {
            Ok(None) => Ok(FoundObject::Missing),
            Ok(Some((header, size))) => Ok(FoundObject::Split { header, size }),
            Err(MendError::Corrupt { message }) => Ok(FoundObject::NotASplitObject { message }),
            Err(error) => Err(error),
        }
    }

    /// Which of `split_ids` have no object, sorted: one HEAD per split, at most
    /// [`EXISTENCE_CHECKS_IN_FLIGHT`] at a time.
    pub async fn missing(&self, dataset_id: &str, split_ids: &[String]) -> Result<Vec<String>> {
        use futures::StreamExt;
        // Each check owns what it needs: the futures run on the server's tasks, which must be
        // `Send` for every lifetime.
        let checks = futures::stream::iter(split_ids.iter().cloned())
            .map(|split_id| {
                let path = self.path(dataset_id, &split_id);
                let store = self.store.clone();
                async move {
                    match store.head(&path).await {
                        Ok(_) => Ok(None),
                        Err(object_store::Error::NotFound { .. }) => Ok(Some(split_id)),
                        Err(error) => Err(MendError::unavailable(format!("read {path}"), error)),
                    }
                }
            })
            .buffer_unordered(EXISTENCE_CHECKS_IN_FLIGHT)
            .collect::<Vec<Result<Option<String>>>>()
            .await;
        let mut missing = checks
            .into_iter()
            .filter_map(Result::transpose)
            .collect::<Result<Vec<String>>>()?;
        missing.sort();
        Ok(missing)
    }

    /// Every object of `dataset_id` whose name is a split id, sorted by split id. Anything
    /// else in the folder (a name outside the split id alphabet) is not a split object and is
    /// left out, and alone.
    pub async fn list(&self, dataset_id: &str) -> Result<Vec<ListedObject>> {
        use futures::TryStreamExt;
        let prefix = self
            .prefix
            .child("datasets")
            .child(dataset_id)
            .child("splits");
        let mut objects: Vec<ListedObject> = self
            .store
            .list(Some(&prefix))
            .map_ok(|meta| ListedObject {
                split_id: meta
                    .location
                    .filename()
                    .map(str::to_string)
                    .unwrap_or_default(),
                size: meta.size,
                last_modified_ms: meta.last_modified.timestamp_millis(),
            })
            .try_collect()
            .await
            .map_err(|error| MendError::unavailable(format!("list {prefix}"), error))?;
        objects.retain(|object| crate::validate::split_id(&object.split_id).is_ok());
        objects.sort_by(|a, b| a.split_id.cmp(&b.split_id));
        Ok(objects)
    }

    /// Reads a split's object back whole, as a stream: its header, then every byte of its
    /// payload hashed (at most the header and one chunk in memory, whatever the object's
    /// size). `expected` is asked about the header and the object's whole size first; an
    /// object it does not expect is answered [`ReadBack::Other`] without reading its payload.
    ///
    /// This is how mend knows a payload it did not receive itself: a header is a claim made by
    /// whoever wrote the object, and only the bytes hashed against it are proof.
    ///
    /// A local file of at most [`INLINE_READ_BACK_BYTES`] is read and hashed right here, from
    /// the file the GET opened, instead of one trip to tokio's blocking pool per chunk and one
    /// for the end of the stream: a recovery reads back every object it did not receive itself,
    /// which after a crash is every object of every crashed commit.
    pub async fn read_back(
        &self,
        dataset_id: &str,
        split_id: &str,
        expected: &(dyn Fn(&format::SplitObjectHeader, u64) -> bool + Send + Sync),
    ) -> Result<ReadBack> {
        use futures::StreamExt;

        let path = self.path(dataset_id, split_id);
        let unavailable = |error| MendError::unavailable(format!("read {path}"), error);
        let found = match self.store.get(&path).await {
            Ok(found) => found,
            Err(object_store::Error::NotFound { .. }) => return Ok(ReadBack::Missing),
            Err(error) => return Err(unavailable(error)),
        };
        let size = found.meta.size;
        let mut reading = ReadingBack::new(size, expected);
        if size <= INLINE_READ_BACK_BYTES
            && let GetResultPayload::File(file, local) = &found.payload
        {
            use std::io::{Read, Seek, SeekFrom};
            let read_error = |error| unavailable(local_read_error(local, error));
            // The bytes the GET answers for, as its stream would read them.
            let range = found.range.clone();
            let mut file = file;
            file.seek(SeekFrom::Start(range.start))
                .map_err(read_error)?;
            let mut file = file.take(range.end - range.start);
            // A small object is read in one go, without a 64 KiB buffer zeroed for it.
            let mut buffer = vec![0; usize::try_from(size).unwrap_or(usize::MAX).min(64 * 1024)];
            loop {
                let read = match file.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(read) => read,
                    Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(error) => return Err(read_error(error)),
                };
                if let Some(answer) = reading.feed(&buffer[..read])? {
                    return Ok(answer);
                }
            }
            return Ok(reading.finish(&path));
        }
        let mut chunks = found.into_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(unavailable)?;
            if let Some(answer) = reading.feed(&chunk)? {
                return Ok(answer);
            }
        }
        Ok(reading.finish(&path))
    }

    /// A split's whole object, read back as [`read_back`](Self::read_back) reads it: its
    /// decoded header, and whether its payload has the size and checksum the header records;
    /// `None` if there is no object. Bytes that are not a split object are `Corrupt`.
    pub async fn read_split(
        &self,
        dataset_id: &str,
        split_id: &str,
    ) -> Result<Option<(format::SplitObjectHeader, bool)>> {
        match self.read_back(dataset_id, split_id, &|_, _| true).await? {
            ReadBack::Missing => Ok(None),
            ReadBack::Intact { header, .. } => Ok(Some((header, true))),
            ReadBack::Damaged { header, .. } => Ok(Some((header, false))),
            ReadBack::Other {
                found: FoundObject::NotASplitObject { message },
            } => Err(MendError::Corrupt { message }),
            ReadBack::Other { found } => Err(MendError::Corrupt {
                message: format!("{split_id}: an unexpected object: {found:?}"),
            }),
        }
    }

    /// Deletes a split's object; an object already gone is fine.
    pub async fn delete(&self, dataset_id: &str, split_id: &str) -> Result<()> {
        let path = self.path(dataset_id, split_id);
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(error) => Err(MendError::unavailable(format!("delete {path}"), error)),
        }
    }
}

/// The largest local object [`SplitObjects::read_back`] reads inline, on the task that asked:
/// a few hundred microseconds of reading from the page cache. A larger one is streamed through
/// the blocking pool, so that one huge object does not hold a runtime thread.
pub const INLINE_READ_BACK_BYTES: u64 = 1024 * 1024;

/// One object being read back: the prefix and header gathered from however many chunks they
/// span (a header is at most `MAX_HEADER_LEN`, checked before it is gathered), then every
/// payload byte hashed.
struct ReadingBack<'a> {
    size: u64,
    expected: &'a (dyn Fn(&format::SplitObjectHeader, u64) -> bool + Send + Sync),
    head: Vec<u8>,
    header_end: Option<usize>,
    header: Option<format::SplitObjectHeader>,
    hasher: sha2::Sha256,
    payload_bytes: u64,
}

impl<'a> ReadingBack<'a> {
    fn new(
        size: u64,
        expected: &'a (dyn Fn(&format::SplitObjectHeader, u64) -> bool + Send + Sync),
    ) -> Self {
        use sha2::Digest;
        Self {
            size,
            expected,
            head: Vec::new(),
            header_end: None,
            header: None,
            hasher: sha2::Sha256::new(),
            payload_bytes: 0,
        }
    }

    fn not_a_split(message: String) -> ReadBack {
        ReadBack::Other {
            found: FoundObject::NotASplitObject { message },
        }
    }

    /// The next bytes of the object; the answer, if they settle it before its end (not a
    /// split object, or not the one expected).
    fn feed(&mut self, chunk: &[u8]) -> Result<Option<ReadBack>> {
        use sha2::Digest;
        let mut rest = chunk;
        if self.header.is_none() {
            let wanted = self.header_end.unwrap_or(format::PREFIX_LEN);
            let take = rest.len().min(wanted - self.head.len());
            self.head.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.head.len() == format::PREFIX_LEN && self.header_end.is_none() {
                let len = match format::header_len(&self.head) {
                    Ok(len) => len as usize,
                    Err(error) => return Ok(Some(Self::not_a_split(error.to_string()))),
                };
                self.header_end = Some(format::PREFIX_LEN + len);
                let take = rest.len().min(len);
                self.head.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
            }
            if self.header_end == Some(self.head.len()) {
                let decoded = match format::decode_header(&self.head[format::PREFIX_LEN..]) {
                    Ok(decoded) => decoded,
                    Err(MendError::Corrupt { message }) => {
                        return Ok(Some(Self::not_a_split(message)));
                    }
                    Err(error) => return Err(error),
                };
                if !(self.expected)(&decoded, self.size) {
                    return Ok(Some(ReadBack::Other {
                        found: FoundObject::Split {
                            header: decoded,
                            size: self.size,
                        },
                    }));
                }
                self.header = Some(decoded);
            }
        }
        self.hasher.update(rest);
        self.payload_bytes += rest.len() as u64;
        Ok(None)
    }

    /// The answer once every byte was fed.
    fn finish(self, path: &Path) -> ReadBack {
        use sha2::Digest;
        let Some(header) = self.header else {
            return Self::not_a_split(format!(
                "{path} is {} bytes, shorter than a split object's prefix and header",
                self.size
            ));
        };
        let digest = self.hasher.finalize();
        let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
        let intact = self.payload_bytes == header.payload_size
            && format!("sha256:{hex}") == header.payload_sha256;
        if intact {
            ReadBack::Intact {
                header,
                size: self.size,
            }
        } else {
            ReadBack::Damaged {
                header,
                size: self.size,
                payload_bytes: self.payload_bytes,
            }
        }
    }
}

/// The bytes of a ranged GET. A local file's are read right here, with one small read of the
/// file the GET opened, rather than in a second trip to the blocking thread pool (which is how
/// object_store's `GetResult::bytes` reads a file): that trip made reading an object's header
/// cost twice a HEAD, and a recovery sweep reads thousands of headers. The range is at most a
/// header's first read (4 KiB). Other stores' bytes come as they always did.
async fn ranged_bytes(found: GetResult) -> object_store::Result<bytes::Bytes> {
    match found.payload {
        GetResultPayload::File(mut file, path) => {
            use std::io::{Read, Seek, SeekFrom};
            let length = found.range.end - found.range.start;
            let mut read = Vec::with_capacity(usize::try_from(length).unwrap_or(0));
            file.seek(SeekFrom::Start(found.range.start))
                .and_then(|_| file.take(length).read_to_end(&mut read))
                .map_err(|source| local_read_error(&path, source))?;
            Ok(read.into())
        }
        payload => {
            GetResult {
                payload,
                meta: found.meta,
                range: found.range,
                attributes: found.attributes,
            }
            .bytes()
            .await
        }
    }
}

/// A local file's read error, as the local store reports its own, naming the file.
fn local_read_error(file: &std::path::Path, source: std::io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalFileSystem",
        source: format!("read {}: {source}", file.display()).into(),
    }
}

/// Whether `object`'s chunks, one after another, are exactly `existing`.
fn same_bytes(existing: &[u8], object: &PutPayload) -> bool {
    if existing.len() != object.content_length() {
        return false;
    }
    let mut rest = existing;
    object.iter().all(|chunk| {
        let (head, tail) = rest.split_at(chunk.len());
        rest = tail;
        head == chunk.as_ref()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(split_id: &str, payload: &[u8]) -> format::SplitObjectHeader {
        format::SplitObjectHeader {
            format_version: format::HEADER_FORMAT_VERSION,
            dataset_id: "ds".into(),
            dataset_uid: "uid".into(),
            split_id: split_id.into(),
            node: "n".into(),
            metadata_json: "{}".into(),
            operation_id: Some("op".into()),
            payload_size: payload.len() as u64,
            payload_sha256: format::sha256(payload),
        }
    }

    /// What each object reads back as, by name: the same on a local directory (read inline
    /// up to `INLINE_READ_BACK_BYTES`, streamed above it) and in memory (always streamed),
    /// below and above the inline limit.
    #[tokio::test]
    async fn an_object_reads_back_the_same_inline_or_streamed() {
        let directory = tempfile::tempdir().expect("temp dir");
        let local: Arc<dyn ObjectStore> = Arc::new(
            object_store::local::LocalFileSystem::new_with_prefix(directory.path())
                .expect("local store"),
        );
        let memory: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let mut checked = 0;
        for payload_len in [1_000, INLINE_READ_BACK_BYTES as usize + 500_000] {
            let dataset = format!("ds-{payload_len}");
            let payload: Vec<u8> = (0..payload_len).map(|i| (i % 251) as u8).collect();
            let intact = format::encode(&header("intact", &payload), &payload).to_vec();
            let mut damaged = format::encode(&header("damaged", &payload), &payload).to_vec();
            let last = damaged.len() - 1;
            damaged[last] ^= 1;
            let mut short = format::encode(&header("short", &payload), &payload).to_vec();
            short.pop();
            let objects: [(&str, Vec<u8>); 4] = [
                ("intact", intact),
                ("damaged", damaged),
                ("short", short),
                ("garbage", vec![7; 100]),
            ];
            let mut answers = Vec::new();
            for store in [&local, &memory] {
                let objects_of = SplitObjects::new(store.clone(), Path::from("p"));
                for (split_id, bytes) in &objects {
                    objects_of
                        .put(&dataset, split_id, bytes.clone().into())
                        .await
                        .expect("put");
                }
                let everything = |_: &format::SplitObjectHeader, _: u64| true;
                let nothing = |_: &format::SplitObjectHeader, _: u64| false;
                let mut found = Vec::new();
                for (split_id, _) in &objects {
                    let answer = objects_of
                        .read_back(&dataset, split_id, &everything)
                        .await
                        .expect("reads");
                    found.push(answer);
                }
                found.push(
                    objects_of
                        .read_back(&dataset, "intact", &nothing)
                        .await
                        .unwrap(),
                );
                found.push(
                    objects_of
                        .read_back(&dataset, "absent", &everything)
                        .await
                        .unwrap(),
                );
                answers.push(found);
            }
            let (local_answers, memory_answers) = (&answers[0], &answers[1]);
            assert_eq!(
                local_answers, memory_answers,
                "payload of {payload_len} bytes"
            );
            let kinds: Vec<&str> = local_answers
                .iter()
                .map(|answer| match answer {
                    ReadBack::Intact { .. } => "intact",
                    ReadBack::Damaged { .. } => "damaged",
                    ReadBack::Other {
                        found: FoundObject::Split { .. },
                    } => "other split",
                    ReadBack::Other { .. } => "not a split",
                    ReadBack::Missing => "missing",
                })
                .collect();
            assert_eq!(
                kinds,
                [
                    "intact",
                    "damaged",
                    "damaged",
                    "not a split",
                    "other split",
                    "missing"
                ],
                "payload of {payload_len} bytes"
            );
            if let ReadBack::Damaged { payload_bytes, .. } = &local_answers[2] {
                assert_eq!(*payload_bytes, payload_len as u64 - 1);
            }
            checked += kinds.len();
        }
        println!("{checked} read-backs agree inline and streamed");
    }
}

//! Split objects: the immutable data files at `datasets/{dataset}/splits/{split_id}`.
//!
//! Objects are written put-if-absent and never overwritten. Deleting an object that is already
//! gone succeeds, so a delete interrupted between its object and its row can be repeated. Each
//! object written by [`SplitObjects::put_split`] embeds its recovery metadata ([`format`](mod@format)).

pub mod format;

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

/// What presigns uploads for a store that can (S3's client, with the `s3` feature): a URL
/// that lets whoever holds it `PUT` one path without credentials until it expires.
#[async_trait::async_trait]
pub trait UploadSigner: Send + Sync + std::fmt::Debug {
    /// A presigned `PUT` URL for `path`, valid for `valid_for`.
    async fn upload_url(&self, path: &Path, valid_for: Duration) -> Result<String>;
}

#[cfg(feature = "s3")]
#[async_trait::async_trait]
impl UploadSigner for object_store::aws::AmazonS3 {
    async fn upload_url(&self, path: &Path, valid_for: Duration) -> Result<String> {
        use object_store::signer::Signer;
        let url = self
            .signed_url(http::Method::PUT, path, valid_for)
            .await
            .map_err(|error| MendError::unavailable(format!("presign {path}"), error))?;
        Ok(url.to_string())
    }
}

/// A URL a writer can `PUT` one split object to, straight into the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadUrl {
    /// The URL to `PUT` the whole object to.
    pub url: String,
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

    /// A presigned `PUT` URL for a split's object, valid for `valid_for` (at most
    /// [`MAX_UPLOAD_URL_VALIDITY`]); `None` where the store cannot presign (a local directory,
    /// memory).
    ///
    /// The URL lets its holder put that one path until it expires, and cannot carry
    /// put-if-absent (the signature covers no conditional header), so the writer is trusted
    /// with it as with a lease: publish checks the object it finds (size, checksum and
    /// operation in its header).
    pub async fn upload_url(
        &self,
        dataset_id: &str,
        split_id: &str,
        valid_for: Duration,
    ) -> Result<Option<UploadUrl>> {
        let Some(signer) = &self.signer else {
            return Ok(None);
        };
        let valid_for = valid_for.clamp(Duration::from_secs(1), MAX_UPLOAD_URL_VALIDITY);
        let path = self.path(dataset_id, split_id);
        let url = signer.upload_url(&path, valid_for).await?;
        Ok(Some(UploadUrl { url, valid_for }))
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

    /// A split's whole object: its decoded header, and whether its payload has the size and
    /// checksum the header records; `None` if there is no object. An object whose header
    /// cannot be read is `Corrupt`.
    pub async fn read_split(
        &self,
        dataset_id: &str,
        split_id: &str,
    ) -> Result<Option<(format::SplitObjectHeader, bool)>> {
        let path = self.path(dataset_id, split_id);
        let unavailable = |error| MendError::unavailable(format!("read {path}"), error);
        let bytes = match self.store.get(&path).await {
            Ok(found) => found.bytes().await.map_err(unavailable)?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(unavailable(error)),
        };
        let header_end = format::PREFIX_LEN + format::header_len(&bytes)? as usize;
        let header =
            format::decode_header(bytes.get(format::PREFIX_LEN..header_end).ok_or_else(|| {
                MendError::Corrupt {
                    message: format!("{path} is shorter than its header"),
                }
            })?)?;
        let payload = &bytes[header_end..];
        let intact = payload.len() as u64 == header.payload_size
            && format::sha256(payload) == header.payload_sha256;
        Ok(Some((header, intact)))
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
                .map_err(|source| object_store::Error::Generic {
                    store: "LocalFileSystem",
                    source: format!("read {}: {source}", path.display()).into(),
                })?;
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

//! An object store wrapper that counts every request reaching the store: writes (puts,
//! deletes, copies), reads (GETs and HEADs) and listings, so that tests can assert that an
//! operation wrote nothing, or how many requests a step cost.
//!
//! Requests are counted when they are made, successful or not. A listing counts once per
//! call, however many pages the store answers it with.
//!
//! It also counts the bytes the store answers with ([`CountingStore::bytes_received`]): a
//! GET's body (the range it returns) and a listing's keys (each listed object's and common
//! prefix's path); and the entries listings answer with ([`CountingStore::entries_listed`]).
//! A store's listing response wraps each key in more (S3's XML adds its size,
//! modification time and ETag), so the count is a floor of what crosses the wire.
//!
//! The kit counts the split objects' writes with it; a backend on object storage can count its
//! catalog's writes with it too, for its [`Fingerprint`](crate::Fingerprint).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// An [`ObjectStore`] that forwards every request to another one and counts it by kind.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    writes: AtomicU64,
    gets: AtomicU64,
    heads: AtomicU64,
    lists: AtomicU64,
    /// Shared with the listing streams, which outlive the call that made them.
    bytes_received: Arc<AtomicU64>,
    /// Likewise.
    entries_listed: Arc<AtomicU64>,
}

/// The requests a [`CountingStore`] has seen, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// Puts (multipart ones counted once, when they start), deletes and copies.
    pub writes: u64,
    /// GETs, ranged ones included.
    pub gets: u64,
    /// HEADs.
    pub heads: u64,
    /// Listings, each call once.
    pub lists: u64,
}

impl RequestCounts {
    /// Every request, whatever its kind.
    pub fn total(&self) -> u64 {
        self.writes + self.gets + self.heads + self.lists
    }

    /// The requests made between `earlier` and `self`.
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        RequestCounts {
            writes: self.writes - earlier.writes,
            gets: self.gets - earlier.gets,
            heads: self.heads - earlier.heads,
            lists: self.lists - earlier.lists,
        }
    }
}

impl std::ops::AddAssign for RequestCounts {
    fn add_assign(&mut self, other: Self) {
        self.writes += other.writes;
        self.gets += other.gets;
        self.heads += other.heads;
        self.lists += other.lists;
    }
}

impl fmt::Display for RequestCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} GET, {} HEAD, {} LIST, {} writes",
            self.gets, self.heads, self.lists, self.writes
        )
    }
}

impl CountingStore {
    /// Counts the requests made to `inner`, starting from zero.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            inner,
            writes: AtomicU64::new(0),
            gets: AtomicU64::new(0),
            heads: AtomicU64::new(0),
            lists: AtomicU64::new(0),
            bytes_received: Arc::new(AtomicU64::new(0)),
            entries_listed: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The store this one counts requests to.
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    /// Writes attempted so far, successful or not.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Every request so far, by kind.
    pub fn requests(&self) -> RequestCounts {
        RequestCounts {
            writes: self.writes.load(Ordering::SeqCst),
            gets: self.gets.load(Ordering::SeqCst),
            heads: self.heads.load(Ordering::SeqCst),
            lists: self.lists.load(Ordering::SeqCst),
        }
    }

    /// Bytes the store has answered with so far: GET bodies and listed keys.
    pub fn bytes_received(&self) -> u64 {
        self.bytes_received.load(Ordering::SeqCst)
    }

    /// Entries listings have answered with so far: objects and common prefixes.
    pub fn entries_listed(&self) -> u64 {
        self.entries_listed.load(Ordering::SeqCst)
    }

    fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

// Only the trait's required methods are forwarded: its provided ones (`get`, `head`,
// `get_range`, `put`, `list_with_offset`, ...) call these, so every request is counted once.
#[async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        Self::count(&self.writes);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Self::count(&self.writes);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        Self::count(if options.head {
            &self.heads
        } else {
            &self.gets
        });
        let head = options.head;
        let result = self.inner.get_opts(location, options).await?;
        if !head {
            let body = result.range.end - result.range.start;
            self.bytes_received.fetch_add(body, Ordering::SeqCst);
        }
        Ok(result)
    }

    async fn delete(&self, location: &Path) -> object_store::Result<()> {
        Self::count(&self.writes);
        self.inner.delete(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        Self::count(&self.lists);
        let bytes_received = self.bytes_received.clone();
        let entries_listed = self.entries_listed.clone();
        self.inner
            .list(prefix)
            .inspect(move |listed| {
                if let Ok(meta) = listed {
                    let key = meta.location.as_ref().len() as u64;
                    bytes_received.fetch_add(key, Ordering::SeqCst);
                    entries_listed.fetch_add(1, Ordering::SeqCst);
                }
            })
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        Self::count(&self.lists);
        let listed = self.inner.list_with_delimiter(prefix).await?;
        let keys = listed.common_prefixes.iter().map(|p| p.as_ref().len());
        let keys = keys.chain(listed.objects.iter().map(|o| o.location.as_ref().len()));
        self.bytes_received
            .fetch_add(keys.sum::<usize>() as u64, Ordering::SeqCst);
        let entries = listed.common_prefixes.len() + listed.objects.len();
        self.entries_listed
            .fetch_add(entries as u64, Ordering::SeqCst);
        Ok(listed)
    }

    async fn copy(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        Self::count(&self.writes);
        self.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        Self::count(&self.writes);
        self.inner.copy_if_not_exists(from, to).await
    }
}

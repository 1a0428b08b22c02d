//! An object store that answers every request after an injected latency, as a store across a
//! network does (tens of milliseconds a request on S3), counts the requests by kind, and
//! tracks the longest chain of requests made one after another: what an operation's latency
//! is made of on such a store. `tests/benches/round_trips.rs` measures commits with it, and
//! `tests/round_trips.rs` holds a commit to its count.
//!
//! The chain: a request is one round trip after the longest chain of requests that had all
//! ended when it began, so requests made at once (a commit's uploads) count as one round trip
//! and requests made one after another as one each. [`LatencyStore::take`] reports the
//! longest chain since the last take.

use std::fmt;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMode,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// The requests a [`LatencyStore`] saw, by kind, and the longest chain of them made one after
/// another.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundTrips {
    /// Puts of log versions (a path with a `log` or `_delta_log` folder), put-if-absent or not.
    pub log_puts: u64,
    /// Puts of split objects (a path with a `splits` folder).
    pub object_puts: u64,
    /// Every other put (checkpoints, gate leases), multipart uploads counted once.
    pub other_puts: u64,
    /// Of all the puts above, those made put-if-absent (`PutMode::Create`).
    pub put_if_absent: u64,
    /// GETs, ranged ones included, found or not.
    pub gets: u64,
    /// HEADs.
    pub heads: u64,
    /// Listings, each call once.
    pub lists: u64,
    /// Deletes and copies.
    pub deletes: u64,
    /// GETs that found a log version (a path with a `log` folder) one found before since the
    /// last take: a version read twice.
    pub log_rereads: u64,
    /// The longest chain of requests each made after the one before it ended.
    pub sequential: u64,
}

impl RoundTrips {
    /// Every request, whatever its kind.
    pub fn requests(&self) -> u64 {
        self.log_puts
            + self.object_puts
            + self.other_puts
            + self.gets
            + self.heads
            + self.lists
            + self.deletes
    }
}

impl fmt::Display for RoundTrips {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests ({} log puts, {} object puts, {} other puts, {} GET, {} HEAD, {} LIST, \
             {} deletes; {} of the puts put-if-absent), {} sequential round trips",
            self.requests(),
            self.log_puts,
            self.object_puts,
            self.other_puts,
            self.gets,
            self.heads,
            self.lists,
            self.deletes,
            self.put_if_absent,
            self.sequential
        )
    }
}

/// An [`ObjectStore`] that sleeps `latency` before forwarding each request to another one, and
/// counts it.
#[derive(Debug)]
pub struct LatencyStore {
    inner: Arc<dyn ObjectStore>,
    latency: Duration,
    // A std mutex: held for one increment, never across an await.
    counts: Mutex<RoundTrips>,
    /// The longest chain among the requests that ended since the last take (shared with the
    /// listings in flight, whose streams outlive the call that made them).
    chain: Arc<AtomicU64>,
    /// The log versions found by a GET since the last take.
    logs_read: Mutex<std::collections::HashSet<Path>>,
}

/// Which counter a request goes to.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Put { create: bool },
    Get,
    Head,
    List,
    Delete,
}

impl LatencyStore {
    /// `inner`, every request answered `latency` late.
    pub fn new(inner: Arc<dyn ObjectStore>, latency: Duration) -> Self {
        Self {
            inner,
            latency,
            counts: Mutex::new(RoundTrips::default()),
            chain: Arc::new(AtomicU64::new(0)),
            logs_read: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// The requests since the last take (or since the store was made), and their longest
    /// chain; counting starts again from zero. Take it once the operation measured has ended
    /// and before the next begins.
    pub fn take(&self) -> RoundTrips {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let mut taken = std::mem::take(&mut *counts);
        taken.sequential = self.chain.swap(0, Ordering::SeqCst);
        self.logs_read
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        taken
    }

    /// Counts a request to `location` and waits out the latency; returns its place in the
    /// chain, for [`Self::ended`].
    async fn begin(&self, kind: Kind, location: Option<&Path>) -> u64 {
        let place = self.count(kind, location);
        tokio::time::sleep(self.latency).await;
        place
    }

    /// Counts a request to `location`; returns its place in the chain: one after the longest
    /// chain of the requests that ended before it.
    fn count(&self, kind: Kind, location: Option<&Path>) -> u64 {
        {
            let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
            match kind {
                Kind::Put { create } => {
                    let folder = |name: &str| {
                        location.is_some_and(|path| path.parts().any(|part| part.as_ref() == name))
                    };
                    if folder("log") || folder("_delta_log") {
                        counts.log_puts += 1;
                    } else if folder("splits") {
                        counts.object_puts += 1;
                    } else {
                        counts.other_puts += 1;
                    }
                    counts.put_if_absent += u64::from(create);
                }
                Kind::Get => counts.gets += 1,
                Kind::Head => counts.heads += 1,
                Kind::List => counts.lists += 1,
                Kind::Delete => counts.deletes += 1,
            }
        }
        self.chain.load(Ordering::SeqCst) + 1
    }

    fn ended(&self, place: u64) {
        self.chain.fetch_max(place, Ordering::SeqCst);
    }
}

impl fmt::Display for LatencyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Latency({:?}, {})", self.latency, self.inner)
    }
}

// Only the trait's required methods are forwarded: its provided ones call these, so every
// request is counted, and delayed, once.
#[async_trait]
impl ObjectStore for LatencyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let create = matches!(opts.mode, PutMode::Create);
        let place = self.begin(Kind::Put { create }, Some(location)).await;
        let result = self.inner.put_opts(location, payload, opts).await;
        self.ended(place);
        result
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let place = self
            .begin(Kind::Put { create: false }, Some(location))
            .await;
        let result = self.inner.put_multipart_opts(location, opts).await;
        self.ended(place);
        result
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let kind = if options.head { Kind::Head } else { Kind::Get };
        let place = self.begin(kind, Some(location)).await;
        let result = self.inner.get_opts(location, options).await;
        let is_log = location.parts().any(|part| part.as_ref() == "log");
        if result.is_ok() && is_log && matches!(kind, Kind::Get) {
            let first = self
                .logs_read
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(location.clone());
            if !first {
                self.counts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .log_rereads += 1;
            }
        }
        self.ended(place);
        result
    }

    async fn delete(&self, location: &Path) -> object_store::Result<()> {
        let place = self.begin(Kind::Delete, Some(location)).await;
        let result = self.inner.delete(location).await;
        self.ended(place);
        result
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        // The stream is polled after this call returns: it owns what it needs, waits out the
        // latency when first polled, and ends its place in the chain once the listing is read.
        let place = self.count(Kind::List, prefix);
        let (inner, prefix) = (Arc::clone(&self.inner), prefix.cloned());
        let (latency, chain) = (self.latency, Arc::clone(&self.chain));
        futures::stream::once(async move {
            tokio::time::sleep(latency).await;
            let listed: Vec<_> = inner.list(prefix.as_ref()).collect().await;
            chain.fetch_max(place, Ordering::SeqCst);
            futures::stream::iter(listed)
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let place = self.begin(Kind::List, prefix).await;
        let result = self.inner.list_with_delimiter(prefix).await;
        self.ended(place);
        result
    }

    async fn copy(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        let place = self.begin(Kind::Delete, Some(to)).await;
        let result = self.inner.copy(from, to).await;
        self.ended(place);
        result
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        let place = self.begin(Kind::Delete, Some(to)).await;
        let result = self.inner.copy_if_not_exists(from, to).await;
        self.ended(place);
        result
    }
}

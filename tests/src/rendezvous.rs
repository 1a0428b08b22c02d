//! A store wrapper that makes two processes meet: each holds its own [`RendezvousStore`]
//! over the same store, and once armed, the first request of the chosen kind waits until the
//! other process's store has reached its own. Tests use it to make a race happen on every
//! backend and every run, instead of hoping the scheduler interleaves two tasks.
//!
//! Two writers that meet before their conditional put of the next log version have both read
//! the version before it, so one of them loses the put; two reconcilers that meet before
//! reading their first orphan object have both listed the same orphans, so they contend for
//! every one.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMode,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// Where two processes meet: a request each of them makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeetingPoint {
    /// A put-if-absent of a path with this segment (`"/catalog/log/"`: a commit of the
    /// object-storage catalog).
    CreateUnder(&'static str),
    /// A GET (not a HEAD) of a path with this segment (`"/splits/"`: a split object).
    GetUnder(&'static str),
}

/// The meeting two [`RendezvousStore`]s share.
#[derive(Debug)]
pub struct Meeting {
    barrier: tokio::sync::Barrier,
    patience: Duration,
    met: AtomicU64,
    missed: AtomicU64,
}

impl Meeting {
    /// A meeting of two, where each waits at most `patience` for the other.
    pub fn new(patience: Duration) -> Arc<Self> {
        Arc::new(Self {
            barrier: tokio::sync::Barrier::new(2),
            patience,
            met: AtomicU64::new(0),
            missed: AtomicU64::new(0),
        })
    }

    /// Arrivals that found the other process there (or were found by it).
    pub fn met(&self) -> u64 {
        self.met.load(Ordering::SeqCst)
    }

    /// Arrivals that gave up waiting: the race the test wanted did not happen. A test asserts
    /// this is 0; after a miss, later meetings are no longer paired reliably.
    pub fn missed(&self) -> u64 {
        self.missed.load(Ordering::SeqCst)
    }

    async fn attend(&self) {
        match tokio::time::timeout(self.patience, self.barrier.wait()).await {
            Ok(_) => self.met.fetch_add(1, Ordering::SeqCst),
            Err(_) => self.missed.fetch_add(1, Ordering::SeqCst),
        };
    }
}

/// One process's view of the store: forwards everything, and once armed holds the next
/// request at its meeting point until the other process gets to its own.
#[derive(Debug)]
pub struct RendezvousStore {
    inner: Arc<dyn ObjectStore>,
    meeting: Arc<Meeting>,
    point: MeetingPoint,
    armed: AtomicBool,
}

impl RendezvousStore {
    pub fn new(inner: Arc<dyn ObjectStore>, meeting: Arc<Meeting>, point: MeetingPoint) -> Self {
        Self {
            inner,
            meeting,
            point,
            armed: AtomicBool::new(false),
        }
    }

    /// The next request at the meeting point waits for the other process.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    async fn meet_if_armed(&self, here: bool) {
        if here && self.armed.swap(false, Ordering::SeqCst) {
            self.meeting.attend().await;
        }
    }
}

impl fmt::Display for RendezvousStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rendezvous({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for RendezvousStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let here = match self.point {
            MeetingPoint::CreateUnder(segment) => {
                opts.mode == PutMode::Create && location.as_ref().contains(segment)
            }
            MeetingPoint::GetUnder(_) => false,
        };
        self.meet_if_armed(here).await;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let here = match self.point {
            MeetingPoint::GetUnder(segment) => !options.head && location.as_ref().contains(segment),
            MeetingPoint::CreateUnder(_) => false,
        };
        self.meet_if_armed(here).await;
        self.inner.get_opts(location, options).await
    }

    async fn delete(&self, location: &Path) -> object_store::Result<()> {
        self.inner.delete(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        self.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        self.inner.copy_if_not_exists(from, to).await
    }
}

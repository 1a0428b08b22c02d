//! The simulated object store: object_store's in-memory store, with every request passed
//! through the run's fault plan, and every object stamped with simulated time.
//!
//! Before each request it draws from the seed: a latency (simulated ms, so that other tasks run
//! meanwhile), and, while faults are on, a failure before the effect (nothing written), or a
//! failure after it (written, yet answered with an error: the outcome is unknown to the
//! caller, as after a timeout that fired while the request landed), and, rarely, a stall: the
//! request waits longer than any lease before its effect (a process paused by the host, a
//! garbage collector or a swap storm, that resumes and carries on as if no time had passed).
//! Every request is one line of the run's trace.
//!
//! Each replica reaches the store through a view of its own ([`SimStore::for_replica`]), so
//! that a whole replica can be paused ([`SimStore::pause_replica`]): its requests wait before
//! their effect and its answers wait before they reach it, as for a process stopped by its host
//! (SIGSTOP, a VM migration, a long GC) while its clock, and everyone else, goes on.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures::stream::{self, BoxStream, StreamExt};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use crate::rng::SimRng;
use crate::time::SimTime;
use crate::trace::Trace;

/// How often requests fail, and how slow they are, while faults are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultRates {
    /// Percent of requests that fail before their effect.
    pub fail_before_pct: u64,
    /// Percent of writes that land and are answered with an error.
    pub fail_after_pct: u64,
    /// The longest latency of a request, in simulated ms.
    pub max_latency_ms: u64,
    /// Per mille of requests that stall before their effect, and for how long at least (a
    /// stall lasts up to half as long again), in simulated ms.
    pub stall_per_mille: u64,
    pub stall_ms: u64,
}

impl FaultRates {
    /// No failures, and requests that take no time: a run with its faults shrunk away.
    pub const NONE: FaultRates = FaultRates {
        fail_before_pct: 0,
        fail_after_pct: 0,
        max_latency_ms: 0,
        stall_per_mille: 0,
        stall_ms: 0,
    };
}

/// What the plan decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    Before,
    After,
    /// The process serving the request crashed at or before this request ([`AimedCrash`]):
    /// it never takes effect. `landed` when the crash came right after this request's effect.
    Crashed {
        landed: bool,
    },
}

impl Fault {
    /// Whether the request fails before its effect.
    fn before(self) -> bool {
        matches!(self, Fault::Before | Fault::Crashed { landed: false })
    }
}

tokio::task_local! {
    /// The crash aimed at the request this task is serving, if any ([`with_aimed_crash`]).
    static AIMED: AimedCrash;
}

/// A crash aimed at one write (a put or a delete, counted from 1) of the request a task
/// serves: before that write's effect, or right after it. From then on every request of the
/// task fails before its effect, as when the process serving it is gone. Faults drawn per
/// request almost never fall between two chosen writes of one step (an abort's record of its
/// end and the deletion of its intent, say); an aimed crash falls there as often as anywhere.
#[derive(Debug)]
pub struct AimedCrash {
    at_write: usize,
    after: bool,
    writes: Cell<usize>,
    crashed: Cell<bool>,
}

impl AimedCrash {
    /// A crash at write `at_write` (from 1), after its effect when `after`.
    pub fn new(at_write: usize, after: bool) -> Self {
        Self {
            at_write: at_write.max(1),
            after,
            writes: Cell::new(0),
            crashed: Cell::new(false),
        }
    }

    /// What a request meets: the crash, once it came; the write aimed at; or nothing.
    fn meet(&self, writes: bool) -> Option<Fault> {
        if self.crashed.get() {
            return Some(Fault::Crashed { landed: false });
        }
        if !writes {
            return None;
        }
        self.writes.set(self.writes.get() + 1);
        if self.writes.get() < self.at_write {
            return None;
        }
        self.crashed.set(true);
        Some(Fault::Crashed { landed: self.after })
    }
}

/// Runs `work` (one request a replica serves) with `crash` aimed at it; answers its output
/// and whether the crash came (then the output is whatever the work made of a store that
/// stopped answering, and its caller must not believe it).
pub async fn with_aimed_crash<F: std::future::Future>(
    crash: AimedCrash,
    work: F,
) -> (F::Output, bool) {
    AIMED
        .scope(crash, async {
            let output = work.await;
            (output, AIMED.with(|crash| crash.crashed.get()))
        })
        .await
}

/// The simulated store; see the module doc. Its state is shared, so that a listing (a stream
/// that outlives the call) can draw its fault when it is first polled.
#[derive(Clone)]
pub struct SimStore {
    shared: Arc<Shared>,
    /// The replica whose view this is, if any: paused with it.
    replica: Option<usize>,
}

struct Shared {
    inner: InMemory,
    rng: Mutex<SimRng>,
    rates: FaultRates,
    faults_on: AtomicBool,
    time: SimTime,
    /// Each object's simulated last-modified time (the in-memory store stamps the host's).
    modified: Mutex<HashMap<Path, i64>>,
    trace: Trace,
    /// Trace the text of every catalog log version put (`mend-sim --payloads`).
    trace_log_payloads: bool,
    requests: AtomicU64,
    failed: AtomicU64,
    /// Until when (simulated ms) each paused replica is paused.
    paused_until: Mutex<HashMap<usize, i64>>,
}

impl SimStore {
    /// An empty store whose faults draw from `rng`.
    pub fn new(
        rng: SimRng,
        rates: FaultRates,
        time: SimTime,
        trace: Trace,
        trace_log_payloads: bool,
    ) -> Self {
        let shared = Arc::new(Shared {
            inner: InMemory::new(),
            rng: Mutex::new(rng),
            rates,
            faults_on: AtomicBool::new(true),
            time,
            modified: Mutex::default(),
            trace,
            trace_log_payloads,
            requests: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            paused_until: Mutex::default(),
        });
        Self {
            shared,
            replica: None,
        }
    }

    /// Replica `index`'s view of the store: the same objects, paused when it is.
    pub fn for_replica(&self, index: usize) -> SimStore {
        Self {
            shared: Arc::clone(&self.shared),
            replica: Some(index),
        }
    }

    /// Pauses replica `index` for `length_ms` (simulated) from now: what it sends waits
    /// before its effect, and what it is answered waits before it reaches it.
    pub fn pause_replica(&self, index: usize, length_ms: u64) {
        let until_ms = self.shared.time.now_ms().saturating_add(length_ms as i64);
        self.shared
            .paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(index, until_ms);
    }

    /// Stops injecting failures, latency and pauses (the run's quiet phase, for liveness).
    pub fn stop_faults(&self) {
        self.shared.faults_on.store(false, Ordering::SeqCst);
        self.shared
            .paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Requests answered so far, and how many of them with an injected failure.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.requests.load(Ordering::SeqCst),
            self.shared.failed.load(Ordering::SeqCst),
        )
    }
}

impl Shared {
    /// Draws the request's latency and fault, waits out the latency, and records it.
    async fn enter(
        &self,
        replica: Option<usize>,
        request: &str,
        location: &str,
        writes: bool,
    ) -> Fault {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let (latency_ms, fault) = {
            let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
            if !self.faults_on.load(Ordering::SeqCst) {
                (0, Fault::None)
            } else {
                let mut latency_ms = rng.below(self.rates.max_latency_ms + 1);
                // Drawn only when stalls are on, so that a plan without them draws as before.
                if self.rates.stall_per_mille > 0 && rng.below(1000) < self.rates.stall_per_mille {
                    let stall = rng.between(self.rates.stall_ms, self.rates.stall_ms * 3 / 2);
                    if crate::faults::allow() {
                        latency_ms += stall;
                    }
                }
                let roll = rng.below(100);
                let fault = if roll < self.rates.fail_before_pct {
                    Fault::Before
                } else if writes && roll < self.rates.fail_before_pct + self.rates.fail_after_pct {
                    Fault::After
                } else {
                    Fault::None
                };
                let fault = if fault != Fault::None && !crate::faults::allow() {
                    Fault::None
                } else {
                    fault
                };
                (latency_ms, fault)
            }
        };
        // Decided after the draws, so that an aimed crash moves no other request's fault.
        let fault = AIMED
            .try_with(|crash| crash.meet(writes))
            .ok()
            .flatten()
            .unwrap_or(fault);
        if latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(latency_ms)).await;
        } else {
            // Even an instant request lets other tasks run: an await point of the real store.
            tokio::task::yield_now().await;
        }
        self.hold(replica).await;
        let stalled = if latency_ms > self.rates.max_latency_ms {
            " (after a stall)"
        } else {
            ""
        };
        let what = match fault {
            Fault::None => stalled,
            Fault::Before => " (fails before)",
            Fault::After => " (lands, then fails)",
            Fault::Crashed { landed: false } => " (its process crashed before it)",
            Fault::Crashed { landed: true } => " (lands, then its process crashes)",
        };
        self.trace.line(format!("store {request} {location}{what}"));
        if fault != Fault::None {
            self.failed.fetch_add(1, Ordering::SeqCst);
        }
        fault
    }

    /// Waits while `replica` is paused.
    async fn hold(&self, replica: Option<usize>) {
        let Some(replica) = replica else { return };
        loop {
            let until = self
                .paused_until
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&replica)
                .copied();
            let now = self.time.now_ms();
            match until {
                Some(until) if until > now => {
                    tokio::time::sleep(Duration::from_millis((until - now) as u64)).await;
                }
                _ => return,
            }
        }
    }

    fn injected(request: &str, location: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "simulated",
            source: format!("injected failure of {request} {location}").into(),
        }
    }

    fn stamp(&self, location: &Path) {
        self.modified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(location.clone(), self.time.now_ms());
    }

    fn restamp(&self, mut meta: ObjectMeta) -> ObjectMeta {
        let modified = self.modified.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ms) = modified.get(&meta.location)
            && let Some(at) = DateTime::<Utc>::from_timestamp_millis(*ms)
        {
            meta.last_modified = at;
        }
        meta
    }
}

impl fmt::Debug for SimStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimStore")
    }
}

impl fmt::Display for SimStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimStore")
    }
}

#[async_trait]
impl ObjectStore for SimStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let fault = self
            .shared
            .enter(self.replica, "put", location.as_ref(), true)
            .await;
        if self.shared.trace_log_payloads && location.as_ref().contains("/catalog/log/") {
            // What each catalog log version says, for reading a failure's trace.
            let bytes: Vec<u8> = payload.iter().flat_map(|chunk| chunk.to_vec()).collect();
            let text = String::from_utf8_lossy(&bytes);
            let shown: String = text.chars().take(600).collect();
            self.shared.trace.line(format!("  payload {shown}"));
        }
        if fault.before() {
            return Err(Shared::injected("put", location.as_ref()));
        }
        let put = self.shared.inner.put_opts(location, payload, opts).await;
        if put.is_ok() {
            self.shared.stamp(location);
        }
        self.shared.hold(self.replica).await;
        match fault {
            Fault::After | Fault::Crashed { .. } if put.is_ok() => {
                Err(Shared::injected("put", location.as_ref()))
            }
            _ => put,
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        // mend's objects are put whole; a multipart upload would bypass the plan.
        self.shared.stamp(location);
        self.shared.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if self
            .shared
            .enter(self.replica, "get", location.as_ref(), false)
            .await
            .before()
        {
            return Err(Shared::injected("get", location.as_ref()));
        }
        let got = self.shared.inner.get_opts(location, options).await;
        self.shared.hold(self.replica).await;
        let mut got = got?;
        got.meta = self.shared.restamp(got.meta);
        Ok(got)
    }

    async fn delete(&self, location: &Path) -> object_store::Result<()> {
        let fault = self
            .shared
            .enter(self.replica, "delete", location.as_ref(), true)
            .await;
        if fault.before() {
            return Err(Shared::injected("delete", location.as_ref()));
        }
        let deleted = self.shared.inner.delete(location).await;
        self.shared
            .modified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(location);
        self.shared.hold(self.replica).await;
        match fault {
            Fault::After | Fault::Crashed { .. } if deleted.is_ok() => {
                Err(Shared::injected("delete", location.as_ref()))
            }
            _ => deleted,
        }
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        // The fault is drawn, and the objects listed, when the listing is first polled, as a
        // real listing's first page is requested then.
        let shared = Arc::clone(&self.shared);
        let replica = self.replica;
        let prefix = prefix.cloned();
        stream::once(async move {
            let location = prefix.as_ref().map_or_else(String::new, |p| p.to_string());
            if shared
                .enter(replica, "list", &location, false)
                .await
                .before()
            {
                return vec![Err(Shared::injected("list", &location))];
            }
            let listed: Vec<_> = shared.inner.list(prefix.as_ref()).collect().await;
            shared.hold(replica).await;
            listed
                .into_iter()
                .map(|meta| meta.map(|meta| shared.restamp(meta)))
                .collect()
        })
        .flat_map(stream::iter)
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let location = prefix.map_or_else(String::new, |p| p.to_string());
        if self
            .shared
            .enter(self.replica, "list", &location, false)
            .await
            .before()
        {
            return Err(Shared::injected("list", &location));
        }
        let listed = self.shared.inner.list_with_delimiter(prefix).await;
        self.shared.hold(self.replica).await;
        let mut listed = listed?;
        listed.objects = listed
            .objects
            .into_iter()
            .map(|meta| self.shared.restamp(meta))
            .collect();
        Ok(listed)
    }

    async fn copy(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        self.shared.stamp(to);
        self.shared.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        let copied = self.shared.inner.copy_if_not_exists(from, to).await;
        if copied.is_ok() {
            self.shared.stamp(to);
        }
        copied
    }
}

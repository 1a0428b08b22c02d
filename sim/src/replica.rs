//! A replica of the simulated deployment: the process serving it (an engine of its own, its
//! fleet membership), which may crash and be started again, as a service manager restarts a
//! crashed `mend serve`.
//!
//! A crash stops everything the process was doing where it was: each request it was serving
//! ([`Replica::serve`]), its supervisor's sweep and its heartbeat race the crash, and lose it
//! at whatever await point they had reached, their futures dropped. What it held in memory (the
//! catalog's cached state, the policy it had installed, its gate leases, its membership) is
//! gone with it; what it had written stays. The new process is a new member of the fleet (a
//! new replica id) and a new gate holder, and starts with the default policy until it follows
//! the registry.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use mend::runtime::registry::PolicyRegistry;
use mend::{Engine, MendError};

use crate::fleet::Fleet;

/// How a replica's process is started: given its incarnation (0 at first, one more at each
/// restart), the process.
pub(crate) type Start = Arc<dyn Fn(u32) -> Process + Send + Sync>;

/// One replica; see the module doc.
#[derive(Clone)]
pub(crate) struct Replica {
    pub index: usize,
    /// How far its host's clock is off, in ms (the same for each of its processes).
    pub skew_ms: i64,
    /// The deployment's policy registry, beside the split objects: the same for every
    /// replica.
    pub registry: PolicyRegistry,
    process: Arc<Mutex<Process>>,
    start: Start,
}

/// One process of a replica.
#[derive(Clone)]
pub(crate) struct Process {
    pub engine: Engine,
    /// Its fleet membership, in runs whose replicas hold them.
    pub fleet: Option<Fleet>,
    /// 0 for the first process, one more at each restart.
    pub incarnation: u32,
    crash: Arc<Crash>,
}

/// Whether a process crashed, and its waiters. A `Notify` rather than a `watch` channel: the
/// channel wakes its receivers in an order drawn from tokio's own random source, which no seed
/// decides, and a replay went two ways (seed 4242, two writers' requests cut off by one
/// crash); `notify_waiters` wakes them in the order they began waiting.
#[derive(Debug, Default)]
struct Crash {
    crashed: AtomicBool,
    waiters: Notify,
}

impl Process {
    /// A running process.
    pub(crate) fn new(engine: Engine, fleet: Option<Fleet>, incarnation: u32) -> Self {
        Self {
            engine,
            fleet,
            incarnation,
            crash: Arc::default(),
        }
    }

    /// Resolves once this process has crashed.
    pub(crate) async fn crashed(&self) {
        loop {
            // Registered before the flag is read: a crash in between still wakes it.
            let notified = self.crash.waiters.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.crash.crashed.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }

    /// Runs `work` unless this process crashes first: `None` then (the work stopped at the
    /// await point it had reached).
    pub(crate) async fn unless_crashed<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            biased;
            () = self.crashed() => None,
            done = work => Some(done),
        }
    }
}

impl Replica {
    /// Replica `index`, its first process started by `start`.
    pub(crate) fn new(index: usize, skew_ms: i64, registry: PolicyRegistry, start: Start) -> Self {
        Self {
            index,
            skew_ms,
            registry,
            process: Arc::new(Mutex::new(start(0))),
            start,
        }
    }

    /// The process serving the replica now.
    pub(crate) fn process(&self) -> Process {
        self.process
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The engine of the process serving the replica now.
    pub(crate) fn engine(&self) -> Engine {
        self.process().engine
    }

    /// Crashes the running process and starts the next; returns the new one's incarnation.
    pub(crate) fn crash_and_restart(&self) -> u32 {
        let mut process = self.process.lock().unwrap_or_else(PoisonError::into_inner);
        let next = (self.start)(process.incarnation + 1);
        let crashed = std::mem::replace(&mut *process, next);
        crashed.crash.crashed.store(true, Ordering::SeqCst);
        // What it ran in the background after an answer dies with it.
        crashed.engine.stop_cleanups();
        crashed.crash.waiters.notify_waiters();
        process.incarnation
    }

    /// Runs `step` on the process serving the replica now; if that process crashes before
    /// the step ends, the step stops where it was and the client is told the outcome is
    /// unknown, as when a server dies with a request in flight.
    pub(crate) async fn serve<T, Fut>(
        &self,
        step: impl FnOnce(Engine) -> Fut,
    ) -> Result<T, MendError>
    where
        Fut: Future<Output = Result<T, MendError>>,
    {
        let process = self.process();
        process
            .unless_crashed(step(process.engine.clone()))
            .await
            .unwrap_or_else(|| Err(crash_error(self.index)))
    }
}

/// What a client is told when replica `index`'s process crashes with its request in flight:
/// the outcome is unknown.
pub(crate) fn crash_error(index: usize) -> MendError {
    MendError::Unavailable {
        message: format!("replica {index} crashed while it served the request"),
        source: None,
    }
}

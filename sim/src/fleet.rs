//! The fleet in a simulated run, and replicas paused as a whole.
//!
//! - **Membership.** In most runs each replica holds a membership lease as `mend serve` does:
//!   the object-store membership (`mend::fleet::ObjectStoreMembership`) over the replica's
//!   view of the store, timed by the store's stamps (simulated time) whatever the replica's
//!   skewed clock says, renewed on a beat of its own ([`heartbeats`]), and its supervisor
//!   sweeps the dataset only while its last view says it owns it and its lease is live by its
//!   own monotonic clock (tokio's, simulated) ([`Fleet::may_sweep`]), the rule of `mend
//!   serve`'s supervisor. In the other runs every replica sweeps whenever it likes: ownership as wrong
//!   as it can be, which the gates alone must fence.
//! - **Pauses and crashes.** Now and then a whole replica is stopped ([`replica_faults`]):
//!   paused (every request it sends waits before its effect and every answer before it
//!   reaches it: the store's view of that replica is paused, while time and the other
//!   replicas go on, as for a process stopped by its host), or crashed and started again
//!   ([`crate::replica`]: everything it was doing stops where it was, and a new process, a
//!   new member, takes its place). A pause longer than the membership lease, or a crash, lets
//!   another replica take the dataset over; a pause longer than the gates' lease lets it take
//!   the gate from a sweep paused half way, which then resumes.
//!
//! Every heartbeat's view, pause and restart goes in the history; [`crate::check::fleet`]
//! holds the views to what the membership promises.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mend::clock::Clock;
use mend::fleet::{FleetView, Membership, ObjectStoreMembership};
use object_store::ObjectStore;
use object_store::path::Path;

use crate::check::{HeartbeatRecord, History, PauseRecord, RestartRecord};
use crate::replica::Replica;
use crate::rng::SimRng;
use crate::schedule::pause;
use crate::store::SimStore;
use crate::trace::Trace;

/// A replica's membership lease: renewed every [`HEARTBEAT_MS`], so a few failed heartbeats in
/// a row, a stalled request or a pause lets it run out.
const MEMBER_LEASE: Duration = Duration::from_secs(5);
/// How often a replica renews its membership, at least and at most, in simulated ms.
const HEARTBEAT_MS: (u64, u64) = (700, 1_300);
/// How long a pause lasts at least and at most, in simulated ms: from shorter than the
/// membership lease to longer than the gates' lease and its allowance (11 s).
const PAUSE_MS: (u64, u64) = (2_000, 14_000);

/// A replica's membership, and the fleet as its last heartbeat saw it.
#[derive(Clone)]
pub(crate) struct Fleet {
    membership: Arc<ObjectStoreMembership>,
    view: Arc<Mutex<Option<FleetView>>>,
}

impl Fleet {
    /// The membership of replica `index`'s process `incarnation` over `store` (the replica's
    /// view of the run's store), timed by the store; `clock`, the replica's, judges only
    /// heartbeats of the first format, which no run writes.
    pub(crate) fn new(
        index: usize,
        incarnation: u32,
        store: Arc<dyn ObjectStore>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            membership: Arc::new(ObjectStoreMembership::new(
                store,
                Path::default(),
                replica_id(index, incarnation),
                MEMBER_LEASE,
                clock,
            )),
            view: Arc::default(),
        }
    }

    /// Whether this replica may start a sweep of `dataset_id`: it owns it by its last view and
    /// its lease is live by its own monotonic clock (`mend serve`'s supervisor's rule).
    pub(crate) fn may_sweep(&self, dataset_id: &str) -> bool {
        let view = self.view.lock().unwrap_or_else(PoisonError::into_inner);
        view.as_ref()
            .is_some_and(|view| view.lease_is_live() && view.owns(dataset_id))
    }
}

/// The replica id (and gate holder) of replica `index`'s process `incarnation`: a restarted
/// replica is a new member, as `mend serve` names each process anew; a lapsed one joins again
/// under its id, with a new epoch.
pub(crate) fn replica_id(index: usize, incarnation: u32) -> String {
    match incarnation {
        0 => format!("replica-{index}"),
        _ => format!("replica-{index}.{incarnation}"),
    }
}

/// One heartbeat of replica `index`, its view kept; what it saw, if it was answered.
/// `since_ms` is when the first of the heartbeats since its last answered one started (an
/// unanswered one may have claimed the epoch this one reports).
pub(crate) async fn heartbeat(
    index: usize,
    fleet: &Fleet,
    since_ms: u64,
    trace: &Trace,
) -> Option<HeartbeatRecord> {
    let view = match fleet.membership.heartbeat().await {
        Ok(view) => view,
        Err(error) => {
            trace.line(format!("replica {index} heartbeat: {error}"));
            return None;
        }
    };
    let of = |members: &[mend::fleet::Member]| -> Vec<(String, u64)> {
        members
            .iter()
            .map(|m| (m.replica_id.clone(), m.epoch))
            .collect()
    };
    // The end of its lease in simulated ms, which may be past already (a late answer).
    let answered_ms = trace.now_ms();
    let now = tokio::time::Instant::now();
    let lease_live_until_ms = if view.lease_live_until >= now {
        answered_ms.saturating_add((view.lease_live_until - now).as_millis() as u64)
    } else {
        answered_ms.saturating_sub((now - view.lease_live_until).as_millis() as u64)
    };
    let beat = HeartbeatRecord {
        replica: index,
        replica_id: fleet.membership.replica_id().to_string(),
        started_ms: since_ms,
        answered_ms,
        epoch: view.me.epoch,
        rejoined: view.rejoined,
        members: of(&view.members),
        expired: of(&view.expired),
        owner: view
            .owner_of(crate::schedule::DATASET)
            .map(|member| member.replica_id.clone()),
        lease_live_until_ms,
    };
    trace.line(format!(
        "replica {index} heartbeat: epoch {}{}, members {:?}, expired {:?}, owner {:?}",
        beat.epoch,
        if beat.rejoined { " (rejoined)" } else { "" },
        beat.members,
        beat.expired.iter().map(|(id, _)| id).collect::<Vec<_>>(),
        beat.owner,
    ));
    *fleet.view.lock().unwrap_or_else(PoisonError::into_inner) = Some(view);
    Some(beat)
}

/// Replica `index`'s heartbeat (see [`heartbeat`]), recorded in the history when answered;
/// whether it was.
pub(crate) async fn heartbeat_recorded(
    index: usize,
    fleet: &Fleet,
    since_ms: u64,
    history: &Mutex<History>,
    trace: &Trace,
) -> bool {
    let Some(beat) = heartbeat(index, fleet, since_ms, trace).await else {
        return false;
    };
    history
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .heartbeats
        .push(beat);
    true
}

/// Replica `index`'s membership beat, while the actors work: a heartbeat every
/// [`HEARTBEAT_MS`], whatever its supervisor is doing (as `mend serve` keeps its own beat, so
/// that a long sweep does not let its lease run out).
pub(crate) async fn heartbeats(
    index: usize,
    replica: Replica,
    mut rng: SimRng,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<History>>,
    trace: Trace,
) {
    // (incarnation, when the first heartbeat since its last answered one started)
    let mut since: Option<(u32, u64)> = None;
    while !stop.load(Ordering::SeqCst) {
        // The process serving the replica now: after a crash, the new one's beat.
        let process = replica.process();
        let Some(fleet) = &process.fleet else { return };
        let started = match since {
            Some((incarnation, started)) if incarnation == process.incarnation => started,
            _ => trace.now_ms(),
        };
        since = Some((process.incarnation, started));
        let answered = process
            .unless_crashed(heartbeat_recorded(index, fleet, started, &history, &trace))
            .await;
        if answered == Some(true) {
            since = None;
        }
        pause(&mut rng, HEARTBEAT_MS.0, HEARTBEAT_MS.1).await;
    }
}

/// Percent of replica faults that crash the replica's process (the others pause it).
const CRASH_PCT: u64 = 40;

/// In `percent` of runs, stops a whole replica once or twice while the actors work: pauses it
/// for [`PAUSE_MS`], or crashes its process and starts a new one (see the module doc).
pub(crate) async fn replica_faults(
    store: SimStore,
    replicas: Vec<Replica>,
    percent: u64,
    mut rng: SimRng,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<History>>,
    trace: Trace,
) {
    if !rng.chance(percent) {
        return;
    }
    for _ in 0..rng.between(1, 2) {
        pause(&mut rng, 1_000, 20_000).await;
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let replica = &replicas[rng.below(replicas.len() as u64) as usize];
        let at_ms = trace.now_ms();
        let crashes = rng.chance(CRASH_PCT);
        let length_ms = rng.between(PAUSE_MS.0, PAUSE_MS.1);
        if !crate::faults::allow() {
            continue;
        }
        if crashes {
            let incarnation = replica.crash_and_restart();
            trace.line(format!(
                "replica {} crashed; its process {incarnation} starts",
                replica.index
            ));
            history
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .restarts
                .push(RestartRecord {
                    replica: replica.index,
                    at_ms,
                    incarnation,
                });
            continue;
        }
        trace.line(format!(
            "replica {} paused for {length_ms} ms (membership lease {} ms)",
            replica.index,
            MEMBER_LEASE.as_millis()
        ));
        store.pause_replica(replica.index, length_ms);
        history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pauses
            .push(PauseRecord {
                replica: replica.index,
                from_ms: at_ms,
                until_ms: at_ms + length_ms,
            });
        tokio::time::sleep(Duration::from_millis(length_ms)).await;
        trace.line(format!("replica {} resumes", replica.index));
    }
}

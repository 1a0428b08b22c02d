//! The supervisors: they resolve the in-doubt work crashed operations leave
//! (`RecoveryRequired` on the write path) with roll-forward sweeps, off the request path, on
//! the datasets this replica owns in its fleet ([`mend::fleet`]).
//!
//! **Heartbeats** keep their own beat, every interval, whatever a round is doing: the replica
//! renews its membership lease and reads the fleet's live members; a dataset's owner is the
//! member rendezvous hashing picks. Members that appear or leave are a *rebalance*; members
//! whose lease ran out are a *takeover* of what they owned. A replica whose own lease ran out
//! (it stalled) starts no sweep until it has joined again. A round as long as a lease (a full
//! scan of many datasets on a slow store, a sweep waiting at a gate) thus never lets the
//! membership lapse.
//!
//! Every interval after the last one ended, one round runs on the fleet as the last heartbeat
//! saw it:
//! 1. **Discovery.** One call finds the datasets that may have pending intents
//!    ([`mend::catalog::Catalog::pending_datasets`]: one query on Postgres, one listing of
//!    the pending index on object storage), never a listing of every dataset. Every
//!    `full_scan_every` rounds, and at the first, a full scan lists every dataset and the
//!    intents of those this replica owns: the backstop for an intent the index may have
//!    missed.
//! 2. **Checks.** Each owned dataset with pending intents, each dataset found unavailable
//!    (retried with backoff) and each dataset a request kicked is checked: its intents are
//!    listed, and when one has outlived its owner's lease a roll-forward sweep runs under the
//!    dataset gate (which leaves a live owner's intent alone). A dataset left with no intents
//!    is taken off the pending index. A kicked dataset this replica does not own gets a read
//!    of the dataset only, so that a damaged one answers 503 here too.
//!
//! A check that fails makes the dataset *unavailable*: its requests answer 503 with the reason
//! while every other dataset keeps serving, and the check is retried with exponential backoff
//! until it succeeds. Roll-forward never undoes anyone's work; exclusive recovery stays an
//! operator's decision. Every sweep is logged with the dataset gate's fencing epoch and when
//! the gate was held (`swept dataset`), which is what shows that no two replicas swept a
//! dataset at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use mend::fleet::{FleetView, Member, Membership};
use serde::Serialize;
use tokio::sync::{Notify, watch};

use super::metrics::Metrics;
use super::writes::Writes;
use mend::Engine;
use mend::clock::{Clock, SystemClock};
use mend::engine::{IntentStatus, Outcome};
use mend::error::{MendError, Result};
use mend::model::TimestampMs;

/// How many datasets one round checks at once: half the Postgres gates' pool
/// ([`mend::gates::POSTGRES_GATE_CONNECTIONS`]), since each sweep holds a dataset gate, so that
/// the writes this replica serves still find connections.
const CHECKS_AT_ONCE: usize = 4;

#[derive(Debug, Clone, Copy)]
pub struct SupervisorOptions {
    /// How often a round runs: heartbeat, discovery, checks.
    pub interval: Duration,
    /// The longest wait between retries of a failing dataset.
    pub max_backoff: Duration,
    /// A full scan of every dataset every this many rounds (and at the first).
    pub full_scan_every: u32,
}

impl Default for SupervisorOptions {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            full_scan_every: 300,
        }
    }
}

/// What a dataset's supervisor last found.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct DatasetHealth {
    /// `None` while the dataset is served; the reason it is not otherwise.
    pub unavailable: Option<String>,
    /// When it became unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<i64>)]
    pub unavailable_since_ms: Option<TimestampMs>,
    /// Checks failed in a row.
    pub consecutive_failures: u32,
    /// Unresolved operations after the last check, `None` before the first.
    pub pending_intents: Option<usize>,
    /// Operations the last sweep could not resolve by rolling forward (blocked, refused or
    /// failed): they need an operator, for example `mend recover DATASET --mode exclusive`.
    pub needs_operator: Vec<String>,
    #[schema(value_type = Option<i64>)]
    pub last_check_ms: Option<TimestampMs>,
    pub sweeps: u64,
}

/// This replica in its fleet, as `/v1/status` reports it.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct FleetStatus {
    /// This replica.
    pub replica_id: String,
    /// The fencing epoch it joined with (0 before it joined).
    pub epoch: u64,
    /// Whether its membership lease is live by its own monotonic clock: it sweeps only while it
    /// is.
    pub member: bool,
    /// How long a membership lease lasts, in ms.
    pub lease_ms: u64,
    /// The live members at the last heartbeat, this one included.
    #[schema(value_type = Vec<Object>)]
    pub members: Vec<Member>,
    /// Members whose lease ran out without their leaving, still on record.
    #[schema(value_type = Vec<Object>)]
    pub expired: Vec<Member>,
    /// Datasets with pending intents at the last discovery, and how many this replica owns
    /// (its load).
    pub pending_datasets: usize,
    pub owned_pending_datasets: usize,
    /// Membership changes that moved datasets to or from this replica (members joining or
    /// leaving).
    pub rebalances: u64,
    /// Members found expired (dead or stalled) whose datasets this replica took a share of.
    pub takeovers: u64,
    /// Times this replica found its own lease run out and joined again.
    pub rejoins: u64,
    /// Sweeps this replica ran.
    pub sweeps: u64,
    /// What the last round's heartbeat and discovery cost: statements or requests.
    pub last_round_requests: u32,
    #[schema(value_type = Option<i64>)]
    pub last_heartbeat_ms: Option<TimestampMs>,
    /// Why the last heartbeat or discovery failed, if it did.
    pub error: Option<String>,
}

#[derive(Debug)]
struct DatasetSupervisor {
    health: RwLock<DatasetHealth>,
    /// Not checked again before this (backoff), unless kicked.
    next_check: Mutex<Instant>,
    kicked: AtomicBool,
    /// Sweeps in a row that left work only an operator can finish.
    stuck: Mutex<u32>,
}

/// The supervision of the datasets this replica owns.
#[derive(Debug)]
pub struct Supervisors {
    engine: Engine,
    options: SupervisorOptions,
    metrics: Arc<Metrics>,
    writes: Arc<Writes>,
    membership: Arc<dyn Membership>,
    shutdown: watch::Receiver<bool>,
    fleet: RwLock<FleetState>,
    /// The datasets being checked: pending, unavailable or kicked ones. It follows the pending
    /// work, not the number of datasets.
    datasets: Mutex<BTreeMap<String, Arc<DatasetSupervisor>>>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct FleetState {
    status: FleetStatus,
    view: Option<FleetView>,
    /// Why the last heartbeat failed, until one succeeds.
    heartbeat_error: Option<String>,
    /// What the last heartbeat cost (statements or requests).
    heartbeat_requests: u32,
}

impl Supervisors {
    pub fn new(
        engine: Engine,
        options: SupervisorOptions,
        metrics: Arc<Metrics>,
        writes: Arc<Writes>,
        membership: Arc<dyn Membership>,
        shutdown: watch::Receiver<bool>,
    ) -> Arc<Self> {
        let status = FleetStatus {
            replica_id: membership.replica_id().to_string(),
            lease_ms: u64::try_from(membership.lease_duration().as_millis()).unwrap_or(u64::MAX),
            ..FleetStatus::default()
        };
        // Its audit records name the replica whose supervisor decided.
        let engine = engine.acting_as(&format!("supervisor@{}", membership.replica_id()));
        Arc::new(Self {
            engine,
            options,
            metrics,
            writes,
            membership,
            shutdown,
            fleet: RwLock::new(FleetState {
                status,
                ..FleetState::default()
            }),
            datasets: Mutex::new(BTreeMap::new()),
            wake: Notify::new(),
        })
    }

    fn datasets(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<DatasetSupervisor>>> {
        self.datasets.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tracked(&self, dataset_id: &str) -> Arc<DatasetSupervisor> {
        self.datasets()
            .entry(dataset_id.to_string())
            .or_insert_with(|| {
                Arc::new(DatasetSupervisor {
                    health: RwLock::new(DatasetHealth::default()),
                    next_check: Mutex::new(Instant::now()),
                    kicked: AtomicBool::new(false),
                    stuck: Mutex::new(0),
                })
            })
            .clone()
    }

    /// Asks for a check of `dataset_id` now (a request met `RecoveryRequired` or damage).
    pub fn kick(&self, dataset_id: &str) {
        self.tracked(dataset_id)
            .kicked
            .store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    pub fn health(&self, dataset_id: &str) -> Option<DatasetHealth> {
        let supervisor = self.datasets().get(dataset_id)?.clone();
        let health = supervisor.health.read().unwrap_or_else(|p| p.into_inner());
        Some(health.clone())
    }

    pub fn all(&self) -> BTreeMap<String, DatasetHealth> {
        self.datasets()
            .iter()
            .map(|(id, supervisor)| {
                let health = supervisor.health.read().unwrap_or_else(|p| p.into_inner());
                (id.clone(), health.clone())
            })
            .collect()
    }

    /// This replica in its fleet.
    pub fn fleet(&self) -> FleetStatus {
        let state = self.fleet_state();
        let mut status = state.status.clone();
        // Live now, not at the last heartbeat: a replica that stalled says so at once.
        status.member = state.view.as_ref().is_some_and(FleetView::lease_is_live);
        status
    }

    /// The live member that owns `dataset_id`, by the last heartbeat.
    pub fn owner_of(&self, dataset_id: &str) -> Option<String> {
        let state = self.fleet_state();
        let view = state.view.as_ref()?;
        view.owner_of(dataset_id)
            .map(|member| member.replica_id.clone())
    }

    fn fleet_state(&self) -> std::sync::RwLockReadGuard<'_, FleetState> {
        self.fleet.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this replica owns `dataset_id` and its lease is live by its own monotonic clock
    /// ([`FleetView::lease_is_live`]): the condition for starting a sweep.
    fn may_sweep(&self, dataset_id: &str) -> bool {
        let state = self.fleet_state();
        let Some(view) = &state.view else {
            return false;
        };
        view.lease_is_live() && view.owns(dataset_id)
    }

    /// Runs rounds until the shutdown; then leaves the fleet, so that the others take this
    /// replica's datasets over at once. `ready` is told after each round whether its heartbeat
    /// and discovery succeeded.
    pub async fn run(
        self: Arc<Self>,
        ready: impl Fn(std::result::Result<(), String>) + Send + Sync,
    ) {
        // The first heartbeat before the first round, so that the first round knows the
        // fleet; then heartbeats keep their own beat, every interval, however long a round
        // takes: a full scan of many datasets on a slow store, or a sweep waiting at a gate,
        // must not let this replica's membership run out while it works.
        self.heartbeat().await;
        let heartbeats = async {
            let mut shutdown = self.shutdown.clone();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(self.options.interval) => {}
                    _ = shutdown.changed() => {}
                }
                if *shutdown.borrow() {
                    break;
                }
                self.heartbeat().await;
            }
        };
        let rounds = async {
            let mut shutdown = self.shutdown.clone();
            let mut round: u64 = 0;
            loop {
                if *shutdown.borrow() {
                    break;
                }
                let full_scan =
                    round.is_multiple_of(u64::from(self.options.full_scan_every.max(1)));
                round += 1;
                self.round(full_scan, &ready).await;
                tokio::select! {
                    _ = tokio::time::sleep(self.options.interval) => {}
                    _ = self.wake.notified() => {}
                    _ = shutdown.changed() => {}
                }
            }
        };
        tokio::join!(heartbeats, rounds);
        if let Err(error) = self.membership.leave().await {
            tracing::warn!(%error, "could not leave the fleet; this replica's lease runs out instead");
        }
    }

    /// One round. `ready` hears whether the heartbeat and the discovery succeeded as soon as
    /// they have, before the full scan and the checks, which may take long.
    async fn round(
        &self,
        full_scan: bool,
        ready: &(impl Fn(std::result::Result<(), String>) + Sync),
    ) {
        let (view, not_member, heartbeat_error, mut requests) = self.live_view();
        self.metrics.fleet_lease_held(view.is_some());

        // Discovery: the pending datasets, and on a full scan every dataset this replica owns
        // that has intents.
        let discovered = self.engine.catalog().pending_datasets().await;
        requests += 1;
        let mut candidates: BTreeSet<String> = BTreeSet::new();
        // What discovery said of each pending dataset (counts and lease expiries on Postgres).
        let mut indexed: BTreeMap<String, mend::catalog::PendingDataset> = BTreeMap::new();
        let mut discovery_error = None;
        match discovered {
            Ok(pending) => {
                let owned = view.as_ref().map_or(0, |view| {
                    pending
                        .iter()
                        .filter(|pending| view.owns(&pending.dataset_id))
                        .count()
                });
                {
                    let mut state = self.fleet.write().unwrap_or_else(|p| p.into_inner());
                    state.status.pending_datasets = pending.len();
                    state.status.owned_pending_datasets = owned;
                }
                self.metrics.fleet_load(pending.len(), owned);
                candidates.extend(pending.iter().map(|pending| pending.dataset_id.clone()));
                indexed.extend(
                    pending
                        .into_iter()
                        .map(|pending| (pending.dataset_id.clone(), pending)),
                );
            }
            Err(error) => discovery_error = Some(format!("discovery failed: {error}")),
        }
        let found = {
            let mut state = self.fleet.write().unwrap_or_else(|p| p.into_inner());
            state.status.last_round_requests = requests;
            // Not ready without a live membership or a discovery; a failed heartbeat while the
            // lease is still live is reported, and the replica keeps serving its datasets.
            let unready = discovery_error.or(not_member);
            state.status.error = unready.clone().or(heartbeat_error);
            unready.map_or(Ok(()), Err)
        };
        ready(found);
        if full_scan && let Some(view) = &view {
            match self.engine.catalog().list_dataset_ids().await {
                Ok(ids) => candidates.extend(ids.into_iter().filter(|id| view.owns(id))),
                Err(error) => {
                    tracing::warn!(%error, "the full scan could not list the datasets; the next one tries again");
                }
            }
        }
        // Datasets being followed already: unavailable, stuck or kicked ones.
        candidates.extend(self.datasets().keys().cloned());

        let checks = self.checks_due(candidates, view.as_ref(), &indexed);
        futures::stream::iter(checks)
            .for_each_concurrent(CHECKS_AT_ONCE, |check| async move {
                self.supervise_once(&check).await;
            })
            .await;
    }

    /// The fleet as the last heartbeat saw it, while this replica's lease is live by its own
    /// monotonic clock (none otherwise: it then sweeps nothing); why it is not a member, if it
    /// is not; the last heartbeat's error; and what the heartbeat cost.
    fn live_view(&self) -> (Option<FleetView>, Option<String>, Option<String>, u32) {
        let state = self.fleet.read().unwrap_or_else(|p| p.into_inner());
        let view = state.view.clone().filter(FleetView::lease_is_live);
        let not_member = view.is_none().then(|| {
            state
                .heartbeat_error
                .clone()
                .unwrap_or_else(|| "this replica's fleet membership is not live".to_string())
        });
        (
            view,
            not_member,
            state.heartbeat_error.clone(),
            state.heartbeat_requests,
        )
    }

    /// Which of `candidates` this round checks: owned ones kicked or due (unless discovery
    /// says every owner may still be working), and others only to follow their health. A
    /// dataset another replica owns and serves is dropped from those followed here.
    fn checks_due(
        &self,
        candidates: BTreeSet<String>,
        view: Option<&FleetView>,
        indexed: &BTreeMap<String, mend::catalog::PendingDataset>,
    ) -> Vec<Check> {
        let now_instant = Instant::now();
        let now_ms = SystemClock.now_ms();
        let mut checks = Vec::new();
        for dataset_id in candidates {
            let owned = view.is_some_and(|view| view.owns(&dataset_id));
            let supervisor = self.datasets().get(&dataset_id).cloned();
            let kicked = supervisor
                .as_ref()
                .is_some_and(|s| s.kicked.swap(false, Ordering::SeqCst));
            let due = supervisor.as_ref().is_none_or(|s| {
                *s.next_check.lock().unwrap_or_else(|p| p.into_inner()) <= now_instant
            });
            let unavailable = supervisor.as_ref().is_some_and(|s| {
                s.health
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .unavailable
                    .is_some()
            });
            let pending = indexed.get(&dataset_id);
            // Discovery already says every intent's owner may still be working (Postgres
            // knows the leases): nothing a check could do yet, so none is made.
            let all_leases_live = pending.is_some_and(|pending| {
                pending
                    .earliest_lease_expiry_ms
                    .is_some_and(|expiry| expiry > now_ms)
            });
            let check = Check {
                dataset_id: dataset_id.clone(),
                owned,
                indexed: pending.is_some(),
            };
            if owned && kicked {
                checks.push(check);
            } else if owned && due {
                if all_leases_live && supervisor.is_none() {
                    let intents = pending.and_then(|pending| pending.intents);
                    self.metrics.dataset(&dataset_id, intents, None, true);
                } else {
                    checks.push(check);
                }
            } else if !owned && (kicked || (unavailable && due)) {
                // A read of the dataset only, so that a damaged one answers 503 here too and
                // serves again here once repaired.
                checks.push(check);
            } else if !owned && supervisor.is_some() && !unavailable {
                // Another replica owns it and it serves: nothing to follow here.
                self.datasets().remove(&dataset_id);
            }
        }
        checks
    }

    /// Renews this replica's membership and follows the fleet it sees; a failure is kept for
    /// the next round to report (the replica keeps its last view while its lease is live).
    async fn heartbeat(&self) {
        let heartbeat = self.membership.heartbeat().await;
        let now = SystemClock.now_ms();
        match heartbeat {
            Ok(view) => self.follow(view, now),
            Err(error) => {
                let reason = format!("fleet heartbeat failed: {error}");
                tracing::warn!(%reason, "this replica sweeps nothing once its lease runs out, until a heartbeat succeeds");
                let mut state = self.fleet.write().unwrap_or_else(|p| p.into_inner());
                state.status.error = Some(reason.clone());
                state.heartbeat_error = Some(reason);
            }
        }
    }

    /// Takes a heartbeat's view: counts rebalances and takeovers against the last one.
    fn follow(&self, view: FleetView, now: TimestampMs) {
        let mut state = self.fleet.write().unwrap_or_else(|p| p.into_inner());
        let ids = |members: &[Member]| -> BTreeSet<String> {
            members.iter().map(|m| m.replica_id.clone()).collect()
        };
        let current = ids(&view.members);
        if let Some(previous) = &state.view {
            let before = ids(&previous.members);
            let gone: Vec<&String> = before.difference(&current).collect();
            let joined: Vec<&String> = current.difference(&before).collect();
            let expired = ids(&view.expired);
            let taken_over = gone.iter().filter(|id| expired.contains(**id)).count();
            if taken_over > 0 {
                state.status.takeovers += taken_over as u64;
                self.metrics.fleet_takeover(taken_over as u64);
                tracing::info!(
                    members = ?gone,
                    "took over the datasets of members whose lease ran out"
                );
            }
            if gone.len() > taken_over || !joined.is_empty() {
                state.status.rebalances += 1;
                self.metrics.fleet_rebalance();
                tracing::info!(joined = ?joined, left = ?gone, "the fleet changed; datasets rebalanced");
            }
        }
        if view.rejoined {
            state.status.rejoins += 1;
            tracing::warn!(
                epoch = view.me.epoch,
                "this replica's membership lease had run out: joined again with a new epoch"
            );
        }
        state.status.epoch = view.me.epoch;
        state.status.members = view.members.clone();
        state.status.expired = view.expired.clone();
        state.status.last_heartbeat_ms = Some(now);
        state.heartbeat_error = None;
        state.heartbeat_requests = view.requests;
        self.metrics
            .fleet_members(view.members.len(), view.me.epoch, &view.me.replica_id);
        state.view = Some(view);
    }

    /// One check of one dataset, recorded in its health.
    async fn supervise_once(&self, check: &Check) {
        let (dataset_id, owned) = (check.dataset_id.as_str(), check.owned);
        let supervisor = self.tracked(dataset_id);
        let checked = if owned {
            self.check(dataset_id).await
        } else {
            self.engine.dataset(dataset_id).await.map(|_| {
                Some(Checked {
                    pending: 0,
                    needs_operator: Vec::new(),
                    swept: false,
                })
            })
        };
        let checked = match checked {
            Ok(None) => return, // shutting down
            Ok(Some(check)) => Ok(check),
            Err(error) => Err(error),
        };
        let now = SystemClock.now_ms();
        match self.record(&supervisor, dataset_id, checked, now) {
            Next::Check(wait) => {
                *supervisor
                    .next_check
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Instant::now() + wait;
            }
            Next::Forget => {
                self.datasets().remove(dataset_id);
            }
            Next::Settled => {
                // Nothing left to follow: the dataset leaves the map, and the pending index,
                // until a writer puts it back.
                self.datasets().remove(dataset_id);
                // Only a dataset the index named is taken off it: a full scan's idle datasets
                // cost no request here.
                if owned
                    && check.indexed
                    && let Err(error) = self.engine.catalog().clear_pending(dataset_id).await
                {
                    tracing::debug!(
                        dataset_id,
                        %error,
                        "could not take the dataset off the pending index; a later round tries again"
                    );
                }
            }
        }
    }

    /// Records a check's result in the dataset's health and says what comes next.
    fn record(
        &self,
        supervisor: &DatasetSupervisor,
        dataset_id: &str,
        checked: Result<Checked>,
        now: TimestampMs,
    ) -> Next {
        let mut health = supervisor.health.write().unwrap_or_else(|p| p.into_inner());
        let mut stuck = supervisor.stuck.lock().unwrap_or_else(|p| p.into_inner());
        health.last_check_ms = Some(now);
        match checked {
            Ok(check) => {
                if health.unavailable.take().is_some() {
                    tracing::info!(dataset_id, "dataset is served again");
                }
                health.unavailable_since_ms = None;
                health.consecutive_failures = 0;
                health.pending_intents = Some(check.pending);
                *stuck = if check.needs_operator.is_empty() {
                    0
                } else {
                    *stuck + 1
                };
                let needing_operator = check.needs_operator.len();
                health.needs_operator = check.needs_operator;
                health.sweeps += u64::from(check.swept);
                self.metrics.dataset(
                    dataset_id,
                    Some(check.pending),
                    Some(needing_operator),
                    true,
                );
                match *stuck {
                    0 if check.pending == 0 => Next::Settled,
                    0 => Next::Check(self.options.interval),
                    rounds => Next::Check(backoff(self.options, rounds)),
                }
            }
            Err(MendError::NotFound { .. }) => {
                tracing::debug!(dataset_id, "dataset is gone; nothing left to supervise");
                Next::Forget
            }
            // Someone else holds the dataset's gate (an operator's gc or recovery, or a
            // replica finishing a sweep it began before the fleet changed): not a fault of
            // the dataset; try again next round.
            Err(MendError::Conflict { .. }) => Next::Check(self.options.interval),
            Err(error) => {
                health.consecutive_failures += 1;
                let reason = error.to_string();
                if health.unavailable.as_deref() != Some(reason.as_str()) {
                    tracing::warn!(
                        dataset_id,
                        %reason,
                        "dataset is unavailable: its requests answer 503 until a check succeeds"
                    );
                }
                health.unavailable = Some(reason);
                health.unavailable_since_ms.get_or_insert(now);
                self.metrics.dataset(dataset_id, None, None, false);
                Next::Check(backoff(self.options, health.consecutive_failures))
            }
        }
    }

    /// Lists the dataset's intents and rolls forward what can be; `None` once the server is
    /// shutting down or this replica may no longer sweep the dataset.
    async fn check(&self, dataset_id: &str) -> Result<Option<Checked>> {
        // Reading the dataset first catches a catalog that cannot be read at all.
        self.engine.dataset(dataset_id).await?;
        let intents = self.engine.catalog().list_intents(dataset_id).await?;
        // While every owner may still be working, a roll-forward sweep would only defer
        // each one: skip it, and its gate, until a lease runs out.
        let now = SystemClock.now_ms();
        if intents
            .iter()
            .all(|intent| intent.lease_expires_at_ms > now)
        {
            return Ok(Some(Checked {
                pending: intents.len(),
                needs_operator: Vec::new(),
                swept: false,
            }));
        }
        // Ownership is checked last, just before the gate: a replica whose lease ran out
        // since the round began starts nothing.
        if !self.may_sweep(dataset_id) {
            return Ok(None);
        }
        // A sweep writes: it is admitted like any write, so a graceful shutdown waits for
        // it, and none starts once the shutdown began.
        let Some(ticket) = self.writes.admit_sweep() else {
            return Ok(None);
        };
        let started = Instant::now();
        let swept = self.engine.roll_forward_gated(dataset_id).await;
        drop(ticket);
        self.metrics.sweep(started.elapsed(), swept.is_err());
        let swept = swept?;
        let epoch = self.fleet_state().status.epoch;
        tracing::info!(
            dataset_id,
            replica = %self.membership.replica_id(),
            member_epoch = epoch,
            gate_epoch = swept.gate_epoch,
            held_from_ms = swept.held_from_ms,
            held_until_ms = swept.held_until_ms,
            intents = swept.report.intents.len(),
            "swept dataset"
        );
        self.fleet
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .status
            .sweeps += 1;
        let report = swept.report;
        self.metrics.recovery(&report);
        let needs_operator = report
            .intents
            .iter()
            .filter(|intent| {
                intent.status == IntentStatus::Blocked
                    || matches!(intent.outcome, Outcome::Refused(_) | Outcome::Failed(_))
            })
            .map(|intent| intent.operation_id.clone())
            .collect();
        let pending = self.engine.catalog().list_intents(dataset_id).await?.len();
        Ok(Some(Checked {
            pending,
            needs_operator,
            swept: true,
        }))
    }
}

/// What follows a check.
enum Next {
    /// Check again after this wait (or when kicked).
    Check(Duration),
    /// Nothing pending and nothing wrong: stop following it.
    Settled,
    /// The dataset is gone.
    Forget,
}

/// A dataset a round checks.
struct Check {
    dataset_id: String,
    /// Whether this replica owns it (else only a read of the dataset).
    owned: bool,
    /// Whether discovery named it (so it is on the pending index).
    indexed: bool,
}

/// What a check found.
struct Checked {
    pending: usize,
    needs_operator: Vec<String>,
    swept: bool,
}

/// The interval doubled for each failure in a row, up to the maximum.
fn backoff(options: SupervisorOptions, failures: u32) -> Duration {
    let factor = 1u32 << failures.min(16);
    options
        .interval
        .saturating_mul(factor)
        .min(options.max_backoff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        let options = SupervisorOptions {
            interval: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            full_scan_every: 1,
        };
        let waits: Vec<u128> = (1..=6)
            .map(|failures| backoff(options, failures).as_millis())
            .collect();
        assert_eq!(waits, [200, 400, 800, 1000, 1000, 1000]);
    }

    /// Rounds far longer than the membership lease (every listing of the catalog's store takes
    /// 800 ms; the lease is 200 ms): heartbeats keep their own beat, so the replica stays a
    /// member throughout, with the epoch it joined with, and never has to join again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_round_longer_than_the_lease_keeps_the_membership() {
        use std::sync::atomic::AtomicU64;

        use mend::EngineOptions;
        use mend::catalog::ObjectStoreCatalog;
        use mend::fleet::ObjectStoreMembership;
        use mend::objects::SplitObjects;
        use mend::runtime::PolicyRuntime;
        use object_store::ObjectStore;
        use object_store::memory::InMemory;
        use object_store::path::Path;
        use object_store::throttle::{ThrottleConfig, ThrottledStore};

        let listing = Duration::from_millis(800);
        let slow: Arc<dyn ObjectStore> = Arc::new(ThrottledStore::new(
            InMemory::new(),
            ThrottleConfig {
                wait_list_per_call: listing,
                ..ThrottleConfig::default()
            },
        ));
        let catalog = ObjectStoreCatalog::new(slow.clone(), Path::from("mend"), Default::default());
        let engine = Engine::new(
            Arc::new(catalog),
            SplitObjects::new(slow, Path::from("mend")),
            PolicyRuntime::default_policy().expect("the default policy loads"),
            EngineOptions::default(),
        )
        .expect("engine starts");
        let lease = Duration::from_millis(200);
        let membership = Arc::new(ObjectStoreMembership::new(
            Arc::new(InMemory::new()),
            Path::from("mend"),
            "replica-a".into(),
            lease,
            Arc::new(SystemClock),
        ));
        let (stop, stopped) = watch::channel(false);
        let supervisors = Supervisors::new(
            engine,
            SupervisorOptions {
                interval: Duration::from_millis(50),
                max_backoff: Duration::from_secs(1),
                full_scan_every: 300,
            },
            Arc::new(Metrics::default()),
            Arc::new(Writes::new(16, 16)),
            membership,
            stopped,
        );
        let rounds = Arc::new(AtomicU64::new(0));
        let running = tokio::spawn(supervisors.clone().run({
            let rounds = Arc::clone(&rounds);
            move |_| {
                rounds.fetch_add(1, Ordering::SeqCst);
            }
        }));
        // Ten leases long; the first round (discovery and the full scan: two listings) alone
        // lasts eight.
        let mut checks = 0;
        let started = Instant::now();
        while started.elapsed() < lease * 10 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let status = supervisors.fleet();
            if status.last_heartbeat_ms.is_some() {
                assert!(
                    status.member,
                    "the membership lapsed during a round: {status:?}"
                );
                checks += 1;
            }
        }
        let status = supervisors.fleet();
        stop.send(true).expect("the supervisors listen");
        running.await.expect("the supervisors stop");
        assert_eq!(status.rejoins, 0, "{status:?}");
        assert_eq!(status.epoch, 1, "{status:?}");
        assert!(rounds.load(Ordering::SeqCst) >= 1, "no round reported");
        println!(
            "rounds of {}+ ms against a lease of {} ms: {} rounds, member at each of {checks} looks, 0 rejoins",
            listing.as_millis(),
            lease.as_millis(),
            rounds.load(Ordering::SeqCst)
        );
    }
}

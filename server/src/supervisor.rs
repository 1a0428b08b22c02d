//! One supervisor per dataset: it resolves the in-doubt work crashed operations leave
//! (`RecoveryRequired` on the write path) with roll-forward sweeps, off the request path.
//!
//! Each supervisor wakes every interval, or at once when a request is kicked back with
//! `RecoveryRequired`, lists the dataset's intents and, when one of them has outlived its
//! owner's lease, runs a roll-forward sweep (which leaves a live owner's intent alone). Work
//! a sweep leaves for an operator (blocked, refused) is swept again only with backoff. A check that fails makes
//! the dataset *unavailable*: its requests answer 503 with the reason while every other
//! dataset keeps serving, and the supervisor retries with exponential backoff until a check
//! succeeds. Roll-forward never undoes anyone's work; exclusive recovery stays an
//! operator's decision.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use mend_policy::RecoveryMode;
use serde::Serialize;
use tokio::sync::{Notify, watch};
use tracing::Instrument;

use super::metrics::Metrics;
use super::writes::Writes;
use mend::Engine;
use mend::clock::{Clock, SystemClock};
use mend::engine::{IntentStatus, Outcome};
use mend::error::{MendError, Result};
use mend::model::TimestampMs;

#[derive(Debug, Clone, Copy)]
pub struct SupervisorOptions {
    /// How often each dataset is checked when nothing kicks it.
    pub interval: Duration,
    /// The longest wait between retries of a failing dataset.
    pub max_backoff: Duration,
}

impl Default for SupervisorOptions {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
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

#[derive(Debug)]
struct DatasetSupervisor {
    health: RwLock<DatasetHealth>,
    kick: Notify,
}

/// The supervisors of every dataset the server knows.
#[derive(Debug)]
pub struct Supervisors {
    engine: Engine,
    options: SupervisorOptions,
    metrics: Arc<Metrics>,
    writes: Arc<Writes>,
    shutdown: watch::Receiver<bool>,
    datasets: Mutex<BTreeMap<String, Arc<DatasetSupervisor>>>,
}

impl Supervisors {
    pub fn new(
        engine: Engine,
        options: SupervisorOptions,
        metrics: Arc<Metrics>,
        writes: Arc<Writes>,
        shutdown: watch::Receiver<bool>,
    ) -> Arc<Self> {
        Arc::new(Self {
            engine,
            options,
            metrics,
            writes,
            shutdown,
            datasets: Mutex::new(BTreeMap::new()),
        })
    }

    fn datasets(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<DatasetSupervisor>>> {
        self.datasets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts supervising `dataset_id` unless it already is.
    pub fn supervise(self: &Arc<Self>, dataset_id: &str) {
        let mut datasets = self.datasets();
        if datasets.contains_key(dataset_id) {
            return;
        }
        let supervisor = Arc::new(DatasetSupervisor {
            health: RwLock::new(DatasetHealth::default()),
            kick: Notify::new(),
        });
        datasets.insert(dataset_id.to_string(), supervisor.clone());
        let span = tracing::info_span!("supervisor", dataset_id = %dataset_id);
        tokio::spawn(
            self.clone()
                .run(dataset_id.to_string(), supervisor)
                .instrument(span),
        );
    }

    /// Lists the catalog's datasets and supervises each.
    pub async fn discover(self: &Arc<Self>) -> Result<usize> {
        // Ids only: a dataset that cannot be read gets a supervisor too, which reports it.
        let ids = self.engine.catalog().list_dataset_ids().await?;
        for id in &ids {
            self.supervise(id);
        }
        Ok(ids.len())
    }

    /// Asks the dataset's supervisor to check now (a request met `RecoveryRequired`).
    pub fn kick(&self, dataset_id: &str) {
        if let Some(supervisor) = self.datasets().get(dataset_id) {
            supervisor.kick.notify_one();
        }
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

    async fn run(self: Arc<Self>, dataset_id: String, supervisor: Arc<DatasetSupervisor>) {
        let mut shutdown = self.shutdown.clone();
        let mut wait = Duration::ZERO;
        // Sweeps in a row that left work only an operator can finish: backed off like
        // failures, since sweeping again changes nothing until someone acts.
        let mut stuck: u32 = 0;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = supervisor.kick.notified() => {}
                _ = shutdown.changed() => {}
            }
            if *shutdown.borrow() {
                return;
            }
            let checked = match self.check(&dataset_id).await {
                Ok(None) => return, // shutting down
                Ok(Some(check)) => Ok(check),
                Err(error) => Err(error),
            };
            let now = SystemClock.now_ms();
            let mut health = supervisor.health.write().unwrap_or_else(|p| p.into_inner());
            health.last_check_ms = Some(now);
            match checked {
                Ok(check) => {
                    if health.unavailable.take().is_some() {
                        tracing::info!("dataset is served again");
                    }
                    health.unavailable_since_ms = None;
                    health.consecutive_failures = 0;
                    health.pending_intents = Some(check.pending);
                    stuck = if check.needs_operator.is_empty() {
                        0
                    } else {
                        stuck + 1
                    };
                    health.needs_operator = check.needs_operator;
                    health.sweeps += u64::from(check.swept);
                    self.metrics.dataset(&dataset_id, Some(check.pending), true);
                    wait = match stuck {
                        0 => self.options.interval,
                        rounds => backoff(self.options, rounds),
                    };
                }
                Err(MendError::NotFound { .. }) => {
                    // The dataset is gone: nothing left to supervise.
                    tracing::debug!("dataset is gone; its supervisor stops");
                    drop(health);
                    self.datasets().remove(&dataset_id);
                    return;
                }
                // Someone else holds the dataset's gate (an operator's gc or recovery): not
                // a fault of the dataset; try again later.
                Err(MendError::Conflict { .. }) => {
                    wait = self.options.interval;
                }
                Err(error) => {
                    health.consecutive_failures += 1;
                    let reason = error.to_string();
                    if health.unavailable.as_deref() != Some(reason.as_str()) {
                        tracing::warn!(
                            %reason,
                            "dataset is unavailable: its requests answer 503 until a check succeeds"
                        );
                    }
                    health.unavailable = Some(reason);
                    health.unavailable_since_ms.get_or_insert(now);
                    self.metrics.dataset(&dataset_id, None, false);
                    wait = backoff(self.options, health.consecutive_failures);
                }
            }
        }
    }

    /// Lists the dataset's intents and rolls forward what can be; `None` once the server is
    /// shutting down.
    async fn check(&self, dataset_id: &str) -> Result<Option<Check>> {
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
            return Ok(Some(Check {
                pending: intents.len(),
                needs_operator: Vec::new(),
                swept: false,
            }));
        }
        // A sweep writes: it is admitted like any write, so a graceful shutdown waits for
        // it, and none starts once the shutdown began.
        let Some(ticket) = self.writes.admit_sweep() else {
            return Ok(None);
        };
        let started = Instant::now();
        let swept = self
            .engine
            .recover(dataset_id, RecoveryMode::RollForward)
            .await;
        drop(ticket);
        self.metrics.sweep(started.elapsed(), swept.is_err());
        let report = swept?;
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
        Ok(Some(Check {
            pending,
            needs_operator,
            swept: true,
        }))
    }
}

struct Check {
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
        };
        let waits: Vec<u128> = (1..=6)
            .map(|failures| backoff(options, failures).as_millis())
            .collect();
        assert_eq!(waits, [200, 400, 800, 1000, 1000, 1000]);
    }
}

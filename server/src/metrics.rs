//! The server's Prometheus metrics, kept in a `prometheus-client` registry and encoded in
//! the Prometheus text format (version 0.0.4) on `/metrics`. Nothing here blocks for long:
//! each update is an atomic add, or one short lock of its family when a label set is new.
//!
//! The names, types, labels and help are the metrics table of docs/src/http-api.md. prometheus-client adds
//! `_total` to a counter's name itself, so counters are registered without it. A family
//! without a series yet is left out of the exposition, its `# HELP` and `# TYPE` too.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use mend::engine::{ReconcileReport, RecoveryReport};
use mend::model::{StageOutcome, StageResult};
use mend::runtime::PolicyRuntime;

/// What `/metrics` answers with: the Prometheus text format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Upper bounds (seconds) of the sweep duration histogram's buckets.
const SWEEP_BUCKETS: [f64; 10] = [0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 120.0];

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// The end of the TLS certificate served ([`Metrics::tls_certificate_served`]).
    tls_certificate_not_after: Arc<std::sync::atomic::AtomicI64>,
    /// Only `render` writes it (the policy running then), under `rendering`.
    active_policy: Family<PolicyLabels, Gauge>,
    /// Policy decisions this server acted on, by (kind, outcome).
    decisions: Family<DecisionLabels, Counter>,
    sweep_duration: Histogram,
    sweep_failures: Counter,
    authentication_failures: Counter,
    /// Intents pending per dataset, as each dataset's supervisor last saw them.
    pending_intents: Family<DatasetLabels, Gauge>,
    /// 1 while a dataset serves, 0 while it answers 503.
    dataset_up: Family<DatasetLabels, Gauge>,
    /// Intents per dataset the policy blocked at the last sweep: an operator must decide.
    intents_needing_operator: Family<DatasetLabels, Gauge>,
    /// Requests refused for load, by reason (every reason's series from the start).
    shed: Family<ShedLabels, Counter>,
    /// HTTP requests by (route, status).
    requests: Family<RequestLabels, Counter>,
    /// This replica: 1, labelled with its id and fencing epoch (one series).
    fleet_replica: Family<ReplicaLabels, Gauge>,
    fleet_members: Gauge,
    fleet_pending_datasets: Gauge,
    fleet_owned_pending_datasets: Gauge,
    fleet_rebalances: Counter,
    fleet_takeovers: Counter,
    /// 1 while this replica's membership lease is live by its own monotonic clock, 0 once it ran out.
    fleet_lease_held: Gauge,
    /// Held while one scrape sets the policy gauge and encodes, so that two scrapes at once
    /// never see each other's half-replaced policy.
    rendering: Mutex<()>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PolicyLabels {
    digest: String,
    name: String,
    version: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DecisionLabels {
    kind: String,
    outcome: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DatasetLabels {
    dataset: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReplicaLabels {
    replica: String,
    epoch: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ShedLabels {
    reason: &'static str,
}

/// Why a request was refused for load: the `reason` label of `mend_shed_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shed {
    /// The server is shutting down: it admits no new write.
    ShuttingDown,
    /// The dataset has `serve.max_queued_writes_per_dataset` writes admitted.
    DatasetWrites,
    /// The server has `serve.max_queued_writes` writes admitted.
    ServerWrites,
    /// A principal over `serve.principal_requests_per_second`.
    PrincipalRate,
    /// A principal at `serve.principal_max_writes` writes in flight.
    PrincipalWrites,
    /// A client address past its failed authentications (`crate::guessing`).
    FailedAuthentications,
}

impl Shed {
    const ALL: [Shed; 6] = [
        Shed::ShuttingDown,
        Shed::DatasetWrites,
        Shed::ServerWrites,
        Shed::PrincipalRate,
        Shed::PrincipalWrites,
        Shed::FailedAuthentications,
    ];

    fn label(self) -> &'static str {
        match self {
            Shed::ShuttingDown => "shutting_down",
            Shed::DatasetWrites => "dataset_writes",
            Shed::ServerWrites => "server_writes",
            Shed::PrincipalRate => "principal_rate",
            Shed::PrincipalWrites => "principal_writes",
            Shed::FailedAuthentications => "failed_authentications",
        }
    }
}

/// The library's count of this process's policy calls ([`mend::runtime::stats`]), read at
/// each scrape: `mend_policy_decision_seconds` and `mend_policy_failures_total`.
#[derive(Debug)]
struct PolicyCalls;

impl Collector for PolicyCalls {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = mend::runtime::stats::decision_stats();
        let mut histogram = encoder.encode_descriptor(
            "mend_policy_decision_seconds",
            "Policy calls by how long each took in its sandbox, the wait for one included",
            None,
            MetricType::Histogram,
        )?;
        histogram.encode_histogram::<NoLabelSet>(
            stats.seconds,
            stats.calls,
            &stats.buckets,
            None,
        )?;
        let failures = encoder.encode_descriptor(
            "mend_policy_failures",
            "Policy calls that failed: a trap, the deadline, a sandbox limit, a broken answer or no sandbox free",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(stats.failures).encode(failures)
    }
}

/// `mend_tls_certificate_expiry_seconds`: the time left, at each scrape, until the end of the
/// certificate served (negative past it); no family at all for a server without TLS. It
/// holds the end (`notAfter`, seconds since the Unix epoch) of the certificate served,
/// `i64::MIN` while the server serves none.
#[derive(Debug)]
struct TlsCertificateExpiry(Arc<std::sync::atomic::AtomicI64>);

impl Collector for TlsCertificateExpiry {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let not_after = self.0.load(std::sync::atomic::Ordering::Relaxed);
        if not_after == i64::MIN {
            return Ok(());
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| {
                i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
            });
        let gauge = encoder.encode_descriptor(
            "mend_tls_certificate_expiry_seconds",
            "Seconds until the end (notAfter) of the TLS certificate served, negative past it",
            None,
            MetricType::Gauge,
        )?;
        prometheus_client::metrics::gauge::ConstGauge::new(not_after.saturating_sub(now))
            .encode(gauge)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    status: u16,
}

impl Default for Metrics {
    /// Every family registered, in the order of the exposition. Over 100 lines, as one list
    /// of registrations with nothing else to follow: split, it would only scatter the list.
    fn default() -> Self {
        let shed: Family<ShedLabels, Counter> = Family::default();
        for reason in Shed::ALL {
            // Every reason's series from the start, at 0: a rate over it is defined at once.
            drop(shed.get_or_create(&ShedLabels {
                reason: reason.label(),
            }));
        }
        // Help texts without their final period: the registry adds it.
        let mut registry = Registry::default();
        registry.register_collector(Box::new(PolicyCalls));
        let tls_certificate_not_after = Arc::new(std::sync::atomic::AtomicI64::new(i64::MIN));
        registry.register_collector(Box::new(TlsCertificateExpiry(
            tls_certificate_not_after.clone(),
        )));
        Self {
            tls_certificate_not_after,
            active_policy: registered(
                &mut registry,
                "mend_active_policy_info",
                "The active policy: 1, labelled with its digest, name and version",
                Family::default(),
            ),
            decisions: registered(
                &mut registry,
                "mend_decisions",
                "Policy decisions this server acted on, by kind and outcome",
                Family::default(),
            ),
            sweep_duration: registered(
                &mut registry,
                "mend_sweep_duration_seconds",
                "Roll-forward sweeps run by the dataset supervisors",
                Histogram::new(SWEEP_BUCKETS),
            ),
            authentication_failures: registered(
                &mut registry,
                "mend_authentication_failures",
                "Requests whose credential (a bearer secret or a client certificate) named no principal",
                Counter::default(),
            ),
            sweep_failures: registered(
                &mut registry,
                "mend_sweep_failures",
                "Supervisor sweeps that failed (the dataset answers 503 until one succeeds)",
                Counter::default(),
            ),
            pending_intents: registered(
                &mut registry,
                "mend_pending_intents",
                "Unresolved operations per dataset, as its supervisor last saw them",
                Family::default(),
            ),
            dataset_up: registered(
                &mut registry,
                "mend_dataset_up",
                "1 while a dataset is served, 0 while it answers 503",
                Family::default(),
            ),
            intents_needing_operator: registered(
                &mut registry,
                "mend_intents_needing_operator",
                "Intents per dataset the policy blocked at the last sweep: an operator must decide",
                Family::default(),
            ),
            shed: registered(
                &mut registry,
                "mend_shed_requests",
                "Requests refused for load, by reason (503 or 429, with Retry-After)",
                shed,
            ),
            requests: registered(
                &mut registry,
                "mend_http_requests",
                "HTTP requests by route and status",
                Family::default(),
            ),
            fleet_replica: registered(
                &mut registry,
                "mend_fleet_replica_info",
                "This replica: 1, labelled with its id and the fencing epoch it joined with",
                Family::default(),
            ),
            fleet_members: registered(
                &mut registry,
                "mend_fleet_members",
                "Live members of the fleet at this replica's last heartbeat, itself included",
                Gauge::default(),
            ),
            fleet_pending_datasets: registered(
                &mut registry,
                "mend_fleet_pending_datasets",
                "Datasets with pending intents at the last discovery",
                Gauge::default(),
            ),
            fleet_owned_pending_datasets: registered(
                &mut registry,
                "mend_fleet_owned_pending_datasets",
                "Datasets with pending intents this replica owns: its load",
                Gauge::default(),
            ),
            fleet_rebalances: registered(
                &mut registry,
                "mend_fleet_rebalances",
                "Fleet changes (members joining or leaving) that moved datasets",
                Counter::default(),
            ),
            fleet_takeovers: registered(
                &mut registry,
                "mend_fleet_takeovers",
                "Members found expired (dead or stalled) whose datasets the fleet took over",
                Counter::default(),
            ),
            fleet_lease_held: registered(
                &mut registry,
                "mend_fleet_lease_held",
                "1 while this replica's membership lease is live by its own monotonic clock, 0 once it ran out",
                Gauge::default(),
            ),
            registry,
            rendering: Mutex::new(()),
        }
    }
}

/// `metric`, registered in `registry` under `name` with `help`.
fn registered<M: prometheus_client::registry::Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    pub fn decision(&self, kind: &str, outcome: &str, count: u64) {
        // No series for what never happened, as before a first decision of its kind.
        if count == 0 {
            return;
        }
        self.decisions
            .get_or_create(&DecisionLabels {
                kind: kind.to_string(),
                outcome: outcome.to_string(),
            })
            .inc_by(count);
    }

    /// Counts a stage's per-split decisions by what happened to each row.
    pub fn stage(&self, result: &StageResult) {
        let mut by_outcome: BTreeMap<&str, u64> = BTreeMap::new();
        for split in &result.splits {
            let outcome = match split.outcome {
                StageOutcome::Inserted => "inserted",
                StageOutcome::Overwritten => "overwritten",
                StageOutcome::Skipped(_) => "skipped",
            };
            *by_outcome.entry(outcome).or_default() += 1;
        }
        for (outcome, count) in by_outcome {
            self.decision("stage", outcome, count);
        }
    }

    /// Counts a sweep's decisions by what the policy decided and what the host did with it.
    pub fn recovery(&self, report: &RecoveryReport) {
        for intent in &report.intents {
            let decision = match &intent.decision {
                mend_contract::RecoveryDecision::RollForward => "roll_forward",
                mend_contract::RecoveryDecision::RollBack => "roll_back",
                mend_contract::RecoveryDecision::Defer(_) => "defer",
                mend_contract::RecoveryDecision::Blocked(_) => "blocked",
                mend_contract::RecoveryDecision::Stale => "stale",
                mend_contract::RecoveryDecision::Abandon(_) => "abandon",
            };
            let outcome = match &intent.outcome {
                mend::engine::Outcome::Reported => "reported",
                mend::engine::Outcome::Executing => "executing",
                mend::engine::Outcome::Executed => "executed",
                mend::engine::Outcome::Refused(_) => "refused",
                mend::engine::Outcome::Overtaken(_) => "overtaken",
                mend::engine::Outcome::Failed(_) => "failed",
            };
            self.decision("recovery", &format!("{decision}_{outcome}"), 1);
        }
    }

    pub fn reconcile(&self, report: &ReconcileReport) {
        self.decision("reconcile", "adopt", report.adopted.len() as u64);
        self.decision("reconcile", "discard", report.discarded.len() as u64);
        self.decision("reconcile", "refused", report.refused.len() as u64);
    }

    pub fn sweep(&self, took: Duration, failed: bool) {
        self.sweep_duration.observe(took.as_secs_f64());
        if failed {
            self.sweep_failures.inc();
        }
    }

    /// A dataset's gauges as its supervisor found it: the pending intents and those needing an
    /// operator only when it could count them (a failed check leaves the last counts),
    /// whether it is served always.
    pub fn dataset(
        &self,
        dataset_id: &str,
        pending_intents: Option<usize>,
        needing_operator: Option<usize>,
        up: bool,
    ) {
        let labels = DatasetLabels {
            dataset: dataset_id.to_string(),
        };
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        if let Some(pending) = pending_intents {
            self.pending_intents
                .get_or_create(&labels)
                .set(count(pending));
        }
        if let Some(blocked) = needing_operator {
            self.intents_needing_operator
                .get_or_create(&labels)
                .set(count(blocked));
        }
        self.dataset_up.get_or_create(&labels).set(i64::from(up));
    }

    /// The fleet as this replica's last heartbeat found it.
    pub fn fleet_members(&self, members: usize, epoch: u64, replica_id: &str) {
        self.fleet_members
            .set(i64::try_from(members).unwrap_or(i64::MAX));
        let labels = ReplicaLabels {
            replica: replica_id.to_string(),
            epoch: epoch.to_string(),
        };
        if self.fleet_replica.get(&labels).is_none() {
            // One series: a rejoining's new epoch replaces the old one.
            self.fleet_replica.clear();
            self.fleet_replica.get_or_create(&labels).set(1);
        }
    }

    /// The pending datasets at the last discovery and those this replica owns.
    pub fn fleet_load(&self, pending: usize, owned: usize) {
        self.fleet_pending_datasets
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
        self.fleet_owned_pending_datasets
            .set(i64::try_from(owned).unwrap_or(i64::MAX));
    }

    /// Whether this replica's membership lease is live by its own monotonic clock.
    pub fn fleet_lease_held(&self, held: bool) {
        self.fleet_lease_held.set(i64::from(held));
    }

    /// The end of the TLS certificate served now (at start and at each reload taken), in
    /// seconds since the Unix epoch: `mend_tls_certificate_expiry_seconds`.
    pub fn tls_certificate_served(&self, not_after: i64) {
        self.tls_certificate_not_after
            .store(not_after, std::sync::atomic::Ordering::Relaxed);
    }

    /// A request whose credential named no principal.
    pub fn authentication_failed(&self) {
        self.authentication_failures.inc();
    }

    /// A request refused for load.
    pub fn shed(&self, reason: Shed) {
        self.shed
            .get_or_create(&ShedLabels {
                reason: reason.label(),
            })
            .inc();
    }

    pub fn fleet_rebalance(&self) {
        self.fleet_rebalances.inc();
    }

    pub fn fleet_takeover(&self, members: u64) {
        self.fleet_takeovers.inc_by(members);
    }

    pub fn request(&self, route: &str, status: u16) {
        self.requests
            .get_or_create(&RequestLabels {
                route: route.to_string(),
                status,
            })
            .inc();
    }

    /// The text exposition format, with `policy` as the active policy.
    pub fn render(&self, policy: &PolicyRuntime) -> String {
        let _one_at_a_time = self.rendering.lock().unwrap_or_else(|p| p.into_inner());
        let description = policy.description();
        let active = PolicyLabels {
            digest: policy.digest().to_string(),
            name: description.name.clone(),
            version: description.version.clone(),
        };
        // One series, the policy running now: a swapped-out policy's series goes.
        if self.active_policy.get(&active).is_none() {
            self.active_policy.clear();
            self.active_policy.get_or_create(&active).set(1);
        }
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            .expect("encoding into a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exposition as docs/src/http-api.md documents it: every family's `# HELP` and `# TYPE`
    /// under its documented name, counters with `_total`, the histogram's buckets as they
    /// were written before prometheus-client, and label values escaped.
    #[test]
    fn the_exposition_keeps_the_documented_names_types_and_labels() {
        let metrics = Metrics::default();
        metrics.decision("stage", "inserted", 4);
        metrics.decision("stage", "skipped", 0);
        metrics.sweep(Duration::from_millis(20), false);
        metrics.sweep(Duration::from_secs(200), true);
        metrics.dataset("d1", Some(3), Some(1), true);
        metrics.dataset("d1", None, None, false);
        metrics.fleet_lease_held(true);
        metrics.shed(Shed::ServerWrites);
        metrics.shed(Shed::PrincipalRate);
        metrics.shed(Shed::PrincipalRate);
        metrics.request("/v1/datasets/{dataset}/stage", 200);
        metrics.request("/v1/datasets/{dataset}/stage", 200);
        metrics.request("quote\"back\\slash", 404);
        metrics.fleet_members(3, 6, "old-1");
        metrics.fleet_members(3, 7, "r-1");
        metrics.fleet_load(5, 2);
        metrics.fleet_rebalance();
        metrics.fleet_takeover(2);
        metrics.authentication_failed();
        metrics.authentication_failed();
        metrics.shed(Shed::FailedAuthentications);
        let policy = PolicyRuntime::default_policy().unwrap();
        let text = metrics.render(&policy);
        for line in [
            "# TYPE mend_active_policy_info gauge",
            "# HELP mend_decisions_total Policy decisions this server acted on, by kind and outcome.",
            "# TYPE mend_decisions_total counter",
            "mend_decisions_total{kind=\"stage\",outcome=\"inserted\"} 4",
            "# TYPE mend_sweep_duration_seconds histogram",
            "mend_sweep_duration_seconds_bucket{le=\"0.005\"} 0",
            "mend_sweep_duration_seconds_bucket{le=\"0.05\"} 1",
            "mend_sweep_duration_seconds_bucket{le=\"1\"} 1",
            "mend_sweep_duration_seconds_bucket{le=\"120\"} 1",
            "mend_sweep_duration_seconds_bucket{le=\"+Inf\"} 2",
            "mend_sweep_duration_seconds_count 2",
            "# TYPE mend_sweep_failures_total counter",
            "mend_sweep_failures_total 1",
            "# TYPE mend_pending_intents gauge",
            "mend_pending_intents{dataset=\"d1\"} 3",
            "# TYPE mend_dataset_up gauge",
            "mend_dataset_up{dataset=\"d1\"} 0",
            "# TYPE mend_http_requests_total counter",
            "mend_http_requests_total{route=\"/v1/datasets/{dataset}/stage\",status=\"200\"} 2",
            "mend_http_requests_total{route=\"quote\\\"back\\\\slash\",status=\"404\"} 1",
            "mend_fleet_replica_info{replica=\"r-1\",epoch=\"7\"} 1",
            "mend_fleet_members 3",
            "mend_fleet_pending_datasets 5",
            "mend_fleet_owned_pending_datasets 2",
            "# TYPE mend_fleet_rebalances_total counter",
            "mend_fleet_rebalances_total 1",
            "mend_fleet_takeovers_total 2",
            "# TYPE mend_intents_needing_operator gauge",
            "mend_intents_needing_operator{dataset=\"d1\"} 1",
            "# TYPE mend_shed_requests_total counter",
            "mend_shed_requests_total{reason=\"server_writes\"} 1",
            "mend_shed_requests_total{reason=\"principal_rate\"} 2",
            "mend_shed_requests_total{reason=\"shutting_down\"} 0",
            "mend_shed_requests_total{reason=\"failed_authentications\"} 1",
            "# TYPE mend_authentication_failures_total counter",
            "mend_authentication_failures_total 2",
            "# TYPE mend_fleet_lease_held gauge",
            "mend_fleet_lease_held 1",
            "# TYPE mend_policy_decision_seconds histogram",
            "# TYPE mend_policy_failures_total counter",
        ] {
            assert!(
                text.lines().any(|candidate| candidate == line),
                "{line:?} is not a line of:\n{text}"
            );
        }
        assert!(!text.contains("outcome=\"skipped\""), "{text}");
        assert!(
            !text.contains("old-1"),
            "a rejoining replaces the series: {text}"
        );
        assert!(
            text.contains(&format!(
                "mend_active_policy_info{{digest=\"{}\",name=\"{}\",version=\"{}\"}} 1",
                policy.digest(),
                policy.description().name,
                policy.description().version
            )),
            "{text}"
        );
        let families = text
            .lines()
            .filter(|line| line.starts_with("# TYPE "))
            .count();
        // Without TLS, no mend_tls_certificate_expiry_seconds.
        assert_eq!(families, 19, "{text}");
        assert!(
            !text.contains("mend_tls_certificate_expiry_seconds"),
            "{text}"
        );
        metrics.tls_certificate_served(i64::MAX / 2);
        assert!(
            metrics
                .render(&policy)
                .lines()
                .any(|line| line.starts_with("mend_tls_certificate_expiry_seconds ")),
        );
        // The policy's calls of this process: loading the default policy called it.
        let calls: u64 = text
            .lines()
            .find_map(|line| line.strip_prefix("mend_policy_decision_seconds_count "))
            .expect("the decision histogram's count")
            .parse()
            .unwrap();
        assert!(calls >= 1, "{text}");
    }
}

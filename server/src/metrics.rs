//! The server's Prometheus metrics, kept in plain maps and rendered as the text exposition
//! format on `/metrics`. Nothing here blocks for long: each update takes one short lock.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use mend::engine::{ReconcileReport, RecoveryReport};
use mend::model::{StageOutcome, StageResult};
use mend::runtime::PolicyRuntime;

/// Upper bounds (seconds) of the sweep duration histogram's buckets.
const SWEEP_BUCKETS: [f64; 10] = [0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 120.0];

#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Policy decisions this server acted on, by (kind, outcome).
    decisions: BTreeMap<(String, String), u64>,
    /// Supervisor sweeps: count per bucket (not cumulative), sum and count.
    sweep_buckets: [u64; SWEEP_BUCKETS.len()],
    sweep_sum_seconds: f64,
    sweep_count: u64,
    sweep_failures: u64,
    /// Intents pending per dataset, as each dataset's supervisor last saw them.
    pending_intents: BTreeMap<String, usize>,
    /// 1 while a dataset serves, 0 while it answers 503.
    dataset_up: BTreeMap<String, bool>,
    /// HTTP requests by (route, status).
    requests: BTreeMap<(String, u16), u64>,
}

impl Metrics {
    fn with<T>(&self, update: impl FnOnce(&mut Inner) -> T) -> T {
        update(&mut self.inner.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn decision(&self, kind: &str, outcome: &str, count: u64) {
        if count == 0 {
            return;
        }
        self.with(|inner| {
            *inner
                .decisions
                .entry((kind.to_string(), outcome.to_string()))
                .or_default() += count;
        });
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
                mend_policy::RecoveryDecision::RollForward => "roll_forward",
                mend_policy::RecoveryDecision::RollBack => "roll_back",
                mend_policy::RecoveryDecision::Defer(_) => "defer",
                mend_policy::RecoveryDecision::Blocked(_) => "blocked",
                mend_policy::RecoveryDecision::Stale => "stale",
                mend_policy::RecoveryDecision::Abandon(_) => "abandon",
            };
            let outcome = match &intent.outcome {
                mend::engine::Outcome::Reported => "reported",
                mend::engine::Outcome::Executing => "executing",
                mend::engine::Outcome::Executed => "executed",
                mend::engine::Outcome::Refused(_) => "refused",
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
        let seconds = took.as_secs_f64();
        self.with(|inner| {
            if let Some(bucket) = SWEEP_BUCKETS.iter().position(|bound| seconds <= *bound) {
                inner.sweep_buckets[bucket] += 1;
            }
            inner.sweep_sum_seconds += seconds;
            inner.sweep_count += 1;
            if failed {
                inner.sweep_failures += 1;
            }
        });
    }

    pub fn dataset(&self, dataset_id: &str, pending_intents: Option<usize>, up: bool) {
        self.with(|inner| {
            if let Some(pending) = pending_intents {
                inner
                    .pending_intents
                    .insert(dataset_id.to_string(), pending);
            }
            inner.dataset_up.insert(dataset_id.to_string(), up);
        });
    }

    pub fn request(&self, route: &str, status: u16) {
        self.with(|inner| {
            *inner
                .requests
                .entry((route.to_string(), status))
                .or_default() += 1;
        });
    }

    /// The text exposition format.
    pub fn render(&self, policy: &PolicyRuntime) -> String {
        let mut out = String::new();
        self.with(|inner| {
            let description = policy.description();
            header(
                &mut out,
                "mend_active_policy_info",
                "gauge",
                "The active policy: 1, labelled with its digest, name and version.",
            );
            let _ = writeln!(
                out,
                "mend_active_policy_info{{digest=\"{}\",name=\"{}\",version=\"{}\"}} 1",
                escape(policy.digest()),
                escape(&description.name),
                escape(&description.version)
            );

            header(
                &mut out,
                "mend_decisions_total",
                "counter",
                "Policy decisions this server acted on, by kind and outcome.",
            );
            for ((kind, outcome), count) in &inner.decisions {
                let _ = writeln!(
                    out,
                    "mend_decisions_total{{kind=\"{}\",outcome=\"{}\"}} {count}",
                    escape(kind),
                    escape(outcome)
                );
            }

            header(
                &mut out,
                "mend_sweep_duration_seconds",
                "histogram",
                "Roll-forward sweeps run by the dataset supervisors.",
            );
            let mut cumulative = 0;
            for (bound, count) in SWEEP_BUCKETS.iter().zip(inner.sweep_buckets) {
                cumulative += count;
                let _ = writeln!(
                    out,
                    "mend_sweep_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "mend_sweep_duration_seconds_bucket{{le=\"+Inf\"}} {}",
                inner.sweep_count
            );
            let _ = writeln!(
                out,
                "mend_sweep_duration_seconds_sum {}",
                inner.sweep_sum_seconds
            );
            let _ = writeln!(
                out,
                "mend_sweep_duration_seconds_count {}",
                inner.sweep_count
            );

            header(
                &mut out,
                "mend_sweep_failures_total",
                "counter",
                "Supervisor sweeps that failed (the dataset answers 503 until one succeeds).",
            );
            let _ = writeln!(out, "mend_sweep_failures_total {}", inner.sweep_failures);

            header(
                &mut out,
                "mend_pending_intents",
                "gauge",
                "Unresolved operations per dataset, as its supervisor last saw them.",
            );
            for (dataset, pending) in &inner.pending_intents {
                let _ = writeln!(
                    out,
                    "mend_pending_intents{{dataset=\"{}\"}} {pending}",
                    escape(dataset)
                );
            }

            header(
                &mut out,
                "mend_dataset_up",
                "gauge",
                "1 while a dataset is served, 0 while it answers 503.",
            );
            for (dataset, up) in &inner.dataset_up {
                let _ = writeln!(
                    out,
                    "mend_dataset_up{{dataset=\"{}\"}} {}",
                    escape(dataset),
                    u8::from(*up)
                );
            }

            header(
                &mut out,
                "mend_http_requests_total",
                "counter",
                "HTTP requests by route and status.",
            );
            for ((route, status), count) in &inner.requests {
                let _ = writeln!(
                    out,
                    "mend_http_requests_total{{route=\"{}\",status=\"{status}\"}} {count}",
                    escape(route)
                );
            }
        });
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Label values escape backslash, quote and newline.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

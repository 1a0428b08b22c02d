//! What the trail of writes costs (`mend::catalog::write_audit`), each as a ratio against the
//! same work without it, in the same run, on the embedded default (a local directory) and on
//! Postgres:
//!
//!     scripts/with-postgres cargo bench -p mend-tests --bench write_audit
//!
//! - `write audit stage`: create-only batches of 100 new splits staged with the standard
//!   plan (`Catalog::stage_standard`, the step `Engine::stage` ends in), without a write scope
//!   (`unrecorded`: nothing is recorded) and inside one (`recorded`: the record is one more
//!   action of the commit, one more row of the transaction). Goal: recorded/unrecorded ≤ 1.05.
//!   The engine records every request's writes; its validation and policy come on top of both,
//!   so the ratio of whole stages is closer to 1 than this one.
//! - `write audit replay`: what a policy swap's replay reads, the catalog's newest 1,000
//!   decisions (`Catalog::list_recent_audit`), on a catalog of 50 datasets holding 40 decisions
//!   each (`decisions-only`) against the same with 40 recorded writes per dataset besides
//!   (`with-writes`). Goal: with-writes/decisions-only ≤ 1.05: decisions and writes are kept
//!   apart.
//!
//! About a minute and a half on the 2-core development machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::Throughput;
use mend::Catalog;
use mend::audit::{AUDIT_FORMAT_VERSION, AuditRecord};
use mend::catalog::write_audit::{self, WriteScope};
use mend::model::{NewSplit, StageMode, StageRequest, StageSplit};
use mend_tests::{Backend, Harness};

mod common;
use common::{Bench, Sampling, per_second, test_mode};

const BATCH: usize = 100;
const BATCHES: usize = 20;

fn scope() -> WriteScope {
    WriteScope {
        principal: Some("bench-writer".into()),
        kind: "stage".into(),
        operation_id: None,
    }
}

fn batch(run: usize, batch: usize) -> Vec<Arc<NewSplit>> {
    (0..BATCH)
        .map(|i| {
            Arc::new(NewSplit {
                split_id: format!("run{run}-b{batch:03}-s{i:03}"),
                node: "bench".into(),
                metadata_json: r#"{"num_docs": 1000}"#.into(),
                time_range: None,
            })
        })
        .collect()
}

/// `BATCHES` batches staged one after another into `dataset_id`, timed.
async fn stage_batches(catalog: &dyn Catalog, dataset_id: &str, run: usize) -> Duration {
    let batches: Vec<Vec<Arc<NewSplit>>> = (0..BATCHES).map(|n| batch(run, n)).collect();
    let started = Instant::now();
    for splits in &batches {
        let staged = catalog
            .stage_standard(dataset_id, StageMode::CreateOnly, splits, 1, None)
            .await
            .expect("stage");
        assert_eq!(staged.len(), BATCH);
    }
    started.elapsed()
}

fn stage_cost(bench: &mut Bench, runtime: &tokio::runtime::Runtime, label: &str, h: &Harness) {
    let catalog = h.engine.catalog();
    let dataset_id = runtime.block_on(h.create_dataset("write-audit-stage"));
    let runs = AtomicUsize::new(0);
    let mut group = bench.group(
        &format!("write audit stage {label}"),
        Sampling::Expensive {
            measurement: Duration::from_secs(4),
        },
    );
    group.throughput(Throughput::Elements((BATCH * BATCHES) as u64));
    for recorded in [false, true] {
        let id = if recorded { "recorded" } else { "unrecorded" };
        group.bench(id, |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let mut took = Duration::ZERO;
                    for _ in 0..iters {
                        let run = runs.fetch_add(1, Ordering::Relaxed);
                        let staging = stage_batches(catalog.as_ref(), &dataset_id, run);
                        took += if recorded {
                            write_audit::within(scope(), staging).await
                        } else {
                            staging.await
                        };
                    }
                    took
                })
            })
        });
    }
    group.finish().report(|times| {
        let ratio = times["recorded"].as_secs_f64() / times["unrecorded"].as_secs_f64();
        vec![format!(
            "{label}: stage batches of {BATCH}: {:.0} batches/s unrecorded, {:.0} recorded, recorded/unrecorded time = {ratio:.3} (goal: <= 1.05)",
            per_second(BATCHES, times["unrecorded"]),
            per_second(BATCHES, times["recorded"]),
        )]
    });
}

fn decision(dataset_id: &str, n: usize) -> AuditRecord {
    AuditRecord {
        format_version: AUDIT_FORMAT_VERSION,
        dataset_id: dataset_id.into(),
        operation_id: format!("op-{n:04}"),
        recorded_at_ms: 1_700_000_000_000 + n as i64,
        mode: "roll-forward".into(),
        policy_digest: "sha256:policy".into(),
        semantics_revision: 1,
        inputs_hash: "sha256:inputs".into(),
        decision: serde_json::json!("roll_forward"),
        outcome: serde_json::json!({"outcome": "executed"}),
        inputs: None,
        principal: Some("supervisor@bench".into()),
    }
}

/// Creates `datasets` datasets with `per_dataset` decisions each; their ids.
async fn with_decisions(h: &Harness, datasets: usize, per_dataset: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for d in 0..datasets {
        let dataset_id = h.create_dataset(&format!("replay-{d:03}")).await;
        let decisions: Vec<AuditRecord> =
            (0..per_dataset).map(|n| decision(&dataset_id, n)).collect();
        h.engine
            .catalog()
            .append_audit(&dataset_id, &decisions)
            .await
            .expect("append decisions");
        ids.push(dataset_id);
    }
    ids
}

/// Adds `per_dataset` recorded writes (stages of one split) to each of `dataset_ids`.
async fn add_writes(h: &Harness, dataset_ids: &[String], per_dataset: usize) {
    let writer = h.engine.acting_as("bench-writer");
    for dataset_id in dataset_ids {
        for n in 0..per_dataset {
            let request = StageRequest {
                dataset_id: dataset_id.clone(),
                mode: StageMode::CreateOnly,
                node: "bench".into(),
                splits: vec![StageSplit {
                    split_id: format!("w{n:04}"),
                    metadata_json: "{}".into(),
                }],
            };
            writer.stage(&request).await.expect("a recorded stage");
        }
    }
}

/// The median time of `list_recent_audit(newest)`, measured as the group `name`; `None`
/// when criterion did not estimate it (test mode).
fn time_replay_read(
    bench: &mut Bench,
    runtime: &tokio::runtime::Runtime,
    name: &str,
    h: &Harness,
    newest: usize,
) -> Option<Duration> {
    let catalog = h.engine.catalog();
    let mut group = bench.group(
        name,
        Sampling::Quick {
            measurement: Duration::from_secs(3),
        },
    );
    group.bench("read", |b| {
        b.iter(|| {
            let recent = runtime
                .block_on(catalog.list_recent_audit(newest))
                .expect("recent audit");
            assert_eq!(recent.records.len(), newest);
        })
    });
    group.finish().time("read")
}

/// The replay's read before and after every dataset got as many recorded writes as it has
/// decisions, on one catalog.
fn replay_cost(
    bench: &mut Bench,
    runtime: &tokio::runtime::Runtime,
    label: &str,
    backend: Backend,
) {
    let (datasets, per_dataset) = if test_mode() { (3, 4) } else { (50, 40) };
    let h = runtime.block_on(Harness::new(backend));
    let dataset_ids = runtime.block_on(with_decisions(&h, datasets, per_dataset));
    let newest = 1_000.min(datasets * per_dataset);
    let before = time_replay_read(
        bench,
        runtime,
        &format!("write audit replay {label} decisions-only"),
        &h,
        newest,
    );
    runtime.block_on(add_writes(&h, &dataset_ids, per_dataset));
    let after = time_replay_read(
        bench,
        runtime,
        &format!("write audit replay {label} with-writes"),
        &h,
        newest,
    );
    if let (Some(before), Some(after)) = (before, after) {
        bench.report(format!(
            "{label}: a replay's read of the newest {newest} decisions, {datasets} datasets: with {per_dataset} recorded writes per dataset / before them = {:.3} (goal: <= 1.05)",
            after.as_secs_f64() / before.as_secs_f64()
        ));
    }
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let mut bench = Bench::from_args();
    bench.report("the trail of writes: what recording costs a stage, and a replay".to_string());
    let local = runtime.block_on(Harness::new(Backend::LocalDirectory));
    stage_cost(&mut bench, &runtime, "local directory", &local);
    let postgres = runtime.block_on(Harness::new(Backend::Postgres));
    stage_cost(&mut bench, &runtime, "postgres", &postgres);
    replay_cost(
        &mut bench,
        &runtime,
        "local directory",
        Backend::LocalDirectory,
    );
    replay_cost(&mut bench, &runtime, "postgres", Backend::Postgres);
    bench.finish();
}

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
//!   each, after 40 stages per dataset without records (`after-unrecorded-stages`), then after
//!   40 more with records (`after-recorded-stages`). Goal: recorded/unrecorded ≤ 1.05:
//!   decisions and writes are kept apart, and neither read touches the writes' records (the
//!   `audit` table and audit objects against `write_audit` and the log's commits). Two
//!   measurements on one catalog: measured against the catalog before any stage instead, the
//!   Postgres read was 1.28 and 1.46 times slower after the stages in two runs, which compares
//!   a database before and after 2,000 inserts, not the records.
//!
//! About a minute and a half on the 2-core development machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::Throughput;
use mend::Catalog;
use mend::audit::{AUDIT_FORMAT_VERSION, AuditRecord};
use mend::catalog::write_audit::{self, WriteScope};
use mend::model::{NewSplit, StageMode};
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

/// Stages `per_dataset` splits of one each into each of `dataset_ids` (ids tagged `tag`),
/// inside a write scope (each stage recorded) or outside one.
async fn add_stages(
    h: &Harness,
    dataset_ids: &[String],
    per_dataset: usize,
    tag: &str,
    recorded: bool,
) {
    let catalog = h.engine.catalog();
    for dataset_id in dataset_ids {
        for n in 0..per_dataset {
            let split = vec![Arc::new(NewSplit {
                split_id: format!("{tag}-{n:04}"),
                node: "bench".into(),
                metadata_json: "{}".into(),
                time_range: None,
            })];
            let staging =
                catalog.stage_standard(dataset_id, StageMode::CreateOnly, &split, 1, None);
            let staged = if recorded {
                write_audit::within(scope(), staging).await
            } else {
                staging.await
            };
            staged.expect("a stage");
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

/// The replay's read after every dataset got `per_dataset` stages without records, then
/// after as many more with records: the records are the only difference, but for the second
/// half of the rows (the unrecorded stages first, so that order, if anything, favours them).
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
    // Let the database's background work on what was just written (autovacuum, analyze)
    // finish before each measurement: on two cores it would otherwise be measured too.
    let settle = || {
        if !test_mode() {
            std::thread::sleep(Duration::from_secs(10));
        }
    };
    runtime.block_on(add_stages(&h, &dataset_ids, per_dataset, "plain", false));
    settle();
    let unrecorded = time_replay_read(
        bench,
        runtime,
        &format!("write audit replay {label} after-unrecorded-stages"),
        &h,
        newest,
    );
    runtime.block_on(add_stages(&h, &dataset_ids, per_dataset, "recorded", true));
    settle();
    let recorded = time_replay_read(
        bench,
        runtime,
        &format!("write audit replay {label} after-recorded-stages"),
        &h,
        newest,
    );
    if let (Some(unrecorded), Some(recorded)) = (unrecorded, recorded) {
        bench.report(format!(
            "{label}: a replay's read of the newest {newest} decisions, {datasets} datasets: after {per_dataset} more recorded stages per dataset / after {per_dataset} unrecorded ones = {:.3} (goal: <= 1.05)",
            recorded.as_secs_f64() / unrecorded.as_secs_f64()
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

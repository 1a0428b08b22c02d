//! Staging throughput on Postgres against the bare SQL floor, and the policy's decision cost
//! in wasm against the same logic native, measured by criterion (`common`).
//!
//!     scripts/with-postgres cargo bench -p mend-tests --bench staging
//!
//! mend stages 10,000 splits in batches of 1,000, create-only and upsert, through the whole
//! engine with the default policy: validation, then (its plans being the standard ones, ABI
//! 1.4) the write with the mode's standard plan, which on Postgres needs no read first. The floor executes only the one `INSERT ... ON CONFLICT DO NOTHING
//! RETURNING` statement per batch with the same rows: no read, no policy, no wasm. The three
//! are functions of one criterion group (`staging`); one iteration stages all 10,000 splits
//! into a new dataset, whose rows are deleted again after it, untimed, so that every iteration
//! of every function writes into a table of the same size (criterion cannot interleave them,
//! and a table grown by the earlier functions would slow the later ones). Target:
//! mend/floor >= 0.8. Then: the decision per batch (wasm against native), a create-only batch whose ids
//! all exist (no write), and what checking each published split's object adds to a publish.
//!
//! It takes about a minute and a half on the 2-core development machine: about 20 iterations
//! of each staging function (10 samples, `Sampling::Expensive`), and a few seconds for each
//! smaller function. For more samples or time: `-- --sample-size 20 --measurement-time 10`
//! (these apply to every group); `-- staging/` runs only the first group.

use std::future::IntoFuture;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::Throughput;
use mend::model::{PublishRequest, StageMode, StageRequest, StageSplit};
use mend::runtime::PolicyRuntime;
use mend_contract::StagePlanInput;
use mend_tests::{Backend, Harness};
use sqlx::PgPool;

mod common;
use common::{Bench, Sampling, micros, millis, per_second};

const SPLITS: usize = 10_000;
const BATCH: usize = 1_000;
const STAGE_LIMITS: mend::validate::StageLimits = mend::validate::StageLimits {
    max_batch: BATCH,
    max_metadata_bytes: 64 * 1024,
};

fn metadata(i: usize) -> serde_json::Value {
    serde_json::json!({
        "num_docs": 1000 + i,
        "size_bytes": 1 << 20,
        "time_range": {"start": i * 1000, "end": i * 1000 + 999},
        "tags": ["tenant:acme", "kind:logs"],
    })
}

fn batches(run: usize) -> Vec<Vec<StageSplit>> {
    (0..SPLITS / BATCH)
        .map(|batch| {
            (0..BATCH)
                .map(|i| {
                    let n = batch * BATCH + i;
                    StageSplit {
                        split_id: format!("run{run}-split-{n:06}"),
                        metadata_json: metadata(n).to_string(),
                    }
                })
                .collect()
        })
        .collect()
}

/// The floor: the bare insert statement, with the same rows, bound as cheaply as possible
/// (metadata as the caller's JSON text, cast to `jsonb` by Postgres).
const FLOOR_INSERT: &str = "
INSERT INTO splits (dataset_id, split_id, state, node, metadata, time_range_start_ms,
                    time_range_end_ms, created_at_ms, updated_at_ms, published_at_ms)
SELECT $1, input.split_id, 'staged', input.node, input.metadata::jsonb, input.start_ms, input.end_ms, $7, $7, NULL
FROM UNNEST($2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[])
     AS input (split_id, node, metadata, start_ms, end_ms)
ORDER BY input.split_id
ON CONFLICT (dataset_id, split_id) DO NOTHING
RETURNING split_id";

/// Stages [`SPLITS`] splits in batches into a new dataset through the engine; the time of the
/// stage calls alone.
async fn mend_iteration(harness: &Harness, pool: &PgPool, mode: StageMode, run: usize) -> Duration {
    let dataset_id = harness.create_dataset("bench").await;
    let batches = batches(run);
    let started = Instant::now();
    for splits in batches {
        let request = StageRequest {
            dataset_id: dataset_id.clone(),
            mode,
            node: "bench".into(),
            splits,
        };
        let result = harness.engine.stage(&request).await.expect("stage");
        assert_eq!(result.inserted().count(), BATCH);
    }
    let took = started.elapsed();
    forget_rows(pool, &dataset_id).await;
    took
}

/// The floor's iteration: the same rows, one bare statement per batch.
async fn floor_iteration(harness: &Harness, pool: &PgPool, run: usize) -> Duration {
    let dataset_id = harness.create_dataset("floor").await;
    let batches = batches(run);
    let started = Instant::now();
    for (batch, splits) in batches.iter().enumerate() {
        let ids: Vec<&str> = splits.iter().map(|s| s.split_id.as_str()).collect();
        let nodes: Vec<&str> = vec!["bench"; splits.len()];
        let metadata: Vec<&str> = splits.iter().map(|s| s.metadata_json.as_str()).collect();
        let starts: Vec<i64> = (0..BATCH)
            .map(|i| ((batch * BATCH + i) * 1000) as i64)
            .collect();
        let ends: Vec<i64> = starts.iter().map(|start| start + 999).collect();
        let inserted: Vec<(String,)> = sqlx::query_as(FLOOR_INSERT)
            .bind(&dataset_id)
            .bind(&ids)
            .bind(&nodes)
            .bind(&metadata)
            .bind(&starts)
            .bind(&ends)
            .bind(0_i64)
            .fetch_all(pool)
            .await
            .expect("floor insert");
        assert_eq!(inserted.len(), BATCH);
    }
    let took = started.elapsed();
    forget_rows(pool, &dataset_id).await;
    took
}

/// Deletes an iteration's rows, so that the table stays the same size for the next one.
async fn forget_rows(pool: &PgPool, dataset_id: &str) {
    sqlx::query("DELETE FROM splits WHERE dataset_id = $1")
        .bind(dataset_id)
        .execute(pool)
        .await
        .expect("delete the iteration's rows");
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let harness = runtime.block_on(Harness::new(Backend::Postgres));
    let pool = runtime.block_on(mend_tests::harness::floor_pool());
    let mut bench = Bench::from_args();
    bench.report(format!(
        "staging {SPLITS} splits in batches of {BATCH} on Postgres"
    ));

    // Distinct split ids for every iteration of every function.
    let runs = AtomicUsize::new(0);
    let next_run = || runs.fetch_add(1, Ordering::Relaxed);
    let mut group = bench.group(
        "staging",
        Sampling::Expensive {
            measurement: Duration::from_secs(3),
        },
    );
    group.throughput(Throughput::Elements(SPLITS as u64));
    group.bench("floor", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    took += floor_iteration(&harness, &pool, next_run()).await;
                }
                took
            })
        })
    });
    for (id, mode) in [
        ("create-only", StageMode::CreateOnly),
        ("upsert", StageMode::Upsert),
    ] {
        group.bench(id, |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let mut took = Duration::ZERO;
                    for _ in 0..iters {
                        took += mend_iteration(&harness, &pool, mode, next_run()).await;
                    }
                    took
                })
            })
        });
    }
    group.finish().report(|times| {
        let floor = per_second(SPLITS, times["floor"]);
        let mut lines = vec![format!(
            "floor (bare INSERT ... ON CONFLICT DO NOTHING RETURNING): {floor:>9.0} splits/s"
        )];
        for mode in ["create-only", "upsert"] {
            let throughput = per_second(SPLITS, times[mode]);
            lines.push(format!(
                "mend stage {mode:<11}: {throughput:>9.0} splits/s, mend/floor = {:.2} (goal: create-only >= 0.90)",
                throughput / floor
            ));
        }
        lines
    });

    decision_cost(&mut bench, &harness.engine.policy());
    read_and_decide_cost(&mut bench, &runtime, &harness);
    publish_object_check_cost(&mut bench, &runtime, &harness);
    bench.finish();
}

/// The policy's plan for a create-only batch of 1 and of [`BATCH`] new ids, in wasm (a fresh
/// sandbox each time) against the same code native.
fn decision_cost(bench: &mut Bench, policy: &PolicyRuntime) {
    let sizes = [1, BATCH];
    let inputs: Vec<StagePlanInput> = sizes
        .iter()
        .map(|&splits| StagePlanInput {
            dataset_id: "bench".into(),
            mode: StageMode::CreateOnly,
            split_ids: (0..splits).map(|i| format!("split-{i:06}")).collect(),
            existing: Vec::new(),
        })
        .collect();
    let mut group = bench.group(
        "staging decision",
        Sampling::Quick {
            measurement: Duration::from_secs(2),
        },
    );
    for (splits, input) in sizes.iter().zip(&inputs) {
        group.throughput(Throughput::Elements(*splits as u64));
        group.bench(&format!("wasm/{splits}"), |b| {
            b.iter(|| policy.plan_stage(input).expect("plan"))
        });
        group.bench(&format!("native/{splits}"), |b| {
            b.iter(|| mend_default_policy::plan_stage(input))
        });
    }
    group.finish().report(|times| {
        sizes
            .iter()
            .map(|splits| {
                let wasm = times[format!("wasm/{splits}").as_str()];
                let native = times[format!("native/{splits}").as_str()];
                format!(
                    "policy decision per batch of {splits}: wasm {:.1} us (fresh instance, deadline, copy in and out), native {:.1} us, wasm/native {:.1}x",
                    micros(wasm),
                    micros(native),
                    wasm.as_secs_f64() / native.as_secs_f64()
                )
            })
            .collect()
    });
}

/// A create-only batch whose ids all exist: validation, the read and the decision, no write.
fn read_and_decide_cost(bench: &mut Bench, runtime: &tokio::runtime::Runtime, harness: &Harness) {
    let request = runtime.block_on(async {
        let dataset_id = harness.create_dataset("existing").await;
        let request = StageRequest {
            dataset_id,
            mode: StageMode::CreateOnly,
            node: "bench".into(),
            splits: batches(usize::MAX).remove(0),
        };
        harness.engine.stage(&request).await.expect("stage");
        request
    });
    let mut group = bench.group(
        "staging existing ids",
        Sampling::Quick {
            measurement: Duration::from_secs(3),
        },
    );
    group.bench("create-only", |b| {
        b.iter(|| {
            let result = runtime
                .block_on(harness.engine.stage(&request).into_future())
                .expect("stage");
            assert_eq!(result.inserted().count(), 0);
        })
    });
    group.bench("validation", |b| {
        b.iter(|| mend::validate::stage_request(&request, STAGE_LIMITS).expect("valid"))
    });
    group.finish().report(|times| {
        vec![format!(
            "create-only batch of {BATCH} existing ids (validate, read, decide; no write): {:.2} ms, of which validation {:.2} ms",
            millis(times["create-only"]),
            millis(times["validation"])
        )]
    });
}

/// A new dataset with [`BATCH`] staged splits and their objects; their ids.
async fn staged_with_objects(harness: &Harness, run: usize) -> (String, Vec<String>) {
    let dataset_id = harness.create_dataset("publish").await;
    let splits = batches(run).remove(0);
    let ids: Vec<String> = splits.iter().map(|split| split.split_id.clone()).collect();
    let request = StageRequest {
        dataset_id: dataset_id.clone(),
        mode: StageMode::CreateOnly,
        node: "bench".into(),
        splits,
    };
    harness.engine.stage(&request).await.expect("stage");
    for id in &ids {
        harness
            .engine
            .objects()
            .put(&dataset_id, id, bytes::Bytes::from_static(b"object").into())
            .await
            .expect("write an object");
    }
    (dataset_id, ids)
}

/// What checking that every published split has its object (invariant 1, one HEAD per split,
/// `EXISTENCE_CHECKS_IN_FLIGHT` at a time) adds to a publish of a batch: the check alone (it
/// reads only, so it repeats on one dataset), and whole publishes, each of a batch staged and
/// given its objects outside the timed part.
fn publish_object_check_cost(
    bench: &mut Bench,
    runtime: &tokio::runtime::Runtime,
    harness: &Harness,
) {
    let runs = AtomicUsize::new(1_000_000);
    let (checked_dataset, checked_ids) = runtime.block_on(staged_with_objects(
        harness,
        runs.fetch_add(1, Ordering::Relaxed),
    ));
    let mut group = bench.group(
        "staging publish",
        Sampling::Quick {
            measurement: Duration::from_secs(2),
        },
    );
    group.bench("object check", |b| {
        b.iter(|| {
            let missing = runtime
                .block_on(
                    harness
                        .engine
                        .objects()
                        .missing(&checked_dataset, &checked_ids),
                )
                .expect("check objects");
            assert_eq!(missing, Vec::<String>::new());
        })
    });
    group.sampling(Sampling::Expensive {
        measurement: Duration::from_millis(500),
    });
    group.bench("publish", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let run = runs.fetch_add(1, Ordering::Relaxed);
                    let (dataset_id, ids) = staged_with_objects(harness, run).await;
                    let started = Instant::now();
                    harness
                        .engine
                        .publish(&PublishRequest {
                            dataset_id,
                            staged_split_ids: ids,
                            replaced_split_ids: vec![],
                            checkpoint_delta: None,
                            publish_token: None,
                            fencing_epoch: None,
                        })
                        .await
                        .expect("publish");
                    took += started.elapsed();
                }
                took
            })
        })
    });
    group.finish().report(|times| {
        let (publish, check) = (times["publish"], times["object check"]);
        vec![format!(
            "publish of {BATCH} splits: {:.2} ms, of which the object check {:.2} ms (objects in \
             memory: on a remote store it is one HEAD round trip per split, 32 in flight); \
             with/without the check = {:.2}",
            millis(publish),
            millis(check),
            publish.as_secs_f64() / (publish - check.min(publish)).as_secs_f64().max(1e-9)
        )]
    });
}

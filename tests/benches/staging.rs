//! Staging throughput on Postgres against the bare SQL floor, and the policy's decision cost
//! in wasm against the same logic native.
//!
//!     scripts/with-postgres cargo bench -p mend-tests --bench staging
//!
//! mend stages 10,000 splits in batches of 1,000, create-only and upsert, through the whole
//! engine: validation, the read of existing rows, the policy component's plan, the invariant
//! check and the write. The floor executes only the one `INSERT ... ON CONFLICT DO NOTHING
//! RETURNING` statement per batch with the same rows: no read, no policy, no wasm. Each is run
//! several times, interleaved, and the best run counts, so that a hiccup of the machine does not
//! decide the ratio. Target: mend/floor >= 0.8.

use std::time::{Duration, Instant};

use mend::model::{StageMode, StageRequest, StageSplit};
use mend::runtime::PolicyRuntime;
use mend_policy::StagePlanInput;
use mend_tests::{Backend, Harness};
use sqlx::PgPool;

const SPLITS: usize = 10_000;
const BATCH: usize = 1_000;
const RUNS: usize = 5;
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

async fn mend_run(harness: &Harness, mode: StageMode, run: usize) -> Duration {
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
    started.elapsed()
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

async fn floor_run(harness: &Harness, pool: &PgPool, run: usize) -> Duration {
    let dataset_id = harness.create_dataset("floor").await;
    let batches = batches(run + 1_000);
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
    started.elapsed()
}

fn per_second(duration: Duration) -> f64 {
    SPLITS as f64 / duration.as_secs_f64()
}

fn decision_cost(policy: &PolicyRuntime) {
    for splits in [1, BATCH] {
        decision_cost_of(policy, splits);
    }
}

fn decision_cost_of(policy: &PolicyRuntime, splits: usize) {
    let input = StagePlanInput {
        dataset_id: "bench".into(),
        mode: StageMode::CreateOnly,
        split_ids: (0..splits).map(|i| format!("split-{i:06}")).collect(),
        existing: Vec::new(),
    };
    let iterations = 200;
    let time = |f: &dyn Fn()| {
        f();
        let started = Instant::now();
        for _ in 0..iterations {
            f();
        }
        started.elapsed() / iterations
    };
    let wasm = time(&|| {
        policy.plan_stage(&input).expect("plan");
    });
    let native = time(&|| {
        std::hint::black_box(mend_policy::plan_stage(&input));
    });
    println!(
        "policy decision per batch of {splits}: wasm {:.1} us (fresh instance, deadline, copy in and out), native {:.1} us, wasm/native {:.1}x",
        wasm.as_secs_f64() * 1e6,
        native.as_secs_f64() * 1e6,
        wasm.as_secs_f64() / native.as_secs_f64()
    );
}

#[tokio::main]
async fn main() {
    let harness = Harness::new(Backend::Postgres).await;
    let pool = harness.pg.clone().expect("postgres harness has a pool");
    println!("staging {SPLITS} splits in batches of {BATCH} on Postgres, best of {RUNS} runs each");

    let mut best_floor = Duration::MAX;
    let mut best_create_only = Duration::MAX;
    let mut best_upsert = Duration::MAX;
    for run in 0..RUNS {
        // The table grows with every run; alternating the order keeps either side from always
        // writing into the larger one.
        if run % 2 == 0 {
            best_floor = best_floor.min(floor_run(&harness, &pool, run).await);
        }
        best_create_only =
            best_create_only.min(mend_run(&harness, StageMode::CreateOnly, run).await);
        best_upsert = best_upsert.min(mend_run(&harness, StageMode::Upsert, run + 100).await);
        if run % 2 == 1 {
            best_floor = best_floor.min(floor_run(&harness, &pool, run).await);
        }
    }
    let floor = per_second(best_floor);
    println!("floor (bare INSERT ... ON CONFLICT DO NOTHING RETURNING): {floor:>9.0} splits/s");
    for (mode, best) in [("create-only", best_create_only), ("upsert", best_upsert)] {
        let throughput = per_second(best);
        println!(
            "mend stage {mode:<11}: {throughput:>9.0} splits/s, mend/floor = {:.2} (target >= 0.80)",
            throughput / floor
        );
    }
    decision_cost(&harness.engine.policy());
    read_and_decide_cost(&harness).await;
    publish_object_check_cost(&harness).await;
}

/// What checking that every published split has its object (invariant 1, one HEAD per split,
/// `EXISTENCE_CHECKS_IN_FLIGHT` at a time) adds to a publish of a batch.
async fn publish_object_check_cost(harness: &Harness) {
    let iterations: u32 = 10;
    let (mut publish, mut check) = (Duration::ZERO, Duration::ZERO);
    for iteration in 0..iterations {
        let dataset_id = harness.create_dataset("publish").await;
        let splits = batches(20_000 + iteration as usize).remove(0);
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
        let started = Instant::now();
        let missing = harness.engine.objects().missing(&dataset_id, &ids).await;
        check += started.elapsed();
        assert_eq!(missing.expect("check objects"), Vec::<String>::new());
        let started = Instant::now();
        harness
            .engine
            .publish(&mend::model::PublishRequest {
                dataset_id,
                staged_split_ids: ids,
                replaced_split_ids: vec![],
                checkpoint_delta: None,
                publish_token: None,
                fencing_epoch: None,
            })
            .await
            .expect("publish");
        publish += started.elapsed();
    }
    let (publish, check) = (publish / iterations, check / iterations);
    println!(
        "publish of {BATCH} splits: {:.2} ms, of which the object check {:.2} ms (objects in \
         memory: on a remote store it is one HEAD round trip per split, 32 in flight); \
         with/without the check = {:.2}",
        publish.as_secs_f64() * 1e3,
        check.as_secs_f64() * 1e3,
        publish.as_secs_f64() / (publish - check.min(publish)).as_secs_f64().max(1e-9)
    );
}

/// A create-only batch whose ids all exist: validation, the read and the decision, no write.
async fn read_and_decide_cost(harness: &Harness) {
    let dataset_id = harness.create_dataset("existing").await;
    let splits = batches(9_999).remove(0);
    let request = StageRequest {
        dataset_id,
        mode: StageMode::CreateOnly,
        node: "bench".into(),
        splits,
    };
    harness.engine.stage(&request).await.expect("stage");
    let iterations = 50;
    let started = Instant::now();
    for _ in 0..iterations {
        let result = harness.engine.stage(&request).await.expect("stage");
        assert_eq!(result.inserted().count(), 0);
    }
    let per_batch = started.elapsed() / iterations;
    let validation = {
        let started = Instant::now();
        for _ in 0..iterations {
            std::hint::black_box(mend::validate::stage_request(&request, STAGE_LIMITS).unwrap());
        }
        started.elapsed() / iterations
    };
    println!(
        "create-only batch of {BATCH} existing ids (validate, read, decide; no write): {:.2} ms, of which validation {:.2} ms",
        per_batch.as_secs_f64() * 1e3,
        validation.as_secs_f64() * 1e3
    );
}

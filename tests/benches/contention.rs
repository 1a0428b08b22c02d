//! Staging under contention on Postgres: 8 writers at once, each staging 100 batches of 200
//! ids in no order, in both modes, against the bare SQL floor of each mode in the same run, in
//! three shapes, one criterion group each (`common`):
//!
//! - `contention [seed: pool of 2,000, half staged]`, the main case: the seed's shape (issue
//!   43): every id drawn from one pool of 2,000, unsorted and with duplicates, the half of the
//!   pool with even numbers staged before the writers start, so a batch meets existing rows
//!   from its first statement on;
//! - `contention [fresh ids]`: half of each batch drawn from 4,000 ids staged before the run,
//!   half from 40,000 fresh ones, 10 of the 200 repeats of another id of the batch. Writers
//!   rarely race for one fresh id;
//! - `contention [pool of 2,000]`, the anchor's shape (quickwit#6714): the same pool, empty at
//!   first, so after the first batches nearly every id exists, and
//!   is a skip (create-only) or a conflict (upsert), and the writers meet on every row.
//!
//!     scripts/with-postgres cargo bench -p mend-tests --bench contention
//!
//! - `create-only`: mend's `Engine::stage` against one sorted, deduplicated
//!   `INSERT ... ON CONFLICT DO NOTHING RETURNING` per batch;
//! - `upsert`: mend's `Engine::stage` against one sorted, deduplicated
//!   `INSERT ... ON CONFLICT DO UPDATE ... WHERE state = 'staged' RETURNING` per batch.
//!
//! Each floor writes the time of its write, and mend's clock (the harness's manual one) moves
//! on by 1 ms before each of its batches: `updated_at_ms` is indexed, and a constant time
//! makes every overwrite after the first an index-free HOT update, twice as fast as any
//! writer of real times gets (the floor wrote a constant before, and mend's clock stood still).
//!
//! One iteration of a function runs the whole workload into a new dataset (created and filled
//! with its already-staged half untimed, its rows deleted again after it, untimed). The
//! deadlocks Postgres detected during each function are read from `pg_stat_database` and
//! printed: mend's goal is none. `MEND_BENCH_CONTENTION_BATCHES` sets the batches per writer
//! (100; 5 in test mode).
//!
//! It takes several minutes on the 2-core development machine: 10 iterations of each of the
//! four functions of each shape. `MEND_BENCH_CONTENTION_SHAPES=seed` (or `fresh`, `pool`, a
//! comma-separated list) runs only those shapes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::Throughput;
use mend::model::{StageMode, StageRequest, StageSplit};
use mend_tests::draw::Draw;
use mend_tests::{Backend, Harness};
use sqlx::PgPool;

mod common;
use common::{Bench, Sampling, per_second};

const WRITERS: usize = 8;
const BATCH: usize = 200;
/// Ids staged before the timed part: the half of every batch that already exists.
const PRESENT: usize = 4_000;
/// Ids no one has staged yet, which the writers race each other to insert.
const FRESH: usize = 40_000;
/// Of every batch, how many ids are repeats of another id of the same batch.
const REPEATS: usize = 10;
/// The anchor's shape: the one pool every id of every batch is drawn from.
const POOL: usize = 2_000;

/// What the writers' batches are made of.
#[derive(Clone, Copy)]
enum Shape {
    /// Half present ids, half fresh ones out of [`FRESH`], with [`REPEATS`] repeats.
    FreshIds,
    /// Every id drawn from one pool of [`POOL`] ids, none staged before the run.
    SharedPool,
    /// Every id drawn from one pool of [`POOL`] ids, half of them staged before the run.
    SeedPool,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::FreshIds => "fresh ids",
            Shape::SharedPool => "pool of 2,000",
            Shape::SeedPool => "seed: pool of 2,000, half staged",
        }
    }

    /// How the batches are drawn, for the report.
    fn describe(self) -> String {
        match self {
            Shape::FreshIds => format!(
                "half of {PRESENT} ids staged before, half of {FRESH} fresh ones, shuffled, \
                 {REPEATS} repeats per batch"
            ),
            Shape::SharedPool => format!("every id drawn from one pool of {POOL}, empty at first"),
            Shape::SeedPool => format!(
                "every id drawn from one pool of {POOL}, its {} even-numbered ids staged before",
                POOL / 2
            ),
        }
    }

    /// The shape `MEND_BENCH_CONTENTION_SHAPES` names `name`.
    fn named(name: &str) -> Shape {
        match name.trim() {
            "seed" => Shape::SeedPool,
            "fresh" => Shape::FreshIds,
            "pool" => Shape::SharedPool,
            other => panic!(
                "MEND_BENCH_CONTENTION_SHAPES: no shape {other:?}; the shapes are seed, fresh, pool"
            ),
        }
    }
}

fn present_id(n: usize) -> String {
    format!("present-{n:06}")
}

fn fresh_id(n: usize) -> String {
    format!("fresh-{n:06}")
}

fn pool_id(n: usize) -> String {
    format!("pool-{n:06}")
}

/// Writer `writer`'s batches in `shape`.
fn workload(shape: Shape, writer: usize, batches: usize) -> Vec<Vec<String>> {
    let mut ids = Draw(0x9e37_79b9_7f4a_7c15 ^ (writer as u64 + 1));
    (0..batches)
        .map(|_| {
            if let Shape::SharedPool | Shape::SeedPool = shape {
                return (0..BATCH).map(|_| pool_id(ids.below(POOL))).collect();
            }
            let distinct = BATCH - REPEATS;
            let mut batch: Vec<String> = (0..distinct)
                .map(|i| {
                    if i % 2 == 0 {
                        present_id(ids.below(PRESENT))
                    } else {
                        fresh_id(ids.below(FRESH))
                    }
                })
                .collect();
            for _ in 0..REPEATS {
                let repeat = batch[ids.below(batch.len())].clone();
                batch.push(repeat);
            }
            for i in (1..batch.len()).rev() {
                batch.swap(i, ids.below(i + 1));
            }
            batch
        })
        .collect()
}

fn metadata(split_id: &str) -> String {
    format!(r#"{{"num_docs":1000,"size_bytes":1048576,"source":"{split_id}"}}"#)
}

/// The floor's statement: the batch's rows, sorted, then what a conflict does.
macro_rules! floor_insert {
    ($on_conflict:literal) => {
        concat!(
            "INSERT INTO splits (dataset_id, split_id, state, node, metadata, time_range_start_ms,
                    time_range_end_ms, created_at_ms, updated_at_ms, published_at_ms)
SELECT $1, input.split_id, 'staged', $4, input.metadata::jsonb, NULL, NULL, $5, $5, NULL
FROM UNNEST($2::text[], $3::text[]) AS input (split_id, metadata)
ORDER BY input.split_id
",
            $on_conflict,
            "
RETURNING split_id"
        )
    };
}

const FLOOR_CREATE_ONLY: &str = floor_insert!("ON CONFLICT (dataset_id, split_id) DO NOTHING");

const FLOOR_UPSERT: &str = floor_insert!(
    "ON CONFLICT (dataset_id, split_id) DO UPDATE
    SET node = EXCLUDED.node, metadata = EXCLUDED.metadata, updated_at_ms = EXCLUDED.updated_at_ms
    WHERE splits.state = 'staged'"
);

/// Who runs the workload: mend in one mode, or a floor statement.
#[derive(Clone, Copy)]
enum Runner {
    Mend(StageMode),
    Floor(&'static str),
}

/// A new dataset, with the present ids staged if `shape` has them, untimed.
async fn prepared_dataset(harness: &Harness, shape: Shape) -> String {
    let dataset_id = harness.create_dataset("contention").await;
    let present: Vec<String> = match shape {
        Shape::SharedPool => return dataset_id,
        Shape::SeedPool => (0..POOL).step_by(2).map(pool_id).collect(),
        Shape::FreshIds => (0..PRESENT).map(present_id).collect(),
    };
    for chunk in present.chunks(1_000) {
        let request = StageRequest {
            dataset_id: dataset_id.clone(),
            mode: StageMode::CreateOnly,
            node: "setup".into(),
            splits: chunk
                .iter()
                .map(|id| StageSplit {
                    split_id: id.clone(),
                    metadata_json: metadata(id),
                })
                .collect(),
        };
        harness.engine.stage(&request).await.expect("setup stage");
    }
    dataset_id
}

/// One batch as the floor sends it: sorted, each id once.
async fn floor_batch(pool: &PgPool, statement: &str, dataset_id: &str, batch: &[String]) {
    let mut ids: Vec<&str> = batch.iter().map(String::as_str).collect();
    ids.sort_unstable();
    ids.dedup();
    let metadata: Vec<String> = ids.iter().map(|id| metadata(id)).collect();
    // The time of the write, as mend writes it: `updated_at_ms` is indexed, so a floor writing
    // one constant made every overwrite after the first a HOT update, touching no index, which
    // no writer of real times gets (the upsert floor ran twice as fast for it).
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        });
    sqlx::query(statement)
        .bind(dataset_id)
        .bind(&ids)
        .bind(&metadata)
        .bind("floor")
        .bind(now_ms)
        .fetch_all(pool)
        .await
        .expect("floor batch");
}

/// The whole workload once, all writers at once; the time from the first batch to the last.
async fn iteration(
    harness: &Arc<Harness>,
    pool: &PgPool,
    shape: Shape,
    runner: Runner,
    batches: usize,
) -> Duration {
    let dataset_id = prepared_dataset(harness, shape).await;
    let started = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let harness = harness.clone();
            let pool = pool.clone();
            let dataset_id = dataset_id.clone();
            tokio::spawn(async move {
                for batch in workload(shape, writer, batches) {
                    match runner {
                        Runner::Mend(mode) => {
                            let request = StageRequest {
                                dataset_id: dataset_id.clone(),
                                mode,
                                node: format!("writer-{writer}"),
                                splits: batch
                                    .iter()
                                    .map(|id| StageSplit {
                                        split_id: id.clone(),
                                        metadata_json: metadata(id),
                                    })
                                    .collect(),
                            };
                            // The harness's clock is manual: moved on for every batch, as a
                            // real one would be, so that mend's writes carry new times as the
                            // floor's do (a constant time makes overwrites index-free).
                            harness.clock.advance_ms(1);
                            harness.engine.stage(&request).await.expect("stage");
                        }
                        Runner::Floor(statement) => {
                            floor_batch(&pool, statement, &dataset_id, &batch).await
                        }
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.expect("writer");
    }
    let took = started.elapsed();
    sqlx::query("DELETE FROM splits WHERE dataset_id = $1")
        .bind(&dataset_id)
        .execute(pool)
        .await
        .expect("delete the iteration's rows");
    took
}

async fn deadlocks(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        .fetch_one(pool)
        .await
        .expect("read pg_stat_database")
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let harness = Arc::new(runtime.block_on(Harness::new(Backend::Postgres)));
    let pool = runtime.block_on(mend_tests::harness::floor_pool());
    let batches: usize = std::env::var("MEND_BENCH_CONTENTION_BATCHES")
        .ok()
        .map(|value| {
            value
                .parse()
                .expect("MEND_BENCH_CONTENTION_BATCHES is a number")
        })
        .unwrap_or(if common::test_mode() { 5 } else { 100 });
    let mut bench = Bench::from_args();
    let shapes: Vec<Shape> = match std::env::var("MEND_BENCH_CONTENTION_SHAPES") {
        Ok(names) => names.split(',').map(Shape::named).collect(),
        Err(_) => vec![Shape::SeedPool, Shape::FreshIds, Shape::SharedPool],
    };
    for shape in shapes {
        measure(&mut bench, &runtime, &harness, &pool, shape, batches);
    }
    bench.finish();
}

/// The four functions on `shape`, and their ratios and deadlocks.
fn measure(
    bench: &mut Bench,
    runtime: &tokio::runtime::Runtime,
    harness: &Arc<Harness>,
    pool: &PgPool,
    shape: Shape,
    batches: usize,
) {
    bench.report(format!(
        "{}: {WRITERS} writers x {batches} batches x {BATCH} ids ({}) on Postgres",
        shape.name(),
        shape.describe()
    ));

    let functions: [(&str, Runner); 4] = [
        ("create-only floor", Runner::Floor(FLOOR_CREATE_ONLY)),
        ("create-only mend", Runner::Mend(StageMode::CreateOnly)),
        ("upsert floor", Runner::Floor(FLOOR_UPSERT)),
        ("upsert mend", Runner::Mend(StageMode::Upsert)),
    ];
    let deadlocks_seen: Vec<AtomicUsize> = functions.iter().map(|_| AtomicUsize::new(0)).collect();
    let mut group = bench.group(
        &format!("contention [{}]", shape.name()),
        Sampling::Expensive {
            measurement: Duration::from_secs(10),
        },
    );
    group.throughput(Throughput::Elements((WRITERS * batches * BATCH) as u64));
    for ((id, runner), seen) in functions.iter().zip(&deadlocks_seen) {
        group.bench(id, |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let mut took = Duration::ZERO;
                    for _ in 0..iters {
                        let before = deadlocks(pool).await;
                        took += iteration(harness, pool, shape, *runner, batches).await;
                        let after = deadlocks(pool).await;
                        seen.fetch_add((after - before) as usize, Ordering::Relaxed);
                    }
                    took
                })
            })
        });
    }
    group.finish().report(|times| {
        let ids = WRITERS * batches * BATCH;
        let mut lines = Vec::new();
        for (mode, floor_of) in [("create-only", "create-only"), ("upsert", "upsert")] {
            let floor = per_second(ids, times[format!("{floor_of} floor").as_str()]);
            let mend = per_second(ids, times[format!("{mode} mend").as_str()]);
            lines.push(format!(
                "{mode:<11}: mend {mend:>8.0} ids/s, floor {floor:>8.0} ids/s, mend/floor = {:.2}",
                mend / floor
            ));
        }
        let create_only_floor = per_second(ids, times["create-only floor"]);
        let upsert = per_second(ids, times["upsert mend"]);
        lines.push(format!(
            "upsert mend / create-only floor = {:.2}",
            upsert / create_only_floor
        ));
        for ((id, _), seen) in functions.iter().zip(&deadlocks_seen) {
            lines.push(format!(
                "deadlocks Postgres detected during {id:<17}: {}",
                seen.load(Ordering::Relaxed)
            ));
        }
        lines
    });
}

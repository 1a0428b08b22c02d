//! Staging under contention as the anchor's seed measured it, from outside mend's own test
//! code: an embedder's program that opens a Postgres catalog through the public API and
//! times `Engine::stage` beside the bare SQL floors on mend's own table.
//!
//! ```text
//! scripts/with-postgres cargo run --release -p mend --features postgres \
//!     --example seed_contention -- [ROUNDS] [BATCHES]
//! ```
//!
//! The catalog is `$MEND_TEST_DATABASE_URL` (a throwaway server: `scripts/with-postgres` sets
//! it, with `MEND_POSTGRES_ACCEPT_UNSAFE_DURABILITY=true`); the split objects go to a
//! temporary directory (staging writes none).
//!
//! The seed's shape: 8 writers, each sending `BATCHES` batches (100 by default) of 200 ids
//! drawn from one pool of 2,000 by a random source seeded with the writer's number,
//! **unsorted and with duplicates**, the half of the pool with even numbers staged before the
//! writers start. Each round runs seven workloads, each into a new dataset prepared the same
//! way (untimed): the create-only floor (per batch, one sorted, deduplicated `INSERT ... ON
//! CONFLICT DO NOTHING`), the same `RETURNING` the ids it inserted (as mend's answer must
//! say), mend create-only, the upsert floor (`... DO UPDATE ... WHERE state = 'staged'`), the
//! same returning which ids it inserted and which it overwrote, mend upsert; and last that
//! returning upsert floor between `BEGIN` and `COMMIT`, as a transaction holds its rows' locks
//! to its commit. It prints each round's ratios against both floors, their medians, what the
//! transaction costs the upsert floor, and the deadlocks Postgres counted
//! (`pg_stat_database`) during mend's workloads. Goals (issue 43):
//! create-only at least 0.8 of its floor, upsert at least 0.6, no deadlock.

use std::time::{Duration, Instant};

use mend::catalog::PostgresOptions;
use mend::model::{DatasetConfig, StageMode, StageRequest, StageSplit};
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions};
use sqlx::PgPool;

const WRITERS: usize = 8;
const BATCH: usize = 200;
const POOL: usize = 2_000;

/// A small seeded random source (splitmix64): the same draws for the same writer every run.
struct Draws(u64);

impl Draws {
    fn below(&mut self, bound: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % bound as u64) as usize
    }
}

fn pool_id(n: usize) -> String {
    format!("split-{n:05}")
}

fn metadata(split_id: &str) -> String {
    format!(r#"{{"num_docs":1000,"size_bytes":1048576,"source":"{split_id}"}}"#)
}

/// Writer `writer`'s batches: ids drawn with replacement, in the order drawn.
fn batches_of(writer: usize, batches: usize) -> Vec<Vec<String>> {
    let mut draws = Draws(writer as u64 + 1);
    (0..batches)
        .map(|_| (0..BATCH).map(|_| pool_id(draws.below(POOL))).collect())
        .collect()
}

#[derive(Clone, Copy)]
enum Workload {
    Mend(StageMode),
    /// A floor's statement on its own (autocommit, as a floor runs it).
    Floor(&'static str),
    /// A floor's statement between `BEGIN` and `COMMIT`: the shape of a transaction that
    /// holds its rows' locks from the statement to the commit, one round trip more.
    FloorInTransaction(&'static str),
}

/// The floors' statements: `$on_conflict` what a conflict does, `$returning` whether the
/// statement says which ids it wrote (mend must: create-only says which rows it inserted,
/// upsert which it inserted and which it overwrote).
macro_rules! floor {
    ($on_conflict:literal, $returning:literal) => {
        concat!(
            "INSERT INTO splits (dataset_id, split_id, state, node, metadata,
        time_range_start_ms, time_range_end_ms, created_at_ms, updated_at_ms, published_at_ms)
    SELECT $1, input.split_id, 'staged', $4, input.metadata::jsonb, NULL, NULL, $5, $5, NULL
    FROM UNNEST($2::text[], $3::text[]) AS input (split_id, metadata)
    ORDER BY input.split_id
    ",
            $on_conflict,
            $returning
        )
    };
}

const FLOOR_CREATE_ONLY: &str = floor!("ON CONFLICT (dataset_id, split_id) DO NOTHING", "");
const FLOOR_CREATE_ONLY_RETURNING: &str = floor!(
    "ON CONFLICT (dataset_id, split_id) DO NOTHING",
    " RETURNING split_id"
);
const FLOOR_UPSERT: &str = floor!(
    "ON CONFLICT (dataset_id, split_id) DO UPDATE
        SET node = EXCLUDED.node, metadata = EXCLUDED.metadata, updated_at_ms = EXCLUDED.updated_at_ms
        WHERE splits.state = 'staged'",
    ""
);
const FLOOR_UPSERT_RETURNING: &str = floor!(
    "ON CONFLICT (dataset_id, split_id) DO UPDATE
        SET node = EXCLUDED.node, metadata = EXCLUDED.metadata, updated_at_ms = EXCLUDED.updated_at_ms
        WHERE splits.state = 'staged'",
    " RETURNING split_id, (xmax = 0) AS inserted"
);

/// The time of a floor's write, as mend writes it: the staged grace period counts from a row's
/// `updated_at_ms`, which is indexed (`splits_by_state_and_update`). A floor that wrote one
/// constant time would make every overwrite after the first a HOT update, touching no index,
/// which no writer of real times gets: with it the upsert floor ran twice as fast, and
/// mend/floor read 0.40 where it is 0.8 or more.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        })
}

fn stage_request(dataset_id: &str, mode: StageMode, node: String, ids: &[String]) -> StageRequest {
    StageRequest {
        dataset_id: dataset_id.to_string(),
        mode,
        node,
        splits: ids
            .iter()
            .map(|id| StageSplit {
                split_id: id.clone(),
                metadata_json: metadata(id),
            })
            .collect(),
    }
}

/// A new dataset with the even half of the pool staged, untimed.
async fn prepared_dataset(engine: &Engine, name: String) -> Result<String, mend::MendError> {
    engine
        .create_dataset(&name, &DatasetConfig::default())
        .await?;
    let present: Vec<String> = (0..POOL).step_by(2).map(pool_id).collect();
    for chunk in present.chunks(1_000) {
        let request = stage_request(&name, StageMode::CreateOnly, "setup".into(), chunk);
        engine.stage(&request).await?;
    }
    Ok(name)
}

/// Runs `workload` with all writers at once; the time from the first batch to the last.
async fn run(
    engine: &Engine,
    pool: &PgPool,
    dataset_id: &str,
    workload: Workload,
    batches: usize,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (engine, pool, dataset_id) = (engine.clone(), pool.clone(), dataset_id.to_string());
            tokio::spawn(async move {
                for batch in batches_of(writer, batches) {
                    match workload {
                        Workload::Mend(mode) => {
                            let node = format!("writer-{writer}");
                            let request = stage_request(&dataset_id, mode, node, &batch);
                            engine.stage(&request).await.map_err(|e| e.to_string())?;
                        }
                        Workload::Floor(statement) | Workload::FloorInTransaction(statement) => {
                            let mut ids: Vec<&str> = batch.iter().map(String::as_str).collect();
                            ids.sort_unstable();
                            ids.dedup();
                            let metadata: Vec<String> = ids.iter().map(|id| metadata(id)).collect();
                            let query = sqlx::query(statement)
                                .bind(&dataset_id)
                                .bind(&ids)
                                .bind(&metadata)
                                .bind("floor")
                                .bind(now_ms());
                            if let Workload::FloorInTransaction(_) = workload {
                                let mut transaction =
                                    pool.begin().await.map_err(|e| e.to_string())?;
                                query
                                    .fetch_all(&mut *transaction)
                                    .await
                                    .map_err(|e| e.to_string())?;
                                transaction.commit().await.map_err(|e| e.to_string())?;
                            } else {
                                query.fetch_all(&pool).await.map_err(|e| e.to_string())?;
                            }
                        }
                    }
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for writer in writers {
        writer.await??;
    }
    Ok(started.elapsed())
}

async fn deadlocks(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        .fetch_one(pool)
        .await
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(3);
    let batches: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(100);
    if rounds == 0 || batches == 0 {
        return Err("ROUNDS and BATCHES are at least 1".into());
    }
    let url = std::env::var("MEND_TEST_DATABASE_URL")
        .map_err(|_| "set MEND_TEST_DATABASE_URL (scripts/with-postgres does)")?;
    let options = PostgresOptions {
        accept_unsafe_durability: std::env::var("MEND_POSTGRES_ACCEPT_UNSAFE_DURABILITY")
            .is_ok_and(|value| value == "true"),
    };
    let objects = tempfile::tempdir()?;
    let objects_url = format!("file://{}", objects.path().display());
    let (catalog, split_objects) =
        mend::catalog::open_with(&url, Some(&objects_url), options).await?;
    let engine = Engine::new(
        catalog,
        split_objects,
        PolicyRuntime::default_policy()?,
        EngineOptions::default(),
    )?;
    let pool = PgPool::connect(&url).await?;
    let run_id = std::process::id();

    println!(
        "{WRITERS} writers x {batches} batches x {BATCH} ids drawn from a pool of {POOL} (unsorted, with duplicates), half of it staged first; {rounds} rounds"
    );
    let workloads = [
        ("create-only floor", Workload::Floor(FLOOR_CREATE_ONLY)),
        (
            "create-only floor returning",
            Workload::Floor(FLOOR_CREATE_ONLY_RETURNING),
        ),
        ("create-only mend", Workload::Mend(StageMode::CreateOnly)),
        ("upsert floor", Workload::Floor(FLOOR_UPSERT)),
        (
            "upsert floor returning",
            Workload::Floor(FLOOR_UPSERT_RETURNING),
        ),
        ("upsert mend", Workload::Mend(StageMode::Upsert)),
        (
            "upsert floor returning, BEGIN..COMMIT",
            Workload::FloorInTransaction(FLOOR_UPSERT_RETURNING),
        ),
    ];
    // mend/floor per round: [create-only, create-only returning, upsert, upsert returning],
    // then the upsert floor in a transaction against the same alone.
    let mut ratios: [Vec<f64>; 5] = Default::default();
    let mut mend_deadlocks = 0;
    for round in 0..rounds {
        let mut took = Vec::new();
        for (index, (name, workload)) in workloads.iter().enumerate() {
            let dataset = format!("seed-{run_id}-{round}-{index}");
            let dataset = prepared_dataset(&engine, dataset).await?;
            let before = deadlocks(&pool).await?;
            took.push(
                run(&engine, &pool, &dataset, *workload, batches)
                    .await?
                    .as_secs_f64(),
            );
            let seen = deadlocks(&pool).await? - before;
            if matches!(workload, Workload::Mend(_)) {
                mend_deadlocks += seen;
            }
            let ids_per_s = (WRITERS * batches * BATCH) as f64 / took[index];
            println!(
                "  round {round}: {name:<27} {:>8.1} ms, {ids_per_s:>8.0} ids/s, {seen} deadlocks",
                took[index] * 1e3
            );
        }
        for (ratio, (floor, mend)) in
            ratios
                .iter_mut()
                .zip([(0, 2), (1, 2), (3, 5), (4, 5), (4, 6)])
        {
            ratio.push(took[floor] / took[mend]);
        }
        println!(
            "  round {round}: mend/floor create-only {:.2} (returning {:.2}), upsert {:.2} (returning {:.2}); the upsert floor in a transaction / alone {:.2}",
            ratios[0][round],
            ratios[1][round],
            ratios[2][round],
            ratios[3][round],
            ratios[4][round]
        );
    }
    let [
        create_only,
        create_only_returning,
        upsert,
        upsert_returning,
        in_transaction,
    ] = ratios.map(median);
    println!(
        "mend/floor, median of {rounds} rounds: create-only {create_only:.2} (against the floor that says which ids it inserted: {create_only_returning:.2}; goal >= 0.8), upsert {upsert:.2} ({upsert_returning:.2}; goal >= 0.6); deadlocks during mend's workloads: {mend_deadlocks} (goal 0); the upsert floor between BEGIN and COMMIT runs at {in_transaction:.2} of itself alone"
    );
    Ok(())
}

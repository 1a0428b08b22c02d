//! Staging under contention, shaped like the contention bench: 8 writers at once, each staging
//! batches of ids drawn at random from one pool (some already staged, published or marked,
//! most not yet written), shuffled and with repeats, so that every batch overlaps others in a
//! different order. Through the whole engine (policy included), in both modes; each test
//! counts every outcome and prints the counts.
//!
//! - Create-only: every id that has a row was inserted by exactly one writer, whose content the
//!   row holds; every other outcome is `skipped` with the state the row had; the rows that
//!   existed before are exactly as they were.
//! - Upsert: a batch that names a published or marked row is refused with FailedPrecondition
//!   naming exactly those ids, and writes nothing; every other batch inserts or overwrites each
//!   of its ids, each id inserted exactly once; no published or marked row ever changes.
//! - Either way, every answer covers each distinct id of its batch exactly once; every id a
//!   writer was told it inserted or overwrote has a staged row afterwards; a fresh id answered
//!   `skipped` or `overwritten` was inserted by a writer that was told so (and, if that was the
//!   same writer, by an earlier batch of it).
//! - No request fails, and on Postgres no deadlock happens. The catalog retries a transaction
//!   Postgres aborted for a deadlock, so the writers never see one: the test counts them in
//!   `pg_stat_database`. A backend counts its deadlocks locally and flushes them to that view
//!   only now and then (at most once a second, or after ten seconds idle), and always when it
//!   exits; so the test runs on a database of its own and reads the count once no backend is
//!   connected to it any more.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mend::catalog::{Catalog, ObjectStoreCatalog, PostgresCatalog};
use mend::clock::ManualClock;
use mend::model::{
    DatasetConfig, SplitRow, SplitState, StageMode, StageOutcome, StageRequest, StageSplit,
};
use mend::objects::SplitObjects;
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions, MendError};
use mend_tests::draw::Draw;
use mend_tests::harness::{
    TEST_EPOCH_MS, TEST_MAX_STAGE_BATCH, drop_database, own_database, postgres_options,
    postgres_url,
};
use mend_tests::{Backend, Harness};
use object_store::memory::InMemory;
use object_store::path::Path;

const WRITERS: usize = 8;
/// Ids staged, published and marked before the writers start.
const STAGED: usize = 300;
const PUBLISHED: usize = 20;
const MARKED: usize = 20;
/// Ids no one has written yet, which the writers race each other to insert.
const FRESH: usize = 1_500;
const BATCH: usize = 100;
const REPEATS: usize = 5;
/// Every this many batches of a writer, one id is a published or marked one.
const OTHERS_EVERY: usize = 4;

fn staged_id(n: usize) -> String {
    format!("staged-{n:04}")
}

fn published_id(n: usize) -> String {
    format!("published-{n:04}")
}

fn marked_id(n: usize) -> String {
    format!("marked-{n:04}")
}

fn fresh_id(n: usize) -> String {
    format!("fresh-{n:04}")
}

/// Writer `writer`'s batches: about half fresh ids, the rest staged ones, shuffled, with
/// repeats; with `others`, one id in every `others`-th batch is published or marked.
fn batches(writer: usize, count: usize, others: Option<usize>) -> Vec<Vec<String>> {
    let mut draw = Draw(0x9e37_79b9_7f4a_7c15 ^ ((writer as u64 + 1) * 0x1000_0001));
    (0..count)
        .map(|index| {
            let mut batch: Vec<String> = (0..BATCH - REPEATS)
                .map(|i| match i % 2 {
                    0 => fresh_id(draw.below(FRESH)),
                    _ => staged_id(draw.below(STAGED)),
                })
                .collect();
            if let Some(every) = others
                && index % every == 0
            {
                batch[0] = match draw.below(2) {
                    0 => published_id(draw.below(PUBLISHED)),
                    _ => marked_id(draw.below(MARKED)),
                };
            }
            for _ in 0..REPEATS {
                let repeat = batch[draw.below(batch.len())].clone();
                batch.push(repeat);
            }
            for i in (1..batch.len()).rev() {
                batch.swap(i, draw.below(i + 1));
            }
            batch
        })
        .collect()
}

/// What a writer sends for `split_id`: content that names the writer and the batch, so a row
/// tells who wrote it last.
fn metadata(writer: usize, batch: usize) -> String {
    format!(r#"{{"writer":{writer},"batch":{batch}}}"#)
}

/// An engine on a catalog of its own: on Postgres a database of its own (its deadlock count is
/// this test's alone), on memory a store of its own. Objects live in memory either way.
struct Contended {
    engine: Arc<Engine>,
    /// On Postgres, the database's name.
    database: Option<String>,
}

impl Contended {
    async fn new(backend: Backend) -> Self {
        let store = Arc::new(InMemory::new());
        let (catalog, database): (Arc<dyn Catalog>, _) = match backend {
            Backend::Postgres => {
                let (url, database) = own_database("mend_staging_contention").await;
                let catalog = PostgresCatalog::connect_with(&url, postgres_options())
                    .await
                    .unwrap_or_else(|error| panic!("connect to {url}: {error}"));
                (Arc::new(catalog), Some(database))
            }
            Backend::Memory => {
                let catalog =
                    ObjectStoreCatalog::new(store.clone(), Path::default(), Default::default());
                (Arc::new(catalog), None)
            }
            other => panic!("no contention test on {other}"),
        };
        let options = EngineOptions {
            max_stage_batch: TEST_MAX_STAGE_BATCH,
            clock: Arc::new(ManualClock::new(TEST_EPOCH_MS)),
            ..EngineOptions::default()
        };
        let policy = PolicyRuntime::default_policy().expect("default policy loads");
        let objects = SplitObjects::new(store, Path::default());
        let engine = Engine::new(catalog, objects, policy, options).expect("engine starts");
        Self {
            engine: Arc::new(engine),
            database,
        }
    }

    /// Closes the engine and answers the deadlocks Postgres detected in the test's database
    /// (`None` on memory), then drops the database.
    ///
    /// A backend flushes its counters when it exits (before it leaves `pg_stat_activity`), so
    /// once no backend is connected to the database, every deadlock any of them detected is
    /// counted. The catalog's connections are closed with the engine; any still open (a pool
    /// that outlives it) are terminated, which flushes them all the same.
    async fn deadlocks(self) -> Option<i64> {
        let database = self.database?;
        drop(self.engine);
        let admin = sqlx::PgPool::connect(&postgres_url())
            .await
            .expect("connect to the test Postgres");
        let connected = |admin| {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_stat_activity WHERE datname = $1")
                .bind(database.clone())
                .fetch_one(admin)
        };
        let started = Instant::now();
        while connected(&admin).await.expect("read pg_stat_activity") > 0 {
            if started.elapsed() > Duration::from_secs(2) {
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                )
                .bind(&database)
                .execute(&admin)
                .await
                .expect("terminate the test database's backends");
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "backends of {database} still connected a minute after the engine closed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let deadlocks = sqlx::query_scalar::<_, i64>(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = $1",
        )
        .bind(&database)
        .fetch_one(&admin)
        .await
        .expect("read pg_stat_database");
        admin.close().await;
        drop_database(&database).await;
        Some(deadlocks)
    }
}

/// A dataset with its staged, published and marked ids in place.
async fn prepared(engine: &Engine) -> String {
    let dataset_id = format!("contention-{}", uuid::Uuid::new_v4().simple());
    engine
        .create_dataset(&dataset_id, &DatasetConfig::default())
        .await
        .expect("create dataset");
    let existing: Vec<String> = (0..STAGED)
        .map(staged_id)
        .chain((0..PUBLISHED).map(published_id))
        .chain((0..MARKED).map(marked_id))
        .collect();
    let request = StageRequest {
        dataset_id: dataset_id.clone(),
        mode: StageMode::CreateOnly,
        node: "setup".into(),
        splits: existing
            .iter()
            .map(|id| StageSplit {
                split_id: id.clone(),
                metadata_json: "{}".into(),
            })
            .collect(),
    };
    engine.stage(&request).await.expect("setup stage");
    let settled: Vec<String> = (0..PUBLISHED)
        .map(published_id)
        .chain((0..MARKED).map(marked_id))
        .collect();
    for split_id in &settled {
        engine
            .objects()
            .put(
                &dataset_id,
                split_id,
                bytes::Bytes::from_static(b"split object").into(),
            )
            .await
            .expect("write a split object");
    }
    engine
        .publish(&mend::model::PublishRequest::staged(
            &dataset_id,
            settled.clone(),
        ))
        .await
        .expect("setup publish");
    let marked: Vec<String> = (0..MARKED).map(marked_id).collect();
    engine
        .mark_for_deletion(&dataset_id, &marked)
        .await
        .expect("setup mark");
    dataset_id
}

async fn rows(engine: &Engine, dataset_id: &str) -> BTreeMap<String, SplitRow> {
    engine
        .catalog()
        .list_splits(dataset_id, &mend::model::ListQuery::default())
        .await
        .expect("list the dataset's rows")
        .splits
        .into_iter()
        .map(|row| (row.split_id.clone(), row))
        .collect()
}

/// Checks that `result` has one outcome for each distinct id of `batch` and no other.
fn covers(backend: Backend, batch: &[String], result: &mend::model::StageResult) {
    let distinct: BTreeSet<&String> = batch.iter().collect();
    let answered: Vec<&String> = result.splits.iter().map(|split| &split.split_id).collect();
    let answered_once: BTreeSet<&String> = answered.iter().copied().collect();
    assert_eq!(
        answered.len(),
        answered_once.len(),
        "{backend}: an id answered twice: {answered:?}"
    );
    assert_eq!(
        answered_once, distinct,
        "{backend}: the answer covers exactly the batch's distinct ids"
    );
}

/// Every writer's batches at once; each batch's request and what came back, per writer.
type Answers = Vec<Vec<(Vec<String>, mend::Result<mend::model::StageResult>)>>;

async fn race(
    engine: &Arc<Engine>,
    dataset_id: &str,
    mode: StageMode,
    count: usize,
    others: Option<usize>,
) -> Answers {
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let engine = engine.clone();
            let dataset_id = dataset_id.to_string();
            tokio::spawn(async move {
                let mut answers = Vec::new();
                for (index, batch) in batches(writer, count, others).into_iter().enumerate() {
                    let request = StageRequest {
                        dataset_id: dataset_id.clone(),
                        mode,
                        node: format!("writer-{writer}"),
                        splits: batch
                            .iter()
                            .map(|id| StageSplit {
                                split_id: id.clone(),
                                metadata_json: metadata(writer, index),
                            })
                            .collect(),
                    };
                    answers.push((batch, engine.stage(&request).await));
                }
                answers
            })
        })
        .collect();
    let mut answers = Vec::new();
    for writer in writers {
        answers.push(writer.await.expect("writer"));
    }
    answers
}

/// Runs the race on a fresh catalog: the rows before, every answer, the rows after, and the
/// deadlocks Postgres detected (`None`: no counter on this backend).
async fn raced(
    backend: Backend,
    mode: StageMode,
    count: usize,
) -> (
    BTreeMap<String, SplitRow>,
    Answers,
    BTreeMap<String, SplitRow>,
    Option<i64>,
) {
    let contended = Contended::new(backend).await;
    let engine = &contended.engine;
    let dataset_id = prepared(engine).await;
    let before = rows(engine, &dataset_id).await;
    let answers = race(engine, &dataset_id, mode, count, Some(OTHERS_EVERY)).await;
    let after = rows(engine, &dataset_id).await;
    (before, answers, after, contended.deadlocks().await)
}

async fn create_only_under_contention(backend: Backend, count: usize) {
    let (before, answers, after, deadlocks) = raced(backend, StageMode::CreateOnly, count).await;
    // Who was told it inserted each id, and from which batch.
    let mut inserted: BTreeMap<String, Vec<(usize, usize)>> = BTreeMap::new();
    // The fresh ids answered skipped, and to whom.
    let mut lost: Vec<(String, usize, usize)> = Vec::new();
    let mut skipped: BTreeMap<SplitState, usize> = BTreeMap::new();
    let mut requested = 0;
    for (writer, answers) in answers.iter().enumerate() {
        for (index, (batch, result)) in answers.iter().enumerate() {
            let result = result
                .as_ref()
                .unwrap_or_else(|error| panic!("{backend}: writer {writer} failed: {error}"));
            covers(backend, batch, result);
            requested += result.splits.len();
            for split in &result.splits {
                match split.outcome {
                    StageOutcome::Inserted => inserted
                        .entry(split.split_id.clone())
                        .or_default()
                        .push((writer, index)),
                    StageOutcome::Skipped(state) => {
                        match before.contains_key(&split.split_id) {
                            true => *skipped.entry(state).or_default() += 1,
                            // A fresh id another writer (or an earlier batch) inserted first.
                            false => lost.push((split.split_id.clone(), writer, index)),
                        }
                        // The state reported is the row's: pre-existing rows never moved, and
                        // a fresh id's row, whoever won it, is staged.
                        let expected = before
                            .get(&split.split_id)
                            .map_or(SplitState::Staged, |row| row.state);
                        assert_eq!(
                            state, expected,
                            "{backend}: {} skipped as {state}",
                            split.split_id
                        );
                    }
                    other => panic!("{backend}: create-only answered {other:?}"),
                }
            }
        }
    }
    for (split_id, winners) in &inserted {
        assert_eq!(
            winners.len(),
            1,
            "{backend}: {split_id} inserted by {winners:?}"
        );
        assert!(
            !before.contains_key(split_id),
            "{backend}: {split_id} existed"
        );
        let (writer, batch) = winners[0];
        let row = after
            .get(split_id)
            .unwrap_or_else(|| panic!("{backend}: {split_id} was inserted and has no row"));
        assert_eq!(row.state, SplitState::Staged, "{backend}: {split_id}");
        assert_eq!(
            row.node,
            format!("writer-{writer}"),
            "{backend}: {split_id}"
        );
        assert_eq!(
            row.metadata,
            serde_json::json!({ "writer": writer, "batch": batch }),
            "{backend}: {split_id} holds its inserter's content"
        );
    }
    // A fresh id skipped was inserted by a writer told so: by another writer, or by an earlier
    // batch of the same one (a writer's batches run one after the other).
    for (split_id, writer, index) in &lost {
        let Some(&[(inserter, batch)]) = inserted.get(split_id).map(Vec::as_slice) else {
            panic!(
                "{backend}: {split_id} was answered skipped to writer {writer} batch {index}, \
                 and no writer was told it inserted it"
            );
        };
        assert!(
            inserter != *writer || batch < *index,
            "{backend}: {split_id} was answered skipped to writer {writer} batch {index}, \
             whose own batch {batch} inserted it only then or later"
        );
    }
    for (split_id, row) in &after {
        match before.get(split_id) {
            Some(earlier) => assert_eq!(row, earlier, "{backend}: {split_id} was touched"),
            None => assert!(
                inserted.contains_key(split_id),
                "{backend}: {split_id} has a row no writer was told it inserted"
            ),
        }
    }
    assert!(
        !inserted.is_empty() && !lost.is_empty(),
        "{backend}: the writers both inserted fresh ids and met each other's ({} inserted, {} \
         skipped)",
        inserted.len(),
        lost.len()
    );
    let deadlocks = no_deadlocks(backend, deadlocks);
    println!(
        "staging contention [{backend}, create-only]: {WRITERS} writers x {count} batches of {BATCH} ids: \
         {requested} distinct ids requested and answered, {} inserted (each by exactly one writer, its row holding its content), \
         {} skipped as staged because a writer had inserted them (each matched to that writer), \
         rows that existed before skipped as they were {:?}; 0 errors, {deadlocks}",
        inserted.len(),
        lost.len(),
        skipped
    );
}

async fn upsert_under_contention(backend: Backend, count: usize) {
    let (before, answers, after, deadlocks) = raced(backend, StageMode::Upsert, count).await;
    let mut inserted: BTreeMap<String, usize> = BTreeMap::new();
    // For every id, the writers that were told they wrote it, and with which batch.
    let mut writers_of: BTreeMap<String, BTreeSet<(usize, usize)>> = BTreeMap::new();
    // The fresh ids answered overwritten: a writer inserted them first.
    let mut raced_ids: BTreeSet<String> = BTreeSet::new();
    let (mut accepted, mut refused, mut overwritten) = (0, 0, 0);
    for (writer, answers) in answers.iter().enumerate() {
        for (index, (batch, result)) in answers.iter().enumerate() {
            let settled: BTreeSet<String> = batch
                .iter()
                .filter(|id| {
                    before
                        .get(*id)
                        .is_some_and(|row| row.state != SplitState::Staged)
                })
                .cloned()
                .collect();
            match result {
                Ok(result) => {
                    assert!(
                        settled.is_empty(),
                        "{backend}: a batch naming {settled:?} was accepted"
                    );
                    covers(backend, batch, result);
                    accepted += 1;
                    for split in &result.splits {
                        match split.outcome {
                            StageOutcome::Inserted => {
                                *inserted.entry(split.split_id.clone()).or_default() += 1
                            }
                            StageOutcome::Overwritten => {
                                overwritten += 1;
                                if !before.contains_key(&split.split_id) {
                                    raced_ids.insert(split.split_id.clone());
                                }
                            }
                            other => panic!("{backend}: upsert answered {other:?}"),
                        }
                        writers_of
                            .entry(split.split_id.clone())
                            .or_default()
                            .insert((writer, index));
                    }
                }
                Err(MendError::FailedPrecondition { ids, .. }) => {
                    let named: BTreeSet<String> = ids.iter().cloned().collect();
                    assert_eq!(
                        named, settled,
                        "{backend}: the refusal names exactly the rows that are not staged"
                    );
                    refused += 1;
                }
                Err(error) => panic!("{backend}: writer {writer} failed: {error}"),
            }
        }
    }
    for (split_id, times) in &inserted {
        assert_eq!(*times, 1, "{backend}: {split_id} inserted {times} times");
        assert!(
            !before.contains_key(split_id),
            "{backend}: {split_id} existed"
        );
    }
    // A fresh id overwritten was inserted first by a writer told so.
    for split_id in &raced_ids {
        assert!(
            inserted.contains_key(split_id),
            "{backend}: {split_id} was answered overwritten, and no writer was told it \
             inserted it"
        );
    }
    // Every id a writer was told it inserted or overwrote is there, staged.
    for (split_id, writers) in &writers_of {
        let row = after.get(split_id).unwrap_or_else(|| {
            panic!("{backend}: {split_id} was written by {writers:?} and has no row")
        });
        assert_eq!(
            row.state,
            SplitState::Staged,
            "{backend}: {split_id} was written by {writers:?}"
        );
    }
    for (split_id, row) in &after {
        let earlier = before.get(split_id);
        if earlier.is_some_and(|row| row.state != SplitState::Staged) {
            assert_eq!(
                Some(row),
                earlier,
                "{backend}: {split_id} is not staged and changed"
            );
            continue;
        }
        if earlier.is_none() {
            assert!(
                inserted.contains_key(split_id),
                "{backend}: {split_id} has a row no writer was told it inserted"
            );
        }
        // A staged row holds the content of one of the writers told they wrote it (the last to
        // commit), or is as it was if none was.
        match writers_of.get(split_id) {
            Some(writers) => {
                let writer: usize = row.node["writer-".len()..].parse().expect("writer's node");
                let batch = row.metadata["batch"].as_u64().expect("batch") as usize;
                assert!(
                    writers.contains(&(writer, batch)),
                    "{backend}: {split_id} holds content of writer {writer} batch {batch}, \
                     which was not told it wrote it"
                );
            }
            None => assert_eq!(Some(row), earlier, "{backend}: {split_id} changed"),
        }
    }
    assert!(
        refused > 0 && accepted > 0 && !raced_ids.is_empty(),
        "{backend}: both kinds of batch ran, and writers overwrote each other's fresh rows \
         ({accepted} accepted, {refused} refused, {} raced)",
        raced_ids.len()
    );
    let deadlocks = no_deadlocks(backend, deadlocks);
    println!(
        "staging contention [{backend}, upsert]: {WRITERS} writers x {count} batches of {BATCH} ids: \
         {accepted} batches applied, each answering every id of its batch ({} ids inserted, each exactly once; \
         {overwritten} overwrites of staged rows, {} fresh rows among them, each inserted first by a writer told so; \
         every id written has a staged row holding one of its writers' content), \
         {refused} refused naming exactly their published or marked ids (no such row changed); 0 errors, {deadlocks}",
        inserted.len(),
        raced_ids.len(),
    );
}

/// Asserts that Postgres detected no deadlock, and says so.
fn no_deadlocks(backend: Backend, deadlocks: Option<i64>) -> String {
    match deadlocks {
        Some(deadlocks) => {
            assert_eq!(deadlocks, 0, "{backend}: Postgres detected deadlocks");
            "0 deadlocks (pg_stat_database, read once every backend of the test's database had exited)".to_string()
        }
        None => "no deadlock counter on this backend".to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_only_under_contention_on_postgres() {
    create_only_under_contention(Backend::Postgres, 40).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upsert_under_contention_on_postgres() {
    upsert_under_contention(Backend::Postgres, 40).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_only_under_contention_on_memory() {
    create_only_under_contention(Backend::Memory, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upsert_under_contention_on_memory() {
    upsert_under_contention(Backend::Memory, 10).await;
}

/// What one batch of 100 ids costs the Postgres server, counted on the wire ([`SqlCounter`]):
/// a create-only batch (half of its ids exist) is one statement that inserts and reads the
/// states of the rows it met, no transaction; an upsert batch is one statement too, whole or
/// nothing, that writes and observes; an upsert refused for a published row is that statement
/// failing, then `BEGIN`, the statement again, the read of that row's state and `ROLLBACK`. No
/// ping before a batch (the pool pings only a connection idle for seconds); sqlx's own ping
/// when a connection goes back to the pool is one round trip more for each connection taken.
///
/// [`SqlCounter`]: mend_tests::sql_counter::SqlCounter
#[tokio::test]
async fn a_batch_costs_its_statements_and_no_more_on_postgres() {
    let h = Harness::counting_sql(Backend::Postgres).await;
    let dataset_id = prepared(&h.engine).await;
    let request = |mode: StageMode, round: usize, settled: bool| StageRequest {
        dataset_id: dataset_id.clone(),
        mode,
        node: "counted".into(),
        splits: (0..BATCH)
            .map(|i| StageSplit {
                split_id: match (settled, i) {
                    (true, 0) => published_id(0),
                    (_, i) if i % 2 == 0 => staged_id(i),
                    _ => format!("counted-{mode}-{round}-{i:03}"),
                },
                metadata_json: "{}".into(),
            })
            .collect(),
    };
    let sql = h.sql.as_ref().expect("a counting harness");
    // The first rounds prepare each statement on the connections they take. A batch that takes
    // a connection the statement was never prepared on costs one round trip more (its Parse),
    // so each kind is judged by its cheapest batch of the last rounds: that is what a batch
    // costs once the statements are prepared. (A create-only stage's statement also depends on
    // what the dataset's last create-only stage met, so one more kind of statement is warming.)
    // Per kind: (statements, round trips) expected, then the cheapest batch's.
    let mut cheapest: std::collections::BTreeMap<&str, ((u64, u64), u64, u64)> =
        std::collections::BTreeMap::new();
    for round in 0..6 {
        for (what, mode, settled, statements, connections) in [
            ("create-only", StageMode::CreateOnly, false, 1, 1),
            // The upsert with the record of the write in the same statement.
            ("upsert", StageMode::Upsert, false, 1, 1),
            // The whole statement refused; BEGIN, the statement, the state read, ROLLBACK.
            ("upsert refused", StageMode::Upsert, true, 5, 2),
        ] {
            let before = sql.counts();
            let result = h.engine.stage(&request(mode, round, settled)).await;
            // sqlx pings each connection it takes back into the pool, in the background: let
            // that land, so that it is counted with the batch that caused it.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let spent = sql.counts().since(&before);
            assert_eq!(result.is_ok(), !settled, "{what}: {result:?}");
            if round >= 3 {
                let expected = (statements, statements + connections);
                let seen =
                    cheapest
                        .entry(what)
                        .or_insert((expected, spent.statements, spent.round_trips));
                if (spent.statements, spent.round_trips) < (seen.1, seen.2) {
                    *seen = (expected, spent.statements, spent.round_trips);
                }
            }
        }
    }
    let mut lines = Vec::new();
    for (what, (expected, spent_statements, round_trips)) in &cheapest {
        assert_eq!(
            (*spent_statements, *round_trips),
            *expected,
            "{what}: statements and round trips of one batch (one round trip each, and the \
             pool's ping when a connection goes back)"
        );
        lines.push(format!(
            "{what} {spent_statements} statements in {round_trips} round trips"
        ));
    }
    assert_eq!(lines.len(), 3);
    println!(
        "staging on postgres, per batch of {BATCH} ids: {}",
        lines.join(", ")
    );
}

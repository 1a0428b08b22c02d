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
//! - No request fails, and on Postgres no deadlock happens (`pg_stat_database` counts the
//!   deadlocks Postgres detected during the test; a retried one would not surface as an error).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use mend::MendError;
use mend::model::{SplitRow, SplitState, StageMode, StageOutcome, StageRequest, StageSplit};
use mend_tests::draw::Draw;
use mend_tests::{Backend, Harness};

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

/// A dataset with its staged, published and marked ids in place.
async fn prepared(h: &Harness) -> String {
    let dataset_id = h.create_dataset("contention").await;
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
    h.engine.stage(&request).await.expect("setup stage");
    let settled: Vec<String> = (0..PUBLISHED)
        .map(published_id)
        .chain((0..MARKED).map(marked_id))
        .collect();
    h.put_objects(&dataset_id, &settled).await;
    h.engine
        .publish(&mend::model::PublishRequest::staged(
            &dataset_id,
            settled.clone(),
        ))
        .await
        .expect("setup publish");
    let marked: Vec<String> = (0..MARKED).map(marked_id).collect();
    h.engine
        .mark_for_deletion(&dataset_id, &marked)
        .await
        .expect("setup mark");
    dataset_id
}

async fn rows(h: &Harness, dataset_id: &str) -> BTreeMap<String, SplitRow> {
    h.rows(dataset_id)
        .await
        .into_iter()
        .map(|row| (row.split_id.clone(), row))
        .collect()
}

async fn deadlocks(h: &Harness) -> Option<i64> {
    let pool = h.pg.as_ref()?;
    Some(
        sqlx::query_scalar(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
        )
        .fetch_one(pool)
        .await
        .expect("read pg_stat_database"),
    )
}

/// Every writer's batches at once; each batch's request and what came back, per writer.
type Answers = Vec<Vec<(Vec<String>, mend::Result<mend::model::StageResult>)>>;

async fn race(
    h: &Arc<Harness>,
    dataset_id: &str,
    mode: StageMode,
    count: usize,
    others: Option<usize>,
) -> Answers {
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let h = h.clone();
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
                    answers.push((batch, h.engine.stage(&request).await));
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

async fn create_only_under_contention(backend: Backend, count: usize) {
    let h = Arc::new(Harness::new(backend).await);
    let dataset_id = prepared(&h).await;
    let before = rows(&h, &dataset_id).await;
    let deadlocks_before = deadlocks(&h).await;

    let answers = race(
        &h,
        &dataset_id,
        StageMode::CreateOnly,
        count,
        Some(OTHERS_EVERY),
    )
    .await;

    let after = rows(&h, &dataset_id).await;
    // Who was told it inserted each id, and from which batch.
    let mut inserted: BTreeMap<String, Vec<(usize, usize)>> = BTreeMap::new();
    let mut skipped: BTreeMap<SplitState, usize> = BTreeMap::new();
    let (mut requested, mut lost) = (0, 0);
    for (writer, answers) in answers.iter().enumerate() {
        for (index, (batch, result)) in answers.iter().enumerate() {
            let result = result
                .as_ref()
                .unwrap_or_else(|error| panic!("{backend}: writer {writer} failed: {error}"));
            let distinct: BTreeSet<&String> = batch.iter().collect();
            assert_eq!(
                result.splits.len(),
                distinct.len(),
                "{backend}: one outcome per distinct id"
            );
            requested += distinct.len();
            for split in &result.splits {
                match split.outcome {
                    StageOutcome::Inserted => inserted
                        .entry(split.split_id.clone())
                        .or_default()
                        .push((writer, index)),
                    StageOutcome::Skipped(state) => {
                        match before.contains_key(&split.split_id) {
                            true => *skipped.entry(state).or_default() += 1,
                            // A fresh id another writer inserted first.
                            false => lost += 1,
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
        let row = &after[split_id];
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
    for (split_id, row) in &after {
        match before.get(split_id) {
            Some(earlier) => assert_eq!(row, earlier, "{backend}: {split_id} was touched"),
            None => assert!(
                inserted.contains_key(split_id),
                "{backend}: {split_id} has a row no writer was told it inserted"
            ),
        }
    }
    let deadlocks = deadlocks_after(&h, deadlocks_before).await;
    println!(
        "staging contention [{backend}, create-only]: {WRITERS} writers x {count} batches of {BATCH} ids: \
         {requested} distinct ids requested, {} inserted (each by exactly one writer, holding its content), \
         {lost} skipped as staged because another writer had inserted them, rows that existed before skipped as they were {:?}; \
         0 errors, {deadlocks}",
        inserted.len(),
        skipped
    );
}

async fn upsert_under_contention(backend: Backend, count: usize) {
    let h = Arc::new(Harness::new(backend).await);
    let dataset_id = prepared(&h).await;
    let before = rows(&h, &dataset_id).await;
    let deadlocks_before = deadlocks(&h).await;

    let answers = race(
        &h,
        &dataset_id,
        StageMode::Upsert,
        count,
        Some(OTHERS_EVERY),
    )
    .await;

    let after = rows(&h, &dataset_id).await;
    let mut inserted: BTreeMap<String, usize> = BTreeMap::new();
    // For every id, the writers that were told they wrote it, and with which batch.
    let mut writers_of: BTreeMap<String, BTreeSet<(usize, usize)>> = BTreeMap::new();
    let (mut accepted, mut refused, mut overwritten, mut raced) = (0, 0, 0, 0);
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
                    accepted += 1;
                    for split in &result.splits {
                        match split.outcome {
                            StageOutcome::Inserted => {
                                *inserted.entry(split.split_id.clone()).or_default() += 1
                            }
                            StageOutcome::Overwritten => {
                                overwritten += 1;
                                if !before.contains_key(&split.split_id) {
                                    raced += 1;
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
                assert_eq!(row.state, SplitState::Staged);
            }
            None => assert_eq!(Some(row), earlier, "{backend}: {split_id} changed"),
        }
    }
    assert!(
        refused > 0 && accepted > 0,
        "{backend}: both kinds of batch ran"
    );
    let deadlocks = deadlocks_after(&h, deadlocks_before).await;
    println!(
        "staging contention [{backend}, upsert]: {WRITERS} writers x {count} batches of {BATCH} ids: \
         {accepted} batches applied ({} ids inserted, each exactly once; {overwritten} overwrites of staged rows, \
         {raced} of them of a row another writer inserted), \
         {refused} refused naming exactly their published or marked ids (no such row changed); 0 errors, {deadlocks}",
        inserted.len()
    );
}

/// Asserts that Postgres detected no deadlock since `before`, and says so.
async fn deadlocks_after(h: &Harness, before: Option<i64>) -> String {
    match (before, deadlocks(h).await) {
        (Some(before), Some(after)) => {
            assert_eq!(after - before, 0, "Postgres detected deadlocks");
            "0 deadlocks".to_string()
        }
        _ => "no deadlock counter on this backend".to_string(),
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
/// a create-only batch is a read and an insert, no transaction; an upsert batch is `BEGIN`,
/// one statement that writes and observes, and `COMMIT`; an upsert refused for a published row
/// adds the read of that row's state and ends in `ROLLBACK`. No ping before a batch (the pool
/// pings only a connection idle for seconds); sqlx's own ping when a connection goes back to
/// the pool is the one round trip more.
///
/// [`SqlCounter`]: mend_tests::sql_counter::SqlCounter
#[tokio::test]
async fn a_batch_costs_its_statements_and_no_more_on_postgres() {
    let h = Harness::counting_sql(Backend::Postgres).await;
    let dataset_id = prepared(&h).await;
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
    let mut lines = Vec::new();
    // The first rounds prepare each statement on the connection; the last one is counted.
    for round in 0..3 {
        for (what, mode, settled, statements) in [
            ("create-only", StageMode::CreateOnly, false, 2),
            ("upsert", StageMode::Upsert, false, 3),
            ("upsert refused", StageMode::Upsert, true, 4),
        ] {
            let before = sql.counts();
            let result = h.engine.stage(&request(mode, round, settled)).await;
            // sqlx pings each connection it takes back into the pool, in the background: let
            // that land, so that it is counted with the batch that caused it.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let spent = sql.counts().since(&before);
            assert_eq!(result.is_ok(), !settled, "{what}: {result:?}");
            if round == 2 {
                assert_eq!(
                    (spent.statements, spent.round_trips),
                    (statements, statements + 1),
                    "{what}: statements and round trips of one batch (one round trip each, \
                     and the pool's ping when the connection goes back)"
                );
                lines.push(format!(
                    "{what} {} statements in {} round trips",
                    spent.statements, spent.round_trips
                ));
            }
        }
    }
    println!(
        "staging on postgres, per batch of {BATCH} ids: {}",
        lines.join(", ")
    );
}

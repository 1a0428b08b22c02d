//! Conformance cases for requests under an idempotency key, at the catalog trait itself: for
//! each keyed mutation, its effect and result; a retry answering that result with nothing
//! written (the write fingerprint and the manifest version do not move), even once the
//! current state would refuse the request; the same key with another request refused with
//! nothing written; and records kept alongside concurrent writes of other requests.

use std::collections::BTreeSet;
use std::sync::Arc;

use mend::catalog::CatalogExt;
use mend::catalog::ExistingRow;
use mend::catalog::{
    Catalog, DatasetChange, MarkRule, PlannedAction, PlannedStage, PublishObservation,
    RecordedRequest, RequestKey, StagePlan, distinct_splits,
};
use mend::model::{
    DatasetConfig, MarkResult, NewSplit, StageMode, StageOutcome, StagedSplit, TimestampMs,
};
use mend::{EntityKind, MendError};

use super::{publish_request, rows};
use crate::harness::Harness;

/// A key for `request` of kind `kind`, digested as the engine does.
pub(super) fn key(name: &str, kind: &str, request: &impl serde::Serialize) -> RequestKey {
    RequestKey::new(name, &(kind, request))
}

fn new_splits(ids: &[&str]) -> Vec<NewSplit> {
    ids.iter()
        .map(|id| NewSplit {
            split_id: id.to_string(),
            node: "node-a".into(),
            metadata_json: "{}".into(),
            time_range: None,
        })
        .collect()
}

/// Create-only: insert what is missing, skip what exists.
fn create_only(splits: &[NewSplit], existing: &[ExistingRow]) -> mend::Result<StagePlan> {
    let mut entries: Vec<PlannedStage> = splits
        .iter()
        .map(|split| PlannedStage {
            split: Arc::new(split.clone()),
            action: match existing.iter().find(|row| row.split_id == split.split_id) {
                Some(row) => PlannedAction::Skip(row.state),
                None => PlannedAction::Insert,
            },
        })
        .collect();
    entries.sort_by(|a, b| a.split.split_id.cmp(&b.split.split_id));
    Ok(StagePlan { entries })
}

pub(super) async fn stage_keyed(
    catalog: &dyn Catalog,
    dataset_id: &str,
    ids: &[&str],
    now_ms: i64,
    key: Option<&RequestKey>,
) -> mend::Result<Vec<StagedSplit>> {
    let splits = new_splits(ids);
    let requested: Vec<Arc<NewSplit>> = splits.iter().cloned().map(Arc::new).collect();
    let distinct = distinct_splits(StageMode::CreateOnly, &requested);
    let planner = |existing: &[ExistingRow]| create_only(&splits, existing);
    catalog
        .stage(
            dataset_id,
            StageMode::CreateOnly,
            &distinct,
            &planner,
            now_ms,
            key,
        )
        .await
}

/// A validator that accepts every publish: these cases test the record, not the rules.
pub(super) fn accept(_: &PublishObservation) -> mend::Result<()> {
    Ok(())
}

fn refused_as_another_request(error: &MendError, key: &str) -> bool {
    matches!(error, MendError::InvalidArgument { message }
        if message.contains(key) && message.contains("another request"))
}

async fn manifest(h: &Harness<'_>, dataset_id: &str) -> u64 {
    h.engine
        .catalog()
        .dataset(dataset_id)
        .await
        .expect("read the dataset")
        .manifest_version
}

/// Over 100 lines: a case is one script against one dataset, each check under the step it
/// checks; split, it would only hand its state from piece to piece.
pub(super) async fn keyed_creation_answers_a_retry_with_the_dataset_it_created(h: &Harness<'_>) {
    let catalog = h.engine.catalog();
    let now = h.clock_now();
    let ds = h.unique_dataset_id("keyed-create");
    let config = DatasetConfig::default();
    let create = key("create-1", "create_dataset", &(&ds, &config));
    let first = catalog
        .create_dataset(&ds, "uid-first", &config, now, Some(&create))
        .await
        .expect("create under a key");
    assert_eq!(first.uid, "uid-first");
    let record = catalog
        .recorded_request(&ds, "create-1")
        .await
        .unwrap()
        .expect("the record lives in the new dataset");
    assert_eq!(record.result, serde_json::to_value(&first).unwrap());
    let mut checked = 2;

    // A retry makes a new uid, as a new request would: the answer is the first dataset.
    let before = h.write_fingerprint(&ds).await;
    for attempt in 0..3 {
        let again = catalog
            .create_dataset(
                &ds,
                &format!("uid-retry-{attempt}"),
                &config,
                now + 1,
                Some(&create),
            )
            .await
            .expect("a retried creation answers");
        assert_eq!(again, first, "retry {attempt}");
        checked += 1;
    }
    assert_eq!(h.write_fingerprint(&ds).await, before, "a retry wrote");

    let other = key("create-1", "create_dataset", &(&ds, "other config"));
    let error = catalog
        .create_dataset(&ds, "uid-x", &config, now, Some(&other))
        .await
        .unwrap_err();
    assert!(refused_as_another_request(&error, "create-1"), "{error:?}");
    assert_eq!(h.write_fingerprint(&ds).await, before, "a refusal wrote");
    let unkeyed = catalog
        .create_dataset(&ds, "uid-x", &config, now, None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            unkeyed,
            MendError::AlreadyExists {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{unkeyed:?}"
    );
    // A dataset that exists without this key: a keyed creation of it is still refused.
    let plain = h.create_dataset("plain").await;
    let late = key("create-2", "create_dataset", &(&plain, &config));
    let taken = catalog
        .create_dataset(&plain, "uid-y", &config, now, Some(&late))
        .await
        .unwrap_err();
    assert!(
        matches!(
            taken,
            MendError::AlreadyExists {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{taken:?}"
    );
    checked += 3;

    // Copies sent at once create the dataset once; every copy answers the one that won.
    let racers = h.scale().racing_creations;
    let raced = h.unique_dataset_id("keyed-create-race");
    let race_key = key("create-race", "create_dataset", &(&raced, &config));
    let mut tasks = Vec::new();
    for racer in 0..racers {
        let catalog = Arc::clone(catalog);
        let (raced, race_key, config) = (raced.clone(), race_key.clone(), config.clone());
        tasks.push(tokio::spawn(async move {
            catalog
                .create_dataset(
                    &raced,
                    &format!("uid-{racer}"),
                    &config,
                    now,
                    Some(&race_key),
                )
                .await
        }));
    }
    let mut uids = BTreeSet::new();
    for task in tasks {
        uids.insert(task.await.unwrap().expect("every copy answers").uid);
    }
    assert_eq!(
        uids.len(),
        1,
        "copies created the dataset more than once: {uids:?}"
    );
    let kept = catalog.dataset(&raced).await.unwrap();
    assert!(uids.contains(&kept.uid));
    checked += racers;

    // The record stays beside later writes.
    stage_keyed(catalog.as_ref(), &ds, &["s1"], now + 2, None)
        .await
        .unwrap();
    let again = catalog
        .create_dataset(&ds, "uid-late", &config, now + 3, Some(&create))
        .await
        .expect("answered after other writes");
    assert_eq!(again, first);
    checked += 1;
    println!(
        "conformance[{}]: keyed creation: {checked} checks, {racers} racing copies created 1 dataset",
        h.name()
    );
}

pub(super) async fn keyed_config_and_token_changes_answer_a_retry(h: &Harness<'_>) {
    let ds = h.create_dataset("keyed-config").await;
    let now = h.clock_now();
    let checked = keyed_config_change(h, &ds, now).await
        + keyed_publish_token(h, &ds, now + 3).await
        + keyed_fencing_epoch_advance(h, &ds, now + 6).await;
    println!(
        "conformance[{}]: keyed config, token and epoch changes: {checked} checks",
        h.name()
    );
}

/// A keyed config change of `ds` and its retries; the checks made.
async fn keyed_config_change(h: &Harness<'_>, ds: &str, now: TimestampMs) -> usize {
    let catalog = h.engine.catalog();
    let config = DatasetConfig {
        staged_grace_period_ms: 7_000,
        ..DatasetConfig::default()
    };
    let change = key("config-1", "promote", &(1u64, &config));
    let first = catalog
        .update_config(ds, 1, &config, now, Some(&change))
        .await
        .expect("keyed config change");
    assert_eq!((first.config_version, &first.config), (2, &config));
    let before = h.write_fingerprint(ds).await;
    // The version moved: without the key this is refused; with it, answered.
    let stale = catalog
        .update_config(ds, 1, &config, now + 1, None)
        .await
        .unwrap_err();
    assert!(
        matches!(stale, MendError::FailedPrecondition { .. }),
        "{stale:?}"
    );
    let again = catalog
        .update_config(ds, 1, &config, now + 1, Some(&change))
        .await
        .expect("a retried change answers");
    assert_eq!(again, first);
    assert_eq!(h.write_fingerprint(ds).await, before, "a retry wrote");
    let other = key("config-1", "promote", &(2u64, &config));
    let error = catalog
        .update_config(ds, 2, &config, now + 1, Some(&other))
        .await
        .unwrap_err();
    assert!(refused_as_another_request(&error, "config-1"), "{error:?}");
    assert_eq!(h.write_fingerprint(ds).await, before);
    let mut checked = 5;

    // A change that changes nothing still records its answer.
    let same = key("config-same", "promote", &(2u64, &config));
    let unchanged = catalog
        .update_config(ds, 2, &config, now + 2, Some(&same))
        .await
        .expect("an unchanged config under a key");
    assert_eq!(unchanged.config_version, 2);
    assert!(
        catalog
            .recorded_request(ds, "config-same")
            .await
            .unwrap()
            .is_some()
    );
    checked += 2;

    checked
}

/// A keyed publish-token change of `ds` and its retries; the checks made.
async fn keyed_publish_token(h: &Harness<'_>, ds: &str, now: TimestampMs) -> usize {
    let catalog = h.engine.catalog();
    let token = key("fence-1", "set_publish_token", &(ds, "t1"));
    let fenced = catalog
        .set_publish_token(ds, Some("t1"), now, Some(&token))
        .await
        .expect("keyed fence");
    assert_eq!(fenced.publish_token.as_deref(), Some("t1"));
    // Another writer moves the token on; the retry still answers its own first answer, and
    // writes nothing (the token stays the other writer's).
    catalog
        .set_publish_token(ds, Some("t2"), now + 1, None)
        .await
        .unwrap();
    let before = h.write_fingerprint(ds).await;
    let manifest_before = manifest(h, ds).await;
    let again = catalog
        .set_publish_token(ds, Some("t1"), now + 2, Some(&token))
        .await
        .expect("a retried fence answers");
    assert_eq!(again, fenced);
    assert_eq!(h.write_fingerprint(ds).await, before, "a retry wrote");
    assert_eq!(manifest(h, ds).await, manifest_before);
    assert_eq!(
        catalog.dataset(ds).await.unwrap().publish_token.as_deref(),
        Some("t2")
    );
    let other = key("fence-1", "set_publish_token", &(ds, "t3"));
    let error = catalog
        .set_publish_token(ds, Some("t3"), now + 2, Some(&other))
        .await
        .unwrap_err();
    assert!(refused_as_another_request(&error, "fence-1"), "{error:?}");
    5
}

/// A keyed fencing-epoch advance of `ds` and its retry; the checks made.
async fn keyed_fencing_epoch_advance(h: &Harness<'_>, ds: &str, now: TimestampMs) -> usize {
    let catalog = h.engine.catalog();
    // The fencing epoch, which the engine advances without a key, is recorded like the rest
    // when a key is given: a retry answers the first advance and does not advance again.
    let epoch_before = catalog.dataset(ds).await.unwrap().fencing_epoch;
    let advancing = key("epoch-1", "advance_fencing_epoch", &ds);
    let advanced = catalog
        .update_dataset(
            ds,
            DatasetChange::AdvanceFencingEpoch,
            now,
            Some(&advancing),
        )
        .await
        .expect("keyed epoch advance");
    assert_eq!(advanced.fencing_epoch, epoch_before + 1);
    let before = h.write_fingerprint(ds).await;
    let again = catalog
        .update_dataset(
            ds,
            DatasetChange::AdvanceFencingEpoch,
            now + 1,
            Some(&advancing),
        )
        .await
        .expect("a retried advance answers");
    assert_eq!(again, advanced);
    assert_eq!(h.write_fingerprint(ds).await, before, "a retry wrote");
    assert_eq!(
        catalog.dataset(ds).await.unwrap().fencing_epoch,
        epoch_before + 1,
        "a retry advanced the epoch again"
    );
    4
}

pub(super) async fn keyed_stage_and_publish_answer_a_retry(h: &Harness<'_>) {
    let catalog = h.engine.catalog();
    let ds = h.create_dataset("keyed-stage").await;
    let now = h.clock_now();
    let staging = key("stage-1", "stage", &["a", "b"]);
    let first = stage_keyed(catalog.as_ref(), &ds, &["a", "b"], now, Some(&staging))
        .await
        .expect("keyed stage");
    assert!(first.iter().all(|s| s.outcome == StageOutcome::Inserted));
    let before = h.write_fingerprint(&ds).await;
    let again = stage_keyed(catalog.as_ref(), &ds, &["a", "b"], now + 1, Some(&staging))
        .await
        .expect("a retried stage answers");
    assert_eq!(
        again, first,
        "a create-only stage retried still says inserted"
    );
    assert_eq!(h.write_fingerprint(&ds).await, before, "a retry wrote");
    let other = key("stage-1", "stage", &["a"]);
    let error = stage_keyed(catalog.as_ref(), &ds, &["a"], now + 1, Some(&other))
        .await
        .unwrap_err();
    assert!(refused_as_another_request(&error, "stage-1"), "{error:?}");
    // A batch of rows that all exist inserts nothing, but its answer is kept.
    let nothing = key("stage-2", "stage", &["a"]);
    let skipped = stage_keyed(catalog.as_ref(), &ds, &["a"], now + 2, Some(&nothing))
        .await
        .unwrap();
    assert!(matches!(skipped[0].outcome, StageOutcome::Skipped(_)));
    assert!(
        catalog
            .recorded_request(&ds, "stage-2")
            .await
            .unwrap()
            .is_some()
    );
    let mut checked = 5;

    let request = publish_request(&ds, &["a", "b"], &[]);
    let publishing = key("publish-1", "publish", &request);
    let published = catalog
        .publish(&request, &accept, now + 3, Some(&publishing))
        .await
        .expect("keyed publish");
    assert_eq!(published.published, ["a", "b"]);
    let before = h.write_fingerprint(&ds).await;
    let manifest_before = manifest(h, &ds).await;
    let unkeyed = catalog
        .publish(&request, &accept, now + 4, None)
        .await
        .unwrap_err();
    assert!(
        matches!(unkeyed, MendError::FailedPrecondition { .. }),
        "{unkeyed:?}"
    );
    for attempt in 0..2 {
        let again = catalog
            .publish(&request, &accept, now + 4, Some(&publishing))
            .await
            .expect("a retried publish answers");
        assert_eq!(again, published, "retry {attempt}");
    }
    assert_eq!(h.write_fingerprint(&ds).await, before, "a retry wrote");
    assert_eq!(manifest(h, &ds).await, manifest_before);
    let other_request = publish_request(&ds, &["b"], &[]);
    let other = key("publish-1", "publish", &other_request);
    let error = catalog
        .publish(&other_request, &accept, now + 4, Some(&other))
        .await
        .unwrap_err();
    assert!(refused_as_another_request(&error, "publish-1"), "{error:?}");
    assert_eq!(h.write_fingerprint(&ds).await, before);
    checked += 6;
    println!(
        "conformance[{}]: keyed stage and publish: {checked} checks",
        h.name()
    );
}

pub(super) async fn keyed_mark_and_delete_answer_a_retry_after_their_rows_moved(h: &Harness<'_>) {
    let catalog = h.engine.catalog();
    let ds = h.create_dataset("keyed-delete").await;
    let now = h.clock_now();
    stage_keyed(catalog.as_ref(), &ds, &["a", "b", "c"], now, None)
        .await
        .unwrap();
    let ids = super::strings(&["a", "b"]);
    let marking = key("mark-1", "mark", &ids);
    let marked = catalog
        .mark_for_deletion(&ds, &ids, now + 1, Some(&marking))
        .await
        .expect("keyed mark");
    assert_eq!(
        marked,
        MarkResult {
            marked: ids.clone(),
            already_marked: Vec::new()
        }
    );
    let before = h.write_fingerprint(&ds).await;
    let again = catalog
        .mark_for_deletion(&ds, &ids, now + 2, Some(&marking))
        .await
        .expect("a retried mark answers");
    assert_eq!(again, marked, "a retry answers marked, not already marked");
    assert_eq!(h.write_fingerprint(&ds).await, before, "a retry wrote");
    let other_ids = super::strings(&["c"]);
    let other = key("mark-1", "mark", &other_ids);
    let error = catalog
        .mark_for_deletion(&ds, &other_ids, now + 2, Some(&other))
        .await
        .unwrap_err();
    assert!(refused_as_another_request(&error, "mark-1"), "{error:?}");
    let mut checked = 4;

    let deleting = key("delete-1", "delete", &ids);
    catalog
        .delete_splits(&ds, &ids, now + 3, Some(&deleting))
        .await
        .expect("keyed delete");
    let left: Vec<String> = rows(h, &ds).await.into_iter().map(|r| r.split_id).collect();
    assert_eq!(left, ["c"]);
    let before = h.write_fingerprint(&ds).await;
    let manifest_before = manifest(h, &ds).await;
    let unkeyed = catalog
        .delete_splits(&ds, &ids, now + 4, None)
        .await
        .unwrap_err();
    assert!(matches!(unkeyed, MendError::NotFound { .. }), "{unkeyed:?}");
    for attempt in 0..2 {
        catalog
            .delete_splits(&ds, &ids, now + 4, Some(&deleting))
            .await
            .unwrap_or_else(|error| panic!("retry {attempt} of a delete whose rows went: {error}"));
    }
    assert_eq!(h.write_fingerprint(&ds).await, before, "a retry wrote");
    assert_eq!(manifest(h, &ds).await, manifest_before);
    let other = key("delete-1", "delete", &other_ids);
    let error = catalog
        .delete_splits(&ds, &other_ids, now + 4, Some(&other))
        .await
        .unwrap_err();
    assert!(refused_as_another_request(&error, "delete-1"), "{error:?}");
    checked += 5;

    // A stale-staged mark under a key: the retry answers what the first marked, even though
    // nothing is left for it to mark.
    let stale = super::strings(&["c"]);
    let rule = MarkRule::StaleStaged {
        untouched_before_ms: now + 10,
    };
    let sweeping = key("stale-1", "mark_stale", &stale);
    let swept = catalog
        .mark(&ds, &stale, rule, now + 10, Some(&sweeping))
        .await
        .expect("keyed stale mark");
    assert_eq!(swept.marked, stale);
    let before = h.write_fingerprint(&ds).await;
    let again = catalog
        .mark(&ds, &stale, rule, now + 11, Some(&sweeping))
        .await
        .expect("a retried stale mark answers");
    assert_eq!(again, swept, "a retry answers what the first marked");
    assert_eq!(h.write_fingerprint(&ds).await, before, "a retry wrote");
    checked += 3;
    println!(
        "conformance[{}]: keyed mark and delete: {checked} checks",
        h.name()
    );
}

pub(super) async fn record_request_keeps_the_first_record_of_racing_runs(h: &Harness<'_>) {
    let catalog = h.engine.catalog();
    let ds = h.create_dataset("record").await;
    let now = h.clock_now();
    let racers = h.scale().racing_records;
    let run = key("gc-1", "gc", &(&ds, "node-a"));
    let mut tasks = Vec::new();
    for racer in 0..racers as i64 {
        let catalog = Arc::clone(catalog);
        let (ds, record) = (
            ds.clone(),
            RecordedRequest::new(&run, &format!("report of run {racer}"), now + racer),
        );
        tasks.push(tokio::spawn(async move {
            catalog.record_request(&ds, &record).await
        }));
    }
    let mut kept = BTreeSet::new();
    for task in tasks {
        let record = task.await.unwrap().expect("record_request");
        kept.insert(record.replay::<String>(&run).unwrap());
    }
    assert_eq!(
        kept.len(),
        1,
        "racing runs kept different records: {kept:?}"
    );
    let stored = catalog
        .recorded_request(&ds, "gc-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(Some(&stored.replay::<String>(&run).unwrap()), kept.first());
    // Putting it again writes nothing and answers the kept record.
    let before = h.write_fingerprint(&ds).await;
    let late = RecordedRequest::new(&run, &"a late report", now + 100);
    assert_eq!(catalog.record_request(&ds, &late).await.unwrap(), stored);
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "a kept record was written again"
    );
    // A key a mutation recorded is kept too.
    let staging = key("stage-1", "stage", &["s"]);
    stage_keyed(catalog.as_ref(), &ds, &["s"], now, Some(&staging))
        .await
        .unwrap();
    let squatter = RecordedRequest::new(&run, &"not a stage result", now);
    let squatter = RecordedRequest {
        key: "stage-1".into(),
        ..squatter
    };
    let found = catalog.record_request(&ds, &squatter).await.unwrap();
    assert_eq!(found.request_digest, staging.request_digest);
    let missing = catalog
        .record_request("no-such-dataset", &late)
        .await
        .unwrap_err();
    assert!(
        matches!(
            missing,
            MendError::NotFound {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{missing:?}"
    );
    println!(
        "conformance[{}]: record_request: {racers} racing runs kept 1 record; 4 more checks",
        h.name()
    );
}

pub(super) async fn keyed_records_survive_concurrent_writes(h: &Harness<'_>) {
    let ds = h.create_dataset("keyed-concurrent").await;
    let (workers, rounds) = (h.scale().keyed_writers, h.scale().keyed_rounds);
    let now = h.clock_now();
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let catalog = Arc::clone(h.engine.catalog());
        let ds = ds.clone();
        tasks.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for round in 0..rounds {
                // A keyed stage of this worker's own splits, an unkeyed one of shared ids
                // (other workers race for them), and a keyed mark of the first.
                let own = [
                    format!("w{worker}-r{round}-a"),
                    format!("w{worker}-r{round}-b"),
                ];
                let own: Vec<&str> = own.iter().map(String::as_str).collect();
                let staging = key(&format!("stage-w{worker}-r{round}"), "stage", &own);
                let staged = stage_keyed(catalog.as_ref(), &ds, &own, now, Some(&staging))
                    .await
                    .expect("keyed stage under concurrent writes");
                let shared = format!("shared-r{round}");
                stage_keyed(catalog.as_ref(), &ds, &[shared.as_str()], now, None)
                    .await
                    .expect("unkeyed stage");
                let ids = vec![own[0].to_string()];
                let marking = key(&format!("mark-w{worker}-r{round}"), "mark", &ids);
                let marked = catalog
                    .mark_for_deletion(&ds, &ids, now, Some(&marking))
                    .await
                    .expect("keyed mark under concurrent writes");
                answers.push((
                    own.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                    staging,
                    staged,
                    ids,
                    marking,
                    marked,
                ));
            }
            answers
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.extend(task.await.unwrap());
    }
    let catalog = h.engine.catalog();
    let before = h.write_fingerprint(&ds).await;
    for (own, staging, staged, ids, marking, marked) in &answers {
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        let again = stage_keyed(catalog.as_ref(), &ds, &own, now + 1, Some(staging))
            .await
            .unwrap();
        assert_eq!(&again, staged, "{}", staging.key);
        assert!(again.iter().all(|s| s.outcome == StageOutcome::Inserted));
        let again = catalog
            .mark_for_deletion(&ds, ids, now + 1, Some(marking))
            .await
            .unwrap();
        assert_eq!(&again, marked, "{}", marking.key);
        assert_eq!(again.marked, *ids);
    }
    assert_eq!(h.write_fingerprint(&ds).await, before, "retries wrote");
    println!(
        "conformance[{}]: {workers} workers x {rounds} rounds of keyed writes among unkeyed ones: {} records answered their retries, nothing written",
        h.name(),
        answers.len() * 2
    );
}

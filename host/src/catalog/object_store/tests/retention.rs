//! Checkpoints off the commit path and retention: what is kept and deleted, the formats a
//! reader accepts, and readers and writers racing the deletions for real.

use std::time::{Duration, Instant};

use super::*;
use crate::catalog::object_store::log::Log;
use crate::catalog::object_store::log_format::{Snapshot, encode};
use crate::model::{ListQuery, SplitRow, StageOutcome};

/// A checkpoint every 4 versions, 2 kept, log versions deleted `log_retention_ms` after they
/// were written.
fn pruning(log_retention_ms: u64) -> ObjectStoreCatalogOptions {
    ObjectStoreCatalogOptions {
        checkpoint_interval: 4,
        checkpoints_kept: 2,
        log_retention: Duration::from_millis(log_retention_ms),
        ..Default::default()
    }
}

/// The versions of the files under `{dataset}/catalog/{kind}/`.
async fn versions(store: &Arc<CountingStore>, kind: &str) -> Vec<u64> {
    use futures::TryStreamExt;
    let prefix = Path::from(format!("mend/datasets/logs/catalog/{kind}"));
    let mut found: Vec<u64> = store
        .list(Some(&prefix))
        .map_ok(|meta| {
            let name = meta.location.filename().unwrap().to_string();
            name.trim_end_matches(".json").parse::<u64>().unwrap()
        })
        .try_collect()
        .await
        .unwrap();
    found.sort();
    found
}

async fn stage_one(catalog: &ObjectStoreCatalog, split_id: &str) {
    let staged = stage(catalog, StageMode::CreateOnly, "n", &ids(&[split_id]), T0)
        .await
        .unwrap();
    assert_eq!(staged[0].outcome, StageOutcome::Inserted);
}

/// The write records of commits retention deletes are archived first: every record lists,
/// in order, after the log under them is gone; none is listed twice.
#[tokio::test]
async fn retention_archives_the_write_records_of_the_commits_it_deletes() {
    use crate::catalog::write_audit::{self, WriteScope};
    let (catalog, store) = counted_catalog(pruning(5));
    let scope = WriteScope {
        principal: Some("writer".into()),
        kind: "stage".into(),
        operation_id: None,
    };
    write_audit::within(scope, async {
        catalog
            .create_dataset("logs", "uid-1", &DatasetConfig::default(), T0, None)
            .await
            .unwrap();
        for index in 0..30 {
            stage_one(&catalog, &format!("s{index:02}")).await;
            catalog.flush().await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        for index in 30..32 {
            stage_one(&catalog, &format!("s{index:02}")).await;
        }
    })
    .await;
    catalog.flush().await;
    assert_eq!(versions(&store, "log").await, [0, 29, 30, 31, 32]);
    let archives = {
        use futures::TryStreamExt;
        let prefix = Path::from("mend/datasets/logs/catalog/writes");
        let listed: Vec<_> = store.list(Some(&prefix)).try_collect().await.unwrap();
        listed.len()
    };
    assert!(
        archives >= 1,
        "the records of versions 1 to 28 were archived"
    );
    // A reader of its own, with no cache: the log, then the archives.
    let reader = sibling(&catalog);
    let records = reader.list_write_audit("logs", None).await.unwrap();
    let steps: Vec<String> = records
        .iter()
        .map(|record| format!("{} {}", record.step, record.what.ids.join(",")))
        .collect();
    let mut expected = vec!["create-dataset ".to_string()];
    expected.extend((0..32).map(|index| format!("stage s{index:02}")));
    assert_eq!(steps, expected, "every write once, in order");
    assert!(
        records
            .iter()
            .all(|r| r.principal.as_deref() == Some("writer"))
    );
    let newest = reader.list_write_audit("logs", Some(3)).await.unwrap();
    assert_eq!(newest, records[records.len() - 3..]);
    let oldest_five = reader.list_write_audit("logs", Some(31)).await.unwrap();
    assert_eq!(
        oldest_five,
        records[2..],
        "a limit reaching into the archives"
    );
    println!(
        "retention: {} write records listed after the log of versions 1 to 28 was deleted, \
         from {archives} archive(s)",
        records.len()
    );
}

#[tokio::test]
async fn retention_keeps_the_newest_checkpoints_and_the_log_after_the_oldest() {
    let (catalog, store) = counted_catalog(pruning(5));
    catalog
        .create_dataset("logs", "uid-1", &DatasetConfig::default(), T0, None)
        .await
        .unwrap();
    for index in 0..30 {
        stage_one(&catalog, &format!("s{index:02}")).await;
        catalog.flush().await;
    }
    // Old enough for the log retention, then the next checkpoint (32) prunes.
    tokio::time::sleep(Duration::from_millis(20)).await;
    for index in 30..32 {
        stage_one(&catalog, &format!("s{index:02}")).await;
    }
    catalog.flush().await;
    assert_eq!(versions(&store, "checkpoints").await, [28, 32]);
    assert_eq!(
        versions(&store, "log").await,
        [0, 29, 30, 31, 32],
        "version 0 and the versions after the oldest kept checkpoint stay"
    );
    let stats = catalog.stats();
    assert_eq!(stats.checkpoints_written, 8);
    assert_eq!(
        stats.files_pruned,
        6 + 28,
        "checkpoints 4 to 24, log versions 1 to 28"
    );

    let reader = sibling(&catalog);
    assert_eq!(
        *reader.load("logs").await.unwrap(),
        *catalog.load("logs").await.unwrap()
    );
    assert_eq!(reader.stats().checkpoint_reads, 1);

    // With the default retention (10 minutes) young log files all stay.
    let (catalog, store) = counted_catalog(ObjectStoreCatalogOptions {
        log_retention: ObjectStoreCatalogOptions::default().log_retention,
        ..pruning(0)
    });
    catalog
        .create_dataset("logs", "uid-1", &DatasetConfig::default(), T0, None)
        .await
        .unwrap();
    for index in 0..12 {
        stage_one(&catalog, &format!("s{index:02}")).await;
        catalog.flush().await;
    }
    assert_eq!(versions(&store, "checkpoints").await, [8, 12]);
    assert_eq!(versions(&store, "log").await.len(), 13);
}

#[tokio::test]
async fn checkpoints_are_compact_and_old_ones_still_read_newer_ones_refused() {
    let (catalog, store) = counted_catalog(pruning(600_000));
    catalog
        .create_dataset("logs", "uid-1", &DatasetConfig::default(), T0, None)
        .await
        .unwrap();
    for index in 0..4 {
        stage_one(&catalog, &format!("s{index:02}")).await;
    }
    publish_unchecked(&catalog, &["s00", "s01"], T0 + 5).await;
    for index in 4..7 {
        stage_one(&catalog, &format!("s{index:02}")).await;
    }
    catalog.flush().await;
    let log = Log::new(store.clone(), Path::from("mend"));
    let bytes = store
        .get(&log.checkpoint_path("logs", 8))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let text = std::str::from_utf8(&bytes).unwrap();
    assert!(
        text.starts_with(r#"{"format_version":3,"version":8,"#),
        "{text}"
    );
    assert_eq!(
        text.matches("written_by").count(),
        7,
        "each split's metadata once, as JSON"
    );
    assert_eq!(
        text.matches("created_at_ms").count(),
        2,
        "no key per split: {text}"
    );
    let state = catalog.load("logs").await.unwrap();
    assert_eq!(*sibling(&catalog).load("logs").await.unwrap(), *state);

    // A format 2 checkpoint, as mend wrote them before marks were seen: rows without
    // `mark_seen_at_ms`, indexed by their checksum as ever.
    let format_2 = {
        let text = text
            .replace(r#"{"format_version":3,"#, r#"{"format_version":2,"#)
            .replace(r#","metadata","mark_seen_at_ms"]"#, r#","metadata"]"#)
            .replace(r#"},null]"#, r#"}]"#);
        let start = text.find(r#""splits":["#).unwrap() + r#""splits":"#.len();
        let end = text.find(r#","splits_crc32":"#).unwrap();
        let checksum = crc32fast::hash(&text.as_bytes()[start..end]);
        format!("{},\"splits_crc32\":{checksum}}}\n", &text[..end])
    };
    assert!(!format_2.contains("mark_seen_at_ms") && !format_2.contains(",null]"));
    store
        .put(&log.checkpoint_path("logs", 8), format_2.into())
        .await
        .unwrap();
    let from_format_2 = sibling(&catalog).load("logs").await.unwrap();
    assert!(
        format!("{:?}", from_format_2.splits).contains("base_rows: Some(7)"),
        "indexed: {:?}",
        from_format_2.splits
    );
    assert_eq!(*from_format_2, *state);

    // A format 1 checkpoint, as mend wrote them before: every split a whole row.
    let rows: Vec<SplitRow> = state.list_splits(&ListQuery::default()).unwrap().splits;
    let old = Snapshot {
        format_version: 1,
        version: 12,
        dataset: state.dataset.clone(),
        splits: rows,
        intents: Vec::new(),
        recorded: Vec::new(),
    };
    // Versions 9 to 12 replay on top of the state at 8; the old checkpoint at 12 holds the
    // same as a replay to 12 would.
    for index in 7..11 {
        stage_one(&catalog, &format!("s{index:02}")).await;
    }
    catalog.flush().await;
    store
        .delete(&log.checkpoint_path("logs", 12))
        .await
        .unwrap();
    let at_12 = catalog.load("logs").await.unwrap();
    let old = Snapshot {
        splits: at_12.list_splits(&ListQuery::default()).unwrap().splits,
        dataset: at_12.dataset.clone(),
        ..old
    };
    store
        .put(&log.checkpoint_path("logs", 12), encode(&old).unwrap())
        .await
        .unwrap();
    let reader = sibling(&catalog);
    assert_eq!(*reader.load("logs").await.unwrap(), *at_12);

    // A checkpoint format this mend does not know is refused, never guessed at.
    store
        .put(
            &log.checkpoint_path("logs", 16),
            r#"{"format_version":4,"version":16,"something":"new"}"#.into(),
        )
        .await
        .unwrap();
    let err = sibling(&catalog).load("logs").await.unwrap_err();
    assert!(matches!(err, MendError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("newer mend"), "{err}");
}

/// What one racing writer saw.
struct Written {
    name: &'static str,
    acknowledged: Vec<String>,
    unknown: Vec<String>,
    stats: crate::catalog::object_store::ObjectStoreCatalogStats,
}

/// Writers commit (two busy, one pausing past the time it trusts its cache) and readers
/// load (fresh instances, and one cached reader pausing likewise) while every writer's
/// checkpoints (every 8 versions, 2 kept) prune the log 100 ms behind: every state a reader sees must be a true
/// version (at version `v`, exactly `v` splits: each commit stages one), and every
/// acknowledged commit must be in the final state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_racing_retention_see_true_states_and_lose_no_commit() {
    let store = CountingStore::new(Arc::new(InMemory::new()));
    store.slow_gets.store(true, Ordering::Relaxed);
    let open = {
        let store = store.clone();
        move || {
            Arc::new(ObjectStoreCatalog::new(
                store.clone(),
                Path::from("mend"),
                ObjectStoreCatalogOptions {
                    checkpoint_interval: 8,
                    ..pruning(100)
                },
            ))
        }
    };
    open()
        .create_dataset("logs", "uid-1", &DatasetConfig::default(), T0, None)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);

    let mut writers = Vec::new();
    for (name, pause_ms) in [("busy-1", 3), ("busy-2", 3), ("slow", 160)] {
        let catalog = open();
        writers.push(tokio::spawn(async move {
            let mut written = Written {
                name,
                acknowledged: Vec::new(),
                unknown: Vec::new(),
                stats: Default::default(),
            };
            for index in 0.. {
                if Instant::now() >= deadline {
                    break;
                }
                let split_id = format!("{name}-{index:05}");
                match stage(
                    &catalog,
                    StageMode::CreateOnly,
                    name,
                    &ids(&[split_id.as_str()]),
                    T0,
                )
                .await
                {
                    Ok(staged) => {
                        assert_eq!(staged[0].outcome, StageOutcome::Inserted);
                        written.acknowledged.push(split_id);
                    }
                    Err(err) if !err.certainly_not_applied() => written.unknown.push(split_id),
                    Err(err) => panic!("{name}: {err}"),
                }
                // A store that answers at once never yields: let the others run.
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(pause_ms)).await;
            }
            catalog.flush().await;
            written.stats = catalog.stats();
            written
        }));
    }
    let mut readers = Vec::new();
    for (name, pause_ms) in [("fresh-1", 0), ("fresh-2", 0), ("cached", 130)] {
        let open = open.clone();
        readers.push(tokio::spawn(async move {
            let cached = open();
            let (mut checked, mut reloads, mut last_version) = (0u64, 0u64, 0u64);
            while Instant::now() < deadline {
                let catalog = if pause_ms == 0 {
                    open()
                } else {
                    Arc::clone(&cached)
                };
                let state = catalog.load("logs").await.unwrap();
                assert_eq!(
                    state.splits.len() as u64,
                    state.version,
                    "{name} read a state that no version of the log holds"
                );
                assert!(state.version >= last_version, "{name} went back in time");
                last_version = state.version;
                checked += 1;
                if pause_ms == 0 {
                    reloads += catalog.stats().reloads;
                }
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(pause_ms)).await;
            }
            reloads += cached.stats().reloads;
            (name, checked, reloads)
        }));
    }

    let mut written = Vec::new();
    for writer in writers {
        written.push(writer.await.unwrap());
    }
    for reader in readers {
        let (name, checked, reloads) = reader.await.unwrap();
        println!("retention race: reader {name} checked {checked} states, {reloads} reloads");
        assert!(checked > 0);
    }
    let last = open().load("logs").await.unwrap();
    assert_eq!(last.splits.len() as u64, last.version);
    let mut commits = 0;
    let mut pruned = 0;
    for writer in &written {
        println!(
            "retention race: writer {} {} acknowledged, {} unknown, {} lost races, {} \
             checkpoints written, {} files pruned, {} reloads",
            writer.name,
            writer.acknowledged.len(),
            writer.unknown.len(),
            writer.stats.lost_races,
            writer.stats.checkpoints_written,
            writer.stats.files_pruned,
            writer.stats.reloads
        );
        for split_id in &writer.acknowledged {
            assert!(
                last.splits.contains(split_id),
                "{}: acknowledged {split_id} is lost",
                writer.name
            );
        }
        assert!(
            writer.acknowledged.len() > 5,
            "{} barely wrote",
            writer.name
        );
        commits += writer.stats.commits;
        pruned += writer.stats.files_pruned;
    }
    assert_eq!(
        commits, last.version,
        "every commit counted once, none lost"
    );
    assert!(pruned > 0, "retention deleted nothing");
    let checkpoints = versions(&store, "checkpoints").await;
    let log = versions(&store, "log").await;
    println!(
        "retention race: final version {}, {} checkpoint files, {} log files",
        last.version,
        checkpoints.len(),
        log.len()
    );
    assert!(checkpoints.len() <= 2 + written.len(), "{checkpoints:?}");
}

//! The commit log under stress: checkpoints that bound replay, files from a newer mend,
//! writers racing from several instances, puts whose outcome is unclear, and opening by URL.

use super::*;
use crate::catalog::CatalogExt;
use crate::catalog::object_store::log::Log;
use crate::catalog::object_store::state::DatasetState;
use crate::model::{ListQuery, StageOutcome};
use ::object_store::local::LocalFileSystem;

#[tokio::test]
async fn a_file_from_a_newer_mend_is_refused_not_guessed_at() {
    let (catalog, store) = catalog_with_dataset("logs").await;
    catalog
        .create_dataset("other", "uid-2", &DatasetConfig::default(), T0, None)
        .await
        .unwrap();
    let log = Log::new(store.clone(), Path::from("mend"));
    let future = r#"{"format_version": 3, "version": 1, "commit_id": "x", "committed_at_ms": 0,
        "actions": [{"type": "rename_everything"}]}"#;
    store
        .put(&log.commit_path("logs", 1), future.into())
        .await
        .unwrap();
    store
        .put(&log.commit_path("other", 1), "not json".into())
        .await
        .unwrap();

    let err = catalog.dataset("logs").await.unwrap_err();
    assert!(matches!(err, MendError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("newer mend"), "{err}");
    // The writer's cached state is at version 0, so it puts version 1 without a look: the
    // put is refused (the file is there), and reading what holds the version refuses it.
    let err = stage(&catalog, StageMode::CreateOnly, "n", &ids(&["a"]), T0)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("newer mend"), "{err}");
    let written = store.get(&log.commit_path("logs", 1)).await.unwrap();
    assert_eq!(
        written.bytes().await.unwrap(),
        future.as_bytes(),
        "nothing is written on top of an unreadable log"
    );
    assert!(store.get(&log.commit_path("logs", 2)).await.is_err());

    let err = sibling(&catalog).dataset("other").await.unwrap_err();
    assert!(matches!(err, MendError::Corrupt { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("mend/datasets/other/catalog/log/00000000000000000001.json"),
        "{err}"
    );
}

#[tokio::test]
async fn a_log_from_before_fencing_epochs_reads_as_epoch_zero_and_cannot_undo_an_advance() {
    let (catalog, store) = counted_catalog(ObjectStoreCatalogOptions::default());
    let log = Log::new(store.clone(), Path::from("mend"));
    // Files as a mend that predates fencing epochs wrote them: no `fencing_epoch` anywhere.
    let old_dataset = |manifest_version: u64, updated_at_ms: TimestampMs| {
        serde_json::json!({
            "dataset_id": "logs", "uid": "uid-1", "config": DatasetConfig::default(),
            "config_version": 1, "checkpoint": {}, "manifest_version": manifest_version,
            "publish_token": null, "created_at_ms": T0, "updated_at_ms": updated_at_ms,
        })
    };
    let old_commit = |version: u64, action: serde_json::Value| {
        serde_json::json!({
            "format_version": 1, "version": version, "commit_id": format!("old-{version}"),
            "committed_at_ms": T0, "actions": [action],
        })
        .to_string()
    };
    let created = serde_json::json!({"type": "create_dataset", "dataset": old_dataset(1, T0)});
    let configured = serde_json::json!({"type": "set_dataset", "dataset": old_dataset(2, T0 + 1)});
    for (version, action) in [(0, created), (1, configured)] {
        store
            .put(
                &log.commit_path("logs", version),
                old_commit(version, action).into(),
            )
            .await
            .unwrap();
    }

    let dataset = catalog.dataset("logs").await.unwrap();
    assert_eq!((dataset.fencing_epoch, dataset.manifest_version), (0, 2));
    let advanced = catalog.advance_fencing_epoch("logs", T0 + 2).await.unwrap();
    assert_eq!(
        (
            advanced.fencing_epoch,
            advanced.manifest_version,
            advanced.updated_at_ms
        ),
        (1, 3, T0 + 2)
    );
    assert_eq!(
        sibling(&catalog).dataset("logs").await.unwrap(),
        advanced,
        "another process replays the advance"
    );

    // An old writer that resumed from a checkpoint past the advance (never reading the advance
    // itself, which it could not parse) writes the dataset back without its epoch. Replaying
    // that as epoch 0 would let fenced writers publish again: it is corruption instead.
    let unfenced = serde_json::json!({"type": "set_dataset", "dataset": old_dataset(4, T0 + 3)});
    store
        .put(&log.commit_path("logs", 3), old_commit(3, unfenced).into())
        .await
        .unwrap();
    let err = sibling(&catalog).dataset("logs").await.unwrap_err();
    assert!(matches!(err, MendError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("fencing epoch 0 over 1"), "{err}");
}

#[tokio::test]
async fn a_fresh_reader_starts_from_the_newest_checkpoint() {
    let options = ObjectStoreCatalogOptions {
        checkpoint_interval: 5,
        ..Default::default()
    };
    let (writer, store) = counted_catalog(options);
    writer
        .create_dataset("logs", "uid-1", &DatasetConfig::default(), T0, None)
        .await
        .unwrap();
    for index in 0..23 {
        let split_id = format!("split-{index:02}");
        stage(
            &writer,
            StageMode::CreateOnly,
            "n",
            std::slice::from_ref(&split_id),
            T0 + index,
        )
        .await
        .unwrap();
        if index % 3 == 0 {
            writer
                .mark_for_deletion("logs", &[split_id], T0 + index, None)
                .await
                .unwrap();
        }
    }
    let version = writer.probe_version("logs").await.unwrap();
    assert_eq!(version, 31);
    // Written in the background, one at a time: a checkpoint that falls due while another is
    // being written is superseded by the newest due one, so at least the first and the last.
    writer.flush().await;
    let written = writer.stats().checkpoints_written;
    assert!((2..=6).contains(&written), "{written} checkpoints");

    let log = Log::new(store.clone(), Path::from("mend"));
    let mut replayed =
        DatasetState::from_creation("logs", &log.read_commit("logs", 0).await.unwrap().unwrap())
            .unwrap();
    for version in 1..=version {
        replayed
            .apply(&log.read_commit("logs", version).await.unwrap().unwrap())
            .unwrap();
    }

    store.take_gets();
    let reader = sibling(&writer);
    let loaded = reader.load("logs").await.unwrap();
    assert_eq!(*loaded, replayed);
    let mut gets = store.take_gets();
    gets.sort();
    // 31 alone, then 32 and 33 together (the replay reads ahead once versions keep coming).
    let expected: Vec<String> = [
        log.checkpoint_path("logs", 30),
        log.commit_path("logs", 31),
        log.commit_path("logs", 32),
        log.commit_path("logs", 33),
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    let mut expected = expected;
    expected.sort();
    assert_eq!(
        gets, expected,
        "no log version before the checkpoint is read"
    );
    assert_eq!(
        (reader.stats().checkpoint_reads, reader.stats().log_reads),
        (1, 3)
    );
}

#[tokio::test]
async fn a_cached_reader_probes_only_the_next_version() {
    let (writer, store) = catalog_with_dataset("logs").await;
    let reader = sibling(&writer);
    assert_eq!(reader.probe_version("logs").await.unwrap(), 0);

    store.take_gets();
    let reads = reader.stats().log_reads;
    assert_eq!(reader.probe_version("logs").await.unwrap(), 0);
    assert_eq!(reader.stats().log_reads, reads + 1);
    assert_eq!(store.take_gets().len(), 1);

    stage(&writer, StageMode::CreateOnly, "n", &ids(&["a"]), T0)
        .await
        .unwrap();
    assert_eq!(reader.probe_version("logs").await.unwrap(), 1);
    assert_eq!(
        reader
            .list_splits("logs", &ListQuery::default())
            .await
            .unwrap()
            .splits
            .len(),
        1
    );
}

/// Instances on one store, two tasks each, all staging distinct ids into one dataset.
async fn race_instances(store: Arc<dyn ObjectStore>, batches_per_instance: usize) {
    let options = ObjectStoreCatalogOptions {
        checkpoint_interval: 16,
        ..Default::default()
    };
    let instances: Vec<Arc<ObjectStoreCatalog>> = (0..2)
        .map(|_| {
            Arc::new(ObjectStoreCatalog::new(
                store.clone(),
                Path::from("mend"),
                options.clone(),
            ))
        })
        .collect();
    instances[0]
        .create_dataset("logs", "uid-1", &DatasetConfig::default(), T0, None)
        .await
        .unwrap();

    let mut tasks = Vec::new();
    for (instance_index, instance) in instances.iter().enumerate() {
        for worker in 0..2 {
            let instance = Arc::clone(instance);
            tasks.push(tokio::spawn(async move {
                for batch in 0..batches_per_instance / 2 {
                    let split_ids: Vec<String> = (0..2)
                        .map(|k| format!("i{instance_index}-w{worker}-b{batch:03}-{k}"))
                        .collect();
                    let result = stage(&instance, StageMode::CreateOnly, "n", &split_ids, T0)
                        .await
                        .unwrap();
                    assert!(
                        result
                            .iter()
                            .all(|split| split.outcome == StageOutcome::Inserted)
                    );
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }

    let reader = ObjectStoreCatalog::new(store, Path::from("mend"), options);
    let rows = reader
        .list_splits("logs", &ListQuery::default())
        .await
        .unwrap()
        .splits;
    assert_eq!(
        rows.len(),
        batches_per_instance * 2 * 2,
        "every staged row survives"
    );
    let batches = (batches_per_instance * 2) as u64;
    assert_eq!(reader.probe_version("logs").await.unwrap(), batches);
    let commits: u64 = instances
        .iter()
        .map(|instance| instance.stats().commits)
        .sum();
    assert_eq!(
        commits,
        1 + batches,
        "one commit per batch, none duplicated"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_racing_in_memory_lose_no_commit() {
    race_instances(Arc::new(InMemory::new()), 100).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_racing_on_a_local_directory_lose_no_commit() {
    let directory = tempfile::tempdir().unwrap();
    race_instances(
        Arc::new(LocalFileSystem::new_with_prefix(directory.path()).unwrap()),
        40,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_marks_each_bump_the_manifest_once() {
    let (first, _) = catalog_with_dataset("logs").await;
    let split_ids: Vec<String> = (0..100).map(|index| format!("s{index:03}")).collect();
    stage(&first, StageMode::CreateOnly, "n", &split_ids, T0)
        .await
        .unwrap();
    let first = Arc::new(first);
    let instances = [Arc::clone(&first), Arc::new(sibling(&first))];
    let mut tasks = Vec::new();
    for (worker, chunk) in split_ids.chunks(25).enumerate() {
        let (instance, chunk) = (Arc::clone(&instances[worker % 2]), chunk.to_vec());
        tasks.push(tokio::spawn(async move {
            for split_id in chunk {
                let result = instance
                    .mark_for_deletion("logs", &[split_id], T0 + 1, None)
                    .await
                    .unwrap();
                assert_eq!(result.marked.len(), 1);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let dataset = sibling(&first).dataset("logs").await.unwrap();
    assert_eq!(dataset.manifest_version, 1 + 100, "no manifest bump lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_create_only_stages_claim_each_split_once() {
    let (first, _) = catalog_with_dataset("logs").await;
    let first = Arc::new(first);
    let second = Arc::new(sibling(&first));
    for round in 0..30 {
        let split_ids: Vec<String> = (0..4).map(|k| format!("r{round:02}-{k}")).collect();
        let claims = [("node-1", &first), ("node-2", &second)].map(|(node, instance)| {
            let (instance, split_ids) = (Arc::clone(instance), split_ids.clone());
            tokio::spawn(async move {
                stage(&instance, StageMode::CreateOnly, node, &split_ids, T0)
                    .await
                    .unwrap()
            })
        });
        let mut owners = std::collections::BTreeMap::new();
        for (claim, node) in claims.into_iter().zip(["node-1", "node-2"]) {
            for split in claim.await.unwrap() {
                if split.outcome == StageOutcome::Inserted {
                    assert!(
                        owners.insert(split.split_id, node).is_none(),
                        "claimed twice"
                    );
                }
            }
        }
        let query = ListQuery {
            split_ids: Some(split_ids),
            ..Default::default()
        };
        let rows = first.list_splits("logs", &query).await.unwrap().splits;
        assert_eq!(rows.len(), 4);
        for row in rows {
            assert_eq!(
                owners.get(&row.split_id),
                Some(&row.node.as_str()),
                "the row is its claimer's"
            );
        }
    }
}

#[tokio::test]
async fn an_unclear_put_is_settled_by_reading_the_version_back() {
    let (catalog, store) = catalog_with_dataset("logs").await;
    store
        .fail_next_put_after_write
        .store(true, Ordering::SeqCst);
    let result = stage(&catalog, StageMode::CreateOnly, "n", &ids(&["a"]), T0)
        .await
        .unwrap();
    assert_eq!(result[0].outcome, StageOutcome::Inserted);
    assert_eq!(sibling(&catalog).probe_version("logs").await.unwrap(), 1);

    store
        .fail_next_put_before_write
        .store(true, Ordering::SeqCst);
    let err = stage(&catalog, StageMode::CreateOnly, "n", &ids(&["b"]), T0)
        .await
        .unwrap_err();
    assert!(matches!(err, MendError::Unavailable { .. }), "{err}");
    assert!(!err.certainly_not_applied());
    assert_eq!(sibling(&catalog).probe_version("logs").await.unwrap(), 1);
    let retried = stage(&catalog, StageMode::CreateOnly, "n", &ids(&["b"]), T0)
        .await
        .unwrap();
    assert_eq!(retried[0].outcome, StageOutcome::Inserted);
}

#[tokio::test]
async fn a_writer_that_always_loses_gives_up_with_conflict() {
    let options = ObjectStoreCatalogOptions {
        max_commit_attempts: 3,
        ..Default::default()
    };
    let (catalog, store) = counted_catalog(options);
    catalog
        .create_dataset("logs", "uid-1", &DatasetConfig::default(), T0, None)
        .await
        .unwrap();
    store.refuse_puts.store(true, Ordering::SeqCst);
    let err = stage(&catalog, StageMode::CreateOnly, "n", &ids(&["a"]), T0)
        .await
        .unwrap_err();
    assert!(matches!(err, MendError::Conflict { .. }), "{err}");
    assert!(err.certainly_not_applied());
    assert_eq!(catalog.stats().lost_races, 3);
    assert_eq!(sibling(&catalog).probe_version("logs").await.unwrap(), 0);
}

#[tokio::test]
async fn catalogs_open_by_url() {
    let memory = ObjectStoreCatalog::open_url("memory://").unwrap();
    memory
        .create_dataset("logs", "uid-1", &DatasetConfig::default(), T0, None)
        .await
        .unwrap();
    assert!(
        memory.describe().contains("InMemory"),
        "{}",
        memory.describe()
    );

    let root = tempfile::tempdir().unwrap();
    let directory = root.path().join("nested/catalog");
    let bare = ObjectStoreCatalog::open_url(directory.to_str().unwrap()).unwrap();
    bare.create_dataset("logs", "uid-1", &DatasetConfig::default(), T0, None)
        .await
        .unwrap();
    let by_url = ObjectStoreCatalog::open_url(&format!("file://{}", directory.display())).unwrap();
    assert_eq!(by_url.dataset("logs").await.unwrap().uid, "uid-1");
    assert!(
        directory
            .join("datasets/logs/catalog/log/00000000000000000000.json")
            .exists()
    );

    let s3 = ObjectStoreCatalog::open_url("s3://bucket/some/prefix");
    #[cfg(feature = "s3")]
    {
        let s3 = s3.unwrap();
        assert!(
            s3.describe().contains("bucket") && s3.describe().contains("some/prefix"),
            "{}",
            s3.describe()
        );
    }
    // A build without the backend says which feature it lacks.
    #[cfg(not(feature = "s3"))]
    {
        let err = s3.map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("`s3` feature"), "{err}");
    }

    let err = ObjectStoreCatalog::open_url("ftp://host/dir").unwrap_err();
    assert!(matches!(err, MendError::InvalidArgument { .. }));
    assert!(err.to_string().contains("memory://"), "{err}");
}

#[tokio::test]
async fn intents_an_older_mend_wrote_are_read_and_written_back_in_this_hosts_format() {
    use crate::intent::{INTENT_FORMAT_VERSION, Intent, IntentPhase, OperationKind};

    let (catalog, store) = catalog_with_dataset("logs").await;
    let log = Log::new(store.clone(), Path::from("mend"));
    // Version 1 as a mend from before format 3 wrote it: two intents, of formats 1 and 2, in
    // the JSON its `Intent::to_json` produced.
    let format_1 = r#"{"format_version":1,"operation_id":"op-1","dataset_id":"logs","kind":"commit","phase":"armed","owner":"node-1","lease_expires_at_ms":1700000030000,"created_at_ms":1700000000000,"updated_at_ms":1700000000000,"effects":{"stage":[{"split_id":"a","metadata_json":"{\"docs\":1}"}],"objects":[{"split_id":"a","size":100,"checksum":"sha256:00"}],"publish":{"staged_split_ids":["a"],"replaced_split_ids":[],"checkpoint_delta":null,"publish_token":null}},"expected":{"manifest_version":0,"split_states":[["a",null]]}}"#;
    let format_2 = r#"{"format_version":2,"operation_id":"op-2","dataset_id":"logs","kind":"gc","phase":"effects_confirmed","owner":"node-2","lease_expires_at_ms":1700000040000,"created_at_ms":1700000000001,"updated_at_ms":1700000000002,"effects":{"mark":["b"],"delete":["c"]},"expected":{"manifest_version":0,"split_states":[["b","staged"],["c","marked_for_deletion"]]}}"#;
    let commit = format!(
        r#"{{"format_version":1,"version":1,"commit_id":"old-1","committed_at_ms":{T0},"actions":[{{"type":"put_intent","intent":{format_1}}},{{"type":"put_intent","intent":{format_2}}}]}}"#
    );
    store
        .put(&log.commit_path("logs", 1), commit.into())
        .await
        .unwrap();

    let reader = sibling(&catalog);
    let listed = reader.list_intents("logs").await.unwrap();
    let expected_1: Intent = serde_json::from_str(format_1).unwrap();
    let expected_2: Intent = serde_json::from_str(format_2).unwrap();
    assert_eq!(listed, [expected_1.clone(), expected_2.clone()]);
    assert_eq!(
        (
            listed[0].format_version,
            listed[0].kind,
            listed[1].format_version,
            listed[1].kind
        ),
        (1, OperationKind::Commit, 2, OperationKind::Gc)
    );
    assert_eq!(listed[1].expected.split_states.len(), 2);

    // Renewed and abandoned by this mend: written back in its format, which another process
    // reads from the log.
    let renewed = Intent {
        lease_expires_at_ms: T0 + 50_000,
        updated_at_ms: T0 + 3,
        ..expected_2
    };
    reader
        .update_intent(&renewed, IntentPhase::EffectsConfirmed)
        .await
        .unwrap();
    let abandoned = reader
        .abandon_intent("logs", "op-1", Some(T0 + 30_000), T0 + 30_000)
        .await
        .unwrap();
    assert_eq!(
        sibling(&catalog).list_intents("logs").await.unwrap(),
        [
            Intent {
                format_version: INTENT_FORMAT_VERSION,
                phase: IntentPhase::Abandoned,
                updated_at_ms: T0 + 30_000,
                ..expected_1
            },
            Intent {
                format_version: INTENT_FORMAT_VERSION,
                ..renewed
            },
        ]
    );
    assert_eq!(abandoned.format_version, INTENT_FORMAT_VERSION);
}

/// A commit records the moment of its own attempt, not of the call that began it: a mark whose
/// first put stalls for ten seconds and loses its race is stamped when it is sent again, so
/// the deletion grace period it starts does not begin before readers could see the mark.
/// `mend-sim` seed 8877293620571511055 found it: a sweep's roll-forward, stamped with the
/// moment the sweep began, let gc delete an object 0.9 s after readers last saw it published.
#[tokio::test(start_paused = true)]
async fn a_mark_sent_again_after_a_stall_and_a_lost_race_is_stamped_when_it_was_sent() {
    use futures::FutureExt;

    use crate::hooked_store::HookedStore;

    let store = Arc::new(HookedStore::default());
    let writer = ObjectStoreCatalog::new(
        store.clone(),
        Path::from("mend"),
        ObjectStoreCatalogOptions::default(),
    );
    writer
        .create_dataset("logs", "uid-1", &DatasetConfig::default(), T0, None)
        .await
        .unwrap();
    stage(
        &writer,
        StageMode::CreateOnly,
        "node-1",
        &ids(&["a", "b"]),
        T0,
    )
    .await
    .unwrap();
    // The writer's next log put stalls for 10 s, and another process commits meanwhile.
    let other = Arc::new(sibling(&writer));
    let stalled = Arc::new(AtomicBool::new(false));
    store.set_before_put(move |path| {
        let first = path.as_ref().contains("/log/") && !stalled.swap(true, Ordering::SeqCst);
        let other = Arc::clone(&other);
        async move {
            if first {
                tokio::time::sleep(std::time::Duration::from_secs(10)).await;
                other
                    .mark_for_deletion("logs", &ids(&["b"]), T0 + 10_000, None)
                    .await
                    .unwrap();
            }
            None
        }
        .boxed()
    });

    let sent_at = tokio::time::Instant::now();
    writer
        .mark_for_deletion("logs", &ids(&["a"]), T0 + 1, None)
        .await
        .unwrap();
    let waited = i64::try_from(sent_at.elapsed().as_millis()).unwrap();
    assert!(waited >= 10_000, "the put stalled: {waited} ms");
    let rows = writer
        .list_splits("logs", &ListQuery::default())
        .await
        .unwrap()
        .splits;
    let (a, b) = (&rows[0], &rows[1]);
    assert_eq!((a.split_id.as_str(), b.split_id.as_str()), ("a", "b"));
    assert_eq!(
        (a.state, b.state),
        (SplitState::MarkedForDeletion, SplitState::MarkedForDeletion)
    );
    assert_eq!(
        writer.dataset("logs").await.unwrap().manifest_version,
        3,
        "the other's mark, then the writer's, sent again"
    );
    assert!(
        a.updated_at_ms >= T0 + 1 + 10_000 && a.updated_at_ms <= T0 + 1 + waited,
        "the mark is stamped when it was sent again, not when the call began: {} (called at {})",
        a.updated_at_ms,
        T0 + 1
    );
    println!(
        "a mark sent again after a {waited} ms stall is stamped {} ms after its call",
        a.updated_at_ms - (T0 + 1)
    );
}

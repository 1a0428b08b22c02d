//! Live handles: a refresh with nothing new costs one request to the catalog's storage (one
//! GET on object storage, one statement on Postgres, counted by the store and the server's
//! proxy) and no scan whatever the history;
//! a failed preparation publishes nothing; a read-only handle never runs recovery, a
//! read-write one resolves pending intents.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use mend::MendError;
use mend::engine::{CommitRequest, CommitSplit};
use mend::faults::CrashAt;
use mend::live::{HandleMode, LiveHandle, PrepareFault, Refresh};
use mend::model::{PublishRequest, StageMode, StageRequest, StageSplit};
use mend_tests::sql_counter::SqlCounts;
use mend_tests::{Backend, Harness, RequestCounts};

async fn history(h: &Harness, dataset_id: &str, commits: usize) {
    for i in 0..commits {
        let token = if i % 2 == 0 { "a" } else { "b" };
        h.engine
            .set_publish_token(dataset_id, Some(token))
            .await
            .unwrap();
    }
}

/// What the catalog's storage has been asked so far: requests to the object store (the
/// catalog's own on object storage, the split objects' on Postgres) and, on Postgres,
/// statements sent to the server.
fn storage_requests(h: &Harness) -> (RequestCounts, SqlCounts) {
    (
        h.store.as_ref().expect("every backend counts").requests(),
        h.sql.as_ref().map(|sql| sql.counts()).unwrap_or_default(),
    )
}

/// An unchanged refresh costs exactly one request to the catalog's storage, counted there
/// rather than by the handle: on object storage one GET (the probe for the next log version),
/// on Postgres one statement (the probe query) and no object-store request.
async fn refresh_cost_stays_flat(backend: Backend, sizes: &[usize]) {
    const REFRESHES: u64 = 10;
    let h = Harness::counting_sql(backend).await;
    for &commits in sizes {
        let dataset_id = h.create_dataset("flat").await;
        history(&h, &dataset_id, commits).await;
        let handle = LiveHandle::open(h.engine.clone(), &dataset_id, HandleMode::ReadWrite)
            .await
            .unwrap();
        let before = handle.stats();
        let (mut store_total, mut sql_total) = (RequestCounts::default(), SqlCounts::default());
        for refresh in 1..=REFRESHES {
            let (store_before, sql_before) = storage_requests(&h);
            assert_eq!(handle.refresh().await.unwrap(), Refresh::Unchanged);
            let (store_after, sql_after) = storage_requests(&h);
            let (store, sql) = (
                store_after.since(&store_before),
                sql_after.since(&sql_before),
            );
            let what = format!(
                "{backend}, {commits} commits, refresh {refresh}: {store}; {} statements",
                sql.statements
            );
            match backend {
                Backend::Postgres => {
                    assert_eq!(sql.statements, 1, "one probe query per refresh: {what}");
                    assert_eq!(store.total(), 0, "no object-store request: {what}");
                }
                _ => {
                    assert_eq!(store.total(), 1, "one store request per refresh: {what}");
                    assert_eq!(store.gets, 1, "the one request is the probe's GET: {what}");
                }
            }
            store_total += store;
            sql_total += sql;
        }
        let after = handle.stats();
        assert_eq!(
            after.probes - before.probes,
            REFRESHES,
            "one probe per refresh"
        );
        assert_eq!(after.scans, before.scans, "no scan when nothing changed");
        assert_eq!(after.sweeps, 0);
        let spent = match backend {
            Backend::Postgres => format!(
                "{} SQL statements in {} round trips, {} object-store requests",
                sql_total.statements,
                sql_total.round_trips,
                store_total.total()
            ),
            _ => format!("{} store requests ({store_total})", store_total.total()),
        };
        println!(
            "live handle [{backend}]: {commits} commits of history: {REFRESHES} unchanged refreshes cost {spent}, 0 scans"
        );
    }
}

#[tokio::test]
async fn refresh_cost_is_flat_on_memory() {
    refresh_cost_stays_flat(Backend::Memory, &[1, 1_000, 10_000]).await;
}

#[tokio::test]
async fn refresh_cost_is_flat_on_postgres() {
    refresh_cost_stays_flat(Backend::Postgres, &[1, 1_000, 10_000]).await;
}

async fn stage_and_publish(h: &Harness, dataset_id: &str, split_id: &str) {
    h.engine
        .stage(&StageRequest {
            dataset_id: dataset_id.into(),
            mode: StageMode::CreateOnly,
            node: "n".into(),
            splits: vec![StageSplit {
                split_id: split_id.into(),
                metadata_json: "{}".into(),
            }],
        })
        .await
        .unwrap();
    h.put_objects(dataset_id, [split_id]).await;
    h.engine
        .publish(&PublishRequest::staged(dataset_id, vec![split_id.into()]))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_failed_preparation_publishes_nothing_and_the_next_refresh_converges() {
    for backend in [Backend::Memory, Backend::Postgres] {
        let h = Harness::new(backend).await;
        let dataset_id = h.create_dataset("prepare").await;
        stage_and_publish(&h, &dataset_id, "first").await;
        let failing = Arc::new(AtomicBool::new(false));
        let switch = failing.clone();
        let fault: PrepareFault = Arc::new(move || {
            if switch.load(Ordering::SeqCst) {
                Err(MendError::Transient {
                    message: "injected preparation failure".into(),
                })
            } else {
                Ok(())
            }
        });
        let handle = LiveHandle::open_with_fault(
            h.engine.clone(),
            &dataset_id,
            HandleMode::ReadOnly,
            Some(fault),
        )
        .await
        .unwrap();
        let old = handle.current();
        assert_eq!(old.published.len(), 1);

        stage_and_publish(&h, &dataset_id, "second").await;
        failing.store(true, Ordering::SeqCst);
        assert!(handle.refresh().await.is_err());
        assert_eq!(
            handle.current(),
            old,
            "a failed refresh published something"
        );

        failing.store(false, Ordering::SeqCst);
        assert!(matches!(
            handle.refresh().await.unwrap(),
            Refresh::Published { .. }
        ));
        let new = handle.current();
        assert_eq!(new.published.len(), 2);
        assert!(new.manifest_version > old.manifest_version);
        println!(
            "live handle [{backend}]: failed preparation kept generation {}, next refresh published {}",
            old.number, new.number
        );
    }
}

#[tokio::test]
async fn read_only_handles_never_recover_and_read_write_handles_do() {
    for backend in [Backend::Memory, Backend::Postgres] {
        let h = Harness::new(backend).await;
        let dataset_id = h.create_dataset("handles").await;
        let commit = CommitRequest {
            dataset_id: dataset_id.clone(),
            node: "writer".into(),
            splits: vec![CommitSplit {
                split_id: "pending".into(),
                metadata_json: "{}".into(),
                payload: Bytes::from_static(b"bytes"),
            }],
            checkpoint_delta: None,
            publish_token: None,
        };
        // Crash after the object landed and before the publish (the commit's steps: begin,
        // the object, publish): roll-forward can finish it.
        let crashing = h.engine.with_faults(Arc::new(CrashAt::new(3, false)));
        assert!(crashing.commit(&commit).await.is_err());
        h.clock.advance_ms(120_000);
        let pending = h.engine.catalog().list_intents(&dataset_id).await.unwrap();
        assert_eq!(pending.len(), 1);

        let reader = LiveHandle::open(h.engine.clone(), &dataset_id, HandleMode::ReadOnly)
            .await
            .unwrap();
        reader.refresh().await.unwrap();
        assert_eq!(reader.stats().sweeps, 0);
        assert_eq!(
            h.engine.catalog().list_intents(&dataset_id).await.unwrap(),
            pending,
            "a read-only refresh touched the pending intent"
        );

        let writer = LiveHandle::open(h.engine.clone(), &dataset_id, HandleMode::ReadWrite)
            .await
            .unwrap();
        assert!(matches!(
            writer.refresh().await.unwrap(),
            Refresh::Published { .. }
        ));
        assert_eq!(writer.stats().sweeps, 1);
        assert!(
            h.engine
                .catalog()
                .list_intents(&dataset_id)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(writer.current().published.len(), 1);
        println!(
            "live handle [{backend}]: read-only refresh left the intent in place; read-write refresh resolved it and published"
        );
    }
}

/// Config changes on one task while another refreshes, round after round: every generation's
/// snapshot and config view come from one dataset version, and no round hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_changes_during_refreshes_never_mix_generations() {
    const ROUNDS: u64 = 150;
    for backend in [Backend::Memory, Backend::Postgres] {
        let h = Harness::new(backend).await;
        let dataset_id = h.create_dataset("config").await;
        let handle = Arc::new(
            LiveHandle::open(h.engine.clone(), &dataset_id, HandleMode::ReadWrite)
                .await
                .unwrap(),
        );
        let engine = h.engine.clone();
        let ds = dataset_id.clone();
        let writer = tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let current = engine.dataset(&ds).await.unwrap();
                let mut config = current.config.clone();
                // The grace period encodes the version it is written at.
                config.staged_grace_period_ms = 1_000 + current.config_version + 1;
                // A config apply: an intent holding the staged config, then its promotion.
                engine
                    .apply_config(&ds, current.config_version, &config, "operator")
                    .await
                    .unwrap();
            }
        });
        let (mut checked, mut published, mut conflicts) = (0, 0, 0);
        while !writer.is_finished() {
            let round = tokio::time::timeout(std::time::Duration::from_secs(10), handle.refresh());
            match round.await.expect("a refresh hung") {
                Ok(Refresh::Published { .. }) => published += 1,
                Ok(Refresh::Unchanged) => {}
                // Under constant churn a preparation may give up; it publishes nothing and the
                // next refresh starts over.
                Err(MendError::Conflict { .. }) => conflicts += 1,
                Err(other) => panic!("refresh failed: {other}"),
            }
            let generation = handle.current();
            if generation.config_version > 1 {
                assert_eq!(
                    generation.config.staged_grace_period_ms,
                    1_000 + generation.config_version,
                    "generation {} mixes config views",
                    generation.number
                );
            }
            checked += 1;
        }
        writer.await.unwrap();
        handle.refresh().await.unwrap();
        let last = handle.current();
        assert_eq!(last.config_version, 1 + ROUNDS);
        println!(
            "live handle [{backend}]: {ROUNDS} config changes during {checked} refreshes ({published} published, {conflicts} gave up under churn), {} generations, none mixed",
            last.number
        );
    }
}

/// The write path refreshes its snapshot only when its read set changed, never sweeps, and
/// hands an unresolved operation in its way back as RecoveryRequired.
#[tokio::test]
async fn the_write_path_refreshes_its_snapshot_only_and_never_sweeps() {
    for backend in [Backend::Memory, Backend::Postgres] {
        let h = Harness::new(backend).await;
        let dataset_id = h.create_dataset("write-path").await;
        let handle = LiveHandle::open(h.engine.clone(), &dataset_id, HandleMode::ReadWrite)
            .await
            .unwrap();
        // Another writer publishes `old` after the handle took its snapshot.
        stage_and_publish(&h, &dataset_id, "old").await;
        h.engine
            .stage(&StageRequest {
                dataset_id: dataset_id.clone(),
                mode: StageMode::CreateOnly,
                node: "n".into(),
                splits: vec![StageSplit {
                    split_id: "merged".into(),
                    metadata_json: "{}".into(),
                }],
            })
            .await
            .unwrap();
        h.put_objects(&dataset_id, ["merged"]).await;
        handle
            .replace(&["merged".into()], &["old".into()], None)
            .await
            .expect("the replace finds `old` after a snapshot refresh");
        assert_eq!(handle.stats().snapshot_refreshes, 1);
        assert_eq!(handle.stats().sweeps, 0);

        // A crashed commit stands in the way of a write touching its split.
        let commit = CommitRequest {
            dataset_id: dataset_id.clone(),
            node: "writer".into(),
            splits: vec![CommitSplit {
                split_id: "contested".into(),
                metadata_json: "{}".into(),
                payload: Bytes::from_static(b"bytes"),
            }],
            checkpoint_delta: None,
            publish_token: None,
        };
        // Before its publish: begin, the object, publish.
        let crashing = h.engine.with_faults(Arc::new(CrashAt::new(3, false)));
        assert!(crashing.commit(&commit).await.is_err());
        let pending = h.engine.catalog().list_intents(&dataset_id).await.unwrap();
        let error = handle
            .replace(&["contested".into()], &[], None)
            .await
            .unwrap_err();
        match error {
            MendError::RecoveryRequired { operation_id } => {
                assert_eq!(operation_id, pending[0].operation_id)
            }
            other => panic!("expected RecoveryRequired, got {other:?}"),
        }
        assert_eq!(handle.stats().sweeps, 0, "the write path ran a sweep");
        assert_eq!(
            h.engine.catalog().list_intents(&dataset_id).await.unwrap(),
            pending
        );
        println!(
            "live handle [{backend}]: the write path refreshed its snapshot once, ran 0 sweeps, and returned RecoveryRequired for the operation in its way"
        );
    }
}

//! Crash schedules for merge, config apply and reconcile: each operation is crashed at its
//! k-th durable write for every k, cleanly and ambiguously, then recovered (and again with a
//! second crash during recovery). Every schedule must converge to the operation having fully
//! happened or never happened, with invariants 1 and 2 intact and no intent left.
//! (Commit and gc have their own files.)

use async_trait::async_trait;
use bytes::Bytes;
use mend::Engine;
use mend::engine::{CommitRequest, CommitSplit, MergeRequest};
use mend::model::{DatasetConfig, SplitState};
use mend_contract::RecoveryMode;
use mend_tests::crash::{CrashScenario, run_crash_schedules};
use mend_tests::{Backend, Harness};

/// Roll-forward first; what it cannot finish, exclusive rolls back.
const MODES: &[RecoveryMode] = &[RecoveryMode::RollForward, RecoveryMode::Exclusive];

fn split(id: &str) -> CommitSplit {
    CommitSplit {
        split_id: id.into(),
        metadata_json: r#"{"num_docs": 5}"#.into(),
        payload: Bytes::from(format!("payload of {id}")),
    }
}

async fn states(h: &Harness, dataset_id: &str, ids: &[&str]) -> Vec<Option<SplitState>> {
    let rows = h.rows(dataset_id).await;
    ids.iter()
        .map(|id| rows.iter().find(|r| r.split_id == *id).map(|r| r.state))
        .collect()
}

/// Two published splits merged into one.
struct Merge;

const MERGED: &str = "merged";
const OLD: [&str; 2] = ["old-1", "old-2"];

#[async_trait]
impl CrashScenario for Merge {
    fn kind(&self) -> &'static str {
        "merge"
    }

    async fn setup(&self, h: &Harness) -> String {
        let dataset_id = h.create_dataset("merge").await;
        let commit = CommitRequest {
            dataset_id: dataset_id.clone(),
            node: "writer".into(),
            splits: OLD.iter().map(|id| split(id)).collect(),
            checkpoint_delta: None,
            publish_token: None,
        };
        h.engine
            .commit(&commit)
            .await
            .expect("commit the splits to merge");
        dataset_id
    }

    async fn run(&self, engine: &Engine, dataset_id: &str) -> mend::Result<()> {
        let merge = MergeRequest {
            dataset_id: dataset_id.into(),
            node: "merger".into(),
            splits: vec![split(MERGED)],
            replaced_split_ids: OLD.iter().map(|id| (*id).into()).collect(),
            publish_token: None,
        };
        engine.merge(&merge).await.map(drop)
    }

    async fn outcome(&self, h: &Harness, dataset_id: &str, schedule: &str) -> bool {
        let found = states(h, dataset_id, &[MERGED, OLD[0], OLD[1]]).await;
        let marked = Some(SplitState::MarkedForDeletion);
        match found.as_slice() {
            [Some(SplitState::Published), old_1, old_2] if *old_1 == marked && *old_2 == marked => {
                true
            }
            [
                None | Some(SplitState::MarkedForDeletion),
                Some(SplitState::Published),
                Some(SplitState::Published),
            ] => false,
            other => panic!("{schedule}: half merged: merged, old-1, old-2 = {other:?}"),
        }
    }
}

/// A config change staged, then promoted.
struct ConfigApply;

fn new_config() -> DatasetConfig {
    DatasetConfig {
        staged_grace_period_ms: 123_000,
        ..DatasetConfig::default()
    }
}

#[async_trait]
impl CrashScenario for ConfigApply {
    fn kind(&self) -> &'static str {
        "config apply"
    }

    async fn setup(&self, h: &Harness) -> String {
        h.create_dataset("config").await
    }

    async fn run(&self, engine: &Engine, dataset_id: &str) -> mend::Result<()> {
        let version = engine.dataset(dataset_id).await?.config_version;
        engine
            .apply_config(dataset_id, version, &new_config(), "operator")
            .await
            .map(drop)
    }

    async fn outcome(&self, h: &Harness, dataset_id: &str, schedule: &str) -> bool {
        let dataset = h.engine.dataset(dataset_id).await.unwrap();
        if dataset.config == new_config() {
            assert_eq!(dataset.config_version, 2, "{schedule}: applied twice");
            true
        } else {
            assert_eq!(dataset.config, DatasetConfig::default(), "{schedule}");
            assert_eq!(dataset.config_version, 1, "{schedule}");
            false
        }
    }
}

/// Four orphan objects, past the staged grace period: two whole ones to adopt, a damaged one
/// and one of an earlier dataset of the same name to discard.
struct Reconcile;

const ADOPT: [&str; 2] = ["orphan-1", "orphan-2"];
const DISCARD: [&str; 2] = ["damaged", "earlier-incarnation"];

#[async_trait]
impl CrashScenario for Reconcile {
    fn kind(&self) -> &'static str {
        "reconcile"
    }

    async fn setup(&self, h: &Harness) -> String {
        let dataset_id = h.create_dataset("reconcile").await;
        let uid = h.engine.dataset(&dataset_id).await.unwrap().uid;
        for id in ADOPT {
            h.plant_orphan(&dataset_id, id, &uid, false).await;
        }
        h.plant_orphan(&dataset_id, DISCARD[0], &uid, true).await;
        h.plant_orphan(&dataset_id, DISCARD[1], "an-earlier-uid", false)
            .await;
        // Past the staged grace period (one hour) of the objects' store timestamps.
        h.set_clock_past_wall_clock(2 * 60 * 60 * 1000);
        dataset_id
    }

    async fn run(&self, engine: &Engine, dataset_id: &str) -> mend::Result<()> {
        engine.reconcile(dataset_id, "reconciler").await.map(drop)
    }

    async fn outcome(&self, h: &Harness, dataset_id: &str, schedule: &str) -> bool {
        let ids = [ADOPT[0], ADOPT[1], DISCARD[0], DISCARD[1]];
        for id in ids {
            assert!(
                h.engine
                    .objects()
                    .read_header(dataset_id, id)
                    .await
                    .unwrap()
                    .is_some(),
                "{schedule}: reconcile deleted object {id}"
            );
        }
        let published = Some(SplitState::Published);
        let marked = Some(SplitState::MarkedForDeletion);
        match states(h, dataset_id, &ids).await.as_slice() {
            [a, b, c, d] if *a == published && *b == published && *c == marked && *d == marked => {
                true
            }
            [None, None, None, None] => false,
            other => panic!("{schedule}: half reconciled: {ids:?} = {other:?}"),
        }
    }
}

macro_rules! schedules {
    ($($name:ident: $scenario:expr, $backend:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            run_crash_schedules($backend, &$scenario, MODES).await;
        }
    )*};
}

schedules! {
    merge_crash_schedules_converge_on_memory: Merge, Backend::Memory;
    merge_crash_schedules_converge_on_a_local_directory: Merge, Backend::LocalDirectory;
    merge_crash_schedules_converge_on_postgres: Merge, Backend::Postgres;
    merge_crash_schedules_converge_on_s3: Merge, Backend::S3;
    config_apply_crash_schedules_converge_on_memory: ConfigApply, Backend::Memory;
    config_apply_crash_schedules_converge_on_a_local_directory: ConfigApply, Backend::LocalDirectory;
    config_apply_crash_schedules_converge_on_postgres: ConfigApply, Backend::Postgres;
    config_apply_crash_schedules_converge_on_s3: ConfigApply, Backend::S3;
    reconcile_crash_schedules_converge_on_memory: Reconcile, Backend::Memory;
    reconcile_crash_schedules_converge_on_a_local_directory: Reconcile, Backend::LocalDirectory;
    reconcile_crash_schedules_converge_on_postgres: Reconcile, Backend::Postgres;
    reconcile_crash_schedules_converge_on_s3: Reconcile, Backend::S3;
}

/// mend-sim (config applies under idempotency keys, a write failing before its effect): a
/// config apply's promotion landed and its intent stayed (its process died before deleting
/// it, or its answer was lost and its keyed retry answered the recorded promotion), and
/// another config was promoted after it. Roll-forward recovery no longer sees the promotion
/// in the dataset's config and used to block on the intent for good ("another config change
/// was promoted first"), stopping every roll-forward sweep's progress on it until an operator
/// ran exclusive recovery. The promotion's record says it happened: recovery settles it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_config_apply_whose_intent_stayed_is_settled_after_a_later_promotion() {
    use mend::engine::Outcome;
    use mend::faults::{CrashAt, DurableStep};
    use mend_contract::RecoveryDecision;
    use std::sync::Arc;
    const HOUR_MS: i64 = 60 * 60 * 1000;
    let later = DatasetConfig {
        staged_grace_period_ms: 456_000,
        ..DatasetConfig::default()
    };
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let dataset_id = h.create_dataset("config-left").await;
        // The crash that comes just before the intent's deletion, found by walking the steps.
        let mut crashed_before_delete = false;
        for k in 1..=8 {
            let crash = Arc::new(CrashAt::new(k, false));
            let version = h.engine.dataset(&dataset_id).await.unwrap().config_version;
            let answer = h
                .engine
                .with_faults(crash.clone())
                .apply_config(&dataset_id, version, &new_config(), "operator")
                .await;
            if crash.steps().last() == Some(&DurableStep::DeleteIntent) {
                assert!(answer.is_err(), "{backend}: the crash is reported");
                crashed_before_delete = true;
                break;
            }
            // An earlier crash: recover it, and try the next step.
            for mode in MODES {
                h.engine.recover(&dataset_id, *mode).await.unwrap();
            }
            assert!(answer.is_err(), "{backend}: step {k} crashed");
        }
        assert!(
            crashed_before_delete,
            "{backend}: a crash before DeleteIntent"
        );
        let dataset = h.engine.dataset(&dataset_id).await.unwrap();
        assert_eq!(dataset.config, new_config(), "{backend}: promoted");
        let left = h.engine.catalog().list_intents(&dataset_id).await.unwrap();
        assert_eq!(left.len(), 1, "{backend}: its intent stayed");

        h.engine
            .apply_config(&dataset_id, dataset.config_version, &later, "operator")
            .await
            .unwrap();
        h.set_clock_past_wall_clock(2 * HOUR_MS);
        let report = h
            .engine
            .recover(&dataset_id, RecoveryMode::RollForward)
            .await
            .unwrap();
        assert_eq!(report.intents.len(), 1, "{backend}: {report:?}");
        assert_eq!(
            report.intents[0].decision,
            RecoveryDecision::Stale,
            "{backend}"
        );
        assert_eq!(report.intents[0].outcome, Outcome::Executed, "{backend}");
        assert!(
            h.engine
                .catalog()
                .list_intents(&dataset_id)
                .await
                .unwrap()
                .is_empty(),
            "{backend}"
        );
        assert_eq!(
            h.engine.dataset(&dataset_id).await.unwrap().config,
            later,
            "{backend}: the later config stands"
        );
    }
    println!(
        "config apply left promoted: on {} backends, settled as stale by roll-forward after a later promotion",
        Backend::ALL.len()
    );
}

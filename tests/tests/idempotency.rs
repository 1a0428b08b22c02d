//! Every mutating request of the engine under an idempotency key, on every backend: a retry of
//! a request that took effect answers what the first answered, whatever the state says since
//! (a delete whose rows went, a create whose dataset exists, a config apply whose version
//! moved, a crashed config apply that recovery finished, a gc or reconcile with nothing left
//! to do, a recovery, a policy swap and rollback); the same key with another request is
//! refused naming the key.

use std::sync::Arc;

use mend::MendError;
use mend::faults::CrashAt;
use mend::model::{DatasetConfig, StageMode, StageRequest, StageSplit};
use mend::runtime::registry::PolicyRegistry;
use mend::runtime::{DEFAULT_POLICY_WASM, LoadOptions, PolicyLimits, PolicyRuntime};
use mend_contract::RecoveryMode;
use mend_tests::{Backend, Harness};

fn ids(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|id| id.to_string()).collect()
}

fn another_request(error: &MendError, key: &str) -> bool {
    matches!(error, MendError::InvalidArgument { message }
        if message.contains(key) && message.contains("another request"))
}

/// Stages `split_ids` create-only and writes their objects, as a writer does.
async fn stage(h: &Harness, dataset_id: &str, split_ids: &[&str]) {
    let request = StageRequest {
        dataset_id: dataset_id.into(),
        mode: StageMode::CreateOnly,
        node: "writer".into(),
        splits: split_ids
            .iter()
            .map(|id| StageSplit {
                split_id: id.to_string(),
                metadata_json: "{}".into(),
            })
            .collect(),
    };
    h.engine.stage(&request).await.expect("stage");
    h.put_objects(dataset_id, split_ids).await;
}

async fn manifest(h: &Harness, dataset_id: &str) -> u64 {
    h.engine.dataset(dataset_id).await.unwrap().manifest_version
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_retried_after_its_rows_went_answers_its_first_result() {
    let mut checked = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("delete").await;
        stage(&h, &ds, &["a", "b"]).await;
        let doomed = ids(&["a", "b"]);
        let marked = engine
            .mark_for_deletion(&ds, &doomed)
            .idempotency_key("mark-1")
            .await
            .unwrap();
        assert_eq!(marked.marked, doomed);
        let again = engine
            .mark_for_deletion(&ds, &doomed)
            .idempotency_key("mark-1")
            .await
            .unwrap();
        assert_eq!(again, marked, "{backend}: a retried mark says marked");
        engine
            .delete_splits(&ds, &doomed)
            .idempotency_key("delete-1")
            .await
            .unwrap();
        assert!(h.rows(&ds).await.is_empty(), "{backend}");
        let version = manifest(&h, &ds).await;
        let before = h.write_fingerprint(&ds).await;
        // Without the key, the rows' absence is the answer.
        let plain = engine.delete_splits(&ds, &doomed).await.unwrap_err();
        assert!(matches!(plain, MendError::NotFound { .. }), "{plain:?}");
        for attempt in 0..3 {
            engine
                .delete_splits(&ds, &doomed)
                .idempotency_key("delete-1")
                .await
                .unwrap_or_else(|error| panic!("{backend}: retry {attempt}: {error}"));
        }
        assert_eq!(
            h.write_fingerprint(&ds).await,
            before,
            "{backend}: retries wrote"
        );
        assert_eq!(manifest(&h, &ds).await, version);
        let other = engine
            .delete_splits(&ds, &ids(&["a"]))
            .idempotency_key("delete-1")
            .await
            .unwrap_err();
        assert!(another_request(&other, "delete-1"), "{backend}: {other:?}");
        let bad = engine
            .delete_splits(&ds, &doomed)
            .idempotency_key("op:mine")
            .await
            .unwrap_err();
        assert!(matches!(bad, MendError::InvalidArgument { .. }), "{bad:?}");
        checked += 9;
    }
    println!(
        "keyed deletes on {} backends: {checked} checks",
        Backend::ALL.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_retried_answers_the_dataset_it_created() {
    let mut checked = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.unique_dataset_id("create");
        let config = DatasetConfig::default();
        let created = engine
            .create_dataset(&ds, &config)
            .idempotency_key("create-1")
            .await
            .unwrap();
        let plain = engine.create_dataset(&ds, &config).await.unwrap_err();
        assert!(
            matches!(plain, MendError::AlreadyExists { .. }),
            "{plain:?}"
        );
        let before = h.write_fingerprint(&ds).await;
        for attempt in 0..3 {
            let again = engine
                .create_dataset(&ds, &config)
                .idempotency_key("create-1")
                .await
                .unwrap_or_else(|error| panic!("{backend}: retry {attempt}: {error}"));
            assert_eq!(again, created, "{backend}: the same uid, not a new one");
        }
        assert_eq!(
            h.write_fingerprint(&ds).await,
            before,
            "{backend}: retries wrote"
        );
        let other_config = DatasetConfig {
            staged_grace_period_ms: 1,
            ..config.clone()
        };
        let other = engine
            .create_dataset(&ds, &other_config)
            .idempotency_key("create-1")
            .await
            .unwrap_err();
        assert!(another_request(&other, "create-1"), "{backend}: {other:?}");
        // Another key for a dataset that exists is still a 409.
        let taken = engine
            .create_dataset(&ds, &config)
            .idempotency_key("create-2")
            .await
            .unwrap_err();
        assert!(
            matches!(taken, MendError::AlreadyExists { .. }),
            "{taken:?}"
        );
        checked += 7;
    }
    println!(
        "keyed creates on {} backends: {checked} checks",
        Backend::ALL.len()
    );
}

fn new_config() -> DatasetConfig {
    DatasetConfig {
        staged_grace_period_ms: 123_000,
        ..DatasetConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_apply_retried_after_it_landed_answers_its_promotion() {
    let mut checked = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("config").await;
        let applied = engine
            .apply_config(&ds, 1, &new_config(), "operator")
            .idempotency_key("config-1")
            .await
            .unwrap();
        assert_eq!(
            (applied.config_version, &applied.config),
            (2, &new_config())
        );
        assert!(engine.catalog().list_intents(&ds).await.unwrap().is_empty());
        let before = h.write_fingerprint(&ds).await;
        let stale = engine
            .apply_config(&ds, 1, &new_config(), "operator")
            .await
            .unwrap_err();
        assert!(
            matches!(stale, MendError::FailedPrecondition { .. }),
            "{stale:?}"
        );
        for attempt in 0..3 {
            let again = engine
                .apply_config(&ds, 1, &new_config(), "operator")
                .idempotency_key("config-1")
                .await
                .unwrap_or_else(|error| panic!("{backend}: retry {attempt}: {error}"));
            assert_eq!(again, applied, "{backend}");
        }
        assert_eq!(
            h.write_fingerprint(&ds).await,
            before,
            "{backend}: retries wrote"
        );
        let other = engine
            .apply_config(&ds, 1, &DatasetConfig::default(), "operator")
            .idempotency_key("config-1")
            .await
            .unwrap_err();
        assert!(another_request(&other, "config-1"), "{backend}: {other:?}");
        let other_version = engine
            .apply_config(&ds, 2, &new_config(), "operator")
            .idempotency_key("config-1")
            .await
            .unwrap_err();
        assert!(
            another_request(&other_version, "config-1"),
            "{other_version:?}"
        );
        // An edit made from the current config (the command line's `--set`) retried after
        // it landed reads the promoted config, and is answered the same.
        let edit = |config: &DatasetConfig| {
            Ok(DatasetConfig {
                deletion_grace_period_ms: 5,
                ..config.clone()
            })
        };
        let edited = engine
            .apply_config_edit(&ds, &edit, "cli")
            .idempotency_key("config-2")
            .await
            .unwrap();
        assert_eq!(
            (
                edited.config_version,
                edited.config.deletion_grace_period_ms
            ),
            (3, 5)
        );
        let again = engine
            .apply_config_edit(&ds, &edit, "cli")
            .idempotency_key("config-2")
            .await
            .unwrap();
        assert_eq!(again, edited, "{backend}: a retried edit");
        let other_edit = |config: &DatasetConfig| {
            Ok(DatasetConfig {
                deletion_grace_period_ms: 6,
                ..config.clone()
            })
        };
        let refused = engine
            .apply_config_edit(&ds, &other_edit, "cli")
            .idempotency_key("config-2")
            .await
            .unwrap_err();
        assert!(another_request(&refused, "config-2"), "{refused:?}");
        checked += 11;
    }
    println!(
        "keyed config applies on {} backends: {checked} checks",
        Backend::ALL.len()
    );
}

/// Durable steps of a config apply: 1 intent, 2 promotion, 3 intent deleted.
const PROMOTE: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_config_apply_retried_waits_for_recovery_then_answers_its_promotion() {
    let mut checked = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let ds = h.create_dataset("crashed-config").await;
        // The writer dies before its promotion: its intent is all there is.
        let crashing = h.engine.with_faults(Arc::new(CrashAt::new(PROMOTE, false)));
        let crashed = crashing
            .apply_config(&ds, 1, &new_config(), "operator")
            .idempotency_key("config-1")
            .await
            .unwrap_err();
        assert!(
            matches!(crashed, MendError::Unavailable { .. }),
            "{crashed:?}"
        );
        let config = new_config();
        let retry = || {
            h.engine
                .apply_config(&ds, 1, &config, "operator")
                .idempotency_key("config-1")
        };
        let operation_id = match retry().await.unwrap_err() {
            MendError::RecoveryRequired { operation_id } => operation_id,
            other => panic!("{backend}: a retry in doubt answered {other:?}"),
        };
        assert!(operation_id.starts_with("config-"), "{operation_id}");
        assert_eq!(h.engine.dataset(&ds).await.unwrap().config_version, 1);
        // While its lease is live, recovery leaves it to its owner: still in doubt.
        h.engine
            .recover(&ds, RecoveryMode::RollForward)
            .await
            .unwrap();
        assert!(matches!(
            retry().await.unwrap_err(),
            MendError::RecoveryRequired { .. }
        ));
        // Its lease runs out; recovery rolls it forward and records the promotion.
        h.clock.advance_ms(120_000);
        let report = h
            .engine
            .recover(&ds, RecoveryMode::RollForward)
            .await
            .unwrap();
        assert_eq!(report.intents.len(), 1, "{backend}: {report:?}");
        let promoted = h.engine.dataset(&ds).await.unwrap();
        assert_eq!(
            (promoted.config_version, &promoted.config),
            (2, &new_config())
        );
        let before = h.write_fingerprint(&ds).await;
        let answered = retry().await.unwrap();
        assert_eq!(answered, promoted, "{backend}: the promotion recovery made");
        assert_eq!(
            h.write_fingerprint(&ds).await,
            before,
            "{backend}: the retry wrote"
        );
        checked += 7;

        // A crash after the promotion landed (the answer lost): the retry answers at once,
        // though the intent is still there.
        let ds = h.create_dataset("lost-answer").await;
        let crashing = h.engine.with_faults(Arc::new(CrashAt::new(PROMOTE, true)));
        crashing
            .apply_config(&ds, 1, &new_config(), "operator")
            .idempotency_key("config-1")
            .await
            .unwrap_err();
        assert_eq!(h.engine.catalog().list_intents(&ds).await.unwrap().len(), 1);
        let answered = h
            .engine
            .apply_config(&ds, 1, &new_config(), "operator")
            .idempotency_key("config-1")
            .await
            .unwrap();
        assert_eq!(answered, h.engine.dataset(&ds).await.unwrap(), "{backend}");
        assert_eq!(answered.config_version, 2);
        checked += 3;
    }
    println!(
        "crashed keyed config applies on {} backends: {checked} checks",
        Backend::ALL.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_reconcile_and_recover_retried_answer_their_first_report() {
    let mut checked = 0;
    for backend in Backend::ALL {
        let h = Harness::new(backend).await;
        let engine = &h.engine;
        let ds = h.create_dataset("runs").await;
        stage(&h, &ds, &["abandoned-1", "abandoned-2"]).await;
        // Past the staged grace period (one hour): gc abandons them.
        h.clock.advance_ms(2 * 60 * 60 * 1000);
        let collected = engine
            .gc(&ds, "gc-node")
            .idempotency_key("gc-1")
            .await
            .unwrap();
        assert_eq!(
            collected.marked,
            ["abandoned-1", "abandoned-2"],
            "{backend}"
        );
        assert!(engine.gc(&ds, "gc-node").await.unwrap().marked.is_empty());
        let again = engine
            .gc(&ds, "gc-1-retry-check")
            .idempotency_key("gc-1")
            .await;
        assert!(
            matches!(&again, Err(error) if another_request(error, "gc-1")),
            "{backend}: another node is another request: {again:?}"
        );
        let before = h.write_fingerprint(&ds).await;
        let again = engine
            .gc(&ds, "gc-node")
            .idempotency_key("gc-1")
            .await
            .unwrap();
        assert_eq!(
            again, collected,
            "{backend}: a retried gc answers its first report"
        );
        assert_eq!(
            h.write_fingerprint(&ds).await,
            before,
            "{backend}: the retry wrote"
        );
        checked += 4;

        let uid = engine.dataset(&ds).await.unwrap().uid;
        h.plant_orphan(&ds, "orphan", &uid, false).await;
        h.set_clock_past_wall_clock(2 * 60 * 60 * 1000);
        let reconciled = engine
            .reconcile(&ds, "reconciler")
            .idempotency_key("reconcile-1")
            .await
            .unwrap();
        assert_eq!(reconciled.adopted, ["orphan"], "{backend}: {reconciled:?}");
        assert!(
            engine
                .reconcile(&ds, "reconciler")
                .await
                .unwrap()
                .adopted
                .is_empty()
        );
        let again = engine
            .reconcile(&ds, "reconciler")
            .idempotency_key("reconcile-1")
            .await
            .unwrap();
        assert_eq!(again, reconciled, "{backend}: a retried reconcile");
        checked += 3;

        // A crashed config apply for recovery to finish.
        let crashing = h.engine.with_faults(Arc::new(CrashAt::new(PROMOTE, false)));
        crashing
            .apply_config(&ds, 1, &new_config(), "operator")
            .await
            .unwrap_err();
        h.clock.advance_ms(120_000);
        let probe = engine
            .recover(&ds, RecoveryMode::Probe)
            .idempotency_key("probe-1")
            .await
            .unwrap();
        assert_eq!(probe.intents.len(), 1);
        assert!(
            engine
                .catalog()
                .recorded_request(&ds, "probe-1")
                .await
                .unwrap()
                .is_none(),
            "{backend}: a probe recorded something"
        );
        let recovered = engine
            .recover(&ds, RecoveryMode::RollForward)
            .idempotency_key("recover-1")
            .await
            .unwrap();
        assert_eq!(recovered.intents.len(), 1, "{backend}: {recovered:?}");
        assert!(
            engine
                .recover(&ds, RecoveryMode::RollForward)
                .await
                .unwrap()
                .intents
                .is_empty()
        );
        let again = engine
            .recover(&ds, RecoveryMode::RollForward)
            .idempotency_key("recover-1")
            .await
            .unwrap();
        assert_eq!(
            again, recovered,
            "{backend}: a retried recovery answers its report"
        );
        let other = engine
            .recover(&ds, RecoveryMode::Exclusive)
            .idempotency_key("recover-1")
            .await
            .unwrap_err();
        assert!(another_request(&other, "recover-1"), "{other:?}");
        checked += 5;
    }
    println!(
        "keyed gc, reconcile and recovery runs on {} backends: {checked} checks",
        Backend::ALL.len()
    );
}

/// The default policy's bytes with a custom section appended: the same decisions under
/// another digest.
fn rebadged(label: &str) -> (Vec<u8>, PolicyRuntime) {
    let mut bytes = DEFAULT_POLICY_WASM.to_vec();
    let name = b"mend-test-label";
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(label.as_bytes());
    bytes.push(0); // custom section
    bytes.push(section.len() as u8);
    bytes.extend_from_slice(&section);
    let policy = PolicyRuntime::load(&bytes, PolicyLimits::default()).expect("the policy loads");
    (bytes, policy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_swap_and_rollback_retried_answer_their_first_answer() {
    let h = Harness::new(Backend::Memory).await;
    let engine = &h.engine;
    let (store, prefix) = engine.objects().store();
    let registry = PolicyRegistry::new(store.clone(), prefix.clone());
    let (bytes, candidate) = rebadged("v2");
    let no_scenarios: Vec<mend::scenarios::Suite> = Vec::new();
    let swap = |key: &'static str, records: usize| {
        engine
            .swap_deployment_policy(&registry, &bytes, candidate.clone(), records, &no_scenarios)
            .idempotency_key(key)
    };
    let swapped = swap("swap-1", 10).await.unwrap();
    assert_eq!(swapped.record.digest, candidate.digest());
    assert_eq!(
        swapped.record.recorded, None,
        "the answer leaves its own record out"
    );
    let active = registry.active().await.unwrap().unwrap();
    assert_eq!(
        active.recorded.as_ref().map(|r| r.key.as_str()),
        Some("swap-1")
    );
    // Without the key the same swap is refused: it is the active policy already.
    let plain = engine
        .swap_deployment_policy(&registry, &bytes, candidate.clone(), 10, &no_scenarios)
        .await
        .unwrap_err();
    assert!(
        matches!(plain, MendError::FailedPrecondition { .. }),
        "{plain:?}"
    );
    for attempt in 0..2 {
        let again = swap("swap-1", 10).await.unwrap();
        assert_eq!(again, swapped, "retry {attempt}");
    }
    assert_eq!(
        registry.active().await.unwrap().unwrap(),
        active,
        "a retry swapped"
    );
    let other = swap("swap-1", 11).await.unwrap_err();
    assert!(another_request(&other, "swap-1"), "{other:?}");
    let mut checked = 6;

    let load = LoadOptions::default();
    let rolled_back = engine
        .rollback_deployment_policy(&registry, &load)
        .idempotency_key("rollback-1")
        .await
        .unwrap();
    assert_eq!(rolled_back.previous.as_deref(), Some(candidate.digest()));
    for attempt in 0..2 {
        let again = engine
            .rollback_deployment_policy(&registry, &load)
            .idempotency_key("rollback-1")
            .await
            .unwrap();
        assert_eq!(
            again, rolled_back,
            "retry {attempt}: a rollback is not undone by its retry"
        );
    }
    let newest = registry.active().await.unwrap().unwrap();
    assert_eq!(newest.version, rolled_back.version);
    assert_eq!(engine.policy().digest(), rolled_back.digest);
    let reused = engine
        .rollback_deployment_policy(&registry, &load)
        .idempotency_key("swap-1")
        .await
        .unwrap_err();
    assert!(another_request(&reused, "swap-1"), "{reused:?}");
    checked += 5;
    println!("keyed policy swaps and rollbacks: {checked} checks");
}

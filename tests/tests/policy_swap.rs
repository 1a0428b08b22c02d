//! Policy hot swap: prepare, then publish in one step; operations keep the policy they
//! started with; rollback restores the previous one; under load, 100 swaps fail nothing; and a
//! swap's replay of the catalog's newest records costs as many requests (or statements) at
//! 1,000 datasets as at 10.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use mend::audit::{AuditRecord, DecisionInput};
use mend::catalog::recent_audit::every_dataset;
use mend::engine::{CommitRequest, CommitSplit};
use mend::faults::CrashAt;
use mend::model::{StageMode, StageRequest, StageSplit};
use mend::runtime::registry::PolicyRegistry;
use mend::runtime::{
    CAUTIOUS_POLICY_WASM, DEFAULT_POLICY_WASM, LoadOptions, PolicyLimits, PolicyRuntime,
};
use mend::scenarios::{Suite, load_suite};
use mend::{Engine, EngineOptions, MendError};
use mend_contract::RecoveryMode;
use mend_tests::{Backend, Harness, RequestCounts};

/// The default policy with a custom section appended: the same code and decisions under
/// another digest, as a rebuilt release of the same policy would be.
fn rebadged(label: &str) -> PolicyRuntime {
    let mut bytes = DEFAULT_POLICY_WASM.to_vec();
    let name = b"mend-test-label";
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(label.as_bytes());
    bytes.push(0); // custom section
    let mut size = section.len();
    loop {
        let byte = (size & 0x7f) as u8;
        size >>= 7;
        if size == 0 {
            bytes.push(byte);
            break;
        }
        bytes.push(byte | 0x80);
    }
    bytes.extend_from_slice(&section);
    PolicyRuntime::load(&bytes, PolicyLimits::default()).expect("the rebadged policy loads")
}

/// The golden scenarios the default policy ships.
fn golden() -> Vec<Suite> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest/scenarios");
    let mut suites: Vec<Suite> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| load_suite(&path).unwrap())
        .collect();
    suites.sort_by(|a, b| a.file.cmp(&b.file));
    assert!(suites.len() >= 4);
    suites
}

fn commit(dataset_id: &str, split_id: &str) -> CommitRequest {
    CommitRequest {
        dataset_id: dataset_id.into(),
        node: "writer".into(),
        splits: vec![CommitSplit {
            split_id: split_id.into(),
            metadata_json: "{}".into(),
            payload: Bytes::from_static(b"bytes"),
        }],
        checkpoint_delta: None,
        publish_token: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_is_prepared_to_the_side_published_at_once_and_rolled_back() {
    let h = Harness::new(Backend::Memory).await;
    let engine = &h.engine;
    let original = engine.policy().digest().to_string();
    let candidate = rebadged("v2");
    assert_ne!(candidate.digest(), original);

    // Some recorded decisions to replay: a crashed commit, recovered.
    let dataset_id = h.create_dataset("swap").await;
    // Crashed before its publish (its steps: begin, the object, publish).
    let crashing = engine.with_faults(Arc::new(CrashAt::new(3, false)));
    assert!(crashing.commit(&commit(&dataset_id, "s")).await.is_err());
    h.clock.advance_ms(120_000);
    engine
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await
        .unwrap();

    let prepared = engine
        .prepare_policy_swap(candidate.clone(), 1_000, &golden())
        .await
        .unwrap();
    assert_eq!(
        engine.policy().digest(),
        original,
        "preparing changes nothing"
    );
    assert_eq!(prepared.replay.replayed, 1);
    assert_eq!(prepared.replay.unchanged, 1, "{:?}", prepared.replay);
    assert!(
        prepared
            .scenarios
            .iter()
            .all(|report| report.failed.is_empty())
    );

    // A candidate failing the golden scenarios is refused, and nothing changes.
    let hostile = PolicyRuntime::load(
        include_bytes!(env!("MEND_POLICY_HOSTILE_WASM")),
        PolicyLimits::default(),
    )
    .unwrap();
    let refused = engine
        .prepare_policy_swap(hostile, 1_000, &golden())
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, MendError::PolicyRejected { message } if message.contains("golden scenarios")),
        "{refused:?}"
    );
    assert_eq!(engine.policy().digest(), original);

    // An operation pinned before the swap keeps its policy.
    let in_flight = engine.pinned();
    let swapped = engine.publish_policy_swap(prepared).unwrap();
    assert_eq!(swapped.from_digest, original);
    assert_eq!(engine.policy().digest(), candidate.digest());
    assert_eq!(in_flight.policy().digest(), original);

    // A swap prepared against a policy no longer active is refused.
    let stale = in_flight
        .prepare_policy_swap(rebadged("v3"), 10, &[])
        .await
        .unwrap();
    let stale_generation = stale.generation;
    engine.rollback_policy().unwrap();
    let refused = engine.publish_policy_swap(stale).unwrap_err();
    assert!(
        matches!(refused, MendError::Conflict { .. }),
        "{refused:?} ({stale_generation})"
    );

    assert_eq!(engine.policy().digest(), original, "rollback restores it");
    engine.rollback_policy().unwrap();
    assert_eq!(
        engine.policy().digest(),
        candidate.digest(),
        "and undoes itself"
    );
    println!(
        "policy swap: prepared with 1 decision replayed unchanged, published in one step, an in-flight operation kept {original}, a stale swap refused, rollback restored and undid itself"
    );
}

/// Several tasks stage and recover continuously while the policy is swapped 100 times
/// between two versions: no operation fails, each recovered operation has exactly one audit
/// record, naming the digest of the sweep that recovered it, and both digests decided.
async fn swaps_under_load(backend: Backend) {
    const SWAPS: usize = 100;
    // Each swap replays the newest 50 records of the whole catalog, one query on Postgres: the
    // shared database, whatever other tests left in it, costs it no more than a fresh one.
    let h = Arc::new(Harness::new(backend).await);
    let dataset_id = h.create_dataset("load").await;
    let versions = [h.engine.policy(), rebadged("load-v2")];
    let stop = Arc::new(AtomicBool::new(false));
    let (stages, sweeps) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));

    let mut workers = Vec::new();
    for worker in 0..2 {
        let (h, ds, stop, stages) = (h.clone(), dataset_id.clone(), stop.clone(), stages.clone());
        workers.push(tokio::spawn(async move {
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                let request = StageRequest {
                    dataset_id: ds.clone(),
                    mode: StageMode::CreateOnly,
                    node: format!("stager-{worker}"),
                    splits: (0..20)
                        .map(|i| StageSplit {
                            split_id: format!("w{worker}-r{round}-{i}"),
                            metadata_json: "{}".into(),
                        })
                        .collect(),
                };
                h.engine
                    .stage(&request)
                    .await
                    .expect("a stage failed during swaps");
                stages.fetch_add(1, Ordering::Relaxed);
                round += 1;
                // An in-memory catalog never makes a task wait: let the others run.
                tokio::task::yield_now().await;
            }
        }));
    }
    let recoverer = {
        let (h, ds, stop, sweeps) = (h.clone(), dataset_id.clone(), stop.clone(), sweeps.clone());
        tokio::spawn(async move {
            let mut round = 0;
            let mut reports = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                // A writer crashes after its upload; its lease runs out; recovery finishes it.
                let crashing = h.engine.with_faults(Arc::new(CrashAt::new(3, false)));
                assert!(
                    crashing
                        .commit(&commit(&ds, &format!("c-{round}")))
                        .await
                        .is_err()
                );
                h.clock.advance_ms(120_000);
                let report = h
                    .engine
                    .recover(&ds, RecoveryMode::RollForward)
                    .await
                    .expect("a sweep failed during swaps");
                reports.push(report);
                sweeps.fetch_add(1, Ordering::Relaxed);
                round += 1;
                tokio::task::yield_now().await;
            }
            reports
        })
    };

    let mut prepare_total = std::time::Duration::ZERO;
    for swap in 0..SWAPS {
        // Interleave for real: every swap waits for a stage, every fifth for sweeps, to
        // happen since the last one.
        let (stages_before, sweeps_before) = (
            stages.load(Ordering::Relaxed),
            sweeps.load(Ordering::Relaxed),
        );
        // Two sweeps, not one: the second began after the first ended, so after the last
        // swap was published, and it runs (and audits) under the digest that swap made
        // current. Both digests are thus used, whatever the scheduler does.
        let waiting = std::time::Instant::now();
        while stages.load(Ordering::Relaxed) == stages_before
            || (swap.is_multiple_of(5) && sweeps.load(Ordering::Relaxed) < sweeps_before + 2)
        {
            // A stager or the recoverer that stopped (it panicked) would never move its count:
            // say which instead of waiting for ever.
            if let Some(stopped) = workers.iter().position(|worker| worker.is_finished()) {
                let worker = workers.swap_remove(stopped);
                worker.await.expect("a stager failed");
                panic!("stager {stopped} stopped during swaps");
            }
            if recoverer.is_finished() {
                recoverer.await.expect("the recoverer failed");
                panic!("the recoverer stopped during swaps");
            }
            assert!(
                waiting.elapsed() < std::time::Duration::from_secs(60),
                "swap {swap}: no stage or sweep for 60 s ({} stages, {} sweeps so far)",
                stages.load(Ordering::Relaxed),
                sweeps.load(Ordering::Relaxed)
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let candidate = versions[(swap + 1) % 2].clone();
        let started = std::time::Instant::now();
        let prepared = h
            .engine
            .prepare_policy_swap(candidate, 50, &[])
            .await
            .expect("prepare");
        prepare_total += started.elapsed();
        h.engine.publish_policy_swap(prepared).expect("publish");
        tokio::task::yield_now().await;
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.expect("a stager failed");
    }
    let reports = recoverer.await.expect("the recoverer failed");

    // Each recovered operation is audited exactly once (before and after executing), naming
    // the digest of the sweep that ran it, and nothing else is audited.
    let audit = h
        .engine
        .catalog()
        .list_audit(&dataset_id, None)
        .await
        .unwrap();
    // A decision is recorded twice: `executing` before its effects, settled after. Each kind
    // is counted on its own.
    let mut records: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut executing: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for record in &audit {
        let by_kind = if record.is_executing() {
            &mut executing
        } else {
            &mut records
        };
        by_kind
            .entry(record.operation_id.as_str())
            .or_default()
            .push(record.policy_digest.as_str());
    }
    assert_eq!(
        executing, records,
        "every settled record follows an executing one of the same sweep"
    );
    let mut recovered: BTreeMap<&str, &str> = BTreeMap::new();
    for report in &reports {
        for intent in &report.intents {
            let earlier =
                recovered.insert(intent.operation_id.as_str(), report.policy_digest.as_str());
            assert!(
                earlier.is_none(),
                "{} was recovered by two sweeps",
                intent.operation_id
            );
        }
    }
    for (operation, digest) in &recovered {
        let named = records
            .get(operation)
            .unwrap_or_else(|| panic!("{operation} was recovered but not audited"));
        assert_eq!(
            named,
            &[*digest],
            "{operation}: not exactly one audit record, under its sweep's digest"
        );
    }
    let unrecovered: Vec<&&str> = records
        .keys()
        .filter(|operation| !recovered.contains_key(**operation))
        .collect();
    assert!(
        unrecovered.is_empty(),
        "audited but not recovered: {unrecovered:?}"
    );
    let checked = recovered.len();
    assert!(checked > 0);

    // Both versions decided: each digest is named by some sweep and its audit records.
    let mut per_digest: BTreeMap<&str, usize> = BTreeMap::new();
    for digest in recovered.values() {
        *per_digest.entry(digest).or_default() += 1;
    }
    let expected: BTreeSet<&str> = versions.iter().map(|v| v.digest()).collect();
    assert_eq!(expected.len(), 2, "the two versions have two digests");
    assert_eq!(
        per_digest.keys().copied().collect::<BTreeSet<_>>(),
        expected,
        "not every digest decided during the swaps"
    );
    let split: Vec<String> = per_digest.values().map(usize::to_string).collect();
    println!(
        "swap under load [{backend}]: {SWAPS} swaps (prepare {:.1} ms on average) during {} stages and {} sweeps: 0 failed; {checked} recovered operations, each with exactly 1 audit record under the digest of its sweep ({} audit records in all); both digests decided ({} operations)",
        prepare_total.as_secs_f64() * 1e3 / SWAPS as f64,
        stages.load(Ordering::Relaxed),
        sweeps.load(Ordering::Relaxed),
        audit.len(),
        split.join(" and ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swaps_under_load_on_memory() {
    swaps_under_load(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swaps_under_load_on_postgres() {
    swaps_under_load(Backend::Postgres).await;
}

/// What one replay cost the catalog's storage: requests to an object-storage catalog's store
/// (and the index entries its listings answered with), statements and round trips on Postgres.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReplayCost {
    requests: RequestCounts,
    entries_listed: u64,
    statements: u64,
    round_trips: u64,
}

fn cost_so_far(h: &Harness) -> ReplayCost {
    let store = h.store.as_ref().expect("every harness counts its store");
    let sql = h.sql.as_ref().map(|sql| sql.counts()).unwrap_or_default();
    ReplayCost {
        requests: store.requests(),
        entries_listed: store.entries_listed(),
        statements: sql.statements,
        round_trips: sql.round_trips,
    }
}

fn cost_since(h: &Harness, before: ReplayCost) -> ReplayCost {
    let now = cost_so_far(h);
    ReplayCost {
        requests: now.requests.since(&before.requests),
        entries_listed: now.entries_listed - before.entries_listed,
        statements: now.statements - before.statements,
        round_trips: now.round_trips - before.round_trips,
    }
}

/// `record` as the same decision would have been recorded in `dataset_id`, for `operation_id`,
/// `later_by_ms` after it.
fn recorded_in(
    record: &AuditRecord,
    dataset_id: &str,
    operation_id: &str,
    later_by_ms: i64,
) -> AuditRecord {
    let mut copy = record.clone();
    copy.dataset_id = dataset_id.to_string();
    copy.operation_id = operation_id.to_string();
    copy.recorded_at_ms += later_by_ms;
    if let Some(DecisionInput::DecideRecovery {
        dataset_id: decided_in,
        intent,
        ..
    }) = &mut copy.inputs
    {
        *decided_in = dataset_id.to_string();
        intent.operation_id = operation_id.to_string();
    }
    copy
}

/// A catalog of `datasets` datasets, each with one recovered commit's two audit records
/// (`executing`, then settled, in two appends, as a sweep appends them), the `i`th dataset's
/// 10 ms after the one before; then a replay of the newest 10 records: its report, what it cost,
/// and what the trait's default (every dataset's trail) costs for the same records.
async fn replay_at(
    backend: Backend,
    datasets: usize,
) -> (mend::runtime::replay::ReplayReport, ReplayCost, ReplayCost) {
    let (h, own_database) = Harness::on_own_database(backend, "mend_replay_cost").await;
    let first = h.create_dataset("replay").await;
    let crashing = h.engine.with_faults(Arc::new(CrashAt::new(3, false)));
    assert!(crashing.commit(&commit(&first, "s")).await.is_err());
    h.clock.advance_ms(120_000);
    h.engine
        .recover(&first, RecoveryMode::RollForward)
        .await
        .unwrap();
    let catalog = h.engine.catalog();
    let decided = catalog.list_audit(&first, None).await.unwrap();
    assert_eq!(decided.len(), 2, "executing, then settled: {decided:?}");
    for i in 1..datasets {
        let dataset_id = h.create_dataset("replay").await;
        let operation_id = format!("op-{i}");
        for record in &decided {
            let copy = recorded_in(record, &dataset_id, &operation_id, 10 * i as i64);
            catalog.append_audit(&dataset_id, &[copy]).await.unwrap();
        }
    }
    let candidate = rebadged("replay-cost");
    // Each catalog instance reads what never changes (the object-store index's start) once.
    h.engine.replay_policy(&candidate, 1).await.unwrap();

    let before = cost_so_far(&h);
    let report = h.engine.replay_policy(&candidate, 10).await.unwrap();
    let cost = cost_since(&h, before);
    let before = cost_so_far(&h);
    let every = every_dataset(catalog.as_ref(), 10).await.unwrap();
    let default_cost = cost_since(&h, before);
    let replayed: Vec<&str> = every
        .records
        .iter()
        .map(|r| r.operation_id.as_str())
        .collect();
    let expected: Vec<String> = (datasets - 5..datasets)
        .flat_map(|i| [format!("op-{i}"), format!("op-{i}")])
        .collect();
    assert_eq!(replayed, expected, "the default's newest 10");
    if let Some(name) = own_database {
        mend_tests::harness::drop_database(&name).await;
    }
    (report, cost, default_cost)
}

/// A swap's replay reads the newest records of the whole catalog from an index: at 1,000
/// datasets it makes the same requests (object storage) or statements (Postgres) as at 10,
/// and replays the same 5 decisions; the trait's default, which reads every dataset's trail,
/// makes a hundred times as many (so the count can tell).
async fn replay_costs_the_same_at_10_and_1000_datasets(backend: Backend) {
    let (small_report, small, small_default) = replay_at(backend, 10).await;
    let (large_report, large, large_default) = replay_at(backend, 1_000).await;
    for report in [&small_report, &large_report] {
        assert_eq!(
            (report.replayed, report.unchanged, report.not_replayable),
            (5, 5, 0),
            "{report:?}"
        );
        assert!(report.unreadable.is_empty(), "{report:?}");
    }
    // The same requests and statements (the round trips may differ by a statement prepared on
    // a connection that had not run it yet).
    assert_eq!(
        large.requests, small.requests,
        "{small:?} at 10, {large:?} at 1,000"
    );
    assert_eq!(large.statements, small.statements);
    match backend {
        Backend::Postgres => assert_eq!((large.statements, large.requests.total()), (1, 0)),
        // A store that does not list in order lists the whole index: one request either way,
        // an entry per append.
        Backend::LocalDirectory => {
            assert_eq!((large.requests.lists, large.requests.gets), (1, 10));
            assert_eq!((small.entries_listed, large.entries_listed), (20, 2_000));
        }
        _ => {
            assert_eq!((large.requests.lists, large.requests.gets), (1, 10));
            assert_eq!((small.entries_listed, large.entries_listed), (11, 11));
        }
    }
    let default_total = |cost: &ReplayCost| cost.requests.total() + cost.statements;
    assert!(
        default_total(&large_default) >= 50 * default_total(&small_default),
        "the default reads every dataset: {small_default:?} at 10, {large_default:?} at 1,000"
    );
    println!(
        "replay cost [{backend}]: newest 10 records (5 decisions) at 10 and at 1,000 datasets: {} requests ({}) and {} statements both times, {} and {} index entries listed, {} and {} round trips; every dataset's trail instead: {} and {} requests, {} and {} statements",
        large.requests.total(),
        large.requests,
        large.statements,
        small.entries_listed,
        large.entries_listed,
        small.round_trips,
        large.round_trips,
        small_default.requests.total(),
        large_default.requests.total(),
        small_default.statements,
        large_default.statements,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_costs_the_same_at_10_and_1000_datasets_on_memory() {
    replay_costs_the_same_at_10_and_1000_datasets(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_costs_the_same_at_10_and_1000_datasets_on_a_local_directory() {
    replay_costs_the_same_at_10_and_1000_datasets(Backend::LocalDirectory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_costs_the_same_at_10_and_1000_datasets_on_postgres() {
    replay_costs_the_same_at_10_and_1000_datasets(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_no_records_or_too_many_is_refused() {
    let h = Harness::new(Backend::Memory).await;
    let candidate = rebadged("bounds");
    for records in [0, 100_001] {
        let refused = h
            .engine
            .replay_policy(&candidate, records)
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, MendError::InvalidArgument { message } if message.contains("records")),
            "{records}: {refused:?}"
        );
    }
    assert_eq!(
        h.engine
            .replay_policy(&candidate, 100_000)
            .await
            .unwrap()
            .replayed,
        0
    );
}

/// Simulator seed 188: a deployment swap sent to a process that had not yet followed the
/// registry's newest record compared the candidate with that process's own policy, not the
/// registry's. A swap to the policy the registry already made active was recorded a second
/// time, and answered "swapped" where another process answered "already the active policy".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_to_the_registrys_active_policy_is_refused_by_a_process_that_has_not_followed_it() {
    let h = Harness::new(Backend::Memory).await;
    let (store, prefix) = h.engine.objects().store();
    let registry = PolicyRegistry::new(store.clone(), prefix.clone());
    // A second process of the deployment: its own engine, and its own active policy.
    let behind = Engine::new(
        h.engine.catalog().clone(),
        h.engine.objects().clone(),
        PolicyRuntime::default_policy().unwrap(),
        EngineOptions::default(),
    )
    .unwrap();
    let cautious = PolicyRuntime::load(CAUTIOUS_POLICY_WASM, PolicyLimits::default()).unwrap();
    let swap_to_cautious = |engine: &Engine, key: &'static str| {
        let (engine, registry, cautious) = (engine.clone(), registry.clone(), cautious.clone());
        async move {
            let no_scenarios: Vec<Suite> = Vec::new();
            engine
                .swap_deployment_policy(
                    &registry,
                    CAUTIOUS_POLICY_WASM,
                    cautious,
                    10,
                    &no_scenarios,
                )
                .idempotency_key(key)
                .await
        }
    };
    let swapped = swap_to_cautious(&h.engine, "first").await.unwrap();
    assert_eq!(swapped.record.digest, cautious.digest());
    assert_ne!(
        behind.policy().digest(),
        cautious.digest(),
        "not followed yet"
    );

    let refused = swap_to_cautious(&behind, "second").await.unwrap_err();
    assert!(
        matches!(&refused, MendError::FailedPrecondition { message, .. }
            if message.contains("already the active policy")),
        "{refused:?}"
    );
    let records = registry.records().await.unwrap();
    assert_eq!(
        records
            .iter()
            .map(|record| (record.version, record.change.as_str()))
            .collect::<Vec<_>>(),
        [(0, "initial"), (1, "swap")],
        "the refused swap wrote no record"
    );
    // Following the registry brings the process to the active policy; following again
    // changes nothing.
    let followed = behind
        .follow_policy_registry(&registry, &LoadOptions::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(followed.to_digest, cautious.digest());
    assert_eq!(behind.policy().digest(), cautious.digest());
    assert_eq!(
        behind
            .follow_policy_registry(&registry, &LoadOptions::default())
            .await
            .unwrap(),
        None
    );
    println!("policy_swap[seed 188]: 2 swaps, 1 refused, 2 records, 2 follows checked");
}

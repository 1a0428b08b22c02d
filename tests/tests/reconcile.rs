//! Reconcile on every backend: orphans past the grace period are adopted or discarded as the
//! policy says; younger ones are left alone; racing reconcilers never overwrite a row and never
//! both adopt one split; a hostile policy's unsafe adoptions are refused and audited.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use mend::model::SplitState;
use mend::runtime::{PolicyLimits, PolicyRuntime};
use mend_tests::rendezvous::{Meeting, MeetingPoint, RendezvousStore};
use mend_tests::{Backend, Harness};

const HOUR_MS: i64 = 60 * 60 * 1000;
const HOSTILE_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_HOSTILE_WASM"));

async fn uid(h: &Harness, dataset_id: &str) -> String {
    h.engine.dataset(dataset_id).await.unwrap().uid
}

async fn adopts_discards_and_leaves_young_objects_alone(backend: Backend) {
    let h = Harness::new(backend).await;
    let dataset_id = h.create_dataset("reconcile").await;
    let uid = uid(&h, &dataset_id).await;
    h.plant_orphan(&dataset_id, "whole", &uid, false).await;
    h.plant_orphan(&dataset_id, "damaged", &uid, true).await;
    h.plant_orphan(&dataset_id, "earlier", "an-earlier-uid", false)
        .await;

    // Inside the grace period: nothing is touched, nothing written.
    h.set_clock_past_wall_clock(-HOUR_MS / 2);
    let before = h.write_fingerprint(&dataset_id).await;
    let young = h.engine.reconcile(&dataset_id, "r").await.unwrap();
    assert_eq!(young.too_young.len(), 3, "{young:?}");
    assert!(young.operation_id.is_none() && young.adopted.is_empty());
    assert_eq!(h.write_fingerprint(&dataset_id).await, before, "{backend}");
    assert!(h.rows(&dataset_id).await.is_empty());

    h.set_clock_past_wall_clock(2 * HOUR_MS);
    let report = h.engine.reconcile(&dataset_id, "r").await.unwrap();
    assert_eq!(report.adopted, vec!["whole".to_string()], "{report:?}");
    let discarded: Vec<&str> = report.discarded.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(discarded, ["damaged", "earlier"], "{report:?}");
    let found = h.rows(&dataset_id).await;
    let state = |id: &str| found.iter().find(|r| r.split_id == id).map(|r| r.state);
    assert_eq!(state("whole"), Some(SplitState::Published));
    assert_eq!(state("damaged"), Some(SplitState::MarkedForDeletion));
    assert_eq!(state("earlier"), Some(SplitState::MarkedForDeletion));
    let whole = found.iter().find(|r| r.split_id == "whole").unwrap();
    assert_eq!(
        whole.metadata["num_docs"], 7,
        "the row is rebuilt from the object's embedded metadata"
    );
    assert!(
        h.engine
            .catalog()
            .list_intents(&dataset_id)
            .await
            .unwrap()
            .is_empty()
    );
    let audit = h
        .engine
        .catalog()
        .list_audit(&dataset_id, None)
        .await
        .unwrap();
    assert_eq!(
        audit.iter().filter(|r| r.mode == "reconcile").count(),
        3,
        "one audit record per decision: {audit:?}"
    );

    // Again: nothing is an orphan any more, and nothing is written.
    let before = h.write_fingerprint(&dataset_id).await;
    let again = h.engine.reconcile(&dataset_id, "r").await.unwrap();
    assert!(again.operation_id.is_none(), "{again:?}");
    assert_eq!(h.write_fingerprint(&dataset_id).await, before);
    println!(
        "reconcile [{backend}]: 3 young objects left alone with 0 writes; 1 adopted, 2 discarded, 3 audited; a second run wrote nothing"
    );
}

/// Two reconcilers over the same bucket, in two processes (each with its own catalog
/// instance and cache, its own gates), many rounds: every orphan is adopted exactly once, by
/// the reconciler whose create-only stage inserted its row.
///
/// Every round is contested: each reconciler's store holds its first read of an orphan
/// object until the other gets to its own, so both have listed the bucket and the rows, and
/// found the same orphans, before either stages a row.
async fn racing_reconcilers_never_both_adopt(backend: Backend) {
    const ROUNDS: usize = 20;
    const ORPHANS: usize = 8;
    let h = Harness::new(backend).await;
    let meeting = Meeting::new(Duration::from_secs(10));
    let store = h.store.clone().expect("every backend has an object store");
    let meeting_store = || {
        Arc::new(RendezvousStore::new(
            store.clone(),
            meeting.clone(),
            MeetingPoint::GetUnder("/splits/"),
        ))
    };
    let (store_a, store_b) = (meeting_store(), meeting_store());
    // Nothing but the catalog's create-only claim keeps them apart.
    let process_a = h.another_process(store_a.clone()).await;
    let process_b = h.another_process(store_b.clone()).await;
    let (mut contested, mut checked, mut taken) = (0, 0, 0);
    for round in 0..ROUNDS {
        let dataset_id = h.create_dataset("race").await;
        let uid = uid(&h, &dataset_id).await;
        for i in 0..ORPHANS {
            h.plant_orphan(&dataset_id, &format!("o-{i}"), &uid, false)
                .await;
        }
        h.set_clock_past_wall_clock(2 * HOUR_MS);
        store_a.arm();
        store_b.arm();
        let (a, b) = tokio::join!(
            process_a.reconcile(&dataset_id, "reconciler-a"),
            process_b.reconcile(&dataset_id, "reconciler-b")
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(
            meeting.missed(),
            0,
            "{backend} round {round}: a reconciler read an orphan without the other: {a:?} {b:?}"
        );
        let adopted_a: BTreeSet<&String> = a.adopted.iter().collect();
        let adopted_b: BTreeSet<&String> = b.adopted.iter().collect();
        assert!(
            adopted_a.is_disjoint(&adopted_b),
            "{backend} round {round}: both adopted {:?}",
            adopted_a.intersection(&adopted_b).collect::<Vec<_>>()
        );
        assert_eq!(adopted_a.len() + adopted_b.len(), ORPHANS, "{a:?} {b:?}");
        for row in h.rows(&dataset_id).await {
            assert_eq!(row.state, SplitState::Published);
            let adopter = if adopted_a.contains(&row.split_id) {
                "reconciler-a"
            } else {
                "reconciler-b"
            };
            assert_eq!(
                row.node, adopter,
                "{backend} round {round}: {} was adopted by one reconciler but its row was written by the other",
                row.split_id
            );
            checked += 1;
        }
        // Both found every orphan, so every one the other adopted is one this one lost.
        for (report, other) in [(&a, &adopted_b), (&b, &adopted_a)] {
            let lost: BTreeSet<&String> = report.taken_by_others.iter().collect();
            assert_eq!(
                &lost, other,
                "{backend} round {round}: what one reconciler lost is not what the other adopted: {a:?} {b:?}"
            );
        }
        let round_taken = a.taken_by_others.len() + b.taken_by_others.len();
        assert_eq!(
            round_taken, ORPHANS,
            "{backend} round {round}: every orphan was claimed by both, and lost by one"
        );
        taken += round_taken;
        contested += 1;
    }
    assert_eq!(meeting.met(), 2 * ROUNDS as u64);
    println!(
        "racing reconcilers [{backend}]: {ROUNDS} rounds x {ORPHANS} orphans, each reconciler with its own catalog instance: {contested} rounds contested (asserted: all), {taken} claims lost to the other reconciler; {checked} rows each adopted exactly once by the reconciler that inserted it"
    );
}

/// The hostile policy adopts everything; the host refuses the damaged and foreign objects,
/// audits the refusals and adopts only the whole one.
async fn unsafe_adoptions_are_refused(backend: Backend) {
    let hostile = PolicyRuntime::load(HOSTILE_WASM, PolicyLimits::default()).expect("loads");
    let h = Harness::with_policy(backend, hostile).await;
    let dataset_id = h.create_dataset("hostile-reconcile").await;
    let uid = uid(&h, &dataset_id).await;
    h.plant_orphan(&dataset_id, "whole", &uid, false).await;
    h.plant_orphan(&dataset_id, "damaged", &uid, true).await;
    h.plant_orphan(&dataset_id, "earlier", "an-earlier-uid", false)
        .await;
    h.set_clock_past_wall_clock(2 * HOUR_MS);
    let report = h.engine.reconcile(&dataset_id, "r").await.unwrap();
    let refused: Vec<&str> = report.refused.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(refused, ["damaged", "earlier"], "{report:?}");
    assert_eq!(report.adopted, ["whole"]);
    let found = h.rows(&dataset_id).await;
    assert_eq!(
        found.len(),
        1,
        "nothing executed for a refused decision: {found:?}"
    );
    let audit = h
        .engine
        .catalog()
        .list_audit(&dataset_id, None)
        .await
        .unwrap();
    let audited_refusals = audit
        .iter()
        .filter(|r| {
            r.outcome
                .as_str()
                .is_some_and(|o| o.contains("invariant 1") || o.contains("earlier dataset"))
        })
        .count();
    assert_eq!(audited_refusals, 2, "{audit:?}");
    println!("hostile reconcile [{backend}]: 2 unsafe adoptions refused and audited, 0 executed");
}

macro_rules! on_every_backend {
    ($($check:ident),*) => {
        mod memory { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $check() { super::$check(mend_tests::Backend::Memory).await } )* }
        mod local_directory { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $check() { super::$check(mend_tests::Backend::LocalDirectory).await } )* }
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $check() { super::$check(mend_tests::Backend::Postgres).await } )* }
        mod s3 { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $check() { super::$check(mend_tests::Backend::S3).await } )* }
    };
}

on_every_backend!(
    adopts_discards_and_leaves_young_objects_alone,
    racing_reconcilers_never_both_adopt,
    unsafe_adoptions_are_refused
);

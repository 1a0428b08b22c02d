//! The gates' conformance suite: plain async functions, each one behaviour every
//! implementation must have, run against each of them by [`run_all`]; plus the tests of what
//! only one implementation does, in the submodules.
//!
//! A case gets two [`Processes`]: two instances that must exclude each other as separate
//! processes would (two pools, two store clients; for in-process gates, which exclude the tasks of
//! one process only, two clones, which share their gates).
//! Every case works on fresh dataset ids, so cases never meet, even on a shared database.

mod in_process;
mod object_store;
#[cfg(feature = "postgres")]
mod postgres;
mod renewal;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::{ExclusivePermit, GateName, GateSession, GateSet, Gates};
use crate::error::MendError;

/// Long enough never to run out in a passing test.
const PATIENT: Duration = Duration::from_secs(20);
/// What "at once" means for calls that must not wait.
const AT_ONCE: Duration = Duration::from_secs(1);

/// Two instances of one implementation that must exclude each other.
#[derive(Debug, Clone)]
pub(super) struct Processes {
    pub label: &'static str,
    pub first: Arc<dyn Gates>,
    pub second: Arc<dyn Gates>,
}

type Case = for<'a> fn(&'a Processes) -> BoxFuture<'a, ()>;

/// Every case of the suite, by name.
fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("reacquiring_a_held_gate_fails_at_once", |p| {
            Box::pin(reacquiring_a_held_gate_fails_at_once(p))
        }),
        ("acquiring_out_of_order_fails_at_once", |p| {
            Box::pin(acquiring_out_of_order_fails_at_once(p))
        }),
        ("a_set_is_taken_in_lock_order_without_duplicates", |p| {
            Box::pin(a_set_is_taken_in_lock_order_without_duplicates(p))
        }),
        ("different_gates_do_not_exclude_each_other", |p| {
            Box::pin(different_gates_do_not_exclude_each_other(p))
        }),
        ("overlapping_gates_exclude_each_other", |p| {
            Box::pin(overlapping_gates_exclude_each_other(p))
        }),
        ("a_timed_out_acquisition_holds_nothing", |p| {
            Box::pin(a_timed_out_acquisition_holds_nothing(p))
        }),
        ("a_zero_timeout_is_a_try", |p| {
            Box::pin(a_zero_timeout_is_a_try(p))
        }),
        ("dropping_or_releasing_a_guard_frees_the_gate", |p| {
            Box::pin(dropping_or_releasing_a_guard_frees_the_gate(p))
        }),
        ("a_waiter_gets_the_gate_when_it_is_released", |p| {
            Box::pin(a_waiter_gets_the_gate_when_it_is_released(p))
        }),
        ("a_cancelled_acquisition_holds_nothing", |p| {
            Box::pin(a_cancelled_acquisition_holds_nothing(p))
        }),
        ("fencing_epochs_grow_with_every_acquisition", |p| {
            Box::pin(fencing_epochs_grow_with_every_acquisition(p))
        }),
        (
            "the_exclusive_permit_holds_the_config_and_dataset_gates",
            |p| Box::pin(the_exclusive_permit_holds_the_config_and_dataset_gates(p)),
        ),
        ("names_without_a_dataset_or_key_are_refused", |p| {
            Box::pin(names_without_a_dataset_or_key_are_refused(p))
        }),
    ]
}

/// Runs every case against `processes` and panics listing the ones that failed.
pub(super) async fn run_all(processes: Processes) {
    let label = processes.label;
    let mut failed = Vec::new();
    let cases = cases();
    for (name, case) in &cases {
        match AssertUnwindSafe(case(&processes)).catch_unwind().await {
            Ok(()) => println!("gates[{label}] {name} ... ok"),
            Err(_) => {
                println!("gates[{label}] {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    println!(
        "gates[{label}]: {} passed, {} failed",
        cases.len() - failed.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "gates[{label}] failed: {failed:?}");
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn new_dataset() -> String {
    format!("dataset-{}", uuid::Uuid::new_v4())
}

/// Awaits `future`, failing the test if it takes longer than [`AT_ONCE`].
async fn at_once<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(AT_ONCE, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not return within {AT_ONCE:?}"))
}

fn assert_refused(error: &MendError, gate: &GateName, words: &str) {
    match error {
        MendError::FailedPrecondition { message, ids, .. } => {
            assert!(message.contains(words), "{message}");
            assert!(message.contains(&gate.to_string()), "{message}");
            assert_eq!(ids, &[gate.to_string()]);
        }
        other => panic!("expected FailedPrecondition naming the {gate}, got {other:?}"),
    }
    assert!(error.certainly_not_applied() && !error.is_retryable());
}

/// A hold found lost: `Conflict` naming the gate, with `words` saying how.
fn assert_lost(error: &MendError, gate: &GateName, words: &str) {
    match error {
        MendError::Conflict { message } => {
            assert!(message.contains(words), "{message}");
            assert!(message.contains(&gate.to_string()), "{message}");
            assert!(message.contains("no longer held"), "{message}");
        }
        other => panic!("expected Conflict saying the {gate} was lost, got {other:?}"),
    }
    assert!(error.certainly_not_applied() && error.is_retryable());
}

fn assert_timed_out(error: &MendError, gate: &GateName) {
    match error {
        MendError::Conflict { message } => {
            assert!(message.contains(&gate.to_string()), "{message}");
        }
        other => panic!("expected Conflict naming the {gate}, got {other:?}"),
    }
    assert!(error.certainly_not_applied() && error.is_retryable());
}

/// Whether `gates` lets a fresh session take `name` without waiting.
async fn is_free(gates: &dyn Gates, name: &GateName) -> bool {
    let session = GateSession::new();
    match at_once(
        "a try",
        gates.acquire_one(&session, name.clone(), Duration::ZERO),
    )
    .await
    {
        Ok(guard) => {
            guard.release().await.expect("release");
            true
        }
        Err(error) => {
            assert_timed_out(&error, name);
            false
        }
    }
}

/// Waits (a while) until `gates` lets a fresh session take `name`: a dropped guard releases
/// in the background.
async fn becomes_free(gates: &dyn Gates, name: &GateName) -> bool {
    let session = GateSession::new();
    match gates
        .acquire_one(&session, name.clone(), Duration::from_secs(10))
        .await
    {
        Ok(guard) => {
            guard.release().await.expect("release");
            true
        }
        Err(_) => false,
    }
}

fn names(gates: &super::HeldGates) -> Vec<GateName> {
    gates
        .guards()
        .iter()
        .map(|guard| guard.name().clone())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The order of names, which needs no implementation

#[test]
fn names_sort_by_kind_then_dataset_then_key() {
    let ordered = [
        GateName::config("a"),
        GateName::config("z"),
        GateName::dataset("a"),
        GateName::dataset("z"),
        GateName::key("a", "a"),
        GateName::key("a", "z"),
        GateName::key("b", "a"),
        GateName::key("z", "z"),
    ];
    assert!(ordered.is_sorted(), "{ordered:?}");
    // Whatever order the names come in, a set holds them in lock order, once each.
    let shuffled = [7, 3, 0, 5, 1, 6, 2, 4, 3, 0].map(|index| ordered[index].clone());
    let set = GateSet::new(shuffled);
    assert_eq!(set.iter().cloned().collect::<Vec<_>>(), ordered.to_vec());
    assert_eq!(
        GateName::key("logs", "split-1").to_string(),
        "gate \"split-1\" of dataset \"logs\""
    );
}

// ---------------------------------------------------------------------------------------------
// The cases

async fn reacquiring_a_held_gate_fails_at_once(p: &Processes) {
    let dataset = new_dataset();
    let gate = GateName::dataset(&dataset);
    let session = GateSession::new();
    let held = p
        .first
        .acquire_one(&session, gate.clone(), PATIENT)
        .await
        .unwrap();

    let again = at_once(
        "re-acquiring a held gate",
        p.first.acquire_one(&session, gate.clone(), PATIENT),
    )
    .await
    .unwrap_err();
    assert_refused(&again, &gate, "already holds");
    // The bookkeeping is the session's, so another instance refuses it just the same.
    let elsewhere = at_once(
        "re-acquiring through another instance",
        p.second.acquire_one(&session, gate.clone(), PATIENT),
    )
    .await
    .unwrap_err();
    assert_refused(&elsewhere, &gate, "already holds");
    // Inside a set, too; and a refused set takes nothing.
    let key = GateName::key(&dataset, "k");
    let set = GateSet::new([gate.clone(), key.clone()]);
    let in_a_set = at_once(
        "re-acquiring within a set",
        p.first.acquire(&session, &set, PATIENT),
    )
    .await
    .unwrap_err();
    assert_refused(&in_a_set, &gate, "already holds");
    assert_eq!(session.held(), vec![gate.clone()]);

    // The session goes on as if nothing happened.
    let key_guard = p
        .first
        .acquire_one(&session, key.clone(), PATIENT)
        .await
        .unwrap();
    assert_eq!(session.held(), vec![gate.clone(), key.clone()]);
    drop(key_guard);
    held.release().await.unwrap();
    assert!(session.held().is_empty());
}

async fn acquiring_out_of_order_fails_at_once(p: &Processes) {
    let dataset = new_dataset();
    let session = GateSession::new();
    let held = p
        .first
        .acquire_one(&session, GateName::key(&dataset, "m"), PATIENT)
        .await
        .unwrap();
    for earlier in [
        GateName::config(&dataset),
        GateName::dataset(&dataset),
        GateName::key(&dataset, "a"),
        // Kind comes first: any config or dataset gate sorts before any keyed gate.
        GateName::config("zzz-other-dataset"),
        GateName::dataset("zzz-other-dataset"),
    ] {
        let error = at_once(
            "acquiring out of order",
            p.first.acquire_one(&session, earlier.clone(), PATIENT),
        )
        .await
        .unwrap_err();
        assert_refused(&error, &earlier, "lock order");
    }
    // A set whose first gate sorts before a held one is refused as a whole.
    let mixed = GateSet::new([GateName::key(&dataset, "a"), GateName::key(&dataset, "z")]);
    let error = at_once("a mixed set", p.second.acquire(&session, &mixed, PATIENT))
        .await
        .unwrap_err();
    assert_refused(&error, &GateName::key(&dataset, "a"), "lock order");
    assert_eq!(session.held(), vec![GateName::key(&dataset, "m")]);

    // Later gates are fine.
    let later = p
        .second
        .acquire_one(&session, GateName::key(&dataset, "z"), PATIENT)
        .await
        .unwrap();
    // Released in any order; what is left decides what may come next.
    drop(held);
    let after = p.first.acquire_one(
        &session,
        GateName::key(&dataset, "n"),
        Duration::from_secs(10),
    );
    let error = at_once("after a partial release", after).await.unwrap_err();
    assert_refused(&error, &GateName::key(&dataset, "n"), "lock order");
    later.release().await.unwrap();
    assert!(session.held().is_empty());
}

async fn a_set_is_taken_in_lock_order_without_duplicates(p: &Processes) {
    let dataset = new_dataset();
    let ordered = vec![
        GateName::config(&dataset),
        GateName::dataset(&dataset),
        GateName::key(&dataset, "a"),
        GateName::key(&dataset, "b"),
    ];
    let set: GateSet = [
        GateName::key(&dataset, "b"),
        GateName::dataset(&dataset),
        GateName::key(&dataset, "a"),
        GateName::config(&dataset),
        GateName::dataset(&dataset),
    ]
    .into_iter()
    .collect();
    assert_eq!(set.len(), 4);

    let session = GateSession::new();
    let held = p.first.acquire(&session, &set, PATIENT).await.unwrap();
    assert_eq!(names(&held), ordered);
    assert_eq!(session.held(), ordered);
    let key_a = GateName::key(&dataset, "a");
    assert_eq!(held.guard(&key_a).map(|guard| guard.name()), Some(&key_a));
    assert!(held.guard(&GateName::key(&dataset, "c")).is_none());
    for name in &ordered {
        assert!(!is_free(p.second.as_ref(), name).await, "{name} is free");
    }

    held.release().await.unwrap();
    assert!(session.held().is_empty());
    for name in &ordered {
        assert!(is_free(p.second.as_ref(), name).await, "{name} is held");
    }
}

async fn different_gates_do_not_exclude_each_other(p: &Processes) {
    let (one, two) = (new_dataset(), new_dataset());
    let pairs = [
        (GateName::dataset(&one), GateName::dataset(&two)),
        (GateName::config(&one), GateName::dataset(&one)),
        (GateName::key(&one, "a"), GateName::key(&one, "b")),
        (GateName::key(&one, "a"), GateName::key(&two, "a")),
    ];
    for (left, right) in pairs {
        let (s1, s2) = (GateSession::new(), GateSession::new());
        let held = p
            .first
            .acquire_one(&s1, left.clone(), PATIENT)
            .await
            .unwrap();
        let other = at_once(
            "taking an unrelated gate",
            p.second.acquire_one(&s2, right.clone(), Duration::ZERO),
        )
        .await
        .unwrap_or_else(|error| panic!("{right} is excluded by {left}: {error}"));
        other.release().await.unwrap();
        held.release().await.unwrap();
    }
}

/// Tasks on both instances take sets that all contain the dataset gate (some with the config
/// gate, some with a keyed one), and check that no two are ever inside at once.
async fn overlapping_gates_exclude_each_other(p: &Processes) {
    const TASKS: usize = 8;
    const ROUNDS: usize = 50;
    let dataset = new_dataset();
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    // Updated with a load and a store around a yield: concurrent holders would lose updates.
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let gates = if task % 2 == 0 {
            Arc::clone(&p.first)
        } else {
            Arc::clone(&p.second)
        };
        let set = match task % 3 {
            0 => GateSet::new([GateName::dataset(&dataset)]),
            1 => GateSet::new([GateName::config(&dataset), GateName::dataset(&dataset)]),
            _ => GateSet::new([
                GateName::dataset(&dataset),
                GateName::key(&dataset, format!("key-{task}")),
            ]),
        };
        let (inside, overlaps, counter) = (
            Arc::clone(&inside),
            Arc::clone(&overlaps),
            Arc::clone(&counter),
        );
        tasks.push(tokio::spawn(async move {
            let session = GateSession::with_id(format!("task-{task}"));
            for round in 0..ROUNDS {
                let held = gates.acquire(&session, &set, PATIENT).await.unwrap();
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                if round % 2 == 0 {
                    held.release().await.unwrap();
                } else {
                    drop(held);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let (count, overlaps) = (
        counter.load(Ordering::SeqCst),
        overlaps.load(Ordering::SeqCst),
    );
    println!(
        "gates[{}] exclusion: {TASKS} tasks x {ROUNDS} rounds on two instances: counter {count} \
         of {}, {overlaps} overlaps, {:?}",
        p.label,
        TASKS * ROUNDS,
        started.elapsed()
    );
    assert_eq!(overlaps, 0);
    assert_eq!(count, (TASKS * ROUNDS) as u64);
}

async fn a_timed_out_acquisition_holds_nothing(p: &Processes) {
    let dataset = new_dataset();
    let blocked = GateName::key(&dataset, "b");
    let holder = GateSession::new();
    let held = p
        .first
        .acquire_one(&holder, blocked.clone(), PATIENT)
        .await
        .unwrap();

    let session = GateSession::new();
    let set = GateSet::new([
        GateName::config(&dataset),
        GateName::dataset(&dataset),
        blocked.clone(),
    ]);
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let error = p.second.acquire(&session, &set, timeout).await.unwrap_err();
    let waited = started.elapsed();
    assert_timed_out(&error, &blocked);
    assert!(
        waited >= timeout.mul_f64(0.9) && waited < timeout + Duration::from_secs(3),
        "waited {waited:?} with a timeout of {timeout:?}"
    );
    println!(
        "gates[{}] a {timeout:?} timeout returned after {waited:?}",
        p.label
    );
    // The gates taken before the blocked one were released before the error came back.
    assert!(session.held().is_empty());
    assert!(is_free(p.first.as_ref(), &GateName::config(&dataset)).await);
    assert!(is_free(p.first.as_ref(), &GateName::dataset(&dataset)).await);
    held.release().await.unwrap();
}

async fn a_zero_timeout_is_a_try(p: &Processes) {
    let gate = GateName::dataset(new_dataset());
    let (s1, s2) = (GateSession::new(), GateSession::new());
    let held = at_once(
        "a try on a free gate",
        p.first.acquire_one(&s1, gate.clone(), Duration::ZERO),
    )
    .await
    .unwrap();
    let error = at_once(
        "a try on a held gate",
        p.second.acquire_one(&s2, gate.clone(), Duration::ZERO),
    )
    .await
    .unwrap_err();
    assert_timed_out(&error, &gate);
    held.release().await.unwrap();
}

async fn dropping_or_releasing_a_guard_frees_the_gate(p: &Processes) {
    let dataset = new_dataset();
    let gate = GateName::dataset(&dataset);
    let session = GateSession::new();

    // Dropped: released in the background, soon.
    let held = p
        .first
        .acquire_one(&session, gate.clone(), PATIENT)
        .await
        .unwrap();
    drop(held);
    assert!(session.held().is_empty());
    assert!(becomes_free(p.second.as_ref(), &gate).await);

    // Released: free the moment `release` returns, for this session and for others.
    let held = p
        .first
        .acquire_one(&session, gate.clone(), PATIENT)
        .await
        .unwrap();
    held.release().await.unwrap();
    assert!(is_free(p.second.as_ref(), &gate).await);
    let again = at_once(
        "re-taking a released gate",
        p.first.acquire_one(&session, gate.clone(), Duration::ZERO),
    )
    .await
    .unwrap();
    drop(again);

    // A whole set, dropped.
    let set = GateSet::new([GateName::config(&dataset), gate.clone()]);
    let held = p.first.acquire(&session, &set, PATIENT).await.unwrap();
    drop(held);
    assert!(session.held().is_empty());
    let other = GateSession::new();
    let taken = p
        .second
        .acquire(&other, &set, Duration::from_secs(10))
        .await
        .unwrap();
    // And one by one.
    let mut guards = taken.into_guards();
    assert_eq!(guards.len(), 2);
    guards.pop().unwrap().release().await.unwrap();
    assert_eq!(other.held(), vec![GateName::config(&dataset)]);
    guards.pop().unwrap().release().await.unwrap();
    assert!(other.held().is_empty());
}

async fn a_waiter_gets_the_gate_when_it_is_released(p: &Processes) {
    let gate = GateName::dataset(new_dataset());
    let holder = GateSession::new();
    let held = p
        .first
        .acquire_one(&holder, gate.clone(), PATIENT)
        .await
        .unwrap();
    let waiter = {
        let gates = Arc::clone(&p.second);
        let gate = gate.clone();
        tokio::spawn(async move {
            let session = GateSession::new();
            let guard = gates.acquire_one(&session, gate, PATIENT).await.unwrap();
            let got_it = Instant::now();
            guard.release().await.unwrap();
            got_it
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "the waiter got a held gate");
    let released = Instant::now();
    held.release().await.unwrap();
    let got_it = waiter.await.unwrap();
    let hand_over = got_it.saturating_duration_since(released);
    println!(
        "gates[{}] hand-over to a waiter took {hand_over:?}",
        p.label
    );
    assert!(hand_over < Duration::from_secs(2), "{hand_over:?}");
}

async fn a_cancelled_acquisition_holds_nothing(p: &Processes) {
    let dataset = new_dataset();
    let holder = GateSession::new();
    let held = p
        .first
        .acquire_one(&holder, GateName::dataset(&dataset), PATIENT)
        .await
        .unwrap();
    // Takes the config gate, then waits for the dataset gate until cancelled.
    let session = GateSession::new();
    let set = GateSet::new([GateName::config(&dataset), GateName::dataset(&dataset)]);
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        p.second.acquire(&session, &set, PATIENT),
    )
    .await;
    assert!(
        cancelled.is_err(),
        "the acquisition finished: {cancelled:?}"
    );
    assert!(session.held().is_empty());
    assert!(becomes_free(p.first.as_ref(), &GateName::config(&dataset)).await);

    held.release().await.unwrap();
    assert!(becomes_free(p.second.as_ref(), &GateName::dataset(&dataset)).await);
}

async fn fencing_epochs_grow_with_every_acquisition(p: &Processes) {
    let gate = GateName::dataset(new_dataset());
    let mut epochs = Vec::new();
    for round in 0..4 {
        let gates = if round % 2 == 0 { &p.first } else { &p.second };
        let session = GateSession::new();
        let held = gates
            .acquire_one(&session, gate.clone(), PATIENT)
            .await
            .unwrap();
        epochs.push(held.fencing_epoch());
        if round % 2 == 0 {
            held.release().await.unwrap();
        } else {
            drop(held);
        }
    }
    println!("gates[{}] fencing epochs of one gate: {epochs:?}", p.label);
    if p.first.has_fencing_epochs() {
        assert!(epochs[0] >= 1, "{epochs:?}");
        assert!(epochs.is_sorted_by(|a, b| a < b), "{epochs:?}");
    } else {
        assert_eq!(epochs, vec![0; 4]);
    }
}

async fn the_exclusive_permit_holds_the_config_and_dataset_gates(p: &Processes) {
    let dataset = new_dataset();
    let before = {
        let session = GateSession::new();
        let held = p
            .first
            .acquire_one(&session, GateName::dataset(&dataset), PATIENT)
            .await
            .unwrap();
        held.fencing_epoch()
    };
    let session = GateSession::new();
    let permit = ExclusivePermit::acquire(p.first.as_ref(), &session, &dataset, PATIENT)
        .await
        .unwrap();
    assert_eq!(permit.dataset_id(), dataset);
    assert_eq!(
        names(permit.gates()),
        vec![GateName::config(&dataset), GateName::dataset(&dataset)]
    );
    if p.first.has_fencing_epochs() {
        assert!(permit.fencing_epoch() > before);
    }

    assert!(!is_free(p.second.as_ref(), &GateName::config(&dataset)).await);
    assert!(!is_free(p.second.as_ref(), &GateName::dataset(&dataset)).await);
    // Keyed gates are fenced, not waited for (see ExclusivePermit).
    assert!(is_free(p.second.as_ref(), &GateName::key(&dataset, "k")).await);
    let rival = GateSession::new();
    let error = ExclusivePermit::acquire(
        p.second.as_ref(),
        &rival,
        &dataset,
        Duration::from_millis(100),
    )
    .await
    .unwrap_err();
    assert_timed_out(&error, &GateName::config(&dataset));
    let elsewhere =
        ExclusivePermit::acquire(p.second.as_ref(), &rival, &new_dataset(), Duration::ZERO)
            .await
            .unwrap();

    permit.release().await.unwrap();
    elsewhere.release().await.unwrap();
    assert!(is_free(p.second.as_ref(), &GateName::config(&dataset)).await);
}

async fn names_without_a_dataset_or_key_are_refused(p: &Processes) {
    let session = GateSession::new();
    for name in [
        GateName::config(""),
        GateName::dataset(""),
        GateName::key("", "k"),
        GateName::key(new_dataset(), ""),
    ] {
        let error = at_once(
            "an invalid name",
            p.first.acquire_one(&session, name.clone(), PATIENT),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(error, MendError::InvalidArgument { .. }),
            "{name:?}: {error:?}"
        );
    }
    assert!(session.held().is_empty());
}

//! The object-store gates, on memory and on a local directory: the conformance suite across
//! two instances sharing a store (two "processes"), and what leases add: expiry under a manual
//! clock, renewal, fencing of a stale holder, the file layout and the cleanup of old epochs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ::object_store::ObjectStore;
use ::object_store::local::LocalFileSystem;
use ::object_store::memory::InMemory;
use ::object_store::path::Path;
use futures::{FutureExt, TryStreamExt};
use tokio::sync::Notify;

use super::{PATIENT, Processes, assert_lost, assert_timed_out, run_all};
use crate::clock::{Clock, ManualClock};
use crate::gates::{DEFAULT_MAX_CLOCK_SKEW, GateName, GateSession, Gates, ObjectStoreGates};
use crate::hooked_store::HookedStore;

const LEASE: Duration = Duration::from_secs(10);
const LEASE_MS: i64 = 10_000;
const SKEW_MS: i64 = 1_000;
const START_MS: i64 = 1_700_000_000_000;

fn gates(store: &Arc<dyn ObjectStore>, clock: &Arc<ManualClock>) -> ObjectStoreGates {
    assert_eq!(
        DEFAULT_MAX_CLOCK_SKEW,
        Duration::from_millis(SKEW_MS as u64)
    );
    let clock: Arc<dyn Clock> = clock.clone();
    // These tests renew by hand, under a manual clock; the background renewal has tests of
    // its own (`renewal.rs`).
    ObjectStoreGates::new(Arc::clone(store), Path::from("root"), LEASE, clock)
        .with_poll_interval(Duration::from_millis(10))
        .with_renewal_interval(None)
}

fn processes(label: &'static str, store: Arc<dyn ObjectStore>) -> Processes {
    // Leases never expire here: the manual clock stands still.
    let clock = Arc::new(ManualClock::new(START_MS));
    Processes {
        label,
        first: Arc::new(gates(&store, &clock)),
        second: Arc::new(gates(&store, &clock)),
    }
}

async fn file_names(store: &Arc<dyn ObjectStore>) -> Vec<String> {
    let mut names: Vec<String> = store
        .list(None)
        .map_ok(|object| object.location.to_string())
        .try_collect()
        .await
        .unwrap();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_in_memory() {
    run_all(processes("object-store memory", Arc::new(InMemory::new()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_a_local_directory() {
    let directory = tempfile::tempdir().unwrap();
    let store = LocalFileSystem::new_with_prefix(directory.path()).unwrap();
    run_all(processes("object-store local", Arc::new(store))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_is_not_renewed_passes_to_a_waiter_with_a_higher_epoch() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let clock = Arc::new(ManualClock::new(START_MS));
    let (first, second) = (gates(&store, &clock), gates(&store, &clock));
    let gate = GateName::dataset("logs");
    assert_eq!(first.current_epoch(&gate).await.unwrap(), 0);

    let mut stale = first
        .acquire_one(&GateSession::with_id("stale"), gate.clone(), PATIENT)
        .await
        .unwrap();
    assert_eq!(stale.fencing_epoch(), 1);
    assert_eq!(stale.expires_at_ms(), Some(START_MS + LEASE_MS));
    assert_eq!(second.current_epoch(&gate).await.unwrap(), 1);

    // The holder stops renewing. A waiter in another process waits as long as the lease
    // lasts, plus the clock-skew allowance...
    let waiter = {
        let (second, gate) = (second.clone(), gate.clone());
        tokio::spawn(async move {
            second
                .acquire_one(&GateSession::with_id("next"), gate, PATIENT)
                .await
        })
    };
    clock.set_ms(START_MS + LEASE_MS + SKEW_MS - 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !waiter.is_finished(),
        "the lease was taken over before it expired"
    );
    // ...and then takes the gate over, with the next epoch.
    clock.advance_ms(1);
    let next = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter takes over an expired lease")
        .unwrap()
        .unwrap();
    assert_eq!(next.fencing_epoch(), 2);
    assert_eq!(first.current_epoch(&gate).await.unwrap(), 2);
    println!(
        "stale holder's epoch {}, current epoch {}",
        stale.fencing_epoch(),
        first.current_epoch(&gate).await.unwrap()
    );
    // The stale holder learns it when it renews, and by its epoch where it publishes.
    assert!(stale.fencing_epoch() < first.current_epoch(&gate).await.unwrap());
    let error = stale.renew().await.unwrap_err();
    assert_lost(&error, &gate, "ran out");

    // Its release, late, does not free the gate its successor holds.
    stale.release().await.unwrap();
    let error = first
        .acquire_one(&GateSession::new(), gate.clone(), Duration::ZERO)
        .await
        .unwrap_err();
    assert_timed_out(&error, &gate);
    next.release().await.unwrap();
    let third = first
        .acquire_one(&GateSession::new(), gate.clone(), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(third.fencing_epoch(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_keep_the_lease() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let clock = Arc::new(ManualClock::new(START_MS));
    let (first, second) = (gates(&store, &clock), gates(&store, &clock));
    let gate = GateName::key("logs", "source-1");
    let mut held = first
        .acquire_one(&GateSession::new(), gate.clone(), PATIENT)
        .await
        .unwrap();

    clock.advance_ms(LEASE_MS * 3 / 4);
    held.renew().await.unwrap();
    let renewed_until = START_MS + LEASE_MS * 3 / 4 + LEASE_MS;
    assert_eq!(held.expires_at_ms(), Some(renewed_until));

    // Past the first expiry (and the allowance) the renewal still holds the gate.
    clock.set_ms(START_MS + LEASE_MS + SKEW_MS);
    let error = second
        .acquire_one(&GateSession::new(), gate.clone(), Duration::ZERO)
        .await
        .unwrap_err();
    assert_timed_out(&error, &gate);
    // Until it runs out in turn.
    clock.set_ms(renewed_until + SKEW_MS);
    let next = second
        .acquire_one(&GateSession::new(), gate.clone(), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!((held.fencing_epoch(), next.fencing_epoch()), (1, 2));
    assert!(held.renew().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_at_or_after_the_expiry_does_not_count() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let clock = Arc::new(ManualClock::new(START_MS));
    let gates = gates(&store, &clock);
    let gate = GateName::config("logs");
    let mut held = gates
        .acquire_one(&GateSession::new(), gate.clone(), PATIENT)
        .await
        .unwrap();
    clock.set_ms(START_MS + LEASE_MS);
    let error = held.renew().await.unwrap_err();
    assert_lost(&error, &gate, "ran out");
    // Lost for good, even if the clock went back.
    clock.set_ms(START_MS);
    assert!(held.renew().await.is_err());
    assert!(
        !file_names(&store)
            .await
            .iter()
            .any(|name| name.contains("renewal")),
        "a late renewal was written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_off_by_more_than_the_allowance_is_caught_at_renewal() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let behind = Arc::new(ManualClock::new(START_MS));
    let ahead = Arc::new(ManualClock::new(START_MS + 5 * SKEW_MS));
    let (slow, fast) = (gates(&store, &behind), gates(&store, &ahead));
    let gate = GateName::dataset("logs");
    let mut held = slow
        .acquire_one(&GateSession::new(), gate.clone(), PATIENT)
        .await
        .unwrap();
    // By the fast clock the lease has run out; by the slow one it has not.
    behind.advance_ms(LEASE_MS - 2 * SKEW_MS);
    ahead.advance_ms(LEASE_MS - 2 * SKEW_MS);
    let next = fast
        .acquire_one(&GateSession::new(), gate.clone(), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(next.fencing_epoch(), 2);
    // The renewal lands before the holder's expiry, but a newer epoch exists: lost.
    let error = held.renew().await.unwrap_err();
    assert_lost(&error, &gate, "taken over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_laid_out_per_gate_and_old_epochs_cleaned_up() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let clock = Arc::new(ManualClock::new(START_MS));
    let (first, second) = (gates(&store, &clock), gates(&store, &clock));
    let gate = GateName::key("logs", "a/b");
    for round in 0..20 {
        let gates = if round % 2 == 0 { &first } else { &second };
        let mut held = gates
            .acquire_one(&GateSession::new(), gate.clone(), PATIENT)
            .await
            .unwrap();
        assert_eq!(held.fencing_epoch(), round + 1);
        if round == 19 {
            clock.advance_ms(1_000);
            held.renew().await.unwrap();
            clock.advance_ms(1_000);
            held.renew().await.unwrap();
        }
        held.release().await.unwrap();
    }
    assert_eq!(first.current_epoch(&gate).await.unwrap(), 20);
    first.wait_for_releases().await;
    second.wait_for_releases().await;
    let dir = "root/datasets/logs/gates/keys/a%2Fb";
    // Each release deletes the epochs before it and its own renewals.
    let expected = vec![
        format!("{dir}/00000000000000000020.json"),
        format!("{dir}/00000000000000000020.released.json"),
    ];
    assert_eq!(file_names(&store).await, expected);

    // A guard dropped without `release` is released, and cleaned up, in the background.
    let dropped = second
        .acquire_one(&GateSession::new(), gate.clone(), PATIENT)
        .await
        .unwrap();
    assert_eq!(dropped.fencing_epoch(), 21);
    drop(dropped);
    second.wait_for_releases().await;
    let expected = vec![
        format!("{dir}/00000000000000000021.json"),
        format!("{dir}/00000000000000000021.released.json"),
    ];
    assert_eq!(file_names(&store).await, expected);

    let config = first
        .acquire_one(&GateSession::new(), GateName::config("logs"), PATIENT)
        .await
        .unwrap();
    let dataset = second
        .acquire_one(&GateSession::new(), GateName::dataset("logs"), PATIENT)
        .await
        .unwrap();
    let names = file_names(&store).await;
    assert!(names.contains(&"root/datasets/logs/gates/config/00000000000000000001.json".into()));
    assert!(names.contains(&"root/datasets/logs/gates/dataset/00000000000000000001.json".into()));
    drop((config, dataset));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_lands_after_its_epoch_was_cleaned_up_holds_nothing() {
    let hooked = Arc::new(HookedStore::default());
    let pausing = pause_first_put(&hooked, "00000000000000000002.json");
    let store: Arc<dyn ObjectStore> = hooked;
    let clock = Arc::new(ManualClock::new(START_MS));
    let (slow, fast) = (gates(&store, &clock), gates(&store, &clock));
    let gate = GateName::dataset("logs");
    let first = fast
        .acquire_one(&GateSession::new(), gate.clone(), PATIENT)
        .await
        .unwrap();
    first.release().await.unwrap();

    // The slow contender sees epoch 1 released and writes epoch 2, which the store holds back.
    let contender = {
        let gate = gate.clone();
        tokio::spawn(async move {
            slow.acquire_one(&GateSession::with_id("slow"), gate, PATIENT)
                .await
        })
    };
    pausing.paused.notified().await;
    // Meanwhile the gate moves on to epoch 5, held, and epoch 2's files are cleaned up.
    for _ in 0..3 {
        let guard = fast
            .acquire_one(&GateSession::new(), gate.clone(), PATIENT)
            .await
            .unwrap();
        guard.release().await.unwrap();
    }
    let holder = fast
        .acquire_one(&GateSession::new(), gate.clone(), PATIENT)
        .await
        .unwrap();
    assert_eq!(holder.fencing_epoch(), 5);
    assert!(
        !file_names(&store)
            .await
            .iter()
            .any(|name| name.contains("00000000000000000002")),
        "epoch 2 was not cleaned up"
    );

    // The held-back put now re-creates epoch 2's lease: that must not take the gate.
    pausing.resume.notify_one();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !contender.is_finished(),
        "the slow contender took the gate while epoch 5 holds it: {:?}",
        contender.await
    );
    assert_eq!(fast.current_epoch(&gate).await.unwrap(), 5);
    holder.release().await.unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(5), contender)
        .await
        .expect("the contender gets the gate once it is released")
        .unwrap()
        .unwrap();
    assert_eq!(taken.fencing_epoch(), 6);
}

/// Holds back the first put to a path ending in `suffix` until `resume`: a contender whose look
/// at a gate grows old before its claim lands. `paused` is notified when the put is held.
struct Pause {
    armed: AtomicBool,
    paused: Notify,
    resume: Notify,
}

fn pause_first_put(store: &HookedStore, suffix: &'static str) -> Arc<Pause> {
    let pause = Arc::new(Pause {
        armed: AtomicBool::new(true),
        paused: Notify::new(),
        resume: Notify::new(),
    });
    store.set_before_put({
        let pause = Arc::clone(&pause);
        move |path| {
            let held = path.as_ref().ends_with(suffix) && pause.armed.swap(false, Ordering::SeqCst);
            let pause = Arc::clone(&pause);
            async move {
                if held {
                    pause.paused.notify_one();
                    pause.resume.notified().await;
                }
                None
            }
            .boxed()
        }
    });
    pause
}

/// mend-sim (a store request stalled past the gate's lease): a contender listed the gate's
/// files, then its read of the holder's lease stalled; meanwhile the holder renewed. The
/// contender judged the lease by the time its read ended against what its old listing showed,
/// found it expired, and took the gate over from a holder whose renewed lease still ran: two
/// replicas swept at once. A look is judged by the time it began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_that_grew_old_never_takes_over_a_renewed_lease() {
    let hooked = Arc::new(HookedStore::default());
    let store: Arc<dyn ObjectStore> = hooked.clone();
    let clock = Arc::new(ManualClock::new(START_MS));
    let (holder_gates, contender_gates) = (gates(&store, &clock), gates(&store, &clock));
    let gate = GateName::dataset("logs");
    let mut holder = holder_gates
        .acquire_one(&GateSession::with_id("holder"), gate.clone(), PATIENT)
        .await
        .unwrap();

    // The contender's first read of epoch 1's lease is held back.
    let pause = Arc::new(Pause {
        armed: AtomicBool::new(true),
        paused: Notify::new(),
        resume: Notify::new(),
    });
    hooked.set_before_get({
        let pause = Arc::clone(&pause);
        move |path| {
            let held = path.as_ref().ends_with("00000000000000000001.json")
                && pause.armed.swap(false, Ordering::SeqCst);
            let pause = Arc::clone(&pause);
            async move {
                if held {
                    pause.paused.notify_one();
                    pause.resume.notified().await;
                }
            }
            .boxed()
        }
    });
    let contender = {
        let gate = gate.clone();
        tokio::spawn(async move {
            contender_gates
                .acquire_one(&GateSession::with_id("contender"), gate, PATIENT)
                .await
        })
    };
    pause.paused.notified().await;
    // While the contender's read stalls, the holder renews; the clock passes the first lease's
    // end and the allowance, not the renewed one's.
    clock.set_ms(START_MS + LEASE_MS / 2);
    holder.renew().await.unwrap();
    clock.set_ms(START_MS + LEASE_MS + SKEW_MS + 1);
    pause.resume.notify_one();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !contender.is_finished(),
        "the contender took over a renewed lease: {:?}",
        contender.now_or_never()
    );
    holder
        .renew()
        .await
        .expect("the holder still holds the gate");
    assert_eq!(holder.fencing_epoch(), 1);

    // Released, the gate passes to the contender at the next epoch.
    holder.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), contender)
        .await
        .expect("the contender takes the released gate")
        .unwrap()
        .unwrap();
    assert_eq!(next.fencing_epoch(), 2);
    println!(
        "a stalled look: the renewed holder kept epoch 1; the contender got epoch 2 after its release"
    );
}

//! Object-store leases renewed in the background while their guard lives: a lease held across
//! work several times longer than its duration stays held and keeps contenders out; a holder
//! whose renewals cannot land loses it, the gate passes to a contender at a higher epoch, and
//! the stale holder's check refuses its next write. Real time here (leases of 300 ms): the
//! keeper sleeps on the runtime's timer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ::object_store::ObjectStore;
use ::object_store::memory::InMemory;
use ::object_store::path::Path;
use futures::FutureExt;

use super::{PATIENT, assert_lost, assert_timed_out};
use crate::clock::{Clock, ManualClock, SystemClock};
use crate::gates::{ExclusivePermit, GateName, GateSession, Gates, ObjectStoreGates};
use crate::hooked_store::{HookedStore, unanswered};

const LEASE: Duration = Duration::from_millis(300);

fn gates(store: Arc<dyn ObjectStore>, clock: Arc<dyn Clock>) -> ObjectStoreGates {
    ObjectStoreGates::new(store, Path::from("root"), LEASE, clock)
        .with_max_clock_skew(Duration::from_millis(50))
        .with_poll_interval(Duration::from_millis(10))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_held_across_long_work_stays_held() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (ours, theirs) = (
        gates(Arc::clone(&store), Arc::new(SystemClock)),
        gates(Arc::clone(&store), Arc::new(SystemClock)),
    );
    let gate = GateName::dataset("logs");
    let held = ours
        .acquire_one(&GateSession::new(), gate.clone(), PATIENT)
        .await
        .unwrap();
    let first_expiry = held.expires_at_ms().unwrap();
    let mut checks = 0;
    // Work lasting five leases, checking the hold before each "write", as gc does, while
    // another process keeps trying to take the gate.
    for _ in 0..30 {
        tokio::time::sleep(LEASE / 6).await;
        held.check_held().unwrap();
        let error = theirs
            .acquire_one(&GateSession::new(), gate.clone(), Duration::ZERO)
            .await
            .unwrap_err();
        assert_timed_out(&error, &gate);
        checks += 2;
    }
    assert!(
        held.expires_at_ms().unwrap() > first_expiry + 3 * 300,
        "the lease was renewed"
    );
    assert_eq!(theirs.current_epoch(&gate).await.unwrap(), 1);
    checks += 2;
    // Released, it passes on at the next epoch, and no renewal lands after the release.
    held.release().await.unwrap();
    let next = theirs
        .acquire_one(&GateSession::new(), gate.clone(), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(next.fencing_epoch(), 2);
    checks += 1;
    println!("a lease held across long work: {checks} checks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_renewals_fail_loses_the_gate_to_a_higher_epoch() {
    // Renewal puts fail while `fail` is set, as a store that stopped answering would; the
    // lease's other files (claims, release markers) still land.
    let fail = Arc::new(AtomicBool::new(false));
    let failing = Arc::new(HookedStore::default());
    failing.set_before_put({
        let fail = Arc::clone(&fail);
        move |path| {
            let refused = fail.load(Ordering::SeqCst) && path.as_ref().contains(".renewal-");
            async move { refused.then(unanswered) }.boxed()
        }
    });
    let store: Arc<dyn ObjectStore> = failing;
    let (ours, theirs) = (
        gates(Arc::clone(&store), Arc::new(SystemClock)),
        gates(Arc::clone(&store), Arc::new(SystemClock)),
    );
    let gate = GateName::dataset("logs");
    let permit = ExclusivePermit::acquire(&ours, &GateSession::new(), "logs", PATIENT)
        .await
        .unwrap();
    let holds = permit.holds();
    assert_eq!(permit.fencing_epoch(), 1);
    let mut checks = 0;
    // A while with renewals landing: held.
    tokio::time::sleep(LEASE * 2).await;
    permit.check_held().unwrap();
    holds.check().unwrap();
    checks += 2;

    // From now on no renewal lands: the hold is lost once the lease runs out.
    fail.store(true, Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    while permit.check_held().is_ok() {
        assert!(
            started.elapsed() < LEASE * 3,
            "the hold outlived its lease without renewals"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Both of the permit's leases ran out; which one the check meets first depends on when
    // each one's last renewal landed, so the error names either.
    let error = holds.check().unwrap_err();
    let named = [GateName::config("logs"), GateName::dataset("logs")]
        .into_iter()
        .find(|gate| error.to_string().contains(&gate.to_string()))
        .unwrap_or_else(|| panic!("the error names neither gate of the permit: {error}"));
    assert_lost(&error, &named, "ran out");
    checks += 1;

    // The other process takes the gate at the next epoch.
    let next = theirs
        .acquire_one(&GateSession::new(), gate.clone(), PATIENT)
        .await
        .unwrap();
    assert_eq!(next.fencing_epoch(), 2);
    checks += 1;
    // Renewals work again, but a lost hold stays lost: the keeper's next renewal finds the
    // lease run out (or taken over) and says so for good.
    fail.store(false, Ordering::SeqCst);
    tokio::time::sleep(LEASE).await;
    for hold in holds.iter() {
        let error = hold.check().unwrap_err();
        assert!(
            matches!(error, crate::MendError::Conflict { .. }),
            "{error}"
        );
        checks += 1;
    }
    assert_eq!(theirs.current_epoch(&gate).await.unwrap(), 2);
    next.check_held().unwrap();
    checks += 2;
    println!("a holder whose renewals fail: {checks} checks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_finds_a_newer_epoch_marks_the_hold_lost_naming_it() {
    // Clocks further apart than the allowance: by the contender's, the lease ran out; by the
    // holder's it has not, so only the holder's next renewal can tell.
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let behind = Arc::new(ManualClock::new(1_700_000_000_000));
    let ahead = Arc::new(ManualClock::new(1_700_000_000_000 + 1_000));
    let (slow, fast) = (
        gates(Arc::clone(&store), behind.clone()).with_holder("slow"),
        gates(Arc::clone(&store), ahead.clone()).with_holder("fast"),
    );
    let gate = GateName::key("logs", "source-1");
    let held = slow
        .acquire_one(&GateSession::new(), gate.clone(), PATIENT)
        .await
        .unwrap();
    let next = fast
        .acquire_one(&GateSession::with_id("usurper"), gate.clone(), PATIENT)
        .await
        .unwrap();
    assert_eq!(next.fencing_epoch(), 2);
    let mut checks = 1;
    let started = tokio::time::Instant::now();
    while held.check_held().is_ok() {
        assert!(
            started.elapsed() < LEASE * 3,
            "no renewal noticed the newer epoch"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let error = held.check_held().unwrap_err();
    assert_lost(&error, &gate, "taken over: fencing epoch 2 is held by fast");
    assert!(error.to_string().contains("usurper"), "{error}");
    checks += 2;
    println!("a renewal finding a newer epoch: {checks} checks");
}

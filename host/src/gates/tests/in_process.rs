//! The in-process gates: the conformance suite, and that unused gates are forgotten.

use std::sync::Arc;
use std::time::Duration;

use super::{PATIENT, Processes, run_all};
use crate::gates::{GateName, GateSession, GateSet, Gates, InProcessGates};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    // In-process gates exclude the tasks of one process: the two instances are two clones,
    // as two components of a process each holding its own, which share their gates.
    let first = InProcessGates::new();
    let second = first.clone();
    run_all(Processes {
        label: "in-process",
        first: Arc::new(first),
        second: Arc::new(second),
    })
    .await;
}

/// The boundary of what the conformance run above proves: clones share their gates, and
/// instances made apart do not, as two processes' would not.
#[tokio::test]
async fn only_clones_share_gates() {
    let gate = GateName::dataset("logs");
    let first = InProcessGates::new();
    let (clone, apart) = (first.clone(), InProcessGates::new());
    let held = first
        .acquire_one(&GateSession::new(), gate.clone(), PATIENT)
        .await
        .unwrap();
    let try_on = |gates: InProcessGates| {
        let gate = gate.clone();
        async move {
            gates
                .acquire_one(&GateSession::new(), gate, Duration::ZERO)
                .await
        }
    };
    assert!(try_on(clone).await.is_err(), "a clone took a held gate");
    let elsewhere = try_on(apart)
        .await
        .expect("separate instances are separate");
    elsewhere.release().await.unwrap();
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_gates_are_forgotten() {
    let gates = InProcessGates::new();
    let set = GateSet::new([
        GateName::config("logs"),
        GateName::dataset("logs"),
        GateName::key("logs", "a"),
    ]);
    let holder = GateSession::new();
    let held = gates.acquire(&holder, &set, PATIENT).await.unwrap();
    assert_eq!(gates.gates_in_use(), 3);

    // A waiter that times out and one that is cancelled leave nothing behind either.
    let waiter = GateSession::new();
    gates
        .acquire(&waiter, &set, Duration::from_millis(50))
        .await
        .unwrap_err();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(50),
        gates.acquire(&waiter, &set, PATIENT),
    )
    .await;
    assert!(cancelled.is_err());
    assert_eq!(gates.gates_in_use(), 3);

    drop(held);
    assert_eq!(gates.gates_in_use(), 0);
    let again = gates.acquire(&holder, &set, Duration::ZERO).await.unwrap();
    assert_eq!(gates.gates_in_use(), 3);
    again.release().await.unwrap();
    assert_eq!(gates.gates_in_use(), 0);
}

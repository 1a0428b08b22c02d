//! The in-process gates: the conformance suite, and that unused gates are forgotten.

use std::sync::Arc;
use std::time::Duration;

use super::{PATIENT, Processes, run_all};
use crate::gates::{GateName, GateSession, GateSet, Gates, InProcessGates};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    // One process: both "processes" are the same gates.
    let gates = Arc::new(InProcessGates::new());
    run_all(Processes {
        label: "in-process",
        first: gates.clone(),
        second: gates,
    })
    .await;
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

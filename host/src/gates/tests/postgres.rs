//! The Postgres gates against a real server: the conformance suite across two pools (two
//! "processes"), stable lock keys, and connections that go back to the pool holding nothing.
//!
//! Run under `scripts/with-postgres`, which starts a throwaway server and sets
//! `MEND_TEST_DATABASE_URL`; without it these fail, they do not skip.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use super::{PATIENT, Processes, run_all};
use crate::gates::{GateName, GateSession, Gates, PostgresGates};

async fn pool(max_connections: u32) -> PgPool {
    let url = std::env::var("MEND_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "MEND_TEST_DATABASE_URL is not set: run the Postgres tests under \
             scripts/with-postgres, e.g. `scripts/with-postgres cargo test -p mend --features postgres --lib gates`"
        )
    });
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(30))
        .connect(&url)
        .await
        .expect("connect to the test database")
}

/// How many sessions hold the advisory lock of `name` (0 or 1).
async fn holders(observer: &PgPool, name: &GateName) -> i64 {
    // A bigint advisory key shows in pg_locks as its high half (classid) and low half (objid),
    // with objsubid 1.
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 \
         AND granted AND ((classid::bigint << 32) | objid::bigint) = $1",
    )
    .bind(PostgresGates::lock_key(name))
    .fetch_one(observer)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    // Two pools: two processes as far as the server can tell. Eight tasks holding two gates
    // each on one pool need sixteen connections.
    run_all(Processes {
        label: "postgres",
        first: Arc::new(PostgresGates::new(pool(20).await)),
        second: Arc::new(PostgresGates::new(pool(20).await)),
    })
    .await;
}

#[test]
fn lock_keys_are_stable_and_distinct() {
    // Pinned: every process and every version of mend must agree on them.
    assert_eq!(
        PostgresGates::lock_key(&GateName::config("logs")),
        -6237768013749655428
    );
    assert_eq!(
        PostgresGates::lock_key(&GateName::dataset("logs")),
        -7983202681081561883
    );
    assert_eq!(
        PostgresGates::lock_key(&GateName::key("logs", "a")),
        3726480011476128298
    );
    // Kinds, datasets and keys never run into each other (the parts are length-prefixed).
    let keys = [
        GateName::config("logs"),
        GateName::dataset("logs"),
        GateName::key("logs", "a"),
        GateName::key("logs", "b"),
        GateName::key("logsa", "b"),
        GateName::key("logs", "ab"),
        GateName::dataset("logs2"),
    ]
    .map(|name| PostgresGates::lock_key(&name));
    let distinct: std::collections::BTreeSet<i64> = keys.iter().copied().collect();
    assert_eq!(distinct.len(), keys.len(), "{keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_go_back_to_the_pool_holding_nothing() {
    let observer = pool(2).await;
    // One connection: whatever one gate left on it, the next would inherit.
    let gates_pool = pool(1).await;
    let gates = PostgresGates::new(gates_pool.clone());
    let dataset = format!("dataset-{}", uuid::Uuid::new_v4());
    let (first, second) = (GateName::dataset(&dataset), GateName::key(&dataset, "k"));
    let session = GateSession::new();

    let held = gates
        .acquire_one(&session, first.clone(), PATIENT)
        .await
        .unwrap();
    assert_eq!(holders(&observer, &first).await, 1);
    held.release().await.unwrap();
    assert_eq!(holders(&observer, &first).await, 0);

    let held = gates
        .acquire_one(&session, second.clone(), PATIENT)
        .await
        .unwrap();
    assert_eq!(holders(&observer, &second).await, 1);
    assert_eq!(holders(&observer, &first).await, 0);
    drop(held);
    // Dropped guards unlock in the background.
    let mut waited = Duration::ZERO;
    while holders(&observer, &second).await != 0 {
        assert!(
            waited < Duration::from_secs(5),
            "the dropped gate is still held"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += Duration::from_millis(10);
    }

    // A timed-out wait leaves the connection clean too, and without its lock_timeout.
    let other = PostgresGates::new(pool(1).await);
    let held = other
        .acquire_one(&GateSession::new(), first.clone(), PATIENT)
        .await
        .unwrap();
    gates
        .acquire_one(&session, first.clone(), Duration::from_millis(100))
        .await
        .unwrap_err();
    held.release().await.unwrap();
    assert_eq!(holders(&observer, &first).await, 0);
    let lock_timeout: String = sqlx::query_scalar("SHOW lock_timeout")
        .fetch_one(&gates_pool)
        .await
        .unwrap();
    assert_eq!(lock_timeout, "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_pool_is_a_conflict_within_the_gate_timeout() {
    // Three connections, each acquisition allowed 30 s to get one from the pool: the gate
    // timeout, not that, must bound a wait while every connection holds a gate.
    let gates = PostgresGates::new(pool(3).await);
    assert_eq!(gates.max_held(), 3);
    let dataset = format!("pool-{}", uuid::Uuid::new_v4());
    let name = |index: usize| GateName::key(&dataset, format!("k{index}"));
    let mut held = Vec::new();
    for index in 0..3 {
        held.push(
            gates
                .acquire_one(&GateSession::new(), name(index), PATIENT)
                .await
                .unwrap(),
        );
    }
    let mut checks = 1;
    for timeout in [Duration::ZERO, Duration::from_millis(500)] {
        let started = std::time::Instant::now();
        let error = gates
            .acquire_one(&GateSession::new(), name(3), timeout)
            .await
            .unwrap_err();
        let waited = started.elapsed();
        match &error {
            crate::MendError::Conflict { message } => {
                assert!(message.contains("pool is exhausted"), "{message}");
                assert!(message.contains("all 3 connections"), "{message}");
                assert!(message.contains(&name(3).to_string()), "{message}");
            }
            other => panic!("expected Conflict saying the pool is exhausted, got {other:?}"),
        }
        assert!(error.certainly_not_applied() && error.is_retryable());
        assert!(
            waited < timeout + Duration::from_millis(500),
            "waited {waited:?} past a gate timeout of {timeout:?}"
        );
        println!("exhausted pool, gate timeout {timeout:?}: refused after {waited:?}");
        checks += 3;
    }
    // A waiter gets the connection a release frees, within its timeout.
    let waiter = {
        let (gates, name) = (gates.clone(), name(3));
        tokio::spawn(async move {
            gates
                .acquire_one(&GateSession::new(), name, Duration::from_secs(5))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter got a connection nobody freed"
    );
    held.pop().unwrap().release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    checks += 2;
    // And after all are released, the pool serves three again.
    next.release().await.unwrap();
    for guard in held.drain(..) {
        guard.release().await.unwrap();
    }
    for index in 0..3 {
        held.push(
            gates
                .acquire_one(&GateSession::new(), name(index), Duration::ZERO)
                .await
                .unwrap(),
        );
    }
    checks += 1;
    println!("an exhausted pool: {checks} checks");
}

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

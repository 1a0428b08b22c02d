//! A commit's requests on object storage, counted by kind with the sequential round trips
//! among them (`mend_tests::latency_store`): a commit on a catalog that holds the dataset's
//! state writes two log versions, one put-if-absent each with no look first, and puts its
//! objects at once, so that it waits for three round trips however many splits it carries
//! (up to the 16 put at once). The dataset's pending marker (`object_store/pending.rs`) costs
//! one more put and round trip on a writer's first commit, and on every commit of a writer
//! that found the marker there rather than created it; none within 30 s of creating it. `tests/benches/round_trips.rs` times the same against a floor.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mend::catalog::ObjectStoreCatalog;
use mend::catalog::object_store::ObjectStoreCatalogOptions;
use mend::engine::{CommitRequest, CommitSplit};
use mend::model::DatasetConfig;
use mend::objects::SplitObjects;
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions};
use mend_tests::latency_store::LatencyStore;
use object_store::memory::InMemory;
use object_store::path::Path;

fn commit(label: &str, splits: usize) -> CommitRequest {
    CommitRequest {
        dataset_id: "events".into(),
        node: "writer".into(),
        splits: (0..splits)
            .map(|index| CommitSplit {
                split_id: format!("{label}-{index:02}"),
                metadata_json: "{}".into(),
                payload: Bytes::from_static(b"payload"),
            })
            .collect(),
        checkpoint_delta: None,
        publish_token: None,
    }
}

fn engine(store: &Arc<LatencyStore>) -> Engine {
    // No checkpoint falls due during the test: only the commits' own requests are counted.
    let options = ObjectStoreCatalogOptions {
        checkpoint_interval: 1_000_000,
        ..ObjectStoreCatalogOptions::default()
    };
    let catalog = ObjectStoreCatalog::new(store.clone(), Path::default(), options);
    Engine::new(
        Arc::new(catalog),
        SplitObjects::new(store.clone(), Path::default()),
        PolicyRuntime::default_policy().unwrap(),
        EngineOptions::default(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_waits_for_three_round_trips_and_writes_two_log_versions() {
    let store = Arc::new(LatencyStore::new(
        Arc::new(InMemory::new()),
        Duration::from_millis(2),
    ));
    let engine = engine(&store);
    engine
        .create_dataset("events", &DatasetConfig::default())
        .await
        .unwrap();
    // The first commit on the dataset: the writer puts the dataset's pending marker
    // (put-if-absent, before the log version that adds its intent), one more request and one
    // more round trip than the commits after it, which skip the put for 30 s (the marker's
    // reuse window) since this process created the marker.
    store.take();
    engine.commit(&commit("warm", 1)).await.unwrap();
    let first = store.take();
    assert_eq!(
        (first.log_puts, first.object_puts, first.other_puts),
        (2, 1, 1),
        "the first commit: {first}"
    );
    assert_eq!(first.put_if_absent, 4, "{first}");
    assert_eq!(
        (first.requests(), first.sequential),
        (4, 4),
        "the first commit: {first}"
    );
    let mut checks = 3;
    // A writer that has committed before: its catalog holds the dataset's state.
    for splits in [1, 10, 16] {
        store.take();
        engine
            .commit(&commit(&format!("c{splits}"), splits))
            .await
            .unwrap();
        let counts = store.take();
        assert_eq!(counts.log_puts, 2, "{splits} splits: {counts}");
        assert_eq!(
            counts.object_puts, splits as u64,
            "{splits} splits: {counts}"
        );
        assert_eq!(
            counts.put_if_absent,
            2 + splits as u64,
            "{splits} splits: every put is put-if-absent: {counts}"
        );
        assert_eq!(
            counts.requests(),
            2 + splits as u64,
            "{splits} splits: no GET, HEAD, LIST, delete or other put (the pending marker is \
             skipped within its reuse window): {counts}"
        );
        assert_eq!(counts.sequential, 3, "{splits} splits: {counts}");
        checks += 5;
    }
    // 17 splits: the 17th put waits for a slot.
    store.take();
    engine.commit(&commit("c17", 17)).await.unwrap();
    let counts = store.take();
    assert_eq!((counts.requests(), counts.sequential), (19, 4), "{counts}");
    checks += 1;
    println!(
        "round trips: {checks} checks: the first commit on the dataset took 2 log puts, 1 object put and 1 pending-marker put in 4 sequential round trips; then commits of 1, 10 and 16 splits took 2 log puts and one put per object, all put-if-absent, in 3 sequential round trips; 17 splits in 4"
    );
}

/// Two writers on one store, each with a cached state: the second's put of the next version
/// loses to the first's, and it learns of it from the put's failure, reads what won and
/// commits on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_learns_of_a_lost_race_from_its_put() {
    let store = Arc::new(LatencyStore::new(
        Arc::new(InMemory::new()),
        Duration::from_millis(2),
    ));
    let (first, second) = (engine(&store), engine(&store));
    first
        .create_dataset("events", &DatasetConfig::default())
        .await
        .unwrap();
    first.commit(&commit("a", 1)).await.unwrap();
    second.commit(&commit("b", 1)).await.unwrap();
    first.commit(&commit("c", 1)).await.unwrap();
    // `second` holds the state before `c`: its begin's put finds the version taken.
    store.take();
    second.commit(&commit("d", 1)).await.unwrap();
    let counts = store.take();
    // The pending marker (`second` found it there, created by `first`, so it puts it before
    // every commit that adds an intent), the lost put, the read back of the version that won,
    // the read of the version after it (none), the put again, the object, the publish.
    assert_eq!(counts.other_puts, 1, "{counts}");
    assert_eq!(counts.log_puts, 3, "{counts}");
    assert_eq!(counts.object_puts, 1, "{counts}");
    assert_eq!(counts.heads + counts.lists, 0, "{counts}");
    assert!(counts.gets <= 4, "{counts}");
    let rows = first
        .list_splits("events", &Default::default())
        .await
        .unwrap()
        .splits;
    assert_eq!(rows.len(), 4);
    println!("round trips: a writer that lost a race learned of it from its put: {counts}");
}

/// A one-split commit over the operation protocol (begin, upload, publish through the engine,
/// as `mend serve`'s handlers call it), by a writer whose catalog holds the dataset's state:
/// at most five requests one after another and two log versions in all (the begin's and the
/// publish's; the upload's record is an object beside the log), and no step reads a log
/// version twice. `tests/benches/protocol_steps.rs` counts the same on every backend and
/// times each step against its floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_commit_waits_for_five_round_trips_and_writes_two_log_versions() {
    use mend::engine::{BeginOperation, ExternalKind, PlannedSplit};
    let store = Arc::new(LatencyStore::new(
        Arc::new(InMemory::new()),
        Duration::from_millis(2),
    ));
    let engine = engine(&store);
    engine
        .create_dataset("events", &DatasetConfig::default())
        .await
        .unwrap();
    let payload = Bytes::from_static(b"a payload of one split");
    let begin = |operation_id: &str, split_id: &str| BeginOperation {
        dataset_id: "events".into(),
        operation_id: Some(operation_id.into()),
        kind: ExternalKind::Commit,
        node: "writer".into(),
        lease_ms: None,
        splits: vec![PlannedSplit {
            split_id: split_id.into(),
            metadata_json: "{}".into(),
            size: payload.len() as u64,
            sha256: mend::objects::format::sha256(&payload),
        }],
        checkpoint_delta: None,
        replaced_split_ids: Vec::new(),
        publish_token: None,
    };
    let mut steps = Vec::new();
    for (operation_id, split_id) in [("warm", "s-warm"), ("op", "s-op")] {
        store.take();
        engine
            .begin_operation(&begin(operation_id, split_id))
            .await
            .unwrap();
        steps.push(("begin", store.take()));
        let body = futures::stream::iter([Ok(payload.clone())]);
        engine
            .upload_object("events", operation_id, split_id, body)
            .await
            .unwrap();
        steps.push(("upload", store.take()));
        let published = engine
            .publish_operation("events", operation_id)
            .await
            .unwrap();
        assert_eq!(published.phase, mend::engine::OperationPhase::Published);
        steps.push(("publish", store.take()));
    }
    // The second operation's: the first warmed the writer (its pending marker, its cache).
    let counted = &steps[3..];
    for (step, counts) in counted {
        println!("round trips: a protocol commit's {step}: {counts}");
        assert_eq!(
            counts.log_rereads, 0,
            "{step} read a log version twice: {counts}"
        );
    }
    let sequential: u64 = counted.iter().map(|(_, counts)| counts.sequential).sum();
    let log_versions: u64 = counted.iter().map(|(_, counts)| counts.log_puts).sum();
    let requests: u64 = counted.iter().map(|(_, counts)| counts.requests()).sum();
    assert!(sequential <= 5, "{sequential} round trips: {counted:?}");
    assert_eq!(log_versions, 2, "{counted:?}");
    assert_eq!(
        counted[1].1.object_puts, 1,
        "the upload puts its object once"
    );
    println!(
        "round trips: a protocol commit: {requests} requests, {sequential} one after another, {log_versions} log versions"
    );
}

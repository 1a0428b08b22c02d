//! Two object-storage catalog instances (each with its own cache, as two processes would have)
//! commit to one dataset at once, round after round: every commit lands, none is lost. Run on a
//! local directory and on an S3-compatible server.
//!
//! The race is made to happen, not hoped for: each writer's store holds its first commit of
//! every step until the other writer reaches its own (see [`RendezvousStore`]). Both have then
//! read the same log version and put the same next one, so every step has a lost race, and
//! the test asserts that every one of them was retried to a landed commit.

use std::sync::Arc;
use std::time::Duration;

use mend::catalog::ObjectStoreCatalog;
use mend::catalog::object_store::open_store;
use mend::model::{
    DatasetConfig, ListQuery, PublishRequest, SplitState, StageMode, StageRequest, StageSplit,
};
use mend::objects::SplitObjects;
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions};
use mend_tests::harness::s3_url;
use mend_tests::rendezvous::{Meeting, MeetingPoint, RendezvousStore};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;

fn engine_on(store: Arc<dyn ObjectStore>, prefix: Path) -> (Engine, Arc<ObjectStoreCatalog>) {
    let catalog = Arc::new(ObjectStoreCatalog::new(
        store.clone(),
        prefix.clone(),
        Default::default(),
    ));
    let engine = Engine::new(
        catalog.clone(),
        SplitObjects::new(store, prefix),
        PolicyRuntime::default_policy().expect("policy"),
        EngineOptions::default(),
    )
    .expect("engine");
    (engine, catalog)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_on_a_local_directory_lose_no_commit() {
    let directory = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(directory.path()).unwrap());
    two_instances_lose_no_commit("local-directory", store, Path::default(), 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_on_s3_lose_no_commit() {
    let url = format!("{}/{}", s3_url(), uuid::Uuid::new_v4().simple());
    let (store, prefix) = open_store(&url).expect("open the s3 store");
    two_instances_lose_no_commit("s3", store, prefix, 25).await;
}

async fn two_instances_lose_no_commit(
    backend: &str,
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    rounds: usize,
) {
    // Long enough for a slow S3 round trip; a miss fails the test below.
    let meeting = Meeting::new(Duration::from_secs(10));
    let meeting_store = || {
        Arc::new(RendezvousStore::new(
            store.clone(),
            meeting.clone(),
            MeetingPoint::CreateUnder("/catalog/log/"),
        ))
    };
    let (first_store, second_store) = (meeting_store(), meeting_store());
    let (first, first_catalog) = engine_on(first_store.clone(), prefix.clone());
    let (second, second_catalog) = engine_on(second_store.clone(), prefix.clone());
    first
        .create_dataset("shared", &DatasetConfig::default())
        .await
        .unwrap();

    let writer = |engine: Engine, store: Arc<RendezvousStore>, name: &'static str| {
        tokio::spawn(async move {
            for round in 0..rounds {
                let split_id = format!("{name}-{round:03}");
                let stage = StageRequest {
                    dataset_id: "shared".into(),
                    mode: if round % 2 == 0 {
                        StageMode::CreateOnly
                    } else {
                        StageMode::Upsert
                    },
                    node: name.into(),
                    splits: vec![StageSplit {
                        split_id: split_id.clone(),
                        metadata_json: "{}".into(),
                    }],
                };
                store.arm();
                let staged = engine.stage(&stage).await.expect("stage");
                assert_eq!(staged.inserted().count(), 1);
                engine
                    .objects()
                    .put(
                        "shared",
                        &split_id,
                        bytes::Bytes::from_static(b"object").into(),
                    )
                    .await
                    .expect("upload");
                let publish = PublishRequest {
                    dataset_id: "shared".into(),
                    staged_split_ids: vec![split_id],
                    replaced_split_ids: vec![],
                    checkpoint_delta: None,
                    publish_token: None,
                    fencing_epoch: None,
                };
                store.arm();
                engine.publish(&publish).await.expect("publish");
            }
        })
    };
    let (a, b) = tokio::join!(
        writer(first.clone(), first_store, "alpha"),
        writer(second.clone(), second_store, "beta")
    );
    a.unwrap();
    b.unwrap();

    // A third instance with no cache reads the log from the store alone.
    let (reader, _) = engine_on(store, prefix);
    let rows = reader
        .list_splits("shared", &ListQuery::default())
        .await
        .unwrap()
        .splits;
    assert_eq!(rows.len(), 2 * rounds, "a commit was lost");
    assert!(rows.iter().all(|row| row.state == SplitState::Published));
    let dataset = reader.dataset("shared").await.unwrap();
    let at_creation = 1;
    assert_eq!(
        dataset.manifest_version,
        at_creation + 2 * rounds as u64,
        "a publish was lost"
    );
    let races = first_catalog.stats().lost_races + second_catalog.stats().lost_races;
    let steps = 2 * rounds as u64;
    assert_eq!(
        meeting.missed(),
        0,
        "a writer reached its commit without the other: the race was not arranged"
    );
    assert_eq!(
        meeting.met(),
        2 * steps,
        "each writer meets the other once per step"
    );
    // Each meeting has both writers put the same version: one of them loses and retries.
    assert!(
        races >= steps,
        "{races} lost races in {steps} contested steps: a writer did not see the other's commit"
    );
    println!(
        "{backend}: 2 instances x {rounds} rounds of stage + publish, every step contested: {} rows, manifest version {}, {races} lost races (at least {steps} asserted) retried, 0 commits lost",
        rows.len(),
        dataset.manifest_version
    );
}

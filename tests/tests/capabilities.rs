//! Capabilities: a policy that requires what the backend lacks is refused when the engine
//! starts, with a message naming the capability; a request that needs what the backend lacks
//! is refused with nothing written. Nothing falls back to older semantics.

use std::sync::Arc;

use mend::catalog::ObjectStoreCatalog;
use mend::engine::HOST_ONLY_CAPABILITIES;
use mend::model::{
    DatasetConfig, ListQuery, PublishRequest, SplitState, StageMode, StageRequest, StageSplit,
};
use mend::objects::SplitObjects;
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions, MendError};
use mend_contract::capability::PUBLISH_FENCING_EPOCH;
use mend_testkit::WithoutCapability;

#[test]
fn a_policy_requiring_a_missing_capability_is_refused_naming_it() {
    let policy = PolicyRuntime::default_policy().expect("default policy");
    let (mut refused, mut host_only) = (0, 0);
    for lacks in policy.description().required_capabilities.clone() {
        let lacks: &'static str = Box::leak(lacks.into_boxed_str());
        let inner = ObjectStoreCatalog::open_url("memory://").expect("memory catalog");
        let objects = SplitObjects::new(inner.store().clone(), inner.prefix().clone());
        let backend = Arc::new(WithoutCapability { inner, lacks });
        let started = Engine::new(backend, objects, policy.clone(), EngineOptions::default());
        if HOST_ONLY_CAPABILITIES.contains(&lacks) {
            // The host provides it over any backend (`stage.standard-plans`): a backend that
            // does not list it still serves the policy.
            let engine = started.expect("a host-only capability needs nothing of the backend");
            assert!(engine.capabilities().contains(lacks));
            host_only += 1;
            continue;
        }
        let error = started.expect_err("an engine without a required capability must not start");
        match &error {
            MendError::CapabilityMissing { capability, detail } => {
                assert_eq!(capability, lacks);
                assert!(
                    detail.contains("mend-default") && detail.contains(lacks),
                    "{detail}"
                );
            }
            other => panic!("expected CapabilityMissing, got {other:?}"),
        }
        assert!(error.to_string().contains(lacks));
        refused += 1;
    }
    println!(
        "{refused} backends, each lacking one required capability, refused at start; \
         {host_only} lacking a capability the host provides alone, started"
    );
    assert!(refused >= 2);
    assert_eq!(
        host_only, 1,
        "stage.standard-plans is required and the host's alone"
    );
}

/// A publish carrying a fencing epoch on a backend that cannot check one would let a fenced
/// writer through: it is refused, and nothing is written. Publishes without one still work.
#[tokio::test]
async fn a_backend_without_fencing_epochs_refuses_a_publish_that_carries_one() {
    let inner = ObjectStoreCatalog::open_url("memory://").expect("memory catalog");
    let objects = SplitObjects::new(inner.store().clone(), inner.prefix().clone());
    let backend = Arc::new(WithoutCapability {
        inner,
        lacks: PUBLISH_FENCING_EPOCH,
    });
    let policy = PolicyRuntime::default_policy().expect("default policy");
    let engine = Engine::new(backend, objects, policy, EngineOptions::default())
        .expect("the default policy does not require fencing epochs");
    assert!(!engine.capabilities().contains(PUBLISH_FENCING_EPOCH));
    engine
        .create_dataset("ds", &DatasetConfig::default())
        .await
        .expect("create");
    engine
        .stage(&StageRequest {
            dataset_id: "ds".into(),
            mode: StageMode::CreateOnly,
            node: "n".into(),
            splits: vec![StageSplit {
                split_id: "a".into(),
                metadata_json: "{}".into(),
            }],
        })
        .await
        .expect("stage");
    engine
        .objects()
        .put("ds", "a", bytes::Bytes::from_static(b"object").into())
        .await
        .expect("upload");
    let before = engine.dataset("ds").await.expect("show");

    let fenced = PublishRequest {
        dataset_id: "ds".into(),
        staged_split_ids: vec!["a".into()],
        replaced_split_ids: Vec::new(),
        checkpoint_delta: None,
        publish_token: None,
        fencing_epoch: Some(0),
    };
    let error = engine.publish(&fenced).await.unwrap_err();
    match &error {
        MendError::CapabilityMissing { capability, detail } => {
            assert_eq!(capability, PUBLISH_FENCING_EPOCH);
            assert!(detail.contains("fencing epoch"), "{detail}");
        }
        other => panic!("expected CapabilityMissing, got {other:?}"),
    }
    assert_eq!(
        engine.dataset("ds").await.expect("show"),
        before,
        "a refused publish changed the dataset"
    );
    let rows = engine
        .list_splits("ds", &ListQuery::default())
        .await
        .expect("list");
    assert_eq!(rows.splits.len(), 1);
    assert_eq!(rows.splits[0].state, SplitState::Staged);

    let published = engine
        .publish(&PublishRequest {
            fencing_epoch: None,
            ..fenced
        })
        .await
        .expect("a publish without a fencing epoch still works");
    assert_eq!(published.published, ["a"]);
    assert!(published.manifest_version > before.manifest_version);
}

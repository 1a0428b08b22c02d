//! A policy component that returns unsafe decisions (`policies/hostile`): the host refuses each
//! one, audits what it refused, and executes nothing.

use std::sync::Arc;

use bytes::Bytes;
use mend::MendError;
use mend::engine::{CommitRequest, CommitSplit, Outcome};
use mend::faults::CrashAt;
use mend::model::{ListQuery, PublishRequest, StageMode, StageRequest, StageSplit};
use mend::runtime::{PolicyLimits, PolicyRuntime};
use mend_contract::RecoveryMode;
use mend_tests::{Backend, Harness};

const HOSTILE_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_HOSTILE_WASM"));

fn stage(dataset_id: &str, mode: StageMode, ids: &[&str]) -> StageRequest {
    StageRequest {
        dataset_id: dataset_id.into(),
        mode,
        node: "n".into(),
        splits: ids
            .iter()
            .map(|id| StageSplit {
                split_id: (*id).into(),
                metadata_json: "{}".into(),
            })
            .collect(),
    }
}

fn commit(dataset_id: &str, ids: &[&str]) -> CommitRequest {
    CommitRequest {
        dataset_id: dataset_id.into(),
        node: "writer".into(),
        splits: ids
            .iter()
            .map(|id| CommitSplit {
                split_id: (*id).into(),
                metadata_json: "{}".into(),
                payload: Bytes::from_static(b"bytes"),
            })
            .collect(),
        checkpoint_delta: None,
        publish_token: None,
    }
}

async fn check_hostile(backend: Backend) {
    let hostile = PolicyRuntime::load(HOSTILE_WASM, PolicyLimits::default()).expect("loads");
    let h = Harness::with_policy(backend, hostile).await;
    let dataset_id = h.create_dataset("hostile").await;
    let mut refused = 0;

    // Invariant 3: create-only never modifies an existing row.
    h.engine
        .stage(&stage(&dataset_id, StageMode::Upsert, &["existing"]))
        .await
        .unwrap();
    let rows = h
        .engine
        .list_splits(&dataset_id, &ListQuery::default())
        .await
        .unwrap();
    let error = h
        .engine
        .stage(&stage(
            &dataset_id,
            StageMode::CreateOnly,
            &["existing", "new"],
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(error, MendError::PolicyRejected { .. }),
        "{error:?}"
    );
    assert_eq!(
        h.engine
            .list_splits(&dataset_id, &ListQuery::default())
            .await
            .unwrap(),
        rows
    );
    refused += 1;

    // Invariant 7: a stale publish token cannot publish, whatever the policy says. (The
    // split has its object, so that the token is what stands in the way.)
    h.put_objects(&dataset_id, ["existing"]).await;
    h.engine
        .set_publish_token(&dataset_id, Some("current"))
        .await
        .unwrap();
    let error = h
        .engine
        .publish(&PublishRequest {
            dataset_id: dataset_id.clone(),
            staged_split_ids: vec!["existing".into()],
            replaced_split_ids: vec![],
            checkpoint_delta: None,
            publish_token: Some("stale".into()),
            fencing_epoch: None,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(error, MendError::PolicyRejected { .. }),
        "{error:?}"
    );
    assert_eq!(
        h.engine
            .list_splits(&dataset_id, &ListQuery::default())
            .await
            .unwrap(),
        rows
    );
    refused += 1;
    h.engine.set_publish_token(&dataset_id, None).await.unwrap();

    // Invariant 6: compensation in roll-forward mode; invariant 1: a roll-forward that would
    // publish splits whose objects are missing.
    // The commit's steps: begin, the objects of a and b, publish.
    for (crash_at, label) in [(4, "complete effects"), (3, "a missing object")] {
        let ds = h.create_dataset("hostile-recovery").await;
        let crashing = h
            .engine
            .with_faults(Arc::new(CrashAt::new(crash_at, false)));
        assert!(crashing.commit(&commit(&ds, &["a", "b"])).await.is_err());
        h.clock.advance_ms(120_000);
        let intents = h.engine.catalog().list_intents(&ds).await.unwrap();
        let rows = h
            .engine
            .list_splits(&ds, &ListQuery::default())
            .await
            .unwrap();
        let report = h
            .engine
            .recover(&ds, RecoveryMode::RollForward)
            .await
            .unwrap();
        assert!(
            report
                .intents
                .iter()
                .all(|i| matches!(i.outcome, Outcome::Refused(_))),
            "{label}: {report:?}"
        );
        assert_eq!(
            h.engine.catalog().list_intents(&ds).await.unwrap(),
            intents,
            "{label}"
        );
        assert_eq!(
            h.engine
                .list_splits(&ds, &ListQuery::default())
                .await
                .unwrap(),
            rows,
            "{label}"
        );
        let audit = h.engine.catalog().list_audit(&ds, None).await.unwrap();
        assert_eq!(audit.len(), 1, "{label}: the refusal is audited");
        assert_eq!(audit[0].policy_digest, h.engine.policy().digest());
        refused += 1;
    }
    // Invariants 2 and 5: a gc plan that deletes a staged split (and marks a marked one) is
    // refused whole; a published split is never even a candidate.
    let ds = h.create_dataset("hostile-gc").await;
    h.engine
        .stage(&stage(&ds, StageMode::CreateOnly, &["published", "staged"]))
        .await
        .unwrap();
    h.put_objects(&ds, ["published"]).await;
    h.engine
        .publish(&PublishRequest::staged(
            ds.clone(),
            vec!["published".into()],
        ))
        .await
        .unwrap();
    let fingerprint_rows = h
        .engine
        .list_splits(&ds, &ListQuery::default())
        .await
        .unwrap();
    let error = h.engine.gc(&ds, "gc").await.unwrap_err();
    assert!(
        matches!(&error, MendError::PolicyRejected { message } if message.contains("it deletes staged, which is staged")),
        "{error:?}"
    );
    assert_eq!(
        h.engine
            .list_splits(&ds, &ListQuery::default())
            .await
            .unwrap(),
        fingerprint_rows
    );
    assert!(
        h.engine
            .catalog()
            .list_intents(&ds)
            .await
            .unwrap()
            .is_empty()
    );
    let audit = h.engine.catalog().list_audit(&ds, None).await.unwrap();
    assert_eq!(audit.len(), 1, "the refused plan is audited: {audit:?}");
    assert_eq!(audit[0].mode, "gc");
    assert_eq!(audit[0].outcome["outcome"], "refused");
    refused += 1;
    println!(
        "hostile policy [{backend}]: {refused} unsafe decisions refused (the recovery and gc ones audited), nothing executed"
    );
}

#[tokio::test]
async fn hostile_decisions_are_refused_on_memory() {
    check_hostile(Backend::Memory).await;
}

#[tokio::test]
async fn hostile_decisions_are_refused_on_postgres() {
    check_hostile(Backend::Postgres).await;
}

/// Malformed stage plans (the shape of 1.4, which 1.5 keeps with its actions as bytes) from a
/// real sandbox (`policies/hostile`, `malformed-*`): each plan that breaks the contract's shape
/// is refused, as the policy's error or as a plan the
/// invariants reject, and a batch of verdicts one short refuses the publish. Nothing is
/// written by a refused plan (the dataset's rows and write fingerprint are as before), and the
/// refused publish publishes nothing.
async fn check_malformed(backend: Backend) {
    let hostile = PolicyRuntime::load(HOSTILE_WASM, PolicyLimits::default()).expect("loads");
    let h = Harness::with_policy(backend, hostile).await;
    let shapes: [(&str, &str); 6] = [
        (
            "malformed-lengths",
            "malformed plan: 4 request indices for 3 actions",
        ),
        (
            "malformed-reasons",
            "malformed plan: 0 reasons for 1 rejections",
        ),
        (
            "malformed-index",
            "malformed plan: request index 4, but the request has 4 entries",
        ),
        ("malformed-duplicate", "a"),
        ("malformed-missing", "c"),
        (
            "malformed-action",
            "malformed plan: action 6, which is no case of planned-action",
        ),
    ];
    let mut refused = 0;
    for (label, says) in shapes {
        let dataset_id = h.create_dataset(label).await;
        let before = h.write_fingerprint(&dataset_id).await;
        let error = h
            .engine
            .stage(&stage(
                &dataset_id,
                StageMode::CreateOnly,
                &["b", "a", "c", "a"],
            ))
            .await
            .expect_err("a malformed plan is refused");
        let message = error.to_string();
        let policy_error = matches!(
            &error,
            MendError::Policy(mend::PolicyError::Incompatible { .. })
        );
        let rejected = matches!(&error, MendError::PolicyRejected { .. });
        assert!(
            (policy_error || rejected) && message.contains(says),
            "{label}: {error:?}"
        );
        let rows = h
            .engine
            .list_splits(&dataset_id, &ListQuery::default())
            .await
            .unwrap();
        assert!(rows.splits.is_empty(), "{label}: {:?}", rows.splits);
        assert_eq!(h.write_fingerprint(&dataset_id).await, before, "{label}");
        println!("{label:>20}: refused ({message})");
        refused += 1;
    }

    // A commit stages and uploads, then its publish is validated: one verdict short, it is
    // refused and nothing is published.
    let dataset_id = h.create_dataset("malformed-verdicts").await;
    let error = h
        .engine
        .commit(&commit(&dataset_id, &["s"]))
        .await
        .expect_err("a batch of verdicts one short refuses the publish");
    assert!(
        error
            .to_string()
            .contains("validate-publishes answered 0 verdicts for 1 publishes"),
        "{error:?}"
    );
    let rows = h
        .engine
        .list_splits(&dataset_id, &ListQuery::default())
        .await
        .unwrap();
    assert!(
        rows.splits
            .iter()
            .all(|row| row.state != mend::model::SplitState::Published),
        "{:?}",
        rows.splits
    );
    refused += 1;
    assert_eq!(
        refused, 7,
        "six malformed plans and one short batch of verdicts"
    );
    println!(
        "malformed answers [{backend}]: {refused} of 7 refused; no refused plan wrote anything, no refused publish published"
    );
}

#[tokio::test]
async fn malformed_plans_are_refused_on_memory() {
    check_malformed(Backend::Memory).await;
}

#[tokio::test]
async fn malformed_plans_are_refused_on_postgres() {
    check_malformed(Backend::Postgres).await;
}

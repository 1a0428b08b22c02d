//! A crashed writer needs no operator: a commit that died before it confirmed, once its lease
//! has run out, is abandoned by roll-forward recovery on its own, on every backend. Its owner
//! is fenced, its staged rows are marked, its objects are left for gc, the intent is deleted
//! and the audit says "abandoned"; the dataset's fencing epoch does not move, so live writers
//! carry on. Damage (an object present but not as planned) is never abandoned: it stays
//! blocked for an operator. A sweep that stopped after fencing finishes the job next time.

use std::sync::Arc;

use mend::engine::{IntentStatus, Outcome};
use mend::faults::{CrashAt, DurableStep};
use mend::intent::IntentPhase;
use mend::model::{DatasetConfig, PublishRequest, SplitState};
use mend::{EntityKind, MendError};
use mend_contract::{RecoveryDecision, RecoveryMode};
use mend_tests::harness::commit_request;
use mend_tests::{Backend, Harness};

const SPLITS: [&str; 2] = ["a-1", "a-2"];
/// Past the writer's lease (60 s by default).
const LEASE_RUN_OUT_MS: i64 = 120_000;

/// A commit that crashed before its second object (its steps: begin, the two objects,
/// publish): both rows staged, one object written, the intent `Armed`. Returns its operation
/// id.
async fn crashed_before_confirming(h: &Harness, dataset_id: &str) -> String {
    let crash = Arc::new(CrashAt::new(3, false));
    let crashing = h.engine.with_faults(crash.clone());
    assert!(
        crashing
            .commit(&commit_request(dataset_id, &SPLITS))
            .await
            .is_err()
    );
    assert_eq!(
        crash.steps().last(),
        Some(&DurableStep::PutObject {
            split_id: SPLITS[1].into()
        })
    );
    let intents = h.engine.catalog().list_intents(dataset_id).await.unwrap();
    assert_eq!(intents.len(), 1);
    assert_eq!(intents[0].phase, IntentPhase::Armed);
    intents[0].operation_id.clone()
}

async fn state_of(h: &Harness, dataset_id: &str, split_id: &str) -> Option<SplitState> {
    h.rows(dataset_id)
        .await
        .into_iter()
        .find(|row| row.split_id == split_id)
        .map(|row| row.state)
}

async fn object_exists(h: &Harness, dataset_id: &str, split_id: &str) -> bool {
    h.engine
        .objects()
        .read_header(dataset_id, split_id)
        .await
        .unwrap()
        .is_some()
}

async fn abandons_on_its_own(backend: Backend) {
    let h = Harness::new(backend).await;
    let dataset_id = h.create_dataset("abandon").await;
    let operation_id = crashed_before_confirming(&h, &dataset_id).await;
    let epoch = h.engine.dataset(&dataset_id).await.unwrap().fencing_epoch;
    let mut checks = 0;

    // While its lease is live, roll-forward defers and writes nothing.
    let fingerprint = h.write_fingerprint(&dataset_id).await;
    let live = h
        .engine
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await
        .unwrap();
    assert_eq!(live.count(IntentStatus::Deferred), 1, "{live:?}");
    assert_eq!(h.write_fingerprint(&dataset_id).await, fingerprint);
    checks += 2;

    h.clock.advance_ms(LEASE_RUN_OUT_MS);
    // Probe says what roll-forward will do, and writes nothing.
    let probe = h
        .engine
        .recover(&dataset_id, RecoveryMode::Probe)
        .await
        .unwrap();
    assert_eq!(probe.count(IntentStatus::Abandoned), 1, "{probe:?}");
    assert_eq!(probe.intents[0].outcome, Outcome::Reported);
    assert_eq!(h.write_fingerprint(&dataset_id).await, fingerprint);
    checks += 3;

    let report = h
        .engine
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await
        .unwrap();
    let intent = &report.intents[0];
    assert_eq!(intent.status, IntentStatus::Abandoned, "{report:?}");
    assert!(
        matches!(&intent.decision, RecoveryDecision::Abandon(why) if why.contains("never confirmed")),
        "{report:?}"
    );
    assert_eq!(intent.outcome, Outcome::Executed);
    checks += 3;

    // The intent is gone, its rows marked, its written object left for gc, no epoch bump.
    assert!(
        h.engine
            .catalog()
            .list_intents(&dataset_id)
            .await
            .unwrap()
            .is_empty()
    );
    for split_id in SPLITS {
        assert_eq!(
            state_of(&h, &dataset_id, split_id).await,
            Some(SplitState::MarkedForDeletion)
        );
    }
    assert!(object_exists(&h, &dataset_id, SPLITS[0]).await);
    assert_eq!(
        h.engine.dataset(&dataset_id).await.unwrap().fencing_epoch,
        epoch,
        "abandonment must not fence the dataset's live writers"
    );
    checks += 5;

    // The audit says what happened: the record before executing, and the settled one.
    let audit = h
        .engine
        .catalog()
        .list_audit(&dataset_id, None)
        .await
        .unwrap();
    let outcomes: Vec<&serde_json::Value> = audit.iter().map(|record| &record.outcome).collect();
    assert_eq!(
        outcomes,
        [
            &serde_json::json!({"outcome": "executing"}),
            &serde_json::json!({"outcome": "executed"})
        ],
        "{audit:?}"
    );
    for record in &audit {
        assert_eq!(record.operation_id, operation_id);
        assert_eq!(record.mode, "roll-forward");
        assert!(record.decision.get("abandon").is_some(), "{record:?}");
    }
    checks += 3;

    // Its owner, coming back, can neither confirm nor publish.
    let late_publish =
        PublishRequest::staged(dataset_id.clone(), SPLITS.map(String::from).to_vec());
    let late = h.engine.publish(&late_publish).await.unwrap_err();
    assert!(
        matches!(&late, MendError::FailedPrecondition { .. }),
        "{late:?}"
    );
    checks += 1;

    // Another writer of the dataset is not disturbed.
    h.engine
        .commit(&commit_request(&dataset_id, &["b-1"]))
        .await
        .expect("a live writer's commit after the abandonment");
    assert_eq!(
        state_of(&h, &dataset_id, "b-1").await,
        Some(SplitState::Published)
    );
    checks += 1;

    // gc removes the abandoned rows and their objects after the deletion grace period.
    let grace = DatasetConfig::default().deletion_grace_period_ms as i64;
    h.clock.advance_ms(grace + 1);
    let collected = h.engine.gc(&dataset_id, "gc").await.unwrap();
    assert_eq!(collected.deleted, SPLITS.map(String::from));
    assert!(!object_exists(&h, &dataset_id, SPLITS[0]).await);
    assert_eq!(state_of(&h, &dataset_id, SPLITS[0]).await, None);
    checks += 3;
    println!(
        "abandonment [{backend}]: {checks} checks: deferred while leased, abandoned on its own after, owner fenced, no epoch bump, audited, collected by gc"
    );
}

async fn damage_stays_blocked(backend: Backend) {
    let h = Harness::new(backend).await;
    let dataset_id = h.create_dataset("damaged").await;
    crashed_before_confirming(&h, &dataset_id).await;
    // Another object where the commit planned its second: present, but not as planned.
    let uid = h.engine.dataset(&dataset_id).await.unwrap().uid;
    h.plant_orphan(&dataset_id, SPLITS[1], &uid, false).await;
    h.clock.advance_ms(LEASE_RUN_OUT_MS);
    let fingerprint = h.write_fingerprint(&dataset_id).await;
    let report = h
        .engine
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await
        .unwrap();
    assert_eq!(report.count(IntentStatus::Blocked), 1, "{report:?}");
    assert_eq!(report.intents[0].outcome, Outcome::Reported);
    assert_eq!(h.write_fingerprint(&dataset_id).await, fingerprint);

    // The operator's exclusive recovery rolls it back.
    let exclusive = h
        .engine
        .recover(&dataset_id, RecoveryMode::Exclusive)
        .await
        .unwrap();
    assert_eq!(exclusive.count(IntentStatus::NeedsCompensation), 1);
    assert_eq!(exclusive.intents[0].outcome, Outcome::Executed);
    println!(
        "abandonment [{backend}]: a damaged unconfirmed commit stays blocked in roll-forward, wrote nothing, and exclusive rolled it back"
    );
}

/// An abandonment is one atomic step of a sweep: a sweep whose catalog step landed but was
/// told it failed left nothing half-done (the intent gone, its rows marked). A fenced intent
/// whose abandonment never finished (an abort that stopped after fencing, or a sweep of a
/// backend that settles one step at a time) is `Abandoned`; the next sweep finishes it,
/// whatever its lease says.
async fn a_sweep_stopped_after_fencing_is_finished_next_time(backend: Backend) {
    let h = Harness::new(backend).await;
    let dataset_id = h.create_dataset("half-abandoned").await;
    crashed_before_confirming(&h, &dataset_id).await;
    h.clock.advance_ms(LEASE_RUN_OUT_MS);
    let crash = Arc::new(CrashAt::new(2, true));
    let stopped = h
        .engine
        .with_faults(crash.clone())
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await;
    // The failure is the sweep's: reported for the intent, recorded as failed.
    assert_eq!(
        crash.steps(),
        [
            DurableStep::AppendAudit,
            DurableStep::SettleIntents,
            DurableStep::AppendAudit
        ]
    );
    let report = stopped.unwrap();
    assert!(matches!(report.intents[0].outcome, Outcome::Failed(_)));
    assert!(
        h.engine
            .catalog()
            .list_intents(&dataset_id)
            .await
            .unwrap()
            .is_empty(),
        "the abandonment landed whole"
    );
    for split_id in SPLITS {
        assert_eq!(
            state_of(&h, &dataset_id, split_id).await,
            Some(SplitState::MarkedForDeletion)
        );
    }

    let dataset_id = h.create_dataset("half-abandoned").await;
    let operation_id = crashed_before_confirming(&h, &dataset_id).await;
    h.clock.advance_ms(LEASE_RUN_OUT_MS);
    h.engine
        .catalog()
        .abandon_intent(
            &dataset_id,
            &operation_id,
            Some(h.clock_now()),
            h.clock_now(),
        )
        .await
        .expect("fence it, and stop there");
    let intents = h.engine.catalog().list_intents(&dataset_id).await.unwrap();
    assert_eq!(intents.len(), 1);
    assert_eq!(intents[0].phase, IntentPhase::Abandoned);
    assert_eq!(
        state_of(&h, &dataset_id, SPLITS[0]).await,
        Some(SplitState::Staged)
    );
    // Fenced: its owner cannot confirm it.
    let confirm = mend::intent::Intent {
        phase: IntentPhase::EffectsConfirmed,
        ..intents[0].clone()
    };
    let fenced = h
        .engine
        .catalog()
        .update_intent(&confirm, IntentPhase::Armed)
        .await
        .unwrap_err();
    assert!(
        matches!(&fenced, MendError::FailedPrecondition { ids, .. } if ids == std::slice::from_ref(&operation_id)),
        "{fenced:?}"
    );

    let finished = h
        .engine
        .recover(&dataset_id, RecoveryMode::RollForward)
        .await
        .unwrap();
    assert_eq!(finished.count(IntentStatus::Abandoned), 1, "{finished:?}");
    assert_eq!(finished.intents[0].outcome, Outcome::Executed);
    assert!(
        h.engine
            .catalog()
            .list_intents(&dataset_id)
            .await
            .unwrap()
            .is_empty()
    );
    for split_id in SPLITS {
        assert_eq!(
            state_of(&h, &dataset_id, split_id).await,
            Some(SplitState::MarkedForDeletion)
        );
    }
    let gone = h
        .engine
        .catalog()
        .abandon_intent(&dataset_id, &operation_id, None, h.clock_now())
        .await
        .unwrap_err();
    assert!(
        matches!(
            gone,
            MendError::NotFound {
                kind: EntityKind::Intent,
                ..
            }
        ),
        "{gone:?}"
    );
    println!(
        "abandonment [{backend}]: a sweep told its abandonment failed had landed it whole; an intent left abandoned (its owner fenced) was finished by the next sweep"
    );
}

async fn run(backend: Backend) {
    abandons_on_its_own(backend).await;
    damage_stays_blocked(backend).await;
    a_sweep_stopped_after_fencing_is_finished_next_time(backend).await;
}

#[tokio::test]
async fn abandonment_on_memory() {
    run(Backend::Memory).await;
}

#[tokio::test]
async fn abandonment_on_a_local_directory() {
    run(Backend::LocalDirectory).await;
}

#[tokio::test]
async fn abandonment_on_postgres() {
    run(Backend::Postgres).await;
}

#[tokio::test]
async fn abandonment_on_s3() {
    run(Backend::S3).await;
}

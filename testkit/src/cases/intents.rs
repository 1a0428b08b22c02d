//! Intents and audit records at the catalog trait itself: an intent created once, read alone
//! as listed, advanced only from the phase it is in, deleted; every planned effect kept as written, and every intent
//! stored in this host's format; abandoning an expired armed intent, racing a heartbeat;
//! audit records appended in order.

use mend::audit::{AUDIT_FORMAT_VERSION, AuditRecord};
use mend::catalog::MarkRule;
use mend::intent::{
    ExpectedState, INTENT_FORMAT_VERSION, Intent, IntentPhase, OperationKind, PlannedEffects,
    PlannedObject, PlannedPublish, PlannedRow,
};
use mend::model::{CheckpointDelta, DatasetConfig, PartitionDelta, SplitState, StageMode};
use mend::{EntityKind, MendError};

use crate::harness::Harness;

pub(super) fn intent(dataset_id: &str, operation_id: &str, created_at_ms: i64) -> Intent {
    Intent {
        format_version: INTENT_FORMAT_VERSION,
        operation_id: operation_id.into(),
        dataset_id: dataset_id.into(),
        kind: OperationKind::Commit,
        phase: IntentPhase::Armed,
        owner: "node-a".into(),
        lease_expires_at_ms: created_at_ms + 30_000,
        created_at_ms,
        updated_at_ms: created_at_ms,
        effects: PlannedEffects {
            stage: vec![PlannedRow {
                split_id: format!("{operation_id}-split"),
                metadata_json: "{}".into(),
            }],
            ..Default::default()
        },
        expected: ExpectedState::default(),
    }
}

pub(super) async fn intents_are_created_once_advanced_conditionally_and_deleted(h: &Harness<'_>) {
    let ds = h.create_dataset("intents").await;
    let catalog = h.engine.catalog();
    let manifest = h.engine.dataset(&ds).await.unwrap().manifest_version;
    let first = intent(&ds, "op-b", 1_000);
    let second = intent(&ds, "op-a", 2_000);
    catalog.put_intent(&first).await.expect("put");
    catalog.put_intent(&second).await.expect("put");
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        [first.clone(), second.clone()],
        "oldest first"
    );
    // The read of one intent answers what the listing lists for it, and nothing for another.
    assert_eq!(
        catalog.intent(&ds, "op-b").await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(
        catalog.intent(&ds, "op-a").await.unwrap(),
        Some(second.clone())
    );
    assert_eq!(catalog.intent(&ds, "op-none").await.unwrap(), None);
    assert_eq!(
        h.engine.dataset(&ds).await.unwrap().manifest_version,
        manifest,
        "an intent is not part of the published view"
    );

    let again = catalog.put_intent(&first).await.unwrap_err();
    assert!(
        matches!(&again, MendError::AlreadyExists { kind: EntityKind::Intent, id } if id == "op-b"),
        "{again:?}"
    );
    let nowhere = catalog
        .put_intent(&intent("no-such-dataset", "op-x", 1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            nowhere,
            MendError::NotFound {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{nowhere:?}"
    );

    let confirmed = Intent {
        phase: IntentPhase::EffectsConfirmed,
        updated_at_ms: 1_500,
        ..first.clone()
    };
    catalog
        .update_intent(&confirmed, IntentPhase::Armed)
        .await
        .expect("confirm");
    let stale = catalog
        .update_intent(&confirmed, IntentPhase::Armed)
        .await
        .unwrap_err();
    assert!(
        matches!(stale, MendError::FailedPrecondition { .. }),
        "{stale:?}"
    );
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        [confirmed.clone(), second.clone()]
    );
    assert_eq!(
        catalog.intent(&ds, "op-b").await.unwrap(),
        Some(confirmed.clone()),
        "the read of one intent sees its phase move"
    );

    catalog.delete_intent(&ds, "op-b", 0).await.expect("delete");
    let gone = catalog.delete_intent(&ds, "op-b", 0).await.unwrap_err();
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
    let gone = catalog
        .update_intent(&confirmed, IntentPhase::EffectsConfirmed)
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
    assert_eq!(catalog.list_intents(&ds).await.unwrap(), [second]);
    assert_eq!(catalog.intent(&ds, "op-b").await.unwrap(), None, "deleted");
    let one_missing = catalog.intent("no-such-dataset", "op-b").await.unwrap_err();
    assert!(
        matches!(
            one_missing,
            MendError::NotFound {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{one_missing:?}"
    );
    let missing = catalog.list_intents("no-such-dataset").await.unwrap_err();
    assert!(
        matches!(
            missing,
            MendError::NotFound {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{missing:?}"
    );
}

/// An intent planning one of everything: each field of its effects and expected state set.
fn planning_everything(dataset_id: &str, operation_id: &str) -> Intent {
    Intent {
        kind: OperationKind::Merge,
        effects: PlannedEffects {
            stage: vec![PlannedRow {
                split_id: "new-1".into(),
                metadata_json: r#"{"docs":10,"note":"é \"quoted\""}"#.into(),
            }],
            objects: vec![PlannedObject {
                split_id: "new-1".into(),
                size: u64::MAX,
                checksum: format!("sha256:{}", "ab".repeat(32)),
            }],
            publish: Some(PlannedPublish {
                staged_split_ids: vec!["new-1".into()],
                replaced_split_ids: vec!["old-1".into(), "old-2".into()],
                checkpoint_delta: Some(CheckpointDelta {
                    source: "kafka".into(),
                    partitions: vec![
                        PartitionDelta {
                            partition: "p0".into(),
                            from_position: None,
                            to_position: 300,
                        },
                        PartitionDelta {
                            partition: "p1".into(),
                            from_position: Some(128),
                            to_position: 129,
                        },
                    ],
                }),
                publish_token: Some("token-7".into()),
            }),
            mark: vec!["gone-1".into()],
            delete: vec!["gone-2".into()],
            config: Some(DatasetConfig {
                staged_grace_period_ms: 1,
                deletion_grace_period_ms: 0,
                policy_params: [("a".into(), "1".into()), ("b".into(), String::new())].into(),
            }),
        },
        expected: ExpectedState {
            manifest_version: 7,
            split_states: vec![
                ("new-1".into(), None),
                ("old-1".into(), Some(SplitState::Published)),
                ("old-2".into(), Some(SplitState::Staged)),
                ("gone-1".into(), Some(SplitState::MarkedForDeletion)),
            ],
            config_version: Some(3),
        },
        ..intent(dataset_id, operation_id, 1_000)
    }
}

/// Whatever a backend's stored form, every planned effect comes back as written; an intent of
/// an older format (read from storage and written back: renewed, confirmed) is stored in this
/// host's, and one of a format this host does not know is refused with nothing written.
pub(super) async fn intents_keep_every_planned_effect_and_are_written_in_this_hosts_format(
    h: &Harness<'_>,
) {
    let ds = h.create_dataset("intent-forms").await;
    let catalog = h.engine.catalog();
    let mut checks = 0;

    let everything = planning_everything(&ds, "op-a");
    catalog.put_intent(&everything).await.expect("put");
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        std::slice::from_ref(&everything)
    );
    checks += 1;

    // As an older mend wrote it, read back and written again by this one.
    let older = Intent {
        format_version: 2,
        ..intent(&ds, "op-b", 2_000)
    };
    catalog
        .put_intent(&older)
        .await
        .expect("put an older format");
    let stored = Intent {
        format_version: INTENT_FORMAT_VERSION,
        ..older.clone()
    };
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        [everything.clone(), stored.clone()]
    );
    checks += 1;
    let confirmed = Intent {
        format_version: 1,
        phase: IntentPhase::EffectsConfirmed,
        updated_at_ms: 2_500,
        ..older
    };
    catalog
        .update_intent(&confirmed, IntentPhase::Armed)
        .await
        .expect("confirm from format 1");
    let stored = Intent {
        format_version: INTENT_FORMAT_VERSION,
        ..confirmed.clone()
    };
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        [everything.clone(), stored.clone()]
    );
    checks += 1;

    for format_version in [0, INTENT_FORMAT_VERSION + 1] {
        let put = catalog
            .put_intent(&Intent {
                format_version,
                ..intent(&ds, "op-c", 3_000)
            })
            .await
            .unwrap_err();
        assert!(matches!(put, MendError::InvalidArgument { .. }), "{put:?}");
        let updated = catalog
            .update_intent(
                &Intent {
                    format_version,
                    updated_at_ms: 4_000,
                    ..stored.clone()
                },
                IntentPhase::EffectsConfirmed,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(updated, MendError::InvalidArgument { .. }),
            "{updated:?}"
        );
        checks += 2;
    }
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        [everything, stored],
        "a refused format writes nothing"
    );
    checks += 1;
    assert_eq!(checks, 8);
    println!(
        "conformance[{}] intent forms: {checks} checks: a plan of every effect round-trips, formats 1 and 2 are written as {INTENT_FORMAT_VERSION}, formats 0 and {} are refused",
        h.name(),
        INTENT_FORMAT_VERSION + 1
    );
}

fn failed_precondition_naming(error: &MendError, operation_id: &str) -> bool {
    matches!(error, MendError::FailedPrecondition { ids, .. } if ids == &[operation_id.to_string()])
}

/// A lease never moves back: a confirmation written from an intent read before a heartbeat
/// landed (found by mend-model: the publish confirms the intent as it read it) keeps the
/// heartbeat's lease, and a heartbeat that renews to an earlier time changes nothing of it.
pub(super) async fn a_lease_never_moves_back(h: &Harness<'_>) {
    let ds = h.create_dataset("lease-back").await;
    let catalog = h.engine.catalog();
    let read = intent(&ds, "op-a", 1_000);
    catalog.put_intent(&read).await.expect("put");
    let renewed = Intent {
        lease_expires_at_ms: 90_000,
        updated_at_ms: 20_000,
        ..read.clone()
    };
    catalog
        .update_intent(&renewed, IntentPhase::Armed)
        .await
        .expect("heartbeat");
    // The publish read the intent before the heartbeat: its confirmation carries lease 31,000.
    let confirmed = Intent {
        phase: IntentPhase::EffectsConfirmed,
        updated_at_ms: 21_000,
        ..read.clone()
    };
    catalog
        .update_intent(&confirmed, IntentPhase::Armed)
        .await
        .expect("confirm");
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        [Intent {
            lease_expires_at_ms: 90_000,
            ..confirmed.clone()
        }],
        "the confirmation is written with the heartbeat's later lease"
    );
    // A later lease still moves it on.
    let later = Intent {
        lease_expires_at_ms: 120_000,
        updated_at_ms: 22_000,
        ..confirmed.clone()
    };
    catalog
        .update_intent(&later, IntentPhase::EffectsConfirmed)
        .await
        .expect("heartbeat");
    assert_eq!(catalog.list_intents(&ds).await.unwrap(), [later]);
    println!(
        "conformance[{}] leases: 2 checks: a confirmation read before a heartbeat keeps the heartbeat's lease, a later lease moves it on",
        h.name()
    );
}

/// Over 100 lines: a case is one script against one dataset, each check under the step it
/// checks; split, it would only hand its state from piece to piece.
pub(super) async fn abandon_fences_an_expired_armed_intent_only(h: &Harness<'_>) {
    let ds = h.create_dataset("abandon").await;
    let catalog = h.engine.catalog();
    let manifest = h.engine.dataset(&ds).await.unwrap().manifest_version;
    let mut checks = 0;

    // Armed, leased until 31,000.
    let armed = intent(&ds, "op-a", 1_000);
    catalog.put_intent(&armed).await.expect("put");
    let live = catalog
        .abandon_intent(&ds, "op-a", Some(30_999), 30_999)
        .await
        .unwrap_err();
    assert!(failed_precondition_naming(&live, "op-a"), "{live:?}");
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        std::slice::from_ref(&armed)
    );
    checks += 2;

    // A heartbeat that lands first wins: the lease now runs until 61,000.
    let renewed = Intent {
        lease_expires_at_ms: 61_000,
        updated_at_ms: 30_000,
        ..armed.clone()
    };
    catalog
        .update_intent(&renewed, IntentPhase::Armed)
        .await
        .expect("renew");
    let live = catalog
        .abandon_intent(&ds, "op-a", Some(31_000), 31_000)
        .await
        .unwrap_err();
    assert!(failed_precondition_naming(&live, "op-a"), "{live:?}");
    checks += 1;

    // Expired at exactly the cutoff: fenced.
    let abandoned = catalog
        .abandon_intent(&ds, "op-a", Some(61_000), 61_500)
        .await
        .expect("abandon");
    assert_eq!(
        abandoned,
        Intent {
            format_version: INTENT_FORMAT_VERSION,
            phase: IntentPhase::Abandoned,
            updated_at_ms: 61_500,
            ..renewed.clone()
        }
    );
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        std::slice::from_ref(&abandoned)
    );
    checks += 2;

    // Idempotent for its owner's abort (no lease named): the same intent, nothing written.
    // A sweep that abandons it for a lease that ran out finds it abandoned by another since
    // it observed it, and is refused: the takeover is not its.
    let again = catalog
        .abandon_intent(&ds, "op-a", None, 99_000)
        .await
        .expect("abandon again");
    assert_eq!(again, abandoned);
    let taken = catalog
        .abandon_intent(&ds, "op-a", Some(99_000), 99_000)
        .await
        .unwrap_err();
    assert!(failed_precondition_naming(&taken, "op-a"), "{taken:?}");
    assert!(taken.to_string().contains("abandoned already"), "{taken}");
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        std::slice::from_ref(&abandoned)
    );
    checks += 3;

    // Fenced at the write: its owner can neither confirm nor renew it.
    for attempt in [
        Intent {
            phase: IntentPhase::EffectsConfirmed,
            ..renewed.clone()
        },
        Intent {
            lease_expires_at_ms: 200_000,
            ..renewed.clone()
        },
    ] {
        let fenced = catalog
            .update_intent(&attempt, IntentPhase::Armed)
            .await
            .unwrap_err();
        assert!(failed_precondition_naming(&fenced, "op-a"), "{fenced:?}");
        checks += 1;
    }
    assert_eq!(
        catalog.list_intents(&ds).await.unwrap(),
        std::slice::from_ref(&abandoned)
    );
    checks += 1;

    // A confirmed intent is rolled forward, never abandoned, whatever its lease.
    let confirmed = Intent {
        phase: IntentPhase::EffectsConfirmed,
        ..intent(&ds, "op-b", 2_000)
    };
    catalog.put_intent(&confirmed).await.expect("put");
    for lease_expired_by in [None, Some(i64::MAX)] {
        let refused = catalog
            .abandon_intent(&ds, "op-b", lease_expired_by, 100_000)
            .await
            .unwrap_err();
        assert!(failed_precondition_naming(&refused, "op-b"), "{refused:?}");
        checks += 1;
    }

    // `None`: its owner aborting, whatever the lease.
    let aborting = intent(&ds, "op-c", 3_000);
    catalog.put_intent(&aborting).await.expect("put");
    let aborted = catalog
        .abandon_intent(&ds, "op-c", None, 3_500)
        .await
        .expect("abort");
    assert_eq!(aborted.phase, IntentPhase::Abandoned);
    assert_eq!(aborted.lease_expires_at_ms, aborting.lease_expires_at_ms);
    checks += 2;

    let gone = catalog
        .abandon_intent(&ds, "op-zzz", None, 0)
        .await
        .unwrap_err();
    assert!(
        matches!(&gone, MendError::NotFound { kind: EntityKind::Intent, ids } if ids == &["op-zzz".to_string()]),
        "{gone:?}"
    );
    let nowhere = catalog
        .abandon_intent("no-such-dataset", "op-a", None, 0)
        .await
        .unwrap_err();
    assert!(
        matches!(
            nowhere,
            MendError::NotFound {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{nowhere:?}"
    );
    assert_eq!(
        h.engine.dataset(&ds).await.unwrap().manifest_version,
        manifest,
        "abandoning an intent changes nothing of the published view"
    );
    checks += 3;
    println!(
        "conformance[{}] abandon: {checks} checks: live leases and heartbeats win, expired intents fenced once, confirmed ones refused",
        h.name()
    );
}

pub(super) async fn abandon_and_a_heartbeat_race_and_exactly_one_wins(h: &Harness<'_>) {
    const ROUNDS: usize = 8;
    let ds = h.create_dataset("abandon-race").await;
    let catalog = h.engine.catalog();
    let (mut abandons, mut heartbeats) = (0, 0);
    for round in 0..ROUNDS {
        let operation_id = format!("op-{round}");
        let armed = intent(&ds, &operation_id, 1_000);
        catalog.put_intent(&armed).await.expect("put");
        // The lease ran out at 31,000; the heartbeat moves it to 100,000.
        let renewed = Intent {
            lease_expires_at_ms: 100_000,
            updated_at_ms: 40_000,
            ..armed
        };
        let (abandon, heartbeat) = tokio::join!(
            catalog.abandon_intent(&ds, &operation_id, Some(40_000), 40_000),
            catalog.update_intent(&renewed, IntentPhase::Armed),
        );
        let stored = catalog
            .list_intents(&ds)
            .await
            .unwrap()
            .into_iter()
            .find(|intent| intent.operation_id == operation_id)
            .expect("the intent is still there");
        match (abandon, heartbeat) {
            (Ok(abandoned), Err(fenced)) => {
                assert!(
                    failed_precondition_naming(&fenced, &operation_id),
                    "{fenced:?}"
                );
                assert_eq!(stored, abandoned);
                assert_eq!(stored.lease_expires_at_ms, 31_000);
                abandons += 1;
            }
            (Err(live), Ok(())) => {
                assert!(failed_precondition_naming(&live, &operation_id), "{live:?}");
                assert_eq!(stored, renewed);
                heartbeats += 1;
            }
            other => panic!("round {round}: not exactly one winner: {other:?}"),
        }
    }
    assert_eq!(abandons + heartbeats, ROUNDS);
    println!(
        "conformance[{}] abandon race: {ROUNDS} rounds, exactly one winner each ({abandons} abandons, {heartbeats} heartbeats)",
        h.name()
    );
}

pub(super) fn audit(dataset_id: &str, operation_id: &str, recorded_at_ms: i64) -> AuditRecord {
    AuditRecord {
        format_version: AUDIT_FORMAT_VERSION,
        dataset_id: dataset_id.into(),
        operation_id: operation_id.into(),
        recorded_at_ms,
        mode: "roll-forward".into(),
        policy_digest: "sha256:00".into(),
        semantics_revision: 1,
        inputs_hash: "sha256:11".into(),
        decision: serde_json::json!("roll_forward"),
        outcome: serde_json::json!({"outcome": "executed"}),
        inputs: None,
        principal: None,
    }
}

pub(super) async fn audit_records_append_in_order_and_list_the_newest(h: &Harness<'_>) {
    let ds = h.create_dataset("audit").await;
    let catalog = h.engine.catalog();
    let first = vec![audit(&ds, "op-1", 100), audit(&ds, "op-2", 100)];
    let second = vec![audit(&ds, "op-3", 200)];
    catalog.append_audit(&ds, &first).await.expect("append");
    catalog.append_audit(&ds, &second).await.expect("append");
    catalog
        .append_audit(&ds, &[])
        .await
        .expect("an empty append");
    let all = catalog.list_audit(&ds, None).await.unwrap();
    assert_eq!(all, [first.clone(), second.clone()].concat());
    assert_eq!(
        catalog.list_audit(&ds, Some(2)).await.unwrap(),
        [first[1].clone(), second[0].clone()]
    );

    let foreign = catalog
        .append_audit(&ds, &[audit("other", "op-9", 300)])
        .await
        .unwrap_err();
    assert!(
        matches!(foreign, MendError::InvalidArgument { .. }),
        "{foreign:?}"
    );
    let mut future = audit(&ds, "op-9", 300);
    future.format_version = AUDIT_FORMAT_VERSION + 1;
    let newer = catalog.append_audit(&ds, &[future]).await.unwrap_err();
    assert!(
        matches!(newer, MendError::InvalidArgument { .. }),
        "{newer:?}"
    );
    assert_eq!(
        catalog.list_audit(&ds, None).await.unwrap().len(),
        3,
        "a refused append wrote"
    );

    let missing = catalog
        .list_audit("no-such-dataset", None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            missing,
            MendError::NotFound {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{missing:?}"
    );
    let missing = catalog
        .append_audit("no-such-dataset", &[audit("no-such-dataset", "op", 1)])
        .await
        .unwrap_err();
    assert!(
        matches!(
            missing,
            MendError::NotFound {
                kind: EntityKind::Dataset,
                ..
            }
        ),
        "{missing:?}"
    );
}

/// An intent that plans to publish `staged` (replacing `replaced`), as a writer's begin
/// writes it.
fn publishing_intent(
    dataset_id: &str,
    operation_id: &str,
    created_at_ms: i64,
    staged: &[&str],
    replaced: &[&str],
) -> Intent {
    Intent {
        effects: PlannedEffects {
            stage: staged
                .iter()
                .map(|id| PlannedRow {
                    split_id: (*id).into(),
                    metadata_json: "{}".into(),
                })
                .collect(),
            publish: Some(PlannedPublish {
                staged_split_ids: super::strings(staged),
                replaced_split_ids: super::strings(replaced),
                checkpoint_delta: None,
                publish_token: None,
            }),
            ..PlannedEffects::default()
        },
        ..intent(dataset_id, operation_id, created_at_ms)
    }
}

/// Garbage collection's mark (`MarkRule::Unclaimed`) decides in its own atomic step: a staged
/// row that an intent plans to stage or publish stays staged, however old it is and whatever
/// intents gc read before (mend-sim seed 995752377249: gc read the intents before a writer's
/// begin, the rows after, and marked the rows of a live operation); an abandoned intent, a
/// gc's own intent (which only marks) and no intent at all leave it to the mark.
pub(super) async fn gc_marks_only_rows_no_intent_claims(h: &Harness<'_>) {
    let ds = h.create_dataset("unclaimed").await;
    let ids = [
        "by-stage",
        "by-publish",
        "by-abandoned",
        "by-gc",
        "by-none",
        "published",
    ];
    super::stage(h, &ds, StageMode::CreateOnly, &ids).await;
    super::publish(h, &ds, &["published"], &[]).await;
    let catalog = h.engine.catalog();
    let now = h.clock_now();
    catalog
        .put_intent(&publishing_intent(&ds, "op-stage", now, &["by-stage"], &[]))
        .await
        .expect("put");
    let mut publish_only = publishing_intent(&ds, "op-publish", now, &["by-publish"], &[]);
    publish_only.effects.stage.clear();
    catalog.put_intent(&publish_only).await.expect("put");
    catalog
        .put_intent(&publishing_intent(
            &ds,
            "op-abandoned",
            now,
            &["by-abandoned"],
            &[],
        ))
        .await
        .expect("put");
    catalog
        .abandon_intent(&ds, "op-abandoned", None, now)
        .await
        .expect("abandon");
    let gc = Intent {
        kind: OperationKind::Gc,
        effects: PlannedEffects {
            mark: super::strings(&["by-gc"]),
            ..PlannedEffects::default()
        },
        ..intent(&ds, "op-gc", now)
    };
    catalog.put_intent(&gc).await.expect("put");

    h.clock.advance_ms(1_000);
    let rule = MarkRule::Unclaimed {
        untouched_before_ms: h.clock_now(),
    };
    let marked = catalog
        .mark(&ds, &super::strings(&ids), rule, h.clock_now(), None)
        .await
        .expect("mark");
    assert_eq!(marked.marked, ["by-abandoned", "by-gc", "by-none"]);
    let states: Vec<(String, SplitState)> = super::rows(h, &ds)
        .await
        .into_iter()
        .map(|row| (row.split_id, row.state))
        .collect();
    let state_of = |id: &str| states.iter().find(|(split, _)| split == id).map(|s| s.1);
    for (id, state) in [
        ("by-stage", SplitState::Staged),
        ("by-publish", SplitState::Staged),
        ("by-abandoned", SplitState::MarkedForDeletion),
        ("by-gc", SplitState::MarkedForDeletion),
        ("by-none", SplitState::MarkedForDeletion),
        ("published", SplitState::Published),
    ] {
        assert_eq!(state_of(id), Some(state), "{id}: {states:?}");
    }

    // Once its operation is gone, the row is nobody's.
    catalog
        .delete_intent(&ds, "op-stage", h.clock_now())
        .await
        .expect("delete");
    let before = h.write_fingerprint(&ds).await;
    let marked = catalog
        .mark(
            &ds,
            &super::strings(&["by-publish"]),
            rule,
            h.clock_now(),
            None,
        )
        .await
        .expect("mark");
    assert!(marked.marked.is_empty(), "{marked:?}");
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "a mark that moved nothing wrote something"
    );
    let marked = catalog
        .mark(
            &ds,
            &super::strings(&["by-stage"]),
            rule,
            h.clock_now(),
            None,
        )
        .await
        .expect("mark");
    assert_eq!(marked.marked, ["by-stage"]);
    println!(
        "conformance[{}]: 6 rows held against 4 intents: 2 claimed rows kept, 3 unclaimed \
         rows marked, a published row untouched, a claim gone with its intent",
        h.name()
    );
}

/// A confirmation (`Armed` to `EffectsConfirmed`) requires, in its own atomic step, that the
/// publish it promises can still land: every split to publish staged, every split replaced
/// published. Otherwise it is refused naming them, the intent stays `Armed` (its writer can
/// still abort it), and nothing is written (mend-sim seed 995752377249: a confirm landed on
/// rows gc had marked, and the operation could neither publish nor be aborted).
pub(super) async fn a_confirm_requires_its_publish_to_still_land(h: &Harness<'_>) {
    let ds = h.create_dataset("confirm").await;
    super::stage(
        h,
        &ds,
        StageMode::CreateOnly,
        &["new", "taken", "old", "fresh"],
    )
    .await;
    super::publish(h, &ds, &["old"], &[]).await;
    let catalog = h.engine.catalog();
    let now = h.clock_now();
    let confirmed = |intent: &Intent| Intent {
        phase: IntentPhase::EffectsConfirmed,
        updated_at_ms: intent.updated_at_ms + 1,
        ..intent.clone()
    };

    // A split to publish was marked after the begin: refused, naming it.
    let taken = publishing_intent(&ds, "op-taken", now, &["new", "taken"], &[]);
    catalog.put_intent(&taken).await.expect("put");
    h.engine
        .mark_for_deletion(&ds, &super::strings(&["taken"]))
        .await
        .expect("mark");
    let before = h.write_fingerprint(&ds).await;
    let refused = catalog
        .update_intent(&confirmed(&taken), IntentPhase::Armed)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, MendError::FailedPrecondition { .. }),
        "{refused:?}"
    );
    assert_eq!(super::ids_of(&refused), ["taken"]);
    assert_eq!(
        h.write_fingerprint(&ds).await,
        before,
        "a refused confirm wrote"
    );
    let stored = catalog.list_intents(&ds).await.expect("list");
    assert_eq!(stored, [taken], "the intent stays armed, as it was");

    // A split it replaces is not published (here: staged): refused, naming it.
    let replacing = publishing_intent(&ds, "op-replacing", now, &["fresh"], &["new"]);
    catalog.put_intent(&replacing).await.expect("put");
    let refused = catalog
        .update_intent(&confirmed(&replacing), IntentPhase::Armed)
        .await
        .unwrap_err();
    assert_eq!(super::ids_of(&refused), ["new"]);

    // Its rows as planned: confirmed.
    catalog
        .delete_intent(&ds, "op-replacing", now)
        .await
        .expect("delete");
    let landing = publishing_intent(&ds, "op-landing", now, &["fresh"], &["old"]);
    catalog.put_intent(&landing).await.expect("put");
    catalog
        .update_intent(&confirmed(&landing), IntentPhase::Armed)
        .await
        .expect("a confirm whose publish can land");
    let phases: Vec<(String, IntentPhase)> = catalog
        .list_intents(&ds)
        .await
        .expect("list")
        .into_iter()
        .map(|intent| (intent.operation_id, intent.phase))
        .collect();
    assert!(
        phases.contains(&("op-landing".into(), IntentPhase::EffectsConfirmed)),
        "{phases:?}"
    );
    println!(
        "conformance[{}]: 3 confirmations: 2 refused naming the rows their publish could not \
         land on (nothing written), 1 confirmed",
        h.name()
    );
}

//! Intents: put, conditional update, delete and list; the refusals that write nothing; a body
//! in a newer format; and that intents leave the published view alone.

use super::*;
use crate::intent::{
    ExpectedState, INTENT_FORMAT_VERSION, Intent, IntentPhase, OperationKind, PlannedEffects,
    PlannedRow,
};

fn intent(dataset_id: &str, operation_id: &str, created_at_ms: TimestampMs) -> Intent {
    Intent {
        format_version: INTENT_FORMAT_VERSION,
        operation_id: operation_id.to_string(),
        dataset_id: dataset_id.to_string(),
        kind: OperationKind::Commit,
        phase: IntentPhase::Armed,
        owner: "node-1".to_string(),
        lease_expires_at_ms: created_at_ms + 30_000,
        created_at_ms,
        updated_at_ms: created_at_ms,
        effects: PlannedEffects {
            stage: vec![PlannedRow {
                split_id: "a".to_string(),
                metadata_json: json!({ "docs": 10 }).to_string(),
            }],
            ..PlannedEffects::default()
        },
        expected: ExpectedState {
            manifest_version: 1,
            split_states: vec![("a".to_string(), None)],
            config_version: None,
        },
    }
}

/// The same intent with its effects confirmed and its lease renewed at `now_ms`.
fn confirmed(intent: &Intent, now_ms: TimestampMs) -> Intent {
    Intent {
        phase: IntentPhase::EffectsConfirmed,
        lease_expires_at_ms: now_ms + 30_000,
        updated_at_ms: now_ms,
        ..intent.clone()
    }
}

async fn intents(catalog: &PostgresCatalog, dataset_id: &str) -> Vec<Intent> {
    catalog
        .list_intents(dataset_id)
        .await
        .expect("list intents")
}

fn is_intent_not_found(error: &MendError, operation_id: &str) -> bool {
    matches!(
        error,
        MendError::NotFound { kind: EntityKind::Intent, ids } if *ids == [operation_id]
    )
}

fn is_dataset_not_found(error: &MendError) -> bool {
    matches!(
        error,
        MendError::NotFound {
            kind: EntityKind::Dataset,
            ..
        }
    )
}

#[tokio::test]
async fn a_put_intent_is_listed_and_its_operation_id_is_taken() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    assert!(intents(&catalog, &dataset_id).await.is_empty());

    let first = intent(&dataset_id, "op-1", 2_000);
    catalog.put_intent(&first).await.unwrap();
    assert_eq!(
        intents(&catalog, &dataset_id).await,
        std::slice::from_ref(&first)
    );

    let again = Intent {
        owner: "node-2".to_string(),
        ..intent(&dataset_id, "op-1", 3_000)
    };
    let taken = catalog.put_intent(&again).await.unwrap_err();
    assert!(
        matches!(&taken, MendError::AlreadyExists { kind: EntityKind::Intent, id } if id == "op-1"),
        "{taken:?}"
    );
    assert_eq!(
        intents(&catalog, &dataset_id).await,
        std::slice::from_ref(&first)
    );

    // The same operation id in another dataset is another intent.
    let other_dataset_id = new_dataset(&catalog).await;
    let elsewhere = intent(&other_dataset_id, "op-1", 2_000);
    catalog.put_intent(&elsewhere).await.unwrap();
    assert_eq!(intents(&catalog, &other_dataset_id).await, [elsewhere]);
    assert_eq!(intents(&catalog, &dataset_id).await, [first]);
}

#[tokio::test]
async fn intents_are_listed_oldest_first_then_by_operation_id() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    // Written out of order; "B" sorts before "a" in byte order, as Rust compares strings.
    for (operation_id, created_at_ms) in [("c", 3_000), ("a", 2_000), ("B", 2_000), ("d", 1_000)] {
        catalog
            .put_intent(&intent(&dataset_id, operation_id, created_at_ms))
            .await
            .unwrap();
    }
    let order: Vec<String> = intents(&catalog, &dataset_id)
        .await
        .into_iter()
        .map(|intent| intent.operation_id)
        .collect();
    assert_eq!(order, ids(&["d", "B", "a", "c"]));
}

#[tokio::test]
async fn intents_of_an_unknown_dataset_are_not_found() {
    let catalog = catalog().await;
    let dataset_id = unique_id("no-such-dataset");
    let put = catalog
        .put_intent(&intent(&dataset_id, "op-1", 2_000))
        .await
        .unwrap_err();
    assert!(is_dataset_not_found(&put), "{put:?}");
    let listed = catalog.list_intents(&dataset_id).await.unwrap_err();
    assert!(is_dataset_not_found(&listed), "{listed:?}");
    let updated = catalog
        .update_intent(&intent(&dataset_id, "op-1", 2_000), IntentPhase::Armed)
        .await
        .unwrap_err();
    assert!(is_dataset_not_found(&updated), "{updated:?}");
    let deleted = catalog
        .delete_intent(&dataset_id, "op-1", 0)
        .await
        .unwrap_err();
    assert!(is_dataset_not_found(&deleted), "{deleted:?}");
}

#[tokio::test]
async fn an_intent_in_another_format_is_not_written() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let stored = intent(&dataset_id, "op-1", 2_000);
    catalog.put_intent(&stored).await.unwrap();

    for format_version in [0, INTENT_FORMAT_VERSION + 1] {
        let put = catalog
            .put_intent(&Intent {
                format_version,
                ..intent(&dataset_id, "op-2", 2_000)
            })
            .await
            .unwrap_err();
        assert!(matches!(put, MendError::InvalidArgument { .. }), "{put:?}");
        let updated = catalog
            .update_intent(
                &Intent {
                    format_version,
                    ..confirmed(&stored, 3_000)
                },
                IntentPhase::Armed,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(updated, MendError::InvalidArgument { .. }),
            "{updated:?}"
        );
    }
    assert_eq!(intents(&catalog, &dataset_id).await, [stored]);
}

#[tokio::test]
async fn an_update_replaces_the_intent_only_from_the_expected_phase() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let armed = intent(&dataset_id, "op-1", 2_000);
    catalog.put_intent(&armed).await.unwrap();

    // Renewing the lease keeps the phase.
    let renewed = Intent {
        lease_expires_at_ms: 40_000,
        updated_at_ms: 2_500,
        ..armed.clone()
    };
    catalog
        .update_intent(&renewed, IntentPhase::Armed)
        .await
        .unwrap();
    assert_eq!(
        intents(&catalog, &dataset_id).await,
        std::slice::from_ref(&renewed)
    );

    // Confirmed from the intent as read before the renewal: the renewed lease stays (a lease
    // never moves back).
    let effects_confirmed = Intent {
        lease_expires_at_ms: renewed.lease_expires_at_ms,
        ..confirmed(&armed, 3_000)
    };
    catalog
        .update_intent(&confirmed(&armed, 3_000), IntentPhase::Armed)
        .await
        .unwrap();
    assert_eq!(
        intents(&catalog, &dataset_id).await,
        std::slice::from_ref(&effects_confirmed)
    );

    // A second writer still believing the intent armed is refused, and changes nothing.
    let stale = Intent {
        owner: "node-2".to_string(),
        ..renewed
    };
    let refused = catalog
        .update_intent(&stale, IntentPhase::Armed)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &refused,
            MendError::FailedPrecondition { message, ids, .. }
                if *ids == ["op-1"] && message.contains("effects_confirmed")
        ),
        "{refused:?}"
    );
    assert_eq!(
        intents(&catalog, &dataset_id).await,
        std::slice::from_ref(&effects_confirmed)
    );

    // Replacing an intent with itself succeeds and writes nothing: the row keeps the id of
    // the transaction that wrote it.
    let written_by = row_version(&catalog, &dataset_id, "op-1").await;
    catalog
        .update_intent(&effects_confirmed, IntentPhase::EffectsConfirmed)
        .await
        .unwrap();
    assert_eq!(intents(&catalog, &dataset_id).await, [effects_confirmed]);
    assert_eq!(row_version(&catalog, &dataset_id, "op-1").await, written_by);
}

/// The id of the transaction that last wrote the intent's row (`xmin`).
async fn row_version(catalog: &PostgresCatalog, dataset_id: &str, operation_id: &str) -> String {
    sqlx::query_scalar("SELECT xmin::text FROM intents WHERE dataset_id = $1 AND operation_id = $2")
        .bind(dataset_id)
        .bind(operation_id)
        .fetch_one(&catalog.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_missing_intent_cannot_be_updated_or_deleted() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let missing = intent(&dataset_id, "op-missing", 2_000);
    let updated = catalog
        .update_intent(&missing, IntentPhase::Armed)
        .await
        .unwrap_err();
    assert!(is_intent_not_found(&updated, "op-missing"), "{updated:?}");
    let deleted = catalog
        .delete_intent(&dataset_id, "op-missing", 0)
        .await
        .unwrap_err();
    assert!(is_intent_not_found(&deleted, "op-missing"), "{deleted:?}");
    assert!(intents(&catalog, &dataset_id).await.is_empty());
}

#[tokio::test]
async fn a_deleted_intent_is_gone() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let stored = intent(&dataset_id, "op-1", 2_000);
    catalog.put_intent(&stored).await.unwrap();
    catalog.delete_intent(&dataset_id, "op-1", 0).await.unwrap();
    assert!(intents(&catalog, &dataset_id).await.is_empty());

    let again = catalog
        .delete_intent(&dataset_id, "op-1", 0)
        .await
        .unwrap_err();
    assert!(is_intent_not_found(&again, "op-1"), "{again:?}");
    let updated = catalog
        .update_intent(&confirmed(&stored, 3_000), IntentPhase::Armed)
        .await
        .unwrap_err();
    assert!(is_intent_not_found(&updated, "op-1"), "{updated:?}");

    // The operation id is free again.
    catalog.put_intent(&stored).await.unwrap();
    assert_eq!(intents(&catalog, &dataset_id).await, [stored]);
}

#[tokio::test]
async fn an_intent_in_a_newer_format_is_refused_when_listed() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    catalog
        .put_intent(&intent(&dataset_id, "op-1", 2_000))
        .await
        .unwrap();

    // As a newer mend would write it: a higher version, and a plan this host cannot decode.
    sqlx::query(
        "INSERT INTO intents (dataset_id, operation_id, format_version, phase, kind, owner, \
         lease_expires_at_ms, created_at_ms, updated_at_ms, planned, body) \
         VALUES ($1, 'op-2', $2, 'armed', 'commit', 'node-1', 33000, 3000, 3000, '\\xff00', \
         jsonb_build_object('format_version', $2))",
    )
    .bind(&dataset_id)
    .bind(i32::try_from(INTENT_FORMAT_VERSION + 1).unwrap())
    .execute(&catalog.pool)
    .await
    .unwrap();

    let error = catalog.list_intents(&dataset_id).await.unwrap_err();
    assert!(
        matches!(&error, MendError::Corrupt { message }
            if message.contains("newer mend")
                && message.contains(&format!("format version {}", INTENT_FORMAT_VERSION + 1))),
        "{error:?}"
    );
}

/// A row as `intent_insert.sql` wrote it before format 3: the whole intent as a JSONB body,
/// and copies of its format, phase and creation time.
async fn insert_as_before_format_3(catalog: &PostgresCatalog, intent: &Intent) {
    sqlx::query(
        "INSERT INTO intents (dataset_id, operation_id, format_version, phase, body, created_at_ms) \
         VALUES ($1, $2, $3, $4, $5::jsonb, $6)",
    )
    .bind(&intent.dataset_id)
    .bind(&intent.operation_id)
    .bind(i32::try_from(intent.format_version).unwrap())
    .bind(super::super::intents::phase_name(intent.phase))
    .bind(intent.to_json())
    .bind(intent.created_at_ms)
    .execute(&catalog.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn intents_an_older_mend_wrote_are_read_renewed_confirmed_and_abandoned() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let format_1 = Intent {
        format_version: 1,
        lease_expires_at_ms: 12_000,
        ..intent(&dataset_id, "op-1", 1_000)
    };
    let format_2 = Intent {
        format_version: 2,
        kind: OperationKind::ConfigApply,
        effects: PlannedEffects {
            config: Some(DatasetConfig::default()),
            ..PlannedEffects::default()
        },
        expected: ExpectedState {
            manifest_version: 4,
            split_states: Vec::new(),
            config_version: Some(2),
        },
        ..intent(&dataset_id, "op-2", 2_000)
    };
    insert_as_before_format_3(&catalog, &format_1).await;
    insert_as_before_format_3(&catalog, &format_2).await;
    assert_eq!(
        intents(&catalog, &dataset_id).await,
        [format_1.clone(), format_2.clone()]
    );
    let pending = catalog.pending_datasets().await.unwrap();
    let ours = pending
        .iter()
        .find(|pending| pending.dataset_id == dataset_id)
        .unwrap();
    assert_eq!(
        (ours.intents, ours.earliest_lease_expiry_ms),
        (Some(2), Some(12_000)),
        "the leases are read from the bodies"
    );

    // Confirmed from the intent as read, with an earlier lease than the stored one: written in
    // format 3, keeping the body's lease.
    let confirmed = Intent {
        phase: IntentPhase::EffectsConfirmed,
        lease_expires_at_ms: 31_000,
        updated_at_ms: 2_500,
        ..format_2.clone()
    };
    catalog
        .update_intent(
            &Intent {
                lease_expires_at_ms: 1,
                ..confirmed.clone()
            },
            IntentPhase::Armed,
        )
        .await
        .unwrap();
    let confirmed = Intent {
        format_version: INTENT_FORMAT_VERSION,
        lease_expires_at_ms: format_2.lease_expires_at_ms,
        ..confirmed
    };
    assert_eq!(
        intents(&catalog, &dataset_id).await,
        [format_1.clone(), confirmed.clone()]
    );
    let (format_version, body): (i32, String) = sqlx::query_as(
        "SELECT format_version, body::text FROM intents WHERE dataset_id = $1 AND operation_id = 'op-2'",
    )
    .bind(&dataset_id)
    .fetch_one(&catalog.pool)
    .await
    .unwrap();
    assert_eq!(
        (format_version, body.as_str()),
        (3, r#"{"format_version": 3}"#),
        "the body of a format 3 row holds its version only"
    );

    // Abandoned where it stands: the body edited in place, as format 2 (which knows the phase).
    let abandoned = catalog
        .abandon_intent(&dataset_id, "op-1", Some(12_000), 13_000)
        .await
        .unwrap();
    let expected = Intent {
        format_version: 2,
        phase: IntentPhase::Abandoned,
        updated_at_ms: 13_000,
        ..format_1
    };
    assert_eq!(abandoned, expected);
    assert_eq!(
        intents(&catalog, &dataset_id).await,
        [expected.clone(), confirmed.clone()]
    );
    // Again: nothing changes, the same answer.
    assert_eq!(
        catalog
            .abandon_intent(&dataset_id, "op-1", None, 14_000)
            .await
            .unwrap(),
        expected
    );
    catalog.delete_intent(&dataset_id, "op-1", 0).await.unwrap();
    assert_eq!(intents(&catalog, &dataset_id).await, [confirmed]);
}

#[tokio::test]
async fn a_mend_from_before_format_3_refuses_a_format_3_row_and_cannot_write_it() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let stored = intent(&dataset_id, "op-1", 2_000);
    catalog.put_intent(&stored).await.unwrap();

    // It reads only the body, and its `Intent::from_json` refuses any format above 2 (its
    // newest) as written by a newer mend, before it looks at another field: the body names 3.
    let body: serde_json::Value = sqlx::query_scalar(
        "SELECT body FROM intents WHERE dataset_id = $1 AND operation_id = 'op-1'",
    )
    .bind(&dataset_id)
    .fetch_one(&catalog.pool)
    .await
    .unwrap();
    assert_eq!(body, json!({ "format_version": 3 }));
    assert_eq!(INTENT_FORMAT_VERSION, 3);

    // Its update, word for word, from an intent it read before the row changed: refused by
    // the table, not written over the columns.
    let old_update = "UPDATE intents SET phase = $4, format_version = $5, body = $6::jsonb, \
        created_at_ms = $7 WHERE dataset_id = $1 AND operation_id = $2 AND phase = $3 \
        AND body <> $6::jsonb RETURNING operation_id";
    let written = sqlx::query(old_update)
        .bind(&dataset_id)
        .bind("op-1")
        .bind("armed")
        .bind("effects_confirmed")
        .bind(2)
        .bind(
            Intent {
                format_version: 2,
                ..confirmed(&stored, 3_000)
            }
            .to_json(),
        )
        .bind(2_000_i64)
        .fetch_optional(&catalog.pool)
        .await;
    let error = written.unwrap_err();
    assert!(
        error.to_string().contains("intents_stored_form_check"),
        "{error}"
    );
    assert_eq!(intents(&catalog, &dataset_id).await, [stored]);
}

#[tokio::test]
async fn a_damaged_plan_is_corrupt_naming_the_intent() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    catalog
        .put_intent(&intent(&dataset_id, "op-1", 2_000))
        .await
        .unwrap();
    sqlx::query(
        "UPDATE intents SET planned = substring(planned from 1 for 3) \
         WHERE dataset_id = $1 AND operation_id = 'op-1'",
    )
    .bind(&dataset_id)
    .execute(&catalog.pool)
    .await
    .unwrap();
    let error = catalog.list_intents(&dataset_id).await.unwrap_err();
    assert!(
        matches!(&error, MendError::Corrupt { message }
            if message.contains("intent op-1") && message.contains("unreadable")),
        "{error:?}"
    );
}

#[tokio::test]
async fn intents_leave_the_published_view_alone() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let before = catalog.dataset(&dataset_id).await.unwrap();

    let armed = intent(&dataset_id, "op-1", 2_000);
    catalog.put_intent(&armed).await.unwrap();
    catalog
        .update_intent(&confirmed(&armed, 3_000), IntentPhase::Armed)
        .await
        .unwrap();
    assert_eq!(catalog.dataset(&dataset_id).await.unwrap(), before);
    catalog.delete_intent(&dataset_id, "op-1", 0).await.unwrap();
    assert_eq!(catalog.dataset(&dataset_id).await.unwrap(), before);
}

#[tokio::test]
async fn racing_writers_of_one_intent_have_exactly_one_winner() {
    let catalog = catalog().await;
    let dataset_id = new_dataset(&catalog).await;
    let writers: Vec<String> = (0..8).map(|node| format!("node-{node}")).collect();

    let puts = writers.iter().map(|owner| {
        let intent = Intent {
            owner: owner.clone(),
            ..intent(&dataset_id, "op-1", 2_000)
        };
        let catalog = &catalog;
        async move { catalog.put_intent(&intent).await }
    });
    let put_results = futures::future::join_all(puts).await;
    let put_winners = put_results.iter().filter(|result| result.is_ok()).count();
    assert_eq!(put_winners, 1, "{put_results:?}");
    assert!(
        put_results.iter().all(|result| match result {
            Ok(()) => true,
            Err(error) => matches!(error, MendError::AlreadyExists { .. }),
        }),
        "{put_results:?}"
    );
    let armed = intents(&catalog, &dataset_id).await.remove(0);

    let confirms = writers.iter().map(|owner| {
        let intent = Intent {
            owner: owner.clone(),
            ..confirmed(&armed, 3_000)
        };
        let catalog = &catalog;
        async move {
            let result = catalog.update_intent(&intent, IntentPhase::Armed).await;
            (intent, result)
        }
    });
    let confirm_results = futures::future::join_all(confirms).await;
    let winners: Vec<&Intent> = confirm_results
        .iter()
        .filter(|(_, result)| result.is_ok())
        .map(|(intent, _)| intent)
        .collect();
    assert_eq!(winners.len(), 1, "{confirm_results:?}");
    assert!(
        confirm_results.iter().all(|(_, result)| match result {
            Ok(()) => true,
            Err(error) => matches!(error, MendError::FailedPrecondition { .. }),
        }),
        "{confirm_results:?}"
    );
    assert_eq!(intents(&catalog, &dataset_id).await, [winners[0].clone()]);
}

//! The trail of writes ([`mend::catalog::write_audit`]) at the catalog trait itself: inside a
//! scope every write records itself in its own step, naming the scope's principal and request,
//! the step, its ids and its answer; a write that fails, a retry answered from its key and a
//! write outside any scope record nothing.

use mend::MendError;
use mend::catalog::CatalogExt;
use mend::catalog::write_audit::{self, WriteRecord, WriteScope};
use mend::intent::IntentPhase;

use super::intents::intent;
use super::publish_request;
use super::recorded::{accept, key, stage_keyed};
use crate::harness::Harness;

fn scope(principal: &str, kind: &str) -> WriteScope {
    WriteScope {
        principal: Some(principal.into()),
        kind: kind.into(),
        operation_id: Some("op-w".into()),
    }
}

async fn trail(h: &Harness<'_>, dataset_id: &str) -> Vec<WriteRecord> {
    h.engine
        .catalog()
        .list_write_audit(dataset_id, None)
        .await
        .expect("list the write records")
}

/// The records after the first `skip`, as (step, ids) pairs.
fn steps(records: &[WriteRecord], skip: usize) -> Vec<(String, Vec<String>)> {
    records[skip..]
        .iter()
        .map(|record| (record.step.clone(), record.what.ids.clone()))
        .collect()
}

fn pair(step: &str, ids: &[&str]) -> (String, Vec<String>) {
    (step.into(), ids.iter().map(|id| id.to_string()).collect())
}

/// Over 100 lines: one script against one dataset, each check under the step it checks.
pub(super) async fn every_write_of_a_scope_is_recorded_in_its_step(h: &Harness<'_>) {
    let catalog = h.engine.catalog();
    let catalog = catalog.as_ref();
    let ds = h.create_dataset("writes").await;
    let now = h.clock_now();
    let start = trail(h, &ds).await.len();
    let mut checked = 0;

    // Outside a scope: a write records nothing.
    stage_keyed(catalog, &ds, &["outside"], now, None)
        .await
        .unwrap();
    assert_eq!(trail(h, &ds).await.len(), start, "a write outside a scope");
    checked += 1;

    // Inside: each step records itself, with the scope's principal, request and operation.
    let writer = scope("writer-1", "stage");
    let ids = super::strings(&["a", "b"]);
    write_audit::within(writer.clone(), async {
        stage_keyed(catalog, &ds, &["a", "b"], now + 1, None)
            .await
            .unwrap();
        catalog
            .publish(&publish_request(&ds, &["a"], &[]), &accept, now + 2, None)
            .await
            .unwrap();
        catalog
            .mark_for_deletion(&ds, &ids, now + 3, None)
            .await
            .unwrap();
        catalog.see_marks(&ds, &ids, now + 4).await.unwrap();
        catalog
            .delete_splits(&ds, &ids, now + 5, None)
            .await
            .unwrap();
        catalog
            .set_publish_token(&ds, Some("token-1"), now + 6, None)
            .await
            .unwrap();
        let armed = intent(&ds, "op-1", now + 7);
        catalog.put_intent(&armed).await.unwrap();
        catalog
            .abandon_intent(&ds, "op-1", None, now + 8)
            .await
            .unwrap();
        catalog.delete_intent(&ds, "op-1", now + 9).await.unwrap();
    })
    .await;
    let records = trail(h, &ds).await;
    assert_eq!(
        steps(&records, start),
        [
            pair("stage", &["a", "b"]),
            pair("publish", &["a"]),
            pair("mark", &["a", "b"]),
            pair("see-marks", &["a", "b"]),
            pair("delete-splits", &["a", "b"]),
            pair("update-dataset", &[]),
            pair("put-intent", &["op-1"]),
            pair("abandon-intent", &["op-1"]),
            pair("delete-intent", &["op-1"]),
        ],
        "one record per write, in order"
    );
    checked += 1;
    for record in &records[start..] {
        assert_eq!(record.principal.as_deref(), Some("writer-1"));
        assert_eq!(record.kind, "stage");
        assert_eq!(record.operation_id.as_deref(), Some("op-w"));
        assert_eq!(record.dataset_id, ds);
        assert_eq!(record.format_version, write_audit::WRITE_FORMAT_VERSION);
        checked += 5;
    }
    let staged = &records[start];
    assert_eq!(staged.what.count, 2);
    assert_eq!(
        staged.answer,
        serde_json::json!({"inserted": 2, "overwritten": 0, "skipped": 0})
    );
    let published = &records[start + 1];
    assert_eq!(published.answer["published"], serde_json::json!(["a"]));
    assert!(published.recorded_at_ms >= now + 2, "the step's own time");
    checked += 3;
    let recorded = records.len();

    // A write that fails records nothing; so does a retry answered from its key, and a step
    // that changes nothing.
    let failing = write_audit::within(writer.clone(), async {
        catalog
            .publish(
                &publish_request(&ds, &["missing"], &[]),
                &accept,
                now + 10,
                None,
            )
            .await
    })
    .await;
    assert!(
        matches!(
            failing,
            Err(MendError::FailedPrecondition { .. } | MendError::NotFound { .. })
        ),
        "{failing:?}"
    );
    let staging = key("stage-w", "stage", &["c"]);
    write_audit::within(writer.clone(), async {
        stage_keyed(catalog, &ds, &["c"], now + 11, Some(&staging))
            .await
            .unwrap();
        stage_keyed(catalog, &ds, &["c"], now + 12, Some(&staging))
            .await
            .unwrap();
        let wrong_phase = catalog
            .update_intent(&intent(&ds, "op-none", now + 12), IntentPhase::Armed)
            .await;
        assert!(wrong_phase.is_err(), "{wrong_phase:?}");
    })
    .await;
    let records = trail(h, &ds).await;
    assert_eq!(
        steps(&records, recorded),
        [pair("stage", &["c"])],
        "only the first keyed stage wrote"
    );
    checked += 2;

    // Many ids are recorded as their count and digest; a record of its own (an object write)
    // lists with the rest.
    let many: Vec<String> = (0..50).map(|n| format!("m{n:02}")).collect();
    let many_refs: Vec<&str> = many.iter().map(String::as_str).collect();
    write_audit::within(scope("writer-2", "upload"), async {
        stage_keyed(catalog, &ds, &many_refs, now + 13, None)
            .await
            .unwrap();
        let object = write_audit::pending(&ds, "upload", || ["m00"]).expect("in a scope");
        catalog
            .record_write(&object.answered(&"uploaded", now + 14))
            .await
            .unwrap();
    })
    .await;
    let records = trail(h, &ds).await;
    let [.., bulk, upload] = records.as_slice() else {
        panic!("two more records: {records:?}");
    };
    assert_eq!((bulk.what.count, bulk.what.ids.len()), (50, 0));
    assert!(bulk.what.digest.as_deref().unwrap().starts_with("sha256:"));
    assert_eq!(bulk.answer["inserted"], 50);
    assert_eq!(
        (upload.step.as_str(), upload.principal.as_deref()),
        ("upload", Some("writer-2"))
    );
    checked += 5;

    // The newest n, oldest first; an unknown dataset is NotFound.
    let newest = catalog.list_write_audit(&ds, Some(2)).await.unwrap();
    assert_eq!(newest, records[records.len() - 2..]);
    let missing = catalog
        .list_write_audit(&h.unique_dataset_id("no-such"), None)
        .await
        .unwrap_err();
    assert!(matches!(missing, MendError::NotFound { .. }), "{missing:?}");
    checked += 2;
    let kinds: std::collections::BTreeSet<&str> = records[start..]
        .iter()
        .map(|record| record.step.as_str())
        .collect();
    println!(
        "conformance[{}] write records: {} records of {} kinds of step, {checked} checks",
        h.name(),
        records.len() - start,
        kinds.len()
    );
}

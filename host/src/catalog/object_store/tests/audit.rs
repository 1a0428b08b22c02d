//! Audit trails and the catalog-wide index of audit objects (`audit.rs`, `audit_index.rs`): an
//! append's entries go before its objects; the newest records of every dataset come from the
//! newest entries only, at a cost that does not grow with the datasets; an entry whose object
//! was never written, and a damaged object, are passed over; a catalog from before the index
//! (objects of format 1 and 2, no entries) is read from every trail until the index covers the
//! newest records; a store that lists out of order gives the same answer.

use futures::FutureExt;

use super::*;
use crate::audit::{AUDIT_FORMAT_VERSION, AuditRecord};
use crate::catalog::recent_audit::every_dataset;
use crate::hooked_store::{HookedStore, unanswered};

fn record(dataset_id: &str, operation_id: &str, recorded_at_ms: TimestampMs) -> AuditRecord {
    AuditRecord {
        format_version: AUDIT_FORMAT_VERSION,
        dataset_id: dataset_id.to_string(),
        operation_id: operation_id.to_string(),
        recorded_at_ms,
        mode: "roll-forward".to_string(),
        policy_digest: "sha256:policy".to_string(),
        semantics_revision: 1,
        inputs_hash: "sha256:inputs".to_string(),
        decision: serde_json::json!("roll-forward"),
        outcome: serde_json::json!({ "outcome": "executed" }),
        inputs: None,
        principal: None,
    }
}

fn operation_ids(records: &[AuditRecord]) -> Vec<String> {
    records
        .iter()
        .map(|record| record.operation_id.clone())
        .collect()
}

async fn create(catalog: &ObjectStoreCatalog, dataset_id: &str) {
    catalog
        .create_dataset(dataset_id, "uid", &DatasetConfig::default(), T0, None)
        .await
        .unwrap();
}

/// `datasets` datasets, `ds-0000` on, each with two appends of one record, as a sweep of one
/// decision leaves them (`executing`, then settled): dataset `i`'s at `T0 + 10 i` and one
/// millisecond later, operations `{i}-executing` and `{i}-settled`.
async fn sweeps_in(catalog: &ObjectStoreCatalog, datasets: usize) {
    for i in 0..datasets {
        let dataset_id = format!("ds-{i:04}");
        create(catalog, &dataset_id).await;
        let at = T0 + 10 * i as TimestampMs;
        for (operation, offset) in [("executing", 0), ("settled", 1)] {
            let appended = record(&dataset_id, &format!("{i}-{operation}"), at + offset);
            catalog
                .append_audit(&dataset_id, &[appended])
                .await
                .unwrap();
        }
    }
}

/// What one `list_recent_audit(limit)` read: its GETs, its listings and the entries they
/// answered with.
async fn recent_counted(
    catalog: &ObjectStoreCatalog,
    store: &CountingStore,
    limit: usize,
) -> (Vec<AuditRecord>, Vec<String>, Vec<String>, u64) {
    store.take_gets();
    store.take_lists();
    store.take_listed();
    let recent = catalog.list_recent_audit(limit).await.unwrap();
    assert!(recent.unreadable.is_empty(), "{:?}", recent.unreadable);
    (
        recent.records,
        store.take_gets(),
        store.take_lists(),
        store.take_listed(),
    )
}

#[tokio::test]
async fn an_append_puts_each_objects_index_entry_before_it() {
    let store = Arc::new(HookedStore::default());
    let catalog = ObjectStoreCatalog::new(
        store.clone(),
        Path::from("mend"),
        ObjectStoreCatalogOptions::default(),
    );
    create(&catalog, "logs").await;
    let before = store.puts().len();
    // 2,500 records: three objects of 1,000, 1,000 and 500, oldest first.
    let records: Vec<AuditRecord> = (0..2_500)
        .map(|i| record("logs", &format!("op-{i}"), T0 + i))
        .collect();
    catalog.append_audit("logs", &records).await.unwrap();

    let puts = store.puts()[before..].to_vec();
    assert_eq!(puts.len(), 6, "{puts:#?}");
    for (pair, (count, oldest)) in puts
        .chunks(2)
        .zip([(1_000, 0), (1_000, 1_000), (500, 2_000)])
    {
        let newest = oldest + count - 1;
        let entry = pair[0]
            .strip_prefix("mend/index/audit/")
            .and_then(super::super::audit_index::IndexEntry::parse)
            .unwrap_or_else(|| panic!("{} is not an index entry", pair[0]));
        assert_eq!(
            (
                entry.span.newest_ms,
                entry.span.oldest_ms,
                entry.span.records
            ),
            (T0 + newest, T0 + oldest, count as usize)
        );
        assert_eq!(
            pair[1],
            format!(
                "mend/datasets/logs/audit/{:020}-{}.json",
                T0 + newest,
                entry.append_id
            ),
            "the object after its entry"
        );
    }
    assert_eq!(catalog.list_audit("logs", None).await.unwrap(), records);
    let recent = catalog.list_recent_audit(1_200).await.unwrap();
    assert_eq!(recent.records, records[1_300..]);
    println!(
        "audit index: 3 objects of 2,500 records, each after its entry; 1,200 newest read back"
    );
}

#[tokio::test]
async fn the_newest_records_cost_the_same_reads_at_20_and_at_400_datasets() {
    let options = ObjectStoreCatalogOptions {
        store_lists_in_order: true,
        ..ObjectStoreCatalogOptions::default()
    };
    let mut costs = Vec::new();
    for datasets in [20, 400] {
        let (catalog, store) = counted_catalog(options.clone());
        sweeps_in(&catalog, datasets).await;
        // The index's start is read once per instance: read it before counting.
        catalog.list_recent_audit(1).await.unwrap();

        let (records, gets, lists, listed) = recent_counted(&catalog, &store, 6).await;
        let newest: Vec<String> = (datasets - 3..datasets)
            .flat_map(|i| [format!("{i}-executing"), format!("{i}-settled")])
            .collect();
        assert_eq!(operation_ids(&records), newest);
        // The default, which reads every dataset's trail, agrees.
        let every = every_dataset(&catalog, 6).await.unwrap();
        assert_eq!(every.records, records);

        // One listing of the index, read up to the entry after the six it takes, and one GET
        // of each of the six objects: nothing of any other dataset.
        assert_eq!(lists, ["mend/index/audit"]);
        assert_eq!(listed, 7);
        assert_eq!(gets.len(), 6, "{gets:#?}");
        for i in datasets - 3..datasets {
            let named = format!("mend/datasets/ds-{i:04}/audit/");
            assert_eq!(gets.iter().filter(|get| get.starts_with(&named)).count(), 2);
        }
        costs.push((gets.len(), lists.len(), listed));
    }
    assert_eq!(costs[0], costs[1], "the cost grew with the datasets");
    println!(
        "audit index: the newest 6 records at 20 and at 400 datasets: {} GETs, {} listing, {} entries listed each time",
        costs[0].0, costs[0].1, costs[0].2
    );
}

#[tokio::test]
async fn an_entry_whose_object_was_never_written_is_passed_over() {
    let store = Arc::new(HookedStore::default());
    let options = ObjectStoreCatalogOptions {
        store_lists_in_order: true,
        ..ObjectStoreCatalogOptions::default()
    };
    let catalog = ObjectStoreCatalog::new(store.clone(), Path::from("mend"), options);
    create(&catalog, "logs").await;
    for (operation, at) in [("op-1", T0 + 1), ("op-2", T0 + 2)] {
        catalog
            .append_audit("logs", &[record("logs", operation, at)])
            .await
            .unwrap();
    }
    // A process stops between the entry and the object of the newest append.
    store.set_before_put(|path| {
        let object = path.as_ref().contains("/audit/") && !path.as_ref().contains("index/");
        async move { object.then(unanswered) }.boxed()
    });
    let failed = catalog
        .append_audit("logs", &[record("logs", "op-3", T0 + 3)])
        .await
        .unwrap_err();
    assert!(
        matches!(failed, MendError::Unavailable { .. }),
        "{failed:?}"
    );
    assert_eq!(
        store.puts_containing("index/audit/"),
        3,
        "its entry was written"
    );

    let recent = catalog.list_recent_audit(2).await.unwrap();
    assert_eq!(operation_ids(&recent.records), ["op-1", "op-2"]);
    assert!(recent.unreadable.is_empty());
}

#[tokio::test]
async fn a_damaged_object_is_named_and_the_records_before_it_listed() {
    let options = ObjectStoreCatalogOptions {
        store_lists_in_order: true,
        ..ObjectStoreCatalogOptions::default()
    };
    let (catalog, store) = counted_catalog(options);
    sweeps_in(&catalog, 3).await;
    let damaged = catalog
        .store()
        .list(Some(&Path::from("mend/datasets/ds-0002/audit")))
        .map(|meta| meta.unwrap().location)
        .collect::<Vec<_>>()
        .await;
    store
        .put(
            &damaged[1],
            PutPayload::from_static(b"{\"format_version\": 2, \"recor"),
        )
        .await
        .unwrap();

    let recent = catalog.list_recent_audit(2).await.unwrap();
    assert_eq!(
        operation_ids(&recent.records),
        ["1-settled", "2-executing"],
        "the damaged object's record left out, one more found further back"
    );
    assert_eq!(recent.unreadable.len(), 1);
    let (dataset_id, why) = &recent.unreadable[0];
    assert_eq!(dataset_id, "ds-0002");
    assert!(why.contains("unreadable"), "{why}");
}

#[tokio::test]
async fn a_catalog_from_before_the_index_is_read_from_every_trail_until_the_index_covers_the_newest()
 {
    let (old, _) = counted_catalog(ObjectStoreCatalogOptions::default());
    for dataset_id in ["old-a", "old-b"] {
        create(&old, dataset_id).await;
    }
    // What an older mend left: no index, and audit objects of both formats.
    for meta in old
        .store()
        .list(Some(&Path::from("mend/index")))
        .collect::<Vec<_>>()
        .await
    {
        old.store().delete(&meta.unwrap().location).await.unwrap();
    }
    let plant = |path: String, body: Vec<u8>| {
        let store = old.store().clone();
        async move {
            store
                .put(&Path::from(path), PutPayload::from(body))
                .await
                .unwrap()
        }
    };
    // Format 1: one record an object.
    for (index, (operation, at)) in [("a-1", T0 + 1), ("a-3", T0 + 3)].into_iter().enumerate() {
        let body = serde_json::to_vec(&record("old-a", operation, at)).unwrap();
        let name = format!("{at:020}-0190a1b2c3d4e5f60718293a4b5c6d7e-{index:06}.json");
        plant(format!("mend/datasets/old-a/audit/{name}"), body).await;
    }
    // Format 2: a batch, with no entry.
    let batch = [
        record("old-b", "b-2", T0 + 2),
        record("old-b", "b-4", T0 + 4),
    ];
    let name = format!("{:020}-0190a1b2c3d4e5f60718293a4b5c6d7f.json", T0 + 4);
    plant(
        format!("mend/datasets/old-b/audit/{name}"),
        crate::audit::encode_batch(&batch),
    )
    .await;

    // A newer mend opens it: with no index, every trail is read.
    let options = ObjectStoreCatalogOptions {
        store_lists_in_order: true,
        ..ObjectStoreCatalogOptions::default()
    };
    let store = CountingStore::new(old.store().clone());
    let newer = ObjectStoreCatalog::new(store.clone(), Path::from("mend"), options);
    let (records, _, lists, _) = recent_counted(&newer, &store, 3).await;
    assert_eq!(operation_ids(&records), ["b-2", "a-3", "b-4"]);
    assert!(
        lists.contains(&"mend/datasets/old-a/audit".to_string()),
        "{lists:?}"
    );

    // Its first append starts the index: everything after its newest record has an entry.
    for (operation, at) in [("n-1", T0 + 100), ("n-2", T0 + 101), ("n-3", T0 + 102)] {
        newer
            .append_audit("old-a", &[record("old-a", operation, at)])
            .await
            .unwrap();
    }
    // The newest two are newer than the start: the index answers alone.
    let (records, gets, lists, _) = recent_counted(&newer, &store, 2).await;
    assert_eq!(operation_ids(&records), ["n-2", "n-3"]);
    assert_eq!(lists, ["mend/index/audit"]);
    assert_eq!(gets.len(), 3, "the start and two objects: {gets:#?}");
    // Three or more reach back to the start: every trail again, and the same answer as the
    // default.
    for (limit, newest) in [
        (3, vec!["n-1", "n-2", "n-3"]),
        (5, vec!["a-3", "b-4", "n-1", "n-2", "n-3"]),
        (100, vec!["a-1", "b-2", "a-3", "b-4", "n-1", "n-2", "n-3"]),
    ] {
        let (records, _, lists, _) = recent_counted(&newer, &store, limit).await;
        assert_eq!(operation_ids(&records), newest, "limit {limit}");
        assert!(
            lists.contains(&"mend/datasets/old-b/audit".to_string()),
            "{lists:?}"
        );
    }
    println!(
        "audit index: a catalog from before it, read from its 2 trails until 2 records after its start"
    );
}

#[tokio::test]
async fn the_index_starts_with_the_first_dataset_or_says_since_when() {
    let start_of = |catalog: &ObjectStoreCatalog| {
        let store = catalog.store().clone();
        async move {
            let found = store
                .get(&Path::from("mend/index/audit-start"))
                .await
                .unwrap();
            serde_json::from_slice::<serde_json::Value>(&found.bytes().await.unwrap()).unwrap()
        }
    };
    let (fresh, _) = counted_catalog(ObjectStoreCatalogOptions::default());
    create(&fresh, "logs").await;
    assert_eq!(
        start_of(&fresh).await,
        serde_json::json!({"format_version": 1, "indexed_after_ms": null})
    );

    // A catalog with datasets and no start (an older mend's): its start is the creation's time.
    let (older, _) = counted_catalog(ObjectStoreCatalogOptions::default());
    create(&older, "logs").await;
    older
        .store()
        .delete(&Path::from("mend/index/audit-start"))
        .await
        .unwrap();
    let newer = sibling(&older);
    newer
        .create_dataset("events", "uid", &DatasetConfig::default(), T0 + 500, None)
        .await
        .unwrap();
    assert_eq!(
        start_of(&older).await,
        serde_json::json!({"format_version": 1, "indexed_after_ms": T0 + 500})
    );
}

#[tokio::test]
async fn a_store_that_lists_out_of_order_gives_the_same_newest_records() {
    let directory = tempfile::tempdir().unwrap();
    let local = ::object_store::local::LocalFileSystem::new_with_prefix(directory.path()).unwrap();
    let store = CountingStore::new(Arc::new(local));
    let catalog = ObjectStoreCatalog::new(
        store.clone(),
        Path::from("mend"),
        ObjectStoreCatalogOptions::default(),
    );
    sweeps_in(&catalog, 30).await;
    for limit in [1, 2, 7, 60, 100] {
        let (records, gets, lists, listed) = recent_counted(&catalog, &store, limit).await;
        let every = every_dataset(&catalog, limit).await.unwrap();
        assert_eq!(records, every.records, "limit {limit}");
        assert_eq!(records.len(), limit.min(60));
        // The whole index listed (60 entries), then only the objects that can hold them read.
        assert_eq!(lists, ["mend/index/audit"]);
        assert_eq!(listed, 60);
        assert!(gets.iter().filter(|get| get.contains("/audit/")).count() <= limit.min(60));
    }
}

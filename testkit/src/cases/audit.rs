//! Audit records at the catalog trait itself, beyond one small append (`intents.rs` has
//! that): an append larger than a stored batch (1,000 records) lists whole and in order, and
//! the newest records of the whole catalog ([`Catalog::list_recent_audit`], what a policy swap
//! replays) are every dataset's newest, in order, whatever the appends' sizes.
//!
//! A catalog may be shared with other cases, so the catalog-wide case writes its records a
//! century past the wall clock (past every other case's, whose times are the harness clock's,
//! and past an earlier run's in a database that outlives runs), and looks only at as many of the
//! newest as it wrote.
//!
//! [`Catalog::list_recent_audit`]: mend::Catalog::list_recent_audit

use mend::audit::AuditRecord;

use super::intents::audit;
use crate::harness::{EPOCH_MS, Harness};

/// A century past the wall clock, in ms: later than any record another case writes.
fn far_future_ms() -> i64 {
    const CENTURY_MS: i64 = 100 * 365 * 24 * 3_600 * 1_000;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the wall clock is past 1970");
    i64::try_from(now.as_millis()).expect("a wall clock in range") + CENTURY_MS
}

fn operation_ids(records: &[AuditRecord]) -> Vec<String> {
    records
        .iter()
        .map(|record| record.operation_id.clone())
        .collect()
}

pub(super) async fn an_append_of_any_size_lists_whole_and_in_order(h: &Harness<'_>) {
    let ds = h.create_dataset("audit-batches").await;
    let catalog = h.engine.catalog();
    // 2,500 records, more than two stored batches, newest first within the append: the
    // listing orders them by time whatever the order they came in.
    let appended: Vec<AuditRecord> = (0..2_500)
        .map(|i| audit(&ds, &format!("op-{i:04}"), EPOCH_MS + 10_000 - i))
        .collect();
    catalog.append_audit(&ds, &appended).await.expect("append");
    let mut oldest_first = appended.clone();
    oldest_first.reverse();
    assert_eq!(catalog.list_audit(&ds, None).await.unwrap(), oldest_first);
    // The newest 1,200 span two stored batches.
    assert_eq!(
        catalog.list_audit(&ds, Some(1_200)).await.unwrap(),
        oldest_first[1_300..]
    );
    // A later append of the same millisecond as the newest lists after it, in its own order.
    let later = vec![
        audit(&ds, "later-b", EPOCH_MS + 10_000),
        audit(&ds, "later-a", EPOCH_MS + 10_000),
    ];
    catalog.append_audit(&ds, &later).await.expect("append");
    assert_eq!(
        operation_ids(&catalog.list_audit(&ds, Some(3)).await.unwrap()),
        ["op-0000", "later-b", "later-a"]
    );
    assert_eq!(catalog.list_audit(&ds, None).await.unwrap().len(), 2_502);
    println!(
        "conformance[{}] audit batches: 2,500 records in one append listed whole and in order, the newest 1,200, 2 more of the newest millisecond after them",
        h.name()
    );
}

pub(super) async fn recent_audit_is_the_newest_records_of_every_dataset(h: &Harness<'_>) {
    let catalog = h.engine.catalog();
    let base = far_future_ms();
    let (a, b, c) = (
        h.create_dataset("recent-a").await,
        h.create_dataset("recent-b").await,
        h.create_dataset("recent-c").await,
    );
    // Appends of every size, interleaved in time across the datasets (no two records of
    // different datasets in one millisecond, whose order is the backend's). Oldest first:
    // a-1, b-1, a-2, b-2, b-3, a-3, then c's 1,500, in two stored batches.
    let appends = [
        (
            &a,
            vec![audit(&a, "a-1", base + 10), audit(&a, "a-2", base + 30)],
        ),
        (&b, vec![audit(&b, "b-1", base + 20)]),
        (
            &b,
            vec![audit(&b, "b-2", base + 40), audit(&b, "b-3", base + 50)],
        ),
        (&a, vec![audit(&a, "a-3", base + 60)]),
        (
            &c,
            (0..1_500)
                .map(|i| audit(&c, &format!("c-{i:04}"), base + 1_000 + i))
                .collect(),
        ),
    ];
    for (dataset_id, records) in &appends {
        catalog
            .append_audit(dataset_id, records)
            .await
            .expect("append");
    }
    let mut written: Vec<AuditRecord> = appends
        .into_iter()
        .flat_map(|(_, records)| records)
        .collect();
    written.sort_by_key(|record| record.recorded_at_ms);
    let before = [
        h.write_fingerprint(&a).await,
        h.write_fingerprint(&b).await,
        h.write_fingerprint(&c).await,
    ];

    let limits = [1, 2, 1_000, 1_500, 1_501, 1_503, written.len()];
    for limit in limits {
        let recent = catalog.list_recent_audit(limit).await.expect("list recent");
        assert!(recent.unreadable.is_empty(), "{:?}", recent.unreadable);
        assert_eq!(
            recent.records.len(),
            limit,
            "the newest {limit}: a record left out or added"
        );
        assert!(
            recent.records == written[written.len() - limit..],
            "the newest {limit}: listed {:?} ... {:?}, expected {:?} ... {:?}",
            operation_ids(&recent.records[..limit.min(3)]),
            operation_ids(&recent.records[limit.saturating_sub(3)..]),
            operation_ids(&written[written.len() - limit..][..limit.min(3)]),
            operation_ids(&written[written.len() - 3..]),
        );
    }
    let none = catalog.list_recent_audit(0).await.expect("list none");
    assert!(none.records.is_empty() && none.unreadable.is_empty());
    let after = [
        h.write_fingerprint(&a).await,
        h.write_fingerprint(&b).await,
        h.write_fingerprint(&c).await,
    ];
    assert_eq!(before, after, "listing wrote");
    println!(
        "conformance[{}] recent audit: the newest 1 to {} of {} records in 3 datasets ({} limits), appends of 1 to 1,500, each in order; listing wrote nothing",
        h.name(),
        written.len(),
        written.len(),
        limits.len() + 1
    );
}

//! Pages of a dataset's audit trail, on every backend: the filters apply before the limit (a
//! principal with a few records among many of another's gets them all), and paging back with
//! the cursor reads every record once, none skipped, none twice, records of one millisecond
//! included, and the writes requests made merged with the decisions by time.

use mend::audit::{AUDIT_FORMAT_VERSION, AuditRecord};
use mend::catalog::write_audit::{self, WriteScope};
use mend::engine::{AuditCursor, AuditQuery};
use mend_tests::{Backend, Harness};

fn record(operation_id: String, recorded_at_ms: i64, principal: &str, mode: &str) -> AuditRecord {
    AuditRecord {
        format_version: AUDIT_FORMAT_VERSION,
        dataset_id: "pages".into(),
        operation_id,
        recorded_at_ms,
        mode: mode.into(),
        policy_digest: "sha256:policy".into(),
        semantics_revision: 1,
        inputs_hash: "sha256:inputs".into(),
        decision: serde_json::json!("roll-forward"),
        outcome: serde_json::json!({ "outcome": "executed" }),
        inputs: None,
        principal: Some(principal.into()),
    }
}

/// Every page of `query` from the newest back, its operation ids oldest first overall.
async fn every_page(h: &Harness, dataset_id: &str, mut query: AuditQuery) -> (Vec<String>, usize) {
    let mut pages = Vec::new();
    loop {
        let page = h.engine.audit_page(dataset_id, &query).await.unwrap();
        assert!(page.entries.len() <= query.limit);
        pages.push(
            page.entries
                .iter()
                .map(|entry| entry.operation_id.clone())
                .collect::<Vec<_>>(),
        );
        match page.next {
            Some(next) => query.before = Some(next),
            None => break,
        }
        assert!(pages.len() < 10_000, "paging must end");
    }
    let count = pages.len();
    (pages.into_iter().rev().flatten().collect(), count)
}

async fn check(backend: Backend) {
    let h = Harness::new(backend).await;
    let dataset_id = h.create_dataset("pages").await;
    let mut checks = 0;
    // A's 8 records, old; then 300 of B's, newer; records come in groups sharing one
    // millisecond, appended one by one (so several objects or rows share a time).
    let mut all = Vec::new();
    for n in 0..8 {
        all.push(record(format!("a-{n}"), 1_000 + n / 3, "A", "gc"));
    }
    for n in 0..300 {
        all.push(record(format!("b-{n}"), 2_000 + n / 4, "B", "roll-forward"));
    }
    for chunk in all.chunks(7) {
        let mut chunk = chunk.to_vec();
        for record in &mut chunk {
            record.dataset_id = dataset_id.clone();
        }
        h.engine
            .catalog()
            .append_audit(&dataset_id, &chunk)
            .await
            .unwrap();
    }
    // Three writes of W among the decisions, two of them in a millisecond decisions have
    // too (a write lists after the decisions of its millisecond); the dataset's creation, at
    // the harness clock's time, is the newest record of all.
    for (n, at_ms) in [(0, 1_001), (1, 2_010), (2, 2_074)] {
        let scope = WriteScope {
            principal: Some("W".into()),
            kind: "stage".into(),
            operation_id: Some(format!("w-{n}")),
        };
        let catalog = h.engine.catalog();
        write_audit::within(scope, async {
            let write = write_audit::pending(&dataset_id, "stage", || ["s"]).unwrap();
            catalog
                .record_write(&write.answered(&"ok", at_ms))
                .await
                .unwrap();
        })
        .await;
    }
    let ids = |prefix: &str, range: std::ops::Range<usize>| -> Vec<String> {
        range.map(|n| format!("{prefix}-{n}")).collect()
    };

    // The filter before the limit: A's newest 5, then its other 3, then nothing.
    let first = AuditQuery {
        principal: Some("A".into()),
        limit: 5,
        ..AuditQuery::default()
    };
    let page = h.engine.audit_page(&dataset_id, &first).await.unwrap();
    let got: Vec<String> = page
        .entries
        .iter()
        .map(|e| e.operation_id.clone())
        .collect();
    assert_eq!(got, ids("a", 3..8), "[{backend}]");
    let next = page.next.expect("A has older records");
    let page = h
        .engine
        .audit_page(
            &dataset_id,
            &AuditQuery {
                before: Some(next),
                ..first.clone()
            },
        )
        .await
        .unwrap();
    let got: Vec<String> = page
        .entries
        .iter()
        .map(|e| e.operation_id.clone())
        .collect();
    assert_eq!(got, ids("a", 0..3), "[{backend}]");
    assert_eq!(page.next, None, "[{backend}] no older record of A");
    checks += 3;
    // The old limit-then-filter read A's 0 of the newest 100.
    assert_eq!(
        h.engine
            .audit_trail(&dataset_id, Some("A"), 100)
            .await
            .unwrap()
            .len(),
        8
    );
    checks += 1;

    // The whole trail, page by page, for several page sizes: each record once, in order.
    let mut everything = ids("a", 0..6);
    everything.push("w-0".into());
    everything.extend(ids("a", 6..8));
    everything.extend(ids("b", 0..44));
    everything.push("w-1".into());
    everything.extend(ids("b", 44..300));
    everything.push("w-2".into());
    everything.push(String::new());
    for limit in [1, 3, 4, 7, 100, 1_000] {
        let (read, pages) = every_page(
            &h,
            &dataset_id,
            AuditQuery {
                limit,
                ..AuditQuery::default()
            },
        )
        .await;
        assert_eq!(read, everything, "[{backend}] pages of {limit}");
        // A full page says where to go on even when nothing older is left: one empty page
        // more then.
        let expected = if 312 % limit == 0 {
            312 / limit + 1
        } else {
            312usize.div_ceil(limit)
        };
        assert_eq!(pages, expected, "[{backend}] pages of {limit}");
        checks += 2;
    }
    // The kind and the since filters, with the principal's.
    let (gc, _) = every_page(
        &h,
        &dataset_id,
        AuditQuery {
            kind: Some("gc".into()),
            limit: 2,
            ..AuditQuery::default()
        },
    )
    .await;
    assert_eq!(gc, ids("a", 0..8), "[{backend}]");
    let (since, _) = every_page(
        &h,
        &dataset_id,
        AuditQuery {
            since_ms: Some(2_070),
            principal: Some("B".into()),
            limit: 3,
            ..AuditQuery::default()
        },
    )
    .await;
    assert_eq!(since, ids("b", 280..300), "[{backend}]");
    let (none, pages) = every_page(
        &h,
        &dataset_id,
        AuditQuery {
            principal: Some("C".into()),
            limit: 10,
            ..AuditQuery::default()
        },
    )
    .await;
    assert!(none.is_empty());
    assert_eq!(pages, 1);
    let (writes, _) = every_page(
        &h,
        &dataset_id,
        AuditQuery {
            principal: Some("W".into()),
            kind: Some("stage".into()),
            limit: 2,
            ..AuditQuery::default()
        },
    )
    .await;
    assert_eq!(writes, ["w-0", "w-1", "w-2"], "[{backend}]");
    checks += 5;

    // Bad input: a cursor that is not one, a limit out of range, an empty filter.
    for text in ["", "12", "a.1", "1.b", "-1.0", "1.-1"] {
        assert!(text.parse::<AuditCursor>().is_err(), "{text:?}");
        checks += 1;
    }
    assert_eq!(
        "2000.3".parse::<AuditCursor>().unwrap(),
        AuditCursor {
            recorded_at_ms: 2_000,
            skip: 3
        }
    );
    for bad in [
        AuditQuery {
            limit: 0,
            ..AuditQuery::default()
        },
        AuditQuery {
            principal: Some(String::new()),
            limit: 1,
            ..AuditQuery::default()
        },
    ] {
        assert!(h.engine.audit_page(&dataset_id, &bad).await.is_err());
        checks += 1;
    }
    println!("audit pages [{backend}]: {checks} checks");
}

#[tokio::test]
async fn audit_pages_filter_before_the_limit_and_page_every_record_once_on_memory() {
    check(Backend::Memory).await;
}

#[tokio::test]
async fn audit_pages_filter_before_the_limit_and_page_every_record_once_on_a_local_directory() {
    check(Backend::LocalDirectory).await;
}

#[tokio::test]
async fn audit_pages_filter_before_the_limit_and_page_every_record_once_on_postgres() {
    check(Backend::Postgres).await;
}

//! Split ids round-trip on every backend: an id mend accepts comes back exactly as it went in
//! through stage, the object write, the object listing, verify and reconcile; an id it refuses
//! leaves nothing behind.
//!
//! The ids are generated (proptest) from the one alphabet of `validate::split_id`, plus the
//! edges of it (one character, 128 bytes, dots and dashes in a row). Before the alphabet, an id
//! such as `a#12` or `日本` was accepted, but some stores list an escaped name: verify then
//! reported the split's object missing beside an orphan of another name, while reconcile
//! disagreed.

use mend::MendError;
use mend::model::{ListQuery, PublishRequest, StageMode, StageRequest, StageSplit};
use mend::validate::QUOTED_CHARS;
use mend_tests::harness::{Backend, Harness};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};

/// Generated ids per backend, besides the edges.
const GENERATED: usize = 48;

fn edges() -> Vec<String> {
    vec![
        "a".into(),
        "0".into(),
        "Z9".into(),
        "a.".into(),
        "a..b".into(),
        "a--b__c".into(),
        "0.v2_final-3".into(),
        "x".repeat(128),
    ]
}

/// Ids from the documented alphabet, 1 to 128 bytes, deterministic per run.
fn generated_ids() -> Vec<String> {
    let strategy = "[A-Za-z0-9][A-Za-z0-9._-]{0,127}";
    let mut runner = TestRunner::new(Config {
        rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha,
        ..Config::default()
    });
    let mut ids: Vec<String> = (0..GENERATED)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .chain(edges())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

async fn round_trip(backend: Backend) {
    let h = Harness::new(backend).await;
    let engine = &h.engine;
    let dataset_id = h.create_dataset("ids").await;
    let dataset = engine.dataset(&dataset_id).await.unwrap();
    let ids = generated_ids();
    // Half get a row and an object and are published; the other half are orphans (an object
    // with no row) for reconcile to adopt.
    let published: Vec<String> = ids.iter().step_by(2).cloned().collect();
    let orphans: Vec<String> = ids.iter().skip(1).step_by(2).cloned().collect();

    h.set_clock_past_wall_clock(0);
    let staged = engine
        .stage(&StageRequest {
            dataset_id: dataset_id.clone(),
            mode: StageMode::CreateOnly,
            node: "node-a".into(),
            splits: published
                .iter()
                .map(|id| StageSplit {
                    split_id: id.clone(),
                    metadata_json: r#"{"num_docs": 1}"#.into(),
                })
                .collect(),
        })
        .await
        .unwrap();
    assert_eq!(
        staged.inserted().collect::<Vec<_>>(),
        published.iter().map(String::as_str).collect::<Vec<_>>()
    );
    for id in ids.iter() {
        h.plant_orphan(&dataset_id, id, &dataset.uid, false).await;
    }
    engine
        .publish(&PublishRequest::staged(&dataset_id, published.clone()))
        .await
        .unwrap();

    // The listing names every object exactly as written.
    let listed: Vec<String> = engine
        .objects()
        .list(&dataset_id)
        .await
        .unwrap()
        .into_iter()
        .map(|object| object.split_id)
        .collect();
    assert_eq!(listed, ids, "[{backend}] the object listing");

    // Verify sees every published split's object, and exactly the orphans as orphans.
    let verified = engine.verify(&dataset_id).await.unwrap();
    assert!(
        verified.violations.is_empty(),
        "[{backend}] {:?}",
        verified.violations
    );
    assert_eq!(
        verified.orphan_objects, orphans,
        "[{backend}] verify's orphans"
    );

    // Reconcile agrees: past the grace period it adopts exactly the orphans, by their names.
    h.set_clock_past_wall_clock(2 * 60 * 60 * 1000);
    let reconciled = engine.reconcile(&dataset_id, "node-a").await.unwrap();
    let mut adopted = reconciled.adopted.clone();
    adopted.sort();
    assert_eq!(adopted, orphans, "[{backend}] {reconciled:?}");
    assert!(reconciled.refused.is_empty(), "[{backend}] {reconciled:?}");
    let rows: Vec<String> = engine
        .list_splits(&dataset_id, &ListQuery::default())
        .await
        .unwrap()
        .splits
        .into_iter()
        .map(|row| row.split_id)
        .collect();
    assert_eq!(rows, ids, "[{backend}] rows after reconcile");
    let verified = engine.verify(&dataset_id).await.unwrap();
    assert!(
        verified.violations.is_empty() && verified.orphan_objects.is_empty(),
        "[{backend}] {verified:?}"
    );
    println!(
        "[{backend}] {} ids round-trip: {} staged, written, listed, published and verified; {} \
         orphans listed by verify and adopted by reconcile under the same names",
        ids.len(),
        published.len(),
        orphans.len()
    );
}

/// Ids outside the alphabet are refused at stage with `InvalidArgument`, and nothing is
/// written; the error quotes at most the first 64 characters ([`QUOTED_CHARS`]) of the id.
async fn refused_ids_write_nothing(backend: Backend) {
    let h = Harness::new(backend).await;
    let dataset_id = h.create_dataset("bad-ids").await;
    let before = h.write_fingerprint(&dataset_id).await;
    let (mut refused, mut longest_quote) = (0, 0);
    let mut bad: Vec<String> = "%*~#?[]{}^|<>\"`\\/ :;=+@!$&',()"
        .chars()
        .map(|c| format!("a{c}12"))
        .collect();
    bad.extend(
        [
            "日本",
            " a",
            "a ",
            "\u{FEFF}a",
            "a\u{202E}b",
            "-a",
            ".a",
            "",
            ".",
            "..",
        ]
        .map(String::from),
    );
    bad.push("y".repeat(129));
    bad.push(format!("{}#", "z".repeat(200)));
    for id in &bad {
        let result = h
            .engine
            .stage(&StageRequest {
                dataset_id: dataset_id.clone(),
                mode: StageMode::Upsert,
                node: "node-a".into(),
                splits: vec![StageSplit {
                    split_id: id.clone(),
                    metadata_json: "{}".into(),
                }],
            })
            .await;
        match result {
            Err(MendError::InvalidArgument { message }) => {
                let quoted = quoted_chars(id, &message);
                assert_eq!(
                    quoted,
                    Some(id.chars().count().min(QUOTED_CHARS)),
                    "[{backend}] the refusal of {id:?} quotes its first {QUOTED_CHARS} characters \
                     at most (with … when cut): {message}"
                );
                longest_quote = longest_quote.max(quoted.unwrap_or_default());
                refused += 1;
            }
            other => panic!("[{backend}] split id {id:?} was not refused: {other:?}"),
        }
    }
    assert_eq!(h.write_fingerprint(&dataset_id).await, before);
    assert_eq!(
        longest_quote, QUOTED_CHARS,
        "[{backend}] the ids longer than {QUOTED_CHARS} characters were quoted cut short"
    );
    println!(
        "[{backend}] {refused} ids outside the alphabet refused, nothing written; each refusal \
         quotes the id, the longest ones cut to their first {longest_quote} characters"
    );
}

/// How many of `id`'s characters `message` quotes: the quote is `split id "..."`, holding
/// the id's first characters (escaped as `{:?}` escapes them), followed by `…` when the id
/// was cut. `None` when the message quotes no prefix of the id that way.
fn quoted_chars(id: &str, message: &str) -> Option<usize> {
    let quoted = message
        .strip_prefix("split id ")?
        .split_once(" is invalid")?
        .0;
    let chars: Vec<char> = id.chars().collect();
    (0..=chars.len()).find(|&n| {
        let mut prefix: String = chars[..n].iter().collect();
        if n < chars.len() {
            prefix.push('…');
        }
        quoted == format!("{prefix:?}")
    })
}

#[tokio::test]
async fn ids_round_trip_on_memory() {
    round_trip(Backend::Memory).await;
    refused_ids_write_nothing(Backend::Memory).await;
}

#[tokio::test]
async fn ids_round_trip_on_a_local_directory() {
    round_trip(Backend::LocalDirectory).await;
    refused_ids_write_nothing(Backend::LocalDirectory).await;
}

#[tokio::test]
async fn ids_round_trip_on_postgres() {
    round_trip(Backend::Postgres).await;
    refused_ids_write_nothing(Backend::Postgres).await;
}

#[tokio::test]
async fn ids_round_trip_on_s3() {
    round_trip(Backend::S3).await;
    refused_ids_write_nothing(Backend::S3).await;
}

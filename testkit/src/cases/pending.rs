//! Discovery of pending work at the catalog trait itself ([`Catalog::pending_datasets`],
//! [`Catalog::clear_pending`]): a dataset with an intent is named, whatever the intent's phase
//! and however its writer wrote it; a crashed writer's intent (its commit begun, nothing after)
//! leaves its dataset named; a dataset that never had an intent is never named; once its
//! intents are settled and `clear_pending` ran, it is not named, and an intent after that names
//! it again; `clear_pending` never takes off a dataset whose intents it can see.
//!
//! The cases call `clear_pending` and expect it to take a dataset off at once: a backend that
//! keeps an entry for a grace period (mend's object-storage catalog,
//! `ObjectStoreCatalogOptions::pending_marker_reuse`) opens its catalogs for the kit with
//! the grace at zero. A catalog shared with other cases or runs names their datasets too:
//! each case looks only at its own.
//!
//! [`Catalog::pending_datasets`]: mend::Catalog::pending_datasets
//! [`Catalog::clear_pending`]: mend::Catalog::clear_pending

use mend::catalog::PendingDataset;
use mend::intent::{Intent, IntentPhase};

use super::commits::begin;
use super::intents::intent;
use super::{StageMode, publish, stage};
use crate::harness::Harness;

/// What discovery says of `dataset_id`: its entry, if it is named. Checks on the way that the
/// whole answer is sorted by id with each dataset once.
async fn discovered(h: &Harness<'_>, dataset_id: &str) -> Option<PendingDataset> {
    let pending = h
        .engine
        .catalog()
        .pending_datasets()
        .await
        .expect("pending datasets");
    assert!(
        pending
            .windows(2)
            .all(|pair| pair[0].dataset_id < pair[1].dataset_id),
        "pending datasets are sorted by id, each once"
    );
    pending
        .into_iter()
        .find(|found| found.dataset_id == dataset_id)
}

/// Asserts that discovery names `dataset_id`, and that whatever it says of its intents is true.
async fn assert_named(h: &Harness<'_>, dataset_id: &str, what: &str) {
    let Some(found) = discovered(h, dataset_id).await else {
        panic!("{what}: dataset {dataset_id} is not among the pending datasets");
    };
    let intents = h.engine.catalog().list_intents(dataset_id).await.unwrap();
    if let Some(count) = found.intents {
        assert_eq!(count, intents.len(), "{what}: the count of intents");
    }
    if let Some(earliest) = found.earliest_lease_expiry_ms {
        assert_eq!(
            Some(earliest),
            intents.iter().map(|i| i.lease_expires_at_ms).min(),
            "{what}: the earliest lease"
        );
    }
}

fn accept(_: &mend::catalog::PublishObservation) -> mend::Result<()> {
    Ok(())
}

async fn assert_not_named(h: &Harness<'_>, dataset_id: &str, what: &str) {
    assert_eq!(discovered(h, dataset_id).await, None, "{what}");
}

pub(super) async fn pending_datasets_name_every_dataset_with_an_intent(h: &Harness<'_>) {
    let catalog = h.engine.catalog();
    let now = h.clock_now();
    let mut checks = 0;

    // A dataset that never had an intent, with published splits: never named.
    let quiet = h.create_dataset("pending-quiet").await;
    stage(h, &quiet, StageMode::CreateOnly, &["q1", "q2"]).await;
    publish(h, &quiet, &["q1"], &[]).await;
    assert!(catalog.list_intents(&quiet).await.unwrap().is_empty());
    assert_not_named(h, &quiet, "a dataset that never had an intent").await;
    checks += 1;

    // Intents in every phase, written by `put_intent`, name their datasets.
    let mut named = Vec::new();
    for (label, phase) in [
        ("pending-armed", IntentPhase::Armed),
        ("pending-confirmed", IntentPhase::EffectsConfirmed),
        ("pending-abandoned", IntentPhase::Abandoned),
    ] {
        let ds = h.create_dataset(label).await;
        let armed = intent(&ds, "op-1", now);
        catalog.put_intent(&armed).await.expect("put an intent");
        match phase {
            IntentPhase::Armed => {}
            IntentPhase::EffectsConfirmed => {
                let confirmed = Intent {
                    phase,
                    updated_at_ms: now + 1,
                    ..armed
                };
                catalog
                    .update_intent(&confirmed, IntentPhase::Armed)
                    .await
                    .expect("confirm");
            }
            IntentPhase::Abandoned => {
                catalog
                    .abandon_intent(&ds, "op-1", None, now + 1)
                    .await
                    .expect("abandon");
            }
        }
        assert_named(h, &ds, label).await;
        named.push(ds);
        checks += 1;
    }

    // Two intents in one dataset: named once, with both counted where counts are known.
    let two = h.create_dataset("pending-two").await;
    catalog
        .put_intent(&intent(&two, "op-a", now))
        .await
        .unwrap();
    catalog
        .put_intent(&intent(&two, "op-b", now - 5_000))
        .await
        .unwrap();
    assert_named(h, &two, "a dataset with two intents").await;
    checks += 1;

    // Reading does not take anyone off, nor put the quiet dataset on.
    for ds in &named {
        assert!(discovered(h, ds).await.is_some(), "still named: {ds}");
    }
    assert_not_named(h, &quiet, "still never named").await;
    checks += named.len() + 1;
    println!(
        "conformance[{}]: pending datasets: {checks} checks (intents armed, confirmed, abandoned, two in one dataset; a dataset without intents never named)",
        h.name()
    );
}

pub(super) async fn a_crashed_commit_leaves_its_dataset_discoverable(h: &Harness<'_>) {
    let catalog = h.engine.catalog();
    let ds = h.create_dataset("pending-crash").await;
    let now = h.clock_now();
    // The writer's first step lands (its intent and staged rows), then the writer is gone.
    begin(catalog.as_ref(), &ds, "op-crashed", &["a", "b"], now)
        .await
        .expect("begin a commit");
    assert_named(h, &ds, "a crashed commit's dataset").await;

    // A supervisor that finds its intent must not take it off, however often it asks.
    for _ in 0..3 {
        catalog.clear_pending(&ds).await.expect("clear pending");
    }
    assert_named(h, &ds, "clear_pending with an intent there").await;

    // Recovery fences the operation: still pending until its intent is gone.
    h.clock.advance_ms(60_000);
    catalog
        .abandon_intent(&ds, "op-crashed", Some(h.clock_now()), h.clock_now())
        .await
        .expect("abandon the expired intent");
    catalog.clear_pending(&ds).await.unwrap();
    assert_named(h, &ds, "an abandoned intent").await;
    println!(
        "conformance[{}]: pending datasets: a crashed commit's dataset named after begin, after 3 clears, after abandonment",
        h.name()
    );
}

pub(super) async fn clear_pending_takes_off_a_dataset_only_without_intents(h: &Harness<'_>) {
    let catalog = h.engine.catalog();
    let now = h.clock_now();
    let ds = h.create_dataset("pending-clear").await;
    let mut checks = 0;

    // Settled by deleting its intent (as recovery and a commit's publish do).
    catalog.put_intent(&intent(&ds, "op-1", now)).await.unwrap();
    catalog.delete_intent(&ds, "op-1", now).await.unwrap();
    catalog.clear_pending(&ds).await.expect("clear pending");
    assert_not_named(h, &ds, "no intents left, cleared").await;
    checks += 1;

    // An intent after the clear names it again: the writer puts its entry back.
    catalog.put_intent(&intent(&ds, "op-2", now)).await.unwrap();
    assert_named(h, &ds, "an intent after a clear").await;
    catalog.clear_pending(&ds).await.unwrap();
    assert_named(h, &ds, "a clear with an intent there").await;
    checks += 2;

    // Settled by a commit's own publish: begun, then published with its intent deleted.
    catalog.delete_intent(&ds, "op-2", now).await.unwrap();
    catalog.clear_pending(&ds).await.unwrap();
    begin(catalog.as_ref(), &ds, "op-3", &["c"], now)
        .await
        .expect("begin");
    assert_named(h, &ds, "a begun commit").await;
    h.put_objects(&ds, ["c"]).await;
    let request = super::publish_request(&ds, &["c"], &[]);
    let key = mend::catalog::RequestKey::new("op:op-3:publish", &"op-3");
    let begun_intent = catalog.list_intents(&ds).await.unwrap().remove(0);
    catalog
        .publish_commit(&begun_intent, &request, &accept, now, &key)
        .await
        .expect("publish the commit");
    assert!(catalog.list_intents(&ds).await.unwrap().is_empty());
    catalog.clear_pending(&ds).await.unwrap();
    assert_not_named(h, &ds, "a published commit, cleared").await;
    checks += 2;

    // Clearing what has nothing to clear: a quiet dataset, a missing one.
    let quiet = h.create_dataset("pending-clear-quiet").await;
    catalog
        .clear_pending(&quiet)
        .await
        .expect("a quiet dataset");
    catalog
        .clear_pending(&h.unique_dataset_id("pending-missing"))
        .await
        .expect("a missing dataset");
    assert_not_named(h, &quiet, "a quiet dataset, cleared").await;
    checks += 3;
    println!(
        "conformance[{}]: pending datasets: {checks} checks of clear_pending (after a delete, after a published commit, with an intent there, on quiet and missing datasets)",
        h.name()
    );
}

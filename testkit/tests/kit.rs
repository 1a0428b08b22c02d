//! The kit's own behaviour, on backends that are wrong on purpose: a fingerprint that always
//! moves fails the cases that assert "writes nothing", naming them; a backend without a
//! capability a case needs has that case skipped; a scale below what a case needs fails,
//! naming the field. mend's real backends run the whole kit in `tests/tests/conformance.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use mend::Catalog;
use mend::catalog::ObjectStoreCatalog;
use mend::catalog::object_store::ObjectStoreCatalogOptions;
use mend::objects::SplitObjects;
use mend_testkit::{
    BackendUnderTest, CountingStore, Fingerprint, FreshCatalog, Outcome, Scale, WithoutCapability,
    case, run_cases,
};
use object_store::memory::InMemory;
use object_store::path::Path;

/// The object-storage catalog in memory, told apart by what is wrong with it.
#[derive(Debug, Default)]
struct InMemoryBackend {
    /// Every fingerprint differs from the one before, as if every read wrote.
    restless_fingerprint: bool,
    /// A capability its catalog claims not to have.
    lacks: Option<&'static str>,
    scale: Option<Scale>,
    /// Fingerprints handed out, for the restless one.
    fingerprints: AtomicU64,
}

#[async_trait]
impl BackendUnderTest for InMemoryBackend {
    type State = Arc<CountingStore>;

    fn name(&self) -> String {
        "in-memory-test".into()
    }

    async fn open(&self) -> FreshCatalog<Arc<CountingStore>> {
        let store = Arc::new(InMemory::new());
        let counted = Arc::new(CountingStore::new(store.clone()));
        // No grace on the pending markers: the pending cases expect `clear_pending` to take a
        // dataset off at once.
        let options = ObjectStoreCatalogOptions {
            pending_marker_reuse: Duration::ZERO,
            ..Default::default()
        };
        let inner = ObjectStoreCatalog::new(counted.clone(), Path::default(), options);
        let catalog: Arc<dyn Catalog> = match self.lacks {
            Some(lacks) => Arc::new(WithoutCapability { inner, lacks }),
            None => Arc::new(inner),
        };
        FreshCatalog {
            catalog,
            objects: SplitObjects::new(store, Path::default()),
            state: counted,
        }
    }

    async fn catalog_fingerprint(&self, counted: &Arc<CountingStore>, _: &str) -> Fingerprint {
        match self.restless_fingerprint {
            true => Fingerprint::writes(self.fingerprints.fetch_add(1, Ordering::SeqCst)),
            false => Fingerprint::writes(counted.writes()),
        }
    }

    fn scale(&self) -> Scale {
        self.scale.unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fingerprint_that_always_moves_fails_the_cases_that_assert_no_writes_by_name() {
    let backend = InMemoryBackend {
        restless_fingerprint: true,
        ..Default::default()
    };
    let chosen = [
        "datasets_create_list_show_and_configure",
        "create_only_batch_of_existing_rows_writes_nothing",
    ];
    let summary = run_cases(&backend, chosen.map(|name| case(name).expect("a case"))).await;
    assert_eq!(summary.passed(), 1);
    assert_eq!(
        summary.failed(),
        ["create_only_batch_of_existing_rows_writes_nothing"]
    );
    let Outcome::Failed(message) = &summary.reports()[1].outcome else {
        panic!("{summary:?}");
    };
    assert!(
        message.contains("a create-only batch of existing rows wrote to storage"),
        "{message}"
    );
    let refused = std::panic::catch_unwind(|| summary.assert_passed())
        .expect_err("a summary with a failure does not pass");
    let refused = refused.downcast_ref::<String>().expect("a message");
    assert!(
        refused.contains("in-memory-test")
            && refused.contains("create_only_batch_of_existing_rows_writes_nothing"),
        "{refused}"
    );
    assert!(!summary.is_success());
    assert_eq!(
        summary.to_string(),
        "conformance[in-memory-test]: 1 passed, 1 failed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_case_needing_a_capability_the_backend_lacks_is_skipped() {
    let backend = InMemoryBackend {
        lacks: Some("publish.fencing-epoch"),
        ..Default::default()
    };
    let fencing = case("fencing_epoch").expect("a case");
    assert!(fencing.needs().contains(&"publish.fencing-epoch"));
    let chosen = [fencing, case("list_filters_and_pages").expect("a case")];
    let summary = run_cases(&backend, chosen).await;
    assert_eq!(summary.skipped(), ["fencing_epoch"]);
    assert_eq!(
        summary.reports()[0].outcome,
        Outcome::Skipped(vec!["publish.fencing-epoch".into()])
    );
    assert_eq!(summary.passed(), 1);
    assert!(summary.is_success(), "a skipped case is no failure");
    summary.assert_passed();
    assert_eq!(
        summary.to_string(),
        "conformance[in-memory-test]: 1 passed, 0 failed, 1 skipped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_without_a_capability_the_policy_requires_fails_every_case_saying_so() {
    let backend = InMemoryBackend {
        lacks: Some("stage.create-only"),
        ..Default::default()
    };
    let summary = run_cases(&backend, [case("list_filters_and_pages").expect("a case")]).await;
    let Outcome::Failed(message) = &summary.reports()[0].outcome else {
        panic!("{summary:?}");
    };
    assert!(
        message.contains("the engine does not start") && message.contains("stage.create-only"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_below_what_a_case_needs_fails_naming_the_field() {
    let backend = InMemoryBackend {
        scale: Some(Scale {
            stage_race_ids: 2,
            ..Scale::LIGHT
        }),
        ..Default::default()
    };
    let summary = run_cases(&backend, [case("fencing_epoch").expect("a case")]).await;
    let Outcome::Failed(message) = &summary.reports()[0].outcome else {
        panic!("{summary:?}");
    };
    assert!(message.contains("Scale::stage_race_ids is 2"), "{message}");
    assert_eq!(mend_testkit::cases().len(), 44, "every case is listed");
    println!("4 ways of being wrong, each reported by the case it concerns");
}

/// A backend that keeps the trait's default `settle_intents` (one step at a time) and so does
/// not claim `settle.atomic`: it passes the cases of what a batch does, and the case of a batch
/// refused whole is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settling_one_step_at_a_time_passes_all_but_the_atomic_case() {
    let backend = InMemoryBackend {
        lacks: Some(mend::catalog::SETTLE_ATOMIC),
        ..Default::default()
    };
    let chosen = [
        "settle_intents_publishes_marks_and_deletes_in_order",
        "settle_intents_checks_the_batch_before_reading",
        "settle_intents_refuses_a_batch_whole",
    ];
    let summary = run_cases(&backend, chosen.map(|name| case(name).expect("a case"))).await;
    assert_eq!(summary.passed(), 2, "{summary:?}");
    assert_eq!(summary.skipped(), ["settle_intents_refuses_a_batch_whole"]);
    summary.assert_passed();
}

/// A backend without a pending index (the trait's default discovery, which reads every
/// dataset's intents, and a `clear_pending` that does nothing) passes the pending cases: they
/// hold for every backend, index or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_without_an_index_passes_the_pending_cases() {
    let chosen = [
        "pending_datasets_name_every_dataset_with_an_intent",
        "a_crashed_commit_leaves_its_dataset_discoverable",
        "clear_pending_takes_off_a_dataset_only_without_intents",
    ];
    for lacks in [None, Some(mend::catalog::PENDING_INDEX)] {
        let backend = InMemoryBackend {
            lacks,
            ..Default::default()
        };
        let summary = run_cases(&backend, chosen.map(|name| case(name).expect("a case"))).await;
        assert_eq!(summary.passed(), 3, "lacking {lacks:?}: {summary:?}");
        summary.assert_passed();
    }
}

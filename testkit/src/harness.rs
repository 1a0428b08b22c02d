//! The kit's harness: one fresh catalog from a [`BackendUnderTest`], an engine on it with
//! mend's default policy and a manual clock, the split objects behind a [`CountingStore`], and
//! the helpers the cases share (unique dataset ids, the write fingerprint, planted objects).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use mend::clock::{Clock, ManualClock};
use mend::model::{DatasetConfig, ListQuery, SplitRow};
use mend::objects::SplitObjects;
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions};

use crate::backend::{BackendUnderTest, Fingerprint, Scale};
use crate::counting_store::CountingStore;

/// The most splits one stage request may carry on a harness's engine, so that a case can
/// test the limit itself without sending 10,000 splits.
pub const MAX_STAGE_BATCH: usize = 2_000;

/// Where a harness's manual clock starts: an arbitrary fixed instant (2023-11-14), so that
/// timestamps in failures are readable and the same in every run.
pub const EPOCH_MS: i64 = 1_700_000_000_000;

/// One case's view of a backend: a fresh catalog, an engine on it, and what the cases use to
/// look at them.
pub struct Harness<'a> {
    /// The engine under test: the fresh catalog, the counted split objects, mend's default
    /// policy, the manual [`clock`](Self::clock) and a stage batch limit of
    /// [`MAX_STAGE_BATCH`].
    pub engine: Engine,
    /// The engine's clock: it starts at [`EPOCH_MS`] and moves only when a case moves it.
    pub clock: Arc<ManualClock>,
    name: String,
    scale: Scale,
    /// The split objects' store: every request to it is counted.
    objects: Arc<CountingStore>,
    catalog_fingerprint: Box<dyn CatalogFingerprint + 'a>,
}

/// What tells whether storage was written for a dataset: the backend's
/// [catalog fingerprint](BackendUnderTest::catalog_fingerprint) and the writes made to the
/// split objects' store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFingerprint {
    /// What the backend reports for its catalog.
    pub catalog: Fingerprint,
    /// Writes (puts, deletes, copies) to the split objects' store so far, successful or not.
    pub object_writes: u64,
}

impl<'a> Harness<'a> {
    /// Opens a fresh catalog of `backend` and builds an engine on it. Panics if the backend
    /// cannot be opened, or if it lacks a capability mend's default policy requires
    /// (`stage.upsert`, `stage.create-only`, `publish.checkpoint`, `publish.token`): the
    /// engine refuses to start then, as it would in production.
    pub async fn open<B: BackendUnderTest>(backend: &'a B) -> Harness<'a> {
        let scale = backend.scale();
        scale.check();
        let fresh = backend.open().await;
        let (store, prefix) = fresh.objects.store();
        let objects = Arc::new(CountingStore::new(store.clone()));
        let split_objects = SplitObjects::new(objects.clone(), prefix.clone());
        let clock = Arc::new(ManualClock::new(EPOCH_MS));
        let policy = PolicyRuntime::default_policy().expect("mend's default policy loads");
        let options = EngineOptions {
            max_stage_batch: MAX_STAGE_BATCH,
            clock: clock.clone(),
            ..EngineOptions::default()
        };
        let engine = Engine::new(fresh.catalog, split_objects, policy, options)
            .unwrap_or_else(|error| panic!("the engine does not start on this backend: {error}"));
        Harness {
            engine,
            clock,
            name: backend.name(),
            scale,
            objects,
            catalog_fingerprint: Box::new(Opened {
                backend,
                state: fresh.state,
            }),
        }
    }

    /// The backend's [name](BackendUnderTest::name), as the output shows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How hard the concurrency cases push this backend.
    pub fn scale(&self) -> Scale {
        self.scale
    }

    /// The split objects' store, counting every request made to it.
    pub fn objects_store(&self) -> &Arc<CountingStore> {
        &self.objects
    }

    /// The manual clock's current time.
    pub fn clock_now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// A dataset id no other case uses, even on a catalog shared between runs: `label` and a
    /// random suffix.
    pub fn unique_dataset_id(&self, label: &str) -> String {
        format!("{label}-{}", uuid::Uuid::new_v4().simple())
    }

    /// Creates a dataset with the default config under a [unique id](Self::unique_dataset_id)
    /// and returns the id.
    pub async fn create_dataset(&self, label: &str) -> String {
        let dataset_id = self.unique_dataset_id(label);
        self.engine
            .create_dataset(&dataset_id, &DatasetConfig::default())
            .await
            .expect("create dataset");
        dataset_id
    }

    /// A fingerprint that changes whenever anything is written for `dataset_id`, in the
    /// catalog or to the split objects.
    pub async fn write_fingerprint(&self, dataset_id: &str) -> WriteFingerprint {
        WriteFingerprint {
            catalog: self.catalog_fingerprint.fingerprint(dataset_id).await,
            object_writes: self.objects.writes(),
        }
    }

    /// Every row of `dataset_id`, from the catalog's own listing (the engine's pages hold at
    /// most `max_list_page` rows).
    pub async fn rows(&self, dataset_id: &str) -> Vec<SplitRow> {
        self.engine
            .catalog()
            .list_splits(dataset_id, &ListQuery::default())
            .await
            .expect("list the dataset's rows")
            .splits
    }

    /// Writes an object for each split, as a writer does between staging and publishing: a
    /// publish refuses a split without its object (invariant 1).
    pub async fn put_objects<I, S>(&self, dataset_id: &str, split_ids: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for split_id in split_ids {
            self.engine
                .objects()
                .put(
                    dataset_id,
                    split_id.as_ref(),
                    bytes::Bytes::from_static(b"split object").into(),
                )
                .await
                .expect("write a split object");
        }
    }
}

impl fmt::Debug for Harness<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("backend", &self.name)
            .field("scale", &self.scale)
            .finish_non_exhaustive()
    }
}

/// A backend and the state of the catalog it opened, behind one object, so that the harness
/// (and the cases that take it) need not name the backend's type.
struct Opened<'a, B: BackendUnderTest> {
    backend: &'a B,
    state: B::State,
}

#[async_trait]
trait CatalogFingerprint: Send + Sync {
    async fn fingerprint(&self, dataset_id: &str) -> Fingerprint;
}

#[async_trait]
impl<B: BackendUnderTest> CatalogFingerprint for Opened<'_, B> {
    async fn fingerprint(&self, dataset_id: &str) -> Fingerprint {
        self.backend
            .catalog_fingerprint(&self.state, dataset_id)
            .await
    }
}

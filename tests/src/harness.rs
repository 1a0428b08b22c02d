//! Builds an engine on a chosen backend, with a manual clock, and gives tests a way to see
//! whether an operation wrote anything to storage.

use std::fmt;
use std::sync::Arc;

use mend::catalog::{Catalog, ObjectStoreCatalog, PostgresCatalog};
use mend::clock::ManualClock;
use mend::model::DatasetConfig;
use mend::objects::SplitObjects;
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use sqlx::PgPool;
use tempfile::TempDir;

use crate::CountingStore;

/// The most splits a stage batch may carry in tests, so the limit itself can be tested.
pub const TEST_MAX_STAGE_BATCH: usize = 2_000;

/// The clock's start: an arbitrary fixed instant, so timestamps in failures are readable.
pub const TEST_EPOCH_MS: i64 = 1_700_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    LocalDirectory,
    Memory,
    /// The object-storage catalog on an S3-compatible server, opened by `s3://` URL.
    S3,
}

impl Backend {
    pub const ALL: [Backend; 4] = [Self::Postgres, Self::LocalDirectory, Self::Memory, Self::S3];
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Postgres => "postgres",
            Self::LocalDirectory => "local-directory",
            Self::Memory => "memory",
            Self::S3 => "s3",
        })
    }
}

/// The Postgres server the tests use; fails, with instructions, when there is none.
pub fn postgres_url() -> String {
    std::env::var("MEND_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "MEND_TEST_DATABASE_URL is not set. The Postgres tests need a real server: run them \
             through `scripts/test` (which starts a throwaway one), or \
             `scripts/with-postgres cargo test ...`, or point MEND_TEST_DATABASE_URL at a server \
             you own"
        )
    })
}

/// How the tests open their Postgres: `scripts/with-postgres` starts a fast, non-durable
/// cluster and says so with `MEND_POSTGRES_ACCEPT_UNSAFE_DURABILITY=true`; a server of your own
/// is held to mend's durability check.
pub fn postgres_options() -> mend::catalog::PostgresOptions {
    mend::catalog::PostgresOptions {
        accept_unsafe_durability: std::env::var("MEND_POSTGRES_ACCEPT_UNSAFE_DURABILITY")
            .is_ok_and(|value| value == "true"),
    }
}

/// The S3-compatible store the tests use (`s3://BUCKET`, endpoint and credentials in the usual
/// `AWS_*` variables); fails, with instructions, when there is none.
pub fn s3_url() -> String {
    std::env::var("MEND_TEST_S3_URL").unwrap_or_else(|_| {
        panic!(
            "MEND_TEST_S3_URL is not set. The S3 tests need an S3-compatible server: run them \
             through `scripts/test` (which starts a throwaway one), or \
             `scripts/with-s3 cargo test ...`, or set MEND_TEST_S3_URL=s3://BUCKET and the \
             AWS_* variables for a store you own"
        )
    })
}

/// A fresh engine on one backend.
pub struct Harness {
    pub backend: Backend,
    pub engine: Engine,
    pub clock: Arc<ManualClock>,
    /// Every write of an object-storage catalog and its split objects goes through this.
    pub store: Option<Arc<CountingStore>>,
    /// A separate pool for inspecting the Postgres catalog's rows.
    pub pg: Option<PgPool>,
    _directory: Option<TempDir>,
}

impl fmt::Debug for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// What tells whether storage was written: a write count for object storage, row versions
/// (`ctid`, `xmin`) of the dataset's rows for Postgres.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteFingerprint {
    ObjectWrites(u64),
    RowVersions(Vec<(String, String, String)>),
}

impl Harness {
    pub async fn new(backend: Backend) -> Self {
        Self::with_policy(
            backend,
            PolicyRuntime::default_policy().expect("default policy loads"),
        )
        .await
    }

    pub async fn with_policy(backend: Backend, policy: PolicyRuntime) -> Self {
        let clock = Arc::new(ManualClock::new(TEST_EPOCH_MS));
        let options = EngineOptions {
            max_stage_batch: TEST_MAX_STAGE_BATCH,
            clock: clock.clone(),
            ..EngineOptions::default()
        };
        let (catalog, objects, store, pg, directory): (Arc<dyn Catalog>, SplitObjects, _, _, _) =
            match backend {
                Backend::Postgres => {
                    let url = postgres_url();
                    let catalog = PostgresCatalog::connect_with(&url, postgres_options())
                        .await
                        .unwrap_or_else(|error| panic!("connect to {url}: {error}"));
                    let pool = PgPool::connect(&url).await.expect("inspection pool");
                    let objects_store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
                    let counting = Arc::new(CountingStore::new(objects_store));
                    let objects = SplitObjects::new(counting.clone(), Path::default());
                    (Arc::new(catalog), objects, Some(counting), Some(pool), None)
                }
                Backend::LocalDirectory | Backend::Memory | Backend::S3 => {
                    let (inner, prefix, directory): (Arc<dyn ObjectStore>, Path, _) = match backend
                    {
                        Backend::Memory => (Arc::new(InMemory::new()), Path::default(), None),
                        Backend::S3 => {
                            // Each harness gets its own prefix of the shared bucket.
                            let url = format!("{}/{}", s3_url(), uuid::Uuid::new_v4().simple());
                            let (store, prefix) = mend::catalog::object_store::open_store(&url)
                                .unwrap_or_else(|error| panic!("open {url}: {error}"));
                            (store, prefix, None)
                        }
                        _ => {
                            let directory = tempfile::tempdir().expect("temporary directory");
                            let store = LocalFileSystem::new_with_prefix(directory.path())
                                .expect("local store");
                            (Arc::new(store), Path::default(), Some(directory))
                        }
                    };
                    let counting = Arc::new(CountingStore::new(inner));
                    let catalog = ObjectStoreCatalog::new(
                        counting.clone(),
                        prefix.clone(),
                        Default::default(),
                    );
                    let objects = SplitObjects::new(counting.clone(), prefix);
                    (Arc::new(catalog), objects, Some(counting), None, directory)
                }
            };
        let engine = Engine::new(catalog, objects, policy, options).expect("engine starts");
        Self {
            backend,
            engine,
            clock,
            store,
            pg,
            _directory: directory,
        }
    }

    /// The manual clock's current time.
    pub fn clock_now(&self) -> i64 {
        use mend::clock::Clock;
        self.clock.now_ms()
    }

    /// A dataset id no other test uses, even on a shared Postgres server.
    pub fn unique_dataset_id(&self, label: &str) -> String {
        format!("{label}-{}", uuid::Uuid::new_v4().simple())
    }

    /// Creates a dataset with the default config and returns its id.
    pub async fn create_dataset(&self, label: &str) -> String {
        let dataset_id = self.unique_dataset_id(label);
        self.engine
            .create_dataset(&dataset_id, &DatasetConfig::default())
            .await
            .expect("create dataset");
        dataset_id
    }

    /// A fingerprint that changes whenever storage is written for `dataset_id`.
    pub async fn write_fingerprint(&self, dataset_id: &str) -> WriteFingerprint {
        match &self.pg {
            Some(pool) => {
                let mut versions: Vec<(String, String, String)> = sqlx::query_as(
                    "SELECT split_id, ctid::text, xmin::text FROM splits WHERE dataset_id = $1 ORDER BY split_id",
                )
                .bind(dataset_id)
                .fetch_all(pool)
                .await
                .expect("read split row versions");
                let dataset: (String, String) = sqlx::query_as(
                    "SELECT ctid::text, xmin::text FROM datasets WHERE dataset_id = $1",
                )
                .bind(dataset_id)
                .fetch_one(pool)
                .await
                .expect("read dataset row version");
                versions.push(("<dataset>".into(), dataset.0, dataset.1));
                let object_writes = self.store.as_ref().map_or(0, |s| s.writes());
                versions.push(("<objects>".into(), object_writes.to_string(), String::new()));
                WriteFingerprint::RowVersions(versions)
            }
            None => WriteFingerprint::ObjectWrites(
                self.store
                    .as_ref()
                    .expect("object-store backends count writes")
                    .writes(),
            ),
        }
    }

    /// Every row of `dataset_id` (the catalog's own listing: the engine's pages hold at most
    /// `max_list_page` rows).
    pub async fn rows(&self, dataset_id: &str) -> Vec<mend::model::SplitRow> {
        self.engine
            .catalog()
            .list_splits(dataset_id, &mend::model::ListQuery::default())
            .await
            .expect("list the dataset's rows")
            .splits
    }

    /// Writes a split object in mend's format, as a writer that crashed between its upload and
    /// its stage would leave it (or before its publish, once a row is staged for it): written
    /// for dataset incarnation `uid`, with a payload that matches its header unless `damaged`.
    pub async fn plant_orphan(&self, dataset_id: &str, split_id: &str, uid: &str, damaged: bool) {
        use mend::objects::format::{self, HEADER_FORMAT_VERSION, SplitObjectHeader, sha256};
        let payload = format!("payload of {split_id}");
        let header = SplitObjectHeader {
            format_version: HEADER_FORMAT_VERSION,
            dataset_id: dataset_id.into(),
            dataset_uid: uid.into(),
            split_id: split_id.into(),
            node: "lost-writer".into(),
            metadata_json: r#"{"num_docs": 7}"#.into(),
            operation_id: Some("lost-operation".into()),
            payload_size: payload.len() as u64,
            payload_sha256: sha256(if damaged {
                b"other bytes"
            } else {
                payload.as_bytes()
            }),
        };
        self.engine
            .objects()
            .put(
                dataset_id,
                split_id,
                format::encode(&header, payload.as_bytes()),
            )
            .await
            .expect("plant an orphan");
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
                    bytes::Bytes::from_static(b"split object"),
                )
                .await
                .expect("write a split object");
        }
    }

    /// Moves the manual clock past `by_ms` after the store's own clock, which stamps objects.
    pub fn set_clock_past_wall_clock(&self, by_ms: i64) {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as i64;
        self.clock.set_ms(wall + by_ms);
    }
}

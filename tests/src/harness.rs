//! Builds an engine on a chosen backend, with a manual clock, and gives tests a way to see
//! whether an operation wrote anything to storage.

use std::fmt;
use std::sync::Arc;

use mend::catalog::object_store::ObjectStoreCatalogOptions;
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
use crate::sql_counter::SqlCounter;

/// The most splits a stage batch may carry in tests, so the limit itself can be tested: the
/// conformance kit's, so that both harnesses build the same engine.
pub const TEST_MAX_STAGE_BATCH: usize = mend_testkit::MAX_STAGE_BATCH;

/// The clock's start: an arbitrary fixed instant, so timestamps in failures are readable (the
/// conformance kit's).
pub const TEST_EPOCH_MS: i64 = mend_testkit::EPOCH_MS;

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

/// A commit by node `writer` of `split_ids`, each with metadata `{}` and the payload
/// `payload of {id}`, with no checkpoint delta and no publish token: the commit most tests make.
pub fn commit_request(dataset_id: &str, split_ids: &[&str]) -> mend::engine::CommitRequest {
    mend::engine::CommitRequest {
        dataset_id: dataset_id.into(),
        node: "writer".into(),
        splits: split_ids
            .iter()
            .map(|id| mend::engine::CommitSplit {
                split_id: (*id).into(),
                metadata_json: "{}".into(),
                payload: bytes::Bytes::from(format!("payload of {id}")),
            })
            .collect(),
        checkpoint_delta: None,
        publish_token: None,
    }
}

/// Creates a database of its own on the test server, named `{label}_{random}`, and answers
/// its URL and name: for a test or bench whose counts or scale must not meet other tests' rows
/// in the shared database (and whose rows must not slow them down). [`drop_database`] removes it.
pub async fn own_database(label: &str) -> (String, String) {
    let server = postgres_url();
    let admin = PgPool::connect(&server)
        .await
        .expect("connect to the test Postgres");
    let name = format!("{label}_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .unwrap_or_else(|error| panic!("create the database {name}: {error}"));
    admin.close().await;
    let mut url = url::Url::parse(&server).expect("a postgres url");
    url.set_path(&format!("/{name}"));
    (url.into(), name)
}

/// Drops a database [`own_database`] created, whatever connections still use it.
pub async fn drop_database(name: &str) {
    let admin = PgPool::connect(&postgres_url())
        .await
        .expect("connect to the test Postgres");
    // FORCE: the catalogs' pools may still hold connections.
    if let Err(error) = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&admin)
        .await
    {
        eprintln!("could not drop the database {name}: {error}");
    }
    admin.close().await;
}

/// A pool on the test server for the benches' floors: the bare statement, one round trip, with
/// no liveness ping before each acquire (sqlx's default would add one to every floor batch;
/// the catalog's own pool pings only a connection idle for seconds).
pub async fn floor_pool() -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .test_before_acquire(false)
        .connect(&postgres_url())
        .await
        .expect("connect the floor's pool")
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
    /// Every request to an object-storage catalog and its split objects (or, on Postgres, to
    /// the split objects) goes through this.
    pub store: Option<Arc<CountingStore>>,
    /// A separate pool for inspecting the Postgres catalog's rows.
    pub pg: Option<PgPool>,
    /// On Postgres, when asked for ([`Harness::counting_sql`]): what the engine's catalog
    /// sends the server.
    pub sql: Option<SqlCounter>,
    /// Where the object-storage catalog and the split objects live in `store`.
    prefix: Path,
    _directory: Option<TempDir>,
}

impl fmt::Debug for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// What tells whether storage was written: a write count for object storage; for Postgres, the
/// row versions (`ctid`, `xmin`) of the dataset's rows in every table of the catalog, plus
/// the write count of the split objects' store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteFingerprint {
    ObjectWrites(u64),
    RowVersions(Vec<(String, String, String)>),
}

/// The catalog tables that hold no dataset's rows, and so are not part of a fingerprint:
/// the migrations' bookkeeping, and the fleet's members (`mend serve` replicas' leases, which
/// no operation on a dataset writes).
const TABLES_WITHOUT_DATASET_ROWS: &[&str] = &["_sqlx_migrations", "fleet_members"];

impl Harness {
    pub async fn new(backend: Backend) -> Self {
        Self::build(backend, default_policy(), false).await
    }

    pub async fn with_policy(backend: Backend, policy: PolicyRuntime) -> Self {
        Self::build(backend, policy, false).await
    }

    /// A fresh engine whose Postgres catalog, if that is the backend, reaches the server
    /// through a [`SqlCounter`] (in `sql`), so that a test can count the statements a call
    /// costs.
    pub async fn counting_sql(backend: Backend) -> Self {
        Self::build(backend, default_policy(), true).await
    }

    /// [`Harness::counting_sql`] with `policy`.
    pub async fn counting_sql_with_policy(backend: Backend, policy: PolicyRuntime) -> Self {
        Self::build(backend, policy, true).await
    }

    /// A fresh engine whose Postgres catalog, if that is the backend, is a database of its own
    /// ([`own_database`]), reached through a [`SqlCounter`] (in `sql`), and named in the answer
    /// for [`drop_database`] at the test's end: for a test that reads or counts what the whole
    /// catalog holds (the newest audit records of every dataset), which other tests' rows in
    /// the shared database would change. Other backends are fresh anyway.
    pub async fn on_own_database(backend: Backend, label: &str) -> (Self, Option<String>) {
        let own = match backend {
            Backend::Postgres => Some(own_database(label).await),
            _ => None,
        };
        let url = own.as_ref().map(|(url, _)| url.clone());
        let harness = Self::build_on(backend, default_policy(), true, url).await;
        (harness, own.map(|(_, name)| name))
    }

    async fn build(backend: Backend, policy: PolicyRuntime, count_sql: bool) -> Self {
        Self::build_on(backend, policy, count_sql, None).await
    }

    /// `postgres_url`: the catalog's database, the shared one when `None`.
    async fn build_on(
        backend: Backend,
        policy: PolicyRuntime,
        count_sql: bool,
        postgres_url: Option<String>,
    ) -> Self {
        let clock = Arc::new(ManualClock::new(TEST_EPOCH_MS));
        let storage = Storage::open(backend, count_sql, Default::default(), postgres_url).await;
        let objects = SplitObjects::new(storage.store.clone(), storage.prefix.clone());
        let engine = Engine::new(storage.catalog, objects, policy, engine_options(&clock))
            .expect("engine starts");
        Self {
            backend,
            engine,
            clock,
            store: Some(storage.store),
            pg: storage.pg,
            sql: storage.sql,
            prefix: storage.prefix,
            _directory: storage.directory,
        }
    }

    /// An engine over the same storage as `engine`, as another process would have: its own
    /// catalog instance (its own pool on Postgres, its own cache on object storage), its own
    /// gates, the same policy and clock. It reaches object storage through `store`: the
    /// harness's own (`store`), or a wrapper around it.
    pub async fn another_process(&self, store: Arc<dyn ObjectStore>) -> Engine {
        let catalog: Arc<dyn Catalog> = match self.backend {
            Backend::Postgres => Arc::new(connect_postgres(&postgres_url()).await),
            _ => Arc::new(ObjectStoreCatalog::new(
                store.clone(),
                self.prefix.clone(),
                Default::default(),
            )),
        };
        let objects = SplitObjects::new(store, self.prefix.clone());
        Engine::new(
            catalog,
            objects,
            self.engine.policy(),
            engine_options(&self.clock),
        )
        .expect("engine starts")
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

    /// A fingerprint that changes whenever storage is written for `dataset_id`: on Postgres
    /// the [row versions](postgres_row_versions) of the dataset's rows and the split objects'
    /// write count, on object storage the store's write count.
    pub async fn write_fingerprint(&self, dataset_id: &str) -> WriteFingerprint {
        match &self.pg {
            Some(pool) => {
                let mut versions = postgres_row_versions(pool, dataset_id).await;
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

    /// Marks `split_ids` for deletion and records their marks as seen now, as the first gc
    /// after the mark would: their deletion grace period counts from now
    /// ([`mend::model::SplitRow::mark_seen_at_ms`]).
    pub async fn mark_seen_now(&self, dataset_id: &str, split_ids: &[String]) {
        self.engine
            .mark_for_deletion(dataset_id, split_ids)
            .await
            .expect("mark for deletion");
        let now = mend::clock::Clock::now_ms(self.clock.as_ref());
        self.engine
            .catalog()
            .see_marks(dataset_id, split_ids, now)
            .await
            .expect("see the marks");
    }

    /// Writes a split object in mend's format, as a writer that crashed between its upload and
    /// its stage would leave it (or before its publish, once a row is staged for it): written
    /// for dataset incarnation `uid`, with a payload that matches its header unless `damaged`.
    pub async fn plant_orphan(&self, dataset_id: &str, split_id: &str, uid: &str, damaged: bool) {
        self.plant_object(dataset_id, split_id, uid, "lost-operation", damaged)
            .await;
    }

    /// [`plant_orphan`](Self::plant_orphan), whole, its header naming `operation_id`: what an
    /// upload of that operation leaves when it lands after everything else of it is gone.
    pub async fn plant_orphan_of(
        &self,
        dataset_id: &str,
        split_id: &str,
        uid: &str,
        operation_id: &str,
    ) {
        self.plant_object(dataset_id, split_id, uid, operation_id, false)
            .await;
    }

    async fn plant_object(
        &self,
        dataset_id: &str,
        split_id: &str,
        uid: &str,
        operation_id: &str,
        damaged: bool,
    ) {
        use mend::objects::format::{self, HEADER_FORMAT_VERSION, SplitObjectHeader, sha256};
        let payload = format!("payload of {split_id}");
        let header = SplitObjectHeader {
            format_version: HEADER_FORMAT_VERSION,
            dataset_id: dataset_id.into(),
            dataset_uid: uid.into(),
            split_id: split_id.into(),
            node: "lost-writer".into(),
            metadata_json: r#"{"num_docs": 7}"#.into(),
            operation_id: Some(operation_id.into()),
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
                format::encode(&header, payload.as_bytes()).into(),
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
                    bytes::Bytes::from_static(b"split object").into(),
                )
                .await
                .expect("write a split object");
        }
    }

    /// Leaves a stale intent: `request` (one commit's splits, delta and token) published
    /// through the protocol of a writer in another process, its intent left behind
    /// ([`Harness::publish_leaving_intent`]). An in-process commit cannot leave one: its
    /// publish deletes its intent in the same atomic step.
    pub async fn leave_stale_intent(&self, request: &mend::engine::CommitRequest) {
        use mend::engine::{BeginOperation, ExternalKind, PlannedSplit};
        let begin = BeginOperation {
            dataset_id: request.dataset_id.clone(),
            operation_id: None,
            kind: ExternalKind::Commit,
            node: request.node.clone(),
            lease_ms: None,
            splits: request
                .splits
                .iter()
                .map(|split| PlannedSplit {
                    split_id: split.split_id.clone(),
                    metadata_json: split.metadata_json.clone(),
                    size: split.payload.len() as u64,
                    sha256: mend::objects::format::sha256(&split.payload),
                })
                .collect(),
            checkpoint_delta: request.checkpoint_delta.clone(),
            replaced_split_ids: Vec::new(),
            publish_token: request.publish_token.clone(),
        };
        let begun = self.engine.begin_operation(&begin).await.expect("begin");
        for split in &request.splits {
            let body = futures::stream::iter([Ok(split.payload.clone())]);
            self.engine
                .upload_object(
                    &request.dataset_id,
                    &begun.operation_id,
                    &split.split_id,
                    body,
                )
                .await
                .expect("upload");
        }
        self.publish_leaving_intent(&request.dataset_id, &begun.operation_id)
            .await;
    }

    /// Publishes the begun operation `operation_id` as its writer's publish does, under the
    /// operation's key, but leaves its intent (confirmed) behind: what a writer's publish
    /// whose process died before deleting the intent left when the delete was a step of its
    /// own (mend before the publish deleted it in its own atomic step), and what a backend
    /// running the catalog's default, separate `publish_commit` steps can still leave.
    pub async fn publish_leaving_intent(&self, dataset_id: &str, operation_id: &str) {
        use mend::intent::{Intent, IntentPhase};
        let catalog = self.engine.catalog();
        let intent = catalog
            .list_intents(dataset_id)
            .await
            .expect("the intents")
            .into_iter()
            .find(|intent| intent.operation_id == operation_id)
            .expect("the operation's intent");
        let confirmed = Intent {
            phase: IntentPhase::EffectsConfirmed,
            ..intent
        };
        catalog
            .update_intent(&confirmed, IntentPhase::Armed)
            .await
            .expect("confirm");
        let planned = confirmed
            .effects
            .publish
            .as_ref()
            .expect("a planned publish");
        let key =
            mend::catalog::RequestKey::new(format!("op:{operation_id}:publish"), &operation_id);
        catalog
            .publish(
                &planned.request(dataset_id, None),
                &|_| Ok(()),
                self.clock_now(),
                Some(&key),
            )
            .await
            .expect("publish");
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

/// The row versions (`ctid`, `xmin`) of `dataset_id`'s rows in every table of a Postgres
/// catalog, as (table, ctid, xmin): any write to a row gives it a new version, so the list
/// changes whenever anything is written for the dataset. The harness's write fingerprint on
/// Postgres, and the catalog's part of the conformance kit's.
///
/// It covers every table of the catalog, found in the schema rather than listed here, so that
/// a table added by a later migration is covered too; a table that holds no `dataset_id`
/// column fails the fingerprint until it is accounted for.
pub async fn postgres_row_versions(
    pool: &PgPool,
    dataset_id: &str,
) -> Vec<(String, String, String)> {
    let tables: Vec<(String, bool)> = sqlx::query_as(
        "SELECT t.table_name::text, EXISTS (SELECT 1 FROM information_schema.columns c \
         WHERE c.table_schema = t.table_schema AND c.table_name = t.table_name \
         AND c.column_name = 'dataset_id') \
         FROM information_schema.tables t \
         WHERE t.table_schema = current_schema() AND t.table_type = 'BASE TABLE' \
         ORDER BY t.table_name",
    )
    .fetch_all(pool)
    .await
    .expect("list the catalog's tables");
    let mut versions = Vec::new();
    for (table, has_dataset_id) in &tables {
        if TABLES_WITHOUT_DATASET_ROWS.contains(&table.as_str()) {
            continue;
        }
        assert!(
            has_dataset_id,
            "table {table} has no dataset_id column: the write fingerprint cannot \
             tell its rows apart; extend postgres_row_versions"
        );
        // The table name comes from the catalog itself, quoted as an identifier.
        let rows: Vec<(String, String)> = sqlx::query_as(&format!(
            "SELECT ctid::text, xmin::text FROM \"{}\" WHERE dataset_id = $1 ORDER BY ctid",
            table.replace('"', "\"\"")
        ))
        .bind(dataset_id)
        .fetch_all(pool)
        .await
        .unwrap_or_else(|error| panic!("read row versions of {table}: {error}"));
        versions.extend(
            rows.into_iter()
                .map(|(ctid, xmin)| (table.clone(), ctid, xmin)),
        );
    }
    assert!(
        ["datasets", "splits", "intents", "audit"]
            .iter()
            .all(|expected| tables.iter().any(|(table, _)| table == expected)),
        "the fingerprint misses a catalog table: found {tables:?}"
    );
    versions
}

/// What a harness's engine stores its catalog and objects in.
pub(crate) struct Storage {
    pub(crate) catalog: Arc<dyn Catalog>,
    /// The split objects' store and, on object storage, the catalog's.
    pub(crate) store: Arc<CountingStore>,
    /// Where the catalog and the objects live in `store`.
    pub(crate) prefix: Path,
    pub(crate) pg: Option<PgPool>,
    pub(crate) sql: Option<SqlCounter>,
    pub(crate) directory: Option<TempDir>,
}

impl Storage {
    /// `options` for an object-storage catalog (unused by Postgres); `postgres_url`: the
    /// database of a Postgres catalog, the shared one when `None`.
    pub(crate) async fn open(
        backend: Backend,
        count_sql: bool,
        options: ObjectStoreCatalogOptions,
        postgres_url: Option<String>,
    ) -> Self {
        let (inner, prefix, directory): (Arc<dyn ObjectStore>, Path, _) = match backend {
            Backend::Postgres | Backend::Memory => {
                (Arc::new(InMemory::new()), Path::default(), None)
            }
            Backend::S3 => {
                // Each harness gets its own prefix of the shared bucket.
                let url = format!("{}/{}", s3_url(), uuid::Uuid::new_v4().simple());
                let (store, prefix) = mend::catalog::object_store::open_store(&url)
                    .unwrap_or_else(|error| panic!("open {url}: {error}"));
                (store, prefix, None)
            }
            Backend::LocalDirectory => {
                let directory = tempfile::tempdir().expect("temporary directory");
                let store =
                    LocalFileSystem::new_with_prefix(directory.path()).expect("local store");
                (Arc::new(store), Path::default(), Some(directory))
            }
        };
        let store = Arc::new(CountingStore::new(inner));
        // Memory and S3 list names in order; a local directory does not.
        let options = ObjectStoreCatalogOptions {
            store_lists_in_order: matches!(backend, Backend::Memory | Backend::S3),
            ..options
        };
        let (catalog, pg, sql): (Arc<dyn Catalog>, _, _) = match backend {
            Backend::Postgres => {
                let url = postgres_url.unwrap_or_else(self::postgres_url);
                let sql = match count_sql {
                    true => Some(SqlCounter::start(&url).await),
                    false => None,
                };
                let catalog =
                    connect_postgres(sql.as_ref().map_or(url.as_str(), |s| s.url())).await;
                let pool = PgPool::connect(&url).await.expect("inspection pool");
                (Arc::new(catalog), Some(pool), sql)
            }
            _ => {
                let catalog = ObjectStoreCatalog::new(store.clone(), prefix.clone(), options);
                (Arc::new(catalog), None, None)
            }
        };
        Self {
            catalog,
            store,
            prefix,
            pg,
            sql,
            directory,
        }
    }
}

fn default_policy() -> PolicyRuntime {
    PolicyRuntime::default_policy().expect("default policy loads")
}

fn engine_options(clock: &Arc<ManualClock>) -> EngineOptions {
    EngineOptions {
        max_stage_batch: TEST_MAX_STAGE_BATCH,
        clock: clock.clone(),
        ..EngineOptions::default()
    }
}

async fn connect_postgres(url: &str) -> PostgresCatalog {
    PostgresCatalog::connect_with(url, postgres_options())
        .await
        .unwrap_or_else(|error| panic!("connect to {url}: {error}"))
}

//! Tests of the object-storage catalog: the trait's semantics in `semantics`, the log itself
//! (checkpoints, format versions, races, unclear put outcomes, URLs) in `durability`,
//! checkpoint formats and retention racing readers and writers in `retention`, the index of
//! datasets with pending intents in `pending`, audit trails and the catalog-wide index of audit
//! objects in `audit`. This file
//! holds what they share: a store wrapper that counts and can fail or dawdle, and simple
//! planners standing in for the policy, which is not this backend's concern.

mod audit;
mod durability;
mod pending;
mod retention;
mod semantics;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ::object_store::memory::InMemory;
use ::object_store::path::Path;
use ::object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use mend_contract::ExistingRow;

use super::{ObjectStoreCatalog, ObjectStoreCatalogOptions};
use crate::catalog::{Catalog, PlannedAction, PlannedStage, StagePlan, distinct_splits};
use crate::error::{MendError, Result};
use crate::model::{
    DatasetConfig, NewSplit, PublishRequest, SplitState, StageMode, StagedSplit, TimeRange,
    TimestampMs,
};

const T0: TimestampMs = 1_700_000_000_000;

/// Counts puts, records every GET and listing (and the entries the listings answered), and on
/// request makes the next put fail, either after
/// writing (a timeout whose write landed) or before (a timeout whose write did not), or
/// answers every put "already exists" (a writer that always loses the race).
#[derive(Debug)]
struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    puts: AtomicU64,
    gets: Mutex<Vec<String>>,
    /// The prefix of every listing, in order.
    lists: Mutex<Vec<String>>,
    /// Entries the listings answered with, as read: shared with the streams, which outlive the
    /// call that made them.
    listed: Arc<AtomicU64>,
    fail_next_put_after_write: AtomicBool,
    fail_next_put_before_write: AtomicBool,
    refuse_puts: AtomicBool,
    /// Every GET waits up to half a millisecond first, so that races with deletions happen
    /// often.
    slow_gets: AtomicBool,
}

impl CountingStore {
    fn new(inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            puts: AtomicU64::new(0),
            gets: Mutex::new(Vec::new()),
            lists: Mutex::new(Vec::new()),
            listed: Arc::new(AtomicU64::new(0)),
            fail_next_put_after_write: AtomicBool::new(false),
            fail_next_put_before_write: AtomicBool::new(false),
            refuse_puts: AtomicBool::new(false),
            slow_gets: AtomicBool::new(false),
        })
    }

    fn puts(&self) -> u64 {
        self.puts.load(Ordering::SeqCst)
    }

    fn take_gets(&self) -> Vec<String> {
        std::mem::take(&mut self.gets.lock().unwrap())
    }

    fn take_lists(&self) -> Vec<String> {
        std::mem::take(&mut self.lists.lock().unwrap())
    }

    /// Entries read from listings since the last call.
    fn take_listed(&self) -> u64 {
        self.listed.swap(0, Ordering::SeqCst)
    }
}

fn injected_failure() -> ::object_store::Error {
    ::object_store::Error::Generic {
        store: "counting",
        source: "injected timeout".into(),
    }
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> ::object_store::Result<PutResult> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        if self
            .fail_next_put_before_write
            .swap(false, Ordering::SeqCst)
        {
            return Err(injected_failure());
        }
        if self.refuse_puts.load(Ordering::SeqCst) {
            return Err(::object_store::Error::AlreadyExists {
                path: location.to_string(),
                source: "injected race".into(),
            });
        }
        let result = self.inner.put_opts(location, payload, opts).await;
        if self.fail_next_put_after_write.swap(false, Ordering::SeqCst) {
            return Err(injected_failure());
        }
        result
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> ::object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> ::object_store::Result<GetResult> {
        if self.slow_gets.load(Ordering::Relaxed) {
            let micros = uuid::Uuid::new_v4().as_u128() % 500;
            tokio::time::sleep(std::time::Duration::from_micros(micros as u64)).await;
        } else {
            self.gets.lock().unwrap().push(location.to_string());
        }
        self.inner.get_opts(location, options).await
    }

    async fn delete(&self, location: &Path) -> ::object_store::Result<()> {
        self.inner.delete(location).await
    }

    fn list(
        &self,
        prefix: Option<&Path>,
    ) -> BoxStream<'static, ::object_store::Result<ObjectMeta>> {
        let named = prefix.map(Path::to_string).unwrap_or_default();
        self.lists.lock().unwrap().push(named);
        let listed = self.listed.clone();
        self.inner
            .list(prefix)
            .inspect(move |_| {
                listed.fetch_add(1, Ordering::SeqCst);
            })
            .boxed()
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&Path>,
    ) -> ::object_store::Result<ListResult> {
        let named = prefix.map(Path::to_string).unwrap_or_default();
        self.lists.lock().unwrap().push(named);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> ::object_store::Result<()> {
        self.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> ::object_store::Result<()> {
        self.inner.copy_if_not_exists(from, to).await
    }
}

/// A catalog in memory, with the counting store under it.
fn counted_catalog(options: ObjectStoreCatalogOptions) -> (ObjectStoreCatalog, Arc<CountingStore>) {
    let store = CountingStore::new(Arc::new(InMemory::new()));
    let catalog = ObjectStoreCatalog::new(store.clone(), Path::from("mend"), options);
    (catalog, store)
}

/// A second catalog instance on the same store and prefix, with its own cache: another process.
fn sibling(catalog: &ObjectStoreCatalog) -> ObjectStoreCatalog {
    ObjectStoreCatalog::new(
        catalog.store().clone(),
        catalog.prefix().clone(),
        ObjectStoreCatalogOptions::default(),
    )
}

async fn catalog_with_dataset(dataset_id: &str) -> (ObjectStoreCatalog, Arc<CountingStore>) {
    let (catalog, store) = counted_catalog(ObjectStoreCatalogOptions::default());
    catalog
        .create_dataset(dataset_id, "uid-1", &DatasetConfig::default(), T0, None)
        .await
        .unwrap();
    (catalog, store)
}

fn new_split(split_id: &str, node: &str) -> NewSplit {
    NewSplit {
        split_id: split_id.to_string(),
        node: node.to_string(),
        metadata_json: serde_json::json!({ "docs": 10, "written_by": node }).to_string(),
        time_range: Some(TimeRange {
            start: 100,
            end: 200,
        }),
    }
}

fn ids(split_ids: &[&str]) -> Vec<String> {
    split_ids.iter().map(|id| id.to_string()).collect()
}

/// The default policy's stage planning, reduced to what these tests need: create-only
/// inserts the missing and skips the rest; upsert also overwrites staged rows and refuses the
/// batch if any row is published or marked.
fn plan(
    mode: StageMode,
    node: &str,
    split_ids: &[String],
    existing: &[ExistingRow],
) -> Result<StagePlan> {
    let mut requested = split_ids.to_vec();
    requested.sort();
    requested.dedup();
    let mut entries = Vec::new();
    for split_id in requested {
        let found = existing.iter().find(|row| row.split_id == split_id);
        let action = match (mode, found) {
            (_, None) => PlannedAction::Insert,
            (StageMode::CreateOnly, Some(row)) => PlannedAction::Skip(row.state),
            (StageMode::Upsert, Some(row)) if row.state == SplitState::Staged => {
                PlannedAction::Overwrite
            }
            (StageMode::Upsert, Some(row)) => {
                return Err(MendError::failed_precondition(
                    "upsert cannot overwrite",
                    vec![row.split_id.clone()],
                ));
            }
        };
        entries.push(PlannedStage {
            split: new_split(&split_id, node).into(),
            action,
        });
    }
    Ok(StagePlan { entries })
}

/// `split_ids` (in any order, repeats allowed) written by `node`, as `Catalog::stage` takes
/// them.
fn splits(mode: StageMode, node: &str, split_ids: &[String]) -> Vec<Arc<NewSplit>> {
    let requested: Vec<Arc<NewSplit>> = split_ids
        .iter()
        .map(|split_id| Arc::new(new_split(split_id, node)))
        .collect();
    distinct_splits(mode, &requested)
}

async fn stage(
    catalog: &ObjectStoreCatalog,
    mode: StageMode,
    node: &str,
    split_ids: &[String],
    now_ms: TimestampMs,
) -> Result<Vec<StagedSplit>> {
    let planner = |existing: &[ExistingRow]| plan(mode, node, split_ids, existing);
    catalog
        .stage(
            "logs",
            mode,
            &splits(mode, node, split_ids),
            &planner,
            now_ms,
            None,
        )
        .await
}

fn publish_request(staged: &[&str], replaced: &[&str]) -> PublishRequest {
    PublishRequest {
        dataset_id: "logs".to_string(),
        staged_split_ids: ids(staged),
        replaced_split_ids: ids(replaced),
        checkpoint_delta: None,
        publish_token: None,
        fencing_epoch: None,
    }
}

async fn publish_unchecked(catalog: &ObjectStoreCatalog, staged: &[&str], now_ms: TimestampMs) {
    catalog
        .publish(&publish_request(staged, &[]), &|_| Ok(()), now_ms, None)
        .await
        .unwrap();
}

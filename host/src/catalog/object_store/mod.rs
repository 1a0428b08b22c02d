//! The object-storage catalog: each dataset's catalog is a versioned commit log on any store
//! the `object_store` crate speaks to (a local directory, memory, S3-compatible).
//!
//! - **Commits.** A mutation decides on the newest state this instance knows
//!   (`mutations.rs`) and writes the next version's log file with put-if-absent (`append.rs`), with no
//!   look for that version first. Losing the put means another writer committed first: read
//!   the new versions and decide again, a bounded number of times, then
//!   [`MendError::Conflict`]. A decision that writes nothing (or refuses) on a state not
//!   read just now is checked against the log first, so that it never answers for a stale
//!   view. No file is ever overwritten, so processes sharing a store never lose an update, on
//!   any store that supports put-if-absent. A mutation that changes nothing writes nothing.
//! - **Reads** (`read.rs`). The instance caches each dataset's state; a read probes only for the version
//!   after the cached one (one GET that finds nothing when nothing changed). Without a cache
//!   it loads the newest checkpoint and replays the versions after it (`log.rs` and the
//!   files' format in `log_format.rs`, `state.rs`),
//!   then lists the checkpoints once more: one newer than what it reached means retention
//!   may have cut the log under it, and it starts again from there.
//! - **Checkpoints** fall due every `checkpoint_interval` versions and are written after the
//!   commit is acknowledged, by a task of their own (`background.rs`), in a compact form
//!   (`checkpoint.rs`). **Retention** then deletes old checkpoints and the log versions they
//!   cover (`retention.rs`, which also says why racing readers and writers stay right).
//! - **Recorded requests** ([`crate::catalog::recorded`]) live in the same log: a keyed
//!   mutation's record is one more action of the very commit of its effect (version 0 for a
//!   keyed creation), and a key found recorded is answered from the state, with no commit.
//! - **Versions.** The log version grows with every commit, staging included; the dataset's
//!   `manifest_version` grows only with changes to the published view (publish, mark, delete,
//!   config, token, fencing epoch), as the [`Catalog`] trait says.
//!
//! - **Pending work.** Writers keep an index of the datasets that may have pending intents,
//!   a marker per dataset under `index/pending/`, put before any log version that adds an
//!   intent, so that [`Catalog::pending_datasets`] is one listing (`pending.rs`, which says
//!   exactly what it promises and the one window it leaves).
//! - **Recent audit.** Writers keep an index of the audit objects of every dataset, an empty
//!   entry per object under `index/audit/` named newest first, put before the object, so that
//!   [`Catalog::list_recent_audit`] reads one listing as far as it needs
//!   (`audit_index.rs`, which says what happens to a catalog from before the index).
//!
//! Opening a catalog from a URL lives in `open.rs`; policy decisions stay with the engine,
//! which passes them in as planner and validator closures.

mod append;
mod audit;
mod audit_index;
mod background;
// Crate-visible for `crate::fuzzing`, which feeds the file decoders arbitrary bytes.
pub(crate) mod checkpoint;
pub(crate) mod log;
pub(crate) mod log_format;
mod mutations;
mod open;
pub mod pending;
mod read;
mod retention;
mod scan;
mod settle;
mod splits;
pub(crate) mod state;
#[cfg(test)]
mod tests;
mod writes;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::object_store::ObjectStore;
use ::object_store::path::Path;
use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use tokio::time::Instant;

use self::audit_index::AuditIndex;
use self::background::{Checkpointer, Schedule};
use self::log::{Log, PutOutcome};
use self::log_format::{Action, Commit};
pub(crate) use self::open::open_objects;
pub use self::open::{lists_in_order, open_store};
use self::pending::PendingIndex;
use self::state::DatasetState;
use super::write_audit::{self};
use super::{
    BegunCommit, Capabilities, Catalog, DatasetChange, ExistingRow, InTheWay, IntentBuilder,
    ManifestProbe, MarkRule, OperationRecords, PENDING_INDEX, PendingDataset, PublishValidator,
    RecentAudit, RecordedRequest, RequestKey, SettleValidator, Settled, Settlement, StagePlanner,
    standard_stage_plan,
};
use crate::audit::AuditRecord;
use crate::error::{EntityKind, MendError, Result};
use crate::intent::{Intent, IntentPhase, check_written_format};
use crate::model::{
    Dataset, DatasetConfig, ListQuery, MarkResult, NewSplit, PublishRequest, PublishResult,
    SplitPage, StageMode, StagedSplit, TimestampMs,
};

/// Tuning for [`ObjectStoreCatalog`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectStoreCatalogOptions {
    /// Every this many log versions a writer also stores the whole state, in the background,
    /// so that a fresh reader replays about this many commits at most.
    pub checkpoint_interval: u64,
    /// How many times a mutation re-reads and re-decides after losing a race before it gives
    /// up with `Conflict`.
    pub max_commit_attempts: u32,
    /// Retention: the newest checkpoints kept per dataset after each checkpoint this
    /// instance writes; older ones, and the log versions up to the oldest kept one, are
    /// deleted. 0 deletes nothing.
    pub checkpoints_kept: usize,
    /// Retention: a log version is deleted only once it is this old, by the store's clock.
    /// A cached state is committed on without a listing for half of this, so it must be
    /// well over the time one store call may take and the clock skew between processes.
    pub log_retention: Duration,
    /// `C` of the pending index ([`pending`]): a process that created a dataset's pending
    /// marker itself skips putting it again for this long, so that a steady stream of commits
    /// costs no request for it. `clear_pending` deletes a marker only once it is twice this old
    /// (`G`), so the margin `G - C`, this same length, must stay well above the skew between
    /// the clocks of the processes and the store plus the time one log put may take. Every
    /// process on a catalog must use the same value. Zero puts the marker before every commit
    /// that adds an intent and lets `clear_pending` delete it at once (for tests).
    pub pending_marker_reuse: Duration,
    /// Whether the store lists names in lexicographic order, as S3 (and the stores compatible
    /// with it), GCS, Azure and `InMemory` do and a local directory does not. With it, the
    /// newest audit records of the catalog ([`Catalog::list_recent_audit`]) are found by
    /// reading the audit index's listing only as far as they are (a page of 1,000 names at a
    /// time on S3); without it, the whole listing is read and sorted, in proportion to every
    /// append the index holds. Claimed for a store that does not list in order, it would miss
    /// records. [`ObjectStoreCatalog::open_url_with`] sets it for the URLs of stores that do.
    pub store_lists_in_order: bool,
}

impl Default for ObjectStoreCatalogOptions {
    fn default() -> Self {
        Self {
            checkpoint_interval: 100,
            max_commit_attempts: 64,
            checkpoints_kept: 3,
            log_retention: Duration::from_secs(10 * 60),
            pending_marker_reuse: pending::PENDING_MARKER_REUSE,
            store_lists_in_order: false,
        }
    }
}

/// Store calls this instance made, since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ObjectStoreCatalogStats {
    /// GETs of log versions, found or not (a refresh with nothing new costs one).
    pub log_reads: u64,
    /// Checkpoints loaded by readers without a cached state.
    pub checkpoint_reads: u64,
    /// Commits this instance wrote.
    pub commits: u64,
    /// Commit attempts that found the version already taken by another writer.
    pub lost_races: u64,
    /// Checkpoints this instance wrote (one every `checkpoint_interval` commits).
    pub checkpoints_written: u64,
    /// Checkpoint writes that failed; harmless, the next interval writes another.
    pub checkpoint_failures: u64,
    /// Old checkpoints and log files retention deleted.
    pub files_pruned: u64,
    /// Listings or deletions of retention that failed; what stays goes with the next prune.
    pub prune_failures: u64,
    /// Loads that found the log cut under them by retention (a listed checkpoint gone, or a
    /// version missing below a listed checkpoint) and started again from the newest
    /// checkpoint.
    pub reloads: u64,
}

/// A [`Catalog`] kept as per-dataset commit logs on an object store.
pub struct ObjectStoreCatalog {
    log: Arc<Log>,
    options: ObjectStoreCatalogOptions,
    /// A std mutex: it is only held to clone or swap an `Arc`, never across an await, and
    /// every map entry is a whole state, so a panic elsewhere cannot leave one half-written.
    cache: Mutex<HashMap<String, Cached>>,
    checkpointer: Checkpointer,
    /// The markers of datasets that may have pending intents ([`pending`]).
    pending: PendingIndex,
    /// The entries of every dataset's audit objects (`audit_index.rs`).
    audit_index: AuditIndex,
}

/// A cached state, and since when it is known to be the newest.
#[derive(Debug, Clone)]
struct Cached {
    state: Arc<DatasetState>,
    /// A moment at which the version after `state` was missing from the log (before the GET
    /// that found it missing, or the put that wrote `state`'s own version). Versions written
    /// since were all written after it, so none of them can have been deleted by retention
    /// until `log_retention` after it.
    confirmed_at: Instant,
}

/// How many log versions a replay reads at once, at most.
const MAX_READS_AHEAD: u64 = 16;

/// How many rounds a load takes (each a read to the end of the log and a listing) before it
/// gives up: only a log checkpointed and pruned faster than a checkpoint can be read gets
/// there.
const MAX_LOAD_ROUNDS: u32 = 32;

impl ObjectStoreCatalog {
    /// [`Catalog::stage`], first refusing, with [`InTheWay::Refuse`], a stage naming a split an
    /// intent of the same state version names ([`Catalog::stage_unless_in_the_way`]); a key
    /// recorded in that version is answered before the check.
    #[allow(clippy::too_many_arguments)]
    async fn stage_checking(
        &self,
        dataset_id: &str,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        planner: &StagePlanner<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
        in_the_way: InTheWay,
    ) -> Result<Vec<StagedSplit>> {
        let write = write_audit::pending(dataset_id, "stage", || {
            splits.iter().map(|split| split.split_id.as_str())
        });
        let answer = |staged: &Vec<StagedSplit>| write_audit::stage_answer(staged);
        self.mutate_recorded(
            dataset_id,
            now_ms,
            write.as_ref(),
            answer,
            |state, now_ms| {
                mutations::keyed(state, key, now_ms, |state| {
                    if in_the_way == InTheWay::Refuse {
                        super::refuse_in_the_way(state.intents.values().map(Arc::as_ref), splits)?;
                    }
                    mutations::stage(state, mode, splits, planner, now_ms)
                })
            },
        )
        .await
    }

    /// The publish, refused with `RecoveryRequired` when `in_the_way` says so and an intent
    /// of the same state version names one of its splits
    /// ([`Catalog::publish_unless_in_the_way`]); a key recorded in that version is answered
    /// before the check.
    async fn publish_checking(
        &self,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
        in_the_way: InTheWay,
    ) -> Result<PublishResult> {
        let dataset_id = &request.dataset_id;
        let write =
            write_audit::pending(dataset_id, "publish", || write_audit::publish_ids(request));
        self.mutate_recorded(
            dataset_id,
            now_ms,
            write.as_ref(),
            write_audit::answer_of,
            |state, now_ms| {
                mutations::keyed(state, key, now_ms, |state| {
                    if in_the_way == InTheWay::Refuse {
                        super::refuse_naming(
                            state.intents.values().map(Arc::as_ref),
                            super::publish_ids(request),
                        )?;
                    }
                    mutations::publish(state, request, validate, now_ms)
                })
            },
        )
        .await
    }

    /// A catalog under `prefix` of `store`. The store must support `PutMode::Create`.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: Path,
        options: ObjectStoreCatalogOptions,
    ) -> Self {
        let pending = PendingIndex::new(store.clone(), &prefix, options.pending_marker_reuse);
        let audit_index = AuditIndex::new(store.clone(), &prefix);
        let log = Arc::new(Log::new(store, prefix));
        let schedule = Schedule {
            checkpoint_interval: options.checkpoint_interval,
            checkpoints_kept: options.checkpoints_kept,
            log_retention: options.log_retention,
        };
        Self {
            checkpointer: Checkpointer::new(Arc::clone(&log), schedule),
            log,
            options,
            cache: Mutex::new(HashMap::new()),
            pending,
            audit_index,
        }
    }

    /// The store the catalog lives in.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.log.store
    }

    /// Where in the store: datasets live under `{prefix}/datasets/`.
    pub fn prefix(&self) -> &Path {
        &self.log.prefix
    }

    /// The newest log version of a dataset. With a cached state this costs one GET when
    /// nothing changed; live handles use it to skip refreshes.
    pub async fn probe_version(&self, dataset_id: &str) -> Result<u64> {
        Ok(self.load(dataset_id).await?.version)
    }

    /// Waits until the checkpoints (and the retention after them) that this instance's
    /// commits so far made due are written, or have failed.
    pub async fn flush(&self) {
        self.checkpointer.idle().await;
    }

    /// What this instance has read and written so far.
    pub fn stats(&self) -> ObjectStoreCatalogStats {
        let counters = &self.log.counters;
        let read = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
        ObjectStoreCatalogStats {
            log_reads: read(&counters.log_reads),
            checkpoint_reads: read(&counters.checkpoint_reads),
            commits: read(&counters.commits),
            lost_races: read(&counters.lost_races),
            checkpoints_written: read(&counters.checkpoints_written),
            checkpoint_failures: read(&counters.checkpoint_failures),
            files_pruned: read(&counters.files_pruned),
            prune_failures: read(&counters.prune_failures),
            reloads: read(&counters.reloads),
        }
    }
}

/// The answer to a keyed creation of a dataset that exists: the recorded creation, if this
/// very request (its key) created it; `AlreadyExists` otherwise.
fn created_before(state: &DatasetState, dataset_id: &str, key: &RequestKey) -> Result<Dataset> {
    match state.recorded.get(key.key.as_str()) {
        Some(found) => found.replay(key),
        None => Err(already_exists(dataset_id)),
    }
}

fn already_exists(dataset_id: &str) -> MendError {
    MendError::AlreadyExists {
        kind: EntityKind::Dataset,
        id: dataset_id.to_string(),
    }
}

impl fmt::Debug for ObjectStoreCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreCatalog")
            .field("store", &self.log.store.to_string())
            .field("prefix", &self.log.prefix.as_ref())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Catalog for ObjectStoreCatalog {
    fn capabilities(&self) -> Capabilities {
        Capabilities::full_backend()
            .with(PENDING_INDEX)
            .with(crate::catalog::write_audit::WRITE_AUDIT)
    }

    fn describe(&self) -> String {
        // The stores' Display names the bucket or directory, never credentials.
        format!(
            "object-store catalog on {}, prefix \"{}\"",
            self.log.store, self.log.prefix
        )
    }

    async fn create_dataset(
        &self,
        dataset_id: &str,
        uid: &str,
        config: &DatasetConfig,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        if dataset_id.is_empty() {
            return Err(MendError::invalid("a dataset id must not be empty"));
        }
        // A keyed creation looks first, so that its retry only reads: the dataset it created
        // answers. A race to create it is settled by the put below.
        if let Some(key) = key {
            match self.load(dataset_id).await {
                Ok(state) => return created_before(&state, dataset_id, key),
                Err(MendError::NotFound { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        // The audit index starts with the catalog's first dataset, or says since when it holds
        // every record (`audit_index.rs`).
        self.audit_index.start_before_creating(now_ms).await?;
        let dataset = mutations::new_dataset(dataset_id, uid, config, now_ms);
        // A keyed creation keeps its record in the dataset it creates, in version 0 itself.
        let mut actions = vec![Action::CreateDataset {
            dataset: dataset.clone(),
        }];
        if let Some(key) = key {
            actions.push(Action::RecordRequest {
                record: Box::new(RecordedRequest::new(key, &dataset, now_ms)),
            });
        }
        if let Some(write) = write_audit::pending(dataset_id, "create-dataset", || []) {
            actions.push(Action::RecordWrite {
                record: Box::new(write.answered(&dataset, now_ms)),
            });
        }
        let creation = Commit::new(0, now_ms, actions);
        let put_at = Instant::now();
        match self.log.put_commit(dataset_id, &creation).await? {
            PutOutcome::Committed => {
                let state = DatasetState::from_creation(dataset_id, &creation)?;
                self.remember(dataset_id, &Arc::new(state), put_at);
                Ok(dataset)
            }
            PutOutcome::Lost => match key {
                Some(key) => created_before(&*self.load(dataset_id).await?, dataset_id, key),
                None => Err(already_exists(dataset_id)),
            },
        }
    }

    async fn list_datasets(&self) -> Result<Vec<Dataset>> {
        let dataset_ids = self.log.dataset_ids().await?;
        let loaded: Vec<Option<Dataset>> = futures::stream::iter(dataset_ids)
            .map(|dataset_id| async move {
                match self.load(&dataset_id).await {
                    Ok(state) => Ok(Some(state.dataset.clone())),
                    // A directory without a log is not a dataset (nothing else is created
                    // before version 0), so it is left out rather than failing the listing.
                    Err(MendError::NotFound { .. }) => Ok(None),
                    Err(err) => Err(err),
                }
            })
            .buffer_unordered(8)
            .try_collect()
            .await?;
        let mut datasets: Vec<Dataset> = loaded.into_iter().flatten().collect();
        datasets.sort_by(|left, right| left.dataset_id.cmp(&right.dataset_id));
        Ok(datasets)
    }

    async fn list_dataset_ids(&self) -> Result<Vec<String>> {
        let mut ids = self.log.dataset_ids().await?;
        ids.sort();
        Ok(ids)
    }

    async fn dataset(&self, dataset_id: &str) -> Result<Dataset> {
        Ok(self.load(dataset_id).await?.dataset.clone())
    }

    async fn probe_manifest(&self, dataset_id: &str) -> Result<ManifestProbe> {
        let state = self.load(dataset_id).await?;
        Ok(ManifestProbe {
            manifest_version: state.dataset.manifest_version,
            pending_intents: !state.intents.is_empty(),
        })
    }

    async fn update_dataset(
        &self,
        dataset_id: &str,
        change: DatasetChange<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        let write = write_audit::pending(dataset_id, "update-dataset", || []);
        self.mutate_recorded(
            dataset_id,
            now_ms,
            write.as_ref(),
            write_audit::answer_of,
            |state, now_ms| {
                mutations::keyed(state, key, now_ms, |state| match change {
                    DatasetChange::Config {
                        expected_config_version,
                        config,
                    } => mutations::update_config(state, expected_config_version, config, now_ms),
                    DatasetChange::PublishToken(token) => {
                        mutations::set_publish_token(state, token, now_ms)
                    }
                    DatasetChange::AdvanceFencingEpoch => {
                        mutations::advance_fencing_epoch(state, now_ms)
                    }
                })
            },
        )
        .await
    }

    async fn stage(
        &self,
        dataset_id: &str,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        planner: &StagePlanner<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Vec<StagedSplit>> {
        self.stage_checking(
            dataset_id,
            mode,
            splits,
            planner,
            now_ms,
            key,
            InTheWay::Write,
        )
        .await
    }

    /// Checked on the state version the stage writes on: the intents and the rows it reads
    /// are those of one log version, and the stage's commit lands only on that version.
    async fn stage_unless_in_the_way(
        &self,
        dataset_id: &str,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        planner: Option<&StagePlanner<'_>>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Vec<StagedSplit>> {
        let standard = |existing: &[ExistingRow]| standard_stage_plan(mode, splits, existing);
        let planner = planner.unwrap_or(&standard);
        self.stage_checking(
            dataset_id,
            mode,
            splits,
            planner,
            now_ms,
            key,
            InTheWay::Refuse,
        )
        .await
    }

    async fn publish(
        &self,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<PublishResult> {
        self.publish_checking(request, validate, now_ms, key, InTheWay::Write)
            .await
    }

    async fn publish_unless_in_the_way(
        &self,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<PublishResult> {
        self.publish_checking(request, validate, now_ms, key, InTheWay::Refuse)
            .await
    }

    async fn record_request(
        &self,
        dataset_id: &str,
        record: &RecordedRequest,
    ) -> Result<RecordedRequest> {
        self.mutate(dataset_id, record.recorded_at_ms, |state, _| {
            mutations::record_request(state, record)
        })
        .await
    }

    async fn recorded_request(
        &self,
        dataset_id: &str,
        key: &str,
    ) -> Result<Option<RecordedRequest>> {
        Ok(self
            .load(dataset_id)
            .await?
            .recorded
            .get(key)
            .map(|record| RecordedRequest::clone(record)))
    }

    async fn forget_recorded_requests(
        &self,
        dataset_id: &str,
        recorded_before_ms: TimestampMs,
        now_ms: TimestampMs,
    ) -> Result<usize> {
        self.mutate(dataset_id, now_ms, |state, _| {
            mutations::forget_recorded(state, recorded_before_ms)
        })
        .await
    }

    async fn mark(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        rule: MarkRule,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<MarkResult> {
        let write =
            write_audit::pending(dataset_id, "mark", || split_ids.iter().map(String::as_str));
        self.mutate_recorded(
            dataset_id,
            now_ms,
            write.as_ref(),
            write_audit::answer_of,
            |state, now_ms| {
                mutations::keyed(state, key, now_ms, |state| match rule {
                    MarkRule::Named => mutations::mark_for_deletion(state, split_ids, now_ms),
                    MarkRule::NamedUnlessInTheWay => {
                        super::refuse_naming(state.intents.values().map(Arc::as_ref), split_ids)?;
                        mutations::mark_for_deletion(state, split_ids, now_ms)
                    }
                    MarkRule::StaleStaged {
                        untouched_before_ms,
                    } => {
                        let change = mutations::mark_stale_staged(
                            state,
                            split_ids,
                            untouched_before_ms,
                            now_ms,
                        )?;
                        Ok(change.map(|marked| MarkResult {
                            marked,
                            already_marked: Vec::new(),
                        }))
                    }
                    MarkRule::Unclaimed {
                        untouched_before_ms,
                    } => {
                        let change = mutations::mark_unclaimed_stale(
                            state,
                            split_ids,
                            untouched_before_ms,
                            now_ms,
                        )?;
                        Ok(change.map(|marked| MarkResult {
                            marked,
                            already_marked: Vec::new(),
                        }))
                    }
                })
            },
        )
        .await
    }

    async fn see_marks(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        seen_at_ms: TimestampMs,
    ) -> Result<Vec<String>> {
        let write = write_audit::pending(dataset_id, "see-marks", || {
            split_ids.iter().map(String::as_str)
        });
        let at_ms = seen_at_ms;
        self.mutate_recorded(
            dataset_id,
            at_ms,
            write.as_ref(),
            write_audit::answer_of,
            |state, seen_at_ms| mutations::see_marks(state, split_ids, seen_at_ms),
        )
        .await
    }

    async fn delete_splits(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<()> {
        let write = write_audit::pending(dataset_id, "delete-splits", || {
            split_ids.iter().map(String::as_str)
        });
        self.mutate_recorded(
            dataset_id,
            now_ms,
            write.as_ref(),
            write_audit::answer_of,
            |state, now_ms| {
                mutations::keyed(state, key, now_ms, |state| {
                    mutations::delete_splits(state, split_ids, now_ms)
                })
            },
        )
        .await
    }

    async fn list_splits(&self, dataset_id: &str, query: &ListQuery) -> Result<SplitPage> {
        self.load(dataset_id).await?.list_splits(query)
    }

    async fn split_states(
        &self,
        dataset_id: &str,
        split_ids: &[String],
    ) -> Result<Vec<super::ExistingRow>> {
        let state = self.load(dataset_id).await?;
        state.existing_rows(&super::sorted_distinct(split_ids))
    }

    async fn put_intent(&self, intent: &Intent) -> Result<()> {
        check_written_format(intent)?;
        let (dataset_id, at_ms) = (&intent.dataset_id, intent.updated_at_ms);
        let write =
            write_audit::pending(dataset_id, "put-intent", || [intent.operation_id.as_str()]);
        self.mutate_recorded(
            dataset_id,
            at_ms,
            write.as_ref(),
            write_audit::answer_of,
            |state, _| mutations::put_intent(state, intent),
        )
        .await
    }

    async fn update_intent(&self, intent: &Intent, expected_phase: IntentPhase) -> Result<()> {
        check_written_format(intent)?;
        let (dataset_id, at_ms) = (&intent.dataset_id, intent.updated_at_ms);
        let write = write_audit::pending(dataset_id, "update-intent", || {
            [intent.operation_id.as_str()]
        });
        self.mutate_recorded(
            dataset_id,
            at_ms,
            write.as_ref(),
            write_audit::answer_of,
            |state, _| mutations::update_intent(state, intent, expected_phase),
        )
        .await
    }

    async fn abandon_intent(
        &self,
        dataset_id: &str,
        operation_id: &str,
        lease_expired_by: Option<TimestampMs>,
        now_ms: TimestampMs,
    ) -> Result<Intent> {
        let write = write_audit::pending(dataset_id, "abandon-intent", || [operation_id]);
        self.mutate_recorded(
            dataset_id,
            now_ms,
            write.as_ref(),
            write_audit::answer_of,
            |state, now_ms| {
                mutations::abandon_intent(state, operation_id, lease_expired_by, now_ms)
            },
        )
        .await
    }

    async fn delete_intent(
        &self,
        dataset_id: &str,
        operation_id: &str,
        now_ms: TimestampMs,
    ) -> Result<()> {
        let write = write_audit::pending(dataset_id, "delete-intent", || [operation_id]);
        self.mutate_recorded(
            dataset_id,
            now_ms,
            write.as_ref(),
            write_audit::answer_of,
            |state, _| mutations::delete_intent(state, operation_id),
        )
        .await
    }

    async fn list_intents(&self, dataset_id: &str) -> Result<Vec<Intent>> {
        let state = self.load(dataset_id).await?;
        let mut intents: Vec<Intent> = state
            .intents
            .values()
            .map(|intent| Intent::clone(intent))
            .collect();
        intents.sort_by(|a, b| {
            (a.created_at_ms, &a.operation_id).cmp(&(b.created_at_ms, &b.operation_id))
        });
        Ok(intents)
    }

    async fn intent(&self, dataset_id: &str, operation_id: &str) -> Result<Option<Intent>> {
        Ok(self
            .load(dataset_id)
            .await?
            .intents
            .get(operation_id)
            .map(|intent| Intent::clone(intent)))
    }

    /// One listing of the pending markers ([`pending`]): every dataset a writer put a marker
    /// for and no `clear_pending` took off since. A writer that crashed after its intent
    /// landed left its marker, except in the one window `pending.rs` describes.
    async fn pending_datasets(&self) -> Result<Vec<PendingDataset>> {
        Ok(self
            .pending
            .list()
            .await?
            .into_iter()
            .map(|(pending, _)| pending)
            .collect())
    }

    /// Rule 3 of [`pending`]: nothing while the dataset has intents or its marker is younger
    /// than `G`; otherwise deletes the marker, reads the log again, and puts the marker back if
    /// an intent appeared meanwhile. Costs one log probe (GET), and one HEAD when there are no
    /// intents; one delete and one more probe when it deletes.
    async fn clear_pending(&self, dataset_id: &str) -> Result<()> {
        let has_intents = |read: Result<Arc<DatasetState>>| match read {
            Ok(state) => Ok(!state.intents.is_empty()),
            // No dataset, no intents (the catalog has no dataset deletion: a marker without a
            // dataset is one put for an intent that never landed).
            Err(MendError::NotFound { .. }) => Ok(false),
            Err(error) => Err(error),
        };
        if has_intents(self.load(dataset_id).await)? {
            return Ok(());
        }
        let Some(marker) = self.pending.head(dataset_id).await? else {
            return Ok(());
        };
        let written_at_ms = marker.last_modified.timestamp_millis();
        if !pending::past_grace(
            written_at_ms,
            pending::wall_clock_ms(),
            self.pending.grace(),
        ) {
            return Ok(());
        }
        self.pending.delete(dataset_id).await?;
        // An intent that landed between the first read and the delete is seen here.
        if has_intents(self.load(dataset_id).await)? {
            self.pending.put(dataset_id).await?;
        }
        Ok(())
    }

    async fn settle_intents(
        &self,
        dataset_id: &str,
        settlements: &[Settlement],
        validate: &SettleValidator<'_>,
        now_ms: TimestampMs,
    ) -> Result<Vec<Settled>> {
        self.settle_intents_batch(dataset_id, settlements, validate, now_ms)
            .await
    }

    async fn append_audit(&self, dataset_id: &str, records: &[AuditRecord]) -> Result<()> {
        self.append_audit_records(dataset_id, records).await
    }

    async fn list_audit(&self, dataset_id: &str, limit: Option<usize>) -> Result<Vec<AuditRecord>> {
        self.list_audit_records(dataset_id, limit).await
    }

    /// From the catalog-wide index of audit objects; from every dataset's trail where the
    /// index cannot answer (`audit_index.rs`).
    /// Beside the log, in an object of its own (`writes.rs`): one put, no log version. The
    /// dataset is not read first: the engine records a write of a dataset it just wrote to.
    async fn record_write(&self, record: &write_audit::WriteRecord) -> Result<()> {
        write_audit::check_format(record.format_version, "a write record")?;
        self.put_object_write(record).await
    }

    async fn list_write_audit(
        &self,
        dataset_id: &str,
        limit: Option<usize>,
    ) -> Result<Vec<write_audit::WriteRecord>> {
        self.list_writes(dataset_id, limit).await
    }

    async fn list_recent_audit(&self, limit: usize) -> Result<RecentAudit> {
        if limit == 0 {
            return Ok(RecentAudit::default());
        }
        match self.recent_from_index(limit).await? {
            Some(recent) => Ok(recent),
            None => super::recent_audit::every_dataset(self, limit).await,
        }
    }

    async fn begin_commit(
        &self,
        dataset_id: &str,
        intent: &IntentBuilder<'_>,
        splits: &[Arc<NewSplit>],
        planner: &StagePlanner<'_>,
        records: OperationRecords<'_>,
        now_ms: TimestampMs,
    ) -> Result<BegunCommit> {
        let write = write_audit::pending(dataset_id, "begin-commit", || {
            splits.iter().map(|split| split.split_id.as_str())
        });
        let answer = write_audit::begun_answer;
        self.mutate_recorded(
            dataset_id,
            now_ms,
            write.as_ref(),
            answer,
            |state, now_ms| {
                mutations::begin_commit(state, intent, splits, planner, records, now_ms)
            },
        )
        .await
    }

    async fn publish_commit(
        &self,
        intent: &Intent,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now_ms: TimestampMs,
        key: &RequestKey,
    ) -> Result<PublishResult> {
        super::commit::same_dataset(intent, request)?;
        let dataset_id = &request.dataset_id;
        let write = write_audit::pending(dataset_id, "publish-commit", || {
            write_audit::publish_ids(request)
        });
        self.mutate_recorded(
            dataset_id,
            now_ms,
            write.as_ref(),
            write_audit::answer_of,
            |state, now_ms| {
                mutations::publish_commit(
                    state,
                    &intent.operation_id,
                    request,
                    validate,
                    now_ms,
                    key,
                )
            },
        )
        .await
    }
}

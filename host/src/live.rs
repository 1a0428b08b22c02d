//! Live handles: what a serving process holds per dataset, refreshed atomically and cheaply.
//!
//! A handle holds a [`Generation`]: the published splits (the manifest snapshot), the config
//! view, the policy it pins and the manifest version they come from. [`LiveHandle::refresh`]
//!
//! 1. probes the catalog once ([`Catalog::probe_manifest`](crate::Catalog::probe_manifest));
//!    when the manifest did not move (and, for a read-write handle, no intent is pending) it
//!    returns: one probe, no scan;
//! 2. otherwise prepares the whole next generation to the side: a read-write handle first
//!    runs a roll-forward sweep (a read-only handle never runs recovery), then the snapshot
//!    and the config view are read from one dataset version;
//! 3. publishes it with one swap of an `Arc`, after which nothing can fail.
//!
//! A failed preparation publishes nothing; the next refresh starts over and converges.
//!
//! The write path ([`LiveHandle::replace`]) refreshes the snapshot only when its read set
//! changed, and returns `RecoveryRequired` for an unresolved operation in its way rather than
//! resolving it inline.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use mend_contract::RecoveryMode;

use crate::engine::Engine;
use crate::error::{MendError, Result};
use crate::model::{DatasetConfig, ListQuery, PublishRequest, PublishResult, SplitRow, SplitState};

/// The unresolved operation, if any, whose intent names one of `split_ids` (to stage, mark,
/// delete, publish or replace): a write touching them must wait for recovery rather than
/// resolve it inline, which is the supervisor's job.
pub async fn operation_in_the_way(
    engine: &Engine,
    dataset_id: &str,
    split_ids: &[String],
) -> Result<Option<String>> {
    let intents = engine.catalog().list_intents(dataset_id).await?;
    Ok(crate::intent::naming_any(&intents, split_ids).map(|intent| intent.operation_id.clone()))
}

/// One consistent view of a dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// Counts the generations this handle published, from 1.
    pub number: u64,
    /// The manifest version the view was read at.
    pub manifest_version: u64,
    /// The config version of the config below.
    pub config_version: u64,
    /// The dataset's config as of this view.
    pub config: DatasetConfig,
    /// The published splits, sorted by id.
    pub published: Vec<SplitRow>,
    /// The policy this generation's decisions are made with.
    pub policy_digest: String,
}

/// Whether a handle may run recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandleMode {
    /// Never runs recovery: serves what is there.
    ReadOnly,
    /// Resolves pending intents with roll-forward recovery as part of a refresh.
    ReadWrite,
}

/// What a handle did, for tests and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandleStats {
    /// Manifest probes made (one per refresh).
    pub probes: u64,
    /// Whole-dataset scans made (one per changed refresh).
    pub scans: u64,
    /// Recovery sweeps run (read-write handles only).
    pub sweeps: u64,
    /// Snapshot-only refreshes made by the write path.
    pub snapshot_refreshes: u64,
    /// Generations published.
    pub generations: u64,
}

/// What a refresh did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refresh {
    /// Nothing changed: the current generation stands.
    Unchanged,
    /// A new generation was published.
    Published {
        /// The new generation's number.
        number: u64,
        /// The manifest version it shows.
        manifest_version: u64,
    },
}

/// A test seam: fails the preparation of the next generation when set.
pub type PrepareFault = Arc<dyn Fn() -> Result<()> + Send + Sync>;

/// A serving process's handle on one dataset: a [`Generation`] that [`refresh`](Self::refresh) replaces whole, prepared to the side, and readers take without waiting.
pub struct LiveHandle {
    engine: Engine,
    dataset_id: String,
    mode: HandleMode,
    // A std lock: held only to clone or swap the `Arc`, never across an await.
    current: RwLock<Arc<Generation>>,
    // One refresh at a time; readers are never blocked by it.
    refreshing: tokio::sync::Mutex<()>,
    probes: AtomicU64,
    scans: AtomicU64,
    sweeps: AtomicU64,
    snapshot_refreshes: AtomicU64,
    prepare_fault: Option<PrepareFault>,
}

impl std::fmt::Debug for LiveHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveHandle")
            .field("dataset_id", &self.dataset_id)
            .field("mode", &self.mode)
            .field("generation", &self.current().number)
            .finish_non_exhaustive()
    }
}

impl LiveHandle {
    /// Opens a handle and prepares its first generation.
    pub async fn open(engine: Engine, dataset_id: &str, mode: HandleMode) -> Result<Self> {
        Self::open_with_fault(engine, dataset_id, mode, None).await
    }

    /// As [`open`](Self::open), with a seam that can fail later preparations (tests).
    pub async fn open_with_fault(
        engine: Engine,
        dataset_id: &str,
        mode: HandleMode,
        prepare_fault: Option<PrepareFault>,
    ) -> Result<Self> {
        let empty = Generation {
            number: 0,
            manifest_version: 0,
            config_version: 0,
            config: DatasetConfig::default(),
            published: Vec::new(),
            policy_digest: String::new(),
        };
        let handle = Self {
            engine,
            dataset_id: dataset_id.to_string(),
            mode,
            current: RwLock::new(Arc::new(empty)),
            refreshing: tokio::sync::Mutex::new(()),
            probes: AtomicU64::new(0),
            scans: AtomicU64::new(0),
            sweeps: AtomicU64::new(0),
            snapshot_refreshes: AtomicU64::new(0),
            prepare_fault: None,
        };
        let first = handle.prepare(1).await?;
        handle.publish(first);
        Ok(Self {
            prepare_fault,
            ..handle
        })
    }

    /// The generation being served. Cheap: one `Arc` clone.
    pub fn current(&self) -> Arc<Generation> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// What the handle has done so far.
    pub fn stats(&self) -> HandleStats {
        HandleStats {
            probes: self.probes.load(Ordering::Relaxed),
            scans: self.scans.load(Ordering::Relaxed),
            sweeps: self.sweeps.load(Ordering::Relaxed),
            snapshot_refreshes: self.snapshot_refreshes.load(Ordering::Relaxed),
            generations: self.current().number,
        }
    }

    /// Brings the handle up to date: one probe when nothing changed, else a new generation
    /// prepared to the side and published with one swap.
    // At debug: a serving process refreshes often, and an unchanged refresh is one probe.
    #[tracing::instrument(
        level = "debug",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %self.dataset_id)
    )]
    pub async fn refresh(&self) -> Result<Refresh> {
        let _one_at_a_time = self.refreshing.lock().await;
        let current = self.current();
        let probes_before = self.probes.fetch_add(1, Ordering::Relaxed);
        if probes_before % 2 == 1
            && crate::deliberate_bugs::active(
                crate::deliberate_bugs::Bug::RefreshAnswersUnchangedWithoutProbing,
            )
        {
            return Ok(Refresh::Unchanged);
        }
        let probe = self
            .engine
            .catalog()
            .probe_manifest(&self.dataset_id)
            .await?;
        let read_write = self.mode == HandleMode::ReadWrite
            || crate::deliberate_bugs::active(crate::deliberate_bugs::Bug::ReadOnlyHandleSweeps);
        let sweep = read_write && probe.pending_intents;
        if probe.manifest_version == current.manifest_version && !sweep {
            return Ok(Refresh::Unchanged);
        }
        if sweep {
            self.sweeps.fetch_add(1, Ordering::Relaxed);
            self.engine
                .recover(&self.dataset_id, RecoveryMode::RollForward)
                .await?;
        }
        let next = self.prepare(current.number + 1).await?;
        if next.manifest_version == current.manifest_version
            && next.config_version == current.config_version
        {
            return Ok(Refresh::Unchanged);
        }
        let published = Refresh::Published {
            number: next.number,
            manifest_version: next.manifest_version,
        };
        tracing::debug!(
            generation = next.number,
            manifest_version = next.manifest_version,
            config_version = next.config_version,
            "publishing the next generation"
        );
        self.publish(next);
        Ok(published)
    }

    /// Publishes `staged` replacing `replaced` through the handle: the write path.
    ///
    /// The replaced splits are the write's read set: they must be published in the handle's
    /// snapshot. When they are not, the handle refreshes its snapshot only, never running a
    /// sweep, and checks again. An unresolved operation touching any of the splits is not
    /// resolved inline: the call fails with `RecoveryRequired` naming it, for the dataset's
    /// supervisor to handle.
    pub async fn replace(
        &self,
        staged: &[String],
        replaced: &[String],
        publish_token: Option<String>,
    ) -> Result<PublishResult> {
        let in_snapshot = |generation: &Generation| {
            replaced
                .iter()
                .all(|id| generation.published.iter().any(|row| &row.split_id == id))
        };
        if !in_snapshot(&self.current()) {
            let _one_at_a_time = self.refreshing.lock().await;
            self.snapshot_refreshes.fetch_add(1, Ordering::Relaxed);
            let next = self.prepare(self.current().number + 1).await?;
            self.publish(next);
        }
        let current = self.current();
        if !in_snapshot(&current) {
            let missing: Vec<String> = replaced
                .iter()
                .filter(|id| !current.published.iter().any(|row| &row.split_id == *id))
                .cloned()
                .collect();
            return Err(MendError::failed_precondition(
                format!(
                    "splits to replace are not published in dataset {}: {}",
                    self.dataset_id,
                    missing.join(", ")
                ),
                missing,
            ));
        }
        let touched: Vec<String> = staged.iter().chain(replaced).cloned().collect();
        if let Some(operation_id) =
            operation_in_the_way(&self.engine, &self.dataset_id, &touched).await?
        {
            return Err(MendError::RecoveryRequired { operation_id });
        }
        self.engine
            .publish(&PublishRequest {
                dataset_id: self.dataset_id.clone(),
                staged_split_ids: staged.to_vec(),
                replaced_split_ids: replaced.to_vec(),
                checkpoint_delta: None,
                publish_token,
                fencing_epoch: None,
            })
            .await
    }

    /// Reads the next generation; touches nothing the readers see.
    async fn prepare(&self, number: u64) -> Result<Generation> {
        if let Some(fault) = &self.prepare_fault {
            fault()?;
        }
        self.scans.fetch_add(1, Ordering::Relaxed);
        let catalog = self.engine.catalog();
        // The snapshot and the config view must come from one dataset version: read the
        // dataset on both sides of the scan and start over if it moved in between.
        for _ in 0..8 {
            let before = catalog.dataset(&self.dataset_id).await?;
            let query = ListQuery {
                states: vec![SplitState::Published],
                ..ListQuery::default()
            };
            let published = catalog.list_splits(&self.dataset_id, &query).await?.splits;
            let after = catalog.dataset(&self.dataset_id).await?;
            if before.manifest_version == after.manifest_version
                && before.config_version == after.config_version
            {
                return Ok(Generation {
                    number,
                    manifest_version: after.manifest_version,
                    config_version: after.config_version,
                    config: after.config,
                    published,
                    policy_digest: self.engine.policy().digest().to_string(),
                });
            }
        }
        Err(MendError::Conflict {
            message: format!(
                "dataset {} kept changing while its next generation was read",
                self.dataset_id
            ),
        })
    }

    /// The one swap. Nothing after it can fail.
    fn publish(&self, next: Generation) {
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(next);
    }
}

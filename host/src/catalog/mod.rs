//! The catalog: one small trait, one module per backend, chosen by URL.
//!
//! | URL                  | backend                                                         |
//! |----------------------|-----------------------------------------------------------------|
//! | `file:///DIR` or DIR | [`ObjectStoreCatalog`] on a local directory (the default)        |
//! | `memory://`          | [`ObjectStoreCatalog`] in memory, for tests and demos           |
//! | `s3://BUCKET/PREFIX` | [`ObjectStoreCatalog`] on an S3-compatible store (`AWS_*` env)   |
//! | `postgres://...`     | [`PostgresCatalog`]                                             |
//!
//! A backend stores and enforces; it does not decide. Where a write depends on a decision
//! (which rows to insert, whether a publish may happen), the engine passes the decision in as
//! a closure that the backend calls with what it observed *inside* its atomic step (a
//! transaction, or one optimistic commit attempt), so the decision and the write see the same
//! state. A backend calls it again if it retries the step.
//!
//! Finding work: a supervisor finds the datasets with unresolved intents through
//! [`Catalog::pending_datasets`] without listing every dataset; each backend's index, its
//! cost and what it promises are in [`pending`].
//!
//! The newest audit records of the whole catalog, which a policy swap replays, come from
//! [`Catalog::list_recent_audit`] without reading every dataset's trail; each backend's index
//! and its cost are in [`recent_audit`].

mod commit;
mod ext;
pub mod object_store;
mod open;
pub mod pending;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod recent_audit;
pub mod recorded;
pub mod settle;
mod standard_plan;
pub mod write_audit;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::audit::AuditRecord;
use crate::error::{MendError, Result};
use crate::intent::{Intent, IntentPhase};
use crate::model::{
    Checkpoint, CheckpointDelta, Dataset, DatasetConfig, ListQuery, MarkResult, NewSplit,
    PublishRequest, PublishResult, SplitPage, SplitState, StageMode, StagedSplit, TimestampMs,
};

/// What a stage or a publish does when an unresolved operation's intent names one of its
/// splits: the engine's choice between [`Catalog::stage`] and
/// [`Catalog::stage_unless_in_the_way`] (or the two publishes), and each backend's between its
/// two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InTheWay {
    /// Writes all the same (`Engine::stage`, `Engine::publish`).
    Write,
    /// Refuses with `RecoveryRequired`, writing nothing (`Engine::stage_unless_in_the_way`,
    /// `Engine::publish_unless_in_the_way`).
    Refuse,
}

pub use self::commit::{
    BegunCommit, IntentBuilder, OperationRecords, built_intent, refuse_abandoned,
};
pub use self::ext::CatalogExt;
pub use self::object_store::ObjectStoreCatalog;
#[cfg(not(feature = "postgres"))]
pub(crate) use self::open::no_postgres_backend;
pub use self::open::{PostgresOptions, is_postgres_url, open, open_with};
pub use self::pending::{PENDING_INDEX, PendingDataset};
#[cfg(feature = "postgres")]
pub use self::postgres::PostgresCatalog;
pub use self::recent_audit::RecentAudit;
pub use self::recorded::{RecordedRequest, RequestKey};
pub use self::settle::{SETTLE_ATOMIC, SettleValidator, Settled, Settlement};
pub use self::standard_plan::standard_stage_plan;
/// `RecoveryRequired` naming the first of `intents` that names one of `splits` (sorted by id,
/// as [`distinct_splits`] leaves them): a stage's refusal of an operation in its way
/// ([`Catalog::stage_unless_in_the_way`]).
pub(crate) fn refuse_in_the_way<'a>(
    intents: impl IntoIterator<Item = &'a Intent>,
    splits: &[Arc<NewSplit>],
) -> Result<()> {
    let requested = |split_id: &str| {
        splits
            .binary_search_by(|split| split.split_id.as_str().cmp(split_id))
            .is_ok()
    };
    refuse(crate::intent::in_the_way(intents, requested))
}

/// `RecoveryRequired` naming the first of `intents` that names one of `split_ids`: a
/// publish's or a named mark's refusal of an operation in its way
/// ([`Catalog::publish_unless_in_the_way`], [`MarkRule::NamedUnlessInTheWay`]).
pub(crate) fn refuse_naming<'a, 'b>(
    intents: impl IntoIterator<Item = &'a Intent>,
    split_ids: impl IntoIterator<Item = &'b String>,
) -> Result<()> {
    refuse(crate::intent::naming_any(intents, split_ids))
}

/// `RecoveryRequired` naming the operation of the intent in the way, if there is one.
fn refuse(in_the_way: Option<&Intent>) -> Result<()> {
    match in_the_way {
        Some(intent) => Err(MendError::RecoveryRequired {
            operation_id: intent.operation_id.clone(),
        }),
        None => Ok(()),
    }
}

/// The ids a publish writes: those it publishes, then those it replaces.
pub(crate) fn publish_ids(request: &PublishRequest) -> impl Iterator<Item = &String> {
    request
        .staged_split_ids
        .iter()
        .chain(&request.replaced_split_ids)
}

/// A row as a [`StagePlanner`] is shown it: a backend of an embedder's own builds these from
/// the rows it read, so it is named here, not only in the policy crate.
pub use mend_contract::ExistingRow;

/// Named features a backend or host provides, such as `stage.create-only`. A policy lists the
/// ones it requires; a request needing one that is missing fails loudly and changes nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities(BTreeSet<String>);

impl Capabilities {
    /// The capabilities named.
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        Self(names.into_iter().map(str::to_string).collect())
    }

    /// Whether `name` is among them.
    pub fn contains(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    /// These without `name`: a backend that lacks one (tests use it).
    pub fn without(&self, name: &str) -> Self {
        let mut names = self.0.clone();
        names.remove(name);
        Self(names)
    }

    /// These and `name`: a backend that provides one more than [`Self::full_backend`]
    /// ([`PENDING_INDEX`]).
    pub fn with(&self, name: &str) -> Self {
        let mut names = self.0.clone();
        names.insert(name.to_string());
        Self(names)
    }

    /// What both provide.
    pub fn intersection(&self, other: &Capabilities) -> Self {
        Self(self.0.intersection(&other.0).cloned().collect())
    }

    /// Each name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }

    /// The capabilities every complete backend provides: mend's own provide all of them,
    /// [`SETTLE_ATOMIC`] included.
    pub fn full_backend() -> Self {
        use mend_contract::capability::*;
        Self::new([
            STAGE_UPSERT,
            STAGE_CREATE_ONLY,
            PUBLISH_CHECKPOINT,
            PUBLISH_TOKEN,
            PUBLISH_FENCING_EPOCH,
            SETTLE_ATOMIC,
        ])
    }
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.iter().cloned().collect::<Vec<_>>().join(", "))
    }
}

/// What to do with one split, decided by the policy and checked by the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum PlannedAction {
    /// Insert if no row exists at write time; in create-only mode a row that appeared since
    /// the read makes this split `Skipped`, in upsert mode it makes the backend retry.
    Insert,
    /// Replace the row if it is still staged at write time.
    Overwrite,
    /// Leave the existing row, in this state, untouched.
    Skip(SplitState),
}

/// One split's entry in a stage plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedStage {
    /// Shared with the request: a plan of thousands of splits copies no metadata.
    pub split: Arc<NewSplit>,
    /// What to do with it.
    pub action: PlannedAction,
}

/// The whole plan of a stage request: one entry per distinct split id, sorted by id.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StagePlan {
    /// One entry per distinct requested id, sorted by id.
    pub entries: Vec<PlannedStage>,
}

impl StagePlan {
    /// The entries sorted by id, if a backend can apply them as written to the rows it
    /// observed (`splits` as [`Catalog::stage`] is given them, `existing` what it observed for
    /// them); otherwise `PolicyRejected`, with nothing written. The engine has checked the plan
    /// against the policy's invariants already; this is the backend's own line, in one place
    /// for all backends: one decision per requested id, no overwrite in create-only mode, in
    /// upsert mode no insert over a row and no overwrite of a row that is not staged.
    pub fn into_applicable(
        self,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        existing: &[ExistingRow],
    ) -> Result<Vec<PlannedStage>> {
        let rejected = |message: String| Err(crate::MendError::PolicyRejected { message });
        let mut entries = self.entries;
        entries.sort_by(|a, b| a.split.split_id.cmp(&b.split.split_id));
        if entries.len() != splits.len()
            || entries
                .iter()
                .zip(splits)
                .any(|(entry, split)| entry.split.split_id != split.split_id)
        {
            let ids: Vec<&str> = entries.iter().map(|e| e.split.split_id.as_str()).collect();
            return rejected(format!(
                "the stage plan does not hold exactly one decision per requested split: it names {}",
                ids.join(", ")
            ));
        }
        let mut observed = existing.iter().peekable();
        for entry in &entries {
            let id = entry.split.split_id.as_str();
            // Both lists are sorted by id, so one merge pass pairs each entry with its row.
            while observed.next_if(|row| row.split_id.as_str() < id).is_some() {}
            let state = observed
                .next_if(|row| row.split_id == id)
                .map(|row| row.state);
            let problem = match (mode, &entry.action, state) {
                (StageMode::CreateOnly, PlannedAction::Overwrite, _) => {
                    "overwrites it in create-only mode"
                }
                (StageMode::Upsert, PlannedAction::Insert, Some(_)) => {
                    "inserts it over an existing row"
                }
                (StageMode::Upsert, PlannedAction::Overwrite, state)
                    if state != Some(SplitState::Staged) =>
                {
                    "overwrites it, but it is not staged"
                }
                _ => continue,
            };
            return rejected(format!("the stage plan for split {id} {problem}"));
        }
        Ok(entries)
    }

    /// Whether applying the plan writes anything at all.
    pub fn writes_nothing(&self) -> bool {
        self.entries
            .iter()
            .all(|entry| matches!(entry.action, PlannedAction::Skip(_)))
    }
}

/// Called by a backend inside its atomic step with the rows that exist for the requested ids.
pub type StagePlanner<'a> = dyn Fn(&[ExistingRow]) -> Result<StagePlan> + Send + Sync + 'a;

/// The splits of a stage request as [`Catalog::stage`] is given them: one per distinct id,
/// sorted by id, each with the content that the mode's semantics give a repeated id
/// (create-only keeps the first entry of an id, upsert the last, as if the entries ran one
/// after another). The entries are shared, not copied.
pub fn distinct_splits(mode: StageMode, requested: &[Arc<NewSplit>]) -> Vec<Arc<NewSplit>> {
    let mut splits = requested.to_vec();
    // A stable sort keeps the entries of one id in request order.
    splits.sort_by(|a, b| a.split_id.cmp(&b.split_id));
    if mode == StageMode::Upsert {
        // `dedup_by` keeps the first of a run: reversed, that is the last entry.
        splits.reverse();
        splits.dedup_by(|a, b| a.split_id == b.split_id);
        splits.reverse();
    } else {
        splits.dedup_by(|a, b| a.split_id == b.split_id);
    }
    splits
}

/// What a live handle's refresh learns from one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestProbe {
    /// The dataset's manifest version now.
    pub manifest_version: u64,
    /// Unresolved operations exist: a read-write handle sweeps them.
    pub pending_intents: bool,
}

/// A change to a dataset itself, made by [`Catalog::update_dataset`] in one atomic step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DatasetChange<'a> {
    /// Replaces the config if its version is still `expected_config_version`
    /// (`FailedPrecondition` otherwise); bumps the config version.
    Config {
        /// The config version the change was made against.
        expected_config_version: u64,
        /// The whole new config.
        config: &'a DatasetConfig,
    },
    /// Sets the token every later publish must present (fencing); `None` clears it. Setting
    /// the token in force changes nothing.
    PublishToken(Option<&'a str>),
    /// Adds one to the fencing epoch, so that from now on every publish carrying an older
    /// epoch is refused: how exclusive recovery fences out writers that began before it.
    /// Always a change, even twice in a row: each fences out whoever read the epoch before it.
    AdvanceFencingEpoch,
}

/// Which splits [`Catalog::mark`] moves to `MarkedForDeletion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkRule {
    /// Every split named, whatever its state; one marked already is left as it is and
    /// reported so (marking is idempotent). `NotFound` naming the unknown ids, nothing written.
    Named,
    /// Those still staged and untouched since before `untouched_before_ms`, checked at write
    /// time: a split published or restaged meanwhile is left alone, and unknown ids are
    /// skipped. Never reports any as marked already. How garbage collection abandons staged
    /// splits without ever hiding a published one.
    StaleStaged {
        /// Only splits last written before this time are marked.
        untouched_before_ms: TimestampMs,
    },
    /// Those [`StaleStaged`](MarkRule::StaleStaged) picks that no intent claims
    /// ([`claimed_split_ids`](crate::intent::claimed_split_ids): its operation stages or
    /// publishes them and is not abandoned), both checked in the same atomic step as the mark.
    /// How garbage collection abandons staged splits: whatever intents it read when it
    /// planned, it never takes the rows of an operation that began since (found by mend-sim,
    /// seed 995752377249).
    Unclaimed {
        /// Only splits last written before this time are marked.
        untouched_before_ms: TimestampMs,
    },
    /// The splits [`Named`](MarkRule::Named) picks, refused with `RecoveryRequired` naming the
    /// operation, nothing written, when an intent names one of them
    /// ([`Intent::named_splits`](crate::intent::Intent::named_splits)), checked in the same
    /// atomic step as the mark. How `mend serve` marks: a mark never lands on the rows of an
    /// operation still in doubt, even one that began after the request was admitted (a check
    /// of the intents before the mark missed a begin landing between the two, and marked the
    /// rows the begin had just staged: `operation_races`).
    NamedUnlessInTheWay,
}

/// What a backend observed for a publish, under the dataset's lock.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishObservation {
    /// Rows of the staged and replaced ids that exist.
    pub rows: Vec<ExistingRow>,
    /// The dataset's checkpoint, read in the same atomic step.
    pub checkpoint: Checkpoint,
    /// The token publishes must present now, if any.
    pub publish_token: Option<String>,
    /// The dataset's current fencing epoch, read in the same atomic step as the rest.
    pub fencing_epoch: u64,
}

/// Called by a backend inside its atomic step; an error aborts the publish with nothing written.
pub type PublishValidator<'a> = dyn Fn(&PublishObservation) -> Result<()> + Send + Sync + 'a;

/// A catalog backend. Implementations are [`PostgresCatalog`] and [`ObjectStoreCatalog`]; the
/// conformance suite (the `mend-testkit` crate, `testkit/`) holds both, and any backend of an
/// embedder's own, to the same behaviour.
///
/// The required methods are the atomic steps and the reads a backend must provide; every
/// provided method is built from them, and a backend overrides one only to be faster (one read
/// instead of two, a batch in one step) or to claim a capability the default does not. What no
/// backend has a reason to override (a config change, a named mark: one step with its
/// arguments filled in) is on [`CatalogExt`], implemented for every catalog.
///
/// Every mutation is atomic: it happens whole or not at all, and an error says which
/// ([`MendError::certainly_not_applied`](crate::MendError::certainly_not_applied)). A mutation
/// that would change nothing writes nothing.
///
/// # The `key` of a mutation
///
/// The single-step mutations (`create_dataset`, `update_dataset`, `stage`, `publish`,
/// `mark`, `delete_splits`) take the request's idempotency key last, `key: Option<&RequestKey>` ([`recorded`]). What a backend owes:
///
/// - `None`: the mutation as documented on its method, and nothing else.
/// - `Some(key)`, not recorded in the dataset: the mutation runs, and its result (the value
///   the method returns, as JSON) is recorded under `key.key` with `key.request_digest`
///   **in the same atomic step as its effect**: the same transaction, the same commit. There
///   must be no moment at which the effect is visible and the record is not, nor the other
///   way round. A mutation that changes nothing still records its result (the record is
///   then the step's only write). A mutation that fails records nothing.
/// - `Some(key)`, already recorded in the dataset: the recorded result is answered through
///   [`RecordedRequest::replay`] (which refuses, with `InvalidArgument`, a key whose recorded
///   digest is another request's), and **nothing is read against the current state, nothing
///   is checked, nothing is written**: a delete retried after its rows are gone answers its
///   first result, not `NotFound`. The record is looked up inside the atomic step, so two
///   copies of one request sent at once execute once.
/// - `create_dataset` keeps the record in the dataset it creates (in the same step). When the
///   dataset exists already, the backend looks the key up there: recorded, the recorded
///   result is answered; not recorded, `AlreadyExists` as without a key.
///
/// Records are per dataset, kept until [`forget_recorded_requests`](Catalog::forget_recorded_requests)
/// drops them. [`record_request`](Catalog::record_request) records a result on its own, for
/// operations with several steps that record theirs when they end.
///
/// # The record of a write
///
/// Inside a [`WriteScope`](write_audit::WriteScope) (the engine runs every request in one),
/// every mutation that writes (the ones above, `see_marks`, the intent writes,
/// `settle_intents`, `begin_commit`, `publish_commit`) also records the write
/// ([`write_audit::pending`], then [`PendingWrite::answered`](write_audit::PendingWrite::answered))
/// **in the same atomic step**, answered by what the step returns: a change never lands
/// without its record. A step that fails, changes nothing, or answers from a recorded key
/// records nothing; outside a scope nothing is recorded. [`list_write_audit`](Catalog::list_write_audit)
/// reads the records back.
#[async_trait]
pub trait Catalog: Send + Sync + fmt::Debug {
    /// What this backend provides. The engine refuses requests needing anything else.
    ///
    /// The default is what the required methods give when they behave as documented (both
    /// stage modes, checkpoints, publish tokens, fencing epochs): [`Capabilities::full_backend`]
    /// without [`SETTLE_ATOMIC`], which only a backend overriding
    /// [`settle_intents`](Catalog::settle_intents) with one atomic step may claim, and without
    /// [`PENDING_INDEX`]. Override it to claim those, or to refuse a mode the backend lacks.
    fn capabilities(&self) -> Capabilities {
        Capabilities::full_backend().without(SETTLE_ATOMIC)
    }

    /// A short description for logs and `status`, without credentials. The default is the
    /// backend's type name.
    fn describe(&self) -> String {
        std::any::type_name::<Self>().to_string()
    }

    /// Creates a dataset; `AlreadyExists` if the id is taken (unless `key` is recorded in the
    /// dataset that has it: see the trait's doc).
    async fn create_dataset(
        &self,
        dataset_id: &str,
        uid: &str,
        config: &DatasetConfig,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset>;

    /// All datasets, sorted by id.
    async fn list_datasets(&self) -> Result<Vec<Dataset>>;

    /// The ids of all datasets, sorted, without reading each one, so that a dataset whose
    /// state cannot be read is still named (it fails on its own when read). It may name one
    /// that turns out not to exist: reading that one says `NotFound`.
    async fn list_dataset_ids(&self) -> Result<Vec<String>> {
        Ok(self
            .list_datasets()
            .await?
            .into_iter()
            .map(|dataset| dataset.dataset_id)
            .collect())
    }

    /// One dataset; `NotFound` if it does not exist.
    async fn dataset(&self, dataset_id: &str) -> Result<Dataset>;

    /// The dataset's manifest version and whether intents are pending, as cheaply as the
    /// backend can tell: mend's backends take one small read (one row in Postgres; in object
    /// storage, one probe for the log's next version). Live handles call it on every refresh.
    ///
    /// The default reads the dataset and then its intents ([`dataset`](Catalog::dataset),
    /// [`list_intents`](Catalog::list_intents)): right, at the cost of two reads and every
    /// intent. Override it to be cheaper.
    async fn probe_manifest(&self, dataset_id: &str) -> Result<ManifestProbe> {
        let manifest_version = self.dataset(dataset_id).await?.manifest_version;
        let pending_intents = !self.list_intents(dataset_id).await?.is_empty();
        Ok(ManifestProbe {
            manifest_version,
            pending_intents,
        })
    }

    /// Changes the dataset itself (its config, its publish token or its fencing epoch) in one
    /// atomic step, and returns the dataset after. Every change bumps the manifest version, so
    /// that live handles see it, except one that changes nothing (a token set to the one in
    /// force), which writes nothing but its record under `key`. `NotFound` if the dataset does
    /// not exist. What each change checks and does is on [`DatasetChange`].
    async fn update_dataset(
        &self,
        dataset_id: &str,
        change: DatasetChange<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset>;

    /// Stages `splits` (one per distinct id, sorted by id: [`distinct_splits`]) in `mode`:
    /// observes the rows that exist for their ids, asks `planner` for the plan on what it
    /// observed, and applies the plan atomically with conditional writes. Returns the actual
    /// outcome per split, sorted by id. `mode` is passed so that the backend can refuse a mode
    /// it lacks; a create-only stage never executes anything that could modify an existing
    /// row, nor lock one.
    ///
    /// A backend may observe by writing: apply what the mode's semantics say for `splits`
    /// (insert the missing ones; in upsert mode overwrite the staged ones too) in one step that
    /// also reports what it found, ask `planner` on what that step found, and keep the write
    /// only if the plan is exactly what was executed (the same action for every id, the same
    /// content for every written one), undoing it otherwise, before anyone else can see it, and
    /// applying the plan instead. Either way the plan is the planner's answer to the rows the
    /// write met.
    async fn stage(
        &self,
        dataset_id: &str,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        planner: &StagePlanner<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Vec<StagedSplit>>;

    /// [`Catalog::stage`] with the mode's standard plan ([`standard_stage_plan`]), which the
    /// engine stages with when its policy declares `stage.standard-plans` (ABI 1.4). The plan
    /// is known before anything is read, so a backend that can apply it with one conditional
    /// write (insert what is missing and report what it met) may skip reading the rows
    /// first; the default stages with the standard plan as its planner.
    async fn stage_standard(
        &self,
        dataset_id: &str,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Vec<StagedSplit>> {
        let planner = |existing: &[ExistingRow]| standard_stage_plan(mode, splits, existing);
        self.stage(dataset_id, mode, splits, &planner, now_ms, key)
            .await
    }

    /// [`Catalog::stage`] with `planner`, or [`Catalog::stage_standard`] without one, refused
    /// with [`MendError::RecoveryRequired`] naming the operation when an intent of the dataset
    /// names one of `splits`: what `mend serve` stages with, so that a request never lands on
    /// the splits of an operation still in doubt while its supervisor settles it. Refused, it
    /// writes nothing. A request recorded under `key` is answered before anything is checked.
    ///
    /// The default reads the intents, then stages: two steps, and a begin of the same splits
    /// that lands between them is not seen, so the stage meets the operation's rows (skips
    /// them in create-only mode, overwrites them in upsert mode while the intent names them).
    /// It is right only for a catalog no operation begins on concurrently. Both of mend's
    /// backends override it with one atomic step: the object-store catalog checks the intents
    /// of the state version its stage writes on; Postgres reads them in the stage's own
    /// transaction, after its statement, so that a begin of the same rows is ordered with
    /// the stage by those rows (`operation_races` races the two: 14 false answers in 200
    /// pairs on Postgres with this default, none with the override). A wrapper forwards it
    /// to the catalog it wraps.
    async fn stage_unless_in_the_way(
        &self,
        dataset_id: &str,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        planner: Option<&StagePlanner<'_>>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Vec<StagedSplit>> {
        // A recorded key goes straight to the stage, which answers its record.
        let recorded = match key {
            Some(key) => self.recorded_request(dataset_id, &key.key).await?.is_some(),
            None => false,
        };
        let intents = if recorded {
            Vec::new()
        } else {
            self.list_intents(dataset_id).await?
        };
        refuse_in_the_way(&intents, splits)?;
        match planner {
            Some(planner) => {
                self.stage(dataset_id, mode, splits, planner, now_ms, key)
                    .await
            }
            None => {
                self.stage_standard(dataset_id, mode, splits, now_ms, key)
                    .await
            }
        }
    }

    /// Locks the dataset, observes, calls `validate`, then publishes atomically: staged ids
    /// become published, replaced ids marked, the checkpoint delta applied, the manifest
    /// version bumped.
    async fn publish(
        &self,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<PublishResult>;

    /// [`Catalog::publish`], refused with [`MendError::RecoveryRequired`] naming the operation
    /// when an intent of the dataset names one of the request's staged or replaced splits:
    /// what `mend serve` publishes with, so that a request never lands on the rows of an
    /// operation still in doubt. Refused, it writes nothing. A request recorded under `key` is
    /// answered before anything is checked.
    ///
    /// The default reads the intents, then publishes: two steps, and a begin landing between
    /// them is not seen, so the publish may publish the rows the begin just staged while its
    /// intent names them. It is right only for a catalog no operation begins on concurrently.
    /// Both of mend's backends override it with one atomic step, as they do
    /// [`Catalog::stage_unless_in_the_way`]; a wrapper forwards it to the catalog it wraps.
    async fn publish_unless_in_the_way(
        &self,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<PublishResult> {
        let dataset_id = request.dataset_id.as_str();
        // A recorded key goes straight to the publish, which answers its record.
        let recorded = match key {
            Some(key) => self.recorded_request(dataset_id, &key.key).await?.is_some(),
            None => false,
        };
        if !recorded {
            let intents = self.list_intents(dataset_id).await?;
            refuse_naming(&intents, publish_ids(request))?;
        }
        self.publish(request, validate, now_ms, key).await
    }

    /// Records `record` under its key unless a record is kept under that key already
    /// (put-if-absent, atomic by itself), and returns the record kept: `record`, or the one
    /// found. For operations with several steps (gc, reconcile, recovery), which record their
    /// result when they end; the caller answers the kept record
    /// ([`RecordedRequest::replay`]), so of two racing runs both answer the one that won.
    /// `NotFound` if the dataset does not exist.
    async fn record_request(
        &self,
        dataset_id: &str,
        record: &RecordedRequest,
    ) -> Result<RecordedRequest>;

    /// The record of idempotency key `key`, if one is kept. `NotFound` if the dataset does
    /// not exist.
    async fn recorded_request(
        &self,
        dataset_id: &str,
        key: &str,
    ) -> Result<Option<RecordedRequest>>;

    /// Forgets the records made before `recorded_before_ms`; returns how many. A retry after
    /// that runs as a new request.
    async fn forget_recorded_requests(
        &self,
        dataset_id: &str,
        recorded_before_ms: TimestampMs,
        now_ms: TimestampMs,
    ) -> Result<usize>;

    /// Moves the splits of `split_ids` that `rule` picks to `MarkedForDeletion`, in one atomic
    /// step, and says which it moved and which were marked already. What each rule picks, and
    /// when it refuses, is on [`MarkRule`]. A mark that moves nothing writes nothing but its
    /// record under `key`. `NotFound` if the dataset does not exist.
    async fn mark(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        rule: MarkRule,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<MarkResult>;

    /// Records that garbage collection saw the marks of the rows among `split_ids` that are
    /// marked for deletion and not yet seen, at `seen_at_ms`, read after it read them
    /// ([`SplitRow::mark_seen_at_ms`](crate::model::SplitRow::mark_seen_at_ms)): the ids it
    /// recorded, sorted. A row seen already keeps its time, and ids without a marked row are
    /// skipped, all in one atomic step; the published view does not change (the manifest
    /// version stays). `NotFound` if the dataset does not exist.
    async fn see_marks(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        seen_at_ms: TimestampMs,
    ) -> Result<Vec<String>>;

    /// Deletes the rows of splits marked for deletion. `NotFound` naming unknown ids,
    /// `FailedPrecondition` naming ids in another state; nothing written in either case.
    /// The engine deletes the objects before calling this.
    async fn delete_splits(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<()>;

    /// Splits matching `query`, sorted by id, one page at a time.
    async fn list_splits(&self, dataset_id: &str, query: &ListQuery) -> Result<SplitPage>;

    /// The state of each of `split_ids` that has a row, sorted by id; ids without a row are
    /// left out. Only states, so that recovery, which observes thousands of splits by id, reads
    /// no metadata. `NotFound` if the dataset does not exist. The default lists the rows.
    async fn split_states(
        &self,
        dataset_id: &str,
        split_ids: &[String],
    ) -> Result<Vec<ExistingRow>> {
        let query = ListQuery {
            split_ids: Some(split_ids.to_vec()),
            ..ListQuery::default()
        };
        Ok(self
            .list_splits(dataset_id, &query)
            .await?
            .splits
            .into_iter()
            .map(|row| ExistingRow {
                split_id: row.split_id,
                state: row.state,
            })
            .collect())
    }

    /// Records a new operation's intent, before its first effect. `AlreadyExists` if the
    /// operation id is taken in this dataset, `NotFound` if the dataset does not exist. Intents
    /// are not part of the published view: the manifest version does not move. Like every
    /// intent write, it stores the intent in this host's format, whatever format it names, and
    /// refuses one this host does not know (`InvalidArgument`, nothing written):
    /// [`check_written_format`](crate::intent::check_written_format).
    async fn put_intent(&self, intent: &Intent) -> Result<()>;

    /// Replaces the stored intent of `intent.operation_id` with `intent` if the stored one is
    /// still in `expected_phase`: `FailedPrecondition` if it is not, `NotFound` if it is gone.
    /// Confirms effects (`Armed` to `EffectsConfirmed`) and renews the owner's lease. A lease
    /// never moves back: where `intent` carries an earlier lease than the stored one (it was
    /// read before a heartbeat landed), the stored lease is kept, in the same atomic step.
    ///
    /// A confirmation (`expected_phase` `Armed`, `intent` `EffectsConfirmed`) also requires,
    /// in the same atomic step, that the stored intent's publish can still land on the rows:
    /// [`check_confirmable`](crate::intent::check_confirmable), `FailedPrecondition` naming the
    /// splits otherwise, and nothing written.
    async fn update_intent(&self, intent: &Intent, expected_phase: IntentPhase) -> Result<()>;

    /// Moves an `Armed` intent to `Abandoned`, fencing it: it can never be confirmed or renewed
    /// afterwards (`update_intent` expecting `Armed` fails). With `lease_expired_by: Some(t)`,
    /// only if its lease ran out at or before `t`, checked in the same atomic step (a heartbeat
    /// that landed first wins); with `None`, whatever its lease (its owner aborting).
    /// Returns the intent as stored after. Already `Abandoned`: Ok, unchanged (idempotent).
    /// `NotFound` if gone; `FailedPrecondition` naming the operation if it is
    /// `EffectsConfirmed` or its lease is still live.
    async fn abandon_intent(
        &self,
        dataset_id: &str,
        operation_id: &str,
        lease_expired_by: Option<TimestampMs>,
        now_ms: TimestampMs,
    ) -> Result<Intent>;

    /// Deletes an intent; `NotFound` if it is gone.
    async fn delete_intent(
        &self,
        dataset_id: &str,
        operation_id: &str,
        now_ms: TimestampMs,
    ) -> Result<()>;

    /// The dataset's intents, oldest first (by creation time, then operation id). An intent
    /// in a format newer than this host's is refused with `Corrupt`, never guessed at.
    async fn list_intents(&self, dataset_id: &str) -> Result<Vec<Intent>>;

    /// The intent of `operation_id` on the dataset, or `None` when it has none: what
    /// [`list_intents`](Catalog::list_intents) lists for it, without reading the others (a
    /// writer's step and `show` read their own intent only). `NotFound` if the dataset does
    /// not exist; a newer format is refused with `Corrupt`, as there.
    async fn intent(&self, dataset_id: &str, operation_id: &str) -> Result<Option<Intent>>;

    /// The datasets that may have unresolved intents, sorted by id ([`pending`]). Never misses
    /// a dataset whose intent was written by a writer that then crashed (each backend says
    /// exactly what it promises: Postgres's intents table is the index itself; on object
    /// storage, see `object_store/pending.rs`); may name a dataset whose intents have since
    /// been settled, so the caller reads its intents to know. Names only datasets that had an
    /// intent at some point: a dataset that never had one is never named.
    ///
    /// A backend claiming [`PENDING_INDEX`] answers from an index, at a cost in proportion to
    /// the datasets it names. The default reads every dataset's intents
    /// ([`pending::scan_every_dataset`]), at a cost in proportion to all datasets.
    async fn pending_datasets(&self) -> Result<Vec<PendingDataset>> {
        pending::scan_every_dataset(self).await
    }

    /// Takes `dataset_id` off the pending index when it has no intents left: a supervisor
    /// calls it after a check found none. It may leave the dataset on the index (a backend
    /// keeps a recently written entry for a grace period, and one whose dataset has intents
    /// again); it never takes off a dataset whose intents it can see. A no-op where the index
    /// is the intents themselves (Postgres), and by default.
    async fn clear_pending(&self, dataset_id: &str) -> Result<()> {
        let _ = dataset_id;
        Ok(())
    }

    /// Settles the intents of a recovery sweep's batch ([`settle`]): each settlement's publish
    /// (validated by `validate`, recorded under its key), marks and intent delete, applied as
    /// if one after another in order, each on the state the ones before it left. Returns one
    /// [`Settled`] per settlement, in order.
    ///
    /// A backend claiming [`SETTLE_ATOMIC`] applies the whole batch in **one atomic step** (one
    /// transaction, one commit): if any settlement is refused (its validation, a publish that
    /// no longer applies, a live lease, a key recorded for another request), the batch fails
    /// with that settlement's error and nothing is written. The engine then settles the same
    /// intents one batch of one at a time, so one refusal never takes the others down.
    ///
    /// A batch is checked first ([`settle::check_batch`]): at most
    /// [`settle::MAX_SETTLEMENTS`], each operation once, no split named by two settlements,
    /// every publish of this dataset; otherwise `InvalidArgument`, nothing read or written.
    /// `NotFound` if the dataset does not exist. A batch that changes nothing writes nothing.
    ///
    /// The default applies each settlement as the single steps the engine used to take, one
    /// at a time ([`settle::one_at_a_time`]): not atomic as a whole, so a backend keeping it
    /// must not claim [`SETTLE_ATOMIC`].
    async fn settle_intents(
        &self,
        dataset_id: &str,
        settlements: &[Settlement],
        validate: &SettleValidator<'_>,
        now_ms: TimestampMs,
    ) -> Result<Vec<Settled>> {
        settle::one_at_a_time(self, dataset_id, settlements, validate, now_ms).await
    }

    /// Appends audit records of one dataset (all of `records` name it); append-only, never
    /// rewritten. `NotFound` if the dataset does not exist.
    async fn append_audit(&self, dataset_id: &str, records: &[AuditRecord]) -> Result<()>;

    /// The dataset's audit records, oldest first (by recorded time, then in append order),
    /// at most `limit` of the newest when given.
    async fn list_audit(&self, dataset_id: &str, limit: Option<usize>) -> Result<Vec<AuditRecord>>;

    /// Records a write that no step of this catalog made (an object put or deleted in the
    /// object storage of splits, which no catalog step can join), in a write of its own right
    /// after it: mend's object-store catalog puts it in an object beside the log (no log
    /// version), Postgres inserts a row. The default keeps nothing, like the default of
    /// [`list_write_audit`](Catalog::list_write_audit). `NotFound` if the dataset does not
    /// exist, where the backend can tell without reading it first.
    async fn record_write(&self, record: &write_audit::WriteRecord) -> Result<()> {
        let _ = record;
        Ok(())
    }

    /// The dataset's newest `limit` write records (all of them without a limit), oldest first
    /// ([`write_audit`]): the records a backend writes in the atomic step of each write made
    /// inside a [`WriteScope`](write_audit::WriteScope). `NotFound` if the dataset does not
    /// exist; a record of a newer format is refused (`Corrupt`).
    ///
    /// The default answers none: a backend that keeps no trail of writes. mend's own keep
    /// one, and the conformance kit holds a backend to recording every write of a scope.
    async fn list_write_audit(
        &self,
        dataset_id: &str,
        limit: Option<usize>,
    ) -> Result<Vec<write_audit::WriteRecord>> {
        let _ = (dataset_id, limit);
        Ok(Vec::new())
    }

    /// The newest `limit` audit records of the whole catalog, every dataset's together, oldest
    /// first: by recorded time, one dataset's records of one millisecond in append order (the
    /// order between two datasets' records of one millisecond, and so which of them make the
    /// cut at the oldest end, is the backend's). What a policy swap replays ([`recent_audit`]).
    ///
    /// A dataset with records that cannot be read (a newer mend's format, a damaged body) is
    /// named in [`RecentAudit::unreadable`] with the reason, and what could not be read is left
    /// out (by the default, the dataset's whole trail; by mend's backends, the append holding
    /// it), so that one damaged trail does not hide the others.
    ///
    /// The default reads every dataset's newest `limit` records
    /// ([`recent_audit::every_dataset`]), at a cost in proportion to all datasets. mend's
    /// backends answer from an index, at a cost in proportion to `limit`.
    async fn list_recent_audit(&self, limit: usize) -> Result<RecentAudit> {
        recent_audit::every_dataset(self, limit).await
    }

    // One commit's two catalog steps (`commit.rs`). Each folds steps above into one atomic
    // step, so that a commit writes two log versions (or transactions) instead of five. The
    // defaults run the folded steps one after another: a backend that does not implement
    // these keeps working, at the old cost.

    /// A commit's first step: reads the dataset, builds the commit's intent from it
    /// (`intent`, called once per attempt, with the dataset as read in that attempt), writes
    /// the intent, which must be `Armed` and in this host's format, and stages `split_ids`
    /// (distinct, sorted) create-only as [`stage`](Catalog::stage) does with `planner`, all in
    /// one atomic step, and only whole: the intent owns every row it plans from the moment it
    /// is written.
    ///
    /// Refused with nothing written:
    ///
    /// - a row the plan does not insert (another writer staged or published it first):
    ///   `FailedPrecondition` naming those splits, without an operation;
    /// - the operation id taken by an intent: `AlreadyExists` (a begin sent again);
    /// - a record kept under one of `records.refused_by` (the records that say the operation
    ///   began or ended before: a begin sent again after its operation ended must not begin it
    ///   again), looked up in the same step, so that a step recording one of them either lands
    ///   first and refuses the begin, or after it and sees its intent:
    ///   [`MendError::operation_refused`] with [`OperationFound::Ended`](crate::error::OperationFound::Ended)
    ///   naming the operation (the caller reads the records to tell how it ended);
    /// - no such dataset: `NotFound`.
    ///
    /// `records.begun`, if given, is recorded in the same step.
    ///
    /// The default runs [`dataset`](Catalog::dataset), [`list_intents`](Catalog::list_intents),
    /// [`recorded_request`](Catalog::recorded_request), [`put_intent`](Catalog::put_intent),
    /// [`stage`](Catalog::stage) and [`record_request`](Catalog::record_request) one after another,
    /// and undoes its own rows and intent when a row was taken: not atomic, so a crash in
    /// between leaves an intent that recovery abandons once its lease runs out.
    async fn begin_commit(
        &self,
        dataset_id: &str,
        intent: &IntentBuilder<'_>,
        splits: &[Arc<NewSplit>],
        planner: &StagePlanner<'_>,
        records: OperationRecords<'_>,
        now_ms: TimestampMs,
    ) -> Result<BegunCommit> {
        commit::begin_in_steps(self, dataset_id, intent, splits, planner, records, now_ms).await
    }

    /// A commit's last step: publishes `request` as [`publish`](Catalog::publish) does, its
    /// result recorded under `key`, and deletes the intent of `intent.operation_id`, which the
    /// publish settles, in one atomic step, and only while that intent is there and not
    /// `Abandoned`: once recovery has abandoned the operation (its lease ran out before it
    /// published), it never publishes (`FailedPrecondition` naming the operation), and an
    /// intent that is gone is `NotFound` (recovery settled the operation). Both are checked
    /// before the publish, in the same step. With `key` recorded already (recovery rolled the
    /// operation forward under the same key), the recorded result is answered and the intent,
    /// if still there, deleted; nothing else is read or checked.
    ///
    /// The default: the record if there is one; otherwise moves the intent from `Armed` to
    /// `EffectsConfirmed` ([`update_intent`](Catalog::update_intent), which fails once
    /// recovery abandoned it), publishes, and deletes the intent, one after another.
    async fn publish_commit(
        &self,
        intent: &Intent,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now_ms: TimestampMs,
        key: &RequestKey,
    ) -> Result<PublishResult> {
        commit::publish_in_steps(self, intent, request, validate, now_ms, key).await
    }
}

/// What a publish changes once the validator accepted it: the splits it publishes and those it
/// replaces (sorted, distinct) and the checkpoint after its delta.
pub(crate) struct PublishEffects {
    pub staged: Vec<String>,
    pub replaced: Vec<String>,
    pub checkpoint: Checkpoint,
}

/// The checks every in-memory publish makes after the validator, in the Postgres backend's
/// order (defense in depth: the validator checks all of this, but a publish must not break the
/// lifecycle or move a checkpoint even if it has a bug): no split both published and replaced,
/// the delta applies, the splits to publish are staged and those replaced published, as
/// `state_of` tells. `None` for a publish that changes nothing.
pub(crate) fn publish_effects(
    dataset: &Dataset,
    request: &PublishRequest,
    state_of: impl Fn(&String) -> Result<Option<SplitState>>,
) -> Result<Option<PublishEffects>> {
    let staged = sorted_distinct(&request.staged_split_ids);
    let replaced = sorted_distinct(&request.replaced_split_ids);
    let in_both: Vec<String> = staged
        .iter()
        .filter(|id| replaced.binary_search(id).is_ok())
        .cloned()
        .collect();
    if !in_both.is_empty() {
        return Err(MendError::failed_precondition(
            "splits cannot be both published and replaced",
            in_both,
        ));
    }
    let checkpoint = match &request.checkpoint_delta {
        Some(delta) => checkpoint_after(&dataset.checkpoint, delta)?,
        None => dataset.checkpoint.clone(),
    };
    if staged.is_empty() && replaced.is_empty() && checkpoint == dataset.checkpoint {
        return Ok(None);
    }
    let not_in = |ids: &[String], wanted: SplitState| -> Result<Vec<String>> {
        let mut not = Vec::new();
        for id in ids {
            if state_of(id)? != Some(wanted) {
                not.push(id.clone());
            }
        }
        Ok(not)
    };
    let not_staged = not_in(&staged, SplitState::Staged)?;
    if !not_staged.is_empty() {
        return Err(MendError::failed_precondition(
            "splits to publish are not staged",
            not_staged,
        ));
    }
    let not_published = not_in(&replaced, SplitState::Published)?;
    if !not_published.is_empty() {
        return Err(MendError::failed_precondition(
            "splits to replace are not published",
            not_published,
        ));
    }
    Ok(Some(PublishEffects {
        staged,
        replaced,
        checkpoint,
    }))
}

/// `ids` sorted, each once.
pub(crate) fn sorted_distinct<'a>(ids: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    let distinct: BTreeSet<&String> = ids.into_iter().collect();
    distinct.into_iter().cloned().collect()
}

/// `checkpoint` with `delta` applied, for backends to store. Each partition's from-position
/// must be its current position and its to-position must not be behind it, so a delta applies
/// exactly once and positions never move backwards (invariant 4); otherwise
/// `FailedPrecondition` naming the partitions. A delta that adds partitions must leave the
/// checkpoint within [`crate::bounds::CHECKPOINT_PARTITIONS`] (all sources together);
/// otherwise `FailedPrecondition` naming the partitions it would add. (A checkpoint over the
/// cap from before it existed still moves the partitions it holds.)
pub(crate) fn checkpoint_after(
    checkpoint: &Checkpoint,
    delta: &CheckpointDelta,
) -> Result<Checkpoint> {
    let mut next = checkpoint.clone();
    let positions = next.entry(delta.source.clone()).or_default();
    let mut stale = Vec::new();
    let mut added = Vec::new();
    for partition in &delta.partitions {
        let current = positions.get(&partition.partition).copied();
        let backwards = current.is_some_and(|current| partition.to_position < current);
        if current != partition.from_position || backwards {
            stale.push(partition.partition.clone());
        } else {
            if current.is_none() {
                added.push(partition.partition.clone());
            }
            positions.insert(partition.partition.clone(), partition.to_position);
        }
    }
    if !stale.is_empty() {
        return Err(crate::MendError::failed_precondition(
            format!(
                "the checkpoint delta of source {} does not start at the current positions",
                delta.source
            ),
            stale,
        ));
    }
    if positions.is_empty() {
        // An empty delta must not leave an empty source behind.
        next.remove(&delta.source);
    }
    let held: usize = next.values().map(BTreeMap::len).sum();
    let most = crate::bounds::CHECKPOINT_PARTITIONS.max;
    if !added.is_empty() && u64::try_from(held).unwrap_or(u64::MAX) > most {
        return Err(crate::MendError::failed_precondition(
            format!(
                "the checkpoint delta of source {} adds {} partition(s), and the dataset's checkpoint would hold {held}, over the limit of {most} partitions per dataset; nothing was written",
                delta.source,
                added.len()
            ),
            added,
        ));
    }
    Ok(next)
}

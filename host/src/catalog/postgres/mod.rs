//! The Postgres catalog backend (sqlx), with its schema as numbered migrations embedded from
//! `host/migrations/`.
//!
//! Every mutation that reads before it writes runs as one transaction, retried from its first
//! read when Postgres aborts it for a deadlock or a serialization failure, or when a concurrent
//! insert made what the step read stale; after `MAX_ATTEMPTS` it fails with `Conflict`, having
//! written nothing. Intent writes are single conditional statements, and advancing the fencing
//! epoch is a single `UPDATE`. Create-only staging, whose only write is one `INSERT ... ON
//! CONFLICT DO NOTHING`, atomic by itself: it runs on a plain connection, two round trips
//! cheaper, and is never retried here, because an attempt that inserted and then lost its
//! connection must not come back reporting the caller's own rows as skipped. It fails as
//! `Unavailable` instead. Upsert staging observes by writing: its transaction's first
//! statement writes what the mode presumes and says what it met, and the policy's plan on that
//! decides between commit and rollback (`stage.rs`).
//!
//! A mutation under an idempotency key ([`crate::catalog::recorded`]) always runs as one
//! transaction, create-only staging and dataset creation included: it first takes the key's
//! transaction-scoped advisory lock and reads its record (`recorded.rs`), and inserts the
//! record with the effect.
//!
//! Writes lock in one order everywhere: the dataset row (`FOR NO KEY UPDATE`, which does not
//! block the foreign-key check of concurrent split inserts), then split rows sorted by id.
//! Create-only staging never locks or updates a row it does not insert.
//!
//! Times come from the caller; no statement reads the server's clock. The SQL lives in `sql/`,
//! the SQLSTATE mapping in `errors.rs`, connecting (the durability check, the migrations) in
//! `connect.rs`, the retried and keyed transactions in `transaction.rs`. What to write is decided by the engine and the policy;
//! this module stores it and refuses what it cannot apply as asked.

mod audit;
mod commit;
mod connect;
mod datasets;
mod errors;
mod intents;
mod lifecycle;
mod list;
mod queries;
mod recorded;
mod rows;
mod settle;
mod sql;
mod stage;
#[cfg(test)]
mod tests;
mod transaction;
mod writes;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::catalog::write_audit::{self, PendingWrite};
use crate::catalog::{
    BegunCommit, Capabilities, Catalog, DatasetChange, InTheWay, IntentBuilder, MarkRule,
    OperationRecords, PublishValidator, RecordedRequest, RequestKey, SettleValidator, Settled,
    Settlement, StagePlanner,
};
use crate::error::{MendError, Result};
use crate::intent::{Intent, IntentPhase};
use crate::model::{
    Dataset, DatasetConfig, ListQuery, MarkResult, NewSplit, PublishRequest, PublishResult,
    SplitPage, StageMode, StagedSplit, TimestampMs,
};

use self::errors::{Resolution, StepError};
use self::transaction::answer_whole;

/// Runs the one-statement write `$step` (an expression using the connection `$conn`) on a
/// connection of the pool; inside a scope ([`write_audit`]), in a transaction that also
/// records the write, answered by the step's result.
macro_rules! single_write {
    ($catalog:expr, $dataset_id:expr, $write:expr, $at_ms:expr, |$conn:ident| $step:expr) => {
        match $write {
            None => {
                let mut connection = $catalog
                    .pool
                    .acquire()
                    .await
                    .map_err(|error| errors::database_error(error, $dataset_id))?;
                let $conn: &mut PgConnection = &mut connection;
                $step.await
            }
            Some(write) => {
                $catalog
                    .keyed_transaction(
                        $dataset_id,
                        None,
                        Some(&write),
                        &answer_whole,
                        $at_ms,
                        |mut transaction| async move {
                            let $conn: &mut PgConnection = &mut transaction;
                            let result = $step.await.map_err(StepError::Failed);
                            (transaction, result)
                        },
                    )
                    .await
            }
        }
    };
}

/// How many times a step runs before concurrent writers make it give up with `Conflict`.
const MAX_ATTEMPTS: u32 = 16;
const MAX_CONNECTIONS: u32 = 16;
/// How long a request waits for a pooled connection before it fails as `Unavailable`.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// A pooled connection idle for this long is pinged before a request gets it, so one the server
/// dropped meanwhile (a restart, an idle timeout) is replaced, not handed out. One used more
/// recently is handed out as it is: under load, a ping on every acquire (sqlx's default) is a
/// round trip per request, as many as a create-only stage's own statements.
const PING_IDLE_AFTER: Duration = Duration::from_secs(5);

static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

type PgTransaction = Transaction<'static, Postgres>;

pub use super::PostgresOptions;

/// The server settings a catalog's durability rests on, with the one value each must not have.
const DURABILITY_SETTINGS: [(&str, &str); 3] = [
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
];

/// A catalog in a Postgres database.
#[derive(Debug, Clone)]
pub struct PostgresCatalog {
    pool: PgPool,
    /// `postgres://host:port/database`, without credentials.
    description: String,
    /// The datasets whose last create-only stage with the standard plan met a row that exists:
    /// the next one probes first (`stage.rs`).
    probe_first: Arc<ProbeFirst>,
}

/// Which datasets' standard create-only stages read the rows before they insert. A cost choice
/// only: both statements stage the same rows with the same answers (`stage.rs`). Forgetting a
/// dataset costs one batch the other way, so the set is simply emptied when it is full.
#[derive(Debug, Default)]
struct ProbeFirst(std::sync::Mutex<std::collections::HashSet<String>>);

impl ProbeFirst {
    /// The most datasets remembered.
    const MAX_DATASETS: usize = 4096;

    fn get(&self, dataset_id: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(dataset_id)
    }

    /// Remembers what a stage of `dataset_id` met: a row that exists, or only new ids.
    ///
    /// Measured (`tests/benches/contention.rs`, `staging.rs`): inserting first is worth it only
    /// for batches of new ids (0.89 of the floor against 0.78 probing first, 1,000 new ids a
    /// batch); with half of the ids existing it fell to 0.46 to 0.53 under contention, against
    /// 0.82 probing first, because an insert that meets a row another writer is inserting at
    /// that moment waits for that writer.
    fn remember(&self, dataset_id: &str, staged: &[StagedSplit]) {
        let met_existing = staged
            .iter()
            .any(|split| matches!(split.outcome, crate::model::StageOutcome::Skipped(_)));
        let mut datasets = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !met_existing {
            datasets.remove(dataset_id);
        } else if !datasets.contains(dataset_id) {
            if datasets.len() >= Self::MAX_DATASETS {
                datasets.clear();
            }
            datasets.insert(dataset_id.to_owned());
        }
    }
}

impl PostgresCatalog {
    /// A keyed or recorded creation: the dataset row, the record of `key` and the record of the
    /// write in one transaction. When the id is taken, the record of `key` in the dataset that
    /// has it answers, if there is one.
    async fn create_dataset_keyed(
        &self,
        dataset_id: &str,
        uid: &str,
        config: &DatasetConfig,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
        write: Option<&PendingWrite>,
    ) -> Result<Dataset> {
        let created = self
            .keyed_transaction(
                dataset_id,
                key,
                write,
                &answer_whole,
                now_ms,
                |mut transaction| async move {
                    let result =
                        datasets::create(&mut transaction, dataset_id, uid, config, now_ms).await;
                    (transaction, result)
                },
            )
            .await;
        match created {
            // The insert that found the id taken aborted its transaction, so the record of an
            // earlier copy of this request is read outside it. That copy committed first: the
            // key's lock made this transaction wait for it.
            Err(MendError::AlreadyExists { kind, id }) => {
                let Some(key) = key else {
                    return Err(MendError::AlreadyExists { kind, id });
                };
                match recorded::get(&self.pool, dataset_id, &key.key).await? {
                    Some(found) => found.replay(key),
                    None => Err(MendError::AlreadyExists { kind, id }),
                }
            }
            other => other,
        }
    }
}

impl PostgresCatalog {
    /// The publish, in one transaction; with `InTheWay::Refuse`, with a read of the intents
    /// after it in the same transaction ([`Catalog::publish_unless_in_the_way`]): the publish
    /// locks the rows it reads, so a begin that staged any of them committed before that read
    /// (its intent is in the read after it), and a begin staging them later meets the locked
    /// rows and is refused. An intent in the way rolls the publish back.
    async fn publish_checking(
        &self,
        request: &PublishRequest,
        validate: &PublishValidator<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
        in_the_way: InTheWay,
    ) -> Result<PublishResult> {
        let write = write_audit::pending(&request.dataset_id, "publish", || {
            write_audit::publish_ids(request)
        });
        self.keyed_transaction(
            &request.dataset_id,
            key,
            write.as_ref(),
            &answer_whole,
            now_ms,
            |mut transaction| async move {
                let result = lifecycle::publish(&mut transaction, request, validate, now_ms).await;
                let result = match result {
                    Ok(published) if in_the_way == InTheWay::Refuse => refused_in_the_way(
                        &mut transaction,
                        &request.dataset_id,
                        crate::catalog::publish_ids(request),
                    )
                    .await
                    .map(|()| published),
                    other => other,
                };
                (transaction, result)
            },
        )
        .await
    }
}

/// `RecoveryRequired` when an intent of the dataset names one of `split_ids`, read in the
/// write's transaction after its statements locked those rows
/// ([`Catalog::publish_unless_in_the_way`], [`MarkRule::NamedUnlessInTheWay`]).
async fn refused_in_the_way<'b>(
    conn: &mut PgConnection,
    dataset_id: &str,
    split_ids: impl IntoIterator<Item = &'b String>,
) -> std::result::Result<(), StepError> {
    let intents = intents::list_on(conn, dataset_id).await?;
    crate::catalog::refuse_naming(&intents, split_ids).map_err(StepError::from)
}

#[async_trait]
impl Catalog for PostgresCatalog {
    fn capabilities(&self) -> Capabilities {
        Capabilities::full_backend()
            .with(crate::catalog::PENDING_INDEX)
            .with(crate::catalog::write_audit::WRITE_AUDIT)
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    async fn create_dataset(
        &self,
        dataset_id: &str,
        uid: &str,
        config: &DatasetConfig,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        let write = write_audit::pending(dataset_id, "create-dataset", || []);
        match (key, write) {
            (None, None) => {
                let mut connection = self
                    .pool
                    .acquire()
                    .await
                    .map_err(|error| errors::database_error(error, dataset_id))?;
                datasets::create(&mut connection, dataset_id, uid, config, now_ms)
                    .await
                    .map_err(|error| match error.resolve(dataset_id) {
                        Resolution::Fail(error) => error,
                        Resolution::Retry(reason) => MendError::Transient { message: reason },
                    })
            }
            (key, write) => {
                self.create_dataset_keyed(dataset_id, uid, config, now_ms, key, write.as_ref())
                    .await
            }
        }
    }

    async fn list_datasets(&self) -> Result<Vec<Dataset>> {
        datasets::list(&self.pool).await
    }

    async fn dataset(&self, dataset_id: &str) -> Result<Dataset> {
        datasets::show(&self.pool, dataset_id).await
    }

    async fn probe_manifest(&self, dataset_id: &str) -> Result<crate::catalog::ManifestProbe> {
        datasets::probe_manifest(&self.pool, dataset_id).await
    }

    async fn update_dataset(
        &self,
        dataset_id: &str,
        change: DatasetChange<'_>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        let write = write_audit::pending(dataset_id, "update-dataset", || []);
        if let (DatasetChange::AdvanceFencingEpoch, None, None) = (change, key, &write) {
            return datasets::advance_fencing_epoch(&self.pool, dataset_id, now_ms).await;
        }
        let write = write.as_ref();
        // Set by a token change that finds the token in force: it changes nothing.
        let unchanged = &AtomicBool::new(false);
        let changed = |dataset: &Dataset| {
            (!unchanged.load(Ordering::Relaxed)).then(|| write_audit::answer_of(dataset))
        };
        self.keyed_transaction(
            dataset_id,
            key,
            write,
            &changed,
            now_ms,
            |mut transaction| async move {
                unchanged.store(false, Ordering::Relaxed);
                let result = match change {
                    DatasetChange::Config {
                        expected_config_version,
                        config,
                    } => {
                        let expected = expected_config_version;
                        datasets::update_config(
                            &mut transaction,
                            dataset_id,
                            expected,
                            config,
                            now_ms,
                        )
                        .await
                    }
                    DatasetChange::PublishToken(token) => {
                        datasets::set_publish_token(&mut transaction, dataset_id, token, now_ms)
                            .await
                            .inspect(|(_, changed)| unchanged.store(!changed, Ordering::Relaxed))
                            .map(|(dataset, _)| dataset)
                    }
                    DatasetChange::AdvanceFencingEpoch => {
                        datasets::advance_fencing_epoch_locked(&mut transaction, dataset_id, now_ms)
                            .await
                    }
                };
                (transaction, result)
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
        self.stage_planned(
            dataset_id,
            mode,
            splits,
            planner,
            now_ms,
            key,
            false,
            InTheWay::Write,
        )
        .await
    }

    /// The standard plan needs no read before the write: a create-only stage is one
    /// `INSERT ... ON CONFLICT DO NOTHING RETURNING` and, only for the ids it did not insert,
    /// one read of the states they are in (`stage.rs`).
    async fn stage_standard(
        &self,
        dataset_id: &str,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Vec<StagedSplit>> {
        let planner = |existing: &[crate::catalog::ExistingRow]| {
            crate::catalog::standard_stage_plan(mode, splits, existing)
        };
        self.stage_planned(
            dataset_id,
            mode,
            splits,
            &planner,
            now_ms,
            key,
            true,
            InTheWay::Write,
        )
        .await
    }

    /// The stage and the check in one transaction, the intents read after the stage's
    /// statement (`stage.rs`): a begin of the same split is ordered with the stage by their
    /// rows, so the default's window (intents read, then a begin, then the stage meeting its
    /// rows) is closed. One transaction more than an unkeyed stage alone.
    async fn stage_unless_in_the_way(
        &self,
        dataset_id: &str,
        mode: StageMode,
        splits: &[Arc<NewSplit>],
        planner: Option<&StagePlanner<'_>>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Vec<StagedSplit>> {
        let standard = |existing: &[crate::catalog::ExistingRow]| {
            crate::catalog::standard_stage_plan(mode, splits, existing)
        };
        let (planner, is_standard): (&StagePlanner<'_>, bool) = match planner {
            Some(planner) => (planner, false),
            None => (&standard, true),
        };
        self.stage_planned(
            dataset_id,
            mode,
            splits,
            planner,
            now_ms,
            key,
            is_standard,
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
        self.in_transaction(dataset_id, |mut transaction| async move {
            let result = recorded::keep(&mut transaction, dataset_id, record).await;
            (transaction, result)
        })
        .await
    }

    async fn recorded_request(
        &self,
        dataset_id: &str,
        key: &str,
    ) -> Result<Option<RecordedRequest>> {
        recorded::get(&self.pool, dataset_id, key).await
    }

    async fn forget_recorded_requests(
        &self,
        dataset_id: &str,
        recorded_before_ms: TimestampMs,
        _now_ms: TimestampMs,
    ) -> Result<usize> {
        recorded::forget(&self.pool, dataset_id, recorded_before_ms).await
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
        let write = write.as_ref();
        let changed = |marked: &MarkResult| {
            (!marked.marked.is_empty()).then(|| write_audit::answer_of(marked))
        };
        self.keyed_transaction(
            dataset_id,
            key,
            write,
            &changed,
            now_ms,
            |mut transaction| async move {
                let result = match rule {
                    MarkRule::Named => {
                        lifecycle::mark_for_deletion(
                            &mut transaction,
                            dataset_id,
                            split_ids,
                            now_ms,
                        )
                        .await
                    }
                    // The intents are read after the rows are locked, as for the publish.
                    MarkRule::NamedUnlessInTheWay => {
                        match lifecycle::mark_for_deletion(
                            &mut transaction,
                            dataset_id,
                            split_ids,
                            now_ms,
                        )
                        .await
                        {
                            Ok(marked) => {
                                refused_in_the_way(&mut transaction, dataset_id, split_ids)
                                    .await
                                    .map(|()| marked)
                            }
                            Err(error) => Err(error),
                        }
                    }
                    MarkRule::StaleStaged {
                        untouched_before_ms,
                    } => lifecycle::mark_stale_staged(
                        &mut transaction,
                        dataset_id,
                        split_ids,
                        untouched_before_ms,
                        now_ms,
                    )
                    .await
                    .map(|marked| MarkResult {
                        marked,
                        already_marked: Vec::new(),
                    }),
                    MarkRule::Unclaimed {
                        untouched_before_ms,
                    } => lifecycle::mark_unclaimed_stale(
                        &mut transaction,
                        dataset_id,
                        split_ids,
                        untouched_before_ms,
                        now_ms,
                    )
                    .await
                    .map(|marked| MarkResult {
                        marked,
                        already_marked: Vec::new(),
                    }),
                };
                (transaction, result)
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
        let write = write.as_ref();
        let changed = |seen: &Vec<String>| (!seen.is_empty()).then(|| write_audit::answer_of(seen));
        self.keyed_transaction(
            dataset_id,
            None,
            write,
            &changed,
            seen_at_ms,
            |mut transaction| async move {
                let result =
                    lifecycle::see_marks(&mut transaction, dataset_id, split_ids, seen_at_ms).await;
                (transaction, result)
            },
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
        let write = write.as_ref();
        let changed = |_: &()| (!split_ids.is_empty()).then_some(serde_json::Value::Null);
        self.keyed_transaction(
            dataset_id,
            key,
            write,
            &changed,
            now_ms,
            |mut transaction| async move {
                let result =
                    lifecycle::delete_splits(&mut transaction, dataset_id, split_ids, now_ms).await;
                (transaction, result)
            },
        )
        .await
    }

    async fn list_splits(&self, dataset_id: &str, query: &ListQuery) -> Result<SplitPage> {
        list::list_splits(&self.pool, dataset_id, query).await
    }

    async fn split_states(
        &self,
        dataset_id: &str,
        split_ids: &[String],
    ) -> Result<Vec<crate::catalog::ExistingRow>> {
        list::split_states(&self.pool, dataset_id, split_ids).await
    }

    async fn put_intent(&self, intent: &Intent) -> Result<()> {
        let write = write_audit::pending(&intent.dataset_id, "put-intent", || {
            [intent.operation_id.as_str()]
        });
        let at_ms = intent.updated_at_ms;
        single_write!(self, &intent.dataset_id, write, at_ms, |conn| intents::put(
            conn, intent
        ))
    }

    async fn update_intent(&self, intent: &Intent, expected_phase: IntentPhase) -> Result<()> {
        let confirms_a_publish = expected_phase == IntentPhase::Armed
            && intent.phase == IntentPhase::EffectsConfirmed
            && intent.effects.publish.is_some();
        let write = write_audit::pending(&intent.dataset_id, "update-intent", || {
            [intent.operation_id.as_str()]
        });
        let (dataset_id, at_ms) = (&intent.dataset_id, intent.updated_at_ms);
        if !confirms_a_publish {
            return single_write!(self, dataset_id, write, at_ms, |conn| intents::update_on(
                conn,
                intent,
                expected_phase
            ));
        }
        let write = write.as_ref();
        self.keyed_transaction(
            dataset_id,
            None,
            write,
            &answer_whole,
            at_ms,
            |mut transaction| async move {
                let result = intents::confirm(&mut transaction, intent).await;
                (transaction, result)
            },
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
        let Some(write) = write else {
            let mut connection = self
                .pool
                .acquire()
                .await
                .map_err(|error| errors::database_error(error, dataset_id))?;
            let abandoning = intents::abandon(
                &mut connection,
                dataset_id,
                operation_id,
                lease_expired_by,
                now_ms,
            );
            return abandoning.await.map(|(intent, _)| intent);
        };
        // Set by the attempt that abandoned it (not one that found it abandoned already).
        let abandoned_now = &AtomicBool::new(false);
        let changed = |intent: &Intent| {
            abandoned_now
                .load(Ordering::Relaxed)
                .then(|| write_audit::answer_of(intent))
        };
        self.keyed_transaction(
            dataset_id,
            None,
            Some(&write),
            &changed,
            now_ms,
            |mut transaction| async move {
                let abandoning = intents::abandon(
                    &mut transaction,
                    dataset_id,
                    operation_id,
                    lease_expired_by,
                    now_ms,
                );
                let result = abandoning
                    .await
                    .map_err(StepError::Failed)
                    .map(|(intent, now)| {
                        abandoned_now.store(now, Ordering::Relaxed);
                        intent
                    });
                (transaction, result)
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
        single_write!(self, dataset_id, write, now_ms, |conn| intents::delete(
            conn,
            dataset_id,
            operation_id
        ))
    }

    async fn list_intents(&self, dataset_id: &str) -> Result<Vec<Intent>> {
        intents::list(&self.pool, dataset_id).await
    }

    async fn intent(&self, dataset_id: &str, operation_id: &str) -> Result<Option<Intent>> {
        intents::find(&self.pool, dataset_id, operation_id).await
    }

    /// One grouped query over the intents table, which is the index: it holds exactly the
    /// intents not yet settled, so every dataset named has intents as of the query, and every
    /// intent committed before it is counted. A crashed writer's intent stays in the table
    /// until recovery settles it. `clear_pending` is the trait's no-op.
    async fn pending_datasets(&self) -> Result<Vec<crate::catalog::PendingDataset>> {
        intents::pending_datasets(&self.pool).await
    }

    async fn settle_intents(
        &self,
        dataset_id: &str,
        settlements: &[Settlement],
        validate: &SettleValidator<'_>,
        now_ms: TimestampMs,
    ) -> Result<Vec<Settled>> {
        crate::catalog::settle::check_batch(dataset_id, settlements)?;
        let write = write_audit::pending(dataset_id, "settle", || {
            settlements.iter().map(Settlement::operation_id)
        });
        let write = write.as_ref();
        self.in_transaction(dataset_id, |mut transaction| async move {
            let result =
                settle::settle(&mut transaction, dataset_id, settlements, validate, now_ms).await;
            let Ok(settled) = result else {
                return (transaction, result);
            };
            let answer = write_audit::settled_answer(&settled);
            let changed = settled.iter().any(|one| !matches!(one, Settled::Gone));
            let write = write.filter(|_| changed);
            let recorded = writes::insert(&mut transaction, write, &answer, now_ms).await;
            (transaction, recorded.map(|()| settled))
        })
        .await
    }

    async fn append_audit(
        &self,
        dataset_id: &str,
        records: &[crate::audit::AuditRecord],
    ) -> Result<()> {
        audit::append(&self.pool, dataset_id, records).await
    }

    async fn list_audit(
        &self,
        dataset_id: &str,
        limit: Option<usize>,
    ) -> Result<Vec<crate::audit::AuditRecord>> {
        audit::list(&self.pool, dataset_id, limit).await
    }

    async fn record_write(&self, record: &write_audit::WriteRecord) -> Result<()> {
        writes::insert_alone(&self.pool, record).await
    }

    async fn list_write_audit(
        &self,
        dataset_id: &str,
        limit: Option<usize>,
    ) -> Result<Vec<write_audit::WriteRecord>> {
        writes::list(&self.pool, dataset_id, limit).await
    }

    /// One query on the index of every dataset's audit rows by time (`audit.rs`).
    async fn list_recent_audit(&self, limit: usize) -> Result<crate::catalog::RecentAudit> {
        audit::recent(&self.pool, limit).await
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
        let write = write.as_ref();
        self.in_transaction(dataset_id, |mut transaction| async move {
            let result = commit::begin(
                &mut transaction,
                dataset_id,
                intent,
                splits,
                planner,
                records,
                now_ms,
            )
            .await;
            let Ok(begun) = result else {
                return (transaction, result);
            };
            let answer = write_audit::begun_answer(&begun);
            let recorded = writes::insert(&mut transaction, write, &answer, now_ms).await;
            (transaction, recorded.map(|()| begun))
        })
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
        crate::catalog::commit::same_dataset(intent, request)?;
        let write = write_audit::pending(&intent.dataset_id, "publish-commit", || {
            write_audit::publish_ids(request)
        });
        let write = write.as_ref();
        self.in_transaction(&intent.dataset_id, |mut transaction| async move {
            let result =
                commit::publish(&mut transaction, intent, request, validate, now_ms, key).await;
            let Ok(published) = result else {
                return (transaction, result);
            };
            let recorded = writes::insert(&mut transaction, write, &published, now_ms).await;
            (transaction, recorded.map(|()| published))
        })
        .await
    }
}

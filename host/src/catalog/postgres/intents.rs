//! Intents: one row per operation in flight, its fields in columns and its plan (effects and
//! expected state) as the compact bytes of [`crate::intent::compact`] (format 3, migration
//! 0009). Rows of formats 1 and 2 hold the whole intent as a JSONB body instead; they are read
//! from it, and written in format 3 by the first update that changes them.
//!
//! Why columns and bytes rather than JSON: a recovery sweep lists every intent of a dataset
//! before it observes anything. Listing 10,000 intents of one split each took 0.08 s as JSONB
//! bodies (Postgres converting each to text, the host parsing about 660 bytes of JSON each),
//! half of a probe's time; as columns and plans it takes about 20 ms, most of it fetching and
//! decoding the rows (docs/src/benchmarks.md has the measurements).
//!
//! Each write is one statement on the pool, atomic by itself, so none runs in a transaction or
//! is retried here: a statement that may have landed fails as `Unavailable`, and the caller
//! decides. The one exception is a confirmation of an operation that publishes ([`confirm`]):
//! it holds the rows its publish needs in the same transaction as its write. No write locks the dataset's row or moves its manifest version; an intent is not
//! part of the published view. When a conditional write changes nothing, a plain read
//! afterwards says why, so the failure path costs a round trip or two and success none.
//!
//! What an intent plans, and when its phase may move, is the engine's business; this module
//! stores what it is given in this host's format and refuses to read a newer one.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{PgConnection, PgPool, Postgres};

use crate::catalog::PendingDataset;
use crate::error::{EntityKind, MendError, Result};
use crate::intent::compact::{decode_plan, encode_plan};
use crate::intent::{
    INTENT_FORMAT_VERSION, Intent, IntentPhase, OperationKind, check_confirmable, check_format,
    check_written_format,
};
use crate::model::{SplitState, TimestampMs};

use super::errors::{StepError, database_error, intent_error};
use super::queries::{self, RowLock};
use super::rows::column;
use super::sql;

/// The first format stored in columns and a compact plan; older rows hold a JSON body.
const COMPACT_FORMAT: u32 = 3;

/// An intent as a format 3 row's columns hold it, ready to bind: what `intent_insert.sql`,
/// `intent_update.sql` and `intent_select_phase.sql` take after the row's key (and the
/// expected phase), in the same order.
pub(super) struct Columns<'a> {
    intent: &'a Intent,
    format_version: i32,
    planned: Vec<u8>,
}

impl<'a> Columns<'a> {
    /// `intent` in this host's format; `InvalidArgument` for a format this host does not know.
    pub(super) fn of(intent: &'a Intent) -> Result<Self> {
        Ok(Self {
            intent,
            format_version: own_format(intent)?,
            planned: encode_plan(&intent.effects, &intent.expected),
        })
    }

    /// Binds the fields after the row's key (and, for an update, the expected phase): phase,
    /// format version, kind, owner, lease, creation and update times, plan.
    fn bind<'q>(
        &'q self,
        query: Query<'q, Postgres, PgArguments>,
    ) -> Query<'q, Postgres, PgArguments> {
        let intent = self.intent;
        query
            .bind(phase_name(intent.phase))
            .bind(self.format_version)
            .bind(intent.kind.as_str())
            .bind(&intent.owner)
            .bind(intent.lease_expires_at_ms)
            .bind(intent.created_at_ms)
            .bind(intent.updated_at_ms)
            .bind(&self.planned)
    }

    /// `intent_insert.sql` for this intent.
    pub(super) fn insert(&self) -> Query<'_, Postgres, PgArguments> {
        self.bind(
            sqlx::query(sql::INTENT_INSERT)
                .bind(&self.intent.dataset_id)
                .bind(&self.intent.operation_id),
        )
    }
}

pub(super) async fn put(conn: &mut PgConnection, intent: &Intent) -> Result<()> {
    Columns::of(intent)?
        .insert()
        .execute(&mut *conn)
        .await
        .map_err(|error| intent_error(error, &intent.dataset_id, &intent.operation_id))?;
    Ok(())
}

/// A confirmation of an operation that plans a publish (`Armed` to `EffectsConfirmed`), in
/// the caller's transaction: the rows it publishes and replaces are locked (in id order, as
/// every writer of split rows locks them), held to
/// [`check_confirmable`](crate::intent::check_confirmable), and only then is the intent
/// written. A row cannot change between the check and the commit, so no operation is
/// confirmed once its publish can no longer land.
pub(super) async fn confirm(conn: &mut PgConnection, intent: &Intent) -> Result<(), StepError> {
    let dataset_id = intent.dataset_id.as_str();
    if let Some(publish) = &intent.effects.publish {
        let ids = crate::catalog::sorted_distinct(
            publish
                .staged_split_ids
                .iter()
                .chain(&publish.replaced_split_ids),
        );
        let rows = queries::split_states(conn, dataset_id, &ids, RowLock::ForUpdate).await?;
        let states: BTreeMap<&str, SplitState> = rows
            .iter()
            .map(|row| (row.split_id.as_str(), row.state))
            .collect();
        check_confirmable(intent, &states)?;
    }
    Ok(update_on(conn, intent, IntentPhase::Armed).await?)
}

/// [`update`] on one connection (a transaction's, for [`confirm`]).
pub(super) async fn update_on(
    conn: &mut PgConnection,
    intent: &Intent,
    expected_phase: IntentPhase,
) -> Result<()> {
    let columns = Columns::of(intent)?;
    let (dataset_id, operation_id) = (&intent.dataset_id, &intent.operation_id);
    let replaced = columns
        .bind(
            sqlx::query(sql::INTENT_UPDATE)
                .bind(dataset_id)
                .bind(operation_id)
                .bind(phase_name(expected_phase)),
        )
        .fetch_optional(&mut *conn)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    if replaced.is_some() {
        return Ok(());
    }

    // Nothing replaced. This read runs after the update, so it sees whatever a concurrent
    // writer committed first; the update took no lock for it to hold.
    let found = columns
        .bind(
            sqlx::query(sql::INTENT_SELECT_PHASE)
                .bind(dataset_id)
                .bind(operation_id),
        )
        .fetch_optional(&mut *conn)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    let Some(row) = found else {
        return Err(intent_not_found(&mut *conn, dataset_id, operation_id).await);
    };
    let phase = stored_phase(&row, operation_id)?;
    let unchanged: bool = column(&row, "unchanged")?;
    if phase != expected_phase {
        Err(MendError::failed_precondition(
            format!(
                "intent {operation_id} of dataset {dataset_id} is {}, not {}; read it again \
                 before changing it",
                phase_name(phase),
                phase_name(expected_phase)
            ),
            vec![operation_id.clone()],
        ))
    } else if unchanged {
        // Already exactly this intent: a replacement that changes nothing writes nothing.
        Ok(())
    } else {
        // In the expected phase as another intent now, yet not updated a moment ago: it was
        // deleted and written again, or moved away and back, between the two statements.
        Err(MendError::Conflict {
            message: format!(
                "intent {operation_id} of dataset {dataset_id} changed while it was being \
                 updated"
            ),
        })
    }
}

/// Moves an `Armed` intent to `Abandoned` in one conditional statement; see
/// [`Catalog::abandon_intent`](crate::catalog::Catalog::abandon_intent). Says too whether
/// this call abandoned it (`false`: it was abandoned already, and nothing was written).
pub(super) async fn abandon(
    conn: &mut PgConnection,
    dataset_id: &str,
    operation_id: &str,
    lease_expired_by: Option<TimestampMs>,
    now_ms: TimestampMs,
) -> Result<(Intent, bool)> {
    let format_version =
        i32::try_from(INTENT_FORMAT_VERSION).expect("format versions are small numbers");
    let abandoned = sqlx::query(sql::INTENT_ABANDON)
        .bind(dataset_id)
        .bind(operation_id)
        .bind(lease_expired_by)
        .bind(format_version)
        .bind(now_ms)
        .fetch_optional(&mut *conn)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    if let Some(row) = abandoned {
        return Ok((intent(&row, dataset_id)?, true));
    }

    // Nothing changed. This read runs after the update, so it sees whatever committed first.
    let found = sqlx::query(sql::INTENT_SELECT)
        .bind(dataset_id)
        .bind(operation_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    let Some(row) = found else {
        return Err(intent_not_found(&mut *conn, dataset_id, operation_id).await);
    };
    let stored = intent(&row, dataset_id)?;
    if !crate::intent::abandonable(&stored, lease_expired_by)? {
        // Already abandoned: the same answer as the first time, nothing written.
        return Ok((stored, false));
    }
    // Armed with its lease run out, yet not abandoned a moment ago: it changed between the
    // two statements (a renewal and a lapse, or a delete and a new intent of the same id).
    Err(MendError::Conflict {
        message: format!(
            "intent {operation_id} of dataset {dataset_id} changed while it was being abandoned"
        ),
    })
}

pub(super) async fn delete(
    conn: &mut PgConnection,
    dataset_id: &str,
    operation_id: &str,
) -> Result<()> {
    let deleted = sqlx::query(sql::INTENT_DELETE)
        .bind(dataset_id)
        .bind(operation_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    match deleted {
        Some(_) => Ok(()),
        None => Err(intent_not_found(&mut *conn, dataset_id, operation_id).await),
    }
}

/// Every intent of the dataset, oldest first (by creation time, then operation id in byte
/// order). Sorted here rather than by the statement: Postgres sorts the whole rows, plans
/// included, which was most of its work (5.5 of 8.6 ms of the statement's execution for 10,000
/// intents), where sorting the decoded intents takes well under a millisecond. Each row is
/// decoded as it arrives, not after all have.
pub(super) async fn list(pool: &PgPool, dataset_id: &str) -> Result<Vec<Intent>> {
    require_dataset(pool, dataset_id).await?;
    listed(
        sqlx::query(sql::INTENT_LIST).bind(dataset_id).fetch(pool),
        dataset_id,
    )
    .await
}

/// The intent of `operation_id`, if the dataset has one; `NotFound` without the dataset.
pub(super) async fn find(
    pool: &PgPool,
    dataset_id: &str,
    operation_id: &str,
) -> Result<Option<Intent>> {
    require_dataset(pool, dataset_id).await?;
    let found = sqlx::query(sql::INTENT_SELECT)
        .bind(dataset_id)
        .bind(operation_id)
        .fetch_optional(pool)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    found.map(|row| intent(&row, dataset_id)).transpose()
}

/// The dataset's intents, read on one connection (a transaction's, which has checked that the
/// dataset exists), oldest first.
pub(super) async fn list_on(conn: &mut PgConnection, dataset_id: &str) -> Result<Vec<Intent>> {
    listed(
        sqlx::query(sql::INTENT_LIST).bind(dataset_id).fetch(conn),
        dataset_id,
    )
    .await
}

/// Decodes and sorts the rows of `intent_list.sql`.
async fn listed(
    mut rows: impl futures::Stream<Item = std::result::Result<PgRow, sqlx::Error>> + Unpin,
    dataset_id: &str,
) -> Result<Vec<Intent>> {
    let mut intents = Vec::new();
    while let Some(row) = rows
        .try_next()
        .await
        .map_err(|error| database_error(error, dataset_id))?
    {
        intents.push(intent(&row, dataset_id)?);
    }
    intents.sort_unstable_by(|a, b| {
        (a.created_at_ms, &a.operation_id).cmp(&(b.created_at_ms, &b.operation_id))
    });
    Ok(intents)
}

/// Every dataset with intents, with how many and their earliest lease: one grouped query
/// (`intent_pending_datasets.sql`) that reads the intents in flight, not the datasets.
pub(super) async fn pending_datasets(pool: &PgPool) -> Result<Vec<PendingDataset>> {
    let found = sqlx::query(sql::INTENT_PENDING_DATASETS)
        .fetch_all(pool)
        .await
        .map_err(|error| database_error(error, "*"))?;
    found
        .iter()
        .map(|row| {
            let count: i64 = column(row, "intents")?;
            Ok(PendingDataset {
                dataset_id: column(row, "dataset_id")?,
                intents: Some(usize::try_from(count).map_err(|_| MendError::Corrupt {
                    message: format!("postgres counted {count} intents of a dataset"),
                })?),
                earliest_lease_expiry_ms: column(row, "earliest_lease_expiry_ms")?,
            })
        })
        .collect()
}

/// Decodes a row of `intent_list.sql` (or of a statement returning the same columns). A row
/// of a newer format fails with the `Corrupt` that tells the operator to upgrade, whatever it
/// holds; a row of format 1 or 2 is read from its body, which `Intent::from_json` checks in
/// turn.
pub(super) fn intent(row: &PgRow, dataset_id: &str) -> Result<Intent> {
    let operation_id: String = column(row, "operation_id")?;
    let phase = stored_phase(row, &operation_id)?;
    let stored_version: i32 = column(row, "format_version")?;
    let format_version = u32::try_from(stored_version).map_err(|_| MendError::Corrupt {
        message: format!("intent {operation_id} has format version {stored_version}"),
    })?;
    check_format(format_version)?;
    if format_version < COMPACT_FORMAT {
        return json_intent(row, dataset_id, operation_id, phase, format_version);
    }
    let kind_name: &str = column(row, "kind")?;
    let kind = OperationKind::parse(kind_name).ok_or_else(|| MendError::Corrupt {
        message: format!("intent {operation_id} has unknown kind {kind_name:?}"),
    })?;
    let (effects, expected) =
        decode_plan(column(row, "planned")?).map_err(|unreadable| MendError::Corrupt {
            message: format!("intent {operation_id} of dataset {dataset_id}: {unreadable}"),
        })?;
    Ok(Intent {
        format_version,
        dataset_id: dataset_id.to_string(),
        kind,
        phase,
        owner: column(row, "owner")?,
        lease_expires_at_ms: column(row, "lease_expires_at_ms")?,
        created_at_ms: column(row, "created_at_ms")?,
        updated_at_ms: column(row, "updated_at_ms")?,
        effects,
        expected,
        operation_id,
    })
}

/// A row of format 1 or 2, whose body holds the whole intent.
fn json_intent(
    row: &PgRow,
    dataset_id: &str,
    operation_id: String,
    phase: IntentPhase,
    format_version: u32,
) -> Result<Intent> {
    let intent = Intent::from_json(&column::<String>(row, "body")?)?;
    // Updates and deletes find the row by its columns and test its phase and format columns;
    // a body that disagrees with them would be changed under the wrong condition.
    if intent.dataset_id != dataset_id
        || intent.operation_id != operation_id
        || intent.phase != phase
        || intent.format_version != format_version
    {
        return Err(MendError::Corrupt {
            message: format!(
                "intent {operation_id} of dataset {dataset_id} in phase {} of format \
                 {format_version} holds a body of intent {} of dataset {} in phase {} of \
                 format {}",
                phase_name(phase),
                intent.operation_id,
                intent.dataset_id,
                phase_name(intent.phase),
                intent.format_version
            ),
        });
    }
    Ok(intent)
}

/// A host writes every intent in its own format (refusing one it does not know); returns the
/// version as the `INT` column stores it.
pub(super) fn own_format(intent: &Intent) -> Result<i32> {
    check_written_format(intent)?;
    Ok(i32::try_from(INTENT_FORMAT_VERSION).expect("format versions are small numbers"))
}

/// The `NotFound` for an intent that is not there: of the dataset if that is gone too, as
/// every other request about a missing dataset says.
async fn intent_not_found<'c>(
    executor: impl sqlx::Executor<'c, Database = Postgres>,
    dataset_id: &str,
    operation_id: &str,
) -> MendError {
    match require_dataset(executor, dataset_id).await {
        Ok(()) => MendError::NotFound {
            kind: EntityKind::Intent,
            ids: vec![operation_id.to_string()],
        },
        Err(error) => error,
    }
}

async fn require_dataset<'c>(
    executor: impl sqlx::Executor<'c, Database = Postgres>,
    dataset_id: &str,
) -> Result<()> {
    let exists: bool = sqlx::query_scalar(sql::DATASET_EXISTS)
        .bind(dataset_id)
        .fetch_one(executor)
        .await
        .map_err(|error| database_error(error, dataset_id))?;
    if exists {
        Ok(())
    } else {
        Err(MendError::dataset_not_found(dataset_id))
    }
}

/// The name of a phase in the `phase` column, as its CHECK constraint lists them.
pub(super) fn phase_name(phase: IntentPhase) -> &'static str {
    match phase {
        IntentPhase::Armed => "armed",
        IntentPhase::EffectsConfirmed => "effects_confirmed",
        IntentPhase::Abandoned => "abandoned",
    }
}

pub(super) fn stored_phase(row: &PgRow, operation_id: &str) -> Result<IntentPhase> {
    let name: String = column(row, "phase")?;
    match name.as_str() {
        "armed" => Ok(IntentPhase::Armed),
        "effects_confirmed" => Ok(IntentPhase::EffectsConfirmed),
        "abandoned" => Ok(IntentPhase::Abandoned),
        _ => Err(MendError::Corrupt {
            message: format!("intent {operation_id} has unknown phase {name:?}"),
        }),
    }
}

//! How Postgres failures become [`MendError`]s: the one place that reads SQLSTATE codes.
//!
//! Inside the backend a step fails with a [`StepError`], which keeps the raw `sqlx::Error` so
//! that the retry loop can tell "a concurrent writer got in the way, run it again" from
//! everything else; only then is it mapped, with the dataset id the request named.

use sqlx::migrate::MigrateError;

use crate::error::{EntityKind, MendError};

/// Serialization failure: the transaction certainly aborted and may simply be run again.
const SERIALIZATION_FAILURE: &str = "40001";
/// Deadlock detected: Postgres aborted this transaction to let another one through.
const DEADLOCK_DETECTED: &str = "40P01";
const UNIQUE_VIOLATION: &str = "23505";
const FOREIGN_KEY_VIOLATION: &str = "23503";
/// The primary keys of `datasets` and `intents`, named by Postgres' default convention.
const DATASETS_PRIMARY_KEY: &str = "datasets_pkey";
const INTENTS_PRIMARY_KEY: &str = "intents_pkey";

/// Why one attempt at an atomic step failed.
#[derive(Debug)]
pub(super) enum StepError {
    /// A statement failed; mapped by [`StepError::resolve`] once the step is over.
    Database(sqlx::Error),
    /// A concurrent writer got in the way and this attempt certainly wrote nothing: run the
    /// whole step again, from its first read.
    Raced(String),
    /// A stage wrote what the mode presumes, and the planner, asked on what that write
    /// observed, planned something else: roll it back and run the stage again, reading before
    /// it writes (`stage.rs`).
    PlanDiffers,
    /// The step failed for a reason that running it again will not fix.
    Failed(MendError),
}

/// What the retry loop does with a failed attempt.
#[derive(Debug)]
pub(super) enum Resolution {
    Retry(String),
    Fail(MendError),
}

impl StepError {
    pub(super) fn corrupt(message: impl Into<String>) -> Self {
        Self::Failed(MendError::Corrupt {
            message: message.into(),
        })
    }

    pub(super) fn resolve(self, dataset_id: &str) -> Resolution {
        match self {
            Self::Database(error) if is_transient_abort(&error) => {
                Resolution::Retry(error.to_string())
            }
            Self::Database(error) => Resolution::Fail(database_error(error, dataset_id)),
            Self::Raced(reason) => Resolution::Retry(reason),
            Self::PlanDiffers => Resolution::Retry(
                "the policy planned otherwise than the stage presumed; staged again reading first"
                    .to_string(),
            ),
            Self::Failed(error) => Resolution::Fail(error),
        }
    }
}

impl From<sqlx::Error> for StepError {
    fn from(error: sqlx::Error) -> Self {
        Self::Database(error)
    }
}

impl From<MendError> for StepError {
    fn from(error: MendError) -> Self {
        Self::Failed(error)
    }
}

/// A deadlock or serialization failure: Postgres rolled the transaction back, so nothing of
/// it happened and running it again is safe.
fn is_transient_abort(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(database) => database
            .code()
            .is_some_and(|code| matches!(code.as_ref(), SERIALIZATION_FAILURE | DEADLOCK_DETECTED)),
        _ => false,
    }
}

/// Maps a failed statement of a request about `dataset_id`.
pub(super) fn database_error(error: sqlx::Error, dataset_id: &str) -> MendError {
    match &error {
        sqlx::Error::Database(database) => match database.code().as_deref() {
            Some(SERIALIZATION_FAILURE | DEADLOCK_DETECTED) => MendError::Conflict {
                message: format!("postgres aborted the transaction: {}", database.message()),
            },
            Some(UNIQUE_VIOLATION) if database.constraint() == Some(DATASETS_PRIMARY_KEY) => {
                MendError::AlreadyExists {
                    kind: EntityKind::Dataset,
                    id: dataset_id.to_string(),
                }
            }
            // Every foreign key (splits, intents, audit) references datasets: the dataset is gone.
            Some(FOREIGN_KEY_VIOLATION) => MendError::dataset_not_found(dataset_id),
            _ => unavailable(error),
        },
        sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::TypeNotFound { .. } => MendError::Corrupt {
            message: format!("cannot decode a catalog row of dataset {dataset_id}: {error}"),
        },
        _ => unavailable(error),
    }
}

/// Maps a failed statement writing intent `operation_id` of `dataset_id`. A taken primary key
/// names the operation, which [`database_error`] does not know.
pub(super) fn intent_error(error: sqlx::Error, dataset_id: &str, operation_id: &str) -> MendError {
    if let sqlx::Error::Database(database) = &error
        && database.code().as_deref() == Some(UNIQUE_VIOLATION)
        && database.constraint() == Some(INTENTS_PRIMARY_KEY)
    {
        return MendError::AlreadyExists {
            kind: EntityKind::Intent,
            id: operation_id.to_string(),
        };
    }
    database_error(error, dataset_id)
}

/// Whether a statement failed because the operation id of the intent it inserted is taken.
pub(super) fn is_intent_taken(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(database)
        if database.code().as_deref() == Some(UNIQUE_VIOLATION)
            && database.constraint() == Some(INTENTS_PRIMARY_KEY))
}

fn unavailable(error: sqlx::Error) -> MendError {
    MendError::unavailable(format!("postgres: {error}"), error)
}

/// An error returned by COMMIT: the commit may or may not have reached the disk.
pub(super) fn commit_error(error: sqlx::Error) -> StepError {
    StepError::Failed(MendError::unavailable(
        format!("postgres commit failed, the transaction may have been applied: {error}"),
        error,
    ))
}

/// Failing to open the pool. `target` is host:port/database, never the credentials.
pub(super) fn connect_error(error: sqlx::Error, target: &str) -> MendError {
    MendError::unavailable(
        format!("cannot connect to postgres at {target}: {error}"),
        error,
    )
}

/// Failing to bring the schema up to date.
pub(super) fn migrate_error(error: MigrateError, target: &str) -> MendError {
    match error {
        MigrateError::VersionMissing(version) => MendError::Corrupt {
            message: format!(
                "the catalog at {target} has migration {version}, which this mend does not \
                 know: it was migrated by a newer mend; run that version instead"
            ),
        },
        MigrateError::VersionMismatch(version) => MendError::Corrupt {
            message: format!(
                "migration {version} of the catalog at {target} differs from the one this mend \
                 embeds; an operator must compare the schema"
            ),
        },
        MigrateError::Dirty(version) => MendError::Corrupt {
            message: format!("migration {version} of the catalog at {target} is partly applied"),
        },
        other => MendError::unavailable(
            format!("cannot migrate the catalog at {target}: {other}"),
            other,
        ),
    }
}

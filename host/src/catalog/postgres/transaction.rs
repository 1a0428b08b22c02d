//! Running a step in a transaction: committed if it succeeds, rolled back if it fails, run again
//! when a concurrent writer got in the way; keyed steps answer their recorded result.

use std::future::Future;
use std::time::Duration;

use crate::catalog::write_audit::{self, PendingWrite};
use crate::catalog::{RecordedRequest, RequestKey};
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

use super::errors::{Resolution, StepError, commit_error};

use super::{MAX_ATTEMPTS, PgTransaction, PostgresCatalog, recorded, writes};

impl PostgresCatalog {
    /// Runs `step` in a transaction, committed if it succeeds and rolled back if it fails; runs
    /// it again, in a new transaction, when a concurrent writer got in the way.
    ///
    /// `step` gets the transaction and hands it back with its result, so that this one place
    /// decides between commit and rollback.
    pub(super) async fn in_transaction<T, F, Fut>(&self, dataset_id: &str, mut step: F) -> Result<T>
    where
        F: FnMut(PgTransaction) -> Fut,
        Fut: Future<Output = (PgTransaction, Result<T, StepError>)>,
    {
        let mut last_reason = String::new();
        for attempt in 0..MAX_ATTEMPTS {
            if attempt > 0 {
                // Deadlock victims that retry at once tend to meet again; a short, growing
                // pause lets the winner finish first.
                tokio::time::sleep(Duration::from_millis(u64::from(attempt) * 2)).await;
            }
            let outcome = match self.pool.begin().await {
                Ok(transaction) => {
                    let (transaction, result) = step(transaction).await;
                    finish(transaction, result).await
                }
                Err(error) => Err(StepError::Database(error)),
            };
            match outcome.map_err(|error| error.resolve(dataset_id)) {
                Ok(value) => return Ok(value),
                Err(Resolution::Fail(error)) => return Err(error),
                Err(Resolution::Retry(reason)) => last_reason = reason,
            }
        }
        Err(MendError::Conflict {
            message: format!(
                "concurrent writers on dataset {dataset_id} aborted this request \
                 {MAX_ATTEMPTS} times; last: {last_reason}"
            ),
        })
    }

    /// Runs `step` in a transaction ([`Self::in_transaction`]); with a `key`, one that first
    /// locks and reads the record of `key`: a recorded key answers its recorded result and
    /// `step` does not run; otherwise `step`'s result is recorded in the same transaction as
    /// its effect, and so is the record of the write (`write`, [`write_audit`]) if `changed`
    /// says the step changed anything: a step that changes nothing records nothing, as on
    /// every backend.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn keyed_transaction<T, F, Fut>(
        &self,
        dataset_id: &str,
        key: Option<&RequestKey>,
        write: Option<&PendingWrite>,
        answer: &(dyn Fn(&T) -> Option<serde_json::Value> + Sync),
        now_ms: TimestampMs,
        step: F,
    ) -> Result<T>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
        F: Fn(PgTransaction) -> Fut,
        Fut: Future<Output = (PgTransaction, Result<T, StepError>)>,
    {
        if key.is_none() && write.is_none() {
            return self.in_transaction(dataset_id, step).await;
        }
        let step = &step;
        self.in_transaction(dataset_id, move |mut transaction| async move {
            if let Some(key) = key {
                match recorded::lock_and_find(&mut transaction, dataset_id, &key.key).await {
                    Err(error) => return (transaction, Err(error)),
                    Ok(Some(found)) => {
                        return (transaction, found.replay(key).map_err(StepError::Failed));
                    }
                    Ok(None) => {}
                }
            }
            let (mut transaction, result) = step(transaction).await;
            let value = match result {
                Ok(value) => value,
                Err(error) => return (transaction, Err(error)),
            };
            if let Some(key) = key {
                let record = RecordedRequest::new(key, &value, now_ms);
                if let Err(error) = recorded::insert(&mut transaction, dataset_id, &record).await {
                    return (transaction, Err(error));
                }
            }
            let recorded = match write.zip(answer(&value)) {
                Some((write, answer)) => {
                    writes::insert(&mut transaction, Some(write), &answer, now_ms).await
                }
                None => Ok(()),
            };
            (transaction, recorded.map(|()| value))
        })
        .await
    }
}

/// Commits the transaction if `result` is a success and rolls it back otherwise.
pub(super) async fn finish<T>(
    transaction: PgTransaction,
    result: Result<T, StepError>,
) -> Result<T, StepError> {
    match result {
        Ok(value) => {
            transaction.commit().await.map_err(commit_error)?;
            Ok(value)
        }
        Err(error) => {
            // A rollback that fails leaves nothing behind either: nothing was committed, and
            // the server aborts the transaction when its connection goes. The step's error is
            // the one that says what happened.
            let _ = transaction.rollback().await;
            Err(error)
        }
    }
}

/// A step's whole answer as its write record keeps it: for a step that always changes what
/// it succeeds on.
pub(super) fn answer_whole<T: serde::Serialize>(value: &T) -> Option<serde_json::Value> {
    Some(write_audit::answer_of(value))
}

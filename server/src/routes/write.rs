//! What every write route runs through: the dataset's health, admission among the writes in
//! flight, the idempotency key's record, no unresolved operation in the way; and the key
//! itself, read from the `Idempotency-Key` header.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use mend::error::MendError;

use crate::Shared;
use crate::access::Caller;
use crate::error::{ApiError, ErrorCode, engine_error};
use crate::metrics::Shed;
use crate::writes::{Refused, WriteTicket, Writes};

/// Refuses requests for a dataset its supervisor found it cannot serve.
pub(super) fn served(shared: &Shared, dataset_id: &str) -> Result<(), ApiError> {
    match shared.supervisors.health(dataset_id) {
        Some(health) => match health.unavailable {
            Some(reason) => Err(ApiError::dataset_unavailable(dataset_id, &reason)),
            None => Ok(()),
        },
        None => Ok(()),
    }
}

/// A ticket for one write on `dataset_id` (`None`: on the whole deployment), or 503 when
/// the server is shutting down or has as many writes queued as it takes.
pub(super) fn admit(shared: &Shared, dataset_id: Option<&str>) -> Result<WriteTicket, ApiError> {
    let ticket = shared.writes.admit(dataset_id).map_err(|refused| {
        shared.metrics.shed(match refused {
            Refused::ShuttingDown => Shed::ShuttingDown,
            Refused::DatasetFull { .. } => Shed::DatasetWrites,
            Refused::ServerFull { .. } => Shed::ServerWrites,
        });
        ApiError::refused(refused)
    })?;
    // The write holds its request's slot among the principal's writes until it ends.
    Ok(ticket.holding(crate::access::answering().and_then(|answering| answering.slot)))
}

/// Admits a write on `dataset_id` and runs it to its end, whatever becomes of the request.
/// With `in_the_way`, the write first waits for no unresolved operation naming those splits.
pub(super) async fn write<T, F>(
    shared: &Arc<Shared>,
    dataset_id: &str,
    in_the_way: Option<&[String]>,
    write: F,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: Future<Output = mend::Result<T>> + Send + 'static,
{
    keyed_write(shared, dataset_id, None, in_the_way, write)
        .await
        .map(|(answer, _)| answer)
}

/// [`write`] of a request under idempotency key `key`, answering also whether the key was
/// recorded when the write was admitted: the answer is then a replay, which the metrics do
/// not count as a new decision. A recorded key is answered by the engine before anything
/// else, so the check for an unresolved operation in the way is skipped for it (a retry of a
/// request that landed answers what it answered, even if an operation began on the same
/// splits since).
pub(super) async fn keyed_write<T, F>(
    shared: &Arc<Shared>,
    dataset_id: &str,
    key: Option<&str>,
    in_the_way: Option<&[String]>,
    write: F,
) -> Result<(T, bool), ApiError>
where
    T: Send + 'static,
    F: Future<Output = mend::Result<T>> + Send + 'static,
{
    served(shared, dataset_id)?;
    // Admitted before anything is read, so that a flood costs no more than its refusals.
    let ticket = admit(shared, Some(dataset_id))?;
    let replayed = recorded_before(shared, dataset_id, key).await?;
    if let Some(ids) = in_the_way
        && !replayed
    {
        not_in_doubt(shared, dataset_id, ids).await?;
    }
    Writes::run(ticket, write)
        .await
        .map(|answer| (answer, replayed))
        .map_err(|error| engine_error(shared, dataset_id, error))
}

/// Whether `key` is recorded in the dataset: a request under it is answered by its record.
/// (A copy of the request running at the same time may still record it after this look;
/// its metrics then count twice, which is all that this look is for.)
pub(super) async fn recorded_before(
    shared: &Arc<Shared>,
    dataset_id: &str,
    key: Option<&str>,
) -> Result<bool, ApiError> {
    let Some(key) = key else {
        return Ok(false);
    };
    match shared
        .engine
        .catalog()
        .recorded_request(dataset_id, key)
        .await
    {
        Ok(found) => Ok(found.is_some()),
        // The engine answers for a dataset that does not exist (yet, for a create).
        Err(MendError::NotFound { .. }) => Ok(false),
        Err(error) => Err(engine_error(shared, dataset_id, error)),
    }
}

/// Fails with `RecoveryRequired` when an unresolved operation names one of `ids`: the write
/// waits for the supervisor instead of resolving it inline.
pub(super) async fn not_in_doubt(
    shared: &Arc<Shared>,
    dataset_id: &str,
    ids: &[String],
) -> Result<(), ApiError> {
    match mend::live::operation_in_the_way(&shared.engine, dataset_id, ids).await {
        Ok(None) => Ok(()),
        Ok(Some(operation_id)) => Err(engine_error(
            shared,
            dataset_id,
            MendError::RecoveryRequired { operation_id },
        )),
        Err(error) => Err(engine_error(shared, dataset_id, error)),
    }
}

/// A request's `Idempotency-Key` (absent: `None`), as its record is kept: under the name of
/// the principal that sent it ([`Caller::recorded_key`]), so that one principal's key never
/// answers another's request. A key that is not visible ASCII, or not a valid key, is 400.
pub(super) struct ClientKey(pub(super) Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for ClientKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let Some(value) = parts.headers.get("idempotency-key") else {
            return Ok(Self(None));
        };
        let key = value.to_str().map_err(|_| {
            ApiError::bad_request("the Idempotency-Key header is not visible ASCII")
        })?;
        // The client's key alone: recorded under a principal's name, a key starting `op:`
        // would no longer look like one of mend's own.
        mend::validate::name("idempotency key", key)
            .and_then(|()| mend::validate::idempotency_key(key))
            .map_err(|error| ApiError::bad_request(error.to_string()))?;
        let caller = parts.extensions.get::<Caller>().ok_or_else(|| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::Internal,
                "the request has no principal: its route skipped the access check",
            )
        })?;
        Ok(Self(Some(caller.recorded_key(key.to_owned()))))
    }
}

//! Requests under an idempotency key: every mutating request can carry one, and a retry of a
//! request that took effect answers exactly what the first answered, never "already exists",
//! "not found" or "not staged".
//!
//! A mutating call returns a [`Keyed`] request: `.await` runs it without a key, and
//! `.idempotency_key(key)` first sets the client's key (`Idempotency-Key` over HTTP,
//! `--idempotency-key` on the command line; [`validate::idempotency_key`] refuses a bad one,
//! and keys starting with `op:` are mend's own). The key is part of the request, so a caller
//! holding an optional key passes it as it is, never branching on it:
//!
//! ```no_run
//! # async fn example(engine: &mend::Engine, request: &mend::model::StageRequest, key: Option<&str>) -> mend::Result<()> {
//! let staged = engine.stage(request).idempotency_key(key).await?;
//! # Ok(()) }
//! ```
//!
//! The key is bound to the request by a [`RequestKey`] digest over what the client asked: the
//! kind of request and its inputs as given, never anything mend generated (a new dataset's
//! uid, an operation id). The same key with another request is refused with
//! `InvalidArgument` naming the key. Records ("recorded requests") are kept per dataset and
//! forgotten by gc after [`RECORDED_REQUEST_RETENTION_MS`](super::RECORDED_REQUEST_RETENTION_MS).
//!
//! A recorded key is looked up before anything is read or checked against the current state:
//! a delete retried after its rows went answers its first result, not `NotFound`.
//!
//! | request | digest over | recorded |
//! |---|---|---|
//! | create dataset | `("create_dataset", id, config)` | in the new dataset, in its creation step ([`Catalog::create_dataset`](crate::catalog::Catalog::create_dataset)) |
//! | stage, publish | `("stage", request)`, `("publish", request)` | in the step of the effect |
//! | set publish token | `("set_publish_token", id, token)` | in the step of the effect |
//! | mark, delete | `("mark", id, split ids)`, `("delete", id, split ids)` | in the step of the effect; a delete's objects go first, its rows' step records |
//! | config apply | `("promote", expected version, config)` under `op:<operation id>:promote` | in the promotion's step, whoever promotes (see `config_apply.rs`) |
//! | gc, reconcile | `("gc", id, node)`, `("reconcile", id, node)` | when the run ends ([`Catalog::record_request`](crate::catalog::Catalog::record_request)) |
//! | recover | `("recover", id, mode)` | when the run ends; probe and verify are reads and record nothing |
//! | policy swap, rollback | see `policy_swap.rs` | in the registry record that is the swap |
//!
//! **Several steps, one record at the end.** gc, reconcile and a roll-forward or exclusive
//! recovery have many durable effects, each atomic on its own; their report is recorded with
//! a put-if-absent when the run ends, and a run that lost a race to record answers the record
//! kept. The gap, said plainly: if mend dies after the effects and before the record, the
//! retry runs again and reports what it finds then (for gc, nothing left to collect). That is
//! safe, because these runs decide from what they find and every step of theirs is safe to
//! repeat; it is not the first answer, which was never delivered. A probe or verify recovery
//! writes nothing at all (invariant 6), so a key on one is accepted, checked for form, and
//! not recorded: a read needs no record to be retried.

use std::future::{Future, IntoFuture};

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Engine;
use crate::catalog::write_audit::{self, WriteScope};
use crate::catalog::{RecordedRequest, RequestKey};
use crate::error::Result;
use crate::validate;

/// A mutating request to the engine and the idempotency key it may carry (none unless
/// [`idempotency_key`](Self::idempotency_key) sets one). It does nothing until awaited.
///
/// Every mutating call of [`Engine`] answers one: the key is a field of the request, not a
/// second method.
///
/// It is an [`IntoFuture`]: `.await` takes it as it is, and where a [`Future`] is wanted
/// (`Runtime::block_on`, `futures::future::join_all`) `.into_future()` makes one.
#[must_use = "a request does nothing until it is awaited"]
pub struct Keyed<'a, T> {
    idempotency_key: Option<&'a str>,
    /// Who is asking and for what: every write the request makes is recorded as this
    /// ([`write_audit`]).
    scope: WriteScope,
    run: Box<dyn FnOnce(Option<&'a str>) -> BoxFuture<'a, Result<T>> + Send + 'a>,
}

impl<T> std::fmt::Debug for Keyed<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyed")
            .field("idempotency_key", &self.idempotency_key)
            .finish_non_exhaustive()
    }
}

impl<'a, T: 'a> Keyed<'a, T> {
    /// The request that `run` carries out, given the key it was sent under (if any), its
    /// writes recorded as `scope`'s.
    pub(crate) fn new<Run, Running>(scope: WriteScope, run: Run) -> Self
    where
        Run: FnOnce(Option<&'a str>) -> Running + Send + 'a,
        Running: Future<Output = Result<T>> + Send + 'a,
    {
        Keyed {
            idempotency_key: None,
            scope,
            run: Box::new(move |key| Box::pin(run(key))),
        }
    }

    /// Sends the request under `key` (`None`: without one). A bad key is refused with
    /// `InvalidArgument` when the request runs, before anything is read.
    pub fn idempotency_key(mut self, key: impl Into<Option<&'a str>>) -> Self {
        self.idempotency_key = key.into();
        self
    }
}

impl<'a, T: 'a> IntoFuture for Keyed<'a, T> {
    type Output = Result<T>;
    // Boxed so that the request is one type whatever its operation: one allocation next to
    // at least one catalog round trip.
    type IntoFuture = BoxFuture<'a, Result<T>>;

    fn into_future(self) -> Self::IntoFuture {
        let Some(key) = self.idempotency_key else {
            return Box::pin(write_audit::within(self.scope, (self.run)(None)));
        };
        let span = tracing::info_span!("keyed", idempotency_key = %key);
        let run = write_audit::within(self.scope, (self.run)(Some(key)));
        Box::pin(tracing::Instrument::instrument(run, span))
    }
}

/// The record key of a client's `idempotency_key` for `request` (what the client asked: the
/// kind of request and its inputs), the key's form checked first; `None` without a key.
pub(super) fn request_key(
    idempotency_key: Option<&str>,
    request: &impl Serialize,
) -> Result<Option<RequestKey>> {
    idempotency_key
        .map(|key| {
            validate::idempotency_key(key)?;
            Ok(RequestKey::new(key, request))
        })
        .transpose()
}

impl Engine {
    /// The scope of a request of `kind` made by this engine's actor ([`write_audit`]).
    pub(super) fn write_scope(&self, kind: &str) -> WriteScope {
        WriteScope {
            principal: self.actor().map(str::to_owned),
            kind: kind.to_owned(),
            operation_id: None,
        }
    }

    /// Runs `write` as a request of `kind` about `operation_id`: its writes are recorded as
    /// this engine's actor's ([`write_audit`]).
    pub(super) fn writing<F: Future>(
        &self,
        kind: &str,
        operation_id: Option<&str>,
        write: F,
    ) -> impl Future<Output = F::Output> + use<F> {
        let scope = WriteScope {
            operation_id: operation_id.map(str::to_owned),
            ..self.write_scope(kind)
        };
        write_audit::within(scope, write)
    }

    /// Records, in a step of its own, a write of the current request that no catalog step
    /// made: `step` on `ids` in the object storage of splits, which answered `answer`
    /// ([`Catalog::record_write`](crate::catalog::Catalog::record_write)). Nothing outside a
    /// request's scope.
    pub(super) async fn record_object_write<'i>(
        &self,
        dataset_id: &str,
        step: &'static str,
        ids: impl IntoIterator<Item = &'i str>,
        answer: &impl Serialize,
    ) -> Result<()> {
        let Some(write) = write_audit::pending(dataset_id, step, || ids) else {
            return Ok(());
        };
        self.catalog
            .record_write(&write.answered(answer, self.now_ms()))
            .await
    }

    /// The answer recorded under `key` in the dataset, if `key` is given and recorded; a key
    /// recorded for another request is refused ([`RecordedRequest::replay`]).
    pub(super) async fn recorded_answer<T: DeserializeOwned>(
        &self,
        dataset_id: &str,
        key: Option<&RequestKey>,
    ) -> Result<Option<T>> {
        let Some(key) = key else {
            return Ok(None);
        };
        match self.catalog.recorded_request(dataset_id, &key.key).await? {
            Some(found) => found.replay(key).map(Some),
            None => Ok(None),
        }
    }

    /// A run of several steps under `key`: the recorded answer if there is one; otherwise the
    /// run (without a key: just the run), whose answer is recorded when it ends (put-if-absent: of two runs racing, both
    /// answer the record kept). A run that fails records nothing.
    pub(super) async fn run_recorded<T: Serialize + DeserializeOwned>(
        &self,
        dataset_id: &str,
        key: Option<&RequestKey>,
        run: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let Some(key) = key else {
            return run.await;
        };
        if let Some(answer) = self.recorded_answer(dataset_id, Some(key)).await? {
            tracing::debug!("answered from the record of the first request under its key");
            return Ok(answer);
        }
        let answer = run.await?;
        let record = RecordedRequest::new(key, &answer, self.now_ms());
        self.catalog
            .record_request(dataset_id, &record)
            .await?
            .replay(key)
    }
}

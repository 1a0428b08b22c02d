//! Requests under an idempotency key: every mutating request can carry one, and a retry of a
//! request that took effect answers exactly what the first answered, never "already exists",
//! "not found" or "not staged".
//!
//! Each `*_recorded` method takes the client's key (`Idempotency-Key` over HTTP,
//! `--idempotency-key` on the command line; [`validate::idempotency_key`] refuses a bad one,
//! and keys starting with `op:` are mend's own) and binds it to the request by a
//! [`RequestKey`] digest over what the client asked: the kind of request and its inputs as
//! given, never anything mend generated (a new dataset's uid, an operation id). The same key
//! with another request is refused with `InvalidArgument` naming the key. Records are kept per
//! dataset and forgotten by gc after [`RECORDED_REQUEST_RETENTION_MS`](super::RECORDED_REQUEST_RETENTION_MS).
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

use serde::Serialize;
use serde::de::DeserializeOwned;

use mend_policy::RecoveryMode;

use super::{Engine, GcResult, ReconcileReport, RecoveryReport};
use crate::catalog::{RecordedRequest, RequestKey};
use crate::error::Result;
use crate::model::{
    Dataset, DatasetConfig, MarkResult, PublishRequest, PublishResult, StageRequest, StageResult,
};
use crate::validate;

impl Engine {
    /// [`create_dataset`](Self::create_dataset) under an idempotency key: the record lives in
    /// the new dataset, written with it, so a retry of a creation that landed answers the
    /// created dataset (the same uid) instead of `AlreadyExists`. A dataset that exists
    /// without this key recorded is still `AlreadyExists`.
    pub async fn create_dataset_recorded(
        &self,
        dataset_id: &str,
        config: &DatasetConfig,
        idempotency_key: &str,
    ) -> Result<Dataset> {
        validate::idempotency_key(idempotency_key)?;
        let key = RequestKey::new(idempotency_key, &("create_dataset", dataset_id, config));
        self.create_dataset_keyed(dataset_id, config, Some(&key))
            .await
    }

    /// [`stage`](Self::stage) under an idempotency key: the result is recorded with the
    /// effect, and a retry with the same key answers it again without staging anything
    /// ([`crate::catalog::recorded`]).
    pub async fn stage_recorded(
        &self,
        request: &StageRequest,
        idempotency_key: &str,
    ) -> Result<StageResult> {
        validate::idempotency_key(idempotency_key)?;
        let key = RequestKey::new(idempotency_key, &("stage", request));
        self.stage_keyed(request, Some(&key)).await
    }

    /// [`publish`](Self::publish) under an idempotency key: the result is recorded in the
    /// publish's own atomic step, and a retry with the same key answers it again (the same
    /// manifest version, the same ids) instead of being refused because its splits are no
    /// longer staged ([`crate::catalog::recorded`]).
    pub async fn publish_recorded(
        &self,
        request: &PublishRequest,
        idempotency_key: &str,
    ) -> Result<PublishResult> {
        validate::idempotency_key(idempotency_key)?;
        let key = RequestKey::new(idempotency_key, &("publish", request));
        self.publish_keyed(request, Some(&key)).await
    }

    /// [`set_publish_token`](Self::set_publish_token) under an idempotency key.
    pub async fn set_publish_token_recorded(
        &self,
        dataset_id: &str,
        publish_token: Option<&str>,
        idempotency_key: &str,
    ) -> Result<Dataset> {
        validate::idempotency_key(idempotency_key)?;
        let key = RequestKey::new(
            idempotency_key,
            &("set_publish_token", dataset_id, publish_token),
        );
        self.set_publish_token_keyed(dataset_id, publish_token, Some(&key))
            .await
    }

    /// [`mark_for_deletion`](Self::mark_for_deletion) under an idempotency key: a retry
    /// answers the first result (the ids it marked), not "already marked".
    pub async fn mark_for_deletion_recorded(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        idempotency_key: &str,
    ) -> Result<MarkResult> {
        validate::idempotency_key(idempotency_key)?;
        let key = RequestKey::new(idempotency_key, &("mark", dataset_id, split_ids));
        self.mark_for_deletion_keyed(dataset_id, split_ids, Some(&key))
            .await
    }

    /// [`delete_splits`](Self::delete_splits) under an idempotency key: the objects go first,
    /// then the rows in one atomic step that records the result, so a retry after the rows
    /// went answers success instead of `NotFound`. A crash between the objects and the rows
    /// leaves no record: the retry deletes again (the objects are gone already, the rows go).
    pub async fn delete_splits_recorded(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        idempotency_key: &str,
    ) -> Result<()> {
        validate::idempotency_key(idempotency_key)?;
        let key = RequestKey::new(idempotency_key, &("delete", dataset_id, split_ids));
        self.delete_splits_keyed(dataset_id, split_ids, Some(&key))
            .await
    }

    /// [`gc`](Self::gc) under an idempotency key: a retry of a run that ended answers its
    /// report; see the module doc for the gap between its effects and its record.
    #[tracing::instrument(skip_all, fields(dataset_id = %dataset_id, idempotency_key = %idempotency_key))]
    pub async fn gc_recorded(
        &self,
        dataset_id: &str,
        node: &str,
        idempotency_key: &str,
    ) -> Result<GcResult> {
        validate::idempotency_key(idempotency_key)?;
        validate::dataset_id(dataset_id)?;
        validate::node(node)?;
        let key = RequestKey::new(idempotency_key, &("gc", dataset_id, node));
        self.run_recorded(dataset_id, &key, self.gc(dataset_id, node))
            .await
    }

    /// [`reconcile`](Self::reconcile) under an idempotency key: a retry of a run that ended
    /// answers its report; see the module doc for the gap between its effects and its record.
    #[tracing::instrument(skip_all, fields(dataset_id = %dataset_id, idempotency_key = %idempotency_key))]
    pub async fn reconcile_recorded(
        &self,
        dataset_id: &str,
        node: &str,
        idempotency_key: &str,
    ) -> Result<ReconcileReport> {
        validate::idempotency_key(idempotency_key)?;
        validate::dataset_id(dataset_id)?;
        validate::node(node)?;
        let key = RequestKey::new(idempotency_key, &("reconcile", dataset_id, node));
        self.run_recorded(dataset_id, &key, self.reconcile(dataset_id, node))
            .await
    }

    /// [`recover`](Self::recover) under an idempotency key. A roll-forward or exclusive sweep
    /// records its report when it ends, and a retry answers it (an exclusive one does not
    /// fence writers a second time). Probe and verify write nothing, not even a record
    /// (invariant 6): the key is checked and the read simply runs again.
    #[tracing::instrument(skip_all, fields(dataset_id = %dataset_id, idempotency_key = %idempotency_key))]
    pub async fn recover_recorded(
        &self,
        dataset_id: &str,
        mode: RecoveryMode,
        idempotency_key: &str,
    ) -> Result<RecoveryReport> {
        validate::idempotency_key(idempotency_key)?;
        validate::dataset_id(dataset_id)?;
        match mode {
            RecoveryMode::Probe | RecoveryMode::Verify => self.recover(dataset_id, mode).await,
            RecoveryMode::RollForward | RecoveryMode::Exclusive => {
                let key = RequestKey::new(idempotency_key, &("recover", dataset_id, mode));
                self.run_recorded(dataset_id, &key, self.recover(dataset_id, mode))
                    .await
            }
        }
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
    /// run, whose answer is recorded when it ends (put-if-absent: of two runs racing, both
    /// answer the record kept). A run that fails records nothing.
    async fn run_recorded<T: Serialize + DeserializeOwned>(
        &self,
        dataset_id: &str,
        key: &RequestKey,
        run: impl Future<Output = Result<T>>,
    ) -> Result<T> {
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

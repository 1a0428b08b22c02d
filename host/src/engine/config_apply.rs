//! Config apply: a new dataset config is staged, then promoted.
//!
//! 1. write the intent (`Armed`): the staged config and the config version it replaces;
//! 2. promote it: one conditional write that succeeds only while the dataset is still at
//!    that version;
//! 3. delete the intent.
//!
//! The staged config lives in the intent, in the catalog, so a crash after step 1 leaves
//! everything recovery needs: it promotes the config while the expected version still stands
//! (roll forward), recognises a promotion that happened (stale), and otherwise, because
//! another change was promoted first, blocks in roll-forward mode and drops the intent in
//! exclusive mode (nothing was changed, so there is nothing to undo).
//!
//! **Every promotion is recorded**, whoever runs it (the apply itself, or recovery rolling
//! it forward): under `op:<operation id>:promote`, with a digest over the expected config
//! version and the config, in the promotion's own atomic step. So the answer of an apply
//! that landed is kept even when its caller never heard it.
//!
//! **An apply under an idempotency key** ([`Engine::apply_config`] with a [`Keyed`] key) takes its
//! operation id from the key: `config-` and the first 40 hex digits of the key's sha256 (ids
//! share the split ids' alphabet). A retry of it, under the config gate, answers:
//!
//! - the promotion recorded for that operation (the digest checked: another config or
//!   another expected version with the same key is `InvalidArgument`), whether the apply
//!   promoted it or recovery did;
//! - else, while that operation's intent is still there, `RecoveryRequired` naming it: the
//!   dataset's supervisor (or `mend recover --mode roll-forward`) settles it once its lease
//!   runs out, and the next retry answers the promotion recovery recorded (or, if recovery
//!   could not promote it because another change got there first, runs and is refused as
//!   stale). A first copy still running holds the config gate, so a retry waits for it (up
//!   to the gate timeout) and answers its promotion; the intent a retry finds is one no run
//!   holds any more: the first copy crashed, or failed with an outcome unknown, after
//!   writing it;
//! - else it runs, as a new apply; a copy racing it to the intent is `RecoveryRequired` too.

use super::Engine;
use super::keyed::Keyed;
use crate::catalog::CatalogExt;
use crate::catalog::RequestKey;
use crate::error::{EntityKind, MendError, Result};
use crate::faults::DurableStep;
use crate::gates::GateName;
use crate::intent::{ExpectedState, Intent, OperationKind, PlannedEffects};
use crate::model::{Dataset, DatasetConfig};
use crate::objects::format::sha256;
use crate::validate;

/// A new config made from the current one: what `mend dataset config --set` applies.
pub type ConfigEdit<'a> = dyn Fn(&DatasetConfig) -> Result<DatasetConfig> + Send + Sync + 'a;

impl Engine {
    /// Applies `config` to the dataset if it is still at `expected_config_version`.
    ///
    /// Under an idempotency key (module doc) a retry of an apply that landed answers its
    /// promotion, never `FailedPrecondition` because the version moved.
    pub fn apply_config<'a>(
        &'a self,
        dataset_id: &'a str,
        expected_config_version: u64,
        config: &'a DatasetConfig,
        node: &'a str,
    ) -> Keyed<'a, Dataset> {
        Keyed::new(self.write_scope("config"), move |key| async move {
            match key {
                None => {
                    self.apply_config_unkeyed(dataset_id, expected_config_version, config, node)
                        .await
                }
                Some(key) => {
                    self.apply_config_keyed(dataset_id, expected_config_version, config, node, key)
                        .await
                }
            }
        })
    }

    /// Applies `edit` of the dataset's config as read, at the version read: for a client
    /// that makes the new config from the current one (`mend dataset config NAME --set ...`).
    ///
    /// Under an idempotency key, a retry after the apply landed reads the promoted config,
    /// so it is answered by the promotion recorded for the key when `edit` of the promoted
    /// config is the config promoted (an edit that sets values, sent again), at the version
    /// it replaced; another edit under the same key is `InvalidArgument`.
    pub fn apply_config_edit<'a>(
        &'a self,
        dataset_id: &'a str,
        edit: &'a ConfigEdit<'a>,
        node: &'a str,
    ) -> Keyed<'a, Dataset> {
        Keyed::new(self.write_scope("config"), move |key| async move {
            match key {
                None => {
                    validate::dataset_id(dataset_id)?;
                    let current = self.catalog.dataset(dataset_id).await?;
                    let config = edit(&current.config)?;
                    self.apply_config_unkeyed(dataset_id, current.config_version, &config, node)
                        .await
                }
                Some(key) => {
                    self.apply_config_edit_keyed(dataset_id, edit, node, key)
                        .await
                }
            }
        })
    }

    #[tracing::instrument(
        name = "config_apply",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = tracing::field::Empty)
    )]
    async fn apply_config_unkeyed(
        &self,
        dataset_id: &str,
        expected_config_version: u64,
        config: &DatasetConfig,
        node: &str,
    ) -> Result<Dataset> {
        validate::dataset_id(dataset_id)?;
        validate::config(config)?;
        validate::node(node)?;
        let operation_id = crate::ambient::uuid_v4().to_string();
        self.under_gates([GateName::config(dataset_id)], |engine| async move {
            engine
                .apply_config_holding_gate(
                    dataset_id,
                    expected_config_version,
                    config,
                    node,
                    &operation_id,
                )
                .await
        })
        .await
    }

    #[tracing::instrument(
        name = "config_apply",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = tracing::field::Empty)
    )]
    async fn apply_config_keyed(
        &self,
        dataset_id: &str,
        expected_config_version: u64,
        config: &DatasetConfig,
        node: &str,
        idempotency_key: &str,
    ) -> Result<Dataset> {
        validate::idempotency_key(idempotency_key)?;
        validate::dataset_id(dataset_id)?;
        validate::config(config)?;
        validate::node(node)?;
        // Answered at once when recorded; otherwise checked again under the gate, since the
        // copy that held it may have promoted meanwhile.
        if let Some(promoted) = self
            .recorded_promotion(dataset_id, expected_config_version, config, idempotency_key)
            .await?
        {
            return Ok(promoted);
        }
        self.under_gates([GateName::config(dataset_id)], |engine| async move {
            engine
                .apply_keyed_holding_gate(
                    dataset_id,
                    expected_config_version,
                    config,
                    node,
                    idempotency_key,
                )
                .await
        })
        .await
    }

    #[tracing::instrument(
        name = "config_apply",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = tracing::field::Empty)
    )]
    async fn apply_config_edit_keyed(
        &self,
        dataset_id: &str,
        edit: &ConfigEdit<'_>,
        node: &str,
        idempotency_key: &str,
    ) -> Result<Dataset> {
        validate::idempotency_key(idempotency_key)?;
        validate::dataset_id(dataset_id)?;
        validate::node(node)?;
        let operation_id = keyed_operation_id(idempotency_key);
        self.under_gates([GateName::config(dataset_id)], |engine| async move {
            // Read before the record: a promotion recovery makes in between is then found as
            // the record, or else not yet made when the dataset was read, so the request made
            // from what was read is the one recovery promotes.
            let current = self.catalog.dataset(dataset_id).await?;
            let record = promotion_record_key(&operation_id);
            if let Some(found) = self.catalog.recorded_request(dataset_id, &record).await? {
                let answered: Dataset =
                    serde_json::from_value(found.result.clone()).map_err(|error| {
                        MendError::Corrupt {
                            message: format!(
                                "the recorded promotion of config apply {operation_id} is unreadable: {error}"
                            ),
                        }
                    })?;
                let config = edit(&answered.config)?;
                // The promotion moved the version on by one, or left it when the config did
                // not change; the record's digest says which request it was.
                let version = answered.config_version;
                let candidates = [version.saturating_sub(1), version]
                    .map(|expected| promotion_key(&operation_id, expected, &config));
                let matching = candidates
                    .iter()
                    .find(|key| key.request_digest == found.request_digest)
                    .unwrap_or(&candidates[1]);
                return found.replay_named(matching, idempotency_key);
            }
            let config = edit(&current.config)?;
            validate::config(&config)?;
            engine
                .apply_keyed_holding_gate(
                    dataset_id,
                    current.config_version,
                    &config,
                    node,
                    idempotency_key,
                )
                .await
        })
        .await
    }

    /// The promotion recorded for the apply under `idempotency_key`, if it happened.
    async fn recorded_promotion(
        &self,
        dataset_id: &str,
        expected_config_version: u64,
        config: &DatasetConfig,
        idempotency_key: &str,
    ) -> Result<Option<Dataset>> {
        let operation_id = keyed_operation_id(idempotency_key);
        let promotion = promotion_key(&operation_id, expected_config_version, config);
        match self
            .catalog
            .recorded_request(dataset_id, &promotion.key)
            .await?
        {
            Some(found) => found.replay_named(&promotion, idempotency_key).map(Some),
            None => Ok(None),
        }
    }

    /// A keyed apply once it holds the config gate: `RecoveryRequired` while its operation's
    /// intent stands, else the recorded promotion, else the apply.
    ///
    /// The intent is looked for before the record: recovery promotes an apply's intent (under
    /// the dataset gate, not this one) and records it in one step, then deletes the intent. So
    /// an intent gone by the first look has its promotion recorded, if it had one, by the
    /// second. The other order let a retry read no record, then find the intent deleted by a
    /// recovery that had just promoted it, and refuse it as stale: an apply answered refused
    /// whose config was promoted (mend-sim, config applies under keys).
    async fn apply_keyed_holding_gate(
        &self,
        dataset_id: &str,
        expected_config_version: u64,
        config: &DatasetConfig,
        node: &str,
        idempotency_key: &str,
    ) -> Result<Dataset> {
        let operation_id = keyed_operation_id(idempotency_key);
        let in_flight = self
            .catalog
            .intent(dataset_id, &operation_id)
            .await?
            .is_some();
        if in_flight {
            return Err(MendError::RecoveryRequired { operation_id });
        }
        if let Some(promoted) = self
            .recorded_promotion(dataset_id, expected_config_version, config, idempotency_key)
            .await?
        {
            return Ok(promoted);
        }
        match self
            .apply_config_holding_gate(
                dataset_id,
                expected_config_version,
                config,
                node,
                &operation_id,
            )
            .await
        {
            // Another copy wrote the intent first: it is in flight.
            Err(MendError::AlreadyExists {
                kind: EntityKind::Intent,
                ..
            }) => Err(MendError::RecoveryRequired { operation_id }),
            other => other,
        }
    }

    async fn apply_config_holding_gate(
        &self,
        dataset_id: &str,
        expected_config_version: u64,
        config: &DatasetConfig,
        node: &str,
        operation_id: &str,
    ) -> Result<Dataset> {
        let dataset = self.catalog.dataset(dataset_id).await?;
        if dataset.config_version != expected_config_version {
            return Err(MendError::failed_precondition(
                format!(
                    "dataset {dataset_id} is at config version {}, not {expected_config_version}: read it again and reapply",
                    dataset.config_version
                ),
                Vec::new(),
            ));
        }
        tracing::Span::current().record("operation_id", tracing::field::display(operation_id));
        let now = self.now_ms();
        let intent = Intent {
            effects: PlannedEffects {
                config: Some(config.clone()),
                ..PlannedEffects::default()
            },
            expected: ExpectedState {
                manifest_version: dataset.manifest_version,
                config_version: Some(expected_config_version),
                ..ExpectedState::default()
            },
            ..Intent::armed(
                operation_id.to_string(),
                OperationKind::ConfigApply,
                dataset_id,
                node,
                now,
                self.options.intent_lease_ms,
            )
        };
        self.durably(DurableStep::WriteIntent, self.catalog.put_intent(&intent))
            .await?;
        let promoted = self.promote_config(&intent).await?;
        self.finish_intent(dataset_id, &intent.operation_id).await?;
        tracing::info!(config_version = promoted.config_version, "config applied");
        Ok(promoted)
    }

    /// Step 2, also what recovery runs to roll a config apply forward; recorded under the
    /// operation's promotion key in the same atomic step (module doc), so a promotion that
    /// landed answers the same when it is run again.
    pub(super) async fn promote_config(&self, intent: &Intent) -> Result<Dataset> {
        let (Some(config), Some(expected)) =
            (&intent.effects.config, intent.expected.config_version)
        else {
            return Err(MendError::Corrupt {
                message: format!(
                    "config apply {} has no staged config or expected version",
                    intent.operation_id
                ),
            });
        };
        let key = promotion_key(&intent.operation_id, expected, config);
        self.durably(
            DurableStep::PromoteConfig,
            self.catalog.update_config(
                &intent.dataset_id,
                expected,
                config,
                self.now_ms(),
                Some(&key),
            ),
        )
        .await
    }
}

/// The operation id of a config apply under idempotency key `key`: `config-` and the first
/// 40 hex digits of the key's sha256, within the ids' alphabet whatever the key holds.
fn keyed_operation_id(key: &str) -> String {
    let digest = sha256(key.as_bytes());
    let hex = digest.strip_prefix("sha256:").unwrap_or(&digest);
    format!("config-{}", &hex[..40])
}

/// Where the promotion of config apply `operation_id` is recorded.
pub(super) fn promotion_record_key(operation_id: &str) -> String {
    format!("op:{operation_id}:promote")
}

/// The promotion of `config` over `expected_config_version`, as recorded.
fn promotion_key(
    operation_id: &str,
    expected_config_version: u64,
    config: &DatasetConfig,
) -> RequestKey {
    RequestKey::new(
        promotion_record_key(operation_id),
        &("promote", expected_config_version, config),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keyed_operation_id_is_a_valid_id_of_fixed_length_per_key() {
        let id = keyed_operation_id("any key at all: ☃ / %");
        assert!(validate::split_id(&id).is_ok(), "{id}");
        assert_eq!(id.len(), "config-".len() + 40);
        assert_eq!(id, keyed_operation_id("any key at all: ☃ / %"));
        assert_ne!(id, keyed_operation_id("another key"));
    }
}

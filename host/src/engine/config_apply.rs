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

use super::Engine;
use crate::error::{MendError, Result};
use crate::faults::DurableStep;
use crate::gates::GateName;
use crate::intent::{ExpectedState, Intent, OperationKind, PlannedEffects};
use crate::model::{Dataset, DatasetConfig};
use crate::validate;

impl Engine {
    /// Applies `config` to the dataset if it is still at `expected_config_version`.
    pub async fn apply_config(
        &self,
        dataset_id: &str,
        expected_config_version: u64,
        config: &DatasetConfig,
        node: &str,
    ) -> Result<Dataset> {
        validate::dataset_id(dataset_id)?;
        validate::config(config)?;
        validate::node(node)?;
        self.under_gates(
            [GateName::config(dataset_id)],
            self.apply_config_holding_gate(dataset_id, expected_config_version, config, node),
        )
        .await
    }

    async fn apply_config_holding_gate(
        &self,
        dataset_id: &str,
        expected_config_version: u64,
        config: &DatasetConfig,
        node: &str,
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
                uuid::Uuid::new_v4().to_string(),
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
        Ok(promoted)
    }

    /// Step 2, also what recovery runs to roll a config apply forward.
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
        self.durably(
            DurableStep::PromoteConfig,
            self.catalog
                .update_config(&intent.dataset_id, expected, config, self.now_ms()),
        )
        .await
    }
}

//! Garbage collection, as an operation with its own intent:
//!
//! 1. write the intent (`Armed`): the staged splits to abandon (untouched past the staged
//!    grace period) and the marked splits to delete (marked past the deletion grace period);
//! 2. mark the abandoned splits, each only if still staged and untouched at write time;
//! 3. delete the objects of the splits to delete, then
//! 4. their rows;
//! 5. delete the intent.
//!
//! Splits named by another operation's intent are left to recovery. A crash anywhere leaves
//! the intent; recovery rolls it forward (every step is safe to repeat), so a crash between an
//! object and its row converges.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::Engine;
use crate::error::Result;
use crate::faults::DurableStep;
use crate::gates::GateName;
use crate::intent::{ExpectedState, Intent, OperationKind, PlannedEffects};
use crate::model::{ListQuery, SplitState};
use crate::{bounds, validate};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcResult {
    /// Staged splits abandoned and marked for deletion by this run.
    pub marked: Vec<String>,
    /// Splits whose objects and rows this run deleted.
    pub deleted: Vec<String>,
}

impl Engine {
    /// Collects a dataset's abandoned and expired splits. A run with nothing to collect
    /// writes nothing.
    pub async fn gc(&self, dataset_id: &str, node: &str) -> Result<GcResult> {
        validate::dataset_id(dataset_id)?;
        validate::node(node)?;
        self.under_gates(
            [GateName::dataset(dataset_id)],
            self.gc_holding_gate(dataset_id, node),
        )
        .await
    }

    async fn gc_holding_gate(&self, dataset_id: &str, node: &str) -> Result<GcResult> {
        let dataset = self.catalog.dataset(dataset_id).await?;
        let now = self.now_ms();
        let staged_cutoff = bounds::ms_before(now, dataset.config.staged_grace_period_ms);
        let deletion_cutoff = bounds::ms_before(now, dataset.config.deletion_grace_period_ms);
        let claimed = self.splits_named_by_intents(dataset_id, None).await?;
        let rows = self
            .catalog
            .list_splits(dataset_id, &ListQuery::default())
            .await?
            .splits;
        let unclaimed = rows.iter().filter(|row| !claimed.contains(&row.split_id));
        let (mut abandon, mut expire) = (Vec::new(), Vec::new());
        for row in unclaimed {
            match row.state {
                SplitState::Staged if row.updated_at_ms < staged_cutoff => {
                    abandon.push(row.split_id.clone())
                }
                SplitState::MarkedForDeletion if row.updated_at_ms < deletion_cutoff => {
                    expire.push(row.split_id.clone())
                }
                _ => {}
            }
        }
        if abandon.is_empty() && expire.is_empty() {
            return Ok(GcResult::default());
        }
        let intent = Intent {
            effects: PlannedEffects {
                mark: abandon,
                delete: expire,
                ..PlannedEffects::default()
            },
            expected: ExpectedState {
                manifest_version: dataset.manifest_version,
                ..ExpectedState::default()
            },
            ..Intent::armed(
                uuid::Uuid::new_v4().to_string(),
                OperationKind::Gc,
                dataset_id,
                node,
                now,
                self.options.intent_lease_ms,
            )
        };
        self.durably(DurableStep::WriteIntent, self.catalog.put_intent(&intent))
            .await?;
        let result = self.run_gc(&intent, staged_cutoff).await?;
        self.finish_intent(dataset_id, &intent.operation_id).await?;
        Ok(result)
    }

    /// Steps 2 to 4 of a gc, safe to repeat from any point: recovery runs them again.
    pub(super) async fn run_gc(&self, intent: &Intent, staged_cutoff: i64) -> Result<GcResult> {
        let dataset_id = intent.dataset_id.as_str();
        let mut result = GcResult::default();
        if !intent.effects.mark.is_empty() {
            result.marked = self
                .durably(
                    DurableStep::MarkRows,
                    self.catalog.mark_stale_staged(
                        dataset_id,
                        &intent.effects.mark,
                        staged_cutoff,
                        self.now_ms(),
                    ),
                )
                .await?;
        }
        if intent.effects.delete.is_empty() {
            return Ok(result);
        }
        // Only splits still marked (or already gone) lose their objects: never one that a
        // row in another state references (invariant 2).
        let query = ListQuery {
            split_ids: Some(intent.effects.delete.clone()),
            ..ListQuery::default()
        };
        let rows = self.catalog.list_splits(dataset_id, &query).await?.splits;
        let live: BTreeSet<&str> = rows
            .iter()
            .filter(|row| row.state != SplitState::MarkedForDeletion)
            .map(|row| row.split_id.as_str())
            .collect();
        for split_id in intent
            .effects
            .delete
            .iter()
            .filter(|id| !live.contains(id.as_str()))
        {
            self.durably(
                DurableStep::DeleteObject {
                    split_id: split_id.clone(),
                },
                self.objects.delete(dataset_id, split_id),
            )
            .await?;
        }
        let marked: Vec<String> = rows
            .iter()
            .filter(|row| row.state == SplitState::MarkedForDeletion)
            .map(|row| row.split_id.clone())
            .collect();
        if !marked.is_empty() {
            self.durably(
                DurableStep::DeleteRows,
                self.catalog
                    .delete_splits(dataset_id, &marked, self.now_ms()),
            )
            .await?;
        }
        result.deleted = marked;
        Ok(result)
    }

    /// Every split some intent of the dataset (but `except`) names: recovery's, not gc's or
    /// reconcile's.
    pub(super) async fn splits_named_by_intents(
        &self,
        dataset_id: &str,
        except: Option<&str>,
    ) -> Result<BTreeSet<String>> {
        let mut named = BTreeSet::new();
        for intent in self.catalog.list_intents(dataset_id).await? {
            if Some(intent.operation_id.as_str()) == except {
                continue;
            }
            let effects = intent.effects;
            named.extend(effects.stage.into_iter().map(|row| row.split_id));
            named.extend(effects.mark);
            named.extend(effects.delete);
            if let Some(publish) = effects.publish {
                named.extend(publish.staged_split_ids);
                named.extend(publish.replaced_split_ids);
            }
        }
        Ok(named)
    }
}

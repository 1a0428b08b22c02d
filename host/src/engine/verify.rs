//! Verify: checks the invariants over a whole dataset, bucket included, and writes nothing.
//!
//! - Every published row's object exists and is the object of that split (invariant 1).
//! - Every object's embedded header is readable, names its split and this incarnation of the
//!   dataset.
//! - An intent whose effects are confirmed has every object it planned (invariants 1 and 2
//!   for work about to be published).
//!
//! Objects without a row are listed, not reported as violations: they are reconcile's work.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::Engine;
use crate::error::{MendError, Result};
use crate::intent::IntentPhase;
use crate::model::{ListQuery, SplitState};
use crate::validate;

/// One broken invariant, or an object that is not what its path says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = VerifyViolation))]
pub struct Violation {
    /// The DESIGN.md invariant broken, when one is; 0 for a malformed object.
    pub invariant: u8,
    /// The split at fault.
    pub split_id: String,
    /// What is wrong.
    pub message: String,
}

/// What `verify` checked and found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VerifyReport {
    /// The dataset verified.
    pub dataset_id: String,
    /// Rows read.
    pub rows_checked: usize,
    /// Objects listed and looked at.
    pub objects_checked: usize,
    /// Intents not yet settled (not a violation: recovery's work).
    pub pending_intents: usize,
    /// Objects with no row: candidates for reconcile.
    pub orphan_objects: Vec<String>,
    /// Every violation found; empty when the dataset holds its invariants.
    pub violations: Vec<Violation>,
}

impl Engine {
    /// Checks the dataset's invariants; reads only.
    pub async fn verify(&self, dataset_id: &str) -> Result<VerifyReport> {
        validate::dataset_id(dataset_id)?;
        let dataset = self.catalog.dataset(dataset_id).await?;
        let rows = self
            .catalog
            .list_splits(dataset_id, &ListQuery::default())
            .await?
            .splits;
        let objects = self.objects.list(dataset_id).await?;
        let intents = self.catalog.list_intents(dataset_id).await?;
        let with_object: BTreeSet<&str> = objects.iter().map(|o| o.split_id.as_str()).collect();
        let with_row: BTreeSet<&str> = rows.iter().map(|row| row.split_id.as_str()).collect();
        let mut violations = Vec::new();

        for row in rows.iter().filter(|row| row.state == SplitState::Published) {
            if !with_object.contains(row.split_id.as_str()) {
                violations.push(Violation {
                    invariant: 1,
                    split_id: row.split_id.clone(),
                    message: "the split is published but its object is missing".into(),
                });
            }
        }
        for split_id in objects.iter().map(|o| &o.split_id) {
            let problem = match self.objects.read_header(dataset_id, split_id).await {
                Ok(Some((header, _))) if header.split_id != *split_id => Some(format!(
                    "the object's header names split {}",
                    header.split_id
                )),
                Ok(Some((header, _))) if header.dataset_uid != dataset.uid => Some(format!(
                    "the object belongs to another incarnation of the dataset (uid {})",
                    header.dataset_uid
                )),
                Ok(_) => None,
                Err(MendError::Corrupt { message }) => Some(message),
                Err(other) => return Err(other),
            };
            if let Some(message) = problem {
                violations.push(Violation {
                    invariant: 0,
                    split_id: split_id.clone(),
                    message,
                });
            }
        }
        for intent in intents
            .iter()
            .filter(|intent| intent.phase == IntentPhase::EffectsConfirmed)
        {
            for planned in &intent.effects.objects {
                if !with_object.contains(planned.split_id.as_str()) {
                    violations.push(Violation {
                        invariant: 2,
                        split_id: planned.split_id.clone(),
                        message: format!(
                            "operation {} confirmed its effects, but this object is missing",
                            intent.operation_id
                        ),
                    });
                }
            }
        }
        Ok(VerifyReport {
            dataset_id: dataset_id.to_string(),
            rows_checked: rows.len(),
            objects_checked: objects.len(),
            pending_intents: intents.len(),
            orphan_objects: objects
                .iter()
                .filter(|object| !with_row.contains(object.split_id.as_str()))
                .map(|object| object.split_id.clone())
                .collect(),
            violations,
        })
    }
}

//! Verify: checks the invariants over a whole dataset, bucket included, and writes nothing.
//!
//! - Every published row's object exists and is the object of that split (invariant 1).
//! - Every object's embedded header is readable, names its split and this incarnation of the
//!   dataset.
//! - An intent whose effects are confirmed has every object it planned (invariants 1 and 2
//!   for work about to be published).
//! - Deep ([`Engine::verify_deep`]): every object is read back whole and its payload hashed
//!   against the sha256 its header records, so a payload damaged in the store (or put there
//!   with a correct header and the wrong bytes) is found. It reads every byte of the dataset,
//!   [`DEEP_READS_IN_FLIGHT`] objects at a time, each streamed (its header and one chunk in
//!   memory); the plain verify reads only each object's first bytes.
//!
//! Objects without a row are listed, not reported as violations: they are reconcile's work.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::Engine;
use crate::error::{MendError, Result};
use crate::intent::IntentPhase;
use crate::model::{ListQuery, SplitState};
use crate::objects::{FoundObject, ReadBack};
use crate::validate;

/// How many objects a deep verify reads back at once: enough to keep a remote store busy,
/// few enough to hold only that many chunks in memory.
pub const DEEP_READS_IN_FLIGHT: usize = 8;

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
    /// Objects read back whole and their payloads hashed (a deep verify; 0 otherwise).
    #[serde(default)]
    pub payloads_hashed: usize,
    /// The bytes those objects hold, read and hashed.
    #[serde(default)]
    pub bytes_hashed: u64,
    /// Intents not yet settled (not a violation: recovery's work).
    pub pending_intents: usize,
    /// Objects with no row: candidates for reconcile.
    pub orphan_objects: Vec<String>,
    /// Every violation found; empty when the dataset holds its invariants.
    pub violations: Vec<Violation>,
}

impl Engine {
    /// Checks the dataset's invariants; reads only each object's header.
    pub async fn verify(&self, dataset_id: &str) -> Result<VerifyReport> {
        self.verify_at(dataset_id, false).await
    }

    /// Checks the dataset's invariants and reads every object back whole, hashing each payload
    /// against the sha256 its header records; reads only.
    pub async fn verify_deep(&self, dataset_id: &str) -> Result<VerifyReport> {
        self.verify_at(dataset_id, true).await
    }

    async fn verify_at(&self, dataset_id: &str, deep: bool) -> Result<VerifyReport> {
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
        let published: BTreeSet<&str> = rows
            .iter()
            .filter(|row| row.state == SplitState::Published)
            .map(|row| row.split_id.as_str())
            .collect();
        let (mut payloads_hashed, mut bytes_hashed) = (0, 0);
        if deep {
            use futures::StreamExt;
            // The futures are made up front, each owning what it reads (`Send` for every
            // lifetime, as the server needs).
            let reads: Vec<_> = objects
                .iter()
                .map(|object| {
                    let split_id = object.split_id.clone();
                    async move {
                        let found = self
                            .objects
                            .read_back(dataset_id, &split_id, &|_, _| true)
                            .await;
                        (split_id, found)
                    }
                })
                .collect();
            let mut reading = futures::stream::iter(reads).buffer_unordered(DEEP_READS_IN_FLIGHT);
            let mut found = Vec::with_capacity(objects.len());
            while let Some((split_id, read)) = reading.next().await {
                found.push((split_id, read?));
            }
            found.sort_by(|a, b| a.0.cmp(&b.0));
            for (split_id, read) in found {
                let (header, problem) = match read {
                    ReadBack::Missing => continue, // deleted since the listing
                    ReadBack::Intact { header, size } => {
                        payloads_hashed += 1;
                        bytes_hashed += size;
                        (header, None)
                    }
                    ReadBack::Damaged {
                        header,
                        size,
                        payload_bytes,
                    } => {
                        payloads_hashed += 1;
                        bytes_hashed += size;
                        let problem = format!(
                            "the payload ({payload_bytes} bytes) does not hash to the sha256 its header records ({}, {} bytes): the object is damaged",
                            header.payload_sha256, header.payload_size
                        );
                        (header, Some(problem))
                    }
                    ReadBack::Other {
                        found: FoundObject::NotASplitObject { message },
                    } => {
                        violations.push(Violation {
                            invariant: 0,
                            split_id,
                            message,
                        });
                        continue;
                    }
                    ReadBack::Other { found } => {
                        return Err(MendError::Corrupt {
                            message: format!(
                                "{split_id}: a read back expecting any split object found {found:?}"
                            ),
                        });
                    }
                };
                let problem = problem.or_else(|| header_problem(&header, &split_id, &dataset.uid));
                if let Some(message) = problem {
                    // A damaged published split breaks invariant 1: its object is not there
                    // as published.
                    let invariant = if published.contains(split_id.as_str()) {
                        1
                    } else {
                        0
                    };
                    violations.push(Violation {
                        invariant,
                        split_id,
                        message,
                    });
                }
            }
        } else {
            for split_id in objects.iter().map(|o| &o.split_id) {
                let problem = match self.objects.read_header(dataset_id, split_id).await {
                    Ok(Some((header, _))) => header_problem(&header, split_id, &dataset.uid),
                    Ok(None) => None,
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
            payloads_hashed,
            bytes_hashed,
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

/// What is wrong with an object's header at `split_id`'s path in the dataset of `uid`.
fn header_problem(
    header: &crate::objects::format::SplitObjectHeader,
    split_id: &str,
    uid: &str,
) -> Option<String> {
    if header.split_id != split_id {
        Some(format!(
            "the object's header names split {}",
            header.split_id
        ))
    } else if header.dataset_uid != uid {
        Some(format!(
            "the object belongs to another incarnation of the dataset (uid {})",
            header.dataset_uid
        ))
    } else {
        None
    }
}

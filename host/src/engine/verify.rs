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
//!
//! Verify reads while writers and recovery work, so its reads are ordered: the rows and the
//! intents first, the objects' listing after. An object a published row or a confirmed
//! intent needs was written before that row was published or that intent confirmed, so a
//! listing taken later can miss it only if it was deleted since; and what such a missing
//! object accuses is looked at again before it is reported ([`Engine::still_missing`]). The
//! other order reported an object written between the listing and the intents' read as
//! missing (simulator seed 7867155796522193289: a verify whose read of the catalog stalled
//! past an upload and its confirmation).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::Engine;
use crate::error::{MendError, Result};
use crate::intent::{Intent, IntentPhase};
use crate::model::{Dataset, ListQuery, SplitRow, SplitState};
use crate::objects::{FoundObject, ListedObject, ReadBack};
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
        // After the rows and the intents: see the module doc.
        let intents = self.catalog.list_intents(dataset_id).await?;
        let objects = self.objects.list(dataset_id).await?;
        let with_object: BTreeSet<&str> = objects.iter().map(|o| o.split_id.as_str()).collect();
        let with_row: BTreeSet<&str> = rows.iter().map(|row| row.split_id.as_str()).collect();
        let mut violations = Vec::new();

        let unlisted_published: Vec<&SplitRow> = rows
            .iter()
            .filter(|row| row.state == SplitState::Published)
            .filter(|row| !with_object.contains(row.split_id.as_str()))
            .collect();
        let unlisted_confirmed: Vec<(&Intent, &str)> = intents
            .iter()
            .filter(|intent| intent.phase == IntentPhase::EffectsConfirmed)
            .flat_map(|intent| {
                intent
                    .effects
                    .objects
                    .iter()
                    .map(move |planned| (intent, planned.split_id.as_str()))
            })
            .filter(|(_, split_id)| !with_object.contains(split_id))
            .collect();
        let (missing_published, missing_confirmed) = self
            .still_missing(dataset_id, &unlisted_published, &unlisted_confirmed)
            .await?;
        for row in missing_published {
            violations.push(Violation {
                invariant: 1,
                split_id: row.split_id.clone(),
                message: "the split is published but its object is missing".into(),
            });
        }
        let published: BTreeSet<&str> = rows
            .iter()
            .filter(|row| row.state == SplitState::Published)
            .map(|row| row.split_id.as_str())
            .collect();
        let (payloads_hashed, bytes_hashed) = if deep {
            self.check_payloads(&dataset, &objects, &published, &mut violations)
                .await?
        } else {
            self.check_headers(&dataset, &objects, &mut violations)
                .await?;
            (0, 0)
        };
        for (intent, split_id) in missing_confirmed {
            violations.push(Violation {
                invariant: 2,
                split_id: split_id.to_string(),
                message: format!(
                    "operation {} confirmed its effects, but this object is missing",
                    intent.operation_id
                ),
            });
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

impl Engine {
    /// Of the published rows and the confirmed intents' planned objects that the listing did
    /// not show, those whose object is missing for real: still missing at a second look, and
    /// whose row (or intent) is unchanged since it was first read, read again after that
    /// look. Unchanged throughout, it was published (confirmed) all along, and its object was
    /// written before that; an object deleted since by gc after its row was marked, or a
    /// split whose row was deleted and staged again, is no violation.
    async fn still_missing<'a>(
        &self,
        dataset_id: &str,
        published: &[&'a SplitRow],
        confirmed: &[(&'a Intent, &'a str)],
    ) -> Result<(Vec<&'a SplitRow>, Vec<(&'a Intent, &'a str)>)> {
        if published.is_empty() && confirmed.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let accused: BTreeSet<String> = published
            .iter()
            .map(|row| row.split_id.clone())
            .chain(confirmed.iter().map(|(_, split_id)| split_id.to_string()))
            .collect();
        let accused: Vec<String> = accused.into_iter().collect();
        let missing: BTreeSet<String> = self
            .objects
            .missing(dataset_id, &accused)
            .await?
            .into_iter()
            .collect();
        let rows_now = if published.is_empty() {
            Vec::new()
        } else {
            let query = ListQuery {
                split_ids: Some(published.iter().map(|row| row.split_id.clone()).collect()),
                ..ListQuery::default()
            };
            self.catalog.list_splits(dataset_id, &query).await?.splits
        };
        let intents_now = if confirmed.is_empty() {
            Vec::new()
        } else {
            self.catalog.list_intents(dataset_id).await?
        };
        let published = published
            .iter()
            .filter(|row| missing.contains(&row.split_id) && rows_now.contains(row))
            .copied()
            .collect();
        let confirmed = confirmed
            .iter()
            .filter(|(intent, split_id)| {
                missing.contains(*split_id)
                    && intents_now.iter().any(|now| {
                        now.operation_id == intent.operation_id
                            && now.phase == IntentPhase::EffectsConfirmed
                            && now.updated_at_ms == intent.updated_at_ms
                    })
            })
            .copied()
            .collect();
        Ok((published, confirmed))
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

impl Engine {
    /// Reads every object back whole and hashes its payload against its header: a damaged
    /// or foreign object is a violation (of invariant 1 when its split is published).
    /// Answers the payloads hashed and their bytes.
    async fn check_payloads(
        &self,
        dataset: &Dataset,
        objects: &[ListedObject],
        published: &BTreeSet<&str>,
        violations: &mut Vec<Violation>,
    ) -> Result<(usize, u64)> {
        let dataset_id = dataset.dataset_id.as_str();
        let (mut payloads_hashed, mut bytes_hashed) = (0, 0);
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
        Ok((payloads_hashed, bytes_hashed))
    }

    /// Reads every object's header: one that is unreadable, of another split or of another
    /// incarnation of the dataset is a violation.
    async fn check_headers(
        &self,
        dataset: &Dataset,
        objects: &[ListedObject],
        violations: &mut Vec<Violation>,
    ) -> Result<()> {
        let dataset_id = dataset.dataset_id.as_str();
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use bytes::Bytes;
    use futures::FutureExt;

    use super::*;
    use crate::engine::{BeginOperation, ExternalKind, PlannedSplit};
    use crate::hooked_store::HookedStore;
    use crate::model::DatasetConfig;
    use crate::objects::format::sha256;

    const PAYLOAD: &[u8] = b"the payload of split s1";

    async fn engine_on(store: &Arc<HookedStore>) -> Engine {
        let engine = store.engine();
        engine
            .create_dataset("ds", &DatasetConfig::default())
            .await
            .unwrap();
        engine
            .begin_operation(&BeginOperation {
                dataset_id: "ds".into(),
                operation_id: Some("op-1".into()),
                kind: ExternalKind::Commit,
                node: "writer".into(),
                lease_ms: Some(60_000),
                splits: vec![PlannedSplit {
                    split_id: "s1".into(),
                    metadata_json: "{}".into(),
                    size: PAYLOAD.len() as u64,
                    sha256: sha256(PAYLOAD),
                }],
                checkpoint_delta: None,
                replaced_split_ids: Vec::new(),
                publish_token: None,
            })
            .await
            .unwrap();
        engine
    }

    /// Marks op-1's intent as having confirmed its effects, as its publish does first.
    async fn confirm(engine: &Engine) {
        let mut intent = engine
            .catalog
            .list_intents("ds")
            .await
            .unwrap()
            .into_iter()
            .find(|intent| intent.operation_id == "op-1")
            .unwrap();
        intent.phase = IntentPhase::EffectsConfirmed;
        engine
            .catalog
            .update_intent(&intent, IntentPhase::Armed)
            .await
            .unwrap();
    }

    async fn upload(engine: &Engine) {
        let body = futures::stream::iter([Ok(Bytes::from_static(PAYLOAD))]);
        engine
            .upload_object("ds", "op-1", "s1", body)
            .await
            .unwrap();
    }

    /// Simulator seed 7867155796522193289: verify listed the objects, a writer uploaded its
    /// object and confirmed its operation, and verify then read the intents: it reported the
    /// confirmed operation's object missing. The writer's two steps run here right after
    /// verify's listing was read.
    #[tokio::test]
    async fn an_object_written_and_confirmed_while_verify_lists_is_no_violation() {
        let store = Arc::new(HookedStore::default());
        let engine = engine_on(&store).await;
        let fired = Arc::new(AtomicBool::new(false));
        let (writer, hook_fired) = (engine.clone(), fired.clone());
        store.set_after_list(move |prefix| {
            let (writer, fired) = (writer.clone(), hook_fired.clone());
            let listing_splits = prefix.as_ref().ends_with("/splits");
            async move {
                if listing_splits && !fired.swap(true, Ordering::SeqCst) {
                    upload(&writer).await;
                    confirm(&writer).await;
                }
            }
            .boxed()
        });

        let report = engine.verify("ds").await.unwrap();
        assert!(fired.load(Ordering::SeqCst), "the writer acted mid-verify");
        assert_eq!(report.violations, Vec::new());
        assert_eq!(report.pending_intents, 1);
        // Verified again, the object is listed and nothing is wrong either.
        let again = engine.verify("ds").await.unwrap();
        assert_eq!(again.violations, Vec::new());
        assert_eq!(again.objects_checked, 1);
    }

    /// The second look does not hide a real violation: a confirmed operation whose object is
    /// missing is reported.
    #[tokio::test]
    async fn a_confirmed_operation_without_its_object_is_reported() {
        let store = Arc::new(HookedStore::default());
        let engine = engine_on(&store).await;
        confirm(&engine).await;
        let report = engine.verify("ds").await.unwrap();
        assert_eq!(
            report.violations,
            vec![Violation {
                invariant: 2,
                split_id: "s1".into(),
                message: "operation op-1 confirmed its effects, but this object is missing".into(),
            }]
        );
    }
}

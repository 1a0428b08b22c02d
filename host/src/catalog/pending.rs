//! Discovery of pending work: which datasets may have unresolved intents
//! ([`Catalog::pending_datasets`]), so that a supervisor finds the work of crashed writers in
//! proportion to the datasets that have some, not to all datasets.
//!
//! What each backend keeps, and what one discovery costs:
//!
//! | backend | index | one `pending_datasets` | `clear_pending` |
//! |---|---|---|---|
//! | Postgres | the `intents` table itself | one grouped query, a row per dataset with intents | no-op |
//! | object storage | a marker per dataset, `index/pending/{dataset_id}`, kept by writers | one LIST of the markers (paged as the store pages) | deletes a marker once it is safe (`object_store/pending.rs`) |
//! | the trait's default | none | every dataset's intents, read one dataset at a time | no-op |
//!
//! A backend with an index claims [`PENDING_INDEX`]; the default claims nothing. Whatever the
//! backend, discovery never misses a dataset whose intent was written by a writer that then
//! crashed (each backend says exactly what it promises), and may name a dataset whose intents
//! have been settled since: the caller reads the dataset's intents to know.
//!
//! [`Catalog::pending_datasets`]: super::Catalog::pending_datasets

use futures::{StreamExt, TryStreamExt};

use super::Catalog;
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

/// The capability of a backend whose [`pending_datasets`](super::Catalog::pending_datasets)
/// reads an index of the datasets with pending intents, so that one discovery costs in
/// proportion to those datasets, not to all of them: mend's Postgres backend (one query) and
/// its object-storage catalog (one listing of the pending markers). A backend that keeps the
/// trait's default, which reads every dataset's intents, must not claim it.
pub const PENDING_INDEX: &str = "pending.index";

/// A dataset that may have unresolved intents, as discovery finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingDataset {
    /// The dataset's id.
    pub dataset_id: String,
    /// How many intents it has, where discovery itself tells without reading them one by one
    /// (Postgres; and the trait's default, which has read them); `None` otherwise (object
    /// storage, whose index names datasets only, and a dataset the default could not read).
    pub intents: Option<usize>,
    /// The earliest lease expiry among them, where known as for `intents`; `None` otherwise.
    pub earliest_lease_expiry_ms: Option<TimestampMs>,
}

impl PendingDataset {
    /// `dataset_id`, named with nothing else known: an index entry.
    pub fn named(dataset_id: impl Into<String>) -> Self {
        Self {
            dataset_id: dataset_id.into(),
            intents: None,
            earliest_lease_expiry_ms: None,
        }
    }
}

/// How many datasets the default discovery reads at once.
const READS_AT_ONCE: usize = 8;

/// The trait's default discovery, O(datasets): every dataset's intents, 8 datasets at a time.
/// A dataset with intents is named with their count and earliest lease; one that is gone by
/// the time it is read is left out; one that cannot be read is named with nothing known, so
/// that it is not missed (the caller's own read of it fails on its own) and does not hide the
/// others.
pub async fn scan_every_dataset<C: Catalog + ?Sized>(catalog: &C) -> Result<Vec<PendingDataset>> {
    let dataset_ids = catalog.list_dataset_ids().await?;
    let found: Vec<Option<PendingDataset>> = futures::stream::iter(dataset_ids)
        .map(|dataset_id| async move {
            match catalog.list_intents(&dataset_id).await {
                Ok(intents) if intents.is_empty() => Ok(None),
                Ok(intents) => Ok(Some(PendingDataset {
                    intents: Some(intents.len()),
                    earliest_lease_expiry_ms: intents
                        .iter()
                        .map(|intent| intent.lease_expires_at_ms)
                        .min(),
                    dataset_id,
                })),
                Err(MendError::NotFound { .. }) => Ok(None),
                Err(_) => Ok::<_, MendError>(Some(PendingDataset::named(dataset_id))),
            }
        })
        .buffer_unordered(READS_AT_ONCE)
        .try_collect()
        .await?;
    let mut pending: Vec<PendingDataset> = found.into_iter().flatten().collect();
    pending.sort_by(|a, b| a.dataset_id.cmp(&b.dataset_id));
    Ok(pending)
}

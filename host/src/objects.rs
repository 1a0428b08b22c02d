//! Split objects: the immutable data files at `datasets/{dataset}/splits/{split_id}`.
//!
//! Objects are written put-if-absent and never overwritten. Deleting an object that is already
//! gone succeeds, so a delete interrupted between its object and its row can be repeated.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};

use crate::error::{MendError, Result};

#[derive(Debug, Clone)]
pub struct SplitObjects {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
}

impl SplitObjects {
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path) -> Self {
        Self { store, prefix }
    }

    pub fn path(&self, dataset_id: &str, split_id: &str) -> Path {
        self.prefix
            .child("datasets")
            .child(dataset_id)
            .child("splits")
            .child(split_id)
    }

    /// Writes a split's object if no object is there yet. An identical object already in place
    /// counts as written; a different one is `AlreadyExists`.
    pub async fn put(&self, dataset_id: &str, split_id: &str, bytes: Bytes) -> Result<()> {
        let path = self.path(dataset_id, split_id);
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .store
            .put_opts(&path, PutPayload::from(bytes.clone()), options)
            .await
        {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => {
                let existing = self
                    .store
                    .get(&path)
                    .await
                    .map_err(|e| MendError::unavailable(format!("read {path}"), e))?
                    .bytes()
                    .await
                    .map_err(|e| MendError::unavailable(format!("read {path}"), e))?;
                if existing == bytes {
                    Ok(())
                } else {
                    Err(MendError::AlreadyExists {
                        kind: crate::EntityKind::Split,
                        id: split_id.to_string(),
                    })
                }
            }
            Err(error) => Err(MendError::unavailable(format!("write {path}"), error)),
        }
    }

    /// Deletes a split's object; an object already gone is fine.
    pub async fn delete(&self, dataset_id: &str, split_id: &str) -> Result<()> {
        let path = self.path(dataset_id, split_id);
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(error) => Err(MendError::unavailable(format!("delete {path}"), error)),
        }
    }
}

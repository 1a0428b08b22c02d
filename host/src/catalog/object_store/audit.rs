//! Audit records of the object-storage catalog: one small object per record, written
//! put-if-absent next to the commit log, never rewritten:
//!
//! ```text
//! datasets/{dataset_id}/audit/{recorded_at_ms:020}-{append id}-{index:06}.json
//! ```
//!
//! They stay out of the commit log on purpose: the log's state is rewritten whole into every
//! checkpoint, and an ever-growing audit trail must not make every checkpoint grow with it.
//! Names sort by recorded time; the records of one append keep their order, and appends of one
//! process in the same millisecond keep theirs too: the append id is a version 7 uuid, which
//! this process generates in increasing order (a sweep appends a decision's `executing` record
//! and its settled one a moment apart, often in the same millisecond).

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{PutMode, PutOptions, PutPayload};

use super::ObjectStoreCatalog;
use crate::audit::{AuditRecord, check_append, parse_stored};
use crate::error::{MendError, Result};

impl ObjectStoreCatalog {
    fn audit_prefix(&self, dataset_id: &str) -> Path {
        self.prefix()
            .child("datasets")
            .child(dataset_id)
            .child("audit")
    }

    pub(super) async fn append_audit_records(
        &self,
        dataset_id: &str,
        records: &[AuditRecord],
    ) -> Result<()> {
        check_append(dataset_id, records)?;
        if records.is_empty() {
            return Ok(());
        }
        self.load(dataset_id).await?;
        let append_id = uuid::Uuid::now_v7().simple().to_string();
        let prefix = self.audit_prefix(dataset_id);
        for (index, record) in records.iter().enumerate() {
            let path = prefix.child(format!(
                "{:020}-{append_id}-{index:06}.json",
                record.recorded_at_ms.max(0)
            ));
            let body = serde_json::to_vec(record).expect("an audit record always serialises");
            let options = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            self.store()
                .put_opts(&path, PutPayload::from(body), options)
                .await
                .map_err(|error| MendError::unavailable(format!("write {path}"), error))?;
        }
        Ok(())
    }

    pub(super) async fn list_audit_records(
        &self,
        dataset_id: &str,
        limit: Option<usize>,
    ) -> Result<Vec<AuditRecord>> {
        self.load(dataset_id).await?;
        let prefix = self.audit_prefix(dataset_id);
        let mut paths: Vec<Path> = self
            .store()
            .list(Some(&prefix))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|error| MendError::unavailable(format!("list {prefix}"), error))?;
        paths.sort();
        if let Some(limit) = limit {
            paths.drain(..paths.len().saturating_sub(limit));
        }
        let mut records = Vec::with_capacity(paths.len());
        for path in paths {
            let unavailable = |error| MendError::unavailable(format!("read {path}"), error);
            let found = self.store().get(&path).await.map_err(unavailable)?;
            let bytes = found.bytes().await.map_err(unavailable)?;
            records.push(parse_stored(&bytes, &format!("audit record {path}"))?);
        }
        Ok(records)
    }
}

//! Reading a dataset's audit trail: who did what, and when ([`Engine::audit_trail`]).

use super::Engine;
use crate::audit::AuditEntry;
use crate::bounds;
use crate::error::Result;
use crate::validate;

impl Engine {
    /// The newest `limit` records of the dataset's audit, oldest first, those naming
    /// `principal` among them when it is given (so fewer than `limit` may come back; ask for
    /// more to look further back). `limit` is range-checked ([`bounds::AUDIT_LIMIT`]).
    pub async fn audit_trail(
        &self,
        dataset_id: &str,
        principal: Option<&str>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>> {
        validate::dataset_id(dataset_id)?;
        let limit = bounds::AUDIT_LIMIT.check_usize(limit)?;
        let records = self.catalog.list_audit(dataset_id, Some(limit)).await?;
        Ok(records
            .iter()
            .filter(|record| principal.is_none_or(|name| record.principal.as_deref() == Some(name)))
            .map(AuditEntry::from)
            .collect())
    }
}

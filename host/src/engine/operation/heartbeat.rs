//! `heartbeat`: the lease extended, so that recovery leaves a live slow writer alone.

use crate::bounds;
use crate::deliberate_bugs::{self, Bug};
use crate::engine::Engine;
use crate::error::{MendError, Result};
use crate::intent::Intent;
use crate::validate;

use super::OperationView;

/// How many times a heartbeat renews a lease whose intent changed phase between its read and
/// its write (each change is one step of the operation, and there are two).
const HEARTBEAT_ATTEMPTS: usize = 3;

impl Engine {
    /// Extends the lease of an operation that has not published, by `lease_ms` from now (the
    /// engine's intent lease when `None`). Refused once the operation ended: an abandoned
    /// operation's owner can never renew it.
    #[tracing::instrument(
        name = "operation_heartbeat",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = %operation_id)
    )]
    pub async fn heartbeat_operation(
        &self,
        dataset_id: &str,
        operation_id: &str,
        lease_ms: Option<u64>,
    ) -> Result<OperationView> {
        validate::dataset_id(dataset_id)?;
        validate::split_id(operation_id)?;
        let lease_ms = match lease_ms {
            Some(ms) => bounds::OPERATION_LEASE_MS.check(ms)? as i64,
            None => self.options.intent_lease_ms,
        };
        // The renewal is conditional on the phase read. A phase that moved since (a publish
        // confirmed it, recovery or an abort fenced it) refuses it; the heartbeat then reads
        // the intent again and renews the phase it finds, or answers why it cannot.
        let mut intent = self.live_intent(dataset_id, operation_id).await?;
        for _ in 0..HEARTBEAT_ATTEMPTS {
            let now = self.now_ms();
            let from = if deliberate_bugs::active(Bug::HeartbeatLeaseFromLastUpdate) {
                intent.updated_at_ms
            } else {
                now
            };
            let renewed = Intent {
                lease_expires_at_ms: from.saturating_add(lease_ms),
                updated_at_ms: now,
                ..intent.clone()
            };
            match self.catalog.update_intent(&renewed, intent.phase).await {
                Ok(()) => return Ok(self.view(&renewed, None, &[])),
                Err(MendError::NotFound { .. }) => {
                    return self.after_the_end(dataset_id, operation_id).await;
                }
                Err(MendError::FailedPrecondition { .. }) => {
                    intent = self.live_intent(dataset_id, operation_id).await?;
                }
                Err(error) => return Err(error),
            }
        }
        Err(MendError::Conflict {
            message: format!(
                "operation {operation_id}'s intent changed under {HEARTBEAT_ATTEMPTS} heartbeats in a row; nothing was renewed"
            ),
        })
    }
}

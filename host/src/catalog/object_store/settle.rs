//! A recovery sweep's batch of settlements ([`Catalog::settle_intents`]) as one commit: every
//! publish, its record, every mark and every intent delete of the batch in one log version,
//! decided on the exact state that version follows ([`crate::catalog::settle::plan`]), like
//! any other mutation of the commit loop. A batch that changes nothing writes nothing.
//!
//! [`Catalog::settle_intents`]: crate::catalog::Catalog::settle_intents

use std::collections::HashMap;

use crate::catalog::RecordedRequest;
use crate::intent::Intent;

use super::ObjectStoreCatalog;
use super::log_format::{Action, LogRow};
use super::mutations::Change;
use super::state::DatasetState;
use crate::catalog::SettleValidator;
use crate::catalog::settle::{self, SeenIntent, SettlePlan, SettleView, Settled, Settlement};
use crate::error::Result;
use crate::model::{SplitState, TimestampMs};

impl ObjectStoreCatalog {
    pub(super) async fn settle_intents_batch(
        &self,
        dataset_id: &str,
        settlements: &[Settlement],
        validate: &SettleValidator<'_>,
        now_ms: TimestampMs,
    ) -> Result<Vec<Settled>> {
        settle::check_batch(dataset_id, settlements)?;
        let write = crate::catalog::write_audit::pending(dataset_id, "settle", || {
            settlements.iter().map(Settlement::operation_id)
        });
        let answer = |settled: &Vec<Settled>| crate::catalog::write_audit::settled_answer(settled);
        self.mutate_recorded(
            dataset_id,
            now_ms,
            write.as_ref(),
            answer,
            |state, now_ms| {
                let planned =
                    settle::plan(&view(state, settlements)?, settlements, validate, now_ms)?;
                commit(state, planned, now_ms)
            },
        )
        .await
    }
}

/// What the batch reads of `state`.
fn view(state: &DatasetState, settlements: &[Settlement]) -> Result<SettleView> {
    let mut view = SettleView {
        dataset: Some(state.dataset.clone()),
        rows: HashMap::new(),
        intents: HashMap::new(),
        recorded: HashMap::new(),
    };
    for settlement in settlements {
        for split_id in settlement.split_ids() {
            if let Some(stored) = state.splits.get(split_id)? {
                view.rows.insert(split_id.clone(), stored.state);
            }
        }
        let operation_id = settlement.operation_id();
        if let Some(intent) = state.intents.get(operation_id) {
            let seen = SeenIntent {
                phase: intent.phase,
                intent: matches!(settlement, Settlement::Abandon { .. })
                    .then(|| Intent::clone(intent)),
            };
            view.intents.insert(operation_id.to_string(), seen);
        }
        if let Some(key) = settlement.record_key()
            && let Some(found) = state.recorded.get(key)
        {
            view.recorded
                .insert(key.to_string(), RecordedRequest::clone(found));
        }
    }
    Ok(view)
}

/// The planned batch as the actions of one commit on `state`.
fn commit(
    state: &DatasetState,
    planned: SettlePlan,
    now_ms: TimestampMs,
) -> Result<Change<Vec<Settled>>> {
    if planned.writes_nothing() {
        return Ok(Change::Unchanged(planned.outputs));
    }
    let mut rows = Vec::with_capacity(
        planned.published.len() + planned.replaced.len() + planned.abandoned_rows.len(),
    );
    for split_id in &planned.published {
        rows.push(LogRow {
            state: SplitState::Published,
            published_at_ms: Some(now_ms),
            updated_at_ms: now_ms,
            ..state.log_row(split_id)?
        });
    }
    for split_id in planned.replaced.iter().chain(&planned.abandoned_rows) {
        rows.push(state.marked_row(split_id, now_ms)?);
    }
    let mut actions = Vec::new();
    if !rows.is_empty() {
        actions.push(Action::PutSplits { rows });
    }
    if let Some(dataset) = planned.dataset {
        actions.push(Action::SetDataset { dataset });
    }
    actions.extend(
        planned
            .records
            .into_iter()
            .map(|record| Action::RecordRequest {
                record: Box::new(record),
            }),
    );
    actions.extend(
        planned
            .deleted_intents
            .into_iter()
            .map(|operation_id| Action::DeleteIntent { operation_id }),
    );
    Ok(Change::Commit {
        actions,
        output: planned.outputs,
    })
}

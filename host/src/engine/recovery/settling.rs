//! Executing a recovery sweep's decisions in batches (the module above decides and checks them).
//!
//! The decisions whose catalog effects are one [`Settlement`] each (a commit's or merge's
//! roll-forward: its publish and its intent's delete; a stale intent's delete; an
//! abandonment: its marks and its intent's delete) gather in a [`Batch`] while the sweep walks
//! its intents in order, and execute together: one append of their `executing` audit records,
//! one atomic catalog step ([`Catalog::settle_intents`], [`DurableStep::SettleIntents`]); their
//! settled records go with the sweep's next append (the next batch's `executing` records, or
//! the sweep's last append), so that a sweep of many batches appends once per batch, plus
//! once. Every other decision (a gc, a config apply, a reconcile, a roll-back) executes alone,
//! as one intent's steps.
//!
//! Order is kept wherever it could matter: a decision joins the batch only if it names no
//! split another decision of the batch names, and the batch is executed first whenever one
//! does, or a decision that executes alone comes; so every decision sees the effects of every
//! earlier one that touched its splits, as when they executed one at a time. Within a batch the
//! catalog applies them in order (checkpoint deltas chain).
//!
//! A batch the catalog refuses (one publish no longer applies, one lease was renewed) wrote
//! nothing; the sweep then settles its decisions one batch of one at a time, so each succeeds
//! or fails on its own as it always did. A batch whose outcome is unknown (the catalog
//! unreachable, a crash) is reported failed for all of its decisions, and the next sweep
//! observes what landed and decides again: a publish that landed is recorded under its key,
//! an intent deleted is gone.

use std::collections::{HashMap, HashSet};

use mend_contract::{IntentObservation, RecoveryDecision, RecoveryMode};

use super::observe::touched_splits;
use super::{IntentReport, Outcome, log_intent};
use crate::audit::AuditRecord;
use crate::catalog::settle::MAX_SETTLEMENTS;
use crate::catalog::{PublishObservation, Settled, Settlement};
use crate::engine::Engine;
use crate::error::{MendError, Result};
use crate::faults::DurableStep;
use crate::intent::{Intent, IntentPhase, OperationKind};
use crate::invariants;
use crate::model::{Dataset, PublishRequest};

/// What one sweep decided on, shared by its batches.
pub(super) struct Sweep<'a> {
    pub dataset_id: &'a str,
    pub mode: RecoveryMode,
    /// The time the sweep observed at.
    pub now_ms: i64,
    pub dataset: &'a Dataset,
    pub intents: &'a [Intent],
    pub observations: &'a [IntentObservation],
}

/// Decisions waiting to execute together, by their index in the sweep.
#[derive(Default)]
pub(super) struct Batch {
    entries: Vec<(usize, Settlement)>,
    /// Every split the batch's intents name.
    touched: HashSet<String>,
}

impl Batch {
    /// Whether `settlement` of `intent` may execute with the decisions already here.
    fn accepts(&self, intent: &Intent, settlement: &Settlement) -> bool {
        self.entries.len() < MAX_SETTLEMENTS
            && (matches!(settlement, Settlement::Discard { .. })
                || touched_splits(intent)
                    .iter()
                    .all(|split_id| !self.touched.contains(split_id)))
    }

    fn push(&mut self, index: usize, intent: &Intent, settlement: Settlement) {
        if !matches!(settlement, Settlement::Discard { .. }) {
            self.touched.extend(touched_splits(intent));
        }
        self.entries.push((index, settlement));
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

impl Engine {
    /// Adds the decision of the intent at `index` to `batch` if it settles as one catalog
    /// step, executing the batch first if the decision may not join it; otherwise executes the
    /// batch, then the decision alone. Every decision reaching here executes (the sweep checked
    /// it against the mode and the invariants).
    pub(super) async fn execute_in_order(
        &self,
        sweep: &Sweep<'_>,
        index: usize,
        batch: &mut Batch,
        reports: &mut [IntentReport],
        pending: &mut Vec<AuditRecord>,
    ) -> Result<()> {
        let intent = &sweep.intents[index];
        match self.settlement(sweep, index, &reports[index].decision) {
            Some(settlement) => {
                if !batch.accepts(intent, &settlement) {
                    self.execute_batch(sweep, batch, reports, pending).await?;
                }
                batch.push(index, intent, settlement);
                Ok(())
            }
            None => {
                self.execute_batch(sweep, batch, reports, pending).await?;
                self.execute_alone(sweep, index, reports, pending).await
            }
        }
    }

    /// What the decision of the intent at `index` writes to the catalog, if that is one
    /// settlement; `None` for a decision that executes alone. A publish that would fail
    /// before its atomic step (its limits, a capability) executes alone, to fail as it always
    /// did; so does one naming a split whose object this sweep did not read as planned
    /// (invariant 1 is then checked by a look for each object).
    fn settlement(
        &self,
        sweep: &Sweep<'_>,
        index: usize,
        decision: &RecoveryDecision,
    ) -> Option<Settlement> {
        let intent = &sweep.intents[index];
        let operation_id = intent.operation_id.clone();
        match (decision, intent.kind) {
            // Nothing of a config apply that lost is in place: dropping its intent undoes it.
            (RecoveryDecision::Stale, _)
            | (RecoveryDecision::RollBack, OperationKind::ConfigApply) => {
                Some(Settlement::Discard { operation_id })
            }
            (RecoveryDecision::RollForward, OperationKind::Commit | OperationKind::Merge) => {
                let Some(planned) = &intent.effects.publish else {
                    return Some(Settlement::Discard { operation_id });
                };
                // Carries the fencing epoch the sweep read (after exclusive recovery's bump),
                // so a sweep fenced out by a later exclusive one cannot publish either.
                let request =
                    planned.request(&intent.dataset_id, Some(sweep.dataset.fencing_epoch));
                self.check_publish(&request).ok()?;
                // Its objects were read in this sweep, as planned, while its rows were staged
                // (the policy rolls forward only then). A staged row's object is never deleted
                // (only a marked row's is, and a marked row never returns), and the batch
                // publishes only rows still staged: each object is still there.
                let matching: HashSet<&str> = sweep.observations[index]
                    .objects
                    .iter()
                    .filter(|object| object.matches)
                    .map(|object| object.split_id.as_str())
                    .collect();
                if !request
                    .staged_split_ids
                    .iter()
                    .all(|split_id| matching.contains(split_id.as_str()))
                {
                    return None;
                }
                Some(Settlement::Publish {
                    operation_id,
                    request,
                    // Recorded as the operation's own publish would be, so that its writer,
                    // asking again, is answered the result rather than "ended".
                    key: crate::engine::steps::publish_key(&intent.operation_id),
                })
            }
            // Only a commit or merge gets here (the sweep refuses the rest); a confirmed one
            // (its checkpoint delta overtaken) is fenced from its own phase, alone.
            (RecoveryDecision::Abandon(_), OperationKind::Commit | OperationKind::Merge)
                if intent.phase != IntentPhase::EffectsConfirmed =>
            {
                Some(Settlement::Abandon {
                    end: self.end_record(sweep.dataset_id, &operation_id),
                    operation_id,
                    observed: intent.phase,
                    // Its lease must have run out by the time the sweep observed.
                    lease_expired_by: sweep.now_ms,
                    // Its own rows, found when the batch executes.
                    mark: Vec::new(),
                })
            }
            _ => None,
        }
    }

    /// Executes the batch's decisions and empties it: their `executing` records (with the
    /// `pending` records before them), one catalog step; their settled records are left in
    /// `pending`, for the sweep's next append.
    pub(super) async fn execute_batch(
        &self,
        sweep: &Sweep<'_>,
        batch: &mut Batch,
        reports: &mut [IntentReport],
        pending: &mut Vec<AuditRecord>,
    ) -> Result<()> {
        let entries = std::mem::take(batch).entries;
        if entries.is_empty() {
            return Ok(());
        }
        let (indices, mut settlements): (Vec<usize>, Vec<Settlement>) = entries.into_iter().unzip();
        // The records first: no decision is ever executed without one (`audit.rs`).
        let mut executing = std::mem::take(pending);
        let first = executing.len();
        for &index in &indices {
            reports[index].outcome = Outcome::Executing;
            executing.push(self.audit_record(sweep, &reports[index], index));
        }
        self.durably(
            DurableStep::AppendAudit,
            self.catalog.append_audit(sweep.dataset_id, &executing),
        )
        .await?;

        let outcomes = match self
            .own_rows_of_abandonments(sweep, &indices, &mut settlements)
            .await
        {
            Ok(()) => self.settle(sweep, &indices, &settlements).await,
            Err(error) => vec![Outcome::Failed(error.to_string()); settlements.len()],
        };
        // The settled records go with the sweep's next append: the next batch's (or decision's)
        // `executing` records, or the sweep's last append. They follow this batch's effects
        // either way, and a sweep that stops before appending them leaves `executing` records
        // of intents that are gone, which says the decisions finished (`audit.rs`).
        for ((index, mut record), outcome) in indices
            .into_iter()
            .zip(executing.drain(first..))
            .zip(outcomes)
        {
            let report = &mut reports[index];
            report.outcome = outcome;
            log_intent(sweep.mode, report);
            record.recorded_at_ms = self.now_ms();
            record.outcome =
                serde_json::to_value(&report.outcome).expect("outcomes always serialise");
            pending.push(record);
        }
        Ok(())
    }

    /// Settles `settlements` (of the intents at `indices` of the sweep) in one catalog step;
    /// if the catalog refuses the batch (which then wrote nothing), one at a time. One outcome
    /// per settlement: `Executed`, or `Overtaken` where another step settled or changed the
    /// operation after the sweep observed it (the settlement found its intent gone, or was
    /// refused and the intent is no longer the one observed), or `Failed`.
    async fn settle(
        &self,
        sweep: &Sweep<'_>,
        indices: &[usize],
        settlements: &[Settlement],
    ) -> Vec<Outcome> {
        let validator = PolicyValidator {
            policy: self.policy(),
        };
        let settle = |settlements| {
            self.durably(
                DurableStep::SettleIntents,
                self.catalog.settle_intents(
                    sweep.dataset_id,
                    settlements,
                    &validator,
                    self.now_ms(),
                ),
            )
        };
        let results: Vec<Result<Option<Settled>>> = match settle(settlements).await {
            Ok(settled) => settled
                .into_iter()
                .map(|settled| Ok(Some(settled)))
                .collect(),
            // Refused whole, certainly: each on its own, so that one refusal fails only its
            // own decision.
            Err(error) if error.certainly_not_applied() && !error.is_retryable() => {
                if settlements.len() == 1 {
                    return self.outcomes(sweep, indices, vec![Err(error)]).await;
                }
                tracing::debug!(
                    %error,
                    settlements = settlements.len(),
                    "the catalog refused a batch of settlements; settling them one at a time"
                );
                let mut results = Vec::with_capacity(settlements.len());
                for settlement in settlements {
                    results.push(
                        settle(std::slice::from_ref(settlement))
                            .await
                            .map(|settled| settled.into_iter().next()),
                    );
                }
                results
            }
            // The outcome is unknown: the next sweep observes what landed.
            Err(error) => return vec![Outcome::Failed(error.to_string()); settlements.len()],
        };
        self.outcomes(sweep, indices, results).await
    }

    /// The outcome of each executed decision (of the intents at `indices`), from what its
    /// execution returned (a settlement's result, or `None` for a decision executed alone):
    /// `Executed`;
    /// `Overtaken` when the catalog found its intent gone, or refused it on state and the
    /// intent is no longer the one the sweep observed (the refusal was another step's win: a
    /// heartbeat renewed the lease, a publish confirmed it, an abort fenced it, not a failure
    /// anyone must look at); `Failed` otherwise.
    pub(super) async fn outcomes(
        &self,
        sweep: &Sweep<'_>,
        indices: &[usize],
        results: Vec<Result<Option<Settled>>>,
    ) -> Vec<Outcome> {
        let lost_on_state = |result: &Result<Option<Settled>>| {
            matches!(
                result,
                Err(MendError::FailedPrecondition { .. } | MendError::NotFound { .. })
            )
        };
        // Read again only when a refusal may have been a lost race; without it (the listing
        // failed too) the refusals stand as failures.
        let now = if results.iter().any(lost_on_state) {
            self.catalog.list_intents(sweep.dataset_id).await.ok()
        } else {
            None
        };
        indices
            .iter()
            .zip(results)
            .map(|(&index, result)| {
                let error = match result {
                    Ok(Some(Settled::Gone)) => {
                        return Outcome::Overtaken(
                            "its intent was gone when the sweep executed: the operation was settled another way first (published or aborted by its writer, or settled by another sweep); nothing was written for it".into(),
                        );
                    }
                    Ok(_) => return Outcome::Executed,
                    Err(error) => error,
                };
                let refused_on_state = matches!(
                    error,
                    MendError::FailedPrecondition { .. } | MendError::NotFound { .. }
                );
                let observed = &sweep.intents[index];
                let changed = now.as_ref().filter(|_| refused_on_state).and_then(|now| {
                    match now
                        .iter()
                        .find(|intent| intent.operation_id == observed.operation_id)
                    {
                        None => Some("its intent is gone".to_string()),
                        Some(intent) if intent.phase != observed.phase => {
                            Some(format!("its intent moved to phase {:?}", intent.phase))
                        }
                        Some(intent)
                            if intent.lease_expires_at_ms != observed.lease_expires_at_ms =>
                        {
                            Some("its owner renewed its lease".to_string())
                        }
                        Some(_) => None,
                    }
                });
                match changed {
                    Some(changed) => Outcome::Overtaken(format!(
                        "another step changed the operation after the sweep observed it ({changed}); nothing was executed: {error}"
                    )),
                    None => Outcome::Failed(error.to_string()),
                }
            })
            .collect()
    }

    /// Fills in the rows each abandonment of the batch marks: the rows its operation planned
    /// to stage that no other intent names (a row another operation names is left to it), as
    /// the intents are now. One listing for the batch, none without an abandonment.
    async fn own_rows_of_abandonments(
        &self,
        sweep: &Sweep<'_>,
        indices: &[usize],
        settlements: &mut [Settlement],
    ) -> Result<()> {
        if !settlements
            .iter()
            .any(|settlement| matches!(settlement, Settlement::Abandon { .. }))
        {
            return Ok(());
        }
        let listed = self.catalog.list_intents(sweep.dataset_id).await?;
        let mut named_by: HashMap<String, Vec<&str>> = HashMap::new();
        for intent in &listed {
            for split_id in touched_splits(intent) {
                named_by
                    .entry(split_id)
                    .or_default()
                    .push(intent.operation_id.as_str());
            }
        }
        for (&index, settlement) in indices.iter().zip(settlements.iter_mut()) {
            if let Settlement::Abandon { mark, .. } = settlement {
                let intent = &sweep.intents[index];
                let others_name = |split_id: &str| {
                    named_by.get(split_id).is_some_and(|operations| {
                        operations
                            .iter()
                            .any(|operation| *operation != intent.operation_id)
                    })
                };
                *mark = intent
                    .effects
                    .stage
                    .iter()
                    .map(|row| row.split_id.clone())
                    .filter(|split_id| !others_name(split_id))
                    .collect();
            }
        }
        Ok(())
    }

    /// One decision on its own: its `executing` record (with the `pending` records before
    /// it), its steps, its settled record.
    async fn execute_alone(
        &self,
        sweep: &Sweep<'_>,
        index: usize,
        reports: &mut [IntentReport],
        pending: &mut Vec<AuditRecord>,
    ) -> Result<()> {
        let report = &mut reports[index];
        report.outcome = Outcome::Executing;
        let mut records = std::mem::take(pending);
        let before = self.audit_record(sweep, report, index);
        records.push(before.clone());
        self.durably(
            DurableStep::AppendAudit,
            self.catalog.append_audit(sweep.dataset_id, &records),
        )
        .await?;
        let executed = self
            .execute(
                &sweep.intents[index],
                &report.decision,
                sweep.dataset,
                sweep.now_ms,
            )
            .await;
        let outcome = self
            .outcomes(sweep, &[index], vec![executed.map(|()| None)])
            .await
            .pop()
            .expect("one outcome per result");
        let report = &mut reports[index];
        report.outcome = outcome;
        log_intent(sweep.mode, report);
        let settled = AuditRecord {
            recorded_at_ms: self.now_ms(),
            outcome: serde_json::to_value(&report.outcome).expect("outcomes always serialise"),
            ..before
        };
        self.durably(
            DurableStep::AppendAudit,
            self.catalog.append_audit(sweep.dataset_id, &[settled]),
        )
        .await
    }
}

/// The policy's verdicts on the publishes of a batch of settlements, checked against the
/// invariants: one call into the policy for all of them (ABI 1.4).
struct PolicyValidator {
    policy: crate::runtime::PolicyRuntime,
}

impl crate::catalog::settle::ValidatePublishes for PolicyValidator {
    fn validate(&self, request: &PublishRequest, observation: &PublishObservation) -> Result<()> {
        let input = crate::engine::staging::publish_input(request, observation);
        let violations = self.policy.validate_publish(&input)?;
        invariants::checked_publish(request, observation, violations)
    }

    fn validate_all(
        &self,
        publishes: &[(&PublishRequest, &PublishObservation)],
    ) -> Vec<Result<()>> {
        let inputs: Vec<_> = publishes
            .iter()
            .map(|(request, observation)| {
                crate::engine::staging::publish_input(request, observation)
            })
            .collect();
        match self.policy.validate_publishes(&inputs) {
            Ok(verdicts) => publishes
                .iter()
                .zip(verdicts)
                .map(|((request, observation), violations)| {
                    invariants::checked_publish(request, observation, violations)
                })
                .collect(),
            // The call failed as a whole (a trap, a limit): so does every verdict of it.
            Err(error) => publishes
                .iter()
                .map(|_| Err(crate::MendError::from(error.clone())))
                .collect(),
        }
    }
}

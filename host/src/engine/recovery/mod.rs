//! The recovery sweep: observe every intent of a dataset, ask the policy, check each decision
//! against the mode and the invariants, execute, report.
//!
//! | mode           | executes                                  |
//! |----------------|-------------------------------------------|
//! | `probe`        | nothing: reports each intent's status     |
//! | `verify`       | nothing: also checks the invariants over the whole dataset, bucket included |
//! | `roll-forward` | stale intents, roll-forwards              |
//! | `exclusive`    | stale intents, roll-forwards, roll-backs  |
//!
//! A decision the host refuses (a roll-back outside exclusive mode, invariant 6; a
//! roll-forward that would publish a split whose object is missing, invariant 1; a roll-back
//! of a gc, whose marks are final) is reported with the reason and nothing is executed for it.
//! Every decision a roll-forward or exclusive sweep executes or refuses is audited
//! ([`AuditRecord`]): policy digest, semantics revision, a hash of the observation, the
//! decision and the outcome. Probe and verify write nothing, not even a record of a refusal.
//!
//! | kind         | roll forward                                 | roll back                          |
//! |--------------|----------------------------------------------|------------------------------------|
//! | commit/merge | publish as planned                           | unstage its rows, delete its objects |
//! | gc           | mark, delete objects, delete rows (again)    | refused                            |
//! | config apply | promote the staged config                    | drop the intent (nothing changed)  |
//! | reconcile    | stage missing rows, publish/mark its own     | unstage its rows; objects stay     |
//!
//! The sweep's steps, a file each: `observe` (what it decides on, as of one manifest version),
//! `decide` (the policy's decisions checked: one per intent, none the mode or the invariants
//! refuse), `settling` (the decisions that settle in batches) and `execute` (a decision that
//! runs alone, per operation kind, as the table above says). This file runs them in order and
//! reports.

mod decide;
mod execute;
mod observe;
mod settling;

use mend_contract::{RecoveryDecision, RecoveryInput, RecoveryMode};
use serde::{Deserialize, Serialize};

use self::decide::{check_one_decision_each, refusal, status_of};
use self::observe::{Observed, observations};
use self::settling::{Batch, Sweep};
use super::Engine;
use super::keyed::{Keyed, request_key};
use crate::audit::{AUDIT_FORMAT_VERSION, AuditRecord, DecisionInput};
use crate::catalog::CatalogExt;
use crate::error::Result;
use crate::faults::DurableStep;
use crate::gates::{ExclusivePermit, GateName, GateSession};
use crate::intent::OperationKind;
use crate::model::TimestampMs;
use crate::objects::format::sha256_of_json;
use crate::validate;

/// What an intent needs, as a probe reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum IntentStatus {
    /// Already settled: only the intent itself is left.
    Clean,
    /// Its effects are all in place or can be completed: roll-forward publishes or promotes it.
    RollForwardRequired,
    /// Only exclusive mode may settle it, by undoing what it did.
    NeedsCompensation,
    /// Neither: an operator must decide (the decision says why and what to do).
    Blocked,
    /// Its owner may still be working.
    Deferred,
    /// Unconfirmed, and its owner's lease ran out (or it was fenced already): roll-forward
    /// abandons it (fenced, its staged rows marked, its objects left to gc).
    Abandoned,
}

/// What the sweep did about one intent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = RecoveryOutcome))]
#[serde(tag = "outcome", content = "detail", rename_all = "snake_case")]
pub enum Outcome {
    /// Nothing was to be executed (probe, verify, defer, blocked).
    Reported,
    /// Only in audit records: the host was about to execute the decision. A settled record
    /// (`executed` or `failed`) follows unless the process stopped first; see the module doc.
    Executing,
    /// The decision was executed.
    Executed,
    /// The host refused the decision; nothing was executed.
    Refused(String),
    /// Another step changed the operation after the sweep observed it (its writer published,
    /// confirmed, renewed or aborted it; another sweep settled it), so the decision no longer
    /// applied and nothing was executed: what the reason says happened instead. Not a failure:
    /// the next sweep decides on what it finds.
    Overtaken(String),
    /// Execution failed part way; the intent stays for the next sweep.
    Failed(String),
}

/// What a sweep found and did about one intent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IntentReport {
    /// The operation the intent belongs to.
    pub operation_id: String,
    /// What kind of operation.
    pub kind: OperationKind,
    /// Its phase as the sweep observed it. An `abandoned` one was fenced before this sweep
    /// (by its writer's abort, an exclusive roll-back, an overtaken publish or an earlier
    /// sweep that stopped part way): abandoning it finishes what that fence began, and takes
    /// over no writer. An `armed` one abandoned here was fenced by this sweep, its lease
    /// having run out.
    pub phase: crate::intent::IntentPhase,
    /// What it needs.
    pub status: IntentStatus,
    /// What the policy decided.
    pub decision: RecoveryDecision,
    /// What the host did with that.
    pub outcome: Outcome,
}

/// What a recovery sweep of one dataset found and did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecoveryReport {
    /// The dataset swept.
    pub dataset_id: String,
    /// The mode it ran in.
    pub mode: RecoveryMode,
    /// The policy that decided, by digest.
    pub policy_digest: String,
    /// One report per intent, oldest intent first.
    pub intents: Vec<IntentReport>,
    /// In verify mode, the invariants checked over the whole dataset, bucket included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<super::VerifyReport>,
}

impl RecoveryReport {
    /// How many intents have `status`.
    pub fn count(&self, status: IntentStatus) -> usize {
        self.intents.iter().filter(|i| i.status == status).count()
    }
}

/// A roll-forward sweep as a supervisor ran it: its report, and the dataset gate it held,
/// so that a fleet can show that no two replicas ever swept a dataset at once.
#[derive(Debug, Clone)]
pub struct GatedSweep {
    /// What the sweep did.
    pub report: RecoveryReport,
    /// The dataset gate's fencing epoch while the sweep held it (0 where the gates have
    /// none: Postgres advisory locks, which no two sessions hold at once).
    pub gate_epoch: u64,
    /// When the gate was taken, by the engine's clock.
    pub held_from_ms: TimestampMs,
    /// When the sweep ended, just before the gate was released; or, when the hold was lost
    /// part way (its lease ran out before a renewal landed: the process, or its renewal,
    /// paused past it), when its lease ran out: every durable write of the sweep checks the
    /// hold before it begins, so none began later (`held_from_ms` itself if it ran out before
    /// the sweep began: the sweep held nothing).
    pub held_until_ms: TimestampMs,
}

impl Engine {
    /// [`Engine::recover`] in roll-forward mode, reporting the dataset gate the sweep held.
    pub async fn roll_forward_gated(&self, dataset_id: &str) -> Result<GatedSweep> {
        validate::dataset_id(dataset_id)?;
        let gate = GateName::dataset(dataset_id);
        let held = self.take_gates([gate.clone()]).await?;
        let gate_epoch = held.fencing_epoch(&gate).unwrap_or(0);
        let held_from_ms = self.now_ms();
        let swept = self
            .holding(held.holds())
            .sweep(dataset_id, RecoveryMode::RollForward)
            .await;
        let ended_ms = self.now_ms();
        // mend-sim (a store request stalled past the gate's lease): a sweep that lost its
        // gate part way reported holding it to its end, overlapping the sweep of the replica
        // that took the gate over.
        let held_until_ms = match held
            .guard(&gate)
            .and_then(|guard| guard.hold().expires_at_ms())
        {
            // A lease that ran out before the sweep began (the acquisition itself paused past
            // it) held nothing: an empty hold.
            Some(expired_at_ms) if held.check_held().is_err() => {
                ended_ms.min(expired_at_ms).max(held_from_ms)
            }
            _ => ended_ms,
        };
        // A release that fails still ends the hold (the connection closes or the lease runs
        // out); the sweep's own result is what the caller needs.
        let _ = held.release().await;
        Ok(GatedSweep {
            report: swept?,
            gate_epoch,
            held_from_ms,
            held_until_ms,
        })
    }
}

impl Engine {
    /// Sweeps the dataset's intents in `mode`.
    ///
    /// Probe and verify take no gate (they write nothing, not even a lease); roll-forward
    /// holds the dataset gate; exclusive holds the [`ExclusivePermit`] and bumps the dataset's
    /// fencing epoch before it looks, so that no writer that began before it can publish
    /// after it.
    ///
    /// Under an idempotency key a roll-forward or exclusive sweep records its report when it
    /// ends, and a retry answers it (an exclusive one does not fence writers a second time).
    /// Probe and verify write nothing, not even a record (invariant 6): the key is checked
    /// and the read simply runs again.
    pub fn recover<'a>(
        &'a self,
        dataset_id: &'a str,
        mode: RecoveryMode,
    ) -> Keyed<'a, RecoveryReport> {
        Keyed::new(self.write_scope("recover"), move |key| async move {
            let key = request_key(key, &("recover", dataset_id, mode))?;
            validate::dataset_id(dataset_id)?;
            let key = match mode {
                RecoveryMode::Probe | RecoveryMode::Verify => None,
                RecoveryMode::RollForward | RecoveryMode::Exclusive => key,
            };
            self.run_recorded(dataset_id, key.as_ref(), self.recover_run(dataset_id, mode))
                .await
        })
    }

    #[tracing::instrument(
        name = "recover",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, mode = %mode_name(mode))
    )]
    async fn recover_run(&self, dataset_id: &str, mode: RecoveryMode) -> Result<RecoveryReport> {
        validate::dataset_id(dataset_id)?;
        match mode {
            RecoveryMode::Probe => self.sweep(dataset_id, mode).await,
            RecoveryMode::Verify => {
                let mut report = self.sweep(dataset_id, mode).await?;
                report.verify = Some(self.verify(dataset_id).await?);
                Ok(report)
            }
            RecoveryMode::RollForward => {
                self.under_gates([GateName::dataset(dataset_id)], |engine| async move {
                    engine.sweep(dataset_id, mode).await
                })
                .await
            }
            RecoveryMode::Exclusive => {
                let permit = ExclusivePermit::acquire(
                    &*self.gates,
                    &GateSession::new(),
                    dataset_id,
                    self.options.gate_timeout,
                )
                .await?;
                // Every write of the sweep checks first that the permit still stands.
                let holding = self.holding(permit.holds());
                let result = async {
                    // Every writer that began before the permit is fenced out from here on.
                    holding
                        .durably(
                            DurableStep::FenceWriters,
                            holding
                                .catalog
                                .advance_fencing_epoch(dataset_id, holding.now_ms()),
                        )
                        .await?;
                    holding.sweep(dataset_id, mode).await
                }
                .await;
                let _ = permit.release().await;
                result
            }
        }
    }

    async fn sweep(&self, dataset_id: &str, mode: RecoveryMode) -> Result<RecoveryReport> {
        // One policy decides and is audited for the whole sweep.
        let pinned = self.pinned();
        pinned.sweep_pinned(dataset_id, mode).await
    }

    async fn sweep_pinned(&self, dataset_id: &str, mode: RecoveryMode) -> Result<RecoveryReport> {
        let Observed {
            dataset,
            intents,
            objects,
            payloads_read,
            rows,
            promotions_recorded,
        } = self.observe(dataset_id, mode).await?;
        let now_ms = self.now_ms();
        let progress = &self.options.progress;
        let observations = observations(
            &intents,
            objects,
            &dataset,
            &rows,
            &promotions_recorded,
            now_ms,
        );
        let input = RecoveryInput {
            dataset_id: dataset_id.to_string(),
            mode,
            now_ms,
            intents: observations,
        };
        let decisions = self.policy().decide_recovery(&input)?;
        check_one_decision_each(&intents, &decisions)?;
        let observations = input.intents;

        let read_only = matches!(mode, RecoveryMode::Probe | RecoveryMode::Verify);
        let sweep = Sweep {
            dataset_id,
            mode,
            now_ms,
            dataset: &dataset,
            intents: &intents,
            observations: &observations,
        };
        let mut reports = Vec::with_capacity(intents.len());
        // Decisions executing together (`settling.rs`), and the audit records waiting for the
        // sweep's next append (refusals', a batch's settled ones).
        let mut batch = Batch::default();
        let mut pending: Vec<AuditRecord> = Vec::new();
        progress.begin("resolve intents", intents.len());
        for (index, ((intent, observation), decision)) in
            intents.iter().zip(&observations).zip(decisions).enumerate()
        {
            let mut report = IntentReport {
                operation_id: intent.operation_id.clone(),
                kind: intent.kind,
                phase: intent.phase,
                status: status_of(&decision.decision),
                decision: decision.decision,
                outcome: Outcome::Reported,
            };
            let reason = refusal(
                mode,
                intent,
                observation,
                &dataset,
                payloads_read[index],
                &report.decision,
                now_ms,
            );
            let executes = reason.is_none()
                && !read_only
                && !matches!(
                    report.decision,
                    RecoveryDecision::Defer(_) | RecoveryDecision::Blocked(_)
                );
            if let Some(reason) = reason {
                report.outcome = Outcome::Refused(reason);
            }
            reports.push(report);
            if executes {
                self.execute_in_order(&sweep, index, &mut batch, &mut reports, &mut pending)
                    .await?;
            } else {
                let report = &reports[index];
                log_intent(mode, report);
                // Every decision the host acted on or refused is audited, except in probe and
                // verify, which write nothing at all (invariant 6). Merely reported ones are
                // not (a supervisor deferring to a live owner every few seconds would only
                // flood the trail).
                if report.outcome != Outcome::Reported && !read_only {
                    pending.push(self.audit_record(&sweep, report, index));
                }
            }
            progress.advance(reports.len() - batch.len());
        }
        self.finish_sweep(&sweep, batch, reports, pending).await
    }

    /// The sweep's last batch executed, the audit records still waiting appended, and its
    /// report.
    async fn finish_sweep(
        &self,
        sweep: &Sweep<'_>,
        mut batch: Batch,
        mut reports: Vec<IntentReport>,
        mut pending: Vec<AuditRecord>,
    ) -> Result<RecoveryReport> {
        let (dataset_id, mode) = (sweep.dataset_id, sweep.mode);
        let progress = &self.options.progress;
        self.execute_batch(sweep, &mut batch, &mut reports, &mut pending)
            .await?;
        if !pending.is_empty() {
            self.durably(
                DurableStep::AppendAudit,
                self.catalog.append_audit(dataset_id, &pending),
            )
            .await?;
        }
        progress.advance(reports.len());
        progress.end();
        let report = RecoveryReport {
            dataset_id: dataset_id.to_string(),
            mode,
            policy_digest: self.policy().digest().to_string(),
            intents: reports,
            verify: None,
        };
        log_sweep(&report);
        Ok(report)
    }

    /// The audit record of the decision on the intent at `index` of `sweep`, as `report`
    /// says it now.
    fn audit_record(&self, sweep: &Sweep<'_>, report: &IntentReport, index: usize) -> AuditRecord {
        let observation = &sweep.observations[index];
        AuditRecord {
            format_version: AUDIT_FORMAT_VERSION,
            principal: self.actor().map(str::to_owned),
            dataset_id: sweep.dataset_id.to_string(),
            operation_id: report.operation_id.clone(),
            recorded_at_ms: self.now_ms(),
            mode: mode_name(sweep.mode).to_string(),
            policy_digest: self.policy().digest().to_string(),
            semantics_revision: self.policy().description().semantics_revision,
            inputs_hash: sha256_of_json(observation),
            decision: serde_json::to_value(&report.decision).expect("decisions always serialise"),
            outcome: serde_json::to_value(&report.outcome).expect("outcomes always serialise"),
            inputs: Some(DecisionInput::DecideRecovery {
                dataset_id: sweep.dataset_id.to_string(),
                mode: sweep.mode,
                now_ms: sweep.now_ms,
                intent: observation.clone(),
            }),
        }
    }
}

fn kind_name(kind: OperationKind) -> &'static str {
    match kind {
        OperationKind::Commit => "commit",
        OperationKind::Merge => "merge",
        OperationKind::Gc => "gc",
        OperationKind::ConfigApply => "config apply",
        OperationKind::Reconcile => "reconcile",
    }
}

/// One intent's decision and outcome: a warning when the host refused it or its execution
/// failed in a sweep that writes (it stays for the next sweep, or for an operator), else
/// at debug.
fn log_intent(mode: RecoveryMode, report: &IntentReport) {
    let read_only = matches!(mode, RecoveryMode::Probe | RecoveryMode::Verify);
    match &report.outcome {
        Outcome::Refused(reason) if !read_only => tracing::warn!(
            operation_id = %report.operation_id,
            kind = ?report.kind,
            decision = ?report.decision,
            %reason,
            "recovery refused the policy's decision; nothing was executed for this intent"
        ),
        Outcome::Failed(error) => tracing::warn!(
            operation_id = %report.operation_id,
            kind = ?report.kind,
            decision = ?report.decision,
            %error,
            "executing a recovery decision failed; the intent stays for the next sweep"
        ),
        outcome => tracing::debug!(
            operation_id = %report.operation_id,
            kind = ?report.kind,
            status = ?report.status,
            decision = ?report.decision,
            ?outcome,
            "intent resolved"
        ),
    }
}

/// A sweep's counts: at info when a sweep that writes executed, refused or failed anything,
/// at debug otherwise (a probe, a verify, a supervisor's sweep that only deferred).
fn log_sweep(report: &RecoveryReport) {
    let count = |wanted: fn(&Outcome) -> bool| {
        report
            .intents
            .iter()
            .filter(|intent| wanted(&intent.outcome))
            .count()
    };
    let executed = count(|outcome| *outcome == Outcome::Executed);
    let refused = count(|outcome| matches!(outcome, Outcome::Refused(_)));
    let failed = count(|outcome| matches!(outcome, Outcome::Failed(_)));
    let blocked = report.count(IntentStatus::Blocked);
    let deferred = report.count(IntentStatus::Deferred);
    let read_only = matches!(report.mode, RecoveryMode::Probe | RecoveryMode::Verify);
    macro_rules! sweep_event {
        ($level:expr) => {
            tracing::event!(
                $level,
                intents = report.intents.len(),
                executed,
                refused,
                failed,
                blocked,
                deferred,
                policy_digest = %report.policy_digest,
                "recovery sweep finished"
            )
        };
    }
    if !read_only && executed + refused + failed > 0 {
        sweep_event!(tracing::Level::INFO);
    } else {
        sweep_event!(tracing::Level::DEBUG);
    }
}

fn mode_name(mode: RecoveryMode) -> &'static str {
    match mode {
        RecoveryMode::Probe => "probe",
        RecoveryMode::RollForward => "roll-forward",
        RecoveryMode::Exclusive => "exclusive",
        RecoveryMode::Verify => "verify",
    }
}

fn policy_kind(kind: OperationKind) -> mend_contract::OperationKind {
    match kind {
        OperationKind::Commit => mend_contract::OperationKind::Commit,
        OperationKind::Merge => mend_contract::OperationKind::Merge,
        OperationKind::Gc => mend_contract::OperationKind::Gc,
        OperationKind::ConfigApply => mend_contract::OperationKind::ConfigApply,
        OperationKind::Reconcile => mend_contract::OperationKind::Reconcile,
    }
}

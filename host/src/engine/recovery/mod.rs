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

mod settling;

use std::collections::{BTreeSet, HashMap, HashSet};

use futures::StreamExt;

use mend_contract::{
    ExistingRow, IntentDecision, IntentObservation, ObjectObservation, RecoveryDecision,
    RecoveryInput, RecoveryMode,
};
use serde::{Deserialize, Serialize};

use self::settling::{Batch, Sweep};
use super::Engine;
use super::keyed::{Keyed, request_key};
use crate::audit::{AUDIT_FORMAT_VERSION, AuditRecord, DecisionInput};
use crate::error::{MendError, Result};
use crate::faults::DurableStep;
use crate::gates::{ExclusivePermit, GateName, GateSession};
use crate::intent::{Intent, IntentPhase, OperationKind};
use crate::model::{Dataset, ListQuery, SplitState, TimestampMs};
use crate::objects::FoundObject;
use crate::objects::format::sha256;
use crate::validate;

/// How many intents a sweep observes at once.
const OBSERVE_CONCURRENCY: usize = 16;
/// How many times a sweep reads what it decides on when the dataset keeps moving meanwhile
/// ([`Engine::observe`]).
const OBSERVE_ATTEMPTS: usize = 3;

/// What a sweep read to decide on, as of one manifest version where it could.
struct Observed {
    dataset: Dataset,
    intents: Vec<Intent>,
    /// Per intent, in order: what is in the store of each object it plans.
    objects: Vec<Vec<ObjectObservation>>,
    /// Per intent, in order: whether its objects' payloads were read back and hashed.
    payloads_read: Vec<bool>,
    /// The rows of every split an intent touches.
    rows: Vec<ExistingRow>,
    /// The config applies among the intents whose promotion is recorded: it happened, whatever
    /// was promoted after it.
    promotions_recorded: BTreeSet<String>,
}

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

    /// What a sweep decides on: the dataset, its intents, their objects and the rows of their
    /// splits, read as of one manifest version. The reads are several, so a publish landing in
    /// the middle of them (an operation's writer, another replica) would show the sweep an
    /// intent from before it and rows or a checkpoint from after it: an operation published a
    /// moment ago would look blocked ("its publish no longer applies"), or abandoned. The
    /// manifest version, which every publish, mark and delete moves on, is read before and
    /// after; if it moved, everything is read again, up to [`OBSERVE_ATTEMPTS`] times (a
    /// dataset publishing without pause keeps the last reading; every decision still executes
    /// by conditional writes, so a stale one is refused, never applied).
    async fn observe(&self, dataset_id: &str, mode: RecoveryMode) -> Result<Observed> {
        let progress = &self.options.progress;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let dataset = self.catalog.dataset(dataset_id).await?;
            let intents = self.catalog.list_intents(dataset_id).await?;
            let read_now = self.now_ms();
            let payloads_read: Vec<bool> = intents
                .iter()
                .map(|intent| payloads_to_read(intent, mode, read_now))
                .collect();
            progress.begin("observe intents", intents.len());
            // Observing is reads only, one intent independent of the next: the objects of
            // several intents at a time (each intent's reads are independent, so whichever
            // finishes first makes room for the next), while the rows of every intent's splits
            // are read in a few batched listings rather than one per intent.
            // The futures are made up front: a stream that maps borrowed intents lazily would
            // make the sweep's future not `Send` for every lifetime, and so not spawnable.
            let reading_objects = async {
                let reads: Vec<_> = intents
                    .iter()
                    .enumerate()
                    .zip(&payloads_read)
                    .map(|((index, intent), &read_payloads)| async move {
                        (index, self.observe_objects(intent, read_payloads).await)
                    })
                    .collect();
                let mut found: Vec<Option<Vec<ObjectObservation>>> =
                    intents.iter().map(|_| None).collect();
                let mut reading =
                    futures::stream::iter(reads).buffer_unordered(OBSERVE_CONCURRENCY);
                let mut done = 0;
                while let Some((index, objects)) = reading.next().await {
                    found[index] = Some(objects?);
                    done += 1;
                    progress.advance(done);
                }
                Ok::<_, MendError>(
                    found
                        .into_iter()
                        .map(|objects| objects.expect("every intent's objects were read"))
                        .collect::<Vec<_>>(),
                )
            };
            let (objects, rows, promotions_recorded) = futures::try_join!(
                reading_objects,
                self.states_touched_by(dataset_id, &intents),
                self.promotions_recorded(dataset_id, &intents)
            )?;
            progress.end();
            let after = self.catalog.probe_manifest(dataset_id).await?;
            if after.manifest_version == dataset.manifest_version || attempt >= OBSERVE_ATTEMPTS {
                return Ok(Observed {
                    dataset,
                    intents,
                    objects,
                    payloads_read,
                    rows,
                    promotions_recorded,
                });
            }
            tracing::debug!(
                dataset_id,
                before = dataset.manifest_version,
                after = after.manifest_version,
                "the dataset moved while the sweep observed it; observing again"
            );
        }
    }

    /// The audit record of the decision on the intent at `index` of `sweep`, as `report`
    /// says it now.
    fn audit_record(&self, sweep: &Sweep<'_>, report: &IntentReport, index: usize) -> AuditRecord {
        let observation = &sweep.observations[index];
        let canonical = serde_json::to_vec(observation).expect("observations always serialise");
        AuditRecord {
            format_version: AUDIT_FORMAT_VERSION,
            principal: self.actor().map(str::to_owned),
            dataset_id: sweep.dataset_id.to_string(),
            operation_id: report.operation_id.clone(),
            recorded_at_ms: self.now_ms(),
            mode: mode_name(sweep.mode).to_string(),
            policy_digest: self.policy().digest().to_string(),
            semantics_revision: self.policy().description().semantics_revision,
            inputs_hash: sha256(&canonical),
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

    /// The config applies among `intents` whose promotion is recorded. A config apply whose
    /// promotion landed and whose intent was not deleted (its process died between the two, or
    /// its answer was lost and its keyed retry answered the record) is settled: once another
    /// config is promoted after it, the dataset's config no longer shows it, and only the
    /// record does (mend-sim found such an intent blocking every roll-forward sweep).
    async fn promotions_recorded(
        &self,
        dataset_id: &str,
        intents: &[Intent],
    ) -> Result<BTreeSet<String>> {
        let mut recorded = BTreeSet::new();
        for intent in intents {
            if intent.kind == OperationKind::ConfigApply
                && self
                    .catalog
                    .recorded_request(
                        dataset_id,
                        &crate::engine::config_apply::promotion_record_key(&intent.operation_id),
                    )
                    .await?
                    .is_some()
            {
                recorded.insert(intent.operation_id.clone());
            }
        }
        Ok(recorded)
    }

    /// The state of every split any of `intents` touches, read by id in batches.
    async fn states_touched_by(
        &self,
        dataset_id: &str,
        intents: &[Intent],
    ) -> Result<Vec<ExistingRow>> {
        /// Ids per read: large enough to amortise a round trip, small enough to keep one
        /// statement or request modest.
        const BATCH: usize = 1_000;
        let touched: BTreeSet<String> = intents.iter().flat_map(touched_splits).collect();
        let touched: Vec<String> = touched.into_iter().collect();
        let mut rows = Vec::with_capacity(touched.len());
        for ids in touched.chunks(BATCH) {
            rows.extend(self.catalog.split_states(dataset_id, ids).await?);
        }
        Ok(rows)
    }

    /// What is in the store of each object `intent` plans: present, and as planned. The object
    /// of another operation that staged through the protocol is none of this one's: absent.
    ///
    /// With `read_payloads`, "as planned" is proven: each object is read back and its payload
    /// hashed against the planned sha256 (an object this process received or read back already
    /// is not read again). Otherwise its header is compared, which is enough to decide to wait
    /// or to undo, never to publish: see [`payloads_to_read`].
    async fn observe_objects(
        &self,
        intent: &Intent,
        read_payloads: bool,
    ) -> Result<Vec<ObjectObservation>> {
        let mut objects = Vec::with_capacity(intent.effects.objects.len());
        for planned in &intent.effects.objects {
            // A reconcile plans objects other operations wrote; every other kind, its own.
            let ours = |header: &crate::objects::format::SplitObjectHeader| {
                intent.kind == OperationKind::Reconcile
                    || header.operation_id.as_deref() == Some(intent.operation_id.as_str())
            };
            let expected = |header: &crate::objects::format::SplitObjectHeader, size: u64| {
                size == planned.size && header.payload_sha256 == planned.checksum && ours(header)
            };
            // The operation another split object's header names, when it is not this one.
            let anothers = |found: &crate::objects::FoundObject| {
                found
                    .split()
                    .and_then(|(header, _)| header.operation_id.clone())
                    .filter(|id| {
                        intent.kind != OperationKind::Reconcile && *id != intent.operation_id
                    })
            };
            let (present, matches, others) = if !read_payloads {
                // Bytes that are not a split object count as an object, not the one planned.
                let found = self
                    .objects
                    .inspect(&intent.dataset_id, &planned.split_id)
                    .await?;
                let matches = found
                    .split()
                    .is_some_and(|(header, size)| expected(header, size));
                (found != FoundObject::Missing, matches, anothers(&found))
            } else if self.uploaded.holds(
                &intent.dataset_id,
                &intent.operation_id,
                &planned.split_id,
                planned.size,
                &planned.checksum,
            ) {
                (true, true, None)
            } else {
                let found = self
                    .objects
                    .read_back(&intent.dataset_id, &planned.split_id, &expected)
                    .await?;
                let others = match &found {
                    crate::objects::ReadBack::Other { found } => anothers(found),
                    _ => None,
                };
                if found.intact() {
                    self.uploaded.remember(
                        &intent.dataset_id,
                        &intent.operation_id,
                        &planned.split_id,
                        planned.size,
                        &planned.checksum,
                    );
                }
                (found.present(), found.intact(), others)
            };
            // An object another operation of the protocol wrote, one that staged its rows, is
            // that operation's, not damage to this one: two operations with the same split ids
            // (a begin sent again without an operation id is a second operation), the second
            // staging the rows the first planned, after the first died before staging, and
            // writing its own object where the first's would go. Nothing of this operation is
            // at the path: it is observed absent, so the operation can be abandoned once its
            // lease runs out (abandonment deletes no object and marks only rows still staged
            // that no other intent names), where "damage" blocked every sweep until an
            // operator came (simulator seed 7, a writer without operation ids). An object
            // naming an operation the catalog has no staging of stays damage: it may be an
            // orphan reconcile would adopt, which marking this operation's row would let gc
            // delete.
            let present = match &others {
                Some(other) if present && !matches => {
                    !self.began(&intent.dataset_id, other).await?
                }
                _ => present,
            };
            objects.push(ObjectObservation {
                split_id: planned.split_id.clone(),
                present,
                matches,
            });
        }
        Ok(objects)
    }

    /// Carries out a checked decision that executes something (not a defer or a blocked).
    /// Publishes carry the fencing epoch the sweep read (after exclusive recovery's bump), so a
    /// sweep fenced out by a later exclusive one cannot publish either. `now_ms` is the time
    /// the sweep observed at: an abandonment fences only an intent whose lease ran out by then.
    async fn execute(
        &self,
        intent: &Intent,
        decision: &RecoveryDecision,
        dataset: &Dataset,
        now_ms: i64,
    ) -> Result<()> {
        match (decision, intent.kind) {
            (RecoveryDecision::Defer(_) | RecoveryDecision::Blocked(_), _) => return Ok(()),
            (RecoveryDecision::Abandon(_), _) => {
                let fenced = self.fence(intent, Some(now_ms)).await?;
                return self.finish_abandoned(&fenced).await;
            }
            (RecoveryDecision::Stale, _) => {}
            (RecoveryDecision::RollForward, OperationKind::Commit | OperationKind::Merge) => {
                if let Some(planned) = &intent.effects.publish {
                    let publish = planned.request(&intent.dataset_id, Some(dataset.fencing_epoch));
                    // Recorded as the operation's own publish would be, so that its writer,
                    // asking again, is answered the result rather than "ended"; and only while
                    // its intent is there and not fenced, checked in the publish's own atomic
                    // step: an abort or an abandonment that landed first wins, and this
                    // roll-forward then publishes nothing.
                    let key = crate::engine::steps::publish_key(&intent.operation_id);
                    self.durably(
                        DurableStep::Publish,
                        self.publish_settling(intent, &publish, &key),
                    )
                    .await?;
                    return Ok(());
                }
            }
            // Its splits to mark were read when the intent was created: one touched since is
            // left alone. (A format 1 intent planned them by the staged grace period, so they
            // were untouched for longer still; the same cutoff holds for it.)
            (RecoveryDecision::RollForward, OperationKind::Gc) => {
                self.run_gc(intent, intent.created_at_ms).await?;
            }
            (RecoveryDecision::RollForward, OperationKind::ConfigApply) => {
                self.promote_config(intent).await?;
            }
            (RecoveryDecision::RollForward, OperationKind::Reconcile) => {
                self.finish_reconcile(intent, dataset.fencing_epoch).await?;
            }
            // A config apply that lost to another change never changed anything.
            (RecoveryDecision::RollBack, OperationKind::ConfigApply) => {}
            (RecoveryDecision::RollBack, OperationKind::Commit | OperationKind::Merge) => {
                self.fence(intent, None).await?;
                self.record_end(&intent.dataset_id, &intent.operation_id)
                    .await?;
                self.roll_back_staging(intent).await?;
            }
            (RecoveryDecision::RollBack, _) => self.roll_back_staging(intent).await?,
        }
        self.finish_intent(&intent.dataset_id, &intent.operation_id)
            .await
    }

    /// What abandoning an operation does once it is fenced (phase `Abandoned`): marks its own
    /// rows that are still staged, then deletes the intent. Its objects are left for gc, which
    /// removes them with their marked rows after the deletion grace period. A row another
    /// intent names is skipped, as [`Engine::roll_back_staging`] skips it; a row published
    /// meanwhile is never touched, since the mark is conditional at the write
    /// (`mark_stale_staged` with an unbounded cutoff). Safe to repeat from any point: a sweep
    /// that stopped after fencing finishes it the next time.
    pub(super) async fn finish_abandoned(&self, intent: &Intent) -> Result<()> {
        let others = self
            .splits_named_by_intents(&intent.dataset_id, Some(&intent.operation_id))
            .await?;
        let own: Vec<String> = intent
            .effects
            .stage
            .iter()
            .map(|row| row.split_id.clone())
            .filter(|id| !others.contains(id))
            .collect();
        if !own.is_empty() {
            self.durably(
                DurableStep::MarkRows,
                self.catalog.mark_stale_staged(
                    &intent.dataset_id,
                    &own,
                    TimestampMs::MAX,
                    self.now_ms(),
                ),
            )
            .await?;
        }
        self.end_and_finish(&intent.dataset_id, &intent.operation_id)
            .await
    }

    /// Fences a commit or merge recovery abandons or rolls back, by one conditional write on
    /// the phase the sweep observed, before any of its rows is touched; returns the intent as
    /// fenced. `Armed` to `Abandoned` only if its lease ran out by `lease_expired_by` (`None`:
    /// whatever its lease, exclusive recovery's roll-back); `EffectsConfirmed` to `Abandoned`
    /// for an operation whose publish can never apply (its checkpoint delta was overtaken, or
    /// exclusive recovery rolls it back). Every publish of an operation (its writer's, a
    /// roll-forward, an in-process commit's) is conditional on its intent not being fenced,
    /// so none lands after this; and an operation that moved after the sweep observed it
    /// wins: the write fails, the sweep reports it overtaken and the next one decides again
    /// (found by mend-model: an exclusive roll-back marked rows that its writer, confirmed
    /// after the sweep observed it, was publishing).
    async fn fence(
        &self,
        intent: &Intent,
        lease_expired_by: Option<TimestampMs>,
    ) -> Result<Intent> {
        match intent.phase {
            IntentPhase::Abandoned => Ok(intent.clone()),
            IntentPhase::Armed => {
                self.durably(
                    DurableStep::AbandonIntent,
                    self.catalog.abandon_intent(
                        &intent.dataset_id,
                        &intent.operation_id,
                        lease_expired_by,
                        self.now_ms(),
                    ),
                )
                .await
            }
            IntentPhase::EffectsConfirmed => {
                let fenced = Intent {
                    phase: IntentPhase::Abandoned,
                    updated_at_ms: self.now_ms(),
                    ..intent.clone()
                };
                self.durably(
                    DurableStep::AbandonIntent,
                    self.catalog
                        .update_intent(&fenced, IntentPhase::EffectsConfirmed),
                )
                .await?;
                Ok(fenced)
            }
        }
    }

    /// Undoes an operation's staging when it never published (a commit, merge or reconcile):
    /// its staged rows are marked, the objects it wrote deleted, then the rows. A published
    /// row is never touched, nor a row another intent names, nor an object another operation
    /// wrote (a reconcile's orphans go back to being orphans).
    pub(super) async fn roll_back_staging(&self, intent: &Intent) -> Result<()> {
        let others = self
            .splits_named_by_intents(&intent.dataset_id, Some(&intent.operation_id))
            .await?;
        let planned: Vec<String> = intent
            .effects
            .stage
            .iter()
            .map(|row| row.split_id.clone())
            .filter(|id| !others.contains(id))
            .collect();
        let query = ListQuery {
            split_ids: Some(planned.clone()),
            ..ListQuery::default()
        };
        let rows = self
            .catalog
            .list_splits(&intent.dataset_id, &query)
            .await?
            .splits;
        let staged: Vec<String> = rows
            .iter()
            .filter(|row| row.state == SplitState::Staged)
            .map(|row| row.split_id.clone())
            .collect();
        if !staged.is_empty() {
            self.durably(
                DurableStep::MarkRows,
                self.mark_for_deletion(&intent.dataset_id, &staged),
            )
            .await?;
        }
        // A row that was ever published is not this operation's to delete: an operation rolled
        // back never published, so such a row (marked since, as a merge's replaced split is)
        // belongs to the operation that published it and goes with gc after its deletion
        // grace period. Deleting it here left its object without a row, which reconcile then
        // adopted and published again beside the merge that replaced it (found by `mend-sim`,
        // seed 1971851877719533564, rolling back a second begin of the same split ids).
        let marked: Vec<String> = rows
            .iter()
            .filter(|row| row.state != SplitState::Published && row.published_at_ms.is_none())
            .map(|row| row.split_id.clone())
            .collect();
        // Objects without a row are this commit's own leftovers; objects of marked rows may go
        // now that no live row references them (invariant 2).
        for split_id in planned
            .iter()
            .filter(|id| marked.contains(id) || !rows.iter().any(|row| &row.split_id == *id))
        {
            let object_is_ours = self
                .objects
                .inspect(&intent.dataset_id, split_id)
                .await?
                .split()
                .is_some_and(|(header, _)| {
                    header.operation_id.as_deref() == Some(intent.operation_id.as_str())
                });
            if object_is_ours {
                self.durably(
                    DurableStep::DeleteObject {
                        split_id: split_id.clone(),
                    },
                    self.objects.delete(&intent.dataset_id, split_id),
                )
                .await?;
            }
        }
        if !marked.is_empty() {
            self.durably(
                DurableStep::DeleteRows,
                self.catalog
                    .delete_splits(&intent.dataset_id, &marked, self.now_ms(), None),
            )
            .await?;
        }
        Ok(())
    }
}

/// Every split an intent's effects name.
fn touched_splits(intent: &Intent) -> BTreeSet<String> {
    let effects = &intent.effects;
    let publish = effects.publish.iter().flat_map(|publish| {
        publish
            .staged_split_ids
            .iter()
            .chain(&publish.replaced_split_ids)
    });
    effects
        .stage
        .iter()
        .map(|row| &row.split_id)
        .chain(publish)
        .chain(&effects.mark)
        .chain(&effects.delete)
        .cloned()
        .collect()
}

/// What the policy is shown of each intent: its objects, its splits' rows and what the
/// dataset says of it, as of the sweep's reads.
fn observations(
    intents: &[Intent],
    objects: Vec<Vec<ObjectObservation>>,
    dataset: &Dataset,
    rows: &[ExistingRow],
    promotions_recorded: &BTreeSet<String>,
    now_ms: TimestampMs,
) -> Vec<IntentObservation> {
    let states: HashMap<&str, SplitState> = rows
        .iter()
        .map(|row| (row.split_id.as_str(), row.state))
        .collect();
    intents
        .iter()
        .zip(objects)
        .map(|(intent, objects)| {
            let promotion_recorded = promotions_recorded.contains(&intent.operation_id);
            observation(
                intent,
                objects,
                dataset,
                &states,
                promotion_recorded,
                now_ms,
            )
        })
        .collect()
}

/// What an intent needs, by the policy's decision on it.
fn status_of(decision: &RecoveryDecision) -> IntentStatus {
    match decision {
        RecoveryDecision::Stale => IntentStatus::Clean,
        RecoveryDecision::RollForward => IntentStatus::RollForwardRequired,
        RecoveryDecision::RollBack => IntentStatus::NeedsCompensation,
        RecoveryDecision::Blocked(_) => IntentStatus::Blocked,
        RecoveryDecision::Defer(_) => IntentStatus::Deferred,
        RecoveryDecision::Abandon(_) => IntentStatus::Abandoned,
    }
}

/// Everything the policy needs to know about one intent, given what was found of its objects.
fn observation(
    intent: &Intent,
    objects: Vec<ObjectObservation>,
    dataset: &Dataset,
    states: &HashMap<&str, SplitState>,
    promotion_recorded: bool,
    now_ms: i64,
) -> IntentObservation {
    let effects = &intent.effects;
    let rows: Vec<ExistingRow> = touched_splits(intent)
        .into_iter()
        .filter_map(|id| {
            states.get(id.as_str()).map(|&state| ExistingRow {
                split_id: id,
                state,
            })
        })
        .collect();
    let (publish_staged, publish_replaced, delta) = match &effects.publish {
        Some(publish) => (
            publish.staged_split_ids.clone(),
            publish.replaced_split_ids.clone(),
            publish.checkpoint_delta.as_ref(),
        ),
        None => (Vec::new(), Vec::new(), None),
    };
    let (at_from, at_to, reached_to) = match delta {
        None => (true, true, true),
        Some(delta) => {
            let positions = dataset.checkpoint.get(&delta.source);
            let current = |partition: &str| positions.and_then(|p| p.get(partition)).copied();
            (
                delta
                    .partitions
                    .iter()
                    .all(|p| current(&p.partition) == p.from_position),
                delta
                    .partitions
                    .iter()
                    .all(|p| current(&p.partition) == Some(p.to_position)),
                // Positions never move backwards (invariant 4): at or past the end.
                delta
                    .partitions
                    .iter()
                    .all(|p| current(&p.partition).is_some_and(|at| at >= p.to_position)),
            )
        }
    };
    IntentObservation {
        operation_id: intent.operation_id.clone(),
        kind: policy_kind(intent.kind),
        phase: match intent.phase {
            IntentPhase::Armed => mend_contract::IntentPhase::Armed,
            IntentPhase::EffectsConfirmed => mend_contract::IntentPhase::EffectsConfirmed,
            IntentPhase::Abandoned => mend_contract::IntentPhase::Abandoned,
        },
        owner_lease_live: now_ms < intent.lease_expires_at_ms,
        planned_rows: effects
            .stage
            .iter()
            .map(|row| row.split_id.clone())
            .collect(),
        rows,
        objects,
        publish_staged,
        publish_replaced,
        has_checkpoint_delta: delta.is_some(),
        checkpoint_at_from: at_from,
        checkpoint_at_to: at_to,
        checkpoint_reached_to: reached_to,
        gc_splits: effects.delete.clone(),
        mark_splits: effects.mark.clone(),
        config_at_expected: intent.expected.config_version == Some(dataset.config_version),
        // The promotion happened: the dataset shows its config at a newer version, or, when
        // later promotions replaced it, its record says so.
        config_applied: promotion_recorded
            || intent.expected.config_version.is_some_and(|expected| {
                dataset.config_version > expected
                    && effects.config.as_ref() == Some(&dataset.config)
            }),
    }
}

/// Why the host refuses a decision, if it does.
/// Whether a sweep reads back the payloads of `intent`'s objects: an unconfirmed commit's or
/// merge's, once its owner's lease has run out (or in exclusive mode, which may act on a live
/// owner's work). Only then may a policy publish it, so only then is the proof worth its cost;
/// a live writer's objects are not read again by every supervisor round while it works. A
/// confirmed operation's objects were read (or received) by the publish that confirmed it, and
/// are never overwritten; a reconcile read its orphans whole when it planned them.
fn payloads_to_read(intent: &Intent, mode: RecoveryMode, now_ms: i64) -> bool {
    matches!(intent.kind, OperationKind::Commit | OperationKind::Merge)
        && intent.phase == IntentPhase::Armed
        && (mode == RecoveryMode::Exclusive || intent.lease_expires_at_ms <= now_ms)
}

fn refusal(
    mode: RecoveryMode,
    intent: &Intent,
    observation: &IntentObservation,
    dataset: &Dataset,
    payloads_read: bool,
    decision: &RecoveryDecision,
    now_ms: i64,
) -> Option<String> {
    match decision {
        RecoveryDecision::RollForward
            if matches!(intent.kind, OperationKind::Commit | OperationKind::Merge)
                && intent.phase == IntentPhase::Armed
                && !payloads_read =>
        {
            Some(
                "its objects' payloads were not read back in this sweep (its owner's lease was live when the sweep looked): an unconfirmed commit is published only once every payload is hashed against its plan; the next sweep reads them".into(),
            )
        }
        RecoveryDecision::Abandon(_)
            if !matches!(intent.kind, OperationKind::Commit | OperationKind::Merge) =>
        {
            Some(format!(
                "only a commit or a merge can be abandoned, not a {}",
                kind_name(intent.kind)
            ))
        }
        RecoveryDecision::Abandon(_)
            if intent.phase == IntentPhase::EffectsConfirmed
                && !overtaken_unpublished(intent, observation, dataset) =>
        {
            Some(
                "an operation that confirmed its effects is rolled forward, never abandoned, unless its checkpoint delta was overtaken before its publish landed".into(),
            )
        }
        RecoveryDecision::Abandon(_)
            if intent.phase == IntentPhase::Armed && intent.lease_expires_at_ms > now_ms =>
        {
            Some(format!(
                "its owner's lease runs until {} ms, after this sweep's {now_ms} ms: it may still be working",
                intent.lease_expires_at_ms
            ))
        }
        RecoveryDecision::Abandon(_)
            if observation
                .objects
                .iter()
                .any(|object| object.present && !object.matches) =>
        {
            Some(
                "an object it planned is present but not as planned: damage an operator must look at, not an abandoned write".into(),
            )
        }
        RecoveryDecision::RollBack if mode == RecoveryMode::RollForward => Some(
            "a roll-back compensates another writer's effects, which only exclusive mode may do (invariant 6)".into(),
        ),
        RecoveryDecision::RollBack if intent.kind == OperationKind::Gc => Some(
            "a gc cannot be rolled back: a mark is final; it can only be rolled forward".into(),
        ),
        RecoveryDecision::RollForward
            if observation.objects.iter().any(|object| !object.matches) =>
        {
            Some(
                "rolling forward would publish splits whose objects are missing or different (invariant 1)".into(),
            )
        }
        _ => None,
    }
}

/// Whether a confirmed operation can never publish: another publish moved a partition of its
/// checkpoint delta past the position the delta starts from (positions only move forward),
/// while every split its publish makes published was still staged as the sweep observed (its
/// own publish, which moves them and the checkpoint in one step, had not landed, and now never
/// can). A delta-only publish is never taken for overtaken here: without splits, its own
/// landed publish and another's look alike.
fn overtaken_unpublished(
    intent: &Intent,
    observation: &IntentObservation,
    dataset: &Dataset,
) -> bool {
    let Some(delta) = intent.planned_delta() else {
        return false;
    };
    let staged: HashSet<&str> = observation
        .rows
        .iter()
        .filter(|row| row.state == SplitState::Staged)
        .map(|row| row.split_id.as_str())
        .collect();
    !observation.publish_staged.is_empty()
        && observation
            .publish_staged
            .iter()
            .all(|split_id| staged.contains(split_id.as_str()))
        && crate::engine::steps::delta_overtaken(&dataset.checkpoint, delta)
}

fn check_one_decision_each(intents: &[Intent], decisions: &[IntentDecision]) -> Result<()> {
    let same = intents.len() == decisions.len()
        && intents
            .iter()
            .zip(decisions)
            .all(|(intent, decision)| intent.operation_id == decision.operation_id);
    if !same {
        return Err(MendError::PolicyRejected {
            message: format!(
                "the policy returned {} decisions for {} intents, or in another order; nothing was executed",
                decisions.len(),
                intents.len()
            ),
        });
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(kind: OperationKind, phase: IntentPhase, lease_expires_at_ms: i64) -> Intent {
        Intent {
            phase,
            lease_expires_at_ms,
            ..Intent::armed("op".into(), kind, "ds", "node", 0, 0)
        }
    }

    fn observation(damaged: bool) -> IntentObservation {
        IntentObservation {
            operation_id: "op".into(),
            kind: mend_contract::OperationKind::Commit,
            phase: mend_contract::IntentPhase::Armed,
            owner_lease_live: false,
            planned_rows: vec!["s".into()],
            rows: Vec::new(),
            objects: vec![ObjectObservation {
                split_id: "s".into(),
                present: damaged,
                matches: false,
            }],
            publish_staged: vec!["s".into()],
            publish_replaced: Vec::new(),
            has_checkpoint_delta: false,
            checkpoint_at_from: true,
            checkpoint_at_to: true,
            checkpoint_reached_to: true,
            gc_splits: Vec::new(),
            mark_splits: Vec::new(),
            config_at_expected: false,
            config_applied: false,
        }
    }

    /// A dataset whose checkpoint stands at `position` on `src/p`, if any.
    fn dataset_at(position: Option<u64>) -> Dataset {
        Dataset {
            dataset_id: "ds".into(),
            uid: "uid".into(),
            config: Default::default(),
            config_version: 1,
            checkpoint: position
                .map(|position| [("src".into(), [("p".into(), position)].into())].into())
                .unwrap_or_default(),
            manifest_version: 1,
            publish_token: None,
            fencing_epoch: 0,
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }

    /// A confirmed commit may be abandoned only when its publish can never land: its
    /// checkpoint delta (5 to 6) overtaken, and its splits still staged as observed (its own
    /// publish moves them and the checkpoint at once). Found by mend-sim (seeds 73 and 496):
    /// without it, every roll-forward sweep blocked on it until an operator came.
    #[test]
    fn a_confirmed_operation_is_abandoned_only_once_its_delta_was_overtaken() {
        let mut confirmed = intent(OperationKind::Commit, IntentPhase::EffectsConfirmed, 0);
        confirmed.effects.publish = Some(crate::intent::PlannedPublish {
            staged_split_ids: vec!["s".into()],
            replaced_split_ids: Vec::new(),
            checkpoint_delta: Some(mend_contract::CheckpointDelta {
                source: "src".into(),
                partitions: vec![mend_contract::PartitionDelta {
                    partition: "p".into(),
                    from_position: Some(5),
                    to_position: 6,
                }],
            }),
            publish_token: None,
        });
        let observed = |state: SplitState| IntentObservation {
            phase: mend_contract::IntentPhase::EffectsConfirmed,
            rows: vec![ExistingRow {
                split_id: "s".into(),
                state,
            }],
            objects: Vec::new(),
            has_checkpoint_delta: true,
            ..observation(false)
        };
        let abandon = RecoveryDecision::Abandon("overtaken".into());
        let check = |position: Option<u64>, state: SplitState| {
            refusal(
                RecoveryMode::RollForward,
                &confirmed,
                &observed(state),
                &dataset_at(position),
                true,
                &abandon,
                1_000,
            )
        };
        let cases = [
            // Another publish moved the partition on from 5: never publishable.
            (Some(7), SplitState::Staged, true),
            (Some(6), SplitState::Staged, true),
            // Still at its from-position: it can publish; roll it forward.
            (Some(5), SplitState::Staged, false),
            // Its own publish landed (splits published with the checkpoint at 6, then moved on).
            (Some(6), SplitState::Published, false),
            (Some(9), SplitState::Published, false),
        ];
        for (position, state, allowed) in cases {
            let refused = check(position, state);
            assert_eq!(
                refused.is_none(),
                allowed,
                "checkpoint {position:?}, split {state:?}: {refused:?}"
            );
        }
        let mut delta_only = confirmed.clone();
        delta_only
            .effects
            .publish
            .as_mut()
            .unwrap()
            .staged_split_ids
            .clear();
        let refused = refusal(
            RecoveryMode::RollForward,
            &delta_only,
            &IntentObservation {
                publish_staged: Vec::new(),
                ..observed(SplitState::Staged)
            },
            &dataset_at(Some(9)),
            true,
            &abandon,
            1_000,
        );
        assert!(
            refused.is_some(),
            "a delta-only publish is never taken for overtaken"
        );
    }

    /// The host allows an abandonment only of an unconfirmed commit or merge whose lease ran
    /// out by its own clock (or one fenced already), and never over damage.
    #[test]
    fn abandonments_are_checked_by_the_host() {
        let abandon = RecoveryDecision::Abandon("why".into());
        let now = 1_000;
        let check = |intent: &Intent, damaged: bool| {
            refusal(
                RecoveryMode::RollForward,
                intent,
                &observation(damaged),
                &dataset_at(None),
                true,
                &abandon,
                now,
            )
        };
        let cases = [
            (
                intent(OperationKind::Commit, IntentPhase::Armed, now),
                false,
                None,
            ),
            (
                intent(OperationKind::Merge, IntentPhase::Armed, 0),
                false,
                None,
            ),
            (
                intent(OperationKind::Commit, IntentPhase::Abandoned, i64::MAX),
                false,
                None,
            ),
            (
                intent(OperationKind::Gc, IntentPhase::Armed, 0),
                false,
                Some("only a commit or a merge"),
            ),
            (
                intent(OperationKind::Commit, IntentPhase::EffectsConfirmed, 0),
                false,
                Some("rolled forward, never abandoned"),
            ),
            (
                intent(OperationKind::Commit, IntentPhase::Armed, now + 1),
                false,
                Some("may still be working"),
            ),
            (
                intent(OperationKind::Commit, IntentPhase::Armed, 0),
                true,
                Some("damage"),
            ),
        ];
        for (intent, damaged, expected) in &cases {
            let refused = check(intent, *damaged);
            match expected {
                None => assert_eq!(refused, None, "{intent:?}"),
                Some(reason) => assert!(
                    refused.as_deref().is_some_and(|why| why.contains(reason)),
                    "{intent:?}: {refused:?}"
                ),
            }
        }
        assert_eq!(cases.len(), 7);
    }

    /// An unconfirmed commit or merge is rolled forward only by a sweep that read its payloads
    /// back; a confirmed one (read when it confirmed) and any other kind need no read.
    #[test]
    fn an_unconfirmed_commit_rolls_forward_only_on_payloads_read_back() {
        let forward = RecoveryDecision::RollForward;
        let mut intact = observation(true);
        intact.objects[0].matches = true;
        let check = |intent: &Intent, payloads_read: bool| {
            refusal(
                RecoveryMode::RollForward,
                intent,
                &intact,
                &dataset_at(None),
                payloads_read,
                &forward,
                1_000,
            )
        };
        for kind in [OperationKind::Commit, OperationKind::Merge] {
            let armed = intent(kind, IntentPhase::Armed, 0);
            assert_eq!(check(&armed, true), None);
            assert!(
                check(&armed, false).is_some_and(|why| why.contains("not read back")),
                "{kind:?}"
            );
            let confirmed = intent(kind, IntentPhase::EffectsConfirmed, 0);
            assert_eq!(check(&confirmed, false), None);
        }
        // Which intents a sweep reads: unconfirmed commits and merges whose lease ran out,
        // and every one of them in exclusive mode.
        let read = |kind, phase, lease: i64, mode| {
            payloads_to_read(&intent(kind, phase, lease), mode, 1_000)
        };
        assert!(read(
            OperationKind::Commit,
            IntentPhase::Armed,
            1_000,
            RecoveryMode::RollForward
        ));
        assert!(!read(
            OperationKind::Commit,
            IntentPhase::Armed,
            1_001,
            RecoveryMode::RollForward
        ));
        assert!(read(
            OperationKind::Merge,
            IntentPhase::Armed,
            5_000,
            RecoveryMode::Exclusive
        ));
        assert!(!read(
            OperationKind::Commit,
            IntentPhase::EffectsConfirmed,
            0,
            RecoveryMode::RollForward
        ));
        assert!(!read(
            OperationKind::Reconcile,
            IntentPhase::Armed,
            0,
            RecoveryMode::Exclusive
        ));
    }
}

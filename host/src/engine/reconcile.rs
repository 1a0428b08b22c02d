//! Reconcile: rebuild rows for objects in the bucket that no row describes.
//!
//! An *orphan* is an object with no row, named by no intent (those are recovery's), last
//! written longer ago than the dataset's staged grace period (a younger one may belong to a
//! writer still between its upload and its stage; it is left alone). For each orphan the
//! host reads the whole object: its embedded header (dataset uid, node, metadata, payload size
//! and checksum) and whether the payload matches. The policy decides, per orphan, to adopt
//! (publish) or discard (mark for deletion) it; the host refuses to adopt an object that is
//! not whole or belongs to an earlier dataset of the same name (invariant 1), and audits every
//! decision. An object written by an operation whose end without publishing is recorded is
//! that operation's leftover: an upload that landed after its operation was aborted or
//! abandoned and collected (its writer was told it ended, so it must never become visible:
//! mend-sim seed 22, a store request stalled past every lease). The host discards it whatever
//! the policy said, as the operation's end decided for all its objects, and audits the policy's
//! decision with what the host did instead. The writer's upload leaves such an object in place
//! rather than deleting it: a reconcile may have staged a row for it meanwhile, and an
//! unconditional delete would take the object of a staged row (invariant 2; mend-sim seed
//! 1083818128378677243). An object written by an operation whose publish is recorded, with
//! no row for its split, was published and removed since (replaced or deleted, then collected):
//! adopting it would bring back what was removed, so the host discards it too (mend-sim seed
//! 13329079666074005667, a copy of an upload that landed after gc).
//!
//! Steps, each a durable write through the fault seam:
//!
//! 1. write the intent (`Armed`): the rows to stage from the headers, the objects as found,
//!    the splits to adopt and those to discard;
//! 2. stage the rows **create-only**: winning an insert is the claim. A row another reconciler
//!    (or a writer) inserted first is never overwritten and never adopted by this one;
//! 3. confirm the intent, narrowed to the rows this run inserted;
//! 4. publish the adopted splits; 5. mark the discarded ones;
//! 6. delete the intent.
//!
//! Recovery rolls a reconcile forward while its objects are still there: it stages missing
//! rows again (create-only), and publishes or marks only rows still staged that no other
//! intent names.

use std::collections::BTreeSet;

use mend_contract::{OrphanObject, ReconcileAction, ReconcileDecision, ReconcileInput};
use serde::{Deserialize, Serialize};

use super::Engine;
use super::keyed::{Keyed, request_key};
use crate::audit::{AUDIT_FORMAT_VERSION, AuditRecord, DecisionInput};
use crate::catalog::CatalogExt;
use crate::error::{MendError, Result};
use crate::faults::DurableStep;
use crate::gates::GateName;
use crate::intent::{
    ExpectedState, Intent, IntentPhase, OperationKind, PlannedEffects, PlannedObject,
    PlannedPublish, PlannedRow,
};
use crate::model::{
    Dataset, ListQuery, PublishRequest, SplitState, StageMode, StageOutcome, StageRequest,
    StageSplit, TimestampMs,
};
use crate::objects::ListedObject;
use crate::objects::format::sha256;
use crate::{bounds, validate};

/// What one reconcile run found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReconcileReport {
    /// The dataset reconciled.
    pub dataset_id: String,
    /// The operation's id, when it had anything to do.
    pub operation_id: Option<String>,
    /// How many objects the dataset's folder holds.
    pub objects_listed: usize,
    /// Objects with no row still inside the staged grace period: left alone.
    pub too_young: Vec<String>,
    /// Orphans this run published.
    pub adopted: Vec<String>,
    /// Orphans this run marked for deletion, with the policy's reason.
    pub discarded: Vec<(String, String)>,
    /// Orphans whose row another reconciler or writer inserted first: left to it.
    pub taken_by_others: Vec<String>,
    /// Orphans the host would not act on: a refused decision, or an unreadable object.
    pub refused: Vec<(String, String)>,
}

/// An orphan as read, with what the host needs beyond the policy's view.
struct ReadOrphan {
    observation: OrphanObject,
    /// Why the object is a leftover of the operation its header names, discarded whatever the
    /// policy says: that operation's end without publishing is recorded, or its publish is and
    /// no row holds the split any more (published, then replaced or deleted and collected:
    /// adopting it would bring back what was removed; mend-sim seed 13329079666074005667, a
    /// copy of an upload that landed after gc).
    leftover: Option<String>,
    size: u64,
    checksum: String,
}

impl Engine {
    /// Why an orphan object written by `operation_id` is that operation's leftover, which the
    /// host discards whatever the policy decided (see [`ReadOrphan::leftover`]); `None` if the
    /// operation's end is not recorded either way.
    async fn leftover_of(&self, dataset_id: &str, operation_id: &str) -> Result<Option<String>> {
        if self
            .ended_without_publishing(dataset_id, operation_id)
            .await?
        {
            return Ok(Some(format!(
                "written by operation {operation_id}, which ended without publishing and was \
                 answered so: discarded with the rest of that operation, whatever the policy \
                 decided"
            )));
        }
        if self
            .recorded_publish(dataset_id, operation_id)
            .await?
            .is_some()
        {
            return Ok(Some(format!(
                "written by operation {operation_id}, which published it; its row has gone \
                 since (replaced or deleted, then collected): adopting it would bring back what \
                 was removed"
            )));
        }
        Ok(None)
    }

    /// Finds the dataset's orphan objects and adopts or discards them as the policy decides.
    /// A run that finds no orphan writes nothing.
    ///
    /// Under an idempotency key a retry of a run that ended answers its report; see
    /// [`Keyed`]'s module for the gap between a run's effects and its record.
    pub fn reconcile<'a>(
        &'a self,
        dataset_id: &'a str,
        node: &'a str,
    ) -> Keyed<'a, ReconcileReport> {
        Keyed::new(self.write_scope("reconcile"), move |key| async move {
            let key = request_key(key, &("reconcile", dataset_id, node))?;
            validate::dataset_id(dataset_id)?;
            validate::node(node)?;
            self.run_recorded(
                dataset_id,
                key.as_ref(),
                self.reconcile_run(dataset_id, node),
            )
            .await
        })
    }

    #[tracing::instrument(
        name = "reconcile",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = tracing::field::Empty)
    )]
    async fn reconcile_run(&self, dataset_id: &str, node: &str) -> Result<ReconcileReport> {
        validate::dataset_id(dataset_id)?;
        validate::node(node)?;
        // One policy decides and is audited for the whole run.
        let pinned = self.pinned();
        pinned
            .under_gates([GateName::dataset(dataset_id)], |engine| async move {
                engine.reconcile_holding_gate(dataset_id, node).await
            })
            .await
    }

    async fn reconcile_holding_gate(
        &self,
        dataset_id: &str,
        node: &str,
    ) -> Result<ReconcileReport> {
        let dataset = self.catalog.dataset(dataset_id).await?;
        let now = self.now_ms();
        let objects = self.objects.list(dataset_id).await?;
        let with_row: BTreeSet<String> = self
            .catalog
            .list_splits(dataset_id, &ListQuery::default())
            .await?
            .splits
            .into_iter()
            .map(|row| row.split_id)
            .collect();
        let named = self.splits_named_by_intents(dataset_id, None).await?;
        let mut report = ReconcileReport {
            dataset_id: dataset_id.to_string(),
            objects_listed: objects.len(),
            ..ReconcileReport::default()
        };

        let orphans = self
            .read_orphans(&dataset, &objects, &with_row, &named, now, &mut report)
            .await?;
        if orphans.is_empty() {
            return Ok(report);
        }

        let input = ReconcileInput {
            dataset_id: dataset_id.to_string(),
            now_ms: now,
            orphans: orphans.iter().map(|o| o.observation.clone()).collect(),
        };
        let decisions = self.policy().plan_reconcile(&input)?;
        check_one_decision_each(&orphans, &decisions)?;

        let operation_id = crate::ambient::uuid_v4().to_string();
        tracing::Span::current().record("operation_id", tracing::field::display(&operation_id));
        let mut audit = Vec::new();
        let (accepted, adopt, discard) = self.accept_decisions(
            dataset_id,
            &operation_id,
            now,
            (&orphans, &decisions),
            &mut audit,
            &mut report,
        );
        if accepted.is_empty() {
            self.check_held()?;
            self.catalog.append_audit(dataset_id, &audit).await?;
            log_reconcile(&report);
            return Ok(report);
        }

        let intent = self.reconcile_intent(
            &dataset,
            node,
            &operation_id,
            now,
            &accepted,
            &adopt,
            &discard,
        );
        let (intent, ours) = self.stage_reconcile(intent, &mut report).await?;
        self.settle_reconcile(&intent, &ours, dataset.fencing_epoch)
            .await?;
        audit.extend(accepted.iter().map(|(orphan, decision)| {
            let outcome = if !ours.contains(&orphan.observation.split_id) {
                String::from("taken by another reconciler or writer")
            } else if let Some(why) = &orphan.leftover {
                format!("discarded: {why}")
            } else {
                match &decision.action {
                    ReconcileAction::Adopt => String::from("adopted"),
                    ReconcileAction::Discard(_) => String::from("discarded"),
                }
            };
            self.reconcile_audit(dataset_id, &operation_id, now, orphan, decision, &outcome)
        }));
        self.check_held()?;
        self.catalog.append_audit(dataset_id, &audit).await?;

        self.finish_intent(dataset_id, &operation_id).await?;
        report.operation_id = Some(operation_id);
        report.adopted = adopt.into_iter().filter(|id| ours.contains(id)).collect();
        report.discarded = discard
            .into_iter()
            .filter(|(id, _)| ours.contains(id))
            .collect();
        log_reconcile(&report);
        Ok(report)
    }

    /// The policy's decisions as the host takes them: one it refuses is audited and listed in
    /// `report.refused`; the others are answered, with the ids to adopt and those to discard
    /// (and why).
    #[allow(clippy::type_complexity)]
    fn accept_decisions<'a>(
        &self,
        dataset_id: &str,
        operation_id: &str,
        now: TimestampMs,
        (orphans, decisions): (&'a [ReadOrphan], &'a [ReconcileDecision]),
        audit: &mut Vec<AuditRecord>,
        report: &mut ReconcileReport,
    ) -> (
        Vec<(&'a ReadOrphan, &'a ReconcileDecision)>,
        Vec<String>,
        Vec<(String, String)>,
    ) {
        let (mut accepted, mut adopt, mut discard) = (Vec::new(), Vec::new(), Vec::new());
        for (orphan, decision) in orphans.iter().zip(decisions) {
            let split_id = &orphan.observation.split_id;
            if let Some(why) = &orphan.leftover {
                discard.push((split_id.clone(), why.clone()));
                accepted.push((orphan, decision));
                continue;
            }
            match (&decision.action, refusal(orphan, &decision.action)) {
                (_, Some(why)) => {
                    audit.push(self.reconcile_audit(
                        dataset_id,
                        operation_id,
                        now,
                        orphan,
                        decision,
                        &why,
                    ));
                    report.refused.push((split_id.clone(), why));
                    continue;
                }
                (ReconcileAction::Adopt, None) => adopt.push(split_id.clone()),
                (ReconcileAction::Discard(why), None) => {
                    discard.push((split_id.clone(), why.clone()))
                }
            }
            accepted.push((orphan, decision));
        }
        (accepted, adopt, discard)
    }

    /// Writes a reconcile's intent, stages its rows (create-only: a row another writer or
    /// reconciler staged first is theirs, listed in `report.taken_by_others`) and confirms the
    /// intent narrowed to the rows it staged. Answers the confirmed intent and those rows.
    async fn stage_reconcile(
        &self,
        mut intent: Intent,
        report: &mut ReconcileReport,
    ) -> Result<(Intent, BTreeSet<String>)> {
        self.durably(DurableStep::WriteIntent, self.catalog.put_intent(&intent))
            .await?;

        let staged = self
            .durably(
                DurableStep::StageRows,
                self.stage(&reconcile_stage(&intent)),
            )
            .await?;
        let ours: BTreeSet<String> = staged.inserted().map(str::to_string).collect();
        report.taken_by_others = staged
            .splits
            .iter()
            .filter(|split| split.outcome != StageOutcome::Inserted)
            .map(|split| split.split_id.clone())
            .collect();

        intent.effects = narrowed(&intent.effects, &ours);
        intent.phase = IntentPhase::EffectsConfirmed;
        intent.updated_at_ms = self.now_ms();
        self.durably(
            DurableStep::ConfirmIntent,
            self.catalog.update_intent(&intent, IntentPhase::Armed),
        )
        .await?;
        Ok((intent, ours))
    }

    /// The objects with no row that no intent names, each read: the orphans the policy is
    /// asked about. Those too young or unusable go to `report` instead.
    async fn read_orphans(
        &self,
        dataset: &Dataset,
        objects: &[ListedObject],
        with_row: &BTreeSet<String>,
        named: &BTreeSet<String>,
        now: TimestampMs,
        report: &mut ReconcileReport,
    ) -> Result<Vec<ReadOrphan>> {
        let cutoff = bounds::ms_before(now, dataset.config.staged_grace_period_ms);
        let unrowed: Vec<_> = objects
            .iter()
            .filter(|o| !with_row.contains(&o.split_id) && !named.contains(&o.split_id))
            .collect();
        let progress = &self.options.progress;
        progress.begin("read orphan objects", unrowed.len());
        let mut orphans = Vec::new();
        for (done, object) in unrowed.into_iter().enumerate() {
            progress.advance(done);
            if let Some(orphan) = self
                .read_orphan(dataset, object, cutoff, now, report)
                .await?
            {
                orphans.push(orphan);
            }
        }
        progress.end();
        Ok(orphans)
    }

    /// One object no row describes, read (its header, and whether its payload is whole):
    /// `None` if it is too young to judge (listed in `report.too_young`), refused (listed in
    /// `report.refused` with why) or gone since the listing.
    async fn read_orphan(
        &self,
        dataset: &Dataset,
        object: &ListedObject,
        cutoff: TimestampMs,
        now: TimestampMs,
        report: &mut ReconcileReport,
    ) -> Result<Option<ReadOrphan>> {
        let dataset_id = dataset.dataset_id.as_str();
        if object.last_modified_ms >= cutoff {
            report.too_young.push(object.split_id.clone());
            return Ok(None);
        }
        let read = self.objects.read_split(dataset_id, &object.split_id).await;
        let (header, intact) = match read {
            Ok(Some(found)) => found,
            Ok(None) => return Ok(None), // deleted since the listing
            Err(MendError::Corrupt { message }) => {
                report.refused.push((object.split_id.clone(), message));
                return Ok(None);
            }
            Err(error) => return Err(error),
        };
        let unusable = if header.split_id != object.split_id || header.dataset_id != dataset_id {
            Some(format!(
                "its header names split {} of dataset {}",
                header.split_id, header.dataset_id
            ))
        } else {
            validate::split_id(&header.split_id)
                .and_then(|()| validate::metadata(&header.split_id, &header.metadata_json))
                .err()
                .map(|error| format!("its header's metadata is unusable: {error}"))
        };
        if let Some(why) = unusable {
            report.refused.push((object.split_id.clone(), why));
            return Ok(None);
        }
        let leftover = match &header.operation_id {
            Some(operation_id) => self.leftover_of(dataset_id, operation_id).await?,
            None => None,
        };
        Ok(Some(ReadOrphan {
            leftover,
            observation: OrphanObject {
                split_id: object.split_id.clone(),
                same_incarnation: header.dataset_uid == dataset.uid,
                intact,
                metadata_json: header.metadata_json.clone(),
                age_ms: now - object.last_modified_ms,
            },
            size: object.size,
            checksum: header.payload_sha256.clone(),
        }))
    }

    /// The intent of a reconcile: stage a row for each accepted orphan, publish the adopted
    /// ones and mark the discarded ones, expecting no row for any of them yet.
    #[allow(clippy::too_many_arguments)]
    fn reconcile_intent(
        &self,
        dataset: &Dataset,
        node: &str,
        operation_id: &str,
        now: TimestampMs,
        accepted: &[(&ReadOrphan, &ReconcileDecision)],
        adopt: &[String],
        discard: &[(String, String)],
    ) -> Intent {
        let dataset_id = dataset.dataset_id.as_str();
        Intent {
            effects: PlannedEffects {
                stage: accepted
                    .iter()
                    .map(|(orphan, _)| PlannedRow {
                        split_id: orphan.observation.split_id.clone(),
                        metadata_json: orphan.observation.metadata_json.clone(),
                    })
                    .collect(),
                objects: accepted
                    .iter()
                    .map(|(orphan, _)| PlannedObject {
                        split_id: orphan.observation.split_id.clone(),
                        size: orphan.size,
                        checksum: orphan.checksum.clone(),
                    })
                    .collect(),
                publish: (!adopt.is_empty()).then(|| PlannedPublish {
                    staged_split_ids: adopt.to_vec(),
                    replaced_split_ids: Vec::new(),
                    checkpoint_delta: None,
                    publish_token: None,
                }),
                mark: discard.iter().map(|(id, _)| id.clone()).collect(),
                ..PlannedEffects::default()
            },
            expected: ExpectedState {
                manifest_version: dataset.manifest_version,
                split_states: accepted
                    .iter()
                    .map(|(orphan, _)| (orphan.observation.split_id.clone(), None))
                    .collect(),
                config_version: None,
            },
            ..Intent::armed(
                operation_id.to_string(),
                OperationKind::Reconcile,
                dataset_id,
                node,
                now,
                self.options.intent_lease_ms,
            )
        }
    }

    /// Recovery's roll-forward of a reconcile: stage again the rows that are missing
    /// (create-only), then settle the rows still staged that no other intent names.
    pub(super) async fn finish_reconcile(&self, intent: &Intent, fencing_epoch: u64) -> Result<()> {
        let planned: Vec<String> = intent
            .effects
            .stage
            .iter()
            .map(|row| row.split_id.clone())
            .collect();
        let existing = self.rows_of(&intent.dataset_id, &planned).await?;
        if existing.len() < planned.len() {
            self.durably(DurableStep::StageRows, self.stage(&reconcile_stage(intent)))
                .await?;
        }
        let others = self
            .splits_named_by_intents(&intent.dataset_id, Some(&intent.operation_id))
            .await?;
        let ours: BTreeSet<String> = self
            .rows_of(&intent.dataset_id, &planned)
            .await?
            .into_iter()
            .filter(|(id, state)| *state == SplitState::Staged && !others.contains(id))
            .map(|(id, _)| id)
            .collect();
        self.settle_reconcile(intent, &ours, fencing_epoch).await
    }

    /// Publishes the adopted splits and marks the discarded ones, of `ours` only; the publish
    /// is fenced at `fencing_epoch`, the epoch the run began under.
    async fn settle_reconcile(
        &self,
        intent: &Intent,
        ours: &BTreeSet<String>,
        fencing_epoch: u64,
    ) -> Result<()> {
        let adopt: Vec<String> = intent
            .effects
            .publish
            .iter()
            .flat_map(|publish| &publish.staged_split_ids)
            .filter(|id| ours.contains(*id))
            .cloned()
            .collect();
        if !adopt.is_empty() {
            let dataset = self.catalog.dataset(&intent.dataset_id).await?;
            // Reconcile is an operator's repair, not a competing writer: it publishes under
            // the dataset's current token.
            let publish = PublishRequest {
                dataset_id: intent.dataset_id.clone(),
                staged_split_ids: adopt,
                replaced_split_ids: Vec::new(),
                checkpoint_delta: None,
                publish_token: dataset.publish_token.clone(),
                fencing_epoch: Some(fencing_epoch),
            };
            self.durably(DurableStep::Publish, self.publish(&publish))
                .await?;
        }
        let discard: Vec<String> = intent
            .effects
            .mark
            .iter()
            .filter(|id| ours.contains(*id))
            .cloned()
            .collect();
        if !discard.is_empty() {
            // Only while still staged: a row published meanwhile is never hidden.
            self.durably(
                DurableStep::MarkRows,
                self.catalog.mark_stale_staged(
                    &intent.dataset_id,
                    &discard,
                    i64::MAX,
                    self.now_ms(),
                ),
            )
            .await?;
        }
        Ok(())
    }

    /// The states of those of `split_ids` that have a row.
    async fn rows_of(
        &self,
        dataset_id: &str,
        split_ids: &[String],
    ) -> Result<Vec<(String, SplitState)>> {
        if split_ids.is_empty() {
            return Ok(Vec::new());
        }
        let query = ListQuery {
            split_ids: Some(split_ids.to_vec()),
            ..ListQuery::default()
        };
        Ok(self
            .catalog
            .list_splits(dataset_id, &query)
            .await?
            .splits
            .into_iter()
            .map(|row| (row.split_id, row.state))
            .collect())
    }

    fn reconcile_audit(
        &self,
        dataset_id: &str,
        operation_id: &str,
        now_ms: i64,
        orphan: &ReadOrphan,
        decision: &ReconcileDecision,
        outcome: &str,
    ) -> AuditRecord {
        let canonical =
            serde_json::to_vec(&orphan.observation).expect("observations always serialise");
        AuditRecord {
            format_version: AUDIT_FORMAT_VERSION,
            principal: self.actor().map(str::to_owned),
            dataset_id: dataset_id.to_string(),
            operation_id: operation_id.to_string(),
            recorded_at_ms: self.now_ms(),
            mode: "reconcile".into(),
            policy_digest: self.policy().digest().to_string(),
            semantics_revision: self.policy().description().semantics_revision,
            inputs_hash: sha256(&canonical),
            decision: serde_json::to_value(decision).expect("decisions always serialise"),
            outcome: serde_json::Value::String(outcome.to_string()),
            inputs: Some(DecisionInput::PlanReconcile {
                dataset_id: dataset_id.to_string(),
                now_ms,
                orphan: orphan.observation.clone(),
            }),
        }
    }
}

/// Why the host will not act on a decision, if it will not.
fn refusal(orphan: &ReadOrphan, action: &ReconcileAction) -> Option<String> {
    let orphan = &orphan.observation;
    match action {
        ReconcileAction::Adopt if !orphan.intact => Some(
            "adopting it would publish a split whose object does not match its header (invariant 1)"
                .into(),
        ),
        ReconcileAction::Adopt if !orphan.same_incarnation => Some(
            "adopting it would publish an object written for an earlier dataset of the same name"
                .into(),
        ),
        _ => None,
    }
}

fn check_one_decision_each(orphans: &[ReadOrphan], decisions: &[ReconcileDecision]) -> Result<()> {
    let same = orphans.len() == decisions.len()
        && orphans
            .iter()
            .zip(decisions)
            .all(|(orphan, decision)| orphan.observation.split_id == decision.split_id);
    if !same {
        return Err(MendError::PolicyRejected {
            message: format!(
                "the policy returned {} reconcile decisions for {} orphans, or in another order; nothing was executed",
                decisions.len(),
                orphans.len()
            ),
        });
    }
    Ok(())
}

/// The create-only stage of a reconcile's planned rows, as its owner.
fn reconcile_stage(intent: &Intent) -> StageRequest {
    StageRequest {
        dataset_id: intent.dataset_id.clone(),
        mode: StageMode::CreateOnly,
        node: intent.owner.clone(),
        splits: intent
            .effects
            .stage
            .iter()
            .map(|row| StageSplit {
                split_id: row.split_id.clone(),
                metadata_json: row.metadata_json.clone(),
            })
            .collect(),
    }
}

/// The effects, keeping only the splits in `ours`.
fn narrowed(effects: &PlannedEffects, ours: &BTreeSet<String>) -> PlannedEffects {
    let keep = |id: &String| ours.contains(id);
    PlannedEffects {
        stage: effects
            .stage
            .iter()
            .filter(|row| keep(&row.split_id))
            .cloned()
            .collect(),
        objects: effects
            .objects
            .iter()
            .filter(|object| keep(&object.split_id))
            .cloned()
            .collect(),
        publish: effects.publish.as_ref().and_then(|publish| {
            let staged: Vec<String> = publish
                .staged_split_ids
                .iter()
                .filter(|id| keep(id))
                .cloned()
                .collect();
            (!staged.is_empty()).then(|| PlannedPublish {
                staged_split_ids: staged,
                ..publish.clone()
            })
        }),
        mark: effects.mark.iter().filter(|id| keep(id)).cloned().collect(),
        ..effects.clone()
    }
}

/// A run that found orphans: what became of them (a run that found none logs nothing).
fn log_reconcile(report: &ReconcileReport) {
    if !report.refused.is_empty() {
        tracing::warn!(
            refused = report.refused.len(),
            "reconcile refused the policy's decision on some orphans; they are left as they are"
        );
    }
    tracing::info!(
        objects_listed = report.objects_listed,
        adopted = report.adopted.len(),
        discarded = report.discarded.len(),
        taken_by_others = report.taken_by_others.len(),
        refused = report.refused.len(),
        "reconcile settled orphans"
    );
}

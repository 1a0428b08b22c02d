//! Observing: what a sweep reads to decide on (the dataset, its intents, their objects and the
//! rows they touch), as of one manifest version where it can.

use std::collections::{BTreeSet, HashMap};

use futures::StreamExt;

use mend_contract::{ExistingRow, IntentObservation, ObjectObservation, RecoveryMode};

use crate::engine::Engine;
use crate::error::{MendError, Result};
use crate::intent::{Intent, IntentPhase, OperationKind};
use crate::model::{Dataset, SplitState, TimestampMs};
use crate::objects::FoundObject;

use super::policy_kind;

/// How many intents a sweep observes at once.
pub(super) const OBSERVE_CONCURRENCY: usize = 16;
/// How many times a sweep reads what it decides on when the dataset keeps moving meanwhile
/// ([`Engine::observe`]).
pub(super) const OBSERVE_ATTEMPTS: usize = 3;

/// What a sweep read to decide on, as of one manifest version where it could.
pub(super) struct Observed {
    pub(super) dataset: Dataset,
    pub(super) intents: Vec<Intent>,
    /// Per intent, in order: what is in the store of each object it plans.
    pub(super) objects: Vec<Vec<ObjectObservation>>,
    /// Per intent, in order: whether its objects' payloads were read back and hashed.
    pub(super) payloads_read: Vec<bool>,
    /// The rows of every split an intent touches.
    pub(super) rows: Vec<ExistingRow>,
    /// The config applies among the intents whose promotion is recorded: it happened, whatever
    /// was promoted after it.
    pub(super) promotions_recorded: BTreeSet<String>,
}

impl Engine {
    /// What a sweep decides on: the dataset, its intents, their objects and the rows of their
    /// splits, read as of one manifest version. The reads are several, so a publish landing in
    /// the middle of them (an operation's writer, another replica) would show the sweep an
    /// intent from before it and rows or a checkpoint from after it: an operation published a
    /// moment ago would look blocked ("its publish no longer applies"), or abandoned. The
    /// manifest version, which every publish, mark and delete moves on, is read before and
    /// after; if it moved, everything is read again, up to [`OBSERVE_ATTEMPTS`] times (a
    /// dataset publishing without pause keeps the last reading; every decision still executes
    /// by conditional writes, so a stale one is refused, never applied).
    pub(super) async fn observe(&self, dataset_id: &str, mode: RecoveryMode) -> Result<Observed> {
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

    /// The config applies among `intents` whose promotion is recorded. A config apply whose
    /// promotion landed and whose intent was not deleted (its process died between the two, or
    /// its answer was lost and its keyed retry answered the record) is settled: once another
    /// config is promoted after it, the dataset's config no longer shows it, and only the
    /// record does (mend-sim found such an intent blocking every roll-forward sweep).
    pub(super) async fn promotions_recorded(
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
    pub(super) async fn states_touched_by(
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
    pub(super) async fn observe_objects(
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
}

/// Every split an intent's effects name.
pub(super) fn touched_splits(intent: &Intent) -> BTreeSet<String> {
    intent.named_splits().cloned().collect()
}

/// What the policy is shown of each intent: its objects, its splits' rows and what the
/// dataset says of it, as of the sweep's reads.
pub(super) fn observations(
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

/// Everything the policy needs to know about one intent, given what was found of its objects.
pub(super) fn observation(
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

/// Whether a sweep reads back the payloads of `intent`'s objects: an unconfirmed commit's or
/// merge's, once its owner's lease has run out (or in exclusive mode, which may act on a live
/// owner's work). Only then may a policy publish it, so only then is the proof worth its cost;
/// a live writer's objects are not read again by every supervisor round while it works. A
/// confirmed operation's objects were read (or received) by the publish that confirmed it, and
/// are never overwritten; a reconcile read its orphans whole when it planned them.
pub(super) fn payloads_to_read(intent: &Intent, mode: RecoveryMode, now_ms: i64) -> bool {
    matches!(intent.kind, OperationKind::Commit | OperationKind::Merge)
        && intent.phase == IntentPhase::Armed
        && (mode == RecoveryMode::Exclusive || intent.lease_expires_at_ms <= now_ms)
}

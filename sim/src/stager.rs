//! The writers that use the plain protocol, with no intent: stage create-only, put each
//! split's object, publish with a checkpoint delta, as a metastore's own writer calls mend's
//! `stage` and `publish`. Each step is sent under an idempotency key until its answer is
//! known. Some die between their stage and their publish, leaving staged rows that no intent
//! claims: garbage collection abandons those after the staged grace period (it marks them),
//! and deletes them after the deletion grace period, so that gc marks and deletes in most
//! runs.

use std::sync::{Arc, Mutex, PoisonError};

use mend::MendError;
use mend::model::{
    CheckpointDelta, PartitionDelta, PublishRequest, StageMode, StageOutcome, StageRequest,
    StageSplit,
};
use mend::objects::format::{HEADER_FORMAT_VERSION, SplitObjectHeader, sha256};

use crate::check::{Claim, History, OperationRecord};
use crate::client::with_retries;
use crate::replica::Replica;
use crate::rng::SimRng;
use crate::schedule::{Config, DATASET, SOURCE, pause, read_position};
use crate::trace::Trace;
use crate::writer::payload_of;

/// Percent of a stager's operations that die after their stage, before their publish.
const DIES_BEFORE_PUBLISH_PCT: u64 = 35;

/// A stager: stage, put, publish, one operation after another, each from the position it
/// read; its partition is `s{index}`.
pub(crate) async fn stager(
    index: usize,
    replicas: Vec<Replica>,
    mut rng: SimRng,
    config: Config,
    history: Arc<Mutex<History>>,
    trace: Trace,
) {
    let partition = format!("s{index}");
    for number in 0..config.operations_each {
        // Spread over the run, so that gc meets what it leaves at any time.
        pause(&mut rng, 500, 4_000).await;
        let label = format!("s{index}-{number}");
        let reader = replicas[rng.below(replicas.len() as u64) as usize].engine();
        let from = match read_position(&reader, &partition, &mut rng, &history, &trace).await {
            Ok(from) => from,
            Err(error) => {
                trace.line(format!("{label}: cannot read the checkpoint: {error}"));
                continue;
            }
        };
        let split_ids: Vec<String> = (0..rng.between(1, 2))
            .map(|split| format!("{label}-s{split}"))
            .collect();
        history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .operations
            .push(OperationRecord {
                operation_id: label.clone(),
                partition: partition.clone(),
                from: from.unwrap_or(0),
                split_ids: split_ids.clone(),
                invoked_ms: trace.now_ms(),
                plain: true,
                ..OperationRecord::default()
            });
        let step = Step {
            replicas: &replicas,
            trace: &trace,
            label: &label,
            node: format!("stager-{index}"),
        };
        if !step.stage(&mut rng, &split_ids).await || !step.put(&mut rng, &split_ids).await {
            continue;
        }
        if crate::faults::gate(rng.chance(DIES_BEFORE_PUBLISH_PCT)) {
            trace.line(format!(
                "{label}: the stager dies before its publish; its rows are gc's"
            ));
            continue;
        }
        let published = step.publish(&mut rng, &split_ids, &partition, from).await;
        // A refusal claims nothing: with no intent, an object that outlives its collected row
        // is an orphan reconcile may adopt later.
        let claim = match &published {
            Ok(()) => Claim::Published,
            Err(_) => Claim::Nothing,
        };
        history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .claim(
                &label,
                claim,
                format!("publish answered {published:?}"),
                trace.now_ms(),
            );
    }
}

/// One stager operation's steps.
struct Step<'a> {
    replicas: &'a [Replica],
    trace: &'a Trace,
    label: &'a str,
    node: String,
}

impl Step<'_> {
    /// Stages `split_ids` create-only under a key; answers whether it now owns every one.
    async fn stage(&self, rng: &mut SimRng, split_ids: &[String]) -> bool {
        let request = StageRequest {
            dataset_id: DATASET.into(),
            mode: StageMode::CreateOnly,
            node: self.node.clone(),
            splits: split_ids
                .iter()
                .map(|split_id| StageSplit {
                    split_id: split_id.clone(),
                    metadata_json: "{}".into(),
                })
                .collect(),
        };
        let key = format!("{}-stage", self.label);
        let staged = with_retries(self.replicas, rng, self.trace, self.label, |engine| {
            let (request, key) = (request.clone(), key.clone());
            async move { engine.stage(&request).idempotency_key(key.as_str()).await }
        })
        .await;
        self.trace.line(format!(
            "{}: stage: {:?}",
            self.label,
            staged.as_ref().map(|result| result.inserted().count())
        ));
        staged.is_ok_and(|result| {
            result
                .splits
                .iter()
                .all(|split| split.outcome == StageOutcome::Inserted)
        })
    }

    /// Puts each split's object; answers whether every one is in place.
    async fn put(&self, rng: &mut SimRng, split_ids: &[String]) -> bool {
        for split_id in split_ids {
            let payload = payload_of(split_id);
            let put = with_retries(self.replicas, rng, self.trace, self.label, |engine| {
                let (split_id, payload, node) =
                    (split_id.clone(), payload.clone(), self.node.clone());
                async move {
                    let dataset = engine.dataset(DATASET).await?;
                    let header = SplitObjectHeader {
                        format_version: HEADER_FORMAT_VERSION,
                        dataset_id: DATASET.into(),
                        dataset_uid: dataset.uid,
                        split_id,
                        node,
                        metadata_json: "{}".into(),
                        operation_id: None,
                        payload_size: payload.len() as u64,
                        payload_sha256: sha256(&payload),
                    };
                    engine.objects().put_split(&header, &payload).await
                }
            })
            .await;
            if let Err(error) = put {
                self.trace
                    .line(format!("{}: put {split_id}: {error}", self.label));
                return false;
            }
        }
        true
    }

    /// Publishes `split_ids` with the delta from `from`, under a key.
    async fn publish(
        &self,
        rng: &mut SimRng,
        split_ids: &[String],
        partition: &str,
        from: Option<u64>,
    ) -> Result<(), MendError> {
        let request = PublishRequest {
            dataset_id: DATASET.into(),
            staged_split_ids: split_ids.to_vec(),
            replaced_split_ids: Vec::new(),
            checkpoint_delta: Some(CheckpointDelta {
                source: SOURCE.into(),
                partitions: vec![PartitionDelta {
                    partition: partition.to_string(),
                    from_position: from,
                    to_position: from.unwrap_or(0) + 1,
                }],
            }),
            publish_token: None,
            fencing_epoch: None,
        };
        let key = format!("{}-publish", self.label);
        let published = with_retries(self.replicas, rng, self.trace, self.label, |engine| {
            let (request, key) = (request.clone(), key.clone());
            async move { engine.publish(&request).idempotency_key(key.as_str()).await }
        })
        .await;
        self.trace.line(format!(
            "{}: publish: {:?}",
            self.label,
            published.as_ref().map(|result| result.manifest_version)
        ));
        published.map(|_| ())
    }
}

//! The writers that commit in process (`Engine::commit`): one commit per operation, its
//! answer final; sometimes the committing process dies part way.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use mend::MendError;
use mend::engine::{CommitRequest, CommitSplit};
use mend::model::{CheckpointDelta, PartitionDelta};

use crate::check::{Claim, History, OperationRecord};
use crate::client::{CUT_PCT, aim};
use crate::replica::Replica;
use crate::rng::SimRng;
use crate::schedule::{Config, DATASET, SOURCE, pause, read_position};
use crate::store::with_aimed_crash;
use crate::trace::Trace;
use crate::writer::payload_of;

/// A writer committing in process: one `Engine::commit` per operation, its answer final.
pub(crate) async fn committer(
    index: usize,
    replicas: Vec<Replica>,
    mut rng: SimRng,
    config: Config,
    history: Arc<Mutex<History>>,
    trace: Trace,
) {
    let partition = format!("c{index}");
    for number in 0..config.operations_each {
        pause(&mut rng, 0, 400).await;
        let engine = replicas[rng.below(replicas.len() as u64) as usize].engine();
        let label = format!("c{index}-{number}");
        let from = match read_position(&engine, &partition, &mut rng, &history, &trace).await {
            Ok(from) => from,
            Err(error) => {
                trace.line(format!("{label}: cannot read the checkpoint: {error}"));
                continue;
            }
        };
        let split_ids: Vec<String> = (0..rng.between(1, 3))
            .map(|split| format!("{label}-s{split}"))
            .collect();
        let request = CommitRequest {
            dataset_id: DATASET.into(),
            node: format!("committer-{index}"),
            splits: split_ids
                .iter()
                .map(|split_id| CommitSplit {
                    split_id: split_id.clone(),
                    metadata_json: "{}".into(),
                    payload: Bytes::from(payload_of(split_id)),
                })
                .collect(),
            checkpoint_delta: Some(CheckpointDelta {
                source: SOURCE.into(),
                partitions: vec![PartitionDelta {
                    partition: partition.clone(),
                    from_position: from,
                    to_position: from.unwrap_or(0) + 1,
                }],
            }),
            publish_token: None,
        };
        let invoked_ms = trace.now_ms();
        // Sometimes the process dies part way through the commit: its future is dropped at
        // whatever await point it reached, and recovery finds what it left.
        let cut_after_ms = rng
            .chance(CUT_PCT)
            .then(|| rng.between(1, 120))
            .filter(|_| crate::faults::allow());
        let answer = match cut_after_ms {
            None => match aim(&mut rng) {
                None => engine.commit(&request).await,
                Some(crash) => match with_aimed_crash(crash, engine.commit(&request)).await {
                    (_, true) => Err(MendError::Unavailable {
                        message: format!("{label}: the committing process died at a write"),
                        source: None,
                    }),
                    (answer, false) => answer,
                },
            },
            Some(ms) => tokio::time::timeout(Duration::from_millis(ms), engine.commit(&request))
                .await
                .unwrap_or_else(|_| {
                    Err(MendError::Unavailable {
                        message: format!("{label}: the committing process died after {ms} ms"),
                        source: None,
                    })
                }),
        };
        trace.line(format!(
            "{label}: commit from {from:?}: {:?}",
            answer.as_ref().map(|result| &result.operation_id)
        ));
        let claim = match &answer {
            Ok(_) => Claim::Published,
            Err(error) if error.certainly_not_applied() => Claim::NotBegun,
            Err(_) => Claim::Nothing,
        };
        let mut history = history.lock().unwrap_or_else(PoisonError::into_inner);
        history.operations.push(OperationRecord {
            operation_id: label.clone(),
            partition: partition.clone(),
            from: from.unwrap_or(0),
            split_ids,
            invoked_ms,
            ..OperationRecord::default()
        });
        history.claim(
            &label,
            claim,
            format!("commit answered {answer:?}"),
            trace.now_ms(),
        );
    }
}

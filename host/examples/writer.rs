//! A writer that embeds mend: it recovers what an earlier run left in doubt, then commits
//! batches of source records as splits, each commit moving a checkpoint on by exactly one
//! batch, crash-safely.
//!
//! ```text
//! cargo run -p mend --example writer -- [DIR] [COMMITS]
//! ```
//!
//! `DIR` is the catalog, a local directory (default: a fresh temporary one). Run it twice on
//! the same directory: the second run finds the checkpoint where the first left it and goes
//! on from there. Kill it part way (Ctrl-C during a commit) and run it again: recovery at
//! start finishes or abandons what the killed run left, and the checkpoint never counts a
//! batch twice.
//!
//! What it shows, in the order a real embedder does it:
//!
//! 1. open the catalog and its split objects from a URL ([`mend::catalog::open`]), and an
//!    [`Engine`] with the default policy and the gates every process on that catalog shares
//!    ([`mend::gates::open_gates`]);
//! 2. at start, a roll-forward recovery sweep of the dataset: commits a crashed run confirmed
//!    are published, unconfirmed ones whose lease ran out are abandoned (a live writer's work
//!    is left alone until its lease runs out);
//! 3. commits through [`Engine::commit`]: an intent before the first effect, rows staged
//!    create-only, objects written put-if-absent with their recovery header, one publish
//!    with the checkpoint delta, the intent deleted. The delta's `from_position` is the
//!    position read from the dataset, so a commit that raced another (or repeats one that
//!    landed) is refused rather than applied twice.

use std::time::Duration;

use bytes::Bytes;
use mend::engine::{CommitRequest, CommitSplit};
use mend::model::{CheckpointDelta, DatasetConfig, PartitionDelta};
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions, MendError, RecoveryMode};

const DATASET: &str = "events";
const SOURCE: &str = "event-log";
const PARTITION: &str = "0";
/// Source records per commit: each commit moves the partition's position on by this much.
const BATCH: u64 = 1000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let temporary = tempfile::tempdir()?;
    let directory = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| temporary.path().to_path_buf());
    let commits: u64 = args.next().map(|n| n.parse()).transpose()?.unwrap_or(5);
    let url = format!("file://{}", std::fs::canonicalize(&directory)?.display());

    // 1. The catalog, its objects, the policy, and gates shared with other processes.
    let (catalog, objects) = mend::catalog::open(&url, None).await?;
    let engine = Engine::new(
        catalog,
        objects,
        PolicyRuntime::default_policy()?,
        EngineOptions::default(),
    )?
    .with_gates(mend::gates::open_gates(&url).await?)
    .with_gate_timeout(Duration::from_secs(10));

    match engine
        .create_dataset(DATASET, &DatasetConfig::default())
        .await
    {
        Ok(_) => println!("created dataset {DATASET} in {}", directory.display()),
        Err(MendError::AlreadyExists { .. }) => println!("dataset {DATASET} exists"),
        Err(error) => return Err(error.into()),
    }

    // 2. Settle what an earlier run left in doubt before writing anything new.
    let report = engine.recover(DATASET, RecoveryMode::RollForward).await?;
    for intent in &report.intents {
        println!(
            "recovery: operation {} ({:?}) was {:?}: {:?}",
            intent.operation_id, intent.kind, intent.status, intent.outcome
        );
    }

    // 3. Commit batch after batch, each from the position the dataset says.
    for _ in 0..commits {
        let dataset = engine.dataset(DATASET).await?;
        let from = dataset
            .checkpoint
            .get(SOURCE)
            .and_then(|partitions| partitions.get(PARTITION))
            .copied();
        let to = from.unwrap_or(0) + BATCH;
        let request = CommitRequest {
            dataset_id: DATASET.to_string(),
            node: "example-writer".to_string(),
            splits: vec![CommitSplit {
                split_id: format!("events-{to:012}"),
                metadata_json: format!(
                    r#"{{"num_docs": {BATCH}, "first_position": {}}}"#,
                    to - BATCH
                ),
                payload: Bytes::from(encode_batch(to - BATCH, to)),
            }],
            checkpoint_delta: Some(CheckpointDelta {
                source: SOURCE.to_string(),
                partitions: vec![PartitionDelta {
                    partition: PARTITION.to_string(),
                    from_position: from,
                    to_position: to,
                }],
            }),
            publish_token: None,
        };
        match engine.commit(&request).await {
            Ok(committed) => println!(
                "committed {} at manifest version {}: position {} -> {to}",
                committed.publish.published.join(", "),
                committed.publish.manifest_version,
                from.map_or("none".to_string(), |from| from.to_string()),
            ),
            // Another writer moved the checkpoint first: read it again and go on.
            Err(MendError::FailedPrecondition { message, .. }) => {
                println!("not committed, nothing applied: {message}");
            }
            // The outcome is unknown (the store did not answer): the intent records what was
            // planned, and the next start's recovery settles it.
            Err(error) if !error.certainly_not_applied() => {
                println!("outcome unknown, left for recovery: {error}");
                break;
            }
            Err(error) => return Err(error.into()),
        }
    }

    let verify = engine.verify(DATASET).await?;
    println!(
        "verify: {} rows and {} objects checked, {} violations",
        verify.rows_checked,
        verify.objects_checked,
        verify.violations.len()
    );
    if !verify.violations.is_empty() {
        return Err(format!("invariants broken: {:?}", verify.violations).into());
    }
    Ok(())
}

/// The records of positions `from..to`, as the bytes of one split object's payload.
fn encode_batch(from: u64, to: u64) -> Vec<u8> {
    (from..to)
        .flat_map(|position| format!("{{\"position\": {position}}}\n").into_bytes())
        .collect()
}

//! A reader that embeds mend: a query node holding a live handle on a dataset, refreshing it
//! while a writer (in this example, a task of the same process; in a deployment, another
//! process) commits.
//!
//! ```text
//! cargo run -p mend --example live_reader
//! ```
//!
//! What it shows:
//!
//! - [`LiveHandle::open`] in [`HandleMode::ReadOnly`]: a reader never runs recovery, however
//!   many intents a crashed writer left; it serves what is published;
//! - [`LiveHandle::current`] is what queries read: one consistent [`Generation`] (the
//!   published splits, the config, the manifest version and the policy), an `Arc` clone that
//!   never waits for a refresh;
//! - [`LiveHandle::refresh`], run on a timer: when nothing changed it costs one manifest probe
//!   and no scan; when something did it prepares the whole next generation to the side and
//!   swaps it in at once, so a query never sees half a commit;
//! - [`LiveHandle::stats`]: the probes, scans and generations, which a serving process exports
//!   as metrics.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mend::engine::{CommitRequest, CommitSplit};
use mend::live::{HandleMode, LiveHandle, Refresh};
use mend::model::DatasetConfig;
use mend::runtime::PolicyRuntime;
use mend::{Engine, EngineOptions};

const DATASET: &str = "events";
const COMMITS: usize = 5;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let directory = tempfile::tempdir()?;
    let url = format!("file://{}", directory.path().display());
    let (catalog, objects) = mend::catalog::open(&url, None).await?;
    let engine = Engine::new(
        catalog,
        objects,
        PolicyRuntime::default_policy()?,
        EngineOptions::default(),
    )?;
    engine
        .create_dataset(DATASET, &DatasetConfig::default())
        .await?;

    let handle = Arc::new(LiveHandle::open(engine.clone(), DATASET, HandleMode::ReadOnly).await?);
    println!(
        "opened: generation {}, {} published splits",
        handle.current().number,
        handle.current().published.len()
    );

    // The writer: a commit every 50 ms.
    let writer = tokio::spawn(async move {
        for n in 0..COMMITS {
            let request = CommitRequest {
                dataset_id: DATASET.to_string(),
                node: "example-writer".to_string(),
                splits: vec![CommitSplit {
                    split_id: format!("split-{n:03}"),
                    metadata_json: r#"{"num_docs": 100}"#.to_string(),
                    payload: Bytes::from(vec![b'x'; 1024]),
                }],
                checkpoint_delta: None,
                publish_token: None,
            };
            engine.commit(&request).await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok::<_, mend::MendError>(())
    });

    // The reader: a refresh every 10 ms, and what a query would see.
    let (mut unchanged, mut published) = (0, 0);
    while !writer.is_finished() || handle.current().published.len() < COMMITS {
        match handle.refresh().await? {
            Refresh::Unchanged => unchanged += 1,
            Refresh::Published {
                number,
                manifest_version,
            } => {
                published += 1;
                let generation = handle.current();
                println!(
                    "generation {number} at manifest version {manifest_version}: {} splits ({})",
                    generation.published.len(),
                    generation
                        .published
                        .iter()
                        .map(|row| row.split_id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    writer.await??;

    let stats = handle.stats();
    println!(
        "{published} new generations, {unchanged} unchanged refreshes; {} probes and {} scans \
         in all: an unchanged refresh costs one probe and no scan",
        stats.probes, stats.scans
    );
    assert_eq!(
        stats.scans as usize,
        published + 1,
        "one scan for the first generation and one per change, none for the unchanged refreshes"
    );
    Ok(())
}

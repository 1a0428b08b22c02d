//! `mend demo`: stages, publishes and lists a few splits, so a new user sees the protocol
//! work end to end on the catalog they chose (by default a local directory).

use anyhow::Context;
use mend::model::{
    CheckpointDelta, DatasetConfig, ListQuery, PartitionDelta, PublishRequest, StageMode,
    StageRequest, StageSplit,
};
use mend::{Engine, MendError};

use super::output;

pub async fn run(engine: &Engine, json: bool) -> anyhow::Result<()> {
    let dataset = format!("demo-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    say(
        json,
        &format!(
            "creating dataset {dataset} in {}",
            engine.catalog().describe()
        ),
    );
    engine
        .create_dataset(&dataset, &DatasetConfig::default())
        .await
        .context("create the demo dataset")?;

    let splits = |ids: &[&str], node: &str| StageRequest {
        dataset_id: dataset.clone(),
        mode: StageMode::CreateOnly,
        node: node.into(),
        splits: ids
            .iter()
            .map(|id| StageSplit {
                split_id: (*id).into(),
                metadata_json:
                    serde_json::json!({"num_docs": 1000, "time_range": {"start": 0, "end": 60000}})
                        .to_string(),
            })
            .collect(),
    };

    say(json, "writer-a stages split-1 and split-2, create-only");
    engine
        .stage(&splits(&["split-1", "split-2"], "writer-a"))
        .await?;
    say(
        json,
        "writer-b retries with split-2 and split-3, create-only: it must not take split-2",
    );
    let second = engine
        .stage(&splits(&["split-2", "split-3"], "writer-b"))
        .await?;
    if !json {
        output::stage_result(&second, false)?;
    }
    let claimed_by_b: Vec<&str> = second.inserted().collect();
    anyhow::ensure!(
        claimed_by_b == ["split-3"],
        "create-only must never take an existing row, but writer-b inserted {claimed_by_b:?}"
    );

    say(
        json,
        "writer-a publishes split-1 and split-2 with a checkpoint delta",
    );
    let publish = engine
        .publish(&PublishRequest {
            dataset_id: dataset.clone(),
            staged_split_ids: vec!["split-1".into(), "split-2".into()],
            replaced_split_ids: vec![],
            checkpoint_delta: Some(CheckpointDelta {
                source: "events".into(),
                partitions: vec![PartitionDelta {
                    partition: "0".into(),
                    from_position: None,
                    to_position: 2000,
                }],
            }),
            publish_token: None,
            fencing_epoch: None,
        })
        .await?;

    say(
        json,
        "an upsert over the published split-1 is refused, and nothing is written",
    );
    let mut upsert = splits(&["split-1", "split-4"], "writer-c");
    upsert.mode = StageMode::Upsert;
    match engine.stage(&upsert).await {
        Err(MendError::FailedPrecondition { ids, .. }) => say(
            json,
            &format!("refused as expected, naming {}", ids.join(", ")),
        ),
        other => anyhow::bail!("the upsert over a published split was not refused: {other:?}"),
    }

    let page = engine.list_splits(&dataset, &ListQuery::default()).await?;
    if json {
        let summary = serde_json::json!({
            "dataset": dataset,
            "manifest_version": publish.manifest_version,
            "splits": page.splits,
            "writer_b_inserted": claimed_by_b,
        });
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        output::split_page(&page, false)?;
        let staged_only = page
            .splits
            .iter()
            .filter(|s| s.state == mend::model::SplitState::Staged)
            .count();
        println!(
            "\ndone: {} published, {staged_only} staged (split-3, owned by writer-b), catalog at {}",
            publish.published.len(),
            engine.catalog().describe()
        );
        println!("next: `mend list {dataset}`, `mend dataset show {dataset}`, `mend --help`");
    }
    Ok(())
}

fn say(json: bool, line: &str) {
    if !json {
        println!("== {line}");
    }
}

//! The protocol's single steps on the command line: `mend stage`, `publish`, `mark`,
//! `delete`, `list`.

use std::io::Read;

use anyhow::Context;
use mend::Engine;
use mend::model::{
    CheckpointDelta, ListQuery, PublishRequest, SplitState, StageMode, StageRequest, StageSplit,
    TimeRange,
};
use serde::Deserialize;

use super::output;
use super::{BadInput, ModeArg};
use super::{DeleteArgs, ListArgs, MarkArgs, PublishArgs, StageArgs};

/// `mend stage`.
pub(crate) async fn stage(engine: &Engine, args: StageArgs, json: bool) -> anyhow::Result<()> {
    let StageArgs {
        dataset,
        mode,
        splits,
        node,
        idempotency_key,
    } = args;
    let text = if splits.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|error| BadInput(format!("read splits from stdin: {error}")))?;
        text
    } else {
        std::fs::read_to_string(&splits)
            .map_err(|error| BadInput(format!("read splits from {}: {error}", splits.display())))?
    };
    let request = StageRequest {
        dataset_id: dataset,
        mode: match mode {
            ModeArg::Upsert => StageMode::Upsert,
            ModeArg::CreateOnly => StageMode::CreateOnly,
        },
        node,
        splits: parse_splits(&text)?,
    };
    let result = engine
        .stage(&request)
        .idempotency_key(idempotency_key.as_deref())
        .await
        .context("stage")?;
    output::stage_result(&result, json)
}

/// `mend publish`.
pub(crate) async fn publish(engine: &Engine, args: PublishArgs, json: bool) -> anyhow::Result<()> {
    let PublishArgs {
        dataset,
        splits,
        replaced,
        checkpoint_delta,
        publish_token,
        idempotency_key,
    } = args;
    let checkpoint_delta = checkpoint_delta
        .map(|text| {
            serde_json::from_str::<CheckpointDelta>(&text).context("parse --checkpoint-delta")
        })
        .transpose()?;
    let request = PublishRequest {
        dataset_id: dataset,
        staged_split_ids: splits,
        replaced_split_ids: replaced,
        checkpoint_delta,
        publish_token,
        fencing_epoch: None,
    };
    let result = engine
        .publish(&request)
        .idempotency_key(idempotency_key.as_deref())
        .await
        .context("publish")?;
    output::json_or(&result, json, || {
        format!(
            "published {} split(s), marked {} for deletion; manifest version {}",
            result.published.len(),
            result.marked.len(),
            result.manifest_version
        )
    })
}

/// `mend mark`.
pub(crate) async fn mark(engine: &Engine, args: MarkArgs, json: bool) -> anyhow::Result<()> {
    let MarkArgs {
        dataset,
        split_ids,
        idempotency_key,
    } = args;
    let result = engine
        .mark_for_deletion(&dataset, &split_ids)
        .idempotency_key(idempotency_key.as_deref())
        .await
        .context("mark for deletion")?;
    output::json_or(&result, json, || {
        format!(
            "marked {} split(s) for deletion; {} already marked",
            result.marked.len(),
            result.already_marked.len()
        )
    })
}

/// `mend delete`.
pub(crate) async fn delete(engine: &Engine, args: DeleteArgs, json: bool) -> anyhow::Result<()> {
    let DeleteArgs {
        dataset,
        split_ids,
        idempotency_key,
    } = args;
    engine
        .delete_splits(&dataset, &split_ids)
        .idempotency_key(idempotency_key.as_deref())
        .await
        .context("delete")?;
    let deleted = serde_json::json!({ "deleted": split_ids });
    output::json_or(&deleted, json, || {
        format!("deleted {} split(s): objects, then rows", split_ids.len())
    })
}

/// `mend list`.
pub(crate) async fn list(engine: &Engine, args: ListArgs, json: bool) -> anyhow::Result<()> {
    let ListArgs {
        dataset,
        state,
        splits,
        time_range,
        updated_since,
        limit,
        after,
    } = args;
    let states = state
        .iter()
        .map(|name| {
            SplitState::parse(name).ok_or_else(|| {
                BadInput(format!(
                    "unknown state {name:?}; use staged, published or marked_for_deletion"
                ))
            })
        })
        .collect::<Result<Vec<_>, BadInput>>()?;
    let query = ListQuery {
        states,
        split_ids: (!splits.is_empty()).then_some(splits),
        time_range: time_range.as_deref().map(parse_time_range).transpose()?,
        updated_since_ms: updated_since,
        updated_before_ms: None,
        after_split_id: after,
        limit,
    };
    let page = engine.list_splits(&dataset, &query).await.context("list")?;
    output::split_page(&page, json)
}

fn parse_splits(text: &str) -> anyhow::Result<Vec<StageSplit>> {
    let entries: Vec<SplitEntry> = serde_json::from_str(text).context(
        "parse splits: expected a JSON array of {\"split_id\": ..., \"metadata\": {...}}",
    )?;
    Ok(entries
        .into_iter()
        .map(|entry| StageSplit {
            split_id: entry.split_id,
            metadata_json: entry.metadata.to_string(),
        })
        .collect())
}

fn parse_time_range(text: &str) -> Result<TimeRange, BadInput> {
    let bad = || {
        BadInput(format!(
            "--time-range {text:?}: expected START..END in milliseconds"
        ))
    };
    let (start, end) = text.split_once("..").ok_or_else(bad)?;
    Ok(TimeRange {
        start: start.trim().parse().map_err(|_| bad())?,
        end: end.trim().parse().map_err(|_| bad())?,
    })
}

/// One entry of a splits file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SplitEntry {
    split_id: String,
    #[serde(default = "empty_object")]
    metadata: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::json!({})
}

//! Smoke tests of the Postgres backend against a real server.
//!
//! Run them under `scripts/with-postgres`, which starts a throwaway server and sets
//! `MEND_TEST_DATABASE_URL`; without it they fail, they do not skip. Each test works in its own
//! dataset, so they share one database. The conformance suite in `tests/` holds every backend to
//! the full behaviour; these check the Postgres-specific paths (lost inserts, concurrent
//! batches, the SQL filters) and that nothing is written when a step is refused.

mod audit;
mod datasets;
mod intents;
mod lifecycle;
mod list;
mod stage;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use mend_contract::{ExistingRow, PartitionDelta};

use super::PostgresCatalog;
use crate::catalog::{
    Capabilities, Catalog, PlannedAction, PlannedStage, PublishObservation, StagePlan,
    distinct_splits,
};
use crate::error::{EntityKind, MendError, Result};
use crate::model::{
    Checkpoint, CheckpointDelta, Dataset, DatasetConfig, ListQuery, NewSplit, PublishRequest,
    SplitRow, SplitState, StageMode, StageOutcome, StagedSplit, TimeRange, TimestampMs,
};

async fn catalog() -> PostgresCatalog {
    let url = std::env::var("MEND_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "MEND_TEST_DATABASE_URL is not set: run the Postgres tests under scripts/with-postgres, \
             e.g. `scripts/with-postgres cargo test -p mend --features postgres --lib catalog::postgres`"
        )
    });
    PostgresCatalog::connect_with(&url, test_options())
        .await
        .expect("connect to the test database")
}

/// `scripts/with-postgres` starts a non-durable cluster and says so in the environment.
fn test_options() -> super::PostgresOptions {
    super::PostgresOptions {
        accept_unsafe_durability: std::env::var("MEND_POSTGRES_ACCEPT_UNSAFE_DURABILITY")
            .is_ok_and(|value| value == "true"),
    }
}

fn unique_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}

async fn new_dataset(catalog: &PostgresCatalog) -> String {
    let dataset_id = unique_id("dataset");
    catalog
        .create_dataset(
            &dataset_id,
            &unique_id("uid"),
            &DatasetConfig::default(),
            1_000,
            None,
        )
        .await
        .expect("create the test dataset");
    dataset_id
}

fn new_split(split_id: &str, node: &str, time_range: Option<(i64, i64)>) -> NewSplit {
    NewSplit {
        split_id: split_id.to_string(),
        node: node.to_string(),
        metadata_json: json!({ "written_by": node, "docs": 10 }).to_string(),
        time_range: time_range.map(|(start, end)| TimeRange { start, end }),
    }
}

/// A plan as the default policy would make it: insert what is missing; in create-only mode
/// skip what exists; in upsert mode overwrite staged rows and reject the batch otherwise.
fn plan(mode: StageMode, splits: &[NewSplit], existing: &[ExistingRow]) -> Result<StagePlan> {
    let states: BTreeMap<&str, SplitState> = existing
        .iter()
        .map(|row| (row.split_id.as_str(), row.state))
        .collect();
    let mut entries = Vec::new();
    for split in splits {
        let action = match (mode, states.get(split.split_id.as_str())) {
            (_, None) => PlannedAction::Insert,
            (StageMode::CreateOnly, Some(state)) => PlannedAction::Skip(*state),
            (StageMode::Upsert, Some(SplitState::Staged)) => PlannedAction::Overwrite,
            (StageMode::Upsert, Some(_)) => {
                return Err(MendError::failed_precondition(
                    "splits are not staged",
                    vec![split.split_id.clone()],
                ));
            }
        };
        entries.push(PlannedStage {
            split: split.clone().into(),
            action,
        });
    }
    entries.sort_by(|a, b| a.split.split_id.cmp(&b.split.split_id));
    Ok(StagePlan { entries })
}

/// `splits` as `Catalog::stage` takes them: one per id, sorted.
fn distinct(mode: StageMode, splits: &[NewSplit]) -> Vec<Arc<NewSplit>> {
    let requested: Vec<Arc<NewSplit>> = splits.iter().cloned().map(Arc::new).collect();
    distinct_splits(mode, &requested)
}

async fn stage(
    catalog: &PostgresCatalog,
    dataset_id: &str,
    mode: StageMode,
    splits: &[NewSplit],
    now_ms: TimestampMs,
) -> Result<Vec<StagedSplit>> {
    let planner = |existing: &[ExistingRow]| plan(mode, splits, existing);
    catalog
        .stage(
            dataset_id,
            mode,
            &distinct(mode, splits),
            &planner,
            now_ms,
            None,
        )
        .await
}

fn outcomes(staged: &[StagedSplit]) -> Vec<(&str, StageOutcome)> {
    staged
        .iter()
        .map(|split| (split.split_id.as_str(), split.outcome))
        .collect()
}

async fn all_rows(catalog: &PostgresCatalog, dataset_id: &str) -> Vec<SplitRow> {
    catalog
        .list_splits(dataset_id, &ListQuery::default())
        .await
        .expect("list splits")
        .splits
}

async fn row(catalog: &PostgresCatalog, dataset_id: &str, split_id: &str) -> SplitRow {
    all_rows(catalog, dataset_id)
        .await
        .into_iter()
        .find(|row| row.split_id == split_id)
        .unwrap_or_else(|| panic!("split {split_id} has no row"))
}

async fn manifest_version(catalog: &PostgresCatalog, dataset_id: &str) -> u64 {
    catalog.dataset(dataset_id).await.unwrap().manifest_version
}

fn accept_all(_: &PublishObservation) -> Result<()> {
    Ok(())
}

fn publish_request(dataset_id: &str, staged: &[&str], replaced: &[&str]) -> PublishRequest {
    PublishRequest {
        dataset_id: dataset_id.to_string(),
        staged_split_ids: staged.iter().map(|id| id.to_string()).collect(),
        replaced_split_ids: replaced.iter().map(|id| id.to_string()).collect(),
        checkpoint_delta: None,
        publish_token: None,
        fencing_epoch: None,
    }
}

fn delta(partition: &str, from_position: Option<u64>, to_position: u64) -> CheckpointDelta {
    CheckpointDelta {
        source: "kafka".to_string(),
        partitions: vec![PartitionDelta {
            partition: partition.to_string(),
            from_position,
            to_position,
        }],
    }
}

fn ids(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}

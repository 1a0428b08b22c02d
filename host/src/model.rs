//! The catalog's data model: datasets, split rows, requests and results.
//!
//! Times are milliseconds since the Unix epoch, always handed in by the caller (the engine's
//! [`Clock`](crate::clock::Clock)); no backend reads a clock inside a mutation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use mend_contract::{CheckpointDelta, PartitionDelta, SplitState, StageMode};

/// Milliseconds since the Unix epoch.
pub type TimestampMs = i64;

/// Source, then partition, then the position published up to.
pub type Checkpoint = BTreeMap<String, BTreeMap<String, u64>>;

/// A dataset's configuration. Each change bumps `Dataset::config_version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DatasetConfig {
    /// A staged split untouched this long is abandoned (garbage collection marks it).
    pub staged_grace_period_ms: u64,
    /// A marked split's object and row are removed this long after the mark was seen
    /// ([`SplitRow::mark_seen_at_ms`]).
    pub deletion_grace_period_ms: u64,
    /// Parameters the policy may read; opaque to the host.
    #[serde(default)]
    pub policy_params: BTreeMap<String, String>,
}

impl Default for DatasetConfig {
    fn default() -> Self {
        Self {
            staged_grace_period_ms: 60 * 60 * 1000,
            deletion_grace_period_ms: 10 * 60 * 1000,
            policy_params: BTreeMap::new(),
        }
    }
}

/// A named collection of splits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Dataset {
    /// The dataset's name: 1 to 128 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit.
    pub dataset_id: String,
    /// Unique per incarnation: a dataset deleted and created again under the same name has a
    /// different uid.
    pub uid: String,
    /// Grace periods and policy parameters.
    pub config: DatasetConfig,
    /// Moves on by one with each config change; a config apply names the version it replaces.
    pub config_version: u64,
    /// Each source's partitions and the position published up to.
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, BTreeMap<String, u64>>))]
    pub checkpoint: Checkpoint,
    /// Grows with every change to the published view (publish, mark, delete, config, token,
    /// fencing epoch).
    pub manifest_version: u64,
    /// A publish must present exactly this token (fencing); `None` means publishes carry none.
    pub publish_token: Option<String>,
    /// Moved on by one each time exclusive recovery fences the dataset's writers: a publish
    /// carrying an older epoch is refused (invariant 7). 0 at creation; catalogs written
    /// before epochs existed read as 0.
    #[serde(default)]
    pub fencing_epoch: u64,
    /// When the dataset was created.
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub created_at_ms: TimestampMs,
    /// When anything of it last changed.
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub updated_at_ms: TimestampMs,
}

/// A split's time range, taken from its metadata's `time_range` (inclusive bounds, ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TimeRange {
    /// The first millisecond, inclusive.
    pub start: i64,
    /// The last millisecond, inclusive.
    pub end: i64,
}

impl TimeRange {
    /// Whether the two ranges share at least one millisecond.
    pub fn overlaps(&self, other: &TimeRange) -> bool {
        self.start <= other.end && other.start <= self.end
    }
}

/// A split's catalog row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SplitRow {
    /// The split's id, unique in its dataset (the same alphabet as dataset ids).
    pub split_id: String,
    /// Where it is in its lifecycle.
    pub state: SplitState,
    /// The node that staged the split.
    pub node: String,
    /// A JSON object: docs, bytes, time range, tags, parent splits, whatever the writer adds.
    pub metadata: serde_json::Value,
    /// The range its metadata's `time_range` names, if any; listings filter on it.
    pub time_range: Option<TimeRange>,
    /// When the row was staged.
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub created_at_ms: TimestampMs,
    /// When the row last changed (staged again, published, marked).
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub updated_at_ms: TimestampMs,
    /// When it was published; `None` while staged.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub published_at_ms: Option<TimestampMs>,
    /// When its mark for deletion was first seen in the catalog; its deletion grace period
    /// counts from here. A row never published is seen as it is marked: no reader's
    /// generation ever showed it. A published row's mark is seen by garbage collection, on
    /// its own clock read after it read the row, and is `None` until then: the mark's own
    /// stamp (`updated_at_ms`) is read before the write that carries it lands, and a writer
    /// paused in between dates it before readers last saw the split published (found by
    /// `mend-sim`, seed 1282375541035437414). `None` in any other state.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub mark_seen_at_ms: Option<TimestampMs>,
}

/// When a row marked at `now_ms` counts as seen marked: at once if it was never published
/// (no reader's generation showed it), otherwise once garbage collection sees it
/// ([`SplitRow::mark_seen_at_ms`]).
pub fn mark_seen_when_marked(
    published_at_ms: Option<TimestampMs>,
    now_ms: TimestampMs,
) -> Option<TimestampMs> {
    published_at_ms.is_none().then_some(now_ms)
}

/// One split of a stage request, as a caller sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageSplit {
    /// The split's id.
    pub split_id: String,
    /// The metadata as JSON text; it must parse to a JSON object.
    pub metadata_json: String,
}

/// A stage request. The mode is required: there is no default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageRequest {
    /// The dataset to stage in.
    pub dataset_id: String,
    /// Upsert or create-only; see the staging table in docs/src/concepts.md.
    pub mode: StageMode,
    /// The node staging the rows, recorded in each.
    pub node: String,
    /// The splits, in the caller's order; duplicate ids are folded.
    pub splits: Vec<StageSplit>,
}

/// A validated split ready to be written, as the engine hands it to a backend.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSplit {
    /// The split's id.
    pub split_id: String,
    /// The node staging it.
    pub node: String,
    /// The caller's metadata text, checked to be a JSON object. It stays text on the write
    /// path: a batch of thousands of splits is neither built into trees nor serialised again.
    pub metadata_json: String,
    /// The range the metadata's `time_range` names, read once at validation.
    pub time_range: Option<TimeRange>,
}

impl NewSplit {
    /// The metadata as a JSON value.
    pub fn metadata_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.metadata_json)
            .expect("NewSplit metadata is checked to be JSON when the split is validated")
    }
}

/// What a stage request did to one split: the actual outcome at write time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "outcome", content = "existing_state", rename_all = "snake_case")]
pub enum StageOutcome {
    /// This request created the row: the caller owns it.
    Inserted,
    /// The row was staged and now holds this request's content (upsert only).
    Overwritten,
    /// A row existed and was left exactly as it was (create-only only).
    Skipped(SplitState),
}

/// What a stage did to one split.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StagedSplit {
    /// The split's id.
    pub split_id: String,
    /// What happened to its row.
    #[serde(flatten)]
    pub outcome: StageOutcome,
}

/// The result of a stage request: one entry per distinct split id, sorted by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StageResult {
    /// The dataset staged in.
    pub dataset_id: String,
    /// The mode the request ran in.
    pub mode: StageMode,
    /// One entry per distinct requested id, sorted by id.
    pub splits: Vec<StagedSplit>,
}

impl StageResult {
    /// The ids this request inserted: the rows the caller now owns.
    pub fn inserted(&self) -> impl Iterator<Item = &str> {
        self.splits
            .iter()
            .filter(|split| split.outcome == StageOutcome::Inserted)
            .map(|split| split.split_id.as_str())
    }
}

/// A publish: staged ids become published, replaced ids become marked for deletion and the
/// checkpoint delta is applied, all at once or not at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishRequest {
    /// The dataset to publish in.
    pub dataset_id: String,
    /// Staged splits to publish.
    #[serde(default)]
    pub staged_split_ids: Vec<String>,
    /// Published splits the new ones replace: they become marked for deletion.
    #[serde(default)]
    pub replaced_split_ids: Vec<String>,
    /// Each partition's move: `from_position` must be the current position.
    #[serde(default)]
    pub checkpoint_delta: Option<CheckpointDelta>,
    /// The token the dataset requires, if it is fenced (`mend dataset fence`).
    #[serde(default)]
    pub publish_token: Option<String>,
    /// The dataset's fencing epoch the writer read when it began; the publish is refused if
    /// exclusive recovery has moved it on since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_epoch: Option<u64>,
}

impl PublishRequest {
    /// A publish of `staged_split_ids` alone: nothing replaced, no checkpoint delta, no token
    /// and no fencing epoch.
    pub fn staged(dataset_id: impl Into<String>, staged_split_ids: Vec<String>) -> Self {
        Self {
            dataset_id: dataset_id.into(),
            staged_split_ids,
            replaced_split_ids: Vec::new(),
            checkpoint_delta: None,
            publish_token: None,
            fencing_epoch: None,
        }
    }
}

/// What a publish did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PublishResult {
    /// The dataset published in.
    pub dataset_id: String,
    /// The manifest version after the publish.
    pub manifest_version: u64,
    /// The splits it published.
    pub published: Vec<String>,
    /// The splits it marked for deletion (the replaced ones).
    pub marked: Vec<String>,
}

/// What a mark-for-deletion request did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MarkResult {
    /// Ids that this request moved to MarkedForDeletion.
    pub marked: Vec<String>,
    /// Ids that were already marked; marking is idempotent.
    pub already_marked: Vec<String>,
}

/// Filters and paging for listing splits. Results are sorted by split id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListQuery {
    /// Only these states; empty means all.
    #[serde(default)]
    pub states: Vec<SplitState>,
    /// Only these ids.
    #[serde(default)]
    pub split_ids: Option<Vec<String>>,
    /// Only splits whose time range overlaps this one (splits without a range never match).
    #[serde(default)]
    pub time_range: Option<TimeRange>,
    /// Only splits updated at or after this time.
    #[serde(default)]
    pub updated_since_ms: Option<TimestampMs>,
    /// Only splits updated strictly before this time.
    #[serde(default)]
    pub updated_before_ms: Option<TimestampMs>,
    /// Paging: only ids strictly greater than this one.
    #[serde(default)]
    pub after_split_id: Option<String>,
    /// Page size; `None` means every match.
    #[serde(default)]
    pub limit: Option<usize>,
}

impl ListQuery {
    /// Whether `row` passes every filter (not the paging cursor).
    pub fn matches(&self, row: &SplitRow) -> bool {
        self.matches_fields(&row.split_id, row.state, row.time_range, row.updated_at_ms)
    }

    /// [`ListQuery::matches`] on the fields it looks at, for a backend that keeps its rows in
    /// a form of its own and builds a [`SplitRow`] only for the rows it returns.
    pub fn matches_fields(
        &self,
        split_id: &str,
        state: SplitState,
        time_range: Option<TimeRange>,
        updated_at_ms: TimestampMs,
    ) -> bool {
        (self.states.is_empty() || self.states.contains(&state))
            && self
                .split_ids
                .as_ref()
                .is_none_or(|ids| ids.iter().any(|id| id == split_id))
            && self
                .time_range
                .is_none_or(|range| time_range.is_some_and(|row_range| row_range.overlaps(&range)))
            && self
                .updated_since_ms
                .is_none_or(|since| updated_at_ms >= since)
            && self
                .updated_before_ms
                .is_none_or(|before| updated_at_ms < before)
            && self
                .after_split_id
                .as_ref()
                .is_none_or(|after| split_id > after.as_str())
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SplitPage {
    /// At most the query's limit of splits, sorted by id.
    pub splits: Vec<SplitRow>,
    /// Pass as `after_split_id` to fetch the next page; `None` on the last page.
    pub next_after_split_id: Option<String>,
}

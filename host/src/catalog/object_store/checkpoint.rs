//! Checkpoint files: a dataset's whole state at one version, so that a reader without a cache
//! replays only the versions after it (`{catalog}/checkpoints/{version:020}.json`).
//!
//! Format 2, written since checkpoints left the commit path, is one compact JSON object whose
//! splits are rows of values in the order `split_fields` names, each split's metadata embedded
//! as the JSON text the state keeps (no key repeated per split, nothing re-parsed on read):
//!
//! ```text
//! {"format_version":2,"version":300,"dataset":{...},"intents":[...],"recorded":[...],
//!  "split_fields":["split_id","state","node","created_at_ms","updated_at_ms",
//!                  "published_at_ms","time_range","metadata"],
//!  "splits":[["s-000001","published","node-1",1700000000000,1700000000001,1700000000001,
//!             [100,200],{"docs":10}], ...]}
//! ```
//!
//! It is written straight from the persistent maps of a [`DatasetState`], without a copy of
//! the rows. Format 1 (a [`Snapshot`], every split a whole [`crate::model::SplitRow`] object)
//! is still read. A file of a format newer than [`CHECKPOINT_FORMAT_VERSION`] is refused, as
//! every catalog file is ([`super::log::decode`]): a mend that predates format 2 refuses a
//! format 2 checkpoint with "upgrade mend" rather than misreading it.

use std::fmt;

use imbl::OrdMap;
use object_store::path::Path;
use serde::de::{SeqAccess, Visitor};
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::log::{self, Snapshot, corrupt};
use super::state::{DatasetState, StoredSplit};
use crate::catalog::RecordedRequest;
use crate::error::{MendError, Result};
use crate::intent::Intent;
use crate::model::{Dataset, SplitState, TimeRange, TimestampMs};

/// The checkpoint format this code writes, and the newest it reads.
pub(crate) const CHECKPOINT_FORMAT_VERSION: u32 = 2;

/// What each row of `splits` holds, in order.
const SPLIT_FIELDS: [&str; 8] = [
    "split_id",
    "state",
    "node",
    "created_at_ms",
    "updated_at_ms",
    "published_at_ms",
    "time_range",
    "metadata",
];

/// `state` as a format 2 checkpoint, ending in a newline.
pub(crate) fn encode(state: &DatasetState) -> Result<Vec<u8>> {
    let file = CompactOut {
        format_version: CHECKPOINT_FORMAT_VERSION,
        version: state.version,
        dataset: &state.dataset,
        intents: Values(&state.intents),
        recorded: Values(&state.recorded),
        split_fields: SPLIT_FIELDS,
        splits: SplitsOut(&state.splits),
    };
    // A row is about 100 bytes besides its metadata.
    let mut bytes = Vec::with_capacity(4096 + state.splits.len() * 160);
    serde_json::to_writer(&mut bytes, &file)
        .map_err(|err| MendError::invalid(format!("a checkpoint cannot be encoded: {err}")))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// The state a checkpoint file at `path` holds, in either format.
pub(crate) fn decode(path: &Path, bytes: &[u8]) -> Result<DatasetState> {
    let format_version = log::format_version(path, bytes, CHECKPOINT_FORMAT_VERSION)?;
    if format_version < 2 {
        let snapshot: Snapshot = serde_json::from_slice(bytes)
            .map_err(|err| corrupt(path, format!("cannot be parsed: {err}")))?;
        return DatasetState::from_snapshot(snapshot);
    }
    let file: CompactIn = serde_json::from_slice(bytes)
        .map_err(|err| corrupt(path, format!("cannot be parsed: {err}")))?;
    if file.split_fields != SPLIT_FIELDS {
        return Err(corrupt(
            path,
            format!(
                "names its split fields {:?}, not {SPLIT_FIELDS:?}",
                file.split_fields
            ),
        ));
    }
    DatasetState::from_parts(
        file.version,
        file.dataset,
        file.splits.0,
        file.intents,
        file.recorded,
    )
}

#[derive(Serialize)]
struct CompactOut<'a> {
    format_version: u32,
    version: u64,
    dataset: &'a Dataset,
    intents: Values<'a, Intent>,
    recorded: Values<'a, RecordedRequest>,
    split_fields: [&'static str; 8],
    splits: SplitsOut<'a>,
}

#[derive(Deserialize)]
struct CompactIn {
    #[allow(
        dead_code,
        reason = "read by log::format_version; named so that it is known"
    )]
    format_version: u32,
    version: u64,
    dataset: Dataset,
    intents: Vec<Intent>,
    recorded: Vec<RecordedRequest>,
    split_fields: Vec<String>,
    splits: SplitsIn,
}

/// The values of a map, as a JSON array.
struct Values<'a, V>(&'a OrdMap<String, V>);

impl<V: Serialize + Clone> Serialize for Values<'_, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.values())
    }
}

/// One row of `splits`, as [`SPLIT_FIELDS`] orders it.
type Row<'a> = (
    &'a str,
    SplitState,
    &'a str,
    TimestampMs,
    TimestampMs,
    Option<TimestampMs>,
    Option<(i64, i64)>,
    &'a RawValue,
);

type OwnedRow = (
    String,
    SplitState,
    Box<str>,
    TimestampMs,
    TimestampMs,
    Option<TimestampMs>,
    Option<(i64, i64)>,
    Box<RawValue>,
);

struct SplitsOut<'a>(&'a OrdMap<String, StoredSplit>);

impl Serialize for SplitsOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut rows = serializer.serialize_seq(Some(self.0.len()))?;
        for (split_id, split) in self.0.iter() {
            let row: Row<'_> = (
                split_id,
                split.state,
                &split.node,
                split.created_at_ms,
                split.updated_at_ms,
                split.published_at_ms,
                split.time_range.map(|range| (range.start, range.end)),
                split.metadata.raw(),
            );
            rows.serialize_element(&row)?;
        }
        rows.end()
    }
}

/// The splits, read row by row straight into the map (no list of rows in between). A
/// repeated id is a corrupt file.
struct SplitsIn(OrdMap<String, StoredSplit>);

impl<'de> Deserialize<'de> for SplitsIn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        deserializer.deserialize_seq(SplitsVisitor)
    }
}

struct SplitsVisitor;

impl<'de> Visitor<'de> for SplitsVisitor {
    type Value = SplitsIn;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("an array of split rows")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<SplitsIn, A::Error> {
        let mut splits = OrdMap::new();
        while let Some(row) = seq.next_element::<OwnedRow>()? {
            let (
                split_id,
                state,
                node,
                created_at_ms,
                updated_at_ms,
                published_at_ms,
                range,
                metadata,
            ) = row;
            let split = StoredSplit {
                state,
                node,
                metadata: metadata.into(),
                time_range: range.map(|(start, end)| TimeRange { start, end }),
                created_at_ms,
                updated_at_ms,
                published_at_ms,
            };
            if let Some(_repeated) = splits.insert(split_id, split) {
                return Err(serde::de::Error::custom("a split id is repeated"));
            }
        }
        Ok(SplitsIn(splits))
    }
}

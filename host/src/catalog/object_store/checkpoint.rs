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
//!                  "published_at_ms","time_range","metadata","mark_seen_at_ms"],
//!  "splits":[["s-000001","published","node-1",1700000000000,1700000000001,1700000000001,
//!             [100,200],{"docs":10},null], ...],
//!  "splits_crc32":3735928559}
//! ```
//!
//! Format 3 added the last field, `mark_seen_at_ms` ([`crate::model::SplitRow`]); format 2
//! rows end at `metadata`. A row is read with or without it, so a format 3 file may hold rows
//! copied as they were from the format 2 checkpoint it was loaded from, and a format 2 file
//! reads as ever, its marks not yet seen. A mend that predates format 3 refuses a format 3
//! checkpoint rather than forget the marks it has seen.
//!
//! `splits_crc32` (written since rows are read from their bytes; a reader that predates it
//! ignores it) is the CRC-32 (IEEE) of the bytes of `splits`, from its `[` to its `]`.
//!
//! It is written straight from a [`DatasetState`], without a copy of the rows; a row the state
//! still holds as the bytes of the checkpoint it was loaded from is copied as it is. It is read
//! without parsing its rows when it is laid out as this mend writes it and its rows' bytes
//! match `splits_crc32`: every member but `splits` is parsed, and the rows are indexed by split
//! id ([`super::scan`]) and parsed one at a time when they are read ([`super::splits`]), so
//! that a reader of 100,000 splits writes after tens of milliseconds, not after parsing them
//! all. The checksum stands in for the parse as the check that the rows are the ones written:
//! a byte changed in storage is refused at once (`Corrupt`), as a file that does not parse is.
//! A file without it, or laid out otherwise, is parsed whole, as before. Format 1 (a [`Snapshot`], every split a whole [`crate::model::SplitRow`] object)
//! is still read. A file of a format newer than [`CHECKPOINT_FORMAT_VERSION`] is refused, as
//! every catalog file is ([`super::log::decode`]): a mend that predates format 2 refuses a
//! format 2 checkpoint with "upgrade mend" rather than misreading it.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use imbl::OrdMap;
use object_store::path::Path;
use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::log_format::{self, Snapshot, corrupt};
use super::scan;
use super::splits::StoredSplit;
use super::splits::{BaseRows, RowOut, Splits};
use super::state::DatasetState;
use crate::catalog::RecordedRequest;
use crate::error::{MendError, Result};
use crate::intent::Intent;
use crate::model::{Dataset, SplitState, TimeRange, TimestampMs};

/// The checkpoint format this code writes, and the newest it reads.
pub(crate) const CHECKPOINT_FORMAT_VERSION: u32 = 3;

/// What each row of `splits` holds, in order; a format 2 file's rows stop before the last.
const SPLIT_FIELDS: [&str; 9] = [
    "split_id",
    "state",
    "node",
    "created_at_ms",
    "updated_at_ms",
    "published_at_ms",
    "time_range",
    "metadata",
    "mark_seen_at_ms",
];

/// `state` as a format 2 checkpoint, ending in a newline. The members before `splits` are
/// written by serde, the rows one by one after them: a row the state holds as its
/// checkpoint's bytes ([`Splits`]) is copied as it is.
pub(crate) fn encode(state: &DatasetState) -> Result<Vec<u8>> {
    let head = Head {
        format_version: CHECKPOINT_FORMAT_VERSION,
        version: state.version,
        dataset: &state.dataset,
        intents: Values(&state.intents),
        recorded: Values(&state.recorded),
        split_fields: SPLIT_FIELDS,
    };
    let unencodable = |err: serde_json::Error| {
        MendError::invalid(format!("a checkpoint cannot be encoded: {err}"))
    };
    // A row is about 100 bytes besides its metadata.
    let mut bytes = Vec::with_capacity(4096 + state.splits.len() * 160);
    serde_json::to_writer(&mut bytes, &head).map_err(unencodable)?;
    // The head is an object: its closing brace gives way to the splits.
    bytes.pop();
    bytes.extend_from_slice(br#","splits":"#);
    let splits_start = bytes.len();
    bytes.push(b'[');
    for (index, row) in state.splits.rows_out().enumerate() {
        if index > 0 {
            bytes.push(b',');
        }
        match row {
            RowOut::Raw(raw) => bytes.extend_from_slice(raw),
            RowOut::Stored(split_id, split) => {
                serde_json::to_writer(&mut bytes, &row_out(split_id, split)).map_err(unencodable)?
            }
        }
    }
    bytes.push(b']');
    let checksum = crc32fast::hash(&bytes[splits_start..]);
    bytes.extend_from_slice(format!(r#","splits_crc32":{checksum}}}"#).as_bytes());
    bytes.push(b'\n');
    Ok(bytes)
}

/// The state a checkpoint file at `path` holds, in either format. A format 2 file laid out as
/// this mend writes it is indexed rather than parsed: its rows stay `bytes`, each parsed when
/// it is read ([`Splits`]); any other is parsed whole.
pub(crate) fn decode(path: &Path, bytes: Bytes) -> Result<DatasetState> {
    let format_version = log_format::format_version(path, &bytes, CHECKPOINT_FORMAT_VERSION)?;
    if format_version < 2 {
        let snapshot: Snapshot = serde_json::from_slice(&bytes)
            .map_err(|err| corrupt(path, format!("cannot be parsed: {err}")))?;
        return DatasetState::from_snapshot(snapshot);
    }
    if let Some(layout) = scan::layout(&bytes)
        && let Some(state) = decode_indexed(path, &bytes, layout)?
    {
        return Ok(state);
    }
    let file: CompactIn = serde_json::from_slice(&bytes)
        .map_err(|err| corrupt(path, format!("cannot be parsed: {err}")))?;
    check_split_fields(path, &file.split_fields)?;
    DatasetState::from_parts(
        file.version,
        file.dataset,
        file.splits.0,
        file.intents,
        file.recorded,
    )
}

/// A format 2 file whose members and rows `layout` found: every member but `splits` parsed
/// (they are small), the rows indexed once their bytes match `splits_crc32`. `None` for a file
/// without that member (written before it), which is parsed whole.
fn decode_indexed(
    path: &Path,
    bytes: &Bytes,
    layout: scan::Layout,
) -> Result<Option<DatasetState>> {
    let mut head = Vec::with_capacity(
        2 + layout
            .members
            .iter()
            .map(|(key, value)| key.len() + value.len() + 4)
            .sum::<usize>(),
    );
    head.push(b'{');
    for (index, (key, value)) in layout.members.iter().enumerate() {
        if index > 0 {
            head.push(b',');
        }
        head.push(b'"');
        head.extend_from_slice(&bytes[key.clone()]);
        head.extend_from_slice(b"\":");
        head.extend_from_slice(&bytes[value.clone()]);
    }
    head.push(b'}');
    let file: HeadIn = serde_json::from_slice(&head)
        .map_err(|err| corrupt(path, format!("cannot be parsed: {err}")))?;
    check_split_fields(path, &file.split_fields)?;
    let Some(expected) = file.splits_crc32 else {
        return Ok(None);
    };
    let found = crc32fast::hash(&bytes[layout.splits.clone()]);
    if found != expected {
        return Err(corrupt(
            path,
            format!("holds splits whose CRC-32 is {found}, not the {expected} it records"),
        ));
    }
    let splits = Splits::from_base(BaseRows::new(
        bytes.clone(),
        layout.rows,
        path.as_ref(),
        parse_row,
    ));
    DatasetState::from_parts(
        file.version,
        file.dataset,
        splits,
        file.intents,
        file.recorded,
    )
    .map(Some)
}

fn check_split_fields(path: &Path, split_fields: &[String]) -> Result<()> {
    if split_fields != SPLIT_FIELDS && split_fields != &SPLIT_FIELDS[..8] {
        return Err(corrupt(
            path,
            format!("names its split fields {split_fields:?}, not {SPLIT_FIELDS:?}"),
        ));
    }
    Ok(())
}

/// One row of `splits`, as a [`Splits`] base reads it when asked for.
fn parse_row(row: &[u8]) -> std::result::Result<StoredSplit, String> {
    let row: RowIn = serde_json::from_slice(row).map_err(|err| err.to_string())?;
    Ok(stored_split(row).1)
}

fn row_out<'a>(split_id: &'a str, split: &'a StoredSplit) -> Row<'a> {
    (
        split_id,
        split.state,
        &split.node,
        split.created_at_ms,
        split.updated_at_ms,
        split.published_at_ms,
        split.time_range.map(|range| (range.start, range.end)),
        split.metadata.raw(),
        split.mark_seen_at_ms,
    )
}

fn stored_split(row: RowIn) -> (String, StoredSplit) {
    let RowIn {
        split_id,
        state,
        node,
        created_at_ms,
        updated_at_ms,
        published_at_ms,
        range,
        metadata,
        mark_seen_at_ms,
    } = row;
    let split = StoredSplit {
        state,
        node,
        metadata: metadata.into(),
        time_range: range.map(|(start, end)| TimeRange { start, end }),
        created_at_ms,
        updated_at_ms,
        published_at_ms,
        mark_seen_at_ms,
    };
    (split_id, split)
}

/// The members of a format 2 checkpoint before its splits, as written.
#[derive(Serialize)]
struct Head<'a> {
    format_version: u32,
    version: u64,
    dataset: &'a Dataset,
    intents: Values<'a, Intent>,
    recorded: Values<'a, RecordedRequest>,
    split_fields: [&'static str; 9],
}

/// The members of a format 2 checkpoint but its splits, as read.
#[derive(Deserialize)]
struct HeadIn {
    #[allow(
        dead_code,
        reason = "read by log_format::format_version; named so that it is known"
    )]
    format_version: u32,
    version: u64,
    dataset: Dataset,
    intents: Vec<Intent>,
    recorded: Vec<RecordedRequest>,
    split_fields: Vec<String>,
    /// Absent in checkpoints written before rows were read from their bytes.
    #[serde(default)]
    splits_crc32: Option<u32>,
}

#[derive(Deserialize)]
struct CompactIn {
    #[allow(
        dead_code,
        reason = "read by log_format::format_version; named so that it is known"
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
struct Values<'a, V>(&'a OrdMap<Arc<str>, Arc<V>>);

impl<V: Serialize> Serialize for Values<'_, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.values().map(Arc::as_ref))
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
    Option<TimestampMs>,
);

/// One row of `splits` as read: [`SPLIT_FIELDS`] in order, the last of them absent from a
/// format 2 row.
struct RowIn {
    split_id: String,
    state: SplitState,
    node: Box<str>,
    created_at_ms: TimestampMs,
    updated_at_ms: TimestampMs,
    published_at_ms: Option<TimestampMs>,
    range: Option<(i64, i64)>,
    metadata: Box<RawValue>,
    mark_seen_at_ms: Option<TimestampMs>,
}

impl<'de> Deserialize<'de> for RowIn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        deserializer.deserialize_seq(RowVisitor)
    }
}

struct RowVisitor;

impl<'de> Visitor<'de> for RowVisitor {
    type Value = RowIn;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a split row of 8 or 9 fields")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<RowIn, A::Error> {
        fn field<'de, T: Deserialize<'de>, A: SeqAccess<'de>>(
            seq: &mut A,
            index: usize,
        ) -> std::result::Result<T, A::Error> {
            seq.next_element()?
                .ok_or_else(|| serde::de::Error::invalid_length(index, &RowVisitor))
        }
        let row = RowIn {
            split_id: field(&mut seq, 0)?,
            state: field(&mut seq, 1)?,
            node: field(&mut seq, 2)?,
            created_at_ms: field(&mut seq, 3)?,
            updated_at_ms: field(&mut seq, 4)?,
            published_at_ms: field(&mut seq, 5)?,
            range: field(&mut seq, 6)?,
            metadata: field(&mut seq, 7)?,
            mark_seen_at_ms: seq.next_element()?.flatten(),
        };
        if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
            return Err(serde::de::Error::invalid_length(10, &RowVisitor));
        }
        Ok(row)
    }
}

/// The splits of a file parsed whole, read row by row straight into the map (no list of rows
/// in between). A repeated id is a corrupt file.
struct SplitsIn(Splits);

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
        let mut splits = Splits::new();
        while let Some(row) = seq.next_element::<RowIn>()? {
            let (split_id, split) = stored_split(row);
            if splits.contains(&split_id) {
                return Err(serde::de::Error::custom("a split id is repeated"));
            }
            splits.insert(split_id, split);
        }
        Ok(SplitsIn(splits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::object_store::log_format::{Action, Commit, LogRow, RawJson};
    use crate::catalog::object_store::mutations;
    use crate::model::DatasetConfig;

    fn row(split_id: &str, docs: u64) -> LogRow {
        LogRow {
            split_id: split_id.into(),
            state: SplitState::Staged,
            node: "node-a".into(),
            metadata: RawJson::parse(format!(r#"{{"docs":{docs},"tags":["a]","b\"}}"]}}"#))
                .unwrap(),
            time_range: Some(TimeRange { start: 1, end: 2 }),
            created_at_ms: 10,
            updated_at_ms: 11,
            published_at_ms: None,
            mark_seen_at_ms: None,
        }
    }

    fn state_with(ids: &[&str]) -> DatasetState {
        let dataset = mutations::new_dataset("logs", "uid", &DatasetConfig::default(), 0);
        let creation = Commit::new(0, 0, vec![Action::CreateDataset { dataset }]);
        let mut state = DatasetState::from_creation("logs", &creation).unwrap();
        let rows = ids
            .iter()
            .enumerate()
            .map(|(i, id)| row(id, i as u64))
            .collect();
        state
            .apply(&Commit::new(1, 1, vec![Action::PutSplits { rows }]))
            .unwrap();
        state
    }

    fn read(bytes: Vec<u8>) -> DatasetState {
        decode(&Path::from("checkpoints/cp.json"), Bytes::from(bytes)).unwrap()
    }

    /// Read back indexed, a checkpoint is the state it was written from; moved on and
    /// written again (its unchanged rows copied as bytes), it is the state moved on.
    #[test]
    fn an_indexed_checkpoint_reads_and_writes_as_the_state_it_holds() {
        let written = state_with(&["s-1", "s-2", "s-3", "s-4"]);
        let mut loaded = read(encode(&written).unwrap());
        assert!(
            format!("{:?}", loaded.splits).contains("base_rows: Some(4)"),
            "indexed: {:?}",
            loaded.splits
        );
        assert_eq!(loaded, written);

        let moved = Commit::new(
            2,
            2,
            vec![
                Action::PutSplits {
                    rows: vec![row("s-2", 20), row("s-0", 30)],
                },
                Action::DeleteSplits {
                    split_ids: vec!["s-3".into()],
                },
            ],
        );
        loaded.apply(&moved).unwrap();
        let mut expected = written.clone();
        expected.apply(&moved).unwrap();
        assert_eq!(loaded, expected);
        let again = read(encode(&loaded).unwrap());
        assert_eq!(again, expected);
        assert_eq!(encode(&again).unwrap(), encode(&expected).unwrap());
    }

    /// A byte of a row changed in storage is refused when the checkpoint is read, not when
    /// the row is.
    #[test]
    fn a_row_changed_in_storage_is_refused_at_once() {
        let mut bytes = encode(&state_with(&["s-1", "s-2"])).unwrap();
        let at = bytes.windows(4).position(|w| w == b"s-2\"").unwrap() + 2;
        bytes[at] = b'3';
        let error = decode(&Path::from("cp.json"), Bytes::from(bytes)).unwrap_err();
        assert!(
            matches!(&error, MendError::Corrupt { message } if message.contains("CRC-32")),
            "{error:?}"
        );
    }

    /// A checkpoint laid out otherwise (spaces and line breaks, a split id with an escape) is
    /// parsed whole, and reads as the same state.
    #[test]
    fn a_checkpoint_laid_out_otherwise_is_parsed_whole() {
        let written = state_with(&["a\"b", "c"]);
        let bytes = encode(&written).unwrap();
        assert_eq!(read(bytes.clone()), written);
        assert!(format!("{:?}", read(bytes).splits).contains("base_rows: None"));

        let written = state_with(&["a", "b"]);
        let mut value: serde_json::Value =
            serde_json::from_slice(&encode(&written).unwrap()).unwrap();
        // Laid out again, the rows no longer match their checksum.
        let pretty = serde_json::to_vec_pretty(&value).unwrap();
        let error = decode(&Path::from("cp.json"), Bytes::from(pretty)).unwrap_err();
        assert!(
            matches!(&error, MendError::Corrupt { message } if message.contains("CRC-32")),
            "{error:?}"
        );
        // Without it (as written before it): keys in another order (`splits` last but one),
        // spaces in every row and metadata written again (so the rows equal as values, not as
        // texts), parsed whole.
        value.as_object_mut().unwrap().remove("splits_crc32");
        let pretty = serde_json::to_vec_pretty(&value).unwrap();
        let read_back = read(pretty);
        assert!(format!("{:?}", read_back.splits).contains("base_rows: None"));
        let all = crate::model::ListQuery::default();
        assert_eq!(
            read_back.list_splits(&all).unwrap(),
            written.list_splits(&all).unwrap()
        );
        assert_eq!(
            (read_back.version, &read_back.dataset),
            (written.version, &written.dataset)
        );
    }
}

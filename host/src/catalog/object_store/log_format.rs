//! What the catalog's files hold: a commit of the log (its [`Action`]s, each a post-image) and
//! a format 1 checkpoint ([`Snapshot`]), how each is encoded, and the `format_version` every
//! file begins with, so that a file a newer mend wrote is refused instead of guessed at.
//! Where the files live and how they are written is [`super::log`]'s; what a checkpoint of
//! format 2 holds is [`super::checkpoint`]'s.

use object_store::PutPayload;
use object_store::path::Path;
use serde::{Deserialize, Serialize};

use crate::catalog::RecordedRequest;
use crate::catalog::write_audit::WriteRecord;
use crate::error::{MendError, Result};
use crate::intent::Intent;
use crate::model::{Dataset, SplitRow, SplitState, TimeRange, TimestampMs};

/// The newest commit file format this code reads (checkpoints have their own,
/// [`checkpoint::CHECKPOINT_FORMAT_VERSION`]). A commit holding the record of a write
/// ([`Action::RecordWrite`]) is written in format 2, so that a mend that predates write
/// records refuses it as a newer mend's instead of failing on an unknown action; every other
/// commit in format 1, which every mend reads.
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The format of a commit without write records.
const FORMAT_WITHOUT_WRITE_RECORDS: u32 = 1;

/// One change inside a commit, as a post-image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Action {
    /// The dataset as created; only ever the first action of version 0, followed at most by
    /// the [`Action::RecordRequest`] of a creation under an idempotency key.
    CreateDataset { dataset: Dataset },
    /// The dataset record after the commit (config, checkpoint, token, manifest version). It
    /// never moves the fencing epoch: only [`Action::AdvanceFencingEpoch`] does.
    SetDataset { dataset: Dataset },
    /// The dataset's fencing epoch moved on by one, with its manifest version and update time
    /// after the commit. A kind of its own rather than a `SetDataset`, so that a mend that
    /// predates fencing epochs refuses a log holding one instead of replaying it without it.
    AdvanceFencingEpoch {
        fencing_epoch: u64,
        manifest_version: u64,
        updated_at_ms: TimestampMs,
    },
    /// Rows after the commit, inserted or replaced whole.
    PutSplits { rows: Vec<LogRow> },
    /// Rows removed by the commit.
    DeleteSplits { split_ids: Vec<String> },
    /// An operation's intent after the commit, written or replaced whole.
    PutIntent { intent: Box<Intent> },
    /// An intent removed by the commit.
    DeleteIntent { operation_id: String },
    /// A keyed request's result, recorded in the commit of its effect
    /// ([`crate::catalog::recorded`]).
    RecordRequest { record: Box<RecordedRequest> },
    /// Records gc forgot.
    ForgetRequests { keys: Vec<String> },
    /// The record of the write this commit makes ([`crate::catalog::write_audit`]): who, for
    /// which request, what and with what answer. Not part of the dataset's state: retention
    /// copies it to the dataset's write archive before it deletes the commit
    /// (`background.rs`).
    RecordWrite { record: Box<WriteRecord> },
}

/// A split row as a commit carries it: a [`SplitRow`], field for field and in the same JSON,
/// whose metadata stays the JSON text it is, neither parsed when read nor written again from
/// a parsed value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LogRow {
    pub split_id: String,
    pub state: SplitState,
    pub node: String,
    pub metadata: RawJson,
    pub time_range: Option<TimeRange>,
    pub created_at_ms: TimestampMs,
    pub updated_at_ms: TimestampMs,
    pub published_at_ms: Option<TimestampMs>,
    /// Absent while `None`, as in every row written before marks were seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark_seen_at_ms: Option<TimestampMs>,
}

/// JSON text, checked to be well-formed JSON when it was made or read; equal when the texts
/// are.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct RawJson(Box<serde_json::value::RawValue>);

impl RawJson {
    /// `text`, if it is JSON.
    pub fn parse(text: String) -> std::result::Result<Self, serde_json::Error> {
        serde_json::value::RawValue::from_string(text).map(Self)
    }

    /// The compact JSON of `value`.
    pub fn of(value: &serde_json::Value) -> Self {
        Self(serde_json::value::to_raw_value(value).expect("a JSON value always serialises"))
    }

    pub fn get(&self) -> &str {
        self.0.get()
    }

    pub fn raw(&self) -> &serde_json::value::RawValue {
        &self.0
    }
}

impl From<Box<serde_json::value::RawValue>> for RawJson {
    fn from(raw: Box<serde_json::value::RawValue>) -> Self {
        Self(raw)
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

/// One version of a dataset's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Commit {
    pub format_version: u32,
    pub version: u64,
    /// Tells our own commit apart from another writer's when a put's outcome is unclear.
    pub commit_id: String,
    pub committed_at_ms: TimestampMs,
    #[serde(deserialize_with = "deserialize_actions")]
    pub actions: Vec<Action>,
}

/// The actions of a commit. serde reads an internally tagged enum through a buffer that a
/// [`RawJson`] cannot be read from, so each action is taken as JSON text first, and the
/// rows of a `put_splits` are read from that text directly; every other kind goes through
/// the derived reader.
fn deserialize_actions<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Vec<Action>, D::Error> {
    use serde::de::Error;

    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(rename = "type", borrow)]
        kind: std::borrow::Cow<'a, str>,
    }
    #[derive(Deserialize)]
    struct PutSplits {
        rows: Vec<LogRow>,
    }
    let actions = Vec::<Box<serde_json::value::RawValue>>::deserialize(deserializer)?;
    actions
        .iter()
        .map(|action| {
            let Kind { kind } = serde_json::from_str(action.get()).map_err(D::Error::custom)?;
            if kind == "put_splits" {
                let PutSplits { rows } =
                    serde_json::from_str(action.get()).map_err(D::Error::custom)?;
                return Ok(Action::PutSplits { rows });
            }
            serde_json::from_str(action.get()).map_err(D::Error::custom)
        })
        .collect()
}

impl Commit {
    pub fn new(version: u64, committed_at_ms: TimestampMs, actions: Vec<Action>) -> Self {
        let records_a_write = actions
            .iter()
            .any(|action| matches!(action, Action::RecordWrite { .. }));
        Self {
            format_version: if records_a_write {
                FORMAT_VERSION
            } else {
                FORMAT_WITHOUT_WRITE_RECORDS
            },
            version,
            commit_id: crate::ambient::uuid_v4().to_string(),
            committed_at_ms,
            actions,
        }
    }
}

/// The whole state of a dataset at one version as a format 1 checkpoint holds it; read, no
/// longer written ([`super::checkpoint`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Snapshot {
    pub format_version: u32,
    pub version: u64,
    pub dataset: Dataset,
    pub splits: Vec<SplitRow>,
    /// Absent in checkpoints written before intents existed.
    #[serde(default)]
    pub intents: Vec<Intent>,
    /// Absent in checkpoints written before requests were recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recorded: Vec<RecordedRequest>,
}

pub(crate) fn encode(value: &impl Serialize) -> Result<PutPayload> {
    let mut bytes = serde_json::to_vec(value)
        .map_err(|err| MendError::invalid(format!("catalog entry cannot be encoded: {err}")))?;
    bytes.push(b'\n');
    Ok(PutPayload::from(bytes))
}

/// Parses a commit file, refusing one that a newer mend wrote rather than guessing at fields
/// this code does not know.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T> {
    format_version(path, bytes, FORMAT_VERSION)?;
    serde_json::from_slice(bytes).map_err(|err| corrupt(path, format!("cannot be parsed: {err}")))
}

/// The `format_version` of a catalog file, refused if it is newer than `newest`. Every file
/// mend writes begins with it (`{"format_version":N,`), which is read without parsing the
/// rest: a checkpoint is tens of megabytes. Any other file is parsed whole for it.
pub(crate) fn format_version(path: &Path, bytes: &[u8], newest: u32) -> Result<u32> {
    #[derive(Deserialize)]
    struct Header {
        format_version: u32,
    }
    let leading = bytes
        .strip_prefix(br#"{"format_version":"#.as_slice())
        .and_then(|rest| {
            let digits = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
            let after = rest.get(digits)?;
            if digits == 0 || digits > 9 || !matches!(after, b',' | b'}') {
                return None;
            }
            std::str::from_utf8(&rest[..digits])
                .ok()?
                .parse::<u32>()
                .ok()
        });
    let format_version = match leading {
        Some(format_version) => format_version,
        None => {
            serde_json::from_slice::<Header>(bytes)
                .map_err(|err| corrupt(path, format!("is not a catalog file: {err}")))?
                .format_version
        }
    };
    if format_version > newest {
        return Err(corrupt(
            path,
            format!(
                "was written by a newer mend (format version {format_version}, this mend reads \
                 up to {newest}); upgrade mend to read this catalog"
            ),
        ));
    }
    Ok(format_version)
}

pub(crate) fn corrupt(path: &Path, what: String) -> MendError {
    MendError::Corrupt {
        message: format!("{path} {what}"),
    }
}

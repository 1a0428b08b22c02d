//! Request validation: every malformed input is refused with `InvalidArgument` before anything
//! is read or written. Numbers are checked against their ranges in [`crate::bounds`]; this
//! module checks everything else, and says what was wrong quoting at most the first
//! [`QUOTED_CHARS`] characters of what it refuses.
//!
//! Text is checked here once for every backend: whatever a request carries into the catalog
//! (ids, names, metadata, checkpoint names, policy parameters) holds no NUL character
//! (U+0000). PostgreSQL stores none in `text` or `jsonb` and fails the statement, so without
//! this check the same request was stored by the object-storage catalogs and answered
//! "outcome unknown" by Postgres.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::bounds;
use crate::error::{MendError, Result};
use crate::model::{
    CheckpointDelta, DatasetConfig, ListQuery, NewSplit, PublishRequest, StageRequest, TimeRange,
};

/// Longest dataset or split id, in bytes. Ids become object paths, so they stay short.
pub const MAX_ID_BYTES: usize = 128;

/// Longest node name, publish token or fencing token, in bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// Longest idempotency key, in bytes: room for a client's key of [`MAX_NAME_BYTES`] recorded
/// under the name of the principal that sent it (`mend serve` records `PRINCIPAL/KEY`, a
/// principal's name being at most 64 bytes).
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = MAX_NAME_BYTES + 1 + 64;

pub use crate::bounds::{QUOTED_CHARS, truncated};

/// What kind of JSON value `value` is, as a message names it ("an array").
pub fn json_kind(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The one alphabet of dataset and split ids: ASCII letters, digits, `.`, `_` and `-`,
/// starting with a letter or digit, 1 to 128 bytes. An id names a folder or an object, and
/// every object store lists these characters back exactly as they were written; with `%`,
/// `#`, `?`, `*`, brackets or non-ASCII characters some stores list an escaped name, and a
/// split's object would look missing beside an orphan of another name.
fn id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        Some("it is empty")
    } else if id.len() > MAX_ID_BYTES {
        Some("it is longer than 128 bytes")
    } else if !id.starts_with(|first: char| first.is_ascii_alphanumeric()) {
        Some("it must start with an ASCII letter or digit")
    } else if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        Some("it may hold only ASCII letters, digits, '.', '_' and '-'")
    } else {
        None
    }
}

/// A dataset id names a folder: 1 to 128 of `A-Z a-z 0-9 . _ -`, starting with a letter or
/// digit (the one alphabet of ids).
pub fn dataset_id(id: &str) -> Result<()> {
    match id_problem(id) {
        Some(problem) => Err(MendError::invalid(format!(
            "dataset id {:?} is invalid: {problem} (use 1 to {MAX_ID_BYTES} ASCII letters, digits, '.', '_' or '-', starting with a letter or digit)",
            truncated(id, QUOTED_CHARS)
        ))),
        None => Ok(()),
    }
}

/// A split id names an object: the same alphabet as dataset ids.
pub fn split_id(id: &str) -> Result<()> {
    match id_problem(id) {
        Some(problem) => Err(MendError::invalid(format!(
            "split id {:?} is invalid: {problem} (use 1 to {MAX_ID_BYTES} ASCII letters, digits, '.', '_' or '-', starting with a letter or digit)",
            truncated(id, QUOTED_CHARS)
        ))),
        None => Ok(()),
    }
}

/// Whether `c` is invisible or reorders text: bidi controls, zero-width characters and the
/// byte order mark. A name holding one can look like another name.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{FEFF}')
}

/// A free-form name (a node, a token): 1 to 128 bytes, no control or invisible characters,
/// no leading or trailing whitespace. `what` names it in the error.
pub fn name(what: &str, value: &str) -> Result<()> {
    name_within(what, value, MAX_NAME_BYTES)
}

/// [`name`], of at most `max_bytes`.
fn name_within(what: &str, value: &str, max_bytes: usize) -> Result<()> {
    let too_long = format!("it is longer than {max_bytes} bytes");
    let problem = if value.is_empty() {
        Some("it is empty")
    } else if value.len() > max_bytes {
        Some(too_long.as_str())
    } else if value.chars().any(char::is_control) {
        Some("it contains a control character")
    } else if value.chars().any(is_invisible) {
        Some("it contains an invisible or bidi control character")
    } else if value.trim() != value {
        Some("it has leading or trailing whitespace")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(MendError::invalid(format!(
            "{what} {:?} is invalid: {problem} (use 1 to {max_bytes} printable bytes)",
            truncated(value, QUOTED_CHARS)
        ))),
        None => Ok(()),
    }
}

/// The node an operation runs for (it is recorded in rows and audit records).
pub fn node(node: &str) -> Result<()> {
    name("node", node)
}

/// An idempotency key (`Idempotency-Key`, `--idempotency-key`): a name, not starting with
/// `op:`, which is the prefix of the keys an operation's own steps are recorded under.
pub fn idempotency_key(key: &str) -> Result<()> {
    name_within("idempotency key", key, MAX_IDEMPOTENCY_KEY_BYTES)?;
    if key.starts_with("op:") {
        return Err(MendError::invalid(format!(
            "idempotency key {:?} is invalid: keys starting with `op:` are mend's own, for operations",
            truncated(key, QUOTED_CHARS)
        )));
    }
    Ok(())
}

fn split_ids<'a>(ids: impl IntoIterator<Item = &'a String>) -> Result<()> {
    ids.into_iter().try_for_each(|id| split_id(id))
}

/// The limits a stage request is held to.
#[derive(Debug, Clone, Copy)]
pub struct StageLimits {
    /// Most splits in one request.
    pub max_batch: usize,
    /// Most bytes of one split's metadata.
    pub max_metadata_bytes: usize,
}

/// Checks a stage request and turns each split into a [`NewSplit`] (request order kept).
pub fn stage_request(request: &StageRequest, limits: StageLimits) -> Result<Vec<Arc<NewSplit>>> {
    dataset_id(&request.dataset_id)?;
    if request.splits.is_empty() {
        return Err(MendError::invalid("the stage batch is empty"));
    }
    if request.splits.len() > limits.max_batch {
        return Err(MendError::invalid(format!(
            "the stage batch has {} splits, over the limit of {} (limits.max_stage_batch); split it into smaller batches",
            request.splits.len(),
            limits.max_batch
        )));
    }
    node(&request.node)?;
    request
        .splits
        .iter()
        .map(|split| {
            split_id(&split.split_id)?;
            if split.metadata_json.len() > limits.max_metadata_bytes {
                return Err(MendError::invalid(format!(
                    "metadata of split {:?} is {} bytes, over the limit of {} (limits.max_metadata_bytes)",
                    split.split_id,
                    split.metadata_json.len(),
                    limits.max_metadata_bytes
                )));
            }
            let time_range = metadata(&split.split_id, &split.metadata_json)?;
            Ok(Arc::new(NewSplit {
                split_id: split.split_id.clone(),
                node: request.node.clone(),
                metadata_json: split.metadata_json.clone(),
                time_range,
            }))
        })
        .collect()
}

/// Checks split metadata in one pass without building it: a JSON object, whose optional
/// `time_range` is `{"start": <ms>, "end": <ms>}` with `start <= end`, and whose strings, keys
/// and values at any depth, are text every catalog stores: no NUL character (`\u0000`) and no
/// lone surrogate escape (`\ud800`, which is no character at all).
pub fn metadata(split_id: &str, metadata_json: &str) -> Result<Option<TimeRange>> {
    // A struct also deserialises from a JSON array; only an object is metadata.
    if !metadata_json.trim_start().starts_with('{') {
        let problem = match serde_json::from_str::<de::IgnoredAny>(metadata_json) {
            Ok(_) => "must be a JSON object".to_string(),
            Err(error) => format!("is not valid JSON: {error}"),
        };
        return Err(MendError::invalid(format!(
            "metadata of split {split_id:?} {problem}"
        )));
    }
    let found_nul = Cell::new(false);
    let mut json = serde_json::Deserializer::from_str(metadata_json);
    let time_range = TopLevel {
        found_nul: &found_nul,
    }
    .deserialize(&mut json)
    .and_then(|range| json.end().map(|()| range));
    let time_range = match time_range {
        Ok(range) => range,
        Err(_) if found_nul.get() => return Err(nul_in_metadata(split_id, metadata_json)),
        Err(error) => {
            return Err(MendError::invalid(format!(
                "metadata of split {split_id:?} is not valid JSON: {error}"
            )));
        }
    };
    time_range
        .map(|text| {
            serde_json::from_str::<TimeRange>(text.get())
                .ok()
                .filter(|range| range.start <= range.end)
                .ok_or_else(|| {
                    MendError::invalid(format!(
                        "metadata of split {split_id:?} has an invalid time_range: expected {{\"start\": <ms>, \"end\": <ms>}} with start <= end"
                    ))
                })
        })
        .transpose()
}

/// Metadata's top-level object: `time_range` kept as the text it is, every other member
/// walked by [`Strings`]. Nothing is allocated but what the parser needs to unescape a string.
struct TopLevel<'a> {
    found_nul: &'a Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for TopLevel<'_> {
    type Value = Option<&'de RawValue>;

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopLevel<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        // `null` is no time range, as an absent one.
        let mut time_range: Option<Option<&'de RawValue>> = None;
        while let Some(key) = map.next_key_seed(Key {
            found_nul: self.found_nul,
        })? {
            if key == KeyKind::TimeRange {
                if time_range.is_some() {
                    return Err(de::Error::duplicate_field("time_range"));
                }
                time_range = Some(map.next_value()?);
            } else {
                map.next_value_seed(Strings {
                    found_nul: self.found_nul,
                })?;
            }
        }
        Ok(time_range.flatten())
    }
}

/// A top-level key of metadata, checked: whether it is `time_range`.
struct Key<'a> {
    found_nul: &'a Cell<bool>,
}

/// What a top-level key of metadata is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    TimeRange,
    Other,
}

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = KeyKind;

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<KeyKind, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = KeyKind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> std::result::Result<KeyKind, E> {
        check_text(self.found_nul, key)?;
        Ok(if key == "time_range" {
            KeyKind::TimeRange
        } else {
            KeyKind::Other
        })
    }
}

/// Any JSON value of metadata, walked to check every string in it, keys included; nothing is
/// kept. (serde_json refuses a lone surrogate escape in a string it hands over as text.)
#[derive(Clone, Copy)]
struct Strings<'a> {
    found_nul: &'a Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for Strings<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strings<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, text: &str) -> std::result::Result<(), E> {
        check_text(self.found_nul, text)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> std::result::Result<(), A::Error> {
        while items.next_element_seed(self)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> std::result::Result<(), A::Error> {
        while fields.next_key_seed(self)?.is_some() {
            fields.next_value_seed(self)?;
        }
        Ok(())
    }
}

/// Fails the walk at a NUL character, and says so in `found_nul`: the parser's error is then
/// replaced by one that says where the NUL is.
fn check_text<E: de::Error>(found_nul: &Cell<bool>, text: &str) -> std::result::Result<(), E> {
    if text.contains('\0') {
        found_nul.set(true);
        return Err(E::custom("a NUL character"));
    }
    Ok(())
}

/// The error for metadata holding a NUL character, saying where: it is read again, whole,
/// only to find it (a refusal is rare; the walk that found it keeps no path).
fn nul_in_metadata(split_id: &str, metadata_json: &str) -> MendError {
    let place = serde_json::from_str::<serde_json::Value>(metadata_json)
        .ok()
        .and_then(|value| nul_place(&value, &mut String::new()))
        .unwrap_or_else(|| "a string".to_owned());
    MendError::invalid(format!(
        "metadata of split {split_id:?} has a NUL character (\\u0000) in {place}: no catalog stores one (PostgreSQL cannot), so remove it"
    ))
}

/// Where the first NUL character of `value` is, `path` being where `value` is: "the value at
/// tags[2].name", or "the key \"a\\0\" at the top level".
fn nul_place(value: &serde_json::Value, path: &mut String) -> Option<String> {
    use serde_json::Value;
    let shown = |path: &str| {
        if path.is_empty() {
            "the top level".to_owned()
        } else {
            truncated(path, QUOTED_CHARS)
        }
    };
    let within = |path: &mut String, step: &str, item: &Value| {
        let length = path.len();
        path.push_str(step);
        let found = nul_place(item, path);
        path.truncate(length);
        found
    };
    match value {
        Value::String(text) if text.contains('\0') => Some(format!("the value at {}", shown(path))),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(index, item)| within(path, &format!("[{index}]"), item)),
        Value::Object(fields) => fields.iter().find_map(|(key, item)| {
            if key.contains('\0') {
                return Some(format!(
                    "the key {:?} at {}",
                    truncated(key, QUOTED_CHARS),
                    shown(path)
                ));
            }
            let plain = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
            let step = match (plain, path.is_empty()) {
                (true, true) => key.clone(),
                (true, false) => format!(".{key}"),
                (false, _) => format!("[{key:?}]"),
            };
            within(path, &step, item)
        }),
        _ => None,
    }
}

/// A publish names at most `max_splits` splits to publish and replace together.
pub fn publish_request(request: &PublishRequest, max_splits: usize) -> Result<()> {
    dataset_id(&request.dataset_id)?;
    splits_per_request(
        request.staged_split_ids.len() + request.replaced_split_ids.len(),
        max_splits,
    )?;
    if let Some(token) = &request.publish_token {
        name("publish token", token)?;
    }
    split_ids(&request.staged_split_ids)?;
    split_ids(&request.replaced_split_ids)?;
    if request.staged_split_ids.is_empty()
        && request.replaced_split_ids.is_empty()
        && request.checkpoint_delta.is_none()
    {
        return Err(MendError::invalid(
            "the publish names no split to publish or replace and no checkpoint delta",
        ));
    }
    let staged: BTreeSet<&String> = request.staged_split_ids.iter().collect();
    let in_both: Vec<&str> = request
        .replaced_split_ids
        .iter()
        .filter(|id| staged.contains(id))
        .map(String::as_str)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if !in_both.is_empty() {
        return Err(MendError::invalid(format!(
            "splits named both to publish and to replace: {}",
            in_both.join(", ")
        )));
    }
    if let Some(delta) = &request.checkpoint_delta {
        checkpoint_delta(delta)?;
    }
    Ok(())
}

/// A checkpoint delta: a source named as nodes are ([`name`]), and 1 to
/// [`bounds::CHECKPOINT_DELTA_PARTITIONS`] partitions, each named as nodes are and named once,
/// whose positions are within [`bounds::CHECKPOINT_POSITION`] and move forward. (Whether it
/// applies to the dataset's checkpoint, and fits its cap of partitions, is the publish's to
/// say: `catalog::checkpoint_after`.)
pub fn checkpoint_delta(delta: &CheckpointDelta) -> Result<()> {
    name("checkpoint source", &delta.source)?;
    let source = truncated(&delta.source, QUOTED_CHARS);
    let most = bounds::CHECKPOINT_DELTA_PARTITIONS.max;
    match u64::try_from(delta.partitions.len()).unwrap_or(u64::MAX) {
        0 => {
            return Err(MendError::invalid(format!(
                "the checkpoint delta of source {source:?} moves no partition: name at least one"
            )));
        }
        count if count > most => {
            return Err(MendError::invalid(format!(
                "the checkpoint delta of source {source:?} moves {count} partitions, over the limit of {most} per delta; move them in several publishes"
            )));
        }
        _ => {}
    }
    let mut partitions = BTreeSet::new();
    for partition in &delta.partitions {
        name("checkpoint partition", &partition.partition)?;
        let quoted = truncated(&partition.partition, QUOTED_CHARS);
        if !partitions.insert(partition.partition.as_str()) {
            return Err(MendError::invalid(format!(
                "checkpoint partition {quoted:?} is named twice in one delta"
            )));
        }
        let position = |field: &str, value: u64| {
            bounds::CHECKPOINT_POSITION.within(value).map_err(|_| {
                MendError::invalid(format!(
                    "checkpoint partition {quoted:?}: {field} is {value}, out of its range {}",
                    bounds::CHECKPOINT_POSITION
                ))
            })
        };
        if let Some(from) = partition.from_position {
            position("from_position", from)?;
        }
        position("to_position", partition.to_position)?;
        if let Some(from) = partition.from_position
            && partition.to_position <= from
        {
            return Err(MendError::invalid(format!(
                "checkpoint delta of partition {quoted:?} moves from {from} to {}: positions only move forward",
                partition.to_position
            )));
        }
    }
    Ok(())
}

/// Mark and delete take a non-empty list of at most `max_splits` valid ids.
pub fn split_id_list(dataset: &str, ids: &[String], max_splits: usize) -> Result<()> {
    dataset_id(dataset)?;
    if ids.is_empty() {
        return Err(MendError::invalid("no split id given"));
    }
    splits_per_request(ids.len(), max_splits)?;
    split_ids(ids)
}

/// One request names at most `max_splits` splits (the `limits.max_stage_batch` setting).
fn splits_per_request(count: usize, max_splits: usize) -> Result<()> {
    if count > max_splits {
        return Err(MendError::invalid(format!(
            "the request names {count} splits, over the limit of {max_splits} (limits.max_stage_batch); split it into smaller requests"
        )));
    }
    Ok(())
}

/// A dataset config: grace periods in their ranges, policy parameters few and short.
pub fn config(config: &DatasetConfig) -> Result<()> {
    bounds::STAGED_GRACE_PERIOD_MS.check(config.staged_grace_period_ms)?;
    bounds::DELETION_GRACE_PERIOD_MS.check(config.deletion_grace_period_ms)?;
    bounds::POLICY_PARAMS.check_usize(config.policy_params.len())?;
    for (key, value) in &config.policy_params {
        name("policy parameter", key)?;
        if value.contains('\0') {
            return Err(MendError::invalid(format!(
                "policy parameter {:?} has a NUL character (\\u0000) in its value: no catalog stores one (PostgreSQL cannot), so remove it",
                truncated(key, QUOTED_CHARS)
            )));
        }
        if value.len() > bounds::POLICY_PARAM_VALUE_BYTES.max as usize {
            return Err(MendError::invalid(format!(
                "policy parameter {:?} is {} bytes long, over the limit of {}",
                truncated(key, QUOTED_CHARS),
                value.len(),
                bounds::POLICY_PARAM_VALUE_BYTES.max
            )));
        }
    }
    Ok(())
}

/// A listing's filters and page: valid ids, a time range that is one, and a page size of 1 to
/// `max_page` splits.
pub fn list_query(query: &ListQuery, max_page: usize) -> Result<()> {
    if let Some(ids) = &query.split_ids {
        split_ids(ids)?;
    }
    if let Some(after) = &query.after_split_id {
        split_id(after)?;
    }
    if let Some(range) = query.time_range
        && range.start > range.end
    {
        return Err(MendError::invalid(format!(
            "time range {}..{} is empty: its start must not be after its end",
            range.start, range.end
        )));
    }
    if let Some(limit) = query.limit
        && (limit == 0 || limit > max_page)
    {
        return Err(MendError::invalid(format!(
            "limit is {limit}, out of its range 1..={max_page} (limits.max_list_page)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_ids_use_the_one_alphabet() {
        for good in ["a", "split-01", "0.v2_final", &"x".repeat(128)] {
            assert!(split_id(good).is_ok(), "{good}");
        }
        let mut bad: Vec<String> = [
            "",
            "a/b",
            "a\\b",
            "a\nb",
            "a\u{7}",
            ".",
            "..",
            "-a",
            ".hidden",
            "日本",
            "a b",
            " a",
            "a ",
            "\u{FEFF}a",
            "a\u{202E}b",
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        bad.push("x".repeat(129));
        // Every character some object store escapes in a listing.
        bad.extend(
            "%*~#?[]{}^|<>\"`:;=+@!$&',()"
                .chars()
                .map(|c| format!("a{c}12")),
        );
        for bad in &bad {
            assert!(
                matches!(split_id(bad), Err(MendError::InvalidArgument { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn errors_quote_at_most_the_first_64_characters() {
        let long = format!("{}#", "y".repeat(1000));
        let message = split_id(&long).unwrap_err().to_string();
        assert!(
            message.contains(&format!("{}…", "y".repeat(64))),
            "{message}"
        );
        assert!(!message.contains(&"y".repeat(65)), "{message}");
    }

    #[test]
    fn names_are_printable_and_trimmed() {
        assert!(node("indexer-7 on host a").is_ok());
        for bad in [
            "",
            " a",
            "a ",
            "a\tb",
            "\u{FEFF}a",
            "a\u{2066}b",
            &"n".repeat(129),
        ] {
            assert!(node(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn list_queries_are_checked() {
        let query = |limit, range: Option<(i64, i64)>| ListQuery {
            limit,
            time_range: range.map(|(start, end)| TimeRange { start, end }),
            ..ListQuery::default()
        };
        assert!(list_query(&query(Some(1000), Some((1, 5))), 1000).is_ok());
        assert!(list_query(&query(None, Some((5, 5))), 1000).is_ok());
        for bad in [
            query(Some(0), None),
            query(Some(1001), None),
            query(None, Some((5, 1))),
        ] {
            assert!(list_query(&bad, 1000).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn metadata_must_be_an_object_with_a_sane_time_range() {
        assert!(
            metadata("s", r#" {"docs": 3, "nested": {"time_range": 5}}"#)
                .unwrap()
                .is_none()
        );
        let range = metadata("s", r#"{"time_range": {"start": 1, "end": 2}}"#).unwrap();
        assert_eq!(range, Some(TimeRange { start: 1, end: 2 }));
        for bad in [
            "not json",
            "[1]",
            "3",
            r#"{"time_range": {"start": 2, "end": 1}}"#,
            r#"{"time_range": "soon"}"#,
            r#"{"docs": 3"#,
            r#"{"docs": 3} trailing"#,
        ] {
            assert!(metadata("s", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn metadata_with_a_nul_character_is_refused_saying_where() {
        let cases = [
            (r#"{"k\u0000": 1}"#, r#"the key "k\0" at the top level"#),
            (r#"{"k": "a\u0000b"}"#, "the value at k"),
            (
                r#"{"a": {"b": ["x", {"c": "y\u0000"}]}}"#,
                "the value at a.b[1].c",
            ),
            (
                r#"{"odd key": {"\u0000": 1}}"#,
                r#"the key "\0" at ["odd key"]"#,
            ),
            (
                r#"{"time_range": {"start": 1, "end": 2}, "t": "\u0000"}"#,
                "the value at t",
            ),
        ];
        for (text, place) in cases {
            let message = metadata("s", text).unwrap_err().to_string();
            assert!(
                message.contains(r#"metadata of split "s" has a NUL character (\u0000)"#)
                    && message.contains(place),
                "{text}: {message}"
            );
            assert!(!message.contains('\0'), "{message:?}");
        }
        // An escaped backslash before `u0000` is six ordinary characters; `null` is no time
        // range; a lone surrogate is no character and is refused as JSON.
        assert!(metadata("s", r#"{"k": "\\u0000", "\\u0000": 1}"#).is_ok());
        assert_eq!(metadata("s", r#"{"time_range": null}"#).unwrap(), None);
        let lone = metadata("s", r#"{"k": "\ud800"}"#).unwrap_err().to_string();
        assert!(lone.contains("is not valid JSON"), "{lone}");
        let twice = metadata("s", r#"{"time_range": null, "time_range": null}"#);
        assert!(twice.is_err());
    }

    #[test]
    fn checkpoint_deltas_are_named_counted_and_bounded() {
        use crate::model::PartitionDelta;
        let delta = |source: &str, partitions: Vec<(&str, Option<u64>, u64)>| CheckpointDelta {
            source: source.into(),
            partitions: partitions
                .into_iter()
                .map(|(partition, from_position, to_position)| PartitionDelta {
                    partition: partition.into(),
                    from_position,
                    to_position,
                })
                .collect(),
        };
        let top = i64::MAX as u64;
        assert!(checkpoint_delta(&delta("kafka", vec![("0", None, top)])).is_ok());
        assert!(checkpoint_delta(&delta("kafka", vec![("0", Some(top - 1), top)])).is_ok());
        let bad = [
            (delta("", vec![("0", None, 1)]), "checkpoint source"),
            (delta("k\0", vec![("0", None, 1)]), "checkpoint source"),
            (delta("kafka", vec![]), "moves no partition"),
            (
                delta("kafka", vec![("p\u{202E}", None, 1)]),
                "checkpoint partition",
            ),
            (
                delta("kafka", vec![("0", None, 1), ("0", None, 2)]),
                "named twice",
            ),
            (delta("kafka", vec![("0", None, top + 1)]), "to_position"),
            (
                delta("kafka", vec![("0", Some(top + 1), u64::MAX)]),
                "from_position",
            ),
            (delta("kafka", vec![("0", Some(5), 5)]), "only move forward"),
        ];
        for (delta, says) in bad {
            let message = checkpoint_delta(&delta).unwrap_err().to_string();
            assert!(message.contains(says), "{delta:?}: {message}");
        }
        let most = bounds::CHECKPOINT_DELTA_PARTITIONS.max as usize;
        let names: Vec<String> = (0..=most).map(|n| n.to_string()).collect();
        let many = delta(
            "kafka",
            names.iter().map(|name| (name.as_str(), None, 1)).collect(),
        );
        let message = checkpoint_delta(&many).unwrap_err().to_string();
        assert!(message.contains(&format!(
            "{} partitions, over the limit of {most}",
            most + 1
        )));
    }

    #[test]
    fn dataset_ids_name_folders() {
        assert!(dataset_id("logs-2024.v1_a").is_ok());
        for bad in ["", "-x", ".x", "a/b", "a b", &"d".repeat(129)] {
            assert!(dataset_id(bad).is_err(), "{bad:?}");
        }
    }

    /// Every limit holds at its edge: the longest value passes, one byte (or split) more is
    /// refused saying by how much.
    #[test]
    fn every_limit_admits_its_edge_and_refuses_one_more() {
        // A client's key of 128 bytes recorded under a principal's name of 64: 193 bytes.
        assert_eq!(MAX_IDEMPOTENCY_KEY_BYTES, 193);
        assert!(idempotency_key(&"k".repeat(193)).is_ok());
        let over = idempotency_key(&"k".repeat(194)).unwrap_err().to_string();
        assert!(over.contains("longer than 193 bytes"), "{over}");
        assert!(idempotency_key("indexer/retry-7").is_ok());
        for bad in ["", "op:x", " k", "k\n"] {
            assert!(
                matches!(idempotency_key(bad), Err(MendError::InvalidArgument { .. })),
                "{bad:?}"
            );
        }

        assert!(node(&"n".repeat(MAX_NAME_BYTES)).is_ok());
        let over = node(&"n".repeat(MAX_NAME_BYTES + 1))
            .unwrap_err()
            .to_string();
        assert!(over.contains("longer than 128 bytes"), "{over}");

        let limits = StageLimits {
            max_batch: 3,
            max_metadata_bytes: 20,
        };
        let request = |splits: usize, metadata: &str| StageRequest {
            dataset_id: "d".into(),
            mode: crate::model::StageMode::Upsert,
            node: "n".into(),
            splits: (0..splits)
                .map(|i| crate::model::StageSplit {
                    split_id: format!("s{i}"),
                    metadata_json: metadata.into(),
                })
                .collect(),
        };
        // 20 bytes of metadata, and 21.
        let (edge, over) = (r#"{"a":"0123456789ab"}"#, r#"{"a":"0123456789abc"}"#);
        assert_eq!((edge.len(), over.len()), (20, 21));
        assert_eq!(stage_request(&request(3, edge), limits).unwrap().len(), 3);
        let batch = stage_request(&request(4, edge), limits)
            .unwrap_err()
            .to_string();
        assert!(batch.contains("4 splits, over the limit of 3"), "{batch}");
        let metadata = stage_request(&request(1, over), limits)
            .unwrap_err()
            .to_string();
        assert!(
            metadata.contains("21 bytes, over the limit of 20"),
            "{metadata}"
        );

        // A publish counts the splits it publishes and those it replaces together.
        let ids = |prefix: &str, n: usize| (0..n).map(|i| format!("{prefix}{i}")).collect();
        let publish = |staged: usize, replaced: usize| PublishRequest {
            replaced_split_ids: ids("r", replaced),
            ..PublishRequest::staged("d", ids("s", staged))
        };
        assert!(publish_request(&publish(2, 1), 3).is_ok());
        let over = publish_request(&publish(3, 1), 3).unwrap_err().to_string();
        assert!(
            over.contains("names 4 splits, over the limit of 3"),
            "{over}"
        );
        assert!(split_id_list("d", &ids("s", 3), 3).is_ok());
        let over = split_id_list("d", &ids("s", 4), 3).unwrap_err().to_string();
        assert!(
            over.contains("names 4 splits, over the limit of 3"),
            "{over}"
        );

        let with_value = |bytes: usize| DatasetConfig {
            policy_params: [("p".to_string(), "v".repeat(bytes))].into(),
            ..DatasetConfig::default()
        };
        assert!(config(&with_value(0)).is_ok());
        assert!(config(&with_value(4096)).is_ok());
        let over = config(&with_value(4097)).unwrap_err().to_string();
        assert!(
            over.contains("4097 bytes long, over the limit of 4096"),
            "{over}"
        );
    }

    /// Messages name what they found: "expected an object, found an array".
    #[test]
    fn json_values_are_named_by_kind() {
        use serde_json::json;
        let named: Vec<&str> = [
            json!(null),
            json!(true),
            json!(1.5),
            json!("x"),
            json!([1]),
            json!({"a": 1}),
        ]
        .iter()
        .map(json_kind)
        .collect();
        assert_eq!(
            named,
            [
                "null",
                "a boolean",
                "a number",
                "a string",
                "an array",
                "an object"
            ]
        );
    }
}

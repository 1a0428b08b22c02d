//! Request validation: every malformed input is refused with `InvalidArgument` before anything
//! is read or written. Numbers are checked against their ranges in [`crate::bounds`]; this
//! module checks everything else, and says what was wrong quoting at most the first
//! [`QUOTED_CHARS`] characters of what it refuses.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::bounds;
use crate::error::{MendError, Result};
use crate::model::{DatasetConfig, ListQuery, NewSplit, PublishRequest, StageRequest, TimeRange};

/// Longest dataset or split id, in bytes. Ids become object paths, so they stay short.
pub const MAX_ID_BYTES: usize = 128;

/// Longest node name, publish token or fencing token, in bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// How much of a refused value an error quotes: enough to find it, never a whole payload.
pub const QUOTED_CHARS: usize = 64;

/// What a refused value looks like in an error: its first `chars` characters, with `…` when
/// there were more.
pub fn truncated(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

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
    let problem = if value.is_empty() {
        Some("it is empty")
    } else if value.len() > MAX_NAME_BYTES {
        Some("it is longer than 128 bytes")
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
            "{what} {:?} is invalid: {problem} (use 1 to {MAX_NAME_BYTES} printable bytes)",
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
    name("idempotency key", key)?;
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
/// `time_range` is `{"start": <ms>, "end": <ms>}` with `start <= end`.
pub fn metadata(split_id: &str, metadata_json: &str) -> Result<Option<TimeRange>> {
    /// Reads only `time_range`, as the text it is; every other field is checked and skipped,
    /// not allocated.
    #[derive(serde::Deserialize)]
    struct Fields<'a> {
        #[serde(default, borrow)]
        time_range: Option<&'a serde_json::value::RawValue>,
    }
    // A struct also deserialises from a JSON array; only an object is metadata.
    if !metadata_json.trim_start().starts_with('{') {
        let problem = match serde_json::from_str::<serde::de::IgnoredAny>(metadata_json) {
            Ok(_) => "must be a JSON object".to_string(),
            Err(error) => format!("is not valid JSON: {error}"),
        };
        return Err(MendError::invalid(format!(
            "metadata of split {split_id:?} {problem}"
        )));
    }
    let fields: Fields = serde_json::from_str(metadata_json).map_err(|error| {
        MendError::invalid(format!(
            "metadata of split {split_id:?} is not valid JSON: {error}"
        ))
    })?;
    fields
        .time_range
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
        if delta.source.is_empty() || delta.partitions.is_empty() {
            return Err(MendError::invalid(
                "a checkpoint delta needs a source and at least one partition",
            ));
        }
        let mut partitions = BTreeSet::new();
        for partition in &delta.partitions {
            if partition.partition.is_empty() || !partitions.insert(&partition.partition) {
                return Err(MendError::invalid(format!(
                    "checkpoint delta partition {:?} is empty or named twice",
                    partition.partition
                )));
            }
            if partition
                .from_position
                .is_some_and(|from| partition.to_position <= from)
            {
                return Err(MendError::invalid(format!(
                    "checkpoint delta of partition {:?} moves from {} to {}: positions only move forward",
                    partition.partition,
                    partition.from_position.unwrap_or_default(),
                    partition.to_position
                )));
            }
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
    fn dataset_ids_name_folders() {
        assert!(dataset_id("logs-2024.v1_a").is_ok());
        for bad in ["", "-x", ".x", "a/b", "a b", &"d".repeat(129)] {
            assert!(dataset_id(bad).is_err(), "{bad:?}");
        }
    }
}

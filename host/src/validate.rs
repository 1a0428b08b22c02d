//! Request validation: every malformed input is refused with `InvalidArgument` before anything
//! is read or written.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::error::{MendError, Result};
use crate::model::{DatasetConfig, NewSplit, PublishRequest, StageRequest, TimeRange};

/// Longest dataset or split id, in bytes. Ids become object paths, so they stay short.
pub const MAX_ID_BYTES: usize = 128;

/// A dataset id names a folder: ASCII letters, digits, `.`, `_` and `-`, starting with a
/// letter or digit.
pub fn dataset_id(id: &str) -> Result<()> {
    let valid_start = id
        .chars()
        .next()
        .is_some_and(|first| first.is_ascii_alphanumeric());
    let valid_chars = id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if id.len() > MAX_ID_BYTES || !valid_start || !valid_chars {
        return Err(MendError::invalid(format!(
            "dataset id {id:?} is invalid: use 1 to {MAX_ID_BYTES} ASCII letters, digits, '.', '_' or '-', starting with a letter or digit"
        )));
    }
    Ok(())
}

/// A split id is one path segment: non-empty, at most 128 bytes, no `/` or `\`, no control
/// characters, and not `.` or `..`.
pub fn split_id(id: &str) -> Result<()> {
    let problem = if id.is_empty() {
        Some("it is empty")
    } else if id.len() > MAX_ID_BYTES {
        Some("it is longer than 128 bytes")
    } else if id.contains(['/', '\\']) {
        Some("it contains a path separator")
    } else if id.chars().any(char::is_control) {
        Some("it contains a control character")
    } else if id == "." || id == ".." {
        Some("it is a relative path component")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(MendError::invalid(format!(
            "split id {id:?} is invalid: {problem}"
        ))),
        None => Ok(()),
    }
}

fn split_ids<'a>(ids: impl IntoIterator<Item = &'a String>) -> Result<()> {
    ids.into_iter().try_for_each(|id| split_id(id))
}

/// Checks a stage request and turns each split into a [`NewSplit`] (request order kept).
pub fn stage_request(request: &StageRequest, max_batch: usize) -> Result<Vec<Arc<NewSplit>>> {
    dataset_id(&request.dataset_id)?;
    if request.splits.is_empty() {
        return Err(MendError::invalid("the stage batch is empty"));
    }
    if request.splits.len() > max_batch {
        return Err(MendError::invalid(format!(
            "the stage batch has {} splits, over the limit of {max_batch}; split it into smaller batches",
            request.splits.len()
        )));
    }
    if request.node.is_empty()
        || request.node.len() > MAX_ID_BYTES
        || request.node.chars().any(char::is_control)
    {
        return Err(MendError::invalid(format!(
            "node {:?} is invalid: use 1 to {MAX_ID_BYTES} bytes without control characters",
            request.node
        )));
    }
    request
        .splits
        .iter()
        .map(|split| {
            split_id(&split.split_id)?;
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
    /// Reads only `time_range`; every other field is checked and skipped, not allocated.
    #[derive(serde::Deserialize)]
    struct Fields {
        #[serde(default)]
        time_range: Option<serde_json::Value>,
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
        .map(|value| {
            serde_json::from_value::<TimeRange>(value)
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

pub fn publish_request(request: &PublishRequest) -> Result<()> {
    dataset_id(&request.dataset_id)?;
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
                    "checkpoint delta of partition {:?} moves from {:?} to {}: positions only move forward",
                    partition.partition, partition.from_position, partition.to_position
                )));
            }
        }
    }
    Ok(())
}

/// Mark and delete take a non-empty list of valid ids.
pub fn split_id_list(dataset: &str, ids: &[String]) -> Result<()> {
    dataset_id(dataset)?;
    if ids.is_empty() {
        return Err(MendError::invalid("no split id given"));
    }
    split_ids(ids)
}

pub fn config(config: &DatasetConfig) -> Result<()> {
    if config.staged_grace_period_ms == 0 {
        return Err(MendError::invalid(
            "staged_grace_period_ms must be positive: a zero grace period would collect splits while they are being written",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_ids_are_single_short_printable_segments() {
        for good in ["a", "split-01", "日本", &"x".repeat(128)] {
            assert!(split_id(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "a/b",
            "a\\b",
            "a\nb",
            "a\u{7}",
            ".",
            "..",
            &"x".repeat(129),
        ] {
            assert!(
                matches!(split_id(bad), Err(MendError::InvalidArgument { .. })),
                "{bad:?}"
            );
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

//! Request bodies: JSON objects, checked against what each route expects, with messages that
//! say what was expected rather than where the parser stopped; and, for stage and begin, the
//! same request in mend's compact encoding ([`COMPACT_BODY`]).
//!
//! A body that decodes is read once. One that does not is read again to explain it: first as
//! JSON (a syntax error keeps the parser's line and column), then it must be an object, and is
//! then decoded field by field; a field that does not decode is named
//! with what it must be (`mode must be "upsert" or "create-only"`).

use axum::body::Bytes;
use axum::http::{HeaderMap, header};
use mend::compact::{Decoded, Reader};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;

/// The content type of a compact body, version 1: the request in mend's compact encoding
/// ([`mend::compact`]), each route's layout in the book's HTTP API page. For a writer that
/// stages many splits, it spares both sides the JSON of every split. The version is in the
/// name: a server refuses a version it does not know rather than read it as one it does.
pub(crate) const COMPACT_BODY: &str = "application/vnd.mend.compact.v1";

/// What every version of the compact body's content type starts with.
const COMPACT_BODY_FAMILY: &str = "application/vnd.mend.compact";

/// A route's body that may also come in the compact encoding.
pub(crate) trait CompactBody: JsonBody {
    /// What a client should send, for the message when the compact body is unreadable.
    const COMPACT_LAYOUT: &'static str;

    /// Reads the request, every field in its order; the caller refuses bytes left after it.
    fn read_compact(input: &mut Reader<'_>) -> Decoded<Self>;
}

/// Parses a body in the encoding its `Content-Type` names: [`COMPACT_BODY`], or JSON for any
/// other type (or none), as every route reads it. Another version of the compact body is
/// refused by name.
pub(crate) fn parse_json_or_compact<T: CompactBody>(
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<T, ApiError> {
    let media_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(|value| value.split(';').next().unwrap_or_default().trim());
    match media_type {
        Some(media_type) if media_type.eq_ignore_ascii_case(COMPACT_BODY) => {
            parse_compact::<T>(body)
        }
        Some(media_type)
            if media_type
                .to_ascii_lowercase()
                .starts_with(COMPACT_BODY_FAMILY) =>
        {
            Err(ApiError::bad_request(format!(
                "this server reads compact bodies of type {COMPACT_BODY} only, not {media_type}: \
                 send that version, or JSON"
            )))
        }
        _ => parse::<T>(body),
    }
}

/// Whether the request's `Accept` header names [`COMPACT_BODY`] (with no `q=0`): the route
/// then answers in the compact encoding where it has one (a stage's answer by index). Any
/// other `Accept`, another version of the compact type included, is answered JSON, under its
/// own `Content-Type`: a client that asked for a version this server does not write sees
/// which one it got.
pub(crate) fn accepts_compact(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media_type = parts.next().unwrap_or_default();
            let refused = parts.any(|parameter| {
                parameter.split_once('=').is_some_and(|(name, weight)| {
                    name.trim().eq_ignore_ascii_case("q")
                        && weight.trim().parse::<f32>().is_ok_and(|q| q == 0.0)
                })
            });
            media_type.eq_ignore_ascii_case(COMPACT_BODY) && !refused
        })
}

/// Parses a compact body: every field of `T` in order, and nothing after.
pub(crate) fn parse_compact<T: CompactBody>(body: &Bytes) -> Result<T, ApiError> {
    let mut input = Reader::new(body);
    T::read_compact(&mut input)
        .and_then(|parsed| input.finish().map(|()| parsed))
        .map_err(|what| {
            ApiError::bad_request(format!(
                "the {COMPACT_BODY} body of {} bytes is unreadable: {what}; it must be {}",
                body.len(),
                T::COMPACT_LAYOUT
            ))
        })
}

/// A route's JSON body.
pub(crate) trait JsonBody: DeserializeOwned {
    /// The whole body as a client should write it, for the message when it is not an object
    /// or lacks a field.
    const SHAPE: &'static str;
    /// What each field must be, by its name.
    const FIELDS: &'static [(&'static str, &'static str)];
}

/// Parses a JSON body; an empty body is `{}`.
///
/// A body that is an object and decodes is read once, straight into `T`. Any other body is
/// read again the careful way, first as a JSON value, to say what is wrong with it; reading
/// every body twice cost a 100-split stage request a parse of each split's metadata more.
pub(crate) fn parse<T: JsonBody>(body: &Bytes) -> Result<T, ApiError> {
    // Only an object goes the fast way: a derived struct would also accept an array.
    if body.iter().find(|byte| !byte.is_ascii_whitespace()) == Some(&b'{') {
        let mut json = serde_json::Deserializer::from_slice(body);
        if let Ok(decoded) = T::deserialize(&mut json)
            && json.end().is_ok()
        {
            return Ok(decoded);
        }
    }
    explain::<T>(body)
}

/// Parses a body that the fast way refused, for the message that says why.
fn explain<T: JsonBody>(body: &Bytes) -> Result<T, ApiError> {
    let value: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_slice(body).map_err(|error| {
            ApiError::bad_request(format!("the body is not valid JSON: {error}"))
        })?
    };
    if !value.is_object() {
        return Err(ApiError::bad_request(format!(
            "the body must be a JSON object {}, not {}",
            T::SHAPE,
            mend::validate::json_kind(&value)
        )));
    }
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        let field = path
            .split(['.', '['])
            .next()
            .filter(|field| !field.is_empty() && *field != "?");
        let cause = error.into_inner().to_string();
        let expected = field.and_then(|field| {
            T::FIELDS
                .iter()
                .find(|(name, _)| *name == field)
                .map(|(name, expected)| (name, expected))
        });
        ApiError::bad_request(match expected {
            Some((name, expected)) if path == *name => {
                format!("{name} must be {expected} ({cause})")
            }
            Some((name, expected)) => format!("{path}: {cause}; {name} must be {expected}"),
            // A missing or unknown field: the message names it; the shape says the rest.
            None => format!("{cause}; the body must be a JSON object {}", T::SHAPE),
        })
    })
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Example {
        mode: mend_contract::StageMode,
        #[serde(default)]
        splits: Vec<Entry>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Entry {
        split_id: String,
    }

    impl JsonBody for Example {
        const SHAPE: &'static str = r#"{"mode": "upsert"|"create-only", "splits"?: [...]}"#;
        const FIELDS: &'static [(&'static str, &'static str)] = &[
            ("mode", r#""upsert" or "create-only""#),
            ("splits", r#"an array of {"split_id": STRING}"#),
        ];
    }

    fn message(body: &str) -> String {
        parse::<Example>(&Bytes::from(body.to_owned()))
            .unwrap_err()
            .message()
            .to_owned()
    }

    #[test]
    fn each_kind_of_bad_body_says_what_was_expected() {
        let cases = [
            (
                r#"{"mode": null}"#,
                r#"mode must be "upsert" or "create-only""#,
            ),
            (
                r#"{"mode": "sideways"}"#,
                r#"mode must be "upsert" or "create-only""#,
            ),
            ("[1, 2]", "the body must be a JSON object {\"mode\""),
            ("7", "not a number"),
            ("{}", "missing field `mode`; the body must be a JSON object"),
            (
                r#"{"mode": "upsert", "colour": 1}"#,
                "unknown field `colour`",
            ),
            (
                r#"{"mode": "upsert", "splits": [{"split_id": 5}]}"#,
                "splits[0].split_id: invalid type: integer `5`, expected a string; splits must be",
            ),
            (
                "{not json",
                "the body is not valid JSON: key must be a string at line 1",
            ),
        ];
        for (body, expected) in cases {
            let message = message(body);
            assert!(message.contains(expected), "{body}: {message}");
        }
        println!(
            "body: {} bad bodies each said what was expected",
            cases.len()
        );
    }
}

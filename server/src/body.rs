//! Request bodies: JSON objects, checked against what each route expects, with messages that
//! say what was expected rather than where the parser stopped.
//!
//! A body that decodes is read once. One that does not is read again to explain it: first as
//! JSON (a syntax error keeps the parser's line and column), then it must be an object, and is
//! then decoded field by field; a field that does not decode is named
//! with what it must be (`mode must be "upsert" or "create-only"`).

use axum::body::Bytes;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;

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

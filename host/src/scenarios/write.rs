//! Writing a suite in the file format, laid out for reading: pretty JSON in the types' field
//! order, with every list or record that fits in [`WIDTH`] columns on one line, so that a
//! scenario reads at a glance rather than one id per line.

use serde::Serialize;

/// The widest line a list or record is joined into.
pub const WIDTH: usize = 100;

/// `value` as pretty JSON with short lists and records on one line.
pub fn to_json(value: &impl Serialize) -> String {
    // The policy types are plain records, lists and enums with string keys: nothing in them
    // can fail to serialise.
    let pretty = serde_json::to_string_pretty(value).expect("policy types serialise to JSON");
    let mut text = join_short_blocks(&pretty);
    text.push('\n');
    text
}

/// One open bracket still waiting for its close.
struct Open {
    /// Index in the output of the line that opens it.
    line: usize,
    /// No line inside is still multi-line.
    joinable: bool,
}

/// Joins each bracketed block whose contents are single lines, innermost first.
///
/// Pretty JSON puts a structural `[` or `{` last on its line and a `]` or `}` first on its
/// own; a string never ends a line with a bracket (it ends with a quote) nor starts one
/// without its quote, so brackets are recognised by position alone.
fn join_short_blocks(pretty: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut open: Vec<Open> = Vec::new();
    for line in pretty.lines() {
        let content = line.trim_start();
        if content.starts_with(']') || content.starts_with('}') {
            let block = open.pop().expect("pretty JSON closes only what it opened");
            let items: Vec<&str> = lines[block.line + 1..].iter().map(|l| l.trim()).collect();
            let joined = match content.as_bytes()[0] {
                b']' => format!("{}{}", items.join(" "), content),
                _ => format!(" {} {}", items.join(" "), content),
            };
            let opener = &lines[block.line];
            if block.joinable && opener.chars().count() + joined.chars().count() <= WIDTH {
                let single = format!("{opener}{joined}");
                lines.truncate(block.line);
                lines.push(single);
                continue;
            }
            if let Some(parent) = open.last_mut() {
                parent.joinable = false;
            }
            lines.push(line.to_string());
        } else if content.ends_with('[') || content.ends_with('{') {
            open.push(Open {
                line: lines.len(),
                joinable: true,
            });
            lines.push(line.to_string());
        } else {
            lines.push(line.to_string());
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn short_blocks_join_and_long_ones_stay_open() {
        let value = json!({
            "ids": ["a", "b"],
            "row": { "split_id": "a", "state": "staged" },
            "empty": [],
            "long": ["x".repeat(60), "y".repeat(60)],
            "nested": [{ "skip": "staged" }, "insert"],
        });
        let text = to_json(&value);
        assert_eq!(
            text,
            format!(
                "{{\n  \"empty\": [],\n  \"ids\": [\"a\", \"b\"],\n  \"long\": [\n    \"{}\",\n    \"{}\"\n  ],\n  \"nested\": [{{ \"skip\": \"staged\" }}, \"insert\"],\n  \"row\": {{ \"split_id\": \"a\", \"state\": \"staged\" }}\n}}\n",
                "x".repeat(60),
                "y".repeat(60)
            )
        );
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value);
    }

    #[test]
    fn brackets_inside_strings_are_left_alone() {
        let value = json!({ "why": ["ends with [", "] starts", "{", "}"] });
        let text = to_json(&value);
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value);
        assert_eq!(
            text,
            "{ \"why\": [\"ends with [\", \"] starts\", \"{\", \"}\"] }\n"
        );
    }
}

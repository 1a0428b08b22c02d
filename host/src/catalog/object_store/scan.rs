//! A structural scan of a format 2 checkpoint ([`super::checkpoint`]): where each top-level
//! member lies, and where each row of `splits` lies with its split id, found without parsing
//! the rows, so that a reader indexes 100,000 rows in the time a parser takes for a few
//! thousand.
//!
//! The scan follows strings (with their escapes) and brackets only; it checks no number,
//! literal or nesting beyond counting. It answers `None` for anything that is not laid out as
//! this mend writes a checkpoint (a key or split id with an escape, rows not sorted by id,
//! bytes after the object), and the caller then parses the file whole, as a file of any other
//! layout is read. What it does not check, the parser checks when a row is read: a row whose
//! slice is not a whole JSON array of the checkpoint's row fields is refused then, as corrupt.
//! Each slice it yields starts where a parser of the whole file would start a value, so if
//! every slice parses as a whole value, the slices are exactly the values a parser would find.

use std::ops::Range;

/// Where one row of `splits` lies: `bytes[start..end]` is the row, `bytes[id.clone()]` the
/// text of its split id, which holds no escape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowSpan {
    pub start: u32,
    pub id_start: u32,
    pub id_end: u32,
    pub end: u32,
}

impl RowSpan {
    pub fn row(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }

    pub fn id(self) -> Range<usize> {
        self.id_start as usize..self.id_end as usize
    }
}

/// A checkpoint's layout: every top-level member but `splits`, as the ranges of its key's text
/// (between the quotes) and of its value; the range of `splits` itself (its brackets
/// included), and its rows, sorted by split id.
#[derive(Debug, Default)]
pub(crate) struct Layout {
    pub members: Vec<(Range<usize>, Range<usize>)>,
    pub splits: Range<usize>,
    pub rows: Vec<RowSpan>,
}

/// The layout of `bytes`, if they are one JSON object with exactly one `splits` member whose
/// rows are laid out as this mend writes them (see the module doc); `None` otherwise.
pub(crate) fn layout(bytes: &[u8]) -> Option<Layout> {
    // Offsets are kept in 32 bits: a larger checkpoint is parsed whole.
    u32::try_from(bytes.len()).ok()?;
    let mut layout = Layout::default();
    let mut splits_seen = false;
    let mut pos = skip_ws(bytes, 0);
    expect(bytes, &mut pos, b'{')?;
    pos = skip_ws(bytes, pos);
    if bytes.get(pos) == Some(&b'}') {
        return None;
    }
    loop {
        expect(bytes, &mut pos, b'"')?;
        let key_start = pos;
        let key_end = key_start + plain_string_len(&bytes[key_start..])?;
        pos = skip_ws(bytes, key_end + 1);
        expect(bytes, &mut pos, b':')?;
        pos = skip_ws(bytes, pos);
        if &bytes[key_start..key_end] == b"splits" {
            if splits_seen {
                return None;
            }
            splits_seen = true;
            let start = pos;
            pos = rows(bytes, pos, &mut layout.rows)?;
            layout.splits = start..pos;
        } else {
            let value_start = pos;
            pos = skip_value(bytes, pos)?;
            layout.members.push((key_start..key_end, value_start..pos));
        }
        pos = skip_ws(bytes, pos);
        match bytes.get(pos)? {
            b',' => pos = skip_ws(bytes, pos + 1),
            b'}' => break,
            _ => return None,
        }
    }
    pos = skip_ws(bytes, pos + 1);
    (pos == bytes.len() && splits_seen).then_some(layout)
}

/// The rows of the array at `pos`; returns the position after it.
fn rows(bytes: &[u8], mut pos: usize, rows: &mut Vec<RowSpan>) -> Option<usize> {
    expect(bytes, &mut pos, b'[')?;
    pos = skip_ws(bytes, pos);
    if bytes.get(pos) == Some(&b']') {
        return Some(pos + 1);
    }
    let mut previous: Option<Range<usize>> = None;
    loop {
        let start = pos;
        expect(bytes, &mut pos, b'[')?;
        pos = skip_ws(bytes, pos);
        expect(bytes, &mut pos, b'"')?;
        let id_start = pos;
        let id_end = id_start + plain_string_len(&bytes[id_start..])?;
        // Split ids are sorted and distinct, as a checkpoint is written from a sorted map, and
        // UTF-8, as every string of a JSON text is.
        let id = &bytes[id_start..id_end];
        std::str::from_utf8(id).ok()?;
        if let Some(previous) = previous
            && bytes[previous] >= *id
        {
            return None;
        }
        previous = Some(id_start..id_end);
        pos = close(bytes, id_end + 1, 1)?;
        rows.push(RowSpan {
            start: start as u32,
            id_start: id_start as u32,
            id_end: id_end as u32,
            end: pos as u32,
        });
        pos = skip_ws(bytes, pos);
        match bytes.get(pos)? {
            b',' => pos = skip_ws(bytes, pos + 1),
            b']' => return Some(pos + 1),
            _ => return None,
        }
    }
}

/// The position after the value at `pos`.
fn skip_value(bytes: &[u8], pos: usize) -> Option<usize> {
    match bytes.get(pos)? {
        b'"' => skip_string(bytes, pos + 1),
        b'{' | b'[' => close(bytes, pos + 1, 1),
        // A number or a literal: up to the next delimiter. The parser checks it.
        _ => {
            let len = bytes[pos..]
                .iter()
                .position(|byte| matches!(byte, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .unwrap_or(bytes.len() - pos);
            (len > 0).then_some(pos + len)
        }
    }
}

/// The position after the bracket that brings the nesting from `depth` to 0, scanning from
/// `pos`; strings are skipped whole.
fn close(bytes: &[u8], mut pos: usize, mut depth: u32) -> Option<usize> {
    loop {
        let skipped = bytes
            .get(pos..)?
            .iter()
            .position(|byte| STRUCTURAL[usize::from(*byte)])?;
        pos += skipped;
        match bytes[pos] {
            b'"' => pos = skip_string(bytes, pos + 1)?,
            b'[' | b'{' => {
                depth += 1;
                pos += 1;
            }
            _ => {
                depth -= 1;
                pos += 1;
                if depth == 0 {
                    return Some(pos);
                }
            }
        }
    }
}

/// The bytes a bracket scan stops at: quotes and brackets.
static STRUCTURAL: [bool; 256] = {
    let mut table = [false; 256];
    table[b'"' as usize] = true;
    table[b'[' as usize] = true;
    table[b']' as usize] = true;
    table[b'{' as usize] = true;
    table[b'}' as usize] = true;
    table
};

/// The position after the string whose text starts at `pos` (after its opening quote).
fn skip_string(bytes: &[u8], mut pos: usize) -> Option<usize> {
    loop {
        let found = memchr::memchr2(b'"', b'\\', bytes.get(pos..)?)?;
        pos += found;
        if bytes[pos] == b'"' {
            return Some(pos + 1);
        }
        // An escape: the byte after the backslash is never the string's end.
        pos += 2;
    }
}

/// The length of the text of a string without escapes (up to its closing quote); `None` if it
/// has an escape or does not end.
fn plain_string_len(text: &[u8]) -> Option<usize> {
    let found = memchr::memchr2(b'"', b'\\', text)?;
    (text[found] == b'"').then_some(found)
}

fn skip_ws(bytes: &[u8], mut pos: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(pos) {
        pos += 1;
    }
    pos
}

fn expect(bytes: &[u8], pos: &mut usize, byte: u8) -> Option<()> {
    (bytes.get(*pos) == Some(&byte)).then(|| *pos += 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(bytes: &[u8], range: Range<usize>) -> &str {
        std::str::from_utf8(&bytes[range]).unwrap()
    }

    #[test]
    fn rows_and_members_are_found_where_a_parser_finds_them() {
        let file = br#"{"format_version":2,"version":7,"dataset":{"a":[1,{"b":"]}"}]},"splits":[["a","staged",{"x":"\"]"}],
            ["b\u00e9","published",[[]]] ],"tail":null}"#;
        // `b\u00e9` holds an escape: not this mend's layout.
        assert!(layout(file).is_none());
        let file = br#"{"format_version":2,"version":7,"dataset":{"a":[1,{"b":"]}"}]},"splits":[["a","staged",{"x":"\"]"}],
            ["b","published",[[]]] ],"tail":null}"#;
        let found = layout(file).expect("laid out as mend writes it");
        let members: Vec<(&str, &str)> = found
            .members
            .iter()
            .map(|(key, value)| (text(file, key.clone()), text(file, value.clone())))
            .collect();
        assert_eq!(
            members,
            [
                ("format_version", "2"),
                ("version", "7"),
                ("dataset", r#"{"a":[1,{"b":"]}"}]}"#),
                ("tail", "null"),
            ]
        );
        let rows: Vec<(&str, &str)> = found
            .rows
            .iter()
            .map(|row| (text(file, row.id()), text(file, row.row())))
            .collect();
        assert_eq!(
            rows,
            [
                ("a", r#"["a","staged",{"x":"\"]"}]"#),
                ("b", r#"["b","published",[[]]]"#)
            ]
        );
        for row in &found.rows {
            serde_json::from_slice::<serde_json::Value>(&file[row.row()]).unwrap();
        }
    }

    #[test]
    fn anything_else_is_left_to_the_parser() {
        for file in [
            &br#"{"splits":[["b"],["a"]]}"#[..],
            br#"{"splits":[["a"],["a"]]}"#,
            br#"{"splits":[["a"]],"splits":[]}"#,
            br#"{"version":1}"#,
            br#"{"splits":[["a"]]} x"#,
            br#"{"splits":[["a"]]"#,
            br#"{"splits":[["a"],]}"#,
            br#"{"split\u0073":[]}"#,
            br#"{"splits":[[1,"a"]]}"#,
            br#"{"splits":[["a"#,
            br#"["splits"]"#,
            b"",
        ] {
            assert!(layout(file).is_none(), "{}", String::from_utf8_lossy(file));
        }
        let empty = layout(br#" {"splits" : [ ] } "#).unwrap();
        assert!(empty.rows.is_empty() && empty.members.is_empty());
    }
}

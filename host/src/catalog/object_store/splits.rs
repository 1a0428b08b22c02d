//! A dataset's split rows as a [`DatasetState`](super::state::DatasetState) keeps them: the
//! rows of the checkpoint the state was loaded from, kept as the checkpoint's own bytes and
//! parsed one row at a time when a row is asked for, under the rows written since.
//!
//! Why: a reader that loads a checkpoint of 100,000 splits used to parse every row into a map
//! before its first write, about 110 ms, though a write looks at the rows it touches only. Now
//! it indexes the rows (where each lies, by split id: [`super::scan`]) and keeps the file's
//! bytes, about as many as the parsed rows took in memory and a tenth of the time to get, and
//! a write parses only the rows it reads. A listing parses each row it goes through, as it
//! parses each row's metadata to hand the row out; a checkpoint written from the state copies
//! the bytes of the rows nobody changed.
//!
//! The rows' bytes matched the checkpoint's checksum when it was read, and mend wrote them
//! from rows it had parsed, so a base row parses. Should one not (a writer's bug), whoever
//! reads it is refused with `Corrupt`, as a file that does not parse at all is.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use imbl::OrdMap;

use super::log_format::{LogRow, RawJson};
use super::scan::RowSpan;
use crate::error::{MendError, Result};
use crate::model::{SplitRow, SplitState, TimeRange, TimestampMs};

/// The split rows of a state, by split id.
#[derive(Clone)]
pub(crate) struct Splits {
    base: Option<Arc<BaseRows>>,
    /// Rows written since the base (all rows, without a base): `Some` the row, `None` a row of
    /// the base deleted. A persistent map: a state cloned for a commit shares it, and a commit
    /// copies the entries beside the ones it changes, so a row is behind an `Arc` (see
    /// [`DatasetState::intents`](super::state::DatasetState::intents)).
    changes: OrdMap<Arc<str>, Option<Arc<StoredSplit>>>,
    len: usize,
}

/// The rows of a checkpoint as its bytes hold them.
pub(crate) struct BaseRows {
    bytes: Bytes,
    /// Sorted by split id, which none of them repeats ([`super::scan`] checked).
    rows: Vec<RowSpan>,
    /// Names the file in errors.
    source: Box<str>,
    parse: fn(&[u8]) -> std::result::Result<StoredSplit, String>,
}

/// One row as a checkpoint is written from a state: the bytes of a row nobody changed since
/// the checkpoint it came from, or a row of the state.
pub(crate) enum RowOut<'a> {
    Raw(&'a [u8]),
    Stored(&'a str, &'a StoredSplit),
}

impl BaseRows {
    /// The rows `rows` of the checkpoint `bytes` read from `source`, each parsed by `parse`
    /// when it is read.
    pub fn new(
        bytes: Bytes,
        rows: Vec<RowSpan>,
        source: &str,
        parse: fn(&[u8]) -> std::result::Result<StoredSplit, String>,
    ) -> Self {
        Self {
            bytes,
            rows,
            source: source.into(),
            parse,
        }
    }

    fn id(&self, index: usize) -> &str {
        std::str::from_utf8(&self.bytes[self.rows[index].id()])
            .expect("the scan took only split ids that are UTF-8")
    }

    fn find(&self, split_id: &str) -> Option<usize> {
        self.rows
            .binary_search_by(|row| self.bytes[row.id()].cmp(split_id.as_bytes()))
            .ok()
    }

    /// The index of the first row after `lower`.
    fn first_after(&self, lower: Bound<&str>) -> usize {
        self.rows.partition_point(|row| {
            let id = &self.bytes[row.id()];
            match lower {
                Bound::Unbounded => false,
                Bound::Included(lower) => id < lower.as_bytes(),
                Bound::Excluded(lower) => id <= lower.as_bytes(),
            }
        })
    }

    fn row(&self, index: usize) -> Result<StoredSplit> {
        (self.parse)(&self.bytes[self.rows[index].row()]).map_err(|why| MendError::Corrupt {
            message: format!(
                "{}: the row of split {} cannot be read: {why}",
                self.source,
                self.id(index)
            ),
        })
    }

    fn raw(&self, index: usize) -> &[u8] {
        &self.bytes[self.rows[index].row()]
    }
}

impl Splits {
    /// No rows.
    pub fn new() -> Self {
        Self {
            base: None,
            changes: OrdMap::new(),
            len: 0,
        }
    }

    /// The rows of a checkpoint, read when asked for.
    pub fn from_base(base: BaseRows) -> Self {
        Self {
            len: base.rows.len(),
            base: Some(Arc::new(base)),
            changes: OrdMap::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn contains(&self, split_id: &str) -> bool {
        match self.changes.get(split_id) {
            Some(change) => change.is_some(),
            None => self
                .base
                .as_ref()
                .is_some_and(|base| base.find(split_id).is_some()),
        }
    }

    /// The row of `split_id`, if there is one; `Corrupt` if its checkpoint row does not parse.
    pub fn get(&self, split_id: &str) -> Result<Option<Cow<'_, StoredSplit>>> {
        match self.changes.get(split_id) {
            Some(change) => Ok(change.as_deref().map(Cow::Borrowed)),
            None => match &self.base {
                Some(base) => match base.find(split_id) {
                    Some(index) => Ok(Some(Cow::Owned(base.row(index)?))),
                    None => Ok(None),
                },
                None => Ok(None),
            },
        }
    }

    /// Inserts or replaces the row of `split_id`.
    pub fn insert(&mut self, split_id: String, split: StoredSplit) {
        if !self.contains(&split_id) {
            self.len += 1;
        }
        self.changes
            .insert(Arc::from(split_id), Some(Arc::new(split)));
    }

    /// Removes the row of `split_id`; `false` if there was none.
    pub fn remove(&mut self, split_id: &str) -> bool {
        if !self.contains(split_id) {
            return false;
        }
        self.len -= 1;
        let in_base = self
            .base
            .as_ref()
            .is_some_and(|base| base.find(split_id).is_some());
        if in_base {
            self.changes.insert(Arc::from(split_id), None);
        } else {
            self.changes.remove(split_id);
        }
        true
    }

    /// The rows after `lower`, sorted by split id; a base row that does not parse is an
    /// `Err` item.
    pub fn range(
        &self,
        lower: Bound<&str>,
    ) -> impl Iterator<Item = Result<(Cow<'_, str>, Cow<'_, StoredSplit>)>> + '_ {
        self.merged(lower).map(move |entry| match entry {
            Entry::Base(base, index) => {
                Ok((Cow::Borrowed(base.id(index)), Cow::Owned(base.row(index)?)))
            }
            Entry::Changed(split_id, split) => Ok((Cow::Borrowed(split_id), Cow::Borrowed(split))),
        })
    }

    /// Every row as a checkpoint writes it, sorted by split id: a base row nobody changed as
    /// its bytes, unparsed.
    pub fn rows_out(&self) -> impl Iterator<Item = RowOut<'_>> + '_ {
        self.merged(Bound::Unbounded).map(|entry| match entry {
            Entry::Base(base, index) => RowOut::Raw(base.raw(index)),
            Entry::Changed(split_id, split) => RowOut::Stored(split_id, split),
        })
    }

    fn merged(&self, lower: Bound<&str>) -> Merged<'_> {
        let base = self.base.as_deref();
        let changes: Changes<'_> = Box::new(
            self.changes
                .range::<_, str>((lower, Bound::Unbounded))
                .map(|(id, change)| (&**id, change.as_deref())),
        );
        Merged {
            next_base: base.map_or(0, |base| base.first_after(lower)),
            base,
            changes: changes.peekable(),
        }
    }
}

/// A row the merge of the base and the changes yields.
enum Entry<'a> {
    Base(&'a BaseRows, usize),
    Changed(&'a str, &'a StoredSplit),
}

type Changes<'a> = Box<dyn Iterator<Item = (&'a str, Option<&'a StoredSplit>)> + 'a>;

/// The base rows and the changes, both sorted by id, merged: a change shadows the base row of
/// its id, and a deletion hides it.
struct Merged<'a> {
    base: Option<&'a BaseRows>,
    next_base: usize,
    changes: std::iter::Peekable<Changes<'a>>,
}

impl<'a> Iterator for Merged<'a> {
    type Item = Entry<'a>;

    fn next(&mut self) -> Option<Entry<'a>> {
        loop {
            let base = self.base.filter(|base| self.next_base < base.rows.len());
            let order = match (base, self.changes.peek()) {
                (None, None) => return None,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some(base), Some((id, _))) => base.id(self.next_base).cmp(id),
            };
            if order != Ordering::Greater {
                let index = self.next_base;
                self.next_base += 1;
                if order == Ordering::Less {
                    return Some(Entry::Base(base.expect("compared above"), index));
                }
            }
            let (split_id, change) = self.changes.next().expect("compared above");
            if let Some(split) = change {
                return Some(Entry::Changed(split_id, split));
            }
        }
    }
}

/// Equal when they hold the same rows (a row of a base that does not parse is equal to
/// nothing).
impl PartialEq for Splits {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && self
                .range(Bound::Unbounded)
                .zip(other.range(Bound::Unbounded))
                .all(|pair| match pair {
                    (Ok(left), Ok(right)) => left == right,
                    _ => false,
                })
    }
}

impl fmt::Debug for Splits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Splits")
            .field("len", &self.len)
            .field("base_rows", &self.base.as_ref().map(|base| base.rows.len()))
            .field("changes", &self.changes.len())
            .finish()
    }
}

impl Default for Splits {
    fn default() -> Self {
        Self::new()
    }
}

impl FromIterator<(String, StoredSplit)> for Splits {
    /// Rows without a base; a repeated id keeps the last row.
    fn from_iter<I: IntoIterator<Item = (String, StoredSplit)>>(rows: I) -> Self {
        let mut splits = Self::new();
        for (split_id, split) in rows {
            splits.insert(split_id, split);
        }
        splits
    }
}

/// A split as a [`DatasetState`](super::state::DatasetState) keeps it, by id: a [`SplitRow`] whose metadata is the JSON
/// text of the log rather than a parsed value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredSplit {
    pub state: SplitState,
    pub node: Box<str>,
    /// The text the commit that wrote the row holds.
    pub metadata: RawJson,
    pub time_range: Option<TimeRange>,
    pub created_at_ms: TimestampMs,
    pub updated_at_ms: TimestampMs,
    pub published_at_ms: Option<TimestampMs>,
    pub mark_seen_at_ms: Option<TimestampMs>,
}

impl StoredSplit {
    /// A row of a format 1 checkpoint, its metadata written again as compact JSON.
    pub fn from_row(row: &SplitRow) -> Self {
        Self {
            state: row.state,
            node: row.node.as_str().into(),
            metadata: RawJson::of(&row.metadata),
            time_range: row.time_range,
            created_at_ms: row.created_at_ms,
            updated_at_ms: row.updated_at_ms,
            published_at_ms: row.published_at_ms,
            mark_seen_at_ms: row.mark_seen_at_ms,
        }
    }

    pub fn from_log_row(row: &LogRow) -> Self {
        Self {
            state: row.state,
            node: row.node.as_str().into(),
            metadata: row.metadata.clone(),
            time_range: row.time_range,
            created_at_ms: row.created_at_ms,
            updated_at_ms: row.updated_at_ms,
            published_at_ms: row.published_at_ms,
            mark_seen_at_ms: row.mark_seen_at_ms,
        }
    }

    pub fn to_log_row(&self, split_id: &str) -> LogRow {
        LogRow {
            split_id: split_id.to_string(),
            state: self.state,
            node: self.node.to_string(),
            metadata: self.metadata.clone(),
            time_range: self.time_range,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            published_at_ms: self.published_at_ms,
            mark_seen_at_ms: self.mark_seen_at_ms,
        }
    }

    /// The row, with its metadata parsed. The text was JSON when it entered the state, but
    /// only checked to be well-formed, not to be within the nesting a parsed value may have:
    /// a refusal here is the file's corruption.
    pub fn to_row(&self, dataset_id: &str, split_id: &str) -> Result<SplitRow> {
        let metadata =
            serde_json::from_str(self.metadata.get()).map_err(|err| MendError::Corrupt {
                message: format!(
                    "dataset {dataset_id}: the metadata of split {split_id} cannot be read: {err}"
                ),
            })?;
        Ok(SplitRow {
            split_id: split_id.to_string(),
            state: self.state,
            node: self.node.to_string(),
            metadata,
            time_range: self.time_range,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            published_at_ms: self.published_at_ms,
            mark_seen_at_ms: self.mark_seen_at_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::object_store::log_format::RawJson;
    use crate::model::SplitState;

    fn split(docs: u64) -> StoredSplit {
        StoredSplit {
            state: SplitState::Staged,
            node: "n".into(),
            metadata: RawJson::parse(format!(r#"{{"docs":{docs}}}"#)).unwrap(),
            time_range: None,
            created_at_ms: 1,
            updated_at_ms: 2,
            published_at_ms: None,
            mark_seen_at_ms: None,
        }
    }

    /// A base whose rows are `[id, docs]`, each read as `split(docs)`; a row that is not
    /// such a pair does not parse.
    fn base(ids: &[(&str, u64)]) -> Splits {
        let rows: Vec<String> = ids
            .iter()
            .map(|(id, docs)| format!(r#"["{id}",{docs}]"#))
            .collect();
        let text = format!(r#"{{"splits":[{}]}}"#, rows.join(","));
        let layout = crate::catalog::object_store::scan::layout(text.as_bytes()).unwrap();
        fn parse(row: &[u8]) -> std::result::Result<StoredSplit, String> {
            let (_, docs): (String, u64) =
                serde_json::from_slice(row).map_err(|err| err.to_string())?;
            Ok(split(docs))
        }
        Splits::from_base(BaseRows::new(
            Bytes::from(text),
            layout.rows,
            "test.json",
            parse,
        ))
    }

    fn listed(splits: &Splits, lower: Bound<&str>) -> Vec<(String, StoredSplit)> {
        splits
            .range(lower)
            .map(|row| row.map(|(id, split)| (id.into_owned(), split.into_owned())))
            .collect::<Result<_>>()
            .unwrap()
    }

    #[test]
    fn changes_shadow_and_hide_base_rows_and_merge_in_order() {
        let mut splits = base(&[("b", 1), ("d", 2), ("f", 3)]);
        let plain: Splits = [("b", 1), ("d", 2), ("f", 3)]
            .into_iter()
            .map(|(id, docs)| (id.to_string(), split(docs)))
            .collect();
        assert_eq!(splits, plain, "a base reads as the rows it holds");
        assert_eq!(splits.len(), 3);
        assert_eq!(splits.get("d").unwrap().unwrap().into_owned(), split(2));
        assert!(splits.get("c").unwrap().is_none());

        splits.insert("d".into(), split(20));
        splits.insert("a".into(), split(10));
        splits.insert("e".into(), split(30));
        assert!(splits.remove("f"));
        assert!(splits.remove("e"));
        assert!(!splits.remove("f"), "gone already");
        assert!(!splits.remove("zz"));
        assert_eq!(splits.len(), 3);
        assert!(!splits.contains("f") && !splits.contains("e") && splits.contains("a"));
        let expected = vec![
            ("a".to_string(), split(10)),
            ("b".to_string(), split(1)),
            ("d".to_string(), split(20)),
        ];
        assert_eq!(listed(&splits, Bound::Unbounded), expected);
        assert_eq!(listed(&splits, Bound::Excluded("a")), expected[1..]);
        assert_eq!(listed(&splits, Bound::Excluded("b")), expected[2..]);
        assert_eq!(listed(&splits, Bound::Included("c")), expected[2..]);
        assert!(listed(&splits, Bound::Excluded("d")).is_empty());

        // A checkpoint written from it copies the row nobody changed.
        let out: Vec<String> = splits
            .rows_out()
            .map(|row| match row {
                RowOut::Raw(raw) => String::from_utf8(raw.to_vec()).unwrap(),
                RowOut::Stored(id, _) => format!("stored {id}"),
            })
            .collect();
        assert_eq!(out, ["stored a", r#"["b",1]"#, "stored d"]);

        // Inserted again after its deletion, a base row is back.
        splits.insert("f".into(), split(40));
        assert_eq!(splits.len(), 4);
        assert_eq!(splits.get("f").unwrap().unwrap().into_owned(), split(40));
    }

    #[test]
    fn a_base_row_that_does_not_parse_is_corrupt_where_it_is_read() {
        let text = r#"{"splits":[["a",1],["b","x"]]}"#;
        let layout = crate::catalog::object_store::scan::layout(text.as_bytes()).unwrap();
        fn parse(row: &[u8]) -> std::result::Result<StoredSplit, String> {
            let (_, docs): (String, u64) =
                serde_json::from_slice(row).map_err(|err| err.to_string())?;
            Ok(split(docs))
        }
        let splits = Splits::from_base(BaseRows::new(
            Bytes::from(text),
            layout.rows,
            "cp.json",
            parse,
        ));
        assert!(splits.get("a").unwrap().is_some());
        assert!(splits.contains("b"), "indexed, not parsed");
        let error = splits.get("b").unwrap_err();
        assert!(
            matches!(&error, MendError::Corrupt { message } if message.contains("cp.json") && message.contains("split b")),
            "{error:?}"
        );
        assert!(splits.range(Bound::Unbounded).any(|row| row.is_err()));
        assert_ne!(splits, splits.clone(), "a corrupt row equals nothing");
    }
}

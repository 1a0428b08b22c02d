//! A stage request grouped by split id, as the contract's `stage-plan-input` carries it (ABI
//! 1.5): the request's entries sorted by id, cut into one group per distinct id, and the state
//! of each group's row as a byte. The host builds it natively and the policy decides on it
//! with no id to compare; the native planner (`mend-default-policy`'s `plan_ids`) groups a
//! request the same way, with this same code, so that the two differ only in where the
//! decision per group is made.

use alloc::vec::Vec;
use core::cmp::Ordering;

use crate::SplitState;
use crate::packed::BatchTooLarge;

/// The index of each `row-state` case, as a group's row crosses the boundary.
pub mod row_code {
    /// No row has the group's id.
    pub const ABSENT: u8 = 0;
    pub const STAGED: u8 = 1;
    pub const PUBLISHED: u8 = 2;
    pub const MARKED_FOR_DELETION: u8 = 3;
}

/// The `row-state` case of a row in `state`, or of no row.
pub fn row_code_of(state: Option<SplitState>) -> u8 {
    match state {
        None => row_code::ABSENT,
        Some(SplitState::Staged) => row_code::STAGED,
        Some(SplitState::Published) => row_code::PUBLISHED,
        Some(SplitState::MarkedForDeletion) => row_code::MARKED_FOR_DELETION,
    }
}

/// The row a `row-state` case stands for (`Some(None)`: no row); `None` for a byte that is no
/// case.
pub fn row_of_code(code: u8) -> Option<Option<SplitState>> {
    match code {
        row_code::ABSENT => Some(None),
        row_code::STAGED => Some(Some(SplitState::Staged)),
        row_code::PUBLISHED => Some(Some(SplitState::Published)),
        row_code::MARKED_FOR_DELETION => Some(Some(SplitState::MarkedForDeletion)),
        _ => None,
    }
}

/// A request's entries grouped by id: group `g` is the request indices
/// `entries[ends[g - 1]..ends[g]]` (the first from 0), in request order, of one distinct id;
/// the groups ascend by id (`str::cmp`, byte order); `rows[g]` is the [`row_code`] of that
/// id's row ([`row_code_of`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupedRequest {
    pub entries: Vec<u32>,
    pub ends: Vec<u32>,
    pub rows: Vec<u8>,
}

impl GroupedRequest {
    /// Groups `ids` (the request's, in its order; the same id may come more than once) with
    /// `rows` (the rows read for them, in any order; a row listed twice counts as its last
    /// listing). `BatchTooLarge` if the request has more entries than a `u32` indexes.
    ///
    /// Two sorts and one walk: the entries sorted stably by id (equal ids keep their request
    /// order), the rows sorted by id (a backend reads them in that order, so that sort is one
    /// pass over them), and one walk down both by position. The walk compares each id with a
    /// row once where it can (`cmp`, not `<` then `==`); by position rather than through a
    /// peeking iterator, which measured twice as slow.
    pub fn of<'a>(
        ids: impl ExactSizeIterator<Item = &'a str>,
        rows: impl IntoIterator<Item = (&'a str, SplitState)>,
    ) -> Result<Self, BatchTooLarge> {
        let count = u32::try_from(ids.len()).map_err(|_| BatchTooLarge)?;
        let mut sorted: Vec<(&str, u32)> = ids.zip(0..count).collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        let mut rows: Vec<(&str, SplitState)> = rows.into_iter().collect();
        // Stable: of two listings of one id, the later stays later and counts.
        rows.sort_by(|a, b| a.0.cmp(b.0));

        let mut grouped = Self {
            entries: sorted.iter().map(|entry| entry.1).collect(),
            ends: Vec::with_capacity(sorted.len()),
            rows: Vec::with_capacity(sorted.len()),
        };
        let mut row = 0;
        for (position, &(id, _)) in sorted.iter().enumerate() {
            if sorted.get(position + 1).is_some_and(|next| next.0 == id) {
                continue;
            }
            grouped.ends.push(position as u32 + 1);
            let mut state = None;
            while let Some(&(row_id, row_state)) = rows.get(row) {
                match row_id.cmp(id) {
                    Ordering::Less => {}
                    Ordering::Equal => state = Some(row_state),
                    Ordering::Greater => break,
                }
                row += 1;
            }
            grouped.rows.push(row_code_of(state));
        }
        Ok(grouped)
    }

    /// Each group's entries and row code, in the groups' order. A request built wrongly
    /// (ends falling or past the entries) panics: the grouping is the host's, never input.
    pub fn groups(&self) -> impl Iterator<Item = (&[u32], u8)> {
        let mut start = 0usize;
        self.ends.iter().zip(&self.rows).map(move |(&end, &row)| {
            let group = &self.entries[start..end as usize];
            start = end as usize;
            (group, row)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_ascend_by_id_with_their_entries_in_request_order_and_their_rows() {
        let grouped = GroupedRequest::of(
            ["b", "a", "c", "a", "b"].into_iter(),
            [
                ("c", SplitState::Published),
                ("z", SplitState::Staged),
                ("a", SplitState::Staged),
                ("a", SplitState::MarkedForDeletion),
            ],
        )
        .unwrap();
        let groups: Vec<(Vec<u32>, u8)> = grouped
            .groups()
            .map(|(entries, row)| (entries.to_vec(), row))
            .collect();
        assert_eq!(
            groups,
            [
                (vec![1, 3], row_code::MARKED_FOR_DELETION),
                (vec![0, 4], row_code::ABSENT),
                (vec![2], row_code::PUBLISHED),
            ]
        );
        assert_eq!(grouped.ends, [2, 4, 5]);
        assert_eq!(
            GroupedRequest::of([].into_iter(), []).unwrap(),
            Default::default()
        );
    }

    #[test]
    fn every_row_code_is_its_state_and_no_other_byte_is_one() {
        for code in 0..=u8::MAX {
            match row_of_code(code) {
                Some(state) => assert_eq!(row_code_of(state), code),
                None => assert!(code > row_code::MARKED_FOR_DELETION),
            }
        }
    }
}

//! A line diff in unified style, for showing what a policy decided against what a scenario
//! expected: `-` lines are expected only, `+` lines actual only, ` ` lines shared context.
//!
//! The edit script is a longest common subsequence of lines, after the common prefix and suffix
//! are set aside. Outputs of one decision are pretty-printed JSON of a few hundred lines at
//! most; past [`MAX_TABLE_CELLS`] the middle is shown as a plain replacement rather than
//! spending quadratic memory on it.

use std::fmt::Write;

/// Lines of unchanged context shown around each change.
pub const CONTEXT_LINES: usize = 3;

/// The largest LCS table computed, in cells (`u32` each): 16 MiB.
const MAX_TABLE_CELLS: usize = 4 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edit {
    Same,
    Removed,
    Added,
}

/// One line of the edit script, with its 0-based position in each side before it.
#[derive(Debug, Clone, Copy)]
struct Step {
    edit: Edit,
    expected_line: usize,
    actual_line: usize,
}

/// `expected` against `actual` as unified-diff hunks (`@@ -start,len +start,len @@`, then
/// the lines); empty when they are equal.
pub fn line_diff(expected: &str, actual: &str) -> String {
    let expected: Vec<&str> = expected.lines().collect();
    let actual: Vec<&str> = actual.lines().collect();
    let steps = edit_script(&expected, &actual);
    let mut out = String::new();
    for hunk in hunks(&steps) {
        let steps = &steps[hunk.0..hunk.1];
        let first = steps[0];
        let expected_len = steps.iter().filter(|s| s.edit != Edit::Added).count();
        let actual_len = steps.iter().filter(|s| s.edit != Edit::Removed).count();
        // Unified diffs number lines from 1, and name the line before an empty range.
        let start = |line: usize, len: usize| if len == 0 { line } else { line + 1 };
        let _ = writeln!(
            out,
            "@@ -{},{expected_len} +{},{actual_len} @@",
            start(first.expected_line, expected_len),
            start(first.actual_line, actual_len),
        );
        for step in steps {
            let (sign, text) = match step.edit {
                Edit::Same => (' ', expected[step.expected_line]),
                Edit::Removed => ('-', expected[step.expected_line]),
                Edit::Added => ('+', actual[step.actual_line]),
            };
            let _ = writeln!(out, "{sign}{text}");
        }
    }
    out
}

/// The whole edit script from `expected` to `actual`, removals before additions in a change.
fn edit_script(expected: &[&str], actual: &[&str]) -> Vec<Step> {
    let prefix = expected
        .iter()
        .zip(actual)
        .take_while(|(a, b)| a == b)
        .count();
    let suffix = expected[prefix..]
        .iter()
        .rev()
        .zip(actual[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let middle_expected = &expected[prefix..expected.len() - suffix];
    let middle_actual = &actual[prefix..actual.len() - suffix];

    let mut edits = vec![Edit::Same; prefix];
    edits.extend(middle_edits(middle_expected, middle_actual));
    edits.extend(std::iter::repeat_n(Edit::Same, suffix));

    let (mut expected_line, mut actual_line) = (0, 0);
    edits
        .into_iter()
        .map(|edit| {
            let step = Step {
                edit,
                expected_line,
                actual_line,
            };
            expected_line += usize::from(edit != Edit::Added);
            actual_line += usize::from(edit != Edit::Removed);
            step
        })
        .collect()
}

fn middle_edits(expected: &[&str], actual: &[&str]) -> Vec<Edit> {
    let (rows, columns) = (expected.len(), actual.len());
    if (rows + 1).saturating_mul(columns + 1) > MAX_TABLE_CELLS {
        let mut edits = vec![Edit::Removed; rows];
        edits.extend(std::iter::repeat_n(Edit::Added, columns));
        return edits;
    }
    // common[i][j]: the LCS length of expected[i..] and actual[j..], so that the script can
    // be read off walking forwards.
    let width = columns + 1;
    let mut common = vec![0u32; (rows + 1) * width];
    for i in (0..rows).rev() {
        for j in (0..columns).rev() {
            common[i * width + j] = if expected[i] == actual[j] {
                common[(i + 1) * width + j + 1] + 1
            } else {
                common[(i + 1) * width + j].max(common[i * width + j + 1])
            };
        }
    }
    let mut edits = Vec::with_capacity(rows + columns);
    let (mut i, mut j) = (0, 0);
    while i < rows || j < columns {
        if i < rows && j < columns && expected[i] == actual[j] {
            edits.push(Edit::Same);
            (i, j) = (i + 1, j + 1);
        } else if j == columns
            || (i < rows && common[(i + 1) * width + j] >= common[i * width + j + 1])
        {
            edits.push(Edit::Removed);
            i += 1;
        } else {
            edits.push(Edit::Added);
            j += 1;
        }
    }
    edits
}

/// Ranges of `steps` to print: each change with its context, merging changes whose contexts
/// touch.
fn hunks(steps: &[Step]) -> Vec<(usize, usize)> {
    let mut hunks: Vec<(usize, usize)> = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        if step.edit == Edit::Same {
            continue;
        }
        let start = index.saturating_sub(CONTEXT_LINES);
        let end = (index + 1 + CONTEXT_LINES).min(steps.len());
        match hunks.last_mut() {
            Some(last) if start <= last.1 => last.1 = end,
            _ => hunks.push((start, end)),
        }
    }
    hunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(range: std::ops::Range<u32>) -> String {
        range.map(|n| format!("line {n}\n")).collect()
    }

    #[test]
    fn equal_texts_have_no_diff() {
        assert_eq!(line_diff("a\nb\n", "a\nb\n"), "");
        assert_eq!(line_diff("", ""), "");
    }

    #[test]
    fn a_changed_line_shows_as_removed_then_added_with_context() {
        let expected = lines(0..10);
        let actual = expected.replace("line 5\n", "line five\n");
        assert_eq!(
            line_diff(&expected, &actual),
            "@@ -3,7 +3,7 @@\n line 2\n line 3\n line 4\n-line 5\n+line five\n line 6\n line 7\n line 8\n"
        );
    }

    #[test]
    fn distant_changes_are_separate_hunks_and_near_ones_merge() {
        let expected = lines(0..20);
        let far = expected
            .replace("line 1\n", "line one\n")
            .replace("line 18\n", "line eighteen\n");
        let diff = line_diff(&expected, &far);
        assert_eq!(diff.matches("@@ -").count(), 2, "{diff}");
        assert!(diff.starts_with("@@ -1,5 +1,5 @@\n"), "{diff}");
        assert!(diff.contains("@@ -16,5 +16,5 @@\n"), "{diff}");

        let near = expected
            .replace("line 5\n", "line five\n")
            .replace("line 9\n", "line nine\n");
        assert_eq!(line_diff(&expected, &near).matches("@@ -").count(), 1);
    }

    #[test]
    fn insertions_and_deletions_are_counted_on_their_side_only() {
        let diff = line_diff("a\nb\nc\n", "a\nb\nx\ny\nc\n");
        assert_eq!(diff, "@@ -1,3 +1,5 @@\n a\n b\n+x\n+y\n c\n");
        let diff = line_diff("a\nb\nc\n", "a\nc\n");
        assert_eq!(diff, "@@ -1,3 +1,2 @@\n a\n-b\n c\n");
        assert_eq!(line_diff("", "a\n"), "@@ -0,0 +1,1 @@\n+a\n");
    }

    #[test]
    fn the_script_keeps_the_longest_common_subsequence() {
        // A greedy matcher would pair the first "x" lines and lose "b c d".
        let diff = line_diff("x\nb\nc\nd\n", "b\nc\nd\nx\n");
        assert_eq!(diff, "@@ -1,4 +1,4 @@\n-x\n b\n c\n d\n+x\n");
    }

    #[test]
    fn an_oversized_middle_is_shown_as_a_replacement() {
        let expected: String = (0..3000).map(|n| format!("{n}\n")).collect();
        let actual: String = (0..3000).map(|n| format!("{}\n", n * 7)).collect();
        let diff = line_diff(&expected, &actual);
        assert!(diff.starts_with("@@ -1,3000 +1,3000 @@\n"));
        assert_eq!(diff.lines().filter(|l| l.starts_with('-')).count(), 2999);
    }
}

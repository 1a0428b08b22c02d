//! Which old files of a dataset's log may go: checkpoints past the newest few, and the log
//! versions no reader starting from a kept checkpoint reads. A pure decision over two
//! listings; [`super::background`] lists, asks and deletes.
//!
//! The rules, and why a reader or a writer racing the deletions stays right:
//!
//! - **The newest `checkpoints_kept` checkpoints stay**, so the newest checkpoint version
//!   never goes down: whatever log version was ever deleted, a checkpoint at or past it is
//!   in every later listing.
//! - **A log version is deleted only if it is at or below the oldest kept checkpoint** (a
//!   reader starts from a kept checkpoint and reads only the versions after it), **only
//!   once it is older than `log_retention`**, and **never version 0**, so that a creation
//!   of the dataset always loses to the dataset that exists.
//! - A reader that loaded a checkpoint which is deleted under it, or that replays into
//!   versions deleted under it, reads a missing file. It never takes "missing" for "the end
//!   of the log" without a listing after it: a checkpoint past the version it reached means
//!   the log may have been cut there, and it starts again from that checkpoint
//!   (`load_validated` in `mod.rs`). Deletions only ever remove versions a newer checkpoint
//!   covers, so what it reads is always some true version of the dataset.
//! - A writer's put-if-absent of version `v` would succeed on a version that was written and
//!   then deleted, and be lost behind the checkpoint that covers it. Version `v` is deleted
//!   only `log_retention` after it was written, and it was written after the writer last
//!   saw it missing; so a writer trusts its cached state (commits on it without a listing)
//!   only for half of `log_retention` after it last saw the next version missing, and checks
//!   with a listing otherwise. The other half covers the clocks of the deleting process and
//!   the store being apart.

use object_store::path::Path;

/// One listed file: its version, where it is, and when it was last written (ms since the
/// epoch, the store's clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ListedFile {
    pub version: u64,
    pub path: Path,
    pub written_at_ms: i64,
}

/// The files to delete, given both listings in increasing version order, at `now_ms` (this
/// process's clock).
pub(super) fn files_to_delete(
    checkpoints: &[ListedFile],
    log: &[ListedFile],
    checkpoints_kept: usize,
    log_retention_ms: i64,
    now_ms: i64,
) -> Vec<Path> {
    if checkpoints_kept == 0 || checkpoints.is_empty() {
        return Vec::new();
    }
    let first_kept = checkpoints.len().saturating_sub(checkpoints_kept);
    let oldest_kept = checkpoints[first_kept].version;
    let written_before = now_ms.saturating_sub(log_retention_ms);
    let old_checkpoints = checkpoints[..first_kept].iter();
    let old_log = log.iter().filter(|file| {
        file.version > 0 && file.version <= oldest_kept && file.written_at_ms < written_before
    });
    old_checkpoints
        .chain(old_log)
        .map(|file| file.path.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(kind: &str, versions: &[(u64, i64)]) -> Vec<ListedFile> {
        versions
            .iter()
            .map(|&(version, written_at_ms)| ListedFile {
                version,
                path: Path::from(format!("{kind}/{version}")),
                written_at_ms,
            })
            .collect()
    }

    fn names(paths: Vec<Path>) -> Vec<String> {
        paths.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn keeps_the_newest_checkpoints_and_the_log_a_reader_of_them_needs() {
        let checkpoints = files("cp", &[(10, 0), (20, 0), (30, 0), (40, 0)]);
        let log: Vec<(u64, i64)> = (0..=45).map(|version| (version, 0)).collect();
        let log = files("log", &log);
        let deleted = names(files_to_delete(&checkpoints, &log, 3, 1_000, 10_000));
        let mut expected = vec!["cp/10".to_string()];
        expected.extend((1..=20).map(|version| format!("log/{version}")));
        assert_eq!(deleted, expected, "version 0 and everything after 20 stay");
    }

    #[test]
    fn young_log_files_and_a_disabled_retention_keep_everything() {
        let checkpoints = files("cp", &[(10, 0), (20, 0)]);
        let log = files("log", &[(0, 0), (5, 9_500), (10, 9_999), (15, 0)]);
        assert_eq!(
            names(files_to_delete(&checkpoints, &log, 1, 1_000, 10_000)),
            ["cp/10", "log/15"],
            "log files younger than the retention stay"
        );
        assert!(files_to_delete(&checkpoints, &log, 0, 0, 10_000).is_empty());
        assert!(files_to_delete(&[], &log, 3, 0, 10_000).is_empty());
    }
}

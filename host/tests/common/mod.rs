//! What the tests that drive the real `mend` binary share. Each test file uses some of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `mend` run in `dir`, with its compiled-component cache in `dir` and none of the `MEND_*`
/// variables of the shell running the tests: a leftover one would change the settings under
/// test. Add what a test needs with `.env(...)`.
pub fn mend_command(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mend"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("MEND_") {
            command.env_remove(name);
        }
    }
    command
        .current_dir(dir)
        .env("MEND_CACHE_DIR", dir.join("cache"));
    command
}

pub fn mend(dir: &Path, args: &[&str]) -> Output {
    mend_command(dir).args(args).output().expect("run mend")
}

/// The JSON a successful command printed.
pub fn json(output: &Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "mend failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("--json prints one JSON document")
}

/// The next file of a dataset's commit log in the local catalog at `catalog_dir`: what its
/// catalog will read as the dataset's next version (a test writes garbage there to damage the
/// dataset).
pub fn next_log_file(catalog_dir: &Path, dataset_id: &str) -> PathBuf {
    let log = catalog_dir
        .join("datasets")
        .join(dataset_id)
        .join("catalog/log");
    let newest = std::fs::read_dir(&log)
        .expect("the dataset's commit log")
        .filter_map(|entry| entry.unwrap().file_name().into_string().ok())
        .filter_map(|name| name.strip_suffix(".json")?.parse::<u64>().ok())
        .max()
        .expect("at least one commit");
    log.join(format!("{:020}.json", newest + 1))
}

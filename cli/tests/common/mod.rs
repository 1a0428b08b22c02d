//! What the tests that drive the real `mend` binary share. Each test file uses some of it.
#![allow(dead_code)]

pub mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The variable `scripts/with-postgres` sets because its throwaway cluster is not durable; it
/// describes the test database, not a setting under test, so it reaches every `mend` run.
pub const ACCEPT_UNSAFE_DURABILITY: &str = "MEND_POSTGRES_ACCEPT_UNSAFE_DURABILITY";

/// `mend` run in `dir`, with its compiled-component cache in `dir` and none of the `MEND_*`
/// variables of the shell running the tests (but [`ACCEPT_UNSAFE_DURABILITY`]), nor its
/// `RUST_LOG`: a leftover one would change the settings (or the log lines) under test. Add
/// what a test needs with `.env(...)`.
pub fn mend_command(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mend"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("MEND_") && name != ACCEPT_UNSAFE_DURABILITY {
            command.env_remove(name);
        }
    }
    command.env_remove("RUST_LOG");
    command
        .current_dir(dir)
        .env("MEND_CACHE_DIR", dir.join("cache"));
    command
}

/// The Postgres server the tests use (`scripts/with-postgres` starts a throwaway one); fails,
/// with instructions, when there is none: a test that needs it never passes without it.
pub fn postgres_url() -> String {
    std::env::var("MEND_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "MEND_TEST_DATABASE_URL is not set. The Postgres tests need a real server: run them \
             through `scripts/test` (which starts a throwaway one), or \
             `scripts/with-postgres cargo test ...`, or point MEND_TEST_DATABASE_URL at a server \
             you own"
        )
    })
}

/// The S3-compatible store the tests use (`s3://BUCKET`, endpoint and credentials in the usual
/// `AWS_*` variables; `scripts/with-s3` starts a throwaway one); fails, with instructions,
/// when there is none.
pub fn s3_url() -> String {
    std::env::var("MEND_TEST_S3_URL").unwrap_or_else(|_| {
        panic!(
            "MEND_TEST_S3_URL is not set. The S3 tests need an S3-compatible server: run them \
             through `scripts/test` (which starts a throwaway one), or \
             `scripts/with-s3 cargo test ...`, or set MEND_TEST_S3_URL=s3://BUCKET and the \
             AWS_* variables for a store you own"
        )
    })
}

/// How a test opens the test Postgres in process: as `mend` would with the environment's
/// [`ACCEPT_UNSAFE_DURABILITY`].
pub fn postgres_options() -> mend::catalog::PostgresOptions {
    mend::catalog::PostgresOptions {
        accept_unsafe_durability: std::env::var(ACCEPT_UNSAFE_DURABILITY)
            .is_ok_and(|value| value == "true"),
    }
}

/// `bytes` (a component the library embeds, such as `mend::runtime::CAUTIOUS_POLICY_WASM`)
/// written to `dir/name`, for a command that reads a component file; its path.
pub fn write_component(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_str().unwrap().to_string()
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

/// Runs a command that must succeed and print JSON (`--json` is added).
pub fn ok_json(dir: &Path, args: &[&str]) -> serde_json::Value {
    let mut args = args.to_vec();
    args.push("--json");
    let output = mend(dir, &args);
    assert!(
        output.status.success(),
        "mend {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "mend {args:?} printed no JSON ({error}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// Checks that `output` failed with `code` and one error line that names every one of
/// `mentions`; returns that line.
pub fn failed_with(output: &Output, code: i32, mentions: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    let error_lines: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("error: "))
        .collect();
    assert_eq!(error_lines.len(), 1, "one error line: {stderr}");
    for mention in mentions {
        assert!(
            error_lines[0].contains(mention),
            "{stderr:?} should mention {mention:?}"
        );
    }
    error_lines[0].to_string()
}

/// A splits file for `mend stage --splits`, each split with a small metadata object whose
/// time range is 0..=10.
pub fn splits_file(dir: &Path, name: &str, ids: &[&str]) -> PathBuf {
    let splits: Vec<serde_json::Value> = ids
        .iter()
        .map(|id| {
            serde_json::json!({"split_id": id, "metadata": {"num_docs": 1, "time_range": {"start": 0, "end": 10}}})
        })
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string(&splits).unwrap()).unwrap();
    path
}

/// Writes a split's object, in mend's object format, into the local catalog at
/// `catalog_dir`, as a writer outside mend would; `dataset_uid` is the dataset's current uid
/// (`mend dataset show`), which verify holds the object to.
pub fn write_object(catalog_dir: &Path, dataset_id: &str, dataset_uid: &str, split_id: &str) {
    use mend::objects::format::{self, SplitObjectHeader, sha256};
    let payload = b"object bytes";
    let header = SplitObjectHeader {
        format_version: format::HEADER_FORMAT_VERSION,
        dataset_id: dataset_id.into(),
        dataset_uid: dataset_uid.into(),
        split_id: split_id.into(),
        node: "outside-writer".into(),
        metadata_json: r#"{"num_docs": 1}"#.into(),
        operation_id: None,
        payload_size: payload.len() as u64,
        payload_sha256: sha256(payload),
    };
    let splits = catalog_dir.join("datasets").join(dataset_id).join("splits");
    std::fs::create_dir_all(&splits).unwrap();
    std::fs::write(splits.join(split_id), format::encode(&header, payload)).unwrap();
}

/// Each split of `dataset` with its state, as `mend list` shows them.
pub fn split_states(dir: &Path, dataset: &str) -> Vec<(String, String)> {
    ok_json(dir, &["list", dataset])["splits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["split_id"].as_str().unwrap().to_string(),
                row["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

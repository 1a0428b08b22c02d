//! Fuzz entry points: one function per parser or validator that takes bytes from outside, fed
//! arbitrary bytes and checking what must hold for every input.
//!
//! Each entry point runs the real code path, in the order mend runs it, and asserts:
//!
//! - **no panic**, on any input;
//! - **every refusal is the typed error** that path documents (`Corrupt` for stored files, a
//!   400 `invalid_argument` or `InvalidArgument` for requests, a `ScenarioError` or
//!   `ConfigError` that names the problem), never `Unavailable`, `Read` or a missing-file
//!   error that would send an operator looking in the wrong place;
//! - **what is accepted is sound**: it round-trips through its writer (`decode(encode(x)) ==
//!   x`), and everything later code trusts about it holds (ids in the one alphabet, numbers in
//!   their [`crate::bounds`] ranges, a replayed commit leaves a state that checkpoints and
//!   reads back as itself).
//!
//! A failed property panics with the target's name, which is how both drivers see it:
//! `cargo fuzz` (the `fuzz/` directory, nightly, for long runs) and the bounded in-suite run
//! of `tests/tests/fuzz.rs` (stable, seconds per target). The stored files' entry points are
//! here; the HTTP bodies' are in `mend_server::fuzzing` and the settings file's in
//! `mend_cli::fuzzing`, which use the checks below. This module only checks; finding
//! inputs, keeping the corpus and replaying crashers are the drivers' job. It is public for
//! them and hidden from the docs: nothing else should call it.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use object_store::path::Path as StorePath;

use crate::bounds;
use crate::catalog::object_store::checkpoint;
use crate::catalog::object_store::log_format::{self, Action, Commit, Snapshot};
use crate::catalog::object_store::state::DatasetState;
use crate::engine::EngineOptions;
use crate::error::MendError;
use crate::intent::{Intent, OperationKind};
use crate::model::{
    Dataset, DatasetConfig, ListQuery, NewSplit, SplitRow, SplitState, TimestampMs,
};
use crate::objects::format;
use crate::scenarios::{self, ScenarioError};
use crate::validate;

/// What an entry point made of its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The input passed the whole path and every property of an accepted input held.
    Accepted,
    /// The input was refused with the typed error its path documents.
    Refused,
}

/// One entry point, as the drivers find it by name.
pub type Target = fn(&[u8]) -> Verdict;

/// This crate's entry points, by the name of their `cargo fuzz` target and corpus directory.
/// The HTTP bodies' are `mend_server::fuzzing::TARGETS`, the settings file's
/// `mend_cli::fuzzing::TARGETS`.
pub const TARGETS: &[(&str, Target)] = &[
    ("split_object", split_object),
    ("commit_log_entry", commit_log_entry),
    ("checkpoint", checkpoint),
    ("scenario_file", scenario_file),
];

/// The dataset every request and log file is about; the seeds use it too, so that mutations
/// reach past the dataset id check.
pub const DATASET: &str = "logs";

/// A split object as stored, read the two ways mend reads one: the prefix and header alone (a
/// ranged read, as reconcile and recovery do), and the whole object with its payload checked.
/// An accepted object re-encodes to one that decodes to the same header and payload, and what
/// reconcile checks of its header before staging a row from it does not panic.
pub fn split_object(data: &[u8]) -> Verdict {
    let announced = match format::header_len(data) {
        Ok(len) => {
            assert!(
                len <= format::MAX_HEADER_LEN,
                "split_object: header_len {len}"
            );
            Some(len as usize)
        }
        Err(error) => {
            expect_corrupt("split_object: header_len", &error);
            None
        }
    };
    let header_only = announced.and_then(|len| {
        let json = data.get(format::PREFIX_LEN..format::PREFIX_LEN + len)?;
        match format::decode_header(json) {
            Ok(header) => Some(header),
            Err(error) => {
                expect_corrupt("split_object: decode_header", &error);
                None
            }
        }
    });
    let (header, payload) = match format::decode(data) {
        Ok(decoded) => decoded,
        Err(error) => return expect_corrupt("split_object: decode", &error),
    };
    assert_eq!(
        header_only.as_ref(),
        Some(&header),
        "split_object: the header read alone differs from the whole object's"
    );
    assert_eq!(payload.len() as u64, header.payload_size, "split_object");
    assert_eq!(
        format::sha256(&payload),
        header.payload_sha256,
        "split_object"
    );
    let again = format::encode(&header, &payload);
    assert_eq!(
        format::encoded_len(&header, payload.len()),
        again.len() as u64,
        "split_object: encoded_len disagrees with encode"
    );
    let decoded = format::decode(&again)
        .unwrap_or_else(|error| panic!("split_object: a re-encoded object is refused: {error}"));
    assert_eq!(
        decoded,
        (header.clone(), payload),
        "split_object: round trip"
    );
    // Reconcile stages a row from a header that passes these; they must refuse, not panic.
    if let Err(error) = validate::split_id(&header.split_id)
        .and_then(|()| validate::metadata(&header.split_id, &header.metadata_json).map(drop))
    {
        expect_invalid_argument("split_object: reconcile's checks", &error);
    }
    Verdict::Accepted
}

/// A commit log file, read as a reader reads version `commit.version`, then replayed onto the
/// state it follows (a small dataset with rows in every state and an intent; version 0 is the
/// creation). Accepted: the file round-trips through the writer's encoding, and the state
/// after it round-trips through a checkpoint.
pub fn commit_log_entry(data: &[u8]) -> Verdict {
    let path = StorePath::from("datasets/logs/catalog/log/00000000000000000001.json");
    let commit: Commit = match log_format::decode(&path, data) {
        Ok(commit) => commit,
        Err(error) => return expect_corrupt("commit_log_entry: decode", &error),
    };
    let encoded = encoded_bytes("commit_log_entry", &commit);
    let again: Commit = log_format::decode(&path, &encoded).unwrap_or_else(|error| {
        panic!("commit_log_entry: a re-encoded commit is refused: {error}")
    });
    assert_eq!(again, commit, "commit_log_entry: round trip");

    let replayed = match commit.version.checked_sub(1) {
        None => DatasetState::from_creation(DATASET, &commit),
        Some(before) => {
            // No state is ever past `i64::MAX` (the state refuses it): a commit beyond that
            // follows the newest state there can be, and must be refused by it.
            let mut state = base_state(before.min(i64::MAX as u64));
            state.apply(&commit).map(|()| state)
        }
    };
    let state = match replayed {
        Ok(state) => state,
        Err(error) => return expect_corrupt("commit_log_entry: apply", &error),
    };
    assert_eq!(state.version, commit.version, "commit_log_entry");
    checkpoint_round_trip("commit_log_entry", &state);
    Verdict::Accepted
}

/// A checkpoint file, read and turned into a state as a reader without a cache does, then
/// moved on by the next commits a writer makes on it (a config change, a fencing epoch
/// advance): whatever a checkpoint holds, the next version must be computable. Accepted: the
/// state round-trips through a checkpoint.
pub fn checkpoint(data: &[u8]) -> Verdict {
    let path = StorePath::from("datasets/logs/catalog/checkpoints/00000000000000000100.json");
    let mut state = match checkpoint::decode(&path, Bytes::copy_from_slice(data)) {
        Ok(state) => state,
        Err(error) => return expect_corrupt("checkpoint: decode", &error),
    };
    checkpoint_round_trip("checkpoint", &state);
    // Every row it holds can be handed out, or is refused as corrupt.
    if let Err(error) = state.list_splits(&ListQuery::default()) {
        return expect_corrupt("checkpoint: list_splits", &error);
    }

    // The next commits, with the same `+ 1`s as the catalog's `load`, `update_config` and
    // `advance_fencing_epoch`: the state's range of counters must keep them from overflowing.
    let next = state.version + 1;
    let mut dataset = state.dataset.clone();
    dataset.config_version += 1;
    dataset.manifest_version += 1;
    let set = Commit::new(next, 0, vec![Action::SetDataset { dataset }]);
    if let Err(error) = state.apply(&set) {
        return expect_corrupt("checkpoint: apply set_dataset", &error);
    }
    let advance = Commit::new(
        state.version + 1,
        0,
        vec![Action::AdvanceFencingEpoch {
            fencing_epoch: state.dataset.fencing_epoch + 1,
            manifest_version: state.dataset.manifest_version + 1,
            updated_at_ms: 0,
        }],
    );
    if let Err(error) = state.apply(&advance) {
        return expect_corrupt("checkpoint: apply advance_fencing_epoch", &error);
    }
    Verdict::Accepted
}

/// A scenario file, as `mend policy test` reads it. Accepted: it writes back (`to_json`) to a
/// file that reads as the same suite, and the default policy's native build answers every
/// scenario (pass or fail) without panicking.
pub fn scenario_file(data: &[u8]) -> Verdict {
    // A file that is not UTF-8 is refused when it is read, before the parser; the parser
    // itself takes any text, so give it text.
    let text = String::from_utf8_lossy(data);
    let suite = match scenarios::parse_suite("fuzz.json", &text) {
        Ok(suite) => suite,
        Err(error @ ScenarioError::Read { .. }) => {
            panic!("scenario_file: a parse failed as a read: {error}")
        }
        Err(error) => {
            // Every message names the file; rendering one must not panic either.
            assert!(error.to_string().contains("fuzz.json"), "{error}");
            return Verdict::Refused;
        }
    };
    let written = suite.to_json();
    let again = scenarios::parse_suite("fuzz.json", &written).unwrap_or_else(|error| {
        panic!("scenario_file: a suite written back is refused: {error}\n{written}")
    });
    assert_eq!(again, suite, "scenario_file: round trip");
    let report = scenarios::run_native(&suite);
    assert_eq!(
        report.passed + report.failed.len(),
        suite.scenarios.len(),
        "scenario_file: every scenario is answered once"
    );
    scenarios::render(&report);
    Verdict::Accepted
}

/// The engine's default limits, which the server and the CLI use unless a setting changes them.
pub fn limits() -> &'static EngineOptions {
    static LIMITS: OnceLock<EngineOptions> = OnceLock::new();
    LIMITS.get_or_init(EngineOptions::default)
}

/// What every accepted split of a stage request must be.
pub fn check_new_split(split: &Arc<NewSplit>, asked: &str, max_metadata_bytes: usize) {
    assert_eq!(
        split.split_id, asked,
        "stage_request_body: ids keep their order"
    );
    validate::split_id(&split.split_id).expect("stage_request_body: an accepted split id");
    validate::node(&split.node).expect("stage_request_body: an accepted node");
    assert!(split.metadata_json.len() <= max_metadata_bytes);
    // `metadata_value` expects the text to be JSON: validation promised it.
    assert!(split.metadata_value().is_object(), "stage_request_body");
    if let Some(range) = split.time_range {
        assert!(range.start <= range.end, "stage_request_body: {range:?}");
    }
}

/// What every accepted dataset config must be, and what gc does with it staying in time.
pub fn check_config(target: &str, config: &DatasetConfig) {
    bounds::STAGED_GRACE_PERIOD_MS
        .check(config.staged_grace_period_ms)
        .and_then(|_| bounds::DELETION_GRACE_PERIOD_MS.check(config.deletion_grace_period_ms))
        .unwrap_or_else(|error| panic!("{target}: an accepted config is out of range: {error}"));
    // What gc does with the grace periods must stay in time, whatever `now` is.
    for now in [TimestampMs::MIN, 0, TimestampMs::MAX] {
        bounds::ms_before(now, config.staged_grace_period_ms);
        bounds::ms_after(now, config.deletion_grace_period_ms);
    }
}

/// `query`, accepted by validation, run on a small dataset: at most `limit` splits, all
/// matching.
pub fn check_listing(query: &ListQuery) {
    let page = base_state(1)
        .list_splits(query)
        .expect("the base state's metadata is JSON");
    assert!(page.splits.len() <= query.limit.unwrap_or(usize::MAX));
    assert!(page.splits.iter().all(|row| query.matches(row)));
}

/// The state's checkpoint, written and read back as a later reader would, is the same state.
fn checkpoint_round_trip(target: &str, state: &DatasetState) {
    let path = StorePath::from("datasets/logs/catalog/checkpoints/fuzz.json");
    let encoded = checkpoint::encode(state)
        .unwrap_or_else(|error| panic!("{target}: an accepted state cannot be encoded: {error}"));
    let read = checkpoint::decode(&path, Bytes::from(encoded))
        .unwrap_or_else(|error| panic!("{target}: a written checkpoint is refused: {error}"));
    assert_eq!(&read, state, "{target}: checkpoint round trip");
}

/// What the catalog writes for `value`, as bytes.
fn encoded_bytes(target: &str, value: &impl serde::Serialize) -> Bytes {
    let payload = log_format::encode(value)
        .unwrap_or_else(|error| panic!("{target}: an accepted value cannot be encoded: {error}"));
    Bytes::from(payload)
}

/// A small dataset at log version `version`: a row in each state and one unresolved intent,
/// so that replayed actions find something to change, delete or contradict.
fn base_state(version: u64) -> DatasetState {
    const T0: TimestampMs = 1_700_000_000_000;
    let row = |split_id: &str, state: SplitState| SplitRow {
        split_id: split_id.to_owned(),
        state,
        node: "node-a".to_owned(),
        metadata: serde_json::json!({"num_docs": 3, "time_range": {"start": 10, "end": 20}}),
        time_range: Some(crate::model::TimeRange { start: 10, end: 20 }),
        created_at_ms: T0,
        updated_at_ms: T0 + 1,
        published_at_ms: (state != SplitState::Staged).then_some(T0 + 1),
        mark_seen_at_ms: (state == SplitState::MarkedForDeletion).then_some(T0 + 2),
    };
    let mut intent = Intent::armed(
        "op-1".to_owned(),
        OperationKind::Commit,
        DATASET,
        "node-a",
        T0,
        60_000,
    );
    intent.expected.manifest_version = 7;
    DatasetState::from_snapshot(Snapshot {
        format_version: log_format::FORMAT_VERSION,
        version,
        dataset: Dataset {
            dataset_id: DATASET.to_owned(),
            uid: "uid-1".to_owned(),
            config: DatasetConfig::default(),
            config_version: 1,
            checkpoint: [("kafka".to_owned(), [("p0".to_owned(), 42)].into())].into(),
            manifest_version: 7,
            publish_token: None,
            fencing_epoch: 0,
            created_at_ms: T0,
            updated_at_ms: T0 + 1,
        },
        splits: vec![
            row("a", SplitState::Staged),
            row("b", SplitState::Published),
            row("c", SplitState::MarkedForDeletion),
        ],
        intents: vec![intent],
        recorded: Vec::new(),
    })
    .expect("the base state is in this host's format")
}

/// A refusal that must be `Corrupt`.
pub fn expect_corrupt(target: &str, error: &MendError) -> Verdict {
    assert!(
        matches!(error, MendError::Corrupt { .. }),
        "{target}: refused with {error:?}, not Corrupt"
    );
    Verdict::Refused
}

/// A refusal that must be `InvalidArgument`.
pub fn expect_invalid_argument(target: &str, error: &MendError) -> Verdict {
    assert!(
        matches!(error, MendError::InvalidArgument { .. }),
        "{target}: refused with {error:?}, not InvalidArgument"
    );
    Verdict::Refused
}

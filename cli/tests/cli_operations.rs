//! Operations driven from the command line, through the real binary on the embedded default
//! catalog (a local directory): `mend commit` for files on disk (published, objects carrying
//! the payload, a re-run answering the same result, a resume part-way, a merge, a payload past
//! the single-put threshold), the scripted steps of `mend operation` (begin, upload, heartbeat,
//! publish, abort, show), `--idempotency-key` on `stage` and `publish`, and the inputs the
//! command line refuses before anything is written.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use common::{failed_with, mend, mend_command, ok_json, split_states, splits_file, write_object};
use mend::objects::format;

/// The object of `split` in the local catalog of `dir`, decoded: its header and payload.
fn object(dir: &Path, dataset: &str, split: &str) -> (format::SplitObjectHeader, Vec<u8>) {
    let path = object_path(dir, dataset, split);
    let bytes = std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let (header, payload) = format::decode(&bytes).expect("an object in mend's format");
    (header, payload.to_vec())
}

fn object_path(dir: &Path, dataset: &str, split: &str) -> PathBuf {
    dir.join("mend-data/datasets")
        .join(dataset)
        .join("splits")
        .join(split)
}

/// `bytes` bytes that differ from file to file and from offset to offset (a small LCG), so
/// that a payload stitched from the wrong parts would not compare equal.
fn payload(seed: u64, bytes: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..bytes)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 56) as u8
        })
        .collect()
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_str().unwrap().to_string()
}

fn sha256_hex(bytes: &[u8]) -> String {
    format::sha256(bytes)
        .strip_prefix("sha256:")
        .unwrap()
        .to_string()
}

fn mend_with_stdin(dir: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = mend_command(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mend");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn stdout_json(output: &Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "mend failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("--json prints one JSON document")
}

/// A plan for `mend operation begin`: one split per `(id, payload)`, each with `{}` metadata.
fn plan(operation_id: &str, node: &str, splits: &[(&str, &[u8])]) -> serde_json::Value {
    serde_json::json!({
        "operation_id": operation_id,
        "kind": "commit",
        "node": node,
        "splits": splits.iter().map(|(id, bytes)| serde_json::json!({
            "split_id": id,
            "metadata_json": "{}",
            "size": bytes.len(),
            "sha256": sha256_hex(bytes),
        })).collect::<Vec<_>>(),
    })
}

fn states(dir: &Path, dataset: &str) -> Vec<(String, String)> {
    split_states(dir, dataset)
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(id, state)| (id.to_string(), state.to_string()))
        .collect()
}

#[test]
fn commit_publishes_files_and_a_rerun_with_its_id_answers_the_same_version() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checked = 0;
    ok_json(dir, &["dataset", "create", "d1"]);

    let files: Vec<(&str, Vec<u8>)> = vec![
        ("s1", payload(1, 10)),
        ("s2", Vec::new()),
        ("s3", payload(3, 300_000)),
    ];
    let paths: Vec<String> = files
        .iter()
        .map(|(id, bytes)| write_file(dir, &format!("{id}.bin"), bytes))
        .collect();
    let split_args: Vec<String> = files
        .iter()
        .zip(&paths)
        .map(|((id, _), path)| format!("{id}={path}"))
        .collect();
    let mut args = vec!["commit", "d1"];
    for split in &split_args {
        args.extend(["--split", split]);
    }
    args.extend([
        "--metadata",
        r#"s1={"num_docs": 7, "time_range": {"start": 0, "end": 9}}"#,
        "--checkpoint-delta",
        r#"{"source": "kafka", "partitions": [{"partition": "0", "from_position": null, "to_position": 10}]}"#,
        "--json",
    ]);

    // Without --operation-id, the id is made up and said on stderr first, so a retry can name it.
    let output = mend(dir, &args);
    let committed = stdout_json(&output);
    let operation_id = committed["operation_id"].as_str().unwrap().to_string();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr
            .lines()
            .next()
            .is_some_and(|line| line.contains(&format!("--operation-id {operation_id}"))),
        "{stderr}"
    );
    assert_eq!(
        committed["publish"]["published"],
        serde_json::json!(["s1", "s2", "s3"])
    );
    let version = committed["publish"]["manifest_version"].as_u64().unwrap();
    checked += 2;

    assert_eq!(
        states(dir, "d1"),
        pairs(&[
            ("s1", "published"),
            ("s2", "published"),
            ("s3", "published")
        ])
    );
    let listed = ok_json(dir, &["list", "d1", "--split", "s1"]);
    assert_eq!(listed["splits"][0]["metadata"]["num_docs"], 7);
    checked += 2;
    for ((id, bytes), upload) in files.iter().zip(committed["uploads"].as_array().unwrap()) {
        let (header, stored) = object(dir, "d1", id);
        assert_eq!(&stored, bytes, "split {id}'s payload");
        assert_eq!(header.operation_id.as_deref(), Some(operation_id.as_str()));
        assert_eq!(header.payload_sha256, format::sha256(bytes));
        assert_eq!(upload["split_id"], *id);
        assert_eq!(upload["written"], true);
        checked += 1;
    }
    let checkpoint = ok_json(dir, &["dataset", "show", "d1"])["checkpoint"].clone();
    assert!(checkpoint.to_string().contains("kafka"), "{checkpoint}");
    assert_eq!(
        ok_json(dir, &["verify", "d1"])["violations"],
        serde_json::json!([])
    );
    checked += 2;

    // The same commit run again under its id: the recorded result, nothing written again.
    let mut again = args.clone();
    again.extend(["--operation-id", &operation_id]);
    let rerun = stdout_json(&mend(dir, &again));
    assert_eq!(rerun["publish"]["manifest_version"].as_u64(), Some(version));
    assert_eq!(
        rerun["publish"]["published"],
        committed["publish"]["published"]
    );
    assert_eq!(rerun["uploads"], serde_json::json!([]));
    assert_eq!(
        ok_json(dir, &["dataset", "show", "d1"])["manifest_version"].as_u64(),
        Some(version)
    );
    checked += 4;

    // Human output: a line with the operation and the manifest version.
    let human: Vec<&str> = again
        .iter()
        .copied()
        .filter(|arg| *arg != "--json")
        .collect();
    let output = mend(dir, &human);
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(
        shown.contains(&operation_id) && shown.contains(&format!("manifest version {version}")),
        "{shown}"
    );
    checked += 1;
    println!("cli commit and its re-run: {checked} checks");
}

#[test]
fn a_commit_resumes_an_operation_left_part_way_and_a_merge_replaces_splits() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checked = 0;
    ok_json(dir, &["dataset", "create", "d1"]);
    let (one, two) = (payload(11, 1000), payload(12, 2000));
    let (path_one, path_two) = (write_file(dir, "one", &one), write_file(dir, "two", &two));

    // A writer began, uploaded s1, and stopped there.
    let plan_file = write_file(
        dir,
        "plan.json",
        plan("op-resume", "cli", &[("s1", &one), ("s2", &two)])
            .to_string()
            .as_bytes(),
    );
    ok_json(dir, &["operation", "begin", "d1", "--plan", &plan_file]);
    let uploaded = ok_json(
        dir,
        &["operation", "upload", "d1", "op-resume", "s1", &path_one],
    );
    assert_eq!(uploaded["written"], true);
    checked += 1;

    let split_one = format!("s1={path_one}");
    let split_two = format!("s2={path_two}");
    let resumed = ok_json(
        dir,
        &[
            "commit",
            "d1",
            "--split",
            &split_one,
            "--split",
            &split_two,
            "--operation-id",
            "op-resume",
        ],
    );
    let written: Vec<(&str, bool)> = resumed["uploads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|upload| {
            (
                upload["split_id"].as_str().unwrap(),
                upload["written"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(written, [("s1", false), ("s2", true)], "{resumed}");
    assert_eq!(
        states(dir, "d1"),
        pairs(&[("s1", "published"), ("s2", "published")])
    );
    assert_eq!(object(dir, "d1", "s2").1, two);
    checked += 3;

    // A merge: m1 in place of s1 and s2, which become marked; a merge carries no delta.
    let merged_bytes = payload(13, 3000);
    let merged_path = write_file(dir, "merged", &merged_bytes);
    let merged_split = format!("m1={merged_path}");
    let merged = ok_json(
        dir,
        &[
            "commit",
            "d1",
            "--split",
            &merged_split,
            "--replace",
            "s1,s2",
            "--operation-id",
            "op-merge",
        ],
    );
    assert_eq!(merged["kind"], "merge");
    assert_eq!(merged["publish"]["marked"], serde_json::json!(["s1", "s2"]));
    assert_eq!(
        states(dir, "d1"),
        pairs(&[
            ("m1", "published"),
            ("s1", "marked_for_deletion"),
            ("s2", "marked_for_deletion")
        ])
    );
    failed_with(
        &mend(
            dir,
            &[
                "commit",
                "d1",
                "--split",
                &merged_split,
                "--replace",
                "s1",
                "--checkpoint-delta",
                "{}",
            ],
        ),
        2,
        &["--checkpoint-delta"],
    );
    checked += 4;
    println!("cli commit resumed and merged: {checked} checks");
}

#[test]
fn scripted_steps_begin_upload_publish_and_show_report_phases_and_objects() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checked = 0;
    ok_json(dir, &["dataset", "create", "d1"]);
    let (one, two) = (payload(21, 500), payload(22, 700));
    let plan_value = plan("op1", "writer-7", &[("t1", &one), ("t2", &two)]);

    // The plan from stdin; its dataset_id may be left out, or must match.
    let begun = stdout_json(&mend_with_stdin(
        dir,
        &["operation", "begin", "d1", "--plan", "-", "--json"],
        plan_value.to_string().as_bytes(),
    ));
    assert_eq!(begun["phase"], "armed");
    assert_eq!(begun["owner"], "writer-7");
    for (split, bytes) in begun["splits"].as_array().unwrap().iter().zip([&one, &two]) {
        let header: format::SplitObjectHeader =
            serde_json::from_str(split["header_json"].as_str().unwrap()).unwrap();
        assert_eq!(header.operation_id.as_deref(), Some("op1"));
        assert_eq!(split["size"].as_u64(), Some(bytes.len() as u64));
        assert_eq!(
            split["object_size"].as_u64(),
            Some(format::encoded_len(&header, bytes.len()))
        );
        assert_eq!(
            split["object_path"],
            format!("datasets/d1/splits/{}", header.split_id)
        );
        checked += 1;
    }
    // Begun again, the same plan resumes; another plan under its id is refused.
    let again = stdout_json(&mend_with_stdin(
        dir,
        &["operation", "begin", "d1", "--plan", "-", "--json"],
        plan_value.to_string().as_bytes(),
    ));
    assert_eq!(again["splits"], begun["splits"]);
    let mut other = plan_value.clone();
    other["splits"][0]["sha256"] = sha256_hex(b"another payload").into();
    failed_with(
        &mend_with_stdin(
            dir,
            &["operation", "begin", "d1", "--plan", "-"],
            other.to_string().as_bytes(),
        ),
        2,
        &["op1", "another plan"],
    );
    let mut elsewhere = plan_value.clone();
    elsewhere["dataset_id"] = "d2".into();
    failed_with(
        &mend_with_stdin(
            dir,
            &["operation", "begin", "d1", "--plan", "-"],
            elsewhere.to_string().as_bytes(),
        ),
        2,
        &["dataset_id", "d2"],
    );
    checked += 3;

    let shown = ok_json(dir, &["operation", "show", "d1", "op1"]);
    assert_eq!(shown["phase"], "armed");
    let objects: Vec<&str> = shown["splits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|split| split["object"].as_str().unwrap())
        .collect();
    assert_eq!(objects, ["missing", "missing"], "{shown}");
    assert!(shown["recovery"].is_object(), "{shown}");
    assert_eq!(
        states(dir, "d1"),
        pairs(&[("t1", "staged"), ("t2", "staged")])
    );
    checked += 3;

    // Wrong bytes (same length, another payload) and too many bytes: refused, nothing written.
    let wrong = payload(99, one.len());
    let wrong_path = write_file(dir, "wrong", &wrong);
    let output = mend(
        dir,
        &["operation", "upload", "d1", "op1", "t1", &wrong_path],
    );
    failed_with(&output, 2, &["t1", "sha256", "nothing was written"]);
    let longer = [one.as_slice(), b"x"].concat();
    let output = mend_with_stdin(
        dir,
        &["operation", "upload", "d1", "op1", "t1", "-"],
        &longer,
    );
    failed_with(&output, 2, &["t1", "longer", "nothing was written"]);
    assert!(!object_path(dir, "d1", "t1").exists());
    failed_with(
        &mend(
            dir,
            &["operation", "upload", "d1", "op1", "t9", &wrong_path],
        ),
        2,
        &["t9", "plans no split"],
    );
    checked += 4;

    // Publishing before every object is in place names what is missing.
    failed_with(
        &mend(dir, &["operation", "publish", "d1", "op1"]),
        4,
        &["t1", "t2", "upload them first"],
    );
    let one_path = write_file(dir, "one", &one);
    let up = ok_json(dir, &["operation", "upload", "d1", "op1", "t1", &one_path]);
    assert_eq!(up["written"], true);
    let up = stdout_json(&mend_with_stdin(
        dir,
        &["operation", "upload", "d1", "op1", "t2", "-", "--json"],
        &two,
    ));
    assert_eq!(up["written"], true);
    let up = ok_json(dir, &["operation", "upload", "d1", "op1", "t1", &one_path]);
    assert_eq!(
        up["written"], false,
        "an object in place is not written again"
    );
    checked += 4;

    let shown = ok_json(dir, &["operation", "show", "d1", "op1"]);
    let objects: Vec<&str> = shown["splits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|split| split["object"].as_str().unwrap())
        .collect();
    assert_eq!(objects, ["present", "present"], "{shown}");
    let beat = ok_json(
        dir,
        &[
            "operation",
            "heartbeat",
            "d1",
            "op1",
            "--lease-ms",
            "120000",
        ],
    );
    assert!(
        beat["lease_expires_at_ms"].as_i64() > begun["lease_expires_at_ms"].as_i64(),
        "{beat}"
    );
    failed_with(
        &mend(
            dir,
            &["operation", "heartbeat", "d1", "op1", "--lease-ms", "5"],
        ),
        2,
        &["lease_ms"],
    );
    checked += 3;

    let published = ok_json(dir, &["operation", "publish", "d1", "op1"]);
    assert_eq!(published["phase"], "published");
    let version = published["publish"]["manifest_version"].as_u64().unwrap();
    let republished = ok_json(dir, &["operation", "publish", "d1", "op1"]);
    assert_eq!(
        republished["publish"]["manifest_version"].as_u64(),
        Some(version)
    );
    assert_eq!(
        states(dir, "d1"),
        pairs(&[("t1", "published"), ("t2", "published")])
    );
    assert_eq!(object(dir, "d1", "t2").1, two);
    let shown = ok_json(dir, &["operation", "show", "d1", "op1"]);
    assert_eq!(shown["phase"], "published");
    assert_eq!(shown["publish"]["manifest_version"].as_u64(), Some(version));
    failed_with(
        &mend(dir, &["operation", "abort", "d1", "op1"]),
        4,
        &["op1", "cannot be aborted"],
    );
    failed_with(
        &mend(dir, &["operation", "show", "d1", "nope"]),
        3,
        &["nope"],
    );
    checked += 7;

    // Human output: the phase on the first line, the splits' objects in a table.
    let output = mend(
        dir,
        &["operation", "begin", "d1", "--plan", &{
            write_file(
                dir,
                "plan2.json",
                plan("op2", "writer-7", &[("t3", b"abc")])
                    .to_string()
                    .as_bytes(),
            )
        }],
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(text.lines().next().unwrap().contains("op2"), "{text}");
    assert!(text.contains("datasets/d1/splits/t3"), "{text}");
    checked += 1;
    println!("cli scripted operation steps: {checked} checks");
}

#[test]
fn abort_removes_the_rows_and_objects_and_ends_the_operation() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checked = 0;
    ok_json(dir, &["dataset", "create", "d1"]);
    let (one, two) = (payload(31, 100), payload(32, 200));
    let plan_file = write_file(
        dir,
        "plan.json",
        plan("op-abort", "w", &[("a1", &one), ("a2", &two)])
            .to_string()
            .as_bytes(),
    );
    ok_json(dir, &["operation", "begin", "d1", "--plan", &plan_file]);
    let one_path = write_file(dir, "one", &one);
    ok_json(
        dir,
        &["operation", "upload", "d1", "op-abort", "a1", &one_path],
    );
    assert!(object_path(dir, "d1", "a1").exists());
    assert_eq!(states(dir, "d1").len(), 2);
    checked += 2;

    let aborted = ok_json(dir, &["operation", "abort", "d1", "op-abort"]);
    assert_eq!(aborted["phase"], "ended");
    assert_eq!(states(dir, "d1"), Vec::<(String, String)>::new());
    assert!(!object_path(dir, "d1", "a1").exists());
    let again = ok_json(dir, &["operation", "abort", "d1", "op-abort"]);
    assert_eq!(again["phase"], "ended");
    assert_eq!(
        ok_json(dir, &["operation", "show", "d1", "op-abort"])["phase"],
        "ended"
    );
    checked += 5;

    // Nothing more can happen to it: no upload, no publish, no begin again.
    failed_with(
        &mend(
            dir,
            &["operation", "upload", "d1", "op-abort", "a1", &one_path],
        ),
        4,
        &["op-abort", "ended"],
    );
    failed_with(
        &mend(dir, &["operation", "publish", "d1", "op-abort"]),
        4,
        &["op-abort", "ended"],
    );
    failed_with(
        &mend(dir, &["operation", "begin", "d1", "--plan", &plan_file]),
        4,
        &["op-abort", "ended"],
    );
    assert_eq!(
        ok_json(dir, &["status"])["datasets"][0]["pending_intents"],
        0
    );
    checked += 4;
    println!("cli operation abort: {checked} checks");
}

#[test]
fn idempotency_keys_answer_a_retry_and_refuse_another_request() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checked = 0;
    ok_json(dir, &["dataset", "create", "d1"]);
    let splits = splits_file(dir, "splits.json", &["s1", "s2"]);
    let splits = splits.to_str().unwrap();
    let stage = [
        "stage",
        "d1",
        "--mode",
        "create-only",
        "--splits",
        splits,
        "--idempotency-key",
        "stage-1",
    ];
    let first = ok_json(dir, &stage);
    let retried = ok_json(dir, &stage);
    assert_eq!(retried, first, "a retried stage answers the first answer");
    assert!(first.to_string().contains("inserted"), "{first}");
    checked += 2;

    let uid = ok_json(dir, &["dataset", "show", "d1"])["uid"]
        .as_str()
        .unwrap()
        .to_string();
    for id in ["s1", "s2"] {
        write_object(&dir.join("mend-data"), "d1", &uid, id);
    }
    let publish = ["publish", "d1", "--split", "s1", "--idempotency-key", "k1"];
    let published = ok_json(dir, &publish);
    let version = published["manifest_version"].as_u64().unwrap();
    for attempt in 1..=3 {
        let again = ok_json(dir, &publish);
        assert_eq!(again, published, "retry {attempt}");
        checked += 1;
    }
    assert_eq!(
        ok_json(dir, &["dataset", "show", "d1"])["manifest_version"].as_u64(),
        Some(version)
    );
    failed_with(
        &mend(
            dir,
            &["publish", "d1", "--split", "s2", "--idempotency-key", "k1"],
        ),
        2,
        &["k1", "another request"],
    );
    assert_eq!(
        states(dir, "d1"),
        pairs(&[("s1", "published"), ("s2", "staged")])
    );
    failed_with(
        &mend(
            dir,
            &[
                "publish",
                "d1",
                "--split",
                "s2",
                "--idempotency-key",
                "op:x",
            ],
        ),
        2,
        &["op:"],
    );
    // Without a key, a publish sent again is refused: s1 is no longer staged.
    let plain = mend(dir, &["publish", "d1", "--split", "s1"]);
    assert_ne!(plain.status.code(), Some(0), "{plain:?}");
    checked += 5;
    println!("cli idempotency keys: {checked} checks");
}

#[test]
fn a_20_mib_commit_streams_through_a_multipart_upload_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    ok_json(dir, &["dataset", "create", "d1"]);
    let size = 20 << 20;
    assert!(size as u64 > mend::engine::SINGLE_PUT_BYTES);
    let bytes = payload(41, size);
    let path = write_file(dir, "big.bin", &bytes);
    let split = format!("big={path}");
    let committed = ok_json(
        dir,
        &[
            "commit",
            "d1",
            "--split",
            &split,
            "--operation-id",
            "op-big",
        ],
    );
    assert_eq!(
        committed["publish"]["published"],
        serde_json::json!(["big"])
    );
    let (header, stored) = object(dir, "d1", "big");
    assert_eq!(header.payload_size, size as u64);
    assert!(stored == bytes, "the 20 MiB payload differs");
    assert_eq!(
        committed["uploads"][0]["object_size"].as_u64(),
        Some(format::encoded_len(&header, size))
    );
    assert_eq!(
        ok_json(dir, &["verify", "d1"])["violations"],
        serde_json::json!([])
    );
    println!("cli 20 MiB commit: 5 checks, {size} payload bytes compared");
}

#[test]
fn bad_commit_inputs_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    ok_json(dir, &["dataset", "create", "d1"]);
    let good = write_file(dir, "good", b"payload");
    let good_split = format!("s1={good}");
    let missing = dir.join("missing.bin");
    let missing_split = format!("s2={}", missing.display());
    let directory = format!("s2={}", dir.display());
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["--split", "s1"], vec!["s1", "ID=FILE"]),
        (vec!["--split", "=file"], vec!["ID=FILE"]),
        (
            vec!["--split", &good_split, "--split", &good_split],
            vec!["s1", "twice"],
        ),
        (
            vec!["--split", &good_split, "--split", &missing_split],
            vec!["s2", "missing.bin"],
        ),
        (
            vec!["--split", &good_split, "--split", &directory],
            vec!["s2", "directory"],
        ),
        (
            vec!["--split", &good_split, "--metadata", "s9={}"],
            vec!["s9", "no --split"],
        ),
        (
            vec!["--split", &good_split, "--metadata", "s1=[1]"],
            vec!["s1", "JSON object"],
        ),
        (
            vec!["--split", &good_split, "--metadata", "s1={nope"],
            vec!["s1", "not JSON"],
        ),
        (
            vec!["--split", &good_split, "--checkpoint-delta", "{"],
            vec!["--checkpoint-delta"],
        ),
        (
            vec!["--split", &good_split, "--operation-id", "bad id"],
            vec!["bad id", "--operation-id"],
        ),
        (
            vec!["--split", &good_split, "--lease-ms", "5"],
            vec!["--lease-ms", "lease_ms"],
        ),
        (
            vec!["--split", "bad/id=file"],
            vec!["--split", "bad/id", "split id"],
        ),
    ];
    let mut checked = 0;
    for (extra, mentions) in &cases {
        let mut args = vec!["commit", "d1"];
        args.extend(extra);
        let line = failed_with(&mend(dir, &args), 2, mentions);
        println!("refused: {line}");
        checked += 1;
    }
    failed_with(
        &mend(dir, &["commit", "nope", "--split", &good_split]),
        3,
        &["nope"],
    );
    checked += 1;
    assert_eq!(states(dir, "d1"), Vec::<(String, String)>::new());
    assert!(!dir.join("mend-data/datasets/d1/splits").exists());
    assert_eq!(
        ok_json(dir, &["status"])["datasets"][0]["pending_intents"],
        0
    );
    checked += 3;

    // A split another writer holds: the begin is rolled back, nothing of it stays.
    ok_json(
        dir,
        &[
            "commit",
            "d1",
            "--split",
            &good_split,
            "--operation-id",
            "first",
        ],
    );
    let taken = mend(
        dir,
        &[
            "commit",
            "d1",
            "--split",
            &good_split,
            "--operation-id",
            "second",
        ],
    );
    failed_with(&taken, 4, &["second", "s1"]);
    assert_eq!(states(dir, "d1"), pairs(&[("s1", "published")]));
    checked += 2;
    println!("cli commit inputs refused: {checked} checks");
}

/// The same protocol on a Postgres catalog (objects in a local directory): a commit, its
/// re-run, the scripted steps with a refused upload, an abort, and a keyed publish retried.
#[test]
fn commit_and_operation_steps_on_postgres() {
    let url = std::env::var("MEND_TEST_DATABASE_URL").expect(
        "MEND_TEST_DATABASE_URL is not set: run the Postgres tests under scripts/with-postgres",
    );
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let objects_dir = dir.join("objects");
    std::fs::create_dir_all(&objects_dir).unwrap();
    let objects = format!("file://{}", objects_dir.display());
    // The database is shared with other tests: a dataset of our own.
    let dataset = format!("cli-ops-{}", uuid::Uuid::new_v4().simple());
    let dataset = dataset.as_str();
    let on_postgres = |args: &[&str]| {
        let mut args = args.to_vec();
        args.push("--json");
        let output = mend_command(dir)
            .env("MEND_CATALOG", &url)
            .env("MEND_OBJECTS", &objects)
            .args(&args)
            .output()
            .unwrap();
        (output.status.code(), output)
    };
    let ok = |args: &[&str]| {
        let (code, output) = on_postgres(args);
        assert_eq!(code, Some(0), "{args:?}: {output:?}");
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };
    let mut checked = 0;
    ok(&["dataset", "create", dataset]);

    let files: Vec<(String, Vec<u8>)> = (1..=3)
        .map(|n| (format!("p{n}"), payload(50 + n, 1000 * n as usize)))
        .collect();
    let split_args: Vec<String> = files
        .iter()
        .map(|(id, bytes)| format!("{id}={}", write_file(dir, id, bytes)))
        .collect();
    let mut commit = vec!["commit", dataset, "--operation-id", "pg-op"];
    for split in &split_args {
        commit.extend(["--split", split]);
    }
    let committed = ok(&commit);
    let version = committed["publish"]["manifest_version"].as_u64().unwrap();
    for (id, bytes) in &files {
        let stored = std::fs::read(
            objects_dir
                .join("datasets")
                .join(dataset)
                .join("splits")
                .join(id),
        )
        .unwrap();
        assert_eq!(
            format::decode(&stored).unwrap().1.as_ref(),
            bytes.as_slice(),
            "{id}"
        );
        checked += 1;
    }
    let rerun = ok(&commit);
    assert_eq!(rerun["publish"]["manifest_version"].as_u64(), Some(version));
    let listed = ok(&["list", dataset, "--state", "published"]);
    assert_eq!(listed["splits"].as_array().unwrap().len(), 3);
    checked += 2;

    let plan_file = write_file(
        dir,
        "plan.json",
        plan("pg-op2", "w", &[("q1", b"four")])
            .to_string()
            .as_bytes(),
    );
    ok(&["operation", "begin", dataset, "--plan", &plan_file]);
    let wrong = write_file(dir, "wrong", b"five!");
    let (code, output) = on_postgres(&["operation", "upload", dataset, "pg-op2", "q1", &wrong]);
    assert_eq!(code, Some(2), "{output:?}");
    let aborted = ok(&["operation", "abort", dataset, "pg-op2"]);
    assert_eq!(aborted["phase"], "ended");
    let listed = ok(&["list", dataset, "--split", "q1"]);
    assert_eq!(listed["splits"], serde_json::json!([]));
    checked += 3;

    let uid = ok(&["dataset", "show", dataset])["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let splits = splits_file(dir, "splits.json", &["k1"]);
    ok(&[
        "stage",
        dataset,
        "--mode",
        "create-only",
        "--splits",
        splits.to_str().unwrap(),
    ]);
    // write_object writes under `<dir>/datasets/...`: the objects directory is that root.
    write_object(&objects_dir, dataset, &uid, "k1");
    let publish = [
        "publish",
        dataset,
        "--split",
        "k1",
        "--idempotency-key",
        "pg-k1",
    ];
    let first = ok(&publish);
    assert_eq!(ok(&publish), first);
    let (code, output) = on_postgres(&[
        "publish",
        dataset,
        "--split",
        "p1",
        "--idempotency-key",
        "pg-k1",
    ]);
    assert_eq!(code, Some(2), "{output:?}");
    checked += 2;
    println!("cli operations on postgres: {checked} checks");
}

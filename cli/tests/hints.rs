//! Every hint `mend` prints names a command that exists and answers the question the error
//! raises. The hints are read from [`mend_cli::hint`] for an error of every kind, each
//! command they name is run with `--help` (it parses: it exists, with those arguments), and
//! the one for an unknown operation is followed for real: it lists the dataset's operations
//! in flight. (`mend operation show|publish DATASET UNKNOWN` used to hint at `mend list
//! DATASET`, which lists splits.)

use crate::common;

use std::path::Path;

use common::{failed_with, mend, mend_command, ok_json};
use mend::error::{EntityKind, MendError, PolicyError};

/// Every `` `mend ...` `` a hint names, its placeholders filled in.
fn commands_in(hint: &str, dataset: &str) -> Vec<Vec<String>> {
    hint.split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| quoted.starts_with("mend "))
        .map(|command| {
            command
                .split_whitespace()
                .skip(1)
                .map(|word| match word {
                    "DATASET" => dataset.to_owned(),
                    "NAME" => "new-dataset".to_owned(),
                    other => other.to_owned(),
                })
                .collect()
        })
        .collect()
}

/// The hint `mend` prints after its error line, if any.
fn printed_hint(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .find_map(|line| line.strip_prefix("hint: "))
        .map(str::to_owned)
}

/// Runs `command --help` in `dir`: it must parse.
fn exists(dir: &Path, command: &[String]) {
    let mut args: Vec<&str> = command.iter().map(String::as_str).collect();
    args.push("--help");
    let output = mend(dir, &args);
    assert!(
        output.status.success(),
        "`mend {}` is not a command: {}",
        command.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn every_hint_names_a_command_that_exists() {
    let dir = tempfile::tempdir().unwrap();
    let message = || "m".to_owned();
    let errors = [
        MendError::NotFound {
            kind: EntityKind::Dataset,
            ids: vec!["d".into()],
        },
        MendError::NotFound {
            kind: EntityKind::Split,
            ids: vec!["s".into()],
        },
        MendError::NotFound {
            kind: EntityKind::Intent,
            ids: vec!["op".into()],
        },
        MendError::AlreadyExists {
            kind: EntityKind::Dataset,
            id: "d".into(),
        },
        MendError::FailedPrecondition {
            message: message(),
            ids: vec!["s".into()],
            operation: None,
        },
        MendError::InvalidArgument { message: message() },
        MendError::RecoveryRequired {
            operation_id: "op".into(),
        },
        MendError::PolicyRejected { message: message() },
        MendError::CapabilityMissing {
            capability: "c".into(),
            detail: message(),
        },
        MendError::Policy(PolicyError::Compile { message: message() }),
        MendError::Conflict { message: message() },
        MendError::Unavailable {
            message: message(),
            source: None,
        },
        MendError::Transient { message: message() },
        MendError::Corrupt { message: message() },
    ];
    let mut named = 0;
    for error in errors {
        let what = format!("{error:?}");
        let Some(hint) = mend_cli::hint(&anyhow::Error::new(error)) else {
            continue;
        };
        for command in commands_in(hint, "d1") {
            exists(dir.path(), &command);
            named += 1;
        }
        // A hint about an operation names a command about operations, not splits.
        if what.contains("Intent") {
            assert!(
                !hint.contains("mend list"),
                "an unknown operation hints at a listing of splits: {hint}"
            );
        }
    }
    // The hint `mend status` prints for a dataset with pending intents, and the one an
    // interrupted command prints.
    for hint in [
        "(see `mend recover d1 --mode probe`)",
        "`mend recover DATASET --mode roll-forward` finishes it",
    ] {
        for command in commands_in(hint, "d1") {
            exists(dir.path(), &command);
            named += 1;
        }
    }
    assert!(named >= 5, "only {named} commands named");
    println!("hints: {named} commands named by hints, each one that parses");
}

#[test]
fn an_unknown_operation_hints_at_the_command_that_lists_operations() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    ok_json(dir, &["dataset", "create", "d1"]);
    // One operation in flight, begun as a scripted writer begins it.
    let payload = b"payload bytes";
    let plan = serde_json::json!({
        "operation_id": "op-live",
        "kind": "commit",
        "node": "writer",
        "splits": [{
            "split_id": "s1",
            "metadata_json": "{}",
            "size": payload.len(),
            "sha256": mend::objects::format::sha256(payload),
        }],
    });
    let plan_file = dir.join("plan.json");
    std::fs::write(&plan_file, plan.to_string()).unwrap();
    ok_json(
        dir,
        &[
            "operation",
            "begin",
            "d1",
            "--plan",
            plan_file.to_str().unwrap(),
        ],
    );

    let mut followed = 0;
    for step in ["show", "publish", "heartbeat"] {
        let output = mend_command(dir)
            .args(["operation", step, "d1", "op-unknown"])
            .output()
            .unwrap();
        failed_with(&output, 3, &["op-unknown"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let hint = printed_hint(&stderr).unwrap_or_else(|| panic!("{step}: no hint: {stderr}"));
        assert!(!hint.contains("mend list"), "{step}: {hint}");
        let commands = commands_in(&hint, "d1");
        assert!(
            !commands.is_empty(),
            "{step}: the hint names no command: {hint}"
        );
        // The command it names answers: it lists the operation in flight.
        for command in commands {
            let mut args: Vec<&str> = command.iter().map(String::as_str).collect();
            args.push("--json");
            let output = mend(dir, &args);
            assert!(
                output.status.success(),
                "{step}: `mend {}` failed: {}",
                command.join(" "),
                String::from_utf8_lossy(&output.stderr)
            );
            let answer = String::from_utf8_lossy(&output.stdout);
            assert!(
                answer.contains("op-live"),
                "{step}: `mend {}` does not list the operation in flight: {answer}",
                command.join(" ")
            );
            followed += 1;
        }
    }
    println!(
        "hints: an unknown operation's hint, from 3 steps, followed {followed} times: each listed the operation in flight"
    );
}

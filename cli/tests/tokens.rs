//! `mend token new`: a principal's secret, printed once, with the tokens file line that names
//! the principal by the secret's hash; bad names and grants refused, nothing written.

use mend_server::auth::{Action, Tokens};

use crate::common::{failed_with, mend, ok_json};

#[test]
fn a_new_token_prints_its_secret_once_and_the_line_that_authenticates_it() {
    let dir = tempfile::tempdir().unwrap();
    let made = ok_json(
        dir.path(),
        &[
            "token",
            "new",
            "indexer",
            "--grant",
            "write:logs-*",
            "--grant",
            "read:logs-*",
        ],
    );
    let secret = made["secret"].as_str().unwrap();
    let line = made["tokens_file_line"].as_str().unwrap();
    assert!(
        secret.starts_with("mend_") && secret.len() == 69,
        "{secret}"
    );
    assert!(
        !line.contains(secret),
        "the line holds the hash only: {line}"
    );
    assert_eq!(
        made["grants"],
        serde_json::json!(["write:logs-*", "read:logs-*"])
    );

    let tokens = Tokens::parse(line).unwrap();
    let principal = tokens
        .authenticate(secret)
        .expect("the secret authenticates");
    assert_eq!(principal.name, "indexer");
    assert!(principal.may(Action::Write, Some("logs-1")));
    assert!(!principal.may(Action::Write, Some("metrics")));

    // Another run, another secret; and nothing was written (no catalog, no file).
    let again = ok_json(dir.path(), &["token", "new", "indexer", "--grant", "admin"]);
    assert_ne!(again["secret"], made["secret"]);
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        Vec::<std::ffi::OsString>::new(),
        "mend token new writes nothing"
    );

    // Without --json: the secret and the line, each on a line of its own.
    let text = mend(dir.path(), &["token", "new", "ops", "--grant", "operate:*"]);
    assert!(text.status.success());
    let stdout = String::from_utf8_lossy(&text.stdout);
    let lines: Vec<&str> = stdout.lines().map(str::trim).collect();
    assert!(
        lines.iter().any(|line| line.starts_with("mend_")),
        "{stdout}"
    );
    assert!(
        lines
            .iter()
            .any(|line| line.starts_with("ops sha256:") && line.ends_with("operate:*")),
        "{stdout}"
    );
}

#[test]
fn a_bad_principal_or_grant_is_refused_and_prints_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    for (args, mentions) in [
        (
            vec!["token", "new", "ind/exer", "--grant", "read:*"],
            vec!["principal name"],
        ),
        (
            vec!["token", "new", "indexer", "--grant", "delete:*"],
            vec!["action is unknown", "delete"],
        ),
        (
            vec!["token", "new", "indexer", "--grant", "read:l*gs"],
            vec!["'*' may only come last"],
        ),
    ] {
        let output = mend(dir.path(), &args);
        failed_with(&output, 2, &mentions);
        assert!(
            !String::from_utf8_lossy(&output.stdout).contains("mend_"),
            "{args:?} printed a secret"
        );
    }
    // No grant at all: the argument parser refuses it.
    let output = mend(dir.path(), &["token", "new", "indexer"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--grant"));
}

//! The real binary's logs: `log.format = json` makes the server's log lines JSON objects
//! with their spans and fields (a request's span names its dataset, and the engine's span
//! inside it too); `log.level` and `RUST_LOG` choose which lines are written, `RUST_LOG`
//! over the setting; and a bad value of either setting is refused, exit 2, naming its key.
//! The lines `mend serve` writes for people (listening, stopped) stay as they were, whatever
//! the format: tests, benches and scripts read the address from them.

use crate::common;

use common::server::{ServerOptions, TestServer};
use common::{mend, mend_command};

use std::process::Output;

use serde_json::{Value, json};

/// The line the library writes, at debug, when a sweep ends with nothing done.
const SWEEP_FINISHED: &str = "recovery sweep finished";

#[test]
fn json_logs_carry_the_request_span_with_its_dataset_and_the_engine_span_inside_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(
        dir.path(),
        ServerOptions::default().with_settings(&["log.format=json", "log.level=info,mend=debug"]),
    );
    assert_eq!(
        server
            .post("/v1/datasets", json!({"dataset_id": "d1"}))
            .status,
        201
    );
    let recovered = server.post("/v1/datasets/d1/recover", json!({"mode": "roll-forward"}));
    assert_eq!(recovered.status, 200, "{:?}", recovered.body);
    server.wait_for("the recover request's log lines", |server| {
        events(&server.log()).iter().any(|event| {
            event["fields"]["message"] == "answered"
                && span(event, "request")
                    .is_some_and(|request| request["route"] == "/v1/datasets/{dataset}/recover")
        })
    });

    let log = server.log();
    let events = events(&log);
    // Every line is a JSON object but the ones `mend serve` writes for people.
    for line in log.lines() {
        assert!(
            line.starts_with("mend serve: ") || serde_json::from_str::<Value>(line).is_ok(),
            "not a JSON log line: {line:?}"
        );
    }
    assert!(
        log.lines()
            .any(|line| line.starts_with("mend serve: listening on http://")),
        "{log}"
    );

    // The request's span: method, route, dataset id, principal and, once answered, the
    // status.
    let answered = events
        .iter()
        .find(|event| {
            event["fields"]["message"] == "answered"
                && span(event, "request")
                    .is_some_and(|request| request["route"] == "/v1/datasets/{dataset}/recover")
        })
        .unwrap_or_else(|| panic!("no answered recover request in:\n{log}"));
    // A write's answer is logged at info, naming who made it.
    assert_eq!(answered["level"], "INFO", "{answered}");
    let request = span(answered, "request").unwrap();
    assert_eq!(request["method"], "POST", "{answered}");
    assert_eq!(request["principal"], "anonymous", "{answered}");
    assert_eq!(request["dataset_id"], "d1", "{answered}");
    assert_eq!(request["status"], 200, "{answered}");
    assert!(answered["fields"]["elapsed_ms"].is_number(), "{answered}");

    // The engine's sweep logged inside the request's span (the write ran on a task of its
    // own), in the span of its operation, with the dataset and the mode.
    let swept = events
        .iter()
        .find(|event| {
            event["fields"]["message"] == SWEEP_FINISHED
                && span(event, "request").is_some_and(|request| request["dataset_id"] == "d1")
        })
        .unwrap_or_else(|| panic!("no sweep of d1 inside its request in:\n{log}"));
    let recover = span(swept, "recover").unwrap_or_else(|| panic!("{swept}"));
    assert_eq!(recover["dataset_id"], "d1", "{swept}");
    assert_eq!(recover["mode"], "roll-forward", "{swept}");
    assert_eq!(
        swept["span"]["name"], "recover",
        "the current span: {swept}"
    );
    assert_eq!(swept["fields"]["intents"], 0, "{swept}");
    assert!(
        swept["target"].as_str().unwrap().starts_with("mend::"),
        "{swept}"
    );

    // The supervisor's sweeps are in its own span, which names its dataset.
    let supervised = events
        .iter()
        .filter_map(|event| span(event, "supervisor"))
        .next();
    if let Some(supervisor) = supervised {
        assert_eq!(supervisor["dataset_id"], "d1");
    }
    println!(
        "logs: {} JSON log lines from the server, the request and engine spans in them",
        events.len()
    );
}

#[test]
fn log_level_and_rust_log_choose_the_lines_and_rust_log_wins() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    assert!(mend(dir, &["dataset", "create", "d1"]).status.success());
    let probe = |settings: &[&str], env: &[(&str, &str)]| -> String {
        let mut command = mend_command(dir);
        for (name, value) in env {
            command.env(name, value);
        }
        let output = command
            .args(settings)
            .args(["recover", "d1", "--mode", "probe", "--json"])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        // The command's output is untouched: one JSON document on stdout.
        let report: Value = serde_json::from_slice(&output.stdout).expect("the report");
        assert_eq!(report["mode"], "probe");
        stderr(&output)
    };

    let at_info = probe(&[], &[]);
    assert!(!at_info.contains(SWEEP_FINISHED), "{at_info}");
    let at_debug = probe(&["--set", "log.level=debug"], &[]);
    assert!(at_debug.contains(SWEEP_FINISHED), "{at_debug}");
    // Human lines: the level, the span with its fields, the message.
    let line = at_debug
        .lines()
        .find(|line| line.contains(SWEEP_FINISHED))
        .unwrap();
    assert!(
        line.contains("DEBUG")
            && line.contains("recover{dataset_id=d1 mode=probe}")
            && line.contains("intents=0"),
        "{line}"
    );
    let by_env = probe(&[], &[("MEND_LOG_LEVEL", "warn,mend=debug")]);
    assert!(by_env.contains(SWEEP_FINISHED), "{by_env}");
    // RUST_LOG wins over the setting, from the flag as from anywhere else.
    let overruled = probe(&["--set", "log.level=debug"], &[("RUST_LOG", "info")]);
    assert!(!overruled.contains(SWEEP_FINISHED), "{overruled}");
    let by_rust_log = probe(&[], &[("RUST_LOG", "mend=debug")]);
    assert!(by_rust_log.contains(SWEEP_FINISHED), "{by_rust_log}");
    let json = probe(&["--set", "log.format=json"], &[("RUST_LOG", "debug")]);
    let swept = events(&json)
        .into_iter()
        .find(|event| event["fields"]["message"] == SWEEP_FINISHED)
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(span(&swept, "recover").unwrap()["mode"], "probe");

    // `mend config` says where the level came from.
    let config = mend_command(dir)
        .env("RUST_LOG", "mend=debug")
        .args(["--set", "log.level=warn", "config", "--json"])
        .output()
        .unwrap();
    let config: Value = serde_json::from_slice(&config.stdout).unwrap();
    let level = &config["settings"]["log.level"];
    assert_eq!(level["value"], "mend=debug", "{level}");
    assert_eq!(level["source"]["name"], "RUST_LOG", "{level}");
    assert_eq!(config["settings"]["log.format"]["value"], "human");
    println!("logs: log.level, MEND_LOG_LEVEL and RUST_LOG filter the real binary's lines");
}

/// A bad log setting: the flags, the environment, and the name its error must carry.
type BadSetting<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

#[test]
fn a_bad_log_setting_is_exit_2_naming_its_key_and_nothing_happens() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let cases: [BadSetting; 5] = [
        (&["--set", "log.format=xml"], &[], "log.format"),
        (&[], &[("MEND_LOG_FORMAT", "JSON lines")], "log.format"),
        (&["--set", "log.level=verbose"], &[], "log.level"),
        (&[], &[("MEND_LOG_LEVEL", "info,mend=chatty")], "log.level"),
        (&[], &[("RUST_LOG", "mend=chatty")], "RUST_LOG"),
    ];
    for (flags, env, named) in cases {
        for command in [&["dataset", "create", "d1"][..], &["serve"][..]] {
            let mut run = mend_command(dir);
            for (name, value) in env {
                run.env(name, value);
            }
            let output = run.args(flags).args(command).output().unwrap();
            let stderr = stderr(&output);
            assert_eq!(output.status.code(), Some(2), "{flags:?} {env:?}: {stderr}");
            let errors: Vec<&str> = stderr
                .lines()
                .filter(|line| line.starts_with("error:"))
                .collect();
            assert_eq!(errors.len(), 1, "one error line: {stderr}");
            assert!(errors[0].contains(named), "{named} not in {stderr}");
            assert!(!dir.join("mend-data").exists(), "nothing happens: {stderr}");
        }
    }
    println!("logs: {} bad log settings refused, exit 2", cases.len());
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The JSON log events among `log`'s lines.
fn events(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event.is_object())
        .collect()
}

/// The span named `name` among the event's spans, outermost first.
fn span<'a>(event: &'a Value, name: &str) -> Option<&'a Value> {
    event["spans"]
        .as_array()?
        .iter()
        .find(|span| span["name"] == name)
}

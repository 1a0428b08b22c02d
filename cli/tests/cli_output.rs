//! What the real `mend` binary shows, and what it leaves behind when it is stopped: tables
//! that fit the terminal (or `--wide`), times as RFC 3339 in tables and milliseconds in JSON,
//! help for every command, `policy inspect` and `policy test` without a catalog, `serve
//! --json`, and gates released by a command stopped with SIGINT or SIGTERM, named with their
//! holder and lease end when another process holds them.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{mend, mend_command, write_component};
use mend::clock::rfc3339;
use mend::gates::{GateName, GateSession};

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn succeeded(args: &[&str], output: Output) -> Output {
    assert!(
        output.status.success(),
        "mend {args:?} failed: {}",
        stderr(&output)
    );
    output
}

/// `mend args` with `COLUMNS=columns`, which must succeed.
fn mend_at(dir: &Path, columns: &str, args: &[&str]) -> String {
    let output = mend_command(dir)
        .env("COLUMNS", columns)
        .args(args)
        .output()
        .expect("run mend");
    stdout(&succeeded(args, output))
}

fn json(dir: &Path, args: &[&str]) -> serde_json::Value {
    let mut args = args.to_vec();
    args.push("--json");
    common::json(&mend(dir, &args))
}

/// The lines of `text` that belong to a table (comfy-table's UTF-8 borders).
fn table_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|line| line.starts_with(['┌', '│', '╞', '├', '└', '┆']))
        .collect()
}

fn widest(lines: &[&str]) -> usize {
    lines
        .iter()
        .map(|line| line.chars().count())
        .max()
        .unwrap_or(0)
}

#[test]
fn tables_fit_the_terminal_width_unless_wide() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checked = 0;
    // The demo leaves audited decisions that the cautious policy would change: its replay
    // table holds decisions, the widest cells mend prints.
    let demo = mend_at(dir, "80", &["demo"]);
    let demo_tables = table_lines(&demo);
    assert!(demo_tables.len() > 10, "{demo}");
    assert!(widest(&demo_tables) <= 80, "{demo}");
    checked += 2;

    let cautious = write_component(dir, "cautious.wasm", mend::runtime::CAUTIOUS_POLICY_WASM);
    let replay = ["policy", "replay", cautious.as_str()];
    for columns in ["80", "100", "60"] {
        let shown = mend_at(dir, columns, &replay);
        let lines = table_lines(&shown);
        assert!(
            lines.iter().any(|line| line.contains("adopt")),
            "the changed decision is shown: {shown}"
        );
        let limit: usize = columns.parse().unwrap();
        assert!(widest(&lines) <= limit, "COLUMNS={columns}:\n{shown}");
        checked += 2;
    }
    // Nonsense in COLUMNS: 80.
    let shown = mend_at(dir, "wide please", &replay);
    assert!(widest(&table_lines(&shown)) <= 80, "{shown}");
    checked += 1;

    // --wide: every cell on one line, so the table is as wide as its widest decision.
    let wide = mend_at(
        dir,
        "80",
        &["--wide", "policy", "replay", cautious.as_str()],
    );
    let fitted = mend_at(dir, "80", &replay);
    assert!(widest(&table_lines(&wide)) > 80, "{wide}");
    assert!(
        table_lines(&wide).len() < table_lines(&fitted).len(),
        "wrapping takes more lines:\n{wide}\n{fitted}"
    );
    checked += 2;
    println!("cli tables fit the terminal: {checked} checks");
}

#[test]
fn tables_show_rfc3339_times_and_json_keeps_milliseconds() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checked = 0;
    json(dir, &["dataset", "create", "d1"]);
    let splits = dir.join("splits.json");
    std::fs::write(&splits, r#"[{"split_id": "s1"}, {"split_id": "s2"}]"#).unwrap();
    let stage = [
        "stage",
        "d1",
        "--mode",
        "create-only",
        "--splits",
        splits.to_str().unwrap(),
    ];
    json(dir, &stage);
    let uid = json(dir, &["dataset", "show", "d1"])["uid"]
        .as_str()
        .unwrap()
        .to_string();
    common::write_object(&dir.join("mend-data"), "d1", &uid, "s1");
    json(dir, &["publish", "d1", "--split", "s1"]);

    let dataset = json(dir, &["dataset", "show", "d1"]);
    let created = dataset["created_at_ms"].as_i64().expect("JSON keeps ms");
    let updated = dataset["updated_at_ms"].as_i64().expect("JSON keeps ms");
    checked += 2;
    let shown = mend_at(dir, "80", &["dataset", "show", "d1"]);
    assert!(shown.contains(&rfc3339(created)), "{shown}");
    assert!(shown.contains(&rfc3339(updated)), "{shown}");
    let listed = mend_at(dir, "200", &["dataset", "list"]);
    assert!(listed.contains(&rfc3339(updated)), "{listed}");
    checked += 3;
    // Narrower, a time wraps between its date and its time of day, never inside them.
    let listed = mend_at(dir, "80", &["dataset", "list"]);
    assert!(shows_time(&listed, updated), "{listed}");
    checked += 1;

    let page = json(dir, &["list", "d1"]);
    let rows = page["splits"].as_array().unwrap();
    let published = rows[0]["published_at_ms"].as_i64().expect("JSON keeps ms");
    let staged_updated = rows[1]["updated_at_ms"].as_i64().expect("JSON keeps ms");
    checked += 2;
    for columns in ["200", "80"] {
        let listed = mend_at(dir, columns, &["list", "d1"]);
        assert!(shows_time(&listed, published), "{listed}");
        assert!(shows_time(&listed, staged_updated), "{listed}");
        assert!(!listed.contains(&published.to_string()), "{listed}");
        checked += 3;
    }
    let wide = mend_at(dir, "80", &["--wide", "list", "d1"]);
    assert!(wide.contains(&rfc3339(published)), "{wide}");
    checked += 1;
    println!("cli times: {checked} checks");
}

/// Whether a table shows the time `ms`: whole, or wrapped between its date and its time of
/// day into the same column of two lines in a row.
fn shows_time(text: &str, ms: i64) -> bool {
    let time = rfc3339(ms);
    if text.contains(&time) {
        return true;
    }
    let (date, time_of_day) = time.split_once('T').unwrap();
    let lines: Vec<&str> = text.lines().collect();
    lines.windows(2).any(|pair| {
        let column =
            |line: &str, part: &str| line.find(part).map(|byte| line[..byte].chars().count());
        matches!(
            (column(pair[0], date), column(pair[1], time_of_day)),
            (Some(a), Some(b)) if a == b
        )
    })
}

#[test]
fn help_describes_the_demo_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let output = succeeded(&["demo", "--help"], mend(dir.path(), &["demo", "--help"]));
    let help = stdout(&output).to_lowercase();
    let mut checked = 0;
    for what in [
        "crash",
        "probe",
        "recovery",
        "reconcile",
        "orphan",
        "swap",
        "verify",
        "rolled back",
    ] {
        assert!(
            help.contains(what),
            "demo --help should mention {what:?}: {help}"
        );
        checked += 1;
    }
    // Every command's help lists its arguments with a description (clap prints a bare name
    // when there is none); the whole tree is walked in the binary's unit tests.
    for command in [
        &["gc", "--help"][..],
        &["mark", "--help"],
        &["dataset", "fence", "--help"],
        &["policy", "test", "--help"],
    ] {
        let help = stdout(&succeeded(command, mend(dir.path(), command)));
        for line in help.lines() {
            let entry = line.trim_start();
            if line.starts_with("  ") && (entry.starts_with('<') || entry.starts_with('-')) {
                assert!(
                    entry.contains("  "),
                    "mend {command:?}: {line:?} has no help"
                );
                checked += 1;
            }
        }
    }
    println!("cli help: {checked} checks");
}

#[test]
fn policy_inspect_and_test_open_no_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let builtin = write_component(dir, "builtin.wasm", mend::runtime::DEFAULT_POLICY_WASM);
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest/scenarios");
    let mut checked = 0;

    let inspected = json(dir, &["policy", "inspect", &builtin]);
    assert!(inspected["digest"].as_str().unwrap().starts_with("sha256:"));
    let text = mend_at(dir, "80", &["policy", "inspect", &builtin]);
    assert!(text.contains("loads and runs"), "{text}");
    let tested = json(
        dir,
        &["policy", "test", &builtin, scenarios.to_str().unwrap()],
    );
    assert!(!tested.as_array().unwrap().is_empty());
    checked += 3;
    // Nor with a catalog that cannot even be reached.
    let output = mend_command(dir)
        .env("MEND_CATALOG", "postgres://nobody@127.0.0.1:1/nothing")
        .args(["policy", "inspect", &builtin])
        .output()
        .unwrap();
    succeeded(&["policy", "inspect"], output);
    checked += 1;
    assert!(
        !dir.join("mend-data").exists(),
        "policy inspect and test created ./mend-data"
    );
    checked += 1;
    println!("cli policy without a catalog: {checked} checks");
}

/// A child process killed if the test ends early (a failed assertion), so that no server
/// outlives its test.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn serve_json_prints_its_start_and_stop_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = mend_command(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mend serve");
    let stdout = child.stdout.take().unwrap();
    let mut child = KillOnDrop(child);
    // Read on a thread of its own, so that a server that prints nothing fails the test
    // rather than hanging it.
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let next_line = |what: &str| -> Option<String> {
        match lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => Some(line),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => None,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("mend serve --json printed no {what} on stdout within 60 s")
            }
        }
    };
    let first = next_line("first line");
    let started: serde_json::Value =
        serde_json::from_str(&first.expect("a first line")).expect("the first line is JSON");
    let mut checked = 1;
    assert_eq!(started["event"], "listening", "{started}");
    let address = started["address"].as_str().unwrap().to_string();
    assert_eq!(started["url"], format!("http://{address}"));
    assert!(
        started["policy_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(started["admin_token"], false);
    checked += 4;

    let mut client = TcpStream::connect(&address).unwrap();
    client
        .write_all(b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    client.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    checked += 1;

    signal(&child.0, "TERM");
    let stopped: serde_json::Value =
        serde_json::from_str(&next_line("stop line").expect("a last line")).unwrap();
    assert_eq!(stopped["event"], "stopped", "{stopped}");
    assert!(next_line("end").is_none(), "nothing after the stop");
    let status = child.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    checked += 3;
    println!("cli serve --json: {checked} checks");
}

fn signal(child: &Child, signal: &str) {
    let sent = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{signal}");
}

/// The directory of `dataset`'s gate in the local catalog at `catalog`.
fn dataset_gate_dir(catalog: &Path, dataset: &str) -> PathBuf {
    catalog.join("datasets").join(dataset).join("gates/dataset")
}

/// The epoch of the lease on `dataset`'s gate that process `pid` holds, once it does.
fn wait_for_lease_of(catalog: &Path, dataset: &str, pid: u32, child: &mut Child) -> u64 {
    let started = Instant::now();
    loop {
        if let Ok(entries) = std::fs::read_dir(dataset_gate_dir(catalog, dataset)) {
            for entry in entries {
                let name = entry.unwrap().file_name().into_string().unwrap();
                let Some(epoch) = name.strip_suffix(".json").filter(|e| e.len() == 20) else {
                    continue;
                };
                let lease = std::fs::read_to_string(dataset_gate_dir(catalog, dataset).join(&name))
                    .unwrap_or_default();
                if lease.contains(&format!("(pid {pid}")) {
                    return epoch.parse().unwrap();
                }
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("mend ended ({status:?}) before taking the gate: {err}");
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("mend {pid} never took the dataset gate");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A gc that takes the dataset gate of `d1`, then blocks reading the dataset's commit log:
/// its next log file is a FIFO that nobody writes. It holds the gate until it is stopped.
fn gc_stuck_holding_the_gate(dir: &Path, settings: &[&str]) -> (Child, u64, PathBuf) {
    let fifo = common::next_log_file(&dir.join("mend-data"), "d1");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo");
    let mut child = mend_command(dir)
        .args(settings.iter().flat_map(|setting| ["--set", setting]))
        .args(["gc", "d1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let epoch = wait_for_lease_of(&dir.join("mend-data"), "d1", pid, &mut child);
    (child, epoch, fifo)
}

/// `mend gc d1` giving up on a held gate after 300 ms.
fn impatient_gc(dir: &Path) -> Output {
    mend(
        dir,
        &["--set", "limits.gate_timeout_ms=300", "gc", "d1", "--json"],
    )
}

fn wait_with_deadline(mut child: Child, deadline: Duration) -> Output {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > deadline {
            let _ = child.kill();
            panic!("mend did not end within {deadline:?} of the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_stopped_gc_releases_its_gate_and_a_held_gate_names_its_holder() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let catalog = dir.join("mend-data");
    let mut checked = 0;
    json(dir, &["dataset", "create", "d1"]);

    // Another process (this test) holds the dataset gate: the error names it and its lease.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let held = runtime.block_on(async {
        let gates = mend::gates::open_gates_as(
            catalog.to_str().unwrap(),
            "cli_output test",
            mend::gates::DEFAULT_LEASE_DURATION,
        )
        .await
        .unwrap();
        gates
            .acquire_one(
                &GateSession::new(),
                GateName::dataset("d1"),
                Duration::from_secs(10),
            )
            .await
            .unwrap()
    });
    let lease_end = rfc3339(held.expires_at_ms().expect("a lease"));
    let refused = impatient_gc(dir);
    let message = stderr(&refused);
    println!("held by another process: {message}");
    assert_eq!(refused.status.code(), Some(4), "{message}");
    assert!(
        message.contains(&format!(
            "held by cli_output test (pid {}",
            std::process::id()
        )),
        "the error names the holder: {message}"
    );
    assert!(
        message.contains(&format!("its lease ends at {lease_end}")),
        "the error says when the lease ends ({lease_end}): {message}"
    );
    runtime.block_on(held.release()).unwrap();
    json(dir, &["gc", "d1"]);
    checked += 4;

    // A gc stopped by a signal while it holds the gate releases it before exiting: the next
    // gc, which gives up after 300 ms, gets it at once.
    for (signal_name, code) in [("TERM", 143), ("INT", 130)] {
        let (child, epoch, fifo) = gc_stuck_holding_the_gate(dir, &[]);
        signal(&child, signal_name);
        let stopped = wait_with_deadline(child, Duration::from_secs(20));
        let message = stderr(&stopped);
        assert_eq!(stopped.status.code(), Some(code), "{message}");
        assert!(
            message.contains(&format!("stopped by SIG{signal_name}"))
                && message.contains("released"),
            "{message}"
        );
        let released = dataset_gate_dir(&catalog, "d1").join(format!("{epoch:020}.released.json"));
        assert!(released.exists(), "no release marker for epoch {epoch}");
        std::fs::remove_file(&fifo).unwrap();
        let started = Instant::now();
        let next = impatient_gc(dir);
        assert!(next.status.success(), "SIG{signal_name}: {}", stderr(&next));
        assert!(started.elapsed() < Duration::from_secs(20));
        checked += 5;
    }

    // A gc killed outright (SIGKILL: nothing runs) leaves its lease to run out; meanwhile
    // the next gc's error names the dead holder and when its lease ends. Its lease is
    // `limits.gate_lease_ms` (renewed every third of it), so the gate is free that long after
    // the last renewal, plus the store-clock allowance: a patient gc then gets it.
    let (mut child, _epoch, fifo) = gc_stuck_holding_the_gate(dir, &["limits.gate_lease_ms=5000"]);
    let pid = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_file(&fifo).unwrap();
    let refused = impatient_gc(dir);
    let message = stderr(&refused);
    assert_eq!(refused.status.code(), Some(4), "{message}");
    assert!(
        message.contains(&format!("held by mend gc (pid {pid}")),
        "{message}"
    );
    assert!(message.contains("its lease ends at 20"), "{message}");
    let patient = mend(
        dir,
        &[
            "--set",
            "limits.gate_timeout_ms=30000",
            "gc",
            "d1",
            "--json",
        ],
    );
    assert!(
        patient.status.success(),
        "the killed gc's 5 s lease did not free the gate within 30 s: {}",
        stderr(&patient)
    );
    checked += 4;
    println!("cli gates on stop: {checked} checks");
}

#[test]
fn a_gate_held_on_postgres_names_the_holding_backend() {
    let url = std::env::var("MEND_TEST_DATABASE_URL").expect(
        "MEND_TEST_DATABASE_URL is not set: run the Postgres tests under scripts/with-postgres",
    );
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    let objects = format!("file://{}", dir.join("objects").display());
    // The database is shared with other tests: a dataset of our own.
    let dataset = format!("cli-gates-{}", uuid::Uuid::new_v4().simple());
    let on_postgres = |args: &[&str]| {
        mend_command(dir)
            .env("MEND_CATALOG", &url)
            .env("MEND_OBJECTS", &objects)
            .args(args)
            .output()
            .unwrap()
    };
    let mut checked = 0;
    succeeded(
        &["dataset", "create"],
        on_postgres(&["dataset", "create", &dataset]),
    );

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let held = runtime.block_on(async {
        let gates = mend::gates::open_gates_as(
            &url,
            "cli_output test",
            mend::gates::DEFAULT_LEASE_DURATION,
        )
        .await
        .unwrap();
        gates
            .acquire_one(
                &GateSession::new(),
                GateName::dataset(dataset.as_str()),
                Duration::from_secs(10),
            )
            .await
            .unwrap()
    });
    let gc = [
        "--set",
        "limits.gate_timeout_ms=300",
        "gc",
        dataset.as_str(),
    ];
    let refused = on_postgres(&gc);
    let message = stderr(&refused);
    assert_eq!(refused.status.code(), Some(4), "{message}");
    println!("held on postgres: {message}");
    assert!(message.contains("postgres backend pid"), "{message}");
    assert!(
        message.contains(&format!("cli_output test (pid {}", std::process::id())),
        "the holder's application_name: {message}"
    );
    assert!(message.contains("connected since 20"), "{message}");
    checked += 4;
    runtime.block_on(held.release()).unwrap();
    succeeded(&gc, on_postgres(&gc));
    checked += 1;
    println!("cli gates on postgres: {checked} checks");
}

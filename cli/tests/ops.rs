//! What operators run beside mend (`ops/`): the Prometheus alert rules pass `promtool check
//! rules` and their own unit tests (`promtool test rules`, each alert fired by the series
//! that should fire it), and every metric the rules and the Grafana dashboard name is one a
//! running `mend serve` exports on `/metrics`.
//!
//! promtool comes from Debian's `prometheus` package, which `scripts/test` installs when it
//! is missing; run alone, these tests fail saying so.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::server::{ServerOptions, TestServer};

fn ops() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops")
}

/// promtool on PATH, or a failure that says how to get it.
fn promtool() -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("promtool"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "promtool is not on PATH: install Debian's prometheus package \
                 (`apt-get install prometheus`), or run scripts/test, which installs it"
            )
        })
}

fn run_promtool(args: &[&str]) -> String {
    let output = Command::new(promtool())
        .args(args)
        .current_dir(ops().join("prometheus"))
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let checked = run_promtool(&["check", "rules", "alerts.yml"]);
    let rules = checked
        .lines()
        .find_map(|line| line.trim().strip_prefix("SUCCESS: "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|count| count.parse::<usize>().ok())
        .unwrap_or_else(|| panic!("promtool check rules said: {checked}"));
    assert_eq!(rules, 10, "{checked}");
    let tested = run_promtool(&["test", "rules", "alerts.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert of the file has at least one case that expects it to fire.
    let tests = std::fs::read_to_string(ops().join("prometheus/alerts.test.yml")).unwrap();
    let alerts = std::fs::read_to_string(ops().join("prometheus/alerts.yml")).unwrap();
    let names: Vec<&str> = alerts
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert: "))
        .collect();
    assert_eq!(names.len(), rules);
    for name in &names {
        let firing = tests
            .split("alertname: ")
            .skip(1)
            .any(|case| case.starts_with(name) && case.contains("exp_labels"));
        assert!(firing, "no unit test expects {name} to fire");
    }
    println!(
        "ops: {rules} alert rules pass promtool check; their unit tests pass, each alert fired by one"
    );
}

/// Every `mend_...` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("mend_") {
        let after = &rest[start..];
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        // Not the tail of a longer word (such as `cli/tests/...`'s text or a `$mend_x`).
        let before = rest[..start].chars().last();
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            names.insert(after[..end].to_string());
        }
        rest = &after[end..];
    }
    names
}

/// The series names a `/metrics` exposition holds: each family's name as its `# TYPE` line
/// gives it, and a histogram's `_bucket`, `_sum` and `_count`.
fn exported(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let mut parts = declared.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            names.insert(name.to_string());
            if kind == "histogram" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
        }
    }
    names
}

#[test]
fn every_metric_the_rules_and_the_dashboard_name_is_one_the_server_exports() {
    let alerts = std::fs::read_to_string(ops().join("prometheus/alerts.yml")).unwrap();
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(ops().join("grafana/mend.json")).unwrap())
            .expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut queries = String::new();
    for panel in panels {
        for target in panel["targets"].as_array().expect("targets") {
            queries.push_str(target["expr"].as_str().expect("a query"));
            queries.push('\n');
        }
    }
    let from_rules = metric_names(&alerts);
    let from_dashboard = metric_names(&queries);
    assert!(from_rules.len() >= 8, "{from_rules:?}");
    assert!(from_dashboard.len() >= 12, "{from_dashboard:?}");

    // A server with one dataset that saw a stage and an operation whose lease ran out: every
    // family then has a series (a family without one is not listed at all).
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), ServerOptions::default());
    let created = server.post("/v1/datasets", json!({"dataset_id": "ops"}));
    assert_eq!(created.status, 201, "{}", created.body);
    let staged = server.post(
        "/v1/datasets/ops/stage",
        json!({"mode": "create-only", "splits": [{"split_id": "s1"}]}),
    );
    assert_eq!(staged.status, 200, "{}", staged.body);
    let payload = b"an object never uploaded";
    let begun = server.post(
        "/v1/datasets/ops/operations",
        json!({
            "operation_id": "gone-1",
            "kind": "commit",
            "node": "lost-writer",
            "lease_ms": 1_000,
            "splits": [{
                "split_id": "gone-1.s0",
                "metadata_json": "{}",
                "size": payload.len(),
                "sha256": mend::objects::format::sha256(payload),
            }],
        }),
    );
    assert!(matches!(begun.status, 200 | 201), "{}", begun.body);
    let needed = [
        "mend_dataset_up{dataset=\"ops\"} 1",
        "mend_intents_needing_operator{dataset=\"ops\"} 0",
        "mend_pending_intents{dataset=\"ops\"}",
        "mend_decisions_total{kind=\"stage\",outcome=\"inserted\"}",
        "mend_sweep_duration_seconds_count 1",
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let answer = server.get("/metrics");
        assert_eq!(answer.status, 200);
        let text = answer.body.as_str().unwrap_or_default().to_string();
        if needed.iter().all(|line| text.contains(line)) {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the series {needed:?} did not all appear within 60 s:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let exported = exported(&text);
    // A server without TLS has no certificate to count down: that family is read from a TLS
    // server's /metrics in attacks_tls.rs.
    const ONLY_WITH_TLS: [&str; 1] = ["mend_tls_certificate_expiry_seconds"];
    let missing: Vec<&String> = from_rules
        .union(&from_dashboard)
        .filter(|name| !exported.contains(*name) && !ONLY_WITH_TLS.contains(&name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "named in ops/ but not exported: {missing:?}\nexported: {exported:?}"
    );
    println!(
        "ops: {} metrics named by the rules, {} by the dashboard's {} panels; all {} exported",
        from_rules.len(),
        from_dashboard.len(),
        panels.len(),
        from_rules.union(&from_dashboard).count()
    );
}

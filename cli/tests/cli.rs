//! The real `mend` binary on the embedded default catalog (a local directory): each command's
//! happy path and its main failure, with the exit codes docs/src/operations.md documents; and where its
//! settings come from.

use crate::common;

use std::path::Path;
use std::process::Output;

use common::{json, mend, mend_command};

/// `mend` in `dir` with exactly the `MEND_*` variables given.
fn mend_with_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    mend_command(dir)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run mend")
}

/// `mend config --json` with these arguments and environment: the value and the source of
/// `key`.
fn setting(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    key: &str,
) -> (serde_json::Value, serde_json::Value) {
    let mut all = args.to_vec();
    all.extend(["config", "--json"]);
    let config = json(&mend_with_env(dir, &all, env));
    let entry = &config["settings"][key];
    (entry["value"].clone(), entry["source"].clone())
}

fn source(kind: &str, name: &str) -> serde_json::Value {
    serde_json::json!({"kind": kind, "name": name})
}

#[test]
fn status_recover_reconcile_and_policy_commands_run_on_the_embedded_default() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checked = 0;

    assert!(mend(dir, &["dataset", "create", "d1"]).status.success());
    let status = json(&mend(dir, &["status", "--json"]));
    assert_eq!(status["datasets"][0]["dataset_id"], "d1");
    assert_eq!(status["datasets"][0]["pending_intents"], 0);
    assert!(
        status["policy_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    checked += 1;

    let probe = json(&mend(dir, &["recover", "d1", "--mode", "probe", "--json"]));
    assert_eq!(probe["intents"].as_array().unwrap().len(), 0);
    let reconcile = json(&mend(dir, &["reconcile", "d1", "--json"]));
    assert_eq!(reconcile["objects_listed"], 0);
    let active = json(&mend(dir, &["policy", "active", "--json"]));
    assert_eq!(active["digest"], status["policy_digest"]);
    checked += 3;

    // The main failures: a dataset that does not exist (3), a stage without its mode (2).
    let missing = mend(dir, &["recover", "nope", "--mode", "probe"]);
    assert_eq!(missing.status.code(), Some(3), "{missing:?}");
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("nope"), "{stderr}");
    let no_mode = mend(dir, &["stage", "d1"]);
    assert_eq!(no_mode.status.code(), Some(2), "{no_mode:?}");
    checked += 2;
    println!("cli: {checked} commands checked against the real binary");
}

#[test]
fn settings_come_from_the_file_then_the_environment_then_flags() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checked = 0;

    // Nothing given: the defaults, and no file.
    let config = json(&mend(dir, &["config", "--json"]));
    assert_eq!(config["file"], serde_json::Value::Null);
    assert_eq!(config["settings"]["catalog"]["value"], "./mend-data");
    assert_eq!(config["settings"]["catalog"]["source"]["kind"], "default");
    assert_eq!(
        config["settings"]["limits.max_stage_batch"]["value"],
        mend_cli::config::DEFAULT_MAX_STAGE_BATCH
    );
    checked += 1;

    // A file named by --config, then by MEND_CONFIG.
    std::fs::write(
        dir.join("custom.toml"),
        "catalog = \"memory://from-file\"\n[limits]\nmax_stage_batch = 7\n",
    )
    .unwrap();
    let from_file = source("file", "custom.toml");
    assert_eq!(
        setting(dir, &["--config", "custom.toml"], &[], "catalog"),
        ("memory://from-file".into(), from_file.clone())
    );
    assert_eq!(
        setting(
            dir,
            &[],
            &[("MEND_CONFIG", "custom.toml")],
            "limits.max_stage_batch"
        ),
        (7.into(), from_file.clone())
    );
    checked += 2;

    // The environment over the file, a flag over the environment.
    let env = [
        ("MEND_CONFIG", "custom.toml"),
        ("MEND_CATALOG", "memory://from-env"),
    ];
    assert_eq!(
        setting(dir, &[], &env, "catalog"),
        ("memory://from-env".into(), source("env", "MEND_CATALOG"))
    );
    assert_eq!(
        setting(dir, &["--catalog", "memory://from-flag"], &env, "catalog"),
        ("memory://from-flag".into(), source("flag", "--catalog"))
    );
    checked += 2;

    // --set for a limit, over the file and the environment alike.
    let env = [
        ("MEND_CONFIG", "custom.toml"),
        ("MEND_LIMITS_MAX_STAGE_BATCH", "8"),
    ];
    assert_eq!(setting(dir, &[], &env, "limits.max_stage_batch").0, 8);
    assert_eq!(
        setting(
            dir,
            &["--set", "limits.max_stage_batch=500"],
            &env,
            "limits.max_stage_batch"
        ),
        (500.into(), source("flag", "--set limits.max_stage_batch"))
    );
    checked += 2;

    // ./mend.toml is read from the working directory when no file is named.
    std::fs::write(
        dir.join("mend.toml"),
        "[serve]\nlisten = \"0.0.0.0:9000\"\n",
    )
    .unwrap();
    assert_eq!(
        setting(dir, &[], &[], "serve.listen"),
        ("0.0.0.0:9000".into(), source("file", "./mend.toml"))
    );
    checked += 1;

    // The admin token is never printed, in JSON or in the table.
    let token = [("MEND_SERVE_ADMIN_TOKEN", "hunter2-secret")];
    assert_eq!(setting(dir, &[], &token, "serve.admin_token").0, "<set>");
    assert_eq!(setting(dir, &[], &[], "serve.admin_token").0, "<unset>");
    let table = mend_with_env(dir, &["config"], &token);
    assert!(table.status.success(), "{table:?}");
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("serve.admin_token") && table.contains("<set>"),
        "{table}"
    );
    assert!(!table.contains("hunter2-secret"), "{table}");
    checked += 3;
    println!("cli: {checked} settings checks against the real binary");
}

#[test]
fn settings_take_effect_in_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut checked = 0;
    std::fs::write(
        dir.join("mend.toml"),
        "[limits]\nmax_stage_batch = 1\n\n[grace]\nstaged_grace_period_ms = 5000\n",
    )
    .unwrap();

    // The grace default from the file, unless the command's own flag says otherwise.
    let created = json(&mend(dir, &["dataset", "create", "d1", "--json"]));
    assert_eq!(created[0]["config"]["staged_grace_period_ms"], 5000);
    assert_eq!(created[0]["config"]["deletion_grace_period_ms"], 600_000);
    let own = json(&mend(
        dir,
        &[
            "dataset",
            "create",
            "d2",
            "--staged-grace-period-ms",
            "7",
            "--json",
        ],
    ));
    assert_eq!(own[0]["config"]["staged_grace_period_ms"], 7);
    checked += 2;

    // The stage batch limit from the file: two splits are one too many, and nothing is staged.
    let splits = dir.join("splits.json");
    std::fs::write(&splits, r#"[{"split_id": "s1"}, {"split_id": "s2"}]"#).unwrap();
    let splits = splits.to_str().unwrap();
    let stage = ["stage", "d1", "--mode", "upsert", "--splits", splits];
    let refused = mend(dir, &stage);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let listed = json(&mend(dir, &["list", "d1", "--json"]));
    assert_eq!(listed["splits"].as_array().unwrap().len(), 0, "{listed}");
    checked += 1;

    // ... and a flag over the file lets the same batch through.
    let mut raised = vec!["--set", "limits.max_stage_batch=2"];
    raised.extend(stage);
    let staged = mend(dir, &raised);
    assert!(staged.status.success(), "{staged:?}");
    let listed = json(&mend(dir, &["list", "d1", "--json"]));
    assert_eq!(listed["splits"].as_array().unwrap().len(), 2, "{listed}");
    checked += 1;

    // The policy setting runs that component file instead of the deployment's active policy.
    let default_wasm =
        common::write_component(dir, "default.wasm", mend::runtime::DEFAULT_POLICY_WASM);
    let status = json(&mend(dir, &["--policy", &default_wasm, "status", "--json"]));
    assert_eq!(status["policy_file"], default_wasm.as_str());
    assert!(json(&mend(dir, &["status", "--json"]))["policy_file"].is_null());
    // A policy file that is not there fails before anything is opened.
    let empty = tempfile::tempdir().unwrap();
    let missing = mend(
        empty.path(),
        &["--policy", "nope.wasm", "dataset", "create", "d"],
    );
    assert!(!missing.status.success(), "{missing:?}");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nope.wasm"));
    assert!(!empty.path().join("mend-data").exists());
    checked += 2;
    println!("cli: {checked} settings taking effect checked against the real binary");
}

/// Settings that must be refused: a `mend.toml`, the environment and the flags, and what the
/// one-line message must name.
struct BadSettings {
    file: Option<&'static str>,
    env: &'static [(&'static str, &'static str)],
    flags: &'static [&'static str],
    named: &'static [&'static str],
}

#[test]
fn bad_settings_exit_2_naming_their_source_and_change_nothing() {
    let mut checked = 0;
    let cases = [
        BadSettings {
            file: Some("[limits]\nmax_batch = 5\n"),
            env: &[],
            flags: &[],
            named: &["limits.max_batch", "./mend.toml", "max_stage_batch"],
        },
        BadSettings {
            file: None,
            env: &[("MEND_LIMITS_MAX_STAGE_BATCH", "lots")],
            flags: &[],
            named: &[
                "MEND_LIMITS_MAX_STAGE_BATCH",
                "limits.max_stage_batch",
                "lots",
            ],
        },
        BadSettings {
            file: None,
            env: &[],
            flags: &["--config", "missing.toml"],
            named: &["missing.toml", "--config", "does not exist"],
        },
        BadSettings {
            file: None,
            env: &[("MEND_CONFIG", "missing.toml")],
            flags: &[],
            named: &["missing.toml", "MEND_CONFIG"],
        },
        BadSettings {
            file: Some("catalog = \"./x\"\n[limits\n"),
            env: &[],
            flags: &[],
            named: &["./mend.toml", "not valid TOML", "line 2"],
        },
        BadSettings {
            file: Some("[limits]\nmax_stage_batch = \"many\"\n"),
            env: &[],
            flags: &[],
            named: &["limits.max_stage_batch", "./mend.toml", "whole number"],
        },
        BadSettings {
            file: None,
            env: &[],
            flags: &["--set", "limits.max_stage_batch=0"],
            named: &["--set limits.max_stage_batch", "at least 1"],
        },
        BadSettings {
            file: None,
            env: &[],
            flags: &["--set", "nope=1"],
            named: &["nope", "--set"],
        },
    ];
    for BadSettings {
        file,
        env,
        flags,
        named,
    } in cases
    {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        if let Some(text) = file {
            std::fs::write(dir.join("mend.toml"), text).unwrap();
        }
        let mut args = flags.to_vec();
        args.extend(["dataset", "create", "d1"]);
        let output = mend_with_env(dir, &args, env);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|line| line.starts_with("error:"))
            .collect();
        assert_eq!(errors.len(), 1, "one error line: {stderr}");
        for name in named {
            assert!(errors[0].contains(name), "{name:?} not in {stderr}");
        }
        assert!(
            !dir.join("mend-data").exists(),
            "bad settings must create nothing: {stderr}"
        );
        // `mend config` itself refuses them the same way.
        let mut config = flags.to_vec();
        config.push("config");
        assert_eq!(mend_with_env(dir, &config, env).status.code(), Some(2));
        checked += 1;
    }
    println!("cli: {checked} bad settings refused by the real binary");
}

/// `mend completions SHELL` and `mend man` come from the command line's own definition: every
/// command is in each of them, and they need no catalog or setting (a broken settings file is
/// not read).
#[test]
fn completions_and_the_man_page_name_every_command() {
    use clap::CommandFactory;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mend.toml"), "not = [valid toml").unwrap();
    let commands: Vec<String> = mend_cli::Args::command()
        .get_subcommands()
        .map(|command| command.get_name().to_owned())
        .collect();
    assert!(commands.len() > 20 && commands.contains(&"request".to_owned()));
    let mut checked = 0;
    for shell in ["bash", "zsh", "fish"] {
        let output = mend(dir.path(), &["completions", shell]);
        assert!(output.status.success(), "{shell}: {output:?}");
        let script = String::from_utf8(output.stdout).unwrap();
        for command in &commands {
            assert!(script.contains(command.as_str()), "{shell}: no {command}");
            checked += 1;
        }
    }
    let output = mend(dir.path(), &["man"]);
    assert!(output.status.success(), "{output:?}");
    let page = String::from_utf8(output.stdout).unwrap();
    assert!(page.contains(".TH mend 1"), "{page}");
    for command in &commands {
        assert!(page.contains(command.as_str()), "man: no {command}");
        checked += 1;
    }
    let refused = mend(dir.path(), &["completions", "tcsh"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(!dir.path().join("mend-data").exists(), "no catalog opened");
    println!(
        "cli: {} commands in bash, zsh and fish completions and the man page ({checked} checks)",
        commands.len()
    );
}

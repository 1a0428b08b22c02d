use super::*;

fn inputs(dir: &Path) -> Inputs {
    Inputs {
        config_file: None,
        default_file: dir.join("mend.toml"),
        env: BTreeMap::new(),
        flags: Vec::new(),
    }
}

fn with_env(mut inputs: Inputs, vars: &[(&str, &str)]) -> Inputs {
    for (name, value) in vars {
        inputs.env.insert((*name).into(), (*value).into());
    }
    inputs
}

fn flag(mut inputs: Inputs, flag: &str, value: &str) -> Inputs {
    inputs.flags.push((flag.into(), value.into()));
    inputs
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn with_nothing_given_every_setting_is_its_default() {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings::resolve(&inputs(dir.path())).unwrap();
    assert!(
        settings
            .entries()
            .all(|(_, _, source)| *source == Source::Default)
    );
    assert_eq!(settings.catalog, "./mend-data");
    assert_eq!(settings.file, None);
    assert_eq!(
        settings.engine_options().max_stage_batch,
        DEFAULT_MAX_STAGE_BATCH
    );
    assert_eq!(settings.engine_options().intent_lease_ms, 60_000);
    assert_eq!(
        settings.engine_options().gate_timeout,
        Duration::from_secs(30)
    );
    let limits = settings.load_options().limits;
    assert_eq!(
        limits.max_memory_bytes,
        PolicyLimits::default().max_memory_bytes
    );
    assert_eq!(limits.cpu_time_per_call, Duration::from_secs(1));
    assert_eq!(settings.dataset_config_defaults(), DatasetConfig::default());
    assert_eq!(settings.listen.to_string(), "127.0.0.1:7600");
    assert_eq!(settings.admin_token, None);
    assert_eq!(settings.cache_dir, None, "no HOME, no XDG_CACHE_HOME");
}

#[test]
fn default_inputs_give_the_built_in_defaults() {
    let settings = Settings::resolve(&Inputs::default()).unwrap();
    assert_eq!(settings.file, None);
    assert_eq!(settings.listen, DEFAULT_LISTEN);
    assert_eq!(settings.supervisor_interval, Duration::from_secs(1));
    assert_eq!(settings.supervisor_max_backoff, Duration::from_secs(60));
}

#[test]
fn the_cache_directory_defaults_to_xdg_then_home() {
    let dir = tempfile::tempdir().unwrap();
    let home = with_env(inputs(dir.path()), &[("HOME", "/home/u")]);
    assert_eq!(
        Settings::resolve(&home).unwrap().cache_dir,
        Some(PathBuf::from("/home/u/.cache/mend/components"))
    );
    let xdg = with_env(home, &[("XDG_CACHE_HOME", "/xdg")]);
    assert_eq!(
        Settings::resolve(&xdg).unwrap().cache_dir,
        Some(PathBuf::from("/xdg/mend/components"))
    );
    let explicit = with_env(xdg, &[("MEND_CACHE_DIR", "/c")]);
    let settings = Settings::resolve(&explicit).unwrap();
    assert_eq!(settings.cache_dir, Some(PathBuf::from("/c")));
    assert_eq!(settings.load_options().cache_dir, Some(PathBuf::from("/c")));
}

#[test]
fn flags_override_the_environment_which_overrides_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "custom.toml",
        "catalog = \"memory://file\"\npolicy = \"p.wasm\"\n\n[limits]\nmax_stage_batch = 7\ngate_timeout_ms = 5\n\n[grace]\nstaged_grace_period_ms = 11\n\n[serve]\nlisten = \"0.0.0.0:9000\"\nadmin_token = \"hunter2\"\n",
    );
    let mut from_file = inputs(dir.path());
    from_file.config_file = Some(file.clone());
    let settings = Settings::resolve(&from_file).unwrap();
    assert_eq!(settings.catalog, "memory://file");
    assert_eq!(
        settings.source("catalog"),
        Some(&Source::File(file.clone()))
    );
    assert_eq!(settings.policy, Some(PathBuf::from("p.wasm")));
    assert_eq!(settings.engine_options().max_stage_batch, 7);
    assert_eq!(settings.gate_timeout, Duration::from_millis(5));
    assert_eq!(
        settings.dataset_config_defaults().staged_grace_period_ms,
        11
    );
    assert_eq!(
        settings.dataset_config_defaults().deletion_grace_period_ms,
        DatasetConfig::default().deletion_grace_period_ms
    );
    assert_eq!(settings.listen.port(), 9000);
    assert_eq!(settings.admin_token.as_deref(), Some("hunter2"));
    assert_eq!(settings.source("objects"), Some(&Source::Default));
    assert_eq!(settings.file, Some(file));

    let from_env = with_env(
        from_file,
        &[
            ("MEND_CATALOG", "memory://env"),
            ("MEND_LIMITS_MAX_STAGE_BATCH", "8"),
        ],
    );
    let settings = Settings::resolve(&from_env).unwrap();
    assert_eq!(settings.catalog, "memory://env");
    assert_eq!(
        settings.source("catalog"),
        Some(&Source::Env("MEND_CATALOG"))
    );
    assert_eq!(settings.max_stage_batch.get(), 8);

    let from_flags = flag(
        flag(from_env, "--set", "limits.max_stage_batch=9"),
        "--catalog",
        "memory://flag",
    );
    let settings = Settings::resolve(&from_flags).unwrap();
    assert_eq!(settings.catalog, "memory://flag");
    assert_eq!(
        settings.source("catalog"),
        Some(&Source::Flag("--catalog".into()))
    );
    assert_eq!(settings.max_stage_batch.get(), 9);
    assert_eq!(
        settings.source("limits.max_stage_batch"),
        Some(&Source::Flag("--set limits.max_stage_batch".into()))
    );
    // Untouched by env and flags, still from the file.
    assert_eq!(settings.gate_timeout, Duration::from_millis(5));
}

#[test]
fn the_file_is_named_by_flag_then_env_else_the_default_file_if_it_exists() {
    let dir = tempfile::tempdir().unwrap();
    let default = write(dir.path(), "mend.toml", "catalog = \"memory://default\"\n");
    let by_env = write(dir.path(), "env.toml", "catalog = \"memory://env\"\n");
    let by_flag = write(dir.path(), "flag.toml", "catalog = \"memory://flag\"\n");

    let mut named = inputs(dir.path());
    assert_eq!(Settings::resolve(&named).unwrap().file, Some(default));
    named = with_env(named, &[("MEND_CONFIG", by_env.to_str().unwrap())]);
    assert_eq!(Settings::resolve(&named).unwrap().catalog, "memory://env");
    named.config_file = Some(by_flag);
    assert_eq!(Settings::resolve(&named).unwrap().catalog, "memory://flag");

    let mut missing = inputs(dir.path());
    missing.config_file = Some(dir.path().join("nope.toml"));
    let error = Settings::resolve(&missing).unwrap_err();
    assert!(matches!(error, ConfigError::MissingFile { .. }), "{error}");
    assert!(error.to_string().contains("flag --config"), "{error}");
    let missing = with_env(inputs(dir.path()), &[("MEND_CONFIG", "/nope/mend.toml")]);
    let error = Settings::resolve(&missing).unwrap_err();
    assert!(error.to_string().contains("MEND_CONFIG"), "{error}");

    // No file named and none at the default place: defaults only.
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(Settings::resolve(&inputs(empty.path())).unwrap().file, None);
}

#[test]
fn an_unknown_key_is_refused_with_the_keys_of_its_section() {
    let dir = tempfile::tempdir().unwrap();
    for (text, key, suggests) in [
        (
            "[limits]\nmax_batch = 5\n",
            "limits.max_batch",
            "max_stage_batch",
        ),
        ("catalogue = \"x\"\n", "catalogue", "[limits]"),
        ("[limitz]\nmax_stage_batch = 5\n", "limitz", "catalog"),
    ] {
        let mut given = inputs(dir.path());
        given.config_file = Some(write(dir.path(), "bad.toml", text));
        let error = Settings::resolve(&given).unwrap_err();
        assert!(
            matches!(&error, ConfigError::UnknownKey { key: found, .. } if found == key),
            "{error}"
        );
        let message = error.to_string();
        assert!(
            message.contains("bad.toml") && message.contains(suggests),
            "{message}"
        );
    }
    let unknown = flag(inputs(dir.path()), "--set", "limits.nope=1");
    let message = Settings::resolve(&unknown).unwrap_err().to_string();
    assert!(message.contains("limits.max_stage_batch"), "{message}");
    let malformed = flag(inputs(dir.path()), "--set", "limits.max_stage_batch");
    assert!(matches!(
        Settings::resolve(&malformed).unwrap_err(),
        ConfigError::MalformedAssignment { .. }
    ));
}

#[test]
fn a_bad_value_is_refused_naming_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = inputs(dir.path());
    file.config_file = Some(write(
        dir.path(),
        "bad.toml",
        "[limits]\nmax_stage_batch = \"many\"\n",
    ));
    let message = Settings::resolve(&file).unwrap_err().to_string();
    assert!(
        message.contains("limits.max_stage_batch")
            && message.contains("bad.toml")
            && message.contains("found a TOML string"),
        "{message}"
    );

    for (name, value, reason) in [
        ("MEND_LIMITS_MAX_STAGE_BATCH", "lots", "not a whole number"),
        ("MEND_LIMITS_MAX_STAGE_BATCH", "0", "at least 1"),
        ("MEND_SERVE_LISTEN", "localhost", "address and port"),
        ("MEND_CATALOG", "http://x", "http:// is not supported"),
        (
            "MEND_OBJECTS",
            "postgres://x",
            "postgres:// is not supported",
        ),
    ] {
        let given = with_env(inputs(dir.path()), &[(name, value)]);
        let message = Settings::resolve(&given).unwrap_err().to_string();
        assert!(
            message.contains(&format!("environment variable {name}")) && message.contains(reason),
            "{message}"
        );
    }

    let given = flag(
        inputs(dir.path()),
        "--set",
        "grace.staged_grace_period_ms=-1",
    );
    let message = Settings::resolve(&given).unwrap_err().to_string();
    assert!(
        message.contains("flag --set grace.staged_grace_period_ms"),
        "{message}"
    );

    let mut section = inputs(dir.path());
    section.config_file = Some(write(dir.path(), "section.toml", "limits = 5\n"));
    let message = Settings::resolve(&section).unwrap_err().to_string();
    assert!(message.contains("expected a table [limits]"), "{message}");
}

#[test]
fn a_server_limit_out_of_its_range_is_refused_naming_the_setting_and_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let mut refused = 0;
    for (assignment, range) in [
        ("serve.max_connections=0", "1..=100000"),
        ("serve.max_connections=100001", "1..=100000"),
        ("serve.header_read_timeout_ms=99", "100..=600000"),
        ("serve.body_read_timeout_ms=3600001", "100..=3600000"),
        ("serve.idle_timeout_ms=0", "100..=3600000"),
        ("serve.shutdown_deadline_ms=3600001", "0..=3600000"),
        ("serve.max_queued_writes=0", "1..=100000"),
        ("serve.max_queued_writes_per_dataset=0", "1..=100000"),
        ("serve.max_admin_component_bytes=1023", "1024..=1073741824"),
    ] {
        let key = assignment.split_once('=').unwrap().0;
        let given = flag(inputs(dir.path()), "--set", assignment);
        let message = Settings::resolve(&given).unwrap_err().to_string();
        assert!(
            message.contains(&format!("`{key}`")) && message.contains(range),
            "{assignment}: {message}"
        );
        refused += 1;
    }
    let given = flag(inputs(dir.path()), "--set", "serve.shutdown_deadline_ms=0");
    assert_eq!(
        Settings::resolve(&given).unwrap().shutdown_deadline,
        Duration::ZERO
    );
    println!("config: {refused} out-of-range server limits refused");
}

#[test]
fn invalid_toml_is_refused_with_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let mut given = inputs(dir.path());
    given.config_file = Some(write(
        dir.path(),
        "broken.toml",
        "catalog = \"./x\"\n[limits\nmax_stage_batch = 1\n",
    ));
    let error = Settings::resolve(&given).unwrap_err();
    let ConfigError::InvalidToml { line, message, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(*line, 2, "{error}");
    assert!(!message.contains('\n'));
    assert!(error.to_string().contains("broken.toml"), "{error}");
}

#[test]
fn the_admin_token_is_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let unset = Settings::resolve(&inputs(dir.path())).unwrap();
    let given = with_env(inputs(dir.path()), &[("MEND_SERVE_ADMIN_TOKEN", "hunter2")]);
    let set = Settings::resolve(&given).unwrap();
    assert_eq!(set.admin_token.as_deref(), Some("hunter2"));
    let shown = |settings: &Settings| {
        settings
            .entries()
            .find(|(setting, _, _)| setting.key == "serve.admin_token")
            .map(|(_, value, _)| value)
            .unwrap()
    };
    assert_eq!(shown(&unset), Shown::Text("<unset>".into()));
    assert_eq!(shown(&set), Shown::Text("<set>".into()));
    assert!(!format!("{set:?}").contains("hunter2"));
}

#[test]
fn the_log_level_and_format_come_from_the_settings_and_rust_log_wins() {
    let dir = tempfile::tempdir().unwrap();
    let defaults = Settings::resolve(&inputs(dir.path())).unwrap();
    assert_eq!(defaults.log_level.directives(), "info");
    assert_eq!(defaults.log_format, LogFormat::Human);

    let file = write(
        dir.path(),
        "mend.toml",
        "[log]\nlevel = \"warn,mend=debug\"\nformat = \"json\"\n",
    );
    let mut given = inputs(dir.path());
    given.config_file = Some(file);
    let settings = Settings::resolve(&given).unwrap();
    assert_eq!(settings.log_level.directives(), "warn,mend=debug");
    assert_eq!(settings.log_format, LogFormat::Json);

    let flagged = flag(given.clone(), "--set", "log.level=error");
    let settings = Settings::resolve(&flagged).unwrap();
    assert_eq!(settings.log_level.directives(), "error");
    assert_eq!(
        settings.source("log.level"),
        Some(&Source::Flag("--set log.level".into()))
    );

    // RUST_LOG wins over every other source, the flag included, and is read as any
    // tracing program reads it: a bare target is a directive.
    let overridden = with_env(flagged, &[("RUST_LOG", "mend_server")]);
    let settings = Settings::resolve(&overridden).unwrap();
    assert_eq!(settings.log_level.directives(), "mend_server");
    assert_eq!(settings.source("log.level"), Some(&Source::Env("RUST_LOG")));
    assert_eq!(settings.log_format, LogFormat::Json);
    // An empty RUST_LOG is unset, as every variable is.
    let empty = with_env(given, &[("RUST_LOG", "")]);
    let settings = Settings::resolve(&empty).unwrap();
    assert_eq!(settings.log_level.directives(), "warn,mend=debug");
}

#[test]
fn a_bad_log_setting_is_refused_naming_its_key() {
    let dir = tempfile::tempdir().unwrap();
    for (name, value, reason) in [
        ("MEND_LOG_LEVEL", "verbose", "is not a level"),
        ("MEND_LOG_LEVEL", "info,mend=loud", "is not a level"),
        ("MEND_LOG_LEVEL", "=debug", "is not a level"),
        ("MEND_LOG_LEVEL", " ", "must not be empty"),
        ("MEND_LOG_FORMAT", "xml", "is not human or json"),
        ("RUST_LOG", "mend=loud", "is not a log filter"),
    ] {
        let given = with_env(inputs(dir.path()), &[(name, value)]);
        let message = Settings::resolve(&given).unwrap_err().to_string();
        let key = if name == "MEND_LOG_FORMAT" {
            "`log.format`"
        } else {
            "`log.level`"
        };
        assert!(
            message.contains(key)
                && message.contains(&format!("environment variable {name}"))
                && message.contains(reason),
            "{name}={value:?}: {message}"
        );
    }
    for text in [
        "info",
        "DEBUG",
        "off",
        "info,mend=debug",
        "mend[request]=debug",
    ] {
        assert!(LogLevel::parse(text).is_ok(), "{text}");
    }
}

#[test]
fn the_table_is_consistent() {
    let mut keys = std::collections::BTreeSet::new();
    for setting in SETTINGS {
        assert!(keys.insert(setting.key), "{} twice", setting.key);
        assert_eq!(
            setting.env,
            format!("MEND_{}", setting.key.to_uppercase().replace('.', "_")),
            "the env var of {} follows the rule",
            setting.key
        );
        assert!(!setting.doc.contains('|') && !setting.default_text().contains('|'));
        assert!(setting.key.matches('.').count() <= 1);
    }
    assert_eq!(
        sections().collect::<Vec<_>>(),
        ["postgres", "limits", "grace", "serve", "log"]
    );
}

/// docs/src/configuration.md's configuration table, as this table says it must read.
fn markdown_table() -> String {
    let mut lines = vec![
        "| key | environment | flag | default | range | meaning |".to_owned(),
        "|---|---|---|---|---|---|".to_owned(),
    ];
    for setting in SETTINGS {
        let default = match setting.default_doc {
            Some(words) => words.to_owned(),
            None => format!("`{}`", setting.default_text()),
        };
        let flag = match setting.flag {
            Some(flag) => format!("`{flag}`"),
            None => format!("`{SET_FLAG}`"),
        };
        lines.push(format!(
            "| `{}` | `{}` | {flag} | {default} | {} | {} |",
            setting.key,
            setting.env,
            setting.range_text(),
            setting.doc
        ));
    }
    lines.join("\n")
}

#[test]
fn the_default_json_body_cap_holds_the_largest_request_of_the_default_limits() {
    let settings = Settings::built_in(&BTreeMap::new());
    let needed =
        mend_server::largest_json_body(settings.max_stage_batch.get(), settings.max_metadata_bytes);
    assert!(
        needed <= settings.max_json_body_bytes,
        "{needed} > {}",
        settings.max_json_body_bytes
    );
    // Not by a wide margin either: the cap is sized for the limits.
    assert!(needed * 4 > settings.max_json_body_bytes * 3, "{needed}");
    let serve = ServeLimits::default();
    assert!(
        serve
            .check_json_body(DEFAULT_MAX_STAGE_BATCH, DEFAULT_MAX_METADATA_BYTES)
            .is_ok()
    );
    assert!(
        serve
            .check_json_body(DEFAULT_MAX_STAGE_BATCH * 10, DEFAULT_MAX_METADATA_BYTES)
            .is_err()
    );
}

#[test]
fn the_readme_lists_every_fixed_limit() {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/src/configuration.md"
    ))
    .unwrap();
    for bound in bounds::FIXED {
        let row = format!("| `{}` | `{bound}` |", bound.name);
        assert!(
            readme.contains(&row),
            "docs/src/configuration.md's table of fixed limits has no row {row}"
        );
    }
}

#[test]
fn the_readme_documents_every_setting_as_the_table_says() {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/src/configuration.md"
    ))
    .unwrap();
    let section = readme
        .split_once("\n## Configuration\n")
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or(rest))
        .expect("docs/src/configuration.md has a Configuration section");
    let expected = markdown_table();
    assert!(
        section.contains(&expected),
        "docs/src/configuration.md's configuration table has drifted from config::SETTINGS; it must read:\n\n{expected}\n"
    );
}

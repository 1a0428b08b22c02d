//! Where settings come from besides the defaults: the settings file (`--config`,
//! `MEND_CONFIG`, `./mend.toml`), the environment and the flags, each applied over the one
//! before.

use super::*;

impl Settings {
    pub(super) fn assign(
        &mut self,
        setting: &'static Setting,
        raw: Raw<'_>,
        from: Source,
    ) -> Result<(), ConfigError> {
        let invalid = |reason: String| ConfigError::InvalidValue {
            key: setting.key.to_owned(),
            from: from.clone(),
            reason: match setting.range {
                Some(range) => format!("{reason}; its range is {range}"),
                None => reason,
            },
        };
        (setting.field.assign)(self, raw).map_err(invalid)?;
        if let (Some(range), Shown::Number(number)) = (setting.range, setting.value(self)) {
            range
                .within(number)
                .map_err(|problem| invalid(format!("{} is out of range", problem.value)))?;
        }
        let index = SETTINGS
            .iter()
            .position(|candidate| std::ptr::eq(candidate, setting))
            .expect("every setting assigned comes from SETTINGS");
        self.sources[index] = from;
        Ok(())
    }

    /// The file's top level holds the settings without a dot in their key, and one table per
    /// section (`[limits]`) holding that section's settings.
    pub(super) fn apply_file(
        &mut self,
        table: &toml::Table,
        path: &Path,
    ) -> Result<(), ConfigError> {
        let from = Source::File(path.to_owned());
        for (name, value) in table {
            if sections().any(|section| section == name) {
                let toml::Value::Table(fields) = value else {
                    return Err(ConfigError::InvalidValue {
                        key: name.clone(),
                        from,
                        reason: format!(
                            "expected a table [{name}] of settings, found a TOML {}",
                            value.type_str()
                        ),
                    });
                };
                for (field, value) in fields {
                    let key = format!("{name}.{field}");
                    let setting = lookup(&key).ok_or_else(|| ConfigError::UnknownKey {
                        key: key.clone(),
                        from: from.clone(),
                        known: known_keys(Some(name), false),
                    })?;
                    self.assign(setting, Raw::Toml(value), from.clone())?;
                }
            } else {
                let setting = lookup(name)
                    .filter(|setting| !setting.key.contains('.'))
                    .ok_or_else(|| ConfigError::UnknownKey {
                        key: name.clone(),
                        from: from.clone(),
                        known: known_keys(None, false),
                    })?;
                self.assign(setting, Raw::Toml(value), from.clone())?;
            }
        }
        Ok(())
    }

    pub(super) fn apply_flag(&mut self, flag: &str, value: &str) -> Result<(), ConfigError> {
        if flag == SET_FLAG {
            let (key, value) =
                value
                    .split_once('=')
                    .ok_or_else(|| ConfigError::MalformedAssignment {
                        flag: flag.to_owned(),
                        text: value.to_owned(),
                    })?;
            let key = key.trim();
            let setting = lookup(key).ok_or_else(|| ConfigError::UnknownKey {
                key: key.to_owned(),
                from: Source::Flag(flag.to_owned()),
                known: known_keys(key.split_once('.').map(|(section, _)| section), true),
            })?;
            return self.assign(
                setting,
                Raw::Text(value),
                Source::Flag(format!("{flag} {key}")),
            );
        }
        let setting = SETTINGS
            .iter()
            .find(|setting| setting.flag == Some(flag))
            .ok_or_else(|| ConfigError::UnknownKey {
                key: flag.to_owned(),
                from: Source::Flag(flag.to_owned()),
                known: "flags that set a setting: ".to_owned() + &own_flags().join(", "),
            })?;
        self.assign(setting, Raw::Text(value), Source::Flag(flag.to_owned()))
    }

    /// `RUST_LOG` as `log.level`, over any other source. It is read as every `tracing`
    /// program reads it (a bare target such as `mend` is accepted: it means `mend=trace`),
    /// since a shell may set it for other programs too; only what `EnvFilter` itself
    /// refuses is refused.
    pub(super) fn apply_rust_log(&mut self, value: &str) -> Result<(), ConfigError> {
        let from = Source::Env(RUST_LOG_ENV);
        check_env_filter(value).map_err(|reason| ConfigError::InvalidValue {
            key: "log.level".to_owned(),
            from: from.clone(),
            reason,
        })?;
        self.log_level = LogLevel(value.trim().to_owned());
        let index = SETTINGS
            .iter()
            .position(|setting| setting.key == "log.level")
            .expect("log.level is a setting");
        self.sources[index] = from;
        Ok(())
    }
}

/// The file `--config` or `MEND_CONFIG` names (which must exist), else the default file if it
/// exists, else none.
pub(super) fn settings_file(inputs: &Inputs) -> Result<Option<PathBuf>, ConfigError> {
    let named = match &inputs.config_file {
        Some(path) => Some((path.clone(), Source::Flag(CONFIG_FLAG.to_owned()))),
        None => env_text(&inputs.env, CONFIG_ENV)?
            .map(|path| (PathBuf::from(path), Source::Env(CONFIG_ENV))),
    };
    match named {
        Some((path, _)) if path.exists() => Ok(Some(path)),
        Some((path, named_by)) => Err(ConfigError::MissingFile { path, named_by }),
        None => Ok(inputs
            .default_file
            .exists()
            .then(|| inputs.default_file.clone())),
    }
}

pub(super) fn read_file(path: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::UnreadableFile {
        path: path.to_owned(),
        error,
    })?;
    parse_file(path, &text)
}

/// The settings file `text` as TOML; `path` names it in errors.
pub(super) fn parse_file(path: &Path, text: &str) -> Result<toml::Table, ConfigError> {
    toml::from_str(text).map_err(|error| {
        let offset = error.span().map_or(0, |span| span.start).min(text.len());
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let column = before
            .rsplit_once('\n')
            .map_or(before, |(_, last)| last)
            .chars()
            .count()
            + 1;
        ConfigError::InvalidToml {
            path: path.to_owned(),
            line,
            column,
            // One line: the parser's message may run over several.
            message: error
                .message()
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .collect::<Vec<_>>()
                .join("; "),
        }
    })
}

/// An environment variable's text; unset and empty are the same, so `MEND_X=` clears nothing
/// but also sets nothing.
pub(super) fn env_text<'a>(
    env: &'a BTreeMap<String, OsString>,
    name: &'static str,
) -> Result<Option<&'a str>, ConfigError> {
    match env.get(name).filter(|value| !value.is_empty()) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(Some)
            .ok_or_else(|| ConfigError::InvalidValue {
                key: lookup_by_env(name).unwrap_or(name).to_owned(),
                from: Source::Env(name),
                reason: "is not valid UTF-8".into(),
            }),
    }
}

pub(super) fn lookup_by_env(name: &str) -> Option<&'static str> {
    SETTINGS
        .iter()
        .find(|setting| setting.env == name)
        .map(|setting| setting.key)
}

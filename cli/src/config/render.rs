//! How a setting and where it came from are shown: by `mend config` ([`print`]), in errors,
//! and in the generated documentation table.

use super::*;

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("the default"),
            Source::File(path) => write!(f, "config file {}", path.display()),
            Source::Env(name) => write!(f, "environment variable {name}"),
            Source::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

impl Setting {
    /// Its range as docs/src/configuration.md shows it.
    pub fn range_text(&self) -> String {
        self.range
            .map_or_else(String::new, |range| format!("`{range}`"))
    }

    /// Its value in `settings` as shown to people and programs: a secret only as set or unset.
    pub fn value(&self, settings: &Settings) -> Shown {
        let shown = (self.field.show)(settings);
        if !self.secret {
            return shown;
        }
        Shown::Text(match shown {
            Shown::Unset => "<unset>".into(),
            _ => "<set>".into(),
        })
    }

    /// Its default, in words where it is not one fixed value.
    pub fn default_text(&self) -> String {
        match self.default_doc {
            Some(words) => words.to_owned(),
            None => self
                .value(&Settings::built_in(&BTreeMap::new()))
                .to_string(),
        }
    }

    /// The flag that sets it: its own, or `--set KEY=VALUE`.
    pub fn flag_text(&self) -> String {
        match self.flag {
            Some(flag) => flag.to_owned(),
            None => format!("{SET_FLAG} {}=VALUE", self.key),
        }
    }
}

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shown::Text(text) => f.write_str(text),
            Shown::Number(number) => write!(f, "{number}"),
            Shown::Unset => f.write_str("-"),
        }
    }
}

/// `mend config`: every setting, its value (the admin token only as set or unset) and where
/// it came from.
pub fn print(settings: &Settings, json: bool) -> anyhow::Result<()> {
    if json {
        #[derive(Serialize)]
        struct Entry<'a> {
            value: Shown,
            source: &'a Source,
            env: &'static str,
            flag: String,
            doc: &'static str,
        }
        let entries: serde_json::Map<String, serde_json::Value> = settings
            .entries()
            .map(|(setting, value, source)| {
                let entry = Entry {
                    value,
                    source,
                    env: setting.env,
                    flag: setting.flag_text(),
                    doc: setting.doc,
                };
                Ok((setting.key.to_owned(), serde_json::to_value(entry)?))
            })
            .collect::<anyhow::Result<_>>()?;
        return crate::output::print_json(&serde_json::json!({
            "file": settings.file,
            "settings": entries,
        }));
    }
    match &settings.file {
        Some(file) => println!("config file: {}", file.display()),
        None => println!(
            "config file: none (no --config, no MEND_CONFIG, no {})",
            DEFAULT_FILE
        ),
    }
    let mut table = crate::output::table(&["setting", "value", "source"]);
    for (setting, value, source) in settings.entries() {
        let source = match source {
            Source::Default => "default".to_owned(),
            other => other.to_string(),
        };
        table.add_row(vec![setting.key.to_owned(), value.to_string(), source]);
    }
    println!("{table}");
    Ok(())
}

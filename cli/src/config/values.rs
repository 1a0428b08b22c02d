//! Each kind of setting's value: read from a file's TOML or from text (the environment, a
//! flag), checked, and shown.

use super::*;

/// A value as it arrives: text from the environment or a flag, or a typed TOML value.
#[derive(Debug, Clone, Copy)]
pub(super) enum Raw<'a> {
    Text(&'a str),
    Toml(&'a toml::Value),
}

impl Raw<'_> {
    pub(super) fn read<T: SettingValue>(self) -> Result<T, String> {
        match self {
            Raw::Text(text) => T::parse(text),
            Raw::Toml(value) => T::from_toml(value),
        }
    }
}

/// A type a setting can hold: how it is read from text and from TOML, and how it is shown.
pub(super) trait SettingValue: Sized {
    /// What a value must look like, for the message that says it did not.
    const EXPECTED: &'static str;

    fn parse(text: &str) -> Result<Self, String>;

    /// In the file a value must have the right TOML type: text settings take strings.
    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::String(text) => Self::parse(text),
            other => Err(wrong_type(Self::EXPECTED, other)),
        }
    }

    fn show(&self) -> Shown;
}

impl SettingValue for String {
    const EXPECTED: &'static str = "a string";

    fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("must not be empty".into());
        }
        Ok(text.to_owned())
    }

    fn show(&self) -> Shown {
        Shown::Text(self.clone())
    }
}

impl SettingValue for Option<String> {
    const EXPECTED: &'static str = "a string";

    fn parse(text: &str) -> Result<Self, String> {
        String::parse(text).map(Some)
    }

    fn show(&self) -> Shown {
        self.as_ref().map_or(Shown::Unset, String::show)
    }
}

impl SettingValue for Option<PathBuf> {
    const EXPECTED: &'static str = "a path";

    fn parse(text: &str) -> Result<Self, String> {
        String::parse(text).map(|text| Some(PathBuf::from(text)))
    }

    fn show(&self) -> Shown {
        self.as_ref()
            .map_or(Shown::Unset, |path| Shown::Text(path.display().to_string()))
    }
}

impl SettingValue for bool {
    const EXPECTED: &'static str = "true or false";

    fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(format!(
                "{:?} is not true or false",
                mend::validate::truncated(other, mend::validate::QUOTED_CHARS)
            )),
        }
    }

    /// Booleans are TOML booleans in the file, not strings.
    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::Boolean(flag) => Ok(*flag),
            other => Err(wrong_type(Self::EXPECTED, other)),
        }
    }

    fn show(&self) -> Shown {
        Shown::Text(self.to_string())
    }
}

impl SettingValue for u64 {
    const EXPECTED: &'static str = "a whole number";

    fn parse(text: &str) -> Result<Self, String> {
        let digits = text.trim();
        digits.parse().map_err(|_| {
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                format!("{digits} is too large")
            } else {
                format!(
                    "{:?} is not a whole number",
                    mend::validate::truncated(text, mend::validate::QUOTED_CHARS)
                )
            }
        })
    }

    /// Numbers are TOML integers in the file, not strings.
    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::Integer(number) => u64::try_from(*number)
                .map_err(|_| format!("expected a whole number, found {number}")),
            other => Err(wrong_type(Self::EXPECTED, other)),
        }
    }

    fn show(&self) -> Shown {
        Shown::Number(*self)
    }
}

impl SettingValue for usize {
    const EXPECTED: &'static str = u64::EXPECTED;

    fn parse(text: &str) -> Result<Self, String> {
        usize::try_from(u64::parse(text)?).map_err(|_| format!("{text} is too large"))
    }

    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        let number = u64::from_toml(value)?;
        usize::try_from(number).map_err(|_| format!("{number} is too large"))
    }

    fn show(&self) -> Shown {
        Shown::Number(u64::try_from(*self).unwrap_or(u64::MAX))
    }
}

impl SettingValue for u32 {
    const EXPECTED: &'static str = u64::EXPECTED;

    fn parse(text: &str) -> Result<Self, String> {
        u32::try_from(u64::parse(text)?).map_err(|_| format!("{text} is too large"))
    }

    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        let number = u64::from_toml(value)?;
        u32::try_from(number).map_err(|_| format!("{number} is too large"))
    }

    fn show(&self) -> Shown {
        Shown::Number(u64::from(*self))
    }
}

impl SettingValue for NonZeroUsize {
    const EXPECTED: &'static str = u64::EXPECTED;

    fn parse(text: &str) -> Result<Self, String> {
        NonZeroUsize::new(usize::parse(text)?).ok_or_else(|| "must be at least 1".into())
    }

    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        NonZeroUsize::new(usize::from_toml(value)?).ok_or_else(|| "must be at least 1".into())
    }

    fn show(&self) -> Shown {
        self.get().show()
    }
}

/// Durations are whole milliseconds, as the keys' `_ms` says.
impl SettingValue for Duration {
    const EXPECTED: &'static str = "a whole number of milliseconds";

    fn parse(text: &str) -> Result<Self, String> {
        u64::parse(text).map(Duration::from_millis)
    }

    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::Integer(_) => u64::from_toml(value).map(Duration::from_millis),
            other => Err(wrong_type(Self::EXPECTED, other)),
        }
    }

    fn show(&self) -> Shown {
        Shown::Number(millis(*self))
    }
}

impl SettingValue for SocketAddr {
    const EXPECTED: &'static str = "an address and port such as 127.0.0.1:7600";

    fn parse(text: &str) -> Result<Self, String> {
        text.trim()
            .parse()
            .map_err(|_| format!("{text:?} is not {}", Self::EXPECTED))
    }

    fn show(&self) -> Shown {
        Shown::Text(self.to_string())
    }
}

impl SettingValue for Option<SocketAddr> {
    const EXPECTED: &'static str = SocketAddr::EXPECTED;

    fn parse(text: &str) -> Result<Self, String> {
        SocketAddr::parse(text).map(Some)
    }

    fn show(&self) -> Shown {
        self.as_ref().map_or(Shown::Unset, SocketAddr::show)
    }
}

impl LogLevel {
    /// The directives, as `EnvFilter` parses them.
    pub fn directives(&self) -> &str {
        &self.0
    }
}

impl SettingValue for LogLevel {
    const EXPECTED: &'static str = "a level or directives such as info,mend=debug";

    /// Stricter than `EnvFilter`, which takes a word that is not a level (`verbose`, `infoo`)
    /// for a target to log everything of: every directive must name its level.
    fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let levels = LOG_LEVELS.join(", ");
        if text.is_empty() {
            return Err(format!("must not be empty; give a level ({levels})"));
        }
        for directive in text.split(',').map(str::trim) {
            let level = match directive.rsplit_once('=') {
                Some((target, level)) if !target.trim().is_empty() => level.trim(),
                Some(_) => "",
                None => directive,
            };
            if !LOG_LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
                return Err(format!(
                    "{:?} is not a level ({levels}) or TARGET=LEVEL",
                    mend::validate::truncated(directive, mend::validate::QUOTED_CHARS)
                ));
            }
        }
        check_env_filter(text)?;
        Ok(LogLevel(text.to_owned()))
    }

    fn show(&self) -> Shown {
        Shown::Text(self.0.clone())
    }
}

impl SettingValue for LogFormat {
    const EXPECTED: &'static str = "human or json";

    fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "human" => Ok(LogFormat::Human),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "{:?} is not human or json",
                mend::validate::truncated(other, mend::validate::QUOTED_CHARS)
            )),
        }
    }

    fn show(&self) -> Shown {
        Shown::Text(
            match self {
                LogFormat::Human => "human",
                LogFormat::Json => "json",
            }
            .to_owned(),
        )
    }
}

/// What `EnvFilter` itself refuses in a directive string, in one line.
pub(super) fn check_env_filter(text: &str) -> Result<(), String> {
    tracing_subscriber::EnvFilter::builder()
        .parse(text)
        .map(|_| ())
        .map_err(|error| {
            format!(
                "{:?} is not a log filter: {error}",
                mend::validate::truncated(text, mend::validate::QUOTED_CHARS)
            )
        })
}

pub(super) fn wrong_type(expected: &str, found: &toml::Value) -> String {
    format!("expected {expected}, found a TOML {}", found.type_str())
}

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn check_catalog(url: &str) -> Result<(), String> {
    check_scheme(url, CATALOG_SCHEMES)
}

pub(super) fn check_objects(url: &Option<String>) -> Result<(), String> {
    url.as_deref()
        .map_or(Ok(()), |url| check_scheme(url, OBJECT_STORE_SCHEMES))
}

/// A URL must name a scheme mend can open there; a plain path is a local directory.
pub(super) fn check_scheme(url: &str, schemes: &[&str]) -> Result<(), String> {
    match url.split_once("://") {
        Some((scheme, _)) if !schemes.contains(&scheme) => Err(format!(
            "{scheme}:// is not supported here; use a directory path or {}",
            schemes
                .iter()
                .map(|scheme| format!("{scheme}://"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => Ok(()),
    }
}

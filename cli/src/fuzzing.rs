//! The fuzz entry point for the settings file (`mend.toml`); see `mend::fuzzing` for what
//! every entry point asserts and who drives them. Public for the drivers and hidden from the
//! docs.

use std::path::Path as FilePath;

use mend::fuzzing::{Target, Verdict};
use mend::validate;

use crate::config::{ConfigError, Settings, Shown, Source};

/// The command line's entry points, by the name of their `cargo fuzz` target.
pub const TARGETS: &[(&str, Target)] = &[("settings_file", settings_file)];

/// A settings file (`mend.toml`), applied over the built-in defaults. Accepted: every numeric
/// setting is within its range, every value came from the file or the defaults, and the
/// options built from the settings hold (the dataset defaults pass `validate::config`, the
/// log level is a filter the log subscriber takes).
pub fn settings_file(data: &[u8]) -> Verdict {
    // As for scenario files: a file that is not UTF-8 is refused when read.
    let text = String::from_utf8_lossy(data);
    let settings = match Settings::from_file_text(FilePath::new("fuzz.toml"), &text) {
        Ok(settings) => settings,
        Err(
            error @ (ConfigError::InvalidToml { .. }
            | ConfigError::UnknownKey { .. }
            | ConfigError::InvalidValue { .. }),
        ) => {
            assert!(error.to_string().contains("fuzz.toml"), "{error}");
            return Verdict::Refused;
        }
        Err(error) => panic!("settings_file: refused with the wrong error: {error:?}"),
    };
    for (setting, shown, source) in settings.entries() {
        if let (Some(range), Shown::Number(value)) = (setting.range, &shown) {
            assert!(
                range.within(*value).is_ok(),
                "settings_file: {} is {value}, outside {range}",
                setting.key
            );
        }
        assert!(
            matches!(source, Source::Default | Source::File(_)),
            "settings_file: {} came from {source}",
            setting.key
        );
    }
    let engine = settings.engine_options();
    assert!(engine.max_stage_batch >= 1 && engine.intent_lease_ms >= 0);
    settings.policy_limits();
    settings.load_options();
    validate::config(&settings.dataset_config_defaults()).unwrap_or_else(|error| {
        panic!("settings_file: accepted grace periods make an invalid dataset config: {error}")
    });
    tracing_subscriber::EnvFilter::builder()
        .parse(settings.log_level.directives())
        .unwrap_or_else(|error| {
            panic!(
                "settings_file: accepted log.level {:?} is no filter: {error}",
                settings.log_level.directives()
            )
        });
    // `Debug` is what `mend config` and logs show; it walks every setting's shower.
    assert!(format!("{settings:?}").contains("fuzz.toml"));
    Verdict::Accepted
}

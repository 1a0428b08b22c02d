//! The process's log subscriber: installed once, by the binary, from the resolved settings.
//! The library and the server only emit (`tracing`); this is the one place that decides
//! what is written and how.
//!
//! - **Which lines:** `log.level`, an `EnvFilter` directive string (`info`, the default, or
//!   `info,mend=debug`; `mend` covers the library, the server and the CLI, whose targets
//!   all start with it). `RUST_LOG`, when set, wins over the setting from any source
//!   ([`crate::config::RUST_LOG_ENV`]), and `mend config` says so.
//! - **How:** `log.format`: `human` (one line per event: time, level, the spans with their
//!   fields, the target, the message and its fields; colours on a terminal unless
//!   `NO_COLOR` is set) or `json` (one object per line: `timestamp`, `level`, `fields`,
//!   `target`, the current `span` and the list of `spans`, each with its fields).
//! - **Where:** stderr. Command output (tables, JSON) stays on stdout, and what a command
//!   says for people on stderr (an error and its hint, `mend serve`'s listening line) is
//!   its output, written directly: neither depends on these settings.
//!
//! Records of crates that log with `log` rather than `tracing` are taken in too.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, Settings};

/// Installs the subscriber `settings` describe, unless one is installed already (a second
/// call changes nothing).
pub fn init(settings: &Settings) {
    let filter = EnvFilter::builder()
        .parse(settings.log_level.directives())
        // The settings checked it when they were resolved.
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // An error only says one was installed already: the first one stays.
    let _ = match settings.log_format {
        LogFormat::Human => builder.with_ansi(colours()).try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
}

/// Colours only for a person at a terminal who has not asked for none.
fn colours() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

//! `cargo +nightly fuzz run settings_file`: see `mend_cli::fuzzing::settings_file` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mend_cli::fuzzing::settings_file(data);
});

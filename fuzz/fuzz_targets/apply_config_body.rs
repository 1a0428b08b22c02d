//! `cargo +nightly fuzz run apply_config_body`: see `mend::fuzzing::apply_config_body` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mend::fuzzing::apply_config_body(data);
});

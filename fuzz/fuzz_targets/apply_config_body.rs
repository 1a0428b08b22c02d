//! `cargo +nightly fuzz run apply_config_body`: see `mend_server::fuzzing::apply_config_body` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mend_server::fuzzing::apply_config_body(data);
});

//! `cargo +nightly fuzz run tokens_file`: see `mend_server::fuzzing::tokens_file` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mend_server::fuzzing::tokens_file(data);
});

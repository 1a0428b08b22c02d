//! `cargo +nightly fuzz run authorization_header`: see `mend_server::fuzzing::authorization_header` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mend_server::fuzzing::authorization_header(data);
});

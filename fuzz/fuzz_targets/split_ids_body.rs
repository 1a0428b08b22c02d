//! `cargo +nightly fuzz run split_ids_body`: see `mend_server::fuzzing::split_ids_body` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mend_server::fuzzing::split_ids_body(data);
});

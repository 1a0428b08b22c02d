//! `cargo +nightly fuzz run begin_compact_body`: see `mend_server::fuzzing::begin_compact_body` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mend_server::fuzzing::begin_compact_body(data);
});

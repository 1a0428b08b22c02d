//! `cargo +nightly fuzz run list_query`: see `mend_server::fuzzing::list_query` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mend_server::fuzzing::list_query(data);
});

//! `cargo +nightly fuzz run create_dataset_body`: see `mend_server::fuzzing::create_dataset_body` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mend_server::fuzzing::create_dataset_body(data);
});

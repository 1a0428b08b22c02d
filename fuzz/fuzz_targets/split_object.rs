//! `cargo +nightly fuzz run split_object`: see `mend::fuzzing::split_object` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mend::fuzzing::split_object(data);
});

//! `cargo +nightly fuzz run checkpoint`: see `mend::fuzzing::checkpoint` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mend::fuzzing::checkpoint(data);
});

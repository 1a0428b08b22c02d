//! `cargo +nightly fuzz run commit_log_entry`: see `mend::fuzzing::commit_log_entry` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mend::fuzzing::commit_log_entry(data);
});

//! `cargo +nightly fuzz run scenario_file`: see `mend::fuzzing::scenario_file` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mend::fuzzing::scenario_file(data);
});

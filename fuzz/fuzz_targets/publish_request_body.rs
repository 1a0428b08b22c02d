//! `cargo +nightly fuzz run publish_request_body`: see `mend_server::fuzzing::publish_request_body` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mend_server::fuzzing::publish_request_body(data);
});

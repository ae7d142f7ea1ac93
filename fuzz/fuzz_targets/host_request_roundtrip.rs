#![no_main]
//! `cargo +nightly fuzz run host_request_roundtrip`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::host_request_roundtrip(data));

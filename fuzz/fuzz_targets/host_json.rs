#![no_main]
//! `cargo +nightly fuzz run host_json`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::host_json(data));

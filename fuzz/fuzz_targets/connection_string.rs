#![no_main]
//! `cargo +nightly fuzz run connection_string`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::connection_string(data));

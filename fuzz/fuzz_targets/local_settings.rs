#![no_main]
//! `cargo +nightly fuzz run local_settings`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::local_settings(data));

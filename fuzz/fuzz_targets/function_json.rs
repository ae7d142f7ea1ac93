#![no_main]
//! `cargo +nightly fuzz run function_json`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::function_json(data));

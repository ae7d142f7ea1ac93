#![no_main]
//! `cargo +nightly fuzz run emulator_config`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::emulator_config(data));

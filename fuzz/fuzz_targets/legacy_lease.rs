#![no_main]
//! `cargo +nightly fuzz run legacy_lease`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::legacy_lease(data));

#![no_main]
//! `cargo +nightly fuzz run checkpoint_metadata`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::checkpoint_metadata(data));

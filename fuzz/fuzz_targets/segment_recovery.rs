#![no_main]
//! `cargo +nightly fuzz run segment_recovery`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::segment_recovery(data));

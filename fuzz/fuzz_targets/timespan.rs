#![no_main]
//! `cargo +nightly fuzz run timespan`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::timespan(data));

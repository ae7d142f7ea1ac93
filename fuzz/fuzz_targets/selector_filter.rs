#![no_main]
//! `cargo +nightly fuzz run selector_filter`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::selector_filter(data));

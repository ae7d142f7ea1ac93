#![no_main]
//! `cargo +nightly fuzz run json_text`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::json_text(data));

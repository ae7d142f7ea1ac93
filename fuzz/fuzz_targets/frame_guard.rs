#![no_main]
//! `cargo +nightly fuzz run frame_guard`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::frame_guard(data));

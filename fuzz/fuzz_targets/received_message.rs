#![no_main]
//! `cargo +nightly fuzz run received_message`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::received_message(data));

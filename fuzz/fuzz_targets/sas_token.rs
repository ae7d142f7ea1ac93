#![no_main]
//! `cargo +nightly fuzz run sas_token`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::sas_token(data));

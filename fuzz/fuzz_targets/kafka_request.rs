#![no_main]
//! `cargo +nightly fuzz run kafka_request`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::kafka_request(data));

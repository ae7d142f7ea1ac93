#![no_main]
//! `cargo +nightly fuzz run kafka_connection`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::kafka_connection(data));

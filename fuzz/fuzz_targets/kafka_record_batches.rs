#![no_main]
//! `cargo +nightly fuzz run kafka_record_batches`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::kafka_record_batches(data));

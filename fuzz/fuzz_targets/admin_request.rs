#![no_main]
//! `cargo +nightly fuzz run admin_request`: see crates/fuzz-targets.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hubhost_fuzz_targets::admin_request(data));

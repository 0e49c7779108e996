//! libFuzzer entry for the `client` target: see `coterie_fuzz::client`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| coterie_fuzz::client::run(data));

//! libFuzzer entry for the `witness` target: see `coterie_fuzz::witness`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| coterie_fuzz::witness::run(data));

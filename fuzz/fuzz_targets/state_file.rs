//! libFuzzer entry for the `state_file` target: see `coterie_fuzz::state_file`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| coterie_fuzz::state_file::run(data));

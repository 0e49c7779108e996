//! libFuzzer entry for the `peer` target: see `coterie_fuzz::peer`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| coterie_fuzz::peer::run(data));

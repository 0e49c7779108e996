//! libFuzzer entry for the `handshake` target: see `coterie_fuzz::handshake`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| coterie_fuzz::handshake::run(data));

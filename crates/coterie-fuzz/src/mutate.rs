//! Seeded mutations of an input, for the tests' short fuzzing runs (the
//! coverage-guided fuzzer in `fuzz/` has its own). The mutations are
//! libFuzzer's simplest: flip a bit, set a byte to an interesting value,
//! write an extreme integer, insert, delete, duplicate a range.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `count` mutants of `input`, the same ones for the same `seed`.
pub fn mutants(input: &[u8], seed: u64, count: usize) -> Vec<Vec<u8>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let mut bytes = input.to_vec();
            for _ in 0..rng.random_range(1..=4) {
                mutate(&mut bytes, &mut rng);
            }
            bytes
        })
        .collect()
}

fn mutate(bytes: &mut Vec<u8>, rng: &mut ChaCha8Rng) {
    if bytes.is_empty() {
        bytes.push(rng.random());
        return;
    }
    let at = rng.random_range(0..bytes.len());
    match rng.random_range(0..6) {
        0 => bytes[at] ^= 1 << rng.random_range(0..8),
        1 => bytes[at] = [0, 1, 0x7f, 0x80, 0xfa, 0xfb, 0xfc, 0xfd, 0xff][rng.random_range(0..9)],
        2 => {
            // An extreme integer, in bincode's varint form or raw.
            let v: &[u8] = match rng.random_range(0..4) {
                0 => &[0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], // u64::MAX
                1 => &[0xfc, 0xff, 0xff, 0xff, 0xff],                         // u32::MAX
                2 => &[0xff, 0xff, 0xff, 0x7f],
                _ => &[0, 0, 0, 0],
            };
            let end = (at + v.len()).min(bytes.len());
            bytes[at..end].copy_from_slice(&v[..end - at]);
        }
        3 => {
            let n = rng.random_range(1..=8);
            for _ in 0..n {
                bytes.insert(at, rng.random());
            }
        }
        4 => {
            let end = (at + rng.random_range(1..=8)).min(bytes.len());
            bytes.drain(at..end);
        }
        _ => {
            let end = (at + rng.random_range(1..=32)).min(bytes.len());
            let copy = bytes[at..end].to_vec();
            let to = rng.random_range(0..=bytes.len());
            bytes.splice(to..to, copy);
        }
    }
}

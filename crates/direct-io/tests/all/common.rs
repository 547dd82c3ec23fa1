//! Shared helpers: deterministic file contents and a small pseudo-random generator.

use std::path::Path;

/// The byte at file offset `i` of every test file: varied enough that a misplaced copy shows.
pub fn byte_at(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ (i as u8)
}

/// Writes a file of `len` bytes of [`byte_at`] and returns its contents.
pub fn write_pattern(path: &Path, len: u64) -> Vec<u8> {
    let data: Vec<u8> = (0..len).map(byte_at).collect();
    std::fs::write(path, &data).expect("write the test file");
    data
}

/// xorshift64*: deterministic, seeded per test so a failure reproduces.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// Every file size the issue names.
pub const SIZES: [u64; 9] = [0, 1, 511, 512, 4095, 4096, 4097, 10_000, 3_000_001];

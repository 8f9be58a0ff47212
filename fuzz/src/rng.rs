//! A small deterministic PRNG (SplitMix64) and the byte-reader the structured generators use.
//! Owns nothing; every input is a pure function of `(seed, index)`, so an index replays.

/// SplitMix64: fast, full-period, good enough for choosing mutations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The generator for input number `index` of a run seeded with `seed`.
    pub fn for_input(seed: u64, index: u64) -> Self {
        let mut r = Rng(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`0` when `n == 0`).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// `true` with probability `1/n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A small size, skewed towards 0..8 with a long tail up to `max`.
    pub fn small(&mut self, max: usize) -> usize {
        match self.below(8) {
            0..=5 => self.below(max.min(8) + 1),
            6 => self.below(max.min(64) + 1),
            _ => self.below(max + 1),
        }
    }
}

/// Reads choices out of raw input bytes (the way `arbitrary::Unstructured` does): structured
/// targets take bytes like every other target, so a reproducer is always a byte string. Reads
/// past the end yield zeros, so every byte string decodes to something.
#[derive(Debug)]
pub struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    pub fn i64(&mut self) -> i64 {
        self.u64() as i64
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// In `0..n` (`0` when `n == 0`).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        self.u8() as usize % n
    }

    pub fn pick<'b, T>(&mut self, items: &'b [T]) -> &'b T {
        &items[self.below(items.len())]
    }

    /// Up to `max` raw bytes (length first).
    pub fn slice(&mut self, max: usize) -> &'a [u8] {
        let want = self.below(max + 1);
        let start = self.pos.min(self.data.len());
        let end = (start + want).min(self.data.len());
        self.pos = start + want;
        &self.data[start..end]
    }
}

//! The clients' random generator: ChaCha8 exactly as `rand_chacha`'s
//! `ChaCha8Rng` draws it, word for word (the same seeds give the same
//! scripts), but holding one 64-byte block instead of four. A client's
//! generator is most of its state; at fleet scale a million of them are
//! touched at random, one per event, so a smaller one is fewer cache lines
//! to load per event ([performance](docs/performance.md#fleets)).

use rand::{Error, RngCore, SeedableRng};

/// "expand 32-byte k".
const SIGMA: [u32; 4] = [0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574];
/// Words in a block.
const WORDS: usize = 16;

/// ChaCha with 8 rounds, stream 0, a 64-bit block counter from 0.
#[derive(Clone, Debug)]
pub struct ChaCha8 {
    key: [u32; 8],
    /// The next block's number.
    block: u64,
    buf: [u32; WORDS],
    /// The next unread word of `buf` ([`WORDS`]: none left).
    index: u8,
}

impl SeedableRng for ChaCha8 {
    type Seed = [u8; 32];

    fn from_seed(seed: [u8; 32]) -> ChaCha8 {
        let mut key = [0u32; 8];
        for (k, b) in key.iter_mut().zip(seed.chunks_exact(4)) {
            *k = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        ChaCha8 { key, block: 0, buf: [0; WORDS], index: WORDS as u8 }
    }
}

impl ChaCha8 {
    /// Computes the next block into `buf`.
    fn refill(&mut self) {
        let mut input = [0u32; WORDS];
        input[..4].copy_from_slice(&SIGMA);
        input[4..12].copy_from_slice(&self.key);
        input[12] = self.block as u32;
        input[13] = (self.block >> 32) as u32;
        let mut x = input;
        for _ in 0..4 {
            quarter(&mut x, 0, 4, 8, 12);
            quarter(&mut x, 1, 5, 9, 13);
            quarter(&mut x, 2, 6, 10, 14);
            quarter(&mut x, 3, 7, 11, 15);
            quarter(&mut x, 0, 5, 10, 15);
            quarter(&mut x, 1, 6, 11, 12);
            quarter(&mut x, 2, 7, 8, 13);
            quarter(&mut x, 3, 4, 9, 14);
        }
        for (out, (x, input)) in self.buf.iter_mut().zip(x.iter().zip(input)) {
            *out = x.wrapping_add(input);
        }
        self.block = self.block.wrapping_add(1);
        self.index = 0;
    }
}

/// ChaCha's quarter round on words `a`, `b`, `c`, `d` of `x`.
#[inline(always)]
fn quarter(x: &mut [u32; WORDS], a: usize, b: usize, c: usize, d: usize) {
    x[a] = x[a].wrapping_add(x[b]);
    x[d] = (x[d] ^ x[a]).rotate_left(16);
    x[c] = x[c].wrapping_add(x[d]);
    x[b] = (x[b] ^ x[c]).rotate_left(12);
    x[a] = x[a].wrapping_add(x[b]);
    x[d] = (x[d] ^ x[a]).rotate_left(8);
    x[c] = x[c].wrapping_add(x[d]);
    x[b] = (x[b] ^ x[c]).rotate_left(7);
}

impl RngCore for ChaCha8 {
    fn next_u32(&mut self) -> u32 {
        if self.index as usize >= WORDS {
            self.refill();
        }
        let w = self.buf[self.index as usize];
        self.index += 1;
        w
    }

    /// Two words, the first low (across a block's end too, as `rand_core`'s
    /// `BlockRng` reads them).
    fn next_u64(&mut self) -> u64 {
        let low = u64::from(self.next_u32());
        (u64::from(self.next_u32()) << 32) | low
    }

    /// Whole words, little-endian; a last partial word is used up.
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(4) {
            let w = self.next_u32().to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::ChaCha8;
    use rand::{Rng, RngCore, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use rand_distr::{Distribution, Exp};

    /// Every kind of draw the scripts make, interleaved so that two-word
    /// draws straddle block ends at every offset, must equal `rand_chacha`'s.
    #[test]
    fn draws_equal_rand_chachas_word_for_word() {
        for seed in [0u64, 1, 42, 0x9E37_79B9_7F4A_7C15, u64::MAX] {
            let (mut ours, mut theirs) = (ChaCha8::seed_from_u64(seed), ChaCha8Rng::seed_from_u64(seed));
            let exp: Exp<f64> = Exp::new(4.0).unwrap();
            for i in 0..20_000u32 {
                match i % 7 {
                    0 => assert_eq!(ours.next_u32(), theirs.next_u32()),
                    1 => assert_eq!(ours.next_u64(), theirs.next_u64()),
                    2 => assert_eq!(ours.gen::<f64>().to_bits(), theirs.gen::<f64>().to_bits()),
                    3 => assert_eq!(ours.gen_range(10..=60u32), theirs.gen_range(10..=60u32)),
                    4 => assert_eq!(exp.sample(&mut ours).to_bits(), exp.sample(&mut theirs).to_bits()),
                    5 => assert_eq!(ours.gen_range(0.75..1.25f64).to_bits(), theirs.gen_range(0.75..1.25f64).to_bits()),
                    _ => {
                        let n = (i as usize / 7) % 11;
                        let (mut a, mut b) = (vec![0u8; n], vec![0u8; n]);
                        ours.fill_bytes(&mut a);
                        theirs.fill_bytes(&mut b);
                        assert_eq!(a, b);
                    }
                }
            }
        }
    }

    #[test]
    fn it_holds_one_block_not_four() {
        assert!(std::mem::size_of::<ChaCha8>() <= 112, "{}", std::mem::size_of::<ChaCha8>());
        assert!(std::mem::size_of::<ChaCha8Rng>() >= 300);
    }
}

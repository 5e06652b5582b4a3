//! A tiny seeded generator (xorshift64*, Vigna 2016): fast, reproducible from its seed, and
//! good enough for choosing offsets and coin flips. Not for cryptography.

/// xorshift64* with a seed scrambled so that nearby seeds give unrelated streams.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value, zero included: the state is never zero).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n` (Lemire's multiply-shift, no division); 0 when `n` is 0.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// True with probability `pct` percent.
    #[inline]
    pub fn percent(&mut self, pct: u32) -> bool {
        self.below(100) < pct as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_stream_and_values_stay_below_n() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<u64> = (0..1000).map(|_| a.below(10)).collect();
        assert!(xs.iter().all(|&x| x < 10));
        assert_eq!(xs, (0..1000).map(|_| b.below(10)).collect::<Vec<_>>());
        // Every bucket is hit: the multiply-shift does not collapse the range.
        assert!((0..10).all(|v| xs.contains(&v)));
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
        assert_eq!(Rng::new(0).below(0), 0);
    }

    #[test]
    fn percent_is_roughly_fair() {
        let mut r = Rng::new(3);
        let hits = (0..10_000).filter(|_| r.percent(30)).count();
        assert!((2_700..3_300).contains(&hits), "{hits}");
        assert!((0..100).all(|_| !r.percent(0)) && (0..100).all(|_| r.percent(100)));
    }
}

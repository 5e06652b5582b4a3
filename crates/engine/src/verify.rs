//! The `--verify` data pattern: every unit of [`UNIT_BYTES`] carries a header (magic, its
//! own offset, the seed), seeded pseudo-random words, and a checksum of all that as its
//! last word. A read-back check names the offset and what is wrong: a torn or corrupted
//! unit fails the checksum, a misdirected one names the offset it carries, a stale one the
//! seed it was written with.
//!
//! The unit is one size for every request size, so what a prefill or a temporary file's
//! fill wrote in 1 MiB chunks reads back correctly in 512-byte, 2 KiB or 6 KiB requests:
//! a unit that depended on the request size (4 KiB for multiples of 4 KiB, else 512 B)
//! made every read of a size that was not a multiple of 4 KiB fail on a correct device.
//! 512 bytes is the smallest logical block any target has, so every valid request size is
//! a whole number of units; 3 header words and a checksum in 64 cost as much per byte to
//! check as in 512.

use std::fmt;

pub const MAGIC: u64 = 0x534d_4152_5443_4f4e; // "SMARTCON"

/// The unit the engine's pattern is written and checked in, for every request size.
pub const UNIT_BYTES: u64 = 512;

/// The unit a request of `bs` bytes is checked in: always [`UNIT_BYTES`], so fills and
/// checks of different sizes agree. `bs` must be a multiple of it (the job checks).
pub fn unit_bytes(bs: u64) -> u64 {
    debug_assert!(bs.is_multiple_of(UNIT_BYTES), "request size {bs} is not a whole number of pattern units");
    UNIT_BYTES
}

#[inline]
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[inline]
fn checksum(words: &[u64]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &w in words {
        h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(23);
    }
    h
}

fn words_mut(buf: &mut [u8]) -> &mut [u64] {
    assert!((buf.as_ptr() as usize).is_multiple_of(8) && buf.len().is_multiple_of(8));
    // SAFETY: alignment and length checked; u64 has no invalid bit patterns.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut u64, buf.len() / 8) }
}

fn words(buf: &[u8]) -> &[u64] {
    assert!((buf.as_ptr() as usize).is_multiple_of(8) && buf.len().is_multiple_of(8));
    // SAFETY: as in words_mut.
    unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u64, buf.len() / 8) }
}

/// Fills `buf`, which will be written at device offset `offset`, with the pattern.
pub fn fill(buf: &mut [u8], offset: u64, unit: u64, seed: u64) {
    assert!((buf.len() as u64).is_multiple_of(unit));
    for (i, chunk) in buf.chunks_mut(unit as usize).enumerate() {
        let at = offset + i as u64 * unit;
        let w = words_mut(chunk);
        let n = w.len();
        w[0] = MAGIC;
        w[1] = at;
        w[2] = seed;
        let mut x = seed ^ at.rotate_left(17);
        for word in &mut w[3..n - 1] {
            x = splitmix(x);
            *word = x;
        }
        w[n - 1] = checksum(&w[..n - 1]);
    }
}

/// What a verification found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub offset: u64,
    pub what: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "data mismatch at offset {} (0x{:x}): {}", self.offset, self.offset, self.what)
    }
}

/// Checks `buf`, read from `offset`, against the pattern with `seed`.
pub fn check(buf: &[u8], offset: u64, unit: u64, seed: u64) -> Result<(), Mismatch> {
    for (i, chunk) in buf.chunks(unit as usize).enumerate() {
        let at = offset + i as u64 * unit;
        let w = words(chunk);
        let n = w.len();
        let bad = |what: String| Err(Mismatch { offset: at, what });
        if w[0] != MAGIC {
            return bad("no smartcon pattern here (never written, or overwritten)".into());
        }
        if checksum(&w[..n - 1]) != w[n - 1] {
            return bad("checksum does not match: the unit is corrupted or torn".into());
        }
        if w[1] != at {
            return bad(format!("the unit carries offset {} (misdirected write)", w[1]));
        }
        if w[2] != seed {
            return bad(format!("written with seed {:#x}, expected {:#x} (stale data: a write was lost)", w[2], seed));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::AlignedBuf;

    #[test]
    fn pattern_round_trip_and_each_failure_named() {
        let mut b = AlignedBuf::new(8192);
        fill(b.as_mut_slice(), 1 << 20, 4096, 7);
        assert!(check(b.as_slice(), 1 << 20, 4096, 7).is_ok());
        assert!(check(b.as_slice(), 1 << 20, 4096, 8).unwrap_err().what.contains("stale"));
        assert!(check(b.as_slice(), 2 << 20, 4096, 7).unwrap_err().what.contains("misdirected"));
        b.as_mut_slice()[4096 + 100] ^= 1;
        let e = check(b.as_slice(), 1 << 20, 4096, 7).unwrap_err();
        assert_eq!(e.offset, (1 << 20) + 4096);
        assert!(e.what.contains("checksum"));
        let zero = AlignedBuf::new(512);
        assert!(check(zero.as_slice(), 0, 512, 7).unwrap_err().what.contains("no smartcon pattern"));
    }

    /// Issue 16 item 1: a 1 MiB fill (as the prefill and the temporary file write it) must
    /// check correctly when read back in any request size at any of its offsets; with a
    /// size-dependent unit, 512 B, 2 KiB and 6 KiB reads found "no smartcon pattern".
    #[test]
    fn a_fill_in_big_chunks_checks_in_every_request_size() {
        let chunk = 1usize << 20;
        let mut big = AlignedBuf::new(chunk);
        fill(big.as_mut_slice(), 0, unit_bytes(chunk as u64), 11);
        for bs in [512usize, 1024, 2048, 4096, 6144, 12288, 65536] {
            let unit = unit_bytes(bs as u64);
            let mut at = 0;
            while at + bs <= chunk {
                let mut piece = AlignedBuf::new(bs);
                piece.as_mut_slice().copy_from_slice(&big.as_slice()[at..at + bs]);
                if let Err(m) = check(piece.as_slice(), at as u64, unit, 11) {
                    panic!("bs {bs} at {at}: {m}");
                }
                at += bs * 37;
            }
        }
        // And the other way round: a small write's pattern is what a big read expects.
        let mut small = AlignedBuf::new(512);
        fill(small.as_mut_slice(), 4096 + 512, unit_bytes(512), 11);
        big.as_mut_slice()[4096 + 512..4096 + 1024].copy_from_slice(small.as_slice());
        assert!(check(big.as_slice(), 0, unit_bytes(chunk as u64), 11).is_ok());
    }
}

//! Cache geometry: size, ways and line size, validated once so the hot path can use shifts
//! and masks.
//!
//! The line size and the number of sets must be powers of two (the set index is a bit
//! field) and the size must divide into whole sets; ways may be any count from 1 to 64
//! (a 3 MiB 12-way cache is fine), which are exactly cachegrind's rules. The simulator
//! refuses anything else instead of rounding, because a silently rounded cache is a
//! different experiment. (cachegrind likewise requires power-of-two sets for I1/D1 and
//! tweaks only auto-detected LL caches; see docs/cachesim-ets.md.)

use crate::error::{Error, ErrorKind, Result};

/// The largest cache simulated. The simulator keeps about 20 bytes of state per line (tag,
/// replacement state, SHiP signature), so 1 GiB of 64-byte lines is ~340 MB per cache, and
/// a study runs one cache per thread; beyond this a typo (`1t`) would abort on allocation.
pub const SIZE_BYTES_MAX: u64 = 1 << 30;

/// A validated set-associative geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub size_bytes: u64,
    pub ways: u32,
    pub line_bytes: u32,
}

impl Geometry {
    /// Validates a geometry; the error names the offending quantity.
    pub fn new(size_bytes: u64, ways: u32, line_bytes: u32) -> Result<Self> {
        let bad = |what: String| Err(Error::new(ErrorKind::Usage, what));
        if ways == 0 {
            return bad(format!("cache of {size_bytes} bytes has zero ways"));
        }
        if line_bytes == 0 || !line_bytes.is_power_of_two() {
            return bad(format!("line size {line_bytes} bytes is not a power of two"));
        }
        if line_bytes < 4 {
            return bad(format!("line size {line_bytes} bytes is below the 4-byte minimum"));
        }
        if ways > 64 {
            return bad(format!("{ways} ways is above the 64-way maximum"));
        }
        if size_bytes > SIZE_BYTES_MAX {
            return bad(format!(
                "cache size {size_bytes} bytes is above the simulator's maximum of {SIZE_BYTES_MAX} bytes (1 GiB)"
            ));
        }
        let way_bytes = u64::from(ways) * u64::from(line_bytes);
        if size_bytes == 0 || size_bytes < way_bytes || !size_bytes.is_multiple_of(way_bytes) {
            return bad(format!(
                "cache size {size_bytes} bytes does not divide into sets of {ways} ways x {line_bytes}-byte lines"
            ));
        }
        let sets = size_bytes / way_bytes;
        if !sets.is_power_of_two() {
            return bad(format!(
                "cache of {size_bytes} bytes, {ways} ways, {line_bytes}-byte lines has {sets} sets, not a power of two"
            ));
        }
        Ok(Geometry { size_bytes, ways, line_bytes })
    }

    pub fn sets(&self) -> usize {
        (self.size_bytes / (u64::from(self.ways) * u64::from(self.line_bytes))) as usize
    }

    pub fn lines(&self) -> usize {
        self.sets() * self.ways as usize
    }

    pub fn line_shift(&self) -> u32 {
        self.line_bytes.trailing_zeros()
    }

    /// The same geometry with a different size and the same ways and line size: the paper
    /// keeps the associativity and changes the number of sets (Sec. IV).
    pub fn with_size(&self, size_bytes: u64) -> Result<Self> {
        Geometry::new(size_bytes, self.ways, self.line_bytes)
    }
}

impl std::fmt::Display for Geometry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} B, {}-way, {} B lines", self.size_bytes, self.ways, self.line_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_geometries_with_a_reason() {
        let e = Geometry::new(32768, 0, 64).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Usage);
        assert!(e.message.contains("ways"), "{e}");
        assert!(Geometry::new(3000, 2, 64).unwrap_err().message.contains("divide"));
        assert!(Geometry::new(3 << 20, 16, 64).unwrap_err().message.contains("power of two"));
        assert!(Geometry::new(32768, 3, 64).unwrap_err().message.contains("divide"));
        assert!(Geometry::new(32768, 65, 64).unwrap_err().message.contains("64-way"));
        assert_eq!(Geometry::new(3 << 20, 12, 64).unwrap().sets(), 4096);
        assert!(Geometry::new(32768, 2, 48).unwrap_err().message.contains("line"));
        assert!(Geometry::new(64, 2, 64).unwrap_err().message.contains("divide"));
        // `1t,16` once aborted the process on allocation; it is a geometry error now.
        assert!(Geometry::new(1 << 40, 16, 64).unwrap_err().message.contains("maximum"));
        assert!(Geometry::new(SIZE_BYTES_MAX, 16, 64).is_ok());
        let g = Geometry::new(2 << 20, 16, 64).unwrap();
        assert_eq!(g.sets(), 2048);
        assert_eq!(g.lines(), 32768);
    }
}

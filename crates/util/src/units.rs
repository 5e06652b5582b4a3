//! Human-readable sizes and durations ("4k", "1MiB", "500ms", "80us").
//!
//! Sizes use binary multiples (k = KiB = 1024) because block sizes are powers of two in
//! this field; a plain number is bytes. Durations accept ns, us, ms, s and m; a plain
//! number is rejected because a bare "10" could mean any unit.

use std::fmt;

/// A parse failure that names the text and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub text: String,
    pub expected: &'static str,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot read {:?} as {}", self.text, self.expected)
    }
}

impl std::error::Error for ParseError {}

fn split_number(text: &str) -> Option<(f64, &str)> {
    let t = text.trim();
    let end = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    if end == 0 {
        return None;
    }
    let value: f64 = t[..end].parse().ok()?;
    Some((value, t[end..].trim()))
}

/// The one unit table of every size: bytes per unit, binary multiples, case ignored
/// (`k`, `kb` and `kib` are all 1024); `None` for anything else. It goes up to `e` (2^60),
/// so that [`parse_size_in`] can call "1p" too large for its kind rather than unreadable.
fn unit_multiplier(unit: &str) -> Option<u64> {
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        "p" | "pb" | "pib" => 50,
        "e" | "eb" | "eib" => 60,
        _ => return None,
    };
    Some(1 << shift)
}

/// The largest unit [`parse_size`] reads (t): it has never read `p` or `e`, and its callers'
/// sizes (caches, working sets, bandwidths) stay as they were.
const PARSE_SIZE_UNIT_MAX: u64 = 1 << 40;

/// Parses a size such as `4096`, `4k`, `4KiB`, `1m`, `2G` into bytes.
pub fn parse_size(text: &str) -> Result<u64, ParseError> {
    let err = || ParseError { text: text.to_string(), expected: "a size such as 4096, 4k, 1m or 2g" };
    let (value, unit) = split_number(text).ok_or_else(err)?;
    // Units up to t only, as always: `p` and `e` are [`parse_size_in`]'s, where a size too
    // large to hold is out of its kind's range rather than malformed.
    let multiplier = unit_multiplier(unit).filter(|&m| m <= PARSE_SIZE_UNIT_MAX).ok_or_else(err)?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes > u64::MAX as f64 / 2.0 || bytes.fract() != 0.0 {
        return Err(err());
    }
    Ok(bytes as u64)
}

/// One sector: the smallest size of storage any command reads, writes or creates.
pub const SECTOR_BYTES: u64 = 512;

/// A kind of size and its bounds. Every flag, spec key and target that takes a size of one
/// kind parses it with [`parse_size_in`] and that kind's range, so the same size is accepted
/// or refused, with the same words, by every command (issue 22: bounds that agree
/// everywhere). The kinds: [`IO_SIZE`], [`DEVICE_SIZE`], [`RAMDISK_SIZE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeRange {
    /// What a size of this kind is, for the message: "an I/O size".
    pub name: &'static str,
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// Sizes of this kind are whole multiples of this (a power of two).
    pub multiple_bytes: u64,
}

/// One request (a block size, a table row's size): whole sectors from one sector to 64 MiB,
/// the engine's and the device models' largest request.
pub const IO_SIZE: SizeRange =
    SizeRange { name: "an I/O size", min_bytes: SECTOR_BYTES, max_bytes: 64 << 20, multiple_bytes: SECTOR_BYTES };
/// A device or a file smartcon creates or works in: an emulated device's capacity (`size=`,
/// `--size`, an `--emulate` image), a `tmp:` file, the region a job uses (`--span`), a
/// study's file (`--file-size`): whole 4 KiB pages from 1 MiB to 16 GiB (an emulated device
/// lives in RAM on a machine of tens of GiB).
pub const DEVICE_SIZE: SizeRange =
    SizeRange { name: "a device size", min_bytes: 1 << 20, max_bytes: 16 << 30, multiple_bytes: 4096 };
/// A loop, zram or loop-with-ext4 device created for a run (`loop:SIZE`, `zram:SIZE`,
/// `loopfs:SIZE`): as [`DEVICE_SIZE`], up to 8 GiB, since it is filled in RAM (/dev/shm or
/// zram) where an emulated device's untouched pages cost nothing.
pub const RAMDISK_SIZE: SizeRange = SizeRange { name: "a RAM disk size", max_bytes: 8 << 30, ..DEVICE_SIZE };
/// The files of a generated tree (`emulate sweep --tree-size`): whole pages, as a device's,
/// from one page, since a tree is the data written onto a device, not the device: a tree of
/// a few hundred KiB makes a sweep that runs in seconds (the vm test's).
pub const TREE_SIZE: SizeRange = SizeRange { name: "a tree size", min_bytes: 4096, ..DEVICE_SIZE };

const _: () = assert!(IO_SIZE.min_bytes >= SECTOR_BYTES && DEVICE_SIZE.min_bytes >= SECTOR_BYTES);
const _: () = assert!(IO_SIZE.max_bytes <= DEVICE_SIZE.max_bytes && RAMDISK_SIZE.max_bytes <= DEVICE_SIZE.max_bytes);
const _: () = assert!(IO_SIZE.multiple_bytes.is_power_of_two() && DEVICE_SIZE.multiple_bytes.is_power_of_two());

impl SizeRange {
    /// Whether `bytes` is a size of this kind.
    pub fn contains(&self, bytes: u64) -> bool {
        (self.min_bytes..=self.max_bytes).contains(&bytes) && bytes.is_multiple_of(self.multiple_bytes)
    }

    /// The range in words: "an I/O size is 512 to 64m bytes, a multiple of 512".
    pub fn describe(&self) -> String {
        format!(
            "{} is {} to {} bytes, a multiple of {}",
            self.name,
            format_size(self.min_bytes),
            format_size(self.max_bytes),
            format_size(self.multiple_bytes)
        )
    }

    /// Checks a size already in bytes against the range (the same words as [`parse_size_in`]).
    pub fn check(&self, bytes: u64) -> Result<u64, SizeError> {
        if self.contains(bytes) {
            return Ok(bytes);
        }
        let problem = if (self.min_bytes..=self.max_bytes).contains(&bytes) {
            SizeProblem::NotMultiple
        } else {
            SizeProblem::OutOfRange
        };
        Err(SizeError { text: bytes.to_string(), problem, range: *self })
    }
}

/// Why a size was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeProblem {
    /// Not a size at all ("4x", "-1", "1e3").
    Malformed,
    /// Below the kind's smallest (0 included) or above its largest.
    OutOfRange,
    NotMultiple,
}

/// A size refused by [`parse_size_in`]: one line naming the text and the kind's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeError {
    pub text: String,
    pub problem: SizeProblem,
    pub range: SizeRange,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.range.describe();
        match self.problem {
            SizeProblem::Malformed => {
                write!(f, "cannot read {:?} as a size such as 4096, 4k, 1m or 2g ({r})", self.text)
            }
            SizeProblem::OutOfRange => write!(f, "{:?} is out of range: {r}", self.text),
            SizeProblem::NotMultiple => {
                write!(f, "{:?} is not a multiple of {}: {r}", self.text, format_size(self.range.multiple_bytes))
            }
        }
    }
}

impl std::error::Error for SizeError {}

/// Parses a size of one kind: the one size parser of every command (see [`SizeRange`]).
/// A size too large to hold in bytes is out of range, not malformed.
pub fn parse_size_in(text: &str, range: SizeRange) -> Result<u64, SizeError> {
    let err = |problem| SizeError { text: text.trim().to_string(), problem, range };
    let (value, unit) = split_number(text).ok_or_else(|| err(SizeProblem::Malformed))?;
    let multiplier = unit_multiplier(unit).ok_or_else(|| err(SizeProblem::Malformed))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() {
        return Err(err(SizeProblem::Malformed));
    }
    if bytes > range.max_bytes as f64 || bytes < range.min_bytes as f64 {
        return Err(err(SizeProblem::OutOfRange));
    }
    if bytes.fract() != 0.0 {
        return Err(err(SizeProblem::Malformed));
    }
    range.check(bytes as u64).map_err(|e| err(e.problem))
}

/// Parses a duration such as `500ms`, `80us`, `2s`, `1.5m` into nanoseconds.
pub fn parse_duration_ns(text: &str) -> Result<u64, ParseError> {
    let err = || ParseError { text: text.to_string(), expected: "a duration such as 80us, 500ms or 2s" };
    let (value, unit) = split_number(text).ok_or_else(err)?;
    let multiplier: f64 = match unit.to_ascii_lowercase().as_str() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" | "sec" => 1e9,
        "m" | "min" => 60e9,
        _ => return Err(err()),
    };
    let ns = value * multiplier;
    if !ns.is_finite() || ns > 1e18 {
        return Err(err());
    }
    Ok(ns.round() as u64)
}

/// Formats bytes the way users write them: 4k, 256k, 1m.
pub fn format_size(bytes: u64) -> String {
    for (shift, suffix) in [(40, "t"), (30, "g"), (20, "m"), (10, "k")] {
        let unit = 1u64 << shift;
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{}", bytes / unit, suffix);
        }
    }
    format!("{bytes}")
}

/// Formats nanoseconds with a unit suited to the magnitude.
pub fn format_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert_eq!(parse_size("1.5k").unwrap(), 1536);
        assert!(parse_size("k").is_err());
        assert!(parse_size("4x").is_err());
        assert!(parse_size("-4k").is_err());
        assert!(parse_size("1.3").is_err());
        // One unit table, two readers: parse_size stops at t, parse_size_in reads p and e
        // (to say "out of range"), and both read every spelling of the units they share.
        assert_eq!(parse_size("2TiB").unwrap(), 2 << 40);
        assert!(parse_size("1p").is_err() && parse_size("1e").is_err());
        for unit in ["", "b", "k", "KB", "kib", "m", "MiB", "g", "gb", "t", "TiB"] {
            let text = format!("16{unit}");
            let range = SizeRange { name: "any size", min_bytes: 1, max_bytes: 1 << 62, multiple_bytes: 1 };
            assert_eq!(parse_size_in(&text, range).ok(), parse_size(&text).ok(), "{text}");
        }
        assert_eq!(unit_multiplier("PiB"), Some(1 << 50));
        assert_eq!(unit_multiplier("x"), None);
        assert_eq!(format_size(262144), "256k");
        assert_eq!(format_size(1000), "1000");
    }

    #[test]
    fn sizes_of_one_kind_share_bounds_and_words() {
        assert_eq!(parse_size_in("4k", IO_SIZE), Ok(4096));
        assert_eq!(parse_size_in("64m", IO_SIZE), Ok(64 << 20));
        assert_eq!(parse_size_in("512", IO_SIZE), Ok(512));
        assert_eq!(parse_size_in("16g", DEVICE_SIZE), Ok(16 << 30));
        let problem = |t, r| parse_size_in(t, r).unwrap_err().problem;
        assert_eq!(problem("0", IO_SIZE), SizeProblem::OutOfRange);
        assert_eq!(problem("256", IO_SIZE), SizeProblem::OutOfRange);
        assert_eq!(problem("65m", IO_SIZE), SizeProblem::OutOfRange);
        assert_eq!(problem("1000", IO_SIZE), SizeProblem::NotMultiple);
        assert_eq!(problem("1e", IO_SIZE), SizeProblem::OutOfRange);
        assert_eq!(problem("99999999999999999999999999t", DEVICE_SIZE), SizeProblem::OutOfRange);
        assert_eq!(problem("17g", DEVICE_SIZE), SizeProblem::OutOfRange);
        assert_eq!(problem("9g", RAMDISK_SIZE), SizeProblem::OutOfRange);
        assert_eq!(problem("4x", IO_SIZE), SizeProblem::Malformed);
        assert_eq!(problem("-4k", IO_SIZE), SizeProblem::Malformed);
        assert_eq!(problem("", IO_SIZE), SizeProblem::Malformed);
        assert_eq!(problem("1.3k", IO_SIZE), SizeProblem::Malformed);
        // Every refusal is one line naming both bounds.
        for (t, r) in [("0", IO_SIZE), ("x", DEVICE_SIZE), ("1000", IO_SIZE), ("1p", RAMDISK_SIZE)] {
            let m = parse_size_in(t, r).unwrap_err().to_string();
            assert!(
                !m.contains('\n') && m.contains(&format_size(r.min_bytes)) && m.contains(&format_size(r.max_bytes)),
                "{m}"
            );
        }
        assert_eq!(IO_SIZE.check(100).unwrap_err().problem, SizeProblem::OutOfRange);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("500ms").unwrap(), 500_000_000);
        assert_eq!(parse_duration_ns("80us").unwrap(), 80_000);
        assert_eq!(parse_duration_ns("2s").unwrap(), 2_000_000_000);
        assert!(parse_duration_ns("10").is_err());
        assert!(parse_duration_ns("soon").is_err());
    }
}

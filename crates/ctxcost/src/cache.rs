//! Cache sizes from /sys/devices/system/cpu/cpu0/cache, so the indirect-cost sweep includes
//! the L2 and last-level sizes of this host and the plot can mark them.

use serde::{Deserialize, Serialize};

/// Data/unified cache sizes of cpu0; a level the kernel does not report is None.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheSizes {
    pub l1d_bytes: Option<u64>,
    pub l2_bytes: Option<u64>,
    /// The highest level reported (L3 here, L2 on machines without an L3).
    pub llc_bytes: Option<u64>,
}

/// Parses sysfs sizes such as "48K", "1024K", "32768K", "2M".
pub fn parse_sysfs_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, mult) = match t.chars().last()? {
        'K' | 'k' => (&t[..t.len() - 1], 1u64 << 10),
        'M' | 'm' => (&t[..t.len() - 1], 1u64 << 20),
        'G' | 'g' => (&t[..t.len() - 1], 1u64 << 30),
        _ => (t, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

/// Reads cpu0's cache directory; missing entries give None rather than an error because
/// some VMs hide the cache topology.
pub fn read_cache_sizes() -> CacheSizes {
    let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut sizes = CacheSizes::default();
    let mut highest = 0u32;
    // index0..index15 covers every cache hierarchy seen in practice; the bound keeps it finite.
    for index in 0..16 {
        let dir = base.join(format!("index{index}"));
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size")) else {
            continue;
        };
        let (Ok(level), Some(bytes)) = (level.trim().parse::<u32>(), parse_sysfs_size(&size)) else {
            continue;
        };
        if kind.trim() == "Instruction" {
            continue;
        }
        match level {
            1 => sizes.l1d_bytes = Some(bytes),
            2 => sizes.l2_bytes = Some(bytes),
            _ => {}
        }
        if level >= highest && level >= 2 {
            highest = level;
            sizes.llc_bytes = Some(bytes);
        }
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_sizes_parse() {
        assert_eq!(parse_sysfs_size("48K\n"), Some(48 << 10));
        assert_eq!(parse_sysfs_size("32768K"), Some(32 << 20));
        assert_eq!(parse_sysfs_size("2M"), Some(2 << 20));
        assert_eq!(parse_sysfs_size("512"), Some(512));
        assert_eq!(parse_sysfs_size("x"), None);
    }
}

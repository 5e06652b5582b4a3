//! Table-driven latency: service time per op x access pattern x transfer size.
//!
//! A table has rows of transfer sizes, each with four latencies (random read, random write,
//! sequential read, sequential write), the layout of the fifth seed's "Performance Numbers
//! Used for the Baseline Storage Device" table. Between two rows the latency is linearly
//! interpolated on the size; below the first row a request costs the first row; beyond the
//! last row it costs the last row plus the extra bytes at the last row's bandwidth (size /
//! latency of that row), so large requests scale as a transfer would.
//!
//! Text format (CSV, one row per line, `#` starts a comment, blank lines ignored):
//!
//! ```text
//! size,random_read,random_write,sequential_read,sequential_write
//! 512,0.0051ms,1.1136ms,0.0019ms,0.0092ms
//! 4k,5700ns,1.1601ms,2.7us,11.5us
//! ```
//!
//! Sizes take the usual suffixes (4k = 4096), latencies need a unit. Rows must grow
//! strictly in size. Non-goals: per-offset effects (the table knows no geometry) and
//! interpolation on a log scale (the seed gives no rule; linear is the plain reading).

use std::borrow::Cow;

use serde::Serialize;

use crate::model::Op;
use smartcon_util::error::{Error, ErrorKind};
use smartcon_util::units::parse_duration_ns;

use crate::usage;

/// Random or sequential: sequential means the request starts where the previous request on
/// its stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    Random,
    Sequential,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Random => "random",
            Pattern::Sequential => "sequential",
        }
    }
}

/// One row: a transfer size and its four latencies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TableRow {
    pub size_bytes: u64,
    /// Random read, random write, sequential read, sequential write (the seed's columns).
    pub latency_ns: [u64; 4],
}

/// The column of a (op, pattern) pair in [`TableRow::latency_ns`].
pub fn column(op: Op, pattern: Pattern) -> usize {
    match (pattern, op) {
        (Pattern::Random, Op::Read) => 0,
        (Pattern::Random, Op::Write) => 1,
        (Pattern::Sequential, Op::Read) => 2,
        (Pattern::Sequential, Op::Write) => 3,
    }
}

/// A latency table, built in (borrowed) or loaded from text (owned).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencyTable {
    pub rows: Cow<'static, [TableRow]>,
}

const fn row(size_bytes: u64, rr: u64, rw: u64, sr: u64, sw: u64) -> TableRow {
    TableRow { size_bytes, latency_ns: [rr, rw, sr, sw] }
}

/// The fifth seed's baseline device (Transcend UHS Class 1 SD card), "Performance Numbers
/// Used for the Baseline Storage Device", converted from ms with four decimals to ns exactly.
pub const SDCARD_ROWS: [TableRow; 8] = [
    row(512, 5_100, 1_113_600, 1_900, 9_200),
    row(1 << 10, 5_300, 1_112_300, 2_000, 9_500),
    row(2 << 10, 5_400, 1_113_600, 2_300, 9_900),
    row(4 << 10, 5_700, 1_160_100, 2_700, 11_500),
    row(8 << 10, 6_300, 1_285_300, 3_300, 13_600),
    row(16 << 10, 7_100, 1_257_900, 3_600, 3_500),
    row(32 << 10, 9_600, 2_222_200, 6_800, 7_000),
    row(64 << 10, 15_100, 2_702_700, 13_900, 13_700),
];

impl LatencyTable {
    pub const fn builtin(rows: &'static [TableRow]) -> LatencyTable {
        LatencyTable { rows: Cow::Borrowed(rows) }
    }

    /// Checks the invariants the lookup relies on.
    pub fn validate(rows: &[TableRow]) -> Result<(), Error> {
        if rows.is_empty() {
            return Err(usage("a latency table needs at least one row"));
        }
        for pair in rows.windows(2) {
            if pair[1].size_bytes <= pair[0].size_bytes {
                return Err(usage(format!("row sizes must grow: {} after {}", pair[1].size_bytes, pair[0].size_bytes)));
            }
        }
        for r in rows {
            if r.size_bytes == 0 || r.latency_ns.contains(&0) {
                return Err(usage(format!("row {}: sizes and latencies must be positive", r.size_bytes)));
            }
        }
        Ok(())
    }

    /// Service time of one request (no queueing), rounded to the nearest ns.
    pub fn service_ns(&self, op: Op, pattern: Pattern, bytes: u64) -> u64 {
        let col = column(op, pattern);
        let rows = &self.rows[..];
        let first = rows[0];
        if bytes <= first.size_bytes {
            return first.latency_ns[col];
        }
        let last = rows[rows.len() - 1];
        if bytes >= last.size_bytes {
            // The last row's bandwidth for the bytes beyond it.
            let extra = (bytes - last.size_bytes) as u128 * last.latency_ns[col] as u128;
            let extra_ns = (extra + last.size_bytes as u128 / 2) / last.size_bytes as u128;
            return last.latency_ns[col] + extra_ns as u64;
        }
        // rows[i].size < bytes <= rows[i + 1].size
        let i = rows.partition_point(|r| r.size_bytes < bytes) - 1;
        let (a, b) = (rows[i], rows[i + 1]);
        let (y0, y1) = (a.latency_ns[col] as i128, b.latency_ns[col] as i128);
        let span = (b.size_bytes - a.size_bytes) as i128;
        let num = (y1 - y0) * (bytes - a.size_bytes) as i128;
        // Round half away from zero so a falling segment rounds like a rising one.
        let step = if num >= 0 { (num + span / 2) / span } else { (num - span / 2) / span };
        (y0 + step) as u64
    }

    /// Parses the CSV text format (see the module header). Errors name the line.
    pub fn parse_csv(text: &str) -> Result<LatencyTable, Error> {
        let mut rows = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line_number = index + 1;
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            if fields[0].eq_ignore_ascii_case("size") {
                continue; // the header
            }
            if fields.len() != 5 {
                return Err(usage(format!(
                    "line {line_number}: expected 5 fields (size and four latencies), got {}",
                    fields.len()
                )));
            }
            let size_bytes = smartcon_util::units::parse_size_in(fields[0], smartcon_util::units::IO_SIZE)
                .map_err(|e| usage(format!("line {line_number}: {e}")))?;
            let mut latency_ns = [0u64; 4];
            for (slot, field) in latency_ns.iter_mut().zip(&fields[1..]) {
                *slot = parse_duration_ns(field).map_err(|e| usage(format!("line {line_number}: {e}")))?;
            }
            rows.push(TableRow { size_bytes, latency_ns });
        }
        Self::validate(&rows)?;
        Ok(LatencyTable { rows: Cow::Owned(rows) })
    }

    /// Loads a table file.
    pub fn load(path: &str) -> Result<LatencyTable, Error> {
        let text = smartcon_util::paths::read_text(std::path::Path::new(path))
            .map_err(|e| Error::with_source(ErrorKind::Usage, format!("cannot read latency table {path}"), e))?;
        Self::parse_csv(&text).map_err(|e| Error { message: format!("{path}: {}", e.message), ..e })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sd() -> LatencyTable {
        LatencyTable::builtin(&SDCARD_ROWS)
    }

    #[test]
    fn rows_are_exact_and_between_rows_interpolates() {
        let t = sd();
        assert_eq!(t.service_ns(Op::Write, Pattern::Random, 4096), 1_160_100);
        assert_eq!(t.service_ns(Op::Read, Pattern::Sequential, 65536), 13_900);
        // Halfway between 4k (5.7 us) and 8k (6.3 us): 6.0 us.
        assert_eq!(t.service_ns(Op::Read, Pattern::Random, 6144), 6_000);
        // A falling segment: sequential write 8k 13.6 us, 16k 3.5 us; 12k is halfway.
        assert_eq!(t.service_ns(Op::Write, Pattern::Sequential, 12 << 10), 8_550);
        // Below the first row: the first row.
        assert_eq!(t.service_ns(Op::Read, Pattern::Random, 1), 5_100);
        // Beyond: 128k random read = 15.1 us + 64k at 64k/15.1us = 30.2 us.
        assert_eq!(t.service_ns(Op::Read, Pattern::Random, 128 << 10), 30_200);
    }

    #[test]
    fn csv_round_trip_and_errors_name_the_line() {
        let text = "# sd card\nsize,random_read,random_write,sequential_read,sequential_write\n\
                    512,0.0051ms,1.1136ms,0.0019ms,0.0092ms\n4k,5.7us,1160.1us,2.7us,11.5us\n";
        let t = LatencyTable::parse_csv(text).unwrap();
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[0], SDCARD_ROWS[0]);
        assert_eq!(t.rows[1], SDCARD_ROWS[3]);
        let bad = LatencyTable::parse_csv("512,1us,1us,1us\n").unwrap_err().message;
        assert!(bad.starts_with("line 1:"), "{bad}");
        let bad = LatencyTable::parse_csv("512,1us,1us,1us,1us\n\n256,1us,1us,1us,fast\n").unwrap_err().message;
        assert!(bad.starts_with("line 3:"), "{bad}");
        assert!(LatencyTable::parse_csv("4k,1us,1us,1us,1us\n512,1us,1us,1us,1us\n").is_err());
        assert!(LatencyTable::parse_csv("# nothing\n").is_err());
    }
}

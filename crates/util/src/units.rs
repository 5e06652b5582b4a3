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

/// Parses a size such as `4096`, `4k`, `4KiB`, `1m`, `2G` into bytes.
pub fn parse_size(text: &str) -> Result<u64, ParseError> {
    let err = || ParseError { text: text.to_string(), expected: "a size such as 4096, 4k, 1m or 2g" };
    let (value, unit) = split_number(text).ok_or_else(err)?;
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(err()),
    };
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes > u64::MAX as f64 / 2.0 || bytes.fract() != 0.0 {
        return Err(err());
    }
    Ok(bytes as u64)
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
        assert_eq!(format_size(262144), "256k");
        assert_eq!(format_size(1000), "1000");
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

//! Exact latency summaries (every sample kept: replays are bounded by their I/O count, and
//! exact means let a test compare the seed's table to the nanosecond).

use serde::Serialize;

/// Mean and percentiles of one set of latencies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    pub ios: u64,
    pub lat_ns_mean: f64,
    pub lat_ns_p50: u64,
    pub lat_ns_p99: u64,
    pub lat_ns_p999: u64,
    pub lat_ns_max: u64,
}

/// The sample at quantile `q` (nearest rank), reordering `v` partially.
pub fn quantile(v: &mut [u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    *v.select_nth_unstable(rank).1
}

impl LatencySummary {
    pub fn of(v: &mut [u64]) -> LatencySummary {
        if v.is_empty() {
            return LatencySummary::default();
        }
        let sum: u128 = v.iter().map(|&x| x as u128).sum();
        LatencySummary {
            ios: v.len() as u64,
            lat_ns_mean: sum as f64 / v.len() as f64,
            lat_ns_p50: quantile(v, 0.50),
            lat_ns_p99: quantile(v, 0.99),
            lat_ns_p999: quantile(v, 0.999),
            lat_ns_max: v.iter().copied().max().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        let s = LatencySummary::of(&mut v);
        assert_eq!((s.ios, s.lat_ns_p50, s.lat_ns_p99, s.lat_ns_max), (100, 50, 99, 100));
        assert_eq!(s.lat_ns_mean, 50.5);
        assert_eq!(LatencySummary::of(&mut []).ios, 0);
    }
}

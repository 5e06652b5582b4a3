//! Latency summaries in constant memory: an HDR histogram per set of latencies (3
//! significant digits: a percentile is within 0.1% above the exact one) beside the exact
//! count, sum, minimum and maximum, so the mean and the extremes are exact and a set of
//! set of at most [`DISTINCT_MAX`] distinct latencies (a table-driven device at low depth)
//! reports exact percentiles. [`LatencySummary::of`] is the exact
//! computation over kept samples (small sets, and the tests that hold the histogram to it).

use hdrhistogram::Histogram;
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
    /// The exact summary of kept samples.
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

/// The largest latency the histogram tells apart (an hour); longer ones count as an hour
/// in the percentiles (the maximum and the mean stay exact).
pub const HIST_NS_MAX: u64 = 3_600_000_000_000;
/// Significant digits of the histogram: a percentile's relative error is below 10^-3.
pub const HIST_DIGITS: u8 = 3;

/// Distinct latencies counted exactly before only the histogram is kept.
pub const DISTINCT_MAX: usize = 64;

/// Latencies recorded in constant memory (about 200 KB, whatever their number).
#[derive(Debug, Clone)]
pub struct LatencyHist {
    hist: Histogram<u64>,
    sum: u128,
    min: u64,
    max: u64,
    /// (value, count) sorted by value while there are at most DISTINCT_MAX values.
    distinct: Option<Vec<(u64, u64)>>,
}

impl Default for LatencyHist {
    fn default() -> LatencyHist {
        LatencyHist::new()
    }
}

impl LatencyHist {
    pub fn new() -> LatencyHist {
        let hist = Histogram::new_with_bounds(1, HIST_NS_MAX, HIST_DIGITS).expect("valid histogram bounds");
        LatencyHist { hist, sum: 0, min: u64::MAX, max: 0, distinct: Some(Vec::new()) }
    }

    #[inline]
    fn count_distinct(distinct: &mut Option<Vec<(u64, u64)>>, ns: u64, n: u64) {
        if let Some(d) = distinct {
            // A table-driven device repeats its last latency: check the smallest first.
            if let Some(e) = d.first_mut().filter(|e| e.0 == ns) {
                e.1 += n;
                return;
            }
            match d.binary_search_by_key(&ns, |e| e.0) {
                Ok(i) => d[i].1 += n,
                Err(_) if d.len() == DISTINCT_MAX => *distinct = None,
                Err(i) => d.insert(i, (ns, n)),
            }
        }
    }

    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.record_n(ns, 1);
    }

    /// Records `n` latencies of `ns` at once (a run of equal ones).
    #[inline(always)]
    pub fn record_n(&mut self, ns: u64, n: u64) {
        Self::count_distinct(&mut self.distinct, ns, n);
        self.hist.saturating_record_n(ns, n);
        self.sum += u128::from(ns) * u128::from(n);
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    pub fn add(&mut self, other: &LatencyHist) {
        // Same bounds: `add` cannot fail.
        self.hist.add(&other.hist).expect("histograms of equal bounds");
        match &other.distinct {
            Some(d) => d.iter().for_each(|&(v, n)| Self::count_distinct(&mut self.distinct, v, n)),
            None => self.distinct = None,
        }
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// The nearest-rank quantile: exact while there were at most [`DISTINCT_MAX`] distinct
    /// values, else the top of the exact value's histogram bucket (at most 0.1% above it),
    /// never outside the exact minimum and maximum.
    pub fn quantile(&self, q: f64) -> u64 {
        let n = self.count();
        if n == 0 {
            return 0;
        }
        if let Some(d) = &self.distinct {
            let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
            let mut seen = 0;
            for &(v, c) in d {
                seen += c;
                if seen >= rank {
                    return v;
                }
            }
        }
        self.hist.value_at_quantile(q).clamp(self.min, self.max)
    }

    pub fn summary(&self) -> LatencySummary {
        let n = self.count();
        if n == 0 {
            return LatencySummary::default();
        }
        LatencySummary {
            ios: n,
            lat_ns_mean: self.sum as f64 / n as f64,
            lat_ns_p50: self.quantile(0.50),
            lat_ns_p99: self.quantile(0.99),
            lat_ns_p999: self.quantile(0.999),
            lat_ns_max: self.max,
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

    #[test]
    fn the_histogram_is_within_its_precision_of_the_exact_summary() {
        // A skewed set over six decades (xorshift), exact against histogram.
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut v: Vec<u64> = (0..200_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let decade = 10u64.pow((state % 6) as u32 + 3);
                decade + (state >> 20) % (9 * decade)
            })
            .collect();
        let mut h = LatencyHist::new();
        v.iter().for_each(|&x| h.record(x));
        let (exact, approx) = (LatencySummary::of(&mut v), h.summary());
        assert_eq!((exact.ios, exact.lat_ns_max), (approx.ios, approx.lat_ns_max));
        assert_eq!(exact.lat_ns_mean, approx.lat_ns_mean);
        for (e, a) in [
            (exact.lat_ns_p50, approx.lat_ns_p50),
            (exact.lat_ns_p99, approx.lat_ns_p99),
            (exact.lat_ns_p999, approx.lat_ns_p999),
        ] {
            assert!(a >= e && a - e <= e / 1000, "{a} vs {e}");
        }
        // Few distinct latencies come out exact, also merged.
        let mut few = LatencyHist::new();
        (0..10).for_each(|_| few.record(1_160_100));
        (0..11).for_each(|_| few.record(9_200));
        assert_eq!(few.summary().lat_ns_p50, 9_200);
        let mut more = LatencyHist::new();
        (0..2).for_each(|_| more.record(1_160_100));
        few.add(&more);
        assert_eq!(few.summary().lat_ns_p50, 1_160_100);
        assert_eq!(LatencyHist::new().summary(), LatencySummary::default());
    }
}

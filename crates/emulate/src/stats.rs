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

/// Latencies recorded in constant memory (about 270 KB, whatever their number).
///
/// The histogram's counts are kept here, in the bins an `hdrhistogram::Histogram` of
/// [`HIST_NS_MAX`] and [`HIST_DIGITS`] has (the same bin for every value, the same
/// clamping of one beyond its range), and made into that histogram only to be read
/// ([`LatencyHist::histogram`]): its recording was a call per I/O that also tracked a
/// minimum, a maximum and a total this type keeps itself (6% of a streamed replay's CPU).
/// `the_bins_are_the_histograms` holds the two equal.
#[derive(Debug, Clone)]
pub struct LatencyHist {
    counts: Vec<u64>,
    total: u64,
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

/// The histogram's geometry for a lowest value of 1 and [`HIST_DIGITS`] digits, as
/// `hdrhistogram` derives it: sub-buckets of 2^11 (the least power of two of at least
/// 2 x 10^3), unit 1, so a value's bucket is `53 - lz(value | 2047)` and its bin
/// `(bucket + 1) * 1024 + (value >> bucket) - 1024`.
const SUB_BUCKET_HALF_BITS: u32 = 10;
const SUB_BUCKET_MASK: u64 = (1 << (SUB_BUCKET_HALF_BITS + 1)) - 1;
const LEADING_ZERO_BASE: u32 = 64 - (SUB_BUCKET_HALF_BITS + 1);
const _: () = assert!(HIST_DIGITS == 3, "the geometry above is for 3 digits");

/// The bin of `value` (beyond the last bin for a value past the histogram's range).
#[inline(always)]
fn bin(value: u64) -> usize {
    let bucket = LEADING_ZERO_BASE - (value | SUB_BUCKET_MASK).leading_zeros();
    (((bucket + 1) << SUB_BUCKET_HALF_BITS) as usize + (value >> bucket) as usize) - (1 << SUB_BUCKET_HALF_BITS)
}

/// The least value of bin `i` (which `bin` maps back to `i`).
fn bin_value(i: usize) -> u64 {
    let half = 1usize << SUB_BUCKET_HALF_BITS;
    let bucket = (i >> SUB_BUCKET_HALF_BITS).saturating_sub(1);
    let sub = if i < 2 * half { i } else { (i & (half - 1)) + half };
    (sub as u64) << bucket
}

/// The histogram's number of bins: buckets of 2048 sub-buckets until one holds
/// [`HIST_NS_MAX`], plus one, by 1024 (as `hdrhistogram` sizes its counts).
const BINS: usize = {
    let (mut untrackable, mut buckets) = (1u64 << (SUB_BUCKET_HALF_BITS + 1), 1usize);
    while untrackable <= HIST_NS_MAX {
        untrackable <<= 1;
        buckets += 1;
    }
    (buckets + 1) << SUB_BUCKET_HALF_BITS
};

fn empty_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_NS_MAX, HIST_DIGITS).expect("valid histogram bounds")
}

impl LatencyHist {
    pub fn new() -> LatencyHist {
        LatencyHist { counts: vec![0; BINS], total: 0, sum: 0, min: u64::MAX, max: 0, distinct: Some(Vec::new()) }
    }

    /// The histogram of what was recorded, as its `saturating_record_n` would have made it.
    pub fn histogram(&self) -> Histogram<u64> {
        let mut hist = empty_histogram();
        for (i, &n) in self.counts.iter().enumerate().filter(|&(_, &n)| n > 0) {
            hist.saturating_record_n(bin_value(i), n);
        }
        hist
    }

    /// [`LatencyHist::histogram`]'s `value_at_quantile(q)`, from the counts (no histogram
    /// made: a summary asks three times, which cost a short replay 5% of its CPU): the
    /// first bin whose running count reaches `ceil(q * total)` (at least 1), its lowest
    /// value for `q = 0`, else its highest.
    fn value_at_quantile(&self, q: f64) -> u64 {
        let q = q.min(1.0);
        let target = ((q * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= target {
                let v = bin_value(i);
                if q == 0.0 {
                    return v;
                }
                let bucket = LEADING_ZERO_BASE - (v | SUB_BUCKET_MASK).leading_zeros();
                return v + (1 << bucket) - 1;
            }
        }
        0
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
        // Past its bins, the histogram's saturating record counts a value as its highest
        // trackable one.
        let i = bin(ns);
        let i = if i < self.counts.len() { i } else { bin(HIST_NS_MAX) };
        self.counts[i] = self.counts[i].saturating_add(n);
        self.total = self.total.saturating_add(n);
        self.sum += u128::from(ns) * u128::from(n);
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn add(&mut self, other: &LatencyHist) {
        for (mine, &theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine = mine.saturating_add(theirs);
        }
        self.total = self.total.saturating_add(other.total);
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
        self.value_at_quantile(q).clamp(self.min, self.max)
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
    fn the_bins_are_the_histograms() {
        // Every bin's least value comes back to it, and so do the values around each bin's
        // edges; random values of every magnitude, 0, the range's end and beyond, and
        // u64::MAX give the histogram that hdrhistogram's own recording gives.
        let h = empty_histogram();
        let bins = h.distinct_values();
        assert_eq!(bins, BINS);
        for i in 0..bins {
            let v = bin_value(i);
            assert_eq!(bin(v), i, "bin {i}'s value {v}");
            assert_eq!(h.lowest_equivalent(v), v, "bin {i} starts at {v}");
            assert_eq!(bin(h.highest_equivalent(v)), i);
            if v > 0 {
                assert_eq!(bin(v - 1), i - 1);
            }
        }
        let mut ours = LatencyHist::new();
        let mut theirs = empty_histogram();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut values = vec![0, 1, 2047, 2048, HIST_NS_MAX - 1, HIST_NS_MAX, HIST_NS_MAX + 1, u64::MAX];
        values.extend((0..64).map(|b| 1u64 << b));
        values.extend((0..300_000).map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state >> (state % 64)
        }));
        for (k, &v) in values.iter().enumerate() {
            let n = 1 + (k % 3) as u64;
            ours.record_n(v, n);
            theirs.saturating_record_n(v, n);
        }
        let rebuilt = ours.histogram();
        assert!(rebuilt == theirs, "the histograms differ");
        assert_eq!(ours.count(), theirs.len());
        let fixed = [0.0, 0.5, 0.99, 0.999, 0.9999, 1.0, 1.5];
        for q in (0..=10_000).map(|k| f64::from(k) / 10_000.0).chain(fixed) {
            let want = theirs.value_at_quantile(q);
            assert_eq!(rebuilt.value_at_quantile(q), want, "q {q}");
            assert_eq!(ours.value_at_quantile(q), want, "q {q}");
        }
        // Merged as hdrhistogram merges.
        let mut other = LatencyHist::new();
        other.record_n(12_345, 7);
        ours.add(&other);
        theirs.saturating_record_n(12_345, 7);
        assert!(ours.histogram() == theirs, "merged histograms differ");
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

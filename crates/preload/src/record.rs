//! What one process image did under the library: the counters merged over its threads,
//! and the `preload_process` record it appends to `SMARTCON_PRELOAD_STATS` (one JSON line)
//! when it exits, calls `_exit` or executes another program. The record's type is the
//! contract's ([`smartcon_preload_contract::record::ProcessRecord`]), which says how a
//! reader sums records.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use smartcon_engine::decision::{Reason, Strategy};
use smartcon_engine::stats::new_histogram;
pub use smartcon_preload_contract::record::ProcessRecord;
use smartcon_preload_contract::record::Record;

/// Counters of taken I/Os: one port's, one thread's or one process's.
#[derive(Clone)]
pub struct Counters {
    pub ios: u64,
    pub bytes: u64,
    pub by_strategy: [u64; Strategy::COUNT],
    pub by_reason: [u64; Reason::ALL.len()],
    pub hist: Histogram<u64>,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            ios: 0,
            bytes: 0,
            by_strategy: [0; Strategy::COUNT],
            by_reason: [0; Reason::ALL.len()],
            hist: new_histogram(),
        }
    }
}

impl Counters {
    pub fn merge(&mut self, other: &Counters) {
        self.ios += other.ios;
        self.bytes += other.bytes;
        for (a, b) in self.by_strategy.iter_mut().zip(other.by_strategy) {
            *a += b;
        }
        for (a, b) in self.by_reason.iter_mut().zip(other.by_reason) {
            *a += b;
        }
        // Both histograms have the same bounds (new_histogram), so adding cannot fail.
        let _ = self.hist.add(&other.hist);
    }
}

/// The `preload_process` record of one process image (the contract's type).
pub fn process_record(pid: u32, image: String, c: &Counters, passed_through: u64, notes: Vec<String>) -> ProcessRecord {
    ProcessRecord {
        kind: ProcessRecord::TYPE.into(),
        pid,
        image,
        ios: c.ios,
        bytes: c.bytes,
        by_strategy: strategies_by_name(&c.by_strategy),
        by_reason: reasons_by_name(&c.by_reason),
        passed_through,
        lat_ns: c.hist.iter_recorded().map(|v| [v.value_iterated_to(), v.count_at_value()]).collect(),
        notes,
        ..Default::default()
    }
}

/// Counts indexed by [`Strategy::index`], by name (the zeros left out).
pub fn strategies_by_name(counts: &[u64; Strategy::COUNT]) -> BTreeMap<String, u64> {
    Strategy::ALL.iter().filter(|s| counts[s.index()] > 0).map(|s| (s.name().to_string(), counts[s.index()])).collect()
}

/// Counts indexed by [`Reason::index`], by name (the zeros left out).
pub fn reasons_by_name(counts: &[u64; Reason::ALL.len()]) -> BTreeMap<String, u64> {
    Reason::ALL.iter().filter(|r| counts[r.index()] > 0).map(|r| (r.name().to_string(), counts[r.index()])).collect()
}

/// A record's latency histogram back from its buckets.
pub fn histogram(r: &ProcessRecord) -> Histogram<u64> {
    let mut h = new_histogram();
    for [v, n] in &r.lat_ns {
        h.saturating_record_n(*v, *n);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_its_counters_and_percentiles() {
        let mut c = Counters::default();
        for (i, lat) in [50_000u64, 51_000, 52_000, 900_000].iter().enumerate() {
            c.ios += 1;
            c.bytes += 4096;
            let s = if i == 3 { Strategy::Block } else { Strategy::Spin };
            c.by_strategy[s.index()] += 1;
            c.hist.record(*lat).unwrap();
        }
        c.by_reason[Reason::CpuAvailable.index()] += 3;
        let r = process_record(7, "7-1".into(), &c, 2, vec!["note".into()]);
        let line = serde_json::to_string(&r).unwrap();
        let back: ProcessRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.by_strategy.get("spin"), Some(&3));
        assert_eq!(back.by_strategy.get("block"), Some(&1));
        assert_eq!(back.by_reason.get("cpu_available"), Some(&3));
        let h = histogram(&back);
        assert_eq!(h.len(), 4);
        assert_eq!(h.value_at_quantile(0.5), c.hist.value_at_quantile(0.5));
        assert_eq!(h.max(), c.hist.max());
    }
}

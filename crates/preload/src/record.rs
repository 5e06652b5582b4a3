//! What one process image did under the library: the counters merged over its threads,
//! and the record it appends to `SMARTCON_PRELOAD_STATS` (one JSON line) when it exits,
//! calls `_exit` or executes another program.
//!
//! A record is cumulative for its image (`image` is unique per process image: a fork or an
//! exec starts a new one), so a reader keeps the last record of each image and sums over
//! images: an image that wrote at a failed exec and again at exit is counted once.
//! Latencies travel as the histogram's recorded buckets (`[value_ns, count]` pairs), so
//! the reader merges exact histograms, not percentiles.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use smartcon_engine::decision::{Reason, Strategy};
use smartcon_engine::stats::new_histogram;

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

/// The JSON line one process image appends.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ProcessRecord {
    /// Always `preload_process`.
    #[serde(rename = "type")]
    pub kind: String,
    pub pid: u32,
    /// Unique per process image (pid, start time, fork count).
    pub image: String,
    pub ios: u64,
    pub bytes: u64,
    pub by_strategy: BTreeMap<String, u64>,
    pub by_reason: BTreeMap<String, u64>,
    /// Calls on taken descriptors that went to the real system call instead (unaligned
    /// O_DIRECT buffers, errors, vectors of more than one buffer, re-entrant calls).
    pub passed_through: u64,
    /// `passed_through` by reason (`refused`, `reentrant`, `no_port`, `shared_offset`,
    /// `append`, `vectored`, `rwf_flags`).
    #[serde(default)]
    pub passed_through_by: BTreeMap<String, u64>,
    /// Ways of reaching data the library saw and did not take: `io_uring` (rings set up),
    /// `libaio` (requests submitted), `mmap` (file mappings), `raw_syscall` (I/O through
    /// syscall(2)).
    #[serde(default)]
    pub not_taken: BTreeMap<String, u64>,
    /// Taken `preadv2`/`pwritev2` calls that asked to be polled (RWF_HIPRI).
    #[serde(default)]
    pub hipri: u64,
    /// The latency histogram: `[value_ns, count]` for each recorded bucket.
    pub lat_ns: Vec<[u64; 2]>,
    /// Lines the user should see once (no profile for a device, ...).
    pub notes: Vec<String>,
}

pub const RECORD_TYPE: &str = "preload_process";

impl ProcessRecord {
    pub fn new(pid: u32, image: String, c: &Counters, passed_through: u64, notes: Vec<String>) -> ProcessRecord {
        ProcessRecord {
            kind: RECORD_TYPE.into(),
            pid,
            image,
            ios: c.ios,
            bytes: c.bytes,
            by_strategy: Strategy::ALL
                .iter()
                .filter(|s| c.by_strategy[s.index()] > 0)
                .map(|s| (s.name().to_string(), c.by_strategy[s.index()]))
                .collect(),
            by_reason: Reason::ALL
                .iter()
                .filter(|r| c.by_reason[r.index()] > 0)
                .map(|r| (r.name().to_string(), c.by_reason[r.index()]))
                .collect(),
            passed_through,
            passed_through_by: BTreeMap::new(),
            not_taken: BTreeMap::new(),
            hipri: 0,
            lat_ns: c.hist.iter_recorded().map(|v| [v.value_iterated_to(), v.count_at_value()]).collect(),
            notes,
        }
    }

    /// The latency histogram back from its buckets.
    pub fn histogram(&self) -> Histogram<u64> {
        let mut h = new_histogram();
        for [v, n] in &self.lat_ns {
            h.saturating_record_n(*v, *n);
        }
        h
    }
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
        let r = ProcessRecord::new(7, "7-1".into(), &c, 2, vec!["note".into()]);
        let line = serde_json::to_string(&r).unwrap();
        let back: ProcessRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.by_strategy.get("spin"), Some(&3));
        assert_eq!(back.by_strategy.get("block"), Some(&1));
        assert_eq!(back.by_reason.get("cpu_available"), Some(&3));
        let h = back.histogram();
        assert_eq!(h.len(), 4);
        assert_eq!(h.value_at_quantile(0.5), c.hist.value_at_quantile(0.5));
        assert_eq!(h.max(), c.hist.max());
    }
}

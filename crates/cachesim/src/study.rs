//! One-shot studies of a trace file and their records: [`simulate`] a whole trace through a
//! hierarchy ([`CachesimRecord`]), count what a trace holds ([`TraceRecord`]), and compare
//! a simulation with cachegrind's counts ([`CrosscheckRecord`], [`parse_cachegrind`]).
//!
//! A trace is verified to its end before a result exists: a truncated or corrupt trace is
//! an error, never a shorter result. Non-goals: running valgrind (the CLI spawns it) and
//! the wall clock (callers time a simulation and hand `wall_ns` in).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::geometry::Geometry;
use crate::hierarchy::{Hierarchy, HierarchyConfig, HierarchyStats, Mode};
use crate::policy::{Drrip, Lru, PolicyKind, ReplacementPolicy, Ship};
use crate::trace::{AccessKind, TraceReader};
use crate::{Error, ErrorKind, Result};

/// Records between two looks at the stop flag.
const STOP_CHECK_RECORDS: u64 = 1 << 22;

/// Simulates the whole trace; any trace error, or `stop`, aborts before results exist.
pub fn simulate(
    config: HierarchyConfig,
    policy: PolicyKind,
    trace: &Path,
    stop: &AtomicBool,
) -> Result<HierarchyStats> {
    fn with<P: ReplacementPolicy>(config: HierarchyConfig, trace: &Path, stop: &AtomicBool) -> Result<HierarchyStats> {
        let mut h: Hierarchy<P> = Hierarchy::new(config)?;
        let mut reader = TraceReader::open(trace)?;
        let mut n = 0u64;
        while let Some(r) = reader.next_record()? {
            h.access(&r);
            n += 1;
            if n.is_multiple_of(STOP_CHECK_RECORDS) && stop.load(Ordering::Relaxed) {
                return Err(Error::new(
                    ErrorKind::Interrupted,
                    format!("interrupted after {n} records; no results printed"),
                ));
            }
        }
        Ok(h.stats())
    }
    match policy {
        PolicyKind::Lru => with::<Lru>(config, trace, stop),
        PolicyKind::Drrip => with::<Drrip>(config, trace, stop),
        PolicyKind::Ship => with::<Ship>(config, trace, stop),
    }
}

/// The JSON record of one simulation.
#[derive(Debug, Serialize)]
pub struct CachesimRecord {
    pub r#type: &'static str,
    pub trace: String,
    pub mode: &'static str,
    pub policy: &'static str,
    pub line_bytes: u32,
    pub l1i_size_bytes: u64,
    pub l1d_size_bytes: u64,
    pub l2_size_bytes: Option<u64>,
    pub ll_size_bytes: u64,
    pub ll_ways: u32,
    pub records: u64,
    pub instructions: u64,
    pub cycles: u64,
    pub ipc: f64,
    pub l1i_accesses: u64,
    pub l1i_misses: u64,
    pub l1d_accesses: u64,
    pub l1d_misses: u64,
    pub l2_accesses: Option<u64>,
    pub l2_misses: Option<u64>,
    pub ll_accesses: u64,
    pub ll_hits: u64,
    pub ll_misses: u64,
    /// Wall-clock time of the simulation, including reading the trace.
    pub wall_ns: u64,
    pub accesses_per_second: f64,
}

impl CachesimRecord {
    pub fn new(trace: &Path, config: &HierarchyConfig, policy: PolicyKind, s: &HierarchyStats, wall_ns: u64) -> Self {
        CachesimRecord {
            r#type: "cachesim",
            trace: trace.display().to_string(),
            mode: if config.mode == Mode::Cachegrind { "cachegrind" } else { "table_ii" },
            policy: policy.name(),
            line_bytes: config.llc.line_bytes,
            l1i_size_bytes: config.l1i.size_bytes,
            l1d_size_bytes: config.l1d.size_bytes,
            l2_size_bytes: config.l2.map(|g| g.size_bytes),
            ll_size_bytes: config.llc.size_bytes,
            ll_ways: config.llc.ways,
            records: s.records,
            instructions: s.instructions,
            cycles: s.cycles,
            ipc: s.ipc(),
            l1i_accesses: s.l1i.accesses,
            l1i_misses: s.l1i.misses,
            l1d_accesses: s.l1d.accesses,
            l1d_misses: s.l1d.misses,
            l2_accesses: s.l2.map(|c| c.accesses),
            l2_misses: s.l2.map(|c| c.misses),
            ll_accesses: s.llc.accesses,
            ll_hits: s.llc.hits,
            ll_misses: s.llc.misses,
            wall_ns,
            accesses_per_second: s.records as f64 / (wall_ns.max(1) as f64 * 1e-9),
        }
    }
}

/// What a trace file holds (the record of every `smartcon trace` action).
#[derive(Debug, Serialize)]
pub struct TraceRecord {
    pub r#type: &'static str,
    pub action: String,
    pub path: String,
    pub records: u64,
    pub fetches: u64,
    pub reads: u64,
    pub writes: u64,
    pub modifies: u64,
    pub size_bytes: u64,
    pub bytes_per_record: f64,
}

/// Reads the whole trace (verifying it) and counts its records by kind.
pub fn describe(action: &str, path: &Path) -> Result<TraceRecord> {
    let mut reader = TraceReader::open(path)?;
    let mut counts = [0u64; 4];
    while let Some(r) = reader.next_record()? {
        counts[r.kind as usize] += 1;
    }
    let records = counts.iter().sum::<u64>();
    let size_bytes =
        std::fs::metadata(path).map_err(|e| crate::error::io(format_args!("cannot read {}", path.display()), e))?.len();
    Ok(TraceRecord {
        r#type: "trace",
        action: action.to_string(),
        path: path.display().to_string(),
        records,
        fetches: counts[AccessKind::Fetch as usize],
        reads: counts[AccessKind::Read as usize],
        writes: counts[AccessKind::Write as usize],
        modifies: counts[AccessKind::Modify as usize],
        size_bytes,
        bytes_per_record: size_bytes as f64 / records.max(1) as f64,
    })
}

/// Our counts beside cachegrind's for one program.
#[derive(Debug, Serialize)]
pub struct CrosscheckRecord {
    pub r#type: &'static str,
    pub program: String,
    pub i1: String,
    pub d1: String,
    pub ll: String,
    pub instructions_smartcon: u64,
    pub instructions_cachegrind: u64,
    pub i1_misses_smartcon: u64,
    pub i1_misses_cachegrind: u64,
    pub d1_misses_smartcon: u64,
    pub d1_misses_cachegrind: u64,
    pub ll_misses_smartcon: u64,
    pub ll_misses_cachegrind: u64,
    pub ll_misses_diff_pct: f64,
}

/// A geometry as cachegrind's `--I1`/`--D1`/`--LL` take it: `SIZE,WAYS,LINE` in bytes.
pub fn cachegrind_geometry(g: &Geometry) -> String {
    format!("{},{},{}", g.size_bytes, g.ways, g.line_bytes)
}

impl CrosscheckRecord {
    /// `cachegrind` are the (event, count) pairs of [`parse_cachegrind`]; a missing event
    /// counts 0.
    pub fn new(
        program: &str,
        l1: &Geometry,
        ll: &Geometry,
        ours: &HierarchyStats,
        cachegrind: &[(String, u64)],
    ) -> Self {
        let get = |name: &str| cachegrind.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v);
        let cg_ll = get("ILmr") + get("DLmr") + get("DLmw");
        CrosscheckRecord {
            r#type: "ets_crosscheck",
            program: program.to_string(),
            i1: cachegrind_geometry(l1),
            d1: cachegrind_geometry(l1),
            ll: cachegrind_geometry(ll),
            instructions_smartcon: ours.instructions,
            instructions_cachegrind: get("Ir"),
            i1_misses_smartcon: ours.l1i.misses,
            i1_misses_cachegrind: get("I1mr"),
            d1_misses_smartcon: ours.l1d.misses,
            d1_misses_cachegrind: get("D1mr") + get("D1mw"),
            ll_misses_smartcon: ours.llc.misses,
            ll_misses_cachegrind: cg_ll,
            ll_misses_diff_pct: 100.0 * (ours.llc.misses as f64 - cg_ll as f64) / (cg_ll.max(1) as f64),
        }
    }
}

/// Reads cachegrind's `events:` and `summary:` lines into (event, count) pairs; a count
/// that is not a number reads as 0.
pub fn parse_cachegrind(text: &str) -> Result<Vec<(String, u64)>> {
    let line = |prefix: &str| {
        text.lines().find_map(|l| l.strip_prefix(prefix)).ok_or_else(|| {
            Error::new(ErrorKind::Usage, format!("cachegrind output has no {} line", prefix.trim_end_matches(':')))
        })
    };
    let events = line("events:")?;
    let values: Vec<u64> = line("summary:")?.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
    Ok(events.split_whitespace().map(String::from).zip(values).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{Synth, SynthKind};
    use crate::trace::TraceWriter;

    #[test]
    fn simulates_a_trace_and_refuses_a_truncated_one() {
        // Removed when dropped, also when the test panics.
        let scratch = tempfile::Builder::new().prefix("smartcon-cachesim-study-").tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let path = dir.join("loop.sct");
        let mut w = TraceWriter::create(&path).unwrap();
        // 512 KiB loop, four passes: misses L2, fits the LLC: only compulsory LL misses.
        for r in Synth::new(SynthKind::Loop, 512 << 10, 1).unwrap().take(4 * 4 * 65536) {
            w.push(&r).unwrap();
        }
        w.finish().unwrap();
        let config = HierarchyConfig::table_ii();
        let go = AtomicBool::new(false);
        let s = simulate(config, PolicyKind::Lru, &path, &go).unwrap();
        assert_eq!(s.llc.misses, 8192 + 16, "512 KiB of data lines plus 1 KiB of code");
        assert_eq!(s.l1d.misses, 4 * 8192);
        let rec = CachesimRecord::new(&path, &config, PolicyKind::Lru, &s, 1);
        assert_eq!((rec.r#type, rec.ll_misses, rec.mode), ("cachesim", 8208, "table_ii"));
        let info = describe("info", &path).unwrap();
        assert_eq!(info.records, 4 * 4 * 65536);
        assert_eq!(info.fetches + info.reads + info.writes + info.modifies, info.records);
        assert_eq!(info.fetches, 3 * (info.records / 4), "three fetches per data access");
        // The stop flag is looked at every 4M records: this trace has 1M, so it ends normally;
        // a longer one stops with Interrupted (covered by the flag's use in the loop).
        let stop = AtomicBool::new(true);
        assert!(simulate(config, PolicyKind::Ship, &path, &stop).is_ok());
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let e = simulate(config, PolicyKind::Lru, &path, &go).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
        assert!(describe("info", &path).is_err());
    }

    #[test]
    fn cachegrind_summary_is_parsed_by_event_name_and_compared() {
        let text = "desc: I1 cache: 32768 B\ncmd: ls\nevents: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw\nfl=x\n1 2 3\nsummary: 100 5 4 40 3 2 20 1 1\n";
        let v = parse_cachegrind(text).unwrap();
        assert_eq!(v[0], ("Ir".to_string(), 100));
        assert_eq!(v.iter().find(|(n, _)| n == "DLmw").unwrap().1, 1);
        assert!(parse_cachegrind("events: Ir\n").is_err());
        assert!(parse_cachegrind("summary: 1\n").is_err());
        let mut ours = HierarchyStats::default();
        ours.llc.misses = 14;
        let g = Geometry::new(32 << 10, 2, 64).unwrap();
        let rec = CrosscheckRecord::new("ls", &g, &g, &ours, &v);
        assert_eq!(rec.i1, "32768,2,64");
        assert_eq!((rec.ll_misses_cachegrind, rec.d1_misses_cachegrind, rec.instructions_cachegrind), (7, 4, 100));
        assert!((rec.ll_misses_diff_pct - 100.0).abs() < 1e-9);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, failure_persistence: None, ..Default::default() })]

        /// cachegrind's output is read from a file: random text and every truncation of a
        /// valid one give pairs or a typed error, never a panic.
        #[test]
        fn cachegrind_parser_never_panics(text in "(events:|summary:|[ -~\n]){0,200}", cut in 0usize..120) {
            let _ = parse_cachegrind(&text);
            let valid = "events: Ir I1mr D1mr\nsummary: 100 5 x\n";
            let cut = cut.min(valid.len());
            match parse_cachegrind(&valid[..cut]) {
                Ok(pairs) => proptest::prop_assert!(pairs.len() <= 3),
                Err(e) => {
                    proptest::prop_assert_eq!(e.kind, ErrorKind::Usage);
                    proptest::prop_assert!(e.message.starts_with("cachegrind output has no "), "{}", e);
                }
            }
        }
    }
}

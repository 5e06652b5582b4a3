//! `smartcon cachesim`: run a trace through a cache hierarchy and print per-level counts
//! and IPC.
//!
//! Geometries are `SIZE,WAYS` with one line size for every level (`--line`). The default
//! machine is Table II of the ETS paper; `--cachegrind` models what valgrind's cachegrind
//! simulates (I1 and D1 in front of the LL, no L2, cachegrind's straddle rule) so the two
//! can be compared (see `smartcon ets crosscheck`). The whole trace is verified before
//! anything is printed: a truncated or corrupt trace is an error, never a shorter result.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use smartcon_cachesim::geometry::Geometry;
use smartcon_cachesim::hierarchy::{Hierarchy, HierarchyConfig, HierarchyStats, Mode};
use smartcon_cachesim::policy::{Drrip, Lru, PolicyKind, ReplacementPolicy, Ship};
use smartcon_cachesim::trace::TraceReader;
use smartcon_devemu::units::{format_size, parse_size};

use crate::common;

#[derive(clap::Args)]
pub struct CachesimArgs {
    /// The trace file (from `smartcon trace`).
    #[arg(long)]
    trace: PathBuf,
    /// L1 instruction cache SIZE,WAYS (default 32k,2).
    #[arg(long, default_value = "32k,2")]
    l1i: String,
    /// L1 data cache SIZE,WAYS (default 32k,2).
    #[arg(long, default_value = "32k,2")]
    l1d: String,
    /// L2 SIZE,WAYS, or `none` (default 256k,4; none in --cachegrind mode).
    #[arg(long)]
    l2: Option<String>,
    /// Last-level cache SIZE,WAYS (default 2m,16 as in Table II).
    #[arg(long, default_value = "2m,16")]
    ll: String,
    /// Line size in bytes for every level.
    #[arg(long, default_value = "64")]
    line: String,
    /// LLC replacement policy: lru, drrip or ship (L1 and L2 are LRU).
    #[arg(long, default_value = "lru")]
    policy: String,
    /// Model the first level the way cachegrind does: I1, D1 and LL only, write-allocate,
    /// no write-backs, a straddling access counted once.
    #[arg(long)]
    cachegrind: bool,
    /// JSON Lines on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

/// The JSON record of one simulation.
#[derive(Serialize)]
pub(crate) struct CachesimRecord {
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

/// Parses `SIZE,WAYS` with the common line size.
pub(crate) fn parse_geometry(flag: &str, text: &str, line_bytes: u32) -> Result<Geometry> {
    let (size, ways) =
        text.split_once(',').with_context(|| format!("{flag} {text:?}: expected SIZE,WAYS such as 32k,2"))?;
    let size = parse_size(size).with_context(|| format!("{flag} {text:?}"))?;
    let ways: u32 = ways.trim().parse().with_context(|| format!("{flag} {text:?}: ways must be a whole number"))?;
    Geometry::new(size, ways, line_bytes).with_context(|| format!("{flag} {text:?}"))
}

pub(crate) fn parse_line(text: &str) -> Result<u32> {
    let line = parse_size(text).context("--line")?;
    match u32::try_from(line) {
        Ok(l) if l >= 4 && l.is_power_of_two() => Ok(l),
        _ => bail!("--line {text:?}: the line size must be a power of two of at least 4 bytes"),
    }
}

pub(crate) fn parse_policy(text: &str) -> Result<PolicyKind> {
    PolicyKind::parse(text).with_context(|| format!("unknown --policy {text:?}: use lru, drrip or ship"))
}

/// Simulates the whole trace; any trace error aborts before results exist.
pub(crate) fn simulate(config: HierarchyConfig, policy: PolicyKind, trace: &Path) -> Result<HierarchyStats> {
    fn with<P: ReplacementPolicy>(config: HierarchyConfig, trace: &Path) -> Result<HierarchyStats> {
        let mut h: Hierarchy<P> = Hierarchy::new(config)?;
        let mut reader = TraceReader::open(trace)?;
        let mut n = 0u64;
        while let Some(r) = reader.next_record()? {
            h.access(&r);
            n += 1;
            if n.is_multiple_of(1 << 22) && common::interrupted() {
                bail!("interrupted after {n} records; no results printed");
            }
        }
        Ok(h.stats())
    }
    match policy {
        PolicyKind::Lru => with::<Lru>(config, trace),
        PolicyKind::Drrip => with::<Drrip>(config, trace),
        PolicyKind::Ship => with::<Ship>(config, trace),
    }
}

pub(crate) fn record(
    trace: &Path,
    config: &HierarchyConfig,
    policy: PolicyKind,
    s: &HierarchyStats,
    wall_ns: u64,
) -> CachesimRecord {
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

pub fn run(args: CachesimArgs) -> Result<()> {
    let line = parse_line(&args.line)?;
    let policy = parse_policy(&args.policy)?;
    let l2 = match (args.l2.as_deref(), args.cachegrind) {
        (Some("none"), _) => None,
        (Some(_), true) => bail!("--l2 cannot be used with --cachegrind (cachegrind has no L2)"),
        (Some(text), false) => Some(parse_geometry("--l2", text, line)?),
        (None, true) => None,
        (None, false) => Some(parse_geometry("--l2", "256k,4", line)?),
    };
    let config = HierarchyConfig {
        l1i: parse_geometry("--l1i", &args.l1i, line)?,
        l1d: parse_geometry("--l1d", &args.l1d, line)?,
        l2,
        llc: parse_geometry("--ll", &args.ll, line)?,
        timing: Default::default(),
        mode: if args.cachegrind { Mode::Cachegrind } else { Mode::TableII },
    };
    config.validate()?;
    let start = std::time::Instant::now();
    let stats = simulate(config, policy, &args.trace)?;
    let wall_ns = start.elapsed().as_nanos() as u64;
    let rec = record(&args.trace, &config, policy, &stats, wall_ns);
    if args.json {
        return common::emit_json(&rec);
    }
    println!(
        "trace {} ({} records, {} instructions), {} mode, LLC policy {}",
        rec.trace, rec.records, rec.instructions, rec.mode, rec.policy
    );
    println!(
        "{:<6} {:>10} {:>6} {:>14} {:>14} {:>14} {:>9}",
        "level", "size", "ways", "accesses", "hits", "misses", "miss %"
    );
    let row = |name: &str, g: &Geometry, c: &smartcon_cachesim::cache::CacheStats| {
        println!(
            "{:<6} {:>10} {:>6} {:>14} {:>14} {:>14} {:>8.3}%",
            name,
            format_size(g.size_bytes),
            g.ways,
            c.accesses,
            c.hits,
            c.misses,
            100.0 * c.miss_ratio()
        );
    };
    row("L1I", &config.l1i, &stats.l1i);
    row("L1D", &config.l1d, &stats.l1d);
    if let (Some(g), Some(c)) = (config.l2, stats.l2) {
        row("L2", &g, &c);
    }
    row("LL", &config.llc, &stats.llc);
    println!("cycles {} at 4 GHz = {:.3} ms, IPC {:.4}", stats.cycles, stats.cycles as f64 / 4e6, stats.ipc());
    println!("simulated {:.1} M accesses/s (wall clock, including trace decoding)", rec.accesses_per_second / 1e6);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartcon_cachesim::synth::{Synth, SynthKind};
    use smartcon_cachesim::trace::TraceWriter;

    #[test]
    fn simulates_a_trace_and_refuses_a_truncated_one() {
        let dir = std::env::temp_dir().join(format!("smartcon-cachesim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("loop.sct");
        let mut w = TraceWriter::create(&path).unwrap();
        // 512 KiB loop, four passes: misses L2, fits the LLC: only compulsory LL misses.
        for r in Synth::new(SynthKind::Loop, 512 << 10, 1).unwrap().take(4 * 4 * 65536) {
            w.push(&r).unwrap();
        }
        w.finish().unwrap();
        let config = HierarchyConfig::table_ii();
        let s = simulate(config, PolicyKind::Lru, &path).unwrap();
        assert_eq!(s.llc.misses, 8192 + 16, "512 KiB of data lines plus 1 KiB of code");
        assert_eq!(s.l1d.misses, 4 * 8192);
        let rec = record(&path, &config, PolicyKind::Lru, &s, 1);
        let json = serde_json::to_value(&rec).unwrap();
        assert_eq!(json["type"], "cachesim");
        assert_eq!(json["ll_misses"], 8208);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let e = simulate(config, PolicyKind::Lru, &path).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
        assert!(parse_geometry("--ll", "3m,16", 64).is_err());
        assert!(parse_geometry("--ll", "2m", 64).is_err());
        assert!(parse_geometry("--ll", "3m,12", 64).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

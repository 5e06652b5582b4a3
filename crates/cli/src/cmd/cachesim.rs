//! `smartcon cachesim`: run a trace through a cache hierarchy and print per-level counts
//! and IPC. The simulation and its record are `smartcon_cachesim::study`; this file parses
//! the geometry flags and prints.
//!
//! Geometries are `SIZE,WAYS` with one line size for every level (`--line`). The default
//! machine is Table II of the ETS paper; `--cachegrind` models what valgrind's cachegrind
//! simulates (I1 and D1 in front of the LL, no L2, cachegrind's straddle rule) so the two
//! can be compared (see `smartcon ets crosscheck`). The whole trace is verified before
//! anything is printed: a truncated or corrupt trace is an error, never a shorter result.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use smartcon_cachesim::geometry::Geometry;
use smartcon_cachesim::hierarchy::{HierarchyConfig, Mode};
use smartcon_cachesim::policy::PolicyKind;
use smartcon_cachesim::study::{simulate, CachesimRecord};
use smartcon_util::units::{format_size, parse_size};

use crate::common;

#[derive(clap::Args)]
pub struct CachesimArgs {
    /// The trace file (from `smartcon trace`).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
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
    let stats = simulate(config, policy, &args.trace, common::interrupt_flag())?;
    let wall_ns = start.elapsed().as_nanos() as u64;
    let rec = CachesimRecord::new(&args.trace, &config, policy, &stats, wall_ns);
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

    #[test]
    fn geometries_are_size_comma_ways() {
        assert!(parse_geometry("--ll", "3m,16", 64).is_err());
        assert!(parse_geometry("--ll", "2m", 64).is_err());
        assert!(parse_geometry("--ll", "3m,12", 64).is_ok());
        assert!(parse_line("48").is_err());
        assert_eq!(parse_line("64").unwrap(), 64);
    }
}

//! Measuring what a context switch costs on this host (SmartCon Sec. 3, Fig. 2 and 3).
//!
//! - Direct cost, as lmbench's lat_ctx measures it ([`ring`]): a ring of N processes on one
//!   CPU passing a token through pipes; the single-process pipe work is measured the same way
//!   and subtracted.
//! - Indirect cost (Sec. 3.2): the same ring where each process first sums an array of S
//!   bytes; the single-process hot-cache time for S is subtracted, so what remains is the
//!   switch plus refilling the cache the other processes polluted.
//! - Wake-up latency ([`wakeup`]) of a thread on the same CPU and on another CPU.
//! - `perf bench sched pipe` ([`perfbench`]) as an outside check when perf is installed.
//!
//! The results become the host profile ([`HostProfile`]) that the model and the simulator
//! read. Non-goals: hardware-counter attribution of the indirect cost (no counters on these
//! VMs), and TLB-only effects separated from cache effects.

pub mod affinity;
pub mod cache;
pub mod oneway;
pub mod perfbench;
pub mod report;
pub mod ring;
pub mod wakeup;

use std::sync::atomic::AtomicBool;

use serde::{Deserialize, Serialize};

pub use cache::CacheSizes;
pub use ring::Budget;

/// The host profile format version; readers refuse other versions.
pub const HOST_PROFILE_VERSION: u32 = 1;

/// `perf bench sched pipe` runs taken the best of.
pub const PERF_RUNS: u32 = 3;

/// lmbench's `lat_ctx -s 2048`: the working set each process touches per switch in seed
/// 001's figure (180-330 us on a Core 2 Duo E6550); always among the indirect sizes.
pub const LAT_CTX_S_BYTES: u64 = 2 << 20;

/// Largest array per process we accept: beyond this the ring's N copies risk the OOM killer.
pub const ARRAY_BYTES_MAX: u64 = 1 << 30;

use smartcon_util::error::Source;
/// The workspace's one error type (`smartcon_util::error`): a bad plan or flag is `Usage`, a
/// failed system call `Setup` (its `io::Error` the `source()`), a stopped run `Interrupted`, an
/// unreadable or malformed host profile `Profile`.
pub use smartcon_util::error::{Error, ErrorKind};

/// A plan or flag this crate refuses.
pub(crate) fn bad_input(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Usage, message)
}

/// "WHAT failed: the reason", the system call's `io::Error` as the source.
pub(crate) fn os(what: &str, source: std::io::Error) -> Error {
    Error::with_source(ErrorKind::Setup, format_args!("{what} failed"), source)
}

/// The stop flag ended a measurement.
pub(crate) fn interrupted() -> Error {
    Error::new(ErrorKind::Interrupted, "interrupted")
}

/// A measuring thread panicked (a bug).
pub(crate) fn internal(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Internal, message)
}

/// What to measure and for how long.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Ring sizes for the direct cost (the paper: 2 to 20).
    pub direct_procs: Vec<usize>,
    /// Processes in the indirect-cost ring.
    pub indirect_procs: usize,
    /// Array sizes per process for the indirect cost, ascending.
    pub array_sizes_bytes: Vec<u64>,
    pub budget: Budget,
    /// Loops for `perf bench sched pipe`; 0 skips it.
    pub perf_loops: u64,
    /// The CPU everything on one CPU runs on; the cross-CPU ping-pong uses `cross_cpu`.
    pub cpu: usize,
    pub cross_cpu: Option<usize>,
}

impl Plan {
    /// The default sweep: S doubling from 32 KiB to 16 MiB, plus the L2 and LLC sizes and
    /// twice the LLC (so the curve shows what happens past the last cache).
    pub fn default_array_sizes(cache: &CacheSizes, quick: bool) -> Vec<u64> {
        let mut sizes: Vec<u64> = if quick {
            vec![32 << 10, 256 << 10, 4 << 20, 16 << 20]
        } else {
            (0..10).map(|i| (32u64 << 10) << i).collect()
        };
        for extra in [
            Some(LAT_CTX_S_BYTES),
            cache.l2_bytes,
            cache.llc_bytes,
            if quick { None } else { cache.llc_bytes.map(|b| 2 * b) },
        ]
        .into_iter()
        .flatten()
        {
            if extra <= ARRAY_BYTES_MAX {
                sizes.push(extra);
            }
        }
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    pub fn new(quick: bool, cache: &CacheSizes, cpus: &[usize]) -> Plan {
        let budget = if quick {
            Budget { batches: 3, batch_ns: 30_000_000, hops_per_batch_max: 200_000, floor_tol: None }
        } else {
            Budget { batches: 5, batch_ns: 100_000_000, hops_per_batch_max: 2_000_000, floor_tol: None }
        };
        Plan {
            direct_procs: if quick { vec![2, 4, 8] } else { vec![2, 4, 8, 16, 20] },
            indirect_procs: 2,
            array_sizes_bytes: Plan::default_array_sizes(cache, quick),
            budget,
            perf_loops: if quick { 30_000 } else { 100_000 },
            cpu: cpus.first().copied().unwrap_or(0),
            cross_cpu: cpus.get(1).copied(),
        }
    }

    /// Runs everything on `cpu` (one of `allowed`), the cross-CPU wake-up on `cross_cpu` or
    /// else on the first other allowed CPU.
    pub fn pin(&mut self, cpu: Option<usize>, cross_cpu: Option<usize>, allowed: &[usize]) -> Result<(), Error> {
        if let Some(cpu) = cpu {
            if !allowed.contains(&cpu) {
                return Err(bad_input(format!("--cpu {cpu} is not in this process's CPU set {allowed:?}")));
            }
            self.cpu = cpu;
            self.cross_cpu = allowed.iter().copied().find(|&c| c != cpu);
        }
        if let Some(other) = cross_cpu {
            if !allowed.contains(&other) || other == self.cpu {
                return Err(bad_input(format!(
                    "--cross-cpu {other} must be another CPU of this process's set {allowed:?}"
                )));
            }
            self.cross_cpu = Some(other);
        }
        Ok(())
    }

    /// Sets the indirect cost's array sizes, ascending and without duplicates; an empty
    /// array has nothing to sum.
    pub fn set_array_sizes(&mut self, mut sizes_bytes: Vec<u64>) -> Result<(), Error> {
        if sizes_bytes.contains(&0) {
            return Err(bad_input("--sizes: an array of 0 bytes has nothing to sum"));
        }
        sizes_bytes.sort_unstable();
        sizes_bytes.dedup();
        self.array_sizes_bytes = sizes_bytes;
        Ok(())
    }

    /// Bad plans are refused before anything runs.
    pub fn validate(&self) -> Result<(), Error> {
        if self.direct_procs.is_empty() {
            return Err(bad_input("no ring sizes to measure"));
        }
        for &p in self.direct_procs.iter().chain(std::iter::once(&self.indirect_procs)) {
            if !(2..=ring::RING_PROCS_MAX).contains(&p) {
                return Err(bad_input(format!("ring of {p} processes: expected 2..={}", ring::RING_PROCS_MAX)));
            }
        }
        let memory_bytes = physical_memory_bytes();
        for &s in &self.array_sizes_bytes {
            if s < 4 {
                return Err(bad_input(format!("array size {s} bytes: expected at least 4")));
            }
            let total = s.saturating_mul(self.indirect_procs as u64 + 1);
            if s > ARRAY_BYTES_MAX || memory_bytes.is_some_and(|m| total > m / 2) {
                return Err(bad_input(format!(
                    "array size {s} bytes x {} processes does not fit in memory (limit {} bytes per process, half of RAM in total)",
                    self.indirect_procs + 1,
                    ARRAY_BYTES_MAX
                )));
            }
        }
        if self.budget.batches == 0 || self.budget.batch_ns == 0 || self.budget.hops_per_batch_max == 0 {
            return Err(bad_input("measurement budget must be positive"));
        }
        Ok(())
    }
}

/// Physical memory from sysconf, None when unknown.
pub fn physical_memory_bytes() -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    (pages > 0 && page > 0).then(|| pages as u64 * page as u64)
}

/// One point of Fig. 2.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DirectPoint {
    pub procs: usize,
    pub us_per_switch: f64,
    pub us_per_switch_raw: f64,
}

/// One point of Fig. 3.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IndirectPoint {
    pub array_bytes: u64,
    /// Ring time per switch minus the single-process hot-cache time for the same array:
    /// the switch plus the cache refill.
    pub us_per_switch: f64,
    /// The ring time per switch before the subtraction.
    pub us_per_switch_raw: f64,
    /// The single-process hot time (pipe work plus summing the array in a warm cache).
    pub us_hot: f64,
}

/// Everything `smartcon ctx` measured; also the host profile on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostProfile {
    pub version: u32,
    pub created_unix_s: u64,
    pub quick: bool,
    pub cpu: usize,
    pub cross_cpu: Option<usize>,
    /// From /proc/cpuinfo; None when the kernel does not report it.
    pub clock_ghz: Option<f64>,
    pub cache: CacheSizes,
    /// The single-process pipe work subtracted from the direct figures.
    pub pipe_overhead_us: f64,
    pub direct: Vec<DirectPoint>,
    pub indirect: Vec<IndirectPoint>,
    pub wakeup_same_cpu_us: f64,
    pub wakeup_cross_cpu_us: Option<f64>,
    /// Best of `perf_runs` runs of `perf bench sched pipe`, usecs/op / 2.
    pub perf_sched_pipe_us_per_switch: Option<f64>,
    #[serde(default)]
    pub perf_runs: u32,
    pub perf_skipped_reason: Option<String>,
}

impl HostProfile {
    /// The two-process direct cost with the pipe work subtracted: the model's tau_ctx.
    pub fn ctx_direct_ns(&self) -> Option<f64> {
        self.direct.iter().min_by_key(|p| p.procs).map(|p| p.us_per_switch * 1e3)
    }

    /// The CPU time a sleeping waiter costs: switching out (direct) and back in with the
    /// cache refilled for an L2-sized working set (the indirect point nearest the L2 size).
    /// A device faster than this is better waited for by spinning.
    pub fn sleep_cost_ns(&self) -> Option<f64> {
        let direct = self.ctx_direct_ns()?;
        let l2 = self.cache.l2_bytes.unwrap_or(1 << 20);
        let refill = self
            .indirect
            .iter()
            .min_by_key(|p| p.array_bytes.abs_diff(l2))
            .map(|p| p.us_per_switch * 1e3)
            .unwrap_or(direct);
        Some(direct + refill.max(direct))
    }

    /// Reads and checks a profile file: a profile alone (`ctx --out`, or a version-1
    /// `host.json` whose model fields sit beside it), or a `host.json` of version 2 with the
    /// profile nested under `"ctx"`.
    pub fn read(path: &std::path::Path) -> Result<HostProfile, Error> {
        let named = format!("host profile {}", path.display());
        let bad = |message: String| Error::new(ErrorKind::Profile, format!("{named}: {message}"));
        // A parser's or the file system's error stays the source.
        let failed = |what: &str, e: Source| Error::with_source(ErrorKind::Profile, format_args!("{named}{what}"), e);
        let text = smartcon_util::paths::read_text(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                bad("not found; run `smartcon ctx` first to measure this host".to_string())
            } else {
                failed("", e.into())
            }
        })?;
        let mut value: serde_json::Value = serde_json::from_str(&text).map_err(|e| failed(": not JSON", e.into()))?;
        if let Some(nested) = value.get_mut("ctx").filter(|v| v.is_object()).map(serde_json::Value::take) {
            value = nested;
        }
        match value.get("version").and_then(|v| v.as_u64()) {
            Some(v) if v == HOST_PROFILE_VERSION as u64 => {}
            Some(v) => return Err(bad(format!("version {v}, expected {HOST_PROFILE_VERSION}"))),
            None => return Err(bad("no \"version\" field".into())),
        }
        let profile: HostProfile = serde_json::from_value(value).map_err(|e| failed(": malformed", e.into()))?;
        let direct = profile.ctx_direct_ns().ok_or_else(|| bad("no direct context-switch measurement".into()))?;
        if !(direct.is_finite() && direct > 0.0) {
            return Err(bad(format!("direct cost {direct} ns is not a positive number")));
        }
        Ok(profile)
    }
}

/// The CPU clock from /proc/cpuinfo ("cpu MHz"), in GHz.
pub fn read_clock_ghz() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .filter(|l| l.starts_with("cpu MHz"))
        .find_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .map(|mhz| mhz / 1000.0)
        .filter(|g| *g > 0.0)
}

/// Progress events so the CLI can draw a bar without the library knowing about it.
pub trait Progress {
    fn step(&mut self, what: &str);
}

impl<F: FnMut(&str)> Progress for F {
    fn step(&mut self, what: &str) {
        self(what)
    }
}

/// Times a direct point no longer than the pipe overhead is measured again before
/// [`measure`] gives up on a busy machine.
pub const DIRECT_RETRIES: u32 = 3;

/// The number of steps [`measure`] reports, for a progress bar's length.
pub fn step_count(plan: &Plan) -> u64 {
    (1 + plan.direct_procs.len() + 2 * plan.array_sizes_bytes.len() + 2 + 1) as u64
}

/// Runs the whole plan. Everything on one CPU runs pinned to `plan.cpu` and the caller's
/// affinity is restored afterwards.
pub fn measure(plan: &Plan, stop: &AtomicBool, progress: &mut dyn Progress) -> Result<HostProfile, Error> {
    plan.validate()?;
    let cache = cache::read_cache_sizes();
    let to_us = |ns: f64| ns / 1e3;
    let (pipe_overhead_ns, direct, indirect, perf, perf_skipped_reason) = {
        let _pin = affinity::AffinityGuard::pin(plan.cpu)?;
        progress.step("single-process pipe overhead");
        let mut overhead_ns = ring::ring_ns_per_hop(1, 0, plan.budget, stop)?;
        let mut raws = Vec::with_capacity(plan.direct_procs.len());
        for &procs in &plan.direct_procs {
            progress.step(&format!("direct, {procs} processes"));
            raws.push(ring::ring_ns_per_hop(procs, 0, plan.budget, stop)?);
        }
        // The overhead again, and the smaller of the two, as for the hot times below: a
        // neighbour's burst only ever adds time. Where a ring still took no longer than one
        // process (a busy machine: `ctx --quick` beside seven compiles once wrote a direct
        // cost of 0, which every reader of host.json rejects), it is measured again, up to
        // DIRECT_RETRIES times, each time beside a fresh overhead.
        overhead_ns = overhead_ns.min(ring::ring_ns_per_hop(1, 0, plan.budget, stop)?);
        for (raw_ns, &procs) in raws.iter_mut().zip(&plan.direct_procs) {
            let mut tries = 0;
            while *raw_ns <= overhead_ns && tries < DIRECT_RETRIES {
                tries += 1;
                progress.step(&format!("direct, {procs} processes, again (the machine is busy)"));
                *raw_ns = raw_ns.min(ring::ring_ns_per_hop(procs, 0, plan.budget, stop)?);
                overhead_ns = overhead_ns.min(ring::ring_ns_per_hop(1, 0, plan.budget, stop)?);
            }
            if *raw_ns <= overhead_ns {
                return Err(bad_input(format!(
                    "the machine is too busy to measure a context switch: {procs} processes took {:.2} us a hop, \
                     one process {:.2} us; run `smartcon ctx` again when it is quieter",
                    to_us(*raw_ns),
                    to_us(overhead_ns)
                )));
            }
        }
        let direct: Vec<DirectPoint> = raws
            .iter()
            .zip(&plan.direct_procs)
            .map(|(&raw_ns, &procs)| DirectPoint {
                procs,
                us_per_switch: to_us(raw_ns - overhead_ns),
                us_per_switch_raw: to_us(raw_ns),
            })
            .collect();
        // perf right after the ring's direct figures, so both see the same machine state.
        progress.step("perf bench sched pipe");
        let (perf, perf_skipped_reason) = if plan.perf_loops == 0 {
            (None, Some("not requested".to_string()))
        } else {
            // Best of a few runs, like the ring's best batch: noise only ever adds time.
            let mut best: Option<f64> = None;
            let mut skipped = None;
            for _ in 0..PERF_RUNS {
                match perfbench::perf_sched_pipe(plan.cpu, plan.perf_loops, stop)? {
                    perfbench::PerfOutcome::UsPerSwitch(us) => best = Some(best.map_or(us, |b| b.min(us))),
                    perfbench::PerfOutcome::Skipped(why) => {
                        skipped = Some(why);
                        break;
                    }
                }
            }
            (best, if best.is_some() { None } else { skipped })
        };
        let mut indirect = Vec::with_capacity(plan.array_sizes_bytes.len());
        for &bytes in &plan.array_sizes_bytes {
            progress.step(&format!("hot single process, {} KiB", bytes >> 10));
            let hot_ns = ring::ring_ns_per_hop(1, bytes as usize, plan.budget, stop)?;
            progress.step(&format!("indirect, {} KiB", bytes >> 10));
            let raw_ns = ring::ring_ns_per_hop(plan.indirect_procs, bytes as usize, plan.budget, stop)?;
            // The hot time again after the ring, and the smaller of the two: a neighbour's
            // burst during one of them only ever adds time.
            let hot_ns = hot_ns.min(ring::ring_ns_per_hop(1, bytes as usize, plan.budget, stop)?);
            indirect.push(IndirectPoint {
                array_bytes: bytes,
                us_per_switch: to_us((raw_ns - hot_ns).max(0.0)),
                us_per_switch_raw: to_us(raw_ns),
                us_hot: to_us(hot_ns),
            });
        }
        (overhead_ns, direct, indirect, perf, perf_skipped_reason)
    };
    progress.step("wake-up, same CPU");
    let same_ns = wakeup::pingpong_ns(plan.cpu, plan.cpu, plan.budget, stop)?;
    progress.step("wake-up, cross CPU");
    let cross_ns = match plan.cross_cpu {
        Some(other) => Some(wakeup::pingpong_ns(plan.cpu, other, plan.budget, stop)?),
        None => None,
    };
    Ok(HostProfile {
        version: HOST_PROFILE_VERSION,
        created_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        quick: plan.budget.batch_ns < 100_000_000,
        perf_runs: PERF_RUNS,
        cpu: plan.cpu,
        cross_cpu: plan.cross_cpu,
        clock_ghz: read_clock_ghz(),
        cache,
        pipe_overhead_us: to_us(pipe_overhead_ns),
        direct,
        indirect,
        wakeup_same_cpu_us: to_us(same_ns),
        wakeup_cross_cpu_us: cross_ns.map(to_us),
        perf_sched_pipe_us_per_switch: perf,
        perf_skipped_reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_pins_to_allowed_cpus_only() {
        let allowed = [2, 5, 7];
        let mut plan = Plan::new(true, &CacheSizes::default(), &allowed);
        assert_eq!((plan.cpu, plan.cross_cpu), (2, Some(5)));
        plan.pin(Some(5), None, &allowed).unwrap();
        assert_eq!((plan.cpu, plan.cross_cpu), (5, Some(2)));
        plan.pin(None, Some(7), &allowed).unwrap();
        assert_eq!((plan.cpu, plan.cross_cpu), (5, Some(7)));
        assert!(plan.pin(Some(3), None, &allowed).is_err());
        assert!(plan.pin(None, Some(5), &allowed).is_err(), "the cross CPU must be another one");
        for quick in [true, false] {
            assert!(Plan::new(quick, &CacheSizes::default(), &allowed).array_sizes_bytes.contains(&LAT_CTX_S_BYTES));
        }
        let mut one = Plan::new(true, &CacheSizes::default(), &[4]);
        one.pin(Some(4), None, &[4]).unwrap();
        assert_eq!(one.cross_cpu, None);
    }

    #[test]
    fn array_sizes_are_sorted_deduplicated_and_never_empty() {
        let mut plan = Plan::new(true, &CacheSizes::default(), &[0]);
        plan.set_array_sizes(vec![1 << 20, 32 << 10, 1 << 20]).unwrap();
        assert_eq!(plan.array_sizes_bytes, vec![32 << 10, 1 << 20]);
        assert!(plan.set_array_sizes(vec![4096, 0]).is_err());
        assert_eq!(plan.array_sizes_bytes, vec![32 << 10, 1 << 20], "a refused list changes nothing");
    }
}

//! Seed 001 reproduced: Gim, Lee, Won, "Adaptive Context Switch for Very Fast Block Device"
//! (SmartCon's predecessor), `smartcon evaluate --study acs`.
//!
//! The paper's setup: a memory pseudo block device formatted EXT2 holding a 100 MB file,
//! the mean time of reading it over 1000 repetitions, "random" (4 KiB blocks alternately
//! from the first and the last position) and "sequential" (4 KiB blocks from the start),
//! adaptive against original under the noop and the anticipatory scheduler (Fig. 1), and
//! one reading process beside 9 arithmetic-only processes. Here:
//!
//! - the pseudo devices are a loop device over a /dev/shm file (completed by a kernel
//!   worker, so a wait is a context switch) and zram (completed inline; no scheduler), each
//!   with ext2 (`mkfs.ext2`) and a file of [`AcsPlan::file_bytes`] of incompressible data,
//!   created, recorded and removed by [`smartcon_workloads::blockdev::DeviceFs`];
//! - one repetition reads the whole file with O_DIRECT through the file system, 4 KiB at a
//!   time, on the engine's port ([`SmartTargetPort`]) with the strategy of its turn:
//!   `block` is the paper's "original", `smart` its "adaptive", `spin` and `sync` beside;
//! - the schedulers (`none`, noop's successor; `bfq` with idling on, the nearest descendant
//!   of the anticipatory scheduler, which left Linux in 2.6.33; `mq-deadline`, `kyber`) are
//!   set on the loop device for their turn and restored ([`SchedulerGuard`]);
//! - a round is one repetition of every (scheduler, strategy), each read in
//!   [`AcsPlan::pieces`] contiguous pieces of the pattern's order, piece p of every turn (in
//!   a balanced order, [`crate::turn_order`]) before piece p + 1 of any; so every
//!   comparison, also block under bfq against smart under none (the paper's "anti vs
//!   noop"), is a ratio taken piece by piece ([`PairedRatio`]) and judged with the
//!   evaluate's rule ([`judge::beats`]). Pieces let a round whose repetitions take minutes
//!   (the loop device beside 9 crunchers: 25,000 reads of several ms each) give an interval
//!   of its own, and pair figures taken seconds apart rather than minutes;
//! - within a piece the strategies under one scheduler take turns every
//!   [`AcsPlan::slice_reads`] reads ([`piece_slices`]): on the loop device 1-2% of the reads
//!   wait a 4 ms tick for the kernel worker's CPU and carry most of the time, in bursts, so
//!   strategies that read side by side share the bursts; a group stops when smart's paired
//!   95% interval against block is narrower than the effect or within +-2% ([`settled_by`]);
//! - the 1 + 9 experiment runs the same beside `cpu_workers` forked crunchers.
//!
//! Non-goals: the paper's modified `make_request` path (user space here), and lmbench
//! (`smartcon ctx` measures lat_ctx's figure with a 2 MB working set).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use smartcon_emutarget::target::{self, OpenOptions, Target, TargetSpec};
use smartcon_engine::clock::now_ns;
use smartcon_engine::decision::{Reason, Strategy};
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::job::StrategyChoice;
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::Profile;
use smartcon_engine::smartport::{SmartPortOptions, SmartTargetPort};
use smartcon_util::stats::{mean_ci95, PairedRatio};
use smartcon_workloads::blockdev::{DeviceFs, FsDeviceKind};
use smartcon_workloads::load::{CpuLoad, LoadSnapshot};

use crate::evaluate::judge;
use crate::evaluate::TurnFigures;
use crate::probe::{probe_target, ProbePlan, PROBE_SIZES_BYTES};
use crate::{turn_order, Event, Progress};

/// The paper's request size.
pub const BLOCK_BYTES: u64 = 4096;
/// The paper's file.
pub const FILE_BYTES_PAPER: u64 = 100_000_000 / 4096 * 4096;
/// The paper's repetitions (`--full`).
pub const ROUNDS_PAPER: u32 = 1000;
/// The paper's arithmetic-only processes beside the reader.
pub const CPU_WORKERS_PAPER: u32 = 9;
/// Schedulers in the order of the report; the first is the baseline ("noop").
pub const SCHEDULERS: [&str; 4] = ["none", "bfq", "mq-deadline", "kyber"];
/// The scheduler zram's records carry: it has none (a bio-based device, no
/// `queue/scheduler` file: its bios go straight to the driver).
pub const NO_SCHEDULER: &str = "no-scheduler";
/// bfq's idling, milliseconds, where the kernel's default is off for the device.
pub const BFQ_SLICE_IDLE_MS: u32 = 8;
/// The most pieces a repetition may be cut into.
pub const PIECES_MAX: u32 = 1024;
/// Reads a strategy does before the next one takes its turn within a piece (see
/// [`AcsPlan::slice_reads`]): 64 reads are 1-2 ms on the loop device without a stall, less
/// than the 4 ms scheduler tick (HZ=250) a stalled read waits for, so every strategy sees
/// the same stretch of the machine's state.
pub const SLICE_READS: u64 = 64;
/// The narrowest effect the stopping rule needs to tell apart from none: the paper's
/// smallest bar (+2%, random noop vs noop). A group whose paired 95% interval of smart
/// against block lies within +-2% under every scheduler has settled "by resolution": any
/// difference is smaller than the smallest the paper reports.
pub const RESOLUTION_PCT: f64 = 2.0;
/// How long the crunchers run before the first turn (more than a System Monitor window).
pub const SETTLE_NS: u64 = 250_000_000;

const BLOCK: StrategyChoice = StrategyChoice::Fixed(Strategy::Block);

/// The two access patterns of Fig. 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AcsPattern {
    /// 4 KiB blocks alternately from the first and the last position of the file, moving
    /// inwards: 0, n-1, 1, n-2, ...
    Random,
    /// 4 KiB blocks from the start of the file.
    Sequential,
}

impl AcsPattern {
    pub const ALL: [AcsPattern; 2] = [AcsPattern::Random, AcsPattern::Sequential];

    pub fn name(self) -> &'static str {
        match self {
            AcsPattern::Random => "random",
            AcsPattern::Sequential => "sequential",
        }
    }

    /// The block read `i`-th of a file of `blocks` blocks.
    pub fn block(self, i: u64, blocks: u64) -> u64 {
        match self {
            AcsPattern::Sequential => i,
            AcsPattern::Random if i.is_multiple_of(2) => i / 2,
            AcsPattern::Random => blocks - 1 - i / 2,
        }
    }
}

/// How much to measure (see [`AcsPlan::preset`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcsPreset {
    /// A few seconds per device (what the integration test runs).
    Tiny,
    /// Within 5 minutes.
    Quick,
    /// Rounds until each 95% interval is narrower than the effect (or a time cap).
    Default,
    /// The paper's 1000 repetitions.
    Full,
}

/// What `--study acs` measures.
#[derive(Debug, Clone)]
pub struct AcsPlan {
    pub devices: Vec<FsDeviceKind>,
    /// On the loop device; zram has no scheduler (its queue takes bios directly).
    pub schedulers: Vec<String>,
    /// block first (the baseline).
    pub strategies: Vec<StrategyChoice>,
    pub patterns: Vec<AcsPattern>,
    pub file_bytes: u64,
    /// Rounds before the stopping rule is asked; `rounds_max` ends a group in any case.
    pub rounds_min: u32,
    pub rounds_max: u32,
    /// A group (device, load, pattern) ends after this much time, once it has an interval
    /// (two rounds, or one round cut into two or more pieces), whatever `rounds_min` says.
    pub group_budget_ns: u64,
    /// Each repetition is read in this many pieces (contiguous stretches of the pattern's
    /// order), interleaved with the other (scheduler, strategy) turns piece by piece: every
    /// turn still reads the whole file once a round, in the paper's order, and its time is
    /// the sum of its pieces; pieces are paired (piece p of a round against the same piece
    /// of every other turn). 1 reads each repetition in one go (`--full`, the paper's).
    pub pieces: u32,
    /// Within a piece, the strategies under one scheduler take turns every this many reads
    /// (slices dealt in a balanced order, [`crate::turn_order`]), so they share the
    /// machine's state from millisecond to millisecond; each still reads every block of the
    /// piece once, in the pattern's order, and its piece's time is the sum of its slices.
    /// 0 reads a piece in one go (`--full`: the paper's whole-file reads).
    pub slice_reads: u64,
    /// The 1 + 9 experiment's crunchers; 0 skips it. It runs under the first scheduler.
    pub cpu_workers: u32,
    /// smart's probe of each created device, per point; 0 skips the probe (smart then runs
    /// on the paper's default thresholds: the tiny run, which would otherwise spend most of
    /// its time measuring the host's wait cost on a fresh machine).
    pub probe_ns: u64,
    /// `smartcon run -- dd/fio` turns per (device, pattern, strategy); 0 skips them.
    pub reader_rounds: u32,
    /// The smartcon binary for the unmodified readers (`None`: skip them).
    pub smartcon_exe: Option<PathBuf>,
    /// `smartcon ctx`'s host profile, for the probe's wake-up figure.
    pub host_profile: Option<PathBuf>,
    /// The CPUs the reading thread is pinned to, every strategy alike (`None`: wherever the
    /// scheduler puts it). Pinned, io_uring's helpers move to the other CPUs while it spins;
    /// the loop device's kernel worker cannot be pinned (an unbound workqueue's kworker).
    pub io_cpus: Option<Vec<usize>>,
}

impl AcsPlan {
    pub fn preset(p: AcsPreset) -> AcsPlan {
        let (file_bytes, rounds_min, rounds_max, budget_s, pieces, reader_rounds, probe_ms) = match p {
            AcsPreset::Tiny => (2 << 20, 2, 2, 5, 2, 2, 0),
            // Up to 40 rounds in 15 s a group: on an idle host the loop groups' 5 rounds took
            // 3 s and settled none; 8 groups of 15 s plus a round each stay within 5 minutes.
            AcsPreset::Quick => (2 << 20, 3, 40, 15, 4, 3, 40),
            AcsPreset::Default => (FILE_BYTES_PAPER, 10, 60, 150, 16, 5, 100),
            AcsPreset::Full => (FILE_BYTES_PAPER, ROUNDS_PAPER, ROUNDS_PAPER, u64::MAX / 2_000_000_000, 1, 10, 150),
        };
        let slice_reads = if p == AcsPreset::Full { 0 } else { SLICE_READS };
        AcsPlan {
            devices: vec![FsDeviceKind::Loop, FsDeviceKind::Zram],
            schedulers: if p == AcsPreset::Tiny {
                vec!["none".into(), "bfq".into()]
            } else {
                SCHEDULERS.iter().map(|s| s.to_string()).collect()
            },
            strategies: [Strategy::Block, Strategy::Spin, Strategy::Sync]
                .map(StrategyChoice::Fixed)
                .into_iter()
                .chain([StrategyChoice::Smart])
                .collect(),
            patterns: AcsPattern::ALL.to_vec(),
            file_bytes,
            rounds_min,
            rounds_max,
            group_budget_ns: budget_s * 1_000_000_000,
            pieces,
            slice_reads,
            cpu_workers: CPU_WORKERS_PAPER,
            probe_ns: probe_ms * 1_000_000,
            reader_rounds,
            smartcon_exe: None,
            host_profile: None,
            io_cpus: None,
        }
    }

    /// Checks sizes and counts before anything is created.
    pub fn validate(&self) -> Result<(), Error> {
        let usage = |m: String| Err(Error::new(ErrorKind::Usage, m));
        if self.file_bytes < 1 << 20 || self.file_bytes > 4 << 30 || !self.file_bytes.is_multiple_of(BLOCK_BYTES) {
            return usage("--file-size must be a multiple of 4 KiB between 1 MiB and 4 GiB".into());
        }
        if self.rounds_min < 1
            || self.rounds_max < self.rounds_min
            || self.rounds_min.saturating_mul(self.pieces.max(1)) < 2
        {
            return usage(
                "--rounds must be at least 2, or 1 with --pieces 2 or more (an interval needs two pairs)".into(),
            );
        }
        if self.pieces < 1 || self.pieces > PIECES_MAX || self.file_bytes / BLOCK_BYTES < self.pieces as u64 {
            return usage(format!("--pieces must be between 1 and {PIECES_MAX} and at most the file's 4 KiB blocks"));
        }
        if self.reader_rounds == 1 {
            return usage("the unmodified readers need at least 2 rounds (0 skips them)".into());
        }
        if self.strategies.first() != Some(&BLOCK) {
            return usage("block must be the first strategy (the baseline)".into());
        }
        for s in &self.schedulers {
            if !SCHEDULERS.contains(&s.as_str()) {
                return usage(format!("unknown scheduler {s:?}; use {}", SCHEDULERS.join(", ")));
            }
        }
        if self.cpu_workers > smartcon_workloads::load::CPU_WORKERS_MAX {
            return usage(format!("--cpu-workers must be at most {}", smartcon_workloads::load::CPU_WORKERS_MAX));
        }
        Ok(())
    }

    /// What the study's steps need from this machine and it lacks, each with how to get it,
    /// looked up before anything is created or measured ([`AcsPlan::preflight`]): root for
    /// the devices, `mkfs.ext2` (and `losetup` for the loop device), and for the unmodified
    /// readers, which come last (after every device's groups, 8 minutes and more), `dd`,
    /// `fio` and libsmartcon.so beside [`AcsPlan::smartcon_exe`] (`smartcon run` preloads
    /// it). `euid` and `path` (a `PATH` value; `None`: execvp's default) stand in for the
    /// process's own, so a test can ask for a machine that lacks things.
    pub fn missing(&self, euid: u32, path: Option<&std::ffi::OsStr>) -> Vec<String> {
        let dirs: Vec<PathBuf> = std::env::split_paths(path.unwrap_or(std::ffi::OsStr::new("/bin:/usr/bin"))).collect();
        let have = |tool: &str| {
            use std::os::unix::fs::PermissionsExt;
            dirs.iter()
                .any(|d| d.join(tool).metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
        };
        let mut out = Vec::new();
        if !self.devices.is_empty() {
            if euid != 0 {
                out.push(
                    "root: the study creates its loop and zram devices (run it as root, e.g. with sudo)".to_string(),
                );
            }
            if !have("mkfs.ext2") {
                out.push("mkfs.ext2: each device is formatted ext2 (install e2fsprogs)".to_string());
            }
            if self.devices.contains(&FsDeviceKind::Loop) && !have("losetup") {
                out.push("losetup: it attaches the loop device (install util-linux, or --targets zram)".to_string());
            }
        }
        if let (true, Some(exe)) = (self.reader_rounds > 0 && !self.devices.is_empty(), &self.smartcon_exe) {
            let dir = exe.parent().unwrap_or(Path::new("."));
            if smartcon_preload_contract::launch::library_in(dir).is_none() {
                out.push(format!(
                    "{lib}: the unmodified readers run under `smartcon run`, which preloads {lib} from beside the binary ({}) or its deps/ (build it with `cargo build --release`, or alone `cargo build --release -p smartcon-preload`, and run target/release/smartcon, or copy {lib} beside the binary)",
                    dir.display(),
                    lib = smartcon_preload_contract::env::LIBRARY_FILE
                ));
            }
            for (tool, what, package) in [("dd", "sequential", "coreutils"), ("fio", "random", "fio")] {
                if !have(tool) {
                    out.push(format!("{tool}: the unmodified {what} reader (install {package})"));
                }
            }
        }
        out
    }

    /// Refuses (before anything is created or measured) a run whose later steps would fail
    /// on this machine: [`AcsPlan::missing`] for this process.
    pub fn preflight(&self) -> Result<(), Error> {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let missing = self.missing(euid, std::env::var_os("PATH").as_deref());
        if missing.is_empty() {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Setup,
            format!(
                "--study acs needs what this machine lacks (nothing was created or measured): {}",
                missing.join("; ")
            ),
        ))
    }

    /// The device's size: the file, ext2's metadata (about 1/64 with 4 KiB blocks) and room.
    pub fn device_bytes(&self) -> u64 {
        (self.file_bytes + self.file_bytes / 16 + (16 << 20)).div_ceil(BLOCK_BYTES) * BLOCK_BYTES
    }
}

/// One `acs_result` record: a (device, scheduler, pattern, strategy, load) cell, exactly
/// the fields of issue 31.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AcsResult {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    /// `loop` or `zram`.
    pub device: &'static str,
    pub scheduler: String,
    pub pattern: AcsPattern,
    pub strategy: &'static str,
    pub cpu_workers: u32,
    /// The mean time of one repetition (reading the whole file), microseconds: the pieces'
    /// mean time times [`AcsPlan::pieces`] (with one piece, the repetitions' mean).
    pub mean_us: f64,
    /// The half-width of the mean's 95% interval (Student's t over the pieces, scaled as
    /// the mean is; with one piece, over the repetitions).
    pub ci95_us: f64,
    /// The time saved against block under the same scheduler, percent: 100 x (1 - the
    /// geometric mean of the per-piece ratios of this strategy's time to block's; with one
    /// piece, per round).
    pub improvement_pct: f64,
    /// The same against block under bfq (the paper's "anti vs noop"); loop only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub improvement_vs_bfq_pct: Option<f64>,
}

/// One bar of Fig. 1 (or the 1 + 9 reduction): adaptive (smart, or spin or sync, under the
/// first scheduler) against original (block under `original_scheduler`), round by round.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AcsBar {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub device: &'static str,
    pub pattern: AcsPattern,
    pub cpu_workers: u32,
    /// `noop-vs-noop` or `anti-vs-noop` (the paper's names; here none and bfq).
    pub bar: &'static str,
    /// `smart` (the paper's adaptive), `spin` or `sync`.
    pub adaptive: &'static str,
    pub original_scheduler: String,
    pub improvement_pct: f64,
    /// The 90% interval of `improvement_pct` (the judge's paired interval, over the pairs).
    pub interval_pct: [f64; 2],
    /// The same pairs' 95% interval (Student's t on the per-piece log ratios): what the
    /// stopping rule ([`settled_by`]) asks of smart against block.
    pub interval95_pct: [f64; 2],
    /// Whole rounds: repetitions of the whole file by each turn.
    pub rounds: usize,
    /// Paired pieces the bar rests on (rounds x pieces, less a round cut short by Ctrl-C).
    pub pairs: usize,
    /// Whether adaptive dominates original by the evaluate's Pareto rule
    /// ([`judge::beats`]: >= 5% surely faster at no more CPU, or keeping the crunchers' work).
    pub dominates: bool,
    /// The share of the adaptive strategy's I/Os waited for without a switch (spin or
    /// sync), percent.
    pub busy_pct: f64,
    /// The decision branch smart took most, with its share ("cpu_busy 97%"); `fixed` for
    /// spin and sync.
    pub reason: String,
    /// The share of the adaptive strategy's I/Os whose spin ran out of its budget (1 ms) and
    /// slept, percent: on the loop device, reads whose kernel worker did not get a CPU in time.
    pub fell_back_pct: f64,
    /// The median time of one read, microseconds, adaptive's and original's (the median of
    /// the repetitions' medians): the common case, where the means carry the tail.
    pub p50_us: [f64; 2],
    /// Whether the group ended by the stopping rule ([`settled_by`]: smart's paired 95%
    /// interval against block narrower than their difference, or within
    /// +-[`RESOLUTION_PCT`], under every scheduler) rather than at its cap.
    pub settled: bool,
    /// `effect` or `resolution` ([`settled_by`]); absent when not settled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settled_by: Option<&'static str>,
    /// The 1-minute load average when the group started and ended (the machine is shared).
    pub load_avg: [f64; 2],
    /// The adaptive strategy's reads by the way its port waited (`sync`, `block`, `spin`):
    /// how many, their share and their mean time. smart's blocking is the plain call
    /// (`sync`) or io_uring's wait (`block`), as its block check picks.
    pub reads_by_wait: Vec<WaitShare>,
    /// smart's bars: the time smart saved against `sync` (the plain call every read) under
    /// the same scheduler, percent, and its paired 95% interval, piece by piece: whether
    /// smart's gap to `sync` is more than the pieces' noise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_sync_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_sync_interval95_pct: Option<[f64; 2]>,
}

/// One way of waiting in [`AcsBar::reads_by_wait`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitShare {
    pub wait: &'static str,
    pub reads: u64,
    pub share_pct: f64,
    pub mean_us: f64,
    /// The share of the adaptive strategy's read time these reads took.
    pub time_share_pct: f64,
}

/// The reads of `turns` by the way they waited.
fn reads_by_wait(turns: &[Turn]) -> Vec<WaitShare> {
    let (mut n, mut ns) = ([0u64; Strategy::COUNT], [0u64; Strategy::COUNT]);
    for t in turns {
        for i in 0..Strategy::COUNT {
            n[i] += t.waits_by_strategy[i];
            ns[i] += t.wait_ns_by_strategy[i];
        }
    }
    let (total_n, total_ns) = (n.iter().sum::<u64>().max(1) as f64, ns.iter().sum::<u64>().max(1) as f64);
    Strategy::ALL
        .iter()
        .filter(|s| n[s.index()] > 0)
        .map(|s| {
            let i = s.index();
            WaitShare {
                wait: s.name(),
                reads: n[i],
                share_pct: n[i] as f64 * 100.0 / total_n,
                mean_us: ns[i] as f64 / n[i] as f64 / 1e3,
                time_share_pct: ns[i] as f64 * 100.0 / total_ns,
            }
        })
        .collect()
}

/// One `acs_reader` record: an unmodified reader (dd, fio) under `smartcon run`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AcsReader {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub device: &'static str,
    pub scheduler: String,
    pub pattern: AcsPattern,
    /// `dd` (sequential: its own copy time) or `fio` (random: an iolog replay; the sum of
    /// its per-read latencies).
    pub reader: &'static str,
    pub strategy: &'static str,
    pub mean_us: f64,
    pub ci95_us: f64,
    pub improvement_pct: f64,
    pub rounds: usize,
}

/// One `acs_device` record: a device the study created, the schedulers it ran under, and
/// what the device's scheduler was before the study and after it put it back (read back
/// before the device is removed).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AcsDevice {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    /// `loop` or `zram`.
    pub device: &'static str,
    /// `/dev/loopN`, `/dev/zramN`.
    pub node: String,
    /// Whether the device has an I/O scheduler at all (zram: no).
    pub has_scheduler: bool,
    /// The schedulers the device ran under, in order; zram: [`NO_SCHEDULER`].
    pub schedulers: Vec<String>,
    /// The scheduler (and bfq's `slice_idle`, where bfq was the scheduler) before the first
    /// turn and after the study restored it; `None` without a scheduler.
    pub scheduler_before: Option<SchedulerState>,
    pub scheduler_after: Option<SchedulerState>,
    /// Whether `scheduler_after` is `scheduler_before`; `None` without a scheduler.
    pub restored: Option<bool>,
}

/// Everything the study measured.
#[derive(Debug, Clone, Default)]
pub struct AcsOutcome {
    pub results: Vec<AcsResult>,
    /// One per device created.
    pub devices: Vec<AcsDevice>,
    pub bars: Vec<AcsBar>,
    pub readers: Vec<AcsReader>,
    /// What was skipped and why, and what was set (bfq's idling).
    pub notes: Vec<String>,
    /// The probed profile of each device (smart's thresholds).
    pub profiles: Vec<(String, Profile)>,
}

/// One piece's figures (a repetition's, with one piece): its time, its thread's CPU and
/// what it decided.
#[derive(Debug, Clone, Copy, Default)]
pub struct Turn {
    pub time_ns: u64,
    pub cpu_pct: f64,
    pub corunner_work_per_s: Option<f64>,
    /// I/Os smart (or the fixed strategy) busy-waited (spin or sync), and all I/Os.
    pub busy_ios: u64,
    pub ios: u64,
    /// smart's I/Os per decision branch ([`Reason::index`]).
    pub by_reason: [u64; Reason::COUNT],
    /// Spins that ran out of their budget and slept.
    pub spin_fallbacks: u64,
    /// The median time of one read, ns.
    pub p50_ns: u64,
    /// Reads and their summed time (each read's own, as the study saw it), ns, by the way
    /// the port waited ([`Strategy::index`]): what smart's waits of each kind cost.
    pub waits_by_strategy: [u64; Strategy::COUNT],
    pub wait_ns_by_strategy: [u64; Strategy::COUNT],
}

/// The pieces of one (scheduler, strategy) over a group's rounds, in the order read: piece
/// `i` of every series of a group was read in the same round, over the same blocks.
#[derive(Debug, Clone)]
pub struct Series {
    pub scheduler: String,
    pub strategy: StrategyChoice,
    /// Pieces a repetition is read in ([`AcsPlan::pieces`]).
    pub pieces: u32,
    pub turns: Vec<Turn>,
}

impl Series {
    fn times_us(&self) -> Vec<f64> {
        self.turns.iter().map(|t| t.time_ns as f64 / 1e3).collect()
    }

    /// The mean time of one repetition and its 95% half-width, microseconds: the pieces'
    /// figures times the number of pieces (each piece is a repetition's share).
    fn repetition_mean_ci95(&self) -> Option<(f64, f64)> {
        let k = self.pieces as f64;
        mean_ci95(&self.times_us()).map(|(m, h)| (m * k, h * k))
    }

    /// Whole repetitions read.
    fn rounds(&self) -> usize {
        self.turns.len() / self.pieces.max(1) as usize
    }

    fn figures(&self) -> Vec<TurnFigures> {
        self.turns
            .iter()
            .map(|t| TurnFigures {
                perf: if t.time_ns > 0 { t.ios.max(1) as f64 * 1e9 / t.time_ns as f64 } else { 0.0 },
                corunner_work_per_s: t.corunner_work_per_s,
                cpu_pct: t.cpu_pct,
                kernel_cpu_pct: 0.0,
            })
            .collect()
    }
}

/// `(1 - r) x 100` of a time ratio, with its interval the other way round.
fn saved_pct(r: &PairedRatio) -> (f64, [f64; 2]) {
    ((1.0 - r.gmean) * 100.0, [(1.0 - r.hi) * 100.0, (1.0 - r.lo) * 100.0])
}

/// The decision branch taken most over `turns`, with its share ("cpu_busy 97%"); "fixed"
/// for a fixed strategy (no decisions).
fn main_reason(turns: &[Turn]) -> String {
    let mut reasons = [0u64; Reason::COUNT];
    for t in turns {
        for (a, b) in reasons.iter_mut().zip(t.by_reason) {
            *a += b;
        }
    }
    let total: u64 = reasons.iter().sum();
    let main = Reason::ALL.iter().max_by_key(|r| reasons[r.index()]).filter(|_| total > 0);
    main.map_or("fixed".into(), |r| format!("{} {:.0}%", r.name(), reasons[r.index()] as f64 * 100.0 / total as f64))
}

/// The median of the turns' median read times, microseconds.
fn median_p50_us(turns: &[Turn]) -> f64 {
    let mut v: Vec<u64> = turns.iter().map(|t| t.p50_ns).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let n = v.len();
    let m = if n % 2 == 1 { v[n / 2] as f64 } else { (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0 };
    m / 1e3
}

/// The 1-minute load average (`/proc/loadavg`), 0 where it cannot be read.
pub fn load_avg_1min() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|w| w.parse().ok()))
        .unwrap_or(0.0)
}

/// The records of one group's series: a result per series and the bars.
pub fn conclude(
    device: &'static str,
    pattern: AcsPattern,
    cpu_workers: u32,
    series: &[Series],
) -> (Vec<AcsResult>, Vec<AcsBar>) {
    let find = |sched: &str, s: StrategyChoice| series.iter().find(|x| x.scheduler == sched && x.strategy == s);
    let ratio = |a: &Series, b: &Series| PairedRatio::of(&a.times_us(), &b.times_us());
    let mut results = Vec::new();
    for s in series {
        // A series cut short by Ctrl-C before its second piece has no interval: left out.
        let Some((mean, half)) = s.repetition_mean_ci95() else { continue };
        let vs = |sched: &str| find(sched, BLOCK).and_then(|b| ratio(s, b)).map(|r| saved_pct(&r).0);
        results.push(AcsResult {
            record_type: "acs_result",
            device,
            scheduler: s.scheduler.clone(),
            pattern,
            strategy: s.strategy.name(),
            cpu_workers,
            mean_us: mean,
            ci95_us: half,
            improvement_pct: vs(&s.scheduler).unwrap_or(0.0),
            improvement_vs_bfq_pct: (device == "loop").then(|| vs("bfq")).flatten(),
        });
    }
    let mut bars = Vec::new();
    let Some(first) = series.first().map(|s| s.scheduler.clone()) else { return (results, bars) };
    let done = settled_by(series);
    // smart is the paper's "adaptive"; spin and sync (always busy-waiting, always inline)
    // are the two ways it may wait without a switch, each a bar of its own.
    for adaptive in series.iter().filter(|s| s.scheduler == first && s.strategy != BLOCK) {
        for (bar, original) in [("noop-vs-noop", first.as_str()), ("anti-vs-noop", "bfq")] {
            let Some(block) = find(original, BLOCK) else { continue };
            // A group cut short (Ctrl-C) after one pair has no interval: no bar.
            let Some(r) = ratio(adaptive, block).filter(|r| r.rounds >= 2) else { continue };
            let (pct, interval) = saved_pct(&r);
            let with_corunner = cpu_workers > 0;
            let dominates = judge::beats(&adaptive.figures(), &block.figures(), with_corunner).is_some();
            let (busy, ios) = adaptive.turns.iter().fold((0, 0), |(b, n), t| (b + t.busy_ios, n + t.ios));
            let fell_back: u64 = adaptive.turns.iter().map(|t| t.spin_fallbacks).sum();
            let sync = find(&first, StrategyChoice::Fixed(Strategy::Sync));
            let vs_sync =
                sync.filter(|_| adaptive.strategy == StrategyChoice::Smart).and_then(|s| paired_log_ci95(adaptive, s));
            bars.push(AcsBar {
                record_type: "acs_bar",
                device,
                pattern,
                cpu_workers,
                bar,
                adaptive: adaptive.strategy.name(),
                original_scheduler: original.to_string(),
                improvement_pct: pct,
                interval_pct: interval,
                interval95_pct: paired_log_ci95(adaptive, block).map_or([pct; 2], |(m, h)| saved_interval(m, h)),
                rounds: adaptive.rounds().min(block.rounds()),
                pairs: r.rounds,
                dominates,
                busy_pct: if ios > 0 { busy as f64 * 100.0 / ios as f64 } else { 0.0 },
                reason: main_reason(&adaptive.turns),
                fell_back_pct: if ios > 0 { fell_back as f64 * 100.0 / ios as f64 } else { 0.0 },
                p50_us: [median_p50_us(&adaptive.turns), median_p50_us(&block.turns)],
                settled: done.is_some(),
                settled_by: done,
                load_avg: [0.0; 2],
                reads_by_wait: reads_by_wait(&adaptive.turns),
                vs_sync_pct: vs_sync.map(|(m, _)| (1.0 - m.exp()) * 100.0),
                vs_sync_interval95_pct: vs_sync.map(|(m, h)| saved_interval(m, h)),
            });
        }
    }
    (results, bars)
}

/// The paired 95% interval of `a`'s time against `b`'s, piece by piece: the mean of the
/// per-piece log ratios and its Student's t half-width (`None` without two pairs). Pieces
/// of one step share the machine's state, so what swings them all cancels here, where the
/// separate means' intervals carry it in full.
pub fn paired_log_ci95(a: &Series, b: &Series) -> Option<(f64, f64)> {
    let logs: Vec<f64> = a
        .times_us()
        .iter()
        .zip(b.times_us())
        .filter(|(x, y)| **x > 0.0 && *y > 0.0)
        .map(|(x, y)| (x / y).ln())
        .collect();
    mean_ci95(&logs)
}

/// The time saved (percent) at both ends of a paired log interval `(m, h)`, low to high.
fn saved_interval(m: f64, h: f64) -> [f64; 2] {
    [(1.0 - (m + h).exp()) * 100.0, (1.0 - (m - h).exp()) * 100.0]
}

/// Why a group has measured enough, if it has: under every scheduler, the paired 95%
/// interval of smart's time against block's ([`paired_log_ci95`]) is narrower than their
/// difference (`effect`: it excludes no difference), or lies within +-[`RESOLUTION_PCT`]
/// (`resolution`: any difference is smaller than the paper's smallest bar). `effect` when
/// every scheduler settled by its effect. The issue's rule, "a 95% interval narrower than
/// the effect", asked of the difference itself rather than of each mean apart: the loop
/// device's pieces swing several times over with the machine (a stall is a 4 ms tick and
/// the stalls come and go in bursts), which the separate means' intervals carry in full
/// and the paired ratios cancel.
pub fn settled_by(series: &[Series]) -> Option<&'static str> {
    let find = |sched: &str, s: StrategyChoice| series.iter().find(|x| x.scheduler == sched && x.strategy == s);
    let mut scheds: Vec<&str> = series.iter().map(|s| s.scheduler.as_str()).collect();
    scheds.dedup();
    let mut why = "effect";
    for sched in scheds {
        let (Some(block), Some(smart)) = (find(sched, BLOCK), find(sched, StrategyChoice::Smart)) else { continue };
        let (m, h) = paired_log_ci95(smart, block)?;
        if h < m.abs() {
            continue;
        }
        let [lo, hi] = saved_interval(m, h);
        if lo > -RESOLUTION_PCT && hi < RESOLUTION_PCT {
            why = "resolution";
            continue;
        }
        return None;
    }
    Some(why)
}

/// Whether a group has measured enough ([`settled_by`]).
pub fn settled(series: &[Series]) -> bool {
    settled_by(series).is_some()
}

/// The scheduler of a block device this process created, set for a turn and put back when
/// dropped (also on errors and Ctrl-C: the run unwinds). bfq gets idling on
/// (`slice_idle` > 0) and its old value back.
pub struct SchedulerGuard {
    queue: PathBuf,
    original: String,
    /// What [`SchedulerGuard::state`] read when the guard was made.
    before: SchedulerState,
    /// The scheduler this guard set last (a write of the same one is skipped: each write
    /// freezes the queue, 25-40 ms here).
    current: Option<String>,
    /// bfq's slice_idle to put back: before we set it, or bfq's own when it was the scheduler.
    slice_idle: Option<String>,
}

/// The scheduler in brackets of a `queue/scheduler` file ("none [mq-deadline] kyber bfq"),
/// or its only word (what a write left in a plain file standing in for sysfs).
pub fn current_scheduler(text: &str) -> Option<&str> {
    let bracketed = text.split_whitespace().find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')));
    bracketed.or_else(|| {
        let mut words = text.split_whitespace();
        words.next().filter(|_| words.next().is_none())
    })
}

/// A queue's scheduler and, when it is bfq, its `slice_idle`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchedulerState {
    pub scheduler: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slice_idle: Option<String>,
}

impl SchedulerGuard {
    /// The guard of `device` (`/dev/loopN`): remembers its scheduler.
    pub fn of(device: &Path) -> Result<SchedulerGuard, Error> {
        let name = device.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        SchedulerGuard::at(Path::new("/sys/block").join(name).join("queue"))
    }

    /// The guard of a queue directory (`/sys/block/NAME/queue`).
    pub fn at(queue: PathBuf) -> Result<SchedulerGuard, Error> {
        let before = SchedulerGuard::state(&queue)?;
        // bfq's tunables die with it when another scheduler is set: its idling is put back
        // by value.
        let slice_idle = before.slice_idle.clone();
        Ok(SchedulerGuard { queue, original: before.scheduler.clone(), before, slice_idle, current: None })
    }

    /// The queue's scheduler now, and bfq's `slice_idle` when bfq is the scheduler.
    pub fn state(queue: &Path) -> Result<SchedulerState, Error> {
        let path = queue.join("scheduler");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(ErrorKind::Setup, &path, e))?;
        let scheduler = current_scheduler(&text).unwrap_or("none").to_string();
        let slice_idle = (scheduler == "bfq")
            .then(|| std::fs::read_to_string(queue.join("iosched/slice_idle")).ok())
            .flatten()
            .map(|t| t.trim().to_string());
        Ok(SchedulerState { scheduler, slice_idle })
    }

    /// Puts the scheduler back (what dropping the guard does) and reads it back: the state
    /// before the guard's first change and after the restoring.
    pub fn restore(self) -> (SchedulerState, Result<SchedulerState, Error>) {
        let queue = self.queue.clone();
        let before = self.before.clone();
        drop(self);
        (before, SchedulerGuard::state(&queue))
    }

    /// The schedulers the kernel offers for the device.
    pub fn available(&self) -> Vec<String> {
        std::fs::read_to_string(self.queue.join("scheduler"))
            .unwrap_or_default()
            .split_whitespace()
            .map(|w| w.trim_matches(['[', ']']).to_string())
            .collect()
    }

    /// Sets `sched`; for bfq, idling on. Returns what was set (for the notes).
    pub fn set(&mut self, sched: &str) -> Result<Option<String>, Error> {
        if self.current.as_deref() == Some(sched) {
            return Ok(None);
        }
        let path = self.queue.join("scheduler");
        std::fs::write(&path, sched).map_err(|e| Error::io(ErrorKind::Setup, &path, e))?;
        self.current = Some(sched.to_string());
        if sched != "bfq" {
            return Ok(None);
        }
        let idle = self.queue.join("iosched/slice_idle");
        let now = std::fs::read_to_string(&idle).map_err(|e| Error::io(ErrorKind::Setup, &idle, e))?;
        if now.trim().parse::<u64>().unwrap_or(0) > 0 {
            return Ok(Some(format!("bfq slice_idle {} ms (the kernel's)", now.trim())));
        }
        std::fs::write(&idle, BFQ_SLICE_IDLE_MS.to_string()).map_err(|e| Error::io(ErrorKind::Setup, &idle, e))?;
        self.slice_idle.get_or_insert(now.trim().to_string());
        Ok(Some(format!("bfq slice_idle set to {BFQ_SLICE_IDLE_MS} ms (was {})", now.trim())))
    }
}

impl Drop for SchedulerGuard {
    fn drop(&mut self) {
        if let Some(idle) = &self.slice_idle {
            // Only while bfq is still the scheduler: its tunables exist only then.
            let _ = std::fs::write(self.queue.join("scheduler"), "bfq");
            let _ = std::fs::write(self.queue.join("iosched/slice_idle"), idle);
        }
        let _ = std::fs::write(self.queue.join("scheduler"), &self.original);
    }
}

/// Writes the study's file: `bytes` of incompressible data (zram would store a uniform page
/// without compressing it), synced and dropped from the page cache so O_DIRECT reads find
/// it on the device only.
fn write_file(path: &Path, bytes: u64) -> Result<(), Error> {
    let io = |e| Error::io(ErrorKind::Setup, path, e);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(io)?;
    let mut rng = smartcon_util::rng::Rng::new(0xac5);
    let mut chunk = vec![0u8; 1 << 20];
    let mut written = 0;
    while written < bytes {
        for w in chunk.chunks_exact_mut(8) {
            w.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        let n = chunk.len().min((bytes - written) as usize);
        f.write_all(&chunk[..n]).map_err(io)?;
        written += n as u64;
    }
    f.sync_all().map_err(io)?;
    use std::os::fd::AsRawFd;
    // SAFETY: a valid open descriptor; posix_fadvise only advises the kernel.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    Ok(())
}

/// The stretch of a repetition's order (read indexes, not blocks) that piece `p` of `pieces`
/// covers: the pieces are contiguous, in order, and together the whole repetition.
pub fn piece_range(p: u32, pieces: u32, blocks: u64) -> std::ops::Range<u64> {
    let at = |q: u32| blocks * q as u64 / pieces.max(1) as u64;
    at(p)..at(p + 1)
}

/// One piece's reads by one strategy, gathered slice by slice ([`read_slice`]).
#[derive(Default)]
struct PieceSum {
    time_ns: u64,
    counters: Option<smartcon_engine::smartport::PortCounters>,
    corunner_work: u64,
    corunner_ns: u64,
    with_load: bool,
    waits: [u64; Strategy::COUNT],
    wait_ns: [u64; Strategy::COUNT],
}

impl PieceSum {
    fn turn(self) -> Turn {
        let Some(c) = self.counters else { return Turn::default() };
        let cpu_ns = (c.usage.user_ns + c.usage.sys_ns) as f64;
        let busy = c.by_strategy[Strategy::Spin.index()] + c.by_strategy[Strategy::Sync.index()];
        Turn {
            time_ns: self.time_ns,
            cpu_pct: cpu_ns * 100.0 / self.time_ns.max(1) as f64,
            corunner_work_per_s: self
                .with_load
                .then(|| self.corunner_work as f64 * 1e9 / self.corunner_ns.max(1) as f64),
            busy_ios: busy,
            ios: c.ios,
            by_reason: c.by_reason,
            spin_fallbacks: c.spin_fallbacks,
            p50_ns: c.hist.value_at_quantile(0.5),
            waits_by_strategy: self.waits,
            wait_ns_by_strategy: self.wait_ns,
        }
    }
}

/// Reads `order` of the file in `pattern`'s order on `port` (all of it, `0..blocks`, is one
/// repetition) and adds its time, counters and the crunchers' work meanwhile to `sum`.
fn read_slice(
    port: &mut SmartTargetPort<'_>,
    buf: &mut [u8],
    pattern: AcsPattern,
    blocks: u64,
    order: std::ops::Range<u64>,
    load: Option<&CpuLoad>,
    sum: &mut PieceSum,
) -> Result<(), Error> {
    let before: Option<LoadSnapshot> = load.map(CpuLoad::snapshot);
    port.reset_counters();
    let t0 = now_ns();
    for i in order {
        let off = pattern.block(i, blocks) * BLOCK_BYTES;
        // Each read's own time, by the way the port waited (the strategy whose count it
        // added): every strategy's reads pay the same two clock reads.
        let ways = port.counters().by_strategy;
        let r0 = now_ns();
        let n = port.read_at(buf, off)?;
        let took = now_ns() - r0;
        if let Some(w) = port.counters().by_strategy.iter().zip(ways).position(|(a, b)| *a != b) {
            sum.waits[w] += 1;
            sum.wait_ns[w] += took;
        }
        if n != buf.len() {
            return Err(Error::new(ErrorKind::Io, format!("short read of {n} bytes at {off}")));
        }
    }
    sum.time_ns += now_ns() - t0;
    let c = port.finish();
    match sum.counters.as_mut() {
        Some(all) => all.merge(&c),
        None => sum.counters = Some(c),
    }
    if let Some((a, b)) = before.zip(load.map(CpuLoad::snapshot)) {
        let d = a.delta_to(&b);
        sum.corunner_work += d.work;
        sum.corunner_ns += d.real_ns;
        sum.with_load = true;
    }
    Ok(())
}

/// The slices a piece is read in, each with the order the strategies take their turns
/// in it: `order` cut into stretches of `slice_reads` reads (the whole piece with 0), and
/// for slice `j` the balanced order of `step + j` ([`crate::turn_order`]). Every strategy
/// reads every slice once, so every block of the piece once, in the pattern's order.
pub fn piece_slices(
    order: std::ops::Range<u64>,
    slice_reads: u64,
    strategies: usize,
    step: usize,
) -> Vec<(std::ops::Range<u64>, Vec<usize>)> {
    let len = if slice_reads == 0 { (order.end - order.start).max(1) } else { slice_reads };
    let mut out = Vec::new();
    let mut at = order.start;
    while at < order.end {
        let end = (at + len).min(order.end);
        out.push((at..end, turn_order(strategies, step + out.len())));
        at = end;
    }
    out
}

/// One piece of one round by every strategy on `ports`, interleaved in slices
/// ([`piece_slices`]); a turn per port, in the ports' order.
#[allow(clippy::too_many_arguments)]
fn piece(
    ports: &mut [SmartTargetPort<'_>],
    buf: &mut [u8],
    pattern: AcsPattern,
    blocks: u64,
    order: std::ops::Range<u64>,
    slice_reads: u64,
    step: usize,
    load: Option<&CpuLoad>,
    stop: &AtomicBool,
) -> Result<Option<Vec<Turn>>, Error> {
    let mut sums: Vec<PieceSum> = ports.iter().map(|_| PieceSum::default()).collect();
    for (range, turns) in piece_slices(order, slice_reads, ports.len(), step) {
        for s in turns {
            if stopped(stop) {
                return Ok(None);
            }
            read_slice(&mut ports[s], buf, pattern, blocks, range.clone(), load, &mut sums[s])?;
        }
    }
    Ok(Some(sums.into_iter().map(PieceSum::turn).collect()))
}

fn device_name(kind: FsDeviceKind) -> &'static str {
    match kind {
        FsDeviceKind::Loop => "loop",
        FsDeviceKind::Zram => "zram",
    }
}

/// Runs the study. Records go to `on_record` as each group ends (an interrupted run keeps
/// what it measured). Refuses to start ([`AcsPlan::preflight`]) where a step would fail.
pub fn run(
    plan: &AcsPlan,
    monitor: &SystemMonitor,
    stop: &AtomicBool,
    progress: &mut Progress<'_>,
    on_record: &mut dyn FnMut(&dyn erased::Record) -> Result<(), Error>,
) -> Result<AcsOutcome, Error> {
    plan.validate()?;
    // Root, the tools and the readers' library, now: the readers come after every group.
    plan.preflight()?;
    let mut out = AcsOutcome::default();
    let loads: Vec<u32> = [0, plan.cpu_workers].into_iter().filter(|&w| w == 0 || plan.cpu_workers > 0).collect();
    let groups = plan.devices.len() * loads.len() * plan.patterns.len();
    progress(Event::Steps(groups as u64));
    for &kind in &plan.devices {
        if stopped(stop) {
            break;
        }
        let name = device_name(kind);
        progress(Event::Note(&format!("{name}: creating ext2 on {} ...", name)));
        let fs = match DeviceFs::create(kind, plan.device_bytes(), "ext2") {
            Ok(fs) => fs,
            Err(e) if kind == FsDeviceKind::Zram => {
                out.notes.push(format!("zram skipped: {}", e.message));
                progress(Event::Note(out.notes.last().expect("just pushed")));
                continue;
            }
            Err(e) => return Err(e),
        };
        let file = fs.path().join("acs.dat");
        write_file(&file, plan.file_bytes)?;
        let opts = OpenOptions { write: false, destructive: false, created_by_tool: true };
        let t = target::open(&TargetSpec::Path(file.clone()), opts)?;
        if t.block_bytes() > BLOCK_BYTES {
            return Err(Error::new(ErrorKind::Setup, format!("{} needs {}-byte I/O", t.label(), t.block_bytes())));
        }
        let probe = ProbePlan {
            sizes: PROBE_SIZES_BYTES.iter().copied().filter(|&s| s <= plan.file_bytes / 4).collect(),
            duration_ns: plan.probe_ns,
            writes: false,
            cpus: None,
            host_profile: plan.host_profile.clone(),
        };
        let profile = if plan.probe_ns > 0 {
            progress(Event::Note(&format!("{name}: probing the ext2 file for smart's thresholds ...")));
            let mut notes_only = |e: Event<'_>| {
                if let Event::Note(n) = e {
                    progress(Event::Note(n));
                }
            };
            probe_target(t.as_ref(), &probe, monitor, stop, &mut notes_only)?.profile
        } else {
            Profile::paper_default(&t.device_id())
        };
        out.profiles.push((name.to_string(), profile.clone()));
        let mut guard = match kind {
            FsDeviceKind::Loop => Some(SchedulerGuard::of(fs.device_path())?),
            FsDeviceKind::Zram => None,
        };
        let scheds: Vec<String> = match &guard {
            Some(g) => {
                let have = g.available();
                let (ok, missing): (Vec<String>, Vec<String>) =
                    plan.schedulers.iter().cloned().partition(|s| have.contains(s));
                if !missing.is_empty() {
                    out.notes.push(format!("{name}: schedulers not offered by this kernel: {}", missing.join(", ")));
                }
                ok
            }
            None => vec![NO_SCHEDULER.to_string()],
        };
        for &workers in &loads {
            let load = if workers > 0 && !stopped(stop) {
                let l = CpuLoad::start(workers)?;
                std::thread::sleep(std::time::Duration::from_nanos(SETTLE_NS));
                Some(l)
            } else {
                None
            };
            // The 1 + 9 experiment: under the first scheduler only (the paper's noop).
            let scheds_here: Vec<String> = if workers > 0 { scheds[..1].to_vec() } else { scheds.clone() };
            for &pattern in &plan.patterns {
                if stopped(stop) {
                    break;
                }
                progress(Event::Starting(&format!("{name} {} cpu_workers={workers}", pattern.name())));
                let load_before = load_avg_1min();
                let group_started = now_ns();
                let (series, times) = run_group(
                    plan,
                    t.as_ref(),
                    &profile,
                    monitor,
                    &mut guard,
                    &scheds_here,
                    pattern,
                    load.as_ref(),
                    stop,
                    &mut out.notes,
                )?;
                let (results, mut bars) = conclude(name, pattern, workers, &series);
                out.notes.push(format!(
                    "{name} {} cpu_workers={workers}: {:.1} s, of which reads {:.1} s and {} scheduler switches {:.1} s (longest {:.3} s)",
                    pattern.name(),
                    (now_ns() - group_started) as f64 / 1e9,
                    times.reads_ns as f64 / 1e9,
                    times.switches,
                    times.switch_ns as f64 / 1e9,
                    times.switch_max_ns as f64 / 1e9
                ));
                let load_after = load_avg_1min();
                for b in bars.iter_mut() {
                    b.load_avg = [load_before, load_after];
                }
                if !settled(&series) && !stopped(stop) {
                    let rounds = series.first().map_or(0, Series::rounds);
                    out.notes.push(format!(
                        "{name} {} cpu_workers={workers}: not settled after {rounds} rounds of {} pieces ({:.0} s; the cap is {} rounds or {:.0} s once an interval is possible): smart's paired 95% interval against block's is neither narrower than their difference nor within +-{RESOLUTION_PCT}% under every scheduler",
                        pattern.name(),
                        plan.pieces,
                        (now_ns() - group_started) as f64 / 1e9,
                        plan.rounds_max,
                        plan.group_budget_ns as f64 / 1e9
                    ));
                }
                for r in &results {
                    on_record(r)?;
                }
                for b in &bars {
                    on_record(b)?;
                }
                out.results.extend(results);
                out.bars.extend(bars);
                progress(Event::Done);
            }
        }
        // The scheduler back before the unmodified readers (they run under the first).
        if let (Some(g), Some(first)) = (guard.as_mut(), scheds.first()) {
            g.set(first)?;
        }
        if plan.reader_rounds > 0 && !stopped(stop) {
            match &plan.smartcon_exe {
                Some(exe) => {
                    let first = scheds.first().cloned().unwrap_or_else(|| "none".into());
                    let blocks = plan.file_bytes / BLOCK_BYTES;
                    for r in
                        readers(exe, &file, blocks, name, &first, plan.reader_rounds, stop, &mut out.notes, progress)?
                    {
                        on_record(&r)?;
                        out.readers.push(r);
                    }
                }
                None => out.notes.push("unmodified readers skipped: no smartcon binary given".into()),
            }
        }
        // The scheduler put back and read back while the device still exists.
        let restored = guard.take().map(SchedulerGuard::restore);
        let (before, after) = match restored {
            Some((before, Ok(after))) => (Some(before), Some(after)),
            Some((before, Err(e))) => {
                out.notes.push(format!("{name}: the scheduler could not be read back: {}", e.message));
                (Some(before), None)
            }
            None => (None, None),
        };
        let device = AcsDevice {
            record_type: "acs_device",
            device: name,
            node: fs.device_path().display().to_string(),
            has_scheduler: kind == FsDeviceKind::Loop,
            schedulers: scheds.clone(),
            restored: before.as_ref().map(|b| Some(b) == after.as_ref()),
            scheduler_before: before,
            scheduler_after: after,
        };
        if device.restored == Some(false) {
            out.notes.push(format!(
                "{name}: the scheduler was not restored: {:?} before, {:?} after",
                device.scheduler_before, device.scheduler_after
            ));
        }
        if kind == FsDeviceKind::Zram {
            out.notes.push(format!(
                "zram has no I/O scheduler (a bio-based device: no queue/scheduler file); its records say {NO_SCHEDULER}"
            ));
        }
        on_record(&device)?;
        out.devices.push(device);
        drop(t);
        drop(fs);
    }
    out.notes.dedup();
    Ok(out)
}

fn stopped(stop: &AtomicBool) -> bool {
    stop.load(Ordering::Relaxed) || smartcon_engine::stop::requested()
}

/// One group's rounds: every (scheduler, strategy) reads the file once per round, in
/// [`AcsPlan::pieces`] pieces interleaved piece by piece in a balanced order, on the I/O thread of this group (registered with the System Monitor, so
/// smart does not count its own spinning as load).
#[allow(clippy::too_many_arguments)]
fn run_group(
    plan: &AcsPlan,
    t: &dyn Target,
    profile: &Profile,
    monitor: &SystemMonitor,
    guard: &mut Option<SchedulerGuard>,
    scheds: &[String],
    pattern: AcsPattern,
    load: Option<&CpuLoad>,
    stop: &AtomicBool,
    notes: &mut Vec<String>,
) -> Result<(Vec<Series>, GroupTimes), Error> {
    let blocks = plan.file_bytes / BLOCK_BYTES;
    let mut times = GroupTimes::default();
    let mut series: Vec<Series> = scheds
        .iter()
        .flat_map(|sc| {
            plan.strategies.iter().map(move |&s| Series {
                scheduler: sc.clone(),
                strategy: s,
                pieces: plan.pieces.max(1),
                turns: Vec::new(),
            })
        })
        .collect();
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> Result<(), Error> {
                // Pinned before the ports (and their rings) exist, so each ring sees its
                // thread's CPUs and sends io_uring's helpers elsewhere while it spins.
                if let Some(cpus) = &plan.io_cpus {
                    smartcon_engine::placement::pin_current_thread(cpus)?;
                }
                let _registration = monitor.register_current_thread();
                let mut ports: Vec<SmartTargetPort<'_>> = Vec::new();
                for &s in &plan.strategies {
                    let options = SmartPortOptions {
                        strategy: s,
                        profile: Some(profile.clone()),
                        monitor: Some(std::sync::Arc::new(monitor.clone())),
                        ..SmartPortOptions::default()
                    };
                    ports.push(SmartTargetPort::on_target(t, options)?);
                }
                let mut buf = smartcon_engine::target::AlignedBuf::new(BLOCK_BYTES as usize);
                // Warm-up: a fresh ring and the file's block map pay once.
                for port in ports.iter_mut() {
                    let warm = 0..blocks.min(256);
                    read_slice(port, buf.as_mut_slice(), pattern, warm.end, warm, None, &mut PieceSum::default())?;
                }
                let started = now_ns();
                let k = plan.pieces.max(1);
                let mut last_set: Option<usize> = None;
                for round in 0..plan.rounds_max as usize {
                    // Piece p of every (scheduler, strategy) before piece p + 1 of any: each
                    // reads the whole file once a round, and pieces of one step are paired.
                    for p in 0..k {
                        let step = round * k as usize + p as usize;
                        for si in turn_order(scheds.len(), step) {
                            if let Some(g) = guard.as_mut() {
                                times.switches += u64::from(last_set != Some(si));
                                last_set = Some(si);
                                let t0 = now_ns();
                                let set = g.set(&scheds[si])?;
                                let took = now_ns() - t0;
                                times.switch_ns += took;
                                times.switch_max_ns = times.switch_max_ns.max(took);
                                if let Some(n) = set {
                                    if !notes.contains(&n) {
                                        notes.push(n);
                                    }
                                }
                            }
                            let order = piece_range(p, k, blocks);
                            let slice = plan.slice_reads;
                            let buf = buf.as_mut_slice();
                            let Some(turns) = piece(&mut ports, buf, pattern, blocks, order, slice, step, load, stop)?
                            else {
                                return Ok(());
                            };
                            for (s, turn) in turns.into_iter().enumerate() {
                                times.reads_ns += turn.time_ns;
                                series[si * plan.strategies.len() + s].turns.push(turn);
                            }
                        }
                    }
                    let enough = round + 1 >= plan.rounds_min as usize && settled(&series);
                    // An interval needs two pairs: two rounds, or one round in two pieces.
                    let has_interval = (round + 1) * k as usize >= 2;
                    if enough || (has_interval && now_ns() - started > plan.group_budget_ns) {
                        break;
                    }
                }
                Ok(())
            })
            .join()
            .unwrap_or_else(|_| Err(Error::new(ErrorKind::Internal, "the acs I/O thread panicked")))
    })?;
    // Ctrl-C mid-step: every series keeps the pieces all of them read, so pairs stay aligned.
    let done = series.iter().map(|s| s.turns.len()).min().unwrap_or(0);
    for s in series.iter_mut() {
        s.turns.truncate(done);
    }
    Ok((series, times))
}

/// Where a group's time went besides its reads: the scheduler switches (each one freezes
/// the loop device's queue).
#[derive(Debug, Clone, Copy, Default)]
pub struct GroupTimes {
    /// The pieces' read time, summed.
    pub reads_ns: u64,
    pub switches: u64,
    pub switch_ns: u64,
    pub switch_max_ns: u64,
}

/// The unmodified readers: `dd iflag=direct` (sequential) and fio replaying the random
/// order from an iolog, each under `smartcon run --strategy block|smart`, in alternating
/// order, `rounds` times.
#[allow(clippy::too_many_arguments)]
fn readers(
    exe: &Path,
    file: &Path,
    blocks: u64,
    device: &'static str,
    scheduler: &str,
    rounds: u32,
    stop: &AtomicBool,
    notes: &mut Vec<String>,
    progress: &mut Progress<'_>,
) -> Result<Vec<AcsReader>, Error> {
    let have = |tool: &str| std::process::Command::new(tool).arg("--version").output().is_ok();
    let strategies = ["block", "smart"];
    let mut out = Vec::new();
    let log = file.with_extension("iolog");
    for pattern in AcsPattern::ALL {
        let reader = match pattern {
            AcsPattern::Sequential => "dd",
            AcsPattern::Random => "fio",
        };
        if !have(reader) {
            notes.push(format!("{reader} is not installed: the unmodified {} reader skipped", pattern.name()));
            continue;
        }
        if pattern == AcsPattern::Random {
            write_iolog(&log, file, blocks)?;
        }
        progress(Event::Note(&format!("{device}: {reader} under smartcon run ({} reads) ...", pattern.name())));
        let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for round in 0..rounds as usize {
            for k in turn_order(2, round) {
                if stopped(stop) {
                    break;
                }
                let ns = reader_turn(exe, strategies[k], pattern, file, &log, blocks)?;
                times[k].push(ns / 1e3);
            }
        }
        let r = PairedRatio::of(&times[1], &times[0]);
        for (k, t) in times.iter().enumerate() {
            let Some((mean, half)) = mean_ci95(t) else { continue };
            out.push(AcsReader {
                record_type: "acs_reader",
                device,
                scheduler: scheduler.to_string(),
                pattern,
                reader,
                strategy: strategies[k],
                mean_us: mean,
                ci95_us: half,
                improvement_pct: if k == 0 { 0.0 } else { r.map_or(0.0, |r| saved_pct(&r).0) },
                rounds: t.len(),
            });
        }
    }
    let _ = std::fs::remove_file(&log);
    Ok(out)
}

/// fio's iolog (version 2) of the random pattern over `file`.
fn write_iolog(log: &Path, file: &Path, blocks: u64) -> Result<(), Error> {
    let io = |e| Error::io(ErrorKind::Setup, log, e);
    let mut w = std::io::BufWriter::new(std::fs::File::create(log).map_err(io)?);
    let f = file.display();
    writeln!(w, "fio version 2 iolog\n{f} add\n{f} open").map_err(io)?;
    for i in 0..blocks {
        writeln!(w, "{f} read {} {BLOCK_BYTES}", AcsPattern::Random.block(i, blocks) * BLOCK_BYTES).map_err(io)?;
    }
    writeln!(w, "{f} close").map_err(io)?;
    w.flush().map_err(io)
}

/// One reader run under `smartcon run --strategy S`: its own figure of the read time, ns.
fn reader_turn(
    exe: &Path,
    strategy: &str,
    pattern: AcsPattern,
    file: &Path,
    log: &Path,
    blocks: u64,
) -> Result<f64, Error> {
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["run", "--strategy", strategy, "--"]).env("LC_ALL", "C");
    match pattern {
        AcsPattern::Sequential => {
            cmd.arg("dd").arg(format!("if={}", file.display())).args([
                "of=/dev/null",
                "bs=4096",
                "iflag=direct",
                &format!("count={blocks}"),
            ]);
        }
        AcsPattern::Random => {
            cmd.args(["fio", "--name=acs", "--ioengine=psync", "--direct=1", "--output-format=json"])
                .arg(format!("--read_iolog={}", log.display()))
                .arg(format!("--filename={}", file.display()));
        }
    }
    let out = cmd.output().map_err(|e| Error::new(ErrorKind::Setup, format!("cannot run {}: {e}", exe.display())))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
        return Err(Error::new(
            ErrorKind::Setup,
            format!("smartcon run --strategy {strategy} -- {pattern:?} reader failed: {last}"),
        ));
    }
    let parsed = match pattern {
        AcsPattern::Sequential => dd_seconds(&text).map(|s| s * 1e9),
        AcsPattern::Random => fio_read_ns(&String::from_utf8_lossy(&out.stdout)),
    };
    parsed.ok_or_else(|| Error::new(ErrorKind::Setup, format!("no time in the {} reader's output", pattern.name())))
}

/// dd's own time of the copy: "... copied, 0.534 s, 196 MB/s".
pub fn dd_seconds(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.contains(" copied, "))?;
    line.split(" copied, ").nth(1)?.split(" s").next()?.trim().parse().ok()
}

/// fio's summed read latency (mean x count), ns, from its JSON output (text before the
/// JSON, such as a preload's notes, is skipped).
pub fn fio_read_ns(text: &str) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_str(&text[text.find('{')?..]).ok()?;
    let read = &v["jobs"][0]["read"];
    let mean = read["lat_ns"]["mean"].as_f64()?;
    let n = read["total_ios"].as_f64()?;
    (n > 0.0).then_some(mean * n)
}

/// The records `run` hands over, of whatever type.
pub mod erased {
    /// A record the caller writes as one JSON line.
    pub trait Record {
        fn json(&self) -> serde_json::Result<String>;
    }

    impl<T: serde::Serialize> Record for T {
        fn json(&self) -> serde_json::Result<String> {
            serde_json::to_string(self)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(sched: &str, s: StrategyChoice, times_us: &[f64]) -> Series {
        Series {
            scheduler: sched.into(),
            strategy: s,
            pieces: 1,
            turns: times_us
                .iter()
                .map(|t| {
                    let mut by_reason = [0; Reason::COUNT];
                    by_reason[Reason::CpuBusy.index()] = 3;
                    by_reason[Reason::CpuAvailable.index()] = 1;
                    Turn {
                        time_ns: (t * 1e3) as u64,
                        cpu_pct: 50.0,
                        ios: 10,
                        busy_ios: 5,
                        by_reason,
                        spin_fallbacks: 2,
                        p50_ns: (t * 1e3 / 10.0) as u64,
                        ..Turn::default()
                    }
                })
                .collect(),
        }
    }

    #[test]
    fn patterns_read_every_block_once_in_the_papers_orders() {
        let n = 7;
        let rand: Vec<u64> = (0..n).map(|i| AcsPattern::Random.block(i, n)).collect();
        assert_eq!(rand, [0, 6, 1, 5, 2, 4, 3]);
        let seq: Vec<u64> = (0..n).map(|i| AcsPattern::Sequential.block(i, n)).collect();
        assert_eq!(seq, [0, 1, 2, 3, 4, 5, 6]);
        let mut r4: Vec<u64> = (0..4).map(|i| AcsPattern::Random.block(i, 4)).collect();
        assert_eq!(r4, [0, 3, 1, 2]);
        r4.sort_unstable();
        assert_eq!(r4, [0, 1, 2, 3]);
    }

    #[test]
    fn records_have_exactly_the_issues_fields_and_paired_improvements() {
        let block_none = series("none", BLOCK, &[100.0, 200.0, 100.0, 150.0]);
        // smart: 10% less time than block in every round although rounds swing 2x.
        let smart_none = series("none", StrategyChoice::Smart, &[90.0, 180.0, 90.0, 135.0]);
        // block under bfq: smart takes 80% of its time.
        let block_bfq = series("bfq", BLOCK, &[112.5, 225.0, 112.5, 168.75]);
        // smart under bfq: 5% less than block under bfq, piece by piece.
        let smart_bfq = series("bfq", StrategyChoice::Smart, &[106.875, 213.75, 106.875, 160.3125]);
        let all = [block_none, smart_none, block_bfq, smart_bfq];
        let (results, bars) = conclude("loop", AcsPattern::Random, 0, &all);
        assert_eq!(results.len(), 4);
        let v = serde_json::to_value(&results[1]).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "ci95_us",
                "cpu_workers",
                "device",
                "improvement_pct",
                "improvement_vs_bfq_pct",
                "mean_us",
                "pattern",
                "scheduler",
                "strategy",
                "type"
            ]
        );
        assert_eq!(
            (v["type"].as_str(), v["pattern"].as_str(), v["strategy"].as_str()),
            (Some("acs_result"), Some("random"), Some("smart"))
        );
        let smart = &results[1];
        assert!((smart.improvement_pct - 10.0).abs() < 1e-6, "{smart:?}");
        assert!((smart.improvement_vs_bfq_pct.unwrap() - 20.0).abs() < 1e-6, "{smart:?}");
        assert!((smart.mean_us - 123.75).abs() < 1e-9);
        // The mean's interval: Student's t with 3 degrees of freedom.
        let (_, half) = mean_ci95(&[90.0, 180.0, 90.0, 135.0]).unwrap();
        assert!((smart.ci95_us - half).abs() < 1e-9 && half > 0.0);
        assert_eq!(results[0].improvement_pct, 0.0);
        // Fig. 1's bars: the common swing cancels, so the intervals are tight, and the
        // judge says smart dominates (>= 5% surely faster at the same CPU).
        assert_eq!(bars.len(), 2);
        assert_eq!((bars[0].bar, bars[1].bar), ("noop-vs-noop", "anti-vs-noop"));
        assert!((bars[0].improvement_pct - 10.0).abs() < 1e-6 && (bars[1].improvement_pct - 20.0).abs() < 1e-6);
        assert!((bars[0].interval_pct[0] - 10.0).abs() < 1e-6 && bars[0].dominates && bars[1].dominates);
        assert_eq!((bars[0].rounds, bars[0].pairs, bars[0].busy_pct), (4, 4, 50.0));
        assert_eq!((bars[0].adaptive, bars[0].reason.as_str()), ("smart", "cpu_busy 75%"));
        // 2 of 10 reads a turn slept after the spin budget; the medians of the turns'
        // medians (9, 18, 9, 13.5 us and 10, 20, 10, 15 us) are 11.25 and 12.5 us.
        assert!((bars[0].fell_back_pct - 20.0).abs() < 1e-9, "{:?}", bars[0]);
        assert!((bars[0].p50_us[0] - 11.25).abs() < 1e-9 && (bars[0].p50_us[1] - 12.5).abs() < 1e-9, "{:?}", bars[0]);
        // block's rounds swing 2 x: each mean's own 95% interval is far wider than the 10%
        // effect (the old stopping rule never held here), but the paired ratios are exact,
        // so the group has settled by its effect under both schedulers.
        let (mb, hb) = mean_ci95(&[100.0, 200.0, 100.0, 150.0]).unwrap();
        assert!(hb > 0.1 * mb, "block's own interval {hb} is wider than the effect");
        assert_eq!(settled_by(&all), Some("effect"));
        assert!(bars[0].settled && bars[0].settled_by == Some("effect"), "{:?}", bars[0]);
        let v = serde_json::to_value(&bars[0]).unwrap();
        assert_eq!(v["settled_by"].as_str(), Some("effect"));
        // The 95% interval holds the 90% one (exact ratios: both are the point).
        assert!((bars[0].interval95_pct[0] - 10.0).abs() < 1e-6 && (bars[0].interval95_pct[1] - 10.0).abs() < 1e-6);
        // zram: no bfq figure, and no anti-vs-noop bar.
        // One round only (a run interrupted after it): no mean's interval, no bar.
        let one: Vec<Series> = all.iter().map(|x| Series { turns: x.turns[..1].to_vec(), ..x.clone() }).collect();
        let (results, bars) = conclude("loop", AcsPattern::Random, 0, &one);
        assert!(results.is_empty() && bars.is_empty(), "{bars:?}");
        let (results, bars) = conclude("zram", AcsPattern::Sequential, 9, &all[..2]);
        assert!(results.iter().all(|r| r.improvement_vs_bfq_pct.is_none() && r.cpu_workers == 9));
        assert!(serde_json::to_value(&results[1]).unwrap().get("improvement_vs_bfq_pct").is_none());
        assert_eq!(bars.len(), 1);
    }

    #[test]
    fn pieces_cover_a_repetition_once_in_order_and_scale_to_it() {
        for (pieces, blocks) in [(1, 7), (4, 7), (16, 24_414), (7, 7)] {
            let mut next = 0;
            for p in 0..pieces {
                let r = piece_range(p, pieces, blocks);
                assert_eq!(r.start, next, "pieces {pieces} of {blocks}: piece {p}");
                assert!(r.end > r.start, "no empty piece");
                next = r.end;
            }
            assert_eq!(next, blocks);
        }
        // Two rounds of 4 pieces: a repetition is the pieces' mean times 4, the bars pair the
        // 8 pieces and count 2 rounds; a run cut after 3 pieces still has a bar.
        let mk = |s, t: &[f64]| Series { pieces: 4, ..series("none", s, t) };
        let block = mk(BLOCK, &[25.0, 50.0, 25.0, 30.0, 20.0, 40.0, 25.0, 35.0]);
        let smart = mk(StrategyChoice::Smart, &[20.0, 40.0, 20.0, 24.0, 16.0, 32.0, 20.0, 28.0]);
        let (results, bars) = conclude("zram", AcsPattern::Random, 9, &[block.clone(), smart.clone()]);
        assert!((results[0].mean_us - 125.0).abs() < 1e-9, "{:?}", results[0]);
        assert!((results[1].improvement_pct - 20.0).abs() < 1e-6);
        assert_eq!((bars[0].rounds, bars[0].pairs), (2, 8));
        let cut = |s: &Series| Series { turns: s.turns[..3].to_vec(), ..s.clone() };
        let (_, bars) = conclude("zram", AcsPattern::Random, 9, &[cut(&block), cut(&smart)]);
        assert_eq!((bars[0].rounds, bars[0].pairs), (0, 3));
        assert!((bars[0].improvement_pct - 20.0).abs() < 1e-6);
        let mut p = AcsPlan::preset(AcsPreset::Default);
        assert_eq!((p.pieces, AcsPlan::preset(AcsPreset::Full).pieces), (16, 1));
        p.pieces = 0;
        assert_eq!(p.validate().unwrap_err().kind, ErrorKind::Usage);
        p.pieces = 257;
        p.file_bytes = 1 << 20;
        assert!(p.validate().unwrap_err().message.contains("--pieces"));
    }

    #[test]
    fn a_difference_within_the_noise_is_not_dominance_and_not_settled() {
        let block = series("none", BLOCK, &[100.0, 100.0, 100.0, 100.0]);
        let smart = series("none", StrategyChoice::Smart, &[80.0, 120.0, 95.0, 104.0]);
        let all = [block.clone(), smart];
        let (_, bars) = conclude("loop", AcsPattern::Sequential, 0, &all);
        assert!(!bars[0].dominates && bars[0].interval_pct[0] < 0.0 && bars[0].interval_pct[1] > 0.0, "{:?}", bars[0]);
        assert!(!settled(&all));
        let clear = [block, series("none", StrategyChoice::Smart, &[80.0, 81.0, 79.0, 80.0])];
        assert!(settled(&clear), "both intervals narrower than the 20 us effect");
        let noisy_block = series("none", BLOCK, &[60.0, 140.0, 70.0, 130.0]);
        assert!(!settled(&[noisy_block, clear[1].clone()]), "the paired ratios swing more than the effect");
        let (_, bars) = conclude("loop", AcsPattern::Sequential, 0, &all);
        assert!(!bars[0].settled && bars[0].settled_by.is_none());
        assert!(serde_json::to_value(&bars[0]).unwrap().get("settled_by").is_none());
        let [lo95, hi95] = bars[0].interval95_pct;
        assert!(lo95 < bars[0].interval_pct[0] && hi95 > bars[0].interval_pct[1], "{:?}", bars[0]);
    }

    #[test]
    fn no_difference_settles_by_resolution_once_the_paired_interval_is_within_2_pct() {
        // The loop device's way: pieces swing 10 x with the machine's stalls, smart within
        // +-0.5% of block piece by piece. The separate means' intervals are wider than the
        // mean itself; the paired interval is within +-2%: settled, by resolution.
        let b = [300.0, 3000.0, 450.0, 2700.0, 320.0, 900.0, 2500.0, 310.0];
        let wiggle = [1.004, 0.996, 1.005, 0.995, 1.0, 1.003, 0.998, 1.001];
        let block = series("none", BLOCK, &b);
        let smart_t: Vec<f64> = b.iter().zip(wiggle).map(|(x, w)| x * w).collect();
        let smart = series("none", StrategyChoice::Smart, &smart_t);
        let (m, h) = mean_ci95(&b).unwrap();
        assert!(h > 0.5 * m);
        assert_eq!(settled_by(&[block.clone(), smart.clone()]), Some("resolution"));
        // The same swing with smart +-10% piece by piece: neither.
        let wide: Vec<f64> = b.iter().enumerate().map(|(i, x)| x * if i % 2 == 0 { 1.1 } else { 0.9 }).collect();
        assert_eq!(settled_by(&[block.clone(), series("none", StrategyChoice::Smart, &wide)]), None);
        // One scheduler settled by its effect, the other by resolution: resolution.
        let faster: Vec<f64> = b.iter().map(|x| x * 0.8).collect();
        let bfq = |s: Series| Series { scheduler: "bfq".into(), ..s };
        let mixed =
            [block.clone(), series("none", StrategyChoice::Smart, &faster), bfq(block.clone()), bfq(smart.clone())];
        assert_eq!(settled_by(&mixed), Some("resolution"));
        // A scheduler not yet settled holds the group back.
        let unsettled = [block.clone(), smart, bfq(block), bfq(series("none", StrategyChoice::Smart, &wide))];
        assert_eq!(settled_by(&unsettled), None);
        // One pair: no interval, not settled.
        let one = |s: &Series| Series { turns: s.turns[..1].to_vec(), ..s.clone() };
        assert_eq!(settled_by(&[one(&mixed[0]), one(&mixed[1])]), None);
    }

    #[test]
    fn slices_deal_every_read_of_a_piece_to_every_strategy_in_turn() {
        for (order, slice, n) in [(0..1526u64, 64u64, 4usize), (100..230, 64, 3), (5..9, 64, 4), (0..10, 0, 4)] {
            let slices = piece_slices(order.clone(), slice, n, 7);
            // Contiguous, in order, the whole piece, each at most `slice` reads.
            let mut next = order.start;
            for (r, turns) in &slices {
                assert_eq!(r.start, next);
                assert!(r.end > r.start && (slice == 0 || r.end - r.start <= slice));
                next = r.end;
                let mut t = turns.clone();
                t.sort_unstable();
                assert_eq!(t, (0..n).collect::<Vec<_>>(), "every strategy once a slice");
            }
            assert_eq!(next, order.end);
            if slice == 0 {
                assert_eq!(slices.len(), 1, "0: the piece in one go");
            }
        }
        // Who goes first rotates from slice to slice: over n slices each strategy leads once.
        let slices = piece_slices(0..256, 64, 4, 0);
        let mut leads: Vec<usize> = slices.iter().map(|(_, t)| t[0]).collect();
        leads.sort_unstable();
        assert_eq!(leads, [0, 1, 2, 3]);
        assert_eq!(AcsPlan::preset(AcsPreset::Default).slice_reads, SLICE_READS);
        assert_eq!(AcsPlan::preset(AcsPreset::Full).slice_reads, 0, "--full: the paper's whole-file reads");
    }

    #[test]
    fn reader_outputs_are_parsed_and_odd_ones_refused() {
        let dd =
            "25600+0 records in\n25600+0 records out\n104857600 bytes (105 MB, 100 MiB) copied, 0.534 s, 196 MB/s\n";
        assert_eq!(dd_seconds(dd), Some(0.534));
        assert_eq!(dd_seconds("dd: failed to open"), None);
        let fio = "smartcon: note\n{\"jobs\":[{\"read\":{\"total_ios\":100,\"lat_ns\":{\"mean\":2500.0}}}]}";
        assert_eq!(fio_read_ns(fio), Some(250_000.0));
        assert_eq!(fio_read_ns("{\"jobs\":[{\"read\":{\"total_ios\":0,\"lat_ns\":{\"mean\":1.0}}}]}"), None);
        assert_eq!(current_scheduler("none [mq-deadline] kyber bfq\n"), Some("mq-deadline"));
        assert_eq!(current_scheduler("[none] \n"), Some("none"));
        assert_eq!(current_scheduler("kyber\n"), Some("kyber"));
        assert_eq!(current_scheduler("none kyber\n"), None);
    }

    #[test]
    fn the_scheduler_and_bfqs_idling_are_put_back_and_read_back() {
        // A plain directory standing in for /sys/block/loopN/queue: a write replaces the
        // file's text, as a sysfs write replaces the scheduler.
        let dir = tempfile::tempdir().unwrap();
        let q = dir.path();
        std::fs::create_dir(q.join("iosched")).unwrap();
        std::fs::write(q.join("scheduler"), "none [mq-deadline] kyber bfq\n").unwrap();
        std::fs::write(q.join("iosched/slice_idle"), "0\n").unwrap();
        let mut g = SchedulerGuard::at(q.to_path_buf()).unwrap();
        assert_eq!(g.set("bfq").unwrap().as_deref(), Some("bfq slice_idle set to 8 ms (was 0)"));
        assert_eq!(std::fs::read_to_string(q.join("iosched/slice_idle")).unwrap(), "8");
        assert_eq!(
            SchedulerGuard::state(q).unwrap(),
            SchedulerState { scheduler: "bfq".into(), slice_idle: Some("8".into()) }
        );
        // bfq again keeps the first value to restore, not our 8.
        g.set("bfq").unwrap();
        assert_eq!(g.set("kyber").unwrap(), None);
        let (before, after) = g.restore();
        assert_eq!(before, SchedulerState { scheduler: "mq-deadline".into(), slice_idle: None });
        assert_eq!(after.unwrap(), before);
        assert_eq!(std::fs::read_to_string(q.join("iosched/slice_idle")).unwrap(), "0");
        // bfq before, with idling off: put back with idling off.
        std::fs::write(q.join("scheduler"), "none mq-deadline kyber [bfq]\n").unwrap();
        let mut g = SchedulerGuard::at(q.to_path_buf()).unwrap();
        g.set("none").unwrap();
        g.set("bfq").unwrap();
        g.set("none").unwrap();
        let (before, after) = g.restore();
        assert_eq!(before, SchedulerState { scheduler: "bfq".into(), slice_idle: Some("0".into()) });
        assert_eq!(after.unwrap(), before);
        // A queue without a scheduler file (zram's): no guard.
        assert_eq!(SchedulerGuard::at(q.join("iosched")).err().map(|e| e.kind), Some(ErrorKind::Setup));
    }

    #[test]
    fn smarts_bar_says_how_it_fared_against_sync_piece_by_piece() {
        let block = series("none", BLOCK, &[100.0, 200.0, 100.0, 150.0]);
        let sync = series("none", StrategyChoice::Fixed(Strategy::Sync), &[90.0, 180.0, 90.0, 135.0]);
        // smart: 5% more time than sync in every piece although pieces swing 2 x.
        let smart = series("none", StrategyChoice::Smart, &[94.5, 189.0, 94.5, 141.75]);
        let (_, bars) = conclude("loop", AcsPattern::Random, 9, &[block, sync, smart]);
        let smart_bar = bars.iter().find(|b| b.adaptive == "smart").unwrap();
        assert!((smart_bar.vs_sync_pct.unwrap() + 5.0).abs() < 1e-6, "{smart_bar:?}");
        let [lo, hi] = smart_bar.vs_sync_interval95_pct.unwrap();
        assert!((lo + 5.0).abs() < 1e-6 && (hi + 5.0).abs() < 1e-6, "exact ratios: {lo} {hi}");
        let sync_bar = bars.iter().find(|b| b.adaptive == "sync").unwrap();
        assert!(sync_bar.vs_sync_pct.is_none() && sync_bar.vs_sync_interval95_pct.is_none());
        assert!(serde_json::to_value(sync_bar).unwrap().get("vs_sync_pct").is_none());
    }

    #[test]
    fn reads_are_told_apart_by_the_way_they_waited() {
        let mut a = Turn::default();
        a.waits_by_strategy[Strategy::Sync.index()] = 97;
        a.wait_ns_by_strategy[Strategy::Sync.index()] = 97 * 10_000;
        a.waits_by_strategy[Strategy::Block.index()] = 3;
        a.wait_ns_by_strategy[Strategy::Block.index()] = 3 * 40_000;
        let w = reads_by_wait(&[a, a]);
        assert_eq!(w.iter().map(|w| (w.wait, w.reads)).collect::<Vec<_>>(), [("block", 6), ("sync", 194)]);
        let block = &w[0];
        assert!((block.share_pct - 3.0).abs() < 1e-9 && (block.mean_us - 40.0).abs() < 1e-9, "{block:?}");
        // 3 reads of 40 us against 97 of 10 us: 120 of 1090 us.
        assert!((block.time_share_pct - 12_000.0 / 1090.0).abs() < 1e-9, "{block:?}");
        assert!(reads_by_wait(&[Turn::default()]).is_empty());
    }

    #[test]
    fn what_a_later_step_needs_is_named_before_anything_is_measured() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (bin, exe_dir) = (dir.path().join("bin"), dir.path().join("release"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(exe_dir.join("deps")).unwrap();
        let put = |p: &Path, mode: u32| {
            std::fs::write(p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        for tool in ["mkfs.ext2", "losetup", "dd", "fio"] {
            put(&bin.join(tool), 0o755);
        }
        put(&exe_dir.join("smartcon"), 0o755);
        let mut plan = AcsPlan::preset(AcsPreset::Default);
        plan.smartcon_exe = Some(exe_dir.join("smartcon"));
        let path = bin.clone().into_os_string();
        let path = Some(path.as_os_str());
        // The readers' library is missing: named, with how to build it, although every tool is there.
        let m = plan.missing(0, path);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].starts_with("libsmartcon.so:") && m[0].contains("cargo build --release"), "{m:?}");
        assert!(m[0].contains(&exe_dir.display().to_string()), "{m:?}");
        // Beside the binary, or in its deps/ (cargo's two places): nothing missing.
        put(&exe_dir.join("deps/libsmartcon.so"), 0o644);
        assert_eq!(plan.missing(0, path), Vec::<String>::new());
        std::fs::remove_file(exe_dir.join("deps/libsmartcon.so")).unwrap();
        put(&exe_dir.join("libsmartcon.so"), 0o644);
        assert_eq!(plan.missing(0, path), Vec::<String>::new());
        // Not root: named.
        let m = plan.missing(1000, path);
        assert!(m.len() == 1 && m[0].starts_with("root:"), "{m:?}");
        // Each tool gone (or not executable) is named, with its package.
        for (tool, package) in
            [("fio", "fio"), ("dd", "coreutils"), ("mkfs.ext2", "e2fsprogs"), ("losetup", "util-linux")]
        {
            std::fs::set_permissions(bin.join(tool), std::fs::Permissions::from_mode(0o644)).unwrap();
            let m = plan.missing(0, path);
            assert!(m.len() == 1 && m[0].starts_with(&format!("{tool}:")) && m[0].contains(package), "{tool}: {m:?}");
            std::fs::remove_file(bin.join(tool)).unwrap();
            assert_eq!(plan.missing(0, path), m, "{tool} removed");
            put(&bin.join(tool), 0o755);
        }
        // An empty PATH and no root: everything at once; preflight's error is a setup error.
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let m = plan.missing(1000, Some(empty.as_os_str()));
        assert_eq!(m.len(), 5, "{m:?}");
        // Without readers (or the binary to run them), their library and tools are not needed;
        // zram alone needs no losetup.
        let mut no_readers = plan.clone();
        no_readers.reader_rounds = 0;
        assert_eq!(no_readers.missing(0, Some(empty.as_os_str())).len(), 2);
        no_readers.smartcon_exe = None;
        no_readers.reader_rounds = 5;
        no_readers.devices = vec![FsDeviceKind::Zram];
        let m = no_readers.missing(0, Some(empty.as_os_str()));
        assert!(m.len() == 1 && m[0].starts_with("mkfs.ext2:"), "{m:?}");
    }

    #[test]
    fn plans_are_checked_before_anything_is_created() {
        let mut p = AcsPlan::preset(AcsPreset::Quick);
        assert!(p.validate().is_ok());
        assert_eq!(AcsPlan::preset(AcsPreset::Full).rounds_min, 1000);
        assert_eq!(AcsPlan::preset(AcsPreset::Default).file_bytes, FILE_BYTES_PAPER);
        p.file_bytes = 4097;
        assert_eq!(p.validate().unwrap_err().kind, ErrorKind::Usage);
        let mut p = AcsPlan::preset(AcsPreset::Quick);
        p.schedulers = vec!["cfq".into()];
        assert!(p.validate().unwrap_err().message.contains("cfq"));
        let mut p = AcsPlan::preset(AcsPreset::Quick);
        p.strategies.swap(0, 1);
        assert!(p.validate().is_err());
        assert!(AcsPlan::preset(AcsPreset::Default).device_bytes() > FILE_BYTES_PAPER + (16 << 20));
    }
}

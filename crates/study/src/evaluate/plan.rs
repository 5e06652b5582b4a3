//! The evaluation's matrix after defaults and limits.
//!
//! Three presets: the default (the paper's matrix on five targets, about 10 minutes),
//! `quick` (one workload, three targets, about 2 minutes) and `tiny` (a small emulated
//! device, seconds: what CI runs). Every option the caller leaves `None` takes the preset's
//! value. Turns: under a load eight short turns per cell, without one four, sixty-four for
//! large requests on the local disk, sixty shorter ones on a very fast device (see
//! [`Plan::rounds_for`]).

use std::path::PathBuf;

use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::job::StrategyChoice;
use smartcon_engine::placement::Placement;
use smartcon_workloads::load::{CPU_WORKERS_MAX, IO_WORKERS_MAX};
use smartcon_workloads::postmark::PostmarkSpec;

use super::{Load, Workload};

/// Turns of a postmark cell at most: each turn builds and removes a pool of files.
pub const POSTMARK_ROUNDS_MAX: u32 = 3;

/// Requests this large and larger on the local disk take [`Plan::rounds_bm_only_large`]
/// turns without a load.
pub const LARGE_REQUEST_BYTES: u64 = 256 << 10;

/// What the plan needs to know of a target to count its turns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetShape {
    /// Postmark can run there (a file system).
    pub has_fs: bool,
    /// A file on the machine's own disk (not a device made for the run, not emulated).
    pub local_disk: bool,
    /// A very fast device (its profile's class: a RAM block device such as zram), whose
    /// requests take a few microseconds.
    pub very_fast: bool,
}

/// Cells in one evaluation at most (a mistake beyond that, not a study).
pub const CELLS_MAX: usize = 20_000;
/// How long a load runs before a cell is measured: more than the System Monitor window.
pub const SETTLE_NS: u64 = 250_000_000;
/// The longest time per cell.
pub const DURATION_NS_MAX: u64 = 600_000_000_000;

/// The paper's number crunchers (Sec. 7.1: "ten number crunching applications").
pub const PAPER_CPU_WORKERS: u32 = 10;
/// IOZone's record sizes in the paper's sequential-read figures (Fig. 9: 4K-256K; Fig. 17:
/// 128K-512K): 4 KiB to 512 KiB in powers of two.
pub const PAPER_SIZES: [u64; 8] = [4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10];

/// Turns per cell under a load by default: at least eight (the co-runner's luck averages
/// out), and a whole number of cycles of the balanced order ([`crate::turn_order`]: `n`
/// rounds for an even number `n` of strategies, `2n` for an odd one), so every strategy
/// leads and follows every other equally often; eight where that would take more than 16.
/// Four strategies: 8; five (block, spin, sync, smart, paper): 10; three: 12.
pub fn balanced_rounds(strategies: usize) -> u32 {
    let n = strategies.max(1);
    let cycle = if n.is_multiple_of(2) { n } else { 2 * n };
    let rounds = 8usize.div_ceil(cycle) * cycle;
    if rounds > 16 {
        8
    } else {
        rounds as u32
    }
}

/// Which preset the defaults come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preset {
    #[default]
    Full,
    Quick,
    Tiny,
}

/// What the caller asks for; `None` takes the preset's value.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub preset: Preset,
    /// A comma-separated target list (`emu:PRESET,key=value` options stay with their preset).
    pub targets: Option<String>,
    pub loads: Option<Vec<Load>>,
    pub workloads: Option<Vec<Workload>>,
    pub sizes: Option<Vec<u64>>,
    /// `block` is added first if missing (the baseline every gain is against).
    pub strategies: Vec<StrategyChoice>,
    pub duration_ns: Option<u64>,
    /// The IOZone file's size (the temporary files' and created devices' size).
    pub file_size_bytes: Option<u64>,
    pub cpu_workers: Option<u32>,
    pub io_workers: u32,
    /// The IO-intensive load's workers as processes, on targets with a descriptor.
    pub io_workers_as_processes: bool,
    /// The paper's loads and IOZone sweep (Sec. 7.1, Fig. 9 and 17): ten crunchers, the
    /// I/O workers as processes, and sequential reads at 4 KiB-512 KiB in powers of two,
    /// where the caller gives no other cruncher count, workloads or sizes.
    pub paper_loads: bool,
    pub rounds: Option<u32>,
    pub postmark_dir: Option<PathBuf>,
    pub placement: Placement,
}

impl Default for PlanOptions {
    fn default() -> PlanOptions {
        PlanOptions {
            preset: Preset::Full,
            targets: None,
            loads: None,
            workloads: None,
            sizes: None,
            strategies: Vec::new(),
            duration_ns: None,
            file_size_bytes: None,
            cpu_workers: None,
            io_workers: 4,
            io_workers_as_processes: false,
            paper_loads: false,
            rounds: None,
            postmark_dir: None,
            placement: Placement::Irq,
        }
    }
}

/// The matrix after defaults and flags.
#[derive(Debug, Clone)]
pub struct Plan {
    pub targets: Vec<String>,
    pub loads: Vec<Load>,
    pub workloads: Vec<Workload>,
    pub sizes: Vec<u64>,
    pub strategies: Vec<StrategyChoice>,
    pub duration_ns: u64,
    pub cpu_workers: u32,
    pub io_workers: u32,
    /// The IO-intensive load's workers run as processes where the target has a
    /// descriptor (files and block devices): smart sees them only through the kernel's
    /// count of the device's queue, as another program's I/O.
    pub io_processes: bool,
    /// Time per point of the probe of targets without a profile.
    pub probe_ns: u64,
    /// Each cell's time is split into this many turns, strategies interleaved (under a
    /// load; see `rounds_bm_only`).
    pub rounds: u32,
    /// The same without a load, where there is no co-runner's luck to average and every
    /// switch between strategies costs a transition (see [`Plan::rounds_for`]).
    pub rounds_bm_only: u32,
    /// The same without a load on the local disk at [`LARGE_REQUEST_BYTES`] and above: more
    /// turns of the same length (see [`Plan::rounds_for`]). Equal to `rounds_bm_only` when
    /// the caller chose the rounds.
    pub rounds_bm_only_large: u32,
    /// The same without a load on a very fast device: more, shorter turns in the cell's
    /// usual time (see [`Plan::rounds_for`]). Equal to `rounds_bm_only` when the caller
    /// chose the rounds.
    pub rounds_bm_only_very_fast: u32,
    pub postmark_dir: Option<PathBuf>,
    pub postmark_files: u32,
    pub placement: Placement,
}

/// A size as the target syntax writes it (`64m`), so default targets read as before.
fn size_text(bytes: u64) -> String {
    for (shift, suffix) in [(30, "g"), (20, "m"), (10, "k")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

fn usage(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Usage, message)
}

/// Builds the plan: the preset's defaults where `o` has none, then the limits.
pub fn plan(o: &PlanOptions) -> Result<Plan, Error> {
    use Workload::*;
    let tiny = o.preset == Preset::Tiny;
    let (targets, workloads, sizes, duration_ns, file_bytes): (&str, Vec<Workload>, Vec<u64>, u64, u64) = match o.preset
    {
        Preset::Tiny => (
            "emu:optane,size=16m",
            vec![IozoneRandRead, IozoneSeqWrite, Mailserver],
            vec![4 << 10, 64 << 10],
            40_000_000,
            16 << 20,
        ),
        Preset::Quick => (
            "emu:optane,tmp:{FILE}@/var/tmp,zram:{FILE}",
            vec![IozoneRandRead],
            vec![4 << 10, 64 << 10, 256 << 10],
            500_000_000,
            64 << 20,
        ),
        Preset::Full => (
            "emu:optane,emu:nvme,emu:sata-ssd,tmp:{FILE}@/var/tmp,loop:{FILE},zram:{FILE}",
            Workload::ALL.to_vec(),
            vec![4 << 10, 16 << 10, 64 << 10, 256 << 10],
            300_000_000,
            256 << 20,
        ),
    };
    let file_bytes = o.file_size_bytes.unwrap_or(file_bytes);
    let targets = o.targets.clone().unwrap_or_else(|| targets.replace("{FILE}", &size_text(file_bytes)));
    let targets = split_targets(&targets)?;
    let loads = o.loads.clone().unwrap_or_else(|| Load::ALL.to_vec());
    let (workloads, sizes) =
        if o.paper_loads { (vec![IozoneSeqRead], PAPER_SIZES.to_vec()) } else { (workloads, sizes) };
    let workloads = o.workloads.clone().unwrap_or(workloads);
    let mut sizes = o.sizes.clone().unwrap_or(sizes);
    sizes.sort_unstable();
    sizes.dedup();
    if loads.is_empty() || workloads.is_empty() || sizes.is_empty() || targets.is_empty() {
        return Err(usage("every list (targets, loads, workloads, sizes) needs at least one entry"));
    }
    let mut strategies = o.strategies.clone();
    if !strategies.contains(&StrategyChoice::Fixed(smartcon_engine::decision::Strategy::Block)) {
        strategies.insert(0, StrategyChoice::Fixed(smartcon_engine::decision::Strategy::Block));
    }
    let mut seen = Vec::new();
    strategies.retain(|s| {
        if seen.contains(s) {
            false
        } else {
            seen.push(*s);
            true
        }
    });
    let duration_ns = o.duration_ns.unwrap_or(duration_ns);
    if duration_ns == 0 || duration_ns > DURATION_NS_MAX {
        return Err(usage("--duration must be more than 0 and at most 10 min per cell"));
    }
    let cpu_workers = o.cpu_workers.unwrap_or(match (tiny, o.paper_loads) {
        (_, true) => PAPER_CPU_WORKERS,
        (true, false) => 1,
        (false, false) => smartcon_engine::profile::online_cpus(),
    });
    if cpu_workers == 0 || cpu_workers > CPU_WORKERS_MAX {
        return Err(usage(format!("--cpu-workers must be 1..={CPU_WORKERS_MAX}")));
    }
    if o.io_workers == 0 || o.io_workers > IO_WORKERS_MAX {
        return Err(usage(format!("--io-workers must be 1..={IO_WORKERS_MAX}")));
    }
    if let Some(d) = &o.postmark_dir {
        smartcon_workloads::postmark::check_dir(d)
            .map_err(|e| Error { message: format!("--postmark-dir: {}", e.message), ..e })?;
    }
    let cells = targets.len() * loads.len() * workloads.len() * sizes.len() * strategies.len();
    let rounds_loaded = balanced_rounds(strategies.len());
    if cells > CELLS_MAX {
        return Err(usage(format!("{cells} cells is more than {CELLS_MAX}; narrow the matrix")));
    }
    Ok(Plan {
        targets,
        loads,
        workloads,
        sizes,
        strategies,
        duration_ns,
        cpu_workers,
        io_workers: if tiny { o.io_workers.min(2) } else { o.io_workers },
        io_processes: o.io_workers_as_processes || o.paper_loads,
        probe_ns: if o.preset == Preset::Full { 150_000_000 } else { 60_000_000 },
        // Under a load, eight short turns rather than three long ones, so the co-runner's
        // scheduling luck averages out within a cell (one run each, smart/block under the
        // CPU-intensive load: lowest 0.918 with 3 rounds, 0.962 with 9; docs/evaluate.md).
        // At least eight, and a whole number of cycles of the balanced order (see
        // [`balanced_rounds`]): ten for the default five strategies.
        rounds: o.rounds.unwrap_or(if tiny { 1 } else { rounds_loaded }).clamp(1, 100),
        // Without a load, four turns. Two were kept once because a spinner that starts
        // right after a blocking turn ran about 12% slower for its first tens of
        // milliseconds (docs/evaluate.md); with each turn's warm-up I/Os, four turns of 75 ms
        // measured the local disk's spin gain as two of 150 ms did (nineteenth session,
        // four runs each, alternated: 4 KiB reads 1.32-1.42 x against 1.25-1.53 x), and two
        // turns judged the same wait twice too loosely: smart/block at 256 KiB-1 MiB, where
        // both block, spread by 0.092 (rms of the log) with two turns and 0.055 with four,
        // and a 90% interval from two rounds is +-6.3 standard errors wide (one degree of
        // freedom), so the judge could hardly call an IOPS loss without a load.
        rounds_bm_only: o.rounds.unwrap_or(if tiny { 1 } else { 4 }).clamp(1, 100),
        // Large requests on the local disk: sixteen times the turns, each as long as above,
        // so the cell takes sixteen times as long. There a turn holds 100-700 requests, and
        // this host's disk drifts by 10-20 % from one 75 ms turn to the next for any
        // strategy alike, but not in step: two strategies that both block on every request
        // (block and paper, 1 MiB reads) came out 0.88-1.21 x apart per cell with four
        // turns, 0.965-1.032 x with sixteen, and at 256 KiB-1 MiB 0.982-1.024 x with
        // sixty-four (three runs each, twenty-first session; 300 ms turns drift more, not
        // less). The criterion there is "within 3 %": with sixteen turns one run in three
        // missed it where smart blocked as block did (0.955 and 0.963), with sixty-four none
        // of three (lowest 0.981), a cell's standard error 0.005-0.013.
        rounds_bm_only_large: o.rounds.unwrap_or(if tiny { 1 } else { 64 }).clamp(1, 100),
        // A very fast device without a load: sixty turns of a sixtieth of the cell's time
        // (5 ms by default), the cell no longer. There a turn holds thousands of requests of
        // 2-3 us, and the host's slow drift, not the requests' count, sets the noise: smart
        // and sync both took the plain call on every request of 12 zram cells (4 iozone
        // workloads x 4, 64 and 256 KiB), and came out 0.883-1.102 x apart per cell with four
        // turns of 75 ms (rms of the log 0.046 and 0.054, two runs), 0.950-1.071 with 16,
        // 0.964-1.080 with 32 and 0.985-1.030 with 60 (rms 0.009 and 0.015), twenty-second
        // session, alternated, quiet. The criterion there is "inline path / sync >= 0.98".
        rounds_bm_only_very_fast: o.rounds.unwrap_or(if tiny { 1 } else { 60 }).clamp(1, 100),
        postmark_dir: o.postmark_dir.clone(),
        postmark_files: if tiny { 50 } else { PostmarkSpec::default().files },
        placement: o.placement.clone(),
    })
}

impl Plan {
    /// Turns per cell under `load` (Postmark builds a file pool per turn: at most
    /// [`POSTMARK_ROUNDS_MAX`]).
    pub fn rounds_for(&self, load: Load, workload: Workload, bs_bytes: u64, target: TargetShape) -> u32 {
        let r = match load {
            Load::BmOnly if target.local_disk && bs_bytes >= LARGE_REQUEST_BYTES && workload != Workload::Postmark => {
                self.rounds_bm_only_large
            }
            Load::BmOnly if target.very_fast && workload != Workload::Postmark => self.rounds_bm_only_very_fast,
            Load::BmOnly => self.rounds_bm_only,
            _ => self.rounds,
        };
        if workload == Workload::Postmark {
            r.min(POSTMARK_ROUNDS_MAX)
        } else {
            r
        }
    }

    /// Whether any workload writes (targets must then be writable).
    pub fn writes(&self) -> bool {
        self.workloads.iter().any(|w| w.writes())
    }

    /// How long each turn of a cell takes: the cell's time split over the load's usual
    /// turns, so a cell with more turns (large requests on the local disk) takes longer;
    /// a very fast device's bm-only cell splits its time over its own turns instead.
    pub fn turn_ns(&self, load: Load, workload: Workload, target: TargetShape) -> u64 {
        let base = if workload == Workload::Postmark {
            self.rounds_for(load, workload, 0, TargetShape::default())
        } else if load == Load::BmOnly && target.very_fast {
            self.rounds_bm_only_very_fast
        } else if load == Load::BmOnly {
            self.rounds_bm_only
        } else {
            self.rounds
        };
        (self.duration_ns / base.max(1) as u64).max(1_000_000)
    }

    /// Turns in all on these targets.
    pub fn turns(&self, targets: &[TargetShape]) -> usize {
        let per_target = |load: Load, t: TargetShape| -> usize {
            self.workloads
                .iter()
                .map(|&w| {
                    if w == Workload::Postmark {
                        t.has_fs as usize * self.rounds_for(load, w, 0, t) as usize
                    } else {
                        w.cells(&self.sizes).iter().map(|c| self.rounds_for(load, w, c.bs_bytes, t) as usize).sum()
                    }
                })
                .sum()
        };
        let per_load: usize = self.loads.iter().flat_map(|&l| targets.iter().map(move |&t| per_target(l, t))).sum();
        per_load * self.strategies.len()
    }
}

/// Splits a target list on commas, keeping `emu:PRESET,key=value` options with their preset:
/// `emu:optane,channels=1,/var/tmp/f` is two targets.
pub fn split_targets(text: &str) -> Result<Vec<String>, Error> {
    let mut out: Vec<String> = Vec::new();
    for item in text.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(usage(format!("the target list has an empty item in {text:?}")));
        }
        match out.last_mut() {
            Some(prev)
                if prev.starts_with("emu:") && item.contains('=') && !item.contains(':') && !item.contains('/') =>
            {
                prev.push(',');
                prev.push_str(item);
            }
            _ => out.push(item.to_string()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartcon_engine::decision::Strategy;

    fn opts(preset: Preset) -> PlanOptions {
        PlanOptions {
            preset,
            strategies: vec![StrategyChoice::Smart, StrategyChoice::Fixed(Strategy::Spin)],
            io_workers: 4,
            ..PlanOptions::default()
        }
    }

    #[test]
    fn emulator_options_stay_with_their_preset() {
        let t = split_targets("emu:optane,size=16m,channels=2,tmp:64m@/var/tmp, zram:64m").unwrap();
        assert_eq!(t, vec!["emu:optane,size=16m,channels=2", "tmp:64m@/var/tmp", "zram:64m"]);
        // An option after a non-emulated target is a target of its own (and fails to open).
        assert_eq!(split_targets("tmp:1m,size=2m").unwrap(), vec!["tmp:1m", "size=2m"]);
        assert_eq!(split_targets("a,,b").unwrap_err().kind, ErrorKind::Usage);
    }

    #[test]
    fn presets_fill_what_is_not_given_and_block_comes_first() {
        let p = plan(&opts(Preset::Quick)).unwrap();
        assert_eq!(p.targets, vec!["emu:optane", "tmp:64m@/var/tmp", "zram:64m"]);
        assert_eq!(p.workloads, vec![Workload::IozoneRandRead]);
        assert_eq!(p.sizes, vec![4 << 10, 64 << 10, 256 << 10]);
        assert_eq!(p.strategies[0], StrategyChoice::Fixed(Strategy::Block));
        assert_eq!(p.strategies.len(), 3);
        assert_eq!((p.rounds, p.rounds_bm_only), (12, 4), "three strategies: two cycles of six");
        let full = plan(&PlanOptions { file_size_bytes: Some(1 << 30), ..opts(Preset::Full) }).unwrap();
        assert!(full.targets.contains(&"loop:1g".to_string()), "{:?}", full.targets);
        // SmartCon Fig. 15's low-end SSD (the X25-M model) is in the default matrix.
        assert!(full.targets.contains(&"emu:sata-ssd".to_string()), "{:?}", full.targets);
        assert_eq!(full.workloads.len(), 9);
        let tiny = plan(&PlanOptions { io_workers: 8, ..opts(Preset::Tiny) }).unwrap();
        assert_eq!((tiny.rounds, tiny.io_workers, tiny.cpu_workers), (1, 2, 1));
    }

    #[test]
    fn default_rounds_complete_the_balanced_order() {
        let table = [(1, 8), (2, 8), (3, 12), (4, 8), (5, 10), (6, 12), (7, 14), (8, 8), (9, 8)];
        for (n, want) in table {
            assert_eq!(balanced_rounds(n), want, "{n} strategies");
            let cycle = if n.is_multiple_of(2) { n } else { 2 * n };
            assert!(want >= 8 && ((want as usize).is_multiple_of(cycle) || want == 8), "{n}");
        }
    }

    #[test]
    fn paper_loads_take_ten_crunchers_io_processes_and_the_sequential_sweep() {
        let p = plan(&PlanOptions { paper_loads: true, ..opts(Preset::Quick) }).unwrap();
        assert_eq!((p.cpu_workers, p.io_processes), (PAPER_CPU_WORKERS, true));
        assert_eq!(p.workloads, vec![Workload::IozoneSeqRead]);
        assert_eq!(p.sizes, (12..=19).map(|k| 1u64 << k).collect::<Vec<_>>());
        // What the caller gives still wins.
        let given = PlanOptions {
            paper_loads: true,
            cpu_workers: Some(3),
            sizes: Some(vec![4096]),
            workloads: Some(vec![Workload::IozoneRandRead]),
            ..opts(Preset::Quick)
        };
        let p = plan(&given).unwrap();
        assert_eq!(
            (p.cpu_workers, p.sizes.clone(), p.workloads.clone()),
            (3, vec![4096], vec![Workload::IozoneRandRead])
        );
        let plain = plan(&opts(Preset::Quick)).unwrap();
        assert_eq!((plain.io_processes, plain.workloads.clone()), (false, vec![Workload::IozoneRandRead]));
    }

    #[test]
    fn limits_are_usage_errors() {
        let too_long = PlanOptions { duration_ns: Some(DURATION_NS_MAX + 1), ..opts(Preset::Tiny) };
        assert_eq!(plan(&too_long).unwrap_err().kind, ErrorKind::Usage);
        let no_workers = PlanOptions { io_workers: 0, ..opts(Preset::Tiny) };
        assert_eq!(plan(&no_workers).unwrap_err().kind, ErrorKind::Usage);
        let huge = PlanOptions { sizes: Some((1..=200).map(|k| k * 4096).collect()), ..opts(Preset::Full) };
        assert!(plan(&huge).unwrap_err().message.contains("narrow the matrix"));
    }

    #[test]
    fn postmark_takes_at_most_three_turns_and_only_where_there_is_a_file_system() {
        let p = plan(&PlanOptions {
            workloads: Some(vec![Workload::IozoneRandRead, Workload::Postmark]),
            loads: Some(vec![Load::BmOnly, Load::CpuIntensive]),
            sizes: Some(vec![4096]),
            ..opts(Preset::Quick)
        })
        .unwrap();
        let fs = TargetShape { has_fs: true, local_disk: true, very_fast: false };
        assert_eq!(p.rounds_for(Load::CpuIntensive, Workload::Postmark, 4096, fs), POSTMARK_ROUNDS_MAX);
        assert_eq!(p.rounds_for(Load::BmOnly, Workload::Postmark, 4096, fs), POSTMARK_ROUNDS_MAX);
        assert_eq!(p.rounds_for(Load::BmOnly, Workload::IozoneRandRead, 4096, fs), 4);
        // bm-only: 1 cell x 4 turns (+ postmark 3 turns on the fs target); cpu: 12 with
        // three strategies (+ 3).
        let per_strategy = (4 + 12) + (4 + 3 + 12 + 3);
        let no_fs = TargetShape::default();
        assert_eq!(p.turns(&[no_fs, fs]), per_strategy * p.strategies.len());
    }

    #[test]
    fn large_requests_on_the_local_disk_take_more_turns_of_the_same_length() {
        let p = plan(&PlanOptions {
            workloads: Some(vec![Workload::IozoneRandRead]),
            loads: Some(vec![Load::BmOnly, Load::CpuIntensive]),
            sizes: Some(vec![4096, LARGE_REQUEST_BYTES]),
            ..opts(Preset::Full)
        })
        .unwrap();
        let disk = TargetShape { has_fs: true, local_disk: true, very_fast: false };
        let emu = TargetShape::default();
        let rounds = |load, bs, t| p.rounds_for(load, Workload::IozoneRandRead, bs, t);
        assert_eq!(rounds(Load::BmOnly, LARGE_REQUEST_BYTES, disk), 64);
        assert_eq!(rounds(Load::BmOnly, LARGE_REQUEST_BYTES - 4096, disk), 4);
        assert_eq!(rounds(Load::BmOnly, LARGE_REQUEST_BYTES, emu), 4);
        assert_eq!(rounds(Load::CpuIntensive, LARGE_REQUEST_BYTES, disk), p.rounds);
        // Every bm-only turn is as long as the usual one: the large cell takes 16 times as long.
        assert_eq!(p.turn_ns(Load::BmOnly, Workload::IozoneRandRead, disk), p.duration_ns / 4);
        // Turns counted for the progress bar: bm-only 4 + 64 on the disk, 4 + 4 on emu.
        let loaded = 2 * p.rounds as usize;
        assert_eq!(p.turns(&[disk]), (4 + 64 + loaded) * p.strategies.len());
        assert_eq!(p.turns(&[emu]), (4 + 4 + loaded) * p.strategies.len());
        // Rounds the caller chose hold everywhere.
        let chosen = plan(&PlanOptions { rounds: Some(6), ..opts(Preset::Full) }).unwrap();
        assert_eq!(chosen.rounds_for(Load::BmOnly, Workload::IozoneRandRead, LARGE_REQUEST_BYTES, disk), 6);
    }

    #[test]
    fn a_very_fast_device_takes_more_shorter_turns_in_the_same_time() {
        let p = plan(&PlanOptions {
            workloads: Some(vec![Workload::IozoneRandRead, Workload::Postmark]),
            loads: Some(vec![Load::BmOnly, Load::CpuIntensive]),
            sizes: Some(vec![4096]),
            ..opts(Preset::Full)
        })
        .unwrap();
        let zram = TargetShape { very_fast: true, ..TargetShape::default() };
        let emu = TargetShape::default();
        let w = Workload::IozoneRandRead;
        assert_eq!(p.rounds_for(Load::BmOnly, w, 4096, zram), 60);
        assert_eq!(p.rounds_for(Load::BmOnly, w, 4096, emu), 4);
        // Under a load and for postmark nothing changes.
        assert_eq!(p.rounds_for(Load::CpuIntensive, w, 4096, zram), p.rounds);
        let fs_zram = TargetShape { has_fs: true, ..zram };
        assert_eq!(
            p.rounds_for(Load::BmOnly, Workload::Postmark, 4096, fs_zram),
            p.rounds_for(Load::BmOnly, Workload::Postmark, 4096, emu)
        );
        // The cell's time is the same: sixty turns of a sixtieth against four of a quarter.
        assert_eq!(p.turn_ns(Load::BmOnly, w, zram), p.duration_ns / 60);
        assert_eq!(p.turn_ns(Load::BmOnly, w, emu), p.duration_ns / 4);
        assert_eq!(p.turn_ns(Load::CpuIntensive, w, zram), p.turn_ns(Load::CpuIntensive, w, emu));
        assert_eq!(60 * p.turn_ns(Load::BmOnly, w, zram), 4 * p.turn_ns(Load::BmOnly, w, emu));
        // Counted for the progress bar.
        let loaded = p.rounds as usize;
        assert_eq!(p.turns(&[zram]), (60 + loaded) * p.strategies.len());
        // Rounds the caller chose hold here too.
        let chosen = plan(&PlanOptions { rounds: Some(6), ..opts(Preset::Full) }).unwrap();
        assert_eq!(chosen.rounds_for(Load::BmOnly, w, 4096, zram), 6);
        assert_eq!(chosen.turn_ns(Load::BmOnly, w, zram), chosen.turn_ns(Load::BmOnly, w, emu));
    }
}

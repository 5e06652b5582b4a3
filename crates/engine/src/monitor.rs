//! The System Monitor (SmartCon Sec. 4.2): CPU utilization over a sliding window.
//!
//! A ticker thread samples /proc/stat every `window / 10` (at least 10 ms, the kernel's
//! accounting tick) and publishes the utilization over the last `window` as one atomic. The
//! Decision Module pays one relaxed atomic load per I/O: no syscall, no summation, which is
//! the point the paper makes with its `total_CPU_stat` counter.
//!
//! The published figure leaves out the CPU time of this engine's own I/O threads (read
//! exactly from their CPU clocks): a spinner must not see its own spinning as load, or it
//! would stop spinning because it spins. `total` (with our threads) is kept for reports.
//!
//! Leaving our threads out has a blind spot: a spinner displaces other work, and what the
//! others *get* then understates what they *want*. So the published figure is the others'
//! *demand*: their utilization plus the CPU they kept from us or from each other: the
//! time our I/O threads waited on a run queue for a CPU the others held, beyond what a
//! wake-up itself takes ([`WAKEUP_ALLOWANCE_NS`] per time slice), or, when no CPU idled,
//! the CPU pressure (see [`figures`]), as shares of all CPUs' time. The wait is read per thread from
//! /proc/self/task/TID/schedstat (the scheduler's own run-delay clock). A spinner beside two
//! crunchers on two CPUs waits half its time (measured: 0.48 s a second), because they
//! compete for its CPU: that is their demand for it, and the figure reaches 100%. A spinner
//! beside four blocking I/O workers waits 1% of its time: they sleep on their device, run
//! for ~12 us at a time, wake onto the idle CPU or preempt the spinner for those
//! microseconds (they have slept, so the scheduler owes them time); a spinner takes nothing
//! from them, and the figure stays at their utilization.
//!
//! What it replaced, and why:
//! - The runnable count (`nr_running` of /proc/loadavg, sampled every 2 ms). On kernels with
//!   EEVDF's delayed dequeue (6.12+) a task that goes to sleep with negative lag stays
//!   queued, and counted, until its lag is paid off, and a wake-up onto a halted vCPU keeps
//!   a task runnable ~12 us with the CPU idle. Beside four blocking I/O workers that use
//!   0.83 CPU by their own clocks the samples read all four runnable most of the time: a
//!   "demand" of 100% of two CPUs on a machine 60% idle, and smart blocked where spinning
//!   cost the workers nothing. The sampler also cost 2.8% of a CPU in every process.
//! - The CPU pressure alone (PSI "some", the share of wall time in which *some* task
//!   waited for a CPU): a yes/no per instant, 30-50% beside the same workers, whose
//!   wake-ups overlap while a CPU idles. It counts now only when no CPU idled.
//!
//! The utilization is /proc/stat's, the kernel's tick-sampled accounting, as the paper's
//! `total_CPU_stat`: a task that runs through the tick is counted in full; one that runs for
//! microseconds between ticks on a CPU that idles its tick away is mostly not. That is the
//! distinction the threshold needs: the first kind shares its CPU with a spinner, the second
//! preempts it. The threshold it is compared against is unchanged (Table II: 100% less one
//! spinner's share).
//!
//! The ticker also reads the kernel's count of requests in flight on the block devices
//! the ports use ([`SystemMonitor::watch_device`]: the device's `stat` file in sysfs, the
//! fields of /proc/diskstats), and publishes, per device, the requests of everyone else:
//! the kernel's count less this process's own at the same instant, and their bytes at the
//! device's mean request size over the tick. The decision adds them to our own backlog
//! (branches 2 and 3 of [`crate::decision::decide`]), so another process's I/O on the same
//! disk is in the queue it sees, as the paper's block layer would see it. Like the
//! utilization it costs the I/O path two relaxed loads ([`crate::target::InFlight::enter`]).
//!
//! The machine-wide figure, our own threads included (`total`), is published on the same
//! tick as a second atomic: the `paper` strategy decides with it, as the paper's System
//! Monitor does ([`SystemMonitor::machine_utilization_pct`]).
//!
//! Non-goals: per-CPU or per-cgroup views; a machine-wide share is what the paper uses.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::target::{DeviceQueue, InFlight};
use std::thread::JoinHandle;
use std::time::Duration;

/// Busy at or above this share of all CPUs (hundredths of a percent), the machine has no CPU
/// idle, and the CPU pressure counts as demand: see [`figures`].
const SATURATED_PCT_X100: f64 = 9_500.0;

/// What one wake-up may keep a thread waiting on a run queue without the wait counting as
/// others' demand: a wake-up onto a halted vCPU takes ~12-20 us on the team's KVM guest
/// (measured: a blocking reader beside four others waits 20 us per time slice, alone 0.7
/// us). A spinner has few slices, so the allowance leaves its wait whole.
pub const WAKEUP_ALLOWANCE_NS: u64 = 20_000;

/// Bounds on the window: shorter is noise (10 ms ticks), longer reacts too late.
pub const WINDOW_NS_MIN: u64 = 20_000_000;
pub const WINDOW_NS_MAX: u64 = 10_000_000_000;
pub const WINDOW_NS_DEFAULT: u64 = 100_000_000;

#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    at_ns: u64,
    busy_ns: u64,
    /// The part of `busy_ns` the hypervisor took (steal).
    steal_ns: u64,
    total_ns: u64,
    own_ns: u64,
    /// Our I/O threads' run-queue wait beyond the wake-up allowance, cumulative.
    own_wait_ns: u64,
    /// Cumulative time some task waited for a CPU (PSI), if the kernel has it.
    stall_ns: Option<u64>,
}

struct Shared {
    /// Utilization of everyone but our I/O threads, in hundredths of a percent.
    others_pct_x100: AtomicU32,
    /// The others' utilization alone (without our threads' wait), for reports and tests.
    others_util_pct_x100: AtomicU32,
    total_pct_x100: AtomicU32,
    /// The CPU pressure alone (PSI "some" share of wall time), for reports.
    pressure_pct_x100: AtomicU32,
    /// Our threads' run-queue wait beyond wake-ups, as a share of all CPUs, for reports.
    contention_pct_x100: AtomicU32,
    /// The hypervisor's steal, as a share of all CPUs, for reports.
    steal_pct_x100: AtomicU32,
    /// How far the published demand wanders from its own recent mean (one standard
    /// deviation over about a second of ticks), in hundredths of a percent: the noise a
    /// reading carries (see [`CpuSide`]).
    others_sd_pct_x100: AtomicU32,
    /// The side of each CPU threshold (0..=100) last taken by [`CpuSide`]: 0 none yet,
    /// 1 available, 2 busy.
    sides: [AtomicU8; 101],
    stop: AtomicBool,
    threads: Mutex<Vec<OwnThread>>,
    /// CPU time of I/O threads that have deregistered, so their share stays counted.
    retired_own_ns: AtomicU64,
    /// Run-queue wait (beyond the allowance) of every I/O thread, counted at each tick and
    /// when a thread deregisters.
    own_wait_ns: AtomicU64,
    /// The block devices whose kernel queue the ticker reads.
    devices: Mutex<Vec<WatchedDevice>>,
    /// Held by the ticker while it has `devices` taken out to read their files, so a
    /// count of the watched devices waits for the list to be whole again.
    reading: Mutex<()>,
}

/// A device whose queue the ticker reads: our counters for it (weak: a device nobody uses
/// any more is dropped from the list), its stat file, and the ticker's last reading.
struct WatchedDevice {
    inflight: Weak<InFlight>,
    stat_path: PathBuf,
    last: Option<DiskStat>,
    mean_bytes: u64,
}

/// The fields of a block device's `stat` file (sysfs; the same as /proc/diskstats after
/// the device's name) that the queue needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskStat {
    /// Reads and writes completed, since boot.
    pub ios: u64,
    /// 512-byte sectors read and written, since boot.
    pub sectors: u64,
    /// Requests the device has in flight now (field 9).
    pub in_flight: u32,
}

/// Parses a sysfs `stat` file: reads, read merges, read sectors, read ticks, writes,
/// write merges, write sectors, write ticks, in flight, ... (Documentation/block/stat.rst).
pub fn parse_disk_stat(text: &str) -> Option<DiskStat> {
    let mut f = [0u64; 9];
    let mut fields = text.split_whitespace();
    for v in f.iter_mut() {
        *v = fields.next()?.parse().ok()?;
    }
    Some(DiskStat { ios: f[0] + f[4], sectors: f[2] + f[6], in_flight: f[8].min(u32::MAX as u64) as u32 })
}

/// The line of device `name` in /proc/diskstats (major, minor, name, then the stat fields).
pub fn parse_diskstats(text: &str, name: &str) -> Option<DiskStat> {
    text.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let (_major, _minor, dev) = (f.next()?, f.next()?, f.next()?);
        if dev != name {
            return None;
        }
        parse_disk_stat(&line[line.find(dev)? + dev.len()..])
    })
}

/// What a reading of the kernel's count says is in flight beyond our own `ours`
/// requests: (count, bytes, the mean request size used). The bytes are at the device's
/// mean request size over the interval since `last` (since boot at the first reading;
/// the previous mean when nothing completed meanwhile). Requests the kernel has not seen
/// yet (ours, entered but not submitted) make the difference at most smaller, never
/// negative.
pub fn others_in_flight(now: DiskStat, last: Option<DiskStat>, ours: u32, mean_prev: u64) -> (u32, u64, u64) {
    let (ios, sectors) = match last {
        Some(l) => (now.ios.saturating_sub(l.ios), now.sectors.saturating_sub(l.sectors)),
        None => (now.ios, now.sectors),
    };
    let mean = sectors.saturating_mul(512).checked_div(ios).unwrap_or(mean_prev);
    let count = now.in_flight.saturating_sub(ours);
    (count, (count as u64).saturating_mul(mean), mean)
}

/// A registered I/O thread: its CPU clock and CPU time at registration, its task id, and
/// its run-queue wait and time slices when last read.
struct OwnThread {
    clock: libc::clockid_t,
    start_cpu_ns: u64,
    tid: libc::pid_t,
    last: Option<SchedStat>,
}

/// /proc/.../schedstat: time waiting on a run queue and time slices run; /proc/.../status:
/// how often the thread left its CPU itself (it slept: `voluntary`) and how often it was
/// taken off it (preempted: `involuntary`). Both 0 where status could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SchedStat {
    wait_ns: u64,
    slices: u64,
    voluntary: u64,
    involuntary: u64,
}

fn parse_schedstat(text: &str) -> Option<SchedStat> {
    let mut f = text.split_whitespace().skip(1).map(|x| x.parse::<u64>().ok());
    Some(SchedStat { wait_ns: f.next()??, slices: f.next()??, voluntary: 0, involuntary: 0 })
}

/// (voluntary, involuntary) context switches from a /proc/.../status text.
fn parse_switches(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| -> Option<u64> { text.lines().find_map(|l| l.strip_prefix(name))?.trim().parse().ok() };
    Some((field("voluntary_ctxt_switches:")?, field("nonvoluntary_ctxt_switches:")?))
}

fn read_schedstat(tid: libc::pid_t) -> Option<SchedStat> {
    let mut st = parse_schedstat(&std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?)?;
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok();
    if let Some((v, i)) = status.as_deref().and_then(parse_switches) {
        (st.voluntary, st.involuntary) = (v, i);
    }
    Some(st)
}

/// The wait between two readings that others' demand caused: beyond a wake-up's
/// allowance per slice, and only the preempted slices' share of it.
///
/// A thread that slept was woken onto a run queue; what it waited there is the wake-up's
/// cost on this machine, not CPU it wanted and others held: it wanted none while it
/// slept, and others ran then (their utilization shows it). Measured on the team's KVM
/// guest (PVM), beside a 4 KiB blocking reader pinned to CPU 1, four blocking I/O workers
/// waited 211-457 us a time slice on a run queue (22-70 us while the reader spun), because
/// a halted vCPU's wake-up is stolen by the host; the reader's own wait, counted whole,
/// read as 10-32% of the machine demanded by others, smart blocked on `cpu_busy`, and the
/// blocking kept the reading up (spinning gave 2.4 x the IOPS there, and the workers
/// 1.7-1.9 x their work). A thread taken off its CPU while it ran (a
/// spinner) was displaced, and that wait is the others' demand the utilization misses.
/// The two kinds are not told apart per wait, so the wait is shared in proportion to the
/// switches of each kind; without the switch counts it all counts, as before.
fn excess_wait_ns(a: SchedStat, b: SchedStat) -> u64 {
    let slices = b.slices.saturating_sub(a.slices);
    let beyond = b.wait_ns.saturating_sub(a.wait_ns).saturating_sub(slices.saturating_mul(WAKEUP_ALLOWANCE_NS));
    let voluntary = b.voluntary.saturating_sub(a.voluntary);
    let involuntary = b.involuntary.saturating_sub(a.involuntary);
    match voluntary.saturating_add(involuntary) {
        0 => beyond,
        switches => (beyond as u128 * involuntary as u128 / switches as u128) as u64,
    }
}

/// Adds each live thread's wait since its last reading to the shared count.
///
/// The files are read with the lock released: no system call (and, under the preload
/// library, no interposed call) runs while a thread that registers or deregisters could be
/// waiting for it.
fn count_own_wait(shared: &Shared) {
    let tids: Vec<(libc::clockid_t, libc::pid_t)> =
        shared.threads.lock().unwrap().iter().map(|t| (t.clock, t.tid)).collect();
    let now: Vec<(libc::clockid_t, SchedStat)> =
        tids.into_iter().filter_map(|(c, tid)| read_schedstat(tid).map(|st| (c, st))).collect();
    let mut threads = shared.threads.lock().unwrap();
    for (clock, st) in now {
        // A thread that deregistered meanwhile counted its own wait on the way out.
        let Some(t) = threads.iter_mut().find(|t| t.clock == clock) else { continue };
        if let Some(last) = t.last {
            shared.own_wait_ns.fetch_add(excess_wait_ns(last, st), Ordering::Relaxed);
        }
        t.last = Some(st);
    }
}

/// Handle to the monitor; cheap to clone.
#[derive(Clone)]
pub struct SystemMonitor {
    shared: Arc<Shared>,
    ticker: Arc<Mutex<Option<JoinHandle<()>>>>,
}

fn read_proc_stat() -> Option<smartcon_util::procfs::CpuTimes> {
    smartcon_util::procfs::cpu_times()
}

/// The cumulative "some" stall time from /proc/pressure/cpu's text, in ns.
fn parse_cpu_pressure(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    let total_us: u64 = line.split_whitespace().find_map(|f| f.strip_prefix("total="))?.parse().ok()?;
    Some(total_us * 1_000)
}

fn read_cpu_pressure() -> Option<u64> {
    parse_cpu_pressure(&std::fs::read_to_string("/proc/pressure/cpu").ok()?)
}

/// One window's figures, in hundredths of a percent of all CPUs.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Figures {
    /// The published demand: `util` plus `contention`.
    others: f64,
    /// The others' utilization: busy time less ours, over all CPUs' time.
    util: f64,
    /// Our threads' run-queue wait beyond wake-ups, over all CPUs' time.
    contention: f64,
    /// PSI "some" share of wall time, reported only.
    pressure: f64,
    /// Everyone's utilization, ours included, and the hypervisor's steal.
    total: f64,
    /// The hypervisor's steal, reported only.
    steal: f64,
}

/// The figures of an interval: `busy_ns`, `steal_ns`, `total_ns` and `own_ns` of CPU time
/// (all CPUs), `own_wait_ns` our threads' run-queue wait beyond wake-ups, `wall_ns` of wall
/// time, `stall_ns` the PSI "some" time.
///
/// The demand is the others' utilization plus the CPU they waited for: our threads' wait
/// behind them, or, when the machine had no CPU idle, the CPU pressure (two crunchers
/// that the load balancer put on one CPU beside a spinner on the other never keep the
/// spinner waiting, but one of them always waits: 54% + 49%). While a CPU idles, the
/// pressure is wake-ups in transit (four blocking workers: 45% with the machine 25% idle)
/// and does not count.
///
/// The others' utilization leaves out the hypervisor's steal: time a vCPU wanted to run
/// and the host ran something else is no thread of this machine's that a spinner could
/// take a CPU from. On the team's KVM guest (PVM) the steal grows when the vCPUs halt:
/// beside four blocking I/O workers it was 39% of all CPU time while our reader blocked
/// and 21% while it spun (/proc/stat over 2 s, reader pinned to CPU 1), so counted as
/// demand it rose because we blocked and kept smart blocking. `total`, the paper's
/// machine-wide figure, keeps it (the paper's machines had none to leave out). Waits are
/// on the guest's clock, which runs through the steal, so the contention counts the
/// unstolen share of them.
fn figures(
    busy_ns: f64,
    steal_ns: f64,
    total_ns: f64,
    own_ns: f64,
    own_wait_ns: f64,
    wall_ns: f64,
    stall_ns: Option<f64>,
) -> Figures {
    let pct = |x: f64| (x * 10_000.0).clamp(0.0, 10_000.0);
    let steal_ns = steal_ns.clamp(0.0, busy_ns.max(0.0));
    let util = pct((busy_ns - steal_ns - own_ns).max(0.0) / total_ns.max(1.0));
    let total = pct(busy_ns / total_ns.max(1.0));
    let steal = pct(steal_ns / total_ns.max(1.0));
    let pressure = stall_ns.map_or(0.0, |st| pct(st / wall_ns.max(1.0)));
    // With no CPU idle while the CPUs ran, a task waiting for one waits for work, not for a
    // wake-up in transit.
    let ran = pct((busy_ns - steal_ns) / (total_ns - steal_ns).max(1.0));
    let waiting = if ran >= SATURATED_PCT_X100 { pressure } else { 0.0 };
    // A wait is counted on the guest's clock, which runs on while the host steals the vCPU:
    // of a wait behind another task, only the unstolen share was CPU that task used.
    let unstolen = 1.0 - steal_ns / total_ns.max(1.0);
    let contention = (pct(own_wait_ns / total_ns.max(1.0)).max(waiting) * unstolen).clamp(0.0, 10_000.0);
    Figures { others: (util + contention).min(10_000.0), util, contention, pressure, total, steal }
}

fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is valid; an invalid clock id returns an error, which we check.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

impl SystemMonitor {
    /// The process-wide monitor (default window), started on first use and shared by
    /// every port that was not given one: one ticker thread per process, however many
    /// ports and threads.
    pub fn shared() -> Result<Arc<SystemMonitor>, crate::error::Error> {
        static SHARED: OnceLock<Arc<SystemMonitor>> = OnceLock::new();
        if let Some(m) = SHARED.get() {
            return Ok(m.clone());
        }
        let m = Arc::new(SystemMonitor::try_start(WINDOW_NS_DEFAULT)?);
        // Two first users racing: the loser's monitor stops when its last handle drops.
        let winner = SHARED.get_or_init(|| m.clone()).clone();
        if !Arc::ptr_eq(&winner, &m) {
            m.stop();
        }
        Ok(winner)
    }

    /// Starts the ticker. `window_ns` must lie in [WINDOW_NS_MIN, WINDOW_NS_MAX].
    pub fn start(window_ns: u64) -> SystemMonitor {
        SystemMonitor::try_start(window_ns).expect("start the system monitor")
    }

    /// Starts the ticker; an error if the window is out of range or the thread cannot start.
    pub fn try_start(window_ns: u64) -> Result<SystemMonitor, crate::error::Error> {
        use crate::error::{Error, ErrorKind};
        if !(WINDOW_NS_MIN..=WINDOW_NS_MAX).contains(&window_ns) {
            return Err(Error::new(ErrorKind::Usage, format!("monitor window {window_ns} ns is out of range")));
        }
        let shared = Arc::new(Shared {
            others_pct_x100: AtomicU32::new(0),
            others_util_pct_x100: AtomicU32::new(0),
            total_pct_x100: AtomicU32::new(0),
            pressure_pct_x100: AtomicU32::new(0),
            contention_pct_x100: AtomicU32::new(0),
            steal_pct_x100: AtomicU32::new(0),
            others_sd_pct_x100: AtomicU32::new(0),
            sides: std::array::from_fn(|_| AtomicU8::new(0)),
            stop: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            retired_own_ns: AtomicU64::new(0),
            own_wait_ns: AtomicU64::new(0),
            devices: Mutex::new(Vec::new()),
            reading: Mutex::new(()),
        });
        let period_ns = (window_ns / 10).max(10_000_000);
        let inner = shared.clone();
        let handle = std::thread::Builder::new()
            .name("smartcon-sysmon".into())
            .spawn(move || ticker(inner, window_ns, period_ns))
            .map_err(|e| Error::new(ErrorKind::Setup, format!("cannot start the system monitor's thread: {e}")))?;
        Ok(SystemMonitor { shared, ticker: Arc::new(Mutex::new(Some(handle))) })
    }

    /// A monitor that never ticks and reports a fixed utilization (for tests and the
    /// simulator).
    pub fn fixed(others_pct: u32) -> SystemMonitor {
        SystemMonitor {
            shared: Arc::new(Shared {
                others_pct_x100: AtomicU32::new(others_pct * 100),
                others_util_pct_x100: AtomicU32::new(others_pct * 100),
                total_pct_x100: AtomicU32::new(others_pct * 100),
                pressure_pct_x100: AtomicU32::new(0),
                contention_pct_x100: AtomicU32::new(0),
                steal_pct_x100: AtomicU32::new(0),
                others_sd_pct_x100: AtomicU32::new(0),
                sides: std::array::from_fn(|_| AtomicU8::new(0)),
                stop: AtomicBool::new(true),
                threads: Mutex::new(Vec::new()),
                retired_own_ns: AtomicU64::new(0),
                own_wait_ns: AtomicU64::new(0),
                devices: Mutex::new(Vec::new()),
                reading: Mutex::new(()),
            }),
            ticker: Arc::new(Mutex::new(None)),
        }
    }

    /// Others' CPU demand in whole percent (their utilization plus our threads' wait for the
    /// CPUs they hold): one atomic load.
    #[inline]
    pub fn cpu_utilization_pct(&self) -> u32 {
        self.shared.others_pct_x100.load(Ordering::Relaxed) / 100
    }

    /// The noise of [`SystemMonitor::cpu_utilization_pct`]: one standard deviation of its
    /// readings about their mean over the last second or so, in percent (0 until measured,
    /// and for a [`SystemMonitor::fixed`] monitor). One atomic load.
    #[inline]
    pub fn cpu_utilization_sd_pct(&self) -> f64 {
        self.shared.others_sd_pct_x100.load(Ordering::Relaxed) as f64 / 100.0
    }

    /// Others' CPU demand as `smart` feeds it to the Decision Module against
    /// `threshold_pct`: [`SystemMonitor::cpu_utilization_pct`] compared with hysteresis
    /// ([`CpuSide`]), the side shared by every port of the process with that threshold.
    /// Three relaxed atomic loads and at most one store; ports racing here each leave a
    /// side that a reading justified.
    #[inline]
    pub fn cpu_utilization_for(&self, threshold_pct: u32) -> u32 {
        let pct = self.cpu_utilization_pct();
        let Some(side) = self.shared.sides.get(threshold_pct as usize) else { return pct };
        let last = match side.load(Ordering::Relaxed) {
            1 => Some(false),
            2 => Some(true),
            _ => None,
        };
        let (busy, fed) = CpuSide::step(last, pct, self.cpu_utilization_sd_pct(), threshold_pct);
        if last != Some(busy) {
            side.store(if busy { 2 } else { 1 }, Ordering::Relaxed);
        }
        fed
    }

    /// Machine-wide CPU utilization in whole percent, this engine's own threads (a spinner)
    /// included, over the window: the paper's CPU_Stat (Sec. 4.2), which the `paper`
    /// strategy decides with. One relaxed atomic load, published by the ticker with the
    /// others' figure.
    #[inline]
    pub fn machine_utilization_pct(&self) -> u32 {
        self.shared.total_pct_x100.load(Ordering::Relaxed) / 100
    }

    /// Our I/O threads' run-queue wait beyond wake-ups, percent of all CPUs' time: the
    /// others' demand for the CPUs our threads hold (for reports).
    pub fn contention_pct(&self) -> f64 {
        self.shared.contention_pct_x100.load(Ordering::Relaxed) as f64 / 100.0
    }

    /// The hypervisor's steal over the window, percent of all CPUs' time (for reports; left
    /// out of the others' utilization).
    pub fn steal_pct(&self) -> f64 {
        self.shared.steal_pct_x100.load(Ordering::Relaxed) as f64 / 100.0
    }

    /// The others' CPU utilization alone, without our threads' wait, percent (for reports).
    pub fn others_utilization_pct(&self) -> f64 {
        self.shared.others_util_pct_x100.load(Ordering::Relaxed) as f64 / 100.0
    }

    /// The CPU pressure over the window (PSI "some": share of wall time some task waited
    /// for a CPU), percent; 0 without PSI (for reports).
    pub fn pressure_pct(&self) -> f64 {
        self.shared.pressure_pct_x100.load(Ordering::Relaxed) as f64 / 100.0
    }

    /// Machine-wide utilization including our own threads, percent (for reports).
    pub fn total_utilization_pct(&self) -> f64 {
        self.shared.total_pct_x100.load(Ordering::Relaxed) as f64 / 100.0
    }

    /// Registers the calling thread as one of the engine's I/O threads; its CPU time is
    /// left out of the published utilization until the guard drops.
    pub fn register_current_thread(&self) -> ThreadRegistration {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: pthread_self is always valid for the calling thread; `clock` is writable.
        let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
        let start = if rc == 0 { clock_ns(clock) } else { None };
        if let Some(start) = start {
            // SAFETY: gettid has no preconditions and cannot fail.
            let tid = unsafe { libc::gettid() };
            let last = read_schedstat(tid);
            self.shared.threads.lock().unwrap().push(OwnThread { clock, start_cpu_ns: start, tid, last });
        }
        ThreadRegistration { shared: self.shared.clone(), clock: start.map(|_| clock) }
    }

    /// Reads the kernel's count of the device's queue on every tick from now on and
    /// publishes the others' requests into `queue.inflight` (see the module's doc). Once
    /// per port, not per I/O; a device already watched is not added again. A monitor that
    /// does not tick ([`SystemMonitor::fixed`]) publishes nothing.
    pub fn watch_device(&self, queue: &DeviceQueue) {
        if self.shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let mut devices = self.shared.devices.lock().unwrap();
        if devices.iter().any(|d| std::ptr::eq(d.inflight.as_ptr(), Arc::as_ptr(&queue.inflight))) {
            return;
        }
        devices.push(WatchedDevice {
            inflight: Arc::downgrade(&queue.inflight),
            stat_path: queue.stat_path.clone(),
            last: None,
            mean_bytes: 0,
        });
    }

    /// The devices whose queue the ticker reads (for tests and reports).
    pub fn watched_devices(&self) -> usize {
        // The ticker takes the list out while it reads the files: wait for it to be put back.
        let _whole = self.shared.reading.lock().unwrap();
        self.shared.devices.lock().unwrap().len()
    }

    /// Stops the ticker and waits for it.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.ticker.lock().unwrap().take() {
            let _ = h.join();
        }
    }
}

/// Keeps a thread registered with the monitor; deregisters on drop.
pub struct ThreadRegistration {
    shared: Arc<Shared>,
    clock: Option<libc::clockid_t>,
}

impl Drop for ThreadRegistration {
    fn drop(&mut self) {
        let Some(clock) = self.clock else { return };
        // Taken out under the lock, counted after it (no system call while it is held).
        let taken = {
            let mut threads = self.shared.threads.lock().unwrap();
            threads.iter().position(|t| t.clock == clock).map(|i| threads.swap_remove(i))
        };
        if let Some(t) = taken {
            // We are on the registered thread itself, so its clock is still valid.
            let used = clock_ns(clock).unwrap_or(t.start_cpu_ns).saturating_sub(t.start_cpu_ns);
            self.shared.retired_own_ns.fetch_add(used, Ordering::Relaxed);
            if let (Some(last), Some(now)) = (t.last, read_schedstat(t.tid)) {
                self.shared.own_wait_ns.fetch_add(excess_wait_ns(last, now), Ordering::Relaxed);
            }
        }
    }
}

fn own_cpu_ns(shared: &Shared) -> u64 {
    let threads = shared.threads.lock().unwrap();
    let live: u64 =
        threads.iter().map(|t| clock_ns(t.clock).unwrap_or(t.start_cpu_ns).saturating_sub(t.start_cpu_ns)).sum();
    live + shared.retired_own_ns.load(Ordering::Relaxed)
}

fn ticker(shared: Arc<Shared>, window_ns: u64, period_ns: u64) {
    block_signals();
    let samples_max = (window_ns / period_ns + 2) as usize;
    let mut samples: VecDeque<Sample> = VecDeque::with_capacity(samples_max);
    let mut spread = Spread::new(SPREAD_HORIZON_NS / period_ns);
    while !shared.stop.load(Ordering::Relaxed) {
        if let Some(others) = tick(&shared, &mut samples, samples_max, window_ns) {
            let sd = spread.add(others);
            shared.others_sd_pct_x100.store(sd as u32, Ordering::Relaxed);
        }
        read_device_queues(&shared);
        std::thread::sleep(Duration::from_nanos(period_ns));
    }
    // Nobody reads the queues any more: what was published would go stale.
    for d in shared.devices.lock().unwrap().iter() {
        if let Some(inflight) = d.inflight.upgrade() {
            inflight.set_others(0, 0);
        }
    }
}

/// One reading of every watched device's queue, published into its counters. The list
/// is taken out while the files are read (no system call with the lock held), and put
/// back with the devices added meanwhile; devices nobody uses any more are dropped.
fn read_device_queues(shared: &Shared) {
    let _reading = shared.reading.lock().unwrap();
    let mut mine = std::mem::take(&mut *shared.devices.lock().unwrap());
    if mine.is_empty() {
        return;
    }
    mine.retain_mut(|d| {
        let Some(inflight) = d.inflight.upgrade() else { return false };
        let ours = inflight.ours();
        match std::fs::read_to_string(&d.stat_path).ok().as_deref().and_then(parse_disk_stat) {
            Some(now) => {
                let (count, bytes, mean) = others_in_flight(now, d.last, ours, d.mean_bytes);
                inflight.set_others(count, bytes);
                d.last = Some(now);
                d.mean_bytes = mean;
            }
            None => inflight.set_others(0, 0),
        }
        true
    });
    let mut devices = shared.devices.lock().unwrap();
    for d in mine {
        if !devices.iter().any(|x| Weak::ptr_eq(&x.inflight, &d.inflight)) {
            devices.push(d);
        }
    }
}

/// Blocks every signal in the calling thread (the ticker): a program's signal handler must
/// never run on the monitor's own thread. Under the preload library a handler may call
/// into the library (a `pread` in a SIGALRM handler), which registers the thread with this
/// monitor; on the ticker, in the middle of its own work, that would wait for itself.
/// Process-directed signals then go to one of the program's threads, as they would
/// without the monitor.
fn block_signals() {
    // SAFETY: `set` is a valid sigset_t filled by sigfillset before use; pthread_sigmask
    // only changes the calling thread's mask and its old-mask pointer may be null.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// One /proc/stat tick: a sample, then the window's figures published.
fn tick(shared: &Shared, samples: &mut VecDeque<Sample>, samples_max: usize, window_ns: u64) -> Option<f64> {
    let times = read_proc_stat()?;
    count_own_wait(shared);
    let now = crate::clock::now_ns();
    let s = Sample {
        at_ns: now,
        busy_ns: times.busy_ns,
        steal_ns: times.steal_ns,
        total_ns: times.total_ns,
        own_ns: own_cpu_ns(shared),
        own_wait_ns: shared.own_wait_ns.load(Ordering::Relaxed),
        stall_ns: read_cpu_pressure(),
    };
    samples.push_back(s);
    while samples.len() > samples_max || (samples.len() > 2 && now - samples[1].at_ns >= window_ns) {
        samples.pop_front();
    }
    let first = samples.front().filter(|f| f.total_ns < s.total_ns && f.at_ns < s.at_ns)?;
    let stall = match (first.stall_ns, s.stall_ns) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64),
        _ => None,
    };
    let f = figures(
        s.busy_ns.saturating_sub(first.busy_ns) as f64,
        s.steal_ns.saturating_sub(first.steal_ns) as f64,
        (s.total_ns - first.total_ns) as f64,
        s.own_ns.saturating_sub(first.own_ns) as f64,
        s.own_wait_ns.saturating_sub(first.own_wait_ns) as f64,
        (s.at_ns - first.at_ns) as f64,
        stall,
    );
    shared.others_util_pct_x100.store(f.util as u32, Ordering::Relaxed);
    shared.contention_pct_x100.store(f.contention as u32, Ordering::Relaxed);
    shared.steal_pct_x100.store(f.steal as u32, Ordering::Relaxed);
    shared.pressure_pct_x100.store(f.pressure as u32, Ordering::Relaxed);
    shared.total_pct_x100.store(f.total as u32, Ordering::Relaxed);
    shared.others_pct_x100.store(f.others as u32, Ordering::Relaxed);
    Some(f.others)
}

/// The span of readings [`Spread`] measures the noise over: about ten windows of the
/// default 100 ms, so that a steady load's reading has crossed its range many times.
const SPREAD_HORIZON_NS: u64 = 1_000_000_000;

/// The standard deviation of a reading about its own moving mean, both exponential over
/// about `n` readings.
///
/// Why it is needed: /proc/stat's busy time is sampled at the kernel's tick (`CONFIG_HZ`;
/// 250 on the team's VM, so a 100 ms window on 2 CPUs holds 50 samples; binomial noise at
/// 45% busy: sqrt(0.45 x 0.55 / 50) = 7 points). Measured there beside the four I/O workers
/// on the local disk (`examples/monitor_watch.rs`, 4 s, nothing else running): the reading
/// wandered with a standard deviation of 5.3-11.0 points about means of 16-35%, and this
/// estimate read 5.9-7.2 on average. A threshold within that distance of the mean is
/// crossed several times a second with nothing changing. The port compares against the
/// threshold with this much hysteresis ([`CpuSide`]).
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    alpha: f64,
    mean: f64,
    var: f64,
    n: u64,
}

impl Spread {
    pub fn new(n: u64) -> Spread {
        Spread { alpha: 1.0 / n.max(1) as f64, mean: 0.0, var: 0.0, n: 0 }
    }

    /// Adds a reading; returns the standard deviation so far.
    pub fn add(&mut self, x: f64) -> f64 {
        if self.n == 0 {
            self.mean = x;
        } else {
            // The first readings weigh as a plain mean, then as an exponential one.
            let w = (1.0 / (self.n + 1) as f64).max(self.alpha);
            let d = x - self.mean;
            self.mean += w * d;
            self.var = (1.0 - w) * (self.var + w * d * d);
        }
        self.n += 1;
        self.var.sqrt()
    }
}

/// The comparison with the CPU threshold that `smart` feeds its Decision Module through:
/// with hysteresis. The System Monitor's reading must lie beyond the threshold by
/// [`CpuSide::BAND_SDS`] of its own noise (at most [`CpuSide::BAND_PCT_MAX`] points) before
/// the side last taken changes. What comes out is the utilization `decide` is fed, so the
/// Decision Module's branches, their order and their reasons stay the paper's.
///
/// The side is kept per threshold value in the monitor ([`SystemMonitor::cpu_utilization_for`]),
/// so every port of the process that compares with the same threshold shares it, and it
/// outlives a port (the evaluate opens one per turn of 30 ms).
pub struct CpuSide;

impl CpuSide {
    /// Standard deviations of the reading's noise the reading must clear.
    pub const BAND_SDS: f64 = 2.0;
    /// A change larger than this is never noise.
    pub const BAND_PCT_MAX: f64 = 20.0;

    /// From the side last taken (`None`: none yet; `Some(true)`: busy), a reading `pct` with
    /// noise `sd_pct` against `threshold_pct`: the side now, and the utilization to feed
    /// `decide` (the reading itself when it lies on that side, else the reading held at
    /// the threshold's edge of that side).
    #[inline]
    pub fn step(last: Option<bool>, pct: u32, sd_pct: f64, threshold_pct: u32) -> (bool, u32) {
        let band = (Self::BAND_SDS * sd_pct).clamp(0.0, Self::BAND_PCT_MAX);
        let (x, t) = (pct as f64, threshold_pct as f64);
        let busy = match last {
            None => pct > threshold_pct,
            Some(true) => x + band > t,
            Some(false) => x - band > t,
        };
        let fed = if busy { pct.max(threshold_pct.saturating_add(1)) } else { pct.min(threshold_pct) };
        (busy, fed)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_the_readings_standard_deviation() {
        let mut s = Spread::new(100);
        for _ in 0..500 {
            assert_eq!(s.add(4_500.0), 0.0, "a steady reading has no noise");
        }
        let mut s = Spread::new(100);
        let mut sd = 0.0;
        for i in 0..2_000 {
            sd = s.add(if i % 2 == 0 { 3_800.0 } else { 5_200.0 });
        }
        assert!((sd - 700.0).abs() < 30.0, "readings 7 points either side of their mean: sd {sd}");
    }

    #[test]
    fn the_cpu_side_moves_only_when_a_reading_clears_its_noise() {
        // No side yet: the plain comparison.
        assert_eq!(CpuSide::step(None, 51, 7.0, 50), (true, 51));
        assert_eq!(CpuSide::step(None, 50, 7.0, 50), (false, 50));
        // Available, noise 7 points (band 14): 63 is noise, held at the threshold; 65 moves.
        assert_eq!(CpuSide::step(Some(false), 63, 7.0, 50), (false, 50));
        assert_eq!(CpuSide::step(Some(false), 30, 7.0, 50), (false, 30));
        assert_eq!(CpuSide::step(Some(false), 65, 7.0, 50), (true, 65));
        // Busy: 37 is noise, held just above the threshold; 35 moves back.
        assert_eq!(CpuSide::step(Some(true), 37, 7.0, 50), (true, 51));
        assert_eq!(CpuSide::step(Some(true), 35, 7.0, 50), (false, 35));
        // Without noise there is no band: the plain comparison whatever the side.
        for last in [None, Some(false), Some(true)] {
            for pct in [0, 49, 50, 51, 100] {
                assert_eq!(CpuSide::step(last, pct, 0.0, 50), (pct > 50, pct), "{last:?} {pct}");
            }
        }
        // The band is capped: a 25-point step is never noise.
        assert_eq!(CpuSide::step(Some(false), 71, 50.0, 50), (true, 71));
    }

    #[test]
    fn ports_with_the_same_threshold_share_the_side() {
        let mon = SystemMonitor::fixed(45);
        mon.shared.others_sd_pct_x100.store(700, Ordering::Relaxed);
        assert_eq!(mon.cpu_utilization_for(50), 45, "first reading: available");
        mon.shared.others_pct_x100.store(6_000, Ordering::Relaxed);
        assert_eq!(mon.cpu_utilization_for(50), 50, "60 is within the noise of 50: still available");
        assert_eq!(mon.cpu_utilization_for(55), 60, "another threshold has its own side");
        mon.shared.others_pct_x100.store(7_000, Ordering::Relaxed);
        assert_eq!(mon.cpu_utilization_for(50), 70, "70 clears the band: busy");
        mon.shared.others_pct_x100.store(4_000, Ordering::Relaxed);
        assert_eq!(mon.cpu_utilization_for(50), 51, "40 is within the noise: still busy");
        assert_eq!(mon.clone().cpu_utilization_for(50), 51, "a clone shares the side");
        assert_eq!(mon.cpu_utilization_for(101), 40, "a threshold past 100: the plain reading");
    }

    /// Spins until the calling thread has used `ns` of CPU by its own clock: however
    /// loaded the machine, this ends, and takes exactly that much CPU (no wall-time bound).
    fn burn_own_cpu(ns: u64) {
        let start = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap();
        while clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap() - start < ns {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn sees_a_busy_foreign_thread_but_not_a_registered_one() {
        // What the monitor subtracts is the registered threads' CPU time: a registered
        // spinner's must be in it, a foreign spinner's must not. Measured by CPU clocks,
        // not wall time, so a loaded machine only makes the test slower. (It used to
        // compare utilization shares over a wall-time window, which failed at a load
        // average of 10: the spinner got too small a share to stand out.)
        let mon = SystemMonitor::fixed(0);
        let before = own_cpu_ns(&mon.shared);
        let m2 = mon.clone();
        let live = std::thread::spawn(move || {
            let _reg = m2.register_current_thread();
            burn_own_cpu(30_000_000);
            own_cpu_ns(&m2.shared)
        })
        .join()
        .unwrap();
        std::thread::spawn(|| burn_own_cpu(60_000_000)).join().unwrap();
        let after = own_cpu_ns(&mon.shared);
        assert!(live - before >= 30_000_000, "registered spinner's 30 ms missing: {} ns", live - before);
        assert!(after - before >= 30_000_000, "the registered spinner's time left with it: {} ns", after - before);
        assert!(after - before < 60_000_000, "the foreign spinner's 60 ms was counted as ours: {} ns", after - before);
    }

    #[test]
    fn a_registered_thread_that_ends_stays_counted() {
        let mon = SystemMonitor::fixed(0);
        let m2 = mon.clone();
        std::thread::spawn(move || {
            let _reg = m2.register_current_thread();
            burn_own_cpu(20_000_000);
        })
        .join()
        .unwrap();
        assert!(own_cpu_ns(&mon.shared) >= 20_000_000);
    }

    #[test]
    fn schedstat_gives_the_wait_and_the_slices() {
        assert_eq!(
            parse_schedstat("1234 5678 90\n"),
            Some(SchedStat { wait_ns: 5678, slices: 90, voluntary: 0, involuntary: 0 })
        );
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t4\n";
        assert_eq!(parse_switches(status), Some((17, 4)));
        assert_eq!(parse_switches("voluntary_ctxt_switches:\t17\n"), None);
        assert_eq!(parse_schedstat("1234 x 90\n"), None);
        assert_eq!(parse_schedstat("1234\n"), None);
        // SAFETY: gettid has no preconditions.
        if let Some(st) = read_schedstat(unsafe { libc::gettid() }) {
            assert!(st.slices >= 1, "this thread has run: {st:?}");
        }
    }

    #[test]
    fn a_wake_up_is_allowed_its_wait_but_no_more() {
        let at = |wait_ns, slices| SchedStat { wait_ns, slices, voluntary: 0, involuntary: 0 };
        // A blocking thread: 1,000 wake-ups, 15 us each on the run queue: no demand.
        assert_eq!(excess_wait_ns(at(0, 0), at(15_000_000, 1_000)), 0);
        // A spinner preempted 10 times, 400 ms waiting: all but the allowance counts.
        assert_eq!(excess_wait_ns(at(0, 5), at(400_000_000, 15)), 400_000_000 - 10 * WAKEUP_ALLOWANCE_NS);
        // Counters never go back; if a reading did, nothing is counted.
        assert_eq!(excess_wait_ns(at(9, 9), at(1, 1)), 0);
    }

    #[test]
    fn only_the_preempted_share_of_a_wait_is_others_demand() {
        let at = |wait_ns, slices, voluntary, involuntary| SchedStat { wait_ns, slices, voluntary, involuntary };
        // A blocking reader on a host that steals halted vCPUs' wake-ups: 3,600 wake-ups,
        // 120 us each on the run queue, never preempted: none of it is others' demand.
        assert_eq!(excess_wait_ns(at(0, 0, 0, 0), at(432_000_000, 3_600, 3_600, 0)), 0);
        // A spinner only ever preempted: all beyond the allowance, as without the counts.
        let spinner = excess_wait_ns(at(0, 5, 1, 4), at(400_000_000, 15, 1, 14));
        assert_eq!(spinner, 400_000_000 - 10 * WAKEUP_ALLOWANCE_NS);
        // Mixed: 30 preempted slices of 130; that share of the wait beyond the allowance.
        let mixed = excess_wait_ns(at(0, 0, 0, 0), at(100_000_000, 130, 100, 30));
        assert_eq!(mixed, (100_000_000 - 130 * WAKEUP_ALLOWANCE_NS) * 30 / 130);
    }

    #[test]
    fn a_spinner_displaced_by_crunchers_counts_their_demand() {
        // A registered thread that is kept off its CPU by a foreign thread pinned to the
        // same CPU: its wait must reach the shared count. CPU-clock bounded, not timed.
        let mon = SystemMonitor::fixed(0);
        let m2 = mon.clone();
        // SAFETY: sched_getcpu has no preconditions (-1 on error, clamped to CPU 0).
        let cpu = unsafe { libc::sched_getcpu() }.max(0) as usize;
        let pin = move || smartcon_util::affinity::pin_current_thread(&[cpu]).expect("pin to this thread's CPU");
        let hog = std::thread::spawn(move || {
            pin();
            burn_own_cpu(80_000_000);
        });
        std::thread::spawn(move || {
            pin();
            let _reg = m2.register_current_thread();
            burn_own_cpu(40_000_000);
        })
        .join()
        .unwrap();
        hog.join().unwrap();
        // Sharing one CPU with a hog for 40 ms of CPU means tens of ms on the run queue,
        // far beyond a handful of slices' allowance (unless the hog finished first,
        // which 80 ms of CPU against 40 ms does not allow on a fair scheduler).
        let waited = mon.shared.own_wait_ns.load(Ordering::Relaxed);
        // SAFETY: gettid has no preconditions. (Without schedstat there is nothing to count.)
        if read_schedstat(unsafe { libc::gettid() }).is_some() {
            assert!(waited >= 10_000_000, "the spinner's wait behind the hog was not counted: {waited} ns");
        }
    }

    #[test]
    fn cpu_pressure_is_read_from_the_some_line() {
        let text = "some avg10=21.83 avg60=51.31 avg300=40.16 total=4165882522\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_cpu_pressure(text), Some(4_165_882_522_000));
        assert_eq!(parse_cpu_pressure("full avg10=0.00 total=5\n"), None);
        assert_eq!(parse_cpu_pressure("some avg10=1 total=x\n"), None);
    }

    #[test]
    fn demand_is_utilization_plus_our_wait_for_their_cpus() {
        // 2 CPUs over 100 ms: 200 ms of CPU time.
        let (total, wall) = (200e6, 100e6);
        // Two crunchers beside our spinner: all busy, 56 ms of it ours; the spinner waited
        // 44 ms for its CPU, which the crunchers held: 72% + 22% of the machine (the
        // larger of its wait and the pressure, 10%).
        let f = figures(200e6, 0.0, total, 56e6, 44e6, wall, Some(10e6));
        assert_eq!(
            (f.util, f.contention, f.others, f.pressure, f.total),
            (7_200.0, 2_200.0, 9_400.0, 1_000.0, 10_000.0)
        );
        // The crunchers on one CPU, the spinner alone on the other: it never waits, but one
        // of them always does, and no CPU idles: the pressure is their demand.
        let f = figures(200e6, 0.0, total, 92e6, 0.0, wall, Some(49e6));
        assert_eq!((f.util, f.contention, f.others), (5_400.0, 4_900.0, 10_000.0));
        // A lone spinner on an idle machine: nobody else.
        assert_eq!(figures(100e6, 0.0, total, 100e6, 0.0, wall, Some(0.0)).others, 0.0);
        // Four blocking I/O workers beside our spinner: 20% of the machine, and they never
        // kept the spinner waiting beyond a wake-up; *some* task waited 95% of the time.
        // The pressure said 95% (block); the demand says 20% (spin).
        let f = figures(140e6, 0.0, total, 100e6, 0.0, wall, Some(95e6));
        assert_eq!((f.util, f.pressure, f.others), (2_000.0, 9_500.0, 2_000.0));
        // A blocking reader beside the workers on a VM whose host steals the halted vCPUs'
        // wake-ups: 130 ms busy of 200, 80 ms of it stolen, 10 ms ours. The others ran 20%;
        // the steal is nobody's here (with it, 60%: over a 2-CPU threshold of 50%).
        let f = figures(130e6, 80e6, total, 10e6, 0.0, wall, Some(60e6));
        assert_eq!((f.util, f.steal, f.others, f.total), (2_000.0, 4_000.0, 2_000.0, 6_500.0));
        // All CPUs ran when not stolen: saturated, so the pressure counts, for the quarter
        // of the time that was stolen less.
        let f = figures(200e6, 50e6, total, 60e6, 0.0, wall, Some(40e6));
        assert_eq!((f.util, f.contention, f.others), (4_500.0, 3_000.0, 7_500.0));
        // Out-of-range inputs are clamped.
        let f = figures(300e6, 0.0, total, 0.0, 300e6, wall, Some(300e6));
        assert_eq!([f.util, f.contention, f.others, f.pressure, f.total], [10_000.0; 5]);
    }

    #[test]
    fn the_ticker_thread_blocks_every_signal() {
        // A program's signal handler must never run on the monitor's thread (under the
        // preload library a handler's pread would register that thread with the monitor
        // from inside the monitor's own work, and wait for itself).
        let mon = SystemMonitor::start(WINDOW_NS_MIN);
        let blocked = |status: &str| {
            status.lines().find_map(|l| l.strip_prefix("SigBlk:")).and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        };
        let mut masks = Vec::new();
        // Bounded: the thread blocks signals as its first act; give it up to 2 s to start.
        for _ in 0..200 {
            masks = std::fs::read_dir("/proc/self/task")
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "smartcon-sysmon"))
                .filter_map(|e| blocked(&std::fs::read_to_string(e.path().join("status")).ok()?))
                .collect();
            if !masks.is_empty() && masks.iter().all(|&m| m != 0) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        mon.stop();
        assert!(!masks.is_empty(), "no monitor thread found");
        for m in masks {
            for sig in [libc::SIGALRM, libc::SIGINT, libc::SIGTERM, libc::SIGUSR1, libc::SIGCHLD] {
                assert!(m & (1 << (sig - 1)) != 0, "signal {sig} not blocked on the monitor's thread: {m:x}");
            }
        }
    }

    #[test]
    fn the_disk_stat_parsers_read_the_in_flight_count_and_the_totals() {
        // /sys/block/vda/stat and the same disk's /proc/diskstats line, read on the team VM.
        let sysfs = "   27791     5317  2176658    12725     6245    14258  3373800    21311        3     6940    34502     3529       21   143904      449      252       16\n";
        let want = DiskStat { ios: 27791 + 6245, sectors: 2176658 + 3373800, in_flight: 3 };
        assert_eq!(parse_disk_stat(sysfs), Some(want));
        let diskstats = "   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n 254       0 vda 27791 5317 2176658 12725 6245 14258 3373800 21311 3 6940 34502 3529 21 143904 449 252 16\n 253       0 zram0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        assert_eq!(parse_diskstats(diskstats, "vda"), Some(want));
        assert_eq!(parse_diskstats(diskstats, "zram0").map(|d| d.in_flight), Some(0));
        assert_eq!(parse_diskstats(diskstats, "vdb"), None);
        // Old kernels have 11 fields; fewer than 9 is not a stat file.
        assert_eq!(
            parse_disk_stat("1 0 8 0 2 0 16 0 4 0 0").map(|d| (d.ios, d.sectors, d.in_flight)),
            Some((3, 24, 4))
        );
        assert_eq!(parse_disk_stat("1 0 8 0 2 0 16 0"), None);
        assert_eq!(parse_disk_stat("1 0 8 0 x 0 16 0 4"), None);
        // The real files, where this machine has them, parse.
        if let Ok(text) = std::fs::read_to_string("/proc/diskstats") {
            let name = text.lines().next().and_then(|l| l.split_whitespace().nth(2)).unwrap_or("").to_string();
            if !name.is_empty() {
                assert!(parse_diskstats(&text, &name).is_some(), "{name} in /proc/diskstats");
            }
        }
    }

    #[test]
    fn the_others_are_the_kernels_count_less_ours_at_the_mean_size() {
        let at = |ios, sectors, in_flight| DiskStat { ios, sectors, in_flight };
        // First reading: the mean since boot, 100 I/Os of 8 sectors (4 KiB); 5 in flight,
        // 1 of them ours: 4 others of 4 KiB.
        assert_eq!(others_in_flight(at(100, 800, 5), None, 1, 0), (4, 4 * 4096, 4096));
        // Next tick: 10 more I/Os of 256 sectors (128 KiB) each: the mean is the tick's.
        assert_eq!(others_in_flight(at(110, 800 + 2560, 2,), Some(at(100, 800, 5)), 0, 4096), (2, 2 << 17, 128 << 10));
        // Nothing completed meanwhile: the previous mean stays.
        assert_eq!(others_in_flight(at(110, 3360, 3), Some(at(110, 3360, 1)), 1, 4096), (2, 8192, 4096));
        // Ours not yet submitted: more of ours than the kernel has is no one else's.
        assert_eq!(others_in_flight(at(110, 3360, 1), Some(at(110, 3360, 1)), 4, 4096), (0, 0, 4096));
    }

    /// The wiring: what the monitor publishes is what the decision sees ahead, with our own
    /// requests, and it moves the decision's reason (no ticker, values fed by hand).
    #[test]
    fn the_kernels_count_feeds_the_queue_and_backlog_branches() {
        use crate::decision::{decide, DeviceClass, Reason, Request, SystemState, Thresholds};
        let t = Thresholds {
            class: DeviceClass::Fast,
            size_threshold_bytes: 64 << 10,
            cpu_threshold_pct: 50,
            queue_limit: 1,
            spin_cheaper_bytes_max: 0,
            spin_cheaper_write_bytes_max: 0,
            very_fast_bytes_max: u64::MAX,
            very_fast_write_bytes_max: u64::MAX,
            size_threshold_busy_bytes: 0,
        };
        let reason = |inflight: &InFlight, bytes: u64| {
            let ahead = inflight.enter(bytes);
            inflight.leave(bytes);
            decide(Request { bytes, write: false }, ahead, SystemState { cpu_utilization_pct: 0 }, &t).reason
        };
        let inflight = InFlight::default();
        assert_eq!(reason(&inflight, 4096), Reason::CpuAvailable, "an idle device: spin");
        // Another process has 2 requests in flight: over Q = 1, though we have none.
        let (count, bytes, _) =
            others_in_flight(DiskStat { ios: 10, sectors: 80, in_flight: 2 }, None, inflight.ours(), 0);
        inflight.set_others(count, bytes);
        assert_eq!(inflight.others(), (2, 8192));
        assert_eq!(reason(&inflight, 4096), Reason::QueueOverLimit);
        // One of them, with one of ours ahead: 2 ahead, still over Q.
        inflight.set_others(1, 4096);
        let _ours = inflight.enter(4096);
        assert_eq!(reason(&inflight, 4096), Reason::QueueOverLimit);
        inflight.leave(4096);
        assert_eq!(reason(&inflight, 4096), Reason::CpuAvailable, "one ahead is within Q = 1");
        // One large request of another process: its bytes reach the size threshold.
        inflight.set_others(1, 60 << 10);
        assert_eq!(reason(&inflight, 8192), Reason::SizeAtThreshold);
        inflight.set_others(0, 0);
        assert_eq!(reason(&inflight, 8192), Reason::CpuAvailable);
    }

    /// Through the ticker: a stat file (here a file of our own holding what the kernel's
    /// would) is read and published, our requests subtracted; a device is watched once, and
    /// the published figure is cleared when the monitor stops. Bounded by tick counts, not
    /// by time: the loops end as soon as the value is there.
    #[test]
    fn the_ticker_publishes_the_others_of_a_watched_device() {
        // Removed when dropped, also when the test panics.
        let scratch = tempfile::Builder::new().prefix("smartcon-monitor-stat-").tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let stat_path = dir.join("stat");
        std::fs::write(&stat_path, "100 0 800 0 0 0 0 0 5 0 0\n").unwrap();
        let queue = DeviceQueue { inflight: Arc::new(InFlight::default()), stat_path: stat_path.clone() };
        let mon = SystemMonitor::start(WINDOW_NS_MIN);
        let _ours = queue.inflight.enter(4096);
        mon.watch_device(&queue);
        mon.watch_device(&queue);
        assert_eq!(mon.watched_devices(), 1, "watched once");
        let wait_for = |want: (u32, u64)| {
            for _ in 0..1000 {
                if queue.inflight.others() == want {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            false
        };
        assert!(wait_for((4, 4 * 4096)), "published: {:?}", queue.inflight.others());
        std::fs::write(&stat_path, "100 0 800 0 0 0 0 0 1 0 0\n").unwrap();
        assert!(wait_for((0, 0)), "only ours in flight: {:?}", queue.inflight.others());
        std::fs::write(&stat_path, "100 0 800 0 0 0 0 0 3 0 0\n").unwrap();
        assert!(wait_for((2, 2 * 4096)));
        mon.stop();
        assert_eq!(queue.inflight.others(), (0, 0), "cleared when the monitor stops");
        queue.inflight.leave(4096);
    }

    #[test]
    fn fixed_monitor_reports_its_value() {
        assert_eq!(SystemMonitor::fixed(73).cpu_utilization_pct(), 73);
        assert_eq!(SystemMonitor::fixed(73).machine_utilization_pct(), 73);
    }
}

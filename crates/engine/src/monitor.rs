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
//! others *get* then understates what they *want* (two crunchers beside one spinner on two
//! CPUs get one CPU between them: 50%, under a 51% threshold, so the spinner keeps
//! spinning). So the published figure is the others' *demand*: the larger of their
//! utilization and the average number of runnable tasks other than ours (running or
//! waiting for a CPU), as a share of the CPUs. The runnable count is sampled from
//! /proc/loadavg's `nr_running` every [`RUNNABLE_SAMPLE_NS`] and averaged over the window;
//! the ticker itself (running while it reads) and our I/O threads' running share (their
//! CPU time over the wall time) are taken off. Two crunchers are 2 runnable tasks: 100% of
//! two CPUs, whether or not a spinner pushes them off. Four I/O workers that each sleep
//! on their device and run for a few microseconds per I/O are a fraction of one CPU.
//!
//! What it replaced, and why: the CPU pressure (/proc/pressure/cpu "some", the share of
//! wall time in which *some* task waited for a CPU). It is a yes/no per instant, not a
//! count of CPUs wanted: four blocking I/O workers on two CPUs wake tens of thousands of
//! times a second, and whenever two wake-ups overlap one of them waits a few
//! microseconds; the share of time with *some* waiter was near 100% beside the IO-intensive
//! load although the workers wanted well under a CPU, so `smart` blocked beside them
//! while a spinner would have cost them nothing (they preempt it on wake-up). The pressure
//! is still read and reported ([`SystemMonitor::pressure_pct`]), not decided on.
//! The threshold it is compared against is unchanged (Table II: 100% less one spinner's
//! share), and now says what it was meant to: spin when the others want no more CPUs than
//! the machine has besides the spinner's.
//!
//! Non-goals: per-CPU or per-cgroup views; a machine-wide share is what the paper uses.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the runnable count is sampled (/proc/loadavg, a few microseconds to read):
/// 50 samples in the default window, at about 0.1% of one CPU.
pub const RUNNABLE_SAMPLE_NS: u64 = 2_000_000;

/// Bounds on the window: shorter is noise (10 ms ticks), longer reacts too late.
pub const WINDOW_NS_MIN: u64 = 20_000_000;
pub const WINDOW_NS_MAX: u64 = 10_000_000_000;
pub const WINDOW_NS_DEFAULT: u64 = 100_000_000;

#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    at_ns: u64,
    busy_ns: u64,
    total_ns: u64,
    own_ns: u64,
    /// Cumulative time some task waited for a CPU (PSI), if the kernel has it.
    stall_ns: Option<u64>,
}

struct Shared {
    /// Utilization of everyone but our I/O threads, in hundredths of a percent.
    others_pct_x100: AtomicU32,
    /// The others' utilization alone (without the pressure), for reports and tests.
    others_util_pct_x100: AtomicU32,
    total_pct_x100: AtomicU32,
    /// The CPU pressure alone (PSI "some" share of wall time), for reports.
    pressure_pct_x100: AtomicU32,
    /// The others' runnable share alone, for reports.
    runnable_pct_x100: AtomicU32,
    stop: AtomicBool,
    threads: Mutex<Vec<(libc::clockid_t, u64)>>,
    /// CPU time of I/O threads that have deregistered, so their share stays counted.
    retired_own_ns: AtomicU64,
}

/// Handle to the monitor; cheap to clone.
#[derive(Clone)]
pub struct SystemMonitor {
    shared: Arc<Shared>,
    ticker: Arc<Mutex<Option<JoinHandle<()>>>>,
}

fn read_proc_stat() -> Option<(u64, u64)> {
    smartcon_util::procfs::cpu_times().map(|t| (t.busy_ns, t.total_ns))
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

/// The number of runnable tasks (running or waiting for a CPU) from /proc/loadavg's text:
/// the fourth field, `running/total`.
fn parse_nr_running(text: &str) -> Option<u32> {
    text.split_whitespace().nth(3)?.split_once('/')?.0.parse().ok()
}

fn read_nr_running() -> Option<u32> {
    parse_nr_running(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// One window's figures, in hundredths of a percent of all CPUs.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Figures {
    /// The published demand: the larger of `util` and `runnable`.
    others: f64,
    /// The others' utilization: busy time less ours, over all CPUs' time.
    util: f64,
    /// The others' average runnable count (less the sampler and our running share).
    runnable: f64,
    /// PSI "some" share of wall time, reported only.
    pressure: f64,
    /// Everyone's utilization, ours included.
    total: f64,
}

/// The figures of an interval: `busy_ns`, `total_ns` and `own_ns` of CPU time (all CPUs),
/// `wall_ns` of wall time, `runnable_mean` the mean sampled `nr_running` (`None`: not
/// readable), `stall_ns` the PSI "some" time, `cpus` the online CPUs.
fn figures(
    busy_ns: f64,
    total_ns: f64,
    own_ns: f64,
    wall_ns: f64,
    runnable_mean: Option<f64>,
    stall_ns: Option<f64>,
    cpus: u32,
) -> Figures {
    let pct = |x: f64| (x * 10_000.0).clamp(0.0, 10_000.0);
    let util = pct((busy_ns - own_ns).max(0.0) / total_ns.max(1.0));
    // The sampler is running while it reads; our threads ran `own / wall` CPUs on average.
    let own_running = own_ns / wall_ns.max(1.0);
    let runnable = runnable_mean.map_or(0.0, |n| pct((n - 1.0 - own_running).max(0.0) / cpus.max(1) as f64));
    Figures {
        others: util.max(runnable),
        util,
        runnable,
        pressure: stall_ns.map_or(0.0, |st| pct(st / wall_ns.max(1.0))),
        total: pct(busy_ns / total_ns.max(1.0)),
    }
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
            runnable_pct_x100: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            retired_own_ns: AtomicU64::new(0),
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
                runnable_pct_x100: AtomicU32::new(others_pct * 100),
                stop: AtomicBool::new(true),
                threads: Mutex::new(Vec::new()),
                retired_own_ns: AtomicU64::new(0),
            }),
            ticker: Arc::new(Mutex::new(None)),
        }
    }

    /// Others' CPU demand in whole percent (the larger of their utilization and their
    /// runnable share): one atomic load.
    #[inline]
    pub fn cpu_utilization_pct(&self) -> u32 {
        self.shared.others_pct_x100.load(Ordering::Relaxed) / 100
    }

    /// The others' average runnable tasks (running or waiting), percent of the CPUs (for
    /// reports).
    pub fn others_runnable_pct(&self) -> f64 {
        self.shared.runnable_pct_x100.load(Ordering::Relaxed) as f64 / 100.0
    }

    /// The others' CPU utilization alone, without the runnable count, percent (for reports).
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
            self.shared.threads.lock().unwrap().push((clock, start));
        }
        ThreadRegistration { shared: self.shared.clone(), clock: start.map(|_| clock) }
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
        let mut threads = self.shared.threads.lock().unwrap();
        if let Some(i) = threads.iter().position(|t| t.0 == clock) {
            let (_, start) = threads.swap_remove(i);
            // We are on the registered thread itself, so its clock is still valid.
            let used = clock_ns(clock).unwrap_or(start).saturating_sub(start);
            self.shared.retired_own_ns.fetch_add(used, Ordering::Relaxed);
        }
    }
}

fn own_cpu_ns(shared: &Shared) -> u64 {
    let threads = shared.threads.lock().unwrap();
    let live: u64 = threads.iter().map(|&(c, start)| clock_ns(c).unwrap_or(start).saturating_sub(start)).sum();
    live + shared.retired_own_ns.load(Ordering::Relaxed)
}

fn ticker(shared: Arc<Shared>, window_ns: u64, period_ns: u64) {
    let samples_max = (window_ns / period_ns + 2) as usize;
    let mut samples: VecDeque<Sample> = VecDeque::with_capacity(samples_max);
    let runnable_max = (window_ns / RUNNABLE_SAMPLE_NS + 2) as usize;
    let mut runnable: VecDeque<(u64, u32)> = VecDeque::with_capacity(runnable_max);
    let cpus = crate::profile::online_cpus();
    let mut next_stat_ns = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        let now = crate::clock::now_ns();
        if let Some(n) = read_nr_running() {
            runnable.push_back((now, n));
            while runnable.len() > runnable_max || runnable.front().is_some_and(|r| now - r.0 > window_ns) {
                runnable.pop_front();
            }
        }
        if now >= next_stat_ns {
            next_stat_ns = now + period_ns;
            tick(&shared, &mut samples, samples_max, window_ns, &runnable, cpus);
        }
        std::thread::sleep(Duration::from_nanos(RUNNABLE_SAMPLE_NS.min(period_ns)));
    }
}

/// One /proc/stat tick: a sample, then the window's figures published.
fn tick(
    shared: &Shared,
    samples: &mut VecDeque<Sample>,
    samples_max: usize,
    window_ns: u64,
    runnable: &VecDeque<(u64, u32)>,
    cpus: u32,
) {
    let Some((busy_ns, total_ns)) = read_proc_stat() else { return };
    let now = crate::clock::now_ns();
    let s = Sample { at_ns: now, busy_ns, total_ns, own_ns: own_cpu_ns(shared), stall_ns: read_cpu_pressure() };
    samples.push_back(s);
    while samples.len() > samples_max || (samples.len() > 2 && now - samples[1].at_ns >= window_ns) {
        samples.pop_front();
    }
    let Some(first) = samples.front().filter(|f| f.total_ns < s.total_ns && f.at_ns < s.at_ns) else { return };
    let in_window: Vec<u32> = runnable.iter().filter(|r| r.0 >= first.at_ns).map(|r| r.1).collect();
    let runnable_mean =
        (!in_window.is_empty()).then(|| in_window.iter().map(|&n| n as f64).sum::<f64>() / in_window.len() as f64);
    let stall = match (first.stall_ns, s.stall_ns) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64),
        _ => None,
    };
    let f = figures(
        s.busy_ns.saturating_sub(first.busy_ns) as f64,
        (s.total_ns - first.total_ns) as f64,
        s.own_ns.saturating_sub(first.own_ns) as f64,
        (s.at_ns - first.at_ns) as f64,
        runnable_mean,
        stall,
        cpus,
    );
    shared.others_util_pct_x100.store(f.util as u32, Ordering::Relaxed);
    shared.runnable_pct_x100.store(f.runnable as u32, Ordering::Relaxed);
    shared.pressure_pct_x100.store(f.pressure as u32, Ordering::Relaxed);
    shared.total_pct_x100.store(f.total as u32, Ordering::Relaxed);
    shared.others_pct_x100.store(f.others as u32, Ordering::Relaxed);
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn nr_running_is_read_from_loadavg() {
        assert_eq!(parse_nr_running("7.75 7.85 7.33 10/161 12345\n"), Some(10));
        assert_eq!(parse_nr_running("7.75 7.85 7.33\n"), None);
        assert_eq!(parse_nr_running("0.00 0.01 0.05 x/161 1\n"), None);
        if let Some(n) = read_nr_running() {
            assert!(n >= 1, "the reading thread itself is running");
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
    fn demand_counts_cpus_wanted_not_instants_with_a_waiter() {
        // 2 CPUs over 100 ms: 200 ms of CPU time.
        let (total, wall) = (200e6, 100e6);
        // Two crunchers beside our spinner: all busy, 100 ms of it ours; they got 50% but
        // are 2 runnable tasks (+1 the spinner +1 the sampler): they want both CPUs.
        let f = figures(200e6, total, 100e6, wall, Some(4.0), Some(100e6), 2);
        assert_eq!(
            (f.util, f.runnable, f.others, f.pressure, f.total),
            (5_000.0, 10_000.0, 10_000.0, 10_000.0, 10_000.0)
        );
        // A lone spinner on an idle machine: the sampler and the spinner run, nobody else.
        let f = figures(100e6, total, 100e6, wall, Some(2.0), Some(0.0), 2);
        assert_eq!(f.others, 0.0);
        // Four blocking I/O workers beside our spinner: they use 30% of the machine and are
        // runnable 0.7 CPUs on average (running plus short waits), while *some* task waited
        // 95% of the time. The pressure said 95% (block); the demand says 35% (spin).
        let f = figures(160e6, total, 100e6, wall, Some(2.7), Some(95e6), 2);
        assert_eq!((f.util, f.pressure), (3_000.0, 9_500.0));
        assert!((f.runnable - 3_500.0).abs() < 1e-6 && f.others == f.runnable, "{f:?}");
        // Without a runnable count the utilization alone counts.
        assert_eq!(figures(200e6, total, 100e6, wall, None, None, 2).others, 5_000.0);
        // Out-of-range inputs are clamped.
        let f = figures(300e6, total, 0.0, wall, Some(9.0), Some(300e6), 2);
        assert_eq!((f.util, f.runnable, f.pressure, f.total), (10_000.0, 10_000.0, 10_000.0, 10_000.0));
    }

    #[test]
    fn fixed_monitor_reports_its_value() {
        assert_eq!(SystemMonitor::fixed(73).cpu_utilization_pct(), 73);
    }
}

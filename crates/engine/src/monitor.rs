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
//! spinning). So the published figure is the larger of the others' utilization and the
//! CPU pressure (/proc/pressure/cpu "some": the share of time some runnable task waited
//! for a CPU). A lone spinner makes no pressure; a spinner that pushes others off a CPU
//! makes it at once. Without PSI (kernels built without it) the utilization alone is used.
//!
//! Non-goals: per-CPU or per-cgroup views; a machine-wide share is what the paper uses.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

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
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    if fields.len() < 5 {
        return None;
    }
    // user nice system idle iowait irq softirq steal (guest is already in user).
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields[3] + fields[4];
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let tick_ns = 1_000_000_000 / hz;
    Some(((total - idle) * tick_ns, total * tick_ns))
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

/// What other work wants of the CPUs over an interval, in hundredths of a percent: the
/// larger of their utilization (busy less ours, over all CPUs' time) and the share of
/// wall time some task waited for a CPU.
fn others_demand_x100(busy_ns: f64, total_ns: f64, own_ns: f64, stall: Option<(f64, f64)>) -> f64 {
    let util = ((busy_ns - own_ns).max(0.0) / total_ns * 10_000.0).clamp(0.0, 10_000.0);
    let pressure = stall.map_or(0.0, |(stall_ns, wall_ns)| (stall_ns / wall_ns * 10_000.0).clamp(0.0, 10_000.0));
    util.max(pressure)
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
                stop: AtomicBool::new(true),
                threads: Mutex::new(Vec::new()),
                retired_own_ns: AtomicU64::new(0),
            }),
            ticker: Arc::new(Mutex::new(None)),
        }
    }

    /// Others' CPU utilization in whole percent: one atomic load.
    #[inline]
    pub fn cpu_utilization_pct(&self) -> u32 {
        self.shared.others_pct_x100.load(Ordering::Relaxed) / 100
    }

    /// The others' CPU utilization alone, without the pressure, percent (for reports).
    pub fn others_utilization_pct(&self) -> f64 {
        self.shared.others_util_pct_x100.load(Ordering::Relaxed) as f64 / 100.0
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
    while !shared.stop.load(Ordering::Relaxed) {
        if let Some((busy_ns, total_ns)) = read_proc_stat() {
            let now = crate::clock::now_ns();
            let s =
                Sample { at_ns: now, busy_ns, total_ns, own_ns: own_cpu_ns(&shared), stall_ns: read_cpu_pressure() };
            samples.push_back(s);
            while samples.len() > samples_max || (samples.len() > 2 && now - samples[1].at_ns >= window_ns) {
                samples.pop_front();
            }
            if let Some(first) = samples.front().filter(|f| f.total_ns < s.total_ns) {
                let total = (s.total_ns - first.total_ns) as f64;
                let busy = s.busy_ns.saturating_sub(first.busy_ns) as f64;
                let own = s.own_ns.saturating_sub(first.own_ns) as f64;
                let stall = match (first.stall_ns, s.stall_ns) {
                    (Some(a), Some(b)) if s.at_ns > first.at_ns => {
                        Some((b.saturating_sub(a) as f64, (s.at_ns - first.at_ns) as f64))
                    }
                    _ => None,
                };
                let others = others_demand_x100(busy, total, own, stall);
                shared.others_util_pct_x100.store(others_demand_x100(busy, total, own, None) as u32, Ordering::Relaxed);
                let all = (busy / total * 10_000.0).min(10_000.0);
                shared.others_pct_x100.store(others as u32, Ordering::Relaxed);
                shared.total_pct_x100.store(all as u32, Ordering::Relaxed);
            }
        }
        std::thread::sleep(Duration::from_nanos(period_ns));
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
    fn sees_a_busy_foreign_thread_but_not_a_registered_one() {
        let mon = SystemMonitor::start(WINDOW_NS_MIN * 5);
        let stop = Arc::new(AtomicBool::new(false));
        // A registered spinner: its CPU time must be left out.
        let (m2, s2) = (mon.clone(), stop.clone());
        let own = std::thread::spawn(move || {
            let _reg = m2.register_current_thread();
            while !s2.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        std::thread::sleep(Duration::from_millis(400));
        // The utilization part: the pressure part depends on whatever else the machine runs.
        let with_own = mon.others_utilization_pct();
        let total = mon.total_utilization_pct();
        stop.store(true, Ordering::Relaxed);
        own.join().unwrap();
        mon.stop();
        // One spinning thread is at least a third of a core's share on any machine with
        // up to 3 cores, far above what the spinner-free figure may show. No timing bound:
        // only that the registered thread is subtracted relative to the total.
        let cpus = crate::profile::online_cpus() as f64;
        assert!(total >= 50.0 / cpus, "total {total} should include the spinner");
        assert!(with_own < total - 25.0 / cpus, "others {with_own} should exclude the spinner (total {total})");
    }

    #[test]
    fn cpu_pressure_is_read_from_the_some_line() {
        let text = "some avg10=21.83 avg60=51.31 avg300=40.16 total=4165882522\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_cpu_pressure(text), Some(4_165_882_522_000));
        assert_eq!(parse_cpu_pressure("full avg10=0.00 total=5\n"), None);
        assert_eq!(parse_cpu_pressure("some avg10=1 total=x\n"), None);
    }

    #[test]
    fn others_demand_is_the_larger_of_their_utilization_and_the_pressure() {
        // 2 CPUs over 100 ms: 200 ms of CPU time, all busy, 100 ms of it ours (a spinner).
        let (busy, total, own) = (200e6, 200e6, 100e6);
        // Crunchers displaced by the spinner: they got 50%, but some task always waited.
        assert_eq!(others_demand_x100(busy, total, own, Some((100e6, 100e6))), 10_000.0);
        // A lone spinner on an idle machine: no pressure, and the others use nothing.
        assert_eq!(others_demand_x100(100e6, total, own, Some((0.0, 100e6))), 0.0);
        // Without PSI the utilization alone counts.
        assert_eq!(others_demand_x100(busy, total, own, None), 5_000.0);
        // Out-of-range inputs are clamped.
        assert_eq!(others_demand_x100(busy, total, 0.0, Some((300e6, 100e6))), 10_000.0);
    }

    #[test]
    fn fixed_monitor_reports_its_value() {
        assert_eq!(SystemMonitor::fixed(73).cpu_utilization_pct(), 73);
    }
}

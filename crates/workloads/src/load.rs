//! Load generators for the evaluation (SmartCon Sec. 7.1) that count the work they do.
//!
//! - [`CpuLoad`]: number crunchers, one forked child process per CPU. Each child does a
//!   fixed arithmetic step and adds one to its counter in shared memory per batch, so the
//!   co-runner's work rate (batches per second) is exact and the cost busy-waiting imposes on
//!   other processes shows up as lost batches (Table VI). Being separate processes, they are
//!   never registered with the System Monitor: `smart` sees them as load, as in the paper.
//!   Their user and system CPU time is read from /proc/PID/stat between snapshots.
//! - [`IoLoad`]: I/O workers on the same target, each with one request in flight on the
//!   mainstream (blocking) path, counting I/Os. As threads ([`IoLoad::spawn`]) they enter
//!   the target's in-flight counters, so `smart` sees the device queue as the kernel's
//!   decision would. As processes ([`IoLoad::spawn_processes`], files and block devices
//!   only) they are another program's I/O on the same disk: `smart` sees them only through
//!   the kernel's count of the device's queue, which the System Monitor reads.
//!
//! Non-goals: a faithful SPEC-like benchmark mix; the children do nothing but arithmetic
//! (no allocation, no locks), which is what makes `fork` from a threaded process safe.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use smartcon_devemu::Op;

use smartcon_engine::clock::now_ns;
use smartcon_engine::decision::Strategy;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::job::SPIN_BUDGET_NS_DEFAULT;
use smartcon_engine::target::{AlignedBuf, Target};

/// Limits: more crunchers than this is a mistake, not a load.
pub const CPU_WORKERS_MAX: u32 = 256;
pub const IO_WORKERS_MAX: u32 = 64;
/// Arithmetic steps per counted batch (about 10-50 us of work on current CPUs).
pub const BATCH_STEPS: u64 = 20_000;

/// Counters and CPU time of a load at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LoadSnapshot {
    pub at_ns: u64,
    /// Batches (CPU load) or I/Os (I/O load) done so far.
    pub work: u64,
    /// CPU time of the load's processes, from /proc (CPU load only; tick resolution).
    pub user_ns: u64,
    pub sys_ns: u64,
}

/// What a load did between two snapshots.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LoadDelta {
    pub real_ns: u64,
    pub work: u64,
    pub work_per_s: f64,
    pub user_ns: u64,
    pub sys_ns: u64,
}

impl LoadSnapshot {
    pub fn delta_to(&self, later: &LoadSnapshot) -> LoadDelta {
        let real_ns = later.at_ns.saturating_sub(self.at_ns).max(1);
        let work = later.work.saturating_sub(self.work);
        LoadDelta {
            real_ns,
            work,
            work_per_s: work as f64 * 1e9 / real_ns as f64,
            user_ns: later.user_ns.saturating_sub(self.user_ns),
            sys_ns: later.sys_ns.saturating_sub(self.sys_ns),
        }
    }
}

/// One step of the cruncher: an LCG and a multiply-xorshift, kept opaque to the optimizer.
#[inline]
pub fn crunch(mut x: u64, steps: u64) -> u64 {
    for _ in 0..steps {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        x ^= x >> 29;
        x = std::hint::black_box(x);
    }
    x
}

/// Number-cruncher child processes; killed and reaped on drop.
pub struct CpuLoad {
    pids: Vec<libc::pid_t>,
    counters: *mut AtomicU64,
    map_bytes: usize,
}

// SAFETY: the shared counters are atomics in a mapping owned by this value until drop.
unsafe impl Send for CpuLoad {}
// SAFETY: as above; only atomic loads go through a shared reference.
unsafe impl Sync for CpuLoad {}

impl CpuLoad {
    /// Forks `workers` crunchers. They die with the parent (PR_SET_PDEATHSIG) as well as on
    /// drop, so an interrupted run leaves nothing behind.
    pub fn start(workers: u32) -> Result<CpuLoad, Error> {
        if workers == 0 || workers > CPU_WORKERS_MAX {
            return Err(Error::new(ErrorKind::Usage, format!("CPU load workers must be 1..={CPU_WORKERS_MAX}")));
        }
        let (ptr, map_bytes) = map_shared_counters(workers as usize, "load counters")?;
        // Zero-filled anonymous memory is a valid array of AtomicU64 zeros.
        let mut load =
            CpuLoad { pids: Vec::with_capacity(workers as usize), counters: ptr as *mut AtomicU64, map_bytes };
        let parent = std::process::id() as libc::pid_t;
        for index in 0..workers as usize {
            // SAFETY: the child only runs `child_main`, which does arithmetic and atomics on
            // the shared mapping, no allocation and no locks, then never returns.
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                return Err(Error::new(
                    ErrorKind::Setup,
                    format!("fork of a CPU load worker: {}", std::io::Error::last_os_error()),
                ));
            }
            if pid == 0 {
                // SAFETY: index < workers, inside the mapping.
                let counter = unsafe { &*load.counters.add(index) };
                child_main(counter, parent);
            }
            load.pids.push(pid);
        }
        Ok(load)
    }

    pub fn workers(&self) -> usize {
        self.pids.len()
    }

    pub fn snapshot(&self) -> LoadSnapshot {
        let mut s = LoadSnapshot { at_ns: now_ns(), ..Default::default() };
        for (i, &pid) in self.pids.iter().enumerate() {
            // SAFETY: i < workers, inside the mapping, which lives until drop.
            s.work += unsafe { &*self.counters.add(i) }.load(Ordering::Relaxed);
            if let Some((u, k)) = smartcon_util::procfs::process_cpu_ns(pid) {
                s.user_ns += u;
                s.sys_ns += k;
            }
        }
        s
    }
}

fn child_main(counter: &AtomicU64, parent: libc::pid_t) -> ! {
    // SAFETY: prctl and getppid are plain syscalls.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
        if libc::getppid() != parent {
            libc::_exit(0);
        }
    }
    let mut x = 1u64;
    // Bounded by the parent: it kills us; the death signal covers a parent that died.
    loop {
        x = crunch(x, BATCH_STEPS);
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        end_workers(&self.pids, self.counters, self.map_bytes);
    }
}

/// I/O workers on the mainstream path; they run until `stop` and count I/Os in `done`
/// (threads), or in their shared counters (processes, killed and reaped on drop).
pub struct IoLoad {
    pub done: AtomicU64,
    pub stop: AtomicBool,
    pub errors: AtomicU64,
    processes: std::sync::Mutex<Option<IoProcesses>>,
}

impl Default for IoLoad {
    fn default() -> Self {
        IoLoad {
            done: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            errors: AtomicU64::new(0),
            processes: std::sync::Mutex::new(None),
        }
    }
}

/// The worker processes of an I/O load: their pids and their counters (done, errors; two
/// per worker) in a shared mapping. Dropping it kills and reaps them, then unmaps.
struct IoProcesses {
    pids: Vec<libc::pid_t>,
    counters: *mut AtomicU64,
    map_bytes: usize,
    /// One buffer per worker, allocated before the fork (a child must not allocate).
    _buffers: Vec<AlignedBuf>,
}

// SAFETY: the counters are atomics in a mapping owned by this value until drop; the
// buffers are only written by the children, in their own copies of the memory.
unsafe impl Send for IoProcesses {}

impl IoProcesses {
    fn counter(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.pids.len() * 2);
        // SAFETY: i is inside the mapping (checked above), which lives until drop.
        unsafe { &*self.counters.add(i) }
    }
}

impl Drop for IoProcesses {
    fn drop(&mut self) {
        end_workers(&self.pids, self.counters, self.map_bytes);
    }
}

impl IoLoad {
    /// The work done so far (I/Os of the threads, or of the processes) and, for processes,
    /// their CPU time.
    pub fn snapshot(&self) -> LoadSnapshot {
        let mut s = LoadSnapshot { at_ns: now_ns(), work: self.done.load(Ordering::Relaxed), user_ns: 0, sys_ns: 0 };
        if let Some(p) = self.processes.lock().unwrap().as_ref() {
            for (i, &pid) in p.pids.iter().enumerate() {
                s.work += p.counter(2 * i).load(Ordering::Relaxed);
                if let Some((u, k)) = smartcon_util::procfs::process_cpu_ns(pid) {
                    s.user_ns += u;
                    s.sys_ns += k;
                }
            }
        }
        s
    }

    /// I/Os that failed so far (a failing worker stops).
    pub fn failures(&self) -> u64 {
        let mut n = self.errors.load(Ordering::Relaxed);
        if let Some(p) = self.processes.lock().unwrap().as_ref() {
            n += (0..p.pids.len()).map(|i| p.counter(2 * i + 1).load(Ordering::Relaxed)).sum::<u64>();
        }
        n
    }

    /// Whether the workers run as processes.
    pub fn as_processes(&self) -> bool {
        self.processes.lock().unwrap().is_some()
    }

    /// Forks `workers` processes doing `bs_bytes` random reads on `target`'s descriptor,
    /// each a plain pread(2) that sleeps in the kernel until the device completes it (the
    /// mainstream path), until [`IoLoad::stop_processes`] or drop. They enter none of our
    /// counters: to this process they are another program's I/O on the same disk. Only
    /// targets with a descriptor (files, block devices): an emulated device lives in this
    /// process's memory, and a child would have a copy of its own.
    ///
    /// The children run only system calls and atomics on memory set up before the fork
    /// (no allocation, no locks), which is what makes forking a threaded process safe,
    /// and die with the parent (PR_SET_PDEATHSIG).
    pub fn spawn_processes(
        &self,
        target: &dyn Target,
        workers: u32,
        bs_bytes: u64,
        span_bytes: u64,
    ) -> Result<(), Error> {
        if workers == 0 || workers > IO_WORKERS_MAX {
            return Err(Error::new(ErrorKind::Usage, format!("I/O load workers must be 1..={IO_WORKERS_MAX}")));
        }
        let Some(fd) = target.raw_fd() else {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("{}: I/O workers run as processes only on files and block devices", target.label()),
            ));
        };
        let slots = span_bytes / bs_bytes;
        if slots == 0 || !bs_bytes.is_multiple_of(target.block_bytes()) {
            return Err(Error::new(ErrorKind::Usage, "the I/O load's request size does not fit the target"));
        }
        let mut slot = self.processes.lock().unwrap();
        if slot.is_some() {
            return Err(Error::new(ErrorKind::Usage, "this I/O load already has its worker processes"));
        }
        let (ptr, map_bytes) = map_shared_counters(2 * workers as usize, "I/O load counters")?;
        let buffers: Vec<AlignedBuf> = (0..workers).map(|_| AlignedBuf::new(bs_bytes as usize)).collect();
        // Zero-filled anonymous memory is a valid array of AtomicU64 zeros.
        let mut procs = IoProcesses {
            pids: Vec::with_capacity(workers as usize),
            counters: ptr as *mut AtomicU64,
            map_bytes,
            _buffers: Vec::new(),
        };
        let addrs: Vec<usize> = buffers.iter().map(|b| b.as_slice().as_ptr() as usize).collect();
        procs._buffers = buffers;
        let parent = std::process::id() as libc::pid_t;
        for (index, &buf) in addrs.iter().enumerate() {
            // SAFETY: the child runs only `io_child_main`: prctl, getppid, pread and atomics
            // on the shared mapping, with a buffer allocated before the fork; it never
            // returns.
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                // `procs` drops here: the workers forked so far are killed and reaped.
                return Err(Error::new(
                    ErrorKind::Setup,
                    format!("fork of an I/O load worker: {}", std::io::Error::last_os_error()),
                ));
            }
            if pid == 0 {
                // SAFETY: 2 * index + 1 < 2 * workers: inside the mapping, which the child
                // inherited; the buffer holds bs_bytes bytes in the child's copy of memory.
                let (done, errors) = unsafe { (&*procs.counters.add(2 * index), &*procs.counters.add(2 * index + 1)) };
                io_child_main(fd, buf as *mut u8, bs_bytes, slots, index as u64, done, errors, parent);
            }
            procs.pids.push(pid);
        }
        *slot = Some(procs);
        Ok(())
    }

    /// Kills and reaps the worker processes (also done on drop).
    pub fn stop_processes(&self) {
        self.processes.lock().unwrap().take();
    }

    /// Spawns `workers` threads in `scope` doing `bs_bytes` random reads on `target` until
    /// `self.stop` is set. The caller sets `stop` before the scope ends.
    pub fn spawn<'scope, 'env>(
        &'env self,
        scope: &'scope std::thread::Scope<'scope, 'env>,
        target: &'env dyn Target,
        workers: u32,
        bs_bytes: u64,
        span_bytes: u64,
    ) -> Result<(), Error> {
        if workers == 0 || workers > IO_WORKERS_MAX {
            return Err(Error::new(ErrorKind::Usage, format!("I/O load workers must be 1..={IO_WORKERS_MAX}")));
        }
        let slots = span_bytes / bs_bytes;
        if slots == 0 || !bs_bytes.is_multiple_of(target.block_bytes()) {
            return Err(Error::new(ErrorKind::Usage, "the I/O load's request size does not fit the target"));
        }
        for w in 0..workers {
            std::thread::Builder::new()
                .name(format!("smartcon-ioload-{w}"))
                .spawn_scoped(scope, move || self.worker(target, w, bs_bytes, slots))
                .map_err(|e| Error::new(ErrorKind::Setup, format!("spawn I/O load worker: {e}")))?;
        }
        Ok(())
    }

    fn worker(&self, target: &dyn Target, index: u32, bs: u64, slots: u64) {
        let Ok(mut port) = target.open_port() else {
            self.errors.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut buf = AlignedBuf::new(bs as usize);
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ ((index as u64 + 1) << 17);
        let inflight = target.inflight();
        while !self.stop.load(Ordering::Relaxed) {
            x = crunch(x, 1);
            let slot = ((x as u128 * slots as u128) >> 64) as u64;
            let _ahead = inflight.enter(bs);
            let r = port.io(Op::Read, buf.as_mut_slice(), slot * bs, Strategy::Block, SPIN_BUDGET_NS_DEFAULT);
            inflight.leave(bs);
            if r.is_err() {
                // A failing device ends this worker; the count shows it.
                self.errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
            self.done.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// An I/O load worker process: blocking random reads until killed.
#[allow(clippy::too_many_arguments)]
fn io_child_main(
    fd: libc::c_int,
    buf: *mut u8,
    bs: u64,
    slots: u64,
    index: u64,
    done: &AtomicU64,
    errors: &AtomicU64,
    parent: libc::pid_t,
) -> ! {
    // SAFETY: prctl and getppid are plain syscalls.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
        if libc::getppid() != parent {
            libc::_exit(0);
        }
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ ((index + 1) << 17);
    // Bounded by the parent: it kills us; the death signal covers a parent that died.
    loop {
        x = crunch(x, 1);
        let slot = ((x as u128 * slots as u128) >> 64) as u64;
        // SAFETY: buf holds bs bytes (allocated before the fork); fd is the target's,
        // inherited and open until we are killed.
        let n = unsafe { libc::pread(fd, buf as *mut libc::c_void, bs as usize, (slot * bs) as libc::off_t) };
        if n != bs as isize {
            errors.fetch_add(1, Ordering::Relaxed);
            // SAFETY: ends this child only; nothing to flush (no stdio used).
            unsafe { libc::_exit(1) };
        }
        done.fetch_add(1, Ordering::Relaxed);
    }
}

/// Machine-wide iowait and total time from /proc/stat, in ns (tick resolution).
pub fn proc_stat_iowait_total_ns() -> Option<(u64, u64)> {
    smartcon_util::procfs::cpu_times().map(|t| (t.iowait_ns, t.total_ns))
}

/// Kills and reaps forked workers, then unmaps their shared counters: every worker is
/// gone before the mapping it writes to is.
fn end_workers(pids: &[libc::pid_t], counters: *mut AtomicU64, map_bytes: usize) {
    for &pid in pids {
        // SAFETY: these are our own children; kill and reap them.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
        }
    }
    // SAFETY: the mapping was made by `map_shared_counters` with this size, and every
    // child that used it has been reaped above; the parent's references ended with its
    // owner, which is being dropped.
    unsafe { libc::munmap(counters as *mut libc::c_void, map_bytes) };
}

/// An anonymous shared mapping for `count` counters that forked workers and the parent
/// both see, zero-filled (a valid array of `AtomicU64` zeros), at least a page; the
/// pointer and the mapping's length, which the owner unmaps on drop. `what` names it in
/// the error.
fn map_shared_counters(count: usize, what: &str) -> Result<(*mut libc::c_void, usize), Error> {
    let map_bytes = (count * std::mem::size_of::<AtomicU64>()).max(4096);
    // SAFETY: an anonymous shared mapping; the result is checked before use.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(Error::new(ErrorKind::Setup, format!("mmap for {what}: {}", std::io::Error::last_os_error())));
    }
    Ok((ptr, map_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cruncher_children_count_work_and_are_reaped() {
        let load = CpuLoad::start(2).unwrap();
        let pids = load.pids.clone();
        let a = load.snapshot();
        // Wait on counts, not on time: bounded number of short sleeps.
        let mut b = load.snapshot();
        for _ in 0..2000 {
            if b.work > a.work + 4 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            b = load.snapshot();
        }
        assert!(b.work > a.work, "crunchers did no work");
        let d = a.delta_to(&b);
        assert_eq!(d.work, b.work - a.work);
        drop(load);
        for pid in pids {
            // SAFETY: kill with signal 0 only checks existence.
            let alive = unsafe { libc::kill(pid, 0) } == 0;
            assert!(!alive, "child {pid} survived the drop");
        }
    }

    #[test]
    fn bad_worker_counts_are_refused() {
        assert!(CpuLoad::start(0).is_err());
        assert!(CpuLoad::start(CPU_WORKERS_MAX + 1).is_err());
    }

    #[test]
    fn io_load_processes_read_a_file_count_and_are_reaped() {
        let spec = smartcon_emutarget::target::parse_target("tmp:4m").unwrap();
        let target = smartcon_emutarget::target::open(&spec, Default::default()).unwrap();
        let load = IoLoad::default();
        load.spawn_processes(target.as_ref(), 2, 4096, 4 << 20).unwrap();
        assert!(load.as_processes());
        let pids = load.processes.lock().unwrap().as_ref().unwrap().pids.clone();
        assert_eq!(pids.len(), 2);
        // Wait on counts, not on time: bounded number of short sleeps.
        for _ in 0..2000 {
            if load.snapshot().work >= 100 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(load.snapshot().work >= 100, "the worker processes did no I/O");
        assert_eq!(load.failures(), 0);
        assert!(load.spawn_processes(target.as_ref(), 1, 4096, 4 << 20).is_err(), "once per load");
        load.stop_processes();
        for pid in pids {
            // SAFETY: kill with signal 0 only checks existence.
            assert!(unsafe { libc::kill(pid, 0) } != 0, "worker {pid} survived");
        }
        // An emulated device has no descriptor a child could share.
        let emu = smartcon_emutarget::target::open(
            &smartcon_emutarget::target::parse_target("emu:nvram,size=8m").unwrap(),
            Default::default(),
        )
        .unwrap();
        let e = IoLoad::default().spawn_processes(emu.as_ref(), 1, 4096, 8 << 20).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Usage, "{e}");
    }

    #[test]
    fn io_load_counts_ios_on_an_emulated_device() {
        let spec = smartcon_emutarget::target::parse_target("emu:nvram,size=8m").unwrap();
        let target = smartcon_emutarget::target::open(&spec, Default::default()).unwrap();
        let load = IoLoad::default();
        std::thread::scope(|s| {
            load.spawn(s, target.as_ref(), 2, 4096, 8 << 20).unwrap();
            for _ in 0..2000 {
                if load.done.load(Ordering::Relaxed) >= 100 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            load.stop.store(true, Ordering::Relaxed);
        });
        assert!(load.done.load(Ordering::Relaxed) >= 100);
        assert_eq!(load.errors.load(Ordering::Relaxed), 0);
    }
}

//! The clock's domain: the page the program's processes share (the skew, the last
//! instant handed out, the table of registered waits), its lock, the count of the domain's
//! threads from /proc, and the idle-skipping jump ([`jump_if_idle`]). Also the readings of
//! the program's clocks built on it ([`observe_ns`], [`clock_ns`]). See [`crate::vclock`]
//! for the design.
//!
//! Service layer: raw system calls and the real libc only (it runs inside interposed calls,
//! possibly in a signal handler: nothing here allocates).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use libc::{c_int, clockid_t, timespec};

use super::ownclock;
use crate::real::{call_real, Sym};

static ON: AtomicBool = AtomicBool::new(false);
/// This image's share of the skew (the jumps it made, less the emulator work they hid)
/// and the jumps it made: what its exit record says.
static SKEW_MADE_NS: AtomicI64 = AtomicI64::new(0);
static JUMPED_NS: AtomicU64 = AtomicU64::new(0);
static JUMPS: AtomicU64 = AtomicU64::new(0);
/// Real time between a jump and the woken waiter's return that the clock did not count
/// ([`settle_after_jump`]), and how many waits it was hidden from.
static WAKE_HIDDEN_NS: AtomicU64 = AtomicU64::new(0);
static WAKES_SETTLED: AtomicU64 = AtomicU64::new(0);
/// Requests the program ran past before they were handed back, the time it ran past them
/// (kept off its clock by the cap), and its threads' pauses at the cap with their real ns.
static CAPPED: AtomicU64 = AtomicU64::new(0);
static CAPPED_NS: AtomicU64 = AtomicU64::new(0);
static PAUSES: AtomicU64 = AtomicU64::new(0);
static PAUSED_NS: AtomicU64 = AtomicU64::new(0);
/// Caps that held past [`CAP_HOLD_MAX_NS`] before they were released (the guard let the
/// clock run on), the longest real time a cap was set before its release, and the pauses
/// at a cap that ended at [`PAUSE_MAX_NS`] instead of by a hand-back.
static CAPS_EXPIRED: AtomicU64 = AtomicU64::new(0);
static CAP_HELD_MAX_NS: AtomicU64 = AtomicU64::new(0);
static PAUSES_TIMED_OUT: AtomicU64 = AtomicU64::new(0);

/// Processes one domain holds at most; a fork past it turns jumping off for the domain.
pub const DOMAIN_PIDS_MAX: usize = 64;
/// Waits registered at once at most; a wait past it is not registered (its thread counts
/// as running, so the clock runs in real time meanwhile).
pub const DOMAIN_WAITS_MAX: usize = 256;
/// A registered wait without a target instant (it ends only by an event).
pub const NO_TARGET: u64 = u64::MAX;
/// Processes whose CPU time the guest CPU clock sums at once at most (a later one goes
/// uncounted: its CPU time does not move the clock).
pub const CPU_PIDS_MAX: usize = 128;
/// A CPU slot being filled or emptied: readers skip it.
const CPU_PID_BUSY: u32 = u32::MAX;

/// One registered wait. `id` 0: free.
#[repr(C)]
struct Slot {
    id: AtomicU64,
    pid: AtomicU32,
    tid: AtomicU32,
    /// The virtual monotonic instant the wait ends at by itself, or [`NO_TARGET`].
    target_ns: AtomicU64,
    /// 1: the wait can also end by an event (a condition variable, a descriptor), so its
    /// thread counts as idle only while the kernel has it asleep.
    event: AtomicU32,
    /// Bumped by a jump that reaches the target; a clock waiter sleeps on it (a shared
    /// futex), so a jump wakes only the waits it ends, not every waiter of the program.
    wake: AtomicU32,
    /// Nonzero: the signal a jump that reaches the target sends the waiting thread (a
    /// wait that sleeps in the kernel with a signal mask, not on `wake`: see crate::vtimer).
    signal: AtomicU32,
}

/// The clock one program shares among its processes: a page mapped `MAP_SHARED` before
/// any fork, so every forked process reads and moves the same clock, and the clock jumps
/// only when every thread of every one of them is idle. Only atomics: it is read without
/// the lock by `clock_gettime`; the lock serialises registration and the jump decision.
#[repr(C)]
struct Domain {
    /// 0, or the thread id of the holder (a dead holder's lock is taken over).
    lock: AtomicU32,
    /// Bumped at each jump; clock waiters sleep on it (a shared futex).
    epoch: AtomicU32,
    /// Virtual minus real, for the monotonic family (ns).
    skew_ns: AtomicI64,
    /// The latest virtual monotonic instant handed out.
    last_ns: AtomicU64,
    next_id: AtomicU64,
    /// Bumped whenever a wait registers or leaves and at each jump: a jump decided on a
    /// snapshot goes ahead only if nothing changed since.
    generation: AtomicU64,
    /// The domain's threads at the last count from /proc, and when (real monotonic ns).
    threads_counted: AtomicU64,
    threads_counted_at_ns: AtomicU64,
    /// A fork found the pid table full: jumping is off (a process would go uncounted).
    overflow: AtomicU32,
    /// The virtual instant the last jump went to ([`settle_after_jump`]).
    jumped_to_ns: AtomicU64,
    /// The model's completion of a helper's request not handed back yet ([`set_cap`]):
    /// the clock does not read past it. 0: none.
    cap_ns: AtomicU64,
    /// The real monotonic instant the cap was set at ([`CAP_HOLD_MAX_NS`]).
    cap_set_real_ns: AtomicU64,
    /// Bumped when the cap is released; a thread paused at the cap sleeps on it.
    cap_word: AtomicU32,
    /// 1: the cap set now has been found older than [`CAP_HOLD_MAX_NS`] (counted once).
    cap_expired: AtomicU32,
    /// The guest CPU clock's base ([`cpu_ns`]): the processes whose CPU time it sums (0:
    /// free, [`CPU_PID_BUSY`]: being filled or emptied), the most each was seen at, and the
    /// CPU time of those that have gone.
    cpu_pids: [AtomicU32; CPU_PIDS_MAX],
    cpu_seen_ns: [AtomicU64; CPU_PIDS_MAX],
    /// 1: the process is stopped under the program's ptrace ([`park_cpu_pid`]), so its
    /// CPU time cannot move and `cpu_seen_ns` is its reading; 0: read it at each reading.
    cpu_parked: [AtomicU32; CPU_PIDS_MAX],
    /// Readings that used a parked process's kept value since it was last read
    /// ([`PARKED_REREAD_EVERY`]).
    cpu_skips: [AtomicU32; CPU_PIDS_MAX],
    cpu_retired_ns: AtomicU64,
    pids: [AtomicU32; DOMAIN_PIDS_MAX],
    slots: [Slot; DOMAIN_WAITS_MAX],
}

impl Domain {
    const fn new() -> Domain {
        Domain {
            lock: AtomicU32::new(0),
            epoch: AtomicU32::new(0),
            skew_ns: AtomicI64::new(0),
            last_ns: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            generation: AtomicU64::new(0),
            threads_counted: AtomicU64::new(0),
            threads_counted_at_ns: AtomicU64::new(0),
            overflow: AtomicU32::new(0),
            jumped_to_ns: AtomicU64::new(0),
            cap_ns: AtomicU64::new(0),
            cap_set_real_ns: AtomicU64::new(0),
            cap_word: AtomicU32::new(0),
            cap_expired: AtomicU32::new(0),
            cpu_pids: [const { AtomicU32::new(0) }; CPU_PIDS_MAX],
            cpu_seen_ns: [const { AtomicU64::new(0) }; CPU_PIDS_MAX],
            cpu_parked: [const { AtomicU32::new(0) }; CPU_PIDS_MAX],
            cpu_skips: [const { AtomicU32::new(0) }; CPU_PIDS_MAX],
            cpu_retired_ns: AtomicU64::new(0),
            pids: [const { AtomicU32::new(0) }; DOMAIN_PIDS_MAX],
            slots: [const {
                Slot {
                    id: AtomicU64::new(0),
                    pid: AtomicU32::new(0),
                    tid: AtomicU32::new(0),
                    target_ns: AtomicU64::new(0),
                    event: AtomicU32::new(0),
                    wake: AtomicU32::new(0),
                    signal: AtomicU32::new(0),
                }
            }; DOMAIN_WAITS_MAX],
        }
    }
}

/// The process-local domain, used until (or if) the shared page cannot be mapped.
static LOCAL: Domain = Domain::new();
static SHARED: AtomicPtr<Domain> = AtomicPtr::new(std::ptr::null_mut());

fn dom() -> &'static Domain {
    let p = SHARED.load(Ordering::Acquire);
    if p.is_null() {
        &LOCAL
    } else {
        // SAFETY: a MAP_SHARED mapping of size_of::<Domain>() made in `enable`, zeroed by the
        // kernel (a valid Domain: all atomics at 0, next_id fixed up there), never unmapped.
        unsafe { &*p }
    }
}

fn getpid() -> u32 {
    // SAFETY: no preconditions (the raw call: libc's may be cached across a vfork).
    unsafe { libc::syscall(libc::SYS_getpid) as u32 }
}

fn gettid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The domain lock: a spin lock whose word holds the holder's thread id, so a process
/// killed while holding it does not stop the others (they take it over once the holder is
/// gone), and a signal handler that waits while the code it interrupted holds it is seen
/// (the word is this thread's id; a thread-local flag would not do: a clone helper shares
/// its creator's TLS, see crate::helper).
struct DomainLock(&'static Domain);

impl DomainLock {
    /// The lock, or None when this thread holds it already (the caller then skips what
    /// needed it).
    fn take() -> Option<DomainLock> {
        let d = dom();
        let me = gettid();
        if d.lock.load(Ordering::Acquire) == me {
            return None;
        }
        let mut spins = 0u32;
        loop {
            let owner = d.lock.load(Ordering::Relaxed);
            if owner == 0 && d.lock.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return Some(DomainLock(d));
            }
            spins = spins.wrapping_add(1);
            // A holder killed while in it is rare: look for one only now and then.
            if spins.is_multiple_of(1024)
                && owner != 0
                && owner != me
                // SAFETY: signal 0 only checks that the task exists.
                && unsafe { libc::kill(owner as libc::pid_t, 0) } != 0
                && crate::real::errno() == libc::ESRCH
            {
                let _ = d.lock.compare_exchange(owner, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
            if spins.is_multiple_of(16) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

impl Drop for DomainLock {
    fn drop(&mut self) {
        self.0.lock.store(0, Ordering::Release);
    }
}

static CLOCK_GETTIME: Sym = Sym::new(c"clock_gettime");

/// Turns virtual time on (from the constructor): maps the shared clock, so that the
/// processes this one forks share it.
pub fn enable() {
    let size = std::mem::size_of::<Domain>();
    // SAFETY: a fresh anonymous mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p != libc::MAP_FAILED {
        let d = p.cast::<Domain>();
        // SAFETY: the mapping is zeroed, which is a valid Domain (atomics at 0); no other
        // thread sees it before the store below.
        unsafe { (*d).next_id.store(1, Ordering::Relaxed) };
        SHARED.store(d, Ordering::Release);
    }
    let d = dom();
    if let Some(ppm) = std::env::var(ENV_CPU_SPEED).ok().and_then(|t| speed_ppm(&t)) {
        SPEED_PPM.store(ppm, Ordering::Relaxed);
    }
    if std::env::var(ENV_GUEST_CLOCK).is_ok_and(|v| v == "cpu") {
        add_cpu_pid(getpid());
        ownclock::claim(getpid());
        CPU_BASE.store(true, Ordering::Release);
    }
    // The clock starts at the real one, whatever the speed and the base.
    let real = real_ns(libc::CLOCK_MONOTONIC);
    d.skew_ns.store(real as i64 - scaled(base_ns()) as i64, Ordering::Relaxed);
    d.last_ns.store(real, Ordering::Relaxed);
    d.pids[0].store(getpid(), Ordering::Relaxed);
    ON.store(true, Ordering::Release);
}

/// `emulate vm --virtual-time` (the contract's `SMARTCON_PRELOAD_GUEST_CLOCK`): `cpu` makes
/// the clock move, while the program runs, with the CPU time its processes use instead of
/// the wall ([`cpu_ns`]).
pub const ENV_GUEST_CLOCK: &str = smartcon_preload_contract::env::GUEST_CLOCK;
/// The clock's base is the guest CPU clock ([`cpu_ns`]), not the real monotonic clock.
static CPU_BASE: AtomicBool = AtomicBool::new(false);

/// What the virtual clock moves with while the program runs (before `--cpu-speed` scales
/// it): the real monotonic clock, or under `SMARTCON_PRELOAD_GUEST_CLOCK=cpu` the CPU time
/// of the program's processes ([`cpu_ns`]).
#[inline]
fn base_ns() -> u64 {
    if CPU_BASE.load(Ordering::Relaxed) {
        cpu_ns(dom())
    } else {
        real_ns(libc::CLOCK_MONOTONIC)
    }
}

/// The guest CPU clock: the CPU time (the scheduler's, in ns) of every process counted
/// ([`add_cpu_pid`]), those that have gone included. For a uniprocessor guest kernel run as
/// host processes (User-Mode Linux: its kernel process and one ptraced process per guest
/// address space, of which one runs at a time) this is the time its one CPU has been busy,
/// whatever else the host runs: a guest thread that waits for a host CPU does not move it
/// (the seed's co-simulator runs its OS on a real CPU, alone). The helper processes that
/// move data for the device model (UML's ubd and SIGIO threads, `clone(CLONE_VM)`) are not
/// counted: their work is the device's, kept off this clock (the seed pauses the whole OS
/// instead; here only one program's clock, or a UML guest's, is held).
///
/// A process that cannot be read any more (reaped) leaves its last reading to the gone
/// total; the CPU time it used since that reading is lost (the clock never goes back: the
/// readings built on it stall that long). Several processes running at once would count
/// twice: the base is for a uniprocessor guest, which `emulate vm` is.
///
/// A process stopped under the program's ptrace ([`park_cpu_pid`]: UML's guest processes
/// between two resumes) is not read: its CPU time cannot move, so its kept reading is
/// used (the reading's own system calls are CPU of the reading process, which is counted:
/// each one read was guest CPU time that was the clock's own). It is read again every
/// [`PARKED_REREAD_EVERY`] readings all the same, so a process resumed some other way
/// (or gone unreaped) is not missed for long.
fn cpu_ns(d: &Domain) -> u64 {
    // The gone total first: a process retired after this load is in neither sum (a
    // reading a little short, which `last_ns` hides), never in both.
    CPU_CLOCK_READINGS.fetch_add(1, Ordering::Relaxed);
    let mut total = d.cpu_retired_ns.load(Ordering::Acquire);
    for (i, p) in d.cpu_pids.iter().enumerate() {
        let pid = p.load(Ordering::Acquire);
        if pid == 0 || pid == CPU_PID_BUSY {
            continue;
        }
        if d.cpu_parked[i].load(Ordering::Acquire) != 0
            && d.cpu_skips[i].fetch_add(1, Ordering::AcqRel) % PARKED_REREAD_EVERY != PARKED_REREAD_EVERY - 1
        {
            total += d.cpu_seen_ns[i].load(Ordering::Acquire);
            continue;
        }
        match process_cpu_ns(pid) {
            Some(ns) => total += d.cpu_seen_ns[i].fetch_max(ns, Ordering::AcqRel).max(ns),
            None => {
                if p.compare_exchange(pid, CPU_PID_BUSY, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                    d.cpu_parked[i].store(0, Ordering::Release);
                    let seen = d.cpu_seen_ns[i].swap(0, Ordering::AcqRel);
                    d.cpu_retired_ns.fetch_add(seen, Ordering::AcqRel);
                    // In this reading too (its gone total was loaded before).
                    total += seen;
                    p.store(0, Ordering::Release);
                }
            }
        }
    }
    total
}

/// A process's CPU time (all its threads, the scheduler's clock) in ns, or None when it is
/// gone. Any process's CPU clock can be read on Linux (clock_getcpuclockid(3)); a zombie's
/// still reads until it is reaped.
///
/// The calling process's own clock, read by its owner thread (UML's kernel thread), is
/// extrapolated without a system call while that thread keeps its CPU
/// ([`super::ownclock`]).
fn process_cpu_ns(pid: u32) -> Option<u64> {
    let counted = || {
        CPU_CLOCK_READS.fetch_add(1, Ordering::Relaxed);
        read_cpu_clock(pid)
    };
    if let Some(ns) = ownclock::read(pid, || real_ns(libc::CLOCK_MONOTONIC), counted) {
        return Some(ns);
    }
    counted()
}

/// The calling thread is about to block in a system call (the interposed `wait4`): when
/// it owns its process's CPU clock, the clock is carried across the call without a system
/// call after it ([`super::ownclock::block_begin`]).
pub fn own_block_begin() {
    if cpu_base() {
        ownclock::block_begin(
            || real_ns(libc::CLOCK_MONOTONIC),
            |pid| {
                CPU_CLOCK_READS.fetch_add(1, Ordering::Relaxed);
                read_cpu_clock(pid)
            },
        );
    }
}

/// The blocking call of [`own_block_begin`] returned.
pub fn own_block_end() {
    if cpu_base() {
        ownclock::block_end(|| real_ns(libc::CLOCK_MONOTONIC));
    }
}

/// Turns the own-CPU-clock path off for good ([`super::ownclock::disable`]).
pub fn own_clock_disable() {
    ownclock::disable();
}

/// The read itself: the process CPU clock by pid.
fn read_cpu_clock(pid: u32) -> Option<u64> {
    // The kernel's process CPU clock id: the negated pid shifted by 3, CPUCLOCK_SCHED (2).
    let clock = ((!(pid as i64)) << 3) | 2;
    let mut ts = timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to write; an unknown clock is an error return, not UB.
    let r = unsafe { libc::syscall(libc::SYS_clock_gettime, clock as clockid_t, &mut ts) };
    (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Counts `pid`'s CPU time in the guest CPU clock from now on (its CPU time so far too:
/// a process is added as it starts). Nothing when the clock's base is the wall or the
/// table is full.
pub fn add_cpu_pid(pid: u32) {
    let d = dom();
    let Some(slot) = d
        .cpu_pids
        .iter()
        .position(|p| p.compare_exchange(0, CPU_PID_BUSY, Ordering::AcqRel, Ordering::Relaxed).is_ok())
    else {
        return;
    };
    d.cpu_seen_ns[slot].store(0, Ordering::Release);
    d.cpu_parked[slot].store(0, Ordering::Release);
    d.cpu_pids[slot].store(pid, Ordering::Release);
}

/// A parked process is read again at every this many readings ([`cpu_ns`]).
pub const PARKED_REREAD_EVERY: u32 = 64;

/// Readings of the guest CPU clock by this image ([`cpu_ns`]), and the process CPU clocks
/// they read (system calls): what parking saves.
static CPU_CLOCK_READINGS: AtomicU64 = AtomicU64::new(0);
static CPU_CLOCK_READS: AtomicU64 = AtomicU64::new(0);

/// `pid` (counted) is stopped under the program's ptrace (the interposed `waitpid` saw it
/// stop): read it once more and keep that reading until it is resumed
/// ([`unpark_cpu_pid`]). Nothing for a process not counted or gone.
pub fn park_cpu_pid(pid: u32) {
    if let Some(ns) = process_cpu_ns(pid) {
        park_cpu_pid_at(pid, ns);
    }
}

/// [`park_cpu_pid`] with its CPU time known already (the interposed `waitpid` has it from
/// the wait's resource usage, to the microsecond, without a read of its own).
pub fn park_cpu_pid_at(pid: u32, ns: u64) {
    let d = dom();
    let Some(i) = d.cpu_pids.iter().position(|p| p.load(Ordering::Acquire) == pid) else {
        return;
    };
    d.cpu_seen_ns[i].fetch_max(ns, Ordering::AcqRel);
    d.cpu_skips[i].store(0, Ordering::Release);
    d.cpu_parked[i].store(1, Ordering::Release);
}

/// The kept CPU time of `pid` when it is parked (tests and records).
pub fn parked_cpu_ns(pid: u32) -> Option<u64> {
    let d = dom();
    let i = d.cpu_pids.iter().position(|p| p.load(Ordering::Acquire) == pid)?;
    (d.cpu_parked[i].load(Ordering::Acquire) != 0).then(|| d.cpu_seen_ns[i].load(Ordering::Acquire))
}

/// Process CPU clocks read so far by this image.
pub fn cpu_clock_reads() -> u64 {
    CPU_CLOCK_READS.load(Ordering::Relaxed)
}

/// A process's CPU clock read now (tests).
pub fn read_process_cpu_ns(pid: u32) -> Option<u64> {
    read_cpu_clock(pid)
}

/// `pid` may run again (the interposed `ptrace` resumes it, or `waitpid` waits for it):
/// each reading reads it again.
pub fn unpark_cpu_pid(pid: u32) {
    let d = dom();
    for (i, p) in d.cpu_pids.iter().enumerate() {
        if p.load(Ordering::Acquire) == pid {
            d.cpu_parked[i].store(0, Ordering::Release);
        }
    }
}

/// Counts `pid`'s CPU time in the guest CPU clock unless it is counted already (see the
/// interposed `waitpid`, crate::clone). Nothing when the table is full.
pub fn count_cpu_pid(pid: u32) {
    let d = dom();
    if d.cpu_pids.iter().any(|p| p.load(Ordering::Acquire) == pid) {
        return;
    }
    add_cpu_pid(pid);
}

/// Whether the clock's base is the guest CPU clock.
pub fn cpu_base() -> bool {
    CPU_BASE.load(Ordering::Relaxed)
}

/// `--cpu-speed X` (the contract's `SMARTCON_PRELOAD_CPU_SPEED`): the program's CPU is X
/// times the host's, so its virtual clock moves by 1/X of the real time it runs (the
/// seed's faster-CPU study). Jumps are not scaled: an idle wait still ends at its virtual
/// instant.
pub const ENV_CPU_SPEED: &str = smartcon_preload_contract::env::CPU_SPEED;
/// The speed in millionths (1_000_000: the host's own).
static SPEED_PPM: AtomicU64 = AtomicU64::new(1_000_000);
/// The speeds accepted: 1/1000 to 1000 times the host's.
const SPEED_PPM_MIN: u64 = 1_000;
const SPEED_PPM_MAX: u64 = 1_000_000_000;

/// A speed factor's text in millionths, None when it is not a number in range.
fn speed_ppm(text: &str) -> Option<u64> {
    let x: f64 = text.trim().parse().ok()?;
    let ppm = (x * 1e6).round();
    (ppm.is_finite() && (SPEED_PPM_MIN as f64..=SPEED_PPM_MAX as f64).contains(&ppm)).then_some(ppm as u64)
}

/// Real ns as the program's CPU lives them (divided by the speed).
#[inline]
fn scaled(real_ns: u64) -> u64 {
    let ppm = SPEED_PPM.load(Ordering::Relaxed);
    if ppm == 1_000_000 {
        return real_ns;
    }
    (real_ns as u128 * 1_000_000 / ppm as u128) as u64
}

/// The real ns a stretch of `virtual_ns` takes while the program runs (times the speed):
/// how far ahead a real timer for a virtual instant is armed.
#[inline]
pub fn real_for(virtual_ns: u64) -> u64 {
    let ppm = SPEED_PPM.load(Ordering::Relaxed);
    if ppm == 1_000_000 {
        return virtual_ns;
    }
    (virtual_ns as u128 * ppm as u128 / 1_000_000).min(u64::MAX as u128) as u64
}

#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The real value of `clock` in ns (the next clock_gettime after this library, i.e. libc's
/// vDSO path; the raw system call where there is none).
pub fn real_ns(clock: clockid_t) -> u64 {
    let mut ts = timespec { tv_sec: 0, tv_nsec: 0 };
    real_gettime(clock, &mut ts);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub(crate) fn real_gettime(clock: clockid_t, ts: *mut timespec) -> c_int {
    type F = unsafe extern "C" fn(clockid_t, *mut timespec) -> c_int;
    // SAFETY: (fallback) the kernel validates the pointer (EFAULT).
    call_real!(CLOCK_GETTIME, F, unsafe { libc::syscall(libc::SYS_clock_gettime, clock, ts) as c_int }, clock, ts)
}

/// The virtual monotonic instant now, without recording it as seen.
pub fn peek_ns() -> u64 {
    let d = dom();
    let v = capped(d, (scaled(base_ns()) as i64 + d.skew_ns.load(Ordering::Acquire)).max(0) as u64);
    v.max(d.last_ns.load(Ordering::Acquire))
}

/// A cap held longer than this in real time no longer holds the clock: a guard, so that a
/// request whose hand-back never comes cannot stop the program's clock, and with it the
/// timers it waits for, for good. (Added when the nineteenth session's CI hang looked like
/// a cap nobody released; that hang was the guest's timer interrupt reading the real clock
/// inside the library, found in the twenty-third session: `emu::SignalsHeld`.) A request
/// at 100 x is held 25-44 us on average;
/// a helper that is tens of milliseconds late must still be held (the test
/// `a_helpers_request_holds_the_clock_at_its_instant_until_the_helper_hands_it_back`: 30 ms),
/// so the bound is a quarter second.
pub const CAP_HOLD_MAX_NS: u64 = 250_000_000;

/// `v` held at the cap, when one is set ([`set_cap`]) and not older than [`CAP_HOLD_MAX_NS`].
#[inline]
fn capped(d: &Domain, v: u64) -> u64 {
    match d.cap_ns.load(Ordering::Acquire) {
        0 => v,
        cap => {
            let held = real_ns(libc::CLOCK_MONOTONIC).saturating_sub(d.cap_set_real_ns.load(Ordering::Acquire));
            if held > CAP_HOLD_MAX_NS {
                if d.cap_expired.swap(1, Ordering::AcqRel) == 0 {
                    CAPS_EXPIRED.fetch_add(1, Ordering::Relaxed);
                }
                v
            } else {
                v.min(cap)
            }
        }
    }
}

/// The virtual monotonic instant now, as the program sees it (it never goes back), and
/// the real monotonic instant it was computed from.
pub fn observe_ns() -> (u64, u64) {
    let d = dom();
    let base = base_ns();
    let real = real_ns(libc::CLOCK_MONOTONIC);
    let v = capped(d, (scaled(base) as i64 + d.skew_ns.load(Ordering::Acquire)).max(0) as u64);
    let last = d.last_ns.fetch_max(v, Ordering::AcqRel);
    (v.max(last), real)
}

fn monotonic_family(clock: clockid_t) -> bool {
    matches!(
        clock,
        libc::CLOCK_MONOTONIC
            | libc::CLOCK_MONOTONIC_RAW
            | libc::CLOCK_MONOTONIC_COARSE
            | libc::CLOCK_BOOTTIME
            | libc::CLOCK_BOOTTIME_ALARM
    )
}

pub(crate) fn virtualized(clock: clockid_t) -> bool {
    monotonic_family(clock)
        || matches!(clock, libc::CLOCK_REALTIME | libc::CLOCK_REALTIME_COARSE | libc::CLOCK_REALTIME_ALARM)
}

pub(crate) fn to_ts(ns: u64) -> timespec {
    timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long }
}

/// `clock` now in virtual ns: the real value moved by the skew the monotonic clock has now.
pub fn clock_ns(clock: clockid_t) -> u64 {
    let (v, real) = observe_ns();
    if clock == libc::CLOCK_MONOTONIC {
        return v;
    }
    (real_ns(clock) as i64 + (v as i64 - real as i64)).max(0) as u64
}

/// Converts an absolute deadline on `clock` (virtual) to the virtual monotonic instant.
pub fn deadline_on(clock: clockid_t, abs_ns: u64) -> u64 {
    let now_clock = clock_ns(clock);
    let (now, _) = observe_ns();
    now.saturating_add(abs_ns.saturating_sub(now_clock))
}

/// Fields 3 (state) and 20 (number of threads) of a /proc stat file, read with raw system
/// calls so nothing interposed runs; None when the file is gone (the task exited).
fn proc_stat(path: &std::ffi::CStr) -> Option<(u8, u32)> {
    let mut buf = [0u8; 1024];
    // SAFETY: a NUL-terminated path; the descriptor is closed below on every path.
    let fd = unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), libc::O_RDONLY) } as c_int;
    if fd < 0 {
        return None;
    }
    // SAFETY: buf is valid for its length.
    let n = unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) };
    // SAFETY: our own descriptor.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    if n <= 0 {
        return None;
    }
    let text = &buf[..n as usize];
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let close = text.iter().rposition(|&b| b == b')')?;
    let mut fields = std::str::from_utf8(&text[close + 1..]).ok()?.split_ascii_whitespace();
    let state = fields.next()?.bytes().next()?;
    let threads = fields.nth(16)?.parse().ok()?;
    Some((state, threads))
}

/// `/proc/PID/stat` or `/proc/PID/task/TID/stat`, NUL-terminated, built on the stack (no
/// allocation: this runs inside interposed calls, possibly in a signal handler).
struct StatPath([u8; 64]);

impl StatPath {
    fn new(pid: u32, tid: Option<u32>) -> StatPath {
        let mut buf = [0u8; 64];
        let mut len = 0;
        let mut put = |bytes: &[u8]| {
            buf[len..len + bytes.len()].copy_from_slice(bytes);
            len += bytes.len();
        };
        let digits = |mut v: u32| {
            let mut tmp = [0u8; 10];
            let mut i = tmp.len();
            loop {
                i -= 1;
                tmp[i] = b'0' + (v % 10) as u8;
                v /= 10;
                if v == 0 {
                    break;
                }
            }
            let mut out = [0u8; 10];
            let n = tmp.len() - i;
            out[..n].copy_from_slice(&tmp[i..]);
            (out, n)
        };
        let (p, pn) = digits(pid);
        put(b"/proc/");
        put(&p[..pn]);
        if let Some(t) = tid {
            let (t, tn) = digits(t);
            put(b"/task/");
            put(&t[..tn]);
        }
        put(b"/stat");
        StatPath(buf)
    }

    fn as_cstr(&self) -> &std::ffi::CStr {
        std::ffi::CStr::from_bytes_until_nul(&self.0).unwrap_or(c"/proc/self/stat")
    }
}

/// The number of threads of this process.
#[cfg(test)]
fn thread_count() -> u32 {
    proc_stat(c"/proc/self/stat").map_or(u32::MAX, |s| s.1)
}

/// The threads of the domain's live processes; a process that has exited (gone, or a
/// zombie) leaves the domain with its registered waits.
fn domain_threads(d: &Domain) -> u64 {
    let me = getpid();
    let mut total = 0u64;
    for p in &d.pids {
        let pid = p.load(Ordering::Relaxed);
        if pid == 0 {
            continue;
        }
        match proc_stat(StatPath::new(pid, None).as_cstr()) {
            Some((state, threads)) if state != b'Z' && state != b'X' => total += threads as u64,
            // This process runs: /proc is not readable (not mounted, no permission), so no
            // count can be trusted and the clock must not jump.
            _ if pid == me => return u64::MAX,
            _ => {
                let Some(_lock) = DomainLock::take() else { continue };
                if p.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                    for s in &d.slots {
                        // Only a published wait of the dead process: its id cannot change
                        // under us (only its owner drops it), and its pid was written first.
                        let id = s.id.load(Ordering::Acquire);
                        if id != 0 && id != FILLING && s.pid.load(Ordering::Relaxed) == pid {
                            let _ = s.id.compare_exchange(id, 0, Ordering::AcqRel, Ordering::Relaxed);
                        }
                    }
                    d.generation.fetch_add(1, Ordering::AcqRel);
                }
            }
        }
    }
    total
}

pub fn futex_wait(word: &AtomicU32, seen: u32, timeout_ns: u64) {
    let ts = to_ts(timeout_ns);
    // SAFETY: a live, aligned u32 (in the shared page: a shared futex, so no PRIVATE flag);
    // the timeout is a valid relative timespec.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, seen, &ts);
    }
}

fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: as in futex_wait.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

/// The longest real-time wait before a waiter looks at the domain again (a thread that
/// exits, or starts waiting where nothing wakes the others, does not wake them).
pub const RECHECK_NS: u64 = 1_000_000;

/// A wait registered in the domain: its thread counts as idle while it lasts (an event
/// wait only while the kernel has the thread asleep). Dropping it deregisters.
pub struct Registration {
    index: usize,
    id: u64,
    pub target_ns: u64,
}

impl Registration {
    /// The futex word a jump that reaches this wait's target bumps.
    pub fn wake_word(&self) -> &'static AtomicU32 {
        &dom().slots[self.index].wake
    }
}

/// The futex word every jump bumps (what an unregistered waiter sleeps on).
pub fn epoch_word() -> &'static AtomicU32 {
    &dom().epoch
}

impl Drop for Registration {
    fn drop(&mut self) {
        let d = dom();
        if d.slots[self.index].id.compare_exchange(self.id, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            d.generation.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// A slot being filled in: a snapshot that sees it does not jump.
const FILLING: u64 = u64::MAX;

/// Registers the calling thread as waiting until `target_ns` (virtual monotonic, or
/// [`NO_TARGET`]), `event` when something else than the clock can end the wait. None when
/// the table is full (the thread then counts as running). Lock-free: a slot is claimed
/// with FILLING, filled, then published with its id.
pub fn register(target_ns: u64, event: bool) -> Option<Registration> {
    register_with_signal(target_ns, event, 0)
}

/// [`register`], with `signal` sent to the thread by a jump that reaches `target_ns`.
pub fn register_with_signal(target_ns: u64, event: bool, signal: c_int) -> Option<Registration> {
    let d = dom();
    let id = d.next_id.fetch_add(1, Ordering::Relaxed);
    let index =
        d.slots.iter().position(|s| s.id.compare_exchange(0, FILLING, Ordering::AcqRel, Ordering::Relaxed).is_ok())?;
    let s = &d.slots[index];
    s.pid.store(getpid(), Ordering::Relaxed);
    s.tid.store(gettid(), Ordering::Relaxed);
    s.target_ns.store(target_ns, Ordering::Relaxed);
    s.event.store(event as u32, Ordering::Relaxed);
    s.signal.store(signal as u32, Ordering::Relaxed);
    s.id.store(id, Ordering::Release);
    d.generation.fetch_add(1, Ordering::AcqRel);
    Some(Registration { index, id, target_ns })
}

/// The idle-skipping step: when every thread of every process of the domain waits in a
/// registered wait that has not come due (an event waiter: and the kernel has it asleep,
/// so a wake-up already delivered keeps the clock still), moves the clock to the earliest
/// target and wakes the clock waiters. Returns the virtual instant after it.
///
/// The look at the waits and at /proc is taken without the lock (it costs system calls);
/// the jump itself is made under the lock, and only if no wait registered or left and no
/// other jump happened since the look.
pub fn jump_if_idle() -> u64 {
    let d = dom();
    let generation = d.generation.load(Ordering::Acquire);
    let now = peek_ns();
    if d.overflow.load(Ordering::Relaxed) != 0 {
        return now;
    }
    let (me_pid, me_tid) = (getpid(), gettid());
    let mut idle = 0u64;
    let mut seen = [(0u32, 0u32); DOMAIN_WAITS_MAX];
    let mut seen_count = 0;
    let mut earliest = NO_TARGET;
    let mut events = [(0u32, 0u32); DOMAIN_WAITS_MAX];
    let mut events_count = 0;
    for s in &d.slots {
        let id = s.id.load(Ordering::Acquire);
        if id == 0 {
            continue;
        }
        if id == FILLING {
            return now;
        }
        let target = s.target_ns.load(Ordering::Relaxed);
        if target <= now {
            // Due: the thread is running (or about to).
            return now;
        }
        let (pid, tid) = (s.pid.load(Ordering::Relaxed), s.tid.load(Ordering::Relaxed));
        // The calling thread is about to wait (it runs this very check).
        if s.event.load(Ordering::Relaxed) != 0 && (pid, tid) != (me_pid, me_tid) && events_count < events.len() {
            events[events_count] = (pid, tid);
            events_count += 1;
        }
        // A thread counts once (a signal handler may wait while the code it interrupted
        // is registered too).
        if !seen[..seen_count].contains(&(pid, tid)) {
            if seen_count == seen.len() {
                return now;
            }
            seen[seen_count] = (pid, tid);
            seen_count += 1;
            idle += 1;
        }
        earliest = earliest.min(target);
    }
    if earliest == NO_TARGET {
        return now;
    }
    // Fewer waits than the threads counted less than RECHECK_NS ago: not idle, without a
    // look at /proc (a thread that exited since keeps the clock still that long at most).
    let counted_at_ns = d.threads_counted_at_ns.load(Ordering::Acquire);
    if idle < d.threads_counted.load(Ordering::Acquire)
        && real_ns(libc::CLOCK_MONOTONIC) < counted_at_ns.saturating_add(RECHECK_NS)
    {
        return now;
    }
    // Every wait an event can end: its thread must be asleep (not woken already).
    for &(pid, tid) in &events[..events_count] {
        if !matches!(proc_stat(StatPath::new(pid, Some(tid)).as_cstr()), Some((b'S', _))) {
            return now;
        }
    }
    let threads = domain_threads(d);
    d.threads_counted.store(threads, Ordering::Release);
    d.threads_counted_at_ns.store(real_ns(libc::CLOCK_MONOTONIC), Ordering::Release);
    if idle < threads {
        return now;
    }
    let Some(_lock) = DomainLock::take() else { return now };
    if d.generation.load(Ordering::Acquire) != generation {
        return peek_ns();
    }
    let now = peek_ns();
    let to = earliest.max(d.last_ns.load(Ordering::Acquire));
    if to <= now {
        return now;
    }
    let base = base_ns();
    let old_skew = d.skew_ns.load(Ordering::Acquire);
    let new_skew = to as i64 - scaled(base) as i64;
    JUMPED_NS.fetch_add(to - now, Ordering::Relaxed);
    JUMPS.fetch_add(1, Ordering::Relaxed);
    SKEW_MADE_NS.fetch_add(new_skew - old_skew, Ordering::Relaxed);
    d.skew_ns.store(new_skew, Ordering::Release);
    d.jumped_to_ns.store(to, Ordering::Release);
    d.last_ns.fetch_max(to, Ordering::AcqRel);
    d.generation.fetch_add(1, Ordering::AcqRel);
    d.epoch.fetch_add(1, Ordering::Release);
    for s in &d.slots {
        let id = s.id.load(Ordering::Acquire);
        if id != 0 && id != FILLING && s.target_ns.load(Ordering::Relaxed) <= to {
            s.wake.fetch_add(1, Ordering::Release);
            let signal = s.signal.load(Ordering::Relaxed);
            if signal != 0 {
                // SAFETY: a signal the waiter installed a handler for, to its own thread.
                unsafe {
                    libc::syscall(
                        libc::SYS_tgkill,
                        s.pid.load(Ordering::Relaxed),
                        s.tid.load(Ordering::Relaxed),
                        signal as c_int,
                    )
                };
            }
            futex_wake_all(&s.wake);
        }
    }
    to
}

/// A wait that a jump to its own target ended: the real time since the jump, spent
/// waking this thread (a futex wake and a context switch, 20 us to a few ms on a loaded
/// host), is the emulator's, not the program's. Every other thread of the domain was idle
/// when the clock jumped, so unless some thread has read the clock past `target_ns`
/// since, the clock is set back to `target_ns` now (the program sees the completion at
/// the model's instant; the seed pauses the OS while its emulator works). Returns the
/// real ns hidden.
pub fn settle_after_jump(target_ns: u64) -> u64 {
    let d = dom();
    if d.jumped_to_ns.load(Ordering::Acquire) != target_ns || d.last_ns.load(Ordering::Acquire) > target_ns {
        return 0;
    }
    let Some(_lock) = DomainLock::take() else { return 0 };
    if d.jumped_to_ns.load(Ordering::Acquire) != target_ns || d.last_ns.load(Ordering::Acquire) > target_ns {
        return 0;
    }
    let base = base_ns();
    let old_skew = d.skew_ns.load(Ordering::Acquire);
    let now = scaled(base) as i64 + old_skew;
    if now <= target_ns as i64 {
        return 0;
    }
    let hidden = (now - target_ns as i64) as u64;
    d.skew_ns.store(target_ns as i64 - scaled(base) as i64, Ordering::Release);
    SKEW_MADE_NS.fetch_sub(hidden as i64, Ordering::Relaxed);
    WAKE_HIDDEN_NS.fetch_add(hidden, Ordering::Relaxed);
    WAKES_SETTLED.fetch_add(1, Ordering::Relaxed);
    hidden
}

/// When every other thread of the domain waits in a registered wait (by the thread count of
/// the last idle check), the domain's generation, which any registration or jump bumps:
/// [`hold_at`] may then hide what this thread does until the generation moves (nobody else
/// ran meanwhile). None when some thread may be running, or nothing was counted yet.
pub fn others_idle() -> Option<u64> {
    let d = dom();
    let generation = d.generation.load(Ordering::Acquire);
    let threads = d.threads_counted.load(Ordering::Acquire);
    if threads == 0 || threads == u64::MAX || d.overflow.load(Ordering::Relaxed) != 0 {
        return None;
    }
    let me = (getpid(), gettid());
    let mut seen = [(0u32, 0u32); DOMAIN_WAITS_MAX];
    let mut count = 0usize;
    for s in &d.slots {
        let id = s.id.load(Ordering::Acquire);
        if id == 0 {
            continue;
        }
        if id == FILLING {
            return None;
        }
        let who = (s.pid.load(Ordering::Relaxed), s.tid.load(Ordering::Relaxed));
        if who != me && !seen[..count].contains(&who) {
            seen[count] = who;
            count += 1;
        }
    }
    (count as u64 + 1 >= threads && d.generation.load(Ordering::Acquire) == generation).then_some(generation)
}

/// Whether the domain's generation is still `generation` (see [`others_idle`]).
pub fn unchanged_since(generation: u64) -> bool {
    dom().generation.load(Ordering::Acquire) == generation
}

/// A served request's data half (the real call on the image) ran past the model's
/// completion `until_ns`: the clock is held back to `until_ns`, or to the latest instant
/// some thread has read since (it never goes back), so the program does not see the
/// emulator's own work (one program's clock held back; the seed pauses a whole OS's state).
/// Returns the real ns hidden.
pub fn hold_at(until_ns: u64) -> u64 {
    let d = dom();
    let Some(_lock) = DomainLock::take() else { return 0 };
    let base = base_ns();
    let old_skew = d.skew_ns.load(Ordering::Acquire);
    let now = scaled(base) as i64 + old_skew;
    let to = until_ns.max(d.last_ns.load(Ordering::Acquire)) as i64;
    if now <= to {
        return 0;
    }
    let hidden = (now - to) as u64;
    d.skew_ns.store(to - scaled(base) as i64, Ordering::Release);
    SKEW_MADE_NS.fetch_sub(hidden as i64, Ordering::Relaxed);
    hidden
}

/// A helper's request will complete at `complete_ns` on the model and is not handed back
/// to the program yet (UML's ubd thread has issued its pieces and returns it when it next
/// writes to the kernel): until [`release_cap`], the clock does not read past that
/// instant, whoever runs meanwhile. This is the seed's pause of the OS while its emulator
/// works, on the clock: on a host where the guest and the helper share one CPU, the
/// helper's wake-up at the instant comes tens of microseconds after it (the guest task it
/// preempts runs on meanwhile), while the model gives a request at 100 x about 60 us.
/// What the guest runs past the instant before the pause ([`pause_at_cap`]) or the
/// release is not on its clock; [`release_cap`] returns it.
pub fn set_cap(complete_ns: u64) {
    let d = dom();
    d.cap_set_real_ns.store(real_ns(libc::CLOCK_MONOTONIC), Ordering::Release);
    d.cap_expired.store(0, Ordering::Release);
    d.cap_ns.store(complete_ns.max(1), Ordering::Release);
}

/// The clock without the cap (what it would read if no completion held it).
fn uncapped_ns(d: &Domain) -> u64 {
    let v = (scaled(base_ns()) as i64 + d.skew_ns.load(Ordering::Acquire)).max(0) as u64;
    v.max(d.last_ns.load(Ordering::Acquire))
}

/// The clock without the cap, as [`peek_ns`] would read it without one.
pub fn peek_uncapped_ns() -> u64 {
    uncapped_ns(dom())
}

/// The helper has handed its request back (after its wait for `complete_ns`): the cap
/// goes, the clock goes on from the instant (or the latest one read since: it never goes
/// back), and a thread paused at the cap runs on. Returns the time the program ran past
/// the instant while the cap held, which its clock does not count.
pub fn release_cap(complete_ns: u64) -> u64 {
    let d = dom();
    if d.cap_ns.load(Ordering::Acquire) == 0 {
        return 0;
    }
    let hidden = {
        let _lock = DomainLock::take();
        let base = base_ns();
        let old_skew = d.skew_ns.load(Ordering::Acquire);
        let now = scaled(base) as i64 + old_skew;
        let to = complete_ns.max(d.last_ns.load(Ordering::Acquire)) as i64;
        let hidden = if now > to {
            d.skew_ns.store(to - scaled(base) as i64, Ordering::Release);
            SKEW_MADE_NS.fetch_sub(now - to, Ordering::Relaxed);
            (now - to) as u64
        } else {
            0
        };
        d.cap_ns.store(0, Ordering::Release);
        CAP_HELD_MAX_NS.fetch_max(
            real_ns(libc::CLOCK_MONOTONIC).saturating_sub(d.cap_set_real_ns.load(Ordering::Acquire)),
            Ordering::Relaxed,
        );
        hidden
    };
    if hidden > 0 {
        CAPPED.fetch_add(1, Ordering::Relaxed);
        CAPPED_NS.fetch_add(hidden, Ordering::Relaxed);
    }
    hidden
}

/// Resumes the threads paused at the cap ([`pause_at_cap`]): the helper has handed the
/// request back (the clock was released before, [`release_cap`]; what the paused threads
/// then do is after the completion).
pub fn resume_paused() {
    let d = dom();
    d.cap_word.fetch_add(1, Ordering::Release);
    futex_wake_all(&d.cap_word);
}

/// The longest a thread stays paused at the cap (real ns): a helper that does not
/// release it (it died) does not stop the program for good.
pub const PAUSE_MAX_NS: u64 = 5_000_000;

/// Called by the program's threads at points where stopping is safe (UML's kernel thread
/// after each `waitpid` on a guest process, which is then stopped): when the clock has
/// run up to a held completion, the caller stops until the helper hands it back, so the
/// guest does not run on past the instant in real time (the seed pauses the OS). The
/// waiting helper is woken first. Nothing for the helper itself or without a cap.
pub fn pause_at_cap() {
    let d = dom();
    let cap = d.cap_ns.load(Ordering::Acquire);
    if cap == 0 || crate::helper::current().is_some() || uncapped_ns(d) < cap {
        return;
    }
    let seen = d.cap_word.load(Ordering::Acquire);
    if d.cap_ns.load(Ordering::Acquire) == 0 {
        return;
    }
    for s in &d.slots {
        let id = s.id.load(Ordering::Acquire);
        if id != 0
            && id != FILLING
            && s.signal.load(Ordering::Relaxed) == 0
            && s.target_ns.load(Ordering::Relaxed) <= cap
        {
            s.wake.fetch_add(1, Ordering::Release);
            futex_wake_all(&s.wake);
        }
    }
    PAUSES.fetch_add(1, Ordering::Relaxed);
    let start = real_ns(libc::CLOCK_MONOTONIC);
    loop {
        let waited = real_ns(libc::CLOCK_MONOTONIC).saturating_sub(start);
        if d.cap_word.load(Ordering::Acquire) != seen {
            break;
        }
        if waited >= PAUSE_MAX_NS {
            PAUSES_TIMED_OUT.fetch_add(1, Ordering::Relaxed);
            break;
        }
        futex_wait(&d.cap_word, seen, PAUSE_MAX_NS - waited);
    }
    PAUSED_NS.fetch_add(real_ns(libc::CLOCK_MONOTONIC).saturating_sub(start), Ordering::Relaxed);
}

/// What the exit record says about the clock.
pub struct ClockStats {
    pub skew_ns: i64,
    pub jumped_ns: u64,
    pub jumps: u64,
    pub wake_hidden_ns: u64,
    pub wakes_settled: u64,
    pub capped: u64,
    pub capped_ns: u64,
    pub pauses: u64,
    pub paused_ns: u64,
    pub cpu_clock_readings: u64,
    pub cpu_clock_reads: u64,
    pub cpu_clock_fast_reads: u64,
    pub cpu_clock_carried_waits: u64,
    pub caps_expired: u64,
    pub cap_held_max_ns: u64,
    pub pauses_timed_out: u64,
}

pub fn stats() -> ClockStats {
    ClockStats {
        skew_ns: SKEW_MADE_NS.load(Ordering::Relaxed),
        jumped_ns: JUMPED_NS.load(Ordering::Relaxed),
        jumps: JUMPS.load(Ordering::Relaxed),
        wake_hidden_ns: WAKE_HIDDEN_NS.load(Ordering::Relaxed),
        wakes_settled: WAKES_SETTLED.load(Ordering::Relaxed),
        capped: CAPPED.load(Ordering::Relaxed),
        capped_ns: CAPPED_NS.load(Ordering::Relaxed),
        pauses: PAUSES.load(Ordering::Relaxed),
        paused_ns: PAUSED_NS.load(Ordering::Relaxed),
        cpu_clock_readings: CPU_CLOCK_READINGS.load(Ordering::Relaxed),
        cpu_clock_reads: CPU_CLOCK_READS.load(Ordering::Relaxed),
        cpu_clock_fast_reads: ownclock::fast_reads(),
        cpu_clock_carried_waits: ownclock::carries().0,
        caps_expired: CAPS_EXPIRED.load(Ordering::Relaxed),
        cap_held_max_ns: CAP_HELD_MAX_NS.load(Ordering::Relaxed),
        pauses_timed_out: PAUSES_TIMED_OUT.load(Ordering::Relaxed),
    }
}

pub fn fork_prepare() {}

pub fn fork_parent() {}

/// A clone helper (crate::helper) joins its creator's domain: its thread is counted, so
/// the clock does not jump while it runs. The domain page is already shared with it (the
/// helper shares all memory).
pub fn join_domain() {
    if !on() {
        return;
    }
    let d = dom();
    let me = getpid();
    let _lock = DomainLock::take();
    if d.pids.iter().any(|p| p.load(Ordering::Relaxed) == me) {
        return;
    }
    match d.pids.iter().find(|p| p.load(Ordering::Relaxed) == 0) {
        Some(p) => p.store(me, Ordering::Relaxed),
        None => d.overflow.store(1, Ordering::Relaxed),
    }
    d.generation.fetch_add(1, Ordering::AcqRel);
}

/// A forked child joins its parent's domain (same clock, its threads counted too).
pub fn fork_child() {
    SKEW_MADE_NS.store(0, Ordering::Relaxed);
    JUMPED_NS.store(0, Ordering::Relaxed);
    JUMPS.store(0, Ordering::Relaxed);
    WAKE_HIDDEN_NS.store(0, Ordering::Relaxed);
    WAKES_SETTLED.store(0, Ordering::Relaxed);
    for c in [
        &CAPPED,
        &CAPPED_NS,
        &PAUSES,
        &PAUSED_NS,
        &CPU_CLOCK_READINGS,
        &CPU_CLOCK_READS,
        &CAPS_EXPIRED,
        &CAP_HELD_MAX_NS,
        &PAUSES_TIMED_OUT,
    ] {
        c.store(0, Ordering::Relaxed);
    }
    ownclock::release();
    ownclock::reset_counts();
    if !on() {
        return;
    }
    let d = dom();
    let me = getpid();
    if SHARED.load(Ordering::Acquire).is_null() {
        // The process-local domain was copied: another thread of the parent may have held
        // its lock, and the parent's waits are not in this process.
        d.lock.store(0, Ordering::Relaxed);
        for s in &d.slots {
            s.id.store(0, Ordering::Relaxed);
        }
        for p in &d.pids {
            p.store(0, Ordering::Relaxed);
        }
    }
    let _lock = DomainLock::take();
    match d.pids.iter().find(|p| p.load(Ordering::Relaxed) == 0) {
        Some(p) => p.store(me, Ordering::Relaxed),
        None => d.overflow.store(1, Ordering::Relaxed),
    }
    if cpu_base() {
        add_cpu_pid(me);
        // The forking thread is the child's only one.
        ownclock::claim(me);
    }
}

/// A timespec in ns (a relative duration, or an absolute instant on some clock), or None
/// when it is NULL or invalid (the real call then returns EINVAL).
///
/// # Safety
/// `ts` must be NULL or valid for reads.
pub(crate) unsafe fn timespec_ns(ts: *const timespec) -> Option<u64> {
    if ts.is_null() {
        return None;
    }
    // SAFETY: non-NULL; caller promise.
    let ts = unsafe { *ts };
    if ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) {
        return None;
    }
    Some((ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_thread_count() {
        let n = thread_count();
        assert!((1..10_000).contains(&n), "{n}");
    }

    #[test]
    fn stat_paths_are_built_without_allocating() {
        assert_eq!(StatPath::new(42, None).as_cstr(), c"/proc/42/stat");
        assert_eq!(StatPath::new(4_294_967_295, Some(7)).as_cstr(), c"/proc/4294967295/task/7/stat");
    }

    #[test]
    fn cpu_speeds_parse_in_range_and_scale_both_ways() {
        assert_eq!(speed_ppm("2"), Some(2_000_000));
        assert_eq!(speed_ppm("0.5"), Some(500_000));
        assert_eq!(speed_ppm("0"), None);
        assert_eq!(speed_ppm("1e9"), None);
        assert_eq!(speed_ppm("fast"), None);
        // The default (the host's speed) leaves every instant as it is.
        assert_eq!(scaled(123_456_789), 123_456_789);
        assert_eq!(real_for(987), 987);
    }

    /// The tests that read process CPU clocks (and count the reads) one at a time.
    pub(crate) static CPU_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn a_stopped_tracee_is_not_read_again_until_it_is_resumed() {
        let _one = CPU_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the child only makes system calls and spins before _exit.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            // SAFETY: plain system calls in the child; it never returns into the test.
            unsafe {
                libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
                libc::raise(libc::SIGSTOP);
                let mut x = 0u64;
                for i in 0..50_000_000u64 {
                    x = std::hint::black_box(x.wrapping_add(i));
                }
                libc::raise(libc::SIGSTOP);
                libc::_exit((x & 1) as i32);
            }
        }
        let wait_stop = || {
            let mut status = 0;
            // SAFETY: a valid status pointer; the child is ours.
            assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
            assert!(libc::WIFSTOPPED(status), "stopped: {status:#x}");
        };
        wait_stop();
        let d = dom();
        let pid = child as u32;
        add_cpu_pid(pid);
        let slot = d.cpu_pids.iter().position(|p| p.load(Ordering::Acquire) == pid).expect("a slot");
        // Not parked: every reading reads it (a first reading retires what other tests
        // left).
        cpu_ns(d);
        let reads = CPU_CLOCK_READS.load(Ordering::Relaxed);
        cpu_ns(d);
        cpu_ns(d);
        assert_eq!(CPU_CLOCK_READS.load(Ordering::Relaxed) - reads, 2);
        // Parked: read once now, then not again (fewer readings than the re-read period).
        park_cpu_pid(pid);
        let kept = d.cpu_seen_ns[slot].load(Ordering::Acquire);
        assert_eq!(kept, process_cpu_ns(pid).expect("stopped child"));
        let reads = CPU_CLOCK_READS.load(Ordering::Relaxed);
        let base = cpu_ns(d);
        for _ in 1..PARKED_REREAD_EVERY - 1 {
            assert_eq!(cpu_ns(d), base, "a parked process's CPU time stays put");
        }
        assert_eq!(CPU_CLOCK_READS.load(Ordering::Relaxed) - reads, 0, "no reads while parked");
        // The period's last reading reads it again (a process resumed unseen is not lost).
        cpu_ns(d);
        assert_eq!(CPU_CLOCK_READS.load(Ordering::Relaxed) - reads, 1);
        // Resumed: its CPU time moves the clock again.
        unpark_cpu_pid(pid);
        // SAFETY: the child is our stopped tracee.
        assert_eq!(unsafe { libc::ptrace(libc::PTRACE_CONT, child, 0, 0) }, 0);
        wait_stop();
        let busy = process_cpu_ns(pid).expect("stopped child");
        assert!(busy > kept, "the child spun between its stops");
        assert!(cpu_ns(d) >= busy, "the resumed child's CPU time is on the clock");
        // SAFETY: our child; reaped below.
        unsafe { libc::kill(child, libc::SIGKILL) };
        // SAFETY: a null status is allowed.
        unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
        cpu_ns(d);
        assert_eq!(d.cpu_pids[slot].load(Ordering::Acquire), 0, "the reaped child's slot is freed");
    }

    #[test]
    fn the_guest_cpu_clock_sums_live_processes_and_keeps_a_gone_ones_last_reading() {
        let _one = CPU_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        // This process's CPU clock by pid is the kernel's process CPU clock.
        let by_pid = process_cpu_ns(getpid()).expect("own CPU clock");
        let own = real_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
        assert!(by_pid > 0 && by_pid <= own, "{by_pid} {own}");
        // A child that burns CPU, counted while it runs, then reaped.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .spawn()
            .expect("sh");
        let d = dom();
        let before = d.cpu_retired_ns.load(Ordering::Acquire);
        add_cpu_pid(child.id());
        let slot = d.cpu_pids.iter().position(|p| p.load(Ordering::Acquire) == child.id()).expect("a slot");
        let mut running = 0;
        while child.try_wait().expect("wait").is_none() {
            running = running.max(cpu_ns(d));
        }
        assert!(running > 0, "the busy child's CPU time was seen");
        let seen = d.cpu_seen_ns[slot].load(Ordering::Acquire);
        // Reaped: the next reading retires it with its last reading, and frees the slot.
        cpu_ns(d);
        assert_eq!(d.cpu_pids[slot].load(Ordering::Acquire), 0);
        assert!(d.cpu_retired_ns.load(Ordering::Acquire) >= before + seen);
        assert!(cpu_ns(d) >= running, "the clock's base keeps what the gone process used");
    }

    #[test]
    fn a_held_completion_stops_the_clock_and_a_thread_that_reaches_it_until_it_is_handed_back() {
        // One test for both: the cap is the process's.
        // This test process's domain (the real clock as its base, no speed factor).
        let d = dom();
        let before = peek_ns();
        let cap = before + 1_000;
        set_cap(cap);
        // The base runs on past the instant; the clock does not.
        while uncapped_ns(d) <= cap + 100_000 {
            std::hint::spin_loop();
        }
        assert_eq!(peek_ns(), cap, "held at the completion");
        assert_eq!(observe_ns().0, cap, "what the program reads is held too");
        let past = uncapped_ns(d) - cap;
        let hidden = release_cap(cap);
        assert!(hidden >= past, "the time run past the instant is off the clock: {hidden} {past}");
        let after = peek_ns();
        assert!(after >= cap && after < cap + hidden, "it goes on from the instant: {after} {cap} {hidden}");
        // Nothing held any more: a second release hides nothing.
        assert_eq!(release_cap(cap), 0);
        assert_eq!(d.cap_ns.load(Ordering::Acquire), 0);

        // A thread that reaches a held completion pauses until the helper hands it back.
        let cap = peek_ns() + 1_000;
        set_cap(cap);
        while uncapped_ns(d) <= cap {
            std::hint::spin_loop();
        }
        let handed_back = std::sync::Arc::new(AtomicBool::new(false));
        let flag = handed_back.clone();
        let paused = std::thread::spawn(move || {
            pause_at_cap();
            // Paused until the hand-back, unless the bound ran out first.
            flag.load(Ordering::Acquire)
        });
        // The pause is counted before the paused thread sleeps.
        let pauses_before = PAUSES.load(Ordering::Relaxed);
        while PAUSES.load(Ordering::Relaxed) == pauses_before && !paused.is_finished() {
            std::hint::spin_loop();
        }
        release_cap(cap);
        handed_back.store(true, Ordering::Release);
        resume_paused();
        let saw = paused.join().expect("the paused thread");
        let waited = PAUSED_NS.load(Ordering::Relaxed);
        assert!(saw || waited >= PAUSE_MAX_NS, "it ran on before the hand-back only at the bound: {waited}");
        // Without a held completion nothing pauses.
        let count = PAUSES.load(Ordering::Relaxed);
        pause_at_cap();
        assert_eq!(PAUSES.load(Ordering::Relaxed), count);

        // A cap nobody releases stops holding the clock after CAP_HOLD_MAX_NS of real time.
        let cap = peek_ns() + 1_000;
        set_cap(cap);
        let start = real_ns(libc::CLOCK_MONOTONIC);
        while uncapped_ns(d) <= cap + 100_000 {
            std::hint::spin_loop();
        }
        if real_ns(libc::CLOCK_MONOTONIC) - start < CAP_HOLD_MAX_NS {
            assert_eq!(peek_ns(), cap, "held within the bound");
        }
        while real_ns(libc::CLOCK_MONOTONIC) - start <= CAP_HOLD_MAX_NS + 1_000_000 {
            std::hint::spin_loop();
        }
        let expired = CAPS_EXPIRED.load(Ordering::Relaxed);
        assert!(peek_ns() > cap + CAP_HOLD_MAX_NS / 2, "past the bound the clock runs on");
        // The expiry is counted once, however often the clock is read past it.
        assert_eq!(CAPS_EXPIRED.load(Ordering::Relaxed), expired + 1);
        peek_ns();
        assert_eq!(CAPS_EXPIRED.load(Ordering::Relaxed), expired + 1);
        release_cap(cap);
        assert!(CAP_HELD_MAX_NS.load(Ordering::Relaxed) > CAP_HOLD_MAX_NS, "the hold's length is kept");
    }

    #[test]
    fn only_wall_clocks_are_virtualized() {
        assert!(virtualized(libc::CLOCK_MONOTONIC_RAW) && virtualized(libc::CLOCK_REALTIME_COARSE));
        assert!(!virtualized(libc::CLOCK_PROCESS_CPUTIME_ID) && !virtualized(libc::CLOCK_THREAD_CPUTIME_ID));
    }
}

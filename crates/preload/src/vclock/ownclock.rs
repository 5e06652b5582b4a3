//! The process's own CPU clock read without a system call, by the one thread that owns it.
//!
//! Under the guest CPU clock (`emulate vm --virtual-time`) UML's kernel thread reads its own
//! process's CPU clock at every reading of the guest clock: 27.6 `clock_gettime` system
//! calls per guest I/O on emu:nvme (docs/vm.md, the twenty-first session), each about
//! 0.8 us of CPU that is itself on the clock. This VM's kernel gives no way to read a CPU
//! clock in user space: a self-monitoring `perf_event` task clock's mmap page has
//! `cap_user_time` 0 (the guest's sched_clock is kvm-clock's, not the TSC) and the kernel
//! does not refresh its times at each schedule-in (docs/vm.md, the twenty-second session).
//!
//! So the reading is extrapolated: the last system-call reading plus the real monotonic
//! time since (the vDSO, tens of ns), which is the thread's CPU time as long as the thread
//! has not left its CPU meanwhile. Whether it has is told by restartable sequences: at
//! every switch away from a task, and at every signal delivered to it, Linux rewrites the
//! `cpu_id_start` field of the task's registered `struct rseq` (glibc registers one per
//! thread) on its way back to user space. The owner writes a value no CPU number has
//! there at each system-call reading; while it is still there, the thread has run without
//! a break since. Any switch (a blocking `wait4`, a preemption, a signal) sends the next
//! reading back to the system call. An extrapolation is also bounded to
//! [`EXTRAPOLATE_MAX_NS`] of real time: the real clock also counts time the hypervisor
//! took the vCPU away (steal time, which the CPU clock leaves out here) and other threads
//! of the process are not seen; a reading a little ahead of the system call's is held by
//! the guest clock's `fetch_max` until the CPU clock passes it (no error accumulates: each
//! system-call reading starts the extrapolation afresh).
//!
//! Across a blocking call the owner brackets ([`block_begin`], [`block_end`]: the
//! interposed `wait4` in which UML's kernel thread waits for its guest process), the
//! reading goes on from the one at the call's entry plus the call's own CPU cost, a mean
//! measured at every [`CARRY_MEASURE_EVERY`]th call, still without a system call.
//!
//! Only the owner thread (the one that called [`claim`]: the constructor's, UML's kernel
//! thread) takes this path, and only for its own process: the thread pointer tells another
//! pthread apart; a `clone(CLONE_VM)` helper shares its creator's thread pointer, so one on
//! a stack of the library's is told apart by its stack (crate::helper), and a helper the
//! library could not give a stack turns the path off for good ([`disable`]).

use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// The longest real time a reading is extrapolated from the last system-call reading.
pub const EXTRAPOLATE_MAX_NS: u64 = 200_000;

/// What the owner writes into `rseq.cpu_id_start`: no CPU number (Linux rewrites it with
/// the CPU's at every switch and signal).
const SENTINEL: u32 = 0xFFFF_FF5C;

/// The owner's process id (0: no owner), thread pointer and `struct rseq` address.
static OWNER_PID: AtomicU32 = AtomicU32::new(0);
static OWNER_TP: AtomicUsize = AtomicUsize::new(0);
static RSEQ: AtomicUsize = AtomicUsize::new(0);
/// Off for good (a helper that cannot be told from the owner exists).
static DISABLED: AtomicBool = AtomicBool::new(false);
/// The owner is inside [`read`] (a signal handler's reading then takes the system call).
static BUSY: AtomicBool = AtomicBool::new(false);
/// The last system-call reading and the real monotonic instant just after it.
static SYNCED: AtomicBool = AtomicBool::new(false);
static SYNC_CPU_NS: AtomicU64 = AtomicU64::new(0);
static SYNC_REAL_NS: AtomicU64 = AtomicU64::new(0);
/// Readings served without a system call.
static FAST_READS: AtomicU64 = AtomicU64::new(0);
/// Bumped at each system-call reading (a carry across a blocking call is dropped when one
/// was made inside it: a signal handler's).
static GEN: AtomicU64 = AtomicU64::new(0);
/// The real instant of the last system-call reading: carries chain from it for at most
/// [`CARRY_CHAIN_MAX_NS`].
static CHAIN_REAL_NS: AtomicU64 = AtomicU64::new(0);
/// The owner's reading at the entry of a blocking call ([`block_begin`]), and the
/// generation then; `BLOCK_ON`: one is open.
static BLOCK_ON: AtomicBool = AtomicBool::new(false);
static BLOCK_CPU_NS: AtomicU64 = AtomicU64::new(0);
static BLOCK_GEN: AtomicU64 = AtomicU64::new(0);
/// The blocking call's own CPU time (entry, switches, return), a running mean of measured
/// ones (0: none measured yet); the blocking calls seen; a measurement pending: the
/// reading at the entry and the real instant at the return.
static BLOCK_COST_NS: AtomicU64 = AtomicU64::new(0);
static BLOCKS: AtomicU64 = AtomicU64::new(0);
static CAL_ON: AtomicBool = AtomicBool::new(false);
static CAL_CPU_NS: AtomicU64 = AtomicU64::new(0);
static CAL_REAL_NS: AtomicU64 = AtomicU64::new(0);
static CAL_GEN: AtomicU64 = AtomicU64::new(0);
/// Blocking calls carried across without a system call.
static CARRIES: AtomicU64 = AtomicU64::new(0);

/// A carry's chain (estimates on estimates) ends at a system-call reading this long (real
/// time) after the last one.
pub const CARRY_CHAIN_MAX_NS: u64 = 500_000;
/// Every this many blocking calls one is measured by the system call after it.
pub const CARRY_MEASURE_EVERY: u64 = 8;
/// A measured cost past this is not a blocking call's own (something else ran): not used.
const BLOCK_COST_MAX_NS: u64 = 50_000;

/// The calling thread's thread pointer (glibc's TCB keeps it at %fs:0 on x86-64).
#[cfg(target_arch = "x86_64")]
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: glibc's x86-64 TCB header starts with its own address (tcbhead_t.tcb); the
    // read touches nothing else.
    unsafe { std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags)) };
    tp
}

#[cfg(not(target_arch = "x86_64"))]
fn thread_pointer() -> usize {
    0
}

/// Makes the calling thread the owner of `pid`'s (its own process's) CPU clock, when glibc
/// registered a `struct rseq` for it with the kernel. Returns whether it did.
pub fn claim(pid: u32) -> bool {
    OWNER_PID.store(0, Ordering::Release);
    SYNCED.store(false, Ordering::Release);
    let tp = thread_pointer();
    if tp == 0 || DISABLED.load(Ordering::Acquire) {
        return false;
    }
    let Some(area) = rseq_area(tp) else {
        return false;
    };
    if kernel_checks_rseq_fields() || !switch_rewrites(area) {
        return false;
    }
    RSEQ.store(area, Ordering::Release);
    OWNER_TP.store(tp, Ordering::Release);
    OWNER_PID.store(pid, Ordering::Release);
    true
}

/// The calling thread's registered `struct rseq` (glibc 2.35+ registers one per thread),
/// from its thread pointer `tp`; None when there is none.
fn rseq_area(tp: usize) -> Option<usize> {
    if tp == 0 {
        return None;
    }
    // SAFETY: dlsym with NUL-terminated names; the symbols, when glibc (2.35+) has them,
    // are a ptrdiff_t and an unsigned int.
    let (offset, size) = unsafe {
        let o = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()).cast::<isize>();
        let s = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr()).cast::<u32>();
        if o.is_null() || s.is_null() {
            return None;
        }
        (*o, *s)
    };
    // cpu_id_start (u32) and cpu_id (i32): the first eight bytes.
    if size < 8 {
        return None;
    }
    let area = tp.wrapping_add_signed(offset);
    // SAFETY: glibc's registered rseq area of this thread, inside its TLS block.
    let cpu_id = unsafe { std::ptr::read_volatile((area + 4) as *const i32) };
    if cpu_id < 0 {
        // Not registered (glibc.pthread.rseq=0, or registration failed).
        return None;
    }
    Some(area)
}

/// This kernel's build configuration says CONFIG_DEBUG_RSEQ: unknown (0), no (1), yes (2).
/// Read once, by the first [`claim`] (the library's constructor); a forked child's claim
/// finds it set and reads no file.
static DEBUG_RSEQ: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether the running kernel was built with CONFIG_DEBUG_RSEQ, as its configuration in
/// /boot says (a kernel without that file counts as no): such a kernel checks that user
/// space left `cpu_id_start` alone and kills a task that wrote it, so the path must stay
/// off there.
fn kernel_checks_rseq_fields() -> bool {
    match DEBUG_RSEQ.load(Ordering::Acquire) {
        1 => return false,
        2 => return true,
        _ => {}
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let config = std::fs::read_to_string(format!("/boot/config-{}", release.trim())).unwrap_or_default();
    let yes = config_says_debug_rseq(&config);
    DEBUG_RSEQ.store(if yes { 2 } else { 1 }, Ordering::Release);
    yes
}

/// Whether a kernel configuration's text sets CONFIG_DEBUG_RSEQ.
fn config_says_debug_rseq(config: &str) -> bool {
    config.lines().any(|l| l.trim() == "CONFIG_DEBUG_RSEQ=y")
}

/// Whether this kernel rewrites `cpu_id_start` when the thread leaves its CPU: the sentinel
/// written, a sleep of a microsecond (a raw system call: the library's own `nanosleep` is
/// interposed), and the field read back. A kernel that updates the field only when the
/// CPU changes would keep the sentinel across a switch on the same CPU, and the
/// extrapolation would take off-CPU time for CPU time; then the path stays off. (A kernel
/// built with CONFIG_DEBUG_RSEQ checks that user space left the field alone and kills the
/// task that wrote it: the path is for the kernels this was measured on, docs/vm.md.)
fn switch_rewrites(area: usize) -> bool {
    let field = area as *mut u32;
    // SAFETY: glibc's registered rseq area of this thread (checked by the caller); the
    // kernel rewrites the field at the next switch or signal.
    unsafe { std::ptr::write_volatile(field, SENTINEL) };
    compiler_fence(Ordering::SeqCst);
    let ts = libc::timespec { tv_sec: 0, tv_nsec: 1_000 };
    // SAFETY: a valid timespec to read, no remainder asked for.
    unsafe { libc::syscall(libc::SYS_nanosleep, &ts as *const libc::timespec, std::ptr::null_mut::<libc::timespec>()) };
    compiler_fence(Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { std::ptr::read_volatile(field) != SENTINEL }
}

/// No thread owns the clock any more (a forked child, until it claims its own).
pub fn release() {
    OWNER_PID.store(0, Ordering::Release);
    SYNCED.store(false, Ordering::Release);
    BLOCK_ON.store(false, Ordering::Release);
    CAL_ON.store(false, Ordering::Release);
}

/// Turns the path off for good: a thread that shares the owner's thread pointer and
/// cannot be told from it exists.
pub fn disable() {
    DISABLED.store(true, Ordering::Release);
    release();
}

/// Readings served without a system call.
pub fn fast_reads() -> u64 {
    FAST_READS.load(Ordering::Relaxed)
}

pub fn reset_counts() {
    FAST_READS.store(0, Ordering::Relaxed);
    CARRIES.store(0, Ordering::Relaxed);
}

/// `pid`'s CPU time in ns when the caller is the owner thread and `pid` its process: the
/// extrapolation when the thread has kept its CPU since the last system-call reading and
/// that was at most [`EXTRAPOLATE_MAX_NS`] ago, else `syscall()` (made with the sentinel
/// written first, so a switch during or after it is seen). None: not the owner (or
/// `syscall` failed): the caller reads the clock itself.
pub fn read(pid: u32, real_now: impl Fn() -> u64, syscall: impl FnOnce() -> Option<u64>) -> Option<u64> {
    if pid == 0 || OWNER_PID.load(Ordering::Acquire) != pid || thread_pointer() != OWNER_TP.load(Ordering::Acquire) {
        return None;
    }
    if crate::helper::current().is_some() || DISABLED.load(Ordering::Acquire) {
        return None;
    }
    if BUSY.swap(true, Ordering::AcqRel) {
        // A signal handler interrupted the owner's own reading.
        return None;
    }
    let area = RSEQ.load(Ordering::Acquire) as *mut u32;
    // The real clock first, the sentinel after it: a switch between the two has rewritten
    // the sentinel, so the time read is never off-CPU time taken for CPU time.
    let now = real_now();
    compiler_fence(Ordering::SeqCst);
    // SAFETY: the owner's registered rseq area (checked: the caller is the owner thread).
    let start = unsafe { std::ptr::read_volatile(area) };
    let synced_real = SYNC_REAL_NS.load(Ordering::Acquire);
    let out = if SYNCED.load(Ordering::Acquire)
        && start == SENTINEL
        && now >= synced_real
        && now - synced_real <= EXTRAPOLATE_MAX_NS
    {
        FAST_READS.fetch_add(1, Ordering::Relaxed);
        Some(SYNC_CPU_NS.load(Ordering::Acquire) + (now - synced_real))
    } else {
        SYNCED.store(false, Ordering::Release);
        // SAFETY: as above; the kernel rewrites the field at the next switch or signal.
        unsafe { std::ptr::write_volatile(area, SENTINEL) };
        compiler_fence(Ordering::SeqCst);
        let cpu = syscall();
        compiler_fence(Ordering::SeqCst);
        let after = real_now();
        if let Some(ns) = cpu {
            // A blocking call measured: the thread kept its CPU from its return (the
            // sentinel written there) to this reading, so what its CPU clock gained
            // beyond that real time is the call's own cost.
            if CAL_ON.swap(false, Ordering::AcqRel)
                && CAL_GEN.load(Ordering::Acquire) == GEN.load(Ordering::Acquire)
                && start == SENTINEL
            {
                let mid = now / 2 + after / 2;
                let gained = ns.saturating_sub(CAL_CPU_NS.load(Ordering::Acquire));
                let cost = gained.saturating_sub(mid.saturating_sub(CAL_REAL_NS.load(Ordering::Acquire)));
                if cost > 0 && cost <= BLOCK_COST_MAX_NS {
                    let old = BLOCK_COST_NS.load(Ordering::Acquire);
                    BLOCK_COST_NS.store(if old == 0 { cost } else { (old * 7 + cost) / 8 }, Ordering::Release);
                }
            }
            GEN.fetch_add(1, Ordering::AcqRel);
            CHAIN_REAL_NS.store(after, Ordering::Release);
            SYNC_CPU_NS.store(ns, Ordering::Release);
            SYNC_REAL_NS.store(after, Ordering::Release);
            SYNCED.store(true, Ordering::Release);
        }
        cpu
    };
    BUSY.store(false, Ordering::Release);
    out
}

/// Whether the caller is the owner thread of `pid`'s clock.
fn is_owner(pid: u32) -> bool {
    pid != 0
        && OWNER_PID.load(Ordering::Acquire) == pid
        && thread_pointer() == OWNER_TP.load(Ordering::Acquire)
        && crate::helper::current().is_none()
        && !DISABLED.load(Ordering::Acquire)
}

/// The owner is about to block in a system call (the interposed `wait4` for a ptraced
/// guest process): its reading now, kept for [`block_end`].
pub fn block_begin(real_now: impl Fn() -> u64, syscall: impl FnOnce(u32) -> Option<u64>) {
    let pid = OWNER_PID.load(Ordering::Acquire);
    if !is_owner(pid) {
        return;
    }
    let Some(cpu) = read(pid, real_now, || syscall(pid)) else {
        return;
    };
    BLOCK_GEN.store(GEN.load(Ordering::Acquire), Ordering::Release);
    BLOCK_CPU_NS.store(cpu, Ordering::Release);
    BLOCK_ON.store(true, Ordering::Release);
}

/// The owner's blocking call has returned: the thread was off its CPU in it except for
/// the call's own cost, so the extrapolation goes on from the reading at its entry plus
/// that cost (a running mean of measured ones), from now, without a system call. Not
/// when a system-call reading was made inside it (a signal handler ran and read the
/// clock), when no cost is measured yet, when the chain of such carries has gone
/// [`CARRY_CHAIN_MAX_NS`] past the last system-call reading, or at every
/// [`CARRY_MEASURE_EVERY`]th call, which the next reading measures instead.
pub fn block_end(real_now: impl Fn() -> u64) {
    if !is_owner(OWNER_PID.load(Ordering::Acquire))
        || !BLOCK_ON.swap(false, Ordering::AcqRel)
        || BUSY.load(Ordering::Acquire)
    {
        return;
    }
    if BLOCK_GEN.load(Ordering::Acquire) != GEN.load(Ordering::Acquire) {
        return;
    }
    let area = RSEQ.load(Ordering::Acquire) as *mut u32;
    // SAFETY: the owner's registered rseq area (checked above).
    if unsafe { std::ptr::read_volatile(area) } == SENTINEL {
        // The call did not leave the CPU (it did not block): the extrapolation goes on
        // as it was, its CPU counted as real time.
        return;
    }
    // The sentinel first, the real clock after: a switch after this is seen, one before
    // is inside the call's span.
    // SAFETY: the owner's registered rseq area (checked above).
    unsafe { std::ptr::write_volatile(area, SENTINEL) };
    compiler_fence(Ordering::SeqCst);
    let t = real_now();
    let entry = BLOCK_CPU_NS.load(Ordering::Acquire);
    let cost = BLOCK_COST_NS.load(Ordering::Acquire);
    if cost == 0 || BLOCKS.fetch_add(1, Ordering::AcqRel).is_multiple_of(CARRY_MEASURE_EVERY) {
        CAL_CPU_NS.store(entry, Ordering::Release);
        CAL_REAL_NS.store(t, Ordering::Release);
        CAL_GEN.store(GEN.load(Ordering::Acquire), Ordering::Release);
        CAL_ON.store(true, Ordering::Release);
        SYNCED.store(false, Ordering::Release);
        return;
    }
    if t.saturating_sub(CHAIN_REAL_NS.load(Ordering::Acquire)) > CARRY_CHAIN_MAX_NS {
        SYNCED.store(false, Ordering::Release);
        return;
    }
    SYNCED.store(false, Ordering::Release);
    SYNC_CPU_NS.store(entry + cost, Ordering::Release);
    SYNC_REAL_NS.store(t, Ordering::Release);
    SYNCED.store(true, Ordering::Release);
    CARRIES.fetch_add(1, Ordering::Relaxed);
}

/// Blocking calls carried across without a system call, and the measured mean cost.
pub fn carries() -> (u64, u64) {
    (CARRIES.load(Ordering::Relaxed), BLOCK_COST_NS.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_cpu_ns() -> Option<u64> {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid timespec to write.
        let r = unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
        (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }

    fn mono_ns() -> u64 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid timespec to write.
        unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    fn spin_ns(ns: u64) {
        let end = mono_ns() + ns;
        while mono_ns() < end {
            std::hint::spin_loop();
        }
    }

    /// The checks, in a forked child (one thread, so the process CPU clock is the owner
    /// thread's): exit 0 when they held, 2 when this libc registers no rseq, 1 otherwise.
    fn child_checks() -> i32 {
        // SAFETY: no preconditions.
        let pid = unsafe { libc::getpid() } as u32;
        if !claim(pid) {
            return match rseq_area(thread_pointer()) {
                None => 2,
                // There is an area, but a switch left the sentinel: the kernel does not
                // rewrite the field as this path needs.
                Some(_) => 3,
            };
        }
        let read_own = || read(pid, mono_ns, own_cpu_ns).expect("the owner's reading");
        // Busy between readings (up to past the extrapolation bound): each reading agrees
        // with the system call made right after it.
        let (mut fast, mut worst_ahead, mut worst_behind) = (0u64, 0i64, 0i64);
        let rounds = 3_000u64;
        for i in 0..rounds {
            spin_ns((i % 25) * 10_000);
            let before = fast_reads();
            let r = read_own();
            let s = own_cpu_ns().expect("own clock");
            fast += fast_reads() - before;
            let e = r as i64 - s as i64;
            worst_ahead = worst_ahead.max(e);
            worst_behind = worst_behind.min(e);
        }
        eprintln!("busy: {fast} of {rounds} readings without a system call; reading minus system call after it: {worst_behind}..{worst_ahead} ns");
        // Ahead of the CPU clock by at most the real time the hypervisor may take in one
        // extrapolation (its bound); behind by no more than that either (steal between the
        // system call and the real clock's read after it starts the extrapolation late)
        // plus the time between the two reads (a loose 50 us).
        let bound = EXTRAPOLATE_MAX_NS as i64;
        if worst_ahead > bound || worst_behind < -bound - 50_000 {
            return 1;
        }
        // Readings a few microseconds apart: most are extrapolated (a preemption or the
        // bound sends one back to the system call now and then).
        let before = fast_reads();
        let close = 2_000u64;
        for _ in 0..close {
            spin_ns(2_000);
            read_own();
        }
        let close_fast = fast_reads() - before;
        eprintln!("close: {close_fast} of {close} readings without a system call");
        if close_fast * 2 < close {
            eprintln!("the readings were not extrapolated");
            return 1;
        }
        // Asleep between two readings (shorter than the extrapolation bound): the thread
        // left its CPU, so the reading after is the system call's, never the sleep taken
        // for CPU time.
        let mut sum_ahead = 0i64;
        let sleeps = 300;
        for i in 0..sleeps {
            read_own();
            // SAFETY: no preconditions.
            unsafe { libc::usleep(20 + (i % 10) * 15) };
            let before = fast_reads();
            let r = read_own();
            let s = own_cpu_ns().expect("own clock");
            if fast_reads() != before {
                eprintln!("sleep {i}: a reading after a sleep was extrapolated");
                return 1;
            }
            sum_ahead += r as i64 - s as i64;
        }
        eprintln!("after sleeps: reading minus system call after it, sum {sum_ahead} ns over {sleeps}");
        if sum_ahead > 0 {
            return 1;
        }
        // A blocking call bracketed by block_begin/block_end (as the interposed wait4 is):
        // the reading after it is carried across without a system call, and the sleep is
        // not taken for CPU time (off by the call's cost's spread only).
        let (carried_before, _) = carries();
        let mut sum_ahead = 0i64;
        let mut worst_ahead = 0i64;
        let waits = 400i64;
        for i in 0..waits {
            read_own();
            block_begin(mono_ns, |_| own_cpu_ns());
            // SAFETY: no preconditions.
            unsafe { libc::usleep(20 + (i as u32 % 10) * 15) };
            block_end(mono_ns);
            let r = read_own();
            let s = own_cpu_ns().expect("own clock");
            sum_ahead += r as i64 - s as i64;
            worst_ahead = worst_ahead.max(r as i64 - s as i64);
        }
        let (carried_after, cost) = carries();
        let carried = carried_after - carried_before;
        eprintln!("waits: {carried} of {waits} carried, the call's cost {cost} ns; reading minus system call after it: mean {} ns, most ahead {worst_ahead} ns", sum_ahead / waits);
        if carried == 0 || cost == 0 {
            eprintln!("no wait was carried");
            return 1;
        }
        // Taking the sleeps (20-155 us) for CPU time would put the readings that far ahead.
        if sum_ahead / waits > 10_000 || worst_ahead > EXTRAPOLATE_MAX_NS as i64 {
            return 1;
        }
        // Another thread of the process is not the owner.
        if std::thread::spawn(move || read(pid, mono_ns, own_cpu_ns)).join().expect("thread").is_some() {
            eprintln!("a thread that is not the owner was served");
            return 1;
        }
        // A signal handler's reading inside the owner's own takes the system call.
        BUSY.store(true, Ordering::Release);
        let nested = read(pid, mono_ns, own_cpu_ns);
        BUSY.store(false, Ordering::Release);
        if nested.is_some() {
            return 1;
        }
        // Turned off for good: not served any more.
        disable();
        if read(pid, mono_ns, own_cpu_ns).is_some() || claim(pid) {
            return 1;
        }
        0
    }

    #[test]
    fn a_kernel_that_checks_the_rseq_fields_is_told_by_its_configuration() {
        assert!(config_says_debug_rseq("CONFIG_RSEQ=y\nCONFIG_DEBUG_RSEQ=y\nCONFIG_X=m\n"));
        assert!(!config_says_debug_rseq("CONFIG_RSEQ=y\n# CONFIG_DEBUG_RSEQ is not set\n"));
        assert!(!config_says_debug_rseq("CONFIG_DEBUG_RSEQ_EXTRA=y\n"));
        assert!(!config_says_debug_rseq(""));
    }

    #[test]
    fn the_owners_clock_read_without_a_system_call_agrees_with_the_system_call() {
        // SAFETY: the child runs the checks (system calls, a spin, one thread) and _exits.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            let code = std::panic::catch_unwind(child_checks).unwrap_or(1);
            // SAFETY: ends the child without running the test harness's exit.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: a valid status pointer; the child is ours.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status), "child ended by a signal: {status:#x}");
        match libc::WEXITSTATUS(status) {
            0 => {}
            2 => eprintln!("skipped: this libc registered no rseq area (glibc < 2.35 or glibc.pthread.rseq=0)"),
            3 => {
                eprintln!("skipped: this kernel does not rewrite rseq's cpu_id_start at a switch (the path stays off)")
            }
            code => panic!("the own-clock checks failed (exit {code}; the child's lines above say which)"),
        }
    }
}

//! The program's virtual clock (`smartcon run --emulate ... --virtual-time`).
//!
//! Design: the program's time is the real monotonic clock plus a process-wide skew. A wait
//! on the emulated device or a sleep registers its target instant (virtual monotonic ns)
//! and then:
//!
//! - when every thread of the process is registered (the seed's idle skipping: nothing in
//!   the process can run before the earliest target), the skew is set so that the clock
//!   reads the earliest target (never less than anything already handed out): the wait
//!   costs no real time, and the real time the emulator spent since the last instant the
//!   program saw is hidden (the seed's OS-state pausing, for one process);
//! - otherwise the thread waits in real time (a futex with a timeout), and wakes early if
//!   another thread's jump reaches its target.
//!
//! Every clock the program reads (CLOCK_MONOTONIC, REALTIME, BOOTTIME, their _RAW, _COARSE
//! and _ALARM variants) moves by the same skew, and the monotonic family never goes back
//! (`LAST_NS`). CPU-time clocks are not touched.
//!
//! Non-goals: time read without libc (raw `syscall(SYS_clock_gettime)`, `rdtsc`, a statically
//! linked program), time across `exec` (the new image starts at skew 0) or shared between
//! processes, and signals during a virtual sleep (the sleep is not interrupted). A thread
//! blocked elsewhere (a futex, a pipe) counts as running, so the clock then runs in real time.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};

use libc::{c_int, clockid_t, timespec};

use crate::process::Spin;
use crate::real::{call_real, Sym};

static ON: AtomicBool = AtomicBool::new(false);
/// Virtual minus real, for the monotonic family (ns).
static SKEW_NS: AtomicI64 = AtomicI64::new(0);
/// The skew inherited at this image's start (a fork's child starts with its parent's).
static SKEW_START_NS: AtomicI64 = AtomicI64::new(0);
/// The latest virtual monotonic instant handed out to the program.
static LAST_NS: AtomicU64 = AtomicU64::new(0);
/// Real time the clock skipped over (sum of jumps, before hiding) and jumps made.
static JUMPED_NS: AtomicU64 = AtomicU64::new(0);
static JUMPS: AtomicU64 = AtomicU64::new(0);
/// Bumped at each jump; waiters sleep on it.
static EPOCH: AtomicU32 = AtomicU32::new(0);
/// Targets of the threads waiting now: (waiter id, virtual instant).
static WAITERS: Spin<Vec<(u64, u64)>> = Spin::new(Vec::new());
static NEXT_WAITER: AtomicU64 = AtomicU64::new(1);

static CLOCK_GETTIME: Sym = Sym::new(c"clock_gettime");

/// Turns virtual time on (from the constructor).
pub fn enable() {
    LAST_NS.store(real_ns(libc::CLOCK_MONOTONIC), Ordering::Relaxed);
    ON.store(true, Ordering::Release);
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

fn real_gettime(clock: clockid_t, ts: *mut timespec) -> c_int {
    type F = unsafe extern "C" fn(clockid_t, *mut timespec) -> c_int;
    // SAFETY: (fallback) the kernel validates the pointer (EFAULT).
    call_real!(CLOCK_GETTIME, F, unsafe { libc::syscall(libc::SYS_clock_gettime, clock, ts) as c_int }, clock, ts)
}

/// The virtual monotonic instant now, without recording it as seen.
pub fn peek_ns() -> u64 {
    let v = (real_ns(libc::CLOCK_MONOTONIC) as i64 + SKEW_NS.load(Ordering::Acquire)).max(0) as u64;
    v.max(LAST_NS.load(Ordering::Acquire))
}

/// The virtual monotonic instant now, as the program sees it (it never goes back), and
/// the real monotonic instant it was computed from.
pub fn observe_ns() -> (u64, u64) {
    let real = real_ns(libc::CLOCK_MONOTONIC);
    let v = (real as i64 + SKEW_NS.load(Ordering::Acquire)).max(0) as u64;
    let last = LAST_NS.fetch_max(v, Ordering::AcqRel);
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

fn virtualized(clock: clockid_t) -> bool {
    monotonic_family(clock)
        || matches!(clock, libc::CLOCK_REALTIME | libc::CLOCK_REALTIME_COARSE | libc::CLOCK_REALTIME_ALARM)
}

fn to_ts(ns: u64) -> timespec {
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

/// The number of threads of this process (field 20 of /proc/self/stat), read with raw
/// system calls so nothing interposed runs.
fn thread_count() -> u32 {
    let mut buf = [0u8; 1024];
    // SAFETY: a NUL-terminated path; the descriptor is closed below on every path.
    let fd = unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, c"/proc/self/stat".as_ptr(), libc::O_RDONLY) }
        as c_int;
    if fd < 0 {
        return u32::MAX;
    }
    // SAFETY: buf is valid for its length.
    let n = unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) };
    // SAFETY: our own descriptor.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    if n <= 0 {
        return u32::MAX;
    }
    let text = &buf[..n as usize];
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let Some(close) = text.iter().rposition(|&b| b == b')') else { return u32::MAX };
    std::str::from_utf8(&text[close + 1..])
        .ok()
        .and_then(|rest| rest.split_ascii_whitespace().nth(17))
        .and_then(|f| f.parse().ok())
        .unwrap_or(u32::MAX)
}

fn futex_wait(seen: u32, timeout_ns: u64) {
    let ts = to_ts(timeout_ns);
    // SAFETY: EPOCH is a live, aligned u32; the timeout is a valid relative timespec.
    unsafe {
        libc::syscall(libc::SYS_futex, EPOCH.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, seen, &ts);
    }
}

fn futex_wake_all() {
    // SAFETY: as in futex_wait.
    unsafe { libc::syscall(libc::SYS_futex, EPOCH.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX) };
}

/// The longest real-time wait before the thread count is looked at again (a thread that
/// exits or starts waiting does not wake the others).
const RECHECK_NS: u64 = 1_000_000;

/// Waits until the virtual monotonic clock reaches `target_ns`: a jump when every thread
/// of the process waits here, else real time.
pub fn wait_until(target_ns: u64) {
    let id = NEXT_WAITER.fetch_add(1, Ordering::Relaxed);
    WAITERS.lock().push((id, target_ns));
    loop {
        let threads = thread_count();
        let mut waiters = WAITERS.lock();
        let now = peek_ns();
        if now >= target_ns {
            waiters.retain(|w| w.0 != id);
            return;
        }
        if waiters.len() as u64 >= threads as u64 {
            // Everyone waits: nothing can happen before the earliest target.
            let earliest = waiters.iter().map(|w| w.1).min().unwrap_or(target_ns);
            let to = earliest.max(LAST_NS.load(Ordering::Acquire));
            let real = real_ns(libc::CLOCK_MONOTONIC);
            JUMPED_NS.fetch_add(to.saturating_sub(now), Ordering::Relaxed);
            JUMPS.fetch_add(1, Ordering::Relaxed);
            SKEW_NS.store(to as i64 - real as i64, Ordering::Release);
            LAST_NS.fetch_max(to, Ordering::AcqRel);
            EPOCH.fetch_add(1, Ordering::Release);
            drop(waiters);
            futex_wake_all();
            continue;
        }
        let seen = EPOCH.load(Ordering::Acquire);
        drop(waiters);
        futex_wait(seen, (target_ns - now).min(RECHECK_NS));
    }
}

/// What the exit record says about the clock.
pub struct ClockStats {
    pub skew_ns: i64,
    pub jumped_ns: u64,
    pub jumps: u64,
}

pub fn stats() -> ClockStats {
    ClockStats {
        skew_ns: SKEW_NS.load(Ordering::Relaxed) - SKEW_START_NS.load(Ordering::Relaxed),
        jumped_ns: JUMPED_NS.load(Ordering::Relaxed),
        jumps: JUMPS.load(Ordering::Relaxed),
    }
}

pub fn fork_prepare() {
    std::mem::forget(WAITERS.lock());
}

pub fn fork_parent() {
    WAITERS.unlock_after_fork();
}

pub fn fork_child() {
    // SAFETY: single-threaded child; the prepare handler holds the lock, so no one else is
    // inside it. The parent's waiters are not in this process.
    unsafe { (*WAITERS.value_ptr()).clear() };
    WAITERS.unlock_after_fork();
    SKEW_START_NS.store(SKEW_NS.load(Ordering::Relaxed), Ordering::Relaxed);
    JUMPED_NS.store(0, Ordering::Relaxed);
    JUMPS.store(0, Ordering::Relaxed);
}

/// Whether this call should see virtual time: on, and not the library's own call.
fn applies(clock: clockid_t) -> bool {
    on() && virtualized(clock) && !crate::process::inside()
}

/// # Safety
/// As clock_gettime(2).
#[no_mangle]
pub unsafe extern "C" fn clock_gettime(clock: clockid_t, ts: *mut timespec) -> c_int {
    if !applies(clock) || ts.is_null() {
        return real_gettime(clock, ts);
    }
    // SAFETY: non-NULL; the caller's promise that it is writable.
    unsafe { *ts = to_ts(clock_ns(clock)) };
    0
}

/// # Safety
/// As clock_gettime(2).
#[no_mangle]
pub unsafe extern "C" fn __clock_gettime64(clock: clockid_t, ts: *mut timespec) -> c_int {
    // SAFETY: forwarded caller promise.
    unsafe { clock_gettime(clock, ts) }
}

/// # Safety
/// As gettimeofday(2).
#[no_mangle]
pub unsafe extern "C" fn gettimeofday(tv: *mut libc::timeval, tz: *mut libc::c_void) -> c_int {
    if !tz.is_null() || !applies(libc::CLOCK_REALTIME) || tv.is_null() {
        // SAFETY: (raw) the kernel validates both pointers; a time zone is filled by it.
        let r = unsafe { libc::syscall(libc::SYS_gettimeofday, tv, tz) as c_int };
        if r != 0 || tv.is_null() || !applies(libc::CLOCK_REALTIME) {
            return r;
        }
    }
    let ns = clock_ns(libc::CLOCK_REALTIME);
    // SAFETY: non-NULL; the caller's promise that it is writable.
    unsafe {
        *tv = libc::timeval { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_usec: (ns / 1000 % 1_000_000) as _ }
    };
    0
}

/// # Safety
/// As time(2).
#[no_mangle]
pub unsafe extern "C" fn time(out: *mut libc::time_t) -> libc::time_t {
    let t = if applies(libc::CLOCK_REALTIME) {
        (clock_ns(libc::CLOCK_REALTIME) / 1_000_000_000) as libc::time_t
    } else {
        (real_ns(libc::CLOCK_REALTIME) / 1_000_000_000) as libc::time_t
    };
    if !out.is_null() {
        // SAFETY: non-NULL; the caller's promise that it is writable.
        unsafe { *out = t };
    }
    t
}

/// A relative duration in ns, or None when the timespec is invalid (the real call then
/// returns EINVAL).
///
/// # Safety
/// `ts` must be NULL or valid for reads.
unsafe fn duration_ns(ts: *const timespec) -> Option<u64> {
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

fn sleep_virtual(ns: u64) {
    let (now, _) = observe_ns();
    wait_until(now.saturating_add(ns));
}

static NANOSLEEP: Sym = Sym::new(c"nanosleep");
static CLOCK_NANOSLEEP: Sym = Sym::new(c"clock_nanosleep");
static USLEEP: Sym = Sym::new(c"usleep");
static SLEEP: Sym = Sym::new(c"sleep");

/// # Safety
/// As nanosleep(2).
#[no_mangle]
pub unsafe extern "C" fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int {
    if on() && !crate::process::inside() {
        // SAFETY: forwarded caller promise.
        if let Some(ns) = unsafe { duration_ns(req) } {
            sleep_virtual(ns);
            return 0;
        }
    }
    type F = unsafe extern "C" fn(*const timespec, *mut timespec) -> c_int;
    // SAFETY: (fallback) the kernel validates the pointers.
    call_real!(NANOSLEEP, F, unsafe { libc::syscall(libc::SYS_nanosleep, req, rem) as c_int }, req, rem)
}

/// # Safety
/// As clock_nanosleep(2).
#[no_mangle]
pub unsafe extern "C" fn clock_nanosleep(
    clock: clockid_t,
    flags: c_int,
    req: *const timespec,
    rem: *mut timespec,
) -> c_int {
    if applies(clock) {
        // SAFETY: forwarded caller promise.
        if let Some(ns) = unsafe { duration_ns(req) } {
            if flags & libc::TIMER_ABSTIME != 0 {
                // The deadline on `clock`, moved to the monotonic virtual clock.
                let now_clock = clock_ns(clock);
                sleep_virtual(ns.saturating_sub(now_clock));
            } else {
                sleep_virtual(ns);
            }
            return 0;
        }
    }
    type F = unsafe extern "C" fn(clockid_t, c_int, *const timespec, *mut timespec) -> c_int;
    // SAFETY: (fallback) the kernel validates the pointers; the libc call returns the error
    // number, where syscall(2) sets errno.
    call_real!(
        CLOCK_NANOSLEEP,
        F,
        if unsafe { libc::syscall(libc::SYS_clock_nanosleep, clock, flags, req, rem) } == 0 {
            0
        } else {
            crate::real::errno()
        },
        clock,
        flags,
        req,
        rem
    )
}

#[no_mangle]
pub extern "C" fn usleep(us: libc::useconds_t) -> c_int {
    if on() && !crate::process::inside() {
        sleep_virtual(us as u64 * 1000);
        return 0;
    }
    type F = unsafe extern "C" fn(libc::useconds_t) -> c_int;
    let ts = to_ts(us as u64 * 1000);
    // SAFETY: (fallback) a valid timespec on the stack.
    call_real!(
        USLEEP,
        F,
        unsafe { libc::syscall(libc::SYS_nanosleep, &ts, std::ptr::null_mut::<timespec>()) as c_int },
        us
    )
}

#[no_mangle]
pub extern "C" fn sleep(s: libc::c_uint) -> libc::c_uint {
    if on() && !crate::process::inside() {
        sleep_virtual(s as u64 * 1_000_000_000);
        return 0;
    }
    type F = unsafe extern "C" fn(libc::c_uint) -> libc::c_uint;
    let ts = to_ts(s as u64 * 1_000_000_000);
    // SAFETY: (fallback) a valid timespec on the stack.
    call_real!(
        SLEEP,
        F,
        unsafe { libc::syscall(libc::SYS_nanosleep, &ts, std::ptr::null_mut::<timespec>()) as libc::c_uint },
        s
    )
}

/// Sleeps in real time until the real monotonic clock reads `deadline_ns`: the kernel for
/// all but the last 200 us, then a spin (real-time serving of the emulated device: a
/// kernel wake-up on a busy machine comes late by tens to hundreds of us).
pub fn real_sleep_until(deadline_ns: u64) {
    const SPIN_NS: u64 = 200_000;
    let now = real_ns(libc::CLOCK_MONOTONIC);
    if deadline_ns > now + SPIN_NS {
        let ts = to_ts(deadline_ns - SPIN_NS);
        // SAFETY: a valid timespec; an absolute monotonic deadline; EINTR only shortens it.
        unsafe {
            libc::syscall(
                libc::SYS_clock_nanosleep,
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut::<timespec>(),
            )
        };
    }
    while real_ns(libc::CLOCK_MONOTONIC) < deadline_ns {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_thread_count() {
        let n = thread_count();
        assert!((1..10_000).contains(&n), "{n}");
    }

    #[test]
    fn only_wall_clocks_are_virtualized() {
        assert!(virtualized(libc::CLOCK_MONOTONIC_RAW) && virtualized(libc::CLOCK_REALTIME_COARSE));
        assert!(!virtualized(libc::CLOCK_PROCESS_CPUTIME_ID) && !virtualized(libc::CLOCK_THREAD_CPUTIME_ID));
    }
}

//! Waits that end by an event or a timeout, under virtual time (`--virtual-time`).
//!
//! Design: condition variables (`pthread_cond_wait`, `_timedwait`, `_clockwait`),
//! semaphores (`sem_wait`, `sem_timedwait`, `sem_clockwait`) and descriptor waits (`poll`,
//! `ppoll`, `select`, `pselect`, `epoll_wait`, `epoll_pwait`) register their thread in the
//! clock's domain ([`crate::vclock`]) for as long as they wait, with the deadline as the
//! target (converted to the virtual monotonic clock) or none when they have no timeout.
//! The domain counts such a thread idle only while the kernel has it asleep (state S in
//! /proc), so a wake-up already delivered keeps the clock still until the thread runs.
//!
//! - A timed wait waits in real time in slices of at most [`domain::RECHECK_NS`]; between
//!   slices it looks whether the clock reached its deadline (another thread's jump, or its
//!   own when it is the last thread to go idle), and then returns as timed out. A wait
//!   whose event comes first returns as the real call did (its result, errno, fd sets).
//! - A condition variable's slice that ends without the signal returns 0 to the caller (a
//!   spurious wake-up, which POSIX allows and every correct caller loops on), rather than
//!   waiting again: a signal sent between two slices would find no waiter and be lost.
//!   Semaphores and descriptors keep their state between slices, so those wait again.
//! - A wait without a timeout counts as idle with no target: while every thread of the
//!   program is blocked, nothing in it can run before the earliest target, and only a
//!   thread of the program can signal its condition variable or semaphore. An event from
//!   outside (data on a socket, a child that is not under the library) that arrives while
//!   the clock jumps is seen at the jump's target, as if it had arrived then: the seed's
//!   idle skipping, where the program's time does not run while it is idle. A process the
//!   program started with exec is not in the domain and runs in real time, but a thread
//!   blocked on it in an interposed wait lets the clock jump; blocked on it anywhere else
//!   (`wait4`, `read`), the thread counts as running.
//! - The clock a `pthread_cond_timedwait` deadline is on is the condition variable's:
//!   `pthread_cond_init` records a non-default clock (read with `pthread_condattr_getclock`)
//!   in a small table; a condition variable not in it uses CLOCK_REALTIME, as a static
//!   initializer does. When the table has overflowed, an unknown one passes through.
//!
//! Non-goals: `pthread_cancel` of a thread inside an interposed wait (its registration would
//! stay behind), programs bound to glibc's pre-2.3.2 condition variables, timerfd and POSIX
//! timers (a timer fires in real time; a thread that waits on
//! a timerfd in an interposed wait counts as idle meanwhile), `futex(2)` called directly,
//! `pthread_mutex_timedlock`, `pthread_join` and `wait4` (a thread blocked there counts as
//! running), `sigtimedwait`, 32-bit time64 variants, and `select`'s fd sets beyond
//! FD_SETSIZE.

use libc::{c_int, c_void, clockid_t, nfds_t, pollfd, pthread_cond_t, pthread_condattr_t, pthread_mutex_t, timespec};

use crate::guard::Spin;
use crate::real::{self, call_real, Sym};
use crate::vclock::domain::{self, NO_TARGET};

static COND_INIT: Sym = Sym::new(c"pthread_cond_init");
static COND_DESTROY: Sym = Sym::new(c"pthread_cond_destroy");
static COND_WAIT: Sym = Sym::new(c"pthread_cond_wait");
static COND_TIMEDWAIT: Sym = Sym::new(c"pthread_cond_timedwait");
static SEM_WAIT: Sym = Sym::new(c"sem_wait");
static SEM_TIMEDWAIT: Sym = Sym::new(c"sem_timedwait");
static POLL: Sym = Sym::new(c"poll");
static PPOLL: Sym = Sym::new(c"ppoll");
static SELECT: Sym = Sym::new(c"select");
static PSELECT: Sym = Sym::new(c"pselect");
static EPOLL_WAIT: Sym = Sym::new(c"epoll_wait");
static EPOLL_PWAIT: Sym = Sym::new(c"epoll_pwait");

/// Condition variables initialised with a clock other than CLOCK_REALTIME, at most.
pub const COND_CLOCKS_MAX: usize = 256;

struct CondClocks {
    entries: [(usize, clockid_t); COND_CLOCKS_MAX],
    overflow: bool,
}

static COND_CLOCKS: Spin<CondClocks> = Spin::new(CondClocks { entries: [(0, 0); COND_CLOCKS_MAX], overflow: false });

/// The clock of the condition variable at `cond`, or None when it is not known.
fn cond_clock(cond: usize) -> Option<clockid_t> {
    let t = COND_CLOCKS.lock();
    match t.entries.iter().find(|e| e.0 == cond) {
        Some(e) => Some(e.1),
        None if t.overflow => None,
        None => Some(libc::CLOCK_REALTIME),
    }
}

fn set_cond_clock(cond: usize, clock: clockid_t) {
    let mut t = COND_CLOCKS.lock();
    for e in t.entries.iter_mut().filter(|e| e.0 == cond) {
        *e = (0, 0);
    }
    if clock == libc::CLOCK_REALTIME {
        return;
    }
    match t.entries.iter_mut().find(|e| e.0 == 0) {
        Some(e) => *e = (cond, clock),
        None => t.overflow = true,
    }
}

/// The result of a call libc does not have (no raw fallback worth keeping): -1, ENOSYS.
fn no_libc() -> c_int {
    real::set_errno(libc::ENOSYS);
    -1
}

/// Whether this call takes part in virtual time: on, and not the library's own call. No
/// guard is held across the wait: a signal handler that runs meanwhile must still read
/// the virtual clock (the real one is behind it).
fn enter() -> bool {
    domain::on() && !crate::guard::inside()
}

/// The real-time slice a timed waiter sleeps before it looks at the clock again, or None
/// when the virtual clock has reached `target_ns` (after a jump if the domain is idle).
fn next_slice(registered: bool, target_ns: u64) -> Option<u64> {
    let now = if registered { domain::jump_if_idle() } else { domain::peek_ns() };
    (now < target_ns).then(|| (target_ns - now).min(domain::RECHECK_NS))
}

// ---------------------------------------------------------------------------------------
// Condition variables

type CondInitFn = unsafe extern "C" fn(*mut pthread_cond_t, *const pthread_condattr_t) -> c_int;
type CondFn = unsafe extern "C" fn(*mut pthread_cond_t) -> c_int;
type CondWaitFn = unsafe extern "C" fn(*mut pthread_cond_t, *mut pthread_mutex_t) -> c_int;
type CondTimedFn = unsafe extern "C" fn(*mut pthread_cond_t, *mut pthread_mutex_t, *const timespec) -> c_int;

/// # Safety
/// As pthread_cond_init(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_cond_init(cond: *mut pthread_cond_t, attr: *const pthread_condattr_t) -> c_int {
    // The fallback: a libc without it has no threads to wait with.
    let r = call_real!(COND_INIT, CondInitFn, libc::ENOSYS, cond, attr);
    // Only under virtual time, whose fork handlers keep the table's lock consistent.
    if r == 0 && domain::on() {
        let mut clock = libc::CLOCK_REALTIME;
        if !attr.is_null() {
            // SAFETY: attr is the caller's initialised attribute object (pthread_cond_init's
            // contract); getclock only reads it.
            unsafe { libc::pthread_condattr_getclock(attr, &mut clock) };
        }
        set_cond_clock(cond as usize, clock);
    }
    r
}

/// # Safety
/// As pthread_cond_destroy(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_cond_destroy(cond: *mut pthread_cond_t) -> c_int {
    if domain::on() {
        set_cond_clock(cond as usize, libc::CLOCK_REALTIME);
    }
    call_real!(COND_DESTROY, CondFn, libc::ENOSYS, cond)
}

/// # Safety
/// As pthread_cond_wait(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_cond_wait(cond: *mut pthread_cond_t, mutex: *mut pthread_mutex_t) -> c_int {
    let _reg = if enter() { domain::register(NO_TARGET, true) } else { None };
    call_real!(COND_WAIT, CondWaitFn, libc::ENOSYS, cond, mutex)
}

/// One timed condition-variable wait on `clock`'s deadline `abs` (virtual ns): a slice of
/// real time at most, then 0 (spurious) or ETIMEDOUT once the virtual deadline is reached.
///
/// # Safety
/// As pthread_cond_timedwait(3); `clock` is the condition variable's clock.
unsafe fn cond_timed(cond: *mut pthread_cond_t, mutex: *mut pthread_mutex_t, clock: clockid_t, abs: u64) -> c_int {
    let target_ns = domain::deadline_on(clock, abs);
    let reg = domain::register(target_ns, true);
    let Some(slice_ns) = next_slice(reg.is_some(), target_ns) else { return libc::ETIMEDOUT };
    let real_abs = domain::to_ts(domain::real_ns(clock) + slice_ns);
    let r = call_real!(COND_TIMEDWAIT, CondTimedFn, libc::ENOSYS, cond, mutex, &real_abs);
    drop(reg);
    if r != libc::ETIMEDOUT {
        return r;
    }
    if domain::peek_ns() >= target_ns {
        libc::ETIMEDOUT
    } else {
        0
    }
}

/// # Safety
/// As pthread_cond_timedwait(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_cond_timedwait(
    cond: *mut pthread_cond_t,
    mutex: *mut pthread_mutex_t,
    abstime: *const timespec,
) -> c_int {
    if enter() {
        // SAFETY: the caller's promise on abstime.
        if let (Some(abs), Some(clock)) = (unsafe { domain::timespec_ns(abstime) }, cond_clock(cond as usize)) {
            // SAFETY: forwarded caller promise; the clock is the condition variable's.
            return unsafe { cond_timed(cond, mutex, clock, abs) };
        }
    }
    call_real!(COND_TIMEDWAIT, CondTimedFn, libc::ENOSYS, cond, mutex, abstime)
}

/// # Safety
/// As pthread_cond_clockwait(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_cond_clockwait(
    cond: *mut pthread_cond_t,
    mutex: *mut pthread_mutex_t,
    clock: clockid_t,
    abstime: *const timespec,
) -> c_int {
    static COND_CLOCKWAIT: Sym = Sym::new(c"pthread_cond_clockwait");
    type F = unsafe extern "C" fn(*mut pthread_cond_t, *mut pthread_mutex_t, clockid_t, *const timespec) -> c_int;
    let known = matches!(clock, libc::CLOCK_MONOTONIC | libc::CLOCK_REALTIME);
    if known && enter() {
        // SAFETY: the caller's promise on abstime.
        if let Some(abs) = unsafe { domain::timespec_ns(abstime) } {
            let target_ns = domain::deadline_on(clock, abs);
            let reg = domain::register(target_ns, true);
            let Some(slice_ns) = next_slice(reg.is_some(), target_ns) else { return libc::ETIMEDOUT };
            let real_abs = domain::to_ts(domain::real_ns(clock) + slice_ns);
            let r = call_real!(COND_CLOCKWAIT, F, libc::ENOSYS, cond, mutex, clock, &real_abs);
            drop(reg);
            if r != libc::ETIMEDOUT {
                return r;
            }
            return if domain::peek_ns() >= target_ns { libc::ETIMEDOUT } else { 0 };
        }
    }
    call_real!(COND_CLOCKWAIT, F, libc::ENOSYS, cond, mutex, clock, abstime)
}

// ---------------------------------------------------------------------------------------
// Semaphores

/// # Safety
/// As sem_wait(3).
#[no_mangle]
pub unsafe extern "C" fn sem_wait(sem: *mut libc::sem_t) -> c_int {
    type F = unsafe extern "C" fn(*mut libc::sem_t) -> c_int;
    let _reg = if enter() { domain::register(NO_TARGET, true) } else { None };
    call_real!(SEM_WAIT, F, no_libc(), sem)
}

/// A timed semaphore wait until `clock`'s virtual deadline `abs`, in real-time slices (the
/// count persists between them, so nothing is lost by waiting again).
///
/// # Safety
/// As sem_timedwait(3).
unsafe fn sem_timed(sem: *mut libc::sem_t, clock: clockid_t, abs: u64) -> c_int {
    type F = unsafe extern "C" fn(*mut libc::sem_t, *const timespec) -> c_int;
    let target_ns = domain::deadline_on(clock, abs);
    let reg = domain::register(target_ns, true);
    loop {
        let Some(slice_ns) = next_slice(reg.is_some(), target_ns) else {
            // SAFETY: the caller's semaphore.
            if unsafe { libc::sem_trywait(sem) } == 0 {
                return 0;
            }
            real::set_errno(libc::ETIMEDOUT);
            return -1;
        };
        let real_abs = domain::to_ts(domain::real_ns(libc::CLOCK_REALTIME) + slice_ns);
        let r = call_real!(SEM_TIMEDWAIT, F, no_libc(), sem, &real_abs);
        if r == 0 || real::errno() != libc::ETIMEDOUT {
            return r;
        }
    }
}

/// # Safety
/// As sem_timedwait(3).
#[no_mangle]
pub unsafe extern "C" fn sem_timedwait(sem: *mut libc::sem_t, abstime: *const timespec) -> c_int {
    type F = unsafe extern "C" fn(*mut libc::sem_t, *const timespec) -> c_int;
    if enter() {
        // SAFETY: the caller's promise on abstime.
        if let Some(abs) = unsafe { domain::timespec_ns(abstime) } {
            // SAFETY: forwarded caller promise.
            return unsafe { sem_timed(sem, libc::CLOCK_REALTIME, abs) };
        }
    }
    call_real!(SEM_TIMEDWAIT, F, no_libc(), sem, abstime)
}

/// # Safety
/// As sem_clockwait(3).
#[no_mangle]
pub unsafe extern "C" fn sem_clockwait(sem: *mut libc::sem_t, clock: clockid_t, abstime: *const timespec) -> c_int {
    static SEM_CLOCKWAIT: Sym = Sym::new(c"sem_clockwait");
    type F = unsafe extern "C" fn(*mut libc::sem_t, clockid_t, *const timespec) -> c_int;
    let known = matches!(clock, libc::CLOCK_MONOTONIC | libc::CLOCK_REALTIME);
    if known && enter() {
        // SAFETY: the caller's promise on abstime.
        if let Some(abs) = unsafe { domain::timespec_ns(abstime) } {
            // SAFETY: forwarded caller promise.
            return unsafe { sem_timed(sem, clock, abs) };
        }
    }
    call_real!(SEM_CLOCKWAIT, F, no_libc(), sem, clock, abstime)
}

// ---------------------------------------------------------------------------------------
// Descriptor waits

/// A descriptor wait of `timeout_ns` (None: no timeout) made of real calls: `call(Some(t))`
/// waits at most t ns of real time, `call(None)` without limit; it returns the real
/// call's result (0: nothing ready in time). Slices until something is ready, an error or
/// signal, or the virtual deadline, where one last call with a zero timeout reports what is
/// ready then (as the real call does at its timeout).
fn fd_wait(timeout_ns: Option<u64>, mut call: impl FnMut(Option<u64>) -> c_int) -> c_int {
    let Some(timeout_ns) = timeout_ns else {
        let _reg = domain::register(NO_TARGET, true);
        return call(None);
    };
    if timeout_ns == 0 {
        return call(Some(0));
    }
    let target_ns = domain::observe_ns().0.saturating_add(timeout_ns);
    let reg = domain::register(target_ns, true);
    loop {
        let Some(slice_ns) = next_slice(reg.is_some(), target_ns) else {
            drop(reg);
            return call(Some(0));
        };
        let r = call(Some(slice_ns));
        if r != 0 {
            return r;
        }
    }
}

fn ms_timeout(ms: c_int) -> Option<u64> {
    (ms >= 0).then(|| ms as u64 * 1_000_000)
}

/// A real-time slice as poll's millisecond timeout (rounded up: a 0 would spin).
fn slice_ms(slice: Option<u64>) -> c_int {
    match slice {
        None => -1,
        Some(0) => 0,
        Some(ns) => ns.div_ceil(1_000_000).min(c_int::MAX as u64) as c_int,
    }
}

/// # Safety
/// As poll(2).
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    type F = unsafe extern "C" fn(*mut pollfd, nfds_t, c_int) -> c_int;
    // A helper's put-off request returns before the helper waits for more.
    crate::emu::settle_helper_request();
    if enter() {
        // SAFETY: (fallback) the kernel validates the array.
        let raw = |t: c_int| unsafe { libc::syscall(libc::SYS_poll, fds, nfds, t) as c_int };
        return fd_wait(ms_timeout(timeout), |slice| {
            call_real!(POLL, F, raw(slice_ms(slice)), fds, nfds, slice_ms(slice))
        });
    }
    // SAFETY: (fallback) the kernel validates the array.
    call_real!(POLL, F, unsafe { libc::syscall(libc::SYS_poll, fds, nfds, timeout) as c_int }, fds, nfds, timeout)
}

/// # Safety
/// As poll(2) with fortify's buffer length.
#[no_mangle]
pub unsafe extern "C" fn __poll_chk(fds: *mut pollfd, nfds: nfds_t, timeout: c_int, fds_len: usize) -> c_int {
    if (fds_len / std::mem::size_of::<pollfd>()) < nfds as usize {
        // glibc's fortify aborts here; so do we, the same way.
        std::process::abort();
    }
    // SAFETY: forwarded caller promise (checked length).
    unsafe { poll(fds, nfds, timeout) }
}

/// # Safety
/// As ppoll(2).
#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    nfds: nfds_t,
    tmo: *const timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    type F = unsafe extern "C" fn(*mut pollfd, nfds_t, *const timespec, *const libc::sigset_t) -> c_int;
    crate::emu::settle_helper_request();
    // SAFETY: (fallback) the kernel validates the pointers; the kernel's sigset is 8 bytes.
    let raw = |t: *const timespec| unsafe { libc::syscall(libc::SYS_ppoll, fds, nfds, t, sigmask, 8) as c_int };
    if enter() {
        // SAFETY: the caller's promise on tmo (a relative timeout here).
        let timeout = if tmo.is_null() { Some(None) } else { unsafe { domain::timespec_ns(tmo) }.map(Some) };
        if let Some(timeout) = timeout {
            return fd_wait(timeout, |slice| {
                let ts = slice.map(domain::to_ts);
                let p = ts.as_ref().map_or(std::ptr::null(), |t| t as *const timespec);
                call_real!(PPOLL, F, raw(p), fds, nfds, p, sigmask)
            });
        }
    }
    call_real!(PPOLL, F, raw(tmo), fds, nfds, tmo, sigmask)
}

/// The three fd sets of a select, kept to be restored before each slice (the kernel
/// clears what is not ready).
struct Sets([Option<libc::fd_set>; 3]);

impl Sets {
    /// # Safety
    /// Each pointer is NULL or a valid fd_set.
    unsafe fn save(r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set) -> Sets {
        // SAFETY: the caller's promise.
        Sets([r, w, e].map(|p| (!p.is_null()).then(|| unsafe { *p })))
    }

    /// # Safety
    /// As `save`, with the same pointers.
    unsafe fn restore(&self, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set) {
        for (saved, p) in self.0.iter().zip([r, w, e]) {
            if let Some(s) = saved {
                // SAFETY: the caller's promise: p is the non-NULL set it was saved from.
                unsafe { *p = *s };
            }
        }
    }
}

/// # Safety
/// As select(2).
#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    tv: *mut libc::timeval,
) -> c_int {
    type F = unsafe extern "C" fn(
        c_int,
        *mut libc::fd_set,
        *mut libc::fd_set,
        *mut libc::fd_set,
        *mut libc::timeval,
    ) -> c_int;
    // SAFETY: (fallback) the kernel validates the pointers.
    let raw = |t: *mut libc::timeval| unsafe { libc::syscall(libc::SYS_select, nfds, r, w, e, t) as c_int };
    if (0..=libc::FD_SETSIZE as c_int).contains(&nfds) && enter() {
        let timeout = if tv.is_null() {
            Some(None)
        } else {
            // SAFETY: non-NULL; the caller's promise.
            let t = unsafe { *tv };
            (t.tv_sec >= 0 && (0..1_000_000).contains(&t.tv_usec))
                .then(|| Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000))
        };
        if let Some(timeout) = timeout {
            // SAFETY: the caller's promise on the sets.
            let sets = unsafe { Sets::save(r, w, e) };
            let start_ns = domain::observe_ns().0;
            let n = fd_wait(timeout, |slice| {
                // SAFETY: the same pointers the sets were saved from.
                unsafe { sets.restore(r, w, e) };
                let mut t = slice.map(|ns| libc::timeval {
                    tv_sec: (ns / 1_000_000_000) as libc::time_t,
                    tv_usec: (ns.div_ceil(1000) % 1_000_000) as libc::suseconds_t,
                });
                let p = t.as_mut().map_or(std::ptr::null_mut(), |t| t as *mut libc::timeval);
                call_real!(SELECT, F, raw(p), nfds, r, w, e, p)
            });
            if let (Some(total), false) = (timeout, tv.is_null()) {
                // Linux writes back the time left (on the virtual clock here).
                let left = total.saturating_sub(domain::peek_ns().saturating_sub(start_ns));
                // SAFETY: non-NULL; the caller's promise that it is writable.
                unsafe {
                    *tv = libc::timeval {
                        tv_sec: (left / 1_000_000_000) as libc::time_t,
                        tv_usec: (left / 1000 % 1_000_000) as libc::suseconds_t,
                    }
                };
            }
            return n;
        }
    }
    call_real!(SELECT, F, raw(tv), nfds, r, w, e, tv)
}

/// # Safety
/// As pselect(2).
#[no_mangle]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    tmo: *const timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    type F = unsafe extern "C" fn(
        c_int,
        *mut libc::fd_set,
        *mut libc::fd_set,
        *mut libc::fd_set,
        *const timespec,
        *const libc::sigset_t,
    ) -> c_int;
    if (0..=libc::FD_SETSIZE as c_int).contains(&nfds) && enter() {
        // SAFETY: the caller's promise on tmo (a relative timeout here).
        let timeout = if tmo.is_null() { Some(None) } else { unsafe { domain::timespec_ns(tmo) }.map(Some) };
        if let Some(timeout) = timeout {
            // SAFETY: the caller's promise on the sets.
            let sets = unsafe { Sets::save(r, w, e) };
            return fd_wait(timeout, |slice| {
                // SAFETY: the same pointers the sets were saved from.
                unsafe { sets.restore(r, w, e) };
                let ts = slice.map(domain::to_ts);
                let p = ts.as_ref().map_or(std::ptr::null(), |t| t as *const timespec);
                call_real!(PSELECT, F, no_libc(), nfds, r, w, e, p, sigmask)
            });
        }
    }
    call_real!(PSELECT, F, no_libc(), nfds, r, w, e, tmo, sigmask)
}

/// # Safety
/// As epoll_wait(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(epfd: c_int, events: *mut libc::epoll_event, max: c_int, timeout: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int;
    // SAFETY: (fallback) the kernel validates the array; epoll_pwait with no mask is
    // epoll_wait (which newer architectures lack).
    let raw = |t: c_int| unsafe {
        libc::syscall(libc::SYS_epoll_pwait, epfd, events, max, t, std::ptr::null::<c_void>(), 8) as c_int
    };
    if enter() {
        return fd_wait(ms_timeout(timeout), |slice| {
            call_real!(EPOLL_WAIT, F, raw(slice_ms(slice)), epfd, events, max, slice_ms(slice))
        });
    }
    call_real!(EPOLL_WAIT, F, raw(timeout), epfd, events, max, timeout)
}

/// # Safety
/// As epoll_pwait(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    sigmask: *const libc::sigset_t,
) -> c_int {
    type F = unsafe extern "C" fn(c_int, *mut libc::epoll_event, c_int, c_int, *const libc::sigset_t) -> c_int;
    // SAFETY: (fallback) the kernel validates the pointers; the kernel's sigset is 8 bytes.
    let raw = |t: c_int| unsafe { libc::syscall(libc::SYS_epoll_pwait, epfd, events, max, t, sigmask, 8) as c_int };
    if enter() {
        return fd_wait(ms_timeout(timeout), |slice| {
            call_real!(EPOLL_PWAIT, F, raw(slice_ms(slice)), epfd, events, max, slice_ms(slice), sigmask)
        });
    }
    call_real!(EPOLL_PWAIT, F, raw(timeout), epfd, events, max, timeout, sigmask)
}

/// Fork handlers (from the emulator's): the table's lock is held across fork, so the child
/// never inherits it held by a thread it does not have.
pub fn fork_prepare() {
    std::mem::forget(COND_CLOCKS.lock());
}

pub fn fork_parent_or_child() {
    COND_CLOCKS.unlock_after_fork();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_slices_round_up_so_a_short_slice_never_spins() {
        assert_eq!(slice_ms(None), -1);
        assert_eq!(slice_ms(Some(0)), 0);
        assert_eq!(slice_ms(Some(1)), 1);
        assert_eq!(slice_ms(Some(1_000_001)), 2);
        assert_eq!(ms_timeout(-1), None);
        assert_eq!(ms_timeout(5), Some(5_000_000));
    }

    #[test]
    fn a_condition_variable_remembers_its_clock_until_destroyed() {
        let addr = 0x1000usize;
        assert_eq!(cond_clock(addr), Some(libc::CLOCK_REALTIME));
        set_cond_clock(addr, libc::CLOCK_MONOTONIC);
        assert_eq!(cond_clock(addr), Some(libc::CLOCK_MONOTONIC));
        set_cond_clock(addr, libc::CLOCK_REALTIME);
        assert_eq!(cond_clock(addr), Some(libc::CLOCK_REALTIME));
    }
}

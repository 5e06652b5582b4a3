//! The interposed clock and sleep functions: what the program reads and sleeps on sees
//! virtual time when it is on (see [`crate::vclock`]), and the real functions otherwise or
//! when the library itself calls them.
//!
//! Interposition layer: on the domain's readings and the virtual sleep below it.

use libc::{c_int, clockid_t, timespec};

use super::domain::{clock_ns, on, real_gettime, real_ns, timespec_ns, to_ts, virtualized};
use super::sleep::sleep_virtual;
use crate::guard::inside;
use crate::real::{call_real, Sym};

/// Whether this call should see virtual time: on, and not the library's own call.
fn applies(clock: clockid_t) -> bool {
    on() && virtualized(clock) && !inside()
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

static NANOSLEEP: Sym = Sym::new(c"nanosleep");
static CLOCK_NANOSLEEP: Sym = Sym::new(c"clock_nanosleep");
static USLEEP: Sym = Sym::new(c"usleep");
static SLEEP: Sym = Sym::new(c"sleep");

/// # Safety
/// As nanosleep(2).
#[no_mangle]
pub unsafe extern "C" fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int {
    if on() && !inside() {
        // SAFETY: forwarded caller promise.
        if let Some(ns) = unsafe { timespec_ns(req) } {
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
        if let Some(ns) = unsafe { timespec_ns(req) } {
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
    call_real!(
        CLOCK_NANOSLEEP,
        F,
        // SAFETY: (fallback) the kernel validates the pointers; the libc call returns the
        // error number, where syscall(2) sets errno.
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
    if on() && !inside() {
        sleep_virtual(us as u64 * 1000);
        return 0;
    }
    type F = unsafe extern "C" fn(libc::useconds_t) -> c_int;
    let ts = to_ts(us as u64 * 1000);
    call_real!(
        USLEEP,
        F,
        // SAFETY: (fallback) a valid timespec on the stack.
        unsafe { libc::syscall(libc::SYS_nanosleep, &ts, std::ptr::null_mut::<timespec>()) as c_int },
        us
    )
}

#[no_mangle]
pub extern "C" fn sleep(s: libc::c_uint) -> libc::c_uint {
    if on() && !inside() {
        sleep_virtual(s as u64 * 1_000_000_000);
        return 0;
    }
    type F = unsafe extern "C" fn(libc::c_uint) -> libc::c_uint;
    let ts = to_ts(s as u64 * 1_000_000_000);
    call_real!(
        SLEEP,
        F,
        // SAFETY: (fallback) a valid timespec on the stack.
        unsafe { libc::syscall(libc::SYS_nanosleep, &ts, std::ptr::null_mut::<timespec>()) as libc::c_uint },
        s
    )
}

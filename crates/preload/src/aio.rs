//! libaio (`io_submit`, `io_getevents`, `io_destroy`): emulated on the `--emulate` image,
//! counted everywhere else.
//!
//! On the image, a read or write request (IO_CMD_PREAD, PWRITE, PREADV, PWRITEV, without an
//! eventfd) is served as the synchronous calls are: its data half is the real positional
//! call, made at submission on the program's own descriptor (so its result, errno and data
//! are the kernel's), and its completion event is held back until the program's clock
//! (real or virtual) reaches the model's completion instant for an arrival at submission.
//! `io_getevents` hands out the held events in completion order, waiting on that clock for
//! `min_nr` of them as the run's strategy says for the earliest one (decided at submission,
//! as [`crate::emu`] decides a synchronous call's wait; a virtual `block` wait counts as idle,
//! so the clock jumps); requests the kernel
//! has (other descriptors of the same context) are collected alongside. Everything else
//! goes to libaio as it is, and is counted as libaio that was not taken.
//!
//! libaio's functions return a negative errno rather than setting errno; these do the same.
//!
//! Non-goals: `io_pgetevents` (passed through; it does not see held events), `io_cancel` of
//! a held event (the kernel's answer: it is not the kernel's), the requests' `aio_reqprio`,
//! fsync requests on the image (real, untimed: the model has no cache to flush), and the
//! user-space completion ring read directly (fio's `userspace_reap`: held events are not
//! in it).

use std::sync::atomic::{AtomicU64, Ordering};

use libc::{c_int, c_long, c_void, iovec, timespec};
use smartcon_devemu::Op;

use crate::bypass::{self, Seen};
use crate::emu;
use crate::guard::{Busy, Spin};
use crate::process;
use crate::real::{call_real, Sym};
use crate::vclock::domain;
use crate::vclock::sleep::DeviceWait;

static IO_SUBMIT: Sym = Sym::new(c"io_submit");
static IO_GETEVENTS: Sym = Sym::new(c"io_getevents");
static IO_DESTROY: Sym = Sym::new(c"io_destroy");

const IO_CMD_PREAD: u16 = 0;
const IO_CMD_PWRITE: u16 = 1;
const IO_CMD_PREADV: u16 = 7;
const IO_CMD_PWRITEV: u16 = 8;
/// `aio_flags`: notify an eventfd at completion.
const IOCB_FLAG_RESFD: u32 = 1;

/// The kernel's `struct iocb` (libaio's has the same layout), little-endian field order.
#[repr(C)]
pub struct Iocb {
    data: u64,
    key: u32,
    rw_flags: i32,
    opcode: u16,
    reqprio: i16,
    fildes: u32,
    buf: u64,
    nbytes: u64,
    offset: i64,
    reserved2: u64,
    flags: u32,
    resfd: u32,
}

/// The kernel's `struct io_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

/// A completion held until the clock reaches it.
struct Held {
    ctx: usize,
    event: IoEvent,
    complete_ns: u64,
    /// How `io_getevents` waits for it (the run's strategy, decided at submission).
    wait: DeviceWait,
    /// Bytes in the image's in-flight counters until it is reaped (0: not entered).
    inflight_bytes: u64,
}

impl Held {
    /// Leaves the image's in-flight counters (reaped, or its context destroyed).
    fn reaped(&self) {
        if self.inflight_bytes > 0 {
            emu::aio_reaped(self.inflight_bytes);
        }
    }
}

/// Held completions of every context, and the requests each context has in the kernel.
static HELD: Spin<Vec<Held>> = Spin::new(Vec::new());
static KERNEL_INFLIGHT: Spin<Vec<(usize, u64)>> = Spin::new(Vec::new());
static HELD_COUNT: AtomicU64 = AtomicU64::new(0);

fn errno_neg() -> c_long {
    -(crate::real::errno() as c_long)
}

type SubmitFn = unsafe extern "C" fn(*mut c_void, c_long, *mut *mut Iocb) -> c_int;
type GeteventsFn = unsafe extern "C" fn(*mut c_void, c_long, c_long, *mut IoEvent, *mut timespec) -> c_int;

/// # Safety
/// As libaio's io_submit.
unsafe fn real_submit(ctx: *mut c_void, nr: c_long, iocbs: *mut *mut Iocb) -> c_int {
    call_real!(
        IO_SUBMIT,
        SubmitFn,
        {
            let _busy = Busy::try_enter();
            // SAFETY: (fallback) the kernel checks the pointers (EFAULT).
            let r = unsafe { libc::syscall(libc::SYS_io_submit, ctx, nr, iocbs) };
            (if r < 0 { errno_neg() } else { r }) as c_int
        },
        ctx,
        nr,
        iocbs
    )
}

/// # Safety
/// As libaio's io_getevents.
unsafe fn real_getevents(ctx: *mut c_void, min: c_long, nr: c_long, ev: *mut IoEvent, ts: *mut timespec) -> c_int {
    call_real!(
        IO_GETEVENTS,
        GeteventsFn,
        {
            // SAFETY: (fallback) the kernel checks the pointers (EFAULT).
            let r = unsafe { libc::syscall(libc::SYS_io_getevents, ctx, min, nr, ev, ts) };
            (if r < 0 { errno_neg() } else { r }) as c_int
        },
        ctx,
        min,
        nr,
        ev,
        ts
    )
}

/// Counts requests `ctx` has in the kernel (only while emulating: only then does
/// io_getevents mix them with held events).
fn kernel_inflight_add(ctx: usize, n: i64) {
    if !emu::active() {
        return;
    }
    let mut k = KERNEL_INFLIGHT.lock();
    match k.iter_mut().find(|(c, _)| *c == ctx) {
        Some((_, v)) => *v = (*v as i64 + n).max(0) as u64,
        None if n > 0 => k.push((ctx, n as u64)),
        None => {}
    }
}

fn kernel_inflight(ctx: usize) -> u64 {
    KERNEL_INFLIGHT.lock().iter().find(|(c, _)| *c == ctx).map_or(0, |(_, v)| *v)
}

/// Whether `cb` is a request this module serves from the model.
///
/// # Safety
/// `cb` is null or points to a valid iocb (the caller's promise to io_submit; a null one is
/// left to the kernel, which answers EFAULT).
unsafe fn emulated(cb: *const Iocb) -> bool {
    if cb.is_null() {
        return false;
    }
    // SAFETY: non-null: the caller's promise.
    let cb = unsafe { &*cb };
    matches!(cb.opcode, IO_CMD_PREAD | IO_CMD_PWRITE | IO_CMD_PREADV | IO_CMD_PWRITEV)
        && cb.flags & IOCB_FLAG_RESFD == 0
        && cb.rw_flags == 0
        && emu::is_image_fd(cb.fildes as c_int)
}

/// The data half of one request on the image, now: its result as an io_event's `res`.
///
/// # Safety
/// `cb` is a valid iocb whose buffer (or vector) is valid as io_submit requires.
unsafe fn data_half(cb: &Iocb) -> i64 {
    let fd = cb.fildes as c_int;
    let saved = crate::real::errno();
    // SAFETY: the buffers are the program's, valid as io_submit requires.
    let n = unsafe {
        match cb.opcode {
            IO_CMD_PREAD => crate::real::pread(fd, cb.buf as *mut c_void, cb.nbytes as usize, cb.offset),
            IO_CMD_PWRITE => crate::real::pwrite(fd, cb.buf as *const c_void, cb.nbytes as usize, cb.offset),
            IO_CMD_PREADV => crate::real::preadv(fd, cb.buf as *const iovec, cb.nbytes as c_int, cb.offset),
            _ => crate::real::pwritev(fd, cb.buf as *const iovec, cb.nbytes as c_int, cb.offset),
        }
    };
    let res = if n < 0 { -(crate::real::errno() as i64) } else { n as i64 };
    crate::real::set_errno(saved);
    res
}

/// # Safety
/// As libaio's io_submit(3).
#[no_mangle]
pub unsafe extern "C" fn io_submit(ctx: *mut c_void, nr: c_long, iocbs: *mut *mut Iocb) -> c_int {
    let counting = !crate::guard::inside() && (process::active() || emu::active());
    // SAFETY: the caller promises nr valid iocb pointers.
    let any_image =
        emu::active() && nr > 0 && !iocbs.is_null() && (0..nr as usize).any(|i| unsafe { emulated(*iocbs.add(i)) });
    if !any_image {
        // SAFETY: forwarded caller promise.
        let r = unsafe { real_submit(ctx, nr, iocbs) };
        if counting && r > 0 {
            bypass::seen(Seen::Libaio, r as u64);
            kernel_inflight_add(ctx as usize, r as i64);
        }
        return r;
    }
    let Some(busy) = Busy::try_enter() else {
        // SAFETY: forwarded caller promise.
        return unsafe { real_submit(ctx, nr, iocbs) };
    };
    let virtual_time = domain::on();
    let arrival_ns = if virtual_time { domain::observe_ns().0 } else { domain::real_ns(libc::CLOCK_MONOTONIC) };
    let mut done: c_int = 0;
    for i in 0..nr as usize {
        // SAFETY: the caller promises nr valid iocb pointers.
        let p = unsafe { *iocbs.add(i) };
        // SAFETY: as above.
        if unsafe { emulated(p) } {
            // SAFETY: a valid iocb (caller promise).
            let cb = unsafe { &*p };
            // SAFETY: its buffers are valid as io_submit requires.
            let res = unsafe { data_half(cb) };
            let op = if matches!(cb.opcode, IO_CMD_PREAD | IO_CMD_PREADV) { Op::Read } else { Op::Write };
            let (complete_ns, wait, inflight_bytes) = if res > 0 {
                let wait = emu::aio_submitted(res as u64, op == Op::Write);
                let at = emu::schedule_request(op, cb.offset.max(0) as u64, res as u64, arrival_ns);
                (at.unwrap_or(arrival_ns), wait, res as u64)
            } else {
                (arrival_ns, DeviceWait::Precise, 0)
            };
            let event = IoEvent { data: cb.data, obj: p as u64, res, res2: 0 };
            HELD.lock().push(Held { ctx: ctx as usize, event, complete_ns, wait, inflight_bytes });
            HELD_COUNT.fetch_add(1, Ordering::Relaxed);
            done += 1;
            continue;
        }
        // SAFETY: one of the caller's iocb pointers.
        let r = unsafe { real_submit(ctx, 1, iocbs.add(i)) };
        if r < 0 {
            drop(busy);
            return if done > 0 { done } else { r };
        }
        // SAFETY: a valid iocb (caller promise).
        let cb = unsafe { &*p };
        if counting {
            bypass::seen(Seen::Libaio, 1);
            if emu::is_image_fd(cb.fildes as c_int) && cb.opcode != 2 && cb.opcode != 3 {
                // A request on the image the model does not serve (an eventfd, RWF flags).
                bypass::around_model(Seen::Libaio, 1);
            }
        }
        kernel_inflight_add(ctx as usize, 1);
        done += 1;
    }
    drop(busy);
    done
}

/// Moves held events of `ctx` whose instant has come (at most `room`) into `out`, in
/// completion order; returns how many, and the earliest instant still held with its wait.
///
/// # Safety
/// `out` is valid for `room` events.
unsafe fn take_ready(ctx: usize, now_ns: u64, out: *mut IoEvent, room: usize) -> (usize, Option<(u64, DeviceWait)>) {
    let mut held = HELD.lock();
    let mut n = 0;
    while n < room {
        let next = held.iter().enumerate().filter(|(_, h)| h.ctx == ctx).min_by_key(|(_, h)| h.complete_ns);
        match next {
            Some((i, h)) if h.complete_ns <= now_ns => {
                // SAFETY: n < room (the caller's promise on out).
                unsafe { out.add(n).write(h.event) };
                held.swap_remove(i).reaped();
                HELD_COUNT.fetch_sub(1, Ordering::Relaxed);
                n += 1;
            }
            _ => break,
        }
    }
    let earliest = held.iter().filter(|h| h.ctx == ctx).min_by_key(|h| h.complete_ns).map(|h| (h.complete_ns, h.wait));
    (n, earliest)
}

fn now_ns(virtual_time: bool) -> u64 {
    if virtual_time {
        domain::observe_ns().0
    } else {
        domain::real_ns(libc::CLOCK_MONOTONIC)
    }
}

fn ts_of(ns: u64) -> timespec {
    timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long }
}

/// # Safety
/// As libaio's io_getevents(3).
#[no_mangle]
pub unsafe extern "C" fn io_getevents(
    ctx: *mut c_void,
    min_nr: c_long,
    nr: c_long,
    events: *mut IoEvent,
    timeout: *mut timespec,
) -> c_int {
    let c = ctx as usize;
    let held_here = HELD_COUNT.load(Ordering::Relaxed) > 0 && HELD.lock().iter().any(|h| h.ctx == c);
    if !held_here || nr <= 0 || events.is_null() || min_nr > nr || crate::guard::inside() {
        // SAFETY: forwarded caller promise.
        let r = unsafe { real_getevents(ctx, min_nr, nr, events, timeout) };
        if r > 0 {
            kernel_inflight_add(c, -(r as i64));
        }
        return r;
    }
    let virtual_time = domain::on();
    let start = now_ns(virtual_time);
    let deadline = if timeout.is_null() {
        u64::MAX
    } else {
        // SAFETY: non-null: the caller's timespec.
        let t = unsafe { *timeout };
        if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
            return -libc::EINVAL;
        }
        start.saturating_add(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
    };
    let (nr, min_nr) = (nr as usize, min_nr.max(0) as usize);
    let mut got = 0usize;
    loop {
        let now = now_ns(virtual_time);
        // SAFETY: events is valid for nr events (caller promise); got < nr.
        let (n, earliest) = unsafe { take_ready(c, now, events.add(got), nr - got) };
        got += n;
        if got < nr && kernel_inflight(c) > 0 {
            let mut zero = ts_of(0);
            // SAFETY: as above; a zero timeout returns at once.
            let r = unsafe { real_getevents(ctx, 0, (nr - got) as c_long, events.add(got), &mut zero) };
            if r > 0 {
                kernel_inflight_add(c, -(r as i64));
                got += r as usize;
            }
        }
        if got >= min_nr || now >= deadline {
            return got as c_int;
        }
        let kernel = kernel_inflight(c) > 0;
        match earliest {
            Some((at, wait)) if !kernel || virtual_time => {
                // Only held events (or virtual time, where a kernel request cannot be
                // waited for without holding the clock): wait on the program's clock as the
                // earliest one's strategy says, in slices when the kernel also has requests.
                let until = at.min(deadline);
                let until = if kernel { until.min(now + 1_000_000) } else { until };
                emu::wait_on_clock(wait, until);
            }
            _ => {
                // The kernel's requests: wait for one in the kernel, no later than the next
                // held instant or the deadline.
                let until = earliest.map_or(u64::MAX, |(at, _)| at).min(deadline);
                let mut ts = ts_of(until.saturating_sub(now).min(1_000_000_000));
                // SAFETY: as above.
                let r = unsafe { real_getevents(ctx, 1, (nr - got) as c_long, events.add(got), &mut ts) };
                if r > 0 {
                    kernel_inflight_add(c, -(r as i64));
                    got += r as usize;
                } else if r < 0 && r != -libc::EINTR {
                    return if got > 0 { got as c_int } else { r };
                }
            }
        }
    }
}

/// # Safety
/// As libaio's io_destroy(3).
#[no_mangle]
pub unsafe extern "C" fn io_destroy(ctx: *mut c_void) -> c_int {
    type F = unsafe extern "C" fn(*mut c_void) -> c_int;
    let c = ctx as usize;
    if HELD_COUNT.load(Ordering::Relaxed) > 0 {
        let mut held = HELD.lock();
        let before = held.len();
        held.iter().filter(|h| h.ctx == c).for_each(Held::reaped);
        held.retain(|h| h.ctx != c);
        HELD_COUNT.fetch_sub((before - held.len()) as u64, Ordering::Relaxed);
    }
    KERNEL_INFLIGHT.lock().retain(|(x, _)| *x != c);
    call_real!(
        IO_DESTROY,
        F,
        {
            // SAFETY: (fallback) the kernel checks the context.
            let r = unsafe { libc::syscall(libc::SYS_io_destroy, ctx) };
            (if r < 0 { errno_neg() } else { r }) as c_int
        },
        ctx
    )
}

/// Held across fork by emu's prepare handler, released in the parent and the child.
pub fn fork_prepare() {
    std::mem::forget(HELD.lock());
    std::mem::forget(KERNEL_INFLIGHT.lock());
}

pub fn fork_parent() {
    KERNEL_INFLIGHT.unlock_after_fork();
    HELD.unlock_after_fork();
}

/// A fork's child has no contexts (the kernel does not copy them): nothing is held.
pub fn fork_child() {
    fork_parent();
    let mut held = HELD.lock();
    // The image's in-flight counters are a copy of the parent's: its held requests leave.
    held.iter().for_each(Held::reaped);
    held.clear();
    drop(held);
    KERNEL_INFLIGHT.lock().clear();
    HELD_COUNT.store(0, Ordering::Relaxed);
}

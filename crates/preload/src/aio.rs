//! libaio (`io_submit`, `io_getevents`, `io_destroy`): its wait taken on taken descriptors,
//! emulated on the `--emulate` image, counted everywhere else.
//!
//! **Taken** (any `smartcon run`): a read or write request (IO_CMD_PREAD, PWRITE, PREADV,
//! PWRITEV, `aio_rw_flags` 0 or RWF_HIPRI, without an eventfd) on a descriptor the library
//! takes (O_DIRECT on a regular file or block device) goes to the kernel unchanged: the
//! kernel does the I/O, so results, errno and data are the kernel's. What the library takes
//! is the wait. At submission each request enters its device's in-flight counters (the ones
//! the taken synchronous calls share) and the run's strategy decides how its completion will
//! be waited for, as for a synchronous call (`smart`: the engine's `decide` on the device's
//! stored profile, the backlog ahead and the System Monitor; `paper`: `decide_paper`).
//!
//! `smart` (and `smart-hybrid`, `smart-static`) decides again when the program waits, for
//! the request the wait ends with: a call that wants `min_nr` events returns when the
//! `min_nr`-th oldest of the context's requests is reaped (the kernel completes a device's
//! queue roughly in order), and what is ahead of *that* request is what was submitted
//! before it and is still in flight, not the whole queue it joined at submission. At fio's
//! `--iodepth=8` (`min_nr` 1) the submission decision saw 7 ahead and blocked
//! (`queue_over_limit`) for every request; by the time the program waits for the oldest,
//! the 7 were submitted after it, and the decision sees only the device's other traffic (the
//! program's other contexts and threads on the device, counted ahead whatever their order,
//! and other processes' requests as the System Monitor publishes them), the request's size
//! and the CPU, as for a synchronous call ([`awaited`]). Other strategies wait as the
//! oldest outstanding request of the context was decided at submission. Either way:
//!
//! - `spin` (and `sync`, which `smart` chooses on a very fast device): the completion ring
//!   is polled in user space (libaio's own `io_getevents` with a zero timeout reads the
//!   ring's head and tail and makes no system call while it is empty), up to the engine's
//!   spin budget; past it the rest is a kernel wait, as the engine's spin falls back;
//! - everything else (`block`; `hybrid`, which has no model of the device to sleep to here):
//!   the kernel's own wait, the program's call as it is.
//!
//! Each reaped request is counted as a taken I/O (`ios`, `bytes`, `by_strategy` as it was
//! waited for, `by_reason`, latency from submission to reap): a request reaped by a wait
//! `smart` decided is counted with that wait's decision; one the program reaped without
//! waiting (`min_nr` 0, a zero timeout) with its submission's. At most
//! [`TAKEN_INFLIGHT_MAX`] requests are outstanding as taken; past that they are passed to
//! the kernel untaken and named as libaio.
//!
//! **Emulated** (`--emulate`): on the image, a read or write request (IO_CMD_PREAD, PWRITE,
//! PREADV, PWRITEV, without an eventfd) is served as the synchronous calls are: its data
//! half is the real positional call, made at submission on the program's own descriptor (so
//! its result, errno and data are the kernel's), and its completion event is held back
//! until the program's clock (real or virtual) reaches the model's completion instant for
//! an arrival at submission. `io_getevents` hands out the held events in completion order,
//! waiting on that clock for `min_nr` of them as the run's strategy says for the earliest
//! one (decided at submission, as [`crate::emu`] decides a synchronous call's wait; a
//! virtual `block` wait counts as idle, so the clock jumps); requests the kernel has (other
//! descriptors of the same context) are collected alongside.
//!
//! Everything else goes to libaio as it is, and is counted as libaio that was not taken.
//!
//! libaio's functions return a negative errno rather than setting errno; these do the same.
//!
//! Non-goals: `io_pgetevents` (passed through; it does not see held events, and a taken
//! request it reaps stays in the device's in-flight counters until its context is
//! destroyed), `io_cancel` of a held event (the kernel's answer: it is not the kernel's),
//! the requests' `aio_reqprio`, fsync requests on the image (real, untimed: the model has
//! no cache to flush), and the user-space completion ring read directly by the program
//! (fio's `userspace_reap`: held events are not in it, and taken requests reaped that way
//! are never counted). A signal that arrives while a taken wait polls the ring runs its
//! handler and the poll goes on, where the kernel's wait would have returned EINTR.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use libc::{c_int, c_long, c_void, iovec, timespec};
use smartcon_devemu::Op;
use smartcon_engine::decision::{
    decide, decide_paper, DeviceState, Reason, Request, Strategy, SystemState, Thresholds,
};
use smartcon_engine::job::{StrategyChoice, SPIN_BUDGET_NS_DEFAULT};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::target::InFlight;

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
    /// The model's instant for it, and its arrival (submission) on the program's clock.
    complete_ns: u64,
    arrival_ns: u64,
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
    // Inside the library: libaio makes its system call with syscall(3), which would count
    // the requests again as the program's own raw io_submit.
    let _inside = Busy::try_enter();
    call_real!(
        IO_SUBMIT,
        SubmitFn,
        {
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

/// The kernel handed `n` events of `ctx` to the program.
///
/// # Safety
/// `events` holds `n` events the kernel wrote.
unsafe fn kernel_reaped(ctx: usize, events: *const IoEvent, n: usize) {
    // SAFETY: the caller's promise.
    unsafe { kernel_reaped_by(ctx, events, n, None) };
}

/// [`kernel_reaped`], counting the taken requests as `waited` says (a wait decided for
/// them), or as their submission's decision.
///
/// # Safety
/// `events` holds `n` events the kernel wrote.
unsafe fn kernel_reaped_by(ctx: usize, events: *const IoEvent, n: usize, waited: Option<Waited>) {
    kernel_inflight_add(ctx, -(n as i64));
    // SAFETY: the caller's promise.
    unsafe { reaped(ctx, events, n, waited) };
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

/// Taken requests outstanding at most (all contexts of the process); past it requests go
/// to the kernel untaken and are named as libaio.
pub const TAKEN_INFLIGHT_MAX: usize = 4096;
/// Descriptors whose device is remembered at most (the oldest is forgotten first).
const DEVICE_CACHE_MAX: usize = 64;
/// Vectored requests' buffers read at most to size one (the kernel's IOV_MAX).
const IOV_MAX: u64 = 1024;

/// What a taken request's wait is decided with: its descriptor's device.
#[derive(Clone)]
struct DeviceOf {
    fd: c_int,
    generation: u64,
    inflight: Arc<InFlight>,
    thresholds: Thresholds,
    /// The paper's rule's (`paper`): the device's declared class, Q = 0.
    paper: Thresholds,
    monitor: Arc<SystemMonitor>,
}

/// A taken request in the kernel: how its completion is waited for, and what it counts.
struct TakenReq {
    ctx: usize,
    /// The iocb's address, which the kernel returns in the event's `obj`.
    obj: u64,
    bytes: u64,
    write: bool,
    submit_ns: u64,
    /// Its place in submission order (the process's), which a batch's requests share no
    /// clock reading for.
    seq: u64,
    /// How it is waited for and counted: `Spin` (the ring polled) or `Block` (the kernel's
    /// wait).
    strategy: Strategy,
    reason: Option<Reason>,
    hipri: bool,
    /// Its device: the in-flight counters it is in until reaped, and what a wait for it is
    /// decided with.
    device: DeviceOf,
}

static DEVICES_OF: Spin<Vec<DeviceOf>> = Spin::new(Vec::new());
static TAKEN: Spin<Vec<TakenReq>> = Spin::new(Vec::new());
static TAKEN_COUNT: AtomicU64 = AtomicU64::new(0);
static TAKEN_SEQ: AtomicU64 = AtomicU64::new(0);

/// The thresholds a port on `device_id` decides with: its stored profile, else the
/// paper's defaults (the port has said so in the run's notes).
fn thresholds_of(device_id: &str) -> Thresholds {
    use smartcon_engine::profile::{profile_path, Profile};
    Profile::load(&profile_path(device_id)).unwrap_or_else(|_| Profile::paper_default(device_id)).thresholds()
}

/// The device of a descriptor the library takes, or `None` (not taken, or no port could be
/// opened on it). The first request on a descriptor opens the thread's port on it, as a
/// synchronous call would, to learn its device. Called inside the library.
fn device_of(fd: c_int) -> Option<DeviceOf> {
    let (generation, _, _) = crate::shim::taken_class(fd)?;
    if let Some(d) = DEVICES_OF.lock().iter().find(|d| d.fd == fd && d.generation == generation) {
        return Some(d.clone());
    }
    let dev = crate::fdtable::probe(fd)?.dev;
    let device_id = process::with_thread(|st| st.port(fd, generation).map(|p| p.device_id().to_string())).flatten()?;
    let d = DeviceOf {
        fd,
        generation,
        inflight: crate::devices::inflight(dev),
        thresholds: thresholds_of(&device_id),
        paper: thresholds_of(&device_id).paper(smartcon_engine::profile::declared_class_of(&device_id), 0),
        monitor: crate::devices::monitor().0,
    };
    let mut cache = DEVICES_OF.lock();
    cache.retain(|x| x.fd != fd);
    if cache.len() >= DEVICE_CACHE_MAX {
        cache.remove(0);
    }
    cache.push(d.clone());
    Some(d)
}

/// Enters the request in its device's in-flight counters and decides how its completion is
/// waited for, as a synchronous call's wait is decided: the strategy it is counted with
/// (`Spin`: the ring is polled; `Block`: the kernel waits) and the decision's reason.
fn decide_wait(d: &DeviceOf, bytes: u64, write: bool) -> (Strategy, Option<Reason>) {
    let ahead = d.inflight.enter(bytes);
    choose(strategy_choice(), d, bytes, write, ahead)
}

fn strategy_choice() -> StrategyChoice {
    crate::config::get().map_or(StrategyChoice::Smart, |c| c.strategy)
}

/// Whether `choice` decides a wait again when the program waits ([`awaited`]).
fn decides_at_wait(choice: StrategyChoice) -> bool {
    matches!(choice, StrategyChoice::Smart | StrategyChoice::SmartHybrid | StrategyChoice::SmartStatic)
}

/// The decision for a request of `bytes` on `d` with `ahead` in flight before it, fed as a
/// port feeds it (smart: the others' CPU demand against the threshold with the port's
/// hysteresis; paper: the machine-wide figure and the paper's rule); the strategy it is
/// waited for with here and the reason.
fn choose(
    choice: StrategyChoice,
    d: &DeviceOf,
    bytes: u64,
    write: bool,
    ahead: DeviceState,
) -> (Strategy, Option<Reason>) {
    let request = Request { bytes, write };
    let (decided, reason) = match choice {
        StrategyChoice::Fixed(s) => (s, None),
        StrategyChoice::Paper | StrategyChoice::PaperQ1 => {
            let queue_limit = u32::from(choice == StrategyChoice::PaperQ1);
            let system = SystemState { cpu_utilization_pct: d.monitor.machine_utilization_pct() };
            let r = decide_paper(request, ahead, system, &Thresholds { queue_limit, ..d.paper });
            (r.strategy, Some(r.reason))
        }
        _ => {
            crate::devices::register_current_thread(&d.monitor);
            let cpu = d.monitor.cpu_utilization_for(d.thresholds.cpu_threshold_pct);
            let r = decide(request, ahead, SystemState { cpu_utilization_pct: cpu }, &d.thresholds);
            (r.strategy, Some(r.reason))
        }
    };
    // `sync` (a very fast device: keep the CPU) is a poll here; the polling strategies have
    // no model of the device to sleep to, so the kernel waits for them.
    let waited = if matches!(decided, Strategy::Spin | Strategy::Sync) { Strategy::Spin } else { Strategy::Block };
    (waited, reason)
}

/// The bytes a request moves if it completes whole.
///
/// # Safety
/// `cb` is a valid iocb whose vector (PREADV/PWRITEV) is valid as io_submit requires.
unsafe fn request_bytes(cb: &Iocb) -> u64 {
    match cb.opcode {
        IO_CMD_PREADV | IO_CMD_PWRITEV if cb.buf != 0 => (0..cb.nbytes.min(IOV_MAX) as usize)
            // SAFETY: the caller's promise: nbytes valid iovecs at buf.
            .map(|i| unsafe { (*(cb.buf as *const iovec).add(i)).iov_len as u64 })
            .sum(),
        IO_CMD_PREADV | IO_CMD_PWRITEV => 0,
        _ => cb.nbytes,
    }
}

/// Registers the requests of `iocbs` the library takes, before they are submitted (so a
/// completion another thread reaps at once finds its entry); returns their indices.
/// Called inside the library.
///
/// # Safety
/// `iocbs` holds `nr` pointers, each null or a valid iocb (the caller's promise to
/// io_submit).
unsafe fn take_requests(ctx: usize, nr: usize, iocbs: *mut *mut Iocb) -> Vec<usize> {
    let mut taken = Vec::new();
    let submit_ns = smartcon_engine::clock::now_ns();
    for i in 0..nr {
        // SAFETY: the caller's promise: nr pointers.
        let p = unsafe { *iocbs.add(i) };
        if p.is_null() || TAKEN_COUNT.load(Ordering::Relaxed) as usize >= TAKEN_INFLIGHT_MAX {
            continue;
        }
        // SAFETY: non-null: a valid iocb (the caller's promise).
        let cb = unsafe { &*p };
        let rw = matches!(cb.opcode, IO_CMD_PREAD | IO_CMD_PWRITE | IO_CMD_PREADV | IO_CMD_PWRITEV);
        let fd = cb.fildes as c_int;
        if !rw || cb.flags & IOCB_FLAG_RESFD != 0 || cb.rw_flags & !libc::RWF_HIPRI != 0 || emu::is_image_fd(fd) {
            continue;
        }
        let Some(d) = device_of(fd) else { continue };
        // SAFETY: a valid iocb and vector (the caller's promise).
        let bytes = unsafe { request_bytes(cb) };
        let write = matches!(cb.opcode, IO_CMD_PWRITE | IO_CMD_PWRITEV);
        let (strategy, reason) = decide_wait(&d, bytes, write);
        let hipri = cb.rw_flags & libc::RWF_HIPRI != 0;
        let seq = TAKEN_SEQ.fetch_add(1, Ordering::Relaxed);
        TAKEN.lock().push(TakenReq {
            ctx,
            obj: p as u64,
            bytes,
            write,
            submit_ns,
            seq,
            strategy,
            reason,
            hipri,
            device: d,
        });
        TAKEN_COUNT.fetch_add(1, Ordering::Relaxed);
        taken.push(i);
    }
    taken
}

/// Removes ctx's entry for the request at `obj` (the oldest, should a stale one remain).
fn untake(ctx: usize, obj: u64) -> Option<TakenReq> {
    let mut taken = TAKEN.lock();
    let i = taken.iter().enumerate().filter(|(_, t)| t.ctx == ctx && t.obj == obj).min_by_key(|(_, t)| t.seq)?.0;
    let t = taken.swap_remove(i);
    TAKEN_COUNT.fetch_sub(1, Ordering::Relaxed);
    Some(t)
}

/// The kernel handed `n` events of `ctx` to the program: the taken requests among them
/// leave their device's counters and are counted as taken I/Os, as the wait that reaped
/// them was decided (`waited`), else as their submission's decision.
///
/// # Safety
/// `events` holds `n` events the kernel wrote.
unsafe fn reaped(ctx: usize, events: *const IoEvent, n: usize, waited: Option<Waited>) {
    if TAKEN_COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let now = smartcon_engine::clock::now_ns();
    for i in 0..n {
        // SAFETY: i < n (the caller's promise).
        let ev = unsafe { *events.add(i) };
        let Some(t) = untake(ctx, ev.obj) else { continue };
        t.device.inflight.leave(t.bytes);
        if t.hipri {
            bypass::hipri();
        }
        let (strategy, reason) = waited.unwrap_or((t.strategy, t.reason));
        process::count_taken(now.saturating_sub(t.submit_ns), ev.res.max(0) as u64, strategy, reason);
    }
}

/// How the requests a wait reaped are counted: the wait's strategy and its reason.
type Waited = (Strategy, Option<Reason>);

/// One of a context's taken requests as a wait sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Pending {
    seq: u64,
    bytes: u64,
    /// Its device (the address of the device's in-flight counters).
    device: usize,
    /// Where it is in [`TAKEN`].
    index: usize,
}

/// The request a wait for `min_nr` events of a context ends with, the `min_nr`-th oldest
/// of `pending` (the context's taken requests, in any order; reordered here), and what is
/// in flight ahead of it on its device: the context's older requests there; the process's
/// other requests there (`counts(awaited)` gives the process's count on the device, all of
/// it, and other processes'), counted ahead whatever their order, at the awaited request's
/// size (their sizes are not kept); and other processes' as the System Monitor publishes
/// them. `None` when the context has fewer than `min_nr` taken requests (the wait also
/// ends with a request the library does not follow) or `min_nr` is 0.
fn awaited(
    pending: &mut [Pending],
    min_nr: usize,
    counts: impl FnOnce(&Pending) -> (u32, (u32, u64)),
) -> Option<(Pending, DeviceState)> {
    if min_nr == 0 || pending.len() < min_nr {
        return None;
    }
    let (older, &mut a, later) = pending.select_nth_unstable_by_key(min_nr - 1, |p| p.seq);
    let (older_n, older_bytes) =
        older.iter().filter(|p| p.device == a.device).fold((0u32, 0u64), |(n, b), p| (n + 1, b + p.bytes));
    let from_a = 1 + later.iter().filter(|p| p.device == a.device).count() as u32;
    let (ours_on_device, others) = counts(&a);
    let process_other = ours_on_device.saturating_sub(older_n + from_a);
    let ahead = DeviceState {
        inflight_count: older_n.saturating_add(process_other).saturating_add(others.0),
        inflight_bytes: older_bytes
            .saturating_add(u64::from(process_other).saturating_mul(a.bytes))
            .saturating_add(others.1),
    };
    Some((a, ahead))
}

/// How `io_getevents` on `ctx`, asked for `min_nr` events, waits (`Spin`: the ring is
/// polled; `Block`: the kernel's wait), and for a wait decided now how the requests it
/// reaps are counted: `smart` decides for the request the wait ends with ([`awaited`]);
/// other strategies, and a wait `awaited` cannot place, wait as the context's oldest request
/// was decided at submission. `None` when ctx has no taken request.
fn taken_wait(ctx: usize, min_nr: usize) -> Option<(Strategy, Option<Waited>)> {
    if TAKEN_COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let choice = strategy_choice();
    let taken = TAKEN.lock();
    let submitted = (taken.iter().filter(|t| t.ctx == ctx).min_by_key(|t| t.seq)?.strategy, None);
    if !decides_at_wait(choice) {
        return Some(submitted);
    }
    let mut pending: Vec<Pending> = taken
        .iter()
        .enumerate()
        .filter(|(_, t)| t.ctx == ctx)
        .map(|(index, t)| Pending {
            seq: t.seq,
            bytes: t.bytes,
            device: Arc::as_ptr(&t.device.inflight) as usize,
            index,
        })
        .collect();
    let counts = |a: &Pending| {
        let inflight = &taken[a.index].device.inflight;
        (inflight.ours(), inflight.others())
    };
    let Some((a, ahead)) = awaited(&mut pending, min_nr, counts) else { return Some(submitted) };
    let (device, write) = (taken[a.index].device.clone(), taken[a.index].write);
    drop(taken);
    let decided = choose(choice, &device, a.bytes, write, ahead);
    Some((decided.0, Some(decided)))
}

/// A taken `spin` wait: polls ctx's completion ring (libaio's zero-timeout call reads it in
/// user space) until `min_nr` events, the deadline or the spin budget; past the budget the
/// kernel waits for the rest, no later than the deadline. Returns what io_getevents would.
///
/// # Safety
/// As io_getevents(3); `timeout` is null or valid and not zero.
unsafe fn poll_events(
    ctx: *mut c_void,
    min_nr: usize,
    nr: usize,
    events: *mut IoEvent,
    timeout: *mut timespec,
) -> c_int {
    let start = smartcon_engine::clock::now_ns();
    let deadline = if timeout.is_null() {
        u64::MAX
    } else {
        // SAFETY: non-null: the caller's timespec.
        let t = unsafe { *timeout };
        if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
            // SAFETY: forwarded caller promise (the kernel answers EINVAL).
            return unsafe { real_getevents(ctx, min_nr as c_long, nr as c_long, events, timeout) };
        }
        start.saturating_add((t.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec as u64))
    };
    let give_up_ns = start.saturating_add(SPIN_BUDGET_NS_DEFAULT);
    let mut got = 0usize;
    loop {
        let mut zero = ts_of(0);
        // SAFETY: events is valid for nr events (caller promise); got < nr.
        let r = unsafe { real_getevents(ctx, 0, (nr - got) as c_long, events.add(got), &mut zero) };
        if r < 0 {
            return if got > 0 { got as c_int } else { r };
        }
        got += r as usize;
        let now = smartcon_engine::clock::now_ns();
        if got >= min_nr || now >= deadline {
            return got as c_int;
        }
        if now >= give_up_ns {
            let mut rest = ts_of(deadline.saturating_sub(now));
            let ts: *mut timespec = if deadline == u64::MAX { std::ptr::null_mut() } else { &mut rest };
            // SAFETY: as above.
            let r = unsafe { real_getevents(ctx, (min_nr - got) as c_long, (nr - got) as c_long, events.add(got), ts) };
            return if r < 0 && got > 0 {
                got as c_int
            } else if r < 0 {
                r
            } else {
                (got + r as usize) as c_int
            };
        }
        std::hint::spin_loop();
    }
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
        let taken = match (counting && process::active() && nr > 0 && !iocbs.is_null(), Busy::try_enter()) {
            // SAFETY: the caller promises nr valid iocb pointers.
            (true, Some(_busy)) => unsafe { take_requests(ctx as usize, nr as usize, iocbs) },
            _ => Vec::new(),
        };
        // SAFETY: forwarded caller promise.
        let r = unsafe { real_submit(ctx, nr, iocbs) };
        let submitted = r.max(0) as usize;
        // Requests the kernel did not accept leave again, uncounted.
        for &i in taken.iter().filter(|&&i| i >= submitted) {
            // SAFETY: one of the caller's nr pointers.
            if let Some(t) = untake(ctx as usize, unsafe { *iocbs.add(i) } as u64) {
                t.device.inflight.leave(t.bytes);
            }
        }
        if counting && r > 0 {
            let untaken = submitted - taken.iter().filter(|&&i| i < submitted).count();
            if untaken > 0 {
                bypass::seen(Seen::Libaio, untaken as u64);
            }
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
            HELD.lock().push(Held { ctx: ctx as usize, event, complete_ns, arrival_ns, wait, inflight_bytes });
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
                let h = held.swap_remove(i);
                h.reaped();
                // How late the event reaches the program, as a synchronous call's return is
                // counted: the wait's wake-up and this call's own work.
                if h.inflight_bytes > 0 {
                    emu::note_lateness(
                        now_ns.saturating_sub(h.complete_ns),
                        h.complete_ns.saturating_sub(h.arrival_ns),
                    );
                }
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
    let usable = nr > 0 && !events.is_null() && min_nr <= nr && !crate::guard::inside();
    if !held_here || !usable {
        // A taken wait the ring is polled for: the program asked to wait (min_nr > 0, a
        // timeout that is not zero) for requests `spin` was decided for.
        // SAFETY: a non-null timeout is the caller's valid timespec.
        let zero_timeout = !timeout.is_null() && unsafe { (*timeout).tv_sec == 0 && (*timeout).tv_nsec == 0 };
        let wait = if usable && !held_here && min_nr > 0 && !zero_timeout {
            // Inside the library while deciding: the System Monitor's registration of a
            // thread reads /proc.
            Busy::try_enter().and_then(|_busy| taken_wait(c, min_nr as usize))
        } else {
            None
        };
        let (poll, waited) = match wait {
            Some((strategy, waited)) => (strategy == Strategy::Spin, waited),
            None => (false, None),
        };
        let r = if poll {
            // SAFETY: forwarded caller promise; the timeout is not zero.
            unsafe { poll_events(ctx, min_nr as usize, nr as usize, events, timeout) }
        } else {
            // SAFETY: forwarded caller promise.
            unsafe { real_getevents(ctx, min_nr, nr, events, timeout) }
        };
        if r > 0 {
            // SAFETY: the kernel wrote r events there.
            unsafe { kernel_reaped_by(c, events, r as usize, waited) };
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
                // SAFETY: the kernel wrote r events there.
                unsafe { kernel_reaped(c, events.add(got), r as usize) };
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
                    // SAFETY: the kernel wrote r events there.
                    unsafe { kernel_reaped(c, events.add(got), r as usize) };
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
    if TAKEN_COUNT.load(Ordering::Relaxed) > 0 {
        let mut taken = TAKEN.lock();
        let before = taken.len();
        taken.iter().filter(|t| t.ctx == c).for_each(|t| t.device.inflight.leave(t.bytes));
        taken.retain(|t| t.ctx != c);
        TAKEN_COUNT.fetch_sub((before - taken.len()) as u64, Ordering::Relaxed);
    }
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

/// Held across fork by the prepare handler ([`crate::lifecycle`]), released in the parent
/// and the child.
pub fn fork_prepare() {
    std::mem::forget(HELD.lock());
    std::mem::forget(KERNEL_INFLIGHT.lock());
    std::mem::forget(TAKEN.lock());
    std::mem::forget(DEVICES_OF.lock());
}

pub fn fork_parent() {
    DEVICES_OF.unlock_after_fork();
    TAKEN.unlock_after_fork();
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
    // Taken requests are the parent's; the devices' counters the child uses are its own.
    TAKEN.lock().clear();
    TAKEN_COUNT.store(0, Ordering::Relaxed);
    DEVICES_OF.lock().clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartcon_engine::decision::DeviceClass;

    fn pending(seqs: &[(u64, usize)]) -> Vec<Pending> {
        seqs.iter().enumerate().map(|(index, &(seq, device))| Pending { seq, bytes: 4096, device, index }).collect()
    }

    /// vda's stored profile on the session's host: fast, Q = 0, 128 KiB, CPU 62%.
    const VDA: Thresholds = Thresholds {
        class: DeviceClass::Fast,
        size_threshold_bytes: 128 << 10,
        cpu_threshold_pct: 62,
        queue_limit: 0,
        spin_cheaper_bytes_max: 0,
        spin_cheaper_write_bytes_max: 0,
        very_fast_bytes_max: u64::MAX,
        very_fast_write_bytes_max: u64::MAX,
        size_threshold_busy_bytes: 0,
    };

    fn decided(ahead: DeviceState, cpu: u32) -> (Strategy, Reason) {
        let r = decide(Request { bytes: 4096, write: false }, ahead, SystemState { cpu_utilization_pct: cpu }, &VDA);
        (r.strategy, r.reason)
    }

    /// fio's libaio at --iodepth=8 reaps with min_nr 1: the wait ends with the oldest of the
    /// 8, and nothing of the context is ahead of it. At submission the same request saw 7
    /// ahead and blocked (queue_over_limit); at the wait, with the CPU free, it spins.
    #[test]
    fn a_wait_for_one_of_eight_is_decided_for_the_oldest_with_nothing_ahead() {
        // Submitted as seq 10..18, listed out of order (swap_remove reorders TAKEN).
        let mut p = pending(&[(14, 1), (11, 1), (17, 1), (10, 1), (12, 1), (16, 1), (13, 1), (15, 1)]);
        let (a, ahead) = awaited(&mut p, 1, |_| (8, (0, 0))).unwrap();
        assert_eq!(a.seq, 10);
        assert_eq!((ahead.inflight_count, ahead.inflight_bytes), (0, 0));
        assert_eq!(decided(ahead, 10), (Strategy::Spin, Reason::CpuAvailable));
        // What the submission saw for the 8th request: 7 ahead.
        assert_eq!(decided(DeviceState { inflight_count: 7, inflight_bytes: 7 * 4096 }, 10).1, Reason::QueueOverLimit);
        // The CPU still decides: others' demand over the threshold blocks.
        assert_eq!(decided(ahead, 90), (Strategy::Block, Reason::CpuBusy));
    }

    /// A wait for min_nr events ends with the min_nr-th oldest: the min_nr - 1 older ones
    /// are ahead of it, the later ones are not.
    #[test]
    fn a_wait_for_several_has_the_older_ones_ahead() {
        let mut p = pending(&[(5, 1), (3, 1), (4, 1), (1, 1), (2, 1)]);
        let (a, ahead) = awaited(&mut p, 3, |_| (5, (0, 0))).unwrap();
        assert_eq!(a.seq, 3);
        assert_eq!((ahead.inflight_count, ahead.inflight_bytes), (2, 2 * 4096));
        assert_eq!(decided(ahead, 10), (Strategy::Block, Reason::QueueOverLimit));
    }

    /// Requests of the process on the same device outside this context (another context,
    /// another thread's synchronous call) are ahead whatever their order, at the awaited
    /// request's size; other processes' as published; other devices' not at all.
    #[test]
    fn the_devices_other_traffic_is_ahead() {
        // Context: seq 1 and 2 on device 1, seq 0 on device 2 (older, but another device).
        let mut p = pending(&[(2, 1), (0, 2), (1, 1)]);
        // min_nr 2: the awaited is seq 1, on device 1, with seq 0 (device 2) not ahead.
        let (a, ahead) = awaited(&mut p, 2, |a| {
            assert_eq!(a.device, 1);
            (2, (0, 0))
        })
        .unwrap();
        assert_eq!((a.seq, ahead.inflight_count), (1, 0));
        // The process has 5 on device 1: 2 of them this context's, 3 elsewhere; 2 requests
        // of other processes with 64 KiB between them.
        let mut p = pending(&[(2, 1), (0, 2), (1, 1)]);
        let (_, ahead) = awaited(&mut p, 2, |_| (5, (2, 64 << 10))).unwrap();
        assert_eq!((ahead.inflight_count, ahead.inflight_bytes), (5, 3 * 4096 + (64 << 10)));
        // Counters that lag behind (a request entered but not yet in `ours`) never go below 0.
        let mut p = pending(&[(2, 1), (1, 1)]);
        let (_, ahead) = awaited(&mut p, 1, |_| (0, (0, 0))).unwrap();
        assert_eq!(ahead.inflight_count, 0);
    }

    /// A wait the library cannot place: no event wanted, or fewer taken requests than
    /// wanted (the rest are requests it does not follow).
    #[test]
    fn a_wait_beyond_the_taken_requests_is_not_placed() {
        let mut p = pending(&[(1, 1), (2, 1)]);
        assert!(awaited(&mut p, 0, |_| (2, (0, 0))).is_none());
        assert!(awaited(&mut p, 3, |_| (2, (0, 0))).is_none());
        assert!(awaited(&mut [], 1, |_| (0, (0, 0))).is_none());
    }
}

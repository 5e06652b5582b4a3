//! An emulated device behind one image file (`smartcon run --emulate SPEC=PATH`).
//!
//! Every read and write the program makes on a descriptor of PATH (matched by device and
//! inode, so any name, dup or inherited descriptor counts) is served in two halves: the data
//! by the real call on the program's own descriptor (the image file holds the bytes, with
//! the kernel's results, errno, offsets and alignment rules), the timing by the device model
//! (`smartcon_devemu::FcfsDevice`, FCFS over the model's channels, one model per process):
//!
//! - real time: the call returns when the real monotonic clock reaches the model's
//!   completion for an arrival at the call's start, so the data half's own time is inside
//!   the model's, not added to it;
//! - virtual time ([`crate::vclock`]): the call waits on the virtual clock for the
//!   completion, which costs no real time when every thread waits, and the data half's time
//!   is hidden from the program.
//!
//! How the thread waits is the run's strategy (`SMARTCON_PRELOAD_STRATEGY`, as the engine's
//! emulated targets honour it; [`crate::vclock::sleep::DeviceWait`]):
//!
//! - `block`: a timed kernel wait to the instant; `spin`: a busy-wait to it, past the
//!   engine's spin budget a kernel wait for the rest; `hybrid`: sleep, then poll;
//! - `smart` and `smart-hybrid`: the engine's `decide` per request, on the model's
//!   thresholds (its stored profile, else the engine's built-in profile of the model), the
//!   image's in-flight counters (this process's served requests) and the System Monitor
//!   (under virtual time the host's CPU is not the program's: the decision sees an idle one);
//! - no strategy (a sweep, a guest kernel: only the image is served): the reference wait,
//!   which lands on the model's instant (sleep, then a spin of 200 us to 2 ms).
//!
//! Each served request is counted by the way it waited (`by_strategy`, `by_reason` in the
//! `emu_process` record).
//!
//! A missing PATH is created as a sparse file of the device's capacity (`size=` in SPEC,
//! else the preset's); an existing one is used as it is, whatever its size.
//!
//! Service layer: below the descriptor routing and the interposed calls; the fork and exit
//! handlers that tie it to them are registered by [`crate::lifecycle`].
//!
//! Non-goals: a page cache in front of the device (every call on PATH is a device request,
//! O_DIRECT or not), memory-mapped I/O, vectored calls with more than one buffer (their
//! data is served, untimed), one model shared by several processes (each process image has
//! its own, with its own head position and queue), and queue disciplines other than FCFS.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use libc::{c_int, off_t, size_t, ssize_t};
use smartcon_devemu::{parse_spec, EmuSpec, FcfsDevice, Op};
use smartcon_engine::decision::{decide, DeviceState, Reason, Request, Strategy, SystemState, Thresholds};
use smartcon_engine::job::{StrategyChoice, SPIN_BUDGET_NS_DEFAULT};
use smartcon_engine::target::InFlight;
use smartcon_preload_contract::env;
use smartcon_preload_contract::record::{EmuProcessRecord, Record};

use crate::guard::{Busy, Spin};
use crate::real::{self, FD_MAX};
use crate::vclock::domain;
use crate::vclock::sleep::{self, DeviceWait};

struct Emu {
    label: String,
    path: String,
    dev: u64,
    ino: u64,
    virtual_time: bool,
    stats_path: Option<String>,
    /// The run's strategy; `None`: the reference wait.
    strategy: Option<StrategyChoice>,
    /// What `smart` decides on (the model's thresholds); present for the deciding choices.
    thresholds: Option<Thresholds>,
    /// This process's served requests in flight on the image (what is ahead of a request).
    inflight: InFlight,
}

static EMU: OnceLock<Emu> = OnceLock::new();
static DEVICE: Spin<Option<FcfsDevice>> = Spin::new(None);
/// Per descriptor: 0 not looked at yet, 1 the image, 2 something else.
static FD_CLASS: [AtomicU8; FD_MAX] = [const { AtomicU8::new(0) }; FD_MAX];
static READS: AtomicU64 = AtomicU64::new(0);
static WRITES: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
/// Sum over requests of completion minus arrival on the model.
static DEVICE_NS: AtomicU64 = AtomicU64::new(0);
/// Descriptors of the image the program opened (any name).
static IMAGE_OPENS: AtomicU64 = AtomicU64::new(0);
static FLUSHED: AtomicBool = AtomicBool::new(false);
static IMAGE_PID: AtomicU64 = AtomicU64::new(0);
static START_REAL_NS: AtomicU64 = AtomicU64::new(0);
/// Served requests by the way they waited, and by the decision's reason.
static BY_STRATEGY: [AtomicU64; Strategy::COUNT] = [const { AtomicU64::new(0) }; Strategy::COUNT];
static BY_REASON: [AtomicU64; Reason::ALL.len()] = [const { AtomicU64::new(0) }; Reason::ALL.len()];
static SPIN_FELL_BACK: AtomicU64 = AtomicU64::new(0);

fn getenv(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.is_empty())
}

fn note(text: &str) {
    let line = format!("smartcon: note: {text}\n");
    // SAFETY: a valid buffer of its length; fd 2 may be closed (the error is ignored).
    unsafe { libc::syscall(libc::SYS_write, 2, line.as_ptr(), line.len()) };
}

/// Opens (creating it if missing, as a sparse file of `capacity_bytes`) the image and
/// returns its device and inode.
fn prepare_image(path: &str, capacity_bytes: u64) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let f = match std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(path) {
        Ok(f) => {
            f.set_len(capacity_bytes)?;
            f
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::File::open(path)?,
        Err(e) => return Err(e),
    };
    let m = f.metadata()?;
    Ok((m.dev(), m.ino()))
}

/// Reads the environment and turns emulation (and virtual time) on; from the constructor,
/// after the configuration (whose strategy the waits follow). Returns whether emulation is
/// on (the caller then registers the fork and exit handlers).
pub fn init() -> bool {
    let (Some(spec_text), Some(path)) = (getenv(env::EMU_SPEC), getenv(env::EMU_PATH)) else { return false };
    let spec = match parse_spec(&spec_text) {
        Ok(s) => s,
        Err(e) => {
            note(&format!("--emulate {spec_text}: {e}; the program runs without emulation"));
            return false;
        }
    };
    let (dev, ino) = match prepare_image(&path, spec.capacity_bytes) {
        Ok(v) => v,
        Err(e) => {
            note(&format!("--emulate image {path}: {e}; the program runs without emulation"));
            return false;
        }
    };
    let label = spec.label.clone();
    let strategy = crate::config::get().map(|c| c.strategy);
    let thresholds = match strategy {
        Some(StrategyChoice::Fixed(_)) | None => None,
        Some(_) => Some(model_thresholds(&spec)),
    };
    let device = match FcfsDevice::new(spec) {
        Ok(d) => d,
        Err(e) => {
            note(&format!("{e}; the program runs without emulation"));
            return false;
        }
    };
    *DEVICE.lock() = Some(device);
    let virtual_time = getenv(env::VIRTUAL_TIME).as_deref() == Some("1");
    START_REAL_NS.store(domain::real_ns(libc::CLOCK_MONOTONIC), Ordering::Relaxed);
    IMAGE_PID.store(std::process::id() as u64, Ordering::Relaxed);
    let emu = Emu {
        label,
        path,
        dev,
        ino,
        virtual_time,
        stats_path: getenv(env::EMU_STATS),
        strategy,
        thresholds,
        inflight: InFlight::default(),
    };
    if EMU.set(emu).is_err() {
        return false;
    }
    if virtual_time {
        domain::enable();
    }
    true
}

/// The thresholds `smart` decides on for the model: its stored profile (`smartcon probe` on
/// the emulated device), else the engine's built-in profile of the model, as the engine's
/// own ports on an `emu:` target take them. The built-in one is read off an emulated target
/// of the same model (its RAM store cut to 1 MiB: the profile depends on the timing model
/// only), so the rules exist once, in the engine.
fn model_thresholds(spec: &EmuSpec) -> Thresholds {
    // Inside the library: the files read here (the stored profile, the host's figures) go
    // to the real calls, never through a port opened from the constructor.
    let _busy = Busy::try_enter();
    let stored = smartcon_engine::profile::profile_path(&spec.label);
    if let Ok(p) = smartcon_engine::profile::Profile::load(&stored) {
        return p.thresholds();
    }
    let small = EmuSpec { capacity_bytes: 1 << 20, faults: None, ..spec.clone() };
    let target = smartcon_engine::target::open(
        &smartcon_engine::target::TargetSpec::Emu(small),
        smartcon_engine::target::OpenOptions::default(),
    );
    match target.ok().and_then(|t| t.builtin_profile()) {
        Some(p) => p.thresholds(),
        None => smartcon_engine::profile::Profile::paper_default(&spec.label).thresholds(),
    }
}

/// Held across fork by the prepare handler ([`crate::lifecycle`]).
pub fn fork_prepare() {
    std::mem::forget(DEVICE.lock());
}

pub fn fork_parent() {
    DEVICE.unlock_after_fork();
}

/// A fork's child: the model's lock released, its own counters and record.
pub fn fork_child() {
    DEVICE.unlock_after_fork();
    for c in [&READS, &WRITES, &BYTES, &DEVICE_NS, &IMAGE_OPENS, &SPIN_FELL_BACK]
        .into_iter()
        .chain(&BY_STRATEGY)
        .chain(&BY_REASON)
    {
        c.store(0, Ordering::Relaxed);
    }
    FLUSHED.store(false, Ordering::Relaxed);
    IMAGE_PID.store(std::process::id() as u64, Ordering::Relaxed);
    START_REAL_NS.store(domain::real_ns(libc::CLOCK_MONOTONIC), Ordering::Relaxed);
}

/// Forgets what is known of descriptor `fd` (it was opened, closed or duplicated onto).
pub fn forget(fd: c_int) {
    if let Some(c) = usize::try_from(fd).ok().and_then(|i| FD_CLASS.get(i)) {
        c.store(0, Ordering::Relaxed);
    }
}

/// Whether `fd` is a descriptor of the emulated image (false when nothing is emulated).
pub fn is_image_fd(fd: c_int) -> bool {
    EMU.get().is_some_and(|emu| is_image(emu, fd))
}

/// Called after `fd` was opened: counts the image's opens (a run whose program opened the
/// image and had nothing served is then reported as such).
pub fn note_open(fd: c_int) {
    if is_image_fd(fd) {
        IMAGE_OPENS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether `fd` is a descriptor of the image.
fn is_image(emu: &Emu, fd: c_int) -> bool {
    let Some(slot) = usize::try_from(fd).ok().and_then(|i| FD_CLASS.get(i)) else { return false };
    match slot.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            // SAFETY: an all-zero stat is a valid value; fstat only writes it.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            let saved = real::errno();
            // SAFETY: a valid out pointer; a bad descriptor is an error, not UB.
            let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
            real::set_errno(saved);
            if !ok {
                return false;
            }
            let mine = st.st_dev == emu.dev && st.st_ino == emu.ino;
            slot.store(if mine { 1 } else { 2 }, Ordering::Relaxed);
            mine
        }
    }
}

/// The data buffer of a served call.
#[derive(Clone, Copy)]
pub enum Buf {
    Read(*mut u8),
    Write(*const u8),
}

/// Serves one read or write on the image: `Some(result)` when `fd` is the image (the
/// result and errno are the real call's, returned at the model's completion), `None` when
/// the call is not the emulator's. `off` is `None` for read/write (the file offset).
///
/// # Safety
/// As pread(2)/pwrite(2) (or read(2)/write(2) when `off` is `None`): the buffer is valid for
/// `len` bytes.
pub unsafe fn serve(fd: c_int, buf: Buf, len: size_t, off: Option<off_t>) -> Option<ssize_t> {
    let read = matches!(buf, Buf::Read(_));
    serve_with(fd, read, off, || {
        // SAFETY: the caller's promise on the buffer.
        unsafe {
            match (buf, off) {
                (Buf::Read(p), Some(o)) => real::pread(fd, p.cast(), len, o),
                (Buf::Write(p), Some(o)) => real::pwrite(fd, p.cast(), len, o),
                (Buf::Read(p), None) => real::read(fd, p.cast(), len),
                (Buf::Write(p), None) => real::write(fd, p.cast(), len),
            }
        }
    })
}

/// As [`serve`], with the data half given as the real call to make on `fd` (a vectored
/// call, `preadv2` with its flags): `off` is where the model puts the request (`None`: the
/// file offset before the call).
pub fn serve_with(fd: c_int, read: bool, off: Option<off_t>, data: impl FnOnce() -> ssize_t) -> Option<ssize_t> {
    let emu = EMU.get()?;
    if !is_image(emu, fd) {
        return None;
    }
    let busy = Busy::try_enter()?;
    let arrival_ns = if emu.virtual_time { domain::observe_ns().0 } else { domain::real_ns(libc::CLOCK_MONOTONIC) };
    let offset = match off {
        Some(o) => o,
        None => {
            let saved = real::errno();
            // SAFETY: lseek has no memory preconditions.
            let o = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
            real::set_errno(saved);
            o
        }
    };
    let n = data();
    if n <= 0 {
        // An error or end of file: the kernel answered without the device.
        return Some(n);
    }
    let saved = real::errno();
    let op = if read { Op::Read } else { Op::Write };
    let bytes = n as u64;
    let entered = Entered::new(&emu.inflight, bytes);
    let wait = choose(emu, bytes, !read, entered.ahead);
    let complete_ns = schedule(op, offset.max(0) as u64, bytes, arrival_ns)?;
    // Not inside the library while waiting: a signal handler that runs meanwhile reads the
    // virtual clock (the real one is behind it) and may do its own I/O.
    drop(busy);
    let fell_back = if emu.virtual_time {
        sleep::virtual_wait_until(wait, complete_ns)
    } else {
        sleep::real_wait_until(wait, complete_ns)
    };
    drop(entered);
    if fell_back {
        SPIN_FELL_BACK.fetch_add(1, Ordering::Relaxed);
    }
    real::set_errno(saved);
    Some(n)
}

/// A request in the image's in-flight counters until dropped (also on a panic).
struct Entered<'a> {
    inflight: &'a InFlight,
    bytes: u64,
    /// What was in flight ahead of it.
    ahead: DeviceState,
}

impl<'a> Entered<'a> {
    fn new(inflight: &'a InFlight, bytes: u64) -> Entered<'a> {
        let ahead = inflight.enter(bytes);
        Entered { inflight, bytes, ahead }
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.inflight.leave(self.bytes);
    }
}

/// How one served request waits, and counts it: a fixed strategy's own way, the engine's
/// decision for the deciding ones, the reference wait without a strategy.
fn choose(emu: &Emu, bytes: u64, write: bool, ahead: DeviceState) -> DeviceWait {
    let (strategy, reason) = match (emu.strategy, &emu.thresholds) {
        (None, _) => return DeviceWait::Precise,
        (Some(StrategyChoice::Fixed(s)), _) => (s, None),
        (Some(choice), Some(t)) => {
            let d = decide(Request { bytes, write }, ahead, system_state(emu, t.cpu_threshold_pct), t);
            let s = match (choice, d.strategy) {
                (StrategyChoice::SmartHybrid, Strategy::Spin) => Strategy::Hybrid,
                (_, s) => s,
            };
            (s, Some(d.reason))
        }
        // A deciding choice always has thresholds (init); block is the safe wait.
        (Some(_), None) => (Strategy::Block, None),
    };
    BY_STRATEGY[strategy.index()].fetch_add(1, Ordering::Relaxed);
    if let Some(r) = reason {
        BY_REASON[r.index()].fetch_add(1, Ordering::Relaxed);
    }
    device_wait(strategy)
}

/// The wait of a strategy on a served request: `sync` (programmed I/O) keeps the thread
/// busy as `spin` does; the polling strategies sleep, then poll (the reference wait).
fn device_wait(strategy: Strategy) -> DeviceWait {
    match strategy {
        Strategy::Block => DeviceWait::Block,
        Strategy::Spin | Strategy::Sync => DeviceWait::Spin { budget_ns: SPIN_BUDGET_NS_DEFAULT },
        _ => DeviceWait::Precise,
    }
}

/// What `smart` reads of the machine: the System Monitor's figure for the others' CPU
/// demand, with this thread's own waits left out (real time); an idle CPU under virtual
/// time, where the host's load is not the program's.
fn system_state(emu: &Emu, cpu_threshold_pct: u32) -> SystemState {
    if emu.virtual_time {
        return SystemState::default();
    }
    let (monitor, note_text) = crate::devices::monitor();
    if let Some(t) = note_text {
        note(&t);
    }
    crate::devices::register_current_thread(&monitor);
    // Compared with hysteresis against the reading's noise, as SmartPort feeds smart.
    SystemState { cpu_utilization_pct: monitor.cpu_utilization_for(cpu_threshold_pct) }
}

/// A libaio request on the image ([`crate::aio`]) was submitted with `bytes` moved: it
/// enters the image's in-flight counters until [`aio_reaped`], and how the program's
/// `io_getevents` waits for its completion is decided now, as a synchronous call's wait is
/// (and counted the same way).
pub fn aio_submitted(bytes: u64, write: bool) -> DeviceWait {
    let Some(emu) = EMU.get() else { return DeviceWait::Precise };
    let ahead = emu.inflight.enter(bytes);
    choose(emu, bytes, write, ahead)
}

/// The request of [`aio_submitted`] was handed to the program (or its context destroyed).
pub fn aio_reaped(bytes: u64) {
    if let Some(emu) = EMU.get() {
        emu.inflight.leave(bytes);
    }
}

/// Waits on the program's clock (virtual or real) until `until_ns`, as `wait` says
/// (libaio's `io_getevents` for a held completion).
pub fn wait_on_clock(wait: DeviceWait, until_ns: u64) {
    let fell_back =
        if domain::on() { sleep::virtual_wait_until(wait, until_ns) } else { sleep::real_wait_until(wait, until_ns) };
    if fell_back {
        SPIN_FELL_BACK.fetch_add(1, Ordering::Relaxed);
    }
}

/// Puts one request (libaio's, served by [`crate::aio`]) on the model and counts it: its
/// completion instant, `None` when nothing is emulated.
pub fn schedule_request(op: Op, offset: u64, bytes: u64, arrival_ns: u64) -> Option<u64> {
    EMU.get()?;
    schedule(op, offset, bytes, arrival_ns)
}

/// Puts one request on the model and counts it: its completion instant.
fn schedule(op: Op, offset: u64, bytes: u64, arrival_ns: u64) -> Option<u64> {
    let complete_ns = {
        let mut d = DEVICE.lock();
        d.as_mut()?.schedule(op, offset, bytes, arrival_ns).complete_ns
    };
    match op {
        Op::Read => READS.fetch_add(1, Ordering::Relaxed),
        Op::Write => WRITES.fetch_add(1, Ordering::Relaxed),
    };
    BYTES.fetch_add(bytes, Ordering::Relaxed);
    DEVICE_NS.fetch_add(complete_ns.saturating_sub(arrival_ns), Ordering::Relaxed);
    Some(complete_ns)
}

/// Whether emulation is on in this process (any descriptor may be the image).
#[inline]
pub fn active() -> bool {
    EMU.get().is_some()
}

/// Appends this image's `emu_process` record (once per image: exit, `_exit` or exec).
pub fn flush() {
    let Some(emu) = EMU.get() else { return };
    // SAFETY: getpid has no preconditions (a vfork child has its own pid and skips).
    if unsafe { libc::getpid() } as u64 != IMAGE_PID.load(Ordering::Relaxed) || FLUSHED.swap(true, Ordering::AcqRel) {
        return;
    }
    let Some(path) = &emu.stats_path else { return };
    let clock = domain::stats();
    let wall_ns = domain::real_ns(libc::CLOCK_MONOTONIC).saturating_sub(START_REAL_NS.load(Ordering::Relaxed));
    // SAFETY: an all-zero rusage is valid; getrusage only writes it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv_ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    let by_strategy = std::array::from_fn(|i| BY_STRATEGY[i].load(Ordering::Relaxed));
    let by_reason = std::array::from_fn(|i| BY_REASON[i].load(Ordering::Relaxed));
    let record = EmuProcessRecord {
        kind: EmuProcessRecord::TYPE.into(),
        pid: std::process::id(),
        spec: emu.label.clone(),
        path: emu.path.clone(),
        virtual_time: emu.virtual_time,
        reads: READS.load(Ordering::Relaxed),
        writes: WRITES.load(Ordering::Relaxed),
        bytes: BYTES.load(Ordering::Relaxed),
        device_ns: DEVICE_NS.load(Ordering::Relaxed),
        wall_ns,
        skew_ns: clock.skew_ns,
        jumped_ns: clock.jumped_ns,
        jumps: clock.jumps,
        cpu_ns: tv_ns(ru.ru_utime) + tv_ns(ru.ru_stime),
        image_opens: IMAGE_OPENS.load(Ordering::Relaxed),
        around_model: crate::bypass::around_model_by().into_iter().map(|(k, n)| (k.to_string(), n)).collect(),
        strategy: emu.strategy.map(|s| s.name().to_string()),
        by_strategy: crate::record::strategies_by_name(&by_strategy),
        by_reason: crate::record::reasons_by_name(&by_reason),
        spin_fell_back: SPIN_FELL_BACK.load(Ordering::Relaxed),
    };
    let Ok(line) = serde_json::to_string(&record) else { return };
    let _busy = Busy::try_enter();
    // One write of one line on an O_APPEND file: concurrent processes' lines do not mix.
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).create(true).open(path) {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

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
use smartcon_preload_contract::record::{EmuProcessRecord, LatenessRecord, Record};

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
/// The latest completion the model handed out (a flush completes when it is reached).
static LAST_COMPLETE_NS: AtomicU64 = AtomicU64::new(0);
/// Flushes (`fsync`/`fdatasync` on the image) and the real time their data half took.
static FLUSHES: AtomicU64 = AtomicU64::new(0);
static FLUSH_REAL_NS: AtomicU64 = AtomicU64::new(0);
/// How late each served request returned to the program after the model's completion,
/// on the program's clock, as a share of the request's model time: buckets up to
/// [`LATE_EDGES_PPM`], then one past them.
static LATE_HIST: [AtomicU64; LATE_EDGES_PPM.len() + 1] = [const { AtomicU64::new(0) }; LATE_EDGES_PPM.len() + 1];
static LATE_MAX_NS: AtomicU64 = AtomicU64::new(0);
static LATE_SUM_NS: AtomicU64 = AtomicU64::new(0);
/// Requests whose data half alone ran past the model's completion (the host's call was
/// slower than the model), and (virtual time) the real ns held back from the clock for them.
static DATA_OVERRAN: AtomicU64 = AtomicU64::new(0);
static DATA_HIDDEN_NS: AtomicU64 = AtomicU64::new(0);

/// UML's ubd thread (a clone helper, crate::helper) makes one `pread64`/`pwrite64` per page
/// segment of a guest request. A piece that continues the helper's previous one (same
/// direction, starting where it ended) and is issued within [`PIECE_GAP_NS`] of real time
/// after that one returned is part of the same guest request: it arrives on the model at
/// the previous piece's completion, so the model sees one transfer (a sequential
/// continuation), not a new request that has just missed its sector and waits a
/// revolution.
///
/// The request waits once, at its end (the seed's emulator is handed a whole request and
/// moves its data while the OS is paused): a helper's piece returns as soon as its data
/// half is done, and the wait for the model's completion is put off ([`Piece::pending`])
/// until the helper does something else, its next piece that does not continue this one,
/// or any other read, write, flush or poll (UML's ubd thread writes the finished requests
/// back to the kernel), and is then made for the whole request, with its lateness counted
/// once. Waiting after each piece let the guest's CPU run on for a wake-up's real time
/// per piece while the model gives a page microseconds, so the next piece was issued past
/// the request's completion (`pieces_due_before_issue`).
///
/// Of the helper's last piece: the helper, where it ended, its completion, the real
/// instant it returned, whether it wrote, the arrival of the request's first piece, and
/// the request's wait when it is still to be made.
static PIECE: Spin<Option<Piece>> = Spin::new(None);

#[derive(Clone, Copy)]
struct Piece {
    helper: usize,
    end: u64,
    complete_ns: u64,
    returned_real_ns: u64,
    write: bool,
    first_arrival_ns: u64,
    pending: Option<Pending>,
}

/// A helper's request whose wait is put off: how it waits, and (virtual time) the domain's
/// generation when every other thread was idle from its first piece on ([`finish`]).
#[derive(Clone, Copy)]
struct Pending {
    wait: DeviceWait,
    idle_since: Option<u64>,
}
/// Real ns between a helper's piece returning and its next piece that still joins it.
pub const PIECE_GAP_NS: u64 = 200_000;
/// Pieces joined to the previous one.
static PIECES_JOINED: AtomicU64 = AtomicU64::new(0);
static PIECES_DUE_BEFORE_ISSUE: AtomicU64 = AtomicU64::new(0);

/// Lost timer interrupts repaired by the interposed timer calls (`vtimer::kick_if_lost`):
/// the `emu_process` record's `lost_ticks_kicked`.
pub(crate) static LOST_TICKS_KICKED: AtomicU64 = AtomicU64::new(0);

/// How many lost timer interrupts were repaired in this process.
pub(crate) fn lost_ticks_kicked() -> u64 {
    LOST_TICKS_KICKED.load(Ordering::Relaxed)
}

/// When a helper's request at `offset` continues its previous piece, whose request has not
/// returned yet (its wait is still put off: a request the helper has handed back to the
/// guest is over, and what follows it is a new one): that piece's completion (this one's
/// arrival) and the arrival of the request's first piece.
fn joined_arrival(offset: u64, write: bool, real_now: u64) -> Option<(u64, u64)> {
    let helper = crate::helper::current()?;
    let p = (*PIECE.lock())?;
    (p.helper == helper
        && p.pending.is_some()
        && p.end == offset
        && p.write == write
        && real_now.saturating_sub(p.returned_real_ns) <= PIECE_GAP_NS)
        .then_some((p.complete_ns, p.first_arrival_ns))
}

/// Whether the calling helper has a request whose wait is put off.
fn pending_here() -> bool {
    let Some(helper) = crate::helper::current() else { return false };
    PIECE.lock().is_some_and(|p| p.helper == helper && p.pending.is_some())
}

/// Makes the calling helper's put-off wait, if it has one: the whole request's return at
/// the model's completion, counted once ([`finish`]), then hands it back ([`hand_back`]). Outside the library only (the caller holds no [`Busy`]).
fn settle_pending(emu: &Emu) {
    if let Some(due) = wait_pending(emu) {
        hand_back(emu, due, false);
    }
}

/// A helper's request whose wait is made and which the helper is handing back to the
/// program: its model instants, arrival and completion.
#[derive(Clone, Copy)]
struct Due {
    arrival_ns: u64,
    complete_ns: u64,
}

/// The helper waited for a request before a `write` (UML's ubd thread hands the finished
/// requests back to the kernel through a pipe): a thread paused at the request's instant
/// ([`domain::pause_at_cap`]) resumes after that write ([`after_helper_write`]), when the
/// program can see the completion, not before it.
static RESUME_AFTER_WRITE: AtomicBool = AtomicBool::new(false);

/// The request is handed back to the program: under virtual time the clock, held at the
/// model's completion since the request was issued ([`domain::set_cap`]), goes on from it
/// ([`domain::release_cap`]), and the request's lateness is counted. A thread paused at
/// the instant resumes now, or after the helper's write when `write`.
fn hand_back(emu: &Emu, due: Due, write: bool) {
    if emu.virtual_time {
        domain::release_cap(due.complete_ns);
    }
    note_lateness(clock_now(emu).saturating_sub(due.complete_ns), due.complete_ns.saturating_sub(due.arrival_ns));
    if emu.virtual_time {
        if write {
            RESUME_AFTER_WRITE.store(true, Ordering::Release);
        } else {
            domain::resume_paused();
        }
    }
}

/// Resumes a thread paused at a request's instant if the helper's write that was to
/// resume it did not come through `write` (called at the helper's next request or wait).
fn resume_if_due() {
    if RESUME_AFTER_WRITE.swap(false, Ordering::AcqRel) {
        domain::resume_paused();
    }
}

/// After a helper's `write` (see [`RESUME_AFTER_WRITE`]). Nothing for other threads or
/// without emulation.
pub fn after_helper_write() {
    if EMU.get().is_none() || !RESUME_AFTER_WRITE.load(Ordering::Acquire) || crate::helper::current().is_none() {
        return;
    }
    resume_if_due();
}

/// The calling helper's put-off wait, made (see [`settle_pending`]); the request is not
/// handed back yet.
fn wait_pending(emu: &Emu) -> Option<Due> {
    let helper = crate::helper::current()?;
    let due = {
        let mut p = PIECE.lock();
        match p.as_mut() {
            Some(piece) if piece.helper == helper => {
                piece.pending.take().map(|w| (w, piece.first_arrival_ns, piece.complete_ns))
            }
            _ => None,
        }
    };
    let (w, first_arrival_ns, complete_ns) = due?;
    wait_for(emu, w.wait, complete_ns, w.idle_since);
    Some(Due { arrival_ns: first_arrival_ns, complete_ns })
}

/// A helper thread is about to do something other than a piece of its request (a read or
/// write of another descriptor, a poll): its request's put-off wait is made first. Nothing
/// for other threads, inside the library, or without emulation.
pub fn settle_helper_request() {
    settle_helper_request_for(false);
}

/// [`settle_helper_request`] before a call that may hand the request back (`write`: a
/// thread paused at its instant resumes after the call, [`after_helper_write`]).
fn settle_helper_request_for(write: bool) {
    let Some(emu) = EMU.get() else { return };
    if crate::helper::current().is_none() {
        return;
    }
    // Inside the library (its own files): not the program's call.
    let Some(busy) = Busy::try_enter() else { return };
    drop(busy);
    resume_if_due();
    if let Some(due) = wait_pending(emu) {
        hand_back(emu, due, write);
    }
}

/// The lateness buckets' upper edges, in millionths of the request's model time (0.5%,
/// 1%, 2% (the seed's criterion), 5%, 10%, 50%, 100%).
pub const LATE_EDGES_PPM: [u64; 7] = [5_000, 10_000, 20_000, 50_000, 100_000, 500_000, 1_000_000];

/// Counts one served request that came back `late_ns` after its model instant, which lay
/// `service_ns` after its arrival.
pub fn note_lateness(late_ns: u64, service_ns: u64) {
    let ppm = (late_ns as u128 * 1_000_000 / service_ns.max(1) as u128) as u64;
    let bucket = LATE_EDGES_PPM.iter().position(|&e| ppm <= e).unwrap_or(LATE_EDGES_PPM.len());
    LATE_HIST[bucket].fetch_add(1, Ordering::Relaxed);
    LATE_MAX_NS.fetch_max(late_ns, Ordering::Relaxed);
    LATE_SUM_NS.fetch_add(late_ns, Ordering::Relaxed);
}

/// The program's clock now (virtual or real monotonic).
fn clock_now(emu: &Emu) -> u64 {
    if emu.virtual_time {
        domain::peek_ns()
    } else {
        domain::real_ns(libc::CLOCK_MONOTONIC)
    }
}

/// Waits for `complete_ns` (a request that arrived at `arrival_ns`; a joined piece: its
/// request's first piece did) and counts how late it came back. A data half that already
/// ran past the instant is the emulator's own work: under virtual time it is kept off the
/// clock ([`domain::hold_at`]) when every other thread of the domain waited all along
/// (`idle_since`, from [`domain::others_idle`] before the data half), else only counted:
/// UML's kernel thread may run a guest task meanwhile, and holding the clock would take
/// that time from it.
fn finish(emu: &Emu, wait: DeviceWait, arrival_ns: u64, complete_ns: u64, idle_since: Option<u64>) {
    wait_for(emu, wait, complete_ns, idle_since);
    note_lateness(clock_now(emu).saturating_sub(complete_ns), complete_ns.saturating_sub(arrival_ns));
}

/// [`finish`]'s wait, without counting the lateness.
fn wait_for(emu: &Emu, wait: DeviceWait, complete_ns: u64, idle_since: Option<u64>) {
    let now = if emu.virtual_time { domain::peek_uncapped_ns() } else { clock_now(emu) };
    if now > complete_ns {
        DATA_OVERRAN.fetch_add(1, Ordering::Relaxed);
        if emu.virtual_time && idle_since.is_some_and(domain::unchanged_since) {
            DATA_HIDDEN_NS.fetch_add(domain::hold_at(complete_ns), Ordering::Relaxed);
        }
    }
    let fell_back = if emu.virtual_time {
        sleep::virtual_wait_until(wait, complete_ns)
    } else {
        sleep::real_wait_until(wait, complete_ns)
    };
    if fell_back {
        SPIN_FELL_BACK.fetch_add(1, Ordering::Relaxed);
    }
}

/// The program's asynchronous signals held off while one of its threads (not a helper) is
/// inside the library serving a call on the image under virtual time, and let through
/// again when it leaves ([`Busy`] dropped first). A handler that ran inside would have its
/// clock reads sent to the real clock (the library's own calls are), and the real
/// monotonic clock is seconds away from the virtual one: UML's kernel thread reads its
/// image itself (the COW header, at each open of the device), and a timer interrupt
/// (SIGALRM) taken in that read had the guest kernel's timekeeping read the real clock
/// between two virtual readings. The step back wrapped its 64-bit clocksource delta, and
/// `timekeeping_advance` looped over centuries of seconds with the guest's signals blocked:
/// the vm tests' hang (docs/vm.md, "The CI hang"). A real `pread` on a file is not
/// interrupted by a signal either: the handler runs when the call returns, as it does
/// now. The synchronous signals (a fault in the call) are left as they are.
struct SignalsHeld(Option<libc::sigset_t>);

impl SignalsHeld {
    fn new(emu: &Emu) -> SignalsHeld {
        if !emu.virtual_time || crate::helper::current().is_some() {
            return SignalsHeld(None);
        }
        // SAFETY: all-zero sigsets are valid; sigfillset/sigdelset and the raw
        // rt_sigprocmask write only these two locals.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut set);
            for s in [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP, libc::SIGSYS] {
                libc::sigdelset(&mut set, s);
            }
            let r = libc::syscall(libc::SYS_rt_sigprocmask, libc::SIG_BLOCK, &set, &mut old, KERNEL_SIGSET_BYTES);
            SignalsHeld((r == 0).then_some(old))
        }
    }
}

impl Drop for SignalsHeld {
    fn drop(&mut self) {
        if let Some(old) = self.0.take() {
            // SAFETY: the mask saved by `new`, put back.
            unsafe {
                libc::syscall(
                    libc::SYS_rt_sigprocmask,
                    libc::SIG_SETMASK,
                    &old,
                    std::ptr::null_mut::<libc::sigset_t>(),
                    KERNEL_SIGSET_BYTES,
                )
            };
        }
    }
}

/// The kernel's signal set size (rt_sigprocmask's last argument).
const KERNEL_SIGSET_BYTES: usize = std::mem::size_of::<u64>();

/// Serves `fsync`/`fdatasync` on the image: `Some(result)` when `fd` is the image. The
/// models have no volatile write cache (a write is on the medium when it completes), so a
/// flush completes when every request handed to the model before it has: at the latest
/// completion, or at once. The data half, the real call (the image's own durability on
/// the host), is the emulator's work: hidden from the clock under virtual time; in real
/// time it can only delay the return past the model's instant (`flush_real_ns` says by how
/// much it could).
pub fn serve_flush(fd: c_int, data: impl FnOnce() -> c_int) -> Option<c_int> {
    let emu = EMU.get()?;
    if !is_image(emu, fd) {
        return None;
    }
    settle_helper_request();
    let held = SignalsHeld::new(emu);
    let busy = Busy::try_enter()?;
    let arrival_ns = clock_now(emu);
    let real0 = domain::real_ns(libc::CLOCK_MONOTONIC);
    let r = data();
    FLUSH_REAL_NS.fetch_add(domain::real_ns(libc::CLOCK_MONOTONIC).saturating_sub(real0), Ordering::Relaxed);
    if r != 0 {
        return Some(r);
    }
    let saved = real::errno();
    FLUSHES.fetch_add(1, Ordering::Relaxed);
    let complete_ns = LAST_COMPLETE_NS.load(Ordering::Acquire).max(arrival_ns);
    drop(busy);
    drop(held);
    if emu.virtual_time {
        // The real call's time is the emulator's, whether or not the model's drain lies ahead.
        DATA_HIDDEN_NS.fetch_add(domain::hold_at(complete_ns), Ordering::Relaxed);
        sleep::virtual_wait_until(DeviceWait::Precise, complete_ns);
    } else {
        sleep::real_wait_until(DeviceWait::Precise, complete_ns);
    }
    real::set_errno(saved);
    Some(r)
}

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
    let target = smartcon_emutarget::target::open(
        &smartcon_emutarget::target::TargetSpec::Emu(small),
        smartcon_emutarget::target::OpenOptions::default(),
    );
    match target.ok().and_then(|t| t.builtin_profile()) {
        Some(p) => p.thresholds(),
        None => smartcon_engine::profile::Profile::paper_default(&spec.label).thresholds(),
    }
}

/// Held across fork by the prepare handler ([`crate::lifecycle`]).
pub fn fork_prepare() {
    std::mem::forget(DEVICE.lock());
    std::mem::forget(PIECE.lock());
}

pub fn fork_parent() {
    PIECE.unlock_after_fork();
    DEVICE.unlock_after_fork();
}

/// A fork's child: the model's lock released, its own counters and record.
pub fn fork_child() {
    PIECE.unlock_after_fork();
    *PIECE.lock() = None;
    DEVICE.unlock_after_fork();
    for c in [
        &READS,
        &WRITES,
        &BYTES,
        &DEVICE_NS,
        &IMAGE_OPENS,
        &SPIN_FELL_BACK,
        &FLUSHES,
        &FLUSH_REAL_NS,
        &LATE_MAX_NS,
        &LATE_SUM_NS,
        &DATA_OVERRAN,
        &DATA_HIDDEN_NS,
        &PIECES_JOINED,
        &PIECES_DUE_BEFORE_ISSUE,
    ]
    .into_iter()
    .chain(&BY_STRATEGY)
    .chain(&BY_REASON)
    .chain(&LATE_HIST)
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
        settle_helper_request_for(!read);
        return None;
    }
    // Declared before `busy`, so that an early return leaves the library before the
    // signals come back.
    let held = SignalsHeld::new(emu);
    let mut busy = Busy::try_enter()?;
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
    let offset_u = offset.max(0) as u64;
    if crate::helper::current().is_some() {
        resume_if_due();
    }
    let mut real_start = domain::real_ns(libc::CLOCK_MONOTONIC);
    let joined = joined_arrival(offset_u, !read, real_start);
    if joined.is_none() && pending_here() {
        // A new request: the one before it returns first, at its completion.
        drop(busy);
        settle_pending(emu);
        busy = Busy::try_enter()?;
        real_start = domain::real_ns(libc::CLOCK_MONOTONIC);
    }
    let mut arrival_ns = if emu.virtual_time { domain::observe_ns().0 } else { real_start };
    let idle_since = if emu.virtual_time { domain::others_idle() } else { None };
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
    let mut first_arrival_ns = arrival_ns;
    let issued_ns = arrival_ns;
    // The request's wait so far (a joined piece's request was put off by its first piece).
    let mut chain_idle = idle_since;
    if let Some((previous, first)) = joined {
        PIECES_JOINED.fetch_add(1, Ordering::Relaxed);
        // The continuation starts where the piece before it ends on the model, whether
        // this piece was issued before that instant (its wait is put off) or after it.
        arrival_ns = previous;
        first_arrival_ns = first;
        let before = PIECE.lock().and_then(|p| p.pending);
        chain_idle = match (before.and_then(|w| w.idle_since), idle_since) {
            (Some(g), Some(_)) => Some(g),
            _ => None,
        };
    }
    let complete_ns = schedule(op, offset_u, bytes, arrival_ns)?;
    if joined.is_some() && complete_ns < issued_ns {
        PIECES_DUE_BEFORE_ISSUE.fetch_add(1, Ordering::Relaxed);
    }
    // Not inside the library while waiting: a signal handler that runs meanwhile reads the
    // virtual clock (the real one is behind it) and may do its own I/O.
    drop(busy);
    drop(held);
    match crate::helper::current() {
        Some(helper) => {
            // The wait is put off to the request's end (settle_pending).
            *PIECE.lock() = Some(Piece {
                helper,
                end: offset_u + bytes,
                complete_ns,
                returned_real_ns: domain::real_ns(libc::CLOCK_MONOTONIC),
                write: !read,
                first_arrival_ns,
                pending: Some(Pending { wait, idle_since: chain_idle }),
            });
            if emu.virtual_time {
                // Until the helper hands the request back, the clock stops at its instant.
                domain::set_cap(complete_ns);
            }
            drop(entered);
        }
        None => {
            finish(emu, wait, first_arrival_ns, complete_ns, idle_since);
            drop(entered);
        }
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
    LAST_COMPLETE_NS.fetch_max(complete_ns, Ordering::AcqRel);
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
        flushes: FLUSHES.load(Ordering::Relaxed),
        pieces_joined: PIECES_JOINED.load(Ordering::Relaxed),
        pieces_due_before_issue: PIECES_DUE_BEFORE_ISSUE.load(Ordering::Relaxed),
        lost_ticks_kicked: lost_ticks_kicked(),
        ptrace_fp_sets_skipped: crate::fpset::skipped(),
        flush_real_ns: FLUSH_REAL_NS.load(Ordering::Relaxed),
        lateness: LatenessRecord {
            edges_ppm: LATE_EDGES_PPM.to_vec(),
            counts: LATE_HIST.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
            max_ns: LATE_MAX_NS.load(Ordering::Relaxed),
            sum_ns: LATE_SUM_NS.load(Ordering::Relaxed),
            data_overran: DATA_OVERRAN.load(Ordering::Relaxed),
            data_hidden_ns: DATA_HIDDEN_NS.load(Ordering::Relaxed),
            wake_hidden_ns: clock.wake_hidden_ns,
            wakes_settled: clock.wakes_settled,
            capped: clock.capped,
            capped_ns: clock.capped_ns,
            pauses: clock.pauses,
            paused_ns: clock.paused_ns,
            cpu_clock_readings: clock.cpu_clock_readings,
            cpu_clock_reads: clock.cpu_clock_reads,
            cpu_clock_fast_reads: clock.cpu_clock_fast_reads,
            cpu_clock_carried_waits: clock.cpu_clock_carried_waits,
            caps_expired: clock.caps_expired,
            cap_held_max_ns: clock.cap_held_max_ns,
            pauses_timed_out: clock.pauses_timed_out,
        },
    };
    let Ok(line) = serde_json::to_string(&record) else { return };
    let _busy = Busy::try_enter();
    // One write of one line on an O_APPEND file: concurrent processes' lines do not mix.
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).create(true).open(path) {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

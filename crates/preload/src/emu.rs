//! An emulated device behind one image file (`smartcon run --emulate SPEC=PATH`).
//!
//! Every read and write the program makes on a descriptor of PATH (matched by device and
//! inode, so any name, dup or inherited descriptor counts) is served in two halves: the data
//! by the real call on the program's own descriptor (the image file holds the bytes, with
//! the kernel's results, errno, offsets and alignment rules), the timing by the device model
//! (`smartcon_devemu::FcfsDevice`, FCFS over the model's channels, one model per process):
//!
//! - real time: the call returns when the real monotonic clock reaches the model's
//!   completion for an arrival at the call's start (sleep, then a 200 us spin), so the data
//!   half's own time is inside the model's, not added to it;
//! - virtual time ([`crate::vclock`]): the call waits on the virtual clock for the
//!   completion, which costs no real time when every thread waits, and the data half's time
//!   is hidden from the program.
//!
//! A missing PATH is created as a sparse file of the device's capacity (`size=` in SPEC,
//! else the preset's); an existing one is used as it is, whatever its size.
//!
//! Non-goals: a page cache in front of the device (every call on PATH is a device request,
//! O_DIRECT or not), memory-mapped I/O, vectored calls with more than one buffer (their
//! data is served, untimed), one model shared by several processes (each process image has
//! its own, with its own head position and queue), and queue disciplines other than FCFS.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use libc::{c_int, off_t, size_t, ssize_t};
use smartcon_devemu::{parse_spec, FcfsDevice, Op};

use crate::fdtable::FD_MAX;
use crate::process::{Busy, Spin};
use crate::{real, vclock};

pub const ENV_SPEC: &str = "SMARTCON_PRELOAD_EMU_SPEC";
pub const ENV_PATH: &str = "SMARTCON_PRELOAD_EMU_PATH";
pub const ENV_VIRTUAL_TIME: &str = "SMARTCON_PRELOAD_VIRTUAL_TIME";
pub const ENV_STATS: &str = "SMARTCON_PRELOAD_EMU_STATS";

struct Emu {
    label: String,
    path: String,
    dev: u64,
    ino: u64,
    virtual_time: bool,
    stats_path: Option<String>,
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

/// Reads the environment and turns emulation (and virtual time) on; from the constructor.
pub fn init() {
    let (Some(spec_text), Some(path)) = (getenv(ENV_SPEC), getenv(ENV_PATH)) else { return };
    let spec = match parse_spec(&spec_text) {
        Ok(s) => s,
        Err(e) => return note(&format!("--emulate {spec_text}: {e}; the program runs without emulation")),
    };
    let (dev, ino) = match prepare_image(&path, spec.capacity_bytes) {
        Ok(v) => v,
        Err(e) => return note(&format!("--emulate image {path}: {e}; the program runs without emulation")),
    };
    let label = spec.label.clone();
    let device = match FcfsDevice::new(spec) {
        Ok(d) => d,
        Err(e) => return note(&format!("{e}; the program runs without emulation")),
    };
    *DEVICE.lock() = Some(device);
    let virtual_time = getenv(ENV_VIRTUAL_TIME).as_deref() == Some("1");
    START_REAL_NS.store(vclock::real_ns(libc::CLOCK_MONOTONIC), Ordering::Relaxed);
    IMAGE_PID.store(std::process::id() as u64, Ordering::Relaxed);
    let emu = Emu { label, path, dev, ino, virtual_time, stats_path: getenv(ENV_STATS) };
    if EMU.set(emu).is_err() {
        return;
    }
    // SAFETY: plain extern "C" handlers that live as long as the process.
    unsafe {
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
        libc::atexit(at_exit);
    }
    if virtual_time {
        vclock::enable();
    }
}

extern "C" fn fork_prepare() {
    crate::aio::fork_prepare();
    std::mem::forget(DEVICE.lock());
    crate::waits::fork_prepare();
    vclock::fork_prepare();
}

extern "C" fn fork_parent() {
    vclock::fork_parent();
    crate::waits::fork_parent_or_child();
    DEVICE.unlock_after_fork();
    crate::aio::fork_parent();
}

extern "C" fn fork_child() {
    vclock::fork_child();
    crate::waits::fork_parent_or_child();
    DEVICE.unlock_after_fork();
    crate::aio::fork_child();
    crate::bypass::reset();
    for c in [&READS, &WRITES, &BYTES, &DEVICE_NS, &IMAGE_OPENS] {
        c.store(0, Ordering::Relaxed);
    }
    FLUSHED.store(false, Ordering::Relaxed);
    IMAGE_PID.store(std::process::id() as u64, Ordering::Relaxed);
    START_REAL_NS.store(vclock::real_ns(libc::CLOCK_MONOTONIC), Ordering::Relaxed);
}

extern "C" fn at_exit() {
    flush();
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
    let arrival_ns = if emu.virtual_time { vclock::observe_ns().0 } else { vclock::real_ns(libc::CLOCK_MONOTONIC) };
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
    let complete_ns = schedule(op, offset.max(0) as u64, n as u64, arrival_ns)?;
    // Not inside the library while waiting: a signal handler that runs meanwhile reads the
    // virtual clock (the real one is behind it) and may do its own I/O.
    drop(busy);
    wait_for(emu, complete_ns);
    real::set_errno(saved);
    Some(n)
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

/// Waits until the program's clock (virtual or real) reaches `complete_ns`.
fn wait_for(emu: &Emu, complete_ns: u64) {
    if emu.virtual_time {
        vclock::wait_until(complete_ns);
    } else {
        vclock::real_sleep_until(complete_ns);
    }
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
    let clock = vclock::stats();
    let wall_ns = vclock::real_ns(libc::CLOCK_MONOTONIC).saturating_sub(START_REAL_NS.load(Ordering::Relaxed));
    // SAFETY: an all-zero rusage is valid; getrusage only writes it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv_ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    let record = serde_json::json!({
        "type": "emu_process", "pid": std::process::id(), "spec": emu.label, "path": emu.path,
        "virtual_time": emu.virtual_time, "reads": READS.load(Ordering::Relaxed),
        "writes": WRITES.load(Ordering::Relaxed), "bytes": BYTES.load(Ordering::Relaxed),
        "device_ns": DEVICE_NS.load(Ordering::Relaxed), "wall_ns": wall_ns, "skew_ns": clock.skew_ns,
        "jumped_ns": clock.jumped_ns, "jumps": clock.jumps, "cpu_ns": tv_ns(ru.ru_utime) + tv_ns(ru.ru_stime),
        "image_opens": IMAGE_OPENS.load(Ordering::Relaxed),
        "around_model": crate::bypass::around_model_by().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
    });
    let _busy = Busy::try_enter();
    // One write of one line on an O_APPEND file: concurrent processes' lines do not mix.
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).create(true).open(path) {
        let _ = f.write_all(format!("{record}\n").as_bytes());
    }
}

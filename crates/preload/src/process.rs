//! Per-process and per-thread state of the interposition: each thread's ports (one per
//! descriptor it does taken I/O on), the registry the exit record is gathered from, and
//! what happens at fork, exec and exit.
//!
//! Each thread owns its ports behind its own mutex, which only that thread takes on the
//! I/O path (uncontended); the exit path takes it with a bounded `try_lock`, so a thread
//! caught in the middle of an I/O at exit is skipped rather than waited for. The registry
//! and the retired counters sit behind a spin lock that fork's prepare handler holds
//! across the fork, so the child never inherits it locked.
//!
//! Fork: the child starts a new image (its own record), its threads' old ports are
//! dropped unused (their rings belong to the parent) and every descriptor becomes
//! `shared` in both processes (`read`/`write` on them then pass through).
//!
//! Routing layer: below the interposed calls, above the device and clock services
//! ([`crate::devices`], [`crate::emu`], [`crate::port`]).
//!
//! Non-goals: async-signal safety of the first taken I/O on a descriptor in a thread (it
//! allocates a port); later ones do not allocate.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use smartcon_engine::decision::{Reason, Strategy};

use crate::config::Config;
use crate::guard::Spin;
use crate::port::Port;
use crate::record::{process_record, Counters};

/// Ports one thread keeps open at most; past it the least recently used is dropped.
pub const PORTS_PER_THREAD_MAX: usize = 256;

static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Bumped in a fork's child: thread states from before it are stale.
static FORK_EPOCH: AtomicU64 = AtomicU64::new(0);
static FORKS: AtomicU64 = AtomicU64::new(0);
/// The pid the image's record belongs to. A vfork child (no fork handlers run, memory
/// shared with the parent) has another pid and must neither write the parent's record
/// nor allocate in the parent's heap, so it skips the flush at `_exit` and exec.
static IMAGE_PID: AtomicU32 = AtomicU32::new(0);
static IMAGE: Spin<String> = Spin::new(String::new());
static REGISTRY: Spin<Registry> = Spin::new(Registry { threads: Vec::new(), retired: None, notes: Vec::new() });
struct Registry {
    threads: Vec<Arc<Mutex<ThreadState>>>,
    /// Counters of threads that exited and ports that were dropped.
    retired: Option<Counters>,
    notes: Vec<String>,
}

pub fn config() -> Option<&'static Config> {
    crate::config::get()
}

/// Whether interposition is on in this process.
#[inline]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

pub fn count_passed_through(why: crate::bypass::Pass) {
    crate::bypass::passed(why);
}

/// Counts one taken I/O whose wait was not a port's (a libaio request reaped by
/// `io_getevents`, [`crate::aio`]): in the image's counters like a port's I/O.
pub fn count_taken(lat_ns: u64, bytes: u64, strategy: Strategy, reason: Option<Reason>) {
    let mut reg = REGISTRY.lock();
    let c = reg.retired.get_or_insert_with(Counters::default);
    c.ios += 1;
    c.bytes += bytes;
    c.by_strategy[strategy.index()] += 1;
    if let Some(r) = reason {
        c.by_reason[r.index()] += 1;
    }
    c.hist.saturating_record(lat_ns.max(1));
}

fn new_image() -> String {
    format!("{}-{}-{}", std::process::id(), smartcon_engine::clock::now_ns(), FORKS.load(Ordering::Relaxed))
}

/// Called once from the library's constructor, after the configuration is read.
pub fn init() {
    if config().is_none() {
        return;
    }
    *IMAGE.lock() = new_image();
    IMAGE_PID.store(std::process::id(), Ordering::Relaxed);
    // Descriptors inherited across exec may share their offset with another process.
    crate::fdtable::mark_all_shared();
    // SAFETY: the handlers are plain extern "C" functions that live as long as the process.
    unsafe {
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
        libc::atexit(at_exit);
    }
    ACTIVE.store(true, Ordering::Release);
}

extern "C" fn fork_prepare() {
    // Held across fork; released by the parent and child handlers. The order is the I/O
    // path's: a descriptor stripe, the devices, then the registry.
    crate::fdtable::lock_stripes_for_fork();
    crate::devices::fork_prepare();
    std::mem::forget(REGISTRY.lock());
    std::mem::forget(IMAGE.lock());
}

extern "C" fn fork_parent() {
    crate::devices::fork_parent();
    IMAGE.unlock_after_fork();
    REGISTRY.unlock_after_fork();
    crate::fdtable::unlock_stripes_after_fork();
    crate::fdtable::mark_all_shared();
}

extern "C" fn fork_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
    FORK_EPOCH.fetch_add(1, Ordering::Release);
    // SAFETY: the child is single-threaded and the prepare handler holds both locks, so no
    // one else can be inside them; the old contents belong to the parent's threads and are
    // leaked (their mutexes may be held by threads that do not exist here).
    unsafe {
        let reg = REGISTRY.held_value();
        std::mem::forget(std::mem::take(&mut reg.threads));
        reg.retired = None;
        reg.notes.clear();
        *IMAGE.held_value() = new_image();
    }
    crate::devices::fork_child();
    IMAGE_PID.store(std::process::id(), Ordering::Relaxed);
    IMAGE.unlock_after_fork();
    REGISTRY.unlock_after_fork();
    crate::fdtable::unlock_stripes_after_fork();
    crate::bypass::reset();
    crate::fdtable::mark_all_shared();
}

struct Slot {
    generation: u64,
    /// None: opening a port failed for this descriptor; its calls pass through.
    port: Option<Port>,
    last_use: u64,
}

pub struct ThreadState {
    epoch: u64,
    ports: HashMap<i32, Slot>,
    tick: u64,
}

impl ThreadState {
    fn retire_all(&mut self, into: &mut Registry) {
        for (_, slot) in self.ports.drain() {
            if let Some(p) = slot.port {
                retire_port(into, &p);
            }
        }
    }

    /// The port for `fd` at `generation`, opened on first use. `None` = pass through.
    pub fn port(&mut self, fd: i32, generation: u64) -> Option<&mut Port> {
        if crate::devices::needs_monitor() {
            crate::devices::register_current_thread(&crate::devices::monitor().0);
        }
        self.tick += 1;
        let tick = self.tick;
        let stale = self.ports.get(&fd).is_some_and(|s| s.generation != generation);
        if stale || (!self.ports.contains_key(&fd) && self.ports.len() >= PORTS_PER_THREAD_MAX) {
            let victim = if stale {
                fd
            } else {
                *self.ports.iter().min_by_key(|(_, s)| s.last_use).map(|(k, _)| k).unwrap_or(&fd)
            };
            if let Some(Slot { port: Some(p), .. }) = self.ports.remove(&victim) {
                retire_port(&mut REGISTRY.lock(), &p);
            }
        }
        let slot = self.ports.entry(fd).or_insert_with(|| {
            let dev = crate::fdtable::probe(fd).map_or(0, |p| p.dev);
            let (options, note) = crate::devices::port_options(dev);
            add_notes(&note.into_iter().collect::<Vec<_>>());
            let port = match Port::open(fd, options) {
                Ok(p) => {
                    add_notes(p.notes());
                    Some(p)
                }
                Err(e) => {
                    // Said once per distinct cause (io_uring disabled, a device not found).
                    add_notes(&[format!(
                        "a port could not be opened ({e}); that descriptor's I/O went to the real calls"
                    )]);
                    None
                }
            };
            Slot { generation, port, last_use: tick }
        });
        slot.last_use = tick;
        slot.port.as_mut()
    }

    /// Drops the port on `fd` (after an error: its ring may be unusable).
    pub fn drop_port(&mut self, fd: i32) {
        if let Some(Slot { port: Some(p), .. }) = self.ports.remove(&fd) {
            retire_port(&mut REGISTRY.lock(), &p);
        }
    }
}

fn retire_port(reg: &mut Registry, p: &Port) {
    reg.retired.get_or_insert_with(Counters::default).merge(&p.counters());
}

/// Notes kept per process at most (each distinct text once).
const NOTES_MAX: usize = 16;

fn add_notes(notes: &[String]) {
    if notes.is_empty() {
        return;
    }
    let mut reg = REGISTRY.lock();
    for n in notes {
        if reg.notes.len() < NOTES_MAX && !reg.notes.contains(n) {
            reg.notes.push(n.clone());
        }
    }
}

/// Owned by each thread's TLS; retires the thread's counters when the thread exits. The
/// epoch is kept outside the mutex so the I/O path takes the mutex once.
struct Holder(Arc<Mutex<ThreadState>>, u64);

impl Drop for Holder {
    fn drop(&mut self) {
        let _busy = Busy::enter();
        let mut reg = REGISTRY.lock();
        if let Ok(mut st) = self.0.lock() {
            if st.epoch == FORK_EPOCH.load(Ordering::Acquire) {
                st.retire_all(&mut reg);
            }
        }
        reg.threads.retain(|t| !Arc::ptr_eq(t, &self.0));
    }
}

thread_local! {
    static STATE: RefCell<Option<Holder>> = const { RefCell::new(None) };
}

pub use crate::guard::{inside, Busy};

/// Runs `f` on this thread's state; `None` when the thread is exiting (TLS gone).
pub fn with_thread<R>(f: impl FnOnce(&mut ThreadState) -> R) -> Option<R> {
    STATE
        .try_with(|cell| {
            let mut cell = cell.try_borrow_mut().ok()?;
            let epoch = FORK_EPOCH.load(Ordering::Acquire);
            if cell.as_ref().is_none_or(|h| h.1 != epoch) {
                if let Some(old) = cell.take() {
                    // A fork's child: the old ports' rings are the parent's. Drop them
                    // without counting (their I/O is in the parent's record).
                    if let Ok(mut st) = old.0.lock() {
                        st.ports.clear();
                    }
                    std::mem::forget(old);
                }
                let st = Arc::new(Mutex::new(ThreadState { epoch, ports: HashMap::new(), tick: 0 }));
                REGISTRY.lock().threads.push(st.clone());
                *cell = Some(Holder(st, epoch));
            }
            // The I/O path's only lock: this thread's own, uncontended but for the exit
            // record's bounded try_lock.
            let mut st = cell.as_ref()?.0.lock().ok()?;
            Some(f(&mut st))
        })
        .ok()?
}

/// The process image's counters so far: retired ones plus every live thread's (threads in
/// the middle of an I/O are skipped after a bounded wait).
pub fn snapshot() -> (Counters, Vec<String>) {
    let reg = REGISTRY.lock();
    let mut total = reg.retired.clone().unwrap_or_default();
    let epoch = FORK_EPOCH.load(Ordering::Acquire);
    for t in &reg.threads {
        for _ in 0..1000 {
            match t.try_lock() {
                Ok(st) => {
                    if st.epoch == epoch {
                        for s in st.ports.values() {
                            if let Some(p) = &s.port {
                                total.merge(&p.counters());
                            }
                        }
                    }
                    break;
                }
                Err(std::sync::TryLockError::Poisoned(_)) => break,
                Err(std::sync::TryLockError::WouldBlock) => std::thread::yield_now(),
            }
        }
    }
    (total, reg.notes.clone())
}

/// Appends this image's record to the stats file (exit, `_exit`, exec).
pub fn flush(_why: &str) {
    if _why != "exit" {
        crate::emu::flush();
    }
    // getpid is a syscall, not a libc cache, on the glibc versions this runs on: a vfork
    // child sees its own pid.
    // SAFETY: getpid has no preconditions.
    if !active() || unsafe { libc::getpid() } as u32 != IMAGE_PID.load(Ordering::Relaxed) {
        return;
    }
    let _busy = Busy::enter();
    let Some(path) = config().and_then(|c| c.stats_path.as_ref()) else { return };
    let (counters, notes) = snapshot();
    let image = IMAGE.lock().clone();
    let mut record = process_record(std::process::id(), image, &counters, crate::bypass::passed_total(), notes);
    let owned = |v: Vec<(&str, u64)>| v.into_iter().map(|(k, n)| (k.to_string(), n)).collect();
    record.passed_through_by = owned(crate::bypass::passed_by());
    record.not_taken = owned(crate::bypass::seen_by());
    record.hipri = crate::bypass::hipri_count();
    let Ok(mut line) = serde_json::to_vec(&record) else { return };
    line.push(b'\n');
    // One write of one line on an O_APPEND file: records of concurrent processes do not
    // interleave.
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).create(true).open(path) {
        let _ = f.write_all(&line);
    }
}

extern "C" fn at_exit() {
    flush("exit");
}

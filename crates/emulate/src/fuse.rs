//! The FUSE file system of `emulate mount`: one file (`disk`) whose reads and writes are
//! served by an emulated device, with its timing, from a RAM store. This file is the
//! transport-independent half: the timing ([`Shared`]) and the protocol handler ([`Disk`]),
//! which both transports ([`crate::fuse_session`]: /dev/fuse read/write, and
//! [`crate::fuse_uring`]: FUSE over io_uring) call with a request split the same way (the
//! in-header, the op's fixed in-struct, the payload).
//!
//! Each read or write is placed on the device model when the server receives it
//! ([`FcfsDevice::schedule`]: channels, FCFS, one stream for sequential detection); the data
//! moves at once, and the reply is held until the model's completion minus the path's
//! measured overhead (FUSE + loop: what a request costs with a zero-latency device), so that
//! the program above the loop device sees the model's latency rather than the model's plus
//! the path's. The serving threads run under SCHED_FIFO when allowed, as the seed's emulator
//! ran its simulation thread at top priority.
//!
//! How the server holds a reply is the engine's (issue 21): each /dev/fuse thread and each
//! io_uring queue has a [`Waiter`], a SmartPort group port on the device's in-flight counters
//! (`SmartPort::for_group`, as the merge device's waiters), and each modelled request is a
//! group call of one request: it enters the counters, the port decides how the thread waits
//! (a fixed `--strategy`, or `smart`'s decision on the model's thresholds), the thread waits
//! so until the reply's instant ([`DueAt`], the device's status: that instant on the
//! server's clock), and the call is counted. So
//! `--strategy` means what it means under `bench --target emu:...`: `block` sleeps on a
//! kernel timer to the instant and replies late by the wake-up; `spin` polls the clock back
//! to back (past the engine's spin budget it sleeps); the polling strategies poll at the
//! instants their policy picks. Without a `--strategy` (the default) the port's `block` is
//! the reference wait (`BlockWait::Reference`, the real-time replay's yardstick): asleep
//! until a margin before the instant (this thread's measured wake-up overshoot, p99, and
//! never less than [`SPIN_NS`], the fixed margin the server had before), then watching the
//! clock to it, so the reply goes out at the model's instant, the fidelity the
//! server has always had.
//!
//! Each request's lateness (reply instant minus the instant it was due) is kept for the
//! accuracy report. Until [`Shared::set_modelled`] is called the device is a zero-latency
//! one: setup (calibration, mkfs, mount) runs at memory speed and is not in the report.
//!
//! A transport holds a reply by the [`Pending`] the handler returns: the /dev/fuse threads
//! wait in place through their [`Waiter`] ([`Waiter::hold`]); an io_uring queue keeps
//! serving other requests while it holds several replies, each a held call of its port
//! decided when the request arrived ([`Waiter::arrive`]), and waits through the port for the
//! earliest one's instant, by that reply's strategy, or a new request on its ring
//! ([`Waiter::wait_earliest`]), then commits the reply and has it counted
//! ([`Waiter::replied`]). So `--strategy` means the same on both transports.
//!
//! Non-goals: more than one file, a directory tree, permissions beyond root's, notifications.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use smartcon_devemu::{EmuSpec, FcfsDevice, Op, RamStore};
use smartcon_engine::clock::{self, tighten_timer_slack, EventWait, SharedTime};
use smartcon_engine::decision::Strategy;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::{self, HostWaitCost, Profile};
use smartcon_engine::smartport::{
    BlockWait, DueAt, Earliest, GroupWait, Holds, PortCounters, Ready, SmartPort, SmartPortOptions, StrategyChoice,
};
use smartcon_engine::target::InFlight;
use smartcon_engine::wait;

use crate::fuse_abi::{self, InHeader};

/// The file's name in the FUSE mount.
pub const FILE_NAME: &str = "disk";
const FILE_INO: u64 = 2;
/// The least margin of the reference wait (how long before a reply's instant the serving
/// thread's timer is armed): the fixed margin the server had before it waited through
/// SmartPort.
pub const SPIN_NS: u64 = 150_000;
/// Seconds the kernel may cache names and attributes (nothing changes them but us).
const TTL_S: u64 = 3600;
/// The largest write (and read) the server accepts; the kernel's payload buffers are this big.
pub const MAX_WRITE_BYTES: usize = 1 << 20;

/// One served request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub write: bool,
    /// The model's latency: completion minus arrival at the server.
    pub model_ns: u64,
    /// Reply instant minus the instant the reply was due (arrival + model - overhead,
    /// never before arrival). Positive: late.
    pub lateness_ns: i64,
}

/// A modelled request whose reply is held until `due_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub write: bool,
    pub bytes: u64,
    pub arrival_ns: u64,
    pub model_ns: u64,
    pub overhead_ns: u64,
    /// arrival + model - overhead, never before arrival.
    pub due_ns: u64,
}

/// State the FUSE threads and the mount's controller share.
pub struct Shared {
    store: RamStore,
    device: Mutex<FcfsDevice>,
    modelled: AtomicBool,
    overhead_ns: [AtomicU64; 2],
    served: Mutex<Vec<Served>>,
    size_bytes: u64,
    fifo: bool,
    label: String,
    /// `--strategy`; `None`: the reference wait.
    strategy: Option<StrategyChoice>,
    /// The thresholds a deciding strategy reads: the model's (as an emulated target's).
    builtin: Profile,
    /// The device's in-flight counters, shared by every serving thread's port.
    inflight: Arc<InFlight>,
    /// Held replies by the strategy they waited with, and how many were reference waits.
    by_strategy: [AtomicU64; Strategy::COUNT],
    reference_waits: AtomicU64,
    /// The serving threads (kernel thread ids), for the server's CPU time.
    tids: Mutex<Vec<libc::pid_t>>,
    /// The clock requests arrive and replies are held on: the engine's injected one, which
    /// the serving threads' ports also read and wait on (the host's for a mount).
    time: SharedTime,
}

impl Shared {
    /// `strategy`: how the serving threads and queues hold replies (`None`: the reference wait).
    pub fn new(
        spec: &EmuSpec,
        size_bytes: u64,
        fifo: bool,
        strategy: Option<StrategyChoice>,
    ) -> Result<Arc<Shared>, Error> {
        Shared::with_time(spec, size_bytes, fifo, strategy, clock::real())
    }

    /// [`Shared::new`] on an injected clock and sleeper: arrivals, held replies and the
    /// serving threads' ports are all on `time`. A mount runs on the host's
    /// ([`clock::real`]); the transports themselves (a /dev/fuse read, an io_uring wait's
    /// timeout) are the kernel's and stay on its clock.
    pub fn with_time(
        spec: &EmuSpec,
        size_bytes: u64,
        fifo: bool,
        strategy: Option<StrategyChoice>,
        time: SharedTime,
    ) -> Result<Arc<Shared>, Error> {
        let mut spec = spec.clone();
        spec.capacity_bytes = size_bytes;
        let builtin =
            smartcon_emutarget::emu::model_profile(&spec, HostWaitCost::stored().as_ref(), profile::online_cpus());
        let label = spec.label.clone();
        let device = FcfsDevice::new(spec)?;
        let store = RamStore::new(size_bytes as usize)
            .map_err(|e| Error::new(ErrorKind::Setup, format!("cannot map the {size_bytes}-byte RAM store: {e}")))?;
        Ok(Arc::new(Shared {
            store,
            device: Mutex::new(device),
            modelled: AtomicBool::new(false),
            overhead_ns: [AtomicU64::new(0), AtomicU64::new(0)],
            served: Mutex::new(Vec::new()),
            size_bytes,
            fifo,
            label,
            strategy,
            builtin,
            inflight: Arc::new(InFlight::default()),
            by_strategy: [const { AtomicU64::new(0) }; Strategy::COUNT],
            reference_waits: AtomicU64::new(0),
            tids: Mutex::new(Vec::new()),
            time,
        }))
    }

    /// The strategy's name as `--strategy` spells it; `reference` without one.
    pub fn strategy_name(&self) -> &'static str {
        self.strategy.map_or("reference", |s| s.name())
    }

    /// A serving thread's (or io_uring queue's) handle for holding replies: a SmartPort group port on the
    /// device's in-flight counters, with the mount's strategy. Made on the thread that waits
    /// (the reference wait measures that thread's wake-up overshoot, about 8 ms of sleeps).
    pub fn waiter(self: &Arc<Self>) -> Result<Waiter, Error> {
        let strategy = self.strategy.unwrap_or(StrategyChoice::Fixed(Strategy::Block));
        let block_wait = if self.strategy.is_none() { BlockWait::Reference } else { BlockWait::Kernel };
        // A fixed strategy reads no CPU figure; a decision reads the process-wide monitor,
        // as a job's does.
        let monitor = match strategy {
            StrategyChoice::Fixed(_) => Some(Arc::new(SystemMonitor::fixed(0))),
            _ => None,
        };
        // The port on the server's clock. The host's is left as the port's default rather
        // than passed in: a port given a clock keeps no checks for the next one (the
        // simulation's must not), and a mount's smart ports keep theirs as before.
        let time = (!self.time.is_real()).then(|| self.time.clone());
        let options = SmartPortOptions { strategy, block_wait, monitor, time, ..Default::default() };
        let mut port = SmartPort::for_group(&self.label, self.inflight.clone(), Some(self.builtin.clone()), options)?;
        // The reference wait's margin is this thread's p99 wake-up overshoot, never less than
        // the fixed margin the server had before it went through SmartPort: the p99 alone
        // lets about 1% of the wake-ups past it, and the report's p99 lateness grew
        // (docs/emulator.md, issue 21's before-and-after).
        port.set_reference_margin_floor(SPIN_NS);
        Ok(Waiter { shared: self.clone(), port })
    }

    /// Held replies since [`Shared::set_modelled`], by the strategy they waited with
    /// (indexed by [`Strategy::index`]), and how many of them were reference waits.
    pub fn waits(&self) -> ([u64; Strategy::COUNT], u64) {
        (
            std::array::from_fn(|i| self.by_strategy[i].load(Ordering::Relaxed)),
            self.reference_waits.load(Ordering::Relaxed),
        )
    }

    /// The device's in-flight counters (every serving thread's port counts into them).
    pub fn inflight(&self) -> &InFlight {
        &self.inflight
    }

    /// CPU time the serving threads have run for so far, in ns (their schedstat run time).
    pub fn server_cpu_ns(&self) -> u64 {
        let tids = self.tids.lock().unwrap_or_else(|e| e.into_inner()).clone();
        tids.iter().map(|&tid| thread_run_ns(tid).unwrap_or(0)).sum()
    }

    /// From now on requests take the model's time, less `overhead_ns` [read, write].
    pub fn set_modelled(&self, overhead_ns: [u64; 2]) {
        self.overhead_ns[0].store(overhead_ns[0], Ordering::Relaxed);
        self.overhead_ns[1].store(overhead_ns[1], Ordering::Relaxed);
        self.served.lock().unwrap_or_else(|e| e.into_inner()).clear();
        for n in &self.by_strategy {
            n.store(0, Ordering::Relaxed);
        }
        self.reference_waits.store(0, Ordering::Relaxed);
        self.modelled.store(true, Ordering::SeqCst);
    }

    /// Back to a zero-latency device (teardown should not wait on the model).
    pub fn set_unmodelled(&self) {
        self.modelled.store(false, Ordering::SeqCst);
    }

    /// The requests served while modelled.
    pub fn served(&self) -> Vec<Served> {
        self.served.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Now, on the server's clock (the one arrivals and replies are timed on).
    pub fn now_ns(&self) -> u64 {
        self.time.now_ns()
    }

    /// A request arrives: places it on the model (when modelled) and says when its reply is due.
    fn arrive(&self, op: Op, offset: u64, bytes: u64) -> Option<Pending> {
        let arrival_ns = self.time.now_ns();
        if !self.modelled.load(Ordering::Relaxed) || bytes == 0 {
            return None;
        }
        let sched = self.device.lock().unwrap_or_else(|e| e.into_inner()).schedule(op, offset, bytes, arrival_ns);
        let overhead_ns = self.overhead_ns[usize::from(op == Op::Write)].load(Ordering::Relaxed);
        Some(Pending {
            write: op == Op::Write,
            bytes,
            arrival_ns,
            model_ns: sched.complete_ns - arrival_ns,
            overhead_ns,
            due_ns: sched.complete_ns.saturating_sub(overhead_ns).max(arrival_ns),
        })
    }

    /// The reply of `p` went out at `done_ns`: keeps its lateness for the report.
    pub fn replied(&self, p: &Pending, done_ns: u64) {
        // What the program sees: the path's overhead plus the server's time, against the model.
        let lateness_ns = (done_ns - p.arrival_ns + p.overhead_ns) as i64 - p.model_ns as i64;
        self.served.lock().unwrap_or_else(|e| e.into_inner()).push(Served {
            write: p.write,
            model_ns: p.model_ns,
            lateness_ns,
        });
    }
}

thread_local! {
    static PREPARED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Once per serving thread: a 1 ns timer slack, SCHED_FIFO priority 1 when asked, and the
/// thread's id in `tids` (the server's CPU time).
fn prepare_thread(fifo: bool, tids: &Mutex<Vec<libc::pid_t>>) {
    if PREPARED.with(|p| p.replace(true)) {
        return;
    }
    tighten_timer_slack();
    if fifo {
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param. A failure
        // (no CAP_SYS_NICE) leaves the thread as it was, which only costs accuracy.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    }
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    tids.lock().unwrap_or_else(|e| e.into_inner()).push(tid);
}

/// How long thread `tid` of this process has run on a CPU, in ns (schedstat's first field).
fn thread_run_ns(tid: libc::pid_t) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// A serving thread's SmartPort ([`Shared::waiter`]): every modelled request's reply is held
/// through it.
pub struct Waiter {
    shared: Arc<Shared>,
    port: SmartPort,
}

impl Waiter {
    /// Holds the reply of `p` until its instant, as the port decides, then sends it with
    /// `reply`: one group call of one request (in the device's in-flight counters from now
    /// until the wait ends), counted after the reply has gone out. `reply` runs exactly once:
    /// after the wait, or at once if the port fails (the error is returned beside its result).
    pub fn hold<R>(&mut self, p: &Pending, reply: impl FnOnce() -> R) -> (R, Result<(), Error>) {
        let op = if p.write { Op::Write } else { Op::Read };
        let references = self.port.counters().reference_waits;
        let mut call = match self.port.submit_group(op, 1, p.bytes.max(1)) {
            Ok(call) => call,
            Err(e) => return (reply(), Err(e)),
        };
        let pending = wait::Pending { op, bytes: p.bytes, ahead: call.ahead(), submit_ns: p.arrival_ns };
        // The reply's status: its instant on the server's clock.
        let mut due = DueAt { time: &*self.shared.time, due_ns: p.due_ns };
        let waited = call.wait(&pending, &mut due, GroupWait::FromSubmission);
        let sent = reply();
        let counted = waited.and_then(|_| call.release(1)).and_then(|()| call.finish());
        (sent, counted.map(|out| self.count(out.strategy, references)))
    }

    /// An io_uring queue's request `key` (its ring entry) is held until `p.due_ns`: it enters
    /// the device's in-flight counters and the port decides how the queue will wait for it
    /// ([`SmartPort::hold`]); the queue keeps serving meanwhile.
    pub fn arrive(&mut self, holds: &mut Holds<usize>, key: usize, p: &Pending) -> Result<(), Error> {
        let op = if p.write { Op::Write } else { Op::Read };
        self.port.hold(holds, key, op, p.bytes.max(1), p.arrival_ns, p.due_ns)
    }

    /// Waits for the earliest held reply's instant, by the strategy its port decided, or for
    /// a new request on `ring`, whichever comes first ([`SmartPort::wait_earliest`]); `None`
    /// when nothing is held.
    pub fn wait_earliest(
        &mut self,
        holds: &mut Holds<usize>,
        ring: &mut dyn EventWait,
    ) -> Result<Option<Earliest<usize>>, Error> {
        self.port.wait_earliest(holds, ring)
    }

    /// A reply [`Waiter::wait_earliest`] found due has gone out: the port counts it
    /// ([`SmartPort::finish_held`]), and the mount's report by its strategy.
    pub fn replied(&mut self, ready: Ready<usize>) -> Result<(), Error> {
        let references = self.port.counters().reference_waits;
        let out = self.port.finish_held(ready)?;
        self.count(out.strategy, references);
        Ok(())
    }

    /// One held reply counted for the report: its strategy, and whether the port counted
    /// a reference wait since `references_before`.
    fn count(&self, strategy: Strategy, references_before: u64) {
        self.shared.by_strategy[strategy.index()].fetch_add(1, Ordering::Relaxed);
        let references = self.port.counters().reference_waits - references_before;
        self.shared.reference_waits.fetch_add(references, Ordering::Relaxed);
    }

    /// What this thread's port counted (requests by strategy, reference waits, latencies).
    pub fn counters(&self) -> &PortCounters {
        self.port.counters()
    }
}

/// How a request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// No reply is sent (FORGET, BATCH_FORGET, INTERRUPT).
    None,
    /// An error, as a positive errno.
    Error(i32),
    /// Success: this many bytes of out-arguments at the start of the io buffer.
    Ok(usize),
}

/// A handled request: its reply, and when the reply is due if the model holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub reply: Reply,
    pub pending: Option<Pending>,
}

impl Outcome {
    fn now(reply: Reply) -> Outcome {
        Outcome { reply, pending: None }
    }
}

/// The protocol handler: a root directory holding [`FILE_NAME`].
pub struct Disk {
    shared: Arc<Shared>,
    uid: u32,
    gid: u32,
    want_uring: bool,
    initialized: AtomicBool,
    uring: AtomicBool,
}

impl Disk {
    /// `want_uring`: answer INIT with FUSE_OVER_IO_URING when the kernel offers it.
    pub fn new(shared: Arc<Shared>, want_uring: bool) -> Disk {
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Disk { shared, uid, gid, want_uring, initialized: AtomicBool::new(false), uring: AtomicBool::new(false) }
    }

    /// Once the INIT reply is written: whether the connection is to use io_uring.
    pub fn initialized(&self) -> Option<bool> {
        self.initialized.load(Ordering::SeqCst).then(|| self.uring.load(Ordering::SeqCst))
    }

    /// Called by the transport after it wrote the INIT reply (the kernel set the connection
    /// up while taking that write).
    pub fn set_initialized(&self) {
        self.initialized.store(true, Ordering::SeqCst);
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Once per serving thread: timer slack and SCHED_FIFO (when the mount asked for it).
    pub fn prepare_thread(&self) {
        prepare_thread(self.shared.fifo, &self.shared.tids);
    }

    fn attr(&self, ino: u64) -> fuse_abi::Attr {
        let file = ino == FILE_INO;
        fuse_abi::Attr {
            ino,
            size: if file { self.shared.size_bytes } else { 0 },
            mode: if file { libc::S_IFREG | 0o600 } else { libc::S_IFDIR | 0o755 },
            nlink: if file { 1 } else { 2 },
            uid: self.uid,
            gid: self.gid,
        }
    }

    /// The part of `[offset, offset + len)` inside the file.
    fn clamp(&self, offset: u64, len: u64) -> u64 {
        len.min(self.shared.size_bytes.saturating_sub(offset))
    }

    /// Handles one request. `op_in` is the op's fixed in-struct; the payload (a write's data,
    /// a lookup's name) is `io[..payload_len]`, and the out-arguments are written over it
    /// from `io[0]` once it has been consumed, so one buffer serves both directions.
    pub fn handle(&self, h: &InHeader, op_in: &[u8], io: &mut [u8], payload_len: usize) -> Outcome {
        let payload_len = payload_len.min(io.len());
        self.dispatch(h, op_in, io, payload_len).unwrap_or(Outcome::now(Reply::Error(libc::EINVAL)))
    }

    fn dispatch(&self, h: &InHeader, op_in: &[u8], io: &mut [u8], payload_len: usize) -> Option<Outcome> {
        use fuse_abi::*;
        let known = h.nodeid == ROOT_ID || h.nodeid == FILE_INO;
        let ok = |n: Option<usize>| Some(Outcome::now(n.map_or(Reply::Error(libc::ERANGE), Reply::Ok)));
        let err = |e: i32| Some(Outcome::now(Reply::Error(e)));
        match h.opcode {
            INIT => self.init(op_in, io),
            LOOKUP => {
                let name = io[..payload_len].split(|b| *b == 0).next().unwrap_or_default();
                if h.nodeid == ROOT_ID && name == FILE_NAME.as_bytes() {
                    ok(entry_out(io, &self.attr(FILE_INO), TTL_S))
                } else {
                    err(libc::ENOENT)
                }
            }
            GETATTR if known => ok(attr_out(io, &self.attr(h.nodeid), TTL_S)),
            SETATTR if known => {
                // The device has a fixed size: only a no-op truncate is accepted.
                let (valid, size) = (u32_at(op_in, 0)?, u64_at(op_in, 16)?);
                if valid & FATTR_SIZE != 0 && size != self.shared.size_bytes {
                    return err(libc::EPERM);
                }
                ok(attr_out(io, &self.attr(h.nodeid), TTL_S))
            }
            GETATTR | SETATTR => err(libc::ENOENT),
            // Direct I/O: every request reaches the server (no page cache between the loop
            // device and the model).
            OPEN if h.nodeid == FILE_INO => ok(open_out(io, 0, FOPEN_DIRECT_IO)),
            OPEN => err(libc::EISDIR),
            OPENDIR if h.nodeid == ROOT_ID => ok(open_out(io, 0, 0)),
            OPENDIR => err(libc::ENOTDIR),
            READ => self.read(op_in, io),
            WRITE => self.write(op_in, io, payload_len),
            READDIR => self.readdir(op_in, io),
            STATFS => ok(statfs_out(io, self.shared.size_bytes / 4096)),
            // Writes are durable in the store when they are acknowledged.
            FLUSH | FSYNC | FSYNCDIR | RELEASE | RELEASEDIR | ACCESS | DESTROY => ok(Some(0)),
            FORGET | BATCH_FORGET | INTERRUPT => Some(Outcome::now(Reply::None)),
            _ => err(libc::ENOSYS),
        }
    }

    fn init(&self, op_in: &[u8], io: &mut [u8]) -> Option<Outcome> {
        use fuse_abi::*;
        let (major, minor, max_readahead) = (u32_at(op_in, 0)?, u32_at(op_in, 4)?, u32_at(op_in, 8)?);
        if major != KERNEL_VERSION {
            return Some(Outcome::now(Reply::Error(libc::EPROTO)));
        }
        let mut offered = u64::from(u32_at(op_in, 12)?);
        if offered & FUSE_INIT_EXT != 0 {
            offered |= u64::from(u32_at(op_in, 16).unwrap_or(0)) << 32;
        }
        // FUSE_ASYNC_DIO: the loop device's direct I/O (an async kiocb) is sent without its
        // worker waiting for the reply, so several requests can be at the device at once.
        // Without it the loop worker serves one request at a time: emu:sdcard,channels=4 at
        // fio QD4 gave 882 IOPS (4.5 ms each) instead of 3142 (1.25 ms).
        let wanted = FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_MAX_PAGES | FUSE_INIT_EXT | FUSE_ASYNC_DIO;
        let wanted =
            if self.want_uring && minor >= KERNEL_MINOR_VERSION { wanted | FUSE_OVER_IO_URING } else { wanted };
        let flags = offered & wanted;
        self.uring.store(flags & FUSE_OVER_IO_URING != 0, Ordering::SeqCst);
        let out = InitOut {
            minor: minor.min(KERNEL_MINOR_VERSION),
            max_readahead,
            flags,
            max_background: 64,
            max_write: MAX_WRITE_BYTES as u32,
            max_pages: (MAX_WRITE_BYTES / 4096) as u16,
        };
        Some(Outcome::now(init_out(io, &out).map_or(Reply::Error(libc::ERANGE), Reply::Ok)))
    }

    fn read(&self, op_in: &[u8], io: &mut [u8]) -> Option<Outcome> {
        let (offset, size) = (fuse_abi::u64_at(op_in, 8)?, fuse_abi::u32_at(op_in, 16)?);
        let n = self.clamp(offset, u64::from(size)).min(io.len() as u64);
        self.shared.store.read(offset.min(self.shared.size_bytes), &mut io[..n as usize]);
        Some(Outcome { reply: Reply::Ok(n as usize), pending: self.shared.arrive(Op::Read, offset, n) })
    }

    fn write(&self, op_in: &[u8], io: &mut [u8], payload_len: usize) -> Option<Outcome> {
        let (offset, size) = (fuse_abi::u64_at(op_in, 8)?, fuse_abi::u32_at(op_in, 16)? as usize);
        if size > payload_len {
            return None;
        }
        if self.clamp(offset, size as u64) < size as u64 {
            return Some(Outcome::now(Reply::Error(libc::ENOSPC)));
        }
        self.shared.store.write(offset, &io[..size]);
        let pending = self.shared.arrive(Op::Write, offset, size as u64);
        Some(Outcome { reply: Reply::Ok(fuse_abi::write_out(io, size as u32)?), pending })
    }

    fn readdir(&self, op_in: &[u8], io: &mut [u8]) -> Option<Outcome> {
        let (offset, size) = (fuse_abi::u64_at(op_in, 8)?, fuse_abi::u32_at(op_in, 16)? as usize);
        let entries = [(ROOT, DT_DIR, "."), (ROOT, DT_DIR, ".."), (FILE_INO, DT_REG, FILE_NAME)];
        let end = size.min(io.len());
        let out = &mut io[..end];
        let mut pos = 0;
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            match fuse_abi::dirent(out, pos, *ino, (i + 1) as u64, *kind, name) {
                Some(next) => pos = next,
                None => break,
            }
        }
        Some(Outcome::now(Reply::Ok(pos)))
    }
}

const ROOT: u64 = fuse_abi::ROOT_ID;
const DT_DIR: u32 = libc::DT_DIR as u32;
const DT_REG: u32 = libc::DT_REG as u32;

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_abi::*;
    use smartcon_engine::clock::{now_ns, Clock, ManualClock, RealClock, Sleeper};

    fn disk() -> Disk {
        let spec = smartcon_devemu::parse_spec("emu:sdcard").unwrap();
        Disk::new(Shared::new(&spec, 1 << 20, false, None).unwrap(), true)
    }

    fn header(opcode: u32, nodeid: u64) -> InHeader {
        InHeader { len: 0, opcode, unique: 9, nodeid }
    }

    fn rw_in(offset: u64, size: u32) -> [u8; 40] {
        let mut b = [0u8; 40];
        b[8..16].copy_from_slice(&offset.to_ne_bytes());
        b[16..20].copy_from_slice(&size.to_ne_bytes());
        b
    }

    #[test]
    fn init_asks_for_io_uring_only_when_offered_and_wanted() {
        let d = disk();
        let mut init_in = [0u8; 64];
        init_in[0..4].copy_from_slice(&7u32.to_ne_bytes());
        init_in[4..8].copy_from_slice(&44u32.to_ne_bytes());
        init_in[12..16].copy_from_slice(&((FUSE_INIT_EXT | FUSE_ASYNC_READ) as u32).to_ne_bytes());
        let mut io = vec![0u8; 4096];
        // Not offered (enable_uring=N): not taken.
        assert_eq!(d.handle(&header(INIT, 0), &init_in, &mut io, 0).reply, Reply::Ok(INIT_OUT_BYTES));
        assert_eq!(u32_at(&io, 32), Some(0));
        assert_eq!(u32_at(&io, 4), Some(42));
        assert_eq!(d.initialized(), None);
        d.set_initialized();
        assert_eq!(d.initialized(), Some(false));
        init_in[16..20].copy_from_slice(&((FUSE_OVER_IO_URING >> 32) as u32).to_ne_bytes());
        d.handle(&header(INIT, 0), &init_in, &mut io, 0);
        assert_eq!(u32_at(&io, 32), Some(1 << 9));
        assert_eq!(d.initialized(), Some(true));
    }

    #[test]
    fn writes_read_back_and_stay_inside_the_file() {
        let d = disk();
        let mut io = vec![0u8; 8192];
        io[..4096].fill(0xab);
        let w = d.handle(&header(WRITE, FILE_INO), &rw_in(4096, 4096), &mut io, 4096);
        assert_eq!(w.reply, Reply::Ok(WRITE_OUT_BYTES));
        assert_eq!(u32_at(&io, 0), Some(4096));
        // Unmodelled: answered at once.
        assert_eq!(w.pending, None);
        let r = d.handle(&header(READ, FILE_INO), &rw_in(4096 - 16, 64), &mut io, 0);
        assert_eq!(r.reply, Reply::Ok(64));
        assert_eq!(&io[..16], &[0u8; 16]);
        assert!(io[16..64].iter().all(|b| *b == 0xab));
        // Past the end: a short read, a refused write.
        assert_eq!(d.handle(&header(READ, FILE_INO), &rw_in((1 << 20) - 8, 64), &mut io, 0).reply, Reply::Ok(8));
        let past = d.handle(&header(WRITE, FILE_INO), &rw_in((1 << 20) - 8, 64), &mut io, 64);
        assert_eq!(past.reply, Reply::Error(libc::ENOSPC));
        // A write claiming more data than the message carries is malformed.
        let short = d.handle(&header(WRITE, FILE_INO), &rw_in(0, 4096), &mut io, 100);
        assert_eq!(short.reply, Reply::Error(libc::EINVAL));
    }

    #[test]
    fn modelled_requests_are_held_until_the_model_says() {
        let d = disk();
        d.shared().set_modelled([10_000, 20_000]);
        let mut io = vec![0u8; 8192];
        let w = d.handle(&header(WRITE, FILE_INO), &rw_in(0, 4096), &mut io, 4096);
        let p = w.pending.expect("a modelled write is held");
        assert!(p.write && p.model_ns > p.overhead_ns);
        assert_eq!(p.bytes, 4096);
        assert_eq!(p.overhead_ns, 20_000);
        assert_eq!(p.due_ns, p.arrival_ns + p.model_ns - p.overhead_ns);
        d.shared().replied(&p, p.due_ns);
        assert_eq!(d.shared().served(), vec![Served { write: true, model_ns: p.model_ns, lateness_ns: 0 }]);
    }

    #[test]
    fn every_held_reply_is_held_through_the_threads_smartport() {
        use smartcon_engine::smartport::StrategyChoice;
        let block = Strategy::Block;
        for (strategy, want) in [
            (None, Some(block)),
            (Some(StrategyChoice::Fixed(block)), Some(block)),
            (Some(StrategyChoice::Fixed(Strategy::Spin)), Some(Strategy::Spin)),
            (Some(StrategyChoice::Fixed(Strategy::Hybrid)), Some(Strategy::Hybrid)),
            (Some(StrategyChoice::Smart), None),
        ] {
            let spec = smartcon_devemu::parse_spec("emu:sdcard").unwrap();
            let d = Disk::new(Shared::new(&spec, 1 << 20, false, strategy).unwrap(), true);
            let mut w = d.shared().waiter().unwrap();
            let mut io = vec![0u8; 8192];
            // Unmodelled (setup): nothing is held, the port sees nothing.
            assert_eq!(d.handle(&header(WRITE, FILE_INO), &rw_in(0, 4096), &mut io, 4096).pending, None);
            d.shared().set_modelled([0, 0]);
            for (op, len) in [(WRITE, 4096), (READ, 0)] {
                let p = d.handle(&header(op, FILE_INO), &rw_in(0, 4096), &mut io, len).pending.expect("held");
                let (replied_ns, port) = w.hold(&p, now_ns);
                port.unwrap();
                assert!(replied_ns >= p.due_ns, "{strategy:?}: the reply went out before its instant");
            }
            let c = w.counters();
            assert_eq!((c.ios, c.bytes), (2, 8192), "{strategy:?}: both requests counted by the port");
            let margin = w.port.reference_margin_ns();
            assert_eq!(margin.is_some(), strategy.is_none(), "{strategy:?}: only the default is the reference wait");
            assert!(margin.is_none_or(|m| m >= SPIN_NS), "the reference margin {margin:?} is below the old fixed one");
            let (by, references) = d.shared().waits();
            assert_eq!(by.iter().sum::<u64>(), 2, "{strategy:?}");
            if let Some(s) = want {
                assert_eq!((c.by_strategy[s.index()], by[s.index()]), (2, 2), "{strategy:?}");
            }
            // Only the default's block is the reference wait; --strategy block is the kernel's.
            let reference = if strategy.is_none() { 2 } else { 0 };
            assert_eq!((references, c.reference_waits), (reference, reference), "{strategy:?}");
            assert_eq!((d.shared().inflight().ours(), d.shared().inflight().unmatched_leaves()), (0, 0));
            assert_eq!(d.shared().strategy_name(), strategy.map_or("reference", |s| s.name()));
        }
    }

    #[test]
    fn the_server_holds_its_replies_on_the_clock_it_was_given() {
        // emu:hdd's writes take milliseconds of model time; on this clock no thread sleeps.
        for strategy in
            [None, Some(StrategyChoice::Fixed(Strategy::Block)), Some(StrategyChoice::Fixed(Strategy::Spin))]
        {
            let manual = Arc::new(ManualClock::default());
            manual.0.store(5_000_000_000, Ordering::Relaxed);
            let spec = smartcon_devemu::parse_spec("emu:hdd").unwrap();
            let shared = Shared::with_time(&spec, 1 << 20, false, strategy, manual.clone()).unwrap();
            let d = Disk::new(shared, true);
            let mut w = d.shared().waiter().unwrap();
            d.shared().set_modelled([0, 0]);
            let mut io = vec![0u8; 4096];
            for i in 0..3u64 {
                let before = manual.now_ns();
                let p = d.handle(&header(WRITE, FILE_INO), &rw_in(i * 4096, 4096), &mut io, 4096).pending;
                let p = p.expect("held");
                // The request arrived on the injected clock, not the host's.
                assert_eq!(p.arrival_ns, before, "{strategy:?}");
                assert!(p.model_ns > 0, "{strategy:?}");
                let (replied_ns, port) = w.hold(&p, || manual.now_ns());
                port.unwrap();
                // Held until its instant on that clock; every wait of the port moved it.
                assert!(replied_ns >= p.due_ns, "{strategy:?}: a reply before its instant");
                d.shared().replied(&p, replied_ns);
            }
            assert_eq!(w.counters().ios, 3, "{strategy:?}");
            assert_eq!(d.shared().served().len(), 3, "{strategy:?}");
            assert_eq!((d.shared().inflight().ours(), d.shared().inflight().unmatched_leaves()), (0, 0));
        }
    }

    /// An io_uring queue's ring with no request coming: its waits are timers.
    struct QuietRing;

    impl EventWait for QuietRing {
        fn sleep_until_or_event(&mut self, at_ns: u64) -> Result<(), Error> {
            RealClock.sleep_until(at_ns);
            Ok(())
        }
        fn event_seen(&mut self) -> bool {
            false
        }
    }

    #[test]
    fn an_io_uring_queue_holds_several_replies_through_its_port_and_answers_the_earliest_first() {
        for strategy in [
            None,
            Some(StrategyChoice::Fixed(Strategy::Block)),
            Some(StrategyChoice::Fixed(Strategy::Spin)),
            Some(StrategyChoice::Smart),
        ] {
            let spec = smartcon_devemu::parse_spec("emu:sdcard,channels=2").unwrap();
            let d = Disk::new(Shared::new(&spec, 1 << 20, false, strategy).unwrap(), true);
            let mut w = d.shared().waiter().unwrap();
            d.shared().set_modelled([0, 0]);
            let mut io = vec![0u8; 8192];
            let mut holds = Holds::new();
            let mut pending = Vec::new();
            // Three writes at once on two channels: the third waits for a channel, so the
            // replies are due in two instants, and the queue holds all three.
            for key in 0..3 {
                let p = d.handle(&header(WRITE, FILE_INO), &rw_in(key as u64 * 4096, 4096), &mut io, 4096).pending;
                let p = p.expect("held");
                w.arrive(&mut holds, key, &p).unwrap();
                pending.push(p);
            }
            assert_eq!(d.shared().inflight().ours(), 3, "{strategy:?}: all three in the counters while held");
            let mut last_due = 0;
            while let Some(end) = w.wait_earliest(&mut holds, &mut QuietRing).unwrap() {
                let Earliest::Due(ready) = end else { panic!("{strategy:?}: an event from a quiet ring") };
                let p = pending[*ready.key()];
                let now = now_ns();
                assert!(now >= p.due_ns, "{strategy:?}: a reply before its instant");
                assert!(p.due_ns >= last_due, "{strategy:?}: not the earliest first");
                last_due = p.due_ns;
                d.shared().replied(&p, now);
                w.replied(ready).unwrap();
            }
            let (by, references) = d.shared().waits();
            assert_eq!((by.iter().sum::<u64>(), w.counters().ios), (3, 3), "{strategy:?}");
            if let Some(StrategyChoice::Fixed(s)) = strategy {
                assert_eq!(by[s.index()], 3, "{strategy:?}");
            }
            assert_eq!(references, if strategy.is_none() { 3 } else { 0 }, "{strategy:?}");
            assert_eq!((d.shared().inflight().ours(), d.shared().inflight().unmatched_leaves()), (0, 0));
            assert_eq!(d.shared().served().len(), 3);
        }
    }

    #[test]
    fn lookup_and_readdir_show_one_file() {
        let d = disk();
        let mut io = vec![0u8; 4096];
        io[..5].copy_from_slice(b"disk\0");
        assert_eq!(d.handle(&header(LOOKUP, ROOT_ID), &[], &mut io, 5).reply, Reply::Ok(ENTRY_OUT_BYTES));
        assert_eq!(u64_at(&io, 0), Some(FILE_INO));
        io[..5].copy_from_slice(b"disq\0");
        assert_eq!(d.handle(&header(LOOKUP, ROOT_ID), &[], &mut io, 5).reply, Reply::Error(libc::ENOENT));
        let all = d.handle(&header(READDIR, ROOT_ID), &rw_in(0, 4096), &mut io, 0);
        // ".", ".." (32 bytes each after padding to 8) and "disk" (32).
        assert_eq!(all.reply, Reply::Ok(96));
        let rest = d.handle(&header(READDIR, ROOT_ID), &rw_in(2, 4096), &mut io, 0);
        assert_eq!(rest.reply, Reply::Ok(32));
        assert_eq!(d.handle(&header(OPEN, ROOT_ID), &[0; 8], &mut io, 0).reply, Reply::Error(libc::EISDIR));
        assert_eq!(d.handle(&header(FORGET, FILE_INO), &[0; 8], &mut io, 0).reply, Reply::None);
        assert_eq!(d.handle(&header(4242, FILE_INO), &[], &mut io, 0).reply, Reply::Error(libc::ENOSYS));
    }
}

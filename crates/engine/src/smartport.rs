//! SmartPort: "decide, then wait" for one thread's I/O, in one place.
//!
//! A port is what an application (or smartcon's own job runner, Postmark, the
//! interposition library and the C ABI) does I/O through. For every `read_at` /
//! `write_at` it enters the device's in-flight counters (which return the backlog ahead),
//! asks the Decision Module how to wait (one atomic load of the System Monitor, no
//! syscall), hands the I/O to the port below with that wait (io_uring for descriptors, the
//! device model for emulated targets), leaves the counters (also on error and panic, by a
//! guard) and counts what it did: I/Os, bytes, strategy and reason, latency.
//!
//! Ports on a descriptor the caller owns ([`SmartPort::open`]) find the device as a
//! [`crate::target::file::FileTarget`] does (`blk:NAME` through /sys/dev/block), its
//! logical block size, and whether the descriptor is O_DIRECT; on an O_DIRECT descriptor
//! a misaligned buffer, length or offset is refused with `EINVAL` before any I/O, because
//! the kernel would refuse it anyway, with no word on what was wrong. The thresholds are
//! the device's stored profile, else the paper's defaults (and [`SmartPort::notes`] says
//! so). Ports of one device share its in-flight counters through a process-wide registry,
//! so threads of one process see each other's backlog as the paper's block layer would.
//!
//! Non-goals: more than one request in flight per port (callers are synchronous), vectored
//! I/O, closing the caller's descriptor (the port never does).
//!
//! See [`SmartPort`] for an example that runs.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Deref;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, OnceLock};

use crate::clock::SharedTime;
use crate::decision::{decide, decide_paper, DeviceState, Reason, Request, Strategy, SystemState, Thresholds};
use crate::error::{Error, ErrorKind};
use crate::learn::{BlockCheck, SpinCheck};
use crate::monitor::{SystemMonitor, ThreadRegistration};
use crate::profile::{profile_path, Profile};
use crate::target::file::{describe_fd, FilePort};
use crate::target::{DeviceQueue, InFlight, IoBuf, Port, PortWait, Target};
use crate::wait::reference::WakeMargin;
use crate::wait::{self, PollParams, WaitPolicy};
use smartcon_util::Op;

pub use crate::job::StrategyChoice;

pub mod group;
pub use group::{DueAt, Earliest, GroupCall, GroupOutcome, GroupWait, Holds, Ready};

/// What a port counts: the per-thread statistics of a job (I/Os, bytes, by strategy
/// indexed by [`Strategy::index`], by reason indexed by [`Reason::index`], the latency
/// histogram, spin fallbacks, polling). [`PortCounters::merge`] adds two together.
pub type PortCounters = crate::stats::ThreadStats;

/// The largest spin budget a port takes.
pub const SPIN_BUDGET_NS_MAX: u64 = 10_000_000_000;

/// How a port waits when its strategy (fixed or decided) is `block`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BlockWait {
    /// The kernel wakes the thread at the completion (io_uring), paying the real wake-up:
    /// the strategy smartcon measures. Every port's default.
    #[default]
    Kernel,
    /// The reference wait ([`crate::wait::reference`]): asleep until a margin before the
    /// device's completion instant, then watching the clock to it. The emulator's
    /// yardstick (`emulate replay --real-time`), not a way a job waits; the port owns a
    /// [`WakeMargin`], calibrated when it opens (about 8 ms of sleeps on the host's clock).
    /// Ports on files and block devices wait as [`BlockWait::Kernel`] does, and count no
    /// reference waits.
    Reference,
}

/// How a port waits and what it decides with.
#[derive(Clone)]
pub struct SmartPortOptions {
    pub strategy: StrategyChoice,
    pub spin_budget_ns: u64,
    pub poll: PollParams,
    /// How a `block` wait is done: the kernel's wake-up (default) or the reference wait.
    pub block_wait: BlockWait,
    /// Thresholds; `None` = the stored profile of the device under `$SMARTCON_HOME`, else
    /// (for emulated targets) the model's, else the paper's defaults, with a note.
    pub profile: Option<Profile>,
    /// The System Monitor `smart` reads; `None` = the process-wide one
    /// ([`SystemMonitor::shared`]).
    pub monitor: Option<Arc<SystemMonitor>>,
    /// The device's in-flight counters; `None` = the target's own, or for a descriptor the
    /// process-wide entry of its device.
    pub inflight: Option<Arc<InFlight>>,
    /// The clock latencies are measured on; `None` = the target's (the host's clock for a
    /// descriptor). The simulation injects its virtual clock here and in the target.
    pub time: Option<SharedTime>,
}

impl Default for SmartPortOptions {
    fn default() -> Self {
        SmartPortOptions {
            strategy: StrategyChoice::Smart,
            spin_budget_ns: crate::job::SPIN_BUDGET_NS_DEFAULT,
            poll: PollParams::DEFAULT,
            block_wait: BlockWait::Kernel,
            profile: None,
            monitor: None,
            inflight: None,
            time: None,
        }
    }
}

impl SmartPortOptions {
    fn validate(&self) -> Result<(), Error> {
        if self.spin_budget_ns == 0 || self.spin_budget_ns > SPIN_BUDGET_NS_MAX {
            return Err(Error::os(ErrorKind::Usage, libc::EINVAL, "spin budget must be more than 0 and at most 10 s"));
        }
        if self.strategy.polls() {
            self.poll.validate(crate::job::DURATION_NS_MAX).map_err(|e| Error { errno: Some(libc::EINVAL), ..e })?;
        }
        Ok(())
    }
}

/// The device's in-flight counters: a target's own, or a shared entry.
enum Counters<'t> {
    Borrowed(&'t InFlight),
    Shared(Arc<InFlight>),
}

impl Deref for Counters<'_> {
    type Target = InFlight;

    #[inline]
    fn deref(&self) -> &InFlight {
        match self {
            Counters::Borrowed(c) => c,
            Counters::Shared(c) => c,
        }
    }
}

/// The in-flight counters of `device_id`, shared by every port of this process on it.
fn shared_inflight(device_id: &str) -> Arc<InFlight> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Arc<InFlight>>>> = OnceLock::new();
    let registry = REGISTRY.get_or_init(Default::default);
    // A panic elsewhere while holding the lock leaves the map intact: keep using it.
    let mut map = registry.lock().unwrap_or_else(|p| p.into_inner());
    map.entry(device_id.to_string()).or_default().clone()
}

/// Leaves the in-flight counters when dropped, also when the I/O fails or panics.
struct Entered<'c> {
    inflight: &'c InFlight,
    bytes: u64,
}

impl Drop for Entered<'_> {
    #[inline]
    fn drop(&mut self) {
        self.inflight.leave(self.bytes);
    }
}

/// Where the I/O goes.
enum Backend<'t> {
    /// A descriptor: the caller's, or one a workload opened (it can be changed).
    Fd(Box<FilePort>),
    /// A target's port (an emulated device, or a file smartcon opened).
    Target(Box<dyn Port + Send + 't>),
    /// No port below: a device whose own code submits each command and shows the port its
    /// status, for group calls ([`SmartTargetPort::for_group`], [`group`]).
    Group,
}

/// A port whose device counters may be borrowed from a target (`'t`). Applications use
/// [`SmartPort`], the same type owning everything.
pub struct SmartTargetPort<'t> {
    backend: Backend<'t>,
    inflight: Counters<'t>,
    device_id: String,
    block_bytes: u64,
    /// Check alignment before each I/O (O_DIRECT).
    direct: bool,
    strategy: StrategyChoice,
    spin_budget_ns: u64,
    thresholds: Thresholds,
    profile_source: String,
    monitor: Arc<SystemMonitor>,
    /// The polling policy of this port (its predictor learns this thread's I/O); present
    /// whenever the strategy may poll.
    policy: Option<Box<dyn WaitPolicy>>,
    /// A group port's second policy, for the waits that start at the last part seen and not
    /// at the submission (a pipelined command's next pages), so neither kind of wait is
    /// learnt with the other's; `None` on other ports.
    group_next: Option<Box<dyn WaitPolicy>>,
    counters: PortCounters,
    notes: Vec<String>,
    /// The target is emulated: its port reports the model's completion instant, so each
    /// I/O's lateness against it is recorded (the accuracy of the real-time emulation).
    emulated: bool,
    /// Whether spinning pays, as this port's own waits say (smart and smart-hybrid).
    spin_check: SpinCheck,
    /// The clock each I/O's latency is measured on.
    time: SharedTime,
    /// [`BlockWait::Reference`]: the wake-up margin a `block` wait's timer is armed early
    /// by; `None` waits for the kernel's wake-up.
    margin: Option<Box<WakeMargin>>,
    /// The model's completion instant of the last I/O (emulated targets), else the instant
    /// it was seen.
    last_done_ns: u64,
    /// The instant the port had the last I/O back from the port below (its wait ended),
    /// before counting it.
    last_seen_ns: u64,
    /// How to block, as this port's own waits say: `None` on an emulated device, whose
    /// `sync` spins.
    block_check: Option<BlockCheck>,
    /// Where its checks are kept when it closes ([`crate::learn::keep`]): its device and
    /// strategy; `None` for the strategies that keep no checks, and on an injected clock
    /// (the simulation's): the kept figures are this process's real waits, and a seeded
    /// run must neither take them nor leave its own for the next (it repeats byte for byte).
    learnt_key: Option<String>,
}

impl Drop for SmartTargetPort<'_> {
    /// Keeps what the port's checks learnt for the next port on the same device
    /// ([`crate::learn::keep`]).
    fn drop(&mut self) {
        if let Some(key) = &self.learnt_key {
            let learnt =
                crate::learn::Learnt { spin: std::mem::take(&mut self.spin_check), block: self.block_check.take() };
            crate::learn::keep(key, learnt);
        }
    }
}

/// Where an I/O goes in its file: at an offset (pread/pwrite), or at the descriptor's file
/// offset, which it advances (read/write).
#[derive(Debug, Clone, Copy)]
enum At {
    Offset(u64),
    Current,
}

impl At {
    #[inline]
    fn offset(self) -> Option<u64> {
        match self {
            At::Offset(o) => Some(o),
            At::Current => None,
        }
    }
}

/// Which of the port's checks measures an I/O's wait, and the way it waited.
#[derive(Debug, Clone, Copy)]
enum Checked {
    /// The spin check; `true` spun.
    Spin(bool),
    /// The block check; `true` the plain call.
    Block(bool),
}

thread_local! {
    /// This thread's registration with the process-wide monitor, held until it exits.
    static SHARED_REGISTRATION: RefCell<Option<ThreadRegistration>> = const { RefCell::new(None) };
}

/// Leaves the calling thread's CPU time out of the process-wide monitor's figure, once
/// per thread however many ports it opens, as the job's threads are left out of theirs:
/// a spinner must not see its own spinning as load. A caller that passes its own monitor
/// registers its threads itself.
fn register_with_shared(monitor: &SystemMonitor) {
    let _ = SHARED_REGISTRATION.try_with(|r| {
        if let Ok(mut r) = r.try_borrow_mut() {
            if r.is_none() {
                *r = Some(monitor.register_current_thread());
            }
        }
    });
}

/// One thread's port: `Send`, not `Sync`. Owns its io_uring; never closes the descriptor.
///
/// Reading a file to its end, each read waited for by blocking:
///
/// ```
/// use std::io::Write;
/// use std::os::fd::AsRawFd;
/// use smartcon_engine::decision::Strategy;
/// use smartcon_engine::smartport::{SmartPort, SmartPortOptions, StrategyChoice};
///
/// let path = std::env::temp_dir().join(format!("smartport-doc-{}", std::process::id()));
/// std::fs::File::create(&path)?.write_all(&[7u8; 10_000])?;
/// let file = std::fs::File::open(&path)?; // buffered: any alignment will do
/// let options = SmartPortOptions { strategy: StrategyChoice::Fixed(Strategy::Block), ..Default::default() };
/// let mut port = SmartPort::open(file.as_raw_fd(), options)?;
/// let mut buf = vec![0u8; 4096];
/// let mut offset = 0;
/// loop {
///     let n = port.read_at(&mut buf, offset)?;
///     if n == 0 {
///         break;
///     }
///     assert!(buf[..n].iter().all(|&b| b == 7));
///     offset += n as u64;
/// }
/// assert_eq!(offset, 10_000); // the last read was short: 10_000 - 2 * 4096 bytes
/// assert_eq!(port.counters().ios, 4); // three reads with data, one at the end
/// assert_eq!(port.counters().by_strategy[Strategy::Block.index()], 4);
/// drop(port);
/// std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type SmartPort = SmartTargetPort<'static>;

// A port moves between threads (the C ABI hands it around); it is not shared.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<SmartPort>();
};

/// The polling policy a port of `strategy` waits with, started at `start_ns`; `None` for
/// the strategies that never poll.
fn policy_of(strategy: StrategyChoice, poll: PollParams, start_ns: u64) -> Option<Box<dyn WaitPolicy>> {
    match strategy {
        StrategyChoice::Fixed(s) => wait::policy_for(s, poll, start_ns),
        StrategyChoice::Smart | StrategyChoice::SmartStatic | StrategyChoice::Paper | StrategyChoice::PaperQ1 => None,
        StrategyChoice::SmartHybrid => wait::policy_for(Strategy::Hybrid, poll, start_ns),
    }
}

/// The thresholds to use and a note when they are not a measured profile.
fn resolve_profile(
    device_id: &str,
    given: Option<Profile>,
    builtin: Option<Profile>,
) -> Result<(Profile, Option<String>), Error> {
    if let Some(p) = given {
        return Ok((p, None));
    }
    let path = profile_path(device_id);
    if path.exists() {
        return Ok((Profile::load(&path)?, None));
    }
    if let Some(p) = builtin {
        return Ok((p, None));
    }
    let note = format!(
        "no profile for {device_id} at {}: using the paper's thresholds (64 KiB, queue limit 0); run `smartcon probe` on the device to measure its own",
        path.display()
    );
    Ok((Profile::paper_default(device_id), Some(note)))
}

impl SmartPort {
    /// Opens a port on a descriptor the caller owns (a regular file or a block device).
    pub fn open(fd: RawFd, options: SmartPortOptions) -> Result<SmartPort, Error> {
        let inflight = options.inflight.clone();
        SmartTargetPort::open_fd(fd, inflight.map(Counters::Shared), options)
    }
}

impl<'t> SmartTargetPort<'t> {
    /// A port on a target (the job runner): I/O through the target's own port, against
    /// its in-flight counters unless the options name others.
    pub fn on_target(target: &'t dyn Target, options: SmartPortOptions) -> Result<SmartTargetPort<'t>, Error> {
        options.validate()?;
        let device_id = target.device_id();
        let (profile, note) = resolve_profile(&device_id, options.profile.clone(), target.builtin_profile())?;
        let queue = target.device_queue();
        let (inflight, queue) = match options.inflight.clone() {
            Some(c) => {
                let queue = queue.map(|q| DeviceQueue { inflight: c.clone(), ..q });
                (Counters::Shared(c), queue)
            }
            None => (Counters::Borrowed(target.inflight()), queue),
        };
        let time = options.time.clone().unwrap_or_else(|| target.time());
        let mut port = SmartTargetPort::assemble(
            Backend::Target(target.open_port()?),
            inflight,
            queue,
            device_id,
            target.block_bytes(),
            target.direct(),
            &profile,
            &options,
            time,
        )?;
        port.notes.extend(note);
        port.notes.extend(target.warnings());
        port.emulated = target.model_service_ns(Op::Read, 4096).is_some();
        if port.emulated {
            port.block_check = None;
        } else {
            // No completion instant to watch the clock to: the kernel's wake-up, counted so.
            port.margin = None;
        }
        Ok(port)
    }

    /// A port on a descriptor whose device counters are `inflight` (a workload that opens
    /// files on a target's file system and shares the target's counters).
    pub fn open_on(fd: RawFd, inflight: &'t InFlight, options: SmartPortOptions) -> Result<SmartTargetPort<'t>, Error> {
        SmartTargetPort::open_fd(fd, Some(Counters::Borrowed(inflight)), options)
    }

    fn open_fd(
        fd: RawFd,
        inflight: Option<Counters<'t>>,
        options: SmartPortOptions,
    ) -> Result<SmartTargetPort<'t>, Error> {
        options.validate()?;
        if fd < 0 {
            return Err(Error::os(ErrorKind::Usage, libc::EBADF, format!("fd {fd} is not a file descriptor")));
        }
        let info = describe_fd(fd)?;
        let (profile, note) = resolve_profile(&info.device_id, options.profile.clone(), None)?;
        let inflight = inflight.unwrap_or_else(|| Counters::Shared(shared_inflight(&info.device_id)));
        // Counters of our own are watched here; borrowed ones belong to a target whose
        // own ports have them watched.
        let queue = match (&inflight, &info.stat_path) {
            (Counters::Shared(c), Some(p)) => Some(DeviceQueue { inflight: c.clone(), stat_path: p.clone() }),
            _ => None,
        };
        let backend = Backend::Fd(Box::new(FilePort::new(fd)?));
        let time = options.time.clone().unwrap_or_else(crate::clock::real);
        let mut port = SmartTargetPort::assemble(
            backend,
            inflight,
            queue,
            info.device_id,
            info.block_bytes,
            info.direct,
            &profile,
            &options,
            time,
        )?;
        port.notes.extend(note);
        // A descriptor has no completion instant to watch the clock to (see BlockWait).
        port.margin = None;
        if !info.direct && !info.is_block {
            port.notes.push(format!(
                "fd {fd} is not open with O_DIRECT: reads the page cache holds never reach {}, and the decision is made for the device",
                port.device_id
            ));
        }
        Ok(port)
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        backend: Backend<'t>,
        inflight: Counters<'t>,
        queue: Option<DeviceQueue>,
        device_id: String,
        block_bytes: u64,
        direct: bool,
        profile: &Profile,
        options: &SmartPortOptions,
        time: SharedTime,
    ) -> Result<SmartTargetPort<'t>, Error> {
        let monitor = match &options.monitor {
            Some(m) => m.clone(),
            None => {
                let m = SystemMonitor::shared()?;
                register_with_shared(&m);
                m
            }
        };
        // Others' requests on the device, from the kernel's count, read on the ticker.
        if let Some(q) = &queue {
            monitor.watch_device(q);
        }
        let mut counters = PortCounters::new();
        counters.begin_at(time.now_ns());
        let policy = policy_of(options.strategy, options.poll, counters.start_ns);
        // `paper` decides on the profile's size and CPU thresholds with the class the
        // device's type declares (read once here, never per I/O) and the paper's Q.
        let thresholds = match options.strategy {
            StrategyChoice::Paper | StrategyChoice::PaperQ1 => profile.thresholds().paper(
                crate::profile::declared_class_of(&device_id),
                (options.strategy == StrategyChoice::PaperQ1) as u32,
            ),
            _ => profile.thresholds(),
        };
        // On the host's clock, the margin starts from this thread's measured overshoot; a
        // virtual clock's sleeps end on their instant.
        let margin = (options.block_wait == BlockWait::Reference)
            .then(|| Box::new(if time.is_real() { WakeMargin::calibrate() } else { WakeMargin::new() }));
        let learnt_key = (matches!(options.strategy, StrategyChoice::Smart | StrategyChoice::SmartHybrid)
            && options.time.is_none())
        .then(|| format!("{device_id}\0{:?}", options.strategy));
        Ok(SmartTargetPort {
            backend,
            inflight,
            device_id,
            block_bytes: block_bytes.max(1),
            direct,
            strategy: options.strategy,
            spin_budget_ns: options.spin_budget_ns,
            thresholds,
            profile_source: profile.source.clone(),
            monitor,
            policy,
            group_next: None,
            counters,
            notes: Vec::new(),
            emulated: false,
            spin_check: SpinCheck::new(),
            block_check: Some(BlockCheck::new()),
            time,
            margin,
            last_done_ns: 0,
            last_seen_ns: 0,
            learnt_key,
        }
        .with_kept_checks())
    }

    /// Starts from the checks the last closed port on this device and strategy kept
    /// ([`crate::learn::take`]).
    fn with_kept_checks(mut self) -> Self {
        if let Some(key) = &self.learnt_key {
            let l = crate::learn::take(key);
            self.spin_check = l.spin;
            self.block_check = Some(l.block.unwrap_or_default());
        }
        self
    }

    /// Moves the port to another descriptor on the same device (a workload that opens and
    /// closes files), keeping its ring, policy and counters.
    pub fn set_fd(&mut self, fd: RawFd) -> Result<(), Error> {
        let Backend::Fd(port) = &mut self.backend else {
            return Err(Error::new(ErrorKind::Usage, "a port on a target cannot move to a descriptor"));
        };
        let info = describe_fd(fd)?;
        if info.device_id != self.device_id {
            return Err(Error::os(
                ErrorKind::Usage,
                libc::EXDEV,
                format!("fd {fd} is on {}, this port is on {}; open a port there", info.device_id, self.device_id),
            ));
        }
        port.set_fd(fd);
        self.direct = info.direct;
        self.block_bytes = info.block_bytes.max(1);
        Ok(())
    }

    /// One positional read, waited for as the decision says. `Ok(n)` with `n <
    /// buf.len()` is a short read (end of file). A failed read is an error whose
    /// [`Error::raw_os_error`] is the errno pread(2) would have set.
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<usize, Error> {
        self.transfer(IoBuf::Read(buf), offset)
    }

    /// One positional write, as [`SmartTargetPort::read_at`].
    pub fn write_at(&mut self, buf: &[u8], offset: u64) -> Result<usize, Error> {
        self.transfer(IoBuf::Write(buf), offset)
    }

    /// One read at the descriptor's file offset, which it advances by the bytes read, as
    /// read(2) does: the same decision, wait and counting as [`SmartTargetPort::read_at`].
    /// A `sync` wait is read(2) itself; a ring wait takes the offset with lseek and moves
    /// it after (io_uring's own "current position" does not move it for an O_DIRECT read
    /// that completes asynchronously: see `FilePort::transfer_current`). On an O_DIRECT
    /// descriptor the buffer's address and length are checked here; the offset, which the
    /// port does not know before the I/O, is checked by the kernel (EINVAL, no I/O, the
    /// offset unchanged). The caller keeps other threads from moving the offset meanwhile.
    /// Only ports on a descriptor have a file offset: on a target it is a usage error.
    pub fn read_current(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        self.transfer_where(IoBuf::Read(buf), At::Current)
    }

    /// One write at the descriptor's file offset, as [`SmartTargetPort::read_current`].
    pub fn write_current(&mut self, buf: &[u8]) -> Result<usize, Error> {
        self.transfer_where(IoBuf::Write(buf), At::Current)
    }

    /// The decision for a request of `bytes` with `ahead` in flight before it: the
    /// strategy to wait with, for the SmartCon choices why, and for smart's spins whether
    /// the wait is one the spin check measures (`Some(spun)`).
    /// (A function of the port's fields, not of the port: the caller holds its device
    /// counters borrowed meanwhile.)
    #[inline]
    fn choose(
        strategy: StrategyChoice,
        monitor: &SystemMonitor,
        thresholds: &Thresholds,
        spin_check: &mut SpinCheck,
        block_check: Option<&mut BlockCheck>,
        (bytes, write, ahead): (u64, bool, DeviceState),
    ) -> (Strategy, Option<Reason>, Option<Checked>) {
        match strategy {
            StrategyChoice::Fixed(s) => (s, None, None),
            StrategyChoice::SmartStatic => {
                // Fed as smart is (CpuSide), so that the two differ by the checks alone.
                let system =
                    SystemState { cpu_utilization_pct: monitor.cpu_utilization_for(thresholds.cpu_threshold_pct) };
                let d = decide(Request { bytes, write }, ahead, system, thresholds);
                (d.strategy, Some(d.reason), None)
            }
            StrategyChoice::Smart | StrategyChoice::SmartHybrid => {
                // The reading compared with hysteresis against its own noise (CpuSide).
                let system =
                    SystemState { cpu_utilization_pct: monitor.cpu_utilization_for(thresholds.cpu_threshold_pct) };
                let d = decide(Request { bytes, write }, ahead, system, thresholds);
                if d.strategy == Strategy::Block {
                    if let Some(check) = block_check {
                        let s = check.choose(bytes, write);
                        return (s, Some(d.reason), Some(Checked::Block(s == Strategy::Sync)));
                    }
                }
                if d.strategy != Strategy::Spin {
                    return (d.strategy, Some(d.reason), None);
                }
                let spin = match strategy {
                    StrategyChoice::SmartHybrid => Strategy::Hybrid,
                    _ => Strategy::Spin,
                };
                let c = spin_check.choose(bytes, write, d.reason, spin);
                (c.strategy, Some(c.reason), Some(Checked::Spin(c.spun)))
            }
            StrategyChoice::Paper | StrategyChoice::PaperQ1 => {
                // The machine-wide figure, the spinner included (the paper's CPU_Stat).
                let system = SystemState { cpu_utilization_pct: monitor.machine_utilization_pct() };
                let d = decide_paper(Request { bytes, write }, ahead, system, thresholds);
                (d.strategy, Some(d.reason), None)
            }
        }
    }

    /// O_DIRECT's alignment of the buffer, the length and (when known) the offset.
    fn check_aligned(&self, buf: &IoBuf<'_>, offset: Option<u64>) -> Result<(), Error> {
        let b = self.block_bytes;
        let what = if !(buf.addr() as u64).is_multiple_of(b) {
            format!("the buffer's address {:#x}", buf.addr())
        } else if !(buf.len() as u64).is_multiple_of(b) {
            format!("the length {}", buf.len())
        } else if let Some(offset) = offset.filter(|o| !o.is_multiple_of(b)) {
            format!("the offset {offset}")
        } else {
            return Ok(());
        };
        Err(Error::os(
            ErrorKind::Usage,
            libc::EINVAL,
            format!(
                "{what} is not a multiple of {}'s logical block size ({b} bytes), which O_DIRECT needs; use an aligned buffer (smartcon_engine::target::AlignedBuf) and block-sized lengths and offsets",
                self.device_id
            ),
        ))
    }

    /// One I/O: decide, wait that way, count. No allocation and no syscall beyond the
    /// I/O's own.
    pub fn transfer(&mut self, buf: IoBuf<'_>, offset: u64) -> Result<usize, Error> {
        self.transfer_where(buf, At::Offset(offset))
    }

    #[inline]
    fn transfer_where(&mut self, buf: IoBuf<'_>, at: At) -> Result<usize, Error> {
        if self.direct {
            self.check_aligned(&buf, at.offset())?;
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let bytes = buf.len() as u64;
        let t0 = self.time.now_ns();
        let entered = Entered { inflight: &self.inflight, bytes };
        let ahead = entered.inflight.enter(bytes);
        let write = matches!(buf, IoBuf::Write(_));
        let (strategy, reason, checked) = Self::choose(
            self.strategy,
            &self.monitor,
            &self.thresholds,
            &mut self.spin_check,
            self.block_check.as_mut(),
            (bytes, write, ahead),
        );
        let reference = strategy == Strategy::Block && self.margin.is_some();
        let wait: PortWait<'_> = match (PortWait::simple(strategy, self.spin_budget_ns), self.margin.as_deref_mut()) {
            (Some(PortWait::Block), Some(margin)) => PortWait::Reference { margin },
            (Some(w), _) => w,
            (None, _) => {
                let Some(policy) = self.policy.as_deref_mut() else {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        format!("{} was chosen but the port has no polling policy", strategy.name()),
                    ));
                };
                // With smart's hysteresis (the side shared per threshold): the plain
                // reading flipped hybrid between its two branches, I/O by I/O, wherever the
                // others' demand sat within its noise of the threshold, and a run's CPU with
                // the share of I/Os that happened to take the busy one.
                let cpu = self.thresholds.cpu_threshold_pct;
                policy.set_cpu_busy(self.monitor.cpu_utilization_for(cpu) > cpu);
                PortWait::Poll { policy, ahead }
            }
        };
        let outcome = match (&mut self.backend, at) {
            (Backend::Fd(port), At::Offset(offset)) => port.transfer(buf, offset, wait),
            (Backend::Fd(port), At::Current) => port.transfer_current(buf, wait),
            (Backend::Target(port), At::Offset(offset)) => port.transfer(buf, offset, wait),
            (Backend::Target(_), At::Current) => Err(Error::os(
                ErrorKind::Usage,
                libc::ESPIPE,
                "an I/O at the file offset through a port on a target: only a descriptor has one",
            )),
            (Backend::Group, _) => Err(group::no_port_below("a single I/O")),
        };
        drop(entered);
        let outcome = outcome?;
        let t1 = self.time.now_ns();
        self.last_done_ns = if self.emulated { outcome.done_ns } else { t1 };
        self.last_seen_ns = t1;
        match (checked, self.block_check.as_mut()) {
            (Some(Checked::Spin(spun)), _) => self.spin_check.record(bytes, write, spun, t1 - t0),
            (Some(Checked::Block(sync)), Some(check)) => check.record(bytes, write, sync, t1 - t0),
            _ => {}
        }
        self.counters.record(t1 - t0, outcome.bytes as u64, strategy, reason, outcome.fell_back);
        self.counters.reference_waits += u64::from(reference);
        if self.emulated {
            self.counters.record_lateness(t1.saturating_sub(outcome.done_ns));
        }
        if let Some(w) = &outcome.polled {
            self.counters.record_polled(w, outcome.done_ns);
        }
        Ok(outcome.bytes)
    }

    /// Flushes what was written to stable storage. A flush waits on the device's cache,
    /// far beyond any spin threshold: the polling strategies block for it, and so does
    /// smart, except on a very fast device, where it flushes as it does its I/O, inline
    /// (see [`SmartTargetPort::fsync_strategy`]).
    pub fn fsync(&mut self) -> Result<(), Error> {
        let strategy = self.fsync_strategy();
        match &mut self.backend {
            Backend::Fd(port) => port.fsync(strategy, self.spin_budget_ns)?,
            Backend::Target(port) => port.fsync(strategy, self.spin_budget_ns)?,
            Backend::Group => return Err(group::no_port_below("a flush")),
        };
        self.counters.fsyncs += 1;
        Ok(())
    }

    /// How a flush waits. A fixed simple strategy flushes its own way, a polling one
    /// blocks. smart blocks, except on a very fast device, where it calls fsync(2) inline
    /// as `sync` does: io_uring always hands a flush to its worker thread, so a blocking
    /// flush there costs a hand-off and a wake-up for what zram completes at once (a
    /// mailserver cell, a write and a flush per I/O, ran at 1/1.32 to 1/1.76 of `sync`).
    pub fn fsync_strategy(&self) -> Strategy {
        match self.strategy {
            StrategyChoice::Smart
            | StrategyChoice::SmartHybrid
            | StrategyChoice::SmartStatic
            | StrategyChoice::Paper
            | StrategyChoice::PaperQ1
                if self.thresholds.class == crate::decision::DeviceClass::VeryFast =>
            {
                Strategy::Sync
            }
            s => s.simple(),
        }
    }

    /// What the port did since it opened (or since [`SmartTargetPort::reset_counters`]).
    pub fn counters(&self) -> &PortCounters {
        &self.counters
    }

    /// Now, on the port's clock: the one its counters, its waits and the instants it
    /// reports are on (the injected one, else the host's).
    pub fn now_ns(&self) -> u64 {
        self.time.now_ns()
    }

    /// Starts counting afresh from now (after a warm-up).
    pub fn reset_counters(&mut self) {
        self.counters = PortCounters::new();
        self.counters.begin_at(self.time.now_ns());
    }

    /// The device's completion instant of the last I/O on an emulated target (the model's),
    /// else the instant the port saw it complete; on the port's clock.
    pub fn last_done_ns(&self) -> u64 {
        self.last_done_ns
    }

    /// The instant the last I/O's wait ended (read right after the port below returned,
    /// before the port counted it), on the port's clock. Minus [`Self::last_done_ns`] on an
    /// emulated target: how late the completion was seen, the lateness the port records.
    pub fn last_seen_ns(&self) -> u64 {
        self.last_seen_ns
    }

    /// Ends the count (time, CPU, context switches of the calling thread, the policy's
    /// wake-up overshoot) and hands it over; the port counts afresh afterwards.
    pub fn finish(&mut self) -> PortCounters {
        let mut done = std::mem::take(&mut self.counters);
        done.end_at(self.time.now_ns());
        done.overshoot_ns = self.policy.as_ref().and_then(|p| p.overshoot_ns());
        done.sleep_cpu_ns = self.policy.as_ref().and_then(|p| p.sleep_cpu_ns());
        self.counters.begin_at(self.time.now_ns());
        done
    }

    pub fn device_id(&self) -> &str {
        &self.device_id
    }

    /// The logical block size O_DIRECT I/O must be aligned to.
    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// Whether the descriptor is O_DIRECT (alignment is checked).
    pub fn direct(&self) -> bool {
        self.direct
    }

    pub fn strategy(&self) -> StrategyChoice {
        self.strategy
    }

    /// How the port's `block` waits are done.
    pub fn block_wait(&self) -> BlockWait {
        if self.margin.is_some() {
            BlockWait::Reference
        } else {
            BlockWait::Kernel
        }
    }

    /// With [`BlockWait::Reference`]: the wake-up margin is at least `floor_ns` from now on
    /// ([`WakeMargin::set_floor`]); nothing otherwise.
    pub fn set_reference_margin_floor(&mut self, floor_ns: u64) {
        if let Some(m) = self.margin.as_deref_mut() {
            m.set_floor(floor_ns);
        }
    }

    /// The reference wait's margin now, `None` without [`BlockWait::Reference`].
    pub fn reference_margin_ns(&self) -> Option<u64> {
        self.margin.as_deref().map(WakeMargin::margin_ns)
    }

    /// Where the thresholds came from: `probe`, `builtin-model`, `paper-default`.
    pub fn profile_source(&self) -> &str {
        &self.profile_source
    }

    /// Lines the user should see once (no profile: the paper's defaults; a buffered fd).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::AlignedBuf;
    use std::os::fd::AsRawFd;

    fn temp_file(name: &str, bytes: usize) -> (std::path::PathBuf, std::fs::File) {
        let path = std::env::temp_dir().join(format!("smartport-{name}-{}", std::process::id()));
        let data: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        (path, f)
    }

    fn fixed(s: Strategy) -> SmartPortOptions {
        SmartPortOptions {
            strategy: StrategyChoice::Fixed(s),
            monitor: Some(Arc::new(SystemMonitor::fixed(0))),
            profile: Some(Profile::paper_default("test")),
            ..Default::default()
        }
    }

    #[test]
    fn every_strategy_reads_the_data_and_is_counted_under_its_name() {
        let (path, f) = temp_file("all", 3 * 4096 + 100);
        for s in Strategy::ALL {
            let mut port = SmartPort::open(f.as_raw_fd(), fixed(s)).unwrap();
            let mut buf = vec![0u8; 4096];
            let mut off = 0u64;
            loop {
                let n = port.read_at(&mut buf, off).unwrap();
                if n == 0 {
                    break;
                }
                assert!(buf[..n].iter().enumerate().all(|(i, &b)| b == ((off as usize + i) % 251) as u8), "{s:?}");
                off += n as u64;
            }
            assert_eq!(off, 3 * 4096 + 100, "{s:?}: the short read at the end is Ok(100)");
            let c = port.counters();
            assert_eq!((c.ios, c.bytes, c.by_strategy[s.index()]), (5, 3 * 4096 + 100, 5), "{s:?}");
            assert_eq!(c.polled_ios > 0, s.is_polling(), "{s:?} polls exactly when it is a polling strategy");
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn every_strategy_reads_and_writes_at_the_file_offset_and_advances_it() {
        use std::io::{Seek, SeekFrom};
        let (path, mut f) = temp_file("current", 3 * 4096 + 100);
        for s in Strategy::ALL {
            let mut port = SmartPort::open(f.as_raw_fd(), fixed(s)).unwrap();
            f.seek(SeekFrom::Start(200)).unwrap();
            let mut buf = vec![0u8; 4096];
            let mut at = 200u64;
            let mut sizes = Vec::new();
            loop {
                let n = port.read_current(&mut buf).unwrap();
                sizes.push(n);
                assert_eq!(f.stream_position().unwrap(), at + n as u64, "{s:?}: the offset moves by the bytes read");
                if n == 0 {
                    break;
                }
                assert!(buf[..n].iter().enumerate().all(|(i, &b)| b == ((at as usize + i) % 251) as u8), "{s:?}");
                at += n as u64;
            }
            assert_eq!(sizes, [4096, 4096, 3996, 0], "{s:?}: the last read is short, then none");
            // A write at the offset the program set, then the offset past it.
            f.seek(SeekFrom::Start(4096)).unwrap();
            assert_eq!(port.write_current(&[s.index() as u8; 10]).unwrap(), 10, "{s:?}");
            assert_eq!(f.stream_position().unwrap(), 4096 + 10, "{s:?}");
            let mut back = [0u8; 10];
            assert_eq!(port.read_at(&mut back, 4096).unwrap(), 10);
            assert_eq!(back, [s.index() as u8; 10], "{s:?}");
            // The file as it was, for the next strategy's reads.
            let was: Vec<u8> = (4096..4106).map(|i| (i % 251) as u8).collect();
            assert_eq!(port.write_at(&was, 4096).unwrap(), 10);
            assert_eq!(port.counters().ios, 7, "{s:?}: four reads, a write, a positional read and write");
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_port_on_a_target_has_no_file_offset() {
        let target = crate::target::file::FileTarget::temporary(8192, None).unwrap();
        let mut port = SmartTargetPort::on_target(&target, fixed(Strategy::Sync)).unwrap();
        let mut buf = AlignedBuf::new(4096);
        let e = port.read_current(buf.as_mut_slice()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESPIPE), "{}", e.message);
        assert_eq!(port.counters().ios, 0);
    }

    #[test]
    fn writes_land_and_smart_records_its_reasons() {
        let (path, f) = temp_file("write", 8192);
        let options = SmartPortOptions {
            monitor: Some(Arc::new(SystemMonitor::fixed(0))),
            profile: Some(Profile::paper_default("test")),
            // Its own counters: other tests' I/O on the same device would count as a queue.
            inflight: Some(Arc::new(InFlight::default())),
            ..Default::default()
        };
        let mut port = SmartPort::open(f.as_raw_fd(), options).unwrap();
        assert_eq!(port.write_at(&[9u8; 4096], 4096).unwrap(), 4096);
        port.fsync().unwrap();
        let mut buf = [0u8; 8192];
        assert_eq!(port.read_at(&mut buf, 0).unwrap(), 8192);
        assert!(buf[4096..].iter().all(|&b| b == 9));
        let c = port.counters();
        assert_eq!((c.ios, c.fsyncs), (2, 1));
        // Idle CPU, nothing ahead, 4 KiB and 8 KiB under 64 KiB: the rule says spin, because
        // the CPU is available; the first waits of a size block, to measure what spinning
        // gains (see crate::learn), and say so.
        assert_eq!(c.by_strategy[Strategy::Block.index()], 2);
        assert_eq!(c.by_reason[Reason::Trial.index()], 2);
        // Past the measuring, the rule's own reason.
        for _ in 0..100 {
            port.read_at(&mut buf[..4096], 0).unwrap();
        }
        let c = port.counters();
        assert!(c.by_reason[Reason::CpuAvailable.index()] + c.by_reason[Reason::SpinUnpaid.index()] > 0);
        assert_eq!(c.by_reason.iter().sum::<u64>(), c.ios, "every I/O has its reason");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_failed_read_carries_the_errno_pread_would_set() {
        let (path, _) = temp_file("ebadf", 4096);
        let wo = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        for s in [Strategy::Block, Strategy::Spin, Strategy::Sync, Strategy::Hybrid] {
            let mut port = SmartPort::open(wo.as_raw_fd(), fixed(s)).unwrap();
            let e = port.read_at(&mut [0u8; 512], 0).unwrap_err();
            assert_eq!((e.kind, e.raw_os_error()), (ErrorKind::Io, Some(libc::EBADF)), "{s:?}: {e}");
            // The port is still usable.
            assert_eq!(port.write_at(&[1u8; 512], 0).unwrap(), 512);
        }
        let e = SmartPort::open(-1, fixed(Strategy::Block)).err().unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        let (r, _w) = std::io::pipe().unwrap();
        let e = SmartPort::open(r.as_raw_fd(), fixed(Strategy::Block)).err().unwrap();
        assert_eq!((e.kind, e.raw_os_error()), (ErrorKind::Target, Some(libc::ESPIPE)));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn misaligned_direct_io_is_a_usage_error_naming_what_is_off() {
        let (path, _) = temp_file("direct", 8192);
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid path; the result is checked and the fd closed below.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECT | libc::O_CLOEXEC) };
        if fd < 0 {
            eprintln!("skipped: the temp directory's file system refuses O_DIRECT");
            std::fs::remove_file(&path).unwrap();
            return;
        }
        let mut port = SmartPort::open(fd, fixed(Strategy::Block)).unwrap();
        assert!(port.direct());
        let b = port.block_bytes() as usize;
        let mut buf = AlignedBuf::new(2 * 4096);
        let s = buf.as_mut_slice();
        for (range, offset, what) in [(1..1 + b, 0u64, "address"), (0..b + 1, 0, "length"), (0..b, 1, "offset")] {
            let e = port.read_at(&mut s[range], offset).unwrap_err();
            assert_eq!((e.kind, e.raw_os_error()), (ErrorKind::Usage, Some(libc::EINVAL)));
            assert!(e.message.contains(what) && e.message.contains("O_DIRECT"), "{e}");
        }
        assert_eq!(port.counters().ios, 0, "no I/O was issued");
        assert_eq!(port.read_at(&mut s[..b], b as u64).unwrap(), b);
        drop(port);
        // SAFETY: ours, closed once.
        unsafe { libc::close(fd) };
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn ports_of_one_device_share_its_counters_and_a_missing_profile_is_noted() {
        let (path, f) = temp_file("notes", 4096);
        let info = describe_fd(f.as_raw_fd()).unwrap();
        let a = shared_inflight(&info.device_id);
        let b = shared_inflight(&info.device_id);
        assert!(Arc::ptr_eq(&a, &b));
        // With no stored profile, the paper's defaults and a note.
        let (p, note) = resolve_profile(&info.device_id, None, None).unwrap();
        if !profile_path(&info.device_id).exists() {
            assert_eq!(p.source, "paper-default");
            assert!(note.unwrap().contains("smartcon probe"));
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn smart_flushes_inline_on_a_very_fast_device_and_blocks_elsewhere() {
        let (path, f) = temp_file("fsync", 4096);
        let port = |strategy, class| {
            let profile = Profile { class, ..Profile::paper_default("test") };
            let options = SmartPortOptions { strategy, profile: Some(profile), ..fixed(Strategy::Block) };
            SmartPort::open(f.as_raw_fd(), options).unwrap()
        };
        use crate::decision::DeviceClass::*;
        for (choice, class, want) in [
            (StrategyChoice::Smart, VeryFast, Strategy::Sync),
            (StrategyChoice::SmartHybrid, VeryFast, Strategy::Sync),
            (StrategyChoice::Paper, Fast, Strategy::Block),
            (StrategyChoice::Smart, Fast, Strategy::Block),
            (StrategyChoice::Smart, Mainstream, Strategy::Block),
            (StrategyChoice::Fixed(Strategy::Spin), VeryFast, Strategy::Spin),
            (StrategyChoice::Fixed(Strategy::Sync), Fast, Strategy::Sync),
            (StrategyChoice::Fixed(Strategy::Hybrid), VeryFast, Strategy::Block),
        ] {
            let mut p = port(choice, class);
            assert_eq!(p.fsync_strategy(), want, "{choice:?} on {class:?}");
            p.fsync().unwrap();
            assert_eq!(p.counters().fsyncs, 1);
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_port_on_a_file_has_its_disk_queue_watched_by_its_monitor() {
        let target: Box<dyn Target> = Box::new(crate::target::file::FileTarget::temporary(1 << 20, None).unwrap());
        let Some(queue) = target.device_queue() else {
            eprintln!("skipped: the temp directory is not on a block device sysfs knows");
            return;
        };
        assert!(queue.stat_path.ends_with("stat"), "{}", queue.stat_path.display());
        let monitor = Arc::new(SystemMonitor::start(crate::monitor::WINDOW_NS_MIN));
        let options = SmartPortOptions { monitor: Some(monitor.clone()), ..fixed(Strategy::Block) };
        let a = SmartTargetPort::on_target(target.as_ref(), options.clone()).unwrap();
        let b = SmartTargetPort::on_target(target.as_ref(), options).unwrap();
        assert_eq!(monitor.watched_devices(), 1, "one device, however many ports");
        drop((a, b));
        monitor.stop();
    }

    #[test]
    fn bad_options_are_usage_errors() {
        let (path, f) = temp_file("opts", 4096);
        let o = SmartPortOptions { spin_budget_ns: 0, ..fixed(Strategy::Spin) };
        assert_eq!(SmartPort::open(f.as_raw_fd(), o).err().unwrap().kind, ErrorKind::Usage);
        let mut o = fixed(Strategy::FixedPoll);
        o.poll.interval_ns = 0;
        assert_eq!(SmartPort::open(f.as_raw_fd(), o).err().unwrap().kind, ErrorKind::Usage);
        std::fs::remove_file(&path).unwrap();
    }
}

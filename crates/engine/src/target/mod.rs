//! Targets: where I/O goes. A target is shared by all I/O threads of a job; each thread
//! opens its own [`Port`] (its own io_uring), so on real targets the per-I/O path shares
//! nothing but the in-flight counters the Decision Module reads (emulated devices also take
//! their channel lock, as a device's queue would).
//!
//! Kinds here ([`file`]):
//! - a path: a regular file (O_DIRECT, or buffered with a warning where the file system
//!   refuses it) or a block device; either is written (write jobs, `--verify`'s prefill)
//!   only with `--destructive` or when smartcon created it itself;
//! - a temporary file smartcon creates, fills and removes afterwards (`tmp:SIZE[@DIR]`).
//!
//! The emulated device (`emu:PRESET[,key=value...]`, a devemu model and RAM store behind
//! this module's [`Port`]) and the registry that parses a `--target` into any of the three
//! kinds live in `smartcon-emutarget`, above both the engine and devemu: the engine does
//! not depend on its device emulator.

pub mod buffer;
pub mod file;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub use buffer::AlignedBuf;
use smartcon_util::Op;

use crate::decision::{DeviceState, Strategy};
use crate::error::{Error, ErrorKind};
use crate::profile::Profile;
use crate::wait::reference::WakeMargin;
use crate::wait::{WaitPolicy, Waited};

/// How a target is opened.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    pub write: bool,
    /// The user allowed writes to a file or block device smartcon did not create.
    pub destructive: bool,
    /// smartcon created this file or block device itself (temporary file, loop, zram) and
    /// may write to it.
    pub created_by_tool: bool,
}

/// Counters of what is in flight on a device. `enter` returns what was ahead.
///
/// Two parts: this process's own requests (`enter`/`leave`, exact, per I/O), and the
/// requests of everyone else on the same block device, as the kernel counts them, less
/// ours: published by the System Monitor's ticker from the device's stat file
/// ([`crate::monitor::SystemMonitor::watch_device`]), never read on the I/O path. A
/// device the kernel does not count (an emulated one), or one nobody watches, has no
/// others: then only our own requests are ahead.
#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicU32,
    bytes: AtomicU64,
    /// Other processes' requests in flight on the device at the monitor's last tick.
    others_count: AtomicU32,
    /// Their bytes, estimated from the device's mean request size over the last tick.
    others_bytes: AtomicU64,
    /// Leaves that found less in flight than they removed (see [`InFlight::leave`]).
    unmatched_leaves: AtomicU64,
}

impl InFlight {
    /// Adds a request and returns the state ahead of it: our own requests now, plus the
    /// others' at the monitor's last tick (two more relaxed loads, no syscall).
    #[inline]
    pub fn enter(&self, bytes: u64) -> DeviceState {
        let ours_count = self.count.fetch_add(1, Ordering::Relaxed);
        let ours_bytes = self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let others_count = self.others_count.load(Ordering::Relaxed);
        let others_bytes = self.others_bytes.load(Ordering::Relaxed);
        DeviceState {
            inflight_count: ours_count.saturating_add(others_count),
            inflight_bytes: ours_bytes.saturating_add(others_bytes),
        }
    }

    /// Removes a request that [`InFlight::enter`]ed. Leaving more than entered is a bug
    /// of the caller: a debug build stops on it; a release build (which may run inside an
    /// unmodified program through the preload library, where a panic is no answer) keeps
    /// the counters at zero instead of wrapping to 4 billion requests ahead, which would
    /// make every later smart I/O block as `queue_over_limit`, and counts the mismatch in
    /// [`InFlight::unmatched_leaves`].
    #[inline]
    pub fn leave(&self, bytes: u64) {
        let count = self.count.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
        let bytes_before =
            self.bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| Some(b.saturating_sub(bytes)));
        // fetch_update with a closure that always returns Some never fails.
        let (count, bytes_before) = (count.unwrap_or(0), bytes_before.unwrap_or(0));
        if count == 0 || bytes_before < bytes {
            self.unmatched_leaves.fetch_add(1, Ordering::Relaxed);
        }
        debug_assert!(count > 0, "InFlight::leave without a matching enter");
        debug_assert!(bytes_before >= bytes, "InFlight::leave of {bytes} bytes with {bytes_before} in flight");
    }

    /// Adds `count` requests of `bytes` in all at once (one device command carrying several
    /// threads' requests, [`crate::smartport::group`]) and returns the state ahead of them,
    /// as [`InFlight::enter`] does for one.
    #[inline]
    pub fn enter_many(&self, count: u32, bytes: u64) -> DeviceState {
        let ours_count = self.count.fetch_add(count, Ordering::Relaxed);
        let ours_bytes = self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let others_count = self.others_count.load(Ordering::Relaxed);
        let others_bytes = self.others_bytes.load(Ordering::Relaxed);
        DeviceState {
            inflight_count: ours_count.saturating_add(others_count),
            inflight_bytes: ours_bytes.saturating_add(others_bytes),
        }
    }

    /// Removes what [`InFlight::enter_many`] added, as [`InFlight::leave`] does for one
    /// (kept at zero, and counted, if it finds fewer).
    #[inline]
    pub fn leave_many(&self, count: u32, bytes: u64) {
        let before = self.count.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(count)));
        let bytes_before =
            self.bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| Some(b.saturating_sub(bytes)));
        let (before, bytes_before) = (before.unwrap_or(0), bytes_before.unwrap_or(0));
        if before < count || bytes_before < bytes {
            self.unmatched_leaves.fetch_add(1, Ordering::Relaxed);
        }
        debug_assert!(before >= count, "InFlight::leave_many of {count} with {before} in flight");
        debug_assert!(bytes_before >= bytes, "InFlight::leave_many of {bytes} bytes with {bytes_before} in flight");
    }

    /// How many [`InFlight::leave`] calls found fewer requests or bytes in flight than they
    /// removed (0 unless a caller is wrong).
    pub fn unmatched_leaves(&self) -> u64 {
        self.unmatched_leaves.load(Ordering::Relaxed)
    }

    /// Our own requests in flight now (the monitor subtracts them from the kernel's count).
    pub fn ours(&self) -> u32 {
        self.count.load(Ordering::Relaxed)
    }

    /// Publishes what the kernel counts beyond our requests (the monitor's ticker; tests).
    pub fn set_others(&self, count: u32, bytes: u64) {
        self.others_count.store(count, Ordering::Relaxed);
        self.others_bytes.store(bytes, Ordering::Relaxed);
    }

    /// The others' requests and bytes as last published.
    pub fn others(&self) -> (u32, u64) {
        (self.others_count.load(Ordering::Relaxed), self.others_bytes.load(Ordering::Relaxed))
    }
}

/// Where the kernel counts a target's device queue: our counters for it, and the stat
/// file of its block device (`/sys/dev/block/MAJ:MIN/stat`, the whole disk's for a
/// partition), which the System Monitor reads on its ticker.
#[derive(Debug, Clone)]
pub struct DeviceQueue {
    pub inflight: std::sync::Arc<InFlight>,
    pub stat_path: PathBuf,
}

/// The stat file of block device `major:minor` (of the whole disk when it is a partition),
/// if sysfs has one.
pub fn device_stat_path(major: u32, minor: u32) -> Option<PathBuf> {
    let base = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    let path = if base.join("partition").exists() { base.join("../stat") } else { base.join("stat") };
    path.exists().then_some(path)
}

/// The buffer of one I/O: where a read puts its data, or what a write sends.
pub enum IoBuf<'b> {
    Read(&'b mut [u8]),
    Write(&'b [u8]),
}

impl IoBuf<'_> {
    #[inline]
    pub fn op(&self) -> Op {
        match self {
            IoBuf::Read(_) => Op::Read,
            IoBuf::Write(_) => Op::Write,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        match self {
            IoBuf::Read(b) => b.len(),
            IoBuf::Write(b) => b.len(),
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffer's address, for alignment checks.
    #[inline]
    pub fn addr(&self) -> usize {
        match self {
            IoBuf::Read(b) => b.as_ptr() as usize,
            IoBuf::Write(b) => b.as_ptr() as usize,
        }
    }
}

/// How a port waits for one I/O: the strategy, made concrete.
pub enum PortWait<'p> {
    /// Sleep until the completion wakes the thread.
    Block,
    /// Busy-wait up to `budget_ns`, then sleep.
    Spin { budget_ns: u64 },
    /// A plain positional syscall; programmed I/O on emulated devices.
    Sync,
    /// Poll at the instants the policy chooses.
    Poll { policy: &'p mut dyn WaitPolicy, ahead: DeviceState },
    /// The reference wait ([`crate::wait::reference`]): asleep until `margin`'s margin
    /// before the completion instant, then watching the clock to it; the wake-up's
    /// overshoot goes into `margin`. Not a strategy: the emulator's yardstick. Emulated
    /// ports wait so; ports on files and block devices block.
    Reference { margin: &'p mut WakeMargin },
}

impl<'p> PortWait<'p> {
    /// The wait of a strategy that needs no policy; `None` for the polling ones.
    pub fn simple(strategy: Strategy, spin_budget_ns: u64) -> Option<PortWait<'p>> {
        match strategy {
            Strategy::Block => Some(PortWait::Block),
            Strategy::Spin => Some(PortWait::Spin { budget_ns: spin_budget_ns }),
            Strategy::Sync => Some(PortWait::Sync),
            Strategy::Hybrid
            | Strategy::FixedPoll
            | Strategy::HalfMean
            | Strategy::IopollHybrid
            | Strategy::Pas
            | Strategy::Dip => None,
        }
    }
}

/// What happened while waiting.
#[derive(Debug, Clone, Copy, Default)]
pub struct WaitOutcome {
    /// Bytes moved: fewer than asked is a short transfer (end of file), not an error.
    pub bytes: usize,
    /// The spin budget ran out and the thread went to sleep.
    pub fell_back: bool,
    /// For the polling strategies: what the policy did.
    pub polled: Option<Waited>,
    /// For the polling strategies: when the device completed the request, where the device
    /// knows it (emulated devices); else the instant the completion was seen.
    pub done_ns: u64,
}

/// One thread's handle on a target: it moves data and waits as told. Deciding how to
/// wait, and counting, is [`crate::smartport`]'s job, so it exists once.
pub trait Port {
    /// Performs one I/O at `offset`, waiting as `wait` says. Returns when the data is in
    /// place (read) or on the device (write), with the bytes moved (a short count at the
    /// end of the target is not an error). A failed I/O is an error carrying its errno.
    fn transfer(&mut self, buf: IoBuf<'_>, offset: u64, wait: PortWait<'_>) -> Result<WaitOutcome, Error>;

    /// One whole I/O of `buf.len()` bytes, waited for by a strategy that needs no policy:
    /// the form for maintenance I/O (prefill, read-back, background load). A short
    /// transfer is an error here.
    fn io(
        &mut self,
        op: Op,
        buf: &mut [u8],
        offset: u64,
        strategy: Strategy,
        spin_budget_ns: u64,
    ) -> Result<WaitOutcome, Error> {
        let wait = PortWait::simple(strategy, spin_budget_ns).ok_or_else(|| {
            Error::new(ErrorKind::Usage, format!("{} needs a wait policy (a SmartPort)", strategy.name()))
        })?;
        let want = buf.len();
        let io_buf = match op {
            Op::Read => IoBuf::Read(buf),
            Op::Write => IoBuf::Write(buf),
        };
        let outcome = self.transfer(io_buf, offset, wait)?;
        check_whole(outcome.bytes, want, op, offset)?;
        Ok(outcome)
    }

    /// Flushes what was written to stable storage, waiting as `strategy` says. Emulated
    /// devices model no volatile cache, so for them this is free.
    fn fsync(&mut self, _strategy: Strategy, _spin_budget_ns: u64) -> Result<WaitOutcome, Error> {
        Ok(WaitOutcome::default())
    }
}

/// A transfer that must be whole: fewer bytes is an I/O error (EIO).
pub fn check_whole(got: usize, want: usize, op: Op, offset: u64) -> Result<(), Error> {
    if got != want {
        return Err(Error::os(
            ErrorKind::Io,
            libc::EIO,
            format!("short {} at offset {offset}: {got} of {want} bytes", op.name()),
        ));
    }
    Ok(())
}

/// The error of a failed I/O, with the errno the kernel gave.
pub fn io_error(errno: i32, op: Op, offset: u64) -> Error {
    let e = std::io::Error::from_raw_os_error(errno);
    Error::os(ErrorKind::Io, errno, format!("{} at offset {offset}: {e}", op.name()))
}

/// A target shared by the threads of a job.
pub trait Target: Send + Sync {
    /// What the user called it (`emu:optane`, `/var/tmp/f`).
    fn label(&self) -> &str;
    /// The device the profile belongs to (`emu:optane`, `blk:vda`).
    fn device_id(&self) -> String;
    fn capacity_bytes(&self) -> u64;
    /// Sizes and offsets must be multiples of this (the logical block size under O_DIRECT).
    fn block_bytes(&self) -> u64;
    fn open_port(&self) -> Result<Box<dyn Port + Send + '_>, Error>;
    /// Whether I/O bypasses the page cache (O_DIRECT): then buffers, sizes and offsets
    /// must be multiples of [`Target::block_bytes`].
    fn direct(&self) -> bool {
        false
    }
    fn inflight(&self) -> &InFlight;
    /// The device queue the kernel counts for this target (files and block devices), so
    /// the monitor can add other processes' requests to [`Target::inflight`].
    fn device_queue(&self) -> Option<DeviceQueue> {
        None
    }
    /// The descriptor I/O goes through (files and block devices): what the I/O load's
    /// worker processes read from.
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Thresholds computed from the model, for emulated devices.
    fn builtin_profile(&self) -> Option<Profile> {
        None
    }
    /// The device time of one request with no queueing, for emulated devices.
    fn model_service_ns(&self, _op: Op, _bytes: u64) -> Option<u64> {
        None
    }
    /// Warnings the user must see (buffered fallback).
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
    /// The clock and sleeper this target's instants are on: the host's, unless one was
    /// injected (an emulated device on the simulation's virtual time).
    fn time(&self) -> crate::clock::SharedTime {
        crate::clock::real()
    }
    /// Writes raw bytes bypassing the engine, to corrupt data on purpose in tests.
    fn poke(&self, offset: u64, data: &[u8]) -> Result<(), Error>;
}

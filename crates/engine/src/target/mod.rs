//! Targets: where I/O goes. A target is shared by all I/O threads of a job; each thread
//! opens its own [`Port`] (its own io_uring), so on real targets the per-I/O path shares
//! nothing but the in-flight counters the Decision Module reads (emulated devices also take
//! their channel lock, as a device's queue would).
//!
//! Kinds:
//! - a path: a regular file (O_DIRECT, or buffered with a warning where the file system
//!   refuses it) or a block device (writes refused unless `--destructive`, or the device was
//!   created by smartcon itself);
//! - `tmp:SIZE[@DIR]`: a temporary file smartcon creates, fills and removes afterwards;
//! - `emu:PRESET[,key=value...]`: an emulated device in RAM with a timing model.

pub mod buffer;
pub mod emu;
pub mod file;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub use buffer::AlignedBuf;
use smartcon_devemu::{units, EmuSpec, Op};

use crate::decision::{DeviceState, Strategy};
use crate::error::{Error, ErrorKind};
use crate::profile::Profile;
use crate::wait::{WaitPolicy, Waited};

/// What `--target` said.
#[derive(Debug, Clone)]
pub enum TargetSpec {
    Emu(EmuSpec),
    Path(PathBuf),
    Temp { size_bytes: u64, dir: Option<PathBuf> },
}

/// The largest temporary file smartcon will create.
pub const TEMP_BYTES_MAX: u64 = 64 << 30;

/// Parses a `--target` argument.
pub fn parse_target(text: &str) -> Result<TargetSpec, Error> {
    if text.starts_with("emu:") {
        return smartcon_devemu::parse_spec(text).map(TargetSpec::Emu).map_err(|e| Error::new(ErrorKind::Usage, e));
    }
    if let Some(rest) = text.strip_prefix("tmp:") {
        let (size, dir) = match rest.split_once('@') {
            Some((s, d)) => (s, Some(PathBuf::from(d))),
            None => (rest, None),
        };
        let size_bytes =
            units::parse_size(size).map_err(|e| Error::new(ErrorKind::Usage, format!("tmp target: {e}")))?;
        if !(1 << 20..=TEMP_BYTES_MAX).contains(&size_bytes) || size_bytes % 4096 != 0 {
            return Err(Error::new(
                ErrorKind::Usage,
                "tmp target size must be a multiple of 4 KiB between 1 MiB and 64 GiB",
            ));
        }
        return Ok(TargetSpec::Temp { size_bytes, dir });
    }
    if text.is_empty() {
        return Err(Error::new(ErrorKind::Usage, "empty target"));
    }
    Ok(TargetSpec::Path(PathBuf::from(text)))
}

/// How a target is opened.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    pub write: bool,
    /// The user allowed writes to a block device smartcon did not create.
    pub destructive: bool,
    /// smartcon created this block device itself (loop, zram) and may write to it.
    pub created_by_tool: bool,
}

/// Counters of what is in flight on a device. `enter` returns what was ahead.
#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicU32,
    bytes: AtomicU64,
}

impl InFlight {
    /// Adds a request and returns the state ahead of it.
    #[inline]
    pub fn enter(&self, bytes: u64) -> DeviceState {
        let inflight_count = self.count.fetch_add(1, Ordering::Relaxed);
        let inflight_bytes = self.bytes.fetch_add(bytes, Ordering::Relaxed);
        DeviceState { inflight_count, inflight_bytes }
    }

    #[inline]
    pub fn leave(&self, bytes: u64) {
        self.count.fetch_sub(1, Ordering::Relaxed);
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// What happened while waiting.
#[derive(Debug, Clone, Copy, Default)]
pub struct WaitOutcome {
    /// The spin budget ran out and the thread went to sleep.
    pub fell_back: bool,
    /// For the polling strategies: what the policy did.
    pub polled: Option<Waited>,
    /// For the polling strategies: when the device completed the request, where the device
    /// knows it (emulated devices); else the instant the completion was seen.
    pub done_ns: u64,
}

/// One thread's handle on a target.
pub trait Port {
    /// Performs one I/O of `len` bytes at `offset` into or out of `buf`, waiting as
    /// `strategy` says. Returns when the data is in place (read) or on the device (write).
    fn io(
        &mut self,
        op: Op,
        buf: &mut [u8],
        offset: u64,
        strategy: Strategy,
        spin_budget_ns: u64,
    ) -> Result<WaitOutcome, Error>;

    /// Performs one I/O like [`Port::io`], waiting as the polling `policy` says.
    fn io_polled(
        &mut self,
        op: Op,
        buf: &mut [u8],
        offset: u64,
        ahead: DeviceState,
        policy: &mut dyn WaitPolicy,
    ) -> Result<WaitOutcome, Error>;

    /// Flushes what was written to stable storage, waiting as `strategy` says. Emulated
    /// devices model no volatile cache, so for them this is free.
    fn fsync(&mut self, _strategy: Strategy, _spin_budget_ns: u64) -> Result<WaitOutcome, Error> {
        Ok(WaitOutcome::default())
    }
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
    fn open_port(&self) -> Result<Box<dyn Port + '_>, Error>;
    fn inflight(&self) -> &InFlight;
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
    /// Writes raw bytes bypassing the engine, to corrupt data on purpose in tests.
    fn poke(&self, offset: u64, data: &[u8]) -> Result<(), Error>;
}

/// Opens a target.
pub fn open(spec: &TargetSpec, options: OpenOptions) -> Result<Box<dyn Target>, Error> {
    match spec {
        TargetSpec::Emu(e) => Ok(Box::new(emu::EmuTarget::new(e.clone())?)),
        TargetSpec::Path(p) => Ok(Box::new(file::FileTarget::open(p, options)?)),
        TargetSpec::Temp { size_bytes, dir } => Ok(Box::new(file::FileTarget::temporary(*size_bytes, dir.as_deref())?)),
    }
}

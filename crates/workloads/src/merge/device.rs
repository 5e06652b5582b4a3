//! The merge device: its model, memory, channels, queue of pending requests, merge buffers
//! and counters, and the waiting threads' ports made on it ([`MergeDevice::waiter`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use smartcon_devemu::pages;
use smartcon_devemu::{ChannelSet, DeviceModel, EmuSpec, Op, RamStore};
use smartcon_engine::clock::{self, SharedTime};
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::{self, HostWaitCost, Profile};
use smartcon_engine::smartport::{SmartPort, SmartPortOptions, StrategyChoice};
use smartcon_engine::target::{AlignedBuf, InFlight};
use smartcon_engine::verify;
use smartcon_util::units::format_size;

use super::config::MergeConfig;
use super::pool::BufferPool;
use super::request::Queue;
use super::{Waiter, WaiterStats, PAGE_BYTES, THREADS_MAX, WAIT_BOUND_NS_MIN, WAIT_BOUND_SERVICES};

/// Counters of the device side, updated once per device request.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) device_requests: AtomicU64,
    pub(super) pages: AtomicU64,
    pub(super) releases: AtomicU64,
}

/// An emulated device with temporal merge and page-unit completion.
pub struct MergeDevice {
    pub(super) label: String,
    pub(super) model: DeviceModel,
    pub(super) capacity_bytes: u64,
    pub(super) store: RamStore,
    pub(super) channels: Mutex<ChannelSet>,
    pub(super) queue: Mutex<Queue>,
    pub(super) pool: BufferPool,
    pub(super) config: MergeConfig,
    pub(super) counters: Counters,
    /// See [`WAIT_BOUND_NS_MIN`].
    pub(super) wait_bound_ns: u64,
    /// The clock the device's instants are on and its waiters sleep and spin on: the
    /// engine's injected [`clock::Time`] (the host's, [`clock::real`]), as the engine's own
    /// emulated target reads it; every waiter's port reads it too.
    pub(super) time: SharedTime,
    /// Its requests in flight, as every waiter's port counts them (the decision's backlog).
    pub(super) inflight: Arc<InFlight>,
    /// The thresholds the ports decide with when no probe stored a profile for the device:
    /// the model's, as an emulated target's ([`smartcon_emutarget::emu::model_profile`]).
    pub(super) builtin: Profile,
    /// The System Monitor the ports read; `None`: an idle one for a fixed strategy, the
    /// process-wide one for a decision.
    pub(super) monitor: Option<Arc<SystemMonitor>>,
    /// Test hook: the post-I/O work of the n-th released request (from 1) panics.
    pub(super) fault_panic_at_release: Option<u64>,
    pub(super) fault_releases: AtomicU64,
}

/// What the device did in a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounts {
    pub device_requests: u64,
    pub pages: u64,
    pub releases: u64,
}

impl MergeDevice {
    pub fn new(spec: &EmuSpec, config: MergeConfig) -> Result<MergeDevice, Error> {
        config.validate()?;
        let store = RamStore::new(spec.capacity_bytes as usize).map_err(|e| {
            Error::new(
                ErrorKind::Setup,
                format!("cannot map {} of RAM for {}: {e}", format_size(spec.capacity_bytes), spec.label),
            )
        })?;
        let channels = spec.model.channels;
        let reqs_max = (config.merge_pages_max as u64 / (config.bs_bytes / PAGE_BYTES)).max(1) as usize;
        Ok(MergeDevice {
            label: spec.label.clone(),
            model: spec.model.clone(),
            capacity_bytes: spec.capacity_bytes,
            store,
            channels: Mutex::new(ChannelSet::new(channels)),
            queue: Mutex::new(Queue {
                pending: VecDeque::with_capacity(THREADS_MAX),
                busy: vec![false; channels as usize],
            }),
            pool: BufferPool::new(config.bs_bytes as usize, reqs_max * channels as usize + THREADS_MAX),
            config,
            counters: Counters::default(),
            wait_bound_ns: WAIT_BOUND_NS_MIN.max(
                WAIT_BOUND_SERVICES
                    * [Op::Read, Op::Write]
                        .iter()
                        .map(|&op| pages::service_ns(spec.model.timing(op), PAGE_BYTES, config.merge_pages_max))
                        .max()
                        .unwrap_or(0),
            ),
            time: clock::real(),
            inflight: Arc::new(InFlight::default()),
            builtin: smartcon_emutarget::emu::model_profile(
                spec,
                HostWaitCost::stored().as_ref(),
                profile::online_cpus(),
            ),
            monitor: None,
            fault_panic_at_release: None,
            fault_releases: AtomicU64::new(0),
        })
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    pub fn config(&self) -> &MergeConfig {
        &self.config
    }

    pub fn model(&self) -> &DeviceModel {
        &self.model
    }

    pub fn counts(&self) -> DeviceCounts {
        DeviceCounts {
            device_requests: self.counters.device_requests.load(Ordering::Relaxed),
            pages: self.counters.pages.load(Ordering::Relaxed),
            releases: self.counters.releases.load(Ordering::Relaxed),
        }
    }

    /// Writes the verification pattern with `seed` over `[0, span)`, bypassing the timing
    /// model (the device was "written before the run").
    pub fn prefill(&self, span_bytes: u64, seed: u64) {
        assert!(span_bytes <= self.capacity_bytes && span_bytes.is_multiple_of(PAGE_BYTES));
        let mut buf = AlignedBuf::new(PAGE_BYTES as usize);
        for off in (0..span_bytes).step_by(PAGE_BYTES as usize) {
            verify::fill(buf.as_mut_slice(), off, PAGE_BYTES, seed);
            self.store.write(off, buf.as_slice());
        }
    }

    /// Reads device memory directly (for checks after a run).
    pub fn peek(&self, offset: u64, buf: &mut [u8]) {
        self.store.read(offset, buf);
    }

    /// Gives the waiters' ports this System Monitor (else: an idle one for a fixed
    /// strategy, the process-wide one for a decision).
    pub fn set_monitor(&mut self, monitor: Arc<SystemMonitor>) {
        self.monitor = Some(monitor);
    }

    /// The device's own in-flight counters (all waiters' ports count into them).
    pub fn inflight(&self) -> &InFlight {
        &self.inflight
    }

    /// A waiting thread's handle, with its port; one per thread, made on that thread (a
    /// decision's port leaves its thread's CPU out of the process-wide monitor's figure).
    pub fn waiter(&self) -> Result<Waiter<'_>, Error> {
        let strategy = self.config.strategy;
        let monitor = match (&self.monitor, strategy) {
            (Some(m), _) => Some(m.clone()),
            (None, StrategyChoice::Fixed(_)) => Some(Arc::new(SystemMonitor::fixed(0))),
            (None, _) => None,
        };
        let options = SmartPortOptions {
            strategy,
            poll: self.config.poll,
            monitor,
            time: Some(self.time.clone()),
            ..Default::default()
        };
        let port = SmartPort::for_group(&self.label, self.inflight.clone(), Some(self.builtin.clone()), options)?;
        Ok(Waiter {
            dev: self,
            port,
            batch: Vec::with_capacity(self.config.merge_pages_max as usize),
            taken: Vec::with_capacity(self.config.merge_pages_max as usize),
            stats: WaiterStats::default(),
        })
    }

    /// Fault injection for tests: the post-I/O work of the `n`-th request released from now
    /// on (counted from 1) panics, while its waiter is parked and reachable only by pointer.
    /// Costs one predictable branch per request when unset.
    #[doc(hidden)]
    pub fn inject_panic_at_release(&mut self, n: u64) {
        self.fault_panic_at_release = Some(n);
        self.fault_releases.store(0, Ordering::Relaxed);
    }

    pub(super) fn pages_per_request(&self) -> u32 {
        (self.config.bs_bytes / PAGE_BYTES) as u32
    }
}

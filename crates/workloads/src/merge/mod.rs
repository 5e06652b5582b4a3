//! Temporal merge, page-unit completion and pipelined post-I/O processing (paper 002,
//! Sec. 4, Fig. 2) on an emulated device in real time.
//!
//! # Temporal merge
//! Threads issue synchronous requests of one size (`bs_bytes`, whole 4 KiB pages) to one
//! [`MergeDevice`]. With merge on, a request goes into one shared FIFO queue. A thread that
//! finds a channel with no merged request in flight becomes that channel's *leader*: it
//! takes pending requests of one op from the head of the queue, regardless of their
//! addresses, up to `merge_pages_max` pages, submits them as one device request (the fixed
//! latency is paid once, then the pages transfer one after another, `devemu::pages`), waits
//! for it by polling, and runs the post-I/O work of every request in it. The other threads
//! are parked (futex, `std::thread::park`) until their request is released. A leader serves
//! batches until its own request is done, and then at most [`LEADER_BATCHES_MAX`] in all;
//! with requests still pending it hands the channel over to the oldest pending request
//! whose thread is not leading another channel (that thread is woken to lead), else it
//! frees the channel. Every decision about leadership is taken under the queue's one lock,
//! so "requests are pending" always implies "some thread leads", and no request is
//! stranded.
//!
//! A channel counts as busy from the submission of its merged request until its leader has
//! finished that request's post-I/O work: the next merged request is dispatched from the
//! completion path, as a polling driver with one outstanding command per channel (the
//! paper's FIFO command queue) does. That is where serialized post-I/O processing costs
//! throughput: the device idles while the host finishes it.
//!
//! # Post-I/O work (real, per request)
//! Right after submission (the device's clock has started) the leader stages each request
//! in a merge buffer from a [`pool::BufferPool`] and the CPU plays the device's DMA engine (reads: device memory into the buffer; writes:
//! the waiter's data into the buffer, the buffer into device memory). Then, per request:
//! reads copy the merge buffer out into the waiter's buffer and verify the pattern there
//! (`smartcon_engine::verify`); writes verify the merge buffer the device took; then the buffer goes
//! back to the pool and the waiter is released (its state set, the thread unparked).
//!
//! - serialized: the device has one completion ack for the whole merged request (Fig. 2,
//!   top); after it, the post-I/O work runs for every request in order;
//! - pipelined: the device has a page-unit ack register (Fig. 2, bottom); as each ack
//!   arrives the leader runs the post-I/O work of the requests whose pages are all done,
//!   while the device transfers the next pages.
//!
//! # Waiting: through the SmartPort's group call
//! Every device request (a merged one, or with merge off a thread's own) is a group call of
//! the waiting thread's [`SmartPort`] ([`smartcon_engine::smartport::group`]): the port
//! enters the device's in-flight counters with the request's members and bytes, decides how
//! the leader waits (`MergeConfig::strategy`, any `--strategy`: a fixed one, or `smart`'s
//! decision on the whole command's size, the other channels' commands ahead and the CPU),
//! and waits as decided on the page-level status a poll reads, which is what is the merge
//! device's own; the leader releases each follower once a wait saw its pages done.
//!
//! The paper's two pollings are two strategies ([`Polling`]): `fixed` is `poll`, a status
//! poll every `interval` ([`smartcon_engine::wait::fixed`]); `dynamic` is `hybrid`
//! ([`smartcon_engine::wait::hybrid`], sampling phase then predicted waits corrected by
//! alpha). Serialized waits are for the last page of the merged request, given to the
//! policy as a page with `pages - 1` pages ahead of it on the device, so the predictor's
//! per-byte-ahead slope learns the page transfer time; pipelined waits are one page each,
//! the first one from submission (fixed latency + a page) by the port's policy and the
//! following ones (a page) by its second one ([`GroupWait::FromLast`]), so neither class
//! mixes the two. `block` sleeps until the wanted pages' instant ([`Status::block`]), `spin`
//! and `sync` poll back to back. Every clock read, sleep and clock-only spin goes through
//! the engine's injected [`smartcon_engine::clock::Time`] (the host's here). As the
//! real-time replay's ports do, a fixed strategy reads an idle System Monitor (the polling
//! policies' busy branch is never taken, as before the port); the decisions read the
//! process-wide one, unless [`MergeDevice::set_monitor`] gives another.
//!
//! With merge off each thread submits its own request (queued FCFS on the channels like
//! `smartcon_emutarget::emu`), waits for it with the same policy and does its own post-I/O work: the
//! reference row.
//!
//! # Shared requests and unwinding
//! A request lives on its waiting thread's stack and other threads reach it, and the
//! waiter's buffer, by raw pointer (`ReqPtr`) from the moment it is queued until it is
//! DONE. A panic on the waiting thread in that window (it may be leading: `lead`, `serve`,
//! `post` run there) would unwind the frame and free both while a queue entry or another
//! leader's batch still points at them. So that window runs under an `AbortOnUnwind`
//! guard: a panic there aborts the process instead of unwinding into freed memory (the
//! panic message is printed first). Heap-owned requests (`Arc` slots) were not chosen: the
//! waiter's buffer is borrowed (`&mut [u8]`), so owning the request alone would not stop a
//! leader copying into a freed buffer, owning the buffer too would add a copy per request
//! on the measured path, and recovering instead (handing a dead leader's batch and channel
//! on) is a second leadership protocol with its own failure modes. The guard costs nothing
//! on the normal path (it is forgotten, never dropped).
//!
//! Non-goals: merging across ops in one device command; more than one merged request in
//! flight per channel; requests that are not whole pages; real hardware (this is the
//! emulated device of `smartcon_emutarget::emu` with a page-level view of its transfers).

pub mod job;
pub mod pool;

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;

use smartcon_devemu::pages::{self, PageTransfer};
use smartcon_devemu::{ChannelSet, DeviceModel, EmuSpec, Op, RamStore};
use smartcon_util::units::format_size;

use smartcon_engine::clock::{self, SharedTime};
use smartcon_engine::decision::{DeviceState, Strategy};
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::{self, HostWaitCost, Profile};
use smartcon_engine::smartport::{GroupWait, SmartPort, SmartPortOptions, StrategyChoice};
use smartcon_engine::target::{AlignedBuf, InFlight};
use smartcon_engine::verify;
use smartcon_engine::wait::{Pending, PollParams, Status, Waited};

use pool::BufferPool;

/// The page of page-unit completion and of the verification pattern.
pub const PAGE_BYTES: u64 = 4096;
/// The largest merged request `merge_pages_max` may ask for.
pub const MERGE_PAGES_MAX: u32 = 256;
/// A leader serves at most this many merged requests in a row once its own is done, so
/// one thread does not carry everyone's completion work for long.
pub const LEADER_BATCHES_MAX: u32 = 8;
/// The most threads a device queues for (one pending request per thread).
pub const THREADS_MAX: usize = 256;

const _: () = assert!(PAGE_BYTES as usize == smartcon_engine::target::buffer::ALIGN_BYTES);

/// The paper's two pollings, as the strategies they are (the study's rows keep the paper's
/// names: `fixed/serialized`, `dynamic/pipelined`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polling {
    /// A poll every `interval` (the paper's baseline; its best interval was 1 us): `poll`.
    Fixed,
    /// Dynamic interval polling: `hybrid`.
    Dynamic,
}

impl Polling {
    pub fn name(self) -> &'static str {
        match self {
            Polling::Fixed => "fixed",
            Polling::Dynamic => "dynamic",
        }
    }

    /// The `--strategy` this polling is.
    pub fn strategy(self) -> StrategyChoice {
        match self {
            Polling::Fixed => StrategyChoice::Fixed(Strategy::FixedPoll),
            Polling::Dynamic => StrategyChoice::Fixed(Strategy::Hybrid),
        }
    }

    /// The polling a strategy is, if it is one of the paper's two.
    pub fn of(strategy: StrategyChoice) -> Option<Polling> {
        [Polling::Fixed, Polling::Dynamic].into_iter().find(|p| p.strategy() == strategy)
    }
}

/// The name a configuration's wait goes by in labels and records: the paper's `fixed` and
/// `dynamic` for `poll` and `hybrid`, else the strategy's own name.
pub fn wait_name(strategy: StrategyChoice) -> &'static str {
    Polling::of(strategy).map_or(strategy.name(), Polling::name)
}

/// The switches the paper compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergeConfig {
    /// Temporal merge of pending requests into one device request.
    pub merge: bool,
    /// Page-unit ack and post-I/O work as the pages complete (else after the whole request).
    pub pipelined: bool,
    /// The largest merged request, in pages.
    pub merge_pages_max: u32,
    /// How a device request's waiting thread waits: any `--strategy` ([`Polling`] names the
    /// paper's two).
    pub strategy: StrategyChoice,
    pub poll: PollParams,
    /// The size of every request (whole pages).
    pub bs_bytes: u64,
    /// Verify the `smartcon_engine::verify` pattern with this seed in the post-I/O work.
    pub verify_seed: Option<u64>,
}

impl MergeConfig {
    pub fn new(merge: bool, pipelined: bool, polling: Polling) -> MergeConfig {
        MergeConfig::with_strategy(merge, pipelined, polling.strategy())
    }

    /// A configuration whose requests are waited for by `strategy`.
    pub fn with_strategy(merge: bool, pipelined: bool, strategy: StrategyChoice) -> MergeConfig {
        MergeConfig {
            merge,
            pipelined,
            merge_pages_max: 32,
            strategy,
            poll: PollParams::DEFAULT,
            bs_bytes: PAGE_BYTES,
            verify_seed: Some(smartcon_engine::job::FILL_SEED),
        }
    }

    /// A short name: `fixed/serialized`, `dynamic/pipelined`, `no-merge/fixed`, `smart/pipelined`.
    pub fn label(&self) -> String {
        if self.merge {
            format!("{}/{}", self.wait_name(), if self.pipelined { "pipelined" } else { "serialized" })
        } else {
            format!("no-merge/{}", self.wait_name())
        }
    }

    /// [`wait_name`] of the configuration's strategy.
    pub fn wait_name(&self) -> &'static str {
        wait_name(self.strategy)
    }

    /// Whether the strategy's policy has a sampling phase (which must end within a run).
    pub fn samples(&self) -> bool {
        matches!(self.strategy, StrategyChoice::Fixed(Strategy::Hybrid | Strategy::Dip) | StrategyChoice::SmartHybrid)
    }

    /// Checks what does not depend on the run's duration.
    pub fn validate(&self) -> Result<(), Error> {
        let usage = |m: String| Err(Error::new(ErrorKind::Usage, m));
        if self.merge_pages_max == 0 || self.merge_pages_max > MERGE_PAGES_MAX {
            return usage(format!("max merge {} is out of range (1 to {MERGE_PAGES_MAX} pages)", self.merge_pages_max));
        }
        if self.bs_bytes == 0 || !self.bs_bytes.is_multiple_of(PAGE_BYTES) {
            return usage(format!("block size {} is not a whole number of 4 KiB pages", self.bs_bytes));
        }
        if self.bs_bytes / PAGE_BYTES > self.merge_pages_max as u64 {
            return usage(format!(
                "block size {} is larger than the largest merged request ({} pages)",
                format_size(self.bs_bytes),
                self.merge_pages_max
            ));
        }
        Ok(())
    }
}

const QUEUED: u32 = 0;
const LEAD: u32 = 1;
const DONE: u32 = 2;

/// Aborts the process if dropped: it is dropped only by unwinding out of the region in
/// which other threads may hold a [`ReqPtr`] to a request on this thread's stack (the
/// normal path ends the region with [`AbortOnUnwind::disarm`]).
struct AbortOnUnwind;

impl AbortOnUnwind {
    fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        eprintln!(
            "smartcon merge: a thread panicked while other threads could still reach its queued request; \
             aborting rather than freeing memory they use"
        );
        std::process::abort();
    }
}

/// A request while its thread waits in [`Waiter::io`]; it lives on that thread's stack.
struct Request {
    op: Op,
    offset: u64,
    /// The waiter's buffer (`bs_bytes`). The waiter does not touch it between enqueueing the
    /// request and seeing `DONE`; only the thread doing the post-I/O work writes it.
    buf: *mut u8,
    thread: Thread,
    state: AtomicU32,
    /// The channel handed over with `LEAD`.
    lead_channel: AtomicU32,
    /// Its thread leads a channel now (changed only under the queue lock).
    leading: AtomicBool,
    /// How many times it was released; must end at exactly 1.
    released: AtomicU32,
    /// Written by the post-I/O work before `DONE` (Release), read by the waiter after it
    /// (Acquire).
    mismatch: UnsafeCell<Option<verify::Mismatch>>,
}

/// A pointer to a request parked in the queue or carried by a batch.
#[derive(Clone, Copy)]
struct ReqPtr(*const Request);

// SAFETY: a Request outlives every ReqPtr to it: its thread stays in `Waiter::io` until the
// request is DONE, and nothing dereferences a ReqPtr after storing DONE into it. A panic on
// that thread before then aborts the process (`AbortOnUnwind`), so the frame is never
// unwound while a ReqPtr to it exists.
unsafe impl Send for ReqPtr {}

impl ReqPtr {
    /// # Safety
    /// The request must not be DONE yet (its thread is still waiting in `Waiter::io`).
    unsafe fn get<'a>(self) -> &'a Request {
        // SAFETY: the caller guarantees the request is not DONE, so its frame is alive.
        unsafe { &*self.0 }
    }
}

struct Queue {
    pending: VecDeque<ReqPtr>,
    /// A merged request is in flight (or in its post-I/O work) on the channel.
    busy: Vec<bool>,
}

/// Counters of the device side, updated once per device request.
#[derive(Debug, Default)]
struct Counters {
    device_requests: AtomicU64,
    pages: AtomicU64,
    releases: AtomicU64,
}

/// An emulated device with temporal merge and page-unit completion.
pub struct MergeDevice {
    label: String,
    model: DeviceModel,
    capacity_bytes: u64,
    store: RamStore,
    channels: Mutex<ChannelSet>,
    queue: Mutex<Queue>,
    pool: BufferPool,
    config: MergeConfig,
    counters: Counters,
    /// See [`WAIT_BOUND_NS_MIN`].
    wait_bound_ns: u64,
    /// The clock the device's instants are on and its waiters sleep and spin on: the
    /// engine's injected [`clock::Time`] (the host's, [`clock::real`]), as the engine's own
    /// emulated target reads it; every waiter's port reads it too.
    time: SharedTime,
    /// Its requests in flight, as every waiter's port counts them (the decision's backlog).
    inflight: Arc<InFlight>,
    /// The thresholds the ports decide with when no probe stored a profile for the device:
    /// the model's, as an emulated target's ([`smartcon_emutarget::emu::model_profile`]).
    builtin: Profile,
    /// The System Monitor the ports read; `None`: an idle one for a fixed strategy, the
    /// process-wide one for a decision.
    monitor: Option<Arc<SystemMonitor>>,
    /// Test hook: the post-I/O work of the n-th released request (from 1) panics.
    fault_panic_at_release: Option<u64>,
    fault_releases: AtomicU64,
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

    fn pages_per_request(&self) -> u32 {
        (self.config.bs_bytes / PAGE_BYTES) as u32
    }

    /// Submission's data movement for one request: the CPU plays the device's DMA engine.
    fn stage(&self, op: Op, item: &mut Item) {
        // SAFETY: the request is not DONE; its thread waits and does not touch its buffer.
        let req = unsafe { item.req.get() };
        let bs = self.config.bs_bytes as usize;
        match op {
            Op::Read => self.store.read(req.offset, item.buf.as_mut_slice()),
            Op::Write => {
                // SAFETY: as above; `buf` is `bs` bytes owned by the waiting thread.
                let src = unsafe { std::slice::from_raw_parts(req.buf as *const u8, bs) };
                item.buf.as_mut_slice().copy_from_slice(src);
                self.store.write(req.offset, item.buf.as_slice());
            }
        }
    }
}

/// What one thread did besides its own I/O.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaiterStats {
    /// Merged (or single) device requests this thread submitted and completed.
    pub device_requests: u64,
    /// Times this thread became a leader.
    pub leader_turns: u64,
    pub polls: u64,
    pub sleeps: u64,
    /// Predicted waits and the sum of |seen - predicted| over them (dynamic polling).
    pub predicted_waits: u64,
    pub prediction_error_ns_sum: u64,
}

impl WaiterStats {
    fn add_waited(&mut self, w: &Waited) {
        self.polls += w.polls as u64;
        self.sleeps += w.sleeps as u64;
        if let Some(p) = w.predicted_done_ns {
            self.predicted_waits += 1;
            self.prediction_error_ns_sum += w.seen_ns.abs_diff(p);
        }
    }
}

/// One request of a merged request, with its merge buffer.
struct Item {
    req: ReqPtr,
    buf: AlignedBuf,
}

/// Where a device request goes.
#[derive(Clone, Copy)]
enum Place {
    /// The leader's channel (merge on).
    Channel(u32),
    /// Any channel, FCFS (merge off).
    Any,
}

/// A merged request in service, as the waiting thread sees it.
struct PageStatus<'a> {
    dev: &'a MergeDevice,
    channel: u32,
    transfer: PageTransfer,
    /// Pages that must be acknowledged for `poll` to say done.
    want: u32,
    acked: u32,
    last_poll_ns: u64,
    /// No sleep or clock-only wait goes past this instant (see [`WAIT_BOUND_NS_MIN`]).
    wait_bound_ns: u64,
}

impl Status for PageStatus<'_> {
    fn now_ns(&self) -> u64 {
        self.dev.time.now_ns()
    }

    fn poll(&mut self) -> Result<bool, Error> {
        let now = self.dev.time.now_ns();
        let cost = self.dev.model.poll_cost_ns;
        if cost > 0 {
            // As smartcon_emutarget::emu: the register read holds the channel, at most half the time.
            let delay = cost.min(now.saturating_sub(self.last_poll_ns) / 2);
            self.acked = self.transfer.stall(now, delay);
            if delay > 0 && self.acked < self.transfer.pages() {
                self.dev.channels.lock().unwrap().occupy(self.channel, now, delay);
            }
            self.last_poll_ns = now;
            self.dev.time.spin_until(now + cost);
        } else {
            self.acked = self.transfer.acked(now);
        }
        Ok(self.acked >= self.want)
    }

    fn sleep_until(&mut self, at_ns: u64) -> Result<(), Error> {
        self.dev.time.sleep_until(at_ns.min(self.wait_bound_ns));
        Ok(())
    }

    fn spin_until(&mut self, at_ns: u64) {
        self.dev.time.spin_until(at_ns.min(self.wait_bound_ns));
    }

    /// `block`'s wait: asleep until the wanted pages' instant, as the device's interrupt
    /// would wake the thread (no register read: nothing is charged to the channel). The
    /// instant is the model's, not a prediction: no wait bound.
    fn block(&mut self) -> Result<(), Error> {
        while self.acked < self.want {
            let at = self.transfer.page_done_ns(self.want - 1);
            self.dev.time.block_until(at);
            self.acked = self.transfer.acked(self.dev.time.now_ns());
        }
        Ok(())
    }
}

/// A wait that does not look at the device (a sleep, or a spin on the clock) ends at most
/// this long after the submission, or [`WAIT_BOUND_SERVICES`] times the nominal service of
/// the largest merged request if that is longer; then the policy polls. A prediction
/// poisoned by a long preemption (the 2-core development VMs, shared, stall threads for
/// milliseconds) would otherwise park the leader, and with it every waiter, for as long as
/// the bad estimate says; with the bound the worst case is one bounded wait and a poll,
/// and the predictor's early-catch feedback brings the estimate back down. A driver knows
/// its device's nominal latency from the datasheet; this is no hint about the completion.
pub const WAIT_BOUND_NS_MIN: u64 = 10_000_000;
pub const WAIT_BOUND_SERVICES: u64 = 64;

/// A thread's handle on a [`MergeDevice`]: its port and its share of the work.
pub struct Waiter<'d> {
    dev: &'d MergeDevice,
    /// The port every device request this thread submits (as a leader, or alone with merge
    /// off) is decided and waited for through, as a group call.
    port: SmartPort,
    batch: Vec<Item>,
    /// Requests taken from the queue for the next batch (reused, no allocation per batch).
    taken: Vec<ReqPtr>,
    pub stats: WaiterStats,
}

impl Waiter<'_> {
    /// What this thread's port counted: the device requests it submitted and waited for
    /// (by strategy, and for a decision by reason), with their latencies from submission.
    pub fn port_counters(&self) -> &smartcon_engine::smartport::PortCounters {
        self.port.counters()
    }

    /// One synchronous request of `bs_bytes`: returns when the data is in `buf` (read) or on
    /// the device (write) and its post-I/O work (verification included) is done.
    pub fn io(&mut self, op: Op, buf: &mut [u8], offset: u64) -> Result<(), Error> {
        let dev = self.dev;
        let bs = dev.config.bs_bytes;
        if buf.len() as u64 != bs || !offset.is_multiple_of(PAGE_BYTES) || offset + bs > dev.capacity_bytes {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("request of {} at {offset} does not fit {} (bs {bs}, 4 KiB aligned)", buf.len(), dev.label),
            ));
        }
        let req = Request {
            op,
            offset,
            buf: buf.as_mut_ptr(),
            // The thread that parks below, taken per call: a Waiter is Send, and one made on
            // another thread would otherwise have its wake-ups sent there.
            thread: std::thread::current(),
            state: AtomicU32::new(QUEUED),
            lead_channel: AtomicU32::new(0),
            leading: AtomicBool::new(false),
            released: AtomicU32::new(0),
            mismatch: UnsafeCell::new(None),
        };
        let me = ReqPtr(&req);
        // From here until the request is DONE and this thread's leadership is over, other
        // threads (or this thread's own batch, which a caught panic would leave behind) may
        // hold `me`: no unwinding out of this region.
        let guard = AbortOnUnwind;
        if !dev.config.merge {
            self.batch.push(Item { req: me, buf: dev.pool.take() });
            self.serve(Place::Any, me);
        } else {
            let channel = {
                let mut q = dev.queue.lock().unwrap();
                if q.pending.len() >= THREADS_MAX {
                    // Nothing points at `req` yet: returning is safe.
                    drop(q);
                    guard.disarm();
                    return Err(Error::new(
                        ErrorKind::Usage,
                        format!("more than {THREADS_MAX} threads wait on {} at once", dev.label),
                    ));
                }
                q.pending.push_back(me);
                let free = q.busy.iter().position(|b| !b);
                if let Some(c) = free {
                    q.busy[c] = true;
                    req.leading.store(true, Ordering::Relaxed);
                }
                free
            };
            if let Some(c) = channel {
                self.lead(c as u32, &req);
            }
            // Bounded by the protocol: every queued request is taken by a leader.
            loop {
                match req.state.load(Ordering::Acquire) {
                    DONE => break,
                    LEAD => {
                        let c = req.lead_channel.load(Ordering::Relaxed);
                        self.lead(c, &req);
                    }
                    _ => std::thread::park(),
                }
            }
        }
        let released = req.released.load(Ordering::Relaxed);
        // A broken protocol may have left a pointer behind: still inside the guard.
        assert_eq!(released, 1, "a request was released {released} times");
        guard.disarm();
        // SAFETY: DONE was seen with Acquire; the releasing thread wrote this before it and
        // no one touches the request any more.
        let mismatch = unsafe { (*req.mismatch.get()).take() };
        match mismatch {
            Some(m) => Err(Error::new(ErrorKind::Verify, m.to_string())),
            None => Ok(()),
        }
    }

    /// Leads channel `c` until its own request is done and the bounded turn is over.
    fn lead(&mut self, c: u32, me: &Request) {
        let dev = self.dev;
        self.stats.leader_turns += 1;
        let reqs_max = (dev.config.merge_pages_max / dev.pages_per_request()).max(1) as usize;
        let mut batches = 0u32;
        loop {
            let mut wake: Option<Thread> = None;
            {
                let mut q = dev.queue.lock().unwrap();
                let me_done = me.state.load(Ordering::Acquire) == DONE;
                let stop = q.pending.is_empty() || (me_done && batches >= LEADER_BATCHES_MAX);
                if stop {
                    me.leading.store(false, Ordering::Relaxed);
                    // SAFETY: requests in the queue are not DONE (a request is DONE only
                    // after it left the queue in a batch).
                    let heir = q.pending.iter().copied().find(|r| unsafe { !r.get().leading.load(Ordering::Relaxed) });
                    match heir {
                        Some(h) => {
                            // SAFETY: as above; its thread is parked or about to park.
                            let h = unsafe { h.get() };
                            h.leading.store(true, Ordering::Relaxed);
                            h.lead_channel.store(c, Ordering::Relaxed);
                            // Clone before LEAD: the request may be gone right after it.
                            wake = Some(h.thread.clone());
                            h.state.store(LEAD, Ordering::Release);
                        }
                        // Nothing pending, or every pending request's thread already leads
                        // a channel (and will serve it): the channel is free.
                        None => q.busy[c as usize] = false,
                    }
                } else {
                    // SAFETY: pending requests are not DONE.
                    let op = unsafe { q.pending.front().unwrap().get().op };
                    while self.taken.len() < reqs_max
                        // SAFETY: pending requests are not DONE.
                        && q.pending.front().is_some_and(|r| unsafe { r.get().op } == op)
                    {
                        self.taken.push(q.pending.pop_front().unwrap());
                    }
                }
                if stop {
                    drop(q);
                    if let Some(t) = wake {
                        t.unpark();
                    }
                    return;
                }
            }
            // Merge buffers are taken outside the queue lock.
            for r in self.taken.drain(..) {
                self.batch.push(Item { req: r, buf: dev.pool.take() });
            }
            self.serve(Place::Channel(c), ReqPtr(me));
            batches += 1;
        }
    }

    /// Submits `self.batch` as one device request, a group call of this thread's port: the
    /// port decides how it is waited for, the device places it and stages its data, the
    /// thread waits as decided and runs its post-I/O work, releasing each request once a
    /// wait saw its pages done.
    fn serve(&mut self, place: Place, me: ReqPtr) {
        let dev = self.dev;
        let n = self.batch.len();
        assert!(n >= 1);
        // SAFETY: batch requests are not DONE until their post-I/O work below.
        let op = unsafe { self.batch[0].req.get().op };
        let rp = dev.pages_per_request();
        let pages = n as u32 * rp;
        let timing = *dev.model.timing(op);
        let expect = "the emulated status never fails";
        let mut call =
            self.port.submit_group(op, n as u32, pages as u64 * PAGE_BYTES).expect("a command of whole pages");
        let submit = dev.time.now_ns();
        let service = pages::service_ns(&timing, PAGE_BYTES, pages);
        let (channel, start) = {
            let mut ch = dev.channels.lock().unwrap();
            match place {
                Place::Channel(c) => {
                    let start = ch.free_at_ns(c).max(submit);
                    ch.occupy(c, submit, service);
                    (c, start)
                }
                Place::Any => {
                    let s = ch.schedule(submit, service);
                    (s.channel, s.start_ns)
                }
            }
        };
        let mut status = PageStatus {
            dev,
            channel,
            transfer: PageTransfer::new(start, &timing, PAGE_BYTES, pages),
            want: pages,
            acked: 0,
            last_poll_ns: submit,
            wait_bound_ns: submit + dev.wait_bound_ns,
        };
        let mut items = std::mem::take(&mut self.batch);
        // The DMA copies, after the device started: they are what it does meanwhile.
        for item in &mut items {
            dev.stage(op, item);
        }
        if !dev.config.pipelined {
            // One completion ack for the whole request: the last page, behind the others.
            let ahead = DeviceState { inflight_count: pages - 1, inflight_bytes: (pages as u64 - 1) * PAGE_BYTES };
            let pending = Pending { op, bytes: PAGE_BYTES, ahead, submit_ns: submit };
            let w = call.wait(&pending, &mut status, GroupWait::FromSubmission).expect(expect);
            self.stats.add_waited(&w);
            for item in items.drain(..) {
                dev.post(op, item, me);
            }
            call.release(n as u32).expect("one release per request");
        } else {
            let mut done_reqs = 0u32;
            let mut drain = items.drain(..);
            let mut seen_ns = submit;
            while done_reqs < n as u32 {
                let need = (done_reqs + 1) * rp;
                if status.acked < need {
                    status.want = need;
                    // After post-I/O work the next ack may be there already: look once.
                    let already = status.acked > 0 && {
                        self.stats.polls += 1;
                        status.poll().expect(expect)
                    };
                    if !already {
                        let (from, from_ns) = if status.acked == 0 {
                            (GroupWait::FromSubmission, submit)
                        } else {
                            (GroupWait::FromLast, seen_ns)
                        };
                        let bytes = (need - status.acked) as u64 * PAGE_BYTES;
                        let pending = Pending { op, bytes, ahead: DeviceState::default(), submit_ns: from_ns };
                        let w = call.wait(&pending, &mut status, from).expect(expect);
                        self.stats.add_waited(&w);
                    }
                    seen_ns = status.now_ns();
                }
                // Everything whose pages are all acknowledged, while the device goes on.
                let acked = status.acked;
                while done_reqs < n as u32 && (done_reqs + 1) * rp <= acked {
                    let item = drain.next().expect("one item per request");
                    dev.post(op, item, me);
                    call.release(1).expect("one release per request");
                    done_reqs += 1;
                }
            }
        }
        call.finish().expect("every request of the command released once");
        self.batch = items;
        self.stats.device_requests += 1;
        dev.counters.device_requests.fetch_add(1, Ordering::Relaxed);
        dev.counters.pages.fetch_add(pages as u64, Ordering::Relaxed);
        dev.counters.releases.fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl MergeDevice {
    /// The post-I/O work of one request: copy-out, verification, buffer release, wake-up.
    fn post(&self, op: Op, item: Item, me: ReqPtr) {
        let dev = self;
        // SAFETY: the request is not DONE until the store below; its thread waits.
        let req = unsafe { item.req.get() };
        let bs = dev.config.bs_bytes as usize;
        let checked: &[u8] = match op {
            Op::Read => {
                // SAFETY: the waiter's buffer of `bs` bytes; its thread does not touch it
                // until DONE.
                let dst = unsafe { std::slice::from_raw_parts_mut(req.buf, bs) };
                dst.copy_from_slice(item.buf.as_slice());
                dst
            }
            Op::Write => item.buf.as_slice(),
        };
        if let Some(seed) = dev.config.verify_seed {
            if let Err(m) = verify::check(checked, req.offset, PAGE_BYTES, seed) {
                // SAFETY: only the releasing thread writes this, before DONE.
                unsafe { *req.mismatch.get() = Some(m) };
            }
        }
        dev.pool.give_back(item.buf);
        if let Some(n) = dev.fault_panic_at_release {
            if dev.fault_releases.fetch_add(1, Ordering::Relaxed) + 1 == n {
                panic!("injected fault: the post-I/O work of release {n} panics");
            }
        }
        req.released.fetch_add(1, Ordering::Relaxed);
        let is_me = std::ptr::eq(item.req.0, me.0);
        // Clone before DONE: the request (and its Thread) may be gone right after it.
        let thread = (!is_me).then(|| req.thread.clone());
        req.state.store(DONE, Ordering::Release);
        if let Some(t) = thread {
            t.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartcon_devemu::parse_spec;
    use smartcon_engine::clock::now_ns;

    /// Regression: a prediction far in the future (a poisoned estimate) must not hold the
    /// leader, and everyone parked behind it, beyond the wait bound. Without the bound these
    /// calls would not return for years; no duration is asserted.
    #[test]
    fn clock_only_waits_end_at_the_wait_bound() {
        let spec = parse_spec("emu:optane,channels=1,size=16m").unwrap();
        let dev = MergeDevice::new(&spec, MergeConfig::new(true, false, Polling::Dynamic)).unwrap();
        assert_eq!(dev.wait_bound_ns, WAIT_BOUND_NS_MIN);
        let now = now_ns();
        let timing = *dev.model.timing(Op::Read);
        let mut status = PageStatus {
            dev: &dev,
            channel: 0,
            transfer: PageTransfer::new(now, &timing, PAGE_BYTES, 1),
            want: 1,
            acked: 0,
            last_poll_ns: now,
            wait_bound_ns: now + 1_000_000,
        };
        status.spin_until(u64::MAX);
        status.sleep_until(u64::MAX).unwrap();
        assert!(now_ns() >= now + 1_000_000);
        assert!(status.poll().unwrap(), "a 10 us request is done after the 1 ms bound");
    }
}

//! Emulated devices in real time.
//!
//! On submission the device model computes the completion instant (queueing on its
//! channels included) and the data moves between the caller's buffer and the RAM store
//! (the CPU plays the device's DMA engine; that copy costs the same under every strategy).
//! Completion is then delivered as hardware would:
//!
//! - `block`: an io_uring absolute timeout at the completion instant; the thread sleeps in
//!   the kernel and the hrtimer interrupt wakes it, so it pays the real wake-up and
//!   context switch of this host;
//! - `spin`: the thread polls the device's status ("now >= completion") back to back with
//!   a pause hint; past the spin budget it sleeps on the timer instead;
//! - `hybrid`, `dip`, `poll`, `half-mean`, `iopoll-hybrid`, `pas` (smartcon_engine::wait): the policy
//!   polls at the instants it chooses and sleeps with clock_nanosleep in between; a policy
//!   that blocks (`pas` in its interrupt mode) waits as `block` does, on the ring's timer;
//! - `sync`: programmed I/O. The caller does the device's work inline, as a PIO driver or a
//!   DAX copy would: it moves the data and stays busy for the device time, with no queue,
//!   no ring and no timer. It differs from `spin` in what it skips (submission through the
//!   ring's bookkeeping, the budget); on a memory-class device it is the natural path.
//!
//! The cost of polling (paper 002, Fig. 1): with `poll_cost` > 0 the status is a register
//! on the data channel. A poll makes the thread wait `poll_cost` for the read, and takes
//! that much channel time from the transfer of the request in service, delaying it and
//! everything queued behind it on the channel (requests already scheduled behind it keep
//! their computed instants: a simplification that is exact with one thread). The channel's
//! arbiter gives the data at least half the time, so back-to-back polls at most double a
//! transfer. With `poll_cost` = 0 (all presets: NVMe-style completion queues live in host
//! memory) polls are free.
//!
//! Faults (`emu:PRESET,faults=FILE`, the TOML scenario of `smartcon_devemu::fault`): the
//! plan's windows count from the target's opening. A spike or a stall moves the completion
//! instant the model gives at submission, and the waiter waits for it as for any other. A
//! failed request takes its time on the channel, moves no data (a failed write leaves the
//! store as it was) and returns [`ErrorKind::Io`] with errno EIO naming op and offset once
//! its completion is due. A stall is bounded by the scenario's `stall_timeout` (checked
//! when it loads, chains of stalls included), so no wait is unbounded; a longer stall is
//! an error before the run starts.
//!
//! Interruption: a model may make one request take seconds (`lat=5s`). A wait longer than
//! [`stop::WAIT_SLICE_NS`] is cut into slices of at most that, and between two slices the
//! process-wide stop flag ([`stop::global`]) is read: once set, the wait ends with an
//! [`ErrorKind::Interrupted`] error, so Ctrl-C ends a run within a slice. Shorter waits (every
//! preset's) take the unsliced path and never read the flag.

use std::sync::Mutex;

use smartcon_devemu::{EmuSpec, FcfsDevice, RamStore};
use smartcon_util::{units::format_size, Op};

use smartcon_engine::clock::{self, sleep_then_spin_until, SharedTime, Time};
use smartcon_engine::decision::DeviceClass;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::profile::{self, rules, HostWaitCost, Profile, WaitCost, PROFILE_VERSION};
use smartcon_engine::ring::Ring;
use smartcon_engine::stop;
use smartcon_engine::target::{InFlight, IoBuf, Port, PortWait, Target, WaitOutcome};
use smartcon_engine::wait::{Pending, Status};

/// Waits until `done_ns` with `wait_until`, in slices of at most [`stop::WAIT_SLICE_NS`]
/// between which the process-wide stop flag is read. `from_ns` is when the wait started:
/// a wait no longer than one slice goes straight to `wait_until` (the per-I/O fast path).
fn wait_in_slices(
    time: &dyn Time,
    from_ns: u64,
    done_ns: u64,
    mut wait_until: impl FnMut(u64) -> Result<(), Error>,
) -> Result<(), Error> {
    if done_ns.saturating_sub(from_ns) <= stop::WAIT_SLICE_NS {
        return wait_until(done_ns);
    }
    loop {
        if stop::requested() {
            return Err(stop::interrupted("waiting for an emulated completion"));
        }
        let now = time.now_ns();
        if now >= done_ns {
            return Ok(());
        }
        wait_until(done_ns.min(now + stop::WAIT_SLICE_NS))?;
    }
}

/// The latency a sleeping waiter adds, assumed when computing built-in thresholds from a
/// model: `block` minus `spin` p50 on `emu:optane` 4 KiB reads measured 18 us on the 2-core
/// KVM machines smartcon is developed on (timer interrupt, wake-up, switch back, ring
/// reap). The probe measures the real figure per device.
pub const ASSUMED_WAKEUP_NS: f64 = 20_000.0;

/// The CPU one blocking I/O burns in the kernel (submit, sleep, wake, switch back),
/// assumed for the class rule: `block` used 65% sys of one CPU at 35k IOPS on emu:optane,
/// about 19 us per I/O, on the same machines; the direct switch alone is 2-4 us
/// (`smartcon ctx`). 5 us is the conservative end.
pub const ASSUMED_BLOCK_CPU_NS: f64 = 5_000.0;

/// Sizes the built-in rules look at (the probe's range, Sec. 4.1, and one step more).
pub const RULE_SIZES_BYTES: [u64; 9] =
    [4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20];

/// What waiting costs in CPU per I/O on a model, by the rule the probe measures: spinning
/// and the inline path (programmed I/O) keep the thread busy for the service time (plus the
/// host's spin overhead), blocking costs the host's measured CPU per blocking I/O whatever
/// the device. Without stored host figures ([`HostWaitCost::stored`], written by the
/// probe) blocking is assumed to cost [`ASSUMED_BLOCK_CPU_NS`], the low end, so that an
/// unmeasured host never spins past its CPU threshold. No figure here is tuned to a preset.
pub fn model_wait_costs(spec: &EmuSpec, host: Option<&HostWaitCost>) -> Vec<WaitCost> {
    let block_cpu_ns = host.map_or(ASSUMED_BLOCK_CPU_NS, |h| h.block_cpu_ns);
    let spin_overhead_ns = host.map_or(0.0, |h| h.spin_overhead_ns);
    let mut out = Vec::with_capacity(RULE_SIZES_BYTES.len() * 2);
    for &bs in &RULE_SIZES_BYTES {
        for op in [Op::Read, Op::Write] {
            let service = spec.service_ns(op, bs) as f64;
            out.push(WaitCost {
                op: op.name().into(),
                bs_bytes: bs,
                block_cpu_ns,
                spin_cpu_ns: service + spin_overhead_ns,
                sync_cpu_ns: Some(service),
            });
        }
    }
    out
}

/// The thresholds of an emulated device, computed from its model, the host's stored wait
/// costs (`None`: unmeasured, the assumed ones) and the machine's `cpus`: what an emulated
/// target's port decides with when no probe measured it. The simulation passes its own host
/// model's costs and core count.
pub fn model_profile(spec: &EmuSpec, host: Option<&HostWaitCost>, cpus: u32) -> Profile {
    // The rules on the model's predictions: spinning saves one wake-up per I/O. For each
    // size the op where the wake-up weighs most decides.
    let points: Vec<rules::SizePoint> = RULE_SIZES_BYTES
        .iter()
        .map(|&bs| {
            let service = spec.service_ns(Op::Read, bs).min(spec.service_ns(Op::Write, bs)) as f64;
            rules::SizePoint { bs_bytes: bs, block_ns: service + ASSUMED_WAKEUP_NS, spin_ns: service }
        })
        .collect();
    let wait_costs = model_wait_costs(spec, host);
    let switch_ns = host.and_then(|h| h.switch_ns);
    let (spin_cheaper_bytes_max, spin_cheaper_write_bytes_max) = rules::spin_cheaper_by_op(&wait_costs, host);
    let class = rules::classify(&points, ASSUMED_BLOCK_CPU_NS);
    // A very fast model's inline path per op, up to the host's measured crossing.
    let inline_max = |op: Op, bound: Option<f64>| match (class, bound) {
        (DeviceClass::VeryFast, Some(bound_ns)) => Some(inline_bytes_max(spec, op, bound_ns)),
        _ => None,
    };
    let very_fast_bytes_max = inline_max(Op::Read, host.and_then(|h| h.inline_wins_service_ns_max));
    let very_fast_write_bytes_max = inline_max(Op::Write, host.and_then(|h| h.inline_write_wins_service_ns_max));
    Profile {
        version: PROFILE_VERSION,
        device: spec.label.clone(),
        source: "builtin-model".into(),
        class,
        size_threshold_bytes: rules::size_threshold_bytes(&points),
        cpu_threshold_pct: rules::cpu_threshold_pct(100.0, cpus),
        queue_limit: rules::queue_limit(&model_queue_points(spec)),
        wakeup_ns: Some(ASSUMED_WAKEUP_NS),
        switch_ns,
        spin_cheaper_bytes_max,
        spin_cheaper_write_bytes_max,
        very_fast_bytes_max,
        very_fast_write_bytes_max,
        wait_costs,
        io_cpus: None,
        latencies: Vec::new(),
        threshold_check: None,
    }
}

/// The largest request size of `op` (a power of two from 4 KiB) whose device time is
/// within `bound_ns`, the host's measured end of the inline path's gain beside a load
/// ([`HostWaitCost::inline_wins_service_ns_max`], in device time, so it carries to any
/// model); 0 when even 4 KiB takes longer.
pub fn inline_bytes_max(spec: &EmuSpec, op: Op, bound_ns: f64) -> u64 {
    let mut max = 0;
    let mut bs: u64 = 4 << 10;
    while bs <= 1 << 30 {
        if spec.service_ns(op, bs) as f64 > bound_ns {
            break;
        }
        max = bs;
        bs *= 2;
    }
    max
}

/// Queue lengths the model's Q is judged over: beyond what evaluate's I/O load keeps in
/// flight (four workers), as a probe of a real device measures 0-4.
const MODEL_QUEUE_POINTS_MAX: u32 = 16;

/// Fig. 7's queue probe on the model's predictions, for [`rules::queue_limit`] (the probe's
/// own rule): a small request with `k` others kept in flight on the model's `c` channels
/// (first come, first served) waits about `ceil((k + 1) / c)` service times, and blocking
/// adds a wake-up. Q was the channel count less one ("only beyond it does a request wait
/// behind others"), which is when the wait grows, not when spinning stops paying: the
/// spinner still saves the whole wake-up behind a queue. Beside evaluate's four I/O workers
/// on `emu:sata-ssd` (4 channels, Q was 3) smart blocked on `queue_over_limit` for every I/O
/// of all 14 io-intensive cells it lost, where spin or sync gave 1.08-1.48 x its IOPS with
/// the workers doing 0.97-1.01 x as much (thirteenth session's default run).
fn model_queue_points(spec: &EmuSpec) -> Vec<rules::QueuePoint> {
    let bs = RULE_SIZES_BYTES[0];
    let service = spec.service_ns(Op::Read, bs).min(spec.service_ns(Op::Write, bs)) as f64;
    let channels = spec.model.channels.max(1);
    (0..=MODEL_QUEUE_POINTS_MAX)
        .map(|k| {
            let wait = service * (k + 1).div_ceil(channels) as f64;
            rules::QueuePoint { background_ios: k, block_ns: wait + ASSUMED_WAKEUP_NS, spin_ns: wait }
        })
        .collect()
}

pub struct EmuTarget {
    spec: EmuSpec,
    /// The clock the model's instants are on and the waits sleep and spin on.
    time: SharedTime,
    /// Data moves between the buffers and the RAM store (off only in the simulation, whose
    /// figures do not depend on it).
    move_data: bool,
    store: RamStore,
    channels: Mutex<FcfsDevice>,
    inflight: InFlight,
}

impl EmuTarget {
    /// A target on the host's clock, whose fault plan's windows count from its opening.
    pub fn new(spec: EmuSpec) -> Result<EmuTarget, Error> {
        let time = clock::real();
        let origin_ns = time.now_ns();
        Self::with_time(spec, time, origin_ns)
    }

    /// A target on an injected clock and sleeper (the simulation's virtual time, or the
    /// host's for the real-time replay); the fault plan's windows count from `origin_ns` on
    /// that clock (a replay aligns them with its own start). On a clock that is not
    /// the host's, a blocking wait is the sleeper's [`smartcon_engine::clock::Sleeper::block_until`]
    /// instead of a timer on the port's io_uring.
    pub fn with_time(spec: EmuSpec, time: SharedTime, origin_ns: u64) -> Result<EmuTarget, Error> {
        let store = RamStore::new(spec.capacity_bytes as usize).map_err(|e| {
            Error::new(
                ErrorKind::Setup,
                format!("cannot map {} of RAM for {}: {e}", format_size(spec.capacity_bytes), spec.label),
            )
        })?;
        let device = match &spec.faults {
            Some(plan) => FcfsDevice::with_faults(spec.clone(), (**plan).clone(), origin_ns),
            None => FcfsDevice::new(spec.clone()),
        }?;
        Ok(EmuTarget {
            channels: Mutex::new(device),
            spec,
            time,
            move_data: true,
            store,
            inflight: InFlight::default(),
        })
    }

    /// Stops moving data: reads leave the caller's buffer as it was and writes store
    /// nothing, the timing unchanged. The simulation's choice, where a copy of the request's
    /// bytes would cost more host time than the rest of the I/O.
    pub fn without_data(mut self) -> EmuTarget {
        self.move_data = false;
        self
    }

    /// Places a request on the model; returns its channel, completion instant and whether
    /// the fault plan fails it.
    fn schedule(&self, op: Op, offset: u64, bytes: u64, arrival_ns: u64) -> (u32, u64, bool) {
        let (s, failed) = self.channels.lock().unwrap().schedule_checked(op, offset, bytes, arrival_ns);
        (s.channel, s.complete_ns, failed)
    }
}

impl EmuTarget {
    /// Submits a request: places it on the model and moves its data (the CPU plays the
    /// device's DMA engine). Returns the request in service and the bytes moved: a request
    /// that runs past the end is cut there (a short transfer), one that starts past it
    /// moves nothing, as a file's would.
    fn submit(&self, buf: IoBuf<'_>, offset: u64) -> (EmuStatus<'_>, usize) {
        let arrival = self.time.now_ns();
        let bytes = self.spec.capacity_bytes.saturating_sub(offset).min(buf.len() as u64) as usize;
        let (channel, done_ns, failed) = self.schedule(buf.op(), offset, bytes as u64, arrival);
        if bytes > 0 && !failed && self.move_data {
            match buf {
                IoBuf::Read(b) => self.store.read(offset, &mut b[..bytes]),
                IoBuf::Write(b) => self.store.write(offset, &b[..bytes]),
            }
        }
        (EmuStatus { target: self, channel, done_ns, last_poll_ns: arrival, submit_ns: arrival, failed }, bytes)
    }
}

impl EmuTarget {
    /// The error of a request the fault plan failed.
    fn injected_error(&self, op: Op, offset: u64) -> Error {
        Error::os(
            ErrorKind::Io,
            libc::EIO,
            format!(
                "{} at offset {offset}: I/O error injected by the fault scenario of {}",
                op.name(),
                self.spec.label
            ),
        )
    }

    /// The reference system's wait (the real-time replay of crates/emulate, not a
    /// strategy): one I/O, with the thread asleep on a timer until `margin_ns` before the
    /// model's completion instant, then watching the clock until the instant itself. With a
    /// margin at least the host's wake-up overshoot, the completion is seen within a clock
    /// read of the model's instant, which a timer alone cannot do (it wakes tens of us late
    /// here). Returns the outcome and, when the thread slept, how late the timer woke it
    /// (what the caller's margin should cover). No ring, no status poll (`poll_cost` is not
    /// charged: the reference reads the clock, not the device's register).
    pub fn transfer_precise(
        &self,
        buf: IoBuf<'_>,
        offset: u64,
        margin_ns: u64,
    ) -> Result<(WaitOutcome, Option<u64>), Error> {
        let op = buf.op();
        let (status, bytes) = self.submit(buf, offset);
        let overshoot_ns = self.wait_precise(&status, margin_ns)?;
        if status.failed {
            return Err(self.injected_error(op, offset));
        }
        Ok((WaitOutcome { bytes, done_ns: status.done_ns, ..Default::default() }, overshoot_ns))
    }

    /// The reference wait of a submitted request (see [`EmuTarget::transfer_precise`]).
    fn wait_precise(&self, status: &EmuStatus<'_>, margin_ns: u64) -> Result<Option<u64>, Error> {
        let time = &*self.time;
        // A wait longer than a slice sleeps in slices (reading the stop flag) up to the last
        // slice before the deadline; the last stretch is the one precise wait.
        let last_ns = status.done_ns.saturating_sub(margin_ns.max(stop::WAIT_SLICE_NS));
        if last_ns > status.submit_ns {
            wait_in_slices(time, status.submit_ns, last_ns, |t| {
                time.sleep_until(t);
                Ok(())
            })?;
        }
        Ok(sleep_then_spin_until(time, status.done_ns, margin_ns))
    }
}

/// A request in service, as a waiting thread sees it.
struct EmuStatus<'a> {
    target: &'a EmuTarget,
    channel: u32,
    done_ns: u64,
    /// The last poll's instant; the submission until the first poll.
    last_poll_ns: u64,
    /// The submission's instant.
    submit_ns: u64,
    /// The fault plan fails this request: reported once its completion is due.
    failed: bool,
}

impl Status for EmuStatus<'_> {
    fn now_ns(&self) -> u64 {
        self.target.time.now_ns()
    }

    fn poll(&mut self) -> Result<bool, Error> {
        let now = self.target.time.now_ns();
        let cost = self.target.spec.model.poll_cost_ns;
        let done = now >= self.done_ns;
        // A policy polling a completion seconds away: let Ctrl-C end the wait. The
        // comparison keeps the flag off the path of ordinary (sub-slice) waits.
        if !done && now.saturating_sub(self.submit_ns) > stop::WAIT_SLICE_NS && stop::requested() {
            return Err(stop::interrupted("polling an emulated completion"));
        }
        if cost > 0 {
            if !done {
                let delay = cost.min((now - self.last_poll_ns) / 2);
                if delay > 0 {
                    self.target.channels.lock().unwrap().occupy(self.channel, now, delay);
                    self.done_ns += delay;
                }
            }
            self.last_poll_ns = now;
            // The register read returns after its round trip.
            self.target.time.spin_until(now + cost);
        }
        Ok(done)
    }

    // Measured from the submission, so a wait within one slice of it reads no clock and no
    // flag here; a later sleep of a long wait is sliced anyway.
    fn sleep_until(&mut self, at_ns: u64) -> Result<(), Error> {
        let time = &*self.target.time;
        wait_in_slices(time, self.submit_ns, at_ns, |t| {
            time.sleep_until(t);
            Ok(())
        })
    }

    fn spin_until(&mut self, at_ns: u64) {
        let time = &*self.target.time;
        // Cannot fail: a stop ends the spin early, and the policy's next poll reports it.
        let _ = wait_in_slices(time, self.submit_ns, at_ns, |t| {
            time.spin_until(t);
            Ok(())
        });
    }
    fn thread_cpu_ns(&self) -> Option<u64> {
        self.target.time.thread_cpu_ns()
    }
}

impl EmuStatus<'_> {
    /// Sleeps until the completion wakes the thread: on the port's io_uring timer on the
    /// host's clock, else through the injected sleeper.
    fn block_on(&self, ring: Option<&mut Ring>) -> Result<(), Error> {
        let time = &*self.target.time;
        match ring {
            Some(ring) => wait_in_slices(time, self.submit_ns, self.done_ns, |t| ring.sleep_until(t)),
            None => wait_in_slices(time, self.submit_ns, self.done_ns, |t| {
                time.block_until(t);
                Ok(())
            }),
        }
    }
}

/// A request in service with the port's ring, for policies that also block: their
/// blocking wait is `block`'s (the ring's timer at the completion instant).
struct EmuRingStatus<'s, 'a> {
    status: &'s mut EmuStatus<'a>,
    ring: Option<&'s mut Ring>,
}

impl Status for EmuRingStatus<'_, '_> {
    fn now_ns(&self) -> u64 {
        self.status.now_ns()
    }

    fn poll(&mut self) -> Result<bool, Error> {
        self.status.poll()
    }

    fn sleep_until(&mut self, at_ns: u64) -> Result<(), Error> {
        self.status.sleep_until(at_ns)
    }

    fn spin_until(&mut self, at_ns: u64) {
        self.status.spin_until(at_ns)
    }

    fn block(&mut self) -> Result<(), Error> {
        self.status.block_on(self.ring.as_deref_mut())
    }

    fn thread_cpu_ns(&self) -> Option<u64> {
        self.status.thread_cpu_ns()
    }
}

struct EmuPort<'a> {
    target: &'a EmuTarget,
    /// The timer a blocking wait sleeps on, on the host's clock; `None` on an injected one.
    ring: Option<Ring>,
}

impl Target for EmuTarget {
    fn label(&self) -> &str {
        &self.spec.label
    }

    fn device_id(&self) -> String {
        self.spec.label.clone()
    }

    fn capacity_bytes(&self) -> u64 {
        self.spec.capacity_bytes
    }

    fn block_bytes(&self) -> u64 {
        512
    }

    fn open_port(&self) -> Result<Box<dyn Port + Send + '_>, Error> {
        let ring = if self.time.is_real() { Some(Ring::new()?) } else { None };
        Ok(Box::new(EmuPort { target: self, ring }))
    }

    fn inflight(&self) -> &InFlight {
        &self.inflight
    }

    fn builtin_profile(&self) -> Option<Profile> {
        Some(model_profile(&self.spec, HostWaitCost::stored().as_ref(), profile::online_cpus()))
    }

    fn model_service_ns(&self, op: Op, bytes: u64) -> Option<u64> {
        Some(self.spec.service_ns(op, bytes))
    }

    fn time(&self) -> SharedTime {
        self.time.clone()
    }

    fn poke(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        self.store.write(offset, data);
        Ok(())
    }
}

impl Port for EmuPort<'_> {
    fn transfer(&mut self, buf: IoBuf<'_>, offset: u64, wait: PortWait<'_>) -> Result<WaitOutcome, Error> {
        let op = buf.op();
        let (mut status, bytes) = self.target.submit(buf, offset);
        let arrival = status.last_poll_ns;
        let mut outcome = WaitOutcome { bytes, ..Default::default() };
        let time = &*self.target.time;
        let mut ring = self.ring.as_mut();
        match wait {
            PortWait::Block => status.block_on(ring)?,
            PortWait::Spin { budget_ns } if self.target.spec.model.poll_cost_ns == 0 => {
                // The status is in host memory and a poll is "now >= completion": watching the
                // clock up to the completion is polling it back to back, and a virtual
                // clock can jump there. Past the budget the thread sleeps.
                let give_up = arrival.saturating_add(budget_ns);
                wait_in_slices(time, arrival, status.done_ns.min(give_up), |t| {
                    time.spin_until(t);
                    Ok(())
                })?;
                if status.done_ns > give_up && time.now_ns() < status.done_ns {
                    status.block_on(ring)?;
                    outcome.fell_back = true;
                }
            }
            PortWait::Spin { budget_ns } => {
                // status.poll() reads the stop flag once the wait is past a slice; each poll
                // takes the register's round trip on the clock.
                while !status.poll()? {
                    let now = time.now_ns();
                    if now - arrival >= budget_ns {
                        status.block_on(ring.take())?;
                        outcome.fell_back = true;
                        break;
                    }
                    smartcon_engine::clock::spin_hint();
                }
            }
            PortWait::Sync => wait_in_slices(time, arrival, status.done_ns, |t| {
                time.spin_until(t);
                Ok(())
            })?,
            PortWait::Poll { policy, ahead } => {
                let req = Pending { op, bytes: bytes as u64, ahead, submit_ns: arrival };
                let mut with_ring = EmuRingStatus { status: &mut status, ring };
                outcome.polled = Some(policy.wait(&req, &mut with_ring)?);
            }
            PortWait::Reference { margin } => {
                // The margin learns from wake-ups of requests that succeed only, as the
                // replay's always did (a failed one returns its error below).
                let overshoot_ns = self.target.wait_precise(&status, margin.margin_ns())?;
                if let (Some(ns), false) = (overshoot_ns, status.failed) {
                    margin.record(ns);
                }
            }
        }
        if status.failed {
            return Err(self.target.injected_error(op, offset));
        }
        outcome.done_ns = status.done_ns;
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cheap(text: &str, host: Option<&HostWaitCost>) -> u64 {
        let spec = smartcon_devemu::preset::parse_spec(text).unwrap();
        let switch_ns = host.and_then(|h| h.switch_ns).unwrap_or(0.0);
        rules::spin_cheaper_bytes_max(&model_wait_costs(&spec, host), switch_ns)
    }

    #[test]
    fn the_cheaper_spin_bound_comes_from_the_model_and_the_host_cost() {
        // A KVM guest like the team's: a blocking I/O burns 19 us, a spin 0.5 us beyond the
        // device time (figures of the order `smartcon probe` measures there).
        let kvm = HostWaitCost {
            version: HostWaitCost::VERSION,
            block_cpu_ns: 19_000.0,
            spin_overhead_ns: 500.0,
            switch_ns: None,
            spin_harmless_service_ns_max: None,
            beside_crunchers: Vec::new(),
            inline_wins_service_ns_max: None,
            inline_write_wins_service_ns_max: None,
            inline_beside_crunchers: Vec::new(),
            source: "test".into(),
        };
        // A 10 us device costs less CPU spinning than blocking at small sizes, whatever op.
        let optane = cheap("emu:optane", Some(&kvm));
        assert!(optane >= 4096, "optane: {optane}");
        // The same device with a 30 us read, or a host whose blocking is cheap: never.
        assert_eq!(cheap("emu:optane,read_lat=30us", Some(&kvm)), 0);
        assert_eq!(cheap("emu:nvme,read_lat=30us", Some(&kvm)), 0);
        assert_eq!(cheap("emu:optane", None), 0, "unmeasured host: assumed cheap blocking");
        // Milliseconds: never.
        assert_eq!(cheap("emu:hdd", Some(&kvm)), 0);
        // The rule is monotone in the host's block cost: a dearer wake-up spins at more sizes.
        let dear = HostWaitCost { block_cpu_ns: 60_000.0, ..kvm.clone() };
        assert!(cheap("emu:optane", Some(&dear)) > optane);
    }

    #[test]
    fn a_very_fast_models_inline_bound_comes_from_the_hosts_measured_crossing() {
        let nvram = smartcon_devemu::preset::parse_spec("emu:nvram").unwrap();
        let host = HostWaitCost {
            version: HostWaitCost::VERSION,
            block_cpu_ns: 15_000.0,
            spin_overhead_ns: 100.0,
            switch_ns: None,
            spin_harmless_service_ns_max: None,
            beside_crunchers: Vec::new(),
            inline_wins_service_ns_max: None,
            inline_write_wins_service_ns_max: None,
            inline_beside_crunchers: Vec::new(),
            source: "test".into(),
        };
        // Unmeasured: the whole class inline, as the paper has it.
        let p = model_profile(&nvram, Some(&host), 2);
        assert_eq!(p.class, DeviceClass::VeryFast);
        assert_eq!((p.very_fast_bytes_max, p.thresholds().very_fast_bytes_max), (None, u64::MAX));
        // Measured: the largest size whose device time is within the crossing.
        let at = |bound_ns: f64| {
            let h = HostWaitCost { inline_wins_service_ns_max: Some(bound_ns), ..host.clone() };
            model_profile(&nvram, Some(&h), 2).very_fast_bytes_max.unwrap()
        };
        let t256 = nvram.service_ns(Op::Read, 256 << 10) as f64;
        assert_eq!(at(t256), 256 << 10);
        assert_eq!(at(t256 - 1.0), 128 << 10);
        assert!(at(f64::from(u32::MAX)) >= 16 << 20, "a long crossing keeps large requests inline");
        assert_eq!(at(0.0), 0, "blocking did more at every size: every size may block");
        // Reads and writes each by their own crossing.
        let h = HostWaitCost {
            inline_wins_service_ns_max: Some(t256),
            inline_write_wins_service_ns_max: Some(nvram.service_ns(Op::Write, 1 << 20) as f64),
            ..host.clone()
        };
        let p = model_profile(&nvram, Some(&h), 2);
        assert_eq!((p.very_fast_bytes_max, p.very_fast_write_bytes_max), (Some(256 << 10), Some(1 << 20)));
        let t = p.thresholds();
        assert_eq!((t.very_fast_bytes_max, t.very_fast_write_bytes_max), (256 << 10, 1 << 20));
        // The bound is in device time, so it follows the model: a slower NVRAM reaches it
        // at a smaller size.
        let slow = smartcon_devemu::preset::parse_spec("emu:nvram,bw=2g").unwrap();
        let h = HostWaitCost { inline_wins_service_ns_max: Some(t256), ..host.clone() };
        let slow_max = model_profile(&slow, Some(&h), 2).very_fast_bytes_max.unwrap();
        assert!(slow_max < 256 << 10, "{slow_max}");
        // Not a very fast device: no bound, whatever the host measured.
        let optane = smartcon_devemu::preset::parse_spec("emu:optane").unwrap();
        assert_eq!(model_profile(&optane, Some(&h), 2).very_fast_bytes_max, None);
    }

    #[test]
    fn the_models_queue_limit_is_where_a_wake_up_stops_paying_behind_the_queue() {
        let q = |text: &str| {
            let spec = smartcon_devemu::preset::parse_spec(text).unwrap();
            rules::queue_limit(&model_queue_points(&spec))
        };
        // sata-ssd: 4 channels, 4 KiB in 68 us (write) to 119 us (read); behind evaluate's four I/O
        // workers a request waits two service times, and the 20 us wake-up is still more
        // than 3 % of that (channels - 1 = 3 used to block it there).
        assert!(q("emu:sata-ssd") >= 4, "sata-ssd: {}", q("emu:sata-ssd"));
        // Microsecond devices: a wake-up is worth saving behind any queue probed.
        assert_eq!(q("emu:optane"), MODEL_QUEUE_POINTS_MAX);
        assert_eq!(q("emu:nvme"), MODEL_QUEUE_POINTS_MAX);
        // Milliseconds: a wake-up is lost in the wait behind even one request.
        assert_eq!(q("emu:hdd"), 0);
        // The rule follows the model: one channel of the same device queues every request
        // behind all the others, so Q falls.
        assert!(q("emu:sata-ssd,channels=1") < q("emu:sata-ssd"));
    }

    #[test]
    fn a_measured_harmless_device_time_overrides_the_cpu_clocks() {
        let spec = smartcon_devemu::preset::parse_spec("emu:optane").unwrap();
        // A host whose blocking wait burns little of its own thread's CPU (9.7 us, less
        // than optane's 10 us), yet spinning on 10-20 us devices cost the crunchers nothing.
        let cheap_block = HostWaitCost {
            version: HostWaitCost::VERSION,
            block_cpu_ns: 9_700.0,
            spin_overhead_ns: 300.0,
            switch_ns: None,
            spin_harmless_service_ns_max: None,
            beside_crunchers: Vec::new(),
            inline_wins_service_ns_max: None,
            inline_write_wins_service_ns_max: None,
            inline_beside_crunchers: Vec::new(),
            source: "test".into(),
        };
        let costs = model_wait_costs(&spec, Some(&cheap_block));
        assert_eq!(rules::spin_cheaper_bytes_max_on(&costs, Some(&cheap_block)), 0, "CPU clocks alone: never");
        let measured = HostWaitCost { spin_harmless_service_ns_max: Some(20_000.0), ..cheap_block.clone() };
        let bound = rules::spin_cheaper_bytes_max_on(&costs, Some(&measured));
        assert!(bound >= 4096, "spinning harmed no one up to 20 us: {bound}");
        // Per op: an NVMe-like device whose writes take 20 us and reads 80 us spins its
        // small writes on such a host, and not its reads.
        let nvme = smartcon_devemu::preset::parse_spec("emu:nvme").unwrap();
        let host40 = HostWaitCost { spin_harmless_service_ns_max: Some(40_000.0), ..cheap_block.clone() };
        let (reads, writes) = rules::spin_cheaper_by_op(&model_wait_costs(&nvme, Some(&host40)), Some(&host40));
        assert_eq!(reads, 0);
        assert!(writes.is_some_and(|w| w >= 4096), "{writes:?}");
        // A measurement that found no harmless time does not cut what the CPU clocks allow
        // (the measurement is noisy from run to run): a dear blocking wait still spins.
        let harmful = HostWaitCost { block_cpu_ns: 40_000.0, spin_harmless_service_ns_max: Some(0.0), ..cheap_block };
        let clocks = rules::spin_cheaper_bytes_max(&model_wait_costs(&spec, Some(&harmful)), 0.0);
        assert!(clocks >= 4096);
        assert_eq!(rules::spin_cheaper_bytes_max_on(&model_wait_costs(&spec, Some(&harmful)), Some(&harmful)), clocks);
    }
}

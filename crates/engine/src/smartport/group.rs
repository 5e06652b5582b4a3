//! The group call: one device command that carries several threads' requests, decided and
//! waited for by one thread through its port.
//!
//! A device that merges requests (the temporal merge of `smartcon_workloads::merge`, paper
//! 002 Sec. 4) submits one command for the requests of several threads. One thread, the
//! command's leader, waits for it; the others (the followers) sleep until the leader
//! releases them, after the part of the command that holds their request is done. A
//! per-thread [`SmartTargetPort::transfer`] has no place for that: it submits one request
//! of its own thread through the port below and waits for that one. The group call is the
//! same "decide, then wait" for the leader's command:
//!
//! 1. [`SmartTargetPort::submit_group`]: the command enters the device's in-flight counters
//!    as `members` requests of `bytes` in all (the counters give the backlog ahead), and the
//!    port decides how the leader waits, as [`SmartTargetPort::transfer`] does for one I/O
//!    of that size: a fixed `--strategy`, or `smart`'s decision with its checks. The device
//!    submits the command itself (it knows its channels and pages, the port does not).
//! 2. [`GroupCall::wait`], once or more: the leader waits, by the decided strategy, until
//!    the device's [`Status`] says the part named by the caller's [`Pending`] is done (the
//!    whole command; or, with page-unit completion, the next request's pages). `block`
//!    sleeps until the device wakes it ([`Status::block`]); `spin` polls back to back up to
//!    the port's spin budget, then blocks; `sync` polls back to back to the end (programmed
//!    I/O); the polling strategies wait with the port's policy, the waits from the
//!    submission with one policy and the waits from the last part seen
//!    ([`GroupWait::FromLast`]) with a second one, so neither is learnt with the other.
//! 3. [`GroupCall::release`]: the leader counts the followers it released. It may release
//!    a member only after a wait that saw that member's part done, so every follower is
//!    released at or after the model's completion of its request (the simulation's tests
//!    check it against the model's instants).
//! 4. [`GroupCall::finish`]: the command leaves the in-flight counters (so does a call
//!    dropped on an error or a panic) and is counted once, as one device command with its
//!    bytes, strategy, reason and the leader's latency from submission to the end of its
//!    last wait; `smart`'s spin check learns from it as from a single I/O.
//!
//! The port of a group call has no port below ([`SmartTargetPort::for_group`]): it moves no
//! data and submits nothing; the device does both, under its own lock. Its clock and sleeper
//! are the injected [`crate::clock::Time`] every port has, so the simulation
//! (`smartcon_emutarget::sim::run_group_cell`) runs the same code on virtual time.
//!
//! The reference wait ([`super::BlockWait::Reference`], the emulator's yardstick): a group
//! port opened with it waits for `block` asleep until its [`crate::wait::reference::WakeMargin`]
//! before the instant the device's [`Status::done_ns`] gives, then watching the clock to it
//! (the FUSE server of `emulate mount` by default, whose reply is due at the model's
//! instant); a device that gives no instant is blocked on as `block` does.
//!
//! Non-goals: the merge protocol itself (queueing, leadership, hand-over: the device's);
//! keeping the checks of one port for the next ([`crate::learn::keep`]): a group port
//! starts afresh, so one run of a merge study does not carry into the next.

use std::sync::Arc;

use smartcon_util::Op;

use super::{policy_of, resolve_profile, Backend, Checked, Counters, SmartPort, SmartPortOptions, SmartTargetPort};
use crate::clock::{spin_hint, EventWait};
use crate::decision::{DeviceState, Reason, Strategy};
use crate::error::{Error, ErrorKind};
use crate::target::{InFlight, PortWait};
use crate::wait::{Pending, Status, Waited};

/// The error of a single I/O (or flush) asked of a port that has no port below.
pub(super) fn no_port_below(what: &str) -> Error {
    Error::new(
        ErrorKind::Usage,
        format!("{what} through a group port: it has no port below; the device submits, use submit_group"),
    )
}

/// Where a group wait starts, which picks the policy that learns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupWait {
    /// From the command's submission (the whole command, or its first part).
    FromSubmission,
    /// From the last part seen done (a pipelined command's next pages).
    FromLast,
}

impl SmartPort {
    /// A port for group calls on the device `device_id`, whose in-flight counters are
    /// `inflight` (shared by every port of the device). Thresholds: the options' profile,
    /// else the device's stored one, else `builtin` (an emulated device's, from its model),
    /// else the paper's defaults with a note, as a port on a target.
    /// It has no port below: [`SmartTargetPort::read_at`] and the like are usage errors.
    pub fn for_group(
        device_id: &str,
        inflight: Arc<InFlight>,
        builtin: Option<crate::profile::Profile>,
        options: SmartPortOptions,
    ) -> Result<SmartPort, Error> {
        options.validate()?;
        let (profile, note) = resolve_profile(device_id, options.profile.clone(), builtin)?;
        let time = options.time.clone().unwrap_or_else(crate::clock::real);
        let mut port = SmartTargetPort::assemble(
            Backend::Group,
            Counters::Shared(inflight),
            None,
            device_id.to_string(),
            1,
            false,
            &profile,
            &options,
            time,
        )?;
        port.notes.extend(note);
        // The device knows its completion instants (it is a model): lateness is counted
        // against them by the caller, and `sync` polls as the emulated target's does.
        port.emulated = true;
        port.block_check = None;
        port.learnt_key = None;
        port.spin_check = crate::learn::SpinCheck::new();
        port.group_next = policy_of(options.strategy, options.poll, port.counters.start_ns);
        Ok(port)
    }
}

impl<'t> SmartTargetPort<'t> {
    /// Begins a group call: a command of `members` requests and `bytes` in all, of `op`,
    /// enters the device's in-flight counters, and the port decides how its leader waits.
    /// The caller submits the command to its device after this (the decision sees what was
    /// in flight before it) and then waits with [`GroupCall::wait`].
    pub fn submit_group(&mut self, op: Op, members: u32, bytes: u64) -> Result<GroupCall<'_, 't>, Error> {
        if members == 0 || bytes == 0 {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("a group command of {members} request(s) and {bytes} bytes: it needs at least one of each"),
            ));
        }
        let t0 = self.time.now_ns();
        let ahead = self.inflight.enter_many(members, bytes);
        let write = op == Op::Write;
        let (strategy, reason, checked) = Self::choose(
            self.strategy,
            &self.monitor,
            &self.thresholds,
            &mut self.spin_check,
            self.block_check.as_mut(),
            (bytes, write, ahead),
        );
        Ok(GroupCall {
            port: self,
            s: CallState {
                members,
                released: 0,
                bytes,
                write,
                strategy,
                reason,
                checked,
                ahead,
                t0,
                seen_ns: t0,
                fell_back: false,
                polled: None,
                reference: false,
                entered: true,
            },
        })
    }

    /// Holds a one-request group call in `holds` under `key`: the request (`op`, `bytes`,
    /// arrived at `submit_ns`) enters the device's in-flight counters and the port decides
    /// how it will be waited for, as [`SmartTargetPort::submit_group`] does; the device
    /// completes it at `due_ns`, an instant it knows (a model's). The call stays in the
    /// counters until [`SmartTargetPort::finish_held`] (or until `holds` drops it).
    #[allow(clippy::too_many_arguments)]
    pub fn hold<K>(
        &mut self,
        holds: &mut Holds<K>,
        key: K,
        op: Op,
        bytes: u64,
        submit_ns: u64,
        due_ns: u64,
    ) -> Result<(), Error> {
        let call = self.submit_group(op, 1, bytes)?;
        let pending = Pending { op, bytes, ahead: call.ahead(), submit_ns };
        let call = call.hold()?;
        holds.held.push(Held { key, due_ns, pending, call });
        Ok(())
    }

    /// Waits for the earliest-due call in `holds`, by the strategy the port decided for it,
    /// or for `waiter`'s event, whichever comes first; the thread sleeps on `waiter` (a
    /// server's ring, which a new request wakes). `None`: nothing is held.
    /// [`Earliest::Due`]: the call's instant came; the caller answers it and then hands it
    /// to [`SmartTargetPort::finish_held`], which counts it. [`Earliest::Event`]: the event
    /// came first; every call is still held, and the next wait takes the earliest up again
    /// (a `spin` call's budget runs from its submission, across the waits). On an error
    /// the call stays held.
    pub fn wait_earliest<K>(
        &mut self,
        holds: &mut Holds<K>,
        waiter: &mut dyn EventWait,
    ) -> Result<Option<Earliest<K>>, Error> {
        let Some(at) = holds.earliest() else { return Ok(None) };
        if !self.owns(&holds.held[at].call) {
            return Err(not_ours());
        }
        let mut h = holds.held.swap_remove(at);
        let time = self.time.clone();
        let mut status = DueOn { at: DueAt { time: &*time, due_ns: h.due_ns }, waiter };
        let mut call = GroupCall { port: self, s: h.call.take() };
        let waited = call.wait_inner(&h.pending, &mut status, GroupWait::FromSubmission, true);
        h.call.s = call.s;
        call.s.entered = false;
        match waited {
            Ok(Some(_)) => Ok(Some(Earliest::Due(Ready { key: h.key, due_ns: h.due_ns, call: h.call }))),
            Ok(None) => {
                holds.held.push(h);
                Ok(Some(Earliest::Event))
            }
            Err(e) => {
                holds.held.push(h);
                Err(e)
            }
        }
    }

    /// Ends a call [`SmartTargetPort::wait_earliest`] found due, after the caller answered
    /// it: it leaves the in-flight counters and is counted, as [`GroupCall::finish`] counts
    /// a command of one request.
    pub fn finish_held<K>(&mut self, ready: Ready<K>) -> Result<GroupOutcome, Error> {
        let mut held = ready.call;
        if !self.owns(&held) {
            return Err(not_ours());
        }
        let mut call = GroupCall { port: self, s: held.take() };
        call.release(1)?;
        call.finish()
    }

    /// Whether `held` was made by this port's counters.
    fn owns(&self, held: &HeldCall) -> bool {
        matches!(&self.inflight, Counters::Shared(c) if Arc::ptr_eq(c, &held.inflight))
    }
}

fn not_ours() -> Error {
    Error::new(ErrorKind::Usage, "a held call waited for or finished through a port on other counters")
}

/// A group call's own state, apart from its port (a held call keeps it between waits).
#[derive(Debug, Clone, Copy)]
struct CallState {
    members: u32,
    released: u32,
    bytes: u64,
    write: bool,
    strategy: Strategy,
    reason: Option<Reason>,
    checked: Option<Checked>,
    ahead: DeviceState,
    t0: u64,
    /// The end of the last wait: every part up to it was seen done then.
    seen_ns: u64,
    fell_back: bool,
    /// What the polling waits did, added up over the command's waits.
    polled: Option<Waited>,
    /// A wait was the reference wait (the port's [`super::BlockWait::Reference`]).
    reference: bool,
    /// Still in the in-flight counters (and this value is the one to leave them).
    entered: bool,
}

/// A group command in flight: made by [`SmartTargetPort::submit_group`], ended by
/// [`GroupCall::finish`] (or dropped on an error, which leaves the counters all the same).
pub struct GroupCall<'p, 't> {
    port: &'p mut SmartTargetPort<'t>,
    s: CallState,
}

/// A one-request group call held apart from its port between waits ([`Holds`]): it keeps
/// its decision and what its waits did, and leaves the device's counters if dropped.
struct HeldCall {
    s: CallState,
    inflight: Arc<InFlight>,
}

impl HeldCall {
    /// The state, to be taken up by a [`GroupCall`], which leaves the counters from now on.
    fn take(&mut self) -> CallState {
        let s = self.s;
        self.s.entered = false;
        s
    }
}

impl Drop for HeldCall {
    fn drop(&mut self) {
        if std::mem::take(&mut self.s.entered) {
            self.inflight.leave_many(self.s.members, self.s.bytes);
        }
    }
}

struct Held<K> {
    key: K,
    due_ns: u64,
    pending: Pending,
    call: HeldCall,
}

/// The calls one port holds at once: a server thread that has several requests of its
/// device outstanding (the FUSE server's io_uring queue) and answers each at the instant
/// the device completes it. Each is decided when it is held
/// ([`SmartTargetPort::hold`]), waited for earliest first, by its own strategy, against a
/// new request ([`SmartTargetPort::wait_earliest`]), and counted once
/// ([`SmartTargetPort::finish_held`]). Dropping the set leaves the counters for every call
/// still in it.
pub struct Holds<K> {
    held: Vec<Held<K>>,
}

impl<K> Default for Holds<K> {
    fn default() -> Self {
        Holds { held: Vec::new() }
    }
}

impl<K> Holds<K> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The instant the earliest held call is due.
    pub fn earliest_due_ns(&self) -> Option<u64> {
        self.earliest().map(|i| self.held[i].due_ns)
    }

    /// The earliest-due call's index, the first held among equals (a short list: one per
    /// outstanding request of one thread, a scan is cheaper than keeping it ordered).
    fn earliest(&self) -> Option<usize> {
        let mut best: Option<(u64, u64, usize)> = None;
        for (i, h) in self.held.iter().enumerate() {
            let k = (h.due_ns, h.pending.submit_ns, i);
            if best.is_none_or(|b| (k.0, k.1) < (b.0, b.1)) {
                best = Some(k);
            }
        }
        best.map(|b| b.2)
    }
}

/// What [`SmartTargetPort::wait_earliest`] ended on.
pub enum Earliest<K> {
    /// The earliest held call's instant came (answer it, then
    /// [`SmartTargetPort::finish_held`]).
    Due(Ready<K>),
    /// The waiter's event came first; every call is still held.
    Event,
}

/// A held call whose wait saw it done, to be answered and then finished.
pub struct Ready<K> {
    key: K,
    due_ns: u64,
    call: HeldCall,
}

impl<K> Ready<K> {
    pub fn key(&self) -> &K {
        &self.key
    }

    /// The instant the device completed it.
    pub fn due_ns(&self) -> u64 {
        self.due_ns
    }

    /// How it was waited for.
    pub fn strategy(&self) -> Strategy {
        self.call.s.strategy
    }

    /// The end of its wait, on the port's clock.
    pub fn seen_ns(&self) -> u64 {
        self.call.s.seen_ns
    }
}

/// A device status that is an instant on a clock: done at `due_ns` (a model's instant, or
/// a server's reply that the model holds), so a poll is a clock read, and a sleep, a spin or
/// a blocking wait is the clock's own. What a thread that holds one reply waits on (the
/// FUSE server's /dev/fuse threads); [`DueOn`] adds an event that ends any wait.
pub struct DueAt<'a> {
    pub time: &'a dyn crate::clock::Time,
    pub due_ns: u64,
}

impl Status for DueAt<'_> {
    fn now_ns(&self) -> u64 {
        self.time.now_ns()
    }

    fn poll(&mut self) -> Result<bool, Error> {
        let now = self.time.now_ns();
        if now >= self.due_ns {
            return Ok(true);
        }
        if !self.time.is_real() {
            // A virtual clock moves only when the thread spends time: a look costs some.
            self.time.spin_until(now + VIRTUAL_LOOK_NS);
        }
        Ok(false)
    }

    fn sleep_until(&mut self, at_ns: u64) -> Result<(), Error> {
        self.time.sleep_until(at_ns);
        Ok(())
    }

    fn spin_until(&mut self, at_ns: u64) {
        self.time.spin_until(at_ns)
    }

    fn block(&mut self) -> Result<(), Error> {
        self.time.block_until(self.due_ns);
        Ok(())
    }

    fn done_ns(&self) -> Option<u64> {
        Some(self.due_ns)
    }

    fn thread_cpu_ns(&self) -> Option<u64> {
        self.time.thread_cpu_ns()
    }
}

/// A held call's device status: [`DueAt`], asleep on `waiter`, whose event ends any wait.
struct DueOn<'a> {
    at: DueAt<'a>,
    waiter: &'a mut dyn EventWait,
}

/// How long a spin runs between two looks for the waiter's event.
const EVENT_LOOK_NS: u64 = 1_000;
/// What a poll of a held call costs on a virtual clock (a clock read on the host's).
const VIRTUAL_LOOK_NS: u64 = 50;

impl Status for DueOn<'_> {
    fn now_ns(&self) -> u64 {
        self.at.now_ns()
    }

    fn poll(&mut self) -> Result<bool, Error> {
        self.at.poll()
    }

    fn sleep_until(&mut self, at_ns: u64) -> Result<(), Error> {
        self.waiter.sleep_until_or_event(at_ns)
    }

    fn spin_until(&mut self, at_ns: u64) {
        let time = self.at.time;
        loop {
            let now = time.now_ns();
            if now >= at_ns || self.waiter.event_seen() {
                return;
            }
            time.spin_until(at_ns.min(now + EVENT_LOOK_NS));
        }
    }

    fn block(&mut self) -> Result<(), Error> {
        // Asleep on the waiter's timer to the instant (a kernel timer, the wake-up paid), or
        // until the event.
        let due_ns = self.at.due_ns;
        while self.at.time.now_ns() < due_ns && !self.waiter.event_seen() {
            self.waiter.sleep_until_or_event(due_ns)?;
        }
        Ok(())
    }

    fn done_ns(&self) -> Option<u64> {
        self.at.done_ns()
    }

    fn event(&mut self) -> bool {
        self.waiter.event_seen()
    }

    fn thread_cpu_ns(&self) -> Option<u64> {
        self.at.thread_cpu_ns()
    }
}

/// A status whose event makes a polling policy's wait give way: a poll that finds the part
/// not done while the event is there fails, the policy returns the failure, and the group
/// wait ends on the event ([`GroupCall::wait_or_event`]).
struct GiveWay<'s> {
    inner: &'s mut dyn Status,
    gave_way: bool,
}

impl GiveWay<'_> {
    fn give_way(&mut self) -> Error {
        self.gave_way = true;
        Error::new(ErrorKind::Internal, "a polling wait gave way to an event")
    }
}

impl Status for GiveWay<'_> {
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    fn poll(&mut self) -> Result<bool, Error> {
        let done = self.inner.poll()?;
        if !done && self.inner.event() {
            return Err(self.give_way());
        }
        Ok(done)
    }
    fn sleep_until(&mut self, at_ns: u64) -> Result<(), Error> {
        self.inner.sleep_until(at_ns)
    }
    fn spin_until(&mut self, at_ns: u64) {
        self.inner.spin_until(at_ns)
    }
    fn block(&mut self) -> Result<(), Error> {
        self.inner.block()?;
        if self.inner.event() && !self.inner.poll()? {
            return Err(self.give_way());
        }
        Ok(())
    }
    fn done_ns(&self) -> Option<u64> {
        self.inner.done_ns()
    }
    fn event(&mut self) -> bool {
        self.inner.event()
    }
    fn thread_cpu_ns(&self) -> Option<u64> {
        self.inner.thread_cpu_ns()
    }
}

/// What a finished group call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupOutcome {
    pub strategy: Strategy,
    pub reason: Option<Reason>,
    /// From the submission to the end of the leader's last wait, on the port's clock.
    pub latency_ns: u64,
    /// The spin budget ran out in a wait and the leader blocked.
    pub fell_back: bool,
}

impl GroupCall<'_, '_> {
    /// How the leader waits for this command (the fixed strategy, or the decision).
    pub fn strategy(&self) -> Strategy {
        self.s.strategy
    }

    /// Why the decision chose it (the SmartCon choices), `None` for a fixed strategy.
    pub fn reason(&self) -> Option<Reason> {
        self.s.reason
    }

    /// What was in flight on the device ahead of the command when it was submitted.
    pub fn ahead(&self) -> DeviceState {
        self.s.ahead
    }

    /// The instant the call began (before the caller submitted the command).
    pub fn submitted_ns(&self) -> u64 {
        self.s.t0
    }

    /// Members released so far.
    pub fn released(&self) -> u32 {
        self.s.released
    }

    /// Detaches the call from its port (a [`Holds`] keeps it between waits); it stays in
    /// the in-flight counters. Only a port with counters of its own (a group port's) can.
    fn hold(mut self) -> Result<HeldCall, Error> {
        let Counters::Shared(inflight) = &self.port.inflight else {
            return Err(Error::new(ErrorKind::Usage, "a call on borrowed counters cannot be held apart from its port"));
        };
        let inflight = inflight.clone();
        let s = self.s;
        self.s.entered = false;
        Ok(HeldCall { s, inflight })
    }

    /// Waits, by the call's strategy, until `status` says the part `pending` names is done.
    /// `pending` is what a polling policy is told (its size and the backlog ahead of it as
    /// the device sees the part, its start); `from` picks the policy that learns it. Returns
    /// what the wait did; for `block`, `spin` and `sync` its polls and sleeps.
    pub fn wait(&mut self, pending: &Pending, status: &mut dyn Status, from: GroupWait) -> Result<Waited, Error> {
        self.wait_inner(pending, status, from, false)?
            .ok_or_else(|| Error::new(ErrorKind::Internal, "a group wait that cannot give way gave way"))
    }

    /// [`GroupCall::wait`] that gives way to the status's event ([`Status::event`]): `None`
    /// when the event came before the part was done (the call is still waiting: wait again
    /// later). Each strategy looks for the event where it would look at the device: `block`
    /// when its sleep ends, `spin` and `sync` at each poll, the reference wait before and
    /// after its sleep and in its spin (a sleep the event cut short is not a wake-up its
    /// margin learns from), a polling policy at each poll that finds the part not done (its
    /// wait then fails inside the policy, which learns nothing from it).
    pub fn wait_or_event(
        &mut self,
        pending: &Pending,
        status: &mut dyn Status,
        from: GroupWait,
    ) -> Result<Option<Waited>, Error> {
        self.wait_inner(pending, status, from, true)
    }

    fn wait_inner(
        &mut self,
        pending: &Pending,
        status: &mut dyn Status,
        from: GroupWait,
        give_way: bool,
    ) -> Result<Option<Waited>, Error> {
        let port = &mut *self.port;
        let s = &mut self.s;
        let mut waited = Waited::default();
        let reference = match (s.strategy, port.margin.as_deref_mut(), status.done_ns()) {
            (Strategy::Block, Some(margin), Some(done_ns)) => Some((margin, done_ns)),
            _ => None,
        };
        match (PortWait::simple(s.strategy, port.spin_budget_ns), reference) {
            (Some(PortWait::Block), Some((margin, done_ns))) => {
                // The reference wait: asleep until the margin before the device's instant,
                // then watching the clock to it (no poll: nothing is charged to the device).
                let wake_ns = done_ns.saturating_sub(margin.margin_ns());
                while status.now_ns() < wake_ns {
                    if give_way && status.event() {
                        return Ok(None);
                    }
                    status.sleep_until(wake_ns)?;
                    let woke = status.now_ns();
                    if woke >= wake_ns {
                        margin.record(woke - wake_ns);
                        waited.sleeps += 1;
                    } else if !give_way {
                        // Woken early with nothing to give way to: what the timer did.
                        margin.record(0);
                        waited.sleeps += 1;
                        break;
                    }
                }
                loop {
                    if status.now_ns() >= done_ns {
                        break;
                    }
                    if give_way && status.event() {
                        return Ok(None);
                    }
                    status.spin_until(done_ns);
                }
                s.reference = true;
            }
            (Some(PortWait::Block) | Some(PortWait::Reference { .. }), _) => {
                status.block()?;
                waited.sleeps = 1;
                if give_way && status.event() && !status.poll()? {
                    return Ok(None);
                }
            }
            (Some(PortWait::Spin { budget_ns }), _) => loop {
                waited.polls += 1;
                if status.poll()? {
                    break;
                }
                if give_way && status.event() {
                    return Ok(None);
                }
                if status.now_ns().saturating_sub(s.t0) >= budget_ns {
                    status.block()?;
                    waited.sleeps = 1;
                    s.fell_back = true;
                    if give_way && status.event() && !status.poll()? {
                        return Ok(None);
                    }
                    break;
                }
                spin_hint();
            },
            (Some(PortWait::Sync), _) => loop {
                // Programmed I/O: the thread stays on the device until the part is done.
                waited.polls += 1;
                if status.poll()? {
                    break;
                }
                if give_way && status.event() {
                    return Ok(None);
                }
                spin_hint();
            },
            (Some(PortWait::Poll { .. }) | None, _) => {
                let policy = match from {
                    GroupWait::FromSubmission => port.policy.as_deref_mut(),
                    GroupWait::FromLast => port.group_next.as_deref_mut().or(port.policy.as_deref_mut()),
                };
                let Some(policy) = policy else {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        format!("{} was chosen but the port has no polling policy", s.strategy.name()),
                    ));
                };
                // As a single I/O's poll: the policy is told whether the CPUs are busy.
                let cpu = port.thresholds.cpu_threshold_pct;
                policy.set_cpu_busy(port.monitor.cpu_utilization_for(cpu) > cpu);
                waited = if give_way {
                    let mut way = GiveWay { inner: status, gave_way: false };
                    match policy.wait(pending, &mut way) {
                        Err(_) if way.gave_way => return Ok(None),
                        w => w?,
                    }
                } else {
                    policy.wait(pending, status)?
                };
                let sum = s.polled.get_or_insert_with(Waited::default);
                sum.polls += waited.polls;
                sum.sleeps += waited.sleeps;
                sum.predicted_done_ns = waited.predicted_done_ns.or(sum.predicted_done_ns);
                sum.seen_ns = waited.seen_ns;
            }
        }
        let now = status.now_ns();
        if waited.seen_ns == 0 {
            waited.seen_ns = now;
        }
        s.seen_ns = s.seen_ns.max(now);
        Ok(Some(waited))
    }

    /// Counts `n` members released by the leader (each after a wait that saw its part
    /// done). Releasing more than the command carries is the caller's bug: an error.
    pub fn release(&mut self, n: u32) -> Result<(), Error> {
        if self.s.released + n > self.s.members {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("{} release(s) of a command of {} request(s)", self.s.released + n, self.s.members),
            ));
        }
        self.s.released += n;
        Ok(())
    }

    /// Ends the call: the command leaves the in-flight counters and is counted. Every
    /// member must have been released; a member left behind is the caller's bug: an error
    /// (the counters are left all the same).
    pub fn finish(mut self) -> Result<GroupOutcome, Error> {
        self.leave();
        let s = self.s;
        let port = &mut *self.port;
        let latency_ns = s.seen_ns - s.t0;
        match s.checked {
            Some(Checked::Spin(spun)) => port.spin_check.record(s.bytes, s.write, spun, latency_ns),
            Some(Checked::Block(sync)) => {
                if let Some(check) = port.block_check.as_mut() {
                    check.record(s.bytes, s.write, sync, latency_ns)
                }
            }
            None => {}
        }
        port.counters.record(latency_ns, s.bytes, s.strategy, s.reason, s.fell_back);
        port.counters.reference_waits += u64::from(s.reference);
        if let Some(w) = &s.polled {
            port.counters.record_polled(w, s.seen_ns);
        }
        port.last_done_ns = s.seen_ns;
        port.last_seen_ns = s.seen_ns;
        if s.released != s.members {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("a command of {} request(s) finished with {} released", s.members, s.released),
            ));
        }
        Ok(GroupOutcome { strategy: s.strategy, reason: s.reason, latency_ns, fell_back: s.fell_back })
    }

    fn leave(&mut self) {
        if std::mem::take(&mut self.s.entered) {
            self.port.inflight.leave_many(self.s.members, self.s.bytes);
        }
    }
}

impl Drop for GroupCall<'_, '_> {
    /// A call dropped without [`GroupCall::finish`] (an error in a wait, a panic) leaves the
    /// in-flight counters all the same.
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, EventWait, Sleeper};
    use crate::monitor::SystemMonitor;
    use crate::profile::Profile;
    use std::sync::atomic::{AtomicU64, Ordering};

    // A clock that moves only when the port's thread sleeps or spins.
    use crate::clock::ManualClock as Manual;

    /// A command done at `done_ns`; a poll costs 50 ns; a block wakes 7 us late.
    struct Cmd<'c> {
        clock: &'c Manual,
        done_ns: u64,
        polls: u32,
        blocks: u32,
        /// The device gives its instant ([`Status::done_ns`]), as a model does.
        instant: bool,
    }

    impl Status for Cmd<'_> {
        fn now_ns(&self) -> u64 {
            self.clock.now_ns()
        }
        fn poll(&mut self) -> Result<bool, Error> {
            self.polls += 1;
            Ok(self.clock.0.fetch_add(50, Ordering::Relaxed) >= self.done_ns)
        }
        fn sleep_until(&mut self, at_ns: u64) -> Result<(), Error> {
            self.clock.sleep_until(at_ns);
            Ok(())
        }
        fn spin_until(&mut self, at_ns: u64) {
            self.clock.spin_until(at_ns)
        }
        fn block(&mut self) -> Result<(), Error> {
            self.blocks += 1;
            self.clock.sleep_until(self.done_ns + 7_000);
            Ok(())
        }
        fn done_ns(&self) -> Option<u64> {
            self.instant.then_some(self.done_ns)
        }
    }

    fn port(strategy: StrategyChoice, clock: &Arc<Manual>, inflight: &Arc<InFlight>) -> SmartPort {
        let options = SmartPortOptions {
            strategy,
            monitor: Some(Arc::new(SystemMonitor::fixed(0))),
            profile: Some(Profile::paper_default("group-test")),
            time: Some(clock.clone()),
            ..Default::default()
        };
        SmartPort::for_group("group-test", inflight.clone(), None, options).unwrap()
    }

    use super::super::StrategyChoice;

    #[test]
    fn each_strategy_waits_its_way_and_the_command_is_counted_once() {
        for (choice, want) in [
            (StrategyChoice::Fixed(Strategy::Block), Strategy::Block),
            (StrategyChoice::Fixed(Strategy::Spin), Strategy::Spin),
            (StrategyChoice::Fixed(Strategy::Sync), Strategy::Sync),
            (StrategyChoice::Fixed(Strategy::FixedPoll), Strategy::FixedPoll),
            (StrategyChoice::Fixed(Strategy::Hybrid), Strategy::Hybrid),
        ] {
            let clock = Arc::new(Manual::default());
            let inflight = Arc::new(InFlight::default());
            let mut p = port(choice, &clock, &inflight);
            let mut call = p.submit_group(Op::Read, 4, 4 * 4096).unwrap();
            assert_eq!(call.strategy(), want);
            assert_eq!(inflight.ours(), 4, "{choice:?}: four requests in flight");
            let mut cmd = Cmd { clock: &clock, done_ns: 20_000, polls: 0, blocks: 0, instant: false };
            let pending = Pending { op: Op::Read, bytes: 4096, ahead: DeviceState::default(), submit_ns: 0 };
            let w = call.wait(&pending, &mut cmd, GroupWait::FromSubmission).unwrap();
            assert!(clock.now_ns() >= 20_000, "{choice:?}: the wait ended before the command was done");
            assert!(w.seen_ns >= 20_000);
            assert_eq!(cmd.blocks > 0, want == Strategy::Block, "{choice:?}: only block sleeps to the wake-up");
            if want == Strategy::Block {
                assert_eq!(cmd.polls, 0);
            }
            call.release(4).unwrap();
            let out = call.finish().unwrap();
            assert_eq!(out.strategy, want);
            assert!(out.latency_ns >= 20_000);
            assert_eq!(inflight.ours(), 0);
            assert_eq!(inflight.unmatched_leaves(), 0);
            let c = p.counters();
            assert_eq!((c.ios, c.bytes, c.by_strategy[want.index()]), (1, 4 * 4096, 1), "{choice:?}");
            assert_eq!(c.polled_ios > 0, want.is_polling(), "{choice:?}");
        }
    }

    #[test]
    fn spin_blocks_past_its_budget_and_says_so() {
        let clock = Arc::new(Manual::default());
        let inflight = Arc::new(InFlight::default());
        let options = SmartPortOptions {
            strategy: StrategyChoice::Fixed(Strategy::Spin),
            spin_budget_ns: 5_000,
            monitor: Some(Arc::new(SystemMonitor::fixed(0))),
            profile: Some(Profile::paper_default("group-test")),
            time: Some(clock.clone()),
            ..Default::default()
        };
        let mut p = SmartPort::for_group("group-test", inflight, None, options).unwrap();
        let mut call = p.submit_group(Op::Write, 2, 8192).unwrap();
        let mut cmd = Cmd { clock: &clock, done_ns: 1_000_000, polls: 0, blocks: 0, instant: false };
        let pending = Pending { op: Op::Write, bytes: 8192, ahead: DeviceState::default(), submit_ns: 0 };
        call.wait(&pending, &mut cmd, GroupWait::FromSubmission).unwrap();
        assert_eq!(cmd.blocks, 1);
        assert!((90..=110).contains(&cmd.polls), "about 5 us of 50 ns polls: {}", cmd.polls);
        call.release(2).unwrap();
        assert!(call.finish().unwrap().fell_back);
        assert_eq!(p.counters().spin_fallbacks, 1);
    }

    #[test]
    fn a_reference_port_watches_the_clock_to_the_devices_instant_and_counts_it() {
        for instant in [true, false] {
            let clock = Arc::new(Manual::default());
            let inflight = Arc::new(InFlight::default());
            let options = SmartPortOptions {
                strategy: StrategyChoice::Fixed(Strategy::Block),
                block_wait: super::super::BlockWait::Reference,
                monitor: Some(Arc::new(SystemMonitor::fixed(0))),
                profile: Some(Profile::paper_default("group-test")),
                time: Some(clock.clone()),
                ..Default::default()
            };
            let mut p = SmartPort::for_group("group-test", inflight.clone(), None, options).unwrap();
            assert_eq!(p.block_wait(), super::super::BlockWait::Reference);
            let mut call = p.submit_group(Op::Read, 1, 4096).unwrap();
            let mut cmd = Cmd { clock: &clock, done_ns: 20_000, polls: 0, blocks: 0, instant };
            let pending = Pending { op: Op::Read, bytes: 4096, ahead: DeviceState::default(), submit_ns: 0 };
            call.wait(&pending, &mut cmd, GroupWait::FromSubmission).unwrap();
            call.release(1).unwrap();
            let out = call.finish().unwrap();
            assert_eq!(out.strategy, Strategy::Block);
            if instant {
                // On the model's instant (a virtual clock's sleep is not late), not 7 us past
                // it as the device's wake-up is, and without a poll or a block.
                assert_eq!((clock.now_ns(), cmd.polls, cmd.blocks), (20_000, 0, 0));
                assert_eq!(p.counters().reference_waits, 1);
            } else {
                // No instant to watch the clock to: blocked on, as block is.
                assert_eq!((clock.now_ns(), cmd.blocks), (27_000, 1));
                assert_eq!(p.counters().reference_waits, 0);
            }
            assert_eq!((p.counters().ios, inflight.ours()), (1, 0));
        }
    }

    #[test]
    fn members_left_behind_or_released_twice_are_errors_and_the_counters_are_left() {
        let clock = Arc::new(Manual::default());
        let inflight = Arc::new(InFlight::default());
        let mut p = port(StrategyChoice::Fixed(Strategy::Block), &clock, &inflight);
        let mut call = p.submit_group(Op::Read, 3, 3 * 4096).unwrap();
        call.release(2).unwrap();
        assert!(call.release(2).is_err(), "five releases of three");
        assert!(call.finish().is_err(), "one of three never released");
        assert_eq!(inflight.ours(), 0);
        // Dropped on an error path: the counters are left too.
        let call = p.submit_group(Op::Read, 5, 5 * 4096).unwrap();
        assert_eq!(inflight.ours(), 5);
        drop(call);
        assert_eq!((inflight.ours(), inflight.unmatched_leaves()), (0, 0));
        assert!(p.submit_group(Op::Read, 0, 4096).is_err());
        assert!(p.read_at(&mut [0u8; 512], 0).is_err(), "no port below");
    }

    #[test]
    fn smart_decides_on_the_whole_commands_size_and_the_backlog_ahead() {
        let clock = Arc::new(Manual::default());
        let inflight = Arc::new(InFlight::default());
        // The paper's thresholds: 64 KiB, queue limit 0, idle CPU.
        let mut p = port(StrategyChoice::Smart, &clock, &inflight);
        let mut q = port(StrategyChoice::Smart, &clock, &inflight);
        // 32 requests of 4 KiB: one 128 KiB command, over the size threshold.
        let call = p.submit_group(Op::Read, 32, 32 * 4096).unwrap();
        assert_eq!((call.strategy(), call.reason()), (Strategy::Block, Some(Reason::SizeAtThreshold)));
        // A lone 4 KiB request behind it sees the 32 ahead, and their bytes.
        let behind = q.submit_group(Op::Read, 1, 4096).unwrap();
        assert_eq!((behind.ahead().inflight_count, behind.ahead().inflight_bytes), (32, 32 * 4096));
        assert_eq!(behind.reason(), Some(Reason::SizeAtThreshold));
        drop((call, behind));
        // Two small commands: the second has one request ahead, over the queue limit of 0.
        let first = p.submit_group(Op::Read, 2, 2 * 4096).unwrap();
        assert_ne!(first.reason(), Some(Reason::QueueOverLimit), "nothing ahead");
        let second = q.submit_group(Op::Read, 1, 4096).unwrap();
        assert_eq!((second.ahead().inflight_count, second.reason()), (2, Some(Reason::QueueOverLimit)));
    }

    /// A server's ring on the manual clock: a sleep ends at its instant or at the next
    /// request's arrival, whichever is first; the event is an arrival not yet taken.
    struct Ring<'c> {
        clock: &'c Manual,
        arrivals: Vec<u64>,
        /// Sleeps the event cut short.
        cut: u32,
    }

    impl Ring<'_> {
        fn next(&self) -> Option<u64> {
            self.arrivals.first().copied()
        }
        /// The server takes the request that arrived.
        fn take(&mut self) -> u64 {
            self.arrivals.remove(0)
        }
    }

    impl EventWait for Ring<'_> {
        fn sleep_until_or_event(&mut self, at_ns: u64) -> Result<(), Error> {
            let now = self.clock.now_ns();
            if self.event_seen() || at_ns <= now {
                return Ok(());
            }
            match self.next() {
                Some(a) if a < at_ns => {
                    self.cut += 1;
                    self.clock.sleep_until(a)
                }
                _ => self.clock.sleep_until(at_ns),
            }
            Ok(())
        }
        fn event_seen(&mut self) -> bool {
            self.next().is_some_and(|a| a <= self.clock.now_ns())
        }
    }

    fn held_port(
        strategy: StrategyChoice,
        reference: bool,
        clock: &Arc<Manual>,
        inflight: &Arc<InFlight>,
    ) -> SmartPort {
        let options = SmartPortOptions {
            strategy,
            block_wait: if reference { super::super::BlockWait::Reference } else { Default::default() },
            monitor: Some(Arc::new(SystemMonitor::fixed(0))),
            profile: Some(Profile::paper_default("group-test")),
            time: Some(clock.clone()),
            ..Default::default()
        };
        let mut p = SmartPort::for_group("group-test", inflight.clone(), None, options).unwrap();
        p.set_reference_margin_floor(2_000);
        p
    }

    #[test]
    fn held_calls_are_answered_earliest_first_each_its_way_and_give_way_to_a_new_request() {
        for (choice, reference, want) in [
            (StrategyChoice::Fixed(Strategy::Block), true, Some(Strategy::Block)),
            (StrategyChoice::Fixed(Strategy::Block), false, Some(Strategy::Block)),
            (StrategyChoice::Fixed(Strategy::Spin), false, Some(Strategy::Spin)),
            (StrategyChoice::Fixed(Strategy::Sync), false, Some(Strategy::Sync)),
            (StrategyChoice::Fixed(Strategy::FixedPoll), false, Some(Strategy::FixedPoll)),
            (StrategyChoice::Fixed(Strategy::Hybrid), false, Some(Strategy::Hybrid)),
            (StrategyChoice::Smart, false, None),
        ] {
            let clock = Arc::new(Manual::default());
            let inflight = Arc::new(InFlight::default());
            let mut p = held_port(choice, reference, &clock, &inflight);
            let mut holds = Holds::new();
            // Three requests at 0, due out of their order; a fourth arrives at 15 us.
            for (key, due) in [('a', 30_000), ('b', 10_000), ('c', 20_000)] {
                p.hold(&mut holds, key, Op::Read, 4096, 0, due).unwrap();
            }
            assert_eq!((holds.len(), inflight.ours(), holds.earliest_due_ns()), (3, 3, Some(10_000)));
            let mut ring = Ring { clock: &clock, arrivals: vec![15_000], cut: 0 };
            let mut seen = Vec::new();
            while let Some(end) = p.wait_earliest(&mut holds, &mut ring).unwrap() {
                match end {
                    Earliest::Event => {
                        let at = ring.take();
                        let now = clock.now_ns();
                        assert!((at..20_000).contains(&now), "{choice:?}: gave way at {now}, not soon after {at}");
                        seen.push(('!', now));
                        p.hold(&mut holds, 'd', Op::Read, 4096, now, at + 2_000).unwrap();
                    }
                    Earliest::Due(ready) => {
                        let (key, due) = (*ready.key(), ready.due_ns());
                        assert!(clock.now_ns() >= due, "{choice:?}: {key} answered at {} before {due}", clock.now_ns());
                        if let Some(w) = want {
                            assert_eq!(ready.strategy(), w);
                        }
                        seen.push((key, clock.now_ns()));
                        let out = p.finish_held(ready).unwrap();
                        // From the request's arrival (15 us for d) to the end of its wait.
                        let submitted = if key == 'd' { seen[1].1 } else { 0 };
                        assert!(submitted + out.latency_ns >= due, "{choice:?}: {key} latency {}", out.latency_ns);
                    }
                }
            }
            let keys: String = seen.iter().map(|s| s.0).collect();
            assert_eq!(keys, "b!dca", "{choice:?}: {seen:?}");
            if reference || want == Some(Strategy::Block) {
                // A wait to the instant on a clock that wakes on time ends on it.
                for &(k, t) in &seen {
                    let due = match k {
                        'a' => 30_000,
                        'b' => 10_000,
                        'c' => 20_000,
                        'd' => 17_000,
                        _ => continue,
                    };
                    assert_eq!(t, due, "{choice:?} reference {reference}: {k}");
                }
                assert_eq!(ring.cut, 1, "{choice:?}: the arrival cut one sleep short");
            }
            let c = p.counters();
            assert_eq!((c.ios, c.bytes), (4, 4 * 4096), "{choice:?}: every call counted once");
            if let Some(w) = want {
                assert_eq!(c.by_strategy[w.index()], 4, "{choice:?}");
            }
            assert_eq!(c.reference_waits, if reference { 4 } else { 0 }, "{choice:?}");
            assert_eq!(c.polled_ios > 0, want.is_some_and(|w| w.is_polling()), "{choice:?}");
            assert_eq!((inflight.ours(), inflight.unmatched_leaves()), (0, 0), "{choice:?}");
        }
    }

    #[test]
    fn a_held_spin_keeps_its_budget_across_waits_and_held_calls_leave_the_counters() {
        let clock = Arc::new(Manual::default());
        let inflight = Arc::new(InFlight::default());
        let options = SmartPortOptions {
            strategy: StrategyChoice::Fixed(Strategy::Spin),
            spin_budget_ns: 5_000,
            monitor: Some(Arc::new(SystemMonitor::fixed(0))),
            profile: Some(Profile::paper_default("group-test")),
            time: Some(clock.clone()),
            ..Default::default()
        };
        let mut p = SmartPort::for_group("group-test", inflight.clone(), None, options).unwrap();
        let mut holds = Holds::new();
        p.hold(&mut holds, 1u32, Op::Write, 8192, 0, 1_000_000).unwrap();
        let mut ring = Ring { clock: &clock, arrivals: vec![3_000], cut: 0 };
        // Spinning from 0: the arrival at 3 us ends the first wait, inside the budget.
        assert!(matches!(p.wait_earliest(&mut holds, &mut ring).unwrap(), Some(Earliest::Event)));
        assert!((3_000..5_000).contains(&clock.now_ns()), "{}", clock.now_ns());
        ring.take();
        // The budget runs from the submission: 2 us more of spin, then asleep to the instant.
        let Some(Earliest::Due(ready)) = p.wait_earliest(&mut holds, &mut ring).unwrap() else { panic!("not due") };
        assert_eq!(clock.now_ns(), 1_000_000);
        assert!(p.finish_held(ready).unwrap().fell_back);
        assert_eq!(p.counters().spin_fallbacks, 1);
        assert!(p.wait_earliest(&mut holds, &mut ring).unwrap().is_none(), "nothing held");
        // Another port's counters cannot take a held call up; it stays held.
        p.hold(&mut holds, 2, Op::Read, 4096, clock.now_ns(), clock.now_ns() + 10_000).unwrap();
        p.hold(&mut holds, 3, Op::Read, 4096, clock.now_ns(), clock.now_ns() + 20_000).unwrap();
        let other = Arc::new(InFlight::default());
        let mut q = port(StrategyChoice::Fixed(Strategy::Block), &clock, &other);
        assert_eq!(q.wait_earliest(&mut holds, &mut ring).err().map(|e| e.kind), Some(ErrorKind::Usage));
        assert_eq!((holds.len(), inflight.ours()), (2, 2));
        // A set dropped with calls in it (a server that ends) leaves the counters.
        drop(holds);
        assert_eq!((inflight.ours(), inflight.unmatched_leaves()), (0, 0));
    }

    /// A clock whose thread has used `cpu` ns: what a host or simulated clock reads.
    struct Counted {
        clock: Manual,
        cpu: u64,
    }
    impl Clock for Counted {
        fn now_ns(&self) -> u64 {
            self.clock.now_ns()
        }
        fn thread_cpu_ns(&self) -> Option<u64> {
            Some(self.cpu)
        }
    }
    impl Sleeper for Counted {
        fn sleep_until(&self, at_ns: u64) {
            self.clock.sleep_until(at_ns)
        }
        fn spin_until(&self, at_ns: u64) {
            self.clock.spin_until(at_ns)
        }
    }
    impl crate::clock::Time for Counted {}

    struct NoEvent;
    impl EventWait for NoEvent {
        fn sleep_until_or_event(&mut self, _at_ns: u64) -> Result<(), Error> {
            Ok(())
        }
        fn event_seen(&mut self) -> bool {
            false
        }
    }

    /// Hybrid measures what its sleeps cost on the waiting thread's CPU clock
    /// ([`Status::thread_cpu_ns`]); inside a group call it sees the call's statuses, which must
    /// pass the clock's reading through, or hybrid falls back to its clockless bar there.
    #[test]
    fn a_group_call_status_reads_the_thread_cpu_clock_of_its_time() {
        let time = Counted { clock: Manual(AtomicU64::new(0)), cpu: 4_321 };
        let mut at = DueAt { time: &time, due_ns: 10_000 };
        assert_eq!(at.thread_cpu_ns(), Some(4_321));
        let given = GiveWay { inner: &mut at, gave_way: false };
        assert_eq!(given.thread_cpu_ns(), Some(4_321));
        let mut waiter = NoEvent;
        let on = DueOn { at: DueAt { time: &time, due_ns: 10_000 }, waiter: &mut waiter };
        assert_eq!(on.thread_cpu_ns(), Some(4_321));
        // And a clock without one says so.
        let manual = Manual(AtomicU64::new(0));
        assert_eq!(DueAt { time: &manual, due_ns: 1 }.thread_cpu_ns(), None);
    }
}

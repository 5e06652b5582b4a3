//! A thread's handle on the merge device ([`Waiter`]): its synchronous request, its turns as
//! a channel's leader, and the group call of its port that serves each device request.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::Thread;

use smartcon_devemu::pages::{self, PageTransfer};
use smartcon_devemu::Op;
use smartcon_engine::decision::DeviceState;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::smartport::{GroupWait, SmartPort};
use smartcon_engine::target::AlignedBuf;
use smartcon_engine::wait::{Pending, Status, Waited};

use super::request::{AbortOnUnwind, ReqPtr, Request, DONE, LEAD, QUEUED};
use super::status::PageStatus;
use super::{MergeDevice, LEADER_BATCHES_MAX, PAGE_BYTES, THREADS_MAX};

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
    pub(super) fn add_waited(&mut self, w: &Waited) {
        self.polls += w.polls as u64;
        self.sleeps += w.sleeps as u64;
        if let Some(p) = w.predicted_done_ns {
            self.predicted_waits += 1;
            self.prediction_error_ns_sum += w.seen_ns.abs_diff(p);
        }
    }
}

/// One request of a merged request, with its merge buffer.
pub(super) struct Item {
    pub(super) req: ReqPtr,
    pub(super) buf: AlignedBuf,
}

/// Where a device request goes.
#[derive(Clone, Copy)]
pub(super) enum Place {
    /// The leader's channel (merge on).
    Channel(u32),
    /// Any channel, FCFS (merge off).
    Any,
}

/// A thread's handle on a [`MergeDevice`]: its port and its share of the work.
pub struct Waiter<'d> {
    pub(super) dev: &'d MergeDevice,
    /// The port every device request this thread submits (as a leader, or alone with merge
    /// off) is decided and waited for through, as a group call.
    pub(super) port: SmartPort,
    pub(super) batch: Vec<Item>,
    /// Requests taken from the queue for the next batch (reused, no allocation per batch).
    pub(super) taken: Vec<ReqPtr>,
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

//! The ring layer: one io_uring per I/O thread, and the ways of waiting on it.
//!
//! - [`RingWait::Block`]: `io_uring_enter(GETEVENTS, min_complete=1)`; the thread sleeps
//!   in the kernel and the completion wakes it (a voluntary context switch).
//! - [`RingWait::Spin`]: submit without waiting, then read the completion queue's tail in
//!   user memory with a pause hint. Past the budget it falls back to blocking: nothing
//!   spins forever.
//! - [`RingWait::Poll`]: a policy of crate::wait looks at the completion queue at the
//!   instants it chooses and sleeps in between.
//!
//! The ring is set up with COOP_TASKRUN and TASKRUN_FLAG (Linux 5.19; older kernels get a
//! plain ring). Without them the kernel posts a completion by interrupting the running
//! task (an IPI when the device interrupt lands on the other CPU, which in a VM costs tens
//! of microseconds and made spinning on the local virtio disk slower than sleeping: 0.89x
//! and 1.02x of block's IOPS in two 2 s runs). With them it only raises a flag in the
//! shared ring; the spinner sees it and enters the kernel to run the completion (1.12x and
//! 1.29x in the same runs). A sleeping waiter is woken as before.
//!
//! One request is in flight per ring (smartcon's threads are synchronous callers, as in
//! the paper), so a CQE always belongs to the request just submitted.
//!
//! Soundness: a request's buffer belongs to the kernel from submission until its
//! completion is reaped. The ring counts what it has queued and not yet reaped
//! ([`Ring::in_flight`]). The one safe operation, [`Ring::submit_and_wait`] (and its
//! wrappers [`Ring::read_at`], [`Ring::write_at`], [`Ring::fsync`]), reaps the completion
//! before it returns on every path: normally by waiting as asked; on an error of
//! `io_uring_enter`, a failed wait policy or a panic while waiting, a guard's `Drop`
//! cancels the request (`IORING_OP_ASYNC_CANCEL`) and waits until everything queued is
//! reaped, ignoring EINTR. `Ring`'s own `Drop` does the same for anything still in flight.
//! If the kernel refuses to let us wait for `DRAIN_FAILURES_MAX` attempts in a row, the
//! process aborts: returning would hand a buffer back to the caller while the kernel may
//! still write into it, and that is the one thing this layer must never do.
//!
//! Non-goals: more than one request in flight per ring; registered buffers or files.

use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types, IoUring};

use crate::clock::{now_ns, spin_until_ns};
use crate::error::{Error, ErrorKind};
use crate::wait::{Pending, Status, WaitPolicy, Waited};

/// How many spins between two clock reads while busy-waiting.
const SPINS_PER_CLOCK_READ: u32 = 32;

/// The user data of every request queued through [`Ring::push`]: one request is in flight
/// at a time, so a cancel by this tag finds exactly it.
const REQUEST_TAG: u64 = 1;
/// The user data of our own cancel requests, whose completions are not a request's result.
const CANCEL_TAG: u64 = u64::MAX;
/// Failed `io_uring_enter` calls in a row while draining before the process aborts (one
/// millisecond apart: about ten seconds of a kernel that refuses to let us wait).
const DRAIN_FAILURES_MAX: u32 = 10_000;
/// Entries in the submission queue: one request and one cancel need two.
const RING_ENTRIES: u32 = 8;

pub struct Ring {
    ring: IoUring,
    /// For a thread pinned to part of the machine: where io_uring's worker threads run.
    helpers: Option<Helpers>,
    /// Entries queued (submitted or not) whose completion has not been reaped yet: while
    /// this is above zero the kernel may still use a buffer an entry points to.
    in_flight: u32,
}

/// Requests io_uring cannot issue without blocking (a write that extends a file) go to its
/// io-wq worker threads, which inherit the submitting thread's CPU mask. For a pinned
/// thread that is right while it sleeps (the worker runs on the CPU the sleeper left idle
/// and wakes it there) and wrong while it spins (the worker waits for the spinner's CPU
/// until the spin budget runs out). So the workers follow the wait: on the thread's CPUs
/// for a sleep, on the others for a spin. Measured on Postmark's appends, pinned to the
/// interrupt CPU, three runs each (bm-only, 300 ms cells): workers always beside the
/// thread: spin 0.55, 0.80, 0.76 x block's transactions; always on the other CPU: 1.10,
/// 1.05, 1.08 x, but block itself lost about a fifth (1220-1259 tps against 1402-2343);
/// following the wait: 0.96, 0.90, 0.88 x with block's own rate kept.
struct Helpers {
    near: libc::cpu_set_t,
    away: libc::cpu_set_t,
    /// Where they are now (they start near: inherited).
    is_away: bool,
}

/// How to wait for one request on the ring.
pub enum RingWait<'p> {
    /// Sleep in `io_uring_enter` until the completion wakes the thread.
    Block,
    /// Busy-wait on the completion queue for up to `budget_ns`, then sleep.
    Spin { budget_ns: u64 },
    /// Look at the instants the policy chooses (crate::wait).
    Poll { policy: &'p mut dyn WaitPolicy, pending: Pending },
}

/// What came back for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The CQE's result: bytes moved, or a negated errno.
    pub result: i32,
    /// The spin budget ran out and the thread went to sleep.
    pub fell_back: bool,
    /// For a polling wait: what the policy did.
    pub polled: Option<Waited>,
}

impl Completion {
    /// The result as a byte count, or the errno the kernel set.
    pub fn bytes(&self) -> Result<usize, i32> {
        if self.result < 0 {
            Err(-self.result)
        } else {
            Ok(self.result as usize)
        }
    }
}

fn enter_error(e: std::io::Error) -> Error {
    Error::os(ErrorKind::Io, e.raw_os_error().unwrap_or(libc::EIO), format!("io_uring_enter: {e}"))
}

/// Cancels and reaps whatever is still in flight when it drops: the error and panic paths
/// of [`Ring::submit_and_wait`].
struct Reaper<'r>(&'r mut Ring);

impl Drop for Reaper<'_> {
    fn drop(&mut self) {
        self.0.cancel_and_drain();
    }
}

impl Ring {
    pub fn new() -> Result<Ring, Error> {
        let ring = match IoUring::builder().setup_coop_taskrun().setup_taskrun_flag().build(RING_ENTRIES) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::new(RING_ENTRIES),
            r => r,
        };
        let ring = ring.map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::EPERM) => ": io_uring is disabled or restricted; try sysctl kernel.io_uring_disabled=0",
                Some(libc::ENOSYS) => ": this kernel has no io_uring (Linux 5.15 or later is needed)",
                Some(libc::ENOMEM) => ": not enough locked memory for the ring; raise ulimit -l",
                _ => "",
            };
            Error::os(
                ErrorKind::Setup,
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("cannot set up io_uring: {e}{hint}"),
            )
        })?;
        let helpers = crate::placement::pinned_split().map(|(mine, others)| Helpers {
            near: crate::placement::cpu_set(&mine),
            away: crate::placement::cpu_set(&others),
            is_away: false,
        });
        Ok(Ring { ring, helpers, in_flight: 0 })
    }

    /// Entries queued whose completion has not been reaped yet (0 between operations).
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Moves io_uring's workers near this thread (a sleep) or away from it (a spin). Best
    /// effort: kernels before 5.14 lack the call, and the ring works without it.
    fn helpers_away(&mut self, away: bool) {
        if let Some(h) = &mut self.helpers {
            if h.is_away != away {
                let set = if away { &h.away } else { &h.near };
                let _ = self.ring.submitter().register_iowq_aff(set);
                h.is_away = away;
            }
        }
    }

    /// Queues one request (its user data is replaced by the ring's own tag). The low
    /// layer: prefer [`Ring::submit_and_wait`], which also reaps.
    ///
    /// # Safety
    /// Any buffer the entry points to must stay valid until its completion is reaped: by
    /// one of this ring's waits, or at the latest by [`Ring::cancel_and_drain`], which the
    /// ring's `Drop` runs. A caller that lets the ring drop while the request is in flight
    /// must therefore keep the buffer alive until after the ring is gone.
    pub unsafe fn push(&mut self, entry: &squeue::Entry) -> Result<(), Error> {
        if self.in_flight > 0 {
            return Err(Error::new(
                ErrorKind::Internal,
                "io_uring: a request is already in flight on this ring (one at a time)",
            ));
        }
        let entry = entry.clone().user_data(REQUEST_TAG);
        // SAFETY: the caller keeps the buffers alive until the completion is reaped.
        unsafe { self.ring.submission().push(&entry) }
            .map_err(|_| Error::new(ErrorKind::Internal, "io_uring: the submission queue is full"))?;
        self.in_flight += 1;
        Ok(())
    }

    /// Reaps one completion of any kind.
    fn pop_any(&mut self) -> Option<(u64, i32)> {
        let cqe = self.ring.completion().next()?;
        self.in_flight = self.in_flight.saturating_sub(1);
        Some((cqe.user_data(), cqe.result()))
    }

    /// Reaps the request's completion, skipping those of our cancels.
    fn pop(&mut self) -> Option<i32> {
        while let Some((tag, res)) = self.pop_any() {
            if tag != CANCEL_TAG {
                return Some(res);
            }
        }
        None
    }

    /// Submits what is queued and sleeps until one completion arrives.
    fn wait_block(&mut self) -> Result<i32, Error> {
        self.helpers_away(false);
        self.sleep_for_completion()
    }

    fn sleep_for_completion(&mut self) -> Result<i32, Error> {
        loop {
            if let Some(res) = self.pop() {
                return Ok(res);
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                // A signal (Ctrl-C) interrupted the wait; the request is still in flight.
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(enter_error(e)),
            }
        }
    }

    /// Submits what is queued and busy-waits for the completion, up to `budget_ns`.
    fn wait_spin(&mut self, budget_ns: u64) -> Result<(i32, bool), Error> {
        self.helpers_away(true);
        self.submit()?;
        let start = now_ns();
        loop {
            for _ in 0..SPINS_PER_CLOCK_READ {
                if let Some(res) = self.pop() {
                    return Ok((res, false));
                }
                if self.ring.submission().taskrun() {
                    // The completion is queued as task work: entering the kernel runs it.
                    self.submit()?;
                    continue;
                }
                crate::clock::spin_hint();
            }
            if now_ns() - start >= budget_ns {
                return self.sleep_for_completion().map(|res| (res, true));
            }
        }
    }

    /// Submits what is queued without waiting.
    pub fn submit(&mut self) -> Result<(), Error> {
        loop {
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(enter_error(e)),
            }
        }
    }

    /// One look at the completion queue (user memory); a syscall only when the kernel has
    /// flagged a completion waiting to be run (COOP_TASKRUN).
    fn try_reap(&mut self) -> Result<Option<i32>, Error> {
        if let Some(res) = self.pop() {
            return Ok(Some(res));
        }
        if self.ring.submission().taskrun() {
            self.submit()?;
            return Ok(self.pop());
        }
        Ok(None)
    }

    /// Sleeps until a completion arrives or `at_ns` on CLOCK_MONOTONIC passes, whichever is
    /// first; the completion, if any, stays queued for [`Ring::try_reap`].
    fn wait_until(&mut self, at_ns: u64) -> Result<(), Error> {
        let now = now_ns();
        if at_ns <= now || !self.ring.completion().is_empty() {
            return Ok(());
        }
        let rel = at_ns - now;
        let ts = types::Timespec::new().sec(rel / 1_000_000_000).nsec((rel % 1_000_000_000) as u32);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR)) => Ok(()),
            Err(e) => Err(enter_error(e)),
        }
    }

    /// Waits for the queued request as `wait` says. On Ok the completion is reaped.
    fn wait_for(&mut self, wait: RingWait<'_>) -> Result<Completion, Error> {
        match wait {
            RingWait::Block => Ok(Completion { result: self.wait_block()?, fell_back: false, polled: None }),
            RingWait::Spin { budget_ns } => {
                let (result, fell_back) = self.wait_spin(budget_ns)?;
                Ok(Completion { result, fell_back, polled: None })
            }
            RingWait::Poll { policy, pending } => {
                self.submit()?;
                let mut status = RingStatus { ring: self, res: None };
                let waited = policy.wait(&pending, &mut status)?;
                let result = match status.res {
                    Some(res) => res,
                    // The policy returned without seeing it: the buffer is the kernel's
                    // until the completion is reaped.
                    None => self.wait_block()?,
                };
                Ok(Completion { result, fell_back: false, polled: Some(waited) })
            }
        }
    }

    /// Queues one request and waits for it as `wait` says; the completion is reaped before
    /// this returns on every path (Ok, Err, or a panic unwinding through it), so nothing
    /// the entry points to is used by the kernel afterwards.
    ///
    /// # Safety
    /// Any buffer the entry points to must be valid for the whole call (for reads, valid
    /// for writes by the kernel) and not accessed by anyone else meanwhile.
    pub unsafe fn submit_and_wait(&mut self, entry: &squeue::Entry, wait: RingWait<'_>) -> Result<Completion, Error> {
        // SAFETY: the caller keeps the buffers valid for this call, and the call does not
        // return or unwind before the completion is reaped (the reaper below).
        unsafe { self.push(entry)? };
        let reaper = Reaper(self);
        let done = reaper.0.wait_for(wait);
        // Normally nothing is left and this does nothing; after an error it cancels and
        // reaps. A panic inside wait_for drops the reaper while unwinding, to the same end.
        drop(reaper);
        done
    }

    /// Reads into `buf` at `offset` of `fd`. The completion's result is the byte count or
    /// a negated errno, as the kernel gave it.
    pub fn read_at(&mut self, fd: RawFd, buf: &mut [u8], offset: u64, wait: RingWait<'_>) -> Result<Completion, Error> {
        let len = u32::try_from(buf.len())
            .map_err(|_| Error::os(ErrorKind::Usage, libc::EINVAL, "one I/O moves at most 4 GiB"))?;
        let entry = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), len).offset(offset).build();
        // SAFETY: `buf` is borrowed mutably for the whole call, which reaps before it ends.
        unsafe { self.submit_and_wait(&entry, wait) }
    }

    /// Writes `buf` at `offset` of `fd`; the result as for [`Ring::read_at`].
    pub fn write_at(&mut self, fd: RawFd, buf: &[u8], offset: u64, wait: RingWait<'_>) -> Result<Completion, Error> {
        let len = u32::try_from(buf.len())
            .map_err(|_| Error::os(ErrorKind::Usage, libc::EINVAL, "one I/O moves at most 4 GiB"))?;
        let entry = opcode::Write::new(types::Fd(fd), buf.as_ptr(), len).offset(offset).build();
        // SAFETY: `buf` is borrowed for the whole call, which reaps before it ends.
        unsafe { self.submit_and_wait(&entry, wait) }
    }

    /// Flushes `fd` to stable storage.
    pub fn fsync(&mut self, fd: RawFd, wait: RingWait<'_>) -> Result<Completion, Error> {
        let entry = opcode::Fsync::new(types::Fd(fd)).build();
        // SAFETY: the entry points to no memory.
        unsafe { self.submit_and_wait(&entry, wait) }
    }

    /// Sleeps on a kernel timer until `at_ns` on CLOCK_MONOTONIC. The timer's expiry wakes
    /// the thread the way a device interrupt would.
    pub fn sleep_until(&mut self, at_ns: u64) -> Result<(), Error> {
        let ts = types::Timespec::new().sec(at_ns / 1_000_000_000).nsec((at_ns % 1_000_000_000) as u32);
        let entry = opcode::Timeout::new(&ts).flags(types::TimeoutFlags::ABS).build();
        // SAFETY: `ts` lives until the end of this function, and submit_and_wait reaps the
        // timeout's completion before it returns.
        let done = unsafe { self.submit_and_wait(&entry, RingWait::Block)? };
        if done.result != -libc::ETIME && done.result < 0 {
            return Err(Error::os(
                ErrorKind::Io,
                -done.result,
                format!("timeout failed: {}", std::io::Error::from_raw_os_error(-done.result)),
            ));
        }
        Ok(())
    }

    /// Cancels what is in flight and waits until every queued entry's completion is
    /// reaped. Never fails: EINTR is retried, other errors of `io_uring_enter` are retried
    /// a millisecond apart, and after `DRAIN_FAILURES_MAX` of them the process aborts
    /// rather than let a buffer go that the kernel may still write (see the module header).
    pub fn cancel_and_drain(&mut self) {
        while self.in_flight > 0 && self.pop_any().is_some() {}
        if self.in_flight == 0 {
            return;
        }
        let cancel = opcode::AsyncCancel::new(REQUEST_TAG).build().user_data(CANCEL_TAG);
        // SAFETY: a cancel points to no memory. Without room (impossible with one request
        // on an 8-entry queue) we still wait for the request to end on its own.
        if unsafe { self.ring.submission().push(&cancel) }.is_ok() {
            self.in_flight += 1;
        }
        let mut failures = 0u32;
        while self.in_flight > 0 {
            if self.pop_any().is_some() {
                continue;
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => failures = 0,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => {
                    failures += 1;
                    if failures >= DRAIN_FAILURES_MAX {
                        // Not eprintln: it panics when stderr is gone, and this must not panic.
                        use std::io::Write;
                        let _ = writeln!(
                            std::io::stderr(),
                            "smartcon: cannot reap an io_uring request whose buffer the kernel may still use ({e}); aborting"
                        );
                        std::process::abort();
                    }
                    // A syscall's return also runs pending task work, which may post it.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Closing the ring's fd does not wait for its requests; reap them here.
        self.cancel_and_drain();
    }
}

/// An io_uring request in flight: a poll is a look at the completion queue.
struct RingStatus<'a> {
    ring: &'a mut Ring,
    res: Option<i32>,
}

impl Status for RingStatus<'_> {
    fn now_ns(&self) -> u64 {
        now_ns()
    }

    fn poll(&mut self) -> Result<bool, Error> {
        if self.res.is_none() {
            self.res = self.ring.try_reap()?;
        }
        Ok(self.res.is_some())
    }

    fn sleep_until(&mut self, at_ns: u64) -> Result<(), Error> {
        if self.res.is_none() {
            self.ring.wait_until(at_ns)?;
        }
        Ok(())
    }

    fn spin_until(&mut self, at_ns: u64) {
        spin_until_ns(at_ns);
    }

    fn block(&mut self) -> Result<(), Error> {
        if self.res.is_none() {
            self.res = Some(self.ring.wait_block()?);
        }
        Ok(())
    }

    fn thread_cpu_ns(&self) -> Option<u64> {
        Some(crate::clock::thread_cpu_ns())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    use super::*;
    use crate::decision::DeviceState;
    use smartcon_util::Op;

    /// A wait policy that fails (or panics) at once, leaving its request in flight.
    struct Broken {
        panics: bool,
    }

    impl WaitPolicy for Broken {
        fn wait(&mut self, _req: &Pending, _status: &mut dyn Status) -> Result<Waited, Error> {
            if self.panics {
                // Unwinds like a panic without running the panic hook, whose backtrace
                // would burn CPU beside the monitor's tests in this process.
                std::panic::resume_unwind(Box::new("policy bug"));
            }
            Err(Error::new(ErrorKind::Io, "the policy failed"))
        }
    }

    fn pending() -> Pending {
        Pending { op: Op::Read, bytes: 8, ahead: DeviceState { inflight_count: 0, inflight_bytes: 0 }, submit_ns: 0 }
    }

    /// The pipe still holds what is written after the failed wait: the read that never got
    /// data was cancelled, not left to consume it later into a buffer that is gone.
    fn assert_cancelled(ring: &mut Ring, tx: &mut std::io::PipeWriter, rx: &std::io::PipeReader) {
        assert_eq!(ring.in_flight(), 0);
        tx.write_all(b"late").unwrap();
        let mut buf = [0u8; 8];
        let done = ring.read_at(rx.as_raw_fd(), &mut buf, 0, RingWait::Block).unwrap();
        assert_eq!(done.bytes(), Ok(4), "the ring is reusable and the data was left in the pipe");
        assert_eq!(&buf[..4], b"late");
        assert_eq!(ring.in_flight(), 0);
    }

    #[test]
    fn a_failing_policy_cancels_its_read_and_leaves_the_ring_reusable() {
        let (rx, mut tx) = std::io::pipe().unwrap();
        let mut ring = Ring::new().unwrap();
        let mut buf = [0u8; 8];
        let mut policy = Broken { panics: false };
        let wait = RingWait::Poll { policy: &mut policy, pending: pending() };
        let e = ring.read_at(rx.as_raw_fd(), &mut buf, 0, wait).unwrap_err();
        assert!(e.message.contains("policy failed"), "{e}");
        assert_cancelled(&mut ring, &mut tx, &rx);
    }

    #[test]
    fn a_panicking_policy_cancels_and_reaps_while_unwinding() {
        let (rx, mut tx) = std::io::pipe().unwrap();
        let mut ring = Ring::new().unwrap();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut buf = [0u8; 8];
            let mut policy = Broken { panics: true };
            let wait = RingWait::Poll { policy: &mut policy, pending: pending() };
            let _ = ring.read_at(rx.as_raw_fd(), &mut buf, 0, wait);
        }));
        assert!(panicked.is_err());
        assert_cancelled(&mut ring, &mut tx, &rx);
    }

    #[test]
    fn a_read_the_kernel_fails_comes_back_with_its_errno() {
        let (_rx, mut tx) = std::io::pipe().unwrap();
        let (rx2, _tx2) = std::io::pipe().unwrap();
        let mut ring = Ring::new().unwrap();
        let mut buf = [0u8; 8];
        for wait in [RingWait::Block, RingWait::Spin { budget_ns: 1_000_000 }] {
            // Reading the write end of a pipe: EBADF from the kernel, in the completion.
            let done = ring.read_at(tx.as_raw_fd(), &mut buf, 0, wait).unwrap();
            assert_eq!(done.bytes(), Err(libc::EBADF));
            assert_eq!(ring.in_flight(), 0);
        }
        tx.write_all(b"x").unwrap();
        let _ = rx2;
    }

    #[test]
    fn drop_cancels_and_reaps_a_request_in_flight() {
        let (mut rx, mut tx) = std::io::pipe().unwrap();
        // The buffer outlives the ring, as push's contract asks.
        let mut buf = Box::new([0u8; 8]);
        let mut ring = Ring::new().unwrap();
        let entry = opcode::Read::new(types::Fd(rx.as_raw_fd()), buf.as_mut_ptr(), 8).offset(0).build();
        // SAFETY: `buf` lives until the end of the test, after the ring is dropped.
        unsafe { ring.push(&entry).unwrap() };
        ring.submit().unwrap();
        assert_eq!(ring.in_flight(), 1);
        // A second request while one is in flight is refused, not queued.
        // SAFETY: refused before anything is queued.
        assert_eq!(unsafe { ring.push(&entry) }.unwrap_err().kind, ErrorKind::Internal);
        // What Drop runs: afterwards nothing is in flight (closing the ring alone would
        // leave the kernel to cancel it later, asynchronously).
        ring.cancel_and_drain();
        assert_eq!(ring.in_flight(), 0);
        // And Drop with a request in flight returns rather than hangs.
        // SAFETY: as above, `buf` outlives the ring.
        unsafe { ring.push(&entry).unwrap() };
        ring.submit().unwrap();
        drop(ring);
        tx.write_all(b"after").unwrap();
        let mut got = [0u8; 5];
        rx.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"after", "the cancelled read did not take the data");
        assert_eq!(*buf, [0u8; 8], "nothing was written into the buffer");
    }
}

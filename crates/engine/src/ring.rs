//! The raw ring layer: one io_uring per I/O thread, and the two ways of waiting on it.
//!
//! - [`Ring::wait_block`]: `io_uring_enter(GETEVENTS, min_complete=1)`; the thread sleeps
//!   in the kernel and the completion wakes it (a voluntary context switch).
//! - [`Ring::wait_spin`]: submit without waiting, then read the completion queue's tail in
//!   user memory with a pause hint. Past the budget it falls back to `wait_block`: nothing
//!   spins forever.
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

use io_uring::{opcode, squeue, types, IoUring};

use crate::clock::now_ns;
use crate::error::{Error, ErrorKind};

/// How many spins between two clock reads while busy-waiting.
const SPINS_PER_CLOCK_READ: u32 = 32;

pub struct Ring {
    ring: IoUring,
    /// For a thread pinned to part of the machine: where io_uring's worker threads run.
    helpers: Option<Helpers>,
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

impl Ring {
    pub fn new() -> Result<Ring, Error> {
        let ring = match IoUring::builder().setup_coop_taskrun().setup_taskrun_flag().build(8) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::new(8),
            r => r,
        };
        let ring = ring.map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::EPERM) => ": io_uring is disabled or restricted; try sysctl kernel.io_uring_disabled=0",
                Some(libc::ENOSYS) => ": this kernel has no io_uring (Linux 5.15 or later is needed)",
                Some(libc::ENOMEM) => ": not enough locked memory for the ring; raise ulimit -l",
                _ => "",
            };
            Error::new(ErrorKind::Setup, format!("cannot set up io_uring: {e}{hint}"))
        })?;
        let helpers = crate::placement::pinned_split().map(|(mine, others)| Helpers {
            near: crate::placement::cpu_set(&mine),
            away: crate::placement::cpu_set(&others),
            is_away: false,
        });
        Ok(Ring { ring, helpers })
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

    /// Queues one request.
    ///
    /// # Safety
    /// Any buffer the entry points to must stay valid until its completion is reaped.
    pub unsafe fn push(&mut self, entry: &squeue::Entry) {
        // SAFETY: the caller keeps the buffers alive; the queue has room because at most
        // one request is ever in flight on this ring.
        unsafe { self.ring.submission().push(entry).expect("submission queue has room") };
    }

    fn pop(&mut self) -> Option<i32> {
        self.ring.completion().next().map(|cqe| cqe.result())
    }

    /// Submits what is queued and sleeps until one completion arrives.
    pub fn wait_block(&mut self) -> Result<i32, Error> {
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
                Err(e) => return Err(Error::new(ErrorKind::Io, format!("io_uring_enter: {e}"))),
            }
        }
    }

    /// Submits what is queued and busy-waits for the completion, up to `budget_ns`.
    pub fn wait_spin(&mut self, budget_ns: u64) -> Result<(i32, bool), Error> {
        self.helpers_away(true);
        loop {
            match self.ring.submit() {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(Error::new(ErrorKind::Io, format!("io_uring_enter: {e}"))),
            }
        }
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
                std::hint::spin_loop();
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
                Err(e) => return Err(Error::new(ErrorKind::Io, format!("io_uring_enter: {e}"))),
            }
        }
    }

    /// One look at the completion queue (user memory); a syscall only when the kernel has
    /// flagged a completion waiting to be run (COOP_TASKRUN).
    pub fn try_reap(&mut self) -> Result<Option<i32>, Error> {
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
    pub fn wait_until(&mut self, at_ns: u64) -> Result<(), Error> {
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
            Err(e) => Err(Error::new(ErrorKind::Io, format!("io_uring_enter: {e}"))),
        }
    }

    /// Sleeps on a kernel timer until `at_ns` on CLOCK_MONOTONIC. The timer's expiry wakes
    /// the thread the way a device interrupt would.
    pub fn sleep_until(&mut self, at_ns: u64) -> Result<(), Error> {
        let ts = types::Timespec::new().sec(at_ns / 1_000_000_000).nsec((at_ns % 1_000_000_000) as u32);
        let entry = opcode::Timeout::new(&ts).flags(types::TimeoutFlags::ABS).build().user_data(0x7173);
        // SAFETY: `ts` lives until wait_block returns, which reaps the timeout's completion.
        unsafe { self.push(&entry) };
        let res = self.wait_block()?;
        if res != -libc::ETIME && res < 0 {
            return Err(Error::new(
                ErrorKind::Io,
                format!("timeout failed: {}", std::io::Error::from_raw_os_error(-res)),
            ));
        }
        Ok(())
    }
}

//! FUSE over io_uring (Linux 6.14+): the emulate-mount server's fast transport.
//!
//! After INIT has negotiated FUSE_OVER_IO_URING, the kernel wants one queue per possible CPU
//! (a request goes to the queue of the CPU it was issued on) and sends nothing through the
//! rings until every queue has at least one registered entry. Each queue here is one thread
//! with its own io_uring (128-byte SQEs), not pinned, owning `depth` entries; an entry
//! is a 288-byte `fuse_uring_req_header` and a payload buffer as large as the kernel's
//! largest request (max_write = max_pages x 4 KiB = [`MAX_WRITE_BYTES`]).
//!
//! An entry is registered once (`FUSE_IO_URING_CMD_REGISTER`, an IORING_OP_URING_CMD whose
//! `addr` points at the two iovecs); its command completes when a request has been copied
//! into its buffers. The thread handles the request at once (the data moves, the model says
//! when the reply is due), keeps serving other entries, and when the reply is due commits it
//! with `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`, which also hands the entry back for the next
//! request.
//!
//! How a queue holds its replies is the engine's (issue 21), as on the /dev/fuse threads:
//! the queue has a SmartPort on the device's in-flight counters ([`Waiter`]), each modelled
//! request is held as a group call of one request when it arrives (it enters the counters
//! and the port decides how it will be waited for: `--strategy`, or `smart`'s decision, or by
//! default the reference wait), and the queue waits through the port for the earliest held
//! reply's instant, by that reply's strategy, or for a new request on the ring, whichever
//! comes first (`SmartPort::wait_earliest`): its sleeps are io_uring waits with a timeout
//! (a completion ends them), its spins look at the completion queue. A new request ends the
//! wait; the queue handles it and waits again for whichever reply is then earliest. A reply
//! found due is committed, then counted by the port.
//!
//! Buffer ownership, the one invariant everything unsafe here rests on: the kernel may write
//! an entry's buffers from the moment its command is pushed until that command's completion
//! has been reaped; only in between (the entry is "ours") does this code form references to
//! them. The [`Arena`] counts commands in flight and frees the buffers only at zero; on any
//! other exit (error, panic, a connection that never ended) it leaks them, so a late kernel
//! write can never land in freed memory. The connection's end (unmount or abort) completes
//! every command with ENOTCONN, which is how a queue thread learns to return.
//!
//! Non-goals: the kernel-managed buffer rings and zero copy of 7.46+, notifications (the
//! kernel does not carry them over io_uring), more than one thread per queue.

use std::alloc::Layout;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use io_uring::types::{SubmitArgs, Timespec};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use smartcon_engine::clock::{now_ns, EventWait};
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::smartport::{Earliest, Holds};

use crate::fuse::{Disk, Pending, Reply, Waiter, MAX_WRITE_BYTES};
use crate::fuse_abi::{self, InHeader};

/// The kernel's switch for FUSE over io_uring.
pub const ENABLE_URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";
/// Where an entry's payload starts in its slot (the header gets a page of its own).
const HEADER_SLOT_BYTES: usize = 4096;
const SLOT_BYTES: usize = HEADER_SLOT_BYTES + MAX_WRITE_BYTES;
/// How long one queue may take to register.
const REGISTER_WAIT: Duration = Duration::from_secs(10);
/// Most entries per queue.
pub const DEPTH_MAX: usize = 64;

const _: () = assert!(fuse_abi::URING_HEADER_BYTES <= HEADER_SLOT_BYTES);
const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);

/// Why this process cannot use FUSE over io_uring, if it cannot.
pub fn unavailable_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("FUSE over io_uring needs root (it sets fuse.enable_uring)".into());
    }
    if !Path::new(ENABLE_URING_PARAM).exists() {
        return Some(format!(
            "this kernel has no FUSE over io_uring ({ENABLE_URING_PARAM} is missing: Linux 6.14+ with \
             CONFIG_FUSE_IO_URING)"
        ));
    }
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").unwrap_or_default();
    if !matches!(disabled.trim(), "" | "0") {
        return Some("io_uring is disabled: sysctl kernel.io_uring_disabled=0".into());
    }
    None
}

/// fuse.enable_uring now (None: no such parameter).
pub fn enable_uring() -> Option<bool> {
    let text = std::fs::read_to_string(ENABLE_URING_PARAM).ok()?;
    Some(matches!(text.trim(), "Y" | "y" | "1"))
}

pub fn set_enable_uring(on: bool) -> Result<(), Error> {
    std::fs::write(ENABLE_URING_PARAM, if on { "Y" } else { "N" })
        .map_err(|e| Error::io(ErrorKind::Setup, Path::new(ENABLE_URING_PARAM), e))
}

/// The kernel's queue count: num_possible_cpus(), from /sys/devices/system/cpu/possible.
fn possible_cpus() -> Result<usize, Error> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .map_err(|e| Error::io(ErrorKind::Setup, Path::new("/sys/devices/system/cpu/possible"), e))?;
    parse_cpu_list(text.trim())
        .ok_or_else(|| Error::new(ErrorKind::Setup, format!("cannot parse the possible CPUs {text:?}")))
}

/// "0-3,6" -> 5.
fn parse_cpu_list(s: &str) -> Option<usize> {
    let mut n = 0;
    for part in s.split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>().ok()?.checked_sub(a.parse::<usize>().ok()?)? + 1,
            None => part.parse::<usize>().map(|_| 1).ok()?,
        };
    }
    Some(n)
}

/// The running queue threads of one connection.
pub struct Queues {
    threads: Vec<JoinHandle<Result<(), Error>>>,
}

impl Queues {
    /// Starts one queue per possible CPU with `depth` entries each and waits until each has
    /// registered its entries (the ring is then ready and carries every request).
    pub fn start(fd: Arc<OwnedFd>, disk: Arc<Disk>, depth: usize) -> Result<Queues, Error> {
        let depth = depth.clamp(1, DEPTH_MAX);
        let mut queues = Queues { threads: Vec::new() };
        for qid in 0..possible_cpus()? {
            let (tx, rx) = mpsc::sync_channel(1);
            let (fd, disk) = (fd.clone(), disk.clone());
            let t = std::thread::Builder::new()
                .name(format!("fuse-uring-{qid}"))
                .spawn(move || queue_thread(qid as u16, &fd, &disk, depth, tx))
                .map_err(|e| Error::new(ErrorKind::Setup, format!("cannot start a FUSE queue thread: {e}")))?;
            queues.threads.push(t);
            match rx.recv_timeout(REGISTER_WAIT) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(Error {
                        kind: ErrorKind::Setup,
                        message: format!("FUSE io_uring queue {qid}: {e}"),
                        ..e
                    })
                }
                Err(_) => {
                    return Err(Error::new(ErrorKind::Setup, format!("FUSE io_uring queue {qid} did not register")))
                }
            }
        }
        Ok(queues)
    }

    pub fn any_finished(&self) -> bool {
        self.threads.iter().any(|t| t.is_finished())
    }

    pub fn finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Joins the threads that have returned; reports their errors and those still running.
    pub fn join_finished(self) -> Vec<String> {
        let mut problems = Vec::new();
        for (qid, t) in self.threads.into_iter().enumerate() {
            if !t.is_finished() {
                problems.push(format!("FUSE io_uring queue {qid} still running"));
                continue;
            }
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => problems.push(format!("FUSE io_uring queue {qid}: {e}")),
                Err(_) => problems.push(format!("FUSE io_uring queue {qid} panicked")),
            }
        }
        problems
    }
}

fn queue_thread(
    qid: u16,
    fd: &OwnedFd,
    disk: &Disk,
    depth: usize,
    ready: mpsc::SyncSender<Result<(), Error>>,
) -> Result<(), Error> {
    // Not pinned to its CPU (libfuse pins): on a shared host another SCHED_FIFO thread on
    // that CPU would starve a pinned queue, while an unpinned one moves to the other CPU.
    // Pinned and unpinned measured the same with fio (docs/emulator.md).
    disk.prepare_thread();
    // A failure to start goes to the starter (with its source); the thread's own result is
    // then never joined (the start fails), so it returns the text alone. The port is made
    // on this thread, under its priority: the reference wait measures its wake-ups.
    let started = disk
        .shared()
        .waiter()
        .and_then(|waiter| Queue::new(qid, fd.as_raw_fd(), depth, waiter))
        .and_then(|mut q| q.register().map(|()| q));
    let mut queue = match started {
        Ok(q) => q,
        Err(e) => {
            let text = Error::new(e.kind, e.message.clone());
            let _ = ready.send(Err(e));
            return Err(text);
        }
    };
    let _ = ready.send(Ok(()));
    queue.run(disk)
}

/// The entries' buffers of one queue, shared with the kernel (see the module header for
/// the ownership rule). Entry `i`'s header is at `i * SLOT_BYTES`, its payload one page on.
struct Arena {
    base: NonNull<u8>,
    layout: Layout,
    count: usize,
    /// Whether entry i is ours (no command for it in flight).
    ours: Vec<bool>,
    in_flight: usize,
    /// iov[0] = header, iov[1] = payload, per entry: what REGISTER points at.
    iovecs: Vec<[libc::iovec; 2]>,
}

impl Arena {
    fn new(count: usize) -> Result<Arena, Error> {
        let layout = Layout::from_size_align(SLOT_BYTES * count, HEADER_SLOT_BYTES)
            .map_err(|e| Error::from_source(ErrorKind::Setup, e))?;
        // SAFETY: the layout has a non-zero size (count >= 1, SLOT_BYTES > 0).
        let base = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).ok_or_else(|| {
            Error::new(ErrorKind::Setup, format!("cannot allocate {} bytes of FUSE ring buffers", layout.size()))
        })?;
        let iovecs = (0..count)
            .map(|i| {
                // SAFETY: both offsets are inside the allocation (i < count).
                let (h, p) = unsafe {
                    (base.as_ptr().add(i * SLOT_BYTES), base.as_ptr().add(i * SLOT_BYTES + HEADER_SLOT_BYTES))
                };
                [
                    libc::iovec { iov_base: h.cast(), iov_len: fuse_abi::URING_HEADER_BYTES },
                    libc::iovec { iov_base: p.cast(), iov_len: MAX_WRITE_BYTES },
                ]
            })
            .collect();
        Ok(Arena { base, layout, count, ours: vec![true; count], in_flight: 0, iovecs })
    }

    /// Entry `i`'s header and payload. Panics if a command for it is in flight.
    fn entry(&mut self, i: usize) -> (&mut [u8], &mut [u8]) {
        assert!(self.ours[i], "entry {i} is the kernel's");
        // SAFETY: the two ranges are inside the allocation, disjoint, and nothing else
        // (not the kernel: no command for entry i is in flight, asserted above) accesses
        // them while the returned borrows of `self` live.
        unsafe {
            let h = self.base.as_ptr().add(i * SLOT_BYTES);
            (
                std::slice::from_raw_parts_mut(h, fuse_abi::URING_HEADER_BYTES),
                std::slice::from_raw_parts_mut(h.add(HEADER_SLOT_BYTES), MAX_WRITE_BYTES),
            )
        }
    }

    /// A command for entry `i` is about to be pushed: the kernel may use its buffers.
    fn give(&mut self, i: usize) {
        assert!(self.ours[i], "entry {i} given twice");
        self.ours[i] = false;
        self.in_flight += 1;
    }

    /// Entry `i`'s command completed: its buffers are ours again.
    fn take(&mut self, i: usize) -> bool {
        if i >= self.count || self.ours[i] {
            return false;
        }
        self.ours[i] = true;
        self.in_flight -= 1;
        true
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        if self.in_flight == 0 {
            // SAFETY: allocated in `new` with this layout; no command is in flight, so the
            // kernel holds no claim on the memory.
            unsafe { std::alloc::dealloc(self.base.as_ptr(), self.layout) };
        } else {
            // The kernel may still write these buffers: leaking them is the only safe choice.
            eprintln!(
                "emulate mount: {} FUSE ring commands still in flight; leaking {} bytes of their buffers",
                self.in_flight,
                self.layout.size()
            );
        }
    }
}

/// One queue: its ring, its entries, and the replies it holds until due.
struct Queue {
    qid: u16,
    fd: RawFd,
    // Declared before `arena`: the ring is closed first, then the arena decides whether it
    // may free the buffers.
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    arena: Arena,
    /// The queue's SmartPort, and the replies written and not yet committed, each a held
    /// call of it keyed by its entry.
    waiter: Waiter,
    holds: Holds<usize>,
    pending: Vec<Option<Pending>>,
    unique: Vec<u64>,
    retired: usize,
    first_error: Option<Error>,
    /// Completions reaped while registering, handled first by `run`.
    early: Vec<(usize, i32)>,
}

impl Queue {
    fn new(qid: u16, fd: RawFd, depth: usize, waiter: Waiter) -> Result<Queue, Error> {
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .build((depth * 2).next_power_of_two() as u32)
            .map_err(|e| Error::with_source(ErrorKind::Setup, "io_uring setup (128-byte SQEs)", e))?;
        Ok(Queue {
            qid,
            fd,
            ring,
            arena: Arena::new(depth)?,
            waiter,
            holds: Holds::new(),
            pending: vec![None; depth],
            unique: vec![0; depth],
            retired: 0,
            first_error: None,
            early: Vec::new(),
        })
    }

    /// A URING_CMD for entry `i`.
    fn command(&self, i: usize, op: u32, commit_id: u64) -> squeue::Entry128 {
        let mut cmd = [0u8; 80];
        // struct fuse_uring_cmd_req: flags, commit_id, qid, padding.
        cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
        cmd[16..18].copy_from_slice(&self.qid.to_ne_bytes());
        let mut b = opcode::UringCmd80::new(types::Fd(self.fd), op).cmd(cmd);
        if op == fuse_abi::URING_CMD_REGISTER {
            b = b.addr(Some(self.arena.iovecs[i].as_ptr() as u64));
        }
        let e = b.build().user_data(i as u64);
        if op == fuse_abi::URING_CMD_REGISTER {
            with_len(e, fuse_abi::URING_IOV_SEGS)
        } else {
            e
        }
    }

    /// Pushes a command for entry `i`, handing its buffers to the kernel.
    fn push(&mut self, i: usize, op: u32, commit_id: u64) -> Result<(), Error> {
        let e = self.command(i, op, commit_id);
        self.arena.give(i);
        // SAFETY: the command's buffers (entry i's header and payload, and for REGISTER its
        // iovec pair, read during submission) live in the arena, which is not freed while
        // any command is in flight (`give` above counted this one before the kernel can see it).
        let pushed = unsafe { self.ring.submission().push(&e) };
        if pushed.is_err() {
            // Not in the queue: the kernel never saw it.
            self.arena.take(i);
            return Err(Error::new(ErrorKind::Internal, "the submission queue is full"));
        }
        Ok(())
    }

    fn register(&mut self) -> Result<(), Error> {
        for i in 0..self.arena.count {
            self.push(i, fuse_abi::URING_CMD_REGISTER, 0)?;
        }
        self.ring.submit().map_err(|e| Error::with_source(ErrorKind::Setup, "register: io_uring_enter", e))?;
        // A refused registration completes at once; an accepted one only with a request,
        // which may already be here (the last queue to register makes the ring ready, and
        // requests that waited for it are sent at once): kept for `run`, never dropped.
        self.early.extend(self.ring.completion().map(|c| (c.user_data() as usize, c.result())));
        let Some(&(_, res)) = self.early.iter().find(|(_, res)| *res < 0) else { return Ok(()) };
        for &(i, _) in &self.early {
            self.arena.take(i);
        }
        // Entries that did receive a request stay unanswered: the caller fails the mount,
        // whose unmount ends those requests.
        Err(Error::with_source(ErrorKind::Setup, "FUSE_IO_URING_CMD_REGISTER", std::io::Error::from_raw_os_error(-res)))
    }

    fn run(&mut self, disk: &Disk) -> Result<(), Error> {
        let mut done: Vec<(usize, i32)> = std::mem::take(&mut self.early);
        loop {
            done.extend(self.ring.completion().map(|c| (c.user_data() as usize, c.result())));
            for &(i, res) in &done {
                self.completed(disk, i, res)?;
            }
            done.clear();
            if self.retired == self.arena.count {
                return self.first_error.take().map_or(Ok(()), Err);
            }
            self.wait(disk)?;
        }
    }

    /// Entry `i`'s command completed with `res`: a request to handle, or the entry's end.
    /// A modelled request's reply is held through the port ([`Waiter::arrive`]); any other
    /// is committed at once.
    fn completed(&mut self, disk: &Disk, i: usize, res: i32) -> Result<(), Error> {
        if !self.arena.take(i) {
            self.first_error
                .get_or_insert_with(|| Error::new(ErrorKind::Internal, format!("a completion for unknown entry {i}")));
            return Ok(());
        }
        if res < 0 {
            // ENOTCONN: the connection ended (unmount, abort). Anything else is a bug to report.
            self.retired += 1;
            if res != -libc::ENOTCONN && res != -libc::ECONNABORTED {
                let e = std::io::Error::from_raw_os_error(-res);
                self.first_error.get_or_insert_with(|| Error::with_source(ErrorKind::Io, "a ring command failed", e));
            }
            return Ok(());
        }
        let (header, payload) = self.arena.entry(i);
        let h = InHeader::parse(header);
        let mut op_in = [0u8; fuse_abi::URING_OP_IN_BYTES];
        op_in.copy_from_slice(&header[fuse_abi::URING_IN_OUT_BYTES..fuse_abi::URING_ENT_OFFSET]);
        let payload_len = fuse_abi::u32_at(header, fuse_abi::URING_PAYLOAD_SZ_OFFSET).unwrap_or(0) as usize;
        let (unique, outcome) = match h {
            Some(h) => (h.unique, disk.handle(&h, &op_in, payload, payload_len)),
            None => (0, crate::fuse::Outcome { reply: Reply::Error(libc::EIO), pending: None }),
        };
        let (error, len) = match outcome.reply {
            // Every fetched request must be committed to get its entry back; a request that
            // takes no reply (none should come this way) is ended with an error.
            Reply::None => (-libc::ENOSYS, 0),
            Reply::Error(e) => (-e, 0),
            Reply::Ok(len) => (0, len.min(MAX_WRITE_BYTES)),
        };
        fuse_abi::out_header(header, (fuse_abi::OUT_HEADER_BYTES + len) as u32, error, unique);
        header[fuse_abi::URING_PAYLOAD_SZ_OFFSET..fuse_abi::URING_PAYLOAD_SZ_OFFSET + 4]
            .copy_from_slice(&(len as u32).to_ne_bytes());
        self.unique[i] = unique;
        self.pending[i] = outcome.pending;
        if let Some(p) = outcome.pending {
            match self.waiter.arrive(&mut self.holds, i, &p) {
                Ok(()) => return Ok(()),
                // The port refused it (a bug): answered at once, and the queue ends with it.
                Err(e) => {
                    self.first_error.get_or_insert(e);
                }
            }
        }
        self.commit(disk, i)
    }

    /// Commits entry `i`'s reply (and fetches its next request); a held one's lateness is
    /// kept for the report. The command goes to the kernel with the next io_uring_enter.
    fn commit(&mut self, disk: &Disk, i: usize) -> Result<(), Error> {
        if let Some(p) = self.pending[i].take() {
            disk.shared().replied(&p, disk.shared().now_ns());
        }
        self.push(i, fuse_abi::URING_CMD_COMMIT_AND_FETCH, self.unique[i])
    }

    /// Submits what is queued and waits: with nothing held, for a completion; else through
    /// the port for the earliest held reply's instant, by the strategy the port decided for
    /// it, or a new request, whichever comes first ([`Waiter::wait_earliest`]: the thread
    /// sleeps in io_uring waits with a timeout, and its spins look at the completion queue).
    /// A reply found due is committed, then counted.
    fn wait(&mut self, disk: &Disk) -> Result<(), Error> {
        if self.holds.is_empty() {
            return entered(self.ring.submit_and_wait(1));
        }
        let mut ring = RingEvent { ring: &mut self.ring, failed: None };
        let end = self.waiter.wait_earliest(&mut self.holds, &mut ring);
        if let Some(e) = ring.failed {
            return Err(e);
        }
        if let Some(Earliest::Due(ready)) = end? {
            self.commit(disk, *ready.key())?;
            if let Err(e) = self.waiter.replied(ready) {
                self.first_error.get_or_insert(e);
            }
        }
        Ok(())
    }
}

/// The queue's ring as an [`EventWait`]: the event is a completion (a new request, or the
/// connection's end).
struct RingEvent<'r> {
    ring: &'r mut IoUring<squeue::Entry128, cqueue::Entry>,
    /// An io_uring_enter that failed in a look (the wait ended on it as on an event).
    failed: Option<Error>,
}

impl EventWait for RingEvent<'_> {
    fn sleep_until_or_event(&mut self, at_ns: u64) -> Result<(), Error> {
        // The host's clock, not the server's injected one: the timeout is io_uring's,
        // which the kernel counts on CLOCK_MONOTONIC (a mount's server is on that clock).
        let now = now_ns();
        if at_ns <= now {
            return entered(self.ring.submit());
        }
        let ts = Timespec::from(Duration::from_nanos(at_ns - now));
        entered(self.ring.submitter().submit_with_args(1, &SubmitArgs::new().timespec(&ts)))
    }

    fn event_seen(&mut self) -> bool {
        // A wait that spins never enters the kernel: a reply committed just before it is
        // handed over here, at the first look.
        if !self.ring.submission().is_empty() {
            if let Err(e) = entered(self.ring.submit()) {
                self.failed.get_or_insert(e);
                return true;
            }
        }
        // A new request's completion is posted by task work that interrupts the spin, so
        // looking at the completion queue sees it without a system call.
        self.failed.is_some() || !self.ring.completion().is_empty()
    }
}

/// An io_uring_enter's result: a timeout, a signal or a full completion queue is a wake-up,
/// not a failure.
fn entered(r: std::io::Result<usize>) -> Result<(), Error> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)) => Ok(()),
        Err(e) => Err(Error::with_source(ErrorKind::Io, "io_uring_enter", e)),
    }
}

/// `e` with its `len` field (byte 24 of struct io_uring_sqe) set: REGISTER carries its
/// iovec count there, which `UringCmd80` does not expose.
fn with_len(e: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // SAFETY: Entry128 is #[repr(C)]: a 64-byte struct io_uring_sqe (integers and unions of
    // integers, no padding, built from zeroed memory) then 64 command bytes; 128 bytes
    // (asserted at compile time above). Every byte is initialised and every bit pattern is a
    // valid value, so viewing it as bytes and back is sound.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute::<squeue::Entry128, [u8; 128]>(e) };
    raw[24..28].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above; only the `len` field changed.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_count_cpus() {
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-1"), Some(2));
        assert_eq!(parse_cpu_list("0-3,6,8-9"), Some(7));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn register_commands_carry_the_iovecs_and_the_queue() {
        let spec = smartcon_devemu::parse_spec("emu:sdcard").unwrap();
        let waiter = crate::fuse::Shared::new(&spec, 1 << 20, false, None).unwrap().waiter().unwrap();
        let q = match Queue::new(3, 7, 2, waiter) {
            Ok(q) => q,
            Err(e) => {
                eprintln!("skipping: {e}");
                return;
            }
        };
        let e = q.command(1, fuse_abi::URING_CMD_REGISTER, 0);
        // SAFETY: Entry128 is 128 plain bytes (see with_len).
        let raw: [u8; 128] = unsafe { std::mem::transmute::<squeue::Entry128, [u8; 128]>(e) };
        assert_eq!(raw[0], opcode::UringCmd80::CODE);
        assert_eq!(fuse_abi::u32_at(&raw, 4), Some(7));
        assert_eq!(fuse_abi::u64_at(&raw, 16), Some(q.arena.iovecs[1].as_ptr() as u64));
        assert_eq!(fuse_abi::u32_at(&raw, 24), Some(2));
        assert_eq!(fuse_abi::u64_at(&raw, 32), Some(1));
        // The command area starts at byte 48: flags, commit_id, qid.
        assert_eq!(fuse_abi::u64_at(&raw, 48 + 8), Some(0));
        assert_eq!(fuse_abi::u16_at(&raw, 48 + 16), Some(3));
        let c = q.command(0, fuse_abi::URING_CMD_COMMIT_AND_FETCH, 99);
        // SAFETY: as above.
        let raw: [u8; 128] = unsafe { std::mem::transmute::<squeue::Entry128, [u8; 128]>(c) };
        assert_eq!(fuse_abi::u64_at(&raw, 48 + 8), Some(99));
        assert_eq!(fuse_abi::u32_at(&raw, 24), Some(0));
        assert_eq!(q.arena.iovecs[1][1].iov_len, MAX_WRITE_BYTES);
    }

    #[test]
    fn the_arena_refuses_entries_the_kernel_holds() {
        let mut a = Arena::new(2).unwrap();
        a.give(0);
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            a.entry(0);
        }))
        .is_err());
        assert!(a.take(0));
        assert!(!a.take(0), "a second completion for one command");
        assert!(!a.take(5));
        assert_eq!(a.entry(1).1.len(), MAX_WRITE_BYTES);
        assert_eq!(a.in_flight, 0);
    }
}

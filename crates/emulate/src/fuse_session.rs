//! A FUSE mount of [`Disk`] and its /dev/fuse transport: `mount(2)` with a /dev/fuse
//! descriptor (root; no libfuse, no fusermount), threads that `read` requests and `writev`
//! replies, and, with [`Transport::Uring`], the FUSE-over-io_uring queues of
//! [`crate::fuse_uring`] started once INIT has negotiated them.
//!
//! With io_uring the /dev/fuse thread stays: it answers INIT (which must precede the queues'
//! registration), and the kernel keeps sending FORGET and INTERRUPT through /dev/fuse. Every
//! other request waits in the kernel until every per-CPU queue is registered, then goes
//! through the rings.
//!
//! Stopping: unmounting the FUSE file system ends the connection; the kernel then fails
//! /dev/fuse reads with ENODEV and completes every ring command with ENOTCONN, and the
//! threads return. If the unmount cannot happen (a lazy unmount while something still holds
//! the file), the connection is aborted through fusectl. Threads that still have not
//! returned are left running (reported): their buffers stay alive with them.
//!
//! Non-goals: unprivileged mounts (fusermount), several mounts per session, clone_fd.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use smartcon_engine::error::{Error, ErrorKind};
use smartcon_util::loopmount::{self, Unmounted};

use crate::fuse::{Disk, Reply, MAX_WRITE_BYTES};
use crate::fuse_abi::{self, InHeader};
use crate::fuse_uring;

/// How requests travel between the kernel and the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// read(2)/writev(2) on /dev/fuse.
    Dev,
    /// FUSE over io_uring (Linux 6.14+, fuse.enable_uring).
    Uring,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Dev => "dev",
            Transport::Uring => "uring",
        }
    }

    /// io_uring where this kernel has it and we may use it, else /dev/fuse.
    pub fn default_for_host() -> Transport {
        if fuse_uring::unavailable_reason().is_none() {
            Transport::Uring
        } else {
            Transport::Dev
        }
    }
}

/// One read buffer: the largest write plus its headers, with room to spare.
const DEV_BUF_BYTES: usize = MAX_WRITE_BYTES + 64 * 1024;
/// How long INIT may take after the mount.
const INIT_WAIT: Duration = Duration::from_secs(10);
/// How long threads may take to return once the connection ends.
const JOIN_WAIT: Duration = Duration::from_secs(10);

/// A mounted, served FUSE file system.
pub struct Session {
    mount_point: PathBuf,
    mounted: bool,
    dev_threads: Vec<JoinHandle<()>>,
    queues: Option<fuse_uring::Queues>,
    transport: Transport,
}

fn setup_err(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Setup, what.to_string())
}

fn cstring(p: &Path) -> Result<CString, Error> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| Error::new(ErrorKind::Usage, "a path contains a NUL byte"))
}

impl Session {
    /// Mounts `disk` at `mount_point` (an empty directory) as `fsname`, serves it with
    /// `dev_threads` /dev/fuse threads (one with io_uring) and, with io_uring, `depth`
    /// entries per CPU queue. With io_uring, fuse.enable_uring must be Y across this call:
    /// the kernel offers io_uring in the INIT that mount(2) sends, and takes it in the reply,
    /// only while it is set.
    pub fn mount(
        disk: Arc<Disk>,
        mount_point: &Path,
        fsname: &str,
        transport: Transport,
        dev_threads: usize,
        depth: usize,
    ) -> Result<Session, Error> {
        // SAFETY: a NUL-terminated constant path; the result is checked.
        let raw = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(setup_err(format!("open /dev/fuse: {} (modprobe fuse)", std::io::Error::last_os_error())));
        }
        // SAFETY: `raw` is a descriptor we just opened and own nowhere else.
        let fd = Arc::new(unsafe { OwnedFd::from_raw_fd(raw) });
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let data = CString::new(format!("fd={raw},rootmode=40000,user_id={uid},group_id={gid}")).unwrap_or_default();
        let (source, target) = (CString::new(fsname).unwrap_or_default(), cstring(mount_point)?);
        let flags = libc::MS_NODEV | libc::MS_NOSUID | libc::MS_NOATIME;
        // SAFETY: every pointer is a valid NUL-terminated string alive across the call.
        let rc = unsafe {
            libc::mount(source.as_ptr(), target.as_ptr(), c"fuse.smartcon".as_ptr(), flags, data.as_ptr().cast())
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(setup_err(format!("FUSE mount on {}: {e}", mount_point.display())));
        }
        let mut session = Session {
            mount_point: mount_point.to_path_buf(),
            mounted: true,
            dev_threads: Vec::new(),
            queues: None,
            transport,
        };
        // From here on, an error drops `session`, which unmounts and joins.
        let n = if transport == Transport::Uring { 1 } else { dev_threads.max(1) };
        for i in 0..n {
            let (fd, disk) = (fd.clone(), disk.clone());
            let t = std::thread::Builder::new()
                .name(format!("fuse-dev-{i}"))
                .spawn(move || serve_dev(&fd, &disk))
                .map_err(|e| setup_err(format!("cannot start a FUSE thread: {e}")))?;
            session.dev_threads.push(t);
        }
        let start = Instant::now();
        let uring = loop {
            if let Some(uring) = disk.initialized() {
                break uring;
            }
            if start.elapsed() > INIT_WAIT || session.dev_threads.iter().all(|t| t.is_finished()) {
                return Err(setup_err("the kernel's FUSE INIT did not complete"));
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        if transport == Transport::Uring {
            if !uring {
                return Err(setup_err(
                    "the kernel did not offer FUSE over io_uring in INIT (fuse.enable_uring=N or a kernel before 6.14); \
                     use --transport dev",
                ));
            }
            session.queues = Some(fuse_uring::Queues::start(fd, disk, depth)?);
        }
        Ok(session)
    }

    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// False once the connection has ended (every /dev/fuse thread returned) or a ring queue
    /// has stopped serving (its CPU's requests would wait forever).
    pub fn is_alive(&self) -> bool {
        !self.dev_threads.iter().all(|t| t.is_finished()) && self.queues.as_ref().is_none_or(|q| !q.any_finished())
    }

    /// Unmounts, ends the connection and joins the threads. Returns what went wrong.
    pub fn stop(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.mounted {
            self.mounted = false;
            problems.extend(unmount_fuse(&self.mount_point));
        }
        let deadline = Instant::now() + JOIN_WAIT;
        let all_done = |s: &Session| {
            s.dev_threads.iter().all(|t| t.is_finished()) && s.queues.as_ref().is_none_or(|q| q.finished())
        };
        while !all_done(self) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !all_done(self) {
            problems.push(format!(
                "FUSE server threads of {} had not returned after {} s; left running",
                self.mount_point.display(),
                JOIN_WAIT.as_secs()
            ));
        }
        for t in std::mem::take(&mut self.dev_threads) {
            if t.is_finished() && t.join().is_err() {
                problems.push("a FUSE /dev thread panicked".into());
            }
        }
        if let Some(q) = self.queues.take() {
            problems.extend(q.join_finished());
        }
        problems
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for p in self.stop() {
            eprintln!("emulate mount: FUSE: {p}");
        }
    }
}

/// Unmounts a FUSE mount: normally, else (busy) lazily and then by aborting its connection
/// (`smartcon_util::loopmount::unmount`). Returns what went wrong.
fn unmount_fuse(mount_point: &Path) -> Option<String> {
    let conn = connection_id(mount_point);
    match loopmount::unmount(mount_point, 1) {
        Ok(Unmounted::Done) => None,
        Ok(Unmounted::Lazily) => {
            if let Some(id) = conn {
                // Something still holds the file: end the connection so the server can stop.
                let _ = std::fs::write(format!("/sys/fs/fuse/connections/{id}/abort"), "1");
            }
            Some(format!("umount {}: busy; detached lazily and aborted", mount_point.display()))
        }
        Err(e) => Some(e.to_string()),
    }
}

/// The fusectl connection number of the FUSE mount at `p` (its device number).
fn connection_id(p: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(p).ok()?.dev();
    Some(libc::minor(dev) as u64 | (u64::from(libc::major(dev)) << 20))
}

/// One /dev/fuse thread: read a request, handle it, hold the reply until due, write it.
fn serve_dev(fd: &OwnedFd, disk: &Disk) {
    disk.prepare_thread();
    // Made on this thread, after it took its priority: the reference wait measures this
    // thread's wake-ups. The mount made one before it started (a bad option fails there).
    let mut waiter = match disk.shared().waiter() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("emulate mount: FUSE thread: {e}");
            return;
        }
    };
    let mut buf = vec![0u8; DEV_BUF_BYTES];
    loop {
        // SAFETY: `buf` is a live, writable allocation of `buf.len()` bytes for the call.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                // Interrupted, or a request withdrawn before we read it: read again.
                Some(libc::EINTR) | Some(libc::ENOENT) | Some(libc::EAGAIN) => continue,
                // ENODEV: unmounted, the connection is over. Anything else: stop serving.
                _ => return,
            }
        }
        let Some(h) = InHeader::parse(&buf[..n as usize]) else { continue };
        let body_len = (h.len as usize).min(n as usize).saturating_sub(fuse_abi::IN_HEADER_BYTES);
        let op_len = fuse_abi::op_in_bytes(h.opcode).min(body_len);
        let mut op_in = [0u8; fuse_abi::URING_OP_IN_BYTES];
        let start = fuse_abi::IN_HEADER_BYTES;
        op_in[..op_len].copy_from_slice(&buf[start..start + op_len]);
        // The payload, then the reply's out-arguments over it: the rest of the buffer (a read
        // reply is larger than its request).
        let io = &mut buf[start + op_len..];
        let outcome = disk.handle(&h, &op_in[..op_len], io, body_len - op_len);
        let (error, len) = match outcome.reply {
            Reply::None => continue,
            Reply::Error(e) => (-e, 0),
            Reply::Ok(len) => (0, len.min(io.len())),
        };
        let mut header = [0u8; fuse_abi::OUT_HEADER_BYTES];
        fuse_abi::out_header(&mut header, (fuse_abi::OUT_HEADER_BYTES + len) as u32, error, h.unique);
        let iov = [
            libc::iovec { iov_base: header.as_mut_ptr().cast(), iov_len: header.len() },
            libc::iovec { iov_base: io.as_mut_ptr().cast(), iov_len: len },
        ];
        let send = || {
            let done_ns = disk.shared().now_ns();
            // SAFETY: both iovecs point at live buffers of the given lengths (len was clamped
            // to io.len()) for the duration of the call.
            (done_ns, unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), 2) })
        };
        let (done_ns, w) = match &outcome.pending {
            // Held through the thread's SmartPort, by the mount's strategy; the reply goes out
            // as soon as the wait ends, and the port counts the request after it. A wait
            // cannot fail on this device (its status is the clock); if the port ever says
            // otherwise, the reply has gone out at once and the error is shown.
            Some(p) => {
                let (sent, port) = waiter.hold(p, send);
                if let Err(e) = port {
                    eprintln!("emulate mount: FUSE thread: holding a reply: {e}");
                }
                sent
            }
            None => send(),
        };
        if let Some(p) = &outcome.pending {
            disk.shared().replied(p, done_ns);
        }
        if h.opcode == fuse_abi::INIT && w >= 0 {
            disk.set_initialized();
        }
        // A failed write (ENOENT: the request was interrupted meanwhile) loses one reply
        // that nobody waits for any more; the next read reports a dead connection.
    }
}

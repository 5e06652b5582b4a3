//! The FUSE server of `emulate mount`: one file (`disk`) whose reads and writes are served
//! by an emulated device, with its timing, from a RAM store.
//!
//! Each read or write is placed on the device model when the server receives it
//! ([`FcfsDevice::schedule`]: channels, FCFS, one stream for sequential detection); the data
//! moves at once, and the reply waits until the model's completion minus the path's
//! measured overhead (FUSE + loop: what a request costs with a zero-latency device), so that
//! the program above the loop device sees the model's latency rather than the model's plus
//! the path's. The wait sleeps on a kernel timer until [`SPIN_NS`] before the instant, then
//! polls the clock (a timer alone wakes late by tens of microseconds on a loaded host); the
//! serving threads run under SCHED_FIFO when allowed, as the seed's emulator ran its
//! simulation thread at top priority.
//!
//! Each request's lateness (reply instant minus the instant it was due) is kept for the
//! accuracy report. Until [`Shared::set_modelled`] is called the device is a zero-latency
//! one: setup (calibration, mkfs, mount) runs at memory speed and is not in the report.
//!
//! Non-goals: more than one file, a directory tree, FUSE over io_uring (fuser 0.18 knows the
//! init flag but has no io_uring transport).

use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};
use smartcon_devemu::{EmuSpec, FcfsDevice, Op, RamStore};
use smartcon_engine::clock::{now_ns, sleep_until_ns, tighten_timer_slack};
use smartcon_engine::error::{Error, ErrorKind};

/// The file's name in the FUSE mount.
pub const FILE_NAME: &str = "disk";
const FILE_INO: INodeNo = INodeNo(2);
/// How long before a reply's instant the timer sleep ends and polling starts.
pub const SPIN_NS: u64 = 150_000;
const TTL: Duration = Duration::from_secs(3600);

/// One served request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub write: bool,
    /// The model's latency: completion minus arrival at the server.
    pub model_ns: u64,
    /// Reply instant minus the instant the reply was due (arrival + model - overhead,
    /// never before arrival). Positive: late.
    pub lateness_ns: i64,
}

/// State the FUSE threads and the mount's controller share.
pub struct Shared {
    store: RamStore,
    device: Mutex<FcfsDevice>,
    modelled: AtomicBool,
    overhead_ns: [AtomicU64; 2],
    served: Mutex<Vec<Served>>,
    size_bytes: u64,
    fifo: bool,
}

impl Shared {
    pub fn new(spec: &EmuSpec, size_bytes: u64, fifo: bool) -> Result<Arc<Shared>, Error> {
        let mut spec = spec.clone();
        spec.capacity_bytes = size_bytes;
        let device = FcfsDevice::new(spec).map_err(|e| Error::new(ErrorKind::Usage, e))?;
        let store = RamStore::new(size_bytes as usize)
            .map_err(|e| Error::new(ErrorKind::Setup, format!("cannot map the {size_bytes}-byte RAM store: {e}")))?;
        Ok(Arc::new(Shared {
            store,
            device: Mutex::new(device),
            modelled: AtomicBool::new(false),
            overhead_ns: [AtomicU64::new(0), AtomicU64::new(0)],
            served: Mutex::new(Vec::new()),
            size_bytes,
            fifo,
        }))
    }

    /// From now on requests take the model's time, less `overhead_ns` [read, write].
    pub fn set_modelled(&self, overhead_ns: [u64; 2]) {
        self.overhead_ns[0].store(overhead_ns[0], Ordering::Relaxed);
        self.overhead_ns[1].store(overhead_ns[1], Ordering::Relaxed);
        self.served.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.modelled.store(true, Ordering::SeqCst);
    }

    /// Back to a zero-latency device (teardown should not wait on the model).
    pub fn set_unmodelled(&self) {
        self.modelled.store(false, Ordering::SeqCst);
    }

    /// The requests served while modelled.
    pub fn served(&self) -> Vec<Served> {
        self.served.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Serves one request: moves the data, then waits for the model's instant.
    fn serve(&self, op: Op, offset: u64, bytes: u64) {
        let arrival_ns = now_ns();
        if !self.modelled.load(Ordering::Relaxed) || bytes == 0 {
            return;
        }
        let sched = self.device.lock().unwrap_or_else(|e| e.into_inner()).schedule(op, offset, bytes, arrival_ns);
        let model_ns = sched.complete_ns - arrival_ns;
        let overhead = self.overhead_ns[usize::from(op == Op::Write)].load(Ordering::Relaxed);
        let due_ns = sched.complete_ns.saturating_sub(overhead).max(arrival_ns);
        wait_until(due_ns);
        let done_ns = now_ns();
        // What the program sees: the path's overhead plus the server's time, against the model.
        let lateness_ns = (done_ns - arrival_ns + overhead) as i64 - model_ns as i64;
        self.served.lock().unwrap_or_else(|e| e.into_inner()).push(Served {
            write: op == Op::Write,
            model_ns,
            lateness_ns,
        });
    }
}

thread_local! {
    static PREPARED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Once per serving thread: a 1 ns timer slack, and SCHED_FIFO priority 1 when asked.
fn prepare_thread(fifo: bool) {
    if PREPARED.with(|p| p.replace(true)) {
        return;
    }
    tighten_timer_slack();
    if fifo {
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param. A failure
        // (no CAP_SYS_NICE) leaves the thread as it was, which only costs accuracy.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    }
}

/// Sleeps until shortly before `at_ns`, then polls the clock until it.
fn wait_until(at_ns: u64) {
    if at_ns > now_ns() + SPIN_NS {
        sleep_until_ns(at_ns - SPIN_NS);
    }
    while now_ns() < at_ns {
        std::hint::spin_loop();
    }
}

/// The fuser file system: a root directory holding [`FILE_NAME`].
pub struct DiskFs {
    shared: Arc<Shared>,
    uid: u32,
    gid: u32,
}

impl DiskFs {
    pub fn new(shared: Arc<Shared>) -> DiskFs {
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        DiskFs { shared, uid, gid }
    }

    fn attr(&self, ino: INodeNo) -> FileAttr {
        let file = ino == FILE_INO;
        FileAttr {
            ino,
            size: if file { self.shared.size_bytes } else { 0 },
            blocks: if file { self.shared.size_bytes / 512 } else { 0 },
            atime: SystemTime::UNIX_EPOCH,
            mtime: SystemTime::UNIX_EPOCH,
            ctime: SystemTime::UNIX_EPOCH,
            crtime: SystemTime::UNIX_EPOCH,
            kind: if file { FileType::RegularFile } else { FileType::Directory },
            perm: if file { 0o600 } else { 0o755 },
            nlink: if file { 1 } else { 2 },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// The part of `[offset, offset + len)` inside the file.
    fn clamp(&self, offset: u64, len: u64) -> u64 {
        len.min(self.shared.size_bytes.saturating_sub(offset))
    }
}

impl Filesystem for DiskFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent == INodeNo::ROOT && name == FILE_NAME {
            reply.entry(&TTL, &self.attr(FILE_INO), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino == INodeNo::ROOT || ino == FILE_INO {
            reply.attr(&TTL, &self.attr(ino));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // The device has a fixed size: only a no-op truncate is accepted.
        if size.is_some_and(|s| s != self.shared.size_bytes) {
            reply.error(Errno::EPERM);
        } else {
            reply.attr(&TTL, &self.attr(ino));
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino != FILE_INO {
            return reply.error(Errno::EISDIR);
        }
        // Direct I/O: every request reaches the server (no page cache between the loop
        // device and the model).
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        prepare_thread(self.shared.fifo);
        let n = self.clamp(offset, u64::from(size));
        let mut buf = vec![0u8; n as usize];
        self.shared.store.read(offset.min(self.shared.size_bytes), &mut buf);
        self.shared.serve(Op::Read, offset, n);
        reply.data(&buf);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        prepare_thread(self.shared.fifo);
        let n = self.clamp(offset, data.len() as u64);
        if n < data.len() as u64 {
            return reply.error(Errno::ENOSPC);
        }
        self.shared.store.write(offset, data);
        self.shared.serve(Op::Write, offset, n);
        reply.written(n as u32);
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        // Writes are durable in the store when they are acknowledged.
        reply.ok();
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (INodeNo::ROOT, FileType::Directory, "."),
            (INodeNo::ROOT, FileType::Directory, ".."),
            (FILE_INO, FileType::RegularFile, FILE_NAME),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(*ino, (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

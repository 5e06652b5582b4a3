//! Regular files and block devices, through io_uring.
//!
//! Files open with O_DIRECT so every I/O reaches the device; where the file system refuses
//! O_DIRECT (tmpfs, some FUSE) the target falls back to buffered I/O and says so, because
//! its numbers then measure the page cache.
//!
//! Safety contract: a file or block device smartcon did not create holds the user's data.
//! It is opened for writing (a write job, `--verify`'s prefill) only when the user passed
//! `--destructive` ([`super::OpenOptions::destructive`]) or smartcon created it (temporary
//! files, its own loop and zram devices: [`super::OpenOptions::created_by_tool`]);
//! otherwise the open is refused before anything is written. Reads never need consent.
//!
//! A temporary file's fill reads the process-wide stop flag between 1 MiB chunks, so
//! Ctrl-C during the fill of `tmp:8g` removes the file and returns at once.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use smartcon_util::units::format_size;

use std::sync::Arc;

use super::{
    device_stat_path, io_error, AlignedBuf, DeviceQueue, InFlight, IoBuf, Port, PortWait, Target, WaitOutcome,
};
use crate::clock::now_ns;
use crate::decision::Strategy;
use crate::error::{Error, ErrorKind};
use crate::ring::{Ring, RingWait};
use crate::wait::Pending;

pub struct FileTarget {
    path: PathBuf,
    label: String,
    fd: libc::c_int,
    capacity_bytes: u64,
    block_bytes: u64,
    device_id: String,
    warnings: Vec<String>,
    inflight: Arc<InFlight>,
    /// The block device's stat file (the kernel's count of its queue), if found.
    stat_path: Option<PathBuf>,
    /// Opened with O_DIRECT (false where the file system refused it).
    direct: bool,
    /// Removed on drop (temporary files smartcon created).
    remove_on_drop: bool,
    /// A temporary file's record and owner mark (`smartcon cleanup` removes the file after
    /// kill -9; a second Ctrl-C unlinks it); dropped after the file is removed.
    _scratch: Option<smartcon_util::paths::ScratchRecord>,
}

fn sysfs_block_name(major: u32, minor: u32) -> Option<String> {
    let uevent = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent")).ok()?;
    uevent.lines().find_map(|l| l.strip_prefix("DEVNAME=")).map(str::to_string)
}

fn sysfs_logical_block(major: u32, minor: u32) -> Option<u64> {
    let base = format!("/sys/dev/block/{major}:{minor}");
    for p in [format!("{base}/queue/logical_block_size"), format!("{base}/../queue/logical_block_size")] {
        if let Some(v) = std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse().ok()) {
            return Some(v);
        }
    }
    None
}

fn dev_major_minor(dev: u64) -> (u32, u32) {
    (libc::major(dev), libc::minor(dev))
}

fn open_fd(path: &Path, flags: libc::c_int) -> std::io::Result<libc::c_int> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid NUL-terminated path; the result is checked.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o600) };
    if fd < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

/// What an open descriptor is on: the device (as profiles name it), its logical block
/// size and the capacity, found the same way for a target smartcon opens and for a
/// descriptor an application hands to a SmartPort.
pub(crate) struct FdInfo {
    pub device_id: String,
    pub block_bytes: u64,
    pub capacity_bytes: u64,
    pub is_block: bool,
    /// The descriptor's status flags say O_DIRECT.
    pub direct: bool,
    /// The stat file of the block device it is on (see [`device_stat_path`]).
    pub stat_path: Option<PathBuf>,
}

/// BLKGETSIZE64 from linux/fs.h, `_IOR(0x12, 114, size_t)`: the device's size in bytes.
/// The libc crate names BLKSSZGET (used below) but not this one; the number is the
/// asm-generic encoding (x86-64, arm64, riscv64), and the assertion after it stops a build
/// for an architecture with another encoding (where libc's BLKSSZGET differs too), rather
/// than letting it send a wrong request.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
const _: () = assert!(libc::BLKSSZGET == 0x1268, "BLKGETSIZE64 is the asm-generic _IOR encoding");

/// Describes `fd`: a regular file (the device of its file system) or a block device.
pub(crate) fn describe_fd(fd: libc::c_int) -> Result<FdInfo, Error> {
    // SAFETY: an all-zero stat is valid; fstat fills it or fails, which is checked.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out pointer; a bad fd makes fstat fail with EBADF.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::os(ErrorKind::Target, e.raw_os_error().unwrap_or(libc::EBADF), format!("fd {fd}: {e}")));
    }
    // SAFETY: F_GETFL takes no argument; the result is checked.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::os(ErrorKind::Target, e.raw_os_error().unwrap_or(libc::EBADF), format!("fd {fd}: {e}")));
    }
    let kind = st.st_mode & libc::S_IFMT;
    let is_block = kind == libc::S_IFBLK;
    if !is_block && kind != libc::S_IFREG {
        return Err(Error::os(
            ErrorKind::Target,
            libc::ESPIPE,
            format!("fd {fd} is neither a regular file nor a block device (a pipe, socket or directory)"),
        ));
    }
    let (capacity_bytes, block_bytes, dev) = if is_block {
        let mut size: u64 = 0;
        let mut ssz: libc::c_int = 0;
        // SAFETY: fd is an open block device (fstat above); BLKGETSIZE64 writes one u64
        // into `size` and BLKSSZGET one int into `ssz`, both valid locals of those types.
        let ok = unsafe {
            libc::ioctl(fd, BLKGETSIZE64 as _, &mut size) == 0 && libc::ioctl(fd, libc::BLKSSZGET as _, &mut ssz) == 0
        };
        if !ok {
            let e = std::io::Error::last_os_error();
            return Err(Error::os(ErrorKind::Target, e.raw_os_error().unwrap_or(libc::EIO), format!("fd {fd}: {e}")));
        }
        (size, ssz.max(512) as u64, st.st_rdev)
    } else {
        let (ma, mi) = dev_major_minor(st.st_dev);
        (st.st_size as u64, sysfs_logical_block(ma, mi).unwrap_or(512), st.st_dev)
    };
    let (ma, mi) = dev_major_minor(dev);
    let device_id = format!("blk:{}", sysfs_block_name(ma, mi).unwrap_or_else(|| format!("{ma}-{mi}")));
    Ok(FdInfo {
        device_id,
        block_bytes,
        capacity_bytes,
        is_block,
        direct: flags & libc::O_DIRECT != 0,
        stat_path: device_stat_path(ma, mi),
    })
}

impl FileTarget {
    /// Opens an existing file or block device.
    pub fn open(path: &Path, options: super::OpenOptions) -> Result<FileTarget, Error> {
        let meta = std::fs::metadata(path).map_err(|e| Error::io(ErrorKind::Target, path, e))?;
        let ft = meta.file_type();
        let is_block = ft.is_block_device();
        if meta.is_dir() {
            return Err(Error::new(
                ErrorKind::Target,
                format!("{} is a directory; give a file or a block device", path.display()),
            ));
        }
        if !is_block && !ft.is_file() {
            return Err(Error::new(
                ErrorKind::Target,
                format!("{} is neither a regular file nor a block device", path.display()),
            ));
        }
        if is_block && options.write && !options.destructive && !options.created_by_tool {
            return Err(Error::new(
                ErrorKind::Refused,
                format!("refusing to write to block device {}: it would destroy its data; pass --destructive if you mean it", path.display()),
            ));
        }
        if !is_block && options.write && !options.destructive && !options.created_by_tool {
            return Err(Error::new(
                ErrorKind::Refused,
                format!(
                    "refusing to write to {}: smartcon did not create this file, so it holds your data (a write job, or --verify's pattern written before a read job, would overwrite it); pass --destructive if you mean it, or use tmp:SIZE for a temporary file",
                    path.display()
                ),
            ));
        }
        let access = if options.write { libc::O_RDWR } else { libc::O_RDONLY };
        let mut warnings = Vec::new();
        let fd = match open_fd(path, access | libc::O_DIRECT) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && !is_block => {
                warnings.push(format!(
                    "{}: the file system refuses O_DIRECT; using buffered I/O, so results measure the page cache, not the device",
                    path.display()
                ));
                open_fd(path, access).map_err(|e| Error::io(ErrorKind::Target, path, e))?
            }
            Err(e) => return Err(Error::io(ErrorKind::Target, path, e)),
        };
        let info = describe_fd(fd).map_err(|e| {
            // SAFETY: fd is ours and not used after this.
            unsafe { libc::close(fd) };
            Error { message: format!("{}: {}", path.display(), e.message), ..e }
        })?;
        let direct = info.direct;
        Ok(FileTarget {
            path: path.to_path_buf(),
            label: path.display().to_string(),
            fd,
            capacity_bytes: info.capacity_bytes,
            block_bytes: info.block_bytes,
            device_id: info.device_id,
            warnings,
            inflight: Arc::new(InFlight::default()),
            stat_path: info.stat_path,
            direct,
            remove_on_drop: false,
            _scratch: None,
        })
    }

    /// Creates a temporary file of `size_bytes` in `dir` (default: the system temp dir),
    /// fills it with the verification pattern so reads reach the device rather than holes,
    /// and removes it when the target drops (also on error and Ctrl-C, which end runs
    /// through the normal return path).
    pub fn temporary(size_bytes: u64, dir: Option<&Path>) -> Result<FileTarget, Error> {
        let dir = dir.map(Path::to_path_buf).unwrap_or_else(std::env::temp_dir);
        if !dir.is_dir() {
            return Err(Error::new(
                ErrorKind::Target,
                format!("{} is not a directory for the temporary file", dir.display()),
            ));
        }
        let path = dir.join(format!("smartcon-{}-{}.tmp", std::process::id(), crate::clock::now_ns() % 1_000_000_007));
        // Recorded (with its owner mark) before it exists: `tmp:8g` must not outlive a kill -9.
        let scratch = smartcon_util::paths::record_scratch(&[&path]);
        let fd = open_fd(&path, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL)
            .map_err(|e| Error::io(ErrorKind::Target, &path, e))?;
        // From here on the file exists: remove it on any failure.
        let cleanup = |e: Error| {
            // SAFETY: fd is ours.
            unsafe { libc::close(fd) };
            let _ = std::fs::remove_file(&path);
            e
        };
        let chunk = 1usize << 20;
        let mut buf = AlignedBuf::new(chunk);
        let mut off = 0u64;
        while off < size_bytes {
            if crate::stop::requested() {
                return Err(cleanup(crate::stop::interrupted(&format!("filling {}", path.display()))));
            }
            let len = chunk.min((size_bytes - off) as usize);
            // The same units as every read checks, whatever its size.
            crate::verify::fill(&mut buf.as_mut_slice()[..len], off, crate::verify::UNIT_BYTES, crate::job::FILL_SEED);
            // SAFETY: buf holds len bytes.
            let n =
                unsafe { libc::pwrite(fd, buf.as_slice().as_ptr() as *const libc::c_void, len, off as libc::off_t) };
            if n != len as isize {
                let e = std::io::Error::last_os_error();
                return Err(cleanup(Error::new(
                    ErrorKind::Target,
                    format!("cannot fill {} ({} needed): {e}", path.display(), format_size(size_bytes)),
                )));
            }
            off += len as u64;
        }
        // SAFETY: fd is ours; then drop the file's pages so reads go to the device.
        unsafe {
            libc::fsync(fd);
            libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED);
            libc::close(fd);
        }
        let options = super::OpenOptions { write: true, created_by_tool: true, ..Default::default() };
        let mut t = FileTarget::open(&path, options).inspect_err(|_e| {
            let _ = std::fs::remove_file(&path);
        })?;
        t.remove_on_drop = true;
        t._scratch = Some(scratch);
        t.label = format!("tmp:{}@{}", format_size(size_bytes), dir.display());
        Ok(t)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for FileTarget {
    fn drop(&mut self) {
        // SAFETY: fd is ours and no port outlives the target (ports borrow it).
        unsafe { libc::close(self.fd) };
        if self.remove_on_drop {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Target for FileTarget {
    fn label(&self) -> &str {
        &self.label
    }

    fn device_id(&self) -> String {
        self.device_id.clone()
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    fn open_port(&self) -> Result<Box<dyn Port + Send + '_>, Error> {
        Ok(Box::new(FilePort::new(self.fd)?))
    }

    fn direct(&self) -> bool {
        self.direct
    }

    fn inflight(&self) -> &InFlight {
        &self.inflight
    }

    fn device_queue(&self) -> Option<DeviceQueue> {
        Some(DeviceQueue { inflight: self.inflight.clone(), stat_path: self.stat_path.clone()? })
    }

    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.fd)
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    fn poke(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        // A separate buffered descriptor, then drop the page so O_DIRECT reads see it.
        let fd = open_fd(&self.path, libc::O_WRONLY).map_err(|e| Error::io(ErrorKind::Target, &self.path, e))?;
        // SAFETY: data is valid for its length; fd is ours and closed below.
        let n = unsafe { libc::pwrite(fd, data.as_ptr() as *const libc::c_void, data.len(), offset as libc::off_t) };
        // SAFETY: fd was opened above and is closed exactly once, here; fsync and fadvise
        // take no pointers.
        unsafe {
            libc::fsync(fd);
            libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED);
            libc::close(fd);
        }
        if n != data.len() as isize {
            return Err(Error::new(ErrorKind::Io, "poke failed"));
        }
        Ok(())
    }
}

/// A port on a descriptor: the target's, or one an application owns (a SmartPort). It
/// never closes the descriptor.
pub(crate) struct FilePort {
    fd: libc::c_int,
    ring: Ring,
}

impl FilePort {
    pub(crate) fn new(fd: libc::c_int) -> Result<FilePort, Error> {
        Ok(FilePort { fd, ring: Ring::new()? })
    }

    /// Points the port at another descriptor (the ring and nothing else stays).
    pub(crate) fn set_fd(&mut self, fd: libc::c_int) {
        self.fd = fd;
    }
}

/// A plain positional syscall: the result, or the errno it set.
fn sync_transfer(fd: libc::c_int, buf: IoBuf<'_>, offset: u64) -> Result<usize, i32> {
    let Ok(off) = libc::off_t::try_from(offset) else { return Err(libc::EINVAL) };
    // SAFETY: the buffer is valid for its length for the duration of the call.
    let res = unsafe {
        match buf {
            IoBuf::Read(b) => libc::pread(fd, b.as_mut_ptr() as *mut libc::c_void, b.len(), off),
            IoBuf::Write(b) => libc::pwrite(fd, b.as_ptr() as *const libc::c_void, b.len(), off),
        }
    };
    if res < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
    } else {
        Ok(res as usize)
    }
}

/// A plain read(2)/write(2) at the descriptor's file offset, which the kernel uses and
/// advances: the result, or the errno it set.
fn sync_transfer_current(fd: libc::c_int, buf: IoBuf<'_>) -> Result<usize, i32> {
    // SAFETY: the buffer is valid for its length for the duration of the call.
    let res = unsafe {
        match buf {
            IoBuf::Read(b) => libc::read(fd, b.as_mut_ptr() as *mut libc::c_void, b.len()),
            IoBuf::Write(b) => libc::write(fd, b.as_ptr() as *const libc::c_void, b.len()),
        }
    };
    if res < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
    } else {
        Ok(res as usize)
    }
}

impl FilePort {
    /// One I/O at the descriptor's file offset, which it advances by the bytes moved, as
    /// read(2)/write(2) do. The caller serialises the descriptor's offset among its threads
    /// (no other thread of the process moves it meanwhile).
    ///
    /// - `sync`: read(2)/write(2) themselves: the kernel takes, checks (O_DIRECT alignment,
    ///   EINVAL before any I/O) and advances the offset; no lseek.
    /// - a ring wait: lseek(SEEK_CUR), the positional I/O at that offset, lseek(SEEK_SET)
    ///   past what moved. Not IORING_OP_READ/WRITE at offset -1: the kernel (io_uring/rw.c,
    ///   `kiocb_done`) copies the advanced position back to the file only when the I/O
    ///   completed inline; an O_DIRECT request that completes asynchronously
    ///   (-EIOCBQUEUED: a disk, a loop device, anything but a device that completes in
    ///   submit_bio such as zram) leaves the offset where it was (seen on Linux 6.18: ext4
    ///   on virtio, offset 0 after a 4 KiB read; ext2 on zram, 4096).
    ///
    /// A misaligned O_DIRECT offset is refused by the kernel with EINVAL before any I/O in
    /// both forms, as read(2) refuses it; the offset is then unchanged.
    pub(crate) fn transfer_current(&mut self, buf: IoBuf<'_>, wait: PortWait<'_>) -> Result<WaitOutcome, Error> {
        let op = buf.op();
        if let PortWait::Sync = wait {
            let bytes = sync_transfer_current(self.fd, buf).map_err(|errno| io_error_current(errno, op))?;
            return Ok(WaitOutcome { bytes, ..Default::default() });
        }
        // SAFETY: lseek has no memory preconditions; a bad descriptor fails with EBADF.
        let off = unsafe { libc::lseek(self.fd, 0, libc::SEEK_CUR) };
        if off < 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::ESPIPE);
            return Err(io_error_current(errno, op));
        }
        let outcome = self.transfer(buf, off as u64, wait)?;
        if outcome.bytes > 0 {
            // To an offset past a valid one on a regular file or block device: it cannot
            // fail (lseek refuses only negative results and unseekable descriptors).
            // SAFETY: as above.
            unsafe { libc::lseek(self.fd, off + outcome.bytes as libc::off_t, libc::SEEK_SET) };
        }
        Ok(outcome)
    }
}

fn io_error_current(errno: i32, op: smartcon_util::Op) -> Error {
    let e = std::io::Error::from_raw_os_error(errno);
    Error::os(ErrorKind::Io, errno, format!("{} at the file offset: {e}", op.name()))
}

impl Port for FilePort {
    fn transfer(&mut self, buf: IoBuf<'_>, offset: u64, wait: PortWait<'_>) -> Result<WaitOutcome, Error> {
        let op = buf.op();
        let ring_wait = match wait {
            PortWait::Sync => {
                let bytes = sync_transfer(self.fd, buf, offset).map_err(|errno| io_error(errno, op, offset))?;
                return Ok(WaitOutcome { bytes, ..Default::default() });
            }
            // A file's completion instant is the kernel's, not a model's: the reference
            // wait of a real device is its interrupt.
            PortWait::Block | PortWait::Reference { .. } => RingWait::Block,
            PortWait::Spin { budget_ns } => RingWait::Spin { budget_ns },
            PortWait::Poll { policy, ahead } => {
                let pending = Pending { op, bytes: buf.len() as u64, ahead, submit_ns: now_ns() };
                RingWait::Poll { policy, pending }
            }
        };
        let done = match buf {
            IoBuf::Read(b) => self.ring.read_at(self.fd, b, offset, ring_wait)?,
            IoBuf::Write(b) => self.ring.write_at(self.fd, b, offset, ring_wait)?,
        };
        let bytes = done.bytes().map_err(|errno| io_error(errno, op, offset))?;
        let done_ns = done.polled.map_or(0, |w| w.seen_ns);
        Ok(WaitOutcome { bytes, fell_back: done.fell_back, polled: done.polled, done_ns })
    }

    fn fsync(&mut self, strategy: Strategy, spin_budget_ns: u64) -> Result<WaitOutcome, Error> {
        let fail = |errno: i32| {
            Error::os(ErrorKind::Io, errno, format!("fsync: {}", std::io::Error::from_raw_os_error(errno)))
        };
        let wait = match strategy {
            Strategy::Sync => {
                // SAFETY: fd is open for the port's lifetime.
                if unsafe { libc::fsync(self.fd) } != 0 {
                    return Err(fail(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)));
                }
                return Ok(WaitOutcome::default());
            }
            Strategy::Spin => RingWait::Spin { budget_ns: spin_budget_ns },
            _ => RingWait::Block,
        };
        let done = self.ring.fsync(self.fd, wait)?;
        done.bytes().map_err(fail)?;
        Ok(WaitOutcome { fell_back: done.fell_back, ..Default::default() })
    }
}

//! Regular files and block devices, through io_uring.
//!
//! Files open with O_DIRECT so every I/O reaches the device; where the file system refuses
//! O_DIRECT (tmpfs, some FUSE) the target falls back to buffered I/O and says so, because
//! its numbers then measure the page cache. Block devices are opened read-only unless the
//! user passed `--destructive` or smartcon created the device itself.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use io_uring::{opcode, types};
use smartcon_devemu::{units::format_size, Op};

use super::{AlignedBuf, InFlight, Port, Target, WaitOutcome};
use crate::clock::{now_ns, spin_until_ns};
use crate::decision::{DeviceState, Strategy};
use crate::error::{Error, ErrorKind};
use crate::ring::Ring;
use crate::wait::{Pending, Status, WaitPolicy};

pub struct FileTarget {
    path: PathBuf,
    label: String,
    fd: libc::c_int,
    capacity_bytes: u64,
    block_bytes: u64,
    device_id: String,
    warnings: Vec<String>,
    inflight: InFlight,
    /// Removed on drop (temporary files smartcon created).
    remove_on_drop: bool,
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
        let (capacity_bytes, block_bytes, dev) = if is_block {
            let mut size: u64 = 0;
            let mut ssz: libc::c_int = 0;
            // SAFETY: BLKGETSIZE64 writes a u64 and BLKSSZGET an int into valid locals.
            let ok = unsafe {
                libc::ioctl(fd, 0x8008_1272 /* BLKGETSIZE64 */, &mut size) == 0
                    && libc::ioctl(fd, 0x1268 /* BLKSSZGET */, &mut ssz) == 0
            };
            if !ok {
                let e = std::io::Error::last_os_error();
                // SAFETY: fd is ours.
                unsafe { libc::close(fd) };
                return Err(Error::io(ErrorKind::Target, path, e));
            }
            (size, ssz.max(512) as u64, meta.rdev())
        } else {
            let (ma, mi) = dev_major_minor(meta.dev());
            (meta.len(), sysfs_logical_block(ma, mi).unwrap_or(512), meta.dev())
        };
        let (ma, mi) = dev_major_minor(dev);
        let device_id = format!("blk:{}", sysfs_block_name(ma, mi).unwrap_or_else(|| format!("{ma}-{mi}")));
        Ok(FileTarget {
            path: path.to_path_buf(),
            label: path.display().to_string(),
            fd,
            capacity_bytes,
            block_bytes,
            device_id,
            warnings,
            inflight: InFlight::default(),
            remove_on_drop: false,
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
            let len = chunk.min((size_bytes - off) as usize);
            crate::verify::fill(&mut buf.as_mut_slice()[..len], off, 4096, crate::job::FILL_SEED);
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
        let options = super::OpenOptions { write: true, ..Default::default() };
        let mut t = FileTarget::open(&path, options).inspect_err(|_e| {
            let _ = std::fs::remove_file(&path);
        })?;
        t.remove_on_drop = true;
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

    fn open_port(&self) -> Result<Box<dyn Port + '_>, Error> {
        Ok(Box::new(FilePort { fd: self.fd, ring: Ring::new()? }))
    }

    fn inflight(&self) -> &InFlight {
        &self.inflight
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    fn poke(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        // A separate buffered descriptor, then drop the page so O_DIRECT reads see it.
        let fd = open_fd(&self.path, libc::O_WRONLY).map_err(|e| Error::io(ErrorKind::Target, &self.path, e))?;
        // SAFETY: data is valid for its length; fd is ours and closed below.
        let n = unsafe { libc::pwrite(fd, data.as_ptr() as *const libc::c_void, data.len(), offset as libc::off_t) };
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

struct FilePort {
    fd: libc::c_int,
    ring: Ring,
}

fn check_result(res: isize, want: usize, op: Op, offset: u64) -> Result<(), Error> {
    if res < 0 {
        let e = std::io::Error::from_raw_os_error(-res as i32);
        return Err(Error::new(ErrorKind::Io, format!("{} at offset {offset}: {e}", op.name())));
    }
    if res as usize != want {
        return Err(Error::new(
            ErrorKind::Io,
            format!("short {} at offset {offset}: {res} of {want} bytes", op.name()),
        ));
    }
    Ok(())
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
}

impl Port for FilePort {
    fn io(
        &mut self,
        op: Op,
        buf: &mut [u8],
        offset: u64,
        strategy: Strategy,
        spin_budget_ns: u64,
    ) -> Result<WaitOutcome, Error> {
        let len = buf.len();
        if strategy == Strategy::Sync {
            // SAFETY: buf is valid for len bytes for the duration of the call.
            let res = unsafe {
                match op {
                    Op::Read => libc::pread(self.fd, buf.as_mut_ptr() as *mut libc::c_void, len, offset as libc::off_t),
                    Op::Write => libc::pwrite(self.fd, buf.as_ptr() as *const libc::c_void, len, offset as libc::off_t),
                }
            };
            let res = if res < 0 {
                -(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO) as isize)
            } else {
                res
            };
            check_result(res, len, op, offset)?;
            return Ok(WaitOutcome::default());
        }
        let fd = types::Fd(self.fd);
        let entry = match op {
            Op::Read => opcode::Read::new(fd, buf.as_mut_ptr(), len as u32).offset(offset).build(),
            Op::Write => opcode::Write::new(fd, buf.as_ptr(), len as u32).offset(offset).build(),
        };
        // SAFETY: `buf` outlives this call, and the call reaps the completion before return.
        unsafe { self.ring.push(&entry.user_data(1)) };
        let (res, fell_back) = match strategy {
            Strategy::Block => (self.ring.wait_block()?, false),
            Strategy::Spin => self.ring.wait_spin(spin_budget_ns)?,
            _ => {
                // Not reachable through the job (polling strategies go to io_polled), but a
                // request is in flight: reap it before the buffer goes away.
                self.ring.wait_block()?;
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!("{} needs a wait policy (Port::io_polled)", strategy.name()),
                ));
            }
        };
        check_result(res as isize, len, op, offset)?;
        Ok(WaitOutcome { fell_back, ..Default::default() })
    }

    fn io_polled(
        &mut self,
        op: Op,
        buf: &mut [u8],
        offset: u64,
        ahead: DeviceState,
        policy: &mut dyn WaitPolicy,
    ) -> Result<WaitOutcome, Error> {
        let len = buf.len();
        let fd = types::Fd(self.fd);
        let entry = match op {
            Op::Read => opcode::Read::new(fd, buf.as_mut_ptr(), len as u32).offset(offset).build(),
            Op::Write => opcode::Write::new(fd, buf.as_ptr(), len as u32).offset(offset).build(),
        };
        let submit_ns = now_ns();
        // SAFETY: `buf` outlives this call, which reaps the completion before returning,
        // also when the policy fails (below).
        unsafe { self.ring.push(&entry.user_data(1)) };
        if let Err(e) = self.ring.submit() {
            let _ = self.ring.wait_block();
            return Err(e);
        }
        let mut status = RingStatus { ring: &mut self.ring, res: None };
        let req = Pending { op, bytes: len as u64, ahead, submit_ns };
        let waited = policy.wait(&req, &mut status);
        let seen = status.res;
        let (waited, res) = match (waited, seen) {
            (Ok(w), Some(res)) => (w, res),
            (w, _) => {
                // Failed (or returned without seeing it): the buffer is the kernel's until
                // the completion is reaped.
                let reaped = self.ring.wait_block();
                (w?, reaped?)
            }
        };
        check_result(res as isize, len, op, offset)?;
        Ok(WaitOutcome { fell_back: false, polled: Some(waited), done_ns: waited.seen_ns })
    }

    fn fsync(&mut self, strategy: Strategy, spin_budget_ns: u64) -> Result<WaitOutcome, Error> {
        let fail = |e: std::io::Error| Error::new(ErrorKind::Io, format!("fsync: {e}"));
        if strategy == Strategy::Sync {
            // SAFETY: fd is open for the port's lifetime.
            if unsafe { libc::fsync(self.fd) } != 0 {
                return Err(fail(std::io::Error::last_os_error()));
            }
            return Ok(WaitOutcome::default());
        }
        let entry = opcode::Fsync::new(types::Fd(self.fd)).build().user_data(2);
        // SAFETY: the entry points to no memory; its completion is reaped below.
        unsafe { self.ring.push(&entry) };
        let (res, fell_back) = match strategy {
            Strategy::Spin => self.ring.wait_spin(spin_budget_ns)?,
            _ => (self.ring.wait_block()?, false),
        };
        if res < 0 {
            return Err(fail(std::io::Error::from_raw_os_error(-res)));
        }
        Ok(WaitOutcome { fell_back, ..Default::default() })
    }
}

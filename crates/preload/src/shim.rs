//! The interposed libc functions.
//!
//! Reads and writes (`pread`/`pwrite` and their 64-bit names, `preadv`/`pwritev` with one
//! buffer, `read`/`write`) on taken descriptors go to [`crate::port::Port`]; everything
//! else, and everything the library cannot do exactly as the system call would, goes to
//! the real function. The rules that keep the contract exact:
//!
//! - A port error (an unaligned O_DIRECT buffer, EBADF, EIO, a broken ring) never reaches
//!   the caller as such: the call is repeated on the real function, so the caller gets the
//!   kernel's own result and errno (EINVAL for unaligned O_DIRECT buffers). A positional
//!   repeat is idempotent.
//! - `read`/`write` go to the port at the file offset ([`crate::port::Port::read_current`]),
//!   under a per-descriptor lock so this process's threads see the kernel's serialisation:
//!   a `sync` wait is read(2)/write(2) itself (the kernel takes and advances the offset,
//!   no lseek); a ring wait takes the offset with lseek, does a positional I/O and moves the
//!   offset by what was transferred (io_uring's own current position is not advanced for
//!   an O_DIRECT request that completes asynchronously). On a descriptor another process
//!   may share (inherited across exec, or open at a fork) the lseek pair cannot be made
//!   atomic, so they pass through; so does `write` on an O_APPEND descriptor (its offset is
//!   the end of file at the instant of the write).
//! - errno is left as the caller had it on success, as the system call leaves it.
//! - Calls made while the thread is already inside the library (its own I/O, a signal
//!   handler that interrupted it) go to the real function. The library's own plain call
//!   (a port's `sync` wait re-entering `pread`/`pwrite`/`read`/`write`) is recognised by its descriptor
//!   and buffer ([`crate::guard::OwnIo`]) and is not counted as the program's.
//! - Calls that create, close or re-flag descriptors reset the descriptor table entry.
//!
//! `open`, `openat`, `fcntl` are variadic in C; they are declared here with their
//! optional argument as a plain third (or fourth) parameter, which the x86-64 and AArch64
//! Linux calling conventions pass in the same register either way.

use libc::{c_char, c_int, c_long, c_uint, c_void, iovec, mode_t, off_t, size_t, ssize_t};

use crate::bypass::{self, Pass, Seen};
use crate::emu;
use crate::fdtable::{self, Class};
use crate::guard::{self, Busy};
use crate::process;
use crate::real::{self, call_real};

/// The descriptor's generation, shared and append flags if the library takes its I/O.
pub(crate) fn taken_class(fd: c_int) -> Option<(u64, bool, bool)> {
    match fdtable::lookup(fd) {
        Class::Pass => None,
        Class::Taken { generation, shared, append } => Some((generation, shared, append)),
        Class::Unknown { generation } => {
            let p = fdtable::probe(fd)?;
            let buffered = process::config().is_some_and(|c| c.buffered);
            fdtable::classify(fd, generation, fdtable::takes(&p, buffered), p.append);
            match fdtable::lookup(fd) {
                Class::Taken { generation, shared, append } => Some((generation, shared, append)),
                _ => None,
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Dir {
    Read(*mut u8),
    Write(*const u8),
}

impl Dir {
    fn addr(self) -> usize {
        match self {
            Dir::Read(p) => p as usize,
            Dir::Write(p) => p as usize,
        }
    }

    fn emu(self) -> emu::Buf {
        match self {
            Dir::Read(p) => emu::Buf::Read(p),
            Dir::Write(p) => emu::Buf::Write(p),
        }
    }
}

/// One I/O through the thread's port, at `at` (pread/pwrite) or, with `None`, at the file
/// offset, which it advances (read/write: the caller holds the descriptor's stripe lock);
/// `None` to use the real call. A port that declines (`None`) has moved no data and left
/// the offset where it was, so the real call then does the whole I/O.
///
/// # Safety
/// The buffer must be valid for `len` bytes (the caller's promise to pread/pwrite or
/// read/write; the memory is only handed to the kernel).
unsafe fn taken(fd: c_int, generation: u64, dir: Dir, len: size_t, at: Option<off_t>) -> Option<ssize_t> {
    let null = match dir {
        Dir::Read(p) => p.is_null(),
        Dir::Write(p) => p.is_null(),
    };
    if len == 0 || len > isize::MAX as usize || at.is_some_and(|off| off < 0) || null {
        return None;
    }
    let Some(_busy) = Busy::try_enter() else {
        process::count_passed_through(Pass::Reentrant);
        return None;
    };
    let saved = real::errno();
    // The port's plain call (a `sync` wait) comes back through `positional` or `streaming`:
    // marked as ours.
    let _own = guard::OwnIo::mark(fd, dir.addr());
    let r = process::with_thread(|st| {
        let Some(port) = st.port(fd, generation) else { return Some(Err(Pass::NoPort)) };
        let res = match (dir, at) {
            // SAFETY: the caller's promise: valid for len bytes of writes.
            (Dir::Read(p), Some(off)) => port.read_at(unsafe { std::slice::from_raw_parts_mut(p, len) }, off as u64),
            // SAFETY: the caller's promise: valid for len bytes of reads.
            (Dir::Write(p), Some(off)) => port.write_at(unsafe { std::slice::from_raw_parts(p, len) }, off as u64),
            // SAFETY: the caller's promise: valid for len bytes of writes.
            (Dir::Read(p), None) => port.read_current(unsafe { std::slice::from_raw_parts_mut(p, len) }),
            // SAFETY: the caller's promise: valid for len bytes of reads.
            (Dir::Write(p), None) => port.write_current(unsafe { std::slice::from_raw_parts(p, len) }),
        };
        match res {
            Ok(n) => Some(Ok(n as ssize_t)),
            Err(e) => {
                // Alignment is refused before any I/O; anything else may have left the
                // port's ring unusable (a program that closed its descriptor).
                if e.raw_os_error() != Some(libc::EINVAL) {
                    st.drop_port(fd);
                }
                Some(Err(Pass::Refused))
            }
        }
    })
    .flatten()
    // The thread is exiting (its state is gone): no port.
    .unwrap_or(Err(Pass::NoPort));
    match r {
        Ok(n) => {
            real::set_errno(saved);
            Some(n)
        }
        Err(why) => {
            process::count_passed_through(why);
            None
        }
    }
}

/// pread/pwrite: the port, else the real call.
///
/// # Safety
/// As pread(2)/pwrite(2).
unsafe fn positional(fd: c_int, dir: Dir, len: size_t, off: off_t) -> ssize_t {
    if emu::active() {
        // SAFETY: forwarded caller promise.
        if let Some(n) = unsafe { emu::serve(fd, dir.emu(), len, Some(off)) } {
            return n;
        }
    }
    // A port's own plain call (its `sync` wait, made inside `taken`): the real call at
    // once, not counted as the program's (see guard::OwnIo).
    if process::active() && !guard::is_own_io(fd, dir.addr()) {
        if let Some((generation, _, append)) = taken_class(fd) {
            // pwrite on O_APPEND appends at the end whatever the offset (Linux): real call.
            if append && matches!(dir, Dir::Write(_)) {
                process::count_passed_through(Pass::Append);
            } else {
                // SAFETY: forwarded caller promise.
                if let Some(n) = unsafe { taken(fd, generation, dir, len, Some(off)) } {
                    return n;
                }
            }
        }
    }
    // SAFETY: forwarded caller promise.
    unsafe {
        match dir {
            Dir::Read(p) => real::pread(fd, p.cast(), len, off),
            Dir::Write(p) => real::pwrite(fd, p.cast(), len, off),
        }
    }
}

/// read/write: the port at the file offset, else the real call.
///
/// # Safety
/// As read(2)/write(2).
unsafe fn streaming(fd: c_int, dir: Dir, len: size_t) -> ssize_t {
    let real_call = || {
        // SAFETY: forwarded caller promise.
        unsafe {
            match dir {
                Dir::Read(p) => real::read(fd, p.cast(), len),
                Dir::Write(p) => real::write(fd, p.cast(), len),
            }
        }
    };
    if emu::active() && len > 0 {
        // SAFETY: forwarded caller promise.
        if let Some(n) = unsafe { emu::serve(fd, dir.emu(), len, None) } {
            return n;
        }
    }
    // A port's own plain call (its `sync` wait at the file offset, made inside `taken`
    // under this descriptor's stripe lock): the real call at once, not counted as the
    // program's (see guard::OwnIo).
    if !process::active() || len == 0 || guard::is_own_io(fd, dir.addr()) {
        return real_call();
    }
    let Some((generation, shared, append)) = taken_class(fd) else { return real_call() };
    if shared || (append && matches!(dir, Dir::Write(_))) {
        process::count_passed_through(if shared { Pass::SharedOffset } else { Pass::Append });
        return real_call();
    }
    // Held across the port's I/O and, where it declines, the real call, so this process's
    // threads see one offset move per call as the kernel's f_pos lock gives them.
    let _stripe = fdtable::lock_stripe(fd);
    // SAFETY: forwarded caller promise.
    match unsafe { taken(fd, generation, dir, len, None) } {
        Some(n) => n,
        // Declined before moving anything: the real read/write at the same offset.
        None => real_call(),
    }
}

/// Vectored calls (`preadv`/`pwritev`, and `preadv2`/`pwritev2` when `flags` is given).
///
/// - On the emulated image every one is served, whatever its buffers and flags: the data
///   half is the real call itself (results, errno and offset are the kernel's), the timing
///   the model's.
/// - On a taken descriptor, one buffer with flags 0 or RWF_HIPRI is a positional call (or,
///   at offset -1 of `preadv2`/`pwritev2`, a `read`/`write` at the file offset); RWF_HIPRI
///   is the program asking to be polled, so it goes through the decision like any other
///   taken I/O and is counted. More buffers (one request with the kernel's own alignment
///   rule for each segment) and other flags (RWF_NOWAIT, RWF_DSYNC, RWF_APPEND, ... keep
///   the kernel's meaning) pass through, counted by reason.
///
/// # Safety
/// As preadv(2)/pwritev(2) (preadv2(2)/pwritev2(2)).
unsafe fn vectored(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: Option<c_int>, read: bool) -> ssize_t {
    let real_call = || {
        // SAFETY: forwarded caller promise.
        unsafe {
            match (flags, read) {
                (None, true) => real::preadv(fd, iov, cnt, off),
                (None, false) => real::pwritev(fd, iov, cnt, off),
                (Some(f), true) => real::preadv2(fd, iov, cnt, off, f),
                (Some(f), false) => real::pwritev2(fd, iov, cnt, off, f),
            }
        }
    };
    if emu::active() {
        // preadv2 at offset -1 reads at the file offset, as read(2) does.
        let at = if flags.is_some() && off == -1 { None } else { Some(off) };
        if let Some(n) = emu::serve_with(fd, read, at, real_call) {
            return n;
        }
    }
    if !process::active() {
        return real_call();
    }
    let Some((generation, _, append)) = taken_class(fd) else { return real_call() };
    let f = flags.unwrap_or(0);
    if f & !libc::RWF_HIPRI != 0 {
        process::count_passed_through(Pass::RwfFlags);
        return real_call();
    }
    if cnt != 1 || iov.is_null() {
        process::count_passed_through(Pass::Vectored);
        return real_call();
    }
    // SAFETY: cnt == 1: the caller promises one valid iovec.
    let v = unsafe { *iov };
    let dir = if read { Dir::Read(v.iov_base.cast()) } else { Dir::Write(v.iov_base.cast()) };
    if f & libc::RWF_HIPRI != 0 {
        bypass::hipri();
    }
    if flags.is_some() && off == -1 {
        // SAFETY: the iovec's buffer is valid for iov_len bytes (caller promise).
        return unsafe { streaming(fd, dir, v.iov_len) };
    }
    if append && !read {
        // pwritev on O_APPEND appends at the end whatever the offset (Linux).
        process::count_passed_through(Pass::Append);
        return real_call();
    }
    // SAFETY: the iovec's buffer is valid for iov_len bytes (caller promise).
    match unsafe { taken(fd, generation, dir, v.iov_len, Some(off)) } {
        Some(n) => n,
        None => real_call(),
    }
}

/// # Safety
/// As pread(2).
#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, len: size_t, off: off_t) -> ssize_t {
    // SAFETY: forwarded caller promise.
    unsafe { positional(fd, Dir::Read(buf.cast()), len, off) }
}

/// # Safety
/// As pread(2).
#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, len: size_t, off: off_t) -> ssize_t {
    // SAFETY: forwarded caller promise.
    unsafe { positional(fd, Dir::Read(buf.cast()), len, off) }
}

/// # Safety
/// As pwrite(2).
#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, len: size_t, off: off_t) -> ssize_t {
    // SAFETY: forwarded caller promise.
    unsafe { positional(fd, Dir::Write(buf.cast()), len, off) }
}

/// # Safety
/// As pwrite(2).
#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, len: size_t, off: off_t) -> ssize_t {
    // SAFETY: forwarded caller promise.
    unsafe { positional(fd, Dir::Write(buf.cast()), len, off) }
}

/// # Safety
/// As read(2).
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t {
    // SAFETY: forwarded caller promise.
    unsafe { streaming(fd, Dir::Read(buf.cast()), len) }
}

/// # Safety
/// As write(2).
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t {
    // SAFETY: forwarded caller promise.
    let n = unsafe { streaming(fd, Dir::Write(buf.cast()), len) };
    // A helper's write hands its finished requests back (crate::emu::after_helper_write).
    let saved = real::errno();
    emu::after_helper_write();
    real::set_errno(saved);
    n
}

/// # Safety
/// As preadv(2).
#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: forwarded caller promise.
    unsafe { vectored(fd, iov, cnt, off, None, true) }
}

/// # Safety
/// As preadv(2).
#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: forwarded caller promise.
    unsafe { vectored(fd, iov, cnt, off, None, true) }
}

/// # Safety
/// As pwritev(2).
#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: forwarded caller promise.
    unsafe { vectored(fd, iov, cnt, off, None, false) }
}

/// # Safety
/// As pwritev(2).
#[no_mangle]
pub unsafe extern "C" fn pwritev64(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: forwarded caller promise.
    unsafe { vectored(fd, iov, cnt, off, None, false) }
}

macro_rules! v2_like {
    ($name:ident, $read:expr) => {
        /// # Safety
        /// As preadv2(2)/pwritev2(2).
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: c_int) -> ssize_t {
            // SAFETY: forwarded caller promise.
            unsafe { vectored(fd, iov, cnt, off, Some(flags), $read) }
        }
    };
}
v2_like!(preadv2, true);
v2_like!(preadv64v2, true);
v2_like!(pwritev2, false);
v2_like!(pwritev64v2, false);

#[no_mangle]
pub extern "C" fn close(fd: c_int) -> c_int {
    // Reset before (no classification of the old file can land after the close) and
    // after (a number reused by another thread in between is classified afresh).
    fdtable::reset(fd, false);
    let r = real::close(fd);
    let e = real::errno();
    fdtable::reset(fd, false);
    real::set_errno(e);
    r
}

/// `fsync` on the emulated image is a flush the model times (crate::emu::serve_flush);
/// any other descriptor's passes through.
#[no_mangle]
pub extern "C" fn fsync(fd: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: (fallback) fsync has no memory preconditions.
    let real = || call_real!(real::FSYNC, F, unsafe { libc::syscall(libc::SYS_fsync, fd) as c_int }, fd);
    if emu::active() {
        if let Some(r) = emu::serve_flush(fd, real) {
            return r;
        }
    }
    real()
}

/// As [`fsync`].
#[no_mangle]
pub extern "C" fn fdatasync(fd: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: (fallback) fdatasync has no memory preconditions.
    let real = || call_real!(real::FDATASYNC, F, unsafe { libc::syscall(libc::SYS_fdatasync, fd) as c_int }, fd);
    if emu::active() {
        if let Some(r) = emu::serve_flush(fd, real) {
            return r;
        }
    }
    real()
}

#[no_mangle]
pub extern "C" fn dup(fd: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: (fallback) dup has no memory preconditions.
    let r = call_real!(real::DUP, F, unsafe { libc::syscall(libc::SYS_dup, fd) as c_int }, fd);
    if r >= 0 {
        fdtable::reset(r, fdtable::is_shared(fd));
    }
    r
}

#[no_mangle]
pub extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int, c_int) -> c_int;
    // SAFETY: (fallback) no memory preconditions.
    let r = call_real!(real::DUP2, F, unsafe { libc::syscall(libc::SYS_dup3, old, new, 0) as c_int }, old, new);
    if r >= 0 && old != new {
        fdtable::reset(r, fdtable::is_shared(old));
    }
    r
}

#[no_mangle]
pub extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
    let r =
        // SAFETY: (fallback) no memory preconditions.
        call_real!(real::DUP3, F, unsafe { libc::syscall(libc::SYS_dup3, old, new, flags) as c_int }, old, new, flags);
    if r >= 0 {
        fdtable::reset(r, fdtable::is_shared(old));
    }
    r
}

fn after_fcntl(fd: c_int, cmd: c_int, r: c_int) {
    if r < 0 {
        return;
    }
    let e = real::errno();
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => fdtable::reset(r, fdtable::is_shared(fd)),
        // O_DIRECT or O_APPEND may have changed.
        libc::F_SETFL => fdtable::reset(fd, fdtable::is_shared(fd)),
        _ => {}
    }
    real::set_errno(e);
}

/// # Safety
/// As fcntl(2); `arg` is the optional argument, passed on unchanged.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // glibc's fcntl is variadic: called as one, so that the caller's side of the ABI
    // (on x86-64, %al's count of vector registers) is what its prologue expects.
    type F = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    // SAFETY: (fallback) the kernel checks arg as it would for the libc call.
    let r = call_real!(real::FCNTL, F, unsafe { libc::syscall(libc::SYS_fcntl, fd, cmd, arg) as c_int }, fd, cmd, arg);
    after_fcntl(fd, cmd, r);
    r
}

/// # Safety
/// As fcntl(2).
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    type F = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    let r =
        // SAFETY: (fallback) as fcntl.
        call_real!(real::FCNTL64, F, unsafe { libc::syscall(libc::SYS_fcntl, fd, cmd, arg) as c_int }, fd, cmd, arg);
    after_fcntl(fd, cmd, r);
    r
}

fn after_open(r: c_int) -> c_int {
    if r >= 0 {
        let e = real::errno();
        fdtable::reset(r, false);
        if emu::active() {
            emu::note_open(r);
        }
        real::set_errno(e);
    }
    r
}

macro_rules! open_like {
    ($name:ident, $sym:expr) => {
        /// # Safety
        /// As open(2); `mode` is passed on unchanged (read only with O_CREAT/O_TMPFILE).
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
            type F = unsafe extern "C" fn(*const c_char, c_int, mode_t) -> c_int;
            let r = call_real!(
                $sym,
                F,
                // SAFETY: (fallback) the kernel validates the path pointer (EFAULT).
                unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path, flags, mode) as c_int },
                path,
                flags,
                mode
            );
            after_open(r)
        }
    };
}
open_like!(open, real::OPEN);
open_like!(open64, real::OPEN64);

macro_rules! openat_like {
    ($name:ident, $sym:expr) => {
        /// # Safety
        /// As openat(2).
        #[no_mangle]
        pub unsafe extern "C" fn $name(dir: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
            type F = unsafe extern "C" fn(c_int, *const c_char, c_int, mode_t) -> c_int;
            let r = call_real!(
                $sym,
                F,
                // SAFETY: (fallback) the kernel validates the path pointer.
                unsafe { libc::syscall(libc::SYS_openat, dir, path, flags, mode) as c_int },
                dir,
                path,
                flags,
                mode
            );
            after_open(r)
        }
    };
}
openat_like!(openat, real::OPENAT);
openat_like!(openat64, real::OPENAT64);

macro_rules! creat_like {
    ($name:ident, $sym:expr) => {
        /// # Safety
        /// As creat(2).
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: mode_t) -> c_int {
            type F = unsafe extern "C" fn(*const c_char, mode_t) -> c_int;
            let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
            let r = call_real!(
                $sym,
                F,
                // SAFETY: (fallback) the kernel validates the path pointer.
                unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path, flags, mode) as c_int },
                path,
                mode
            );
            after_open(r)
        }
    };
}
creat_like!(creat, real::CREAT);
creat_like!(creat64, real::CREAT64);

#[no_mangle]
pub extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int;
    let r = call_real!(
        real::CLOSE_RANGE,
        F,
        // SAFETY: (fallback) no memory preconditions.
        unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) as c_int },
        first,
        last,
        flags
    );
    if r == 0 && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        let e = real::errno();
        let end = (last as usize).min(fdtable::FD_MAX - 1);
        for fd in first as usize..=end {
            fdtable::reset(fd as c_int, false);
        }
        real::set_errno(e);
    }
    r
}

#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    process::flush("_exit");
    type F = unsafe extern "C" fn(c_int) -> !;
    // SAFETY: (fallback) exit_group does not return.
    call_real!(real::EXIT_, F, unsafe { libc::syscall(libc::SYS_exit_group, status) as c_int }, status);
    unreachable!("_exit returned")
}

#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    process::flush("_exit");
    type F = unsafe extern "C" fn(c_int) -> !;
    // SAFETY: (fallback) exit_group does not return.
    call_real!(real::EXIT_UPPER, F, unsafe { libc::syscall(libc::SYS_exit_group, status) as c_int }, status);
    unreachable!("_Exit returned")
}

/// # Safety
/// As execve(2).
#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    process::flush("exec");
    call_real!(
        real::EXECVE,
        real::ExecveFn,
        // SAFETY: (fallback) forwarded caller promise.
        unsafe { libc::syscall(libc::SYS_execve, path, argv, envp) as c_int },
        path,
        argv,
        envp
    )
}

/// # Safety
/// As execv(3).
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    process::flush("exec");
    type F = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;
    // SAFETY: (fallback) execv is execve with the current environment.
    call_real!(real::EXECV, F, unsafe { libc::execve(path, argv, environ_ptr()) }, path, argv)
}

/// # Safety
/// As execvp(3).
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    process::flush("exec");
    type F = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;
    // SAFETY: (fallback) without a PATH search, as execv.
    call_real!(real::EXECVP, F, unsafe { libc::execve(file, argv, environ_ptr()) }, file, argv)
}

/// # Safety
/// As execvpe(3).
#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    process::flush("exec");
    // SAFETY: (fallback) without a PATH search, as execve.
    call_real!(real::EXECVPE, real::ExecveFn, unsafe { libc::execve(file, argv, envp) }, file, argv, envp)
}

extern "C" {
    static environ: *const *const c_char;
}

fn environ_ptr() -> *const *const c_char {
    // SAFETY: reading the process's environ pointer, which libc keeps valid.
    unsafe { environ }
}

/// Counts a memory map of a file the program's I/O could otherwise have gone through: a
/// regular file on a block device (page faults read it, no call does), and the image.
fn note_mmap(fd: c_int, flags: c_int) {
    if fd < 0 || flags & libc::MAP_ANONYMOUS != 0 || crate::guard::inside() {
        return;
    }
    if emu::active() && emu::is_image_fd(fd) {
        bypass::around_model(Seen::Mmap, 1);
        bypass::seen(Seen::Mmap, 1);
        return;
    }
    if process::active() && fdtable::probe(fd).is_some_and(|p| p.regular && p.on_block_device) {
        bypass::seen(Seen::Mmap, 1);
    }
}

macro_rules! mmap_like {
    ($name:ident) => {
        /// # Safety
        /// As mmap(2).
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            addr: *mut c_void,
            len: size_t,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            off: off_t,
        ) -> *mut c_void {
            type F = unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;
            let r = call_real!(
                real::MMAP,
                F,
                // SAFETY: (fallback) the caller's promise is mmap(2)'s.
                unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut c_void },
                addr,
                len,
                prot,
                flags,
                fd,
                off
            );
            if r != libc::MAP_FAILED {
                let e = real::errno();
                note_mmap(fd, flags);
                real::set_errno(e);
            }
            r
        }
    };
}
mmap_like!(mmap);
mmap_like!(mmap64);

/// Counts what a program does with `syscall(2)` that the library would otherwise see: rings
/// set up (io_uring), libaio submissions, and reads and writes on taken descriptors or the
/// image. Calls the library makes itself (its own rings, inside it) are not the program's.
fn note_syscall(n: c_long, a1: c_long, a2: c_long) {
    const IO: [c_long; 10] = [
        libc::SYS_read,
        libc::SYS_write,
        libc::SYS_pread64,
        libc::SYS_pwrite64,
        libc::SYS_readv,
        libc::SYS_writev,
        libc::SYS_preadv,
        libc::SYS_pwritev,
        libc::SYS_preadv2,
        libc::SYS_pwritev2,
    ];
    // The futexes and io_uring_enter of every program pass here: the cheap test first.
    let interesting = n == libc::SYS_io_uring_setup || n == libc::SYS_io_submit || IO.contains(&n);
    if !interesting || crate::guard::inside() || !(process::active() || emu::active()) {
        return;
    }
    match n {
        libc::SYS_io_uring_setup => {
            bypass::seen(Seen::IoUring, 1);
            if emu::active() {
                bypass::around_model(Seen::IoUring, 1);
            }
        }
        libc::SYS_io_submit => {
            let n = a2.max(0) as u64;
            bypass::seen(Seen::Libaio, n);
            if emu::active() {
                bypass::around_model(Seen::Libaio, n);
            }
        }
        _ => {
            let Ok(fd) = c_int::try_from(a1) else { return };
            let saved = real::errno();
            if emu::is_image_fd(fd) {
                bypass::around_model(Seen::RawSyscall, 1);
                bypass::seen(Seen::RawSyscall, 1);
            } else if process::active() && taken_class(fd).is_some() {
                bypass::seen(Seen::RawSyscall, 1);
            }
            real::set_errno(saved);
        }
    }
}

/// syscall(3), declared with its six optional arguments as plain parameters (the x86-64 and
/// AArch64 Linux conventions pass them in the same registers either way; the real function
/// reads six whatever the call passed, as the kernel does).
///
/// # Safety
/// As syscall(2) for the system call `n`.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    note_syscall(n, a1, a2);
    type F = unsafe extern "C" fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long;
    call_real!(
        real::SYSCALL,
        F,
        {
            // libc without syscall(3) (never glibc): the call cannot be made from here
            // without it, and calling libc::syscall would come back to this function.
            real::set_errno(libc::ENOSYS);
            -1
        },
        n,
        a1,
        a2,
        a3,
        a4,
        a5,
        a6
    )
}

/// A liburing set-up function: counted as an io_uring ring, then the real one (liburing
/// makes its own system calls, which no preload reaches). Returns -ENOSYS, as liburing
/// returns errors, where there is no liburing (nothing the program linked calls it then).
macro_rules! liburing_like {
    ($name:ident, $sym:literal, ($($arg:ident: $ty:ty),*)) => {
        /// # Safety
        /// As liburing's function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            static SYM: real::Sym = real::Sym::new($sym);
            let counted = !crate::guard::inside() && (process::active() || emu::active());
            // Nested set-up calls inside liburing are one ring.
            let _busy = Busy::try_enter();
            if counted {
                bypass::seen(Seen::IoUring, 1);
                if emu::active() {
                    bypass::around_model(Seen::IoUring, 1);
                }
            }
            type F = unsafe extern "C" fn($($ty),*) -> c_int;
            call_real!(SYM, F, -libc::ENOSYS, $($arg),*)
        }
    };
}
liburing_like!(io_uring_queue_init, c"io_uring_queue_init", (entries: c_uint, ring: *mut c_void, flags: c_uint));
liburing_like!(io_uring_queue_init_params, c"io_uring_queue_init_params", (entries: c_uint, ring: *mut c_void, p: *mut c_void));
liburing_like!(
    io_uring_queue_init_mem,
    c"io_uring_queue_init_mem",
    (entries: c_uint, ring: *mut c_void, p: *mut c_void, buf: *mut c_void, size: size_t)
);
liburing_like!(io_uring_setup, c"io_uring_setup", (entries: c_uint, p: *mut c_void));

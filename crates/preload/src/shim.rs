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
//! - `read`/`write` take the file offset with lseek, do a positional I/O and move the
//!   offset by what was transferred, under a per-descriptor lock so this process's threads
//!   see the kernel's serialisation. On a descriptor another process may share (inherited
//!   across exec, or open at a fork) that cannot be made atomic, so they pass through;
//!   so does `write` on an O_APPEND descriptor (its offset is the end of file at the
//!   instant of the write).
//! - errno is left as the caller had it on success, as the system call leaves it.
//! - Calls made while the thread is already inside the library (its own I/O, a signal
//!   handler that interrupted it) go to the real function.
//! - Calls that create, close or re-flag descriptors reset the descriptor table entry.
//!
//! `open`, `openat`, `fcntl` are variadic in C; they are declared here with their
//! optional argument as a plain third (or fourth) parameter, which the x86-64 and AArch64
//! Linux calling conventions pass in the same register either way.

use libc::{c_char, c_int, c_uint, c_void, iovec, mode_t, off_t, size_t, ssize_t};

use crate::emu;
use crate::fdtable::{self, Class};
use crate::process::{self, Busy, Spin};
use crate::real::{self, call_real};

/// The descriptor's generation and append flag if the library takes its I/O.
fn taken_class(fd: c_int) -> Option<(u64, bool, bool)> {
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
    fn emu(self) -> emu::Buf {
        match self {
            Dir::Read(p) => emu::Buf::Read(p),
            Dir::Write(p) => emu::Buf::Write(p),
        }
    }
}

/// One positional I/O through the thread's port, or `None` to use the real call.
///
/// # Safety
/// The buffer must be valid for `len` bytes (the caller's promise to pread/pwrite; the
/// memory is only handed to the kernel).
unsafe fn taken_at(fd: c_int, generation: u64, dir: Dir, len: size_t, off: off_t) -> Option<ssize_t> {
    let null = match dir {
        Dir::Read(p) => p.is_null(),
        Dir::Write(p) => p.is_null(),
    };
    if len == 0 || len > isize::MAX as usize || off < 0 || null {
        return None;
    }
    let _busy = Busy::try_enter()?;
    let saved = real::errno();
    let r = process::with_thread(|st| {
        let port = st.port(fd, generation)?;
        let res = match dir {
            // SAFETY: the caller's promise: valid for len bytes of writes.
            Dir::Read(p) => port.read_at(unsafe { std::slice::from_raw_parts_mut(p, len) }, off as u64),
            // SAFETY: the caller's promise: valid for len bytes of reads.
            Dir::Write(p) => port.write_at(unsafe { std::slice::from_raw_parts(p, len) }, off as u64),
        };
        match res {
            Ok(n) => Some(n as ssize_t),
            Err(e) => {
                // Alignment is refused before any I/O; anything else may have left the
                // port's ring unusable (a program that closed its descriptor).
                if e.raw_os_error() != Some(libc::EINVAL) {
                    st.drop_port(fd);
                }
                None
            }
        }
    })
    .flatten();
    match r {
        Some(_) => real::set_errno(saved),
        None => process::count_passed_through(),
    }
    r
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
    if process::active() {
        if let Some((generation, _, append)) = taken_class(fd) {
            // pwrite on O_APPEND appends at the end whatever the offset (Linux): real call.
            if !(append && matches!(dir, Dir::Write(_))) {
                // SAFETY: forwarded caller promise.
                if let Some(n) = unsafe { taken_at(fd, generation, dir, len, off) } {
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

/// Serialises read/write/lseek emulation per descriptor among this process's threads.
static STRIPES: [Spin<()>; 64] = [const { Spin::new(()) }; 64];

pub fn lock_stripes_for_fork() {
    for s in &STRIPES {
        std::mem::forget(s.lock());
    }
}

pub fn unlock_stripes_after_fork() {
    for s in &STRIPES {
        s.unlock_after_fork();
    }
}

/// read/write: the offset emulated around a positional I/O, else the real call.
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
    if !process::active() || len == 0 {
        return real_call();
    }
    let Some((generation, shared, append)) = taken_class(fd) else { return real_call() };
    if shared || (append && matches!(dir, Dir::Write(_))) {
        process::count_passed_through();
        return real_call();
    }
    let _stripe = STRIPES[fd as usize % STRIPES.len()].lock();
    let saved = real::errno();
    // SAFETY: lseek has no memory preconditions.
    let off = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
    if off < 0 {
        real::set_errno(saved);
        return real_call();
    }
    // SAFETY: forwarded caller promise.
    let n = match unsafe { taken_at(fd, generation, dir, len, off) } {
        Some(n) => n,
        // The same transfer at the same offset as the real read/write would do.
        // SAFETY: forwarded caller promise.
        None => unsafe {
            match dir {
                Dir::Read(p) => real::pread(fd, p.cast(), len, off),
                Dir::Write(p) => real::pwrite(fd, p.cast(), len, off),
            }
        },
    };
    if n > 0 {
        let saved = real::errno();
        // SAFETY: as above.
        unsafe { libc::lseek(fd, off + n as off_t, libc::SEEK_SET) };
        real::set_errno(saved);
    }
    n
}

/// Vectored calls with one buffer are a positional call; more buffers pass through (one
/// request with the kernel's own alignment rule for each segment).
///
/// # Safety
/// As preadv(2)/pwritev(2).
unsafe fn vectored(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, read: bool) -> ssize_t {
    if (process::active() || emu::active()) && cnt == 1 && !iov.is_null() {
        // SAFETY: cnt == 1: the caller promises one valid iovec.
        let v = unsafe { *iov };
        let dir = if read { Dir::Read(v.iov_base.cast()) } else { Dir::Write(v.iov_base.cast()) };
        // SAFETY: the iovec's buffer is valid for iov_len bytes (caller promise).
        return unsafe { positional(fd, dir, v.iov_len, off) };
    }
    if process::active() && taken_class(fd).is_some() {
        process::count_passed_through();
    }
    // SAFETY: forwarded caller promise.
    unsafe {
        if read {
            real::preadv(fd, iov, cnt, off)
        } else {
            real::pwritev(fd, iov, cnt, off)
        }
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
    unsafe { streaming(fd, Dir::Write(buf.cast()), len) }
}

/// # Safety
/// As preadv(2).
#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: forwarded caller promise.
    unsafe { vectored(fd, iov, cnt, off, true) }
}

/// # Safety
/// As preadv(2).
#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: forwarded caller promise.
    unsafe { vectored(fd, iov, cnt, off, true) }
}

/// # Safety
/// As pwritev(2).
#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: forwarded caller promise.
    unsafe { vectored(fd, iov, cnt, off, false) }
}

/// # Safety
/// As pwritev(2).
#[no_mangle]
pub unsafe extern "C" fn pwritev64(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: forwarded caller promise.
    unsafe { vectored(fd, iov, cnt, off, false) }
}

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
    // SAFETY: (fallback) no memory preconditions.
    let r =
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
    type F = unsafe extern "C" fn(c_int, c_int, usize) -> c_int;
    // SAFETY: (fallback) the kernel checks arg as it would for the libc call.
    let r = call_real!(real::FCNTL, F, unsafe { libc::syscall(libc::SYS_fcntl, fd, cmd, arg) as c_int }, fd, cmd, arg);
    after_fcntl(fd, cmd, r);
    r
}

/// # Safety
/// As fcntl(2).
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    type F = unsafe extern "C" fn(c_int, c_int, usize) -> c_int;
    // SAFETY: (fallback) as fcntl.
    let r =
        call_real!(real::FCNTL64, F, unsafe { libc::syscall(libc::SYS_fcntl, fd, cmd, arg) as c_int }, fd, cmd, arg);
    after_fcntl(fd, cmd, r);
    r
}

fn after_open(r: c_int) -> c_int {
    if r >= 0 {
        let e = real::errno();
        fdtable::reset(r, false);
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
            // SAFETY: (fallback) the kernel validates the path pointer (EFAULT).
            let r = call_real!(
                $sym,
                F,
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
            // SAFETY: (fallback) the kernel validates the path pointer.
            let r = call_real!(
                $sym,
                F,
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
            // SAFETY: (fallback) the kernel validates the path pointer.
            let r = call_real!(
                $sym,
                F,
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
    // SAFETY: (fallback) no memory preconditions.
    let r = call_real!(
        real::CLOSE_RANGE,
        F,
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
    // SAFETY: (fallback) forwarded caller promise.
    call_real!(
        real::EXECVE,
        real::ExecveFn,
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

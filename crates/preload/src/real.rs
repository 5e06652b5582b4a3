//! The real libc functions behind the interposed ones, found with `dlsym(RTLD_NEXT, name)`.
//!
//! Each pointer is resolved once (in the library's constructor, or lazily on the first
//! call if something calls in before it ran) and kept in an atomic, so the hot path is one
//! relaxed load and an indirect call. Where `dlsym` finds nothing (a libc without that
//! name), the wrapper falls back to the raw system call, so a missing symbol never turns
//! into a crash.
//!
//! Non-goals: versioned symbols (`dlvsym`): the default version is the one the program
//! would have bound to without us.

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int, c_void, iovec, off_t, size_t, ssize_t};

/// Descriptor numbers the library keeps per-number state for (the descriptor table's and
/// the emulated image's): at or above this, calls pass through (a table is 512 KiB of
/// untouched bss).
pub const FD_MAX: usize = 65_536;

/// A lazily resolved symbol: 0 = not looked up yet, 1 = looked up and absent.
pub struct Sym {
    name: &'static std::ffi::CStr,
    addr: AtomicUsize,
}

const ABSENT: usize = 1;

impl Sym {
    pub const fn new(name: &'static std::ffi::CStr) -> Sym {
        Sym { name, addr: AtomicUsize::new(0) }
    }

    /// The address of the next definition after this library, if there is one.
    #[inline]
    pub fn get(&self) -> Option<usize> {
        let mut a = self.addr.load(Ordering::Relaxed);
        if a == 0 {
            // SAFETY: RTLD_NEXT with a NUL-terminated name; dlsym only reads it.
            let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
            a = if p == 0 { ABSENT } else { p };
            self.addr.store(a, Ordering::Relaxed);
        }
        (a != ABSENT).then_some(a)
    }
}

pub static READ: Sym = Sym::new(c"read");
pub static WRITE: Sym = Sym::new(c"write");
pub static PREAD: Sym = Sym::new(c"pread64");
pub static PWRITE: Sym = Sym::new(c"pwrite64");
pub static PREADV: Sym = Sym::new(c"preadv64");
pub static PWRITEV: Sym = Sym::new(c"pwritev64");
pub static PREADV2: Sym = Sym::new(c"preadv64v2");
pub static PWRITEV2: Sym = Sym::new(c"pwritev64v2");
pub static SYSCALL: Sym = Sym::new(c"syscall");
pub static MMAP: Sym = Sym::new(c"mmap64");
pub static CLOSE: Sym = Sym::new(c"close");
pub static FSYNC: Sym = Sym::new(c"fsync");
pub static FDATASYNC: Sym = Sym::new(c"fdatasync");
pub static DUP: Sym = Sym::new(c"dup");
pub static DUP2: Sym = Sym::new(c"dup2");
pub static DUP3: Sym = Sym::new(c"dup3");
pub static FCNTL: Sym = Sym::new(c"fcntl");
pub static FCNTL64: Sym = Sym::new(c"fcntl64");
pub static OPEN: Sym = Sym::new(c"open");
pub static OPEN64: Sym = Sym::new(c"open64");
pub static OPENAT: Sym = Sym::new(c"openat");
pub static OPENAT64: Sym = Sym::new(c"openat64");
pub static CREAT: Sym = Sym::new(c"creat");
pub static CREAT64: Sym = Sym::new(c"creat64");
pub static CLOSE_RANGE: Sym = Sym::new(c"close_range");
pub static EXIT_: Sym = Sym::new(c"_exit");
pub static EXIT_UPPER: Sym = Sym::new(c"_Exit");
pub static EXECVE: Sym = Sym::new(c"execve");
pub static EXECV: Sym = Sym::new(c"execv");
pub static EXECVP: Sym = Sym::new(c"execvp");
pub static EXECVPE: Sym = Sym::new(c"execvpe");

/// Resolves every symbol now (from the constructor), so no lookup happens later in a
/// signal handler or between fork and exec.
pub fn resolve_all() {
    for s in [
        &READ,
        &WRITE,
        &PREAD,
        &PWRITE,
        &PREADV,
        &PWRITEV,
        &PREADV2,
        &PWRITEV2,
        &SYSCALL,
        &MMAP,
        &CLOSE,
        &FSYNC,
        &FDATASYNC,
        &DUP,
        &DUP2,
        &DUP3,
        &FCNTL,
        &FCNTL64,
        &OPEN,
        &OPEN64,
        &OPENAT,
        &OPENAT64,
        &CREAT,
        &CREAT64,
        &CLOSE_RANGE,
        &EXIT_,
        &EXIT_UPPER,
        &EXECVE,
        &EXECV,
        &EXECVP,
        &EXECVPE,
    ] {
        s.get();
    }
}

/// Calls the real function of type `$ty` at `$sym` with `$args`, or evaluates `$fallback`
/// when libc has no such symbol.
macro_rules! call_real {
    ($sym:expr, $ty:ty, $fallback:expr, $($args:expr),*) => {{
        match $sym.get() {
            // SAFETY: the symbol was found by name in libc, whose prototype is `$ty`
            // (declared beside each use from the libc headers).
            Some(addr) => unsafe { std::mem::transmute::<usize, $ty>(addr)($($args),*) },
            None => $fallback,
        }
    }};
}
pub(crate) use call_real;

type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
type WriteFn = unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
type PreadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, off_t) -> ssize_t;
type PwriteFn = unsafe extern "C" fn(c_int, *const c_void, size_t, off_t) -> ssize_t;
type PreadvFn = unsafe extern "C" fn(c_int, *const iovec, c_int, off_t) -> ssize_t;
type Preadv2Fn = unsafe extern "C" fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t;
pub type ExecveFn = unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;

/// The real `read`.
///
/// # Safety
/// `buf` must be valid for `len` bytes of writes (as for read(2)).
pub unsafe fn read(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t {
    // SAFETY: (fallback) the caller's guarantee is read(2)'s.
    call_real!(READ, ReadFn, unsafe { libc::syscall(libc::SYS_read, fd, buf, len) as ssize_t }, fd, buf, len)
}

/// The real `write`.
///
/// # Safety
/// `buf` must be valid for `len` bytes of reads.
pub unsafe fn write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t {
    // SAFETY: (fallback) the caller's guarantee is write(2)'s.
    call_real!(WRITE, WriteFn, unsafe { libc::syscall(libc::SYS_write, fd, buf, len) as ssize_t }, fd, buf, len)
}

/// The real `pread64`.
///
/// # Safety
/// `buf` must be valid for `len` bytes of writes.
pub unsafe fn pread(fd: c_int, buf: *mut c_void, len: size_t, off: off_t) -> ssize_t {
    call_real!(
        PREAD,
        PreadFn,
        // SAFETY: (fallback) the caller's guarantee is pread(2)'s.
        unsafe { libc::syscall(libc::SYS_pread64, fd, buf, len, off) as ssize_t },
        fd,
        buf,
        len,
        off
    )
}

/// The real `pwrite64`.
///
/// # Safety
/// `buf` must be valid for `len` bytes of reads.
pub unsafe fn pwrite(fd: c_int, buf: *const c_void, len: size_t, off: off_t) -> ssize_t {
    call_real!(
        PWRITE,
        PwriteFn,
        // SAFETY: (fallback) the caller's guarantee is pwrite(2)'s.
        unsafe { libc::syscall(libc::SYS_pwrite64, fd, buf, len, off) as ssize_t },
        fd,
        buf,
        len,
        off
    )
}

/// The real `preadv64`.
///
/// # Safety
/// `iov` must point to `cnt` valid iovecs whose buffers are valid for writes.
pub unsafe fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    call_real!(
        PREADV,
        PreadvFn,
        // SAFETY: (fallback) the caller's guarantee is preadv(2)'s; the kernel takes the
        // offset split in two longs, low then high (0 on 64-bit).
        unsafe { libc::syscall(libc::SYS_preadv, fd, iov, cnt, off, 0) as ssize_t },
        fd,
        iov,
        cnt,
        off
    )
}

/// The real `pwritev64`.
///
/// # Safety
/// `iov` must point to `cnt` valid iovecs whose buffers are valid for reads.
pub unsafe fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    call_real!(
        PWRITEV,
        PreadvFn,
        // SAFETY: (fallback) as preadv.
        unsafe { libc::syscall(libc::SYS_pwritev, fd, iov, cnt, off, 0) as ssize_t },
        fd,
        iov,
        cnt,
        off
    )
}

/// The real `preadv64v2`.
///
/// # Safety
/// As [`preadv`].
pub unsafe fn preadv2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: c_int) -> ssize_t {
    call_real!(
        PREADV2,
        Preadv2Fn,
        // SAFETY: (fallback) the caller's guarantee is preadv2(2)'s; the offset in two longs.
        unsafe { libc::syscall(libc::SYS_preadv2, fd, iov, cnt, off, 0, flags) as ssize_t },
        fd,
        iov,
        cnt,
        off,
        flags
    )
}

/// The real `pwritev64v2`.
///
/// # Safety
/// As [`pwritev`].
pub unsafe fn pwritev2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: c_int) -> ssize_t {
    call_real!(
        PWRITEV2,
        Preadv2Fn,
        // SAFETY: (fallback) as preadv2.
        unsafe { libc::syscall(libc::SYS_pwritev2, fd, iov, cnt, off, 0, flags) as ssize_t },
        fd,
        iov,
        cnt,
        off,
        flags
    )
}

/// The real `close`.
pub fn close(fd: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: (fallback) close has no memory preconditions.
    call_real!(CLOSE, F, unsafe { libc::syscall(libc::SYS_close, fd) as c_int }, fd)
}

/// The errno of the calling thread.
pub fn errno() -> c_int {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

pub fn set_errno(e: c_int) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = e };
}

//! The C ABI of libsmartcon.so (declared in include/smartcon.h): a port on a descriptor
//! the caller owns, positional reads and writes waited for as the decision says, the
//! counters, close.
//!
//! Errors are `-1` (or NULL) with errno set as pread(2)/pwrite(2) would set it, and a
//! message for `smartcon_last_error()` (per thread). A port is meant for one thread at a
//! time (the engine's port is Send, not Sync); concurrent use of one port is refused with
//! EBUSY rather than being undefined. Nothing here panics across the boundary: inputs are
//! checked, and the engine returns typed errors.
//!
//! Non-goals: asynchronous submission, registered buffers, and any memory the caller did
//! not hand over (the library never closes or duplicates the descriptor).

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};

use libc::{c_int, c_uint, c_void, size_t, ssize_t};
use smartcon_engine::decision::{Reason, Strategy};
use smartcon_engine::error::Error;

use crate::guard::Busy;
use crate::port::Port;

/// Bumped when a function's meaning or a struct's layout changes.
pub const ABI_VERSION: c_uint = 2;
/// Slots of `by_strategy` and `by_reason` in `smartcon_counters` (room to grow).
pub const COUNTER_SLOTS: usize = 16;
const _: () = assert!(Strategy::COUNT <= COUNTER_SLOTS && Reason::ALL.len() <= COUNTER_SLOTS);

/// An open port (opaque to C).
pub struct SmartconPort {
    in_use: AtomicBool,
    port: std::cell::UnsafeCell<Port>,
}

/// Mirrors `struct smartcon_counters` in include/smartcon.h.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SmartconCounters {
    pub ios: u64,
    pub bytes: u64,
    /// Indexed by SMARTCON_STRATEGY_* (block, spin, sync, hybrid, poll, half-mean,
    /// iopoll-hybrid, pas, dip).
    pub by_strategy: [u64; COUNTER_SLOTS],
    /// Indexed by SMARTCON_REASON_* (the decision's branches).
    pub by_reason: [u64; COUNTER_SLOTS],
    pub lat_ns_p50: u64,
    pub lat_ns_p99: u64,
    pub lat_ns_max: u64,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn fail(e: &Error) -> c_int {
    let errno = e.raw_os_error().unwrap_or(libc::EIO);
    let msg = CString::new(e.message.replace('\0', " ")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|l| *l.borrow_mut() = msg);
    crate::real::set_errno(errno);
    -1
}

fn fail_with(errno: c_int, message: &str) -> c_int {
    fail(&Error::os(smartcon_engine::error::ErrorKind::Usage, errno, message))
}

/// The ABI version of this library (SMARTCON_ABI_VERSION of the header it was built with).
#[no_mangle]
pub extern "C" fn smartcon_abi_version() -> c_uint {
    ABI_VERSION
}

/// Opens a port on `fd` (a regular file or block device the caller keeps open) with a
/// strategy name (`smart`, `block`, `spin`, `hybrid`, `smart-hybrid`; NULL = `smart`).
/// Returns NULL with errno set on failure.
///
/// # Safety
/// `strategy` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn smartcon_open(fd: c_int, strategy: *const c_char) -> *mut SmartconPort {
    let name = if strategy.is_null() {
        "smart".to_string()
    } else {
        // SAFETY: the caller's promise: NUL-terminated.
        unsafe { CStr::from_ptr(strategy) }.to_string_lossy().into_owned()
    };
    let Some(choice) = crate::config::parse_strategy(&name) else {
        fail_with(
            libc::EINVAL,
            &format!("unknown strategy {name:?}; use one of {}", crate::config::STRATEGY_NAMES.join(", ")),
        );
        return std::ptr::null_mut();
    };
    let _busy = Busy::try_enter();
    let options = smartcon_engine::smartport::SmartPortOptions { strategy: choice, ..Default::default() };
    match Port::open(fd, options) {
        Ok(port) => Box::into_raw(Box::new(SmartconPort { in_use: AtomicBool::new(false), port: port.into() })),
        Err(e) => {
            fail(&e);
            std::ptr::null_mut()
        }
    }
}

/// Runs `f` on the port if no other thread is using it.
///
/// # Safety
/// `port` is NULL or was returned by `smartcon_open` and not closed.
unsafe fn with_port<R>(port: *const SmartconPort, f: impl FnOnce(&mut Port) -> R) -> Result<R, c_int> {
    if port.is_null() {
        return Err(fail_with(libc::EBADF, "NULL port"));
    }
    // SAFETY: the caller's promise: a live port from smartcon_open.
    let p = unsafe { &*port };
    if p.in_use.swap(true, Ordering::Acquire) {
        return Err(fail_with(libc::EBUSY, "the port is in use by another thread; open one port per thread"));
    }
    let _busy = Busy::try_enter();
    // SAFETY: `in_use` gives this call exclusive access to the port until it is cleared.
    let r = f(unsafe { &mut *p.port.get() });
    p.in_use.store(false, Ordering::Release);
    Ok(r)
}

/// Reads `len` bytes at `offset`; returns the bytes read (fewer at end of file) or -1.
///
/// # Safety
/// `port` as in `with_port`; `buf` valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn smartcon_read_at(
    port: *mut SmartconPort,
    buf: *mut c_void,
    len: size_t,
    offset: u64,
) -> ssize_t {
    if buf.is_null() || len > isize::MAX as usize {
        return fail_with(libc::EFAULT, "NULL buffer or length past SSIZE_MAX") as ssize_t;
    }
    // SAFETY: the caller's promises.
    let r = unsafe { with_port(port, |p| p.read_at(std::slice::from_raw_parts_mut(buf.cast::<u8>(), len), offset)) };
    match r {
        Ok(Ok(n)) => n as ssize_t,
        Ok(Err(e)) => fail(&e) as ssize_t,
        Err(rc) => rc as ssize_t,
    }
}

/// Writes `len` bytes at `offset`; returns the bytes written or -1.
///
/// # Safety
/// `port` as in `with_port`; `buf` valid for `len` bytes of reads.
#[no_mangle]
pub unsafe extern "C" fn smartcon_write_at(
    port: *mut SmartconPort,
    buf: *const c_void,
    len: size_t,
    offset: u64,
) -> ssize_t {
    if buf.is_null() || len > isize::MAX as usize {
        return fail_with(libc::EFAULT, "NULL buffer or length past SSIZE_MAX") as ssize_t;
    }
    // SAFETY: the caller's promises.
    let r = unsafe { with_port(port, |p| p.write_at(std::slice::from_raw_parts(buf.cast::<u8>(), len), offset)) };
    match r {
        Ok(Ok(n)) => n as ssize_t,
        Ok(Err(e)) => fail(&e) as ssize_t,
        Err(rc) => rc as ssize_t,
    }
}

/// Fills `*out` with the port's counters; 0, or -1 with errno.
///
/// # Safety
/// `port` as in `with_port`; `out` NULL or valid for one `struct smartcon_counters`.
#[no_mangle]
pub unsafe extern "C" fn smartcon_counters(port: *const SmartconPort, out: *mut SmartconCounters) -> c_int {
    if out.is_null() {
        return fail_with(libc::EFAULT, "NULL counters");
    }
    // SAFETY: the caller's promise.
    let c = match unsafe { with_port(port, |p| p.counters()) } {
        Ok(c) => c,
        Err(rc) => return rc,
    };
    let mut o = SmartconCounters { ios: c.ios, bytes: c.bytes, ..Default::default() };
    o.by_strategy[..Strategy::COUNT].copy_from_slice(&c.by_strategy);
    o.by_reason[..Reason::ALL.len()].copy_from_slice(&c.by_reason);
    if c.ios > 0 {
        o.lat_ns_p50 = c.hist.value_at_quantile(0.5);
        o.lat_ns_p99 = c.hist.value_at_quantile(0.99);
        o.lat_ns_max = c.hist.max();
    }
    // SAFETY: the caller's promise: valid for one struct.
    unsafe { out.write(o) };
    0
}

/// The message of this thread's last failed call ("" if none). Valid until the next
/// call into the library on this thread.
#[no_mangle]
pub extern "C" fn smartcon_last_error() -> *const c_char {
    LAST_ERROR.try_with(|l| l.borrow().as_ptr()).unwrap_or(c"".as_ptr())
}

/// Closes a port (not the descriptor). NULL is ignored.
///
/// # Safety
/// `port` is NULL or from `smartcon_open`, not used by another thread, and not used again.
#[no_mangle]
pub unsafe extern "C" fn smartcon_close(port: *mut SmartconPort) {
    if !port.is_null() {
        let _busy = Busy::try_enter();
        // SAFETY: the caller's promise: from smartcon_open (Box::into_raw), closed once.
        drop(unsafe { Box::from_raw(port) });
    }
}

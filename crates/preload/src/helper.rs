//! Helper processes that share the program's memory (`clone(CLONE_VM)` without
//! `CLONE_THREAD`), as User-Mode Linux starts its ubd I/O thread and its SIGIO thread.
//!
//! Two things go wrong for such a helper under the library, and both are fixed here by
//! interposing glibc's `clone` while emulation is on:
//!
//! - **Its stack is tiny.** UML gives its helpers one page (4 KiB). The library's served
//!   I/O, the model and the clock's idle check need more, and overflowing it writes over the
//!   guest kernel's memory (a kernel panic in the guest). The helper runs on a stack of the
//!   library's instead ([`STACK_BYTES`], with a guard page), registered here by address.
//! - **Its TLS is its creator's.** Without `CLONE_SETTLS` the helper's thread pointer is
//!   the creating thread's, so the library's thread-locals (the "inside the library" flag)
//!   would be shared by two threads running at once. A helper is recognised by its stack
//!   pointer lying in one of the registered stacks ([`current`]), and keeps its flag here.
//!
//! Under virtual time the helper also joins the clock's domain (its thread is counted, so
//! the clock does not jump while it runs), as a forked child does.
//!
//! Non-goals: other architectures than x86-64 (the interposed `clone` reads its optional
//! arguments as the x86-64 calling convention passes them), more than [`HELPERS_MAX`]
//! helpers (later ones run on their own stack, untouched), and freeing a helper's stack
//! (helpers live as long as the program).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use libc::{c_int, c_void, pid_t};

use crate::real::Sym;

/// Helpers that get a stack of the library's, at most.
pub const HELPERS_MAX: usize = 8;
/// Each helper's stack (the guard page below it is extra).
pub const STACK_BYTES: usize = 1 << 20;
const GUARD_BYTES: usize = 4096;

struct Helper {
    /// The stack's lowest and one-past-highest address; 0: free.
    low: AtomicUsize,
    high: AtomicUsize,
    func: AtomicUsize,
    arg: AtomicUsize,
    /// The helper is inside the library (its share of `process::inside`).
    busy: AtomicBool,
}

static HELPERS: [Helper; HELPERS_MAX] = [const {
    Helper {
        low: AtomicUsize::new(0),
        high: AtomicUsize::new(0),
        func: AtomicUsize::new(0),
        arg: AtomicUsize::new(0),
        busy: AtomicBool::new(false),
    }
}; HELPERS_MAX];
/// Slots handed out (a slot is never reused).
static USED: AtomicUsize = AtomicUsize::new(0);

/// The helper slot of the calling thread, if it runs on a helper stack of ours.
#[inline]
pub fn current() -> Option<usize> {
    let used = USED.load(Ordering::Acquire).min(HELPERS_MAX);
    if used == 0 {
        return None;
    }
    let marker = 0u8;
    let sp = std::ptr::addr_of!(marker) as usize;
    (0..used).find(|&i| {
        let h = &HELPERS[i];
        let (low, high) = (h.low.load(Ordering::Acquire), h.high.load(Ordering::Acquire));
        low != 0 && (low..high).contains(&sp)
    })
}

/// The helper's "inside the library" flag: swaps in `value`, returns the old one.
pub fn swap_busy(index: usize, value: bool) -> bool {
    HELPERS[index].busy.swap(value, Ordering::AcqRel)
}

pub fn busy(index: usize) -> bool {
    HELPERS[index].busy.load(Ordering::Acquire)
}

/// The helper's first code on its new stack: joins the clock's domain, then runs the
/// program's function and returns its status (the helper's exit status).
extern "C" fn trampoline(index: *mut c_void) -> c_int {
    let h = &HELPERS[index as usize];
    crate::vclock::join_domain();
    let func = h.func.load(Ordering::Acquire);
    let arg = h.arg.load(Ordering::Acquire) as *mut c_void;
    // SAFETY: `func` is the non-null function pointer the program passed to clone (checked
    // there), stored unchanged; it is called as clone would have called it.
    let func: extern "C" fn(*mut c_void) -> c_int = unsafe { std::mem::transmute(func) };
    func(arg)
}

static CLONE: Sym = Sym::new(c"clone");

type CloneFn = unsafe extern "C" fn(
    Option<extern "C" fn(*mut c_void) -> c_int>,
    *mut c_void,
    c_int,
    *mut c_void,
    *mut pid_t,
    *mut c_void,
    *mut pid_t,
) -> c_int;

/// A fresh stack with a guard page below it: (low, high), or None.
fn new_stack() -> Option<(usize, usize)> {
    // SAFETY: a fresh anonymous private mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK_BYTES + GUARD_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the first page of the mapping just made; an overflow then faults instead of
    // writing into whatever lies below.
    unsafe { libc::mprotect(p, GUARD_BYTES, libc::PROT_NONE) };
    let low = p as usize + GUARD_BYTES;
    Some((low, low + STACK_BYTES))
}

/// glibc's `clone`, with the optional arguments read as x86-64 passes them (the sixth
/// and seventh from r9 and the stack, whether or not the caller passed them).
///
/// # Safety
/// As clone(2) (glibc's wrapper).
#[cfg(target_arch = "x86_64")]
#[no_mangle]
pub unsafe extern "C" fn clone(
    func: Option<extern "C" fn(*mut c_void) -> c_int>,
    stack: *mut c_void,
    flags: c_int,
    arg: *mut c_void,
    parent_tid: *mut pid_t,
    tls: *mut c_void,
    child_tid: *mut pid_t,
) -> c_int {
    let Some(real) = CLONE.get() else {
        crate::real::set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: the address dlsym gave for glibc's clone, whose arguments these are. Extra
    // optional arguments are read by it only when `flags` asks for them (then the caller
    // passed them), so forwarding unpassed register/stack contents is harmless.
    let real: CloneFn = unsafe { std::mem::transmute::<usize, CloneFn>(real) };
    let helper = flags & libc::CLONE_VM != 0 && flags & libc::CLONE_THREAD == 0;
    if !helper || func.is_none() || !crate::emu::active() {
        // SAFETY: forwarded unchanged.
        return unsafe { real(func, stack, flags, arg, parent_tid, tls, child_tid) };
    }
    let index = USED.fetch_add(1, Ordering::AcqRel);
    let stack_range = if index < HELPERS_MAX { new_stack() } else { None };
    let Some((low, high)) = stack_range else {
        // SAFETY: forwarded unchanged (no slot or no memory: the helper's own stack).
        return unsafe { real(func, stack, flags, arg, parent_tid, tls, child_tid) };
    };
    let h = &HELPERS[index];
    h.func.store(func.map_or(0, |f| f as usize), Ordering::Release);
    h.arg.store(arg as usize, Ordering::Release);
    h.high.store(high, Ordering::Release);
    h.low.store(low, Ordering::Release);
    // 16-byte aligned top, as the ABI wants at a call.
    let top = (high - 64) & !15;
    // SAFETY: `top` is inside a live mapping of ours that nothing else uses; the trampoline
    // calls the program's function with its argument, as clone would have.
    unsafe { real(Some(trampoline), top as *mut c_void, flags, index as *mut c_void, parent_tid, tls, child_tid) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_off_the_helper_stacks_is_no_helper() {
        assert_eq!(current(), None);
    }
}

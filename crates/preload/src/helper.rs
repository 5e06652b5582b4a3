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
//! This file is the registry of helper stacks (base layer: the "inside the library" mark of
//! [`crate::guard`] needs it); the interposed `clone` that fills it is [`crate::clone`].
//!
//! Non-goals: other architectures than x86-64 (the interposed `clone` reads its optional
//! arguments as the x86-64 calling convention passes them), more than [`HELPERS_MAX`]
//! helpers (later ones run on their own stack, untouched), and freeing a helper's stack
//! (helpers live as long as the program).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

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
    /// Its process id, as clone returned it to its creator (0: not known).
    pid: AtomicU32,
}

static HELPERS: [Helper; HELPERS_MAX] = [const {
    Helper {
        low: AtomicUsize::new(0),
        high: AtomicUsize::new(0),
        func: AtomicUsize::new(0),
        arg: AtomicUsize::new(0),
        busy: AtomicBool::new(false),
        pid: AtomicU32::new(0),
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

/// Claims a helper slot for a helper that will run `func(arg)`: a fresh stack of the
/// library's, registered, and the 16-byte aligned top to start it on with the slot's index
/// as its argument. None past [`HELPERS_MAX`] or without memory (the helper then runs on
/// its own stack, untouched).
pub fn claim(func: usize, arg: usize) -> Option<(usize, usize)> {
    let index = USED.fetch_add(1, Ordering::AcqRel);
    let (low, high) = if index < HELPERS_MAX { new_stack()? } else { return None };
    let h = &HELPERS[index];
    h.func.store(func, Ordering::Release);
    h.arg.store(arg, Ordering::Release);
    h.high.store(high, Ordering::Release);
    h.low.store(low, Ordering::Release);
    // 16-byte aligned top, as the ABI wants at a call.
    Some((index, (high - 64) & !15))
}

/// Records the process id of the helper of slot `index`.
pub fn set_pid(index: usize, pid: u32) {
    HELPERS[index].pid.store(pid, Ordering::Release);
}

/// Whether `pid` is one of the helpers started here.
pub fn is_helper_pid(pid: u32) -> bool {
    let used = USED.load(Ordering::Acquire).min(HELPERS_MAX);
    HELPERS[..used].iter().any(|h| h.pid.load(Ordering::Acquire) == pid)
}

/// The function and argument the helper of slot `index` runs.
pub fn entry(index: usize) -> (usize, usize) {
    let h = &HELPERS[index];
    (h.func.load(Ordering::Acquire), h.arg.load(Ordering::Acquire))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_off_the_helper_stacks_is_no_helper() {
        assert_eq!(current(), None);
    }
}

//! The two guards every layer of the library takes: [`Spin`], a spin lock a fork handler
//! can release in the child, and [`Busy`], the "inside the library" mark that sends the
//! library's own calls (and those of a signal handler that interrupts it) straight to the
//! real functions.
//!
//! Base layer: depends on nothing in the crate but [`crate::helper`]'s stack registry (a
//! clone helper shares its creator's TLS, so its mark lives there).

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, Ordering};

/// A minimal spin lock whose state a fork handler can reset.
pub struct Spin<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialized by `locked` (acquire/release).
unsafe impl<T: Send> Sync for Spin<T> {}

pub struct SpinGuard<'a, T>(&'a Spin<T>);

impl<T> Spin<T> {
    pub const fn new(value: T) -> Spin<T> {
        Spin { locked: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    pub fn lock(&self) -> SpinGuard<'_, T> {
        while self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::thread::yield_now();
        }
        SpinGuard(self)
    }

    /// Releases a lock held across fork (the guard was forgotten in the prepare handler).
    pub(crate) fn unlock_after_fork(&self) {
        self.locked.store(false, Ordering::Release);
    }

    /// The value, for a fork's child whose prepare handler holds the lock (the child is
    /// single-threaded, so nothing else can be inside it).
    ///
    /// # Safety
    /// The caller holds the lock (a guard forgotten across fork) and no other reference
    /// to the value is live.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn held_value(&self) -> &mut T {
        // SAFETY: the caller's promise: the lock is held and the reference is unique.
        unsafe { &mut *self.value.get() }
    }
}

impl<T> std::ops::Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock.
        unsafe { &*self.0.value.get() }
    }
}

impl<T> std::ops::DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock exclusively.
        unsafe { &mut *self.0.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.0.locked.store(false, Ordering::Release);
    }
}

thread_local! {
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Marks the thread as inside the library: calls it makes itself (or a signal handler
/// makes meanwhile) go straight to the real functions.
pub struct Busy(());

impl Busy {
    /// `None` when the thread is already inside the library.
    pub fn try_enter() -> Option<Busy> {
        // A helper sharing its creator's TLS (crate::helper) keeps its own flag.
        let was = match crate::helper::current() {
            Some(i) => crate::helper::swap_busy(i, true),
            None => BUSY.try_with(|b| b.replace(true)).unwrap_or(true),
        };
        // Lazily: a guard built and dropped here would clear the flag of the outer call.
        (!was).then(|| Busy(()))
    }

    /// Enters whether or not the thread is inside already (the exit paths).
    pub fn enter() -> Busy {
        match crate::helper::current() {
            Some(i) => {
                crate::helper::swap_busy(i, true);
            }
            None => {
                let _ = BUSY.try_with(|b| b.set(true));
            }
        }
        Busy(())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        match crate::helper::current() {
            Some(i) => {
                crate::helper::swap_busy(i, false);
            }
            None => {
                let _ = BUSY.try_with(|b| b.set(false));
            }
        }
    }
}

thread_local! {
    /// The I/O a port is making for this thread now: its descriptor and buffer address.
    static OWN_IO: Cell<(i32, usize)> = const { Cell::new((-1, 0)) };
}

/// Marks the I/O a port makes for the calling thread (see [`is_own_io`]) until dropped.
/// A port's `sync` wait is the plain pread/pwrite, which is this library's own interposed
/// function: without the mark it went through the interposer a second time and was
/// counted as a call of the program's passed through ("reentrant"), one per I/O taken.
/// Not on a helper's stack (a helper shares its creator's thread-local storage).
pub struct OwnIo {
    prev: Option<(i32, usize)>,
}

impl OwnIo {
    pub fn mark(fd: i32, addr: usize) -> OwnIo {
        if crate::helper::current().is_some() {
            return OwnIo { prev: None };
        }
        OwnIo { prev: OWN_IO.try_with(|c| c.replace((fd, addr))).ok() }
    }
}

impl Drop for OwnIo {
    fn drop(&mut self) {
        if let Some(prev) = self.prev {
            let _ = OWN_IO.try_with(|c| c.set(prev));
        }
    }
}

/// Whether a call on `fd` with the buffer at `addr` is the one a port is making for this
/// thread ([`OwnIo`]): the library's own, to be sent to the real function uncounted. A
/// signal handler's call meanwhile has a buffer of its own, so it is not mistaken for it.
#[inline]
pub fn is_own_io(fd: i32, addr: usize) -> bool {
    let own = OWN_IO.try_with(|c| c.get()).unwrap_or((-1, 0));
    own.0 == fd && own.1 == addr && crate::helper::current().is_none()
}

/// Whether the thread is inside the library now (its own calls see real time).
pub fn inside() -> bool {
    match crate::helper::current() {
        Some(i) => crate::helper::busy(i),
        None => BUSY.try_with(|b| b.get()).unwrap_or(true),
    }
}

//! A request while its thread waits: on that thread's stack, reached by other threads by raw
//! pointer ([`ReqPtr`]) from the moment it is queued until it is DONE, and the guard that
//! aborts rather than unwind while they may (the module documentation of `merge`, "Shared
//! requests and unwinding").

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::thread::Thread;

use smartcon_devemu::Op;
use smartcon_engine::verify;

pub(super) const QUEUED: u32 = 0;
pub(super) const LEAD: u32 = 1;
pub(super) const DONE: u32 = 2;

/// Aborts the process if dropped: it is dropped only by unwinding out of the region in
/// which other threads may hold a [`ReqPtr`] to a request on this thread's stack (the
/// normal path ends the region with [`AbortOnUnwind::disarm`]).
pub(super) struct AbortOnUnwind;

impl AbortOnUnwind {
    pub(super) fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        eprintln!(
            "smartcon merge: a thread panicked while other threads could still reach its queued request; \
             aborting rather than freeing memory they use"
        );
        std::process::abort();
    }
}

/// A request while its thread waits in [`Waiter::io`]; it lives on that thread's stack.
pub(super) struct Request {
    pub(super) op: Op,
    pub(super) offset: u64,
    /// The waiter's buffer (`bs_bytes`). The waiter does not touch it between enqueueing the
    /// request and seeing `DONE`; only the thread doing the post-I/O work writes it.
    pub(super) buf: *mut u8,
    pub(super) thread: Thread,
    pub(super) state: AtomicU32,
    /// The channel handed over with `LEAD`.
    pub(super) lead_channel: AtomicU32,
    /// Its thread leads a channel now (changed only under the queue lock).
    pub(super) leading: AtomicBool,
    /// How many times it was released; must end at exactly 1.
    pub(super) released: AtomicU32,
    /// Written by the post-I/O work before `DONE` (Release), read by the waiter after it
    /// (Acquire).
    pub(super) mismatch: UnsafeCell<Option<verify::Mismatch>>,
}

/// A pointer to a request parked in the queue or carried by a batch.
#[derive(Clone, Copy)]
pub(super) struct ReqPtr(pub(super) *const Request);

// SAFETY: a Request outlives every ReqPtr to it: its thread stays in `Waiter::io` until the
// request is DONE, and nothing dereferences a ReqPtr after storing DONE into it. A panic on
// that thread before then aborts the process (`AbortOnUnwind`), so the frame is never
// unwound while a ReqPtr to it exists.
unsafe impl Send for ReqPtr {}

impl ReqPtr {
    /// # Safety
    /// The request must not be DONE yet (its thread is still waiting in `Waiter::io`).
    pub(super) unsafe fn get<'a>(self) -> &'a Request {
        // SAFETY: the caller guarantees the request is not DONE, so its frame is alive.
        unsafe { &*self.0 }
    }
}

pub(super) struct Queue {
    pub(super) pending: VecDeque<ReqPtr>,
    /// A merged request is in flight (or in its post-I/O work) on the channel.
    pub(super) busy: Vec<bool>,
}

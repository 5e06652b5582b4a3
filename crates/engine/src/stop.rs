//! Stop flags that cannot be forgotten.
//!
//! A run's threads end when a shared `AtomicBool` is set: by Ctrl-C, by the measuring
//! thread when its turn is over, or by a worker that failed. If the thread that should set
//! it panics instead, the others would spin or sleep until their own duration runs out,
//! and a `std::thread::scope` around them would wait that long (or forever, for loads that
//! run until told to stop). So the flag is set by a guard's `Drop`, which also runs while
//! a panic unwinds, and the scope's join turns the panic into an [`ErrorKind::Internal`]
//! error instead of hanging or aborting the report.
//!
//! The process-wide flag ([`global`]) is for waits that no caller's flag reaches: an
//! emulated completion seconds away, a temporary file's fill, a job's prefill. The binary's
//! SIGINT/SIGTERM handler sets it (the engine knows nothing of signals or the CLI), and
//! those waits read it between bounded slices ([`WAIT_SLICE_NS`]), so Ctrl-C ends them
//! within a slice with an [`ErrorKind::Interrupted`] error. Waits shorter than a slice (the
//! per-I/O fast path) never look at it.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, ErrorKind};

/// The longest a wait or fill runs between two looks at the [`global`] flag.
pub const WAIT_SLICE_NS: u64 = 100_000_000;

static GLOBAL: AtomicBool = AtomicBool::new(false);

/// The process-wide stop flag. A signal handler may set it (an atomic store is
/// async-signal-safe); nothing in the engine clears it.
pub fn global() -> &'static AtomicBool {
    &GLOBAL
}

/// Whether the process was told to stop.
#[inline]
pub fn requested() -> bool {
    GLOBAL.load(Ordering::Relaxed)
}

/// The error a wait or fill returns when [`global`] stopped it.
pub fn interrupted(what: &str) -> Error {
    Error::os(ErrorKind::Interrupted, libc::EINTR, format!("interrupted while {what}"))
}

/// Sets the flag when dropped: at the end of the scope that holds it, normal or unwinding.
/// Held by the thread whose end must stop the others (the measuring side of a turn).
#[must_use = "the flag is set when the guard drops; bind it to a named variable"]
pub struct StopOnDrop<'a>(pub &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Sets the flag only if dropped while the thread panics. Held by workers whose normal end
/// must not stop the others, but whose crash must.
#[must_use = "the flag is set when the guard drops; bind it to a named variable"]
pub struct StopOnPanic<'a>(pub &'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

/// Joins a scoped thread, turning a panic into an error that names the thread's role.
pub fn join<T>(handle: std::thread::ScopedJoinHandle<'_, T>, role: &str) -> Result<T, Error> {
    handle.join().map_err(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        Error::new(ErrorKind::Internal, format!("the {role} thread panicked ({what}); the run was stopped"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_thread_stops_the_others_and_becomes_an_error() {
        let stop = AtomicBool::new(false);
        let (waited, crashed) = std::thread::scope(|s| {
            // Without the guard this waiter would never end.
            let waiter = s.spawn(|| {
                while !stop.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                true
            });
            let crasher = s.spawn(|| {
                let _guard = StopOnPanic(&stop);
                panic!("boom");
            });
            (join(waiter, "waiting"), join(crasher, "crashing"))
        });
        assert!(waited.unwrap());
        let e = crashed.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Internal);
        assert!(e.message.contains("crashing") && e.message.contains("boom"), "{e}");
    }

    #[test]
    fn stop_on_panic_leaves_the_flag_alone_on_a_normal_end_and_stop_on_drop_sets_it() {
        let stop = AtomicBool::new(false);
        drop(StopOnPanic(&stop));
        assert!(!stop.load(Ordering::SeqCst));
        drop(StopOnDrop(&stop));
        assert!(stop.load(Ordering::SeqCst));
    }
}

//! What runs when the library loads, and the fork and exit handlers of the emulated image:
//! the one place that ties the services (the image, the clock's domain) to the interposed
//! calls that hold locks across a fork (libaio's held events, the condition-variable clocks).
//!
//! Interposition layer (the top): it may reach every layer below; nothing reaches it.

use crate::vclock::domain;

/// Runs when the shared object is loaded (before the program's `main`): the configuration,
/// the interposition's per-process state, then the emulated image (whose waits follow the
/// configuration's strategy) with its fork and exit handlers.
pub fn on_load() {
    crate::real::resolve_all();
    crate::config::init();
    crate::process::init();
    if crate::emu::init() {
        // SAFETY: plain extern "C" handlers that live as long as the process.
        unsafe {
            libc::pthread_atfork(Some(emu_fork_prepare), Some(emu_fork_parent), Some(emu_fork_child));
            libc::atexit(emu_at_exit);
        }
    } else if crate::process::active() {
        // Taken libaio requests are held per process (crate::aio).
        // SAFETY: as above.
        unsafe { libc::pthread_atfork(Some(aio_fork_prepare), Some(aio_fork_parent), Some(aio_fork_child)) };
    }
}

extern "C" fn aio_fork_prepare() {
    crate::aio::fork_prepare();
}

extern "C" fn aio_fork_parent() {
    crate::aio::fork_parent();
}

extern "C" fn aio_fork_child() {
    crate::aio::fork_child();
}

extern "C" fn emu_fork_prepare() {
    crate::aio::fork_prepare();
    crate::emu::fork_prepare();
    crate::waits::fork_prepare();
    domain::fork_prepare();
}

extern "C" fn emu_fork_parent() {
    domain::fork_parent();
    crate::waits::fork_parent_or_child();
    crate::emu::fork_parent();
    crate::aio::fork_parent();
}

extern "C" fn emu_fork_child() {
    domain::fork_child();
    crate::waits::fork_parent_or_child();
    crate::emu::fork_child();
    crate::aio::fork_child();
    crate::bypass::reset();
}

extern "C" fn emu_at_exit() {
    crate::emu::flush();
}

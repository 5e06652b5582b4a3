//! smartcon for programs that were not written for it: `libsmartcon.so`.
//!
//! One shared object with two faces:
//!
//! - **Interposition** (`LD_PRELOAD`, set up by `smartcon run -- CMD`): the library takes
//!   over `pread`/`pwrite` (and `pread64`, `pwrite64`, single-buffer `preadv`/`pwritev`
//!   and `preadv2`/`pwritev2` with flags 0 or RWF_HIPRI, `read`, `write`) on descriptors of regular files and block devices opened with
//!   O_DIRECT, and sends each through a per-thread port of the engine, which decides per
//!   I/O how the thread waits ([`shim`], [`port`]). Everything else goes to the real libc
//!   function, and so does anything the library cannot do exactly as the system call
//!   would. It is active only when `SMARTCON_PRELOAD_STRATEGY` is set ([`config`]); each
//!   process appends its counters to `SMARTCON_PRELOAD_STATS` at exit ([`record`]).
//! - **A C ABI** ([`capi`], `include/smartcon.h`): open a port on a descriptor, read and
//!   write at an offset with the decision, read the counters, close.
//!
//! libaio's wait is taken too ([`aio`]): requests on taken descriptors go to the kernel
//! unchanged, and `io_getevents` waits for them as the decision said at submission (polling
//! the completion ring, or the kernel's wait). On an `--emulate` image libaio is emulated.
//! What it cannot take it names ([`bypass`]): io_uring rings, libaio requests it does not
//! take, memory maps of files, raw `syscall(2)` I/O, and passed-through calls by reason, in
//! each record.
//!
//! Non-goals: statically linked programs (LD_PRELOAD cannot reach them; `smartcon run`
//! says so), taking io_uring waits (the ring is shared memory no call crosses), memory-mapped
//! files, and vectored calls with more than one buffer (passed through).

//! Layers (each reaches only the ones below it; `scripts/check-preload-layers.sh` fails on
//! an edge upwards or a circle):
//!
//! 1. interposition: the interposed calls and the C ABI ([`shim`], [`aio`], [`waits`],
//!    [`vtimer`], [`vclock::interpose`], [`clone`], [`capi`]) and what runs at load
//!    ([`lifecycle`]);
//! 2. per-descriptor routing: which descriptor goes where, and each thread's ports
//!    ([`fdtable`], [`process`]);
//! 3. device and clock services: the emulated image ([`emu`]), the engine's port
//!    ([`port`]), the monitor and in-flight counters ([`devices`]), the clock's domain and
//!    its waits ([`vclock::domain`], [`vclock::sleep`]), the tracees' kept FP state
//!    ([`fpset`]);
//! 4. base: the real libc ([`real`]), the guards ([`guard`]), the clone helpers' stacks
//!    ([`helper`]), the configuration ([`config`]), counters and records ([`bypass`],
//!    [`record`]).

pub mod aio;
pub mod bypass;
pub mod capi;
pub mod clone;
pub mod config;
pub mod devices;
pub mod emu;
pub mod fdtable;
pub mod fpset;
pub mod guard;
pub mod helper;
pub mod lifecycle;
pub mod port;
pub mod process;
pub mod real;
pub mod record;
pub mod shim;
pub mod vclock;
pub mod vtimer;
pub mod waits;

/// Runs when the shared object is loaded (before the program's `main`).
extern "C" fn on_load() {
    lifecycle::on_load();
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

//! The program's virtual clock (`smartcon run --emulate ... --virtual-time`).
//!
//! Design: the program's time is the real monotonic clock plus a skew. The skew, the last
//! instant handed out and the table of waits live in one page mapped `MAP_SHARED` before
//! the program's first fork (the domain), so the processes the program forks share one
//! clock. A wait registers its thread with its target instant (virtual monotonic ns), or
//! none: device waits and sleeps ([`sleep::wait_until`]), condition variables, semaphores
//! and descriptor waits in [`crate::waits`]. Then:
//!
//! - when every thread of every process of the domain is registered (the seed's idle
//!   skipping: nothing in the program can run before the earliest target), the skew is
//!   set so that the clock reads the earliest target (never less than anything already
//!   handed out): the wait costs no real time, and the real time the emulator spent since
//!   the last instant the program saw is hidden from this one program's clock (the seed
//!   pauses a whole OS's state instead; the kernel and other processes keep real time).
//!   A wait that an event can end (a condition variable, a descriptor) counts only while
//!   the kernel has its thread asleep (state S in /proc), so a wake-up already delivered
//!   holds the clock until that thread runs; a wait whose target has come counts as
//!   running;
//! - otherwise the thread waits in real time, in slices of at most [`domain::RECHECK_NS`],
//!   and a jump that reaches its target wakes it (a futex word per wait).
//!
//! Thread counts come from /proc/PID/stat of each process in the domain (a process that
//! is gone or a zombie leaves it); a process the program started with exec has its own
//! domain and, while it lives, counts as running in its parent's. The jump is decided on
//! a snapshot taken without the lock and made under it only if no wait registered or
//! left meanwhile. Every clock the program reads (CLOCK_MONOTONIC, REALTIME, BOOTTIME,
//! their _RAW, _COARSE and _ALARM variants) moves by the same skew, and the monotonic
//! family never goes back (`last_ns`). CPU-time clocks are not touched.
//!
//! Non-goals: time read without libc (raw `syscall(SYS_clock_gettime)`, `rdtsc`, a statically
//! linked program), time across `exec` (the new image starts a domain at the real clock),
//! signals during a virtual sleep (the sleep is not interrupted), more than
//! [`domain::DOMAIN_PIDS_MAX`] processes (jumping then stops) or [`domain::DOMAIN_WAITS_MAX`] waits at once
//! (the rest count as running). A thread blocked where nothing is interposed (a futex
//! called directly, `pthread_join`, `wait4`, a blocking `read`) counts as running, so the
//! clock then runs in real time.
//!
//! Three rooms, by job:
//!
//! - [`domain`]: the shared-memory domain (the page, its lock, registration, the /proc
//!   count, the jump) and the clock readings built on it. No interposed function.
//! - [`sleep`]: waiting on a clock: the virtual wait ([`sleep::wait_until`]) and the
//!   real-time waits of a served device request, one per way of waiting
//!   ([`sleep::DeviceWait`]).
//! - [`interpose`]: the interposed clock and sleep functions (`clock_gettime`,
//!   `gettimeofday`, `time`, `nanosleep`, `clock_nanosleep`, `usleep`, `sleep`).
//!
//! Layers: `interpose` -> `sleep` -> `domain`; nothing here reaches up to the descriptor
//! routing or the interposed I/O calls (scripts/check-preload-layers.sh checks it).

pub mod domain;
pub mod interpose;
pub mod ownclock;
pub mod sleep;

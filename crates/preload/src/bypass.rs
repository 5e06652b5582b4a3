//! What went around the library: calls on taken descriptors that were passed through (by
//! reason), and the ways of reaching data the library saw but does not take (io_uring,
//! libaio, memory maps, raw system calls). Counted per process image, so the exit records
//! and `smartcon run`'s summary say what was not taken instead of reporting a plain success.
//!
//! Only counters (relaxed atomics): no allocation, safe from any thread and from a signal
//! handler. A fork's child starts from zero (its own record).

use std::sync::atomic::{AtomicU64, Ordering};

/// Why a call on a taken descriptor went to the real system call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The port refused it (an unaligned O_DIRECT buffer, length or offset) or failed; the
    /// real call gave the kernel's own answer.
    Refused,
    /// Made while the thread was already inside the library (a signal handler's I/O).
    Reentrant,
    /// No port could be opened on the descriptor (io_uring unavailable, ...).
    NoPort,
    /// `read`/`write` on a descriptor whose offset another process may share.
    SharedOffset,
    /// A write on an O_APPEND descriptor.
    Append,
    /// A vectored call with more than one buffer.
    Vectored,
    /// `preadv2`/`pwritev2` with flags other than RWF_HIPRI (RWF_NOWAIT, RWF_DSYNC, ...),
    /// which keep the kernel's meaning.
    RwfFlags,
}

impl Pass {
    pub const ALL: [Pass; 7] = [
        Pass::Refused,
        Pass::Reentrant,
        Pass::NoPort,
        Pass::SharedOffset,
        Pass::Append,
        Pass::Vectored,
        Pass::RwfFlags,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Pass::Refused => "refused",
            Pass::Reentrant => "reentrant",
            Pass::NoPort => "no_port",
            Pass::SharedOffset => "shared_offset",
            Pass::Append => "append",
            Pass::Vectored => "vectored",
            Pass::RwfFlags => "rwf_flags",
        }
    }
}

/// A way of reaching data that the library saw and did not take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// io_uring rings set up by the program (`io_uring_setup` through `syscall(2)`, or
    /// liburing's `io_uring_queue_init*`): its I/O is submitted in shared memory.
    IoUring,
    /// libaio requests (iocbs) submitted with `io_submit` that were neither taken nor
    /// emulated.
    Libaio,
    /// Memory maps of regular files on a block device: page faults read them.
    Mmap,
    /// Reads and writes made with `syscall(2)` directly (SYS_pread64, SYS_preadv2, ...).
    RawSyscall,
}

impl Seen {
    pub const ALL: [Seen; 4] = [Seen::IoUring, Seen::Libaio, Seen::Mmap, Seen::RawSyscall];

    pub fn name(self) -> &'static str {
        match self {
            Seen::IoUring => "io_uring",
            Seen::Libaio => "libaio",
            Seen::Mmap => "mmap",
            Seen::RawSyscall => "raw_syscall",
        }
    }
}

static PASS: [AtomicU64; Pass::ALL.len()] = [const { AtomicU64::new(0) }; Pass::ALL.len()];
static SEEN: [AtomicU64; Seen::ALL.len()] = [const { AtomicU64::new(0) }; Seen::ALL.len()];
/// The same kinds, counted only when they concern the emulated image (or, for io_uring,
/// any ring while an image is emulated: its requests cannot be told apart).
static AROUND_MODEL: [AtomicU64; Seen::ALL.len()] = [const { AtomicU64::new(0) }; Seen::ALL.len()];
/// Taken calls that asked to be polled (`RWF_HIPRI`).
static HIPRI: AtomicU64 = AtomicU64::new(0);

pub fn passed(why: Pass) {
    PASS[why as usize].fetch_add(1, Ordering::Relaxed);
}

pub fn seen(what: Seen, n: u64) {
    SEEN[what as usize].fetch_add(n, Ordering::Relaxed);
}

pub fn around_model(what: Seen, n: u64) {
    AROUND_MODEL[what as usize].fetch_add(n, Ordering::Relaxed);
}

pub fn hipri() {
    HIPRI.fetch_add(1, Ordering::Relaxed);
}

pub fn passed_total() -> u64 {
    PASS.iter().map(|c| c.load(Ordering::Relaxed)).sum()
}

pub fn passed_by() -> Vec<(&'static str, u64)> {
    Pass::ALL.iter().map(|p| (p.name(), PASS[*p as usize].load(Ordering::Relaxed))).filter(|(_, n)| *n > 0).collect()
}

pub fn seen_by() -> Vec<(&'static str, u64)> {
    Seen::ALL.iter().map(|s| (s.name(), SEEN[*s as usize].load(Ordering::Relaxed))).filter(|(_, n)| *n > 0).collect()
}

pub fn around_model_by() -> Vec<(&'static str, u64)> {
    Seen::ALL
        .iter()
        .map(|s| (s.name(), AROUND_MODEL[*s as usize].load(Ordering::Relaxed)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

pub fn hipri_count() -> u64 {
    HIPRI.load(Ordering::Relaxed)
}

/// A fork's child starts its own counts.
pub fn reset() {
    for c in PASS.iter().chain(&SEEN).chain(&AROUND_MODEL).chain([&HIPRI]) {
        c.store(0, Ordering::Relaxed);
    }
}

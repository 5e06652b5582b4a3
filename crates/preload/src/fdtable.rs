//! What the library knows about each file descriptor number, in one atomic word per fd.
//!
//! A descriptor is classified on its first read or write (fstat + F_GETFL, two syscalls
//! once) as taken (a regular file or block device opened with O_DIRECT, or a buffered
//! regular file on a block device when asked) or passed through. Anything that may change
//! what a number refers to or its flags (open, close, dup*, fcntl F_SETFL and F_DUPFD,
//! close_range) resets the entry to unknown with a new generation; the per-thread port
//! caches compare generations, so a port never outlives the file it was opened on.
//!
//! `shared` marks descriptors another process may share an open file description with
//! (present when the library loaded, or open at a fork): `read`/`write` on them pass
//! through, because emulating the file offset with lseek cannot be made atomic across
//! processes, while the positional calls stay taken.
//!
//! Routing layer: the per-descriptor state the interposed calls route by, and the stripes
//! that serialise `read`/`write` offset emulation per descriptor among this process's
//! threads. Below it: the emulated image's own per-descriptor cache ([`crate::emu`]).
//!
//! Non-goals: descriptors at or above FD_MAX (passed through), and closes the library does
//! not see (glibc-internal ones such as fclose): a number reused after such a close keeps
//! its old entry until the next open or I/O error resets it (see `Taken` fallbacks).

use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::real::FD_MAX;

use crate::guard::{Spin, SpinGuard};

const STATE_MASK: u64 = 0b11;
const UNKNOWN: u64 = 0;
const PASS: u64 = 1;
const TAKEN: u64 = 2;
const SHARED: u64 = 1 << 2;
const APPEND: u64 = 1 << 3;
const GEN_SHIFT: u32 = 8;

static TABLE: [AtomicU64; FD_MAX] = [const { AtomicU64::new(0) }; FD_MAX];
static GENERATION: AtomicU64 = AtomicU64::new(1);
/// Every entry whose generation is at most this is possibly shared (it was set before the
/// last fork, or never since the library loaded): marking all descriptors is one store.
static SHARED_UPTO: AtomicU64 = AtomicU64::new(0);

/// What the library does with a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Unknown { generation: u64 },
    Pass,
    Taken { generation: u64, shared: bool, append: bool },
}

fn slot(fd: i32) -> Option<&'static AtomicU64> {
    usize::try_from(fd).ok().filter(|&i| i < FD_MAX).map(|i| &TABLE[i])
}

fn next_generation() -> u64 {
    GENERATION.fetch_add(1, Ordering::Relaxed) & ((1 << (64 - GEN_SHIFT)) - 1)
}

pub fn lookup(fd: i32) -> Class {
    let Some(s) = slot(fd) else { return Class::Pass };
    let v = s.load(Ordering::Acquire);
    let generation = v >> GEN_SHIFT;
    let shared = v & SHARED != 0 || generation <= SHARED_UPTO.load(Ordering::Relaxed);
    match v & STATE_MASK {
        PASS => Class::Pass,
        TAKEN => Class::Taken { generation, shared, append: v & APPEND != 0 },
        _ => Class::Unknown { generation },
    }
}

/// Forgets what `fd` was (it was closed, reopened or its flags changed). `shared` says
/// whether the new description may be shared with another process (a dup of a shared one).
pub fn reset(fd: i32, shared: bool) {
    crate::emu::forget(fd);
    if let Some(s) = slot(fd) {
        s.store(UNKNOWN | if shared { SHARED } else { 0 } | (next_generation() << GEN_SHIFT), Ordering::Release);
    }
}

/// Whether a descriptor's entry says another process may share it.
pub fn is_shared(fd: i32) -> bool {
    slot(fd).is_some_and(|s| {
        let v = s.load(Ordering::Relaxed);
        v & SHARED != 0 || v >> GEN_SHIFT <= SHARED_UPTO.load(Ordering::Relaxed)
    })
}

/// Marks every descriptor open now as possibly shared: at load (inherited across exec)
/// and at fork. Entries reset later get newer generations and are not.
pub fn mark_all_shared() {
    SHARED_UPTO.store(next_generation(), Ordering::Relaxed);
}

/// Records the classification of an unknown entry, unless it changed meanwhile (another
/// thread closed or reopened the number: then the next I/O classifies again).
pub fn classify(fd: i32, seen: u64, taken: bool, append: bool) {
    let Some(s) = slot(fd) else { return };
    let old = s.load(Ordering::Acquire);
    if old & STATE_MASK != UNKNOWN || old >> GEN_SHIFT != seen {
        return;
    }
    let state = if taken { TAKEN } else { PASS };
    let new = (old & !(STATE_MASK | APPEND)) | state | if append { APPEND } else { 0 };
    let _ = s.compare_exchange(old, new, Ordering::AcqRel, Ordering::Relaxed);
}

/// Serialises read/write/lseek emulation per descriptor among this process's threads.
static STRIPES: [Spin<()>; 64] = [const { Spin::new(()) }; 64];

/// The stripe of descriptor `fd` (callers pass a non-negative descriptor).
pub fn lock_stripe(fd: i32) -> SpinGuard<'static, ()> {
    STRIPES[fd.unsigned_abs() as usize % STRIPES.len()].lock()
}

/// Held across fork by the prepare handler, so the child never inherits one locked.
pub fn lock_stripes_for_fork() {
    for s in &STRIPES {
        std::mem::forget(s.lock());
    }
}

pub fn unlock_stripes_after_fork() {
    for s in &STRIPES {
        s.unlock_after_fork();
    }
}

/// How a descriptor looks to the kernel, for the classification.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    pub regular: bool,
    pub block: bool,
    pub direct: bool,
    pub append: bool,
    /// The file lives on a block device (major number not 0: not procfs, tmpfs, pipes).
    pub on_block_device: bool,
    /// The device: st_rdev of a block device, else st_dev (keys the in-flight counters).
    pub dev: u64,
}

/// fstat + F_GETFL; `None` when the descriptor is not open. Leaves errno as it found it.
pub fn probe(fd: i32) -> Option<Probe> {
    let saved = crate::real::errno();
    // SAFETY: an all-zero stat is valid; fstat fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out pointer.
    let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
    // SAFETY: F_GETFL takes no argument and touches no memory.
    let flags = if ok { unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFL) as i32 } } else { -1 };
    crate::real::set_errno(saved);
    if flags < 0 {
        return None;
    }
    let kind = st.st_mode & libc::S_IFMT;
    Some(Probe {
        regular: kind == libc::S_IFREG,
        block: kind == libc::S_IFBLK,
        direct: flags & libc::O_DIRECT != 0,
        append: flags & libc::O_APPEND != 0,
        on_block_device: libc::major(st.st_dev) != 0,
        dev: if kind == libc::S_IFBLK { st.st_rdev } else { st.st_dev },
    })
}

/// The rule: O_DIRECT regular files and block devices; buffered regular files on a block
/// device only when asked.
pub fn takes(p: &Probe, buffered: bool) -> bool {
    (p.regular || p.block) && (p.direct || (buffered && p.regular && p.on_block_device))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(regular: bool, block: bool, direct: bool, on_block_device: bool) -> Probe {
        Probe { regular, block, direct, append: false, on_block_device, dev: 0 }
    }

    #[test]
    fn only_direct_files_and_block_devices_are_taken_unless_buffered() {
        assert!(takes(&probe(true, false, true, true), false));
        assert!(takes(&probe(false, true, true, false), false));
        assert!(!takes(&probe(true, false, false, true), false));
        assert!(takes(&probe(true, false, false, true), true));
        // procfs/tmpfs files (major 0) stay buffered pass-through even when asked.
        assert!(!takes(&probe(true, false, false, false), true));
        // Pipes and sockets never.
        assert!(!takes(&probe(false, false, true, false), true));
    }

    #[test]
    fn a_reset_entry_is_reclassified_and_a_stale_classification_is_dropped() {
        let fd = 40_000;
        reset(fd, false);
        let Class::Unknown { generation } = lookup(fd) else { panic!("reset leaves unknown") };
        classify(fd, generation, true, true);
        assert_eq!(lookup(fd), Class::Taken { generation, shared: false, append: true });
        // A close between probe and classify: the old generation no longer applies.
        reset(fd, true);
        let Class::Unknown { generation: g2 } = lookup(fd) else { panic!() };
        assert_ne!(g2, generation);
        classify(fd, generation, true, false);
        assert!(matches!(lookup(fd), Class::Unknown { .. }));
        assert!(is_shared(fd));
        assert_eq!(lookup(-1), Class::Pass);
        assert_eq!(lookup(FD_MAX as i32), Class::Pass);

        // A fork marks every descriptor open then as shared, and none opened after it.
        // (One test: the mark is process-wide.)
        reset(fd, false);
        assert!(!is_shared(fd));
        mark_all_shared();
        assert!(is_shared(fd));
        assert!(is_shared(50_000), "a number never seen since load may be inherited");
        reset(fd, false);
        assert!(!is_shared(fd), "opened after the fork");
    }
}

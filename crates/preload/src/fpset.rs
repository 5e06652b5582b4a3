//! Skipping a tracer's `PTRACE_SETREGSET` of a stopped tracee's extended FP state
//! (`NT_X86_XSTATE`) when it writes back exactly what the tracer last read or wrote there
//! and nothing can have changed it since: the call would change nothing, and it is one of
//! the five `ptrace` calls User-Mode Linux makes at each guest system call.
//!
//! Why: UML's kernel thread, at every stop of a guest process (a system call, a signal),
//! reads the general registers and the 2.4 KiB XSAVE area, handles the event, and writes
//! both back before it resumes the process with `PTRACE_SYSEMU` (`strace -p` on it during
//! fio on emu:nvme: `GETREGS`, `GETREGSET`, `SETREGS`, `SETREGSET`, `SYSEMU` and one
//! `wait4` per stop, 8.5 stops per guest read). Guest system calls hardly ever touch the
//! FP state, so the write-back is almost always the bytes just read. Under the guest CPU
//! clock that call's host CPU is the guest's own time as well as wall time.
//!
//! When a write may be skipped: the entry for the tracee holds the bytes of its last
//! successful `GETREGSET`/`SETREGSET` of the XSAVE area, and no other request has been
//! made for that tracee since except ones that leave the FP state alone (reading
//! registers, `SETREGS`, `ARCH_PRCTL`, peeks, `GETSIGINFO`). A request that resumes it, or
//! any other request, forgets the entry before the real call; so does a wait that reports
//! the tracee gone (its pid may come back as another process). A stopped tracee does not
//! run, so its FP state cannot change otherwise. When the entry's lock cannot be taken
//! (a signal handler inside it), skipping stops for good (it is only a saving).
//!
//! Only under virtual time on the guest CPU clock (`emulate vm --virtual-time`): the
//! real-time reference keeps every call.
//!
//! Service layer: raw atomics and copies only (it runs inside the interposed `ptrace`).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// The note type of the x86 XSAVE area (`NT_X86_XSTATE`).
pub const NT_X86_XSTATE: usize = 0x202;
/// PTRACE_GETREGSET / PTRACE_SETREGSET.
pub const PTRACE_GETREGSET: libc::c_int = 0x4204;
pub const PTRACE_SETREGSET: libc::c_int = 0x4205;
/// Tracees remembered at once (UML: one host process per guest address space).
pub const TRACEES_MAX: usize = 16;
/// The largest XSAVE area kept (2,432 bytes on this host's CPU; AVX-512 needs 2,696).
pub const XSTATE_MAX: usize = 4096;

struct Entry {
    /// The tracee; 0: free.
    pid: u32,
    /// Bytes of `state` that are its XSAVE area; 0: nothing known.
    len: usize,
    state: [u8; XSTATE_MAX],
}

struct Table {
    busy: AtomicBool,
    entries: UnsafeCell<[Entry; TRACEES_MAX]>,
}

// SAFETY: `entries` is only touched while `busy` is held (try_lock below).
unsafe impl Sync for Table {}

static TABLE: Table = Table {
    busy: AtomicBool::new(false),
    entries: UnsafeCell::new([const { Entry { pid: 0, len: 0, state: [0; XSTATE_MAX] } }; TRACEES_MAX]),
};
/// The lock was found taken once: nothing is skipped any more.
static POISONED: AtomicBool = AtomicBool::new(false);
/// Round-robin victim when the table is full.
static NEXT_VICTIM: AtomicU32 = AtomicU32::new(0);
/// Writes skipped (the `emu_process` record's `ptrace_fp_sets_skipped`).
static SKIPPED: AtomicU64 = AtomicU64::new(0);

/// Writes skipped so far by this process image.
pub fn skipped() -> u64 {
    SKIPPED.load(Ordering::Relaxed)
}

/// Runs `f` on the table, or poisons it when the lock is taken (a signal handler that
/// interrupted a holder): None then.
fn with_table<R>(f: impl FnOnce(&mut [Entry; TRACEES_MAX]) -> R) -> Option<R> {
    if POISONED.load(Ordering::Acquire) {
        return None;
    }
    if TABLE.busy.swap(true, Ordering::Acquire) {
        POISONED.store(true, Ordering::Release);
        return None;
    }
    // SAFETY: `busy` is held: no other reference to the entries exists.
    let r = f(unsafe { &mut *TABLE.entries.get() });
    TABLE.busy.store(false, Ordering::Release);
    Some(r)
}

/// Whether `request` leaves a stopped tracee's FP state as it is.
fn keeps_fp_state(request: libc::c_int, addr: usize) -> bool {
    const PTRACE_ARCH_PRCTL: libc::c_int = 30;
    matches!(
        request as libc::c_uint,
        libc::PTRACE_GETREGS
            | libc::PTRACE_SETREGS
            | libc::PTRACE_GETFPREGS
            | libc::PTRACE_PEEKDATA
            | libc::PTRACE_PEEKTEXT
            | libc::PTRACE_PEEKUSER
            | libc::PTRACE_GETSIGINFO
            | libc::PTRACE_GETEVENTMSG
    ) || request == PTRACE_ARCH_PRCTL
        || request == PTRACE_GETREGSET
        || (request == PTRACE_SETREGSET && addr == NT_X86_XSTATE)
}

/// Before the real `ptrace(request, pid, addr, data)`: `Some(0)` when the call is a write
/// of the XSAVE area that changes nothing (the caller's iovec gets the length the kernel
/// would report, and the call is not made); else None, with the tracee's entry forgotten
/// when the request may change its FP state or let it run.
///
/// # Safety
/// For `PTRACE_SETREGSET`, `data` is the caller's iovec (readable and writable), whose
/// buffer is readable for its length, as ptrace(2) requires.
pub unsafe fn before(request: libc::c_int, pid: u32, addr: usize, data: *mut libc::c_void) -> Option<libc::c_long> {
    if !keeps_fp_state(request, addr) {
        forget(pid);
        return None;
    }
    if request != PTRACE_SETREGSET || data.is_null() {
        return None;
    }
    // SAFETY: the caller's iovec (see above).
    let iov = unsafe { &mut *data.cast::<libc::iovec>() };
    let same = with_table(|t| {
        let e = t.iter().find(|e| e.pid == pid && e.len > 0)?;
        if iov.iov_len < e.len || iov.iov_base.is_null() {
            return None;
        }
        // SAFETY: the caller's buffer is readable for iov_len >= e.len bytes.
        let new = unsafe { std::slice::from_raw_parts(iov.iov_base.cast::<u8>(), e.len) };
        (new == &e.state[..e.len]).then_some(e.len)
    })
    .flatten()?;
    iov.iov_len = same;
    SKIPPED.fetch_add(1, Ordering::Relaxed);
    Some(0)
}

/// After a successful real `GETREGSET`/`SETREGSET` of the XSAVE area: the tracee's entry
/// now holds what its XSAVE area is.
///
/// # Safety
/// As [`before`]: `data` is the iovec the kernel just read into or wrote from.
pub unsafe fn after(request: libc::c_int, pid: u32, addr: usize, data: *mut libc::c_void, result: libc::c_long) {
    if (request != PTRACE_GETREGSET && request != PTRACE_SETREGSET) || addr != NT_X86_XSTATE || data.is_null() {
        return;
    }
    if result != 0 {
        forget(pid);
        return;
    }
    // SAFETY: the caller's iovec; the kernel set iov_len to the bytes it moved.
    let iov = unsafe { &*data.cast::<libc::iovec>() };
    let len = iov.iov_len;
    if len == 0 || len > XSTATE_MAX || iov.iov_base.is_null() {
        forget(pid);
        return;
    }
    // SAFETY: the kernel moved `len` bytes through this buffer.
    let bytes = unsafe { std::slice::from_raw_parts(iov.iov_base.cast::<u8>(), len) };
    with_table(|t| {
        let i = match t.iter().position(|e| e.pid == pid) {
            Some(i) => i,
            None => match t.iter().position(|e| e.pid == 0) {
                Some(i) => i,
                None => NEXT_VICTIM.fetch_add(1, Ordering::Relaxed) as usize % TRACEES_MAX,
            },
        };
        let e = &mut t[i];
        e.pid = pid;
        e.state[..len].copy_from_slice(bytes);
        e.len = len;
    });
}

/// Forgets what is known of `pid` (it may run, its state was changed some other way, or
/// it is gone).
pub fn forget(pid: u32) {
    with_table(|t| {
        for e in t.iter_mut().filter(|e| e.pid == pid) {
            e.pid = 0;
            e.len = 0;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reads_and_the_general_registers_keep_the_fp_state() {
        for r in [libc::PTRACE_GETREGS, libc::PTRACE_SETREGS, libc::PTRACE_PEEKDATA, libc::PTRACE_GETSIGINFO] {
            assert!(keeps_fp_state(r as libc::c_int, 0), "{r}");
        }
        assert!(keeps_fp_state(PTRACE_SETREGSET, NT_X86_XSTATE));
        // Another register set written, the FP registers written, or the tracee let run.
        assert!(!keeps_fp_state(PTRACE_SETREGSET, 2));
        for r in [libc::PTRACE_SETFPREGS, libc::PTRACE_POKEUSER, libc::PTRACE_CONT, libc::PTRACE_KILL] {
            assert!(!keeps_fp_state(r as libc::c_int, 0), "{r}");
        }
        assert!(!keeps_fp_state(31, 0), "PTRACE_SYSEMU");
    }

    /// `ptrace(request, pid, NT_X86_XSTATE, iov)` as the interposed `ptrace` makes it under
    /// the guest CPU clock: [`before`], the real call unless skipped, [`after`].
    fn regset(request: libc::c_int, pid: libc::pid_t, buf: &mut [u8]) -> (libc::c_long, usize, bool) {
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let data = (&mut iov as *mut libc::iovec).cast::<libc::c_void>();
        let skipped_before = skipped();
        // SAFETY: a valid iovec over `buf`, as ptrace(2) requires.
        let r = match unsafe { before(request, pid as u32, NT_X86_XSTATE, data) } {
            Some(r) => r,
            None => {
                // SAFETY: as above; the raw call (the interposed one is this crate's).
                let r = unsafe { libc::syscall(libc::SYS_ptrace, request as libc::c_long, pid, NT_X86_XSTATE, data) };
                // SAFETY: as above.
                unsafe { after(request, pid as u32, NT_X86_XSTATE, data, r) };
                r
            }
        };
        (r, iov.iov_len, skipped() > skipped_before)
    }

    #[test]
    fn a_write_back_of_the_state_just_read_is_skipped_and_any_other_write_is_made() {
        // SAFETY: the child only makes system calls before _exit.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            // SAFETY: plain system calls in the child; it never returns into the test.
            unsafe {
                libc::syscall(libc::SYS_ptrace, libc::PTRACE_TRACEME, 0, 0, 0);
                libc::raise(libc::SIGSTOP);
                libc::raise(libc::SIGSTOP);
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: our child.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        let mut state = vec![0u8; XSTATE_MAX];
        let (r, len, _) = regset(PTRACE_GETREGSET, child, &mut state);
        if r != 0 {
            eprintln!("not checked: PTRACE_GETREGSET of NT_X86_XSTATE is refused here");
            // SAFETY: our child.
            unsafe { libc::kill(child, libc::SIGKILL) };
            return;
        }
        assert!(len > 512 && len <= XSTATE_MAX, "{len}");
        // The same bytes written back: not made, the length the kernel would report.
        let (r, reported, skipped) = regset(PTRACE_SETREGSET, child, &mut state.clone());
        assert_eq!((r, reported, skipped), (0, len, true));
        // One byte of XMM0 (legacy area, offset 160) changed: made, and it took.
        let mut changed = state.clone();
        changed[160] ^= 0x5a;
        let (r, _, skipped) = regset(PTRACE_SETREGSET, child, &mut changed);
        assert_eq!((r, skipped), (0, false));
        let mut read = vec![0u8; XSTATE_MAX];
        let (r, _, _) = regset(PTRACE_GETREGSET, child, &mut read);
        assert_eq!(r, 0);
        assert_eq!(read[160], changed[160], "the real write was made");
        // Writing back what is now there is skipped again; the old state is not.
        assert!(regset(PTRACE_SETREGSET, child, &mut read.clone()).2);
        let (r, _, skipped) = regset(PTRACE_SETREGSET, child, &mut state.clone());
        assert_eq!((r, skipped), (0, false));
        // Once the tracee may have run, nothing is skipped until it is read again.
        // SAFETY: as before() wants: no iovec for PTRACE_CONT.
        assert_eq!(unsafe { before(libc::PTRACE_CONT as libc::c_int, child as u32, 0, std::ptr::null_mut()) }, None);
        // SAFETY: our stopped tracee.
        unsafe { libc::syscall(libc::SYS_ptrace, libc::PTRACE_CONT, child, 0, 0) };
        // SAFETY: our child.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFSTOPPED(status));
        let (r, _, skipped) = regset(PTRACE_SETREGSET, child, &mut state.clone());
        assert_eq!((r, skipped), (0, false));
        forget(child as u32);
        // SAFETY: our child; reaped.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, &mut status, 0);
        }
    }
}

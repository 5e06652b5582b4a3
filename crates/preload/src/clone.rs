//! The interposed `clone`: a helper process that shares the program's memory
//! (`clone(CLONE_VM)` without `CLONE_THREAD`) runs on a stack of the library's and joins the
//! clock's domain ([`crate::helper`] says why, and keeps the registry).
//!
//! Interposition layer: the registry and the clock's domain are below it.

use libc::{c_int, c_void, pid_t};

use crate::real::Sym;
use crate::vclock::domain;

/// The helper's first code on its new stack: joins the clock's domain, then runs the
/// program's function and returns its status (the helper's exit status).
extern "C" fn trampoline(index: *mut c_void) -> c_int {
    domain::join_domain();
    // The helper's timed waits (a request's wait for the model's instant) wake within
    // HELPER_TIMER_SLACK_NS of their timer, not the kernel's default 50 us.
    // SAFETY: prctl on the calling task only; no memory is passed.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, HELPER_TIMER_SLACK_NS as libc::c_ulong) };
    let (func, arg) = crate::helper::entry(index as usize);
    // SAFETY: `func` is the non-null function pointer the program passed to clone (checked
    // there), stored unchanged; it is called as clone would have called it.
    let func: extern "C" fn(*mut c_void) -> c_int = unsafe { std::mem::transmute(func) };
    func(arg as *mut c_void)
}

static CLONE: Sym = Sym::new(c"clone");

/// The timer slack of a helper's timed waits (ns). With the kernel's default (50 us) a
/// UML guest's request at 100 x (about 60 us on the model) was held at its instant for
/// 47-57 us on average while the guest ran past it; with 10 us, 21-25 us; with 1 us the
/// waits went round forty times as often and the sweep's 100 x points took twice the wall
/// time (docs/vm.md, "One instant per request").
pub const HELPER_TIMER_SLACK_NS: u64 = 10_000;

type CloneFn = unsafe extern "C" fn(
    Option<extern "C" fn(*mut c_void) -> c_int>,
    *mut c_void,
    c_int,
    *mut c_void,
    *mut pid_t,
    *mut c_void,
    *mut pid_t,
) -> c_int;

/// glibc's `clone`, with the optional arguments read as x86-64 passes them (the sixth
/// and seventh from r9 and the stack, whether or not the caller passed them).
///
/// # Safety
/// As clone(2) (glibc's wrapper).
#[cfg(target_arch = "x86_64")]
#[no_mangle]
pub unsafe extern "C" fn clone(
    func: Option<extern "C" fn(*mut c_void) -> c_int>,
    stack: *mut c_void,
    flags: c_int,
    arg: *mut c_void,
    parent_tid: *mut pid_t,
    tls: *mut c_void,
    child_tid: *mut pid_t,
) -> c_int {
    let Some(real) = CLONE.get() else {
        crate::real::set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: the address dlsym gave for glibc's clone, whose arguments these are. Extra
    // optional arguments are read by it only when `flags` asks for them (then the caller
    // passed them), so forwarding unpassed register/stack contents is harmless.
    let real: CloneFn = unsafe { std::mem::transmute::<usize, CloneFn>(real) };
    let helper = flags & libc::CLONE_VM != 0 && flags & libc::CLONE_THREAD == 0;
    // A thread that shares this one's memory and thread pointer (no CLONE_SETTLS) and runs
    // beside it (not a vfork child, which runs while its parent waits) cannot be told from
    // the owner of the own-CPU-clock path unless it runs on a stack of ours: such a helper
    // started on its own stack turns the path off (domain::own_clock_disable).
    let shares_tp = flags & libc::CLONE_VM != 0 && flags & (libc::CLONE_SETTLS | libc::CLONE_VFORK) == 0;
    if !helper || func.is_none() || !crate::emu::active() {
        if shares_tp {
            domain::own_clock_disable();
        }
        // SAFETY: forwarded unchanged.
        let pid = unsafe { real(func, stack, flags, arg, parent_tid, tls, child_tid) };
        // A process of its own (UML starts one per guest address space this way, ptraced,
        // running guest code): its CPU time is the guest's (domain::cpu_ns).
        if pid > 0 && flags & (libc::CLONE_VM | libc::CLONE_THREAD) == 0 && domain::on() && domain::cpu_base() {
            domain::add_cpu_pid(pid as u32);
        }
        return pid;
    }
    let Some((index, top)) = crate::helper::claim(func.map_or(0, |f| f as usize), arg as usize) else {
        if shares_tp {
            domain::own_clock_disable();
        }
        // SAFETY: forwarded unchanged (no slot or no memory: the helper's own stack).
        return unsafe { real(func, stack, flags, arg, parent_tid, tls, child_tid) };
    };
    // SAFETY: `top` is inside a live mapping of ours that nothing else uses; the trampoline
    // calls the program's function with its argument, as clone would have.
    let pid =
        unsafe { real(Some(trampoline), top as *mut c_void, flags, index as *mut c_void, parent_tid, tls, child_tid) };
    if pid > 0 {
        crate::helper::set_pid(index, pid as u32);
    }
    pid
}

static WAITPID: Sym = Sym::new(c"waitpid");

/// waitpid(2). Under the guest CPU clock, the process waited for is counted in it
/// ([`domain::count_cpu_pid`]): UML's kernel thread waits with `waitpid` on each of its
/// guest processes, and most of them were not started through `clone` or `fork` here (a
/// guest's fork and exec make the new host process with a raw `clone` from inside the
/// guest's stub), so without this their CPU time did not move the guest's clock. After
/// a wait that returned a process (UML's guest process is then stopped), the caller
/// pauses if the clock has reached a device completion the helper has not handed back
/// yet ([`domain::pause_at_cap`]).
///
/// # Safety
/// As waitpid(2).
#[no_mangle]
pub unsafe extern "C" fn waitpid(pid: pid_t, status: *mut c_int, options: c_int) -> pid_t {
    let guest_clock = domain::on() && domain::cpu_base();
    // A helper's work is the device's, kept off the guest's clock.
    if pid > 0 && guest_clock && !crate::helper::is_helper_pid(pid as u32) {
        domain::count_cpu_pid(pid as u32);
        // It may run while this waits (resumed some way `ptrace` below did not see).
        domain::unpark_cpu_pid(pid as u32);
    }
    let r = if guest_clock {
        // SAFETY: as waitpid(2).
        unsafe { wait_and_park(pid, status, options) }
    } else {
        type F = unsafe extern "C" fn(pid_t, *mut c_int, c_int) -> pid_t;
        // SAFETY: (fallback) the kernel validates the status pointer.
        let fallback = || unsafe { libc::syscall(libc::SYS_wait4, pid, status, options, 0usize) as pid_t };
        crate::real::call_real!(WAITPID, F, fallback(), pid, status, options)
    };
    if r > 0 && domain::on() {
        let saved = crate::real::errno();
        domain::pause_at_cap();
        crate::real::set_errno(saved);
    }
    r
}

/// waitpid(2) as `wait4` with the resource usage of the process returned: when it has
/// stopped (UML's guest process at its next system call or signal), its CPU time stays
/// where it is until it is resumed (the interposed `ptrace`), and the wait's resource
/// usage is that CPU time (user and system, to the microsecond), so the guest CPU clock
/// keeps it without reading the process's clock at each reading
/// ([`domain::park_cpu_pid_at`]).
///
/// # Safety
/// As waitpid(2).
pub unsafe fn wait_and_park(pid: pid_t, status: *mut c_int, options: c_int) -> pid_t {
    let mut own = 0;
    let status = if status.is_null() { &mut own as *mut c_int } else { status };
    // SAFETY: zeroed plain data, written by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // UML's kernel thread blocks here while its guest process runs: its own CPU clock is
    // carried across the wait without a system call after it (vclock::ownclock).
    domain::own_block_begin();
    // SAFETY: valid status and rusage pointers; the kernel validates the rest.
    let r = unsafe { libc::syscall(libc::SYS_wait4, pid, status, options, &mut usage as *mut libc::rusage) } as pid_t;
    let saved = crate::real::errno();
    domain::own_block_end();
    crate::real::set_errno(saved);
    // SAFETY: the kernel wrote the status of the process returned.
    if r > 0 && libc::WIFSTOPPED(unsafe { *status }) {
        let tv_ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
        domain::park_cpu_pid_at(r as u32, tv_ns(usage.ru_utime) + tv_ns(usage.ru_stime));
    } else if r > 0 {
        // Gone (reaped): the next reading finds it so and keeps its last reading. Its pid
        // may come back as another process: its kept FP state goes.
        domain::unpark_cpu_pid(r as u32);
        crate::fpset::forget(r as u32);
    }
    r
}

static PTRACE: Sym = Sym::new(c"ptrace");

/// The ptrace requests that let a stopped tracee run (until it stops again or dies).
fn resumes(request: c_int) -> bool {
    const PTRACE_SYSEMU: c_int = 31;
    const PTRACE_SYSEMU_SINGLESTEP: c_int = 32;
    const PTRACE_LISTEN: c_int = 0x4208;
    matches!(
        request as libc::c_uint,
        libc::PTRACE_CONT | libc::PTRACE_SYSCALL | libc::PTRACE_SINGLESTEP | libc::PTRACE_KILL | libc::PTRACE_DETACH
    ) || matches!(request, PTRACE_SYSEMU | PTRACE_SYSEMU_SINGLESTEP | PTRACE_LISTEN)
}

/// ptrace(2), glibc's variadic wrapper (its request an `enum`: an int) with its three
/// optional arguments read as x86-64 and aarch64 pass them (in registers, whether or not the caller passed them; glibc reads
/// them all). Under the guest CPU clock a request that resumes a tracee makes the clock
/// read its CPU time again ([`domain::unpark_cpu_pid`]; the interposed `waitpid` parks it
/// when it stops).
///
/// # Safety
/// As ptrace(2) (glibc's wrapper).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[no_mangle]
pub unsafe extern "C" fn ptrace(request: c_int, pid: pid_t, addr: *mut c_void, data: *mut c_void) -> libc::c_long {
    let guest_clock = pid > 0 && domain::on() && domain::cpu_base();
    if guest_clock && resumes(request) {
        domain::unpark_cpu_pid(pid as u32);
    }
    if guest_clock {
        // SAFETY: the caller's promise on `data` (ptrace(2)).
        if let Some(r) = unsafe { crate::fpset::before(request, pid as u32, addr as usize, data) } {
            return r;
        }
    }
    // glibc's ptrace is variadic: called as one (see fcntl).
    type F = unsafe extern "C" fn(c_int, ...) -> libc::c_long;
    let fallback = || {
        // SAFETY: the raw call: the kernel validates the request and pointers (the PEEK
        // requests' results come back differently without glibc, but glibc is there).
        unsafe { libc::syscall(libc::SYS_ptrace, request as libc::c_long, pid, addr, data) }
    };
    let r = crate::real::call_real!(PTRACE, F, fallback(), request, pid, addr, data);
    if guest_clock {
        let saved = crate::real::errno();
        // SAFETY: as above; the kernel has just used `data`.
        unsafe { crate::fpset::after(request, pid as u32, addr as usize, data, r) };
        crate::real::set_errno(saved);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_tracee_is_parked_at_its_cpu_time_from_the_wait_without_a_read() {
        let _one = crate::vclock::domain::tests::CPU_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the child only makes system calls and spins before _exit.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            // SAFETY: plain system calls in the child; it never returns into the test.
            unsafe {
                libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
                let mut x = 0u64;
                for i in 0..20_000_000u64 {
                    x = std::hint::black_box(x.wrapping_add(i));
                }
                libc::raise(libc::SIGSTOP);
                libc::_exit((x & 1) as i32);
            }
        }
        let pid = child as u32;
        domain::add_cpu_pid(pid);
        let reads = domain::cpu_clock_reads();
        let mut status = 0;
        // SAFETY: a valid status pointer; our child.
        assert_eq!(unsafe { wait_and_park(child, &mut status, 0) }, child);
        assert!(libc::WIFSTOPPED(status), "{status:#x}");
        assert_eq!(domain::cpu_clock_reads(), reads, "the wait's own usage, no read");
        let kept = domain::parked_cpu_ns(pid).expect("parked");
        let now = domain::read_process_cpu_ns(pid).expect("stopped child");
        // The usage is in microseconds (user and system each cut to one).
        assert!(kept <= now && now - kept < 2_000, "kept {kept} ns, the clock {now} ns");
        assert!(kept > 1_000_000, "the child's spin is in it: {kept} ns");
        // SAFETY: our child; reaped here.
        unsafe { libc::kill(child, libc::SIGKILL) };
        // SAFETY: as waitpid(2); the exited child is not parked.
        assert_eq!(unsafe { wait_and_park(child, std::ptr::null_mut(), 0) }, child);
    }

    #[test]
    fn only_requests_that_let_a_tracee_run_resume_it() {
        for r in [libc::PTRACE_CONT, libc::PTRACE_SYSCALL, libc::PTRACE_SINGLESTEP, libc::PTRACE_DETACH] {
            assert!(resumes(r as c_int), "{r}");
        }
        // UML's: PTRACE_SYSEMU and PTRACE_SYSEMU_SINGLESTEP.
        assert!(resumes(31) && resumes(32));
        for r in [libc::PTRACE_GETREGS, libc::PTRACE_SETREGS, libc::PTRACE_PEEKDATA, libc::PTRACE_POKEDATA] {
            assert!(!resumes(r as c_int), "{r}");
        }
    }
}

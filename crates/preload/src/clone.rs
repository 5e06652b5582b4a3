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
    if !helper || func.is_none() || !crate::emu::active() {
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
    }
    type F = unsafe extern "C" fn(pid_t, *mut c_int, c_int) -> pid_t;
    // SAFETY: (fallback) the kernel validates the status pointer.
    let fallback = || unsafe { libc::syscall(libc::SYS_wait4, pid, status, options, 0usize) as pid_t };
    let r = crate::real::call_real!(WAITPID, F, fallback(), pid, status, options);
    if r > 0 && domain::on() {
        let saved = crate::real::errno();
        domain::pause_at_cap();
        crate::real::set_errno(saved);
    }
    r
}

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
    let (func, arg) = crate::helper::entry(index as usize);
    // SAFETY: `func` is the non-null function pointer the program passed to clone (checked
    // there), stored unchanged; it is called as clone would have called it.
    let func: extern "C" fn(*mut c_void) -> c_int = unsafe { std::mem::transmute(func) };
    func(arg as *mut c_void)
}

static CLONE: Sym = Sym::new(c"clone");

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
    unsafe { real(Some(trampoline), top as *mut c_void, flags, index as *mut c_void, parent_tid, tls, child_tid) }
}

//! lat_ctx's token ring: N processes on one CPU pass a one-byte token through N pipes; each
//! process first sums its own array of S bytes (S = 0 for the direct cost).
//!
//! Design. The caller pins itself before forking, so every child inherits the one-CPU mask
//! and each hand-over is a context switch. Each child maps its array with mmap after fork and
//! writes it, so the pages are its own (summing a copy-on-write array shared with the parent
//! would not pollute anything). Children exit on end-of-file: when the parent closes its write
//! end, the EOF cascades around the ring. A guard kills (SIGKILL) and reaps every child on any
//! early return, and children ask for SIGKILL if the parent dies (PR_SET_PDEATHSIG), so no
//! path leaves a process behind. Between batches the parent checks the stop flag (Ctrl-C).
//!
//! The time per switch is the best batch, as lmbench reports it: noise on a shared machine
//! only ever adds time. The single-process overhead (write and read one byte on a pipe to
//! itself, after summing the same array hot) is measured the same way and subtracted by the
//! caller. Non-goal: reproducing lmbench's exact -O0 token handling.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::{bad_input, interrupted, os, Error};

/// At most this many processes in a ring (lat_ctx goes to 20; the bound keeps fd use small).
pub const RING_PROCS_MAX: usize = 64;

/// How long to measure and how many batches to take the best of.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub batches: u32,
    /// Target wall time of one batch.
    pub batch_ns: u64,
    /// Upper bound on hops per batch, whatever the timing says.
    pub hops_per_batch_max: u64,
    /// Stop before `batches` once two batches lie within this fraction of the fastest so
    /// far ([`floor_seen_twice`]); `None`: always take every batch.
    pub floor_tol: Option<f64>,
}

/// Whether the batches' times (ns per hop) hold their floor twice: at least two of them
/// within `tol` of the fastest. A neighbour's burst only ever adds time, so a batch at the
/// floor is the figure, and a second one there says a later batch would not go lower by
/// more than `tol` but by a burst-free stretch shorter than both (what the remaining
/// batches of a best-of-N could still find is below the noise the two agree within).
pub fn floor_seen_twice(batches_ns: &[f64], tol: f64) -> bool {
    let best = batches_ns.iter().copied().fold(f64::INFINITY, f64::min);
    batches_ns.iter().filter(|&&x| x <= best * (1.0 + tol)).count() >= 2
}

/// Sums the array the way a process in Fig. 3 does: every 4-byte element.
#[inline(never)]
fn sum_array(array: &[u32]) -> u32 {
    let mut sum = 0u32;
    for v in array {
        sum = sum.wrapping_add(*v);
    }
    std::hint::black_box(sum)
}

struct Pipe {
    read: RawFd,
    write: RawFd,
}

fn make_pipe() -> Result<Pipe, Error> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds has room for the two descriptors pipe writes.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(os("pipe", std::io::Error::last_os_error()));
    }
    Ok(Pipe { read: fds[0], write: fds[1] })
}

fn close(fd: RawFd) {
    if fd >= 0 {
        // SAFETY: closing a descriptor this process owns; double closes are prevented by
        // setting the field to -1 after closing.
        unsafe { libc::close(fd) };
    }
}

/// An anonymous private mapping, written once so its pages belong to this process.
struct Array {
    ptr: *mut u32,
    len: usize,
}

impl Array {
    fn new(bytes: usize) -> Result<Array, Error> {
        let len = bytes / 4;
        if len == 0 {
            return Ok(Array { ptr: std::ptr::null_mut(), len: 0 });
        }
        // SAFETY: a fresh anonymous private mapping; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len * 4,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(os("mmap", std::io::Error::last_os_error()));
        }
        let ptr = ptr as *mut u32;
        for i in 0..len {
            // SAFETY: i < len, inside the mapping we just made.
            unsafe { ptr.add(i).write(i as u32) };
        }
        Ok(Array { ptr, len })
    }

    fn as_slice(&self) -> &[u32] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: ptr/len describe a live mapping owned by self, initialised in new().
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Array {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: unmapping exactly the mapping made in new().
            unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len * 4) };
        }
    }
}

fn read_token(fd: RawFd) -> isize {
    let mut byte = 0u8;
    // EINTR (Ctrl-C reaching the whole process group) is retried; the bound keeps it finite.
    for _ in 0..1000 {
        // SAFETY: reading one byte into a local.
        let n = unsafe { libc::read(fd, &mut byte as *mut u8 as *mut libc::c_void, 1) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return n;
    }
    -1
}

fn write_token(fd: RawFd) -> isize {
    let byte = 1u8;
    for _ in 0..1000 {
        // SAFETY: writing one byte from a local.
        let n = unsafe { libc::write(fd, &byte as *const u8 as *const libc::c_void, 1) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return n;
    }
    -1
}

/// Kills and reaps children that are still registered when dropped.
struct Children {
    pids: Vec<libc::pid_t>,
}

impl Children {
    /// Waits up to ~2 s for every child to exit on its own, then SIGKILLs the rest.
    fn reap(&mut self) {
        let deadline = Instant::now() + std::time::Duration::from_secs(2);
        while !self.pids.is_empty() && Instant::now() < deadline {
            self.pids.retain(|&pid| {
                let mut status = 0;
                // SAFETY: waiting on our own child without blocking.
                let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
                rc == 0
            });
            if !self.pids.is_empty() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        for pid in self.pids.drain(..) {
            let mut status = 0;
            // SAFETY: pid is our unreaped child, so it cannot have been recycled.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.reap();
    }
}

/// Closes every descriptor above stderr except the two the child uses. Without this, a ring
/// forked while another thread has pipes open (tests run in parallel) would hold their write
/// ends and delay the other ring's end-of-file.
fn close_other_fds(keep_a: RawFd, keep_b: RawFd) {
    let (low, high) = (keep_a.min(keep_b) as u32, keep_a.max(keep_b) as u32);
    let ranges = [(3u32, low.wrapping_sub(1)), (low + 1, high.wrapping_sub(1)), (high + 1, u32::MAX)];
    for (first, last) in ranges {
        if first > last || first < 3 {
            continue;
        }
        // SAFETY: close_range only closes descriptors; it is a plain syscall.
        let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) };
        if rc != 0 {
            // Kernels before 5.9: close a bounded range one by one.
            for fd in first..last.min(4096) {
                close(fd as RawFd);
            }
        }
    }
}

/// The child's whole life: only async-signal-safe calls (we may have been forked from a
/// process with other threads) and never returns.
fn child_main(read_fd: RawFd, write_fd: RawFd, array_bytes: usize) -> ! {
    // SAFETY: prctl/getppid/_exit are async-signal-safe; the array is a fresh mmap.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
    }
    close_other_fds(read_fd, write_fd);
    let Ok(array) = Array::new(array_bytes) else {
        // SAFETY: leaving without running destructors of the parent's state.
        unsafe { libc::_exit(3) }
    };
    // Bounded by a huge count; in practice the loop ends at EOF.
    for _ in 0..u64::MAX / 2 {
        if read_token(read_fd) != 1 {
            break;
        }
        sum_array(array.as_slice());
        if write_token(write_fd) != 1 {
            break;
        }
    }
    drop(array);
    // SAFETY: as above.
    unsafe { libc::_exit(0) }
}

/// Nanoseconds per hop (one process summing its array and handing the token on, which is
/// one context switch) in a ring of `procs` processes on the current CPU mask. The caller
/// pins first. `procs` = 1 is the single-process overhead: one process writing to and
/// reading from its own pipe.
pub fn ring_ns_per_hop(procs: usize, array_bytes: usize, budget: Budget, stop: &AtomicBool) -> Result<f64, Error> {
    Ok(ring_batches_ns(procs, array_bytes, budget, stop)?.into_iter().fold(f64::INFINITY, f64::min))
}

/// Every batch's ns per hop of [`ring_ns_per_hop`], in the order they ran (fewer than
/// `budget.batches` where `budget.floor_tol` stopped them).
pub fn ring_batches_ns(procs: usize, array_bytes: usize, budget: Budget, stop: &AtomicBool) -> Result<Vec<f64>, Error> {
    if procs == 0 || procs > RING_PROCS_MAX {
        return Err(bad_input(format!("ring of {procs} processes: expected 1..={RING_PROCS_MAX}")));
    }
    let mut pipes = Vec::with_capacity(procs);
    let close_all = |pipes: &mut Vec<Pipe>| {
        for p in pipes.iter_mut() {
            close(p.read);
            close(p.write);
            p.read = -1;
            p.write = -1;
        }
    };
    for _ in 0..procs {
        match make_pipe() {
            Ok(p) => pipes.push(p),
            Err(e) => {
                close_all(&mut pipes);
                return Err(e);
            }
        }
    }
    let array = match Array::new(array_bytes) {
        Ok(a) => a,
        Err(e) => {
            close_all(&mut pipes);
            return Err(e);
        }
    };
    let mut children = Children { pids: Vec::with_capacity(procs) };
    for i in 1..procs {
        // SAFETY: fork; the child only runs child_main, which uses async-signal-safe calls.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let source = std::io::Error::last_os_error();
            close_all(&mut pipes);
            return Err(os("fork", source));
        }
        if pid == 0 {
            let (read_fd, write_fd) = (pipes[i].read, pipes[(i + 1) % procs].write);
            for (k, p) in pipes.iter().enumerate() {
                if k != i {
                    close(p.read);
                }
                if k != (i + 1) % procs {
                    close(p.write);
                }
            }
            child_main(read_fd, write_fd, array_bytes);
        }
        children.pids.push(pid);
    }
    // The parent is process 0: it reads pipe 0 and writes pipe 1 (pipe 0 with one process).
    let (my_read, my_write) = (pipes[0].read, pipes[1 % procs].write);
    for (k, p) in pipes.iter_mut().enumerate() {
        if k != 0 {
            close(p.read);
            p.read = -1;
        }
        if k != 1 % procs {
            close(p.write);
            p.write = -1;
        }
    }
    let result = drive(my_read, my_write, procs, &array, budget, stop);
    close_all(&mut pipes); // EOF cascades around the ring and the children exit.
    children.reap();
    result
}

/// One round = the token goes once around the ring = `procs` hops.
fn drive(
    read_fd: RawFd,
    write_fd: RawFd,
    procs: usize,
    array: &Array,
    budget: Budget,
    stop: &AtomicBool,
) -> Result<Vec<f64>, Error> {
    let round = || -> Result<(), Error> {
        sum_array(array.as_slice());
        if write_token(write_fd) != 1 || read_token(read_fd) != 1 {
            return Err(os("token ring pipe", std::io::Error::last_os_error()));
        }
        Ok(())
    };
    // Warm up (fault in pages, settle the scheduler) and size a batch from it.
    let warm_start = Instant::now();
    let mut warm_rounds = 0u64;
    while warm_rounds < 3
        || (warm_start.elapsed().as_nanos() < (budget.batch_ns / 4) as u128 && warm_rounds < budget.hops_per_batch_max)
    {
        round()?;
        warm_rounds += 1;
    }
    let ns_per_round = warm_start.elapsed().as_nanos() as f64 / warm_rounds as f64;
    let rounds_per_batch = ((budget.batch_ns as f64 / ns_per_round.max(1.0)) as u64)
        .clamp(2, (budget.hops_per_batch_max / procs as u64).max(2));
    let mut batches = Vec::with_capacity(budget.batches.max(1) as usize);
    for _ in 0..budget.batches.max(1) {
        if stop.load(Ordering::Relaxed) {
            return Err(interrupted());
        }
        let start = Instant::now();
        for _ in 0..rounds_per_batch {
            round()?;
        }
        batches.push(start.elapsed().as_nanos() as f64 / (rounds_per_batch * procs as u64) as f64);
        if budget.floor_tol.is_some_and(|tol| floor_seen_twice(&batches, tol)) {
            break;
        }
    }
    Ok(batches)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    /// The floor is held once two batches agree within the tolerance; one fast batch, or
    /// two that differ by more, is not enough.
    #[test]
    fn a_floor_is_seen_twice_only_by_two_batches_close_to_the_fastest() {
        assert!(!floor_seen_twice(&[], 0.01));
        assert!(!floor_seen_twice(&[2000.0], 0.01));
        assert!(!floor_seen_twice(&[2000.0, 2100.0], 0.01));
        assert!(floor_seen_twice(&[2000.0, 2015.0], 0.01));
        // A later, faster batch resets the floor: the earlier pair no longer counts.
        assert!(floor_seen_twice(&[2000.0, 2015.0, 2500.0], 0.01));
        assert!(!floor_seen_twice(&[2000.0, 2015.0, 1900.0], 0.01));
        assert!(floor_seen_twice(&[2000.0, 2015.0, 1900.0, 1910.0], 0.01));
    }

    #[test]
    fn ring_of_three_runs_and_reaps_its_children() {
        let budget = Budget { batches: 2, batch_ns: 2_000_000, hops_per_batch_max: 10_000, floor_tol: None };
        let stop = AtomicBool::new(false);
        let ns = ring_ns_per_hop(3, 64 << 10, budget, &stop).unwrap();
        assert!(ns.is_finite() && ns > 0.0);
    }

    #[test]
    fn a_stopped_ring_returns_interrupted_and_reaps() {
        let budget = Budget { batches: 2, batch_ns: 1_000_000, hops_per_batch_max: 1000, floor_tol: None };
        let stop = AtomicBool::new(true);
        assert!(matches!(ring_ns_per_hop(4, 0, budget, &stop), Err(e) if e.kind == ErrorKind::Interrupted));
        assert!(ring_ns_per_hop(0, 0, budget, &stop).is_err());
    }
}

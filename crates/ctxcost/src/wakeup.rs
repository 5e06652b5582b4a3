//! Wake-up latency: two threads ping-pong a byte through two pipes, pinned to the same CPU
//! or to two different CPUs. Half a round trip is one wake-up of a blocked thread, which is
//! what a sleeping I/O waiter pays when its completion arrives. On a VM the cross-CPU case
//! includes the IPI to a halted vCPU, which is why it is far larger there.
//!
//! Threads rather than processes: the waiter and the completion side share an address space
//! in the I/O case too. The figure includes the pipe work (it is not subtracted): it is the
//! end-to-end cost of a sleep/wake hand-over.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::affinity::pin_current_thread;
use crate::ring::Budget;
use crate::{internal, interrupted, os, Error};

fn pipe() -> Result<[RawFd; 2], Error> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds has room for the two descriptors.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(os("pipe", std::io::Error::last_os_error()));
    }
    Ok(fds)
}

fn xfer(fd: RawFd, write: bool) -> bool {
    let mut byte = 1u8;
    let p = &mut byte as *mut u8 as *mut libc::c_void;
    for _ in 0..1000 {
        // SAFETY: one byte from/to a local.
        let n = unsafe {
            if write {
                libc::write(fd, p, 1)
            } else {
                libc::read(fd, p, 1)
            }
        };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return n == 1;
    }
    false
}

/// Nanoseconds per one-way wake-up between a thread on `cpu_a` and one on `cpu_b`.
pub fn pingpong_ns(cpu_a: usize, cpu_b: usize, budget: Budget, stop: &AtomicBool) -> Result<f64, Error> {
    let ab = pipe()?;
    let ba = match pipe() {
        Ok(p) => p,
        Err(e) => {
            // SAFETY: closing the pipe we just made.
            unsafe {
                libc::close(ab[0]);
                libc::close(ab[1])
            };
            return Err(e);
        }
    };
    let result = std::thread::scope(|scope| {
        let echo = scope.spawn(move || {
            let pinned = pin_current_thread(cpu_b);
            // Echo until EOF; bounded by a huge count.
            for _ in 0..u64::MAX / 2 {
                if !xfer(ab[0], false) || !xfer(ba[1], true) {
                    break;
                }
            }
            pinned
        });
        let driver = scope.spawn(move || -> Result<f64, Error> {
            pin_current_thread(cpu_a)?;
            let round = || -> Result<(), Error> {
                if !xfer(ab[1], true) || !xfer(ba[0], false) {
                    return Err(os("ping-pong pipe", std::io::Error::last_os_error()));
                }
                Ok(())
            };
            let warm = Instant::now();
            let mut n = 0u64;
            while n < 3 || (warm.elapsed().as_nanos() < (budget.batch_ns / 4) as u128 && n < budget.hops_per_batch_max)
            {
                round()?;
                n += 1;
            }
            let per_round = warm.elapsed().as_nanos() as f64 / n as f64;
            let rounds =
                ((budget.batch_ns as f64 / per_round.max(1.0)) as u64).clamp(2, budget.hops_per_batch_max.max(2));
            let mut best = f64::INFINITY;
            for _ in 0..budget.batches.max(1) {
                if stop.load(Ordering::Relaxed) {
                    return Err(interrupted());
                }
                let start = Instant::now();
                for _ in 0..rounds {
                    round()?;
                }
                best = best.min(start.elapsed().as_nanos() as f64 / (2 * rounds) as f64);
            }
            Ok(best)
        });
        let measured = driver.join().unwrap_or(Err(internal("ping-pong thread panicked")));
        // Closing the driver's write end ends the echo thread with EOF.
        // SAFETY: both threads are done with ab[1] (the driver has returned).
        unsafe { libc::close(ab[1]) };
        let echoed = echo.join().unwrap_or(Ok(()));
        echoed.and(measured)
    });
    // SAFETY: the threads have exited; these descriptors are ours and not yet closed.
    unsafe {
        libc::close(ab[0]);
        libc::close(ba[0]);
        libc::close(ba[1]);
    }
    result
}

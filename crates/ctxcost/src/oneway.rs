//! One-way wake-up latency across CPUs, with the woken thread's CPU kept busy or left idle.
//!
//! A thread on one CPU blocks in `read(2)` on an eventfd; a thread on another CPU writes
//! the current CLOCK_MONOTONIC time into it, and the woken thread subtracts that time from
//! its own clock as soon as `read` returns: one wake-up, timed end to end, with no round
//! trip to halve. Pings are spaced by about a millisecond, so between them the woken
//! thread's CPU has nothing to do:
//!
//! - *polling*: the woken thread's CPU polls instead of halting: a PM QoS request for
//!   0 us of exit latency (`/dev/cpu_dma_latency`, root; the kernel drops the request when
//!   the descriptor closes, also on SIGKILL) makes the idle loop take its polling state;
//!   without root a `SCHED_IDLE` thread polls there instead (on a shared machine it draws
//!   other runnable tasks to that CPU, which the scheduler counts as idle). This is the
//!   wake-up itself (the waker's IPI, the switch in);
//! - *idle*: nothing else runs there, so the CPU halts between pings; on a VM the halt is
//!   an exit to the hypervisor, and the wake-up pays for the vCPU being scheduled back.
//!
//! The difference of the two is what an idle core adds to a blocking I/O's wake-up. The
//! waker's own CPU time per `write` (CLOCK_THREAD_CPUTIME_ID around it, the clock reads'
//! own cost subtracted) is what a wake-up charges the waking side.
//!
//! `smartcon ctx`'s pipe ping-pong ([`crate::wakeup`]) is a round trip of two blocking
//! threads, halved, with the pipe work in it; this module measures the one-way latency in
//! the two core states apart, which the round trip mixes.
//!
//! Non-goals: wake-ups on the same CPU (the ping-pong has them), futex-specific paths (an
//! eventfd wake-up is the same try_to_wake_up).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::affinity::{pin_current_thread, AffinityGuard};
use crate::{bad_input, internal, interrupted, os, Error};

/// Pings a measurement may ask for.
pub const PINGS_MAX: usize = 100_000;

/// What one series of pings measured, each vector sorted ascending.
#[derive(Debug, Clone, PartialEq)]
pub struct OneWay {
    /// From just before the waker's `write` to the woken thread's return from `read`.
    pub latencies_ns: Vec<u64>,
    /// The waker's CPU time per `write` that woke the thread.
    pub waker_cpu_ns: Vec<u64>,
    /// How the woken thread's CPU was kept polling: `pm_qos`, `sched_idle_poller`, or
    /// `None` (left idle).
    pub polled_by: Option<&'static str>,
}

/// A PM QoS request for zero exit latency: while it is held, idle CPUs poll instead of
/// halting. Released when dropped (the descriptor closes).
struct NoHalt(libc::c_int);

impl NoHalt {
    fn request() -> Option<NoHalt> {
        let path = c"/dev/cpu_dma_latency";
        // SAFETY: a NUL-terminated path; a negative return is checked.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        let zero: i32 = 0;
        // SAFETY: 4 bytes from a local i32, the request format the device takes.
        let n = unsafe { libc::write(fd, &zero as *const i32 as *const libc::c_void, 4) };
        if n != 4 {
            // SAFETY: fd is ours and not used after this.
            unsafe { libc::close(fd) };
            return None;
        }
        Some(NoHalt(fd))
    }
}

impl Drop for NoHalt {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours; closing it withdraws the request.
        unsafe { libc::close(self.0) };
    }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec for the call to fill; the clocks used here exist on
    // every Linux this runs on, and on a failure ts stays zero (a zero sample, not UB).
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// An eventfd closed on drop.
struct EventFd(libc::c_int);

impl EventFd {
    fn new() -> Result<EventFd, Error> {
        // SAFETY: eventfd takes no pointers; a negative return is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(os("eventfd", std::io::Error::last_os_error()));
        }
        Ok(EventFd(fd))
    }

    fn write(&self, value: u64) -> bool {
        loop {
            // SAFETY: 8 bytes from a local u64, as eventfd requires.
            let n = unsafe { libc::write(self.0, &value as *const u64 as *const libc::c_void, 8) };
            if n == 8 {
                return true;
            }
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
    }

    fn read(&self) -> Option<u64> {
        let mut value = 0u64;
        loop {
            // SAFETY: 8 bytes into a local u64, as eventfd requires.
            let n = unsafe { libc::read(self.0, &mut value as *mut u64 as *mut libc::c_void, 8) };
            if n == 8 {
                return Some(value);
            }
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        }
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and every thread using it has been joined.
        unsafe { libc::close(self.0) };
    }
}

/// Makes the calling thread `SCHED_IDLE`: it runs only when nothing else wants the CPU.
fn become_sched_idle() -> Result<(), Error> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: param is a valid sched_param; pid 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        return Err(os("sched_setscheduler(SCHED_IDLE)", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn sleep_ns(ns: u64) {
    std::thread::sleep(std::time::Duration::from_nanos(ns));
}

/// The smallest cost of reading the thread CPU clock twice in a row, subtracted from each
/// `write`'s CPU time (the smallest: a preemption only ever adds).
fn cpu_clock_overhead_ns() -> u64 {
    (0..64)
        .map(|_| {
            let a = thread_cpu_ns();
            thread_cpu_ns().saturating_sub(a)
        })
        .min()
        .unwrap_or(0)
}

/// `pings` one-way wake-ups from a thread on `waker_cpu` to one on `wakee_cpu`, spaced by
/// `gap_ns` to `1.5 * gap_ns` (varied, so the pings do not lock onto a timer tick); with
/// `keep_busy` the woken thread's CPU polls instead of halting (see the module doc). The
/// calling thread is the waker; its CPU mask is restored afterwards. Three pings first are
/// not counted.
pub fn one_way_wakeups(
    waker_cpu: usize,
    wakee_cpu: usize,
    keep_busy: bool,
    pings: usize,
    gap_ns: u64,
    stop: &AtomicBool,
) -> Result<OneWay, Error> {
    if pings == 0 || pings > PINGS_MAX {
        return Err(bad_input(format!("pings must be 1..={PINGS_MAX}, got {pings}")));
    }
    if waker_cpu == wakee_cpu {
        return Err(bad_input("the waker and the woken thread must be on two CPUs"));
    }
    const WARMUP: usize = 3;
    let efd = EventFd::new()?;
    let done = AtomicBool::new(false);
    let ready = AtomicBool::new(false);
    let _pin = AffinityGuard::pin(waker_cpu)?;
    let overhead_ns = cpu_clock_overhead_ns();
    let no_halt = if keep_busy { NoHalt::request() } else { None };
    let polled_by = match (keep_busy, &no_halt) {
        (false, _) => None,
        (true, Some(_)) => Some("pm_qos"),
        (true, None) => Some("sched_idle_poller"),
    };
    std::thread::scope(|scope| -> Result<OneWay, Error> {
        let (efd, done, ready) = (&efd, &done, &ready);
        // Set on every way out of the scope, so the poller and the woken thread end.
        struct Finish<'a>(&'a AtomicBool, &'a EventFd);
        impl Drop for Finish<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
                // A value the woken thread reads and, seeing `done`, leaves on.
                self.1.write(1);
            }
        }
        let poller = (polled_by == Some("sched_idle_poller")).then(|| {
            scope.spawn(move || -> Result<(), Error> {
                pin_current_thread(wakee_cpu)?;
                become_sched_idle()?;
                while !done.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
                Ok(())
            })
        });
        let wakee = scope.spawn(move || -> Result<Vec<u64>, Error> {
            pin_current_thread(wakee_cpu)?;
            let mut lat = Vec::with_capacity(pings + WARMUP);
            loop {
                ready.store(true, Ordering::SeqCst);
                let Some(sent) = efd.read() else {
                    return Err(os("eventfd read", std::io::Error::last_os_error()));
                };
                let now = mono_ns();
                if done.load(Ordering::SeqCst) {
                    return Ok(lat);
                }
                lat.push(now.saturating_sub(sent));
            }
        });
        let finish = Finish(done, efd);
        let mut cpu = Vec::with_capacity(pings + WARMUP);
        let mut lcg = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..pings + WARMUP {
            if stop.load(Ordering::Relaxed) {
                drop(finish);
                let _ = wakee.join();
                return Err(interrupted());
            }
            lcg = lcg.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            sleep_ns(gap_ns + (lcg >> 33) % (gap_ns / 2 + 1));
            // The woken thread is back in read (it sets `ready` just before): a ping
            // never lands on a thread that is still running.
            while !ready.swap(false, Ordering::SeqCst) {
                if done.load(Ordering::Relaxed) || stop.load(Ordering::Relaxed) {
                    break;
                }
                sleep_ns(50_000);
            }
            let c0 = thread_cpu_ns();
            let t0 = mono_ns().max(2);
            let ok = efd.write(t0);
            let c1 = thread_cpu_ns();
            if !ok {
                drop(finish);
                let _ = wakee.join();
                return Err(os("eventfd write", std::io::Error::last_os_error()));
            }
            cpu.push(c1.saturating_sub(c0).saturating_sub(overhead_ns));
        }
        // Let the last ping be read before the closing value: the woken thread sets `ready`
        // once it is back in read. (A fixed wait of one gap lost the last ping whenever its
        // wake-up took longer, an idle core's p99 being 1.8 ms on the team's VM: the
        // closing value then added to it in the eventfd, and the slowest wake-up went
        // uncounted; a fresh-clone test run saw 19 pings of 20.)
        while !ready.load(Ordering::SeqCst) && !wakee.is_finished() && !stop.load(Ordering::Relaxed) {
            sleep_ns(50_000);
        }
        drop(finish);
        let lat = wakee.join().map_err(|_| internal("the woken thread panicked"))??;
        if let Some(p) = poller {
            p.join().map_err(|_| internal("the poller thread panicked"))??;
        }
        let mut latencies_ns: Vec<u64> = lat.into_iter().skip(WARMUP).collect();
        let mut waker_cpu_ns: Vec<u64> = cpu.into_iter().skip(WARMUP).collect();
        latencies_ns.sort_unstable();
        waker_cpu_ns.sort_unstable();
        drop(no_halt);
        Ok(OneWay { latencies_ns, waker_cpu_ns, polled_by })
    })
}

/// The value at quantile `q` (0..=1) of sorted samples, 0 for none.
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn every_ping_is_measured_and_sorted() {
        let cpus = crate::affinity::allowed_cpus().unwrap();
        if cpus.len() < 2 {
            println!("skipped: one allowed CPU, no cross-CPU wake-up to measure");
            return;
        }
        let stop = AtomicBool::new(false);
        for busy in [false, true] {
            let m = one_way_wakeups(cpus[0], cpus[1], busy, 20, 200_000, &stop).unwrap();
            assert_eq!(m.latencies_ns.len(), 20, "busy {busy}");
            assert_eq!(m.waker_cpu_ns.len(), 20);
            assert!(m.latencies_ns.windows(2).all(|w| w[0] <= w[1]));
            assert!(m.latencies_ns[0] > 0, "a wake-up takes some time");
        }
        assert!(one_way_wakeups(cpus[0], cpus[0], false, 5, 1000, &stop).is_err());
        assert!(one_way_wakeups(cpus[0], cpus[1], false, 0, 1000, &stop).is_err());
        stop.store(true, Ordering::Relaxed);
        assert!(
            matches!(one_way_wakeups(cpus[0], cpus[1], true, 5, 1000, &stop), Err(e) if e.kind == ErrorKind::Interrupted)
        );
    }

    #[test]
    fn quantiles_of_sorted_samples() {
        let v: Vec<u64> = (1..=101).collect();
        assert_eq!((quantile(&v, 0.5), quantile(&v, 0.99), quantile(&v, 0.0)), (51, 100, 1));
        assert_eq!(quantile(&[], 0.5), 0);
    }
}

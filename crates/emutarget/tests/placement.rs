//! I/O threads run where the job says, and warm-up I/Os are done but not measured.
//!
//! Tests that pin choose among the CPUs this process may use (its affinity mask, as set by
//! `taskset` or a cgroup cpuset), not among all online CPUs: pinning to a CPU outside the
//! mask fails with EINVAL, which is the environment's doing, not a bug (issue 11).

use std::sync::atomic::AtomicBool;

use smartcon_emutarget::target::{self, OpenOptions};
use smartcon_engine::decision::Strategy;
use smartcon_engine::job::{run_job, JobSpec, Pattern, StrategyChoice};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::placement::{
    current_affinity, current_cpu, online_cpu_ids, pin_current_thread, pinned_split, Placement,
};
use smartcon_util::Op;

/// The CPUs this process may run on: the test thread's mask, inherited from the process
/// (no test here pins its own test thread, only threads it spawns).
fn allowed_cpus() -> Vec<usize> {
    let online = online_cpu_ids();
    let allowed: Vec<usize> = current_affinity().unwrap_or_else(|| online.clone());
    let usable: Vec<usize> = allowed.into_iter().filter(|c| online.contains(c)).collect();
    assert!(!usable.is_empty(), "the process may run on no online CPU");
    usable
}

#[test]
fn a_pinned_thread_runs_only_on_its_cpu() {
    for &cpu in &allowed_cpus() {
        let seen = std::thread::spawn(move || {
            pin_current_thread(&[cpu]).unwrap();
            // Give the scheduler every chance to move it: yield and sleep a few times.
            let mut seen = Vec::new();
            for _ in 0..20 {
                std::thread::yield_now();
                std::thread::sleep(std::time::Duration::from_micros(200));
                seen.push(current_cpu().unwrap());
            }
            seen
        })
        .join()
        .unwrap();
        assert!(seen.iter().all(|&c| c == cpu), "pinned to {cpu}, ran on {seen:?}");
    }
}

#[test]
fn warmup_ios_are_done_but_not_counted() {
    let t = target::open(&target::parse_target("emu:optane,size=8m").unwrap(), OpenOptions::default()).unwrap();
    let profile = t.builtin_profile().unwrap();
    let monitor = SystemMonitor::fixed(0);
    let stop = AtomicBool::new(false);
    for strategy in
        [StrategyChoice::Fixed(Strategy::Block), StrategyChoice::Fixed(Strategy::Spin), StrategyChoice::Smart]
    {
        let mut js = JobSpec::new(Op::Read, Pattern::Rand, 4096, strategy);
        js.duration_ns = 10_000_000_000;
        js.ios_max = Some(50);
        js.warmup_ios = 20;
        // Pinned to the first CPU this process may use: the job must still run (and pinning
        // is honoured by a test above).
        js.cpus = Some(vec![allowed_cpus()[0]]);
        let r = run_job(t.as_ref(), &js, &profile, &monitor, &stop).unwrap();
        assert_eq!(r.ios, 30, "{}: 50 I/Os in all, the first 20 unmeasured", strategy.name());
        let decided: u64 = r.decisions.by_strategy.values().sum();
        assert_eq!(decided, 30, "{}: decisions counted for measured I/Os only", strategy.name());
    }
}

#[test]
fn a_cpu_outside_the_machine_is_refused() {
    let t = target::open(&target::parse_target("emu:optane,size=8m").unwrap(), OpenOptions::default()).unwrap();
    let mut js = JobSpec::new(Op::Read, Pattern::Rand, 4096, StrategyChoice::Fixed(Strategy::Block));
    js.duration_ns = 10_000_000;
    js.cpus = Some(vec![1000]);
    let err =
        run_job(t.as_ref(), &js, &t.builtin_profile().unwrap(), &SystemMonitor::fixed(0), &AtomicBool::new(false))
            .expect_err("CPU 1000 does not exist here");
    assert!(err.message.contains("cannot pin"), "{}", err.message);
    assert!(Placement::parse("4000").is_err(), "and the CLI's parser refuses it first");
}

/// A pinned thread knows the CPUs left for io_uring's workers while it spins (`Ring`
/// moves them there); an unpinned one has none to offer.
#[test]
fn a_pinned_thread_splits_the_machine_into_its_cpus_and_the_others() {
    let online = online_cpu_ids();
    if online.len() < 2 {
        eprintln!("skipped: one CPU, nothing to split");
        return;
    }
    if current_affinity().is_some_and(|mine| mine != online) {
        eprintln!("skipped: the test itself runs pinned (taskset?), so nothing here is unpinned");
        return;
    }
    assert_eq!(std::thread::spawn(pinned_split).join().unwrap(), None, "unpinned");
    let first = online[0];
    let split = std::thread::spawn(move || {
        pin_current_thread(&[first]).unwrap();
        pinned_split()
    })
    .join()
    .unwrap();
    assert_eq!(split, Some((vec![first], online[1..].to_vec())));
}

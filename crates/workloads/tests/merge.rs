//! Temporal merge and page-unit completion under many threads (issue 6, items 3-4): every
//! request's data is correct and every waiter is released exactly once, in all four
//! combinations of {fixed, dynamic} polling x {serialized, pipelined} post-I/O work, with
//! merge off as the reference, for reads and writes, on one and on two channels.
//!
//! No timing is asserted: the checks are on data and counts. (`Waiter::io` itself asserts
//! that its request was released exactly once, in release builds too.)

use std::sync::atomic::AtomicBool;

use smartcon_devemu::parse_spec;
use smartcon_engine::error::ErrorKind;
use smartcon_engine::job::Pattern;
use smartcon_engine::target::AlignedBuf;
use smartcon_engine::verify;
use smartcon_engine::wait::PollParams;
use smartcon_util::Op;
use smartcon_workloads::merge::job::{run_merge_job, MergeJobSpec};
use smartcon_workloads::merge::{MergeConfig, MergeDevice, Polling, PAGE_BYTES};

const THREADS: u64 = 16;
const IOS_PER_THREAD: u64 = 250;
const SPAN_PAGES: u64 = 4096; // 16 MiB
const SEED: u64 = 0xfeed_0001;
const OLD_SEED: u64 = 0xfeed_0002;

fn configs() -> Vec<MergeConfig> {
    let mut v = Vec::new();
    for merge in [true, false] {
        for pipelined in [false, true] {
            for polling in [Polling::Fixed, Polling::Dynamic] {
                let mut c = MergeConfig::new(merge, pipelined, polling);
                // A short sampling phase, so dynamic polling predicts within the test.
                c.poll = PollParams { sampling_ns: 2_000_000, ..PollParams::DEFAULT };
                c.verify_seed = Some(SEED);
                v.push(c);
            }
        }
    }
    v
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// 16 threads read random pages; each checks the data it got back itself (beyond the
/// post-I/O verification), so a copy-out into the wrong waiter's buffer is caught.
fn reads(target: &str, config: MergeConfig) {
    let spec = parse_spec(target).unwrap();
    let dev = MergeDevice::new(&spec, config).unwrap();
    dev.prefill(SPAN_PAGES * PAGE_BYTES, SEED);
    let ios: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let dev = &dev;
                s.spawn(move || {
                    let mut w = dev.waiter().unwrap();
                    let mut buf = AlignedBuf::new(PAGE_BYTES as usize);
                    let mut x = (t + 1) * 0x9e37_79b9_7f4a_7c15;
                    for _ in 0..IOS_PER_THREAD {
                        let off = (xorshift(&mut x) % SPAN_PAGES) * PAGE_BYTES;
                        buf.as_mut_slice().fill(0);
                        w.io(Op::Read, buf.as_mut_slice(), off).unwrap();
                        verify::check(buf.as_slice(), off, PAGE_BYTES, SEED)
                            .unwrap_or_else(|m| panic!("{} thread {t}: {m}", config.label()));
                    }
                    IOS_PER_THREAD
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let c = dev.counts();
    assert_eq!(c.releases, ios, "{}: every request released once", config.label());
    assert_eq!(c.pages, ios, "{}: one page per 4 KiB request", config.label());
    assert!(c.device_requests >= ios.div_ceil(config.merge_pages_max as u64) && c.device_requests <= ios);
    if !config.merge {
        assert_eq!(c.device_requests, ios, "no merging with merge off");
    }
}

/// 16 threads write their own pages (thread t owns pages t, t + 16, ...) over data written
/// with another seed; afterwards every written page carries the new seed and every other
/// page the old one, so a lost, torn or misdirected write is caught.
fn writes(target: &str, config: MergeConfig) {
    let spec = parse_spec(target).unwrap();
    let dev = MergeDevice::new(&spec, config).unwrap();
    dev.prefill(SPAN_PAGES * PAGE_BYTES, OLD_SEED);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let dev = &dev;
            s.spawn(move || {
                let mut w = dev.waiter().unwrap();
                let mut buf = AlignedBuf::new(PAGE_BYTES as usize);
                for i in 0..IOS_PER_THREAD {
                    let off = (t + i * THREADS) * PAGE_BYTES;
                    verify::fill(buf.as_mut_slice(), off, PAGE_BYTES, SEED);
                    w.io(Op::Write, buf.as_mut_slice(), off).unwrap();
                }
            });
        }
    });
    let written = THREADS * IOS_PER_THREAD;
    let mut buf = AlignedBuf::new(PAGE_BYTES as usize);
    for page in 0..SPAN_PAGES {
        let off = page * PAGE_BYTES;
        dev.peek(off, buf.as_mut_slice());
        let want = if page < written { SEED } else { OLD_SEED };
        verify::check(buf.as_slice(), off, PAGE_BYTES, want).unwrap_or_else(|m| panic!("{}: {m}", config.label()));
    }
    assert_eq!(dev.counts().releases, written, "{}: every request released once", config.label());
}

#[test]
fn every_combination_reads_correct_data_and_releases_each_waiter_once() {
    for c in configs() {
        reads("emu:optane,channels=1,size=64m", c);
    }
}

#[test]
fn every_combination_writes_correct_data_and_releases_each_waiter_once() {
    for c in configs() {
        writes("emu:optane,channels=1,size=64m", c);
    }
}

#[test]
fn two_channels_with_two_leaders_lose_nothing() {
    for c in configs().into_iter().filter(|c| c.merge) {
        reads("emu:optane,channels=2,size=64m", c);
        writes("emu:optane,channels=2,size=64m", c);
    }
}

#[test]
fn polls_that_cost_channel_time_still_complete_every_request() {
    let mut c = MergeConfig::new(true, true, Polling::Fixed);
    c.verify_seed = Some(SEED);
    reads("emu:optane,channels=1,size=64m,poll_cost=200ns", c);
    c.pipelined = false;
    writes("emu:optane,channels=1,size=64m,poll_cost=200ns", c);
}

#[test]
fn multi_page_requests_merge_and_complete_page_by_page() {
    // 16 KiB requests: 4 pages each, up to 8 requests per merged request.
    for pipelined in [false, true] {
        let mut c = MergeConfig::new(true, pipelined, Polling::Fixed);
        c.bs_bytes = 4 * PAGE_BYTES;
        c.verify_seed = Some(SEED);
        let spec = parse_spec("emu:optane,channels=1,size=64m").unwrap();
        let dev = MergeDevice::new(&spec, c).unwrap();
        let job = MergeJobSpec {
            op: Op::Read,
            pattern: Pattern::Rand,
            threads: 12,
            duration_ns: 60_000_000_000,
            ios_per_thread_max: Some(150),
            span_bytes: 16 << 20,
            prefill: true,
            seed: 3,
        };
        let r = run_merge_job(&dev, &job, &AtomicBool::new(false)).unwrap();
        assert_eq!(r.ios, 12 * 150);
        assert_eq!(r.releases, r.ios);
        assert_eq!(r.pages, 4 * r.ios);
        assert!(r.pages_per_request_mean >= 4.0 && r.pages_per_request_mean <= 32.0, "{}", r.pages_per_request_mean);
    }
}

#[test]
fn a_job_accounts_for_every_io_and_a_bad_pattern_is_a_verify_error() {
    let c = MergeConfig::new(true, true, Polling::Dynamic);
    let spec = parse_spec("emu:optane,channels=1,size=64m").unwrap();
    let dev = MergeDevice::new(
        &spec,
        MergeConfig { poll: PollParams { sampling_ns: 1_000_000, ..PollParams::DEFAULT }, ..c },
    )
    .unwrap();
    let mut job = MergeJobSpec {
        op: Op::Write,
        pattern: Pattern::Seq,
        threads: 16,
        duration_ns: 60_000_000_000,
        ios_per_thread_max: Some(200),
        span_bytes: 16 << 20,
        prefill: true,
        seed: 9,
    };
    let r = run_merge_job(&dev, &job, &AtomicBool::new(false)).unwrap();
    assert_eq!((r.ios, r.releases, r.pages), (3200, 3200, 3200));
    assert!(r.device_requests <= r.ios && r.pages_per_request_mean >= 1.0);
    assert!(r.latency_ns_p50 <= r.latency_ns_p99);

    // Device memory with another seed: the post-I/O verification of a read names the
    // offset, and the job ends with that error (no waiter is left parked).
    dev.prefill(16 << 20, OLD_SEED);
    job.op = Op::Read;
    job.prefill = false;
    let e = run_merge_job(&dev, &job, &AtomicBool::new(false)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Verify);
    assert!(e.message.contains("stale data"), "{}", e.message);
}

#[test]
fn bad_configurations_are_usage_errors() {
    let spec = parse_spec("emu:optane,size=64m").unwrap();
    let bad = |c: MergeConfig| MergeDevice::new(&spec, c).err().map(|e| e.kind);
    let base = MergeConfig::new(true, true, Polling::Fixed);
    assert_eq!(bad(MergeConfig { merge_pages_max: 0, ..base }), Some(ErrorKind::Usage));
    assert_eq!(bad(MergeConfig { merge_pages_max: 100_000, ..base }), Some(ErrorKind::Usage));
    assert_eq!(bad(MergeConfig { bs_bytes: 512, ..base }), Some(ErrorKind::Usage));
    assert_eq!(bad(MergeConfig { bs_bytes: 64 * PAGE_BYTES, ..base }), Some(ErrorKind::Usage));
    let dev = MergeDevice::new(&spec, base).unwrap();
    let job = MergeJobSpec {
        op: Op::Read,
        pattern: Pattern::Rand,
        threads: 0,
        duration_ns: 1_000_000,
        ios_per_thread_max: None,
        span_bytes: 1 << 20,
        prefill: false,
        seed: 1,
    };
    let e = run_merge_job(&dev, &job, &AtomicBool::new(false)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Usage);
}

/// Issue 11: requests live on their waiters' stacks and leaders reach them by pointer, so a
/// panic in a leader's post-I/O work must not unwind (which would free its own queued
/// request while others still use it, and strand the waiters of its batch): the process
/// aborts. The panicking run happens in a child process (this test binary re-executed with
/// an environment variable) and the parent asserts that it died by SIGABRT with the
/// injected panic's message and the guard's, not by exiting, hanging or another signal.
#[test]
fn a_panic_while_other_threads_hold_the_request_aborts_the_process() {
    const CHILD_ENV: &str = "SMARTCON_MERGE_PANIC_CHILD";
    const NAME: &str = "a_panic_while_other_threads_hold_the_request_aborts_the_process";
    if std::env::var_os(CHILD_ENV).is_some() {
        // Two channels, so two leaders share the queue: the panicking leader's own request
        // may be in the other leader's hands.
        let spec = parse_spec("emu:optane,channels=2,size=64m").unwrap();
        let mut c = MergeConfig::new(true, true, Polling::Fixed);
        c.verify_seed = Some(SEED);
        let mut dev = MergeDevice::new(&spec, c).unwrap();
        dev.inject_panic_at_release(THREADS * 20);
        dev.prefill(SPAN_PAGES * PAGE_BYTES, SEED);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let dev = &dev;
                s.spawn(move || {
                    let mut w = dev.waiter().unwrap();
                    let mut buf = AlignedBuf::new(PAGE_BYTES as usize);
                    for i in 0..IOS_PER_THREAD {
                        let off = ((t * IOS_PER_THREAD + i) % SPAN_PAGES) * PAGE_BYTES;
                        w.io(Op::Read, buf.as_mut_slice(), off).unwrap();
                    }
                });
            }
        });
        // Reaching this line means the panic unwound (or never happened): the parent sees
        // a normal exit and fails.
        return;
    }
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    // A liveness bound, not a timing assertion: without the guard the run may hang with
    // waiters parked forever, and the test must end.
    let mut status = None;
    for _ in 0..2400 {
        if let Some(s) = child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let Some(status) = status else {
        child.kill().unwrap();
        child.wait().unwrap();
        panic!("the child hung after the injected panic (waiters stranded) instead of aborting");
    };
    let stderr = reader.join().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGABRT), "child ended by {status:?}, stderr:\n{stderr}");
    assert!(stderr.contains("injected fault"), "{stderr}");
    assert!(stderr.contains("aborting rather than freeing memory"), "{stderr}");
}

/// Regression: a `Waiter` is `Send`, and one made on another thread than the one calling
/// `io` used to address its wake-ups to the thread that made it, so a parked waiter was
/// never woken and the run hung. Waiters made here are moved to their I/O threads; a hang
/// fails the test after a generous liveness bound instead of blocking the suite.
#[test]
fn a_waiter_moved_to_another_thread_is_still_woken() {
    let spec = parse_spec("emu:optane,channels=1,size=64m").unwrap();
    let mut c = MergeConfig::new(true, false, Polling::Fixed);
    c.verify_seed = Some(SEED);
    // Leaked so the I/O threads need not be scoped: a hung thread must not block this one.
    let dev: &'static MergeDevice = Box::leak(Box::new(MergeDevice::new(&spec, c).unwrap()));
    dev.prefill(SPAN_PAGES * PAGE_BYTES, SEED);
    let (done, finished) = std::sync::mpsc::channel();
    for t in 0..8u64 {
        let mut w = dev.waiter().unwrap();
        let done = done.clone();
        std::thread::spawn(move || {
            let mut buf = AlignedBuf::new(PAGE_BYTES as usize);
            for i in 0..100 {
                w.io(Op::Read, buf.as_mut_slice(), ((t * 100 + i) % SPAN_PAGES) * PAGE_BYTES).unwrap();
            }
            done.send(()).unwrap();
        });
    }
    for n in 0..8 {
        finished
            .recv_timeout(std::time::Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("{n} of 8 threads finished; the others were never woken"));
    }
    assert_eq!(dev.counts().releases, 800);
}

/// Every device request goes through the waiting thread's SmartPort as a group call: with
/// any `--strategy` (the non-polling ones, a decision, the paper's two pollings) every
/// request's data is right, every waiter is released once, the device's in-flight counters
/// are back at zero with no leave unmatched, and the runs' `waits` count every device
/// request under the strategy the port waited with (a fixed one: only that one).
#[test]
fn every_strategy_goes_through_the_port_and_loses_nothing() {
    use smartcon_engine::decision::Strategy;
    use smartcon_engine::smartport::StrategyChoice;
    let spec = parse_spec("emu:optane,channels=1,size=16m").unwrap();
    for strategy in ["block", "spin", "sync", "poll", "hybrid", "smart", "dip"] {
        let choice = StrategyChoice::parse(strategy).unwrap();
        for pipelined in [false, true] {
            let mut c = MergeConfig::with_strategy(true, pipelined, choice);
            c.poll = PollParams { sampling_ns: 2_000_000, ..PollParams::DEFAULT };
            c.verify_seed = Some(SEED);
            let label = c.label();
            reads("emu:optane,channels=1,size=16m", c);
            let dev = MergeDevice::new(&spec, c).unwrap();
            let job = MergeJobSpec {
                op: Op::Write,
                pattern: Pattern::Rand,
                threads: 8,
                duration_ns: 10_000_000_000,
                ios_per_thread_max: Some(100),
                span_bytes: SPAN_PAGES * PAGE_BYTES,
                prefill: true,
                seed: 3,
            };
            let r = run_merge_job(&dev, &job, &AtomicBool::new(false)).unwrap();
            assert_eq!((r.ios, r.releases), (800, 800), "{label}");
            assert_eq!(r.waits.values().sum::<u64>(), r.device_requests, "{label}: {:?}", r.waits);
            if let StrategyChoice::Fixed(s) = choice {
                assert_eq!(r.waits.get(s.name()), Some(&r.device_requests), "{label}: {:?}", r.waits);
            } else {
                assert!(
                    r.waits
                        .keys()
                        .all(|k| [Strategy::Block, Strategy::Spin, Strategy::Sync].iter().any(|s| s.name() == *k)),
                    "{label}: smart waits by its three ways: {:?}",
                    r.waits
                );
            }
            assert_eq!(dev.inflight().ours(), 0, "{label}: the counters are back at zero");
            assert_eq!(dev.inflight().unmatched_leaves(), 0, "{label}");
        }
    }
}

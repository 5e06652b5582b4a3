//! What the SmartPort glue adds to one I/O: a 4 KiB read of a page-cached file by a plain
//! pread, against the same pread through a port (`sync`: in-flight counters, clock reads,
//! counters and histogram), and a port deciding per I/O (`smart` on a very fast profile,
//! which waits `sync` too, so the difference is the decision itself: one atomic load and
//! the Decision Module). Compare the three as ratios within one run.
//!
//! Two parts of that glue measured alone (issue 21), each beside its direct counterpart:
//! the injected clock, a `dyn Time` read through its `Arc` (a port reads it twice per I/O),
//! against a direct `clock_gettime(CLOCK_MONOTONIC)`; and `InFlight::enter` + `leave`,
//! whose leave saturates at zero with a compare-and-swap loop, against a plain
//! `fetch_add` + `fetch_sub` on two counters (uncontended, one thread).
//!
//! `cargo bench -p smartcon-engine --bench smartport`
use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use smartcon_engine::clock::{self, SharedTime};
use smartcon_engine::decision::{DeviceClass, Strategy};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::Profile;
use smartcon_engine::smartport::{SmartPort, SmartPortOptions, StrategyChoice};
use smartcon_engine::target::InFlight;

fn bench(c: &mut Criterion) {
    let path = std::env::temp_dir().join(format!("smartport-bench-{}", std::process::id()));
    std::fs::File::create(&path).unwrap().write_all(&vec![1u8; 1 << 20]).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let fd = file.as_raw_fd();
    let mut buf = vec![0u8; 4096];
    let mut i = 0u64;
    c.bench_function("pread 4 KiB, page cache (no port)", |b| {
        b.iter(|| {
            i = (i + 1) % 256;
            // SAFETY: buf is valid for 4096 bytes for the call.
            unsafe { libc::pread(fd, buf.as_mut_ptr() as *mut libc::c_void, 4096, (i * 4096) as libc::off_t) }
        })
    });
    let mut profile = Profile::paper_default("bench");
    profile.class = DeviceClass::VeryFast;
    for (name, strategy) in [
        ("SmartPort sync", StrategyChoice::Fixed(Strategy::Sync)),
        ("SmartPort smart (decides sync)", StrategyChoice::Smart),
    ] {
        let options = SmartPortOptions {
            strategy,
            profile: Some(profile.clone()),
            monitor: Some(Arc::new(SystemMonitor::fixed(0))),
            ..Default::default()
        };
        let mut port = SmartPort::open(fd, options).unwrap();
        c.bench_function(&format!("{name}, 4 KiB, page cache"), |b| {
            b.iter(|| {
                i = (i + 1) % 256;
                black_box(port.read_at(&mut buf, i * 4096).unwrap())
            })
        });
    }
    let _ = std::fs::remove_file(&path);
}

/// The injected clock against the direct read, and the saturating leave against fetch_sub.
fn parts(c: &mut Criterion) {
    c.bench_function("clock: clock_gettime(CLOCK_MONOTONIC) direct", |b| {
        b.iter(|| {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `ts` is a valid, writable timespec.
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
            black_box(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
        })
    });
    c.bench_function("clock: engine::clock::now_ns (inlined)", |b| b.iter(|| black_box(clock::now_ns())));
    // As SmartPort holds it: an Arc<dyn Time>, the call dispatched through the vtable. The
    // handle goes through black_box so the compiler cannot see which clock it is.
    let time: SharedTime = black_box(clock::real());
    c.bench_function("clock: SharedTime (Arc<dyn Time>) now_ns", |b| b.iter(|| black_box(time.now_ns())));

    // The same work as enter (two fetch_adds, the others' two loads) and a leave of two
    // plain fetch_subs: the difference to the next line is the saturating leave alone.
    let (count, bytes) = (AtomicU32::new(0), AtomicU64::new(0));
    let (others_count, others_bytes) = (AtomicU32::new(0), AtomicU64::new(0));
    c.bench_function("in-flight: plain fetch_add + fetch_sub", |b| {
        b.iter(|| {
            black_box(count.fetch_add(1, Ordering::Relaxed));
            black_box(bytes.fetch_add(4096, Ordering::Relaxed));
            black_box(others_count.load(Ordering::Relaxed));
            black_box(others_bytes.load(Ordering::Relaxed));
            black_box(count.fetch_sub(1, Ordering::Relaxed));
            black_box(bytes.fetch_sub(4096, Ordering::Relaxed));
        })
    });
    let inflight = InFlight::default();
    c.bench_function("in-flight: InFlight::enter + leave (saturating CAS)", |b| {
        b.iter(|| {
            black_box(inflight.enter(4096));
            inflight.leave(4096);
        })
    });
    assert_eq!(inflight.unmatched_leaves(), 0);
}

criterion_group!(benches, bench, parts);
criterion_main!(benches);

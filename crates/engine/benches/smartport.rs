//! What the SmartPort glue adds to one I/O: a 4 KiB read of a page-cached file by a plain
//! pread, against the same pread through a port (`sync`: in-flight counters, clock reads,
//! counters and histogram), and a port deciding per I/O (`smart` on a very fast profile,
//! which waits `sync` too, so the difference is the decision itself: one atomic load and
//! the Decision Module). Compare the three as ratios within one run.
use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use smartcon_engine::decision::{DeviceClass, Strategy};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::Profile;
use smartcon_engine::smartport::{SmartPort, SmartPortOptions, StrategyChoice};

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

criterion_group!(benches, bench);
criterion_main!(benches);

//! The decision runs on every I/O; it must cost a few nanoseconds (target: under 30 ns).
//! `decide` and `decide_paper` alone, then smart's whole per-I/O decision as a SmartPort
//! takes it (`SmartTargetPort::choose`): the System Monitor's reading against the profile's
//! CPU threshold with hysteresis (`SystemMonitor::cpu_utilization_for`: three relaxed
//! loads, at most one store), then `decide`, on a monitor whose ticker runs (the process's
//! one, default window) and on a fixed one.
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use smartcon_engine::decision::*;
use smartcon_engine::monitor::{SystemMonitor, WINDOW_NS_DEFAULT};

fn bench(c: &mut Criterion) {
    // spin_cheaper_bytes_max below the requests' sizes: every call takes all five checks.
    let t = Thresholds {
        class: DeviceClass::Fast,
        size_threshold_bytes: 64 << 10,
        cpu_threshold_pct: 50,
        queue_limit: 0,
        spin_cheaper_bytes_max: 2048,
        spin_cheaper_write_bytes_max: 2048,
        very_fast_bytes_max: u64::MAX,
        very_fast_write_bytes_max: u64::MAX,
        size_threshold_busy_bytes: 0,
    };
    let mut i = 0u64;
    c.bench_function("decide (fast device, all five checks)", |b| {
        b.iter(|| {
            i = i.wrapping_add(4096);
            decide(
                black_box(Request { bytes: 4096 + (i & 0xfff), write: i & 0x1000 != 0 }),
                black_box(DeviceState { inflight_count: 0, inflight_bytes: 0 }),
                black_box(SystemState { cpu_utilization_pct: (i % 100) as u32 }),
                black_box(&t),
            )
        })
    });
    // The paper's rule (`paper`): the same branches less spin-cheaper.
    let tp = t.paper(DeviceClass::Fast, 0);
    c.bench_function("decide_paper (fast device, all four checks)", |b| {
        b.iter(|| {
            i = i.wrapping_add(4096);
            decide_paper(
                black_box(Request { bytes: 4096 + (i & 0xfff), write: i & 0x1000 != 0 }),
                black_box(DeviceState { inflight_count: 0, inflight_bytes: 0 }),
                black_box(SystemState { cpu_utilization_pct: (i % 100) as u32 }),
                black_box(&tp),
            )
        })
    });
    // A live monitor: its ticker publishes a new reading (and its noise) every window / 10.
    let live = SystemMonitor::start(WINDOW_NS_DEFAULT);
    c.bench_function("cpu_utilization_for (live monitor)", |b| {
        b.iter(|| black_box(&live).cpu_utilization_for(black_box(t.cpu_threshold_pct)))
    });
    let fixed = SystemMonitor::fixed(60);
    for (name, monitor) in [("live", &live), ("fixed 60%", &fixed)] {
        c.bench_function(&format!("smart's decision: cpu_utilization_for + decide ({name} monitor)"), |b| {
            b.iter(|| {
                i = i.wrapping_add(4096);
                let system =
                    SystemState { cpu_utilization_pct: black_box(monitor).cpu_utilization_for(t.cpu_threshold_pct) };
                decide(
                    black_box(Request { bytes: 4096 + (i & 0xfff), write: i & 0x1000 != 0 }),
                    black_box(DeviceState { inflight_count: 0, inflight_bytes: 0 }),
                    system,
                    black_box(&t),
                )
            })
        });
    }
    live.stop();
}

criterion_group!(benches, bench);
criterion_main!(benches);

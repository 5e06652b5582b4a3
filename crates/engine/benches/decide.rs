//! The decision runs on every I/O; it must cost a few nanoseconds (target: under 30 ns).
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use smartcon_engine::decision::*;

fn bench(c: &mut Criterion) {
    // spin_cheaper_bytes_max below the requests' sizes: every call takes all five checks.
    let t = Thresholds {
        class: DeviceClass::Fast,
        size_threshold_bytes: 64 << 10,
        cpu_threshold_pct: 50,
        queue_limit: 0,
        spin_cheaper_bytes_max: 2048,
        spin_cheaper_write_bytes_max: 2048,
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
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! Discrete-event replay speed: requests per second of wall time on emu:nvme at QD32 (the
//! issue's >= 5 M/s target) and the rollback-heavy SJF discipline. Small I/O counts keep a
//! CI run short; `smartcon emulate replay` reports the same figure for any size.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use smartcon_devemu::{parse_spec, Op};
use smartcon_emulate::replay::{run_virtual, ClosedLoop, Workload};

fn des(c: &mut Criterion) {
    let ios = 100_000;
    let mut group = c.benchmark_group("des");
    group.throughput(Throughput::Elements(ios));
    group.sample_size(10);
    for device in ["emu:nvme", "emu:nvme,queue=sjf", "emu:hdd"] {
        let spec = parse_spec(device).unwrap();
        let job = Workload::Closed(ClosedLoop {
            op: Op::Read,
            sequential: false,
            bs_bytes: 4096,
            qd: 32,
            ios,
            think_ns: 0,
            seed: 1,
        });
        group.bench_function(format!("{device} qd32 randread 4k"), |b| {
            b.iter(|| run_virtual(&spec, &job, false).unwrap().ios)
        });
    }
    group.finish();
}

criterion_group!(benches, des);
criterion_main!(benches);

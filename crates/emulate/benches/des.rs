//! Discrete-event replay speed: requests per second on emu:nvme at QD32 (closed loop), the
//! rollback-heavy SJF discipline, the HDD, and streamed fio iolog, MSR and Alibaba traces
//! (parsed while they are replayed, from memory so that the disk is not measured). Small I/O counts keep a CI run
//! short; `smartcon emulate replay` reports the same figure (and per CPU second) for any size.
//!
//! Measured in CPU time of the benchmark thread ([`CpuTime`]), not wall time: the host is
//! shared with other builds, and the command's "M/s of CPU time" is the figure to compare.

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use smartcon_devemu::{parse_spec, FaultPlan, Op};
use smartcon_emulate::replay::{
    replay_parsed, replay_reader, replay_reader_inline, run_virtual, thread_cpu_ns, ClosedLoop, Hooks, Workload,
    BATCH_IOS,
};

/// Criterion's measurement as CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID), in ns.
struct CpuTime;

impl Measurement for CpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

/// Times in ms of CPU, throughputs in M elements (requests) per CPU second.
struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, _typical_ns: f64, values: &mut [f64]) -> &'static str {
        values.iter_mut().for_each(|v| *v /= 1e6);
        "ms (CPU)"
    }
    fn scale_throughputs(&self, _typical_ns: f64, throughput: &Throughput, values: &mut [f64]) -> &'static str {
        let n = match *throughput {
            Throughput::Elements(n) | Throughput::Bytes(n) | Throughput::BytesDecimal(n) => n as f64,
        };
        values.iter_mut().for_each(|v| *v = n * 1e3 / *v);
        "M/s (CPU)"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}
use smartcon_emulate::trace::{TraceFormat, TraceOptions, TraceReader};

/// A trace of `n` 4 KiB requests that emu:nvme keeps up with (about 100 k/s, 70% reads), in
/// one of the streamed formats: a fio v3 iolog, an MSR Cambridge or an Alibaba CSV.
fn trace(format: TraceFormat, n: u64) -> Vec<u8> {
    let mut out = match format {
        TraceFormat::FioV3 => b"fio version 3 iolog\n0 /dev/nvme0n1 add\n".to_vec(),
        _ => Vec::new(),
    };
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut us = 1;
    for _ in 0..n {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        us += state % 20;
        let read = state % 10 < 7;
        let offset = (state >> 20) % (1 << 18) * 4096;
        let line = match format {
            TraceFormat::FioV3 => format!("{us} /dev/nvme0n1 {} {offset} 4096\n", if read { "read" } else { "write" }),
            TraceFormat::Msr => format!(
                "{},hm,1,{},{offset},4096,1398\n",
                128_166_372_000_000_000 + us * 10,
                if read { "Read" } else { "Write" }
            ),
            _ => format!("3,{},{offset},4096,{}\n", if read { 'R' } else { 'W' }, 1_577_808_000_000_000 + us),
        };
        out.extend_from_slice(line.as_bytes());
    }
    out
}

fn des(c: &mut Criterion<CpuTime>) {
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
    let spec = parse_spec("emu:nvme").unwrap();
    // Streamed as the command replays a trace file: the reader's batches into the loop.
    for format in [TraceFormat::FioV3, TraceFormat::Msr, TraceFormat::Alibaba] {
        let text = trace(format, ios);
        group.bench_function(format!("emu:nvme streamed {}", format.name()), |b| {
            b.iter(|| {
                let mut reader = TraceReader::new(&text[..], TraceOptions::default()).unwrap();
                replay_reader(&spec, &mut reader, &FaultPlan::default(), Hooks::default()).unwrap().ios
            })
        });
    }
    // Streamed on one thread (parse and replay; the rows above count the replay thread's CPU
    // only, the reader thread's is not this thread's).
    let text = trace(TraceFormat::FioV3, ios);
    group.bench_function("emu:nvme streamed fio-iolog-v3 one thread", |b| {
        b.iter(|| {
            let mut reader = TraceReader::new(&text[..], TraceOptions::default()).unwrap();
            replay_reader_inline(&spec, &mut reader, &FaultPlan::default(), Hooks::default()).unwrap().ios
        })
    });
    // The two halves of the streamed replay apart: parsing alone (in batches, as the replay
    // takes them), and the replay of the same I/Os already parsed (in memory).
    group.bench_function("fio iolog v3 parse only", |b| {
        b.iter(|| {
            let mut reader = TraceReader::new(&text[..], TraceOptions::default()).unwrap();
            let (mut batch, mut bytes) = (Vec::new(), 0u64);
            loop {
                reader.next_batch(&mut batch, BATCH_IOS).unwrap();
                if batch.is_empty() {
                    break bytes;
                }
                bytes += batch.iter().map(|io| io.bytes).sum::<u64>();
            }
        })
    });
    let parsed = Workload::Trace(
        TraceReader::new(&text[..], TraceOptions::default()).unwrap().collect::<Result<Vec<_>, _>>().unwrap(),
    );
    group.bench_function("emu:nvme fio iolog v3 pre-parsed", |b| {
        b.iter(|| run_virtual(&spec, &parsed, false).unwrap().ios)
    });
    // The same I/Os in chunks, placed a chunk at a time (the streamed replay's model step).
    let Workload::Trace(ref slice) = parsed else { unreachable!() };
    group.bench_function("emu:nvme fio iolog v3 pre-parsed chunks", |b| {
        b.iter(|| replay_parsed(&spec, slice, &FaultPlan::default(), Hooks::default()).unwrap().ios)
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(CpuTime);
    targets = des
}
criterion_main!(benches);

//! Simulation speed: trace accesses per second through the Table II hierarchy.
//!
//! The records are generated once into memory so the benchmark measures the caches and the
//! timing model, not the generator. Criterion reports time per batch; with
//! `Throughput::Elements` it also prints elements (accesses) per second. The target
//! is 20 million accesses per second on one core for the Table II hierarchy.
//! `SMARTCON_BENCH_RECORDS` sets the batch size (small by default so CI stays quick).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use smartcon_cachesim::hierarchy::{Hierarchy, HierarchyConfig, Mode};
use smartcon_cachesim::policy::{Drrip, Lru, ReplacementPolicy, Ship};
use smartcon_cachesim::synth::{Synth, SynthKind};
use smartcon_cachesim::trace::Record;

fn records() -> Vec<Record> {
    let n: usize = std::env::var("SMARTCON_BENCH_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000_000);
    // A mix: hot/cold random data over 4 MiB reaches every level.
    Synth::new(SynthKind::HotCold, 4 << 20, 42).unwrap().take(n).collect()
}

fn bench_policy<P: ReplacementPolicy>(c: &mut Criterion, name: &str, config: HierarchyConfig, trace: &[Record]) {
    let mut group = c.benchmark_group("hierarchy");
    group.throughput(Throughput::Elements(trace.len() as u64));
    group.sample_size(10);
    group.bench_function(name, |b| {
        b.iter_batched(
            || Hierarchy::<P>::new(config).unwrap(),
            |mut h| {
                for r in trace {
                    h.access(r);
                }
                h.stats().cycles
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let trace = records();
    let table_ii = HierarchyConfig::table_ii();
    bench_policy::<Lru>(c, "table_ii_lru", table_ii, &trace);
    bench_policy::<Drrip>(c, "table_ii_drrip", table_ii, &trace);
    bench_policy::<Ship>(c, "table_ii_ship", table_ii, &trace);
    let cachegrind = HierarchyConfig { l2: None, mode: Mode::Cachegrind, ..table_ii };
    bench_policy::<Lru>(c, "cachegrind_like_lru", cachegrind, &trace);
}

criterion_group!(accesses, benches);
criterion_main!(accesses);

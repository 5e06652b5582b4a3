//! How fast the seeded simulation runs: simulated I/Os per second of host time, for each
//! strategy on emu:optane 4 KiB reads, one thread and four, on host-c with a cruncher per
//! core. A figure to read (docs/simulate.md), not an assertion. Both per second of wall time
//! and per second of this thread's CPU time: on a shared machine the wall time includes
//! the others' load, the CPU time does not.
//!
//! `cargo bench -p smartcon-emutarget --bench simulate`

use std::time::Instant;

use smartcon_emutarget::sim::{run_cell, SimConfig};
use smartcon_engine::clock::thread_cpu_ns;
use smartcon_engine::host::HostModel;
use smartcon_engine::job::{JobSpec, Pattern, StrategyChoice};
use smartcon_util::Op;

fn main() {
    let spec = smartcon_devemu::parse_spec("emu:optane").unwrap();
    let host = HostModel::preset("host-c").unwrap();
    let mut total_ios = 0u64;
    let mut total_s = 0.0;
    let mut total_cpu_s = 0.0;
    for threads in [1, 4] {
        for crunchers in [0, host.cores] {
            let cfg = SimConfig { crunchers, ..SimConfig::new(1, host.clone()) };
            for name in ["block", "spin", "sync", "hybrid", "smart"] {
                let job = JobSpec {
                    threads,
                    duration_ns: 2_000_000_000,
                    span_bytes: Some(64 << 20),
                    ..JobSpec::new(Op::Read, Pattern::Rand, 4096, StrategyChoice::parse(name).unwrap())
                };
                let (t, cpu0) = (Instant::now(), thread_cpu_ns());
                let run = run_cell(&spec, &job, &cfg).unwrap();
                let s = t.elapsed().as_secs_f64();
                let cpu_s = (thread_cpu_ns() - cpu0) as f64 / 1e9;
                total_cpu_s += cpu_s;
                let ios = run.record.result.ios;
                total_ios += ios;
                total_s += s;
                println!(
                    "{name:>7} threads {threads} crunchers {crunchers}: {ios:>7} simulated I/Os in {s:.3} s wall, {cpu_s:.3} s CPU = {:.2} M I/Os per s of wall, {:.2} per s of CPU",
                    ios as f64 / s / 1e6,
                    ios as f64 / cpu_s / 1e6
                );
            }
        }
    }
    println!(
        "all cells: {total_ios} simulated I/Os in {total_s:.3} s wall, {total_cpu_s:.3} s CPU = {:.2} M I/Os per s of wall, {:.2} per s of CPU",
        total_ios as f64 / total_s / 1e6,
        total_ios as f64 / total_cpu_s / 1e6
    );
}

//! What the System Monitor sees beside a load, while this process blocks, spins or idles.
//!
//! ```text
//! cargo run --release -p smartcon-study --example monitor_watch -- TARGET io|cpu|none block|spin|smart|idle [SECONDS]
//! ```
//!
//! Starts the load evaluate uses (`io`: 4 blocking 4 KiB random readers on TARGET; `cpu`:
//! 2 crunchers), runs one 4 KiB random-read job on TARGET with the strategy (or nothing),
//! and prints the monitor's figures every 200 ms, then the job's IOPS and the load's work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use smartcon_engine::job::Pattern;
use smartcon_engine::job::{run_job, JobSpec};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::smartport::StrategyChoice;
use smartcon_engine::target::{open, parse_target, OpenOptions};
use smartcon_util::Op;
use smartcon_workloads::load::{CpuLoad, IoLoad};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 3 {
        eprintln!("usage: monitor_watch TARGET io|cpu|none block|spin|smart|idle [SECONDS]");
        std::process::exit(2);
    }
    let secs: f64 = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let spec = parse_target(&a[0]).expect("target");
    let target = open(&spec, OpenOptions { write: false, destructive: false, created_by_tool: true }).expect("open");
    let monitor = SystemMonitor::start(smartcon_engine::monitor::WINDOW_NS_DEFAULT);
    let profile = target.builtin_profile().expect("profile");
    let io = IoLoad::default();
    let stop = AtomicBool::new(false);
    let _cpu = a[1].strip_prefix("cpu").map(|n| CpuLoad::start(n.parse().unwrap_or(2)).expect("cpu load"));
    std::thread::scope(|s| {
        if a[1] == "io" {
            io.spawn(s, target.as_ref(), 4, 4096, target.capacity_bytes().min(256 << 20)).unwrap();
        }
        let t = target.as_ref();
        let (m, st, p) = (&monitor, &stop, &profile);
        let job = (a[2] != "idle").then(|| {
            let strategy = StrategyChoice::parse(&a[2]).expect("strategy");
            s.spawn(move || {
                let mut js = JobSpec::new(Op::Read, Pattern::Rand, 4096, strategy);
                js.span_bytes = Some(t.capacity_bytes().min(256 << 20));
                js.duration_ns = (secs * 1e9) as u64;
                run_job(t, &js, p, m, st).expect("job")
            })
        });
        let w0 = io.snapshot();
        let n = (secs / 0.2) as usize;
        for _ in 0..n {
            std::thread::sleep(Duration::from_millis(200));
            println!(
                "demand {:5.1}%  util {:5.1}%  contention {:5.1}%  pressure {:5.1}%  total {:5.1}%",
                monitor.cpu_utilization_pct() as f64,
                monitor.others_utilization_pct(),
                monitor.contention_pct(),
                monitor.pressure_pct(),
                monitor.total_utilization_pct()
            );
        }
        let w1 = io.snapshot();
        if let Some(j) = job {
            let r = j.join().unwrap();
            println!("job: {:.0} IOPS, decisions {:?}", r.iops, r.decisions);
        }
        io.stop.store(true, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        let d = w0.delta_to(&w1);
        println!("io load: {:.0} I/O per s", d.work as f64 / (d.real_ns as f64 / 1e9));
    });
    monitor.stop();
}

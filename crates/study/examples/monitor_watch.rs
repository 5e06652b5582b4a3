//! What the System Monitor sees beside a load, while this process blocks, spins or idles.
//!
//! ```text
//! cargo run --release -p smartcon-study --example monitor_watch -- TARGET io|cpu|none block|spin|smart|idle [SECONDS]
//! ```
//!
//! Starts the load evaluate uses (`io`: 4 blocking 4 KiB random readers on TARGET; `cpu`:
//! 2 crunchers), runs one 4 KiB random-read job on TARGET with the strategy (or nothing),
//! and prints the monitor's figures every 100 ms, then the job's IOPS and the load's work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use smartcon_emutarget::target::{open, parse_target, OpenOptions};
use smartcon_engine::job::Pattern;
use smartcon_engine::job::{run_job, JobSpec};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::smartport::StrategyChoice;
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
    let profile = smartcon_engine::profile::resolve(
        target.as_ref(),
        std::env::var_os("PROFILE").as_deref().map(std::path::Path::new),
    )
    .expect("profile (set PROFILE=FILE for a target without a built-in one)");
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
                // PIN=CPU pins the job's thread there, as the evaluate's `irq` placement does.
                js.cpus = std::env::var("PIN").ok().and_then(|c| c.parse().ok()).map(|c| vec![c]);
                js.span_bytes = Some(t.capacity_bytes().min(256 << 20));
                js.duration_ns = (secs * 1e9) as u64;
                run_job(t, &js, p, m, st).expect("job")
            })
        });
        let w0 = io.snapshot();
        let mut sched0 = task_schedstats();
        let n = (secs / 0.1) as usize;
        for i in 0..n {
            std::thread::sleep(Duration::from_millis(100));
            if i == 0 {
                // The job's I/O thread has started by now: count from here.
                sched0 = task_schedstats();
            }
            println!(
                "demand {:5.1}% (sd {:4.1})  util {:5.1}%  contention {:5.1}%  pressure {:5.1}%  total {:5.1}%  steal {:5.1}%",
                monitor.cpu_utilization_pct() as f64,
                monitor.cpu_utilization_sd_pct(),
                monitor.others_utilization_pct(),
                monitor.contention_pct(),
                monitor.pressure_pct(),
                monitor.total_utilization_pct(),
                monitor.steal_pct()
            );
        }
        let w1 = io.snapshot();
        // Each thread's run-queue wait per time slice over the run (schedstat).
        let sched1 = task_schedstats();
        for (tid, comm, wait1, slices1) in &sched1 {
            if let Some((_, _, wait0, slices0)) = sched0.iter().find(|t| t.0 == *tid) {
                let (w, n) = (wait1 - wait0, slices1 - slices0);
                if n > 0 {
                    println!(
                        "thread {comm:16} waited {:7.1} ms on a run queue in {n:7} slices: {:6.1} us a slice",
                        w as f64 / 1e6,
                        w as f64 / n as f64 / 1e3
                    );
                }
            }
        }
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

/// (tid, name, run-queue wait ns, slices) of every thread of this process.
fn task_schedstats() -> Vec<(u32, String, u64, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default().trim().to_string();
        let st = std::fs::read_to_string(e.path().join("schedstat")).unwrap_or_default();
        let f: Vec<u64> = st.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if f.len() >= 3 {
            out.push((tid, comm, f[1], f[2]));
        }
    }
    out
}

//! How long a run of one way of waiting must be before its waits show what that way gives.
//!
//! ```text
//! cargo run --release -p smartcon-study --example burst_watch -- TARGET io|cpuN|none [SECONDS] [BURSTS]
//! ```
//!
//! Starts the load evaluate uses beside a 4 KiB random-read thread on TARGET (`io`: 4
//! blocking readers; `cpuN`: N crunchers), and has the thread alternate spinning and
//! blocking in runs of each length in BURSTS (default 8,32,128,512,4096 I/Os), each length
//! for SECONDS (default 1) per round, the lengths interleaved over three rounds. For each
//! length it prints the mean wait of each way, leaving out the first two of every run
//! (as the spin check does), and block's mean over spin's. The spin check pairs bursts of
//! eight spins among blocks; if the ratio grows with the run's length, bursts that short
//! do not see what spinning throughout gives. PIN=CPU pins the thread; OP=write writes
//! (the target must be writable: a `tmp:` file or an emulated device).

use std::sync::atomic::Ordering;
use std::time::Instant;

use smartcon_emutarget::target::{open, parse_target, OpenOptions};
use smartcon_engine::decision::Strategy;
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::smartport::{SmartPortOptions, SmartTargetPort, StrategyChoice};
use smartcon_engine::target::AlignedBuf;
use smartcon_workloads::load::{CpuLoad, IoLoad};

const SKIP: u32 = 2;

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 2 {
        eprintln!("usage: burst_watch TARGET io|cpuN|none [SECONDS] [BURSTS]");
        std::process::exit(2);
    }
    let secs: f64 = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let bursts: Vec<u32> = a
        .get(3)
        .map(|s| s.split(',').map(|b| b.parse().expect("burst length")).collect())
        .unwrap_or_else(|| vec![8, 32, 128, 512, 4096]);
    let write = std::env::var("OP").is_ok_and(|o| o == "write");
    let spec = parse_target(&a[0]).expect("target");
    let target = open(&spec, OpenOptions { write, destructive: false, created_by_tool: true }).expect("open");
    let monitor = std::sync::Arc::new(SystemMonitor::start(smartcon_engine::monitor::WINDOW_NS_DEFAULT));
    let span = target.capacity_bytes().min(256 << 20);
    let io = IoLoad::default();
    let _cpu = a[1].strip_prefix("cpu").map(|n| CpuLoad::start(n.parse().unwrap_or(2)).expect("cpu load"));
    std::thread::scope(|s| {
        if a[1] == "io" {
            io.spawn(s, target.as_ref(), 4, 4096, span).unwrap();
        }
        if let Some(cpu) = std::env::var("PIN").ok().and_then(|c| c.parse::<usize>().ok()) {
            // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes within it.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
        }
        let port = |s: Strategy| {
            let o = SmartPortOptions {
                strategy: StrategyChoice::Fixed(s),
                monitor: Some(monitor.clone()),
                ..Default::default()
            };
            SmartTargetPort::on_target(target.as_ref(), o).expect("port")
        };
        let mut ways = [port(Strategy::Block), port(Strategy::Spin)];
        let mut buf = AlignedBuf::new(4096);
        let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
        // Per burst length: (sum ns, count) of counted waits per way, and whole-run I/Os.
        let mut sums = vec![[(0f64, 0u64); 2]; bursts.len()];
        let mut rates = vec![[(0f64, 0u64); 2]; bursts.len()];
        for round in 0..3 {
            for (i, &b) in bursts.iter().enumerate() {
                let i = if round % 2 == 1 { bursts.len() - 1 - i } else { i };
                let b = if round % 2 == 1 { bursts[i] } else { b };
                let until = Instant::now() + std::time::Duration::from_secs_f64(secs);
                let mut way = round % 2;
                while Instant::now() < until {
                    let run0 = Instant::now();
                    for k in 0..b {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let off = (rng % (span / 4096)) * 4096;
                        let t0 = Instant::now();
                        if write {
                            ways[way].write_at(buf.as_slice(), off).expect("write");
                        } else {
                            ways[way].read_at(buf.as_mut_slice(), off).expect("read");
                        }
                        if k >= SKIP {
                            let e = &mut sums[i][way];
                            e.0 += t0.elapsed().as_nanos() as f64;
                            e.1 += 1;
                        }
                    }
                    let r = &mut rates[i][way];
                    r.0 += run0.elapsed().as_nanos() as f64;
                    r.1 += b as u64;
                    way ^= 1;
                }
            }
        }
        io.stop.store(true, Ordering::Relaxed);
        println!("run length  block wait us  spin wait us  block/spin (counted)  block/spin (whole runs)");
        for (i, b) in bursts.iter().enumerate() {
            let m = |w: usize| sums[i][w].0 / sums[i][w].1.max(1) as f64 / 1e3;
            let r = |w: usize| rates[i][w].0 / rates[i][w].1.max(1) as f64 / 1e3;
            println!("{b:>10}  {:>12.1}  {:>12.1}  {:>20.3}  {:>23.3}", m(0), m(1), m(0) / m(1), r(0) / r(1));
        }
    });
}

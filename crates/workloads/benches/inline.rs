//! smart's inline path against plain `sync` (issue 20 item 5): where smart decides `sync`
//! (a very fast device: the `very_fast_device` branch), it must run as fast as the fixed
//! strategy, I/O and flush alike.
//!
//! On a zram device when run as root with zram available (created here, removed at the
//! end, also on a panic), else on a page-cache file (tmpfs or the temp directory,
//! buffered). Two parts:
//!
//! 1. criterion: one I/O through a SmartPort, `sync` against `smart` on a very fast
//!    profile, for a 4 KiB read and a 16 KiB write followed by its flush (mailserver's
//!    write);
//! 2. the ratio: whole jobs (the engine's job runner, as `smartcon io` and evaluate run
//!    them), `smart` against `sync` in interleaved rounds, printed as the geometric mean,
//!    lowest and highest of the per-round IOPS ratios smart / sync.
//!
//! `cargo bench -p smartcon-workloads --bench inline`; `INLINE_ROUNDS` and `INLINE_TURN_MS`
//! change the second part's rounds (default 10) and turn time (default 200 ms).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use criterion::{black_box, Criterion};
use smartcon_emutarget::target::{self, AlignedBuf, OpenOptions, Target, TargetSpec};
use smartcon_engine::decision::{DeviceClass, Strategy};
use smartcon_engine::job::{run_job, JobSpec, Pattern, StrategyChoice};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::Profile;
use smartcon_engine::smartport::{SmartPortOptions, SmartTargetPort};
use smartcon_util::Op;
use smartcon_workloads::blockdev::{self, ZramDevice};

const SIZE_BYTES: u64 = 64 << 20;

/// The device the bench runs on, and what keeps it alive (a zram device is removed when
/// this drops).
struct Device {
    target: Box<dyn Target>,
    what: String,
    _zram: Option<ZramDevice>,
}

fn open_device() -> Device {
    if blockdev::unavailable_reason().is_none() {
        match ZramDevice::create(SIZE_BYTES) {
            Ok(z) => {
                let options = OpenOptions { write: true, created_by_tool: true, ..Default::default() };
                let target = target::open(&TargetSpec::Path(z.path().to_path_buf()), options).expect("open zram");
                // Write every block once, so reads decompress data rather than return zeros.
                let mut port = target.open_port().expect("port");
                let mut buf = AlignedBuf::new(1 << 20);
                buf.as_mut_slice().iter_mut().enumerate().for_each(|(i, b)| *b = (i % 251) as u8);
                for off in (0..SIZE_BYTES).step_by(1 << 20) {
                    port.io(Op::Write, buf.as_mut_slice(), off, Strategy::Sync, 1_000_000).expect("fill zram");
                }
                drop(port);
                let what = format!("zram ({})", z.path().display());
                return Device { target, what, _zram: Some(z) };
            }
            Err(e) => eprintln!("zram unavailable ({e}); using a page-cache file"),
        }
    }
    let dir = ["/dev/shm"].iter().map(PathBuf::from).find(|d| d.is_dir()).unwrap_or_else(std::env::temp_dir);
    let spec = TargetSpec::Temp { size_bytes: SIZE_BYTES, dir: Some(dir.clone()) };
    let target = target::open(&spec, OpenOptions::default()).expect("temporary file");
    Device { target, what: format!("a page-cache file in {}", dir.display()), _zram: None }
}

fn very_fast(device: &str) -> Profile {
    Profile { class: DeviceClass::VeryFast, source: "bench".into(), ..Profile::paper_default(device) }
}

fn port_options(strategy: StrategyChoice, profile: &Profile) -> SmartPortOptions {
    SmartPortOptions {
        strategy,
        profile: Some(profile.clone()),
        monitor: Some(Arc::new(SystemMonitor::fixed(0))),
        ..Default::default()
    }
}

const CHOICES: [(&str, StrategyChoice); 2] =
    [("sync", StrategyChoice::Fixed(Strategy::Sync)), ("smart", StrategyChoice::Smart)];

fn per_io(c: &mut Criterion, d: &Device, profile: &Profile) {
    let slots = SIZE_BYTES / (16 << 10);
    for (name, choice) in CHOICES {
        let mut port = SmartTargetPort::on_target(d.target.as_ref(), port_options(choice, profile)).unwrap();
        let mut buf = AlignedBuf::new(16 << 10);
        let mut i = 0u64;
        c.bench_function(&format!("{name}: 4 KiB read, {}", d.what), |b| {
            b.iter(|| {
                i = (i + 7919) % slots;
                black_box(port.read_at(&mut buf.as_mut_slice()[..4096], i * (16 << 10)).unwrap())
            })
        });
        c.bench_function(&format!("{name}: 16 KiB write + flush, {}", d.what), |b| {
            b.iter(|| {
                i = (i + 7919) % slots;
                black_box(port.write_at(buf.as_slice(), i * (16 << 10)).unwrap());
                port.fsync().unwrap()
            })
        });
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Whole jobs in interleaved rounds: (geometric mean, lowest, highest) of smart / sync.
fn ratios(d: &Device, profile: &Profile, case: &JobSpec, rounds: u64, turn_ns: u64) -> (f64, f64, f64) {
    let monitor = SystemMonitor::start(smartcon_engine::monitor::WINDOW_NS_DEFAULT);
    let stop = AtomicBool::new(false);
    let mut per_round = Vec::new();
    for round in 0..rounds {
        let mut iops = [0.0f64; 2];
        // Alternate which goes first, so drift weighs on both alike.
        for k in 0..2 {
            let i = (k + round as usize) % 2;
            let mut js = case.clone();
            js.strategy = CHOICES[i].1;
            js.duration_ns = turn_ns;
            js.warmup_ios = smartcon_engine::job::TURN_WARMUP_IOS;
            js.seed = 1 + round;
            iops[i] = run_job(d.target.as_ref(), &js, profile, &monitor, &stop).unwrap().iops;
        }
        per_round.push(iops[1] / iops[0]);
    }
    monitor.stop();
    let geo = (per_round.iter().map(|r| r.ln()).sum::<f64>() / per_round.len() as f64).exp();
    let lo = per_round.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = per_round.iter().copied().fold(0.0, f64::max);
    (geo, lo, hi)
}

fn main() {
    let d = open_device();
    let profile = very_fast(&d.target.device_id());
    let mut c = Criterion::default().configure_from_args().sample_size(30);
    per_io(&mut c, &d, &profile);
    let rounds = env_u64("INLINE_ROUNDS", 10).max(1);
    let turn_ns = env_u64("INLINE_TURN_MS", 200).max(1) * 1_000_000;
    println!("\nsmart (very fast profile: decides sync) / sync, IOPS of whole jobs on {}", d.what);
    println!(
        "{rounds} interleaved rounds of {} ms per strategy; geometric mean (lowest-highest round)",
        turn_ns / 1_000_000
    );
    let job = |op, bs, fsync_every| {
        let mut js = JobSpec::new(op, Pattern::Rand, bs, StrategyChoice::Smart);
        js.fsync_every = fsync_every;
        js
    };
    for (name, case) in [
        ("4 KiB random read", job(Op::Read, 4 << 10, 0)),
        ("16 KiB random read", job(Op::Read, 16 << 10, 0)),
        ("16 KiB random write, flush after each (mailserver's write)", job(Op::Write, 16 << 10, 1)),
        ("256 KiB random read", job(Op::Read, 256 << 10, 0)),
    ] {
        let (geo, lo, hi) = ratios(&d, &profile, &case, rounds, turn_ns);
        println!("  {name:<60} {geo:.3} ({lo:.3}-{hi:.3})");
    }
    c.final_summary();
}

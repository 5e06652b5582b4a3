//! Integrity under every strategy and target kind, with several threads, and a corrupted
//! block caught by name.

use std::sync::atomic::AtomicBool;

use smartcon_emutarget::target::{self, OpenOptions, Target};
use smartcon_engine::decision::Strategy;
use smartcon_engine::error::ErrorKind;
use smartcon_engine::job::{run_job, JobSpec, Pattern, StrategyChoice};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::Profile;
use smartcon_util::Op;

fn strategies() -> Vec<StrategyChoice> {
    vec![
        StrategyChoice::Fixed(Strategy::Block),
        StrategyChoice::Fixed(Strategy::Spin),
        StrategyChoice::Fixed(Strategy::Sync),
        StrategyChoice::Smart,
        StrategyChoice::Fixed(Strategy::Hybrid),
        StrategyChoice::Fixed(Strategy::FixedPoll),
        StrategyChoice::Fixed(Strategy::HalfMean),
        StrategyChoice::SmartHybrid,
    ]
}

fn targets() -> Vec<Box<dyn Target>> {
    let dir = std::env::temp_dir();
    vec![
        target::open(&target::parse_target("emu:optane,size=8m").unwrap(), OpenOptions::default()).unwrap(),
        target::open(&target::parse_target("emu:nvram,size=8m").unwrap(), OpenOptions::default()).unwrap(),
        target::open(&target::parse_target(&format!("tmp:8m@{}", dir.display())).unwrap(), OpenOptions::default())
            .unwrap(),
    ]
}

fn spec(op: Op, strategy: StrategyChoice, threads: u32) -> JobSpec {
    let mut s = JobSpec::new(op, Pattern::Rand, 16 << 10, strategy);
    s.span_bytes = Some(4 << 20);
    s.threads = threads;
    s.duration_ns = 10_000_000_000;
    s.ios_max = Some(300);
    s.verify = true;
    s.seed = 42;
    s
}

#[test]
fn verify_passes_under_every_strategy_target_and_op_with_threads() {
    let monitor = SystemMonitor::fixed(0);
    let stop = AtomicBool::new(false);
    for t in targets() {
        let profile = t.builtin_profile().unwrap_or_else(|| Profile::paper_default(&t.device_id()));
        for strategy in strategies() {
            for op in [Op::Write, Op::Read] {
                let r = run_job(t.as_ref(), &spec(op, strategy, 3), &profile, &monitor, &stop)
                    .unwrap_or_else(|e| panic!("{} {} {}: {e}", t.label(), op.name(), strategy.name()));
                assert!(r.verified, "{} {}", t.label(), strategy.name());
                assert_eq!(r.ios, 300, "ios_max bounds the job");
                assert_eq!(r.threads, 3);
            }
        }
    }
}

#[test]
fn a_corrupted_block_fails_the_job_with_its_offset() {
    let monitor = SystemMonitor::fixed(0);
    let stop = AtomicBool::new(false);
    for t in targets() {
        let profile = Profile::paper_default(&t.device_id());
        // Fill the span with the pattern (one verified read is enough to trigger the fill).
        let mut s = spec(Op::Read, StrategyChoice::Fixed(Strategy::Block), 1);
        s.ios_max = Some(1);
        run_job(t.as_ref(), &s, &profile, &monitor, &stop).unwrap();
        // Damage 8 bytes inside one 4 KiB unit, then read the whole span sequentially
        // under verification without filling again.
        let bad_offset = (1 << 20) + 3 * 4096;
        t.poke(bad_offset + 100, &[0xAB; 8]).unwrap();
        for strategy in strategies() {
            let mut s = spec(Op::Read, strategy, 1);
            s.pattern = Pattern::Seq;
            s.prefill = false;
            s.ios_max = Some((4 << 20) / (16 << 10));
            let e = run_job(t.as_ref(), &s, &profile, &monitor, &stop).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Verify, "{}: {e}", t.label());
            assert!(e.message.contains(&format!("offset {bad_offset}")), "{}: {e}", t.label());
            assert!(e.message.contains("checksum"), "{e}");
        }
    }
}

#[test]
fn misdirected_data_is_named_as_such() {
    let monitor = SystemMonitor::fixed(0);
    let stop = AtomicBool::new(false);
    let t = target::open(&target::parse_target("emu:nvram,size=8m").unwrap(), OpenOptions::default()).unwrap();
    let profile = Profile::paper_default(&t.device_id());
    let mut s = spec(Op::Read, StrategyChoice::Fixed(Strategy::Sync), 1);
    s.ios_max = Some(1);
    run_job(t.as_ref(), &s, &profile, &monitor, &stop).unwrap();
    // A correct unit, but the one for offset 0, lands at 8192.
    let mut wrong = smartcon_engine::target::AlignedBuf::new(4096);
    smartcon_engine::verify::fill(
        wrong.as_mut_slice(),
        0,
        smartcon_engine::verify::UNIT_BYTES,
        smartcon_engine::job::FILL_SEED,
    );
    t.poke(8192, wrong.as_slice()).unwrap();
    s.pattern = Pattern::Seq;
    s.prefill = false;
    s.ios_max = Some((4 << 20) / (16 << 10));
    let e = run_job(t.as_ref(), &s, &profile, &monitor, &stop).unwrap_err();
    assert!(e.message.contains("offset 8192") && e.message.contains("misdirected"), "{e}");
}

#[test]
fn fsync_every_flushes_each_threads_nth_write_and_refuses_reads() {
    let monitor = SystemMonitor::fixed(0);
    let stop = AtomicBool::new(false);
    let t = target::open(
        &target::parse_target(&format!("tmp:4m@{}", std::env::temp_dir().display())).unwrap(),
        OpenOptions::default(),
    )
    .unwrap();
    let profile = Profile::paper_default(&t.device_id());
    for strategy in strategies() {
        let mut s = JobSpec::new(Op::Write, Pattern::Rand, 4096, strategy);
        s.duration_ns = 10_000_000_000;
        s.ios_max = Some(40);
        s.fsync_every = 4;
        let r = run_job(t.as_ref(), &s, &profile, &monitor, &stop).unwrap();
        assert_eq!(r.ios, 40);
        assert_eq!(r.fsyncs, 10, "one flush per 4 writes under {}", strategy.name());
    }
    let mut s = JobSpec::new(Op::Read, Pattern::Rand, 4096, StrategyChoice::Smart);
    s.fsync_every = 1;
    let e = run_job(t.as_ref(), &s, &profile, &monitor, &stop).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Usage);
}

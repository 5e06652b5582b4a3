//! Fault scenarios in real time (issue 14, item 4): an emulated target opened with
//! `emu:PRESET,faults=FILE` fails requests as typed errors naming op and offset (EIO), a
//! failed write stores nothing and is never counted as written, spikes and stalls move
//! completions, and a stall past the timeout is refused before anything waits.
//!
//! Latencies are a few microseconds so the tests run fast; what they assert is the model's
//! instants (a waiter never returns before them), never how long the host took.

use std::sync::atomic::AtomicBool;

use smartcon_emutarget::target::{self, AlignedBuf, OpenOptions, Target};
use smartcon_engine::clock::now_ns;
use smartcon_engine::decision::Strategy;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::job::{run_job, JobSpec, Pattern, StrategyChoice};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::Profile;
use smartcon_util::Op;

fn ring_available() -> bool {
    match smartcon_engine::ring::Ring::new() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipping: io_uring is not available here ({})", e.message);
            false
        }
    }
}

/// Writes a scenario to a file of its own and returns its path, which removes the file
/// when dropped (also when the test panics).
fn scenario(name: &str, text: &str) -> tempfile::TempPath {
    let file = tempfile::Builder::new().prefix(&format!("smartcon-faults-{name}-")).suffix(".toml").tempfile().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file.into_temp_path()
}

fn open(spec: &str) -> Result<Box<dyn Target>, Error> {
    let spec = target::parse_target(spec)?;
    target::open(&spec, OpenOptions { write: true, destructive: false, created_by_tool: true })
}

fn is_eio(e: &Error) -> bool {
    e.kind == ErrorKind::Io && e.errno == Some(libc::EIO)
}

#[test]
fn a_failed_write_is_an_eio_naming_op_and_offset_and_stores_nothing() {
    if !ring_available() {
        return;
    }
    let path = scenario("write-range", "seed = 1\n[[error]]\nop = \"write\"\noffset_min = 65536\noffset_max = 69632\n");
    let t = open(&format!("emu:nvram,lat=2us,size=1m,faults={}", path.display())).unwrap();
    // A verified random write job: sooner or later it writes slot 16 (offset 65536).
    let mut spec = JobSpec::new(Op::Write, Pattern::Rand, 4096, StrategyChoice::Fixed(Strategy::Spin));
    spec.verify = true;
    // The prefill's 1 MiB write would fail first (it covers the range): a write job's
    // read-back only checks what the job wrote.
    spec.prefill = false;
    spec.duration_ns = 60_000_000_000;
    spec.ios_max = Some(20_000);
    let r =
        run_job(&*t, &spec, &Profile::paper_default("emu:nvram"), &SystemMonitor::fixed(0), &AtomicBool::new(false));
    let e = r.expect_err("20,000 random writes over 256 slots hit the failing one");
    assert!(is_eio(&e), "{e:?}");
    assert!(e.message.contains("write at offset 65536"), "{}", e.message);
    // The device kept nothing of the failed writes: the slot reads back as never written
    // (zeros), while reads of it do not fail (the rule is for writes).
    let mut port = t.open_port().unwrap();
    let mut buf = AlignedBuf::new(4096);
    port.io(Op::Read, buf.as_mut_slice(), 65536, Strategy::Spin, 1_000_000).unwrap();
    assert!(buf.as_slice().iter().all(|&b| b == 0));
    // Writes outside the range succeed and land.
    let mut w = AlignedBuf::new(4096);
    w.as_mut_slice().fill(0xa5);
    port.io(Op::Write, w.as_mut_slice(), 0, Strategy::Block, 1_000_000).unwrap();
    port.io(Op::Read, buf.as_mut_slice(), 0, Strategy::Block, 1_000_000).unwrap();
    assert!(buf.as_slice().iter().all(|&b| b == 0xa5));
}

/// Which of `n` single-threaded reads fail on a fresh target.
fn failing_reads(spec: &str, n: u64) -> Vec<u64> {
    let t = open(spec).unwrap();
    let mut port = t.open_port().unwrap();
    let mut buf = AlignedBuf::new(4096);
    let mut failed = Vec::new();
    for i in 0..n {
        let offset = (i % 256) * 4096;
        match port.io(Op::Read, buf.as_mut_slice(), offset, Strategy::Spin, 1_000_000) {
            Ok(_) => {}
            Err(e) => {
                assert!(is_eio(&e), "{e:?}");
                assert!(e.message.contains(&format!("read at offset {offset}")), "{}", e.message);
                failed.push(i);
            }
        }
    }
    failed
}

#[test]
fn errors_with_a_probability_are_seeded_and_reproducible() {
    if !ring_available() {
        return;
    }
    let path = scenario("read-prob", "seed = 9\n[[error]]\nop = \"read\"\nprobability = 0.05\n");
    let spec = format!("emu:nvram,lat=1us,size=1m,faults={}", path.display());
    let a = failing_reads(&spec, 2_000);
    let b = failing_reads(&spec, 2_000);
    // About 5% of 2,000 (binomial: 100 +- 3 sigma of ~10).
    assert!((60..140).contains(&a.len()), "{}", a.len());
    assert_eq!(a, b, "the same plan fails the same requests");
    let other = scenario("read-prob-other-seed", "seed = 10\n[[error]]\nop = \"read\"\nprobability = 0.05\n");
    let c = failing_reads(&format!("emu:nvram,lat=1us,size=1m,faults={}", other.display()), 2_000);
    assert_ne!(a, c, "another seed fails other requests");
}

#[test]
fn spikes_and_stalls_move_completions_in_real_time() {
    if !ring_available() {
        return;
    }
    let mut buf = AlignedBuf::new(4096);
    // A spike over the first second: 2 us requests take 100 times as long.
    let spike = scenario("spike", "[[spike]]\nstart = \"0s\"\nend = \"1s\"\nfactor = 100.0\n");
    let t = open(&format!("emu:nvram,lat=2us,bw=1t,channels=1,size=1m,faults={}", spike.display())).unwrap();
    let mut port = t.open_port().unwrap();
    let t0 = now_ns();
    let out = port.io(Op::Read, buf.as_mut_slice(), 0, Strategy::Block, 1_000_000).unwrap();
    let t1 = now_ns();
    assert!(out.done_ns - t0 >= 200_000, "spiked service {} ns", out.done_ns - t0);
    assert!(t1 >= out.done_ns, "the waiter never returns before the model's instant");
    // A stall over the first 20 ms: the first completion waits for its end.
    let stall = scenario("stall", "[[stall]]\nstart = \"0s\"\nduration = \"20ms\"\n");
    let opened = now_ns();
    let t = open(&format!("emu:nvram,lat=2us,size=1m,faults={}", stall.display())).unwrap();
    let mut port = t.open_port().unwrap();
    for strategy in [Strategy::Spin, Strategy::Block] {
        let out = port.io(Op::Write, buf.as_mut_slice(), 4096, strategy, 1_000_000).unwrap();
        let seen = now_ns();
        assert!(out.done_ns >= opened + 20_000_000 || strategy == Strategy::Block);
        assert!(seen >= out.done_ns);
    }
}

#[test]
fn a_stall_past_the_timeout_is_refused_and_a_stalled_job_ends() {
    if !ring_available() {
        return;
    }
    // 2 s of stall against a 1 s timeout: an error when the target is opened, before
    // anything could wait for it.
    let long = scenario("stall-too-long", "stall_timeout = \"1s\"\n[[stall]]\nstart = \"0s\"\nduration = \"2s\"\n");
    let e = open(&format!("emu:nvram,faults={}", long.display())).err().expect("refused");
    assert_eq!(e.kind, ErrorKind::Usage);
    assert!(e.message.contains("stall timeout"), "{}", e.message);
    // A job across a short stall finishes, and reports its accuracy against the stalled
    // instants (lateness is never negative: every I/O is counted).
    let short = scenario("stall-short", "[[stall]]\nstart = \"5ms\"\nduration = \"10ms\"\n");
    let t = open(&format!("emu:nvram,lat=5us,size=1m,faults={}", short.display())).unwrap();
    let mut spec = JobSpec::new(Op::Read, Pattern::Rand, 4096, StrategyChoice::Fixed(Strategy::Spin));
    spec.threads = 2;
    spec.duration_ns = 40_000_000;
    let r =
        run_job(&*t, &spec, &Profile::paper_default("emu:nvram"), &SystemMonitor::fixed(0), &AtomicBool::new(false))
            .unwrap();
    let a = r.accuracy.expect("emulated targets report accuracy");
    assert_eq!(a.ios, r.ios);
    assert!(r.lat_ns_max >= 5_000);
}

#[test]
fn a_scenario_with_mistakes_is_a_usage_error() {
    let bad = scenario("misspelt", "[[eror]]\nop = \"write\"\n");
    let e = open(&format!("emu:nvram,faults={}", bad.display())).err().expect("refused");
    assert_eq!(e.kind, ErrorKind::Usage);
    let e = open("emu:nvram,faults=/nonexistent/scenario.toml").err().expect("refused");
    assert!(e.message.contains("cannot read"), "{}", e.message);
}

//! A failing or panicking I/O thread ends a job with an error, promptly, instead of hanging
//! the run until its duration is over or taking the caller down (issue 11).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use smartcon_engine::decision::Strategy;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::job::{run_job, JobSpec, Pattern, StrategyChoice};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::Profile;
use smartcon_engine::target::{InFlight, IoBuf, Port, PortWait, Target, WaitOutcome};
use smartcon_util::Op;

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    Panic,
    Fail,
}

/// A device on which the port opened second goes wrong after a few I/Os; the others work.
struct Faulty {
    fault: Fault,
    ports: AtomicU32,
    inflight: InFlight,
}

struct FaultyPort<'a> {
    target: &'a Faulty,
    bad: bool,
    ios: u32,
}

impl Port for FaultyPort<'_> {
    fn transfer(&mut self, buf: IoBuf<'_>, _offset: u64, _wait: PortWait<'_>) -> Result<WaitOutcome, Error> {
        self.ios += 1;
        if self.bad && self.ios > 3 {
            match self.target.fault {
                Fault::Panic => panic!("device model bug"),
                Fault::Fail => return Err(Error::os(ErrorKind::Io, libc::EIO, "media error")),
            }
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
        Ok(WaitOutcome { bytes: buf.len(), ..Default::default() })
    }
}

impl Target for Faulty {
    fn label(&self) -> &str {
        "faulty"
    }
    fn device_id(&self) -> String {
        "test:faulty".into()
    }
    fn capacity_bytes(&self) -> u64 {
        1 << 20
    }
    fn block_bytes(&self) -> u64 {
        512
    }
    fn open_port(&self) -> Result<Box<dyn Port + Send + '_>, Error> {
        let n = self.ports.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(FaultyPort { target: self, bad: n == 1, ios: 0 }))
    }
    fn inflight(&self) -> &InFlight {
        &self.inflight
    }
    fn poke(&self, _offset: u64, _data: &[u8]) -> Result<(), Error> {
        Ok(())
    }
}

fn run(fault: Fault) -> Result<(), Error> {
    let target = Faulty { fault, ports: AtomicU32::new(0), inflight: InFlight::default() };
    let mut spec = JobSpec::new(Op::Read, Pattern::Rand, 4096, StrategyChoice::Fixed(Strategy::Block));
    spec.threads = 3;
    // Far longer than any test may take: only the halt can end this run in time.
    spec.duration_ns = 3_600_000_000_000;
    let stop = AtomicBool::new(false);
    let r = run_job(&target, &spec, &Profile::paper_default("test:faulty"), &SystemMonitor::fixed(0), &stop);
    assert!(!stop.load(Ordering::SeqCst), "the caller's stop flag is left alone");
    r.map(|_| ())
}

#[test]
fn a_panicking_io_thread_ends_the_run_with_an_internal_error() {
    let e = run(Fault::Panic).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal, "{e}");
    assert!(e.message.contains("panicked") && e.message.contains("device model bug"), "{e}");
}

#[test]
fn a_failing_io_thread_ends_the_run_with_its_error() {
    let e = run(Fault::Fail).unwrap_err();
    assert_eq!((e.kind, e.raw_os_error()), (ErrorKind::Io, Some(libc::EIO)), "{e}");
}

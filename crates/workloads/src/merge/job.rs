//! A multi-threaded synchronous job on a [`MergeDevice`], in the manner of the paper's fio
//! runs (paper 002 Sec. 5: 16 threads, sequential and random, read and write, 4 KiB).
//!
//! Each thread issues one request at a time: it picks an offset (sequential within its own
//! slice of the span, or uniformly random over the span), fills its buffer with the
//! verification pattern for writes (the application producing its data), calls
//! [`super::Waiter::io`] and records the latency from the call to its return (the waiter's
//! view: queueing for a merge, the device, the post-I/O work, the wake-up). CPU time is the
//! user + system time of the I/O threads (getrusage per thread), so it includes the
//! leaders' polling and post-I/O work and the waiters' wake-ups, and nothing of other
//! processes on the machine.
//!
//! Non-goals: mixed read/write jobs, think time, queue depth above one per thread.

use smartcon_util::rng::Rng;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

use serde::Serialize;
use smartcon_devemu::Op;

use super::{MergeDevice, WaiterStats, PAGE_BYTES, THREADS_MAX};
use smartcon_engine::clock::tighten_timer_slack;
use smartcon_engine::decision::{Reason, Strategy};
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::job::{Pattern, DURATION_NS_MAX};
use smartcon_engine::stats::{new_histogram, Usage};
use smartcon_engine::target::AlignedBuf;
use smartcon_engine::verify;

#[derive(Debug, Clone)]
pub struct MergeJobSpec {
    pub op: Op,
    pub pattern: Pattern,
    pub threads: u32,
    pub duration_ns: u64,
    /// Each thread stops after this many I/Os (whichever of this and the duration first).
    pub ios_per_thread_max: Option<u64>,
    /// The region I/O goes to, from offset 0.
    pub span_bytes: u64,
    /// Write the verification pattern over the span before the run (reads need it).
    pub prefill: bool,
    /// Seeds the offsets.
    pub seed: u64,
}

/// What a job measured. `elapsed_ns` runs from the first thread's start to the last one's
/// end (a thread finishes the request in flight at the deadline). The JSON names of the
/// fields a `result` record also has are the `result`'s (docs/json.md).
#[derive(Debug, Clone, Serialize)]
pub struct MergeJobResult {
    pub ios: u64,
    #[serde(rename = "duration_ns")]
    pub elapsed_ns: u64,
    pub iops: f64,
    #[serde(rename = "lat_ns_p50")]
    pub latency_ns_p50: u64,
    #[serde(rename = "lat_ns_p99")]
    pub latency_ns_p99: u64,
    #[serde(rename = "lat_ns_mean")]
    pub latency_ns_mean: f64,
    /// User + system CPU time of the I/O threads.
    pub cpu_ns: u64,
    /// `cpu_ns` over the elapsed time, in % of one CPU.
    pub cpu_pct: f64,
    /// Device requests (merged requests with merge on).
    pub device_requests: u64,
    pub pages: u64,
    pub pages_per_request_mean: f64,
    /// Requests released by post-I/O work; equals `ios` when every waiter was released once.
    pub releases: u64,
    pub polls: u64,
    pub sleeps: u64,
    pub leader_turns: u64,
    /// Mean |seen - predicted| of the predicted waits (dynamic polling after sampling).
    pub prediction_error_ns_mean: Option<f64>,
    /// Device requests by the way their waiting thread waited (the port's fixed strategy,
    /// or its decisions), by strategy name; strategies no request took are left out.
    pub waits: std::collections::BTreeMap<&'static str, u64>,
    /// For a decision (`smart`, `paper`, ...): device requests by the decision's reason.
    pub reasons: std::collections::BTreeMap<&'static str, u64>,
    pub interrupted: bool,
}

impl MergeJobSpec {
    pub fn validate(&self, dev: &MergeDevice) -> Result<(), Error> {
        let usage = |m: String| Err(Error::new(ErrorKind::Usage, m));
        let bs = dev.config().bs_bytes;
        if self.threads == 0 || self.threads as usize > THREADS_MAX {
            return usage(format!("threads must be 1..={THREADS_MAX}"));
        }
        if self.duration_ns == 0 || self.duration_ns > DURATION_NS_MAX {
            return usage("duration must be more than 0 and at most 24 h".into());
        }
        if self.span_bytes > dev.capacity_bytes() || !self.span_bytes.is_multiple_of(PAGE_BYTES) {
            return usage(format!(
                "span {} must be whole pages within {} ({} bytes)",
                self.span_bytes,
                dev.label(),
                dev.capacity_bytes()
            ));
        }
        if self.span_bytes < bs * self.threads as u64 {
            return usage(format!(
                "span {} is too small for {} thread(s) of {bs}-byte I/O",
                self.span_bytes, self.threads
            ));
        }
        if self.ios_per_thread_max == Some(0) {
            return usage("I/Os per thread must be more than 0".into());
        }
        // The sampling phase only matters to dynamic polling; intervals always.
        let run_ns = if dev.config().samples() { self.duration_ns } else { u64::MAX };
        dev.config().poll.validate(run_ns)
    }
}

struct ThreadOut {
    hist: hdrhistogram::Histogram<u64>,
    ios: u64,
    start_ns: u64,
    end_ns: u64,
    usage: Usage,
    stats: WaiterStats,
    /// Device requests by strategy (the port's counters).
    waits: [u64; Strategy::COUNT],
    reasons: [u64; Reason::COUNT],
    error: Option<Error>,
}

impl ThreadOut {
    /// A thread that could not start (its port did not open).
    fn failed(e: Error) -> ThreadOut {
        ThreadOut {
            hist: new_histogram(),
            ios: 0,
            start_ns: 0,
            end_ns: 0,
            usage: Usage::default(),
            stats: WaiterStats::default(),
            waits: [0; Strategy::COUNT],
            reasons: [0; Reason::COUNT],
            error: Some(e),
        }
    }
}

/// Runs the job; `stop` ends it early (what was measured is returned with `interrupted`).
/// A verification mismatch ends the job with an error naming the offset.
pub fn run_merge_job(dev: &MergeDevice, spec: &MergeJobSpec, stop: &AtomicBool) -> Result<MergeJobResult, Error> {
    spec.validate(dev)?;
    let seed = dev.config().verify_seed;
    if spec.prefill {
        if let Some(s) = seed {
            dev.prefill(spec.span_bytes, s);
        }
    }
    let before = dev.counts();
    let barrier = Barrier::new(spec.threads as usize + 1);
    let bs = dev.config().bs_bytes;
    let slots = spec.span_bytes / bs;
    let outs: Vec<ThreadOut> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..spec.threads)
            .map(|t| {
                let barrier = &barrier;
                std::thread::Builder::new()
                    .name(format!("smartcon-merge-{t}"))
                    .spawn_scoped(s, move || {
                        tighten_timer_slack();
                        let mut waiter = match dev.waiter() {
                            Ok(w) => w,
                            Err(e) => {
                                barrier.wait();
                                return ThreadOut::failed(e);
                            }
                        };
                        let mut buf = AlignedBuf::new(bs as usize);
                        let mut hist = new_histogram();
                        let mut rng = Rng::new(spec.seed ^ (t as u64 + 1));
                        let per_thread = slots / spec.threads as u64;
                        let mut seq_slot = t as u64 * per_thread;
                        barrier.wait();
                        // The device's clock (the engine's injected one), which its
                        // instants and its waiters' sleeps are on.
                        let time = &*dev.time;
                        let u0 = Usage::of_thread();
                        let start_ns = time.now_ns();
                        let deadline = start_ns + spec.duration_ns;
                        let max = spec.ios_per_thread_max.unwrap_or(u64::MAX);
                        let mut ios = 0u64;
                        let mut error = None;
                        while ios < max && !stop.load(Ordering::Relaxed) && time.now_ns() < deadline {
                            let slot = match spec.pattern {
                                Pattern::Seq => {
                                    let s = seq_slot;
                                    seq_slot += 1;
                                    if seq_slot >= (t as u64 + 1) * per_thread {
                                        seq_slot = t as u64 * per_thread;
                                    }
                                    s
                                }
                                Pattern::Rand => rng.below(slots),
                            };
                            let off = slot * bs;
                            if spec.op == Op::Write {
                                verify::fill(buf.as_mut_slice(), off, PAGE_BYTES, seed.unwrap_or(0));
                            }
                            let t0 = time.now_ns();
                            if let Err(e) = waiter.io(spec.op, buf.as_mut_slice(), off) {
                                error = Some(e);
                                break;
                            }
                            hist.record((time.now_ns() - t0).max(1)).expect("latency within the histogram");
                            ios += 1;
                        }
                        let usage = Usage::of_thread().since(&u0);
                        let (waits, reasons) = (waiter.port_counters().by_strategy, waiter.port_counters().by_reason);
                        let end_ns = time.now_ns();
                        ThreadOut { hist, ios, start_ns, end_ns, usage, stats: waiter.stats, waits, reasons, error }
                    })
                    .expect("spawn I/O thread")
            })
            .collect();
        barrier.wait();
        handles.into_iter().map(|h| h.join().expect("I/O thread panicked")).collect()
    });
    let mut hist = new_histogram();
    let mut ios = 0;
    // The first thread's start: the spawning thread may run late after the barrier on a
    // busy machine, so it does not time the run itself.
    let start_ns = outs.iter().map(|o| o.start_ns).min().unwrap_or(0);
    let mut end_ns = start_ns;
    let mut cpu_ns = 0;
    let mut st = WaiterStats::default();
    let mut waits = std::collections::BTreeMap::new();
    let mut reasons = std::collections::BTreeMap::new();
    for o in &outs {
        for (r, n) in Reason::ALL.iter().zip(o.reasons) {
            if n > 0 {
                *reasons.entry(r.name()).or_insert(0) += n;
            }
        }
        for (s, n) in Strategy::ALL.iter().zip(o.waits) {
            if n > 0 {
                *waits.entry(s.name()).or_insert(0) += n;
            }
        }
        if let Some(e) = &o.error {
            return Err(Error::new(e.kind, e.message.clone()));
        }
        hist.add(&o.hist).expect("same histogram bounds");
        ios += o.ios;
        end_ns = end_ns.max(o.end_ns);
        cpu_ns += o.usage.user_ns + o.usage.sys_ns;
        st.polls += o.stats.polls;
        st.sleeps += o.stats.sleeps;
        st.leader_turns += o.stats.leader_turns;
        st.predicted_waits += o.stats.predicted_waits;
        st.prediction_error_ns_sum += o.stats.prediction_error_ns_sum;
    }
    let after = dev.counts();
    let elapsed_ns = (end_ns - start_ns).max(1);
    let device_requests = after.device_requests - before.device_requests;
    let pages = after.pages - before.pages;
    Ok(MergeJobResult {
        ios,
        elapsed_ns,
        iops: ios as f64 * 1e9 / elapsed_ns as f64,
        latency_ns_p50: hist.value_at_quantile(0.5),
        latency_ns_p99: hist.value_at_quantile(0.99),
        latency_ns_mean: hist.mean(),
        cpu_ns,
        cpu_pct: cpu_ns as f64 * 100.0 / elapsed_ns as f64,
        device_requests,
        pages,
        pages_per_request_mean: if device_requests > 0 { pages as f64 / device_requests as f64 } else { 0.0 },
        releases: after.releases - before.releases,
        polls: st.polls,
        sleeps: st.sleeps,
        leader_turns: st.leader_turns,
        prediction_error_ns_mean: (st.predicted_waits > 0)
            .then(|| st.prediction_error_ns_sum as f64 / st.predicted_waits as f64),
        waits,
        reasons,
        interrupted: stop.load(Ordering::Relaxed),
    })
}

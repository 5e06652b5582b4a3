//! Per-thread measurement and the job's result record.
//!
//! Each I/O thread keeps its own latency histogram and counters (no sharing on the hot
//! path) and reads its own resource usage (getrusage(RUSAGE_THREAD)) at the start and end,
//! so CPU time and context switches are those of the I/O threads alone. Stats do not know
//! how they are printed: the CLI has a table printer and a JSON Lines printer.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::clock::now_ns;
use crate::decision::{Reason, Strategy};
use crate::job::{JobSpec, Pattern, StrategyChoice};
use crate::profile::Profile;
use crate::target::Target;
use crate::wait::Waited;
use smartcon_util::Op;

/// Resource usage of the calling thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub user_ns: u64,
    pub sys_ns: u64,
    pub voluntary: u64,
    pub involuntary: u64,
}

impl Usage {
    pub fn of_thread() -> Usage {
        // SAFETY: an all-zero rusage is valid; getrusage fills it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: RUSAGE_THREAD with a valid out pointer.
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
        let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
        Usage {
            user_ns: tv(ru.ru_utime),
            sys_ns: tv(ru.ru_stime),
            voluntary: ru.ru_nvcsw as u64,
            involuntary: ru.ru_nivcsw as u64,
        }
    }

    pub fn since(&self, start: &Usage) -> Usage {
        Usage {
            user_ns: self.user_ns.saturating_sub(start.user_ns),
            sys_ns: self.sys_ns.saturating_sub(start.sys_ns),
            voluntary: self.voluntary.saturating_sub(start.voluntary),
            involuntary: self.involuntary.saturating_sub(start.involuntary),
        }
    }
}

/// Adds `b`'s counts to `a`. Histograms from [`new_histogram`] have the same bounds, so
/// `add` cannot fail; one built otherwise saturates value by value rather than panic.
pub fn add_histogram(a: &mut Histogram<u64>, b: &Histogram<u64>) {
    if a.add(b).is_err() {
        for v in b.iter_recorded() {
            a.saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
    }
}

/// Latencies up to an hour, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

pub struct ThreadStats {
    pub hist: Histogram<u64>,
    pub ios: u64,
    pub bytes: u64,
    pub by_strategy: [u64; Strategy::COUNT],
    pub by_reason: [u64; Reason::COUNT],
    pub spin_fallbacks: u64,
    /// `block` I/Os a port waited for with the reference wait
    /// (`smartport::BlockWait::Reference`), a subset of `by_strategy[block]`.
    pub reference_waits: u64,
    pub fsyncs: u64,
    /// Polling strategies: polls, kernel sleeps, and the error of each predicted
    /// completion against the device's (|predicted - done|).
    pub polled_ios: u64,
    pub polls: u64,
    pub sleeps: u64,
    pub pred_err: Option<Histogram<u64>>,
    pub overshoot_ns: Option<u64>,
    /// What a timed sleep cost the thread in CPU, where the policy measured it (`hybrid`).
    pub sleep_cpu_ns: Option<u64>,
    /// Emulated targets: how late each completion was seen against the model's instant.
    pub lateness: Option<Histogram<u64>>,
    pub start_ns: u64,
    pub end_ns: u64,
    usage_start: Usage,
    pub usage: Usage,
}

impl ThreadStats {
    pub fn new() -> ThreadStats {
        ThreadStats {
            hist: new_histogram(),
            ios: 0,
            bytes: 0,
            by_strategy: [0; Strategy::COUNT],
            by_reason: [0; Reason::COUNT],
            spin_fallbacks: 0,
            reference_waits: 0,
            fsyncs: 0,
            polled_ios: 0,
            polls: 0,
            sleeps: 0,
            pred_err: None,
            overshoot_ns: None,
            sleep_cpu_ns: None,
            lateness: None,
            start_ns: 0,
            end_ns: 0,
            usage_start: Usage::default(),
            usage: Usage::default(),
        }
    }

    pub fn begin(&mut self) {
        self.begin_at(now_ns());
    }

    /// Starts counting at `start_ns` on the caller's clock (the thread's CPU use is the
    /// host's, read now).
    pub fn begin_at(&mut self, start_ns: u64) {
        self.usage_start = Usage::of_thread();
        self.start_ns = start_ns;
    }

    pub fn end(&mut self) {
        self.end_at(now_ns());
    }

    /// Ends counting at `end_ns` on the clock [`ThreadStats::begin_at`] was given.
    pub fn end_at(&mut self, end_ns: u64) {
        self.end_ns = end_ns;
        self.usage = Usage::of_thread().since(&self.usage_start);
    }

    #[inline]
    pub fn record(&mut self, latency_ns: u64, bytes: u64, strategy: Strategy, reason: Option<Reason>, fell_back: bool) {
        self.hist.saturating_record(latency_ns.max(1));
        self.ios += 1;
        self.bytes += bytes;
        self.by_strategy[strategy.index()] += 1;
        if let Some(r) = reason {
            self.by_reason[r.index()] += 1;
        }
        self.spin_fallbacks += fell_back as u64;
    }

    /// Adds another thread's (or port's) counts to these: the threads of one process.
    pub fn merge(&mut self, other: &ThreadStats) {
        // Both histograms have the bounds of new_histogram, so adding cannot fail.
        let _ = self.hist.add(&other.hist);
        self.ios += other.ios;
        self.bytes += other.bytes;
        for (a, b) in self.by_strategy.iter_mut().zip(other.by_strategy) {
            *a += b;
        }
        for (a, b) in self.by_reason.iter_mut().zip(other.by_reason) {
            *a += b;
        }
        self.spin_fallbacks += other.spin_fallbacks;
        self.reference_waits += other.reference_waits;
        self.fsyncs += other.fsyncs;
        self.polled_ios += other.polled_ios;
        self.polls += other.polls;
        self.sleeps += other.sleeps;
        if let Some(h) = &other.pred_err {
            let _ = self.pred_err.get_or_insert_with(new_histogram).add(h);
        }
        self.overshoot_ns = self.overshoot_ns.or(other.overshoot_ns);
        self.sleep_cpu_ns = self.sleep_cpu_ns.or(other.sleep_cpu_ns);
        if let Some(h) = &other.lateness {
            add_histogram(self.lateness.get_or_insert_with(new_histogram), h);
        }
        self.start_ns = if self.ios == other.ios { other.start_ns } else { self.start_ns.min(other.start_ns) };
        self.end_ns = self.end_ns.max(other.end_ns);
        self.usage.user_ns += other.usage.user_ns;
        self.usage.sys_ns += other.usage.sys_ns;
        self.usage.voluntary += other.usage.voluntary;
        self.usage.involuntary += other.usage.involuntary;
    }

    /// How late an emulated completion was seen: the instant the waiter got control back
    /// minus the model's completion instant. One histogram record, no clock read.
    #[inline]
    pub fn record_lateness(&mut self, lateness_ns: u64) {
        // 0 (on time to the nanosecond) is kept as 1: the histogram's lowest value.
        self.lateness.get_or_insert_with(new_histogram).saturating_record(lateness_ns.max(1));
    }

    /// What a polling wait did; `done_ns` is the device's completion instant.
    pub fn record_polled(&mut self, waited: &Waited, done_ns: u64) {
        self.polled_ios += 1;
        self.polls += waited.polls as u64;
        self.sleeps += waited.sleeps as u64;
        if let Some(p) = waited.predicted_done_ns {
            let h = self.pred_err.get_or_insert_with(new_histogram);
            h.saturating_record(p.abs_diff(done_ns).max(1));
        }
    }
}

/// What the polling strategies did over a job (`hybrid`, `poll`, `half-mean`, and
/// `smart-hybrid`'s hybrid waits).
#[derive(Debug, Clone, Serialize)]
pub struct PollingSummary {
    /// I/Os waited for by polling.
    pub ios: u64,
    /// `poll`: the fixed interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_ns: Option<u64>,
    pub polls_per_io: f64,
    pub sleeps_per_io: f64,
    /// I/Os whose completion was predicted (hybrid after its sampling phase).
    pub predicted_ios: u64,
    /// |predicted - actual completion|: the device's instant on emulated devices, the
    /// instant the completion was seen on real ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pred_err_ns_p50: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pred_err_ns_p90: Option<u64>,
    /// The wake-up overshoot the hybrid threads measured (mean over threads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overshoot_ns: Option<u64>,
    /// What a timed sleep cost the hybrid threads in CPU, as they measured it around their
    /// own sleeps (mean over threads): the bar a sleep must clear to pay.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sleep_cpu_ns: Option<u64>,
    /// What the figures above are read from, so summaries of several turns merge exactly:
    /// the prediction errors, and how many threads measured an overshoot and a sleep's CPU.
    #[serde(skip)]
    pub pred_err_hist: Option<Histogram<u64>>,
    #[serde(skip)]
    pub overshoot_threads: u64,
    #[serde(skip)]
    pub sleep_cpu_threads: u64,
}

impl PollingSummary {
    fn of(threads: &[ThreadStats], spec: &JobSpec) -> Option<PollingSummary> {
        let ios: u64 = threads.iter().map(|t| t.polled_ios).sum();
        if ios == 0 {
            return None;
        }
        let mut err = new_histogram();
        for h in threads.iter().filter_map(|t| t.pred_err.as_ref()) {
            err.add(h).expect("same histogram bounds");
        }
        let (overshoot_ns, overshoot_threads) = mean_over(threads.iter().filter_map(|t| t.overshoot_ns));
        let (sleep_cpu_ns, sleep_cpu_threads) = mean_over(threads.iter().filter_map(|t| t.sleep_cpu_ns));
        let predicted = err.len();
        Some(PollingSummary {
            ios,
            interval_ns: (spec.strategy == StrategyChoice::Fixed(Strategy::FixedPoll)).then_some(spec.poll.interval_ns),
            polls_per_io: threads.iter().map(|t| t.polls).sum::<u64>() as f64 / ios as f64,
            sleeps_per_io: threads.iter().map(|t| t.sleeps).sum::<u64>() as f64 / ios as f64,
            predicted_ios: predicted,
            pred_err_ns_p50: (predicted > 0).then(|| err.value_at_quantile(0.5)),
            pred_err_ns_p90: (predicted > 0).then(|| err.value_at_quantile(0.9)),
            overshoot_ns,
            pred_err_hist: (predicted > 0).then_some(err),
            overshoot_threads,
            sleep_cpu_ns,
            sleep_cpu_threads,
        })
    }

    /// Adds another run's summary: counts add, per-I/O figures are weighted by I/Os, the
    /// prediction-error percentiles come from the merged histograms and the overshoot is
    /// the mean over all threads that measured one.
    pub fn merge(&mut self, other: &PollingSummary) {
        let ios = self.ios + other.ios;
        let per_io = |a: f64, b: f64| (a * self.ios as f64 + b * other.ios as f64) / ios.max(1) as f64;
        self.polls_per_io = per_io(self.polls_per_io, other.polls_per_io);
        self.sleeps_per_io = per_io(self.sleeps_per_io, other.sleeps_per_io);
        self.ios = ios;
        self.predicted_ios += other.predicted_ios;
        if self.interval_ns != other.interval_ns {
            self.interval_ns = None;
        }
        match (&mut self.pred_err_hist, &other.pred_err_hist) {
            (Some(a), Some(b)) => add_histogram(a, b),
            (a @ None, Some(b)) => *a = Some(b.clone()),
            _ => {}
        }
        let h = self.pred_err_hist.as_ref().filter(|h| !h.is_empty());
        self.pred_err_ns_p50 = h.map(|h| h.value_at_quantile(0.5));
        self.pred_err_ns_p90 = h.map(|h| h.value_at_quantile(0.9));
        (self.overshoot_ns, self.overshoot_threads) =
            merge_means((self.overshoot_ns, self.overshoot_threads), (other.overshoot_ns, other.overshoot_threads));
        (self.sleep_cpu_ns, self.sleep_cpu_threads) =
            merge_means((self.sleep_cpu_ns, self.sleep_cpu_threads), (other.sleep_cpu_ns, other.sleep_cpu_threads));
    }
}

/// The mean over threads of the figures some threads measured, and how many did.
fn mean_over(figures: impl Iterator<Item = u64>) -> (Option<u64>, u64) {
    let (sum, n) = figures.fold((0u64, 0u64), |(s, n), x| (s + x, n + 1));
    ((n > 0).then(|| sum / n), n)
}

/// Two such means over threads as one, weighted by their threads.
fn merge_means(a: (Option<u64>, u64), b: (Option<u64>, u64)) -> (Option<u64>, u64) {
    let threads = a.1 + b.1;
    let sum = |(mean, n): (Option<u64>, u64)| mean.unwrap_or(0) * n;
    ((threads > 0).then(|| (sum(a) + sum(b)) / threads), threads)
}

/// How closely a real-time run on an emulated target delivered completions at the model's
/// instants (issue 14, item 3). Lateness of one I/O = the instant its waiter got control
/// back minus the model's completion instant for it.
#[derive(Debug, Clone, Serialize)]
pub struct Accuracy {
    /// I/Os measured.
    pub ios: u64,
    /// Share (0..1) late by at most 2% of the model's service time (`model_service_ns`, no
    /// queueing): Griffin et al.'s criterion, which seed 004 uses (>= 99% within 2%).
    pub within_2pct: f64,
    /// Share (0..1) late by at most 20 us.
    pub within_20us: f64,
    pub lateness_ns_p50: u64,
    pub lateness_ns_p99: u64,
    /// What the figures are read from, so two runs merge exactly.
    #[serde(skip)]
    pub lateness_hist: Histogram<u64>,
}

impl Accuracy {
    /// The figures of `hist` against a service time of `service_ns`; `None` if empty.
    pub fn of(hist: Histogram<u64>, service_ns: u64) -> Option<Accuracy> {
        if hist.is_empty() {
            return None;
        }
        let n = hist.len();
        let within = |limit_ns: u64| hist.count_between(0, limit_ns) as f64 / n as f64;
        // Values up to 2% of the service time; recorded values are at least 1 ns.
        let limit_2pct_ns = (service_ns / 50).max(1);
        Some(Accuracy {
            ios: n,
            within_2pct: within(limit_2pct_ns),
            within_20us: within(20_000),
            lateness_ns_p50: hist.value_at_quantile(0.5),
            lateness_ns_p99: hist.value_at_quantile(0.99),
            lateness_hist: hist,
        })
    }

    /// Adds another run's lateness; shares and percentiles are recomputed from the merged
    /// histogram against `service_ns`.
    pub fn merge(&mut self, other: &Accuracy, service_ns: u64) {
        let mut hist = self.lateness_hist.clone();
        add_histogram(&mut hist, &other.lateness_hist);
        if let Some(a) = Accuracy::of(hist, service_ns) {
            *self = a;
        }
    }
}

impl Default for ThreadStats {
    fn default() -> Self {
        Self::new()
    }
}

/// How many I/Os took each strategy and each branch of the decision. The JSON keys are the
/// strategies' and reasons' names (`block`, `half-mean`, `cpu_busy`...).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Decisions {
    pub by_strategy: BTreeMap<Strategy, u64>,
    pub by_reason: BTreeMap<Reason, u64>,
}

impl Decisions {
    /// The strategies and reasons counted (indexed by [`Strategy::index`] and
    /// [`Reason::index`], as in [`ThreadStats`]), those never taken left out.
    pub fn of_counts(by_strategy: &[u64; Strategy::COUNT], by_reason: &[u64; Reason::COUNT]) -> Decisions {
        let mut d = Decisions::default();
        for s in Strategy::ALL {
            if by_strategy[s.index()] > 0 {
                d.by_strategy.insert(s, by_strategy[s.index()]);
            }
        }
        for r in Reason::ALL {
            if by_reason[r.index()] > 0 {
                d.by_reason.insert(r, by_reason[r.index()]);
            }
        }
        d
    }

    /// Adds another run's counts.
    pub fn add(&mut self, other: &Decisions) {
        for (k, v) in &other.by_strategy {
            *self.by_strategy.entry(*k).or_default() += v;
        }
        for (k, v) in &other.by_reason {
            *self.by_reason.entry(*k).or_default() += v;
        }
    }

    /// I/Os that took `strategy`.
    pub fn count(&self, strategy: Strategy) -> u64 {
        self.by_strategy.get(&strategy).copied().unwrap_or(0)
    }
}

/// The operation of a record: one op, or `mixed` when a record merges phases of both
/// (a Filebench-like personality, Postmark's transactions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordOp {
    Read,
    Write,
    Mixed,
}

impl RecordOp {
    pub fn name(self) -> &'static str {
        match self {
            RecordOp::Read => "read",
            RecordOp::Write => "write",
            RecordOp::Mixed => "mixed",
        }
    }

    /// The op itself, when the record has one.
    pub fn op(self) -> Option<Op> {
        match self {
            RecordOp::Read => Some(Op::Read),
            RecordOp::Write => Some(Op::Write),
            RecordOp::Mixed => None,
        }
    }
}

impl From<Op> for RecordOp {
    fn from(op: Op) -> RecordOp {
        match op {
            Op::Read => RecordOp::Read,
            Op::Write => RecordOp::Write,
        }
    }
}

/// The access pattern of a record: the job's, `mixed` when merged phases differ, or
/// `postmark` for Postmark's file transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordPattern {
    Seq,
    Rand,
    Mixed,
    Postmark,
}

impl RecordPattern {
    pub fn name(self) -> &'static str {
        match self {
            RecordPattern::Seq => "seq",
            RecordPattern::Rand => "rand",
            RecordPattern::Mixed => "mixed",
            RecordPattern::Postmark => "postmark",
        }
    }
}

impl From<Pattern> for RecordPattern {
    fn from(p: Pattern) -> RecordPattern {
        match p {
            Pattern::Seq => RecordPattern::Seq,
            Pattern::Rand => RecordPattern::Rand,
        }
    }
}

impl std::fmt::Display for RecordOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::fmt::Display for RecordPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::fmt::Display for StrategyChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A strategy choice is written by its name (`block`, `smart`, `smart-hybrid`...).
impl Serialize for StrategyChoice {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// One result record: a job on a target. The JSON schema is documented in docs/json.md.
///
/// The record keeps its latency histogram (not serialized), so two runs of the same cell
/// merge exactly ([`JobResult::merge`]): the percentiles of the merged record are those of
/// all I/Os together, not a mean of percentiles.
#[derive(Debug, Clone, Serialize)]
pub struct JobResult {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub target: String,
    pub device: String,
    pub op: RecordOp,
    pub pattern: RecordPattern,
    pub bs_bytes: u64,
    pub strategy: StrategyChoice,
    pub threads: u32,
    pub duration_ns: u64,
    pub ios: u64,
    /// Bytes moved by the measured I/Os (`bw_bytes_per_s` is this over `duration_ns`).
    pub bytes: u64,
    pub iops: f64,
    pub bw_bytes_per_s: f64,
    pub lat_ns_mean: f64,
    pub lat_ns_min: u64,
    pub lat_ns_p50: u64,
    pub lat_ns_p99: u64,
    pub lat_ns_p999: u64,
    pub lat_ns_max: u64,
    /// CPU time of the I/O threads in user mode, percent of one CPU over the run (so two
    /// busy threads make 200).
    pub cpu_user_pct: f64,
    pub cpu_sys_pct: f64,
    pub ctx_voluntary: u64,
    pub ctx_involuntary: u64,
    pub decisions: Decisions,
    /// Spins that ran out of budget and slept.
    pub spin_fallbacks: u64,
    /// Flushes issued (`fsync_every`); their time is in the run's wall time, not in the
    /// I/O latencies.
    pub fsyncs: u64,
    /// Present when some I/O was waited for by a polling strategy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub polling: Option<PollingSummary>,
    /// Where the thresholds came from (`probe`, `builtin-model`, `paper-default`).
    pub profile_source: String,
    /// For emulated devices: the model's device time for one request, no queueing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_service_ns: Option<u64>,
    /// For emulated devices: lateness of completions against the model's instants.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<Accuracy>,
    pub verified: bool,
    pub interrupted: bool,
    /// Every measured I/O's latency: what the `lat_ns_*` fields are read from, and what
    /// makes merging turns exact.
    #[serde(skip)]
    pub latency_hist: Histogram<u64>,
}

impl JobResult {
    pub fn from_threads(
        target: &dyn Target,
        spec: &JobSpec,
        profile: &Profile,
        threads: &[ThreadStats],
        interrupted: bool,
    ) -> JobResult {
        let mut hist = new_histogram();
        let mut usage = Usage::default();
        let (mut ios, mut bytes, mut fallbacks, mut fsyncs) = (0, 0, 0, 0);
        let mut by_strategy = [0u64; Strategy::COUNT];
        let mut by_reason = [0u64; Reason::COUNT];
        let start = threads.iter().map(|t| t.start_ns).min().unwrap_or(0);
        let end = threads.iter().map(|t| t.end_ns).max().unwrap_or(start);
        for t in threads {
            hist.add(&t.hist).expect("same histogram bounds");
            ios += t.ios;
            bytes += t.bytes;
            fallbacks += t.spin_fallbacks;
            fsyncs += t.fsyncs;
            usage.user_ns += t.usage.user_ns;
            usage.sys_ns += t.usage.sys_ns;
            usage.voluntary += t.usage.voluntary;
            usage.involuntary += t.usage.involuntary;
            for (sum, n) in by_strategy.iter_mut().zip(&t.by_strategy) {
                *sum += n;
            }
            for (sum, n) in by_reason.iter_mut().zip(&t.by_reason) {
                *sum += n;
            }
        }
        let decisions = Decisions::of_counts(&by_strategy, &by_reason);
        let wall_ns = (end - start).max(1);
        let model_service_ns = target.model_service_ns(spec.op, spec.bs_bytes);
        let accuracy = model_service_ns.and_then(|service| {
            let mut late = new_histogram();
            for h in threads.iter().filter_map(|t| t.lateness.as_ref()) {
                add_histogram(&mut late, h);
            }
            Accuracy::of(late, service)
        });
        let mut r = JobResult {
            record_type: "result",
            target: target.label().to_string(),
            device: target.device_id(),
            op: spec.op.into(),
            pattern: spec.pattern.into(),
            bs_bytes: spec.bs_bytes,
            strategy: spec.strategy,
            threads: spec.threads,
            duration_ns: wall_ns,
            ios,
            bytes,
            iops: 0.0,
            bw_bytes_per_s: 0.0,
            lat_ns_mean: 0.0,
            lat_ns_min: 0,
            lat_ns_p50: 0,
            lat_ns_p99: 0,
            lat_ns_p999: 0,
            lat_ns_max: 0,
            cpu_user_pct: usage.user_ns as f64 / wall_ns as f64 * 100.0,
            cpu_sys_pct: usage.sys_ns as f64 / wall_ns as f64 * 100.0,
            ctx_voluntary: usage.voluntary,
            ctx_involuntary: usage.involuntary,
            decisions,
            spin_fallbacks: fallbacks,
            fsyncs,
            polling: PollingSummary::of(threads, spec),
            profile_source: profile.source.clone(),
            model_service_ns,
            accuracy,
            verified: spec.verify && !interrupted,
            interrupted,
            latency_hist: hist,
        };
        r.derive_rates();
        r
    }

    /// Merges another run of the same cell (a turn, or a phase of the same workload) into
    /// this one. Counts, bytes, times and the latency histograms add, so every derived figure
    /// is exact: rates over the summed wall time, percentiles of all I/Os together, CPU
    /// shares as summed CPU time over summed wall time, polling summaries by
    /// [`PollingSummary::merge`]. The op and pattern become `mixed` where the two differ.
    pub fn merge(&mut self, other: &JobResult) {
        let cpu_ns = |r: &JobResult, pct: f64| pct * r.duration_ns as f64 / 100.0;
        let user_ns = cpu_ns(self, self.cpu_user_pct) + cpu_ns(other, other.cpu_user_pct);
        let sys_ns = cpu_ns(self, self.cpu_sys_pct) + cpu_ns(other, other.cpu_sys_pct);
        self.duration_ns += other.duration_ns;
        self.cpu_user_pct = user_ns / self.duration_ns.max(1) as f64 * 100.0;
        self.cpu_sys_pct = sys_ns / self.duration_ns.max(1) as f64 * 100.0;
        if self.op != other.op {
            self.op = RecordOp::Mixed;
        }
        if self.pattern != other.pattern {
            self.pattern = RecordPattern::Mixed;
        }
        self.threads = self.threads.max(other.threads);
        self.ios += other.ios;
        self.bytes += other.bytes;
        self.ctx_voluntary += other.ctx_voluntary;
        self.ctx_involuntary += other.ctx_involuntary;
        self.decisions.add(&other.decisions);
        self.spin_fallbacks += other.spin_fallbacks;
        self.fsyncs += other.fsyncs;
        self.verified &= other.verified;
        match (&mut self.polling, &other.polling) {
            (Some(a), Some(b)) => a.merge(b),
            (a @ None, Some(b)) => *a = Some(b.clone()),
            _ => {}
        }
        match (&mut self.accuracy, &other.accuracy) {
            (Some(a), Some(b)) => {
                // Cells of one device and size share the service time; where they differ
                // (a mixed op), the shorter one keeps the criterion strict.
                let service = self.model_service_ns.min(other.model_service_ns).unwrap_or(0);
                a.merge(b, service);
            }
            (a @ None, Some(b)) => *a = Some(b.clone()),
            _ => {}
        }
        self.interrupted |= other.interrupted;
        add_histogram(&mut self.latency_hist, &other.latency_hist);
        self.derive_rates();
    }

    /// Recomputes the rates and latency figures from the counts and the histogram.
    fn derive_rates(&mut self) {
        let per_s = 1e9 / self.duration_ns.max(1) as f64;
        self.iops = self.ios as f64 * per_s;
        self.bw_bytes_per_s = self.bytes as f64 * per_s;
        let h = &self.latency_hist;
        let empty = h.is_empty();
        let q = |quantile: f64| if empty { 0 } else { h.value_at_quantile(quantile) };
        self.lat_ns_mean = if empty { 0.0 } else { h.mean() };
        self.lat_ns_min = if empty { 0 } else { h.min() };
        self.lat_ns_p50 = q(0.5);
        self.lat_ns_p99 = q(0.99);
        self.lat_ns_p999 = q(0.999);
        self.lat_ns_max = if empty { 0 } else { h.max() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(ios: u64, polls: f64, errors_ns: &[u64], overshoot: Option<(u64, u64)>) -> PollingSummary {
        let mut h = new_histogram();
        for &e in errors_ns {
            h.record(e).unwrap();
        }
        PollingSummary {
            ios,
            interval_ns: None,
            polls_per_io: polls,
            sleeps_per_io: 1.0,
            predicted_ios: errors_ns.len() as u64,
            pred_err_ns_p50: None,
            pred_err_ns_p90: None,
            overshoot_ns: overshoot.map(|o| o.0),
            pred_err_hist: (!errors_ns.is_empty()).then_some(h),
            overshoot_threads: overshoot.map_or(0, |o| o.1),
            sleep_cpu_ns: None,
            sleep_cpu_threads: 0,
        }
    }

    #[test]
    fn polling_summaries_merge_exactly() {
        // 9 predictions 100 ns off and 1 far off: p50 stays 100 ns, p90 too, which a
        // mean of the two runs' p50s (100 and 10 us) would not say.
        let mut a = summary(30, 2.0, &[100; 9], Some((1_000, 1)));
        let b = summary(10, 6.0, &[10_000], Some((4_000, 2)));
        a.merge(&b);
        assert_eq!((a.ios, a.predicted_ios), (40, 10));
        assert_eq!(a.polls_per_io, 3.0);
        assert_eq!(a.pred_err_ns_p50, Some(100));
        assert_eq!(a.pred_err_ns_p90, Some(100));
        assert_eq!(a.overshoot_ns, Some(3_000), "(1000 * 1 + 4000 * 2) / 3 threads");
        let mut none = summary(5, 1.0, &[], None);
        none.merge(&summary(5, 1.0, &[], None));
        assert_eq!((none.pred_err_ns_p50, none.overshoot_ns), (None, None));
    }

    #[test]
    fn accuracy_reads_the_lateness_histogram_and_merges_exactly() {
        let hist = |values: &[u64]| {
            let mut t = ThreadStats::new();
            for &v in values {
                t.record_lateness(v);
            }
            t.lateness.unwrap()
        };
        // Service 1 ms: 2% is 20 us. 98 I/Os 5 us late, 2 at 30 us and 200 us.
        let mut late = vec![5_000u64; 98];
        late.extend([30_000, 200_000]);
        let a = Accuracy::of(hist(&late), 1_000_000).unwrap();
        assert_eq!(a.ios, 100);
        assert_eq!(a.within_2pct, 0.98);
        assert_eq!(a.within_20us, 0.98);
        assert!(a.lateness_ns_p50.abs_diff(5_000) <= 5 && a.lateness_ns_p99.abs_diff(30_000) <= 30);
        // A 100 us service allows 2 us: none of these I/Os; on time to the ns counts.
        let b = Accuracy::of(hist(&[0, 3_000]), 100_000).unwrap();
        assert_eq!((b.within_2pct, b.within_20us), (0.5, 1.0));
        assert!(Accuracy::of(new_histogram(), 1_000).is_none());
        // Merging adds the histograms: 100 + 2 I/Os, the shares of all of them.
        let mut m = a.clone();
        m.merge(&b, 1_000_000);
        assert_eq!(m.ios, 102);
        assert_eq!(m.within_2pct, 100.0 / 102.0);
        // Threads merge the same way.
        let mut t = ThreadStats::new();
        t.record_lateness(7);
        let mut u = ThreadStats::new();
        u.merge(&t);
        u.merge(&t);
        assert_eq!(u.lateness.unwrap().len(), 2);
    }
}

//! A cell's turns into one record. Every merge is exact: counts and times add, rates are
//! taken over the summed time, and latency percentiles come from the merged histograms
//! ([`JobResult::merge`]), not from a mean of the turns' percentiles.

use smartcon_engine::stats::JobResult;
use smartcon_workloads::postmark::PostmarkCounts;

use super::Corunner;

/// What one turn of one strategy measured.
#[derive(Debug, Clone)]
pub struct Turn {
    pub result: JobResult,
    pub corunner: Option<Corunner>,
    pub counts: Option<PostmarkCounts>,
}

impl Turn {
    /// Adds a later turn of the same strategy and cell.
    pub fn merge(&mut self, later: Turn) {
        self.result.merge(&later.result);
        self.corunner = merge_corunner(self.corunner.take(), later.corunner);
        self.counts = merge_counts(self.counts.take(), later.counts);
    }
}

/// Postmark turns: counts add, tps over the summed transaction time (from the counts'
/// own tps, so the time is the transaction phases' alone).
pub fn merge_counts(a: Option<PostmarkCounts>, b: Option<PostmarkCounts>) -> Option<PostmarkCounts> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let secs = |c: &PostmarkCounts| if c.tps > 0.0 { c.transactions as f64 / c.tps } else { 0.0 };
            let total_s = secs(&a) + secs(&b);
            let transactions = a.transactions + b.transactions;
            Some(PostmarkCounts {
                transactions,
                creates: a.creates + b.creates,
                deletes: a.deletes + b.deletes,
                reads: a.reads + b.reads,
                appends: a.appends + b.appends,
                tps: if total_s > 0.0 { transactions as f64 / total_s } else { 0.0 },
                files_start: a.files_start,
                files_end: b.files_end,
                direct: a.direct && b.direct,
            })
        }
        (a, b) => a.or(b),
    }
}

/// Co-runner turns: work and times add; the rate is over the summed wall time, iowait
/// weighted by it.
pub fn merge_corunner(a: Option<Corunner>, b: Option<Corunner>) -> Option<Corunner> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let real_ns = a.real_ns + b.real_ns;
            let work = a.work + b.work;
            Some(Corunner {
                real_ns,
                work,
                work_per_s: work as f64 * 1e9 / real_ns.max(1) as f64,
                user_ns: a.user_ns + b.user_ns,
                sys_ns: a.sys_ns + b.sys_ns,
                iowait_pct: (a.iowait_pct * a.real_ns as f64 + b.iowait_pct * b.real_ns as f64) / real_ns.max(1) as f64,
                ..a
            })
        }
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::evaluate::CorunnerKind;
    use smartcon_engine::decision::{Reason, Strategy};
    use smartcon_engine::job::StrategyChoice;
    use smartcon_engine::stats::{new_histogram, Decisions, RecordOp, RecordPattern};

    /// A record of `latencies_ns` measured over `duration_ns`, as a job would make it.
    pub(crate) fn record(strategy: StrategyChoice, latencies_ns: &[u64], duration_ns: u64, cpu_pct: f64) -> JobResult {
        let mut hist = new_histogram();
        for &l in latencies_ns {
            hist.record(l).unwrap();
        }
        let mut decisions = Decisions::default();
        decisions.by_strategy.insert(Strategy::Block, latencies_ns.len() as u64);
        decisions.by_reason.insert(Reason::CpuBusy, latencies_ns.len() as u64);
        let ios = latencies_ns.len() as u64;
        let mut r = JobResult {
            record_type: "result",
            target: "t".into(),
            device: "d".into(),
            op: RecordOp::Read,
            pattern: RecordPattern::Rand,
            bs_bytes: 4096,
            strategy,
            threads: 1,
            duration_ns,
            ios,
            bytes: ios * 4096,
            iops: 0.0,
            bw_bytes_per_s: 0.0,
            lat_ns_mean: 0.0,
            lat_ns_min: 0,
            lat_ns_p50: 0,
            lat_ns_p99: 0,
            lat_ns_p999: 0,
            lat_ns_max: 0,
            cpu_user_pct: cpu_pct,
            cpu_sys_pct: 0.0,
            ctx_voluntary: ios,
            ctx_involuntary: 0,
            decisions,
            spin_fallbacks: 0,
            fsyncs: 0,
            polling: None,
            profile_source: "test".into(),
            model_service_ns: None,
            accuracy: None,
            verified: false,
            interrupted: false,
            latency_hist: hist,
        };
        // An empty merge recomputes the derived figures from the counts and the histogram.
        let empty = JobResult { ios: 0, bytes: 0, duration_ns: 0, latency_hist: new_histogram(), ..r.clone() };
        r.merge(&JobResult { decisions: Decisions::default(), ctx_voluntary: 0, ..empty });
        r
    }

    #[test]
    fn merged_turns_have_the_percentiles_of_all_their_ios() {
        // Turn a: 90 fast I/Os; turn b: 10 slow ones. The true p50 is fast and the true
        // p99 slow; a mean of the turns' percentiles weighted by I/Os would put p50 at
        // 0.9 * 10 us + 0.1 * 1 ms = 109 us.
        let fast = record(StrategyChoice::Smart, &[10_000; 90], 1_000_000, 50.0);
        let slow = record(StrategyChoice::Smart, &[1_000_000; 10], 3_000_000, 10.0);
        let mut m = fast.clone();
        m.merge(&slow);
        assert_eq!(m.ios, 100);
        assert_eq!(m.duration_ns, 4_000_000);
        assert!(m.lat_ns_p50.abs_diff(10_000) <= 10, "p50 {}", m.lat_ns_p50);
        assert!(m.lat_ns_p99.abs_diff(1_000_000) <= 1_000, "p99 {}", m.lat_ns_p99);
        assert_eq!(m.iops, 100.0 * 1e9 / 4e6);
        assert_eq!(m.bw_bytes_per_s, 100.0 * 4096.0 * 1e9 / 4e6);
        // CPU: 50% of 1 ms plus 10% of 3 ms over 4 ms.
        assert!((m.cpu_user_pct - 20.0).abs() < 1e-9, "{}", m.cpu_user_pct);
        assert_eq!(m.decisions.count(Strategy::Block), 100);
        assert_eq!(m.decisions.by_reason[&Reason::CpuBusy], 100);
        let mean = (90.0 * fast.lat_ns_mean + 10.0 * slow.lat_ns_mean) / 100.0;
        assert!((m.lat_ns_mean - mean).abs() / mean < 1e-3, "{} vs {mean}", m.lat_ns_mean);
    }

    #[test]
    fn phases_of_different_ops_merge_into_mixed() {
        let mut a = record(StrategyChoice::Smart, &[10_000; 4], 1_000_000, 0.0);
        let b = JobResult { op: RecordOp::Write, pattern: RecordPattern::Seq, threads: 4, ..a.clone() };
        a.merge(&b);
        assert_eq!((a.op, a.pattern, a.threads), (RecordOp::Mixed, RecordPattern::Mixed, 4));
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["op"], "mixed");
        assert_eq!(json["strategy"], "smart");
        assert_eq!(json["decisions"]["by_strategy"]["block"], 8);
        assert_eq!(json["decisions"]["by_reason"]["cpu_busy"], 8);
        assert!(json.get("latency_hist").is_none(), "the histogram is not serialized");
    }

    #[test]
    fn corunner_turns_add_work_and_weight_iowait_by_time() {
        let k = |real_ns, work, iowait_pct| Corunner {
            kind: CorunnerKind::Cpu,
            workers: 2,
            real_ns,
            work,
            work_per_s: 0.0,
            user_ns: 1,
            sys_ns: 2,
            iowait_pct,
        };
        let m = merge_corunner(Some(k(1_000_000_000, 10, 10.0)), Some(k(3_000_000_000, 50, 2.0))).unwrap();
        assert_eq!((m.real_ns, m.work, m.user_ns, m.sys_ns), (4_000_000_000, 60, 2, 4));
        assert_eq!(m.work_per_s, 15.0);
        assert!((m.iowait_pct - 4.0).abs() < 1e-12);
        assert_eq!(merge_corunner(None, Some(k(1, 1, 0.0))).unwrap().work, 1);
    }

    #[test]
    fn postmark_turns_add_transactions_over_their_own_time() {
        let c = |transactions, tps, files_start, files_end| PostmarkCounts {
            transactions,
            creates: 1,
            deletes: 1,
            reads: 1,
            appends: 1,
            tps,
            files_start,
            files_end,
            direct: true,
        };
        // 100 transactions in 1 s and 300 in 1 s: 200 per second.
        let m = merge_counts(Some(c(100, 100.0, 50, 60)), Some(c(300, 300.0, 50, 40))).unwrap();
        assert_eq!((m.transactions, m.creates, m.files_start, m.files_end), (400, 2, 50, 40));
        assert_eq!(m.tps, 200.0);
    }
}

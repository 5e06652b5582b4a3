//! The Device Monitor probe's table: per op and size, latency and CPU per strategy and
//! spin's gain, then the thresholds the rules drew from them and why.

use smartcon_engine::profile::{self, rules};
use smartcon_study::probe::{queue_points_of, ProbeOutcome, QUEUE_PROBE_BS_BYTES};
use smartcon_util::units::{format_ns, format_size};

use crate::table::Table;

/// The human table: per op and size, latency and CPU per strategy and spin's gain.
pub fn render(label: &str, o: &ProbeOutcome, sizes: &[u64]) -> String {
    let p = &o.profile;
    let mut t = Table::new(&["op", "size", "block", "spin", "sync", "spin gain", "CPU block", "CPU spin", "CPU sync"]);
    for op in ["read", "write"] {
        for &bs in sizes {
            let get = |s: &str| {
                p.latencies.iter().find(|x| x.op == op && x.bs_bytes == bs && x.strategy == s && x.background_ios == 0)
            };
            let (Some(b), Some(sp), Some(sy)) = (get("block"), get("spin"), get("sync")) else {
                continue;
            };
            t.row(vec![
                op.into(),
                format_size(bs),
                format_ns(b.lat_ns_mean),
                format_ns(sp.lat_ns_mean),
                format_ns(sy.lat_ns_mean),
                format!("{:+.1}%", (b.lat_ns_mean - sp.lat_ns_mean) / b.lat_ns_mean * 100.0),
                format!("{:.0}%", b.cpu_pct),
                format!("{:.0}%", sp.cpu_pct),
                format!("{:.0}%", sy.cpu_pct),
            ]);
        }
    }
    let mut out = format!("Device Monitor probe of {label} ({})\n", p.device);
    out += &t.render();
    out += "latency = mean per I/O; spin gain = how much shorter spinning makes an I/O than blocking; CPU = I/O thread, % of one CPU.\n\n";
    out += &format!(
        "size threshold  {}   ({}; drawn where spinning's saving, the median over the sizes, falls to {:.0}% of a line through blocking's latencies)\n",
        format_size(p.size_threshold_bytes),
        if p.threshold_check.is_some() { "as kept by the check below" } else { "smart blocks from this size" },
        rules::GAIN_TOLERANCE * 100.0
    );
    out += &check_lines(p);
    out += &format!(
        "device class    {}   (very fast when an I/O of the smallest size, spinning or inline (sync), takes less than the CPU one blocking I/O burns: {}; mainstream when spinning pays at no size; this host's wake-up {} from {})\n",
        p.class.name(),
        format_ns(o.block_cpu_ns),
        format_ns(p.wakeup_ns.unwrap_or(0.0)),
        o.wakeup_source
    );
    out += &format!(
        "CPU threshold   {}%   (100% minus the share of {} CPUs one spinning thread costs)\n",
        p.cpu_threshold_pct,
        profile::online_cpus()
    );
    let q = queue_points_of(&p.latencies);
    if q.is_empty() {
        out += &format!("queue limit Q   {}   (not measured)\n", p.queue_limit);
    } else {
        let row: Vec<String> = q
            .iter()
            .map(|x| format!("{}: {:+.0}%", x.background_ios, (x.block_ns - x.spin_ns) / x.block_ns.max(1.0) * 100.0))
            .collect();
        out += &format!(
            "queue limit Q   {}   (largest number of I/Os in flight ahead at which spinning still gains more than {:.0}% on a {} read; gain by I/Os ahead {})\n",
            p.queue_limit,
            rules::GAIN_TOLERANCE * 100.0,
            format_size(QUEUE_PROBE_BS_BYTES),
            row.join(", ")
        );
    }
    out += &match p.io_cpus.as_deref() {
        Some("any") | None => "I/O thread      unpinned   (the scheduler placed it; --io-cpus to pin)\n".to_string(),
        Some(cpus) => {
            format!("I/O thread      CPUs {cpus}   (pinned for every strategy alike; stored in the profile)\n")
        }
    };
    out
}

/// The threshold check's lines: what the rules drew, each point smart / block, and what
/// was kept (nothing when the probe did not check: not a fast device).
fn check_lines(p: &profile::Profile) -> String {
    let Some(c) = &p.threshold_check else { return String::new() };
    let start = c.wake_bound_bytes.unwrap_or(c.drawn_bytes);
    let mut out = if c.points.is_empty() {
        format!("threshold check {}   (no measured size below it: nothing to check)\n", format_size(c.kept_bytes))
    } else if c.kept_bytes == start {
        format!(
            "threshold check kept {}   (smart against block just below it, {} paired rounds, no load: no worse on IOPS and CPU)\n",
            format_size(c.kept_bytes),
            c.rounds
        )
    } else {
        format!(
            "threshold check moved {} -> {}   (smart against block below it, {} paired rounds, no load: smart lost where it spun)\n",
            format_size(start),
            format_size(c.kept_bytes),
            c.rounds
        )
    };
    if let Some(w) = c.wake_bound_bytes {
        out += &format!(
            "                drawn {}; a spin waits more than {} wake-ups from {}; smart blocks from {} with nothing else in flight, from {} beside others' I/O\n",
            format_size(c.drawn_bytes),
            profile::rules::SPIN_WAKEUPS_MAX,
            format_size(w),
            format_size(c.kept_bytes),
            format_size(c.drawn_bytes)
        );
    }
    for x in &c.points {
        out += &format!(
            "                {} {}: IOPS smart/block {:.3}, CPU {:+.1} points, {:.0}% of smart's I/Os not blocked: {}\n",
            x.op,
            format_size(x.bs_bytes),
            x.iops_ratio,
            x.cpu_delta_pts,
            x.smart_not_blocked_pct,
            x.verdict.name()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartcon_engine::profile::{LatencyPoint, Profile};

    #[test]
    fn the_table_says_where_the_thread_ran() {
        let lp = |s: &str, lat| LatencyPoint {
            op: "read".into(),
            bs_bytes: 4096,
            strategy: s.into(),
            lat_ns_mean: lat,
            cpu_pct: 0.0,
            background_ios: 0,
        };
        let mut profile = Profile::paper_default("blk:vda");
        profile.latencies = vec![lp("block", 20e3), lp("spin", 10e3), lp("sync", 20e3)];
        let outcome = |cpus: Option<&str>| ProbeOutcome {
            profile: Profile { io_cpus: cpus.map(str::to_string), ..profile.clone() },
            ios: vec![1, 1, 1],
            wakeup_source: "test".into(),
            block_cpu_ns: 5e3,
            notes: Vec::new(),
        };
        assert!(render("t", &outcome(Some("1")), &[4096]).contains("I/O thread      CPUs 1   (pinned"));
        assert!(render("t", &outcome(Some("any")), &[4096]).contains("I/O thread      unpinned"));
        assert!(render("t", &outcome(None), &[4096]).contains("I/O thread      unpinned"));
        assert!(!render("t", &outcome(None), &[4096]).contains("threshold check"), "not checked: no line");
    }

    #[test]
    fn the_threshold_check_says_what_it_did() {
        use smartcon_engine::profile::{CheckPoint, CheckVerdict, ThresholdCheck};
        let point = |bs, iops_ratio, cpu_delta_pts, verdict| CheckPoint {
            op: "read".into(),
            bs_bytes: bs,
            iops_ratio,
            cpu_delta_pts,
            smart_not_blocked_pct: 100.0,
            verdict,
        };
        let mut p = Profile::paper_default("blk:vda");
        p.threshold_check = Some(ThresholdCheck {
            drawn_bytes: 1 << 20,
            wake_bound_bytes: None,
            kept_bytes: 256 << 10,
            rounds: 6,
            points: vec![
                point(512 << 10, 0.61, 87.0, CheckVerdict::LostIops),
                point(256 << 10, 1.0, 45.0, CheckVerdict::LostCpu),
                point(128 << 10, 1.10, 40.0, CheckVerdict::NoWorse),
            ],
        });
        let text = check_lines(&p);
        assert!(text.starts_with("threshold check moved 1m -> 256k"), "{text}");
        assert!(text.contains("read 512k: IOPS smart/block 0.610, CPU +87.0 points"), "{text}");
        assert!(text.contains("lost on CPU") && text.contains("no worse"), "{text}");
        assert!(!text.contains("wake-ups"), "{text}");
        // The wake-up bound started the check at 512k; smart then lost there too.
        if let Some(c) = p.threshold_check.as_mut() {
            c.wake_bound_bytes = Some(512 << 10);
            c.points.remove(0);
        }
        let text = check_lines(&p);
        assert!(text.starts_with("threshold check moved 512k -> 256k"), "{text}");
        assert!(text.contains("drawn 1m; a spin waits more than 6 wake-ups from 512k; smart blocks from 256k with nothing else in flight, from 1m beside others' I/O"), "{text}");
    }
}

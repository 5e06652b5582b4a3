//! Human printers for engine results. JSON output is the serde form of the same records
//! (see docs/json.md); these only format.

use smartcon_engine::stats::JobResult;
use smartcon_util::units::{format_ns, format_size};

fn thousands(n: f64) -> String {
    let s = format!("{:.0}", n);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 && c != '-' {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn iops(n: f64) -> String {
    thousands(n)
}

pub fn mb_per_s(bytes_per_s: f64) -> String {
    format!("{:.1} MB/s", bytes_per_s / 1e6)
}

pub fn decisions(r: &JobResult) -> String {
    let strat: Vec<String> = r.decisions.by_strategy.iter().map(|(k, v)| format!("{} {v}", k.name())).collect();
    let reasons: Vec<String> = r.decisions.by_reason.iter().map(|(k, v)| format!("{} {v}", k.name())).collect();
    if reasons.is_empty() {
        strat.join(", ")
    } else {
        format!("{} ({})", strat.join(", "), reasons.join(", "))
    }
}

/// A multi-line report of one job.
pub fn job_report(r: &JobResult) -> String {
    let mut s = format!(
        "{} {} {} {} with {} on {} thread(s) for {}{}\n",
        r.target,
        r.op,
        r.pattern,
        format_size(r.bs_bytes),
        r.strategy,
        r.threads,
        format_ns(r.duration_ns as f64),
        if r.interrupted { " (interrupted)" } else { "" }
    );
    s += &format!(
        "  I/Os        {}   IOPS {}   bandwidth {}\n",
        thousands(r.ios as f64),
        iops(r.iops),
        mb_per_s(r.bw_bytes_per_s)
    );
    s += &format!(
        "  latency     mean {}  p50 {}  p99 {}  p99.9 {}  max {}",
        format_ns(r.lat_ns_mean),
        format_ns(r.lat_ns_p50 as f64),
        format_ns(r.lat_ns_p99 as f64),
        format_ns(r.lat_ns_p999 as f64),
        format_ns(r.lat_ns_max as f64)
    );
    if let Some(m) = r.model_service_ns {
        s += &format!("   (device model: {})", format_ns(m as f64));
    }
    s += "\n";
    if let Some(a) = &r.accuracy {
        s += &format!(
            "  accuracy    {:.2}% within 2% of the model, {:.2}% within 20 us, lateness p50 {} p99 {}\n",
            a.within_2pct * 100.0,
            a.within_20us * 100.0,
            format_ns(a.lateness_ns_p50 as f64),
            format_ns(a.lateness_ns_p99 as f64)
        );
    }
    s += &format!(
        "  CPU         user {:.1}%  sys {:.1}%  (of one CPU, I/O threads only)\n",
        r.cpu_user_pct, r.cpu_sys_pct
    );
    s += &format!("  ctx switch  voluntary {}  involuntary {}\n", r.ctx_voluntary, r.ctx_involuntary);
    s += &format!("  decisions   {}", decisions(r));
    if r.spin_fallbacks > 0 {
        s += &format!("; {} spin(s) ran out of budget and slept", r.spin_fallbacks);
    }
    if r.strategy.name().starts_with("smart") {
        s += &format!("  [profile: {}]", r.profile_source);
    }
    s += "\n";
    if let Some(p) = &r.polling {
        s += &format!("  polling     {:.1} polls and {:.2} sleeps per I/O", p.polls_per_io, p.sleeps_per_io);
        if let (Some(p50), Some(p90)) = (p.pred_err_ns_p50, p.pred_err_ns_p90) {
            s += &format!(
                "; predicted {} I/Os, |error| p50 {} p90 {}",
                thousands(p.predicted_ios as f64),
                format_ns(p50 as f64),
                format_ns(p90 as f64)
            );
        }
        if let Some(o) = p.overshoot_ns {
            s += &format!("; wake-up overshoot {}", format_ns(o as f64));
        }
        s += "\n";
    }
    if r.verified {
        s += "  verify      every block read back matched its pattern\n";
    }
    s
}

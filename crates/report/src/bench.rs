//! `smartcon bench`'s table: every cell's IOPS, gain against block, latency, CPU, context
//! switches and decisions, then the emulation accuracy of the worst cell and the profiles
//! smart used.

use smartcon_engine::job::StrategyChoice;
use smartcon_engine::stats::JobResult;
use smartcon_util::units::{format_ns, format_size};

use crate::printers::iops;
use crate::table::Table;

/// The record of the same cell as `r` under the strategy named `strategy`.
pub fn find<'a>(results: &'a [JobResult], r: &JobResult, strategy: &str) -> Option<&'a JobResult> {
    smartcon_study::bench::find(results, r, StrategyChoice::parse(strategy)?)
}

pub fn render(results: &[JobResult], profiles: &[(String, smartcon_engine::profile::Profile)]) -> String {
    let mut t = Table::new(&[
        "target",
        "op",
        "size",
        "strategy",
        "IOPS",
        "gain",
        "p50",
        "p99",
        "CPU",
        "csw/IO",
        "decisions / polling",
    ]);
    for r in results {
        let gain = find(results, r, "block").filter(|b| b.iops > 0.0).map(|b| format!("{:.2}x", r.iops / b.iops));
        let csw = if r.ios > 0 { (r.ctx_voluntary + r.ctx_involuntary) as f64 / r.ios as f64 } else { 0.0 };
        t.row(vec![
            r.target.clone(),
            r.op.to_string(),
            format_size(r.bs_bytes),
            r.strategy.to_string(),
            iops(r.iops),
            gain.unwrap_or_else(|| "-".into()),
            format_ns(r.lat_ns_p50 as f64),
            format_ns(r.lat_ns_p99 as f64),
            format!("{:.0}%", r.cpu_user_pct + r.cpu_sys_pct),
            format!("{csw:.2}"),
            match (&r.polling, r.strategy.name()) {
                (Some(p), "poll") => format!("every {}", p.interval_ns.map_or("-".into(), |i| format_ns(i as f64))),
                (Some(p), _) if r.strategy.name() != "smart-hybrid" => {
                    format!("{:.1} polls, {:.2} sleeps per I/O", p.polls_per_io, p.sleeps_per_io)
                }
                _ if r.strategy.name().starts_with("smart") => crate::printers::decisions(r),
                _ => String::new(),
            },
        ]);
    }
    let mut out = t.render();
    out += "\ngain = IOPS / block's IOPS in the same cell; CPU = I/O thread's CPU time, % of one CPU; csw/IO = context switches per I/O.\n";
    if let Some((r, a)) = results
        .iter()
        .filter_map(|r| r.accuracy.as_ref().map(|a| (r, a)))
        .min_by(|x, y| x.1.within_2pct.total_cmp(&y.1.within_2pct))
    {
        out += &format!(
            "emulation accuracy, worst cell ({} {} {}): {:.2}% within 2% of the model, {:.2}% within 20 us, lateness p99 {}\n",
            r.target,
            r.op,
            r.strategy,
            a.within_2pct * 100.0,
            a.within_20us * 100.0,
            format_ns(a.lateness_ns_p99 as f64)
        );
    }
    out += "profiles used by smart:\n";
    for (label, p) in profiles {
        out += &format!(
            "  {label}: class {}{}, size threshold {}, CPU threshold {}%, Q={} ({})\n",
            p.class.name(),
            crate::evaluate::inline_bounds(p),
            format_size(p.size_threshold_bytes),
            p.cpu_threshold_pct,
            p.queue_limit,
            p.source
        );
    }
    out
}

//! Rendering of the polling study (`smartcon_study::polling`), shared by `bench` and
//! `evaluate`: the interval sweep's table and plot (paper 002, Fig. 1), the hybrid checks,
//! and the study's part of summary.md with its plots. The measuring and every number are in
//! the study crate; this file only turns them into text and SVG.

use smartcon_study::merge_bench::ratios;
use smartcon_study::polling::{find, StudyRun, LOAD_BM_ONLY, SWEEP_POLL_COST_NS, WORKLOAD_POLLING, WORKLOAD_SWEEP};
pub use smartcon_study::polling::{hybrid_checks, sweeps, HybridCheck, Study, StudyPlan, SweepRecord};
use smartcon_util::units::{format_ns, format_size};

use crate::merge::draw as draw_merge;
use crate::plot::{bar_chart, line_chart, BarChart, LineChart, Series};
use crate::table::Table;
use crate::Result;

pub fn render_polling(sweeps: &[SweepRecord], checks: &[HybridCheck]) -> String {
    let mut out = String::new();
    for s in sweeps {
        let reference = |v: Option<f64>| v.map_or("-".to_string(), format_ns);
        let mut others = String::new();
        for (name, v) in [("dip", s.dip_lat_ns_mean), ("hybrid", s.hybrid_lat_ns_mean)] {
            if let Some(v) = v {
                others += &format!(", {name} {}", format_ns(v));
            }
        }
        out += &format!(
            "\nfixed-interval polling, {} {} {}: mean latency by interval (block {}, spin {}{others})\n",
            s.target,
            s.op,
            format_size(s.bs_bytes),
            reference(s.block_lat_ns_mean),
            reference(s.spin_lat_ns_mean)
        );
        let mut t = Table::new(&["interval", "mean latency", "vs best"]);
        for &(i, lat) in &s.points_ns {
            t.row(vec![format_ns(i as f64), format_ns(lat), format!("{:.2}x", lat / s.best_lat_ns_mean)]);
        }
        out += &t.render();
        out += &format!(
            "best fixed interval: {} (mean latency {})\n",
            format_ns(s.best_interval_ns as f64),
            format_ns(s.best_lat_ns_mean)
        );
    }
    for c in checks {
        out += &format!(
            "\nhybrid, {} {} {} ({}): {:.3} x spin's IOPS at {:.2} x spin's CPU; {} x block's IOPS; {:.2} sleeps per I/O; prediction |error| p50 {}\n",
            c.target,
            c.op,
            format_size(c.bs_bytes),
            c.load,
            c.iops_vs_spin,
            c.cpu_vs_spin,
            c.iops_vs_block.map_or("-".into(), |v| format!("{v:.3}")),
            c.sleeps_per_io,
            c.pred_err_ns_p50.map_or("-".into(), |v| format_ns(v as f64)),
        );
    }
    out
}

/// Latency against the polling interval, block and spin as flat references (Fig. 1).
pub fn plot_sweeps(path: &std::path::Path, sweeps: &[SweepRecord]) -> Result<()> {
    let mut series = Vec::new();
    for s in sweeps {
        let cell = if sweeps.len() > 1 {
            format!(" {} {} {}", s.target, s.op, format_size(s.bs_bytes))
        } else {
            String::new()
        };
        let (lo, hi) = (s.points_ns[0].0 as f64 / 1e3, s.points_ns[s.points_ns.len() - 1].0 as f64 / 1e3);
        series.push(Series {
            name: format!("fixed-interval polling{cell}"),
            points: s.points_ns.iter().map(|&(i, l)| (i as f64 / 1e3, l / 1e3)).collect(),
        });
        for (name, v) in [
            ("block (interrupt-like sleep)", s.block_lat_ns_mean),
            ("spin (back-to-back polls)", s.spin_lat_ns_mean),
            ("dip (wait without polling, then poll)", s.dip_lat_ns_mean),
            ("hybrid (sleep, then poll)", s.hybrid_lat_ns_mean),
        ] {
            if let Some(v) = v {
                series.push(Series { name: format!("{name}{cell}"), points: vec![(lo, v / 1e3), (hi, v / 1e3)] });
            }
        }
    }
    let title = match sweeps {
        [one] => format!("Polling interval vs latency: {} {} {}", one.target, one.op, format_size(one.bs_bytes)),
        _ => "Polling interval vs latency".to_string(),
    };
    let chart = LineChart {
        title: &title,
        x_label: "poll interval (us)",
        y_label: "mean latency (us)",
        log_x: true,
        log_y: false,
        markers: Vec::new(),
    };
    line_chart(path, &chart, &series)
}

/// The study's part of summary.md: the table, the issue's numbers with pass/miss, and why.
pub fn study_md(study: &Study) -> String {
    let mut md = String::from("\n## Hybrid waiting and polling (Shin et al., dynamic interval polling, Fig. 1)\n\n");
    md += "4 KiB random reads, one thread, per emulated device and load. `hybrid` = dynamic interval polling \
           (sampling phase, then sleep until the predicted completion less the measured wake-up overshoot, \
           then polls every alpha); `dip` = the same prediction with the paper's wait (a busy delay that \
           does not poll, no sleep); `poll` = fixed interval; `half-mean` = Linux's removed hybrid polling; \
           `iopoll-hybrid` = Linux 6.13's hybrid IOPOLL (sleep half the ring's minimum completion time); \
           `pas` = DPAS (per-I/O adaptive sleep, switching between polling, PAS and interrupts); \
           `smart-hybrid` = SmartCon's decision with hybrid where it would spin. \
           CPU = the I/O thread's user+sys time, % of one CPU. See docs/hybrid.md.\n\n";
    let mut t = Table::new(&[
        "target",
        "load",
        "strategy",
        "IOPS",
        "vs spin",
        "vs block",
        "CPU",
        "polls/IO",
        "sleeps/IO",
        "|pred err| p50",
    ]);
    for r in study.runs.iter().filter(|r| r.workload == WORKLOAD_POLLING) {
        let of_load = study.results_of(r.load, r.workload);
        let ratio = |s: &str| {
            find(&of_load, &r.result, s)
                .filter(|b| b.iops > 0.0)
                .map_or("-".into(), |b| format!("{:.2}x", r.result.iops / b.iops))
        };
        let p = r.result.polling.as_ref();
        t.row(vec![
            r.result.target.clone(),
            r.load.to_string(),
            r.result.strategy.to_string(),
            format!("{:.0}", r.result.iops),
            ratio("spin"),
            ratio("block"),
            format!("{:.0}%", r.result.cpu_user_pct + r.result.cpu_sys_pct),
            p.map_or("-".into(), |p| format!("{:.1}", p.polls_per_io)),
            p.map_or("-".into(), |p| format!("{:.2}", p.sleeps_per_io)),
            p.and_then(|p| p.pred_err_ns_p50).map_or("-".into(), |e| format_ns(e as f64)),
        ]);
    }
    md += &format!("```\n{}```\n", t.render());
    md += &verdicts_md(&study.verdicts);
    md += "\nCriteria (Shin et al.: hybrid near spin's latency at a fraction of its CPU):\n\n";
    for c in &study.checks {
        let cell = format!("{} ({})", c.target, c.load);
        if c.load == LOAD_BM_ONLY {
            let pass = c.iops_vs_spin >= 0.95 && c.cpu_vs_spin <= 0.5;
            md += &format!(
                "- {cell}: hybrid at {:.3} x spin's IOPS with {:.2} x spin's CPU (target >= 0.95 at <= 0.50): **{}**{}\n",
                c.iops_vs_spin,
                c.cpu_vs_spin,
                if pass { "pass" } else { "miss" },
                if !pass && c.sleeps_per_io < 0.05 {
                    " — hybrid did not sleep: on this host a kernel sleep overshoots by more than the device takes, so \
                     sleeping can only lose; it polls after the predicted wait instead (see docs/hybrid.md)"
                } else {
                    ""
                }
            );
            if let Some(e) = c.pred_err_ns_p50 {
                md += &format!(
                    "- {cell}: median |predicted - actual completion| {} (target < 1 us): **{}**\n",
                    format_ns(e as f64),
                    if e < 1_000 { "pass" } else { "miss" }
                );
            }
        } else if let Some(b) = c.iops_vs_block {
            md += &format!(
                "- {cell}: hybrid at {b:.3} x block's IOPS (target >= 0.97): **{}**\n",
                if b >= 0.97 { "pass" } else { "miss" }
            );
        }
    }
    let poll_cost: Vec<&StudyRun> = study
        .runs
        .iter()
        .filter(|r| r.workload == WORKLOAD_SWEEP && r.result.polling.as_ref().is_none_or(|p| p.interval_ns.is_none()))
        .collect();
    if !poll_cost.is_empty() {
        md += &format!(
            "\nOn a device whose status poll takes {} of the data channel (Fig. 1's contention), the waits that \
             are not fixed-interval polling, both axes:\n\n",
            format_ns(SWEEP_POLL_COST_NS as f64)
        );
        let mut t = Table::new(&["target", "strategy", "mean latency", "IOPS", "CPU", "polls/IO", "sleeps/IO"]);
        for r in poll_cost {
            let p = r.result.polling.as_ref();
            t.row(vec![
                r.result.target.clone(),
                r.result.strategy.to_string(),
                format_ns(r.result.lat_ns_mean),
                format!("{:.0}", r.result.iops),
                format!("{:.0}%", r.result.cpu_user_pct + r.result.cpu_sys_pct),
                p.map_or("-".into(), |p| format!("{:.1}", p.polls_per_io)),
                p.map_or("-".into(), |p| format!("{:.2}", p.sleeps_per_io)),
            ]);
        }
        md += &format!("```\n{}```\n\n", t.render());
    }
    for s in &study.sweeps {
        md += &format!(
            "- fixed-interval polling on {} (each poll takes {} of the channel): best interval {} at {} mean latency; block {}, spin {}\n",
            s.target,
            format_ns(SWEEP_POLL_COST_NS as f64),
            format_ns(s.best_interval_ns as f64),
            format_ns(s.best_lat_ns_mean),
            s.block_lat_ns_mean.map_or("-".into(), format_ns),
            s.spin_lat_ns_mean.map_or("-".into(), format_ns),
        );
    }
    if !study.merge_rows.is_empty() {
        md += &format!(
            "\nTemporal merge on {} with {} threads, 4 KiB random I/O (docs/merge.md; `smartcon merge-bench` runs more):\n\n",
            study.merge_target, study.merge_threads
        );
        let mut t = Table::new(&["op", "config", "IOPS", "p50", "p99", "CPU", "pages/req"]);
        for r in &study.merge_rows {
            t.row(vec![
                r.op.name().to_string(),
                r.config.label(),
                format!("{:.0}", r.result.iops),
                format_ns(r.result.latency_ns_p50 as f64),
                format_ns(r.result.latency_ns_p99 as f64),
                format!("{:.0}%", r.result.cpu_pct),
                format!("{:.1}", r.result.pages_per_request_mean),
            ]);
        }
        md += &format!("```\n{}```\n", t.render());
        md += "\n";
        for ratio in ratios(&study.merge_rows) {
            let target = if ratio.op == "read" { " (target for reads: >= 1.10)" } else { "" };
            md += &format!(
                "- {} {} with {} polling: pipelined post-I/O at {:.2} x serialized IOPS{target}\n",
                ratio.pattern, ratio.op, ratio.polling, ratio.pipelined_over_serialized_iops
            );
        }
    }
    md += "\nPlots: `polling-interval.svg` (Fig. 1 of the dynamic-interval-polling paper), `hybrid.svg`, `merge.svg` (Fig. 4).\n";
    md
}

/// `polling-interval.svg` and `hybrid.svg`; returns how many were written.
pub fn study_plots(dir: &std::path::Path, study: &Study) -> Result<usize> {
    let mut n = 0;
    if !study.sweeps.is_empty() && study.sweeps.iter().all(|s| !s.points_ns.is_empty()) {
        plot_sweeps(&dir.join("polling-interval.svg"), &study.sweeps)?;
        n += 1;
    }
    if !study.checks.is_empty() {
        let chart = BarChart {
            title: "Hybrid waiting against spin and block (4 KiB random read, 1 thread)",
            y_label: "ratio",
            categories: study.checks.iter().map(|c| format!("{} {}", c.target, c.load)).collect(),
            series: vec![
                ("hybrid IOPS / spin IOPS".into(), study.checks.iter().map(|c| c.iops_vs_spin).collect()),
                ("hybrid CPU / spin CPU".into(), study.checks.iter().map(|c| c.cpu_vs_spin).collect()),
                (
                    "hybrid IOPS / block IOPS".into(),
                    study.checks.iter().map(|c| c.iops_vs_block.unwrap_or(f64::NAN)).collect(),
                ),
            ],
            reference: Some(1.0),
        };
        bar_chart(&dir.join("hybrid.svg"), &chart)?;
        n += 1;
    }
    if !study.merge_rows.is_empty() {
        draw_merge(&dir.join("merge.svg"), &study.merge_rows, &study.merge_configs)?;
        n += 1;
    }
    Ok(n)
}

/// smart-hybrid against each peer, round by round: the evaluate's paired rule.
fn verdicts_md(verdicts: &[smartcon_study::polling::PeerVerdict]) -> String {
    if verdicts.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "\nsmart-hybrid against each strategy, round by round (the Pareto criterion's paired rule: IOPS surely >= 1.05 x at no cost on the other axis, or the same IOPS at a clear gain; `neither` is a trade-off or a tie within the rounds' noise):\n\n",
    );
    let mut t = Table::new(&["target", "load", "peer", "verdict", "IOPS x peer (90%)", "CPU more", "co-runner x peer"]);
    for v in verdicts {
        t.row(vec![
            v.target.clone(),
            v.load.to_string(),
            v.peer.clone(),
            v.verdict.to_string(),
            format!(
                "{:.2} ({:.2}-{:.2}, {} rounds)",
                v.iops_ratio, v.iops_ratio_interval[0], v.iops_ratio_interval[1], v.rounds
            ),
            format!("{:+.0} pts", v.cpu_pct_more),
            v.corunner_ratio.map_or("-".into(), |k| format!("{k:.3}")),
        ]);
    }
    md += &format!("```\n{}```\n", t.render());
    md
}

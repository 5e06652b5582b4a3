//! Rendering of the temporal-merge study (`smartcon_study::merge_bench`): the text table of
//! `smartcon merge-bench` and the bar chart of paper 002, Fig. 4. Non-goal: measuring.

use smartcon_study::merge_bench::{serialized_of, MergePlan, Row};
use smartcon_util::units::{format_ns, format_size};
use smartcon_workloads::merge::MergeConfig;

use crate::plot;
use crate::printers::iops;
use crate::table::Table;
use crate::Result;

/// The table `smartcon merge-bench` prints; `duration` is the flag as the user wrote it.
pub fn table(rows: &[Row], plan: &MergePlan, duration: &str) -> String {
    let mut out = format!(
        "merge-bench on {}: {} threads, {} requests, max merge {} pages, {} per run x {} round(s), poll interval {}, alpha {}\n\n",
        plan.target,
        plan.threads,
        format_size(plan.bs_bytes),
        plan.merge_pages_max,
        duration,
        plan.rounds,
        format_ns(rows.first().map_or(0, |r| r.config.poll.interval_ns) as f64),
        format_ns(rows.first().map_or(0, |r| r.config.poll.alpha_ns) as f64),
    );
    let mut t =
        Table::new(&["workload", "config", "IOPS", "p50", "p99", "CPU %", "pages/req", "polls/IO", "vs serialized"]);
    for r in rows {
        let vs = if r.config.merge && r.config.pipelined {
            serialized_of(rows, r)
                .map_or("-".to_string(), |s| format!("{:.2}x", r.result.iops / s.result.iops.max(1e-9)))
        } else {
            "-".to_string()
        };
        t.row(vec![
            format!("{} {}", r.pattern.name(), r.op.name()),
            r.config.label(),
            iops(r.result.iops),
            format_ns(r.result.latency_ns_p50 as f64),
            format_ns(r.result.latency_ns_p99 as f64),
            format!("{:.0}%", r.result.cpu_pct),
            format!("{:.1}", r.result.pages_per_request_mean),
            format!("{:.1}", r.result.polls as f64 / r.result.ios.max(1) as f64),
            vs,
        ]);
    }
    out.push_str(&t.render());
    out
}

/// `merge.svg`: IOPS per workload and configuration (paper 002, Fig. 4).
pub fn draw(path: &std::path::Path, rows: &[Row], configs: &[MergeConfig]) -> Result<()> {
    let mut categories: Vec<String> = Vec::new();
    for r in rows {
        let w = format!("{} {}", r.pattern.name(), r.op.name());
        if !categories.contains(&w) {
            categories.push(w);
        }
    }
    let series = configs
        .iter()
        .map(|c| {
            let values = categories
                .iter()
                .map(|w| {
                    rows.iter()
                        .find(|r| &format!("{} {}", r.pattern.name(), r.op.name()) == w && r.config == *c)
                        .map_or(f64::NAN, |r| r.result.iops / 1e3)
                })
                .collect();
            (c.label(), values)
        })
        .collect();
    plot::bar_chart(
        path,
        &plot::BarChart {
            title: "Temporal merge: IOPS by polling and post-I/O processing (paper 002, Fig. 4)",
            y_label: "thousand IOPS",
            categories,
            series,
            reference: None,
        },
    )
}

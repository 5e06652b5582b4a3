//! Rendering of `smartcon evaluate`'s report (`smartcon_study::evaluate`): summary.md (the
//! headlines, the verdict map, the criteria, the profiles, the tables of Fig. 8-11 and
//! Table VI), report.html's first screen (the paired headline, the host's figures and the
//! verdict map, [`verdict_map`]) and criteria table, and the SVG plots in the manner of the
//! paper's figures. Every number comes from the typed cells and criteria;
//! this file only formats them. Non-goals: measuring or judging (the study does both).

use std::path::Path;

use smartcon_engine::job::StrategyChoice;
use smartcon_study::evaluate::host::HostRecord;
use smartcon_study::evaluate::judge::{
    corunner_rate, find, gain, paper_headline, paper_tally, pareto, pareto_headline, smart_vs_paper, Criterion, Verdict,
};
use smartcon_study::evaluate::plan::Plan;
use smartcon_study::evaluate::{run, Cell, Load, MachineRecord, Workload};
use smartcon_util::units::{format_ns, format_size};

use crate::html::escape;
use crate::plot::{bar_chart, line_chart, scatter_chart, BarChart, LineChart, ScatterChart, Series};
use crate::table::Table;
use crate::verdict_map::{self, VerdictMap};
use crate::Result;

pub fn profile_row(o: &run::Opened) -> Vec<String> {
    let p = &o.profile;
    let label = if o.created { format!("{} ({})", o.target.label(), o.name) } else { o.target.label().to_string() };
    vec![
        label,
        p.device.clone(),
        p.source.clone(),
        format!("{}{}", p.class.name(), inline_bounds(p)),
        format_size(p.size_threshold_bytes),
        format!("{}%", p.cpu_threshold_pct),
        p.queue_limit.to_string(),
        o.cpus_text(),
    ]
}

/// A very fast profile's inline bounds under a load, as the profile tables show them:
/// ` (inline to 128k read, 256k write under a load)`, or nothing for the whole class.
pub fn inline_bounds(p: &smartcon_engine::profile::Profile) -> String {
    let size = |m: Option<u64>| m.map_or("any size".to_string(), format_size);
    if p.very_fast_bytes_max.is_none() && p.very_fast_write_bytes_max.is_none() {
        return String::new();
    }
    format!(
        " (inline to {} read, {} write under a load)",
        size(p.very_fast_bytes_max),
        size(p.very_fast_write_bytes_max)
    )
}

const BLOCK: StrategyChoice = StrategyChoice::Fixed(smartcon_engine::decision::Strategy::Block);

pub fn headline(cells: &[Cell], criteria: &[Criterion]) -> String {
    let mut out = pareto_headline(cells).unwrap_or_else(|| "no smart cells measured".into());
    if let Some(line) = paper_headline(cells) {
        out += &format!("\n{line}");
    }
    let judged: Vec<&Criterion> = criteria.iter().filter(|c| c.met.is_some()).collect();
    if !judged.is_empty() {
        let met = judged.iter().filter(|c| c.met == Some(true)).count();
        out += &format!("\ncriteria: {met} of {} met in this run (see summary.md).", judged.len());
    }
    out
}

/// How long a cell runs, as the header says it.
fn per_cell(plan: &Plan) -> String {
    let d = format_ns(plan.duration_ns as f64);
    let mut notes = Vec::new();
    if plan.rounds_bm_only_large > plan.rounds_bm_only {
        let k = plan.rounds_bm_only_large as f64 / plan.rounds_bm_only as f64;
        notes.push(format!(
            "{}x that without a load for requests of {} and more on the local disk: more turns of the same length",
            format_g(k),
            format_size(smartcon_study::evaluate::plan::LARGE_REQUEST_BYTES)
        ));
    }
    if plan.rounds_bm_only_very_fast > plan.rounds_bm_only {
        notes.push(format!(
            "without a load on a very fast device {} turns of {} each instead of {}",
            plan.rounds_bm_only_very_fast,
            format_ns(plan.duration_ns as f64 / plan.rounds_bm_only_very_fast as f64),
            plan.rounds_bm_only
        ));
    }
    if notes.is_empty() {
        format!("{d} per cell")
    } else {
        format!("{d} per cell ({})", notes.join("; "))
    }
}

fn format_g(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

fn criteria_md(criteria: &[Criterion]) -> String {
    let mut s = String::from("## Criteria, measured in this run\n\n| criterion | measured | met? |\n|---|---|---|\n");
    for c in criteria {
        let met = if c.met == Some(false) { "**missed**" } else { met_text(c.met) };
        s += &format!("| {} | {} | {met} |\n", criterion_short(c).replace('|', "/"), c.figure.replace('|', "/"));
    }
    s += "\n### The criteria in full\n\n";
    for c in criteria {
        s += &format!("- **{}** ({}): {}\n", c.criterion, c.source, c.measured);
    }
    s += "\nA miss names the cell and the decision branch smart took most there: `cpu_busy` in bm-only means other processes used more CPU than the threshold (a shared machine); `mainstream_device` means the profile says spinning never pays on this device; `queue_over_limit` means more I/Os were in flight ahead than Q; `very_fast_device` means smart completes every I/O inline (sync): the I/O thread never sleeps, so beside crunchers it takes its fair share of the CPU and does many times block's I/O, and the crunchers lose that share. The load average before and after the run is under \"About this run\".\n\n";
    s
}

/// A table in a code block, as every section of the summary shows it.
fn table_md(header: &[String], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut t = Table::new(&header.iter().map(String::as_str).collect::<Vec<_>>());
    for r in rows {
        t.row(r);
    }
    format!("```\n{}```\n\n", t.render())
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn or_dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".into())
}

/// What the summary's header says beside the plan.
pub struct Header<'a> {
    pub machine: &'a MachineRecord,
    pub loadavg: (String, String),
    pub secs: f64,
    pub notes: &'a [String],
    /// Ctrl-C stopped the run: the summary says its results are partial.
    pub interrupted: bool,
    /// What the host was, measured in this run.
    pub host: &'a smartcon_study::evaluate::host::HostRecord,
}

/// The head of summary.md: the headlines, the host, the verdict map and the criteria
/// (a short table, then each in full). report.html shows the same from the typed records
/// ([`first_screen_html`], [`criteria_html`]).
pub fn summary_head_md(h: &Header, cells: &[Cell], criteria: &[Criterion], map: &VerdictMap) -> String {
    let mut s = String::from("# smartcon evaluate\n\n");
    if h.interrupted {
        s += "**Interrupted: partial results.**\n\n";
    }
    if let Some(line) = pareto_headline(cells) {
        s += &format!("**{line}**\n\n");
    }
    if let Some(line) = paper_headline(cells) {
        s += &format!("**{line}**\n\n");
    }
    s += &format!("{}\n\n", h.host.text());
    s += &verdict_map::md(map);
    s + &criteria_md(criteria)
}

/// The rest of summary.md: the run's notes, machine and loads, the profiles, and the
/// tables of the paper's figures. report.html folds each of its sections.
pub fn summary_body_md(h: &Header, plan: &Plan, profiles: &[Vec<String>], cells: &[Cell]) -> String {
    let m = h.machine;
    let mut s = String::from("## About this run: notes, load, machine\n\n");
    for n in h.notes {
        s += &format!("Note: {n}.\n\n");
    }
    s += &format!(
        "Load average (/proc/loadavg) before the run: {}; after: {}. This run itself keeps about 1-3 threads busy; more than that means other processes shared the machine.\n\n",
        h.loadavg.0, h.loadavg.1
    );
    s += &format!(
        "Machine: Linux {}, {}, {} CPUs. {} cells in {:.0} s, {}. Timings are from one run on a machine that may have been shared: read ratios, not absolutes.{}\n\n",
        m.kernel,
        m.cpu_model,
        m.cpus,
        cells.len(),
        h.secs,
        per_cell(plan),
        if h.interrupted { " **Interrupted: partial results.**" } else { "" }
    );
    s += &format!(
        "Loads: bm-only (nothing else), cpu-intensive ({} number-cruncher processes), io-intensive ({} I/O workers, 4 KiB random reads on the same target, blocking, {}).\n\n",
        plan.cpu_workers,
        plan.io_workers,
        if plan.io_processes {
            "as separate processes on files and block devices (threads on emulated devices)"
        } else {
            "threads of this process"
        }
    );
    s += "## Profiles used by smart\n\n";
    let header = ["target", "device", "source", "class", "size threshold", "CPU threshold", "Q", "I/O threads on CPUs"];
    s += &table_md(&strings(&header), profiles.iter().cloned());
    s += &format!(
        "I/O threads are pinned per target for every strategy alike (--io-cpus {}): `irq` puts them on the CPUs that take the device's completion interrupts; `any` means unpinned (devices without such an interrupt: emulated, loop, zram).\n\n",
        plan.placement.name()
    );
    s += &gain_md(plan, cells);
    s += &postmark_md(plan, cells);
    s += &switches_md(plan, cells);
    s += &corunner_md(plan, cells);
    s += &paper_md(cells);
    s += "## Plots\n\n`verdict-map.svg` (the verdict map), `fig8-cpu-*.svg` (CPU per strategy by size, bm-only), `fig9-gain-*.svg` (gain by size per load), `fig10-csw-*.svg` (context switches per I/O), `fig11-workloads-*.svg` (gain per workload), `table6-corunner.svg` (co-runner work rate against block), `pareto-*.svg` (each fixed strategy's IOPS and co-runner work against smart's, per cell).\n\n";
    s
}

/// A criterion's name without its parenthesised details: what a table row shows.
fn criterion_short(c: &Criterion) -> &str {
    c.criterion.split(" (").next().unwrap_or(&c.criterion)
}

fn met_text(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "missed",
        None => "not judged",
    }
}

/// The subtitle of report.html: the machine and the run in one line.
pub fn subtitle(h: &Header, plan: &Plan, cells: &[Cell]) -> String {
    let m = h.machine;
    format!(
        "Linux {}, {}, {} CPUs · {} cells in {:.0} s, {} · load average {} before, {} after",
        m.kernel,
        m.cpu_model,
        m.cpus,
        cells.len(),
        h.secs,
        per_cell(plan),
        h.loadavg.0.split_whitespace().next().unwrap_or("?"),
        h.loadavg.1.split_whitespace().next().unwrap_or("?"),
    )
}

/// The first screen of report.html: the paired headline, the host's own figures and the
/// verdict map. Every number is the judge's or the host record's.
pub fn first_screen_html(h: &Header, cells: &[Cell], criteria: &[Criterion], map: &VerdictMap) -> String {
    let mut s = String::new();
    if h.interrupted {
        s += "<p class=\"warn\">Interrupted: the report holds the cells measured so far.</p>\n";
    }
    let p = pareto(cells);
    s += "<p class=\"headline\">";
    if p.judged > 0 {
        let front = p.judged - p.lost.len();
        s += &format!(
            "<strong>smart on the Pareto front in {front} of {} single-thread cells ({:.0}%)</strong>, judged round by round against block, spin and sync",
            p.judged,
            front as f64 * 100.0 / p.judged as f64
        );
        let by: Vec<String> = map.lost_by().iter().map(|(n, k)| format!("{n} {k}")).collect();
        if !by.is_empty() {
            s += &format!("; lost {} (beaten by {})", p.lost.len(), by.join(", "));
        }
        s += ".";
    } else {
        s += "No single-thread cell where smart and a fixed strategy both ran.";
    }
    let v = smart_vs_paper(cells);
    if !v.is_empty() {
        let n = |x: Verdict| v.iter().filter(|c| c.verdict == x).count();
        s += &format!(
            " Against the paper's rule as written: won {}, tied {}, lost {}.",
            n(Verdict::Won),
            n(Verdict::Tied),
            n(Verdict::Lost)
        );
    }
    let judged: Vec<&Criterion> = criteria.iter().filter(|c| c.met.is_some()).collect();
    if !judged.is_empty() {
        s += &format!(
            " Criteria: {} of {} met (<a href=\"#criteria\">below</a>).",
            judged.iter().filter(|c| c.met == Some(true)).count(),
            judged.len()
        );
    }
    s += "</p>\n";
    if let Some(rule) = pareto_headline(cells) {
        s += &format!("<details class=\"rule\"><summary>The paired rule, and the rule of earlier reports</summary><p>{}</p></details>\n", escape(&rule));
    }
    s += &host_html(h.host);
    if !h.notes.is_empty() {
        s += &format!(
            "<p class=\"notes\">{} note{} on this run (what was skipped and why) under “About this run” below.</p>\n",
            h.notes.len(),
            if h.notes.len() == 1 { "" } else { "s" }
        );
    }
    s += "<h2 id=\"map\">Where smart holds, and where a fixed strategy beats it</h2>\n";
    s + &verdict_map::html(map, cells)
}

/// The host's own figures as a row of small boxes (the host record's text is their title).
fn host_html(host: &HostRecord) -> String {
    let us = |ns: f64| format!("{:.1} us", ns / 1000.0);
    let mut items = Vec::new();
    match (host.block_cpu_ns, host.spin_overhead_ns) {
        (Some(b), Some(sp)) => {
            items.push(format!("a blocking wait burns <b>{}</b> of CPU", us(b)));
            items.push(format!("a spinning one <b>{}</b> beyond the device", us(sp)));
        }
        _ => items.push("blocking wait's CPU: not measured".into()),
    }
    items.push(format!(
        "wake-up: a {} sleep wakes <b>{}</b> late (p99 {})",
        us(host.sleep_asked_ns as f64),
        us(host.sleep_overshoot_ns_p50 as f64),
        us(host.sleep_overshoot_ns_p99 as f64)
    ));
    if let (Some(sp), Some(sm)) = (host.local_disk_4k_spin_gain, host.local_disk_4k_smart_gain) {
        items.push(format!("local disk, 4 KiB reads: spin <b>{sp:.2}x</b>, smart <b>{sm:.2}x</b> block"));
    }
    if !host.common_swing.is_empty() {
        let w: Vec<String> = host
            .common_swing
            .iter()
            .map(|w| format!("{} <b>{:.0}%</b> (max {:.0}%)", w.load.name(), w.median * 100.0, w.max * 100.0))
            .collect();
        items.push(format!("rounds swing alike: {}", w.join(", ")));
    }
    if let Some(m) = &host.host_model {
        items.push(format!(
            "host.json: a wake-up across cores <b>{}</b>, <b>{}</b> more onto an idle core; io_uring's blocking wait <b>{:+.1} us</b> / <b>{:+.1} us</b> against pread (idle / beside spinners)",
            us(m.wakeup.p50_ns),
            us(m.idle_wake_extra_ns),
            m.block_path.uring_extra_idle_ns / 1000.0,
            m.block_path.uring_extra_beside_spinners_ns / 1000.0
        ));
    }
    let mut s = format!("<ul class=\"host\" title=\"{}\"><li>This host:</li>", escape(&host.text()));
    for i in items {
        s += &format!("<li>{i}</li>");
    }
    s + "</ul>\n"
}

/// The criteria for a person to scan: one row each with its short figure and met or
/// missed, linking to the criterion in full, its source and every cell, folded under the
/// table (so a terminal browser, which opens every fold, keeps the table narrow).
pub fn criteria_html(criteria: &[Criterion]) -> String {
    let mut s = String::from(
        "<h2 id=\"criteria\">Criteria, measured in this run</h2>\n<table class=\"criteria\"><thead><tr><th>criterion</th><th>measured</th><th>met?</th><th></th></tr></thead>\n<tbody>\n",
    );
    let mut full = String::new();
    for (i, c) in criteria.iter().enumerate() {
        let class = match c.met {
            Some(true) => "met",
            Some(false) => "missed",
            None => "na",
        };
        s += &format!(
            "<tr><td>{}</td><td>{}</td><td class=\"{class}\">{}</td><td><a href=\"#criterion-{i}\">in full</a></td></tr>\n",
            escape(criterion_short(c)),
            escape(&c.figure),
            met_text(c.met),
        );
        full += &format!(
            "<details id=\"criterion-{i}\" class=\"criterion\"><summary>{} ({})</summary><p>{}</p><p>Source: {}</p><p>Measured: {}</p></details>\n",
            escape(criterion_short(c)),
            met_text(c.met),
            escape(&c.criterion),
            escape(c.source),
            escape(&c.measured)
        );
    }
    s + "</tbody></table>\n" + &full
}

fn gain_text(cells: &[Cell], c: Option<&Cell>) -> String {
    or_dash(c.and_then(|c| gain(cells, c)).map(|g| format!("{g:.2}x")))
}

fn gain_md(plan: &Plan, cells: &[Cell]) -> String {
    let others: Vec<StrategyChoice> = plan.strategies.iter().copied().filter(|s| *s != BLOCK).collect();
    let mut header = strings(&["target", "workload", "size"]);
    header.extend(plan.loads.iter().flat_map(|l| others.iter().map(move |o| format!("{o}@{}", l.name()))));
    let mut rows = Vec::new();
    for t in targets_of(cells) {
        for &w in &plan.workloads {
            for bs in w.cells(&plan.sizes).iter().map(|c| c.bs_bytes) {
                let mut row = vec![t.clone(), w.name().into(), format_size(bs)];
                for &l in &plan.loads {
                    for &o in &others {
                        let c = cells.iter().find(|c| {
                            c.result.target == t
                                && c.workload == w
                                && c.result.bs_bytes == bs
                                && c.load == l
                                && c.result.strategy == o
                        });
                        row.push(gain_text(cells, c));
                    }
                }
                rows.push(row);
            }
        }
    }
    "## Gain against block (IOPS ratio; Fig. 9, 12, 15)\n\n".to_string() + &table_md(&header, rows)
}

fn postmark_md(plan: &Plan, cells: &[Cell]) -> String {
    let Some(p) = cells.iter().find_map(|c| c.postmark.as_ref()) else { return String::new() };
    let mut s = "## Postmark-like small-file transactions (Fig. 11b, 13b, 16b)\n\n".to_string();
    s += &format!(
        "{} files of {} to {} in a fresh directory under {}, read/append block {}, read bias {}%, create bias {}%, transactions until the cell's time runs out; data I/O waited for by the strategy, create/open/close/unlink synchronous{}.\n\n",
        p.counts.files_start,
        format_size(p.size_bytes_min),
        format_size(p.size_bytes_max),
        p.dir,
        format_size(p.block_bytes),
        p.read_bias_pct,
        p.create_bias_pct,
        if p.counts.direct { ", O_DIRECT" } else { "; the file system refused O_DIRECT, so the page cache served the data" }
    );
    let others: Vec<StrategyChoice> = plan.strategies.iter().copied().filter(|s| *s != BLOCK).collect();
    let mut header = strings(&["load", "target"]);
    header.extend(plan.strategies.iter().map(|st| format!("tps {st}")));
    header.extend(others.iter().map(|st| format!("{st}/block")));
    header.extend(strings(&["csw/IO block", "csw/IO smart"]));
    let rows = cells.iter().filter(|c| c.tps.is_some() && c.result.strategy == BLOCK).map(|c| {
        let mut row = vec![c.load.name().to_string(), c.result.target.clone()];
        row.extend(
            plan.strategies
                .iter()
                .map(|st| or_dash(find(cells, c, *st).and_then(|x| x.tps).map(|v| format!("{v:.0}")))),
        );
        row.extend(others.iter().map(|st| gain_text(cells, find(cells, c, *st))));
        row.push(format!("{:.2}", c.csw_per_io()));
        row.push(or_dash(find(cells, c, StrategyChoice::Smart).map(|x| format!("{:.2}", x.csw_per_io()))));
        row
    });
    s + &table_md(&header, rows)
}

fn switches_md(plan: &Plan, cells: &[Cell]) -> String {
    let mut header = strings(&["load", "target", "workload", "size"]);
    header.extend(plan.strategies.iter().map(|st| format!("csw/IO {st}")));
    header.extend(plan.strategies.iter().map(|st| format!("CPU {st}")));
    let rows = cells.iter().filter(|c| c.result.strategy == BLOCK).map(|c| {
        let mut row = vec![
            c.load.name().into(),
            c.result.target.clone(),
            c.workload.name().into(),
            format_size(c.result.bs_bytes),
        ];
        let by: Vec<Option<&Cell>> = plan.strategies.iter().map(|st| find(cells, c, *st)).collect();
        row.extend(by.iter().map(|x| {
            or_dash(
                x.map(|x| format!("{:.2} ({}+{})", x.csw_per_io(), x.result.ctx_voluntary, x.result.ctx_involuntary)),
            )
        }));
        row.extend(by.iter().map(|x| or_dash(x.map(|x| format!("{:.0}%", x.cpu_pct())))));
        row
    });
    "## Context switches per I/O, voluntary + involuntary (Fig. 10), and CPU of the I/O (% of one CPU; Fig. 8): the I/O thread's, and the kernel threads' and io_uring workers' during its turns (an O_DIRECT write's completion runs in a kworker, which the thread's clock does not see)\n\n"
        .to_string()
        + &table_md(&header, rows)
}

/// smart against paper per load and target, on the paired rule, with what decided the
/// cells that were not tied.
fn paper_md(cells: &[Cell]) -> String {
    let v = smart_vs_paper(cells);
    if v.is_empty() {
        return String::new();
    }
    let mut s = "## smart against paper (beyond the paper, measured)\n\n".to_string();
    s += "`paper` is the paper's Decision Module as written (declared device class, size > threshold, Q = 0, machine-wide CPU with the spinner included, no spin-cheaper); docs/evaluate.md lists where it and smart differ. A cell is won where smart dominates paper on the Pareto criterion's paired rule, lost where paper dominates smart, tied otherwise. \"What decided\" compares the branch each took most in the cells won or lost.\n\n";
    let declared = |t: &str| {
        cells
            .iter()
            .find(|c| c.result.target == t)
            .map_or("-", |c| smartcon_engine::profile::declared_class_of(&c.result.device).name())
    };
    let rows = paper_tally(&v).into_iter().map(|(load, target, [w, t, l], why)| {
        let why: Vec<String> = why.iter().map(|(a, n)| format!("{a}: {n}")).collect();
        vec![
            load.name().to_string(),
            target.clone(),
            declared(&target).to_string(),
            w.to_string(),
            t.to_string(),
            l.to_string(),
            if why.is_empty() { "-".into() } else { why.join("; ") },
        ]
    });
    s += &table_md(
        &strings(&["load", "target", "paper's class", "won", "tied", "lost", "what decided (won or lost)"]),
        rows,
    );
    let decided: Vec<Vec<String>> = v
        .iter()
        .filter(|c| c.verdict != Verdict::Tied)
        .map(|c| {
            vec![
                c.cell.clone(),
                format!("{:?}", c.verdict).to_lowercase(),
                format!("{:.2}x", c.perf_ratio),
                c.smart_reason.clone(),
                c.paper_reason.clone(),
            ]
        })
        .collect();
    if !decided.is_empty() {
        s += &table_md(&strings(&["cell", "smart", "IOPS smart/paper", "smart's branch", "paper's branch"]), decided);
    }
    s
}

fn corunner_md(plan: &Plan, cells: &[Cell]) -> String {
    let mut s = "## Side effect on the co-running CPU benchmark (Table VI)\n\n".to_string();
    s += "Summed over every cell of the cpu-intensive load per target and strategy: the crunchers' work (batches), its rate against the rate beside block, their user and system CPU time, the wall time, and the machine's iowait.\n\n";
    let mut rows = Vec::new();
    for t in targets_of(cells) {
        for &st in &plan.strategies {
            let ks: Vec<_> = cells
                .iter()
                .filter(|c| c.result.target == t && c.load == Load::CpuIntensive && c.result.strategy == st)
                .filter_map(|c| c.corunner.as_ref())
                .collect();
            if ks.is_empty() {
                continue;
            }
            let sum = |f: fn(&smartcon_study::evaluate::Corunner) -> u64| ks.iter().map(|k| f(k)).sum::<u64>();
            let rate = match (corunner_rate(cells, &t, st), corunner_rate(cells, &t, BLOCK)) {
                (Some(r), Some(b)) if b > 0.0 => format!("{:.3}x", r / b),
                _ => "-".into(),
            };
            rows.push(vec![
                t.clone(),
                st.to_string(),
                sum(|k| k.work).to_string(),
                rate,
                format_ns(sum(|k| k.real_ns) as f64),
                format_ns(sum(|k| k.user_ns) as f64),
                format_ns(sum(|k| k.sys_ns) as f64),
                format!("{:.1}%", ks.iter().map(|k| k.iowait_pct).sum::<f64>() / ks.len() as f64),
            ]);
        }
    }
    s += &table_md(&strings(&["target", "strategy", "work", "rate vs block", "real", "user", "sys", "iowait"]), rows);
    s + "The I/O co-runner (io-intensive) rates are in results.jsonl (`corunner.work_per_s`, I/Os per second).\n\n"
}

/// Target labels in the order they were measured.
fn targets_of(cells: &[Cell]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in cells {
        if !out.contains(&c.result.target) {
            out.push(c.result.target.clone());
        }
    }
    out
}

fn file_name(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}

/// One curve per strategy from the cells `pick` selects, `point` giving each cell's (x, y).
fn curves(plan: &Plan, skip_block: bool, pick: impl Fn(StrategyChoice) -> Vec<(f64, f64)>) -> Vec<Series> {
    let strategies = plan.strategies.iter().filter(|s| !skip_block || **s != BLOCK);
    let name = |s: &StrategyChoice| if skip_block { format!("{s} / block") } else { s.to_string() };
    strategies.map(|s| Series { name: name(s), points: pick(*s) }).filter(|s| !s.points.is_empty()).collect()
}

fn size_chart(path: &Path, title: &str, y_label: &str, series: &[Series]) -> Result<usize> {
    if series.is_empty() {
        return Ok(0);
    }
    let chart = LineChart { title, x_label: "request size (KiB)", y_label, log_x: true, log_y: false, markers: vec![] };
    line_chart(path, &chart, series).map(|_| 1)
}

fn bars(
    path: &Path,
    title: &str,
    y_label: &str,
    categories: Vec<String>,
    series: Vec<(String, Vec<f64>)>,
    reference: Option<f64>,
) -> Result<usize> {
    bar_chart(path, &BarChart { title, y_label, categories, series, reference }).map(|_| 1)
}

fn geomean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
    }
}

pub fn write_plots(dir: &Path, plan: &Plan, cells: &[Cell]) -> Result<usize> {
    let mut n = 0;
    let labels = targets_of(cells);
    // The size plots draw the paper's workload where it ran: Fig. 8-10 are IOZone
    // sequential reads. Their titles name the workload either way.
    let w0 = plan.workloads.iter().copied().find(|w| *w == Workload::IozoneSeqRead).unwrap_or(plan.workloads[0]);
    let pick = |t: &str, l: Load, w: Workload, st: StrategyChoice| -> Vec<&Cell> {
        cells
            .iter()
            .filter(|c| c.result.target == t && c.load == l && c.workload == w && c.result.strategy == st)
            .collect()
    };
    let kib = |c: &Cell| c.result.bs_bytes as f64 / 1024.0;
    for t in &labels {
        let tf = file_name(t);
        let series =
            curves(plan, false, |st| pick(t, Load::BmOnly, w0, st).iter().map(|c| (kib(c), c.cpu_pct())).collect());
        let title = format!("CPU of the I/O (its thread and the kernel's for it), {t}, {}, no load", w0.name());
        n += size_chart(&dir.join(format!("fig8-cpu-{tf}.svg")), &title, "CPU (% of one CPU)", &series)?;
        for &l in &plan.loads {
            let series = curves(plan, true, |st| {
                pick(t, l, w0, st).iter().filter_map(|c| gain(cells, c).map(|g| (kib(c), g))).collect()
            });
            let title = format!("IOPS gain against block, {t}, {}, load {}", w0.name(), l.name());
            let path = dir.join(format!("fig9-gain-{tf}-{}.svg", l.name()));
            n += size_chart(&path, &title, "IOPS / block's IOPS", &series)?;
        }
        if plan.loads.contains(&Load::BmOnly) {
            let csw = |st: StrategyChoice, b: u64| {
                pick(t, Load::BmOnly, w0, st)
                    .iter()
                    .find(|c| c.result.bs_bytes == b)
                    .map_or(f64::NAN, |c| c.csw_per_io())
            };
            let series = plan
                .strategies
                .iter()
                .map(|st| (st.to_string(), plan.sizes.iter().map(|&b| csw(*st, b)).collect()))
                .collect();
            let title = format!("Context switches per I/O, {t}, {}, no load", w0.name());
            let sizes = plan.sizes.iter().map(|&b| format_size(b)).collect();
            n += bars(
                &dir.join(format!("fig10-csw-{tf}.svg")),
                &title,
                "voluntary + involuntary per I/O",
                sizes,
                series,
                None,
            )?;
        }
        let l0 = plan.loads[0];
        let gains = |st: StrategyChoice, w: Workload| -> Vec<f64> {
            pick(t, l0, w, st).iter().filter_map(|c| gain(cells, c)).filter(|g| *g > 0.0).collect()
        };
        let series = plan
            .strategies
            .iter()
            .map(|st| (st.to_string(), plan.workloads.iter().map(|w| geomean(&gains(*st, *w))).collect()))
            .collect();
        let title = format!("Gain against block per workload (geometric mean over sizes), {t}, load {}", l0.name());
        let names = plan.workloads.iter().map(|w| w.name().to_string()).collect();
        n += bars(
            &dir.join(format!("fig11-workloads-{tf}.svg")),
            &title,
            "IOPS / block's IOPS",
            names,
            series,
            Some(1.0),
        )?;
    }
    if plan.loads.contains(&Load::CpuIntensive) {
        let ratio = |t: &str, st| match (corunner_rate(cells, t, st), corunner_rate(cells, t, BLOCK)) {
            (Some(r), Some(b)) if b > 0.0 => r / b,
            (None, Some(b)) if b > 0.0 => 0.0,
            _ => f64::NAN,
        };
        let series = plan
            .strategies
            .iter()
            .map(|st| (format!("beside {st}"), labels.iter().map(|t| ratio(t, *st)).collect()))
            .collect();
        let title = "CPU benchmark's work rate beside each strategy, relative to beside block";
        n += bars(
            &dir.join("table6-corunner.svg"),
            title,
            "work rate / rate beside block",
            labels.clone(),
            series,
            Some(1.0),
        )?;
    }
    Ok(n + pareto_plots(dir, plan, cells)?)
}

/// One cell's point against smart in the same cell: (x, y) = (what the others kept beside
/// the strategy relative to beside smart, the strategy's figure of merit relative to
/// smart's). With a co-runner, x is its work rate; without one (bm-only), smart's CPU over
/// the strategy's, so "right" always means "cheaper for everyone else".
pub fn pareto_point(cells: &[Cell], c: &Cell) -> Option<(f64, f64)> {
    let smart = find(cells, c, StrategyChoice::Smart)?;
    if smart.perf() <= 0.0 {
        return None;
    }
    let x = match (c.corunner.as_ref(), smart.corunner.as_ref()) {
        (Some(k), Some(s)) if s.work_per_s > 0.0 => k.work_per_s / s.work_per_s,
        (None, None) if c.cpu_pct() > 0.0 => smart.cpu_pct() / c.cpu_pct(),
        _ => return None,
    };
    Some((x, c.perf() / smart.perf()))
}

/// `pareto-LOAD.svg`: per load, every fixed strategy's cells against smart's.
fn pareto_plots(dir: &Path, plan: &Plan, cells: &[Cell]) -> Result<usize> {
    let mut n = 0;
    for &l in &plan.loads {
        let series: Vec<Series> = plan
            .strategies
            .iter()
            .filter(|st| matches!(st, StrategyChoice::Fixed(_)))
            .map(|st| Series {
                name: format!("{st}, one point per cell"),
                points: cells
                    .iter()
                    .filter(|c| c.load == l && c.result.strategy == *st)
                    .filter_map(|c| pareto_point(cells, c))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if series.is_empty() {
            continue;
        }
        let x_label = if l == Load::BmOnly {
            "smart's CPU / the strategy's CPU (right: the strategy spends less)"
        } else {
            "co-runner's work beside the strategy / beside smart"
        };
        let title = format!("Each fixed strategy against smart, load {}", l.name());
        let chart = ScatterChart {
            title: &title,
            x_label,
            y_label: "IOPS / smart's IOPS",
            x_refs: vec![(1.0, String::new()), (0.97, "0.97".into())],
            y_refs: vec![(1.0, String::new()), (1.05, "1.05".into())],
            shade: Some(((0.97, 1.05), "here the strategy beats smart on both axes".into())),
        };
        scatter_chart(&dir.join(format!("pareto-{}.svg", l.name())), &chart, &series)?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartcon_study::evaluate::plan::{plan, PlanOptions};

    #[test]
    fn the_header_says_which_cells_take_other_turns() {
        let p = plan(&PlanOptions::default()).unwrap();
        let text = per_cell(&p);
        assert!(text.contains("16x that without a load"), "{text}");
        assert!(text.contains("on a very fast device 60 turns of 5.00 ms each instead of 4"), "{text}");
        let chosen = plan(&PlanOptions { rounds: Some(6), ..PlanOptions::default() }).unwrap();
        assert_eq!(per_cell(&chosen), "300.00 ms per cell");
    }
}

//! The verdict map of an evaluate run: per load, every target x (workload, size) cell with
//! the Pareto criterion's verdict there: smart on the front, or the fixed strategy that
//! beats it, by how much and on which axis. The verdicts are the judge's own
//! ([`judge_cells`], the rule the criterion and the headline use); this file only lays
//! them out, as an HTML table (one `<td>` per judged cell, its facts as `data-*`
//! attributes, the cell's rounds on hover and one click away), a markdown table for
//! summary.md and an SVG plot.
//!
//! Non-goals: judging (the study does it), and JavaScript: the page must read the same
//! in a terminal browser, where the map is a plain table.

use std::path::Path;

use plotters::style::RGBColor;
use smartcon_engine::job::StrategyChoice;
use smartcon_study::evaluate::judge::{judge_cells, turns_of, Axis, JudgedCell, LostCell};
use smartcon_study::evaluate::{Cell, Load, Workload};
use smartcon_util::units::format_size;

use crate::html::escape;
use crate::plot::{grid_chart, GridChart};
use crate::table::Table;
use crate::Result;

/// A run's judged cells, placed on a grid.
pub struct VerdictMap<'a> {
    pub loads: Vec<Load>,
    /// In the order they were measured.
    pub targets: Vec<String>,
    /// (workload, request size), in the plan's order.
    pub rows: Vec<(Workload, u64)>,
    pub judged: Vec<JudgedCell<'a>>,
}

impl<'a> VerdictMap<'a> {
    /// The map of `cells`: every cell the judge judges, none else.
    pub fn of(cells: &'a [Cell]) -> VerdictMap<'a> {
        let judged = judge_cells(cells);
        let mut loads: Vec<Load> = judged.iter().map(|j| j.smart.load).collect();
        loads.sort();
        loads.dedup();
        let mut rows: Vec<(Workload, u64)> =
            judged.iter().map(|j| (j.smart.workload, j.smart.result.bs_bytes)).collect();
        rows.sort();
        rows.dedup();
        let mut targets: Vec<String> = Vec::new();
        for j in &judged {
            if !targets.contains(&j.smart.result.target) {
                targets.push(j.smart.result.target.clone());
            }
        }
        VerdictMap { loads, targets, rows, judged }
    }

    /// The judged cell at a place of the grid, if any.
    pub fn at(&self, load: Load, target: &str, row: (Workload, u64)) -> Option<&JudgedCell<'a>> {
        self.judged.iter().find(|j| {
            let c = j.smart;
            c.load == load && c.result.target == target && c.workload == row.0 && c.result.bs_bytes == row.1
        })
    }

    /// Cells smart lost, per winning strategy name (in the order block, spin, sync).
    pub fn lost_by(&self) -> Vec<(&'static str, usize)> {
        let mut out: Vec<(&'static str, usize)> = Vec::new();
        for name in ["block", "spin", "sync"] {
            let n = self.judged.iter().filter(|j| j.verdict() == name).count();
            if n > 0 {
                out.push((name, n));
            }
        }
        out
    }

    pub fn front(&self) -> usize {
        self.judged.iter().filter(|j| j.lost.is_none()).count()
    }
}

fn row_name(row: (Workload, u64)) -> String {
    format!("{} {}", row.0.name(), format_size(row.1))
}

/// The figure of merit's unit in a cell: transactions for postmark, else IOPS.
fn merit(c: &Cell) -> &'static str {
    if c.tps.is_some() {
        "tps"
    } else {
        "IOPS"
    }
}

/// By how much and on which axis a fixed strategy beat smart, in a few words.
fn margin(l: &LostCell, unit: &str) -> String {
    let pct = |r: f64| format!("{:+.0}%", (r - 1.0) * 100.0);
    match l.axis {
        Axis::Perf => format!("{} {unit}", pct(l.perf_ratio)),
        Axis::Corunner => format!("{} co-runner", pct(l.corunner_ratio.unwrap_or(1.0))),
        Axis::Cpu => format!("{:+.0} pt CPU", l.cpu_pct_more.unwrap_or(0.0)),
    }
}

/// The cell's short label: `front`, or "spin +12% IOPS", "block +4% co-runner", "block
/// -85 pt CPU".
pub fn label(j: &JudgedCell) -> String {
    match &j.lost {
        None => "front".into(),
        Some(l) => format!("{} {}", l.better.name(), margin(l, merit(j.smart))),
    }
}

/// The colour a verdict is drawn in: green for the front, one light colour per strategy
/// that beats smart (the plots' family: block blue, spin red, sync green-grey is avoided
/// so green keeps meaning "smart holds").
pub fn colour(verdict: &str) -> RGBColor {
    match verdict {
        "front" => RGBColor(199, 233, 192),
        "block" => RGBColor(158, 202, 225),
        "spin" => RGBColor(252, 174, 145),
        "sync" => RGBColor(253, 212, 110),
        _ => RGBColor(235, 235, 235),
    }
}

fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// A number in a few characters: 15.2k, 980, 1.23M.
fn num(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e5 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The strategies run in a judged cell, in the run's order, each with its record.
fn strategies_of<'c>(cells: &'c [Cell], j: &JudgedCell) -> Vec<&'c Cell> {
    cells.iter().filter(|x| x.same_cell(j.smart)).collect()
}

/// smart's (or paper's) decisions in a cell by branch, with shares.
fn decisions_text(c: &Cell) -> String {
    let by = &c.result.decisions.by_reason;
    let total: u64 = by.values().sum();
    if total == 0 {
        let blocks = c.result.decisions.by_strategy.iter().map(|(s, n)| format!("{} {n}", s.name()));
        return format!("no branch recorded ({})", blocks.collect::<Vec<_>>().join(", "));
    }
    let mut v: Vec<_> = by.iter().filter(|(_, n)| **n > 0).collect();
    v.sort_by(|a, b| b.1.cmp(a.1));
    v.iter()
        .map(|(r, n)| format!("{} {:.0}%", r.name(), **n as f64 * 100.0 / total as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The verdict in a sentence, with the judge's figures.
fn verdict_text(j: &JudgedCell) -> String {
    match &j.lost {
        None => "smart on the front: no fixed strategy beats it on both axes, round by round".into(),
        Some(l) => {
            let other = match (l.corunner_ratio, l.cpu_pct_more) {
                (Some(k), _) => format!("co-runner's work {k:.2}x"),
                (None, Some(d)) => format!("CPU {d:+.1} points"),
                _ => String::new(),
            };
            format!(
                "{} beats smart on {}: {} {:.2}x (90% {:.2}-{:.2}, {} rounds), {other}",
                l.better.name(),
                l.axis.name(),
                merit(j.smart),
                l.perf_ratio,
                l.perf_ratio_interval[0],
                l.perf_ratio_interval[1],
                l.rounds
            )
        }
    }
}

/// The hover text of a map cell: the verdict, each strategy's means over the rounds, and
/// smart's decisions.
fn title(cells: &[Cell], j: &JudgedCell) -> String {
    let c = j.smart;
    let mut t = format!(
        "{} · {} · {} {}\n{}\n",
        c.load.name(),
        c.result.target,
        c.workload.name(),
        format_size(c.result.bs_bytes),
        verdict_text(j)
    );
    for x in strategies_of(cells, j) {
        t += &format!("{}: {} {}, CPU {:.0}%", x.result.strategy, num(x.perf()), merit(x), x.cpu_pct());
        if let Some(k) = x.corunner.as_ref() {
            t += &format!(", co-runner {}/s", num(k.work_per_s));
        }
        t.push('\n');
    }
    t += &format!("smart's decisions: {}\n(click for the rounds)", decisions_text(c));
    t
}

/// A cell's label for the page: a narrow column breaks it only after the strategy's name
/// ("spin" over "+12%&nbsp;IOPS"; hyphens and minus signs do not break either).
fn html_label(j: &JudgedCell) -> String {
    let text = escape(&label(j));
    match text.split_once(' ') {
        Some((strategy, margin)) => format!("{strategy} {}", margin.replace(' ', "&nbsp;").replace('-', "&#8209;")),
        None => text,
    }
}

/// A target's label with places a narrow column may break it.
fn breakable(t: &str) -> String {
    let mut out = String::new();
    for ch in escape(t).chars() {
        out.push(ch);
        if matches!(ch, '@' | ',' | ':') {
            out.push_str("<wbr>");
        }
    }
    out
}

fn anchor(j: &JudgedCell) -> String {
    let c = j.smart;
    let raw = format!("cell-{}-{}-{}-{}", c.load.name(), c.result.target, c.workload.name(), c.result.bs_bytes);
    raw.chars().map(|ch| if ch.is_ascii_alphanumeric() || ch == '-' { ch } else { '_' }).collect()
}

const LEGEND: [(&str, &str); 4] = [
    ("front", "smart on the front"),
    ("block", "block beats smart"),
    ("spin", "spin beats smart"),
    ("sync", "sync beats smart"),
];

/// The map as an HTML table: one row per (workload, size), one column per target under
/// each load; one `<td class="v">` per judged cell, with `data-target`, `data-workload`,
/// `data-size` (bytes), `data-load` and `data-verdict`.
pub fn html(map: &VerdictMap, cells: &[Cell]) -> String {
    if map.judged.is_empty() {
        return "<p>No single-thread cell where smart and a fixed strategy both ran: no map.</p>\n".into();
    }
    let mut s = String::from("<p class=\"legend\">");
    for (v, text) in LEGEND {
        s += &format!("<span class=\"key\" style=\"background:{}\">{}</span> ", hex(colour(v)), escape(text));
    }
    s += &format!(
        "<span class=\"key\" style=\"background:{}\">not judged</span> · a label says by how much and on which axis (IOPS, the co-runner's work, or CPU in bm-only); hover a cell for its figures, click it for its rounds.</p>\n",
        hex(colour("none"))
    );
    s += "<table class=\"map\">\n<thead><tr><th rowspan=\"2\">workload, size</th>";
    for l in &map.loads {
        s += &format!("<th class=\"load\" colspan=\"{}\">{}</th>", map.targets.len(), l.name());
    }
    s += "</tr>\n<tr>";
    for _ in &map.loads {
        for (i, t) in map.targets.iter().enumerate() {
            let first = if i == 0 { " class=\"first\"" } else { "" };
            s += &format!("<th{first}>{}</th>", breakable(t));
        }
    }
    s += "</tr></thead>\n<tbody>\n";
    for &row in &map.rows {
        s += &format!("<tr><th>{}</th>", escape(&row_name(row)));
        for &l in &map.loads {
            for (i, t) in map.targets.iter().enumerate() {
                let first = if i == 0 { " first" } else { "" };
                match map.at(l, t, row) {
                    Some(j) => {
                        let v = j.verdict();
                        s += &format!(
                            "<td class=\"v{first}\" style=\"background:{}\" data-target=\"{}\" data-workload=\"{}\" data-size=\"{}\" data-load=\"{}\" data-verdict=\"{v}\" title=\"{}\"><a href=\"#{}\">{}</a></td>",
                            hex(colour(v)),
                            escape(t),
                            row.0.name(),
                            row.1,
                            l.name(),
                            escape(&title(cells, j)),
                            anchor(j),
                            html_label(j)
                        );
                    }
                    None => s += &format!("<td class=\"none{first}\">-</td>"),
                }
            }
        }
        s += "</tr>\n";
    }
    s + "</tbody>\n</table>\n"
}

/// Every judged cell's rounds, folded: per strategy its figure of merit, CPU and
/// co-runner work in each round, and smart's (and paper's) decisions by branch. The map's
/// cells link here.
pub fn rounds_html(map: &VerdictMap, cells: &[Cell]) -> String {
    let mut s = String::new();
    for j in &map.judged {
        let c = j.smart;
        let rounds = c.turns.len().max(1);
        s += &format!(
            "<details id=\"{}\" class=\"cell\"><summary>{} {} {} {}: <strong>{}</strong></summary>\n<p>{}.</p>\n",
            anchor(j),
            c.load.name(),
            escape(&c.result.target),
            c.workload.name(),
            format_size(c.result.bs_bytes),
            escape(&label(j)),
            escape(&verdict_text(j))
        );
        s += "<table class=\"rounds\"><thead><tr><th>strategy</th><th>per round</th>";
        for r in 1..=rounds {
            s += &format!("<th>{r}</th>");
        }
        s += "<th>whole cell</th></tr></thead>\n<tbody>\n";
        for x in strategies_of(cells, j) {
            // The rounds the judge compared: the whole cell as one turn if the record has none.
            let turns = turns_of(x);
            let mut axes: Vec<(String, Vec<String>, String)> = vec![
                (merit(x).into(), turns.iter().map(|t| num(t.perf)).collect(), num(x.perf())),
                (
                    "CPU %".into(),
                    turns.iter().map(|t| format!("{:.0}", t.cpu_pct)).collect(),
                    format!("{:.0}", x.cpu_pct()),
                ),
            ];
            if let Some(k) = x.corunner.as_ref() {
                axes.push((
                    "co-runner /s".into(),
                    turns.iter().map(|t| t.corunner_work_per_s.map_or("-".into(), num)).collect(),
                    num(k.work_per_s),
                ));
            }
            let strong = x.result.strategy == StrategyChoice::Smart;
            for (i, (axis, values, whole)) in axes.iter().enumerate() {
                s += "<tr>";
                if i == 0 {
                    let name = if strong {
                        format!("<strong>{}</strong>", x.result.strategy)
                    } else {
                        x.result.strategy.to_string()
                    };
                    s += &format!("<th rowspan=\"{}\">{name}</th>", axes.len());
                }
                s += &format!("<td>{axis}</td>");
                for v in values {
                    s += &format!("<td>{v}</td>");
                }
                for _ in values.len()..rounds {
                    s += "<td></td>";
                }
                s += &format!("<td>{whole}</td></tr>\n");
            }
        }
        s += "</tbody></table>\n";
        s += &format!("<p>smart's decisions by branch: {}", escape(&decisions_text(c)));
        if let Some(p) = cells.iter().find(|x| x.same_cell(c) && x.result.strategy == StrategyChoice::Paper) {
            s += &format!("; paper's: {}", escape(&decisions_text(p)));
        }
        s += ".</p>\n</details>\n";
    }
    s
}

/// The map for summary.md: per load a table, one row per (workload, size), one column per
/// target.
pub fn md(map: &VerdictMap) -> String {
    if map.judged.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "## Where smart holds and where it loses (the verdict map)\n\nEach single-thread cell by the paired rule: `front` (no fixed strategy beats smart on both axes), or the fixed strategy that beats it, by how much and on which axis (IOPS or tps, the co-runner's work, or the CPU of the I/O in bm-only: its thread's and the kernel threads' and io_uring workers' beside it); `-`: no judged cell. The plot `verdict-map.svg` shows the same; results.jsonl has every cell's rounds.\n\n",
    );
    for &l in &map.loads {
        let mut header = vec!["workload, size".to_string()];
        header.extend(map.targets.iter().cloned());
        let mut t = Table::new(&header.iter().map(String::as_str).collect::<Vec<_>>());
        for &row in &map.rows {
            let mut r = vec![row_name(row)];
            r.extend(map.targets.iter().map(|tg| map.at(l, tg, row).map_or("-".into(), label)));
            t.row(r);
        }
        s += &format!("{}:\n\n```\n{}```\n\n", l.name(), t.render());
    }
    s
}

/// `verdict-map.svg`: the map as a plot, loads side by side.
pub fn write_svg(path: &Path, map: &VerdictMap) -> Result<usize> {
    if map.judged.is_empty() {
        return Ok(0);
    }
    let cells = map
        .rows
        .iter()
        .map(|&row| {
            map.loads
                .iter()
                .flat_map(|&l| {
                    map.targets.iter().map(move |t| map.at(l, t, row).map(|j| (colour(j.verdict()), label(j))))
                })
                .collect()
        })
        .collect();
    let chart = GridChart {
        title: "Where smart holds (front) and which fixed strategy beats it, by how much, on which axis",
        groups: map.loads.iter().map(|l| (l.name().to_string(), map.targets.clone())).collect(),
        rows: map.rows.iter().map(|&r| row_name(r)).collect(),
        cells,
        legend: LEGEND.iter().map(|(v, text)| (colour(v), text.to_string())).collect(),
    };
    grid_chart(path, &chart)?;
    Ok(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartcon_engine::decision::{Reason, Strategy};
    use smartcon_engine::stats::{Decisions, JobResult, RecordOp, RecordPattern};
    use smartcon_study::evaluate::{Corunner, CorunnerKind, TurnFigures};

    const SMART: StrategyChoice = StrategyChoice::Smart;
    const BLOCK: StrategyChoice = StrategyChoice::Fixed(Strategy::Block);
    const SPIN: StrategyChoice = StrategyChoice::Fixed(Strategy::Spin);

    /// A cell of `target` and size `bs` under `load` whose rounds gave `perf` each, at
    /// `cpu` % and (under a load) co-runner work `work` per s.
    fn cell(load: Load, target: &str, bs: u64, strategy: StrategyChoice, perf: &[f64], cpu: f64, work: f64) -> Cell {
        let mut decisions = Decisions::default();
        decisions.by_reason.insert(Reason::CpuAvailable, 90);
        decisions.by_reason.insert(Reason::SpinCheaper, 10);
        let iops = perf.iter().sum::<f64>() / perf.len() as f64;
        let result = JobResult {
            record_type: "result",
            target: target.into(),
            device: "d".into(),
            op: RecordOp::Read,
            pattern: RecordPattern::Rand,
            bs_bytes: bs,
            strategy,
            threads: 1,
            duration_ns: 1_000_000_000,
            ios: iops as u64,
            bytes: iops as u64 * bs,
            iops,
            bw_bytes_per_s: 0.0,
            lat_ns_mean: 0.0,
            lat_ns_min: 0,
            lat_ns_p50: 0,
            lat_ns_p99: 0,
            lat_ns_p999: 0,
            lat_ns_max: 0,
            cpu_user_pct: cpu,
            cpu_sys_pct: 0.0,
            ctx_voluntary: 0,
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
            latency_hist: smartcon_engine::stats::new_histogram(),
        };
        let loaded = load != Load::BmOnly;
        Cell {
            result,
            load,
            workload: Workload::IozoneRandRead,
            corunner: loaded.then_some(Corunner {
                kind: CorunnerKind::Cpu,
                workers: 2,
                real_ns: 1_000_000_000,
                work: work as u64,
                work_per_s: work,
                user_ns: 0,
                sys_ns: 0,
                iowait_pct: 0.0,
            }),
            tps: None,
            postmark: None,
            turns: perf
                .iter()
                .map(|&p| TurnFigures {
                    perf: p,
                    corunner_work_per_s: loaded.then_some(work),
                    cpu_pct: cpu,
                    kernel_cpu_pct: 0.0,
                })
                .collect(),
        }
    }

    /// Two targets under two loads: spin 20% faster than smart in every round of one cell
    /// (lost on IOPS), block as fast as smart at 80 points less CPU in another (lost on
    /// CPU), smart on the front elsewhere; one place has no smart cell (not judged).
    fn run() -> Vec<Cell> {
        let (bm, cpu) = (Load::BmOnly, Load::CpuIntensive);
        let r = [1000.0, 1500.0, 1200.0];
        let up = |k: f64| r.iter().map(|x| x * k).collect::<Vec<f64>>();
        vec![
            cell(cpu, "a", 4096, SMART, &r, 50.0, 1000.0),
            cell(cpu, "a", 4096, BLOCK, &up(0.5), 10.0, 1000.0),
            cell(cpu, "a", 4096, SPIN, &up(1.2), 100.0, 1000.0),
            cell(bm, "a", 4096, SMART, &r, 100.0, 0.0),
            cell(bm, "a", 4096, BLOCK, &r, 20.0, 0.0),
            cell(bm, "b", 4096, SMART, &r, 30.0, 0.0),
            cell(bm, "b", 4096, BLOCK, &up(0.6), 10.0, 0.0),
            cell(bm, "b", 65536, BLOCK, &r, 10.0, 0.0),
        ]
    }

    #[test]
    fn the_map_holds_the_judges_verdict_in_every_judged_cell_and_nothing_else() {
        let cells = run();
        let map = VerdictMap::of(&cells);
        assert_eq!(
            (map.loads.clone(), map.targets.clone()),
            (vec![Load::BmOnly, Load::CpuIntensive], vec!["a".to_string(), "b".into()])
        );
        let judged = judge_cells(&cells);
        assert_eq!(map.judged.len(), judged.len());
        assert_eq!(map.front(), 1);
        assert_eq!(map.lost_by(), vec![("block", 1), ("spin", 1)]);
        let at = |l, t, bs| map.at(l, t, (Workload::IozoneRandRead, bs)).map(label);
        assert_eq!(at(Load::CpuIntensive, "a", 4096).as_deref(), Some("spin +20% IOPS"));
        assert_eq!(at(Load::BmOnly, "a", 4096).as_deref(), Some("block -80 pt CPU"));
        assert_eq!(at(Load::BmOnly, "b", 4096).as_deref(), Some("front"));
        assert_eq!(at(Load::BmOnly, "b", 65536), None, "no smart cell there: not judged");

        let html = html(&map, &cells);
        assert_eq!(html.matches("data-verdict=").count(), judged.len());
        for j in &judged {
            let c = j.smart;
            let tag = format!(
                "data-target=\"{}\" data-workload=\"iozone-rand-read\" data-size=\"{}\" data-load=\"{}\" data-verdict=\"{}\"",
                c.result.target,
                c.result.bs_bytes,
                c.load.name(),
                j.verdict()
            );
            assert!(html.contains(&tag), "{tag} in {html}");
        }
        // Rows only where a cell was judged (4k): 2 loads x 2 targets, 3 judged, 1 empty.
        assert_eq!(html.matches("<td class=\"none").count(), 1);
        assert!(!html.contains("64k"), "a size with no judged cell has no row");
        assert!(html.contains("spin beats smart on perf: IOPS 1.20x"), "the hover names the figures");
        assert!(html.contains(">block &#8209;80&nbsp;pt&nbsp;CPU</a>"), "{html}");
        let rounds = rounds_html(&map, &cells);
        assert_eq!(rounds.matches("<details id=\"cell-").count(), 3);
        assert!(rounds.contains("<td>1800</td>") && rounds.contains("cpu_available 90%, spin_cheaper 10%"), "{rounds}");
        // Every link of the map leads to its cell's rounds.
        for (i, _) in html.match_indices("href=\"#") {
            let id = &html[i + 7..i + 7 + html[i + 7..].find('"').unwrap()];
            assert!(rounds.contains(&format!("<details id=\"{id}\"")), "{id}");
        }

        let md = md(&map);
        assert!(md.contains("bm-only:") && md.contains("cpu-intensive:"), "{md}");
        assert!(md.contains("spin +20% IOPS"), "{md}");
        // Removed when dropped, also when the test panics.
        let scratch = tempfile::Builder::new().prefix("smartcon-map-").tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        assert_eq!(write_svg(&dir.join("m.svg"), &map).unwrap(), 1);
        let svg = std::fs::read_to_string(dir.join("m.svg")).unwrap();
        assert!(svg.contains("spin +20% IOPS") && svg.contains("cpu-intensive") && svg.contains("#C7E9C0"), "{svg}");
    }

    #[test]
    fn a_run_without_judged_cells_draws_no_map() {
        let cells = vec![cell(Load::BmOnly, "a", 4096, BLOCK, &[1.0], 1.0, 0.0)];
        let map = VerdictMap::of(&cells);
        assert!(map.judged.is_empty());
        assert!(html(&map, &cells).contains("no map") && md(&map).is_empty());
        assert_eq!(write_svg(Path::new("/nonexistent/m.svg"), &map).unwrap(), 0);
    }
}

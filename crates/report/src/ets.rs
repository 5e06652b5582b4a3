//! Rendering of the elastic-time-slicing study (`smartcon_cachesim::ets`): the text tables
//! `smartcon ets` prints (Fig. 6a/6b, 8, 9 and the Sec. VI sweep) and its SVG plots.
//! Non-goal: simulating; every number is in the records.

use std::fmt::Write;
use std::path::Path;

use smartcon_cachesim::ets::{SummaryRecord, SweepRecord, TaskRecord};
use smartcon_cachesim::policy::PolicyKind;
use smartcon_cachesim::shared::{SharedRecord, SharedSummaryRecord};
use smartcon_util::units::format_size;

use crate::plot;
use crate::Result;

fn pct(v: Option<f64>) -> String {
    v.map(|e| format!("{:.2}%", 100.0 * e)).unwrap_or_else(|| "n/a".into())
}

fn ms(ns: f64) -> f64 {
    ns / 1e6
}

/// The study's text tables, as `smartcon ets` prints them.
pub fn tables(tasks: &[TaskRecord], sweep: &[SweepRecord], s: &SummaryRecord, threads: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "ETS study: {} tasks, LLC {} 16-way {}, {} instructions per task, {} threads",
        s.tasks,
        format_size(s.llc_size_bytes),
        s.policy,
        s.instructions,
        threads
    );
    out += &fig3_table(tasks);
    out.push('\n');
    let _ = writeln!(out, "IPC normalised to UTS-2.5 (Fig. 6a) and the slices ETS gave (Fig. 6b)");
    let _ = writeln!(out, "task          IPC 2.5   IPC 10  IPC ETS    10/2.5   ETS/2.5    ETS-10 |  2.5ms    5ms  7.5ms   10ms ignored  diff%");
    for r in tasks {
        let _ = writeln!(
            out,
            "{:<12} {:>8.4} {:>8.4} {:>8.4} {:>9.3} {:>9.3} {:>8.2}% | {:>6} {:>6} {:>6} {:>6} {:>7} {:>5.0}%",
            r.task,
            r.ipc_uts_2_5,
            r.ipc_uts_10,
            r.ipc_ets,
            r.uts_10_over_uts_2_5,
            r.ets_over_uts_2_5,
            r.ets_vs_uts_10_pct,
            r.slices_2_5ms,
            r.slices_5ms,
            r.slices_7_5ms,
            r.slices_10ms,
            r.estimates_ignored,
            r.different_transitions_pct
        );
    }
    out.push('\n');
    let _ = writeln!(out, "Latency between consecutive schedules of a co-runner, ms (Fig. 8), and CS-miss estimation (Fig. 9, UTS-2.5 run)");
    let _ = writeln!(out, "task           UTS-2.5    UTS-10  ETS mean   ETS std   ETS own |  schedules     CS exact  CS estimate    CS excess    error");
    for r in tasks {
        let _ = writeln!(
            out,
            "{:<12} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} | {:>10} {:>12} {:>12} {:>12} {:>8}",
            r.task,
            ms(r.cosched_latency_ns_mean_uts_2_5),
            ms(r.cosched_latency_ns_mean_uts_10),
            ms(r.cosched_latency_ns_mean_ets),
            ms(r.cosched_latency_ns_std_ets),
            ms(r.own_latency_ns_mean_ets),
            r.schedules_uts_2_5,
            r.cs_misses_exact,
            r.cs_misses_estimated,
            r.cs_misses_excess,
            pct(r.estimation_error_pct.map(|e| e / 100.0))
        );
    }
    out += &sweep_table(tasks, sweep);
    out.push('\n');
    let _ = writeln!(
        out,
        "ETS/UTS-10 IPC: geometric mean {:.4}, worst {:+.2}%, {} of {} tasks within 4%",
        s.ets_over_uts_10_geomean, s.ets_vs_uts_10_pct_worst, s.tasks_within_4pct_of_uts_10, s.tasks
    );
    let _ = writeln!(
        out,
        "co-runner latency mean: UTS-2.5 {:.2} ms, UTS-10 {:.2} ms, ETS {:.2} ms",
        ms(s.cosched_latency_ns_mean_uts_2_5),
        ms(s.cosched_latency_ns_mean_uts_10),
        ms(s.cosched_latency_ns_mean_ets)
    );
    let _ = writeln!(
        out,
        "estimation error (1/16 ATD vs exact): mean {} over {} tasks with CS misses; sweep lru {} drrip {} ship {}",
        pct(s.estimation_error_pct_mean.map(|e| e / 100.0)),
        s.estimation_tasks,
        pct(s.sweep_error_pct_mean_lru.map(|e| e / 100.0)),
        pct(s.sweep_error_pct_mean_drrip.map(|e| e / 100.0)),
        pct(s.sweep_error_pct_mean_ship.map(|e| e / 100.0)),
    );
    let fig3: Vec<String> = s.uniform_cpi_over_uts_10_geomean.iter().map(|(ms, v)| format!("{ms} ms {v:.3}")).collect();
    let _ = writeln!(out, "CPI over UTS-10, geometric mean over the tasks (Fig. 3): {}", fig3.join(", "));
    let _ = writeln!(out, "wall time {:.1} s", s.wall_ns as f64 / 1e9);
    out
}

/// Fig. 3: CPI at each uniform slice over CPI at 10 ms, one row per task.
fn fig3_table(tasks: &[TaskRecord]) -> String {
    let mut out = String::new();
    let Some(first) = tasks.first() else { return out };
    out.push('\n');
    let _ = writeln!(out, "Slowdown: CPI at each uniform slice over CPI at UTS-10 (Fig. 3)");
    let _ = write!(out, "{:<12}", "task");
    for p in &first.uniform {
        let _ = write!(out, " {:>9}", format!("{} ms", p.slice_ms));
    }
    out.push('\n');
    for r in tasks {
        let _ = write!(out, "{:<12}", r.task);
        for p in &r.uniform {
            let _ = write!(out, " {:>9.3}", p.cpi_over_uts_10);
        }
        out.push('\n');
    }
    out
}

/// The LLC size x policy sweep (Sec. VI), one row per task.
fn sweep_table(tasks: &[TaskRecord], sweep: &[SweepRecord]) -> String {
    let mut out = String::new();
    if sweep.is_empty() {
        return out;
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "CS misses per schedule (exact) by LLC size and policy under UTS-2.5 (Sec. VI); estimate error in brackets"
    );
    let sizes: Vec<u64> = {
        let mut v: Vec<u64> = sweep.iter().map(|r| r.llc_size_bytes).collect();
        v.sort();
        v.dedup();
        v
    };
    let _ = write!(out, "{:<12}", "task");
    for p in PolicyKind::ALL {
        for size in &sizes {
            let _ = write!(out, " {:>17}", format!("{} {}", p.name(), format_size(*size)));
        }
    }
    out.push('\n');
    for t in tasks {
        let _ = write!(out, "{:<12}", t.task);
        for p in PolicyKind::ALL {
            for size in &sizes {
                let r = sweep.iter().find(|r| r.task == t.task && r.policy == p.name() && r.llc_size_bytes == *size);
                let cell = r.map_or("-".to_string(), |r| {
                    format!(
                        "{:.0} ({})",
                        r.cs_misses_exact_per_schedule,
                        pct(r.estimation_error_pct.map(|e| e / 100.0))
                    )
                });
                let _ = write!(out, " {cell:>17}");
            }
        }
        out.push('\n');
    }
    out
}

/// `fig3_slowdown.svg`, `fig6a_ipc.svg`, `fig6b_slices.svg`, `fig8_latency.svg`,
/// `fig9_error.svg` and `cs_misses_llc.svg` in `dir`.
pub fn plots(dir: &Path, tasks: &[TaskRecord], sweep: &[SweepRecord], s: &SummaryRecord) -> Result<()> {
    let names: Vec<String> = tasks.iter().map(|r| r.task.clone()).collect();
    let fig3: Vec<plot::Series> = tasks
        .iter()
        .map(|r| plot::Series {
            name: r.task.clone(),
            points: r.uniform.iter().map(|p| (p.slice_ms, p.cpi_over_uts_10)).collect(),
        })
        .collect();
    plot::line_chart(
        &dir.join("fig3_slowdown.svg"),
        &plot::LineChart {
            title: "Slowdown as the uniform slice shrinks (Fig. 3)",
            x_label: "uniform time slice (ms)",
            y_label: "CPI / CPI(UTS-10)",
            log_x: false,
            log_y: false,
            markers: vec![],
        },
        &fig3,
    )?;
    plot::bar_chart(
        &dir.join("fig6a_ipc.svg"),
        &plot::BarChart {
            title: "IPC normalised to UTS-2.5 (Fig. 6a)",
            y_label: "IPC / IPC(UTS-2.5)",
            categories: names.clone(),
            series: vec![
                ("UTS-10".into(), tasks.iter().map(|r| r.uts_10_over_uts_2_5).collect()),
                ("ETS".into(), tasks.iter().map(|r| r.ets_over_uts_2_5).collect()),
            ],
            reference: Some(1.0),
        },
    )?;
    let share = |f: fn(&TaskRecord) -> usize| -> Vec<f64> {
        tasks.iter().map(|r| 100.0 * f(r) as f64 / r.schedules_ets.max(1) as f64).collect()
    };
    plot::bar_chart(
        &dir.join("fig6b_slices.svg"),
        &plot::BarChart {
            title: "Slices given by ETS (Fig. 6b)",
            y_label: "share of schedules (%)",
            categories: names.clone(),
            series: vec![
                ("2.5 ms".into(), share(|r| r.slices_2_5ms)),
                ("5 ms".into(), share(|r| r.slices_5ms)),
                ("7.5 ms".into(), share(|r| r.slices_7_5ms)),
                ("10 ms".into(), share(|r| r.slices_10ms)),
            ],
            reference: None,
        },
    )?;
    plot::bar_chart(
        &dir.join("fig8_latency.svg"),
        &plot::BarChart {
            title: "Latency between schedules of a co-runner (Fig. 8)",
            y_label: "latency (ms)",
            categories: names.clone(),
            series: vec![
                ("UTS-2.5".into(), tasks.iter().map(|r| ms(r.cosched_latency_ns_mean_uts_2_5)).collect()),
                ("ETS mean".into(), tasks.iter().map(|r| ms(r.cosched_latency_ns_mean_ets)).collect()),
                ("ETS std".into(), tasks.iter().map(|r| ms(r.cosched_latency_ns_std_ets)).collect()),
                ("UTS-10".into(), tasks.iter().map(|r| ms(r.cosched_latency_ns_mean_uts_10)).collect()),
            ],
            reference: None,
        },
    )?;
    plot_errors(dir, tasks, sweep, s, names)
}

/// Fig. 9 and the CS misses by LLC size.
fn plot_errors(
    dir: &Path,
    tasks: &[TaskRecord],
    sweep: &[SweepRecord],
    s: &SummaryRecord,
    names: Vec<String>,
) -> Result<()> {
    let mut error_series = vec![(
        format!("{} {} (main run)", s.policy, format_size(s.llc_size_bytes)),
        tasks.iter().map(|r| r.estimation_error_pct.unwrap_or(f64::NAN)).collect::<Vec<f64>>(),
    )];
    if !sweep.is_empty() {
        for p in PolicyKind::ALL {
            error_series.push((
                format!("{} 4m", p.name()),
                tasks
                    .iter()
                    .map(|t| {
                        sweep
                            .iter()
                            .find(|r| r.task == t.task && r.policy == p.name() && r.llc_size_bytes == 4 << 20)
                            .and_then(|r| r.estimation_error_pct)
                            .unwrap_or(f64::NAN)
                    })
                    .collect(),
            ));
        }
    }
    plot::bar_chart(
        &dir.join("fig9_error.svg"),
        &plot::BarChart {
            title: "CS-miss estimation error, 1/16 sampled ATD vs exact (Fig. 9)",
            y_label: "error (%)",
            categories: names,
            series: error_series,
            reference: Some(5.0),
        },
    )?;
    if !sweep.is_empty() {
        let series: Vec<plot::Series> = PolicyKind::ALL
            .iter()
            .map(|p| {
                let mut sizes: Vec<u64> = sweep.iter().map(|r| r.llc_size_bytes).collect();
                sizes.sort();
                sizes.dedup();
                plot::Series {
                    name: format!("{} (all tasks)", p.name()),
                    points: sizes
                        .iter()
                        .map(|&size| {
                            let total: f64 = sweep
                                .iter()
                                .filter(|r| r.policy == p.name() && r.llc_size_bytes == size)
                                .map(|r| r.cs_misses_exact_per_schedule)
                                .sum();
                            ((size >> 20) as f64, total)
                        })
                        .collect(),
                }
            })
            .collect();
        plot::line_chart(
            &dir.join("cs_misses_llc.svg"),
            &plot::LineChart {
                title: "CS misses per schedule vs LLC size and policy (Sec. VI)",
                x_label: "LLC size (MiB)",
                y_label: "CS misses per schedule, summed over tasks",
                log_x: true,
                log_y: false,
                markers: vec![],
            },
            &series,
        )?;
    }
    Ok(())
}

/// `smartcon ets shared`'s tables: one row per sharer and partition (Fig. 9), then the mean
/// error per partition.
pub fn shared_tables(records: &[SharedRecord], summaries: &[SharedSummaryRecord], threads: usize) -> String {
    let mut out = String::new();
    let Some(first) = records.first() else { return out };
    let _ = writeln!(
        out,
        "Shared LLC (Fig. 9): {} {}-way LRU shared by the tasks of each group, {} ms slices on every core, {} threads",
        format_size(first.llc_size_bytes),
        first.llc_ways,
        first.slice_ms,
        threads
    );
    out.push('\n');
    let _ = writeln!(
        out,
        "partition sharer        with               IPC  schedules   LLC misses     CS exact  CS estimate    CS excess divergent    error"
    );
    for r in records {
        let _ = writeln!(
            out,
            "{:<9} {:<13} {:<13} {:>8.4} {:>10} {:>12} {:>12} {:>12} {:>12} {:>9} {:>8}",
            r.partition,
            r.task,
            r.sharing_with.join("+"),
            r.ipc,
            r.schedules,
            r.llc_misses,
            r.cs_misses_exact,
            r.cs_misses_estimated,
            r.cs_misses_excess,
            r.divergent_schedules,
            pct(r.estimation_error_pct.map(|e| e / 100.0))
        );
    }
    out.push('\n');
    for s in summaries {
        let _ = writeln!(
            out,
            "{}: estimation error mean {} (max {}) over {} of {} sharers with CS misses, {} within 5%",
            s.partition,
            pct(s.estimation_error_pct_mean.map(|e| e / 100.0)),
            pct(s.estimation_error_pct_max.map(|e| e / 100.0)),
            s.estimation_sharers,
            s.sharers,
            s.sharers_within_5pct
        );
    }
    if let Some(s) = summaries.first() {
        let _ = writeln!(out, "wall time {:.1} s", s.wall_ns as f64 / 1e9);
    }
    out
}

/// `fig9_shared_error.svg`: the error per sharer, one series per partition.
pub fn shared_plot(dir: &Path, records: &[SharedRecord]) -> Result<()> {
    let mut partitions: Vec<&str> = records.iter().map(|r| r.partition).collect();
    partitions.dedup();
    let label = |r: &SharedRecord| format!("{} (+{})", r.task, r.sharing_with.join("+"));
    let mut categories: Vec<String> = Vec::new();
    for r in records {
        if !categories.contains(&label(r)) {
            categories.push(label(r));
        }
    }
    let series = partitions
        .iter()
        .map(|p| {
            let values = categories
                .iter()
                .map(|c| {
                    records
                        .iter()
                        .find(|r| r.partition == *p && label(r) == *c)
                        .and_then(|r| r.estimation_error_pct)
                        .unwrap_or(f64::NAN)
                })
                .collect();
            (format!("{p} partition"), values)
        })
        .collect();
    plot::bar_chart(
        &dir.join("fig9_shared_error.svg"),
        &plot::BarChart {
            title: "CS-miss estimation error per sharer, 2 cores sharing the LLC (Fig. 9)",
            y_label: "error (%)",
            categories,
            series,
            reference: Some(5.0),
        },
    )?;
    Ok(())
}

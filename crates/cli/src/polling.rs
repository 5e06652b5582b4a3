//! Reports of the polling strategies (issue 6), shared by `bench` and `evaluate`: the
//! interval sweep of fixed-interval polling (paper 002, Fig. 1) and its best interval, the
//! check of hybrid against spin and block, and the small study `evaluate` runs with them,
//! which also runs `merge-bench`'s configurations (temporal merge, serialized or pipelined
//! post-I/O processing, Fig. 4) on 16 threads.

use anyhow::Result;
use smartcon_engine::decision::Strategy;
use smartcon_engine::devemu::units::{format_ns, format_size};
use smartcon_engine::job::{run_job, JobSpec, Pattern, StrategyChoice};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::{online_cpus, Profile};
use smartcon_engine::stats::JobResult;
use smartcon_engine::target::{self, OpenOptions, Target};
use smartcon_engine::wait::PollParams;
use smartcon_engine::Op;
use smartcon_workloads::load::CpuLoad;

use smartcon_engine::devemu::parse_spec;
use smartcon_workloads::merge::job::{run_merge_job, MergeJobSpec};
use smartcon_workloads::merge::{MergeConfig, MergeDevice, Polling};

use crate::cmd::bench::find;
use crate::cmd::merge_bench::{draw as draw_merge, ratios, MergeRecord, Row};
use crate::common::{interrupt_flag, interrupted};
use crate::engine_setup::engine_err;
use crate::plot::{bar_chart, line_chart, BarChart, LineChart, Series};
use crate::table::Table;

/// The best fixed polling interval of one cell (`--sweep-interval`).
#[derive(serde::Serialize)]
pub struct SweepRecord {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub target: String,
    pub op: &'static str,
    pub bs_bytes: u64,
    /// (interval, mean latency) per interval run.
    pub points_ns: Vec<(u64, f64)>,
    pub best_interval_ns: u64,
    pub best_lat_ns_mean: f64,
    pub block_lat_ns_mean: Option<f64>,
    pub spin_lat_ns_mean: Option<f64>,
}

/// Hybrid against spin and block in one cell.
#[derive(serde::Serialize)]
pub struct HybridCheck {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub target: String,
    pub op: &'static str,
    pub bs_bytes: u64,
    pub load: String,
    pub iops_vs_spin: f64,
    pub cpu_vs_spin: f64,
    pub iops_vs_block: Option<f64>,
    pred_err_ns_p50: Option<u64>,
    pub sleeps_per_io: f64,
}

/// The interval sweep of every cell that has fixed-interval runs.
pub fn sweeps(results: &[JobResult]) -> Vec<SweepRecord> {
    let mut out: Vec<SweepRecord> = Vec::new();
    for r in results.iter().filter(|r| r.strategy == "poll") {
        let Some(interval_ns) = r.polling.as_ref().and_then(|p| p.interval_ns) else { continue };
        let rec = match out.iter_mut().find(|s| s.target == r.target && s.op == r.op && s.bs_bytes == r.bs_bytes) {
            Some(rec) => rec,
            None => {
                out.push(SweepRecord {
                    record_type: "interval_sweep",
                    target: r.target.clone(),
                    op: r.op,
                    bs_bytes: r.bs_bytes,
                    points_ns: Vec::new(),
                    best_interval_ns: interval_ns,
                    best_lat_ns_mean: f64::INFINITY,
                    block_lat_ns_mean: find(results, r, "block").map(|b| b.lat_ns_mean),
                    spin_lat_ns_mean: find(results, r, "spin").map(|b| b.lat_ns_mean),
                });
                out.last_mut().expect("just pushed")
            }
        };
        rec.points_ns.push((interval_ns, r.lat_ns_mean));
        if r.lat_ns_mean < rec.best_lat_ns_mean {
            rec.best_lat_ns_mean = r.lat_ns_mean;
            rec.best_interval_ns = interval_ns;
        }
    }
    for rec in &mut out {
        rec.points_ns.sort_by_key(|p| p.0);
    }
    out
}

pub fn hybrid_checks(results: &[JobResult], load: &str) -> Vec<HybridCheck> {
    results
        .iter()
        .filter(|r| r.strategy == "hybrid")
        .filter_map(|h| {
            let spin = find(results, h, "spin")?;
            let cpu = |r: &JobResult| r.cpu_user_pct + r.cpu_sys_pct;
            Some(HybridCheck {
                record_type: "hybrid_check",
                target: h.target.clone(),
                op: h.op,
                bs_bytes: h.bs_bytes,
                load: load.to_string(),
                iops_vs_spin: h.iops / spin.iops.max(1e-9),
                cpu_vs_spin: cpu(h) / cpu(spin).max(1e-9),
                iops_vs_block: find(results, h, "block").map(|b| h.iops / b.iops.max(1e-9)),
                pred_err_ns_p50: h.polling.as_ref().and_then(|p| p.pred_err_ns_p50),
                sleeps_per_io: h.polling.as_ref().map_or(0.0, |p| p.sleeps_per_io),
            })
        })
        .collect()
}

pub fn render_polling(sweeps: &[SweepRecord], checks: &[HybridCheck]) -> String {
    let mut out = String::new();
    for s in sweeps {
        let reference = |v: Option<f64>| v.map_or("-".to_string(), format_ns);
        out += &format!(
            "\nfixed-interval polling, {} {} {}: mean latency by interval (block {}, spin {})\n",
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
        for (name, v) in
            [("block (interrupt-like sleep)", s.block_lat_ns_mean), ("spin (back-to-back polls)", s.spin_lat_ns_mean)]
        {
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

/// What `evaluate` measures of the polling strategies: per target and load, block, spin and
/// the polling strategies on 4 KiB random reads with one thread, and the interval sweep on
/// a device whose status polls cost channel time.
#[derive(Debug, Clone)]
pub struct StudyPlan {
    pub targets: Vec<String>,
    pub loads: Vec<&'static str>,
    pub strategies: Vec<StrategyChoice>,
    pub sweep_target: String,
    pub intervals_ns: Vec<u64>,
    pub duration_ns: u64,
    pub poll: PollParams,
    /// The temporal-merge part: its device, threads and ops (random 4 KiB).
    pub merge_target: String,
    pub merge_threads: u32,
    pub merge_ops: Vec<Op>,
}

impl StudyPlan {
    /// The study for `evaluate`'s default, `--quick` and `--tiny` matrices.
    pub fn for_evaluate(tiny: bool, duration_ns: u64) -> StudyPlan {
        let names = ["block", "spin", "hybrid", "poll", "half-mean"];
        let (targets, intervals_ns): (Vec<String>, Vec<u64>) = if tiny {
            (vec!["emu:optane,size=16m".into()], vec![500, 2_000])
        } else {
            (
                vec!["emu:optane,size=64m".into(), "emu:nvme,size=64m".into()],
                vec![250, 500, 1_000, 2_000, 4_000, 8_000, 16_000],
            )
        };
        let sweep_target = format!("emu:optane,size=16m,poll_cost={SWEEP_POLL_COST_NS}ns");
        StudyPlan {
            targets,
            loads: vec!["bm-only", "cpu-intensive"],
            strategies: names.iter().map(|n| StrategyChoice::parse(n).expect("known strategy")).collect(),
            sweep_target,
            intervals_ns,
            duration_ns,
            // A sampling phase well inside every run, also the tiny ones.
            poll: PollParams {
                sampling_ns: (duration_ns / 4).min(PollParams::DEFAULT.sampling_ns),
                ..PollParams::DEFAULT
            },
            merge_target: if tiny {
                "emu:optane,channels=1,size=16m".into()
            } else {
                "emu:optane,channels=1,size=64m".into()
            },
            merge_threads: if tiny { 4 } else { 16 },
            merge_ops: vec![Op::Read, Op::Write],
        }
    }

    /// merge off (the reference), then {fixed, dynamic} x {serialized, pipelined}.
    fn merge_configs(&self) -> Vec<MergeConfig> {
        let mut configs = vec![MergeConfig::new(false, false, Polling::Fixed)];
        for polling in [Polling::Fixed, Polling::Dynamic] {
            for pipelined in [false, true] {
                configs.push(MergeConfig::new(true, pipelined, polling));
            }
        }
        for c in &mut configs {
            c.poll = self.poll;
        }
        configs
    }

    pub fn runs(&self) -> usize {
        self.targets.len() * self.loads.len() * self.strategies.len()
            + self.intervals_ns.len()
            + 2
            + self.merge_ops.len() * self.merge_configs().len()
    }
}

/// The channel time of one status poll in the sweep's device: a PCIe register read of the
/// paper's DRAM SSD takes on the order of a few hundred ns.
pub const SWEEP_POLL_COST_NS: u64 = 200;
/// How long a load runs before a run is measured: more than the System Monitor's window.
const SETTLE_NS: u64 = 250_000_000;

/// One run of the study.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StudyRun {
    #[serde(flatten)]
    pub result: JobResult,
    pub load: &'static str,
    pub workload: &'static str,
}

pub struct Study {
    pub runs: Vec<StudyRun>,
    pub sweeps: Vec<SweepRecord>,
    pub checks: Vec<HybridCheck>,
    pub merge_target: String,
    pub merge_threads: u32,
    pub merge_rows: Vec<Row>,
    pub merge_configs: Vec<MergeConfig>,
}

impl Study {
    /// The merge part as `merge_result` records (docs/merge.md) with `load` and `workload`.
    pub fn merge_records(&self) -> Vec<serde_json::Value> {
        self.merge_rows
            .iter()
            .map(|r| {
                let rec =
                    MergeRecord::new(&self.merge_target, r.op, r.pattern, self.merge_threads, &r.config, 0, &r.result);
                let mut v = serde_json::to_value(&rec).expect("a record serializes");
                v["load"] = "bm-only".into();
                v["workload"] = "merge-study".into();
                v
            })
            .collect()
    }
}

/// Runs the study; `progress` is told what runs next. Stops early (with what it has) when
/// the run is interrupted.
pub fn run_study(plan: &StudyPlan, monitor: &SystemMonitor, mut progress: impl FnMut(&str)) -> Result<Study> {
    let mut runs = Vec::new();
    let one =
        |target: &dyn Target, profile: &Profile, strategy: StrategyChoice, poll: PollParams| -> Result<JobResult> {
            let mut js = JobSpec::new(Op::Read, Pattern::Rand, 4096, strategy);
            js.duration_ns = plan.duration_ns;
            js.poll = poll;
            run_job(target, &js, profile, monitor, interrupt_flag()).map_err(engine_err)
        };
    let open = |t: &str| -> Result<(Box<dyn Target>, Profile)> {
        let target =
            target::open(&target::parse_target(t).map_err(engine_err)?, OpenOptions::default()).map_err(engine_err)?;
        let profile = target.builtin_profile().unwrap_or_else(|| Profile::paper_default(&target.device_id()));
        Ok((target, profile))
    };
    'loads: for &load in &plan.loads {
        let cpu = if load == "cpu-intensive" {
            let l = CpuLoad::start(online_cpus()).map_err(engine_err)?;
            std::thread::sleep(std::time::Duration::from_nanos(SETTLE_NS));
            Some(l)
        } else {
            None
        };
        for t in &plan.targets {
            let (target, profile) = open(t)?;
            for &s in &plan.strategies {
                if interrupted() {
                    break 'loads;
                }
                progress(&format!("polling study: {t} {load} {}", s.name()));
                runs.push(StudyRun {
                    result: one(target.as_ref(), &profile, s, plan.poll)?,
                    load,
                    workload: "polling-study",
                });
            }
        }
        drop(cpu);
    }
    let (target, profile) = open(&plan.sweep_target)?;
    let mut sweep_runs = Vec::new();
    let configs =
        [StrategyChoice::parse("block"), StrategyChoice::parse("spin")].into_iter().flatten().map(|s| (s, plan.poll));
    let polls = plan
        .intervals_ns
        .iter()
        .map(|&i| (StrategyChoice::Fixed(Strategy::FixedPoll), PollParams { interval_ns: i, ..plan.poll }));
    for (s, poll) in configs.chain(polls) {
        if interrupted() {
            break;
        }
        progress(&format!(
            "polling study: {} {} every {}",
            plan.sweep_target,
            s.name(),
            format_ns(poll.interval_ns as f64)
        ));
        sweep_runs.push(one(target.as_ref(), &profile, s, poll)?);
    }
    let mut checks = Vec::new();
    for load in &plan.loads {
        let of_load: Vec<JobResult> = runs.iter().filter(|r| r.load == *load).map(|r| r.result.clone()).collect();
        checks.extend(hybrid_checks(&of_load, load));
    }
    let sweeps = sweeps(&sweep_runs);
    runs.extend(sweep_runs.into_iter().map(|result| StudyRun {
        result,
        load: "bm-only",
        workload: "poll-interval-sweep",
    }));
    let spec = parse_spec(&plan.merge_target).map_err(anyhow::Error::msg)?;
    let merge_configs = plan.merge_configs();
    let mut merge_rows = Vec::new();
    'merge: for &op in &plan.merge_ops {
        for c in &merge_configs {
            if interrupted() {
                break 'merge;
            }
            progress(&format!("merge study: {} {} {}", plan.merge_target, op.name(), c.label()));
            let dev = MergeDevice::new(&spec, *c).map_err(engine_err)?;
            let job = MergeJobSpec {
                op,
                pattern: Pattern::Rand,
                threads: plan.merge_threads,
                duration_ns: plan.duration_ns,
                ios_per_thread_max: None,
                span_bytes: dev.capacity_bytes(),
                prefill: true,
                seed: 1,
            };
            let result = run_merge_job(&dev, &job, interrupt_flag()).map_err(engine_err)?;
            merge_rows.push(Row { op, pattern: Pattern::Rand, config: *c, result });
        }
    }
    Ok(Study {
        runs,
        sweeps,
        checks,
        merge_target: plan.merge_target.clone(),
        merge_threads: plan.merge_threads,
        merge_rows,
        merge_configs,
    })
}

/// The study's part of summary.md: the table, the numbers with pass/miss, and why.
pub fn study_md(study: &Study) -> String {
    let mut md = String::from("\n## Hybrid waiting and polling (issue 6)\n\n");
    md += "4 KiB random reads, one thread, per emulated device and load. `hybrid` = dynamic interval polling \
           (sampling phase, then sleep until the predicted completion less the measured wake-up overshoot, \
           then polls every alpha); `poll` = fixed interval; `half-mean` = Linux's removed hybrid polling. \
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
    for r in study.runs.iter().filter(|r| r.workload == "polling-study") {
        let of_load: Vec<JobResult> = study
            .runs
            .iter()
            .filter(|x| x.load == r.load && x.workload == r.workload)
            .map(|x| x.result.clone())
            .collect();
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
    md += &t.render();
    md += "\nThe issue's numbers:\n\n";
    for c in &study.checks {
        let cell = format!("{} ({})", c.target, c.load);
        if c.load == "bm-only" {
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
        md += &t.render();
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

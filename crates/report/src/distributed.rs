//! `smartcon report RESULTS.jsonl`: the summary, plots and page of a results file written
//! by a study that ran beyond one machine (python/smartcon_ray) or serially with `--out`.
//! The records are read back from JSON Lines, so the renderers here take JSON values, not
//! the libraries' typed records: the same file renders the same way whichever path (one
//! machine or a Ray cluster) wrote it.
//!
//! What it renders: `replay_result` records (one row per point, and mean latency against
//! channels per device when the points sweep channels), `fleet_host` records (a table per
//! host and one row per host side by side), the driver's `ray_run` record (where and how
//! long) and its `point_failed` records (the points that did not finish, by name).
//!
//! Non-goals: judging; the records already carry what the studies judged.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::plot::{line_chart, LineChart, Series};
use crate::Result;

/// What a results file holds, by record type, in file order.
#[derive(Debug, Default)]
pub struct Records {
    pub replays: Vec<Value>,
    pub fleet_hosts: Vec<Value>,
    pub failed: Vec<Value>,
    pub runs: Vec<Value>,
    /// `emulate_sweep_point` records: the runs of `emulate sweep`, assembled here.
    pub sweep_runs: Vec<smartcon_emulate::sweep::SweepRun>,
    /// Records of other types, by type: counted, not rendered.
    pub other: BTreeMap<String, usize>,
}

impl Records {
    /// Sorts parsed records by type.
    pub fn of(values: Vec<Value>) -> Records {
        let mut r = Records::default();
        for v in values {
            match v["type"].as_str().unwrap_or("") {
                "replay_result" => r.replays.push(v),
                "fleet_host" => r.fleet_hosts.push(v),
                "point_failed" => r.failed.push(v),
                "ray_run" => r.runs.push(v),
                "emulate_sweep_point" => match sweep_run(&v) {
                    Some(run) => r.sweep_runs.push(run),
                    None => *r.other.entry("malformed emulate_sweep_point".into()).or_default() += 1,
                },
                // Where each point ran: the ray_run line sums them up.
                "ray_point" => {}
                other => *r.other.entry(other.to_string()).or_default() += 1,
            }
        }
        r
    }

    /// Records the report renders.
    pub fn rendered(&self) -> usize {
        self.replays.len() + self.fleet_hosts.len() + self.failed.len() + self.runs.len() + self.sweep_runs.len()
    }
}

/// An `emulate_sweep_point` record read back.
fn sweep_run(v: &Value) -> Option<smartcon_emulate::sweep::SweepRun> {
    let t = &v["totals"];
    let u = |x: &Value| x.as_u64();
    Some(smartcon_emulate::sweep::SweepRun {
        kind: "emulate_sweep_point",
        device: v["device"].as_str()?.to_string(),
        command: v["command"].as_array()?.iter().filter_map(|c| c.as_str().map(String::from)).collect(),
        speedup: v["speedup"].as_f64()?,
        virtual_time: v["virtual_time"].as_bool()?,
        base_only: v["base_only"].as_bool()?,
        wall_ns: u(&v["wall_ns"])?,
        totals: smartcon_emulate::sweep::EmuTotals {
            processes: u(&t["processes"])?,
            reads: u(&t["reads"])?,
            writes: u(&t["writes"])?,
            bytes: u(&t["bytes"])?,
            device_ns: u(&t["device_ns"])?,
            skew_ns: t["skew_ns"].as_i64()?,
            cpu_ns: u(&t["cpu_ns"])?,
            image_opens: u(&t["image_opens"])?,
            around_model: t["around_model"]
                .as_object()?
                .iter()
                .map(|(k, n)| Some((k.clone(), n.as_u64()?)))
                .collect::<Option<_>>()?,
            // A sweep's runs take no strategy: their waits are the reference one.
            ..Default::default()
        },
    })
}

fn f(v: &Value, key: &str) -> Option<f64> {
    v[key].as_f64()
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("?")
}

fn us(ns: Option<f64>) -> String {
    ns.map_or("-".into(), |ns| format!("{:.1} us", ns / 1000.0))
}

fn bytes(b: Option<f64>) -> String {
    match b {
        None => "-".into(),
        Some(b) if b >= 1048576.0 && b % 1048576.0 == 0.0 => format!("{} MiB", b / 1048576.0),
        Some(b) if b >= 1024.0 && b % 1024.0 == 0.0 => format!("{} KiB", b / 1024.0),
        Some(b) => format!("{b} B"),
    }
}

/// The value of `key=` in a device spec, e.g. 4 for `emu:nvme,channels=4`.
fn spec_key(spec: &str, key: &str) -> Option<f64> {
    spec.split(',').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// The spec without `key=...`.
fn spec_without(spec: &str, key: &str) -> String {
    spec.split(',').filter(|kv| !kv.starts_with(&format!("{key}="))).collect::<Vec<_>>().join(",")
}

/// The summary (markdown). With `dir`, the plots are written there too; returns the summary
/// and the number of plots written.
pub fn summary_md(r: &Records, dir: Option<&Path>) -> Result<(String, usize)> {
    let mut md = String::from("# smartcon report\n\n");
    let mut plots = 0;
    for run in &r.runs {
        md += &format!(
            "Ran {} on the Ray cluster at {} ({} node(s) at the start, {} ran points): {} of {} points done, {} failed or lost; {:.1} s of wall time, {:.1} s in smartcon summed over the tasks.\n\n",
            s(run, "kind"),
            s(run, "address"),
            run["nodes"].as_u64().unwrap_or(0),
            run["nodes_used"].as_u64().unwrap_or(0),
            run["done"].as_u64().unwrap_or(0),
            run["points"].as_u64().unwrap_or(0),
            run["failed"].as_u64().unwrap_or(0),
            f(run, "wall_ns").unwrap_or(0.0) / 1e9,
            f(run, "task_wall_ns_sum").unwrap_or(0.0) / 1e9
        );
    }
    if !r.replays.is_empty() {
        md += &replays_md(&r.replays);
        if let Some(dir) = dir {
            plots += replay_plots(&r.replays, dir)?;
        }
    }
    if !r.sweep_runs.is_empty() {
        let sweep = smartcon_emulate::sweep::assemble(&r.sweep_runs)?;
        md += &format!(
            "## The program at each device speed: {} ({} runs)\n\n`{}`\n\n",
            sweep.device,
            r.sweep_runs.len(),
            sweep.command.join(" ")
        );
        md += &smartcon_emulate::sweep::table(&sweep);
        md += "\n";
        if let Some(dir) = dir {
            smartcon_emulate::sweep::plot_svg(&sweep, &dir.join("sweep-speedup.svg"))?;
            plots += 1;
        }
    }
    if !r.fleet_hosts.is_empty() {
        md += &fleet_md(&r.fleet_hosts);
    }
    if !r.failed.is_empty() {
        md += &format!("## Points not done ({})\n\n", r.failed.len());
        for p in &r.failed {
            md += &format!("- `{}` ({}): {}\n", s(p, "point"), s(p, "node"), s(p, "reason"));
        }
        md += "\n";
    }
    if !r.other.is_empty() {
        let list: Vec<String> = r.other.iter().map(|(t, n)| format!("{n} {t}")).collect();
        md += &format!("Records not rendered here: {}.\n", list.join(", "));
    }
    Ok((md, plots))
}

fn replays_md(replays: &[Value]) -> String {
    let mut md = format!(
        "## Replays ({} points, virtual time)\n\n| device | workload | I/Os | mean | p50 | p99 | IOPS | MB/s | device utilization |\n|---|---|---|---|---|---|---|---|---|\n",
        replays.len()
    );
    for v in replays {
        md += &format!(
            "| {} | {} | {} | {} | {} | {} | {:.0} | {:.1} | {:.1}% |\n",
            s(v, "device"),
            s(v, "workload"),
            v["ios"].as_u64().unwrap_or(0),
            us(f(v, "lat_ns_mean")),
            us(f(v, "lat_ns_p50")),
            us(f(v, "lat_ns_p99")),
            f(v, "iops").unwrap_or(0.0),
            f(v, "throughput_bytes_per_s").unwrap_or(0.0) / 1e6,
            f(v, "device_utilization").unwrap_or(0.0) * 100.0
        );
    }
    md + "\n"
}

/// Mean latency against channels, one curve per device and workload, when at least one of
/// them was run at two or more channel counts.
fn replay_plots(replays: &[Value], dir: &Path) -> Result<usize> {
    let mut curves: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for v in replays {
        let device = s(v, "device");
        if let (Some(ch), Some(mean)) = (spec_key(device, "channels"), f(v, "lat_ns_mean")) {
            let name = format!("{} {}", spec_without(device, "channels"), s(v, "workload"));
            curves.entry(name).or_default().push((ch, mean / 1000.0));
        }
    }
    if !curves.values().any(|p| p.len() >= 2) {
        return Ok(0);
    }
    let series: Vec<Series> = curves
        .into_iter()
        .map(|(name, mut points)| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series { name, points }
        })
        .collect();
    let chart = LineChart {
        title: "Mean latency against channels (virtual time)",
        x_label: "channels",
        y_label: "mean latency (us)",
        log_x: true,
        log_y: true,
        markers: Vec::new(),
    };
    line_chart(&dir.join("replay-channels.svg"), &chart, &series)?;
    Ok(1)
}

fn fleet_md(hosts: &[Value]) -> String {
    let share = |h: &Value| match f(h, "pareto_share") {
        Some(x) => format!(
            "{:.0}% ({} of {})",
            x * 100.0,
            h["pareto_front"].as_u64().unwrap_or(0),
            h["pareto_judged"].as_u64().unwrap_or(0)
        ),
        None => "- (no cell judged)".into(),
    };
    let gain = |h: &Value, k: &str| f(h, k).map_or("- (no local-disk 4 KiB cell)".into(), |g| format!("{g:.2} x"));
    let mut md = format!(
        "## Fleet ({} hosts)\n\n| host | node | blocking wait CPU | wake-up overshoot p50 | smart on the Pareto front | local disk 4 KiB: spin / smart over block |\n|---|---|---|---|---|---|\n",
        hosts.len()
    );
    for h in hosts {
        md += &format!(
            "| {} | {} | {} | {} | {} | {} / {} |\n",
            s(h, "host"),
            short_id(s(h, "node_id")),
            us(f(h, "block_cpu_ns")),
            us(f(h, "wakeup_overshoot_ns_p50")),
            share(h),
            gain(h, "local_disk_4k_spin_gain"),
            gain(h, "local_disk_4k_smart_gain")
        );
    }
    md += "\n";
    for h in hosts {
        md += &format!("### {} (Ray node {})\n\n| figure | value |\n|---|---|\n", s(h, "host"), s(h, "node_id"));
        let rows = [
            ("kernel, CPUs", format!("{}, {}", s(h, "kernel"), h["cpus"].as_u64().unwrap_or(0))),
            ("blocking wait: CPU of the waiting thread", us(f(h, "block_cpu_ns"))),
            ("spinning wait: CPU beyond the device time", us(f(h, "spin_overhead_ns"))),
            (
                "wake-up: a timed sleep wakes late by (p50 / p99)",
                format!(
                    "{} / {} (sleeps of {})",
                    us(f(h, "wakeup_overshoot_ns_p50")),
                    us(f(h, "wakeup_overshoot_ns_p99")),
                    us(f(h, "sleep_asked_ns"))
                ),
            ),
            ("smart on the Pareto front (paired, single-thread cells)", share(h)),
            ("local disk, 4 KiB random reads: spin over block", gain(h, "local_disk_4k_spin_gain")),
            ("local disk, 4 KiB random reads: smart over block", gain(h, "local_disk_4k_smart_gain")),
            (
                "evaluate",
                format!(
                    "{} cells in {:.0} s",
                    h["cells"].as_u64().unwrap_or(0),
                    f(h, "evaluate_ns").unwrap_or(0.0) / 1e9
                ),
            ),
        ];
        for (k, v) in rows {
            md += &format!("| {k} | {v} |\n");
        }
        md += "\n| target | thresholds from | class | size threshold | Q | CPU threshold | spin cheaper up to |\n|---|---|---|---|---|---|---|\n";
        for t in h["thresholds"].as_array().into_iter().flatten() {
            md += &format!(
                "| {} | {} | {} | {} | {} | {}% | {} |\n",
                s(t, "target"),
                s(t, "source"),
                s(t, "class"),
                bytes(f(t, "size_threshold_bytes")),
                t["queue_limit"].as_u64().unwrap_or(0),
                t["cpu_threshold_pct"].as_u64().unwrap_or(0),
                bytes(f(t, "spin_cheaper_bytes_max"))
            );
        }
        md += "\n";
    }
    md
}

fn short_id(id: &str) -> &str {
    &id[..id.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(lines: &str) -> Records {
        Records::of(lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect())
    }

    #[test]
    fn a_fleet_has_one_table_per_host_and_a_row_per_host() {
        let r = parse(concat!(
            r#"{"type":"fleet_host","node_id":"aaaa","host":"h1","block_cpu_ns":9700.0,"wakeup_overshoot_ns_p50":50000,"pareto_judged":4,"pareto_front":3,"pareto_share":0.75,"thresholds":[{"target":"emu:optane","size_threshold_bytes":2097152}]}"#,
            "\n",
            r#"{"type":"fleet_host","node_id":"bbbb","host":"h2","pareto_judged":0,"pareto_front":0,"thresholds":[]}"#,
            "\n",
            r#"{"type":"point_failed","point":"h3","node":"cccc","reason":"node died"}"#,
            "\n"
        ));
        let (md, plots) = summary_md(&r, None).unwrap();
        assert_eq!(plots, 0);
        assert_eq!(md.matches("### ").count(), 2, "{md}");
        assert!(md.contains("### h1 (Ray node aaaa)") && md.contains("### h2 (Ray node bbbb)"), "{md}");
        assert!(md.contains("75% (3 of 4)") && md.contains("9.7 us") && md.contains("2 MiB"), "{md}");
        assert!(md.contains("- (no cell judged)"), "{md}");
        assert!(md.contains("`h3` (cccc): node died"), "{md}");
    }

    #[test]
    fn channels_are_read_from_the_spec() {
        assert_eq!(spec_key("emu:nvme,channels=4,size=1g", "channels"), Some(4.0));
        assert_eq!(spec_key("emu:nvme", "channels"), None);
        assert_eq!(spec_without("emu:nvme,channels=4,size=1g", "channels"), "emu:nvme,size=1g");
    }
}

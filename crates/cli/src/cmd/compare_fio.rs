//! `smartcon compare-fio TARGET`: fio's matching jobs beside smartcon's strategies, so a
//! user can see that smartcon's numbers agree with the standard tool.
//!
//! The jobs match in everything but the wait: one thread, one I/O in flight, O_DIRECT, the
//! same op, pattern, request size, region and duration. fio runs `psync` (the synchronous
//! system call, the mainstream path) and `io_uring` at iodepth 1 (interrupt-driven
//! completion: smartcon's `block`); smartcon runs `block`, `spin` and `smart`. The runs are
//! sequential, so on a shared machine read the figures as ratios from one run.
//!
//! Non-goals: fio's polled io_uring (`hipri`), which needs NVMe poll queues; emulated
//! targets, which fio cannot drive.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use smartcon_engine::devemu::units::{format_ns, format_size};
use smartcon_engine::job::{run_job, JobSpec, Pattern};
use smartcon_engine::placement::format_cpu_list;
use smartcon_engine::target::{self, OpenOptions, TargetSpec};
use smartcon_engine::Op;

use crate::common::{emit_json, interrupt_flag, interrupted};
use crate::engine_setup::*;
use crate::printers::iops;
use crate::table::Table;

#[derive(Args, Debug)]
pub struct CompareFioArgs {
    /// A file, a block device, or tmp:SIZE[@DIR] (a temporary file smartcon creates and removes).
    pub target: String,
    /// read or write.
    #[arg(long, default_value = "read")]
    pub op: String,
    /// seq or rand.
    #[arg(long, default_value = "rand")]
    pub pattern: String,
    /// Request size.
    #[arg(long, default_value = "4k")]
    pub bs: String,
    /// Time per run.
    #[arg(long, default_value = "2s")]
    pub duration: String,
    /// The region used, from offset 0 (default: the target, at most 1 GiB).
    #[arg(long)]
    pub span: Option<String>,
    /// Allow writing to a file or block device smartcon did not create.
    #[arg(long)]
    pub destructive: bool,
    /// JSON Lines: one "compare_fio" record per run.
    #[arg(long)]
    pub json: bool,
    /// Where both tools' I/O threads run: any, irq (the CPUs that take the device's
    /// completion interrupts), away, or a CPU list; fio gets it as --cpus_allowed.
    #[arg(long, default_value = "any")]
    pub io_cpus: String,
}

#[derive(Debug, Clone, Serialize)]
struct Row {
    #[serde(rename = "type")]
    record_type: &'static str,
    tool: &'static str,
    /// fio's ioengine or smartcon's strategy.
    method: String,
    iops: f64,
    lat_ns_mean: f64,
    lat_ns_p50: f64,
    lat_ns_p99: f64,
    cpu_pct: f64,
    ctx_switches: u64,
}

/// A temporary file for `tmp:`, removed on drop.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn make_temp(size_bytes: u64, dir: Option<&Path>) -> Result<TempFile> {
    let dir = dir.map(Path::to_path_buf).unwrap_or_else(std::env::temp_dir);
    if !dir.is_dir() {
        bail!("{} is not a directory for the temporary file", dir.display());
    }
    let path = dir.join(format!("smartcon-fio-{}.tmp", std::process::id()));
    let guard = TempFile(path.clone());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("create {}", path.display()))?;
    let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
    let mut left = size_bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        std::io::Write::write_all(&mut f, &chunk[..n]).with_context(|| format!("fill {}", path.display()))?;
        left -= n as u64;
    }
    f.sync_all()?;
    Ok(guard)
}

#[allow(clippy::too_many_arguments)]
fn fio_row(
    path: &Path,
    engine: &str,
    op: Op,
    pattern: Pattern,
    bs: u64,
    span: u64,
    duration_ns: u64,
    cpus: Option<&[usize]>,
) -> Result<Row> {
    let rw = match (op, pattern) {
        (Op::Read, Pattern::Rand) => "randread",
        (Op::Read, Pattern::Seq) => "read",
        (Op::Write, Pattern::Rand) => "randwrite",
        (Op::Write, Pattern::Seq) => "write",
    };
    let mut fio = Command::new("fio");
    if let Some(c) = cpus {
        fio.arg(format!("--cpus_allowed={}", format_cpu_list(c)));
    }
    let out = fio
        .arg(format!("--name=smartcon-{engine}"))
        .arg(format!("--filename={}", path.display()))
        .arg(format!("--rw={rw}"))
        .arg(format!("--bs={bs}"))
        .arg(format!("--size={span}"))
        .arg(format!("--ioengine={engine}"))
        .args(["--iodepth=1", "--direct=1", "--numjobs=1", "--time_based", "--randrepeat=0", "--output-format=json"])
        .arg(format!("--runtime={}ms", (duration_ns / 1_000_000).max(1)))
        .output()
        .context("cannot run fio; install it (Debian: apt-get install fio)")?;
    if !out.status.success() {
        bail!("fio --ioengine={engine} failed: {}", String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or(""));
    }
    // fio may print notes before the JSON document.
    let text = String::from_utf8_lossy(&out.stdout);
    let json = &text[text.find('{').context("fio printed no JSON")?..];
    let v: serde_json::Value = serde_json::from_str(json).context("fio's JSON output did not parse")?;
    let job = &v["jobs"][0];
    let side = &job[if op == Op::Read { "read" } else { "write" }];
    let pct = |q: &str| side["clat_ns"]["percentile"][q].as_f64().unwrap_or(f64::NAN);
    Ok(Row {
        record_type: "compare_fio",
        tool: "fio",
        method: engine.to_string(),
        iops: side["iops"].as_f64().unwrap_or(0.0),
        lat_ns_mean: side["lat_ns"]["mean"].as_f64().unwrap_or(f64::NAN),
        lat_ns_p50: pct("50.000000"),
        lat_ns_p99: pct("99.000000"),
        cpu_pct: job["usr_cpu"].as_f64().unwrap_or(0.0) + job["sys_cpu"].as_f64().unwrap_or(0.0),
        ctx_switches: job["ctx"].as_u64().unwrap_or(0),
    })
}

pub fn run(args: CompareFioArgs) -> Result<()> {
    let op = parse_op(&args.op)?;
    let pattern = parse_pattern(&args.pattern)?;
    let bs = parse_size_arg("bs", &args.bs)?;
    let duration_ns = parse_duration_arg("duration", &args.duration)?;
    let tspec = target::parse_target(&args.target).map_err(engine_err)?;
    if Command::new("fio").arg("--version").output().is_err() {
        bail!("fio is not installed; install it (Debian: apt-get install fio) to compare");
    }
    let (path, _temp, owned) = match &tspec {
        TargetSpec::Emu(_) => bail!("fio cannot drive an emulated device; give a file, a block device or tmp:SIZE"),
        TargetSpec::Path(p) => {
            if p.is_dir() {
                bail!("{} is a directory; give a file or a block device, or tmp:SIZE@{}", p.display(), p.display());
            }
            (p.clone(), None, false)
        }
        TargetSpec::Temp { size_bytes, dir } => {
            let t = make_temp(*size_bytes, dir.as_deref())?;
            (t.0.clone(), Some(t), true)
        }
    };
    if op == Op::Write && !owned && !args.destructive {
        bail!(
            "refusing to write to {} (smartcon did not create it); pass --destructive if you mean it",
            path.display()
        );
    }
    let options =
        OpenOptions { write: op == Op::Write, destructive: args.destructive || owned, created_by_tool: false };
    let target = target::open(&TargetSpec::Path(path.clone()), options).map_err(engine_err)?;
    for w in target.warnings() {
        eprintln!("smartcon: warning: {w}");
    }
    let span = match &args.span {
        Some(s) => parse_size_arg("span", s)?,
        None => target.capacity_bytes().min(1 << 30) / bs * bs,
    };
    let mut js = JobSpec::new(op, pattern, bs, parse_strategy("block")?);
    js.span_bytes = Some(span);
    js.duration_ns = duration_ns;
    js.validate(target.as_ref()).map_err(engine_err)?;
    js.cpus = io_cpus_for(&parse_placement(&args.io_cpus)?, target.as_ref());
    let profile = resolve_profile(target.as_ref(), None, false)?;
    let monitor = start_monitor(None)?;
    let mut rows = Vec::new();
    for engine in ["psync", "io_uring"] {
        if interrupted() {
            break;
        }
        rows.push(fio_row(&path, engine, op, pattern, bs, span, duration_ns, js.cpus.as_deref())?);
    }
    for s in ["block", "spin", "smart"] {
        if interrupted() {
            break;
        }
        js.strategy = parse_strategy(s)?;
        let r = run_job(target.as_ref(), &js, &profile, &monitor, interrupt_flag()).map_err(engine_err)?;
        rows.push(Row {
            record_type: "compare_fio",
            tool: "smartcon",
            method: s.to_string(),
            iops: r.iops,
            lat_ns_mean: r.lat_ns_mean,
            lat_ns_p50: r.lat_ns_p50 as f64,
            lat_ns_p99: r.lat_ns_p99 as f64,
            cpu_pct: r.cpu_user_pct + r.cpu_sys_pct,
            ctx_switches: r.ctx_voluntary + r.ctx_involuntary,
        });
    }
    monitor.stop();
    drop(target);
    if args.json {
        for r in &rows {
            emit_json(r)?;
        }
        return Ok(());
    }
    println!(
        "{} {} {} {}, 1 thread, 1 I/O in flight, O_DIRECT, {} over {}",
        args.target,
        op.name(),
        pattern.name(),
        format_size(bs),
        format_ns(duration_ns as f64),
        format_size(span)
    );
    let base = rows.iter().find(|r| r.tool == "fio" && r.method == "io_uring").map(|r| r.iops).unwrap_or(0.0);
    let mut t = Table::new(&["tool", "method", "IOPS", "vs fio io_uring", "mean", "p50", "p99", "CPU", "ctx switches"]);
    for r in &rows {
        t.row(vec![
            r.tool.into(),
            r.method.clone(),
            iops(r.iops),
            if base > 0.0 { format!("{:.2}x", r.iops / base) } else { "-".into() },
            format_ns(r.lat_ns_mean),
            format_ns(r.lat_ns_p50),
            format_ns(r.lat_ns_p99),
            format!("{:.0}%", r.cpu_pct),
            r.ctx_switches.to_string(),
        ]);
    }
    print!("{}", t.render());
    println!("fio io_uring at iodepth 1 waits like smartcon's block; psync is the plain system call. CPU: fio's job usr+sys, smartcon's I/O thread, % of one CPU.");
    Ok(())
}

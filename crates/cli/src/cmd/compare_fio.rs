//! `smartcon compare-fio TARGET`: fio's matching jobs beside smartcon's strategies. The
//! runs and fio's output are `smartcon_study::compare_fio`; this module parses flags,
//! refuses what would be unsafe, and prints the table.
//!
//! Non-goals: fio's polled io_uring (`hipri`), which needs NVMe poll queues; emulated
//! targets, which fio cannot drive.

use anyhow::{bail, Result};
use clap::Args;
use smartcon_emutarget::target::{self, OpenOptions, TargetSpec};
use smartcon_engine::job::{JobSpec, Pattern, StrategyChoice};
use smartcon_engine::placement::Placement;
use smartcon_study::compare_fio::{fio_available, ComparePlan, TempFile};
use smartcon_util::units::{format_ns, format_size};
use smartcon_util::Op;

use crate::common::{emit_json, interrupt_flag};
use crate::engine_setup::*;
use crate::printers::iops;
use crate::table::Table;

#[derive(Args, Debug)]
pub struct CompareFioArgs {
    /// A file, a block device, or tmp:SIZE[@DIR] (a temporary file smartcon creates and removes).
    pub target: String,
    /// read or write.
    #[arg(long, default_value = "read", value_parser = op_value)]
    pub op: Op,
    /// seq or rand.
    #[arg(long, default_value = "rand", value_parser = pattern_value)]
    pub pattern: Pattern,
    /// Request size.
    #[arg(long, default_value = "4k", value_parser = io_size_value)]
    pub bs: u64,
    /// Time per run.
    #[arg(long, default_value = "2s", value_parser = duration_value)]
    pub duration: u64,
    /// The region used, from offset 0 (default: the target, at most 1 GiB).
    #[arg(long, value_parser = device_size_value)]
    pub span: Option<u64>,
    /// Allow writing to a file or block device smartcon did not create.
    #[arg(long)]
    pub destructive: bool,
    /// JSON Lines: one "compare_fio" record per run.
    #[arg(long)]
    pub json: bool,
    /// Where both tools' I/O threads run: any, irq (the CPUs that take the device's
    /// completion interrupts), away, or a CPU list; fio gets it as --cpus_allowed.
    #[arg(long, default_value = "any", value_parser = placement_value)]
    pub io_cpus: Placement,
}

pub fn run(args: CompareFioArgs) -> Result<()> {
    let (op, pattern, bs, duration_ns) = (args.op, args.pattern, args.bs, args.duration);
    let tspec = target::parse_target(&args.target).map_err(engine_err)?;
    if !fio_available() {
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
            let t = TempFile::create(*size_bytes, dir.as_deref()).map_err(engine_err)?;
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
    let span = match args.span {
        Some(s) => s,
        None => target.capacity_bytes().min(1 << 30) / bs * bs,
    };
    let mut js = JobSpec::new(op, pattern, bs, StrategyChoice::Fixed(smartcon_engine::decision::Strategy::Block));
    js.span_bytes = Some(span);
    js.duration_ns = duration_ns;
    js.validate(target.as_ref()).map_err(engine_err)?;
    js.cpus = io_cpus_for(&args.io_cpus, target.as_ref());
    let profile = resolve_profile(target.as_ref(), None, false)?;
    let monitor = start_monitor(None)?;
    let plan = ComparePlan { path: &path, spec: js };
    let rows = smartcon_study::compare_fio::run(&plan, target.as_ref(), &profile, &monitor, interrupt_flag());
    monitor.stop();
    drop(target);
    let rows = rows.map_err(engine_err)?;
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

//! `smartcon emulate replay`: a trace or a closed-loop job on an emulated device, in
//! virtual time (the discrete-event loop skips idle gaps), optionally replayed in real time
//! through the engine to measure how late real completions are. The logic lives in the
//! smartcon-emulate crate; this file parses flags and prints.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use smartcon_emulate::realtime::{self, THREADS_MAX};
use smartcon_emulate::replay::{replay_closed, replay_reader, replay_reader_inline, ClosedLoop, Hooks, VirtualRun};
use smartcon_emulate::trace::{TraceFormat, TraceOptions, TraceReader, REORDER_WINDOW_DEFAULT};
use smartcon_emulate::{replay_result, scenario, ReplayResult};
use smartcon_engine::job::Pattern;
use smartcon_util::units::{format_ns, format_size};

use crate::common::{emit_json, progress_bar};
use crate::engine_setup::{engine_err, parse_duration_arg, parse_op, parse_pattern, parse_size_arg};

#[derive(Args, Debug)]
pub struct EmulateArgs {
    #[command(subcommand)]
    pub command: EmulateCommand,
}

#[derive(Subcommand, Debug)]
pub enum EmulateCommand {
    /// Replay a trace (blkparse, fio iolog, MSR/Alibaba/Tencent CSV, gzip or not) or a closed-loop job on an emulated device.
    Replay(ReplayArgs),
    /// Run a program (default: tar and wc) on the device scaled by each factor, in virtual time.
    Sweep(SweepArgs),
    /// Expose an emulated device to unmodified programs: FUSE file + direct-I/O loop device [+ ext4 at DIR] (root).
    Mount(MountArgs),
    /// End a `mount --detach` at DIR and print its accuracy report.
    Umount {
        #[arg(value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
        dir: std::path::PathBuf,
    },
    /// Remove what killed `emulate mount` and `emulate vm` runs left (only what their records name).
    Cleanup,
    /// Boot a User-Mode Linux guest whose block device is the emulated device, run CMD in it.
    Vm(VmArgs),
}

#[derive(Args, Debug)]
pub struct VmArgs {
    /// emu:PRESET[,key=value...], e.g. emu:hdd or emu:nvme,speedup=10.
    pub spec: String,
    /// Device (and image) size (default: the spec's size=, else 1 GiB).
    #[arg(long)]
    pub size: Option<String>,
    /// ext4: format a new image on the host and mount it at /mnt in the guest; none: /dev/ubda only.
    #[arg(long, default_value = "ext4", value_parser = ["ext4", "none"])]
    pub fs: String,
    /// The guest's I/O scheduler for /dev/ubda (default: the kernel's, mq-deadline).
    #[arg(long, value_parser = ["none", "mq-deadline", "bfq", "kyber"])]
    pub scheduler: Option<String>,
    /// Keep the image at PATH (created and formatted when missing; an existing one is used as it is).
    #[arg(long, value_name = "APPEND_FILE", value_hint = clap::ValueHint::FilePath)]
    pub image: Option<std::path::PathBuf>,
    /// The guest's clock and timers run in virtual time: device waits and idle time cost no wall time.
    #[arg(long)]
    pub virtual_time: bool,
    /// With --virtual-time: the guest's CPU is this many times the host's (its CPU time is divided by it).
    #[arg(long, default_value_t = 1.0)]
    pub cpu_speed: f64,
    /// With --virtual-time: what the guest's clock moves with while it runs: cpu (the CPU time of UML's processes,
    /// whatever the host's load) or wall (the real clock, the host's load included).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "wall"])]
    pub guest_clock: String,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = smartcon_emulate::vm::GUEST_MEM_MIB_DEFAULT)]
    pub mem: u64,
    /// JSON Lines output (one "emulate_vm" record on stdout after CMD's own output).
    #[arg(long)]
    pub json: bool,
    /// The program and its arguments, run in the guest in /mnt (after --).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Args, Debug)]
pub struct MountArgs {
    /// emu:PRESET[,key=value...], e.g. emu:sdcard or emu:sdcard,channels=4,speedup=2.
    pub spec: String,
    /// The ext4 mount point (--fs ext4), or the name `emulate umount` knows the mount by.
    #[arg(value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub dir: std::path::PathBuf,
    /// ext4: format and mount at DIR; none: print the loop device.
    #[arg(long, default_value = "ext4", value_parser = ["ext4", "none"])]
    pub fs: String,
    /// Device size (default: the spec's capacity).
    #[arg(long)]
    pub size: Option<String>,
    /// Run in the background; end it with `smartcon emulate umount DIR`.
    #[arg(long)]
    pub detach: bool,
    /// Serve without SCHED_FIFO (less accurate on a loaded host).
    #[arg(long)]
    pub no_fifo: bool,
    /// FUSE transport: uring (FUSE over io_uring) or dev (/dev/fuse). Default: uring where available, else dev.
    #[arg(long, value_parser = ["dev", "uring"])]
    pub transport: Option<String>,
    /// Mount over DIR even if it is not empty or already a mount point (its files are hidden while mounted).
    #[arg(long)]
    pub force: bool,
    /// How the server holds each reply until the model's instant, through its SmartPort, as `bench --target emu:...` waits: block (a timer, late by the wake-up), spin, sync, hybrid, ..., or a decision per request (smart, paper...), on either transport (an io_uring queue waits for its earliest held reply so, or a new request). Default: the reference wait (a timer armed early by the measured wake-up, then the clock watched), which replies at the model's instant: the emulator's fidelity.
    #[arg(long, value_parser = strategy_name)]
    pub strategy: Option<String>,
}

/// A `--strategy` name of the engine's (`StrategyChoice::names`); a usage error naming them
/// otherwise, as the other value parsers (`engine_setup::strategy_value`) give.
fn strategy_name(text: &str) -> std::result::Result<String, smartcon_engine::error::Error> {
    use smartcon_engine::error::{Error, ErrorKind};
    use smartcon_engine::smartport::StrategyChoice;
    match StrategyChoice::parse(text) {
        Some(_) => Ok(text.to_string()),
        None => Err(Error::new(ErrorKind::Usage, format!("one of {}", StrategyChoice::names().join(", ")))),
    }
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// emu:PRESET[,key=value...], e.g. emu:sdcard,channels=4,speedup=2 or emu:hdd,queue=sjf. Repeat it for a sweep: every device x --channels x --trace is one point.
    #[arg(long, required = true)]
    pub device: Vec<String>,
    /// A sweep over channel counts: each device is replayed with channels=N for each N (e.g. 1,2,4,8).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
    pub channels: Vec<u32>,
    /// A trace file, gzip or not, `-` for standard input (open loop: arrivals at its timestamps); repeat it for a sweep. Without it, a closed-loop job.
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub trace: Vec<std::path::PathBuf>,
    /// The trace's format (default: detected from its first lines).
    #[arg(long, value_parser = ["blkparse", "fio-iolog-v2", "fio-iolog-v3", "msr", "alibaba", "tencent"])]
    pub format: Option<String>,
    /// Replay only this device's I/Os: blkparse MAJ,MIN; fio the file; msr HOSTNAME_DISK; alibaba device_id; tencent VolumeID.
    #[arg(long)]
    pub device_filter: Option<String>,
    /// I/Os held to put the trace in timestamp order (older ones are replayed late and counted).
    #[arg(long, default_value_t = REORDER_WINDOW_DEFAULT)]
    pub reorder_window: usize,
    /// Read the trace file with O_DIRECT (by a reader thread, 512 KiB of blocks): a trace of GBs
    /// is not left in the page cache, where it would push out other files' pages. Refused for
    /// standard input, and where the file system does not take O_DIRECT (e.g. tmpfs before
    /// Linux 6.6); a gzip file is read so and decompressed as it comes.
    #[arg(long)]
    pub direct_read: bool,
    /// Parse the trace on the replay's own thread, as the replay needs it: one core, about
    /// 0.3 MB less memory, 0.6-0.75x the I/Os a second of wall time where a second core is
    /// free. Default: parsed on a second thread beside the replay.
    #[arg(long)]
    pub parse_inline: bool,
    /// The most lines read from a trace (an endless stream on standard input ends here with an error).
    #[arg(long, default_value_t = smartcon_emulate::trace::TRACE_LINES_MAX_DEFAULT, value_parser = clap::value_parser!(u64).range(1..))]
    pub trace_lines_max: u64,
    /// Also replay the same arrivals in real time through the engine and report lateness.
    #[arg(long)]
    pub real_time: bool,
    /// How real-time waiters wait, through the engine's SmartPort: block (the reference wait: a timer armed early, then the clock watched; default), spin, sync, hybrid (sleep, then poll), or a decision per I/O: smart, paper.
    #[arg(long, default_value = "block")]
    pub strategy: String,
    /// Real time: run the replay threads under SCHED_FIFO so other processes do not delay wake-ups.
    #[arg(long)]
    pub fifo: bool,
    /// A fault scenario (TOML: errors, latency spikes, stalls; docs/emulator.md). Virtual time only.
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub faults: Option<std::path::PathBuf>,
    /// JSON Lines output (one "replay_result" record).
    #[arg(long)]
    pub json: bool,
    /// Closed loop: read or write.
    #[arg(long, default_value = "read")]
    pub op: String,
    /// Closed loop: seq or rand.
    #[arg(long, default_value = "rand")]
    pub pattern: String,
    /// Closed loop: request size.
    #[arg(long, default_value = "4k")]
    pub bs: String,
    /// Closed loop: requests outstanding at once.
    #[arg(long, default_value_t = 1)]
    pub qd: u32,
    /// Closed loop: requests in all.
    #[arg(long, default_value_t = 10_000)]
    pub ios: u64,
    /// Closed loop: time between a completion and the slot's next request (e.g. 50us).
    #[arg(long)]
    pub think: Option<String>,
    /// Closed loop: seed of the random offsets.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the sweep's plan (one `plan_point` record per point with --json: the smartcon
    /// arguments that run it) and run nothing.
    #[arg(long)]
    pub plan_only: bool,
    /// Write the sweep's results.jsonl and its report (summary.md, plots, report.html) to
    /// this directory (must not exist or be empty); with --ray the default is
    /// smartcon-report-sweep.
    #[arg(long, value_name = "OUT_DIR", value_hint = clap::ValueHint::DirPath)]
    pub out: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub ray: crate::ray::RayArgs,
}

/// One point of a replay sweep: a device spec and a trace (or the closed-loop job).
struct ReplayPoint {
    name: String,
    device: String,
    trace: Option<std::path::PathBuf>,
}

/// The sweep's points, devices x channels x traces in that order (one point without a sweep).
fn replay_points(args: &ReplayArgs) -> Result<Vec<ReplayPoint>> {
    let mut devices = Vec::new();
    for d in &args.device {
        smartcon_devemu::parse_spec(d).map_err(|e| anyhow::anyhow!("--device {d}: {e}"))?;
        if args.channels.is_empty() {
            devices.push(d.clone());
        } else if d.split(',').any(|kv| kv.starts_with("channels=")) {
            bail!("--device {d} sets channels= and --channels sweeps them: give one of the two");
        } else {
            devices.extend(args.channels.iter().map(|c| format!("{d},channels={c}")));
        }
    }
    let traces: Vec<Option<std::path::PathBuf>> =
        if args.trace.is_empty() { vec![None] } else { args.trace.iter().cloned().map(Some).collect() };
    let sweep = devices.len() * traces.len() > 1 || args.ray.ray.is_some() || args.plan_only;
    let mut points = Vec::new();
    for device in &devices {
        for trace in &traces {
            let trace = match trace {
                Some(t) if t.as_os_str() == "-" && sweep => {
                    bail!("--trace -: a sweep reads its traces by name (standard input can be read once)")
                }
                // Absolute, so that a worker on another node (or in another directory) finds it.
                Some(t) if t.as_os_str() != "-" => {
                    Some(std::fs::canonicalize(t).map_err(|e| anyhow::anyhow!("--trace {}: {e}", t.display()))?)
                }
                other => other.clone(),
            };
            let name = match &trace {
                Some(t) => format!("{device} {}", t.file_name().unwrap_or_default().to_string_lossy()),
                None => device.clone(),
            };
            points.push(ReplayPoint { name, device: device.clone(), trace });
        }
    }
    Ok(points)
}

/// The smartcon arguments that replay `point` alone, with --json.
fn point_args(args: &ReplayArgs, point: &ReplayPoint) -> Vec<String> {
    let mut a: Vec<String> = vec!["emulate".into(), "replay".into(), "--device".into(), point.device.clone()];
    let mut flag = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            a.push(format!("--{name}"));
            a.push(v);
        }
    };
    flag("trace", point.trace.as_ref().map(|t| t.to_string_lossy().into_owned()));
    flag("format", args.format.clone());
    flag("device-filter", args.device_filter.clone());
    flag("reorder-window", Some(args.reorder_window.to_string()));
    flag("trace-lines-max", Some(args.trace_lines_max.to_string()));
    flag("strategy", Some(args.strategy.clone()));
    let faults = args.faults.as_ref().map(|f| std::fs::canonicalize(f).unwrap_or_else(|_| f.clone()));
    flag("faults", faults.map(|f| f.to_string_lossy().into_owned()));
    flag("op", Some(args.op.clone()));
    flag("pattern", Some(args.pattern.clone()));
    flag("bs", Some(args.bs.clone()));
    flag("qd", Some(args.qd.to_string()));
    flag("ios", Some(args.ios.to_string()));
    flag("think", args.think.clone());
    flag("seed", Some(args.seed.to_string()));
    if args.real_time {
        a.push("--real-time".into());
    }
    if args.fifo {
        a.push("--fifo".into());
    }
    if args.direct_read {
        a.push("--direct-read".into());
    }
    if args.parse_inline {
        a.push("--parse-inline".into());
    }
    a.push("--json".into());
    a
}

pub fn run(args: EmulateArgs) -> Result<()> {
    match args.command {
        EmulateCommand::Replay(a) => replay(a),
        EmulateCommand::Sweep(a) => sweep(a),
        EmulateCommand::Mount(a) => mount(a),
        EmulateCommand::Umount { dir } => {
            print!("{}", smartcon_emulate::mount::umount(&dir).map_err(engine_err)?);
            Ok(())
        }
        EmulateCommand::Cleanup => {
            smartcon_emulate::mount::cleanup().iter().for_each(|line| println!("{line}"));
            smartcon_emulate::vm::cleanup().iter().for_each(|line| println!("{line}"));
            Ok(())
        }
        EmulateCommand::Vm(a) => vm(a),
    }
}

fn vm(a: VmArgs) -> Result<()> {
    if let Some(p) = &a.image {
        check_image(p)?;
    }
    use smartcon_emulate::vm::{self, Fs, VmOptions};
    let mut spec = a.spec.clone();
    let parsed = smartcon_devemu::parse_spec(&spec).map_err(anyhow::Error::msg)?;
    let has_size = spec.split(',').skip(1).any(|kv| kv.starts_with("size="));
    match (&a.size, has_size) {
        (Some(_), true) => bail!("give the size once: --size or size= in the spec"),
        (Some(s), false) => {
            parse_size_arg("size", s, smartcon_util::units::DEVICE_SIZE)?;
            spec.push_str(&format!(",size={s}"));
        }
        (None, false) if parsed.capacity_bytes != vm::IMAGE_BYTES_DEFAULT => {
            spec.push_str(&format!(",size={}", vm::IMAGE_BYTES_DEFAULT));
        }
        _ => {}
    }
    if !(a.cpu_speed > 0.0 && a.cpu_speed.is_finite()) {
        bail!("--cpu-speed {}: must be a number above 0", a.cpu_speed);
    }
    if a.cpu_speed != 1.0 && !a.virtual_time {
        bail!("--cpu-speed needs --virtual-time (in real time the guest's CPU is the host's)");
    }
    if a.mem < 32 {
        bail!("--mem {}: the guest needs at least 32 MiB", a.mem);
    }
    let opts = VmOptions {
        spec,
        fs: if a.fs == "ext4" { Fs::Ext4 } else { Fs::None },
        scheduler: a.scheduler,
        image: a.image,
        virtual_time: a.virtual_time,
        cpu_speed: a.cpu_speed,
        guest_clock: if a.guest_clock == "wall" { vm::GuestClock::Wall } else { vm::GuestClock::Cpu },
        command: a.command,
        library: super::run::library()?,
        kernel: vm::find_kernel().map_err(engine_err)?,
        mem_mib: a.mem,
        tmp_dir: std::env::temp_dir(),
        inputs: Vec::new(),
        prepare: None,
        quiet_console: false,
    };
    let r = vm::run_vm(&opts, crate::common::interrupt_flag(), &mut |line| eprintln!("smartcon: {line}"))
        .map_err(engine_err)?;
    eprintln!("smartcon {}", vm::summary_line(&r));
    if a.json {
        emit_json(&r)?;
    }
    std::process::exit(r.exit_code)
}

fn mount(a: MountArgs) -> Result<()> {
    use smartcon_emulate::mount::{self, Fs, MountOptions};
    // The mount point first: a bad one is named before anything else is checked or made.
    if !std::fs::metadata(&a.dir).is_ok_and(|m| m.is_dir()) {
        anyhow::bail!("{}: not a directory (the mount point must exist)", smartcon_util::paths::escape(&a.dir));
    }
    let spec = smartcon_devemu::parse_spec(&a.spec).map_err(anyhow::Error::msg)?;
    if a.detach {
        let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).filter(|x| x != "--detach").collect();
        let (record, log) = mount::spawn_detached(&std::env::current_exe()?, &args).map_err(engine_err)?;
        print!("{log}");
        println!("detached: server pid {}; end it with: smartcon emulate umount {}", record.pid, record.dir.display());
        return Ok(());
    }
    let size_bytes = a
        .size
        .as_deref()
        .map(|s| parse_size_arg("size", s, smartcon_util::units::DEVICE_SIZE))
        .transpose()?
        .unwrap_or(spec.capacity_bytes);
    let fs = if a.fs == "ext4" { Fs::Ext4 } else { Fs::None };
    let strategy = a.strategy.as_deref().and_then(smartcon_engine::smartport::StrategyChoice::parse);
    let transport = match a.transport.as_deref() {
        Some("dev") => mount::Transport::Dev,
        Some(_) => mount::Transport::Uring,
        None => mount::Transport::default_for_host(),
    };
    let opts = MountOptions { spec, dir: a.dir, fs, size_bytes, fifo: !a.no_fifo, transport, force: a.force, strategy };
    let report = mount::run(&opts, crate::common::interrupt_flag(), |r| {
        let at =
            if r.fs == Fs::Ext4 { format!("ext4 mounted at {}", r.dir.display()) } else { "no file system".into() };
        let (label, dev, dio, via) = (&opts.spec.label, r.loop_device.display(), r.direct_io, r.transport.name());
        println!("{label} ready: {dev}, {at} (direct I/O: {dio}, FUSE transport: {via})");
        println!(
            "path overhead subtracted: read {} write {}",
            format_ns(r.overhead_ns[0] as f64),
            format_ns(r.overhead_ns[1] as f64)
        );
        println!("Ctrl-C or SIGTERM ends it");
    })
    .map_err(engine_err)?;
    println!("{report}");
    Ok(())
}

fn replay(args: ReplayArgs) -> Result<()> {
    // Inputs are checked first: a FIFO or a device is refused, not opened for reading.
    for p in &args.trace {
        crate::paths::input("--trace", p, true)?;
    }
    if let Some(p) = &args.faults {
        crate::paths::input("--faults", p, false)?;
    }
    // The report directory, claimed before any work (crate::paths).
    let mut out_dir = match (&args.out, args.plan_only) {
        (Some(d), false) => Some(crate::paths::out_dir("--out", d)?),
        _ => None,
    };
    use crate::ray::PlanPoint;
    let points = replay_points(&args)?;
    if args.plan_only || args.ray.ray.is_some() {
        let plan: Vec<PlanPoint> =
            points.iter().enumerate().map(|(i, p)| PlanPoint::new(i, p.name.clone(), point_args(&args, p))).collect();
        return plan_or_ray(&plan, args.plan_only, args.json, &args.ray, out_dir);
    }
    if points.len() == 1 && args.out.is_none() {
        let record = replay_one(&args, &points[0], true)?;
        return output(&args, &record);
    }
    // A sweep on this machine, point after point: the same records a Ray run writes.
    let bar = progress_bar(points.len() as u64, "points");
    let mut lines = String::new();
    let mut records = Vec::new();
    for p in &points {
        if crate::common::interrupted() {
            break;
        }
        bar.set_message(p.name.clone());
        let record = replay_one(&args, p, false)?;
        bar.inc(1);
        if args.out.is_some() {
            lines += &serde_json::to_string(&record)?;
            lines.push('\n');
            records.push(serde_json::to_value(&record)?);
        } else {
            bar.suspend(|| output(&args, &record))?;
        }
    }
    bar.finish_and_clear();
    if let Some(out) = out_dir.take() {
        let path = out.dir().join("results.jsonl");
        std::fs::write(&path, lines).map_err(|e| out.wrap(&format!("results.jsonl: {e}")))?;
        let records = smartcon_report::distributed::Records::of(records);
        super::report::write(&records, None, &path, Some(out.path()))?;
        out.commit()?;
    }
    Ok(())
}

fn replay_one(args: &ReplayArgs, point: &ReplayPoint, show_progress: bool) -> Result<ReplayResult> {
    let spec = smartcon_devemu::parse_spec(&point.device).map_err(anyhow::Error::msg)?;
    let Some(strategy) = realtime::parse_strategy(&args.strategy) else {
        bail!(
            "--strategy {:?}: a real-time replay waits with one of {} (block is the reference wait)",
            args.strategy,
            realtime::STRATEGIES.join(", ")
        );
    };
    let faults = match &args.faults {
        Some(path) if args.real_time => {
            bail!("--faults {}: real-time replay does not inject faults yet", path.display())
        }
        Some(path) => scenario::load(path).map_err(anyhow::Error::msg)?,
        None => Default::default(),
    };
    if point.trace.is_none() && (args.format.is_some() || args.device_filter.is_some()) {
        bail!("--format and --device-filter read a --trace");
    }
    if point.trace.is_none() && (args.direct_read || args.parse_inline) {
        bail!("--direct-read and --parse-inline read a --trace");
    }
    // Progress: a bar on a terminal; in logs a line every few seconds (a sweep shows points).
    let bar = progress_bar(if point.trace.is_none() { args.ios } else { 0 }, "replay");
    if !show_progress {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let mut last_line = std::time::Instant::now();
    let mut progress = |issued: u64| {
        bar.set_position(issued);
        if show_progress && last_line.elapsed() >= std::time::Duration::from_secs(5) {
            last_line = std::time::Instant::now();
            bar.inc(0);
        }
    };
    let hooks = || Hooks { on_complete: None, progress: None };
    match &point.trace {
        Some(path) => {
            let options = TraceOptions {
                format: args.format.as_deref().and_then(TraceFormat::parse),
                device_filter: args.device_filter.clone(),
                reorder_window: args.reorder_window,
                capacity_bytes: Some(spec.capacity_bytes),
                lines_max: args.trace_lines_max,
            };
            let open = || {
                let opened = if args.direct_read {
                    TraceReader::open_direct(path, options.clone())
                } else {
                    TraceReader::open(path, options.clone())
                };
                opened.map_err(|e| engine_err(e.into()))
            };
            let mut reader = open()?;
            let label = format!("trace:{}:{}", reader.format().name(), path.display());
            let with_progress = Hooks { progress: Some(&mut progress), ..hooks() };
            let virt = if args.parse_inline {
                replay_reader_inline(&spec, &mut reader, &faults, with_progress)
            } else {
                replay_reader(&spec, &mut reader, &faults, with_progress)
            }
            .map_err(usage)?;
            bar.finish_and_clear();
            let stats = reader.stats();
            if !args.json {
                if stats.folded > 0 {
                    eprintln!("smartcon: {} I/Os beyond the emulated capacity were folded into it", stats.folded);
                }
                if stats.late > 0 {
                    eprintln!(
                        "smartcon: {} I/Os were older than the reorder window ({} I/Os) and replayed late",
                        stats.late, args.reorder_window
                    );
                }
            }
            let real = if args.real_time {
                if path.as_os_str() == "-" {
                    bail!("--real-time reads the trace twice: give a file, not standard input");
                }
                let threads = (virt.outstanding_max + 1).min(THREADS_MAX);
                let again = open()?;
                Some(
                    realtime::run_real_time(&spec, again, threads, virt.bytes_max, None, strategy, args.fifo)
                        .map_err(engine_err)?,
                )
            } else {
                None
            };
            let mut record = replay_result(&spec, label, &virt, real.as_ref());
            record.trace = Some(stats);
            Ok(record)
        }
        None => {
            let job = ClosedLoop {
                op: parse_op(&args.op)?,
                sequential: parse_pattern(&args.pattern)? == Pattern::Seq,
                bs_bytes: parse_size_arg("bs", &args.bs, smartcon_util::units::IO_SIZE)?,
                qd: args.qd,
                ios: args.ios,
                think_ns: args.think.as_deref().map(|t| parse_duration_arg("think", t)).transpose()?.unwrap_or(0),
                seed: args.seed,
            };
            let label = format!(
                "closed:{},{},{},qd={},think={}ns",
                args.op,
                args.pattern,
                format_size(job.bs_bytes),
                job.qd,
                job.think_ns
            );
            let with_progress = Hooks { progress: Some(&mut progress), ..hooks() };
            let virt: VirtualRun = replay_closed(&spec, &job, &faults, with_progress).map_err(usage)?;
            bar.finish_and_clear();
            let real = if args.real_time {
                let ios = job.trace_ios(spec.capacity_bytes);
                let threads = u64::from(job.qd).min(job.ios);
                Some(
                    realtime::run_real_time(
                        &spec,
                        ios,
                        threads,
                        job.bs_bytes,
                        Some((job.qd, job.think_ns)),
                        strategy,
                        args.fifo,
                    )
                    .map_err(engine_err)?,
                )
            } else {
                None
            };
            Ok(replay_result(&spec, label, &virt, real.as_ref()))
        }
    }
}

/// A replay's error (a bad trace line, a bad job): one line, exit status 2.
fn usage(e: smartcon_engine::error::Error) -> anyhow::Error {
    anyhow::anyhow!("replay: {}", e.message)
}

fn output(args: &ReplayArgs, record: &ReplayResult) -> Result<()> {
    if args.json {
        emit_json(record)?;
    } else {
        print_human(record);
    }
    if crate::common::interrupted() {
        println!("(interrupted: the figures cover the I/Os replayed before the signal)");
    }
    Ok(())
}

fn print_human(r: &ReplayResult) {
    println!("{} on {}: {} I/Os", r.workload, r.device, r.ios);
    if let Some(t) = &r.trace {
        println!(
            "  trace: {} lines, {} skipped, {} other devices, {} replayed late, {} folded",
            t.lines, t.skipped, t.filtered, t.late, t.folded
        );
    }
    println!(
        "  virtual time: mean {}  p50 {}  p99 {}  max {}",
        format_ns(r.lat_ns_mean),
        format_ns(r.lat_ns_p50 as f64),
        format_ns(r.lat_ns_p99 as f64),
        format_ns(r.lat_ns_max as f64)
    );
    for (name, s) in [("read", &r.read), ("write", &r.write)] {
        if s.ios > 0 {
            println!(
                "    {name:<5} {:>9} I/Os  mean {}  p50 {}  p99 {}",
                s.ios,
                format_ns(s.lat_ns_mean),
                format_ns(s.lat_ns_p50 as f64),
                format_ns(s.lat_ns_p99 as f64)
            );
        }
    }
    println!(
        "  {:.0} IOPS, {:.1} MB/s, device utilization {:.1}%, {} rollbacks",
        r.iops,
        r.throughput_bytes_per_s / 1e6,
        r.device_utilization * 100.0,
        r.rollbacks
    );
    if r.errors_read + r.errors_write > 0 {
        println!("  injected errors: {} reads, {} writes", r.errors_read, r.errors_write);
    }
    println!(
        "  simulated {} in {} of wall time: {:.0}x real time, {:.2} M requests/s ({:.2} M/s of CPU time)",
        format_ns(r.sim_ns as f64),
        format_ns(r.wall_ns as f64),
        r.speedup,
        r.requests_per_s_wall / 1e6,
        r.requests_per_s_cpu / 1e6
    );
    if let (Some(rt), Some(w2), Some(w20), Some(late)) = (&r.real_time, r.within_2pct, r.within_20us, r.lateness_ns_p99)
    {
        println!(
            "  real time ({}{}, {} threads): mean {} ({:+.2}% vs virtual)  p50 {} ({:+.2}%)  p99 {} ({:+.2}%)",
            rt.strategy,
            if rt.fifo { ", fifo" } else { "" },
            rt.threads,
            format_ns(rt.lat_ns_mean),
            rt.mean_error_pct,
            format_ns(rt.lat_ns_p50 as f64),
            rt.p50_error_pct,
            format_ns(rt.lat_ns_p99 as f64),
            rt.p99_error_pct
        );
        println!(
            "  accuracy: {:.2}% of I/Os within 2% of the model, {:.2}% within 20 us, lateness p50 {} p99 {}",
            w2 * 100.0,
            w20 * 100.0,
            format_ns(rt.lateness_ns_p50 as f64),
            format_ns(late as f64)
        );
    }
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// emu:PRESET[,key=value...] without speedup= (the sweep sets it); with --vm the default is emu:hdd.
    #[arg(long, required_unless_present = "vm")]
    pub device: Option<String>,
    /// The factors the device's service times are divided by (default 1,10,20,50,100,200;
    /// with --vm 1,10,100, with --vm --full the seed's sixteen from 1 to 200).
    #[arg(long, value_delimiter = ',')]
    pub speedups: Vec<f64>,
    /// The seed's studies in a User-Mode Linux guest (`emulate vm`): a source tree extracted
    /// onto ext4 then read with wc, per speed-up and scheduler (Tables 4.8/4.9), or with
    /// --fio the fio mixes (Tables 4.6/4.7).
    #[arg(long)]
    pub vm: bool,
    /// With --vm: the whole table (the seed's speed-ups, a 64 MiB tree; all nine fio mixes).
    #[arg(long, requires = "vm")]
    pub full: bool,
    /// With --vm: the guest I/O schedulers compared (default none,bfq: the seed's NOOP and
    /// its anticipatory CFQ).
    #[arg(long, requires = "vm", value_delimiter = ',', value_parser = ["none", "mq-deadline", "bfq", "kyber"])]
    pub schedulers: Vec<String>,
    /// With --vm: the fio mixes (Tables 4.6/4.7) at 1 x instead of the tar study, N I/Os each (default 200).
    #[arg(long, requires = "vm", value_name = "N", num_args = 0..=1, default_missing_value = "200")]
    pub fio: Option<u64>,
    /// Bytes of text in the default program's generated source tree (default 16m; with --vm 16m, --full 64m).
    #[arg(long)]
    pub tree_size: Option<String>,
    /// Write the plot (SVG) here (a new file).
    #[arg(long, value_name = "OUT_FILE", value_hint = clap::ValueHint::FilePath)]
    pub plot: Option<std::path::PathBuf>,
    /// Skip the real-time run of the 1 x point.
    #[arg(long)]
    pub no_real_time: bool,
    /// JSON Lines output (one "emulate_sweep" record).
    #[arg(long)]
    pub json: bool,
    /// Print the sweep's plan (one `plan_point` record per run with --json) and run nothing.
    #[arg(long)]
    pub plan_only: bool,
    /// Write results.jsonl (one `emulate_sweep_point` record per run) and the report here
    /// (must not exist or be empty); with --ray the default is smartcon-report-sweep.
    #[arg(long, value_name = "OUT_DIR", value_hint = clap::ValueHint::DirPath)]
    pub out: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub ray: crate::ray::RayArgs,
    /// One run of the plan: the program at this factor only (an `emulate_sweep_point` record).
    #[arg(long, hide = true)]
    pub point: Option<f64>,
    /// With --point 1: the run in real time.
    #[arg(long, hide = true, requires = "point")]
    pub point_real_time: bool,
    /// The program ({image} is replaced by the image path); default: the tar-and-wc test.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

fn sweep(mut args: SweepArgs) -> Result<()> {
    if args.vm {
        return vm_sweep(args);
    }
    if args.speedups.is_empty() {
        args.speedups = vec![1.0, 10.0, 20.0, 50.0, 100.0, 200.0];
    }
    let tree_size = args.tree_size.clone().unwrap_or_else(|| "16m".into());
    use smartcon_emulate::sweep::SweepOptions;
    use smartcon_emulate::sweep::{
        assemble, check_factors, factors, plot_svg, prepare, run_point, run_sweep_points, table,
    };
    // Before any output is claimed, and on every path (a plan and Ray's points too).
    check_factors(args.device.as_deref().unwrap_or_default(), &args.speedups).map_err(engine_err)?;
    let plot_out = crate::paths::out_file("--plot", args.plot.as_deref())?;
    // The report directory, claimed before any work (crate::paths).
    let out_dir = match (&args.out, args.plan_only || args.point.is_some()) {
        (Some(d), false) => Some(crate::paths::out_dir("--out", d)?),
        _ => None,
    };
    let work_dir = std::env::temp_dir().join(format!("smartcon-sweep-{}", std::process::id()));
    let command = (!args.command.is_empty()).then_some(args.command.clone());
    let device = args.device.clone().unwrap_or_default();
    let (speedups, check_real_time) = (args.speedups.clone(), !args.no_real_time);
    let tree_bytes = parse_size_arg("tree-size", &tree_size, smartcon_util::units::TREE_SIZE)?;
    if args.plan_only || args.ray.ray.is_some() {
        // One run per factor (1 x first when not asked for) and the real-time 1 x: each
        // point is `emulate sweep --point S` with the same flags.
        let mut runs: Vec<(String, Vec<String>)> = factors(&speedups)
            .into_iter()
            .map(|s| (format!("{device} x{s}"), vec!["--point".to_string(), s.to_string()]))
            .collect();
        if check_real_time {
            runs.push((
                format!("{device} x1 real time"),
                vec!["--point".into(), "1".into(), "--point-real-time".into()],
            ));
        }
        let plan: Vec<crate::ray::PlanPoint> = runs
            .into_iter()
            .enumerate()
            .map(|(i, (name, point))| {
                let mut a: Vec<String> = ["emulate", "sweep", "--device", &device, "--tree-size", &tree_size]
                    .iter()
                    .map(|x| x.to_string())
                    .collect();
                a.push("--speedups".into());
                a.push(speedups.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(","));
                a.extend(point);
                a.push("--json".into());
                if !args.command.is_empty() {
                    a.push("--".into());
                    a.extend(args.command.iter().map(|c| c.to_string_lossy().into_owned()));
                }
                crate::ray::PlanPoint::new(i, name, a)
            })
            .collect();
        return plan_or_ray(&plan, args.plan_only, args.json, &args.ray, out_dir);
    }
    let library = super::run::library()?;
    // Recorded before it exists, so `smartcon cleanup` removes it after kill -9.
    let _record = smartcon_util::paths::record_scratch_dir(&work_dir);
    let opts = SweepOptions { device, speedups, command, library, work_dir, tree_bytes, check_real_time };
    if let Some(s) = args.point {
        // One run of a plan (on a Ray worker): its record, nothing else.
        let run = prepare(&opts).and_then(|c| run_point(&opts, &c, s, !args.point_real_time, "p"));
        remove_work_dir(&opts.work_dir);
        return emit_json(&run.map_err(engine_err)?);
    }
    let runs = run_sweep_points(&opts).map_err(engine_err);
    remove_work_dir(&opts.work_dir);
    let runs = runs?;
    if let Some(out) = out_dir {
        let mut lines = String::new();
        for r in &runs {
            lines += &serde_json::to_string(r)?;
            lines.push('\n');
        }
        let path = out.dir().join("results.jsonl");
        std::fs::write(&path, lines).map_err(|e| out.wrap(&format!("results.jsonl: {e}")))?;
        let values = runs.iter().map(serde_json::to_value).collect::<Result<Vec<_>, _>>()?;
        super::report::write(&smartcon_report::distributed::Records::of(values), None, &path, Some(out.path()))?;
        out.commit()?;
        return Ok(());
    }
    let r = assemble(&runs).map_err(engine_err)?;
    if args.json {
        emit_json(&r)?;
    } else {
        print!("{}", table(&r));
    }
    // Drawn after the results are printed, so a plot that cannot be written loses nothing.
    if let Some(out) = crate::paths::unless_interrupted(plot_out) {
        plot_svg(&r, out.tmp_path()).map_err(|e| out.wrap(&e))?;
        out.commit()?;
    }
    Ok(())
}

/// Removes the sweep's scratch directory. A program stopped by a signal has its whole
/// process group killed (launch::run_group), but a member dying may still finish the file
/// it was creating: a few tries a little apart, then a line saying what is left.
fn remove_work_dir(dir: &std::path::Path) {
    for _ in 0..20 {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(25)),
        }
    }
    if dir.exists() {
        eprintln!("smartcon: could not remove {}: remove it by hand", dir.display());
    }
}

/// `emulate sweep --vm`: the seed's studies in a UML guest (smartcon_emulate::vmsweep).
fn vm_sweep(args: SweepArgs) -> Result<()> {
    use smartcon_emulate::vmsweep::{self, VmSweepOptions};
    if args.plan_only
        || args.ray.ray.is_some()
        || args.point.is_some()
        || args.out.is_some()
        || !args.command.is_empty()
    {
        bail!("--vm runs its own workloads on this machine: --plan-only, --ray, --out and a CMD do not apply");
    }
    if args.plot.is_some() && args.fio.is_some() {
        bail!("--plot draws the tar study; --fio has no plot");
    }
    let speedups = match (args.speedups.is_empty(), args.full) {
        (false, _) => args.speedups.clone(),
        (true, false) => vmsweep::QUICK_SPEEDUPS.to_vec(),
        (true, true) => vmsweep::SEED_SPEEDUPS.to_vec(),
    };
    // The same bounds as the sweep without --vm, before any output is claimed.
    smartcon_emulate::sweep::check_factors(args.device.as_deref().unwrap_or("emu:hdd"), &speedups)
        .map_err(engine_err)?;
    let plot_out = crate::paths::out_file("--plot", args.plot.as_deref())?;
    let tree_bytes = match &args.tree_size {
        Some(t) => parse_size_arg("tree-size", t, smartcon_util::units::TREE_SIZE)?,
        None if args.full => vmsweep::FULL_TREE_BYTES,
        None => vmsweep::QUICK_TREE_BYTES,
    };
    let schedulers =
        if args.schedulers.is_empty() { vec!["none".to_string(), "bfq".to_string()] } else { args.schedulers.clone() };
    let opts = VmSweepOptions {
        device: args.device.clone().unwrap_or_else(|| "emu:hdd".into()),
        speedups,
        schedulers,
        tree_bytes,
        real_time_reference: !args.no_real_time,
        fio_ios: args.fio,
        full: args.full,
        library: super::run::library()?,
        kernel: smartcon_emulate::vm::find_kernel().map_err(engine_err)?,
        mem_mib: smartcon_emulate::vm::GUEST_MEM_MIB_DEFAULT,
        tmp_dir: std::env::temp_dir(),
    };
    let stop = crate::common::interrupt_flag();
    let mut say = |line: &str| eprintln!("smartcon: {line}");
    if args.fio.is_some() {
        let r = vmsweep::run_fio(&opts, stop, &mut say).map_err(engine_err)?;
        if args.json {
            emit_json(&r)?;
        } else {
            print!("{}", vmsweep::fio_table(&r));
        }
        return Ok(());
    }
    // The tree and its archive: a directory of this run's, recorded before it exists so
    // `smartcon cleanup` removes it after kill -9. The guest does not see it (it mounts its
    // own tmpfs on /tmp): the archive is linked into each guest's working directory.
    let scratch = std::env::temp_dir().join(format!("smartcon-vmsweep-{}", std::process::id()));
    let _record = smartcon_util::paths::record_scratch(&[&scratch]);
    std::fs::create_dir_all(&scratch).map_err(|e| anyhow::anyhow!("{}: {e}", scratch.display()))?;
    let r = vmsweep::run_tar(&opts, &scratch, stop, &mut say);
    let _ = std::fs::remove_dir_all(&scratch);
    let r = r.map_err(engine_err)?;
    if args.json {
        emit_json(&r)?;
    } else {
        print!("{}", vmsweep::tar_table(&r));
    }
    if let Some(out) = crate::paths::unless_interrupted(plot_out) {
        vmsweep::plot_tar_svg(&r, out.tmp_path()).map_err(|e| out.wrap(&e))?;
        out.commit()?;
    }
    Ok(())
}

/// `emulate vm --image PATH`, checked before anything boots: an existing image must be a
/// regular file, not through a symbolic link; a new one must be creatable there (its parent
/// exists and is writable: claimed and released at once, crate::paths).
fn check_image(path: &std::path::Path) -> Result<()> {
    use smartcon_util::paths::{Existing, OutFile, PathError};
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            Err(PathError::new("--image", path, "is a symbolic link; smartcon does not write through one").into())
        }
        Ok(m) if !m.is_file() => Err(PathError::new("--image", path, "exists and is not a regular file").into()),
        Ok(_) => Ok(()),
        Err(_) => {
            drop(OutFile::claim("--image", path, Existing::Refuse)?);
            Ok(())
        }
    }
}

/// A sweep's plan (replay's or sweep's): printed with `--plan-only`, else handed to the Ray
/// driver with the claimed report directory (smartcon-report-sweep when none was given).
fn plan_or_ray(
    plan: &[crate::ray::PlanPoint],
    plan_only: bool,
    json: bool,
    ray: &crate::ray::RayArgs,
    out_dir: Option<crate::paths::OutDir>,
) -> Result<()> {
    if plan_only {
        for p in plan {
            if json {
                emit_json(p)?;
            } else {
                println!("{}: smartcon {}", p.name, p.args.join(" "));
            }
        }
        return Ok(());
    }
    let out = match out_dir {
        Some(o) => o,
        None => crate::paths::out_dir("--out", std::path::Path::new("smartcon-report-sweep"))?,
    };
    crate::ray::run_driver("sweep", ray, out, Some(plan), &[])
}

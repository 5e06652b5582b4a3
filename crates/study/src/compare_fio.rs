//! fio's matching jobs beside smartcon's strategies, so a user can see that smartcon's
//! numbers agree with the standard tool.
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
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use smartcon_engine::decision::Strategy;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::job::{run_job, JobSpec, StrategyChoice};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::placement::format_cpu_list;
use smartcon_engine::profile::Profile;
use smartcon_engine::target::Target;
use smartcon_util::Op;

/// One run of either tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub tool: &'static str,
    /// fio's ioengine or smartcon's strategy.
    pub method: String,
    pub iops: f64,
    pub lat_ns_mean: f64,
    pub lat_ns_p50: f64,
    pub lat_ns_p99: f64,
    pub cpu_pct: f64,
    pub ctx_switches: u64,
}

/// A temporary file for `tmp:`, removed on drop.
pub struct TempFile(pub PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl TempFile {
    /// A file of `size_bytes` of non-zero data in `dir` (default: the temp directory).
    pub fn create(size_bytes: u64, dir: Option<&Path>) -> Result<TempFile, Error> {
        let dir = dir.map(Path::to_path_buf).unwrap_or_else(std::env::temp_dir);
        if !dir.is_dir() {
            let m = format!("{} is not a directory for the temporary file", dir.display());
            return Err(Error::new(ErrorKind::Usage, m));
        }
        let path = dir.join(format!("smartcon-fio-{}.tmp", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(ErrorKind::Target, &path, e))?;
        let guard = TempFile(path.clone());
        let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
        let mut left = size_bytes;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            std::io::Write::write_all(&mut f, &chunk[..n]).map_err(|e| Error::io(ErrorKind::Target, &path, e))?;
            left -= n as u64;
        }
        f.sync_all().map_err(|e| Error::io(ErrorKind::Target, &path, e))?;
        Ok(guard)
    }
}

/// Whether fio can be run here.
pub fn fio_available() -> bool {
    Command::new("fio").arg("--version").output().is_ok()
}

/// What both tools run; `spec` is smartcon's job (its strategy is replaced per run).
pub struct ComparePlan<'a> {
    pub path: &'a Path,
    pub spec: JobSpec,
}

fn setup(message: String) -> Error {
    Error::new(ErrorKind::Setup, message)
}

/// Runs fio with `engine` on the plan's job.
pub fn fio_run(plan: &ComparePlan<'_>, engine: &str) -> Result<Row, Error> {
    let js = &plan.spec;
    let rw = match (js.op, js.pattern) {
        (Op::Read, smartcon_engine::job::Pattern::Rand) => "randread",
        (Op::Read, smartcon_engine::job::Pattern::Seq) => "read",
        (Op::Write, smartcon_engine::job::Pattern::Rand) => "randwrite",
        (Op::Write, smartcon_engine::job::Pattern::Seq) => "write",
    };
    let mut fio = Command::new("fio");
    if let Some(c) = &js.cpus {
        fio.arg(format!("--cpus_allowed={}", format_cpu_list(c)));
    }
    let out = fio
        .arg(format!("--name=smartcon-{engine}"))
        .arg(format!("--filename={}", plan.path.display()))
        .arg(format!("--rw={rw}"))
        .arg(format!("--bs={}", js.bs_bytes))
        .arg(format!("--size={}", js.span_bytes.unwrap_or(js.bs_bytes)))
        .arg(format!("--ioengine={engine}"))
        .args(["--iodepth=1", "--direct=1", "--numjobs=1", "--time_based", "--randrepeat=0", "--output-format=json"])
        .arg(format!("--runtime={}ms", (js.duration_ns / 1_000_000).max(1)))
        .output()
        .map_err(|e| setup(format!("cannot run fio ({e}); install it (Debian: apt-get install fio)")))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or("").to_string();
        return Err(Error::new(ErrorKind::Io, format!("fio --ioengine={engine} failed: {why}")));
    }
    parse_fio_json(&String::from_utf8_lossy(&out.stdout), js.op, engine)
}

/// fio's JSON output (possibly after notes) into a row; missing figures are NaN or 0.
pub fn parse_fio_json(text: &str, op: Op, engine: &str) -> Result<Row, Error> {
    let start = text.find('{').ok_or_else(|| setup("fio printed no JSON".into()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text[start..]).map_err(|e| setup(format!("fio's JSON output did not parse: {e}")))?;
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

/// fio's psync and io_uring, then smartcon's block, spin and smart, one after another.
/// Setting `stop` ends the run after the current one with the rows so far.
pub fn run(
    plan: &ComparePlan<'_>,
    target: &dyn Target,
    profile: &Profile,
    monitor: &SystemMonitor,
    stop: &AtomicBool,
) -> Result<Vec<Row>, Error> {
    let mut rows = Vec::new();
    for engine in ["psync", "io_uring"] {
        if stop.load(Ordering::Relaxed) {
            return Ok(rows);
        }
        rows.push(fio_run(plan, engine)?);
    }
    for s in [StrategyChoice::Fixed(Strategy::Block), StrategyChoice::Fixed(Strategy::Spin), StrategyChoice::Smart] {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let js = JobSpec { strategy: s, ..plan.spec.clone() };
        let r = run_job(target, &js, profile, monitor, stop)?;
        rows.push(Row {
            record_type: "compare_fio",
            tool: "smartcon",
            method: s.name().to_string(),
            iops: r.iops,
            lat_ns_mean: r.lat_ns_mean,
            lat_ns_p50: r.lat_ns_p50 as f64,
            lat_ns_p99: r.lat_ns_p99 as f64,
            cpu_pct: r.cpu_user_pct + r.cpu_sys_pct,
            ctx_switches: r.ctx_voluntary + r.ctx_involuntary,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIO: &str = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{"jobs":[{"usr_cpu":1.5,"sys_cpu":10.0,"ctx":1234,
  "read":{"iops":20000.5,"lat_ns":{"mean":49000.0},"clat_ns":{"percentile":{"50.000000":48128,"99.000000":90112}}},
  "write":{"iops":0}}]}"#;

    #[test]
    fn fio_output_after_notes_parses_into_a_row() {
        let r = parse_fio_json(FIO, Op::Read, "psync").unwrap();
        assert_eq!((r.iops, r.lat_ns_mean, r.lat_ns_p50, r.lat_ns_p99), (20000.5, 49000.0, 48128.0, 90112.0));
        assert_eq!((r.cpu_pct, r.ctx_switches, r.method.as_str()), (11.5, 1234, "psync"));
        let w = parse_fio_json(FIO, Op::Write, "psync").unwrap();
        assert_eq!(w.iops, 0.0);
        assert!(w.lat_ns_p50.is_nan(), "a missing figure is NaN, not 0");
    }

    #[test]
    fn truncated_or_foreign_output_is_an_error_never_a_panic() {
        for cut in 0..FIO.len() {
            // Every prefix is either no JSON, or JSON that does not parse (an error), or
            // (the whole text) a row: never a panic.
            if let Ok(r) = parse_fio_json(&FIO[..cut], Op::Read, "io_uring") {
                assert_eq!(r.tool, "fio");
            }
        }
        assert_eq!(parse_fio_json("fio: command not found", Op::Read, "x").unwrap_err().kind, ErrorKind::Setup);
        let odd = parse_fio_json(r#"{"jobs":"none"}"#, Op::Read, "x").unwrap();
        assert_eq!(odd.iops, 0.0);
    }
}

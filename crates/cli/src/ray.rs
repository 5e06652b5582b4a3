//! Hands a plan to the Ray driver (python/smartcon_ray) and waits for it: `emulate replay
//! --ray` and `smartcon fleet`. smartcon computes the plan (one `plan_point` record per
//! point, each the smartcon arguments that run it), the driver runs one Ray task per point
//! or host and writes `results.jsonl`, then calls `smartcon report` on it, so a sweep on a
//! cluster and the same sweep run here produce the same records and the same report.
//!
//! The driver is a Python program: `$SMARTCON_RAY_PYTHON` (default `python3`) with the
//! smartcon_ray package importable (`pip install ./python`). Non-goals: scheduling,
//! queueing or storing results; Ray does the first two, one results file the third.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use crate::common::interrupted;

/// The flags every command that can run on Ray shares.
#[derive(Args, Debug, Clone, Default)]
pub struct RayArgs {
    /// Run the points as Ray tasks on the cluster at ADDRESS (host:port, or `auto` for the
    /// cluster this machine belongs to); the report goes to --out.
    #[arg(long, value_name = "ADDRESS")]
    pub ray: Option<String>,
    /// Ship this smartcon binary to the workers in the tasks' runtime environment, instead
    /// of running it by its path on every node (which must then hold it).
    #[arg(long, requires = "ray")]
    pub ray_ship: bool,
    /// Times a task is retried after its worker or node was lost.
    #[arg(long, default_value_t = 2, requires = "ray")]
    pub ray_retries: u32,
}

/// One point of a plan: a name for progress and failures, and the smartcon arguments that
/// run it (with `--json`; the driver adds nothing but the binary's path).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PlanPoint {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub index: usize,
    pub name: String,
    pub args: Vec<String>,
}

impl PlanPoint {
    pub fn new(index: usize, name: String, args: Vec<String>) -> PlanPoint {
        assert!(args.iter().any(|a| a == "--json"), "a plan point's records are JSON Lines");
        PlanPoint { record_type: "plan_point", index, name, args }
    }
}

fn python() -> String {
    std::env::var("SMARTCON_RAY_PYTHON").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| "python3".into())
}

/// Runs `python -m smartcon_ray MODE ...` with `out` claimed for it; returns when the
/// driver has written `out/results.jsonl` and the report. A Ctrl-C reaches the driver
/// (it is in the same process group on a terminal; SIGTERM is passed on), which cancels
/// every task and exits; smartcon then exits 130.
/// `out_dir` is the report directory the caller claimed (crate::paths::out_dir): the driver
/// writes into its temporary name, which becomes the directory once results exist.
pub fn run_driver(
    mode: &str,
    ray: &RayArgs,
    out_dir: crate::paths::OutDir,
    plan: Option<&[PlanPoint]>,
    extra: &[String],
) -> Result<()> {
    let address = ray.ray.as_deref().context("--ray ADDRESS")?;
    let out = out_dir.dir().to_path_buf();
    let out = out.as_path();
    let exe = std::env::current_exe().context("the smartcon binary's path")?;
    let mut cmd = Command::new(python());
    cmd.args(["-m", "smartcon_ray", mode, "--address", address, "--out"])
        .arg(out)
        .arg("--smartcon")
        .arg(&exe)
        .args(["--retries", &ray.ray_retries.to_string()]);
    if ray.ray_ship {
        cmd.arg("--ship");
    }
    if let Some(points) = plan {
        let path: PathBuf = out.join("plan.jsonl");
        let mut text = String::new();
        for p in points {
            text += &serde_json::to_string(p)?;
            text.push('\n');
        }
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
        cmd.arg("--plan").arg(&path);
    }
    if !extra.is_empty() {
        cmd.arg("--").args(extra);
    }
    let mut child = cmd.spawn().with_context(|| {
        format!("start the Ray driver ({}): install it with `pip install ./python` (docs/distributed.md)", python())
    })?;
    let mut signalled = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if interrupted() && !signalled {
            signalled = true;
            // SAFETY: kill(2) on our own child's pid, which try_wait has not reaped yet.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let ran = out.join("results.jsonl").exists();
    if ran {
        out_dir.commit()?;
    } else {
        // Nothing ran: the claimed directory goes (a rerun may use the name).
        drop(out_dir);
    }
    if interrupted() {
        return Ok(());
    }
    match status.code() {
        Some(_) if !ran => bail!("the Ray driver did not run the plan ({status}; its message is above)"),
        Some(0) => Ok(()),
        Some(3) => {
            Err(crate::common::RunFailure("some points failed or were lost; the report names them".into()).into())
        }
        _ => bail!("the Ray driver failed ({status}); see its messages above"),
    }
}

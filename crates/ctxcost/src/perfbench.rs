//! `perf bench sched pipe`, pinned to one CPU, as an outside check on the ring.
//!
//! perf's two processes ping-pong through two pipes; one "op" is a round trip, i.e. two
//! context switches with their pipe work, so usecs/op / 2 is comparable with the ring's raw
//! two-process figure (before the single-process pipe work is subtracted).

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::{interrupted, os, Error};

/// What perf said, or why it was not run.
#[derive(Debug, Clone, PartialEq)]
pub enum PerfOutcome {
    /// Microseconds per context switch (usecs/op / 2).
    UsPerSwitch(f64),
    Skipped(String),
}

/// Extracts usecs/op from perf's output.
pub fn parse_usecs_per_op(output: &str) -> Option<f64> {
    output.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let value = words.next()?.parse::<f64>().ok()?;
        (words.next()? == "usecs/op").then_some(value)
    })
}

/// Runs `perf bench sched pipe -l loops` pinned to `cpu`; at most 60 s.
pub fn perf_sched_pipe(cpu: usize, loops: u64, stop: &AtomicBool) -> Result<PerfOutcome, Error> {
    let mut command = Command::new("perf");
    command
        .args(["bench", "sched", "pipe", "-l", &loops.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: pre_exec runs in the forked child before exec; sched_setaffinity is a plain
    // syscall on a stack-local set and is async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(PerfOutcome::Skipped("perf is not installed".into()))
        }
        Err(e) => return Ok(PerfOutcome::Skipped(format!("perf did not start: {e}"))),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(_status) = child.try_wait().map_err(|source| os("waiting for perf", source))? {
            break;
        }
        if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            if stop.load(Ordering::Relaxed) {
                return Err(interrupted());
            }
            return Ok(PerfOutcome::Skipped("perf bench took more than 60 s".into()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let output = child.wait_with_output().map_err(|source| os("reading perf output", source))?;
    let text = String::from_utf8_lossy(&output.stdout);
    match parse_usecs_per_op(&text) {
        Some(us) if output.status.success() => Ok(PerfOutcome::UsPerSwitch(us / 2.0)),
        _ => Ok(PerfOutcome::Skipped(format!(
            "perf bench sched pipe failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).lines().next().unwrap_or("")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_perf_output() {
        let out = "# Running 'sched/pipe' benchmark:\n\n     Total time: 0.422 [sec]\n\n       4.224310 usecs/op\n         236725 ops/sec\n";
        assert_eq!(parse_usecs_per_op(out), Some(4.224310));
        assert_eq!(parse_usecs_per_op("nothing"), None);
    }
}

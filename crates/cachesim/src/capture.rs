//! Capturing a real program's memory accesses with valgrind's lackey, and running
//! valgrind's cachegrind on a program for the crosscheck.
//!
//! Capture runs `valgrind --tool=lackey --trace-mem=yes PROGRAM ARGS...`, reads lackey's
//! trace from its own pipe as it is produced (a trace never sits on disk as text) and
//! writes the compact binary format of [`crate::trace`]. The program's stdout is discarded
//! so it cannot mix with a caller's output; its stderr is kept only for error messages.
//! Output goes to a temporary name and is renamed only on success, so a failed capture
//! leaves nothing behind. This is the only module of the crate that spawns processes.
//!
//! Non-goals: other valgrind tools, and refusing an existing output (the caller decides).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::geometry::Geometry;
use crate::study::{cachegrind_geometry, parse_cachegrind};
use crate::trace::{convert_lackey, TraceWriter};
use crate::{Error, ErrorKind, Result};

fn tool(detail: String) -> Error {
    Error::new(ErrorKind::Setup, detail)
}

/// Checks that valgrind runs at all, with a hint when it is missing.
pub fn valgrind_version() -> Result<String> {
    let out = Command::new("valgrind").arg("--version").output().map_err(|e| {
        tool(if e.kind() == std::io::ErrorKind::NotFound {
            "valgrind is not installed (apt-get install valgrind)".to_string()
        } else {
            format!("cannot run valgrind: {e}")
        })
    })?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Non-trace lines kept for the error message of a failed capture.
const CAPTURE_NOTES_MAX: usize = 12;

/// Captures `program` under lackey into `out` (written under a temporary name first).
pub fn capture(program: &[String], out: &Path) -> Result<u64> {
    valgrind_version()?;
    let Some((exe, rest)) = program.split_first() else { return Err(tool("no program given after --".into())) };
    let tmp = out.with_extension(format!("partial-{}", std::process::id()));
    let result = capture_into(exe, rest, &tmp);
    match result {
        Ok(records) => {
            std::fs::rename(&tmp, out)
                .map_err(|e| crate::error::io(format_args!("cannot rename to {}", out.display()), e))?;
            Ok(records)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn capture_into(exe: &str, args: &[String], tmp: &Path) -> Result<u64> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // lackey's trace goes to its own pipe (--log-fd), never through stderr: the program's
    // stderr would interleave with it mid-line and garble trace lines.
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(crate::error::io("cannot create a pipe", std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned only by us.
    let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let write_fd = fds[1];
    let mut command = Command::new("valgrind");
    command
        .args(["--tool=lackey", "--trace-mem=yes", &format!("--log-fd={write_fd}")])
        .arg(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: between fork and exec only async-signal-safe calls: fcntl clears CLOEXEC on
    // the write end so valgrind inherits it under the same number.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(move || {
            if libc::fcntl(write_fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().map_err(|e| tool(format!("cannot start valgrind: {e}")))?;
    drop(write_end);
    // The program's stderr and valgrind's startup errors: keep the last lines for messages.
    let Some(stderr) = child.stderr.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(tool("valgrind's stderr was not piped".into()));
    };
    let notes_thread = std::thread::spawn(move || {
        let mut notes: VecDeque<String> = VecDeque::new();
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            let line = line.trim_start_matches(|c: char| c == '=' || c.is_ascii_digit()).trim().to_string();
            if !line.is_empty() {
                if notes.len() == CAPTURE_NOTES_MAX {
                    notes.pop_front();
                }
                notes.push_back(line);
            }
        }
        notes
    });
    let mut writer = TraceWriter::create(tmp)?;
    let log = std::fs::File::from(read_end);
    // Strict: the log fd carries only lackey's trace and valgrind's `==pid==` lines.
    let converted = convert_lackey(BufReader::with_capacity(1 << 20, log), true, |r| writer.push(r), |_| {});
    let status = child.wait().map_err(|e| tool(format!("waiting for valgrind: {e}")))?;
    let notes = notes_thread.join().unwrap_or_default();
    let interesting = || notes.back().cloned().unwrap_or_else(|| "no message".into());
    let stats = converted?;
    if stats.records == 0 {
        return Err(tool(format!("valgrind could not run {exe:?}: {}", interesting())));
    }
    if !status.success() {
        return Err(tool(format!("{exe:?} failed under valgrind ({status}): {}", interesting())));
    }
    writer.finish()?;
    Ok(stats.records)
}

/// Runs cachegrind on `program` with I1 = D1 = `l1` and LL = `ll`, writing its output file
/// to `out`, and returns its summary as (event, count) pairs.
pub fn run_cachegrind(program: &[String], l1: &Geometry, ll: &Geometry, out: &Path) -> Result<Vec<(String, u64)>> {
    let output = Command::new("valgrind")
        .arg("--tool=cachegrind")
        .arg("--cache-sim=yes")
        .arg(format!("--I1={}", cachegrind_geometry(l1)))
        .arg(format!("--D1={}", cachegrind_geometry(l1)))
        .arg(format!("--LL={}", cachegrind_geometry(ll)))
        .arg(format!("--cachegrind-out-file={}", out.display()))
        .args(program)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| tool(format!("cannot start valgrind: {e}")))?;
    if !output.status.success() {
        let text = String::from_utf8_lossy(&output.stderr);
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim_start_matches(|c: char| c == '=' || c.is_ascii_digit()).trim().is_empty());
        return Err(tool(format!("cachegrind failed ({}): {}", output.status, last.unwrap_or(""))));
    }
    let text = std::fs::read_to_string(out).map_err(|e| tool(format!("cachegrind wrote no {}: {e}", out.display())))?;
    parse_cachegrind(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{convert_lackey_file, TraceReader};

    /// Capture through the pipe and convert lackey's --log-file text of the same program:
    /// both read back and agree (the loader's first accesses are deterministic).
    #[test]
    fn capture_and_convert_round_trip_where_valgrind_is_installed() {
        if valgrind_version().is_err() {
            eprintln!("skipped: valgrind is not installed (apt-get install valgrind)");
            return;
        }
        // Removed when dropped, also when the test panics.
        let scratch = tempfile::Builder::new().prefix("smartcon-capture-").tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let captured = dir.join("true.sct");
        let n = capture(&["/bin/true".to_string()], &captured).unwrap();
        let a = TraceReader::read_all(&captured).unwrap();
        assert_eq!(a.len() as u64, n);
        assert!(n > 10_000, "{n} records");
        let text = dir.join("true.lackey");
        let status = Command::new("valgrind")
            .args(["--tool=lackey", "--trace-mem=yes"])
            .arg(format!("--log-file={}", text.display()))
            .arg("/bin/true")
            .status()
            .unwrap();
        assert!(status.success());
        let converted = dir.join("true2.sct");
        convert_lackey_file(&text, &converted).unwrap();
        let b = TraceReader::read_all(&converted).unwrap();
        assert_eq!(a[..1000], b[..1000]);
        let diff = a.len().abs_diff(b.len()) as f64 / a.len() as f64;
        assert!(diff < 0.01, "{} vs {} records", a.len(), b.len());
        // A failing program is an error and leaves no file.
        let failed = dir.join("fail.sct");
        assert!(capture(&["/bin/false".to_string()], &failed).is_err());
        assert!(!failed.exists());
    }
}

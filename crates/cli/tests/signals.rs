//! Issue 29's signal discipline, for every long-running command: one SIGINT, two SIGINTs
//! (the second must not cut the removal short), SIGINT through `timeout`, and SIGKILL then
//! `smartcon cleanup`. Each ends with nothing of the run left: no output (each run is given
//! outputs that must not exist afterwards), nothing in its TMPDIR, no record in its
//! SMARTCON_HOME, and (for `run`) no program still running.
//!
//! No timing is asserted: each run gets a second to start, and the time from SIGINT to exit
//! (seen without reaping, so it is not rounded up to the second signal's moment) is printed
//! (the figure); the limit below only decides when a run has hung.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_smartcon");
const EXIT_SECONDS_MAX: u64 = 60;

struct Env {
    /// Removed when the Env is dropped (also when the test panics).
    _scratch: tempfile::TempDir,
    root: PathBuf,
}

impl Env {
    fn new(name: &str) -> Env {
        let scratch = tempfile::Builder::new().prefix(&format!("smartcon-signals-{name}-")).tempdir().unwrap();
        let root = scratch.path().to_path_buf();
        for d in ["home", "tmp", "out"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        Env { _scratch: scratch, root }
    }

    fn out(&self, name: &str) -> String {
        self.root.join("out").join(name).to_str().unwrap().to_string()
    }

    fn command(&self, program: &str, args: &[String]) -> Command {
        let mut c = Command::new(program);
        c.args(args)
            .env("SMARTCON_HOME", self.root.join("home"))
            .env("TMPDIR", self.root.join("tmp"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own process group, so `kill -INT -PGID` is a terminal's Ctrl-C.
        c.process_group(0);
        c
    }

    /// What is left: every name under out/ and tmp/, and the records under home/.
    fn left(&self) -> Vec<String> {
        let mut names = Vec::new();
        for d in ["out", "tmp", "home/devices", "home/mounts", "home/outputs"] {
            if let Ok(entries) = std::fs::read_dir(self.root.join(d)) {
                names.extend(entries.flatten().map(|e| format!("{d}/{}", e.file_name().to_string_lossy())));
            }
        }
        names
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid or a process group of a child this test started.
    unsafe { libc::kill(pid, sig) };
}

/// Waits for the child (bounded); its status code or the signal that ended it.
fn wait(child: &mut Child) -> (Option<i32>, f64) {
    let started = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return (s.code(), started.elapsed().as_secs_f64());
        }
        if started.elapsed() > Duration::from_secs(EXIT_SECONDS_MAX) {
            let _ = child.kill();
            let _ = child.wait();
            return (None, started.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether the child has exited, without reaping it (waitid with WNOWAIT).
fn exited_unreaped(pid: u32) -> bool {
    // SAFETY: waitid writes only the zeroed siginfo_t it is given; WNOHANG makes it return at
    // once and WNOWAIT leaves the child waitable for Child::wait.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT);
        r == 0 && info.si_pid() != 0
    }
}

fn output_of(child: &mut Child) -> (String, String) {
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut o, &mut out);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    (out, err)
}

/// A long command: its arguments (given the environment, for its output paths) and the
/// exit status an interrupted run must end with.
struct Long {
    name: &'static str,
    args: fn(&Env) -> Vec<String>,
    status: i32,
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn longs() -> Vec<Long> {
    vec![
        Long {
            name: "probe",
            args: |e| {
                let mut a = s(&["probe", "emu:nvram", "--duration", "2s", "--out"]);
                a.push(e.out("profile.json"));
                a
            },
            status: 130,
        },
        Long {
            name: "bench",
            args: |e| {
                let mut a = s(&[
                    "bench",
                    "--targets",
                    "emu:nvram",
                    "--duration",
                    "2s",
                    "--sweep-interval",
                    "1us,2us",
                    "--plot",
                ]);
                a.push(e.out("sweep.svg"));
                a
            },
            status: 130,
        },
        Long {
            name: "merge-bench",
            args: |e| {
                let mut a = s(&["merge-bench", "--duration", "2s", "--plot"]);
                a.push(e.out("merge.svg"));
                a
            },
            status: 130,
        },
        Long {
            name: "ctx",
            args: |e| {
                let mut a = s(&["ctx", "--no-perf", "--out"]);
                a.push(e.out("host.json"));
                a.push("--plot".into());
                a.push(e.out("ctx.svg"));
                a
            },
            status: 130,
        },
        Long {
            name: "ets",
            args: |e| {
                let mut a = s(&["ets", "--out"]);
                a.push(e.out("ets"));
                a
            },
            status: 130,
        },
        Long {
            name: "emulate replay --real-time",
            args: |e| {
                let trace = e.root.join("slow.iolog");
                let mut text = String::from("fio version 2 iolog\n/dev/x add\n/dev/x open\n");
                for _ in 0..600 {
                    text.push_str("/dev/x read 0 4096\n/dev/x wait 100000\n");
                }
                std::fs::write(&trace, text).unwrap();
                vec![
                    "emulate".into(),
                    "replay".into(),
                    "--device".into(),
                    "emu:nvme".into(),
                    "--real-time".into(),
                    "--trace".into(),
                    trace.to_str().unwrap().into(),
                ]
            },
            status: 130,
        },
        Long {
            name: "probe tmp:",
            args: |e| {
                // A temporary file target: after SIGKILL, `cleanup` must find it (its record
                // and owner mark), and it lives in this run's TMPDIR, which `left` checks.
                let mut a = s(&["probe", "tmp:64m", "--duration", "3s", "--out"]);
                a.push(e.out("profile.json"));
                a
            },
            status: 130,
        },
        Long {
            name: "evaluate",
            args: |e| {
                let mut a = s(&["evaluate", "--tiny", "--skip-polling", "--targets", "tmp:16m,emu:nvme", "--out"]);
                a.push(e.out("report"));
                a
            },
            status: 130,
        },
        Long {
            name: "emulate sweep",
            args: |e| {
                // Its source tree goes to TMPDIR (`smartcon-sweep-PID`): nothing of it may stay.
                let mut a = s(&["emulate", "sweep", "--device", "emu:nvme", "--speedups", "1,5,10,20,50", "--out"]);
                a.push(e.out("sweep"));
                a
            },
            status: 130,
        },
        Long {
            name: "trace convert",
            args: |e| {
                let mut a = s(&["trace", "convert", "--lackey", lackey_input().to_str().unwrap(), "--out"]);
                a.push(e.out("t.trace"));
                a
            },
            status: 130,
        },
        Long {
            name: "run",
            args: |e| {
                let mut a = s(&["run", "--stats"]);
                a.push(e.out("stats.jsonl"));
                a.extend(s(&["--", "sleep", "30"]));
                a
            },
            // sleep ends by the forwarded SIGINT: 128 + 2, passed through.
            status: 130,
        },
    ]
}

/// One lackey input for every `trace convert` run (about 200 MB, several seconds of
/// converting), made once and removed when the test ends ([`LackeyInputRemoved`]).
static LACKEY_INPUT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn lackey_input() -> PathBuf {
    LACKEY_INPUT
        .get_or_init(|| {
            let file = tempfile::Builder::new().prefix("smartcon-signals-lackey-").suffix(".txt").tempfile().unwrap();
            let mut text = Vec::with_capacity(201 << 20);
            let mut x: u32 = 0x9e37_79b9;
            while text.len() < 200 << 20 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                text.extend_from_slice(format!(" L {x:08x},8\n").as_bytes());
            }
            std::fs::write(file.path(), text).unwrap();
            // Kept past this function; the test's LackeyInputRemoved removes it.
            file.into_temp_path().keep().unwrap()
        })
        .clone()
}

/// Removes the lackey input when dropped, so a panicking test does not leave 200 MB behind.
struct LackeyInputRemoved;

impl Drop for LackeyInputRemoved {
    fn drop(&mut self) {
        if let Some(path) = LACKEY_INPUT.get() {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum How {
    /// SIGINT to smartcon's pid (kill -INT).
    One,
    /// Ctrl-C at a terminal: SIGINT to the whole process group.
    Group,
    /// Two SIGINTs 0.35 s apart: beyond the 0.3 s in which the handler counts signals as one
    /// request, so the second lands while a slower command (ets, evaluate) is still removing.
    Two,
    /// `timeout -s INT 1 smartcon ...`
    Timeout,
    /// SIGKILL, then `smartcon cleanup`.
    Kill,
}

#[test]
fn every_long_command_stops_on_a_signal_and_leaves_nothing() {
    let _lackey = LackeyInputRemoved;
    let hows = [How::One, How::Group, How::Two, How::Timeout, How::Kill];
    let mut failures = Vec::new();
    let mut lines = Vec::new();
    for long in longs() {
        // The five ways side by side, each in its own scratch world.
        let runs: Vec<_> = hows
            .iter()
            .map(|&how| {
                let env = Env::new(&format!("{}-{how:?}", long.name.replace([' ', '-'], "_")));
                let args = (long.args)(&env);
                let child = match how {
                    How::Timeout => {
                        let mut a = s(&["-s", "INT", "1", BIN]);
                        a.extend(args.iter().cloned());
                        env.command("timeout", &a).spawn().unwrap()
                    }
                    _ => env.command(BIN, &args).spawn().unwrap(),
                };
                (how, env, child, Instant::now())
            })
            .collect();
        std::thread::sleep(Duration::from_millis(1000));
        let mut sent = Vec::new();
        for (how, _, child, _) in &runs {
            let pid = child.id() as i32;
            match how {
                How::One | How::Two => signal(pid, libc::SIGINT),
                How::Group => signal(-pid, libc::SIGINT),
                How::Kill => signal(pid, libc::SIGKILL),
                How::Timeout => {}
            }
            sent.push(Instant::now());
        }
        // Each run's exit is seen without reaping it (a zombie keeps its pid, so the second
        // SIGINT of `Two`, half a second after the first, never reaches another process).
        let mut exited: Vec<Option<Instant>> = vec![None; runs.len()];
        let mut second_sent = false;
        let polling = Instant::now();
        while polling.elapsed() < Duration::from_secs(EXIT_SECONDS_MAX) {
            for (i, (_, _, child, _)) in runs.iter().enumerate() {
                if exited[i].is_none() && exited_unreaped(child.id()) {
                    exited[i] = Some(Instant::now());
                }
            }
            if !second_sent && polling.elapsed() >= Duration::from_millis(350) {
                for (how, _, child, _) in &runs {
                    if let How::Two = how {
                        signal(child.id() as i32, libc::SIGINT);
                    }
                }
                second_sent = true;
            }
            if second_sent && exited.iter().all(Option::is_some) {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        for (((how, env, mut child, spawned), sent), exited) in runs.into_iter().zip(sent).zip(exited) {
            let (code, _) = wait(&mut child);
            // From the (first) signal to the exit: `timeout` sends its own 1 s after start, when the
            // others get theirs (at 1.5 s a quiet machine had finished the sweep and the convert).
            let signalled = if matches!(how, How::Timeout) { spawned + Duration::from_millis(1000) } else { sent };
            let seconds = exited.unwrap_or_else(Instant::now).saturating_duration_since(signalled).as_secs_f64();
            let (_, err) = output_of(&mut child);
            let mut cleanup = String::new();
            if let How::Kill = how {
                let out = env.command(BIN, &s(&["cleanup"])).output().unwrap();
                cleanup = String::from_utf8_lossy(&out.stdout).trim().replace('\n', "; ");
            }
            let orphan = false;
            let mut left = env.left();
            // `run` records the run it passed a signal to: one whole record, the program's status.
            if long.name == "run" && !matches!(how, How::Kill) {
                let text = std::fs::read_to_string(env.root.join("out/stats.jsonl")).unwrap_or_default();
                let record: Option<serde_json::Value> = serde_json::from_str(text.trim_end()).ok();
                if text.lines().count() == 1 && record.is_some_and(|r| r["exit_code"] == 130) {
                    left.retain(|n| n != "out/stats.jsonl");
                }
            }
            // `timeout` exits 124 when it had to send its signal, whatever the program did.
            let expected = match how {
                How::Kill => None,
                How::Timeout => Some(124),
                _ => Some(long.status),
            };
            let ok = left.is_empty() && !orphan && (expected.is_none() || code == expected);
            let line = format!(
                "{:<28} {:<8} exit {:<6} {:>5.2} s after the signal{}{}, left {:?}",
                long.name,
                format!("{how:?}"),
                code.map_or("signal".into(), |c| c.to_string()),
                seconds,
                if cleanup.is_empty() { String::new() } else { format!(", cleanup: {cleanup}") },
                if orphan { ", the program still runs" } else { "" },
                left
            );
            lines.push(line.clone());
            if !ok {
                let last = err.trim_end().lines().last().unwrap_or("").to_string();
                failures.push(format!("{line}; expected exit {expected:?}; last stderr line {last:?}"));
            }
        }
        // `run`: the program must not outlive smartcon, whichever way smartcon ended (after
        // SIGKILL the kernel sends it SIGTERM). The five runs were side by side, so this is
        // checked once all of them ended, with a bounded wait for the last to be reaped.
        if long.name == "run" {
            let running =
                || Command::new("pgrep").args(["-f", "^sleep 30$"]).output().is_ok_and(|o| !o.stdout.is_empty());
            let since = Instant::now();
            while running() && since.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
            if running() {
                failures.push("run: the program outlived smartcon".into());
                let _ = Command::new("pkill").args(["-f", "^sleep 30$"]).status();
            }
        }
    }
    eprintln!("{}", lines.join("\n"));
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n"));
}

/// `smartcon run` passes its program's status through, also when the program dies of a
/// signal, and says so instead of "no process loaded the library".
#[test]
fn run_passes_a_killed_programs_status_and_says_why() {
    let env = Env::new("run-status");
    let out = env.command(BIN, &s(&["run", "--", "sh", "-c", "kill -TERM $$"])).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{err}");
    assert!(!err.contains("no process loaded the library"), "{err}");
}

fn mounted(dir: &Path) -> bool {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let d = dir.to_str().unwrap();
    text.lines().any(|l| l.split(' ').nth(1) == Some(d))
}

fn fuse_mounts() -> usize {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    text.lines().filter(|l| l.starts_with("smartcon-emu")).count()
}

/// `emulate mount` (root, FUSE): one SIGINT, two, SIGINT through `timeout` (the issue's
/// leak: the ext4 mount, the loop device and the dead FUSE mount were left), SIGKILL then
/// cleanup. Each ends with no mount at DIR, no FUSE mount of smartcon's and no record.
#[test]
fn emulate_mount_ends_cleanly_on_signals() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: emulate mount needs root and /dev/fuse");
        return;
    }
    let fuse_before = fuse_mounts();
    let mut failures = Vec::new();
    for how in [How::One, How::Two, How::Timeout, How::Kill] {
        let env = Env::new(&format!("mount-{how:?}"));
        let dir = env.root.join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let args = vec!["emulate".into(), "mount".into(), "emu:nvme".into(), dir.to_str().unwrap().to_string()];
        // Up to 60 s to come up; `timeout` sends its SIGINT 20 s after the start.
        let spawned = Instant::now();
        let mut child = match how {
            How::Timeout => {
                let mut a = s(&["-s", "INT", "20", BIN]);
                a.extend(args.iter().cloned());
                env.command("timeout", &a).spawn().unwrap()
            }
            _ => env.command(BIN, &args).spawn().unwrap(),
        };
        let up = Instant::now();
        while !mounted(&dir) && up.elapsed() < Duration::from_secs(60) && child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(50));
        }
        if !mounted(&dir) {
            let _ = child.kill();
            let (_, err) = output_of(&mut child);
            eprintln!("skipped {how:?}: the mount did not come up: {}", err.trim_end().lines().last().unwrap_or(""));
            continue;
        }
        let pid = child.id() as i32;
        let sent = Instant::now();
        match how {
            How::One => signal(pid, libc::SIGINT),
            How::Two => {
                signal(pid, libc::SIGINT);
                std::thread::sleep(Duration::from_millis(500));
                signal(pid, libc::SIGINT);
            }
            How::Kill => signal(pid, libc::SIGKILL),
            _ => {}
        }
        let (code, _) = wait(&mut child);
        let signalled = if matches!(how, How::Timeout) { spawned + Duration::from_secs(20) } else { sent };
        let seconds = Instant::now().saturating_duration_since(signalled).as_secs_f64();
        let mut cleanup = String::new();
        if let How::Kill = how {
            let out = env.command(BIN, &s(&["cleanup"])).output().unwrap();
            cleanup = String::from_utf8_lossy(&out.stdout).trim().replace('\n', "; ");
        }
        let left = env.left();
        let still = mounted(&dir);
        let fuse = fuse_mounts() > fuse_before;
        eprintln!(
            "emulate mount {how:?}: exit {code:?} {seconds:.2} s after the signal, mount left {still}, FUSE mount left {fuse}, records {left:?}{}",
            if cleanup.is_empty() { String::new() } else { format!(", cleanup: {cleanup}") }
        );
        let expected = if matches!(how, How::Timeout) { 124 } else { 130 };
        if still || fuse || !left.is_empty() || (!matches!(how, How::Kill) && code != Some(expected)) {
            failures.push(format!("{how:?}: exit {code:?}, mount left {still}, FUSE left {fuse}, records {left:?}"));
            let _ = Command::new(BIN).arg("cleanup").env("SMARTCON_HOME", env.root.join("home")).status();
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

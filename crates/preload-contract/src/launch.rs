//! Starting a command with `libsmartcon.so` preloaded, and waiting for it: the one launcher
//! of `smartcon run` and `smartcon emulate sweep` (`emulate vm` sets the same environment
//! with [`Launch::apply`] and runs its guest kernel its own way, in a process group).
//!
//! - The library goes first in `LD_PRELOAD`, before whatever the caller's environment
//!   preloads, so its interposed calls are the ones the program binds to.
//! - The command gets SIGTERM if the thread that started it dies (`PR_SET_PDEATHSIG`), so it
//!   is never left running orphaned when smartcon is killed.
//! - While it runs, the caller is asked every [`POLL_MS`] ms which signal, if any, to send
//!   it (Ctrl-C passed on, or a stop escalated to SIGKILL: [`Escalation`]).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::env::{PreloadEnv, LIBRARY_FILE};

/// How often a running command's caller is asked for a signal to send.
pub const POLL_MS: u64 = 10;

/// The library beside a binary in `dir`, as cargo builds it (`target/release/` or its
/// `deps/`).
pub fn library_in(dir: &Path) -> Option<PathBuf> {
    [dir.join(LIBRARY_FILE), dir.join("deps").join(LIBRARY_FILE)].into_iter().find(|p| p.exists())
}

/// The library and what it is asked to do.
#[derive(Debug, Clone)]
pub struct Launch {
    pub library: PathBuf,
    pub env: PreloadEnv,
}

impl Launch {
    /// Sets `LD_PRELOAD` (this library first) and the library's variables on `cmd`.
    pub fn apply(&self, cmd: &mut Command) {
        let old = std::env::var_os("LD_PRELOAD").unwrap_or_default();
        let mut preload = self.library.as_os_str().to_os_string();
        preload.push(":");
        preload.push(old);
        cmd.env("LD_PRELOAD", preload).envs(self.env.vars());
    }
}

/// Starts `cmd` and waits for it. Every [`POLL_MS`] ms `signal_to_send` says which signal
/// to send it now (`None`: none). The command gets SIGTERM if the calling thread dies first.
pub fn run(cmd: &mut Command, signal_to_send: impl FnMut() -> Option<libc::c_int>) -> std::io::Result<ExitStatus> {
    wait_for(cmd, false, signal_to_send)
}

/// [`run`] for a command that needs no terminal, in a process group of its own: a signal
/// goes to the whole group, so a shell's children (a `tar` in `sh -c '... | ...'`) stop
/// with it rather than go on writing into files the caller is about to remove. Once the
/// command has ended after a signal was sent, what is left of its group gets SIGKILL.
pub fn run_group(
    cmd: &mut Command,
    signal_to_send: impl FnMut() -> Option<libc::c_int>,
) -> std::io::Result<ExitStatus> {
    wait_for(cmd, true, signal_to_send)
}

fn wait_for(
    cmd: &mut Command,
    group: bool,
    mut signal_to_send: impl FnMut() -> Option<libc::c_int>,
) -> std::io::Result<ExitStatus> {
    use std::os::unix::process::CommandExt;
    if group {
        cmd.process_group(0);
    }
    // SAFETY: prctl is async-signal-safe and touches only the child's own attributes; the
    // closure allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id() as libc::pid_t;
    // In a group of its own, the group's id is the child's pid.
    let target = if group { -pid } else { pid };
    let mut signalled = false;
    loop {
        if let Some(status) = child.try_wait()? {
            if group && signalled {
                // SAFETY: kill(2) takes no pointers. The group id was the child's pid; a group
                // lives while any member does, so while the id is in use it is still this
                // group (a new process cannot take a pid that names a live group); with no
                // member left the call fails with ESRCH and does nothing.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
            return Ok(status);
        }
        if let Some(signal) = signal_to_send() {
            signalled = true;
            // SAFETY: kill(2) on our own unreaped child (its pid cannot have been reused) or
            // on the group it leads (whose id cannot be reused while the leader is unreaped).
            unsafe { libc::kill(target, signal) };
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

/// A stop that escalates: SIGTERM from the moment the caller is told to stop, SIGKILL once
/// the command has not ended within the grace period.
#[derive(Debug)]
pub struct Escalation {
    grace: Duration,
    since: Option<Instant>,
}

impl Escalation {
    pub fn new(grace: Duration) -> Escalation {
        Escalation { grace, since: None }
    }

    /// The signal to send now, given whether a stop was asked for.
    pub fn signal(&mut self, stop_requested: bool) -> Option<libc::c_int> {
        if !stop_requested {
            return None;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        Some(if since.elapsed() < self.grace { libc::SIGTERM } else { libc::SIGKILL })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_is_sigterm_then_sigkill_after_the_grace() {
        let mut e = Escalation::new(Duration::ZERO);
        assert_eq!(e.signal(false), None);
        assert_eq!(e.signal(true), Some(libc::SIGKILL), "no grace: straight to SIGKILL");
        let mut e = Escalation::new(Duration::from_secs(3600));
        assert_eq!(e.signal(true), Some(libc::SIGTERM));
    }

    #[test]
    fn the_library_goes_first_and_a_signal_reaches_the_command() {
        let launch = Launch { library: "/nonexistent/libsmartcon.so".into(), env: PreloadEnv::default() };
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exec sleep 30"]);
        launch.apply(&mut cmd);
        let preload = cmd.get_envs().find(|(k, _)| *k == "LD_PRELOAD").and_then(|(_, v)| v).unwrap();
        assert!(preload.to_string_lossy().starts_with("/nonexistent/libsmartcon.so:"), "{preload:?}");
        // The loader only warns about a missing preload object.
        cmd.stderr(std::process::Stdio::null());
        let mut asked = 0;
        let status = run(&mut cmd, || {
            asked += 1;
            (asked > 2).then_some(libc::SIGTERM)
        })
        .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    }

    /// A shell's child must stop with the shell: sent to the group, the signal reaches the
    /// `sleep` that `sh` started in the background (with [`run`] it would go on alone).
    #[test]
    fn a_group_run_stops_the_commands_children_too() {
        let pid_file = std::env::temp_dir().join(format!("smartcon-launch-{}-group", std::process::id()));
        let _ = std::fs::remove_file(&pid_file);
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!("sleep 30 & echo $! > '{}'; wait", pid_file.display()));
        let mut asked = 0;
        let status = run_group(&mut cmd, || {
            asked += 1;
            // Ask only once the background sleep has started and said its pid.
            (pid_file.exists() && asked > 2).then_some(libc::SIGTERM)
        })
        .unwrap();
        assert!(!status.success(), "{status:?}");
        let text = std::fs::read_to_string(&pid_file).unwrap();
        let _ = std::fs::remove_file(&pid_file);
        let child: u32 = text.trim().parse().unwrap();
        // Reparented, it may stay a zombie for a moment until its new parent reaps it.
        let alive = || {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
                .unwrap_or(false)
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(), "the shell's child {child} outlived the group's stop");
    }
}

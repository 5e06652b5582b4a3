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
pub fn run(cmd: &mut Command, mut signal_to_send: impl FnMut() -> Option<libc::c_int>) -> std::io::Result<ExitStatus> {
    use std::os::unix::process::CommandExt;
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
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if let Some(signal) = signal_to_send() {
            // SAFETY: kill(2) on the pid of our own unreaped child: it cannot have been reused.
            unsafe { libc::kill(pid, signal) };
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
}

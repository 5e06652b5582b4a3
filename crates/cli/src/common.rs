//! Pieces every subcommand shares: error classification and exit codes, JSON Lines output,
//! progress (a bar on a terminal, a line per finished step in logs), and Ctrl-C handling.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// A run that started correctly but failed (a verification mismatch, an I/O error in the
/// middle of a run). Exits 1; every other error is a usage or setup error and exits 2.
#[derive(Debug)]
pub struct RunFailure(pub String);

impl std::fmt::Display for RunFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RunFailure {}

/// Prints the error with its causes on one line and returns the exit status.
pub fn report_error(error: &anyhow::Error) -> i32 {
    eprintln!("{}", error_line(error));
    if error.downcast_ref::<RunFailure>().is_some() {
        1
    } else {
        2
    }
}

/// The error and its causes as the one line [`report_error`] prints.
fn error_line(error: &anyhow::Error) -> String {
    let mut line = format!("smartcon: error: {error}");
    for cause in error.chain().skip(1) {
        // The workspace's error keeps its cause's text in its message and the cause as its
        // source: printed once.
        let cause = cause.to_string();
        if !line.ends_with(&cause) {
            line.push_str(&format!(": {cause}"));
        }
    }
    // One line whatever a message or a path holds (a newline in a file name, a TOML
    // parser's multi-line excerpt).
    one_line(&line)
}

/// A message as one line: line breaks become "; ", other control characters are escaped.
pub fn one_line(text: &str) -> String {
    let parts: Vec<&str> = text.lines().map(str::trim_end).filter(|l| !l.trim().is_empty()).collect();
    smartcon_util::paths::escape_str(&parts.join("; "))
}

/// A command line clap refused: help and version as clap prints them, every error on one
/// line with exit status 2 (without the usage block, which `--help` shows).
pub fn exit_usage(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit()
    }
    let text = e.to_string();
    let kept: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("Usage:"))
        .filter(|l| !l.starts_with("For more information"))
        .map(str::trim)
        .collect();
    let line = one_line(&kept.join("\n"));
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    eprintln!("smartcon: error: {line}");
    std::process::exit(2)
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The exit status of every command after SIGINT or SIGTERM, as shells report a Ctrl-C.
pub const EXIT_INTERRUPTED: i32 = 130;

static LAST_SIGNAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(libc::SIGTERM);

/// The last of them.
pub fn last_signal() -> libc::c_int {
    LAST_SIGNAL.load(Ordering::SeqCst)
}

/// Signals closer than this count as one request: `timeout` sends its signal to the
/// program and then to its process group, and a terminal's Ctrl-C reaches every process of
/// the group, so one request often arrives twice.
const SAME_REQUEST_NS: i64 = 300_000_000;
static LAST_SIGNAL_NS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(i64::MIN / 2);
static FORWARD_COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// How many signals `smartcon run` should pass on to its program: those sent to smartcon by
/// a process (kill, timeout), not a terminal's, which the program (in the same process
/// group) got itself.
pub fn signals_to_forward() -> u32 {
    FORWARD_COUNT.load(Ordering::SeqCst)
}

extern "C" fn on_signal(signal: libc::c_int, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime is async-signal-safe and writes only `now`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let now_ns = now.tv_sec * 1_000_000_000 + now.tv_nsec;
    let previous_ns = LAST_SIGNAL_NS.swap(now_ns, Ordering::SeqCst);
    if now_ns - previous_ns < SAME_REQUEST_NS {
        return;
    }
    LAST_SIGNAL.store(signal, Ordering::SeqCst);
    // SAFETY: the kernel passes a valid siginfo_t with SA_SIGINFO; only si_code is read.
    let code = if info.is_null() { libc::SI_USER } else { unsafe { (*info).si_code } };
    if code != libc::SI_KERNEL {
        FORWARD_COUNT.fetch_add(1, Ordering::SeqCst);
    }
    // The first signal sets the flags (the engine's waits and fills read their own): the run
    // stops, prints what it measured, cleans up, exits 130. A later one exits at once unless
    // something smartcon created is held (devices, a mount stack, a claimed directory):
    // their removal (bounded) is not cut short, or they would be left behind.
    smartcon_engine::stop::global().store(true, Ordering::SeqCst);
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        // Claimed output files are unlinked here; a claimed directory's contents (and the
        // devices) are removed by the run itself, which the first signal already stopped.
        let held = smartcon_workloads::blockdev::held_count() + smartcon_util::paths::held_count();
        if held == 0 && !smartcon_util::paths::registered_dirs() {
            smartcon_util::paths::remove_registered();
            // SAFETY: _exit is async-signal-safe and runs nothing of the interrupted thread.
            unsafe { libc::_exit(EXIT_INTERRUPTED) };
        }
        const NOTE: &[u8] = b"smartcon: removing what it created first (kill -9, then `smartcon cleanup`)\n";
        // SAFETY: write(2) is async-signal-safe; NOTE is a valid static buffer.
        unsafe { libc::write(2, NOTE.as_ptr().cast(), NOTE.len()) };
    }
}

/// Installs a SIGINT and SIGTERM handler that only sets a flag: long runs poll
/// [`interrupted`] between steps, stop, print what they measured and clean up.
pub fn install_interrupt_handler() {
    // SAFETY: the handler touches atomics and calls async-signal-safe functions only; the
    // sigaction struct is zeroed (an empty mask) before the fields that matter are set.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
        // `smartcon devices | head` should end quietly, as Unix tools do, not panic.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The flag set by Ctrl-C (shared with the engine's stop flag by the commands).
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// The flag itself, for libraries that take an `&AtomicBool` stop signal.
pub fn interrupt_flag() -> &'static AtomicBool {
    &INTERRUPTED
}

/// Writes one JSON Lines record to stdout.
pub fn emit_json<T: Serialize>(record: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, record)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// Progress of a long run on stderr: a bar on a terminal; elsewhere (CI logs, pipes), where
/// a bar would be silent, one line per finished step. Everything but [`Progress::inc`] is
/// the bar's own API (through `Deref`), so commands use it as a `ProgressBar`.
pub struct Progress {
    bar: ProgressBar,
    what: String,
    lines: bool,
    started: std::time::Instant,
    /// With [`Progress::grouped`]: how many leading words of a step's message name its
    /// group, and the group whose steps are finishing (printed once, when it is done).
    group_words: usize,
    pending: std::sync::Mutex<Option<String>>,
}

impl Progress {
    /// Without a terminal, one line per finished group of steps (the first `words` words
    /// of their messages, e.g. load and target) instead of one per step.
    pub fn grouped(mut self, words: usize) -> Progress {
        self.group_words = words;
        self
    }

    fn line(&self, what: &str) {
        let of = self.bar.length().filter(|l| *l > 0).map_or(String::new(), |l| format!("/{l}"));
        let done = if what.is_empty() { String::new() } else { format!(": {what}") };
        let secs = self.started.elapsed().as_secs();
        eprintln!("smartcon: {} {}{of} done after {secs} s{done}", self.what, self.bar.position());
    }

    /// Marks `n` steps finished; without a terminal, prints which and how far the run is.
    pub fn inc(&self, n: u64) {
        if !self.lines {
            return self.bar.inc(n);
        }
        let message = self.bar.message();
        if self.group_words == 0 {
            self.bar.inc(n);
            return self.line(&message);
        }
        let group: Vec<&str> = message.split_whitespace().take(self.group_words).collect();
        let group = group.join(" ");
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.as_ref().is_some_and(|p| *p != group) {
            self.line(pending.as_deref().unwrap_or_default());
        }
        *pending = Some(group);
        self.bar.inc(n);
    }

    /// Ends the bar; without a terminal, reports the last group if it was not yet.
    pub fn finish_and_clear(&self) {
        if let Some(group) = self.pending.lock().unwrap_or_else(|e| e.into_inner()).take() {
            self.line(&group);
        }
        self.bar.finish_and_clear();
    }
}

impl std::ops::Deref for Progress {
    type Target = ProgressBar;
    fn deref(&self) -> &ProgressBar {
        &self.bar
    }
}

/// A progress bar on stderr when it is a terminal; one line per finished step otherwise.
pub fn progress_bar(len: u64, what: &str) -> Progress {
    let started = std::time::Instant::now();
    if !std::io::stderr().is_terminal() {
        let bar = ProgressBar::hidden();
        bar.set_length(len);
        return Progress {
            bar,
            what: what.to_string(),
            lines: true,
            started,
            group_words: 0,
            pending: Default::default(),
        };
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_prefix(what.to_string());
    Progress { bar, what: what.to_string(), lines: false, started, group_words: 0, pending: Default::default() }
}

/// An output directory this run owns: `.smartcon-claim` in it was created with O_EXCL,
/// so of two runs given the same `--out` exactly one gets here. Removed on drop.
#[must_use = "the claim ends when dropped"]
pub struct OutDirClaim(std::path::PathBuf);

impl Drop for OutDirClaim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Superseded by `crate::paths::out_dir` (issue 29), which writes beside and moves in;
/// kept for commands written on other branches meanwhile.
///
/// Refuses to overwrite: an output directory must not exist or be empty, and no other run
/// may hold it. Checking emptiness and creating are two steps, so the claim is the O_EXCL
/// creation of a lock file, and emptiness is checked only after holding it.
#[allow(dead_code)]
pub fn prepare_out_dir(dir: &std::path::Path) -> anyhow::Result<OutDirClaim> {
    anyhow::ensure!(!dir.exists() || dir.is_dir(), "{} exists and is not a directory", dir.display());
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    let lock = dir.join(".smartcon-claim");
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&lock) {
        Ok(mut f) => writeln!(f, "{}", std::process::id())?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            anyhow::bail!("{} is in use by another smartcon run; choose another --out", dir.display())
        }
        Err(e) => anyhow::bail!("cannot create {}: {e}", lock.display()),
    }
    let claim = OutDirClaim(lock);
    let empty = std::fs::read_dir(dir)?.filter_map(|e| e.ok()).all(|e| e.file_name() == ".smartcon-claim");
    anyhow::ensure!(empty, "{} exists and is not empty; choose another --out or remove it", dir.display());
    Ok(claim)
}

/// Where smartcon keeps what it measured on this host (host.json, profiles/):
/// `$SMARTCON_HOME`, else `$XDG_DATA_HOME/smartcon`, else `~/.local/share/smartcon`.
pub fn smartcon_home() -> std::path::PathBuf {
    // One definition, in the engine, so profiles and the host profile never disagree.
    smartcon_engine::profile::smartcon_home()
}

/// A library experiment's events on a progress bar; notes go to stderr above it.
pub fn on_event(bar: &Progress) -> impl FnMut(smartcon_study::Event<'_>) + '_ {
    use smartcon_study::Event;
    move |e| match e {
        Event::Steps(n) => bar.set_length(n),
        Event::Starting(what) => bar.set_message(what.to_string()),
        Event::Done => bar.inc(1),
        Event::Note(n) => bar.suspend(|| eprintln!("smartcon: note: {n}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartcon_util::error::{Error, ErrorKind};

    #[test]
    fn a_cause_kept_as_source_is_printed_once() {
        let cause = std::io::Error::from_raw_os_error(libc::ENOENT);
        let text = cause.to_string();
        let e = anyhow::Error::new(Error::io(ErrorKind::Target, std::path::Path::new("/img"), cause));
        assert_eq!(error_line(&e), format!("smartcon: error: /img: {text}"));
        // A context added on top still shows every distinct cause, once.
        let e = e.context("--target");
        assert_eq!(error_line(&e), format!("smartcon: error: --target: /img: {text}"));
    }
}

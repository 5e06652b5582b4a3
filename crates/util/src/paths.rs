//! One way to write an output and one way to read an input, for every command.
//!
//! Outputs ([`OutFile`], [`OutDir`]) are claimed before any work: the parent must exist,
//! the name must not (it is created with `O_EXCL | O_NOFOLLOW`, so a symlink, dangling or
//! not, is refused and two runs cannot both claim it), and a temporary name beside it is
//! created at once, which proves the directory is writable. The content is written to the
//! temporary name and renamed over the claim on [`OutFile::commit`], so a reader never sees
//! a half-written file: a full disk or a Ctrl-C leaves the old state (nothing), not a cut
//! JSON Lines record. Dropping an uncommitted output removes both names. The names are
//! also kept in a fixed table of C strings that a signal handler can unlink with
//! async-signal-safe calls ([`remove_registered`]), so a second Ctrl-C never leaves them.
//!
//! Inputs ([`open_input`], [`read_input`]) are opened with `O_NONBLOCK`, so a FIFO cannot
//! hang `open(2)`, and must be regular files (a FIFO, a device or a directory is refused by
//! `fstat`, not read); whole-file reads are bounded in bytes, and [`read_line_bounded`]
//! bounds a line, so no input can take unbounded memory.
//!
//! Every message is one line that names the flag and the path, with control characters
//! escaped ([`escape`]), so a path with a newline cannot split it.
//!
//! Everything a run makes is recorded under `$SMARTCON_HOME/outputs` before it exists
//! ([`cleanup_records`] removes what a `kill -9` left): temporary names, placeholders and
//! claims, and scratch paths ([`record_scratch`]), which also get an owner mark beside them
//! holding the run's identity (pid and start time), so that cleanup removes a scratch path
//! only when the mark proves it is the recorded run's. A claim holds the same identity, so
//! a claim whose run is gone (a new process with the same pid included) is taken over.
//!
//! Non-goals: replacing a user's file (the only replacement allowed is [`Existing::Replace`],
//! used for smartcon's own stores such as `$SMARTCON_HOME/host.json`), and following
//! symlinks for outputs.

use std::ffi::{CString, OsStr};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering};

/// A path that cannot be used, with the flag that gave it: one line when displayed.
#[derive(Debug, Clone)]
pub struct PathError {
    pub flag: String,
    pub path: PathBuf,
    pub what: String,
}

impl PathError {
    pub fn new(flag: &str, path: &Path, what: impl Into<String>) -> PathError {
        PathError { flag: flag.to_string(), path: path.to_path_buf(), what: what.into() }
    }
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = escape_str(&self.what);
        if self.flag.is_empty() {
            write!(f, "{}: {what}", escape(&self.path))
        } else {
            write!(f, "{} {}: {what}", self.flag, escape(&self.path))
        }
    }
}

impl std::error::Error for PathError {}

/// A path as one printable line: control characters and bytes that are not UTF-8 become
/// `\n`, `\t`, `\xNN`; everything else is kept.
pub fn escape(path: &Path) -> String {
    let bytes = path.as_os_str().as_bytes();
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(&escape_str(chunk.valid()));
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// A message as one line: control characters escaped as in [`escape`].
pub fn escape_str(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn os_error(e: &std::io::Error) -> String {
    // The kernel's words without Rust's " (os error N)" tail, which says nothing more.
    let text = e.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

// ---------------------------------------------------------------------------------------
// The table a signal handler can empty.

const REGISTERED_MAX: usize = 128;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
static REGISTERED: [AtomicPtr<libc::c_char>; REGISTERED_MAX] = [EMPTY_SLOT; REGISTERED_MAX];
/// Which slots hold a directory (removed with rmdir) rather than a file.
static REGISTERED_DIR: [std::sync::atomic::AtomicBool; REGISTERED_MAX] =
    [const { std::sync::atomic::AtomicBool::new(false) }; REGISTERED_MAX];

/// A name in the table; removing it from the table frees it (unless a handler took it).
struct Registered(Option<usize>);

fn register(path: &Path, dir: bool) -> Registered {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else { return Registered(None) };
    let raw = c.into_raw();
    for (i, slot) in REGISTERED.iter().enumerate() {
        if slot.compare_exchange(std::ptr::null_mut(), raw, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            // A handler that runs between the two stores tries the wrong call, which fails
            // harmlessly (unlink of a directory, rmdir of a file).
            REGISTERED_DIR[i].store(dir, Ordering::SeqCst);
            return Registered(Some(i));
        }
    }
    // SAFETY: `raw` came from CString::into_raw above and was stored nowhere.
    drop(unsafe { CString::from_raw(raw) });
    Registered(None)
}

impl Drop for Registered {
    fn drop(&mut self) {
        let Some(i) = self.0 else { return };
        let raw = REGISTERED[i].swap(std::ptr::null_mut(), Ordering::SeqCst);
        if !raw.is_null() {
            // SAFETY: every non-null pointer in the table came from CString::into_raw, and the
            // swap made this thread its only owner (a handler that took it left null here).
            drop(unsafe { CString::from_raw(raw) });
        }
    }
}

/// How many outputs are claimed and not yet committed or removed.
pub fn registered_count() -> usize {
    REGISTERED.iter().filter(|s| !s.load(Ordering::SeqCst).is_null()).count()
}

/// Whether a claimed directory (whose contents a signal handler cannot remove) is held.
pub fn registered_dirs() -> bool {
    REGISTERED
        .iter()
        .enumerate()
        .any(|(i, s)| !s.load(Ordering::SeqCst).is_null() && REGISTERED_DIR[i].load(Ordering::SeqCst))
}

/// Unlinks every registered file (and removes every registered directory that is empty by
/// then), newest first. Async-signal-safe: atomics, `unlink(2)` and `rmdir(2)` only; the
/// names are leaked, as the process is about to exit.
pub fn remove_registered() {
    for i in (0..REGISTERED_MAX).rev() {
        let raw = REGISTERED[i].swap(std::ptr::null_mut(), Ordering::SeqCst);
        if raw.is_null() {
            continue;
        }
        // SAFETY: raw is a NUL-terminated string from CString::into_raw that the swap made
        // ours; unlink and rmdir are async-signal-safe and only read it.
        unsafe {
            if REGISTERED_DIR[i].load(Ordering::SeqCst) {
                libc::rmdir(raw);
            } else {
                libc::unlink(raw);
            }
        }
    }
}

static HELD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Held while something this process created (a mount stack, a device) exists and its
/// removal must not be cut short by a second signal: the handler checks [`held_count`].
#[must_use = "the hold ends when dropped"]
pub struct Held(());

impl Held {
    pub fn new() -> Held {
        HELD.fetch_add(1, Ordering::SeqCst);
        Held(())
    }
}

impl Default for Held {
    fn default() -> Held {
        Held::new()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How many [`Held`] guards are alive (async-signal-safe: one atomic load).
pub fn held_count() -> usize {
    HELD.load(Ordering::SeqCst)
}

// ---------------------------------------------------------------------------------------
// Records for `smartcon cleanup` after kill -9.

static RECORDS_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
static RECORD_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Where claims are recorded (`$SMARTCON_HOME/outputs`), set once at start; without it,
/// nothing is recorded.
pub fn set_records_dir(dir: PathBuf) {
    let _ = RECORDS_DIR.set(dir);
}

/// A process's start time in clock ticks (field 22 of /proc/PID/stat), which tells a
/// live owner from a new process that got the same pid.
fn start_ticks(pid: u32) -> Option<u64> {
    crate::procfs::process_stat(pid).map(|s| s.start_ticks)
}

fn scratch_name_ok(path: &Path, pid: u32) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    name.starts_with("smartcon-") && name.contains(&format!("-{pid}"))
}

/// This run's identity as written into claims and owner marks: `PID START\n`, the start
/// time telling this run from a later process that got the same pid.
fn identity() -> String {
    let pid = std::process::id();
    format!("{pid} {}\n", start_ticks(pid).unwrap_or(0))
}

/// `PID START` (or the older builds' `PID`) from a claim or mark.
fn parse_identity(text: &str) -> Option<(u32, Option<u64>)> {
    let mut words = text.split_ascii_whitespace();
    let pid = words.next()?.parse().ok()?;
    let start = words.next().map(|w| w.parse().ok()).unwrap_or(None);
    Some((pid, start))
}

/// How long an empty or unreadable claim counts as one a run is writing right now.
const CLAIM_FRESH_SECONDS: u64 = 10;

/// Whether a directory's claim belongs to a run that is still alive: its pid exists with
/// the start time written beside it (a claim of an older build has no start time: the pid
/// alone decides). An empty or garbled claim is live only while it is fresh (a run writes
/// its identity right after creating the file; a kill -9 in between leaves it empty).
fn claim_is_live(claim: &Path) -> bool {
    let text = std::fs::read_to_string(claim).unwrap_or_default();
    match parse_identity(&text) {
        Some((pid, Some(start))) => start_ticks(pid).is_some_and(|s| s == start || start == 0),
        Some((pid, None)) => start_ticks(pid).is_some(),
        None => std::fs::symlink_metadata(claim)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() < CLAIM_FRESH_SECONDS),
    }
}

/// The owner mark of a scratch path: `.NAME.smartcon-owner` beside it, holding the
/// creating run's identity (`PID START`). `smartcon cleanup` removes a recorded scratch
/// path, or a loop device's backing file, only when its mark names the record's run: a
/// record alone (stale, copied from another home, forged) never costs a user a file.
pub fn owner_mark_path(path: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(OWNER_MARK_SUFFIX);
    parent_of(path).join(name)
}

/// Writes the owner mark of `path` (before `path` itself is created), exclusively.
pub fn write_owner_mark(path: &Path) -> std::io::Result<PathBuf> {
    let mark = owner_mark_path(path);
    let mut f = create_excl(&mark)?;
    if let Err(e) = f.write_all(identity().as_bytes()) {
        let _ = std::fs::remove_file(&mark);
        return Err(e);
    }
    Ok(mark)
}

/// Whether `path`'s owner mark is a regular file naming run `pid` started at `start`.
pub fn owner_mark_is(path: &Path, pid: u32, start: u64) -> bool {
    let mark = owner_mark_path(path);
    let is_file = std::fs::symlink_metadata(&mark).is_ok_and(|m| m.is_file());
    is_file
        && std::fs::read_to_string(&mark)
            .ok()
            .and_then(|t| parse_identity(&t))
            .is_some_and(|(p, s)| p == pid && s == Some(start))
}

/// The identity `(pid, start)` an owner mark holds, when `mark` is a regular file holding
/// one (the start time is `None` in marks of older builds).
pub fn owner_mark_identity(mark: &Path) -> Option<(u32, Option<u64>)> {
    if !std::fs::symlink_metadata(mark).is_ok_and(|m| m.is_file()) {
        return None;
    }
    parse_identity(&std::fs::read_to_string(mark).ok()?)
}

/// The suffix of an owner mark's name (`.NAME` + this).
pub const OWNER_MARK_SUFFIX: &str = ".smartcon-owner";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// A record of names this run made, removed on drop; one line per name, `KIND HEX`, the
/// path kept as bytes (a name that is not UTF-8 survives).
struct Record(Option<PathBuf>, bool, #[allow(dead_code)] Option<Registered>);

impl Record {
    fn write(entries: &[(&str, &Path)]) -> Record {
        let Some(dir) = RECORDS_DIR.get() else { return Record(None, false, None) };
        // A SMARTCON_HOME made only for the record goes again with it.
        let home_made = dir.parent().is_some_and(|h| !h.exists());
        if std::fs::create_dir_all(dir).is_err() {
            return Record(None, false, None);
        }
        let pid = std::process::id();
        let seq = RECORD_SEQ.fetch_add(1, Ordering::SeqCst);
        let path = dir.join(format!("out-{pid}-{seq}.rec"));
        let mut text = format!("pid {pid}\nstart {}\n", start_ticks(pid).unwrap_or(0));
        for (kind, p) in entries {
            text.push_str(&format!("{kind} {}\n", hex(p.as_os_str().as_bytes())));
        }
        let tmp = path.with_extension("rec.tmp");
        match std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &path)) {
            // Registered too: a second signal that unlinks what the record names unlinks
            // the record with them.
            Ok(()) => {
                let registered = register(&path, false);
                Record(Some(path), home_made, Some(registered))
            }
            Err(_) => {
                let _ = std::fs::remove_file(&tmp);
                Record(None, false, None)
            }
        }
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
            // The directory too once empty, so a run leaves nothing in SMARTCON_HOME (a
            // run that creates a record meanwhile may lose it: it then has no record).
            if let Some(dir) = p.parent() {
                let _ = std::fs::remove_dir(dir);
                if let (Some(home), true) = (dir.parent(), self.1) {
                    let _ = std::fs::remove_dir(home);
                }
            }
        }
    }
}

/// Records scratch files or a directory this run makes and removes itself (a `tmp:`
/// target's file, a sweep's source tree, `run`'s statistics file), so `smartcon cleanup`
/// removes them after `kill -9`. Each name must start with `smartcon-` and hold `-PID`;
/// each gets an owner mark beside it ([`owner_mark_path`]) before it exists, and cleanup
/// removes it only while that mark names this run. The names are registered for the signal
/// handler too: a second Ctrl-C unlinks the files, and a held directory makes the handler
/// leave its removal to the run. The marks and the record end when this is dropped.
#[must_use = "the record ends when dropped"]
pub struct ScratchRecord {
    marks: Vec<PathBuf>,
    _names: Vec<Registered>,
    _record: Record,
}

impl Drop for ScratchRecord {
    fn drop(&mut self) {
        for mark in &self.marks {
            let _ = std::fs::remove_file(mark);
        }
    }
}

fn scratch(paths: &[&Path], dir: bool) -> ScratchRecord {
    let entries: Vec<(&str, &Path)> = paths.iter().map(|p| ("scratch", *p)).collect();
    let record = Record::write(&entries);
    let mut names = Vec::new();
    let mut marks = Vec::new();
    for p in paths {
        // A mark that cannot be written (a read-only directory, where the scratch path cannot
        // be made either) only means cleanup will not remove the path.
        if let Ok(mark) = write_owner_mark(p) {
            names.push(register(&mark, false));
            marks.push(mark);
        }
        names.push(register(p, dir));
    }
    ScratchRecord { marks, _names: names, _record: record }
}

/// Records scratch files (see [`ScratchRecord`]).
pub fn record_scratch(paths: &[&Path]) -> ScratchRecord {
    scratch(paths, false)
}

/// Records a scratch directory tree (see [`ScratchRecord`]): while it is held, a second
/// signal does not end the process before the run removed it.
pub fn record_scratch_dir(path: &Path) -> ScratchRecord {
    scratch(&[path], true)
}

/// Removes what the records of dead runs name, each only if it still is what the run made:
/// a temporary name (`.NAME.smartcon-PID.tmp`, a file or a directory), an empty placeholder
/// file, a claim file holding the dead pid, a directory the run created if it is empty. An
/// unreadable record is reported and kept. Returns one line per thing done or kept.
pub fn cleanup_records(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return lines };
    let mut records: Vec<PathBuf> =
        entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "rec")).collect();
    records.sort();
    for rec in records {
        let Ok(bytes) = std::fs::read(&rec) else { continue };
        let text = String::from_utf8_lossy(&bytes);
        let field =
            |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<u64>().ok());
        let (Some(pid), Some(start)) = (field("pid"), field("start")) else {
            lines.push(format!("kept unreadable record {}", escape(&rec)));
            continue;
        };
        let pid = pid as u32;
        if start_ticks(pid).is_some_and(|s| s == start || start == 0) {
            continue; // its run is alive
        }
        let mut names = Vec::new();
        for line in text.lines().skip(2) {
            let parsed = line
                .split_once(' ')
                .and_then(|(k, h)| Some((k.to_string(), PathBuf::from(OsStr::from_bytes(&unhex(h)?)))));
            match parsed {
                Some(n) => names.push(n),
                None => lines.push(format!("{}: skipped a line that is not KIND HEX", escape(&rec))),
            }
        }
        let tmp_suffix = format!(".smartcon-{pid}.tmp");
        // Newest first: what was made last sits inside what was made first.
        for (kind, path) in names.iter().rev() {
            let Ok(m) = std::fs::symlink_metadata(path) else {
                // Killed after the mark was written, before the path was made.
                if kind == "scratch" && owner_mark_is(path, pid, start) {
                    let _ = std::fs::remove_file(owner_mark_path(path));
                }
                continue;
            };
            let name_ok = path.file_name().is_some_and(|n| n.as_bytes().ends_with(tmp_suffix.as_bytes()));
            let done = match kind.as_str() {
                "tmp" if name_ok && m.is_dir() => std::fs::remove_dir_all(path).is_ok(),
                "tmp" if name_ok && m.is_file() => std::fs::remove_file(path).is_ok(),
                "placeholder" if m.is_file() && m.len() == 0 => std::fs::remove_file(path).is_ok(),
                "claim"
                    if m.is_file()
                        && std::fs::read_to_string(path)
                            .is_ok_and(|t| parse_identity(&t).is_some_and(|(p, _)| p == pid)) =>
                {
                    std::fs::remove_file(path).is_ok()
                }
                "dir" if m.is_dir() => std::fs::remove_dir(path).is_ok(),
                "scratch" if scratch_name_ok(path, pid) && owner_mark_is(path, pid, start) => {
                    let removed = if m.is_dir() {
                        std::fs::remove_dir_all(path).is_ok()
                    } else {
                        std::fs::remove_file(path).is_ok()
                    };
                    let _ = std::fs::remove_file(owner_mark_path(path));
                    removed
                }
                _ => false,
            };
            if done {
                lines.push(format!("removed {} (left by killed smartcon {pid})", escape(path)));
            } else {
                lines.push(format!("kept {}: no longer what smartcon {pid} made", escape(path)));
            }
        }
        let _ = std::fs::remove_file(&rec);
    }
    lines
}

// ---------------------------------------------------------------------------------------
// Outputs.

/// Whether an existing file at an output path may be replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// A user's output: refused if anything is there (the README's contract).
    Refuse,
    /// smartcon's own store (a profile, host.json): replaced, atomically, if it is a
    /// regular file; a symlink or anything else is still refused.
    Replace,
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn check_parent(flag: &str, path: &Path) -> Result<(), PathError> {
    let parent = parent_of(path);
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(PathError::new(flag, path, format!("{} is not a directory", escape(parent)))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(PathError::new(
            flag,
            path,
            format!("{} is not a directory: it does not exist, and smartcon does not create it", escape(parent)),
        )),
        Err(e) => Err(PathError::new(flag, path, format!("directory {}: {}", escape(parent), os_error(&e)))),
    }
}

fn check_name<'a>(flag: &str, path: &'a Path) -> Result<&'a OsStr, PathError> {
    if path.as_os_str().is_empty() {
        return Err(PathError::new(flag, path, "empty path"));
    }
    let trailing_slash = path.as_os_str().as_bytes().ends_with(b"/");
    match path.file_name() {
        Some(name) if !trailing_slash => Ok(name),
        _ => Err(PathError::new(flag, path, "names a directory; give a file name")),
    }
}

fn tmp_name(path: &Path, name: &OsStr) -> PathBuf {
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".smartcon-{}.tmp", std::process::id()));
    parent_of(path).join(tmp)
}

fn create_excl(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

fn refuse_existing(flag: &str, path: &Path, m: &std::fs::Metadata, existing: Existing) -> Result<(), PathError> {
    let t = m.file_type();
    if t.is_symlink() {
        return Err(PathError::new(flag, path, "is a symbolic link; smartcon does not write through one"));
    }
    if t.is_dir() {
        return Err(PathError::new(flag, path, "is a directory; give a file name"));
    }
    if existing == Existing::Refuse {
        return Err(PathError::new(
            flag,
            path,
            "exists; smartcon never overwrites a file: choose another name or remove it",
        ));
    }
    if !t.is_file() {
        return Err(PathError::new(flag, path, "exists and is not a regular file"));
    }
    Ok(())
}

/// A writer's message with the temporary name replaced by the output's (a leading
/// "TMP: " dropped, as the caller names the output) and Rust's "(os error N)" tails removed.
fn without_tmp(text: &str, tmp: &Path, path: &Path) -> String {
    let mut text = text.to_string();
    for t in [escape(tmp), tmp.display().to_string()] {
        text = text.replace(&format!("{t}: "), "").replace(&t, &escape(path));
    }
    while let Some(i) = text.find(" (os error") {
        let Some(j) = text[i..].find(')') else { break };
        text.replace_range(i..i + j + 1, "");
    }
    text
}

/// An output file this run owns. See the module header for the life cycle.
#[must_use = "an output is removed when dropped uncommitted"]
pub struct OutFile {
    flag: String,
    path: PathBuf,
    tmp: PathBuf,
    file: Option<std::fs::File>,
    /// The inode of the placeholder this run created (Refuse), so only it is removed.
    placeholder: Option<(u64, u64)>,
    committed: bool,
    _names: Vec<Registered>,
    _record: Record,
}

impl OutFile {
    /// Checks and claims `path` (given with `flag`, e.g. `--out`) before any work.
    pub fn claim(flag: &str, path: &Path, existing: Existing) -> Result<OutFile, PathError> {
        use std::os::unix::fs::MetadataExt;
        let name = check_name(flag, path)?;
        check_parent(flag, path)?;
        if let Ok(m) = std::fs::symlink_metadata(path) {
            refuse_existing(flag, path, &m, existing)?;
        }
        let mut names = Vec::new();
        let mut placeholder = None;
        if existing == Existing::Refuse {
            let file = create_excl(path).map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => {
                    PathError::new(flag, path, "exists; smartcon never overwrites a file")
                }
                _ => PathError::new(flag, path, format!("cannot create: {}", os_error(&e))),
            })?;
            let m = file.metadata().map_err(|e| PathError::new(flag, path, os_error(&e)))?;
            placeholder = Some((m.dev(), m.ino()));
            names.push(register(path, false));
        }
        let tmp = tmp_name(path, name);
        // Recorded before the temporary name exists (the placeholder only once it is ours,
        // so a record never names a file of someone else).
        let mut recorded = vec![("tmp", tmp.as_path())];
        if placeholder.is_some() {
            recorded.insert(0, ("placeholder", path));
        }
        let record = Record::write(&recorded);
        let mut out = OutFile {
            flag: flag.to_string(),
            path: path.to_path_buf(),
            tmp: tmp.clone(),
            file: None,
            placeholder,
            committed: false,
            _names: names,
            _record: record,
        };
        // A stale temporary name of a killed run with our pid is ours to replace.
        let _ = std::fs::remove_file(&tmp);
        let file = create_excl(&tmp)
            .map_err(|e| PathError::new(flag, path, format!("cannot write in its directory: {}", os_error(&e))))?;
        out._names.push(register(&tmp, false));
        out.file = Some(file);
        Ok(out)
    }

    /// The path the output ends up at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The temporary name the content is written to (for writers that take a path).
    pub fn tmp_path(&self) -> &Path {
        &self.tmp
    }

    /// The temporary name, not yet created, for a writer that creates its file itself
    /// (with `O_EXCL`); it is still removed if the output is not committed.
    pub fn tmp_path_for_writer(&mut self) -> &Path {
        self.file = None;
        let _ = std::fs::remove_file(&self.tmp);
        &self.tmp
    }

    /// An error about this output, naming its flag and path.
    pub fn error(&self, what: impl Into<String>) -> PathError {
        PathError::new(&self.flag, &self.path, what)
    }

    /// A writer's error about this output, as one line naming the output's own path (a
    /// writer given [`OutFile::tmp_path`] names the temporary one, which means nothing to
    /// the user).
    pub fn wrap(&self, e: &dyn std::fmt::Display) -> PathError {
        self.error(without_tmp(&e.to_string(), &self.tmp, &self.path))
    }

    fn io_error(&self, e: &std::io::Error) -> PathError {
        let what = if e.raw_os_error() == Some(libc::ENOSPC) {
            "no space left on the device; nothing was written".to_string()
        } else {
            format!("cannot write: {}", os_error(e))
        };
        self.error(what)
    }

    /// Appends bytes to the temporary file. A failed write is cut back to what was there
    /// before it, so a JSON Lines file written record by record never holds a cut record.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), PathError> {
        let file = self.file.as_mut().ok_or_else(|| PathError::new("", Path::new(""), "output already committed"))?;
        let before = file.metadata().map(|m| std::os::unix::fs::MetadataExt::size(&m)).unwrap_or(0);
        if let Err(e) = file.write_all(bytes) {
            let _ = file.set_len(before);
            let _ = std::io::Seek::seek(file, std::io::SeekFrom::Start(before));
            return Err(self.io_error(&e));
        }
        Ok(())
    }

    /// Appends one JSON Lines record (one write of the whole line).
    pub fn write_line(&mut self, line: &str) -> Result<(), PathError> {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        self.write(&buf)
    }

    /// Makes the content visible at the output path: fsync, then rename over the claim.
    pub fn commit(mut self) -> Result<PathBuf, PathError> {
        use std::os::unix::fs::MetadataExt;
        // A writer that takes a path wrote the temporary file through its own descriptor.
        let file = match self.file.take() {
            Some(file) => file,
            None => std::fs::File::open(&self.tmp).map_err(|e| self.io_error(&e))?,
        };
        file.sync_all().map_err(|e| self.io_error(&e))?;
        // The temporary file may have been rewritten by a writer that takes a path.
        let written = std::fs::symlink_metadata(&self.tmp).map_err(|e| self.io_error(&e))?;
        if !written.is_file() {
            return Err(self.error("its temporary file was replaced by something else"));
        }
        match (self.placeholder, std::fs::symlink_metadata(&self.path)) {
            (Some(ino), Ok(m)) if (m.dev(), m.ino()) == ino => {}
            (None, Ok(m)) => refuse_existing(&self.flag, &self.path, &m, Existing::Replace)?,
            (None, Err(_)) => {}
            _ => return Err(self.error("was replaced by another program while smartcon ran; left it alone")),
        }
        std::fs::rename(&self.tmp, &self.path).map_err(|e| self.io_error(&e))?;
        self.committed = true;
        Ok(self.path.clone())
    }

    /// Writes all of `bytes` and commits.
    pub fn write_all(mut self, bytes: &[u8]) -> Result<PathBuf, PathError> {
        self.write(bytes)?;
        self.commit()
    }
}

impl Drop for OutFile {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        if self.committed {
            return;
        }
        self.file = None;
        let _ = std::fs::remove_file(&self.tmp);
        if let Some(ino) = self.placeholder {
            // Only the empty file this run created, not what someone put there since.
            if std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == ino) {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// An output directory this run owns: absent (created; its parent must exist) or empty,
/// claimed with `.smartcon-claim` (created `O_EXCL`, holding the pid; a dead pid's claim is
/// taken over). Its files are written into a
/// temporary directory beside it, `.NAME.smartcon-PID.tmp/`, renamed over it on
/// [`OutDir::commit`]; dropped uncommitted, both are removed.
#[must_use = "an output directory is removed when dropped uncommitted"]
pub struct OutDir {
    flag: String,
    path: PathBuf,
    tmp: PathBuf,
    created: bool,
    claim_file: Option<PathBuf>,
    committed: bool,
    _names: Vec<Registered>,
    _record: Record,
}

/// The file in an existing empty directory that says a run holds it.
pub const CLAIM_NAME: &str = ".smartcon-claim";

impl OutDir {
    /// Checks and claims the directory `path` (given with `flag`) before any work.
    pub fn claim(flag: &str, path: &Path) -> Result<OutDir, PathError> {
        let name = match path.file_name() {
            Some(n) if !path.as_os_str().is_empty() => n,
            _ => return Err(PathError::new(flag, path, "give a directory name")),
        };
        check_parent(flag, path)?;
        let mut names = Vec::new();
        let mut created = false;
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(PathError::new(flag, path, "is a symbolic link; smartcon does not write through one"))
            }
            Ok(m) if !m.is_dir() => return Err(PathError::new(flag, path, "exists and is not a directory")),
            Ok(_) => {}
            Err(_) => match std::fs::create_dir(path) {
                Ok(()) => {
                    created = true;
                    names.push(register(path, true));
                }
                // Another run made it meanwhile: claimed like any existing directory below.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(PathError::new(flag, path, format!("cannot create: {}", os_error(&e)))),
            },
        }
        // From here on, dropping `out` undoes what was done (only what this run made).
        let claim = path.join(CLAIM_NAME);
        let tmp = tmp_name(path, name);
        let mut recorded = vec![("claim", claim.as_path()), ("tmp", tmp.as_path())];
        if created {
            recorded.insert(0, ("dir", path));
        }
        let record = Record::write(&recorded);
        let mut out = OutDir {
            flag: flag.to_string(),
            path: path.to_path_buf(),
            tmp: PathBuf::new(),
            created,
            claim_file: None,
            committed: false,
            _names: names,
            _record: record,
        };
        let in_use = || PathError::new(flag, path, "is in use by another smartcon run; choose another");
        match create_excl(&claim) {
            Ok(mut f) => {
                let _ = f.write_all(identity().as_bytes());
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if claim_is_live(&claim) {
                    return Err(in_use());
                }
                // A killed run's claim: take it over (its run is gone).
                let _ = std::fs::remove_file(&claim);
                let mut f = create_excl(&claim).map_err(|_| in_use())?;
                let _ = f.write_all(identity().as_bytes());
            }
            Err(e) => return Err(PathError::new(flag, path, format!("cannot write in it: {}", os_error(&e)))),
        }
        out.claim_file = Some(claim.clone());
        out._names.push(register(&claim, false));
        let empty = std::fs::read_dir(path)
            .map_err(|e| PathError::new(flag, path, os_error(&e)))?
            .filter_map(|e| e.ok())
            .all(|e| e.file_name() == CLAIM_NAME);
        if !empty {
            return Err(PathError::new(
                flag,
                path,
                "exists and is not empty; smartcon never overwrites: choose another or remove it",
            ));
        }
        // A stale temporary directory of a killed run with our pid is ours to replace.
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir(&tmp)
            .map_err(|e| PathError::new(flag, path, format!("cannot write beside it: {}", os_error(&e))))?;
        out.tmp = tmp.clone();
        out._names.push(register(&tmp, true));
        Ok(out)
    }

    /// Where the files go while the run writes them.
    pub fn dir(&self) -> &Path {
        &self.tmp
    }

    /// The directory the report ends up in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An error about this output, naming its flag and path.
    pub fn error(&self, what: impl Into<String>) -> PathError {
        PathError::new(&self.flag, &self.path, what)
    }

    /// A writer's error about this report, naming the report directory (see [`OutFile::wrap`]).
    pub fn wrap(&self, e: &dyn std::fmt::Display) -> PathError {
        self.error(without_tmp(&e.to_string(), &self.tmp, &self.path))
    }

    /// Creates `name` in the temporary directory (a plain file: the directory is ours).
    pub fn create(&self, name: &str) -> Result<std::fs::File, PathError> {
        create_excl(&self.tmp.join(name)).map_err(|e| self.error(format!("{name}: cannot write: {}", os_error(&e))))
    }

    /// Makes the files visible at the output path (rename over the empty claimed one).
    pub fn commit(mut self) -> Result<PathBuf, PathError> {
        if let Some(claim) = self.claim_file.take() {
            let _ = std::fs::remove_file(claim);
        }
        std::fs::rename(&self.tmp, &self.path)
            .map_err(|e| self.error(format!("cannot move the report in: {}", os_error(&e))))?;
        self.committed = true;
        Ok(self.path.clone())
    }
}

impl Drop for OutDir {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
        if let Some(claim) = &self.claim_file {
            let _ = std::fs::remove_file(claim);
        }
        if self.created {
            // Only if still empty: what another program put there is not ours.
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Inputs.

/// The most a whole-file input (a profile, a TOML scenario, a table) may hold.
pub const INPUT_BYTES_MAX: u64 = 64 << 20;
/// The longest line a line-oriented input may have.
pub const LINE_BYTES_MAX: usize = 1 << 20;

/// Opens an input without blocking: `O_NONBLOCK` so a FIFO cannot hang `open(2)`, then
/// `fstat` must say it is a regular file (a FIFO, a device, a socket or a directory is
/// refused with one line); blocking mode is restored for reading.
pub fn open_input(flag: &str, path: &Path) -> Result<std::fs::File, PathError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound if std::fs::symlink_metadata(path).is_ok() => {
                PathError::new(flag, path, "is a symbolic link to nothing")
            }
            std::io::ErrorKind::NotFound => PathError::new(flag, path, "does not exist"),
            _ => PathError::new(flag, path, format!("cannot open: {}", os_error(&e))),
        })?;
    let m = file.metadata().map_err(|e| PathError::new(flag, path, os_error(&e)))?;
    let t = m.file_type();
    let kind = if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else {
        Some("a socket")
    };
    if let Some(kind) = kind {
        return Err(PathError::new(flag, path, format!("is {kind}; give a regular file")));
    }
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on the descriptor `file` owns; F_GETFL/F_SETFL only change its flags.
    unsafe {
        let fd = file.as_raw_fd();
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// Reads a whole regular file of at most `bytes_max` bytes (checked before reading and
/// while reading, as the file may grow).
pub fn read_input(flag: &str, path: &Path, bytes_max: u64) -> Result<Vec<u8>, PathError> {
    let file = open_input(flag, path)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let too_big =
        || PathError::new(flag, path, format!("is larger than {} MiB; not an input smartcon reads", bytes_max >> 20));
    if size > bytes_max {
        return Err(too_big());
    }
    let mut buf = Vec::with_capacity(size as usize);
    file.take(bytes_max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| PathError::new(flag, path, format!("cannot read: {}", os_error(&e))))?;
    if buf.len() as u64 > bytes_max {
        return Err(too_big());
    }
    Ok(buf)
}

/// [`read_input`] as UTF-8 text, bounded by [`INPUT_BYTES_MAX`].
pub fn read_input_text(flag: &str, path: &Path) -> Result<String, PathError> {
    let bytes = read_input(flag, path, INPUT_BYTES_MAX)?;
    String::from_utf8(bytes)
        .map_err(|e| PathError::new(flag, path, format!("is not UTF-8 text (byte {})", e.utf8_error().valid_up_to())))
}

/// `std::fs::read_to_string` for inputs: the same `io::Result`, so a library's error types
/// stay as they are, but non-blocking, regular files only and at most [`INPUT_BYTES_MAX`]
/// bytes (the refusal is an `InvalidInput` error whose text says why, without the path,
/// which callers add).
pub fn read_text(path: &Path) -> std::io::Result<String> {
    let bytes = read_input("", path, INPUT_BYTES_MAX).map_err(|e| {
        let kind =
            if e.what == "does not exist" { std::io::ErrorKind::NotFound } else { std::io::ErrorKind::InvalidInput };
        std::io::Error::new(kind, e.what)
    })?;
    String::from_utf8(bytes).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        )
    })
}

/// Reads one line into `line` (cleared first), at most `bytes_max` bytes before the
/// newline; returns the bytes consumed (0 at the end). A longer line is an error, so a file
/// without newlines cannot take unbounded memory.
pub fn read_line_bounded(
    reader: &mut impl std::io::BufRead,
    line: &mut Vec<u8>,
    bytes_max: usize,
) -> std::io::Result<usize> {
    line.clear();
    let mut consumed = 0;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(consumed);
        }
        let (take, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if line.len() + take > bytes_max + 1 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a line longer than {bytes_max} bytes; not a text trace"),
            ));
        }
        line.extend_from_slice(&available[..take]);
        reader.consume(take);
        consumed += take;
        if done {
            return Ok(consumed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("smartcon-paths-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        d
    }

    #[test]
    fn an_output_is_claimed_written_beside_and_renamed() {
        let d = scratch("out");
        let p = d.join("a.json");
        let mut out = OutFile::claim("--out", &p, Existing::Refuse).unwrap();
        assert!(p.exists(), "the claim holds the name");
        assert!(OutFile::claim("--out", &p, Existing::Refuse).is_err(), "a second claim is refused");
        out.write_line("{\"a\":1}").unwrap();
        assert_eq!(std::fs::read(&p).unwrap().len(), 0, "nothing visible before commit");
        out.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"a\":1}\n");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1, "no temporary file left");
        let e = OutFile::claim("--out", &p, Existing::Refuse).err().unwrap();
        assert!(e.to_string().contains("exists"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_uncommitted_output_leaves_nothing() {
        let d = scratch("drop");
        let p = d.join("a.svg");
        let mut out = OutFile::claim("--plot", &p, Existing::Refuse).unwrap();
        out.write(b"half").unwrap();
        drop(out);
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bad_outputs_are_refused_with_one_line() {
        let d = scratch("bad");
        std::os::unix::fs::symlink(d.join("nowhere"), d.join("dangling")).unwrap();
        std::fs::write(d.join("mine"), b"keep").unwrap();
        for (p, what) in [
            (d.join("dangling"), "symbolic link"),
            (d.join("mine"), "exists"),
            (d.clone(), "directory"),
            (d.join("missing/a"), "not a directory"),
            (d.join("line\nbreak/a"), "not a directory"),
        ] {
            let e = OutFile::claim("--out", &p, Existing::Refuse).err().unwrap().to_string();
            assert!(e.contains(what), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        assert_eq!(std::fs::read(d.join("mine")).unwrap(), b"keep");
        assert!(std::fs::symlink_metadata(d.join("nowhere")).is_err(), "nothing written through the link");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn replace_swaps_a_store_file_atomically() {
        let d = scratch("replace");
        let p = d.join("host.json");
        std::fs::write(&p, b"old").unwrap();
        OutFile::claim("", &p, Existing::Replace).unwrap().write_all(b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let out = OutFile::claim("", &p, Existing::Replace).unwrap();
        drop(out);
        assert_eq!(std::fs::read(&p).unwrap(), b"new", "an uncommitted replacement keeps the old file");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_out_dir_is_claimed_and_moved_in() {
        let d = scratch("dir");
        let r = d.join("report");
        let out = OutDir::claim("--out", &r).unwrap();
        assert!(OutDir::claim("--out", &r).is_err(), "held by this run");
        std::fs::write(out.dir().join("results.jsonl"), b"{}\n").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read(r.join("results.jsonl")).unwrap(), b"{}\n");
        assert!(OutDir::claim("--out", &r).is_err(), "not empty now");
        let e = d.join("empty");
        std::fs::create_dir(&e).unwrap();
        drop(OutDir::claim("--out", &e).unwrap());
        assert_eq!(std::fs::read_dir(&e).unwrap().count(), 0, "the claim ends with the run");
        drop(OutDir::claim("--out", &d.join("fresh")).unwrap());
        let left: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 2, "{left:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn inputs_must_be_regular_files() {
        let d = scratch("in");
        let fifo = d.join("fifo");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo reads a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for (p, what) in [
            (fifo, "FIFO"),
            (PathBuf::from("/dev/zero"), "character device"),
            (d.clone(), "directory"),
            (d.join("missing"), "does not exist"),
        ] {
            let e = open_input("--trace", &p).err().unwrap().to_string();
            assert!(e.contains(what), "{e}");
        }
        std::fs::write(d.join("big"), vec![b'x'; 4096]).unwrap();
        assert!(read_input("--x", &d.join("big"), 1024).is_err());
        assert_eq!(read_input("--x", &d.join("big"), 4096).unwrap().len(), 4096);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_line_is_bounded() {
        let data = b"short\nlonger line\n".to_vec();
        let mut r = std::io::BufReader::with_capacity(4, &data[..]);
        let mut line = Vec::new();
        assert_eq!(read_line_bounded(&mut r, &mut line, 8).unwrap(), 6);
        assert_eq!(line, b"short\n");
        assert!(read_line_bounded(&mut r, &mut line, 8).is_err());
        let mut r = std::io::BufReader::new(&b"no newline"[..]);
        assert_eq!(read_line_bounded(&mut r, &mut line, 64).unwrap(), 10);
    }

    #[test]
    fn a_writers_error_names_the_output_not_its_temporary_name() {
        let d = scratch("wrap");
        let p = d.join("plot.svg");
        let out = OutFile::claim("--plot", &p, Existing::Refuse).unwrap();
        let inner = format!("{}: cannot draw: No space left on device (os error 28)", out.tmp_path().display());
        let e = out.wrap(&inner).to_string();
        assert_eq!(e, format!("--plot {}: cannot draw: No space left on device", p.display()));
        drop(out);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn escaping_keeps_one_line() {
        assert_eq!(escape(Path::new("a\nb\tc")), "a\\nb\\tc");
        assert_eq!(escape(Path::new(OsStr::from_bytes(b"x\xffy"))), "x\\xffy");
    }
}

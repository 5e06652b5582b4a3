//! Issue 29's proof: every path-valued flag of every command, found by walking the CLI's own
//! command tree (clap, printed by `SMARTCON_CLI_TREE=1 smartcon`), gets each class of bad
//! input, and each case must end with exit status 2, one line on stderr naming the path,
//! nothing on stdout, and nothing written or left in the scratch directory, its TMPDIR or
//! its SMARTCON_HOME, under a 2 GiB address-space cap (RLIMIT_AS, what `prlimit --as` sets).
//!
//! A flag takes part by its role, which its value name says (see crates/cli/src/paths.rs):
//! OUT_FILE, OUT_DIR, APPEND_FILE, FILE (an input) or DIR (a directory smartcon works in). A
//! flag clap knows takes a path (a `PathBuf`, or a path value hint) without one of these
//! roles fails the test, and so does one whose name says it is a path: a command added later
//! is covered, or the test says what it lacks. Commands that need more than the path to
//! reach its check have a baseline in [`BASELINES`]; one missing shows as a message that
//! does not name the path.
//!
//! No timing is asserted: the per-case limit only decides when a hung case has failed.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_smartcon");
const MEMORY_CAP_BYTES: u64 = 2 << 30;
const CASE_SECONDS_MAX: u64 = 60;

/// What a command needs besides the path under test to reach the path's check quickly.
const BASELINES: &[(&str, &[&str])] = &[
    ("probe", &["emu:nvram", "--duration", "1ms", "--sizes", "4k"]),
    ("ctx", &["--quick", "--no-perf"]),
    ("bench", &["--targets", "emu:nvram", "--sizes", "4k", "--duration", "1ms", "--sweep-interval", "1us"]),
    ("merge-bench", &["--duration", "1ms", "--rounds", "1"]),
    ("io", &["--target", "emu:nvram", "--duration", "1ms"]),
    ("trace capture", &["--", "true"]),
    ("trace synth", &["--kind", "stream", "--working-set", "4k", "--accesses", "10"]),
    ("ets", &["--quick"]),
    (
        "ets shared",
        &["--pairs", "loop:64k+loop:64k", "--partition", "ways", "--llc", "256k", "--instructions", "1000000"],
    ),
    ("evaluate", &["--tiny"]),
    ("emulate replay", &["--device", "emu:nvme"]),
    ("emulate sweep", &["--device", "emu:nvme"]),
    ("emulate mount", &["emu:nvme"]),
    ("run", &["--", "true"]),
    ("model", &["--calibrate"]),
    ("emulate vm", &["emu:nvme", "--", "true"]),
    ("fleet", &["--ray", "127.0.0.1:9"]),
];

/// Other path flags a command needs, given a good value of their role.
const COMPANIONS: &[(&str, &str)] =
    &[("trace convert", "input"), ("trace convert", "out"), ("report", "results"), ("report", "out")];

#[derive(Debug, Clone)]
struct PathArg {
    command: String,
    id: String,
    long: Option<String>,
    role: String,
}

fn tree() -> Vec<serde_json::Value> {
    let out = Command::new(BIN).env("SMARTCON_CLI_TREE", "1").output().expect("run smartcon");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

const ROLES: &[&str] = &["OUT_FILE", "OUT_DIR", "APPEND_FILE", "FILE", "DIR"];
/// Words that, ending an argument's name, say it is a path.
const PATH_WORDS: &[&str] =
    &["out", "plot", "stats", "trace", "file", "dir", "path", "profile", "profiles", "results", "faults", "lackey"];

/// The path arguments of the tree, and the ones that are paths without a role.
fn path_args(tree: &[serde_json::Value]) -> (Vec<PathArg>, Vec<String>) {
    let mut found = Vec::new();
    let mut unclassified = Vec::new();
    for a in tree {
        if !a["takes_value"].as_bool().unwrap_or(false) {
            continue;
        }
        let id = a["id"].as_str().unwrap().to_string();
        let command = a["command"].as_str().unwrap().to_string();
        let hint = a["hint"].as_str().unwrap_or("");
        let role = a["value_name"].as_str().unwrap_or("").to_string();
        let last_word = id.rsplit('_').next().unwrap_or("");
        let pathish = matches!(hint, "AnyPath" | "FilePath" | "DirPath") || PATH_WORDS.contains(&last_word);
        if ROLES.contains(&role.as_str()) {
            found.push(PathArg { command, id, long: a["long"].as_str().map(str::to_string), role });
        } else if pathish && !a["last"].as_bool().unwrap_or(false) {
            unclassified.push(format!("`smartcon {command}` argument {id} (value name {role:?}, hint {hint})"));
        }
    }
    (found, unclassified)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

/// Every name under `dir` with its size and modification time: "nothing written or left".
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, i64, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
            if m.is_dir() {
                // A directory's times change when a name comes and goes again: its
                // entries are what is compared.
                out.insert(p.clone(), (0, 0, 0));
                stack.push(p);
            } else {
                out.insert(p.clone(), (m.size(), m.mtime(), m.mtime_nsec()));
            }
        }
    }
    out
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    maxrss_kib: i64,
    seconds: f64,
}

/// Runs smartcon under the memory cap, waiting with wait4 for its peak resident size.
fn run(env: &Env, args: &[String]) -> Ran {
    let mut c = Command::new(BIN);
    c.args(args)
        .env("SMARTCON_HOME", &env.home)
        .env("TMPDIR", &env.tmp)
        .current_dir(&env.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe and changes only the child.
    unsafe {
        c.pre_exec(|| {
            let limit = libc::rlimit { rlim_cur: MEMORY_CAP_BYTES, rlim_max: MEMORY_CAP_BYTES };
            libc::setrlimit(libc::RLIMIT_AS, &limit);
            Ok(())
        });
    }
    let started = Instant::now();
    // Reaped by wait4 below (for its resource usage), not by Child::wait.
    #[allow(clippy::zombie_processes)]
    let mut child = c.spawn().expect("spawn smartcon");
    let pid = child.id() as libc::pid_t;
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    // SAFETY: an all-zero rusage is valid (plain integers).
    let (mut status, mut usage): (libc::c_int, libc::rusage) = (0, unsafe { std::mem::zeroed() });
    loop {
        // SAFETY: wait4 on our own child, writing into the two locals.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        if started.elapsed() > Duration::from_secs(CASE_SECONDS_MAX) {
            // SAFETY: our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let code = if libc::WIFEXITED(status) { Some(libc::WEXITSTATUS(status)) } else { None };
    Ran {
        code,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
        maxrss_kib: usage.ru_maxrss,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// A scratch world: the directory the bad inputs live in, the TMPDIR, SMARTCON_HOME and a
/// working directory, all under one root that is compared before and after each case.
struct Env {
    /// Removed when the Env is dropped, after Drop below has unmounted `ro`.
    _scratch: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    tmp: PathBuf,
    cwd: PathBuf,
    ro: PathBuf,
    ro_mounted: bool,
}

impl Env {
    fn new(name: &str) -> Env {
        let scratch = tempfile::Builder::new().prefix(&format!("smartcon-matrix-{name}-")).tempdir().unwrap();
        let root = scratch.path().to_path_buf();
        let env = Env {
            _scratch: scratch,
            home: root.join("home"),
            tmp: root.join("tmp"),
            cwd: root.join("cwd"),
            ro: root.join("ro"),
            root,
            ro_mounted: false,
        };
        for d in [&env.root, &env.home, &env.tmp, &env.cwd, &env.ro] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(env.root.join("existing"), b"the user's data\n").unwrap();
        std::fs::create_dir(env.root.join("full-dir")).unwrap();
        std::fs::write(env.root.join("full-dir/keep"), b"x").unwrap();
        std::fs::create_dir(env.root.join("empty-dir")).unwrap();
        std::fs::write(env.root.join("garbage"), vec![0xa5u8; 3 << 20]).unwrap();
        std::fs::write(env.root.join("ro/existing"), b"x").unwrap();
        mkfifo(&env.root.join("fifo"));
        std::os::unix::fs::symlink(env.root.join("nowhere"), env.root.join("dangling")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", env.root.join("zero-link")).unwrap();
        std::os::unix::fs::symlink(env.root.join("existing"), env.root.join("link-to-existing")).unwrap();
        let mut env = env;
        if is_root() {
            // Root writes through mode bits: a read-only mount is what is read-only to it.
            env.ro_mounted = Command::new("mount")
                .args(["-t", "tmpfs", "-o", "ro,size=64k", "smartcon-matrix-ro"])
                .arg(&env.ro)
                .status()
                .is_ok_and(|s| s.success());
        } else {
            std::fs::set_permissions(&env.ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        }
        env
    }

    fn p(&self, name: &str) -> String {
        self.root.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if self.ro_mounted {
            let _ = Command::new("umount").arg(&self.ro).status();
        }
        let _ = std::fs::set_permissions(&self.ro, std::fs::Permissions::from_mode(0o755));
    }
}

/// The bad values of a role: (class, value, whether the message must name the value).
fn bad_values(env: &Env, role: &str) -> Vec<(&'static str, String)> {
    let ro_target =
        if env.ro_mounted || !is_root() { Some(env.ro.join("new").to_str().unwrap().to_string()) } else { None };
    let mut v: Vec<(&'static str, String)> = match role {
        "OUT_FILE" => vec![
            ("existing file", env.p("existing")),
            ("directory", env.p("empty-dir")),
            ("missing parent", env.p("missing/new.out")),
            ("dangling symlink", env.p("dangling")),
            ("symlink to a file", env.p("link-to-existing")),
            ("FIFO", env.p("fifo")),
            ("/dev/zero", "/dev/zero".into()),
            ("newline in name", env.p("missing\nline/new.out")),
        ],
        "APPEND_FILE" => vec![
            ("directory", env.p("empty-dir")),
            ("missing parent", env.p("missing/new.out")),
            ("dangling symlink", env.p("dangling")),
            ("symlink to a file", env.p("link-to-existing")),
            ("FIFO", env.p("fifo")),
            ("/dev/zero", "/dev/zero".into()),
        ],
        "OUT_DIR" => vec![
            ("non-empty directory", env.p("full-dir")),
            ("existing file", env.p("existing")),
            ("missing parent", env.p("missing/report")),
            ("dangling symlink", env.p("dangling")),
            ("FIFO", env.p("fifo")),
            ("/dev/zero", "/dev/zero".into()),
        ],
        "FILE" => vec![
            ("missing", env.p("missing-file")),
            ("directory", env.p("empty-dir")),
            ("FIFO", env.p("fifo")),
            ("/dev/zero", "/dev/zero".into()),
            ("symlink to /dev/zero", env.p("zero-link")),
            ("dangling symlink", env.p("dangling")),
            ("binary garbage (3 MiB, no newline)", env.p("garbage")),
        ],
        "DIR" => vec![
            ("missing", env.p("missing-dir")),
            ("regular file", env.p("existing")),
            ("FIFO", env.p("fifo")),
            ("/dev/zero", "/dev/zero".into()),
        ],
        other => panic!("unknown role {other}"),
    };
    if let (Some(t), true) = (ro_target, role.starts_with("OUT") || role == "APPEND_FILE") {
        v.push(("read-only directory", t));
    }
    v
}

/// A good value of a role for a companion flag (left absent or unchanged afterwards).
fn good_value(env: &Env, role: &str) -> String {
    match role {
        "FILE" => {
            let lackey = env.root.join("good.lackey");
            if !lackey.exists() {
                std::fs::write(&lackey, "I  04000000,4\n L 7ff000000,8\n S 7ff000008,8\n").unwrap();
            }
            lackey.to_str().unwrap().to_string()
        }
        _ => env.p("fresh-output"),
    }
}

fn escaped(s: &str) -> String {
    s.replace('\n', "\\n")
}

/// The arguments of one case: the command words, its baseline, companions and the flag.
fn case_args(env: &Env, all: &[PathArg], arg: &PathArg, value: &str) -> Vec<String> {
    let mut args: Vec<String> = arg.command.split(' ').map(str::to_string).collect();
    let baseline = BASELINES.iter().find(|(c, _)| *c == arg.command).map_or(&[][..], |(_, b)| *b);
    let (before_dashes, after_dashes) = match baseline.iter().position(|a| *a == "--") {
        Some(i) => (&baseline[..i], &baseline[i..]),
        None => (baseline, &[][..]),
    };
    args.extend(before_dashes.iter().map(|s| s.to_string()));
    for (cmd, id) in COMPANIONS {
        if *cmd == arg.command && *id != arg.id {
            let other = all.iter().find(|a| a.command == *cmd && a.id == *id).expect("companion flag exists");
            // A positional companion (report's RESULTS) goes in as its value alone.
            if let Some(long) = other.long.as_deref() {
                args.push(format!("--{long}"));
            }
            args.push(good_value(env, &other.role));
        }
    }
    match &arg.long {
        Some(long) => {
            args.push(format!("--{long}"));
            args.push(value.to_string());
        }
        None => args.push(value.to_string()),
    }
    args.extend(after_dashes.iter().map(|s| s.to_string()));
    args
}

#[test]
fn every_path_flag_refuses_every_bad_input() {
    let tree = tree();
    let (args, unclassified) = path_args(&tree);
    assert!(
        unclassified.is_empty(),
        "path arguments without a role (give them value_name OUT_FILE, OUT_DIR, APPEND_FILE, FILE or DIR and go through crate::paths): {unclassified:#?}"
    );
    let commands: std::collections::BTreeSet<&str> = tree.iter().filter_map(|a| a["command"].as_str()).collect();
    let env = Env::new("bad");
    let mut failures = Vec::new();
    let (mut cases, mut rss_max_kib, mut rss_max_case) = (0, 0i64, String::new());
    let started = Instant::now();
    for arg in &args {
        for (class, value) in bad_values(&env, &arg.role) {
            let argv = case_args(&env, &args, arg, &value);
            let before = snapshot(&env.root);
            let ran = run(&env, &argv);
            let after = snapshot(&env.root);
            cases += 1;
            let what = format!("`smartcon {}` ({} {class})", argv.join(" ").replace('\n', "\\n"), arg.role);
            if ran.maxrss_kib > rss_max_kib {
                rss_max_kib = ran.maxrss_kib;
                rss_max_case = what.clone();
            }
            let err = ran.stderr.trim_end();
            let mut problems = Vec::new();
            if ran.code != Some(2) {
                problems.push(format!("exit {:?}, not 2", ran.code));
            }
            if err.lines().count() != 1 {
                problems.push(format!("{} lines on stderr", err.lines().count()));
            }
            let names = err.contains(&escaped(&value)) || err.contains(&value);
            if !names {
                problems.push("the message does not name the path (a missing baseline?)".into());
            }
            if !ran.stdout.is_empty() {
                problems.push(format!("stdout not empty: {:?}", ran.stdout));
            }
            if before != after {
                let changed: Vec<_> = after
                    .iter()
                    .filter(|(p, m)| before.get(*p) != Some(m))
                    .map(|(p, _)| p.display().to_string())
                    .chain(
                        before.keys().filter(|p| !after.contains_key(*p)).map(|p| format!("removed {}", p.display())),
                    )
                    .collect();
                problems.push(format!("written or left: {changed:?}"));
            }
            if !problems.is_empty() {
                failures.push(format!("{what}: {}; stderr {err:?}", problems.join("; ")));
            }
        }
    }
    let flags: Vec<String> = args
        .iter()
        .map(|a| format!("{} {}", a.command, a.long.as_deref().map_or(a.id.to_uppercase(), |l| format!("--{l}"))))
        .collect();
    eprintln!(
        "path matrix: {cases} cases, {} commands in the tree, {} path flags ({}), {} failing, {:.1} s; largest resident memory {} MiB in {rss_max_case}",
        commands.len(),
        args.len(),
        flags.join(", "),
        failures.len(),
        started.elapsed().as_secs_f64(),
        rss_max_kib / 1024
    );
    assert!(failures.is_empty(), "{} of {cases} cases failed:\n{}", failures.len(), failures.join("\n"));
    assert!(rss_max_kib < (MEMORY_CAP_BYTES / 1024) as i64);
}

/// A path smartcon claimed is held for the run and given back: a second claim of the same
/// report directory while a run holds it is refused, and the first run's report arrives.
#[test]
fn a_claimed_output_is_refused_to_a_second_run_and_kept_by_the_first() {
    let env = Env::new("claim");
    let out = env.p("report");
    let mut first = Command::new(BIN)
        .args(["ets", "--quick", "--no-sweep", "--out", &out])
        .env("SMARTCON_HOME", &env.home)
        .env("TMPDIR", &env.tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !Path::new(&out).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let second = run(&env, &["ets".into(), "--quick".into(), "--out".into(), out.clone()]);
    assert_eq!(second.code, Some(2), "{}", second.stderr);
    assert!(second.stderr.contains("in use"), "{}", second.stderr);
    let status = first.wait().unwrap();
    assert!(status.success());
    assert!(Path::new(&out).join("results.jsonl").is_file());
    let left: Vec<_> = std::fs::read_dir(&env.root)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".smartcon-"))
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "temporary names left: {left:?}");
}

/// A full file system: the output is claimed (an empty name costs no space), the work is
/// done, the results are printed, and writing fails with one line naming the path, leaving
/// nothing (no half-written SVG, no cut JSON Lines record). Root only (a small tmpfs).
#[test]
fn a_full_disk_loses_no_results_and_leaves_no_half_file() {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let env = Env::new("full");
    let full = env.root.join("full");
    std::fs::create_dir(&full).unwrap();
    let mounted =
        Command::new("mount").args(["-t", "tmpfs", "-o", "size=64k", "smartcon-matrix-full"]).arg(&full).status();
    if !mounted.is_ok_and(|s| s.success()) {
        eprintln!("skipped: cannot mount a tmpfs");
        return;
    }
    // Fill it, leaving inodes but no blocks.
    let _ = std::fs::write(full.join("filler"), vec![1u8; 1 << 20]);
    let lackey = good_value(&env, "FILE");
    let f = |name: &str| full.join(name).to_str().unwrap().to_string();
    let cases: Vec<Vec<String>> = vec![
        vec!["model".into(), "--plot".into(), f("model.svg")],
        vec!["trace".into(), "convert".into(), "--lackey".into(), lackey.clone(), "--out".into(), f("t.trace")],
        vec![
            "ets".into(),
            "--quick".into(),
            "--no-sweep".into(),
            "--tasks".into(),
            "loop:64k,stream".into(),
            "--instructions".into(),
            "2000000".into(),
            "--out".into(),
            f("report"),
        ],
    ];
    let mut failures = Vec::new();
    for argv in &cases {
        let before = snapshot(&full);
        let ran = run(&env, argv);
        let after = snapshot(&full);
        let err = ran.stderr.trim_end();
        let last = err.lines().last().unwrap_or("");
        // The results reach the terminal (model and ets print them; trace convert has none
        // before its file is whole).
        let printed = argv[0] == "trace" || !ran.stdout.is_empty();
        let ok =
            ran.code.is_some_and(|c| c != 0) && printed && last.contains(full.to_str().unwrap()) && before == after;
        eprintln!(
            "full disk: smartcon {}: exit {:?}, {:.1} s, stdout {} bytes, last line {last:?}",
            argv.join(" "),
            ran.code,
            ran.seconds,
            ran.stdout.len()
        );
        if !ok {
            failures.push(format!(
                "smartcon {}: exit {:?}, stderr {err:?}, left {:?}",
                argv.join(" "),
                ran.code,
                after.keys().filter(|k| !before.contains_key(*k)).collect::<Vec<_>>()
            ));
        }
    }
    let _ = Command::new("umount").arg(&full).status();
    assert!(failures.is_empty(), "{failures:#?}");
}

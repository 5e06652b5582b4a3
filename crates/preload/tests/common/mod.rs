//! Helpers of the preload tests: find the built libsmartcon.so, compile C programs, run
//! them with and without the library.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// libsmartcon.so as cargo built it for this test run (target/<profile>/ or its deps/).
pub fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let p = dir.join("libsmartcon.so");
        if p.exists() {
            return p;
        }
    }
    panic!(
        "libsmartcon.so not found beside {}; build it with `cargo build --release -p smartcon-preload`",
        exe.display()
    );
}

/// A C compiler, or None (the test then says why it skips).
pub fn cc() -> Option<String> {
    ["cc", "gcc", "clang"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
        .map(str::to_string)
}

/// Compiles `source` (under crates/preload/c) into `dir`, with extra flags.
pub fn compile(cc: &str, source: &str, dir: &Path, extra: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c").join(source);
    let out = dir.join(source.trim_end_matches(".c"));
    let o = Command::new(cc)
        .args(["-O1", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .args(extra)
        .output()
        .expect("run the C compiler");
    assert!(o.status.success(), "{} did not compile:\n{}", src.display(), String::from_utf8_lossy(&o.stderr));
    out
}

/// A fresh directory on the local disk (target/tmp: O_DIRECT works there, unlike tmpfs
/// on older kernels).
pub fn temp_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create the test directory");
    d
}

/// Runs `cmd` under the library with `strategy`; the records go to `stats`.
pub fn run_preloaded(cmd: &mut Command, strategy: &str, stats: &Path) -> Output {
    cmd.env("LD_PRELOAD", library())
        .env("SMARTCON_PRELOAD_STRATEGY", strategy)
        .env("SMARTCON_PRELOAD_STATS", stats)
        .output()
        .expect("run the program under the library")
}

/// The records the processes appended, as JSON values.
pub fn records(stats: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(stats).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).expect("a JSON record")).collect()
}

pub fn total(records: &[serde_json::Value], field: &str) -> u64 {
    records.iter().map(|r| r[field].as_u64().unwrap_or(0)).sum()
}

/// Whether O_DIRECT works in `dir` (some file systems refuse it).
pub fn direct_io_works(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let p = dir.join("probe-direct");
    let ok = std::fs::OpenOptions::new().create(true).write(true).custom_flags(libc::O_DIRECT).open(&p).is_ok();
    let _ = std::fs::remove_file(&p);
    ok
}

/// A SMARTCON_HOME under `dir` whose profile of `file`'s device makes smart do every I/O
/// inline (`sync`, the very fast device's branch) whatever the machine's load: the way the
/// library reaches the plain call (`smartcon run` has no `sync` strategy of its own). The
/// device is named as the library will name it (a port opened on `file`).
pub fn home_where_smart_reads_inline(dir: &Path, file: &Path) -> PathBuf {
    use smartcon_engine::decision::{DeviceClass, Strategy};
    use smartcon_engine::profile::{profile_path_in, Profile};
    use smartcon_engine::smartport::{SmartPort, SmartPortOptions, StrategyChoice};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(file).unwrap();
    let options = SmartPortOptions { strategy: StrategyChoice::Fixed(Strategy::Block), ..Default::default() };
    let device = SmartPort::open(f.as_raw_fd(), options).unwrap().device_id().to_string();
    drop(f);
    let home = dir.join("home");
    let profile = Profile { class: DeviceClass::VeryFast, ..Profile::paper_default(&device) };
    profile.save(&profile_path_in(&home, &device)).unwrap();
    home
}

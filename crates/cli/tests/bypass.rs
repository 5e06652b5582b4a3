//! No silent bypass (issue 22): every way a program reaches its data under `smartcon run`
//! is taken, emulated, or named, and `--emulate` does not report success when the
//! program's I/O to the image went around the model. Real programs: fio's pvsync2
//! (RWF_HIPRI), libaio, io_uring and mmap engines, and Python's `os.preadv` (preadv2).
//! Tests that need fio or python3 say why they skip. No timing is asserted.

use std::path::Path;
use std::process::{Command, Output};

fn smartcon(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_smartcon"));
    c.env("SMARTCON_HOME", home);
    c
}

/// A scratch directory of this test, removed when the guard is dropped (also when the
/// test panics).
fn scratch(name: &str) -> tempfile::TempDir {
    // On the local disk (O_DIRECT), not a tmpfs.
    tempfile::Builder::new().prefix(&format!("bypass-{name}-")).tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
}

fn run_result(stats: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(stats).expect("the --stats file");
    serde_json::from_str(text.lines().last().expect("one record")).expect("JSON")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn fio_args(file: &Path, engine: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "fio",
        "--name=r",
        "--size=16m",
        "--direct=1",
        "--rw=randread",
        "--bs=4k",
        "--clocksource=clock_gettime",
        "--output-format=terse",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push(format!("--filename={}", file.display()));
    v.push(format!("--ioengine={engine}"));
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// `smartcon run [flags] --stats STATS -- fio ...`.
fn run_fio(flags: &[&str], stats: &Path, fio: &[String]) -> Output {
    smartcon(scratch("home").path())
        .arg("run")
        .args(flags)
        .arg("--stats")
        .arg(stats)
        .arg("--")
        .args(fio)
        .output()
        .unwrap()
}

/// fio's pvsync2 engine (preadv2), with and without --hipri: every read is taken, and the
/// RWF_HIPRI ones are counted as asking to be polled. Before, none was taken.
#[test]
fn fio_pvsync2_reads_are_taken_and_hipri_is_counted() {
    if !have("fio") {
        eprintln!("skipped: fio is not installed (apt-get install fio)");
        return;
    }
    let dir_guard = scratch("pvsync2");
    let dir = dir_guard.path().to_path_buf();
    let file = dir.join("data");
    for hipri in [false, true] {
        let stats = dir.join(format!("stats-{hipri}.jsonl"));
        let mut extra = vec!["--number_ios=1000"];
        if hipri {
            extra.push("--hipri");
        }
        let o = run_fio(&["--strategy", "smart"], &stats, &fio_args(&file, "pvsync2", &extra));
        assert!(o.status.success(), "hipri={hipri}: {}", stderr(&o));
        let r = run_result(&stats);
        assert!(r["ios"].as_u64().unwrap() >= 1000, "hipri={hipri}: {r}");
        let counted = r["hipri"].as_u64().unwrap();
        if hipri {
            assert!(counted >= 1000, "RWF_HIPRI reads not counted: {r}");
            assert!(stderr(&o).contains("asked to be polled (RWF_HIPRI)"), "{}", stderr(&o));
        } else {
            assert_eq!(counted, 0, "{r}");
        }
    }
}

/// fio's libaio engine outside --emulate, on an O_DIRECT file: every request is taken (the
/// kernel does the I/O, io_getevents waits as the strategy decided: spin polls the
/// completion ring, block waits in the kernel, smart decides per request) and counted.
/// Before, all of them were named as libaio that went around smartcon (`ios` 0). Buffered
/// requests (no O_DIRECT) are still not taken, and named.
#[test]
fn fio_libaio_requests_are_taken_and_buffered_ones_named() {
    if !have("fio") {
        eprintln!("skipped: fio is not installed (apt-get install fio)");
        return;
    }
    let dir_guard = scratch("libaio");
    let dir = dir_guard.path().to_path_buf();
    for strategy in ["spin", "block", "smart"] {
        let stats = dir.join(format!("stats-{strategy}.jsonl"));
        let o = run_fio(
            &["--strategy", strategy],
            &stats,
            &fio_args(&dir.join("data"), "libaio", &["--iodepth=8", "--number_ios=500"]),
        );
        assert!(o.status.success(), "{strategy}: {}", stderr(&o));
        let r = run_result(&stats);
        let ios = r["ios"].as_u64().unwrap();
        assert!(ios >= 500, "{strategy}: {r}");
        assert_eq!(r["not_taken"]["libaio"].as_u64().unwrap_or(0), 0, "{strategy}: {r}");
        let waited = |s: &str| r["by_strategy"][s].as_u64().unwrap_or(0);
        match strategy {
            "smart" => assert_eq!(waited("spin") + waited("block"), ios, "{r}"),
            s => assert_eq!(waited(s), ios, "{r}"),
        }
        assert!(!stderr(&o).contains("not taken: libaio"), "{strategy}: {}", stderr(&o));
    }
    let stats = dir.join("stats-buffered.jsonl");
    let o = run_fio(
        &[],
        &stats,
        &fio_args(&dir.join("data"), "libaio", &["--iodepth=8", "--number_ios=500", "--direct=0"]),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r = run_result(&stats);
    assert!(r["not_taken"]["libaio"].as_u64().unwrap_or(0) >= 500, "{r}");
    assert!(stderr(&o).contains("not taken: libaio"), "{}", stderr(&o));
}

/// fio's libaio engine on an emulated image, at iodepth 1 and 4, in virtual and real
/// time: every read is served by the model (counted), its completion waited for as the
/// run's strategy (smart) decided (counted too, issue 21), exit 0.
#[test]
fn fio_libaio_on_an_emulated_image_is_served_by_the_model() {
    if !have("fio") {
        eprintln!("skipped: fio is not installed (apt-get install fio)");
        return;
    }
    let dir_guard = scratch("libaio-emu");
    let dir = dir_guard.path().to_path_buf();
    let img = dir.join("disk.img");
    let emulate = format!("emu:nvram,size=64m={}", img.display());
    for (depth, vt) in [("1", true), ("4", true), ("4", false)] {
        let stats = dir.join(format!("stats-{depth}-{vt}.jsonl"));
        let mut flags = vec!["--emulate", &emulate];
        if vt {
            flags.push("--virtual-time");
        }
        let iodepth = format!("--iodepth={depth}");
        let o = run_fio(&flags, &stats, &fio_args(&img, "libaio", &[&iodepth, "--number_ios=300"]));
        assert!(o.status.success(), "iodepth {depth}, virtual {vt}: {}", stderr(&o));
        let r = run_result(&stats);
        assert!(r["emulated"]["reads"].as_u64().unwrap() >= 300, "iodepth {depth}: {r}");
        assert!(r["emulated"]["around_model"].as_object().unwrap().is_empty(), "{r}");
        let waited: u64 = r["emulated"]["by_strategy"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        let served = r["emulated"]["reads"].as_u64().unwrap() + r["emulated"]["writes"].as_u64().unwrap();
        assert_eq!(waited, served, "every served request's wait was decided: {r}");
        assert!(r["emulated"]["device_ns"].as_u64().unwrap() > 0, "{r}");
        if !vt {
            // Each event is handed out after its instant (a real wake-up is never exact):
            // the lateness is counted for libaio as for a synchronous call. Before, 0.
            assert!(r["emulated"]["late_ns_max"].as_u64().unwrap() > 0, "{r}");
        }
    }
}

/// io_uring and mmap on an emulated image: named on stderr and in the record, exit 3 (the
/// program exited 0, but its I/O went around the model). Before: exit 0, "served 0 reads".
#[test]
fn io_uring_and_mmap_on_an_emulated_image_are_named_and_fail_the_run() {
    if !have("fio") {
        eprintln!("skipped: fio is not installed (apt-get install fio)");
        return;
    }
    let dir_guard = scratch("around");
    let dir = dir_guard.path().to_path_buf();
    let img = dir.join("disk.img");
    let emulate = format!("emu:nvram,size=64m={}", img.display());
    for engine in ["io_uring", "mmap"] {
        let stats = dir.join(format!("stats-{engine}.jsonl"));
        let o =
            run_fio(&["--emulate", &emulate, "--virtual-time"], &stats, &fio_args(&img, engine, &["--number_ios=50"]));
        assert_eq!(o.status.code(), Some(3), "{engine}: {}", stderr(&o));
        assert!(stderr(&o).contains("went around the emulated device"), "{engine}: {}", stderr(&o));
        let r = run_result(&stats);
        assert_eq!(r["program_exit_code"], 0, "{r}");
        assert!(r["emulated"]["around_model"][engine].as_u64().unwrap_or(0) >= 1, "{engine}: {r}");
        assert!(r["not_taken"][engine].as_u64().unwrap_or(0) >= 1, "{engine}: {r}");
    }
}

/// CPython's os.preadv/os.pwritev (preadv2 when glibc has it) on an emulated image: every
/// call is served by the model. Before: "served 0 reads", exit 0.
#[test]
fn python_preadv_on_an_emulated_image_is_served() {
    if !have("python3") {
        eprintln!("skipped: python3 is not installed");
        return;
    }
    let dir_guard = scratch("python");
    let dir = dir_guard.path().to_path_buf();
    let img = dir.join("disk.img");
    let script = dir.join("pv.py");
    std::fs::write(
        &script,
        "import mmap, os, sys\n\
         fd = os.open(sys.argv[1], os.O_RDWR | os.O_DIRECT)\n\
         buf = mmap.mmap(-1, 4096)\n\
         n = sum(os.preadv(fd, [buf], (i * 7919 % 1000) * 4096) for i in range(100))\n\
         os.pwritev(fd, [buf], 0)\n\
         os.close(fd)\n\
         print(n)\n",
    )
    .unwrap();
    let stats = dir.join("stats.jsonl");
    let emulate = format!("emu:nvram,size=64m={}", img.display());
    let o = smartcon(scratch("home").path())
        .args(["run", "--emulate", &emulate, "--stats"])
        .arg(&stats)
        .arg("--")
        .arg("python3")
        .arg(&script)
        .arg(&img)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "409600");
    let r = run_result(&stats);
    assert_eq!(r["emulated"]["reads"], 100, "{r}");
    assert_eq!(r["emulated"]["writes"], 1, "{r}");
}

/// `--emulate SPEC=PATH` with a directory, /proc/self/mem or a path in a directory that
/// does not exist: one line, exit 2, and the program does not run. A missing file in an
/// existing directory is created at the capacity. Before: each ran to exit 0.
#[test]
fn an_emulate_path_that_is_not_an_image_is_refused_before_the_program_runs() {
    let dir_guard = scratch("validate");
    let dir = dir_guard.path().to_path_buf();
    let marker = dir.join("ran");
    let touch = format!("touch {}", marker.display());
    let bad = [dir.display().to_string(), "/proc/self/mem".into(), dir.join("missing/disk.img").display().to_string()];
    for path in &bad {
        let o = smartcon(scratch("home").path())
            .args(["run", "--emulate", &format!("emu:hdd={path}"), "--", "sh", "-c", &touch])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{path}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{path}: one line: {}", stderr(&o));
        assert!(!marker.exists(), "{path}: the program ran");
    }
    let img = dir.join("disk.img");
    let o = smartcon(scratch("home").path())
        .args(["run", "--emulate", &format!("emu:nvram,size=16m={}", img.display()), "--", "true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 16 << 20);
    assert!(stderr(&o).contains("never opened"), "{}", stderr(&o));
}

/// `emulate sweep --speedups` takes the factors a spec's `speedup=` takes (0.001 to
/// 1,000,000), on every path: one line, exit 2. Before, 1e12 was accepted (and every run
/// then went without emulation).
#[test]
fn sweep_speedups_are_bounded_as_a_specs_speedup_is() {
    for extra in [&["--plan-only"][..], &[]] {
        let o = smartcon(scratch("home").path())
            .args(["emulate", "sweep", "--device", "emu:nvram", "--speedups", "1,1e12"])
            .args(extra)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("between 0.001 and 1000000"), "{extra:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    }
    // The spec's own bound, for comparison: the same words.
    let o = smartcon(scratch("home").path())
        .args(["run", "--emulate", "emu:nvram,speedup=1e12=/nonexistent/x", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("between 0.001 and 1000000"), "{}", stderr(&o));
}

/// A launcher's helper processes (a pyenv shim runs shells and tools before the program)
/// load the library too, but are not the program's processes: `processes` counts the ones
/// that did I/O the library saw, `processes_loaded` all of them. Before, a shim's 78
/// helpers made "79 process(es)" for one python.
#[test]
fn a_launchers_helper_shells_are_not_counted_as_the_programs_processes() {
    if !have("dd") {
        eprintln!("skipped: no dd");
        return;
    }
    let dir_guard = scratch("shim");
    let dir = dir_guard.path().to_path_buf();
    let data = dir.join("data");
    std::fs::write(&data, vec![7u8; 1 << 20]).unwrap();
    let stats = dir.join("stats.jsonl");
    // A shim-like launcher: five helper shells, then the program, which reads with O_DIRECT.
    let shim = format!(
        "for i in 1 2 3 4 5; do sh -c 'x=$(echo shim)'; done; exec dd if={} of=/dev/null bs=4k count=64 iflag=direct 2>/dev/null",
        data.display()
    );
    let o = smartcon(scratch("home").path())
        .arg("run")
        .arg("--stats")
        .arg(&stats)
        .args(["--", "sh", "-c", &shim])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let r = run_result(&stats);
    assert!(r["ios"].as_u64().unwrap() >= 64, "dd's O_DIRECT reads were not taken: {r}");
    assert_eq!(r["processes"], 1, "only dd did I/O: {r}");
    assert!(r["processes_loaded"].as_u64().unwrap() >= 6, "the helpers loaded the library: {r}");
    assert!(stderr(&o).contains("in 1 process(es)"), "{}", stderr(&o));
    assert!(stderr(&o).contains("more process(es) loaded the library and did no I/O"), "{}", stderr(&o));
}

/// Finding 6: `emulate replay --trace /dev/urandom` read forever. A device is refused at
/// once (one line, exit 2), and a trace on standard input, which has no size to check, ends
/// after `--trace-lines-max` lines with one line saying how to raise it, however long the
/// stream (here endless valid lines; the writer stops when smartcon closes the pipe).
#[test]
fn a_trace_that_never_ends_is_refused_or_bounded() {
    // Bounded: a smartcon that reads the device forever fails here rather than hangs.
    let home = scratch("home");
    let mut child = smartcon(home.path())
        .args(["emulate", "replay", "--device", "emu:nvme", "--trace", "/dev/urandom"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("emulate replay --trace /dev/urandom still reading after 120 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("/dev/urandom"), "{}", stderr(&o));

    use std::io::Write;
    let home = scratch("home");
    let mut child = smartcon(home.path())
        .args(["emulate", "replay", "--device", "emu:nvme", "--format", "msr", "--trace", "-"])
        .args(["--trace-lines-max", "1000"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let line = b"128166372003061629,hm,1,Read,383496192,4096,118484\n";
        // Bounded, so a smartcon that never stops reading fails the test instead of hanging it.
        let mut written = 0u64;
        while written < 50_000_000 && input.write_all(line).is_ok() {
            written += 1;
        }
        written
    });
    let o = child.wait_with_output().unwrap();
    let written = writer.join().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("more than 1000 lines; raise --trace-lines-max"), "{}", stderr(&o));
    assert!(written < 50_000_000, "smartcon read the whole stream");
}

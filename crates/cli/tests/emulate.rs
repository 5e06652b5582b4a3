//! `smartcon emulate replay` end to end (closed loop, a blkparse trace and a fio iolog
//! written here, in virtual and real time) and fault scenarios through `smartcon io` on an
//! emulated target. Checks exit status and records; asserts no timing (real-time runs use
//! microsecond latencies and only their counts are checked).

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn run(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smartcon")).env("SMARTCON_HOME", home).args(args).output().expect("run smartcon")
}

/// Runs a command that must succeed and returns its one JSON record of `record_type`.
fn record(home: &Path, args: &[&str], record_type: &str) -> Value {
    let out = run(home, args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let recs: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    recs.into_iter().find(|r| r["type"] == record_type).unwrap_or_else(|| panic!("no {record_type} in {text}"))
}

/// A scratch directory of this test, removed when the guard is dropped (also when the
/// test panics).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("smartcon-emulate-cli-{name}-")).tempdir().unwrap()
}

fn ring_available() -> bool {
    match smartcon_engine::ring::Ring::new() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipping the real-time parts: io_uring is not available here ({})", e.message);
            false
        }
    }
}

#[test]
fn replay_closed_loop_and_traces_in_virtual_and_real_time() {
    let home_guard = scratch("replay");
    let home = home_guard.path().to_path_buf();
    let h = home.as_path();
    let closed = ["emulate", "replay", "--device", "emu:sdcard", "--op", "write", "--ios", "300", "--json"];
    let v = record(h, &closed, "replay_result");
    assert_eq!(v["ios"], 300);
    // Random 4 KiB writes on the SD card table: 1.1601 ms each at QD1, exactly.
    assert_eq!(v["lat_ns_p50"], 1_160_100);
    assert!(v.get("within_2pct").is_none(), "virtual time alone reports no lateness");

    let blk = home.join("trace.blkparse");
    std::fs::write(
        &blk,
        "  8,0    1        1     0.000000000  4162  D   R 2048 + 8 [fio]\n\
           8,0    1        2     0.000050000  4162  C   R 2048 + 8 [0]\n\
           8,0    0        3     0.000100000  4163  D   W 4096 + 16 [kworker]\n\
           8,0    0        4     0.000300000  4163  D   R 8192 + 8 [fio]\n",
    )
    .unwrap();
    let iolog = home.join("trace.iolog");
    std::fs::write(
        &iolog,
        "fio version 3 iolog\n0 f add\n10 f write 0 4096\n200 f read 4096 4096\n400 f read 0 8192\n",
    )
    .unwrap();
    let real = ring_available();
    for trace in [&blk, &iolog] {
        let t = trace.to_str().unwrap();
        let mut args = vec!["emulate", "replay", "--device", "emu:optane", "--trace", t, "--json"];
        if real {
            args.extend(["--real-time", "--strategy", "spin"]);
        }
        let r = record(h, &args, "replay_result");
        assert_eq!(r["ios"], 3, "{t}");
        if real {
            let rt = &r["real_time"];
            assert_eq!(rt["by_op"]["read"]["ios"].as_u64().unwrap() + rt["by_op"]["write"]["ios"].as_u64().unwrap(), 3);
            assert!((0.0..=1.0).contains(&r["within_2pct"].as_f64().unwrap()));
        }
    }
    // The replay's strategy is the engine's: smart decides every I/O through the SmartPort,
    // block is the reference wait, and a strategy the replay does not take is refused.
    if real {
        let smart = ["emulate", "replay", "--device", "emu:nvme", "--ios", "200", "--real-time", "--strategy", "smart"];
        let r = record(h, &[&smart[..], &["--json"]].concat(), "replay_result");
        let rt = &r["real_time"];
        assert_eq!(rt["strategy"], "smart");
        let sum = |v: &Value| v.as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum::<u64>();
        assert_eq!(sum(&rt["decisions"]["by_reason"]), 200, "{rt}");
        assert_eq!(sum(&rt["decisions"]["by_strategy"]), 200, "{rt}");
        let block = ["emulate", "replay", "--device", "emu:nvme", "--ios", "50", "--real-time", "--json"];
        let rt = record(h, &block, "replay_result")["real_time"].clone();
        assert_eq!((rt["strategy"].as_str(), rt["reference_waits"].as_u64()), (Some("block"), Some(50)), "{rt}");
        assert_eq!(rt["decisions"]["by_strategy"]["block"], 50, "{rt}");
    }
    let out = run(h, &["emulate", "replay", "--device", "emu:nvme", "--ios", "10", "--real-time", "--strategy", "dip"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"dip\"") && err.contains("smart, paper"), "{err}");
    // A bad line is an error naming its line number.
    std::fs::write(&iolog, "fio version 3 iolog\n10 f write 0 4096\n20 f frobnicate 0 4096\n").unwrap();
    let out = run(h, &["emulate", "replay", "--device", "emu:optane", "--trace", iolog.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 3"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn replay_reads_the_public_trace_formats_and_refuses_bad_input_in_one_line() {
    let home_guard = scratch("formats");
    let home = home_guard.path().to_path_buf();
    let h = home.as_path();
    // MSR Cambridge (filetime ticks, bytes), two disks; Alibaba (us, bytes); Tencent
    // (seconds, sectors): lines as their READMEs describe them.
    let msr = home.join("hm_1.csv");
    std::fs::write(
        &msr,
        "128166372003061629,hm,1,Read,3154152960,32768,8742\n\
         128166372003062629,hm,1,Write,3154185728,4096,1231\n\
         128166372003064629,hm,0,Write,1048576,4096,2001\n",
    )
    .unwrap();
    let alibaba = home.join("alibaba.csv");
    std::fs::write(
        &alibaba,
        "419,W,8792731648,16384,1577808144360767\n419,R,4096,4096,1577808144360800\n7,R,0,4096,1577808144361767\n",
    )
    .unwrap();
    let tencent = home.join("tencent.csv");
    std::fs::write(&tencent, "1538323200,2466120,8,1,1283\n1538323200,13446248,16,0,1283\n").unwrap();
    for (path, format, ios) in [(&msr, "msr", 3), (&alibaba, "alibaba", 3), (&tencent, "tencent", 2)] {
        let p = path.to_str().unwrap();
        let r = record(h, &["emulate", "replay", "--device", "emu:nvme", "--trace", p, "--json"], "replay_result");
        assert_eq!(r["ios"], ios, "{p}");
        assert_eq!(r["workload"], format!("trace:{format}:{p}"));
        assert_eq!(r["trace"]["late"], 0);
        assert!(r["requests_per_s_cpu"].as_f64().unwrap() > 0.0);
    }
    // One volume of a multi-volume trace.
    let p = msr.to_str().unwrap();
    let args = ["emulate", "replay", "--device", "emu:nvme", "--trace", p, "--device-filter", "hm_1", "--json"];
    let r = record(h, &args, "replay_result");
    assert_eq!((r["ios"].as_u64(), r["trace"]["filtered"].as_u64()), (Some(2), Some(1)));
    // Gzip, detected by its magic bytes, as the public traces ship.
    let gz = home.join("hm_1.csv.gz");
    let status = Command::new("gzip").arg("-k").arg(&msr).status();
    if status.is_ok_and(|s| s.success()) {
        let r = record(
            h,
            &["emulate", "replay", "--device", "emu:nvme", "--trace", gz.to_str().unwrap(), "--json"],
            "replay_result",
        );
        assert_eq!(r["ios"], 3);
    }
    // Bad input: one line naming the file and line, exit status 2.
    let bad = home.join("bad.csv");
    std::fs::write(
        &bad,
        "419,W,0,4096,1577808144360767\n419,W,0,4096,1577808144360768\n419,X,0,4096,1577808144360769\n",
    )
    .unwrap();
    let unknown = home.join("unknown.txt");
    std::fs::write(&unknown, "hello world\n").unwrap();
    let b = bad.to_str().unwrap();
    let u = unknown.to_str().unwrap();
    for (args, want) in [
        (vec!["--trace", b], format!("{b}: line 3: opcode \"X\"")),
        (vec!["--trace", u], format!("{u}: line 1: unknown trace format")),
        // A device is refused before it is read (issue 29), not read until a line is too long.
        (vec!["--trace", "/dev/zero"], "/dev/zero: is a character device".to_string()),
        (vec!["--trace", b, "--format", "msr"], format!("{b}: line 1: msr lines have 7 fields")),
    ] {
        let mut argv = vec!["emulate", "replay", "--device", "emu:nvme"];
        argv.extend(args);
        let out = run(h, &argv);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{argv:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(&want), "{err} lacks {want}");
    }
}

#[test]
fn faults_in_the_device_spec_fail_io_and_count_in_replays() {
    let home_guard = scratch("faults");
    let home = home_guard.path().to_path_buf();
    let h = home.as_path();
    let all_writes = home.join("writes-fail.toml");
    std::fs::write(&all_writes, "seed = 3\n[[error]]\nop = \"write\"\n").unwrap();
    let some_writes = home.join("some-writes-fail.toml");
    std::fs::write(&some_writes, "seed = 3\n[[error]]\nop = \"write\"\nprobability = 0.2\n").unwrap();
    let spike = home.join("spike.toml");
    std::fs::write(&spike, "[[spike]]\nstart = \"0s\"\nend = \"3600s\"\nfactor = 3.0\n").unwrap();
    let dev = |f: &Path| format!("emu:optane,size=16m,faults={}", f.display());

    // Virtual time: the spec's scenario fails about a fifth of the writes, reproducibly.
    let d = dev(&some_writes);
    let argv = vec!["emulate", "replay", "--device", &d, "--op", "write", "--ios", "1000", "--json"];
    let v = record(h, &argv, "replay_result");
    let failed = v["errors_write"].as_u64().unwrap();
    assert!((120..280).contains(&failed), "{failed}");
    assert_eq!(record(h, &argv, "replay_result")["errors_write"], failed);

    if !ring_available() {
        return;
    }
    // Real time: the same scenario through the engine's target; failed writes are
    // counted, not fatal, in a replay.
    let mut rt = argv.clone();
    rt.extend(["--real-time", "--strategy", "spin"]);
    let r = record(h, &rt, "replay_result");
    let real = &r["real_time"];
    assert!(real["errors_write"].as_u64().unwrap() > 0);
    assert_eq!(real["errors_write"].as_u64().unwrap() + real["by_op"]["write"]["ios"].as_u64().unwrap(), 1000);

    // `io`: a failed write ends the run with an error naming op and offset.
    let d = dev(&all_writes);
    let out = run(h, &["io", "--target", &d, "--op", "write", "--duration", "100ms", "--strategy", "spin"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("write at offset") && err.contains("fault scenario"), "{err}");
    // With --verify as well (a failed write is never counted as written: the run fails).
    let out = run(h, &["io", "--target", &d, "--op", "write", "--duration", "100ms", "--verify"]);
    assert!(!out.status.success());
    // Reads are not in the rule: they run, and the record reports the emulation's accuracy.
    let r = record(h, &["io", "--target", &d, "--duration", "100ms", "--strategy", "spin", "--json"], "result");
    assert!(r["ios"].as_u64().unwrap() > 0);
    assert_eq!(r["accuracy"]["ios"], r["ios"]);
    // A spike stretches every request three times over the model's service time.
    let d = dev(&spike);
    let r = record(h, &["io", "--target", &d, "--duration", "100ms", "--strategy", "spin", "--json"], "result");
    assert!(r["lat_ns_min"].as_u64().unwrap() >= 3 * r["model_service_ns"].as_u64().unwrap() - 3);
}

/// `emulate mount --strategy` takes the engine's names and no other, on either transport;
/// a wrong name is refused before anything is made (no root needed).
#[test]
fn mount_strategy_takes_the_engines_names() {
    let home = scratch("mount-strategy");
    let dir = home.path().join("m");
    std::fs::create_dir(&dir).unwrap();
    let d = dir.to_str().unwrap();
    for transport in ["dev", "uring"] {
        let out =
            run(home.path(), &["emulate", "mount", "emu:sdcard", d, "--transport", transport, "--strategy", "spinn"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains("block, spin, sync, hybrid") && err.contains("smart"), "{err}");
    }
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none(), "something was made in DIR");
    let devices = home.path().join("devices");
    assert!(!devices.exists() || std::fs::read_dir(&devices).unwrap().next().is_none(), "a record was made");
}

/// Pages of `path` in the page cache (`mincore` on a mapping of it).
fn cached_pages(path: &Path) -> usize {
    let file = std::fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    let page = 4096;
    // SAFETY: a private read-only mapping of `len` bytes of an open file, given to mincore
    // only (no byte of it is read) and unmapped before return; `vec` has a byte per page.
    unsafe {
        use std::os::fd::AsRawFd;
        let map = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0);
        assert_ne!(map, libc::MAP_FAILED);
        let mut vec = vec![0u8; len.div_ceil(page)];
        assert_eq!(libc::mincore(map, len, vec.as_mut_ptr()), 0);
        libc::munmap(map, len);
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }
}

/// Drops `path`'s pages from the page cache (written back first); the pages that stayed.
fn evict(path: &Path) -> usize {
    let file = std::fs::File::open(path).unwrap();
    file.sync_all().unwrap();
    // SAFETY: advice on an open descriptor; no memory is passed.
    unsafe {
        use std::os::fd::AsRawFd;
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
    cached_pages(path)
}

/// The record's fields that a replay in virtual time decides (not its CPU or wall time).
fn virtual_fields(r: &Value) -> Value {
    let mut r = r.clone();
    let map = r.as_object_mut().unwrap();
    map.retain(|k, _| !(k.contains("wall") || k.contains("cpu") || k.contains("per_s") || k.contains("speedup")));
    r
}

#[test]
fn replay_reads_a_trace_by_o_direct_or_says_why_not_and_parses_on_its_own_thread_if_asked() {
    let home_guard = scratch("direct");
    let home = home_guard.path().to_path_buf();
    let h = home.as_path();
    // 40,000 I/Os (1.4 MB: several of the direct reader's 256 KiB blocks), some out of order.
    let iolog = home.join("t.log");
    let mut text = String::from("fio version 3 iolog\n0 /dev/a add\n");
    for i in 0..40_000u64 {
        let us = i * 3 + (i % 7) * 5;
        let op = if i % 10 < 7 { "read" } else { "write" };
        text.push_str(&format!("{us} /dev/a {op} {} 4096\n", (i * 7919 % 65_536) * 4096));
    }
    std::fs::write(&iolog, &text).unwrap();
    let p = iolog.to_str().unwrap();
    let replay = |extra: &[&str]| {
        let mut argv = vec!["emulate", "replay", "--device", "emu:nvme", "--trace", p, "--json"];
        argv.extend_from_slice(extra);
        run(h, &argv)
    };
    let parsed = |out: &Output| -> Value {
        let text = String::from_utf8_lossy(&out.stdout);
        let recs: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        recs.into_iter().find(|r| r["type"] == "replay_result").expect("a replay_result")
    };
    let base = replay(&[]);
    assert!(base.status.success(), "{}", String::from_utf8_lossy(&base.stderr));
    let base = parsed(&base);
    assert_eq!(base["ios"], 40_000);
    assert!(base["trace"]["late"].as_u64().unwrap() == 0 && base["outstanding_max"].as_u64().unwrap() > 1, "{base}");

    // On the replay's own thread: the same replay.
    let inline = replay(&["--parse-inline"]);
    assert!(inline.status.success(), "{}", String::from_utf8_lossy(&inline.stderr));
    assert_eq!(virtual_fields(&parsed(&inline)), virtual_fields(&base));

    // By O_DIRECT: the same replay, and the file is not left in the page cache (where the
    // cache could be emptied of it first; a read through the cache then fills it).
    let stayed = evict(&iolog);
    let direct = replay(&["--direct-read"]);
    let err = String::from_utf8_lossy(&direct.stderr).to_string();
    if !direct.status.success() {
        // A file system without O_DIRECT (tmpfs before Linux 6.6): one line that says so.
        assert_eq!(direct.status.code(), Some(2), "{err}");
        assert!(err.contains(p) && err.contains("refuses O_DIRECT") && err.lines().count() == 1, "{err}");
        eprintln!("skipping the O_DIRECT replay: the temporary directory's file system refuses it ({err})");
    } else {
        assert_eq!(virtual_fields(&parsed(&direct)), virtual_fields(&base));
        let pages = text.len().div_ceil(4096);
        let after_direct = cached_pages(&iolog);
        if stayed == 0 {
            assert!(after_direct <= 2, "{after_direct} of {pages} pages cached after an O_DIRECT read");
            assert!(replay(&[]).status.success());
            let after_cached = cached_pages(&iolog);
            assert!(after_cached >= pages * 9 / 10, "{after_cached} of {pages} pages cached after a read through it");
        } else {
            eprintln!("not checking the page cache: {stayed} of {pages} pages stayed after POSIX_FADV_DONTNEED");
        }
        // A gzip trace is read so too, and decompressed as it comes.
        if Command::new("gzip").arg("-k").arg(&iolog).status().is_ok_and(|s| s.success()) {
            let gz = home.join("t.log.gz");
            let argv = ["emulate", "replay", "--device", "emu:nvme", "--trace", gz.to_str().unwrap(), "--json"];
            let plain = record(h, &argv, "replay_result");
            let mut with = argv.to_vec();
            with.push("--direct-read");
            let direct_gz = record(h, &with, "replay_result");
            assert_eq!(direct_gz["ios"], 40_000);
            assert_eq!((&direct_gz["read"], &direct_gz["write"]), (&plain["read"], &plain["write"]));
        }
    }

    // Standard input cannot be read so: one line, before anything is read.
    let out = Command::new(env!("CARGO_BIN_EXE_smartcon"))
        .env("SMARTCON_HOME", h)
        .args(["emulate", "replay", "--device", "emu:nvme", "--trace", "-", "--direct-read"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("O_DIRECT reads a file, not standard input") && err.lines().count() == 1, "{err}");
    // Without a trace there is nothing to read so.
    let out = run(h, &["emulate", "replay", "--device", "emu:nvme", "--direct-read"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--direct-read and --parse-inline read a --trace"));
}

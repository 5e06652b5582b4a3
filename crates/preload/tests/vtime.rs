//! `--emulate SPEC=PATH` with and without `--virtual-time`: what a program sees of the
//! device and of its clocks. The library is driven through its environment, as `smartcon
//! run` drives it. Bounds are deterministic: every wait lasts at least the model's time,
//! and what the program sees beyond it is real time (so at most the run's wall time).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use smartcon_devemu::{parse_spec, Op};

struct Run {
    fields: Vec<(String, i64)>,
    record: serde_json::Value,
    wall_ns: i64,
}

impl Run {
    fn get(&self, name: &str) -> i64 {
        self.fields.iter().find(|f| f.0 == name).unwrap_or_else(|| panic!("{name} missing in {:?}", self.fields)).1
    }
}

fn run(program: &Path, dir: &Path, spec: &str, virtual_time: bool, args: &[&str]) -> Run {
    run_env(program, dir, spec, virtual_time, args, &[])
}

/// [`run`] with more of the library's environment.
fn run_env(program: &Path, dir: &Path, spec: &str, virtual_time: bool, args: &[&str], envs: &[(&str, &str)]) -> Run {
    let image = dir.join("disk.img");
    let stats = dir.join(format!("emu-{}.jsonl", args[0]));
    let _ = std::fs::remove_file(&stats);
    let start = Instant::now();
    let out = Command::new(program)
        .arg(args[0])
        .arg(&image)
        .args(&args[1..])
        .env("LD_PRELOAD", common::library())
        .env("SMARTCON_PRELOAD_EMU_SPEC", spec)
        .env("SMARTCON_PRELOAD_EMU_PATH", &image)
        .env("SMARTCON_PRELOAD_VIRTUAL_TIME", if virtual_time { "1" } else { "0" })
        .env("SMARTCON_PRELOAD_EMU_STATS", &stats)
        .envs(envs.iter().copied())
        .output()
        .expect("run the program");
    let wall_ns = start.elapsed().as_nanos() as i64;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let fields = stdout
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().expect("a number")))
        .collect();
    let records = common::records(&stats);
    assert_eq!(records.len(), 1, "one emu_process record: {records:?}");
    Run { fields, record: records[0].clone(), wall_ns }
}

fn setup(name: &str) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let Some(cc) = common::cc() else {
        eprintln!("skipped: no C compiler");
        return None;
    };
    let dir = common::temp_dir(name);
    let program = common::compile(&cc, "vtime.c", &dir, &[]);
    Some((dir, program))
}

/// A position-independent model: each 4 KiB read costs exactly its service time.
const SPEC: &str = "emu:nvme,lat=3ms,channels=1";

#[test]
fn virtual_time_elapsed_is_the_models_sum_and_costs_little_wall_time() {
    let Some((dir, program)) = setup("vtime-io") else { return };
    let (n, sleep_us) = (40i64, 400_000i64);
    let r = run(&program, &dir, SPEC, true, &["io", &n.to_string(), &sleep_us.to_string()]);
    let service_ns = parse_spec(SPEC).unwrap().service_ns(Op::Read, 4096) as i64;
    let expected = n * service_ns + 2 * sleep_us * 1000;
    let mono = r.get("mono_ns");
    assert_eq!(r.record["reads"], n);
    assert_eq!(r.record["device_ns"].as_i64().unwrap(), n * service_ns);
    // Each wait lasts the model's time; what else the program sees is its own real time.
    assert!(mono >= expected && mono <= expected + r.wall_ns, "mono {mono}, expected {expected}, wall {}", r.wall_ns);
    assert!(r.wall_ns < mono, "virtual time should cost less wall time ({}) than it shows ({mono})", r.wall_ns);
    // Every wall clock moves with the monotonic one.
    for f in ["boot_ns", "tod_ns"] {
        assert!((r.get(f) - mono).abs() <= r.wall_ns, "{f} {} against mono {mono}", r.get(f));
    }
    assert!(r.get("time_s") >= mono / 1_000_000_000 - 1 && r.get("time_s") <= mono / 1_000_000_000 + 1);
    assert!(r.record["skew_ns"].as_i64().unwrap() > 0 && r.record["virtual_time"] == true);
}

#[test]
fn real_time_serving_waits_at_least_the_model() {
    let Some((dir, program)) = setup("vtime-rt") else { return };
    let spec = "emu:nvme,lat=2ms,channels=1";
    let r = run(&program, &dir, spec, false, &["io", "5", "1000"]);
    let service_ns = parse_spec(spec).unwrap().service_ns(Op::Read, 4096) as i64;
    let mono = r.get("mono_ns");
    assert!(mono >= 5 * service_ns + 2_000_000, "mono {mono}");
    assert_eq!(r.record["skew_ns"], 0, "real time never moves the clock");
    assert!(r.wall_ns >= mono, "real time: wall {} >= what the program saw {mono}", r.wall_ns);
}

#[test]
fn a_computing_thread_sees_no_jump_while_another_waits() {
    let Some((dir, program)) = setup("vtime-threads") else { return };
    let spec = "emu:nvme,lat=2s,channels=1";
    let r = run(&program, &dir, spec, true, &["threads", "30"]);
    let (compute, main) = (r.get("compute_ns"), r.get("main_ns"));
    // A jump over the 2 s wait during the computation would show in its elapsed time.
    assert!(compute < 1_500_000_000, "the computing thread saw a jump: {compute} ns");
    // Once the computing thread has exited, the main thread's wait is skipped.
    assert!(main >= 2_000_000_000, "main {main}");
    assert!(r.record["jumps"].as_u64().unwrap() >= 1, "{:?}", r.record);
    assert!(r.wall_ns < main, "wall {} main {main}", r.wall_ns);
}

#[test]
fn fio_runs_to_completion_under_virtual_time() {
    if Command::new("fio").arg("--version").output().is_err() {
        eprintln!("skipped: fio is not installed");
        return;
    }
    let dir = common::temp_dir("vtime-fio");
    let image = dir.join("fio.img");
    std::fs::File::create(&image).unwrap().set_len(64 << 20).unwrap();
    let stats = dir.join("emu.jsonl");
    let spec = "emu:nvme,lat=1ms,channels=1";
    let out = Command::new("fio")
        .args(["--name=r", "--size=64m", "--clocksource=clock_gettime", "--ioengine=psync", "--iodepth=1"])
        .args(["--direct=1", "--rw=randread", "--bs=4k", "--number_ios=50", "--output-format=json"])
        .arg(format!("--filename={}", image.display()))
        .env("LD_PRELOAD", common::library())
        .env("SMARTCON_PRELOAD_EMU_SPEC", spec)
        .env("SMARTCON_PRELOAD_EMU_PATH", &image)
        .env("SMARTCON_PRELOAD_VIRTUAL_TIME", "1")
        .env("SMARTCON_PRELOAD_EMU_STATS", &stats)
        .output()
        .expect("run fio");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("fio's JSON");
    let read = &json["jobs"][0]["read"];
    assert_eq!(read["total_ios"], 50);
    let service_ns = parse_spec(spec).unwrap().service_ns(Op::Read, 4096) as f64;
    assert!(read["clat_ns"]["mean"].as_f64().unwrap() >= service_ns, "{}", read["clat_ns"]);
    assert_eq!(common::total(&common::records(&stats), "reads"), 50);
}

#[test]
fn timed_waits_let_the_clock_jump_and_events_still_end_them_at_once() {
    let Some((dir, program)) = setup("vtime-waits") else { return };
    // The main thread's one pread takes 2 s on this model; the seven waiters' deadlines
    // are 3, 4, 5, 7 s (none signalled) and 50, 100 s or none (each ended by the main
    // thread right after its pread).
    let r = run(&program, &dir, "emu:nvme,lat=2s,channels=1", true, &["waits"]);
    let s = 1_000_000_000i64;
    assert_eq!(r.get("backwards"), 0, "a clock read went back: {:?}", r.fields);
    assert!(r.get("pread_ns") >= 2 * s, "{:?}", r.fields);
    for (name, rc, at_least) in
        [("cond_timeout", libc::ETIMEDOUT, 5), ("poll", 0, 7), ("select", 0, 3), ("sem", libc::ETIMEDOUT, 4)]
    {
        assert_eq!(r.get(&format!("{name}_rc")), rc as i64, "{name} timed out: {:?}", r.fields);
        assert!(r.get(&format!("{name}_ns")) >= at_least * s, "{name} lasted its timeout: {:?}", r.fields);
    }
    // Signalled, woken by the pipe: they return as the real call does, at the event, and
    // the clock never ran on to their far deadlines (50 s, 100 s).
    for name in ["cond_signalled", "cond_untimed"] {
        assert_eq!(r.get(&format!("{name}_rc")), 0, "{name}: {:?}", r.fields);
    }
    assert_eq!(r.get("pipe_rc"), 1, "the pipe's data ended the poll: {:?}", r.fields);
    let total = r.get("total_ns");
    assert!(total >= 7 * s && total < 50 * s, "the run ends at the last timeout, 7 s: {:?}", r.fields);
    for name in ["cond_signalled", "cond_untimed", "pipe"] {
        assert!(r.get(&format!("{name}_ns")) <= total, "{name}: {:?}", r.fields);
    }
    // The 7 s were skipped, not waited: the clock jumped over the waits.
    assert!(r.record["jumps"].as_u64().unwrap() >= 1, "{:?}", r.record);
    assert!(r.record["jumped_ns"].as_i64().unwrap() >= 5 * s, "{:?}", r.record);
}

#[test]
fn a_forked_child_shares_the_clock_and_its_device_wait_is_skipped() {
    let Some((dir, program)) = setup("vtime-fork") else { return };
    let image = dir.join("disk.img");
    let stats = dir.join("emu-fork.jsonl");
    let _ = std::fs::remove_file(&stats);
    let out = Command::new(&program)
        .arg("fork")
        .arg(&image)
        .env("LD_PRELOAD", common::library())
        .env("SMARTCON_PRELOAD_EMU_SPEC", "emu:nvme,lat=2s,channels=1")
        .env("SMARTCON_PRELOAD_EMU_PATH", &image)
        .env("SMARTCON_PRELOAD_VIRTUAL_TIME", "1")
        .env("SMARTCON_PRELOAD_EMU_STATS", &stats)
        .output()
        .expect("run the program");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let get = |k: &str| -> i64 {
        stdout
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")).map(|v| v.parse().unwrap()))
            .unwrap_or_else(|| panic!("{k} missing in {stdout}"))
    };
    assert_eq!(get("child_ok"), 1, "{stdout}");
    assert!(get("child_ns") >= 2_000_000_000, "{stdout}");
    // The parent sleeps in 10 ms slices meanwhile: it sees the child's 2 s on the same clock.
    assert!(get("parent_ns") >= get("child_ns"), "{stdout}");
    // Both processes idle (one in the device wait, one asleep): the clock jumped, and the
    // processes' records together say so once (each counts the jumps it made).
    let records = common::records(&stats);
    assert_eq!(records.len(), 2, "{records:?}");
    let skew: i64 = records.iter().map(|r| r["skew_ns"].as_i64().unwrap()).sum();
    assert!(skew >= 1_500_000_000, "the 2 s wait was mostly skipped: {records:?}");
}

/// UML's ubd thread moves a guest request page by page: a helper's contiguous pieces are
/// one request on the model, which returns once, at its end (when the helper next does
/// something else: here its write to the pipe), and is counted once.
#[test]
fn a_helpers_page_pieces_are_one_request_that_waits_once_at_its_end() {
    let Some((dir, program)) = setup("vtime-helper") else { return };
    let pieces = 8;
    for virtual_time in [true, false] {
        let r = run(&program, &dir, SPEC, virtual_time, &["helper", &pieces.to_string()]);
        let reads = r.record["reads"].as_i64().unwrap();
        let joined = r.record["pieces_joined"].as_i64().unwrap();
        let counted: i64 = r.record["lateness"]["counts"].as_array().unwrap().iter().map(|c| c.as_i64().unwrap()).sum();
        assert_eq!(reads, pieces, "{:?}", r.record);
        assert!(joined >= 1, "contiguous pieces join: {:?}", r.record);
        // One lateness per request, not per piece.
        assert_eq!(counted + joined, reads, "{:?}", r.record);
        // The request returned (the helper's write) no earlier than the model's time for
        // all its pieces, one after the other on one channel.
        let model = parse_spec(SPEC).unwrap().service_ns(Op::Read, 4096) as i64;
        assert!(r.get("request_ns") >= pieces * model, "virtual {virtual_time}: {:?}", r.fields);
        assert!(r.get("request_ns") >= r.get("pieces_ns"), "{:?}", r.fields);
    }
}

/// UML's ubd thread hands a request back with its write to the kernel, sometimes long
/// after the model's instant (its wake-up waits for the guest task on its CPU). Under
/// virtual time the clock stops at the instant until then: the request comes back at
/// the model's instant on the program's clock, and what the program ran meanwhile is off
/// the clock and counted as held. Here the helper burns 30 ms of its own CPU before its
/// write while the main thread runs on (no jump), on a model that gives the request
/// about 1 ms.
#[test]
fn a_helpers_request_holds_the_clock_at_its_instant_until_the_helper_hands_it_back() {
    let Some((dir, program)) = setup("vtime-helperlate") else { return };
    let (pieces, delay_ms) = (8, 30);
    let r = run(
        &program,
        &dir,
        "emu:nvme,lat=100us,channels=1",
        true,
        &["helperlate", &pieces.to_string(), &delay_ms.to_string()],
    );
    let l = &r.record["lateness"];
    let counts: Vec<i64> = l["counts"].as_array().unwrap().iter().map(|c| c.as_i64().unwrap()).collect();
    let edges: Vec<i64> = l["edges_ppm"].as_array().unwrap().iter().map(|c| c.as_i64().unwrap()).collect();
    let within = edges.iter().position(|&e| e == 20_000).expect("a 2% edge");
    let on_time: i64 = counts[..=within].iter().sum();
    assert_eq!(counts.iter().sum::<i64>(), 1, "one request: {:?}", r.record);
    assert_eq!(on_time, 1, "back at the model's instant, not 30 ms after it: {:?}", r.record);
    assert_eq!(l["capped"].as_i64(), Some(1), "{:?}", r.record);
    // The main thread ran (on the real clock, this run's base) while the helper burned
    // its 30 ms of CPU past the instant: at least that much is off the clock.
    assert!(l["capped_ns"].as_i64().unwrap() >= (delay_ms - 5) * 1_000_000, "{:?}", r.record);
}

/// UML makes a guest's new host process with a raw clone(2) from its stub, then waits for
/// it with `waitpid`: under the guest CPU clock its CPU time counts from that wait on
/// (before, a guest's CPU loop of 1 s moved the clock by 0.04 s).
#[test]
fn a_process_the_program_waits_for_counts_on_the_guest_cpu_clock() {
    let Some((dir, program)) = setup("vtime-cpuchild") else { return };
    let ms = 200;
    let r =
        run_env(&program, &dir, SPEC, true, &["cpuchild", &ms.to_string()], &[("SMARTCON_PRELOAD_GUEST_CLOCK", "cpu")]);
    // The parent waited in waitpid (its own CPU: next to nothing) while the child burned
    // 200 ms of its CPU: the clock moved by at least that.
    assert!(r.get("elapsed_ns") >= ms * 1_000_000, "{:?}", r.fields);
}

/// A signal handler that runs while the program's thread is inside the library serving
/// its pread must read the virtual clock, never the real one: UML's timer interrupt
/// (SIGALRM) taken in its kernel thread's own read of the image had the guest's
/// timekeeping read the real clock between two virtual readings, and the step back hung
/// the guest (docs/vm.md, "The CI hang"). Here the virtual clock is 100 s from the real
/// one and a 20 us real interval timer interrupts the preads; a reading below the one
/// made just before the pread is the real clock.
#[test]
fn a_signal_handler_inside_a_served_call_reads_the_virtual_clock() {
    let Some((dir, program)) = setup("vtime-handler") else { return };
    let r = run(&program, &dir, "emu:nvme,lat=20us,channels=1", true, &["handler", "3000"]);
    assert!(r.get("handler_reads") > 0, "the timer never interrupted: {:?}", r.fields);
    assert_eq!(r.get("handler_backwards"), 0, "a handler read the real clock: {:?}", r.fields);
}

//! Runs the real `smartcon host --quick` on a temporary SMARTCON_HOME and TMPDIR: the
//! `--json` output is a valid host model, `host.json` is stored where the simulation and
//! `smartcon model` read it (the model and ctx's profile in one file), `smartcon ctx` keeps
//! the model when it re-measures, and a bad `--out` is refused with exit 2 before any
//! measuring. No figure is asserted beyond what a model must hold: the machine is shared.

use std::path::Path;
use std::process::Command;

use smartcon_ctxcost::HostProfile;
use smartcon_engine::host::HostModel;

fn smartcon(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_smartcon"));
    c.env("SMARTCON_HOME", home).env("TMPDIR", home.join("tmp"));
    c
}

/// A scratch directory, removed when dropped (also when the test panics).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("smartcon-{name}-")).tempdir().unwrap()
}

fn two_cpus() -> bool {
    smartcon_ctxcost::affinity::allowed_cpus().map(|c| c.len() >= 2).unwrap_or(false)
}

#[test]
fn host_quick_json_is_a_valid_model_and_is_stored_beside_ctx() {
    if !two_cpus() {
        println!("skipped: fewer than two allowed CPUs, so no wake-up across cores to measure");
        return;
    }
    let home = scratch("host-test");
    std::fs::create_dir_all(home.path().join("tmp")).unwrap();

    let out = smartcon(home.path()).args(["host", "--quick", "--json"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("io_uring") {
        println!("skipped: io_uring is not available here: {stderr}");
        return;
    }
    assert!(out.status.success(), "host failed: {stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(lines[0]["type"], "host_model");
    assert_eq!(lines[1]["type"], "host_measurement");
    let model: HostModel = serde_json::from_value(lines[0].clone()).unwrap();
    model.validate().unwrap();
    assert_eq!(model.name, "measured");
    assert_eq!(model.sleep.len(), 5, "one point per requested length");
    assert!(model.filled.is_empty(), "a measured model fills nothing: {:?}", model.filled);
    assert!(model.block_cpu_ns > 0.0 && model.wakeup.p50_ns > 0.0, "{model:?}");
    assert!(model.switch_direct_ns.is_some(), "ctx's figures are taken: {model:?}");
    assert_eq!(lines[1]["block_path"].as_array().map(Vec::len), Some(2), "idle and beside spinners");
    // Each device time's blocking turns, alone and beside a cruncher, as the model pooled them.
    let turns = lines[1]["block_wait_turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2 * model.block_wait.len(), "{turns:?}");
    for t in turns {
        assert!(t["load"] == "alone" || t["load"] == "beside_cruncher", "{t}");
        assert_eq!(t["cpu_ns"].as_array().map(Vec::len), t["late"].as_array().map(Vec::len), "{t}");
        assert!(!t["late"].as_array().unwrap().is_empty(), "{t}");
    }
    // Progress on stderr, one line per step off a terminal.
    assert!(stderr.contains("sleep overshoot"), "{stderr}");
    // Each step's wall time, in the order they ran; the crunchers' share beside each of the
    // spinner's turns beside them (the model's share is every thread's).
    let steps = lines[1]["steps"].as_array().unwrap();
    assert!(steps.iter().any(|s| s["step"].as_str().unwrap().contains("context switch")), "{steps:?}");
    assert!(steps.iter().all(|s| s["ns"].as_u64().is_some()), "{steps:?}");
    let spinner = lines[1]["spin_shares"].as_array().unwrap();
    let crunchers = lines[1]["crunchers_shares"].as_array().unwrap();
    assert_eq!(spinner.len(), crunchers.len(), "{}", lines[1]);
    assert!(crunchers.iter().all(|c| c.as_f64().unwrap() >= 0.0), "{crunchers:?}");

    // Stored: the model for the simulation, ctx's profile for `smartcon model`, one file.
    let stored = home.path().join("host.json");
    assert_eq!(HostModel::load(&stored).unwrap(), model);
    let ctx = HostProfile::read(&stored).expect("ctx's profile beside the model");
    assert!(ctx.quick);
    // One format: the model's fields, ctx's profile nested under "ctx"; the blocking wait
    // at each device time of the curve, and the spinner's shares.
    let stored_json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&stored).unwrap()).unwrap();
    assert_eq!(stored_json["version"], 2);
    assert!(stored_json["ctx"]["direct"].is_array(), "{stored_json}");
    assert_eq!(model.block_wait.len(), 5, "{model:?}");
    assert!(model.block_wait.iter().all(|p| p.cpu_ns > 0.0 && p.late.mean_ns.is_some()), "{model:?}");
    // Each point's share of waits that slept, alone and beside a cruncher (a switch per I/O
    // at most, bar the odd other switch).
    for p in &model.block_wait {
        for v in [p.sleeps_per_wait, p.sleeps_per_wait_beside_cruncher] {
            assert!(v.is_some_and(|v| (0.0..1.5).contains(&v)), "{p:?}");
        }
    }
    assert!(model.spin_share_beside_cruncher > 0.0 && model.spin_share_alone <= 1.0, "{model:?}");
    // A timed sleep's own CPU and switches at each requested length, alone and beside a
    // cruncher (nineteenth session): what the simulation charges hybrid's sleeps.
    assert_eq!(model.sleep_cpu.len(), model.sleep.len(), "{model:?}");
    for (c, s) in model.sleep_cpu.iter().zip(&model.sleep) {
        assert_eq!(c.requested_ns, s.requested_ns);
        assert!(c.cpu_ns > 0.0 && c.cpu_beside_cruncher_ns.is_some_and(|v| v > 0.0), "{c:?}");
        for v in [Some(c.switches_per_sleep), c.switches_per_sleep_beside_cruncher] {
            assert!(v.is_some_and(|v| (0.0..1.5).contains(&v)), "{c:?}");
        }
    }
    // A spinner that sleeps now and then beside the crunchers, and hybrid's sleep and I/O
    // there at 10 and 80 us, the cold path against the sleep loop (twentieth session): what
    // the simulation gives smart's spinning and charges hybrid's sleeps beside a cruncher.
    let sleeping = model.spin_share_sleeping.expect("the sleeping spinner's share");
    assert!(sleeping.sleeps_per_s > 0.0 && (0.0..1.0).contains(&sleeping.share), "{sleeping:?}");
    assert_eq!(model.sleep_io.iter().map(|p| p.device_ns).collect::<Vec<_>>(), [10_000.0, 80_000.0]);
    for p in &model.sleep_io {
        assert!(p.cpu_beside_cruncher_ns > 0.0 && (0.0..1.5).contains(&p.switches_beside_cruncher), "{p:?}");
        let cold = p.cold_io_beside_cruncher_ns.expect("the sleep loop was measured beside the crunchers");
        let loop_cpu = model.sleep_cpu_at(p.device_ns, true).unwrap();
        assert!((cold - (p.cpu_beside_cruncher_ns - loop_cpu)).abs() < 1e-6, "{p:?}");
    }
    let turns = lines[1]["sleep_io_turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2, "{}", lines[1]);
    assert!(!lines[1]["sleeping_spin_shares"].as_array().unwrap().is_empty(), "{}", lines[1]);
    // Nothing left in the temporary directory (the comparison's file is removed).
    assert_eq!(std::fs::read_dir(home.path().join("tmp")).unwrap().count(), 0);

    // `smartcon ctx` re-measures into the store and keeps the model.
    let out = smartcon(home.path()).args(["ctx", "--quick", "--no-perf"]).output().unwrap();
    assert!(out.status.success(), "ctx failed: {}", String::from_utf8_lossy(&out.stderr));
    let kept = HostModel::load(&stored).expect("the model survives ctx");
    assert_eq!((kept.sleep.clone(), kept.block_path), (model.sleep.clone(), model.block_path));
    let ctx2 = HostProfile::read(&stored).unwrap();
    assert_ne!(ctx2.created_unix_s, 0);
    // (Within a part in a million: the stored JSON's decimals are parsed back.)
    let (kept_ns, new_ns) = (kept.switch_direct_ns.unwrap(), ctx2.ctx_direct_ns().unwrap());
    assert!((kept_ns - new_ns).abs() <= 1e-6 * new_ns.abs(), "switch costs follow the new profile: {kept_ns} {new_ns}");

    // A bad --out: refused before measuring, exit 2, one line naming it, the file intact.
    let existing = home.path().join("existing.json");
    std::fs::write(&existing, "keep me").unwrap();
    let out = smartcon(home.path()).args(["host", "--quick", "--out"]).arg(&existing).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("existing.json"), "{err}");
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");
    assert!(out.stdout.is_empty());
    let out =
        smartcon(home.path()).args(["host", "--quick", "--out"]).arg(home.path().join("no/such/dir/h.json")).output();
    assert_eq!(out.unwrap().status.code(), Some(2));
    let out = smartcon(home.path()).args(["host", "--quick", "--temp-dir"]).arg(&existing).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--temp-dir"));
}

#[test]
fn a_ctx_only_host_json_is_no_host_model() {
    let dir = scratch("host-ctxonly");
    let path = dir.path().join("host.json");
    std::fs::write(&path, r#"{"version":1,"direct":[{"procs":2,"us_per_switch":2.0,"us_per_switch_raw":3.0}]}"#)
        .unwrap();
    let e = HostModel::load(&path).unwrap_err().to_string();
    assert!(e.contains("smartcon host"), "{e}");
}
